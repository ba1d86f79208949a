/* Which files a zarr store may hand out: zarr_store_has_key (raw keys are
 * only metadata files and declared chunk keys) and zarr_dir_open_file (nothing
 * outside the store, nothing that is not a regular file, never blocking);
 * and the status an operating-system read error becomes. */
#define _XOPEN_SOURCE 700
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"
#include "storage/node.h"
#include "storage/zarr/zarr.h"
#include "storage/zarr/zarr_impl.h"
#include "tests/unit/unit.h"

/* tests/unit/test_zarr.c: writes root/rel, making its directories. */
void zarr_test_put(const char *root, const char *rel, const void *data, size_t n);

static void put(const char *root, const char *rel, const char *text)
{
    zarr_test_put(root, rel, text, strlen(text));
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

/* A fresh directory under /tmp; the caller removes it with drop_dir. */
static char *new_dir(const char *tag)
{
    char *t = NULL;
    if (asprintf(&t, "/tmp/cellar-%s-XXXXXX", tag) < 0)
        return NULL;
    if (!mkdtemp(t)) {
        free(t);
        return NULL;
    }
    return t;
}

static void drop_dir(char *dir)
{
    if (dir)
        nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    free(dir);
}

static const char *V2_ARRAY_DOT =
    "{\"zarr_format\":2,\"shape\":[5,3],\"chunks\":[2,2],\"dtype\":\"<i4\","
    "\"compressor\":null,\"fill_value\":0,\"order\":\"C\",\"filters\":null}";
static const char *V2_ARRAY_SLASH =
    "{\"zarr_format\":2,\"shape\":[4],\"chunks\":[4],\"dtype\":\"<i4\",\"compressor\":null,"
    "\"fill_value\":0,\"order\":\"C\",\"filters\":null,\"dimension_separator\":\"/\"}";
static const char *V3_ARRAY =
    "{\"zarr_format\":3,\"node_type\":\"array\",\"shape\":[4,10],\"data_type\":\"int32\","
    "\"chunk_grid\":{\"name\":\"regular\",\"configuration\":{\"chunk_shape\":[3,10]}},"
    "\"chunk_key_encoding\":{\"name\":\"default\",\"configuration\":{\"separator\":\"/\"}},"
    "\"fill_value\":0,\"codecs\":[{\"name\":\"bytes\",\"configuration\":{\"endian\":"
    "\"little\"}}]}";
static const char *V3_SCALAR =
    "{\"zarr_format\":3,\"node_type\":\"array\",\"shape\":[],\"data_type\":\"int32\","
    "\"chunk_grid\":{\"name\":\"regular\",\"configuration\":{\"chunk_shape\":[]}},"
    "\"chunk_key_encoding\":{\"name\":\"default\"},\"fill_value\":0,"
    "\"codecs\":[{\"name\":\"bytes\",\"configuration\":{\"endian\":\"little\"}}]}";

static void check_keys(node *root, const char *const *yes, const char *const *no)
{
    for (; *yes; yes++)
        if (!zarr_store_has_key(root, *yes)) {
            fprintf(stderr, "  should be a key: %s\n", *yes);
            CHECK(0);
        }
    for (; *no; no++)
        if (zarr_store_has_key(root, *no)) {
            fprintf(stderr, "  should not be a key: %s\n", *no);
            CHECK(0);
        }
}

void test_zarr_store_keys(void)
{
    char *v2 = new_dir("keys2"), *v3 = new_dir("keys3");
    CHECK(v2 && v3);
    put(v2, ".zgroup", "{\"zarr_format\":2}");
    put(v2, "g/.zgroup", "{\"zarr_format\":2}");
    put(v2, "g/x/.zarray", V2_ARRAY_DOT);
    put(v2, "y/.zarray", V2_ARRAY_SLASH);
    put(v3, "zarr.json", "{\"zarr_format\":3,\"node_type\":\"group\",\"attributes\":{}}");
    put(v3, "a/zarr.json", V3_ARRAY);
    put(v3, "s/zarr.json", V3_SCALAR);
    node *r2 = NULL, *r3 = NULL;
    cellar_error err;
    cellar_error_clear(&err);
    CHECK_EQ(zarr_open(v2, &r2, &err), 0);
    CHECK_EQ(zarr_open(v3, &r3, &err), 0);
    if (r2 && r3) {
        /* grid of g/x: 3 x 2; y: one chunk, nested keys */
        const char *const yes2[] = {".zgroup", ".zattrs", ".zmetadata", "g/.zattrs",
                                    "g/x/.zarray", "g/x/0.0", "g/x/2.1", "y/0",
                                    "nowhere/.zattrs", NULL};
        const char *const no2[] = {"zarr.json", "g/.zmetadata", "g/x/3.0", "g/x/0.2",
                                   "g/x/0", "g/x/0.0.0", "g/x/00.0", "g/x/0.0~",
                                   "g/x/.0.0.swp", "g/x/0.0.orig", "g/x/+1.0", "g/x/0/0",
                                   "y/0.0", "y/1", ".git/config", ".env", ".git/.zattrs",
                                   "g/.hidden/.zattrs", "g~/.zattrs", "notes.txt", "g", "g/x", "",
                                   NULL};
        check_keys(r2, yes2, no2);
        const char *const yes3[] = {"zarr.json", "a/zarr.json", "a/c/0/0", "a/c/1/0",
                                    "s/c", NULL};
        const char *const no3[] = {".zgroup", ".zattrs", "a/c/2/0", "a/c/0/1", "a/c/0",
                                   "a/c/0/0/0", "a/0/0", "a/c.0.0", "a/c/0/0~", "s/c/0",
                                   "s/0", "a/c/99999999999999999999/0", ".DS_Store", NULL};
        check_keys(r3, yes3, no3);
    }
    node_tree_free(r2);
    node_tree_free(r3);
    drop_dir(v2);
    drop_dir(v3);
}

/* rel opened beneath the store as a version opens its files
 * (zarr_dir_open_file): the code, and whether a file came back. */
static int open_rel(const char *store, const char *rel, int *got_file, cellar_error *err)
{
    int fd = -1;
    uint64_t size = 0;
    cellar_error_clear(err);
    zarr_dir dir;
    CHECK_EQ(zarr_dir_open(&dir, store), 0);
    int rc = zarr_dir_open_file(&dir, rel, &fd, &size, err);
    zarr_dir_close(&dir);
    *got_file = fd >= 0;
    if (fd >= 0)
        close(fd);
    return rc;
}

/* Makes store/rel a symlink to target, or a FIFO when target is NULL. */
static void plant(const char *store, const char *rel, const char *target)
{
    char *path = NULL;
    CHECK(asprintf(&path, "%s/%s", store, rel) > 0);
    if (path)
        CHECK_EQ(target ? symlink(target, path) : mkfifo(path, 0600), 0);
    free(path);
}

void test_zarr_open_file_stays_inside(void)
{
    char *base = new_dir("beneath"), *store = NULL, *outside = NULL, *inside_abs = NULL;
    CHECK(base != NULL);
    if (!base || asprintf(&store, "%s/store", base) < 0 ||
        asprintf(&outside, "%s/secret", base) < 0 ||
        asprintf(&inside_abs, "%s/a/chunk", store) < 0)
        goto done;
    put(base, "secret", "secret");
    CHECK_EQ(mkdir(store, 0755), 0);
    put(store, "a/chunk", "inside");
    plant(store, "a/rel", "chunk");
    plant(store, "a/abs", inside_abs);
    plant(store, "a/out", outside);
    plant(store, "a/up", "../../secret");
    plant(store, "a/loop", "loop");
    plant(store, "a/fifo", NULL);
    plant(store, "outdir", base);

    int got = 0;
    cellar_error err;
    const char *const inside[] = {"a/chunk", "a/rel", "a/abs"};
    for (size_t i = 0; i < sizeof inside / sizeof *inside; i++) {
        CHECK_EQ(open_rel(store, inside[i], &got, &err), 0);
        CHECK(got);
    }
    CHECK_EQ(open_rel(store, "a/missing", &got, &err), 0);
    CHECK(!got);
    const char *const refused[] = {"a/out", "a/up", "a/loop", "a/fifo", "a", "outdir/secret",
                                   "../secret"};
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
        if (open_rel(store, refused[i], &got, &err) != CELLAR_EFORMAT) {
            fprintf(stderr, "  should be refused: %s\n", refused[i]);
            CHECK(0);
        }
        CHECK(!got);
        CHECK(strstr(err.detail, refused[i]) != NULL);
    }
done:
    free(store);
    free(outside);
    free(inside_abs);
    drop_dir(base);
}

