/* The immutable index of one tree of a TreeData `obst`/`vart` entry, and the
 * forest of all trees of one such entry.
 *
 * A tree_index holds one directed graph in which every node has at most one
 * parent and that has no cycle: a rooted tree, or a forest of several roots
 * (TreeData views can leave a tree disconnected).  Nodes are numbered
 * 0 .. n-1 in the order the file lists them ("nodes" in the .h5td JSON, the
 * `nodes` array in zarr); node numbers are int32_t.  Children keep the order
 * in which their edges were listed.
 *
 * What is precomputed, all in O(n) or O(n log n / 32) memory, iteratively
 * (depth may be n, e.g. a caterpillar):
 * - id -> node hash lookup; parent; children (CSR); depth;
 * - preorder number and subtree end, so "a is an ancestor of b" is O(1);
 * - leaf order (leaves in preorder), leaves under a node as one contiguous
 *   slice of that order, leaf counts;
 * - LCA in O(1) time (a min-depth RMQ over the preorder, blocks of 32 with a
 *   sparse table over the blocks);
 * - a layout for drawing: x and y per node (see tree_index_x).
 *
 * Memory: the texts live in one arena owned by the index, the per-node
 * arrays in blocks of their own (so that the temporary arrays of a build
 * can be given back before the next ones are made); tree_index_bytes
 * reports both.  An index is immutable once built and may be read by many
 * threads at once without locks.
 *
 * Functions taking a node number expect 0 <= node < tree_index_node_count;
 * they do not check it (the routes look nodes up by id first).  Results that
 * need memory are allocated from a caller-supplied arena (the request's). */
#ifndef CELLAR_TREE_INDEX_H
#define CELLAR_TREE_INDEX_H

#include <stddef.h>
#include <stdint.h>

#include "common/arena.h"
#include "common/error.h"

typedef struct tree_index tree_index;

/* What an index is built from (the JSON reader and the columnar builder in
 * storage/trees/tree_json.h fill it).  Every array is malloc'd and is taken over
 * by tree_index_build in every case: the index keeps ids, attrs and slot,
 * and frees the edge arrays as soon as it has read them (so that a build
 * holds little more than the finished index).
 *
 * - ids[v]: node v's id, NUL-terminated, living in the arena given with the
 *   parts (or static); distinct (not checked here: the builder checks it).
 * - attrs[v] (attrs may be NULL, and so may attrs[v]: then "{}"): node v's
 *   attributes as a compact JSON object text in the arena, served verbatim.
 * - src[e] -> dst[e]: the edges; eattrs[e] their attribute texts (eattrs or
 *   eattrs[e] may be NULL: "{}"); elen[e] their numeric `length` or NAN
 *   (elen may be NULL: none has one).
 * - slot (may be NULL: built here): the id hash table, slot_cap (a power of
 *   two, at least twice n_nodes) entries of node numbers or UINT32_MAX for
 *   an empty slot; node v sits at the first free slot probing linearly from
 *   tree_index_hash_id(ids[v]) & (slot_cap - 1). */
typedef struct tree_parts {
    int32_t n_nodes;
    const char **ids;
    const char **attrs;
    int32_t n_edges;
    int32_t *src, *dst;
    const char **eattrs;
    double *elen;
    uint32_t *slot;
    size_t slot_cap;
} tree_parts;

/* The hash of an id, as the slot table places it. */
uint32_t tree_index_hash_id(const char *s, size_t n);

/* Builds an index from `p` (whose arrays it takes over, see above, and
 * whose members it sets to NULL) and the arena `a` holding the texts, which
 * is taken over too: on success the index owns it, on failure it has been
 * freed.
 *
 * Errors (CELLAR_EFORMAT, naming the node by id): an edge from a node to
 * itself, a node with two parents, a cycle, src/dst out of range.
 * CELLAR_ENOMEM when memory runs out; CELLAR_ETOOBIG past INT32_MAX - 1
 * nodes or edges. */
int tree_index_build(arena *a, tree_parts *p, tree_index **out, cellar_error *err);

/* calloc for the big arrays of an index and its builder: blocks of 2 MiB
 * or more are asked to be backed by huge pages, since building and
 * querying a million-node tree is mostly random access into them (fewer
 * TLB misses).  Free with free(). */
