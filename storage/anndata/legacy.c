/* The view of storage/anndata/legacy.h: nodes of a backend of their own
 * (storage/node_impl.h) that stand for stored nodes (aliases, reading
 * through them) or are made up (the dataframe group of an array of
 * records, a categorical of codes and uns categories, raw). */
#include "storage/anndata/legacy.h"

#include <stdlib.h>
#include <string.h>

#include "storage/anndata/anndata.h"
#include "storage/anndata/matrix.h"
#include "storage/node_impl.h"

/* Codes read at once when a legacy categorical's codes are checked. */
enum { CODES_CHUNK = 1 << 16 };

/* How a view node is made from what it stands for. */
typedef enum recipe {
    R_ALIAS = 1,   /* the target as it is; its children are aliases too */
    R_ROOT,        /* the AnnData group: no raw.*, the recipes below */
    R_FRAME,       /* an array of records as a dataframe 0.2.0 group */
    R_CATEGORICAL, /* codes (target) and categories (target2) as a categorical */
    R_FIELDS,      /* an array of records as a dict of its fields */
    R_RAW,         /* raw.X, raw.var and raw.varm as a raw group */
    R_UNS,         /* uns without the categories taken by obs/var */
    R_NEIGHBORS,   /* uns/neighbors without the matrices moved to obsp */
    R_OBSP,        /* obsp with the matrices moved from uns/neighbors */
    R_CONFLICT     /* raw as a group and as raw.*: refused, as anndata does */
} recipe;

typedef struct vspec {
    const char *name;
    recipe r;
    node *target, *target2;
} vspec;

/* A column of a legacy obs/var that is a categorical of uns categories. */
typedef struct cat_use {
    node *frame;      /* the stored obs or var */
    const char *column;
    node *categories; /* uns/{column}_categories */
} cat_use;

static const char *const moved_names[2] = {"distances", "connectivities"};

/* What the view of one AnnData group changes, worked out once. */
typedef struct legacy_plan {
    arena *a;
    node *group;
    node *uns, *neighbors, *obsp;
    node *raw_x, *raw_var, *raw_varm;
    int raw_group;           /* a raw group is stored too */
    int hides_raw_names;     /* some child is named raw.* */
    cat_use *cats;
    size_t n_cats;
    const char **uns_hidden; /* the {column}_categories keys taken */
    size_t n_uns_hidden;
    node *moved[2];          /* uns/neighbors/{distances,connectivities}, or NULL */
} legacy_plan;

typedef struct vnode {
    recipe r;
    node *target, *target2;
    int in_uns;         /* at or below uns */
    int boxed;          /* a 1-element byte string array shown as the 0-d string */
    int restated;       /* an alias whose info or attributes differ from its target's */
    int text;           /* a variable-length string field decoded to str values */
    legacy_plan *plan;  /* owned by the view's root, borrowed below it */
    vspec *kids;        /* NULL: the target's own children, as aliases */
    size_t n_kids;
    arena *a;           /* kids and their names */
} vnode;

static int view_open_child(node *parent, const char *name, node **out, cellar_error *err);
static int view_list_children(node *n, arena *a, const char ***names, size_t *count,
                              cellar_error *err);
static int view_read(node *n, const dim_sel *sel, void *out, size_t out_bytes,
                     cellar_error *err);
static int view_read_strings(node *n, const dim_sel *sel, arena *a, char **out,
                             cellar_error *err);
static int view_file_extent(node *n, int *fd, uint64_t *offset, uint64_t *length);
static int view_stream_string(node *n, size_t piece, node_string_sink sink, void *ctx,
                              cellar_error *err);
static void view_destroy(node *n);

static const node_ops view_ops = {
    .open_child = view_open_child,
    .list_children = view_list_children,
    .read = view_read,
    .read_strings = view_read_strings,
    .file_extent = view_file_extent,
    .stream_string = view_stream_string,
    .destroy = view_destroy,
};

/* ---- what is legacy ---- */

static int is_records(const node *n)
{
    return n && node_get_info(n)->type == NODE_ARRAY && node_get_info(n)->n_fields > 0;
}

