/* The tree, table and node writer the Taxonium routes share: see
 * api/taxonium/tx_tree.h. */
#include "api/taxonium/tx_tree.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/v1/routes.h"
#include "storage/trees/trees.h"

/* Taxonium's backend scales: y to 2400 over the nodes, x to 600. */
#define TX_Y_SPAN 2400.0
#define TX_X_SPAN 600.0
#define TX_FEW_NODES 10000
#define TX_FEW_FACTOR 0.6666
/* Budget for the meta columns read whole when no response limit is set. */
#define TX_META_BUDGET (1ull << 30)
/* The whole tree's nodes/ answer is kept with the table up to this size
 * (5.9 MB for the bench's random million-node tree; a caterpillar's would
 * hold nearly every node and is written per request instead). */
#define TX_WHOLE_MAX (16u << 20)
/* A node's usual size in a nodes/ answer, to size its buffer. */
#define TX_NODE_BYTES 160

static int write_nodes(buf *body, const tx_req *tr, const double bx[4], arena *a,
                       uint64_t limit, cellar_error *err);

typedef struct build_ctx {
    api_request *req;
    node *group;
    const char *axis;
    const tree_index *t;
} build_ctx;

static void table_free(void *v)
{
    tx_table *tab = v;
    if (!tab)
        return;
    free(tab->rec);
    free(tab->rank);
    free(tab->names);
    free(tab->slot);
    free(tab->whole);
    arena_free(tab->a);
    free(tab);
}

static void set_scales(tx_table *tab, const tree_index *t)
{
    int32_t nr, n = tree_index_node_count(t), lt = tree_index_leaf_total(t);
    const int32_t *roots = tree_index_roots(t, &nr);
    double xm = 0;
    for (int32_t r = 0; r < nr; r++)
        if (tree_index_x_max(t, roots[r]) > xm)
            xm = tree_index_x_max(t, roots[r]);
    tab->scale_x = xm > 0 ? TX_X_SPAN / xm : 1;
    double nodes = n > TX_FEW_NODES ? n : n * TX_FEW_FACTOR;
    tab->scale_y = nodes > 0 ? TX_Y_SPAN / nodes : 1;
    tab->max_x = xm * tab->scale_x;
    tab->max_y = lt > 1 ? (lt - 1) * tab->scale_y : 0;
}

/* The rows the nodes name (leaves only under alignment "leaves"), as the
 * selection the columns are read at; tab->slot maps nodes into it. */
static int node_rows(build_ctx *c, tx_table *tab, const frame *f, dim_sel *sel,
                     cellar_error *err)
{
    const tree_index *t = c->t;
    int32_t n = tree_index_node_count(t);
    treedata_info ti;
    int rc = treedata_open(c->group, tab->a, &ti, err);
    if (rc)
        return rc;
    int leaves_only = ti.alignment && !strcmp(ti.alignment, "leaves");
    const char **names = malloc((size_t)(n ? n : 1) * sizeof *names);
    int32_t *who = malloc((size_t)(n ? n : 1) * sizeof *who);
    int64_t *rows = malloc((size_t)(n ? n : 1) * sizeof *rows);
    tab->slot = malloc((size_t)(n ? n : 1) * sizeof *tab->slot);
    if (!names || !who || !rows || !tab->slot) {
        rc = cellar_fail(err, CELLAR_ENOMEM, "out of memory joining %s", c->axis);
        goto done;
    }
    int32_t m = 0;
    for (int32_t v = 0; v < n; v++) {
        int32_t nc;
        tab->slot[v] = -1;
        tree_index_children(t, v, &nc);
        if (leaves_only && nc > 0)
            continue;
        who[m] = v;
        names[m++] = tree_index_id(t, v);
    }
    if ((rc = frame_find_names(c->req->store, f, names, (size_t)m, rows, err)))
        goto done;
    int64_t *idx = arena_calloc(tab->a, (size_t)(m ? m : 1), sizeof *idx);
    if (!idx) {
        rc = cellar_fail(err, CELLAR_ENOMEM, "out of memory joining %s", c->axis);
        goto done;
    }
    int32_t k = 0;
    for (int32_t i = 0; i < m; i++) {
        if (rows[i] < 0)
            continue;
        tab->slot[who[i]] = k;
        idx[k++] = rows[i];
    }
    *sel = (dim_sel){0, 1, k, idx};
done:
    free(names);
    free(who);
    free(rows);
    return rc;
}

