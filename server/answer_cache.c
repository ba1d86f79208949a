#include "server/answer_cache.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct entry {
    struct entry *bucket_next;
    struct entry *lru_prev, *lru_next; /* lru_next: towards the least recently used */
    uint64_t hash;
    void *value;
    answer_release_fn release;
    size_t cost;                       /* value bytes + key + entry */
    size_t key_len;
    char key[];
} entry;

struct answer_cache {
    pthread_mutex_t lock;
    size_t max_bytes, max_entry_bytes;
    entry **buckets;
    size_t n_buckets;                  /* a power of two */
    entry *lru_head, *lru_tail;        /* head: most recently used */
    answer_cache_stats stats;
};

enum { INITIAL_BUCKETS = 256 };

/* Eight bytes a step, each folded in by a multiply and a shift: keys are a
 * few hundred bytes and hashed on every cacheable request. */
static uint64_t hash_key(const char *key, size_t len)
{
    const uint64_t m = 0x9e3779b97f4a7c15ull;
    uint64_t h = len * m;
    size_t i = 0;
    for (; i + 8 <= len; i += 8) {
        uint64_t w;
        memcpy(&w, key + i, 8);
        h = (h ^ w) * m;
        h ^= h >> 29;
    }
    uint64_t tail = 0;
    memcpy(&tail, key + i, len - i);
    h = (h ^ tail) * m;
    return h ^ (h >> 32);
}

answer_cache *answer_cache_new(size_t max_bytes)
{
    answer_cache *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->buckets = calloc(INITIAL_BUCKETS, sizeof *c->buckets);
    if (!c->buckets) {
        free(c);
        return NULL;
    }
    c->n_buckets = INITIAL_BUCKETS;
    c->max_bytes = max_bytes;
    c->max_entry_bytes = max_bytes / 8;
    pthread_mutex_init(&c->lock, NULL);
    return c;
}

static void lru_unlink(answer_cache *c, entry *e)
{
    if (e->lru_prev)
        e->lru_prev->lru_next = e->lru_next;
    else
        c->lru_head = e->lru_next;
    if (e->lru_next)
        e->lru_next->lru_prev = e->lru_prev;
    else
        c->lru_tail = e->lru_prev;
    e->lru_prev = e->lru_next = NULL;
}

static void lru_push_front(answer_cache *c, entry *e)
{
    e->lru_prev = NULL;
    e->lru_next = c->lru_head;
    if (c->lru_head)
        c->lru_head->lru_prev = e;
    c->lru_head = e;
    if (!c->lru_tail)
        c->lru_tail = e;
}

static entry **bucket_of(answer_cache *c, uint64_t hash)
{
    return &c->buckets[hash & (c->n_buckets - 1)];
}

static entry *find_locked(answer_cache *c, const char *key, size_t key_len, uint64_t hash)
{
    for (entry *e = *bucket_of(c, hash); e; e = e->bucket_next)
        if (e->hash == hash && e->key_len == key_len && memcmp(e->key, key, key_len) == 0)
            return e;
    return NULL;
}

/* Unlinks e from its bucket and the LRU list; the caller releases it. */
static void remove_locked(answer_cache *c, entry *e)
{
    for (entry **p = bucket_of(c, e->hash); *p; p = &(*p)->bucket_next) {
        if (*p == e) {
            *p = e->bucket_next;
            break;
        }
    }
    lru_unlink(c, e);
    c->stats.bytes -= e->cost;
    c->stats.entries--;
}

static void entry_free(entry *e)
{
    if (e->release)
        e->release(e->value);
    free(e);
}

/* Doubles the bucket array when entries outnumber buckets; on failure the
 * table just stays denser. */
static void maybe_grow_locked(answer_cache *c)
{
    if (c->stats.entries < c->n_buckets)
        return;
    size_t n = c->n_buckets * 2;
    entry **grown = calloc(n, sizeof *grown);
    if (!grown)
        return;
    for (size_t i = 0; i < c->n_buckets; i++) {
        for (entry *e = c->buckets[i], *next; e; e = next) {
            next = e->bucket_next;
            entry **b = &grown[e->hash & (n - 1)];
            e->bucket_next = *b;
            *b = e;
        }
    }
    free(c->buckets);
    c->buckets = grown;
    c->n_buckets = n;
}

int answer_cache_use(answer_cache *c, const char *key, size_t key_len,
                     int (*use)(void *value, void *arg), void *arg, int *use_rc)
{
    if (!c || c->max_bytes == 0)
        return 0;
    uint64_t hash = hash_key(key, key_len);
    pthread_mutex_lock(&c->lock);
    entry *e = find_locked(c, key, key_len, hash);
    if (e) {
        c->stats.hits++;
        if (c->lru_head != e) {
            lru_unlink(c, e);
            lru_push_front(c, e);
        }
        *use_rc = use(e->value, arg);
    } else {
        c->stats.misses++;
    }
    pthread_mutex_unlock(&c->lock);
    return e != NULL;
}

void answer_cache_put(answer_cache *c, const char *key, size_t key_len, void *value,
                      size_t bytes, answer_release_fn release)
{
    size_t cost = bytes + key_len + sizeof(entry);
    entry *e = NULL;
    if (c && cost <= c->max_entry_bytes)
        e = malloc(sizeof *e + key_len);
    if (!e) {
        if (release)
            release(value);
        return;
    }
    memset(e, 0, sizeof *e);
    e->hash = hash_key(key, key_len);
    e->value = value;
    e->release = release;
    e->cost = cost;
    e->key_len = key_len;
    memcpy(e->key, key, key_len);

    entry *victims = NULL; /* released after the lock is dropped */
    pthread_mutex_lock(&c->lock);
    if (find_locked(c, key, key_len, e->hash)) {
        e->lru_next = victims; /* another thread kept the same answer first */
        victims = e;
    } else {
        while (c->lru_tail && c->stats.bytes + cost > c->max_bytes) {
            entry *old = c->lru_tail;
            remove_locked(c, old);
            c->stats.evictions++;
            old->lru_next = victims;
            victims = old;
        }
        entry **b = bucket_of(c, e->hash);
        e->bucket_next = *b;
        *b = e;
        lru_push_front(c, e);
        c->stats.bytes += cost;
        c->stats.entries++;
        maybe_grow_locked(c);
    }
    pthread_mutex_unlock(&c->lock);
    while (victims) {
        entry *next = victims->lru_next;
        entry_free(victims);
        victims = next;
    }
}

static entry *take_all_locked(answer_cache *c)
{
    entry *all = c->lru_head;
    c->lru_head = c->lru_tail = NULL;
    memset(c->buckets, 0, c->n_buckets * sizeof *c->buckets);
    c->stats.bytes = 0;
    c->stats.entries = 0;
    return all;
}

static void free_chain(entry *e)
{
    while (e) {
        entry *next = e->lru_next;
        entry_free(e);
        e = next;
    }
}

void answer_cache_clear(answer_cache *c)
{
    if (!c)
        return;
    pthread_mutex_lock(&c->lock);
    entry *all = take_all_locked(c);
    pthread_mutex_unlock(&c->lock);
    free_chain(all);
}

void answer_cache_free(answer_cache *c)
{
    if (!c)
        return;
    free_chain(take_all_locked(c));
    free(c->buckets);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

void answer_cache_get_stats(answer_cache *c, answer_cache_stats *out)
{
    memset(out, 0, sizeof *out);
    if (!c)
        return;
    pthread_mutex_lock(&c->lock);
    *out = c->stats;
    pthread_mutex_unlock(&c->lock);
}
