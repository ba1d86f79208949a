/* Thinning by bins (storage/trees/tree_thin.h), checked by brute force on
 * random trees: sorted by y, parents present, and every node inside the box
 * in the answer or stood for by its nearest ancestor there. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/arena.h"
#include "storage/trees/tree_json.h"
#include "storage/trees/tree_thin.h"
#include "tests/unit/unit.h"

/* A random tree of n nodes: node i > 0 hangs from any node before it or
 * from one of the few just before it (deep and bushy, some nodes with one
 * child), every 50th from node 1 (a wide node); edge lengths random, or
 * none. */
static tree_index *random_tree(int n, unsigned seed, int lengths)
{
    cellar_error err;
    tree_builder *b = tree_builder_new("thin");
    char id[16], pid[16], attrs[48];
    for (int i = 0; i < n; i++) {
        snprintf(id, sizeof id, "v%d", i);
        if (tree_builder_add_node(b, id, NULL, &err))
            return NULL;
    }
    for (int i = 1; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        int p = i % 50 == 0 && i > 1 ? 1
                : (seed >> 28) & 1 ? (int)((seed >> 8) % (unsigned)i)
                                   : i - 1 - (int)((seed >> 8) % (unsigned)(i < 6 ? i : 6));
        snprintf(pid, sizeof pid, "v%d", p);
        snprintf(id, sizeof id, "v%d", i);
        snprintf(attrs, sizeof attrs, "{\"length\": %u.%u}", (seed >> 20) % 3, (seed >> 4) % 100);
        if (tree_builder_add_edge(b, pid, id, lengths ? attrs : NULL, &err))
            return NULL;
    }
    tree_index *t = NULL;
    return tree_builder_finish(b, &t, &err) ? NULL : t;
}

static double lo_of(const tree_index *t, int32_t v)
{
    return tree_index_leaf_first(t, v);
}

static double hi_of(const tree_index *t, int32_t v)
{
    return (double)tree_index_leaf_first(t, v) + tree_index_leaf_count(t, v) - 1;
}

static int thin_of(const tree_thin_box *b, const tree_index *t, int32_t v)
{
    return tree_thin_row(b, lo_of(t, v)) == tree_thin_row(b, hi_of(t, v));
}

/* Checks one answer; returns how many nodes of the box it left out. */
static int check_answer(const tree_index *t, const tree_thin_box *b, const tree_view_entry *e,
                        int32_t k)
{
    int32_t n = tree_index_node_count(t);
    signed char *in = calloc((size_t)n, 1);
    int left_out = 0;
    for (int32_t i = 0; i < k; i++) {
        CHECK(in[e[i].node] == 0);
        in[e[i].node] = e[i].collapsed ? 2 : 1;
        if (i)
            CHECK(tree_index_y(t, e[i - 1].node) <= tree_index_y(t, e[i].node));
    }
    for (int32_t i = 0; i < k; i++) {
        int32_t p = tree_index_parent(t, e[i].node);
        CHECK(p < 0 || in[p] != 0);
        CHECK(p < 0 || in[p] != 2); /* no child of a collapsed node */
    }
    for (int32_t u = 0; u < n; u++) {
        double x = tree_index_x(t, u), y = tree_index_y(t, u);
        if (in[u] || x < b->x0 || x > b->x1 || y < b->y0 || y > b->y1)
            continue;
        left_out++;
        int32_t c = u, a = tree_index_parent(t, u);
        while (a >= 0 && !in[a]) {
            c = a;
            a = tree_index_parent(t, a);
        }
        CHECK(a >= 0);
        if (a < 0 || in[a] == 2)
            continue;
        /* c's clade lies in one bin beside a kept sibling of that bin */
        CHECK(thin_of(b, t, c));
        int64_t r = tree_thin_row(b, lo_of(t, c));
        int32_t nc, found = 0;
        const int32_t *kids = tree_index_children(t, a, &nc);
        for (int32_t j = 0; j < nc; j++)
            found |= in[kids[j]] && thin_of(b, t, kids[j]) &&
                     tree_thin_row(b, lo_of(t, kids[j])) == r &&
                     tree_index_x_max(t, kids[j]) >= tree_index_x_max(t, c);
        CHECK(found);
    }
    free(in);
    return left_out;
}

void test_tree_thin_random(void)
{
    cellar_error err;
    for (int round = 0; round < 4; round++) {
        tree_index *t = random_tree(20000, 99u + (unsigned)round, round % 2);
        CHECK(t != NULL);
        if (!t)
            return;
        arena *a = arena_new();
        double ym = tree_index_leaf_total(t) - 1, xm = tree_index_x_max(t, 0);
        const tree_thin_box boxes[] = {
            {0, xm, 0, ym, 2000},
            {0, xm, 0, ym, 50},
            {xm * 0.2, xm * 0.7, ym * 0.3, ym * 0.35, 2000},
            {0, xm, ym * 0.5, ym * 0.5 + 300, 2000},        /* finer than the leaves */
            {xm * 0.9, xm, 0, ym, 100},                     /* the right edge only */
            {0, xm * 0.1, 0, ym, 100},                      /* the left edge only */
            {0, xm, ym * 2, ym * 3, 100},                   /* beside the tree */
        };
        for (size_t i = 0; i < sizeof boxes / sizeof *boxes; i++) {
            tree_view_entry *e = NULL;
            int32_t k = 0;
            int thinned = 0;
            CHECK_EQ(tree_index_thin(t, &boxes[i], a, &e, &k, &thinned, &err), 0);
            int left = check_answer(t, &boxes[i], e, k);
            CHECK_EQ(thinned || left == 0, 1);
            if (i == 0)
                CHECK(left > 0 && k < tree_index_node_count(t) / 2);
            for (int32_t j = 0; i == 3 && j < k; j++) /* bins finer than leaves */
                CHECK(!e[j].collapsed || tree_index_leaf_count(t, e[j].node) == 1);
            if (i == 6)
                CHECK_EQ(k, 0);
        }
        arena_free(a);
        tree_index_free(t);
    }
}

