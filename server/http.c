#include "server/http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <netinet/in.h>
#include <microhttpd.h>
#include <pthread.h>
#include <netdb.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include "api/encode/problem.h"
#include "api/h5grove/routes.h"
#include "api/request.h"
#include "common/byte_range.h"
#include "common/hash.h"
#include "common/numfmt.h"
#include "common/validators.h"
#include "server/answer_cache.h"
#include "server/auth.h"
#include "server/cors.h"
#include "server/router.h"
#include "server/tls.h"
#include "server/watchdog.h"
#include "storage/chunk_cache.h"
#include "storage/zarr/zarr.h"

/* Bodies smaller than this are sent uncompressed: not worth the CPU. */
#define COMPRESS_MIN_BYTES 1024

/* The OpenAPI document, linked in from api/openapi.json (see Makefile). */
extern const char _binary_api_openapi_json_start[];
extern const char _binary_api_openapi_json_end[];

/* One libmicrohttpd daemon per request thread, each with its own listening
 * socket on the same port (SO_REUSEPORT): the kernel spreads connections
 * evenly over them, where a shared socket lets whichever thread wakes
 * first take a burst of connections and keep them for their lifetime. */
#define MAX_DAEMONS 256

struct http_server {
    const server_config *cfg;
    api_config api_cfg;
    registry *reg;
    metrics *metrics;
    struct MHD_Daemon *daemons[MAX_DAEMONS];
    unsigned n_daemons;
    atomic_uint in_flight;
    atomic_int stopping; /* set by http_drain_and_stop: /readyz fails */
    watchdog *watch;
    answer_cache *answers;
    auth *store_tokens;   /* --auth-file, or NULL: every store open */
    auth *metrics_tokens; /* --metrics-token-file, or NULL: /metrics open */
    cors_policy *cors;
    tls_server *tls;      /* --tls-cert, or NULL: plain HTTP */
    FILE *access_log; /* fully buffered; flushed by http_flush_log */
    /* Background work (http_set_background): set once the control loop runs. */
    pthread_mutex_t bg_lock;
    http_background_fn bg_fn;
    void *bg_ctx;
};

typedef struct request_ctx {
    http_server *srv;
    arena *arena;
    api_request req;
    api_response res;
    route_match route;
    buf upload;
    int upload_too_big;
    struct timespec start;
    int status;
    uint64_t bytes_out;
    int from_file; /* the body was sent from a file (sendfile), not copied */
    /* The answer cache key of a GET/HEAD answered from a store version,
     * or NULL when this answer must not be kept. */
    char *answer_key;
    size_t answer_key_len;
    /* The representation's ETag (representation_etag), or NULL to use
     * the store version's (POST answers, problems before a store). */
    char *etag;
    /* The request's If-None-Match or If-Modified-Since holds: the answer
     * is a 304 that states the length the 200 would have had. */
    int not_modified;
    struct MHD_Connection *conn;
    watch_entry watch; /* while dispatch runs */
    cors_answer cors;  /* for this request's Origin */
    /* The token table the request was checked against (a reference,
     * dropped when it completes; req.grant points into it), or NULL. */
    auth_table *tokens;
    const char *challenge; /* WWW-Authenticate of a 401 */
} request_ctx;

/* What the answer cache keeps: a response libmicrohttpd can queue on any
 * number of connections at once (it counts its references). */
typedef struct cached_answer {
    struct MHD_Response *response;
    uint64_t body_bytes;
} cached_answer;

static const char *const cors_expose =
    "Content-Range, Content-Length, ETag, X-Shape, X-Dtype, Last-Modified, X-Nnz, "
    "X-Indptr-Dtype, X-Indices-Dtype, X-Column-Index, WWW-Authenticate";

/* What a preflight lets a page send: Authorization for bearer tokens,
 * the conditionals and Range of a client that caches and seeks. */
static const char *const cors_allow_headers =
    "Authorization, Content-Type, Range, If-None-Match, If-Modified-Since, If-Match, "
    "If-Unmodified-Since, If-Range, Accept, Accept-Encoding";

static uint64_t elapsed_us(const struct timespec *start)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    int64_t us = (int64_t)(now.tv_sec - start->tv_sec) * 1000000 +
                 (now.tv_nsec - start->tv_nsec) / 1000;
    return us < 0 ? 0 : (uint64_t)us;
}

/* libmicrohttpd must not decode the URL: segments are decoded one at a time
 * after routing (router.c), query values in collect_query. */
static size_t unescape_nothing(void *cls, struct MHD_Connection *c, char *s)
{
    (void)cls;
    (void)c;
    return strlen(s);
}

static enum MHD_Result collect_query_arg(void *cls, enum MHD_ValueKind kind, const char *key,
                                         const char *value)
{
    (void)kind;
    request_ctx *ctx = cls;
    api_request *req = &ctx->req;
    size_t klen = 0, vlen = 0;
    char *k = router_decode(ctx->arena, key, strlen(key), 1, &klen);
    char *v = router_decode(ctx->arena, value ? value : "", value ? strlen(value) : 0, 1, &vlen);
    if (!k || !v || klen != strlen(k) || vlen != strlen(v)) {
        /* A malformed escape or a NUL: remember as an invalid parameter. */
        k = arena_strdup(ctx->arena, API_MALFORMED_PARAM);
        v = arena_strdup(ctx->arena, key);
    }
    api_param *grown = arena_calloc(ctx->arena, req->n_query + 1, sizeof *grown);
    if (!grown)
        return MHD_NO;
    if (req->n_query)
        memcpy(grown, req->query, req->n_query * sizeof *grown);
    grown[req->n_query].key = k;
    grown[req->n_query].value = v;
    req->query = grown;
    req->n_query++;
    return MHD_YES;
}

/* If-Modified-Since: true when the store has not changed since that date
 * (HTTP dates have whole seconds, so a later sub-second mtime counts as
 * the same second). */
static int not_modified_since(const char *header, struct timespec mtime)
{
    time_t since;
    return http_date_parse(header, &since) == 0 && mtime.tv_sec <= since;
}

/* A qvalue (RFC 9110 12.4.2: "0", "0.5", "1.000") in thousandths, or -1
 * when it is not one. */
static int parse_qvalue(const char *s, size_t n)
{
    if (n == 0 || (s[0] != '0' && s[0] != '1') || (n > 1 && s[1] != '.') || n > 5)
        return -1;
    int q = (s[0] - '0') * 1000, scale = 100;
    for (size_t i = 2; i < n; i++, scale /= 10) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        q += (s[i] - '0') * scale;
    }
    return q > 1000 ? -1 : q;
}

/* The q of one Accept-Encoding member's parameters (after the name):
 * 1000 without one, -1 when malformed. */
static int member_q(const char *p, const char *end)
{
    while (p < end) {
        while (p < end && (*p == ';' || *p == ' ' || *p == '\t'))
            p++;
        const char *e = p;
        while (e < end && *e != ';')
            e++;
        const char *v = e;
        while (v > p && (v[-1] == ' ' || v[-1] == '\t'))
            v--;
        if (v - p >= 2 && (p[0] == 'q' || p[0] == 'Q') && p[1] == '=')
            return parse_qvalue(p + 2, (size_t)(v - p - 2));
        p = e;
    }
    return 1000;
}

typedef struct coding_choice {
    int coding;      /* 0 none, 1 gzip, 2 zstd: the best acceptable one */
    int identity_ok; /* whether an uncompressed body is acceptable */
} coding_choice;

/* Reads Accept-Encoding with its q-values (RFC 9110 12.5.3): a coding
 * named with q=0 is refused, "*" stands for every coding not named, and
 * identity is acceptable unless refused by name or by "*;q=0".  Of zstd
 * and gzip the higher q wins, zstd on a tie. */
static coding_choice pick_encoding(const char *accept_encoding)
{
    coding_choice c = {0, 1};
    if (!accept_encoding)
        return c;
    int q_zstd = -1, q_gzip = -1, q_identity = -1, q_star = -1;
    const char *s = accept_encoding;
    while (*s) {
        while (*s == ' ' || *s == '\t' || *s == ',')
            s++;
        const char *e = s;
        while (*e && *e != ',')
            e++;
        const char *name_end = s;
        while (name_end < e && *name_end != ';' && *name_end != ' ' && *name_end != '\t')
            name_end++;
        size_t name_len = (size_t)(name_end - s);
        int q = member_q(name_end, e);
        if (q >= 0) {
            if (name_len == 4 && !strncasecmp(s, "zstd", 4))
                q_zstd = q;
            else if (name_len == 4 && !strncasecmp(s, "gzip", 4))
                q_gzip = q;
            else if (name_len == 8 && !strncasecmp(s, "identity", 8))
                q_identity = q;
            else if (name_len == 1 && *s == '*')
                q_star = q;
        }
        s = e;
    }
    if (q_zstd < 0)
        q_zstd = q_star > 0 ? q_star : 0;
    if (q_gzip < 0)
        q_gzip = q_star > 0 ? q_star : 0;
    if (q_identity < 0)
        q_identity = q_star == 0 ? 0 : 1000;
    c.coding = q_zstd > 0 && q_zstd >= q_gzip ? 2 : q_gzip > 0 ? 1 : 0;
    c.identity_ok = q_identity > 0;
    return c;
}

