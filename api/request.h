/* What a handler sees of a request, and what it fills in for the answer.
 *
 * The server (server/http.c) builds an api_request from libmicrohttpd's
 * connection, routes it (server/router.c) and calls the handler; api/ never
 * includes microhttpd.h.  Handlers return 0 after filling the response, or a
 * negative cellar_code with err filled; the server renders errors as
 * problem+json (api/encode/problem.c). */
#ifndef CELLAR_API_REQUEST_H
#define CELLAR_API_REQUEST_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "common/arena.h"
#include "common/buf.h"
#include "common/error.h"
#include "storage/registry.h"

typedef struct api_param {
    const char *key, *value;  /* percent-decoded */
} api_param;

/* The key the server gives a query parameter it could not decode (a
 * malformed %-escape, or a NUL); its value is then the raw name. */
#define API_MALFORMED_PARAM "\x01invalid"

typedef struct api_config {
    uint64_t max_response_bytes;
    const char *cors_origin;
    const char *cache_dir;     /* --cache-dir (derived indexes kept across restarts), or NULL */
    uint64_t column_index_max_bytes; /* --column-index-max-bytes: larger indexes are not built; 0 = any */
    /* Runs fn(arg) on a background worker (libuv's work queue); 0 when
     * accepted (fn then runs exactly once), nonzero when refused (not
     * running yet, or shutting down).  NULL: no background work. */
    int (*submit_background)(void *ctx, void (*fn)(void *), void *arg);
    void *background_ctx;
} api_config;

typedef enum api_format {
    FORMAT_JSON = 1,
    FORMAT_BIN,
    FORMAT_NPY,
    FORMAT_CSV,
    FORMAT_NEWICK
} api_format;

typedef struct api_request {
    arena *arena;              /* freed when the request completes */
    const char *method;        /* "GET", "HEAD", "POST" */
    const char *path;          /* the URL path as received */
    const api_config *config;
    registry *registry;

    /* Path parts, percent-decoded one segment at a time after routing. */
    const char *store_name;    /* NULL on routes without a store */
    int hdf5_names;            /* store_name may be any HDF5 file's (registry_get_hdf5) */
    store *store;              /* the referenced version, NULL until resolved */
    const char *mod;           /* /mod/{mod}, or {mod} of obsmap/varmap; else NULL */
    int raw;                   /* the route went through {ad}/raw/ */
    const char *element;       /* "obs", "var", "X", "layers", ... */
    const char *key;           /* the rest after the element, e.g. "schema" or a layer name */
    const char *item;          /* trees: the node id of {ad}/obst/{key}/nodes/{node}; else NULL */

    api_param *query;          /* query arguments in order */
    size_t n_query;
    json_t *body;              /* POST: the parsed JSON object; else NULL */
    const char *accept;        /* Accept header or NULL */

    /* Any request header by name (case-insensitive), NULL when absent; set
     * by the server (header_ctx is its connection).  May be NULL in unit
     * tests: use api_request_header. */
    const char *(*header)(void *header_ctx, const char *name);
    void *header_ctx;

    /* Which stores the request may read (the server's bearer token grant,
     * --auth-file), NULL for every store.  api_open_store refuses any other
     * as if it did not exist, and the store listing leaves them out: every
     * route, those that take a store's name from a parameter included,
     * opens its store through api_open_store. */
    int (*may_read)(const void *grant, const char *store_name);
    const void *grant;
} api_request;

/* Whether the request may read the store named name (api_request.may_read). */
static inline int api_may_read(const api_request *req, const char *name)
{
    return !req->may_read || req->may_read(req->grant, name);
}

/* req->header(name) when the server set it, else NULL. */
static inline const char *api_request_header(const api_request *req, const char *name)
{
    return req->header ? req->header(req->header_ctx, name) : NULL;
}

#define API_MAX_HEADERS 8

