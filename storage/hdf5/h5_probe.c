#include "storage/hdf5/h5_probe.h"

#include <stdlib.h>
#include <string.h>

#include "common/arena.h"
#include "common/u64set.h"
#include "storage/hdf5/h5.h"
#include "storage/hdf5/h5_grove.h"
#include "storage/node.h"

/* Strings and numbers read per libhdf5 call: enough to make the calls few,
 * little enough to keep the probe's memory small. */
enum { STRINGS_PER_READ = 1 << 16 };
#define BYTES_PER_READ ((size_t)8 << 20)

typedef struct walk {
    const h5_probe_limits *lim;
    h5_probe_report *rep;
    u64set seen; /* object addresses walked (hard links may form cycles) */
    node **stack;
    size_t depth, cap;
} walk;

static int push(walk *w, node *n)
{
    if (w->depth == w->cap) {
        size_t cap = w->cap ? w->cap * 2 : 256;
        node **s = realloc(w->stack, cap * sizeof *s);
        if (!s)
            return -1;
        w->stack = s;
        w->cap = cap;
    }
    w->stack[w->depth++] = n;
    return 0;
}

/* Rows of a block of about `per_read` values (at least one row). */
static int64_t rows_per_read(const node_info *in, uint64_t per_read)
{
    uint64_t row = 1;
    for (int d = 1; d < in->ndim; d++)
        row = in->shape[d] > 0 && row <= UINT64_MAX / (uint64_t)in->shape[d]
                  ? row * (uint64_t)in->shape[d]
                  : UINT64_MAX;
    if (row == 0)
        return 0;
    uint64_t rows = per_read / row;
    return rows ? (int64_t)rows : 1;
}

/* Values of one block of rows [r0, r0 + rows), the other axes whole. */
static uint64_t block_values(const node_info *in, dim_sel *sel, int64_t r0, int64_t rows)
{
    uint64_t values = 1;
    for (int d = 0; d < in->ndim; d++) {
        sel[d] = d == 0 ? dim_sel_range(r0, rows) : dim_sel_range(0, in->shape[d]);
        uint64_t c = (uint64_t)sel[d].count;
        values = c && values > UINT64_MAX / c ? UINT64_MAX : values * c;
    }
    return values;
}

static int discard_piece(void *ctx, const char *data, size_t len, cellar_error *err)
{
    (void)ctx;
    (void)data;
    (void)len;
    (void)err;
    return 0;
}

/* Reads a string array as the server does: a single string (TreeData's
 * JSON trees) streamed from the file when the backend can, else through
 * libhdf5, block by block. */
static int read_strings(walk *w, node *n, const node_info *in, cellar_error *err)
{
    if (in->ndim == 0 || (in->ndim == 1 && in->shape[0] == 1)) {
        cellar_error local;
        cellar_error_clear(&local);
        int rc = node_stream_string(n, (size_t)1 << 20, discard_piece, NULL, &local);
        if (rc == 0) {
            w->rep->strings_read++;
            return 0;
        }
        if (rc != CELLAR_EINVAL) { /* it began and broke: the server answers 422 */
            w->rep->broken++;
            return 0;
        }
    }
    dim_sel sel[NODE_MAX_DIMS];
    int64_t rows = in->ndim == 0 ? 1 : in->shape[0];
    int64_t step = in->ndim == 0 ? 1 : rows_per_read(in, STRINGS_PER_READ);
    for (int64_t r = 0; r < rows && step > 0; r += step) {
        int64_t take = rows - r < step ? rows - r : step;
        uint64_t values = in->ndim == 0 ? 1 : block_values(in, sel, r, take);
        if (w->rep->strings_read + values > w->lim->max_string_values) {
            w->rep->over_limit = 1;
            return 0;
        }
        arena *a = arena_new();
        if (!a)
            return cellar_fail(err, CELLAR_ENOMEM, "out of memory probing '%s'", node_path(n));
        char **out = arena_calloc(a, values, sizeof *out);
        cellar_error local;
        cellar_error_clear(&local);
        int rc = out ? node_read_strings(n, in->ndim == 0 ? NULL : sel, a, out, &local)
                     : CELLAR_ENOMEM;
        arena_free(a);
        if (rc == CELLAR_ENOMEM)
            return cellar_fail(err, rc, "out of memory probing '%s'", node_path(n));
        if (rc) {
            w->rep->broken++;
            return 0;
        }
        w->rep->strings_read += values;
    }
    return 0;
}

