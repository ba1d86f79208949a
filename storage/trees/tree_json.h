/* Reading TreeData trees (`obst` / `vart`) into tree indexes.
 *
 * Two inputs, one builder:
 *
 * 1. The JSON text of a `.h5td` file (and of pre-0.3 zarr files):
 *      {tree_key: {"edges": {src: {dst: {attr...}}}, "nodes": {id: {attr...}}}}
 *    treedata writes "edges" before "nodes"; either order is accepted, and
 *    either member may be missing (read as empty); other members of a tree
 *    object are skipped.  The reader is a streaming yajl parser that feeds a
 *    tree_builder as it goes: no DOM, so a 1M-node tree (~86 MB of JSON)
 *    costs the index plus a small constant.  Python's json.dumps writes
 *    NaN, Infinity and -Infinity for non-finite floats; they are read as
 *    null (the attributes served are strict JSON).
 *
 * 2. The columnar zarr layout (treedata >= 0.3): per tree a `nodes` string
 *    array, an (n, 2) `edges` string array and optional `node_attrs/` and
 *    `edge_attrs/` columns.  The zarr reader hands those arrays to
 *    tree_builder_add_nodes / tree_builder_add_edges (or row by row to
 *    tree_builder_add_node / tree_builder_add_edge).
 *
 * Attributes are kept per node and per edge as compact JSON object texts in
 * the index's arena (key order as read; numbers keep their text, e.g. 1.0).
 * An attribute that is absent is not a key; one that is explicitly null is
 * present with the value null.
 *
 * Errors are CELLAR_EFORMAT (422: the file is not a readable TreeData tree)
 * with a detail naming the tree key and the node, CELLAR_ENOMEM, and
 * CELLAR_ETOOBIG past the limits below. */
#ifndef CELLAR_TREE_JSON_H
#define CELLAR_TREE_JSON_H

#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "storage/trees/tree_index.h"

/* Nesting allowed inside one attribute value ({"a": [[1]]} nests 2). */
#define TREE_JSON_MAX_ATTR_DEPTH 64
/* Longest string token (key or value), in bytes of JSON text. */
#define TREE_JSON_MAX_STRING (16u << 20)
/* Longest bare token (number, true, false, null, NaN, ...). */
#define TREE_JSON_MAX_BARE 256

/* ---- builder: one tree ---------------------------------------------------- */

typedef struct tree_builder tree_builder;

/* A new empty builder, or NULL when out of memory.  `what` (copied; may be
 * NULL) names the tree in error details, e.g. "obst/t1".  Give the builder
 * to tree_builder_finish or tree_builder_free. */
tree_builder *tree_builder_new(const char *what);

/* Frees a builder that will not be finished. NULL is fine. */
void tree_builder_free(tree_builder *b);

/* Declares node `id` (NUL-terminated) with attributes `attrs_json`: a JSON
 * object text, or NULL for none.  Nodes are numbered in declaration order.
 * The attributes are parsed (NaN/Infinity read as null), checked and stored
 * compact.  Errors: CELLAR_EFORMAT for a node declared twice, attributes
 * that are not a JSON object or nest deeper than TREE_JSON_MAX_ATTR_DEPTH. */
int tree_builder_add_node(tree_builder *b, const char *id, const char *attrs_json,
                          cellar_error *err);

/* Adds the edge src -> dst with attributes `attrs_json` (a JSON object text
 * or NULL).  Edges may come before their nodes are declared (the .h5td JSON
 * lists edges first); every node an edge names must be declared by the time
 * the tree is finished.  A numeric top-level `length` attribute becomes the
 * branch length.  Errors as for tree_builder_add_node. */
int tree_builder_add_edge(tree_builder *b, const char *src, const char *dst,
                          const char *attrs_json, cellar_error *err);

/* One attribute column of the zarr layout, in `nodes` or `edges` order. */
typedef enum tree_column_kind {
    TREE_COLUMN_INT64 = 1,   /* values: const int64_t[n] */
    TREE_COLUMN_FLOAT64,     /* values: const double[n]; NaN/inf are written as null */
    TREE_COLUMN_BOOL,        /* values: const uint8_t[n], 0 false, else true */
    TREE_COLUMN_JSON         /* values: const char *const[n]: one JSON text each;
                                "" (or NULL) = attribute absent, "null" = null */
} tree_column_kind;

typedef struct tree_attr_column {
    const char *name;
    tree_column_kind kind;
    const void *values;
} tree_attr_column;

/* Declares n nodes ids[0..n) with the attribute columns cols[0..n_cols)
 * (each of n values; keys in column order).  As tree_builder_add_node,
 * row by row; an error names the node and the column. */
int tree_builder_add_nodes(tree_builder *b, int64_t n, const char *const *ids, size_t n_cols,
                           const tree_attr_column *cols, cellar_error *err);

/* Adds n edges src[i] -> dst[i] (the two columns of zarr's (n, 2) `edges`)
 * with the attribute columns cols[0..n_cols). */
int tree_builder_add_edges(tree_builder *b, int64_t n, const char *const *src,
                           const char *const *dst, size_t n_cols,
                           const tree_attr_column *cols, cellar_error *err);

/* Builds the index and frees the builder (in every case; b must not be used
 * again).  Errors: CELLAR_EFORMAT for a node used by an edge but never
 * declared, a node with two parents, a cycle (each naming the node);
 * CELLAR_ENOMEM. */
int tree_builder_finish(tree_builder *b, tree_index **out, cellar_error *err);

/* ---- JSON: all trees of one obst / vart ---------------------------------- */

/* Parses the whole JSON text json[0..len) into a new forest in *out (the
 * caller frees it with tree_forest_free).  Trees keep file order. */
int tree_forest_from_json(const char *json, size_t len, tree_forest **out, cellar_error *err);

/* The same, fed in pieces (e.g. straight from HDF5 reads). */
typedef struct tree_json_reader tree_json_reader;

/* NULL when out of memory. */
tree_json_reader *tree_json_reader_new(void);

/* Parses the next piece; after an error, every later call fails too. */
int tree_json_reader_feed(tree_json_reader *r, const char *data, size_t len,
                          cellar_error *err);

/* Ends the input: *out gets the forest (caller frees it). CELLAR_EFORMAT
 * for truncated JSON. The reader must still be freed. */
int tree_json_reader_finish(tree_json_reader *r, tree_forest **out, cellar_error *err);

/* NULL is fine. */
void tree_json_reader_free(tree_json_reader *r);

/* treedata 0.0.x kept its trees and settings in one JSON string,
 * `raw.treedata`: {"obst": {trees}, "vart": {trees}, "label": ...,
 * "allow_overlap": ...}.  A reader of it gives the trees of member `axis`
 * ("obst" or "vart"; NULL for none) as the plain reader gives a whole
 * document's; every other member is skipped (without being built), but
 * the scalars label and allow_overlap are kept.  A missing member is an
 * empty forest.  NULL when out of memory. */
tree_json_reader *tree_json_reader_new_legacy(const char *axis);

typedef struct tree_json_legacy {
    int has_trees;          /* the axis member was there */
    int has_label;          /* a label member was there (string or null) */
    char *label;            /* malloc'd (free it); NULL for null or not a string */
    int has_allow_overlap;
    int allow_overlap;      /* Python's bool() of the value */
} tree_json_legacy;

/* After tree_json_reader_finish of a reader of tree_json_reader_new_legacy:
 * what it found; the label moves to *out. */
void tree_json_reader_legacy(tree_json_reader *r, tree_json_legacy *out);

#endif
