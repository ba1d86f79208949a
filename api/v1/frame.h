/* The data frame answer of api/v1/frame.c, for handlers other than the obs/var
 * route: api/v1/matrix.c serves {ad}/obsm/{key} and {ad}/varm/{key} through it
 * when the element is a data frame, so they answer exactly as {ad}/obs does. */
#ifndef CELLAR_API_FRAME_H
#define CELLAR_API_FRAME_H

#include "api/request.h"
#include "storage/node.h"

/* Answers req on the dataframe group `group` (borrowed from the store
 * version) like api_frame answers obs: parameters rows | names_param
 * ("obs_names" for obsm, "var_names" for varm; looked up in the frame's own
 * index), columns, categorical=values|codes, format=json|csv|bin|npy; the
 * same JSON shape, bounds and 413 hints.  `what` names the element in
 * messages ("obsm/cells", "varm/x of modality 'rna'"). */
int api_frame_group(api_request *req, api_response *res, node *group, const char *what,
                    const char *names_param, cellar_error *err);

#endif
