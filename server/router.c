#include "server/router.h"

#include <string.h>

#include "api/taxonium/taxonium.h"
#include "api/h5grove/routes.h"
#include "api/ui/ui.h"
#include "api/v1/routes.h"
#include "api/zarr/routes.h"
#include "common/numfmt.h"

#define MAX_SEGMENTS 64

typedef struct route_def {
    route_id id;
    const char *name;
    api_handler handler;
    unsigned methods;
} route_def;

#define READ (METHOD_GET | METHOD_HEAD)
#define READ_POST (METHOD_GET | METHOD_HEAD | METHOD_POST)

/* Indexed by route_id. */
static const route_def routes[ROUTE_COUNT] = {
    [ROUTE_NONE] = {ROUTE_NONE, "unmatched", NULL, 0},
    [ROUTE_HEALTHZ] = {ROUTE_HEALTHZ, "/healthz", NULL, READ},
    [ROUTE_READYZ] = {ROUTE_READYZ, "/readyz", NULL, READ},
    [ROUTE_METRICS] = {ROUTE_METRICS, "/metrics", NULL, READ},
    [ROUTE_OPENAPI] = {ROUTE_OPENAPI, "/v1/openapi.json", NULL, READ},
    [ROUTE_UI] = {ROUTE_UI, "/ui/{file}", api_ui_file, READ},
    [ROUTE_STORES] = {ROUTE_STORES, "/v1/stores", api_stores_list, READ},
    [ROUTE_STORE_SUMMARY] = {ROUTE_STORE_SUMMARY, "/v1/stores/{store}", api_store_summary, READ},
    [ROUTE_MOD_LIST] = {ROUTE_MOD_LIST, "/v1/stores/{store}/mod", api_mod_list, READ},
    [ROUTE_FRAME] = {ROUTE_FRAME, "{ad}/{obs|var}", api_frame, READ_POST},
    [ROUTE_FRAME_SCHEMA] = {ROUTE_FRAME_SCHEMA, "{ad}/{obs|var}/schema", api_frame_schema, READ},
    [ROUTE_MAP] = {ROUTE_MAP, "/v1/stores/{store}/{obsmap|varmap}/{mod}", api_map, READ_POST},
    [ROUTE_ZARR_RAW] = {ROUTE_ZARR_RAW, "/v1/stores/{store}/zarr/{key}", api_zarr_raw, READ},
    [ROUTE_MATRIX] = {ROUTE_MATRIX, "{ad}/{X|layers|obsm|varm|obsp|varp}", api_matrix, READ_POST},
    [ROUTE_UNS] = {ROUTE_UNS, "{ad}/uns/{path}", api_uns, READ},
    [ROUTE_TREE_LIST] = {ROUTE_TREE_LIST, "{ad}/{obst|vart}", api_trees_list, READ},
    [ROUTE_TREE] = {ROUTE_TREE, "{ad}/{obst|vart}/{key}", api_tree, READ_POST},
    [ROUTE_TREE_NODE] = {ROUTE_TREE_NODE, "{ad}/{obst|vart}/{key}/nodes/{node}", api_tree_node,
                         READ_POST},
    [ROUTE_TREE_SUBTREE] = {ROUTE_TREE_SUBTREE, "{ad}/{obst|vart}/{key}/subtree",
                            api_tree_subtree, READ_POST},
    [ROUTE_TREE_ANCESTORS] = {ROUTE_TREE_ANCESTORS, "{ad}/{obst|vart}/{key}/ancestors",
                              api_tree_ancestors, READ_POST},
    [ROUTE_TREE_LEAVES] = {ROUTE_TREE_LEAVES, "{ad}/{obst|vart}/{key}/leaves", api_tree_leaves,
                           READ_POST},
    [ROUTE_TREE_LCA] = {ROUTE_TREE_LCA, "{ad}/{obst|vart}/{key}/lca", api_tree_lca, READ_POST},
    [ROUTE_TREE_VIEWPORT] = {ROUTE_TREE_VIEWPORT, "{ad}/{obst|vart}/{key}/viewport",
                             api_tree_viewport, READ_POST},
    [ROUTE_TAXONIUM_CONFIG] = {ROUTE_TAXONIUM_CONFIG, "{ad}/{obst|vart}/{key}/taxonium/config",
                               api_taxonium_config, READ},
    [ROUTE_TAXONIUM_NODES] = {ROUTE_TAXONIUM_NODES, "{ad}/{obst|vart}/{key}/taxonium/nodes",
                              api_taxonium_nodes, READ},
    [ROUTE_TAXONIUM_SEARCH] = {ROUTE_TAXONIUM_SEARCH, "{ad}/{obst|vart}/{key}/taxonium/search",
                               api_taxonium_search, READ},
    [ROUTE_TAXONIUM_NODE_DETAILS] = {ROUTE_TAXONIUM_NODE_DETAILS,
                                     "{ad}/{obst|vart}/{key}/taxonium/node_details",
                                     api_taxonium_node_details, READ},
    [ROUTE_TAXONIUM_TIP_ATTS] = {ROUTE_TAXONIUM_TIP_ATTS,
                                 "{ad}/{obst|vart}/{key}/taxonium/tip_atts",
                                 api_taxonium_tip_atts, READ},
    [ROUTE_TAXONIUM_MUTATIONS] = {ROUTE_TAXONIUM_MUTATIONS,
                                  "{ad}/{obst|vart}/{key}/taxonium/mutations",
                                  api_taxonium_mutations, READ},
    [ROUTE_TAXONIUM_NEXTSTRAIN] = {ROUTE_TAXONIUM_NEXTSTRAIN,
                                   "{ad}/{obst|vart}/{key}/taxonium/nextstrain_json/{node_id}",
                                   api_taxonium_nextstrain, READ},
    [ROUTE_H5GROVE_ROOT] = {ROUTE_H5GROVE_ROOT, "/h5grove/", api_h5grove_root, READ},
    [ROUTE_H5GROVE_META] = {ROUTE_H5GROVE_META, "/h5grove/meta/", api_h5grove_meta, READ},
    [ROUTE_H5GROVE_ATTR] = {ROUTE_H5GROVE_ATTR, "/h5grove/attr/", api_h5grove_attr, READ},
    [ROUTE_H5GROVE_DATA] = {ROUTE_H5GROVE_DATA, "/h5grove/data/", api_h5grove_data, READ},
    [ROUTE_H5GROVE_PATHS] = {ROUTE_H5GROVE_PATHS, "/h5grove/paths/", api_h5grove_paths, READ},
    [ROUTE_H5GROVE_STATS] = {ROUTE_H5GROVE_STATS, "/h5grove/stats/", api_h5grove_stats, READ},
    [ROUTE_ZARR_CSC] = {ROUTE_ZARR_CSC, "/v1/stores/{store}/zarr-csc/{key}", api_zarr_csc, READ},
};

