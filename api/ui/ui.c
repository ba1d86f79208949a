#include "api/ui/ui.h"

#include <stdio.h>
#include <string.h>

#include "common/hash.h"
#include "common/validators.h"

#define UI_FILE(sym, name, type)                                                              \
    extern const char _binary_api_ui_##sym##_start[];                                         \
    extern const char _binary_api_ui_##sym##_end[];
#include "api/ui/ui_files.h"
#undef UI_FILE

typedef struct ui_file {
    const char *name;
    const char *type;
    const char *start;
    const char *end;
} ui_file;

static const ui_file files[] = {
#define UI_FILE(sym, name, type) {name, type, _binary_api_ui_##sym##_start, _binary_api_ui_##sym##_end},
#include "api/ui/ui_files.h"
#undef UI_FILE
};

static const ui_file *find_file(const char *name)
{
    for (size_t i = 0; i < sizeof files / sizeof *files; i++)
        if (!strcmp(files[i].name, name))
            return &files[i];
    return NULL;
}

int api_ui_file(api_request *req, api_response *res, cellar_error *err)
{
    const ui_file *f = find_file(req->key ? req->key : "index.html");
    if (!f)
        return cellar_fail(err, CELLAR_ENOTFOUND, "the viewer has no file '%s'", req->key);
    size_t len = (size_t)(f->end - f->start);
    char etag[40];
    snprintf(etag, sizeof etag, "W/\"ui-%016llx\"", (unsigned long long)hash64(f->start, len));
    if (api_add_header(req, res, "ETag", etag) ||
        api_add_header(req, res, "Cache-Control", "no-cache"))
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
    res->content_type = f->type;
    const char *inm = api_request_header(req, "If-None-Match");
    if (inm && etag_list_holds(inm, etag, 0)) {
        res->status = 304;
        res->fd_length = len; /* the 304 states the length of the 200 */
        return 0;
    }
    if (buf_append(&res->body, f->start, len))
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
    return 0;
}
