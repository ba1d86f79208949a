/* storage/chunk_cache: the segments (a chunk read again outlives a scan of
 * chunks read once), the bound, chunks too large to keep, a second copy of
 * a chunk shared, and a store version's entries dropped with it while a
 * reader still holds one. */
#include <stdlib.h>
#include <string.h>

#include "storage/chunk_cache.h"
#include "tests/unit/unit.h"

#define CHUNK 1000

static chunk_cache_key key_of(uint64_t store, int64_t i)
{
    chunk_cache_key k;
    memset(&k, 0, sizeof k);
    k.store = store;
    k.array = 1;
    k.kind = CHUNK_CACHE_CHUNK;
    k.coords[0] = i;
    return k;
}

/* Puts chunk i of store (CHUNK bytes, each i) and drops the reference. */
static void put(chunk_cache *c, uint64_t store, int64_t i)
{
    uint8_t *b = malloc(CHUNK);
    if (!b)
        return;
    memset(b, (int)i, CHUNK);
    chunk_cache_key k = key_of(store, i);
    chunk_cache_release(chunk_cache_put(c, &k, b, CHUNK, NULL, 0));
}

/* Whether chunk i of store is kept (with its bytes); counts as a read. */
static int has(chunk_cache *c, uint64_t store, int64_t i)
{
    chunk_cache_key k = key_of(store, i);
    const chunk_cached *e = chunk_cache_get(c, &k);
    if (!e)
        return 0;
    size_t len;
    const uint8_t *b = chunk_cached_buf(e, &len, NULL);
    int ok = len == CHUNK && b[0] == (uint8_t)i && b[CHUNK - 1] == (uint8_t)i;
    chunk_cache_release(e);
    return ok ? 1 : -1;
}

void test_chunk_cache_segments(void)
{
    chunk_cache *c = chunk_cache_of(CHUNK_CACHE_HDF5);
    chunk_cache_stats st0, st;
    chunk_cache_get_stats(c, &st0);
    size_t limit = 8 * (CHUNK + 400); /* eight entries and their headers */
    chunk_cache_set_limit(c, limit);
    CHECK_EQ(chunk_cache_largest(c), limit / 4);
    uint64_t s = chunk_cache_new_id(), other = chunk_cache_new_id();
    CHECK(s && other && s != other);
    /* two chunks read again, then a scan of forty read once */
    put(c, s, 1);
    put(c, s, 2);
    CHECK_EQ(has(c, s, 1), 1);
    CHECK_EQ(has(c, s, 2), 1);
    for (int64_t i = 100; i < 140; i++) {
        put(c, s, i);
        chunk_cache_get_stats(c, &st);
        CHECK(st.bytes <= limit);
    }
    CHECK_EQ(has(c, s, 1), 1);
    CHECK_EQ(has(c, s, 2), 1);
    CHECK_EQ(has(c, s, 100), 0);
    CHECK_EQ(has(c, s, 139), 1);
    /* a second put of a kept chunk shares the first copy */
    chunk_cache_get_stats(c, &st0);
    put(c, s, 139);
    chunk_cache_get_stats(c, &st);
    CHECK_EQ(st.entries, st0.entries);
    /* larger than a quarter of the bound: handed back, not kept */
    uint8_t *big = calloc(1, limit / 2);
    chunk_cache_key bk = key_of(s, 7);
    const chunk_cached *e = big ? chunk_cache_put(c, &bk, big, limit / 2, NULL, 0) : NULL;
    CHECK(e != NULL);
    chunk_cache_release(e);
    CHECK_EQ(has(c, s, 7), 0);
    /* dropping a version: its entries go, another's stay, a held one lives
     * until released */
    put(c, other, 5);
    chunk_cache_key k1 = key_of(s, 1);
    const chunk_cached *held = chunk_cache_get(c, &k1);
    CHECK(held != NULL);
    chunk_cache_drop_store(c, s);
    CHECK_EQ(has(c, s, 1), 0);
    CHECK_EQ(has(c, s, 139), 0);
    CHECK_EQ(has(c, other, 5), 1);
    size_t len = 0;
    CHECK(held && chunk_cached_buf(held, &len, NULL)[0] == 1 && len == CHUNK);
    chunk_cache_release(held);
    chunk_cache_drop_store(c, other);
    chunk_cache_get_stats(c, &st);
    CHECK_EQ(st.entries, 0);
    CHECK_EQ(st.bytes, 0);
    /* off: nothing kept */
    chunk_cache_set_limit(c, 0);
    put(c, s, 3);
    CHECK_EQ(has(c, s, 3), 0);
    chunk_cache_set_limit(c, (size_t)64 << 20);
}
