/* The zarr store: metadata lookup (consolidated or per node), the node
 * tree, and the helpers for the raw-key route. */
#include "storage/zarr/zarr.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "storage/node_impl.h"
#include "storage/zarr/zarr_impl.h"

/* Metadata files larger than this are refused. */
#define ZARR_MAX_META ((size_t)256 << 20)
#define ZARR_MAX_DEPTH 64

typedef struct zarr_store {
    zarr_source *src; /* where the version's keys come from (owned) */
    zarr_dir *dir;    /* src when it is a local directory, else NULL */
    int version;
    json_t *root_doc; /* v3: the root zarr.json */
    json_t *cmeta;    /* consolidated: relpath keys -> documents; NULL when none */
    uint64_t cache_id; /* this version's entries in the chunk cache */
} zarr_store;

typedef struct zarr_node {
    zarr_store *store; /* owned by the root's zarr_node */
    int owns_store;
    char *rel;         /* path below the store, "" for the root */
    int is_array;
    zarr_array arr;
    /* a field of the records of its parent array (storage/node.h: arrays of
     * records): the parent's zarr_node and the field's index; else NULL */
    const struct zarr_node *records;
    int field;
} zarr_node;

/* What the metadata says about one node. */
typedef struct zmeta {
    int found, is_array;
    json_t *array; /* v2 .zarray or v3 document (new reference) */
    json_t *attrs; /* attributes object (new reference) or NULL */
} zmeta;

static void zmeta_clear(zmeta *m)
{
    json_decref(m->array);
    json_decref(m->attrs);
    memset(m, 0, sizeof *m);
}

static char *join_path(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    char *p = malloc(la + lb + 2);
    if (!p)
        return NULL;
    memcpy(p, a, la);
    size_t o = la;
    if (lb && la && a[la - 1] != '/')
        p[o++] = '/';
    memcpy(p + o, b, lb + 1);
    return p;
}

/* Reads and parses rel/file of the source; *missing set (and 0 returned)
 * when the key does not exist. */
static int load_json(zarr_source *src, const char *rel, const char *file, json_t **out,
                     int *missing, cellar_error *err)
{
    *out = NULL;
    *missing = 0;
    char path[4096];
    int n = snprintf(path, sizeof path, "%s%s%s", rel, rel[0] ? "/" : "", file);
    if (n < 0 || (size_t)n >= sizeof path)
        return cellar_fail(err, CELLAR_EFORMAT, "path of '%s' is too long", rel);
    zarr_key k;
    cellar_error local;
    cellar_error_clear(&local);
    int rc = src->ops->open_key(src, path, &k, &local);
    if (rc)
        return cellar_fail(err, rc, "metadata %s", local.detail);
    char *buf = NULL;
    if (!k.found) {
        *missing = 1;
        goto done;
    }
    char what[600];
    snprintf(what, sizeof what, "'/%s' metadata %s", rel, file);
    rc = zarr_key_read_all(src, &k, ZARR_MAX_META, &buf, what, err);
    if (!rc) {
        snprintf(what, sizeof what, "'/%s' %s", rel, file);
        rc = zarr_json_parse(buf, (size_t)k.size, out, what, err);
    }
done:
    free(buf);
    src->ops->close_key(src, &k);
    return rc;
}

/* 1 when rel/file is there, 0 when not, or the code of a key that is
 * there but cannot be opened (err says why). */
static int key_state(zarr_source *src, const char *rel, const char *file, cellar_error *err)
{
    char path[4096];
    int n = snprintf(path, sizeof path, "%s%s%s", rel, rel[0] ? "/" : "", file);
    if (n < 0 || (size_t)n >= sizeof path)
        return 0;
    zarr_key k;
    int rc = src->ops->open_key(src, path, &k, err);
    if (rc)
        return rc;
    int found = k.found;
    src->ops->close_key(src, &k);
    return found;
}

static int file_exists(zarr_source *src, const char *rel, const char *file)
{
    cellar_error ignored;
    cellar_error_clear(&ignored);
    return key_state(src, rel, file, &ignored) == 1;
}

static json_t *cmeta_get(const zarr_store *s, const char *rel, const char *suffix)
{
    if (!s->cmeta)
        return NULL;
    char key[4096];
    int n = snprintf(key, sizeof key, "%s%s%s", rel, rel[0] && suffix[0] ? "/" : "", suffix);
    if (n < 0 || (size_t)n >= sizeof key)
        return NULL;
    return json_object_get(s->cmeta, key);
}

static int meta_v2(zarr_store *s, const char *rel, zmeta *m, cellar_error *err)
{
    json_t *za = cmeta_get(s, rel, ".zarray");
    json_t *zg = za ? NULL : cmeta_get(s, rel, ".zgroup");
    if (za || zg) {
        m->found = 1;
        m->is_array = za != NULL;
        m->array = json_incref(za);
        m->attrs = json_incref(cmeta_get(s, rel, ".zattrs"));
        return 0;
    }
    int missing = 0;
    int rc = load_json(s->src, rel, ".zarray", &m->array, &missing, err);
    if (rc)
        return rc;
    if (missing) {
        if (!file_exists(s->src, rel, ".zgroup"))
            return 0;
    } else {
        m->is_array = 1;
    }
    m->found = 1;
    return load_json(s->src, rel, ".zattrs", &m->attrs, &missing, err);
}

