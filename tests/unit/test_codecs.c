#include <blosc.h>
#include <lz4.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#include <zstd.h>

#include "common/utf8.h"
#include "storage/codecs.h"
#include "tests/unit/unit.h"

/* Golden buffers: numcodecs 0.17 encoding np.arange(8, dtype="<i4"). */
static const uint8_t golden_lz4[38] = {
    0x20, 0x00, 0x00, 0x00, 0xf0, 0x11, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00,
    0x00, 0x02, 0x00, 0x00, 0x00, 0x03, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00,
    0x05, 0x00, 0x00, 0x00, 0x06, 0x00, 0x00, 0x00, 0x07, 0x00, 0x00, 0x00};
static const uint8_t golden_blosc_lz4_shuf[48] = {
    0x02, 0x01, 0x33, 0x04, 0x20, 0x00, 0x00, 0x00, 0x20, 0x00, 0x00, 0x00,
    0x30, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00,
    0x02, 0x00, 0x00, 0x00, 0x03, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00,
    0x05, 0x00, 0x00, 0x00, 0x06, 0x00, 0x00, 0x00, 0x07, 0x00, 0x00, 0x00};
static const uint8_t golden_zstd[41] = {
    0x28, 0xb5, 0x2f, 0xfd, 0x20, 0x20, 0x01, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01,
    0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x03, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00,
    0x00, 0x05, 0x00, 0x00, 0x00, 0x06, 0x00, 0x00, 0x00, 0x07, 0x00, 0x00, 0x00};
static const uint8_t golden_gzip[41] = {
    0x1f, 0x8b, 0x08, 0x00, 0xb3, 0x3a, 0x10, 0x6b, 0x00, 0xff, 0x63, 0x60, 0x60, 0x60,
    0x60, 0x04, 0x62, 0x26, 0x20, 0x66, 0x06, 0x62, 0x16, 0x20, 0x66, 0x05, 0x62, 0x36,
    0x20, 0x66, 0x07, 0x62, 0x00, 0xdc, 0x23, 0x07, 0x79, 0x20, 0x00, 0x00, 0x00};
static const uint8_t golden_zlib[29] = {0x78, 0x5e, 0x63, 0x60, 0x60, 0x60, 0x60, 0x04,
                                        0x62, 0x26, 0x20, 0x66, 0x06, 0x62, 0x16, 0x20,
                                        0x66, 0x05, 0x62, 0x36, 0x20, 0x66, 0x07, 0x62,
                                        0x00, 0x01, 0x70, 0x00, 0x1d};
/* numcodecs VLenUTF8 of ["a", "héllo", ""]. */
static const uint8_t golden_vlen[23] = {0x03, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00,
                                        0x61, 0x06, 0x00, 0x00, 0x00, 0x68, 0xc3, 0xa9,
                                        0x6c, 0x6c, 0x6f, 0x00, 0x00, 0x00, 0x00};
/* numcodecs CRC32C of b"123456789". */
static const uint8_t golden_crc32c[13] = {0x31, 0x32, 0x33, 0x34, 0x35, 0x36, 0x37,
                                          0x38, 0x39, 0x83, 0x92, 0x06, 0xe3};

static int decode(codec_id id, const uint8_t *src, size_t n, size_t expect, uint8_t **out,
                  size_t *len)
{
    cellar_error err;
    cellar_error_clear(&err);
    int rc = codec_decode(id, src, n, expect, CODEC_MAX_DECODED, out, len, "test", &err);
    if (rc)
        CHECK(err.detail[0] != '\0');
    return rc;
}

