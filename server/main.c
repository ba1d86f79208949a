/* cellar: serves AnnData, MuData and TreeData stores over HTTP. */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/config.h"
#include "server/control.h"
#include "server/healthcheck.h"
#include "server/http.h"
#include "server/metrics.h"
#include "server/probe.h"
#include "server/probe_heap.h"
#include "storage/budget.h"
#include "storage/chunk_cache.h"
#include "storage/hdf5/h5.h"
#include "storage/registry.h"
#include "storage/remote/remote_store.h"

/* Answers of a megabyte or so (a gene's column, a block of rows) are built
 * in fresh buffers request after request.  glibc would hand such a freed
 * buffer back to the kernel (trim, or munmap above its mmap threshold) and
 * the next answer would fault every page in again, zeroed: a third of the
 * CPU of a gene column went to page faults.  Keeping up to this much free
 * memory per arena avoids that; buffers larger than the mmap threshold still
 * go straight back, and the tree build trims explicitly. */
#define KEEP_FREE_BYTES (64 * 1024 * 1024)
#define MMAP_THRESHOLD_BYTES (32 * 1024 * 1024)

/* File versions whose probe verdict is remembered. */
#define PROBE_VERDICTS_KEPT 4096

/* The remote roots and mounts of cfg, with credentials from AWS_* or the
 * credentials file (anonymous when neither has them); NULL with *failed
 * 0 when there are none. */
static remote_roots *remote_setup(const server_config *cfg, int *failed)
{
    *failed = 0;
    if (!cfg->n_s3_roots && !cfg->n_remotes)
        return NULL;
    static char key[512], secret[512], token[4096];
    const char *ek = getenv("AWS_ACCESS_KEY_ID"), *es = getenv("AWS_SECRET_ACCESS_KEY");
    const char *et = getenv("AWS_SESSION_TOKEN");
    cellar_error err;
    cellar_error_clear(&err);
    if (ek && *ek) {
        snprintf(key, sizeof key, "%s", ek);
        snprintf(secret, sizeof secret, "%s", es ? es : "");
        snprintf(token, sizeof token, "%s", et ? et : "");
    } else {
        char home_file[1024] = "";
        const char *home = getenv("HOME");
        if (home)
            snprintf(home_file, sizeof home_file, "%s/.aws/credentials", home);
        const char *file = cfg->s3_credentials_file ? cfg->s3_credentials_file : home_file;
        int rc = file[0] ? remote_credentials_read(file, cfg->s3_profile ? cfg->s3_profile
                                                                         : "default",
                                                   key, secret, token, sizeof key, &err)
                         : CELLAR_ENOTFOUND;
        if (rc && (rc != CELLAR_ENOTFOUND || cfg->s3_credentials_file)) {
            fprintf(stderr, "cellar: %s\n", err.detail);
            *failed = 1;
            return NULL;
        }
        if (rc) {
            key[0] = secret[0] = token[0] = '\0';
            cellar_error_clear(&err);
        }
    }
    remote_roots_config rc = {
        .client = {.timeout_ms = (long)cfg->remote_timeout_ms,
                   .retries = (int)cfg->remote_retries,
                   .access_key = key,
                   .secret_key = secret,
                   .session_token = token,
                   .region = cfg->s3_region},
        .s3_endpoint = cfg->s3_endpoint,
        .path_style = cfg->s3_path_style,
        .recheck_seconds = cfg->remote_recheck_seconds,
        .cache_bytes = cfg->remote_cache_bytes,
    };
    remote_roots *r = remote_roots_new(&rc, &err);
    for (size_t i = 0; r && i < cfg->n_s3_roots && !err.code; i++)
        remote_roots_add_s3(r, cfg->s3_roots[i], &err);
    for (size_t i = 0; r && i < cfg->n_remotes && !err.code; i++)
        remote_roots_add_mount(r, cfg->remotes[i], &err);
    if (!r || err.code) {
        fprintf(stderr, "cellar: %s\n", err.detail);
        remote_roots_free(r);
        *failed = 1;
        return NULL;
    }
    if (cfg->cache_dir && cfg->remote_spill_bytes &&
        remote_cache_spill_to(remote_roots_cache(r), cfg->cache_dir,
                              (size_t)cfg->remote_spill_bytes) != 0)
        fprintf(stderr, "cellar: cannot spill remote bytes to %s; memory only\n", cfg->cache_dir);
    fprintf(stderr, "cellar: %zu S3 root(s), %zu remote store(s), %s\n", cfg->n_s3_roots,
            cfg->n_remotes, key[0] ? "signed requests" : "anonymous requests");
    return r;
}

#if defined(__SANITIZE_ADDRESS__)
/* Sanitizer builds: AddressSanitizer keeps up to 256 MB of freed memory in
 * its quarantine by default, resident, and gives the pages of its size
 * classes back to the system only every 5 s, where glibc's malloc returns
 * big blocks at once; both would count against the probe's resident bound
 * (valid files refused) and hide the server's own resident memory from the
 * tests that bound it (the malformed corpus: 20-40 MB of its peak).  Both
 * processes get the same small quarantine and prompt release, so a probe
 * and the server it vouches for run libhdf5 under the same allocator
 * (ASAN_OPTIONS still overrides). */
