#include "storage/anndata/matrix.h"

#include <stdlib.h>
#include <string.h>

#include "common/numfmt.h"
#include "common/satmath.h"
#include "storage/anndata/anndata.h"

/* Selected major positions whose indptr bounds are read at once. */
#define BOUNDS_BLOCK 65536
/* Minor selections up to this many items are matched by binary search;
 * longer ones through a table over the whole axis, unless that table (8
 * bytes a position of an axis whose length is a shape's claim) would be
 * far larger than the selection itself. */
#define SMALL_MAP_MAX 64
#define TABLE_FREE_POSITIONS ((int64_t)1 << 16)
#define TABLE_POSITIONS_PER_ITEM 8

/* Axis positions and output indexes sorted together. */
typedef struct pos_out {
    int64_t pos, out;
} pos_out;

static int pos_out_cmp(const void *x, const void *y)
{
    const pos_out *a = x, *b = y;
    if (a->pos != b->pos)
        return a->pos < b->pos ? -1 : 1;
    return a->out < b->out ? -1 : a->out > b->out;
}

const char *matrix_layout_name(matrix_layout l)
{
    switch (l) {
    case MATRIX_DENSE: return "dense";
    case MATRIX_CSR: return "csr";
    case MATRIX_CSC: return "csc";
    default: return "unknown";
    }
}

static matrix_layout sparse_layout(const node *n)
{
    const char *enc = element_encoding(n);
    if (enc && strcmp(enc, "csr_matrix") == 0)
        return MATRIX_CSR;
    if (enc && strcmp(enc, "csc_matrix") == 0)
        return MATRIX_CSC;
    if (enc)
        return 0;
    const char *legacy = node_attr_string(n, "h5sparse_format");
    if (legacy && strcmp(legacy, "csr") == 0)
        return MATRIX_CSR;
    if (legacy && strcmp(legacy, "csc") == 0)
        return MATRIX_CSC;
    return 0;
}

int matrix_is_sparse(const node *n)
{
    return node_get_info(n)->type == NODE_GROUP && sparse_layout(n) != 0;
}

static int sparse_part(node *g, const char *name, int integer, node **out, cellar_error *err)
{
    node *c = node_child_opt(g, name);
    if (!c)
        return cellar_fail(err, CELLAR_EFORMAT, "sparse matrix '%s' has no '%s'", node_path(g),
                           name);
    const node_info *ci = node_get_info(c);
    if (ci->type != NODE_ARRAY || ci->ndim != 1 || !dtype_is_numeric(ci->dtype) ||
        (integer && !dtype_is_integer(ci->dtype)))
        return cellar_fail(err, CELLAR_EFORMAT, "'%s' of sparse matrix '%s' is not a 1-D %s array",
                           name, node_path(g), integer ? "integer" : "numeric");
    *out = c;
    return 0;
}

static int open_sparse(node *n, matrix_layout layout, matrix *out, cellar_error *err)
{
    const json_t *shape = json_object_get(node_attrs(n), "shape");
    if (!shape)
        shape = json_object_get(node_attrs(n), "h5sparse_shape");
    if (!json_is_array(shape) || json_array_size(shape) != 2 ||
        !json_is_number(json_array_get(shape, 0)) || !json_is_number(json_array_get(shape, 1)))
        return cellar_fail(err, CELLAR_EFORMAT, "sparse matrix '%s' has no 2-entry shape",
                           node_path(n));
    for (int d = 0; d < 2; d++) {
        double v = json_number_value(json_array_get(shape, (size_t)d));
        if (!(v >= 0 && v < 9.0e18))
            return cellar_fail(err, CELLAR_EFORMAT, "sparse matrix '%s' has a bad shape",
                               node_path(n));
        out->shape[d] = (int64_t)v;
    }
    int rc = sparse_part(n, "data", 0, &out->data, err);
    if (!rc)
        rc = sparse_part(n, "indices", 1, &out->indices, err);
    if (!rc)
        rc = sparse_part(n, "indptr", 1, &out->indptr, err);
    if (rc)
        return rc;
    out->layout = layout;
    out->ndim = 2;
    out->dtype = node_get_info(out->data)->dtype;
    out->nnz = node_get_info(out->data)->shape[0];
    int64_t n_major = layout == MATRIX_CSR ? out->shape[0] : out->shape[1];
    if (node_get_info(out->indices)->shape[0] != out->nnz)
        return cellar_fail(err, CELLAR_EFORMAT,
                           "sparse matrix '%s': indices and data differ in length", node_path(n));
    if (node_get_info(out->indptr)->shape[0] != n_major + 1)
        return cellar_fail(err, CELLAR_EFORMAT,
                           "sparse matrix '%s': indptr has %lld entries, expected %lld",
                           node_path(n), (long long)node_get_info(out->indptr)->shape[0],
                           (long long)(n_major + 1));
    return 0;
}

int matrix_open(node *n, matrix *out, cellar_error *err)
{
    memset(out, 0, sizeof *out);
    out->element = n;
    const node_info *info = node_get_info(n);
    if (info->type == NODE_GROUP) {
        matrix_layout l = sparse_layout(n);
        if (!l) {
            const char *enc = element_encoding(n);
            return cellar_fail(err, CELLAR_EFORMAT, "'%s' is not a matrix (encoding %s)",
                               node_path(n), enc ? enc : "none");
        }
        return open_sparse(n, l, out, err);
    }
    if (info->ndim < 1 || info->ndim > 2)
        return cellar_fail(err, CELLAR_EFORMAT, "'%s' is a %d-D array; matrices are 1-D or 2-D",
                           node_path(n), info->ndim);
    if (!dtype_is_numeric(info->dtype))
        return cellar_fail(err, CELLAR_EFORMAT, "'%s' holds %s values, not numbers",
                           node_path(n), dtype_name(info->dtype));
    out->layout = MATRIX_DENSE;
    out->ndim = info->ndim;
    out->shape[0] = info->shape[0];
    out->shape[1] = info->ndim == 2 ? info->shape[1] : 1;
    out->dtype = info->dtype;
    return 0;
}