static void check_arange8(codec_id id, const uint8_t *src, size_t n)
{
    uint8_t *out = NULL;
    size_t len = 0;
    CHECK_EQ(decode(id, src, n, 32, &out, &len), 0);
    CHECK_EQ(len, 32);
    if (out && len == 32) {
        int32_t v[8];
        memcpy(v, out, 32);
        for (int i = 0; i < 8; i++)
            CHECK_EQ(v[i], i);
    }
    free(out);
    out = NULL;
    /* Unknown expected size works too; a wrong one fails. */
    CHECK_EQ(decode(id, src, n, CODEC_SIZE_UNKNOWN, &out, &len), 0);
    CHECK_EQ(len, 32);
    free(out);
    out = NULL;
    CHECK_EQ(decode(id, src, n, 28, &out, &len), CELLAR_EFORMAT);
    CHECK(out == NULL);
    CHECK_EQ(decode(id, src, n, 36, &out, &len), CELLAR_EFORMAT);
    CHECK(out == NULL);
    /* Every truncation fails cleanly. */
    for (size_t cut = 0; cut < n; cut++) {
        int rc = decode(id, src, cut, 32, &out, &len);
        CHECK(rc == CELLAR_EFORMAT);
        free(out);
        out = NULL;
    }
}

void test_codecs_golden(void)
{
    check_arange8(CODEC_LZ4, golden_lz4, sizeof golden_lz4);
    check_arange8(CODEC_BLOSC, golden_blosc_lz4_shuf, sizeof golden_blosc_lz4_shuf);
    check_arange8(CODEC_ZSTD, golden_zstd, sizeof golden_zstd);
    check_arange8(CODEC_GZIP, golden_gzip, sizeof golden_gzip);
    check_arange8(CODEC_ZLIB, golden_zlib, sizeof golden_zlib);
    /* gzip is not zlib and vice versa. */
    uint8_t *out = NULL;
    size_t len;
    CHECK_EQ(decode(CODEC_ZLIB, golden_gzip, sizeof golden_gzip, 32, &out, &len),
             CELLAR_EFORMAT);
    CHECK_EQ(decode(CODEC_GZIP, golden_zlib, sizeof golden_zlib, 32, &out, &len),
             CELLAR_EFORMAT);
    CHECK_EQ(decode(CODEC_CRC32C, golden_crc32c, sizeof golden_crc32c, 9, &out, &len), 0);
    CHECK_EQ(len, 9);
    CHECK(out && memcmp(out, "123456789", 9) == 0);
    free(out);
    CHECK_EQ(codec_crc32c(0, "123456789", 9), 0xE3069283u);
    CHECK_EQ(codec_crc32c(codec_crc32c(0, "1234", 4), "56789", 5), 0xE3069283u);
    CHECK_EQ(codec_from_name("numcodecs.zlib"), CODEC_ZLIB);
    CHECK_EQ(codec_from_name("blosc"), CODEC_BLOSC);
    CHECK_EQ(codec_from_name("bz2"), 0);
}

#define BIG 20000

static int32_t *make_data(void)
{
    int32_t *v = malloc(BIG * sizeof *v);
    for (int i = 0; i < BIG; i++)
        v[i] = (i / 7) * 3 - 1000 + (i % 5);
    return v;
}

static void check_big(codec_id id, const uint8_t *src, size_t n, const int32_t *want,
                      const char *label)
{
    uint8_t *out = NULL;
    size_t len = 0;
    int rc = decode(id, src, n, BIG * 4, &out, &len);
    if (rc)
        fprintf(stderr, "decode failed for %s\n", label);
    CHECK_EQ(rc, 0);
    CHECK_EQ(len, BIG * 4);
    CHECK(out && memcmp(out, want, BIG * 4) == 0);
    free(out);
    out = NULL;
    /* A short or damaged copy never decodes to the right thing silently. */
    rc = decode(id, src, n / 2, BIG * 4, &out, &len);
    CHECK_EQ(rc, CELLAR_EFORMAT);
    free(out);
}

