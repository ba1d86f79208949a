/* Request counters and latency histogram, rendered as Prometheus text.
 * Lock-free (atomics), owned by the server. */
#ifndef CELLAR_METRICS_H
#define CELLAR_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"
#include "server/router.h"
#include "storage/probe_cache.h"

typedef struct metrics metrics;

metrics *metrics_new(void);
void metrics_free(metrics *m);

/* Records one finished request; from_file says its body was sent from a
 * file (sendfile) rather than from memory. */
void metrics_observe(metrics *m, route_id route, int status, uint64_t micros, uint64_t bytes,
                     int from_file);

/* Appends the exposition text; open_stores and cache_bytes come from the
 * registry. */
void metrics_render(metrics *m, size_t open_stores, size_t cache_bytes, unsigned in_flight,
                    buf *out);

/* Appends the probes' counters (storage/probe_cache.h). */
void metrics_render_probes(const probe_stats *st, buf *out);

#endif
