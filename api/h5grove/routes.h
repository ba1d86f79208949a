/* The h5grove-compatible routes (/h5grove/...): h5grove's (PyPI's h5grove
 * 4.0.0) parameters, semantics and answers over any HDF5 file under the
 * data root, so that h5web's H5GroveProvider, jupyterlab-h5web and the
 * h5web VS Code extension can read through cellar.  See
 * api/h5grove/README.md for the routes and every deliberate difference. */
#ifndef CELLAR_API_H5GROVE_ROUTES_H
#define CELLAR_API_H5GROVE_ROUTES_H

#include "api/request.h"

/* Sets req->store_name from the `file` parameter (h5grove's file, relative
 * to the data root); CELLAR_EFORMAT (422) when it is missing. */
int api_h5grove_store(api_request *req, cellar_error *err);

/* Turns the error of opening the request's file into h5grove's: a file
 * the server may not read is 403.  Returns err->code. */
int api_h5grove_open_error(cellar_error *err);

/* GET /h5grove/: "ok", as h5grove's root route. */
int api_h5grove_root(api_request *req, api_response *res, cellar_error *err);

/* GET /h5grove/meta/: the entity at `path` (h5grove's metadata). */
int api_h5grove_meta(api_request *req, api_response *res, cellar_error *err);

/* GET /h5grove/attr/: attribute values (`attr_keys` to pick some). */
int api_h5grove_attr(api_request *req, api_response *res, cellar_error *err);

/* GET /h5grove/paths/: every path below a group. */
int api_h5grove_paths(api_request *req, api_response *res, cellar_error *err);

/* GET /h5grove/data/: a dataset's values (`selection`, `format`, `dtype`,
 * `flatten`), api/h5grove/data.c. */
int api_h5grove_data(api_request *req, api_response *res, cellar_error *err);

/* GET /h5grove/stats/: min, max, mean, std of a dataset's finite values. */
int api_h5grove_stats(api_request *req, api_response *res, cellar_error *err);

#endif
