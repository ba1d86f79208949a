#include "storage/codecs.h"

#include "common/satmath.h"
#include "common/utf8.h"

#include <blosc.h>
#include <limits.h>
#include <lz4.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#include <zstd.h>

#define WHAT(w) ((w) ? (w) : "data")

static uint32_t load_le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t load_u64(const uint8_t *p, int big_endian)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[big_endian ? 7 - i : i] << (8 * i);
    return v;
}

codec_id codec_from_name(const char *name)
{
    if (!name)
        return 0;
    if (strncmp(name, "numcodecs.", 10) == 0)
        name += 10;
    static const struct {
        const char *name;
        codec_id id;
    } names[] = {
        {"blosc", CODEC_BLOSC}, {"zstd", CODEC_ZSTD}, {"gzip", CODEC_GZIP},
        {"zlib", CODEC_ZLIB},   {"lz4", CODEC_LZ4},   {"crc32c", CODEC_CRC32C},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(name, names[i].name) == 0)
            return names[i].id;
    return 0;
}

/* The largest expansion of each format, per stored byte: deflate codes a
 * 258-byte match in 2 bits (RFC 1951 3.2.5), an LZ4 sequence adds 255 match
 * bytes per extra length byte, a zstd block of 4 bytes (header and one RLE
 * byte) makes 128 KiB (RFC 8878 3.1.1.2); blosc may hold zstd.  The slack
 * covers headers and the first match of a tiny stream. */
enum { DEFLATE_MAX_RATIO = 1032, LZ4_MAX_RATIO = 256, ZSTD_MAX_RATIO = 32768 };
#define EXPANSION_SLACK 1024

uint64_t codec_max_decoded(codec_id id, uint64_t n)
{
    switch (id) {
    case CODEC_CRC32C: return n < 4 ? 0 : n - 4;
    case CODEC_GZIP:
    case CODEC_ZLIB: return sat_add_u64(sat_mul_u64(n, DEFLATE_MAX_RATIO), EXPANSION_SLACK);
    case CODEC_LZ4: return sat_add_u64(sat_mul_u64(n, LZ4_MAX_RATIO), EXPANSION_SLACK);
    case CODEC_ZSTD:
    case CODEC_BLOSC: return sat_add_u64(sat_mul_u64(n, ZSTD_MAX_RATIO), EXPANSION_SLACK);
    }
    return 0;
}

static const char *codec_label(codec_id id)
{
    switch (id) {
    case CODEC_BLOSC: return "blosc";
    case CODEC_ZSTD: return "zstd";
    case CODEC_GZIP: return "gzip";
    case CODEC_ZLIB: return "zlib";
    case CODEC_LZ4: return "lz4";
    case CODEC_CRC32C: return "crc32c";
    }
    return "an unknown codec";
}

/* A decoded size claimed by `by` (the metadata, or the stream's own header)
 * that n stored bytes cannot produce: a lying size, refused before it
 * sizes an allocation. */
static int fail_claim(codec_id id, const char *by, uint64_t claim, size_t n, const char *what,
                      cellar_error *err)
{
    return cellar_fail(err, CELLAR_EFORMAT,
                       "%s: %s says %llu decoded bytes, but its %zu stored bytes of %s decode "
                       "to at most %llu",
                       WHAT(what), by, (unsigned long long)claim, n, codec_label(id),
                       (unsigned long long)codec_max_decoded(id, n));
}

/* A growing output buffer bounded by the expected size (when known) or the
 * limit. */
typedef struct obuf {
    uint8_t *p;
    size_t len, cap, max;
} obuf;

static int obuf_init(obuf *o, size_t expect, size_t limit, size_t hint, const char *what,
                     cellar_error *err)
{
    if (limit > CODEC_MAX_DECODED)
        limit = CODEC_MAX_DECODED;
    if (expect != CODEC_SIZE_UNKNOWN && expect > limit)
        return cellar_fail(err, CELLAR_EFORMAT, "%s would decode to %zu bytes, over the limit",
                           WHAT(what), expect);
    o->max = expect != CODEC_SIZE_UNKNOWN ? expect : limit;
    o->cap = expect != CODEC_SIZE_UNKNOWN ? expect : (hint < o->max ? hint : o->max);
    o->len = 0;
    o->p = malloc(o->cap ? o->cap : 1);
    if (!o->p)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory decoding %s", WHAT(what));
    return 0;
}

