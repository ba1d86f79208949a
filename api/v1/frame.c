/* Data frame routes: {ad}/obs, {ad}/var (and raw/var), their schemas, and
 * the data frames of {ad}/obsm/{key} and {ad}/varm/{key} (api/v1/frame.h). */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "common/satmath.h"
#include "api/encode/csv_out.h"
#include "api/v1/frame.h"
#include "api/v1/routes.h"
#include "api/encode/json_out.h"
#include "storage/anndata/anndata.h"

#define FRAME_FORMATS                                                                     \
    ((1u << FORMAT_JSON) | (1u << FORMAT_CSV) | (1u << FORMAT_BIN) | (1u << FORMAT_NPY))

/* Duplicate column names in `columns=` are checked below this count. */
#define DUP_CHECK_MAX 4096

/* One request on a data frame, parsed. */
typedef struct frame_req {
    const char *what;        /* "obs", "var", "raw/var", "mod 'rna' obs", for messages */
    frame f;
    dim_sel rows;
    const frame_column **cols;
    size_t n_cols;
    int codes;               /* categorical=codes */
    api_format fmt;
    column_values index;
    column_values *vals;
} frame_req;

static const char *pandas_dtype(const frame_column *c)
{
    switch (c->encoding) {
    case COL_ARRAY: return dtype_name(c->dtype);
    case COL_STRING_ARRAY: return "str";
    case COL_CATEGORICAL: return "category";
    case COL_NULLABLE_BOOLEAN: return "boolean";
    case COL_NULLABLE_STRING:
        /* pandas: StringDtype(na_value=nan) prints as "str", pd.NA as "string". */
        return c->na_value && strcmp(c->na_value, "NaN") == 0 ? "str" : "string";
    case COL_NULLABLE_INTEGER:
        switch (c->dtype) {
        case DT_INT8: return "Int8";
        case DT_INT16: return "Int16";
        case DT_INT32: return "Int32";
        case DT_INT64: return "Int64";
        case DT_UINT8: return "UInt8";
        case DT_UINT16: return "UInt16";
        case DT_UINT32: return "UInt32";
        case DT_UINT64: return "UInt64";
        default: return "Int64";
        }
    default: return NULL;
    }
}

/* The frame group {ad}/obs or {ad}/var of the route, and its name for
 * messages. */
static int locate_obs_var(api_request *req, node **group, const char **what, cellar_error *err)
{
    const char *el = req->element;
    if (!el || (strcmp(el, "obs") != 0 && strcmp(el, "var") != 0))
        return cellar_fail(err, CELLAR_ENOTFOUND, "no data frame '%s'", el ? el : "");
    *what = req->raw ? (strcmp(el, "obs") == 0 ? "raw/obs" : "raw/var") : el;
    if (req->mod)
        *what = arena_printf(req->arena, "%s of modality '%s'", *what, req->mod);
    if (!*what)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
    node *g;
    int rc = api_ad_group(req, &g, err);
    if (rc)
        return rc;
    cellar_error local;
    cellar_error_clear(&local);
    *group = NULL;
    rc = node_child(g, el, group, &local);
    if (rc && rc != CELLAR_ENOTFOUND)
        return cellar_fail(err, rc, "%s", local.detail); /* there, but unreadable: 422 */
    if (!*group) {
        if (req->raw && strcmp(el, "obs") == 0)
            return cellar_fail(err, CELLAR_ENOTFOUND,
                               "raw has no obs (raw shares obs with its AnnData): use obs");
        return cellar_fail(err, CELLAR_ENOTFOUND, "store '%s' has no %s", req->store_name,
                           *what);
    }
    return 0;
}

/* Opens the frame: the given group (an obsm/varm data frame), else the
 * route's obs or var. */
static int open_frame(api_request *req, frame_req *fr, node *group, const char *what,
                      cellar_error *err)
{
    fr->what = what;
    int rc = group ? 0 : locate_obs_var(req, &group, &fr->what, err);
    if (rc)
        return rc;
    return frame_open(group, req->arena, &fr->f, err);
}

