/* HTTP GET and HEAD over libcurl (storage/remote/remote_http.h). */
#include "storage/remote/remote_http.h"

#include <curl/curl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define POOL_MAX 64
#define ERROR_BODY_MAX 4096
#define BACKOFF_MS 50

struct remote_client {
    long timeout_ms;
    int retries;
    unsigned max_parallel;
    char *userpwd;      /* "key:secret", NULL when anonymous */
    char *sigv4;        /* "aws:amz:REGION:s3" */
    char *token_header; /* "x-amz-security-token: ..." or NULL */
    CURLSH *share;
    pthread_mutex_t share_locks[CURL_LOCK_DATA_LAST];
    pthread_mutex_t pool_lock;
    CURL *pool[POOL_MAX];
    size_t npool;
    _Atomic uint64_t requests;
};

/* One request in flight (or waiting for its retry). */
typedef struct xfer {
    const remote_request *req;
    remote_response *resp;
    int *rc;
    cellar_error *err;
    CURL *easy;
    struct curl_slist *headers;
    int attempts;
    int running, done;
    int overflow;
    size_t cap;
    int64_t retry_at; /* monotonic ms */
    char errbuf[CURL_ERROR_SIZE];
} xfer;

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void remote_library_init(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
}

static void share_lock(CURL *h, curl_lock_data data, curl_lock_access access, void *ctx)
{
    (void)h;
    (void)access;
    remote_client *c = ctx;
    if ((int)data >= 0 && data < CURL_LOCK_DATA_LAST)
        pthread_mutex_lock(&c->share_locks[data]);
}

static void share_unlock(CURL *h, curl_lock_data data, void *ctx)
{
    (void)h;
    remote_client *c = ctx;
    if ((int)data >= 0 && data < CURL_LOCK_DATA_LAST)
        pthread_mutex_unlock(&c->share_locks[data]);
}

/* a, b and c joined, malloc'd, or NULL. */
static char *join3(const char *a, const char *b, const char *c)
{
    size_t n = strlen(a) + strlen(b) + strlen(c) + 1;
    char *s = malloc(n);
    if (s)
        snprintf(s, n, "%s%s%s", a, b, c);
    return s;
}

remote_client *remote_client_new(const remote_client_config *cfg, cellar_error *err)
{
    remote_client *c = calloc(1, sizeof *c);
    if (!c) {
        cellar_fail(err, CELLAR_ENOMEM, "out of memory");
        return NULL;
    }
    c->timeout_ms = cfg->timeout_ms > 0 ? cfg->timeout_ms : 10000;
    c->retries = cfg->retries > 0 ? cfg->retries : 0;
    c->max_parallel = cfg->max_parallel ? cfg->max_parallel : 8;
    for (int i = 0; i < CURL_LOCK_DATA_LAST; i++)
        pthread_mutex_init(&c->share_locks[i], NULL);
    pthread_mutex_init(&c->pool_lock, NULL);
    int ok = 1;
    if (cfg->access_key && *cfg->access_key) {
        c->userpwd = join3(cfg->access_key, ":", cfg->secret_key ? cfg->secret_key : "");
        c->sigv4 = join3("aws:amz:", cfg->region && *cfg->region ? cfg->region : "us-east-1",
                         ":s3");
        ok = c->userpwd && c->sigv4;
        if (ok && cfg->session_token && *cfg->session_token) {
            c->token_header = join3("x-amz-security-token: ", cfg->session_token, "");
            ok = c->token_header != NULL;
        }
    }
    c->share = curl_share_init();
    if (!ok || !c->share ||
        curl_share_setopt(c->share, CURLSHOPT_LOCKFUNC, share_lock) != CURLSHE_OK ||
        curl_share_setopt(c->share, CURLSHOPT_UNLOCKFUNC, share_unlock) != CURLSHE_OK ||
        curl_share_setopt(c->share, CURLSHOPT_USERDATA, c) != CURLSHE_OK ||
        curl_share_setopt(c->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS) != CURLSHE_OK ||
        curl_share_setopt(c->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_CONNECT) != CURLSHE_OK) {
        remote_client_free(c);
        cellar_fail(err, CELLAR_ENOMEM, "cannot set up libcurl");
        return NULL;
    }
    return c;
}

