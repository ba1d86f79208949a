/* MuData maps: /v1/stores/{store}/obsmap/{mod} and /varmap/{mod}. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "api/v1/routes.h"
#include "api/encode/json_out.h"
#include "storage/anndata/anndata.h"
#include "storage/budget.h"
#include "storage/registry.h"

#define MAP_FORMATS ((1u << FORMAT_JSON) | (1u << FORMAT_BIN) | (1u << FORMAT_NPY))

typedef struct map_req {
    const char *axis;        /* "obs" or "var" */
    const char *element;     /* "obsmap" or "varmap" */
    const char *names_param; /* "obs_names" or "var_names" */
    api_format fmt;
    const uint32_t *map;     /* for every global row: 1-based modality row, 0 = absent */
    int64_t n;               /* global rows */
} map_req;

/* For every modality row, its first global row (-1 when none): built once
 * per store version from the map and shared. */
typedef struct reverse_map {
    int64_t m;
    int64_t rows[];
} reverse_map;

typedef struct reverse_ctx {
    const uint32_t *map;
    int64_t n, m;
    const char *what; /* names the map in errors */
} reverse_ctx;

static int reverse_build(void *ctx, void **value, size_t *bytes, cellar_error *err)
{
    const reverse_ctx *c = ctx;
    /* Eight bytes a modality row, as many as the modality's index claims:
     * bounded before it is allocated. */
    int rc = budget_check_whole(c->m, sizeof(int64_t), c->what, err);
    if (rc)
        return rc;
    if ((uint64_t)c->m > (SIZE_MAX - sizeof(reverse_map)) / sizeof(int64_t))
        return cellar_fail(err, CELLAR_EFORMAT, "modality too long for a reverse map");
    size_t size = sizeof(reverse_map) + (size_t)c->m * sizeof(int64_t);
    reverse_map *r = malloc(size);
    if (!r)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory building a reverse map");
    r->m = c->m;
    for (int64_t k = 0; k < c->m; k++)
        r->rows[k] = -1;
    for (int64_t i = 0; i < c->n; i++) {
        uint32_t k = c->map[i];
        if (k && (int64_t)k <= c->m && r->rows[k - 1] < 0)
            r->rows[k - 1] = i;
    }
    *value = r;
    *bytes = size;
    return 0;
}

static void reverse_free(void *value)
{
    free(value);
}

static int json_begin(api_request *req, api_response *res, json_out *j, cellar_error *err)
{
    res->body.len = 0;
    int rc = json_out_init(j, &res->body, api_limit(req), err);
    if (rc)
        return rc;
    json_out_map_open(j);
    json_out_str(j, "mod");
    json_out_str(j, req->mod);
    return 0;
}

static int json_end(api_response *res, json_out *j, cellar_error *err)
{
    json_out_map_close(j);
    int rc = json_out_finish(j, "select fewer rows", err);
    json_out_destroy(j);
    if (rc)
        return rc;
    res->status = 200;
    res->content_type = "application/json";
    return 0;
}

