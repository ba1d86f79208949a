/* loadgen: a closed-loop HTTP/1.1 load generator for large bodies
 * (`make bench`, the matrices section).
 *
 *   loadgen [-c CONNS] [-d SECONDS] [-w SECONDS] [-f PATHS] [-o random|cycle]
 *           [-s SEED] [-t SECONDS] [-H 'Name: value']... http://127.0.0.1:PORT[/path]
 *
 * Why not wrk: wrk (like h2load and ab) reads the socket 8 KiB per recv, so
 * an 800 KB body costs the client ~100 syscalls; on a two-core machine the
 * client then uses as much CPU as the server and limits the numbers.
 * loadgen reads into one 1 MiB buffer, so a body costs a few recv calls.
 * The body is still copied out of the kernel (no MSG_TRUNC), as a real
 * client's would be.
 *
 * One thread, epoll, N non-blocking keep-alive connections, each sending
 * its next request as soon as the previous response is complete.  Paths
 * come from a file (one per line; empty lines skipped) and are taken at
 * random (seeded) or in file order, over and over (cycle: a group of k lines
 * is one logical request that a reference needs k requests for), one
 * sequence shared by all connections as bench/wrk/paths.lua does.
 *
 * A response counts when its last byte arrives inside the measured window
 * (after the warm-up); its latency runs from the first send of the request
 * to that byte.  Output: one line `BENCH_RESULT {json}` with the keys of
 * bench/wrk/report.lua (latencies in microseconds), plus client_cpu_us
 * (loadgen's own CPU over the window), recv_calls and body_bytes.
 *
 * Only 127.0.0.1 / localhost: it is a benchmark client, not a tool to load
 * other machines.  Exits 1 with a message on a failed connect, a response
 * without Content-Length (chunked or until-close bodies are not supported)
 * or a malformed response head. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define RECV_BUF_BYTES (1u << 20)
#define HEAD_MAX 16384
#define MAX_EVENTS 256
#define TICK_MS 100

enum err_kind { ERR_CONNECT, ERR_READ, ERR_WRITE, ERR_STATUS, ERR_TIMEOUT, ERR_KINDS };

typedef struct request {
    char *text;
    size_t len;
} request;

typedef struct conn {
    int fd;
    int connecting;       /* non-blocking connect in progress */
    int want_out;         /* EPOLLOUT registered (connect or partial send) */
    const request *req;   /* the request in flight */
    size_t sent;          /* bytes of req->text written */
    uint64_t t_send;      /* ns, first send of req */
    int in_body;          /* head parsed, body_left bytes to go */
    uint64_t body_left;
    uint64_t body_len;
    size_t head_len;
    int status;
    int close_after;      /* the response said Connection: close */
    unsigned served;      /* responses completed on this socket */
    char head[HEAD_MAX];
} conn;

typedef struct stats {
    uint64_t requests, bytes, body_bytes, recv_calls;
    uint64_t err[ERR_KINDS];
    uint64_t *lat_ns;
    size_t n_lat, cap_lat;
} stats;

typedef struct loadgen {
    struct sockaddr_in addr;
    char host[64];
    int epfd;
    conn *conns;
    int n_conns;
    request *reqs;
    size_t n_reqs;
    int cycle;
    size_t next_req;
    uint64_t rng;
    double timeout_s;
    uint64_t t_measure, t_end;   /* ns: the measured window */
    char *rbuf;                  /* shared receive buffer, 1 MiB */
    stats st;
} loadgen;

