#include "storage/probe_cache.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct probe_entry {
    struct probe_entry *next; /* newest first */
    char *path;
    char *name;               /* the store's name, for the log */
    probe_file_id id;
    int done;                 /* verdict in; else a probe is running */
    int transient;            /* PROBE_NOT_RUN: for the caller that started it only */
    int has_reader;
    probe_reader rd;          /* a file read through the server (owned) */
    int code;                 /* PROBE_NOT_RUN: what to answer */
    probe_outcome outcome;
    char detail[CELLAR_ERROR_DETAIL_MAX];
    char *targets;            /* PROBE_OK: probe_verdict.targets */
} probe_entry;

struct probe_cache {
    probe_run_fn run;
    void *run_ctx;
    size_t max_entries;
    double wait_seconds;
    probe_submit_fn submit;   /* guarded by lock */
    void *submit_ctx;
    pthread_mutex_t lock;
    pthread_cond_t verdict_in;
    probe_entry *entries;
    size_t count;
    probe_stats stats;
};

const char *probe_outcome_name(probe_outcome o)
{
    switch (o) {
    case PROBE_OK: return "ok";
    case PROBE_UNREADABLE: return "unreadable";
    case PROBE_CRASHED: return "crashed";
    case PROBE_TIMED_OUT: return "timed_out";
    case PROBE_OUT_OF_MEMORY: return "out_of_memory";
    case PROBE_NOT_RUN: return "not_run";
    default: return "unknown";
    }
}

probe_cache *probe_cache_new(probe_run_fn run, void *run_ctx, size_t max_entries,
                             double wait_seconds)
{
    probe_cache *pc = calloc(1, sizeof *pc);
    if (!pc)
        return NULL;
    pc->run = run;
    pc->run_ctx = run_ctx;
    pc->max_entries = max_entries ? max_entries : 1;
    pc->wait_seconds = wait_seconds;
    pthread_mutex_init(&pc->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&pc->verdict_in, &ca);
    pthread_condattr_destroy(&ca);
    return pc;
}

void probe_cache_set_submit(probe_cache *pc, probe_submit_fn submit, void *ctx)
{
    pthread_mutex_lock(&pc->lock);
    pc->submit = submit;
    pc->submit_ctx = ctx;
    pthread_mutex_unlock(&pc->lock);
}

static void entry_free(probe_entry *e)
{
    if (e->has_reader && e->rd.free)
        e->rd.free(e->rd.ctx);
    free(e->path);
    free(e->name);
    free(e->targets);
    free(e);
}

void probe_cache_free(probe_cache *pc)
{
    if (!pc)
        return;
    for (probe_entry *e = pc->entries, *next; e; e = next) {
        next = e->next;
        entry_free(e);
    }
    pthread_mutex_destroy(&pc->lock);
    pthread_cond_destroy(&pc->verdict_in);
    free(pc);
}

static int id_equal(const probe_file_id *a, const probe_file_id *b)
{
    return a->dev == b->dev && a->ino == b->ino && a->size == b->size &&
           a->mtime_sec == b->mtime_sec && a->mtime_nsec == b->mtime_nsec &&
           a->ctime_sec == b->ctime_sec && a->ctime_nsec == b->ctime_nsec;
}

static probe_entry *find_locked(probe_cache *pc, const char *path, const probe_file_id *id)
{
    for (probe_entry *e = pc->entries; e; e = e->next)
        if (id_equal(&e->id, id) && strcmp(e->path, path) == 0)
            return e;
    return NULL;
}

static void unlink_locked(probe_cache *pc, probe_entry *gone)
{
    for (probe_entry **p = &pc->entries; *p; p = &(*p)->next) {
        if (*p == gone) {
            *p = gone->next;
            pc->count--;
            if (gone->done && gone->outcome != PROBE_OK && gone->outcome != PROBE_NOT_RUN)
                pc->stats.remembered_unsafe--;
            return;
        }
    }
}

