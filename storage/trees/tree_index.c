/* The tree index: see storage/trees/tree_index.h. */
#include "storage/trees/tree_index.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

enum { RMQ_SHIFT = 5, RMQ_BLOCK = 1 << RMQ_SHIFT };

static const char empty_attrs[] = "{}";

enum { MAX_BLOCKS = 24 };

struct tree_index {
    arena *a;                /* the texts */
    int32_t n, n_edges, n_roots, n_leaves, max_depth;
    int uses_length;
    void *blocks[MAX_BLOCKS];  /* the arrays below, each malloc'd */
    int n_blocks;
    size_t block_bytes;
    const char **id;
    const char **attrs;      /* NULL when every node's is {} */
    const char **eattrs;     /* attributes of the edge into each node; NULL: all {} */
    double *blen;            /* `length` of the edge into each node, or NAN */
    uint32_t *slot;          /* open addressing table of node numbers */
    uint32_t slot_mask;
    int32_t *parent;
    int32_t *child_off;      /* n + 1 */
    int32_t *child;
    int32_t *depth;
    int32_t *depth_pos;      /* depth by preorder position (for the RMQ) */
    int32_t *pre, *end, *order;
    int32_t *roots;
    int32_t *leaf_count, *leaf_first, *leaves;
    double *x, *y, *xmax;
    int32_t rmq_levels, rmq_blocks;
    int32_t *rmq;            /* rmq_levels rows of rmq_blocks preorder positions */
};

uint32_t tree_index_hash_id(const char *s, size_t n)
{
    /* FNV-1a with a final avalanche so that the low bits are well mixed. */
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 16777619u;
    }
    h ^= h >> 16;
    h *= 0x85ebca6bu;
    h ^= h >> 13;
    return h;
}

/* Takes `p` (malloc'd, may be NULL) as one of the index's blocks; frees it
 * and returns NULL when there is no room. */
static void *adopt(tree_index *t, void *p, size_t bytes)
{
    if (!p || t->n_blocks == MAX_BLOCKS) {
        free(p);
        return NULL;
    }
    t->blocks[t->n_blocks++] = p;
    t->block_bytes += bytes;
    return p;
}

enum { HUGE_PAGE = 2 << 20 };

void *tree_index_calloc(size_t count, size_t size)
{
    if (!count)
        count = 1;
    if (size && count > SIZE_MAX / size)
        return NULL;
    size_t bytes = count * size;
    if (bytes < HUGE_PAGE)
        return calloc(count, size);
    void *p = NULL;
    if (posix_memalign(&p, HUGE_PAGE, bytes) != 0)
        return NULL;
    size_t whole = bytes & ~((size_t)HUGE_PAGE - 1);
    madvise(p, whole, MADV_HUGEPAGE); /* advice only: fine when refused */
    memset(p, 0, bytes);
    return p;
}

static void *alloc_n(tree_index *t, size_t count, size_t size)
{
    if (!count)
        count = 1;
    return adopt(t, tree_index_calloc(count, size), count * size);
}

static int fail_nomem(cellar_error *err)
{
    return cellar_fail(err, CELLAR_ENOMEM, "out of memory while indexing a tree");
}

void tree_parts_free(tree_parts *p)
{
    free(p->ids);
    free(p->attrs);
    free(p->src);
    free(p->dst);
    free(p->eattrs);
    free(p->elen);
    free(p->slot);
    p->ids = NULL;
    p->attrs = NULL;
    p->src = p->dst = NULL;
    p->eattrs = NULL;
    p->elen = NULL;
    p->slot = NULL;
}

/* The arrays the traversal fills, made once the edge lists are gone (the
 * others are made from its results, scatter_all). */
static int index_alloc(tree_index *t)
{
    size_t n = (size_t)t->n;
    t->depth_pos = alloc_n(t, n, sizeof *t->depth_pos);
    t->pre = alloc_n(t, n, sizeof *t->pre);
    t->order = alloc_n(t, n, sizeof *t->order);
    t->leaf_first = alloc_n(t, n, sizeof *t->leaf_first);
    t->leaves = alloc_n(t, n, sizeof *t->leaves);
    return t->depth_pos && t->pre && t->order && t->leaf_first && t->leaves ? 0 : -1;
}

static void slot_place(uint32_t *slot, uint32_t mask, const char *id, uint32_t v)
{
    uint32_t i = tree_index_hash_id(id, strlen(id)) & mask;
    while (slot[i] != UINT32_MAX)
        i = (i + 1) & mask;
    slot[i] = v;
}

