/* For storage/hdf5/ only: what h5.c shares with the other libhdf5 modules
 * of this folder (h5_grove.c).  Includes hdf5.h, so nothing outside
 * storage/hdf5/ may include it. */
#ifndef CELLAR_H5_IMPL_H
#define CELLAR_H5_IMPL_H

#include <hdf5.h>

#include "common/arena.h"
#include "common/error.h"
#include "storage/node.h"

/* Switches libhdf5's automatic error printing off in this thread (once). */
void h5_quiet(void);

/* cellar_fail plus the most specific message on this thread's HDF5 error
 * stack; call it right after the failing HDF5 call. */
int h5_fail(cellar_error *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

struct ext_targets;

/* The link (and dataset) access properties every lookup uses: libhdf5 is
 * stopped before it opens the file of an external link it meets, unless
 * h5_object_open was given a table that followed it. */
hid_t h5_link_access(void);

/* Opens the object at name from loc as a node does (a dataset with
 * H5Dopen2, so that its other files are found where the table resolved
 * them), following the external links targets followed; -1 on failure
 * (h5_elink_refused_take says whether an external link stopped it). */
hid_t h5_object_open(hid_t loc, const char *name, const struct ext_targets *targets);

/* 0 when the external link name at loc (shown names it) leads to a file
 * targets followed, else CELLAR_EFORMAT naming the link and why. */
int h5_external_link_followed(hid_t loc, const char *name, const char *shown,
                              const struct ext_targets *targets, cellar_error *err);

/* 0 when dataset dset (path names it) keeps its values in its own file,
 * or in files targets followed (external raw storage; virtual sources
 * that name no files themselves, or plain datasets of its own file),
 * else CELLAR_EFORMAT naming it and why. */
int h5_values_followed(hid_t dset, const char *path, const struct ext_targets *targets,
                       cellar_error *err);

/* Lookups on this thread follow the external links targets followed,
 * until called again with NULL. */
void h5_following_set(const struct ext_targets *targets);

/* Whether obj (opened from root's tree) lies in another file than root's. */
int h5_object_in_other_file(hid_t obj, const node *root);

/* The table of the tree n belongs to (NULL: it follows no other file). */
const struct ext_targets *h5_node_targets(const node *n);

/* Whether a lookup on this thread was stopped at an external link since
 * the last call (and clears the mark). */
int h5_elink_refused_take(void);

/* The open group or dataset of an HDF5 node (borrowed), or
 * H5I_INVALID_HID for a node of another backend. */
hid_t h5_node_object(const node *n);

/* Where heap ids of n's file are checked from (storage/hdf5/h5_heap.h),
 * borrowed from its root; NULL for a node of another backend. */
const struct h5_heap_file *h5_node_heap(const node *n);

/* The link names of group obj (path names it in errors), in creation
 * order where tracked and indexed, else name order (as h5py lists them). */
int h5_list_links(hid_t obj, const char *path, arena *a, const char ***names, size_t *count,
                  cellar_error *err);

#endif
