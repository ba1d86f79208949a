/* Reading a zarr zip store's entries several ways, for storage/zip/README.md:
 * cellar's own central-directory reader (storage/zip/zip_dir), libzip
 * (Debian's libzip-dev) and minizip (Debian's libminizip-dev, zlib's
 * contrib/minizip 1.1), on the same zip, in separate processes.
 *
 *   zip_libs cellar|libzip|minizip|minizip-index ZIP N
 *
 * opens ZIP, then reads N entries named in a fixed pseudo-random order
 * (every entry of the zip but those ending in '/', once each up to N) and
 * prints one line of JSON: the open's seconds, the heap bytes the open
 * left allocated (mallinfo2), the mean microseconds per entry (locate,
 * reach the data, read it all), and whether the data's offset in the file
 * is known (what sendfile of a stored entry needs).  cellar: the directory
 * parsed through pread, the entry found by name (binary search), its local
 * header read for the data offset, the bytes read with pread.  libzip:
 * zip_open (ZIP_RDONLY), zip_name_locate, zip_fopen_index, zip_fread,
 * zip_fclose; libzip's API has no call giving an entry's data offset.
 * minizip: unzOpen64 and unzGetGlobalInfo64, then per entry unzLocateFile
 * (which walks the central directory from its start, entry by entry),
 * unzOpenCurrentFile, unzGetCurrentFileZStreamPos64 (the data offset,
 * checked against the bytes read: a pread there gives the same bytes),
 * unzReadCurrentFile, unzCloseCurrentFile.  minizip-index: the same, but
 * the open also walks the directory once (unzGoToNextFile,
 * unzGetCurrentFileInfo64, unzGetOffset64) into a sorted name index, and an
 * entry is found by binary search and unzSetOffset64 instead of
 * unzLocateFile (what a server would have to add around minizip). */
#include <fcntl.h>
#include <inttypes.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <minizip/unzip.h> /* not <unzip.h>: minizip's directory has its own zip.h */
#include <zip.h>

#include "storage/zip/zip_dir.h"

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static size_t heap_in_use(void)
{
    struct mallinfo2 mi = mallinfo2();
    return mi.uordblks + mi.hblkhd;
}

static int pread_all(void *ctx, uint64_t off, size_t n, void *buf)
{
    int fd = *(int *)ctx;
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(fd, (char *)buf + got, n - got, (off_t)(off + got));
        if (r <= 0)
            return -1;
        got += (size_t)r;
    }
    return 0;
}

/* Names to read: every file entry, in an order shuffled by a fixed seed. */
typedef struct names {
    char **v;
    size_t n;
} names;

static void shuffle(names *ns)
{
    uint64_t x = 0x9E3779B97F4A7C15u;
    for (size_t i = ns->n; i > 1; i--) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        size_t j = (size_t)(x % i);
        char *t = ns->v[i - 1];
        ns->v[i - 1] = ns->v[j];
        ns->v[j] = t;
    }
}

/* The names come from libzip in both modes (listed before the measured
 * open, then freed), so both read the same entries in the same order. */
static int list_names(const char *path, names *ns)
{
    int zerr = 0;
    zip_t *za = zip_open(path, ZIP_RDONLY, &zerr);
    if (!za)
        return -1;
    zip_int64_t n = zip_get_num_entries(za, 0);
    ns->v = calloc((size_t)n, sizeof *ns->v);
    ns->n = 0;
    for (zip_int64_t i = 0; i < n; i++) {
        const char *name = zip_get_name(za, (zip_uint64_t)i, 0);
        size_t len = name ? strlen(name) : 0;
        if (len && name[len - 1] != '/')
            ns->v[ns->n++] = strdup(name);
    }
    zip_discard(za);
    shuffle(ns);
    return 0;
}