/* A 2-D matrix, sparse or dense, as _move_adj_mtx moves it. */
static int is_2d_matrix(node *n)
{
    if (!n)
        return 0;
    const node_info *in = node_get_info(n);
    if (in->type == NODE_ARRAY)
        return in->ndim == 2 && dtype_is_numeric(in->dtype);
    matrix m;
    cellar_error ignored;
    cellar_error_clear(&ignored);
    return matrix_is_sparse(n) && matrix_open(n, &m, &ignored) == 0;
}

/* read_h5ad leaves every raw.* out of the AnnData (raw.X, raw.var and
 * raw.varm become raw); raw.treedata is treedata 0.0.x's, which its
 * reader reads. */
static int is_hidden_raw(const char *name)
{
    return strncmp(name, "raw.", 4) == 0 && strcmp(name, "raw.treedata") != 0;
}

static node *group_child(node *g, const char *name)
{
    node *c = g ? node_child_opt(g, name) : NULL;
    return c && node_get_info(c)->type == NODE_GROUP ? c : NULL;
}

/* Python's str.replace(s, "_categories", ""), as _clean_uns names the
 * column of a key. */
static char *strip_categories(arena *a, const char *key)
{
    static const char tag[] = "_categories";
    size_t tl = sizeof tag - 1;
    char *out = arena_alloc(a, strlen(key) + 1), *o = out;
    if (!out)
        return NULL;
    for (const char *p = key; *p;) {
        if (strncmp(p, tag, tl) == 0) {
            p += tl;
        } else {
            *o++ = *p++;
        }
    }
    *o = '\0';
    return out;
}

/* Whether every code of the integer field col is at least -1 and below
 * n_cats (pd.Categorical.from_codes takes -1 as missing and refuses
 * codes below it; _clean_uns skips a column with a code past the
 * categories).  Reads the column CODES_CHUNK values at a time. */
static int codes_fit(node *col, int64_t n_cats, int *fits, cellar_error *err)
{
    const node_info *in = node_get_info(col);
    *fits = 0;
    if (in->ndim != 1 || !dtype_is_integer(in->dtype))
        return 0;
    size_t es = dtype_size(in->dtype);
    unsigned char *buf = malloc(CODES_CHUNK * es);
    if (!buf)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory reading '%s'", node_path(col));
    int rc = 0, ok = 1;
    for (int64_t start = 0; ok && start < in->shape[0]; start += CODES_CHUNK) {
        int64_t k = in->shape[0] - start < CODES_CHUNK ? in->shape[0] - start : CODES_CHUNK;
        dim_sel sel = dim_sel_range(start, k);
        rc = node_read(col, &sel, buf, (size_t)k * es, err);
        if (rc)
            break;
        for (int64_t i = 0; ok && i < k; i++) {
            const unsigned char *p = buf + (size_t)i * es;
            int64_t v;
            switch (in->dtype) {
            case DT_INT8: v = *(const int8_t *)p; break;
            case DT_INT16: { int16_t x; memcpy(&x, p, 2); v = x; break; }
            case DT_INT32: { int32_t x; memcpy(&x, p, 4); v = x; break; }
            case DT_INT64: memcpy(&v, p, 8); break;
            case DT_UINT8: v = *p; break;
            case DT_UINT16: { uint16_t x; memcpy(&x, p, 2); v = x; break; }
            case DT_UINT32: { uint32_t x; memcpy(&x, p, 4); v = x; break; }
            default: {
                uint64_t x;
                memcpy(&x, p, 8);
                v = x > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)x;
                break;
            }
            }
            ok = v >= -1 && v < n_cats;
        }
    }
    free(buf);
    *fits = !rc && ok;
    return rc;
}

static int name_listed(const char *name, const char *const *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(v[i], name) == 0)
            return 1;
    return 0;
}

/* _clean_uns: for each uns key ending in _categories (in uns order), the
 * obs and var columns it turns into categoricals; the key goes when one
 * did.  A column already taken keeps its first categories. */
