/* storage/trees/trees.c over the in-memory backend, and api/encode/newick_out.c. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "api/encode/newick_out.h"
#include "storage/trees/tree_json.h"
#include "storage/trees/trees.h"
#include "tests/unit/mem_node.h"
#include "tests/unit/unit.h"

/* obst/t1 in treedata's columnar layout: r -> a -> {c0, c1}, r -> b. */
static node *columnar_store(void)
{
    node *root = mem_root();
    node *obst = mem_group(root, "obst");
    node *t = mem_group(obst, "t1");
    const char *ids[5] = {"r", "a", "b", "c0", "c1"};
    mem_strings1(t, "nodes", 5, ids);
    const char *pairs[8] = {"r", "a", "r", "b", "a", "c0", "a", "c1"};
    const int64_t eshape[2] = {4, 2};
    mem_strings(t, "edges", 2, eshape, pairs);
    node *na = mem_group(t, "node_attrs");
    const int32_t i32[5] = {1, 2, 3, 4, 5};
    mem_array1(na, "i", DT_INT32, 5, i32);
    const float f32[5] = {0.5f, 1.5f, 2.5f, -1.0f, 0.0f};
    mem_array1(na, "f", DT_FLOAT32, 5, f32);
    const uint8_t bo[5] = {1, 0, 1, 0, 1};
    mem_array1(na, "bo", DT_BOOL, 5, bo);
    const uint64_t big[5] = {1, 2, 3, 4, UINT64_MAX};
    mem_array1(na, "u", DT_UINT64, 5, big);
    const char *js[5] = {"\"hi\"", "null", "", "[1, 2]", "{\"k\": {\"z\": 1}}"};
    mem_strings1(na, "s", 5, js);
    node *ea = mem_group(t, "edge_attrs");
    const double len[4] = {1.0, 2.0, 0.25, 0.5};
    mem_array1(ea, "length", DT_FLOAT64, 4, len);
    /* an array next to the tree groups is skipped, as treedata does */
    mem_strings1(obst, "stray", 1, ids);
    return root;
}

void test_trees_columnar(void)
{
    node *root = columnar_store();
    trees_loaded *t = NULL;
    cellar_error err;
    cellar_error_clear(&err);
    CHECK_EQ(trees_load(root, "obst", 0, &t, &err), 0);
    if (!t) {
        fprintf(stderr, "%s\n", err.detail);
        node_tree_free(root);
        return;
    }
    CHECK_EQ(tree_forest_count(t->forest), 1);
    const tree_index *ti = tree_forest_get(t->forest, "t1");
    CHECK(ti != NULL);
    if (ti) {
        CHECK_EQ(tree_index_node_count(ti), 5);
        CHECK_EQ(tree_index_parent(ti, 3), 1);
        CHECK_STR_EQ(tree_index_attrs(ti, 0), "{\"i\":1,\"f\":0.5,\"bo\":true,\"u\":1,\"s\":\"hi\"}");
        CHECK_STR_EQ(tree_index_attrs(ti, 1), "{\"i\":2,\"f\":1.5,\"bo\":false,\"u\":2,\"s\":null}");
        /* "" is absent */
        CHECK_STR_EQ(tree_index_attrs(ti, 2), "{\"i\":3,\"f\":2.5,\"bo\":true,\"u\":3}");
        /* a uint64 past INT64_MAX becomes JSON text, keeping its value */
        CHECK(strstr(tree_index_attrs(ti, 4), "\"u\":18446744073709551615") != NULL);
        CHECK_DBL_EQ(tree_index_branch_length(ti, 3), 0.25);
        CHECK_EQ(t->sizes[0].id_bytes, 1 + 1 + 1 + 2 + 2);
        CHECK(t->bytes >= tree_index_bytes(ti));
    }
    trees_free(t);
    /* vart is absent: an empty forest */
    CHECK_EQ(trees_load(root, "vart", 0, &t, &err), 0);
    CHECK(t && tree_forest_count(t->forest) == 0);
    trees_free(t);
    CHECK_EQ(trees_load(root, "obsm", 0, &t, &err), CELLAR_EINVAL);
    node_tree_free(root);
}