static int parse_rows(api_request *req, frame_req *fr, const char *names_param,
                      cellar_error *err)
{
    selection sel;
    int present;
    const char **names;
    size_t n_names;
    int rc = api_param_selection(req, "rows", &sel, &present, err);
    if (!rc)
        rc = api_param_list(req, names_param, &names, &n_names, err);
    if (rc)
        return rc;
    if (present && names)
        return cellar_fail(err, CELLAR_EINVAL, "give either rows or %s, not both", names_param);
    if (!names)
        return selection_resolve(&sel, fr->f.n_rows, "rows", req->arena, &fr->rows, err);
    int64_t *pos = arena_calloc(req->arena, n_names ? n_names : 1, sizeof *pos);
    if (!pos)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
    if (n_names) {
        rc = frame_lookup_names(req->store, &fr->f, names, n_names, pos, err);
        if (rc)
            return rc;
    }
    fr->rows.start = 0;
    fr->rows.step = 1;
    fr->rows.count = (int64_t)n_names;
    fr->rows.index = pos;
    return 0;
}

static int parse_columns(api_request *req, frame_req *fr, cellar_error *err)
{
    const char **names;
    size_t n;
    int rc = api_param_list(req, "columns", &names, &n, err);
    if (rc)
        return rc;
    const frame *f = &fr->f;
    fr->cols = arena_calloc(req->arena, (names ? n : f->n_columns) + 1, sizeof *fr->cols);
    if (!fr->cols)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
    if (!names) {
        /* Default: every column in column-order that can be read (those of
         * encodings cellar does not read are left out).  A listed column
         * that is not there at all is damage, or a store caught half
         * written: anndata fails to read such a frame, and so does this. */
        for (size_t i = 0; i < f->n_columns; i++) {
            if (f->columns[i].encoding)
                fr->cols[fr->n_cols++] = &f->columns[i];
            else if (!node_child_opt(f->group, f->columns[i].name))
                return cellar_fail(err, CELLAR_EFORMAT,
                                   "column '%s' is listed in column-order of %s but missing",
                                   f->columns[i].name, fr->what);
        }
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        int k = frame_find_column(f, names[i]);
        if (k < 0)
            return cellar_fail(err, CELLAR_ENOTFOUND, "no column '%s' in %s", names[i],
                               fr->what);
        if (n <= DUP_CHECK_MAX)
            for (size_t j = 0; j < i; j++)
                if (strcmp(names[j], names[i]) == 0)
                    return cellar_fail(err, CELLAR_EINVAL, "column '%s' is asked for twice",
                                       names[i]);
        fr->cols[fr->n_cols++] = &f->columns[k];
    }
    return 0;
}

static int parse_categorical(api_request *req, frame_req *fr, cellar_error *err)
{
    const char *v;
    int rc = api_param_str(req, "categorical", &v, err);
    if (rc || !v)
        return rc;
    if (strcmp(v, "codes") == 0)
        fr->codes = 1;
    else if (strcmp(v, "values") != 0)
        return cellar_fail(err, CELLAR_EINVAL,
                           "categorical must be 'values' or 'codes', not '%s'", v);
    return 0;
}

/* The dtype a bin/npy answer of the single selected column has, or 406. */
static int binary_dtype(const frame_req *fr, dtype_kind *dt, cellar_error *err)
{
    const char *name = fr->fmt == FORMAT_NPY ? "npy" : "bin";
    if (fr->n_cols != 1)
        return cellar_fail(err, CELLAR_ENOTACCEPT,
                           "format '%s' needs exactly one column (columns=name); %zu selected",
                           name, fr->n_cols);
    const frame_column *c = fr->cols[0];
    if (c->encoding == COL_ARRAY && dtype_is_numeric(c->dtype)) {
        *dt = c->dtype;
        return 0;
    }
    if (c->encoding == COL_CATEGORICAL) {
        if (!fr->codes)
            return cellar_fail(err, CELLAR_ENOTACCEPT,
                               "column '%s' is categorical: format '%s' gives its codes with "
                               "categorical=codes",
                               c->name, name);
        *dt = dtype_is_integer(c->codes_dtype) ? c->codes_dtype : DT_INT64;
        return 0;
    }
    return cellar_fail(err, CELLAR_ENOTACCEPT,
                       "format '%s' needs a numeric or bool column; '%s' is %s (%s)", name,
                       c->name, pandas_dtype(c) ? pandas_dtype(c) : "unreadable",
                       col_encoding_name(c->encoding));
}

