/* TreeData's obst/vart in the zarr view: the JSON string an .h5td holds is
 * shown in the columnar layout treedata writes to zarr (treedata's
 * _write_axis_trees_zarr), so treedata.read_zarr reads it as it reads a
 * converted store:
 *
 *   obst/                  group, {}
 *     <tree>/              group, {}
 *       nodes              (n,) strings: the node ids, in the file's order
 *       edges              (m, 2) strings: (parent, child), parents in node
 *                          order, children in edge order (networkx's order)
 *       node_attrs/        dict group, one array per attribute key:
 *       edge_attrs/          int64, float64 or bool when every node (edge)
 *                            has it with one JSON type of those, else one
 *                            JSON text per element ("" where it is absent)
 *
 * The trees come from storage/trees/ (trees_get: parsed once per store
 * version); the columns are made from them once per version too and kept
 * (a derived structure), texts borrowed from the tree indexes.  Trees and
 * attribute keys whose names zarr does not take are left out (and
 * remembered, so that their keys are 404 with a reason). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/arena.h"
#include "storage/h5zarr/h5zarr_impl.h"

#define ID_CHUNK ((int64_t)1 << 16)    /* strings per chunk */
#define VALUE_CHUNK ((int64_t)1 << 17) /* 8-byte values per chunk (1 MiB) */

typedef struct vcolumn {
    const char *name;
    dtype_kind kind;      /* DT_INT64, DT_FLOAT64, DT_BOOL, or DT_STRING (JSON texts) */
    unsigned char *values;/* native columns: n values of 8 or 1 bytes */
    const char **texts;   /* DT_STRING: n texts, NULL where absent */
    varray arr;
} vcolumn;

typedef struct vtree {
    const char *key;
    const tree_index *t;
    int64_t n[2];         /* nodes, edges */
    int32_t *src, *dst;   /* the edges, in treedata's order */
    varray ids[2];        /* nodes, edges */
    vcolumn *cols[2];     /* node and edge attribute columns */
    size_t ncols[2];
    const char **left_out[2]; /* attribute keys zarr does not take */
    size_t nleft_out[2];
} vtree;

struct h5zarr_forest {
    int unreadable;       /* the trees cannot be read: the dataset is shown as it is */
    vtree *trees;
    size_t n;
    const char **left_out;/* tree keys zarr does not take (borrowed from the trees) */
    size_t nleft_out;
    arena *a;             /* names and texts made here */
};

static int valid_name(const char *s)
{
    return s[0] && s[0] != '.' && !strchr(s, '/') && !strchr(s, '\\') && strlen(s) < 1024;
}

static void set_array(varray *a, int ndim, int64_t rows, int64_t cols, const char *dtype,
                      size_t item, int vlen, int64_t chunk_rows, json_t *fill)
{
    memset(a, 0, sizeof *a);
    a->ndim = ndim;
    a->shape[0] = rows;
    a->shape[1] = cols;
    a->chunk[0] = rows < chunk_rows ? (rows > 0 ? rows : 1) : chunk_rows;
    a->chunk[1] = cols;
    snprintf(a->dtype, sizeof a->dtype, "%s", dtype);
    a->item = item;
    a->vlen = vlen;
    a->zlib_level = -1;
    a->fd = -1;
    a->how = HOW_TREE;
    a->fill_value = fill;
}

/* ---- building the columns ---- */

/* One attribute key seen while scanning a side. */
typedef struct key_seen {
    const char *name;      /* in the forest's arena */
    int64_t count;         /* elements that have it */
    int kinds;             /* bit 1 int, 2 real, 4 bool, 8 anything else */
} key_seen;

typedef struct side_scan {
    key_seen *keys;
    size_t nkeys, cap;
} side_scan;

static int kind_bit(const json_t *v)
{
    return json_is_integer(v) ? 1 : json_is_real(v) ? 2 : json_is_boolean(v) ? 4 : 8;
}

static int note_keys(side_scan *sc, json_t *obj, arena *a)
{
    const char *k;
    json_t *v;
    json_object_foreach(obj, k, v) {
        size_t i = 0;
        while (i < sc->nkeys && strcmp(sc->keys[i].name, k))
            i++;
        if (i == sc->nkeys) {
            if (sc->nkeys == sc->cap) {
                size_t cap = sc->cap ? sc->cap * 2 : 8;
                key_seen *grown = realloc(sc->keys, cap * sizeof *grown);
                if (!grown)
                    return -1;
                sc->keys = grown;
                sc->cap = cap;
            }
            const char *name = arena_strdup(a, k);
            if (!name)
                return -1;
            sc->keys[sc->nkeys++] = (key_seen){.name = name};
        }
        sc->keys[i].count++;
        sc->keys[i].kinds |= kind_bit(v);
    }
    return 0;
}

