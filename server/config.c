#include "server/config.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef enum { OPT_STR, OPT_UINT, OPT_U64, OPT_SIZE, OPT_DOUBLE, OPT_BOOL, OPT_ROOT, OPT_REMOTE,
               OPT_TRISTATE } opt_type;

typedef struct option_def {
    const char *flag;   /* --flag */
    const char *env;    /* CELLAR_FLAG */
    opt_type type;
    size_t offset;
    const char *help;
} option_def;

#define OPT(flag, env, type, field, help) \
    {flag, env, type, offsetof(server_config, field), help}

static const option_def options[] = {
    OPT("--root", "CELLAR_ROOT", OPT_ROOT, root,
        "data root: every store under it is served (default .); s3://bucket/prefix serves a bucket's; may be given again"),
    OPT("--remote", "CELLAR_REMOTE", OPT_REMOTE, remotes,
        "NAME=URL: one store at an http(s):// or s3:// URL, served as NAME; may be given again (env: blank-separated)"),
    OPT("--s3-endpoint", "AWS_ENDPOINT_URL_S3", OPT_STR, s3_endpoint,
        "S3 endpoint URL, e.g. http://127.0.0.1:8333 (default: AWS's for the region; also AWS_ENDPOINT_URL)"),
    OPT("--s3-region", "AWS_REGION", OPT_STR, s3_region, "S3 region for signing (default us-east-1; also AWS_DEFAULT_REGION)"),
    OPT("--s3-path-style", "CELLAR_S3_PATH_STYLE", OPT_TRISTATE, s3_path_style,
        "1: ENDPOINT/BUCKET/KEY, 0: BUCKET.HOST/KEY (default: 1 with --s3-endpoint, else 0)"),
    OPT("--s3-credentials-file", "AWS_SHARED_CREDENTIALS_FILE", OPT_STR, s3_credentials_file,
        "AWS credentials file, read when AWS_ACCESS_KEY_ID is not set (default ~/.aws/credentials; none: anonymous)"),
    OPT("--s3-profile", "AWS_PROFILE", OPT_STR, s3_profile, "profile of the credentials file (default default)"),
    OPT("--remote-timeout-ms", "CELLAR_REMOTE_TIMEOUT_MS", OPT_U64, remote_timeout_ms,
        "a remote read, retries included, past this is 504 (default 10000)"),
    OPT("--remote-retries", "CELLAR_REMOTE_RETRIES", OPT_UINT, remote_retries,
        "tries again of a remote GET that failed transiently, with backoff (default 2)"),
    OPT("--remote-recheck-seconds", "CELLAR_REMOTE_RECHECK_SECONDS", OPT_DOUBLE, remote_recheck_seconds,
        "a remote store's identity (ETags) is fetched again at most this often (default 10)"),
    OPT("--remote-cache-bytes", "CELLAR_REMOTE_CACHE_BYTES", OPT_SIZE, remote_cache_bytes,
        "memory for bytes read from remote stores (default 67108864)"),
    OPT("--remote-spill-bytes", "CELLAR_REMOTE_SPILL_BYTES", OPT_U64, remote_spill_bytes,
        "with --cache-dir: remote bytes pushed out of memory kept in files there, up to this (default 1073741824, 0 = none)"),
    OPT("--bind", "CELLAR_BIND", OPT_STR, bind, "address to listen on (default 127.0.0.1)"),
    OPT("--port", "CELLAR_PORT", OPT_UINT, port, "TCP port (default 8080)"),
    OPT("--threads", "CELLAR_THREADS", OPT_UINT, threads, "request threads (default: number of cores)"),
    OPT("--max-response-bytes", "CELLAR_MAX_RESPONSE_BYTES", OPT_U64, max_response_bytes,
        "largest answer, 413 beyond (default 268435456)"),
    OPT("--max-body-bytes", "CELLAR_MAX_BODY_BYTES", OPT_U64, max_body_bytes,
        "largest POST body (default 16777216)"),
    OPT("--max-open-stores", "CELLAR_MAX_OPEN_STORES", OPT_SIZE, max_open_stores,
        "store handles kept open, least recently used closed first (default 64)"),
    OPT("--max-open-bytes", "CELLAR_MAX_OPEN_BYTES", OPT_SIZE, max_open_bytes,
        "bytes of indexes and views open stores may hold; idle stores beyond it "
        "closed, least recently used first (default 536870912; 0: no bound)"),
    OPT("--idle-seconds", "CELLAR_IDLE_SECONDS", OPT_DOUBLE, idle_seconds,
        "close a store unused this long (default 300)"),
    OPT("--drain-seconds", "CELLAR_DRAIN_SECONDS", OPT_DOUBLE, drain_seconds,
        "on SIGTERM, wait this long for requests in flight (default 30)"),
    OPT("--cors-origin", "CELLAR_CORS_ORIGIN", OPT_STR, cors_origin,
        "origins browsers may read answers from, comma-separated, or * (default *)"),
    OPT("--auth-file", "CELLAR_AUTH_FILE", OPT_STR, auth_file,
        "bearer tokens as SHA-256 hashes, each with the stores it may read; reread on SIGHUP (default: open)"),
    OPT("--metrics-token-file", "CELLAR_METRICS_TOKEN_FILE", OPT_STR, metrics_token_file,
        "SHA-256 hashes of the tokens that may read /metrics; reread on SIGHUP (default: open)"),
    OPT("--tls-cert", "CELLAR_TLS_CERT", OPT_STR, tls_cert,
        "PEM certificate (chain) to serve HTTPS with; reread on SIGHUP (default: plain HTTP)"),
    OPT("--tls-key", "CELLAR_TLS_KEY", OPT_STR, tls_key,
        "PEM private key of --tls-cert (unencrypted)"),
    OPT("--cache-dir", "CELLAR_CACHE_DIR", OPT_STR, cache_dir,
        "where derived indexes are persisted (default: none)"),
    OPT("--column-index-max-bytes", "CELLAR_COLUMN_INDEX_MAX_BYTES", OPT_U64, column_index_max_bytes,
        "largest column index of a CSR matrix to build; larger ones scan (default 0 = any)"),
    OPT("--zarr-chunk-cache-bytes", "CELLAR_ZARR_CHUNK_CACHE_BYTES", OPT_SIZE, zarr_chunk_cache_bytes,
        "memory for decoded zarr chunks that slices read again, 0 = off (default 67108864)"),
    OPT("--hdf5-chunk-cache-bytes", "CELLAR_HDF5_CHUNK_CACHE_BYTES", OPT_SIZE, hdf5_chunk_cache_bytes,
        "memory for HDF5 chunks cellar decoded (deflate, shuffle, LZF) that slices read again, 0 = off (default 67108864)"),
    OPT("--answer-cache-bytes", "CELLAR_ANSWER_CACHE_BYTES", OPT_SIZE, answer_cache_bytes,
        "memory for finished answers repeated requests reuse, 0 = off (default 33554432)"),
    OPT("--request-timeout-seconds", "CELLAR_REQUEST_TIMEOUT_SECONDS", OPT_DOUBLE, request_timeout_seconds,
        "a request running longer is logged and answered 503; /readyz fails while libhdf5 is stuck that long (default 60, 0 = none)"),
    OPT("--probe", "CELLAR_PROBE", OPT_BOOL, probe,
        "walk every HDF5 file version in a disposable process before opening it: 1 or 0 (default 1)"),
    OPT("--probe-timeout-seconds", "CELLAR_PROBE_TIMEOUT_SECONDS", OPT_DOUBLE, probe_timeout_seconds,
        "a probe running longer is killed and its file refused (default 60)"),
    OPT("--probe-memory-bytes", "CELLAR_PROBE_MEMORY_BYTES", OPT_U64, probe_memory_bytes,
        "a probe using more memory is killed and its file refused (default 268435456)"),
    OPT("--probe-wait-seconds", "CELLAR_PROBE_WAIT_SECONDS", OPT_DOUBLE, probe_wait_seconds,
        "a first request waits this long for its probe, then 503 with Retry-After (default 10)"),
    OPT("--probe-concurrency", "CELLAR_PROBE_CONCURRENCY", OPT_UINT, probe_concurrency,
        "probes running at once (default 2)"),
    OPT("--external-links-in-root", "CELLAR_EXTERNAL_LINKS_IN_ROOT", OPT_BOOL, external_links_in_root,
        "follow HDF5 external links to files anywhere in the root, not only in the store's folder: 1 or 0 (default 0)"),
    OPT("--access-log", "CELLAR_ACCESS_LOG", OPT_BOOL, access_log,
        "one line per request on stderr, written every 0.1 s: 1 or 0 (default 1)"),
};

