/* The zarr view of an HDF5 store as a key source (see storage/h5zarr/h5zarr.h):
 * a key is split into a node path and a file name (".zgroup", ".zattrs",
 * ".zarray" or a chunk key), the path is resolved over the HDF5 tree and
 * the overlays (trees, CSC), and the key's bytes are made for that node.
 * Nothing is made before it is asked for, and nothing is kept but what the
 * node tree and the store version already cache (each dataset's array,
 * the trees' columns, column indexes). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <errno.h>
#include <zlib.h>

#include "storage/anndata/legacy.h"
#include "storage/h5zarr/h5zarr_impl.h"
#include "storage/zarr/zarr.h"

/* Path segments a key may hold. */
#define KEY_DEPTH 64

static const zarr_source_ops h5zarr_ops;

/* A name the zarr backend takes for a node (storage/zarr/zarr.c: no leading
 * dot, no '/' or '\\', under 1024 bytes): HDF5 names it would not take are
 * left out of the view. */
static int zarr_name_ok(const char *name)
{
    return name[0] && name[0] != '.' && !strchr(name, '/') && !strchr(name, '\\') &&
           strlen(name) < 1024;
}

/* ---- resolving paths ---- */

/* AnnData group g as anndata reads it (storage/anndata/legacy.h: older
 * layouts in today's encodings), so read_zarr of the view reads what
 * read_h5ad reads; g as stored when that view cannot be made (its layout
 * is then what the view shows). */
static node *as_anndata_reads(node *g)
{
    node *view = g;
    cellar_error ignored;
    cellar_error_clear(&ignored);
    return legacy_view(g, &view, &ignored) ? g : view;
}

/* The view node of HDF5 node n (a child of a group of the view). */
static int from_hdf5(h5zarr_src *v, node *n, vnode *out, cellar_error *err)
{
    memset(out, 0, sizeof *out);
    out->h5 = n;
    out->src = VS_HDF5;
    const node_info *in = node_get_info(n);
    if (in->type == NODE_GROUP) {
        if (h5zc_group(v, n, out))
            return 0;
        out->kind = VK_GROUP;
        return 0;
    }
    const struct h5zarr_forest *f = NULL;
    int rc = h5zt_forest(v, n, &f, err);
    if (rc < 0)
        return rc;
    if (rc == 1) {
        out->kind = VK_GROUP;
        out->src = VS_TREES;
        out->forest = f;
        return 0;
    }
    cellar_error local;
    cellar_error_clear(&local);
    const char *why = NULL;
    /* A dataset the AnnData view shows as stored keeps its chunks and their bytes. */
    rc = h5za_describe(legacy_stored(n), &out->arr, &why, &local);
    if (rc == CELLAR_ENOTFOUND) {
        out->why = why;
        return 0;
    }
    if (rc) {
        *err = local;
        return rc;
    }
    out->kind = VK_ARRAY;
    return 0;
}

static void root_vnode(h5zarr_src *v, vnode *out)
{
    memset(out, 0, sizeof *out);
    out->kind = VK_GROUP;
    out->src = VS_HDF5;
    out->h5 = v->h5root;
}

/* The child `name` of group parent, VK_NONE when there is none. */
static int child_of(h5zarr_src *v, const vnode *parent, const char *name, vnode *out,
                    cellar_error *err)
{
    memset(out, 0, sizeof *out);
    if (parent->kind != VK_GROUP || !zarr_name_ok(name))
        return 0;
    switch (parent->src) {
    case VS_HDF5: {
        node *c = node_child_opt(parent->h5, name);
        if (c && parent->h5 == v->mods)
            c = as_anndata_reads(c);
        return c ? from_hdf5(v, c, out, err) : 0;
    }
    case VS_TREES:
    case VS_TREE:
    case VS_TREE_ATTRS: return h5zt_child(parent, name, out);
    case VS_CSC: return h5zc_child(v, parent, name, out);
    default: return 0;
    }
}