/* Element routes under an AnnData prefix: literal segments, "*" captures. */
typedef struct element_route {
    const char *pattern[3];
    route_id id;
} element_route;

static const element_route element_routes[] = {
    {{"obs", NULL, NULL}, ROUTE_FRAME},
    {{"var", NULL, NULL}, ROUTE_FRAME},
    {{"obs", "schema", NULL}, ROUTE_FRAME_SCHEMA},
    {{"var", "schema", NULL}, ROUTE_FRAME_SCHEMA},
    {{"X", NULL, NULL}, ROUTE_MATRIX},
    {{"layers", "*", NULL}, ROUTE_MATRIX},
    {{"obsm", "*", NULL}, ROUTE_MATRIX},
    {{"varm", "*", NULL}, ROUTE_MATRIX},
    {{"obsp", "*", NULL}, ROUTE_MATRIX},
    {{"varp", "*", NULL}, ROUTE_MATRIX},
};

const char *router_route_name(route_id id)
{
    return id < ROUTE_COUNT ? routes[id].name : "unmatched";
}

unsigned router_method(const char *method)
{
    if (!strcmp(method, "GET"))
        return METHOD_GET;
    if (!strcmp(method, "HEAD"))
        return METHOD_HEAD;
    if (!strcmp(method, "POST"))
        return METHOD_POST;
    if (!strcmp(method, "OPTIONS"))
        return METHOD_OPTIONS;
    return 0;
}

char *router_decode(arena *a, const char *s, size_t len, int plus_is_space, size_t *out_len)
{
    char *out = arena_alloc(a, len + 1);
    if (!out)
        return NULL;
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (c == '%') {
            if (i + 2 >= len)
                return NULL;
            int hi = hex_digit_value(s[i + 1]), lo = hex_digit_value(s[i + 2]);
            if (hi < 0 || lo < 0)
                return NULL;
            out[o++] = (char)(hi * 16 + lo);
            i += 2;
        } else if (c == '+' && plus_is_space) {
            out[o++] = ' ';
        } else {
            out[o++] = c;
        }
    }
    out[o] = '\0';
    if (out_len)
        *out_len = o;
    return out;
}

