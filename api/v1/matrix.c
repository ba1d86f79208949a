/* Matrix routes: {ad}/X, {ad}/layers/{name}, {ad}/obsm/{key}, {ad}/varm/{key},
 * {ad}/obsp/{key}, {ad}/varp/{key} (and raw/X, raw/varm/{key}).  A data
 * frame in obsm/varm is answered by api/v1/frame.c (api/v1/frame.h). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/satmath.h"
#include "api/encode/csv_out.h"
#include "api/v1/frame.h"
#include "api/v1/routes.h"
#include "api/encode/json_out.h"
#include "api/encode/npy_out.h"
#include "storage/anndata/anndata.h"
#include "storage/anndata/column_index.h"
#include "storage/anndata/matrix.h"

#define MATRIX_FORMATS                                                                    \
    ((1u << FORMAT_JSON) | (1u << FORMAT_CSV) | (1u << FORMAT_BIN) | (1u << FORMAT_NPY))

/* What names an axis of an element: the obs or var index, or positions only. */
typedef enum axis_kind { AXIS_POSITIONS = 0, AXIS_OBS, AXIS_VAR } axis_kind;

typedef struct matrix_req {
    const char *what;          /* "X", "layers/counts", "obsm/X_umap", for messages */
    node *ad;                  /* the AnnData group ({ad} or {ad}/raw) */
    node *parent;              /* the AnnData that owns obs ({ad} itself, or raw's owner) */
    matrix m;
    axis_kind row_axis, col_axis;
    dim_sel rows, cols;
    int rows_listed, cols_listed;  /* given as a list or by names: echo positions */
    api_format fmt;
    int npz;                   /* format=npz (fmt is then FORMAT_BIN) */
    int csr;                   /* layout=csr */
    int safe;                  /* dtype=safe */
    const column_index *ci;
    column_index_state ci_state;
    size_t ci_bytes;
    int ci_asked;              /* a column selection of a CSR matrix */
} matrix_req;

/* Longest JSON/CSV text of one value, separator included. */
/* The dtype of a binary answer: float16 widens to float32 under dtype=safe. */
static dtype_kind out_dtype(const matrix_req *mr)
{
    return mr->safe && mr->m.dtype == DT_FLOAT16 ? DT_FLOAT32 : mr->m.dtype;
}

/* ---- resolving the element ---- */

static int resolve_groups(api_request *req, matrix_req *mr, cellar_error *err)
{
    int raw = req->raw;
    req->raw = 0;
    int rc = api_ad_group(req, &mr->parent, err);
    req->raw = raw;
    if (rc)
        return rc;
    return api_ad_group(req, &mr->ad, err);
}

static int element_axes(const char *el, matrix_req *mr)
{
    static const struct {
        const char *name;
        axis_kind rows, cols;
    } kinds[] = {
        {"X", AXIS_OBS, AXIS_VAR},       {"layers", AXIS_OBS, AXIS_VAR},
        {"obsm", AXIS_OBS, AXIS_POSITIONS}, {"varm", AXIS_VAR, AXIS_POSITIONS},
        {"obsp", AXIS_OBS, AXIS_OBS},    {"varp", AXIS_VAR, AXIS_VAR},
    };
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        if (strcmp(el, kinds[i].name) == 0) {
            mr->row_axis = kinds[i].rows;
            mr->col_axis = kinds[i].cols;
            return 0;
        }
    }
    return -1;
}

/* "raw/obsm/X_umap of modality 'rna'" (NULL when out of memory). */
static const char *element_what(api_request *req)
{
    const char *prefix = req->raw ? "raw/" : "";
    const char *el = req->element ? req->element : "";
    const char *what = req->key ? arena_printf(req->arena, "%s%s/%s", prefix, el, req->key)
                                : arena_printf(req->arena, "%s%s", prefix, el);
    if (what && req->mod)
        what = arena_printf(req->arena, "%s of modality '%s'", what, req->mod);
    return what;
}

/* The element el (/key) of an AnnData group: *out NULL when absent; an
 * element that is there but cannot be read is its error (422), not absent. */
static int element_node(node *ad, const char *el, const char *key, node **out,
                        cellar_error *err)
{
    *out = NULL;
    node *n = NULL;
    cellar_error local;
    cellar_error_clear(&local);
    int rc = node_child(ad, el, &n, &local);
    if (!rc && key) {
        node *g = n;
        n = NULL;
        rc = node_get_info(g)->type == NODE_GROUP ? node_child(g, key, &n, &local)
                                                  : CELLAR_ENOTFOUND;
    }
    if (rc == CELLAR_ENOTFOUND)
        return 0;
    if (rc)
        return cellar_fail(err, rc, "%s", local.detail);
    *out = n;
    return 0;
}

/* obsm/varm hold arrays or data frames: the parameters of one kind asked
 * of the other are 406 (the answer is not possible for this element). */
static const char *const array_only[] = {"cols", "layout", "dtype", NULL};
static const char *const frame_only[] = {"columns", "categorical", NULL};

