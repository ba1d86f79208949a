/* Tree JSON reader, builder and tree index. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "common/arena.h"
#include "common/error.h"
#include "storage/trees/tree_index.h"
#include "storage/trees/tree_json.h"
#include "tests/unit/unit.h"

/* What treedata 0.4.0's write_h5td stores (json.dumps; "edges" first). */
static const char sample_json[] =
    "{\"t1\": {\"edges\": {\"root\": {\"n1\": {\"length\": 1.0, \"w\": 1}, \"c2\": {\"length\": "
    "3.0, \"w\": null}}, \"n1\": {\"c0\": {\"length\": 2.0, \"w\": 2}, \"c1\": {\"length\": "
    "0.5}}, \"c0\": {}, \"c1\": {}, \"c2\": {}}, \"nodes\": {\"root\": {\"i\": 1, \"f\": 1.5, "
    "\"b\": true, \"s\": \"x\", \"l\": [1, 2], \"d\": {\"a\": {\"b\": 1}}, \"n\": null}, "
    "\"n1\": {\"i\": 2, \"f\": 2.5, \"b\": false, \"s\": \"y\", \"l\": [], \"d\": {}, \"n\": "
    "null}, \"c0\": {\"i\": 3, \"f\": 3.5, \"b\": true, \"s\": \"z\"}, \"c1\": {\"i\": 4, "
    "\"f\": 4.5, \"b\": false, \"s\": \"w\", \"n\": null}, \"c2\": {\"i\": 5, \"f\": 5.5, "
    "\"b\": true, \"s\": \"v\", \"n\": 1}}}, \"t2\": {\"edges\": {\"a\": {\"c3\": {}, \"c4\": "
    "{}}, \"c3\": {}, \"c4\": {}}, \"nodes\": {\"a\": {\"only\": \"x\"}, \"c3\": {}, \"c4\": "
    "{}}}}";

static tree_forest *parse(const char *json, cellar_error *err)
{
    tree_forest *f = NULL;
    cellar_error_clear(err);
    int rc = tree_forest_from_json(json, strlen(json), &f, err);
    if (rc < 0)
        return NULL;
    return f;
}

static int32_t node(const tree_index *t, const char *id)
{
    return tree_index_find(t, id, strlen(id));
}

static int32_t lca_of(const tree_index *t, const char *a, const char *b, const char *c)
{
    int32_t v[3] = {node(t, a), node(t, b), c ? node(t, c) : 0};
    return tree_index_lca(t, v, c ? 3 : 2);
}

