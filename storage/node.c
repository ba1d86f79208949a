#include "storage/node_impl.h"

#include <stdatomic.h>
#include <time.h>

#include <stdlib.h>
#include <string.h>

/* Start times of calls now inside a backend with ops->process_lock.  Process-wide
 * state on purpose: the lock it watches (libhdf5's) is process-wide too.
 * A call that finds every slot taken goes untimed. */
enum { LOCKED_CALL_SLOTS = 256 };
static _Atomic int64_t locked_call_start_ns[LOCKED_CALL_SLOTS];

static int64_t monotonic_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

int node_locked_call_enter(void)
{
    int64_t now = monotonic_ns(), free_slot = 0;
    for (int i = 0; i < LOCKED_CALL_SLOTS; i++) {
        free_slot = 0;
        if (atomic_compare_exchange_strong(&locked_call_start_ns[i], &free_slot, now))
            return i;
    }
    return -1;
}

void node_locked_call_leave(int slot)
{
    if (slot >= 0)
        atomic_store(&locked_call_start_ns[slot], 0);
}

/* Marks a call into n's backend as started; returns its slot or -1. */
static int call_enter(const node *n)
{
    return n->ops->process_lock ? node_locked_call_enter() : -1;
}

static void call_leave(int slot)
{
    node_locked_call_leave(slot);
}

double node_locked_backend_busy_seconds(void)
{
    int64_t oldest = 0;
    for (int i = 0; i < LOCKED_CALL_SLOTS; i++) {
        int64_t t = atomic_load(&locked_call_start_ns[i]);
        if (t && (!oldest || t < oldest))
            oldest = t;
    }
    return oldest ? (double)(monotonic_ns() - oldest) / 1e9 : 0;
}

node *node_new(const node_ops *ops, node *parent, const char *name)
{
    node *n = calloc(1, sizeof *n);
    if (!n)
        return NULL;
    n->ops = ops;
    n->parent = parent;
    n->root = parent ? parent->root : n;
    n->name = strdup(name ? name : "");
    if (!parent) {
        n->path = strdup("/");
    } else {
        size_t pl = strlen(parent->path), nl = strlen(n->name ? n->name : "");
        n->path = malloc(pl + nl + 2);
        if (n->path) {
            memcpy(n->path, parent->path, pl);
            size_t off = pl;
            if (pl > 1)
                n->path[off++] = '/';
            memcpy(n->path + off, name, nl + 1);
        }
    }
    n->attrs = json_object();
    pthread_mutex_init(&n->lock, NULL);
    pthread_mutex_init(&n->memo_lock, NULL);
    pthread_mutex_init(&n->list_lock, NULL);
    if (!n->name || !n->path || !n->attrs) {
        free(n->name);
        free(n->path);
        json_decref(n->attrs);
        pthread_mutex_destroy(&n->lock);
        pthread_mutex_destroy(&n->memo_lock);
        pthread_mutex_destroy(&n->list_lock);
        free(n);
        return NULL;
    }
    return n;
}

const node_info *node_get_info(const node *n)
{
    return &n->info;
}

const json_t *node_attrs(const node *n)
{
    return n->attrs;
}

const char *node_attr_string(const node *n, const char *name)
{
    return json_string_value(json_object_get(n->attrs, name));
}

const char *node_path(const node *n)
{
    return n->path;
}

const char *node_name(const node *n)
{
    return n->name;
}

/* Groups have children, and arrays of records have their fields. */
static int node_has_children(const node *n)
{
    return n->info.type == NODE_GROUP || (n->info.type == NODE_ARRAY && n->info.n_fields > 0);
}

/* Absent names kept per node: the usual probes ("raw", "layers", ...), not
 * every name a client may try. */
#define NODE_ABSENT_MAX 16

