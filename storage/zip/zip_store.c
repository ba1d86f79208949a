/* A zarr store in a zip file as a key source (storage/zip/zip_store.h). */
#include "storage/zip/zip_store.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "storage/budget.h"
#include "storage/codecs.h"
#include "storage/zip/zip_dir.h"

typedef struct zip_store {
    zarr_source base;
    int fd;                /* -1 for a zip read through reader */
    zip_reader reader;     /* a remote zip: its bytes, size and changes */
    struct stat st;        /* the zip when the version opened */
    struct timespec born;  /* CLOCK_REALTIME_COARSE just before */
    zip_directory dir;
    char prefix[1024];     /* "" or the one top folder with its '/' */
    size_t prefix_len;
} zip_store;

/* A deflated entry being read: decoded whole on its first read. */
typedef struct inflated {
    zip_entry *entry;
    uint64_t data;
    int stored;      /* a stored entry read through the reader */
    uint8_t *bytes;
} inflated;

int zip_store_name(const char *name)
{
    size_t n = strlen(name);
    return n > 4 && !strcmp(name + n - 4, ".zip");
}

/* One caller's reads of the store (on its stack: a source keeps no
 * per-read state), with the failure of a reader's read kept for the
 * detail (a remote's 502, 504 or change). */
typedef struct zip_read {
    zip_store *z;
    int rc;
    cellar_error err;
} zip_read;

/* zip_read_fn over a zip_read: pread of the local zip, or the reader. */
static int read_at(void *ctx, uint64_t off, size_t n, void *buf)
{
    zip_read *r = ctx;
    zip_store *z = r->z;
    if (z->fd < 0) {
        cellar_error_clear(&r->err);
        r->rc = z->reader.read(z->reader.ctx, off, n, buf, &r->err);
        return r->rc ? -1 : 0;
    }
    int fd = z->fd;
    uint8_t *p = buf;
    while (n) {
        ssize_t got = pread(fd, p, n, (off_t)off);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            return -1;
        p += got;
        n -= (size_t)got;
        off += (uint64_t)got;
    }
    return 0;
}

/* The entry's name in the zip: the store's prefix, then rel. */
static int zip_name(const zip_store *z, const char *rel, char *out, size_t size)
{
    int n = snprintf(out, size, "%s%s", z->prefix, rel);
    return n < 0 || (size_t)n >= size ? -1 : 0;
}

/* Where e's bytes start (after its local header), with a reader's
 * failure reported as itself. */
static int entry_data(zip_store *z, zip_entry *e, uint64_t *data, cellar_error *err)
{
    zip_read r = {.z = z};
    cellar_error local;
    cellar_error_clear(&local);
    int rc = zip_entry_data_offset(e, read_at, &r, data, &local);
    if (rc)
        rc = r.rc ? cellar_fail(err, r.rc, "%s", r.err.detail)
                  : cellar_fail(err, rc, "%s", local.detail);
    return rc;
}

static int zs_open_key(zarr_source *s, const char *rel, zarr_key *k, cellar_error *err)
{
    zip_store *z = (zip_store *)s;
    memset(k, 0, sizeof *k);
    k->fd = -1;
    char name[4096];
    if (zip_name(z, rel, name, sizeof name) != 0)
        return 0;
    zip_entry *e = (zip_entry *)zip_directory_find(&z->dir, name);
    if (!e)
        return 0;
    uint64_t data = 0;
    int rc = zip_entry_check(e, err);
    if (!rc)
        rc = entry_data(z, e, &data, err);
    if (rc)
        return rc;
    k->found = 1;
    k->size = e->size;
    k->mtime = z->st.st_mtim;
    k->crc32 = e->crc32;
    k->has_crc32 = 1;
    if (e->method == ZIP_STORED && z->fd >= 0) {
        k->fd = z->fd;
        k->offset = data;
        return 0;
    }
    inflated *in = calloc(1, sizeof *in);
    if (!in)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory opening zip entry '%.200s'", name);
    in->entry = e;
    in->data = data;
    in->stored = e->method == ZIP_STORED;
    k->priv = in;
    return 0;
}

/* A failed read: the reader's own code and detail, else a zip that ends
 * early. */
static int read_failed(const zip_read *r, cellar_error *err, const char *what, const char *name)
{
    if (r->rc)
        return cellar_fail(err, r->rc, "%s: %s", what, r->err.detail);
    return cellar_fail(err, CELLAR_EFORMAT, "%s: zip entry '%.200s' ends early", what, name);
}

/* Decodes the raw deflate stream of in->entry into exactly its size in
 * bytes, checking its CRC-32; bounded before the allocation. */