static void set_route(route_match *out, route_id id)
{
    out->id = id;
    out->name = routes[id].name;
    out->handler = routes[id].handler;
    out->methods = routes[id].methods;
    out->needs_store = id >= ROUTE_STORE_SUMMARY && id != ROUTE_H5GROVE_ROOT;
}

int router_is_h5grove(route_id id)
{
    return id >= ROUTE_H5GROVE_ROOT && id <= ROUTE_H5GROVE_STATS;
}

/* /h5grove/ and /h5grove/{meta|attr|data|paths|stats}/ (h5grove's routes;
 * the trailing slash is optional, as one always is here). */
static int match_h5grove(char **seg, size_t n, route_match *out)
{
    static const struct {
        const char *name;
        route_id id;
    } names[] = {{"meta", ROUTE_H5GROVE_META},   {"attr", ROUTE_H5GROVE_ATTR},
                 {"data", ROUTE_H5GROVE_DATA},   {"paths", ROUTE_H5GROVE_PATHS},
                 {"stats", ROUTE_H5GROVE_STATS}};
    if (n == 0 || strcmp(seg[0], "h5grove"))
        return CELLAR_ENOTFOUND;
    if (n == 1) {
        set_route(out, ROUTE_H5GROVE_ROOT);
        return 0;
    }
    for (size_t i = 0; n == 2 && i < sizeof names / sizeof *names; i++) {
        if (!strcmp(seg[1], names[i].name)) {
            set_route(out, names[i].id);
            return 0;
        }
    }
    return CELLAR_ENOTFOUND;
}

static int store_suffix(const char *s)
{
    /* ".zip" takes ".zarr.zip" too (storage/zip/zip_store.h) */
    static const char *const suffixes[] = {".h5ad", ".h5mu", ".h5td", ".h5", ".zarr", ".zip"};
    size_t len = strlen(s);
    for (size_t i = 0; i < sizeof suffixes / sizeof *suffixes; i++) {
        size_t sl = strlen(suffixes[i]);
        if (len > sl && !memcmp(s + len - sl, suffixes[i], sl))
            return 1;
    }
    return 0;
}

/* {ad}/uns[/{path...}]: the path below uns is the decoded segments joined
 * by '/' (NULL for uns itself); a segment that decoded to hold '/' names no
 * element. */
static int match_uns(char **seg, size_t n, api_request *req, route_match *out)
{
    size_t total = 1;
    for (size_t i = 1; i < n; i++) {
        if (strchr(seg[i], '/') || !seg[i][0])
            return CELLAR_ENOTFOUND;
        total += strlen(seg[i]) + 1;
    }
    char *key = NULL;
    if (n > 1) {
        key = arena_alloc(req->arena, total);
        if (!key)
            return CELLAR_ENOMEM;
        for (size_t i = 1; i < n; i++) {
            if (i > 1)
                strcat(key, "/");
            strcat(key, seg[i]);
        }
    }
    req->element = seg[0];
    req->key = key;
    set_route(out, ROUTE_UNS);
    return 0;
}

/* {ad}/{obst|vart}/{key}/taxonium/{op}[/{node_id}]: Taxonium's backend
 * routes (req->item the node_id of nextstrain_json). */
static int match_taxonium(char **seg, size_t n, api_request *req, route_match *out)
{
    static const struct {
        const char *name;
        route_id id;
    } ops[] = {
        {"config", ROUTE_TAXONIUM_CONFIG},         {"nodes", ROUTE_TAXONIUM_NODES},
        {"search", ROUTE_TAXONIUM_SEARCH},         {"node_details", ROUTE_TAXONIUM_NODE_DETAILS},
        {"tip_atts", ROUTE_TAXONIUM_TIP_ATTS},     {"mutations", ROUTE_TAXONIUM_MUTATIONS},
    };
    if (n == 2 && !strcmp(seg[0], "nextstrain_json")) {
        req->item = seg[1];
        set_route(out, ROUTE_TAXONIUM_NEXTSTRAIN);
        return 0;
    }
    for (size_t i = 0; n == 1 && i < sizeof ops / sizeof *ops; i++) {
        if (!strcmp(seg[0], ops[i].name)) {
            set_route(out, ops[i].id);
            return 0;
        }
    }
    return CELLAR_ENOTFOUND;
}

