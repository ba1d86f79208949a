/* The decoded-chunk cache of the zarr backend (see storage/zarr/zarr_impl.h).
 *
 * One process-wide table, bounded in bytes, least recently used first out.
 * The lock covers only the table: lookups, insertions and reference counts.
 * Decoding happens in the reader before zarr_cache_put, outside it.  An
 * entry evicted (or dropped with its store) while a reader still holds it
 * leaves the table at once and is freed by its last zarr_cache_release. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/hash.h"
#include "storage/zarr/zarr.h"
#include "storage/zarr/zarr_impl.h"

#define ZCACHE_DEFAULT_LIMIT ((size_t)64 << 20)
/* An entry larger than limit / ZCACHE_MAX_SHARE is not kept, so one huge
 * chunk cannot flush everything else. */
#define ZCACHE_MAX_SHARE 4

struct zarr_cached {
    zarr_cache_key key;
    uint8_t *buf;
    size_t len, bytes;
    codec_vlen_item *items;
    int refs;    /* readers holding it, plus one while in the table */
    int in_table;
    struct zarr_cached *hnext;        /* hash chain */
    struct zarr_cached *prev, *next;  /* LRU list, head = most recent */
};

static struct {
    pthread_mutex_t mu;
    zarr_cached **buckets;
    size_t nbuckets, entries, bytes, limit;
    uint64_t hits, misses, next_id;
    zarr_cached *head, *tail;
} zc = {.mu = PTHREAD_MUTEX_INITIALIZER, .limit = ZCACHE_DEFAULT_LIMIT};

static uint64_t key_hash(const zarr_cache_key *k)
{
    /* keys are zero-filled, so padding is 0 */
    return hash64(k, sizeof *k);
}

static void entry_free(zarr_cached *e)
{
    free(e->buf);
    free(e->items);
    free(e);
}

static void lru_unlink(zarr_cached *e)
{
    if (e->prev)
        e->prev->next = e->next;
    else
        zc.head = e->next;
    if (e->next)
        e->next->prev = e->prev;
    else
        zc.tail = e->prev;
    e->prev = e->next = NULL;
}

static void lru_push_front(zarr_cached *e)
{
    e->prev = NULL;
    e->next = zc.head;
    if (zc.head)
        zc.head->prev = e;
    zc.head = e;
    if (!zc.tail)
        zc.tail = e;
}

/* Removes e from the table; frees it when no reader holds it.  Locked. */
static void table_remove_locked(zarr_cached *e)
{
    zarr_cached **pp = &zc.buckets[key_hash(&e->key) & (zc.nbuckets - 1)];
    while (*pp != e)
        pp = &(*pp)->hnext;
    *pp = e->hnext;
    lru_unlink(e);
    e->in_table = 0;
    zc.entries--;
    zc.bytes -= e->bytes;
    if (--e->refs == 0)
        entry_free(e);
}

static zarr_cached *table_find_locked(const zarr_cache_key *k)
{
    if (!zc.nbuckets)
        return NULL;
    for (zarr_cached *e = zc.buckets[key_hash(k) & (zc.nbuckets - 1)]; e; e = e->hnext)
        if (memcmp(&e->key, k, sizeof *k) == 0)
            return e;
    return NULL;
}

/* Doubles the bucket array when the table is fuller than one entry per
 * bucket; a failed allocation keeps the old (longer) chains. */
static void table_grow_locked(void)
{
    if (zc.entries < zc.nbuckets)
        return;
    size_t nb = zc.nbuckets ? zc.nbuckets * 2 : 256;
    zarr_cached **b = calloc(nb, sizeof *b);
    if (!b)
        return;
    for (size_t i = 0; i < zc.nbuckets; i++) {
        zarr_cached *e = zc.buckets[i];
        while (e) {
            zarr_cached *next = e->hnext;
            size_t j = key_hash(&e->key) & (nb - 1);
            e->hnext = b[j];
            b[j] = e;
            e = next;
        }
    }
    free(zc.buckets);
    zc.buckets = b;
    zc.nbuckets = nb;
}

static void evict_locked(void)
{
    while (zc.bytes > zc.limit && zc.tail)
        table_remove_locked(zc.tail);
}

uint64_t zarr_cache_new_id(void)
{
    pthread_mutex_lock(&zc.mu);
    uint64_t id = ++zc.next_id;
    pthread_mutex_unlock(&zc.mu);
    return id;
}

const zarr_cached *zarr_cache_get(const zarr_cache_key *k)
{
    pthread_mutex_lock(&zc.mu);
    zarr_cached *e = table_find_locked(k);
    if (e) {
        e->refs++;
        lru_unlink(e);
        lru_push_front(e);
        zc.hits++;
    } else {
        zc.misses++;
    }
    pthread_mutex_unlock(&zc.mu);
    return e;
}

const zarr_cached *zarr_cache_put(const zarr_cache_key *k, uint8_t *buf, size_t len,
                                  codec_vlen_item *items, size_t nitems)
{
    zarr_cached *e = calloc(1, sizeof *e);
    if (!e) {
        free(buf);
        free(items);
        return NULL;
    }
    e->key = *k;
    e->buf = buf;
    e->len = len;
    e->items = items;
    e->bytes = len + nitems * sizeof *items + sizeof *e;
    e->refs = 1;
    pthread_mutex_lock(&zc.mu);
    zarr_cached *old = table_find_locked(k);
    if (old) {
        /* Another reader decoded the same chunk meanwhile: share its copy. */
        old->refs++;
        pthread_mutex_unlock(&zc.mu);
        entry_free(e);
        return old;
    }
    if (zc.limit && e->bytes <= zc.limit / ZCACHE_MAX_SHARE) {
        table_grow_locked();
        if (zc.nbuckets) {
            zarr_cached **b = &zc.buckets[key_hash(k) & (zc.nbuckets - 1)];
            e->hnext = *b;
            *b = e;
            lru_push_front(e);
            e->in_table = 1;
            e->refs++;
            zc.entries++;
            zc.bytes += e->bytes;
            evict_locked();
        }
    }
    pthread_mutex_unlock(&zc.mu);
    return e;
}

void zarr_cache_release(const zarr_cached *c)
{
    if (!c)
        return;
    zarr_cached *e = (zarr_cached *)c;
    pthread_mutex_lock(&zc.mu);
    int last = --e->refs == 0;
    pthread_mutex_unlock(&zc.mu);
    if (last)
        entry_free(e);
}

const uint8_t *zarr_cached_buf(const zarr_cached *c, size_t *len,
                               const codec_vlen_item **items)
{
    *len = c->len;
    if (items)
        *items = c->items;
    return c->buf;
}

void zarr_cache_drop_store(uint64_t store_id)
{
    if (!store_id)
        return;
    pthread_mutex_lock(&zc.mu);
    zarr_cached *e = zc.head;
    while (e) {
        zarr_cached *next = e->next;
        if (e->key.store == store_id)
            table_remove_locked(e);
        e = next;
    }
    pthread_mutex_unlock(&zc.mu);
}

void zarr_chunk_cache_set_limit(size_t bytes)
{
    pthread_mutex_lock(&zc.mu);
    zc.limit = bytes;
    evict_locked();
    pthread_mutex_unlock(&zc.mu);
}

void zarr_chunk_cache_get_stats(zarr_chunk_cache_stats *out)
{
    pthread_mutex_lock(&zc.mu);
    out->bytes = zc.bytes;
    out->entries = zc.entries;
    out->limit = zc.limit;
    out->hits = zc.hits;
    out->misses = zc.misses;
    pthread_mutex_unlock(&zc.mu);
}
