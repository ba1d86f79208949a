/* The column index of a CSR matrix: a CSC copy of it (column pointers, row
 * indices and the values), so that one gene's column is one contiguous
 * range instead of a scan of the whole matrix.
 *
 * The index lives in one file-backed mapping: built into a temporary file
 * and renamed into place, and loaded back by mapping the file after
 * checking its header against the matrix.  Without a cache directory it is
 * built into an unnamed temporary file (O_TMPFILE in $TMPDIR, /var/tmp or
 * /tmp; anonymous memory only when none can be made).  A finished index is
 * mapped read-only, so its pages belong to the page cache (reclaimable)
 * and the process's resident memory holds only the columns queries touch.  File layout (all little-endian, host order):
 *
 *   0   char[8]  magic "CELLCIX1"
 *   8   uint32   format version (1)
 *   12  uint32   bytes per row index (4, or 8 when n_rows >= 2^32)
 *   16  int64    n_rows
 *   24  int64    n_cols
 *   32  int64    nnz
 *   40  uint32   dtype_kind of the values
 *   44  uint32   bytes per value
 *   48  ...      zero up to 64
 *   64  int64    colptr[n_cols + 1]
 *       rowidx   [nnz] (uint32 or int64), padded to 8 bytes
 *       values   [nnz] (dtype)
 *
 * Per store version the index goes through absent -> building -> ready (or
 * failed), tracked by a slot that is a derived structure of the version
 * (storage/registry.h): the first column request starts a background build
 * through a caller-given submit function and keeps a reference on the
 * version until the build ends; a restart finds the file again by the
 * version's identity. */
#ifndef CELLAR_COLUMN_INDEX_H
#define CELLAR_COLUMN_INDEX_H

#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "storage/dtype.h"
#include "storage/anndata/matrix.h"
#include "storage/registry.h"

typedef struct column_index {
    matrix_csc csc;          /* views into the mapping */
    /* the mapping */
    void *map;
    size_t map_bytes;
    int file_backed;         /* read-only mapping of a file (page cache), not anonymous */
} column_index;

/* Builds the index of CSR matrix m (whole passes over indices and data in
 * blocks of MATRIX_BLOCK_ENTRIES).  path: the file to create (written to
 * path + ".tmp.<pid>.<n>" first, then renamed), or NULL for memory only.
 * The caller owns *out (column_index_free).  Errors: CELLAR_EINVAL when m is
 * not CSR, CELLAR_EFORMAT for broken structure, CELLAR_EIO when the file
 * cannot be written. */
int column_index_build(const matrix *m, const char *path, column_index **out,
                       cellar_error *err);

/* Maps the index file at path when its header matches m (magic, version,
 * shape, nnz, dtype, size).  CELLAR_ENOTFOUND when there is no file,
 * CELLAR_EFORMAT when it does not match (the caller rebuilds). */
int column_index_load(const char *path, const matrix *m, column_index **out,
                      cellar_error *err);

void column_index_free(column_index *ci);

/* The CSC arrays of ci for storage/anndata/matrix.h's reads; NULL for NULL. */
static inline const matrix_csc *column_index_csc(const column_index *ci)
{
    return ci ? &ci->csc : NULL;
}

/* The cache file name of an element of a store version, inside dir:
 * "<dir>/<version tag and element path, every byte outside [A-Za-z0-9._-]
 * as _>.cix", the version tag being store_cache_tag.
 * malloc'd; NULL when out of memory or dir is NULL. */
char *column_index_path(const char *dir, const char *version_tag, const char *element_path);

/* ---- per store version ---- */

typedef enum column_index_state {
    COLUMN_INDEX_ABSENT = 0,
    COLUMN_INDEX_BUILDING,
    COLUMN_INDEX_READY,
    COLUMN_INDEX_FAILED,
    COLUMN_INDEX_OVER_LIMIT  /* larger than column_index_options.max_bytes: never built */
} column_index_state;

/* "absent", "building", "ready", "failed", "over_limit". */
const char *column_index_state_name(column_index_state s);

/* Runs fn(arg) later on another thread; 0 when accepted (fn will run
 * exactly once), nonzero when refused (fn will not run). */
typedef int (*column_index_submit_fn)(void *ctx, void (*fn)(void *), void *arg);

typedef struct column_index_options {
    const char *cache_dir;           /* NULL: indexes live in unnamed files only */
    column_index_submit_fn submit;   /* NULL: never build (always scan) */
    void *submit_ctx;
    uint64_t max_bytes;              /* an index larger is neither built nor loaded; 0: any */
} column_index_options;

/* The bytes of m's column index (its file, and its mapping), known before
 * building it; 0 when m is not CSR or the size would overflow. */
uint64_t column_index_bytes(const matrix *m);

/* The column index of CSR matrix m of store version s, when ready: *out is
 * borrowed until s is freed, NULL otherwise.  When none is ready, this
 * first tries to load the cache file (synchronously; cheap), else starts a
 * build through opts->submit (once per version; a failed build is not
 * retried in this version).  *state tells where things stand after the
 * call, *bytes the mapping's size when ready (when over_limit: the size it
 * would have).  An index over opts->max_bytes is neither loaded nor built
 * (state over_limit, for the version; columns are answered by the scan).
 * Errors only for out of memory; a build that cannot start just leaves the
 * state absent. */
int column_index_get(store *s, const matrix *m, const column_index_options *opts,
                     const column_index **out, column_index_state *state, size_t *bytes,
                     cellar_error *err);

/* The state of m's index in s without starting anything. */
column_index_state column_index_peek(store *s, const matrix *m, size_t *bytes);

#endif
