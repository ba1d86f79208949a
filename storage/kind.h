/* What kind of store a node tree holds (AnnData, MuData, TreeData), told
 * from its root alone.  Below both the registry (which records a version's
 * kind at open) and the element layer (storage/anndata/), so neither needs
 * the other for it. */
#ifndef CELLAR_KIND_H
#define CELLAR_KIND_H

#include "storage/node.h"

typedef enum store_kind {
    KIND_UNKNOWN = 0,
    KIND_ANNDATA,
    KIND_MUDATA,
    KIND_TREEDATA
} store_kind;

/* "anndata", "mudata", "treedata", "unknown". */
const char *store_kind_name(store_kind k);

/* Kind of a store from its root node: root `encoding-type` first
 * ("anndata", "MuData", "treedata"), else a `mod` group means MuData, else
 * AnnData (0.7.x files have no root attributes).  An `obst`/`vart` child
 * (or a `raw.treedata`: treedata 0.0.x) makes an "anndata" (or
 * attribute-less) root TreeData (treedata 0.1.x wrote "anndata"); an
 * unknown root encoding-type is KIND_UNKNOWN. */
store_kind store_kind_detect(node *root);

#endif