static int meta_v3(zarr_store *s, const char *rel, zmeta *m, cellar_error *err)
{
    json_t *doc = NULL;
    if (!rel[0])
        doc = json_incref(s->root_doc);
    else if (s->cmeta)
        doc = json_incref(json_object_get(s->cmeta, rel));
    if (!doc) {
        int missing = 0;
        int rc = load_json(s->src, rel, "zarr.json", &doc, &missing, err);
        if (rc || missing)
            return rc;
    }
    const char *nt = json_string_value(json_object_get(doc, "node_type"));
    if (!json_is_object(doc) || json_integer_value(json_object_get(doc, "zarr_format")) != 3 ||
        !nt || (strcmp(nt, "array") && strcmp(nt, "group"))) {
        json_decref(doc);
        return cellar_fail(err, CELLAR_EFORMAT, "'/%s' zarr.json is not a zarr v3 node", rel);
    }
    m->found = 1;
    m->is_array = strcmp(nt, "array") == 0;
    m->attrs = json_incref(json_object_get(doc, "attributes"));
    m->array = m->is_array ? doc : NULL;
    if (!m->is_array)
        json_decref(doc);
    return 0;
}

static int meta_lookup(zarr_store *s, const char *rel, zmeta *m, cellar_error *err)
{
    memset(m, 0, sizeof *m);
    int rc = s->version == 3 ? meta_v3(s, rel, m, err) : meta_v2(s, rel, m, err);
    if (rc)
        zmeta_clear(m);
    return rc;
}

/* ---- nodes -------------------------------------------------------------- */

static int zarr_open_child(node *parent, const char *name, node **out, cellar_error *err);
static int zarr_list_children(node *n, arena *a, const char ***names, size_t *count,
                              cellar_error *err);
static int zarr_read_op(node *n, const dim_sel *sel, void *out, size_t out_bytes,
                        cellar_error *err);
static int zarr_read_strings_op(node *n, const dim_sel *sel, arena *a, char **out,
                                cellar_error *err);
static void zarr_destroy(node *n);

static const node_ops zarr_ops = {
    .open_child = zarr_open_child,
    .list_children = zarr_list_children,
    .read = zarr_read_op,
    .read_strings = zarr_read_strings_op,
    .destroy = zarr_destroy,
};

static void zarr_store_free(zarr_store *s)
{
    if (!s)
        return;
    chunk_cache_drop_store(chunk_cache_of(CHUNK_CACHE_ZARR), s->cache_id);
    json_decref(s->root_doc);
    json_decref(s->cmeta);
    if (s->src)
        s->src->ops->destroy(s->src);
    free(s);
}

static void zarr_destroy(node *n)
{
    zarr_node *zn = n->impl;
    if (!zn)
        return;
    zarr_array_clear(&zn->arr);
    if (zn->owns_store)
        zarr_store_free(zn->store);
    free(zn->rel);
    free(zn);
    n->impl = NULL;
}

/* Makes the node for rel from its metadata m.  On failure *out is NULL and
 * nothing leaks (the store is freed when owns_store). */
static int make_node(node *parent, const char *name, zarr_store *s, int owns_store,
                     const char *rel, const zmeta *m, node **out, cellar_error *err)
{
    *out = NULL;
    node *n = node_new(&zarr_ops, parent, name);
    zarr_node *zn = calloc(1, sizeof *zn);
    if (!n || !zn) {
        free(zn);
        node_tree_free(n);
        if (owns_store)
            zarr_store_free(s);
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory opening '%s'", name);
    }
    n->impl = zn;
    zn->store = s;
    zn->owns_store = owns_store;
    zn->rel = strdup(rel);
    int rc = 0;
    if (!zn->rel) {
        rc = cellar_fail(err, CELLAR_ENOMEM, "out of memory opening '%s'", name);
        goto done;
    }
    if (json_is_object(m->attrs)) {
        json_t *copy = json_deep_copy(m->attrs);
        if (!copy) {
            rc = cellar_fail(err, CELLAR_ENOMEM, "out of memory opening '%s'", name);
            goto done;
        }
        json_decref(n->attrs);
        n->attrs = copy;
    }
    if (!m->is_array) {
        n->info.type = NODE_GROUP;
        goto done;
    }
    zn->is_array = 1;
    rc = s->version == 3 ? zarr_array_parse_v3(m->array, &zn->arr, n->path, err)
                         : zarr_array_parse_v2(m->array, &zn->arr, n->path, err);
    if (rc)
        goto done;
    zn->arr.cache_store = s->cache_id;
    zn->arr.cache_array = chunk_cache_new_id();
    const zarr_array *za = &zn->arr;
    n->info.type = NODE_ARRAY;
    n->info.ndim = za->ndim;
    memcpy(n->info.shape, za->shape, sizeof za->shape);
    n->info.dtype = za->dtype;
    n->info.stored_big_endian = (za->sharded ? za->inner_chain : za->chain).big_endian &&
                                za->itemsize > 1;
    n->info.string_size =
        za->kind == ZK_FIXED_BYTES || za->kind == ZK_FIXED_UTF32 ? za->itemsize : 0;
    if (za->kind == ZK_RECORDS && !za->unsupported)
        n->info.n_fields = za->n_fields;
done:
    if (rc) {
        node_tree_free(n);
        return rc;
    }
    *out = n;
    return 0;
}

