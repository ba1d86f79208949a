/* Viewport thinning by bins: see storage/trees/tree_thin.h. */
#include "storage/trees/tree_thin.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct thin_key {
    double y;
    int32_t pre, node, collapsed;
} thin_key;

/* What the thinning reads of a node.  Read from the index's arrays as
 * needed: a copy of every node's in one record (40 bytes a node, for fewer
 * cache misses) made no difference measured on the bench's 1M-node tree. */
typedef struct tree_thin_node {
    double x, x_max, y;
    int32_t leaf_first, leaf_count, n_children, pre;
} tree_thin_node;

typedef struct thin_run {
    const tree_index *t;
    const int32_t *y_rank;     /* or NULL: the answer is sorted by comparisons */
    const tree_thin_box *box;
    double h;            /* row height */
    int32_t *stack;      /* expanded nodes whose children are still to visit */
    int32_t stack_n, stack_cap;
    thin_key *out;
    int32_t out_n, out_cap;
    int thinned, failed;
} thin_run;

int64_t tree_thin_row(const tree_thin_box *box, double y)
{
    if (y < box->y0)
        return -1;
    if (y > box->y1)
        return box->rows;
    double h = (box->y1 - box->y0) / box->rows;
    if (!(h > 0))
        return 0;
    double d = floor((y - box->y0) / h);
    return d >= box->rows ? box->rows - 1 : (int64_t)d;
}

static int grow(void **p, int32_t *cap, size_t size)
{
    int32_t ncap = *cap ? *cap * 2 : 256;
    void *q = realloc(*p, (size_t)ncap * size);
    if (!q)
        return -1;
    *p = q;
    *cap = ncap;
    return 0;
}

static void push(thin_run *r, int32_t v)
{
    if (r->stack_n == r->stack_cap && grow((void **)&r->stack, &r->stack_cap, sizeof *r->stack)) {
        r->failed = 1;
        return;
    }
    r->stack[r->stack_n++] = v;
}

static int cmp_key(const void *pa, const void *pb)
{
    const thin_key *a = pa, *b = pb;
    if (a->y != b->y)
        return a->y < b->y ? -1 : 1;
    return (a->pre > b->pre) - (a->pre < b->pre);
}

int32_t *tree_thin_y_ranks(const tree_index *t)
{
    int32_t n = tree_index_node_count(t);
    thin_key *k = malloc((size_t)(n ? n : 1) * sizeof *k);
    int32_t *rank = tree_index_calloc((size_t)n, sizeof *rank);
    if (!k || !rank) {
        free(k);
        free(rank);
        return NULL;
    }
    for (int32_t v = 0; v < n; v++)
        k[v] = (thin_key){tree_index_y(t, v), tree_index_preorder(t, v), v, 0};
    if (n > 1)
        qsort(k, (size_t)n, sizeof *k, cmp_key);
    for (int32_t r = 0; r < n; r++)
        rank[k[r].node] = r;
    free(k);
    return rank;
}

static tree_thin_node node_of(const thin_run *r, int32_t v)
{
    int32_t nc;
    tree_index_children(r->t, v, &nc);
    return (tree_thin_node){tree_index_x(r->t, v), tree_index_x_max(r->t, v),
                            tree_index_y(r->t, v), tree_index_leaf_first(r->t, v),
                            tree_index_leaf_count(r->t, v), nc, tree_index_preorder(r->t, v)};
}

static double lo_of(const tree_thin_node *d)
{
    return d->leaf_first;
}

static double hi_of(const tree_thin_node *d)
{
    return (double)d->leaf_first + d->leaf_count - 1;
}

static int meets(const thin_run *r, const tree_thin_node *d)
{
    const tree_thin_box *b = r->box;
    return lo_of(d) <= b->y1 && hi_of(d) >= b->y0 && d->x_max >= b->x0;
}

static void emit_node(thin_run *r, int32_t v, const tree_thin_node *d, int collapsed)
{
    if (r->out_n == r->out_cap && grow((void **)&r->out, &r->out_cap, sizeof *r->out)) {
        r->failed = 1;
        return;
    }
    r->out[r->out_n++] = (thin_key){d->y, d->pre, v, collapsed};
    r->thinned |= collapsed;
}

/* Visits the siblings list[0..n): expands the wide ones, keeps one thin
 * clade per row. */
static void visit_list(thin_run *r, const int32_t *list, int32_t n)
{
    int32_t lo = 0, hi = n;
    /* A few siblings are scanned (meets() skips those outside): a binary
     * search would read their leaf ranges twice. */
    if (n > 16)
        tree_index_y_span(r->t, list, n, r->box->y0, r->box->y1, &lo, &hi);
    int32_t best = -1;
    tree_thin_node bd = {0};
    int64_t best_row = 0;
    for (int32_t i = lo; i <= hi; i++) {
        int32_t c = i < hi ? list[i] : -1;
        tree_thin_node d = {0};
        if (c >= 0) {
            d = node_of(r, c);
            if (!meets(r, &d))
                continue;
        }
        int64_t rlo = c >= 0 ? tree_thin_row(r->box, lo_of(&d)) : 0;
        int thin = c >= 0 && rlo == tree_thin_row(r->box, hi_of(&d));
        if (best >= 0 && thin && rlo == best_row) {
            r->thinned = 1;
            if (d.x_max > bd.x_max) {
                best = c;
                bd = d;
            }
            continue;
        }
        if (best >= 0) {
            emit_node(r, best, &bd, bd.n_children > 0);
            best = -1;
        }
        if (c < 0)
            break;
        if (thin) {
            best = c;
            bd = d;
            best_row = rlo;
        } else if (d.x > r->box->x1) {
            emit_node(r, c, &d, d.n_children > 0);
        } else {
            emit_node(r, c, &d, 0);
            push(r, c);
        }
    }
}