static int reverse(api_request *req, api_response *res, map_req *mr, const selection *sel,
                   cellar_error *err)
{
    node *root = store_root(req->store), *g;
    anndata_info ai;
    int rc = mudata_mod(root, req->mod, &g, err);
    if (!rc)
        rc = anndata_open(g, &ai, err);
    if (rc)
        return rc;
    reverse_ctx ctx = {mr->map, mr->n, strcmp(mr->axis, "obs") == 0 ? ai.n_obs : ai.n_vars,
                       arena_printf(req->arena, "the reverse %s of modality '%s'", mr->element,
                                    req->mod)};
    if (!ctx.what)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
    dim_sel rows;
    rc = selection_resolve(sel, ctx.m, "mod_rows", req->arena, &rows, err);
    int binary = mr->fmt != FORMAT_JSON;
    if (!rc)
        rc = api_check_budget(req, (uint64_t)rows.count * (binary ? 8 : 24), "mod_rows",
                              binary ? 8 : 24, err);
    const char *key = arena_printf(req->arena, "api.reverse_map/%s/%s", mr->axis, req->mod);
    void *value = NULL;
    if (!rc && !key)
        rc = cellar_fail(err, CELLAR_ENOMEM, "out of memory");
    if (!rc)
        rc = store_derived(req->store, key, reverse_build, &ctx, reverse_free, &value, err);
    if (rc)
        return rc;
    const reverse_map *r = value;
    int64_t *out = arena_calloc(req->arena, (size_t)rows.count + 1, sizeof *out);
    if (!out)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
    for (int64_t i = 0; i < rows.count; i++) {
        int64_t k = dim_sel_at(&rows, i);
        if (k >= r->m || r->rows[k] < 0)
            return cellar_fail(err, CELLAR_ENOTFOUND,
                               "row %" PRId64 " of modality '%s' has no global row in %s", k,
                               req->mod, mr->element);
        out[i] = r->rows[k];
    }
    if (binary) {
        int64_t shape[1] = {rows.count};
        rc = api_begin_binary(req, res, mr->fmt, DT_INT64, shape, 1, err);
        if (!rc && buf_append(&res->body, out, (size_t)rows.count * sizeof *out))
            rc = cellar_fail(err, CELLAR_ENOMEM, "out of memory");
        return rc;
    }
    json_out j;
    rc = json_begin(req, res, &j, err);
    if (rc)
        return rc;
    json_out_str(&j, "mod_rows");
    json_out_array_open(&j);
    for (int64_t i = 0; i < rows.count && json_out_ok(&j); i++)
        json_out_int(&j, dim_sel_at(&rows, i));
    json_out_array_close(&j);
    json_out_str(&j, "rows");
    json_out_array_open(&j);
    for (int64_t i = 0; i < rows.count && json_out_ok(&j); i++)
        json_out_int(&j, out[i]);
    json_out_array_close(&j);
    return json_end(res, &j, err);
}

/* The global rows a forward request selects (rows= or names), and the
 * global frame for the names.  *names is the list the request gave (NULL
 * when it selected by rows). */
static int forward_rows(api_request *req, map_req *mr, const selection *sel, int sel_present,
                        frame *f, dim_sel *rows, const char ***names_out, cellar_error *err)
{
    const char **names;
    size_t n_names;
    *names_out = NULL;
    int rc = api_param_list(req, mr->names_param, &names, &n_names, err);
    if (rc)
        return rc;
    if (sel_present && names)
        return cellar_fail(err, CELLAR_EINVAL, "give either rows or %s, not both",
                           mr->names_param);
    node *fg = node_child_opt(store_root(req->store), mr->axis);
    if (!fg)
        return cellar_fail(err, CELLAR_EFORMAT, "store '%s' has no global %s", req->store_name,
                           mr->axis);
    rc = frame_open(fg, req->arena, f, err);
    if (rc)
        return rc;
    if (f->n_rows != mr->n)
        return cellar_fail(err, CELLAR_EFORMAT, "%s has %" PRId64 " entries but %s has %" PRId64
                           " rows", mr->element, mr->n, mr->axis, f->n_rows);
    if (!names)
        return selection_resolve(sel, mr->n, "rows", req->arena, rows, err);
    int64_t *pos = arena_calloc(req->arena, n_names + 1, sizeof *pos);
    if (!pos)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
    if (n_names) {
        rc = frame_lookup_names(req->store, f, names, n_names, pos, err);
        if (rc)
            return rc;
    }
    *rows = (dim_sel){.start = 0, .step = 1, .count = (int64_t)n_names, .index = pos};
    *names_out = names;
    return 0;
}

/* The names to echo for the selected rows: the request's own names when it
 * gave them and the index holds strings (a lookup matches the stored text
 * exactly, so reading them back would give the same strings); else read
 * from the index. */
static int forward_names(api_request *req, const frame *f, const dim_sel *rows,
                         const char **given, column_values *out, cellar_error *err)
{
    if (given && f->index.dtype == DT_STRING && f->index.encoding != COL_CATEGORICAL) {
        memset(out, 0, sizeof *out);
        out->column = &f->index;
        out->count = rows->count;
        out->dtype = DT_STRING;
        out->data = (void *)given;
        return 0;
    }
    return frame_read_column(f, &f->index, rows, req->arena, out, err);
}