static int compress_gzip(const char *in, size_t len, buf *out)
{
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    if (deflateInit2(&zs, 1, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
        return -1;
    size_t bound = deflateBound(&zs, len);
    char *dst = buf_reserve(out, bound);
    int rc = -1;
    if (dst) {
        zs.next_in = (Bytef *)in;
        zs.avail_in = (uInt)len;
        zs.next_out = (Bytef *)dst;
        zs.avail_out = (uInt)bound;
        if (deflate(&zs, Z_FINISH) == Z_STREAM_END) {
            out->len += zs.total_out;
            rc = 0;
        }
    }
    deflateEnd(&zs);
    return rc;
}

static int compress_zstd(const char *in, size_t len, buf *out)
{
    size_t bound = ZSTD_compressBound(len);
    char *dst = buf_reserve(out, bound);
    if (!dst)
        return -1;
    size_t n = ZSTD_compress(dst, bound, in, len, 1);
    if (ZSTD_isError(n))
        return -1;
    out->len += n;
    return 0;
}

static int content_compressible(const char *type)
{
    return type && (strstr(type, "json") || strstr(type, "text/") ||
                    strstr(type, "octet-stream") || strstr(type, "npy"));
}

/* Whether the handler set header `name` itself. */
static int res_has_header(const api_response *res, const char *name)
{
    for (size_t i = 0; i < res->n_headers; i++)
        if (!strcasecmp(res->headers[i].name, name))
            return 1;
    return 0;
}

static void add_common_headers(request_ctx *ctx, struct MHD_Response *r)
{
    if (ctx->cors.allow_origin) {
        MHD_add_response_header(r, "Access-Control-Allow-Origin", ctx->cors.allow_origin);
        MHD_add_response_header(r, "Access-Control-Expose-Headers", cors_expose);
        if (ctx->cors.credentials)
            MHD_add_response_header(r, "Access-Control-Allow-Credentials", "true");
    }
    if (ctx->cors.vary)
        MHD_add_response_header(r, "Vary", "Origin");
    if (ctx->req.store && !res_has_header(&ctx->res, "ETag")) {
        char date[64];
        http_date(store_mtime(ctx->req.store), date, sizeof date);
        MHD_add_response_header(r, "ETag", ctx->etag ? ctx->etag : store_etag(ctx->req.store));
        MHD_add_response_header(r, "Last-Modified", date);
        MHD_add_response_header(r, "Cache-Control", "no-cache");
    }
    /* Draining: a keep-alive client (a balancer's pooled connection) is
     * told to go elsewhere for its next request. */
    if (atomic_load(&ctx->srv->stopping))
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
}

static void release_cached_answer(void *value)
{
    cached_answer *a = value;
    MHD_destroy_response(a->response);
    free(a);
}

/* Hands the reference on r the caller holds to the answer cache. */
static void keep_answer(request_ctx *ctx, struct MHD_Response *r, size_t body_bytes)
{
    cached_answer *a = malloc(sizeof *a);
    if (!a) {
        MHD_destroy_response(r);
        return;
    }
    a->response = r;
    a->body_bytes = body_bytes;
    answer_cache_put(ctx->srv->answers, ctx->answer_key, ctx->answer_key_len, a,
                     body_bytes + 512 /* headers */, release_cached_answer);
}

typedef struct cached_use {
    request_ctx *ctx;
    struct MHD_Connection *conn;
} cached_use;

static enum MHD_Result send_not_modified(request_ctx *ctx, struct MHD_Connection *conn,
                                        uint64_t length);

static int precondition_failed(request_ctx *ctx, struct MHD_Connection *conn, cellar_error *err);
static enum MHD_Result send_problem(request_ctx *ctx, struct MHD_Connection *conn,
                                    const cellar_error *err, const char *allow);

static int queue_cached_answer(void *value, void *arg)
{
    cached_answer *a = value;
    cached_use *u = arg;
    cellar_error err;
    cellar_error_clear(&err);
    if (precondition_failed(u->ctx, u->conn, &err))
        return send_problem(u->ctx, u->conn, &err, NULL) == MHD_YES;
    if (u->ctx->not_modified)
        return send_not_modified(u->ctx, u->conn, a->body_bytes) == MHD_YES;
    u->ctx->status = 200;
    u->ctx->bytes_out = a->body_bytes;
    return MHD_queue_response(u->conn, 200, a->response) == MHD_YES;
}

/* The answer cache key of a GET or HEAD on a store version: the version's
 * cache tag (its ETag and inode: two files of equal name, size and mtime
 * share an ETag, not answers), the path, the query as sent and what
 * negotiation looks at (Accept, and the encoding Accept-Encoding picks).
 * Handlers read no other header (the raw zarr route, which does, is never
 * cached). */
static int make_answer_key(request_ctx *ctx, struct MHD_Connection *conn)
{
    const api_request *req = &ctx->req;
    const char *ae = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Accept-Encoding");
    coding_choice choice = pick_encoding(ae);
    char encoding = (char)('0' + choice.coding + 3 * !choice.identity_ok);
    const char *parts[4] = {store_cache_tag(req->store), req->path, req->accept ? req->accept : "",
                            &encoding};
    size_t lens[4] = {strlen(parts[0]), strlen(parts[1]), strlen(parts[2]), 1};
    size_t total = 0;
    for (int i = 0; i < 4; i++)
        total += lens[i] + 1;
    for (size_t i = 0; i < req->n_query; i++)
        total += strlen(req->query[i].key) + strlen(req->query[i].value) + 2;
    char *key = arena_alloc(ctx->arena, total);
    if (!key)
        return -1;
    /* Unambiguous: the ETag, the raw path and a header value hold no
     * newline; decoded query keys and values hold no NUL (collect_query_arg). */
    char *p = key;
    for (int i = 0; i < 4; i++) {
        memcpy(p, parts[i], lens[i]);
        p += lens[i];
        *p++ = '\n';
    }
    for (size_t i = 0; i < req->n_query; i++) {
        size_t kl = strlen(req->query[i].key), vl = strlen(req->query[i].value);
        memcpy(p, req->query[i].key, kl);
        p += kl;
        *p++ = '\0';
        memcpy(p, req->query[i].value, vl);
        p += vl;
        *p++ = '\0';
    }
    ctx->answer_key = key;
    ctx->answer_key_len = (size_t)(p - key);
    return 0;
}

/* The representation's ETag, set in ctx->etag: the store version's tag
 * joined with a hash of the answer key's request part (path, query,
 * Accept and the content coding chosen), which is everything the bytes
 * depend on.  So
 * each format and encoding of a version has its own strong ETag, known
 * before the answer is made, and a cache never answers one
 * representation with another's 304. */
static int representation_etag(request_ctx *ctx)
{
    /* The key's first line is this process's tag of the version: left out,
     * so that replicas agree (the store's ETag names the version). */
    size_t skip = strlen(store_cache_tag(ctx->req.store)) + 1;
    uint64_t h = hash64(ctx->answer_key + skip, ctx->answer_key_len - skip);
    char suffix[17];
    snprintf(suffix, sizeof suffix, "%016llx", (unsigned long long)h);
    ctx->etag = etag_join(ctx->arena, store_etag(ctx->req.store), suffix);
    return ctx->etag ? 0 : -1;
}

/* Appends the CORS variant to the answer key: a kept answer carries the
 * Access-Control-* headers of the request that made it, which depend on
 * the Origin (the ETag does not: the bytes are the same). */
static int key_cors_variant(request_ctx *ctx)
{
    char *key = arena_alloc(ctx->arena, ctx->answer_key_len + 16);
    if (!key)
        return -1;
    memcpy(key, ctx->answer_key, ctx->answer_key_len);
    int n = snprintf(key + ctx->answer_key_len, 16, "\n%u", ctx->cors.variant);
    ctx->answer_key = key;
    ctx->answer_key_len += (size_t)n;
    return 0;
}

/* The answer key and the ETag of the representation a GET or HEAD asks of
 * its store version (again after a retry on a new version). */
static int name_representation(request_ctx *ctx)
{
    return make_answer_key(ctx, ctx->conn) || representation_etag(ctx) || key_cors_variant(ctx);
}

static ssize_t no_body(void *cls, uint64_t pos, char *out, size_t max)
{
    (void)cls, (void)pos, (void)out, (void)max;
    return MHD_CONTENT_READER_END_OF_STREAM;
}

/* A 304 for a representation of length bytes: its validators, Vary and
 * Cache-Control as the 200 would have them, and as Content-Length the
 * length the 200 would have had (RFC 9110 8.6; libmicrohttpd always
 * writes one, so it is the true one), no body. */
static enum MHD_Result send_not_modified(request_ctx *ctx, struct MHD_Connection *conn,
                                        uint64_t length)
{
    struct MHD_Response *r = MHD_create_response_from_callback(length, 4096, no_body, NULL, NULL);
    if (!r)
        return MHD_NO;
    add_common_headers(ctx, r);
    for (size_t i = 0; i < ctx->res.n_headers; i++)
        if (!strcasecmp(ctx->res.headers[i].name, "ETag") ||
            !strcasecmp(ctx->res.headers[i].name, "Last-Modified") ||
            !strcasecmp(ctx->res.headers[i].name, "Cache-Control"))
            MHD_add_response_header(r, ctx->res.headers[i].name, ctx->res.headers[i].value);
    if (!router_is_zarr_key(ctx->route.id))
        MHD_add_response_header(r, "Vary", "Accept, Accept-Encoding");
    ctx->status = 304;
    ctx->bytes_out = 0;
    enum MHD_Result ret = MHD_queue_response(conn, MHD_HTTP_NOT_MODIFIED, r);
    MHD_destroy_response(r);
    return ret;
}

/* Binary answers (bin, npy, npz) are files to fsspec and h5wasm-style
 * readers, which seek in them with Range. */
static int content_ranged(const char *type)
{
    return type && (!strcmp(type, "application/octet-stream") ||
                    !strcmp(type, "application/x-npy") || !strcmp(type, "application/npy") ||
                    !strcmp(type, "application/zip"));
}

/* If-Range: the Range applies while the representation is the one the
 * client holds (its ETag, compared strongly, or a date not before the
 * store's mtime). */
static int if_range_holds_here(request_ctx *ctx, const char *header)
{
    if (!header)
        return 1;
    if (header[0] == '"' || !strncmp(header, "W/", 2))
        return ctx->etag && etag_list_holds(header, ctx->etag, 1);
    time_t date;
    return ctx->req.store && http_date_parse(header, &date) == 0 &&
           store_mtime(ctx->req.store).tv_sec <= date;
}

/* The Range of a GET over a binary answer of size bytes, when it holds
 * (If-Range); RANGE_WHOLE when there is none or it is to be ignored.  For
 * a part or an unsatisfiable range, the answer's Content-Range goes to
 * content_range. */
static range_kind requested_range(request_ctx *ctx, struct MHD_Connection *conn, uint64_t size,
                                  uint64_t *first, uint64_t *n, char *content_range,
                                  size_t cr_size)
{
    const char *range = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Range");
    if (!range || strcmp(ctx->req.method, "GET") ||
        !if_range_holds_here(ctx, MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "If-Range")))
        return RANGE_WHOLE;
    range_kind kind = byte_range_parse(range, size, first, n);
    if (kind == RANGE_PART)
        snprintf(content_range, cr_size, "bytes %" PRIu64 "-%" PRIu64 "/%" PRIu64, *first,
                 *first + *n - 1, size);
    else if (kind == RANGE_UNSATISFIABLE)
        snprintf(content_range, cr_size, "bytes */%" PRIu64, size);
    return kind;
}

/* The 416 problem of a Range outside an answer of size bytes, in body;
 * returns its status. */
static int range_problem(request_ctx *ctx, struct MHD_Connection *conn, uint64_t size, buf *body)
{
    const char *range = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Range");
    cellar_error e;
    cellar_error_clear(&e);
    cellar_fail(&e, CELLAR_ERANGE, "the range '%.100s' is outside the answer (%" PRIu64 " bytes)",
                range ? range : "", size);
    return problem_render(&e, ctx->req.path, body);
}

/* A GET's Range over a binary answer in body: 206 with the part in body,
 * 416, or 0 to answer the whole 200.  Sets *status and Content-Range in
 * *range_header. */
static int apply_range(request_ctx *ctx, struct MHD_Connection *conn, buf *body, int *status,
                       char *range_header, size_t range_size)
{
    uint64_t first = 0, n = 0, size = body->len;
    range_kind kind = requested_range(ctx, conn, size, &first, &n, range_header, range_size);
    if (kind == RANGE_WHOLE)
        return 0;
    if (kind == RANGE_UNSATISFIABLE) {
        buf_destroy(body);
        *status = range_problem(ctx, conn, size, body);
        return 1;
    }
    memmove(body->data, body->data + first, (size_t)n);
    body->len = (size_t)n;
    *status = 206;
    return 1;
}

static enum MHD_Result send_body(request_ctx *ctx, struct MHD_Connection *conn, int status,
                                 const char *content_type, buf *body,
                                 const api_response *extra)
{
    const char *ae = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Accept-Encoding");
    const char *encoding = NULL;
    int stored = extra && extra->stored_bytes;
    int ranged = status == 200 && !ctx->not_modified && !router_is_zarr_key(ctx->route.id) &&
                 content_ranged(content_type);
    char content_range[96] = "";
    if (ranged && apply_range(ctx, conn, body, &status, content_range, sizeof content_range)) {
        stored = 1; /* a part of the identity body: never compressed */
        if (status == 416)
            content_type = PROBLEM_CONTENT_TYPE;
    }
    coding_choice choice = pick_encoding(ae);
    /* Small bodies go uncompressed, unless the client refused that. */
    int pick = !stored && status == 200 && content_compressible(content_type) &&
                       (body->len >= COMPRESS_MIN_BYTES || !choice.identity_ok)
                   ? choice.coding
                   : 0;
    if (pick) {
        buf packed = {0};
        int rc = pick == 2 ? compress_zstd(body->data, body->len, &packed)
                           : compress_gzip(body->data, body->len, &packed);
        if (rc == 0) {
            buf_destroy(body);
            *body = packed;
            encoding = pick == 2 ? "zstd" : "gzip";
        } else {
            buf_destroy(&packed);
        }
    }
    size_t len = 0;
    char *data = buf_steal(body, &len);
    struct MHD_Response *r =
        MHD_create_response_from_buffer_with_free_callback(len, data ? data : (char *)"", data ? free : NULL);
    if (!r) {
        free(data);
        return MHD_NO;
    }
    if (content_type)
        MHD_add_response_header(r, "Content-Type", content_type);
    if (encoding)
        MHD_add_response_header(r, "Content-Encoding", encoding);
    if (!stored || content_range[0])
        MHD_add_response_header(r, "Vary", "Accept, Accept-Encoding");
    if (content_range[0])
        MHD_add_response_header(r, "Content-Range", content_range);
    if (ranged)
        MHD_add_response_header(r, "Accept-Ranges", "bytes");
    add_common_headers(ctx, r);
    if (extra)
        for (size_t i = 0; i < extra->n_headers; i++)
            MHD_add_response_header(r, extra->headers[i].name, extra->headers[i].value);
    int keep = status == 200 && ctx->answer_key && !ctx->res.uncacheable;
    if (status == 200 && ctx->not_modified) {
        /* Made to learn its length (and kept for the next request). */
        enum MHD_Result ret = send_not_modified(ctx, conn, len);
        if (keep)
            keep_answer(ctx, r, len);
        else
            MHD_destroy_response(r);
        return ret;
    }
    ctx->status = status;
    ctx->bytes_out = len;
    enum MHD_Result ret = MHD_queue_response(conn, (unsigned)status, r);
    if (ret == MHD_YES && keep)
        keep_answer(ctx, r, len);
    else
        MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result send_problem(request_ctx *ctx, struct MHD_Connection *conn,
                                    const cellar_error *err, const char *allow);

/* The Range of a GET over a file-backed binary answer: narrows the span
 * sent (206 with Content-Range in range_header).  1 when unsatisfiable
 * (range_header holds "bytes * /size" for the 416), else 0. */
static int range_of_file(request_ctx *ctx, struct MHD_Connection *conn, api_response *res,
                         char *range_header, size_t range_size)
{
    uint64_t first = 0, n = 0;
    range_kind kind =
        requested_range(ctx, conn, res->fd_length, &first, &n, range_header, range_size);
    if (kind == RANGE_UNSATISFIABLE)
        return 1;
    if (kind == RANGE_PART) {
        res->fd_offset += first;
        res->fd_length = n;
        res->status = 206;
    }
    return 0;
}

static enum MHD_Result send_problem_range(request_ctx *ctx, struct MHD_Connection *conn,
                                          const char *content_range)
{
    buf body = {0};
    int status = range_problem(ctx, conn, ctx->res.fd_length, &body);
    if (ctx->res.fd >= 0)
        close(ctx->res.fd);
    ctx->res.fd = -1;
    ctx->res.n_headers = 0;
    if (api_add_header(&ctx->req, &ctx->res, "Content-Range", content_range) != 0) {
        buf_destroy(&body);
        return MHD_NO;
    }
    return send_body(ctx, conn, status, PROBLEM_CONTENT_TYPE, &body, &ctx->res);
}

/* A file-backed body (res->fd, sent with sendfile, never compressed) or a
 * bodiless 304 from a handler that answers conditionals itself. */
static enum MHD_Result send_direct(request_ctx *ctx, struct MHD_Connection *conn)
{
    api_response *res = &ctx->res;
    if (res->status == 304 || (ctx->not_modified && (res->status == 200 || !res->status))) {
        enum MHD_Result ret = send_not_modified(ctx, conn, res->fd_length);
        if (res->fd >= 0)
            close(res->fd);
        res->fd = -1;
        return ret;
    }
    struct MHD_Response *r = NULL;
    char content_range[96] = "";
    int ranged = res->fd >= 0 && !router_is_zarr_key(ctx->route.id) && (res->status == 200 || !res->status) &&
                 content_ranged(res->content_type);
    if (ranged && range_of_file(ctx, conn, res, content_range, sizeof content_range))
        return send_problem_range(ctx, conn, content_range);
    if (res->fd >= 0 && res->fd_length > 0) {
        r = MHD_create_response_from_fd_at_offset64(res->fd_length, res->fd,
                                                    (int64_t)res->fd_offset);
        if (r) {
            res->fd = -1; /* the response closes it */
            ctx->from_file = strcmp(ctx->req.method, "HEAD") != 0;
        }
    } else {
        r = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    }
    if (!r)
        return MHD_NO;
    int status = res->status ? res->status : 200;
    if (status != 304 && res->content_type)
        MHD_add_response_header(r, "Content-Type", res->content_type);
    add_common_headers(ctx, r);
    for (size_t i = 0; i < res->n_headers; i++)
        MHD_add_response_header(r, res->headers[i].name, res->headers[i].value);
    if (ranged) {
        MHD_add_response_header(r, "Accept-Ranges", "bytes");
        MHD_add_response_header(r, "Vary", "Accept, Accept-Encoding");
    }
    if (content_range[0])
        MHD_add_response_header(r, "Content-Range", content_range);
    ctx->status = status;
    ctx->bytes_out = status == 304 ? 0 : res->fd_length;
    enum MHD_Result ret = MHD_queue_response(conn, (unsigned)status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result send_problem(request_ctx *ctx, struct MHD_Connection *conn,
                                    const cellar_error *err, const char *allow)
{
    buf body = {0};
    int status = router_is_h5grove(ctx->route.id)
                     ? problem_render_with_message(err, ctx->req.path, &body)
                     : problem_render(err, ctx->req.path, &body);
    if (status >= 500)
        fprintf(stderr, "cellar: %s %s: %s\n", ctx->req.method, ctx->req.path,
                err->detail[0] ? err->detail : cellar_strerror(err->code));
    api_response extra = {0};
    if (allow) {
        extra.headers[extra.n_headers].name = "Allow";
        extra.headers[extra.n_headers++].value = allow;
    }
    if (status == 503) {
        /* Every 503 here passes (a store being checked or rewritten). */
        extra.headers[extra.n_headers].name = "Retry-After";
        extra.headers[extra.n_headers++].value = "1";
    }
    if (status == 401) {
        extra.headers[extra.n_headers].name = "WWW-Authenticate";
        extra.headers[extra.n_headers++].value = ctx->challenge ? ctx->challenge : "Bearer";
    }
    return send_body(ctx, conn, status, PROBLEM_CONTENT_TYPE, &body, &extra);
}

static enum MHD_Result send_empty(request_ctx *ctx, struct MHD_Connection *conn, int status,
                                  const char *allow)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    if (!r)
        return MHD_NO;
    add_common_headers(ctx, r);
    if (allow) {
        MHD_add_response_header(r, "Allow", allow);
        MHD_add_response_header(r, "Access-Control-Allow-Methods", allow);
        MHD_add_response_header(r, "Access-Control-Allow-Headers", cors_allow_headers);
        MHD_add_response_header(r, "Access-Control-Max-Age", "86400");
    }
    ctx->status = status;
    enum MHD_Result ret = MHD_queue_response(conn, (unsigned)status, r);
    MHD_destroy_response(r);
    return ret;
}

static const char *allow_header(unsigned methods)
{
    if (methods & METHOD_POST)
        return "GET, HEAD, POST, OPTIONS";
    return "GET, HEAD, OPTIONS";
}


/* The gauges and counters of one decoded-chunk cache. */
static void chunk_cache_metrics(buf *out, chunk_cache_kind kind, const char *name,
                                const char *what)
{
    chunk_cache_stats z;
    chunk_cache_get_stats(chunk_cache_of(kind), &z);
    buf_printf(out,
               "# HELP cellar_%s_chunk_cache_bytes Bytes of decoded %s kept.\n"
               "# TYPE cellar_%s_chunk_cache_bytes gauge\n"
               "cellar_%s_chunk_cache_bytes %zu\n"
               "# HELP cellar_%s_chunk_cache_limit_bytes The bound on them (--%s-chunk-cache-bytes).\n"
               "# TYPE cellar_%s_chunk_cache_limit_bytes gauge\n"
               "cellar_%s_chunk_cache_limit_bytes %zu\n"
               "# HELP cellar_%s_chunk_cache_entries Decoded %s kept.\n"
               "# TYPE cellar_%s_chunk_cache_entries gauge\n"
               "cellar_%s_chunk_cache_entries %zu\n"
               "# HELP cellar_%s_chunk_cache_hits_total Chunk reads answered from the cache.\n"
               "# TYPE cellar_%s_chunk_cache_hits_total counter\n"
               "cellar_%s_chunk_cache_hits_total %llu\n"
               "# HELP cellar_%s_chunk_cache_misses_total Chunk reads that decoded.\n"
               "# TYPE cellar_%s_chunk_cache_misses_total counter\n"
               "cellar_%s_chunk_cache_misses_total %llu\n",
               name, what, name, name, z.bytes, name, name, name, name, z.limit, name, what, name,
               name, z.entries, name, name, name, (unsigned long long)z.hits, name, name, name,
               (unsigned long long)z.misses);
}

static void render_answer_cache_metrics(answer_cache *c, buf *out)
{
    answer_cache_stats st;
    answer_cache_get_stats(c, &st);
    buf_printf(out,
               "# HELP cellar_answer_cache_bytes Bytes of finished answers kept for repeated requests.\n"
               "# TYPE cellar_answer_cache_bytes gauge\n"
               "cellar_answer_cache_bytes %zu\n"
               "# HELP cellar_answer_cache_entries Answers kept for repeated requests.\n"
               "# TYPE cellar_answer_cache_entries gauge\n"
               "cellar_answer_cache_entries %zu\n"
               "# HELP cellar_answer_cache_hits_total Requests answered from the answer cache.\n"
               "# TYPE cellar_answer_cache_hits_total counter\n"
               "cellar_answer_cache_hits_total %llu\n"
               "# HELP cellar_answer_cache_misses_total Cacheable requests whose answer was made.\n"
               "# TYPE cellar_answer_cache_misses_total counter\n"
               "cellar_answer_cache_misses_total %llu\n",
               st.bytes, st.entries, (unsigned long long)st.hits, (unsigned long long)st.misses);
    chunk_cache_metrics(out, CHUNK_CACHE_ZARR, "zarr", "zarr chunks and shard indexes");
    chunk_cache_metrics(out, CHUNK_CACHE_HDF5, "hdf5", "HDF5 chunks (deflate, shuffle, LZF)");
}

/* The remote stores' requests and byte cache, when there are any. */
static void render_remote_metrics(remote_roots *remote, buf *out)
{
    if (!remote)
        return;
    remote_cache_stats c;
    remote_cache_get_stats(remote_roots_cache(remote), &c);
    buf_printf(out,
               "# HELP cellar_remote_requests_total HTTP requests sent to remote stores, retries included.\n"
               "# TYPE cellar_remote_requests_total counter\n"
               "cellar_remote_requests_total %llu\n"
               "# HELP cellar_remote_cache_bytes Bytes of remote objects kept (--remote-cache-bytes).\n"
               "# TYPE cellar_remote_cache_bytes gauge\n"
               "cellar_remote_cache_bytes %zu\n"
               "# HELP cellar_remote_cache_limit_bytes The bound on them.\n"
               "# TYPE cellar_remote_cache_limit_bytes gauge\n"
               "cellar_remote_cache_limit_bytes %zu\n"
               "# HELP cellar_remote_cache_entries Byte ranges of remote objects kept.\n"
               "# TYPE cellar_remote_cache_entries gauge\n"
               "cellar_remote_cache_entries %zu\n"
               "# HELP cellar_remote_cache_hits_total Remote reads answered from the cache.\n"
               "# TYPE cellar_remote_cache_hits_total counter\n"
               "cellar_remote_cache_hits_total %llu\n"
               "# HELP cellar_remote_cache_misses_total Remote reads that were fetched.\n"
               "# TYPE cellar_remote_cache_misses_total counter\n"
               "cellar_remote_cache_misses_total %llu\n"
               "# HELP cellar_remote_cache_disk_bytes Remote bytes spilled to --cache-dir.\n"
               "# TYPE cellar_remote_cache_disk_bytes gauge\n"
               "cellar_remote_cache_disk_bytes %zu\n"
               "# HELP cellar_remote_cache_disk_entries Byte ranges spilled to --cache-dir.\n"
               "# TYPE cellar_remote_cache_disk_entries gauge\n"
               "cellar_remote_cache_disk_entries %zu\n"
               "# HELP cellar_remote_cache_disk_hits_total Remote reads answered from --cache-dir.\n"
               "# TYPE cellar_remote_cache_disk_hits_total counter\n"
               "cellar_remote_cache_disk_hits_total %llu\n",
               (unsigned long long)remote_client_requests(remote_roots_client(remote)), c.bytes,
               c.limit, c.entries, (unsigned long long)c.hits, (unsigned long long)c.misses,
               c.disk_bytes, c.disk_entries, (unsigned long long)c.disk_hits);
}

/* Service routes answered here rather than in api/. */
static int answer_service(request_ctx *ctx, buf *body, const char **type, cellar_error *err)
{
    http_server *srv = ctx->srv;
    switch (ctx->route.id) {
    case ROUTE_HEALTHZ:
        *type = "application/json";
        buf_puts(body, "{\"status\":\"ok\"}");
        return 0;
    case ROUTE_READYZ:
        *type = "application/json";
        if (atomic_load(&srv->stopping))
            return cellar_fail(err, CELLAR_EUNAVAILABLE, "the server is stopping");
        if (!registry_root_ok(srv->reg))
            return cellar_fail(err, CELLAR_EUNAVAILABLE, "the data root is not readable");
        char why[400];
        if (registry_remote_ready(srv->reg, why, sizeof why))
            return cellar_fail(err, CELLAR_EUNAVAILABLE, "%s", why);
        if (watchdog_ready(srv->watch, why, sizeof why))
            return cellar_fail(err, CELLAR_EUNAVAILABLE, "%s", why);
        buf_puts(body, "{\"status\":\"ready\"}");
        return 0;
    case ROUTE_METRICS:
        *type = "text/plain; version=0.0.4";
        metrics_render(srv->metrics, registry_open_count(srv->reg),
                       registry_cache_bytes(srv->reg), atomic_load(&srv->in_flight), body);
        render_answer_cache_metrics(srv->answers, body);
        render_remote_metrics(registry_remote(srv->reg), body);
        if (registry_probes(srv->reg)) {
            probe_stats ps;
            probe_cache_get_stats(registry_probes(srv->reg), &ps);
            metrics_render_probes(&ps, body);
        }
        return 0;
    case ROUTE_OPENAPI:
        *type = "application/json";
        buf_append(body, _binary_api_openapi_json_start,
                   (size_t)(_binary_api_openapi_json_end - _binary_api_openapi_json_start));
        return 0;
    default:
        return cellar_fail(err, CELLAR_EINTERNAL, "no service handler");
    }
}

static int parse_body(request_ctx *ctx, cellar_error *err)
{
    if (ctx->upload_too_big)
        return cellar_fail(err, CELLAR_ETOOBIG,
                           "the request body is over the limit of %llu bytes",
                           (unsigned long long)ctx->srv->cfg->max_body_bytes);
    if (ctx->upload.len == 0)
        return 0;
    json_error_t jerr;
    json_t *doc = json_loadb(ctx->upload.data, ctx->upload.len, JSON_REJECT_DUPLICATES, &jerr);
    if (!doc)
        return cellar_fail(err, CELLAR_EINVAL, "the request body is not JSON: %s (line %d)",
                           jerr.text, jerr.line);
    if (!json_is_object(doc)) {
        json_decref(doc);
        return cellar_fail(err, CELLAR_EINVAL,
                           "the request body must be a JSON object of parameters");
    }
    ctx->req.body = doc;
    return 0;
}

static const char *request_header(void *conn, const char *name)
{
    return MHD_lookup_connection_value(conn, MHD_HEADER_KIND, name);
}

static void discard_response(api_response *res)
{
    buf_destroy(&res->body);
    if (res->fd >= 0)
        close(res->fd);
    res->fd = -1;
    res->n_headers = 0;
    res->content_type = NULL;
    res->status = 200;
    res->uncacheable = 0;
    res->stored_bytes = 0;
}

/* Runs the route's handler.  Reads are lazy, so a store rewritten in place
 * while the handler read it may have mixed bytes of its next version into
 * the answer: when the store changed (an HDF5 file's identity, or any zarr
 * file the version read: storage/zarr/zarr_impl.h), the answer is thrown
 * away and made again from a new version (a few times, a few ms apart so
 * a new version opens past the last write, then 503). */
static int run_handler(request_ctx *ctx, cellar_error *err)
{
    enum { ATTEMPTS = 3 };
    api_request *req = &ctx->req;
    for (int attempt = 1;; attempt++) {
        discard_response(&ctx->res);
        int rc = ctx->route.handler(req, &ctx->res, err);
        if (!req->store)
            return rc;
        /* Zarr keys of a zarr store carry their own files' validators; those
         * of an HDF5 store's zarr view come from the file as any answer. */
        if ((router_is_zarr_key(ctx->route.id) && store_get_backend(req->store) == BACKEND_ZARR) ||
            store_unchanged(req->store)) {
            store_answered(req->store);
            return rc;
        }
        discard_response(&ctx->res);
        if (attempt == ATTEMPTS) {
            cellar_error_clear(err);
            return cellar_fail(err, CELLAR_EUNAVAILABLE,
                               "store '%s' kept changing on disk while being read; retry",
                               req->store_name);
        }
        /* Past the quiet time a new version needs (a writer may still be
         * going), a few ms at least, a second at most. */
        double wait = store_settle_seconds(req->store) + 0.002;
        if (wait < 0.005 * attempt)
            wait = 0.005 * attempt;
        if (wait > 1)
            wait = 1;
        store_release(req->store);
        req->store = NULL;
        ctx->answer_key = NULL; /* its key names the version that changed */
        ctx->etag = NULL;
        cellar_error_clear(err);
        struct timespec pause = {0, (long)(wait * 1e9)};
        if (wait >= 1)
            pause = (struct timespec){1, 0};
        nanosleep(&pause, NULL);
        rc = api_open_store(req, err);
        if (rc)
            return rc;
        if (!router_is_zarr_key(ctx->route.id) && router_method(req->method) != METHOD_POST &&
            name_representation(ctx))
            return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
        /* A conditional that held for the old version says nothing of this one. */
        ctx->not_modified = 0;
    }
}

/* Whether the request ran past the watchdog's deadline; then err says so
 * (503) and the answer made is dropped: too late to be trusted by a client
 * that is likely gone, and not to be kept.  The watchdog logged it. */
static int overdue(request_ctx *ctx, cellar_error *err)
{
    if (!watchdog_overdue(ctx->srv->watch, &ctx->watch))
        return 0;
    discard_response(&ctx->res);
    ctx->answer_key = NULL;
    cellar_error_clear(err);
    cellar_fail(err, CELLAR_EUNAVAILABLE,
                "the request took longer than %g s (--request-timeout-seconds); retry",
                watchdog_timeout(ctx->srv->watch));
    return 1;
}

/* If-Match (strong comparison), else If-Unmodified-Since: 412 when it
 * fails (RFC 9110 13.1.1, 13.1.4); err says which. */
static int precondition_failed(request_ctx *ctx, struct MHD_Connection *conn, cellar_error *err)
{
    const char *im = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "If-Match");
    if (im) {
        if (etag_list_holds(im, ctx->etag, 1))
            return 0;
        cellar_fail(err, CELLAR_EPRECONDITION,
                    "If-Match: the representation's ETag is now %s", ctx->etag);
        return 1;
    }
    const char *ius = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "If-Unmodified-Since");
    time_t since;
    if (ius && http_date_parse(ius, &since) == 0 && store_mtime(ctx->req.store).tv_sec > since) {
        cellar_fail(err, CELLAR_EPRECONDITION,
                    "If-Unmodified-Since: the store changed after that date");
        return 1;
    }
    return 0;
}

/* Takes access_token out of the query (RFC 6750 2.3), so that no handler,
 * answer key, ETag, log line or error detail ever holds it; *token gets
 * its value (NULL when absent).  CELLAR_EINVAL when given twice. */
static int take_access_token(api_request *req, const char **token, cellar_error *err)
{
    *token = NULL;
    size_t kept = 0;
    int seen = 0;
    for (size_t i = 0; i < req->n_query; i++) {
        if (strcmp(req->query[i].key, "access_token")) {
            req->query[kept++] = req->query[i];
            continue;
        }
        seen++;
        *token = req->query[i].value;
    }
    req->n_query = kept;
    if (seen > 1)
        return cellar_fail(err, CELLAR_EINVAL, "access_token is given more than once");
    return 0;
}

/* The token file a route is guarded by: none for liveness, readiness, the
 * API description and the viewer's files (they tell nothing of the data;
 * the viewer asks for a token when a data route answers 401), --metrics-token-file
 * for /metrics, --auth-file for every other route (those not matched
 * included, so a path tells nothing without a token). */
static auth *gate_of(const http_server *srv, route_id id)
{
    switch (id) {
    case ROUTE_HEALTHZ:
    case ROUTE_READYZ:
    case ROUTE_OPENAPI:
    case ROUTE_UI:
        return NULL;
    case ROUTE_METRICS:
        return srv->metrics_tokens;
    default:
        return srv->store_tokens;
    }
}

static int grant_may_read(const void *grant, const char *store_name)
{
    return auth_grant_allows(grant, store_name);
}

/* Checks the bearer token (Authorization header, or access_token in the
 * query) against the route's token file: 0 when the route is open or the
 * token is in the file (then req may read what the token's grant allows),
 * CELLAR_EUNAUTHORIZED with ctx->challenge set when it is missing or
 * unknown, CELLAR_EINVAL when sent both ways (RFC 6750 2). */
static int authorize(request_ctx *ctx, struct MHD_Connection *conn, cellar_error *err)
{
    const char *query_token = NULL, *token = NULL;
    size_t len = 0;
    int rc = take_access_token(&ctx->req, &query_token, err);
    auth *gate = gate_of(ctx->srv, ctx->route.id);
    if (rc || !gate)
        return rc;
    const char *header = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Authorization");
    int has_header = auth_bearer_token(header, &token, &len) == 0;
    if (has_header && query_token)
        return cellar_fail(err, CELLAR_EINVAL,
                           "send the token once: in Authorization or as access_token, not both");
    if (query_token) {
        token = query_token;
        len = strlen(query_token);
    }
    ctx->tokens = auth_acquire(gate);
    const auth_grant *grant = token ? auth_table_find(ctx->tokens, token, len) : NULL;
    if (!grant) {
        ctx->challenge = token ? "Bearer realm=\"cellar\", error=\"invalid_token\""
                               : "Bearer realm=\"cellar\"";
        return cellar_fail(err, CELLAR_EUNAUTHORIZED,
                           token ? "the bearer token is not valid"
                                 : "a bearer token is required (Authorization: Bearer TOKEN, "
                                   "or access_token=TOKEN)");
    }
    if (gate == ctx->srv->store_tokens) {
        ctx->req.may_read = grant_may_read;
        ctx->req.grant = grant;
    }
    return 0;
}

static enum MHD_Result dispatch(request_ctx *ctx, struct MHD_Connection *conn, const char *url)
{
    api_request *req = &ctx->req;
    cellar_error err;
    cellar_error_clear(&err);
    unsigned method = router_method(req->method);

    int rc = router_match(url, req, &ctx->route, &err);
    if (!rc)
        watchdog_label(ctx->srv->watch, &ctx->watch, router_route_name(ctx->route.id),
                       req->store_name);
    /* A preflight carries no credentials (Fetch, CORS-preflight request). */
    if (method == METHOD_OPTIONS)
        return send_empty(ctx, conn, 204, allow_header(rc ? (METHOD_GET | METHOD_HEAD) : ctx->route.methods));
    MHD_get_connection_values(conn, MHD_GET_ARGUMENT_KIND, collect_query_arg, ctx);
    cellar_error denied;
    cellar_error_clear(&denied);
    if (authorize(ctx, conn, &denied))
        return send_problem(ctx, conn, &denied, NULL);
    if (rc)
        return send_problem(ctx, conn, &err, NULL);
    if (!(method & ctx->route.methods)) {
        cellar_fail(&err, CELLAR_EMETHOD, "%s is not allowed on this route", req->method);
        return send_problem(ctx, conn, &err, allow_header(ctx->route.methods));
    }
    req->accept = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Accept");
    req->header = request_header;
    req->header_ctx = conn;
    ctx->conn = conn;

    if (!ctx->route.handler) {
        buf body = {0};
        const char *type = "application/json";
        rc = answer_service(ctx, &body, &type, &err);
        if (rc) {
            buf_destroy(&body);
            return send_problem(ctx, conn, &err, NULL);
        }
        return send_body(ctx, conn, 200, type, &body, NULL);
    }
    /* h5grove's routes name their file in the query. */
    if (router_is_h5grove(ctx->route.id) && ctx->route.needs_store &&
        api_h5grove_store(req, &err))
        return send_problem(ctx, conn, &err, NULL);
    /* The raw zarr route answers conditionals with each key's validators. */
    if (ctx->route.needs_store && !router_is_zarr_key(ctx->route.id)) {
        rc = api_open_store(req, &err);
        if (rc && router_is_h5grove(ctx->route.id))
            rc = api_h5grove_open_error(&err);
        if (overdue(ctx, &err) || rc)
            return send_problem(ctx, conn, &err, NULL);
        if (method != METHOD_POST && name_representation(ctx)) {
            cellar_fail(&err, CELLAR_ENOMEM, "out of memory");
            return send_problem(ctx, conn, &err, NULL);
        }
        /* If-None-Match wins over If-Modified-Since (RFC 9110 13.1.3). */
        const char *inm = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "If-None-Match");
        const char *ims =
            MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "If-Modified-Since");
        ctx->not_modified = method != METHOD_POST &&
                            (inm ? etag_list_holds(inm, ctx->etag, 0)
                                 : not_modified_since(ims, store_mtime(req->store)));
        if (method != METHOD_POST && ctx->srv->cfg->answer_cache_bytes &&
            !MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Range")) {
            cached_use use = {ctx, conn};
            int queued = 0;
            if (answer_cache_use(ctx->srv->answers, ctx->answer_key, ctx->answer_key_len,
                                 queue_cached_answer, &use, &queued))
                return queued ? MHD_YES : MHD_NO;
        }
    }
    rc = parse_body(ctx, &err);
    if (rc)
        return send_problem(ctx, conn, &err, NULL);
    rc = run_handler(ctx, &err);
    if (overdue(ctx, &err))
        return send_problem(ctx, conn, &err, NULL);
    if (rc) {
        if (!err.code)
            cellar_fail(&err, rc, "%s", cellar_strerror(rc));
        buf_destroy(&ctx->res.body);
        return send_problem(ctx, conn, &err, NULL);
    }
    if (ctx->res.body.failed) {
        buf_destroy(&ctx->res.body);
        cellar_fail(&err, CELLAR_ENOMEM, "out of memory building the answer");
        return send_problem(ctx, conn, &err, NULL);
    }
    /* Preconditions count only for an answer that would be a 2xx (RFC 9110
     * 13.2.1): a missing element or a bad parameter keeps its own status. */
    int status = ctx->res.status ? ctx->res.status : 200;
    if (ctx->route.needs_store && !router_is_zarr_key(ctx->route.id) && method != METHOD_POST &&
        status >= 200 && status < 300 && precondition_failed(ctx, conn, &err)) {
        discard_response(&ctx->res);
        return send_problem(ctx, conn, &err, NULL);
    }
    if (ctx->res.fd >= 0 || ctx->res.status == 304)
        return send_direct(ctx, conn);
    return send_body(ctx, conn, ctx->res.status ? ctx->res.status : 200,
                     ctx->res.content_type ? ctx->res.content_type : "application/json",
                     &ctx->res.body, &ctx->res);
}

