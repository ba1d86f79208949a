/* Tree routes: TreeData obst / vart under {ad} (see docs/responses.md). */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/v1/routes.h"
#include "api/encode/json_out.h"
#include "api/encode/newick_out.h"
#include "storage/anndata/anndata.h"
#include "storage/trees/trees.h"

#define DEFAULT_MAX_NODES 100000
#define DEFAULT_VIEWPORT_NODES 10000
/* Roots listed per tree in the list route. */
#define LIST_ROOTS_MAX 100
/* Bytes of JSON syntax per node and per link around ids and attributes. */
#define NODE_OVERHEAD 16
#define LINK_OVERHEAD 32

/* One request on a tree, parsed. */
typedef struct tree_req {
    const char *axis;          /* "obst" or "vart" */
    const char *key;           /* tree key, NULL on the list route */
    node *group;               /* {ad} */
    const trees_loaded *loaded;
    const tree_index *t;
    const tree_sizes *sizes;
    int32_t max_nodes;
    api_format fmt;
    /* obs_columns / var_columns */
    const char *join_param;    /* "obs_columns" or "var_columns" */
    const char *join_key;      /* "obs" or "var": where joined values go */
    int join;                  /* columns were asked for */
    int leaves_only;           /* alignment "leaves": only leaves name rows */
    frame f;
    const frame_column **cols;
    size_t n_cols;
    /* the joined values of the nodes being written (join_prepare) */
    int32_t *slot;             /* per node number: index into vals' rows, -1 none */
    column_values *vals;
} tree_req;

/* ---- JSON writing straight into the body (attribute texts are spliced
 * in verbatim, which a generator cannot do) ---- */

static void w_raw(buf *b, const char *s)
{
    buf_puts(b, s);
}

static void w_strn(buf *b, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    buf clean = {0};
    if (!utf8_valid(s, n)) {
        if (utf8_sanitize(s, n, &clean)) {
            b->failed = 1;
            return;
        }
        s = clean.data;
        n = clean.len;
    }
    buf_putc(b, '"');
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\')
            continue;
        buf_append(b, s + run, i - run);
        run = i + 1;
        char esc[7] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15], 0};
        switch (c) {
        case '"': buf_puts(b, "\\\""); break;
        case '\\': buf_puts(b, "\\\\"); break;
        case '\n': buf_puts(b, "\\n"); break;
        case '\t': buf_puts(b, "\\t"); break;
        case '\r': buf_puts(b, "\\r"); break;
        default: buf_puts(b, esc); break;
        }
    }
    buf_append(b, s + run, n - run);
    buf_putc(b, '"');
    buf_destroy(&clean);
}

static void w_str(buf *b, const char *s)
{
    if (s)
        w_strn(b, s, strlen(s));
    else
        w_raw(b, "null");
}

static void w_key(buf *b, const char *k)
{
    w_str(b, k);
    buf_putc(b, ':');
}

static void w_int(buf *b, int64_t v)
{
    buf_printf(b, "%" PRId64, v);
}

static void w_f64(buf *b, double v)
{
    char text[NUMBER_TEXT_MAX];
    if (fmt_f64(v, text))
        w_raw(b, text);
    else
        w_raw(b, "null");
}

static void w_bool(buf *b, int v)
{
    w_raw(b, v ? "true" : "false");
}

/* Whether the compact object text `attrs` has top-level key `k` (a quick
 * substring test first, jansson only when it might). */
