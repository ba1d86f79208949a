#include "server/healthcheck.h"

#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <gnutls/gnutls.h>

#define DEFAULT_TIMEOUT_SECONDS 3.0
#define MAX_TIMEOUT_SECONDS 3600.0
/* The status line is all we read; a longer first line is not HTTP. */
#define STATUS_LINE_MAX 512

static int fail(char *why, size_t why_size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail(char *why, size_t why_size, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, why_size, fmt, ap);
    va_end(ap);
    return -1;
}

static int copy_field(char *dst, size_t dst_size, const char *src, size_t len)
{
    if (len == 0 || len >= dst_size)
        return -1;
    memcpy(dst, src, len);
    dst[len] = '\0';
    return 0;
}

/* A TCP port: 1 to 65535, decimal digits only. */
static int parse_port(char *dst, size_t dst_size, const char *src, size_t len)
{
    unsigned long v = 0;
    if (len == 0 || len > 5)
        return -1;
    for (size_t i = 0; i < len; i++) {
        if (src[i] < '0' || src[i] > '9')
            return -1;
        v = v * 10 + (unsigned long)(src[i] - '0');
    }
    if (v == 0 || v > 65535)
        return -1;
    return copy_field(dst, dst_size, src, len);
}

/* http[s]://HOST[:PORT][/PATH]: HOST a name, an IPv4 address or [an IPv6
 * address]; PORT 80 (443) and PATH /healthz when left out. */
static int parse_url(healthcheck_target *t, const char *url)
{
    t->tls = !strncmp(url, "https://", 8);
    if (!t->tls && strncmp(url, "http://", 7) != 0)
        return -1;
    const char *host = url + (t->tls ? 8 : 7);
    const char *host_end;
    const char *after;
    if (*host == '[') {
        host++;
        host_end = strchr(host, ']');
        if (!host_end)
            return -1;
        after = host_end + 1;
    } else {
        host_end = host + strcspn(host, ":/");
        after = host_end;
    }
    if (copy_field(t->host, sizeof t->host, host, (size_t)(host_end - host)) != 0)
        return -1;
    const char *path = strchr(after, '/');
    if (!path)
        path = after + strlen(after);
    if (*after == ':') {
        if (parse_port(t->port, sizeof t->port, after + 1, (size_t)(path - after - 1)) != 0)
            return -1;
    } else if (after != path) {
        return -1;
    } else {
        strcpy(t->port, t->tls ? "443" : "80");
    }
    if (!*path)
        path = "/healthz";
    if (strpbrk(path, " \r\n"))
        return -1;
    return copy_field(t->path, sizeof t->path, path, strlen(path));
}

/* The defaults: the address and port the server's own environment gives. */
static int target_from_env(healthcheck_target *t)
{
    const char *bind = getenv("CELLAR_BIND");
    const char *port = getenv("CELLAR_PORT");
    const char *host = "127.0.0.1";
    if (bind && *bind && strcmp(bind, "0.0.0.0") != 0)
        host = strcmp(bind, "::") == 0 ? "::1" : bind;
    if (copy_field(t->host, sizeof t->host, host, strlen(host)) != 0)
        return -1;
    if (!port || !*port)
        port = "8080";
    if (parse_port(t->port, sizeof t->port, port, strlen(port)) != 0)
        return -1;
    strcpy(t->path, "/healthz");
    const char *cert = getenv("CELLAR_TLS_CERT");
    t->tls = cert && *cert;
    return 0;
}

int healthcheck_parse(healthcheck_target *t, int argc, char **argv, char *why, size_t why_size)
{
    memset(t, 0, sizeof *t);
    t->timeout_seconds = DEFAULT_TIMEOUT_SECONDS;
    if (target_from_env(t) != 0)
        return fail(why, why_size, "bad CELLAR_BIND or CELLAR_PORT");
    for (int i = 0; i < argc; i++) {
        const char *arg = argv[i];
        const char *value = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(arg, "--port") || !strcmp(arg, "--timeout")) {
            if (!value)
                return fail(why, why_size, "%s needs a value", arg);
            i++;
            if (!strcmp(arg, "--port")) {
                if (parse_port(t->port, sizeof t->port, value, strlen(value)) != 0)
                    return fail(why, why_size, "bad port '%s'", value);
                continue;
            }
            char *end = NULL;
            double s = strtod(value, &end);
            if (end == value || *end || !(s > 0 && s <= MAX_TIMEOUT_SECONDS))
                return fail(why, why_size, "bad timeout '%s'", value);
            t->timeout_seconds = s;
        } else if (!strncmp(arg, "http://", 7) || !strncmp(arg, "https://", 8)) {
            if (parse_url(t, arg) != 0)
                return fail(why, why_size, "bad URL '%s' (http[s]://HOST[:PORT][/PATH])", arg);
        } else {
            return fail(why, why_size, "unknown argument '%s' (URL, --port N, --timeout S)", arg);
        }
    }
    return 0;
}

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Waits until fd is ready for events or the deadline passes: 1 ready, 0
 * timed out, -1 failed. */