/* Resolves the n segments seg[] from the root. */
static int resolve(h5zarr_src *v, char **seg, size_t n, vnode *out, cellar_error *err)
{
    root_vnode(v, out);
    for (size_t i = 0; i < n; i++) {
        vnode next;
        int rc = child_of(v, out, seg[i], &next, err);
        if (rc)
            return rc;
        *out = next;
        if (out->kind == VK_NONE)
            return 0;
    }
    return 0;
}

/* Splits key (a copy in buf) at '/' into seg[]; 0 when it has too many
 * segments or an empty one. */
static size_t split_key(char *copy, char **seg)
{
    size_t n = 0;
    char *p = copy;
    for (;;) {
        char *e = strchr(p, '/');
        if (e)
            *e = '\0';
        if (!*p || n == KEY_DEPTH)
            return 0;
        seg[n++] = p;
        if (!e)
            return n;
        p = e + 1;
    }
}

/* The names of the children of group g that the view shows. */
static int list_children(h5zarr_src *v, const vnode *g, arena *a, const char ***names,
                         size_t *count, cellar_error *err)
{
    *names = NULL;
    *count = 0;
    if (g->src == VS_TREES || g->src == VS_TREE || g->src == VS_TREE_ATTRS)
        return h5zt_list(g, a, names, count, err);
    if (g->src == VS_CSC) {
        static const char *const parts[] = {"data", "indices", "indptr"};
        const char **out = arena_calloc(a, 3, sizeof *out);
        if (!out)
            return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
        memcpy(out, parts, sizeof parts);
        *names = out;
        *count = 3;
        return 0;
    }
    const char **all = NULL;
    size_t n = 0;
    int rc = node_children(g->h5, a, &all, &n, err);
    if (rc)
        return rc;
    const char **out = arena_calloc(a, n ? n : 1, sizeof *out);
    if (!out)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        vnode c;
        cellar_error local;
        cellar_error_clear(&local);
        rc = child_of(v, g, all[i], &c, &local);
        if (rc == CELLAR_ENOMEM) {
            *err = local;
            return rc;
        }
        if (!rc && c.kind != VK_NONE)
            out[k++] = all[i];
    }
    *names = out;
    *count = k;
    return 0;
}

/* ---- documents ---- */

/* anndata 0.7's dataframes (encoding-version 0.1.0) name a column's
 * categories by an HDF5 object reference, which node attributes give as
 * the target's path ("/obs/__categories/cat"); its zarr reader looks the
 * categories up by a key of the column's parent ("__categories/cat"). */
static void categories_as_key(const vnode *n, json_t *attrs)
{
    const char *cats = json_string_value(json_object_get(attrs, "categories"));
    const char *path = node_path(n->h5), *slash = strrchr(path, '/');
    if (n->kind != VK_ARRAY || !cats || cats[0] != '/' || !slash ||
        json_object_get(attrs, "encoding-type"))
        return;
    size_t parent = (size_t)(slash - path) + 1; /* with its '/' */
    if (strncmp(cats, path, parent) == 0 && cats[parent])
        json_object_set_new(attrs, "categories", json_string(cats + parent));
}

/* mudata 0.1 wrote its modalities' encoding-type as "AnnData"; the
 * readers of today's anndata and mudata know only "anndata" (the
 * encoding-version, 0.1.0, is the same). */
static void anndata_type_lowercase(json_t *attrs)
{
    const char *et = json_string_value(json_object_get(attrs, "encoding-type"));
    if (et && !strcmp(et, "AnnData"))
        json_object_set_new(attrs, "encoding-type", json_string("anndata"));
}

static json_t *attrs_of(const vnode *n)
{
    switch (n->src) {
    case VS_HDF5: {
        json_t *attrs = json_deep_copy(node_attrs(n->h5));
        if (attrs) {
            categories_as_key(n, attrs);
            anndata_type_lowercase(attrs);
        }
        return attrs;
    }
    case VS_CSC: return h5zc_attrs(n);
    default: return h5zt_attrs(n);
    }
}

