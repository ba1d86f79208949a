/* Fuzz target: the TreeData tree JSON reader (plain, in pieces, and as
 * treedata 0.0.x's raw.treedata member) and the tree index queries.
 *
 * With libFuzzer: cc -DCELLAR_LIBFUZZER -fsanitize=fuzzer,address ...
 * Without it, main() replays every file named on the command line, or every
 * file in the directories named there (e.g. tests/fuzz/corpus/tree_json). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "tests/fuzz/fuzz.h"
#include "common/arena.h"
#include "common/error.h"
#include "storage/trees/tree_index.h"
#include "storage/trees/tree_json.h"

static void check_tree(const tree_index *t)
{
    int32_t n = tree_index_node_count(t);
    int32_t leaves = 0;
    for (int32_t v = 0; v < n; v++) {
        const char *id = tree_index_id(t, v);
        MUST(tree_index_find(t, id, strlen(id)) == v);
        MUST(tree_index_node_at(t, tree_index_preorder(t, v)) == v);
        int32_t p = tree_index_parent(t, v);
        if (p >= 0) {
            MUST(tree_index_depth(t, v) == tree_index_depth(t, p) + 1);
            MUST(tree_index_is_ancestor(t, p, v));
            MUST(tree_index_edge_attrs(t, v) != NULL);
        } else {
            MUST(tree_index_depth(t, v) == 0);
        }
        int32_t nc;
        tree_index_children(t, v, &nc);
        leaves += nc == 0;
        MUST(tree_index_leaf_count(t, v) >= 1);
        MUST(tree_index_attrs(t, v)[0] == '{');
    }
    MUST(leaves == tree_index_leaf_total(t));
    arena *a = arena_new();
    MUST(a != NULL);
    cellar_error err;
    for (int32_t v = 0; v + 1 < n && v < 64; v++) {
        int32_t pair[2] = {v, n - 1 - v};
        int32_t l = tree_index_lca(t, pair, 2);
        if (l >= 0) {
            MUST(tree_index_is_ancestor(t, l, pair[0]));
            MUST(tree_index_is_ancestor(t, l, pair[1]));
        }
        int32_t *path, np;
        MUST(tree_index_ancestors(t, v, a, &path, &np, &err) == 0);
        MUST(path[np - 1] == v && tree_index_parent(t, path[0]) < 0);
    }
    int32_t *out, no;
    int trunc;
    MUST(tree_index_subtree(t, -1, 3, 50, a, &out, &no, &trunc, &err) == 0);
    MUST(no <= 50);
    tree_viewport box = {0, tree_index_uses_length(t) ? 1e300 : 5, 0, 10, 20};
    tree_view_entry *e;
    MUST(tree_index_viewport(t, &box, a, &e, &no, &trunc, &err) == 0);
    MUST(no <= 20);
    for (int32_t i = 0; i < no; i++)
        if (!e[i].collapsed)
            MUST(tree_index_y(t, e[i].node) >= 0 && tree_index_y(t, e[i].node) <= 10);
    arena_free(a);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    cellar_error err;
    cellar_error_clear(&err);
    tree_forest *f = NULL;
    int rc = tree_forest_from_json((const char *)data, size, &f, &err);
    MUST((rc == 0) == (f != NULL));
    MUST(rc == 0 || err.code == rc);
    if (f) {
        for (size_t i = 0; i < tree_forest_count(f); i++)
            check_tree(tree_forest_tree(f, i));
        tree_forest_free(f);
    }

    /* The same input fed in pieces must give the same verdict. */
    tree_json_reader *r = tree_json_reader_new();
    MUST(r != NULL);
    cellar_error err2;
    cellar_error_clear(&err2);
    int rc2 = 0;
    size_t step = size > 0 ? 1 + data[0] % 17 : 1;
    for (size_t i = 0; i < size && rc2 == 0; i += step)
        rc2 = tree_json_reader_feed(r, (const char *)data + i, size - i < step ? size - i : step,
                                    &err2);
    tree_forest *f2 = NULL;
    if (rc2 == 0)
        rc2 = tree_json_reader_finish(r, &f2, &err2);
    tree_json_reader_free(r);
    tree_forest_free(f2);
    MUST((rc == 0) == (rc2 == 0));

    /* treedata 0.0.x: the input as raw.treedata's "obst" member, beside a
     * label and another axis, gives the plain reader's verdict and trees;
     * and the input itself as raw.treedata never breaks the reader. */
    json_t *one = json_loadb((const char *)data, size, JSON_DECODE_ANY, NULL);
    int single_value = one != NULL;
    json_decref(one);
    static const char head[] = "{\"vart\": {}, \"label\": \"lab\", \"obst\": ";
    static const char tail[] = ", \"allow_overlap\": 1}";
    size_t wrapped_n = sizeof head - 1 + size + sizeof tail - 1;
    char *wrapped = malloc(wrapped_n);
    MUST(wrapped != NULL);
    memcpy(wrapped, head, sizeof head - 1);
    memcpy(wrapped + sizeof head - 1, data, size);
    memcpy(wrapped + sizeof head - 1 + size, tail, sizeof tail - 1);
    for (int whole = 0; whole < 2; whole++) {
        const char *in = whole ? (const char *)data : wrapped;
        size_t n = whole ? size : wrapped_n;
        tree_json_reader *lr = tree_json_reader_new_legacy("obst");
        MUST(lr != NULL);
        cellar_error err3;
        cellar_error_clear(&err3);
        int rc3 = 0;
        for (size_t i = 0; i < n && rc3 == 0; i += step)
            rc3 = tree_json_reader_feed(lr, in + i, n - i < step ? n - i : step, &err3);
        tree_forest *f3 = NULL;
        if (rc3 == 0)
            rc3 = tree_json_reader_finish(lr, &f3, &err3);
        MUST(rc3 == 0 || err3.code == rc3);
        MUST((rc3 == 0) == (f3 != NULL));
        if (f3) {
            tree_json_legacy info;
            tree_json_reader_legacy(lr, &info);
            for (size_t i = 0; i < tree_forest_count(f3); i++)
                check_tree(tree_forest_tree(f3, i));
            /* The wrapper's own members come back, unless the input (not
             * one JSON value) adds members of its own: '{}, "label": "x"'
             * makes a second label, and the last one counts, as in
             * Python's json, which treedata reads raw.treedata with. */
            if (!whole && single_value) {
                MUST(info.has_trees && info.has_label && info.label &&
                     strcmp(info.label, "lab") == 0);
                MUST(info.has_allow_overlap && info.allow_overlap == 1);
            }
            free(info.label);
        }
        if (!whole) {
            /* Only an input that is one JSON value keeps its verdict when
             * wrapped: '{}, "t": 2' is trailing garbage alone and a valid
             * member list inside the wrapper. */
            MUST(!single_value || (rc == 0) == (rc3 == 0));
            if (rc == 0 && f3) {
                tree_forest *again = NULL;
                cellar_error_clear(&err);
                MUST(tree_forest_from_json((const char *)data, size, &again, &err) == 0);
                MUST(tree_forest_count(again) == tree_forest_count(f3));
                tree_forest_free(again);
            }
        }
        tree_forest_free(f3);
        tree_json_reader_free(lr);
    }
    free(wrapped);

    /* The input as one node's attributes. */
    char *text = malloc(size + 1);
    MUST(text != NULL);
    memcpy(text, data, size);
    text[size] = '\0';
    tree_builder *b = tree_builder_new("fuzz");
    MUST(b != NULL);
    cellar_error_clear(&err);
    if (tree_builder_add_node(b, "a", text, &err) == 0) {
        tree_index *t = NULL;
        MUST(tree_builder_finish(b, &t, &err) == 0);
        MUST(tree_index_attrs(t, 0)[0] == '{');
        tree_index_free(t);
    } else {
        tree_builder_free(b);
    }
    free(text);
    return 0;
}

#define FUZZ_NAME "tree_json"
#include "tests/fuzz/replay_main.h"