/* Bytes one row of a column takes in the answer's format.  Binary: what
 * frame_column_cost says.  Text: numbers at their longest text, strings at
 * frame_column_cost's estimate plus quotes and separator. */
static uint64_t row_cost(const frame_column *c, api_format fmt, int codes)
{
    if (fmt == FORMAT_BIN || fmt == FORMAT_NPY)
        return frame_column_cost(c, 1);
    switch (c->encoding) {
    case COL_ARRAY:
    case COL_NULLABLE_INTEGER:
    case COL_NULLABLE_BOOLEAN: return fmt_max_text(c->dtype);
    case COL_CATEGORICAL:
        if (codes)
            return fmt_max_text(c->codes_dtype);
        return c->dtype == DT_STRING ? frame_column_cost(c, 1) + 16 + 3 : fmt_max_text(c->dtype);
    default: return frame_column_cost(c, 1) + 3;
    }
}

/* Bytes an answer takes whatever its rows: names, dtypes, categories. */
static uint64_t fixed_cost(const frame_req *fr)
{
    uint64_t fixed = 128;
    for (size_t i = 0; i < fr->n_cols; i++) {
        const frame_column *c = fr->cols[i];
        fixed = sat_add_u64(fixed, 3 * strlen(c->name) + 32);
        if (c->encoding == COL_CATEGORICAL && c->categories && fr->codes) {
            const node_info *ci = node_get_info(c->categories);
            if (ci->ndim == 1 && ci->shape[0] > 0)
                fixed = sat_add_u64(fixed, sat_mul_u64((uint64_t)ci->shape[0], 24));
        }
    }
    return fixed;
}

/* Bounds the answer before any read: fixed part + rows x cost of a row. */
static int check_cost(api_request *req, const frame_req *fr, cellar_error *err)
{
    int binary = fr->fmt == FORMAT_BIN || fr->fmt == FORMAT_NPY;
    uint64_t per_row = binary ? 0 : row_cost(&fr->f.index, fr->fmt, 0);
    for (size_t i = 0; i < fr->n_cols; i++)
        per_row = sat_add_u64(per_row, row_cost(fr->cols[i], fr->fmt, fr->codes));
    uint64_t fixed = binary ? 128 : fixed_cost(fr);
    uint64_t total = sat_add_u64(fixed, sat_mul_u64((uint64_t)fr->rows.count, per_row));
    uint64_t limit = api_limit(req);
    /* api_check_budget says limit / per_unit rows fit; account for the
     * fixed part by charging it to the rows. */
    uint64_t per_unit = per_row;
    if (limit && total > limit) {
        uint64_t fit = fixed < limit && per_row ? (limit - fixed) / per_row : 0;
        per_unit = fit ? (limit + fit - 1) / fit : UINT64_MAX;
    }
    return api_check_budget(req, total, "rows", per_unit, err);
}

static int read_all(api_request *req, frame_req *fr, cellar_error *err)
{
    int binary = fr->fmt == FORMAT_BIN || fr->fmt == FORMAT_NPY;
    if (!binary) {
        int rc = frame_read_column(&fr->f, &fr->f.index, &fr->rows, req->arena, &fr->index, err);
        if (rc)
            return rc;
    }
    fr->vals = arena_calloc(req->arena, fr->n_cols + 1, sizeof *fr->vals);
    if (!fr->vals)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
    for (size_t i = 0; i < fr->n_cols; i++) {
        int rc = frame_read_column(&fr->f, fr->cols[i], &fr->rows, req->arena, &fr->vals[i], err);
        if (rc)
            return rc;
    }
    return 0;
}

/* ---- JSON ---- */

static int json_item(json_out *j, dtype_kind dt, const void *data, int64_t i)
{
    if (dt == DT_STRING)
        return json_out_str(j, ((char *const *)data)[i]);
    return json_out_typed(j, dt, data, i);
}