/* Reads a numeric array that direct reads do not take, through libhdf5. */
static int read_numbers(walk *w, node *n, const node_info *in, cellar_error *err)
{
    size_t es = dtype_size(in->dtype);
    dim_sel sel[NODE_MAX_DIMS];
    int64_t rows = in->ndim == 0 ? 1 : in->shape[0];
    int64_t step = in->ndim == 0 ? 1 : rows_per_read(in, BYTES_PER_READ / (es ? es : 1));
    void *buf = NULL;
    int rc = 0;
    for (int64_t r = 0; r < rows && step > 0; r += step) {
        int64_t take = rows - r < step ? rows - r : step;
        uint64_t values = in->ndim == 0 ? 1 : block_values(in, sel, r, take);
        if (values > UINT64_MAX / es || w->rep->bytes_read + values * es > w->lim->max_read_bytes) {
            w->rep->over_limit = 1;
            goto done;
        }
        size_t bytes = (size_t)(values * es);
        free(buf);
        buf = malloc(bytes ? bytes : 1);
        if (!buf) {
            rc = cellar_fail(err, CELLAR_ENOMEM, "out of memory probing '%s'", node_path(n));
            goto done;
        }
        cellar_error local;
        cellar_error_clear(&local);
        int read_rc = node_read(n, in->ndim == 0 ? NULL : sel, buf, bytes, &local);
        if (read_rc == CELLAR_ENOMEM) {
            rc = cellar_fail(err, read_rc, "out of memory probing '%s'", node_path(n));
            goto done;
        }
        if (read_rc) {
            w->rep->broken++;
            goto done;
        }
        w->rep->bytes_read += bytes;
    }
done:
    free(buf);
    return rc;
}

static int walk_children(walk *w, node *g, cellar_error *err);

static int walk_array(walk *w, node *n, cellar_error *err)
{
    w->rep->datasets++;
    const node_info *in = node_get_info(n);
    if (in->n_fields > 0)
        return walk_children(w, n, err); /* each field is read as the server reads it */
    if (in->ndim < 0 || in->dtype == DT_NONE)
        return 0;
    for (int d = 0; d < in->ndim; d++)
        if (in->shape[d] == 0)
            return 0;
    if (in->dtype == DT_STRING)
        return read_strings(w, n, in, err);
    /* Makes the direct-read plan, as the first read in the server would,
     * and asks what the zarr view asks (layout, chunk shape, filters and
     * the fill value). */
    h5_storage st;
    h5_zarr_storage(n, &st);
    int kind = h5_direct_kind(n);
    if (kind == 1)
        return 0; /* read with pread and cellar's own, bounded decoders */
    if (kind == 2) {
        uint64_t budget = w->lim->max_chunk_lookups - w->rep->chunk_lookups, done = 0;
        cellar_error local;
        cellar_error_clear(&local);
        if (h5_chunk_index_walk(n, budget, &done, &local))
            w->rep->broken++;
        w->rep->chunk_lookups += done;
        if (w->rep->chunk_lookups >= w->lim->max_chunk_lookups)
            w->rep->over_limit = 1;
        return 0;
    }
    return read_numbers(w, n, in, err);
}

/* Opens every child of group g, or every field of an array of records
 * (attributes are read as each opens), and pushes the ones not walked
 * yet. */