/* The first of names given in the request, or NULL. */
static const char *given_of(const api_request *req, const char *const *names)
{
    for (size_t i = 0; names[i]; i++)
        if (api_param_given(req, names[i]))
            return names[i];
    return NULL;
}

static int is_aligned_key(const api_request *req)
{
    const char *el = req->element;
    return el && req->key && (strcmp(el, "obsm") == 0 || strcmp(el, "varm") == 0);
}

/* A data frame in obsm/varm: answered by the data frame code, exactly as
 * {ad}/obs is (parameters, shapes, bounds).  *served says whether it was;
 * when the element is not a data frame (or cannot be found) the matrix
 * path runs and reports what is wrong. */
static int serve_dataframe(api_request *req, api_response *res, int *served, cellar_error *err)
{
    *served = 0;
    const char *el = req->element;
    if (!is_aligned_key(req))
        return 0;
    cellar_error probe;
    cellar_error_clear(&probe);
    node *ad;
    if (api_ad_group(req, &ad, &probe))
        return 0;
    node *n = NULL;
    if (element_node(ad, el, req->key, &n, &probe))
        return 0; /* the matrix path reports it */
    const char *enc = n ? element_encoding(n) : NULL;
    if (!enc || strcmp(enc, "dataframe") != 0 || node_get_info(n)->type != NODE_GROUP)
        return 0;
    const char *what = element_what(req);
    if (!what)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
    *served = 1;
    const char *other = given_of(req, array_only);
    if (other)
        return cellar_fail(err, CELLAR_ENOTACCEPT,
                           "%s is a data frame: %s is for arrays (columns= selects its columns "
                           "by name)", what, other);
    return api_frame_group(req, res, n, what,
                           strcmp(el, "obsm") == 0 ? "obs_names" : "var_names", err);
}

static int open_element(api_request *req, matrix_req *mr, cellar_error *err)
{
    const char *el = req->element ? req->element : "";
    if (element_axes(el, mr))
        return cellar_fail(err, CELLAR_ENOTFOUND, "no matrix element '%s'", el);
    int rc = resolve_groups(req, mr, err);
    if (rc)
        return rc;
    mr->what = element_what(req);
    if (!mr->what)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
    node *n = NULL;
    rc = element_node(mr->ad, el, req->key, &n, err);
    if (rc)
        return rc;
    if (!n)
        return cellar_fail(err, CELLAR_ENOTFOUND, "store '%s' has no %s", req->store_name,
                           mr->what);
    const char *enc = element_encoding(n);
    if (enc && strcmp(enc, "dataframe") == 0)
        return cellar_fail(err, CELLAR_ENOTACCEPT, "%s is a data frame, not a matrix",
                           mr->what);
    if (enc && strcmp(enc, "null") == 0)
        return cellar_fail(err, CELLAR_ENOTFOUND, "%s is null (no matrix stored)", mr->what);
    rc = matrix_open(n, &mr->m, err);
    if (rc == CELLAR_EFORMAT && node_get_info(n)->type == NODE_ARRAY &&
        node_get_info(n)->dtype == DT_STRING)
        return cellar_fail(err, CELLAR_ENOTACCEPT, "%s holds strings, not numbers", mr->what);
    return rc;
}

/* ---- selections ---- */

static const char *names_param(axis_kind k)
{
    return k == AXIS_OBS ? "obs_names" : k == AXIS_VAR ? "var_names" : NULL;
}

/* Positions of names in the obs or var index of the element's AnnData. */
static int lookup_names(api_request *req, matrix_req *mr, axis_kind k, const char **names,
                        size_t n, dim_sel *out, cellar_error *err)
{
    node *owner = k == AXIS_OBS ? mr->parent : mr->ad;
    const char *fname = k == AXIS_OBS ? "obs" : "var";
    node *g = node_child_opt(owner, fname);
    if (!g)
        return cellar_fail(err, CELLAR_ENOTFOUND, "no %s to look names up in", fname);
    frame f;
    int rc = frame_open(g, req->arena, &f, err);
    if (rc)
        return rc;
    int64_t *pos = arena_calloc(req->arena, n ? n : 1, sizeof *pos);
    if (!pos)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
    if (n) {
        rc = frame_lookup_names(req->store, &f, names, n, pos, err);
        if (rc)
            return rc;
    }
    out->start = 0;
    out->step = 1;
    out->count = (int64_t)n;
    out->index = pos;
    return 0;
}

/* One axis: `pos_param` positions or the names parameter of its kind. */
static int parse_axis(api_request *req, matrix_req *mr, const char *pos_param, axis_kind k,
                      int64_t length, dim_sel *out, int *listed, cellar_error *err)
{
    selection sel;
    int present = 0;
    int rc = api_param_selection(req, pos_param, &sel, &present, err);
    if (rc)
        return rc;
    const char *np = names_param(k);
    const char **names = NULL;
    size_t n = 0;
    if (np) {
        rc = api_param_list(req, np, &names, &n, err);
        if (rc)
            return rc;
    }
    if (present && names)
        return cellar_fail(err, CELLAR_EINVAL, "give either %s or %s, not both", pos_param, np);
    if (names) {
        *listed = 1;
        return lookup_names(req, mr, k, names, n, out, err);
    }
    *listed = present && sel.is_list;
    return selection_resolve(&sel, length, pos_param, req->arena, out, err);
}