static int obuf_grow(obuf *o, const char *what, cellar_error *err)
{
    if (o->cap >= o->max)
        return cellar_fail(err, CELLAR_EFORMAT, "%s decodes to more than the %zu bytes expected",
                           WHAT(what), o->max);
    size_t nc = o->cap < 4096 ? 4096 : o->cap * 2;
    if (nc > o->max || nc < o->cap)
        nc = o->max;
    uint8_t *np = realloc(o->p, nc);
    if (!np)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory decoding %s", WHAT(what));
    o->p = np;
    o->cap = nc;
    return 0;
}

static int obuf_finish(obuf *o, size_t expect, uint8_t **out, size_t *out_len, const char *what,
                       cellar_error *err)
{
    if (expect != CODEC_SIZE_UNKNOWN && o->len != expect)
        return cellar_fail(err, CELLAR_EFORMAT, "%s decodes to %zu bytes, expected %zu",
                           WHAT(what), o->len, expect);
    *out = o->p;
    *out_len = o->len;
    o->p = NULL;
    return 0;
}

static int decode_zstd(const uint8_t *src, size_t n, size_t expect, size_t limit, uint8_t **out,
                       size_t *out_len, const char *what, cellar_error *err)
{
    obuf o = {0};
    size_t hint = n < ((size_t)1 << 20) ? 4 * n + 64 : n;
    unsigned long long fcs = n ? ZSTD_getFrameContentSize(src, n) : ZSTD_CONTENTSIZE_ERROR;
    if (fcs != ZSTD_CONTENTSIZE_ERROR && fcs != ZSTD_CONTENTSIZE_UNKNOWN && fcs < SIZE_MAX)
        hint = (size_t)fcs;
    int rc = obuf_init(&o, expect, limit, hint, what, err);
    if (rc)
        return rc;
    ZSTD_DCtx *dctx = ZSTD_createDCtx();
    if (!dctx) {
        rc = cellar_fail(err, CELLAR_ENOMEM, "out of memory decoding %s", WHAT(what));
        goto done;
    }
    ZSTD_inBuffer in = {src, n, 0};
    for (;;) {
        size_t in_before = in.pos, out_before = o.len;
        ZSTD_outBuffer ob = {o.p, o.cap, o.len};
        size_t ret = ZSTD_decompressStream(dctx, &ob, &in);
        if (ZSTD_isError(ret)) {
            rc = cellar_fail(err, CELLAR_EFORMAT, "%s is not valid zstd: %s", WHAT(what),
                             ZSTD_getErrorName(ret));
            goto done;
        }
        o.len = ob.pos;
        if (ret == 0 && in.pos == in.size)
            break;
        if (in.pos == in_before && o.len == out_before) {
            if (o.len < o.cap) {
                rc = cellar_fail(err, CELLAR_EFORMAT, "%s is truncated zstd", WHAT(what));
                goto done;
            }
            rc = obuf_grow(&o, what, err);
            if (rc)
                goto done;
        }
    }
    rc = obuf_finish(&o, expect, out, out_len, what, err);
done:
    ZSTD_freeDCtx(dctx);
    free(o.p);
    return rc;
}

