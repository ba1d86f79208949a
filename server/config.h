/* Command-line flags and CELLAR_* environment variables. */
#ifndef CELLAR_CONFIG_H
#define CELLAR_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define CONFIG_MAX_S3_ROOTS 8
#define CONFIG_MAX_REMOTES 64

typedef struct server_config {
    const char *root;               /* the local data root; NULL: only remote stores */
    int root_given;                 /* --root DIR (or CELLAR_ROOT) was given */
    const char *s3_roots[CONFIG_MAX_S3_ROOTS]; /* --root s3://bucket/prefix, in order */
    size_t n_s3_roots;
    const char *remotes[CONFIG_MAX_REMOTES];   /* --remote NAME=URL */
    size_t n_remotes;
    const char *s3_endpoint;        /* NULL: AWS's for the region */
    const char *s3_region;
    int s3_path_style;              /* -1: path style with an endpoint */
    const char *s3_credentials_file;
    const char *s3_profile;
    uint64_t remote_timeout_ms;
    unsigned remote_retries;
    double remote_recheck_seconds;
    size_t remote_cache_bytes;
    uint64_t remote_spill_bytes;    /* of remote bytes spilled to cache_dir */
    const char *bind;
    unsigned port;
    unsigned threads;
    uint64_t max_response_bytes;
    uint64_t max_body_bytes;
    size_t max_open_stores;
    size_t max_open_bytes;
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
    size_t hdf5_chunk_cache_bytes;
    uint64_t column_index_max_bytes;
    int access_log;
    double request_timeout_seconds; /* the watchdog's deadline; 0 = none */
    int probe;                      /* walk HDF5 files in a probe process first */
    int external_links_in_root;     /* HDF5 external links may lead anywhere in the root */
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