/* Refuses obs_names / var_names on an element without that axis. */
static int check_names_apply(api_request *req, const matrix_req *mr, axis_kind k,
                             cellar_error *err)
{
    if (mr->row_axis == k || (mr->m.ndim == 2 && mr->col_axis == k && mr->row_axis != k))
        return 0;
    const char *np = names_param(k);
    const char **names;
    size_t n;
    int rc = api_param_list(req, np, &names, &n, err);
    if (!rc && names)
        rc = cellar_fail(err, CELLAR_EINVAL, "%s does not apply to %s: select by %s instead",
                         np, mr->what, mr->row_axis == k ? "cols" : "rows or cols");
    return rc;
}

/* obs_names on X selects rows; on obsp both obs_names and rows name rows, and
 * columns are positions only; var_names likewise. */
static int parse_selection(api_request *req, matrix_req *mr, cellar_error *err)
{
    int rc = check_names_apply(req, mr, AXIS_OBS, err);
    if (!rc)
        rc = check_names_apply(req, mr, AXIS_VAR, err);
    if (rc)
        return rc;
    rc = parse_axis(req, mr, "rows", mr->row_axis, mr->m.shape[0], &mr->rows,
                        &mr->rows_listed, err);
    if (rc)
        return rc;
    if (mr->m.ndim == 1) {
        const char *t;
        rc = api_param_str(req, "cols", &t, err);
        if (rc)
            return rc;
        if (t)
            return cellar_fail(err, CELLAR_EINVAL, "%s is 1-D: it takes rows only, not cols",
                               mr->what);
        mr->cols = dim_sel_range(0, 1);
        return 0;
    }
    axis_kind ck = mr->col_axis == mr->row_axis ? AXIS_POSITIONS : mr->col_axis;
    return parse_axis(req, mr, "cols", ck, mr->m.shape[1], &mr->cols, &mr->cols_listed, err);
}

static int parse_options(api_request *req, matrix_req *mr, cellar_error *err)
{
    const char *layout, *dt;
    int rc = api_param_str(req, "layout", &layout, err);
    if (!rc)
        rc = api_param_str(req, "dtype", &dt, err);
    if (rc)
        return rc;
    if (dt && strcmp(dt, "safe") == 0)
        mr->safe = 1;
    else if (dt && strcmp(dt, "stored") != 0)
        return cellar_fail(err, CELLAR_EINVAL, "dtype must be 'safe' or 'stored', not '%s'", dt);
    int sparse = mr->m.layout != MATRIX_DENSE;
    if (mr->npz) {
        /* .npz is scipy.sparse's file format: a CSR answer. */
        if (!sparse)
            return cellar_fail(err, CELLAR_ENOTACCEPT, "%s is stored dense: format=npz is for "
                               "sparse matrices (use npy or bin)", mr->what);
        if (layout && strcmp(layout, "csr") != 0)
            return cellar_fail(err, CELLAR_ENOTACCEPT, "format=npz answers layout=csr only");
        mr->csr = 1;
        return 0;
    }
    if (!layout) {
        /* obsp/varp are pairwise graphs: CSR by default in JSON. */
        const char *el = req->element;
        mr->csr = sparse && mr->fmt == FORMAT_JSON &&
                  (strcmp(el, "obsp") == 0 || strcmp(el, "varp") == 0);
        return 0;
    }
    if (strcmp(layout, "dense") == 0)
        return 0;
    if (strcmp(layout, "csr") != 0)
        return cellar_fail(err, CELLAR_EINVAL, "layout must be 'dense' or 'csr', not '%s'",
                           layout);
    if (!sparse)
        return cellar_fail(err, CELLAR_ENOTACCEPT, "%s is stored dense: layout=csr is for sparse "
                           "matrices", mr->what);
    if (mr->fmt != FORMAT_JSON && mr->fmt != FORMAT_BIN)
        return cellar_fail(err, CELLAR_ENOTACCEPT,
                           "layout=csr is answered in json, bin or npz, not %s; or use "
                           "layout=dense", mr->fmt == FORMAT_CSV ? "csv" : "npy");
    mr->csr = 1;
    return 0;
}

/* The column index of a CSR matrix for column selections (started on the
 * first one, used once ready). */
static int attach_index(api_request *req, matrix_req *mr, cellar_error *err)
{
    if (mr->m.layout != MATRIX_CSR || mr->m.ndim != 2 ||
        (mr->cols.count == mr->m.shape[1] && !mr->cols.index && mr->cols.step == 1))
        return 0;
    const api_config *cfg = req->config;
    column_index_options opts = {
        .cache_dir = cfg ? cfg->cache_dir : NULL,
        .submit = cfg ? cfg->submit_background : NULL,
        .submit_ctx = cfg ? cfg->background_ctx : NULL,
        .max_bytes = req->config ? req->config->column_index_max_bytes : 0,
    };
    mr->ci_asked = 1;
    return column_index_get(req->store, &mr->m, &opts, &mr->ci, &mr->ci_state, &mr->ci_bytes,
                            err);
}

