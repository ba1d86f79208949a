/* The request watchdog: which requests are inside a handler and since when.
 *
 * A request running past --request-timeout-seconds is logged once, with
 * its route and store, while it still runs (the control loop checks every
 * second), and when its handler returns at last the server answers it 503
 * instead of the late answer.  A handler cannot be interrupted safely
 * (it may hold libhdf5's lock); what the watchdog guarantees is that the
 * operator learns of it and that a balancer routes around the replica:
 * watchdog_ready fails while a call into libhdf5 has been running longer
 * than the deadline (storage/node.h's node_locked_backend_busy_seconds).
 * Thread-safe. */
#ifndef CELLAR_WATCHDOG_H
#define CELLAR_WATCHDOG_H

#include <stddef.h>
#include <time.h>

typedef struct watch_entry {
    struct watch_entry *prev, *next;
    struct timespec start;
    const char *method, *path, *route, *store; /* borrowed for the entry's life */
    int reported;
} watch_entry;

typedef struct watchdog watchdog;

/* timeout_seconds 0: no deadline.  NULL when out of memory. */
watchdog *watchdog_new(double timeout_seconds);
void watchdog_free(watchdog *w);

/* e (caller memory, filled by the caller except prev/next/reported) is
 * watched from now until watchdog_leave. */
void watchdog_enter(watchdog *w, watch_entry *e);
void watchdog_leave(watchdog *w, watch_entry *e);

/* Names e's route and store once they are known (route and store are
 * borrowed for the entry's life). */
void watchdog_label(watchdog *w, watch_entry *e, const char *route, const char *store);

/* Whether e has run past the deadline. */
int watchdog_overdue(const watchdog *w, const watch_entry *e);

/* Logs every entry past the deadline not logged yet; returns how many are
 * past it. */
size_t watchdog_check(watchdog *w);

/* 0 when the server can take requests; else -1 with why in `why`. */
int watchdog_ready(const watchdog *w, char *why, size_t size);

/* The deadline in seconds (0: none). */
double watchdog_timeout(const watchdog *w);

#endif
