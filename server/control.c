#include "server/control.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <uv.h>

typedef struct control_state {
    const control_config *cfg;
    uv_loop_t loop;
    uv_signal_t sig_term, sig_int, sig_hup;
    uv_timer_t idle_timer;
    int result;
} control_state;

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
    (void)arg;
    if (!uv_is_closing(h))
        uv_close(h, NULL);
}

static void on_stop_signal(uv_signal_t *h, int signum)
{
    control_state *st = h->data;
    fprintf(stderr, "cellar: %s: draining requests in flight\n",
            signum == SIGTERM ? "SIGTERM" : "SIGINT");
    http_drain_and_stop(st->cfg->http, st->cfg->drain_seconds);
    fprintf(stderr, "cellar: stopped\n");
    uv_walk(&st->loop, close_handle, NULL);
}

static void on_hup(uv_signal_t *h, int signum)
{
    (void)signum;
    control_state *st = h->data;
    registry_drop_all(st->cfg->reg);
    fprintf(stderr, "cellar: SIGHUP: dropped cached store handles\n");
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
    st.sig_term.data = st.sig_int.data = st.sig_hup.data = st.idle_timer.data = &st;
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

    pthread_t thread;
    if (pthread_create(&thread, NULL, control_thread, &st) != 0) {
        uv_loop_close(&st.loop);
        return -1;
    }
    pthread_join(thread, NULL);
    uv_run(&st.loop, UV_RUN_DEFAULT); /* let close callbacks finish */
    uv_loop_close(&st.loop);
    return 0;
}