/* ---- budget ---- */

static int check_dense_budget(api_request *req, const matrix_req *mr, cellar_error *err)
{
    int binary = mr->fmt == FORMAT_BIN || mr->fmt == FORMAT_NPY;
    uint64_t per_cell = binary ? dtype_size(out_dtype(mr)) : fmt_max_text(mr->m.dtype);
    uint64_t per_row = sat_add_u64(sat_mul_u64((uint64_t)mr->cols.count, per_cell), binary ? 0 : 4);
    uint64_t fixed = 256;
    if (mr->rows_listed)
        fixed = sat_add_u64(fixed, sat_mul_u64((uint64_t)mr->rows.count, 21));
    if (mr->cols_listed)
        fixed = sat_add_u64(fixed, sat_mul_u64((uint64_t)mr->cols.count, 21));
    uint64_t total = sat_add_u64(fixed, sat_mul_u64((uint64_t)mr->rows.count, per_row));
    return api_check_budget(req, total, "rows", per_row, err);
}

/* Index types of a binary CSR answer, as scipy picks them: int32 when the
 * values fit. */
static dtype_kind csr_indices_dtype(const matrix_req *mr)
{
    return mr->cols.count <= INT32_MAX ? DT_INT32 : DT_INT64;
}

static dtype_kind csr_indptr_dtype(uint64_t nnz)
{
    return nnz <= INT32_MAX ? DT_INT32 : DT_INT64;
}

/* CSR answers: bounded by the stored entries indptr says the selection can
 * hold (binary: their bytes; JSON: their longest text); the read itself
 * stops at what the limit allows. */
static int check_csr_budget(api_request *req, const matrix_req *mr, uint64_t *max_nnz,
                            cellar_error *err)
{
    uint64_t nnz;
    int rc = matrix_count_nnz(&mr->m, &mr->rows, &mr->cols, column_index_csc(mr->ci), &nnz, err);
    if (rc)
        return rc;
    int binary = mr->fmt == FORMAT_BIN;
    uint64_t per_entry = binary ? dtype_size(csr_indices_dtype(mr)) + dtype_size(out_dtype(mr))
                                : sat_add_u64(fmt_max_text(mr->m.dtype), 21);
    uint64_t per_ptr = binary ? 8 : 21, fixed = binary ? 2048 : 256;
    uint64_t total = sat_add_u64(sat_add_u64(fixed, sat_mul_u64((uint64_t)mr->rows.count + 1,
                                                                per_ptr)),
                                 sat_mul_u64(nnz, per_entry));
    uint64_t per_row = mr->rows.count ? total / (uint64_t)mr->rows.count + 1 : total;
    rc = api_check_budget(req, total, "rows", per_row, err);
    if (!rc && mr->npz && total > NPZ_MAX_BYTES)
        rc = cellar_fail(err, CELLAR_ETOOBIG, "an .npz answer is at most 4 GiB; request fewer "
                         "rows at a time (about %" PRIu64 ")",
                         NPZ_MAX_BYTES / (per_row ? per_row : 1));
    uint64_t limit = api_limit(req);
    *max_nnz = limit ? limit / per_entry + 1 : 0;
    return rc;
}

/* ---- writers ---- */

static void json_positions(json_out *j, const char *name, const dim_sel *s)
{
    json_out_str(j, name);
    json_out_array_open(j);
    for (int64_t i = 0; i < s->count && json_out_ok(j); i++)
        json_out_int(j, dim_sel_at(s, i));
    json_out_array_close(j);
}

static void json_head(json_out *j, const matrix_req *mr, const char *layout)
{
    json_out_map_open(j);
    json_out_str(j, "shape");
    json_out_array_open(j);
    json_out_int(j, mr->rows.count);
    if (mr->m.ndim == 2)
        json_out_int(j, mr->cols.count);
    json_out_array_close(j);
    json_out_str(j, "dtype");
    json_out_str(j, dtype_name(mr->m.dtype));
    json_out_str(j, "layout");
    json_out_str(j, layout);
    if (mr->rows_listed)
        json_positions(j, "rows", &mr->rows);
    if (mr->cols_listed && mr->m.ndim == 2)
        json_positions(j, "cols", &mr->cols);
}

static int json_finish(api_request *req, api_response *res, json_out *j, cellar_error *err)
{
    json_out_map_close(j);
    int rc = json_out_finish(j, "select fewer rows or columns", err);
    json_out_destroy(j);
    if (rc)
        return rc;
    (void)req;
    res->status = 200;
    res->content_type = "application/json";
    return 0;
}