#define N_OPTIONS (sizeof options / sizeof options[0])

void config_usage(FILE *out)
{
    fprintf(out, "usage: cellar [flags]\n\n"
                 "Serves the AnnData, MuData and TreeData stores under a folder over HTTP.\n"
                 "Every flag can also be given as the environment variable shown.\n\n");
    for (size_t i = 0; i < N_OPTIONS; i++)
        fprintf(out, "  %-22s %-28s %s\n", options[i].flag, options[i].env, options[i].help);
    fprintf(out, "  %-22s %-28s %s\n", "--help", "", "this text");
    fprintf(out, "  %-22s %-28s %s\n", "--version", "", "print the version");
    fprintf(out, "\n  cellar --healthcheck [URL | --port N] [--timeout S]\n"
                 "      GETs /healthz of a running cellar (127.0.0.1, CELLAR_PORT): exit 0 on 200, else 1\n");
}

/* Longest duration a seconds flag takes (about 31 years). */
#define CONFIG_MAX_SECONDS 1e9

/* An unsigned flag: decimal digits only (no sign, blanks or hex, which
 * strtoull would take: " -1" wraps to 2^64 - 1), checked against its
 * field's width. */
static int set_unsigned(char *base, opt_type type, const char *value)
{
    uint64_t v = 0;
    if (!*value)
        return -1;
    for (const char *p = value; *p; p++) {
        if (*p < '0' || *p > '9')
            return -1;
        unsigned digit = (unsigned)(*p - '0');
        if (v > (UINT64_MAX - digit) / 10)
            return -1;
        v = v * 10 + digit;
    }
    if (type == OPT_UINT) {
        if (v > UINT_MAX)
            return -1;
        *(unsigned *)(void *)base = (unsigned)v;
    } else if (type == OPT_SIZE) {
        if (v > SIZE_MAX)
            return -1;
        *(size_t *)(void *)base = (size_t)v;
    } else {
        *(uint64_t *)(void *)base = v;
    }
    return 0;
}