static int valid_name(const char *name)
{
    return name[0] && name[0] != '.' && !strchr(name, '/') && !strchr(name, '\\') &&
           strlen(name) < 1024;
}

/* Rows of records read at once for a field: at most this many bytes. */
#define FIELD_BATCH_BYTES ((size_t)8 << 20)

/* The field `name` of the records of array parent, as a node of its own:
 * the records' shape (1-D records only), the field's dtype. */
static int field_open(node *parent, const char *name, node **out, cellar_error *err)
{
    const zarr_node *pz = parent->impl;
    const zarr_array *za = &pz->arr;
    int idx = -1;
    for (int i = 0; i < za->n_fields && idx < 0; i++)
        if (strcmp(za->fields[i].name, name) == 0)
            idx = i;
    if (idx < 0)
        return cellar_fail(err, CELLAR_ENOTFOUND, "no field '%s' in '%s'", name, parent->path);
    node *n = node_new(&zarr_ops, parent, name);
    zarr_node *zn = calloc(1, sizeof *zn);
    if (!n || !zn || !(zn->rel = strdup(pz->rel))) {
        free(zn);
        node_tree_free(n);
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory opening '%s'", name);
    }
    n->impl = zn;
    zn->store = pz->store;
    zn->records = pz;
    zn->field = idx;
    const zarr_field *f = &za->fields[idx];
    n->info.type = NODE_ARRAY;
    n->info.ndim = za->ndim;
    memcpy(n->info.shape, za->shape, sizeof za->shape);
    n->info.dtype = za->ndim == 1 ? f->dtype : DT_NONE;
    n->info.stored_big_endian = f->big_endian && f->itemsize > 1;
    n->info.string_size = f->dtype == DT_STRING ? f->itemsize : 0;
    *out = n;
    return 0;
}

static int zarr_open_child(node *parent, const char *name, node **out, cellar_error *err)
{
    zarr_node *pz = parent->impl;
    *out = NULL;
    if (parent->info.type == NODE_ARRAY)
        return field_open(parent, name, out, err);
    if (!valid_name(name))
        return cellar_fail(err, CELLAR_ENOTFOUND, "no element '%s' in '%s'", name, parent->path);
    char *rel = pz->rel[0] ? join_path(pz->rel, name) : strdup(name);
    if (!rel)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory opening '%s'", name);
    zmeta m;
    int rc = meta_lookup(pz->store, rel, &m, err);
    if (!rc && !m.found)
        rc = cellar_fail(err, CELLAR_ENOTFOUND, "no element '%s' in '%s'", name, parent->path);
    if (!rc)
        rc = make_node(parent, name, pz->store, 0, rel, &m, out, err);
    zmeta_clear(&m);
    free(rel);
    return rc;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* A list of malloc'd names. */
typedef struct name_list {
    char **v;
    size_t n, cap;
} name_list;

static int name_add(name_list *l, const char *s, size_t len)
{
    if (l->n == l->cap) {
        size_t nc = l->cap ? l->cap * 2 : 16;
        char **nv = realloc(l->v, nc * sizeof *nv);
        if (!nv)
            return -1;
        l->v = nv;
        l->cap = nc;
    }
    l->v[l->n] = strndup(s, len);
    if (!l->v[l->n])
        return -1;
    l->n++;
    return 0;
}

static void name_list_free(name_list *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->v[i]);
    free(l->v);
}

/* The child of rel that key (a node's relpath) is, if any. */
static int child_of(const char *rel, const char *key, size_t keylen, const char **name,
                    size_t *len)
{
    size_t rl = strlen(rel);
    if (rl) {
        if (keylen <= rl + 1 || strncmp(key, rel, rl) != 0 || key[rl] != '/')
            return 0;
        key += rl + 1;
        keylen -= rl + 1;
    }
    if (!keylen || memchr(key, '/', keylen) || key[0] == '.')
        return 0;
    *name = key;
    *len = keylen;
    return 1;
}

static int list_consolidated(const zarr_store *s, const char *rel, name_list *l)
{
    const char *key;
    json_t *v;
    json_object_foreach(s->cmeta, key, v) {
        size_t kl = strlen(key);
        if (s->version == 2) {
            if (kl > 8 && (strcmp(key + kl - 8, "/.zarray") == 0 ||
                           strcmp(key + kl - 8, "/.zgroup") == 0))
                kl -= 8;
            else
                continue;
        }
        const char *name;
        size_t len;
        if (child_of(rel, key, kl, &name, &len) && name_add(l, name, len))
            return -1;
    }
    return 0;
}

/* The failure of listing a group's own directory: gone or not one is the
 * store's state (CELLAR_EFORMAT); short of resources stays CELLAR_EIO. */
static int list_failure(int rc, cellar_error *err)
{
    if (rc == CELLAR_ENOTFOUND)
        err->code = rc = CELLAR_EFORMAT;
    return rc;
}

/* Collects the names of the directories and files a source lists into
 * the name_list ctx, never an entry listed as other (a FIFO, a device, a
 * symlink back to a directory above: zarr_dir.c), which is no child node. */