/* Under n->lock. A failed allocation only loses the shortcut. */
static void remember_absent(node *n, const char *name, const char *detail)
{
    size_t len = strlen(name);
    if (len > 255)
        return;
    node_absent *a = malloc(sizeof *a + len + 1);
    if (!a)
        return;
    a->detail = strdup(detail);
    if (!a->detail) {
        free(a);
        return;
    }
    memcpy(a->name, name, len + 1);
    a->next = n->absent;
    n->absent = a;
    n->n_absent++;
}

static int node_list_once(node *n, cellar_error *err);

/* For ops->children_by_listing: 0 when name is among n's listed children,
 * else why not (the listing's own failure, or ENOTFOUND). */
static int listed_child(node *n, const char *name, cellar_error *err)
{
    pthread_mutex_lock(&n->list_lock);
    cellar_error local;
    cellar_error_clear(&local);
    int rc = node_list_once(n, &local);
    int found = 0;
    for (size_t i = 0; !rc && i < n->n_listing && !found; i++)
        found = strcmp(n->listing[i], name) == 0;
    pthread_mutex_unlock(&n->list_lock);
    if (rc)
        return cellar_fail(err, rc == CELLAR_ENOMEM ? rc : CELLAR_EFORMAT,
                           "'%s' cannot be listed: %s", n->path, local.detail);
    if (!found)
        return cellar_fail(err, CELLAR_ENOTFOUND, "no element '%s' in '%s'", name, n->path);
    return 0;
}

int node_child(node *n, const char *name, node **out, cellar_error *err)
{
    *out = NULL;
    if (!node_has_children(n))
        return cellar_fail(err, CELLAR_ENOTFOUND, "'%s' is not a group", n->path);
    /* A record's field may be named "CD4+/CD25 T Reg"; a child never is. */
    if (!name[0] || (n->info.type == NODE_GROUP && strchr(name, '/')))
        return cellar_fail(err, CELLAR_ENOTFOUND, "no element '%s' in '%s'", name, n->path);
    if (n->ops->children_by_listing) {
        int lrc = listed_child(n, name, err);
        if (lrc)
            return lrc;
    }
    int rc = 0;
    pthread_mutex_lock(&n->lock);
    for (node_child_link *l = n->children; l; l = l->next) {
        if (strcmp(l->child->name, name) == 0) {
            *out = l->child;
            goto done;
        }
    }
    if (!n->ops->mutable_nodes) {
        for (node_absent *a = n->absent; a; a = a->next) {
            if (strcmp(a->name, name) == 0) {
                rc = cellar_fail(err, CELLAR_ENOTFOUND, "%s", a->detail);
                goto done;
            }
        }
    }
    node *child = NULL;
    cellar_error e;
    cellar_error_clear(&e);
    int slot = call_enter(n);
    rc = n->ops->open_child(n, name, &child, &e);
    call_leave(slot);
    if (rc) {
        if (rc == CELLAR_ENOTFOUND && !n->ops->mutable_nodes && n->n_absent < NODE_ABSENT_MAX)
            remember_absent(n, name, e.detail);
        cellar_fail(err, rc, "%s", e.detail);
        goto done;
    }
    node_child_link *link = malloc(sizeof *link);
    if (!link) {
        node_tree_free(child);
        rc = cellar_fail(err, CELLAR_ENOMEM, "out of memory opening '%s'", name);
        goto done;
    }
    link->child = child;
    link->next = n->children;
    n->children = link;
    *out = child;
done:
    pthread_mutex_unlock(&n->lock);
    return rc;
}

node *node_child_opt(node *n, const char *name)
{
    node *out = NULL;
    cellar_error err;
    cellar_error_clear(&err);
    if (node_child(n, name, &out, &err))
        return NULL;
    return out;
}