static int attrs_have(const char *attrs, const char *k)
{
    char pat[40];
    snprintf(pat, sizeof pat, "\"%s\":", k);
    if (!strstr(attrs, pat))
        return 0;
    json_t *o = json_loads(attrs, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
    int has = json_object_get(o, k) != NULL;
    json_decref(o);
    return has;
}

/* Writes the members of the object text `attrs` (without braces), each
 * preceded by a comma, leaving out the keys in `drop` (NULL-terminated;
 * networkx's id / source / target win over attributes of those names). */
static void w_members(buf *b, const char *attrs, const char *const *drop)
{
    size_t n = strlen(attrs);
    if (n <= 2)
        return;
    int clash = 0;
    for (size_t i = 0; drop && drop[i] && !clash; i++)
        clash = attrs_have(attrs, drop[i]);
    if (!clash) {
        buf_putc(b, ',');
        buf_append(b, attrs + 1, n - 2);
        return;
    }
    json_t *o = json_loads(attrs, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
    for (size_t i = 0; drop[i]; i++)
        json_object_del(o, drop[i]);
    char *text = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_ENSURE_ASCII);
    if (text && strlen(text) > 2) {
        buf_putc(b, ',');
        buf_append(b, text + 1, strlen(text) - 2);
    }
    free(text);
    json_decref(o);
}

/* ---- parameters and lookups ---- */

/* Characters in a UTF-8 text: the bytes that are not continuation bytes. */
static size_t char_count(const char *s)
{
    size_t n = 0;
    for (; *s; s++)
        n += ((unsigned char)*s & 0xC0) != 0x80;
    return n;
}

static int32_t find_node(const tree_req *tr, const char *id, cellar_error *err)
{
    int32_t v = tree_index_find(tr->t, id, strlen(id));
    if (v < 0)
        cellar_fail(err, CELLAR_ENOTFOUND, "no node '%s' in tree '%s' of %s", id, tr->key,
                    tr->axis);
    return v;
}

/* A node given by parameter `name`; *v = -1 when absent and optional. */
static int node_param(const api_request *req, const tree_req *tr, const char *name,
                      int required, int32_t *v, cellar_error *err)
{
    const char *id;
    *v = -1;
    int rc = api_param_str(req, name, &id, err);
    if (rc)
        return rc;
    if (!id)
        return required ? cellar_fail(err, CELLAR_EINVAL, "parameter '%s' (a node id) is required",
                                      name)
                        : 0;
    *v = find_node(tr, id, err);
    return *v < 0 ? CELLAR_ENOTFOUND : 0;
}

/* Keys of the forest for a 404 detail, e.g. "a, b, c". */
static const char *key_list(api_request *req, const tree_forest *f)
{
    buf b = {0};
    size_t n = tree_forest_count(f);
    for (size_t i = 0; i < n && b.len < 200; i++) {
        if (i)
            buf_puts(&b, ", ");
        buf_puts(&b, tree_forest_key(f, i));
    }
    if (n == 0)
        buf_puts(&b, "none");
    const char *out = arena_strndup(req->arena, b.data ? b.data : "", b.len);
    buf_destroy(&b);
    return out ? out : "";
}

static int open_join(api_request *req, tree_req *tr, cellar_error *err)
{
    const char **names;
    size_t n;
    int rc = api_param_list(req, tr->join_param, &names, &n, err);
    if (rc || !names)
        return rc;
    node *fg = node_child_opt(tr->group, tr->join_key);
    if (!fg)
        return cellar_fail(err, CELLAR_ENOTFOUND, "store '%s' has no %s to join", req->store_name,
                           tr->join_key);
    rc = frame_open(fg, req->arena, &tr->f, err);
    if (rc)
        return rc;
    tr->cols = arena_calloc(req->arena, n + 1, sizeof *tr->cols);
    if (!tr->cols)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        int k = frame_find_column(&tr->f, names[i]);
        if (k < 0 || !tr->f.columns[k].encoding)
            return cellar_fail(err, CELLAR_ENOTFOUND, "no %s column '%s' to join", tr->join_key,
                               names[i]);
        tr->cols[tr->n_cols++] = &tr->f.columns[k];
    }
    treedata_info ti;
    rc = trees_treedata_info(req->store, tr->group, req->arena, &ti, err);
    if (rc)
        return rc;
    tr->leaves_only = ti.alignment && !strcmp(ti.alignment, "leaves");
    tr->join = 1;
    return 0;
}

/* Resolves the route's tree (or only the forest when need_tree is 0) and
 * the parameters every tree route shares. */
static int open_tree(api_request *req, tree_req *tr, const char *const *extra, unsigned formats,
                     int need_tree, int32_t default_max, cellar_error *err)
{
    memset(tr, 0, sizeof *tr);
    tr->axis = req->element;
    int is_obst = !strcmp(tr->axis, "obst");
    tr->join_param = is_obst ? "obs_columns" : "var_columns";
    tr->join_key = is_obst ? "obs" : "var";
    const char *allowed[16];
    size_t na = 0;
    allowed[na++] = "max_nodes";
    allowed[na++] = tr->join_param;
    for (size_t i = 0; extra && extra[i] && na < 15; i++)
        allowed[na++] = extra[i];
    allowed[na] = NULL;
    int rc = api_check_params(req, allowed, err);
    if (rc) {
        const char *wrong = is_obst ? "var_columns" : "obs_columns";
        int asked = req->body && json_is_object(req->body) && json_object_get(req->body, wrong);
        for (size_t i = 0; i < req->n_query && !asked; i++)
            asked = !strcmp(req->query[i].key, wrong);
        if (asked) {
            cellar_error_clear(err);
            return cellar_fail(err, CELLAR_EINVAL, "%s trees join %s columns: use %s",
                               tr->axis, tr->join_key, tr->join_param);
        }
        return rc;
    }
    if ((rc = api_negotiate_format(req, formats, &tr->fmt, err)))
        return rc;
    int64_t mx = default_max;
    int present;
    if ((rc = api_param_int(req, "max_nodes", 1, INT32_MAX - 1, &mx, &present, err)))
        return rc;
    tr->max_nodes = (int32_t)mx;
    if (req->raw)
        return cellar_fail(err, CELLAR_ENOTFOUND, "raw has no %s (trees belong to the TreeData)",
                           tr->axis);
    if ((rc = api_ad_group(req, &tr->group, err)))
        return rc;
    if ((rc = trees_get(req->store, tr->group, tr->axis, &tr->loaded, err)))
        return rc;
    if (need_tree) {
        tr->key = req->key;
        const tree_forest *f = tr->loaded->forest;
        size_t n = tree_forest_count(f);
        for (size_t i = 0; i < n && !tr->t; i++)
            if (!strcmp(tree_forest_key(f, i), tr->key)) {
                tr->t = tree_forest_tree(f, i);
                tr->sizes = &tr->loaded->sizes[i];
            }
        if (!tr->t)
            return cellar_fail(err, CELLAR_ENOTFOUND, "no tree '%s' in %s (trees: %s)", tr->key,
                               tr->axis, key_list(req, f));
    }
    return open_join(req, tr, err);
}