static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("loadgen: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t cpu_us(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (uint64_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000u +
           (uint64_t)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

/* splitmix64: small, seeded, the same sequence on every run. */
static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

static int in_window(const loadgen *lg, uint64_t t)
{
    return t >= lg->t_measure && t < lg->t_end;
}

static void count_error(loadgen *lg, enum err_kind kind)
{
    if (in_window(lg, now_ns()))
        lg->st.err[kind]++;
}

/* ---------------------------------------------------------------------- */
/* Setup */

/* "http://127.0.0.1:8080/x" -> addr, host header, path ("/" by default). */
static const char *parse_url(loadgen *lg, const char *url)
{
    const char *p = url;
    if (strncmp(p, "http://", 7) != 0)
        die("URL must start with http:// (got '%s')", url);
    p += 7;
    const char *colon = strchr(p, ':');
    const char *slash = strchr(p, '/');
    if (!colon || (slash && slash < colon))
        die("URL needs an explicit port: http://127.0.0.1:PORT/ (got '%s')", url);
    size_t hlen = (size_t)(colon - p);
    if (!((hlen == 9 && strncmp(p, "127.0.0.1", 9) == 0) ||
          (hlen == 9 && strncmp(p, "localhost", 9) == 0)))
        die("only 127.0.0.1 or localhost may be loaded (got '%.*s')", (int)hlen, p);
    char *end = NULL;
    long port = strtol(colon + 1, &end, 10);
    if (end == colon + 1 || port <= 0 || port > 65535 || (*end && *end != '/'))
        die("bad port in '%s'", url);
    memset(&lg->addr, 0, sizeof lg->addr);
    lg->addr.sin_family = AF_INET;
    lg->addr.sin_port = htons((uint16_t)port);
    lg->addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    snprintf(lg->host, sizeof lg->host, "%.*s:%ld", (int)hlen, p, port);
    return *end ? end : "/";
}

static void add_request(loadgen *lg, const char *path, size_t plen, const char *headers,
                        size_t *cap)
{
    if (plen == 0 || path[0] != '/')
        die("paths must start with '/' (got '%.*s')", (int)plen, path);
    if (lg->n_reqs == *cap) {
        *cap = *cap ? *cap * 2 : 64;
        lg->reqs = realloc(lg->reqs, *cap * sizeof *lg->reqs);
        if (!lg->reqs)
            die("out of memory");
    }
    size_t len = (size_t)snprintf(NULL, 0, "GET %.*s HTTP/1.1\r\nHost: %s\r\n%s\r\n",
                                  (int)plen, path, lg->host, headers);
    char *text = malloc(len + 1);
    if (!text)
        die("out of memory");
    snprintf(text, len + 1, "GET %.*s HTTP/1.1\r\nHost: %s\r\n%s\r\n", (int)plen, path,
             lg->host, headers);
    lg->reqs[lg->n_reqs++] = (request){text, len};
}

/* Every request is formatted once, so sending one is a pointer. */
static void load_requests(loadgen *lg, const char *paths_file, const char *url_path,
                          const char *headers)
{
    size_t cap = 0;
    if (!paths_file) {
        add_request(lg, url_path, strlen(url_path), headers, &cap);
        return;
    }
    FILE *f = fopen(paths_file, "r");
    if (!f)
        die("cannot open %s: %s", paths_file, strerror(errno));
    char *line = NULL;
    size_t line_cap = 0;
    ssize_t n;
    while ((n = getline(&line, &line_cap, f)) >= 0) {
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
            n--;
        if (n > 0)
            add_request(lg, line, (size_t)n, headers, &cap);
    }
    free(line);
    fclose(f);
    if (lg->n_reqs == 0)
        die("%s holds no paths", paths_file);
}

/* ---------------------------------------------------------------------- */
/* Connections */

static void conn_watch(loadgen *lg, conn *c, int want_out)
{
    struct epoll_event ev = {.events = EPOLLIN | (want_out ? EPOLLOUT : 0u), .data.ptr = c};
    if (epoll_ctl(lg->epfd, EPOLL_CTL_MOD, c->fd, &ev) != 0)
        die("epoll_ctl: %s", strerror(errno));
    c->want_out = want_out;
}

static void conn_open(loadgen *lg, conn *c)
{
    c->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c->fd < 0)
        die("socket: %s", strerror(errno));
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(c->fd, (struct sockaddr *)&lg->addr, sizeof lg->addr) != 0 &&
        errno != EINPROGRESS)
        die("cannot connect to %s: %s", lg->host, strerror(errno));
    c->connecting = 1;
    c->served = 0;
    c->in_body = 0;
    c->head_len = 0;
    struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT, .data.ptr = c};
    if (epoll_ctl(lg->epfd, EPOLL_CTL_ADD, c->fd, &ev) != 0)
        die("epoll_ctl: %s", strerror(errno));
    c->want_out = 1;
}