/* col->key: ,"meta_<column>": as the node writer puts it before a value. */
static int meta_key(tx_table *tab, tx_column *col)
{
    buf b = {0};
    buf_putc(&b, ',');
    tx_append_str(&b, col->meta, strlen(col->meta));
    buf_putc(&b, ':');
    char *key = b.failed ? NULL : arena_alloc(tab->a, b.len);
    if (key) {
        memcpy(key, b.data, b.len);
        col->key = key;
        col->key_len = b.len;
    }
    buf_destroy(&b);
    return key ? 0 : -1;
}

static int read_columns(build_ctx *c, tx_table *tab, const frame *f, const dim_sel *sel,
                        cellar_error *err)
{
    uint64_t budget = api_limit(c->req) ? api_limit(c->req) : TX_META_BUDGET, used = 0;
    tab->cols = arena_calloc(tab->a, f->n_columns + 1, sizeof *tab->cols);
    if (!tab->cols)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
    for (size_t i = 0; i < f->n_columns; i++) {
        const frame_column *fc = &f->columns[i];
        if (!fc->encoding)
            continue;
        used += frame_column_cost(fc, sel->count);
        if (used > budget)
            break;
        tx_column *col = &tab->cols[tab->n_cols];
        cellar_error e;
        cellar_error_clear(&e);
        int rc = frame_read_column(f, fc, sel, tab->a, &col->vals, &e);
        if (rc == CELLAR_ENOMEM)
            return cellar_fail(err, rc, "%s", e.detail);
        if (rc)
            continue; /* a column that cannot be read is not offered */
        dtype_kind dt = fc->encoding == COL_CATEGORICAL ? col->vals.categories_dtype
                                                         : col->vals.dtype;
        col->numeric = dt != DT_STRING;
        col->meta = arena_printf(tab->a, "meta_%s", fc->name);
        if (!col->meta || meta_key(tab, col))
            return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
        tab->n_cols++;
    }
    return 0;
}

/* Whether s can go into JSON between quotes as it is. */
static int plain_text(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch < 0x20 || ch == '"' || ch == '\\' || ch >= 0x80)
            return 0;
    }
    return 1;
}

/* rank[v]: node v's place when sorted by y, then preorder (nodes/ order),
 * and order, its inverse. */
static int y_ranks(tx_table *tab, const tree_index *t, int32_t n, int32_t **order_out,
                   cellar_error *err)
{
    int32_t *order = malloc((size_t)(n ? n : 1) * sizeof *order);
    tab->rank = tree_thin_y_ranks(t);
    if (!order || !tab->rank) {
        free(order);
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
    }
    for (int32_t v = 0; v < n; v++)
        order[tab->rank[v]] = v;
    *order_out = order;
    return 0;
}

static int fill_records(tx_table *tab, const tree_index *t, cellar_error *err)
{
    int32_t n = tree_index_node_count(t), *order = NULL;
    int rc = y_ranks(tab, t, n, &order, err);
    if (rc)
        return rc;
    size_t pool = 0;
    for (int32_t v = 0; v < n; v++)
        pool += strlen(tree_index_id(t, v)) + 1;
    tab->rec = tree_index_calloc((size_t)n, sizeof *tab->rec);
    tab->names = tree_index_calloc(pool, 1);
    if (!tab->rec || !tab->names) {
        free(order);
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
    }
    char *np = tab->names;
    for (int32_t r = 0; r < n; r++) {
        int32_t v = order[r], nc, p = tree_index_parent(t, v);
        tx_rec *rec = &tab->rec[r];
        tree_index_children(t, v, &nc);
        rec->x_dist = tree_index_x(t, v) * tab->scale_x;
        rec->y = tree_index_y(t, v) * tab->scale_y;
        const char *id = tree_index_id(t, v);
        size_t len = strlen(id);
        memcpy(np, id, len + 1);
        rec->name = np;
        np += len + 1;
        rec->name_len = len < INT32_MAX && plain_text(id, len) ? (int32_t)len : -1;
        rec->parent = p >= 0 ? p : v;
        rec->num_tips = tree_index_leaf_count(t, v);
        rec->slot = tab->slot ? tab->slot[v] : -1;
        rec->is_tip = nc == 0;
    }
    free(order);
    tab->bytes_extra = pool + (size_t)n * sizeof *tab->rank;
    return 0;
}