const char *__asan_default_options(void);
const char *__asan_default_options(void)
{
    return "quarantine_size_mb=16:allocator_release_to_os_interval_ms=100";
}
#endif

static void tune_malloc(void)
{
    mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES);
    mallopt(M_TRIM_THRESHOLD, KEEP_FREE_BYTES);
}

int main(int argc, char **argv)
{
    /* A probe process tunes the allocator as the server does, so that
     * libhdf5 runs on the same kind of heap as in the process it vouches for. */
    /* ... and guards its blocks, so that libhdf5 straying out of one
     * faults here instead of passing unnoticed (server/probe_heap.h). */
    if (argc == 3 && strcmp(argv[1], "--probe-file") == 0) {
        tune_malloc();
        probe_heap_guard();
        probe_child_main(argv[2]); /* does not return */
    }
    if (argc == 3 && strcmp(argv[1], "--probe-reader") == 0) {
        tune_malloc();
        probe_heap_guard();
        probe_child_main_reader(argv[2]); /* does not return */
    }
    if (argc >= 2 && strcmp(argv[1], "--healthcheck") == 0)
        return healthcheck_main(argc - 2, argv + 2);
    server_config cfg;
    int parsed = config_parse(&cfg, argc, argv);
    if (parsed != 0)
        return parsed > 0 ? 0 : 2;
    control_block_signals();
    setvbuf(stderr, NULL, _IOLBF, 0);
    h5_library_init();
    remote_library_init();
    tune_malloc();
    chunk_cache_set_limit(chunk_cache_of(CHUNK_CACHE_ZARR), cfg.zarr_chunk_cache_bytes);
    chunk_cache_set_limit(chunk_cache_of(CHUNK_CACHE_HDF5), cfg.hdf5_chunk_cache_bytes);
    budget_set_whole(cfg.max_response_bytes);

    int status = 1;
    registry *reg = NULL;
    metrics *m = NULL;
    http_server *http = NULL;
    probe_runner *prober = NULL;
    probe_cache *probes = NULL;
    remote_roots *remote = NULL;
    cellar_error err;
    cellar_error_clear(&err);

    if (cfg.probe) {
        probe_runner_config pcfg = {
            .timeout_seconds = cfg.probe_timeout_seconds,
            .memory_bytes = cfg.probe_memory_bytes,
            .concurrency = cfg.probe_concurrency,
        };
        prober = probe_runner_new(&pcfg);
        probes = prober ? probe_cache_new(probe_runner_run, prober, PROBE_VERDICTS_KEPT,
                                          cfg.probe_wait_seconds)
                        : NULL;
        if (!probes) {
            fprintf(stderr, "cellar: out of memory\n");
            goto done;
        }
    }
    int remote_failed = 0;
    remote = remote_setup(&cfg, &remote_failed);
    if (remote_failed)
        goto done;
    registry_config rcfg = {
        .root = cfg.root,
        .remote = remote,
        .max_open_stores = cfg.max_open_stores,
        .max_open_bytes = cfg.max_open_bytes,
        .idle_seconds = cfg.idle_seconds,
        .probes = probes,
        .external_links_in_root = cfg.external_links_in_root,
    };
    reg = registry_new(&rcfg, &err);
    if (!reg) {
        fprintf(stderr, "cellar: %s\n", err.detail);
        goto done;
    }
    m = metrics_new();
    if (!m) {
        fprintf(stderr, "cellar: out of memory\n");
        goto done;
    }
    http = http_start(&cfg, reg, m, &err);
    if (!http) {
        fprintf(stderr, "cellar: %s\n", err.detail);
        goto done;
    }
    if (probes)
        probe_cache_set_submit(probes, http_submit_background, http);
    fprintf(stderr, "cellar %s: serving %s on %s://%s:%u with %u threads\n", CELLAR_VERSION,
            cfg.root ? cfg.root : cfg.n_s3_roots ? cfg.s3_roots[0] : "-", cfg.tls_cert ? "https" : "http", cfg.bind, cfg.port, cfg.threads);
    control_config ccfg = {
        .reg = reg,
        .http = http,
        .idle_seconds = cfg.idle_seconds,
        .drain_seconds = cfg.drain_seconds,
        .on_stop = prober ? probe_runner_stop : NULL,
        .on_stop_ctx = prober,
    };
    status = control_run(&ccfg) == 0 ? 0 : 1;
    http = NULL; /* stopped and freed by the control loop */
done:
    if (http)
        http_drain_and_stop(http, 0);
    registry_free(reg);
    remote_roots_free(remote);
    probe_cache_free(probes);
    probe_runner_free(prober);
    metrics_free(m);
    return status;
}
