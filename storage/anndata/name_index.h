/* A name -> row position index: an open-addressing hash table over the
 * strings of a data frame's index, built once per store version (see
 * frame_lookup_names in storage/anndata/anndata.h) and then read by many threads
 * without locks.
 *
 * Duplicate names keep their first occurrence, as pandas' get_loc-based
 * lookups in anndata do for the first match. */
#ifndef CELLAR_NAME_INDEX_H
#define CELLAR_NAME_INDEX_H

#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

typedef struct name_index name_index;

/* A new empty index for up to `capacity` names (more fail with
 * CELLAR_EINTERNAL); its memory grows with the names added, not with the
 * capacity.  NULL + CELLAR_ENOMEM in err when out of memory or when
 * capacity is too large (2^32 - 1 names or more).  Free with name_index_free. */
name_index *name_index_new(int64_t capacity, cellar_error *err);

/* Adds name (copied) at row `pos` unless the name is already present (the
 * first occurrence wins; that is not an error).  Errors: CELLAR_ENOMEM,
 * CELLAR_EINTERNAL when more names than the capacity are added. */
int name_index_add(name_index *ix, const char *name, int64_t pos, cellar_error *err);

/* Row position of name, or -1 when absent. Safe from many threads once built. */
int64_t name_index_find(const name_index *ix, const char *name);

/* Distinct names held. */
int64_t name_index_count(const name_index *ix);

/* Heap bytes held (table and string pool), for cache accounting. */
size_t name_index_bytes(const name_index *ix);

/* Frees the index. NULL is fine. */
void name_index_free(name_index *ix);

#endif