void test_tree_json_sample(void)
{
    cellar_error err;
    tree_forest *f = parse(sample_json, &err);
    CHECK(f != NULL);
    if (!f) {
        fprintf(stderr, "%s\n", err.detail);
        return;
    }
    CHECK_EQ(tree_forest_count(f), 2);
    CHECK_STR_EQ(tree_forest_key(f, 0), "t1");
    CHECK_STR_EQ(tree_forest_key(f, 1), "t2");
    CHECK(tree_forest_get(f, "nope") == NULL);
    const tree_index *t = tree_forest_get(f, "t1");
    CHECK(t == tree_forest_tree(f, 0));
    CHECK_EQ(tree_index_node_count(t), 5);
    CHECK_EQ(tree_index_edge_count(t), 4);
    CHECK_EQ(tree_index_root_count(t), 1);
    CHECK_EQ(tree_index_leaf_total(t), 3);
    CHECK_EQ(tree_index_max_depth(t), 2);
    CHECK(tree_index_bytes(t) > 0);
    CHECK(tree_forest_bytes(f) > tree_index_bytes(t));

    /* Nodes are numbered in "nodes" order, not in edge order. */
    CHECK_EQ(node(t, "root"), 0);
    CHECK_EQ(node(t, "n1"), 1);
    CHECK_EQ(node(t, "c0"), 2);
    CHECK_EQ(node(t, "c1"), 3);
    CHECK_EQ(node(t, "c2"), 4);
    CHECK_EQ(node(t, "c"), -1);
    CHECK_EQ(tree_index_find(t, "c0x", 2), 2);
    CHECK_STR_EQ(tree_index_id(t, 4), "c2");

    CHECK_EQ(tree_index_parent(t, 0), -1);
    CHECK_EQ(tree_index_parent(t, 1), 0);
    CHECK_EQ(tree_index_parent(t, 2), 1);
    CHECK_EQ(tree_index_parent(t, 3), 1);
    CHECK_EQ(tree_index_parent(t, 4), 0);
    int32_t nc;
    const int32_t *kids = tree_index_children(t, 0, &nc);
    CHECK_EQ(nc, 2);
    CHECK_EQ(kids[0], 1);
    CHECK_EQ(kids[1], 4);
    tree_index_children(t, 4, &nc);
    CHECK_EQ(nc, 0);
    int32_t depths[5] = {0, 1, 2, 2, 1};
    int32_t pre[5] = {0, 1, 2, 3, 4}, end[5] = {5, 4, 3, 4, 5};
    for (int32_t v = 0; v < 5; v++) {
        CHECK_EQ(tree_index_depth(t, v), depths[v]);
        CHECK_EQ(tree_index_preorder(t, v), pre[v]);
        CHECK_EQ(tree_index_subtree_end(t, v), end[v]);
        CHECK_EQ(tree_index_node_at(t, pre[v]), v);
    }
    CHECK(tree_index_is_ancestor(t, 0, 3));
    CHECK(tree_index_is_ancestor(t, 1, 3));
    CHECK(tree_index_is_ancestor(t, 3, 3));
    CHECK(!tree_index_is_ancestor(t, 4, 3));
    CHECK(!tree_index_is_ancestor(t, 3, 1));

    CHECK_STR_EQ(tree_index_attrs(t, 0),
                 "{\"i\":1,\"f\":1.5,\"b\":true,\"s\":\"x\",\"l\":[1,2],\"d\":{\"a\":{\"b\":1}},"
                 "\"n\":null}");
    CHECK_STR_EQ(tree_index_attrs(t, 2), "{\"i\":3,\"f\":3.5,\"b\":true,\"s\":\"z\"}");
    CHECK(tree_index_edge_attrs(t, 0) == NULL);
    CHECK_STR_EQ(tree_index_edge_attrs(t, 4), "{\"length\":3.0,\"w\":null}");
    CHECK_STR_EQ(tree_index_edge_attrs(t, 3), "{\"length\":0.5}");
    CHECK_DBL_EQ(tree_index_branch_length(t, 3), 0.5);
    CHECK(isnan(tree_index_branch_length(t, 0)));

    /* LCA of pairs and triples. */
    CHECK_EQ(lca_of(t, "c0", "c1", NULL), 1);
    CHECK_EQ(lca_of(t, "c0", "c2", NULL), 0);
    CHECK_EQ(lca_of(t, "c1", "c0", NULL), 1);
    CHECK_EQ(lca_of(t, "c0", "n1", NULL), 1);
    CHECK_EQ(lca_of(t, "c1", "c1", NULL), 3);
    CHECK_EQ(lca_of(t, "c0", "c1", "c2"), 0);
    CHECK_EQ(lca_of(t, "c0", "c1", "n1"), 1);
    CHECK_EQ(tree_index_lca(t, NULL, 0), -1);

    /* Leaves in leaf order, with offset and max. */
    int32_t n, total;
    const int32_t *lv = tree_index_leaves(t, 0, 0, 10, &n, &total);
    CHECK_EQ(n, 3);
    CHECK_EQ(total, 3);
    CHECK_EQ(lv[0], 2);
    CHECK_EQ(lv[1], 3);
    CHECK_EQ(lv[2], 4);
    lv = tree_index_leaves(t, 0, 1, 1, &n, &total);
    CHECK_EQ(n, 1);
    CHECK_EQ(lv[0], 3);
    tree_index_leaves(t, 0, 7, 1, &n, &total);
    CHECK_EQ(n, 0);
    lv = tree_index_leaves(t, 4, 0, 10, &n, NULL);
    CHECK_EQ(n, 1);
    CHECK_EQ(lv[0], 4);
    CHECK_EQ(tree_index_leaf_count(t, 1), 2);
    CHECK_EQ(tree_index_leaf_first(t, 4), 2);

    /* Layout with `length` on every edge. */
    CHECK(tree_index_uses_length(t));
    double xs[5] = {0, 1, 3, 1.5, 3}, ys[5] = {1.25, 0.5, 0, 1, 2};
    for (int32_t v = 0; v < 5; v++) {
        CHECK_DBL_EQ(tree_index_x(t, v), xs[v]);
        CHECK_DBL_EQ(tree_index_y(t, v), ys[v]);
    }
    CHECK_DBL_EQ(tree_index_x_max(t, 1), 3);
    CHECK_DBL_EQ(tree_index_x_max(t, 0), 3);

    /* Ancestors. */
    arena *a = arena_new();
    int32_t *path = NULL;
    CHECK_EQ(tree_index_ancestors(t, 3, a, &path, &n, &err), 0);
    CHECK_EQ(n, 3);
    CHECK_EQ(path[0], 0);
    CHECK_EQ(path[1], 1);
    CHECK_EQ(path[2], 3);
    CHECK_EQ(tree_index_ancestors(t, 0, a, &path, &n, &err), 0);
    CHECK_EQ(n, 1);
    CHECK_EQ(path[0], 0);

    /* Second tree: no edge attributes, so x = depth. */
    const tree_index *t2 = tree_forest_get(f, "t2");
    CHECK_EQ(tree_index_node_count(t2), 3);
    CHECK(!tree_index_uses_length(t2));
    CHECK_DBL_EQ(tree_index_x(t2, node(t2, "c4")), 1);
    CHECK_DBL_EQ(tree_index_y(t2, node(t2, "a")), 0.5);
    CHECK_STR_EQ(tree_index_attrs(t2, node(t2, "a")), "{\"only\":\"x\"}");
    CHECK_STR_EQ(tree_index_attrs(t2, node(t2, "c3")), "{}");
    CHECK_STR_EQ(tree_index_edge_attrs(t2, node(t2, "c3")), "{}");
    arena_free(a);
    tree_forest_free(f);
}

/* root -> A, B, C; each of those -> 4 leaves. */
static tree_index *three_clades(void)
{
    cellar_error err;
    tree_builder *b = tree_builder_new("obst/clades");
    CHECK_EQ(tree_builder_add_node(b, "root", NULL, &err), 0);
    const char *clades[3] = {"A", "B", "C"};
    char id[16], leaf[16];
    for (int c = 0; c < 3; c++) {
        CHECK_EQ(tree_builder_add_node(b, clades[c], NULL, &err), 0);
        CHECK_EQ(tree_builder_add_edge(b, "root", clades[c], NULL, &err), 0);
        for (int l = 0; l < 4; l++) {
            snprintf(leaf, sizeof leaf, "%s%d", clades[c], l);
            CHECK_EQ(tree_builder_add_node(b, leaf, NULL, &err), 0);
            snprintf(id, sizeof id, "%s", clades[c]);
            CHECK_EQ(tree_builder_add_edge(b, id, leaf, NULL, &err), 0);
        }
    }
    tree_index *t = NULL;
    CHECK_EQ(tree_builder_finish(b, &t, &err), 0);
    return t;
}

