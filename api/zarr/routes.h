/* The zarr routes (/v1/stores/{store}/zarr/...): zarr keys of a store as a
 * zarr client reads them over HTTP.  The router (server/router.c) calls
 * these with the api_handler signature of api/request.h. */
#ifndef CELLAR_API_ZARR_ROUTES_H
#define CELLAR_API_ZARR_ROUTES_H

#include "api/request.h"

/* GET/HEAD /v1/stores/{store}/zarr/{key} (api/zarr/raw.c): req->key is the
 * zarr key (decoded segments joined by '/').  Streams the key's file of a
 * .zarr store from disk (res->fd), with Range, ETag/Last-Modified of the
 * key and conditional requests answered here; a v2 store without
 * .zmetadata gets one built.  On an HDF5 store the keys are those of its
 * zarr view (storage/h5zarr/h5zarr.h), answered the same way.  404 for a
 * missing key and a key that is not a plain relative path inside the
 * store. */
int api_zarr_raw(api_request *req, api_response *res, cellar_error *err);

/* GET/HEAD /v1/stores/{store}/zarr-csc/{key}: the zarr view of an HDF5
 * store with every CSR matrix presented as CSC (its arrays from the
 * column index), answered as api_zarr_raw answers keys.  404 on zarr
 * stores (their keys are under zarr/). */
int api_zarr_csc(api_request *req, api_response *res, cellar_error *err);

#endif
