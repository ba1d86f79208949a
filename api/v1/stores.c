/* The store routes: the listing, one store's summary, MuData modalities. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "api/v1/routes.h"
#include "api/encode/json_out.h"
#include "storage/anndata/anndata.h"
#include "storage/anndata/legacy.h"
#include "storage/anndata/column_index.h"
#include "storage/anndata/matrix.h"
#include "storage/registry.h"
#include "storage/trees/trees.h"
#include "storage/zarr/zarr.h"

/* A jansson document under construction: set() steals v and records an
 * allocation failure instead of checking at every call. */
typedef struct doc {
    json_t *root;
    int failed;
    /* Rendering for the per-version cache: X's column index (which changes
     * while the version lives) is written as PLACEHOLDER and filled in per
     * request. */
    int placeholder;
    int cacheable; /* cleared when the document holds a passing failure */
} doc;

/* A string no summary holds otherwise as the value of "column_index"
 * (keys are all fixed here; user text only appears as values). */
#define CI_PLACEHOLDER "\001column_index\001"
#define CI_PLACEHOLDER_JSON "\"column_index\":\"\\u0001column_index\\u0001\""
#define CI_KEY_JSON "\"column_index\":"

static json_t *set(doc *d, json_t *obj, const char *key, json_t *v)
{
    if (!v || !obj || json_object_set_new(obj, key, v))
        d->failed = 1;
    return v;
}

static void append(doc *d, json_t *arr, json_t *v)
{
    if (!v || !arr || json_array_append_new(arr, v))
        d->failed = 1;
}

static json_t *iso_time(struct timespec t)
{
    struct tm tm;
    char text[40];
    time_t secs = t.tv_sec;
    if (!gmtime_r(&secs, &tm) || !strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &tm))
        return json_null();
    return json_string(text);
}

static json_t *shape2(doc *d, int64_t a, int64_t b)
{
    json_t *s = json_array();
    append(d, s, json_integer(a));
    append(d, s, json_integer(b));
    return s;
}

static json_t *shape_of(doc *d, const node_info *info)
{
    json_t *s = json_array();
    for (int i = 0; i < info->ndim; i++)
        append(d, s, json_integer(info->shape[i]));
    return s;
}

/* The names of a group's children; [] when absent or not a group. */
static json_t *child_keys(doc *d, node *parent, const char *name, arena *a)
{
    json_t *keys = json_array();
    node *g = parent ? node_child_opt(parent, name) : NULL;
    if (!g || node_get_info(g)->type != NODE_GROUP)
        return keys;
    const char **names = NULL;
    size_t n = 0;
    cellar_error err;
    cellar_error_clear(&err);
    if (node_children(g, a, &names, &n, &err))
        return keys;
    for (size_t i = 0; i < n; i++)
        append(d, keys, json_str_sanitized(names[i]));
    return keys;
}

/* {"index_name": ..., "columns": [...]} of a data frame; empty when the
 * frame is absent or unreadable (the summary stays useful). */
static json_t *frame_summary(doc *d, node *parent, const char *name, arena *a)
{
    json_t *o = json_object();
    json_t *cols = json_array();
    node *g = parent ? node_child_opt(parent, name) : NULL;
    frame f;
    cellar_error err;
    cellar_error_clear(&err);
    if (g && frame_open(g, a, &f, &err) == 0) {
        set(d, o, "index_name", json_str_sanitized(f.index_name));
        for (size_t i = 0; i < f.n_columns; i++)
            append(d, cols, json_str_sanitized(f.columns[i].name));
    } else {
        set(d, o, "index_name", json_null());
    }
    set(d, o, "columns", cols);
    return o;
}

static json_t *int_array_attr(doc *d, const node *n, const char *name)
{
    const json_t *v = json_object_get(node_attrs(n), name);
    if (!json_is_array(v))
        return NULL;
    json_t *s = json_array();
    size_t i;
    const json_t *item;
    json_array_foreach(v, i, item) append(d, s, json_integer((json_int_t)json_number_value(item)));
    return s;
}

/* {"state", "bytes"} of the column index of a CSR matrix, or NULL for
 * anything else (dense arrays and CSC need none). */
