/* AnnData, MuData and TreeData encodings, written once over storage/node.h
 * so every backend gets them.  No HTTP here.
 *
 * Everything returned borrows from the store's node tree or from the arena
 * the caller passes; nothing needs freeing individually. */
#ifndef CELLAR_ANNDATA_H
#define CELLAR_ANNDATA_H

#include <stdint.h>

#include "common/arena.h"
#include "common/error.h"
#include "storage/kind.h"
#include "storage/node.h"
#include "storage/selection.h"

struct store; /* storage/registry.h: for per-version caches (name indexes) */

/* ---- data frames (obs, var, raw/var, obsm data frames) ---- */

typedef enum col_encoding {
    COL_ARRAY = 1,          /* numeric or bool array */
    COL_STRING_ARRAY,       /* string-array (also legacy fixed/vlen strings) */
    COL_CATEGORICAL,        /* codes + categories (0.2.0 group, or 0.1.0 codes + ref) */
    COL_NULLABLE_INTEGER,   /* values + mask */
    COL_NULLABLE_BOOLEAN,   /* values + mask */
    COL_NULLABLE_STRING     /* string values + mask */
} col_encoding;

/* anndata's encoding-type for a column encoding, e.g. "categorical". */
const char *col_encoding_name(col_encoding e);

typedef struct frame_column {
    const char *name;
    col_encoding encoding;
    dtype_kind dtype;       /* of values; for categorical: of the categories */
    dtype_kind codes_dtype; /* categorical only */
    node *values;           /* values, or the codes of a categorical */
    node *mask;             /* nullable-*: True = missing; else NULL */
    node *categories;       /* categorical only */
    int ordered;            /* categorical only */
    const char *na_value;   /* nullable-string-array: "NA" or "NaN" */
} frame_column;

typedef struct frame {
    node *group;
    int64_t n_rows;
    const char *index_name;  /* as pandas reports it: NULL when unnamed */
    frame_column index;      /* the index column (strings, or numbers) */
    frame_column *columns;   /* in column-order; the index is not among them */
    size_t n_columns;
} frame;

/* Parses a dataframe group (0.2.0 or 0.1.0) without reading any column
 * data.  Columns whose encoding cannot be read (awkward, nested groups)
 * fail with CELLAR_EFORMAT only when read, not here: they are listed with
 * encoding 0 and skipped by the readers.
 * Errors: CELLAR_EFORMAT when the group is not a data frame. */
int frame_open(node *group, arena *a, frame *out, cellar_error *err);

/* Index of the named column, or -1. */
int frame_find_column(const frame *f, const char *name);

/* Values of one column at the selected rows. */
typedef struct column_values {
    const frame_column *column;
    int64_t count;
    dtype_kind dtype;  /* of data: numeric kind, DT_BOOL, or DT_STRING */
    void *data;        /* numeric: count * dtype_size(dtype) bytes;
                        * DT_STRING: char *[count]; categorical: the codes
                        * widened to int64_t[count] (-1 = missing) */
    uint8_t *missing;  /* NULL, or count bytes: 1 = missing (nullable mask,
                        * categorical code -1) */
    /* categorical only: all categories */
    int64_t n_categories;
    dtype_kind categories_dtype;
    void *categories;  /* like data, for the categories */
} column_values;

/* Reads the selected rows of one column (hyperslab reads only, plus the
 * whole categories array for a categorical).  Memory from a. */
int frame_read_column(const frame *f, const frame_column *c, const dim_sel *rows, arena *a,
                      column_values *out, cellar_error *err);

/* Bytes a column's selected rows would take in binary form (numbers at their
 * size, strings estimated at 16 bytes each, categorical codes at 8), for
 * bounding a response before any I/O. */
uint64_t frame_column_cost(const frame_column *c, int64_t rows);

/* Maps names to row positions using the frame's index. The name index is
 * built once per store version (cached in s) and shared.  Unknown names fail
 * with CELLAR_ENOTFOUND naming the first one.  Duplicated index entries map
 * to their first occurrence; missing index entries (nullable mask) match no
 * name.  s may be NULL: no caching (the index is built and dropped). */
int frame_lookup_names(struct store *s, const frame *f, const char *const *names, size_t n,
                       int64_t *rows_out, cellar_error *err);

/* As frame_lookup_names, but a name the index does not hold gives -1 in
 * rows_out instead of failing (for joins where some names name no row). */
int frame_find_names(struct store *s, const frame *f, const char *const *names, size_t n,
                     int64_t *rows_out, cellar_error *err);

/* ---- AnnData objects (root, MuData modality, raw) ---- */

typedef struct anndata_info {
    node *group;
    int64_t n_obs, n_vars;   /* from the obs/var index lengths (X as fallback) */
} anndata_info;

/* Opens an AnnData-shaped group (root of .h5ad/.h5td, MuData root or one
 * modality). */
int anndata_open(node *group, anndata_info *out, cellar_error *err);

/* ---- MuData ---- */

typedef struct mudata_info {
    int axis;                 /* 0 shared obs, 1 shared var, -1 both */
    const char **mods;        /* in mod-order when every listed name exists, else group order */
    size_t n_mods;
    int has_mod_order;        /* mod-order was present and used */
} mudata_info;

int mudata_open(node *root, arena *a, mudata_info *out, cellar_error *err);

/* The group of one modality; CELLAR_ENOTFOUND names it. */
int mudata_mod(node *root, const char *mod, node **out, cellar_error *err);

/* The obsmap (axis_name "obs") or varmap ("var") of one modality: for every
 * global row, the 1-based row in the modality, 0 when absent.  Uses the
 * stored map when its length and values fit, else rebuilds it by name
 * (cached in s under "map:<axis_name>:<mod>").  *map is a uint32_t[*n]
 * borrowed from the store version's cache.  s may be NULL: no caching, and
 * *map is then malloc'd and owned by the caller (free() it).  Errors:
 * CELLAR_ENOTFOUND for an unknown modality, CELLAR_EFORMAT when the global
 * or modality frame cannot be read. */
int mudata_map(struct store *s, node *root, const char *axis_name, const char *mod,
               const uint32_t **map, int64_t *n, cellar_error *err);

/* ---- TreeData root elements ---- */

typedef struct treedata_info {
    const char *label;       /* NULL when null */
    const char *alignment;   /* "leaves", "nodes", "subset" */
    int allow_overlap;
} treedata_info;

int treedata_open(node *root, arena *a, treedata_info *out, cellar_error *err);

/* ---- small element helpers ---- */

/* The encoding-type of a node, or NULL (legacy / absent). */
const char *element_encoding(const node *n);

/* Reads a 0-d or 1-element string/numeric element as text (for scalars like
 * `alignment`). NULL on failure. */
char *element_read_scalar_string(node *n, arena *a, cellar_error *err);

#endif