/* Whether Content-Length announces a body over --max-body-bytes: then it
 * is refused at once, not read first (a client announcing 100 GB would
 * otherwise hold the connection while it sends or stalls). */
static int body_announced_too_big(request_ctx *ctx, struct MHD_Connection *conn)
{
    const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Length");
    if (!cl)
        return 0;
    uint64_t n = 0;
    for (const char *p = cl; *p; p++) {
        if (*p < '0' || *p > '9')
            return 0; /* libmicrohttpd refuses a malformed one itself */
        n = n > (UINT64_MAX - 9) / 10 ? UINT64_MAX : n * 10 + (uint64_t)(*p - '0');
    }
    return n > ctx->srv->cfg->max_body_bytes;
}

/* The 413 for a body announced too big, queued before any of it is read;
 * libmicrohttpd closes the connection after it. */
static enum MHD_Result refuse_body(request_ctx *ctx, struct MHD_Connection *conn)
{
    cellar_error err;
    cellar_error_clear(&err);
    ctx->upload_too_big = 1;
    cellar_fail(&err, CELLAR_ETOOBIG, "the request body is over the limit of %llu bytes",
                (unsigned long long)ctx->srv->cfg->max_body_bytes);
    return send_problem(ctx, conn, &err, NULL);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_data_size,
                                  void **con_cls)
{
    (void)version;
    http_server *srv = cls;
    request_ctx *ctx = *con_cls;
    if (!ctx) {
        ctx = calloc(1, sizeof *ctx);
        if (!ctx)
            return MHD_NO;
        ctx->arena = arena_new();
        if (!ctx->arena) {
            free(ctx);
            return MHD_NO;
        }
        ctx->srv = srv;
        clock_gettime(CLOCK_MONOTONIC, &ctx->start);
        ctx->req.arena = ctx->arena;
        ctx->req.method = arena_strdup(ctx->arena, method);
        ctx->req.path = arena_strdup(ctx->arena, url);
        ctx->req.config = &srv->api_cfg;
        ctx->req.registry = srv->reg;
        ctx->res.fd = -1;
        ctx->cors = cors_decide(srv->cors,
                                MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Origin"));
        atomic_fetch_add(&srv->in_flight, 1);
        *con_cls = ctx;
        return body_announced_too_big(ctx, conn) ? refuse_body(ctx, conn) : MHD_YES;
    }
    if (*upload_data_size) {
        if (!ctx->upload_too_big &&
            ctx->upload.len + *upload_data_size <= srv->cfg->max_body_bytes) {
            if (buf_append(&ctx->upload, upload_data, *upload_data_size) != 0)
                ctx->upload_too_big = 1;
        } else {
            ctx->upload_too_big = 1;
            buf_destroy(&ctx->upload);
        }
        *upload_data_size = 0;
        return MHD_YES;
    }
    ctx->watch.start = ctx->start;
    ctx->watch.method = ctx->req.method;
    ctx->watch.path = ctx->req.path;
    ctx->watch.route = "-";
    ctx->watch.store = NULL;
    watchdog_enter(srv->watch, &ctx->watch);
    enum MHD_Result ret = dispatch(ctx, conn, url);
    watchdog_leave(srv->watch, &ctx->watch);
    return ret;
}

size_t http_watchdog_check(http_server *h)
{
    return watchdog_check(h->watch);
}

/* "METHOD PATH STATUS BYTES MICROSECONDS\n", put together by hand: this runs
 * once per request and printf's parsing was a visible share of a small one. */
static void log_request(FILE *log, const request_ctx *ctx, uint64_t us)
{
    const char *method = ctx->req.method ? ctx->req.method : "-";
    const char *path = ctx->req.path ? ctx->req.path : "-";
    size_t ml = strlen(method), pl = strlen(path);
    char numbers[80];
    char *p = numbers;
    *p++ = ' ';
    p += fmt_u64((uint64_t)(ctx->status < 0 ? 0 : ctx->status), p);
    *p++ = ' ';
    p += fmt_u64(ctx->bytes_out, p);
    *p++ = ' ';
    p += fmt_u64(us, p);
    *p++ = '\n';
    flockfile(log);
    fwrite_unlocked(method, 1, ml, log);
    fputc_unlocked(' ', log);
    fwrite_unlocked(path, 1, pl, log);
    fwrite_unlocked(numbers, 1, (size_t)(p - numbers), log);
    funlockfile(log);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)conn;
    (void)toe;
    http_server *srv = cls;
    request_ctx *ctx = *con_cls;
    if (!ctx)
        return;
    uint64_t us = elapsed_us(&ctx->start);
    if (srv->access_log)
        log_request(srv->access_log, ctx, us);
    metrics_observe(srv->metrics, ctx->route.id, ctx->status, us, ctx->bytes_out, ctx->from_file);
    if (ctx->res.fd >= 0)
        close(ctx->res.fd);
    store_release(ctx->req.store);
    auth_table_release(ctx->tokens);
    json_decref(ctx->req.body);
    buf_destroy(&ctx->res.body);
    buf_destroy(&ctx->upload);
    arena_free(ctx->arena);
    free(ctx);
    *con_cls = NULL;
    atomic_fetch_sub(&srv->in_flight, 1);
}

