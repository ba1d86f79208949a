/* The zarr reader's per-chunk grouping and its decoded-chunk cache, on
 * hand-made multi-chunk arrays: every selection is compared with the values
 * the arrays were written from and with a naive read of one element at a
 * time. */
#define _XOPEN_SOURCE 700
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zstd.h>

#include "storage/chunk_cache.h"
#include "storage/node.h"
#include "storage/zarr/zarr.h"
#include "tests/unit/unit.h"

#define ROWS 7
#define COLS 10
#define CR 3 /* chunk rows: the last chunk row is partial (7 = 3 + 3 + 1) */
#define CC 4 /* chunk columns: the last chunk column is partial */

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

/* Writes dir/rel, making its directories (tests/unit/test_zarr.c). */
void zarr_test_put(const char *root, const char *rel, const void *data, size_t n);
#define put_file zarr_test_put

static int32_t value_at(int64_t r, int64_t c)
{
    return (int32_t)(r * 1000 + c);
}

/* A v2 int32 array ROWS x COLS in CR x CC chunks, uncompressed, C or F
 * order; edge chunks are full size with padding, as zarr writes them. */
static void put_grid(const char *dir, const char *name, char order)
{
    char meta[512], rel[256];
    snprintf(meta, sizeof meta,
             "{\"zarr_format\":2,\"shape\":[%d,%d],\"chunks\":[%d,%d],\"dtype\":\"<i4\","
             "\"compressor\":null,\"fill_value\":-1,\"order\":\"%c\",\"filters\":null}",
             ROWS, COLS, CR, CC, order);
    snprintf(rel, sizeof rel, "%s/.zarray", name);
    put_file(dir, rel, meta, strlen(meta));
    for (int gr = 0; gr * CR < ROWS; gr++) {
        for (int gc = 0; gc * CC < COLS; gc++) {
            int32_t chunk[CR * CC];
            for (int i = 0; i < CR; i++)
                for (int j = 0; j < CC; j++)
                    chunk[order == 'C' ? i * CC + j : j * CR + i] =
                        value_at(gr * CR + i, gc * CC + j);
            snprintf(rel, sizeof rel, "%s/%d.%d", name, gr, gc);
            put_file(dir, rel, chunk, sizeof chunk);
        }
    }
}

static dim_sel sel_slice(int64_t start, int64_t step, int64_t count)
{
    dim_sel s = {start, step, count, NULL};
    return s;
}

static dim_sel sel_list(const int64_t *idx, int64_t count)
{
    dim_sel s = {0, 1, count, idx};
    return s;
}

/* Reads sel[0] x sel[1] in one call and element by element; both must match
 * the written values. */
static void check_read(node *n, const dim_sel *sel)
{
    int64_t nr = sel[0].count, nc = sel[1].count;
    int32_t *got = calloc((size_t)(nr * nc) + 1, sizeof *got);
    cellar_error err;
    cellar_error_clear(&err);
    CHECK_EQ(node_read(n, sel, got, (size_t)(nr * nc) * 4, &err), 0);
    for (int64_t i = 0; i < nr; i++) {
        for (int64_t j = 0; j < nc; j++) {
            int64_t r = dim_sel_at(&sel[0], i), c = dim_sel_at(&sel[1], j);
            int32_t one = 0;
            dim_sel e[2] = {sel_slice(r, 1, 1), sel_slice(c, 1, 1)};
            CHECK_EQ(node_read(n, e, &one, 4, &err), 0);
            CHECK_EQ(got[i * nc + j], one);
            CHECK_EQ(got[i * nc + j], value_at(r, c));
        }
    }
    free(got);
}

static node *child(node *root, const char *name)
{
    node *n = NULL;
    cellar_error err;
    cellar_error_clear(&err);
    CHECK_EQ(node_child(root, name, &n, &err), 0);
    return n;
}

