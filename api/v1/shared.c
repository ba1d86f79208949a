/* What the native routes share: the AnnData prefix {ad} of a request, and
 * the start of a binary (bin, npy) answer. */
#include "api/v1/routes.h"

#include "api/encode/npy_out.h"
#include "storage/anndata/anndata.h"
#include "storage/anndata/legacy.h"

int api_ad_group(api_request *req, node **out, cellar_error *err)
{
    *out = NULL;
    int rc = api_open_store(req, err);
    if (rc)
        return rc;
    node *g = store_root(req->store);
    if (req->mod) {
        if (store_get_kind(req->store) != KIND_MUDATA)
            return cellar_fail(err, CELLAR_ENOTFOUND, "store '%s' is not a MuData store",
                               req->store_name);
        rc = mudata_mod(g, req->mod, &g, err);
        if (rc)
            return rc;
    }
    rc = legacy_view(g, &g, err);
    if (rc)
        return rc;
    if (req->raw) {
        node *raw = NULL;
        cellar_error local;
        cellar_error_clear(&local);
        rc = node_child(g, "raw", &raw, &local);
        if (rc && rc != CELLAR_ENOTFOUND)
            return cellar_fail(err, rc, "%s", local.detail); /* there, but unreadable */
        if (!raw || node_get_info(raw)->type != NODE_GROUP) {
            if (req->mod)
                return cellar_fail(err, CELLAR_ENOTFOUND, "modality '%s' of store '%s' has no raw",
                                   req->mod, req->store_name);
            return cellar_fail(err, CELLAR_ENOTFOUND, "store '%s' has no raw", req->store_name);
        }
        g = raw;
    }
    *out = g;
    return 0;
}

int api_begin_binary(api_request *req, api_response *res, api_format fmt, dtype_kind dt,
                     const int64_t *shape, int ndim, cellar_error *err)
{
    char text[200];
    npy_shape_text(shape, ndim, text, sizeof text);
    if (api_add_header(req, res, "X-Shape", text) ||
        api_add_header(req, res, "X-Dtype", dtype_name(dt)))
        return cellar_fail(err, CELLAR_EINTERNAL, "too many response headers");
    res->status = 200;
    if (fmt == FORMAT_NPY) {
        res->content_type = "application/x-npy";
        if (npy_header(&res->body, dt, shape, ndim))
            return cellar_fail(err, CELLAR_EINTERNAL, "cannot write a .npy header for %s",
                               dtype_name(dt));
    } else {
        res->content_type = "application/octet-stream";
    }
    return 0;
}
