#include "api/request.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "api/encode/json_out.h"
#include "storage/selection.h"

static const char *const format_names[] = {
    [FORMAT_JSON] = "json", [FORMAT_BIN] = "bin", [FORMAT_NPY] = "npy",
    [FORMAT_CSV] = "csv",   [FORMAT_NEWICK] = "newick",
};
#define N_FORMATS ((int)(sizeof format_names / sizeof format_names[0]))

/* The query value of `name`: 0 and *out NULL when absent, CELLAR_EINVAL
 * when given twice (a repeated parameter is ambiguous). */
static int query_get(const api_request *req, const char *name, const char **out,
                     cellar_error *err)
{
    *out = NULL;
    for (size_t i = 0; i < req->n_query; i++) {
        if (strcmp(req->query[i].key, name) != 0)
            continue;
        if (*out)
            return cellar_fail(err, CELLAR_EINVAL, "parameter '%s' is given more than once",
                               name);
        *out = req->query[i].value ? req->query[i].value : "";
    }
    return 0;
}

static json_t *body_get(const api_request *req, const char *name)
{
    if (!req->body || !json_is_object(req->body))
        return NULL;
    json_t *v = json_object_get(req->body, name);
    return json_is_null(v) ? NULL : v;
}

/* Text of a JSON scalar: strings as is, integers in decimal, reals in
 * shortest-ish form, booleans as true/false.  NULL for arrays/objects. */
static const char *scalar_text(arena *a, const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_STRING: return arena_strndup(a, json_string_value(v), json_string_length(v));
    case JSON_INTEGER: return arena_printf(a, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
    case JSON_REAL: return arena_printf(a, "%.17g", json_real_value(v));
    case JSON_TRUE: return "true";
    case JSON_FALSE: return "false";
    default: return NULL;
    }
}

int api_param_str(const api_request *req, const char *name, const char **out,
                  cellar_error *err)
{
    int rc = query_get(req, name, out, err);
    if (rc || *out)
        return rc;
    json_t *v = body_get(req, name);
    if (!v)
        return 0;
    if (json_is_array(v) || json_is_object(v))
        return cellar_fail(err, CELLAR_EINVAL, "parameter '%s' must be a single value, not %s",
                           name, json_is_array(v) ? "a list" : "an object");
    *out = scalar_text(req->arena, v);
    if (!*out)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory reading parameter '%s'", name);
    return 0;
}

int api_param_f64(const api_request *req, const char *name, double *out, int *present,
                  cellar_error *err)
{
    const char *v;
    *present = 0;
    int rc = api_param_str(req, name, &v, err);
    if (rc || !v)
        return rc;
    char *end;
    double x = strtod(v, &end);
    /* Finite only: boxes are echoed in answers, where JSON has no infinity
     * (and 1e999 overflows to one). */
    if (!*v || *end || !isfinite(x))
        return cellar_fail(err, CELLAR_EINVAL, "%s must be a finite number, not '%.100s'", name,
                           v);
    *out = x;
    *present = 1;
    return 0;
}

int api_param_int(const api_request *req, const char *name, int64_t lo, int64_t hi,
                  int64_t *out, int *present, cellar_error *err)
{
    const char *v;
    *present = 0;
    int rc = api_param_str(req, name, &v, err);
    if (rc || !v)
        return rc;
    int64_t x = 0;
    rc = selection_parse_int(v, strlen(v), &x);
    if (rc == 0 && x >= lo && x <= hi) {
        *out = x;
        *present = 1;
        return 0;
    }
    return cellar_fail(err, CELLAR_EINVAL,
                       "%s must be an integer from %" PRId64 " to %" PRId64 ", not '%.100s'%s",
                       name, lo, hi, v,
                       rc == SELECTION_INT_RANGE ? " (outside the 64-bit integer range)" : "");
}

static int split_commas(arena *a, const char *text, const char ***items, size_t *n)
{
    size_t count = 0;
    if (*text) {
        count = 1;
        for (const char *p = text; *p; p++)
            count += *p == ',';
    }
    const char **list = arena_calloc(a, count ? count : 1, sizeof *list);
    if (!list)
        return CELLAR_ENOMEM;
    const char *start = text;
    for (size_t i = 0; i < count; i++) {
        const char *end = strchr(start, ',');
        if (!end)
            end = start + strlen(start);
        list[i] = arena_strndup(a, start, (size_t)(end - start));
        if (!list[i])
            return CELLAR_ENOMEM;
        start = *end ? end + 1 : end;
    }
    *items = list;
    *n = count;
    return 0;
}

