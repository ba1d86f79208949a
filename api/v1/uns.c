/* {ad}/uns[/{path}]: unstructured metadata as nested JSON.
 *
 * Groups (dict) become objects, scalars values, arrays (nested) lists.
 * Inside a whole-group answer, arrays over UNS_INLINE_MAX items, sparse
 * matrices, data frames and other encoded groups are summarized
 * ({"shape", "dtype", "encoding", "summarized": true}); asking for one of
 * them by path gives all its values (bounded by the response limit). */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "api/v1/routes.h"
#include "api/encode/json_out.h"
#include "storage/anndata/anndata.h"
#include "storage/anndata/matrix.h"

#define UNS_INLINE_MAX 1000
#define UNS_DEPTH_MAX 32

typedef struct uns_ctx {
    api_request *req;
    json_out *j;
    cellar_error *err;
    int rc;          /* first read failure */
    int hdf5;        /* the store is HDF5 (read_dataset's rules differ by backend) */
} uns_ctx;

static uint64_t item_count(const node_info *in)
{
    uint64_t n = 1;
    for (int d = 0; d < in->ndim; d++)
        n = in->shape[d] && n > UINT64_MAX / (uint64_t)in->shape[d] ? UINT64_MAX
                                                                    : n * (uint64_t)in->shape[d];
    return n;
}

static void write_shape(json_out *j, const node_info *in)
{
    json_out_str(j, "shape");
    json_out_array_open(j);
    for (int d = 0; d < in->ndim; d++)
        json_out_int(j, in->shape[d]);
    json_out_array_close(j);
}

static void summary(uns_ctx *c, node *n, const char *encoding)
{
    json_out *j = c->j;
    const node_info *in = node_get_info(n);
    json_out_map_open(j);
    if (in->type == NODE_ARRAY) {
        write_shape(j, in);
        json_out_str(j, "dtype");
        json_out_str(j, dtype_name(in->dtype));
    } else if (matrix_is_sparse(n)) {
        matrix m;
        cellar_error e;
        cellar_error_clear(&e);
        if (matrix_open(n, &m, &e) == 0) {
            json_out_str(j, "shape");
            json_out_array_open(j);
            json_out_int(j, m.shape[0]);
            json_out_int(j, m.shape[1]);
            json_out_array_close(j);
            json_out_str(j, "dtype");
            json_out_str(j, dtype_name(m.dtype));
            json_out_str(j, "nnz");
            json_out_int(j, m.nnz);
        }
    }
    json_out_str(j, "encoding");
    json_out_str(j, encoding);
    json_out_str(j, "summarized");
    json_out_bool(j, 1);
    json_out_map_close(j);
}

/* Writes the values of an array in C order, nested by dimension. */
static void write_nested(json_out *j, const node_info *in, dtype_kind dt, const void *data,
                         char *const *strs, int d, int64_t *offset)
{
    if (in->ndim == 0 || d == in->ndim) {
        if (strs)
            json_out_str(j, strs[*offset]);
        else
            json_out_typed(j, dt, data, *offset);
        (*offset)++;
        return;
    }
    json_out_array_open(j);
    for (int64_t i = 0; i < in->shape[d] && json_out_ok(j); i++)
        write_nested(j, in, dt, data, strs, d + 1, offset);
    json_out_array_close(j);
}

static void write_array(uns_ctx *c, node *n);

/* An array of records (a rec-array, or a compound array anndata < 0.7
 * wrote) as an object of its fields, each an array of the records'
 * shape, in stored order. */
static void write_records(uns_ctx *c, node *n)
{
    const char **names = NULL;
    size_t count = 0;
    int rc = node_children(n, c->req->arena, &names, &count, c->err);
    if (rc) {
        if (!c->rc)
            c->rc = rc;
        json_out_null(c->j);
        return;
    }
    json_out_map_open(c->j);
    for (size_t i = 0; i < count && json_out_ok(c->j); i++) {
        node *f = node_child_opt(n, names[i]);
        json_out_str(c->j, names[i]);
        if (f)
            write_array(c, f);
        else
            json_out_null(c->j);
    }
    json_out_map_close(c->j);
}

/* anndata's read_dataset (h5ad): a dataset of fixed-length byte strings
 * without an encoding that holds one value is that string (old writers
 * stored scalars as 1-element arrays). */
static int is_boxed_bytes(const uns_ctx *c, node *n)
{
    const node_info *in = node_get_info(n);
    return c->hdf5 && !element_encoding(n) && in->dtype == DT_STRING && in->string_size > 0 &&
           in->ndim == 1 && in->shape[0] == 1;
}