/* ---- integer arrays of any stored width ---- */

/* Widens n values of integer kind dt stored at the start of buf to int64 in
 * place (back to front, so no value is overwritten before it is read).
 * Fails for uint64 values over INT64_MAX. */
static int widen_in_place(void *buf, dtype_kind dt, int64_t n)
{
    int64_t *out = buf;
    for (int64_t i = n - 1; i >= 0; i--) {
        int64_t v;
        switch (dt) {
        case DT_INT8: v = ((const int8_t *)buf)[i]; break;
        case DT_INT16: v = ((const int16_t *)buf)[i]; break;
        case DT_INT32: v = ((const int32_t *)buf)[i]; break;
        case DT_UINT8: v = ((const uint8_t *)buf)[i]; break;
        case DT_UINT16: v = ((const uint16_t *)buf)[i]; break;
        case DT_UINT32: v = ((const uint32_t *)buf)[i]; break;
        case DT_UINT64: {
            uint64_t u = ((const uint64_t *)buf)[i];
            if (u > INT64_MAX)
                return -1;
            v = (int64_t)u;
            break;
        }
        default: v = ((const int64_t *)buf)[i]; break;
        }
        out[i] = v;
    }
    return 0;
}

/* Reads the selected positions of a 1-D integer array as int64. */
static int read_i64(node *n, const dim_sel *sel, int64_t *out, cellar_error *err)
{
    if (sel->count == 0)
        return 0;
    dtype_kind dt = node_get_info(n)->dtype;
    int rc = node_read(n, sel, out, (size_t)sel->count * dtype_size(dt), err);
    if (rc)
        return rc;
    if (widen_in_place(out, dt, sel->count))
        return cellar_fail(err, CELLAR_EFORMAT, "'%s' holds a value over 2^63", node_path(n));
    return 0;
}

static int sel_is_all(const dim_sel *s, int64_t length)
{
    return !s->index && s->step == 1 && s->start == 0 && s->count == length;
}

/* ---- minor axis maps: source position -> output positions ---- */

typedef enum { MAP_ALL = 1, MAP_SLICE, MAP_SMALL, MAP_TABLE } map_kind;

typedef struct axis_map {
    map_kind kind;
    const dim_sel *sel;
    int64_t length;
    /* MAP_SMALL: pairs sorted by position */
    int64_t *pos, *outi;
    int64_t n;
    /* MAP_TABLE: first[position] = first output index or -1, next[out] */
    int64_t *first, *next;
} axis_map;

static void axis_map_free(axis_map *m)
{
    free(m->pos);
    free(m->outi);
    free(m->first);
    free(m->next);
    memset(m, 0, sizeof *m);
}

static int axis_map_init(axis_map *m, const dim_sel *sel, int64_t length, cellar_error *err)
{
    memset(m, 0, sizeof *m);
    m->sel = sel;
    m->length = length;
    if (sel_is_all(sel, length)) {
        m->kind = MAP_ALL;
        return 0;
    }
    if (!sel->index) {
        m->kind = MAP_SLICE;
        return 0;
    }
    int64_t n = sel->count;
    int table_fits = length <= TABLE_FREE_POSITIONS ||
                     n >= (length - TABLE_FREE_POSITIONS) / TABLE_POSITIONS_PER_ITEM;
    if (n > SMALL_MAP_MAX && !table_fits) {
        /* Sorted pairs: memory of the selection's size, whatever the axis
         * claims. */
        m->kind = MAP_SMALL;
        m->n = n;
        m->pos = malloc((size_t)n * sizeof *m->pos);
        m->outi = malloc((size_t)n * sizeof *m->outi);
        pos_out *t = malloc((size_t)n * sizeof *t);
        if (!m->pos || !m->outi || !t) {
            free(t);
            goto oom;
        }
        for (int64_t i = 0; i < n; i++)
            t[i] = (pos_out){sel->index[i], i};
        qsort(t, (size_t)n, sizeof *t, pos_out_cmp);
        for (int64_t i = 0; i < n; i++) {
            m->pos[i] = t[i].pos;
            m->outi[i] = t[i].out;
        }
        free(t);
        return 0;
    }
    if (n <= SMALL_MAP_MAX) {
        m->kind = MAP_SMALL;
        m->n = n;
        m->pos = malloc((size_t)(n ? n : 1) * sizeof *m->pos);
        m->outi = malloc((size_t)(n ? n : 1) * sizeof *m->outi);
        if (!m->pos || !m->outi)
            goto oom;
        /* Insertion sort by position, stable: duplicates keep their order. */
        for (int64_t i = 0; i < n; i++) {
            int64_t p = sel->index[i], k = i;
            while (k > 0 && m->pos[k - 1] > p) {
                m->pos[k] = m->pos[k - 1];
                m->outi[k] = m->outi[k - 1];
                k--;
            }
            m->pos[k] = p;
            m->outi[k] = i;
        }
        return 0;
    }
    m->kind = MAP_TABLE;
    m->first = malloc((size_t)length * sizeof *m->first);
    m->next = malloc((size_t)n * sizeof *m->next);
    if (!m->first || !m->next)
        goto oom;
    memset(m->first, 0xff, (size_t)length * sizeof *m->first);
    for (int64_t i = n - 1; i >= 0; i--) {
        int64_t p = sel->index[i];
        m->next[i] = m->first[p];
        m->first[p] = i;
    }
    return 0;
oom:
    axis_map_free(m);
    return cellar_fail(err, CELLAR_ENOMEM, "out of memory mapping a selection");
}

/* The first output index of source position p (-1 when p is not selected);
 * *it continues with axis_map_next. */