/* tab->whole: the nodes/ answer for the whole tree, the first thing every
 * client asks, made once per table as Taxonium's backend makes it once at
 * start (cached_starting_values); left NULL when over TX_WHOLE_MAX. */
static int keep_whole(tx_table *tab, const tree_index *t, cellar_error *err)
{
    tx_req tr = {.t = t, .tab = tab};
    const double whole[4] = {0, tab->max_x, 0, tab->max_y};
    arena *a = arena_new();
    buf b = {0};
    cellar_error e;
    cellar_error_clear(&e);
    int rc = a ? write_nodes(&b, &tr, whole, a, TX_WHOLE_MAX, &e) : CELLAR_ENOMEM;
    if (rc == 0 && (tab->whole = malloc(b.len ? b.len : 1))) {
        memcpy(tab->whole, b.data, b.len);
        tab->whole_len = b.len;
    }
    buf_destroy(&b);
    arena_free(a);
    if (rc == CELLAR_ENOMEM || (rc == 0 && !tab->whole))
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
    return 0; /* over TX_WHOLE_MAX: written per request */
}

static int table_build(void *ctx, void **value, size_t *bytes, cellar_error *err)
{
    build_ctx *c = ctx;
    tx_table *tab = calloc(1, sizeof *tab);
    int rc = 0;
    if (!tab || !(tab->a = arena_new())) {
        rc = cellar_fail(err, CELLAR_ENOMEM, "out of memory");
        goto fail;
    }
    set_scales(tab, c->t);
    node *fg = node_child_opt(c->group, strcmp(c->axis, "obst") ? "var" : "obs");
    frame f;
    cellar_error e;
    cellar_error_clear(&e);
    if (fg && frame_open(fg, tab->a, &f, &e) == 0) {
        dim_sel sel;
        if ((rc = node_rows(c, tab, &f, &sel, err)) || (rc = read_columns(c, tab, &f, &sel, err)))
            goto fail;
    }
    if ((rc = fill_records(tab, c->t, err)) || (rc = keep_whole(tab, c->t, err)))
        goto fail;
    size_t n = (size_t)tree_index_node_count(c->t);
    tab->bytes = sizeof *tab + arena_bytes(tab->a) + n * sizeof *tab->rec + tab->bytes_extra +
                 (tab->slot ? n * sizeof *tab->slot : 0) + tab->whole_len;
    *value = tab;
    *bytes = tab->bytes;
    return 0;
fail:
    table_free(tab);
    return rc;
}

static int find_tree(api_request *req, tx_req *tr, cellar_error *err)
{
    const trees_loaded *loaded;
    int rc = trees_get(req->store, tr->group, tr->axis, &loaded, err);
    if (rc)
        return rc;
    const tree_forest *f = loaded->forest;
    tr->t = tree_forest_get(f, tr->key);
    if (!tr->t)
        return cellar_fail(err, CELLAR_ENOTFOUND, "no tree '%s' in %s", tr->key, tr->axis);
    return 0;
}

