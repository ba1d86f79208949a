/* Shared by the files of storage/h5zarr/ only: the view's nodes, arrays and
 * chunks. */
#ifndef CELLAR_H5ZARR_IMPL_H
#define CELLAR_H5ZARR_IMPL_H

#include <jansson.h>
#include <stdint.h>
#include <time.h>

#include "common/buf.h"
#include "storage/h5zarr/h5zarr.h"
#include "storage/trees/trees.h"
#include "storage/zarr/zarr_source.h"

#define H5ZARR_DEFAULT_MAX_CHUNK ((uint64_t)256 << 20)

/* The key source of one view. */
typedef struct h5zarr_src {
    zarr_source src;
    store *s;          /* borrowed: the view is a derived structure of s */
    node *h5root;      /* the AnnData root as anndata reads it (storage/anndata/legacy.h) */
    node *mods;        /* a MuData store's mod group, whose children are read so too */
    h5zarr_options opt;
    struct timespec mtime;
} h5zarr_src;

/* How the chunks of an array are made. */
typedef enum vhow {
    HOW_STORED = 1, /* HDF5 chunks as stored (h5_zarr_chunk) */
    HOW_DECODED,    /* HDF5 chunks decoded by cellar (h5_zarr_chunk) */
    HOW_CONTIG,     /* row blocks of a contiguous dataset, byte ranges of the file */
    HOW_READ,       /* values read with node_read, native byte order */
    HOW_VLEN,       /* variable-length strings (node_read_strings), vlen-utf8 */
    HOW_FIXED,      /* fixed-length strings (node_read_strings), |S */
    HOW_UNICODE,    /* strings as fixed-width text (node_read_strings), <U */
    HOW_RECORDS,    /* an array of records (an HDF5 compound) as a structured dtype */
    HOW_EMPTY,      /* an HDF5 NULL dataspace: a 0-d array without chunks */
    HOW_TREE,       /* arrays of the trees overlay (h5zarr_trees.c) */
    HOW_CSC,        /* arrays of the CSC overlay (h5zarr_csc.c) */
} vhow;

/* A field of a structured dtype (HOW_RECORDS): its place in a packed
 * record and how its values are read from its field node. */
typedef enum vfield_how { VF_NUMBER = 1, VF_BYTES, VF_TEXT } vfield_how;

typedef struct vfield {
    node *field;       /* the field as an array of its own (borrowed from the tree) */
    vfield_how how;
    size_t offset, size; /* bytes in the record; VF_TEXT: 4 per character */
} vfield;

/* One array of the view: what its .zarray says and how its chunks are made.
 * Immutable once made. */
typedef struct varray {
    int ndim;
    int64_t shape[NODE_MAX_DIMS], chunk[NODE_MAX_DIMS];
    char dtype[24];    /* numpy typestr: "<f4", ">i2", "|b1", "|S12", "|O" */
    size_t item;       /* bytes per item in a chunk (0 for |O) */
    int zlib_level;    /* >= 0: the zlib compressor at this level */
    int vlen;          /* |O with the vlen-utf8 filter */
    vhow how;
    uint64_t offset;   /* HOW_CONTIG: the dataset's first byte in the file */
    int fd;            /* HOW_CONTIG: the file (borrowed) */
    unsigned char fill[8]; /* HOW_READ: the fill value, native order */
    json_t *fill_value;    /* owned */
    json_t *dtype_json;    /* owned: HOW_RECORDS' list of fields, which .zarray gives as dtype */
    vfield *fields;        /* owned: HOW_RECORDS' fields */
    size_t n_fields;
} varray;

/* A chunk's bytes: a missing key, a byte range of a file or bytes. */
typedef struct vchunk {
    int absent;        /* no such key: the client reads the fill value */
    int fd;            /* >= 0: [offset, offset + size) of fd (borrowed) */
    uint64_t offset, size;
    buf bytes;         /* fd < 0: the bytes */
} vchunk;

/* What a path of the view names. */
typedef enum vkind { VK_NONE = 0, VK_GROUP, VK_ARRAY } vkind;

typedef enum vsrc {
    VS_HDF5 = 1,   /* an HDF5 group or dataset */
    VS_TREES,      /* obst/vart: the trees of a JSON string */
    VS_TREE,       /* one tree */
    VS_TREE_IDS,   /* its nodes or edges array */
    VS_TREE_ATTRS, /* its node_attrs/ or edge_attrs/ group */
    VS_TREE_COLUMN,/* one attribute column */
    VS_CSC,        /* a CSR matrix shown as CSC */
    VS_CSC_ARRAY,  /* its data, indices or indptr */
} vsrc;