int node_resolve(node *n, const char *path, node **out, cellar_error *err)
{
    *out = NULL;
    if (path[0] == '/')
        n = n->root;
    node *cur = n;
    const char *s = path;
    while (*s) {
        while (*s == '/')
            s++;
        if (!*s)
            break;
        const char *e = strchr(s, '/');
        size_t len = e ? (size_t)(e - s) : strlen(s);
        char name[1024];
        if (len >= sizeof name)
            return cellar_fail(err, CELLAR_ENOTFOUND, "path component too long in '%.200s'",
                               path);
        memcpy(name, s, len);
        name[len] = '\0';
        int rc = node_child(cur, name, &cur, err);
        if (rc)
            return rc;
        s += len;
    }
    *out = cur;
    return 0;
}

/* Makes n's listing once; under n->list_lock. */
static int node_list_once(node *n, cellar_error *err)
{
    if (n->listed)
        return 0;
    arena *a = arena_new();
    if (!a)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory listing '%s'", n->path);
    const char **names = NULL;
    size_t count = 0;
    int slot = call_enter(n);
    int rc = n->ops->list_children(n, a, &names, &count, err);
    call_leave(slot);
    if (rc) {
        arena_free(a);
        return rc;
    }
    n->listing = names;
    n->n_listing = count;
    n->listing_arena = a;
    n->listed = 1;
    return 0;
}

int node_children(node *n, arena *a, const char ***names, size_t *count, cellar_error *err)
{
    *names = NULL;
    *count = 0;
    if (!node_has_children(n))
        return cellar_fail(err, CELLAR_ENOTFOUND, "'%s' is not a group", n->path);
    if (n->ops->mutable_nodes)
        return n->ops->list_children(n, a, names, count, err);
    pthread_mutex_lock(&n->list_lock);
    int rc = node_list_once(n, err);
    size_t k = n->n_listing;
    const char **copy = rc ? NULL : arena_calloc(a, k ? k : 1, sizeof *copy);
    if (!rc && !copy)
        rc = cellar_fail(err, CELLAR_ENOMEM, "out of memory listing '%s'", n->path);
    if (!rc && k)
        memcpy(copy, n->listing, k * sizeof *copy);
    pthread_mutex_unlock(&n->list_lock);
    if (rc)
        return rc;
    *names = copy;
    *count = k;
    return 0;
}

int node_memo(node *n, const void *key, node_memo_build_fn build, void *ctx,
              void (*free_fn)(void *value), void **value, cellar_error *err)
{
    *value = NULL;
    int rc = 0;
    pthread_mutex_lock(&n->memo_lock);
    for (node_memo_entry *e = n->memos; e; e = e->next) {
        if (e->key == key && !n->ops->mutable_nodes) {
            *value = e->value;
            goto done;
        }
    }
    node_memo_entry *e = malloc(sizeof *e);
    if (!e) {
        rc = cellar_fail(err, CELLAR_ENOMEM, "out of memory reading '%s'", n->path);
        goto done;
    }
    void *v = NULL;
    rc = build(n, ctx, &v, err);
    if (rc) {
        free(e);
        goto done;
    }
    e->key = key;
    e->value = v;
    e->free_fn = free_fn;
    e->next = n->memos;
    n->memos = e;
    *value = v;
done:
    pthread_mutex_unlock(&n->memo_lock);
    return rc;
}

int64_t node_sel_count(const dim_sel *sel, int ndim)
{
    int64_t total = 1;
    for (int i = 0; i < ndim; i++) {
        int64_t c = sel[i].count;
        if (c < 0)
            return -1;
        if (c && total > INT64_MAX / c)
            return -1;
        total *= c;
    }
    return total;
}

static int check_array(node *n, const dim_sel *sel, cellar_error *err)
{
    if (n->info.type != NODE_ARRAY)
        return cellar_fail(err, CELLAR_EINVAL, "'%s' is a group, not an array", n->path);
    if (n->info.ndim > 0 && !sel)
        return cellar_fail(err, CELLAR_EINTERNAL, "no selection for '%s'", n->path);
    for (int d = 0; d < n->info.ndim; d++) {
        const dim_sel *s = &sel[d];
        if (s->count == 0)
            continue;
        int64_t first = dim_sel_at(s, 0), last = dim_sel_at(s, s->count - 1);
        if (!s->index && (first < 0 || first >= n->info.shape[d] || last < 0 ||
                          last >= n->info.shape[d]))
            return cellar_fail(err, CELLAR_ERANGE, "selection outside '%s'", n->path);
    }
    return 0;
}

