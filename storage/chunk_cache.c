/* Caches of decoded chunks (see storage/chunk_cache.h).
 *
 * Each a table bounded in bytes, in two segments (a segmented LRU): a chunk
 * enters on probation and moves to the protected segment when it is read
 * again; eviction takes the least recently used chunk on probation first.
 * So a scan that reads many chunks once (a column index built, a large
 * array sent in pieces) cycles through probation and leaves the chunks that
 * slices read again in place.  The protected segment holds at most
 * PROTECTED_SHARE of the limit; its oldest go back on probation.  The lock
 * covers only the table: lookups, insertions and reference counts.
 * Decoding happens in the reader before chunk_cache_put, outside it.  An
 * entry evicted (or dropped with its store) while a reader still holds it
 * leaves the table at once and is freed by its last chunk_cache_release. */
#include "storage/chunk_cache.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "common/hash.h"

#define CHUNK_CACHE_DEFAULT_LIMIT ((size_t)64 << 20)
/* An entry larger than limit / MAX_SHARE is not kept, so one huge chunk
 * cannot flush everything else. */
#define MAX_SHARE 4
/* The protected segment's bound: limit * PROTECTED_PART / 4. */
#define PROTECTED_PART 3

enum { PROBATION = 0, PROTECTED = 1 };

struct chunk_cached {
    chunk_cache *cache;
    chunk_cache_key key;
    uint8_t *buf;
    size_t len, bytes;
    codec_vlen_item *items;
    int refs;    /* readers holding it, plus one while in the table */
    int in_table;
    int seg;                           /* PROBATION or PROTECTED */
    struct chunk_cached *hnext;        /* hash chain */
    struct chunk_cached *prev, *next;  /* its segment's list, head = most recent */
};

struct chunk_cache {
    pthread_mutex_t mu;
    chunk_cached **buckets;
    size_t nbuckets, entries, bytes, limit;
    uint64_t hits, misses;
    chunk_cached *head[2], *tail[2]; /* per segment */
    size_t seg_bytes[2];
};

static chunk_cache caches[CHUNK_CACHE_KINDS] = {
    [CHUNK_CACHE_ZARR] = {.mu = PTHREAD_MUTEX_INITIALIZER, .limit = CHUNK_CACHE_DEFAULT_LIMIT},
    [CHUNK_CACHE_HDF5] = {.mu = PTHREAD_MUTEX_INITIALIZER, .limit = CHUNK_CACHE_DEFAULT_LIMIT},
};

static _Atomic uint64_t last_id;

chunk_cache *chunk_cache_of(chunk_cache_kind kind)
{
    return &caches[kind];
}

uint64_t chunk_cache_new_id(void)
{
    return atomic_fetch_add(&last_id, 1) + 1;
}

static uint64_t key_hash(const chunk_cache_key *k)
{
    /* keys are zero-filled, so padding is 0 */
    return hash64(k, sizeof *k);
}

static void entry_free(chunk_cached *e)
{
    free(e->buf);
    free(e->items);
    free(e);
}

static void lru_unlink(chunk_cache *c, chunk_cached *e)
{
    int s = e->seg;
    if (e->prev)
        e->prev->next = e->next;
    else
        c->head[s] = e->next;
    if (e->next)
        e->next->prev = e->prev;
    else
        c->tail[s] = e->prev;
    e->prev = e->next = NULL;
    c->seg_bytes[s] -= e->bytes;
}

static void lru_push_front(chunk_cache *c, chunk_cached *e, int s)
{
    e->seg = s;
    e->prev = NULL;
    e->next = c->head[s];
    if (c->head[s])
        c->head[s]->prev = e;
    c->head[s] = e;
    if (!c->tail[s])
        c->tail[s] = e;
    c->seg_bytes[s] += e->bytes;
}

/* e read again: to the head of the protected segment, whose oldest go back
 * on probation while it is over its bound.  Locked. */
static void lru_promote(chunk_cache *c, chunk_cached *e)
{
    lru_unlink(c, e);
    lru_push_front(c, e, PROTECTED);
    size_t bound = c->limit / 4 * PROTECTED_PART;
    while (c->seg_bytes[PROTECTED] > bound && c->tail[PROTECTED] != e) {
        chunk_cached *old = c->tail[PROTECTED];
        lru_unlink(c, old);
        lru_push_front(c, old, PROBATION);
    }
}

/* Removes e from the table; frees it when no reader holds it.  Locked. */
static void table_remove_locked(chunk_cache *c, chunk_cached *e)
{
    chunk_cached **pp = &c->buckets[key_hash(&e->key) & (c->nbuckets - 1)];
    while (*pp != e)
        pp = &(*pp)->hnext;
    *pp = e->hnext;
    lru_unlink(c, e);
    e->in_table = 0;
    c->entries--;
    c->bytes -= e->bytes;
    if (--e->refs == 0)
        entry_free(e);
}

