#include "tests/unit/mem_node.h"

#include <stdlib.h>
#include <string.h>

#include "storage/node_impl.h"

typedef struct mem_impl {
    unsigned char *data;   /* numeric: count * dtype_size bytes */
    char **strs;           /* strings: count entries */
    int64_t count;
    uint64_t values_read, read_calls;
} mem_impl;

static int mem_open_child(node *parent, const char *name, node **out, cellar_error *err)
{
    *out = NULL;
    return cellar_fail(err, CELLAR_ENOTFOUND, "no element '%s' in '%s'", name,
                       node_path(parent));
}

static int mem_list_children(node *n, arena *a, const char ***names, size_t *count,
                             cellar_error *err)
{
    size_t k = 0;
    pthread_mutex_lock(&n->lock);
    for (node_child_link *l = n->children; l; l = l->next)
        k++;
    const char **v = arena_calloc(a, k ? k : 1, sizeof *v);
    if (v) {
        /* Links are prepended: walk them backwards into creation order. */
        size_t i = k;
        for (node_child_link *l = n->children; l; l = l->next)
            v[--i] = arena_strdup(a, l->child->name);
    }
    pthread_mutex_unlock(&n->lock);
    if (!v)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory listing '%s'", n->path);
    for (size_t i = 0; i < k; i++)
        if (!v[i])
            return cellar_fail(err, CELLAR_ENOMEM, "out of memory listing '%s'", n->path);
    *names = v;
    *count = k;
    return 0;
}

/* Calls visit(flat offset, i) for every selected item in C order; checks
 * every position against the shape. */
typedef void (*visit_fn)(node *n, int64_t off, int64_t i, void *ctx);

static int walk_sel(node *n, const dim_sel *sel, visit_fn visit, void *ctx, cellar_error *err)
{
    int ndim = n->info.ndim;
    if (ndim < 0)
        return cellar_fail(err, CELLAR_EFORMAT, "'%s' has no values", n->path);
    int64_t total = node_sel_count(sel, ndim);
    int64_t stride[NODE_MAX_DIMS], ctr[NODE_MAX_DIMS] = {0};
    int64_t s = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        stride[d] = s;
        s *= n->info.shape[d];
    }
    for (int64_t i = 0; i < total; i++) {
        int64_t off = 0;
        for (int d = 0; d < ndim; d++) {
            int64_t p = dim_sel_at(&sel[d], ctr[d]);
            if (p < 0 || p >= n->info.shape[d])
                return cellar_fail(err, CELLAR_ERANGE, "position %lld outside '%s'",
                                   (long long)p, n->path);
            off += p * stride[d];
        }
        visit(n, off, i, ctx);
        for (int d = ndim - 1; d >= 0; d--) {
            if (++ctr[d] < sel[d].count)
                break;
            ctr[d] = 0;
        }
    }
    mem_impl *m = n->impl;
    m->values_read += (uint64_t)total;
    m->read_calls++;
    return 0;
}

static void copy_value(node *n, int64_t off, int64_t i, void *ctx)
{
    mem_impl *m = n->impl;
    size_t sz = dtype_size(n->info.dtype);
    memcpy((unsigned char *)ctx + (size_t)i * sz, m->data + (size_t)off * sz, sz);
}

static int mem_read(node *n, const dim_sel *sel, void *out, size_t out_bytes, cellar_error *err)
{
    (void)out_bytes; /* node_read checked it */
    return walk_sel(n, sel, copy_value, out, err);
}

typedef struct str_ctx {
    arena *a;
    char **out;
    int failed;
} str_ctx;

static void copy_string(node *n, int64_t off, int64_t i, void *ctx)
{
    mem_impl *m = n->impl;
    str_ctx *c = ctx;
    c->out[i] = arena_strdup(c->a, m->strs[off]);
    if (!c->out[i])
        c->failed = 1;
}

static int mem_read_strings(node *n, const dim_sel *sel, arena *a, char **out,
                            cellar_error *err)
{
    str_ctx c = {a, out, 0};
    int rc = walk_sel(n, sel, copy_string, &c, err);
    if (!rc && c.failed)
        rc = cellar_fail(err, CELLAR_ENOMEM, "out of memory reading '%s'", n->path);
    return rc;
}

static void mem_destroy(node *n)
{
    mem_impl *m = n->impl;
    if (!m)
        return;
    if (m->strs)
        for (int64_t i = 0; i < m->count; i++)
            free(m->strs[i]);
    free(m->strs);
    free(m->data);
    free(m);
}

