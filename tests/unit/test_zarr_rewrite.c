/* A zarr store rewritten while a version of it is open (issue 19, "never
 * mixed"): the version notices any file it reads that changed after it
 * opened (storage/zarr/zarr_impl.h, zarr_dir), a chunk removed under it,
 * and keeps reading its own directory when the store's path is given to
 * another directory. */
#define _XOPEN_SOURCE 700
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "storage/chunk_cache.h"
#include "storage/node.h"
#include "storage/registry.h"
#include "storage/zarr/zarr.h"
#include "tests/unit/unit.h"

#define N 12
#define CHUNK 4

void zarr_test_put(const char *root, const char *rel, const void *data, size_t n);

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

/* Past the quiet time a version needs (ZARR_SETTLE_NS) and the kernel's
 * coarse clock tick, so files written before an open are older than the
 * version trusts. */
static void settle(void)
{
    struct timespec pause = {0, 560 * 1000 * 1000};
    nanosleep(&pause, NULL);
}

/* The chunk of array "a" holding positions [c * CHUNK, c * CHUNK + CHUNK),
 * each base + position. */
static void put_chunk(const char *dir, int c, int32_t base)
{
    int32_t v[CHUNK];
    for (int i = 0; i < CHUNK; i++)
        v[i] = base + c * CHUNK + i;
    char rel[64];
    snprintf(rel, sizeof rel, "a/%d", c);
    zarr_test_put(dir, rel, v, sizeof v);
}

static void put_store(const char *dir, int32_t base)
{
    const char *group = "{\"zarr_format\": 2}";
    char meta[256];
    snprintf(meta, sizeof meta,
             "{\"zarr_format\":2,\"shape\":[%d],\"chunks\":[%d],\"dtype\":\"<i4\","
             "\"compressor\":null,\"fill_value\":0,\"order\":\"C\",\"filters\":null}",
             N, CHUNK);
    zarr_test_put(dir, ".zgroup", group, strlen(group));
    zarr_test_put(dir, "a/.zarray", meta, strlen(meta));
    for (int c = 0; c < N / CHUNK; c++)
        put_chunk(dir, c, base);
}

/* Reads a[start, start + count) of the version root. */
static int read_a(node *root, int64_t start, int64_t count, int32_t *out)
{
    cellar_error err;
    cellar_error_clear(&err);
    node *a = NULL;
    if (node_child(root, "a", &a, &err))
        return -1;
    dim_sel s = {.start = start, .step = 1, .count = count};
    return node_read(a, &s, out, (size_t)count * sizeof *out, &err);
}

static node *open_settled(const char *dir)
{
    settle();
    node *root = NULL;
    cellar_error err;
    cellar_error_clear(&err);
    CHECK_EQ(zarr_open(dir, &root, &err), 0);
    return root;
}

