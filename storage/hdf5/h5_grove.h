/* HDF5 objects as h5py shows them, for the h5grove routes (api/h5grove/):
 * links looked at without being followed (soft and external link targets),
 * committed datatypes, whole type descriptions (compound, enum, opaque,
 * array, vlen, references), a dataset's chunks and filters, attributes of
 * every type with their shapes, and reads of any dataset's hyperslab in
 * its stored bytes.  Nothing here includes hdf5.h: types are described in
 * plain structs, their numbers those of libhdf5 (and so h5py's).
 *
 * Safety: everything here asks libhdf5 only what the probe process
 * (h5_probe.c) asked it first of the same file version: h5g_probe_walk is
 * the walk it makes, through these same functions.  External links are
 * never followed (the file they name is never opened), and datasets whose
 * values live in other files (external storage, virtual) are refused.
 *
 * Memory: everything handed out is allocated from the caller's arena;
 * objects hold a libhdf5 handle until h5g_close. */
#ifndef CELLAR_H5_GROVE_H
#define CELLAR_H5_GROVE_H

#include <stddef.h>
#include <stdint.h>

#include "common/arena.h"
#include "common/error.h"
#include "storage/node.h"

/* libhdf5's type classes (H5T_class_t), as h5py's TypeID.get_class(). */
enum {
    GROVE_T_INTEGER = 0, GROVE_T_FLOAT = 1, GROVE_T_TIME = 2, GROVE_T_STRING = 3,
    GROVE_T_BITFIELD = 4, GROVE_T_OPAQUE = 5, GROVE_T_COMPOUND = 6, GROVE_T_REFERENCE = 7,
    GROVE_T_ENUM = 8, GROVE_T_VLEN = 9, GROVE_T_ARRAY = 10
};

#define GROVE_MAX_DIMS 32

typedef struct h5g_type h5g_type;

typedef struct h5g_member {
    const char *name;
    size_t offset;       /* in the stored element */
    size_t mem_offset;   /* in the element as h5g_read/h5g_attrs deliver it */
    h5g_type *type;      /* compound members */
    int64_t value;       /* enum members (as the base integer's bits) */
} h5g_member;

struct h5g_type {
    int cls;             /* GROVE_T_* */
    size_t size;         /* stored bytes of one element */
    size_t mem_size;     /* bytes of one element as delivered */
    int order;           /* integer, float, bitfield: 0 little-endian, 1 big-endian */
    int sign;            /* integer: 0 unsigned, 1 two's complement */
    int cset, strpad, vlen_str; /* string: 0 ASCII / 1 UTF-8, pad, variable length */
    const char *tag;     /* opaque */
    int ref_region;      /* reference: 1 for a region reference */
    size_t n_members;    /* compound, enum */
    h5g_member *members;
    h5g_type *base;      /* enum, vlen, array */
    int ndims;           /* array */
    uint64_t dims[GROVE_MAX_DIMS];
    int is_bool;         /* h5py's bool: an enum FALSE=0, TRUE=1 of one byte */
    int is_complex;      /* h5py's complex: compound r, i of one float type */
};

typedef enum h5g_kind {
    GROVE_GROUP = 1,
    GROVE_DATASET,
    GROVE_DATATYPE,
    GROVE_SOFT_LINK,
    GROVE_EXTERNAL_LINK
} h5g_kind;

/* How links are resolved (h5grove's resolve_links). */
typedef enum h5g_links { GROVE_LINKS_NONE = 0, GROVE_LINKS_ONLY_VALID, GROVE_LINKS_ALL } h5g_links;

typedef struct h5g_object {
    h5g_kind kind;
    const char *target_path;  /* soft and external links */
    const char *target_file;  /* external links */
    int64_t hid;              /* groups, datasets, datatypes: open; else -1 */
    /* where the file's heap ids are checked from before libhdf5 follows
     * them (storage/hdf5/h5_heap.h), borrowed; NULL: read unchecked */
    const struct h5_heap_file *heap;
    /* the other files the store version follows (storage/ext_targets.h) */
    const struct ext_targets *targets;
} h5g_object;

