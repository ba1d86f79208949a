/* The answer cache: hits and misses by exact key, the byte bound with least
 * recently used entries out first, values released exactly once. */
#include <stdlib.h>
#include <string.h>

#include "server/answer_cache.h"
#include "tests/unit/unit.h"

typedef struct counted {
    int *released; /* incremented when the cache lets the value go */
    int id;
} counted;

static void release_counted(void *value)
{
    counted *c = value;
    (*c->released)++;
    free(c);
}

static counted *make_value(int *released, int id)
{
    counted *c = malloc(sizeof *c);
    c->released = released;
    c->id = id;
    return c;
}

static int read_id(void *value, void *arg)
{
    (void)arg;
    return ((counted *)value)->id;
}

/* The id cached under key, or -1 on a miss. */
static int lookup(answer_cache *c, const char *key)
{
    int id = -1;
    if (!answer_cache_use(c, key, strlen(key), read_id, NULL, &id))
        return -1;
    return id;
}

static void put(answer_cache *c, const char *key, int *released, int id, size_t bytes)
{
    answer_cache_put(c, key, strlen(key), make_value(released, id), bytes, release_counted);
}

void test_answer_cache(void)
{
    int released = 0;
    answer_cache *c = answer_cache_new(64 * 1024);
    CHECK(c != NULL);
    CHECK_EQ(lookup(c, "a"), -1);
    put(c, "a", &released, 1, 1000);
    put(c, "b", &released, 2, 1000);
    CHECK_EQ(lookup(c, "a"), 1);
    CHECK_EQ(lookup(c, "b"), 2);
    CHECK_EQ(lookup(c, "a\n"), -1); /* keys match exactly, by length too */
    CHECK_EQ(lookup(c, ""), -1);

    /* A second value for a cached key is released, the first one stays. */
    put(c, "a", &released, 3, 1000);
    CHECK_EQ(released, 1);
    CHECK_EQ(lookup(c, "a"), 1);

    /* Over max_bytes / 8 is never kept. */
    put(c, "huge", &released, 4, 9000);
    CHECK_EQ(released, 2);
    CHECK_EQ(lookup(c, "huge"), -1);

    /* Filling past the bound evicts the least recently used: "b" was used
     * before "a", so "b" goes first. */
    CHECK_EQ(lookup(c, "a"), 1);
    char key[32];
    for (int i = 0; i < 60; i++) {
        snprintf(key, sizeof key, "fill-%d", i);
        put(c, key, &released, 100 + i, 1000);
        CHECK_EQ(lookup(c, "a"), 1); /* kept in use, so never the oldest */
    }
    CHECK_EQ(lookup(c, "b"), -1);
    answer_cache_stats st;
    answer_cache_get_stats(c, &st);
    CHECK(st.bytes <= 64 * 1024);
    CHECK(st.evictions > 0);
    CHECK(st.hits > 0 && st.misses > 0);
    CHECK_EQ(released + (int)st.entries, 4 + 60);

    answer_cache_clear(c);
    answer_cache_get_stats(c, &st);
    CHECK_EQ(st.entries, 0);
    CHECK_EQ(st.bytes, 0);
    CHECK_EQ(released, 4 + 60);
    CHECK_EQ(lookup(c, "a"), -1);
    put(c, "a", &released, 5, 1000);
    answer_cache_free(c);
    CHECK_EQ(released, 4 + 61);

    /* A disabled cache keeps nothing and releases at once. */
    released = 0;
    c = answer_cache_new(0);
    put(c, "a", &released, 1, 10);
    CHECK_EQ(released, 1);
    CHECK_EQ(lookup(c, "a"), -1);
    answer_cache_free(c);

    /* Many keys: the table grows and every key is still found. */
    released = 0;
    c = answer_cache_new(64u << 20);
    for (int i = 0; i < 5000; i++) {
        snprintf(key, sizeof key, "k%d", i);
        put(c, key, &released, i, 16);
    }
    int found = 0;
    for (int i = 0; i < 5000; i++) {
        snprintf(key, sizeof key, "k%d", i);
        found += lookup(c, key) == i;
    }
    CHECK_EQ(found, 5000);
    answer_cache_free(c);
    CHECK_EQ(released, 5000);
}
