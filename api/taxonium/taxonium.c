/* The Taxonium routes but search (api/taxonium/tx_search.c): see
 * api/taxonium/taxonium.h. */
#include "api/taxonium/taxonium.h"

#include <ctype.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "api/taxonium/tx_tree.h"
#include "storage/trees/tree_thin.h"

static int start_json(api_request *req, api_response *res, json_out *j, cellar_error *err)
{
    res->body.len = 0;
    return json_out_init(j, &res->body, api_limit(req), err);
}

/* ---- config/ ---- */

/* Taxonium's prettyName: meta_ cut off, the first letter capitalized. */
static const char *pretty(api_request *req, const char *name)
{
    if (!strncmp(name, "meta_", 5))
        name += 5;
    char *p = arena_strdup(req->arena, name);
    if (p && p[0] >= 'a' && p[0] <= 'z')
        p[0] = (char)toupper((unsigned char)p[0]);
    return p ? p : name;
}

static void search_type(json_out *j, api_request *req, const char *name, const char *type)
{
    json_out_map_open(j);
    json_out_str(j, "name");
    json_out_str(j, name);
    json_out_str(j, "label");
    json_out_str(j, pretty(req, name));
    json_out_str(j, "type");
    json_out_str(j, type);
    if (strstr(type, "text")) {
        json_out_str(j, "controls");
        json_out_bool(j, 1);
    }
    json_out_map_close(j);
}

static void config_keys(json_out *j, api_request *req, const tx_table *tab)
{
    json_out_str(j, "keys_to_display");
    json_out_array_open(j);
    for (size_t c = 0; c < tab->n_cols; c++)
        json_out_str(j, tab->cols[c].meta);
    json_out_array_close(j);
    json_out_str(j, "search_types");
    json_out_array_open(j);
    search_type(j, req, "name", "text_match");
    for (size_t c = 0; c < tab->n_cols; c++)
        search_type(j, req, tab->cols[c].meta, tab->cols[c].numeric ? "number" : "text_match");
    search_type(j, req, "num_tips", "number");
    search_type(j, req, "boolean", "boolean");
    json_out_array_close(j);
    json_out_str(j, "colorBy");
    json_out_map_open(j);
    json_out_str(j, "colorByOptions");
    json_out_array_open(j);
    for (size_t c = 0; c < tab->n_cols; c++)
        json_out_str(j, tab->cols[c].meta);
    json_out_str(j, "None");
    json_out_array_close(j);
    json_out_map_close(j);
    json_out_str(j, "defaultColorByField");
    json_out_str(j, tab->n_cols ? tab->cols[0].meta : "None");
    if (!tab->n_cols) {
        json_out_str(j, "colorMapping");
        json_out_map_open(j);
        json_out_str(j, "None");
        json_out_array_open(j);
        json_out_int(j, 50);
        json_out_int(j, 50);
        json_out_int(j, 150);
        json_out_array_close(j);
        json_out_map_close(j);
    }
}

static void empty_array(json_out *j, const char *key)
{
    json_out_str(j, key);
    json_out_array_open(j);
    json_out_array_close(j);
}