void test_zarr_rewrite_noticed(void)
{
    char t[] = "/tmp/cellar-zrewrite-XXXXXX";
    if (!mkdtemp(t)) {
        CHECK(0);
        return;
    }
    chunk_cache_set_limit(chunk_cache_of(CHUNK_CACHE_ZARR), 0); /* every read goes to the files */
    int32_t v[N];
    put_store(t, 0);
    /* Opened right after a write (a writer may still be going): a read of
     * that file is noticed, though it changed before the version opened. */
    put_chunk(t, 0, 0);
    {
        node *early = NULL;
        cellar_error e0;
        cellar_error_clear(&e0);
        CHECK_EQ(zarr_open(t, &early, &e0), 0);
        CHECK_EQ(early ? read_a(early, 0, 4, v) : -1, 0);
        CHECK(early && zarr_changed_since_open(early) > 0);
        CHECK(early && zarr_settled_at(early) > zarr_changed_since_open(early));
        node_tree_free(early);
    }
    node *root = open_settled(t);
    if (!root)
        goto done;

    /* Untouched: read twice, nothing noticed. */
    CHECK_EQ(read_a(root, 0, N, v), 0);
    CHECK_EQ(v[5], 5);
    CHECK_EQ(read_a(root, 0, N, v), 0);
    CHECK_EQ(zarr_changed_since_open(root), 0);

    /* A chunk rewritten in place (same size, same inode, other values):
     * a read that does not reach it notices nothing, one that does does. */
    put_chunk(t, 2, 1000);
    CHECK_EQ(read_a(root, 0, 8, v), 0);
    CHECK_EQ(zarr_changed_since_open(root), 0);
    CHECK_EQ(read_a(root, 8, 4, v), 0);
    CHECK_EQ(v[0], 1008);
    int64_t first = zarr_changed_since_open(root);
    CHECK(first > 0);
    node_tree_free(root);

    /* A chunk removed under a version: read as the fill value, and noticed
     * (its directory changed). */
    root = open_settled(t);
    if (!root)
        goto done;
    char path[256];
    snprintf(path, sizeof path, "%s/a/1", t);
    CHECK_EQ(unlink(path), 0);
    CHECK_EQ(read_a(root, 4, 4, v), 0);
    CHECK_EQ(v[0], 0);
    CHECK(zarr_changed_since_open(root) >= first);
    node_tree_free(root);

    /* The store's path given to another directory (renamed aside, a new one
     * put in its place): the open version reads on in its own directory,
     * whole and unchanged, and a new open reads the new one. */
    put_store(t, 0);
    root = open_settled(t);
    if (!root)
        goto done;
    char aside[256];
    snprintf(aside, sizeof aside, "%s.aside", t);
    CHECK_EQ(rename(t, aside), 0);
    CHECK_EQ(mkdir(t, 0700), 0);
    put_store(t, 5000);
    CHECK_EQ(read_a(root, 0, N, v), 0);
    for (int i = 0; i < N; i++)
        CHECK_EQ(v[i], i);
    CHECK_EQ(zarr_changed_since_open(root), 0);
    node *fresh = open_settled(t);
    CHECK_EQ(fresh ? read_a(fresh, 0, N, v) : -1, 0);
    CHECK_EQ(v[3], 5003);
    node_tree_free(fresh);

    /* The old directory removed while its version is open: noticed. */
    nftw(aside, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    CHECK_EQ(read_a(root, 0, N, v), 0);
    CHECK(zarr_changed_since_open(root) > 0);
    node_tree_free(root);
done:
    chunk_cache_set_limit(chunk_cache_of(CHUNK_CACHE_ZARR), (size_t)64 << 20);
    nftw(t, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* Through the registry: a version whose files changed is no longer
 * current or unchanged, the next version of the name reads the new
 * values under an ETag none of the earlier versions had, and the mark
 * holds when that version in turn is replaced by one with the same root
 * metadata. */
void test_registry_zarr_rewrite(void)
{
    char t[] = "/tmp/cellar-rrewrite-XXXXXX";
    if (!mkdtemp(t)) {
        CHECK(0);
        return;
    }
    char dir[256];
    snprintf(dir, sizeof dir, "%s/s.zarr", t);
    CHECK_EQ(mkdir(dir, 0700), 0);
    chunk_cache_set_limit(chunk_cache_of(CHUNK_CACHE_ZARR), 0);
    put_store(dir, 0);
    settle();
    registry_config cfg = {.root = t, .max_open_stores = 4, .idle_seconds = 60};
    cellar_error err;
    cellar_error_clear(&err);
    registry *r = registry_new(&cfg, &err);
    store *v1 = NULL, *v2 = NULL, *v3 = NULL, *v4 = NULL;
    int32_t v[N];
    CHECK(r != NULL);
    if (!r)
        goto done;
    CHECK_EQ(registry_get(r, "s.zarr", &v1, &err), 0);
    if (!v1)
        goto done;
    char etag1[128];
    snprintf(etag1, sizeof etag1, "%s", store_etag(v1));
    CHECK_EQ(read_a(store_root(v1), 0, N, v), 0);
    CHECK(store_unchanged(v1));
    store_answered(v1); /* its ETag went out with an answer */

    /* Only a chunk changes: the root metadata (the identity on disk) stays. */
    put_chunk(dir, 1, 700);
    CHECK(store_unchanged(v1)); /* nothing read it yet */
    CHECK_EQ(read_a(store_root(v1), 4, 4, v), 0);
    CHECK(!store_unchanged(v1));
    settle();
    CHECK_EQ(registry_get(r, "s.zarr", &v2, &err), 0);
    CHECK(v2 != NULL && v2 != v1);
    if (!v2)
        goto done;
    CHECK(strcmp(store_etag(v2), etag1) != 0);
    CHECK_EQ(read_a(store_root(v2), 0, N, v), 0);
    CHECK_EQ(v[4], 704);
    CHECK_EQ(v[0], 0);
    CHECK(store_unchanged(v2));
    store_answered(v2);

    /* Changed again, back to the first values: a third ETag, not the first. */
    put_chunk(dir, 1, 0);
    CHECK_EQ(read_a(store_root(v2), 4, 4, v), 0);
    settle();
    CHECK_EQ(registry_get(r, "s.zarr", &v3, &err), 0);
    CHECK(v3 != NULL && v3 != v2);
    if (v3) {
        CHECK(strcmp(store_etag(v3), etag1) != 0);
        CHECK(strcmp(store_etag(v3), store_etag(v2)) != 0);
        CHECK_EQ(read_a(store_root(v3), 4, 4, v), 0);
        CHECK_EQ(v[0], 4);
    }
    /* A version that answered nothing before its files changed gave no
     * client its ETag: the next one keeps it, as a replica that opened
     * the store only after the rewrite has it. */
    char etag3[128];
    snprintf(etag3, sizeof etag3, "%s", v3 ? store_etag(v3) : "");
    put_chunk(dir, 1, 900);
    if (v3)
        CHECK_EQ(read_a(store_root(v3), 4, 4, v), 0);
    CHECK(v3 && !store_unchanged(v3));
    settle();
    CHECK_EQ(registry_get(r, "s.zarr", &v4, &err), 0);
    CHECK(v4 != NULL && v4 != v3);
    if (v4)
        CHECK_EQ(strcmp(store_etag(v4), etag3), 0);
done:
    store_release(v4);
    store_release(v3);
    store_release(v2);
    store_release(v1);
    registry_free(r);
    chunk_cache_set_limit(chunk_cache_of(CHUNK_CACHE_ZARR), (size_t)64 << 20);
    nftw(t, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}
