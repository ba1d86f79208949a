#include "common/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "common/utf8.h"

const char *cellar_strerror(int code)
{
    switch (code) {
    case CELLAR_OK: return "OK";
    case CELLAR_EINVAL: return "Bad Request";
    case CELLAR_ENOTFOUND: return "Not Found";
    case CELLAR_ENOTACCEPT: return "Not Acceptable";
    case CELLAR_ETOOBIG: return "Content Too Large";
    case CELLAR_ERANGE: return "Range Not Satisfiable";
    case CELLAR_EFORMAT: return "Unprocessable Content";
    case CELLAR_EMETHOD: return "Method Not Allowed";
    case CELLAR_ENOMEM: return "Out of Memory";
    case CELLAR_EIO: return "I/O Error";
    case CELLAR_EUNAVAILABLE: return "Service Unavailable";
    case CELLAR_EPRECONDITION: return "Precondition Failed";
    case CELLAR_EUNAUTHORIZED: return "Unauthorized";
    case CELLAR_EUPSTREAM: return "Bad Gateway";
    case CELLAR_ETIMEOUT: return "Gateway Timeout";
    case CELLAR_EFORBIDDEN: return "Forbidden";
    default: return "Internal Server Error";
    }
}

int cellar_http_status(int code)
{
    switch (code) {
    case CELLAR_OK: return 200;
    case CELLAR_EINVAL: return 400;
    case CELLAR_ENOTFOUND: return 404;
    case CELLAR_ENOTACCEPT: return 406;
    case CELLAR_ETOOBIG: return 413;
    case CELLAR_ERANGE: return 416;
    case CELLAR_EFORMAT: return 422;
    case CELLAR_EMETHOD: return 405;
    case CELLAR_ENOMEM: return 503;
    /* Not a bug (500) and not the file's format (422): a failing disk or a
     * descriptor limit; another replica, or a retry, may answer. */
    case CELLAR_EIO: return 503;
    case CELLAR_EUNAVAILABLE: return 503;
    case CELLAR_EPRECONDITION: return 412;
    case CELLAR_EUNAUTHORIZED: return 401;
    case CELLAR_EUPSTREAM: return 502;
    case CELLAR_ETIMEOUT: return 504;
    case CELLAR_EFORBIDDEN: return 403;
    default: return 500;
    }
}

int cellar_fail(cellar_error *err, int code, const char *fmt, ...)
{
    if (!err || err->code != CELLAR_OK)
        return code;
    err->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->detail, sizeof err->detail, fmt, ap);
    va_end(ap);
    /* A value quoted with a byte bound ('%.300s') or the detail's own
     * bound can cut a character: cut on its boundary instead. */
    utf8_drop_cuts(err->detail, strlen(err->detail));
    return code;
}

void cellar_error_clear(cellar_error *err)
{
    if (!err)
        return;
    err->code = CELLAR_OK;
    err->detail[0] = '\0';
}
