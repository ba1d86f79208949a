#include "storage/trees/trees.h"

#include <inttypes.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/arena.h"
#include "storage/budget.h"
#include "storage/registry.h"
#include "storage/trees/tree_json.h"

/* treedata 0.0.x's one JSON string of trees and settings. */
#define LEGACY_TREEDATA "raw.treedata"

/* Pieces in which an .h5td JSON string is read from the file and parsed. */
#define TREES_STREAM_PIECE ((size_t)1 << 20)

/* Re-prefixes an error's detail ("obst: ..."), keeping its code. */
static int fail_prefixed(cellar_error *err, int code, const char *prefix)
{
    if (!err)
        return code;
    char detail[CELLAR_ERROR_DETAIL_MAX];
    snprintf(detail, sizeof detail, "%s", err->code ? err->detail : "");
    cellar_error_clear(err);
    return cellar_fail(err, code, "%s: %s", prefix, detail[0] ? detail : cellar_strerror(code));
}

void trees_free(trees_loaded *t)
{
    if (!t)
        return;
    tree_forest_free(t->forest);
    free(t->sizes);
    free(t);
}

/* ---- JSON layouts (.h5td, pre-0.3 zarr, 0.0.x raw.treedata) ---- */

/* One JSON string to parse: an obst/vart of trees, or treedata 0.0.x's
 * raw.treedata (tree_json_reader_new_legacy) with the trees of `axis`. */
typedef struct json_job {
    int legacy;
    const char *axis;          /* legacy: the member of trees, NULL for none */
    tree_forest *forest;       /* out */
    tree_json_legacy settings; /* out, legacy only */
} json_job;

static tree_json_reader *job_reader(const json_job *job)
{
    return job->legacy ? tree_json_reader_new_legacy(job->axis) : tree_json_reader_new();
}

/* Ends the parse of job with reader r (freed here). */
static int job_finish(json_job *job, tree_json_reader *r, cellar_error *err)
{
    int rc = tree_json_reader_finish(r, &job->forest, err);
    if (!rc && job->legacy)
        tree_json_reader_legacy(r, &job->settings);
    tree_json_reader_free(r);
    return rc;
}

static int load_json_text(node *t, const char *what, json_job *job, cellar_error *err)
{
    arena *a = arena_new();
    if (!a)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory reading %s", what);
    char *text = NULL;
    const node_info *info = node_get_info(t);
    dim_sel one = dim_sel_range(0, 1);
    int rc = node_read_strings(t, info->ndim == 1 ? &one : NULL, a, &text, err);
    if (!rc && !text)
        rc = cellar_fail(err, CELLAR_EFORMAT, "%s holds no text", what);
    tree_json_reader *r = rc ? NULL : job_reader(job);
    if (!rc && !r)
        rc = cellar_fail(err, CELLAR_ENOMEM, "out of memory reading %s", what);
    if (r) {
        rc = tree_json_reader_feed(r, text, strlen(text), err);
        if (rc)
            tree_json_reader_free(r);
        else
            rc = job_finish(job, r, err);
        if (rc)
            rc = fail_prefixed(err, rc, what);
    }
    arena_free(a);
    return rc;
}

typedef struct stream_ctx {
    tree_json_reader *r;
    int started;
} stream_ctx;

static int stream_sink(void *ctx, const char *data, size_t len, cellar_error *err)
{
    stream_ctx *sc = ctx;
    sc->started = 1;
    return tree_json_reader_feed(sc->r, data, len, err);
}

/* The JSON string parsed while the backend streams it from the file,
 * without holding it in memory.  1 when this way does not apply or the JSON does not parse
 * (then the caller reads the text through the backend, which also replaces
 * invalid UTF-8 as every string read does, so answers and errors stay those
 * of that path); 0 or an error otherwise. */
static int load_json_streamed(node *t, json_job *job, cellar_error *err)
{
    stream_ctx sc = {.r = job_reader(job)};
    if (!sc.r)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory reading %s", node_path(t));
    cellar_error local;
    cellar_error_clear(&local);
    int rc = node_stream_string(t, TREES_STREAM_PIECE, stream_sink, &sc, &local);
    if (!rc) {
        rc = job_finish(job, sc.r, &local);
    } else {
        tree_json_reader_free(sc.r);
    }
    if (rc == CELLAR_ENOMEM || rc == CELLAR_EIO || (rc && sc.started && rc != CELLAR_EFORMAT))
        return cellar_fail(err, rc, "%s", local.detail);
    return rc ? 1 : 0;
}