/* A JSON integer, or a real without a fraction inside int64: JSON Schema
 * counts 3.0 as an integer, and so do lists of positions and names. */
static int json_int64(const json_t *v, int64_t *out)
{
    if (json_is_integer(v)) {
        *out = (int64_t)json_integer_value(v);
        return 1;
    }
    if (!json_is_real(v))
        return 0;
    double x = json_real_value(v);
    if (x != floor(x) || x < -9223372036854775808.0 || x >= 9223372036854775808.0)
        return 0;
    *out = (int64_t)x;
    return 1;
}

int api_param_list(const api_request *req, const char *name, const char ***items, size_t *n,
                   cellar_error *err)
{
    *items = NULL;
    *n = 0;
    const char *text;
    int rc = query_get(req, name, &text, err);
    if (rc)
        return rc;
    if (!text) {
        json_t *v = body_get(req, name);
        if (!v)
            return 0;
        if (json_is_array(v)) {
            size_t count = json_array_size(v);
            const char **list = arena_calloc(req->arena, count ? count : 1, sizeof *list);
            if (!list)
                return cellar_fail(err, CELLAR_ENOMEM, "out of memory reading '%s'", name);
            for (size_t i = 0; i < count; i++) {
                const json_t *item = json_array_get(v, i);
                int64_t k;
                if (json_is_string(item))
                    list[i] = scalar_text(req->arena, item);
                else if (json_int64(item, &k))
                    list[i] = arena_printf(req->arena, "%" PRId64, k);
                else
                    return cellar_fail(err, CELLAR_EINVAL,
                                       "parameter '%s': item %zu must be a string or an "
                                       "integer",
                                       name, i);
                if (!list[i])
                    return cellar_fail(err, CELLAR_ENOMEM, "out of memory reading '%s'", name);
            }
            *items = list;
            *n = count;
            return 0;
        }
        if (json_is_object(v))
            return cellar_fail(err, CELLAR_EINVAL, "parameter '%s' must be a list, not an object",
                               name);
        text = scalar_text(req->arena, v);
        if (!text)
            return cellar_fail(err, CELLAR_ENOMEM, "out of memory reading '%s'", name);
    }
    if (split_commas(req->arena, text, items, n))
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory reading '%s'", name);
    return 0;
}

int api_param_selection(const api_request *req, const char *name, selection *out,
                        int *present, cellar_error *err)
{
    *out = selection_all();
    *present = 0;
    const char *text;
    int rc = query_get(req, name, &text, err);
    if (rc)
        return rc;
    if (!text) {
        json_t *v = body_get(req, name);
        if (!v)
            return 0;
        if (json_is_array(v)) {
            size_t count = json_array_size(v);
            int64_t *items = arena_calloc(req->arena, count ? count : 1, sizeof *items);
            if (!items)
                return cellar_fail(err, CELLAR_ENOMEM, "out of memory reading '%s'", name);
            for (size_t i = 0; i < count; i++) {
                if (!json_int64(json_array_get(v, i), &items[i]))
                    return cellar_fail(err, CELLAR_EINVAL,
                                       "parameter '%s': item %zu must be an integer", name, i);
            }
            rc = selection_from_list(items, count, req->arena, out, err);
            if (!rc)
                *present = 1;
            return rc;
        }
        if (json_is_object(v) || json_is_boolean(v))
            return cellar_fail(err, CELLAR_EINVAL,
                               "parameter '%s' must be a list of integers or a slice text "
                               "like \"0:100\"",
                               name);
        text = scalar_text(req->arena, v);
        if (!text)
            return cellar_fail(err, CELLAR_ENOMEM, "out of memory reading '%s'", name);
    }
    rc = selection_parse(text, name, req->arena, out, err);
    if (!rc)
        *present = 1;
    return rc;
}