static int decode_inflate(const uint8_t *src, size_t n, int gzip, size_t expect, size_t limit,
                          uint8_t **out, size_t *out_len, const char *what, cellar_error *err)
{
    const char *fmt = gzip ? "gzip" : "zlib";
    if (n > UINT_MAX)
        return cellar_fail(err, CELLAR_EFORMAT, "%s is too large for %s", WHAT(what), fmt);
    obuf o = {0};
    int rc = obuf_init(&o, expect, limit, n < ((size_t)1 << 20) ? 4 * n + 64 : n, what, err);
    if (rc)
        return rc;
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    if (inflateInit2(&zs, gzip ? 15 + 16 : 15) != Z_OK) {
        free(o.p);
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory decoding %s", WHAT(what));
    }
    zs.next_in = (Bytef *)src;
    zs.avail_in = (uInt)n;
    for (;;) {
        size_t room = o.cap - o.len;
        if (room > UINT_MAX)
            room = UINT_MAX;
        zs.next_out = o.p + o.len;
        zs.avail_out = (uInt)room;
        uInt in_before = zs.avail_in;
        int ret = inflate(&zs, Z_NO_FLUSH);
        size_t produced = room - zs.avail_out;
        o.len += produced;
        if (ret == Z_STREAM_END) {
            if (zs.avail_in == 0)
                break;
            /* Concatenated gzip members decode as one stream (RFC 1952 2.2). */
            if (gzip && zs.avail_in >= 2 && zs.next_in[0] == 0x1f && zs.next_in[1] == 0x8b) {
                inflateReset(&zs);
                continue;
            }
            rc = cellar_fail(err, CELLAR_EFORMAT, "%s has trailing bytes after its %s stream",
                             WHAT(what), fmt);
            goto done;
        }
        if (ret != Z_OK && ret != Z_BUF_ERROR) {
            rc = cellar_fail(err, CELLAR_EFORMAT, "%s is not valid %s: %s", WHAT(what), fmt,
                             zs.msg ? zs.msg : "corrupt stream");
            goto done;
        }
        if (produced == 0 && zs.avail_in == in_before) {
            if (o.len < o.cap) {
                rc = cellar_fail(err, CELLAR_EFORMAT, "%s is truncated %s", WHAT(what), fmt);
                goto done;
            }
            rc = obuf_grow(&o, what, err);
            if (rc)
                goto done;
        }
    }
    rc = obuf_finish(&o, expect, out, out_len, what, err);
done:
    inflateEnd(&zs);
    free(o.p);
    return rc;
}

static int decode_lz4(const uint8_t *src, size_t n, size_t expect, size_t limit, uint8_t **out,
                      size_t *out_len, const char *what, cellar_error *err)
{
    if (n < 4)
        return cellar_fail(err, CELLAR_EFORMAT, "%s is truncated lz4 (no size header)",
                           WHAT(what));
    if (n - 4 > INT_MAX)
        return cellar_fail(err, CELLAR_EFORMAT, "%s is too large for lz4", WHAT(what));
    size_t size = load_le32(src);
    if (size > codec_max_decoded(CODEC_LZ4, n))
        return fail_claim(CODEC_LZ4, "its lz4 header", size, n, what, err);
    if (expect != CODEC_SIZE_UNKNOWN && size != expect)
        return cellar_fail(err, CELLAR_EFORMAT, "%s: lz4 header says %zu bytes, expected %zu",
                           WHAT(what), size, expect);
    if (size > limit || size > CODEC_MAX_DECODED || size > INT_MAX)
        return cellar_fail(err, CELLAR_EFORMAT, "%s: lz4 header says %zu bytes, over the limit",
                           WHAT(what), size);
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory decoding %s", WHAT(what));
    int got = LZ4_decompress_safe((const char *)src + 4, (char *)buf, (int)(n - 4), (int)size);
    if (got < 0 || (size_t)got != size) {
        free(buf);
        return cellar_fail(err, CELLAR_EFORMAT, "%s is not a valid lz4 block of %zu bytes",
                           WHAT(what), size);
    }
    *out = buf;
    *out_len = size;
    return 0;
}

static int decode_blosc(const uint8_t *src, size_t n, size_t expect, size_t limit, uint8_t **out,
                        size_t *out_len, const char *what, cellar_error *err)
{
    if (n < BLOSC_MIN_HEADER_LENGTH)
        return cellar_fail(err, CELLAR_EFORMAT, "%s is truncated blosc (%zu bytes)", WHAT(what),
                           n);
    size_t nbytes = 0, cbytes = 0, blocksize = 0;
    blosc_cbuffer_sizes(src, &nbytes, &cbytes, &blocksize);
    if (cbytes != n)
        return cellar_fail(err, CELLAR_EFORMAT,
                           "%s: blosc header says %zu compressed bytes, found %zu", WHAT(what),
                           cbytes, n);
    size_t vbytes = 0;
    if (blosc_cbuffer_validate(src, n, &vbytes) != 0 || vbytes != nbytes)
        return cellar_fail(err, CELLAR_EFORMAT, "%s is not a valid blosc buffer", WHAT(what));
    if (nbytes > codec_max_decoded(CODEC_BLOSC, n))
        return fail_claim(CODEC_BLOSC, "its blosc header", nbytes, n, what, err);
    if (expect != CODEC_SIZE_UNKNOWN && nbytes != expect)
        return cellar_fail(err, CELLAR_EFORMAT, "%s: blosc header says %zu bytes, expected %zu",
                           WHAT(what), nbytes, expect);
    if (nbytes > limit || nbytes > CODEC_MAX_DECODED)
        return cellar_fail(err, CELLAR_EFORMAT, "%s: blosc header says %zu bytes, over the limit",
                           WHAT(what), nbytes);
    uint8_t *buf = malloc(nbytes ? nbytes : 1);
    if (!buf)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory decoding %s", WHAT(what));
    if (nbytes) {
        int got = blosc_decompress_ctx(src, buf, nbytes, 1);
        if (got <= 0 || (size_t)got != nbytes) {
            free(buf);
            return cellar_fail(err, CELLAR_EFORMAT,
                               "%s could not be decoded by blosc (corrupt, or a compressor "
                               "this c-blosc lacks)",
                               WHAT(what));
        }
    }
    *out = buf;
    *out_len = nbytes;
    return 0;
}

