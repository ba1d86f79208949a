/* Matrix elements over storage/node.h: dense arrays (1-D and 2-D, any
 * numeric dtype and bool) and sparse CSR/CSC groups (anndata's csr_matrix /
 * csc_matrix, legacy h5sparse_format), read by a row and a column
 * selection.  No HTTP here.
 *
 * Sparse reads go through one engine over the *major* axis of the stored
 * structure (rows of CSR, columns of CSC): the selected major positions'
 * `indptr` ranges are read in blocks of at most MATRIX_BLOCK_ENTRIES
 * entries, their `indices` are matched against the minor selection and only
 * then are their `data` read.  A selection along the major axis therefore
 * reads only its own ranges; one along the minor axis (columns of CSR)
 * scans the matrix in bounded memory, or, when a column index
 * (storage/anndata/column_index.h) is given, reads only the selected columns'
 * ranges of that index.
 *
 * Everything returned is allocated from the caller's arena. */
#ifndef CELLAR_MATRIX_H
#define CELLAR_MATRIX_H

#include <stddef.h>
#include <stdint.h>

#include "common/arena.h"
#include "common/error.h"
#include "storage/node.h"
#include "storage/selection.h"

/* Index entries (and values) read per block by the sparse engine. */
#define MATRIX_BLOCK_ENTRIES ((int64_t)1 << 18)

typedef enum matrix_layout { MATRIX_DENSE = 1, MATRIX_CSR, MATRIX_CSC } matrix_layout;

/* A CSC copy of a CSR matrix (column pointers, row indices, values), as
 * the column index (storage/anndata/column_index.h) holds it: read here
 * when given, so that one gene's column is one contiguous range. */
typedef struct matrix_csc {
    int64_t n_rows, n_cols, nnz;
    dtype_kind dtype;
    const int64_t *colptr;   /* n_cols + 1 */
    const uint32_t *rows32;  /* nnz, when n_rows < 2^32; else NULL */
    const int64_t *rows64;   /* nnz, otherwise */
    const void *values;      /* nnz values of dtype */
} matrix_csc;

/* Row index of entry k. */
static inline int64_t matrix_csc_row(const matrix_csc *c, int64_t k)
{
    return c->rows32 ? (int64_t)c->rows32[k] : c->rows64[k];
}

typedef struct matrix {
    node *element;        /* the array, or the sparse group */
    matrix_layout layout;
    int ndim;             /* 1 or 2; sparse matrices are 2-D */
    int64_t shape[2];     /* shape[1] is 1 for a 1-D array */
    dtype_kind dtype;     /* of the values */
    /* sparse only (borrowed from the store's node tree) */
    node *data, *indices, *indptr;
    int64_t nnz;          /* length of data / indices */
} matrix;

/* "dense", "csr", "csc". */
const char *matrix_layout_name(matrix_layout l);

/* Whether n is a sparse matrix group (encoding csr_matrix / csc_matrix, or
 * legacy h5sparse_format csr / csc). */
int matrix_is_sparse(const node *n);

/* Opens a matrix element without reading any values: a 1-D or 2-D numeric or
 * bool array, or a sparse group (checks that data, indices and indptr exist,
 * are 1-D, numeric/integer, agree in length, and that the shape attribute
 * has two non-negative entries).  Errors: CELLAR_EFORMAT naming the element
 * and what is wrong (a string array, a data frame, a 3-D array, ...). */
int matrix_open(node *n, matrix *out, cellar_error *err);

/* The stored non-zeros in the selected rows and columns, or an upper bound
 * of them read from `indptr` only (never from indices or data): exact when
 * the selection along the minor axis is everything, else bounded by the
 * major ranges and by rows x cols; with a column index and a CSR matrix the
 * selected columns' counts bound it too (a matrix holding duplicate
 * entries may exceed the rows x cols part of the bound: matrix_read_csr's
 * max_nnz still stops such a read).  Dense matrices: rows x cols.
 * Errors: CELLAR_EFORMAT for a broken indptr. */
int matrix_count_nnz(const matrix *m, const dim_sel *rows, const dim_sel *cols,
                     const matrix_csc *ci, uint64_t *nnz, cellar_error *err);