static json_t *column_index_summary(doc *d, store *s, node *x)
{
    matrix m;
    cellar_error err;
    cellar_error_clear(&err);
    if (matrix_open(x, &m, &err) != 0 || m.layout != MATRIX_CSR)
        return NULL;
    size_t bytes = 0;
    column_index_state state = column_index_peek(s, &m, &bytes);
    json_t *o = json_object();
    set(d, o, "state", json_string(column_index_state_name(state)));
    set(d, o, "bytes", json_integer((json_int_t)bytes));
    return o;
}

/* {"shape", "dtype", "encoding"} of a matrix element (X, a layer), or null;
 * a CSR matrix also reports its column index ("column_index"). */
static json_t *matrix_summary(doc *d, store *s, node *x)
{
    if (!x)
        return json_null();
    const node_info *info = node_get_info(x);
    const char *enc = element_encoding(x);
    if (info->type == NODE_ARRAY) {
        if (info->ndim < 0 || (enc && strcmp(enc, "null") == 0))
            return json_null();
        json_t *o = json_object();
        set(d, o, "shape", shape_of(d, info));
        set(d, o, "dtype", json_string(dtype_name(info->dtype)));
        set(d, o, "encoding", json_string(enc ? enc : "array"));
        return o;
    }
    json_t *o = json_object();
    if (!enc) {
        const char *legacy = node_attr_string(x, "h5sparse_format");
        enc = legacy && strcmp(legacy, "csr") == 0   ? "csr_matrix"
              : legacy && strcmp(legacy, "csc") == 0 ? "csc_matrix"
                                                     : NULL;
    }
    json_t *shape = int_array_attr(d, x, "shape");
    if (!shape)
        shape = int_array_attr(d, x, "h5sparse_shape");
    set(d, o, "shape", shape ? shape : json_null());
    node *data = node_child_opt(x, "data");
    set(d, o, "dtype",
        data ? json_string(dtype_name(node_get_info(data)->dtype)) : json_null());
    set(d, o, "encoding", enc ? json_str_sanitized(enc) : json_null());
    json_t *ci = column_index_summary(d, s, x);
    if (ci && d->placeholder) {
        json_decref(ci);
        ci = json_string(CI_PLACEHOLDER);
    }
    if (ci)
        set(d, o, "column_index", ci);
    return o;
}

/* {"shape": [n_obs, n_raw_vars]} or null. */
static json_t *raw_summary(doc *d, node *root, int64_t n_obs, arena *a)
{
    node *raw = node_child_opt(root, "raw");
    if (!raw || node_get_info(raw)->type != NODE_GROUP)
        return json_null();
    int64_t n_vars = -1;
    frame f;
    cellar_error err;
    cellar_error_clear(&err);
    node *var = node_child_opt(raw, "var");
    if (var && frame_open(var, a, &f, &err) == 0) {
        n_vars = f.n_rows;
    } else {
        node *x = node_child_opt(raw, "X");
        const node_info *xi = x ? node_get_info(x) : NULL;
        if (xi && xi->type == NODE_ARRAY && xi->ndim == 2) {
            n_vars = xi->shape[1];
        } else if (xi && xi->type == NODE_GROUP) {
            json_t *s = int_array_attr(d, x, "shape");
            if (!s)
                s = int_array_attr(d, x, "h5sparse_shape");
            if (s && json_array_size(s) == 2)
                n_vars = (int64_t)json_integer_value(json_array_get(s, 1));
            json_decref(s);
        }
    }
    json_t *o = json_object();
    set(d, o, "shape", n_vars >= 0 ? shape2(d, n_obs, n_vars) : json_null());
    return o;
}

/* The modalities in order with their shapes. */
static int mod_array(doc *d, node *root, const mudata_info *mi, json_t **out,
                     cellar_error *err)
{
    json_t *mods = json_array();
    for (size_t i = 0; i < mi->n_mods; i++) {
        node *g;
        anndata_info ai;
        int rc = mudata_mod(root, mi->mods[i], &g, err);
        if (!rc)
            rc = anndata_open(g, &ai, err);
        if (rc) {
            json_decref(mods);
            return rc;
        }
        json_t *m = json_object();
        set(d, m, "name", json_str_sanitized(mi->mods[i]));
        set(d, m, "shape", shape2(d, ai.n_obs, ai.n_vars));
        append(d, mods, m);
    }
    *out = mods;
    return 0;
}