static int load_json(node *t, const char *what, json_job *job, int stream, int *streamed,
                     cellar_error *err)
{
    const node_info *info = node_get_info(t);
    if (info->type != NODE_ARRAY || info->dtype != DT_STRING ||
        !(info->ndim == 0 || (info->ndim == 1 && info->shape[0] == 1)))
        return cellar_fail(err, CELLAR_EFORMAT,
                           job->legacy ? "%s is not a JSON string"
                                       : "%s is neither a group of trees nor a JSON string of trees",
                           what);
    int rc = stream ? load_json_streamed(t, job, err) : 1;
    *streamed = rc == 0;
    return rc == 1 ? load_json_text(t, what, job, err) : rc;
}

/* ---- columnar zarr layout (treedata >= 0.3) ---- */

/* One attribute column read into the builder's terms. */
static int read_column(node *col, const char *what, int64_t n, arena *a,
                       tree_attr_column *out, cellar_error *err)
{
    const node_info *info = node_get_info(col);
    if (info->type != NODE_ARRAY || info->ndim != 1 || info->shape[0] != n)
        return cellar_fail(err, CELLAR_EFORMAT,
                           "%s is not a 1-D array of %" PRId64 " values (one per element)",
                           what, n);
    dim_sel all = dim_sel_range(0, n);
    size_t count = (size_t)n;
    dtype_kind dt = info->dtype;
    out->name = node_name(col);
    if (dt == DT_STRING) {
        char **texts = arena_calloc(a, count ? count : 1, sizeof *texts);
        if (!texts)
            return cellar_fail(err, CELLAR_ENOMEM, "out of memory reading %s", what);
        int rc = n ? node_read_strings(col, &all, a, texts, err) : 0;
        out->kind = TREE_COLUMN_JSON;
        out->values = texts;
        return rc;
    }
    size_t size = dtype_size(dt);
    if (!dtype_is_numeric(dt) || dt == DT_FLOAT16 || !size)
        return cellar_fail(err, CELLAR_EFORMAT, "%s has dtype %s, which is not a tree attribute "
                           "column (int, float, bool or JSON strings)", what, dtype_name(dt));
    void *raw = arena_calloc(a, count ? count : 1, size);
    if (!raw)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory reading %s", what);
    int rc = n ? node_read(col, &all, raw, count * size, err) : 0;
    if (rc)
        return rc;
    if (dt == DT_BOOL) {
        out->kind = TREE_COLUMN_BOOL;
        out->values = raw;
        return 0;
    }
    if (dt == DT_FLOAT64 || dt == DT_FLOAT32) {
        double *v = dt == DT_FLOAT64 ? raw : arena_calloc(a, count ? count : 1, sizeof *v);
        if (!v)
            return cellar_fail(err, CELLAR_ENOMEM, "out of memory reading %s", what);
        if (dt == DT_FLOAT32)
            for (size_t i = 0; i < count; i++)
                v[i] = ((const float *)raw)[i];
        out->kind = TREE_COLUMN_FLOAT64;
        out->values = v;
        return 0;
    }
    if (dt == DT_UINT64) {
        /* Values past INT64_MAX cannot be an int64 column: give them as JSON. */
        const uint64_t *u = raw;
        int big = 0;
        for (size_t i = 0; i < count && !big; i++)
            big = u[i] > (uint64_t)INT64_MAX;
        if (big) {
            char **texts = arena_calloc(a, count ? count : 1, sizeof *texts);
            if (!texts)
                return cellar_fail(err, CELLAR_ENOMEM, "out of memory reading %s", what);
            for (size_t i = 0; i < count; i++)
                if (!(texts[i] = arena_printf(a, "%" PRIu64, u[i])))
                    return cellar_fail(err, CELLAR_ENOMEM, "out of memory reading %s", what);
            out->kind = TREE_COLUMN_JSON;
            out->values = texts;
            return 0;
        }
    }
    int64_t *v = dt == DT_INT64 ? raw : arena_calloc(a, count ? count : 1, sizeof *v);
    if (!v)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory reading %s", what);
    for (size_t i = 0; i < count && dt != DT_INT64; i++) {
        switch (dt) {
        case DT_INT8: v[i] = ((const int8_t *)raw)[i]; break;
        case DT_INT16: v[i] = ((const int16_t *)raw)[i]; break;
        case DT_INT32: v[i] = ((const int32_t *)raw)[i]; break;
        case DT_UINT8: v[i] = ((const uint8_t *)raw)[i]; break;
        case DT_UINT16: v[i] = ((const uint16_t *)raw)[i]; break;
        case DT_UINT32: v[i] = ((const uint32_t *)raw)[i]; break;
        default: v[i] = (int64_t)((const uint64_t *)raw)[i]; break;
        }
    }
    out->kind = TREE_COLUMN_INT64;
    out->values = v;
    return 0;
}