/* 413 for an answer of `count` nodes over max_nodes. */
static int check_count(const tree_req *tr, int64_t count, const char *what, const char *hint,
                       cellar_error *err)
{
    if (count <= tr->max_nodes)
        return 0;
    return cellar_fail(err, CELLAR_ETOOBIG,
                       "%s has %" PRId64 " nodes, over max_nodes=%" PRId32 "; %s, or raise "
                       "max_nodes",
                       what, count, tr->max_nodes, hint);
}

static int check_bytes(const api_request *req, uint64_t bytes, const char *hint,
                       cellar_error *err)
{
    uint64_t limit = api_limit(req);
    if (!limit || bytes <= limit)
        return 0;
    return cellar_fail(err, CELLAR_ETOOBIG,
                       "the answer would take about %" PRIu64 " bytes, over the limit of %" PRIu64
                       " bytes; %s",
                       bytes, limit, hint);
}

static int check_written(const api_request *req, const buf *b, const char *hint,
                         cellar_error *err)
{
    uint64_t limit = api_limit(req);
    if (b->failed)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory writing the answer");
    if (limit && b->len > limit)
        return cellar_fail(err, CELLAR_ETOOBIG,
                           "the answer grew over the limit of %" PRIu64 " bytes; %s", limit, hint);
    return 0;
}

/* ---- joining obs / var values ---- */

/* Finds the rows of the nodes nodes[0..k) that name one (leaves only when
 * the alignment is "leaves") and reads the asked columns at those rows. */
static int join_prepare(api_request *req, tree_req *tr, const int32_t *nodes, int32_t k,
                        cellar_error *err)
{
    if (!tr->join || k <= 0)
        return 0;
    const tree_index *t = tr->t;
    int32_t n = tree_index_node_count(t);
    if (!tr->slot) {
        tr->slot = arena_calloc(req->arena, (size_t)n, sizeof *tr->slot);
        if (!tr->slot)
            return cellar_fail(err, CELLAR_ENOMEM, "out of memory joining %s", tr->join_key);
    }
    const char **names = arena_calloc(req->arena, (size_t)k, sizeof *names);
    int32_t *who = arena_calloc(req->arena, (size_t)k, sizeof *who);
    int64_t *rows = arena_calloc(req->arena, (size_t)k, sizeof *rows);
    if (!names || !who || !rows)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory joining %s", tr->join_key);
    int32_t m = 0;
    for (int32_t i = 0; i < k; i++) {
        int32_t v = nodes[i], nc;
        tr->slot[v] = -1;
        tree_index_children(t, v, &nc);
        if (tr->leaves_only && nc > 0)
            continue;
        who[m] = v;
        names[m++] = tree_index_id(t, v);
    }
    cellar_error e;
    cellar_error_clear(&e);
    int32_t found = m;
    if (m && frame_lookup_names(req->store, &tr->f, names, (size_t)m, rows, &e)) {
        /* Some nodes name no row: look them up one by one. */
        found = 0;
        for (int32_t i = 0; i < m; i++) {
            int64_t r;
            cellar_error_clear(&e);
            int rc = frame_lookup_names(req->store, &tr->f, &names[i], 1, &r, &e);
            if (rc == CELLAR_ENOMEM)
                return cellar_fail(err, rc, "out of memory joining %s", tr->join_key);
            if (rc)
                continue;
            who[found] = who[i];
            rows[found++] = r;
        }
    }
    for (int32_t i = 0; i < found; i++)
        tr->slot[who[i]] = i;
    dim_sel sel = {0, 1, found, rows};
    tr->vals = arena_calloc(req->arena, tr->n_cols + 1, sizeof *tr->vals);
    if (!tr->vals)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory joining %s", tr->join_key);
    for (size_t c = 0; c < tr->n_cols; c++) {
        int rc = frame_read_column(&tr->f, tr->cols[c], &sel, req->arena, &tr->vals[c], err);
        if (rc)
            return rc;
    }
    return 0;
}

static void w_typed(buf *b, dtype_kind dt, const void *data, int64_t i)
{
    if (dt == DT_STRING) {
        w_str(b, ((char *const *)data)[i]);
        return;
    }
    char text[NUMBER_TEXT_MAX];
    size_t n = fmt_typed(dt, data, i, "true", "false", text);
    w_raw(b, n ? text : "null");
}

