/* Fuzz target: which raw keys a zarr store serves (zarr_store_has_key, the
 * check behind /v1/stores/{store}/zarr/{key}).  Input: byte 0 picks the
 * store (v2 or v3, written once to a temporary directory), the rest is
 * the key text.  A key the store accepts must be plain (no empty, "." or
 * ".." segment, no leading '/'), never a dotfile other than zarr's own
 * metadata names, and never an editor backup.
 * With libFuzzer: cc -DCELLAR_LIBFUZZER -fsanitize=fuzzer,address ...;
 * without it, main() replays tests/fuzz/corpus/zarr_keys or the paths given. */
#define _XOPEN_SOURCE 700
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "storage/node.h"
#include "storage/zarr/zarr.h"
#include "tests/fuzz/fuzz.h"

static const char *const STORE_FILES[2][5][2] = {
    {{".zgroup", "{\"zarr_format\":2}"},
     {"g/.zgroup", "{\"zarr_format\":2}"},
     {"g/x/.zarray", "{\"zarr_format\":2,\"shape\":[5,3],\"chunks\":[2,2],\"dtype\":\"<i4\","
                     "\"compressor\":null,\"fill_value\":0,\"order\":\"C\",\"filters\":null}"},
     {"y/.zarray", "{\"zarr_format\":2,\"shape\":[],\"chunks\":[],\"dtype\":\"<f8\","
                   "\"compressor\":null,\"fill_value\":0,\"order\":\"C\",\"filters\":null,"
                   "\"dimension_separator\":\"/\"}"},
     {NULL, NULL}},
    {{"zarr.json", "{\"zarr_format\":3,\"node_type\":\"group\",\"attributes\":{}}"},
     {"a/zarr.json",
      "{\"zarr_format\":3,\"node_type\":\"array\",\"shape\":[4,10,2],\"data_type\":\"int8\","
      "\"chunk_grid\":{\"name\":\"regular\",\"configuration\":{\"chunk_shape\":[3,10,1]}},"
      "\"chunk_key_encoding\":{\"name\":\"default\",\"configuration\":{\"separator\":\".\"}},"
      "\"fill_value\":0,\"codecs\":[{\"name\":\"bytes\"}]}"},
     {"b/zarr.json",
      "{\"zarr_format\":3,\"node_type\":\"array\",\"shape\":[7],\"data_type\":\"int8\","
      "\"chunk_grid\":{\"name\":\"regular\",\"configuration\":{\"chunk_shape\":[2]}},"
      "\"chunk_key_encoding\":{\"name\":\"v2\"},\"fill_value\":0,"
      "\"codecs\":[{\"name\":\"bytes\"}]}"},
     {NULL, NULL},
     {NULL, NULL}},
};

static char store_dirs[2][64];
static node *store_roots[2];

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

static void remove_stores(void)
{
    for (int s = 0; s < 2; s++) {
        node_tree_free(store_roots[s]);
        if (store_dirs[s][0])
            nftw(store_dirs[s], remove_entry, 8, FTW_DEPTH | FTW_PHYS);
    }
}

static void write_file(const char *dir, const char *rel, const char *text)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, rel);
    for (char *p = path + strlen(dir) + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            mkdir(path, 0755);
            *p = '/';
        }
    FILE *f = fopen(path, "wb");
    MUST(f != NULL);
    fputs(text, f);
    fclose(f);
}

static void open_stores(void)
{
    for (int s = 0; s < 2; s++) {
        snprintf(store_dirs[s], sizeof store_dirs[s], "/tmp/cellar-keys-fuzz-XXXXXX");
        MUST(mkdtemp(store_dirs[s]) != NULL);
        for (int i = 0; STORE_FILES[s][i][0]; i++)
            write_file(store_dirs[s], STORE_FILES[s][i][0], STORE_FILES[s][i][1]);
        cellar_error err;
        cellar_error_clear(&err);
        MUST(zarr_open(store_dirs[s], &store_roots[s], &err) == 0);
    }
    atexit(remove_stores);
}

/* Whether the segment [s, s + n) may appear in a served key. */
static int segment_allowed(const char *s, size_t n)
{
    static const char *const dot_names[] = {".zarray", ".zgroup", ".zattrs", ".zmetadata"};
    if (n == 0 || s[n - 1] == '~')
        return 0;
    if (s[0] != '.')
        return 1;
    for (size_t i = 0; i < sizeof dot_names / sizeof *dot_names; i++)
        if (strlen(dot_names[i]) == n && !memcmp(dot_names[i], s, n))
            return 1;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > 1 + 512)
        return 0;
    if (!store_roots[0])
        open_stores();
    char key[513];
    memcpy(key, data + 1, size - 1);
    key[size - 1] = '\0';
    if (!zarr_store_has_key(store_roots[data[0] & 1], key))
        return 0;
    MUST(key[0] && key[0] != '/');
    for (const char *s = key;;) {
        const char *e = strchr(s, '/');
        size_t n = e ? (size_t)(e - s) : strlen(s);
        MUST(segment_allowed(s, n));
        if (!e)
            break;
        s = e + 1;
    }
    return 0;
}

#define FUZZ_NAME "zarr_keys"
#include "tests/fuzz/replay_main.h"
