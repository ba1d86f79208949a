/* The CSC overlay of the zarr view (the zarr-csc prefix): every CSR matrix
 * group (anndata's csr_matrix, legacy h5sparse csr) is shown as the CSC
 * matrix of the same values, its arrays served from the matrix's column
 * index (storage/anndata/column_index.h), so a client that reads one
 * column of a CSC matrix with two small range reads (Vitessce) reads one
 * gene of a CSR .h5ad without reading the whole matrix:
 *
 *   X/.zattrs   the group's attributes, encoding-type csc_matrix
 *   X/indptr    (n_cols + 1,) int64: the column pointers
 *   X/indices   (nnz,) row indices: int32 below 2^31 rows, uint32 below
 *               2^32, int64 beyond (as the index keeps them)
 *   X/data      (nnz,) the values, in the matrix's dtype
 *
 * The index is built (or loaded from --cache-dir) on the first chunk asked
 * for, on the server's background workers; the chunk waits for it for up to
 * h5zarr_options.index_wait_seconds, then is 503 (Retry-After).  Metadata
 * needs no index: shapes and dtypes come from the CSR matrix itself. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "storage/anndata/column_index.h"
#include "storage/anndata/matrix.h"
#include "storage/h5zarr/h5zarr_impl.h"

/* Bytes per chunk of the CSC arrays: small, since a client reading one
 * column reads the chunks its range touches. */
#define CSC_CHUNK_BYTES ((size_t)256 << 10)

typedef struct csc_info {
    int ok;               /* a CSR matrix */
    matrix m;
    varray arr[3];        /* data, indices, indptr */
} csc_info;

static const char *const PARTS[3] = {"data", "indices", "indptr"};

static int static_key_csc; /* node_memo key */

static void info_free(void *value)
{
    csc_info *ci = value;
    if (ci)
        for (int i = 0; i < 3; i++)
            h5za_varray_clear(&ci->arr[i]);
    free(ci);
}

static void part_array(varray *a, int64_t len, const char *dtype, size_t item)
{
    a->ndim = 1;
    a->shape[0] = len;
    int64_t per = (int64_t)(CSC_CHUNK_BYTES / item);
    a->chunk[0] = len < per ? (len > 0 ? len : 1) : per;
    snprintf(a->dtype, sizeof a->dtype, "%s", dtype);
    a->item = item;
    a->zlib_level = -1;
    a->fd = -1;
    a->how = HOW_CSC;
}

static int info_build(node *n, void *ctx, void **value, cellar_error *err)
{
    (void)ctx;
    csc_info *ci = calloc(1, sizeof *ci);
    if (!ci)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
    *value = ci;
    cellar_error local;
    cellar_error_clear(&local);
    if (!matrix_is_sparse(n) || matrix_open(n, &ci->m, &local) || ci->m.layout != MATRIX_CSR ||
        !dtype_npy_descr(ci->m.dtype))
        return 0;
    const matrix *m = &ci->m;
    part_array(&ci->arr[0], m->nnz, dtype_npy_descr(m->dtype), dtype_size(m->dtype));
    if (m->shape[0] < ((int64_t)1 << 31))
        part_array(&ci->arr[1], m->nnz, "<i4", 4);
    else if (m->shape[0] < ((int64_t)1 << 32))
        part_array(&ci->arr[1], m->nnz, "<u4", 4);
    else
        part_array(&ci->arr[1], m->nnz, "<i8", 8);
    part_array(&ci->arr[2], m->shape[1] + 1, "<i8", 8);
    for (int i = 0; i < 3; i++) {
        ci->arr[i].fill_value = json_integer(0);
        if (!ci->arr[i].fill_value)
            return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
    }
    ci->ok = 1;
    return 0;
}

static const csc_info *info_of(node *n)
{
    void *value = NULL;
    cellar_error err;
    cellar_error_clear(&err);
    if (node_memo(n, &static_key_csc, info_build, NULL, info_free, &value, &err))
        return NULL;
    const csc_info *ci = value;
    return ci->ok ? ci : NULL;
}

int h5zc_group(h5zarr_src *v, node *n, vnode *out)
{
    if (!v->opt.csc || !matrix_is_sparse(n) || !info_of(n))
        return 0;
    memset(out, 0, sizeof *out);
    out->kind = VK_GROUP;
    out->src = VS_CSC;
    out->h5 = n;
    return 1;
}

