/* storage/zip: the central directory parse (zip_dir) on zips built here
 * byte by byte, each with one property or one lie, and the zip key source
 * (zip_store) on files: lookup, listing, stored and deflated reads, the
 * limits a deflated entry is held to. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "common/error.h"
#include "storage/budget.h"
#include "storage/zip/zip_dir.h"
#include "storage/zip/zip_store.h"
#include "tests/unit/unit.h"

/* ---- a zip writer, small and exact ---- */

#define ZB_MAX 16

typedef struct zb {
    uint8_t buf[1 << 16];
    size_t len;
    int n;
    struct {
        char name[80];
        uint64_t off, csize, usize;
        uint32_t crc;
        uint16_t method, flags;
    } e[ZB_MAX];
} zb;

static void p16(zb *z, uint32_t v)
{
    z->buf[z->len++] = (uint8_t)v;
    z->buf[z->len++] = (uint8_t)(v >> 8);
}

static void p32(zb *z, uint32_t v)
{
    p16(z, v & 0xFFFF);
    p16(z, v >> 16);
}

static void p64(zb *z, uint64_t v)
{
    p32(z, (uint32_t)v);
    p32(z, (uint32_t)(v >> 32));
}

static void pbytes(zb *z, const void *p, size_t n)
{
    memcpy(z->buf + z->len, p, n);
    z->len += n;
}

/* Adds an entry: stored (method 0) or raw-deflated (8) from data. */
static void zb_add(zb *z, const char *name, const char *data, uint16_t method, uint16_t flags)
{
    size_t n = strlen(data);
    uint8_t packed[4096];
    size_t clen = n;
    const uint8_t *body = (const uint8_t *)data;
    if (method == 8) {
        z_stream s;
        memset(&s, 0, sizeof s);
        deflateInit2(&s, 9, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY);
        s.next_in = (uint8_t *)data;
        s.avail_in = (uInt)n;
        s.next_out = packed;
        s.avail_out = sizeof packed;
        deflate(&s, Z_FINISH);
        clen = s.total_out;
        deflateEnd(&s);
        body = packed;
    }
    int i = z->n++;
    snprintf(z->e[i].name, sizeof z->e[i].name, "%s", name);
    z->e[i].off = z->len;
    z->e[i].csize = clen;
    z->e[i].usize = n;
    z->e[i].crc = (uint32_t)crc32(0, (const uint8_t *)data, (uInt)n);
    z->e[i].method = method;
    z->e[i].flags = flags;
    p32(z, 0x04034b50);
    p16(z, 20);
    p16(z, flags);
    p16(z, method);
    p32(z, 0);
    p32(z, z->e[i].crc);
    p32(z, (uint32_t)clen);
    p32(z, (uint32_t)n);
    p16(z, (uint32_t)strlen(name));
    p16(z, 0);
    pbytes(z, name, strlen(name));
    pbytes(z, body, clen);
}

/* Writes the central directory and the end records; zip64 puts every
 * size and offset in zip64 extra fields and adds the zip64 end record and
 * its locator. */
static void zb_finish(zb *z, int zip64)
{
    uint64_t cd = z->len;
    for (int i = 0; i < z->n; i++) {
        p32(z, 0x02014b50);
        p16(z, 45);
        p16(z, 45);
        p16(z, z->e[i].flags);
        p16(z, z->e[i].method);
        p32(z, 0);
        p32(z, z->e[i].crc);
        p32(z, zip64 ? 0xFFFFFFFF : (uint32_t)z->e[i].csize);
        p32(z, zip64 ? 0xFFFFFFFF : (uint32_t)z->e[i].usize);
        p16(z, (uint32_t)strlen(z->e[i].name));
        p16(z, zip64 ? 28 : 0);
        p16(z, 0);
        p16(z, 0);
        p16(z, 0);
        p32(z, 0);
        p32(z, zip64 ? 0xFFFFFFFF : (uint32_t)z->e[i].off);
        pbytes(z, z->e[i].name, strlen(z->e[i].name));
        if (zip64) {
            p16(z, 1);
            p16(z, 24);
            p64(z, z->e[i].usize);
            p64(z, z->e[i].csize);
            p64(z, z->e[i].off);
        }
    }
    uint64_t cd_size = z->len - cd;
    if (zip64) {
        uint64_t at = z->len;
        p32(z, 0x06064b50);
        p64(z, 44);
        p16(z, 45);
        p16(z, 45);
        p32(z, 0);
        p32(z, 0);
        p64(z, (uint64_t)z->n);
        p64(z, (uint64_t)z->n);
        p64(z, cd_size);
        p64(z, cd);
        p32(z, 0x07064b50);
        p32(z, 0);
        p64(z, at);
        p32(z, 1);
    }
    p32(z, 0x06054b50);
    p16(z, 0);
    p16(z, 0);
    p16(z, zip64 ? 0xFFFF : (uint32_t)z->n);
    p16(z, zip64 ? 0xFFFF : (uint32_t)z->n);
    p32(z, zip64 ? 0xFFFFFFFF : (uint32_t)cd_size);
    p32(z, zip64 ? 0xFFFFFFFF : (uint32_t)cd);
    p16(z, 0);
}