static int run_cellar(const char *path, const names *ns, size_t count, double *open_s,
                      size_t *heap, double *per_us, uint64_t *bytes)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0)
        return -1;
    size_t h0 = heap_in_use();
    double t0 = now_s();
    zip_directory dir;
    cellar_error err;
    cellar_error_clear(&err);
    if (zip_directory_parse(pread_all, &fd, (uint64_t)st.st_size, &dir, &err) != 0) {
        fprintf(stderr, "cellar: %s\n", err.detail);
        return -1;
    }
    *open_s = now_s() - t0;
    *heap = heap_in_use() - h0;
    char *buf = malloc(1 << 20);
    t0 = now_s();
    for (size_t i = 0; i < count; i++) {
        zip_entry *e = (zip_entry *)zip_directory_find(&dir, ns->v[i]);
        uint64_t off;
        if (!e || zip_entry_check(e, &err) || e->method != ZIP_STORED ||
            zip_entry_data_offset(e, pread_all, &fd, &off, &err) ||
            e->comp_size > (1 << 20) || pread_all(&fd, off, (size_t)e->comp_size, buf)) {
            fprintf(stderr, "cellar: %s: %s\n", ns->v[i], err.detail);
            return -1;
        }
        *bytes += e->comp_size;
    }
    *per_us = (now_s() - t0) / (double)count * 1e6;
    free(buf);
    zip_directory_free(&dir);
    close(fd);
    return 0;
}

static int run_libzip(const char *path, const names *ns, size_t count, double *open_s,
                      size_t *heap, double *per_us, uint64_t *bytes)
{
    size_t h0 = heap_in_use();
    double t0 = now_s();
    int zerr = 0;
    zip_t *za = zip_open(path, ZIP_RDONLY, &zerr);
    if (!za)
        return -1;
    *open_s = now_s() - t0;
    *heap = heap_in_use() - h0;
    char *buf = malloc(1 << 20);
    t0 = now_s();
    for (size_t i = 0; i < count; i++) {
        zip_int64_t idx = zip_name_locate(za, ns->v[i], 0);
        zip_file_t *f = idx < 0 ? NULL : zip_fopen_index(za, (zip_uint64_t)idx, 0);
        zip_int64_t got = f ? zip_fread(f, buf, 1 << 20) : -1;
        if (!f || got < 0) {
            fprintf(stderr, "libzip: %s: %s\n", ns->v[i], zip_strerror(za));
            return -1;
        }
        zip_fclose(f);
        *bytes += (uint64_t)got;
    }
    *per_us = (now_s() - t0) / (double)count * 1e6;
    free(buf);
    zip_discard(za);
    return 0;
}

/* minizip's index (minizip-index): every entry's name and its
 * unzGetOffset64 position, sorted by name. */
typedef struct mz_slot {
    char *name;
    ZPOS64_T pos;
} mz_slot;

static int mz_slot_cmp(const void *a, const void *b)
{
    return strcmp(((const mz_slot *)a)->name, ((const mz_slot *)b)->name);
}

static int mz_index(unzFile uf, uint64_t n, mz_slot **out)
{
    mz_slot *v = calloc((size_t)n, sizeof *v);
    char name[4096];
    uint64_t k = 0;
    for (int rc = unzGoToFirstFile(uf); rc == UNZ_OK && k < n; rc = unzGoToNextFile(uf)) {
        unz_file_info64 fi;
        if (unzGetCurrentFileInfo64(uf, &fi, name, sizeof name, NULL, 0, NULL, 0) != UNZ_OK)
            return -1;
        v[k].name = strdup(name);
        v[k++].pos = unzGetOffset64(uf);
    }
    if (k != n)
        return -1;
    qsort(v, (size_t)n, sizeof *v, mz_slot_cmp);
    *out = v;
    return 0;
}

/* The entry current in uf read whole; its data offset in *off. */
static int mz_read_current(unzFile uf, char *buf, size_t cap, uint64_t *off, int *got)
{
    if (unzOpenCurrentFile(uf) != UNZ_OK)
        return -1;
    *off = unzGetCurrentFileZStreamPos64(uf);
    *got = unzReadCurrentFile(uf, buf, (unsigned)cap);
    /* UNZ_CRCERROR when the bytes read do not match the entry's CRC */
    return unzCloseCurrentFile(uf) != UNZ_OK || *got < 0 ? -1 : 0;
}

