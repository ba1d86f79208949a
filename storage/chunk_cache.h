/* Caches of decoded chunks, shared by every store and thread: one for the
 * zarr backend's chunks and shard indexes (--zarr-chunk-cache-bytes), one
 * for HDF5 chunks that cellar decodes itself (--hdf5-chunk-cache-bytes), so
 * a slice read again (a viewer paging, a gene after a gene) is copied, not
 * inflated again.  Entries belong to one store version and go when it is
 * freed.  When the bytes pass the limit, chunks read only once go first
 * (least recently used first), then chunks read again: a scan does not
 * push out what slices reuse.  Default limit 64 MiB each; 0 turns a cache
 * off.  A chunk larger than a quarter of the limit is decoded for its read
 * and not kept. */
#ifndef CELLAR_CHUNK_CACHE_H
#define CELLAR_CHUNK_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "storage/codecs.h"
#include "storage/node.h"

typedef enum chunk_cache_kind { CHUNK_CACHE_ZARR = 0, CHUNK_CACHE_HDF5, CHUNK_CACHE_KINDS } chunk_cache_kind;

typedef struct chunk_cache chunk_cache;

/* What an entry holds: a decoded chunk or a zarr shard's decoded index. */
enum { CHUNK_CACHE_CHUNK = 1, CHUNK_CACHE_SHARD_INDEX = 2 };

/* Zero-filled before use: hashed and compared as bytes.  store names the
 * store version, array the array, both from chunk_cache_new_id. */
typedef struct chunk_cache_key {
    uint64_t store, array;
    int64_t coords[NODE_MAX_DIMS];
    uint32_t kind, pad;
} chunk_cache_key;

typedef struct chunk_cached chunk_cached;

typedef struct chunk_cache_stats {
    size_t bytes, entries, limit;
    uint64_t hits, misses;
} chunk_cache_stats;

/* The process's cache of that kind. */
chunk_cache *chunk_cache_of(chunk_cache_kind kind);

/* A new nonzero id, unique in the process (store versions and arrays). */
uint64_t chunk_cache_new_id(void);

/* The entry for k with a reference the caller drops with
 * chunk_cache_release, or NULL (a miss). */
const chunk_cached *chunk_cache_get(chunk_cache *c, const chunk_cache_key *k);

/* Hands buf (len bytes) and items (nitems, may be NULL) over to a new entry
 * for k and returns it with a reference; they are freed with the entry.
 * When k is already present (another thread decoded it meanwhile), buf and
 * items are freed and the present entry is returned.  An entry over the
 * size bound, or with the cache off, is returned without being kept: its
 * last release frees it.  NULL only when out of memory (buf, items freed). */
const chunk_cached *chunk_cache_put(chunk_cache *c, const chunk_cache_key *k, uint8_t *buf,
                                    size_t len, codec_vlen_item *items, size_t nitems);

void chunk_cache_release(const chunk_cached *ref);

/* The immutable contents of an entry (valid while referenced). */
const uint8_t *chunk_cached_buf(const chunk_cached *ref, size_t *len,
                                const codec_vlen_item **items);

/* Forgets every entry of a store version (called when it is freed). */
void chunk_cache_drop_store(chunk_cache *c, uint64_t store_id);

void chunk_cache_set_limit(chunk_cache *c, size_t bytes);

/* The most bytes of decoded chunks one read should hand to c (a quarter of
 * its limit; 0 when it is off): a read decoding more is a scan and keeps
 * nothing. */
size_t chunk_cache_largest(chunk_cache *c);
void chunk_cache_get_stats(chunk_cache *c, chunk_cache_stats *out);

#endif