static int64_t axis_map_first(const axis_map *m, int64_t p, int64_t *it)
{
    switch (m->kind) {
    case MAP_ALL: *it = -1; return p;
    case MAP_SLICE: {
        const dim_sel *s = m->sel;
        *it = -1;
        if (s->count == 0)
            return -1;
        int64_t d = p - s->start;
        if (d % s->step)
            return -1;
        int64_t k = d / s->step;
        return k >= 0 && k < s->count ? k : -1;
    }
    case MAP_SMALL: {
        int64_t lo = 0, hi = m->n;
        while (lo < hi) {
            int64_t mid = lo + (hi - lo) / 2;
            if (m->pos[mid] < p)
                lo = mid + 1;
            else
                hi = mid;
        }
        if (lo == m->n || m->pos[lo] != p)
            return -1;
        *it = lo;
        return m->outi[lo];
    }
    default: {
        int64_t o = m->first[p];
        *it = o;
        return o;
    }
    }
}

static int64_t axis_map_next(const axis_map *m, int64_t *it)
{
    if (*it < 0)
        return -1;
    if (m->kind == MAP_SMALL) {
        int64_t k = *it + 1;
        if (k >= m->n || m->pos[k] != m->pos[*it])
            return -1;
        *it = k;
        return m->outi[k];
    }
    int64_t o = m->next[*it];
    *it = o;
    return o;
}

/* ---- sources: the stored structure, or a column index ---- */

typedef struct sparse_src {
    const matrix *m;           /* node-backed, or */
    const matrix_csc *ci;    /* memory-backed (major = columns) */
    int64_t n_major, n_minor, nnz;
    dtype_kind dtype;
} sparse_src;

static void src_from_matrix(sparse_src *s, const matrix *m)
{
    memset(s, 0, sizeof *s);
    s->m = m;
    s->n_major = m->layout == MATRIX_CSR ? m->shape[0] : m->shape[1];
    s->n_minor = m->layout == MATRIX_CSR ? m->shape[1] : m->shape[0];
    s->nnz = m->nnz;
    s->dtype = m->dtype;
}

static void src_from_index(sparse_src *s, const matrix_csc *ci)
{
    memset(s, 0, sizeof *s);
    s->ci = ci;
    s->n_major = ci->n_cols;
    s->n_minor = ci->n_rows;
    s->nnz = ci->nnz;
    s->dtype = ci->dtype;
}

/* Bounds [lo, hi) of the selected major positions i0 .. i0+n-1. */
static int src_bounds(const sparse_src *s, const dim_sel *major, int64_t i0, int64_t n,
                      int64_t *lo, int64_t *hi, cellar_error *err)
{
    if (n == 0)
        return 0;
    if (s->ci) {
        for (int64_t k = 0; k < n; k++) {
            int64_t p = dim_sel_at(major, i0 + k);
            lo[k] = s->ci->colptr[p];
            hi[k] = s->ci->colptr[p + 1];
        }
        return 0;
    }
    node *ip = s->m->indptr;
    int rc;
    if (!major->index && major->step == 1) {
        /* One contiguous read of n + 1 entries; hi is lo shifted by one. */
        dim_sel r = dim_sel_range(dim_sel_at(major, i0), n + 1);
        int64_t *tmp = malloc((size_t)(n + 1) * sizeof *tmp);
        if (!tmp)
            return cellar_fail(err, CELLAR_ENOMEM, "out of memory reading indptr");
        rc = read_i64(ip, &r, tmp, err);
        if (!rc) {
            memcpy(lo, tmp, (size_t)n * sizeof *lo);
            memcpy(hi, tmp + 1, (size_t)n * sizeof *hi);
        }
        free(tmp);
    } else if (!major->index) {
        dim_sel a = {dim_sel_at(major, i0), major->step, n, NULL};
        dim_sel b = {dim_sel_at(major, i0) + 1, major->step, n, NULL};
        rc = read_i64(ip, &a, lo, err);
        if (!rc)
            rc = read_i64(ip, &b, hi, err);
    } else {
        /* hi doubles as the list of positions + 1 before it is read over. */
        int64_t *pos = malloc((size_t)n * sizeof *pos);
        if (!pos)
            return cellar_fail(err, CELLAR_ENOMEM, "out of memory reading indptr");
        for (int64_t k = 0; k < n; k++)
            pos[k] = major->index[i0 + k];
        dim_sel a = {0, 1, n, pos};
        rc = read_i64(ip, &a, lo, err);
        for (int64_t k = 0; k < n; k++)
            pos[k]++;
        if (!rc)
            rc = read_i64(ip, &a, hi, err);
        free(pos);
    }
    if (rc)
        return rc;
    for (int64_t k = 0; k < n; k++)
        if (lo[k] < 0 || lo[k] > hi[k] || hi[k] > s->nnz)
            return cellar_fail(err, CELLAR_EFORMAT,
                               "indptr of '%s' is not monotonic within [0, %lld]",
                               node_path(s->m->element), (long long)s->nnz);
    return 0;
}

/* Minor positions of entries [start, start+count). */
static int src_minor(const sparse_src *s, int64_t start, int64_t count, int64_t *out,
                     cellar_error *err)
{
    if (s->ci) {
        for (int64_t k = 0; k < count; k++) {
            out[k] = matrix_csc_row(s->ci, start + k);
            if (out[k] < 0 || out[k] >= s->n_minor)
                return cellar_fail(err, CELLAR_EFORMAT, "a column index holds row %lld of %lld",
                                   (long long)out[k], (long long)s->n_minor);
        }
        return 0;
    }
    dim_sel r = dim_sel_range(start, count);
    int rc = read_i64(s->m->indices, &r, out, err);
    if (rc)
        return rc;
    for (int64_t k = 0; k < count; k++)
        if (out[k] < 0 || out[k] >= s->n_minor)
            return cellar_fail(err, CELLAR_EFORMAT,
                               "indices of '%s' hold %lld, outside an axis of length %lld",
                               node_path(s->m->element), (long long)out[k],
                               (long long)s->n_minor);
    return 0;
}

static int src_values(const sparse_src *s, int64_t start, int64_t count, void *out,
                      cellar_error *err)
{
    size_t es = dtype_size(s->dtype);
    if (s->ci) {
        memcpy(out, (const char *)s->ci->values + (size_t)start * es, (size_t)count * es);
        return 0;
    }
    dim_sel r = dim_sel_range(start, count);
    return node_read(s->m->data, &r, out, (size_t)count * es, err);
}

/* ---- the engine ---- */