/* Drops the oldest finished verdicts beyond the bound (running probes stay). */
static void trim_locked(probe_cache *pc)
{
    while (pc->count > pc->max_entries) {
        probe_entry *oldest = NULL;
        for (probe_entry *e = pc->entries; e; e = e->next)
            if (e->done)
                oldest = e;
        if (!oldest)
            return;
        unlink_locked(pc, oldest);
        entry_free(oldest);
    }
}

/* The answer for a finished verdict. */
static int answer(const char *name, probe_outcome outcome, int code, const char *detail,
                  cellar_error *err)
{
    switch (outcome) {
    case PROBE_OK: return 0;
    case PROBE_UNREADABLE: return cellar_fail(err, CELLAR_EFORMAT, "%s", detail);
    case PROBE_NOT_RUN:
        return cellar_fail(err, code ? code : CELLAR_EUNAVAILABLE, "%s", detail);
    default:
        return cellar_fail(err, CELLAR_EFORMAT, "store '%s' could not be read safely: %s", name,
                           detail);
    }
}

/* Runs the probe of e (not under the lock) and records its verdict; e may
 * be trimmed as soon as the lock goes. */
static void probe_entry_run(probe_cache *pc, probe_entry *e)
{
    probe_verdict v;
    memset(&v, 0, sizeof v);
    pc->run(pc->run_ctx, e->path, e->has_reader ? &e->rd : NULL, &v);
    int walked = v.outcome == PROBE_OK || v.outcome == PROBE_UNREADABLE;
    /* A file read through the server is the version the server reads. */
    if (walked && !e->has_reader && !id_equal(&v.walked, &e->id)) {
        v.outcome = PROBE_NOT_RUN;
        snprintf(v.detail, sizeof v.detail,
                 "store '%s' changed on disk while it was checked; retry", e->name);
    }
    if (v.outcome >= PROBE_OUTCOMES)
        v.outcome = PROBE_CRASHED;
    char name[256];
    snprintf(name, sizeof name, "%s", e->name);
    pthread_mutex_lock(&pc->lock);
    pc->stats.outcomes[v.outcome]++;
    pc->stats.seconds_sum += v.seconds;
    if (v.seconds > pc->stats.seconds_max)
        pc->stats.seconds_max = v.seconds;
    e->outcome = v.outcome;
    e->code = v.outcome == PROBE_NOT_RUN ? v.code : 0;
    if (v.outcome == PROBE_OK) {
        e->targets = v.targets;
        v.targets = NULL;
    }
    snprintf(e->detail, sizeof e->detail, "%s", v.detail);
    e->done = 1;
    if (v.outcome == PROBE_NOT_RUN)
        e->transient = 1; /* answered to its starter; anyone else probes anew */
    else if (v.outcome != PROBE_OK)
        pc->stats.remembered_unsafe++;
    pthread_cond_broadcast(&pc->verdict_in);
    trim_locked(pc);
    pthread_mutex_unlock(&pc->lock);
    free(v.targets);
    if (v.outcome != PROBE_OK)
        fprintf(stderr, "cellar: store '%s' %s: %s (probe %s after %.2f s)\n", name,
                v.outcome == PROBE_NOT_RUN ? "was not checked" : "is refused in this version",
                v.detail, probe_outcome_name(v.outcome), v.seconds);
}

typedef struct probe_job {
    probe_cache *pc;
    probe_entry *entry;
} probe_job;

static void probe_job_run(void *arg)
{
    probe_job *job = arg;
    probe_entry_run(job->pc, job->entry);
    free(job);
}

/* Starts the probe of e: on the background worker, or here when there is
 * none (then it has finished on return). */
static void probe_start(probe_cache *pc, probe_entry *e)
{
    pthread_mutex_lock(&pc->lock);
    probe_submit_fn submit = pc->submit;
    void *submit_ctx = pc->submit_ctx;
    pthread_mutex_unlock(&pc->lock);
    probe_job *job = submit ? malloc(sizeof *job) : NULL;
    if (job) {
        *job = (probe_job){pc, e};
        if (submit(submit_ctx, probe_job_run, job) == 0)
            return;
        free(job);
    }
    probe_entry_run(pc, e);
}

