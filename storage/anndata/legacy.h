/* AnnData groups as today's anndata reads the layouts of older writers: a
 * view over the node tree that shows them in today's encodings, so every
 * element reader and route sees one layout.  What it shows, after
 * anndata's own read helpers (`read_h5ad`, `read_dataframe_legacy`,
 * `_read_legacy_raw`, `_clean_uns`, `_move_adj_mtx`):
 *   - obs and var stored as arrays of records (anndata before 0.7) are
 *     dataframe groups: the first field is the index, the others columns;
 *     when obs is such an array, a column of integer codes with an
 *     uns['{column}_categories'] array whose length exceeds every code is
 *     a categorical of those categories, and that uns key is gone;
 *   - obsm and varm stored as arrays of records are dicts of their fields;
 *   - raw.X, raw.var and raw.varm at the top level are raw/X, raw/var and
 *     raw/varm (raw only when raw.X is there); no name "raw.*" is listed;
 *   - uns['neighbors']['distances'] and ['connectivities'], when they are
 *     2-D (sparse or dense), are obsp['distances'] and ['connectivities'].
 * Every other node is the stored one as it is.  The subset is described
 * with the formats in docs/formats.md. */
#ifndef CELLAR_LEGACY_H
#define CELLAR_LEGACY_H

#include "common/error.h"
#include "storage/node.h"

/* The AnnData group g as anndata reads it: g itself when none of the
 * layouts above is there, else the view, made once and kept on g (so it
 * is borrowed like g and lives as long as g's tree).  The view's nodes
 * have the paths of the nodes they show.  Errors: CELLAR_ENOMEM, and what
 * reading g's children and the codes of a legacy obs or var gives. */
int legacy_view(node *g, node **out, cellar_error *err);

/* The stored node a node of such a view shows as it is (an alias, followed
 * to its end), so that a reader of the stored layout (the zarr view's
 * chunks sent from the file) can use it; n itself for any other node. */
node *legacy_stored(node *n);

/* Whether n is a variable-length string field of an array of records that
 * the view shows as a dataframe column: read_dataframe_legacy decodes it
 * to str values, which a zarr reader gets alike from fixed-width text
 * (numpy's <U, what anndata's read_dataset turns into str as well). */
int legacy_text(const node *n);

#endif
