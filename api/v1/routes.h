/* The native routes (/v1/...): the handlers the router (server/router.c)
 * calls, one per resource family, all with the api_handler signature of
 * api/request.h, and the helpers they share (api/v1/shared.c).  They read
 * stores through storage/ (the registry, the element layer, trees) and
 * answer through api/encode/.
 *
 * Every handler validates its parameters (unknown ones are 400), negotiates
 * the format, resolves req->store with api_open_store, bounds the answer
 * before reading element data, and fills res (status 200, content type and
 * body; the server owns res->body afterwards).  Errors are returned as a
 * negative cellar_code with err filled; the server renders them. */
#ifndef CELLAR_API_V1_ROUTES_H
#define CELLAR_API_V1_ROUTES_H

#include "api/request.h"
#include "storage/dtype.h"
#include "storage/node.h"

/* GET /v1/stores: every store under the root (api/v1/stores.c). */
int api_stores_list(api_request *req, api_response *res, cellar_error *err);

/* GET /v1/stores/{store}: the summary of docs/responses.md. */
int api_store_summary(api_request *req, api_response *res, cellar_error *err);

/* GET /v1/stores/{store}/mod: MuData modalities in mod-order with shapes;
 * 404 for a store that is not MuData. */
int api_mod_list(api_request *req, api_response *res, cellar_error *err);

/* GET/POST {ad}/obs, {ad}/var, {ad}/raw/var (api/v1/frame.c): req->element is
 * "obs" or "var", req->mod names the modality under /mod/{mod}/, req->raw
 * is set under {ad}/raw/.  Parameters rows | obs_names (var_names),
 * columns, categorical=values|codes, format=json|csv|bin|npy. */
int api_frame(api_request *req, api_response *res, cellar_error *err);

/* GET {ad}/obs/schema, {ad}/var/schema: the columns' dtypes and encodings. */
int api_frame_schema(api_request *req, api_response *res, cellar_error *err);

/* GET/POST /v1/stores/{store}/obsmap/{mod} and varmap (api/v1/maps.c):
 * req->element is "obsmap" or "varmap", req->mod the modality.  Forward
 * (rows= | obs_names= / var_names=): the 1-based row in the modality, 0 when
 * absent; reverse (mod_rows=): the 0-based global rows. */
int api_map(api_request *req, api_response *res, cellar_error *err);

/* GET/POST {ad}/X, {ad}/layers/{name}, {ad}/obsm/{key}, {ad}/varm/{key},
 * {ad}/obsp/{key}, {ad}/varp/{key}, and under {ad}/raw/ (api/v1/matrix.c):
 * req->element names the element, req->key the key.  Parameters rows |
 * obs_names, cols | var_names (by the element's axes), layout=dense|csr,
 * dtype=safe|stored, format=json|csv|bin|npy.  Column selections of a CSR
 * matrix start the column index (X-Column-Index tells its state). */
int api_matrix(api_request *req, api_response *res, cellar_error *err);

/* GET {ad}/uns and {ad}/uns/{path...} (api/v1/uns.c): req->key holds the path
 * below uns ('/'-joined), NULL for uns itself.  Nested JSON; arrays over
 * 1000 items, sparse matrices and data frames summarized unless named by
 * the path.  format=json. */
int api_uns(api_request *req, api_response *res, cellar_error *err);

/* ---- helpers shared by the v1 handlers (api/v1/shared.c; not for the router) ---- */

/* Resolves the AnnData group {ad} of the request: the store root, or
 * mod/{req->mod} (404 when the store is not MuData or has no such
 * modality), then raw/ when req->raw (404 when there is none).  Opens the
 * store first.  *out is borrowed from the store version. */
int api_ad_group(api_request *req, node **out, cellar_error *err);

/* Adds the X-Shape and X-Dtype headers for a bin/npy answer and, for npy,
 * writes the .npy header into res->body; sets the content type. */
int api_begin_binary(api_request *req, api_response *res, api_format fmt, dtype_kind dt,
                     const int64_t *shape, int ndim, cellar_error *err);

/* ---- trees (api/v1/trees.c): TreeData obst / vart under {ad} ----
 * req->element is "obst" or "vart", req->key the tree key, req->item the
 * node id of .../nodes/{node}.  Every route takes max_nodes (default
 * 100000; an answer with more nodes is 413 with a hint) and obs_columns
 * (obst) / var_columns (vart) to join obs / var values onto the nodes that
 * name a row (leaves only when the alignment is "leaves").  Unknown tree or
 * node is 404; a tree that cannot be read is 422. */
int api_trees_list(api_request *req, api_response *res, cellar_error *err);
/* The whole tree: node-link JSON (networkx node_link_data) or
 * format=newick with length= naming the edge attribute of branch lengths. */
int api_tree(api_request *req, api_response *res, cellar_error *err);
int api_tree_node(api_request *req, api_response *res, cellar_error *err);
int api_tree_subtree(api_request *req, api_response *res, cellar_error *err);
int api_tree_ancestors(api_request *req, api_response *res, cellar_error *err);
int api_tree_leaves(api_request *req, api_response *res, cellar_error *err);
int api_tree_lca(api_request *req, api_response *res, cellar_error *err);
int api_tree_viewport(api_request *req, api_response *res, cellar_error *err);

#endif