static int wait_ready(int fd, short events, double deadline)
{
    for (;;) {
        double left = deadline - now_seconds();
        if (left <= 0)
            return 0;
        struct pollfd p = {.fd = fd, .events = events};
        int n = poll(&p, 1, (int)(left * 1000) + 1);
        if (n > 0)
            return 1;
        if (n < 0 && errno != EINTR)
            return -1;
    }
}

/* A non-blocking socket connected to one of the host's addresses. */
static int connect_any(const healthcheck_target *t, double deadline, char *why, size_t why_size)
{
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
    struct addrinfo *addrs = NULL;
    int rc = getaddrinfo(t->host, t->port, &hints, &addrs);
    if (rc != 0)
        return fail(why, why_size, "%s: %s", t->host, gai_strerror(rc));
    int fd = -1;
    fail(why, why_size, "no address for %s", t->host);
    for (struct addrinfo *a = addrs; a && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) {
            fail(why, why_size, "socket: %s", strerror(errno));
            continue;
        }
        int err = 0;
        if (connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
            err = errno;
            if (err == EINPROGRESS) {
                int ready = wait_ready(fd, POLLOUT, deadline);
                socklen_t len = sizeof err;
                if (ready <= 0)
                    err = ready == 0 ? ETIMEDOUT : errno;
                else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
                    err = errno;
            }
        }
        if (err != 0) {
            fail(why, why_size, "connect: %s", strerror(err));
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(addrs);
    return fd;
}

/* A connection: the socket, and a TLS session over it for https. */
typedef struct channel {
    int fd;
    gnutls_session_t tls;
    gnutls_certificate_credentials_t creds;
} channel;

/* Waits for what a TLS call that returned GNUTLS_E_AGAIN needs. */
static int wait_tls(const channel *ch, double deadline)
{
    return wait_ready(ch->fd, gnutls_record_get_direction(ch->tls) ? POLLOUT : POLLIN, deadline);
}

/* The certificate is not checked: the check asks whether the server on
 * this machine answers, whatever name its certificate gives. */
static int tls_start(channel *ch, const healthcheck_target *t, double deadline, char *why,
                     size_t why_size)
{
    int rc = gnutls_certificate_allocate_credentials(&ch->creds);
    if (rc >= 0)
        rc = gnutls_init(&ch->tls, GNUTLS_CLIENT | GNUTLS_NONBLOCK);
    if (rc >= 0)
        rc = gnutls_set_default_priority(ch->tls);
    if (rc >= 0)
        rc = gnutls_credentials_set(ch->tls, GNUTLS_CRD_CERTIFICATE, ch->creds);
    if (rc < 0)
        return fail(why, why_size, "TLS: %s", gnutls_strerror(rc));
    if (!strchr(t->host, ':') && strspn(t->host, "0123456789.") != strlen(t->host))
        gnutls_server_name_set(ch->tls, GNUTLS_NAME_DNS, t->host, strlen(t->host));
    gnutls_transport_set_int(ch->tls, ch->fd);
    while ((rc = gnutls_handshake(ch->tls)) < 0) {
        if (rc != GNUTLS_E_AGAIN && rc != GNUTLS_E_INTERRUPTED)
            return fail(why, why_size, "TLS handshake: %s", gnutls_strerror(rc));
        if (wait_tls(ch, deadline) <= 0)
            return fail(why, why_size, "TLS handshake: no answer within %g s", t->timeout_seconds);
    }
    return 0;
}

static void channel_close(channel *ch)
{
    if (ch->tls)
        gnutls_deinit(ch->tls);
    if (ch->creds)
        gnutls_certificate_free_credentials(ch->creds);
    if (ch->fd >= 0)
        close(ch->fd);
}

static int send_all(const channel *ch, const char *data, size_t len, double deadline, char *why,
                    size_t why_size)
{
    while (len > 0) {
        int ready = ch->tls ? 1 : wait_ready(ch->fd, POLLOUT, deadline);
        if (ready <= 0)
            return fail(why, why_size, "send: %s", ready == 0 ? "timed out" : strerror(errno));
        ssize_t n;
        if (ch->tls) {
            n = gnutls_record_send(ch->tls, data, len);
            if (n == GNUTLS_E_AGAIN || n == GNUTLS_E_INTERRUPTED) {
                if (wait_tls(ch, deadline) <= 0)
                    return fail(why, why_size, "send: timed out");
                continue;
            }
            if (n < 0)
                return fail(why, why_size, "send: %s", gnutls_strerror((int)n));
        } else {
            n = send(ch->fd, data, len, MSG_NOSIGNAL);
            if (n < 0 && errno != EAGAIN && errno != EINTR)
                return fail(why, why_size, "send: %s", strerror(errno));
        }
        if (n > 0) {
            data += n;
            len -= (size_t)n;
        }
    }
    return 0;
}

/* One read of at most size bytes: the count, 0 at the end, -1 when it
 * failed or the deadline passed. */
static ssize_t receive(const channel *ch, char *buf, size_t size, double deadline)
{
    for (;;) {
        if (!ch->tls && wait_ready(ch->fd, POLLIN, deadline) <= 0)
            return -1;
        ssize_t n = ch->tls ? gnutls_record_recv(ch->tls, buf, size) : recv(ch->fd, buf, size, 0);
        if (n >= 0)
            return n;
        if (ch->tls) {
            if (n == GNUTLS_E_PREMATURE_TERMINATION)
                return 0;
            if (n != GNUTLS_E_AGAIN && n != GNUTLS_E_INTERRUPTED)
                return -1;
            if (!gnutls_record_check_pending(ch->tls) && wait_tls(ch, deadline) <= 0)
                return -1;
        } else if (errno != EAGAIN && errno != EINTR) {
            return -1;
        }
    }
}

/* Reads until the status line is complete (or the peer closes).  Returns
 * the bytes read, or -1 on a timeout or a failed read. */
static ssize_t read_status_line(const channel *ch, char *line, size_t size, double deadline)
{
    size_t got = 0;
    line[0] = '\0';
    while (got + 1 < size && !strstr(line, "\r\n")) {
        ssize_t n = receive(ch, line + got, size - 1 - got, deadline);
        if (n < 0)
            return -1;
        if (n == 0)
            break;
        got += (size_t)n;
        line[got] = '\0';
    }
    return (ssize_t)got;
}

/* "HTTP/1.x SSS ...": the status, or -1. */
static int parse_status(const char *line)
{
    if (strncmp(line, "HTTP/1.", 7) != 0 || !line[7] || line[8] != ' ')
        return -1;
    const char *s = line + 9;
    for (int i = 0; i < 3; i++)
        if (s[i] < '0' || s[i] > '9')
            return -1;
    if (s[3] != ' ' && s[3] != '\r')
        return -1;
    return (s[0] - '0') * 100 + (s[1] - '0') * 10 + (s[2] - '0');
}

/* HOST:PORT as a URL and a Host header write them ([an IPv6 address]). */
static void format_authority(const healthcheck_target *t, char *out, size_t size)
{
    int v6 = strchr(t->host, ':') != NULL;
    snprintf(out, size, "%s%s%s:%s", v6 ? "[" : "", t->host, v6 ? "]" : "", t->port);
}

int healthcheck_get(const healthcheck_target *t, char *why, size_t why_size)
{
    double deadline = now_seconds() + t->timeout_seconds;
    channel ch = {.fd = connect_any(t, deadline, why, why_size)};
    if (ch.fd < 0)
        return -1;
    int status = -1;
    if (t->tls && tls_start(&ch, t, deadline, why, why_size) != 0)
        goto done;
    char authority[sizeof t->host + sizeof t->port + 3];
    format_authority(t, authority, sizeof authority);
    char request[sizeof t->path + sizeof authority + 64];
    int len = snprintf(request, sizeof request,
                       "GET %s HTTP/1.0\r\nHost: %s\r\nUser-Agent: cellar-healthcheck\r\n\r\n",
                       t->path, authority);
    if (send_all(&ch, request, (size_t)len, deadline, why, why_size) != 0)
        goto done;
    char line[STATUS_LINE_MAX];
    ssize_t got = read_status_line(&ch, line, sizeof line, deadline);
    if (got < 0)
        fail(why, why_size, "no answer within %g s", t->timeout_seconds);
    else if (got == 0)
        fail(why, why_size, "closed without an answer");
    else if ((status = parse_status(line)) < 0)
        fail(why, why_size, "not an HTTP answer");
done:
    channel_close(&ch);
    return status;
}

int healthcheck_main(int argc, char **argv)
{
    healthcheck_target t;
    char why[512];
    if (healthcheck_parse(&t, argc, argv, why, sizeof why) != 0) {
        fprintf(stderr, "cellar --healthcheck: %s\n", why);
        return 1;
    }
    int status = healthcheck_get(&t, why, sizeof why);
    if (status == 200)
        return 0;
    if (status > 0)
        snprintf(why, sizeof why, "answered %d", status);
    char authority[sizeof t.host + sizeof t.port + 3];
    format_authority(&t, authority, sizeof authority);
    fprintf(stderr, "cellar --healthcheck: %s://%s%s: %s\n", t.tls ? "https" : "http", authority,
            t.path, why);
    return 1;
}