/* Takes the builder's table, or makes one. */
static int take_hash(tree_index *t, tree_parts *p, cellar_error *err)
{
    size_t cap = p->slot_cap;
    if (p->slot && (cap & (cap - 1)) == 0 && cap >= (size_t)t->n * 2 && cap >= 2 &&
        cap <= (size_t)UINT32_MAX + 1) {
        t->slot = adopt(t, p->slot, cap * sizeof *t->slot);
        p->slot = NULL;
    } else {
        free(p->slot);
        p->slot = NULL;
        for (cap = 16; cap < (size_t)t->n * 2;)
            cap <<= 1;
        t->slot = alloc_n(t, cap, sizeof *t->slot);
        if (t->slot) {
            memset(t->slot, 0xff, cap * sizeof *t->slot);
            for (int32_t v = 0; v < t->n; v++)
                slot_place(t->slot, (uint32_t)(cap - 1), t->id[v], (uint32_t)v);
        }
    }
    if (!t->slot)
        return fail_nomem(err);
    t->slot_mask = (uint32_t)(cap - 1);
    return 0;
}

int32_t tree_index_find(const tree_index *t, const char *id, size_t len)
{
    if (!t || t->n == 0)
        return -1;
    uint32_t h = tree_index_hash_id(id, len);
    for (uint32_t i = h & t->slot_mask;; i = (i + 1) & t->slot_mask) {
        uint32_t v = t->slot[i];
        if (v == UINT32_MAX)
            return -1;
        if (strncmp(t->id[v], id, len) == 0 && t->id[v][len] == '\0')
            return (int32_t)v;
    }
}

/* Whether every one of the n attribute texts is absent or "{}": then the
 * index keeps no array of them (8 bytes a node). */
static int all_empty(const char *const *attrs, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (attrs[i] && strcmp(attrs[i], empty_attrs) != 0)
            return 0;
    return 1;
}

/* Each node's incoming edge attributes and length, from the edge lists,
 * which are freed then. */
static int scatter_edge_attrs(tree_index *t, tree_parts *p, cellar_error *err)
{
    int any_attrs = p->eattrs && !all_empty(p->eattrs, (size_t)t->n_edges);
    t->eattrs = any_attrs ? alloc_n(t, (size_t)t->n, sizeof *t->eattrs) : NULL;
    t->blen = alloc_n(t, (size_t)t->n, sizeof *t->blen);
    if ((any_attrs && !t->eattrs) || !t->blen)
        return fail_nomem(err);
    for (int32_t v = 0; v < t->n; v++)
        t->blen[v] = NAN;
    for (int32_t e = 0; e < t->n_edges; e++) {
        int32_t d = p->dst[e];
        if (d < 0 || d >= t->n)
            continue; /* reported by link_edges */
        if (t->eattrs)
            t->eattrs[d] = p->eattrs[e] ? p->eattrs[e] : empty_attrs;
        t->blen[d] = p->elen ? p->elen[e] : NAN;
    }
    free(p->eattrs);
    free(p->elen);
    p->eattrs = NULL;
    p->elen = NULL;
    return 0;
}

/* Parents from the edges, and children as CSR in edge order; frees the
 * edge lists. */
static int link_edges(tree_index *t, tree_parts *p, cellar_error *err)
{
    const int32_t *src = p->src, *dst = p->dst;
    size_t n = (size_t)t->n;
    t->parent = alloc_n(t, n, sizeof *t->parent);
    t->child_off = alloc_n(t, n + 1, sizeof *t->child_off);
    t->child = alloc_n(t, n, sizeof *t->child);
    if (!t->parent || !t->child_off || !t->child)
        return fail_nomem(err);
    for (int32_t v = 0; v < t->n; v++)
        t->parent[v] = -1;
    for (int32_t e = 0; e < t->n_edges; e++) {
        int32_t s = src[e], d = dst[e];
        if (s < 0 || s >= t->n || d < 0 || d >= t->n)
            return cellar_fail(err, CELLAR_EFORMAT, "tree edge %d refers to no node", (int)e);
        if (s == d)
            return cellar_fail(err, CELLAR_EFORMAT,
                               "tree node '%s' has an edge to itself (a cycle)", t->id[s]);
        if (t->parent[d] >= 0)
            return cellar_fail(err, CELLAR_EFORMAT,
                               "tree node '%s' has two parents ('%s' and '%s')", t->id[d],
                               t->id[t->parent[d]], t->id[s]);
        t->parent[d] = s;
        t->child_off[s + 1]++;
    }
    for (int32_t v = 0; v < t->n; v++)
        t->child_off[v + 1] += t->child_off[v];
    /* child is filled with a cursor per node: start from child_off and
     * shift back afterwards, so no cursor array is needed. */
    for (int32_t e = 0; e < t->n_edges; e++)
        t->child[t->child_off[src[e]]++] = dst[e];
    for (int32_t v = t->n; v > 0; v--)
        t->child_off[v] = t->child_off[v - 1];
    t->child_off[0] = 0;
    free(p->src);
    free(p->dst);
    p->src = p->dst = NULL;
    return 0;
}

static int find_roots(tree_index *t, cellar_error *err)
{
    int32_t r = 0;
    for (int32_t v = 0; v < t->n; v++)
        r += t->parent[v] < 0;
    t->n_roots = r;
    t->roots = alloc_n(t, (size_t)r, sizeof *t->roots);
    if (!t->roots)
        return fail_nomem(err);
    r = 0;
    for (int32_t v = 0; v < t->n; v++)
        if (t->parent[v] < 0)
            t->roots[r++] = v;
    return 0;
}