/* Keys of obst/vart from the loaded forest (storage/trees/trees.h, built once
 * per store version); notes says why keys are missing when the trees
 * cannot be read. */
static json_t *tree_keys(doc *d, store *s, node *root, const char *name, json_t *notes)
{
    json_t *keys = json_array();
    const trees_loaded *t;
    cellar_error err;
    cellar_error_clear(&err);
    if (trees_get(s, root, name, &t, &err)) {
        d->cacheable = 0; /* a failed build is retried: so is the summary */
        append(d, notes, json_str_sanitized(err.detail));
        return keys;
    }
    for (size_t i = 0; i < tree_forest_count(t->forest); i++)
        append(d, keys, json_str_sanitized(tree_forest_key(t->forest, i)));
    return keys;
}

static int reply(api_response *res, doc *d, cellar_error *err)
{
    int rc = d->failed ? cellar_fail(err, CELLAR_ENOMEM, "out of memory building the answer")
                       : api_reply_json_doc(res, d->root, err);
    json_decref(d->root);
    d->root = NULL;
    return rc;
}

int api_stores_list(api_request *req, api_response *res, cellar_error *err)
{
    int rc = api_check_plain_json(req, err);
    store_listing *list = NULL;
    size_t n = 0;
    if (!rc)
        rc = registry_list(req->registry, req->arena, &list, &n, err);
    if (rc)
        return rc;
    doc d = {json_object(), 0, 0, 0};
    json_t *stores = set(&d, d.root, "stores", json_array());
    for (size_t i = 0; i < n; i++) {
        if (!api_may_read(req, list[i].name))
            continue;
        json_t *o = json_object();
        set(&d, o, "name", json_str_sanitized(list[i].name));
        set(&d, o, "kind", json_string(store_kind_name(list[i].kind)));
        set(&d, o, "backend", json_string(store_backend_name(list[i].backend)));
        set(&d, o, "bytes", list[i].bytes_known ? json_integer((json_int_t)list[i].bytes) : json_null());
        set(&d, o, "mtime", iso_time(list[i].mtime));
        append(&d, stores, o);
    }
    return reply(res, &d, err);
}

static int summary_treedata(doc *d, store *s, node *root, arena *a, cellar_error *err)
{
    treedata_info ti;
    json_t *notes = json_array();
    cellar_error legacy;
    cellar_error_clear(&legacy);
    int rc = trees_treedata_info(s, root, a, &ti, &legacy);
    if (rc == CELLAR_EFORMAT && node_child_opt(root, "raw.treedata")) {
        /* raw.treedata is broken: the elements' settings, and why */
        d->cacheable = 0;
        append(d, notes, json_str_sanitized(legacy.detail));
        rc = treedata_open(root, a, &ti, err);
    } else if (rc) {
        cellar_fail(err, rc, "%s", legacy.detail);
    }
    if (rc) {
        json_decref(notes);
        return rc;
    }
    set(d, d->root, "label", json_str_sanitized(ti.label));
    set(d, d->root, "alignment", json_str_sanitized(ti.alignment));
    set(d, d->root, "allow_overlap", json_boolean(ti.allow_overlap));
    set(d, d->root, "obst", tree_keys(d, s, root, "obst", notes));
    set(d, d->root, "vart", tree_keys(d, s, root, "vart", notes));
    if (json_array_size(notes))
        set(d, d->root, "notes", notes);
    else
        json_decref(notes);
    return 0;
}

/* Where zarr clients read the store (relative to the store's URL): zarr/
 * for zarr-python, zarrita.js and anndata/mudata/treedata's read_zarr (a
 * zarr store's own keys, or the zarr v2 view of an HDF5 file), zarr-csc/
 * for clients that read genes of CSR matrices by column (Vitessce). */
static json_t *zarr_summary(doc *d, store *s)
{
    json_t *o = json_object();
    int hdf5 = store_get_backend(s) == BACKEND_HDF5;
    set(d, o, "prefix", json_string("zarr/"));
    set(d, o, "csc_prefix", hdf5 ? json_string("zarr-csc/") : json_null());
    set(d, o, "hdf5_view", json_boolean(hdf5));
    set(d, o, "zarr_format", json_integer(hdf5 ? 2 : zarr_format(store_root(s))));
    return o;
}