void test_tree_subtree_viewport(void)
{
    cellar_error err;
    tree_index *t = three_clades();
    if (!t)
        return;
    arena *a = arena_new();
    CHECK_EQ(tree_index_node_count(t), 16);
    CHECK_EQ(tree_index_leaf_total(t), 12);
    CHECK_DBL_EQ(tree_index_y(t, node(t, "root")), 5.5);
    CHECK_DBL_EQ(tree_index_y(t, node(t, "B")), 5.5);
    CHECK_DBL_EQ(tree_index_x(t, node(t, "B2")), 2);

    /* Subtree: breadth-first, depth limit, max_nodes. */
    int32_t *out = NULL, n = 0;
    int trunc = -1;
    CHECK_EQ(tree_index_subtree(t, node(t, "root"), 1, 100, a, &out, &n, &trunc, &err), 0);
    CHECK_EQ(n, 4);
    CHECK_EQ(trunc, 0);
    CHECK_EQ(out[0], node(t, "root"));
    CHECK_EQ(out[1], node(t, "A"));
    CHECK_EQ(out[3], node(t, "C"));
    CHECK_EQ(tree_index_subtree(t, node(t, "root"), -1, 100, a, &out, &n, &trunc, &err), 0);
    CHECK_EQ(n, 16);
    CHECK_EQ(out[4], node(t, "A0"));
    CHECK_EQ(trunc, 0);
    CHECK_EQ(tree_index_subtree(t, node(t, "root"), -1, 2, a, &out, &n, &trunc, &err), 0);
    CHECK_EQ(n, 2);
    CHECK_EQ(trunc, 1);
    CHECK_EQ(tree_index_subtree(t, node(t, "B"), 5, 100, a, &out, &n, &trunc, &err), 0);
    CHECK_EQ(n, 5);
    CHECK_EQ(out[4], node(t, "B3"));
    CHECK_EQ(tree_index_subtree(t, -1, 0, 100, a, &out, &n, &trunc, &err), 0);
    CHECK_EQ(n, 1);
    cellar_error_clear(&err);
    CHECK_EQ(tree_index_subtree(t, 0, 1, 0, a, &out, &n, &trunc, &err), CELLAR_EINVAL);

    /* Viewport: the whole tree fits. */
    tree_viewport box = {-1, 10, -1, 20, 100};
    tree_view_entry *e = NULL;
    CHECK_EQ(tree_index_viewport(t, &box, a, &e, &n, &trunc, &err), 0);
    CHECK_EQ(n, 16);
    CHECK_EQ(trunc, 0);
    CHECK_EQ(e[0].node, node(t, "root"));
    CHECK_EQ(e[0].collapsed, 0);
    CHECK_EQ(e[15].node, node(t, "C3"));

    /* max_nodes 4: the root and its three clades, collapsed. */
    box.max_nodes = 4;
    CHECK_EQ(tree_index_viewport(t, &box, a, &e, &n, &trunc, &err), 0);
    CHECK_EQ(n, 4);
    CHECK_EQ(trunc, 1);
    CHECK_EQ(e[0].node, node(t, "root"));
    CHECK_EQ(e[0].collapsed, 0);
    CHECK_EQ(e[1].node, node(t, "A"));
    CHECK_EQ(e[1].collapsed, 1);
    CHECK_EQ(e[3].node, node(t, "C"));
    CHECK_EQ(e[3].collapsed, 1);

    /* max_nodes 8: two clades can not both open; the first opens. */
    box.max_nodes = 8;
    CHECK_EQ(tree_index_viewport(t, &box, a, &e, &n, &trunc, &err), 0);
    CHECK_EQ(n, 8);
    CHECK_EQ(trunc, 1);
    CHECK_EQ(e[1].node, node(t, "A"));
    CHECK_EQ(e[1].collapsed, 0);
    CHECK_EQ(e[2].node, node(t, "A0"));
    CHECK_EQ(e[6].node, node(t, "B"));
    CHECK_EQ(e[6].collapsed, 1);

    /* A box around clade A's leaves and A only: the root (y 5.5) is out. */
    tree_viewport boxa = {0.5, 3, 0, 3, 100};
    CHECK_EQ(tree_index_viewport(t, &boxa, a, &e, &n, &trunc, &err), 0);
    CHECK_EQ(n, 5);
    CHECK_EQ(trunc, 0);
    CHECK_EQ(e[0].node, node(t, "A"));
    CHECK_EQ(e[4].node, node(t, "A3"));
    /* Only the leaves' column, x = 2. */
    tree_viewport boxl = {2, 2, 3, 5, 100};
    CHECK_EQ(tree_index_viewport(t, &boxl, a, &e, &n, &trunc, &err), 0);
    CHECK_EQ(n, 3);
    CHECK_EQ(e[0].node, node(t, "A3"));
    CHECK_EQ(e[2].node, node(t, "B1"));
    /* An empty box. */
    tree_viewport boxe = {5, 6, 0, 100, 10};
    CHECK_EQ(tree_index_viewport(t, &boxe, a, &e, &n, &trunc, &err), 0);
    CHECK_EQ(n, 0);
    CHECK_EQ(trunc, 0);
    tree_viewport bad = {1, 0, 0, 1, 10};
    cellar_error_clear(&err);
    CHECK_EQ(tree_index_viewport(t, &bad, a, &e, &n, &trunc, &err), CELLAR_EINVAL);
    arena_free(a);
    tree_index_free(t);
}

