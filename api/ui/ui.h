/* The built-in viewer's files (api/ui/), embedded in the binary. */
#ifndef CELLAR_API_UI_H
#define CELLAR_API_UI_H

#include "api/request.h"

/* GET/HEAD / and /ui/{file}: req->key is the file name under /ui/, NULL
 * for the page itself (index.html).  Answers the embedded bytes with their
 * Content-Type, a weak ETag of the bytes (the server may compress them, so
 * the tag names the content, not one encoding), Cache-Control: no-cache,
 * and 304 when If-None-Match holds the tag.  Query parameters are ignored
 * (the page keeps its state in the URL's fragment).  CELLAR_ENOTFOUND for
 * a name that is not one of the files. */
int api_ui_file(api_request *req, api_response *res, cellar_error *err);

#endif
