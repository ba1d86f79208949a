/* The bounded cache of remote bytes (storage/remote/remote_cache.h). */
#include "storage/remote/remote_cache.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/hash.h"

#define BUCKETS 4096

typedef struct entry {
    struct entry *next;             /* bucket chain */
    struct entry *newer, *older;    /* LRU list */
    uint64_t hash, off;
    size_t len;
    char *id;
    uint8_t *bytes;                 /* NULL: spilled, its bytes in file number spill */
    uint64_t spill;
} entry;

/* Entries in memory and entries spilled to files of dir are kept apart:
 * each list its own LRU order and bound. */
typedef struct tier {
    size_t limit, bytes, entries;
    entry *newest, *oldest;
} tier;

struct remote_cache {
    pthread_mutex_t lock;
    tier mem, disk;
    uint64_t hits, misses, disk_hits;
    entry *buckets[BUCKETS];
    char *dir;                      /* NULL: nothing spills */
    uint64_t next_spill;
};

remote_cache *remote_cache_new(size_t limit)
{
    remote_cache *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->mem.limit = limit;
    pthread_mutex_init(&c->lock, NULL);
    return c;
}

static int errno_is_not_exist(void)
{
    return errno != EEXIST;
}

static void spill_path(const remote_cache *c, uint64_t n, char *out, size_t size)
{
    snprintf(out, size, "%s/%016" PRIx64 ".bin", c->dir, n);
}

int remote_cache_spill_to(remote_cache *c, const char *cache_dir, size_t limit)
{
    char dir[4096];
    int n = snprintf(dir, sizeof dir, "%s/remote-%ld", cache_dir, (long)getpid());
    if (n < 0 || (size_t)n >= sizeof dir - 32 || (mkdir(dir, 0700) != 0 && errno_is_not_exist()))
        return -1;
    c->dir = strdup(dir);
    c->disk.limit = limit;
    return c->dir ? 0 : -1;
}

static void entry_free(const remote_cache *c, entry *e)
{
    if (!e->bytes && e->spill && c->dir) {
        char path[4200];
        spill_path(c, e->spill, path, sizeof path);
        unlink(path);
    }
    free(e->id);
    free(e->bytes);
    free(e);
}

static void tier_free(const remote_cache *c, tier *t)
{
    for (entry *e = t->newest; e;) {
        entry *next = e->older;
        entry_free(c, e);
        e = next;
    }
}

