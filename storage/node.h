/* The backend-neutral tree of a store: groups and arrays, their attributes,
 * shapes and types, and reads of a selection.
 *
 * Two backends implement it: storage/hdf5/ (libhdf5) and storage/zarr/.
 * Everything above (storage/anndata/, storage/trees/, api/) sees only this.
 *
 * Ownership: a store version owns its whole node tree.  Every node pointer
 * handed out here is borrowed and stays valid until the tree's root is
 * passed to node_tree_free (which the registry does when the last reference
 * to that store version goes).  Nodes are immutable once created except for
 * their child cache, which is guarded internally, so many threads may use
 * one tree at once. */
#ifndef CELLAR_NODE_H
#define CELLAR_NODE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "common/arena.h"
#include "common/error.h"
#include "storage/dtype.h"
#include "storage/selection.h"

#define NODE_MAX_DIMS 8

typedef struct node node;

typedef enum node_type { NODE_GROUP = 1, NODE_ARRAY = 2 } node_type;

typedef struct node_info {
    node_type type;
    /* Arrays only: ndim is 0 for a scalar and -1 for an empty (HDF5 NULL
     * dataspace, e.g. anndata's `null` element) array. */
    int ndim;
    int64_t shape[NODE_MAX_DIMS];
    dtype_kind dtype;       /* DT_NONE for groups and unreadable types */
    int stored_big_endian;  /* the bytes on disk are big-endian */
    size_t string_size;     /* fixed-length strings: bytes per item; 0 = variable */
    /* Arrays of records (HDF5 compound types, as anndata before 0.7 wrote
     * obs, var, obsm and varm): how many fields each record has, each
     * field readable as an array of its own (see node_child); dtype is
     * then DT_NONE.  0 for every other node. */
    int n_fields;
} node_info;

/* Type, shape, dtype. Never NULL. */
const node_info *node_get_info(const node *n);

/* Attributes as one JSON object (borrowed, never NULL, {} when none).
 * Backends map their attributes to JSON: strings -> strings, numeric
 * scalars -> numbers, numeric/string 1-D arrays -> arrays, HDF5 bool enums
 * -> true/false, an empty array of any type -> [], an HDF5 object reference
 * -> the referenced object's absolute path as a string. */
const json_t *node_attrs(const node *n);

/* Convenience: the string attribute `name`, or NULL when absent or not a
 * string. Borrowed. */
const char *node_attr_string(const node *n, const char *name);

/* Absolute path inside the store, "/" for the root, e.g. "/obs/cell_type". */
const char *node_path(const node *n);

/* The name of the node within its parent ("" for the root). */
const char *node_name(const node *n);

/* Looks up a direct child of a group, or a field of an array of records
 * (n_fields > 0): an array of the records' shape, followed by the field's
 * own dimensions when the field is itself an array (a compound member
 * float32[50] of a 1-D dataset is a 2-D field).  *out is borrowed (see above).
 * CELLAR_ENOTFOUND when there is no such child (detail names it),
 * CELLAR_EFORMAT when the child exists but cannot be opened. */
int node_child(node *n, const char *name, node **out, cellar_error *err);

/* Like node_child but returns NULL without an error when absent or failing. */
node *node_child_opt(node *n, const char *name);

/* Resolves a '/'-separated relative path ("obs/cell_type") or an absolute
 * one ("/obs/cell_type") from n. */
int node_resolve(node *n, const char *path, node **out, cellar_error *err);

/* Names of a group's children, in the backend's natural order (HDF5 creation
 * order where tracked, else name order), or an array of records' fields in
 * their stored order.  The array is allocated from a
 * (callers may reorder it); the names are borrowed from the node, which
 * lists its children once and keeps the listing (valid until the tree is
 * freed). */
int node_children(node *n, arena *a, const char ***names, size_t *count, cellar_error *err);

/* A value derived from node n alone (e.g. the parsed data frame of a group,
 * the categories of a categorical column), cached on n: the first caller
 * for `key` (compared by address: pass the address of a static object)
 * builds it while later callers wait; then everyone shares it, read-only,
 * until the tree is freed, which calls free_fn(value).  A failed build is
 * not kept.  build must not call node_memo on n itself. */
typedef int (*node_memo_build_fn)(node *n, void *ctx, void **value, cellar_error *err);

int node_memo(node *n, const void *key, node_memo_build_fn build, void *ctx,
              void (*free_fn)(void *value), void **value, cellar_error *err);

/* Reads a selection of a numeric or bool array into out, C order over the
 * selected positions, native byte order, one byte (0/1) per bool.  sel has
 * one dim_sel per dimension (NULL for a 0-d array).  out_bytes must equal
 * product(counts) * dtype_size(dtype).  Reads only what the selection
 * touches. */
int node_read(node *n, const dim_sel *sel, void *out, size_t out_bytes, cellar_error *err);

/* When every value of numeric array n is stored as one run of bytes of a
 * file, uncompressed and exactly as node_read returns the whole array
 * (native byte order; not bool, whose stored bytes may be other than 0/1):
 * a new descriptor of that file in *fd (the caller closes it), the run's
 * offset and length, and 0.  Else 1 (read it with node_read).  Lets a
 * whole array be answered from the file itself (sendfile). */
int node_file_extent(node *n, int *fd, uint64_t *offset, uint64_t *length);

/* Receives the next piece of a streamed string (len > 0); returns 0 or a
 * cellar_code, which stops the stream and is returned as is. */
typedef int (*node_string_sink)(void *ctx, const char *data, size_t len, cellar_error *err);

/* Streams the one variable-length string of n (a 0-d string array, or 1-D
 * of one element) to sink in pieces of at most `piece` bytes (> 0), without
 * holding it whole (TreeData's JSON trees: ~100 MB for 1M nodes).  The
 * bytes are as stored (not UTF-8 checked).  0 when every byte went to the
 * sink.  CELLAR_EINVAL when the backend cannot stream this array: nothing
 * was given to the sink, read it with node_read_strings.  After the first
 * piece: what the sink returned, CELLAR_EIO, or CELLAR_EFORMAT when the
 * stored string ends early. */
int node_stream_string(node *n, size_t piece, node_string_sink sink, void *ctx,
                       cellar_error *err);

/* Reads a selection of a string array as NUL-terminated UTF-8 strings into
 * out[product(counts)], each allocated from a.  Fixed-length strings lose
 * their NUL padding. */
int node_read_strings(node *n, const dim_sel *sel, arena *a, char **out, cellar_error *err);

/* Frees a whole tree from its root (the registry calls this). */
void node_tree_free(node *root);

/* How long the oldest call now inside a backend that serializes behind
 * one process-wide lock (libhdf5) has been running, in seconds; 0 when
 * none is.  A call stuck in the library holds every later one: /readyz
 * turns unready when this passes the request deadline. */
double node_locked_backend_busy_seconds(void);

#endif