/* The offset of the end of central directory record. */
static size_t end_at(const zb *z)
{
    return z->len - 22;
}

static void w32(zb *z, size_t at, uint32_t v)
{
    size_t keep = z->len;
    z->len = at;
    p32(z, v);
    z->len = keep;
}

static void w16(zb *z, size_t at, uint32_t v)
{
    size_t keep = z->len;
    z->len = at;
    p16(z, v);
    z->len = keep;
}

typedef struct mem {
    const uint8_t *p;
    size_t n;
} mem;

static int mem_read(void *ctx, uint64_t off, size_t n, void *buf)
{
    const mem *m = ctx;
    if (off > m->n || n > m->n - off)
        return -1;
    memcpy(buf, m->p + off, n);
    return 0;
}

static int parse(zb *z, zip_directory *d, cellar_error *err)
{
    mem m = {z->buf, z->len};
    cellar_error_clear(err);
    return zip_directory_parse(mem_read, &m, z->len, d, err);
}

/* The central header of entry i (after zb_finish without zip64). */
static size_t central_at(const zb *z, int i)
{
    size_t at = z->e[z->n - 1].off + 30 + strlen(z->e[z->n - 1].name) + z->e[z->n - 1].csize;
    for (int k = 0; k < i; k++)
        at += 46 + strlen(z->e[k].name);
    return at;
}

/* ---- the directory ---- */

void test_zip_dir_valid(void);
void test_zip_dir_valid(void)
{
    for (int zip64 = 0; zip64 < 2; zip64++) {
        zb *z = calloc(1, sizeof *z);
        zb_add(z, "zarr.json", "{\"zarr_format\": 3}", 0, 0);
        zb_add(z, "X/c/0/0", "packed packed packed packed packed", 8, 0);
        zb_add(z, "X/zarr.json", "{}", 0, 0);
        zb_add(z, "zarr.json", "{\"zarr_format\": 3, \"later\": 1}", 0, 0);
        zb_add(z, "X/", "", 0, 0); /* a directory entry */
        zb_finish(z, zip64);
        zip_directory d;
        cellar_error err;
        CHECK_EQ(parse(z, &d, &err), 0);
        CHECK_EQ(d.count, 3); /* the directory entry dropped, zarr.json once */
        CHECK_STR_EQ(d.entries[0].name, "X/c/0/0");
        CHECK_STR_EQ(d.entries[1].name, "X/zarr.json");
        const zip_entry *e = zip_directory_find(&d, "zarr.json");
        CHECK(e != NULL);
        CHECK_EQ(e->local_offset, z->e[3].off); /* the last of a name given twice */
        CHECK_EQ(e->size, strlen("{\"zarr_format\": 3, \"later\": 1}"));
        CHECK(zip_directory_find(&d, "X") == NULL);
        CHECK(zip_directory_find(&d, "nope") == NULL);
        uint64_t off = 0;
        mem m = {z->buf, z->len};
        CHECK_EQ(zip_entry_data_offset((zip_entry *)e, mem_read, &m, &off, &err), 0);
        CHECK_EQ(off, z->e[3].off + 30 + 9);
        CHECK(!memcmp(z->buf + off, "{\"zarr_format\": 3, \"later\"", 20));
        const zip_entry *c = zip_directory_find(&d, "X/c/0/0");
        CHECK_EQ(c->method, ZIP_DEFLATED);
        CHECK_EQ(c->size, 34);
        CHECK_EQ(zip_entry_check(c, &err), 0);
        zip_directory_free(&d);
        free(z);
    }
}