void test_trees_json_scalar_and_errors(void)
{
    node *root = mem_root();
    const char *good = "{\"t\": {\"edges\": {\"r\": {\"a\": {\"length\": 2}}}, "
                       "\"nodes\": {\"r\": {}, \"a\": {\"x\": null}}}}";
    mem_strings(root, "obst", 0, NULL, &good);
    const char *cycle = "{\"c\": {\"edges\": {\"p\": {\"q\": {}}, \"q\": {\"p\": {}}}, "
                        "\"nodes\": {\"p\": {}, \"q\": {}}}}";
    mem_strings(root, "vart", 0, NULL, &cycle);
    trees_loaded *t = NULL;
    cellar_error err;
    cellar_error_clear(&err);
    CHECK_EQ(trees_load(root, "obst", 0, &t, &err), 0);
    if (t) {
        const tree_index *ti = tree_forest_get(t->forest, "t");
        CHECK(ti && tree_index_node_count(ti) == 2);
        CHECK(ti && !strcmp(tree_index_attrs(ti, 1), "{\"x\":null}"));
    }
    trees_free(t);
    cellar_error_clear(&err);
    CHECK_EQ(trees_load(root, "vart", 0, &t, &err), CELLAR_EFORMAT);
    CHECK(t == NULL);
    CHECK(strncmp(err.detail, "vart: ", 6) == 0);
    CHECK(strstr(err.detail, "'p'") || strstr(err.detail, "'q'"));
    node_tree_free(root);

    /* columnar: an edge to a node that is not listed, and a bad column */
    root = mem_root();
    node *tg = mem_group(mem_group(root, "obst"), "bad");
    const char *ids[2] = {"r", "a"};
    mem_strings1(tg, "nodes", 2, ids);
    const char *pairs[2] = {"r", "ghost"};
    const int64_t eshape[2] = {1, 2};
    mem_strings(tg, "edges", 2, eshape, pairs);
    cellar_error_clear(&err);
    CHECK_EQ(trees_load(root, "obst", 0, &t, &err), CELLAR_EFORMAT);
    CHECK(strstr(err.detail, "ghost") != NULL);
    node *na = mem_group(tg, "node_attrs");
    const double three[3] = {1, 2, 3};
    mem_array1(na, "wrong_length", DT_FLOAT64, 3, three);
    cellar_error_clear(&err);
    CHECK_EQ(trees_load(root, "obst", 0, &t, &err), CELLAR_EFORMAT);
    CHECK(strstr(err.detail, "wrong_length") != NULL);
    node_tree_free(root);
}

void test_trees_json_trailing_bytes(void)
{
    /* A string opened after the document and never closed is trailing
     * bytes too (yajl let it pass; found by tree_json_fuzz). */
    static const char *const bad[] = {"{\"T\": {}}\": {}}:+Na^+}", "{\"t\": {}} \"x",
                                      "{} \"\\", "{}, \"t\": 2"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        tree_forest *f = NULL;
        cellar_error err;
        cellar_error_clear(&err);
        CHECK_EQ(tree_forest_from_json(bad[i], strlen(bad[i]), &f, &err), CELLAR_EFORMAT);
        CHECK(f == NULL && err.detail[0]);
        tree_forest_free(f);
    }
}

static tree_index *newick_sample(void)
{
    tree_builder *b = tree_builder_new("t");
    cellar_error err;
    tree_index *t = NULL;
    tree_builder_add_edge(b, "42", "a b", "{\"length\": 1.5, \"w\": 3}", &err);
    tree_builder_add_edge(b, "42", "it's", "{\"length\": 2}", &err);
    tree_builder_add_edge(b, "it's", "x/y", "{\"w\": \"no\"}", &err);
    tree_builder_add_edge(b, "it's", "7", NULL, &err);
    const char *ids[5] = {"42", "a b", "it's", "x/y", "7"};
    for (int i = 0; i < 5; i++)
        tree_builder_add_node(b, ids[i], NULL, &err);
    tree_builder_add_node(b, "lone", NULL, &err);
    tree_builder_finish(b, &t, &err);
    return t;
}

void test_newick_out(void)
{
    tree_index *t = newick_sample();
    CHECK(t != NULL);
    if (!t)
        return;
    cellar_error err;
    buf b = {0};
    CHECK_EQ(newick_write(&b, t, -1, newick_index_length, NULL, 0, &err), 0);
    CHECK_STR_EQ(b.data, "('a b':1.5,(x/y,7)'it''s':2.0)'42';\nlone;\n");
    b.len = 0;
    CHECK_EQ(newick_write(&b, t, 2, NULL, NULL, 0, &err), 0);
    CHECK_STR_EQ(b.data, "(x/y,7)'it''s';\n");
    b.len = 0;
    cellar_error_clear(&err);
    CHECK_EQ(newick_write(&b, t, -1, newick_index_length, NULL, 8, &err), CELLAR_ETOOBIG);
    buf_destroy(&b);
    tree_index_free(t);
}

void test_newick_caterpillar(void)
{
    /* 200001 nodes, 100000 levels deep: written without recursion */
    enum { N = 100000 };
    tree_builder *b = tree_builder_new("cat");
    cellar_error err;
    char s[32], d[32];
    for (int i = 0; i < N; i++) {
        snprintf(s, sizeof s, "n%d", i);
        snprintf(d, sizeof d, "n%d", i + 1);
        tree_builder_add_edge(b, s, d, NULL, &err);
        snprintf(d, sizeof d, "l%d", i);
        tree_builder_add_edge(b, s, d, NULL, &err);
    }
    for (int i = 0; i <= N; i++) {
        snprintf(s, sizeof s, "n%d", i);
        tree_builder_add_node(b, s, NULL, &err);
        if (i < N) {
            snprintf(s, sizeof s, "l%d", i);
            tree_builder_add_node(b, s, NULL, &err);
        }
    }
    tree_index *t = NULL;
    CHECK_EQ(tree_builder_finish(b, &t, &err), 0);
    if (!t)
        return;
    buf out = {0};
    CHECK_EQ(newick_write(&out, t, -1, NULL, NULL, 0, &err), 0);
    size_t open = 0, close = 0;
    for (size_t i = 0; i < out.len; i++) {
        open += out.data[i] == '(';
        close += out.data[i] == ')';
    }
    CHECK_EQ(open, N);
    CHECK_EQ(close, N);
    CHECK(strstr(out.data, ")n0;\n") != NULL);
    buf_destroy(&out);
    tree_index_free(t);
}
