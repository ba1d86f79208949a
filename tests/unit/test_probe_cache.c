/* storage/probe_cache: one probe per file version, remembered verdicts,
 * concurrent first callers waiting for one probe. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "storage/probe_cache.h"
#include "tests/unit/unit.h"

typedef struct fake_prober {
    atomic_int runs;
    probe_outcome outcome;
    int lie_about_identity; /* report another file than the one asked for */
    useconds_t delay_us;
    long ctime_nsec; /* of the file it walked */
} fake_prober;

static void fake_run(void *ctx, const char *path, const probe_reader *rd, probe_verdict *out)
{
    fake_prober *f = ctx;
    (void)path;
    (void)rd;
    atomic_fetch_add(&f->runs, 1);
    if (f->delay_us)
        usleep(f->delay_us);
    out->outcome = f->outcome;
    snprintf(out->detail, sizeof out->detail, "fake verdict %d", (int)f->outcome);
    out->walked = (probe_file_id){1, 2, f->lie_about_identity ? 4 : 3, 5, 6, 0, f->ctime_nsec};
    out->seconds = 0.01;
}

static const probe_file_id id_v1 = {1, 2, 3, 5, 6, 0, 0};

void test_probe_cache_remembers(void)
{
    fake_prober f = {.outcome = PROBE_OK};
    probe_cache *pc = probe_cache_new(fake_run, &f, 16, 30);
    cellar_error err;
    cellar_error_clear(&err);
    CHECK_EQ(probe_cache_check(pc, "a.h5ad", "/r/a.h5ad", &id_v1, &err), 0);
    CHECK_EQ(probe_cache_check(pc, "a.h5ad", "/r/a.h5ad", &id_v1, &err), 0);
    CHECK_EQ(atomic_load(&f.runs), 1);
    /* Another version of the same path is probed again. */
    probe_file_id v2 = id_v1;
    v2.mtime_nsec++;
    f.outcome = PROBE_CRASHED;
    f.lie_about_identity = 1; /* a crashed probe reports no identity: not checked */
    CHECK_EQ(probe_cache_check(pc, "a.h5ad", "/r/a.h5ad", &v2, &err), CELLAR_EFORMAT);
    CHECK(strstr(err.detail, "could not be read safely: fake verdict") != NULL);
    CHECK_EQ(probe_cache_check(pc, "a.h5ad", "/r/a.h5ad", &v2, &err), CELLAR_EFORMAT);
    CHECK_EQ(atomic_load(&f.runs), 2);
    /* Rewritten in place with size and mtime put back: only its ctime moved. */
    probe_file_id v3 = id_v1;
    v3.ctime_nsec = f.ctime_nsec = 1;
    f.outcome = PROBE_OK;
    f.lie_about_identity = 0;
    CHECK_EQ(probe_cache_check(pc, "a.h5ad", "/r/a.h5ad", &v3, &err), 0);
    CHECK_EQ(atomic_load(&f.runs), 3);
    probe_stats st;
    probe_cache_get_stats(pc, &st);
    CHECK_EQ(st.outcomes[PROBE_OK], 2);
    CHECK_EQ(st.outcomes[PROBE_CRASHED], 1);
    CHECK_EQ(st.remembered_unsafe, 1);
    probe_cache_free(pc);
}

void test_probe_cache_not_remembered(void)
{
    /* No probe could run, or the file changed while walked: 503 now, a new
     * probe next time. */
    fake_prober f = {.outcome = PROBE_NOT_RUN};
    probe_cache *pc = probe_cache_new(fake_run, &f, 16, 30);
    cellar_error err;
    cellar_error_clear(&err);
    CHECK_EQ(probe_cache_check(pc, "a.h5ad", "/r/a.h5ad", &id_v1, &err), CELLAR_EUNAVAILABLE);
    f.outcome = PROBE_OK;
    f.lie_about_identity = 1;
    cellar_error_clear(&err);
    CHECK_EQ(probe_cache_check(pc, "a.h5ad", "/r/a.h5ad", &id_v1, &err), CELLAR_EUNAVAILABLE);
    CHECK(strstr(err.detail, "changed on disk") != NULL);
    f.lie_about_identity = 0;
    CHECK_EQ(probe_cache_check(pc, "a.h5ad", "/r/a.h5ad", &id_v1, &err), 0);
    CHECK_EQ(atomic_load(&f.runs), 3);
    /* An unreadable file's own reason is answered as is. */
    f.outcome = PROBE_UNREADABLE;
    cellar_error_clear(&err);
    CHECK_EQ(probe_cache_check(pc, "b.h5ad", "/r/b.h5ad", &id_v1, &err), CELLAR_EFORMAT);
    CHECK_STR_EQ(err.detail, "fake verdict 1");
    probe_cache_free(pc);
}