/* Called for every selected entry: output major and minor positions and a
 * pointer to the value. */
typedef int (*emit_fn)(void *ctx, int64_t out_major, int64_t out_minor, const char *value);

typedef struct engine {
    const sparse_src *src;
    const dim_sel *major;
    const axis_map *minor;
    emit_fn emit;
    void *ctx;
    size_t es;
    int64_t *lo, *hi;      /* bounds of a block of major positions */
    int64_t *idx;          /* MATRIX_BLOCK_ENTRIES minor positions */
    char *vals;            /* MATRIX_BLOCK_ENTRIES values */
} engine;

/* Entries [start, end) belong to the block's major positions k0..k1-1 (in
 * order, contiguous in storage); base is the block's first selection index. */
static int engine_piece(engine *e, int64_t base, int64_t k0, int64_t k1, int64_t start,
                        int64_t end, cellar_error *err)
{
    int64_t count = end - start;
    int rc = src_minor(e->src, start, count, e->idx, err);
    if (rc)
        return rc;
    int any = e->minor->kind == MAP_ALL;
    for (int64_t i = 0; i < count && !any; i++) {
        int64_t it;
        any = axis_map_first(e->minor, e->idx[i], &it) >= 0;
    }
    if (!any)
        return 0;
    rc = src_values(e->src, start, count, e->vals, err);
    if (rc)
        return rc;
    int64_t k = k0;
    for (int64_t i = 0; i < count; i++) {
        int64_t p = start + i;
        while (k < k1 && e->hi[k] <= p)
            k++;
        int64_t it;
        for (int64_t o = axis_map_first(e->minor, e->idx[i], &it); o >= 0;
             o = axis_map_next(e->minor, &it)) {
            rc = e->emit(e->ctx, base + k, o, e->vals + (size_t)i * e->es);
            if (rc)
                return cellar_fail(err, rc, rc == CELLAR_ENOMEM ? "out of memory reading '%s'"
                                   : "the selection of '%s' holds too many stored values",
                                   e->src->m ? node_path(e->src->m->element) : "a column index");
        }
    }
    return 0;
}

static int engine_block(engine *e, int64_t i0, int64_t n, cellar_error *err)
{
    int rc = src_bounds(e->src, e->major, i0, n, e->lo, e->hi, err);
    if (rc)
        return rc;
    int64_t k = 0;
    while (k < n) {
        if (e->lo[k] == e->hi[k]) {
            k++;
            continue;
        }
        /* A run of positions whose ranges follow each other in storage. */
        int64_t start = e->lo[k], end = e->hi[k], j = k + 1;
        while (j < n && e->lo[j] == end && e->hi[j] - start <= MATRIX_BLOCK_ENTRIES) {
            end = e->hi[j];
            j++;
        }
        for (int64_t s = start; s < end; s += MATRIX_BLOCK_ENTRIES) {
            int64_t t = end - s > MATRIX_BLOCK_ENTRIES ? s + MATRIX_BLOCK_ENTRIES : end;
            rc = engine_piece(e, i0, k, j, s, t, err);
            if (rc)
                return rc;
        }
        k = j;
    }
    return 0;
}

static int engine_run(const sparse_src *src, const dim_sel *major, const axis_map *minor,
                      emit_fn emit, void *ctx, cellar_error *err)
{
    engine e = {src, major, minor, emit, ctx, dtype_size(src->dtype), NULL, NULL, NULL, NULL};
    int rc = 0;
    if (major->count == 0 || minor->sel->count == 0 || src->nnz == 0)
        return 0;
    e.lo = malloc(BOUNDS_BLOCK * sizeof *e.lo);
    e.hi = malloc(BOUNDS_BLOCK * sizeof *e.hi);
    e.idx = malloc((size_t)MATRIX_BLOCK_ENTRIES * sizeof *e.idx);
    e.vals = malloc((size_t)MATRIX_BLOCK_ENTRIES * e.es);
    if (!e.lo || !e.hi || !e.idx || !e.vals) {
        rc = cellar_fail(err, CELLAR_ENOMEM, "out of memory reading a sparse matrix");
        goto done;
    }
    for (int64_t i0 = 0; i0 < major->count && !rc; i0 += BOUNDS_BLOCK) {
        int64_t n = major->count - i0 > BOUNDS_BLOCK ? BOUNDS_BLOCK : major->count - i0;
        rc = engine_block(&e, i0, n, err);
    }
done:
    free(e.lo);
    free(e.hi);
    free(e.idx);
    free(e.vals);
    return rc;
}

/* Whether a CSR read of (rows, cols) should go through the column index:
 * columns are selected and their expected entries are fewer than the
 * selected rows'. */
static int use_index(const matrix *m, const dim_sel *rows, const dim_sel *cols,
                     const matrix_csc *ci)
{
    if (!ci || m->layout != MATRIX_CSR || sel_is_all(cols, m->shape[1]))
        return 0;
    if (ci->n_rows != m->shape[0] || ci->n_cols != m->shape[1] || ci->nnz != m->nnz)
        return 0;
    if (sel_is_all(rows, m->shape[0]))
        return 1;
    double per_col = (double)m->nnz / (double)(m->shape[1] ? m->shape[1] : 1);
    double per_row = (double)m->nnz / (double)(m->shape[0] ? m->shape[0] : 1);
    return (double)cols->count * per_col < (double)rows->count * per_row;
}

/* Runs the engine for a sparse read; emit gets (out_row, out_col) through
 * the swap flag the caller's context reads. */
typedef struct plan {
    sparse_src src;
    const dim_sel *major, *minor_sel;
    int64_t n_minor;
    int transposed; /* major is the column axis */
} plan;

static void plan_make(plan *p, const matrix *m, const dim_sel *rows, const dim_sel *cols,
                      const matrix_csc *ci)
{
    if (use_index(m, rows, cols, ci)) {
        src_from_index(&p->src, ci);
        p->transposed = 1;
    } else {
        src_from_matrix(&p->src, m);
        p->transposed = m->layout == MATRIX_CSC;
    }
    p->major = p->transposed ? cols : rows;
    p->minor_sel = p->transposed ? rows : cols;
    p->n_minor = p->src.n_minor;
}

