#include <string.h>

#include "common/arena.h"
#include "server/router.h"
#include "tests/unit/unit.h"

static int route(const char *path, api_request *req, route_match *m, arena *a)
{
    memset(req, 0, sizeof *req);
    req->arena = a;
    cellar_error err;
    cellar_error_clear(&err);
    return router_match(path, req, m, &err);
}

void test_router_viewer(void)
{
    arena *a = arena_new();
    api_request req;
    route_match m;
    CHECK_EQ(route("/", &req, &m, a), 0);
    CHECK_EQ(m.id, ROUTE_UI);
    CHECK(req.key == NULL);
    CHECK(!m.needs_store);
    CHECK_EQ(route("/ui/", &req, &m, a), 0);
    CHECK_EQ(m.id, ROUTE_UI);
    CHECK(req.key == NULL);
    CHECK_EQ(route("/ui/main.js", &req, &m, a), 0);
    CHECK_EQ(m.id, ROUTE_UI);
    CHECK_STR_EQ(req.key, "main.js");
    CHECK_EQ(route("/ui/a%2Eb", &req, &m, a), 0);
    CHECK_STR_EQ(req.key, "a.b");
    CHECK_EQ(route("/ui/a/main.js", &req, &m, a), CELLAR_ENOTFOUND);
    CHECK_EQ(route("/index.html", &req, &m, a), CELLAR_ENOTFOUND);
    arena_free(a);
}

void test_router_service_and_stores(void)
{
    arena *a = arena_new();
    api_request req;
    route_match m;
    CHECK_EQ(route("/healthz", &req, &m, a), 0);
    CHECK_EQ(m.id, ROUTE_HEALTHZ);
    CHECK_EQ(route("/v1/stores", &req, &m, a), 0);
    CHECK_EQ(m.id, ROUTE_STORES);
    CHECK_EQ(route("/v1/stores/", &req, &m, a), 0);
    CHECK_EQ(m.id, ROUTE_STORES);
    CHECK_EQ(route("/v1/stores/atlas/liver.h5mu", &req, &m, a), 0);
    CHECK_EQ(m.id, ROUTE_STORE_SUMMARY);
    CHECK_STR_EQ(req.store_name, "atlas/liver.h5mu");
    CHECK_EQ(route("/v1/stores/a.h5mu/mod", &req, &m, a), 0);
    CHECK_EQ(m.id, ROUTE_MOD_LIST);
    CHECK_EQ(route("/v1/stores/a.h5mu/obsmap/rna", &req, &m, a), 0);
    CHECK_EQ(m.id, ROUTE_MAP);
    CHECK_STR_EQ(req.element, "obsmap");
    CHECK_STR_EQ(req.mod, "rna");
    CHECK_EQ(route("/nope", &req, &m, a), CELLAR_ENOTFOUND);
    CHECK_EQ(route("/v1/stores/noext/obs", &req, &m, a), CELLAR_ENOTFOUND);
    arena_free(a);
}