/* The text of doc into out (the document is consumed). */
static int doc_text(json_t *doc, buf *out, cellar_error *err)
{
    char *text = doc ? json_dumps(doc, JSON_INDENT(4) | JSON_SORT_KEYS | JSON_ENCODE_ANY) : NULL;
    json_decref(doc);
    if (!text)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
    size_t len = strlen(text);
    *out = (buf){.data = text, .len = len, .cap = len + 1};
    return 0;
}

/* Parses a v2 chunk key of a ("0" for 0-d) into cidx; 1 when it is one,
 * inside the grid. */
static int parse_chunk_key(const varray *a, const char *key, int64_t *cidx)
{
    if (a->ndim == 0)
        return !strcmp(key, "0");
    const char *p = key;
    for (int d = 0; d < a->ndim; d++) {
        if (d && *p++ != '.')
            return 0;
        int64_t grid = a->shape[d] / a->chunk[d] + (a->shape[d] % a->chunk[d] != 0);
        int64_t v = 0;
        const char *s = p;
        while (*p >= '0' && *p <= '9') {
            if (v > (INT64_MAX - 9) / 10)
                return 0;
            v = v * 10 + (*p++ - '0');
        }
        if (p == s || (p - s > 1 && *s == '0') || v >= grid)
            return 0;
        cidx[d] = v;
    }
    return *p == '\0';
}

/* ---- the source ---- */

typedef struct vkey {
    vchunk c;
} vkey;

static uint64_t max_chunk(const h5zarr_src *v)
{
    return v->opt.max_chunk_bytes ? v->opt.max_chunk_bytes : H5ZARR_DEFAULT_MAX_CHUNK;
}

/* The bytes of file `file` of view node n, or c->absent. */
static int key_bytes(h5zarr_src *v, const vnode *n, const char *file, int at_root, vchunk *c,
                     cellar_error *err)
{
    memset(c, 0, sizeof *c);
    c->fd = -1;
    if (n->kind == VK_NONE) {
        c->absent = 1;
        return 0;
    }
    if (!strcmp(file, ".zgroup")) {
        if (n->kind != VK_GROUP) {
            c->absent = 1;
            return 0;
        }
        return doc_text(json_pack("{s:i}", "zarr_format", 2), &c->bytes, err);
    }
    if (!strcmp(file, ".zattrs"))
        return doc_text(attrs_of(n), &c->bytes, err);
    if (!strcmp(file, ".zarray")) {
        if (n->kind != VK_ARRAY) {
            c->absent = 1;
            return 0;
        }
        return doc_text(h5za_zarray(n->arr), &c->bytes, err);
    }
    int64_t cidx[NODE_MAX_DIMS];
    (void)at_root;
    if (n->kind != VK_ARRAY || !parse_chunk_key(n->arr, file, cidx)) {
        c->absent = 1;
        return 0;
    }
    if (n->src == VS_HDF5)
        return h5za_chunk(legacy_stored(n->h5), n->arr, cidx, max_chunk(v), c, err);
    if (n->src == VS_CSC_ARRAY)
        return h5zc_chunk(v, n, cidx, c, err);
    return h5zt_chunk(n, cidx, max_chunk(v), c, err);
}

