/* The control thread: a libuv loop that owns signals (SIGTERM and SIGINT
 * drain and stop, SIGHUP drops cached store handles and rereads the token
 * files and the TLS certificate) and timers (idle store
 * eviction). Request threads never see these signals. */
#ifndef CELLAR_CONTROL_H
#define CELLAR_CONTROL_H

#include "server/http.h"
#include "storage/registry.h"

typedef struct control_config {
    registry *reg;
    http_server *http;
    double idle_seconds;
    double drain_seconds;
    /* Called on the loop thread when a stop signal arrives, before the
     * drain (the probes stop then); NULL for none. */
    void (*on_stop)(void *ctx);
    void *on_stop_ctx;
} control_config;

/* Blocks SIGTERM, SIGINT, SIGHUP and SIGPIPE in the calling thread, so
 * threads started after it (libmicrohttpd's pool) inherit the mask. Call
 * first thing in main. */
void control_block_signals(void);

/* Runs the control loop on its own thread and returns when a stop signal
 * has drained and stopped the HTTP server. Returns 0 on a clean stop. */
int control_run(const control_config *cfg);

#endif