/* ---- counting ---- */

int matrix_count_nnz(const matrix *m, const dim_sel *rows, const dim_sel *cols,
                     const matrix_csc *ci, uint64_t *nnz, cellar_error *err)
{
    uint64_t cells = sat_mul_u64((uint64_t)rows->count, (uint64_t)cols->count);
    *nnz = cells;
    if (m->layout == MATRIX_DENSE || cells == 0)
        return 0;
    plan p;
    plan_make(&p, m, rows, cols, ci);
    int64_t *lo = malloc(BOUNDS_BLOCK * sizeof *lo), *hi = malloc(BOUNDS_BLOCK * sizeof *hi);
    int rc = 0;
    if (!lo || !hi) {
        rc = cellar_fail(err, CELLAR_ENOMEM, "out of memory counting a sparse selection");
        goto done;
    }
    uint64_t sum = 0;
    if (sel_is_all(p.major, p.src.n_major) && !p.src.ci) {
        sum = (uint64_t)p.src.nnz;
    } else {
        for (int64_t i0 = 0; i0 < p.major->count && !rc; i0 += BOUNDS_BLOCK) {
            int64_t n = p.major->count - i0 > BOUNDS_BLOCK ? BOUNDS_BLOCK : p.major->count - i0;
            rc = src_bounds(&p.src, p.major, i0, n, lo, hi, err);
            for (int64_t k = 0; k < n && !rc; k++)
                sum += (uint64_t)(hi[k] - lo[k]);
        }
    }
    if (!rc)
        *nnz = sum < cells ? sum : cells;
done:
    free(lo);
    free(hi);
    return rc;
}

/* ---- dense answers ---- */

/* Entries stored more than once at the same (row, column) add up in a dense
 * answer, as scipy's toarray() adds them: integers wrap around at their
 * width, bools are or-ed, float16 sums are rounded to float16 at each step
 * (numpy's float16 addition).  The answer starts zero-filled, so a single
 * entry lands unchanged (but -0.0 becomes 0.0, as in scipy). */
typedef void (*add_fn)(char *dst, const char *src);

#define DEFINE_ADD(fname, T, U)                                                           \
    static void fname(char *dst, const char *src)                                         \
    {                                                                                     \
        T a, b;                                                                           \
        memcpy(&a, dst, sizeof a);                                                        \
        memcpy(&b, src, sizeof b);                                                        \
        a = (T)((U)a + (U)b);                                                             \
        memcpy(dst, &a, sizeof a);                                                        \
    }

DEFINE_ADD(add_i8, int8_t, uint8_t)
DEFINE_ADD(add_i16, int16_t, uint16_t)
DEFINE_ADD(add_i32, int32_t, uint32_t)
DEFINE_ADD(add_i64, int64_t, uint64_t)
DEFINE_ADD(add_u8, uint8_t, uint8_t)
DEFINE_ADD(add_u16, uint16_t, uint16_t)
DEFINE_ADD(add_u32, uint32_t, uint32_t)
DEFINE_ADD(add_u64, uint64_t, uint64_t)
DEFINE_ADD(add_f32, float, float)
DEFINE_ADD(add_f64, double, double)

static void add_bool(char *dst, const char *src)
{
    *dst = (char)(*dst || *src);
}

/* binary32 -> binary16, round to nearest even like numpy (the widening is
 * common/numfmt.h's half_to_float). */
static uint16_t half_narrow(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    uint32_t sign = (x >> 16) & 0x8000u, e = (x >> 23) & 0xffu, m = x & 0x7fffffu;
    if (e == 0xff)
        return (uint16_t)(sign | 0x7c00u | (m ? 0x200u | (m >> 13) : 0));
    int32_t he = (int32_t)e - 127 + 15;
    if (he >= 0x1f)
        return (uint16_t)(sign | 0x7c00u);
    uint32_t shift, base;
    if (he <= 0) {
        if (he < -10)
            return (uint16_t)sign;
        m |= 0x800000u;
        shift = (uint32_t)(14 - he);
        base = sign;
    } else {
        shift = 13;
        base = sign | ((uint32_t)he << 10);
    }
    uint32_t hm = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    uint32_t h = base + hm; /* a carry out of the mantissa moves into the exponent */
    if (rem > half || (rem == half && (hm & 1)))
        h++;
    return (uint16_t)h;
}

static void add_f16(char *dst, const char *src)
{
    uint16_t a, b;
    memcpy(&a, dst, sizeof a);
    memcpy(&b, src, sizeof b);
    a = half_narrow(half_to_float(a) + half_to_float(b));
    memcpy(dst, &a, sizeof a);
}

static add_fn add_for(dtype_kind dt)
{
    switch (dt) {
    case DT_BOOL: return add_bool;
    case DT_INT8: return add_i8;
    case DT_INT16: return add_i16;
    case DT_INT32: return add_i32;
    case DT_INT64: return add_i64;
    case DT_UINT8: return add_u8;
    case DT_UINT16: return add_u16;
    case DT_UINT32: return add_u32;
    case DT_UINT64: return add_u64;
    case DT_FLOAT16: return add_f16;
    case DT_FLOAT32: return add_f32;
    case DT_FLOAT64: return add_f64;
    default: return NULL;
    }
}

typedef struct dense_sink {
    char *out;
    size_t es;
    int64_t n_cols;
    int transposed;
    add_fn add;
} dense_sink;

static int dense_emit(void *ctx, int64_t out_major, int64_t out_minor, const char *value)
{
    dense_sink *d = ctx;
    int64_t r = d->transposed ? out_minor : out_major;
    int64_t c = d->transposed ? out_major : out_minor;
    d->add(d->out + ((size_t)r * (size_t)d->n_cols + (size_t)c) * d->es, value);
    return 0;
}

/* Whole columns from the column index (a gene's column over every cell, the
 * visualizers' question): entries added straight into the answer, without
 * the engine's per-entry map lookup and indirect calls.  Returns 1 when it
 * did the read (*rc set), 0 when the selection or dtype is not one it
 * handles. */