int api_taxonium_config(api_request *req, api_response *res, cellar_error *err)
{
    tx_req tr;
    json_out j;
    int rc = tx_open(req, &tr, NULL, 1, err);
    if (rc || (rc = start_json(req, res, &j, err)))
        return rc;
    const tree_index *t = tr.t;
    const tx_table *tab = tr.tab;
    int32_t nr;
    const int32_t *roots = tree_index_roots(t, &nr);
    json_out_map_open(&j);
    json_out_str(&j, "title");
    json_out_str(&j, arena_printf(req->arena, "%s %s/%s", req->store_name, tr.axis, tr.key));
    json_out_str(&j, "source");
    json_out_str(&j, arena_printf(req->arena, "cellar: %s, %s '%s'", req->store_name, tr.axis,
                                  tr.key));
    json_out_str(&j, "num_nodes");
    json_out_int(&j, tree_index_node_count(t));
    json_out_str(&j, "num_tips");
    json_out_int(&j, tree_index_leaf_total(t));
    json_out_str(&j, "initial_x");
    json_out_f64(&j, tab->max_x / 2);
    json_out_str(&j, "initial_y");
    json_out_f64(&j, tab->max_y / 2);
    json_out_str(&j, "initial_zoom");
    json_out_int(&j, -2);
    empty_array(&j, "genes");
    empty_array(&j, "rootMutations");
    json_out_str(&j, "rootId");
    json_out_int(&j, nr > 0 ? roots[0] : 0);
    json_out_str(&j, "useHydratedMutations");
    json_out_bool(&j, 0);
    json_out_str(&j, "name_accessor");
    json_out_str(&j, "name");
    json_out_str(&j, "x_accessors");
    json_out_array_open(&j);
    json_out_str(&j, "x_dist");
    json_out_array_close(&j);
    config_keys(&j, req, tab);
    json_out_str(&j, "overallMinX");
    json_out_f64(&j, 0);
    json_out_str(&j, "overallMaxX");
    json_out_f64(&j, tab->max_x);
    json_out_str(&j, "overallMinY");
    json_out_f64(&j, 0);
    json_out_str(&j, "overallMaxY");
    json_out_f64(&j, tab->max_y);
    json_out_str(&j, "x_scale");
    json_out_f64(&j, tab->scale_x);
    json_out_str(&j, "y_scale");
    json_out_f64(&j, tab->scale_y);
    json_out_str(&j, "uses_length");
    json_out_bool(&j, tree_index_uses_length(t));
    json_out_str(&j, "num_roots");
    json_out_int(&j, nr);
    json_out_map_close(&j);
    return tx_finish(&j, res, NULL, err);
}

/* ---- nodes/ ---- */

int api_taxonium_nodes(api_request *req, api_response *res, cellar_error *err)
{
    static const char *const extra[] = {"min_x", "max_x", "min_y", "max_y", "xType", "type",
                                        NULL};
    tx_req tr;
    double b[4];
    int rc = tx_open(req, &tr, extra, 1, err);
    if (rc || (rc = tx_box_params(req, &tr, b, err)))
        return rc;
    /* Written straight into the body: this is the answer every pan and
     * zoom asks for, tens of thousands of nodes for a big tree. */
    if ((rc = tx_nodes_answer(&res->body, &tr, b, req->arena, api_limit(req), err)))
        return rc;
    res->status = 200;
    res->content_type = "application/json";
    return 0;
}

/* ---- node_details/, tip_atts ---- */

int api_taxonium_node_details(api_request *req, api_response *res, cellar_error *err)
{
    static const char *const extra[] = {"id", NULL};
    tx_req tr;
    const char *id;
    int32_t v;
    json_out j;
    int rc = tx_open(req, &tr, extra, 1, err);
    if (rc || (rc = api_param_str(req, "id", &id, err)) ||
        (rc = tx_node_id(&tr, "id", id, &v, err)) || (rc = start_json(req, res, &j, err)))
        return rc;
    const tree_index *t = tr.t;
    tx_write_node_open(&j, &tr, v);
    const char *attrs = tree_index_attrs(t, v), *ea = tree_index_edge_attrs(t, v);
    json_out_str(&j, "attrs");
    json_out_raw(&j, attrs, strlen(attrs));
    json_out_str(&j, "edge_attrs");
    if (ea)
        json_out_raw(&j, ea, strlen(ea));
    else
        json_out_null(&j);
    json_out_str(&j, "depth");
    json_out_int(&j, tree_index_depth(t, v));
    json_out_map_close(&j);
    return tx_finish(&j, res, NULL, err);
}