struct h5zarr_forest;

typedef struct vnode {
    vkind kind;
    vsrc src;
    node *h5;        /* the HDF5 node (for overlays: the obst dataset, the CSR group) */
    const char *why; /* VK_NONE for a dataset left out: why (in the node's memory or static) */
    const struct h5zarr_forest *forest; /* trees overlay */
    size_t tree;     /* VS_TREE and below: which tree */
    int edges;       /* VS_TREE_IDS / ATTRS / COLUMN: 1 for the edges side */
    size_t column;   /* VS_TREE_COLUMN */
    int part;        /* VS_CSC_ARRAY: 0 data, 1 indices, 2 indptr */
    const varray *arr; /* VK_ARRAY: the array (borrowed from a cache) */
} vnode;

/* ---- arrays of HDF5 datasets (h5zarr_array.c) ---- */

/* The array of HDF5 dataset n, made once and cached on n (node_memo).
 * CELLAR_ENOTFOUND when zarr cannot express it (*why says why, static or in
 * n's memory), CELLAR_ENOMEM. */
int h5za_describe(node *n, const varray **out, const char **why, cellar_error *err);

/* The chunk at grid coordinates cidx (inside the grid) of array a of HDF5
 * dataset n.  CELLAR_EFORMAT for a chunk that cannot be read, CELLAR_ETOOBIG
 * over max_bytes, CELLAR_EIO, CELLAR_ENOMEM. */
int h5za_chunk(node *n, const varray *a, const int64_t *cidx, uint64_t max_bytes, vchunk *out,
               cellar_error *err);

/* pread of exactly n bytes at off; CELLAR_EIO, or CELLAR_EFORMAT when the
 * file ends first (what names the element). */
int h5za_pread(int fd, void *to, size_t n, uint64_t off, const char *what, cellar_error *err);

/* Chunk shape of about `target` bytes of items of `item` bytes: whole
 * trailing dimensions, a block of the first one that does not fit, 1 for
 * the others (so a chunk of a C-order array is one run of it). */
void h5za_block_grid(int ndim, const int64_t *shape, size_t item, size_t target, int64_t *chunk);

/* The .zarray document of a. New reference, NULL when out of memory. */
json_t *h5za_zarray(const varray *a);

/* Frees what a varray owns (not a itself). */
void h5za_varray_clear(varray *a);

/* The vlen-utf8 encoding of n strings (lengths len[i], NULL entries empty)
 * appended to out.  CELLAR_ETOOBIG when over max_bytes. */
int h5za_vlen_encode(const char *const *s, const size_t *len, size_t n, uint64_t max_bytes, buf *out,
                     cellar_error *err);

/* ---- the trees overlay (h5zarr_trees.c) ---- */

/* The trees of dataset n (`obst` or `vart`) when the view shows it as
 * treedata's columnar layout: 1 with *out set (borrowed from the store
 * version), 0 when n is no such element or its trees cannot be read (it
 * is then shown as the string it is), or a cellar_code (out of memory). */
int h5zt_forest(h5zarr_src *v, node *n, const struct h5zarr_forest **out, cellar_error *err);

/* Children, lookups, attributes, arrays and chunks of the overlay's nodes. */
int h5zt_list(const vnode *v, arena *a, const char ***names, size_t *count, cellar_error *err);
int h5zt_child(const vnode *parent, const char *name, vnode *out);
json_t *h5zt_attrs(const vnode *v);
int h5zt_chunk(const vnode *v, const int64_t *cidx, uint64_t max_bytes, vchunk *out,
               cellar_error *err);

/* For the rest of a key below parent (a node of the overlay, '/' kept) that
 * names, or lies under, a tree or attribute key the view left out because
 * zarr does not take its name: that key (borrowed from the forest), *what
 * saying which ("tree", "node attribute", "edge attribute"); else NULL. */
const char *h5zt_left_out(const vnode *parent, const char *rest, const char **what);

/* ---- the CSC overlay (h5zarr_csc.c) ---- */

/* Whether the HDF5 group n is shown as a CSC matrix (a CSR matrix, in a
 * view with opt.csc): 1 with *out set, else 0. */
int h5zc_group(h5zarr_src *v, node *n, vnode *out);
int h5zc_child(h5zarr_src *v, const vnode *parent, const char *name, vnode *out);
json_t *h5zc_attrs(const vnode *v);
int h5zc_chunk(h5zarr_src *v, const vnode *n, const int64_t *cidx, vchunk *out, cellar_error *err);

#endif