void remote_cache_free(remote_cache *c)
{
    if (!c)
        return;
    tier_free(c, &c->mem);
    tier_free(c, &c->disk);
    if (c->dir)
        rmdir(c->dir);
    free(c->dir);
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

static tier *tier_of(remote_cache *c, const entry *e)
{
    return e->bytes ? &c->mem : &c->disk;
}

static void lru_unlink(tier *t, entry *e)
{
    if (e->newer)
        e->newer->older = e->older;
    else
        t->newest = e->older;
    if (e->older)
        e->older->newer = e->newer;
    else
        t->oldest = e->newer;
    e->newer = e->older = NULL;
}

static void lru_push(tier *t, entry *e)
{
    e->older = t->newest;
    e->newer = NULL;
    if (t->newest)
        t->newest->newer = e;
    t->newest = e;
    if (!t->oldest)
        t->oldest = e;
}

/* Unlinks *slot from its chain and tier (the caller frees it). */
static entry *unlink_locked(remote_cache *c, entry **slot)
{
    entry *e = *slot;
    *slot = e->next;
    tier *t = tier_of(c, e);
    lru_unlink(t, e);
    t->bytes -= e->len;
    t->entries--;
    return e;
}

static void remove_locked(remote_cache *c, entry **slot)
{
    entry_free(c, unlink_locked(c, slot));
}

/* Writes e's bytes to a new spill file; 0, or -1 (e unchanged). */
static int spill_write(remote_cache *c, entry *e, uint64_t n)
{
    char path[4200], tmp[4300];
    spill_path(c, n, path, sizeof path);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return -1;
    size_t done = 0;
    while (done < e->len) {
        ssize_t w = write(fd, e->bytes + done, e->len - done);
        if (w <= 0) {
            close(fd);
            unlink(tmp);
            return -1;
        }
        done += (size_t)w;
    }
    if (close(fd) != 0 || rename(tmp, path) != 0) {
        unlink(tmp);
        return -1;
    }
    return 0;
}

/* Reads spilled e's [skip, skip + n) into out; 0 or -1. */
static int spill_read(const remote_cache *c, const entry *e, size_t skip, size_t n, void *out)
{
    char path[4200];
    spill_path(c, e->spill, path, sizeof path);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    struct stat st;
    int ok = fstat(fd, &st) == 0 && (uint64_t)st.st_size == e->len;
    size_t done = 0;
    while (ok && done < n) {
        ssize_t r = pread(fd, (uint8_t *)out + done, n - done, (off_t)(skip + done));
        ok = r > 0;
        done += ok ? (size_t)r : 0;
    }
    close(fd);
    return ok ? 0 : -1;
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
    if (found && (*p)->bytes) {
        memcpy(out, (*p)->bytes + (off - within), len);
        lru_unlink(&c->mem, *p);
        lru_push(&c->mem, *p);
        c->hits++;
    } else if (found) {
        /* Spilled: read under the lock (a later put may replace the file). */
        found = spill_read(c, *p, (size_t)(off - within), len, out) == 0;
        if (found) {
            lru_unlink(&c->disk, *p);
            lru_push(&c->disk, *p);
            c->hits++;
            c->disk_hits++;
        } else {
            remove_locked(c, p);
            c->misses++;
        }
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

/* Moves the memory tier's least recently used entries to disk (or drops
 * them) while it is over its bound, and drops the disk tier's oldest past
 * its own.  Lock held. */
static void enforce_locked(remote_cache *c)
{
    while (c->mem.bytes > c->mem.limit && c->mem.oldest) {
        entry *old = c->mem.oldest;
        entry **slot = find_locked(c, old->hash, old->id, old->off, old->len);
        if (!c->dir || old->len > c->disk.limit / 4) {
            remove_locked(c, slot);
            continue;
        }
        entry *e = unlink_locked(c, slot);
        uint64_t n = ++c->next_spill;
        if (spill_write(c, e, n) != 0) {
            entry_free(c, e);
            continue;
        }
        free(e->bytes);
        e->bytes = NULL;
        e->spill = n;
        e->next = c->buckets[e->hash % BUCKETS];
        c->buckets[e->hash % BUCKETS] = e;
        lru_push(&c->disk, e);
        c->disk.bytes += e->len;
        c->disk.entries++;
    }
    while (c->disk.bytes > c->disk.limit && c->disk.oldest) {
        entry *old = c->disk.oldest;
        remove_locked(c, find_locked(c, old->hash, old->id, old->off, old->len));
    }
}

void remote_cache_put(remote_cache *c, const char *id, uint64_t off, const void *bytes,
                      size_t len)
{
    if (!c || !len || len > c->mem.limit / 4)
        return;
    entry *e = calloc(1, sizeof *e);
    if (!e)
        return;
    e->id = strdup(id);
    e->bytes = malloc(len);
    if (!e->id || !e->bytes) {
        entry_free(c, e);
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
    lru_push(&c->mem, e);
    c->mem.bytes += len;
    c->mem.entries++;
    enforce_locked(c);
    pthread_mutex_unlock(&c->lock);
}

void remote_cache_get_stats(remote_cache *c, remote_cache_stats *out)
{
    memset(out, 0, sizeof *out);
    if (!c)
        return;
    pthread_mutex_lock(&c->lock);
    out->bytes = c->mem.bytes;
    out->entries = c->mem.entries;
    out->limit = c->mem.limit;
    out->hits = c->hits;
    out->misses = c->misses;
    out->disk_bytes = c->disk.bytes;
    out->disk_entries = c->disk.entries;
    out->disk_hits = c->disk_hits;
    pthread_mutex_unlock(&c->lock);
}