/* A node on a cycle: every node not reached from a root leads, by parent
 * links, into a cycle; n steps from it are surely on that cycle. */
static int fail_cycle(tree_index *t, cellar_error *err)
{
    int32_t v = 0;
    while (v < t->n && t->pre[v] >= 0)
        v++;
    if (v == t->n)
        return cellar_fail(err, CELLAR_EINTERNAL, "tree traversal lost a node");
    for (int32_t i = 0; i < t->n; i++)
        v = t->parent[v];
    return cellar_fail(err, CELLAR_EFORMAT, "tree has a cycle through node '%s'", t->id[v]);
}

static int decide_length(const tree_index *t)
{
    if (t->n_edges == 0)
        return 0;
    for (int32_t v = 0; v < t->n; v++)
        if (t->parent[v] >= 0 && !(isfinite(t->blen[v]) && t->blen[v] >= 0))
            return 0;
    return 1;
}

/* What the traversal computes by preorder position, before it is
 * scattered to the nodes: a node's parent lies earlier in the preorder on
 * the path from the root, whose entries are in cache, while arrays by node
 * number would cost a cache miss per node and array. */
typedef struct by_pos {
    int32_t *ppos;     /* the parent's position, -1 for a root */
    int32_t *size;     /* subtree size */
    int32_t *leaves;   /* leaf count */
    double *x;         /* x, then the subtree's largest x (accumulate) */
    double *y;         /* NAN for an internal node until its last child is met */
    size_t n;
} by_pos;

/* Scratch arrays of a build are mapped and unmapped directly: malloc may
 * keep freed memory (its thresholds move), which would add the scratch
 * arrays to the peak of what is allocated after them. */