static int src_open_key(zarr_source *zs, const char *rel, zarr_key *k, cellar_error *err)
{
    h5zarr_src *v = (h5zarr_src *)zs;
    memset(k, 0, sizeof *k);
    k->fd = -1;
    size_t len = strlen(rel);
    char *copy = malloc(len + 1);
    if (!copy)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
    memcpy(copy, rel, len + 1);
    char *seg[KEY_DEPTH];
    size_t n = split_key(copy, seg);
    int rc = 0;
    vkey *vk = NULL;
    if (n == 0)
        goto done;
    vnode node_v;
    rc = resolve(v, seg, n - 1, &node_v, err);
    if (rc)
        goto done;
    vk = calloc(1, sizeof *vk);
    if (!vk) {
        rc = cellar_fail(err, CELLAR_ENOMEM, "out of memory");
        goto done;
    }
    rc = key_bytes(v, &node_v, seg[n - 1], n == 1, &vk->c, err);
    if (rc || vk->c.absent)
        goto done;
    k->found = 1;
    k->mtime = v->mtime;
    if (vk->c.fd >= 0) {
        k->fd = vk->c.fd;
        k->offset = vk->c.offset;
        k->size = vk->c.size;
    } else {
        k->size = vk->c.bytes.len;
        k->crc32 = (uint32_t)crc32(0L, (const Bytef *)vk->c.bytes.data, (uInt)vk->c.bytes.len);
        k->has_crc32 = vk->c.bytes.len <= UINT32_MAX;
    }
    k->priv = vk;
    vk = NULL;
done:
    if (vk) {
        buf_destroy(&vk->c.bytes);
        free(vk);
    }
    free(copy);
    return rc;
}

static int src_read_key(zarr_source *zs, zarr_key *k, uint64_t off, size_t n, void *out,
                        const char *what, cellar_error *err)
{
    (void)zs;
    vkey *vk = k->priv;
    if (!vk || off > k->size || n > k->size - off)
        return cellar_fail(err, CELLAR_EINTERNAL, "read past key '%s'", what);
    if (vk->c.fd < 0) {
        memcpy(out, vk->c.bytes.data + off, n);
        return 0;
    }
    return h5za_pread(vk->c.fd, out, n, vk->c.offset + off, what, err);
}

static void src_close_key(zarr_source *zs, zarr_key *k)
{
    (void)zs;
    vkey *vk = k->priv;
    if (vk) {
        buf_destroy(&vk->c.bytes);
        free(vk);
    }
    k->priv = NULL;
}

static int src_list(zarr_source *zs, const char *rel, zarr_list_fn fn, void *ctx, cellar_error *err)
{
    h5zarr_src *v = (h5zarr_src *)zs;
    size_t len = strlen(rel);
    char *copy = malloc(len + 1);
    if (!copy)
        return CELLAR_ENOMEM;
    memcpy(copy, rel, len + 1);
    char *seg[KEY_DEPTH];
    size_t n = len ? split_key(copy, seg) : 0;
    vnode g;
    int rc = len && !n ? CELLAR_ENOTFOUND : resolve(v, seg, n, &g, err);
    if (!rc && g.kind == VK_NONE)
        rc = CELLAR_ENOTFOUND;
    arena *a = rc ? NULL : arena_new();
    if (!rc && !a)
        rc = CELLAR_ENOMEM;
    if (!rc && g.kind == VK_GROUP) {
        const char **names = NULL;
        size_t count = 0;
        rc = list_children(v, &g, a, &names, &count, err);
        if (!rc)
            rc = fn(ctx, ".zgroup", ZARR_ENTRY_FILE);
        if (!rc)
            rc = fn(ctx, ".zattrs", ZARR_ENTRY_FILE);
        for (size_t i = 0; !rc && i < count; i++)
            rc = fn(ctx, names[i], ZARR_ENTRY_DIR);
    } else if (!rc) {
        /* An array's directory holds its metadata; its chunks, which no
         * zarr client lists, are not listed. */
        rc = fn(ctx, ".zarray", ZARR_ENTRY_FILE);
        if (!rc)
            rc = fn(ctx, ".zattrs", ZARR_ENTRY_FILE);
    }
    arena_free(a);
    free(copy);
    return rc;
}

static int src_total_bytes(zarr_source *zs, uint64_t *bytes)
{
    h5zarr_src *v = (h5zarr_src *)zs;
    return store_total_bytes(v->s, bytes);
}

static int64_t src_changed(zarr_source *zs)
{
    (void)zs;
    return 0; /* the HDF5 version's own checks (store_unchanged) cover the file */
}

