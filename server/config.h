/* Command-line flags and CELLAR_* environment variables. */
#ifndef CELLAR_CONFIG_H
#define CELLAR_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct server_config {
    const char *root;
    const char *bind;
    unsigned port;
    unsigned threads;
    uint64_t max_response_bytes;
    uint64_t max_body_bytes;
    size_t max_open_stores;
    double idle_seconds;
    double drain_seconds;
    const char *cors_origin;        /* comma-separated origins, or * */
    const char *auth_file;          /* bearer tokens and their stores; NULL = open */
    const char *metrics_token_file; /* tokens for /metrics; NULL = open */
    const char *tls_cert;           /* PEM certificate chain; NULL = plain HTTP */
    const char *tls_key;            /* its PEM private key */
    const char *cache_dir;
    size_t answer_cache_bytes;
    size_t zarr_chunk_cache_bytes;
    uint64_t column_index_max_bytes;
    int access_log;
    double request_timeout_seconds; /* the watchdog's deadline; 0 = none */
    int probe;                      /* walk HDF5 files in a probe process first */
    double probe_timeout_seconds;
    uint64_t probe_memory_bytes;
    unsigned probe_concurrency;
    double probe_wait_seconds;
} server_config;

/* Fills cfg from defaults, then the environment (CELLAR_ROOT, CELLAR_PORT,
 * ...), then argv.  Returns 0 to run, 1 when --help or --version printed
 * and the program should exit 0, -1 on a bad flag (message printed). Strings
 * point into argv or the environment. */
int config_parse(server_config *cfg, int argc, char **argv);

/* The --help text. */
void config_usage(FILE *out);

#endif