static void *scratch_alloc(size_t count, size_t size)
{
    if (!count)
        count = 1;
    if (count > SIZE_MAX / size)
        return NULL;
    void *p = mmap(NULL, count * size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

static void scratch_free(void *p, size_t count, size_t size)
{
    if (p)
        munmap(p, (count ? count : 1) * size);
}

static void by_pos_free(by_pos *w)
{
    scratch_free(w->ppos, w->n, sizeof *w->ppos);
    scratch_free(w->size, w->n, sizeof *w->size);
    scratch_free(w->leaves, w->n, sizeof *w->leaves);
    scratch_free(w->x, w->n, sizeof *w->x);
    scratch_free(w->y, w->n, sizeof *w->y);
    memset(w, 0, sizeof *w);
}

static int by_pos_alloc(by_pos *w, size_t n)
{
    w->n = n;
    w->ppos = scratch_alloc(n, sizeof *w->ppos);
    w->size = scratch_alloc(n, sizeof *w->size);
    w->leaves = scratch_alloc(n, sizeof *w->leaves);
    w->x = scratch_alloc(n, sizeof *w->x);
    w->y = scratch_alloc(n, sizeof *w->y);
    if (w->ppos && w->size && w->leaves && w->x && w->y)
        return 0;
    by_pos_free(w);
    return -1;
}

typedef struct visit {
    int32_t v, ppos;
    double len;        /* of the edge from the parent */
} visit;

/* Iterative preorder from the roots: pre, order, leaf ranks and depth by
 * position, and in w what needs only the ancestors.  A stack of the
 * unvisited nodes, which a node leaves before its children enter; pushing
 * a child prefetches what its visit touches. */
static int traverse(tree_index *t, by_pos *w, cellar_error *err)
{
    visit *stack = scratch_alloc((size_t)t->n, sizeof *stack);
    if (!stack)
        return fail_nomem(err);
    for (int32_t v = 0; v < t->n; v++)
        t->pre[v] = -1;
    t->uses_length = decide_length(t);
    int32_t top = 0, pos = 0, rank = 0;
    for (int32_t r = t->n_roots - 1; r >= 0; r--)
        stack[top++] = (visit){t->roots[r], -1, 0};
    while (top > 0) {
        visit s = stack[--top];
        int32_t v = s.v;
        t->pre[v] = pos;
        t->order[pos] = v;
        w->ppos[pos] = s.ppos;
        int32_t d = s.ppos < 0 ? 0 : t->depth_pos[s.ppos] + 1;
        t->depth_pos[pos] = d;
        if (d > t->max_depth)
            t->max_depth = d;
        w->x[pos] = s.ppos < 0 ? 0 : w->x[s.ppos] + (t->uses_length ? s.len : 1.0);
        w->size[pos] = 1;
        t->leaf_first[v] = rank;
        int32_t c0 = t->child_off[v], c1 = t->child_off[v + 1];
        w->leaves[pos] = c1 == c0;
        w->y[pos] = NAN;
        if (c1 == c0) {
            w->y[pos] = rank;
            t->leaves[rank++] = v;
        }
        for (int32_t c = c1 - 1; c >= c0; c--) {
            int32_t k = t->child[c];
            __builtin_prefetch(&t->child_off[k]);
            __builtin_prefetch(&t->pre[k], 1);
            __builtin_prefetch(&t->leaf_first[k], 1);
            stack[top++] = (visit){k, pos, t->blen[k]};
        }
        pos++;
    }
    t->n_leaves = rank;
    scratch_free(stack, (size_t)t->n, sizeof *stack);
    if (pos != t->n)
        return fail_cycle(t, err);
    return 0;
}

/* Children before parents: subtree sizes, leaf counts, subtree x maxima
 * (in w->x, once t->x was taken from it), and the y of internal nodes: the
 * mean of their first child's (the next position) and last child's (the
 * first of their children met here, kept in the parent's y until then). */
static void accumulate(tree_index *t, by_pos *w)
{
    for (int32_t pos = t->n - 1; pos >= 0; pos--) {
        if (w->size[pos] > 1)
            w->y[pos] = (w->y[pos + 1] + w->y[pos]) / 2;
        int32_t p = w->ppos[pos];
        if (p >= 0) {
            w->size[p] += w->size[pos];
            w->leaves[p] += w->leaves[pos];
            if (w->x[pos] > w->x[p])
                w->x[p] = w->x[pos];
            if (isnan(w->y[p]))
                w->y[p] = w->y[pos];
        }
    }
    scratch_free(w->ppos, w->n, sizeof *w->ppos);
    w->ppos = NULL;
}

/* The values by position as an index array by node; *vals (scratch) is
 * freed when `give_back` (one array made, one given back: the build's peak
 * memory stays that of the traversal).  add_pos: the position is added. */
static int32_t *scatter_i32(tree_index *t, int32_t **vals, int add_pos, int give_back)
{
    int32_t *out = alloc_n(t, (size_t)t->n, sizeof *out);
    for (int32_t pos = 0; out && pos < t->n; pos++)
        out[t->order[pos]] = (*vals)[pos] + (add_pos ? pos : 0);
    if (give_back) {
        scratch_free(*vals, (size_t)t->n, sizeof **vals);
        *vals = NULL;
    }
    return out;
}

static double *scatter_f64(tree_index *t, double **vals, int give_back)
{
    double *out = alloc_n(t, (size_t)t->n, sizeof *out);
    for (int32_t pos = 0; out && pos < t->n; pos++)
        out[t->order[pos]] = (*vals)[pos];
    if (give_back) {
        scratch_free(*vals, (size_t)t->n, sizeof **vals);
        *vals = NULL;
    }
    return out;
}

/* After traverse: x, the sums (accumulate), then the rest by node. */
static int finish_by_pos(tree_index *t, by_pos *w, cellar_error *err)
{
    t->x = scatter_f64(t, &w->x, 0);
    if (!t->x)
        return fail_nomem(err);
    accumulate(t, w);
    t->end = scatter_i32(t, &w->size, 1, 1);
    t->leaf_count = scatter_i32(t, &w->leaves, 0, 1);
    t->y = scatter_f64(t, &w->y, 1);
    t->xmax = scatter_f64(t, &w->x, 1);
    t->depth = scatter_i32(t, &t->depth_pos, 0, 0);
    if (!t->end || !t->leaf_count || !t->y || !t->xmax || !t->depth)
        return fail_nomem(err);
    return 0;
}

/* The preorder position of least depth among a and b (the first on ties). */
static int32_t pos_min(const tree_index *t, int32_t a, int32_t b)
{
    return t->depth_pos[b] < t->depth_pos[a] ? b : a;
}

static int build_rmq(tree_index *t, cellar_error *err)
{
    int32_t nb = (int32_t)(((int64_t)t->n + RMQ_BLOCK - 1) >> RMQ_SHIFT);
    int32_t levels = 1;
    while (levels < 31 && ((int64_t)1 << levels) <= nb)
        levels++;
    t->rmq_blocks = nb;
    t->rmq_levels = levels;
    t->rmq = alloc_n(t, (size_t)levels * (size_t)(nb ? nb : 1), sizeof *t->rmq);
    if (!t->rmq)
        return fail_nomem(err);
    for (int32_t b = 0; b < nb; b++) {
        int32_t lo = b << RMQ_SHIFT, hi = lo + RMQ_BLOCK;
        if (hi > t->n)
            hi = t->n;
        int32_t m = lo;
        for (int32_t p = lo + 1; p < hi; p++)
            m = pos_min(t, m, p);
        t->rmq[b] = m;
    }
    for (int32_t l = 1; l < levels; l++) {
        int32_t *row = t->rmq + (size_t)l * nb, *prev = row - nb;
        int32_t half = 1 << (l - 1);
        for (int32_t b = 0; b + (1 << l) <= nb; b++)
            row[b] = pos_min(t, prev[b], prev[b + half]);
    }
    return 0;
}

/* Position of least depth in the preorder positions lo .. hi (inclusive). */
static int32_t rmq_query(const tree_index *t, int32_t lo, int32_t hi)
{
    int32_t bl = lo >> RMQ_SHIFT, bh = hi >> RMQ_SHIFT;
    int32_t m = lo;
    if (bl == bh) {
        for (int32_t p = lo + 1; p <= hi; p++)
            m = pos_min(t, m, p);
        return m;
    }
    for (int32_t p = lo + 1; p < (bl + 1) << RMQ_SHIFT; p++)
        m = pos_min(t, m, p);
    if (bh - bl > 1) {
        int32_t b0 = bl + 1, b1 = bh - 1, l = 0;
        while ((2 << l) <= b1 - b0 + 1)
            l++;
        const int32_t *row = t->rmq + (size_t)l * t->rmq_blocks;
        m = pos_min(t, m, row[b0]);
        m = pos_min(t, m, row[b1 - (1 << l) + 1]);
    }
    for (int32_t p = bh << RMQ_SHIFT; p <= hi; p++)
        m = pos_min(t, m, p);
    return m;
}

int tree_index_build(arena *a, tree_parts *p, tree_index **out, cellar_error *err)
{
    int rc = 0;
    *out = NULL;
    tree_index *t = NULL;
    if (!a) {
        rc = fail_nomem(err);
        goto done;
    }
    if (p->n_nodes < 0 || p->n_edges < 0 || p->n_nodes == INT32_MAX ||
        p->n_edges == INT32_MAX) {
        rc = cellar_fail(err, CELLAR_ETOOBIG, "tree has too many nodes or edges");
        goto done;
    }
    t = arena_calloc(a, 1, sizeof *t);
    if (!t) {
        rc = fail_nomem(err);
        goto done;
    }
    t->a = a;
    t->n = p->n_nodes;
    t->n_edges = p->n_edges;
    size_t n = (size_t)t->n;
    if (!p->ids)
        p->ids = calloc(n ? n : 1, sizeof *p->ids);
    t->id = adopt(t, p->ids, n * sizeof *t->id);
    p->ids = NULL;
    if (p->attrs && all_empty(p->attrs, n)) {
        free(p->attrs);
        p->attrs = NULL;
    }
    t->attrs = p->attrs ? adopt(t, p->attrs, n * sizeof *t->attrs) : NULL;
    int attrs_lost = p->attrs && !t->attrs;
    p->attrs = NULL;
    if (!t->id || attrs_lost) {
        rc = fail_nomem(err);
        goto done;
    }
    for (int32_t v = 0; t->attrs && v < t->n; v++)
        if (!t->attrs[v])
            t->attrs[v] = empty_attrs;
    if ((rc = take_hash(t, p, err)) < 0 || (rc = scatter_edge_attrs(t, p, err)) < 0 ||
        (rc = link_edges(t, p, err)) < 0)
        goto done;
    if (index_alloc(t) < 0) {
        rc = fail_nomem(err);
        goto done;
    }
    if ((rc = find_roots(t, err)) < 0)
        goto done;
    by_pos w;
    if (by_pos_alloc(&w, (size_t)t->n) < 0) {
        rc = fail_nomem(err);
        goto done;
    }
    if ((rc = traverse(t, &w, err)) == 0)
        rc = finish_by_pos(t, &w, err);
    by_pos_free(&w);
    if (rc < 0 || (rc = build_rmq(t, err)) < 0)
        goto done;
    *out = t;
    return 0;
done:
    tree_parts_free(p);
    if (t)
        tree_index_free(t);
    else
        arena_free(a);
    return rc;
}

void tree_index_free(tree_index *t)
{
    if (!t)
        return;
    for (int i = 0; i < t->n_blocks; i++)
        free(t->blocks[i]);
    arena_free(t->a);
}

size_t tree_index_bytes(const tree_index *t)
{
    return t ? arena_bytes(t->a) + t->block_bytes : 0;
}

int32_t tree_index_node_count(const tree_index *t) { return t->n; }
int32_t tree_index_edge_count(const tree_index *t) { return t->n_edges; }
int32_t tree_index_root_count(const tree_index *t) { return t->n_roots; }
int32_t tree_index_leaf_total(const tree_index *t) { return t->n_leaves; }
int32_t tree_index_max_depth(const tree_index *t) { return t->max_depth; }

const int32_t *tree_index_roots(const tree_index *t, int32_t *n)
{
    *n = t->n_roots;
    return t->roots;
}

const char *tree_index_id(const tree_index *t, int32_t node) { return t->id[node]; }
const char *tree_index_attrs(const tree_index *t, int32_t node)
{
    return t->attrs ? t->attrs[node] : empty_attrs;
}

const char *tree_index_edge_attrs(const tree_index *t, int32_t node)
{
    if (t->eattrs)
        return t->eattrs[node];
    return t->parent[node] >= 0 ? empty_attrs : NULL;
}
double tree_index_branch_length(const tree_index *t, int32_t node) { return t->blen[node]; }
int32_t tree_index_parent(const tree_index *t, int32_t node) { return t->parent[node]; }
int32_t tree_index_depth(const tree_index *t, int32_t node) { return t->depth[node]; }
int32_t tree_index_preorder(const tree_index *t, int32_t node) { return t->pre[node]; }
int32_t tree_index_subtree_end(const tree_index *t, int32_t node) { return t->end[node]; }
int32_t tree_index_node_at(const tree_index *t, int32_t pos) { return t->order[pos]; }
int32_t tree_index_leaf_count(const tree_index *t, int32_t node) { return t->leaf_count[node]; }
int32_t tree_index_leaf_first(const tree_index *t, int32_t node) { return t->leaf_first[node]; }
double tree_index_x(const tree_index *t, int32_t node) { return t->x[node]; }
double tree_index_y(const tree_index *t, int32_t node) { return t->y[node]; }
double tree_index_x_max(const tree_index *t, int32_t node) { return t->xmax[node]; }
int tree_index_uses_length(const tree_index *t) { return t->uses_length; }

const int32_t *tree_index_children(const tree_index *t, int32_t node, int32_t *n)
{
    *n = t->child_off[node + 1] - t->child_off[node];
    return t->child + t->child_off[node];
}

int tree_index_is_ancestor(const tree_index *t, int32_t anc, int32_t node)
{
    return t->pre[anc] <= t->pre[node] && t->pre[node] < t->end[anc];
}

const int32_t *tree_index_leaves(const tree_index *t, int32_t node, int32_t offset,
                                 int32_t max, int32_t *n_out, int32_t *n_total)
{
    int32_t total = t->leaf_count[node];
    if (n_total)
        *n_total = total;
    if (offset < 0)
        offset = 0;
    int32_t avail = offset < total ? total - offset : 0;
    *n_out = max < 0 ? 0 : (avail < max ? avail : max);
    return t->leaves + t->leaf_first[node] + (offset < total ? offset : total);
}

static int32_t lca2(const tree_index *t, int32_t u, int32_t v)
{
    if (u == v)
        return u;
    int32_t pu = t->pre[u], pv = t->pre[v];
    if (pu > pv) {
        int32_t tmp = pu;
        pu = pv;
        pv = tmp;
    }
    /* The least deep node in preorder (pu, pv] is a child of the LCA, or a
     * root when u and v lie in different trees of the forest. */
    int32_t w = t->order[rmq_query(t, pu + 1, pv)];
    return t->parent[w];
}

int32_t tree_index_lca(const tree_index *t, const int32_t *nodes, int32_t k)
{
    if (k <= 0)
        return -1;
    /* The LCA of a set is the LCA of its first and last node in preorder. */
    int32_t lo = nodes[0], hi = nodes[0];
    for (int32_t i = 1; i < k; i++) {
        if (t->pre[nodes[i]] < t->pre[lo])
            lo = nodes[i];
        if (t->pre[nodes[i]] > t->pre[hi])
            hi = nodes[i];
    }
    return lca2(t, lo, hi);
}

int tree_index_ancestors(const tree_index *t, int32_t node, arena *a, int32_t **out,
                         int32_t *n_out, cellar_error *err)
{
    int32_t n = t->depth[node] + 1;
    int32_t *path = arena_calloc(a, (size_t)n, sizeof *path);
    if (!path)
        return fail_nomem(err);
    for (int32_t i = n - 1, v = node; i >= 0; i--, v = t->parent[v])
        path[i] = v;
    *out = path;
    *n_out = n;
    return 0;
}

int tree_index_subtree(const tree_index *t, int32_t root, int32_t max_depth,
                       int32_t max_nodes, arena *a, int32_t **out, int32_t *n_out,
                       int *truncated, cellar_error *err)
{
    *out = NULL;
    *n_out = 0;
    *truncated = 0;
    if (max_nodes <= 0)
        return cellar_fail(err, CELLAR_EINVAL, "max_nodes must be positive");
    int32_t cap = max_nodes < t->n ? max_nodes : t->n;
    int32_t *q = arena_calloc(a, (size_t)(cap ? cap : 1), sizeof *q);
    if (!q)
        return fail_nomem(err);
    int32_t count = 0, base_depth = 0;
    if (root >= 0) {
        if (cap > 0)
            q[count++] = root;
        base_depth = t->depth[root];
    } else {
        for (int32_t r = 0; r < t->n_roots; r++) {
            if (count == cap) {
                *truncated = 1;
                break;
            }
            q[count++] = t->roots[r];
        }
    }
    for (int32_t head = 0; head < count && !*truncated; head++) {
        int32_t v = q[head];
        if (max_depth >= 0 && t->depth[v] - base_depth >= max_depth)
            continue;
        for (int32_t c = t->child_off[v]; c < t->child_off[v + 1]; c++) {
            if (count == cap) {
                *truncated = 1;
                break;
            }
            q[count++] = t->child[c];
        }
    }
    *out = q;
    *n_out = count;
    return 0;
}

/* ---- viewport ----------------------------------------------------------- */

typedef struct {
    const tree_index *t;
    const tree_viewport *box;
    int32_t *heap;   /* collapsed clades still to open, biggest first */
    int32_t heap_n;
    int32_t *done;   /* entries decided: node * 2 + collapsed */
    int32_t done_n;
    int32_t budget;  /* max_nodes - (heap_n + done_n) */
} viewport_run;

static int view_point_in(const viewport_run *r, int32_t v)
{
    const tree_viewport *b = r->box;
    double x = r->t->x[v], y = r->t->y[v];
    return x >= b->x0 && x <= b->x1 && y >= b->y0 && y <= b->y1;
}

static int view_subtree_meets(const viewport_run *r, int32_t v)
{
    const tree_index *t = r->t;
    const tree_viewport *b = r->box;
    double ylo = t->leaf_first[v], yhi = ylo + t->leaf_count[v] - 1;
    return t->x[v] <= b->x1 && t->xmax[v] >= b->x0 && ylo <= b->y1 && yhi >= b->y0;
}

static int heap_before(const tree_index *t, int32_t a, int32_t b)
{
    if (t->leaf_count[a] != t->leaf_count[b])
        return t->leaf_count[a] > t->leaf_count[b];
    return t->pre[a] < t->pre[b];
}

static void heap_push(viewport_run *r, int32_t v)
{
    int32_t i = r->heap_n++;
    r->heap[i] = v;
    while (i > 0) {
        int32_t p = (i - 1) / 2;
        if (!heap_before(r->t, r->heap[i], r->heap[p]))
            break;
        int32_t tmp = r->heap[i];
        r->heap[i] = r->heap[p];
        r->heap[p] = tmp;
        i = p;
    }
}

static int32_t heap_pop(viewport_run *r)
{
    int32_t top = r->heap[0];
    r->heap[0] = r->heap[--r->heap_n];
    int32_t i = 0;
    for (;;) {
        int32_t l = 2 * i + 1, m = i;
        if (l < r->heap_n && heap_before(r->t, r->heap[l], r->heap[m]))
            m = l;
        if (l + 1 < r->heap_n && heap_before(r->t, r->heap[l + 1], r->heap[m]))
            m = l + 1;
        if (m == i)
            break;
        int32_t tmp = r->heap[i];
        r->heap[i] = r->heap[m];
        r->heap[m] = tmp;
        i = m;
    }
    return top;
}

void tree_index_y_span(const tree_index *t, const int32_t *list, int32_t n, double y0, double y1,
                       int32_t *lo_out, int32_t *hi_out)
{
    int32_t lo = 0, hi = n;
    while (lo < hi) {
        int32_t mid = lo + (hi - lo) / 2;
        int32_t v = list[mid];
        if ((double)t->leaf_first[v] + t->leaf_count[v] - 1 < y0)
            lo = mid + 1;
        else
            hi = mid;
    }
    int32_t first = lo;
    hi = n;
    while (lo < hi) {
        int32_t mid = lo + (hi - lo) / 2;
        if ((double)t->leaf_first[list[mid]] <= y1)
            lo = mid + 1;
        else
            hi = mid;
    }
    *lo_out = first;
    *hi_out = lo;
}

static void view_y_span(const viewport_run *r, const int32_t *list, int32_t n, int32_t *lo_out,
                        int32_t *hi_out)
{
    tree_index_y_span(r->t, list, n, r->box->y0, r->box->y1, lo_out, hi_out);
}

/* Adds the members of list[lo..hi) that reach into the box: leaves as
 * points, others as clades to open. */
static void view_add(viewport_run *r, const int32_t *list, int32_t lo, int32_t hi)
{
    const tree_index *t = r->t;
    for (int32_t i = lo; i < hi; i++) {
        int32_t c = list[i];
        if (!view_subtree_meets(r, c))
            continue;
        if (t->child_off[c + 1] == t->child_off[c])
            r->done[r->done_n++] = c * 2;
        else
            heap_push(r, c);
        r->budget--;
    }
}

/* How many of list[lo..hi) reach into the box, counting no further than
 * limit + 1. */
static int32_t view_count(const viewport_run *r, const int32_t *list, int32_t lo, int32_t hi,
                          int32_t limit)
{
    int32_t k = 0;
    for (int32_t i = lo; i < hi && k <= limit; i++)
        k += view_subtree_meets(r, list[i]);
    return k;
}

static int cmp_entry_pre(const void *pa, const void *pb, void *ctx)
{
    const tree_index *t = ctx;
    const tree_view_entry *a = pa, *b = pb;
    return (t->pre[a->node] > t->pre[b->node]) - (t->pre[a->node] < t->pre[b->node]);
}

static int view_check(const tree_viewport *b, cellar_error *err)
{
    if (b->max_nodes <= 0)
        return cellar_fail(err, CELLAR_EINVAL, "max_nodes must be positive");
    if (isnan(b->x0) || isnan(b->x1) || isnan(b->y0) || isnan(b->y1))
        return cellar_fail(err, CELLAR_EINVAL, "viewport bounds must be numbers");
    if (b->x0 > b->x1 || b->y0 > b->y1)
        return cellar_fail(err, CELLAR_EINVAL, "viewport needs x0 <= x1 and y0 <= y1");
    return 0;
}

static void view_open_all(viewport_run *r, int *truncated)
{
    const tree_index *t = r->t;
    while (r->heap_n > 0) {
        int32_t v = heap_pop(r);
        int32_t nc = t->child_off[v + 1] - t->child_off[v];
        const int32_t *kids = t->child + t->child_off[v];
        int32_t lo, hi;
        view_y_span(r, kids, nc, &lo, &hi);
        int in = view_point_in(r, v);
        /* Opening v frees its own entry unless v itself is in the box. */
        int32_t room = r->budget + 1 - in;
        int32_t k = view_count(r, kids, lo, hi, room);
        if (k > room) {
            r->done[r->done_n++] = v * 2 + 1;
            *truncated = 1;
            continue;
        }
        r->budget += 1;
        if (in) {
            r->done[r->done_n++] = v * 2;
            r->budget--;
        }
        view_add(r, kids, lo, hi);
    }
}

int tree_index_viewport(const tree_index *t, const tree_viewport *box, arena *a,
                        tree_view_entry **out, int32_t *n_out, int *truncated,
                        cellar_error *err)
{
    int rc = 0;
    viewport_run r = {.t = t, .box = box};
    *out = NULL;
    *n_out = 0;
    *truncated = 0;
    if ((rc = view_check(box, err)) < 0)
        return rc;
    int32_t cap = box->max_nodes < t->n ? box->max_nodes : t->n;
    r.heap = malloc((size_t)(cap + 1) * sizeof *r.heap);
    r.done = malloc((size_t)(cap + 1) * sizeof *r.done);
    if (!r.heap || !r.done) {
        rc = fail_nomem(err);
        goto done;
    }
    r.budget = cap;
    int32_t lo, hi;
    view_y_span(&r, t->roots, t->n_roots, &lo, &hi);
    int32_t k = view_count(&r, t->roots, lo, hi, cap);
    if (k > cap) {
        /* More roots reach into the box than fit: keep the first ones. */
        *truncated = 1;
        int32_t taken = 0, i = lo;
        for (; i < hi && taken < cap; i++)
            taken += view_subtree_meets(&r, t->roots[i]);
        hi = i;
    }
    view_add(&r, t->roots, lo, hi);
    view_open_all(&r, truncated);
    tree_view_entry *e = arena_calloc(a, (size_t)(r.done_n ? r.done_n : 1), sizeof *e);
    if (!e) {
        rc = fail_nomem(err);
        goto done;
    }
    for (int32_t i = 0; i < r.done_n; i++) {
        e[i].node = r.done[i] / 2;
        e[i].collapsed = r.done[i] % 2;
    }
    qsort_r(e, (size_t)r.done_n, sizeof *e, cmp_entry_pre, (void *)t);
    *out = e;
    *n_out = r.done_n;
done:
    free(r.heap);
    free(r.done);
    return rc;
}

/* ---- forest ------------------------------------------------------------- */

struct tree_forest {
    size_t n, cap;
    char **keys;
    tree_index **trees;
};

tree_forest *tree_forest_new(void)
{
    return calloc(1, sizeof(tree_forest));
}

void tree_forest_free(tree_forest *f)
{
    if (!f)
        return;
    for (size_t i = 0; i < f->n; i++) {
        free(f->keys[i]);
        tree_index_free(f->trees[i]);
    }
    free(f->keys);
    free(f->trees);
    free(f);
}

int tree_forest_add(tree_forest *f, const char *key, tree_index *t, cellar_error *err)
{
    int rc = 0;
    char *k = NULL;
    if (tree_forest_get(f, key)) {
        rc = cellar_fail(err, CELLAR_EFORMAT, "tree key '%s' appears twice", key);
        goto done;
    }
    if (f->n == f->cap) {
        size_t cap = f->cap ? f->cap * 2 : 4;
        char **keys = realloc(f->keys, cap * sizeof *keys);
        if (keys)
            f->keys = keys;
        tree_index **trees = keys ? realloc(f->trees, cap * sizeof *trees) : NULL;
        if (!trees) {
            rc = fail_nomem(err);
            goto done;
        }
        f->trees = trees;
        f->cap = cap;
    }
    k = strdup(key);
    if (!k) {
        rc = fail_nomem(err);
        goto done;
    }
    f->keys[f->n] = k;
    f->trees[f->n++] = t;
    return 0;
done:
    tree_index_free(t);
    return rc;
}

size_t tree_forest_count(const tree_forest *f) { return f->n; }
const char *tree_forest_key(const tree_forest *f, size_t i) { return f->keys[i]; }
const tree_index *tree_forest_tree(const tree_forest *f, size_t i) { return f->trees[i]; }

const tree_index *tree_forest_get(const tree_forest *f, const char *key)
{
    for (size_t i = 0; i < f->n; i++)
        if (strcmp(f->keys[i], key) == 0)
            return f->trees[i];
    return NULL;
}

size_t tree_forest_bytes(const tree_forest *f)
{
    size_t total = sizeof *f + f->cap * (sizeof *f->keys + sizeof *f->trees);
    for (size_t i = 0; i < f->n; i++)
        total += strlen(f->keys[i]) + 1 + tree_index_bytes(f->trees[i]);
    return total;
}