/* The text of attrs element i of a side: a node's, or the edge's to its
 * child. */
static const char *side_text(const vtree *vt, int side, int64_t i)
{
    return side ? tree_index_edge_attrs(vt->t, vt->dst[i])
                : tree_index_attrs(vt->t, (int32_t)i);
}

/* Element i's attributes parsed (the caller decrefs), or NULL: none, or
 * not an object. */
static json_t *side_parse(const vtree *vt, int side, int64_t i)
{
    const char *text = side_text(vt, side, i);
    if (!text || !strcmp(text, "{}"))
        return NULL;
    json_t *obj = json_loads(text, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
    if (!json_is_object(obj)) {
        json_decref(obj);
        return NULL;
    }
    return obj;
}

static int column_init(vcolumn *c, const key_seen *ks, int64_t n, arena *a)
{
    int native = ks->count == n && (ks->kinds == 1 || ks->kinds == 2 || ks->kinds == 4);
    c->name = ks->name;
    c->kind = !native ? DT_STRING : ks->kinds == 1 ? DT_INT64 : ks->kinds == 2 ? DT_FLOAT64 : DT_BOOL;
    size_t es = c->kind == DT_BOOL ? 1 : 8;
    if (native)
        c->values = arena_calloc(a, (size_t)(n ? n : 1), es);
    else
        c->texts = arena_calloc(a, (size_t)(n ? n : 1), sizeof *c->texts);
    return c->values || c->texts ? 0 : -1;
}

static int column_set(vcolumn *c, int64_t i, const json_t *v, arena *a)
{
    if (c->kind == DT_INT64) {
        int64_t x = (int64_t)json_integer_value(v);
        memcpy(c->values + (size_t)i * 8, &x, 8);
    } else if (c->kind == DT_FLOAT64) {
        double x = json_real_value(v);
        memcpy(c->values + (size_t)i * 8, &x, 8);
    } else if (c->kind == DT_BOOL) {
        c->values[i] = json_is_true(v);
    } else {
        char *text = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT | JSON_REAL_PRECISION(17));
        c->texts[i] = text ? arena_strdup(a, text) : NULL;
        free(text);
        if (!c->texts[i])
            return -1;
    }
    return 0;
}

static int column_finish(vcolumn *c, int64_t n)
{
    if (c->kind == DT_STRING)
        set_array(&c->arr, 1, n, 0, "|O", 0, 1, ID_CHUNK, json_string(""));
    else if (c->kind == DT_BOOL)
        set_array(&c->arr, 1, n, 0, "|b1", 1, 0, VALUE_CHUNK * 8, json_false());
    else
        set_array(&c->arr, 1, n, 0, c->kind == DT_INT64 ? "<i8" : "<f8", 8, 0, VALUE_CHUNK,
                  c->kind == DT_INT64 ? json_integer(0) : json_real(0));
    return c->arr.fill_value ? 0 : -1;
}

/* Two passes over the side's attribute texts, the keys first, then the
 * values, each element parsed and freed in turn: jansson's objects take
 * about 250 bytes an element, so holding them all took 57 MB for a star
 * of 200,000 edges, 115 MB for 400,000. */