static int run_minizip(const char *path, const names *ns, size_t count, int indexed,
                       double *open_s, size_t *heap, double *per_us, uint64_t *bytes,
                       int *offset_ok)
{
    size_t h0 = heap_in_use();
    double t0 = now_s();
    unzFile uf = unzOpen64(path);
    unz_global_info64 gi;
    mz_slot *idx = NULL;
    if (!uf || unzGetGlobalInfo64(uf, &gi) != UNZ_OK ||
        (indexed && mz_index(uf, gi.number_entry, &idx) != 0)) {
        fprintf(stderr, "minizip: cannot open %s\n", path);
        return -1;
    }
    *open_s = now_s() - t0;
    *heap = heap_in_use() - h0;
    char *buf = malloc(1 << 20), *again = malloc(1 << 20);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    /* Untimed: the offset minizip gives is where the entry's bytes are (a
     * pread there reads what unzReadCurrentFile read), on the first entries. */
    *offset_ok = fd >= 0;
    for (size_t i = 0; i < count && i < 16 && *offset_ok; i++) {
        uint64_t off;
        int got;
        *offset_ok = unzLocateFile(uf, ns->v[i], 1) == UNZ_OK &&
                     mz_read_current(uf, buf, 1 << 20, &off, &got) == 0 && off > 0 &&
                     pread_all(&fd, off, (size_t)got, again) == 0 &&
                     memcmp(buf, again, (size_t)got) == 0;
    }
    t0 = now_s();
    for (size_t i = 0; i < count; i++) {
        int found;
        if (indexed) {
            mz_slot key = {ns->v[i], 0};
            mz_slot *s = bsearch(&key, idx, (size_t)gi.number_entry, sizeof *idx, mz_slot_cmp);
            found = s && unzSetOffset64(uf, s->pos) == UNZ_OK;
        } else {
            found = unzLocateFile(uf, ns->v[i], 1) == UNZ_OK;
        }
        uint64_t off;
        int got;
        if (!found || mz_read_current(uf, buf, 1 << 20, &off, &got) != 0) {
            fprintf(stderr, "minizip: %s: not read\n", ns->v[i]);
            return -1;
        }
        *bytes += (uint64_t)got;
    }
    *per_us = (now_s() - t0) / (double)count * 1e6;
    for (uint64_t i = 0; idx && i < gi.number_entry; i++)
        free(idx[i].name);
    free(idx);
    free(buf);
    free(again);
    if (fd >= 0)
        close(fd);
    unzClose(uf);
    return 0;
}

int main(int argc, char **argv)
{
    const char *lib = argc == 4 ? argv[1] : "";
    int cellar = !strcmp(lib, "cellar"), libzip = !strcmp(lib, "libzip");
    int minizip = !strcmp(lib, "minizip"), indexed = !strcmp(lib, "minizip-index");
    if (!cellar && !libzip && !minizip && !indexed) {
        fprintf(stderr, "usage: zip_libs cellar|libzip|minizip|minizip-index ZIP N\n");
        return 2;
    }
    names ns = {0};
    if (list_names(argv[2], &ns) != 0 || ns.n == 0) {
        fprintf(stderr, "zip_libs: cannot list %s\n", argv[2]);
        return 1;
    }
    size_t count = (size_t)strtoull(argv[3], NULL, 10);
    if (count == 0 || count > ns.n)
        count = ns.n;
    double open_s = 0, per_us = 0;
    size_t heap = 0;
    uint64_t bytes = 0;
    int offset_ok = cellar, rc;
    if (cellar)
        rc = run_cellar(argv[2], &ns, count, &open_s, &heap, &per_us, &bytes);
    else if (libzip)
        rc = run_libzip(argv[2], &ns, count, &open_s, &heap, &per_us, &bytes);
    else
        rc = run_minizip(argv[2], &ns, count, indexed, &open_s, &heap, &per_us, &bytes,
                         &offset_ok);
    if (rc != 0)
        return 1;
    printf("{\"lib\": \"%s\", \"entries\": %zu, \"read\": %zu, \"open_s\": %.6f, "
           "\"open_heap_bytes\": %zu, \"per_entry_us\": %.3f, \"bytes\": %" PRIu64
           ", \"data_offset_known\": %s}\n",
           lib, ns.n, count, open_s, heap, per_us, bytes, offset_ok ? "true" : "false");
    for (size_t i = 0; i < ns.n; i++)
        free(ns.v[i]);
    free(ns.v);
    return 0;
}
