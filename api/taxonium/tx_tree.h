/* What every Taxonium route shares: the tree of the request
 * ({ad}/{obst|vart}/{key}/taxonium/...), its per-version table (coordinates'
 * scales, the obs / var values offered as meta_* attributes), and the
 * writer of one node as Taxonium's backend sends it.
 *
 * Taxonium's coordinates are the tree index's layout scaled as its own
 * backend scales a tree (taxonium_data_handling/importing.js and
 * taxoniumtools): x_dist = x * 600 / (largest x), y = leaf-rank y * 2400 /
 * (nodes, or nodes * 0.6666 for 10,000 nodes or fewer).  node_id is the
 * node's number in the tree index (file order); a root is its own parent. */
#ifndef CELLAR_TX_TREE_H
#define CELLAR_TX_TREE_H

#include <stdint.h>

#include "api/encode/json_out.h"
#include "api/request.h"
#include "storage/anndata/anndata.h"
#include "storage/trees/tree_index.h"
#include "storage/trees/tree_thin.h"

/* Taxonium's getNodes thins to 2000 bins along y. */
#define TX_ROWS 2000

/* Values of one frame column at the rows the tree's nodes name. */
typedef struct tx_column {
    const char *meta;        /* "meta_<column>" */
    int numeric;             /* numbers or bools (else strings, categories) */
    column_values vals;      /* at the rows listed in tx_table.rows order */
    const char *key;         /* ,"meta_<column>": as a node's JSON has it */
    size_t key_len;
} tx_column;

/* What a node's JSON needs, in one place (one cache line instead of one
 * miss per index array), in the order nodes/ writes them (by y), so that
 * an answer reads the records and their names nearly in sequence. */
typedef struct tx_rec {
    double x_dist, y;
    const char *name;
    int32_t name_len;        /* bytes; -1 when the name needs escaping */
    int32_t parent;          /* node_id of the parent, itself for a root */
    int32_t num_tips;
    int32_t slot;            /* index into the columns' values, -1 none */
    int32_t is_tip;
} tx_rec;

/* Built once per store version and tree (store_derived), immutable. */
typedef struct tx_table {
    tx_rec *rec;             /* by y rank: nodes sorted by y, then preorder */
    int32_t *rank;           /* per node: its index in rec */
    char *names;             /* the ids, in rec's order (rec[].name points in) */
    arena *a;
    double scale_x, scale_y;
    double max_x, max_y;     /* extents in Taxonium units (mins are 0) */
    int32_t *slot;           /* per node: index into the columns' values, -1 none */
    size_t n_cols;
    tx_column *cols;
    char *whole;             /* the nodes/ answer for the whole tree, or NULL */
    size_t whole_len;
    size_t bytes, bytes_extra;
} tx_table;

typedef struct tx_req {
    const char *axis, *key;
    node *group;
    const tree_index *t;
    const tx_table *tab;
} tx_req;

/* Checks the parameters (sid is always allowed; `extra` NULL-terminated)
 * and, with json_only, that JSON may be answered (format=, Accept); opens
 * the store, the tree and its table.  404 for an unknown tree. */
int tx_open(api_request *req, tx_req *tr, const char *const *extra, int json_only,
            cellar_error *err);

/* The node of parameter or path text `id` (a node number as Taxonium sends
 * it): 400 when not an integer or negative, 404 past the last node. */
int tx_node_id(const tx_req *tr, const char *name, const char *id, int32_t *out,
               cellar_error *err);

/* The box of min_x, max_x, min_y, max_y (Taxonium units; absent bounds
 * are the tree's extent, and every bound is clamped to it, as Taxonium's
 * backend does) into box[0..4) = x0, x1, y0, y1, which may come out empty
 * (x0 > x1 or y0 > y1) for a box beside the tree; and xType, which must be
 * x_dist.  400 for a min above its max. */
int tx_box_params(api_request *req, const tx_req *tr, double box[4], cellar_error *err);

/* Writes the nodes/ answer for box b (from tx_box_params) into body, from
 * its start: the tree thinned to TX_ROWS bins in the box plus their
 * ancestors (storage/trees/tree_thin.h), each node as tx_append_node
 * writes it.  The whole tree's answer is copied from the table, where it is
 * made once.  Errors: CELLAR_ETOOBIG once the answer is over limit bytes
 * (0: no limit), CELLAR_ENOMEM; thinning's scratch comes from `a`. */
int tx_nodes_answer(buf *body, const tx_req *tr, const double b[4], arena *a, uint64_t limit,
                    cellar_error *err);

/* v rounded to dp (0..6) decimals, as nodes are sent: Taxonium's backend
 * rounds x_dist to 5 and y to 6. */
double tx_round(double v, int dp);

/* Taxonium x / y of a node (unrounded). */
double tx_x(const tx_req *tr, int32_t v);
double tx_y(const tx_req *tr, int32_t v);

/* Writes node v as a Taxonium node object (node_id, parent_id, name,
 * x_dist and y rounded to 5 and 6 decimals, num_tips, is_tip, mutations [], meta_* for a node that names a
 * row), without its closing brace, so callers may add members. */
void tx_write_node_open(json_out *j, const tx_req *tr, int32_t v);

/* Appends node v as the Taxonium node object tx_write_node_open writes,
 * closed, with "collapsed":true when `collapsed`, straight into b (the
 * nodes/ answer's hot path). */
void tx_append_node(buf *b, const tx_req *tr, int32_t v, int collapsed);

/* Appends s (n bytes) to b as a JSON string (any bytes: invalid UTF-8
 * replaced, controls escaped). */
void tx_append_str(buf *b, const char *s, size_t n);

/* Writes the meta value of column c for node v (null when it has none). */
void tx_write_meta(json_out *j, const tx_req *tr, const tx_column *c, int32_t v);

/* Whether node v has a value in column c; its text (strings) or number. */
int tx_meta_text(const tx_req *tr, const tx_column *c, int32_t v, const char **text,
                 double *num);

/* The answer's last step: JSON content type, or the writer's failure. */
int tx_finish(json_out *j, api_response *res, const char *hint, cellar_error *err);

#endif
