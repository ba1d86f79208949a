#include "server/control.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <uv.h>

/* A background job on its way to libuv's work queue. */
typedef struct bg_job {
    uv_work_t work;
    void (*fn)(void *);
    void *arg;
    struct bg_job *next;
} bg_job;

typedef struct control_state {
    const control_config *cfg;
    uv_loop_t loop;
    uv_signal_t sig_term, sig_int, sig_hup;
    uv_timer_t idle_timer;
    uv_timer_t log_timer;
    uv_timer_t watchdog_timer;
    int result;
    /* Jobs submitted by request threads, handed to the loop by bg_async
     * (uv_queue_work may only be called on the loop thread). */
    uv_async_t bg_async;
    pthread_mutex_t bg_lock;
    bg_job *bg_pending;
    int bg_closed;
} control_state;

static void bg_work(uv_work_t *w)
{
    bg_job *job = w->data;
    job->fn(job->arg);
}

static void bg_after(uv_work_t *w, int status)
{
    (void)status;
    free(w->data);
}

/* On the loop thread: queues every pending job. */
static void bg_dispatch(control_state *st)
{
    pthread_mutex_lock(&st->bg_lock);
    bg_job *list = st->bg_pending;
    st->bg_pending = NULL;
    pthread_mutex_unlock(&st->bg_lock);
    while (list) {
        bg_job *next = list->next;
        list->work.data = list;
        if (uv_queue_work(&st->loop, &list->work, bg_work, bg_after) != 0) {
            /* Cannot happen on a live loop; run it here rather than lose it. */
            list->fn(list->arg);
            free(list);
        }
        list = next;
    }
}

static void on_bg_async(uv_async_t *a)
{
    bg_dispatch(a->data);
}

/* The async handle closes at shutdown: jobs still pending run before the
 * loop ends (they hold store references that must be dropped). */
static void on_bg_closed(uv_handle_t *h)
{
    control_state *st = h->data;
    pthread_mutex_lock(&st->bg_lock);
    st->bg_closed = 1;
    pthread_mutex_unlock(&st->bg_lock);
    bg_dispatch(st);
}

/* http_background_fn: called from request threads. */
static int bg_submit(void *ctx, void (*fn)(void *), void *arg)
{
    control_state *st = ctx;
    bg_job *job = calloc(1, sizeof *job);
    if (!job)
        return -1;
    job->fn = fn;
    job->arg = arg;
    pthread_mutex_lock(&st->bg_lock);
    if (st->bg_closed) {
        pthread_mutex_unlock(&st->bg_lock);
        free(job);
        return -1;
    }
    job->next = st->bg_pending;
    st->bg_pending = job;
    pthread_mutex_unlock(&st->bg_lock);
    uv_async_send(&st->bg_async);
    return 0;
}

void control_block_signals(void)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGHUP);
    sigaddset(&set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
}

static void close_handle(uv_handle_t *h, void *arg)
{
    control_state *st = arg;
    if (uv_is_closing(h))
        return;
    uv_close(h, h == (uv_handle_t *)&st->bg_async ? on_bg_closed : NULL);
}

static void on_stop_signal(uv_signal_t *h, int signum)
{
    control_state *st = h->data;
    fprintf(stderr, "cellar: %s: draining requests in flight\n",
            signum == SIGTERM ? "SIGTERM" : "SIGINT");
    if (st->cfg->on_stop)
        st->cfg->on_stop(st->cfg->on_stop_ctx);
    http_set_background(st->cfg->http, NULL, NULL);
    unsigned stuck = http_drain_and_stop(st->cfg->http, st->cfg->drain_seconds);
    if (stuck) {
        /* Their threads may never return (a call into libhdf5 on a damaged
         * file): waiting for them would keep the process up for good. */
        fprintf(stderr, "cellar: %u request(s) still running after --drain-seconds %g; "
                        "exiting without them\n", stuck, st->cfg->drain_seconds);
        fflush(NULL);
        _exit(1);
    }
    fprintf(stderr, "cellar: stopped\n");
    uv_walk(&st->loop, close_handle, st);
}

static void on_hup(uv_signal_t *h, int signum)
{
    (void)signum;
    control_state *st = h->data;
    registry_drop_all(st->cfg->reg);
    http_drop_answers(st->cfg->http);
    fprintf(stderr, "cellar: SIGHUP: dropped cached store handles and answers\n");
    http_reload_credentials(st->cfg->http);
}

static void on_log_timer(uv_timer_t *t)
{
    control_state *st = t->data;
    http_flush_log(st->cfg->http);
}

static void on_watchdog_timer(uv_timer_t *t)
{
    control_state *st = t->data;
    http_watchdog_check(st->cfg->http);
}

static void on_idle_timer(uv_timer_t *t)
{
    control_state *st = t->data;
    registry_evict_idle(st->cfg->reg);
}

static void *control_thread(void *arg)
{
    control_state *st = arg;
    /* Only this thread takes the signals. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGHUP);
    pthread_sigmask(SIG_UNBLOCK, &set, NULL);
    st->result = uv_run(&st->loop, UV_RUN_DEFAULT);
    return NULL;
}

int control_run(const control_config *cfg)
{
    control_state st = {.cfg = cfg};
    int rc = uv_loop_init(&st.loop);
    if (rc)
        return rc;
    uv_signal_init(&st.loop, &st.sig_term);
    uv_signal_init(&st.loop, &st.sig_int);
    uv_signal_init(&st.loop, &st.sig_hup);
    uv_timer_init(&st.loop, &st.idle_timer);
    uv_timer_init(&st.loop, &st.log_timer);
    uv_timer_init(&st.loop, &st.watchdog_timer);
    st.sig_term.data = st.sig_int.data = st.sig_hup.data = st.idle_timer.data = &st;
    st.log_timer.data = st.watchdog_timer.data = &st;
    uv_signal_start(&st.sig_term, on_stop_signal, SIGTERM);
    uv_signal_start(&st.sig_int, on_stop_signal, SIGINT);
    uv_signal_start(&st.sig_hup, on_hup, SIGHUP);
    /* Check a few times per idle period, at most every 10 s, at least every 0.2 s. */
    double every = cfg->idle_seconds / 4;
    if (every > 10)
        every = 10;
    if (every < 0.2)
        every = 0.2;
    uint64_t ms = (uint64_t)(every * 1000);
    uv_timer_start(&st.idle_timer, on_idle_timer, ms, ms);
    uv_timer_start(&st.log_timer, on_log_timer, 100, 100);
    uv_timer_start(&st.watchdog_timer, on_watchdog_timer, 1000, 1000);
    pthread_mutex_init(&st.bg_lock, NULL);
    uv_async_init(&st.loop, &st.bg_async, on_bg_async);
    st.bg_async.data = &st;
    http_set_background(cfg->http, bg_submit, &st);

    pthread_t thread;
    if (pthread_create(&thread, NULL, control_thread, &st) != 0) {
        http_set_background(cfg->http, NULL, NULL);
        uv_loop_close(&st.loop);
        return -1;
    }
    pthread_join(thread, NULL);
    uv_run(&st.loop, UV_RUN_DEFAULT); /* let close callbacks and background jobs finish */
    uv_loop_close(&st.loop);
    pthread_mutex_destroy(&st.bg_lock);
    return 0;
}
