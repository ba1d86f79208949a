/* The range reader of remote stores: HTTP GET and HEAD over libcurl.
 *
 * One client per process (remote_client_new), shared by every thread.
 * Connections and DNS answers are shared by all its transfers (a curl
 * share object), so consecutive requests to one server reuse a kept-alive
 * connection; remote_fetch_many runs several transfers at once on one
 * multi handle (the chunks one request needs, fetched in parallel).
 *
 * Every call is bounded by the client's timeout (--remote-timeout-ms),
 * retries included: a transfer that failed transiently (no connection,
 * reset, a 429 or 5xx answer) is tried again after a backoff (50 ms,
 * doubling) while time is left, at most `retries` more times; GET and
 * HEAD are idempotent.  Requests marked `sign` are signed with AWS
 * Signature Version 4 (CURLOPT_AWS_SIGV4) when the client has
 * credentials, and sent anonymously otherwise.
 *
 * What the remote server answers is never trusted: bodies are bounded by
 * the request's max_bytes before they are stored, headers are parsed with
 * every number checked. */
#ifndef CELLAR_REMOTE_HTTP_H
#define CELLAR_REMOTE_HTTP_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "common/error.h"

typedef struct remote_client remote_client;

typedef struct remote_client_config {
    long timeout_ms;           /* a whole call, retries included (0: 10000) */
    int retries;               /* extra attempts after a transient failure */
    const char *access_key;    /* NULL or "": anonymous */
    const char *secret_key;
    const char *session_token; /* NULL or "": none */
    const char *region;        /* SigV4 region (NULL: us-east-1) */
    unsigned max_parallel;     /* transfers at once in remote_fetch_many (0: 8) */
} remote_client_config;

/* Global set-up (curl_global_init), once at startup before threads. */
void remote_library_init(void);

/* A client with cfg's settings (strings copied).  NULL + err when out of
 * memory or libcurl cannot be set up. */
remote_client *remote_client_new(const remote_client_config *cfg, cellar_error *err);
void remote_client_free(remote_client *c);

/* Whether the client signs requests (it has credentials). */
int remote_client_signs(const remote_client *c);
long remote_client_timeout_ms(const remote_client *c);

typedef struct remote_request {
    const char *url;      /* absolute http(s) URL, already percent-encoded */
    int head;             /* HEAD instead of GET */
    int sign;             /* SigV4 when the client has credentials */
    int ranged;           /* ask for [off, off + len) only (len > 0) */
    uint64_t off, len;
    const char *if_match; /* a quoted ETag the object must still have, or NULL */
    size_t max_bytes;     /* a longer body fails the transfer (502) */
} remote_request;

typedef struct remote_response {
    long status;          /* the HTTP status; 0 when none arrived */
    uint8_t *body;        /* malloc'd (NULL when empty); the caller frees */
    size_t len;
    uint64_t total;       /* the object's size (Content-Range's, or a 200's length) */
    int has_total;
    char etag[160];       /* as sent, quotes included; "" when none */
    time_t mtime;         /* Last-Modified; 0 when none or unparsable */
} remote_response;

/* Runs one request.  0 once an HTTP answer arrived (any status, in
 * resp->status; the body of a 2xx is kept), CELLAR_ETIMEOUT when none came
 * within the timeout, CELLAR_EUPSTREAM when the server could not be reached
 * or the answer broke the request's bounds (the detail names the URL
 * without its query), CELLAR_ENOMEM.  5xx and 429 answers are retried and
 * returned as they are when the retries are spent. */
int remote_fetch(remote_client *c, const remote_request *req, remote_response *resp,
                 cellar_error *err);

/* Runs n requests at once (at most max_parallel in flight); rcs[i] is what
 * remote_fetch would have returned for reqs[i] (errs may be NULL, else n
 * errors).  Returns 0, or CELLAR_ENOMEM when it could not run them. */
int remote_fetch_many(remote_client *c, const remote_request *reqs, remote_response *resps,
                      int *rcs, cellar_error *errs, size_t n);

void remote_response_clear(remote_response *r);

/* Fills err for an answer that is neither 2xx nor one the caller handles
 * (a 403, a 5xx after retries): CELLAR_EUPSTREAM, "remote <what> answered
 * <status> <reason>"; a 504 from the remote is CELLAR_ETIMEOUT. */
int remote_fail_status(cellar_error *err, const remote_response *resp, const char *what);

/* How many requests the client sent (every attempt), for /metrics and
 * the benchmark. */
uint64_t remote_client_requests(const remote_client *c);

/* The URL without its query, at most size bytes, for details and logs. */
void remote_url_for_humans(const char *url, char *out, size_t size);

#endif