static int write_dense_json(api_request *req, api_response *res, const matrix_req *mr,
                            const void *data, cellar_error *err)
{
    json_out j;
    int rc = json_out_init(&j, &res->body, api_limit(req), err);
    if (rc)
        return rc;
    json_head(&j, mr, "dense");
    json_out_str(&j, "data");
    json_out_array_open(&j);
    int64_t r = mr->rows.count, c = mr->cols.count;
    for (int64_t i = 0; i < r && json_out_ok(&j); i++) {
        if (mr->m.ndim == 1) {
            json_out_typed(&j, mr->m.dtype, data, i);
            continue;
        }
        json_out_array_open(&j);
        for (int64_t k = 0; k < c; k++)
            json_out_typed(&j, mr->m.dtype, data, i * c + k);
        json_out_array_close(&j);
    }
    json_out_array_close(&j);
    return json_finish(req, res, &j, err);
}

static int write_csr_json(api_request *req, api_response *res, const matrix_req *mr,
                          const matrix_csr *csr, cellar_error *err)
{
    json_out j;
    int rc = json_out_init(&j, &res->body, api_limit(req), err);
    if (rc)
        return rc;
    json_head(&j, mr, "csr");
    json_out_str(&j, "nnz");
    json_out_int(&j, csr->nnz);
    json_out_str(&j, "indptr");
    json_out_array_open(&j);
    for (int64_t i = 0; i <= csr->n_rows && json_out_ok(&j); i++)
        json_out_int(&j, csr->indptr[i]);
    json_out_array_close(&j);
    json_out_str(&j, "indices");
    json_out_array_open(&j);
    for (int64_t i = 0; i < csr->nnz && json_out_ok(&j); i++)
        json_out_int(&j, csr->indices[i]);
    json_out_array_close(&j);
    json_out_str(&j, "data");
    json_out_array_open(&j);
    for (int64_t i = 0; i < csr->nnz && json_out_ok(&j); i++)
        json_out_typed(&j, csr->dtype, csr->data, i);
    json_out_array_close(&j);
    return json_finish(req, res, &j, err);
}

static int write_dense_csv(api_request *req, api_response *res, const matrix_req *mr,
                           const void *data, cellar_error *err)
{
    buf *b = &res->body;
    uint64_t limit = api_limit(req);
    int64_t r = mr->rows.count, c = mr->cols.count;
    for (int64_t i = 0; i < r && !b->failed; i++) {
        for (int64_t k = 0; k < c; k++) {
            if (k)
                csv_sep(b);
            csv_typed(b, mr->m.dtype, data, i * c + k);
        }
        csv_end_record(b);
        if (limit && b->len > limit)
            return cellar_fail(err, CELLAR_ETOOBIG,
                               "the answer grew over the limit of %" PRIu64
                               " bytes; request at most about %" PRId64 " rows at a time",
                               limit, i > 1 ? i * 4 / 5 : 1);
    }
    if (b->failed)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory writing CSV");
    res->status = 200;
    res->content_type = "text/csv; charset=utf-8";
    return 0;
}

static int write_binary(api_request *req, api_response *res, const matrix_req *mr,
                        const void *data, cellar_error *err)
{
    dtype_kind dt = out_dtype(mr);
    int64_t shape[2] = {mr->rows.count, mr->cols.count};
    int rc = api_begin_binary(req, res, mr->fmt, dt, shape, mr->m.ndim, err);
    if (rc)
        return rc;
    size_t n = (size_t)mr->rows.count * (size_t)mr->cols.count;
    size_t bytes = n * dtype_size(dt);
    char *p = buf_reserve(&res->body, bytes ? bytes : 1);
    if (!p)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
    if (dt == mr->m.dtype) {
        memcpy(p, data, bytes);
    } else {
        const uint16_t *h = data;
        for (size_t i = 0; i < n; i++) {
            float f = half_to_float(h[i]);
            memcpy(p + i * 4, &f, 4);
        }
    }
    res->body.len += bytes;
    return 0;
}

/* ---- binary CSR answers: format=bin / npz with layout=csr ----
 * bin: indptr | indices | data, each section starting at a multiple of 8
 * bytes (zero padding between), so a browser can view each as a typed
 * array; npz: scipy.sparse.save_npz's archive (see docs/responses.md). */

typedef struct csr_bin {
    dtype_kind ip_dt, ix_dt, val_dt;
    int64_t n_rows, nnz;
    size_t ip_off, ix_off, val_off; /* in res->body */
    npz_writer z;
} csr_bin;

static size_t align8(size_t n)
{
    return (n + 7) & ~(size_t)7;
}

/* Lays out the answer for nnz entries: every section's room reserved in
 * res->body, its offset recorded, nothing filled yet. */