static void write_array(uns_ctx *c, node *n)
{
    const node_info *in = node_get_info(n);
    json_out *j = c->j;
    if (in->ndim < 0) {
        json_out_null(j);
        return;
    }
    if (in->n_fields > 0) {
        write_records(c, n);
        return;
    }
    if (is_boxed_bytes(c, n)) {
        dim_sel one = dim_sel_range(0, 1);
        char *v = NULL;
        int rc = node_read_strings(n, &one, c->req->arena, &v, c->err);
        if (rc) {
            if (!c->rc)
                c->rc = rc;
            json_out_null(j);
        } else {
            json_out_str(j, v);
        }
        return;
    }
    uint64_t count = item_count(in);
    dim_sel sel[NODE_MAX_DIMS];
    for (int d = 0; d < in->ndim; d++)
        sel[d] = dim_sel_range(0, in->shape[d]);
    if (count == 0) {
        int64_t off = 0;
        write_nested(j, in, in->dtype, NULL, NULL, 0, &off);
        return;
    }
    void *data = NULL;
    char **strs = NULL;
    int rc;
    if (in->dtype == DT_STRING) {
        strs = arena_calloc(c->req->arena, (size_t)count, sizeof *strs);
        rc = strs ? node_read_strings(n, in->ndim ? sel : NULL, c->req->arena, strs, c->err)
                  : cellar_fail(c->err, CELLAR_ENOMEM, "out of memory");
    } else if (dtype_is_numeric(in->dtype)) {
        size_t bytes = (size_t)count * dtype_size(in->dtype);
        data = arena_alloc(c->req->arena, bytes);
        rc = data ? node_read(n, in->ndim ? sel : NULL, data, bytes, c->err)
                  : cellar_fail(c->err, CELLAR_ENOMEM, "out of memory");
    } else {
        summary(c, n, element_encoding(n) ? element_encoding(n) : "unreadable");
        return;
    }
    if (rc) {
        if (!c->rc)
            c->rc = rc;
        json_out_null(j);
        return;
    }
    int64_t off = 0;
    write_nested(j, in, in->dtype, data, strs, 0, &off);
}

static void write_node(uns_ctx *c, node *n, int depth, int top);

static void write_group(uns_ctx *c, node *g, int depth)
{
    const char **names = NULL;
    size_t count = 0;
    json_out *j = c->j;
    int rc = node_children(g, c->req->arena, &names, &count, c->err);
    if (rc) {
        if (!c->rc)
            c->rc = rc;
        json_out_null(j);
        return;
    }
    json_out_map_open(j);
    for (size_t i = 0; i < count && json_out_ok(j); i++) {
        node *child = node_child_opt(g, names[i]);
        json_out_str(j, names[i]);
        if (!child)
            json_out_null(j);
        else
            write_node(c, child, depth + 1, 0);
    }
    json_out_map_close(j);
}

/* top: the node the path named (its arrays are given whole). */
static void write_node(uns_ctx *c, node *n, int depth, int top)
{
    const node_info *in = node_get_info(n);
    const char *enc = element_encoding(n);
    if (depth > UNS_DEPTH_MAX) {
        summary(c, n, enc ? enc : (in->type == NODE_GROUP ? "dict" : "array"));
        return;
    }
    if (in->type == NODE_ARRAY) {
        if (enc && strcmp(enc, "null") == 0) {
            json_out_null(c->j);
            return;
        }
        uint64_t items = item_count(in);
        if (in->n_fields > 0)
            items = items > UINT64_MAX / (uint64_t)in->n_fields ? UINT64_MAX
                                                                 : items * (uint64_t)in->n_fields;
        if (!top && items > UNS_INLINE_MAX && in->ndim > 0) {
            summary(c, n, enc ? enc : in->n_fields > 0 ? "rec-array" : "array");
            return;
        }
        write_array(c, n);
        return;
    }
    if (!enc || strcmp(enc, "dict") == 0) {
        write_group(c, n, depth);
        return;
    }
    summary(c, n, enc);
}

int api_uns(api_request *req, api_response *res, cellar_error *err)
{
    node *ad, *n;
    int rc = api_check_plain_json(req, err);
    if (!rc)
        rc = api_ad_group(req, &ad, err);
    if (rc)
        return rc;
    node *uns = node_child_opt(ad, "uns");
    if (!uns || node_get_info(uns)->type != NODE_GROUP) {
        if (!req->key) {
            /* No uns stored: an empty mapping, as anndata reads it. */
            res->body.len = 0;
            buf_puts(&res->body, "{}");
            res->status = 200;
            res->content_type = "application/json";
            return 0;
        }
        return cellar_fail(err, CELLAR_ENOTFOUND, "store '%s' has no uns", req->store_name);
    }
    n = uns;
    if (req->key) {
        rc = node_resolve(uns, req->key, &n, err);
        if (rc)
            return rc == CELLAR_ENOTFOUND
                       ? cellar_fail(err, CELLAR_ENOTFOUND, "no uns/%s in store '%s'", req->key,
                                     req->store_name)
                       : rc;
        const node_info *in = node_get_info(n);
        if (in->type == NODE_ARRAY && in->ndim > 0) {
            uint64_t per = in->dtype == DT_STRING || in->n_fields > 0 ? 24 : 25;
            uint64_t count = item_count(in);
            if (in->n_fields > 0) /* strings of up to 200 bytes are usual in records */
                per = 24 * (uint64_t)in->n_fields;
            rc = api_check_budget(req, count > UINT64_MAX / per ? UINT64_MAX : count * per,
                                  "items", per, err);
            if (rc)
                return rc;
        }
    }
    json_out j;
    res->body.len = 0;
    rc = json_out_init(&j, &res->body, api_limit(req), err);
    if (rc)
        return rc;
    uns_ctx c = {req, &j, err, 0, store_get_backend(req->store) == BACKEND_HDF5};
    write_node(&c, n, 0, 1);
    rc = c.rc ? c.rc : json_out_finish(&j, "ask for one part of uns by its path", err);
    json_out_destroy(&j);
    if (rc)
        return rc;
    res->status = 200;
    res->content_type = "application/json";
    return 0;
}