/* The object at path (absolute, or relative to the root; "/" the root) in
 * the file of root (an HDF5 store's root node), as h5py's
 * File.get(path, getlink=True) and then h5grove's link resolution see it.
 * CELLAR_ENOTFOUND when no link is at path (or, with GROVE_LINKS_ALL, a
 * soft link leads nowhere); CELLAR_EFORMAT for an external link that
 * GROVE_LINKS_ALL asks to follow (cellar never opens another file), a
 * user-defined link, an object of another kind or a failing read. */
int h5g_open(node *root, const char *path, h5g_links links, arena *a, h5g_object *out,
             cellar_error *err);
void h5g_close(h5g_object *o);

/* A group's link names in h5py's order (creation order where tracked and
 * indexed, else name order). */
int h5g_children(const h5g_object *g, arena *a, const char ***names, size_t *n,
                 cellar_error *err);

/* Every link below group g, recursively (libhdf5's H5Lvisit, as h5py's
 * links.visit: name order, each group once, soft and external links not
 * followed), as paths relative to g.  At most 10 million. */
int h5g_visit(const h5g_object *g, arena *a, const char ***names, size_t *n,
              cellar_error *err);

/* The type of a dataset or committed datatype. */
int h5g_type_of(const h5g_object *o, arena *a, h5g_type **out, cellar_error *err);

/* A dataset's dataspace: ndim -1 for a null dataspace (h5py.Empty), 0 for
 * a scalar. */
int h5g_shape(const h5g_object *o, int *ndim, int64_t *shape, cellar_error *err);

typedef struct h5g_filter {
    int id;
    const char *name;
} h5g_filter;

/* A dataset's chunk shape (*chunk_ndim 0 when not chunked) and filters. */
int h5g_layout(const h5g_object *o, arena *a, int *chunk_ndim, int64_t *chunks,
               h5g_filter **filters, size_t *n_filters, cellar_error *err);

typedef struct h5g_attr {
    const char *name;
    int ndim;                 /* -1 null dataspace, 0 scalar */
    int64_t shape[GROVE_MAX_DIMS];
    h5g_type *type;
    uint64_t count;           /* elements */
    void *values;             /* count * type->mem_size bytes (with_values), else NULL */
    int unreadable;           /* with_values: a type h5g_read cannot deliver */
} h5g_attr;

/* An object's attributes in h5py's order (creation order where tracked,
 * else name order), with their values when with_values.  Attributes over
 * the size bound (64 MiB) are unreadable. */
int h5g_attrs(const h5g_object *o, int with_values, arena *a, h5g_attr **out, size_t *n,
              cellar_error *err);

/* Reads a hyperslab of dataset o (start, step >= 1, count per dimension;
 * ndim 0 for a scalar) into *out (count product * type->mem_size bytes,
 * from a).  Values are delivered as stored (byte order included), but a
 * variable-length string is a char * (NUL-terminated, in a; NULL for a
 * null string) in mem_size bytes, compound members at mem_offset.
 * CELLAR_EFORMAT for types it cannot deliver (vlen sequences, time,
 * arrays of vlen strings).  The read is bounded by max_bytes first
 * (CELLAR_ETOOBIG). */
int h5g_read(const h5g_object *o, const h5g_type *t, int ndim, const int64_t *start,
             const int64_t *step, const int64_t *count, uint64_t max_bytes, arena *a,
             void **out, cellar_error *err);

/* Whether h5g_read can deliver type t. */
int h5g_type_readable(const h5g_type *t);

/* What the probe process adds to its walk of an HDF5 file, so that every
 * call the h5grove routes make was made there first: every link's value
 * (soft and external targets), committed datatypes and their attributes,
 * every attribute's value through h5g_attrs, and the values of datasets
 * whose types the node backend does not read (compound, opaque, enum
 * arrays, references), through h5g_read, bounded by max_bytes in all.
 * Counts broken objects in *broken.  0, or CELLAR_ENOMEM. */
int h5g_probe_walk(node *root, uint64_t max_objects, uint64_t max_bytes, uint64_t *broken,
                   cellar_error *err);

#endif