void test_tree_forest_roots(void)
{
    cellar_error err;
    /* A tree with two roots (a TreeData view can leave one disconnected), a
     * node without edges, and lengths on only some edges. */
    tree_forest *f = parse("{\"v\": {\"nodes\": {\"a\": {}, \"b\": {}, \"c\": {}, \"d\": {}}, "
                           "\"edges\": {\"a\": {\"c\": {\"length\": 2}, \"d\": {}}}}}",
                           &err);
    CHECK(f != NULL);
    if (!f)
        return;
    const tree_index *t = tree_forest_tree(f, 0);
    CHECK_EQ(tree_index_root_count(t), 2);
    int32_t nr;
    const int32_t *roots = tree_index_roots(t, &nr);
    CHECK_EQ(roots[0], 0);
    CHECK_EQ(roots[1], 1);
    CHECK_EQ(lca_of(t, "c", "d", NULL), 0);
    CHECK_EQ(lca_of(t, "c", "b", NULL), -1);
    CHECK_EQ(lca_of(t, "b", "b", NULL), 1);
    CHECK(!tree_index_uses_length(t));
    CHECK_DBL_EQ(tree_index_x(t, node(t, "c")), 1);
    CHECK_DBL_EQ(tree_index_branch_length(t, node(t, "c")), 2);
    /* Leaf order runs over both trees: c, d, then b. */
    CHECK_DBL_EQ(tree_index_y(t, node(t, "b")), 2);
    CHECK_DBL_EQ(tree_index_y(t, node(t, "a")), 0.5);
    tree_forest_free(f);

    /* Empty inputs. */
    f = parse("{}", &err);
    CHECK(f != NULL);
    if (f)
        CHECK_EQ(tree_forest_count(f), 0);
    tree_forest_free(f);
    f = parse("{\"5\": {\"edges\": {}, \"nodes\": {}}}", &err);
    CHECK(f != NULL);
    if (!f)
        return;
    t = tree_forest_get(f, "5");
    CHECK_EQ(tree_index_node_count(t), 0);
    CHECK_EQ(tree_index_root_count(t), 0);
    arena *a = arena_new();
    tree_viewport box = {0, 1, 0, 1, 10};
    tree_view_entry *e;
    int32_t n;
    int trunc;
    CHECK_EQ(tree_index_viewport(t, &box, a, &e, &n, &trunc, &err), 0);
    CHECK_EQ(n, 0);
    int32_t *out;
    CHECK_EQ(tree_index_subtree(t, -1, -1, 10, a, &out, &n, &trunc, &err), 0);
    CHECK_EQ(n, 0);
    CHECK_EQ(tree_index_find(t, "x", 1), -1);
    arena_free(a);
    tree_forest_free(f);

    /* NaN / Infinity as Python writes them: read as null. */
    f = parse("{\"t\": {\"nodes\": {\"0\": {\"x\": NaN}, \"1\": {}, \"2\": {}}, \"edges\": "
              "{\"0\": {\"1\": {\"length\": NaN}, \"2\": {\"length\": -Infinity}}}}}",
              &err);
    CHECK(f != NULL);
    if (!f)
        return;
    t = tree_forest_tree(f, 0);
    CHECK_STR_EQ(tree_index_attrs(t, 0), "{\"x\":null}");
    CHECK_STR_EQ(tree_index_edge_attrs(t, 2), "{\"length\":null}");
    CHECK(isnan(tree_index_branch_length(t, 1)));
    CHECK(!tree_index_uses_length(t));
    tree_forest_free(f);
}

static void expect_error(const char *json, int code, const char *needle)
{
    cellar_error err;
    tree_forest *f = parse(json, &err);
    CHECK(f == NULL);
    tree_forest_free(f);
    CHECK_EQ(err.code, code);
    if (needle && !strstr(err.detail, needle)) {
        fprintf(stderr, "detail \"%s\" lacks \"%s\"\n", err.detail, needle);
        CHECK(0);
    }
}

void test_tree_json_errors(void)
{
    expect_error("{\"t\": {\"nodes\": {\"a\": {}, \"b\": {}}, \"edges\": {\"a\": {\"b\": {}}, "
                 "\"b\": {\"a\": {}}}}}",
                 CELLAR_EFORMAT, "cycle through node '");
    expect_error("{\"t\": {\"nodes\": {\"r\": {}, \"a\": {}, \"b\": {}}, \"edges\": {\"r\": "
                 "{\"a\": {}}, \"a\": {\"b\": {}}, \"b\": {\"a\": {}}}}}",
                 CELLAR_EFORMAT, "two parents");
    expect_error("{\"t\": {\"nodes\": {\"a\": {}}, \"edges\": {\"a\": {\"a\": {}}}}}",
                 CELLAR_EFORMAT, "node 'a' has an edge to itself");
    expect_error("{\"t\": {\"nodes\": {\"a\": {}, \"b\": {}, \"c\": {}}, \"edges\": {\"a\": "
                 "{\"c\": {}}, \"b\": {\"c\": {}}}}}",
                 CELLAR_EFORMAT, "tree 't': tree node 'c' has two parents ('a' and 'b')");
    expect_error("{\"t\": {\"edges\": {\"a\": {\"zz\": {}}}, \"nodes\": {\"a\": {}}}}",
                 CELLAR_EFORMAT, "node 'zz' appears in an edge but is not listed in nodes");
    expect_error("{\"t\": {\"nodes\": {\"a\": {}, \"a\": {}}}}", CELLAR_EFORMAT,
                 "node 'a' is listed twice");
    expect_error("{\"t\": {}, \"t\": {}}", CELLAR_EFORMAT, "tree key 't' appears twice");
    expect_error("[1, 2]", CELLAR_EFORMAT, "not an object");
    expect_error("42", CELLAR_EFORMAT, "not an object");
    expect_error("\"s\"", CELLAR_EFORMAT, "not an object");
    expect_error("{\"t\": 5}", CELLAR_EFORMAT, "tree 't': the tree is not a JSON object");
    expect_error("{\"t\": {\"nodes\": []}}", CELLAR_EFORMAT, "'nodes' is not a JSON object");
    expect_error("{\"t\": {\"nodes\": {\"a\": 1}}}", CELLAR_EFORMAT,
                 "attributes of node 'a' are not a JSON object");
    expect_error("{\"t\": {\"edges\": {\"a\": {\"b\": []}}}}", CELLAR_EFORMAT,
                 "attributes of edge 'a' -> 'b'");
    expect_error("", CELLAR_EFORMAT, NULL);
    expect_error("   ", CELLAR_EFORMAT, NULL);
    expect_error("{\"t\": {} } x", CELLAR_EFORMAT, "invalid tree JSON");
    expect_error("{\"t\": {\"nodes\": {\"a\\u0000b\": {}}}}", CELLAR_EFORMAT, "NUL");
    expect_error("{\"t\": {\"nodes\": {\"a\": {\"x\": nan}}}}", CELLAR_EFORMAT,
                 "invalid tree JSON");
    /* Truncated anywhere: always an error, never a crash. */
    size_t len = strlen(sample_json);
    for (size_t cut = 0; cut < len; cut += 7) {
        cellar_error err;
        tree_forest *f = NULL;
        cellar_error_clear(&err);
        int rc = tree_forest_from_json(sample_json, cut, &f, &err);
        CHECK_EQ(rc, CELLAR_EFORMAT);
        CHECK(f == NULL);
    }
    /* Unknown members of a tree object are skipped, nested or not. */
    cellar_error err;
    tree_forest *f = parse("{\"t\": {\"meta\": [1, {\"a\": [2]}], \"x\": 1, \"nodes\": {\"a\": "
                           "{}}, \"edges\": {}}}",
                           &err);
    CHECK(f != NULL);
    if (f)
        CHECK_EQ(tree_index_node_count(tree_forest_tree(f, 0)), 1);
    tree_forest_free(f);
}