void test_router_elements_and_decoding(void)
{
    arena *a = arena_new();
    api_request req;
    route_match m;
    CHECK_EQ(route("/v1/stores/x.h5ad/obs", &req, &m, a), 0);
    CHECK_EQ(m.id, ROUTE_FRAME);
    CHECK_STR_EQ(req.element, "obs");
    CHECK(req.mod == NULL);
    CHECK_EQ(route("/v1/stores/x.h5mu/mod/my%20rna/var/schema", &req, &m, a), 0);
    CHECK_EQ(m.id, ROUTE_FRAME_SCHEMA);
    CHECK_STR_EQ(req.mod, "my rna");
    CHECK_STR_EQ(req.element, "var");
    CHECK_EQ(route("/v1/stores/x.h5ad/raw/var", &req, &m, a), 0);
    CHECK_EQ(m.id, ROUTE_FRAME);
    CHECK_EQ(req.raw, 1);
    /* %2F is part of a name, not a separator. */
    CHECK_EQ(route("/v1/stores/x.h5mu/obsmap/a%2Fb", &req, &m, a), 0);
    CHECK_STR_EQ(req.mod, "a/b");
    /* ... and inside the store segment it is decoded but stays one segment,
     * which the registry then refuses as a name with "..". */
    CHECK_EQ(route("/v1/stores/..%2Fsecret.h5ad", &req, &m, a), 0);
    CHECK_STR_EQ(req.store_name, "../secret.h5ad");
    CHECK_EQ(route("/v1/stores/x.h5ad/obs%00", &req, &m, a), CELLAR_ENOTFOUND);
    CHECK_EQ(route("/v1/stores/x.h5ad/%zz", &req, &m, a), CELLAR_EINVAL);
    CHECK_EQ(route("/v1/stores/x.h5ad/%4", &req, &m, a), CELLAR_EINVAL);
    CHECK_EQ(route("/v1/stores/x.h5ad/no_such_element", &req, &m, a), CELLAR_ENOTFOUND);
    CHECK_EQ(route("/v1/stores/x.h5ad/obs/schema/extra", &req, &m, a), CELLAR_ENOTFOUND);
    CHECK_EQ(route("/v1/stores/x.h5ad/mod/rna/mod", &req, &m, a), CELLAR_ENOTFOUND);
    size_t len = 0;
    char *d = router_decode(a, "a%2Cb+c", 7, 1, &len);
    CHECK_STR_EQ(d, "a,b c");
    arena_free(a);
}

void test_router_taxonium(void)
{
    arena *a = arena_new();
    api_request req;
    route_match m;
    static const struct {
        const char *path;
        route_id id;
    } ok[] = {
        {"/v1/stores/x.h5td/obst/t%2F1/taxonium/config/", ROUTE_TAXONIUM_CONFIG},
        {"/v1/stores/x.h5td/obst/t%2F1/taxonium/nodes", ROUTE_TAXONIUM_NODES},
        {"/v1/stores/x.h5td/vart/t%2F1/taxonium/search/", ROUTE_TAXONIUM_SEARCH},
        {"/v1/stores/x.h5td/obst/t%2F1/taxonium/node_details/", ROUTE_TAXONIUM_NODE_DETAILS},
        {"/v1/stores/x.h5td/obst/t%2F1/taxonium/tip_atts", ROUTE_TAXONIUM_TIP_ATTS},
        {"/v1/stores/x.h5td/obst/t%2F1/taxonium/mutations/", ROUTE_TAXONIUM_MUTATIONS},
        {"/v1/stores/x.h5mu/mod/m/obst/t%2F1/taxonium/nextstrain_json/12", ROUTE_TAXONIUM_NEXTSTRAIN},
    };
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
        CHECK_EQ(route(ok[i].path, &req, &m, a), 0);
        CHECK_EQ(m.id, ok[i].id);
        CHECK_STR_EQ(req.key, "t/1");
        CHECK(m.handler != NULL);
        CHECK_EQ(m.methods, (unsigned)(METHOD_GET | METHOD_HEAD));
    }
    CHECK_STR_EQ(req.item, "12");
    CHECK_STR_EQ(req.mod, "m");
    CHECK_STR_EQ(req.element, "obst");
    CHECK_EQ(route("/v1/stores/x.h5td/obst/t/taxonium", &req, &m, a), CELLAR_ENOTFOUND);
    CHECK_EQ(route("/v1/stores/x.h5td/obst/t/taxonium/bogus/", &req, &m, a), CELLAR_ENOTFOUND);
    CHECK_EQ(route("/v1/stores/x.h5td/obst/t/taxonium/nextstrain_json", &req, &m, a),
             CELLAR_ENOTFOUND);
    CHECK_EQ(route("/v1/stores/x.h5td/obst/t/taxonium/nodes/x", &req, &m, a), CELLAR_ENOTFOUND);
    /* A tree may be called "taxonium": its own routes stay its own. */
    CHECK_EQ(route("/v1/stores/x.h5td/obst/taxonium/viewport", &req, &m, a), 0);
    CHECK_EQ(m.id, ROUTE_TREE_VIEWPORT);
    arena_free(a);
}