/* The summary document of store s into d->root. */
static int summary_doc(doc *d, store *s, arena *a, cellar_error *err)
{
    node *root;
    anndata_info ai;
    int rc = legacy_view(store_root(s), &root, err);
    if (!rc)
        rc = anndata_open(root, &ai, err);
    if (rc)
        return rc;
    store_kind kind = store_get_kind(s);
    d->root = json_object();
    set(d, d->root, "name", json_str_sanitized(store_name(s)));
    set(d, d->root, "kind", json_string(store_kind_name(kind)));
    set(d, d->root, "backend", json_string(store_backend_name(store_get_backend(s))));
    uint64_t bytes = 0;
    set(d, d->root, "bytes",
        store_total_bytes(s, &bytes) == 0 ? json_integer((json_int_t)bytes) : json_null());
    set(d, d->root, "mtime", iso_time(store_mtime(s)));
    set(d, d->root, "etag", json_string(store_etag(s)));
    set(d, d->root, "zarr", zarr_summary(d, s));
    set(d, d->root, "shape", shape2(d, ai.n_obs, ai.n_vars));
    set(d, d->root, "obs", frame_summary(d, root, "obs", a));
    set(d, d->root, "var", frame_summary(d, root, "var", a));
    set(d, d->root, "X", matrix_summary(d, s, node_child_opt(root, "X")));
    static const char *const groups[] = {"obsm", "varm", "obsp", "varp", "layers", "uns"};
    for (size_t i = 0; i < sizeof groups / sizeof groups[0]; i++)
        set(d, d->root, groups[i], child_keys(d, root, groups[i], a));
    set(d, d->root, "raw", raw_summary(d, root, ai.n_obs, a));
    if (kind == KIND_MUDATA) {
        mudata_info mi;
        json_t *mods = NULL;
        rc = mudata_open(root, a, &mi, err);
        if (!rc)
            rc = mod_array(d, root, &mi, &mods, err);
        if (!rc) {
            set(d, d->root, "axis", json_integer(mi.axis));
            set(d, d->root, "mod", mods);
        }
    } else if (kind == KIND_TREEDATA) {
        rc = summary_treedata(d, s, store_root(s), a, err);
    }
    if (!rc && d->failed)
        rc = cellar_fail(err, CELLAR_ENOMEM, "out of memory building the answer");
    if (rc) {
        json_decref(d->root);
        d->root = NULL;
    }
    return rc;
}

/* A rendered answer kept per store version (store_derived): the text, and
 * for the summary where X's column index goes (hole..hole_end, empty when
 * X has none). */
typedef struct rendered {
    size_t len, hole, hole_end;
    char text[];
} rendered;

static int rendered_new(const buf *b, size_t hole, size_t hole_end, void **value, size_t *bytes,
                        cellar_error *err)
{
    rendered *r = malloc(sizeof *r + b->len + 1);
    if (!r)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory keeping an answer");
    r->len = b->len;
    r->hole = hole;
    r->hole_end = hole_end;
    if (b->len)
        memcpy(r->text, b->data, b->len);
    r->text[b->len] = '\0';
    *value = r;
    *bytes = sizeof *r + b->len + 1;
    return 0;
}

static void rendered_free(void *value)
{
    free(value);
}

/* Summaries that hold a passing failure (notes) are not kept. */
#define NOT_KEPT CELLAR_EUNAVAILABLE

static int summary_build(void *ctx, void **value, size_t *bytes, cellar_error *err)
{
    store *s = ctx;
    arena *a = arena_new();
    if (!a)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
    doc d = {NULL, 0, 1, 1};
    buf b = {0};
    int rc = summary_doc(&d, s, a, err);
    if (!rc && !d.cacheable)
        rc = cellar_fail(err, NOT_KEPT, "summary not kept");
    if (!rc)
        rc = json_dump_buf(d.root, &b, err);
    if (!rc) {
        size_t hole = b.len, hole_end = b.len;
        const char *p = b.len ? memmem(b.data, b.len, CI_PLACEHOLDER_JSON,
                                       strlen(CI_PLACEHOLDER_JSON))
                              : NULL;
        if (p) {
            hole = (size_t)(p - b.data) + strlen(CI_KEY_JSON);
            hole_end = (size_t)(p - b.data) + strlen(CI_PLACEHOLDER_JSON);
        }
        rc = rendered_new(&b, hole, hole_end, value, bytes, err);
    }
    json_decref(d.root);
    buf_destroy(&b);
    arena_free(a);
    return rc;
}