void test_codecs_blosc_all(void)
{
    int32_t *v = make_data();
    size_t cap = BIG * 4 + BLOSC_MAX_OVERHEAD;
    uint8_t *c = malloc(cap);
    const char *cnames[] = {"blosclz", "lz4", "lz4hc", "zlib", "zstd"};
    for (size_t k = 0; k < sizeof cnames / sizeof cnames[0]; k++) {
        for (int shuffle = 0; shuffle <= 2; shuffle++) {
            int n = blosc_compress_ctx(5, shuffle, 4, BIG * 4, v, c, cap, cnames[k], 0, 1);
            CHECK(n > 0);
            if (n <= 0)
                continue;
            char label[64];
            snprintf(label, sizeof label, "blosc %s shuffle %d", cnames[k], shuffle);
            check_big(CODEC_BLOSC, c, (size_t)n, v, label);
            /* A flipped byte in the header's size field is caught. */
            uint8_t saved = c[5];
            c[5] ^= 0x40;
            uint8_t *out = NULL;
            size_t len;
            CHECK(decode(CODEC_BLOSC, c, (size_t)n, BIG * 4, &out, &len) != 0);
            free(out);
            c[5] = saved;
        }
    }
    free(c);
    free(v);
}

void test_codecs_stream_formats(void)
{
    int32_t *v = make_data();
    size_t cap = ZSTD_compressBound(BIG * 4) + 64;
    uint8_t *c = malloc(cap);
    /* zstd with a content size. */
    size_t n = ZSTD_compress(c, cap, v, BIG * 4, 3);
    CHECK(!ZSTD_isError(n));
    check_big(CODEC_ZSTD, c, n, v, "zstd");
    /* zstd without a content size (streaming writers). */
    ZSTD_CCtx *cc = ZSTD_createCCtx();
    ZSTD_CCtx_setParameter(cc, ZSTD_c_contentSizeFlag, 0);
    ZSTD_CCtx_setParameter(cc, ZSTD_c_checksumFlag, 1);
    ZSTD_inBuffer in = {v, BIG * 4, 0};
    ZSTD_outBuffer ob = {c, cap, 0};
    size_t left = ZSTD_compressStream2(cc, &ob, &in, ZSTD_e_end);
    CHECK_EQ(left, 0);
    ZSTD_freeCCtx(cc);
    CHECK_EQ(ZSTD_getFrameContentSize(c, ob.pos), ZSTD_CONTENTSIZE_UNKNOWN);
    check_big(CODEC_ZSTD, c, ob.pos, v, "zstd streaming");
    /* Corrupt checksum at the end of the frame. */
    c[ob.pos - 1] ^= 0xff;
    uint8_t *out = NULL;
    size_t len;
    CHECK_EQ(decode(CODEC_ZSTD, c, ob.pos, BIG * 4, &out, &len), CELLAR_EFORMAT);
    free(out);
    out = NULL;
    /* Limit enforcement with an unknown size. */
    cellar_error err;
    cellar_error_clear(&err);
    c[ob.pos - 1] ^= 0xff;
    CHECK_EQ(codec_decode(CODEC_ZSTD, c, ob.pos, CODEC_SIZE_UNKNOWN, 1000, &out, &len, "x", &err),
             CELLAR_EFORMAT);
    free(out);
    out = NULL;

    /* zlib */
    uLongf zl = (uLongf)cap;
    CHECK_EQ(compress2(c, &zl, (const Bytef *)v, BIG * 4, 6), Z_OK);
    check_big(CODEC_ZLIB, c, zl, v, "zlib");
    /* trailing garbage after a zlib stream */
    c[zl] = 0x55;
    CHECK_EQ(decode(CODEC_ZLIB, c, zl + 1, BIG * 4, &out, &len), CELLAR_EFORMAT);
    free(out);
    out = NULL;

    /* gzip, and two gzip members that together hold the data. */
    size_t total = 0;
    for (int part = 0; part < 2; part++) {
        z_stream zs;
        memset(&zs, 0, sizeof zs);
        CHECK_EQ(deflateInit2(&zs, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY), Z_OK);
        zs.next_in = (Bytef *)v + part * (BIG * 2);
        zs.avail_in = BIG * 2;
        zs.next_out = c + total;
        zs.avail_out = (uInt)(cap - total);
        CHECK_EQ(deflate(&zs, Z_FINISH), Z_STREAM_END);
        total += zs.total_out;
        deflateEnd(&zs);
    }
    check_big(CODEC_GZIP, c, total, v, "gzip two members");
    /* lz4 with numcodecs' header */
    int bound = LZ4_compressBound(BIG * 4);
    uint8_t *l = malloc((size_t)bound + 4);
    int ln = LZ4_compress_default((const char *)v, (char *)l + 4, BIG * 4, bound);
    CHECK(ln > 0);
    uint32_t sz = BIG * 4;
    l[0] = (uint8_t)sz, l[1] = (uint8_t)(sz >> 8), l[2] = (uint8_t)(sz >> 16), l[3] = 0;
    check_big(CODEC_LZ4, l, (size_t)ln + 4, v, "lz4");
    /* A header that lies about the size. */
    l[0] ^= 4;
    CHECK_EQ(decode(CODEC_LZ4, l, (size_t)ln + 4, CODEC_SIZE_UNKNOWN, &out, &len),
             CELLAR_EFORMAT);
    free(out);
    free(l);
    free(c);
    free(v);
}