static int collect_name(void *ctx, const char *name, zarr_entry_type type)
{
    if (type == ZARR_ENTRY_OTHER || !valid_name(name))
        return 0;
    return name_add(ctx, name, strlen(name)) ? CELLAR_ENOMEM : 0;
}

/* The names of directory rel of the source that may be child nodes
 * (unsorted). */
static int list_names(zarr_source *src, const char *rel, name_list *l, cellar_error *err)
{
    int rc = src->ops->list(src, rel, collect_name, l, err);
    if (rc == CELLAR_ENOMEM)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory listing '/%s'", rel);
    return list_failure(rc, err);
}

static int list_directory(zarr_store *s, const zarr_node *zn, name_list *l,
                          cellar_error *err)
{
    name_list all = {0};
    int rc = list_names(s->src, zn->rel, &all, err);
    for (size_t i = 0; !rc && i < all.n; i++) {
        char *rel = zn->rel[0] ? join_path(zn->rel, all.v[i]) : strdup(all.v[i]);
        if (!rel) {
            rc = cellar_fail(err, CELLAR_ENOMEM, "out of memory listing '/%s'", zn->rel);
            break;
        }
        int has = s->version == 3 ? file_exists(s->src, rel, "zarr.json")
                                  : file_exists(s->src, rel, ".zarray") ||
                                        file_exists(s->src, rel, ".zgroup");
        free(rel);
        if (has && name_add(l, all.v[i], strlen(all.v[i])))
            rc = cellar_fail(err, CELLAR_ENOMEM, "out of memory listing '/%s'", zn->rel);
    }
    name_list_free(&all);
    return rc;
}

static int zarr_list_children(node *n, arena *a, const char ***names, size_t *count,
                              cellar_error *err)
{
    zarr_node *zn = n->impl;
    if (n->info.type == NODE_ARRAY) { /* the fields of records, in stored order */
        const char **v = arena_calloc(a, (size_t)zn->arr.n_fields + 1, sizeof *v);
        if (!v)
            return cellar_fail(err, CELLAR_ENOMEM, "out of memory listing '%s'", n->path);
        for (int i = 0; i < zn->arr.n_fields; i++)
            v[i] = zn->arr.fields[i].name;
        *names = v;
        *count = (size_t)zn->arr.n_fields;
        return 0;
    }
    name_list l = {0};
    int rc = 0;
    if (zn->store->cmeta) {
        if (list_consolidated(zn->store, zn->rel, &l))
            rc = cellar_fail(err, CELLAR_ENOMEM, "out of memory listing '%s'", n->path);
    } else {
        rc = list_directory(zn->store, zn, &l, err);
    }
    if (rc)
        goto done;
    if (l.n)
        qsort(l.v, l.n, sizeof *l.v, cmp_str); /* l.v is NULL for an empty group */
    const char **out = arena_calloc(a, l.n ? l.n : 1, sizeof *out);
    if (!out) {
        rc = cellar_fail(err, CELLAR_ENOMEM, "out of memory listing '%s'", n->path);
        goto done;
    }
    size_t k = 0;
    for (size_t i = 0; i < l.n; i++) {
        if (k && strcmp(out[k - 1], l.v[i]) == 0)
            continue;
        out[k] = arena_strdup(a, l.v[i]);
        if (!out[k]) {
            rc = cellar_fail(err, CELLAR_ENOMEM, "out of memory listing '%s'", n->path);
            goto done;
        }
        k++;
    }
    *names = out;
    *count = k;
done:
    name_list_free(&l);
    return rc;
}

/* One field's value of the record rec into out[i] (numbers) or sout[i]. */
static int field_value(const zarr_field *f, const uint8_t *rec, int64_t i, uint8_t *out,
                       arena *a, char **sout, const char *what, cellar_error *err)
{
    const uint8_t *p = rec + f->offset;
    if (!sout) {
        uint8_t *o = out + (size_t)i * f->itemsize;
        memcpy(o, p, f->itemsize);
        if (f->big_endian != (__BYTE_ORDER__ == __ORDER_BIG_ENDIAN__) && f->itemsize > 1)
            codec_byteswap(o, 1, f->itemsize);
        if (f->dtype == DT_BOOL)
            *o = *o != 0;
        return 0;
    }
    char *s;
    if (f->kind == ZK_FIXED_BYTES) {
        s = arena_strndup(a, (const char *)p, strnlen((const char *)p, f->itemsize));
    } else {
        s = arena_alloc(a, f->itemsize + 1);
        if (s && codec_utf32_to_utf8(p, f->itemsize / 4, f->big_endian, s, what, err) < 0)
            return CELLAR_EFORMAT;
    }
    if (!s)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory reading '%s'", what);
    sout[i] = s;
    return 0;
}

/* Reads a selection of a field: the records of its rows from the parent
 * array, FIELD_BATCH_BYTES at a time, then the field of each. */