static void w_cell(buf *b, const column_values *v, int64_t i)
{
    if (v->missing && v->missing[i]) {
        w_raw(b, "null");
    } else if (v->column->encoding == COL_CATEGORICAL) {
        int64_t code = ((const int64_t *)v->data)[i];
        if (code < 0 || code >= v->n_categories)
            w_raw(b, "null");
        else
            w_typed(b, v->categories_dtype, v->categories, code);
    } else {
        w_typed(b, v->dtype, v->data, i);
    }
}

/* ,"obs":{"col": value, ...} for a node that names a row. */
static void w_joined(buf *b, const tree_req *tr, int32_t v)
{
    if (!tr->join || !tr->slot || tr->slot[v] < 0)
        return;
    int64_t r = tr->slot[v];
    buf_putc(b, ',');
    w_key(b, tr->join_key);
    buf_putc(b, '{');
    for (size_t c = 0; c < tr->n_cols; c++) {
        if (c)
            buf_putc(b, ',');
        w_key(b, tr->cols[c]->name);
        w_cell(b, &tr->vals[c], r);
    }
    buf_putc(b, '}');
}

/* ---- node objects ---- */

/* {"id":..., "attrs":{...}, "depth": d [, "obs": {...}] (no closing brace). */
static void w_node_open(buf *b, const tree_req *tr, int32_t v)
{
    const tree_index *t = tr->t;
    w_raw(b, "{\"id\":");
    w_str(b, tree_index_id(t, v));
    w_raw(b, ",\"attrs\":");
    w_raw(b, tree_index_attrs(t, v));
    w_raw(b, ",\"depth\":");
    w_int(b, tree_index_depth(t, v));
    w_joined(b, tr, v);
}

static void w_node(buf *b, const tree_req *tr, int32_t v)
{
    w_node_open(b, tr, v);
    buf_putc(b, '}');
}

static void reply_json(api_response *res)
{
    res->status = 200;
    res->content_type = "application/json";
}

/* ---- node-link JSON (networkx node_link_data(G, edges="links")) ---- */

/* Writes the nodes nodes[0..k) and, for each but `top` (and roots), the
 * link from its parent.  `extra` is written as more top-level members. */
static int write_node_link(api_request *req, api_response *res, tree_req *tr,
                           const int32_t *nodes, int32_t k, int32_t top, const char *extra,
                           cellar_error *err)
{
    static const char *const hint = "ask for a part: subtree?root=<id>&depth=<d>, or viewport";
    const tree_index *t = tr->t;
    const char *node_drop[] = {"id", tr->join ? tr->join_key : NULL, NULL};
    static const char *const link_drop[] = {"source", "target", NULL};
    int rc = join_prepare(req, tr, nodes, k, err);
    if (rc)
        return rc;
    buf *b = &res->body;
    b->len = 0;
    w_raw(b, "{\"directed\":true,\"multigraph\":false,\"graph\":{}");
    if (extra)
        w_raw(b, extra);
    w_raw(b, ",\"nodes\":[");
    for (int32_t i = 0; i < k; i++) {
        int32_t v = nodes[i];
        if (i)
            buf_putc(b, ',');
        w_raw(b, "{\"id\":");
        w_str(b, tree_index_id(t, v));
        w_members(b, tree_index_attrs(t, v), node_drop);
        w_joined(b, tr, v);
        buf_putc(b, '}');
        if ((i & 1023) == 1023 && (rc = check_written(req, b, hint, err)))
            return rc;
    }
    w_raw(b, "],\"links\":[");
    int first = 1;
    for (int32_t i = 0; i < k; i++) {
        int32_t v = nodes[i], p = tree_index_parent(t, v);
        if (v == top || p < 0)
            continue;
        if (!first)
            buf_putc(b, ',');
        first = 0;
        w_raw(b, "{\"source\":");
        w_str(b, tree_index_id(t, p));
        w_raw(b, ",\"target\":");
        w_str(b, tree_index_id(t, v));
        const char *ea = tree_index_edge_attrs(t, v);
        w_members(b, ea ? ea : "{}", link_drop);
        buf_putc(b, '}');
        if ((i & 1023) == 1023 && (rc = check_written(req, b, hint, err)))
            return rc;
    }
    w_raw(b, "]}");
    if ((rc = check_written(req, b, hint, err)))
        return rc;
    reply_json(res);
    return 0;
}

/* ---- Newick ---- */