static char *repeat(const char *head, char c, size_t n, const char *tail)
{
    size_t h = strlen(head), t = strlen(tail);
    char *s = malloc(h + n + t + 1);
    if (!s)
        return NULL;
    memcpy(s, head, h);
    memset(s + h, c, n);
    memcpy(s + h + n, tail, t + 1);
    return s;
}

static long peak_rss_kb(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss;
}

void test_tree_json_garbage(void)
{
    size_t big = 100u << 20;
    struct {
        const char *head;
        char fill;
        const char *needle;
    } cases[] = {
        {"", 'x', "bare token longer"},
        {"{\"t\": ", '[', "not a JSON object"},
        {"{\"t\": {\"nodes\": {\"a\": {\"x\": ", '[', "nest deeper than 64"},
        {"{\"t\": {\"meta\": ", '[', "nests too deep"},
        {"{\"", 'k', "string longer than"},
        {"", '\x01', "invalid char in json text"},
        {"{\"t\": {\"nodes\": {\"a\": {\"x\": 1", '1', "bare token longer"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *s = repeat(cases[i].head, cases[i].fill, big, "");
        CHECK(s != NULL);
        if (!s)
            return;
        cellar_error err;
        tree_forest *f = NULL;
        cellar_error_clear(&err);
        /* Bounded memory: the reader gives up without copying the garbage
         * (peak RSS, not time: timings belong in bench/). */
        long peak_before = peak_rss_kb();
        int rc = tree_forest_from_json(s, strlen(s), &f, &err);
        long grown_kb = peak_rss_kb() - peak_before;
        CHECK_EQ(rc, CELLAR_EFORMAT);
        CHECK(f == NULL);
        CHECK(grown_kb < 64 * 1024);
        if (!strstr(err.detail, cases[i].needle)) {
            fprintf(stderr, "case %zu: \"%s\" lacks \"%s\"\n", i, err.detail, cases[i].needle);
            CHECK(0);
        }
        free(s);
    }
}

/* A path of 200000 nodes (depth 199999), written as JSON: no recursion. */
void test_tree_caterpillar(void)
{
    enum { N = 200000 };
    size_t cap = (size_t)N * 128 + 64, len = 0;
    char *s = malloc(cap);
    CHECK(s != NULL);
    if (!s)
        return;
    len += (size_t)snprintf(s + len, cap - len, "{\"cat\": {\"edges\": {");
    for (int i = 0; i < N; i++) {
        if (i + 1 < N)
            len += (size_t)snprintf(s + len, cap - len, "%s\"n%d\": {\"n%d\": {\"length\": 0.5}}",
                                    i ? ", " : "", i, i + 1);
        else
            len += (size_t)snprintf(s + len, cap - len, ", \"n%d\": {}", i);
    }
    len += (size_t)snprintf(s + len, cap - len, "}, \"nodes\": {");
    for (int i = 0; i < N; i++)
        len += (size_t)snprintf(s + len, cap - len, "%s\"n%d\": {\"i\": %d}", i ? ", " : "", i, i);
    len += (size_t)snprintf(s + len, cap - len, "}}}");
    cellar_error err;
    tree_forest *f = NULL;
    cellar_error_clear(&err);
    CHECK_EQ(tree_forest_from_json(s, len, &f, &err), 0);
    free(s);
    if (!f) {
        fprintf(stderr, "%s\n", err.detail);
        return;
    }
    const tree_index *t = tree_forest_get(f, "cat");
    CHECK_EQ(tree_index_node_count(t), N);
    CHECK_EQ(tree_index_max_depth(t), N - 1);
    int32_t last = node(t, "n199999"), mid = node(t, "n100000");
    CHECK_EQ(tree_index_depth(t, last), N - 1);
    CHECK_DBL_EQ(tree_index_x(t, last), (N - 1) * 0.5);
    CHECK_EQ(tree_index_leaf_count(t, 0), 1);
    CHECK_EQ(tree_index_subtree_end(t, 0), N);
    CHECK_EQ(lca_of(t, "n199999", "n100000", NULL), mid);
    CHECK_EQ(lca_of(t, "n199999", "n5", "n77777"), node(t, "n5"));
    CHECK_STR_EQ(tree_index_attrs(t, last), "{\"i\":199999}");
    arena *a = arena_new();
    int32_t *path, n;
    int trunc;
    CHECK_EQ(tree_index_ancestors(t, last, a, &path, &n, &err), 0);
    CHECK_EQ(n, N);
    CHECK_EQ(path[0], 0);
    CHECK_EQ(path[N - 1], last);
    CHECK_EQ(tree_index_subtree(t, 0, -1, 10, a, &path, &n, &trunc, &err), 0);
    CHECK_EQ(n, 10);
    CHECK_EQ(trunc, 1);
    tree_viewport box = {0, 1e9, -1, 1, 50};
    tree_view_entry *e;
    CHECK_EQ(tree_index_viewport(t, &box, a, &e, &n, &trunc, &err), 0);
    CHECK_EQ(n, 50);
    CHECK_EQ(trunc, 1);
    CHECK_EQ(e[49].collapsed, 1);
    CHECK_EQ(e[0].node, 0);
    arena_free(a);
    tree_forest_free(f);
}

/* LCA against walking up, on a random tree big enough for the block RMQ. */
void test_tree_lca_random(void)
{
    enum { N = 5000 };
    cellar_error err;
    tree_builder *b = tree_builder_new("random");
    char id[16], pid[16];
    unsigned seed = 12345;
    int32_t parent[N];
    for (int i = 0; i < N; i++) {
        snprintf(id, sizeof id, "v%d", i);
        CHECK_EQ(tree_builder_add_node(b, id, NULL, &err), 0);
        if (i == 0) {
            parent[i] = -1;
            continue;
        }
        seed = seed * 1103515245u + 12345u;
        /* Mostly recent parents, so the tree is deep as well as wide. */
        int p = i - 1 - (int)((seed >> 8) % (unsigned)(i < 8 ? i : 8));
        parent[i] = p;
        snprintf(pid, sizeof pid, "v%d", p);
        CHECK_EQ(tree_builder_add_edge(b, pid, id, NULL, &err), 0);
    }
    tree_index *t = NULL;
    CHECK_EQ(tree_builder_finish(b, &t, &err), 0);
    if (!t)
        return;
    for (int k = 0; k < 3000; k++) {
        seed = seed * 1103515245u + 12345u;
        int32_t u = (int32_t)((seed >> 4) % N);
        seed = seed * 1103515245u + 12345u;
        int32_t v = (int32_t)((seed >> 4) % N);
        /* Naive: mark u's ancestors, walk up from v. */
        int32_t x = u, y = v, du = tree_index_depth(t, u), dv = tree_index_depth(t, v);
        while (du > dv) {
            x = parent[x];
            du--;
        }
        while (dv > du) {
            y = parent[y];
            dv--;
        }
        while (x != y) {
            x = parent[x];
            y = parent[y];
        }
        int32_t pair[2] = {u, v};
        CHECK_EQ(tree_index_lca(t, pair, 2), x);
        CHECK_EQ(tree_index_is_ancestor(t, x, u), 1);
    }
    tree_index_free(t);
}

void test_tree_builder_columns(void)
{
    cellar_error err;
    tree_builder *b = tree_builder_new("obst/t1");
    const char *ids[4] = {"r", "a", "b", "c"};
    const int64_t iv[4] = {1, 2, 3, -4};
    const double fv[4] = {1.5, 0.1, NAN, 2};
    const uint8_t bv[4] = {1, 0, 1, 0};
    const char *jv[4] = {"null", "", "[1, {\"k\": \"v\"}]", "\"s\""};
    tree_attr_column cols[4] = {{"i", TREE_COLUMN_INT64, iv},
                                {"f", TREE_COLUMN_FLOAT64, fv},
                                {"b", TREE_COLUMN_BOOL, bv},
                                {"j", TREE_COLUMN_JSON, jv}};
    CHECK_EQ(tree_builder_add_nodes(b, 4, ids, 4, cols, &err), 0);
    const char *src[3] = {"r", "r", "a"}, *dst[3] = {"a", "b", "c"};
    const double len[3] = {1, 2, 0.25};
    const char *w[3] = {"", "null", "7"};
    tree_attr_column ecols[2] = {{"length", TREE_COLUMN_FLOAT64, len},
                                 {"w", TREE_COLUMN_JSON, w}};
    CHECK_EQ(tree_builder_add_edges(b, 3, src, dst, 2, ecols, &err), 0);
    tree_index *t = NULL;
    CHECK_EQ(tree_builder_finish(b, &t, &err), 0);
    if (!t)
        return;
    /* Absent ("") is no key; "null" is a null value. */
    CHECK_STR_EQ(tree_index_attrs(t, 0), "{\"i\":1,\"f\":1.5,\"b\":true,\"j\":null}");
    CHECK_STR_EQ(tree_index_attrs(t, 1), "{\"i\":2,\"f\":0.1,\"b\":false}");
    CHECK_STR_EQ(tree_index_attrs(t, 2), "{\"i\":3,\"f\":null,\"b\":true,\"j\":[1,{\"k\":\"v\"}]}");
    CHECK_STR_EQ(tree_index_attrs(t, 3), "{\"i\":-4,\"f\":2.0,\"b\":false,\"j\":\"s\"}");
    CHECK_STR_EQ(tree_index_edge_attrs(t, 1), "{\"length\":1.0}");
    CHECK_STR_EQ(tree_index_edge_attrs(t, 2), "{\"length\":2.0,\"w\":null}");
    CHECK_STR_EQ(tree_index_edge_attrs(t, 3), "{\"length\":0.25,\"w\":7}");
    CHECK(tree_index_uses_length(t));
    CHECK_DBL_EQ(tree_index_x(t, 3), 1.25);
    CHECK_DBL_EQ(tree_index_branch_length(t, 2), 2);
    tree_index_free(t);

    /* Row API: attributes are normalized; bad ones are refused by name. */
    b = tree_builder_new("obst/x");
    CHECK_EQ(tree_builder_add_node(b, "p", "{ \"a\" : [ 1 , 2.50 ], \"n\": null }", &err), 0);
    CHECK_EQ(tree_builder_add_node(b, "q", "{}", &err), 0);
    cellar_error_clear(&err);
    CHECK_EQ(tree_builder_add_node(b, "z", "[1]", &err), CELLAR_EFORMAT);
    CHECK(strstr(err.detail, "node 'z' of obst/x") != NULL);
    cellar_error_clear(&err);
    CHECK_EQ(tree_builder_add_node(b, "z", "{\"a\": ", &err), CELLAR_EFORMAT);
    CHECK(strstr(err.detail, "node 'z'") != NULL);
    cellar_error_clear(&err);
    CHECK_EQ(tree_builder_add_node(b, "p", NULL, &err), CELLAR_EFORMAT);
    CHECK(strstr(err.detail, "listed twice") != NULL);
    CHECK_EQ(tree_builder_add_edge(b, "p", "q", "{\"length\": 3}", &err), 0);
    t = NULL;
    CHECK_EQ(tree_builder_finish(b, &t, &err), 0);
    if (!t)
        return;
    CHECK_STR_EQ(tree_index_attrs(t, 0), "{\"a\":[1,2.50],\"n\":null}");
    CHECK_STR_EQ(tree_index_attrs(t, 1), "{}");
    CHECK_DBL_EQ(tree_index_branch_length(t, 1), 3);
    tree_index_free(t);

    /* A bad JSON cell names its column and row. */
    b = tree_builder_new("obst/y");
    const char *bad[2] = {"1", "{oops"};
    tree_attr_column bc = {"meta", TREE_COLUMN_JSON, bad};
    cellar_error_clear(&err);
    CHECK_EQ(tree_builder_add_nodes(b, 2, ids, 1, &bc, &err), CELLAR_EFORMAT);
    CHECK(strstr(err.detail, "attribute column 'meta'") != NULL);
    CHECK(strstr(err.detail, "node 'a' of obst/y") != NULL);
    tree_builder_free(b);
}

/* Feeding the JSON in small pieces gives the same forest. */
void test_tree_json_chunked(void)
{
    cellar_error err;
    cellar_error_clear(&err);
    tree_json_reader *r = tree_json_reader_new();
    size_t len = strlen(sample_json);
    for (size_t i = 0; i < len; i += 3) {
        size_t n = len - i < 3 ? len - i : 3;
        CHECK_EQ(tree_json_reader_feed(r, sample_json + i, n, &err), 0);
    }
    tree_forest *f = NULL;
    CHECK_EQ(tree_json_reader_finish(r, &f, &err), 0);
    tree_json_reader_free(r);
    if (!f)
        return;
    const tree_index *t = tree_forest_get(f, "t1");
    CHECK_STR_EQ(tree_index_attrs(t, 0),
                 "{\"i\":1,\"f\":1.5,\"b\":true,\"s\":\"x\",\"l\":[1,2],\"d\":{\"a\":{\"b\":1}},"
                 "\"n\":null}");
    CHECK_STR_EQ(tree_index_edge_attrs(t, 4), "{\"length\":3.0,\"w\":null}");
    CHECK(tree_index_uses_length(t));
    tree_forest_free(f);
}

/* The obst string treedata 0.4.0 wrote for a tree with integer and
 * non-ASCII node ids, NaN and Infinity lengths, and an empty second tree. */
void test_tree_json_treedata_quirks(void)
{
    static const char json[] =
        "{\"t\": {\"edges\": {\"0\": {\"1\": {\"length\": NaN}, \"2\": {\"length\": Infinity}, "
        "\"\\u00e9\": {\"length\": 1.5}}, \"1\": {}, \"2\": {}, \"\\u00e9\": {}}, \"nodes\": "
        "{\"0\": {\"x\": NaN}, \"1\": {}, \"2\": {}, \"\\u00e9\": {}}}, \"5\": {\"edges\": {}, "
        "\"nodes\": {}}}";
    cellar_error err;
    tree_forest *f = parse(json, &err);
    CHECK(f != NULL);
    if (!f)
        return;
    CHECK_EQ(tree_forest_count(f), 2);
    CHECK_STR_EQ(tree_forest_key(f, 1), "5");
    const tree_index *t = tree_forest_get(f, "t");
    CHECK_EQ(node(t, "\xc3\xa9"), 3);
    CHECK_STR_EQ(tree_index_id(t, 3), "\xc3\xa9");
    CHECK_EQ(tree_index_parent(t, 3), 0);
    CHECK_DBL_EQ(tree_index_branch_length(t, 3), 1.5);
    CHECK(isnan(tree_index_branch_length(t, 2)));
    CHECK_STR_EQ(tree_index_edge_attrs(t, 2), "{\"length\":null}");
    CHECK(!tree_index_uses_length(t));
    CHECK_DBL_EQ(tree_index_x(t, 3), 1);
    CHECK_EQ(tree_index_node_count(tree_forest_get(f, "5")), 0);
    tree_forest_free(f);
}

/* Nodes and edges are added in batches: an error among the queued ones is
 * still the one reported when a later one (bad attributes, bad JSON) fails
 * the parse, and NaN / -Infinity cut by the end of a piece still become
 * null, in any piece size. */
void test_tree_json_batched_errors(void)
{
    static const char dup_then_bad[] =
        "{\"t\": {\"nodes\": {\"a\": {}, \"b\": {}, \"a\": {}, \"c\": 5}}}";
    static const char dup_then_syntax[] = "{\"t\": {\"nodes\": {\"a\": {}, \"a\": {}, ]";
    static const char lengths[] =
        "{\"t\": {\"edges\": {\"r\": {\"a\": {\"length\": NaN}, \"b\": {\"length\": -Infinity},"
        " \"c\": {\"length\": 12.5e-1}}}, \"nodes\": {\"r\": {}, \"a\": {}, \"b\": {}, "
        "\"c\": {}}}}";
    cellar_error err;
    CHECK(parse(dup_then_bad, &err) == NULL);
    CHECK(strstr(err.detail, "'a' is listed twice") != NULL);
    CHECK(parse(dup_then_syntax, &err) == NULL);
    CHECK(strstr(err.detail, "'a' is listed twice") != NULL);
    size_t len = strlen(lengths);
    for (size_t step = 1; step <= 9; step++) {
        cellar_error_clear(&err);
        tree_json_reader *r = tree_json_reader_new();
        for (size_t i = 0; i < len; i += step)
            CHECK_EQ(tree_json_reader_feed(r, lengths + i, len - i < step ? len - i : step, &err),
                     0);
        tree_forest *f = NULL;
        CHECK_EQ(tree_json_reader_finish(r, &f, &err), 0);
        tree_json_reader_free(r);
        const tree_index *t = f ? tree_forest_get(f, "t") : NULL;
        CHECK(t != NULL);
        if (t) {
            CHECK_STR_EQ(tree_index_edge_attrs(t, node(t, "a")), "{\"length\":null}");
            CHECK_STR_EQ(tree_index_edge_attrs(t, node(t, "b")), "{\"length\":null}");
            CHECK_DBL_EQ(tree_index_branch_length(t, node(t, "c")), 1.25);
        }
        tree_forest_free(f);
    }
}

/* Edge lengths are read without strtod when they are plain decimals: every
 * form must read exactly as strtod reads it. */
void test_tree_json_lengths_exact(void)
{
    enum { N = 3000 };
    static const char *const fixed[] = {"0", "-0", "-0.0", "0.1", "0.3", "1e-3", "2.5E+2",
                                        "123456789012345", "1234567890123456",
                                        "0.000000000000001", "9007199254740993",
                                        "-17.000", "0.0262", "4.35"};
    size_t nf = sizeof fixed / sizeof fixed[0];
    char(*text)[40] = calloc(N, sizeof *text);
    char *json = malloc((size_t)N * 80 + 200);
    CHECK(text && json);
    if (!text || !json)
        goto done;
    uint64_t seed = 12345;
    size_t at = (size_t)sprintf(json, "{\"t\": {\"edges\": {\"r\": {");
    for (int i = 0; i < N; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        int digits = 1 + (int)((seed >> 33) % 17), point = (int)((seed >> 20) % (digits + 1));
        if ((size_t)i < nf) {
            snprintf(text[i], sizeof text[i], "%s", fixed[i]);
        } else {
            size_t k = 0;
            if (seed & 1)
                text[i][k++] = '-';
            uint64_t r = seed;
            for (int d = 0; d < digits; d++) {
                if (d == point && d > 0)
                    text[i][k++] = '.';
                text[i][k++] = (char)('0' + (d == 0 && point != 1 ? 1 + r % 9 : r % 10));
                r = r / 10 ^ (r << 7);
            }
            text[i][k] = '\0';
        }
        at += (size_t)sprintf(json + at, "%s\"c%d\": {\"length\": %s}", i ? ", " : "", i,
                              text[i]);
    }
    at += (size_t)sprintf(json + at, "}}, \"nodes\": {\"r\": {}");
    for (int i = 0; i < N; i++)
        at += (size_t)sprintf(json + at, ", \"c%d\": {}", i);
    sprintf(json + at, "}}}");
    cellar_error err;
    tree_forest *f = parse(json, &err);
    CHECK(f != NULL);
    if (!f)
        fprintf(stderr, "%s\n", err.detail);
    const tree_index *t = f ? tree_forest_get(f, "t") : NULL;
    for (int i = 0; t && i < N; i++) {
        char id[16];
        snprintf(id, sizeof id, "c%d", i);
        double want = strtod(text[i], NULL), got = tree_index_branch_length(t, node(t, id));
        if (memcmp(&want, &got, sizeof want) != 0) {
            fprintf(stderr, "length %s: %.17g != strtod %.17g\n", text[i], got, want);
            unit_failures++;
        }
    }
    tree_forest_free(f);
done:
    free(text);
    free(json);
}

/* Parses json with a legacy reader of `axis` fed in pieces of `piece`
 * bytes; the forest and the settings in *out. */
static int legacy_parse(const char *json, const char *axis, size_t piece, tree_forest **forest,
                        tree_json_legacy *out, cellar_error *err)
{
    tree_json_reader *r = tree_json_reader_new_legacy(axis);
    CHECK(r != NULL);
    int rc = 0;
    size_t n = strlen(json);
    for (size_t i = 0; !rc && i < n; i += piece)
        rc = tree_json_reader_feed(r, json + i, n - i < piece ? n - i : piece, err);
    if (!rc)
        rc = tree_json_reader_finish(r, forest, err);
    memset(out, 0, sizeof *out);
    if (!rc)
        tree_json_reader_legacy(r, out);
    tree_json_reader_free(r);
    return rc;
}

/* treedata 0.0.x's raw.treedata: the trees of one member, the settings
 * beside them, everything else skipped. */
void test_tree_json_legacy_member(void)
{
    static const char *doc =
        "{\"extra\": {\"obst\": [1, {\"x\": null}]}, \"vart\": {\"v\": {\"nodes\": {\"g\": {}}}},"
        " \"label\": \"tree\", \"obst\": {\"t1\": {\"edges\": {\"r\": {\"a\": {\"length\": 1.5}},"
        " \"a\": {}}, \"nodes\": {\"r\": {}, \"a\": {\"d\": 2}}}, \"t2\": {}},"
        " \"allow_overlap\": 0, \"more\": \"text\"}";
    for (size_t piece = 1; piece <= 64; piece *= 4) {
        tree_forest *f = NULL;
        tree_json_legacy s;
        cellar_error err;
        cellar_error_clear(&err);
        CHECK_EQ(legacy_parse(doc, "obst", piece, &f, &s, &err), 0);
        CHECK_EQ(tree_forest_count(f), 2);
        CHECK_STR_EQ(tree_forest_key(f, 0), "t1");
        CHECK_EQ(tree_index_node_count(tree_forest_tree(f, 0)), 2);
        CHECK_EQ(s.has_trees, 1);
        CHECK_EQ(s.has_label, 1);
        CHECK_STR_EQ(s.label, "tree");
        CHECK_EQ(s.has_allow_overlap, 1);
        CHECK_EQ(s.allow_overlap, 0);
        free(s.label);
        tree_forest_free(f);
        f = NULL;
        CHECK_EQ(legacy_parse(doc, "vart", piece, &f, &s, &err), 0);
        CHECK_EQ(tree_forest_count(f), 1);
        free(s.label);
        tree_forest_free(f);
    }
    /* no member: an empty forest; label null; allow_overlap true */
    tree_forest *f = NULL;
    tree_json_legacy s;
    cellar_error err;
    cellar_error_clear(&err);
    CHECK_EQ(legacy_parse("{\"label\": null, \"allow_overlap\": true}", "obst", 7, &f, &s, &err),
             0);
    CHECK_EQ(tree_forest_count(f), 0);
    CHECK_EQ(s.has_trees, 0);
    CHECK_EQ(s.has_label, 1);
    CHECK(s.label == NULL);
    CHECK_EQ(s.allow_overlap, 1);
    tree_forest_free(f);
    f = NULL;
    CHECK_EQ(legacy_parse("{\"obst\": {}}", NULL, 3, &f, &s, &err), 0);
    CHECK_EQ(s.has_trees, 0);
    CHECK_EQ(s.has_label, 0);
    tree_forest_free(f);
    /* not an object, a member of trees that is not, truncated */
    static const char *const bad[] = {"[1]", "\"x\"", "{\"obst\": 5}", "{\"obst\": {\"t\": 1}}",
                                      "{\"obst\": {}", "{\"label\": \"a\""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        f = NULL;
        cellar_error_clear(&err);
        CHECK_EQ(legacy_parse(bad[i], "obst", 2, &f, &s, &err), CELLAR_EFORMAT);
        CHECK(f == NULL);
    }
}