void remote_client_free(remote_client *c)
{
    if (!c)
        return;
    for (size_t i = 0; i < c->npool; i++)
        curl_easy_cleanup(c->pool[i]);
    if (c->share)
        curl_share_cleanup(c->share);
    for (int i = 0; i < CURL_LOCK_DATA_LAST; i++)
        pthread_mutex_destroy(&c->share_locks[i]);
    pthread_mutex_destroy(&c->pool_lock);
    free(c->userpwd);
    free(c->sigv4);
    free(c->token_header);
    free(c);
}

int remote_client_signs(const remote_client *c)
{
    return c->userpwd != NULL;
}

long remote_client_timeout_ms(const remote_client *c)
{
    return c->timeout_ms;
}

uint64_t remote_client_requests(const remote_client *c)
{
    return atomic_load(&((remote_client *)c)->requests);
}

static CURL *pool_take(remote_client *c)
{
    CURL *h = NULL;
    pthread_mutex_lock(&c->pool_lock);
    if (c->npool)
        h = c->pool[--c->npool];
    pthread_mutex_unlock(&c->pool_lock);
    return h ? h : curl_easy_init();
}

static void pool_give(remote_client *c, CURL *h)
{
    if (!h)
        return;
    curl_easy_reset(h);
    pthread_mutex_lock(&c->pool_lock);
    if (c->npool < POOL_MAX) {
        c->pool[c->npool++] = h;
        h = NULL;
    }
    pthread_mutex_unlock(&c->pool_lock);
    if (h)
        curl_easy_cleanup(h);
}

void remote_url_for_humans(const char *url, char *out, size_t size)
{
    size_t n = strcspn(url, "?#");
    if (size == 0)
        return;
    if (n >= size)
        n = size - 1;
    memcpy(out, url, n);
    out[n] = '\0';
}

void remote_response_clear(remote_response *r)
{
    free(r->body);
    memset(r, 0, sizeof *r);
}

/* ---- callbacks ---- */

static size_t on_body(char *p, size_t size, size_t nmemb, void *ctx)
{
    xfer *x = ctx;
    size_t n = size * nmemb;
    remote_response *r = x->resp;
    long status = 0;
    curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &status);
    size_t limit = status >= 200 && status < 300 ? x->req->max_bytes : ERROR_BODY_MAX;
    if (r->len > limit || n > limit - r->len) {
        if (status < 200 || status >= 300)
            return n; /* an error's body: its start is enough */
        x->overflow = 1;
        return 0;
    }
    if (r->len + n > x->cap) {
        size_t cap = x->cap ? x->cap : 4096;
        while (cap < r->len + n)
            cap = cap > SIZE_MAX / 2 ? r->len + n : cap * 2;
        if (cap > limit)
            cap = limit;
        uint8_t *grown = realloc(r->body, cap ? cap : 1);
        if (!grown)
            return 0;
        r->body = grown;
        x->cap = cap;
    }
    memcpy(r->body + r->len, p, n);
    r->len += n;
    return n;
}

/* Parses an unsigned decimal at s (digits only, no overflow). */
static int parse_u64(const char *s, const char *end, uint64_t *out)
{
    uint64_t v = 0;
    if (s >= end)
        return -1;
    for (; s < end; s++) {
        if (*s < '0' || *s > '9')
            return -1;
        unsigned d = (unsigned)(*s - '0');
        if (v > (UINT64_MAX - d) / 10)
            return -1;
        v = v * 10 + d;
    }
    *out = v;
    return 0;
}

