/* The zarr view of an HDF5 store: every group of an .h5ad, .h5mu or .h5td
 * file as a zarr v2 group, every dataset as a zarr v2 array, answered key
 * by key as if the store were a .zarr directory, so zarr-python, zarrita.js,
 * anndata, mudata, treedata and Vitessce read HDF5 stores over HTTP
 * without a conversion step.
 *
 * The view is a zarr key source (storage/zarr/zarr_source.h) whose keys are
 * made from the HDF5 node tree on demand, and the zarr backend opens it
 * like any other source: the raw zarr route (api/zarr/raw.c) then answers
 * its keys, lists its directories and builds its consolidated .zmetadata
 * exactly as for a zip store.  What the keys hold (docs/zarr-view.md has the
 * whole mapping):
 *
 *   - groups: .zgroup and .zattrs (every attribute, as storage/node.h maps
 *     them to JSON: what anndata, mudata and treedata write in zarr);
 *   - datasets: .zarray, .zattrs and one key per chunk ("i.j", "0" for 0-d):
 *     HDF5 chunks as they are stored (no filter, or deflate as the zlib
 *     compressor, sent from the file), HDF5 chunks whose pipeline cellar
 *     decodes (shuffle, Fletcher-32, LZF) decoded and sent uncompressed,
 *     contiguous datasets as row blocks of about 1 MiB (byte ranges of the
 *     file), other layouts and filters read through the backend; variable
 *     length strings as object arrays with the vlen-utf8 codec, fixed
 *     length ones as |S; a chunk HDF5 never wrote is a missing key (the
 *     client reads the fill value);
 *   - TreeData's obst/vart JSON string as treedata's columnar zarr layout
 *     (nodes, edges, node_attrs/, edge_attrs/);
 *   - with h5zarr_options.csc, every CSR matrix as a CSC matrix whose
 *     arrays come from its column index (storage/anndata/column_index.h).
 *
 * Datasets zarr cannot express (compound, reference, opaque, bitfield,
 * array and other vlen types) are left out of listings and their keys are
 * missing; h5zarr_explain_missing says why. */
#ifndef CELLAR_H5ZARR_H
#define CELLAR_H5ZARR_H

#include "common/error.h"
#include "storage/anndata/column_index.h"
#include "storage/node.h"
#include "storage/registry.h"

typedef struct h5zarr_options {
    int csc;                     /* CSR matrices as CSC (the zarr-csc prefix) */
    column_index_options index;  /* how the CSC view gets column indexes */
    double index_wait_seconds;   /* how long a CSC chunk waits for its index */
    uint64_t max_chunk_bytes;    /* a chunk made larger is refused (CELLAR_ETOOBIG); 0: 256 MiB */
} h5zarr_options;

/* The zarr tree of the view of HDF5 store version s (opened over the view's
 * key source by zarr_open_source), made once per version for each value of
 * o->csc and shared (a derived structure of s; the other options are taken
 * from the first caller).  *root is borrowed: valid while the caller holds
 * its reference on s.  Errors: CELLAR_EINVAL when s is not an HDF5 store,
 * CELLAR_EFORMAT, CELLAR_ENOMEM. */
int h5zarr_view(store *s, const h5zarr_options *o, node **root, cellar_error *err);

/* Whether root (any zarr tree) is the tree of an HDF5 view. */
int h5zarr_is_view(node *root);

/* For a key the view has not: CELLAR_ENOTFOUND with a detail saying why
 * when the key lies in or under a dataset the view leaves out (naming its
 * HDF5 type), else 0. */
int h5zarr_explain_missing(node *root, const char *key, cellar_error *err);

#endif