/* What one value of an attribute column costs once read_column has read
 * it: a string's pointer and copy, or the stored number and its widened
 * copy. */
static uint64_t column_value_bytes(const node *col)
{
    const node_info *info = node_get_info(col);
    if (info->dtype == DT_STRING)
        return BUDGET_STRING_BYTES;
    return dtype_size(info->dtype) + 8;
}

/* The columns of an optional attribute group (`node_attrs/`, `edge_attrs/`). */
static int read_columns(node *tg, const char *group, const char *what, int64_t n, arena *a,
                        tree_attr_column **cols, size_t *n_cols, cellar_error *err)
{
    *cols = NULL;
    *n_cols = 0;
    node *g = node_child_opt(tg, group);
    if (!g)
        return 0;
    if (node_get_info(g)->type != NODE_GROUP)
        return cellar_fail(err, CELLAR_EFORMAT, "%s/%s is not a group of columns", what, group);
    const char **names;
    size_t count;
    int rc = node_children(g, a, &names, &count, err);
    if (rc)
        return rc;
    /* The columns are held together, n values each (the elements' count,
     * from a shape): their sum is bounded before any is read. */
    uint64_t per_row = 0;
    for (size_t i = 0; i < count; i++) {
        node *col = node_child_opt(g, names[i]);
        per_row += col ? column_value_bytes(col) : 0;
    }
    const char *gwhat = arena_printf(a, "the columns of %s/%s", what, group);
    if (!gwhat)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory reading %s", what);
    rc = budget_check_whole(n, per_row, gwhat, err);
    if (rc)
        return rc;
    tree_attr_column *c = arena_calloc(a, count ? count : 1, sizeof *c);
    if (!c)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory reading %s/%s", what, group);
    for (size_t i = 0; i < count; i++) {
        node *col;
        const char *cwhat = arena_printf(a, "%s/%s/%s", what, group, names[i]);
        if (!cwhat)
            return cellar_fail(err, CELLAR_ENOMEM, "out of memory reading %s", what);
        rc = node_child(g, names[i], &col, err);
        if (!rc)
            rc = read_column(col, cwhat, n, a, &c[i], err);
        if (rc)
            return rc;
    }
    *cols = c;
    *n_cols = count;
    return 0;
}

/* The 1-D `nodes` of one tree group. */
static int read_nodes(node *tg, const char *what, arena *a, int64_t *n_nodes, char ***ids,
                      cellar_error *err)
{
    node *nn;
    int rc = node_child(tg, "nodes", &nn, err);
    if (rc)
        return fail_prefixed(err, CELLAR_EFORMAT, what);
    const node_info *ni = node_get_info(nn);
    if (ni->type != NODE_ARRAY || ni->ndim != 1 || ni->dtype != DT_STRING)
        return cellar_fail(err, CELLAR_EFORMAT, "%s/nodes is not a 1-D string array", what);
    *n_nodes = ni->shape[0];
    /* The shape sizes the ids: bounded before they are allocated. */
    const char *nwhat = arena_printf(a, "the nodes of %s", what);
    if (!nwhat)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory reading %s/nodes", what);
    if ((rc = budget_check_whole(*n_nodes, BUDGET_STRING_BYTES, nwhat, err)))
        return rc;
    *ids = arena_calloc(a, (size_t)*n_nodes + 1, sizeof **ids);
    if (!*ids)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory reading %s/nodes", what);
    dim_sel all = dim_sel_range(0, *n_nodes);
    if (*n_nodes && (rc = node_read_strings(nn, &all, a, *ids, err)))
        return rc;
    return 0;
}