int node_file_extent(node *n, int *fd, uint64_t *offset, uint64_t *length)
{
    if (n->info.type != NODE_ARRAY || !dtype_is_numeric(n->info.dtype) ||
        n->info.dtype == DT_BOOL || !n->ops->file_extent)
        return 1;
    int slot = call_enter(n);
    int rc_call = n->ops->file_extent(n, fd, offset, length);
    call_leave(slot);
    return rc_call;
}

int node_stream_string(node *n, size_t piece, node_string_sink sink, void *ctx,
                       cellar_error *err)
{
    if (n->info.type != NODE_ARRAY || n->info.dtype != DT_STRING || !n->ops->stream_string ||
        piece == 0)
        return cellar_fail(err, CELLAR_EINVAL, "'%s' cannot be streamed", n->path);
    int slot = call_enter(n);
    int rc_call = n->ops->stream_string(n, piece, sink, ctx, err);
    call_leave(slot);
    return rc_call;
}

int node_read(node *n, const dim_sel *sel, void *out, size_t out_bytes, cellar_error *err)
{
    int rc = check_array(n, sel, err);
    if (rc)
        return rc;
    if (n->info.dtype == DT_STRING || n->info.dtype == DT_NONE)
        return cellar_fail(err, CELLAR_EINVAL, "'%s' is not numeric", n->path);
    int ndim = n->info.ndim < 0 ? 0 : n->info.ndim;
    int64_t count = node_sel_count(sel, ndim);
    if (count < 0 || (uint64_t)count * dtype_size(n->info.dtype) != out_bytes)
        return cellar_fail(err, CELLAR_EINTERNAL, "read buffer size mismatch for '%s'",
                           n->path);
    if (count == 0)
        return 0;
    int slot = call_enter(n);
    int rc_call = n->ops->read(n, sel, out, out_bytes, err);
    call_leave(slot);
    return rc_call;
}

int node_read_strings(node *n, const dim_sel *sel, arena *a, char **out, cellar_error *err)
{
    int rc = check_array(n, sel, err);
    if (rc)
        return rc;
    if (n->info.dtype != DT_STRING)
        return cellar_fail(err, CELLAR_EINVAL, "'%s' is not a string array", n->path);
    int ndim = n->info.ndim < 0 ? 0 : n->info.ndim;
    if (node_sel_count(sel, ndim) == 0)
        return 0;
    int slot = call_enter(n);
    int rc_call = n->ops->read_strings(n, sel, a, out, err);
    call_leave(slot);
    return rc_call;
}

static void node_free_one(node *n)
{
    node_child_link *l = n->children;
    while (l) {
        node_child_link *next = l->next;
        node_free_one(l->child);
        free(l);
        l = next;
    }
    node_memo_entry *m = n->memos;
    while (m) {
        node_memo_entry *next = m->next;
        if (m->free_fn)
            m->free_fn(m->value);
        free(m);
        m = next;
    }
    arena_free(n->listing_arena);
    node_absent *ab = n->absent;
    while (ab) {
        node_absent *next = ab->next;
        free(ab->detail);
        free(ab);
        ab = next;
    }
    if (n->ops && n->ops->destroy)
        n->ops->destroy(n);
    json_decref(n->attrs);
    pthread_mutex_destroy(&n->lock);
    pthread_mutex_destroy(&n->memo_lock);
    pthread_mutex_destroy(&n->list_lock);
    free(n->name);
    free(n->path);
    free(n);
}

void node_tree_free(node *root)
{
    if (root)
        node_free_one(root);
}