static int json_cell(json_out *j, const column_values *v, int64_t i)
{
    if (v->missing && v->missing[i])
        return json_out_null(j);
    if (v->column->encoding == COL_CATEGORICAL) {
        int64_t code = ((const int64_t *)v->data)[i];
        if (code < 0 || code >= v->n_categories)
            return json_out_null(j);
        return json_item(j, v->categories_dtype, v->categories, code);
    }
    return json_item(j, v->dtype, v->data, i);
}

/* Writes one column's data; *done counts cells for the overflow hint. */
static void json_column(json_out *j, const column_values *v, int codes, int64_t *done)
{
    if (codes && v->column->encoding == COL_CATEGORICAL) {
        json_out_map_open(j);
        json_out_str(j, "codes");
        json_out_array_open(j);
        for (int64_t i = 0; i < v->count && json_out_ok(j); i++, (*done)++)
            json_out_int(j, ((const int64_t *)v->data)[i]);
        json_out_array_close(j);
        json_out_str(j, "categories");
        json_out_array_open(j);
        for (int64_t i = 0; i < v->n_categories && json_out_ok(j); i++)
            json_item(j, v->categories_dtype, v->categories, i);
        json_out_array_close(j);
        json_out_str(j, "ordered");
        json_out_bool(j, v->column->ordered);
        json_out_map_close(j);
        return;
    }
    json_out_array_open(j);
    for (int64_t i = 0; i < v->count && json_out_ok(j); i++, (*done)++)
        json_cell(j, v, i);
    json_out_array_close(j);
}

/* "request at most about K rows at a time" from how far writing got. */
static const char *overflow_hint(api_request *req, int64_t cells_done, size_t n_fields)
{
    int64_t rows = cells_done / (int64_t)(n_fields ? n_fields : 1);
    rows = rows * 4 / 5;
    if (rows < 1)
        return "select fewer columns";
    return arena_printf(req->arena,
                        "request at most about %" PRId64 " rows at a time, e.g. rows=0:%" PRId64,
                        rows, rows);
}

static int write_json(api_request *req, api_response *res, frame_req *fr, cellar_error *err)
{
    json_out j;
    int rc = json_out_init(&j, &res->body, api_limit(req), err);
    if (rc)
        return rc;
    int64_t done = 0;
    json_out_map_open(&j);
    json_out_str(&j, "shape");
    json_out_array_open(&j);
    json_out_int(&j, fr->rows.count);
    json_out_int(&j, (int64_t)fr->n_cols);
    json_out_array_close(&j);
    json_out_str(&j, "index_name");
    json_out_str(&j, fr->f.index_name);
    json_out_str(&j, "index");
    json_column(&j, &fr->index, 0, &done);
    json_out_str(&j, "columns");
    json_out_array_open(&j);
    for (size_t i = 0; i < fr->n_cols; i++)
        json_out_str(&j, fr->cols[i]->name);
    json_out_array_close(&j);
    json_out_str(&j, "dtypes");
    json_out_map_open(&j);
    for (size_t i = 0; i < fr->n_cols; i++) {
        json_out_str(&j, fr->cols[i]->name);
        json_out_str(&j, pandas_dtype(fr->cols[i]));
    }
    json_out_map_close(&j);
    json_out_str(&j, "data");
    json_out_map_open(&j);
    for (size_t i = 0; i < fr->n_cols && json_out_ok(&j); i++) {
        json_out_str(&j, fr->cols[i]->name);
        json_column(&j, &fr->vals[i], fr->codes, &done);
    }
    json_out_map_close(&j);
    json_out_map_close(&j);
    rc = json_out_finish(&j, j.over ? overflow_hint(req, done, fr->n_cols + 1) : NULL, err);
    json_out_destroy(&j);
    if (rc)
        return rc;
    res->status = 200;
    res->content_type = "application/json";
    return 0;
}

/* ---- CSV ---- */

static int csv_item(buf *b, dtype_kind dt, const void *data, int64_t i)
{
    if (dt == DT_STRING)
        return csv_field(b, ((char *const *)data)[i]);
    return csv_typed(b, dt, data, i);
}

