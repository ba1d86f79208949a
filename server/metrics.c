#include "server/metrics.h"

#include <stdatomic.h>
#include <stdlib.h>

static const int tracked_status[] = {200, 204, 206, 304, 400, 401, 404, 405, 406, 412,
                                     413, 416, 422, 500, 503};
#define N_STATUS (sizeof tracked_status / sizeof tracked_status[0] + 1) /* + other */

/* Upper bounds of the latency buckets, seconds. */
static const double bucket_bounds[] = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
                                       0.01,   0.025,   0.05,   0.1,   0.25,   0.5,
                                       1,      2.5,     5,      10};
#define N_BUCKETS (sizeof bucket_bounds / sizeof bucket_bounds[0])

struct metrics {
    atomic_ullong requests[ROUTE_COUNT][N_STATUS];
    atomic_ullong buckets[N_BUCKETS + 1];
    atomic_ullong latency_sum_us;
    atomic_ullong latency_count;
    atomic_ullong bytes_sent;
    atomic_ullong file_answers;
};

metrics *metrics_new(void)
{
    return calloc(1, sizeof(metrics));
}

void metrics_free(metrics *m)
{
    free(m);
}

static size_t status_slot(int status)
{
    for (size_t i = 0; i < N_STATUS - 1; i++)
        if (tracked_status[i] == status)
            return i;
    return N_STATUS - 1;
}

void metrics_observe(metrics *m, route_id route, int status, uint64_t micros, uint64_t bytes,
                     int from_file)
{
    if (route >= ROUTE_COUNT)
        route = ROUTE_NONE;
    atomic_fetch_add(&m->requests[route][status_slot(status)], 1);
    double seconds = (double)micros / 1e6;
    size_t b = 0;
    while (b < N_BUCKETS && seconds > bucket_bounds[b])
        b++;
    atomic_fetch_add(&m->buckets[b], 1);
    atomic_fetch_add(&m->latency_sum_us, micros);
    atomic_fetch_add(&m->latency_count, 1);
    atomic_fetch_add(&m->bytes_sent, bytes);
    if (from_file)
        atomic_fetch_add(&m->file_answers, 1);
}

void metrics_render(metrics *m, size_t open_stores, size_t cache_bytes, unsigned in_flight,
                    buf *out)
{
    buf_puts(out, "# HELP cellar_requests_total Requests answered, by route and status.\n"
                  "# TYPE cellar_requests_total counter\n");
    for (int r = 0; r < ROUTE_COUNT; r++) {
        for (size_t s = 0; s < N_STATUS; s++) {
            unsigned long long v = atomic_load(&m->requests[r][s]);
            if (!v)
                continue;
            if (s < N_STATUS - 1)
                buf_printf(out, "cellar_requests_total{route=\"%s\",status=\"%d\"} %llu\n",
                           router_route_name((route_id)r), tracked_status[s], v);
            else
                buf_printf(out, "cellar_requests_total{route=\"%s\",status=\"other\"} %llu\n",
                           router_route_name((route_id)r), v);
        }
    }
    buf_puts(out, "# HELP cellar_request_duration_seconds Time from request to answer.\n"
                  "# TYPE cellar_request_duration_seconds histogram\n");
    unsigned long long cumulative = 0;
    for (size_t b = 0; b < N_BUCKETS; b++) {
        cumulative += atomic_load(&m->buckets[b]);
        buf_printf(out, "cellar_request_duration_seconds_bucket{le=\"%g\"} %llu\n",
                   bucket_bounds[b], cumulative);
    }
    cumulative += atomic_load(&m->buckets[N_BUCKETS]);
    buf_printf(out, "cellar_request_duration_seconds_bucket{le=\"+Inf\"} %llu\n", cumulative);
    buf_printf(out, "cellar_request_duration_seconds_sum %.6f\n",
               (double)atomic_load(&m->latency_sum_us) / 1e6);
    buf_printf(out, "cellar_request_duration_seconds_count %llu\n",
               atomic_load(&m->latency_count));
    buf_printf(out,
               "# HELP cellar_response_bytes_total Body bytes sent.\n"
               "# TYPE cellar_response_bytes_total counter\n"
               "cellar_response_bytes_total %llu\n"
               "# HELP cellar_file_answers_total Answers whose body was sent from a file (sendfile), not copied.\n"
               "# TYPE cellar_file_answers_total counter\n"
               "cellar_file_answers_total %llu\n"
               "# HELP cellar_open_stores Store versions open.\n"
               "# TYPE cellar_open_stores gauge\n"
               "cellar_open_stores %zu\n"
               "# HELP cellar_cache_bytes Bytes held by derived indexes of open stores.\n"
               "# TYPE cellar_cache_bytes gauge\n"
               "cellar_cache_bytes %zu\n"
               "# HELP cellar_requests_in_flight Requests being answered.\n"
               "# TYPE cellar_requests_in_flight gauge\n"
               "cellar_requests_in_flight %u\n",
               atomic_load(&m->bytes_sent), atomic_load(&m->file_answers), open_stores,
               cache_bytes, in_flight);
}

void metrics_render_probes(const probe_stats *st, buf *out)
{
    buf_puts(out, "# HELP cellar_probes_total HDF5 file versions walked by a probe process, by outcome.\n"
                  "# TYPE cellar_probes_total counter\n");
    for (int o = 0; o < PROBE_OUTCOMES; o++)
        buf_printf(out, "cellar_probes_total{outcome=\"%s\"} %llu\n",
                   probe_outcome_name((probe_outcome)o), (unsigned long long)st->outcomes[o]);
    buf_printf(out,
               "# HELP cellar_probe_seconds_total Time spent in probes.\n"
               "# TYPE cellar_probe_seconds_total counter\n"
               "cellar_probe_seconds_total %.6f\n"
               "# HELP cellar_probe_seconds_max The longest probe.\n"
               "# TYPE cellar_probe_seconds_max gauge\n"
               "cellar_probe_seconds_max %.6f\n"
               "# HELP cellar_refused_store_versions File versions refused by their probe, remembered.\n"
               "# TYPE cellar_refused_store_versions gauge\n"
               "cellar_refused_store_versions %zu\n",
               st->seconds_sum, st->seconds_max, st->remembered_unsafe);
}
