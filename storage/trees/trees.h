/* The trees of a TreeData `obst` or `vart`, loaded once per store version.
 *
 * Four layouts, one result (a tree_forest, storage/trees/tree_index.h):
 * - `.h5td` and pre-0.3 zarr: `obst` is a string scalar holding the JSON of
 *   all trees, fed to the streaming reader of storage/trees/tree_json.h;
 * - zarr written by treedata >= 0.3: `obst` is a group with one subgroup per
 *   tree holding `nodes` (1-D strings), `edges` ((n, 2) strings) and the
 *   optional attribute columns `node_attrs/` and `edge_attrs/`, fed to the
 *   builder's column API: integer, float and bool arrays as native columns
 *   (any width, widened to int64 / float64; uint64 values past INT64_MAX as
 *   JSON text), string arrays as one JSON text per element ("" = absent,
 *   "null" = an explicit null).
 * - treedata 0.0.x: `raw.treedata`, one JSON string holding
 *   {"obst": {trees}, "vart": {trees}, "label", "allow_overlap"}, whose
 *   member (when there) is read as the JSON of a `.h5td`, over `obst`;
 * - no `obst` at all: an empty forest.
 *
 * The forest is built by the first request that needs it and cached in the
 * store version (store_derived under "trees:<group path>:<axis>"), so
 * concurrent first requests wait for one build; it is immutable afterwards
 * and freed with the version.  A tree that cannot be read (bad JSON, a
 * cycle, a node with two parents, an edge to an unknown node) is cached as
 * that failure too, so a broken 100 MB string is parsed once per version,
 * not once per request. */
#ifndef CELLAR_TREES_H
#define CELLAR_TREES_H

#include <stddef.h>
#include <stdint.h>

#include "common/arena.h"
#include "common/error.h"
#include "storage/anndata/anndata.h"
#include "storage/node.h"
#include "storage/trees/tree_index.h"

struct store;

/* Per-tree sizes measured once at load, to bound answers before writing. */
typedef struct tree_sizes {
    uint64_t id_bytes;    /* sum of the node ids' lengths */
    uint64_t attr_bytes;  /* sum of the node attribute texts' lengths */
    uint64_t edge_bytes;  /* sum of the edge attribute texts' lengths */
} tree_sizes;

/* A loaded obst / vart: the forest and the sizes of its trees (by position,
 * as tree_forest_tree). Borrowed from the store version's cache. */
typedef struct trees_loaded {
    tree_forest *forest;
    tree_sizes *sizes;
    size_t bytes;         /* memory held, index arenas included */
    /* 1 when the JSON string was parsed while streamed from the HDF5 file
     * (storage/hdf5/h5_stream.h), 0 when it was read whole through the backend
     * (zarr, columnar trees, or the fallback for layouts not streamed). */
    int streamed;
} trees_loaded;

/* Reads the forest of `axis` ("obst" or "vart") of the AnnData-shaped group
 * `group` without caching; *out is malloc'd, free it with trees_free.  With
 * `stream` set, a JSON string of trees is parsed while the backend streams
 * it (node_stream_string) where it can, instead of being read whole.
 * Errors: CELLAR_EFORMAT naming the element, tree and node for trees that
 * cannot be read; CELLAR_EINVAL for another axis; CELLAR_ENOMEM;
 * CELLAR_EIO. */
int trees_load(node *group, const char *axis, int stream, trees_loaded **out,
               cellar_error *err);

/* Frees what trees_load returned. NULL is fine. */
void trees_free(trees_loaded *t);

/* The forest of `axis` of `group` in store version s, built once and shared
 * (see above).  *out is borrowed from the version, valid while the caller
 * holds its reference (s must not be NULL; tests without a store use
 * trees_load).  Errors as trees_load; a cached failure (CELLAR_EFORMAT,
 * CELLAR_ETOOBIG) is returned again with the same code and detail. */
int trees_get(struct store *s, node *group, const char *axis, const trees_loaded **out,
              cellar_error *err);

/* TreeData's label, alignment and allow_overlap (treedata_open), with what
 * treedata 0.0.x's `raw.treedata` says over them, as treedata's reader
 * (_parse_legacy) takes them: its label (NULL when it has none) and
 * allow_overlap.  raw.treedata is parsed once per store version in s.
 * Strings are borrowed from the version or from a.  Errors: those of
 * treedata_open; CELLAR_EFORMAT when raw.treedata is not a JSON object
 * (remembered for the version), CELLAR_ENOMEM. */
int trees_treedata_info(struct store *s, node *group, arena *a, treedata_info *out,
                        cellar_error *err);

#endif