/* Branch lengths from an edge attribute other than `length`. */
static double attr_length(void *ctx, const tree_index *t, int32_t v)
{
    const char *name = ctx;
    const char *ea = tree_index_edge_attrs(t, v);
    char pat[300];
    snprintf(pat, sizeof pat, "\"%s\":", name);
    if (!ea || !strstr(ea, pat))
        return NAN;
    json_t *o = json_loads(ea, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
    json_t *x = json_object_get(o, name);
    double l = json_is_number(x) ? json_number_value(x) : NAN;
    json_decref(o);
    return l;
}

static int write_newick(api_request *req, api_response *res, tree_req *tr, int32_t root,
                        cellar_error *err)
{
    const char *length;
    int rc = api_param_str(req, "length", &length, err);
    if (rc)
        return rc;
    newick_length_fn fn = newick_index_length;
    void *ctx = NULL;
    if (length && !*length) {
        fn = NULL;
    } else if (length && strcmp(length, "length") != 0) {
        if (char_count(length) > 256)
            return cellar_fail(err, CELLAR_EINVAL, "length names an attribute of at most 256 "
                               "characters");
        fn = attr_length;
        ctx = (void *)length;
    }
    res->body.len = 0;
    rc = newick_write(&res->body, tr->t, root, fn, ctx, api_limit(req), err);
    if (rc)
        return rc;
    res->status = 200;
    res->content_type = "text/x-newick; charset=utf-8";
    return 0;
}

/* ---- routes ---- */

int api_trees_list(api_request *req, api_response *res, cellar_error *err)
{
    tree_req tr;
    int rc = open_tree(req, &tr, NULL, 1u << FORMAT_JSON, 0, DEFAULT_MAX_NODES, err);
    if (rc)
        return rc;
    const tree_forest *f = tr.loaded->forest;
    size_t n = tree_forest_count(f);
    buf *b = &res->body;
    b->len = 0;
    w_raw(b, "{\"axis\":");
    w_str(b, tr.axis);
    w_raw(b, ",\"bytes\":");
    w_int(b, (int64_t)tr.loaded->bytes);
    w_raw(b, ",\"trees\":[");
    for (size_t i = 0; i < n; i++) {
        const tree_index *t = tree_forest_tree(f, i);
        int32_t nr;
        const int32_t *roots = tree_index_roots(t, &nr);
        if (i)
            buf_putc(b, ',');
        w_raw(b, "{\"key\":");
        w_str(b, tree_forest_key(f, i));
        w_raw(b, ",\"n_nodes\":");
        w_int(b, tree_index_node_count(t));
        w_raw(b, ",\"n_edges\":");
        w_int(b, tree_index_edge_count(t));
        w_raw(b, ",\"n_leaves\":");
        w_int(b, tree_index_leaf_total(t));
        w_raw(b, ",\"max_depth\":");
        w_int(b, tree_index_max_depth(t));
        w_raw(b, ",\"n_roots\":");
        w_int(b, nr);
        w_raw(b, ",\"roots\":[");
        for (int32_t r = 0; r < nr && r < LIST_ROOTS_MAX; r++) {
            if (r)
                buf_putc(b, ',');
            w_str(b, tree_index_id(t, roots[r]));
        }
        w_raw(b, "],\"uses_length\":");
        w_bool(b, tree_index_uses_length(t));
        w_raw(b, ",\"bytes\":");
        w_int(b, (int64_t)tree_index_bytes(t));
        buf_putc(b, '}');
    }
    w_raw(b, "]}");
    if ((rc = check_written(req, b, "the forest has too many trees to list", err)))
        return rc;
    reply_json(res);
    return 0;
}

/* All nodes 0 .. n-1 (node order, as networkx lists them). */
static int32_t *all_nodes(api_request *req, int32_t n)
{
    int32_t *nodes = arena_calloc(req->arena, (size_t)(n ? n : 1), sizeof *nodes);
    for (int32_t i = 0; nodes && i < n; i++)
        nodes[i] = i;
    return nodes;
}

int api_tree(api_request *req, api_response *res, cellar_error *err)
{
    static const char *const extra[] = {"length", NULL};
    tree_req tr;
    int rc = open_tree(req, &tr, extra, (1u << FORMAT_JSON) | (1u << FORMAT_NEWICK), 1,
                       DEFAULT_MAX_NODES, err);
    if (rc)
        return rc;
    int32_t n = tree_index_node_count(tr.t);
    const char *what = arena_printf(req->arena, "tree '%s'", tr.key);
    static const char *const hint =
        "ask for a part with subtree?root=<id>&depth=<d> or draw it with viewport";
    if ((rc = check_count(&tr, n, what ? what : "the tree", hint, err)))
        return rc;
    const tree_sizes *sz = tr.sizes;
    if (tr.fmt == FORMAT_NEWICK) {
        if ((rc = check_bytes(req, sz->id_bytes + (uint64_t)n * 28, hint, err)))
            return rc;
        return write_newick(req, res, &tr, -1, err);
    }
    const char *length;
    if ((rc = api_param_str(req, "length", &length, err)))
        return rc;
    if (length)
        return cellar_fail(err, CELLAR_EINVAL, "length= applies to format=newick only");
    uint64_t est = 2 * sz->id_bytes + sz->attr_bytes + sz->edge_bytes +
                   (uint64_t)n * (NODE_OVERHEAD + LINK_OVERHEAD);
    if ((rc = check_bytes(req, est, hint, err)))
        return rc;
    int32_t *nodes = all_nodes(req, n);
    if (!nodes)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
    return write_node_link(req, res, &tr, nodes, n, -1, NULL, err);
}

int api_tree_node(api_request *req, api_response *res, cellar_error *err)
{
    tree_req tr;
    int rc = open_tree(req, &tr, NULL, 1u << FORMAT_JSON, 1, DEFAULT_MAX_NODES, err);
    if (rc)
        return rc;
    const tree_index *t = tr.t;
    int32_t v = find_node(&tr, req->item ? req->item : "", err);
    if (v < 0)
        return CELLAR_ENOTFOUND;
    int32_t nc, p = tree_index_parent(t, v);
    const int32_t *kids = tree_index_children(t, v, &nc);
    if ((rc = check_count(&tr, nc, "its list of children",
                          "its children are listed by subtree?root=<id>&depth=1&max_nodes=...",
                          err)))
        return rc;
    if ((rc = join_prepare(req, &tr, &v, 1, err)))
        return rc;
    buf *b = &res->body;
    b->len = 0;
    w_node_open(b, &tr, v);
    w_raw(b, ",\"parent\":");
    w_str(b, p >= 0 ? tree_index_id(t, p) : NULL);
    w_raw(b, ",\"edge_attrs\":");
    w_raw(b, p >= 0 ? tree_index_edge_attrs(t, v) : "null");
    w_raw(b, ",\"n_children\":");
    w_int(b, nc);
    w_raw(b, ",\"children\":[");
    for (int32_t i = 0; i < nc; i++) {
        if (i)
            buf_putc(b, ',');
        w_str(b, tree_index_id(t, kids[i]));
    }
    w_raw(b, "],\"is_leaf\":");
    w_bool(b, nc == 0);
    w_raw(b, ",\"n_leaves\":");
    w_int(b, tree_index_leaf_count(t, v));
    w_raw(b, ",\"n_descendants\":");
    w_int(b, tree_index_subtree_end(t, v) - tree_index_preorder(t, v) - 1);
    w_raw(b, ",\"x\":");
    w_f64(b, tree_index_x(t, v));
    w_raw(b, ",\"y\":");
    w_f64(b, tree_index_y(t, v));
    w_raw(b, "}");
    if ((rc = check_written(req, b, "the node's children are too many to list", err)))
        return rc;
    reply_json(res);
    return 0;
}

int api_tree_subtree(api_request *req, api_response *res, cellar_error *err)
{
    static const char *const extra[] = {"root", "depth", "length", NULL};
    tree_req tr;
    int rc = open_tree(req, &tr, extra, (1u << FORMAT_JSON) | (1u << FORMAT_NEWICK), 1,
                       DEFAULT_MAX_NODES, err);
    if (rc)
        return rc;
    const tree_index *t = tr.t;
    int32_t root;
    int64_t depth = -1;
    int has_depth;
    if ((rc = node_param(req, &tr, "root", 0, &root, err)) ||
        (rc = api_param_int(req, "depth", 0, INT32_MAX, &depth, &has_depth, err)))
        return rc;
    int64_t whole = root >= 0 ? tree_index_subtree_end(t, root) - tree_index_preorder(t, root)
                              : tree_index_node_count(t);
    static const char *const hint = "limit it with depth=, start from a deeper root=, or use "
                                    "viewport";
    if (tr.fmt == FORMAT_NEWICK) {
        if (has_depth)
            return cellar_fail(err, CELLAR_EINVAL,
                               "depth= cannot be used with format=newick (Newick holds whole "
                               "clades)");
        if ((rc = check_count(&tr, whole, "the subtree", hint, err)))
            return rc;
        return write_newick(req, res, &tr, root, err);
    }
    const char *length;
    if ((rc = api_param_str(req, "length", &length, err)))
        return rc;
    if (length)
        return cellar_fail(err, CELLAR_EINVAL, "length= applies to format=newick only");
    if (!has_depth && (rc = check_count(&tr, whole, "the subtree", hint, err)))
        return rc;
    int32_t *nodes = NULL, k = 0;
    int truncated = 0;
    if ((rc = tree_index_subtree(t, root, has_depth ? (int32_t)depth : -1, tr.max_nodes,
                                 req->arena, &nodes, &k, &truncated, err)))
        return rc;
    if (truncated)
        return cellar_fail(err, CELLAR_ETOOBIG,
                           "the subtree has more than max_nodes=%" PRId32 " nodes; %s, or raise "
                           "max_nodes",
                           tr.max_nodes, hint);
    buf extra_json = {0};
    w_raw(&extra_json, ",\"root\":");
    w_str(&extra_json, root >= 0 ? tree_index_id(t, root) : NULL);
    w_raw(&extra_json, ",\"max_depth\":");
    if (has_depth)
        w_int(&extra_json, depth);
    else
        w_raw(&extra_json, "null");
    const char *ex = extra_json.failed ? NULL : arena_strndup(req->arena, extra_json.data,
                                                              extra_json.len);
    buf_destroy(&extra_json);
    if (!ex)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
    return write_node_link(req, res, &tr, nodes, k, root, ex, err);
}

int api_tree_ancestors(api_request *req, api_response *res, cellar_error *err)
{
    static const char *const extra[] = {"node", NULL};
    tree_req tr;
    int rc = open_tree(req, &tr, extra, 1u << FORMAT_JSON, 1, DEFAULT_MAX_NODES, err);
    if (rc)
        return rc;
    int32_t v, *path = NULL, k = 0;
    if ((rc = node_param(req, &tr, "node", 1, &v, err)))
        return rc;
    if ((rc = check_count(&tr, (int64_t)tree_index_depth(tr.t, v) + 1, "the path from the root",
                          "ask for the ancestors of a node nearer the root", err)) ||
        (rc = tree_index_ancestors(tr.t, v, req->arena, &path, &k, err)) ||
        (rc = join_prepare(req, &tr, path, k, err)))
        return rc;
    buf *b = &res->body;
    b->len = 0;
    w_raw(b, "{\"node\":");
    w_str(b, tree_index_id(tr.t, v));
    w_raw(b, ",\"depth\":");
    w_int(b, tree_index_depth(tr.t, v));
    w_raw(b, ",\"path\":[");
    for (int32_t i = 0; i < k; i++) {
        if (i)
            buf_putc(b, ',');
        w_node(b, &tr, path[i]);
    }
    w_raw(b, "]}");
    if ((rc = check_written(req, b, "ask for a node nearer the root", err)))
        return rc;
    reply_json(res);
    return 0;
}

int api_tree_leaves(api_request *req, api_response *res, cellar_error *err)
{
    static const char *const extra[] = {"node", NULL};
    tree_req tr;
    int rc = open_tree(req, &tr, extra, 1u << FORMAT_JSON, 1, DEFAULT_MAX_NODES, err);
    if (rc)
        return rc;
    const tree_index *t = tr.t;
    int32_t v;
    if ((rc = node_param(req, &tr, "node", 0, &v, err)))
        return rc;
    int32_t total = v >= 0 ? tree_index_leaf_count(t, v) : tree_index_leaf_total(t);
    if ((rc = check_count(&tr, total, v >= 0 ? "the leaf list of this node" : "the leaf list",
                          "ask for the leaves of a smaller clade (node=<id>)", err)))
        return rc;
    int32_t *leaves = arena_calloc(req->arena, (size_t)(total ? total : 1), sizeof *leaves);
    if (!leaves)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
    int32_t k = 0, nr = 1;
    const int32_t *roots = v >= 0 ? &v : tree_index_roots(t, &nr);
    for (int32_t r = 0; r < nr; r++) {
        int32_t got;
        const int32_t *l = tree_index_leaves(t, roots[r], 0, total - k, &got, NULL);
        memcpy(leaves + k, l, (size_t)got * sizeof *l);
        k += got;
    }
    if ((rc = join_prepare(req, &tr, leaves, k, err)))
        return rc;
    buf *b = &res->body;
    b->len = 0;
    w_raw(b, "{\"node\":");
    w_str(b, v >= 0 ? tree_index_id(t, v) : NULL);
    w_raw(b, ",\"n_leaves\":");
    w_int(b, k);
    w_raw(b, ",\"leaves\":[");
    for (int32_t i = 0; i < k; i++) {
        if (i)
            buf_putc(b, ',');
        w_node(b, &tr, leaves[i]);
        if ((i & 1023) == 1023 &&
            (rc = check_written(req, b, "ask for the leaves of a smaller clade", err)))
            return rc;
    }
    w_raw(b, "]}");
    if ((rc = check_written(req, b, "ask for the leaves of a smaller clade (node=<id>)", err)))
        return rc;
    reply_json(res);
    return 0;
}

int api_tree_lca(api_request *req, api_response *res, cellar_error *err)
{
    static const char *const extra[] = {"nodes", NULL};
    tree_req tr;
    int rc = open_tree(req, &tr, extra, 1u << FORMAT_JSON, 1, DEFAULT_MAX_NODES, err);
    if (rc)
        return rc;
    const char **ids;
    size_t n;
    if ((rc = api_param_list(req, "nodes", &ids, &n, err)))
        return rc;
    if (!ids || n == 0)
        return cellar_fail(err, CELLAR_EINVAL,
                           "parameter 'nodes' (node ids, comma-separated or a JSON list in a "
                           "POST body) is required");
    if ((rc = check_count(&tr, (int64_t)n, "the node list", "ask with fewer nodes", err)))
        return rc;
    int32_t *nodes = arena_calloc(req->arena, n, sizeof *nodes);
    if (!nodes)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
    for (size_t i = 0; i < n; i++)
        if ((nodes[i] = find_node(&tr, ids[i], err)) < 0)
            return CELLAR_ENOTFOUND;
    int32_t a = tree_index_lca(tr.t, nodes, (int32_t)n);
    if (a >= 0 && (rc = join_prepare(req, &tr, &a, 1, err)))
        return rc;
    buf *b = &res->body;
    b->len = 0;
    w_raw(b, "{\"nodes\":[");
    for (size_t i = 0; i < n; i++) {
        if (i)
            buf_putc(b, ',');
        w_str(b, tree_index_id(tr.t, nodes[i]));
    }
    w_raw(b, "],\"lca\":");
    if (a >= 0)
        w_node(b, &tr, a);
    else
        w_raw(b, "null");
    buf_putc(b, '}');
    if ((rc = check_written(req, b, "ask with fewer nodes", err)))
        return rc;
    reply_json(res);
    return 0;
}

int api_tree_viewport(api_request *req, api_response *res, cellar_error *err)
{
    static const char *const extra[] = {"x0", "x1", "y0", "y1", NULL};
    tree_req tr;
    int rc = open_tree(req, &tr, extra, 1u << FORMAT_JSON, 1, DEFAULT_VIEWPORT_NODES, err);
    if (rc)
        return rc;
    const tree_index *t = tr.t;
    int32_t nr;
    const int32_t *roots = tree_index_roots(t, &nr);
    double x_max = 0;
    for (int32_t r = 0; r < nr; r++)
        if (tree_index_x_max(t, roots[r]) > x_max)
            x_max = tree_index_x_max(t, roots[r]);
    int32_t lt = tree_index_leaf_total(t);
    tree_viewport box = {0, x_max, 0, lt > 0 ? lt - 1 : 0, tr.max_nodes};
    int p0, p1, p2, p3;
    if ((rc = api_param_f64(req, "x0", &box.x0, &p0, err)) ||
        (rc = api_param_f64(req, "x1", &box.x1, &p1, err)) ||
        (rc = api_param_f64(req, "y0", &box.y0, &p2, err)) ||
        (rc = api_param_f64(req, "y1", &box.y1, &p3, err)))
        return rc;
    if ((p0 && p1 && box.x0 > box.x1) || (p2 && p3 && box.y0 > box.y1))
        return cellar_fail(err, CELLAR_EINVAL, "the box is empty: x0 <= x1 and y0 <= y1 needed");
    tree_view_entry *entries = NULL;
    int32_t k = 0;
    int truncated = 0;
    /* One bound past the tree's extent (the other's default) leaves a box
     * that holds nothing, like a view panned off the tree: no nodes. */
    if (tree_index_node_count(t) > 0 && box.x0 <= box.x1 && box.y0 <= box.y1 &&
        (rc = tree_index_viewport(t, &box, req->arena, &entries, &k, &truncated, err)))
        return rc;
    int32_t *nodes = arena_calloc(req->arena, (size_t)(k ? k : 1), sizeof *nodes);
    if (!nodes)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
    for (int32_t i = 0; i < k; i++)
        nodes[i] = entries[i].node;
    if ((rc = join_prepare(req, &tr, nodes, k, err)))
        return rc;
    static const char *const hint = "ask for a smaller max_nodes or a smaller box";
    buf *b = &res->body;
    b->len = 0;
    w_raw(b, "{\"box\":{\"x0\":");
    w_f64(b, box.x0);
    w_raw(b, ",\"x1\":");
    w_f64(b, box.x1);
    w_raw(b, ",\"y0\":");
    w_f64(b, box.y0);
    w_raw(b, ",\"y1\":");
    w_f64(b, box.y1);
    w_raw(b, "},\"extent\":{\"x0\":0.0,\"x1\":");
    w_f64(b, x_max);
    w_raw(b, ",\"y0\":0.0,\"y1\":");
    w_f64(b, lt > 0 ? lt - 1 : 0);
    w_raw(b, "},\"uses_length\":");
    w_bool(b, tree_index_uses_length(t));
    w_raw(b, ",\"truncated\":");
    w_bool(b, truncated);
    w_raw(b, ",\"nodes\":[");
    for (int32_t i = 0; i < k; i++) {
        int32_t v = entries[i].node, p = tree_index_parent(t, v), nc;
        tree_index_children(t, v, &nc);
        if (i)
            buf_putc(b, ',');
        w_node_open(b, &tr, v);
        w_raw(b, ",\"parent\":");
        w_str(b, p >= 0 ? tree_index_id(t, p) : NULL);
        w_raw(b, ",\"x\":");
        w_f64(b, tree_index_x(t, v));
        w_raw(b, ",\"y\":");
        w_f64(b, tree_index_y(t, v));
        w_raw(b, ",\"is_leaf\":");
        w_bool(b, nc == 0);
        w_raw(b, ",\"collapsed\":");
        w_bool(b, entries[i].collapsed);
        if (entries[i].collapsed) {
            int32_t lf = tree_index_leaf_first(t, v), lc = tree_index_leaf_count(t, v);
            w_raw(b, ",\"n_leaves\":");
            w_int(b, lc);
            w_raw(b, ",\"y_min\":");
            w_int(b, lf);
            w_raw(b, ",\"y_max\":");
            w_int(b, lf + lc - 1);
            w_raw(b, ",\"x_max\":");
            w_f64(b, tree_index_x_max(t, v));
        }
        buf_putc(b, '}');
        if ((i & 1023) == 1023 && (rc = check_written(req, b, hint, err)))
            return rc;
    }
    w_raw(b, "]}");
    if ((rc = check_written(req, b, hint, err)))
        return rc;
    reply_json(res);
    return 0;
}
