/* The answer cache: finished HTTP answers kept by request key, so a
 * repeated request (a visualizer asking for the same tile, gene or node
 * again) is answered without running its handler.
 *
 * Keys name the store version (its ETag), the path, the query and the
 * negotiated format and encoding, so an entry can never answer for another
 * version of a file: when a store changes, its old entries simply stop
 * being asked for and age out.  Bounded by bytes, least recently used out
 * first.  Values are opaque to this module (the server keeps libmicrohttpd
 * responses, which it may queue on many connections at once).
 *
 * Thread-safe. */
#ifndef CELLAR_ANSWER_CACHE_H
#define CELLAR_ANSWER_CACHE_H

#include <stddef.h>
#include <stdint.h>

typedef struct answer_cache answer_cache;

/* Frees a value when its entry goes (eviction, replacement, clear, free). */
typedef void (*answer_release_fn)(void *value);

/* A cache holding at most max_bytes (values' sizes plus keys); entries over
 * max_bytes / 8 are not kept.  max_bytes 0: a cache that keeps nothing.
 * NULL when out of memory. */
answer_cache *answer_cache_new(size_t max_bytes);

/* Releases every value and frees the cache. NULL is fine. */
void answer_cache_free(answer_cache *c);

/* When key is cached, calls use(value, arg) while holding the cache's lock
 * (the value cannot be released meanwhile; keep use short), stores its
 * result in *use_rc and returns 1.  Returns 0 on a miss. */
int answer_cache_use(answer_cache *c, const char *key, size_t key_len,
                     int (*use)(void *value, void *arg), void *arg, int *use_rc);

/* Keeps value under key (copied), taking ownership of value: release(value)
 * is called when the entry goes, or at once when the value is not kept (too
 * large, cache disabled, key already cached, out of memory). */
void answer_cache_put(answer_cache *c, const char *key, size_t key_len, void *value,
                      size_t bytes, answer_release_fn release);

/* Drops every entry (SIGHUP). */
void answer_cache_clear(answer_cache *c);

typedef struct answer_cache_stats {
    size_t bytes, entries;
    uint64_t hits, misses, evictions;
} answer_cache_stats;

void answer_cache_get_stats(answer_cache *c, answer_cache_stats *out);

#endif