static int decode_crc32c(const uint8_t *src, size_t n, size_t expect, size_t limit,
                         uint8_t **out, size_t *out_len, const char *what, cellar_error *err)
{
    if (n < 4)
        return cellar_fail(err, CELLAR_EFORMAT, "%s is too short for its crc32c", WHAT(what));
    size_t len = n - 4;
    if (expect != CODEC_SIZE_UNKNOWN && len != expect)
        return cellar_fail(err, CELLAR_EFORMAT, "%s holds %zu bytes, expected %zu", WHAT(what),
                           len, expect);
    if (len > limit)
        return cellar_fail(err, CELLAR_EFORMAT, "%s is over the size limit", WHAT(what));
    if (codec_crc32c(0, src, len) != load_le32(src + len))
        return cellar_fail(err, CELLAR_EFORMAT, "%s fails its crc32c checksum", WHAT(what));
    uint8_t *buf = malloc(len ? len : 1);
    if (!buf)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory decoding %s", WHAT(what));
    if (len)
        memcpy(buf, src, len);
    *out = buf;
    *out_len = len;
    return 0;
}

int codec_decode(codec_id id, const uint8_t *src, size_t n, size_t expect, size_t limit,
                 uint8_t **out, size_t *out_len, const char *what, cellar_error *err)
{
    *out = NULL;
    *out_len = 0;
    if (limit > CODEC_MAX_DECODED)
        limit = CODEC_MAX_DECODED;
    /* Sizes from metadata are checked against what is really stored before
     * they size a buffer; an unknown size cannot grow past it either. */
    uint64_t most = codec_max_decoded(id, n);
    if (expect != CODEC_SIZE_UNKNOWN && expect > most)
        return fail_claim(id, "the metadata", expect, n, what, err);
    if (limit > most)
        limit = (size_t)most;
    switch (id) {
    case CODEC_BLOSC: return decode_blosc(src, n, expect, limit, out, out_len, what, err);
    case CODEC_ZSTD: return decode_zstd(src, n, expect, limit, out, out_len, what, err);
    case CODEC_GZIP: return decode_inflate(src, n, 1, expect, limit, out, out_len, what, err);
    case CODEC_ZLIB: return decode_inflate(src, n, 0, expect, limit, out, out_len, what, err);
    case CODEC_LZ4: return decode_lz4(src, n, expect, limit, out, out_len, what, err);
    case CODEC_CRC32C: return decode_crc32c(src, n, expect, limit, out, out_len, what, err);
    }
    return cellar_fail(err, CELLAR_EFORMAT, "%s uses an unsupported codec", WHAT(what));
}

/* The table for the reflected Castagnoli polynomial 0x82F63B78, built at
 * compile time so no state is initialised at run time. */
#define CRC_A(c) (((c) & 1) ? ((c) >> 1) ^ 0x82F63B78u : (c) >> 1)
#define CRC_B(c) CRC_A(CRC_A(CRC_A(CRC_A(c))))
#define CRC_E(c) CRC_B(CRC_B((uint32_t)(c)))
#define CRC_4(i) CRC_E(i), CRC_E(i + 1), CRC_E(i + 2), CRC_E(i + 3)
#define CRC_16(i) CRC_4(i), CRC_4(i + 4), CRC_4(i + 8), CRC_4(i + 12)
#define CRC_64(i) CRC_16(i), CRC_16(i + 16), CRC_16(i + 32), CRC_16(i + 48)
static const uint32_t crc32c_table[256] = {CRC_64(0), CRC_64(64), CRC_64(128), CRC_64(192)};