static int plan_categories(legacy_plan *p, node *obs, node *var, cellar_error *err)
{
    const char **keys;
    size_t nk;
    int rc = node_children(p->uns, p->a, &keys, &nk, err);
    if (rc)
        return rc;
    p->cats = arena_calloc(p->a, 2 * nk + 1, sizeof *p->cats);
    p->uns_hidden = arena_calloc(p->a, nk + 1, sizeof *p->uns_hidden);
    if (!p->cats || !p->uns_hidden)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
    node *frames[2] = {obs, var};
    for (size_t i = 0; i < nk; i++) {
        size_t kl = strlen(keys[i]);
        if (kl < 11 || strcmp(keys[i] + kl - 11, "_categories") != 0)
            continue;
        node *cats = node_child_opt(p->uns, keys[i]);
        const node_info *ci = cats ? node_get_info(cats) : NULL;
        if (!ci || ci->type != NODE_ARRAY || ci->ndim != 1 ||
            (ci->dtype != DT_STRING && !dtype_is_numeric(ci->dtype)))
            continue;
        const char *col = strip_categories(p->a, keys[i]);
        if (!col)
            return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
        int taken = 0;
        for (int f = 0; f < 2; f++) {
            if (!is_records(frames[f]))
                continue;
            const char **fields;
            size_t nf;
            rc = node_children(frames[f], p->a, &fields, &nf, err);
            if (rc)
                return rc;
            /* the first field is the index, not a column */
            int dup = 0;
            for (size_t j = 0; j < p->n_cats; j++)
                dup |= p->cats[j].frame == frames[f] && strcmp(p->cats[j].column, col) == 0;
            if (dup || nf < 2 || !name_listed(col, fields + 1, nf - 1))
                continue;
            node *codes = node_child_opt(frames[f], col);
            int fits = 0;
            if (codes && (rc = codes_fit(codes, ci->shape[0], &fits, err)))
                return rc;
            if (!fits)
                continue;
            p->cats[p->n_cats++] = (cat_use){frames[f], col, cats};
            taken = 1;
        }
        if (taken)
            p->uns_hidden[p->n_uns_hidden++] = keys[i];
    }
    return 0;
}

/* Works out what the view of g changes; *any says whether anything does. */
static int plan_make(node *g, legacy_plan *p, int *any, cellar_error *err)
{
    *any = 0;
    p->group = g;
    const char **names;
    size_t n;
    int rc = node_children(g, p->a, &names, &n, err);
    if (rc)
        return rc;
    for (size_t i = 0; i < n; i++)
        p->hides_raw_names |= is_hidden_raw(names[i]);
    node *obs = node_child_opt(g, "obs"), *var = node_child_opt(g, "var");
    p->uns = group_child(g, "uns");
    p->obsp = node_child_opt(g, "obsp");
    p->raw_x = node_child_opt(g, "raw.X");
    p->raw_group = node_child_opt(g, "raw") != NULL;
    if (p->raw_x) {
        p->raw_var = node_child_opt(g, "raw.var");
        p->raw_varm = node_child_opt(g, "raw.varm");
    }
    p->neighbors = group_child(p->uns, "neighbors");
    for (int k = 0; k < 2; k++) {
        node *m = p->neighbors ? node_child_opt(p->neighbors, moved_names[k]) : NULL;
        p->moved[k] = is_2d_matrix(m) ? m : NULL;
        *any |= p->moved[k] != NULL;
    }
    /* read_h5ad cleans uns only when obs is a dataset (anndata < 0.7) */
    if (is_records(obs) && p->uns) {
        rc = plan_categories(p, obs, var, err);
        if (rc)
            return rc;
    }
    *any |= p->hides_raw_names || is_records(obs) || is_records(var) ||
            is_records(node_child_opt(g, "obsm")) || is_records(node_child_opt(g, "varm"));
    return 0;
}

static node *cat_categories(const legacy_plan *p, const node *df, const char *column)
{
    for (size_t i = 0; i < p->n_cats; i++)
        if (p->cats[i].frame == df && strcmp(p->cats[i].column, column) == 0)
            return p->cats[i].categories;
    return NULL;
}

/* ---- making view nodes ---- */

typedef struct kids_builder {
    vnode *v;
    size_t cap;
} kids_builder;