int tx_open(api_request *req, tx_req *tr, const char *const *extra, int json_only,
            cellar_error *err)
{
    memset(tr, 0, sizeof *tr);
    tr->axis = req->element;
    tr->key = req->key;
    const char *allowed[16];
    size_t na = 0;
    allowed[na++] = "sid";
    for (size_t i = 0; extra && extra[i] && na < 15; i++)
        allowed[na++] = extra[i];
    allowed[na] = NULL;
    api_format fmt;
    int rc = api_check_params(req, allowed, err);
    if (rc || (json_only && (rc = api_negotiate_format(req, 1u << FORMAT_JSON, &fmt, err))))
        return rc;
    if (req->raw)
        return cellar_fail(err, CELLAR_ENOTFOUND, "raw has no %s (trees belong to the TreeData)",
                           tr->axis);
    if ((rc = api_ad_group(req, &tr->group, err)) || (rc = find_tree(req, tr, err)))
        return rc;
    char *key = arena_printf(req->arena, "taxonium:%s:%s:%s", node_path(tr->group), tr->axis,
                             tr->key);
    if (!key)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
    build_ctx ctx = {req, tr->group, tr->axis, tr->t};
    void *v = NULL;
    if ((rc = store_derived(req->store, key, table_build, &ctx, table_free, &v, err)))
        return rc;
    tr->tab = v;
    return 0;
}

int tx_node_id(const tx_req *tr, const char *name, const char *id, int32_t *out,
               cellar_error *err)
{
    int64_t v;
    if (!id)
        return cellar_fail(err, CELLAR_EINVAL, "parameter '%s' (a node_id) is required", name);
    if (selection_parse_int(id, strlen(id), &v) != 0)
        return cellar_fail(err, CELLAR_EINVAL, "%s must be a node_id (an integer), not '%.100s'",
                           name, id);
    if (v < 0)
        return cellar_fail(err, CELLAR_EINVAL, "%s must be a node_id (0 or more), not %" PRId64,
                           name, v);
    if (v >= tree_index_node_count(tr->t))
        return cellar_fail(err, CELLAR_ENOTFOUND, "no node_id %" PRId64 " in tree '%s' of %s "
                           "(node_ids are 0 .. %" PRId32 ")", v, tr->key, tr->axis,
                           tree_index_node_count(tr->t) - 1);
    *out = (int32_t)v;
    return 0;
}

/* [lo, hi] from min_<axis> / max_<axis>, clamped to [0, top] as Taxonium's
 * backend clamps them; *empty when the box misses the tree. */
static int bounds(api_request *req, const char *lo_name, const char *hi_name, double top,
                  double *lo, double *hi, cellar_error *err)
{
    int p0, p1;
    *lo = 0;
    *hi = top;
    int rc = api_param_f64(req, lo_name, lo, &p0, err);
    if (rc || (rc = api_param_f64(req, hi_name, hi, &p1, err)))
        return rc;
    if (p0 && p1 && *lo > *hi)
        return cellar_fail(err, CELLAR_EINVAL, "%s must not be above %s", lo_name, hi_name);
    if (*lo < 0)
        *lo = 0;
    if (*hi > top)
        *hi = top;
    return 0;
}

static int check_x_type(const api_request *req, cellar_error *err)
{
    const char *xt;
    int rc = api_param_str(req, "xType", &xt, err);
    if (rc || !xt || !strcmp(xt, "x_dist"))
        return rc;
    return cellar_fail(err, CELLAR_EINVAL, "xType must be x_dist (these trees have no x_time), "
                       "not '%.100s'", xt);
}

int tx_box_params(api_request *req, const tx_req *tr, double box[4], cellar_error *err)
{
    int rc = check_x_type(req, err);
    if (rc || (rc = bounds(req, "min_x", "max_x", tr->tab->max_x, &box[0], &box[1], err)))
        return rc;
    return bounds(req, "min_y", "max_y", tr->tab->max_y, &box[2], &box[3], err);
}

double tx_round(double v, int dp)
{
    static const double scale[] = {1, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6};
    return isfinite(v) && fabs(v) < 1e12 ? (double)llround(v * scale[dp]) / scale[dp] : v;
}

double tx_x(const tx_req *tr, int32_t v)
{
    return tree_index_x(tr->t, v) * tr->tab->scale_x;
}

double tx_y(const tx_req *tr, int32_t v)
{
    return tree_index_y(tr->t, v) * tr->tab->scale_y;
}

static void write_typed(json_out *j, dtype_kind dt, const void *data, int64_t i)
{
    if (dt == DT_STRING)
        json_out_str(j, ((char *const *)data)[i]);
    else
        json_out_typed(j, dt, data, i);
}