void test_codecs_crc32c(void)
{
    uint8_t buf[13];
    memcpy(buf, golden_crc32c, sizeof buf);
    buf[3] ^= 1;
    uint8_t *out = NULL;
    size_t len;
    CHECK_EQ(decode(CODEC_CRC32C, buf, sizeof buf, CODEC_SIZE_UNKNOWN, &out, &len),
             CELLAR_EFORMAT);
    CHECK(out == NULL);
    CHECK_EQ(decode(CODEC_CRC32C, buf, 3, CODEC_SIZE_UNKNOWN, &out, &len), CELLAR_EFORMAT);
    /* The empty payload: crc32c of nothing is 0. */
    uint8_t zero[4] = {0, 0, 0, 0};
    CHECK_EQ(decode(CODEC_CRC32C, zero, 4, 0, &out, &len), 0);
    CHECK_EQ(len, 0);
    free(out);
}

void test_codecs_vlen(void)
{
    codec_vlen_item it[3];
    cellar_error err;
    cellar_error_clear(&err);
    CHECK_EQ(codec_vlen_decode(golden_vlen, sizeof golden_vlen, 3, 1, it, "v", &err), 0);
    CHECK_EQ(it[0].len, 1);
    CHECK(memcmp(golden_vlen + it[0].off, "a", 1) == 0);
    CHECK_EQ(it[1].len, 6);
    CHECK(memcmp(golden_vlen + it[1].off, "h\xc3\xa9llo", 6) == 0);
    CHECK_EQ(it[2].len, 0);
    /* Wrong count, truncation, trailing bytes, invalid UTF-8. */
    CHECK_EQ(codec_vlen_decode(golden_vlen, sizeof golden_vlen, 2, 1, it, "v", &err),
             CELLAR_EFORMAT);
    for (size_t cut = 0; cut < sizeof golden_vlen; cut++)
        CHECK_EQ(codec_vlen_decode(golden_vlen, cut, 3, 1, it, "v", &err), CELLAR_EFORMAT);
    uint8_t more[24];
    memcpy(more, golden_vlen, 23);
    more[23] = 0;
    CHECK_EQ(codec_vlen_decode(more, 24, 3, 1, it, "v", &err), CELLAR_EFORMAT);
    memcpy(more, golden_vlen, 23);
    more[14] = 0xff; /* breaks the é */
    CHECK_EQ(codec_vlen_decode(more, 23, 3, 1, it, "v", &err), CELLAR_EFORMAT);
    CHECK_EQ(codec_vlen_decode(more, 23, 3, 0, it, "v", &err), 0); /* vlen-bytes */
    /* A length that points far past the end. */
    memcpy(more, golden_vlen, 23);
    more[7] = 0x7f;
    CHECK_EQ(codec_vlen_decode(more, 23, 3, 0, it, "v", &err), CELLAR_EFORMAT);
}