/* {ad}/{obst|vart}[/{key}[/nodes/{node} | /{query}]]: req->element is the
 * axis, req->key the tree key, req->item the node id. */
static int match_trees(char **seg, size_t n, api_request *req, route_match *out)
{
    static const struct {
        const char *name;
        route_id id;
    } queries[] = {
        {"subtree", ROUTE_TREE_SUBTREE}, {"ancestors", ROUTE_TREE_ANCESTORS},
        {"leaves", ROUTE_TREE_LEAVES},   {"lca", ROUTE_TREE_LCA},
        {"viewport", ROUTE_TREE_VIEWPORT},
    };
    req->element = seg[0];
    req->key = n > 1 ? seg[1] : NULL;
    if (n == 1 || n == 2) {
        set_route(out, n == 1 ? ROUTE_TREE_LIST : ROUTE_TREE);
        return 0;
    }
    if (n == 4 && !strcmp(seg[2], "nodes")) {
        req->item = seg[3];
        set_route(out, ROUTE_TREE_NODE);
        return 0;
    }
    if (n >= 4 && !strcmp(seg[2], "taxonium"))
        return match_taxonium(seg + 3, n - 3, req, out);
    for (size_t i = 0; n == 3 && i < sizeof queries / sizeof *queries; i++) {
        if (!strcmp(seg[2], queries[i].name)) {
            set_route(out, queries[i].id);
            return 0;
        }
    }
    return CELLAR_ENOTFOUND;
}

/* Matches the segments after an AnnData prefix. */
static int match_element(char **seg, size_t n, api_request *req, route_match *out)
{
    if (n >= 1 && !strcmp(seg[0], "raw")) {
        req->raw = 1;
        seg++;
        n--;
    }
    if (n >= 1 && !strcmp(seg[0], "uns"))
        return match_uns(seg, n, req, out);
    if (n >= 1 && (!strcmp(seg[0], "obst") || !strcmp(seg[0], "vart")))
        return match_trees(seg, n, req, out);
    for (size_t r = 0; r < sizeof element_routes / sizeof *element_routes; r++) {
        const element_route *er = &element_routes[r];
        size_t len = 0;
        while (len < 3 && er->pattern[len])
            len++;
        if (len != n)
            continue;
        int ok = 1;
        for (size_t i = 0; i < n && ok; i++)
            ok = !strcmp(er->pattern[i], "*") || !strcmp(er->pattern[i], seg[i]);
        if (!ok)
            continue;
        req->element = seg[0];
        req->key = n > 1 ? seg[1] : NULL;
        set_route(out, er->id);
        return 0;
    }
    return CELLAR_ENOTFOUND;
}

/* /zarr/{key...}: the key is the decoded segments joined by '/'; a segment
 * that decoded to hold '/' (%2F) names no file, and "" is left to the
 * handler to refuse. */
static int match_zarr_key(char **seg, size_t n, api_request *req, route_match *out, route_id id)
{
    size_t total = 1;
    for (size_t i = 0; i < n; i++) {
        if (strchr(seg[i], '/'))
            return CELLAR_ENOTFOUND;
        total += strlen(seg[i]) + 1;
    }
    char *key = arena_alloc(req->arena, total);
    if (!key)
        return CELLAR_ENOMEM;
    key[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        if (i)
            strcat(key, "/");
        strcat(key, seg[i]);
    }
    req->element = id == ROUTE_ZARR_CSC ? "zarr-csc" : "zarr";
    req->key = key;
    set_route(out, id);
    return 0;
}

static int match_store_rest(char **seg, size_t n, api_request *req, route_match *out)
{
    if (n == 0) {
        set_route(out, ROUTE_STORE_SUMMARY);
        return 0;
    }
    if (n == 1 && !strcmp(seg[0], "mod")) {
        set_route(out, ROUTE_MOD_LIST);
        return 0;
    }
    if (n >= 1 && !strcmp(seg[0], "zarr"))
        return match_zarr_key(seg + 1, n - 1, req, out, ROUTE_ZARR_RAW);
    if (n >= 1 && !strcmp(seg[0], "zarr-csc"))
        return match_zarr_key(seg + 1, n - 1, req, out, ROUTE_ZARR_CSC);
    if (n == 2 && (!strcmp(seg[0], "obsmap") || !strcmp(seg[0], "varmap"))) {
        req->element = seg[0];
        req->mod = seg[1];
        set_route(out, ROUTE_MAP);
        return 0;
    }
    if (n >= 3 && !strcmp(seg[0], "mod")) {
        req->mod = seg[1];
        return match_element(seg + 2, n - 2, req, out);
    }
    return match_element(seg, n, req, out);
}