int api_param_given(const api_request *req, const char *name)
{
    for (size_t i = 0; i < req->n_query; i++)
        if (strcmp(req->query[i].key, name) == 0)
            return 1;
    return body_get(req, name) != NULL;
}

static int name_allowed(const char *key, const char *const *allowed)
{
    if (strcmp(key, "format") == 0)
        return 1;
    for (size_t i = 0; allowed && allowed[i]; i++)
        if (strcmp(key, allowed[i]) == 0)
            return 1;
    return 0;
}

static int fail_unknown(const char *key, const char *const *allowed, cellar_error *err)
{
    char list[256] = "";
    size_t n = 0;
    for (size_t i = 0; allowed && allowed[i] && n < sizeof list; i++)
        n += (size_t)snprintf(list + n, sizeof list - n, "%s, ", allowed[i]);
    if (n < sizeof list)
        snprintf(list + n, sizeof list - n, "format");
    return cellar_fail(err, CELLAR_EINVAL, "unknown parameter '%s' (this route takes: %s)", key,
                       list);
}

int api_check_params(const api_request *req, const char *const *allowed, cellar_error *err)
{
    for (size_t i = 0; i < req->n_query; i++) {
        const api_param *q = &req->query[i];
        if (strcmp(q->key, API_MALFORMED_PARAM) == 0)
            return cellar_fail(err, CELLAR_EINVAL,
                               "the query parameter '%s' has a malformed %%-escape or a NUL byte "
                               "in its name or value",
                               q->value);
        if (!name_allowed(q->key, allowed))
            return fail_unknown(q->key, allowed, err);
    }
    if (req->body) {
        if (!json_is_object(req->body))
            return cellar_fail(err, CELLAR_EINVAL, "the request body must be a JSON object");
        const char *key;
        json_t *v;
        json_object_foreach(req->body, key, v) {
            (void)v;
            if (!name_allowed(key, allowed))
                return fail_unknown(key, allowed, err);
        }
    }
    return 0;
}

static int format_by_name(const char *name)
{
    for (int f = 1; f < N_FORMATS; f++)
        if (format_names[f] && strcasecmp(name, format_names[f]) == 0)
            return f;
    return 0;
}

static void allowed_list(unsigned allowed, char *out, size_t size)
{
    size_t n = 0;
    out[0] = '\0';
    for (int f = 1; f < N_FORMATS && n < size; f++)
        if (allowed & (1u << f))
            n += (size_t)snprintf(out + n, size - n, n ? ", %s" : "%s", format_names[f]);
}

/* The format a media type names: 0 for none of ours, -1 for a wildcard. */
static int format_by_media(const char *type, size_t n)
{
    static const struct {
        const char *media;
        int format;
    } media[] = {
        {"application/json", FORMAT_JSON},        {"text/csv", FORMAT_CSV},
        {"application/octet-stream", FORMAT_BIN}, {"application/x-npy", FORMAT_NPY},
        {"application/npy", FORMAT_NPY},          {"text/x-nh", FORMAT_NEWICK},
        {"text/x-newick", FORMAT_NEWICK},         {"application/x-newick", FORMAT_NEWICK},
        {"*/*", -1},                              {"application/*", -1},
    };
    for (size_t i = 0; i < sizeof media / sizeof media[0]; i++)
        if (strlen(media[i].media) == n && strncasecmp(type, media[i].media, n) == 0)
            return media[i].format;
    return 0;
}

/* Picks from an Accept header: the allowed format with the highest q
 * (earliest on ties); a wildcard means JSON.  *named is set when the header
 * names one of our formats at all. */
static int negotiate_accept(const char *accept, unsigned allowed, int *named)
{
    int best = 0;
    double best_q = 0;
    *named = 0;
    const char *p = accept;
    while (*p) {
        while (*p == ' ' || *p == ',')
            p++;
        if (!*p)
            break;
        const char *start = p;
        while (*p && *p != ',' && *p != ';' && *p != ' ')
            p++;
        size_t n = (size_t)(p - start);
        double q = 1.0;
        while (*p && *p != ',') {
            if (strncasecmp(p, ";q=", 3) == 0 || strncasecmp(p, "; q=", 4) == 0) {
                const char *qs = strchr(p, '=') + 1;
                char *end;
                q = strtod(qs, &end);
                p = end;
                continue;
            }
            p++;
        }
        int f = format_by_media(start, n);
        if (f == -1)
            f = FORMAT_JSON;
        else if (f > 0)
            *named = 1;
        if (f > 0 && q > 0 && (allowed & (1u << f)) && q > best_q) {
            best = f;
            best_q = q;
        }
    }
    return best;
}

