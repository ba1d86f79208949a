/* Viewport thinning by bins: what a tree viewer that draws every node as a
 * branch from its parent (Taxonium) needs for one box, at about `rows`
 * bins of height (y1 - y0) / rows, plus their ancestors.
 *
 * Coordinates are the layout of tree_index_x / tree_index_y (y in leaf
 * ranks).  A clade is "thin" when all its leaf ranks fall in one bin (row).
 * The answer is built top-down from the roots, visiting only clades that
 * reach into the box (their leaf ranks meet [y0, y1] and their largest x is
 * at least x0):
 * - a clade that is not thin, and whose node lies at x <= x1, is in the
 *   answer and its children are visited;
 * - a thin clade stands for itself: its top node is in the answer (marked
 *   collapsed when it has children, which are then left out);
 * - of the thin clades hanging from one node (or among the roots) in the
 *   same row, only the one reaching furthest right (largest x_max) is kept:
 *   the others lie in the same bin and draw the same pixels;
 * - a node past x1 stands for its whole clade (collapsed when it has
 *   children).
 * So every node inside the box is in the answer, or its nearest ancestor
 * in the answer stands for it: that ancestor is collapsed (its clade lies in
 * one row), or the node lies in a thin clade hanging from that ancestor
 * beside a kept sibling clade of the same row.  Every node of the answer
 * has its parent in it.
 *
 * Entries come sorted by y, then by preorder (a parent before a child of
 * the same y).  Cost: the nodes visited, i.e. the answer and the children
 * of its expanded nodes, then a sort of the answer: by comparisons, or in
 * linear time by a radix sort when the caller passes every node's place in
 * that order (tree_thin_y_ranks, built once per tree). */
#ifndef CELLAR_TREE_THIN_H
#define CELLAR_TREE_THIN_H

#include <stdint.h>

#include "common/arena.h"
#include "common/error.h"
#include "storage/trees/tree_index.h"

typedef struct tree_thin_box {
    double x0, x1, y0, y1;
    int32_t rows;     /* bins along y, > 0 */
} tree_thin_box;

/* rank[v]: node v's place among all nodes of t sorted by y, then by
 * preorder (the order of the answers below), malloc'd (free()), or NULL when
 * out of memory.  O(n log n). */
int32_t *tree_thin_y_ranks(const tree_index *t);

/* Bin of y in the box: -1 above y0, rows past y1 (y1 itself is in the last
 * bin).  Exposed so tests and callers place nodes the same way. */
int64_t tree_thin_row(const tree_thin_box *box, double y);

/* Fills *out (from `a`, sorted as above; tree_view_entry.collapsed as
 * above) and *n_out; *thinned is 1 when some node of the box was left out.
 * Errors: CELLAR_EINVAL for rows <= 0, a NaN bound, x0 > x1 or y0 > y1;
 * CELLAR_ENOMEM. */
int tree_index_thin(const tree_index *t, const tree_thin_box *box, arena *a,
                    tree_view_entry **out, int32_t *n_out, int *thinned, cellar_error *err);

/* The same with the ranks of tree_thin_y_ranks(t) (NULL: sort by
 * comparisons); the answer is the same either way. */
int tree_index_thin_with(const tree_index *t, const int32_t *y_rank, const tree_thin_box *box,
                         arena *a, tree_view_entry **out, int32_t *n_out, int *thinned,
                         cellar_error *err);

#endif
