/* `cellar --healthcheck`: asks a running cellar whether it is alive, for
 * container health checks (Dockerfile HEALTHCHECK, compose), so that an
 * image needs no curl.
 *
 *   cellar --healthcheck                 GET http://127.0.0.1:$CELLAR_PORT/healthz
 *   cellar --healthcheck --port N        GET http://127.0.0.1:N/healthz
 *   cellar --healthcheck URL             GET URL (http[s]://HOST[:PORT][/PATH])
 *   ... --timeout S                      give up after S seconds (default 3)
 *
 * Without a URL the host is CELLAR_BIND when that names one address (not
 * 0.0.0.0 or ::), else 127.0.0.1, the port is CELLAR_PORT (default 8080),
 * and the scheme https when CELLAR_TLS_CERT is set (the server's own
 * environment).  Over https the certificate is not checked: the question
 * is whether this machine's server answers. */
#ifndef CELLAR_HEALTHCHECK_H
#define CELLAR_HEALTHCHECK_H

#include <stddef.h>

/* Where and how long to ask. */
typedef struct healthcheck_target {
    char host[256];     /* a name or a numeric address, without brackets */
    char port[8];       /* decimal */
    char path[1024];    /* starts with '/' */
    double timeout_seconds;
    int tls;            /* https */
} healthcheck_target;

/* Fills t from the arguments after `--healthcheck` (argv[0] is the first
 * of them) and the environment.  Returns 0, or -1 with a one-line reason
 * in why. */
int healthcheck_parse(healthcheck_target *t, int argc, char **argv, char *why, size_t why_size);

/* One HTTP/1.0 GET of t, within its timeout.  Returns the status code the
 * server answered, or -1 with a one-line reason in why (refused, timed
 * out, not HTTP). */
int healthcheck_get(const healthcheck_target *t, char *why, size_t why_size);

/* The subcommand: exit status 0 when the answer is 200, else 1 with a
 * one-line reason on stderr. */
int healthcheck_main(int argc, char **argv);

#endif