/* Reads the selection as a dense C-order array of rows->count x
 * cols->count values of m->dtype into out (out_bytes must equal that size;
 * sparse sources are zero-filled first; a 1-D array takes cols =
 * dim_sel_range(0, 1)).  Sparse entries stored more than once at one
 * (row, column) are summed, as scipy's toarray() does (integers wrap at
 * their width, bools are or-ed, float16 is rounded at each addition).
 * ci: a ready column index of this matrix, or NULL.
 * Errors: CELLAR_EFORMAT for broken sparse structure (indices out of range,
 * indptr not monotonic), backend read errors. */
int matrix_read_dense(const matrix *m, const dim_sel *rows, const dim_sel *cols,
                      const matrix_csc *ci, void *out, size_t out_bytes,
                      cellar_error *err);

/* A CSR answer: rows x cols of the selection, entries of each row in
 * ascending output column order.  Entries stored more than once at one
 * (row, column) are kept apart, in their stored order, as scipy's indexing
 * (X[rows], X[:, cols]) keeps them; nnz may then exceed rows x cols. */
typedef struct matrix_csr {
    int64_t n_rows, n_cols;
    int64_t nnz;
    int64_t *indptr;   /* n_rows + 1 */
    int64_t *indices;  /* nnz output column positions */
    void *data;        /* nnz values of dtype */
    dtype_kind dtype;
} matrix_csr;

/* Reads the selection of a sparse matrix as CSR (a CSC source is
 * transposed; duplicated selected positions repeat their entries).  At
 * most max_nnz entries are collected (0 = no limit): more fail with
 * CELLAR_ETOOBIG.  Memory from a.  Errors as matrix_read_dense; a dense
 * source fails with CELLAR_EINVAL. */
int matrix_read_csr(const matrix *m, const dim_sel *rows, const dim_sel *cols,
                    const matrix_csc *ci, uint64_t max_nnz, arena *a,
                    matrix_csr *out, cellar_error *err);

/* ---- CSR answers written straight into the caller's memory ----
 *
 * A selection of whole stored rows of a CSR matrix (rows a slice of step
 * 1, every column) answers with the stored ranges themselves: indptr
 * rebased to 0, and indices / data exactly as stored.  These read them
 * into the answer's own buffer (indices and data with one node_read each,
 * no per-value conversion when the stored width is the answer's), so a
 * block of rows costs about what its bytes cost to read. */

/* Whether (rows, cols) of m is such a run of whole rows. */
int matrix_csr_is_run(const matrix *m, const dim_sel *rows, const dim_sel *cols);

/* The run's indptr: rows->count + 1 entries from rows->start, as stored
 * (not rebased), into indptr.  CELLAR_EFORMAT when they are not monotonic
 * within [0, m->nnz]. */
int matrix_run_indptr(const matrix *m, const dim_sel *rows, int64_t *indptr,
                      cellar_error *err);

/* Reads the run's stored entries [indptr[0], indptr[n_rows]) (indptr as
 * matrix_run_indptr gave it): column indices as idx_dt (DT_INT32 or
 * DT_INT64) into indices, values as m->dtype into data.  Every index is
 * checked to lie within the columns (CELLAR_EFORMAT otherwise; DT_INT32
 * requires m->shape[1] <= INT32_MAX).  *ascending is 0 when some row's
 * indices are not in ascending order (a non-canonical matrix): the caller
 * then answers through matrix_read_csr, which orders them. */
int matrix_run_entries(const matrix *m, const int64_t *indptr, int64_t n_rows,
                       dtype_kind idx_dt, void *indices, void *data, int *ascending,
                       cellar_error *err);

/* Visits every stored entry of a sparse matrix in storage order (major
 * position ascending, then as stored), reading in blocks of
 * MATRIX_BLOCK_ENTRIES: fn gets the row, the column and a pointer to the
 * value (m->dtype, valid during the call).  A nonzero return of fn stops
 * the walk and is returned (as a cellar_code, with a generic detail).
 * Errors as matrix_read_dense. */
typedef int (*matrix_entry_fn)(void *ctx, int64_t row, int64_t col, const void *value);

int matrix_for_each(const matrix *m, matrix_entry_fn fn, void *ctx, cellar_error *err);

#endif