void tx_write_meta(json_out *j, const tx_req *tr, const tx_column *c, int32_t v)
{
    int32_t s = tr->tab->slot ? tr->tab->slot[v] : -1;
    const column_values *cv = &c->vals;
    if (s < 0 || (cv->missing && cv->missing[s])) {
        json_out_null(j);
    } else if (cv->column->encoding == COL_CATEGORICAL) {
        int64_t code = ((const int64_t *)cv->data)[s];
        if (code < 0 || code >= cv->n_categories)
            json_out_null(j);
        else
            write_typed(j, cv->categories_dtype, cv->categories, code);
    } else {
        write_typed(j, cv->dtype, cv->data, s);
    }
}

static double typed_number(dtype_kind dt, const void *data, int64_t i)
{
    char text[NUMBER_TEXT_MAX];
    size_t n = fmt_typed(dt, data, i, "1", "0", text);
    return n ? strtod(text, NULL) : NAN;
}

int tx_meta_text(const tx_req *tr, const tx_column *c, int32_t v, const char **text,
                 double *num)
{
    int32_t s = tr->tab->slot ? tr->tab->slot[v] : -1;
    const column_values *cv = &c->vals;
    *text = NULL;
    *num = NAN;
    if (s < 0 || (cv->missing && cv->missing[s]))
        return 0;
    dtype_kind dt = cv->dtype;
    const void *data = cv->data;
    int64_t i = s;
    if (cv->column->encoding == COL_CATEGORICAL) {
        i = ((const int64_t *)cv->data)[s];
        if (i < 0 || i >= cv->n_categories)
            return 0;
        dt = cv->categories_dtype;
        data = cv->categories;
    }
    if (dt == DT_STRING) {
        *text = ((char *const *)data)[i];
        return *text != NULL;
    }
    *num = typed_number(dt, data, i);
    return !isnan(*num);
}

void tx_write_node_open(json_out *j, const tx_req *tr, int32_t v)
{
    const tree_index *t = tr->t;
    int32_t p = tree_index_parent(t, v), nc;
    tree_index_children(t, v, &nc);
    json_out_map_open(j);
    json_out_str(j, "node_id");
    json_out_int(j, v);
    json_out_str(j, "parent_id");
    json_out_int(j, p >= 0 ? p : v);
    json_out_str(j, "name");
    json_out_str(j, tree_index_id(t, v));
    json_out_str(j, "x_dist");
    json_out_f64(j, tx_round(tx_x(tr, v), 5));
    json_out_str(j, "y");
    json_out_f64(j, tx_round(tx_y(tr, v), 6));
    json_out_str(j, "num_tips");
    json_out_int(j, tree_index_leaf_count(t, v));
    json_out_str(j, "is_tip");
    json_out_bool(j, nc == 0);
    json_out_str(j, "mutations");
    json_out_array_open(j);
    json_out_array_close(j);
    if (!tr->tab->slot || tr->tab->slot[v] < 0)
        return;
    for (size_t c = 0; c < tr->tab->n_cols; c++) {
        json_out_str(j, tr->tab->cols[c].meta);
        tx_write_meta(j, tr, &tr->tab->cols[c], v);
    }
}

int tx_finish(json_out *j, api_response *res, const char *hint, cellar_error *err)
{
    int rc = json_out_finish(j, hint, err);
    json_out_destroy(j);
    if (rc)
        return rc;
    res->status = 200;
    res->content_type = "application/json";
    return 0;
}

void tx_append_str(buf *b, const char *s, size_t n)
{
    if (plain_text(s, n)) {
        char *p = buf_reserve(b, n + 2);
        if (!p)
            return;
        p[0] = '"';
        memcpy(p + 1, s, n);
        p[n + 1] = '"';
        b->len += n + 2;
        return;
    }
    json_out j;
    json_out_init(&j, b, 0, NULL);
    json_out_strn(&j, s, n);
    json_out_destroy(&j);
}

static void append_lit(buf *b, const char *lit, size_t n)
{
    buf_append(b, lit, n);
}

#define LIT(b, s) append_lit(b, s, sizeof s - 1)

