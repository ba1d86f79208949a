/* Degenerate trees as a damaged or hostile file holds them: empty ids, long
 * chains, cycles, duplicates and many trees.  Each gives a correct tree or
 * CELLAR_EFORMAT naming what is wrong; none is undefined behaviour (the
 * sanitizer build runs these). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "storage/trees/tree_index.h"
#include "storage/trees/tree_json.h"
#include "tests/unit/unit.h"

static tree_forest *parse_text(const char *json, size_t len, cellar_error *err)
{
    tree_forest *f = NULL;
    cellar_error_clear(err);
    if (tree_forest_from_json(json, len, &f, err) < 0)
        return NULL;
    return f;
}

static void expect_format_error(const char *json, const char *needle)
{
    cellar_error err;
    tree_forest *f = parse_text(json, strlen(json), &err);
    CHECK(f == NULL);
    tree_forest_free(f);
    CHECK_EQ(err.code, CELLAR_EFORMAT);
    if (needle && !strstr(err.detail, needle)) {
        fprintf(stderr, "detail \"%s\" lacks \"%s\"\n", err.detail, needle);
        CHECK(0);
    }
}

void test_tree_json_empty_ids(void)
{
    /* The id "" as root, as leaf, as the only node and as a tree key (the
     * first one passed NULL to memcpy). */
    cellar_error err;
    const char *json = "{\"\": {\"edges\": {\"\": {\"b\": {\"length\": 2}}, \"b\": {\"c\": {}}}, "
                       "\"nodes\": {\"\": {\"x\": 1}, \"b\": {}, \"c\": {}}}, "
                       "\"u\": {\"edges\": {\"r\": {\"\": {}}}, \"nodes\": {\"r\": {}, \"\": {}}}, "
                       "\"v\": {\"nodes\": {\"\": {}}}}";
    tree_forest *f = parse_text(json, strlen(json), &err);
    CHECK(f != NULL);
    if (!f) {
        fprintf(stderr, "%s\n", err.detail);
        return;
    }
    CHECK_EQ(tree_forest_count(f), 3);
    const tree_index *t = tree_forest_get(f, "");
    CHECK(t != NULL);
    if (t) {
        int32_t root = tree_index_find(t, "", 0), b = tree_index_find(t, "b", 1);
        CHECK(root >= 0);
        CHECK_STR_EQ(tree_index_id(t, root), "");
        CHECK_STR_EQ(tree_index_attrs(t, root), "{\"x\":1}");
        CHECK_EQ(tree_index_parent(t, b), root);
        CHECK_EQ(tree_index_max_depth(t), 2);
        CHECK_DBL_EQ(tree_index_branch_length(t, b), 2);
    }
    t = tree_forest_get(f, "u");
    CHECK(t != NULL);
    if (t) {
        int32_t leaf = tree_index_find(t, "", 0);
        CHECK_EQ(tree_index_parent(t, leaf), tree_index_find(t, "r", 1));
        CHECK_EQ(tree_index_leaf_count(t, tree_index_find(t, "r", 1)), 1);
    }
    t = tree_forest_get(f, "v");
    CHECK(t != NULL);
    if (t)
        CHECK_EQ(tree_index_node_count(t), 1);
    tree_forest_free(f);

    expect_format_error("{\"t\": {\"nodes\": {\"\": {}, \"\": {}}}}", "node '' is listed twice");
    expect_format_error("{\"t\": {\"nodes\": {\"\": {}}, \"edges\": {\"\": {\"\": {}}}}}",
                        "edge to itself");
    expect_format_error("{\"t\": {\"nodes\": {\"a\": {}}, \"edges\": {\"a\": {\"\": {}}}}}",
                        "node '' appears in an edge but is not listed in nodes");
    expect_format_error("{\"\": {}, \"\": {}}", "appears twice");
}

