/* The HTTP server: the only file that sees libmicrohttpd.
 *
 * Every request gets an arena freed when libmicrohttpd reports it complete,
 * is routed through server/router.c, answered by an api/ handler or by the
 * service routes here, and leaves one access-log line.  Repeated GETs of an
 * unchanged store version are answered from the answer cache
 * (server/answer_cache.h) without running their handler. */
#ifndef CELLAR_HTTP_H
#define CELLAR_HTTP_H

#include "common/error.h"
#include "server/config.h"
#include "server/metrics.h"
#include "storage/registry.h"

typedef struct http_server http_server;

/* Starts listening on cfg->bind:cfg->port with a pool of cfg->threads
 * threads. cfg, reg and m must outlive the server. */
http_server *http_start(const server_config *cfg, registry *reg, metrics *m,
                        cellar_error *err);

/* Stops accepting connections, waits up to drain_seconds for requests in
 * flight, then stops and frees the server.  From its first moment /readyz
 * answers 503 and every answer carries Connection: close, so clients on
 * kept-alive connections (a balancer's pool) leave too.  Returns 0; or,
 * when requests are still running past drain_seconds (0: no deadline, wait
 * for them) the number of them, with the server left as it is: a thread
 * stuck inside libhdf5 never returns, and stopping the daemons would wait
 * for it for good, so the caller ends the process instead. */
unsigned http_drain_and_stop(http_server *h, double drain_seconds);

/* Runs fn(arg) on a background worker; 0 when accepted, nonzero when
 * refused.  Called from request threads. */
typedef int (*http_background_fn)(void *ctx, void (*fn)(void *), void *arg);

/* Where handlers' background jobs go (api_config.submit_background): the
 * control loop sets it once running; until then, or with fn NULL, jobs are
 * refused and handlers do without. */
void http_set_background(http_server *h, http_background_fn fn, void *ctx);

/* Logs the requests running past --request-timeout-seconds (once each);
 * the control loop calls it every second.  Returns how many there are. */
size_t http_watchdog_check(http_server *h);

/* Hands fn(arg) to the background worker set above (ctx: the
 * http_server); nonzero when there is none (not running yet, or shutting
 * down).  The api_config.submit_background of handlers. */
int http_submit_background(void *ctx, void (*fn)(void *), void *arg);

/* Writes out the buffered access log (the control loop calls it every 0.1 s). */
void http_flush_log(http_server *h);

/* Reads --auth-file, --metrics-token-file and the TLS certificate and key
 * again (SIGHUP); a file that does not load leaves what it held in use.
 * Logs what it did. */
void http_reload_credentials(http_server *h);

/* Drops every kept answer (SIGHUP). */
void http_drop_answers(http_server *h);

/* Requests being answered right now. */
unsigned http_in_flight(http_server *h);

#endif