typedef struct api_response {
    int status;                /* 200 unless set */
    const char *content_type;  /* static string */
    buf body;                  /* taken over by the server */
    struct {
        const char *name, *value; /* value from the request arena */
    } headers[API_MAX_HEADERS];
    size_t n_headers;
    /* A file-backed body instead of `body` (raw zarr keys): fd >= 0 is sent
     * from fd_offset for fd_length bytes without copying (sendfile) and
     * without compression; the server closes fd.  -1 (the server's initial
     * value) = none.  A handler that sets an ETag header itself also sets
     * Last-Modified and Cache-Control and answers conditional requests
     * itself (status 304, no body): the server then adds none of the store
     * version's validators. */
    int fd;
    uint64_t fd_offset, fd_length;
    /* Set when the answer reflects passing state (an index still being
     * built, a failure worth retrying): the server then does not keep it
     * in its answer cache for repeated requests. */
    int uncacheable;
    /* Set when `body` holds a stored file's bytes (raw zarr keys answered
     * from memory): the server sends them as they are, never compressed,
     * and adds no Vary. */
    int stored_bytes;
} api_response;

typedef int (*api_handler)(api_request *req, api_response *res, cellar_error *err);

/* A parameter from the query or, for POST, from the body; the query wins if
 * both have it.  Body numbers and booleans come back as text. NULL when
 * absent.  A body value that is an array fails with CELLAR_EINVAL. */
int api_param_str(const api_request *req, const char *name, const char **out,
                  cellar_error *err);

/* An integer parameter in [lo, hi], from the query or the body (a body
 * number is taken by its text).  *present is 0 when absent.  Anything else
 * is CELLAR_EINVAL naming the parameter and the range: not a decimal
 * integer, past int64 or outside [lo, hi] (never clamped or wrapped). */
int api_param_int(const api_request *req, const char *name, int64_t lo, int64_t hi,
                  int64_t *out, int *present, cellar_error *err);

/* A finite number parameter (strtod's syntax, the whole text), from the
 * query or the body.  *present is 0 when absent.  Anything else, infinity
 * and overflow included, is CELLAR_EINVAL naming the parameter. */
int api_param_f64(const api_request *req, const char *name, double *out, int *present,
                  cellar_error *err);

/* A list parameter: from the query split at commas, or from a body JSON array
 * (strings and integers taken as text, any characters allowed), or a body
 * string split at commas.  *items is NULL and *n 0 when absent. */
int api_param_list(const api_request *req, const char *name, const char ***items, size_t *n,
                   cellar_error *err);

/* A selection parameter (rows=, cols=, mod_rows=): text parsed by
 * selection_parse, or a body JSON array of integers.  *present is 0 and *out
 * is selection_all() when absent. */
int api_param_selection(const api_request *req, const char *name, selection *out,
                        int *present, cellar_error *err);

/* Whether parameter `name` is in the query or (not null) in the body. */
int api_param_given(const api_request *req, const char *name);

/* Rejects parameters not in `allowed` (NULL-terminated) with CELLAR_EINVAL,
 * so a typo is not silently ignored.  "format" is always allowed. */
int api_check_params(const api_request *req, const char *const *allowed, cellar_error *err);

/* The answer format from ?format= or Accept, among those allowed for the
 * route (bitmask of 1 << api_format); JSON when neither asks.  CELLAR_EINVAL
 * for an unknown ?format= name, CELLAR_ENOTACCEPT for a known one this
 * route cannot produce. */
int api_negotiate_format(const api_request *req, unsigned allowed, api_format *out,
                         cellar_error *err);

/* For routes that take no parameter and answer JSON only: rejects any
 * parameter but `format` (CELLAR_EINVAL) and any format but JSON
 * (CELLAR_EINVAL / CELLAR_ENOTACCEPT, as api_negotiate_format). */
int api_check_plain_json(const api_request *req, cellar_error *err);

/* Adds a response header (name static, value copied into the arena). */
int api_add_header(api_request *req, api_response *res, const char *name, const char *value);

/* Fails with CELLAR_ETOOBIG and a hint when bytes exceeds the limit.
 * `unit` names what can be split ("rows") and `per_unit` is the cost of one,
 * to say how many fit. */
int api_check_budget(const api_request *req, uint64_t bytes, const char *unit,
                     uint64_t per_unit, cellar_error *err);

/* Resolves req->store from req->store_name (taking a reference that the
 * server releases when the request completes).  A store the request may
 * not read (api_may_read) is CELLAR_ENOTFOUND with the very detail of a
 * store that is not there. */
int api_open_store(api_request *req, cellar_error *err);

/* ---- for every handler ---- */

/* Sets res to a 200 JSON answer: serializes doc (jansson) into res->body. */
int api_reply_json_doc(api_response *res, const json_t *doc, cellar_error *err);

/* The limit of an answer's bytes from the configuration; 0 = none. */
uint64_t api_limit(const api_request *req);

#endif