/* The (n, 2) `edges` of one tree group, as source and target columns. */
static int read_edges(node *tg, const char *what, arena *a, int64_t *n_edges, char ***src,
                      char ***dst, cellar_error *err)
{
    int rc = 0;
    *n_edges = 0;
    *src = *dst = NULL;
    node *en = node_child_opt(tg, "edges");
    if (!en)
        return 0;
    const node_info *ei = node_get_info(en);
    if (ei->type != NODE_ARRAY || ei->ndim < 1 || ei->ndim > 2)
        return cellar_fail(err, CELLAR_EFORMAT, "%s/edges is not an (n, 2) array", what);
    if (ei->shape[0] == 0)
        return 0;
    if (ei->ndim != 2 || ei->shape[1] != 2 || ei->dtype != DT_STRING)
        return cellar_fail(err, CELLAR_EFORMAT, "%s/edges is not an (n, 2) string array", what);
    int64_t m = ei->shape[0];
    if ((uint64_t)m > SIZE_MAX / (4 * sizeof(char *)))
        return cellar_fail(err, CELLAR_ETOOBIG, "%s/edges is too long", what);
    /* Two strings an edge, split into two columns of pointers: the shape
     * sizes them, so they are bounded before they are allocated. */
    const char *ewhat = arena_printf(a, "the edges of %s", what);
    if (!ewhat)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory reading %s/edges", what);
    if ((rc = budget_check_whole(m, 2 * BUDGET_STRING_BYTES + 2 * sizeof(char *), ewhat, err)))
        return rc;
    /* pairs is malloc'd, not in the arena: it is dead once split */
    char **pairs = calloc((size_t)m * 2, sizeof *pairs);
    *src = arena_calloc(a, (size_t)m, sizeof **src);
    *dst = arena_calloc(a, (size_t)m, sizeof **dst);
    if (!pairs || !*src || !*dst) {
        free(pairs);
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory reading %s/edges", what);
    }
    dim_sel sel[2] = {dim_sel_range(0, m), dim_sel_range(0, 2)};
    if ((rc = node_read_strings(en, sel, a, pairs, err))) {
        free(pairs);
        return rc;
    }
    for (int64_t i = 0; i < m; i++) {
        (*src)[i] = pairs[2 * i];
        (*dst)[i] = pairs[2 * i + 1];
    }
    free(pairs);
    *n_edges = m;
    return 0;
}

/* Nodes first, then edges, each phase's columns freed before the next is
 * read, so that a build holds one phase's columns at a time. */
static int load_tree_group(node *tg, const char *what, tree_index **out, cellar_error *err)
{
    arena *a = arena_new();
    tree_builder *b = tree_builder_new(what);
    int rc = 0;
    if (!a || !b) {
        rc = cellar_fail(err, CELLAR_ENOMEM, "out of memory reading %s", what);
        goto done;
    }
    int64_t n_nodes = 0, n_edges = 0;
    char **ids = NULL, **src = NULL, **dst = NULL;
    tree_attr_column *ncols = NULL, *ecols = NULL;
    size_t n_ncols = 0, n_ecols = 0;
    rc = read_nodes(tg, what, a, &n_nodes, &ids, err);
    if (!rc)
        rc = read_columns(tg, "node_attrs", what, n_nodes, a, &ncols, &n_ncols, err);
    if (!rc)
        rc = tree_builder_add_nodes(b, n_nodes, (const char *const *)ids, n_ncols, ncols, err);
    arena_free(a);
    malloc_trim(0); /* the node columns' memory, before the edges' is read */
    a = rc ? NULL : arena_new();
    if (!rc && !a)
        rc = cellar_fail(err, CELLAR_ENOMEM, "out of memory reading %s", what);
    if (!rc)
        rc = read_edges(tg, what, a, &n_edges, &src, &dst, err);
    if (!rc)
        rc = read_columns(tg, "edge_attrs", what, n_edges, a, &ecols, &n_ecols, err);
    if (!rc && n_edges)
        rc = tree_builder_add_edges(b, n_edges, (const char *const *)src,
                                    (const char *const *)dst, n_ecols, ecols, err);
    arena_free(a);
    a = NULL;
    malloc_trim(0); /* the edge columns' memory, before the index is built */
    if (!rc) {
        rc = tree_builder_finish(b, out, err);
        b = NULL;
    }
done:
    tree_builder_free(b);
    arena_free(a);
    return rc;
}