static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    fputs("cellar: libmicrohttpd: ", stderr);
    vfprintf(stderr, fmt, ap);
}

static int resolve_bind(const char *host, unsigned port, struct sockaddr_storage *out,
                        cellar_error *err)
{
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    char port_text[16];
    snprintf(port_text, sizeof port_text, "%u", port);
    int rc = getaddrinfo(host, port_text, &hints, &res);
    if (rc != 0 || !res)
        return cellar_fail(err, CELLAR_EINVAL, "cannot resolve --bind '%s': %s", host,
                           gai_strerror(rc));
    memset(out, 0, sizeof *out);
    memcpy(out, res->ai_addr, res->ai_addrlen);
    freeaddrinfo(res);
    return 0;
}

void http_set_background(http_server *h, http_background_fn fn, void *ctx)
{
    pthread_mutex_lock(&h->bg_lock);
    h->bg_fn = fn;
    h->bg_ctx = ctx;
    pthread_mutex_unlock(&h->bg_lock);
}

int http_submit_background(void *ctx, void (*fn)(void *), void *arg)
{
    http_server *h = ctx;
    pthread_mutex_lock(&h->bg_lock);
    int rc = h->bg_fn ? h->bg_fn(h->bg_ctx, fn, arg) : -1;
    pthread_mutex_unlock(&h->bg_lock);
    return rc;
}

