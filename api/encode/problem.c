#include "api/encode/problem.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

int problem_render(const cellar_error *err, const char *instance, buf *out)
{
    int code = err && err->code ? err->code : CELLAR_EINTERNAL;
    int status = cellar_http_status(code);
    const char *title = cellar_strerror(code);
    const char *detail = err && err->detail[0] ? err->detail : title;
    json_t *doc = json_pack("{s:s, s:s, s:i, s:s}", "type", "about:blank", "title", title,
                            "status", status, "detail", detail);
    if (doc && instance)
        json_object_set_new(doc, "instance", json_string(instance));
    char *text = doc ? json_dumps(doc, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
    if (text) {
        buf_puts(out, text);
        free(text);
    } else {
        /* A detail that is not valid UTF-8 makes jansson refuse it. */
        buf_printf(out, "{\"type\":\"about:blank\",\"title\":\"%s\",\"status\":%d}", title,
                   status);
    }
    json_decref(doc);
    return status;
}
