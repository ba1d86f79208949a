#include "api/encode/problem.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "common/utf8.h"

/* text as valid UTF-8 (invalid bytes from a request become U+FFFD), so
 * the JSON encoder never refuses it; NULL when out of memory. */
static json_t *json_text(const char *text)
{
    buf clean = {0};
    json_t *j = NULL;
    if (utf8_sanitize(text, strlen(text), &clean) == 0 && buf_putc(&clean, '\0') == 0)
        j = json_string(clean.data);
    buf_destroy(&clean);
    return j;
}

static int render(const cellar_error *err, const char *instance, int message, buf *out);

int problem_render(const cellar_error *err, const char *instance, buf *out)
{
    return render(err, instance, 0, out);
}

int problem_render_with_message(const cellar_error *err, const char *instance, buf *out)
{
    return render(err, instance, 1, out);
}

static int render(const cellar_error *err, const char *instance, int message, buf *out)
{
    int code = err && err->code ? err->code : CELLAR_EINTERNAL;
    int status = cellar_http_status(code);
    const char *title = cellar_strerror(code);
    const char *detail = err && err->detail[0] ? err->detail : title;
    json_t *doc = json_pack("{s:s, s:s, s:i, s:o*}", "type", "about:blank", "title", title,
                            "status", status, "detail", json_text(detail));
    if (doc && instance)
        json_object_set_new(doc, "instance", json_text(instance));
    if (doc && message)
        json_object_set_new(doc, "message", json_text(detail));
    char *text = doc ? json_dumps(doc, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
    if (text) {
        buf_puts(out, text);
        free(text);
    } else { /* out of memory */
        buf_printf(out, "{\"type\":\"about:blank\",\"title\":\"%s\",\"status\":%d}", title,
                   status);
    }
    json_decref(doc);
    return status;
}