int api_negotiate_format(const api_request *req, unsigned allowed, api_format *out,
                         cellar_error *err)
{
    *out = FORMAT_JSON;
    const char *name;
    char list[128];
    int rc = api_param_str(req, "format", &name, err);
    if (rc)
        return rc;
    allowed_list(allowed, list, sizeof list);
    if (name) {
        int f = format_by_name(name);
        if (!f)
            return cellar_fail(err, CELLAR_EINVAL,
                               "unknown format '%s' (formats: json, csv, bin, npy, newick)", name);
        if (!(allowed & (1u << f)))
            return cellar_fail(err, CELLAR_ENOTACCEPT,
                               "format '%s' is not available here (available: %s)", name, list);
        *out = (api_format)f;
        return 0;
    }
    if (!req->accept || !*req->accept)
        return 0;
    int named = 0;
    int f = negotiate_accept(req->accept, allowed, &named);
    if (f) {
        *out = (api_format)f;
        return 0;
    }
    if (named)
        return cellar_fail(err, CELLAR_ENOTACCEPT,
                           "none of the types in Accept is available here (available: %s)", list);
    return 0; /* only foreign types (text/html...): answer JSON */
}

int api_add_header(api_request *req, api_response *res, const char *name, const char *value)
{
    if (res->n_headers >= API_MAX_HEADERS)
        return CELLAR_EINTERNAL;
    const char *copy = arena_strdup(req->arena, value);
    if (!copy)
        return CELLAR_ENOMEM;
    res->headers[res->n_headers].name = name;
    res->headers[res->n_headers].value = copy;
    res->n_headers++;
    return 0;
}

int api_check_budget(const api_request *req, uint64_t bytes, const char *unit,
                     uint64_t per_unit, cellar_error *err)
{
    uint64_t limit = req->config ? req->config->max_response_bytes : 0;
    if (!limit || bytes <= limit)
        return 0;
    uint64_t fit = per_unit ? limit / per_unit : 0;
    if (!fit)
        return cellar_fail(err, CELLAR_ETOOBIG,
                           "the selection would return about %" PRIu64
                           " bytes, over the limit of %" PRIu64
                           " bytes, and even one of its %s is over it; select fewer columns",
                           bytes, limit, unit);
    return cellar_fail(err, CELLAR_ETOOBIG,
                       "the selection would return about %" PRIu64 " bytes, over the limit of %" PRIu64
                       " bytes; request at most %" PRIu64 " %s at a time, e.g. %s=0:%" PRIu64
                       ", then %s=%" PRIu64 ":%" PRIu64,
                       bytes, limit, fit, unit, unit, fit, unit, fit, 2 * fit);
}

int api_open_store(api_request *req, cellar_error *err)
{
    if (req->store)
        return 0;
    if (!req->store_name || !req->registry)
        return cellar_fail(err, CELLAR_ENOTFOUND, "no store named in the path");
    if (!api_may_read(req, req->store_name))
        return registry_fail_unknown(err, req->store_name);
    return req->hdf5_names ? registry_get_hdf5(req->registry, req->store_name, &req->store, err)
                           : registry_get(req->registry, req->store_name, &req->store, err);
}

int api_check_plain_json(const api_request *req, cellar_error *err)
{
    static const char *const allowed[] = {NULL};
    api_format fmt;
    int rc = api_check_params(req, allowed, err);
    return rc ? rc : api_negotiate_format(req, 1u << FORMAT_JSON, &fmt, err);
}

uint64_t api_limit(const api_request *req)
{
    return req->config ? req->config->max_response_bytes : 0;
}

int api_reply_json_doc(api_response *res, const json_t *doc, cellar_error *err)
{
    res->status = 200;
    res->content_type = "application/json";
    res->body.len = 0;
    return json_dump_buf(doc, &res->body, err);
}