void test_codecs_text(void)
{
    /* "aé€😀" then NUL padding, UTF-32LE, as numpy's <U6. */
    uint32_t cps[6] = {'a', 0xe9, 0x20ac, 0x1f600, 0, 0};
    uint8_t le[24], be[24];
    for (int i = 0; i < 6; i++) {
        for (int b = 0; b < 4; b++) {
            le[4 * i + b] = (uint8_t)(cps[i] >> (8 * b));
            be[4 * i + 3 - b] = (uint8_t)(cps[i] >> (8 * b));
        }
    }
    char out[25];
    cellar_error err;
    cellar_error_clear(&err);
    CHECK_EQ(codec_utf32_to_utf8(le, 6, 0, out, "u", &err), 10);
    CHECK_STR_EQ(out, "a\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80");
    CHECK_EQ(codec_utf32_to_utf8(be, 6, 1, out, "u", &err), 10);
    CHECK_STR_EQ(out, "a\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80");
    le[2] = 0x11; /* U+11xxxx is out of range */
    CHECK_EQ(codec_utf32_to_utf8(le, 6, 0, out, "u", &err), CELLAR_EFORMAT);

    CHECK(utf8_valid("h\xc3\xa9", 3));
    CHECK(!utf8_valid("\xc0\xaf", 2));         /* overlong */
    CHECK(!utf8_valid("\xed\xa0\x80", 3));     /* surrogate */
    CHECK(!utf8_valid("\xe2\x82", 2));         /* truncated */

    /* utf8_next: the characters the view's <U text holds, U+FFFD for each
     * invalid part as utf8_sanitize replaces it */
    const unsigned char *t = (const unsigned char *)"a\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\xe2\x82x\xff";
    const unsigned long want[] = {'a', 0xe9, 0x20ac, 0x1f600, 0xfffd, 'x', 0xfffd};
    const size_t spans[] = {1, 2, 3, 4, 2, 1, 1};
    size_t at = 0, len = strlen((const char *)t);
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        unsigned long cp = 0;
        size_t n = utf8_next(t + at, len - at, &cp);
        CHECK_EQ(cp, want[i]);
        CHECK_EQ(n, spans[i]);
        at += n;
    }
    CHECK_EQ(at, len);

    uint8_t b[16];
    CHECK_EQ(codec_base64_decode("aGVsbG8=", b), 5);
    CHECK(memcmp(b, "hello", 5) == 0);
    CHECK_EQ(codec_base64_decode("AAAA", b), 3);
    CHECK_EQ(codec_base64_decode("a", b), -1);
    CHECK_EQ(codec_base64_decode("a$==", b), -1);

    CHECK_EQ(codec_double_to_half(1.0), 0x3c00);
    CHECK_EQ(codec_double_to_half(-2.0), 0xc000);
    CHECK_EQ(codec_double_to_half(65504.0), 0x7bff);
    CHECK_EQ(codec_double_to_half(1e6), 0x7c00);
    CHECK_EQ(codec_double_to_half(-INFINITY), 0xfc00);
    CHECK_EQ(codec_double_to_half(NAN) & 0x7e00, 0x7e00);
    CHECK_EQ(codec_double_to_half(5.960464477539063e-08), 0x0001); /* smallest subnormal */
    CHECK_EQ(codec_double_to_half(0.1), 0x2e66);

    uint16_t s[2] = {0x0102, 0x0304};
    codec_byteswap(s, 2, 2);
    CHECK_EQ(s[0], 0x0201);
    CHECK_EQ(s[1], 0x0403);
}

