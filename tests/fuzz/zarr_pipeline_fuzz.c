/* Fuzz target: a zarr chunk or shard through the real read path end to end:
 * metadata parsed by zarr_array_parse_v3 (or _v2), the chunk file opened
 * beneath the store, its shard index decoded, the codec chain run
 * (bytes/vlen, endianness, transpose, blosc, zstd, gzip, zlib, lz4,
 * crc32c) and the selected elements copied out by zarr_array_read.
 * Input: byte 0 is the mode (bit 0: v2 metadata; bit 1: read the first
 * chunk backwards; bit 2: read every other element), bytes 1-2 the
 * metadata's length n (little-endian), then n bytes of metadata, and the
 * rest is the file of the array's first chunk (grid position 0, ...).  The
 * file is written to a scratch store in the temporary folder (/dev/shm
 * when there is one) and removed after the read.  A read fails with its
 * code and a reason, or succeeds; nothing may crash, leak or allocate
 * without bound.
 * With libFuzzer: clang -DCELLAR_LIBFUZZER -fsanitize=fuzzer,address ...;
 * without it, main() replays tests/fuzz/corpus/zarr_pipeline or the paths
 * given. */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/arena.h"
#include "common/utf8.h"
#include "storage/zarr/zarr_impl.h"
#include "tests/fuzz/fuzz.h"

/* At most this many elements are read (the selection, not the chunk). */
#define MAX_READ 4096

static char scratch[256];

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

static void scratch_remove(void)
{
    nftw(scratch, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* The scratch store, made once per process and removed at its exit. */
static const char *scratch_dir(void)
{
    if (scratch[0])
        return scratch;
    const char *tmp = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : getenv("TMPDIR");
    snprintf(scratch, sizeof scratch, "%s/cellar-zarr-pipeline-XXXXXX", tmp ? tmp : "/tmp");
    MUST(mkdtemp(scratch) != NULL);
    atexit(scratch_remove);
    return scratch;
}

/* The array's folder in the store: one per key layout, so that a chunk
 * file of one never sits where another needs a folder ("c/0" vs "c/0/0"). */
static void array_folder(const zarr_array *za, char *rel, size_t size)
{
    snprintf(rel, size, "a%d%c%c", za->ndim, za->v2_keys ? 'v' : 'c', za->sep == '/' ? 's' : 'd');
}

/* The key of the chunk at grid position 0, ..., as zarr spells it. */
static void first_chunk_key(const zarr_array *za, char *key, size_t size)
{
    char sep[2] = {za->sep, '\0'};
    size_t o = (size_t)snprintf(key, size, "%s", !za->v2_keys ? "c" : za->ndim ? "" : "0");
    for (int d = 0; d < za->ndim; d++)
        o += (size_t)snprintf(key + o, size - o, "%s0", za->v2_keys && d == 0 ? "" : sep);
}

/* Writes the chunk file at dir/rel/key, making the folders on its way. */
static int write_chunk(const char *dir, const char *rel, const char *key, const uint8_t *data,
                       size_t size, char *path, size_t path_size)
{
    snprintf(path, path_size, "%s/%s/%s", dir, rel, key);
    for (char *p = path + strlen(dir) + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        int rc = mkdir(path, 0700);
        *p = '/';
        if (rc < 0 && errno != EEXIST)
            return -1;
    }
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0)
        return -1;
    size_t done = 0;
    while (done < size) {
        ssize_t n = write(fd, data + done, size - done);
        if (n <= 0)
            break;
        done += (size_t)n;
    }
    close(fd);
    return done == size ? 0 : -1;
}

/* The selection: the first chunk (clipped to the shape), forwards or
 * backwards, every element or every other one, at most MAX_READ in all. */
static size_t plan_selection(const zarr_array *za, uint8_t mode, dim_sel *sel)
{
    size_t total = 1;
    for (int d = 0; d < za->ndim; d++) {
        int64_t span = za->shape[d] < za->chunk[d] ? za->shape[d] : za->chunk[d];
        int64_t step = mode & 4 ? 2 : 1;
        int64_t count = span ? (span - 1) / step + 1 : 0;
        if (count > 64)
            count = 64;
        sel[d].count = count;
        sel[d].index = NULL;
        sel[d].step = mode & 2 ? -step : step;
        sel[d].start = mode & 2 ? (count ? (count - 1) * step : 0) : 0;
        total *= (size_t)count;
        if (total > MAX_READ)
            return 0;
    }
    return total;
}

static void read_first_chunk(const zarr_array *za, uint8_t mode, const char *rel)
{
    dim_sel sel[NODE_MAX_DIMS];
    size_t total = plan_selection(za, mode, sel);
    if (!total)
        return;
    cellar_error err;
    cellar_error_clear(&err);
    arena *a = arena_new();
    MUST(a != NULL);
    zarr_dir dir;
    MUST(zarr_dir_open(&dir, scratch_dir()) == 0);
    int rc;
    if (za->unsupported) {
        /* An unknown dtype or codec parses, and every read of it fails. */
        rc = zarr_array_read(za, &dir.src, rel, "fuzz", sel, NULL, 0, a, NULL, &err);
        MUST(rc == CELLAR_EFORMAT);
    } else if (za->dtype == DT_STRING) {
        char **out = arena_calloc(a, total, sizeof *out);
        MUST(out != NULL);
        rc = zarr_array_read(za, &dir.src, rel, "fuzz", sel, NULL, 0, a, out, &err);
        for (size_t i = 0; rc == 0 && i < total; i++)
            MUST(out[i] != NULL);
        if (rc == 0 && za->kind == ZK_VLEN_UTF8)
            for (size_t i = 0; i < total; i++)
                MUST(utf8_valid(out[i], strlen(out[i])));
    } else {
        size_t es = dtype_size(za->dtype);
        MUST(es > 0 && es <= 8);
        uint8_t *out = arena_alloc(a, total * es);
        MUST(out != NULL);
        rc = zarr_array_read(za, &dir.src, rel, "fuzz", sel, out, total * es, NULL, NULL,
                             &err);
    }
    if (rc)
        MUST(err.code == rc && err.detail[0]);
    zarr_dir_close(&dir);
    arena_free(a);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 3)
        return 0;
    uint8_t mode = data[0];
    size_t meta_len = (size_t)data[1] | (size_t)data[2] << 8;
    if (meta_len > size - 3)
        return 0;
    const uint8_t *meta = data + 3, *chunk = meta + meta_len;
    size_t chunk_len = size - 3 - meta_len;
    json_t *doc = NULL;
    cellar_error err;
    cellar_error_clear(&err);
    if (zarr_json_parse((const char *)meta, meta_len, &doc, "fuzz", &err))
        return 0;
    zarr_array za;
    int rc = mode & 1 ? zarr_array_parse_v2(doc, &za, "fuzz", &err)
                      : zarr_array_parse_v3(doc, &za, "fuzz", &err);
    json_decref(doc);
    if (rc) {
        MUST(err.code == rc && err.detail[0]);
        return 0;
    }
    char rel[32], key[512], path[1024];
    array_folder(&za, rel, sizeof rel);
    first_chunk_key(&za, key, sizeof key);
    if (write_chunk(scratch_dir(), rel, key, chunk, chunk_len, path, sizeof path) == 0) {
        read_first_chunk(&za, mode, rel);
        unlink(path);
    }
    zarr_array_clear(&za);
    return 0;
}

#define FUZZ_NAME "zarr_pipeline"
#include "tests/fuzz/replay_main.h"