/* The value of attribute `att` of leaf v, as tip_atts lists it. */
static void tip_value(json_out *j, const tx_req *tr, const char *att, int32_t v)
{
    if (!strcmp(att, "name")) {
        json_out_str(j, tree_index_id(tr->t, v));
    } else if (!strcmp(att, "node_id")) {
        json_out_int(j, v);
    } else if (!strcmp(att, "num_tips")) {
        json_out_int(j, 1);
    } else if (!strcmp(att, "x_dist")) {
        json_out_f64(j, tx_x(tr, v));
    } else if (!strcmp(att, "y")) {
        json_out_f64(j, tx_y(tr, v));
    } else {
        for (size_t c = 0; c < tr->tab->n_cols; c++) {
            if (!strcmp(att, tr->tab->cols[c].meta)) {
                tx_write_meta(j, tr, &tr->tab->cols[c], v);
                return;
            }
        }
        json_out_null(j);
    }
}

int api_taxonium_tip_atts(api_request *req, api_response *res, cellar_error *err)
{
    static const char *const extra[] = {"id", "att", NULL};
    tx_req tr;
    const char *id, *att;
    int32_t v;
    json_out j;
    int rc = tx_open(req, &tr, extra, 1, err);
    if (rc || (rc = api_param_str(req, "id", &id, err)) ||
        (rc = tx_node_id(&tr, "id", id, &v, err)) || (rc = api_param_str(req, "att", &att, err)))
        return rc;
    if (!att)
        return cellar_fail(err, CELLAR_EINVAL, "parameter 'att' (an attribute name) is required");
    if ((rc = start_json(req, res, &j, err)))
        return rc;
    int32_t n;
    const int32_t *leaves = tree_index_leaves(tr.t, v, 0, INT32_MAX, &n, NULL);
    json_out_array_open(&j);
    for (int32_t i = 0; i < n && json_out_ok(&j); i++)
        tip_value(&j, &tr, att, leaves[i]);
    json_out_array_close(&j);
    return tx_finish(&j, res, "ask for the tips of a smaller clade", err);
}

/* ---- mutations/ ---- */

int api_taxonium_mutations(api_request *req, api_response *res, cellar_error *err)
{
    tx_req tr;
    int rc = tx_open(req, &tr, NULL, 0, err);
    if (rc)
        return rc;
    /* Server-sent events as Taxonium's backend streams them: chunks of
     * mutations as `data: [...]`, then `data: END`.  TreeData trees carry no
     * mutations, so only the end is sent. */
    res->body.len = 0;
    buf_puts(&res->body, "data: END\n\n");
    if (res->body.failed)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
    res->status = 200;
    res->content_type = "text/event-stream";
    return 0;
}

/* ---- nextstrain_json/{node_id} ---- */

/* One JSON value into b through a writer of its own (the export nests as
 * deep as the tree, past the writer's nesting limit). */
static void put_str(buf *b, const char *s)
{
    if (s)
        tx_append_str(b, s, strlen(s));
    else
        buf_puts(b, "null");
}

static void put_meta(buf *b, const tx_req *tr, const tx_column *c, int32_t v)
{
    json_out j;
    json_out_init(&j, b, 0, NULL);
    tx_write_meta(&j, tr, c, v);
    json_out_destroy(&j);
}

static void put_f64(buf *b, double v)
{
    char text[NUMBER_TEXT_MAX];
    size_t n = fmt_f64(v, text);
    buf_append(b, n ? text : "null", n ? n : 4);
}

static void ns_node_open(buf *b, const tx_req *tr, int32_t v, double x0)
{
    buf_puts(b, "{\"name\":");
    put_str(b, tree_index_id(tr->t, v));
    buf_printf(b, ",\"node_id\":%" PRId32 ",\"node_attrs\":{\"div\":", v);
    put_f64(b, tree_index_x(tr->t, v) - x0);
    int32_t s = tr->tab->slot ? tr->tab->slot[v] : -1;
    for (size_t c = 0; s >= 0 && c < tr->tab->n_cols; c++) {
        const char *text;
        double num;
        if (!tx_meta_text(tr, &tr->tab->cols[c], v, &text, &num))
            continue;
        buf_putc(b, ',');
        put_str(b, tr->tab->cols[c].meta + 5);
        buf_puts(b, ":{\"value\":");
        put_meta(b, tr, &tr->tab->cols[c], v);
        buf_putc(b, '}');
    }
    buf_puts(b, "},\"branch_attrs\":{\"mutations\":{}}");
}