static chunk_cached *table_find_locked(const chunk_cache *c, const chunk_cache_key *k)
{
    if (!c->nbuckets)
        return NULL;
    for (chunk_cached *e = c->buckets[key_hash(k) & (c->nbuckets - 1)]; e; e = e->hnext)
        if (memcmp(&e->key, k, sizeof *k) == 0)
            return e;
    return NULL;
}

/* Doubles the bucket array when the table is fuller than one entry per
 * bucket; a failed allocation keeps the old (longer) chains. */
static void table_grow_locked(chunk_cache *c)
{
    if (c->entries < c->nbuckets)
        return;
    size_t nb = c->nbuckets ? c->nbuckets * 2 : 256;
    chunk_cached **b = calloc(nb, sizeof *b);
    if (!b)
        return;
    for (size_t i = 0; i < c->nbuckets; i++) {
        chunk_cached *e = c->buckets[i];
        while (e) {
            chunk_cached *next = e->hnext;
            size_t j = key_hash(&e->key) & (nb - 1);
            e->hnext = b[j];
            b[j] = e;
            e = next;
        }
    }
    free(c->buckets);
    c->buckets = b;
    c->nbuckets = nb;
}

static void evict_locked(chunk_cache *c)
{
    while (c->bytes > c->limit && (c->tail[PROBATION] || c->tail[PROTECTED]))
        table_remove_locked(c, c->tail[PROBATION] ? c->tail[PROBATION] : c->tail[PROTECTED]);
}

const chunk_cached *chunk_cache_get(chunk_cache *c, const chunk_cache_key *k)
{
    pthread_mutex_lock(&c->mu);
    chunk_cached *e = table_find_locked(c, k);
    if (e) {
        e->refs++;
        lru_promote(c, e);
        c->hits++;
    } else {
        c->misses++;
    }
    pthread_mutex_unlock(&c->mu);
    return e;
}

const chunk_cached *chunk_cache_put(chunk_cache *c, const chunk_cache_key *k, uint8_t *buf,
                                    size_t len, codec_vlen_item *items, size_t nitems)
{
    chunk_cached *e = calloc(1, sizeof *e);
    if (!e) {
        free(buf);
        free(items);
        return NULL;
    }
    e->cache = c;
    e->key = *k;
    e->buf = buf;
    e->len = len;
    e->items = items;
    e->bytes = len + nitems * sizeof *items + sizeof *e;
    e->refs = 1;
    pthread_mutex_lock(&c->mu);
    chunk_cached *old = table_find_locked(c, k);
    if (old) {
        /* Another reader decoded the same chunk meanwhile: share its copy. */
        old->refs++;
        pthread_mutex_unlock(&c->mu);
        entry_free(e);
        return old;
    }
    if (c->limit && e->bytes <= c->limit / MAX_SHARE) {
        table_grow_locked(c);
        if (c->nbuckets) {
            chunk_cached **b = &c->buckets[key_hash(k) & (c->nbuckets - 1)];
            e->hnext = *b;
            *b = e;
            lru_push_front(c, e, PROBATION);
            e->in_table = 1;
            e->refs++;
            c->entries++;
            c->bytes += e->bytes;
            evict_locked(c);
        }
    }
    pthread_mutex_unlock(&c->mu);
    return e;
}

void chunk_cache_release(const chunk_cached *ref)
{
    if (!ref)
        return;
    chunk_cached *e = (chunk_cached *)ref;
    chunk_cache *c = e->cache;
    pthread_mutex_lock(&c->mu);
    int last = --e->refs == 0;
    pthread_mutex_unlock(&c->mu);
    if (last)
        entry_free(e);
}

const uint8_t *chunk_cached_buf(const chunk_cached *ref, size_t *len,
                                const codec_vlen_item **items)
{
    *len = ref->len;
    if (items)
        *items = ref->items;
    return ref->buf;
}

void chunk_cache_drop_store(chunk_cache *c, uint64_t store_id)
{
    if (!store_id)
        return;
    pthread_mutex_lock(&c->mu);
    for (int s = PROBATION; s <= PROTECTED; s++) {
        chunk_cached *e = c->head[s];
        while (e) {
            chunk_cached *next = e->next;
            if (e->key.store == store_id)
                table_remove_locked(c, e);
            e = next;
        }
    }
    pthread_mutex_unlock(&c->mu);
}

void chunk_cache_set_limit(chunk_cache *c, size_t bytes)
{
    pthread_mutex_lock(&c->mu);
    c->limit = bytes;
    evict_locked(c);
    pthread_mutex_unlock(&c->mu);
}

size_t chunk_cache_largest(chunk_cache *c)
{
    pthread_mutex_lock(&c->mu);
    size_t n = c->limit / MAX_SHARE;
    pthread_mutex_unlock(&c->mu);
    return n;
}

void chunk_cache_get_stats(chunk_cache *c, chunk_cache_stats *out)
{
    pthread_mutex_lock(&c->mu);
    out->bytes = c->bytes;
    out->entries = c->entries;
    out->limit = c->limit;
    out->hits = c->hits;
    out->misses = c->misses;
    pthread_mutex_unlock(&c->mu);
}
