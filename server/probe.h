/* The probe process: before libhdf5 sees a file version in the serving
 * process, a child process (this binary run as `cellar --probe-file FILE`)
 * walks it (storage/hdf5/h5_probe.h) under a deadline, a CPU-time limit
 * and a memory bound.  A child that crashes, hangs or grows past its bound
 * costs only itself: the file version is refused (storage/probe_cache.h
 * remembers it) and every other store keeps being served.
 *
 * Why a fresh process (fork + exec) rather than a fork of the server: the
 * server is multithreaded and another thread may hold libhdf5's global lock
 * at the moment of the fork; a forked child would inherit that lock held
 * and never get it.  Between fork and exec the child only calls
 * async-signal-safe functions. */
#ifndef CELLAR_PROBE_H
#define CELLAR_PROBE_H

#include <stdint.h>

#include "storage/probe_cache.h"

typedef struct probe_runner_config {
    double timeout_seconds;   /* wall clock from start to verdict */
    uint64_t memory_bytes;    /* resident memory bound */
    unsigned concurrency;     /* probes running at once (at least 1) */
} probe_runner_config;

typedef struct probe_runner probe_runner;

/* NULL when out of memory. */
probe_runner *probe_runner_new(const probe_runner_config *cfg);
void probe_runner_free(probe_runner *p);

/* probe_run_fn (storage/probe_cache.h): runs one probe of path, at most
 * cfg->concurrency at once (later ones wait), and waits for its verdict.
 * ctx is the probe_runner. */
void probe_runner_run(void *ctx, const char *path, const probe_reader *rd, probe_verdict *out);

/* Shutting down (ctx: the probe_runner): probes running are killed now
 * and later ones are not started (PROBE_NOT_RUN), so draining requests
 * never waits for a probe's deadline. */
void probe_runner_stop(void *ctx);

/* The child's side: walks path, prints one verdict line on stdout and
 * exits (never returns).  main() calls it for `cellar --probe-file FILE`. */
void probe_child_main(const char *path);

/* The child's side for a file the parent reads for it (`cellar
 * --probe-reader SIZE`, the reads on fd 3): walks it through
 * h5_open_reader, prints the verdict line and exits. */
void probe_child_main_reader(const char *size_text);

#endif