static const char *header_value(const char *line, size_t n, const char *name, size_t *vlen)
{
    size_t nl = strlen(name);
    if (n <= nl || strncasecmp(line, name, nl) != 0 || line[nl] != ':')
        return NULL;
    const char *v = line + nl + 1, *e = line + n;
    while (v < e && (*v == ' ' || *v == '\t'))
        v++;
    while (e > v && (e[-1] == '\r' || e[-1] == '\n' || e[-1] == ' ' || e[-1] == '\t'))
        e--;
    *vlen = (size_t)(e - v);
    return v;
}

static size_t on_header(char *line, size_t size, size_t nmemb, void *ctx)
{
    xfer *x = ctx;
    remote_response *r = x->resp;
    size_t n = size * nmemb, vl = 0;
    const char *v;
    if (n >= 5 && !strncmp(line, "HTTP/", 5)) {
        /* A new answer (after a 100 Continue): forget the last one's. */
        r->etag[0] = '\0';
        r->has_total = 0;
        r->mtime = 0;
        return n;
    }
    if ((v = header_value(line, n, "ETag", &vl)) != NULL) {
        if (vl < sizeof r->etag) {
            memcpy(r->etag, v, vl);
            r->etag[vl] = '\0';
        }
    } else if ((v = header_value(line, n, "Last-Modified", &vl)) != NULL) {
        char date[64];
        if (vl < sizeof date) {
            memcpy(date, v, vl);
            date[vl] = '\0';
            time_t t = curl_getdate(date, NULL);
            r->mtime = t > 0 ? t : 0;
        }
    } else if ((v = header_value(line, n, "Content-Range", &vl)) != NULL) {
        const char *slash = memchr(v, '/', vl);
        uint64_t total;
        if (slash && parse_u64(slash + 1, v + vl, &total) == 0) {
            r->total = total;
            r->has_total = 1;
        }
    } else if ((v = header_value(line, n, "Content-Length", &vl)) != NULL) {
        long status = 0;
        curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &status);
        uint64_t len;
        if (status == 200 && parse_u64(v, v + vl, &len) == 0) {
            r->total = len;
            r->has_total = 1;
        }
    }
    return n;
}

/* ---- one attempt ---- */

static int xfer_setup(remote_client *c, xfer *x, int64_t deadline, cellar_error *err)
{
    const remote_request *q = x->req;
    x->easy = pool_take(c);
    if (!x->easy)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory starting a remote request");
    char h[512];
    struct curl_slist *l = NULL, *t;
    int ok = 1;
    if (q->ranged && q->len) {
        snprintf(h, sizeof h, "Range: bytes=%" PRIu64 "-%" PRIu64, q->off, q->off + q->len - 1);
        ok = (t = curl_slist_append(l, h)) != NULL;
        l = ok ? t : l;
    }
    if (ok && q->if_match && strlen(q->if_match) < 256) {
        snprintf(h, sizeof h, "If-Match: %s", q->if_match);
        ok = (t = curl_slist_append(l, h)) != NULL;
        l = ok ? t : l;
    }
    int sign = q->sign && c->userpwd;
    if (ok && sign && c->token_header) {
        ok = (t = curl_slist_append(l, c->token_header)) != NULL;
        l = ok ? t : l;
    }
    x->headers = l;
    long left = (long)(deadline - now_ms());
    if (left < 1)
        left = 1;
    CURL *e = x->easy;
    memset(x->errbuf, 0, sizeof x->errbuf);
    curl_easy_setopt(e, CURLOPT_URL, q->url);
    curl_easy_setopt(e, CURLOPT_SHARE, c->share);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, left);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, left);
    curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, x->errbuf);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, x);
    curl_easy_setopt(e, CURLOPT_USERAGENT, "cellar/" CELLAR_VERSION);
    if (q->head)
        curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
    if (l)
        curl_easy_setopt(e, CURLOPT_HTTPHEADER, l);
    if (sign) {
        curl_easy_setopt(e, CURLOPT_AWS_SIGV4, c->sigv4);
        curl_easy_setopt(e, CURLOPT_USERPWD, c->userpwd);
    }
    atomic_fetch_add(&c->requests, 1);
    return ok ? 0 : cellar_fail(err, CELLAR_ENOMEM, "out of memory starting a remote request");
}