static int walk_children(walk *w, node *g, cellar_error *err)
{
    arena *a = arena_new();
    if (!a)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory probing '%s'", node_path(g));
    const char **names = NULL;
    size_t count = 0;
    cellar_error local;
    cellar_error_clear(&local);
    int rc = 0;
    if (node_children(g, a, &names, &count, &local)) {
        w->rep->broken++;
        goto done;
    }
    for (size_t i = 0; i < count; i++) {
        node *c = NULL;
        cellar_error_clear(&local);
        int crc = node_child(g, names[i], &c, &local);
        if (crc == CELLAR_ENOMEM) {
            rc = cellar_fail(err, crc, "out of memory probing '%s'", node_path(g));
            goto done;
        }
        if (crc) {
            w->rep->broken++;
            continue;
        }
        uint64_t addr = 0;
        int fresh = h5_object_address(c, &addr) ? 1 : u64set_add(&w->seen, addr);
        if (fresh < 0 || (fresh && push(w, c))) {
            rc = cellar_fail(err, CELLAR_ENOMEM, "out of memory probing '%s'", node_path(g));
            goto done;
        }
        if (fresh)
            w->rep->attributes += json_object_size(node_attrs(c));
    }
done:
    arena_free(a);
    return rc;
}

static int walk_group(walk *w, node *g, cellar_error *err)
{
    w->rep->groups++;
    return walk_children(w, g, err);
}

static int walk_tree(node *root, const char *path, const h5_probe_limits *lim,
                     h5_probe_report *rep, cellar_error *err);

/* Notes the name of another file (h5_reference_sink) in the report. */
static void note_target(void *ctx, char kind, const char *name)
{
    h5_probe_report *rep = ctx;
    char line[3 * 4096 + 4];
    size_t n = 0;
    line[n++] = kind;
    line[n++] = ' ';
    for (const unsigned char *c = (const unsigned char *)name; *c && n + 4 < sizeof line; c++)
        n += (size_t)(*c <= ' ' || *c == '%' || *c > '~'
                          ? snprintf(line + n, sizeof line - n, "%%%02X", *c)
                          : (line[n] = (char)*c, 1));
    line[n++] = '\n';
    line[n] = '\0';
    for (const char *at = rep->targets; (at = strstr(at, line)) != NULL; at++)
        if (at == rep->targets || at[-1] == '\n')
            return; /* noted already */
    if (rep->targets_len + n + 1 > sizeof rep->targets) {
        rep->targets_cut = 1;
        return;
    }
    memcpy(rep->targets + rep->targets_len, line, n + 1);
    rep->targets_len += n;
}

int h5_probe_file(const char *path, const h5_probe_limits *lim, h5_probe_report *rep,
                  cellar_error *err)
{
    memset(rep, 0, sizeof *rep);
    node *root = NULL;
    h5_set_reference_sink(note_target, rep);
    int rc = h5_open(path, &root, err);
    rc = rc ? rc : walk_tree(root, path, lim, rep, err);
    h5_set_reference_sink(NULL, NULL);
    return rc;
}

int h5_probe_reader(const h5_reader *rd, const char *what, const h5_probe_limits *lim,
                    h5_probe_report *rep, cellar_error *err)
{
    memset(rep, 0, sizeof *rep);
    node *root = NULL;
    int rc = h5_open_reader(rd, what, &root, err);
    return rc ? rc : walk_tree(root, what, lim, rep, err);
}

/* The walk of an opened file's tree (freed here). */
static int walk_tree(node *root, const char *path, const h5_probe_limits *lim,
                     h5_probe_report *rep, cellar_error *err)
{
    int rc = 0;
    walk w = {.lim = lim, .rep = rep};
    rep->attributes = json_object_size(node_attrs(root));
    uint64_t addr = 0;
    if ((!h5_object_address(root, &addr) && u64set_add(&w.seen, addr) < 0) || push(&w, root)) {
        rc = cellar_fail(err, CELLAR_ENOMEM, "out of memory probing '%s'", path);
        goto done;
    }
    while (w.depth && !rc) {
        node *n = w.stack[--w.depth];
        if (rep->groups + rep->datasets >= lim->max_objects) {
            rep->over_limit = 1;
            break;
        }
        rc = node_get_info(n)->type == NODE_GROUP ? walk_group(&w, n, err)
                                                   : walk_array(&w, n, err);
    }
    /* What the h5grove routes ask beyond the node backend (h5_grove.h). */
    if (!rc)
        rc = h5g_probe_walk(root, lim->max_objects, lim->max_read_bytes, &rep->broken, err);
done:
    free(w.stack);
    u64set_free(&w.seen);
    node_tree_free(root);
    return rc;
}