/* Whether another process already listens on addr: binding a socket
 * without SO_REUSEPORT fails then.  Sockets with SO_REUSEPORT would share the
 * port with a server of the same user instead of failing. */
static int address_in_use(const struct sockaddr_storage *addr)
{
    int fd = socket(addr->ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return 0;
    socklen_t len = addr->ss_family == AF_INET6 ? sizeof(struct sockaddr_in6)
                                                : sizeof(struct sockaddr_in);
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (addr->ss_family == AF_INET6)
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
    int in_use = bind(fd, (const struct sockaddr *)addr, len) != 0 && errno == EADDRINUSE;
    close(fd);
    return in_use;
}

static void set_port(struct sockaddr_storage *addr, uint16_t port)
{
    if (addr->ss_family == AF_INET6)
        ((struct sockaddr_in6 *)addr)->sin6_port = htons(port);
    else
        ((struct sockaddr_in *)addr)->sin_port = htons(port);
}

static struct MHD_Daemon *start_daemon(http_server *h, struct sockaddr_storage *addr,
                                       uint16_t port)
{
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_USE_ITC |
                     MHD_USE_ERROR_LOG;
    if (addr->ss_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    struct MHD_OptionItem tls_options[TLS_DAEMON_OPTIONS] = {{MHD_OPTION_END, 0, NULL}};
    if (h->tls) {
        flags |= MHD_USE_TLS;
        tls_daemon_options(h->tls, tls_options);
    }
    return MHD_start_daemon(
        flags, port, NULL, NULL, on_request, h,
        MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, NULL,
        MHD_OPTION_ARRAY, tls_options,
        MHD_OPTION_SOCK_ADDR, (struct sockaddr *)addr,
        MHD_OPTION_LISTENING_ADDRESS_REUSE, (unsigned int)1,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, h,
        MHD_OPTION_UNESCAPE_CALLBACK, unescape_nothing, NULL,
        /* Bounds a request's URL and headers (long selections go in POST
         * bodies); libmicrohttpd clears the pool between keep-alive
         * requests, so a larger one costs CPU on every request. */
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(64 * 1024),
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)60,
        MHD_OPTION_END);
}

/* Starts cfg->threads daemons on one port; with --port 0 the first picks
 * the port and the others join it. */
static int start_daemons(http_server *h, struct sockaddr_storage *addr, cellar_error *err)
{
    const server_config *cfg = h->cfg;
    if (cfg->port && address_in_use(addr))
        return cellar_fail(err, CELLAR_EUNAVAILABLE, "cannot listen on %s:%u: address in use",
                           cfg->bind, cfg->port);
    unsigned want = cfg->threads < MAX_DAEMONS ? cfg->threads : MAX_DAEMONS;
    uint16_t port = (uint16_t)cfg->port;
    for (unsigned i = 0; i < want; i++) {
        struct MHD_Daemon *d = start_daemon(h, addr, port);
        if (!d)
            return cellar_fail(err, CELLAR_EUNAVAILABLE, "cannot listen on %s:%u", cfg->bind,
                               (unsigned)port);
        h->daemons[h->n_daemons++] = d;
        if (port == 0) {
            const union MHD_DaemonInfo *info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
            port = info ? info->port : 0;
            if (!port)
                return cellar_fail(err, CELLAR_EUNAVAILABLE, "cannot tell the port chosen");
            set_port(addr, port);
        }
    }
    return 0;
}

static void stop_daemons(http_server *h)
{
    for (unsigned i = 0; i < h->n_daemons; i++)
        MHD_stop_daemon(h->daemons[i]);
    h->n_daemons = 0;
}

static void http_free(http_server *h)
{
    stop_daemons(h);
    tls_free(h->tls); /* after the daemons: their connections held it */
    answer_cache_free(h->answers);
    auth_free(h->store_tokens);
    auth_free(h->metrics_tokens);
    cors_free(h->cors);
    watchdog_free(h->watch);
    if (h->access_log)
        fclose(h->access_log);
    pthread_mutex_destroy(&h->bg_lock);
    free(h);
}

/* The access log goes to stderr through its own fully buffered stream, so a
 * request costs no write(2); http_flush_log (every 0.1 s) writes it out. */
static FILE *open_access_log(void)
{
    int fd = dup(STDERR_FILENO);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!f) {
        if (fd >= 0)
            close(fd);
        return NULL;
    }
    setvbuf(f, NULL, _IOFBF, 64 * 1024);
    return f;
}

