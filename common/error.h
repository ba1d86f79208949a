/* One error vocabulary for storage, api and server.
 *
 * Every fallible function returns 0 or a negative cellar_code.  Where a
 * caller needs to tell the user *why*, the callee also fills a cellar_error
 * (code + human-readable detail); the server turns that into an HTTP status
 * and a problem+json body in exactly one place (api/encode/problem.c). */
#ifndef CELLAR_ERROR_H
#define CELLAR_ERROR_H

#include <stddef.h>

typedef enum {
    CELLAR_OK = 0,
    CELLAR_EINVAL = -1,       /* 400: a malformed request parameter */
    CELLAR_ENOTFOUND = -2,    /* 404: unknown store, element, column, node */
    CELLAR_ENOTACCEPT = -3,   /* 406: format not possible for this element */
    CELLAR_ETOOBIG = -4,      /* 413: response would exceed the limit */
    CELLAR_ERANGE = -5,       /* 416: selection outside the element */
    CELLAR_EFORMAT = -6,      /* 422: file present but not readable as its format */
    CELLAR_EMETHOD = -7,      /* 405: method not allowed on this route */
    CELLAR_ENOMEM = -8,       /* 503: out of memory */
    CELLAR_EIO = -9,          /* 503: the operating system failed a read */
    CELLAR_EINTERNAL = -10,   /* 500: a bug */
    CELLAR_EUNAVAILABLE = -11, /* 503: shutting down, or not ready */
    CELLAR_EPRECONDITION = -12, /* 412: If-Match / If-Unmodified-Since failed */
    CELLAR_EUNAUTHORIZED = -13, /* 401: no valid bearer token (--auth-file) */
    CELLAR_EUPSTREAM = -14,   /* 502: a remote store's server failed or refused */
    CELLAR_ETIMEOUT = -15,    /* 504: a remote store's server did not answer in time */
    CELLAR_EFORBIDDEN = -16   /* 403: a file the server may not read (h5grove's routes) */
} cellar_code;

#define CELLAR_ERROR_DETAIL_MAX 512

typedef struct cellar_error {
    int code;
    char detail[CELLAR_ERROR_DETAIL_MAX];
} cellar_error;

/* Stable short title of a code, e.g. "Not Found". */
const char *cellar_strerror(int code);

/* HTTP status for a code; 500 for anything unknown. */
int cellar_http_status(int code);

/* Records code and a printf-style detail in err (err may be NULL) and
 * returns code, so that `return cellar_fail(err, CELLAR_EINVAL, "...")`
 * reads naturally.  The first failure recorded wins: later calls on an
 * error that already holds a code leave the detail alone. */
int cellar_fail(cellar_error *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Clears err to "no error". */
void cellar_error_clear(cellar_error *err);

#endif