void test_zip_dir_refuses_lies(void);
void test_zip_dir_refuses_lies(void)
{
    zb *good = calloc(1, sizeof *good);
    zb_add(good, "a", "first entry", 0, 0);
    zb_add(good, "b/c", "second entry", 0, 0);
    zb_finish(good, 0);
    zip_directory d;
    cellar_error err;
    zb *z = calloc(1, sizeof *z);
    size_t eocd = end_at(good);

    /* the directory larger than the file, at offset 0 */
    *z = *good;
    w32(z, eocd + 12, 0xFFFFFFF0);
    w32(z, eocd + 16, 0);
    CHECK_EQ(parse(z, &d, &err), CELLAR_EFORMAT);
    CHECK(strstr(err.detail, "does not end where"));
    /* more entries than the directory can hold */
    *z = *good;
    w16(z, eocd + 8, 60000);
    w16(z, eocd + 10, 60000);
    CHECK_EQ(parse(z, &d, &err), CELLAR_EFORMAT);
    CHECK(strstr(err.detail, "claims 60000 entries"));
    /* a local header offset past the directory */
    *z = *good;
    w32(z, central_at(z, 1) + 42, 60000);
    CHECK_EQ(parse(z, &d, &err), CELLAR_EFORMAT);
    CHECK(strstr(err.detail, "overlaps"));
    /* two entries on one local header */
    *z = *good;
    w32(z, central_at(z, 1) + 42, 0);
    CHECK_EQ(parse(z, &d, &err), CELLAR_EFORMAT);
    CHECK(strstr(err.detail, "overlaps"));
    /* an entry whose stored size runs into the next one */
    *z = *good;
    w32(z, central_at(z, 0) + 20, 12 + 30 + 3);
    w32(z, central_at(z, 0) + 24, 12 + 30 + 3);
    CHECK_EQ(parse(z, &d, &err), CELLAR_EFORMAT);
    CHECK(strstr(err.detail, "overlaps"));
    /* multi-disk */
    *z = *good;
    w16(z, eocd + 4, 1);
    CHECK_EQ(parse(z, &d, &err), CELLAR_EFORMAT);
    /* the end record calling for zip64 records that are not there */
    *z = *good;
    w32(z, eocd + 16, 0xFFFFFFFF);
    CHECK_EQ(parse(z, &d, &err), CELLAR_EFORMAT);
    /* truncated, empty, garbage */
    *z = *good;
    z->len -= 5;
    CHECK_EQ(parse(z, &d, &err), CELLAR_EFORMAT);
    z->len = 10;
    CHECK_EQ(parse(z, &d, &err), CELLAR_EFORMAT);
    /* a central header with a bad signature */
    *z = *good;
    w32(z, central_at(z, 1), 0x12345678);
    CHECK_EQ(parse(z, &d, &err), CELLAR_EFORMAT);
    free(z);
    free(good);
}

void test_zip_dir_refuses_names(void);
void test_zip_dir_refuses_names(void)
{
    static const char *const bad[] = {"../x", "a/../x", "/etc/passwd", "a//b", "./a", "a\\b",
                                      "C:x", "a/./b", "a\x01", ".."};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        zb *z = calloc(1, sizeof *z);
        zb_add(z, "zarr.json", "{}", 0, 0);
        zb_add(z, bad[i], "x", 0, 0);
        zb_finish(z, 0);
        zip_directory d;
        cellar_error err;
        CHECK_EQ(parse(z, &d, &err), CELLAR_EFORMAT);
        CHECK(strstr(err.detail, "plain relative path"));
        free(z);
    }
    static const char *const good[] = {"a..b", "..a/b", "a/.zarray", "name with space é"};
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        zb *z = calloc(1, sizeof *z);
        zb_add(z, good[i], "x", 0, 0);
        zb_finish(z, 0);
        zip_directory d;
        cellar_error err;
        CHECK_EQ(parse(z, &d, &err), 0);
        CHECK(zip_directory_find(&d, good[i]) != NULL);
        zip_directory_free(&d);
        free(z);
    }
}