static int csr_bin_layout(const matrix_req *mr, api_response *res, int64_t nnz, csr_bin *cb,
                          cellar_error *err)
{
    buf *b = &res->body;
    b->len = 0;
    cb->ip_dt = csr_indptr_dtype((uint64_t)nnz);
    cb->ix_dt = csr_indices_dtype(mr);
    cb->val_dt = out_dtype(mr);
    cb->n_rows = mr->rows.count;
    cb->nnz = nnz;
    size_t ipb = (size_t)(cb->n_rows + 1) * dtype_size(cb->ip_dt);
    size_t ixb = (size_t)nnz * dtype_size(cb->ix_dt), vb = (size_t)nnz * dtype_size(cb->val_dt);
    if (!mr->npz) {
        cb->ip_off = 0;
        cb->ix_off = align8(ipb);
        cb->val_off = align8(cb->ix_off + ixb);
        size_t total = cb->val_off + vb;
        char *p = buf_reserve(b, total ? total : 1);
        if (!p)
            return cellar_fail(err, CELLAR_ENOMEM, "out of memory for a CSR answer");
        memset(p + ipb, 0, cb->ix_off - ipb); /* the padding */
        memset(p + cb->ix_off + ixb, 0, cb->val_off - cb->ix_off - ixb);
        b->len = total;
        return 0;
    }
    int64_t shape[2] = {mr->rows.count, mr->cols.count}, n = nnz, np1 = cb->n_rows + 1, two = 2;
    size_t fmt_off, shape_off;
    /* Room for the whole archive at once: filling never moves it. */
    npz_init(&cb->z, b);
    if (!buf_reserve(b, ipb + ixb + vb + 2048) ||
        npz_add(&cb->z, "format", "|S3", NULL, 0, 3, &fmt_off) ||
        npz_add(&cb->z, "shape", "<i8", &two, 1, 16, &shape_off) ||
        npz_add(&cb->z, "indptr", dtype_npy_descr(cb->ip_dt), &np1, 1, ipb, &cb->ip_off) ||
        npz_add(&cb->z, "indices", dtype_npy_descr(cb->ix_dt), &n, 1, ixb, &cb->ix_off) ||
        npz_add(&cb->z, "data", dtype_npy_descr(cb->val_dt), &n, 1, vb, &cb->val_off))
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory for a CSR answer");
    memcpy(b->data + fmt_off, "csr", 3);
    memcpy(b->data + shape_off, shape, sizeof shape);
    return 0;
}

/* Writes indptr (as int64 values, rebased on their first) in the answer's
 * index type. */
static void csr_bin_indptr(csr_bin *cb, char *body, const int64_t *indptr)
{
    char *p = body + cb->ip_off;
    int64_t base = indptr[0];
    for (int64_t i = 0; i <= cb->n_rows; i++) {
        int64_t v = indptr[i] - base;
        if (cb->ip_dt == DT_INT32) {
            int32_t w = (int32_t)v;
            memcpy(p + (size_t)i * 4, &w, 4);
        } else {
            memcpy(p + (size_t)i * 8, &v, 8);
        }
    }
}

/* float16 values widened to float32 (dtype=safe). */
static void widen_halves(char *dst, const void *src, int64_t n)
{
    const uint16_t *h = src;
    for (int64_t i = 0; i < n; i++) {
        float f = half_to_float(h[i]);
        memcpy(dst + (size_t)i * 4, &f, 4);
    }
}

static int csr_bin_finish(api_request *req, api_response *res, const matrix_req *mr,
                          csr_bin *cb, cellar_error *err)
{
    char shape[64], nnz[32];
    snprintf(shape, sizeof shape, "%" PRId64 ",%" PRId64, mr->rows.count, mr->cols.count);
    snprintf(nnz, sizeof nnz, "%" PRId64, cb->nnz);
    if (mr->npz && npz_finish(&cb->z))
        return cellar_fail(err, res->body.failed ? CELLAR_ENOMEM : CELLAR_ETOOBIG,
                           "the .npz answer cannot be written (over 4 GiB, or out of memory)");
    if (api_add_header(req, res, "X-Shape", shape) ||
        api_add_header(req, res, "X-Dtype", dtype_name(cb->val_dt)) ||
        api_add_header(req, res, "X-Nnz", nnz) ||
        api_add_header(req, res, "X-Indptr-Dtype", dtype_name(cb->ip_dt)) ||
        api_add_header(req, res, "X-Indices-Dtype", dtype_name(cb->ix_dt)))
        return cellar_fail(err, CELLAR_EINTERNAL, "too many response headers");
    res->status = 200;
    res->content_type = mr->npz ? "application/zip" : "application/octet-stream";
    return 0;
}

/* The indptr of a run of whole rows (from the arena, as stored) and the
 * entries it spans. */
static int run_indptr(api_request *req, const matrix_req *mr, int64_t **indptr, int64_t *nnz,
                      cellar_error *err)
{
    int64_t n = mr->rows.count;
    *indptr = arena_alloc(req->arena, (size_t)(n + 1) * sizeof **indptr);
    if (!*indptr)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory reading %s", mr->what);
    int rc = matrix_run_indptr(&mr->m, &mr->rows, *indptr, err);
    if (!rc)
        *nnz = (*indptr)[n] - (*indptr)[0];
    return rc;
}

/* Whole stored rows: the stored ranges read straight into the answer.
 * *done is 0 when the rows' indices are not in ascending order (the
 * general path then orders them). */
