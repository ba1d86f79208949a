#include "api/encode/npy_out.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <zlib.h>

/* numpy leaves room for the first axis to grow to 21 digits in place
 * (numpy/lib/format.py, GROWTH_AXIS_MAX_DIGITS). */
#define NPY_GROWTH_DIGITS 21
#define NPY_ALIGN 64

int npy_header(buf *b, dtype_kind dt, const int64_t *shape, int ndim)
{
    const char *descr = dtype_npy_descr(dt);
    return descr ? npy_header_descr(b, descr, shape, ndim) : -1;
}

int npy_header_descr(buf *b, const char *descr, const int64_t *shape, int ndim)
{
    if (ndim < 0 || ndim > 8 || strlen(descr) > 64)
        return -1;
    char dict[512];
    size_t n = (size_t)snprintf(dict, sizeof dict,
                                "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
    for (int d = 0; d < ndim; d++)
        n += (size_t)snprintf(dict + n, sizeof dict - n, d ? ", %" PRId64 : "%" PRId64,
                              shape[d]);
    if (ndim == 1)
        dict[n++] = ',';
    n += (size_t)snprintf(dict + n, sizeof dict - n, "), }");
    if (ndim > 0) {
        char first[32];
        int digits = snprintf(first, sizeof first, "%" PRId64, shape[0]);
        for (int k = digits; k < NPY_GROWTH_DIGITS; k++)
            dict[n++] = ' ';
    }
    size_t total = 10 + n + 1;
    /* Like numpy: a header that is already aligned still gets 64 spaces. */
    size_t pad = NPY_ALIGN - total % NPY_ALIGN;
    size_t hlen = n + pad + 1;
    unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0,
                             (unsigned char)(hlen & 0xff), (unsigned char)(hlen >> 8)};
    if (buf_append(b, pre, sizeof pre) || buf_append(b, dict, n))
        return -1;
    for (size_t k = 0; k < pad; k++)
        if (buf_putc(b, ' '))
            return -1;
    return buf_putc(b, '\n');
}

void npy_shape_text(const int64_t *shape, int ndim, char *out, size_t size)
{
    size_t n = 0;
    out[0] = '\0';
    for (int d = 0; d < ndim && n < size; d++)
        n += (size_t)snprintf(out + n, size - n, d ? ",%" PRId64 : "%" PRId64, shape[d]);
}

/* ---- .npz: zip (APPNOTE.TXT 4.3.7 local header, 4.3.12 central
 * directory, 4.3.16 end record), method 0 (stored) ---- */

#define ZIP_LOCAL_SIG 0x04034b50u
#define ZIP_CENTRAL_SIG 0x02014b50u
#define ZIP_END_SIG 0x06054b50u
#define ZIP_VERSION 20
#define ZIP_DATE 0x0021 /* 1980-01-01, as zipfile writes for no date */

static void put16(unsigned char *p, unsigned v)
{
    p[0] = (unsigned char)(v & 0xff);
    p[1] = (unsigned char)(v >> 8);
}

static void put32(unsigned char *p, uint32_t v)
{
    put16(p, v & 0xffff);
    put16(p + 2, v >> 16);
}

/* The fields local and central headers share (version needed .. extra
 * length), 26 bytes. */
static void zip_common(unsigned char *p, uint32_t crc, uint32_t size, size_t name_len,
                       size_t extra)
{
    put16(p, ZIP_VERSION);
    put16(p + 2, 0);     /* flags */
    put16(p + 4, 0);     /* stored */
    put16(p + 6, 0);     /* time */
    put16(p + 8, ZIP_DATE);
    put32(p + 10, crc);
    put32(p + 14, size); /* compressed */
    put32(p + 18, size);
    put16(p + 22, (unsigned)name_len);
    put16(p + 24, (unsigned)extra);
}

void npz_init(npz_writer *z, buf *b)
{
    memset(z, 0, sizeof *z);
    z->b = b;
    z->start = b->len;
}

int npz_add(npz_writer *z, const char *name, const char *descr, const int64_t *shape,
            int ndim, size_t data_bytes, size_t *data_off)
{
    if (z->n >= NPZ_MAX_ENTRIES || strlen(name) + 5 > sizeof z->e[0].name)
        return -1;
    buf *b = z->b;
    size_t i = z->n;
    snprintf(z->e[i].name, sizeof z->e[i].name, "%s.npy", name);
    size_t nl = strlen(z->e[i].name);
    /* The .npy header is a multiple of 64 bytes: starting it at a multiple
     * of 64 (from the archive's start) aligns the data for typed access,
     * with an extra field of padding in the local header (id 0xd935, as
     * Android's zipalign writes; readers skip unknown ones). */
    size_t at = b->len - z->start + 30 + nl;
    size_t extra = (NPY_ALIGN - at % NPY_ALIGN) % NPY_ALIGN;
    if (extra && extra < 4)
        extra += NPY_ALIGN;
    unsigned char head[30 + 4 + NPY_ALIGN];
    memset(head, 0, sizeof head); /* crc and sizes are written by npz_finish */
    z->e[i].local = b->len;
    z->e[i].extra = extra;
    if (buf_append(b, head, 30) || buf_append(b, z->e[i].name, nl))
        return -1;
    if (extra) {
        put16(head, 0xd935);
        put16(head + 2, (unsigned)(extra - 4));
        if (buf_append(b, head, extra))
            return -1;
    }
    z->e[i].first = b->len;
    if (npy_header_descr(b, descr, shape, ndim) || !buf_reserve(b, data_bytes ? data_bytes : 1))
        return -1;
    *data_off = b->len;
    b->len += data_bytes;
    z->e[i].end = b->len;
    z->n++;
    return 0;
}

int npz_finish(npz_writer *z)
{
    buf *b = z->b;
    if (b->failed || (uint64_t)(b->len - z->start) > NPZ_MAX_BYTES)
        return -1;
    size_t cd_start = b->len;
    for (size_t i = 0; i < z->n; i++) {
        size_t size = z->e[i].end - z->e[i].first, nl = strlen(z->e[i].name);
        uint32_t crc = (uint32_t)crc32_z(0, (const unsigned char *)b->data + z->e[i].first, size);
        unsigned char *local = (unsigned char *)b->data + z->e[i].local;
        put32(local, ZIP_LOCAL_SIG);
        zip_common(local + 4, crc, (uint32_t)size, nl, z->e[i].extra);
        unsigned char c[46];
        memset(c, 0, sizeof c);
        put32(c, ZIP_CENTRAL_SIG);
        put16(c + 4, ZIP_VERSION); /* made by */
        zip_common(c + 6, crc, (uint32_t)size, nl, 0);
        /* comment length, disk, attributes: 0 */
        put32(c + 42, (uint32_t)(z->e[i].local - z->start));
        if (buf_append(b, c, sizeof c) || buf_append(b, z->e[i].name, nl))
            return -1;
    }
    unsigned char end[22];
    memset(end, 0, sizeof end);
    put32(end, ZIP_END_SIG);
    put16(end + 8, (unsigned)z->n);
    put16(end + 10, (unsigned)z->n);
    put32(end + 12, (uint32_t)(b->len - cd_start));
    put32(end + 16, (uint32_t)(cd_start - z->start));
    if (buf_append(b, end, sizeof end))
        return -1;
    return (uint64_t)(b->len - z->start) > NPZ_MAX_BYTES ? -1 : 0;
}