int h5zc_child(h5zarr_src *v, const vnode *parent, const char *name, vnode *out)
{
    (void)v;
    memset(out, 0, sizeof *out);
    const csc_info *ci = info_of(parent->h5);
    for (int i = 0; ci && i < 3; i++) {
        if (!strcmp(name, PARTS[i])) {
            out->kind = VK_ARRAY;
            out->src = VS_CSC_ARRAY;
            out->h5 = parent->h5;
            out->part = i;
            out->arr = &ci->arr[i];
        }
    }
    return 0;
}

json_t *h5zc_attrs(const vnode *v)
{
    if (v->src == VS_CSC_ARRAY)
        return json_object();
    json_t *attrs = json_deep_copy(node_attrs(v->h5));
    if (!attrs)
        return NULL;
    if (json_object_get(attrs, "encoding-type"))
        json_object_set_new(attrs, "encoding-type", json_string("csc_matrix"));
    if (json_object_get(attrs, "h5sparse_format"))
        json_object_set_new(attrs, "h5sparse_format", json_string("csc"));
    return attrs;
}

/* Runs a build at once, in the calling thread (no background workers). */
static int run_now(void *ctx, void (*fn)(void *), void *arg)
{
    (void)ctx;
    fn(arg);
    return 0;
}

static double now_seconds(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* The column index of m, waiting for its build. */
static int index_of(h5zarr_src *v, const matrix *m, const matrix_csc **out, cellar_error *err)
{
    column_index_options opts = v->opt.index;
    if (!opts.submit)
        opts.submit = run_now;
    double deadline = now_seconds() + v->opt.index_wait_seconds;
    for (;;) {
        const column_index *ci = NULL;
        column_index_state state;
        size_t bytes = 0;
        int rc = column_index_get(v->s, m, &opts, &ci, &state, &bytes, err);
        if (rc)
            return rc;
        switch (state) {
        case COLUMN_INDEX_READY: *out = column_index_csc(ci); return 0;
        case COLUMN_INDEX_OVER_LIMIT:
            return cellar_fail(err, CELLAR_ETOOBIG,
                               "the CSC view of '%s' needs its column index, which would take %zu "
                               "bytes, over --column-index-max-bytes (or out of proportion to "
                               "the matrix): read it under zarr/",
                               node_path(m->element), bytes);
        case COLUMN_INDEX_FAILED:
            return cellar_fail(err, CELLAR_EFORMAT, "the column index of '%s' could not be built",
                               node_path(m->element));
        default: break;
        }
        if (now_seconds() > deadline)
            return cellar_fail(err, CELLAR_EUNAVAILABLE,
                               "the column index of '%s' is still being built; retry",
                               node_path(m->element));
        struct timespec pause = {0, 20 * 1000 * 1000};
        nanosleep(&pause, NULL);
    }
}

int h5zc_chunk(h5zarr_src *v, const vnode *n, const int64_t *cidx, vchunk *out, cellar_error *err)
{
    const csc_info *info = info_of(n->h5);
    if (!info)
        return cellar_fail(err, CELLAR_EINTERNAL, "'%s' is no CSR matrix", node_path(n->h5));
    const matrix_csc *c = NULL;
    int rc = index_of(v, &info->m, &c, err);
    if (rc)
        return rc;
    const matrix *m = &info->m;
    if (c->nnz != m->nnz || c->n_cols != m->shape[1] || dtype_size(c->dtype) != info->arr[0].item)
        return cellar_fail(err, CELLAR_EFORMAT,
                           "the column index of '%s' does not match the matrix (its indptr ends at "
                           "%lld of %lld stored values)",
                           node_path(n->h5), (long long)c->nnz, (long long)m->nnz);
    const varray *a = n->arr;
    int64_t first = cidx[0] * a->chunk[0], len = a->shape[0];
    int64_t inside = len - first < a->chunk[0] ? len - first : a->chunk[0];
    size_t bytes = (size_t)a->chunk[0] * a->item;
    char *p = buf_reserve(&out->bytes, bytes);
    if (!p)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
    memset(p, 0, bytes);
    size_t used = (size_t)inside * a->item;
    if (n->part == 0)
        memcpy(p, (const char *)c->values + (size_t)first * a->item, used);
    else if (n->part == 2)
        memcpy(p, c->colptr + first, used);
    else if (c->rows32 && a->item == 4)
        memcpy(p, c->rows32 + first, used); /* below 2^31 rows: the same bits as int32 */
    else if (c->rows32)
        for (int64_t i = 0; i < inside; i++) {
            int64_t r = c->rows32[first + i];
            memcpy(p + (size_t)i * 8, &r, 8);
        }
    else
        memcpy(p, c->rows64 + first, used);
    out->bytes.len = bytes;
    return 0;
}