static auth *open_tokens(const char *path, auth_file_kind kind, cellar_error *err)
{
    auth *a = auth_open(path, kind, err);
    if (a) {
        auth_table *t = auth_acquire(a);
        fprintf(stderr, "cellar: %s: %zu tokens\n", path, auth_table_count(t));
        auth_table_release(t);
    }
    return a;
}

/* SIGHUP: a token file that does not parse leaves the tokens in use. */
static void reload_tokens(auth *a, const char *path)
{
    if (!a)
        return;
    cellar_error err;
    cellar_error_clear(&err);
    if (auth_reload(a, &err)) {
        fprintf(stderr, "cellar: SIGHUP: kept the tokens in use: %s\n", err.detail);
        return;
    }
    auth_table *t = auth_acquire(a);
    fprintf(stderr, "cellar: SIGHUP: %s: %zu tokens\n", path, auth_table_count(t));
    auth_table_release(t);
}

/* SIGHUP: a certificate or key that does not load leaves the one in use. */
static void reload_certificate(tls_server *t)
{
    if (!t)
        return;
    cellar_error err;
    cellar_error_clear(&err);
    char summary[512];
    if (tls_reload(t, &err)) {
        tls_describe(t, summary, sizeof summary);
        fprintf(stderr, "cellar: SIGHUP: kept the TLS certificate in use (%s): %s\n", summary,
                err.detail);
        return;
    }
    tls_describe(t, summary, sizeof summary);
    fprintf(stderr, "cellar: SIGHUP: TLS certificate %s\n", summary);
}