static int csv_cell(buf *b, const column_values *v, int codes, int64_t i)
{
    if (v->column->encoding == COL_CATEGORICAL) {
        int64_t code = ((const int64_t *)v->data)[i];
        if (codes)
            return buf_printf(b, "%" PRId64, code);
        if (code < 0 || code >= v->n_categories)
            return 0;
        return csv_item(b, v->categories_dtype, v->categories, code);
    }
    if (v->missing && v->missing[i])
        return 0;
    return csv_item(b, v->dtype, v->data, i);
}

static int write_csv(api_request *req, api_response *res, frame_req *fr, cellar_error *err)
{
    buf *b = &res->body;
    uint64_t limit = api_limit(req);
    csv_field(b, fr->f.index_name ? fr->f.index_name : "");
    for (size_t c = 0; c < fr->n_cols; c++) {
        csv_sep(b);
        csv_field(b, fr->cols[c]->name);
    }
    csv_end_record(b);
    for (int64_t i = 0; i < fr->rows.count && !b->failed; i++) {
        csv_cell(b, &fr->index, 0, i);
        for (size_t c = 0; c < fr->n_cols; c++) {
            csv_sep(b);
            csv_cell(b, &fr->vals[c], fr->codes, i);
        }
        csv_end_record(b);
        if (limit && b->len > limit)
            return cellar_fail(err, CELLAR_ETOOBIG,
                               "the answer grew over the limit of %" PRIu64 " bytes; %s", limit,
                               overflow_hint(req, i, 1));
    }
    if (b->failed)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory writing CSV");
    res->status = 200;
    res->content_type = "text/csv; charset=utf-8";
    return 0;
}

/* ---- bin / npy ---- */

static int write_binary(api_request *req, api_response *res, frame_req *fr, dtype_kind dt,
                        cellar_error *err)
{
    const column_values *v = &fr->vals[0];
    int64_t shape[1] = {v->count};
    int rc = api_begin_binary(req, res, fr->fmt, dt, shape, 1, err);
    if (rc)
        return rc;
    size_t size = dtype_size(dt);
    char *p = buf_reserve(&res->body, (size_t)v->count * size);
    if (!p)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
    if (v->column->encoding != COL_CATEGORICAL) {
        memcpy(p, v->data, (size_t)v->count * size);
    } else {
        /* Codes come widened to int64; give them back at their stored width. */
        const int64_t *codes = v->data;
        for (int64_t i = 0; i < v->count; i++) {
            switch (dt) {
            case DT_INT8: ((int8_t *)(void *)p)[i] = (int8_t)codes[i]; break;
            case DT_INT16: ((int16_t *)(void *)p)[i] = (int16_t)codes[i]; break;
            case DT_INT32: ((int32_t *)(void *)p)[i] = (int32_t)codes[i]; break;
            case DT_UINT8: ((uint8_t *)(void *)p)[i] = (uint8_t)codes[i]; break;
            case DT_UINT16: ((uint16_t *)(void *)p)[i] = (uint16_t)codes[i]; break;
            case DT_UINT32: ((uint32_t *)(void *)p)[i] = (uint32_t)codes[i]; break;
            default: memcpy(p + (size_t)i * 8, &codes[i], 8); break;
            }
        }
    }
    res->body.len += (size_t)v->count * size;
    return 0;
}

/* Every data frame answer: obs, var, raw/var (group NULL: found from the
 * route) and obsm/varm data frames (group and what given). */
static int frame_answer(api_request *req, api_response *res, node *group, const char *what,
                        const char *names_param, cellar_error *err)
{
    const char *const allowed[] = {"rows", names_param, "columns", "categorical", NULL};
    frame_req fr;
    memset(&fr, 0, sizeof fr);
    dtype_kind bin_dt = DT_NONE;
    int rc = api_check_params(req, allowed, err);
    if (!rc)
        rc = api_negotiate_format(req, FRAME_FORMATS, &fr.fmt, err);
    if (!rc)
        rc = parse_categorical(req, &fr, err);
    if (!rc)
        rc = open_frame(req, &fr, group, what, err);
    if (!rc)
        rc = parse_columns(req, &fr, err);
    if (!rc && (fr.fmt == FORMAT_BIN || fr.fmt == FORMAT_NPY))
        rc = binary_dtype(&fr, &bin_dt, err);
    if (!rc)
        rc = parse_rows(req, &fr, names_param, err);
    if (!rc)
        rc = check_cost(req, &fr, err);
    if (!rc)
        rc = read_all(req, &fr, err);
    if (rc)
        return rc;
    res->body.len = 0;
    switch (fr.fmt) {
    case FORMAT_CSV: return write_csv(req, res, &fr, err);
    case FORMAT_BIN:
    case FORMAT_NPY: return write_binary(req, res, &fr, bin_dt, err);
    default: return write_json(req, res, &fr, err);
    }
}

