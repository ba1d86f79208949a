/* The static route table and the one dispatcher that matches a request
 * path against it, percent-decoding path segments one at a time after
 * splitting (so %2F inside a name is part of the name). */
#ifndef CELLAR_ROUTER_H
#define CELLAR_ROUTER_H

#include "api/request.h"

typedef enum route_id {
    ROUTE_NONE = 0,
    ROUTE_HEALTHZ,
    ROUTE_READYZ,
    ROUTE_METRICS,
    ROUTE_OPENAPI,
    ROUTE_UI,
    ROUTE_STORES,
    ROUTE_STORE_SUMMARY,
    ROUTE_MOD_LIST,
    ROUTE_FRAME,
    ROUTE_FRAME_SCHEMA,
    ROUTE_MAP,
    ROUTE_ZARR_RAW,
    ROUTE_MATRIX,
    ROUTE_UNS,
    ROUTE_TREE_LIST,
    ROUTE_TREE,
    ROUTE_TREE_NODE,
    ROUTE_TREE_SUBTREE,
    ROUTE_TREE_ANCESTORS,
    ROUTE_TREE_LEAVES,
    ROUTE_TREE_LCA,
    ROUTE_TREE_VIEWPORT,
    ROUTE_TAXONIUM_CONFIG,
    ROUTE_TAXONIUM_NODES,
    ROUTE_TAXONIUM_SEARCH,
    ROUTE_TAXONIUM_NODE_DETAILS,
    ROUTE_TAXONIUM_TIP_ATTS,
    ROUTE_TAXONIUM_MUTATIONS,
    ROUTE_TAXONIUM_NEXTSTRAIN,
    ROUTE_H5GROVE_ROOT,
    ROUTE_H5GROVE_META,
    ROUTE_H5GROVE_ATTR,
    ROUTE_H5GROVE_DATA,
    ROUTE_H5GROVE_PATHS,
    ROUTE_H5GROVE_STATS,
    ROUTE_ZARR_CSC,
    ROUTE_COUNT
} route_id;

enum {
    METHOD_GET = 1,
    METHOD_HEAD = 2,
    METHOD_POST = 4,
    METHOD_OPTIONS = 8
};

typedef struct route_match {
    route_id id;
    const char *name;      /* the route's pattern, for metrics and logs */
    api_handler handler;   /* NULL for routes the server answers itself */
    unsigned methods;      /* METHOD_* allowed (OPTIONS is always answered) */
    int needs_store;       /* the request names a store */
} route_match;

/* Whether id is one of the /h5grove/ routes (the store is named by their
 * `file` parameter; errors carry h5grove's "message" too). */
int router_is_h5grove(route_id id);

/* Whether a route answers zarr keys (the raw route and the zarr-csc view):
 * their handlers answer validators, Range and conditionals per key. */
static inline int router_is_zarr_key(route_id id)
{
    return id == ROUTE_ZARR_RAW || id == ROUTE_ZARR_CSC;
}

/* Name of a route for metrics labels. */
const char *router_route_name(route_id id);

/* Parses a method name into METHOD_*, 0 when unknown. */
unsigned router_method(const char *method);

/* Matches raw_path (not yet percent-decoded, without the query) and fills
 * the path parts of req (store_name, mod, raw, element, key) from the
 * request arena.  CELLAR_ENOTFOUND when nothing matches (detail says why),
 * CELLAR_EINVAL for a malformed escape. */
int router_match(const char *raw_path, api_request *req, route_match *out, cellar_error *err);

/* Percent-decodes [s, s+len) into arena memory; plus_is_space for query
 * strings.  Returns NULL on a malformed escape.  *out_len gets the decoded
 * length (the text may hold NUL bytes, which callers must refuse). */
char *router_decode(arena *a, const char *s, size_t len, int plus_is_space, size_t *out_len);

#endif