static int build_side(vtree *vt, int side, arena *a)
{
    int64_t n = vt->n[side];
    side_scan sc = {0};
    json_t *obj = NULL;
    int rc = -1;
    for (int64_t i = 0; i < n; i++) {
        obj = side_parse(vt, side, i);
        if (obj && note_keys(&sc, obj, a))
            goto done;
        json_decref(obj);
        obj = NULL;
    }
    vt->cols[side] = arena_calloc(a, sc.nkeys ? sc.nkeys : 1, sizeof *vt->cols[side]);
    vt->left_out[side] = arena_calloc(a, sc.nkeys ? sc.nkeys : 1, sizeof *vt->left_out[side]);
    if (!vt->cols[side] || !vt->left_out[side])
        goto done;
    for (size_t k = 0; k < sc.nkeys; k++) {
        if (!valid_name(sc.keys[k].name)) {
            const char *name = arena_strdup(a, sc.keys[k].name);
            if (!name)
                goto done;
            vt->left_out[side][vt->nleft_out[side]++] = name;
            continue;
        }
        if (column_init(&vt->cols[side][vt->ncols[side]++], &sc.keys[k], n, a))
            goto done;
    }
    for (int64_t i = 0; i < n && vt->ncols[side]; i++) {
        if (!(obj = side_parse(vt, side, i)))
            continue;
        for (size_t k = 0; k < vt->ncols[side]; k++) {
            vcolumn *c = &vt->cols[side][k];
            json_t *v = json_object_get(obj, c->name);
            if (v && column_set(c, i, v, a))
                goto done;
        }
        json_decref(obj);
        obj = NULL;
    }
    for (size_t k = 0; k < vt->ncols[side]; k++)
        if (column_finish(&vt->cols[side][k], n))
            goto done;
    rc = 0;
done:
    json_decref(obj);
    free(sc.keys);
    return rc;
}

static int build_tree(vtree *vt, const char *key, const tree_index *t, arena *a)
{
    vt->key = key;
    vt->t = t;
    int32_t nn = tree_index_node_count(t), ne = tree_index_edge_count(t);
    vt->n[0] = nn;
    vt->n[1] = ne;
    vt->src = arena_calloc(a, (size_t)(ne ? ne : 1), sizeof *vt->src);
    vt->dst = arena_calloc(a, (size_t)(ne ? ne : 1), sizeof *vt->dst);
    if (!vt->src || !vt->dst)
        return -1;
    int64_t e = 0;
    for (int32_t v = 0; v < nn; v++) {
        int32_t nc = 0;
        const int32_t *ch = tree_index_children(t, v, &nc);
        for (int32_t i = 0; i < nc && e < ne; i++, e++) {
            vt->src[e] = v;
            vt->dst[e] = ch[i];
        }
    }
    vt->n[1] = e;
    set_array(&vt->ids[0], 1, vt->n[0], 0, "|O", 0, 1, ID_CHUNK, json_string(""));
    set_array(&vt->ids[1], 2, vt->n[1], 2, "|O", 0, 1, ID_CHUNK / 2, json_string(""));
    if (!vt->ids[0].fill_value || !vt->ids[1].fill_value)
        return -1;
    return build_side(vt, 0, a) || build_side(vt, 1, a) ? -1 : 0;
}

static void forest_free(void *value)
{
    struct h5zarr_forest *f = value;
    if (!f)
        return;
    for (size_t i = 0; i < f->n; i++) {
        vtree *vt = &f->trees[i];
        h5za_varray_clear(&vt->ids[0]);
        h5za_varray_clear(&vt->ids[1]);
        for (int s = 0; s < 2; s++)
            for (size_t k = 0; vt->cols[s] && k < vt->ncols[s]; k++)
                h5za_varray_clear(&vt->cols[s][k].arr);
    }
    free(f->trees);
    arena_free(f->a);
    free(f);
}

typedef struct forest_ctx {
    h5zarr_src *v;
    node *n;
} forest_ctx;

/* The forest of dataset n, or one marked unreadable when its trees cannot
 * be read (the dataset is then shown as the string it is). */
static int forest_build(void *ctx, void **value, size_t *bytes, cellar_error *err)
{
    const forest_ctx *fc = ctx;
    struct h5zarr_forest *f = calloc(1, sizeof *f);
    if (!f)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
    *value = f;
    *bytes = sizeof *f;
    const char *path = node_path(fc->n);
    const char *slash = strrchr(path, '/');
    char parent[1024];
    snprintf(parent, sizeof parent, "%.*s", slash && slash != path ? (int)(slash - path) : 1, path);
    node *group = NULL;
    cellar_error local;
    cellar_error_clear(&local);
    const trees_loaded *tl = NULL;
    if (node_resolve(fc->v->h5root, parent, &group, &local) ||
        trees_get(fc->v->s, group, node_name(fc->n), &tl, &local)) {
        f->unreadable = 1;
        return 0;
    }
    size_t count = tree_forest_count(tl->forest);
    f->a = arena_new();
    f->trees = calloc(count ? count : 1, sizeof *f->trees);
    f->left_out = f->a ? arena_calloc(f->a, count ? count : 1, sizeof *f->left_out) : NULL;
    if (!f->a || !f->trees || !f->left_out) {
        forest_free(f);
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < count; i++) {
        const char *key = tree_forest_key(tl->forest, i);
        if (!valid_name(key)) {
            f->left_out[f->nleft_out++] = key;
            continue;
        }
        if (build_tree(&f->trees[f->n], key, tree_forest_tree(tl->forest, i), f->a)) {
            f->n++;
            forest_free(f);
            return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
        }
        f->n++;
    }
    *bytes = sizeof *f + arena_bytes(f->a);
    return 0;
}