int api_frame(api_request *req, api_response *res, cellar_error *err)
{
    const char *names_param =
        req->element && strcmp(req->element, "var") == 0 ? "var_names" : "obs_names";
    return frame_answer(req, res, NULL, NULL, names_param, err);
}

int api_frame_group(api_request *req, api_response *res, node *group, const char *what,
                    const char *names_param, cellar_error *err)
{
    return frame_answer(req, res, group, what, names_param, err);
}

/* ---- schema ---- */

static void schema_column(json_out *j, const frame *f, const frame_column *c, arena *a)
{
    json_out_map_open(j);
    json_out_str(j, "name");
    json_out_str(j, c->name);
    json_out_str(j, "dtype");
    json_out_str(j, pandas_dtype(c));
    json_out_str(j, "encoding");
    json_out_str(j, c->encoding ? col_encoding_name(c->encoding)
                                : (c->values ? element_encoding(c->values) : NULL));
    if (c->encoding == COL_CATEGORICAL) {
        column_values v;
        dim_sel none = dim_sel_range(0, 0);
        cellar_error err;
        cellar_error_clear(&err);
        json_out_str(j, "categories");
        if (frame_read_column(f, c, &none, a, &v, &err) == 0) {
            json_out_array_open(j);
            for (int64_t i = 0; i < v.n_categories && json_out_ok(j); i++)
                json_item(j, v.categories_dtype, v.categories, i);
            json_out_array_close(j);
        } else {
            json_out_null(j);
        }
        json_out_str(j, "categories_dtype");
        json_out_str(j, dtype_name(c->dtype));
        json_out_str(j, "ordered");
        json_out_bool(j, c->ordered);
    }
    json_out_map_close(j);
}

int api_frame_schema(api_request *req, api_response *res, cellar_error *err)
{
    static const char *const allowed[] = {NULL};
    frame_req fr;
    memset(&fr, 0, sizeof fr);
    int rc = api_check_params(req, allowed, err);
    if (!rc)
        rc = api_negotiate_format(req, 1u << FORMAT_JSON, &fr.fmt, err);
    if (!rc)
        rc = open_frame(req, &fr, NULL, NULL, err);
    if (rc)
        return rc;
    json_out j;
    res->body.len = 0;
    rc = json_out_init(&j, &res->body, api_limit(req), err);
    if (rc)
        return rc;
    json_out_map_open(&j);
    json_out_str(&j, "index");
    json_out_map_open(&j);
    json_out_str(&j, "name");
    json_out_str(&j, fr.f.index_name);
    json_out_str(&j, "dtype");
    json_out_str(&j, pandas_dtype(&fr.f.index));
    json_out_str(&j, "encoding");
    json_out_str(&j, fr.f.index.encoding ? col_encoding_name(fr.f.index.encoding) : NULL);
    json_out_map_close(&j);
    json_out_str(&j, "n_rows");
    json_out_int(&j, fr.f.n_rows);
    json_out_str(&j, "columns");
    json_out_array_open(&j);
    for (size_t i = 0; i < fr.f.n_columns && json_out_ok(&j); i++)
        schema_column(&j, &fr.f, &fr.f.columns[i], req->arena);
    json_out_array_close(&j);
    json_out_map_close(&j);
    rc = json_out_finish(&j, "the categories are too many to list", err);
    json_out_destroy(&j);
    if (rc)
        return rc;
    res->status = 200;
    res->content_type = "application/json";
    return 0;
}