static void xfer_release(remote_client *c, xfer *x)
{
    curl_slist_free_all(x->headers);
    x->headers = NULL;
    pool_give(c, x->easy);
    x->easy = NULL;
}

static int transient_status(long status)
{
    return status == 429 || status == 500 || status == 502 || status == 503 || status == 504;
}

/* What a finished attempt means: 1 to try again, 0 when x is done. */
static int xfer_finish(remote_client *c, xfer *x, CURLcode code, int64_t deadline)
{
    remote_response *r = x->resp;
    char where[300];
    remote_url_for_humans(x->req->url, where, sizeof where);
    long status = 0;
    if (code == CURLE_OK)
        curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &status);
    int again_ok = x->attempts <= c->retries &&
                   now_ms() + (BACKOFF_MS << (x->attempts - 1)) < deadline;
    xfer_release(c, x);
    if (code == CURLE_OK) {
        r->status = status;
        if (transient_status(status) && again_ok)
            return 1;
        *x->rc = 0; /* an error answer keeps its body's start for the detail */
        return 0;
    }
    if (x->overflow) {
        *x->rc = cellar_fail(x->err, CELLAR_EUPSTREAM,
                             "remote %s sent more than the %zu bytes asked for", where,
                             x->req->max_bytes);
        return 0;
    }
    if (code == CURLE_OPERATION_TIMEDOUT || now_ms() >= deadline) {
        *x->rc = cellar_fail(x->err, CELLAR_ETIMEOUT, "remote %s did not answer within %ld ms",
                             where, c->timeout_ms);
        return 0;
    }
    if (code == CURLE_OUT_OF_MEMORY) {
        *x->rc = cellar_fail(x->err, CELLAR_ENOMEM, "out of memory reading remote %s", where);
        return 0;
    }
    if (again_ok && code != CURLE_URL_MALFORMAT && code != CURLE_UNSUPPORTED_PROTOCOL)
        return 1;
    *x->rc = cellar_fail(x->err, CELLAR_EUPSTREAM, "remote %s cannot be reached: %s", where,
                         x->errbuf[0] ? x->errbuf : curl_easy_strerror(code));
    return 0;
}

static void xfer_reset_response(xfer *x)
{
    remote_response_clear(x->resp);
    x->cap = 0;
    x->overflow = 0;
}

/* ---- the engine ---- */

