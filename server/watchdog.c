#include "server/watchdog.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "storage/node.h"

struct watchdog {
    double timeout;
    pthread_mutex_t lock;
    watch_entry *head;
};

static double seconds_since(const struct timespec *start)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)(now.tv_sec - start->tv_sec) + (double)(now.tv_nsec - start->tv_nsec) / 1e9;
}

watchdog *watchdog_new(double timeout_seconds)
{
    watchdog *w = calloc(1, sizeof *w);
    if (!w)
        return NULL;
    w->timeout = timeout_seconds;
    pthread_mutex_init(&w->lock, NULL);
    return w;
}

void watchdog_free(watchdog *w)
{
    if (!w)
        return;
    pthread_mutex_destroy(&w->lock);
    free(w);
}

void watchdog_enter(watchdog *w, watch_entry *e)
{
    e->prev = NULL;
    e->reported = 0;
    pthread_mutex_lock(&w->lock);
    e->next = w->head;
    if (w->head)
        w->head->prev = e;
    w->head = e;
    pthread_mutex_unlock(&w->lock);
}

void watchdog_leave(watchdog *w, watch_entry *e)
{
    pthread_mutex_lock(&w->lock);
    if (e->prev)
        e->prev->next = e->next;
    else if (w->head == e)
        w->head = e->next;
    if (e->next)
        e->next->prev = e->prev;
    e->prev = e->next = NULL;
    pthread_mutex_unlock(&w->lock);
}

void watchdog_label(watchdog *w, watch_entry *e, const char *route, const char *store)
{
    pthread_mutex_lock(&w->lock);
    e->route = route;
    e->store = store;
    pthread_mutex_unlock(&w->lock);
}

int watchdog_overdue(const watchdog *w, const watch_entry *e)
{
    return w->timeout > 0 && seconds_since(&e->start) > w->timeout;
}

size_t watchdog_check(watchdog *w)
{
    size_t overdue = 0;
    pthread_mutex_lock(&w->lock);
    for (watch_entry *e = w->head; e; e = e->next) {
        if (!watchdog_overdue(w, e))
            continue;
        overdue++;
        if (e->reported)
            continue;
        e->reported = 1;
        fprintf(stderr,
                "cellar: %s %s (route %s, store %s) still running after %.1f s "
                "(--request-timeout-seconds %g); it will be answered 503\n",
                e->method, e->path, e->route, e->store ? e->store : "-",
                seconds_since(&e->start), w->timeout);
    }
    pthread_mutex_unlock(&w->lock);
    return overdue;
}

int watchdog_ready(const watchdog *w, char *why, size_t size)
{
    double busy = node_locked_backend_busy_seconds();
    if (w->timeout > 0 && busy > w->timeout) {
        snprintf(why, size,
                 "a call into libhdf5 has been running for %.0f s (longer than "
                 "--request-timeout-seconds %g): HDF5 requests queue behind it",
                 busy, w->timeout);
        return -1;
    }
    return 0;
}

double watchdog_timeout(const watchdog *w)
{
    return w->timeout;
}