void test_error_statuses(void)
{
    CHECK_EQ(cellar_http_status(CELLAR_EFORMAT), 422);
    CHECK_EQ(cellar_http_status(CELLAR_EIO), 503);
    CHECK_EQ(cellar_http_status(CELLAR_ENOMEM), 503);
    CHECK_EQ(cellar_http_status(CELLAR_EINTERNAL), 500);
    CHECK_EQ(cellar_http_status(-99), 500);
}

/* The walk behind a zarr store's total bytes (issue 16, item 8: bounded,
 * then null): every regular file below the store added up, symlinks not
 * followed; -1 once it would pass max_entries entries (files and
 * directories alike) or max_seconds (looked at every 256 entries). */
void test_zarr_dir_bytes_bounded(void)
{
    char *store = new_dir("bytes");
    char *outside = new_dir("bytes-out");
    CHECK(store && outside);
    if (!store || !outside)
        goto done;
    /* 300 chunk files of 1..300 bytes in two arrays, and their metadata */
    uint64_t total = 0;
    char rel[64], data[300];
    memset(data, 'x', sizeof data);
    for (int i = 0; i < 300; i++) {
        snprintf(rel, sizeof rel, "%s/%d", i % 2 ? "a" : "b", i);
        zarr_test_put(store, rel, data, (size_t)(i + 1));
        total += (uint64_t)(i + 1);
    }
    put(store, ".zgroup", "{\"zarr_format\":2}");
    total += strlen("{\"zarr_format\":2}");
    put(outside, "big", "a file the walk must not reach through a symlink");
    char link[512], target[512];
    snprintf(link, sizeof link, "%s/a/link", store);
    snprintf(target, sizeof target, "%s/big", outside);
    CHECK_EQ(symlink(target, link), 0);
    const uint64_t entries = 300 + 1 + 2 + 1; /* files, .zgroup, a/ and b/, the link */

    zarr_dir dir;
    CHECK_EQ(zarr_dir_open(&dir, store), 0);
    uint64_t bytes = 1;
    CHECK_EQ(zarr_dir_bytes(&dir, 2000000, 2.0, &bytes), 0);
    CHECK_EQ(bytes, total);
    CHECK_EQ(zarr_dir_bytes(&dir, entries, 60.0, &bytes), 0);
    CHECK_EQ(bytes, total);
    CHECK_EQ(zarr_dir_bytes(&dir, entries - 1, 60.0, &bytes), -1);
    CHECK_EQ(bytes, 0);
    CHECK_EQ(zarr_dir_bytes(&dir, 10, 60.0, &bytes), -1);
    /* no time left: the walk stops at its first look at the clock */
    CHECK_EQ(zarr_dir_bytes(&dir, 2000000, 0.0, &bytes), -1);
    CHECK_EQ(bytes, 0);
    zarr_dir_close(&dir);
done:
    drop_dir(store);
    drop_dir(outside);
}
