/* Reading a zarr zip store's entries two ways, for storage/zip/README.md:
 * cellar's own central-directory reader (storage/zip/zip_dir) and libzip
 * (Debian's libzip-dev), on the same zip, in separate processes.
 *
 *   zip_libs cellar|libzip ZIP N
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
 * zip_fclose; libzip's API has no call giving an entry's data offset. */
#include <fcntl.h>
#include <inttypes.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
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

int main(int argc, char **argv)
{
    if (argc != 4 || (strcmp(argv[1], "cellar") && strcmp(argv[1], "libzip"))) {
        fprintf(stderr, "usage: zip_libs cellar|libzip ZIP N\n");
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
    int cellar = !strcmp(argv[1], "cellar");
    int rc = cellar ? run_cellar(argv[2], &ns, count, &open_s, &heap, &per_us, &bytes)
                    : run_libzip(argv[2], &ns, count, &open_s, &heap, &per_us, &bytes);
    if (rc != 0)
        return 1;
    printf("{\"lib\": \"%s\", \"entries\": %zu, \"read\": %zu, \"open_s\": %.6f, "
           "\"open_heap_bytes\": %zu, \"per_entry_us\": %.3f, \"bytes\": %" PRIu64
           ", \"data_offset_known\": %s}\n",
           argv[1], ns.n, count, open_s, heap, per_us, bytes, cellar ? "true" : "false");
    for (size_t i = 0; i < ns.n; i++)
        free(ns.v[i]);
    free(ns.v);
    return 0;
}