int h5zt_forest(h5zarr_src *v, node *n, const struct h5zarr_forest **out, cellar_error *err)
{
    *out = NULL;
    const node_info *in = node_get_info(n);
    const char *name = node_name(n);
    if ((strcmp(name, "obst") && strcmp(name, "vart")) || in->dtype != DT_STRING ||
        in->string_size || !(in->ndim == 0 || (in->ndim == 1 && in->shape[0] == 1)))
        return 0;
    char key[1100];
    int kn = snprintf(key, sizeof key, "h5zarr:trees:%s", node_path(n));
    if (kn < 0 || (size_t)kn >= sizeof key)
        return 0;
    forest_ctx ctx = {v, n};
    void *value = NULL;
    int rc = store_derived(v->s, key, forest_build, &ctx, forest_free, &value, err);
    if (rc)
        return rc;
    const struct h5zarr_forest *f = value;
    if (f->unreadable)
        return 0;
    *out = f;
    return 1;
}

/* ---- the overlay's nodes ---- */

static const char *const SIDE_GROUP[2] = {"node_attrs", "edge_attrs"};

int h5zt_list(const vnode *v, arena *a, const char ***names, size_t *count, cellar_error *err)
{
    const struct h5zarr_forest *f = v->forest;
    size_t n = 0;
    const char **out = NULL;
    if (v->src == VS_TREES) {
        out = arena_calloc(a, f->n ? f->n : 1, sizeof *out);
        for (size_t i = 0; out && i < f->n; i++)
            out[n++] = f->trees[i].key;
    } else if (v->src == VS_TREE) {
        const vtree *vt = &f->trees[v->tree];
        out = arena_calloc(a, 4, sizeof *out);
        if (out) {
            out[n++] = "nodes";
            out[n++] = "edges";
            for (int s = 0; s < 2; s++)
                if (vt->ncols[s])
                    out[n++] = SIDE_GROUP[s];
        }
    } else if (v->src == VS_TREE_ATTRS) {
        const vtree *vt = &f->trees[v->tree];
        size_t nc = vt->ncols[v->edges];
        out = arena_calloc(a, nc ? nc : 1, sizeof *out);
        for (size_t k = 0; out && k < nc; k++)
            out[n++] = vt->cols[v->edges][k].name;
    }
    if (!out)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
    *names = out;
    *count = n;
    return 0;
}

int h5zt_child(const vnode *parent, const char *name, vnode *out)
{
    const struct h5zarr_forest *f = parent->forest;
    memset(out, 0, sizeof *out);
    out->h5 = parent->h5;
    out->forest = f;
    out->tree = parent->tree;
    if (parent->src == VS_TREES) {
        for (size_t i = 0; i < f->n; i++) {
            if (!strcmp(f->trees[i].key, name)) {
                out->kind = VK_GROUP;
                out->src = VS_TREE;
                out->tree = i;
                return 0;
            }
        }
        return 0;
    }
    const vtree *vt = &f->trees[parent->tree];
    if (parent->src == VS_TREE) {
        for (int s = 0; s < 2; s++) {
            if (!strcmp(name, s ? "edges" : "nodes")) {
                out->kind = VK_ARRAY;
                out->src = VS_TREE_IDS;
                out->edges = s;
                out->arr = &vt->ids[s];
            } else if (!strcmp(name, SIDE_GROUP[s]) && vt->ncols[s]) {
                out->kind = VK_GROUP;
                out->src = VS_TREE_ATTRS;
                out->edges = s;
            }
        }
        return 0;
    }
    if (parent->src == VS_TREE_ATTRS) {
        for (size_t k = 0; k < vt->ncols[parent->edges]; k++) {
            const vcolumn *c = &vt->cols[parent->edges][k];
            if (!strcmp(c->name, name)) {
                out->kind = VK_ARRAY;
                out->src = VS_TREE_COLUMN;
                out->edges = parent->edges;
                out->column = k;
                out->arr = &c->arr;
            }
        }
    }
    return 0;
}