static int kid_add(kids_builder *b, const char *name, recipe r, node *target, node *target2,
                   cellar_error *err)
{
    vnode *v = b->v;
    if (v->n_kids == b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 8;
        vspec *grown = arena_calloc(v->a, cap, sizeof *grown);
        if (!grown)
            return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
        if (v->n_kids)
            memcpy(grown, v->kids, v->n_kids * sizeof *grown);
        v->kids = grown;
        b->cap = cap;
    }
    const char *copy = arena_strdup(v->a, name);
    if (!copy)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
    v->kids[v->n_kids++] = (vspec){copy, r, target, target2};
    return 0;
}

/* Every child of target as an alias, but the names in skip. */
static int kids_of(kids_builder *b, node *target, const char *const *skip, size_t n_skip,
                   cellar_error *err)
{
    const char **names;
    size_t n;
    int rc = node_children(target, b->v->a, &names, &n, err);
    for (size_t i = 0; !rc && i < n; i++) {
        if (name_listed(names[i], skip, n_skip))
            continue;
        node *c = NULL;
        rc = node_child(target, names[i], &c, err);
        if (!rc)
            rc = kid_add(b, names[i], R_ALIAS, c, NULL, err);
    }
    return rc;
}

static recipe records_or_alias(node *n, recipe records)
{
    return is_records(n) ? records : R_ALIAS;
}

static int kids_root(kids_builder *b, const legacy_plan *p, cellar_error *err)
{
    node *g = p->group;
    const char **names;
    size_t n;
    int rc = node_children(g, b->v->a, &names, &n, err);
    int any_moved = p->moved[0] || p->moved[1];
    for (size_t i = 0; !rc && i < n; i++) {
        const char *k = names[i];
        if (is_hidden_raw(k))
            continue;
        node *c = NULL;
        rc = node_child(g, k, &c, err);
        if (rc)
            break;
        recipe r = R_ALIAS;
        if (!strcmp(k, "obs") || !strcmp(k, "var"))
            r = records_or_alias(c, R_FRAME);
        else if (!strcmp(k, "obsm") || !strcmp(k, "varm"))
            r = records_or_alias(c, R_FIELDS);
        else if (!strcmp(k, "uns") && c == p->uns && (p->n_uns_hidden || any_moved))
            r = R_UNS;
        else if (!strcmp(k, "obsp") && any_moved && node_get_info(c)->type == NODE_GROUP)
            r = R_OBSP;
        else if (!strcmp(k, "raw") && p->raw_x)
            r = R_CONFLICT;
        rc = kid_add(b, k, r, c, NULL, err);
    }
    if (!rc && p->raw_x && !p->raw_group)
        rc = kid_add(b, "raw", R_RAW, NULL, NULL, err);
    if (!rc && any_moved && !p->obsp)
        rc = kid_add(b, "obsp", R_OBSP, NULL, NULL, err);
    return rc;
}

static int kids_frame(kids_builder *b, node *target, const legacy_plan *p, json_t *attrs,
                      cellar_error *err)
{
    const char **fields;
    size_t n;
    int rc = node_children(target, b->v->a, &fields, &n, err);
    if (rc)
        return rc;
    json_t *order = json_array();
    if (!order || json_object_set_new(attrs, "column-order", order))
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
    /* read_dataframe_legacy: set_index(columns[0]) */
    if (n && json_object_set_new(attrs, "_index", json_string(fields[0])))
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        node *c = NULL;
        rc = node_child(target, fields[i], &c, err);
        if (rc)
            return rc;
        node *cats = i ? cat_categories(p, target, fields[i]) : NULL;
        rc = kid_add(b, fields[i], cats ? R_CATEGORICAL : R_ALIAS, c, cats, err);
        if (!rc && i && json_array_append_new(order, json_string(fields[i])))
            rc = cellar_fail(err, CELLAR_ENOMEM, "out of memory");
        if (rc)
            return rc;
    }
    return 0;
}

static int set_attr(node *n, const char *key, json_t *v, cellar_error *err)
{
    if (!v || json_object_set_new(n->attrs, key, v))
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
    return 0;
}

static int kids_raw(kids_builder *b, const legacy_plan *p, cellar_error *err)
{
    int rc = kid_add(b, "X", R_ALIAS, p->raw_x, NULL, err);
    if (!rc && p->raw_var)
        rc = kid_add(b, "var", records_or_alias(p->raw_var, R_FRAME), p->raw_var, NULL, err);
    if (!rc && p->raw_varm)
        rc = kid_add(b, "varm", records_or_alias(p->raw_varm, R_FIELDS), p->raw_varm, NULL,
                     err);
    return rc;
}