void test_zip_entries_refused_when_read(void);
void test_zip_entries_refused_when_read(void)
{
    zb *z = calloc(1, sizeof *z);
    zb_add(z, "enc", "secret", 0, 1);
    zb_add(z, "bz", "bzip2 pretend", 12, 0);
    zb_add(z, "mismatch", "local says deflate", 0, 0);
    zb_add(z, "sizes", "stored with two sizes", 0, 0);
    zb_finish(z, 0);
    w16(z, z->e[2].off + 8, 8);              /* local method 8, central 0 */
    w32(z, central_at(z, 3) + 24, 5);        /* central usize 5 of 21 stored bytes */
    w32(z, z->e[3].off + 22, 5);
    zip_directory d;
    cellar_error err;
    CHECK_EQ(parse(z, &d, &err), 0);
    mem m = {z->buf, z->len};
    uint64_t off;
    CHECK_EQ(zip_entry_check(zip_directory_find(&d, "enc"), &err), CELLAR_EFORMAT);
    CHECK(strstr(err.detail, "encrypted"));
    cellar_error_clear(&err);
    CHECK_EQ(zip_entry_check(zip_directory_find(&d, "bz"), &err), CELLAR_EFORMAT);
    CHECK(strstr(err.detail, "compression method 12"));
    zip_entry *mm = (zip_entry *)zip_directory_find(&d, "mismatch");
    CHECK_EQ(zip_entry_check(mm, &err), 0);
    cellar_error_clear(&err);
    CHECK_EQ(zip_entry_data_offset(mm, mem_read, &m, &off, &err), CELLAR_EFORMAT);
    CHECK(strstr(err.detail, "local header disagrees"));
    cellar_error_clear(&err);
    CHECK_EQ(zip_entry_check(zip_directory_find(&d, "sizes"), &err), CELLAR_EFORMAT);
    CHECK(strstr(err.detail, "sizes differ"));
    zip_directory_free(&d);
    free(z);
}

void test_zip_dir_zip64_locator_lies(void);
void test_zip_dir_zip64_locator_lies(void)
{
    zb *z = calloc(1, sizeof *z);
    zb_add(z, "a", "x", 0, 0);
    zb_finish(z, 1);
    size_t loc = z->len - 22 - 20;
    zip_directory d;
    cellar_error err;
    CHECK_EQ(parse(z, &d, &err), 0);
    zip_directory_free(&d);
    zb *bad = calloc(1, sizeof *bad);
    *bad = *z;
    w32(bad, loc + 8, 3); /* the zip64 end record's offset: nowhere */
    CHECK_EQ(parse(bad, &d, &err), CELLAR_EFORMAT);
    *bad = *z;
    size_t rec = loc - 56;
    w32(bad, rec + 40, 0); /* directory size 2^32 + ... */
    w32(bad, rec + 44, 1);
    CHECK_EQ(parse(bad, &d, &err), CELLAR_EFORMAT);
    *bad = *z;
    w32(bad, rec + 24, 1000000); /* a million entries */
    w32(bad, rec + 32, 1000000);
    CHECK_EQ(parse(bad, &d, &err), CELLAR_EFORMAT);
    free(bad);
    free(z);
}

/* ---- the key source ---- */

static int write_file(const char *path, const zb *z)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    size_t n = fwrite(z->buf, 1, z->len, f);
    return fclose(f) == 0 && n == z->len ? 0 : -1;
}

typedef struct seen {
    char names[16][64];
    int types[16];
    int n;
} seen;

static int note_entry(void *ctx, const char *name, zarr_entry_type type)
{
    seen *s = ctx;
    if (s->n < 16) {
        snprintf(s->names[s->n], sizeof s->names[s->n], "%s", name);
        s->types[s->n++] = type;
    }
    return 0;
}