void *tree_index_calloc(size_t count, size_t size);

/* Frees a tree_parts' arrays (not the arena); NULL members are fine. */
void tree_parts_free(tree_parts *p);

/* Frees the index and its arena. NULL is fine. */
void tree_index_free(tree_index *t);

/* Bytes held by the index (its arena). */
size_t tree_index_bytes(const tree_index *t);

/* Counts. Edges = nodes - roots. */
int32_t tree_index_node_count(const tree_index *t);
int32_t tree_index_edge_count(const tree_index *t);
int32_t tree_index_root_count(const tree_index *t);
int32_t tree_index_leaf_total(const tree_index *t);
int32_t tree_index_max_depth(const tree_index *t);

/* The roots in node order (borrowed, *n set to their count). */
const int32_t *tree_index_roots(const tree_index *t, int32_t *n);

/* The node whose id is the `len` bytes at `id` (need not be NUL-terminated),
 * or -1 when there is none. */
int32_t tree_index_find(const tree_index *t, const char *id, size_t len);

/* The node's id (borrowed, NUL-terminated). */
const char *tree_index_id(const tree_index *t, int32_t node);

/* The node's attributes as a compact JSON object text (borrowed, never NULL,
 * "{}" when it has none).  An attribute that was explicitly null is present
 * with the value null; an absent one is simply not a key. */
const char *tree_index_attrs(const tree_index *t, int32_t node);

/* The attributes of the edge parent -> node as a compact JSON object text
 * (borrowed), or NULL for a root. */
const char *tree_index_edge_attrs(const tree_index *t, int32_t node);

/* The numeric `length` attribute of the edge parent -> node, or NAN when the
 * node is a root or that edge has no numeric `length` (JSON NaN/Infinity are
 * read as null, so they give NAN too). */
double tree_index_branch_length(const tree_index *t, int32_t node);

/* Parent, or -1 for a root. */
int32_t tree_index_parent(const tree_index *t, int32_t node);

/* Children in edge order (borrowed, *n set to their count). */
const int32_t *tree_index_children(const tree_index *t, int32_t node, int32_t *n);

/* Depth: 0 for a root. */
int32_t tree_index_depth(const tree_index *t, int32_t node);

/* Preorder position (0 .. n-1, roots in node order, children in edge order)
 * and the end of the node's subtree: the subtree is exactly the positions
 * preorder(node) <= p < subtree_end(node).  tree_index_node_at inverts
 * tree_index_preorder. */
int32_t tree_index_preorder(const tree_index *t, int32_t node);
int32_t tree_index_subtree_end(const tree_index *t, int32_t node);
int32_t tree_index_node_at(const tree_index *t, int32_t preorder_pos);

/* 1 when `anc` is `node` or one of its ancestors, else 0. O(1). */
int tree_index_is_ancestor(const tree_index *t, int32_t anc, int32_t node);

/* Leaves (nodes without children) under `node`, itself included when it is a
 * leaf.  Leaf order is the order of leaves in the preorder; the leaves under
 * a node are the contiguous ranks leaf_first .. leaf_first + leaf_count - 1. */
int32_t tree_index_leaf_count(const tree_index *t, int32_t node);
int32_t tree_index_leaf_first(const tree_index *t, int32_t node);

/* The leaves under `node` in leaf order, skipping the first `offset` and at
 * most `max` of them: returns a borrowed pointer into the index and sets
 * *n_out to how many it points at (0 when offset is past the end) and
 * *n_total (may be NULL) to leaf_count(node). */
const int32_t *tree_index_leaves(const tree_index *t, int32_t node, int32_t offset,
                                 int32_t max, int32_t *n_out, int32_t *n_total);

/* The lowest common ancestor of the k nodes, -1 when k == 0 or when they
 * are not all in one connected tree.  O(k) (O(1) per node). */
int32_t tree_index_lca(const tree_index *t, const int32_t *nodes, int32_t k);

/* The path root .. node (both included, depth + 1 nodes) in *out, allocated
 * from `a`. CELLAR_ENOMEM when `a` runs out. */
int tree_index_ancestors(const tree_index *t, int32_t node, arena *a, int32_t **out,
                         int32_t *n_out, cellar_error *err);