void http_reload_credentials(http_server *h)
{
    reload_tokens(h->store_tokens, h->cfg->auth_file);
    reload_tokens(h->metrics_tokens, h->cfg->metrics_token_file);
    reload_certificate(h->tls);
}

http_server *http_start(const server_config *cfg, registry *reg, metrics *m,
                        cellar_error *err)
{
    http_server *h = calloc(1, sizeof *h);
    if (!h) {
        cellar_fail(err, CELLAR_ENOMEM, "out of memory");
        return NULL;
    }
    h->cfg = cfg;
    h->reg = reg;
    h->metrics = m;
    h->api_cfg.max_response_bytes = cfg->max_response_bytes;
    h->api_cfg.cors_origin = cfg->cors_origin;
    h->api_cfg.cache_dir = cfg->cache_dir;
    h->api_cfg.column_index_max_bytes = cfg->column_index_max_bytes;
    h->api_cfg.submit_background = http_submit_background;
    h->api_cfg.background_ctx = h;
    pthread_mutex_init(&h->bg_lock, NULL);
    h->answers = answer_cache_new(cfg->answer_cache_bytes);
    h->watch = watchdog_new(cfg->request_timeout_seconds);
    if (!h->answers || !h->watch) {
        cellar_fail(err, CELLAR_ENOMEM, "out of memory");
        goto fail;
    }
    if (!(h->cors = cors_new(cfg->cors_origin, err)))
        goto fail;
    if (cfg->auth_file && !(h->store_tokens = open_tokens(cfg->auth_file, AUTH_FILE_STORES, err)))
        goto fail;
    if (cfg->metrics_token_file &&
        !(h->metrics_tokens = open_tokens(cfg->metrics_token_file, AUTH_FILE_TOKENS, err)))
        goto fail;
    if (cfg->tls_cert) {
        if (!(h->tls = tls_open(cfg->tls_cert, cfg->tls_key, err)))
            goto fail;
        char summary[512];
        tls_describe(h->tls, summary, sizeof summary);
        fprintf(stderr, "cellar: TLS certificate %s\n", summary);
    }
    if (cfg->access_log && !(h->access_log = open_access_log())) {
        cellar_fail(err, CELLAR_EINTERNAL, "cannot open the access log on stderr");
        goto fail;
    }
    struct sockaddr_storage addr;
    if (resolve_bind(cfg->bind, cfg->port, &addr, err) != 0)
        goto fail;
    if (start_daemons(h, &addr, err) != 0)
        goto fail;
    return h;
fail:
    http_free(h);
    return NULL;
}

void http_flush_log(http_server *h)
{
    if (h && h->access_log)
        fflush(h->access_log);
}

void http_drop_answers(http_server *h)
{
    if (h)
        answer_cache_clear(h->answers);
}

unsigned http_in_flight(http_server *h)
{
    return atomic_load(&h->in_flight);
}

unsigned http_drain_and_stop(http_server *h, double drain_seconds)
{
    if (!h)
        return 0;
    atomic_store(&h->stopping, 1);
    for (unsigned i = 0; i < h->n_daemons; i++) {
        MHD_socket listener = MHD_quiesce_daemon(h->daemons[i]);
        if (listener != MHD_INVALID_SOCKET)
            close(listener);
    }
    struct timespec start;
    clock_gettime(CLOCK_MONOTONIC, &start);
    while (atomic_load(&h->in_flight) > 0 &&
           (double)elapsed_us(&start) / 1e6 < drain_seconds) {
        struct timespec pause = {0, 10 * 1000 * 1000};
        nanosleep(&pause, NULL);
    }
    unsigned left = atomic_load(&h->in_flight);
    if (left > 0 && drain_seconds > 0)
        return left;
    http_free(h);
    return 0;
}