void test_zip_store_source(void);
void test_zip_store_source(void)
{
    char path[] = "/tmp/cellar-zip-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    close(fd);
    zb *z = calloc(1, sizeof *z);
    zb_add(z, "top/.zgroup", "{\"zarr_format\": 2}", 0, 0);
    zb_add(z, "top/X/.zarray", "{}", 8, 0);
    zb_add(z, "top/X/0.0", "0123456789abcdef", 0, 0);
    zb_add(z, "top/obs/a/0", "zeros zeros zeros zeros zeros zeros", 8, 0);
    zb_finish(z, 0);
    CHECK_EQ(write_file(path, z), 0);
    zarr_source *src = NULL;
    cellar_error err;
    cellar_error_clear(&err);
    CHECK_EQ(zip_store_open(path, &src, &err), 0);
    zarr_key k;
    /* the store is the one top folder */
    CHECK_EQ(src->ops->open_key(src, "X/0.0", &k, &err), 0);
    CHECK(k.found && k.fd >= 0 && k.size == 16);
    CHECK_EQ(k.offset, z->e[2].off + 30 + strlen("top/X/0.0"));
    char buf[64];
    CHECK_EQ(src->ops->read_key(src, &k, 4, 6, buf, "X/0.0", &err), 0);
    CHECK(!memcmp(buf, "456789", 6));
    CHECK_EQ(src->ops->read_key(src, &k, 12, 6, buf, "X/0.0", &err), CELLAR_EFORMAT);
    src->ops->close_key(src, &k);
    cellar_error_clear(&err);
    CHECK_EQ(src->ops->open_key(src, "obs/a/0", &k, &err), 0);
    CHECK(k.found && k.fd < 0 && k.size == 35);
    CHECK_EQ(src->ops->read_key(src, &k, 6, 5, buf, "obs/a/0", &err), 0);
    CHECK(!memcmp(buf, "zeros", 5));
    src->ops->close_key(src, &k);
    CHECK_EQ(src->ops->open_key(src, "top/X/0.0", &k, &err), 0);
    CHECK(!k.found);
    src->ops->close_key(src, &k);
    seen s = {0};
    CHECK_EQ(src->ops->list(src, "", note_entry, &s, &err), 0);
    CHECK_EQ(s.n, 3);
    CHECK_STR_EQ(s.names[0], ".zgroup");
    CHECK_EQ(s.types[0], ZARR_ENTRY_FILE);
    CHECK_STR_EQ(s.names[1], "X");
    CHECK_EQ(s.types[1], ZARR_ENTRY_DIR);
    CHECK_STR_EQ(s.names[2], "obs");
    memset(&s, 0, sizeof s);
    CHECK_EQ(src->ops->list(src, "X", note_entry, &s, &err), 0);
    CHECK_EQ(s.n, 2);
    CHECK_EQ(src->ops->list(src, "X/0.0", note_entry, &s, &err), CELLAR_ENOTFOUND);
    CHECK_EQ(src->ops->list(src, "nope", note_entry, &s, &err), CELLAR_ENOTFOUND);
    cellar_error_clear(&err);
    uint64_t bytes = 0;
    CHECK_EQ(src->ops->total_bytes(src, &bytes), 0);
    CHECK_EQ(bytes, z->len);
    src->ops->destroy(src);

    /* a deflated entry claiming more than the budget, or than deflate
     * makes of its bytes, or less than its stream makes */
    zb *big = calloc(1, sizeof *big);
    zb_add(big, ".zgroup", "{}", 0, 0);
    zb_add(big, "c", "zeros zeros zeros zeros zeros zeros", 8, 0);
    zb_finish(big, 0);
    size_t cen_c = central_at(big, 1);
    uint64_t saved = budget_whole();
    static const uint32_t claims[] = {30, 2000000, 40};
    static const char *const why[] = {"does not inflate", "past the limit", "does not inflate"};
    for (int i = 0; i < 3; i++) {
        zb *t = calloc(1, sizeof *t);
        *t = *big;
        w32(t, cen_c + 24, claims[i]);
        w32(t, t->e[1].off + 22, claims[i]);
        CHECK_EQ(write_file(path, t), 0);
        budget_set_whole(1000);
        CHECK_EQ(zip_store_open(path, &src, &err), 0);
        CHECK_EQ(src->ops->open_key(src, "c", &k, &err), 0);
        char *out = malloc(claims[i]);
        cellar_error_clear(&err);
        CHECK_EQ(src->ops->read_key(src, &k, 0, claims[i] < 1000 ? claims[i] : 10, out, "c", &err),
                 CELLAR_EFORMAT);
        CHECK(strstr(err.detail, why[i]));
        free(out);
        src->ops->close_key(src, &k);
        src->ops->destroy(src);
        free(t);
    }
    budget_set_whole(saved);
    /* a zip without a zarr store */
    zb *none = calloc(1, sizeof *none);
    zb_add(none, "README", "text", 0, 0);
    zb_finish(none, 0);
    CHECK_EQ(write_file(path, none), 0);
    cellar_error_clear(&err);
    CHECK_EQ(zip_store_open(path, &src, &err), CELLAR_EFORMAT);
    CHECK(strstr(err.detail, "no zarr store"));
    unlink(path);
    free(none);
    free(big);
    free(z);
}