/* The names of the matrices moved from uns/neighbors to obsp. */
static size_t moved_list(const legacy_plan *p, const char **names)
{
    size_t n = 0;
    for (int k = 0; k < 2; k++)
        if (p->moved[k])
            names[n++] = moved_names[k];
    return n;
}

/* obsp as it was, with the moved matrices in (replacing their names). */
static int kids_obsp(kids_builder *b, node *target, const legacy_plan *p, cellar_error *err)
{
    const char *skip[2];
    size_t n_skip = moved_list(p, skip);
    int rc = target ? kids_of(b, target, skip, n_skip, err) : 0;
    for (int k = 0; !rc && k < 2; k++)
        if (p->moved[k])
            rc = kid_add(b, moved_names[k], R_ALIAS, p->moved[k], NULL, err);
    return rc;
}

static int kids_uns(kids_builder *b, node *target, const legacy_plan *p, cellar_error *err)
{
    const char **names;
    size_t n;
    int rc = node_children(target, b->v->a, &names, &n, err);
    for (size_t i = 0; !rc && i < n; i++) {
        if (name_listed(names[i], p->uns_hidden, p->n_uns_hidden))
            continue;
        node *c = NULL;
        rc = node_child(target, names[i], &c, err);
        if (!rc)
            rc = kid_add(b, names[i], c == p->neighbors ? R_NEIGHBORS : R_ALIAS, c, NULL, err);
    }
    return rc;
}

/* The children table and the attributes of a view node of recipe r. */
static int view_fill(node *n, vnode *v, cellar_error *err)
{
    kids_builder b = {v, 0};
    const legacy_plan *p = v->plan;
    switch (v->r) {
    case R_ALIAS:
        return 0;
    case R_ROOT:
        return kids_root(&b, p, err);
    case R_FRAME: {
        int rc = set_attr(n, "encoding-type", json_string("dataframe"), err);
        if (!rc)
            rc = set_attr(n, "encoding-version", json_string("0.2.0"), err);
        return rc ? rc : kids_frame(&b, v->target, p, n->attrs, err);
    }
    case R_CATEGORICAL: {
        int rc = set_attr(n, "encoding-type", json_string("categorical"), err);
        if (!rc)
            rc = set_attr(n, "encoding-version", json_string("0.2.0"), err);
        if (!rc)
            rc = set_attr(n, "ordered", json_false(), err);
        if (!rc)
            rc = kid_add(&b, "codes", R_ALIAS, v->target, NULL, err);
        if (!rc)
            rc = kid_add(&b, "categories", R_ALIAS, v->target2, NULL, err);
        return rc;
    }
    case R_FIELDS:
        return kids_of(&b, v->target, NULL, 0, err);
    case R_RAW:
        return kids_raw(&b, p, err);
    case R_UNS:
        return kids_uns(&b, v->target, p, err);
    case R_NEIGHBORS: {
        const char *skip[2];
        size_t n_skip = moved_list(p, skip);
        return kids_of(&b, v->target, skip, n_skip, err);
    }
    case R_OBSP:
        return kids_obsp(&b, v->target, p, err);
    default:
        return cellar_fail(err, CELLAR_EINTERNAL, "unknown view recipe");
    }
}

/* n's attributes are a copy of target's (nothing shared between trees). */
static int copy_attrs(node *n, const node *target, cellar_error *err)
{
    json_t *copy = json_deep_copy(node_attrs(target));
    if (!copy)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
    json_decref(n->attrs);
    n->attrs = copy;
    return 0;
}

/* A stored byte string array of one value without an encoding: what
 * read_h5ad's read_dataset reads as that string (old writers stored
 * scalars in uns so). */
static int is_boxed_bytes(const node *n)
{
    const node_info *in = node_get_info(n);
    return in->type == NODE_ARRAY && !element_encoding(n) && in->dtype == DT_STRING &&
           in->string_size > 0 && in->n_fields == 0 && in->ndim == 1 && in->shape[0] == 1;
}