#define DENSE_COLUMNS_LOOP(T, U)                                                          \
    do {                                                                                  \
        T *o = out;                                                                       \
        const T *v = ci->values;                                                          \
        for (int64_t k = lo; k < hi; k++) {                                               \
            int64_t r = matrix_csc_row(ci, k);                                          \
            if (r < 0 || r >= n_rows)                                                     \
                goto bad_row;                                                             \
            T *dst = o + (size_t)r * (size_t)n_cols + (size_t)c;                          \
            *dst = (T)((U)*dst + (U)v[k]);                                                \
        }                                                                                 \
    } while (0)

static int dense_columns_from_index(const matrix_csc *ci, const dim_sel *cols, void *out,
                                    int *rc, cellar_error *err)
{
    int64_t n_rows = ci->n_rows, n_cols = cols->count;
    switch (ci->dtype) {
    case DT_INT32: case DT_INT64: case DT_UINT32: case DT_UINT64:
    case DT_FLOAT32: case DT_FLOAT64: break;
    default: return 0;
    }
    for (int64_t c = 0; c < n_cols; c++) {
        int64_t j = dim_sel_at(cols, c);
        int64_t lo = ci->colptr[j], hi = ci->colptr[j + 1];
        switch (ci->dtype) {
        case DT_INT32: DENSE_COLUMNS_LOOP(int32_t, uint32_t); break;
        case DT_INT64: DENSE_COLUMNS_LOOP(int64_t, uint64_t); break;
        case DT_UINT32: DENSE_COLUMNS_LOOP(uint32_t, uint32_t); break;
        case DT_UINT64: DENSE_COLUMNS_LOOP(uint64_t, uint64_t); break;
        case DT_FLOAT32: DENSE_COLUMNS_LOOP(float, float); break;
        default: DENSE_COLUMNS_LOOP(double, double); break;
        }
    }
    *rc = 0;
    return 1;
bad_row:
    *rc = cellar_fail(err, CELLAR_EFORMAT, "a column index holds a row outside [0, %lld)",
                      (long long)n_rows);
    return 1;
}

#undef DENSE_COLUMNS_LOOP

int matrix_read_dense(const matrix *m, const dim_sel *rows, const dim_sel *cols,
                      const matrix_csc *ci, void *out, size_t out_bytes, cellar_error *err)
{
    size_t es = dtype_size(m->dtype);
    uint64_t cells = sat_mul_u64((uint64_t)rows->count, (uint64_t)cols->count);
    if (sat_mul_u64(cells, es) != out_bytes)
        return cellar_fail(err, CELLAR_EINTERNAL, "dense read of '%s': buffer size mismatch",
                           node_path(m->element));
    if (cells == 0)
        return 0;
    if (m->layout == MATRIX_DENSE) {
        dim_sel sel[2] = {*rows, *cols};
        return node_read(m->element, sel, out, out_bytes, err);
    }
    add_fn add = add_for(m->dtype);
    if (!add)
        return cellar_fail(err, CELLAR_EFORMAT, "sparse matrix '%s' holds %s values, not numbers",
                           node_path(m->element), dtype_name(m->dtype));
    memset(out, 0, out_bytes);
    plan p;
    plan_make(&p, m, rows, cols, ci);
    int rc;
    if (p.src.ci && sel_is_all(rows, m->shape[0]) &&
        dense_columns_from_index(p.src.ci, cols, out, &rc, err))
        return rc;
    axis_map minor;
    rc = axis_map_init(&minor, p.minor_sel, p.n_minor, err);
    if (rc)
        return rc;
    dense_sink d = {out, es, cols->count, p.transposed, add};
    rc = engine_run(&p.src, p.major, &minor, dense_emit, &d, err);
    axis_map_free(&minor);
    return rc;
}

/* ---- CSR answers ---- */

typedef struct coo_sink {
    int64_t *r, *c;
    char *v;
    int64_t n, cap;
    uint64_t max;
    size_t es;
    int transposed;
} coo_sink;

static int coo_emit(void *ctx, int64_t out_major, int64_t out_minor, const char *value)
{
    coo_sink *s = ctx;
    if (s->max && (uint64_t)s->n >= s->max)
        return CELLAR_ETOOBIG;
    if (s->n == s->cap) {
        int64_t cap = s->cap ? s->cap * 2 : 1024;
        int64_t *r = realloc(s->r, (size_t)cap * sizeof *r);
        if (r)
            s->r = r;
        int64_t *c = r ? realloc(s->c, (size_t)cap * sizeof *c) : NULL;
        if (c)
            s->c = c;
        char *v = c ? realloc(s->v, (size_t)cap * s->es) : NULL;
        if (!v)
            return CELLAR_ENOMEM;
        s->v = v;
        s->cap = cap;
    }
    s->r[s->n] = s->transposed ? out_minor : out_major;
    s->c[s->n] = s->transposed ? out_major : out_minor;
    memcpy(s->v + (size_t)s->n * s->es, value, s->es);
    s->n++;
    return 0;
}

/* Keys of at most this many per entry (and a free allowance) are counted;
 * more (nkeys is a selection's length along an axis whose length is a
 * shape's claim) are sorted by comparison, in memory of the entries'
 * size. */
#define COUNT_FREE_KEYS ((int64_t)1 << 16)
#define COUNT_KEYS_PER_ENTRY 4

/* Stable sort of perm by key[perm[i]], comparing. */
static int comparison_sort(int64_t *perm, int64_t n, const int64_t *key)
{
    pos_out *t = malloc((size_t)(n ? n : 1) * sizeof *t);
    if (!t)
        return -1;
    for (int64_t i = 0; i < n; i++)
        t[i] = (pos_out){key[perm[i]], i};
    qsort(t, (size_t)n, sizeof *t, pos_out_cmp);
    int64_t *tmp = malloc((size_t)(n ? n : 1) * sizeof *tmp);
    if (!tmp) {
        free(t);
        return -1;
    }
    for (int64_t i = 0; i < n; i++)
        tmp[i] = perm[t[i].out];
    memcpy(perm, tmp, (size_t)n * sizeof *perm);
    free(tmp);
    free(t);
    return 0;
}