static int load_columnar(node *g, const char *axis, tree_forest *forest, cellar_error *err)
{
    arena *a = arena_new();
    if (!a)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory reading %s", axis);
    const char **names = NULL;
    size_t count = 0;
    int rc = node_children(g, a, &names, &count, err);
    for (size_t i = 0; i < count && !rc; i++) {
        node *tg;
        rc = node_child(g, names[i], &tg, err);
        if (rc)
            break;
        if (node_get_info(tg)->type != NODE_GROUP)
            continue; /* treedata's reader skips arrays here too */
        const char *what = arena_printf(a, "%s/%s", axis, names[i]);
        if (!what) {
            rc = cellar_fail(err, CELLAR_ENOMEM, "out of memory reading %s", axis);
            break;
        }
        tree_index *t = NULL;
        rc = load_tree_group(tg, what, &t, err);
        if (!rc)
            rc = tree_forest_add(forest, names[i], t, err);
    }
    arena_free(a);
    return rc;
}

/* ---- both ---- */

static int measure(trees_loaded *t, cellar_error *err)
{
    size_t n = tree_forest_count(t->forest);
    t->sizes = calloc(n ? n : 1, sizeof *t->sizes);
    if (!t->sizes)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory measuring trees");
    for (size_t i = 0; i < n; i++) {
        const tree_index *ti = tree_forest_tree(t->forest, i);
        tree_sizes *s = &t->sizes[i];
        int32_t nn = tree_index_node_count(ti);
        for (int32_t v = 0; v < nn; v++) {
            const char *e = tree_index_edge_attrs(ti, v);
            s->id_bytes += strlen(tree_index_id(ti, v));
            s->attr_bytes += strlen(tree_index_attrs(ti, v));
            s->edge_bytes += e ? strlen(e) : 0;
        }
    }
    t->bytes = sizeof *t + n * sizeof *t->sizes + tree_forest_bytes(t->forest);
    return 0;
}

/* treedata's _parse_legacy: the trees of treedata 0.0.x's raw.treedata,
 * when it has them, over the element's; t->forest stays NULL when there
 * are none there. */
static int load_legacy(node *group, const char *axis, int stream, trees_loaded *t,
                       cellar_error *err)
{
    node *legacy = node_child_opt(group, LEGACY_TREEDATA);
    if (!legacy)
        return 0;
    json_job job = {.legacy = 1, .axis = axis};
    int rc = load_json(legacy, LEGACY_TREEDATA, &job, stream, &t->streamed, err);
    free(job.settings.label);
    if (!rc && job.settings.has_trees) {
        t->forest = job.forest;
        return 0;
    }
    tree_forest_free(job.forest);
    t->streamed = 0;
    return rc;
}

int trees_load(node *group, const char *axis, int stream, trees_loaded **out,
               cellar_error *err)
{
    *out = NULL;
    if (strcmp(axis, "obst") != 0 && strcmp(axis, "vart") != 0)
        return cellar_fail(err, CELLAR_EINVAL, "'%s' is not a tree axis (obst, vart)", axis);
    trees_loaded *t = calloc(1, sizeof *t);
    if (!t)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory reading %s", axis);
    int rc = load_legacy(group, axis, stream, t, err);
    node *tn = rc || t->forest ? NULL : node_child_opt(group, axis);
    if (rc || t->forest) {
        ; /* raw.treedata's trees, or why it cannot be read */
    } else if (!tn) {
        t->forest = tree_forest_new();
        if (!t->forest)
            rc = cellar_fail(err, CELLAR_ENOMEM, "out of memory reading %s", axis);
    } else if (node_get_info(tn)->type == NODE_GROUP) {
        t->forest = tree_forest_new();
        rc = t->forest ? load_columnar(tn, axis, t->forest, err)
                       : cellar_fail(err, CELLAR_ENOMEM, "out of memory reading %s", axis);
    } else {
        json_job job = {0};
        rc = load_json(tn, axis, &job, stream, &t->streamed, err);
        t->forest = job.forest;
    }
    if (!rc)
        rc = measure(t, err);
    if (rc) {
        trees_free(t);
        return rc;
    }
    *out = t;
    return 0;
}

/* ---- the per-version cache ---- */

/* What is cached: the trees, or why they cannot be read. */
typedef struct trees_cached {
    trees_loaded *loaded;
    int code;
    char detail[CELLAR_ERROR_DETAIL_MAX];
} trees_cached;

typedef struct build_ctx {
    node *group;
    const char *axis;
} build_ctx;

static void cached_free(void *value)
{
    trees_cached *c = value;
    if (c)
        trees_free(c->loaded);
    free(c);
}