/* An alias n (info and attributes copied from its target) as anndata reads
 * the stored node in these layouts, restated so that a reader of the zarr
 * view reads the same: a variable-length string field of an array of
 * records (read_dataframe_legacy decodes every string field to str) is
 * text (legacy_text), and a boxed byte string in uns is the 0-d string it
 * stands for. */
static int alias_as_read(node *n, vnode *v, const vnode *up, cellar_error *err)
{
    const node_info *in = &n->info;
    int rc = 0;
    v->restated = 1;
    if (up && up->r == R_FRAME && in->type == NODE_ARRAY && in->dtype == DT_STRING &&
        in->string_size == 0 && in->ndim == 1 && !element_encoding(n)) {
        v->text = 1;
    } else if (v->in_uns && is_boxed_bytes(n)) {
        v->boxed = 1;
        n->info.ndim = 0;
        n->info.shape[0] = 0;
        n->info.string_size = 0;
        rc = set_attr(n, "encoding-type", json_string("string"), err);
        if (!rc)
            rc = set_attr(n, "encoding-version", json_string("0.2.0"), err);
    } else {
        v->restated = 0;
    }
    return rc;
}

/* A view node of spec s under parent (NULL for the view's root). */
static int view_make(node *parent, const vspec *s, legacy_plan *plan, node **out,
                     cellar_error *err)
{
    *out = NULL;
    if (s->r == R_CONFLICT)
        return cellar_fail(err, CELLAR_EFORMAT,
                           "'%s' holds raw both as a group and as raw.X/raw.var/raw.varm, "
                           "which anndata refuses to read",
                           node_path(plan->group));
    node *n = node_new(&view_ops, parent, s->name);
    vnode *v = n ? calloc(1, sizeof *v) : NULL;
    arena *a = v ? arena_new() : NULL;
    if (!a) {
        free(v);
        node_tree_free(n);
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory opening '%s'", s->name);
    }
    v->r = s->r;
    v->target = s->target;
    v->target2 = s->target2;
    v->plan = plan;
    v->a = a;
    n->impl = v;
    const vnode *up = parent && parent->ops == &view_ops ? parent->impl : NULL;
    v->in_uns = (up && up->in_uns) || (up && up->r == R_ROOT && !strcmp(s->name, "uns"));
    int rc = 0;
    if (s->r == R_ALIAS && s->target) {
        n->info = *node_get_info(s->target);
        rc = copy_attrs(n, s->target, err);
        if (!rc)
            rc = alias_as_read(n, v, up, err);
    } else {
        n->info.type = NODE_GROUP;
        if (s->target && node_get_info(s->target)->type == NODE_GROUP)
            rc = copy_attrs(n, s->target, err);
    }
    if (!rc)
        rc = view_fill(n, v, err);
    if (rc) {
        node_tree_free(n);
        return rc;
    }
    *out = n;
    return 0;
}

/* ---- node_ops ---- */

static int view_open_child(node *parent, const char *name, node **out, cellar_error *err)
{
    vnode *v = parent->impl;
    if (v->r == R_ALIAS) {
        node *c = NULL;
        int rc = node_child(v->target, name, &c, err);
        if (rc)
            return rc;
        vspec s = {name, R_ALIAS, c, NULL};
        return view_make(parent, &s, v->plan, out, err);
    }
    for (size_t i = 0; i < v->n_kids; i++)
        if (strcmp(v->kids[i].name, name) == 0)
            return view_make(parent, &v->kids[i], v->plan, out, err);
    return cellar_fail(err, CELLAR_ENOTFOUND, "no element '%s' in '%s'", name, parent->path);
}

static int view_list_children(node *n, arena *a, const char ***names, size_t *count,
                              cellar_error *err)
{
    vnode *v = n->impl;
    if (v->r == R_ALIAS)
        return node_children(v->target, a, names, count, err);
    const char **out = arena_calloc(a, v->n_kids ? v->n_kids : 1, sizeof *out);
    if (!out)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory listing '%s'", n->path);
    for (size_t i = 0; i < v->n_kids; i++)
        out[i] = v->kids[i].name;
    *names = out;
    *count = v->n_kids;
    return 0;
}

static int view_read(node *n, const dim_sel *sel, void *out, size_t out_bytes,
                     cellar_error *err)
{
    return node_read(((vnode *)n->impl)->target, sel, out, out_bytes, err);
}