static void conn_close(loadgen *lg, conn *c)
{
    epoll_ctl(lg->epfd, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    c->fd = -1;
}

/* A new socket; the request in flight (c->req) is sent again on it. */
static void conn_reopen(loadgen *lg, conn *c)
{
    conn_close(lg, c);
    conn_open(lg, c);
}

static const request *next_request(loadgen *lg)
{
    if (lg->cycle) {
        const request *r = &lg->reqs[lg->next_req];
        lg->next_req = (lg->next_req + 1) % lg->n_reqs;
        return r;
    }
    return &lg->reqs[rng_next(&lg->rng) % lg->n_reqs];
}

/* Writes what is left of the request; 0 when all is sent or waiting for
 * EPOLLOUT, -1 when the socket failed (it is reopened, the caller stops
 * using the bytes it holds for it). */
static int conn_send(loadgen *lg, conn *c)
{
    while (c->sent < c->req->len) {
        ssize_t n = send(c->fd, c->req->text + c->sent, c->req->len - c->sent, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (!c->want_out)
                conn_watch(lg, c, 1);
            return 0;
        }
        if (n < 0) {
            count_error(lg, ERR_WRITE);
            c->sent = 0;
            conn_reopen(lg, c);
            return -1;
        }
        c->sent += (size_t)n;
    }
    if (c->want_out)
        conn_watch(lg, c, 0);
    return 0;
}

/* The next request (or, with resend, the same one again) on c. */
static int conn_start(loadgen *lg, conn *c, int resend)
{
    if (!resend)
        c->req = next_request(lg);
    c->sent = 0;
    c->in_body = 0;
    c->head_len = 0;
    c->t_send = now_ns();
    return conn_send(lg, c);
}

/* ---------------------------------------------------------------------- */
/* Responses */

static void lat_push(stats *st, uint64_t ns)
{
    if (st->n_lat == st->cap_lat) {
        st->cap_lat = st->cap_lat ? st->cap_lat * 2 : 65536;
        st->lat_ns = realloc(st->lat_ns, st->cap_lat * sizeof *st->lat_ns);
        if (!st->lat_ns)
            die("out of memory");
    }
    st->lat_ns[st->n_lat++] = ns;
}

/* The value of header name in a head of len bytes (lines end in \r\n). */
static const char *header_value(const char *head, size_t len, const char *name, size_t *vlen)
{
    size_t nlen = strlen(name);
    const char *end = head + len;
    const char *line = memchr(head, '\n', len);   /* skip the status line */
    while (line && ++line < end) {
        const char *eol = memchr(line, '\n', (size_t)(end - line));
        if (!eol)
            break;
        if ((size_t)(eol - line) > nlen && line[nlen] == ':' &&
            strncasecmp(line, name, nlen) == 0) {
            const char *v = line + nlen + 1;
            while (v < eol && (*v == ' ' || *v == '\t'))
                v++;
            const char *ve = eol;
            while (ve > v && (ve[-1] == '\r' || ve[-1] == ' ' || ve[-1] == '\t'))
                ve--;
            *vlen = (size_t)(ve - v);
            return v;
        }
        line = eol;
    }
    return NULL;
}

static int value_has(const char *v, size_t vlen, const char *token)
{
    size_t tlen = strlen(token);
    for (size_t i = 0; i + tlen <= vlen; i++)
        if (strncasecmp(v + i, token, tlen) == 0)
            return 1;
    return 0;
}

/* Status and body length from c->head; 1 for an interim (1xx) response to
 * skip. */
static int parse_head(loadgen *lg, conn *c)
{
    const char *h = c->head;
    if (c->head_len < 12 || strncmp(h, "HTTP/1.", 7) != 0 || h[8] != ' ' ||
        h[9] < '1' || h[9] > '5' || h[10] < '0' || h[10] > '9' || h[11] < '0' || h[11] > '9')
        die("malformed status line from %s: '%.40s'", lg->host, h);
    c->status = (h[9] - '0') * 100 + (h[10] - '0') * 10 + (h[11] - '0');
    if (c->status < 200)
        return 1;
    size_t vlen;
    const char *v = header_value(h, c->head_len, "connection", &vlen);
    c->close_after = (v && value_has(v, vlen, "close")) || h[7] == '0';
    if (c->status == 204 || c->status == 304) {
        c->body_len = 0;
        return 0;
    }
    v = header_value(h, c->head_len, "transfer-encoding", &vlen);
    if (v && !(vlen == 8 && strncasecmp(v, "identity", 8) == 0))
        die("%s answered %.*s with Transfer-Encoding: %.*s; loadgen needs Content-Length",
            lg->host, (int)(strchr(h, '\r') - h), h, (int)vlen, v);
    v = header_value(h, c->head_len, "content-length", &vlen);
    if (!v)
        die("%s answered '%.*s' without Content-Length (request: %.*s)", lg->host,
            (int)(strchr(h, '\r') - h), h, (int)(strchr(c->req->text, '\r') - c->req->text),
            c->req->text);
    char *end = NULL;
    unsigned long long n = strtoull(v, &end, 10);
    if (end == v || end != v + vlen)
        die("bad Content-Length '%.*s'", (int)vlen, v);
    c->body_len = n;
    return 0;
}

/* Consumes bytes of the head; returns how many, with c->in_body set once
 * the blank line is in. */
static size_t feed_head(loadgen *lg, conn *c, const char *p, size_t n)
{
    size_t old = c->head_len;
    size_t take = n < HEAD_MAX - old ? n : HEAD_MAX - old;
    memcpy(c->head + old, p, take);
    c->head_len += take;
    size_t from = old >= 3 ? old - 3 : 0;
    for (size_t i = from; i + 4 <= c->head_len; i++) {
        if (memcmp(c->head + i, "\r\n\r\n", 4) != 0)
            continue;
        size_t used = i + 4 - old;
        c->head_len = i + 4;
        if (parse_head(lg, c)) {
            c->head_len = 0;   /* 1xx: the real head follows */
            return used;
        }
        c->in_body = 1;
        c->body_left = c->body_len;
        return used;
    }
    if (c->head_len == HEAD_MAX)
        die("response head from %s over %d bytes", lg->host, HEAD_MAX);
    return take;
}

static void record(loadgen *lg, conn *c)
{
    uint64_t t = now_ns();
    c->served++;
    if (!in_window(lg, t))
        return;
    stats *st = &lg->st;
    st->requests++;
    st->bytes += c->head_len + c->body_len;
    st->body_bytes += c->body_len;
    if (c->status >= 400)
        st->err[ERR_STATUS]++;
    lat_push(st, t - c->t_send);
}

/* The bytes just read on c: head, body, and whatever follows (the start of
 * the next response, which HTTP/1.1 sends in order). */
static void conn_feed(loadgen *lg, conn *c, const char *p, size_t n)
{
    while (n > 0) {
        if (!c->in_body) {
            size_t used = feed_head(lg, c, p, n);
            p += used;
            n -= used;
            if (!c->in_body)
                continue;
        }
        size_t take = c->body_left < n ? (size_t)c->body_left : n;
        c->body_left -= take;
        p += take;
        n -= take;
        if (c->body_left > 0)
            return;
        record(lg, c);
        if (c->close_after) {
            conn_reopen(lg, c);   /* conn_ready sends the next request */
            c->req = next_request(lg);
            return;
        }
        if (conn_start(lg, c, 0) != 0)
            return;
    }
}

static void conn_read(loadgen *lg, conn *c)
{
    ssize_t n = recv(c->fd, lg->rbuf, RECV_BUF_BYTES, 0);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return;
    if (in_window(lg, now_ns()))
        lg->st.recv_calls++;
    if (n > 0) {
        conn_feed(lg, c, lg->rbuf, (size_t)n);
        return;
    }
    /* Closed (or reset).  A kept-alive socket closed before any byte of the
     * answer is the server ending an idle connection: send again on a new
     * one, as clients do.  Anything else lost a response. */
    int idle_close = n == 0 && c->served > 0 && !c->in_body && c->head_len == 0;
    if (!idle_close)
        count_error(lg, ERR_READ);
    conn_reopen(lg, c);
    if (!idle_close)
        c->req = next_request(lg);
}

static void conn_ready(loadgen *lg, conn *c)
{
    int err = 0;
    socklen_t len = sizeof err;
    if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
        err = errno;
    if (err)
        die("cannot connect to %s: %s", lg->host, strerror(err));
    c->connecting = 0;
    conn_start(lg, c, 1);
}

static void conn_event(loadgen *lg, conn *c, uint32_t events)
{
    if (c->connecting) {
        if (events & (EPOLLOUT | EPOLLERR | EPOLLHUP))
            conn_ready(lg, c);
        return;
    }
    if ((events & EPOLLOUT) && c->sent < c->req->len && conn_send(lg, c) != 0)
        return;
    if (events & (EPOLLIN | EPOLLERR | EPOLLHUP))
        conn_read(lg, c);
}

/* Requests without an answer after timeout_s count as timeouts and go
 * again on a new socket. */
static void check_timeouts(loadgen *lg, uint64_t now)
{
    uint64_t limit = (uint64_t)(lg->timeout_s * 1e9);
    for (int i = 0; i < lg->n_conns; i++) {
        conn *c = &lg->conns[i];
        if (c->connecting || now - c->t_send < limit)
            continue;
        count_error(lg, ERR_TIMEOUT);
        conn_reopen(lg, c);
        c->req = next_request(lg);
    }
}

/* ---------------------------------------------------------------------- */
/* Run and report */

static void run(loadgen *lg, double warmup_s, double duration_s, uint64_t *cpu_used)
{
    uint64_t t0 = now_ns();
    lg->t_measure = t0 + (uint64_t)(warmup_s * 1e9);
    lg->t_end = lg->t_measure + (uint64_t)(duration_s * 1e9);
    for (int i = 0; i < lg->n_conns; i++) {
        conn *c = &lg->conns[i];
        conn_open(lg, c);
        c->req = next_request(lg);
        c->t_send = t0;
    }
    struct epoll_event events[MAX_EVENTS];
    int measuring = 0;
    uint64_t cpu0 = 0, last_check = t0;
    for (uint64_t now = t0; now < lg->t_end; now = now_ns()) {
        if (!measuring && now >= lg->t_measure) {
            measuring = 1;
            cpu0 = cpu_us();
        }
        uint64_t next = measuring ? lg->t_end : lg->t_measure;
        uint64_t wait_ms = (next - now) / 1000000u + 1;
        int n = epoll_wait(lg->epfd, events, MAX_EVENTS, wait_ms < TICK_MS ? (int)wait_ms : TICK_MS);
        if (n < 0 && errno != EINTR)
            die("epoll_wait: %s", strerror(errno));
        for (int i = 0; i < n; i++)
            conn_event(lg, events[i].data.ptr, events[i].events);
        now = now_ns();
        if (now - last_check >= TICK_MS * 1000000u) {
            check_timeouts(lg, now);
            last_check = now;
        }
    }
    *cpu_used = measuring ? cpu_us() - cpu0 : 0;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* Nearest rank, in microseconds. */
static uint64_t percentile_us(const stats *st, double p)
{
    if (st->n_lat == 0)
        return 0;
    size_t rank = (size_t)(p / 100.0 * (double)st->n_lat + 0.999999);
    if (rank < 1)
        rank = 1;
    if (rank > st->n_lat)
        rank = st->n_lat;
    return (st->lat_ns[rank - 1] + 500) / 1000;
}

static void report(loadgen *lg, double duration_s, uint64_t cpu_used)
{
    stats *st = &lg->st;
    qsort(st->lat_ns, st->n_lat, sizeof *st->lat_ns, cmp_u64);
    printf("BENCH_RESULT {\"requests\":%llu,\"duration_us\":%llu,\"bytes\":%llu,"
           "\"p50_us\":%llu,\"p90_us\":%llu,\"p99_us\":%llu,\"max_us\":%llu,"
           "\"err_connect\":%llu,\"err_read\":%llu,\"err_write\":%llu,\"err_status\":%llu,"
           "\"err_timeout\":%llu,\"body_bytes\":%llu,\"recv_calls\":%llu,"
           "\"client_cpu_us\":%llu,\"connections\":%d}\n",
           (unsigned long long)st->requests, (unsigned long long)(duration_s * 1e6),
           (unsigned long long)st->bytes, (unsigned long long)percentile_us(st, 50),
           (unsigned long long)percentile_us(st, 90), (unsigned long long)percentile_us(st, 99),
           (unsigned long long)percentile_us(st, 100), (unsigned long long)st->err[ERR_CONNECT],
           (unsigned long long)st->err[ERR_READ], (unsigned long long)st->err[ERR_WRITE],
           (unsigned long long)st->err[ERR_STATUS], (unsigned long long)st->err[ERR_TIMEOUT],
           (unsigned long long)st->body_bytes, (unsigned long long)st->recv_calls,
           (unsigned long long)cpu_used, lg->n_conns);
    fflush(stdout);
}

static void loadgen_destroy(loadgen *lg)
{
    for (int i = 0; lg->conns && i < lg->n_conns; i++)
        if (lg->conns[i].fd >= 0)
            close(lg->conns[i].fd);
    for (size_t i = 0; i < lg->n_reqs; i++)
        free(lg->reqs[i].text);
    free(lg->reqs);
    free(lg->conns);
    free(lg->rbuf);
    free(lg->st.lat_ns);
    if (lg->epfd >= 0)
        close(lg->epfd);
}

static void usage(void)
{
    fputs("usage: loadgen [-c CONNS] [-d SECONDS] [-w WARMUP_SECONDS] [-f PATHS_FILE]\n"
          "               [-o random|cycle] [-s SEED] [-t TIMEOUT_SECONDS]\n"
          "               [-H 'Name: value']... http://127.0.0.1:PORT[/path]\n",
          stderr);
    exit(2);
}

static double parse_seconds(const char *s, const char *what)
{
    char *end = NULL;
    double v = strtod(s, &end);
    if (end == s || *end || v < 0 || v > 86400)
        die("bad %s '%s'", what, s);
    return v;
}

int main(int argc, char **argv)
{
    loadgen lg = {.n_conns = 16, .timeout_s = 10, .epfd = -1};
    double duration_s = 4, warmup_s = 0;
    const char *paths_file = NULL;
    uint64_t seed = 1;
    char *headers = calloc(1, 1);
    size_t headers_len = 0;
    static const struct option longopts[] = {
        {"connections", required_argument, NULL, 'c'}, {"duration", required_argument, NULL, 'd'},
        {"warmup", required_argument, NULL, 'w'},      {"paths", required_argument, NULL, 'f'},
        {"order", required_argument, NULL, 'o'},       {"seed", required_argument, NULL, 's'},
        {"timeout", required_argument, NULL, 't'},     {"header", required_argument, NULL, 'H'},
        {NULL, 0, NULL, 0}};
    int opt;
    while ((opt = getopt_long(argc, argv, "c:d:w:f:o:s:t:H:", longopts, NULL)) != -1) {
        switch (opt) {
        case 'c':
            lg.n_conns = atoi(optarg);
            if (lg.n_conns < 1 || lg.n_conns > 10000)
                die("connections must be 1..10000 (got '%s')", optarg);
            break;
        case 'd': duration_s = parse_seconds(optarg, "duration"); break;
        case 'w': warmup_s = parse_seconds(optarg, "warm-up"); break;
        case 'f': paths_file = optarg; break;
        case 'o':
            if (strcmp(optarg, "cycle") == 0)
                lg.cycle = 1;
            else if (strcmp(optarg, "random") != 0)
                die("order is random or cycle (got '%s')", optarg);
            break;
        case 's': seed = strtoull(optarg, NULL, 10); break;
        case 't': lg.timeout_s = parse_seconds(optarg, "timeout"); break;
        case 'H': {
            if (!strchr(optarg, ':') || strpbrk(optarg, "\r\n"))
                die("header must be 'Name: value' on one line (got '%s')", optarg);
            size_t add = strlen(optarg);
            headers = realloc(headers, headers_len + add + 3);
            if (!headers)
                die("out of memory");
            memcpy(headers + headers_len, optarg, add);
            memcpy(headers + headers_len + add, "\r\n", 3);
            headers_len += add + 2;
            break;
        }
        default: usage();
        }
    }
    if (optind != argc - 1)
        usage();
    if (duration_s <= 0)
        die("duration must be above 0");
    const char *url_path = parse_url(&lg, argv[optind]);
    load_requests(&lg, paths_file, url_path, headers);
    lg.rng = seed;
    lg.rbuf = malloc(RECV_BUF_BYTES);
    lg.conns = calloc((size_t)lg.n_conns, sizeof *lg.conns);
    lg.epfd = epoll_create1(EPOLL_CLOEXEC);
    if (!lg.rbuf || !lg.conns || lg.epfd < 0)
        die("setup: %s", strerror(errno));
    uint64_t cpu_used = 0;
    run(&lg, warmup_s, duration_s, &cpu_used);
    report(&lg, duration_s, cpu_used);
    loadgen_destroy(&lg);
    free(headers);
    return 0;
}
