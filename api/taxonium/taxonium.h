/* The Taxonium backend protocol over TreeData trees:
 * {ad}/{obst|vart}/{key}/taxonium/ + config/, nodes/, search/,
 * node_details/, tip_atts, mutations/, nextstrain_json/{node_id}, as
 * Taxonium's own backend (taxonium_backend/server.js) answers them and its
 * client (taxonium-component's useServerBackend) asks for them.  The
 * router calls these handlers with req->element the axis, req->key the
 * tree key and, for nextstrain_json, req->item the node_id.  Obs (var)
 * columns are offered as meta_<column> attributes of the nodes that name a
 * row; the trees carry no mutations (mutations/ streams none).  See
 * api/taxonium/README.md. */
#ifndef CELLAR_TAXONIUM_H
#define CELLAR_TAXONIUM_H

#include "api/request.h"

int api_taxonium_config(api_request *req, api_response *res, cellar_error *err);
int api_taxonium_nodes(api_request *req, api_response *res, cellar_error *err);
int api_taxonium_search(api_request *req, api_response *res, cellar_error *err);
int api_taxonium_node_details(api_request *req, api_response *res, cellar_error *err);
int api_taxonium_tip_atts(api_request *req, api_response *res, cellar_error *err);
int api_taxonium_mutations(api_request *req, api_response *res, cellar_error *err);
int api_taxonium_nextstrain(api_request *req, api_response *res, cellar_error *err);

#endif