/* Stable counting sort of perm by key[perm[i]] in [0, nkeys). */
static int counting_sort(int64_t *perm, int64_t n, const int64_t *key, int64_t nkeys)
{
    if (nkeys > COUNT_FREE_KEYS && (nkeys - COUNT_FREE_KEYS) / COUNT_KEYS_PER_ENTRY > n)
        return comparison_sort(perm, n, key);
    int64_t *count = calloc((size_t)nkeys + 1, sizeof *count);
    int64_t *tmp = malloc((size_t)(n ? n : 1) * sizeof *tmp);
    if (!count || !tmp) {
        free(count);
        free(tmp);
        return -1;
    }
    for (int64_t i = 0; i < n; i++)
        count[key[perm[i]] + 1]++;
    for (int64_t k = 0; k < nkeys; k++)
        count[k + 1] += count[k];
    for (int64_t i = 0; i < n; i++)
        tmp[count[key[perm[i]]]++] = perm[i];
    memcpy(perm, tmp, (size_t)n * sizeof *perm);
    free(count);
    free(tmp);
    return 0;
}

static int coo_to_csr(coo_sink *s, int64_t n_rows, int64_t n_cols, arena *a, matrix_csr *out,
                      cellar_error *err)
{
    int64_t n = s->n;
    out->indptr = arena_calloc(a, (size_t)n_rows + 1, sizeof *out->indptr);
    out->indices = arena_calloc(a, (size_t)(n ? n : 1), sizeof *out->indices);
    out->data = arena_calloc(a, (size_t)(n ? n : 1), s->es);
    int64_t *perm = malloc((size_t)(n ? n : 1) * sizeof *perm);
    int rc = 0;
    if (!out->indptr || !out->indices || !out->data || !perm) {
        rc = cellar_fail(err, CELLAR_ENOMEM, "out of memory building a CSR answer");
        goto done;
    }
    for (int64_t i = 0; i < n; i++)
        perm[i] = i;
    /* By column, then stably by row: rows in order, columns ascending. */
    if (counting_sort(perm, n, s->c, n_cols) || counting_sort(perm, n, s->r, n_rows)) {
        rc = cellar_fail(err, CELLAR_ENOMEM, "out of memory building a CSR answer");
        goto done;
    }
    for (int64_t i = 0; i < n; i++) {
        out->indptr[s->r[i] + 1]++;
        out->indices[i] = s->c[perm[i]];
        memcpy((char *)out->data + (size_t)i * s->es, s->v + (size_t)perm[i] * s->es, s->es);
    }
    for (int64_t r = 0; r < n_rows; r++)
        out->indptr[r + 1] += out->indptr[r];
    out->nnz = n;
done:
    free(perm);
    return rc;
}

int matrix_read_csr(const matrix *m, const dim_sel *rows, const dim_sel *cols,
                    const matrix_csc *ci, uint64_t max_nnz, arena *a, matrix_csr *out,
                    cellar_error *err)
{
    memset(out, 0, sizeof *out);
    out->n_rows = rows->count;
    out->n_cols = cols->count;
    out->dtype = m->dtype;
    if (m->layout == MATRIX_DENSE)
        return cellar_fail(err, CELLAR_EINVAL, "'%s' is dense: it has no CSR form",
                           node_path(m->element));
    plan p;
    plan_make(&p, m, rows, cols, ci);
    axis_map minor;
    int rc = axis_map_init(&minor, p.minor_sel, p.n_minor, err);
    if (rc)
        return rc;
    coo_sink s = {NULL, NULL, NULL, 0, 0, max_nnz, dtype_size(m->dtype), p.transposed};
    rc = engine_run(&p.src, p.major, &minor, coo_emit, &s, err);
    axis_map_free(&minor);
    if (!rc)
        rc = coo_to_csr(&s, rows->count, cols->count, a, out, err);
    free(s.r);
    free(s.c);
    free(s.v);
    return rc;
}

/* ---- CSR runs of whole rows ---- */

int matrix_csr_is_run(const matrix *m, const dim_sel *rows, const dim_sel *cols)
{
    return m->layout == MATRIX_CSR && !rows->index && (rows->step == 1 || rows->count <= 1) &&
           sel_is_all(cols, m->shape[1]);
}

int matrix_run_indptr(const matrix *m, const dim_sel *rows, int64_t *indptr, cellar_error *err)
{
    dim_sel r = dim_sel_range(rows->count ? rows->start : 0, rows->count + 1);
    int rc = read_i64(m->indptr, &r, indptr, err);
    if (rc)
        return rc;
    for (int64_t k = 0; k <= rows->count; k++)
        if (indptr[k] < (k ? indptr[k - 1] : 0) || indptr[k] > m->nnz)
            return cellar_fail(err, CELLAR_EFORMAT,
                               "indptr of '%s' is not monotonic within [0, %lld]",
                               node_path(m->element), (long long)m->nnz);
    return 0;
}

/* Checks the indices of a run: all in [0, n_cols) and ascending within each
 * row.  Flat passes over the whole range count out-of-range values and
 * descents (a descent is allowed only where a row starts, which one step
 * per row takes back).  int32 (the usual width) counts in int32 over pairs
 * in multiples of 16 with no early exit, a loop gcc vectorizes at -O2;
 * blocks of CHECK_BLOCK keep those counts from overflowing. */
#define CHECK_BLOCK ((int64_t)1 << 20)

static void pairs32(const int32_t *idx, int64_t len, int32_t nc, int64_t *descents,
                    int64_t *bad)
{
    int32_t d = 0, b = 0;
    for (int64_t k = 0; k < len; k++) {
        d -= idx[k + 1] < idx[k] ? -1 : 0;
        b -= (idx[k] < 0) | (idx[k] >= nc) ? -1 : 0;
    }
    *descents += d;
    *bad += b;
}