static int field_read(node *n, const dim_sel *sel, void *out, arena *a, char **sout,
                      cellar_error *err)
{
    const zarr_node *zn = n->impl, *rz = zn->records;
    const zarr_array *za = &rz->arr;
    const zarr_field *f = &za->fields[zn->field];
    size_t rec = za->itemsize ? za->itemsize : 1;
    int64_t batch = (int64_t)(FIELD_BATCH_BYTES / rec);
    if (batch < 1)
        batch = 1;
    int64_t total = sel[0].count;
    uint8_t *buf = malloc((size_t)(total < batch ? total : batch) * rec);
    if (!buf)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory reading '%s'", n->path);
    int rc = 0;
    for (int64_t i0 = 0; !rc && i0 < total; i0 += batch) {
        int64_t k = total - i0 < batch ? total - i0 : batch;
        dim_sel part = sel[0];
        part.count = k;
        if (sel[0].index)
            part.index = sel[0].index + i0;
        else
            part.start = dim_sel_at(&sel[0], i0);
        rc = zarr_array_read(za, rz->store->src, rz->rel, n->path, &part, buf, (size_t)k * rec,
                             NULL, NULL, err);
        for (int64_t j = 0; !rc && j < k; j++)
            rc = field_value(f, buf + (size_t)j * rec, i0 + j, out, a, sout, n->path, err);
    }
    free(buf);
    return rc;
}

static int zarr_read_op(node *n, const dim_sel *sel, void *out, size_t out_bytes,
                        cellar_error *err)
{
    zarr_node *zn = n->impl;
    if (zn->records)
        return field_read(n, sel, out, NULL, NULL, err);
    return zarr_array_read(&zn->arr, zn->store->src, zn->rel, n->path, sel, out, out_bytes,
                           NULL, NULL, err);
}

static int zarr_read_strings_op(node *n, const dim_sel *sel, arena *a, char **out,
                                cellar_error *err)
{
    zarr_node *zn = n->impl;
    if (zn->records)
        return field_read(n, sel, NULL, a, out, err);
    return zarr_array_read(&zn->arr, zn->store->src, zn->rel, n->path, sel, NULL, 0, a, out,
                           err);
}

/* ---- opening ------------------------------------------------------------ */

/* The format of the store in d: 3 when it has a root zarr.json, 2 when it
 * has a root .zgroup, .zarray or .zmetadata, else CELLAR_EFORMAT (err set
 * when a root document is there but cannot be opened). */
static int store_format(zarr_source *d, const char *what, cellar_error *err)
{
    static const char *const v2[] = {".zgroup", ".zarray", ".zmetadata"};
    int rc = key_state(d, "", "zarr.json", err);
    if (rc)
        return rc == 1 ? 3 : rc;
    for (size_t i = 0; i < sizeof v2 / sizeof *v2; i++) {
        cellar_error local;
        cellar_error_clear(&local);
        rc = key_state(d, "", v2[i], &local);
        if (rc == 1)
            return 2;
        if (rc)
            *err = local; /* reported only when no other one is there */
    }
    if (rc < 0)
        return rc;
    return cellar_fail(err, CELLAR_EFORMAT,
                       "'%s' has no zarr.json, .zgroup or .zarray: not a zarr store", what);
}

static void load_consolidated(zarr_store *s)
{
    if (s->version == 3) {
        const json_t *cm = json_object_get(s->root_doc, "consolidated_metadata");
        json_t *md = json_object_get(cm, "metadata");
        if (json_is_object(md))
            s->cmeta = json_incref(md);
        return;
    }
    /* A .zmetadata that cannot be read is ignored: per-node files still are. */
    json_t *doc = NULL;
    int missing = 0;
    cellar_error ignored;
    cellar_error_clear(&ignored);
    if (load_json(s->src, "", ".zmetadata", &doc, &missing, &ignored) == 0 && doc) {
        json_t *md = json_object_get(doc, "metadata");
        if (json_is_object(md))
            s->cmeta = json_incref(md);
    }
    json_decref(doc);
}

/* Reads the root of the store s (its source set) and makes its root node;
 * frees s on failure.  dir names the store in details. */
static int open_store(zarr_store *s, const char *dir, node **root, cellar_error *err)
{
    s->cache_id = chunk_cache_new_id();
    int rc = 0, missing = 0;
    s->version = store_format(s->src, dir, err);
    if (s->version < 0)
        rc = s->version;
    if (!rc && s->version == 3) {
        rc = load_json(s->src, "", "zarr.json", &s->root_doc, &missing, err);
        if (!rc && missing)
            rc = cellar_fail(err, CELLAR_EFORMAT, "'%s' lost its zarr.json", dir);
    }
    if (rc) {
        zarr_store_free(s);
        return rc;
    }
    load_consolidated(s);
    zmeta m;
    rc = meta_lookup(s, "", &m, err);
    if (!rc && !m.found)
        rc = cellar_fail(err, CELLAR_EFORMAT, "'%s' has no root group or array", dir);
    if (rc) {
        zmeta_clear(&m);
        zarr_store_free(s);
        return rc;
    }
    rc = make_node(NULL, "", s, 1, "", &m, root, err);
    zmeta_clear(&m);
    return rc;
}