static const node_ops mem_ops = {
    .open_child = mem_open_child,
    .list_children = mem_list_children,
    .read = mem_read,
    .read_strings = mem_read_strings,
    .destroy = mem_destroy,
    .mutable_nodes = 1, /* tests edit attributes and add children as they go */
};

/* A node linked under parent (or a root), with an empty impl. */
static node *mem_make(node *parent, const char *name, node_type type)
{
    if (parent && node_child_opt(parent, name))
        return NULL;
    node *n = node_new(&mem_ops, parent, name);
    if (!n)
        return NULL;
    n->impl = calloc(1, sizeof(mem_impl));
    n->info.type = type;
    node_child_link *link = parent ? malloc(sizeof *link) : NULL;
    if (!n->impl || (parent && !link)) {
        free(link);
        node_tree_free(n);
        return NULL;
    }
    if (parent) {
        pthread_mutex_lock(&parent->lock);
        link->child = n;
        link->next = parent->children;
        parent->children = link;
        pthread_mutex_unlock(&parent->lock);
    }
    return n;
}

node *mem_root(void)
{
    return mem_make(NULL, "", NODE_GROUP);
}

node *mem_group(node *parent, const char *name)
{
    return mem_make(parent, name, NODE_GROUP);
}

static int set_shape(node *n, int ndim, const int64_t *shape, int64_t *count)
{
    if (ndim > NODE_MAX_DIMS)
        return -1;
    n->info.ndim = ndim;
    int64_t c = ndim < 0 ? 0 : 1;
    for (int d = 0; d < ndim; d++) {
        n->info.shape[d] = shape[d];
        c *= shape[d];
    }
    *count = c;
    return 0;
}

node *mem_array(node *parent, const char *name, dtype_kind dt, int ndim, const int64_t *shape,
                const void *data)
{
    node *n = mem_make(parent, name, NODE_ARRAY);
    if (!n)
        return NULL;
    mem_impl *m = n->impl;
    n->info.dtype = dt;
    if (set_shape(n, ndim, shape, &m->count))
        return NULL;
    size_t bytes = (size_t)m->count * dtype_size(dt);
    m->data = malloc(bytes ? bytes : 1);
    if (!m->data)
        return NULL;
    if (bytes && data)
        memcpy(m->data, data, bytes);
    return n;
}

node *mem_array1(node *parent, const char *name, dtype_kind dt, int64_t n, const void *data)
{
    return mem_array(parent, name, dt, 1, &n, data);
}

node *mem_strings(node *parent, const char *name, int ndim, const int64_t *shape,
                  const char *const *strs)
{
    node *n = mem_make(parent, name, NODE_ARRAY);
    if (!n)
        return NULL;
    mem_impl *m = n->impl;
    n->info.dtype = DT_STRING;
    int64_t count;
    if (set_shape(n, ndim, shape, &count))
        return NULL;
    m->strs = calloc((size_t)(count ? count : 1), sizeof *m->strs);
    if (!m->strs)
        return NULL;
    m->count = count;
    for (int64_t i = 0; i < count; i++)
        if (!(m->strs[i] = strdup(strs[i])))
            return NULL;
    return n;
}

node *mem_strings1(node *parent, const char *name, int64_t n, const char *const *strs)
{
    return mem_strings(parent, name, 1, &n, strs);
}

node *mem_empty(node *parent, const char *name, dtype_kind dt)
{
    return mem_array(parent, name, dt, -1, NULL, NULL);
}

node *mem_attrs(node *n, const char *json_text)
{
    if (!n)
        return NULL;
    json_t *v = json_loads(json_text, JSON_DECODE_ANY, NULL);
    if (!json_is_object(v) || json_object_update(n->attrs, v)) {
        json_decref(v);
        return NULL;
    }
    json_decref(v);
    return n;
}

node *mem_enc(node *n, const char *type, const char *version)
{
    if (!n)
        return NULL;
    json_object_set_new(n->attrs, "encoding-type", json_string(type));
    json_object_set_new(n->attrs, "encoding-version", json_string(version));
    return n;
}

uint64_t mem_values_read(const node *n)
{
    return ((const mem_impl *)n->impl)->values_read;
}

uint64_t mem_read_calls(const node *n)
{
    return ((const mem_impl *)n->impl)->read_calls;
}