static int csr_bin_run(api_request *req, api_response *res, const matrix_req *mr, csr_bin *cb,
                       int *done, cellar_error *err)
{
    *done = 0;
    int64_t n = mr->rows.count, nnz, *indptr;
    int rc = run_indptr(req, mr, &indptr, &nnz, err);
    if (rc)
        return rc;
    rc = csr_bin_layout(mr, res, nnz, cb, err);
    if (rc)
        return rc;
    char *body = res->body.data;
    csr_bin_indptr(cb, body, indptr);
    int widen = cb->val_dt != mr->m.dtype;
    void *vals = widen ? arena_alloc(req->arena, (size_t)(nnz ? nnz : 1) * 2)
                       : body + cb->val_off;
    if (!vals)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory reading %s", mr->what);
    int ascending;
    rc = matrix_run_entries(&mr->m, indptr, n, cb->ix_dt, body + cb->ix_off, vals, &ascending,
                            err);
    if (rc || !ascending)
        return rc;
    if (widen)
        widen_halves(body + cb->val_off, vals, nnz);
    *done = 1;
    return csr_bin_finish(req, res, mr, cb, err);
}

static int write_csr_binary(api_request *req, api_response *res, const matrix_req *mr,
                            uint64_t max_nnz, cellar_error *err)
{
    csr_bin cb;
    memset(&cb, 0, sizeof cb);
    if (matrix_csr_is_run(&mr->m, &mr->rows, &mr->cols) && !mr->ci) {
        int done;
        int rc = csr_bin_run(req, res, mr, &cb, &done, err);
        if (rc || done)
            return rc;
    }
    matrix_csr csr;
    int rc = matrix_read_csr(&mr->m, &mr->rows, &mr->cols, column_index_csc(mr->ci), max_nnz, req->arena, &csr,
                             err);
    if (!rc)
        rc = csr_bin_layout(mr, res, csr.nnz, &cb, err);
    if (rc)
        return rc;
    char *body = res->body.data;
    csr_bin_indptr(&cb, body, csr.indptr);
    for (int64_t i = 0; i < csr.nnz; i++) {
        if (cb.ix_dt == DT_INT32) {
            int32_t w = (int32_t)csr.indices[i];
            memcpy(body + cb.ix_off + (size_t)i * 4, &w, 4);
        } else {
            memcpy(body + cb.ix_off + (size_t)i * 8, &csr.indices[i], 8);
        }
    }
    if (cb.val_dt != csr.dtype)
        widen_halves(body + cb.val_off, csr.data, csr.nnz);
    else
        memcpy(body + cb.val_off, csr.data, (size_t)csr.nnz * dtype_size(csr.dtype));
    return csr_bin_finish(req, res, mr, &cb, err);
}

/* bin / npy in the stored dtype: the selection read straight into the
 * answer, after its .npy header (no copy through the arena). */
static int whole_axis(const dim_sel *s, int64_t length)
{
    return !s->index && s->step == 1 && s->start == 0 && s->count == length;
}

static int read_binary(api_request *req, api_response *res, const matrix_req *mr,
                       cellar_error *err)
{
    size_t headers = res->n_headers;
    int64_t shape[2] = {mr->rows.count, mr->cols.count};
    int rc = api_begin_binary(req, res, mr->fmt, mr->m.dtype, shape, mr->m.ndim, err);
    if (rc)
        return rc;
    size_t bytes = (size_t)mr->rows.count * (size_t)mr->cols.count * dtype_size(mr->m.dtype);
    /* A whole array stored as it is answered (bin: no header to prepend):
     * sent from the file itself with sendfile, no byte copied. */
    int fd;
    uint64_t off, len;
    if (mr->fmt == FORMAT_BIN && mr->m.layout == MATRIX_DENSE && bytes &&
        whole_axis(&mr->rows, mr->m.shape[0]) && whole_axis(&mr->cols, mr->m.shape[1]) &&
        node_file_extent(mr->m.element, &fd, &off, &len) == 0) {
        if (len == bytes) {
            res->fd = fd;
            res->fd_offset = off;
            res->fd_length = len;
            return 0;
        }
        close(fd);
    }
    char *p = buf_reserve(&res->body, bytes ? bytes : 1);
    rc = p ? matrix_read_dense(&mr->m, &mr->rows, &mr->cols, column_index_csc(mr->ci), p, bytes, err)
           : cellar_fail(err, CELLAR_ENOMEM, "out of memory reading %s", mr->what);
    if (rc) {
        res->n_headers = headers; /* an error answer carries no X-Shape */
        return rc;
    }
    res->body.len += bytes;
    return 0;
}

/* Whole stored rows for the JSON answer: the stored ranges as they are
 * (no gathering and sorting); *done is 0 when a row's indices are not
 * ascending (matrix_read_csr then orders them). */