static int is_last_child(const tree_index *t, int32_t v)
{
    int32_t nc, p = tree_index_parent(t, v);
    const int32_t *kids = tree_index_children(t, p, &nc);
    return kids[nc - 1] == v;
}

static void ns_tree(buf *b, const tx_req *tr, int32_t root, uint64_t limit)
{
    const tree_index *t = tr->t;
    double x0 = tree_index_x(t, root);
    int32_t start = tree_index_preorder(t, root), end = tree_index_subtree_end(t, root);
    for (int32_t pos = start; pos < end && !b->failed && (!limit || b->len <= limit); pos++) {
        int32_t v = tree_index_node_at(t, pos), nc;
        if (pos > start && tree_index_children(t, tree_index_parent(t, v), &nc)[0] != v)
            buf_putc(b, ',');
        ns_node_open(b, tr, v, x0);
        tree_index_children(t, v, &nc);
        if (nc > 0) {
            buf_puts(b, ",\"children\":[");
            continue;
        }
        buf_putc(b, '}');
        for (int32_t u = v; u != root && is_last_child(t, u); u = tree_index_parent(t, u))
            buf_puts(b, "]}");
    }
}

static void ns_meta(buf *b, const tx_req *tr, const char *title)
{
    buf_puts(b, "{\"meta\":{\"title\":");
    put_str(b, title);
    buf_puts(b, ",\"description\":\"Exported from cellar's Taxonium backend.\","
                "\"panels\":[\"tree\"],\"display_defaults\":{\"distance_measure\":\"div\"},"
                "\"colorings\":[");
    for (size_t c = 0; c < tr->tab->n_cols; c++) {
        if (c)
            buf_putc(b, ',');
        buf_puts(b, "{\"key\":");
        put_str(b, tr->tab->cols[c].meta + 5);
        buf_puts(b, ",\"title\":");
        put_str(b, tr->tab->cols[c].meta + 5);
        buf_puts(b, tr->tab->cols[c].numeric ? ",\"type\":\"continuous\"}"
                                             : ",\"type\":\"categorical\"}");
    }
    buf_puts(b, "]},\"tree\":");
}

int api_taxonium_nextstrain(api_request *req, api_response *res, cellar_error *err)
{
    tx_req tr;
    int32_t v;
    int rc = tx_open(req, &tr, NULL, 1, err);
    if (rc || (rc = tx_node_id(&tr, "the node_id", req->item, &v, err)))
        return rc;
    buf *b = &res->body;
    b->len = 0;
    uint64_t limit = api_limit(req);
    ns_meta(b, &tr, arena_printf(req->arena, "%s %s/%s", req->store_name, tr.axis, tr.key));
    ns_tree(b, &tr, v, limit);
    buf_puts(b, ",\"version\":\"v2\"}");
    if (b->failed)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory writing the export");
    if (limit && b->len > limit)
        return cellar_fail(err, CELLAR_ETOOBIG,
                           "the export grew over the limit of %" PRIu64 " bytes; export a "
                           "smaller clade", limit);
    const char *cd = arena_printf(req->arena, "attachment; filename=%" PRId32 ".nextstrain.json",
                                  v);
    if (!cd || api_add_header(req, res, "Content-Disposition", cd))
        return cellar_fail(err, CELLAR_EINTERNAL, "cannot add the Content-Disposition header");
    res->status = 200;
    res->content_type = "application/json";
    return 0;
}