static struct timespec deadline_after(double seconds)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    double whole = (double)(time_t)seconds;
    t.tv_sec += (time_t)seconds;
    t.tv_nsec += (long)((seconds - whole) * 1e9);
    if (t.tv_nsec >= 1000000000L) {
        t.tv_sec++;
        t.tv_nsec -= 1000000000L;
    }
    return t;
}

static int check(probe_cache *pc, const char *name, const char *path, const probe_file_id *id,
                 probe_reader *rd, char **targets, cellar_error *err);

int probe_cache_check(probe_cache *pc, const char *name, const char *path,
                      const probe_file_id *id, cellar_error *err)
{
    return probe_cache_check_reader(pc, name, path, id, NULL, err);
}

int probe_cache_check_targets(probe_cache *pc, const char *name, const char *path,
                              const probe_file_id *id, char **targets, cellar_error *err)
{
    *targets = NULL;
    return check(pc, name, path, id, NULL, targets, err);
}

int probe_cache_check_reader(probe_cache *pc, const char *name, const char *path,
                             const probe_file_id *id, const probe_reader *rd,
                             cellar_error *err)
{
    probe_reader owned = rd ? *rd : (probe_reader){0};
    int rc = check(pc, name, path, id, rd ? &owned : NULL, NULL, err);
    if (rd && owned.free) /* not handed to an entry */
        owned.free(owned.ctx);
    return rc;
}

/* probe_cache_check_reader; *rd is cleared once an entry took it over. */
static int check(probe_cache *pc, const char *name, const char *path, const probe_file_id *id,
                 probe_reader *rd, char **targets, cellar_error *err)
{
    char detail[CELLAR_ERROR_DETAIL_MAX];
    struct timespec until = deadline_after(pc->wait_seconds);
    int started = 0;
    pthread_mutex_lock(&pc->lock);
    for (;;) {
        probe_entry *e = find_locked(pc, path, id);
        if (e && e->done && e->transient && !started) {
            unlink_locked(pc, e);
            entry_free(e);
            e = NULL;
        }
        if (e && e->done) {
            probe_outcome outcome = e->outcome;
            int code = e->code;
            snprintf(detail, sizeof detail, "%s", e->detail);
            if (targets && outcome == PROBE_OK && e->targets &&
                !(*targets = strdup(e->targets))) {
                pthread_mutex_unlock(&pc->lock);
                return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
            }
            if (e->transient) {
                unlink_locked(pc, e);
                entry_free(e);
            }
            pthread_mutex_unlock(&pc->lock);
            return answer(name, outcome, code, detail, err);
        }
        if (e) {
            if (pthread_cond_timedwait(&pc->verdict_in, &pc->lock, &until) != 0 &&
                !(e = find_locked(pc, path, id), e && e->done)) {
                pthread_mutex_unlock(&pc->lock);
                return cellar_fail(err, CELLAR_EUNAVAILABLE,
                                   "store '%s' is being checked before its first use; retry",
                                   name);
            }
            continue;
        }
        if (started) {
            /* Our own probe's verdict was trimmed before we saw it. */
            pthread_mutex_unlock(&pc->lock);
            return cellar_fail(err, CELLAR_EUNAVAILABLE,
                               "store '%s' could not be checked now; retry", name);
        }
        e = calloc(1, sizeof *e);
        if (!e || !(e->path = strdup(path)) || !(e->name = strdup(name))) {
            pthread_mutex_unlock(&pc->lock);
            if (e)
                entry_free(e);
            return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
        }
        e->id = *id;
        if (rd) {
            e->rd = *rd;
            e->has_reader = 1;
            *rd = (probe_reader){0};
        }
        e->next = pc->entries;
        pc->entries = e;
        pc->count++;
        started = 1;
        pthread_mutex_unlock(&pc->lock);
        probe_start(pc, e);
        pthread_mutex_lock(&pc->lock);
    }
}

void probe_cache_get_stats(probe_cache *pc, probe_stats *out)
{
    pthread_mutex_lock(&pc->lock);
    *out = pc->stats;
    pthread_mutex_unlock(&pc->lock);
}
