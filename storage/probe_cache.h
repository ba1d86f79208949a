/* Probe verdicts per file version: before the serving process opens an
 * HDF5 file version with libhdf5, a disposable probe process walks it
 * (storage/hdf5/h5_probe.h; run by server/probe.c).  This module remembers
 * each version's verdict, so a version is probed once, and makes concurrent
 * first requests for one version wait for a single probe.
 *
 * A version is a path with its identity (device, inode, size, mtime, ctime); a
 * replaced or rewritten file is a new version and is probed again.
 * Thread-safe. */
#ifndef CELLAR_PROBE_CACHE_H
#define CELLAR_PROBE_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

typedef struct probe_file_id {
    uint64_t dev, ino, size;
    int64_t mtime_sec;
    long mtime_nsec;
    int64_t ctime_sec; /* a rewrite that puts size and mtime back still moves it */
    long ctime_nsec;
} probe_file_id;

typedef enum probe_outcome {
    PROBE_OK = 0,        /* walked: safe to open */
    PROBE_UNREADABLE,    /* libhdf5 cleanly refused the file (not HDF5, truncated) */
    PROBE_CRASHED,       /* the probe died of a signal or exited without a verdict */
    PROBE_TIMED_OUT,     /* killed at its deadline (wall clock or CPU time) */
    PROBE_OUT_OF_MEMORY, /* killed over its memory bound, or ran out of memory */
    PROBE_NOT_RUN,       /* could not be started (no process, shutting down): not remembered */
    PROBE_OUTCOMES
} probe_outcome;

/* "ok", "unreadable", "crashed", "timed_out", "out_of_memory", "not_run". */
const char *probe_outcome_name(probe_outcome o);

typedef struct probe_verdict {
    probe_outcome outcome;
    int code;             /* PROBE_NOT_RUN: the error to answer (0: CELLAR_EUNAVAILABLE) */
    char detail[CELLAR_ERROR_DETAIL_MAX]; /* why, when not ok */
    probe_file_id walked; /* what the probe saw (OK, UNREADABLE); else zero */
    double seconds;       /* how long it took */
    /* OK: the other files the file's elements name (h5_probe_report's
     * targets), malloc'd, or NULL when none; taken over by the cache. */
    char *targets;
} probe_verdict;

/* A file version the probe reads through the serving process rather than
 * from a path (a remote object): read fills [off, off + n) of its size
 * bytes (0, or a cellar code with err filled); free releases ctx. */
typedef struct probe_reader {
    void *ctx;
    uint64_t size;
    int (*read)(void *ctx, uint64_t off, size_t n, void *buf, cellar_error *err);
    void (*free)(void *ctx);
} probe_reader;

/* Probes the file at path (a canonical path inside the root), or the one
 * rd reads when rd is not NULL (path then only names it), and fills *out.
 * Blocks until the verdict is in. */
typedef void (*probe_run_fn)(void *ctx, const char *path, const probe_reader *rd,
                             probe_verdict *out);

/* Runs fn(arg) on a background worker; 0 when accepted (fn then runs
 * exactly once), nonzero when refused. */
typedef int (*probe_submit_fn)(void *ctx, void (*fn)(void *), void *arg);

typedef struct probe_cache probe_cache;

/* max_entries bounds the versions remembered (the oldest go first).
 * wait_seconds: how long a request waits for a probe still running before
 * it is answered 503 (the probe goes on; a request thread is not held for
 * a probe's whole deadline).  NULL when out of memory. */
probe_cache *probe_cache_new(probe_run_fn run, void *run_ctx, size_t max_entries,
                             double wait_seconds);

/* Where probes run (libuv's work queue in the server).  Until set, or when
 * it refuses, a probe runs on the calling thread, which then waits for it
 * whole. */
void probe_cache_set_submit(probe_cache *pc, probe_submit_fn submit, void *ctx);

/* Frees pc; probes still running must have finished (the server's
 * background work is drained before). */
void probe_cache_free(probe_cache *pc);

/* 0 when the version `id` of the file at path may be opened with libhdf5;
 * probes it first when its verdict is not known (one probe per version,
 * concurrent callers wait for it).  Otherwise the error to answer, naming
 * the store `name`: CELLAR_EFORMAT for a file the probe found unsafe
 * ("could not be read safely: ...") or unreadable (the library's reason),
 * remembered for the version and logged once; CELLAR_EUNAVAILABLE when the
 * probe is still running after wait_seconds, when no probe could run or
 * when the file changed while probed (not remembered). */
int probe_cache_check(probe_cache *pc, const char *name, const char *path,
                      const probe_file_id *id, cellar_error *err);

/* probe_cache_check of the version id of a file read through rd (taken
 * over: freed with its verdict, or at once when a probe of the version
 * ran or runs already); path is the version's name in the cache.  A
 * probe that could not read (a remote failing) answers that failure,
 * not remembered. */
int probe_cache_check_reader(probe_cache *pc, const char *name, const char *path,
                             const probe_file_id *id, const probe_reader *rd,
                             cellar_error *err);

/* probe_cache_check that also gives, when the version may be opened,
 * the names of the other files its elements name as the probe reported
 * them (probe_verdict.targets) in *targets: malloc'd (the caller frees),
 * or NULL when none. */
int probe_cache_check_targets(probe_cache *pc, const char *name, const char *path,
                              const probe_file_id *id, char **targets, cellar_error *err);

typedef struct probe_stats {
    uint64_t outcomes[PROBE_OUTCOMES]; /* probes run, by outcome */
    double seconds_sum, seconds_max;
    size_t remembered_unsafe;          /* versions remembered as not ok */
} probe_stats;

void probe_cache_get_stats(probe_cache *pc, probe_stats *out);

#endif