static int inflate_entry(zip_store *z, inflated *in, const char *what, cellar_error *err)
{
    const zip_entry *e = in->entry;
    uint64_t limit = budget_whole();
    if (limit > CODEC_MAX_DECODED)
        limit = CODEC_MAX_DECODED;
    if (e->size > codec_max_decoded(CODEC_ZLIB, e->comp_size) || e->size > limit)
        return cellar_fail(err, CELLAR_EFORMAT,
                           "%s: zip entry '%.200s' claims to expand %llu bytes to %llu, past "
                           "the limit",
                           what, e->name, (unsigned long long)e->comp_size,
                           (unsigned long long)e->size);
    uint8_t *src = malloc(e->comp_size ? (size_t)e->comp_size : 1);
    uint8_t *dst = malloc(e->size ? (size_t)e->size : 1);
    int rc = 0;
    if (!src || !dst) {
        rc = cellar_fail(err, CELLAR_ENOMEM, "out of memory decoding %s", what);
        goto done;
    }
    zip_read r = {.z = z};
    if (e->comp_size && read_at(&r, in->data, (size_t)e->comp_size, src) != 0) {
        rc = read_failed(&r, err, what, e->name);
        goto done;
    }
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    if (inflateInit2(&zs, -15) != Z_OK) {
        rc = cellar_fail(err, CELLAR_ENOMEM, "out of memory decoding %s", what);
        goto done;
    }
    uint8_t spare;
    zs.next_in = src;
    zs.avail_in = (uInt)e->comp_size;
    zs.next_out = e->size ? dst : &spare;
    zs.avail_out = e->size ? (uInt)e->size : 0;
    int ret = inflate(&zs, Z_FINISH);
    /* More output than the entry claims leaves the stream unfinished. */
    int whole = ret == Z_STREAM_END && zs.total_out == e->size;
    inflateEnd(&zs);
    if (!whole) {
        rc = cellar_fail(err, CELLAR_EFORMAT,
                         "%s: zip entry '%.200s' does not inflate to the %llu bytes it claims",
                         what, e->name, (unsigned long long)e->size);
        goto done;
    }
    if (crc32(0L, dst, (uInt)e->size) != e->crc32) {
        rc = cellar_fail(err, CELLAR_EFORMAT, "%s: zip entry '%.200s' fails its CRC-32", what,
                         e->name);
        goto done;
    }
    in->bytes = dst;
    dst = NULL;
done:
    free(src);
    free(dst);
    return rc;
}

static int zs_read_key(zarr_source *s, zarr_key *k, uint64_t off, size_t n, void *buf,
                       const char *what, cellar_error *err)
{
    zip_store *z = (zip_store *)s;
    if (off > k->size || n > k->size - off)
        return cellar_fail(err, CELLAR_EFORMAT, "%s ends early", what);
    zip_read r = {.z = z};
    if (k->fd >= 0) {
        if (n && read_at(&r, k->offset + off, n, buf) != 0)
            return cellar_fail(err, CELLAR_EFORMAT, "%s: the zip ends early", what);
        return 0;
    }
    inflated *in = k->priv;
    if (in->stored) {
        if (n && read_at(&r, in->data + off, n, buf) != 0)
            return read_failed(&r, err, what, in->entry->name);
        return 0;
    }
    if (!in->bytes) {
        int rc = inflate_entry(z, in, what, err);
        if (rc)
            return rc;
    }
    if (n)
        memcpy(buf, in->bytes + off, n);
    return 0;
}

static void zs_close_key(zarr_source *s, zarr_key *k)
{
    (void)s;
    inflated *in = k->priv;
    if (in)
        free(in->bytes);
    free(in);
    k->priv = NULL;
}

static int zs_list(zarr_source *s, const char *rel, zarr_list_fn fn, void *ctx, cellar_error *err)
{
    zip_store *z = (zip_store *)s;
    char prefix[4096];
    int pn = snprintf(prefix, sizeof prefix, "%s%s%s", z->prefix, rel, rel[0] ? "/" : "");
    if (pn < 0 || (size_t)pn >= sizeof prefix)
        return cellar_fail(err, CELLAR_ENOTFOUND, "no directory '%.200s' in the store", rel);
    size_t plen = (size_t)pn;
    char last_dir[1024] = "";
    size_t found = 0;
    for (size_t i = zip_directory_lower_bound(&z->dir, prefix); i < z->dir.count; i++) {
        const char *name = z->dir.entries[i].name;
        if (strncmp(name, prefix, plen) != 0)
            break;
        found++;
        const char *rest = name + plen;
        const char *slash = strchr(rest, '/');
        int rc = 0;
        if (!slash) {
            rc = fn(ctx, rest, ZARR_ENTRY_FILE);
        } else {
            size_t len = (size_t)(slash - rest);
            if (len >= sizeof last_dir || (!strncmp(last_dir, rest, len) && !last_dir[len]))
                continue;
            memcpy(last_dir, rest, len);
            last_dir[len] = '\0';
            rc = fn(ctx, last_dir, ZARR_ENTRY_DIR);
        }
        if (rc)
            return rc;
    }
    if (!found && rel[0])
        return cellar_fail(err, CELLAR_ENOTFOUND, "no directory '%.200s' in the store", rel);
    return 0;
}

static int zs_total_bytes(zarr_source *s, uint64_t *bytes)
{
    *bytes = (uint64_t)((zip_store *)s)->st.st_size;
    return 0;
}