static int set_value(server_config *cfg, const option_def *o, const char *value)
{
    char *base = (char *)cfg + o->offset;
    char *end = NULL;
    errno = 0;
    switch (o->type) {
    case OPT_STR:
        *(const char **)base = value;
        return 0;
    case OPT_ROOT:
        if (strncmp(value, "s3://", 5) != 0) {
            cfg->root = value;
            cfg->root_given = 1;
            return 0;
        }
        if (cfg->n_s3_roots == CONFIG_MAX_S3_ROOTS)
            return -1;
        cfg->s3_roots[cfg->n_s3_roots++] = value;
        return 0;
    case OPT_REMOTE:
        if (cfg->n_remotes == CONFIG_MAX_REMOTES || !strchr(value, '='))
            return -1;
        cfg->remotes[cfg->n_remotes++] = value;
        return 0;
    case OPT_TRISTATE:
        if (!strcmp(value, "1") || !strcmp(value, "0")) {
            *(int *)base = value[0] - '0';
            return 0;
        }
        return -1;
    case OPT_BOOL:
        if (!strcmp(value, "1") || !strcmp(value, "true") || !strcmp(value, "yes"))
            *(int *)base = 1;
        else if (!strcmp(value, "0") || !strcmp(value, "false") || !strcmp(value, "no"))
            *(int *)base = 0;
        else
            return -1;
        return 0;
    case OPT_DOUBLE: {
        /* Seconds: finite and at most ~31 years, so that every conversion
         * to milliseconds or a time_t stays in range (inf or 1e999 would
         * not). */
        double d = strtod(value, &end);
        if (errno || end == value || *end || !(d >= 0 && d <= CONFIG_MAX_SECONDS))
            return -1;
        *(double *)base = d;
        return 0;
    }
    default:
        return set_unsigned(base, o->type, value);
    }
}