static int forward(api_request *req, api_response *res, map_req *mr, const selection *sel,
                   int sel_present, cellar_error *err)
{
    frame f;
    dim_sel rows;
    const char **given = NULL;
    int rc = forward_rows(req, mr, sel, sel_present, &f, &rows, &given, err);
    int binary = mr->fmt != FORMAT_JSON;
    uint64_t per_row = binary ? 4 : 12 + frame_column_cost(&f.index, 1);
    if (!rc)
        rc = api_check_budget(req, (uint64_t)rows.count * per_row, "rows", per_row, err);
    if (rc)
        return rc;
    if (binary) {
        int64_t shape[1] = {rows.count};
        rc = api_begin_binary(req, res, mr->fmt, DT_UINT32, shape, 1, err);
        if (rc)
            return rc;
        uint32_t *p = (uint32_t *)(void *)buf_reserve(&res->body, (size_t)rows.count * 4);
        if (!p)
            return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
        for (int64_t i = 0; i < rows.count; i++)
            p[i] = mr->map[dim_sel_at(&rows, i)];
        res->body.len += (size_t)rows.count * 4;
        return 0;
    }
    column_values names;
    rc = forward_names(req, &f, &rows, given, &names, err);
    if (rc)
        return rc;
    json_out j;
    rc = json_begin(req, res, &j, err);
    if (rc)
        return rc;
    json_out_str(&j, "rows");
    json_out_array_open(&j);
    for (int64_t i = 0; i < rows.count && json_out_ok(&j); i++)
        json_out_int(&j, dim_sel_at(&rows, i));
    json_out_array_close(&j);
    json_out_str(&j, mr->names_param);
    json_out_array_open(&j);
    for (int64_t i = 0; i < names.count && json_out_ok(&j); i++) {
        if (names.missing && names.missing[i])
            json_out_null(&j);
        else if (names.dtype == DT_STRING)
            json_out_str(&j, ((char *const *)names.data)[i]);
        else
            json_out_typed(&j, names.dtype, names.data, i);
    }
    json_out_array_close(&j);
    json_out_str(&j, mr->element);
    json_out_array_open(&j);
    for (int64_t i = 0; i < rows.count && json_out_ok(&j); i++)
        json_out_uint(&j, mr->map[dim_sel_at(&rows, i)]);
    json_out_array_close(&j);
    return json_end(res, &j, err);
}

int api_map(api_request *req, api_response *res, cellar_error *err)
{
    map_req mr;
    memset(&mr, 0, sizeof mr);
    if (req->element && strcmp(req->element, "obsmap") == 0) {
        mr.axis = "obs";
        mr.names_param = "obs_names";
    } else if (req->element && strcmp(req->element, "varmap") == 0) {
        mr.axis = "var";
        mr.names_param = "var_names";
    } else {
        return cellar_fail(err, CELLAR_ENOTFOUND, "no map '%s'",
                           req->element ? req->element : "");
    }
    mr.element = req->element;
    const char *const allowed[] = {"rows", mr.names_param, "mod_rows", NULL};
    selection sel, mod_sel;
    int present = 0, mod_present = 0;
    int rc = api_check_params(req, allowed, err);
    if (!rc)
        rc = api_negotiate_format(req, MAP_FORMATS, &mr.fmt, err);
    if (!rc)
        rc = api_param_selection(req, "rows", &sel, &present, err);
    if (!rc)
        rc = api_param_selection(req, "mod_rows", &mod_sel, &mod_present, err);
    if (rc)
        return rc;
    if (mod_present) {
        const char **names;
        size_t n_names;
        rc = api_param_list(req, mr.names_param, &names, &n_names, err);
        if (rc)
            return rc;
        if (present || names)
            return cellar_fail(err, CELLAR_EINVAL,
                               "mod_rows asks the reverse map: give it without rows or %s",
                               mr.names_param);
    }
    rc = api_open_store(req, err);
    if (rc)
        return rc;
    if (store_get_kind(req->store) != KIND_MUDATA)
        return cellar_fail(err, CELLAR_ENOTFOUND, "store '%s' is not a MuData store",
                           req->store_name);
    if (!req->mod)
        return cellar_fail(err, CELLAR_ENOTFOUND, "no modality named in the path");
    rc = mudata_map(req->store, store_root(req->store), mr.axis, req->mod, &mr.map, &mr.n, err);
    if (rc)
        return rc;
    if (mod_present)
        return reverse(req, res, &mr, &mod_sel, err);
    return forward(req, res, &mr, &sel, present, err);
}