void test_tree_builder_empty_ids(void)
{
    /* The columnar layout: NULL and "" are both the id "", declared once. */
    const char *ids[] = {"", "a", "b"}, *src[] = {NULL, ""}, *dst[] = {"a", "b"};
    tree_builder *b = tree_builder_new("obst/t");
    cellar_error err;
    cellar_error_clear(&err);
    CHECK_EQ(tree_builder_add_nodes(b, 3, ids, 0, NULL, &err), 0);
    CHECK_EQ(tree_builder_add_edges(b, 2, src, dst, 0, NULL, &err), 0);
    /* Nothing is added for counts of zero or below. */
    CHECK_EQ(tree_builder_add_nodes(b, 0, NULL, 0, NULL, &err), 0);
    CHECK_EQ(tree_builder_add_nodes(b, -5, NULL, 0, NULL, &err), 0);
    CHECK_EQ(tree_builder_add_edges(b, INT64_MIN, NULL, NULL, 0, NULL, &err), 0);
    tree_index *t = NULL;
    CHECK_EQ(tree_builder_finish(b, &t, &err), 0);
    if (t) {
        CHECK_EQ(tree_index_node_count(t), 3);
        CHECK_EQ(tree_index_root_count(t), 1);
        CHECK_EQ(tree_index_leaf_total(t), 2);
        CHECK_EQ(tree_index_parent(t, tree_index_find(t, "b", 1)), tree_index_find(t, "", 0));
    }
    tree_index_free(t);

    const char *twice[] = {"", NULL};
    b = tree_builder_new("obst/t");
    cellar_error_clear(&err);
    CHECK_EQ(tree_builder_add_nodes(b, 2, twice, 0, NULL, &err), CELLAR_EFORMAT);
    CHECK(strstr(err.detail, "listed twice") != NULL);
    tree_builder_free(b);
}

/* n nodes "n0".."n{n-1}" whose edges close a ring: every node has a parent,
 * there is no root. */
static char *ring_json(int n, int with_tail)
{
    size_t cap = (size_t)n * 64 + 256, len = 0;
    char *s = malloc(cap);
    if (!s)
        return NULL;
    len += (size_t)snprintf(s + len, cap - len, "{\"t\": {\"edges\": {");
    for (int i = 0; i < n; i++)
        len += (size_t)snprintf(s + len, cap - len, "%s\"n%d\": {\"n%d\": {}}", i ? ", " : "", i,
                                (i + 1) % n);
    if (with_tail)
        len += (size_t)snprintf(s + len, cap - len, ", \"r\": {\"x\": {}}");
    len += (size_t)snprintf(s + len, cap - len, "}, \"nodes\": {");
    for (int i = 0; i < n; i++)
        len += (size_t)snprintf(s + len, cap - len, "%s\"n%d\": {}", i ? ", " : "", i);
    if (with_tail)
        len += (size_t)snprintf(s + len, cap - len, ", \"r\": {}, \"x\": {}");
    snprintf(s + len, cap - len, "}}}");
    return s;
}

void test_tree_json_cycles(void)
{
    /* A ring of 100000 nodes alone, and beside a valid tree: both refused
     * (found without recursion), naming a node of the cycle. */
    for (int tail = 0; tail < 2; tail++) {
        char *s = ring_json(100000, tail);
        CHECK(s != NULL);
        if (!s)
            return;
        expect_format_error(s, "cycle through node 'n");
        free(s);
    }
    /* A cycle under a root: some node has two parents. */
    expect_format_error("{\"t\": {\"nodes\": {\"r\": {}, \"a\": {}, \"b\": {}, \"c\": {}}, "
                        "\"edges\": {\"r\": {\"a\": {}}, \"a\": {\"b\": {}}, \"b\": {\"c\": {}}, "
                        "\"c\": {\"a\": {}}}}}",
                        "two parents");
    /* The same edge twice is a second parent too. */
    expect_format_error("{\"t\": {\"nodes\": {\"a\": {}, \"b\": {}}, \"edges\": {\"a\": {\"b\": "
                        "{}}, \"a\": {\"b\": {}}}}}",
                        "two parents");
}