static int view_read_strings(node *n, const dim_sel *sel, arena *a, char **out,
                             cellar_error *err)
{
    const vnode *v = n->impl;
    dim_sel one = dim_sel_range(0, 1);
    return node_read_strings(v->target, v->boxed ? &one : sel, a, out, err);
}

static int view_file_extent(node *n, int *fd, uint64_t *offset, uint64_t *length)
{
    const vnode *v = n->impl;
    return v->boxed ? 1 : node_file_extent(v->target, fd, offset, length);
}

static int view_stream_string(node *n, size_t piece, node_string_sink sink, void *ctx,
                              cellar_error *err)
{
    return node_stream_string(((vnode *)n->impl)->target, piece, sink, ctx, err);
}

static void view_destroy(node *n)
{
    vnode *v = n->impl;
    if (!v)
        return;
    if (v->r == R_ROOT && v->plan) {
        arena_free(v->plan->a);
        free(v->plan);
    }
    arena_free(v->a);
    free(v);
    n->impl = NULL;
}

/* ---- the view of a group, kept on it ---- */

typedef struct view_memo {
    node *view; /* the group itself when nothing is legacy */
    int owned;
} view_memo;

static const char view_memo_key = 0;

static void view_memo_free(void *value)
{
    view_memo *m = value;
    if (m && m->owned)
        node_tree_free(m->view);
    free(m);
}

/* Gives the view's root the group's path and name, and the group's tree
 * for absolute paths (HDF5 object references name stored nodes). */
static int root_take_place(node *root, node *g, cellar_error *err)
{
    char *path = strdup(node_path(g)), *name = strdup(node_name(g));
    if (!path || !name) {
        free(path);
        free(name);
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
    }
    free(root->path);
    free(root->name);
    root->path = path;
    root->name = name;
    root->root = g->root;
    return 0;
}

static int view_build(node *g, void *ctx, void **value, cellar_error *err)
{
    (void)ctx;
    view_memo *m = calloc(1, sizeof *m);
    legacy_plan *p = m ? calloc(1, sizeof *p) : NULL;
    if (p)
        p->a = arena_new();
    if (!p || !p->a) {
        free(p);
        free(m);
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory opening '%s'", node_path(g));
    }
    int any = 0;
    int rc = node_get_info(g)->type == NODE_GROUP ? plan_make(g, p, &any, err) : 0;
    if (rc || !any) {
        arena_free(p->a);
        free(p);
        if (rc) {
            free(m);
            return rc;
        }
        m->view = g;
        *value = m;
        return 0;
    }
    /* The path is set right after node_new, before any child is made. */
    node *n = node_new(&view_ops, NULL, "");
    vnode *v = n ? calloc(1, sizeof *v) : NULL;
    arena *a = v ? arena_new() : NULL;
    if (!a) {
        free(v);
        node_tree_free(n);
        arena_free(p->a);
        free(p);
        free(m);
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory opening '%s'", node_path(g));
    }
    *v = (vnode){.r = R_ROOT, .target = g, .plan = p, .a = a};
    n->impl = v; /* owns p from here */
    n->info.type = NODE_GROUP;
    rc = copy_attrs(n, g, err);
    if (!rc)
        rc = root_take_place(n, g, err);
    if (!rc)
        rc = view_fill(n, v, err);
    if (rc) {
        node_tree_free(n);
        free(m);
        return rc;
    }
    m->view = n;
    m->owned = 1;
    *value = m;
    return 0;
}

int legacy_text(const node *n)
{
    return n && n->ops == &view_ops && n->impl && ((const vnode *)n->impl)->text;
}

node *legacy_stored(node *n)
{
    while (n && n->ops == &view_ops) {
        const vnode *v = n->impl;
        if (!v || v->r != R_ALIAS || !v->target || v->restated)
            return n;
        n = v->target;
    }
    return n;
}

int legacy_view(node *g, node **out, cellar_error *err)
{
    *out = g;
    void *v = NULL;
    int rc = node_memo(g, &view_memo_key, view_build, NULL, view_memo_free, &v, err);
    if (rc)
        return rc;
    *out = ((view_memo *)v)->view;
    return 0;
}
