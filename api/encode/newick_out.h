/* Newick output of a tree index (storage/trees/tree_index.h).
 *
 * Labels follow treedata's own writer (treedata.io.write_nwk), so its
 * read_nwk and other Newick readers get the ids back: a label is quoted
 * with single quotes (inner quotes doubled) when it is empty, holds
 * whitespace or one of ( ) [ ] : ; , ' or, on an internal node, reads as a
 * number (which readers take for a support value).  Invalid UTF-8 in an id
 * is replaced by U+FFFD.  Every node carries its id, internal nodes
 * included.  Branch lengths are written as ":<shortest round-trip float>"
 * where the length callback gives a finite number, and left out otherwise;
 * roots get no length.  Written without recursion (a caterpillar of a
 * million nodes is fine). */
#ifndef CELLAR_NEWICK_OUT_H
#define CELLAR_NEWICK_OUT_H

#include <stdint.h>

#include "common/buf.h"
#include "common/error.h"
#include "storage/trees/tree_index.h"

/* The branch length of the edge parent -> node, NAN for none. */
typedef double (*newick_length_fn)(void *ctx, const tree_index *t, int32_t node);

/* Appends one label, quoted when needed (see above). 0, or -1 when out of
 * memory. */
int newick_label(buf *out, const char *id, int internal);

/* Appends the Newick text of the subtree of `root`, ending in ";\n", or of
 * every tree of the forest (each root's tree on its own line) when root is
 * -1.  `length` may be NULL (no branch lengths).  Fails with
 * CELLAR_ETOOBIG once out holds more than `limit` bytes (0 = no limit),
 * CELLAR_ENOMEM when out of memory. */
int newick_write(buf *out, const tree_index *t, int32_t root, newick_length_fn length,
                 void *ctx, uint64_t limit, cellar_error *err);

/* A newick_length_fn giving the index's own `length` attribute
 * (tree_index_branch_length); ctx is unused. */
double newick_index_length(void *ctx, const tree_index *t, int32_t node);

#endif