int zarr_open(const char *dir, node **root, cellar_error *err)
{
    *root = NULL;
    zarr_store *s = calloc(1, sizeof *s);
    if (!s)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory opening '%s'", dir);
    int e = zarr_dir_source_new(dir, &s->dir);
    s->src = s->dir ? &s->dir->src : NULL;
    if (e) {
        zarr_store_free(s);
        return e == ENOMEM ? cellar_fail(err, CELLAR_ENOMEM, "out of memory opening '%s'", dir)
               : e == EMFILE || e == ENFILE
                   ? cellar_fail(err, CELLAR_EIO, "cannot open '%s' now: %s", dir, strerror(e))
                   : cellar_fail(err, CELLAR_EFORMAT, "'%s' is not a zarr directory", dir);
    }
    return open_store(s, dir, root, err);
}

int zarr_open_source(zarr_source *src, const char *what, node **root, cellar_error *err)
{
    *root = NULL;
    zarr_store *s = calloc(1, sizeof *s);
    if (!s) {
        src->ops->destroy(src);
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory opening '%s'", what);
    }
    s->src = src;
    return open_store(s, what, root, err);
}

/* The store of a tree opened by zarr_open (its root or any node). */
static zarr_store *store_of(node *n)
{
    return ((zarr_node *)n->root->impl)->store;
}

int zarr_format(node *root)
{
    return store_of(root)->version;
}

int64_t zarr_changed_since_open(node *root)
{
    zarr_source *src = store_of(root)->src;
    return src->ops->changed(src);
}

int zarr_store_bytes(node *root, uint64_t *bytes)
{
    zarr_source *src = store_of(root)->src;
    return src->ops->total_bytes(src, bytes);
}

static int64_t unsettled_until(node *root)
{
    zarr_source *src = store_of(root)->src;
    return src->ops->unsettled_until ? src->ops->unsettled_until(src) : 0;
}

int64_t zarr_settled_at(node *root)
{
    int64_t changed = zarr_changed_since_open(root);
    int64_t at = changed ? changed + ZARR_SETTLE_NS : 0;
    int64_t until = unsettled_until(root);
    return until > at ? until : at;
}