/* The nodes below `root` (root first, then breadth-first, children in edge
 * order) down to `max_depth` levels below root (max_depth < 0: no limit) and
 * at most `max_nodes` (> 0) nodes, in *out allocated from `a`.  root == -1
 * starts from all roots (each at level 0).  *truncated is set to 1 when
 * max_nodes cut the answer, else 0 (the depth limit is not truncation).
 * Errors: CELLAR_EINVAL for max_nodes <= 0, CELLAR_ENOMEM. */
int tree_index_subtree(const tree_index *t, int32_t root, int32_t max_depth,
                       int32_t max_nodes, arena *a, int32_t **out, int32_t *n_out,
                       int *truncated, cellar_error *err);

/* Layout for drawing.
 * x: the distance from the root.  When every edge has a finite,
 *    non-negative numeric `length` attribute (tree_index_uses_length), x is
 *    the sum of `length` along the path from the root; otherwise x = depth.
 *    Roots have x = 0.
 * y: leaves get their leaf rank (0 .. leaf_total - 1, trees of a forest one
 *    after another); an internal node gets the mean of the y of its first
 *    and last child.  So y always lies inside the node's leaf rank range.
 * tree_index_x_max: the largest x of the node's subtree. */
double tree_index_x(const tree_index *t, int32_t node);
double tree_index_y(const tree_index *t, int32_t node);
double tree_index_x_max(const tree_index *t, int32_t node);
int tree_index_uses_length(const tree_index *t);

/* The members of list[0..n) whose leaf ranks meet [y0, y1], as the index
 * range [*lo, *hi): list holds siblings in child order, or the roots, whose
 * leaf rank ranges increase and do not overlap.  O(log n). */
void tree_index_y_span(const tree_index *t, const int32_t *list, int32_t n, double y0, double y1,
                       int32_t *lo, int32_t *hi);

/* One entry of a viewport answer. */
typedef struct tree_view_entry {
    int32_t node;
    /* 0: the node itself, inside the box.  1: a collapsed clade: the entry
     * stands for the node's whole subtree (tree_index_leaf_count leaves,
     * leaf ranks from tree_index_leaf_first), part of which lies inside the
     * box; the node itself may lie outside it. */
    int32_t collapsed;
} tree_view_entry;

/* The nodes whose layout (x, y) lies inside [x0, x1] x [y0, y1], as at most
 * max_nodes (> 0) entries in *out (allocated from `a`, sorted by preorder).
 * Clades are opened biggest (most leaves) first for as long as the answer
 * stays within max_nodes; clades that could not be opened come back as
 * collapsed entries.  *truncated is 1 when the answer is not exactly the
 * nodes in the box (some entry is collapsed, or more roots than max_nodes
 * reach into the box).  Cost: O(max_nodes log max_nodes), independent of
 * the tree's size.
 * Errors: CELLAR_EINVAL for max_nodes <= 0 or a NaN bound or x0 > x1 or
 * y0 > y1; CELLAR_ENOMEM. */
typedef struct tree_viewport {
    double x0, x1, y0, y1;
    int32_t max_nodes;
} tree_viewport;

int tree_index_viewport(const tree_index *t, const tree_viewport *box, arena *a,
                        tree_view_entry **out, int32_t *n_out, int *truncated,
                        cellar_error *err);

/* ---- forest: all trees of one obst or vart ------------------------------ */

typedef struct tree_forest tree_forest;

/* An empty forest, or NULL when out of memory. */
tree_forest *tree_forest_new(void);

/* Frees the forest and all its trees. NULL is fine. */
void tree_forest_free(tree_forest *f);

/* Appends tree `t` under `key` (copied).  Takes ownership of `t` in every
 * case (frees it on failure).  CELLAR_EFORMAT when the key is already
 * present, CELLAR_ENOMEM. */
int tree_forest_add(tree_forest *f, const char *key, tree_index *t, cellar_error *err);

/* Number of trees; key and tree by position, in file order (borrowed). */
size_t tree_forest_count(const tree_forest *f);
const char *tree_forest_key(const tree_forest *f, size_t i);
const tree_index *tree_forest_tree(const tree_forest *f, size_t i);

/* The tree under `key`, or NULL. */
const tree_index *tree_forest_get(const tree_forest *f, const char *key);

/* Bytes held by the forest and all its trees. */
size_t tree_forest_bytes(const tree_forest *f);

#endif
