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

/* The link access properties every lookup uses: libhdf5 is stopped before
 * it opens the file of any external link it meets. */
hid_t h5_link_access(void);

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
