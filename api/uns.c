/* {ad}/uns[/{path}]: unstructured metadata as nested JSON. */
#include "api/handlers.h"

int api_uns(api_request *req, api_response *res, cellar_error *err)
{
    (void)req;
    (void)res;
    return cellar_fail(err, CELLAR_ENOTFOUND, "uns is not served yet");
}