static int run(remote_client *c, xfer *xs, size_t n)
{
    int64_t deadline = now_ms() + c->timeout_ms;
    CURLM *m = curl_multi_init();
    if (!m)
        return CELLAR_ENOMEM;
    size_t left = n, running = 0;
    while (left) {
        int64_t now = now_ms();
        for (size_t i = 0; i < n && running < c->max_parallel; i++) {
            xfer *x = &xs[i];
            if (x->done || x->running || x->retry_at > now)
                continue;
            xfer_reset_response(x);
            x->attempts++;
            int rc = xfer_setup(c, x, deadline, x->err);
            if (rc || curl_multi_add_handle(m, x->easy) != CURLM_OK) {
                xfer_release(c, x);
                *x->rc = rc ? rc : cellar_fail(x->err, CELLAR_ENOMEM, "cannot start a transfer");
                x->done = 1;
                left--;
                continue;
            }
            x->running = 1;
            running++;
        }
        if (!left)
            break;
        int still = 0;
        curl_multi_perform(m, &still);
        CURLMsg *msg;
        int q;
        while ((msg = curl_multi_info_read(m, &q)) != NULL) {
            if (msg->msg != CURLMSG_DONE)
                continue;
            xfer *x = NULL;
            for (size_t i = 0; i < n && !x; i++)
                if (xs[i].running && xs[i].easy == msg->easy_handle)
                    x = &xs[i];
            if (!x)
                continue;
            CURLcode code = msg->data.result;
            curl_multi_remove_handle(m, x->easy);
            x->running = 0;
            running--;
            if (xfer_finish(c, x, code, deadline)) {
                x->retry_at = now_ms() + (BACKOFF_MS << (x->attempts - 1));
            } else {
                x->done = 1;
                left--;
            }
        }
        if (!left)
            break;
        now = now_ms();
        if (now >= deadline && !running) {
            for (size_t i = 0; i < n; i++) {
                if (xs[i].done)
                    continue;
                char where[300];
                remote_url_for_humans(xs[i].req->url, where, sizeof where);
                *xs[i].rc = cellar_fail(xs[i].err, CELLAR_ETIMEOUT,
                                        "remote %s did not answer within %ld ms", where,
                                        c->timeout_ms);
                xs[i].done = 1;
            }
            break;
        }
        int64_t wait = 100;
        for (size_t i = 0; i < n; i++)
            if (!xs[i].done && !xs[i].running && xs[i].retry_at - now < wait)
                wait = xs[i].retry_at - now;
        if (wait < 0)
            wait = 0;
        if (running)
            curl_multi_poll(m, NULL, 0, (int)wait, NULL);
        else if (wait > 0) {
            struct timespec ts = {0, (long)wait * 1000000};
            nanosleep(&ts, NULL);
        }
    }
    for (size_t i = 0; i < n; i++) {
        if (xs[i].running) {
            curl_multi_remove_handle(m, xs[i].easy);
            xfer_release(c, &xs[i]);
        }
    }
    curl_multi_cleanup(m);
    return 0;
}

int remote_fetch_many(remote_client *c, const remote_request *reqs, remote_response *resps,
                      int *rcs, cellar_error *errs, size_t n)
{
    if (!n)
        return 0;
    xfer *xs = calloc(n, sizeof *xs);
    if (!xs)
        return CELLAR_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        memset(&resps[i], 0, sizeof resps[i]);
        rcs[i] = 0;
        xs[i] = (xfer){.req = &reqs[i], .resp = &resps[i], .rc = &rcs[i],
                       .err = errs ? &errs[i] : NULL};
    }
    int rc = run(c, xs, n);
    for (size_t i = 0; i < n; i++) {
        if (rcs[i]) { /* a failed transfer keeps no body */
            free(resps[i].body);
            resps[i].body = NULL;
            resps[i].len = 0;
        }
    }
    free(xs);
    return rc;
}

int remote_fetch(remote_client *c, const remote_request *req, remote_response *resp,
                 cellar_error *err)
{
    int rc = 0;
    int run_rc = remote_fetch_many(c, req, resp, &rc, err, 1);
    if (run_rc)
        return cellar_fail(err, run_rc, "out of memory starting a remote request");
    return rc;
}

/* The <Code> of an S3 error document, when the body holds one. */
static void s3_error_code(const remote_response *r, char *out, size_t size)
{
    out[0] = '\0';
    if (!r->body || !r->len)
        return;
    const char *b = (const char *)r->body, *end = b + r->len;
    const char *open = memmem(b, r->len, "<Code>", 6);
    if (!open)
        return;
    open += 6;
    const char *close = memmem(open, (size_t)(end - open), "</Code>", 7);
    if (!close || (size_t)(close - open) >= size || close - open > 64)
        return;
    for (const char *p = open; p < close; p++)
        if (!((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9')))
            return;
    memcpy(out, open, (size_t)(close - open));
    out[close - open] = '\0';
}

int remote_fail_status(cellar_error *err, const remote_response *resp, const char *what)
{
    char code[80];
    s3_error_code(resp, code, sizeof code);
    int c = resp->status == 504 ? CELLAR_ETIMEOUT : CELLAR_EUPSTREAM;
    if (code[0])
        return cellar_fail(err, c, "remote %s answered %ld (%s)", what, resp->status, code);
    return cellar_fail(err, c, "remote %s answered %ld", what, resp->status);
}