static void config_defaults(server_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->root = ".";
    cfg->bind = "127.0.0.1";
    cfg->port = 8080;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    cfg->threads = cores > 0 ? (unsigned)cores : 2;
    cfg->max_response_bytes = 256ull << 20;
    cfg->max_body_bytes = 16ull << 20;
    cfg->max_open_stores = 64;
    cfg->max_open_bytes = 512u << 20;
    cfg->idle_seconds = 300;
    cfg->drain_seconds = 30;
    cfg->cors_origin = "*";
    cfg->cache_dir = NULL;
    cfg->answer_cache_bytes = 32u << 20;
    cfg->zarr_chunk_cache_bytes = 64u << 20;
    cfg->hdf5_chunk_cache_bytes = 64u << 20;
    cfg->access_log = 1;
    cfg->request_timeout_seconds = 60;
    cfg->probe = 1;
    cfg->probe_timeout_seconds = 60;
    cfg->probe_memory_bytes = 256ull << 20;
    cfg->probe_concurrency = 2;
    cfg->probe_wait_seconds = 10;
    cfg->s3_path_style = -1;
    cfg->remote_timeout_ms = 10000;
    cfg->remote_retries = 2;
    cfg->remote_recheck_seconds = 10;
    cfg->remote_cache_bytes = 64u << 20;
    cfg->remote_spill_bytes = 1ull << 30;
}

/* CELLAR_REMOTE: mounts separated by blanks (copied into one buffer that
 * lives as long as the process, since cfg points into it). */
static int env_remotes(server_config *cfg, const char *v)
{
    static char copy[16384];
    if (strlen(v) >= sizeof copy)
        return -1;
    strcpy(copy, v);
    for (char *save = NULL, *t = strtok_r(copy, " \t\n", &save); t;
         t = strtok_r(NULL, " \t\n", &save)) {
        if (cfg->n_remotes == CONFIG_MAX_REMOTES || !strchr(t, '='))
            return -1;
        cfg->remotes[cfg->n_remotes++] = t;
    }
    return 0;
}

int config_parse(server_config *cfg, int argc, char **argv)
{
    config_defaults(cfg);
    for (size_t i = 0; i < N_OPTIONS; i++) {
        const char *v = getenv(options[i].env);
        if (v && *v && options[i].type == OPT_REMOTE) {
            if (env_remotes(cfg, v) != 0) {
                fprintf(stderr, "cellar: bad value '%s' for %s\n", v, options[i].env);
                return -1;
            }
            continue;
        }
        if (!v && !strcmp(options[i].env, "AWS_ENDPOINT_URL_S3"))
            v = getenv("AWS_ENDPOINT_URL");
        if (!v && !strcmp(options[i].env, "AWS_REGION"))
            v = getenv("AWS_DEFAULT_REGION");
        if (v && *v && set_value(cfg, &options[i], v) != 0) {
            fprintf(stderr, "cellar: bad value '%s' for %s\n", v, options[i].env);
            return -1;
        }
    }
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (!strcmp(arg, "--help") || !strcmp(arg, "-h")) {
            config_usage(stdout);
            return 1;
        }
        if (!strcmp(arg, "--version")) {
            printf("cellar %s\n", CELLAR_VERSION);
            return 1;
        }
        const char *value = NULL;
        const char *eq = strchr(arg, '=');
        size_t flag_len = eq ? (size_t)(eq - arg) : strlen(arg);
        const option_def *o = NULL;
        for (size_t k = 0; k < N_OPTIONS; k++)
            if (strlen(options[k].flag) == flag_len && !strncmp(options[k].flag, arg, flag_len))
                o = &options[k];
        if (!o) {
            fprintf(stderr, "cellar: unknown flag '%s' (see --help)\n", arg);
            return -1;
        }
        if (eq) {
            value = eq + 1;
        } else if (i + 1 < argc) {
            value = argv[++i];
        } else {
            fprintf(stderr, "cellar: %s needs a value\n", o->flag);
            return -1;
        }
        if (set_value(cfg, o, value) != 0) {
            fprintf(stderr, "cellar: bad value '%s' for %s\n", value, o->flag);
            return -1;
        }
    }
    if (cfg->n_s3_roots && !cfg->root_given)
        cfg->root = NULL; /* only the bucket's stores, unless a local root is given too */
    if (cfg->threads == 0)
        cfg->threads = 1;
    if (cfg->probe_concurrency == 0)
        cfg->probe_concurrency = 1;
    if (!cfg->tls_cert != !cfg->tls_key) {
        fprintf(stderr, "cellar: --tls-cert and --tls-key go together\n");
        return -1;
    }
    if (cfg->port > 65535) {
        fprintf(stderr, "cellar: --port must be at most 65535\n");
        return -1;
    }
    return 0;
}
