/* /h5grove/ routes: the file, entity resolution, meta, attr and paths
 * (api/h5grove/routes.h).  data and stats are in api/h5grove/data.c. */
#include "api/h5grove/routes.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "api/h5grove/grove.h"

/* ------------------------------------------------------------- requests */

const char *grove_param(const api_request *req, const char *name)
{
    const char *v = NULL;
    for (size_t i = 0; i < req->n_query; i++)
        if (!strcmp(req->query[i].key, name))
            v = req->query[i].value;
    return v;
}

const char *grove_path(const api_request *req)
{
    const char *p = grove_param(req, "path");
    return p ? p : "/";
}

int grove_links_param(const api_request *req, h5g_links *out, cellar_error *err)
{
    const char *v = grove_param(req, "resolve_links");
    *out = GROVE_LINKS_ONLY_VALID;
    if (!v)
        return 0;
    if (!strcasecmp(v, "true") || !strcasecmp(v, "all"))
        *out = GROVE_LINKS_ALL;
    else if (!strcasecmp(v, "false") || !strcasecmp(v, "none"))
        *out = GROVE_LINKS_NONE;
    else if (strcasecmp(v, "only_valid"))
        return cellar_fail(err, CELLAR_EFORMAT,
                           "%s is not a valid value for link resolution. Accepted values are: "
                           "LinkResolution.ALL, LinkResolution.NONE or "
                           "LinkResolution.ONLY_VALID", v);
    return 0;
}

int api_h5grove_store(api_request *req, cellar_error *err)
{
    const char *file = grove_param(req, "file");
    if (!file)
        return cellar_fail(err, CELLAR_EFORMAT, "Missing argument file");
    req->store_name = file;
    req->hdf5_names = 1; /* "any HDF5 file under the root" (issue 14) */
    return 0;
}

static const char *base_name(const char *name)
{
    const char *s = strrchr(name, '/');
    return s ? s + 1 : name;
}

int api_h5grove_open_error(cellar_error *err)
{
    /* h5grove's 403: a file that is there but that the server may not
     * read (the open, in the probe or here, said so) */
    if (err->code == CELLAR_EFORMAT && strstr(err->detail, strerror(EACCES))) {
        cellar_error_clear(err);
        cellar_fail(err, CELLAR_EFORBIDDEN, "Cannot read file: Permission denied!");
    }
    return err->code;
}

int grove_open_store(api_request *req, cellar_error *err)
{
    cellar_error local;
    cellar_error_clear(&local);
    int rc = api_open_store(req, &local);
    if (rc)
        rc = api_h5grove_open_error(&local);
    if (rc && err)
        *err = local;
    return rc;
}

int grove_open(api_request *req, const char *path, h5g_links links, h5g_object *o,
               cellar_error *err)
{
    memset(o, 0, sizeof *o);
    o->hid = -1;
    int rc = grove_open_store(req, err);
    if (rc)
        return rc;
    if (store_get_backend(req->store) != BACKEND_HDF5)
        return cellar_fail(err, CELLAR_EFORMAT, "'%s' is not an HDF5 file", req->store_name);
    cellar_error local;
    cellar_error_clear(&local);
    rc = h5g_open(store_root(req->store), path, links, req->arena, o, &local);
    if (rc == CELLAR_ENOTFOUND && !strncmp(local.detail, "Cannot resolve", 14))
        return cellar_fail(err, rc, "%s of %s", local.detail, base_name(req->store_name));
    if (rc == CELLAR_ENOTFOUND)
        return cellar_fail(err, rc, "%s is not a valid path in %s", path,
                           base_name(req->store_name));
    if (rc && err)
        *err = local;
    return rc;
}

int grove_json_begin(api_request *req, api_response *res, json_out *j, cellar_error *err)
{
    res->status = 200;
    res->content_type = "application/json";
    return json_out_init(j, &res->body, api_limit(req), err);
}

int grove_json_end(api_response *res, json_out *j, cellar_error *err)
{
    int rc = json_out_finish(j, "ask for a smaller selection", err);
    json_out_destroy(j);
    if (rc)
        res->body.len = 0;
    return rc;
}