void test_codecs_transpose(void)
{
    int64_t shape[3] = {2, 3, 4}, st[3];
    cellar_error err;
    cellar_error_clear(&err);
    CHECK_EQ(codec_transpose_strides(3, shape, NULL, st, &err), 0);
    CHECK_EQ(st[0], 12);
    CHECK_EQ(st[1], 4);
    CHECK_EQ(st[2], 1);
    int fortran[3] = {2, 1, 0};
    CHECK_EQ(codec_transpose_strides(3, shape, fortran, st, &err), 0);
    CHECK_EQ(st[0], 1);
    CHECK_EQ(st[1], 2);
    CHECK_EQ(st[2], 6);
    /* x.transpose((1, 2, 0)) has shape (3, 4, 2): stride of axis 0 is 1. */
    int p[3] = {1, 2, 0};
    CHECK_EQ(codec_transpose_strides(3, shape, p, st, &err), 0);
    CHECK_EQ(st[1], 8);
    CHECK_EQ(st[2], 2);
    CHECK_EQ(st[0], 1);
    int bad[3] = {0, 0, 1};
    CHECK_EQ(codec_transpose_strides(3, shape, bad, st, &err), CELLAR_EFORMAT);
    int worse[3] = {0, 1, 7};
    CHECK_EQ(codec_transpose_strides(3, shape, worse, st, &err), CELLAR_EFORMAT);
    int c[3];
    codec_transpose_compose(3, p, p, c); /* (1,2,0) twice = (2,0,1) */
    CHECK_EQ(c[0], 2);
    CHECK_EQ(c[1], 0);
    CHECK_EQ(c[2], 1);
}

static void put_u64(uint8_t *p, uint64_t v, int be)
{
    for (int i = 0; i < 8; i++)
        p[be ? 7 - i : i] = (uint8_t)(v >> (8 * i));
}

void test_codecs_shard_index(void)
{
    uint8_t idx[3 * 16 + 4];
    uint64_t pairs[6];
    cellar_error err;
    for (int be = 0; be <= 1; be++) {
        put_u64(idx, 100, be);
        put_u64(idx + 8, 20, be);
        put_u64(idx + 16, UINT64_MAX, be);
        put_u64(idx + 24, UINT64_MAX, be);
        put_u64(idx + 32, 0, be);
        put_u64(idx + 40, 100, be);
        uint32_t crc = codec_crc32c(0, idx, 48);
        for (int i = 0; i < 4; i++)
            idx[48 + i] = (uint8_t)(crc >> (8 * i));
        cellar_error_clear(&err);
        CHECK_EQ(codec_shard_index_decode(idx, 52, 3, be, 1, 200, pairs, "s", &err), 0);
        CHECK_EQ(pairs[0], 100);
        CHECK_EQ(pairs[1], 20);
        CHECK(pairs[2] == CODEC_SHARD_EMPTY && pairs[3] == CODEC_SHARD_EMPTY);
        CHECK_EQ(pairs[5], 100);
        /* Without the crc, the 48 bytes alone. */
        CHECK_EQ(codec_shard_index_decode(idx, 48, 3, be, 0, 200, pairs, "s", &err), 0);
        /* Wrong size, bad crc, an entry past the end of the shard. */
        CHECK_EQ(codec_shard_index_decode(idx, 48, 3, be, 1, 200, pairs, "s", &err),
                 CELLAR_EFORMAT);
        CHECK_EQ(codec_shard_index_decode(idx, 52, 3, be, 1, 119, pairs, "s", &err),
                 CELLAR_EFORMAT);
        idx[50] ^= 1;
        CHECK_EQ(codec_shard_index_decode(idx, 52, 3, be, 1, 200, pairs, "s", &err),
                 CELLAR_EFORMAT);
        /* offset + nbytes overflowing 64 bits */
        put_u64(idx, UINT64_MAX - 5, be);
        CHECK_EQ(codec_shard_index_decode(idx, 48, 3, be, 0, UINT64_MAX - 1, pairs, "s", &err),
                 CELLAR_EFORMAT);
    }
}