static int read_csr_run(api_request *req, const matrix_req *mr, matrix_csr *csr, int *done,
                        cellar_error *err)
{
    *done = 0;
    int64_t n = mr->rows.count, nnz, *indptr;
    int rc = run_indptr(req, mr, &indptr, &nnz, err);
    if (rc)
        return rc;
    int64_t *indices = arena_alloc(req->arena, (size_t)(nnz ? nnz : 1) * sizeof *indices);
    void *data = arena_alloc(req->arena, (size_t)(nnz ? nnz : 1) * dtype_size(mr->m.dtype));
    if (!indices || !data)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory reading %s", mr->what);
    int ascending;
    rc = matrix_run_entries(&mr->m, indptr, n, DT_INT64, indices, data, &ascending, err);
    if (rc || !ascending)
        return rc;
    for (int64_t i = n; i >= 0; i--)
        indptr[i] -= indptr[0];
    *csr = (matrix_csr){.n_rows = n, .n_cols = mr->cols.count, .nnz = nnz, .indptr = indptr,
                        .indices = indices, .data = data, .dtype = mr->m.dtype};
    *done = 1;
    return 0;
}

/* ---- the handler ---- */

static int add_index_header(api_request *req, api_response *res, const matrix_req *mr)
{
    if (!mr->ci_asked)
        return 0;
    /* The header says how the column was found: keep no answer whose header
     * will change once the index is ready. */
    res->uncacheable = mr->ci_state != COLUMN_INDEX_READY;
    char text[64];
    if (mr->ci_state == COLUMN_INDEX_READY)
        snprintf(text, sizeof text, "ready; bytes=%zu", mr->ci_bytes);
    else
        snprintf(text, sizeof text, "%s", column_index_state_name(mr->ci_state));
    return api_add_header(req, res, "X-Column-Index", text);
}

/* The answer format; format=npz (scipy's sparse archive) is this route's
 * own, so it is looked for before the common negotiation. */
static int negotiate(api_request *req, matrix_req *mr, cellar_error *err)
{
    const char *f;
    int rc = api_param_str(req, "format", &f, err);
    if (rc)
        return rc;
    if (f && strcmp(f, "npz") == 0) {
        mr->npz = 1;
        mr->fmt = FORMAT_BIN;
        return 0;
    }
    return api_negotiate_format(req, MATRIX_FORMATS, &mr->fmt, err);
}

int api_matrix(api_request *req, api_response *res, cellar_error *err)
{
    static const char *const allowed[] = {"rows",   "cols",  "obs_names", "var_names",
                                          "layout", "dtype", NULL};
    static const char *const allowed_aligned[] = {"rows",   "cols",  "obs_names", "var_names",
                                                  "layout", "dtype", "columns",   "categorical",
                                                  NULL};
    int served;
    int rc = serve_dataframe(req, res, &served, err);
    if (served)
        return rc;
    matrix_req mr;
    memset(&mr, 0, sizeof mr);
    int aligned = is_aligned_key(req);
    rc = api_check_params(req, aligned ? allowed_aligned : allowed, err);
    if (!rc)
        rc = negotiate(req, &mr, err);
    if (!rc)
        rc = open_element(req, &mr, err);
    if (!rc && aligned && given_of(req, frame_only))
        rc = cellar_fail(err, CELLAR_ENOTACCEPT,
                         "%s is an array: %s is for data frames (cols= selects its columns by "
                         "position)", mr.what, given_of(req, frame_only));
    if (!rc)
        rc = parse_options(req, &mr, err);
    if (!rc)
        rc = parse_selection(req, &mr, err);
    if (!rc)
        rc = attach_index(req, &mr, err);
    if (rc)
        return rc;
    res->body.len = 0;
    if (add_index_header(req, res, &mr))
        return cellar_fail(err, CELLAR_EINTERNAL, "too many response headers");
    if (mr.csr) {
        uint64_t max_nnz;
        matrix_csr csr;
        rc = check_csr_budget(req, &mr, &max_nnz, err);
        if (!rc && mr.fmt == FORMAT_BIN)
            return write_csr_binary(req, res, &mr, max_nnz, err);
        int done = 0;
        if (!rc && matrix_csr_is_run(&mr.m, &mr.rows, &mr.cols) && !mr.ci)
            rc = read_csr_run(req, &mr, &csr, &done, err);
        if (!rc && !done)
            rc = matrix_read_csr(&mr.m, &mr.rows, &mr.cols, column_index_csc(mr.ci), max_nnz, req->arena, &csr, err);
        return rc ? rc : write_csr_json(req, res, &mr, &csr, err);
    }
    rc = check_dense_budget(req, &mr, err);
    if (rc)
        return rc;
    if ((mr.fmt == FORMAT_BIN || mr.fmt == FORMAT_NPY) && out_dtype(&mr) == mr.m.dtype)
        return read_binary(req, res, &mr, err);
    size_t bytes = (size_t)mr.rows.count * (size_t)mr.cols.count * dtype_size(mr.m.dtype);
    void *data = arena_alloc(req->arena, bytes ? bytes : 1);
    if (!data)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory reading %s", mr.what);
    rc = matrix_read_dense(&mr.m, &mr.rows, &mr.cols, column_index_csc(mr.ci), data, bytes, err);
    if (rc)
        return rc;
    switch (mr.fmt) {
    case FORMAT_CSV: return write_dense_csv(req, res, &mr, data, err);
    case FORMAT_BIN:
    case FORMAT_NPY: return write_binary(req, res, &mr, data, err);
    default: return write_dense_json(req, res, &mr, data, err);
    }
}