/* The answer put in order by a radix sort of the nodes' y ranks equals the
 * one sorted by comparisons (y, then preorder), entry for entry, on random
 * boxes of random trees (unary nodes give ties in y), and the ranks are
 * that order. */
void test_tree_thin_rank_order(void)
{
    cellar_error err;
    for (int round = 0; round < 3; round++) {
        tree_index *t = random_tree(round == 2 ? 3 : 30000, 7u + (unsigned)round, round % 2);
        int32_t *rank = t ? tree_thin_y_ranks(t) : NULL;
        CHECK(t && rank);
        if (!t || !rank) {
            free(rank);
            tree_index_free(t);
            return;
        }
        int32_t n = tree_index_node_count(t), *at = calloc((size_t)n, sizeof *at);
        CHECK(at != NULL);
        for (int32_t v = 0; at && v < n; v++) {
            CHECK(rank[v] >= 0 && rank[v] < n);
            at[rank[v]] = v;
        }
        for (int32_t r = 1; at && r < n; r++) {
            int32_t u = at[r - 1], v = at[r];
            double yu = tree_index_y(t, u), yv = tree_index_y(t, v);
            CHECK(yu < yv || (yu == yv && tree_index_preorder(t, u) < tree_index_preorder(t, v)));
        }
        free(at);
        arena *a = arena_new();
        double ym = tree_index_leaf_total(t) - 1, xm = tree_index_x_max(t, 0);
        unsigned seed = 12345u + (unsigned)round;
        for (int i = 0; i < 60; i++) {
            double q[4];
            for (int j = 0; j < 4; j++) {
                seed = seed * 1103515245u + 12345u;
                q[j] = (double)(seed >> 8) / (1u << 24);
            }
            tree_thin_box b = {xm * fmin(q[0], q[1]), xm * fmax(q[0], q[1]),
                               ym * fmin(q[2], q[3]), ym * fmax(q[2], q[3]),
                               i % 3 == 0 ? 2000 : 1 + (int32_t)(seed % 500)};
            if (i == 0)
                b = (tree_thin_box){0, xm, 0, ym, 2000};
            tree_view_entry *e1 = NULL, *e2 = NULL;
            int32_t k1 = 0, k2 = 0;
            int th1 = 0, th2 = 0;
            CHECK_EQ(tree_index_thin_with(t, NULL, &b, a, &e1, &k1, &th1, &err), 0);
            CHECK_EQ(tree_index_thin_with(t, rank, &b, a, &e2, &k2, &th2, &err), 0);
            CHECK_EQ(k2, k1);
            CHECK_EQ(th2, th1);
            CHECK(k1 == k2 && (k1 == 0 || memcmp(e1, e2, (size_t)k1 * sizeof *e1) == 0));
            if (i == 0 && n > 1000 && k1 > 1) /* ranks over more than one radix digit */
                CHECK(rank[e1[k1 - 1].node] - rank[e1[0].node] >= 2048);
        }
        arena_free(a);
        free(rank);
        tree_index_free(t);
    }
}

void test_tree_thin_errors(void)
{
    cellar_error err;
    tree_index *t = random_tree(10, 5, 1);
    CHECK(t != NULL);
    if (!t)
        return;
    arena *a = arena_new();
    tree_view_entry *e;
    int32_t k;
    int thinned;
    tree_thin_box bad[] = {{0, 1, 0, 1, 0}, {1, 0, 0, 1, 10}, {0, 1, 2, 1, 10},
                           {NAN, 1, 0, 1, 10}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        cellar_error_clear(&err);
        CHECK_EQ(tree_index_thin(t, &bad[i], a, &e, &k, &thinned, &err), CELLAR_EINVAL);
    }
    /* A box of no height: one bin; rows of a point. */
    tree_thin_box flat = {0, 10, 3, 3, 10};
    CHECK_EQ(tree_thin_row(&flat, 3), 0);
    CHECK_EQ(tree_thin_row(&flat, 2), -1);
    CHECK_EQ(tree_thin_row(&flat, 4), 10);
    CHECK_EQ(tree_index_thin(t, &flat, a, &e, &k, &thinned, &err), 0);
    CHECK(k > 0);
    tree_thin_box box = {0, 1, 0, 100, 10};
    CHECK_EQ(tree_thin_row(&box, 100), 9);
    CHECK_EQ(tree_thin_row(&box, 99.9), 9);
    CHECK_EQ(tree_thin_row(&box, 10), 1);
    arena_free(a);
    tree_index_free(t);
}