/* Whether rest is name or lies under it. */
static int names_or_under(const char *rest, const char *name)
{
    size_t n = strlen(name);
    return !strncmp(rest, name, n) && (rest[n] == '\0' || rest[n] == '/');
}

static const char *left_out_of(const char *const *names, size_t n, const char *rest)
{
    for (size_t i = 0; i < n; i++)
        if (names_or_under(rest, names[i]))
            return names[i];
    return NULL;
}

const char *h5zt_left_out(const vnode *parent, const char *rest, const char **what)
{
    static const char *const SIDE_WHAT[2] = {"node attribute", "edge attribute"};
    const struct h5zarr_forest *f = parent->forest;
    if (parent->src == VS_TREES) {
        *what = "tree";
        return left_out_of(f->left_out, f->nleft_out, rest);
    }
    const vtree *vt = &f->trees[parent->tree];
    for (int s = 0; s < 2; s++) {
        const char *under = rest;
        if (parent->src == VS_TREE) {
            size_t g = strlen(SIDE_GROUP[s]);
            if (strncmp(rest, SIDE_GROUP[s], g) || rest[g] != '/')
                continue;
            under = rest + g + 1;
        } else if (parent->src != VS_TREE_ATTRS || parent->edges != s) {
            continue;
        }
        const char *name = left_out_of(vt->left_out[s], vt->nleft_out[s], under);
        if (name) {
            *what = SIDE_WHAT[s];
            return name;
        }
    }
    return NULL;
}

json_t *h5zt_attrs(const vnode *v)
{
    switch (v->src) {
    case VS_TREE_ATTRS: return json_pack("{s:s, s:s}", "encoding-type", "dict", "encoding-version", "0.1.0");
    case VS_TREE_IDS:
        return json_pack("{s:s, s:s}", "encoding-type", "string-array", "encoding-version", "0.2.0");
    case VS_TREE_COLUMN: {
        const vcolumn *c = &v->forest->trees[v->tree].cols[v->edges][v->column];
        return json_pack("{s:s, s:s}", "encoding-type", c->kind == DT_STRING ? "string-array" : "array",
                         "encoding-version", "0.2.0");
    }
    default: return json_object();
    }
}

int h5zt_chunk(const vnode *v, const int64_t *cidx, uint64_t max_bytes, vchunk *out,
               cellar_error *err)
{
    const vtree *vt = &v->forest->trees[v->tree];
    const varray *a = v->arr;
    int64_t first = cidx[0] * a->chunk[0], rows = a->chunk[0];
    int64_t n = a->shape[0];
    if (v->src == VS_TREE_COLUMN && !a->vlen) {
        const vcolumn *c = &vt->cols[v->edges][v->column];
        size_t bytes = (size_t)rows * a->item;
        char *p = buf_reserve(&out->bytes, bytes);
        if (!p)
            return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
        memset(p, 0, bytes);
        int64_t inside = n - first < rows ? n - first : rows;
        memcpy(p, c->values + (size_t)first * a->item, (size_t)inside * a->item);
        out->bytes.len = bytes;
        return 0;
    }
    int64_t per = v->src == VS_TREE_IDS && v->edges ? 2 : 1;
    size_t items = (size_t)(rows * per);
    const char **s = calloc(items, sizeof *s);
    size_t *len = calloc(items, sizeof *len);
    int rc = 0;
    if (!s || !len) {
        rc = cellar_fail(err, CELLAR_ENOMEM, "out of memory");
        goto done;
    }
    for (int64_t r = 0; r < rows && first + r < n; r++) {
        int64_t i = first + r;
        if (v->src == VS_TREE_COLUMN) {
            s[r] = vt->cols[v->edges][v->column].texts[i];
        } else if (!v->edges) {
            s[r] = tree_index_id(vt->t, (int32_t)i);
        } else {
            s[2 * r] = tree_index_id(vt->t, vt->src[i]);
            s[2 * r + 1] = tree_index_id(vt->t, vt->dst[i]);
        }
    }
    for (size_t i = 0; i < items; i++)
        len[i] = s[i] ? strlen(s[i]) : 0;
    rc = h5za_vlen_encode(s, len, items, max_bytes, &out->bytes, err);
done:
    free(s);
    free(len);
    return rc;
}