void test_tree_builder_deep_chain(void)
{
    /* A chain of 500000 nodes through the columnar builder (the JSON path
     * has test_tree_caterpillar): depth from the build, no recursion. */
    enum { N = 500000 };
    char *names = malloc((size_t)N * 8);
    const char **ids = malloc((size_t)N * sizeof *ids);
    CHECK(names && ids);
    if (!names || !ids) {
        free(names);
        free(ids);
        return;
    }
    for (int i = 0; i < N; i++) {
        snprintf(names + (size_t)i * 8, 8, "%d", i);
        ids[i] = names + (size_t)i * 8;
    }
    tree_builder *b = tree_builder_new("obst/chain");
    cellar_error err;
    cellar_error_clear(&err);
    CHECK_EQ(tree_builder_add_nodes(b, N, ids, 0, NULL, &err), 0);
    /* edges i -> i + 1, given from the leaf up */
    for (int i = N - 2; i >= 0 && err.code == 0; i--)
        CHECK_EQ(tree_builder_add_edge(b, ids[i], ids[i + 1], NULL, &err), 0);
    tree_index *t = NULL;
    CHECK_EQ(tree_builder_finish(b, &t, &err), 0);
    if (t) {
        CHECK_EQ(tree_index_max_depth(t), N - 1);
        CHECK_EQ(tree_index_leaf_total(t), 1);
        CHECK_EQ(tree_index_depth(t, tree_index_find(t, "499999", 6)), N - 1);
    }
    tree_index_free(t);
    free(ids);
    free(names);
}

void test_tree_json_many_trees(void)
{
    /* 5000 tree keys, one of them repeated at the end: refused, and the
     * forest built so far is freed (LeakSanitizer). */
    enum { N = 5000 };
    size_t cap = (size_t)N * 48 + 64, len = 0;
    char *s = malloc(cap);
    CHECK(s != NULL);
    if (!s)
        return;
    len += (size_t)snprintf(s + len, cap - len, "{");
    for (int i = 0; i < N; i++)
        len += (size_t)snprintf(s + len, cap - len, "%s\"t%d\": {\"nodes\": {\"\": {}}}",
                                i ? ", " : "", i);
    size_t valid_end = len;
    snprintf(s + len, cap - len, "}");
    cellar_error err;
    tree_forest *f = parse_text(s, len + 1, &err);
    CHECK(f != NULL);
    if (f)
        CHECK_EQ(tree_forest_count(f), N);
    tree_forest_free(f);
    snprintf(s + valid_end, cap - valid_end, ", \"t7\": {}}");
    expect_format_error(s, "tree key 't7' appears twice");
    free(s);
}

void test_tree_json_long_id(void)
{
    /* A 1 MB id: kept whole, shortened only in messages. */
    size_t n = 1u << 20;
    char *s = malloc(n + 128);
    CHECK(s != NULL);
    if (!s)
        return;
    size_t len = (size_t)sprintf(s, "{\"t\": {\"nodes\": {\"");
    memset(s + len, 'k', n);
    len += n;
    len += (size_t)sprintf(s + len, "\": {}, \"a\": {}}, \"edges\": {\"a\": {\"a\": {}}}}}");
    cellar_error err;
    tree_forest *f = parse_text(s, len, &err);
    CHECK(f == NULL);
    CHECK_EQ(err.code, CELLAR_EFORMAT);
    tree_forest_free(f);
    len = (size_t)sprintf(s, "{\"t\": {\"nodes\": {\"");
    memset(s + len, 'k', n);
    len += n;
    len += (size_t)sprintf(s + len, "\": {}}}}");
    f = parse_text(s, len, &err);
    CHECK(f != NULL);
    if (f) {
        const tree_index *t = tree_forest_get(f, "t");
        CHECK_EQ(strlen(tree_index_id(t, 0)), n);
    }
    tree_forest_free(f);
    free(s);
}