int zarr_unsettled(node *root)
{
    int64_t until = unsettled_until(root);
    if (!until)
        return 0;
    /* The precise clock: the coarse one lags by up to a tick, and a wait
     * reckoned from it (store_settle_seconds) could end inside the window. */
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    return until > (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
}

zarr_source *zarr_store_source(node *root)
{
    return store_of(root)->src;
}

int zarr_directory_fd(node *root)
{
    zarr_dir *d = store_of(root)->dir;
    return d ? d->fd : -1;
}

/* ---- consolidating a v2 store ------------------------------------------- */

/* Adds rel's .zgroup/.zarray/.zattrs to md and recurses into groups. */
static int consolidate_node(zarr_source *dir, const char *rel, int depth, json_t *md,
                            cellar_error *err);
static int consolidate_node_v3(zarr_source *dir, const char *rel, int depth, json_t *md,
                               cellar_error *err);

/* Consolidates every child node of the group rel (zarr format 2 or 3) into md. */
static int consolidate_children(zarr_source *dir, const char *rel, int depth, int format,
                                json_t *md, cellar_error *err)
{
    if (depth >= ZARR_MAX_DEPTH)
        return cellar_fail(err, CELLAR_EFORMAT, "the store nests groups too deeply");
    name_list names = {0};
    int rc = list_names(dir, rel, &names, err);
    if (!rc && names.n) /* the same document whatever order the source lists in */
        qsort(names.v, names.n, sizeof *names.v, cmp_str);
    for (size_t i = 0; !rc && i < names.n; i++) {
        char *crel = rel[0] ? join_path(rel, names.v[i]) : strdup(names.v[i]);
        if (!crel) {
            rc = cellar_fail(err, CELLAR_ENOMEM, "out of memory consolidating metadata");
            break;
        }
        if (format == 3 && file_exists(dir, crel, "zarr.json"))
            rc = consolidate_node_v3(dir, crel, depth + 1, md, err);
        else if (format == 2 &&
                 (file_exists(dir, crel, ".zgroup") || file_exists(dir, crel, ".zarray")))
            rc = consolidate_node(dir, crel, depth + 1, md, err);
        free(crel);
    }
    name_list_free(&names);
    return rc;
}

static int consolidate_node(zarr_source *dir, const char *rel, int depth, json_t *md,
                            cellar_error *err)
{
    static const char *files[] = {".zgroup", ".zarray", ".zattrs"};
    int is_group = 0, rc = 0;
    for (size_t i = 0; i < 3; i++) {
        json_t *doc = NULL;
        int missing = 0;
        rc = load_json(dir, rel, files[i], &doc, &missing, err);
        if (rc)
            return rc;
        if (missing)
            continue;
        char key[4096];
        snprintf(key, sizeof key, "%s%s%s", rel, rel[0] ? "/" : "", files[i]);
        if (json_object_set_new(md, key, doc))
            return cellar_fail(err, CELLAR_ENOMEM, "out of memory consolidating metadata");
        is_group |= i == 0;
    }
    if (!is_group)
        return 0;
    return consolidate_children(dir, rel, depth, 2, md, err);
}

int zarr_build_consolidated(node *root, char **json_text, size_t *len, cellar_error *err)
{
    *json_text = NULL;
    *len = 0;
    zarr_store *s = store_of(root);
    if (s->version != 2)
        return cellar_fail(err, CELLAR_EFORMAT, "the store is not a zarr v2 store");
    json_t *doc = json_object(), *md = json_object();
    int rc = 0;
    if (!doc || !md || json_object_set_new(doc, "zarr_consolidated_format", json_integer(1))) {
        rc = cellar_fail(err, CELLAR_ENOMEM, "out of memory consolidating metadata");
        goto done;
    }
    rc = consolidate_node(s->src, "", 0, md, err);
    if (rc)
        goto done;
    if (json_object_set(doc, "metadata", md)) {
        rc = cellar_fail(err, CELLAR_ENOMEM, "out of memory consolidating metadata");
        goto done;
    }
    *json_text = json_dumps(doc, JSON_INDENT(4) | JSON_SORT_KEYS);
    if (!*json_text) {
        rc = cellar_fail(err, CELLAR_ENOMEM, "out of memory consolidating metadata");
        goto done;
    }
    *len = strlen(*json_text);
done:
    json_decref(md);
    json_decref(doc);
    return rc;
}

/* An empty inline consolidated_metadata block, as zarr-python writes on
 * every group. */
static json_t *empty_inline_block(void)
{
    return json_pack("{s:s, s:b, s:{}}", "kind", "inline", "must_understand", 0, "metadata");
}

/* Adds the v3 document of rel and, for a group, of everything below it to md
 * under flattened relative paths ("obs", "obs/_index", ...). */
static int consolidate_node_v3(zarr_source *dir, const char *rel, int depth, json_t *md,
                               cellar_error *err)
{
    json_t *doc = NULL;
    int missing = 0;
    int rc = load_json(dir, rel, "zarr.json", &doc, &missing, err);
    if (rc || missing)
        return rc;
    const char *type = json_string_value(json_object_get(doc, "node_type"));
    int is_group = type && strcmp(type, "group") == 0;
    if (rel[0]) {
        if (is_group && json_object_set_new(doc, "consolidated_metadata", empty_inline_block()))
            rc = cellar_fail(err, CELLAR_ENOMEM, "out of memory consolidating metadata");
        if (!rc && json_object_set(md, rel, doc))
            rc = cellar_fail(err, CELLAR_ENOMEM, "out of memory consolidating metadata");
    }
    json_decref(doc);
    if (rc || !is_group)
        return rc;
    return consolidate_children(dir, rel, depth, 3, md, err);
}

int zarr_build_consolidated_v3(node *root, char **json_text, size_t *len, cellar_error *err)
{
    *json_text = NULL;
    *len = 0;
    zarr_store *s = store_of(root);
    json_t *doc = NULL, *md = json_object();
    int missing = 0;
    int rc = load_json(s->src, "", "zarr.json", &doc, &missing, err);
    if (rc)
        goto done;
    if (missing) {
        rc = cellar_fail(err, CELLAR_EFORMAT, "the store is not a zarr v3 store");
        goto done;
    }
    const char *type = json_string_value(json_object_get(doc, "node_type"));
    if (!type || strcmp(type, "group") != 0 || json_object_get(doc, "consolidated_metadata")) {
        rc = cellar_fail(err, CELLAR_ENOTFOUND,
                         "the store has consolidated metadata already, or is not a group");
        goto done;
    }
    if (!md) {
        rc = cellar_fail(err, CELLAR_ENOMEM, "out of memory consolidating metadata");
        goto done;
    }
    rc = consolidate_node_v3(s->src, "", 0, md, err);
    if (rc)
        goto done;
    json_t *block = empty_inline_block();
    if (!block || json_object_set(block, "metadata", md) ||
        json_object_set_new(doc, "consolidated_metadata", block)) {
        rc = cellar_fail(err, CELLAR_ENOMEM, "out of memory consolidating metadata");
        goto done;
    }
    *json_text = json_dumps(doc, JSON_INDENT(2));
    if (!*json_text) {
        rc = cellar_fail(err, CELLAR_ENOMEM, "out of memory consolidating metadata");
        goto done;
    }
    *len = strlen(*json_text);
done:
    json_decref(md);
    json_decref(doc);
    return rc;
}

/* ---- which keys a store has --------------------------------------------- */

/* Parses one chunk grid index: a canonical decimal (no sign, no leading
 * zero) below count.  Returns the characters used, 0 when not one. */
static size_t grid_index_len(const char *s, int64_t count)
{
    size_t n = 0;
    int64_t v = 0;
    while (s[n] >= '0' && s[n] <= '9') {
        if (n == 1 && s[0] == '0')
            return 0;
        int d = s[n] - '0';
        if (v > (INT64_MAX - d) / 10)
            return 0;
        v = v * 10 + d;
        n++;
    }
    return n && v < count ? n : 0;
}

/* Whether rest is the key of a chunk (or shard) of za inside its grid,
 * under its chunk key encoding: "c/1/2" ("c" for 0-d) or, for v2 keys,
 * "1.2" ("0" for 0-d), with the array's separator. */
static int is_chunk_key(const zarr_array *za, const char *rest)
{
    const char *p = rest;
    if (!za->v2_keys) {
        if (*p++ != 'c')
            return 0;
        if (za->ndim == 0)
            return *p == '\0';
    } else if (za->ndim == 0) {
        return strcmp(p, "0") == 0;
    }
    for (int d = 0; d < za->ndim; d++) {
        if ((d > 0 || !za->v2_keys) && *p++ != za->sep)
            return 0;
        if (za->chunk[d] <= 0)
            return 0;
        int64_t count = za->shape[d] / za->chunk[d] + (za->shape[d] % za->chunk[d] != 0);
        size_t used = grid_index_len(p, count);
        if (!used)
            return 0;
        p += used;
    }
    return *p == '\0';
}

/* Whether base is a metadata file name of the store's format; .zmetadata
 * only at the root (at_root). */
static int is_metadata_name(int version, const char *base, int at_root)
{
    if (version == 3)
        return strcmp(base, "zarr.json") == 0;
    return !strcmp(base, ".zarray") || !strcmp(base, ".zgroup") || !strcmp(base, ".zattrs") ||
           (at_root && !strcmp(base, ".zmetadata"));
}

/* Whether each of the len bytes of path is in a segment valid_name takes. */
static int plain_segments(const char *path, size_t len)
{
    char name[1024];
    size_t start = 0;
    for (size_t i = 0; i <= len; i++) {
        if (i < len && path[i] != '/')
            continue;
        size_t seg = i - start;
        if (seg == 0 || seg >= sizeof name)
            return 0;
        memcpy(name, path + start, seg);
        name[seg] = '\0';
        if (!valid_name(name))
            return 0;
        start = i + 1;
    }
    return 1;
}

/* Whether some segment of key ends in '~' (an editor's backup). */
static int names_a_backup(const char *key)
{
    for (const char *p = key; *p; p++)
        if (*p == '~' && (p[1] == '/' || p[1] == '\0'))
            return 1;
    return 0;
}

int zarr_store_has_key(node *root, const char *key)
{
    if (!root || root->ops != &zarr_ops || !key[0] || names_a_backup(key))
        return 0;
    const zarr_node *rz = root->impl;
    const char *slash = strrchr(key, '/');
    const char *base = slash ? slash + 1 : key;
    if (is_metadata_name(rz->store->version, base, !slash))
        return !slash || plain_segments(key, (size_t)(slash - key));
    /* A chunk: walk the groups the key names down to the first array. */
    node *cur = root;
    const char *rest = key;
    char name[1024];
    while (!((const zarr_node *)cur->impl)->is_array) {
        const char *e = strchr(rest, '/');
        size_t len = e ? (size_t)(e - rest) : 0;
        if (!e || len == 0 || len >= sizeof name)
            return 0;
        memcpy(name, rest, len);
        name[len] = '\0';
        cur = node_child_opt(cur, name);
        if (!cur)
            return 0;
        rest = e + 1;
    }
    return is_chunk_key(&((const zarr_node *)cur->impl)->arr, rest);
}

/* ---- listing a directory of keys ----------------------------------------- */

/* What the raw route lists of a directory: subdirectories with plain
 * names (with a '/' added) and files that are zarr keys. */
typedef struct key_listing {
    node *root;
    const char *rel;
    name_list *l;
} key_listing;

static int add_listed_key(void *ctx, const char *name, zarr_entry_type type)
{
    key_listing *kl = ctx;
    size_t nl = strlen(name);
    char entry[1100];
    if (type == ZARR_ENTRY_DIR) {
        if (!valid_name(name) || name[nl - 1] == '~')
            return 0;
        int n = snprintf(entry, sizeof entry, "%s/", name);
        if (n < 0 || (size_t)n >= sizeof entry)
            return 0;
        return name_add(kl->l, entry, (size_t)n) ? CELLAR_ENOMEM : 0;
    }
    if (type != ZARR_ENTRY_FILE)
        return 0;
    char key[4096];
    int n = snprintf(key, sizeof key, "%s%s%s", kl->rel, kl->rel[0] ? "/" : "", name);
    if (n <= 0 || (size_t)n >= sizeof key || !zarr_store_has_key(kl->root, key))
        return 0;
    return name_add(kl->l, name, nl) ? CELLAR_ENOMEM : 0;
}

int zarr_key_directory(node *root, const char *rel, arena *a, const char ***names,
                       size_t *count, cellar_error *err)
{
    *names = NULL;
    *count = 0;
    zarr_store *s = store_of(root);
    name_list l = {0};
    key_listing kl = {root, rel, &l};
    int rc = s->src->ops->list(s->src, rel, add_listed_key, &kl, err);
    if (rc == CELLAR_ENOTFOUND)
        rc = cellar_fail(err, CELLAR_ENOTFOUND, "no directory '%s' in the store", rel);
    else if (rc == CELLAR_ENOMEM)
        rc = cellar_fail(err, CELLAR_ENOMEM, "out of memory listing '/%s'", rel);
    if (!rc && l.n)
        qsort(l.v, l.n, sizeof *l.v, cmp_str);
    const char **out = rc ? NULL : arena_calloc(a, l.n ? l.n : 1, sizeof *out);
    if (!rc && !out)
        rc = cellar_fail(err, CELLAR_ENOMEM, "out of memory listing '/%s'", rel);
    for (size_t i = 0; !rc && i < l.n; i++)
        if (!(out[i] = arena_strdup(a, l.v[i])))
            rc = cellar_fail(err, CELLAR_ENOMEM, "out of memory listing '/%s'", rel);
    if (!rc) {
        *names = out;
        *count = l.n;
    }
    name_list_free(&l);
    return rc;
}
