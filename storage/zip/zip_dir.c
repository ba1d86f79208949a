/* The central directory of a zip file (storage/zip/zip_dir.h says what is
 * checked and why it is our own code).  Layout: APPNOTE.TXT 6.3, sections
 * 4.3.7 (local header), 4.3.12 (central header), 4.3.14-16 (zip64 end
 * record, its locator, the end record), 4.5.3 (the zip64 extra field). */
#include "storage/zip/zip_dir.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SIG_LOCAL 0x04034b50u
#define SIG_CENTRAL 0x02014b50u
#define SIG_END 0x06054b50u
#define SIG_END64 0x06064b50u
#define SIG_LOCATOR64 0x07064b50u

#define END_SIZE 22
#define LOCATOR64_SIZE 20
#define END64_SIZE 56
#define CENTRAL_SIZE 46
#define LOCAL_SIZE 30
#define MAX_COMMENT 65535

#define FLAG_ENCRYPTED 0x0001u
#define FLAG_DESCRIPTOR 0x0008u
#define FLAG_STRONG_ENCRYPTION 0x0040u

static uint16_t le16(const uint8_t *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t le64(const uint8_t *p)
{
    return (uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32;
}

/* ---- the end records -------------------------------------------------- */

typedef struct dir_span {
    uint64_t offset, size, entries;
    uint64_t end; /* where the records after the directory start */
} dir_span;

/* Finds the end of central directory record in the file's last bytes: the
 * last signature whose comment fits before the end of the file.  *pos is
 * its offset. */
static int find_end_record(zip_read_fn rd, void *ctx, uint64_t file_size, uint8_t rec[END_SIZE],
                           uint64_t *pos, cellar_error *err)
{
    if (file_size < END_SIZE)
        return cellar_fail(err, CELLAR_EFORMAT, "not a zip file (%llu bytes)",
                           (unsigned long long)file_size);
    size_t tail = file_size < END_SIZE + MAX_COMMENT ? (size_t)file_size : END_SIZE + MAX_COMMENT;
    uint8_t *buf = malloc(tail);
    if (!buf)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory reading a zip directory");
    int rc = CELLAR_EFORMAT;
    if (rd(ctx, file_size - tail, tail, buf) != 0) {
        rc = cellar_fail(err, CELLAR_EFORMAT, "the zip file cannot be read to its end");
        goto done;
    }
    for (size_t i = tail - END_SIZE + 1; i-- > 0;) {
        if (le32(buf + i) != SIG_END)
            continue;
        if (i + END_SIZE + le16(buf + i + 20) > tail)
            continue;
        memcpy(rec, buf + i, END_SIZE);
        *pos = file_size - tail + i;
        rc = 0;
        break;
    }
    if (rc)
        cellar_fail(err, CELLAR_EFORMAT, "not a zip file: no end of central directory record");
done:
    free(buf);
    return rc;
}

/* The zip64 end record that the locator before the end record (at pos)
 * points to, when there is one: *found = 0 without a locator. */
static int read_end64(zip_read_fn rd, void *ctx, uint64_t pos, dir_span *span, int *found,
                      cellar_error *err)
{
    *found = 0;
    uint8_t loc[LOCATOR64_SIZE], rec[END64_SIZE];
    if (pos < LOCATOR64_SIZE || rd(ctx, pos - LOCATOR64_SIZE, LOCATOR64_SIZE, loc) != 0 ||
        le32(loc) != SIG_LOCATOR64)
        return 0;
    *found = 1;
    uint64_t at = le64(loc + 8);
    if (le32(loc + 4) != 0 || le32(loc + 16) > 1)
        return cellar_fail(err, CELLAR_EFORMAT, "zip archives on several disks are not read");
    if (at > pos - LOCATOR64_SIZE || pos - LOCATOR64_SIZE - at < END64_SIZE ||
        rd(ctx, at, END64_SIZE, rec) != 0 || le32(rec) != SIG_END64)
        return cellar_fail(err, CELLAR_EFORMAT,
                           "the zip64 locator points to no zip64 end of central directory");
    /* The record's own size counts what follows its first 12 bytes; it may
     * carry an extensible data sector, which must end at the locator. */
    uint64_t rec_size = le64(rec + 4);
    if (rec_size < END64_SIZE - 12 || rec_size > pos - LOCATOR64_SIZE - at - 12 ||
        at + 12 + rec_size != pos - LOCATOR64_SIZE)
        return cellar_fail(err, CELLAR_EFORMAT, "the zip64 end of central directory has a bad size");
    if (le32(rec + 16) != 0 || le32(rec + 20) != 0 || le64(rec + 24) != le64(rec + 32))
        return cellar_fail(err, CELLAR_EFORMAT, "zip archives on several disks are not read");
    span->entries = le64(rec + 32);
    span->size = le64(rec + 40);
    span->offset = le64(rec + 48);
    span->end = at;
    return 0;
}

static int read_span(zip_read_fn rd, void *ctx, uint64_t file_size, dir_span *span,
                     cellar_error *err)
{
    uint8_t rec[END_SIZE] = {0};
    uint64_t pos = 0;
    int rc = find_end_record(rd, ctx, file_size, rec, &pos, err);
    if (rc)
        return rc;
    uint16_t disk = le16(rec + 4), cd_disk = le16(rec + 6);
    uint16_t on_disk = le16(rec + 8), total = le16(rec + 10);
    if ((disk != 0 && disk != 0xFFFF) || (cd_disk != 0 && cd_disk != 0xFFFF) ||
        (on_disk != total))
        return cellar_fail(err, CELLAR_EFORMAT, "zip archives on several disks are not read");
    span->entries = total;
    span->size = le32(rec + 12);
    span->offset = le32(rec + 16);
    span->end = pos;
    int found = 0;
    rc = read_end64(rd, ctx, pos, span, &found, err);
    if (rc)
        return rc;
    if (!found && (total == 0xFFFF || span->size == 0xFFFFFFFFu || span->offset == 0xFFFFFFFFu))
        return cellar_fail(err, CELLAR_EFORMAT,
                           "the zip's end record asks for zip64 records that are not there");
    /* Bounded by the file before anything is allocated. */
    if (span->offset > span->end || span->size > span->end - span->offset ||
        span->offset + span->size != span->end)
        return cellar_fail(err, CELLAR_EFORMAT,
                           "the zip's central directory (%llu bytes at %llu) does not end "
                           "where its end record starts (%llu)",
                           (unsigned long long)span->size, (unsigned long long)span->offset,
                           (unsigned long long)span->end);
    if (span->size > ZIP_MAX_DIRECTORY_BYTES)
        return cellar_fail(err, CELLAR_EFORMAT,
                           "the zip's central directory is %llu bytes, over the limit of %llu",
                           (unsigned long long)span->size,
                           (unsigned long long)ZIP_MAX_DIRECTORY_BYTES);
    if (span->entries > span->size / CENTRAL_SIZE)
        return cellar_fail(err, CELLAR_EFORMAT,
                           "the zip claims %llu entries in a central directory of %llu bytes",
                           (unsigned long long)span->entries, (unsigned long long)span->size);
    return 0;
}

/* ---- names ------------------------------------------------------------- */

/* Whether the n bytes of name are a plain relative path ('/'-separated
 * segments, none "", "." or ".."; a trailing '/' marks a directory). */
static int name_is_plain(const uint8_t *name, size_t n)
{
    if (n == 0 || name[0] == '/')
        return 0;
    if (n >= 2 && name[1] == ':')
        return 0; /* a drive: C:... */
    size_t start = 0;
    for (size_t i = 0; i <= n; i++) {
        if (i < n) {
            if (name[i] < 0x20 || name[i] == 0x7f || name[i] == '\\')
                return 0;
            if (name[i] != '/')
                continue;
        } else if (name[n - 1] == '/') {
            break; /* the directory mark */
        }
        size_t seg = i - start;
        if (seg == 0 || (seg == 1 && name[start] == '.') ||
            (seg == 2 && name[start] == '.' && name[start + 1] == '.'))
            return 0;
        start = i + 1;
    }
    return 1;
}

/* ---- the central directory --------------------------------------------- */

/* The zip64 extra field of a central header: the values that the header
 * set to all ones, in the order usize, csize, offset (the disk is refused
 * before). */
static int apply_zip64_extra(const uint8_t *extra, size_t n, uint64_t *usize, uint64_t *csize,
                             uint64_t *offset)
{
    int need_u = *usize == 0xFFFFFFFFu, need_c = *csize == 0xFFFFFFFFu,
        need_o = *offset == 0xFFFFFFFFu;
    size_t p = 0;
    while (p + 4 <= n) {
        uint16_t id = le16(extra + p), len = le16(extra + p + 2);
        if (len > n - p - 4)
            return -1;
        if (id == 0x0001) {
            const uint8_t *f = extra + p + 4;
            size_t left = len;
            uint64_t *want[3] = {need_u ? usize : NULL, need_c ? csize : NULL,
                                 need_o ? offset : NULL};
            for (int i = 0; i < 3; i++) {
                if (!want[i])
                    continue;
                if (left < 8)
                    return -1;
                *want[i] = le64(f);
                f += 8;
                left -= 8;
            }
            return 0;
        }
        p += 4 + (size_t)len;
    }
    return need_u || need_c || need_o ? -1 : 0;
}

/* By name, then by place in the directory. */
static int cmp_entry_name(const void *a, const void *b)
{
    const zip_entry *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    return c ? c : x->order < y->order ? -1 : x->order > y->order;
}

static int cmp_entry_offset(const void *a, const void *b)
{
    const zip_entry *x = *(const zip_entry *const *)a, *y = *(const zip_entry *const *)b;
    return x->local_offset < y->local_offset ? -1 : x->local_offset > y->local_offset;
}

/* Every entry's span (local header, its name as the directory gives it,
 * the stored bytes) lies before the directory and before the next entry;
 * each entry's end is where the next one starts. */
static int check_spans(zip_directory *d, cellar_error *err)
{
    if (!d->count)
        return 0;
    zip_entry **by_offset = malloc(d->count * sizeof *by_offset);
    if (!by_offset)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory reading a zip directory");
    for (size_t i = 0; i < d->count; i++)
        by_offset[i] = &d->entries[i];
    qsort(by_offset, d->count, sizeof *by_offset, cmp_entry_offset);
    int rc = 0;
    for (size_t i = 0; i < d->count && !rc; i++) {
        zip_entry *e = by_offset[i];
        e->end = i + 1 < d->count ? by_offset[i + 1]->local_offset : d->directory_offset;
        uint64_t head = LOCAL_SIZE + (uint64_t)e->name_len;
        if (e->local_offset > e->end || e->end - e->local_offset < head ||
            e->comp_size > e->end - e->local_offset - head)
            rc = cellar_fail(err, CELLAR_EFORMAT,
                             "zip entry '%.200s' (%llu bytes at %llu) overlaps the next entry "
                             "or the central directory",
                             e->name, (unsigned long long)e->comp_size,
                             (unsigned long long)e->local_offset);
    }
    free(by_offset);
    return rc;
}

/* Parses the n central headers in cd (size bytes) into d. */
static int parse_entries(const uint8_t *cd, uint64_t size, uint64_t n, zip_directory *d,
                         cellar_error *err)
{
    d->entries = calloc(n ? (size_t)n : 1, sizeof *d->entries);
    d->names = malloc((size_t)size + 1); /* names take at most the directory's bytes */
    if (!d->entries || !d->names)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory reading a zip directory");
    size_t p = 0, names_used = 0;
    for (uint64_t i = 0; i < n; i++) {
        if (size - p < CENTRAL_SIZE || le32(cd + p) != SIG_CENTRAL)
            return cellar_fail(err, CELLAR_EFORMAT,
                               "zip central directory entry %llu is malformed",
                               (unsigned long long)i);
        const uint8_t *h = cd + p;
        size_t nl = le16(h + 28), xl = le16(h + 30), cl = le16(h + 32);
        if (size - p - CENTRAL_SIZE < nl + xl + cl)
            return cellar_fail(err, CELLAR_EFORMAT,
                               "zip central directory entry %llu runs past the directory",
                               (unsigned long long)i);
        const uint8_t *name = h + CENTRAL_SIZE;
        if (!name_is_plain(name, nl))
            return cellar_fail(err, CELLAR_EFORMAT,
                               "zip entry %llu has a name that is not a plain relative path "
                               "('..', an absolute path, a drive, a backslash or a control "
                               "character)",
                               (unsigned long long)i);
        uint64_t usize = le32(h + 24), csize = le32(h + 20), offset = le32(h + 42);
        if (le16(h + 34) != 0 && le16(h + 34) != 0xFFFF)
            return cellar_fail(err, CELLAR_EFORMAT, "zip archives on several disks are not read");
        if (apply_zip64_extra(name + nl, xl, &usize, &csize, &offset) != 0)
            return cellar_fail(err, CELLAR_EFORMAT,
                               "zip entry %llu has a malformed zip64 extra field",
                               (unsigned long long)i);
        p += CENTRAL_SIZE + nl + xl + cl;
        zip_entry *e = &d->entries[d->count];
        e->local_offset = offset;
        e->comp_size = csize;
        e->size = usize;
        e->crc32 = le32(h + 16);
        e->flags = le16(h + 8);
        e->method = le16(h + 10);
        e->name_len = (uint16_t)nl;
        e->order = i;
        if (name[nl - 1] == '/') {
            /* A directory entry still takes room in the file. */
            if (csize != 0)
                return cellar_fail(err, CELLAR_EFORMAT, "zip directory entry %llu holds data",
                                   (unsigned long long)i);
        }
        memcpy(d->names + names_used, name, nl);
        d->names[names_used + nl] = '\0';
        e->name = d->names + names_used;
        names_used += nl + 1;
        d->count++;
    }
    return 0;
}

/* Drops directory entries (after their spans were checked) and, of a name
 * given more than once, keeps the last in the directory: zarr's ZipStore
 * appends a metadata document again each time it rewrites it, and Python's
 * zipfile (which zarr reads with) takes the last. */
static void keep_files(zip_directory *d)
{
    size_t k = 0;
    for (size_t i = 0; i < d->count; i++) {
        size_t nl = d->entries[i].name_len;
        if (d->entries[i].name[nl - 1] != '/')
            d->entries[k++] = d->entries[i];
    }
    if (k)
        qsort(d->entries, k, sizeof *d->entries, cmp_entry_name);
    size_t u = 0;
    for (size_t i = 0; i < k; i++) {
        if (u && !strcmp(d->entries[u - 1].name, d->entries[i].name))
            u--; /* a later one of the same name replaces it */
        d->entries[u++] = d->entries[i];
    }
    d->count = u;
}

int zip_directory_parse(zip_read_fn rd, void *ctx, uint64_t file_size, zip_directory *out,
                        cellar_error *err)
{
    memset(out, 0, sizeof *out);
    dir_span span = {0};
    int rc = read_span(rd, ctx, file_size, &span, err);
    if (rc)
        return rc;
    out->directory_offset = span.offset;
    uint8_t *cd = malloc(span.size ? (size_t)span.size : 1);
    if (!cd)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory reading a zip directory");
    if (span.size && rd(ctx, span.offset, (size_t)span.size, cd) != 0)
        rc = cellar_fail(err, CELLAR_EFORMAT, "the zip's central directory cannot be read");
    if (!rc)
        rc = parse_entries(cd, span.size, span.entries, out, err);
    free(cd);
    if (!rc)
        rc = check_spans(out, err);
    if (!rc)
        keep_files(out);
    if (rc)
        zip_directory_free(out);
    return rc;
}

void zip_directory_free(zip_directory *d)
{
    free(d->entries);
    free(d->names);
    memset(d, 0, sizeof *d);
}

size_t zip_directory_lower_bound(const zip_directory *d, const char *prefix)
{
    size_t lo = 0, hi = d->count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (strcmp(d->entries[mid].name, prefix) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

const zip_entry *zip_directory_find(const zip_directory *d, const char *name)
{
    size_t i = zip_directory_lower_bound(d, name);
    return i < d->count && !strcmp(d->entries[i].name, name) ? &d->entries[i] : NULL;
}

/* ---- entries ------------------------------------------------------------ */

int zip_entry_check(const zip_entry *e, cellar_error *err)
{
    if (e->flags & (FLAG_ENCRYPTED | FLAG_STRONG_ENCRYPTION))
        return cellar_fail(err, CELLAR_EFORMAT, "zip entry '%.200s' is encrypted", e->name);
    if (e->method != ZIP_STORED && e->method != ZIP_DEFLATED)
        return cellar_fail(err, CELLAR_EFORMAT,
                           "zip entry '%.200s' uses compression method %u (only stored and "
                           "deflate are read)",
                           e->name, (unsigned)e->method);
    if (e->method == ZIP_STORED && e->comp_size != e->size)
        return cellar_fail(err, CELLAR_EFORMAT,
                           "zip entry '%.200s' is stored but its sizes differ (%llu, %llu)",
                           e->name, (unsigned long long)e->comp_size,
                           (unsigned long long)e->size);
    return 0;
}

/* Whether a local header's size field agrees with the directory's: a
 * data descriptor or zip64 leaves it 0 or all ones. */
static int size_agrees(uint32_t local, uint64_t central, int descriptor)
{
    return local == central || local == 0xFFFFFFFFu || (descriptor && local == 0);
}

int zip_entry_data_offset(zip_entry *e, zip_read_fn rd, void *ctx, uint64_t *offset,
                          cellar_error *err)
{
    uint64_t known = atomic_load(&e->data_offset);
    if (known) {
        *offset = known;
        return 0;
    }
    size_t want = LOCAL_SIZE + e->name_len;
    uint8_t *h = malloc(want);
    if (!h)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory reading zip entry '%.200s'",
                           e->name);
    int rc = 0;
    if (rd(ctx, e->local_offset, want, h) != 0 || le32(h) != SIG_LOCAL) {
        rc = cellar_fail(err, CELLAR_EFORMAT,
                         "zip entry '%.200s' has no local header where the directory says",
                         e->name);
        goto done;
    }
    uint16_t flags = le16(h + 6);
    int descriptor = (flags & FLAG_DESCRIPTOR) != 0;
    if (le16(h + 26) != e->name_len || memcmp(h + LOCAL_SIZE, e->name, e->name_len) != 0 ||
        le16(h + 8) != e->method ||
        (flags & (FLAG_ENCRYPTED | FLAG_STRONG_ENCRYPTION)) !=
            (e->flags & (FLAG_ENCRYPTED | FLAG_STRONG_ENCRYPTION)) ||
        !size_agrees(le32(h + 18), e->comp_size, descriptor) ||
        !size_agrees(le32(h + 22), e->size, descriptor)) {
        rc = cellar_fail(err, CELLAR_EFORMAT,
                         "zip entry '%.200s': its local header disagrees with the directory",
                         e->name);
        goto done;
    }
    uint64_t data = e->local_offset + want + le16(h + 28);
    if (data > e->end || e->comp_size > e->end - data) {
        rc = cellar_fail(err, CELLAR_EFORMAT,
                         "zip entry '%.200s' runs into the next entry or the directory",
                         e->name);
        goto done;
    }
    atomic_store(&e->data_offset, data);
    *offset = data;
done:
    free(h);
    return rc;
}