static void flat_counts32(const int32_t *idx, int64_t n, int32_t nc, int64_t *descents,
                          int64_t *bad)
{
    for (int64_t s = 0; s + 1 < n; s += CHECK_BLOCK) {
        int64_t e = n - 1 < s + CHECK_BLOCK ? n - 1 : s + CHECK_BLOCK;
        int64_t m = (e - s) & ~(int64_t)15;
        pairs32(idx + s, m, nc, descents, bad);
        for (int64_t k = s + m; k < e; k++) {
            *descents += idx[k + 1] < idx[k];
            *bad += (idx[k] < 0) | (idx[k] >= nc);
        }
    }
    if (n)
        *bad += (idx[n - 1] < 0) | (idx[n - 1] >= nc);
}

static void flat_counts64(const int64_t *idx, int64_t n, int64_t nc, int64_t *descents,
                          int64_t *bad)
{
    for (int64_t k = 0; k < n; k++) {
        *bad += (idx[k] < 0) | (idx[k] >= nc);
        if (k)
            *descents += idx[k] < idx[k - 1];
    }
}

/* 0, or -1 when an index is out of range; *ascending as above. */
static int check_run(const void *indices, dtype_kind idx_dt, const int64_t *indptr,
                     int64_t n_rows, int64_t n_cols, int *ascending)
{
    int64_t n = indptr[n_rows] - indptr[0], descents = 0, bad = 0;
    const int32_t *i32 = indices;
    const int64_t *i64 = indices;
    if (idx_dt == DT_INT32)
        flat_counts32(i32, n, (int32_t)n_cols, &descents, &bad);
    else
        flat_counts64(i64, n, n_cols, &descents, &bad);
    if (bad)
        return -1;
    /* Empty rows share their start with the next row: each start once. */
    for (int64_t i = 1, last = 0; i < n_rows; i++) {
        int64_t k = indptr[i] - indptr[0];
        if (k > last && k < n)
            descents -= idx_dt == DT_INT32 ? i32[k] < i32[k - 1] : i64[k] < i64[k - 1];
        last = k;
    }
    *ascending = descents == 0;
    return 0;
}

/* Indices of another stored width: through int64 blocks, narrowed. */
static int run_indices_widen(const matrix *m, int64_t lo, int64_t n, dtype_kind idx_dt,
                             void *out, cellar_error *err)
{
    int64_t *tmp = malloc((size_t)(n < MATRIX_BLOCK_ENTRIES ? n : MATRIX_BLOCK_ENTRIES) *
                          sizeof *tmp);
    int rc = 0;
    if (!tmp)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory reading indices");
    for (int64_t s = 0; s < n && !rc; s += MATRIX_BLOCK_ENTRIES) {
        int64_t c = n - s < MATRIX_BLOCK_ENTRIES ? n - s : MATRIX_BLOCK_ENTRIES;
        dim_sel r = dim_sel_range(lo + s, c);
        rc = read_i64(m->indices, &r, tmp, err);
        for (int64_t k = 0; k < c && !rc; k++) {
            /* out of range values fail the row check after narrowing */
            int64_t v = tmp[k] < 0 || tmp[k] >= m->shape[1] ? -1 : tmp[k];
            if (idx_dt == DT_INT32)
                ((int32_t *)out)[s + k] = (int32_t)v;
            else
                ((int64_t *)out)[s + k] = v;
        }
    }
    free(tmp);
    return rc;
}

int matrix_run_entries(const matrix *m, const int64_t *indptr, int64_t n_rows,
                       dtype_kind idx_dt, void *indices, void *data, int *ascending,
                       cellar_error *err)
{
    *ascending = 1;
    int64_t lo = indptr[0], n = indptr[n_rows] - indptr[0];
    size_t is = dtype_size(idx_dt);
    if ((idx_dt != DT_INT32 && idx_dt != DT_INT64) ||
        (idx_dt == DT_INT32 && m->shape[1] > INT32_MAX))
        return cellar_fail(err, CELLAR_EINTERNAL, "bad index type for '%s'",
                           node_path(m->element));
    if (n == 0)
        return 0;
    dim_sel r = dim_sel_range(lo, n);
    dtype_kind st = node_get_info(m->indices)->dtype;
    /* Same width: the stored bytes are the answer's (an unsigned value over
     * the signed maximum reads negative and fails the range check). */
    int rc = dtype_size(st) == is ? node_read(m->indices, &r, indices, (size_t)n * is, err)
                                  : run_indices_widen(m, lo, n, idx_dt, indices, err);
    if (rc)
        return rc;
    if (check_run(indices, idx_dt, indptr, n_rows, m->shape[1], ascending))
        return cellar_fail(err, CELLAR_EFORMAT,
                           "indices of '%s' hold a value outside an axis of length %lld",
                           node_path(m->element), (long long)m->shape[1]);
    return node_read(m->data, &r, data, (size_t)n * dtype_size(m->dtype), err);
}

/* ---- walking every entry ---- */

typedef struct walk_ctx {
    matrix_entry_fn fn;
    void *ctx;
    int csc;
} walk_ctx;

static int walk_emit(void *ctx, int64_t out_major, int64_t out_minor, const char *value)
{
    walk_ctx *w = ctx;
    return w->csc ? w->fn(w->ctx, out_minor, out_major, value)
                  : w->fn(w->ctx, out_major, out_minor, value);
}

int matrix_for_each(const matrix *m, matrix_entry_fn fn, void *ctx, cellar_error *err)
{
    if (m->layout == MATRIX_DENSE)
        return cellar_fail(err, CELLAR_EINVAL, "'%s' is dense: it has no stored entries",
                           node_path(m->element));
    sparse_src src;
    src_from_matrix(&src, m);
    dim_sel major = dim_sel_range(0, src.n_major), minor_sel = dim_sel_range(0, src.n_minor);
    axis_map minor;
    int rc = axis_map_init(&minor, &minor_sel, src.n_minor, err);
    if (rc)
        return rc;
    walk_ctx w = {fn, ctx, m->layout == MATRIX_CSC};
    rc = engine_run(&src, &major, &minor, walk_emit, &w, err);
    axis_map_free(&minor);
    return rc;
}