void test_zarr_chunk_grouping(void)
{
    char t[] = "/tmp/cellar-zchunks-XXXXXX";
    if (!mkdtemp(t)) {
        CHECK(0);
        return;
    }
    put_file(t, ".zgroup", "{\"zarr_format\":2}", 17);
    put_grid(t, "c", 'C');
    put_grid(t, "f", 'F');
    node *root = NULL;
    cellar_error err;
    cellar_error_clear(&err);
    CHECK_EQ(zarr_open(t, &root, &err), 0);
    static const int64_t rows_list[] = {6, 0, 3, 3, 5, 1};
    static const int64_t rows_sorted[] = {0, 2, 3, 4, 6};
    static const int64_t cols_list[] = {9, 0, 4, 5, 6, 7, 3};
    static const int64_t cols_run[] = {2, 3, 4, 5, 6};
    const dim_sel rsels[] = {
        sel_slice(0, 1, ROWS),   sel_slice(1, 1, 6),  sel_slice(2, 1, 2),
        sel_slice(0, 2, 4),      sel_slice(6, -1, 7), sel_slice(5, -2, 3),
        sel_list(rows_list, 6),  sel_list(rows_sorted, 5),
    };
    const dim_sel csels[] = {
        sel_slice(0, 1, COLS),   sel_slice(3, 1, 7),  sel_slice(9, 1, 1),
        sel_slice(1, 3, 3),      sel_slice(9, -1, 10), sel_slice(8, -3, 3),
        sel_list(cols_list, 7),  sel_list(cols_run, 5),
    };
    const char *names[] = {"c", "f"};
    for (size_t a = 0; root && a < 2; a++) {
        node *n = child(root, names[a]);
        if (!n)
            continue;
        for (size_t i = 0; i < sizeof rsels / sizeof *rsels; i++) {
            for (size_t j = 0; j < sizeof csels / sizeof *csels; j++) {
                dim_sel sel[2] = {rsels[i], csels[j]};
                check_read(n, sel);
            }
        }
    }
    node_tree_free(root);
    nftw(t, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* A v3 1-D int32 array of 40 in shards of 20 holding zstd inner chunks of 5,
 * values base + i; the index at the end, without a checksum. */
static void put_sharded(const char *dir, int32_t base)
{
    const char *meta =
        "{\"zarr_format\":3,\"node_type\":\"array\",\"shape\":[40],\"data_type\":\"int32\","
        "\"chunk_grid\":{\"name\":\"regular\",\"configuration\":{\"chunk_shape\":[20]}},"
        "\"chunk_key_encoding\":{\"name\":\"default\"},\"fill_value\":0,"
        "\"codecs\":[{\"name\":\"sharding_indexed\",\"configuration\":{\"chunk_shape\":[5],"
        "\"codecs\":[{\"name\":\"bytes\",\"configuration\":{\"endian\":\"little\"}},"
        "{\"name\":\"zstd\",\"configuration\":{\"level\":0}}],\"index_codecs\":[{\"name\":"
        "\"bytes\",\"configuration\":{\"endian\":\"little\"}}],\"index_location\":\"end\"}}],"
        "\"attributes\":{}}";
    put_file(dir, "zarr.json", meta, strlen(meta));
    for (int s = 0; s < 2; s++) {
        uint8_t buf[4096];
        uint64_t index[8];
        size_t o = 0;
        for (int k = 0; k < 4; k++) {
            int32_t v[5];
            for (int i = 0; i < 5; i++)
                v[i] = base + s * 20 + k * 5 + i;
            size_t n = ZSTD_compress(buf + o, sizeof buf - o, v, sizeof v, 1);
            CHECK(!ZSTD_isError(n));
            index[2 * k] = o;
            index[2 * k + 1] = n;
            o += n;
        }
        memcpy(buf + o, index, sizeof index); /* little-endian host */
        o += sizeof index;
        char rel[32];
        snprintf(rel, sizeof rel, "c/%d", s);
        put_file(dir, rel, buf, o);
    }
}

static int read_1d(node *n, int64_t start, int64_t count, int32_t *out)
{
    cellar_error err;
    cellar_error_clear(&err);
    dim_sel s = sel_slice(start, 1, count);
    return node_read(n, &s, out, (size_t)count * 4, &err);
}

void test_zarr_chunk_cache(void)
{
    char t[] = "/tmp/cellar-zcache-XXXXXX";
    if (!mkdtemp(t)) {
        CHECK(0);
        return;
    }
    chunk_cache_set_limit(chunk_cache_of(CHUNK_CACHE_ZARR), (size_t)64 << 20);
    put_sharded(t, 0);
    node *v1 = NULL, *v2 = NULL;
    cellar_error err;
    cellar_error_clear(&err);
    CHECK_EQ(zarr_open(t, &v1, &err), 0);
    int32_t a[40], b[40];
    chunk_cache_stats s0, s1, s2;
    chunk_cache_get_stats(chunk_cache_of(CHUNK_CACHE_ZARR), &s0);
    CHECK_EQ(v1 ? read_1d(v1, 3, 34, a) : -1, 0);
    chunk_cache_get_stats(chunk_cache_of(CHUNK_CACHE_ZARR), &s1);
    CHECK(s1.bytes > s0.bytes);
    CHECK(s1.entries >= s0.entries + 9); /* 7 inner chunks and 2 shard indexes */
    /* A hit gives the same bytes and decodes nothing new. */
    CHECK_EQ(v1 ? read_1d(v1, 3, 34, b) : -1, 0);
    chunk_cache_get_stats(chunk_cache_of(CHUNK_CACHE_ZARR), &s2);
    CHECK(s2.hits >= s1.hits + 7);
    CHECK_EQ(s2.entries, s1.entries);
    CHECK(memcmp(a, b, sizeof(int32_t) * 34) == 0);
    for (int i = 0; i < 34; i++)
        CHECK_EQ(a[i], 3 + i);
    /* The files change: a new version (a new open) never sees the old
     * version's entries, while the old one keeps its own. */
    put_sharded(t, 1000);
    CHECK_EQ(zarr_open(t, &v2, &err), 0);
    CHECK_EQ(v2 ? read_1d(v2, 3, 34, b) : -1, 0);
    for (int i = 0; i < 34; i++)
        CHECK_EQ(b[i], 1003 + i);
    CHECK_EQ(v1 ? read_1d(v1, 0, 40, a) : -1, 0);
    CHECK_EQ(a[5], 5);
    /* Freeing a version drops its entries. */
    chunk_cache_get_stats(chunk_cache_of(CHUNK_CACHE_ZARR), &s1);
    node_tree_free(v2);
    chunk_cache_get_stats(chunk_cache_of(CHUNK_CACHE_ZARR), &s2);
    CHECK(s2.entries < s1.entries);
    CHECK(s2.bytes < s1.bytes);
    /* Back to v1's contents: from here on v1 rereads the files. */
    put_sharded(t, 0);
    /* The bound: with room for a few of the ten entries, reads stay correct
     * and the kept bytes stay under the limit. */
    size_t limit = 6 * (s1.bytes / (s1.entries ? s1.entries : 1));
    chunk_cache_set_limit(chunk_cache_of(CHUNK_CACHE_ZARR), limit);
    chunk_cache_get_stats(chunk_cache_of(CHUNK_CACHE_ZARR), &s1);
    CHECK(s1.bytes <= limit);
    for (int rep = 0; rep < 3; rep++) {
        CHECK_EQ(v1 ? read_1d(v1, 0, 40, a) : -1, 0);
        for (int i = 0; i < 40; i++)
            CHECK_EQ(a[i], i);
        chunk_cache_get_stats(chunk_cache_of(CHUNK_CACHE_ZARR), &s1);
        CHECK(s1.bytes <= limit);
        CHECK(s1.entries > 0);
        CHECK(s1.entries < 10);
    }
    /* Off: nothing kept, reads still right. */
    chunk_cache_set_limit(chunk_cache_of(CHUNK_CACHE_ZARR), 0);
    chunk_cache_get_stats(chunk_cache_of(CHUNK_CACHE_ZARR), &s1);
    CHECK_EQ(s1.bytes, 0);
    CHECK_EQ(v1 ? read_1d(v1, 7, 20, a) : -1, 0);
    CHECK_EQ(a[0], 7);
    CHECK_EQ(a[19], 26);
    chunk_cache_get_stats(chunk_cache_of(CHUNK_CACHE_ZARR), &s1);
    CHECK_EQ(s1.entries, 0);
    chunk_cache_set_limit(chunk_cache_of(CHUNK_CACHE_ZARR), (size_t)64 << 20);
    node_tree_free(v1);
    nftw(t, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}