/* The summary kept for this version, with X's column index as it is now. */
static int summary_from_cache(store *s, const rendered *r, api_response *res,
                              cellar_error *err)
{
    res->status = 200;
    res->content_type = "application/json";
    res->body.len = 0;
    if (buf_append(&res->body, r->text, r->hole))
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
    if (r->hole < r->hole_end) {
        doc d = {NULL, 0, 0, 1};
        node *root = store_root(s);
        cellar_error ignored;
        cellar_error_clear(&ignored);
        if (legacy_view(root, &root, &ignored))
            root = store_root(s); /* the summary kept was made through the view */
        json_t *ci = column_index_summary(&d, s, node_child_opt(root, "X"));
        /* The index's state moves on (absent, building, ready): until it is
         * ready the server must not keep this answer for repeated requests. */
        const char *state = json_string_value(json_object_get(ci, "state"));
        res->uncacheable = !state || strcmp(state, column_index_state_name(COLUMN_INDEX_READY));
        int rc = ci && !d.failed ? json_dump_buf(ci, &res->body, err)
                                 : cellar_fail(err, CELLAR_EINTERNAL,
                                               "the column index of X cannot be read");
        json_decref(ci);
        if (rc)
            return rc;
    }
    if (buf_append(&res->body, r->text + r->hole_end, r->len - r->hole_end))
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
    return 0;
}

int api_store_summary(api_request *req, api_response *res, cellar_error *err)
{
    int rc = api_check_plain_json(req, err);
    if (!rc)
        rc = api_open_store(req, err);
    if (rc)
        return rc;
    void *v = NULL;
    cellar_error e;
    cellar_error_clear(&e);
    rc = store_derived(req->store, "api.summary", summary_build, req->store, rendered_free, &v,
                       &e);
    if (!rc)
        return summary_from_cache(req->store, v, res, err);
    if (rc != NOT_KEPT)
        return cellar_fail(err, rc, "%s", e.detail);
    doc d = {NULL, 0, 0, 1};
    rc = summary_doc(&d, req->store, req->arena, err);
    if (rc)
        return rc;
    return reply(res, &d, err);
}

static int modlist_build(void *ctx, void **value, size_t *bytes, cellar_error *err)
{
    store *s = ctx;
    node *root = store_root(s);
    arena *a = arena_new();
    if (!a)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
    mudata_info mi;
    json_t *mods = NULL;
    doc d = {json_object(), 0, 0, 1};
    buf b = {0};
    int rc = mudata_open(root, a, &mi, err);
    if (!rc)
        rc = mod_array(&d, root, &mi, &mods, err);
    if (!rc) {
        set(&d, d.root, "axis", json_integer(mi.axis));
        set(&d, d.root, "mod", mods);
        rc = d.failed ? cellar_fail(err, CELLAR_ENOMEM, "out of memory building the answer")
                      : json_dump_buf(d.root, &b, err);
    }
    if (!rc)
        rc = rendered_new(&b, b.len, b.len, value, bytes, err);
    json_decref(d.root);
    buf_destroy(&b);
    arena_free(a);
    return rc;
}

int api_mod_list(api_request *req, api_response *res, cellar_error *err)
{
    int rc = api_check_plain_json(req, err);
    if (!rc)
        rc = api_open_store(req, err);
    if (rc)
        return rc;
    if (store_get_kind(req->store) != KIND_MUDATA)
        return cellar_fail(err, CELLAR_ENOTFOUND, "store '%s' is not a MuData store",
                           req->store_name);
    /* The modalities and their shapes never change within a version. */
    void *v = NULL;
    rc = store_derived(req->store, "api.modlist", modlist_build, req->store, rendered_free, &v,
                       err);
    if (rc)
        return rc;
    const rendered *r = v;
    res->status = 200;
    res->content_type = "application/json";
    res->body.len = 0;
    if (buf_append(&res->body, r->text, r->len))
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
    return 0;
}