/* Digits of the radix sort by y rank: 11 bits, so that a million-node
 * tree's ranks take two passes over a 16 KiB count table. */
#define RANK_DIGIT_BITS 11
#define RANK_DIGITS (1u << RANK_DIGIT_BITS)

/* r->out in the order of its nodes' y ranks (distinct: the order of
 * cmp_key), by a least-significant-digit radix sort of the ranks above the
 * smallest: O(answer) where a comparison sort costs O(answer log answer).
 * Returns -1 when out of memory. */
static int sort_by_rank(thin_run *r)
{
    int32_t n = r->out_n, lo = INT32_MAX, hi = 0;
    for (int32_t i = 0; i < n; i++) {
        int32_t k = r->y_rank[r->out[i].node];
        lo = k < lo ? k : lo;
        hi = k > hi ? k : hi;
    }
    uint64_t *key = malloc((size_t)n * sizeof *key), *tmp = malloc((size_t)n * sizeof *tmp);
    thin_key *sorted = malloc((size_t)n * sizeof *sorted);
    uint32_t *count = malloc(RANK_DIGITS * sizeof *count);
    int rc = -1;
    if (!key || !tmp || !sorted || !count)
        goto done;
    /* The rank above lo in the high half, the entry's index in the low. */
    for (int32_t i = 0; i < n; i++)
        key[i] = (uint64_t)(uint32_t)(r->y_rank[r->out[i].node] - lo) << 32 | (uint32_t)i;
    uint32_t span = (uint32_t)(hi - lo);
    for (unsigned shift = 0; shift < 32 && (shift == 0 || span >> shift); shift += RANK_DIGIT_BITS) {
        memset(count, 0, RANK_DIGITS * sizeof *count);
        for (int32_t i = 0; i < n; i++)
            count[(key[i] >> (32 + shift)) & (RANK_DIGITS - 1)]++;
        uint32_t sum = 0;
        for (uint32_t d = 0; d < RANK_DIGITS; d++) {
            uint32_t c = count[d];
            count[d] = sum;
            sum += c;
        }
        for (int32_t i = 0; i < n; i++)
            tmp[count[(key[i] >> (32 + shift)) & (RANK_DIGITS - 1)]++] = key[i];
        uint64_t *swap = key;
        key = tmp;
        tmp = swap;
    }
    for (int32_t i = 0; i < n; i++)
        sorted[i] = r->out[(uint32_t)key[i]];
    free(r->out);
    r->out = sorted;
    sorted = NULL;
    rc = 0;
done:
    free(key);
    free(tmp);
    free(sorted);
    free(count);
    return rc;
}

int tree_index_thin(const tree_index *t, const tree_thin_box *box, arena *a,
                    tree_view_entry **out, int32_t *n_out, int *thinned, cellar_error *err)
{
    return tree_index_thin_with(t, NULL, box, a, out, n_out, thinned, err);
}

int tree_index_thin_with(const tree_index *t, const int32_t *y_rank, const tree_thin_box *box,
                         arena *a, tree_view_entry **out, int32_t *n_out, int *thinned,
                         cellar_error *err)
{
    *out = NULL;
    *n_out = 0;
    *thinned = 0;
    if (box->rows <= 0)
        return cellar_fail(err, CELLAR_EINVAL, "the number of bins must be positive");
    if (isnan(box->x0) || isnan(box->x1) || isnan(box->y0) || isnan(box->y1))
        return cellar_fail(err, CELLAR_EINVAL, "the box bounds must be numbers");
    if (box->x0 > box->x1 || box->y0 > box->y1)
        return cellar_fail(err, CELLAR_EINVAL, "the box needs x0 <= x1 and y0 <= y1");
    thin_run r = {.t = t, .y_rank = y_rank, .box = box};
    int32_t nr;
    const int32_t *roots = tree_index_roots(t, &nr);
    visit_list(&r, roots, nr);
    while (r.stack_n > 0 && !r.failed) {
        int32_t v = r.stack[--r.stack_n], nc;
        const int32_t *kids = tree_index_children(t, v, &nc);
        visit_list(&r, kids, nc);
    }
    int rc = 0;
    if (r.failed) {
        rc = cellar_fail(err, CELLAR_ENOMEM, "out of memory thinning the tree");
        goto done;
    }
    if (r.out_n > 1 && y_rank && sort_by_rank(&r)) {
        rc = cellar_fail(err, CELLAR_ENOMEM, "out of memory thinning the tree");
        goto done;
    }
    if (r.out_n > 1 && !y_rank)
        qsort(r.out, (size_t)r.out_n, sizeof *r.out, cmp_key);
    tree_view_entry *e = arena_calloc(a, (size_t)(r.out_n ? r.out_n : 1), sizeof *e);
    if (!e) {
        rc = cellar_fail(err, CELLAR_ENOMEM, "out of memory thinning the tree");
        goto done;
    }
    for (int32_t i = 0; i < r.out_n; i++)
        e[i] = (tree_view_entry){r.out[i].node, r.out[i].collapsed};
    *out = e;
    *n_out = r.out_n;
    *thinned = r.thinned;
done:
    free(r.stack);
    free(r.out);
    return rc;
}