static int cached_build(void *ctx, void **value, size_t *bytes, cellar_error *err)
{
    build_ctx *bc = ctx;
    trees_cached *c = calloc(1, sizeof *c);
    if (!c)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory reading %s", bc->axis);
    cellar_error local;
    cellar_error_clear(&local);
    int rc = trees_load(bc->group, bc->axis, 1, &c->loaded, &local);
    /* A big tree's build frees tens of MB of parser and builder memory in
     * small pieces that malloc would keep: give them back to the system. */
    malloc_trim(0);
    if (rc == CELLAR_EFORMAT || rc == CELLAR_ETOOBIG) {
        /* A file that is broken stays broken for this version: remember. */
        c->code = rc;
        snprintf(c->detail, sizeof c->detail, "%s", local.detail);
    } else if (rc) {
        free(c);
        return cellar_fail(err, rc, "%s", local.detail);
    }
    *value = c;
    *bytes = sizeof *c + (c->loaded ? c->loaded->bytes : 0);
    return 0;
}

int trees_get(struct store *s, node *group, const char *axis, const trees_loaded **out,
              cellar_error *err)
{
    *out = NULL;
    if (strcmp(axis, "obst") != 0 && strcmp(axis, "vart") != 0)
        return cellar_fail(err, CELLAR_EINVAL, "'%s' is not a tree axis (obst, vart)", axis);
    char key[1024];
    int kn = snprintf(key, sizeof key, "trees:%s:%s", node_path(group), axis);
    if (kn < 0 || (size_t)kn >= sizeof key)
        return cellar_fail(err, CELLAR_EINVAL, "group path too long for the tree cache");
    build_ctx ctx = {group, axis};
    void *v = NULL;
    int rc = store_derived(s, key, cached_build, &ctx, cached_free, &v, err);
    if (rc)
        return rc;
    const trees_cached *c = v;
    if (c->code)
        return cellar_fail(err, c->code, "%s", c->detail);
    *out = c->loaded;
    return 0;
}

/* ---- TreeData's settings, with treedata 0.0.x's raw.treedata ---- */

typedef struct legacy_cached {
    tree_json_legacy settings;
    int code;
    char detail[CELLAR_ERROR_DETAIL_MAX];
} legacy_cached;

static void legacy_free(void *value)
{
    legacy_cached *c = value;
    if (c)
        free(c->settings.label);
    free(c);
}

static int legacy_build(void *ctx, void **value, size_t *bytes, cellar_error *err)
{
    node *t = ctx;
    legacy_cached *c = calloc(1, sizeof *c);
    if (!c)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory reading %s", LEGACY_TREEDATA);
    json_job job = {.legacy = 1};
    int streamed = 0;
    cellar_error local;
    cellar_error_clear(&local);
    int rc = load_json(t, LEGACY_TREEDATA, &job, 1, &streamed, &local);
    tree_forest_free(job.forest);
    c->settings = job.settings;
    if (rc == CELLAR_EFORMAT || rc == CELLAR_ETOOBIG) {
        c->code = rc;
        snprintf(c->detail, sizeof c->detail, "%s", local.detail);
    } else if (rc) {
        legacy_free(c);
        return cellar_fail(err, rc, "%s", local.detail);
    }
    *value = c;
    *bytes = sizeof *c + (c->settings.label ? strlen(c->settings.label) + 1 : 0);
    return 0;
}

int trees_treedata_info(struct store *s, node *group, arena *a, treedata_info *out,
                        cellar_error *err)
{
    int rc = treedata_open(group, a, out, err);
    node *t = rc ? NULL : node_child_opt(group, LEGACY_TREEDATA);
    if (!t)
        return rc;
    char key[1024];
    int kn = snprintf(key, sizeof key, "trees-legacy:%s", node_path(group));
    if (kn < 0 || (size_t)kn >= sizeof key)
        return cellar_fail(err, CELLAR_EINVAL, "group path too long for the tree cache");
    void *v = NULL;
    rc = store_derived(s, key, legacy_build, t, legacy_free, &v, err);
    if (rc)
        return rc;
    const legacy_cached *c = v;
    if (c->code)
        return cellar_fail(err, c->code, "%s", c->detail);
    /* _parse_legacy: the label it names, else None; bool(allow_overlap) */
    out->label = c->settings.label;
    if (c->settings.has_allow_overlap)
        out->allow_overlap = c->settings.allow_overlap;
    return 0;
}