/* Copies a string literal to p and moves p past it. */
#define PUT(p, lit) (memcpy((p), (lit), sizeof(lit) - 1), (p) += sizeof(lit) - 1)

/* x rounded half away from zero, as llround rounds, for |x| < 2^63: x
 * minus its truncation is exact. */
static inline int64_t round_away(double x)
{
    int64_t i = (int64_t)x;
    double f = x - (double)i;
    return i + (f >= 0.5) - (f <= -0.5);
}

/* Writes v rounded to `dp` decimals (as Taxonium's backend rounds x_dist
 * to 5 and y to 6), without trailing zeros, at p (NUMBER_TEXT_MAX bytes);
 * shortest round trip past 1e12, where the fixed form would not fit.
 * Returns the length. */
static inline size_t put_fixed(char *p, double v, int dp)
{
    static const double scale[] = {1, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6};
    static const int64_t iscale[] = {1, 10, 100, 1000, 10000, 100000, 1000000};
    if (!isfinite(v) || fabs(v) >= 1e12) {
        size_t n = fmt_f64(v, p);
        if (n)
            return n;
        memcpy(p, "null", 4);
        return 4;
    }
    int64_t q = round_away(v * scale[dp]);
    size_t n = 0;
    if (q < 0) {
        p[n++] = '-';
        q = -q;
    }
    int64_t ip = q / iscale[dp], fp = q % iscale[dp];
    n += fmt_u64((uint64_t)ip, p + n);
    if (fp) {
        int len = dp;
        for (; fp % 10 == 0; len--)
            fp /= 10;
        p[n++] = '.';
        for (int i = len - 1; i >= 0; i--, fp /= 10)
            p[n + (size_t)i] = (char)('0' + fp % 10);
        n += (size_t)len;
    }
    return n;
}

static void append_meta(buf *b, const tx_column *c, int32_t s)
{
    const column_values *cv = &c->vals;
    dtype_kind dt = cv->dtype;
    const void *data = cv->data;
    int64_t i = s;
    if (cv->missing && cv->missing[s]) {
        LIT(b, "null");
        return;
    }
    if (cv->column->encoding == COL_CATEGORICAL) {
        i = ((const int64_t *)cv->data)[s];
        if (i < 0 || i >= cv->n_categories) {
            LIT(b, "null");
            return;
        }
        dt = cv->categories_dtype;
        data = cv->categories;
    }
    if (dt == DT_STRING) {
        const char *text = ((char *const *)data)[i];
        if (text)
            tx_append_str(b, text, strlen(text));
        else
            LIT(b, "null");
        return;
    }
    char *p = buf_reserve(b, NUMBER_TEXT_MAX);
    if (!p)
        return;
    size_t n = fmt_typed(dt, data, i, "true", "false", p);
    if (!n)
        LIT(b, "null");
    b->len += n;
}

/* The most a node's members but its name and meta take. */
#define NODE_FIXED_MAX                                                                          \
    (sizeof "{\"node_id\":,\"parent_id\":,\"name\":,\"x_dist\":,\"y\":,\"num_tips\":"            \
            ",\"is_tip\":false,\"mutations\":[]" + 5 * NUMBER_TEXT_MAX)

