#include "storage/anndata/name_index.h"

#include "common/hash.h"

#include <stdlib.h>
#include <string.h>

/* The table holds 8-byte slots: the 1-based number of an entry (0 = empty)
 * and 32 bits of the hash to skip most string compares.  Entries keep the
 * row and where the name's bytes start in the pool (offsets, not pointers,
 * so the pool can grow).  About 32 bytes per name plus the name itself. */
typedef struct slot {
    uint32_t entry;
    uint32_t tag;
} slot;

typedef struct entry {
    int64_t pos;
    size_t off;
} entry;

struct name_index {
    slot *slots;
    size_t mask;        /* table size - 1 (a power of two) */
    entry *entries;     /* room of them */
    int64_t room;       /* names the table holds before it grows */
    int64_t capacity;   /* names it may ever hold */
    int64_t count;
    char *pool;
    size_t pool_len, pool_cap;
};

static uint64_t hash_name(const char *s)
{
    return hash64(s, strlen(s));
}

/* Names held before the first growth. */
#define NAME_INDEX_FIRST_ROOM ((int64_t)1 << 16)

/* Table slot of hash h: the first free one, or the one holding name. */
static size_t slot_of(const name_index *ix, uint64_t h, const char *name, int *found)
{
    uint32_t tag = (uint32_t)(h >> 32);
    size_t i = (size_t)h & ix->mask;
    *found = 0;
    for (;; i = (i + 1) & ix->mask) {
        const slot *sl = &ix->slots[i];
        if (!sl->entry)
            return i;
        if (sl->tag == tag && strcmp(ix->pool + ix->entries[sl->entry - 1].off, name) == 0) {
            *found = 1;
            return i;
        }
    }
}

/* Room for `room` names (at least the names held): entries reallocated,
 * the table (at most half full, a power of two) rebuilt.  -1 when out of
 * memory (ix unchanged). */
static int grow(name_index *ix, int64_t room)
{
    size_t size = 16;
    while (size / 2 < (size_t)room)
        size *= 2;
    slot *slots = calloc(size, sizeof *slots);
    entry *entries = realloc(ix->entries, (size_t)(room ? room : 1) * sizeof *entries);
    if (entries)
        ix->entries = entries;
    if (!slots || !entries) {
        free(slots);
        return -1;
    }
    free(ix->slots);
    ix->slots = slots;
    ix->mask = size - 1;
    ix->room = room;
    for (int64_t e = 0; e < ix->count; e++) {
        const char *name = ix->pool + ix->entries[e].off;
        uint64_t h = hash_name(name);
        size_t i = (size_t)h & ix->mask;
        while (ix->slots[i].entry)
            i = (i + 1) & ix->mask;
        ix->slots[i].entry = (uint32_t)(e + 1);
        ix->slots[i].tag = (uint32_t)(h >> 32);
    }
    return 0;
}

name_index *name_index_new(int64_t capacity, cellar_error *err)
{
    if (capacity < 0)
        capacity = 0;
    if ((uint64_t)capacity >= UINT32_MAX || (uint64_t)capacity > SIZE_MAX / 4 / sizeof(entry)) {
        cellar_fail(err, CELLAR_ENOMEM, "name index for %lld names is too large",
                    (long long)capacity);
        return NULL;
    }
    name_index *ix = calloc(1, sizeof *ix);
    if (!ix)
        goto oom;
    ix->capacity = capacity;
    /* The capacity is a frame's row count, from a shape: the table starts
     * small and grows with the names really added, so a shape that claims
     * a billion rows costs what its stored names cost. */
    if (grow(ix, capacity < NAME_INDEX_FIRST_ROOM ? capacity : NAME_INDEX_FIRST_ROOM))
        goto oom;
    return ix;
oom:
    name_index_free(ix);
    cellar_fail(err, CELLAR_ENOMEM, "out of memory building a name index");
    return NULL;
}

static int pool_put(name_index *ix, const char *name, size_t *off)
{
    size_t len = strlen(name) + 1;
    if (len > SIZE_MAX - ix->pool_len)
        return -1;
    if (ix->pool_len + len > ix->pool_cap) {
        size_t cap = ix->pool_cap ? ix->pool_cap : 4096;
        while (cap < ix->pool_len + len) {
            if (cap > SIZE_MAX / 2)
                return -1;
            cap *= 2;
        }
        char *p = realloc(ix->pool, cap);
        if (!p)
            return -1;
        ix->pool = p;
        ix->pool_cap = cap;
    }
    memcpy(ix->pool + ix->pool_len, name, len);
    *off = ix->pool_len;
    ix->pool_len += len;
    return 0;
}

int name_index_add(name_index *ix, const char *name, int64_t pos, cellar_error *err)
{
    uint64_t h = hash_name(name);
    int found;
    size_t i = slot_of(ix, h, name, &found);
    if (found)
        return 0;
    if (ix->count >= ix->capacity)
        return cellar_fail(err, CELLAR_EINTERNAL, "name index holds more than %lld names",
                           (long long)ix->capacity);
    if (ix->count == ix->room) {
        int64_t room = ix->room > ix->capacity / 2 ? ix->capacity : 2 * ix->room;
        if (grow(ix, room < 1 ? 1 : room))
            return cellar_fail(err, CELLAR_ENOMEM, "out of memory building a name index");
        i = slot_of(ix, h, name, &found);
    }
    size_t off;
    if (pool_put(ix, name, &off))
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory building a name index");
    ix->entries[ix->count].pos = pos;
    ix->entries[ix->count].off = off;
    ix->count++;
    ix->slots[i].entry = (uint32_t)ix->count;
    ix->slots[i].tag = (uint32_t)(h >> 32);
    return 0;
}

int64_t name_index_find(const name_index *ix, const char *name)
{
    uint64_t h = hash_name(name);
    uint32_t tag = (uint32_t)(h >> 32);
    for (size_t i = (size_t)h & ix->mask;; i = (i + 1) & ix->mask) {
        const slot *sl = &ix->slots[i];
        if (!sl->entry)
            return -1;
        const entry *e = &ix->entries[sl->entry - 1];
        if (sl->tag == tag && strcmp(ix->pool + e->off, name) == 0)
            return e->pos;
    }
}

int64_t name_index_count(const name_index *ix)
{
    return ix->count;
}

size_t name_index_bytes(const name_index *ix)
{
    return sizeof *ix + (ix->mask + 1) * sizeof(slot) +
           (size_t)(ix->room ? ix->room : 1) * sizeof(entry) + ix->pool_cap;
}

void name_index_free(name_index *ix)
{
    if (!ix)
        return;
    free(ix->slots);
    free(ix->entries);
    free(ix->pool);
    free(ix);
}