/* The viewer: "/" and "/ui/" are its page, "/ui/{file}" one of its files
 * (req->key; a name holding '/' is none of them). */
static int match_ui(char **seg, size_t n, api_request *req, route_match *out)
{
    if (n == 1 && !seg[0][0]) {
        req->key = NULL;
    } else if (n >= 1 && !strcmp(seg[0], "ui") && n <= 2) {
        req->key = n == 2 ? seg[1] : NULL;
    } else {
        return CELLAR_ENOTFOUND;
    }
    set_route(out, ROUTE_UI);
    return 0;
}

int router_match(const char *raw_path, api_request *req, route_match *out, cellar_error *err)
{
    set_route(out, ROUTE_NONE);
    if (raw_path[0] != '/')
        return cellar_fail(err, CELLAR_ENOTFOUND, "no route for this path");
    /* Split the raw path, then decode each segment on its own. */
    char *seg[MAX_SEGMENTS];
    size_t n = 0;
    const char *s = raw_path + 1;
    for (;;) {
        const char *e = strchr(s, '/');
        size_t len = e ? (size_t)(e - s) : strlen(s);
        if (!e && len == 0 && n > 0)
            break; /* one trailing slash is tolerated */
        if (n == MAX_SEGMENTS)
            return cellar_fail(err, CELLAR_ENOTFOUND, "path has too many segments");
        size_t dlen = 0;
        seg[n] = router_decode(req->arena, s, len, 0, &dlen);
        if (!seg[n])
            return cellar_fail(err, CELLAR_EINVAL, "malformed percent-escape in the path");
        if (dlen != strlen(seg[n]))
            return cellar_fail(err, CELLAR_ENOTFOUND, "no route for a path holding NUL");
        n++;
        if (!e)
            break;
        s = e + 1;
    }
    if (n == 1 && !strcmp(seg[0], "healthz"))
        set_route(out, ROUTE_HEALTHZ);
    else if (n == 1 && !strcmp(seg[0], "readyz"))
        set_route(out, ROUTE_READYZ);
    else if (n == 1 && !strcmp(seg[0], "metrics"))
        set_route(out, ROUTE_METRICS);
    else if (n == 2 && !strcmp(seg[0], "v1") && !strcmp(seg[1], "openapi.json"))
        set_route(out, ROUTE_OPENAPI);
    else if (n == 2 && !strcmp(seg[0], "v1") && !strcmp(seg[1], "stores"))
        set_route(out, ROUTE_STORES);
    else if (match_ui(seg, n, req, out) == 0 || match_h5grove(seg, n, out) == 0)
        return 0;
    if (out->id != ROUTE_NONE)
        return 0;
    if (n < 3 || strcmp(seg[0], "v1") || strcmp(seg[1], "stores"))
        return cellar_fail(err, CELLAR_ENOTFOUND, "no route for this path");

    /* The store name ends at the first segment with a store suffix. */
    size_t end = 2;
    while (end < n && !store_suffix(seg[end]))
        end++;
    if (end == n)
        return cellar_fail(err, CELLAR_ENOTFOUND,
                           "no store in this path (store names end in .h5ad, .h5mu, .h5td, "
                           ".h5, .zarr, .zarr.zip or .zip)");
    size_t total = 0;
    for (size_t i = 2; i <= end; i++)
        total += strlen(seg[i]) + 1;
    char *name = arena_alloc(req->arena, total);
    if (!name)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
    for (size_t i = 2; i <= end; i++) {
        if (i > 2)
            strcat(name, "/");
        strcat(name, seg[i]);
    }
    req->store_name = name;
    if (match_store_rest(seg + end + 1, n - end - 1, req, out) != 0) {
        set_route(out, ROUTE_NONE);
        return cellar_fail(err, CELLAR_ENOTFOUND, "no such element route in store '%s'",
                           name);
    }
    return 0;
}