void tx_append_node(buf *b, const tx_req *tr, int32_t v, int collapsed)
{
    const tx_table *tab = tr->tab;
    const tx_rec *r = &tab->rec[tab->rank[v]];
    size_t name = r->name_len >= 0 ? (size_t)r->name_len + 2 : 0;
    char *p = buf_reserve(b, NODE_FIXED_MAX + name), *s = p;
    if (!p)
        return;
    PUT(s, "{\"node_id\":");
    s += fmt_u64((uint64_t)v, s);
    PUT(s, ",\"parent_id\":");
    s += fmt_u64((uint64_t)r->parent, s);
    PUT(s, ",\"name\":");
    if (r->name_len >= 0) {
        *s++ = '"';
        memcpy(s, r->name, (size_t)r->name_len);
        s += r->name_len;
        *s++ = '"';
    } else {
        b->len += (size_t)(s - p);
        tx_append_str(b, r->name, strlen(r->name));
        if (!(p = s = buf_reserve(b, NODE_FIXED_MAX)))
            return;
    }
    PUT(s, ",\"x_dist\":");
    s += put_fixed(s, r->x_dist, 5);
    PUT(s, ",\"y\":");
    s += put_fixed(s, r->y, 6);
    PUT(s, ",\"num_tips\":");
    s += fmt_u64((uint64_t)r->num_tips, s);
    if (r->is_tip)
        PUT(s, ",\"is_tip\":true,\"mutations\":[]");
    else
        PUT(s, ",\"is_tip\":false,\"mutations\":[]");
    b->len += (size_t)(s - p);
    for (size_t c = 0; r->slot >= 0 && c < tab->n_cols; c++) {
        buf_append(b, tab->cols[c].key, tab->cols[c].key_len);
        append_meta(b, &tab->cols[c], r->slot);
    }
    if (collapsed)
        LIT(b, ",\"collapsed\":true}");
    else
        buf_putc(b, '}');
}

static int too_big(uint64_t limit, cellar_error *err)
{
    return cellar_fail(err, CELLAR_ETOOBIG,
                       "the answer grew over the limit of %" PRIu64 " bytes; zoom in (a "
                       "smaller box)", limit);
}

/* The nodes/ answer for box bx into body, from its start; stops once it is
 * over limit (0: none) and fails with CELLAR_ETOOBIG. */
static int write_nodes(buf *body, const tx_req *tr, const double bx[4], arena *a,
                       uint64_t limit, cellar_error *err)
{
    const tx_table *tab = tr->tab;
    tree_view_entry *e = NULL;
    int32_t k = 0;
    int thinned = 0, rc;
    tree_thin_box box = {bx[0] / tab->scale_x, bx[1] / tab->scale_x, bx[2] / tab->scale_y,
                         bx[3] / tab->scale_y, TX_ROWS};
    if (tree_index_node_count(tr->t) > 0 && bx[0] <= bx[1] && bx[2] <= bx[3] &&
        (rc = tree_index_thin_with(tr->t, tab->rank, &box, a, &e, &k, &thinned,
                                   err)))
        return rc;
    body->len = 0;
    /* Room for the answer at once (a node takes about 145 bytes), where
     * growing by doubling would copy it over and over. */
    uint64_t guess = (uint64_t)k * TX_NODE_BYTES + 256;
    buf_reserve(body, limit && guess > limit ? limit : guess);
    buf_printf(body, "{\"bins\":{\"rows\":%d", TX_ROWS);
    static const char *const names[] = {"min_x", "max_x", "min_y", "max_y"};
    for (int i = 0; i < 4; i++) {
        char num[NUMBER_TEXT_MAX];
        size_t len = fmt_f64(bx[i], num);
        buf_printf(body, ",\"%s\":%.*s", names[i], (int)len, num);
    }
    buf_printf(body, "},\"thinned\":%s,\"nodes\":[", thinned ? "true" : "false");
    for (int32_t i = 0; i < k && !body->failed; i++) {
        if (i)
            buf_putc(body, ',');
        tx_append_node(body, tr, e[i].node, e[i].collapsed);
        if (limit && body->len > limit)
            break;
    }
    buf_puts(body, "]}");
    if (body->failed)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory writing the answer");
    if (limit && body->len > limit)
        return too_big(limit, err);
    return 0;
}

/* Whether box b is the whole tree's (what a client asks first). */
static int whole_box(const tx_table *tab, const double b[4])
{
    const double whole[4] = {0, tab->max_x, 0, tab->max_y};
    return !memcmp(b, whole, sizeof whole);
}

int tx_nodes_answer(buf *body, const tx_req *tr, const double b[4], arena *a, uint64_t limit,
                    cellar_error *err)
{
    const tx_table *tab = tr->tab;
    if (!tab->whole || !whole_box(tab, b))
        return write_nodes(body, tr, b, a, limit, err);
    if (limit && tab->whole_len > limit)
        return too_big(limit, err);
    body->len = 0;
    if (buf_append(body, tab->whole, tab->whole_len))
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory writing the answer");
    return 0;
}