uint32_t codec_crc32c(uint32_t crc, const void *data, size_t n)
{
    const uint8_t *p = data;
    crc = ~crc;
    for (size_t i = 0; i < n; i++)
        crc = crc32c_table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
    return ~crc;
}

int codec_vlen_decode(const uint8_t *src, size_t n, uint64_t count, int utf8,
                      codec_vlen_item *items, const char *what, cellar_error *err)
{
    if (n < 4)
        return cellar_fail(err, CELLAR_EFORMAT, "%s is too short for a vlen header", WHAT(what));
    uint64_t stored = load_le32(src);
    if (stored != count)
        return cellar_fail(err, CELLAR_EFORMAT, "%s holds %llu strings, expected %llu",
                           WHAT(what), (unsigned long long)stored, (unsigned long long)count);
    size_t pos = 4;
    for (uint64_t i = 0; i < count; i++) {
        if (n - pos < 4)
            return cellar_fail(err, CELLAR_EFORMAT, "%s is truncated at item %llu", WHAT(what),
                               (unsigned long long)i);
        size_t len = load_le32(src + pos);
        pos += 4;
        if (len > n - pos)
            return cellar_fail(err, CELLAR_EFORMAT, "%s: item %llu runs past the end",
                               WHAT(what), (unsigned long long)i);
        if (utf8 && !utf8_valid((const char *)src + pos, len))
            return cellar_fail(err, CELLAR_EFORMAT, "%s: item %llu is not valid UTF-8",
                               WHAT(what), (unsigned long long)i);
        items[i].off = pos;
        items[i].len = len;
        pos += len;
    }
    if (pos != n)
        return cellar_fail(err, CELLAR_EFORMAT, "%s has %zu trailing bytes after its strings",
                           WHAT(what), n - pos);
    return 0;
}

