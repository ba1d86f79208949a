/* The bounded cache of remote bytes (storage/remote/remote_cache.h). */
#include "storage/remote/remote_cache.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/hash.h"

#define BUCKETS 4096

typedef struct entry {
    struct entry *next;             /* bucket chain */
    struct entry *newer, *older;    /* LRU list */
    uint64_t hash, off;
    size_t len;
    char *id;
    uint8_t *bytes;
} entry;

struct remote_cache {
    pthread_mutex_t lock;
    size_t limit, bytes, entries;
    uint64_t hits, misses;
    entry *buckets[BUCKETS];
    entry *newest, *oldest;
};

remote_cache *remote_cache_new(size_t limit)
{
    remote_cache *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->limit = limit;
    pthread_mutex_init(&c->lock, NULL);
    return c;
}

static void entry_free(entry *e)
{
    free(e->id);
    free(e->bytes);
    free(e);
}

void remote_cache_free(remote_cache *c)
{
    if (!c)
        return;
    for (entry *e = c->newest; e;) {
        entry *next = e->older;
        entry_free(e);
        e = next;
    }
    pthread_mutex_destroy(&c->lock);
    free(c);
}

static uint64_t key_hash(const char *id, uint64_t off, size_t len)
{
    uint64_t h = hash64(id, strlen(id));
    uint64_t parts[3] = {h, off, (uint64_t)len};
    return hash64(parts, sizeof parts);
}

static entry **find_locked(remote_cache *c, uint64_t h, const char *id, uint64_t off, size_t len)
{
    entry **p = &c->buckets[h % BUCKETS];
    for (; *p; p = &(*p)->next)
        if ((*p)->hash == h && (*p)->off == off && (*p)->len == len && !strcmp((*p)->id, id))
            return p;
    return p;
}

static void lru_unlink(remote_cache *c, entry *e)
{
    if (e->newer)
        e->newer->older = e->older;
    else
        c->newest = e->older;
    if (e->older)
        e->older->newer = e->newer;
    else
        c->oldest = e->newer;
    e->newer = e->older = NULL;
}

static void lru_push(remote_cache *c, entry *e)
{
    e->older = c->newest;
    e->newer = NULL;
    if (c->newest)
        c->newest->newer = e;
    c->newest = e;
    if (!c->oldest)
        c->oldest = e;
}

static void remove_locked(remote_cache *c, entry **slot)
{
    entry *e = *slot;
    *slot = e->next;
    lru_unlink(c, e);
    c->bytes -= e->len;
    c->entries--;
    entry_free(e);
}

int remote_cache_get_within(remote_cache *c, const char *id, uint64_t within, size_t wlen,
                            uint64_t off, size_t len, void *out)
{
    if (!c || off < within || len > wlen || off - within > wlen - len)
        return 0;
    uint64_t h = key_hash(id, within, wlen);
    pthread_mutex_lock(&c->lock);
    entry **p = find_locked(c, h, id, within, wlen);
    int found = *p != NULL;
    if (found) {
        memcpy(out, (*p)->bytes + (off - within), len);
        lru_unlink(c, *p);
        lru_push(c, *p);
        c->hits++;
    } else {
        c->misses++;
    }
    pthread_mutex_unlock(&c->lock);
    return found;
}

int remote_cache_contains(remote_cache *c, const char *id, uint64_t off, size_t len)
{
    if (!c)
        return 0;
    uint64_t h = key_hash(id, off, len);
    pthread_mutex_lock(&c->lock);
    int found = *find_locked(c, h, id, off, len) != NULL;
    pthread_mutex_unlock(&c->lock);
    return found;
}

int remote_cache_get(remote_cache *c, const char *id, uint64_t off, size_t len, void *out)
{
    return remote_cache_get_within(c, id, off, len, off, len, out);
}

void remote_cache_put(remote_cache *c, const char *id, uint64_t off, const void *bytes,
                      size_t len)
{
    if (!c || !len || len > c->limit / 4)
        return;
    entry *e = calloc(1, sizeof *e);
    if (!e)
        return;
    e->id = strdup(id);
    e->bytes = malloc(len);
    if (!e->id || !e->bytes) {
        entry_free(e);
        return;
    }
    memcpy(e->bytes, bytes, len);
    e->off = off;
    e->len = len;
    e->hash = key_hash(id, off, len);
    pthread_mutex_lock(&c->lock);
    entry **p = find_locked(c, e->hash, id, off, len);
    if (*p)
        remove_locked(c, p);
    e->next = c->buckets[e->hash % BUCKETS];
    c->buckets[e->hash % BUCKETS] = e;
    lru_push(c, e);
    c->bytes += len;
    c->entries++;
    while (c->bytes > c->limit && c->oldest) {
        entry *old = c->oldest;
        remove_locked(c, find_locked(c, old->hash, old->id, old->off, old->len));
    }
    pthread_mutex_unlock(&c->lock);
}

void remote_cache_get_stats(remote_cache *c, remote_cache_stats *out)
{
    memset(out, 0, sizeof *out);
    if (!c)
        return;
    pthread_mutex_lock(&c->lock);
    out->bytes = c->bytes;
    out->entries = c->entries;
    out->limit = c->limit;
    out->hits = c->hits;
    out->misses = c->misses;
    pthread_mutex_unlock(&c->lock);
}