typedef struct caller {
    probe_cache *pc;
    int rc;
} caller;

static void *call_check(void *arg)
{
    caller *c = arg;
    cellar_error err;
    cellar_error_clear(&err);
    c->rc = probe_cache_check(c->pc, "a.h5ad", "/r/a.h5ad", &id_v1, &err);
    return NULL;
}

void test_probe_cache_single_flight(void)
{
    fake_prober f = {.outcome = PROBE_TIMED_OUT, .delay_us = 100000};
    probe_cache *pc = probe_cache_new(fake_run, &f, 16, 30);
    enum { N = 8 };
    pthread_t t[N];
    caller c[N];
    for (int i = 0; i < N; i++) {
        c[i] = (caller){pc, 1};
        pthread_create(&t[i], NULL, call_check, &c[i]);
    }
    for (int i = 0; i < N; i++) {
        pthread_join(t[i], NULL);
        CHECK_EQ(c[i].rc, CELLAR_EFORMAT);
    }
    CHECK_EQ(atomic_load(&f.runs), 1);
    probe_cache_free(pc);
}

void test_probe_cache_bounded(void)
{
    fake_prober f = {.outcome = PROBE_OK};
    probe_cache *pc = probe_cache_new(fake_run, &f, 4, 30);
    cellar_error err;
    cellar_error_clear(&err);
    char path[32];
    for (int i = 0; i < 10; i++) {
        snprintf(path, sizeof path, "/r/%d.h5ad", i);
        CHECK_EQ(probe_cache_check(pc, "x", path, &id_v1, &err), 0);
    }
    CHECK_EQ(atomic_load(&f.runs), 10);
    /* The newest are kept, the oldest were dropped and are probed again. */
    CHECK_EQ(probe_cache_check(pc, "x", "/r/9.h5ad", &id_v1, &err), 0);
    CHECK_EQ(atomic_load(&f.runs), 10);
    CHECK_EQ(probe_cache_check(pc, "x", "/r/0.h5ad", &id_v1, &err), 0);
    CHECK_EQ(atomic_load(&f.runs), 11);
    probe_cache_free(pc);
}

typedef struct thread_job {
    void (*fn)(void *);
    void *arg;
} thread_job;

static void *thread_main(void *arg)
{
    thread_job job = *(thread_job *)arg;
    free(arg);
    job.fn(job.arg);
    return NULL;
}

/* probe_submit_fn: every job on a thread of its own (joined by the test). */
static pthread_t last_thread;
static int thread_submit(void *ctx, void (*fn)(void *), void *arg)
{
    (void)ctx;
    thread_job *job = malloc(sizeof *job);
    if (!job)
        return -1;
    *job = (thread_job){fn, arg};
    return pthread_create(&last_thread, NULL, thread_main, job);
}

void test_probe_cache_wait_bounded(void)
{
    /* A probe longer than the wait: the caller is answered 503 and the
     * probe goes on in the background; its verdict answers later callers. */
    fake_prober f = {.outcome = PROBE_CRASHED, .delay_us = 400000};
    probe_cache *pc = probe_cache_new(fake_run, &f, 16, 0.05);
    probe_cache_set_submit(pc, thread_submit, NULL);
    cellar_error err;
    cellar_error_clear(&err);
    CHECK_EQ(probe_cache_check(pc, "a.h5ad", "/r/a.h5ad", &id_v1, &err), CELLAR_EUNAVAILABLE);
    CHECK(strstr(err.detail, "is being checked") != NULL);
    cellar_error_clear(&err);
    CHECK_EQ(probe_cache_check(pc, "a.h5ad", "/r/a.h5ad", &id_v1, &err), CELLAR_EUNAVAILABLE);
    pthread_join(last_thread, NULL);
    cellar_error_clear(&err);
    CHECK_EQ(probe_cache_check(pc, "a.h5ad", "/r/a.h5ad", &id_v1, &err), CELLAR_EFORMAT);
    CHECK(strstr(err.detail, "could not be read safely") != NULL);
    CHECK_EQ(atomic_load(&f.runs), 1);
    probe_cache_free(pc);
}