int64_t codec_utf32_to_utf8(const uint8_t *src, size_t nchars, int big_endian, char *dst,
                            const char *what, cellar_error *err)
{
    size_t o = 0;
    for (size_t i = 0; i < nchars; i++) {
        const uint8_t *p = src + 4 * i;
        uint32_t cp = big_endian ? (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 |
                                       (uint32_t)p[2] << 8 | p[3]
                                 : load_le32(p);
        if (cp == 0)
            break;
        if (cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return cellar_fail(err, CELLAR_EFORMAT, "%s holds an invalid code point U+%X",
                               WHAT(what), cp);
        if (cp < 0x80) {
            dst[o++] = (char)cp;
        } else if (cp < 0x800) {
            dst[o++] = (char)(0xc0 | cp >> 6);
            dst[o++] = (char)(0x80 | (cp & 0x3f));
        } else if (cp < 0x10000) {
            dst[o++] = (char)(0xe0 | cp >> 12);
            dst[o++] = (char)(0x80 | ((cp >> 6) & 0x3f));
            dst[o++] = (char)(0x80 | (cp & 0x3f));
        } else {
            dst[o++] = (char)(0xf0 | cp >> 18);
            dst[o++] = (char)(0x80 | ((cp >> 12) & 0x3f));
            dst[o++] = (char)(0x80 | ((cp >> 6) & 0x3f));
            dst[o++] = (char)(0x80 | (cp & 0x3f));
        }
    }
    dst[o] = '\0';
    return (int64_t)o;
}

void codec_byteswap(void *data, size_t count, size_t size)
{
    uint8_t *p = data;
    if (size < 2)
        return;
    for (size_t i = 0; i < count; i++, p += size) {
        for (size_t a = 0, b = size - 1; a < b; a++, b--) {
            uint8_t t = p[a];
            p[a] = p[b];
            p[b] = t;
        }
    }
}

int codec_transpose_strides(int ndim, const int64_t *shape, const int *perm, int64_t *strides,
                            cellar_error *err)
{
    if (ndim < 0 || ndim > 32)
        return cellar_fail(err, CELLAR_EFORMAT, "transpose over %d dimensions", ndim);
    int seen[32] = {0};
    int64_t enc_stride = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        int p = perm ? perm[i] : i;
        if (p < 0 || p >= ndim || seen[p])
            return cellar_fail(err, CELLAR_EFORMAT, "transpose order is not a permutation");
        seen[p] = 1;
        strides[p] = enc_stride;
        int64_t s = shape[p];
        if (s < 0 || (s && enc_stride > INT64_MAX / s))
            return cellar_fail(err, CELLAR_EFORMAT, "chunk shape overflows");
        enc_stride *= s;
    }
    return 0;
}

void codec_transpose_compose(int ndim, const int *a, const int *b, int *out)
{
    int tmp[32];
    for (int i = 0; i < ndim && i < 32; i++)
        tmp[i] = a[b[i]];
    for (int i = 0; i < ndim && i < 32; i++)
        out[i] = tmp[i];
}

int codec_shard_index_decode(const uint8_t *src, size_t n, uint64_t nchunks, int big_endian,
                             int has_crc, uint64_t shard_size, uint64_t *pairs,
                             const char *what, cellar_error *err)
{
    if (nchunks > (SIZE_MAX - 4) / 16)
        return cellar_fail(err, CELLAR_EFORMAT, "%s: shard index too large", WHAT(what));
    size_t body = (size_t)nchunks * 16, want = body + (has_crc ? 4 : 0);
    if (n != want)
        return cellar_fail(err, CELLAR_EFORMAT, "%s: shard index has %zu bytes, expected %zu",
                           WHAT(what), n, want);
    if (has_crc && codec_crc32c(0, src, body) != load_le32(src + body))
        return cellar_fail(err, CELLAR_EFORMAT, "%s: shard index fails its crc32c checksum",
                           WHAT(what));
    for (uint64_t i = 0; i < nchunks; i++) {
        uint64_t off = load_u64(src + 16 * i, big_endian);
        uint64_t nb = load_u64(src + 16 * i + 8, big_endian);
        if (off == CODEC_SHARD_EMPTY && nb == CODEC_SHARD_EMPTY) {
            pairs[2 * i] = pairs[2 * i + 1] = CODEC_SHARD_EMPTY;
            continue;
        }
        if (off > shard_size || nb > shard_size - off)
            return cellar_fail(err, CELLAR_EFORMAT,
                               "%s: shard index entry %llu points outside the shard "
                               "(offset %llu, %llu bytes, shard of %llu bytes)",
                               WHAT(what), (unsigned long long)i, (unsigned long long)off,
                               (unsigned long long)nb, (unsigned long long)shard_size);
        pairs[2 * i] = off;
        pairs[2 * i + 1] = nb;
    }
    return 0;
}

static int b64_value(char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    return -1;
}

int64_t codec_base64_decode(const char *text, uint8_t *dst)
{
    size_t len = strlen(text);
    while (len && text[len - 1] == '=')
        len--;
    if (len % 4 == 1)
        return -1;
    size_t o = 0;
    uint32_t acc = 0;
    int bits = 0;
    for (size_t i = 0; i < len; i++) {
        int v = b64_value(text[i]);
        if (v < 0)
            return -1;
        acc = acc << 6 | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            dst[o++] = (uint8_t)(acc >> bits);
            acc &= (1u << bits) - 1;
        }
    }
    return (int64_t)o;
}

uint16_t codec_double_to_half(double v)
{
    uint64_t b;
    memcpy(&b, &v, sizeof b);
    uint16_t sign = (uint16_t)((b >> 48) & 0x8000);
    int exp = (int)((b >> 52) & 0x7ff);
    uint64_t man = b & 0xfffffffffffffull;
    if (exp == 0x7ff)
        return (uint16_t)(sign | 0x7c00 | (man ? 0x200 : 0));
    int e = exp - 1023 + 15;
    if (e >= 31)
        return (uint16_t)(sign | 0x7c00);
    int shift = 42;
    uint32_t base = 0;
    if (e <= 0) {
        if (e < -10)
            return sign;
        man |= 1ull << 52;
        shift = 43 - e;
    } else {
        base = (uint32_t)e << 10;
    }
    uint64_t h = man >> shift, rem = man & ((1ull << shift) - 1), half = 1ull << (shift - 1);
    uint32_t r = base + (uint32_t)h;
    if (rem > half || (rem == half && (h & 1)))
        r++;
    return (uint16_t)(sign | r);
}