static int64_t ns_of(struct timespec t)
{
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* The zip's ctime when it changed after the version opened, or less than
 * ZARR_SETTLE_NS before (a writer may still have been going). */
static int64_t zs_changed(zarr_source *s)
{
    zip_store *z = (zip_store *)s;
    if (z->fd < 0)
        return z->reader.changed ? z->reader.changed(z->reader.ctx) : 0;
    struct stat st;
    if (fstat(z->fd, &st) != 0)
        return 0;
    int64_t t = ns_of(st.st_ctim);
    return t >= ns_of(z->born) - ZARR_SETTLE_NS ? t : 0;
}

static void zs_destroy(zarr_source *s)
{
    zip_store *z = (zip_store *)s;
    if (!z)
        return;
    zip_directory_free(&z->dir);
    if (z->fd >= 0)
        close(z->fd);
    if (z->fd < 0 && z->reader.close)
        z->reader.close(z->reader.ctx);
    free(z);
}

static const zarr_source_ops zip_ops = {
    .open_key = zs_open_key,
    .read_key = zs_read_key,
    .close_key = zs_close_key,
    .list = zs_list,
    .total_bytes = zs_total_bytes,
    .changed = zs_changed,
    .destroy = zs_destroy,
};

/* Whether folder (with its '/', or "") holds root metadata of a zarr store. */
static int has_root_metadata(const zip_directory *d, const char *folder)
{
    static const char *const meta[] = {"zarr.json", ".zgroup", ".zarray", ".zmetadata"};
    char name[1100];
    for (size_t i = 0; i < sizeof meta / sizeof *meta; i++) {
        snprintf(name, sizeof name, "%s%s", folder, meta[i]);
        if (zip_directory_find(d, name))
            return 1;
    }
    return 0;
}

/* Where the store is: the zip's root, or its one top folder. */
static int find_store_prefix(zip_store *z, cellar_error *err)
{
    const zip_directory *d = &z->dir;
    if (has_root_metadata(d, ""))
        return 0;
    const char *first = d->count ? d->entries[0].name : "";
    const char *slash = strchr(first, '/');
    size_t len = slash ? (size_t)(slash - first) + 1 : 0;
    int one_folder = len > 0 && len < sizeof z->prefix;
    for (size_t i = 1; one_folder && i < d->count; i++)
        one_folder = !strncmp(d->entries[i].name, first, len);
    if (one_folder) {
        memcpy(z->prefix, first, len);
        z->prefix[len] = '\0';
        z->prefix_len = len;
        if (has_root_metadata(d, z->prefix))
            return 0;
    }
    return cellar_fail(err, CELLAR_EFORMAT,
                       "the zip holds no zarr store (no zarr.json, .zgroup or .zarray at its "
                       "root or in its one top folder)");
}

int zip_store_open_reader(const zip_reader *rd, zarr_source **out, cellar_error *err)
{
    *out = NULL;
    zip_store *z = calloc(1, sizeof *z);
    if (!z) {
        if (rd->close)
            rd->close(rd->ctx);
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory opening a zip store");
    }
    z->base.ops = &zip_ops;
    z->fd = -1;
    z->reader = *rd;
    clock_gettime(CLOCK_REALTIME_COARSE, &z->born);
    z->st.st_size = (off_t)rd->size;
    z->st.st_mtim = rd->mtime;
    zip_read r = {.z = z};
    cellar_error local;
    cellar_error_clear(&local);
    int rc = zip_directory_parse(read_at, &r, rd->size, &z->dir, &local);
    if (rc)
        rc = r.rc ? read_failed(&r, err, "the zip's directory", "")
                  : cellar_fail(err, rc, "%s", local.detail);
    if (!rc)
        rc = find_store_prefix(z, err);
    if (rc) {
        zs_destroy(&z->base);
        return rc;
    }
    *out = &z->base;
    return 0;
}

int zip_store_open(const char *path, zarr_source **out, cellar_error *err)
{
    *out = NULL;
    zip_store *z = calloc(1, sizeof *z);
    if (!z)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory opening a zip store");
    z->base.ops = &zip_ops;
    clock_gettime(CLOCK_REALTIME_COARSE, &z->born);
    z->fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    int rc = 0;
    if (z->fd < 0) {
        int e = errno;
        rc = e == EMFILE || e == ENFILE || e == ENOMEM
                 ? cellar_fail(err, CELLAR_EIO, "cannot open the zip now: %s", strerror(e))
                 : cellar_fail(err, CELLAR_EFORMAT, "the zip cannot be opened: %s", strerror(e));
        goto done;
    }
    if (fstat(z->fd, &z->st) != 0 || !S_ISREG(z->st.st_mode)) {
        rc = cellar_fail(err, CELLAR_EFORMAT, "the zip is not a regular file");
        goto done;
    }
    fcntl(z->fd, F_SETFL, 0);
    zip_read r = {.z = z};
    rc = zip_directory_parse(read_at, &r, (uint64_t)z->st.st_size, &z->dir, err);
    if (!rc)
        rc = find_store_prefix(z, err);
done:
    if (rc) {
        zs_destroy(&z->base);
        return rc;
    }
    *out = &z->base;
    return 0;
}