static void src_destroy(zarr_source *zs)
{
    free(zs);
}

static const zarr_source_ops h5zarr_ops = {
    .open_key = src_open_key,
    .read_key = src_read_key,
    .close_key = src_close_key,
    .list = src_list,
    .total_bytes = src_total_bytes,
    .changed = src_changed,
    .destroy = src_destroy,
};

/* ---- the view of a store version ---- */

typedef struct view_ctx {
    store *s;
    const h5zarr_options *o;
} view_ctx;

static int build_view(void *ctx, void **value, size_t *bytes, cellar_error *err)
{
    const view_ctx *c = ctx;
    h5zarr_src *v = calloc(1, sizeof *v);
    if (!v)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
    v->src.ops = &h5zarr_ops;
    v->s = c->s;
    v->h5root = store_root(c->s);
    if (store_get_kind(c->s) == KIND_MUDATA) {
        node *mods = node_child_opt(v->h5root, "mod");
        v->mods = mods && node_get_info(mods)->type == NODE_GROUP ? mods : NULL;
    } else {
        v->h5root = as_anndata_reads(v->h5root);
    }
    v->opt = *c->o;
    v->mtime = store_mtime(c->s);
    node *root = NULL;
    int rc = zarr_open_source(&v->src, store_name(c->s), &root, err);
    if (rc)
        return rc;
    *value = root;
    *bytes = sizeof *v;
    return 0;
}

static void free_view(void *value)
{
    node_tree_free(value);
}

int h5zarr_view(store *s, const h5zarr_options *o, node **root, cellar_error *err)
{
    *root = NULL;
    if (store_get_backend(s) != BACKEND_HDF5)
        return cellar_fail(err, CELLAR_EINVAL, "'%s' is not an HDF5 store", store_name(s));
    view_ctx c = {s, o};
    void *value = NULL;
    int rc = store_derived(s, o->csc ? "h5zarr:view-csc" : "h5zarr:view", build_view, &c,
                           free_view, &value, err);
    if (!rc)
        *root = value;
    return rc;
}

int h5zarr_is_view(node *root)
{
    zarr_source *src = root ? zarr_store_source(root) : NULL;
    return src && src->ops == &h5zarr_ops;
}

int h5zarr_explain_missing(node *root, const char *key, cellar_error *err)
{
    if (!h5zarr_is_view(root))
        return 0;
    h5zarr_src *v = (h5zarr_src *)zarr_store_source(root);
    size_t len = strlen(key);
    char *copy = malloc(len + 1);
    if (!copy)
        return 0;
    memcpy(copy, key, len + 1);
    char *seg[KEY_DEPTH];
    size_t n = split_key(copy, seg);
    vnode cur;
    root_vnode(v, &cur);
    int rc = 0;
    for (size_t i = 0; i < n && cur.kind == VK_GROUP; i++) {
        vnode next;
        cellar_error local;
        cellar_error_clear(&local);
        if (child_of(v, &cur, seg[i], &next, &local))
            break;
        if (next.kind == VK_NONE && next.why) {
            rc = cellar_fail(err, CELLAR_ENOTFOUND, "no key '%.300s' in the zarr view of '%.300s': %s",
                             key, store_name(v->s), next.why);
            break;
        }
        const char *what = NULL, *name = NULL;
        if (next.kind == VK_NONE &&
            (cur.src == VS_TREES || cur.src == VS_TREE || cur.src == VS_TREE_ATTRS) &&
            (name = h5zt_left_out(&cur, key + (seg[i] - copy), &what)) != NULL) {
            rc = cellar_fail(err, CELLAR_ENOTFOUND,
                             "no key '%.300s' in the zarr view of '%.300s': the %s '%.300s' is left "
                             "out, zarr cannot take its name (a '/', a '\\' or a leading '.')",
                             key, store_name(v->s), what, name);
            break;
        }
        cur = next;
    }
    free(copy);
    return rc;
}