int api_h5grove_root(api_request *req, api_response *res, cellar_error *err)
{
    (void)req;
    res->status = 200;
    res->content_type = "text/html; charset=UTF-8";
    if (buf_puts(&res->body, "ok"))
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
    return 0;
}

/* ------------------------------------------------------------------ meta */

/* name: the last segment of the path (h5grove's EntityContent.name). */
static const char *entity_name(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

static const char *kind_name(h5g_kind k)
{
    switch (k) {
    case GROVE_GROUP: return "group";
    case GROVE_DATASET: return "dataset";
    case GROVE_DATATYPE: return "datatype";
    case GROVE_SOFT_LINK: return "soft_link";
    default: return "external_link";
    }
}

static json_t *shape_json(int ndim, const int64_t *shape)
{
    if (ndim < 0)
        return json_null();
    json_t *a = json_array();
    for (int d = 0; a && d < ndim; d++)
        if (json_array_append_new(a, json_integer((json_int_t)shape[d]))) {
            json_decref(a);
            return NULL;
        }
    return a;
}

/* [{"name", "shape", "type"}] of the attributes, sorted by name. */
static int cmp_attr_name(const void *x, const void *y)
{
    return strcmp(((const h5g_attr *)x)->name, ((const h5g_attr *)y)->name);
}

static json_t *attrs_meta(api_request *req, const h5g_object *o, cellar_error *err)
{
    h5g_attr *attrs = NULL;
    size_t n = 0;
    if (h5g_attrs(o, 0, req->arena, &attrs, &n, err))
        return NULL;
    if (n > 1)
        qsort(attrs, n, sizeof *attrs, cmp_attr_name);
    json_t *list = json_array();
    for (size_t i = 0; list && i < n; i++) {
        json_t *type = grove_type_meta(attrs[i].type, req->arena, err);
        json_t *one = type ? json_object() : NULL;
        if (!one || json_object_set_new(one, "name", json_str_sanitized(attrs[i].name)) ||
            json_object_set_new(one, "shape", shape_json(attrs[i].ndim, attrs[i].shape)) ||
            json_object_set_new(one, "type", type) || json_array_append_new(list, one)) {
            if (!one)
                json_decref(type);
            json_decref(list);
            return NULL;
        }
    }
    return list;
}

static json_t *entity_meta(api_request *req, const char *path, const h5g_object *o, int depth,
                           cellar_error *err);

static json_t *children_meta(api_request *req, const char *path, const h5g_object *g,
                             cellar_error *err)
{
    const char **names = NULL;
    size_t n = 0;
    if (h5g_children(g, req->arena, &names, &n, err))
        return NULL;
    json_t *list = json_array();
    size_t plen = strlen(path);
    for (size_t i = 0; list && i < n; i++) {
        const char *child = plen == 0 || !strcmp(path, "/")
                                ? arena_printf(req->arena, "/%s", names[i])
                                : arena_printf(req->arena, "%.*s/%s",
                                               (int)(path[plen - 1] == '/' ? plen - 1 : plen),
                                               path, names[i]);
        h5g_object c;
        json_t *m = NULL;
        if (child && grove_open(req, child, GROVE_LINKS_ONLY_VALID, &c, err) == 0) {
            m = entity_meta(req, child, &c, 0, err);
            h5g_close(&c);
        }
        if (!m || json_array_append_new(list, m)) {
            json_decref(list);
            return NULL;
        }
    }
    return list;
}

/* Sets key in o to v (stolen); -1 when v is NULL or out of memory. */
static int put(json_t *o, const char *key, json_t *v)
{
    return v ? json_object_set_new(o, key, v) : -1;
}

static json_t *entity_meta(api_request *req, const char *path, const h5g_object *o, int depth,
                           cellar_error *err)
{
    json_t *m = json_object();
    if (!m)
        return NULL;
    int bad = 0;
    const char *name = entity_name(path);
    if (o->kind == GROVE_SOFT_LINK || o->kind == GROVE_EXTERNAL_LINK) {
        bad = put(m, "kind", json_string(kind_name(o->kind))) ||
              put(m, "name", json_str_sanitized(name)) ||
              (o->kind == GROVE_EXTERNAL_LINK &&
               put(m, "target_file", json_str_sanitized(o->target_file))) ||
              put(m, "target_path", json_str_sanitized(o->target_path));
        goto done;
    }
    bad = put(m, "attributes", attrs_meta(req, o, err));
    if (!bad && o->kind == GROVE_GROUP && depth > 0)
        bad = put(m, "children", children_meta(req, path, o, err));
    if (!bad && o->kind == GROVE_DATASET) {
        int ndim = 0, cnd = 0;
        int64_t shape[GROVE_MAX_DIMS], chunks[GROVE_MAX_DIMS];
        h5g_filter *filters = NULL;
        size_t nf = 0;
        bad = h5g_shape(o, &ndim, shape, err) ||
              h5g_layout(o, req->arena, &cnd, chunks, &filters, &nf, err) ||
              put(m, "chunks", cnd ? shape_json(cnd, chunks) : json_null());
        json_t *fl = nf ? json_array() : json_null();
        for (size_t i = 0; !bad && fl && i < nf; i++) {
            json_t *f = json_pack("{s:i, s:o}", "id", filters[i].id, "name",
                                  json_str_sanitized(filters[i].name));
            bad = !f || json_array_append_new(fl, f);
        }
        bad = bad || put(m, "filters", fl) || put(m, "kind", json_string("dataset")) ||
              put(m, "name", json_str_sanitized(name)) ||
              put(m, "shape", shape_json(ndim, shape));
    } else if (!bad) {
        bad = put(m, "kind", json_string(kind_name(o->kind))) ||
              put(m, "name", json_str_sanitized(name));
    }
    if (!bad && (o->kind == GROVE_DATASET || o->kind == GROVE_DATATYPE)) {
        h5g_type *t = NULL;
        bad = h5g_type_of(o, req->arena, &t, err) ||
              put(m, "type", grove_type_meta(t, req->arena, err));
    }
done:
    if (bad) {
        json_decref(m);
        if (err && !err->code)
            cellar_fail(err, CELLAR_ENOMEM, "out of memory");
        return NULL;
    }
    return m;
}

/* The entity at path with the request's resolve_links. */
static int open_asked(api_request *req, const char *path, h5g_object *o, cellar_error *err)
{
    h5g_links links;
    int rc = grove_links_param(req, &links, err);
    return rc ? rc : grove_open(req, path, links, o, err);
}

int api_h5grove_meta(api_request *req, api_response *res, cellar_error *err)
{
    const char *path = grove_path(req);
    h5g_object o;
    int rc = open_asked(req, path, &o, err);
    if (rc)
        return rc;
    json_t *doc = entity_meta(req, path, &o, 1, err);
    h5g_close(&o);
    if (!doc)
        return err && err->code ? err->code : CELLAR_ENOMEM;
    rc = api_reply_json_doc(res, doc, err);
    json_decref(doc);
    return rc;
}

/* ------------------------------------------------------------------ attr */

static int resolved(const h5g_object *o, const char *path, cellar_error *err)
{
    if (o->kind == GROVE_EXTERNAL_LINK)
        return cellar_fail(err, CELLAR_EFORMAT,
                           "%s is an external link to '%s', which cellar does not follow", path,
                           o->target_file);
    if (o->kind == GROVE_SOFT_LINK)
        return cellar_fail(err, CELLAR_EFORMAT, "%s is not a resolved entity (a broken soft link)",
                           path);
    return 0;
}

static void attr_value_json(json_out *j, const h5g_attr *at)
{
    grove_values v = {.type = at->type, .ndim = at->ndim, .count = at->count,
                      .data = at->values};
    for (int d = 0; d < at->ndim && d < GROVE_MAX_DIMS; d++)
        v.shape[d] = at->shape[d];
    if (at->unreadable || (!at->values && at->count))
        json_out_null(j);
    else
        grove_json_values(j, &v);
}

int api_h5grove_attr(api_request *req, api_response *res, cellar_error *err)
{
    const char *path = grove_path(req);
    h5g_object o;
    int rc = open_asked(req, path, &o, err);
    if (rc)
        return rc;
    h5g_attr *attrs = NULL;
    size_t n = 0;
    rc = resolved(&o, path, err);
    if (!rc)
        rc = h5g_attrs(&o, 1, req->arena, &attrs, &n, err);
    h5g_close(&o);
    if (rc)
        return rc;
    /* attr_keys, in their order, each once */
    size_t n_keys = 0;
    for (size_t i = 0; i < req->n_query; i++)
        n_keys += !strcmp(req->query[i].key, "attr_keys");
    const h5g_attr **pick = arena_calloc(req->arena, n_keys ? n_keys : 1, sizeof *pick);
    if (!pick)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
    size_t n_pick = 0;
    for (size_t i = 0; i < req->n_query; i++) {
        if (strcmp(req->query[i].key, "attr_keys"))
            continue;
        const char *key = req->query[i].value;
        const h5g_attr *found = NULL;
        for (size_t k = 0; k < n && !found; k++)
            if (!strcmp(attrs[k].name, key))
                found = &attrs[k];
        if (!found)
            return cellar_fail(err, CELLAR_ENOTFOUND, "no attribute '%s' on %s", key, path);
        int dup = 0;
        for (size_t k = 0; k < n_pick && !dup; k++)
            dup = pick[k] == found;
        if (!dup)
            pick[n_pick++] = found;
    }
    json_out j;
    rc = grove_json_begin(req, res, &j, err);
    if (rc)
        return rc;
    json_out_map_open(&j);
    size_t total = n_keys ? n_pick : n;
    for (size_t i = 0; i < total && json_out_ok(&j); i++) {
        const h5g_attr *at = n_keys ? pick[i] : &attrs[i];
        json_out_str(&j, at->name);
        attr_value_json(&j, at);
    }
    json_out_map_close(&j);
    return grove_json_end(res, &j, err);
}

/* ----------------------------------------------------------------- paths */

int api_h5grove_paths(api_request *req, api_response *res, cellar_error *err)
{
    h5g_links links;
    int rc = grove_links_param(req, &links, err);
    if (rc)
        return rc;
    const char *raw = grove_param(req, "path");
    const char *path = raw ? raw : "/";
    h5g_object o;
    rc = grove_open(req, path, links, &o, err);
    if (rc)
        return rc;
    if (o.kind != GROVE_GROUP) {
        h5g_close(&o);
        return cellar_fail(err, CELLAR_EFORMAT, "%s is not a group", path);
    }
    const char **names = NULL;
    size_t n = 0;
    rc = h5g_visit(&o, req->arena, &names, &n, err);
    h5g_close(&o);
    if (rc)
        return rc;
    size_t plen = strlen(path);
    int at_root = !raw || !strcmp(path, "/");
    while (plen && path[plen - 1] == '/')
        plen--;
    json_out j;
    rc = grove_json_begin(req, res, &j, err);
    if (rc)
        return rc;
    json_out_array_open(&j);
    json_out_str(&j, path);
    for (size_t i = 0; i < n && json_out_ok(&j) && !rc; i++) {
        char *full = at_root ? arena_printf(req->arena, "/%s", names[i])
                             : arena_printf(req->arena, "%.*s/%s", (int)plen, path, names[i]);
        if (!full) {
            rc = cellar_fail(err, CELLAR_ENOMEM, "out of memory");
            break;
        }
        if (links == GROVE_LINKS_ALL) {
            h5g_object c;
            rc = grove_open(req, full, links, &c, err);
            h5g_close(&c);
        }
        json_out_str(&j, full);
    }
    json_out_array_close(&j);
    if (rc) {
        json_out_destroy(&j);
        res->body.len = 0;
        return rc;
    }
    return grove_json_end(res, &j, err);
}
