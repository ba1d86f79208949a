/* The bounded cache of remote bytes (--remote-cache-bytes): byte ranges
 * of remote objects as fetched, keyed by the object's identity (its URL
 * with its ETag, or with the store version that read it when the server
 * gives no ETag) and the range, so a replaced object is never answered
 * from the bytes of the one before.  The least recently used go first
 * past the limit (to files of --cache-dir when it is given, within their
 * own bound: remote_cache_spill_to); a range over a quarter of it is not
 * kept.  Shared by every thread (one lock; get copies out). */
#ifndef CELLAR_REMOTE_CACHE_H
#define CELLAR_REMOTE_CACHE_H

#include <stddef.h>
#include <stdint.h>

typedef struct remote_cache remote_cache;

typedef struct remote_cache_stats {
    size_t bytes, entries, limit;     /* in memory */
    uint64_t hits, misses;
    size_t disk_bytes, disk_entries;  /* spilled to --cache-dir */
    uint64_t disk_hits;
} remote_cache_stats;

/* A cache of at most limit bytes (0: keeps nothing).  NULL when out of
 * memory. */
remote_cache *remote_cache_new(size_t limit);
void remote_cache_free(remote_cache *c);

/* Ranges pushed out of memory go to files of a new directory below
 * cache_dir (this process's own, removed with the cache) while they add
 * up to at most limit bytes, and are read back from there.  Call before
 * any other thread uses c.  0, or -1 when the directory cannot be made. */
int remote_cache_spill_to(remote_cache *c, const char *cache_dir, size_t limit);

/* Copies [off, off + len) of object id into out when kept, as that range
 * or inside a kept range starting at within (the object's whole bytes,
 * say): 1 when found, 0 when not. */
int remote_cache_get(remote_cache *c, const char *id, uint64_t off, size_t len, void *out);

/* Like remote_cache_get, but for the range [within, within + wlen) kept
 * whole, of which [off, off + len) is copied. */
int remote_cache_get_within(remote_cache *c, const char *id, uint64_t within, size_t wlen,
                            uint64_t off, size_t len, void *out);

/* Whether [off, off + len) of id is kept as one range (no copy, no
 * count in the hit statistics). */
int remote_cache_contains(remote_cache *c, const char *id, uint64_t off, size_t len);

/* Keeps a copy of bytes as [off, off + len) of id (replacing one kept). */
void remote_cache_put(remote_cache *c, const char *id, uint64_t off, const void *bytes,
                      size_t len);

void remote_cache_get_stats(remote_cache *c, remote_cache_stats *out);

#endif
