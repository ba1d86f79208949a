#include "api/encode/newick_out.h"

#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "api/encode/json_out.h"

/* Python's [+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)? over the whole text. */
static int looks_numeric(const char *s)
{
    const char *p = s;
    if (*p == '+' || *p == '-')
        p++;
    int digits = 0;
    while (*p >= '0' && *p <= '9') {
        p++;
        digits++;
    }
    if (*p == '.') {
        p++;
        while (*p >= '0' && *p <= '9') {
            p++;
            digits++;
        }
    }
    if (!digits)
        return 0;
    if (*p == 'e' || *p == 'E') {
        p++;
        if (*p == '+' || *p == '-')
            p++;
        if (!(*p >= '0' && *p <= '9'))
            return 0;
        while (*p >= '0' && *p <= '9')
            p++;
    }
    return *p == '\0';
}

static int needs_quotes(const char *id, int internal)
{
    if (!*id)
        return 1;
    for (const unsigned char *p = (const unsigned char *)id; *p; p++)
        if (strchr(" \t\n\r\f\v()[]:;,'", *p))
            return 1;
    return internal && looks_numeric(id);
}

int newick_label(buf *out, const char *id, int internal)
{
    size_t n = strlen(id);
    buf clean = {0};
    if (!utf8_valid(id, n)) {
        if (utf8_sanitize(id, n, &clean) || buf_putc(&clean, '\0')) {
            buf_destroy(&clean);
            return -1;
        }
        id = clean.data;
    }
    int rc = 0;
    if (!needs_quotes(id, internal)) {
        rc = buf_puts(out, id);
    } else {
        rc = buf_putc(out, '\'');
        for (const char *p = id; *p && !rc; p++)
            rc = *p == '\'' ? buf_puts(out, "''") : buf_putc(out, *p);
        if (!rc)
            rc = buf_putc(out, '\'');
    }
    buf_destroy(&clean);
    return rc;
}

double newick_index_length(void *ctx, const tree_index *t, int32_t node)
{
    (void)ctx;
    return tree_index_branch_length(t, node);
}

/* ")label:length" or "label:length" of one node. */
static int write_node(buf *out, const tree_index *t, int32_t v, int internal,
                      newick_length_fn length, void *ctx)
{
    if (newick_label(out, tree_index_id(t, v), internal))
        return -1;
    if (!length || tree_index_parent(t, v) < 0)
        return 0;
    double l = length(ctx, t, v);
    char text[NUMBER_TEXT_MAX];
    if (!isfinite(l) || !fmt_f64(l, text))
        return 0;
    return buf_putc(out, ':') || buf_puts(out, text) ? -1 : 0;
}

/* One rooted tree: walk the preorder; after a leaf (or a closed clade),
 * close every clade the node ends, then separate from the next sibling. */
static int write_tree(buf *out, const tree_index *t, int32_t root, newick_length_fn length,
                      void *ctx, uint64_t limit, cellar_error *err)
{
    int32_t first = tree_index_preorder(t, root), end = tree_index_subtree_end(t, root);
    for (int32_t p = first; p < end; p++) {
        int32_t v = tree_index_node_at(t, p), nc;
        tree_index_children(t, v, &nc);
        if (nc > 0) {
            if (buf_putc(out, '('))
                goto nomem;
            continue;
        }
        if (write_node(out, t, v, 0, length, ctx))
            goto nomem;
        while (v != root) {
            int32_t parent = tree_index_parent(t, v);
            if (tree_index_subtree_end(t, v) != tree_index_subtree_end(t, parent)) {
                if (buf_putc(out, ','))
                    goto nomem;
                break;
            }
            if (buf_putc(out, ')') || write_node(out, t, parent, 1, length, ctx))
                goto nomem;
            v = parent;
        }
        if (limit && out->len > limit)
            return cellar_fail(err, CELLAR_ETOOBIG,
                               "the Newick text grew over the limit of %" PRIu64
                               " bytes; ask for a subtree (subtree?root=...&format=newick)",
                               limit);
    }
    if (buf_puts(out, ";\n"))
        goto nomem;
    return 0;
nomem:
    return cellar_fail(err, CELLAR_ENOMEM, "out of memory writing Newick");
}

int newick_write(buf *out, const tree_index *t, int32_t root, newick_length_fn length,
                 void *ctx, uint64_t limit, cellar_error *err)
{
    if (root >= 0)
        return write_tree(out, t, root, length, ctx, limit, err);
    int32_t n;
    const int32_t *roots = tree_index_roots(t, &n);
    for (int32_t i = 0; i < n; i++) {
        int rc = write_tree(out, t, roots[i], length, ctx, limit, err);
        if (rc)
            return rc;
    }
    return 0;
}
