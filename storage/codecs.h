/* Zarr's codecs as pure byte-in/byte-out functions: no file access, no zarr
 * metadata, no global state, so they are unit-tested and fuzzed alone and
 * may run on many threads at once.
 *
 * Every input is distrusted: sizes in headers are checked against the
 * caller's expectation and limit before anything is allocated, and a
 * malformed input fails with CELLAR_EFORMAT (never a crash or an over-read).
 * `what` names the thing being decoded in error details (e.g. "chunk 0.3 of
 * '/X'"); it may be NULL. */
#ifndef CELLAR_CODECS_H
#define CELLAR_CODECS_H

#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

/* The bytes -> bytes codecs. */
typedef enum codec_id {
    CODEC_BLOSC = 1, /* c-blosc 1 frames, any cname and shuffle */
    CODEC_ZSTD,      /* one or more zstd frames, with or without content size */
    CODEC_GZIP,      /* RFC 1952, one or more members */
    CODEC_ZLIB,      /* RFC 1950 */
    CODEC_LZ4,       /* numcodecs: u32le decoded size, then one LZ4 block */
    CODEC_CRC32C     /* zarr v3: payload then its u32le CRC32C (verified) */
} codec_id;

/* expect: the decoded size is unknown (it is then bounded by the limit). */
#define CODEC_SIZE_UNKNOWN SIZE_MAX

/* The largest decoded buffer any codec produces (1 GiB). */
#define CODEC_MAX_DECODED ((size_t)1 << 30)

/* The most bytes n stored bytes can decode to with codec id: the format's
 * largest expansion (deflate 1032:1, an LZ4 block 255:1, zstd one
 * 128 KiB block from every 4 bytes, blosc as its worst inner codec), so that
 * a size claimed by metadata or a header is checked against the bytes
 * really stored before anything is allocated for it.  Saturates. */
uint64_t codec_max_decoded(codec_id id, uint64_t n);

/* Parses a codec name as numcodecs (v2 "id") or zarr v3 ("name", with or
 * without the "numcodecs." prefix) spell it; 0 when not a bytes->bytes codec
 * we support. */
codec_id codec_from_name(const char *name);

/* Decodes n bytes of src with codec id into a new malloc'd buffer *out of
 * *out_len bytes (caller frees; *out may be non-NULL for 0 bytes).  When
 * expect is not CODEC_SIZE_UNKNOWN the decoded size must equal it; in any
 * case it must not exceed limit (capped at CODEC_MAX_DECODED).  An expected
 * or header-declared size over codec_max_decoded(id, n) fails before any
 * allocation, and an unknown size never grows past it.
 * Errors: CELLAR_EFORMAT (corrupt, truncated, wrong size, bad checksum, a
 * size the stored bytes cannot hold), CELLAR_ENOMEM. */
int codec_decode(codec_id id, const uint8_t *src, size_t n, size_t expect, size_t limit,
                 uint8_t **out, size_t *out_len, const char *what, cellar_error *err);

/* CRC32C (Castagnoli), as zarr v3's crc32c codec computes it: start with
 * crc = 0 and feed the bytes in order. */
uint32_t codec_crc32c(uint32_t crc, const void *data, size_t n);

/* One item of a decoded vlen-utf8 / vlen-bytes buffer: `len` bytes at
 * src + off. */
typedef struct codec_vlen_item {
    size_t off, len;
} codec_vlen_item;

/* Splits a numcodecs vlen buffer (u32le item count, then per item a u32le
 * length and the bytes) into exactly `count` items (the count header must
 * match, and the items must use all n bytes).  With utf8 set, every item
 * must be valid UTF-8.  items has room for count entries. */
int codec_vlen_decode(const uint8_t *src, size_t n, uint64_t count, int utf8,
                      codec_vlen_item *items, const char *what, cellar_error *err);

/* Converts one fixed-length numpy unicode item (`nchars` UTF-32 code units,
 * little- or big-endian) to NUL-terminated UTF-8 in dst, which has room for
 * 4 * nchars + 1 bytes.  Stops at the first NUL code unit (numpy's padding).
 * Returns the UTF-8 length, or CELLAR_EFORMAT for an invalid code point. */
int64_t codec_utf32_to_utf8(const uint8_t *src, size_t nchars, int big_endian, char *dst,
                            const char *what, cellar_error *err);

/* Reverses the byte order of each of `count` items of `size` bytes in
 * place (size 1 is a no-op). */
void codec_byteswap(void *data, size_t count, size_t size);

/* The transpose codec without moving bytes: an array of `shape` that was
 * encoded as x.transpose(perm) and then stored in C order has the element at
 * coordinates c at position sum(c[d] * strides[d]).  perm must be a
 * permutation of 0..ndim-1 (CELLAR_EFORMAT otherwise).  perm NULL means
 * identity (plain C order); numpy's F order is perm = ndim-1, ..., 0. */
int codec_transpose_strides(int ndim, const int64_t *shape, const int *perm,
                            int64_t *strides, cellar_error *err);

/* Composes two transposes applied one after the other (first `a`, then `b`)
 * into out: out[i] = a[b[i]]. */
void codec_transpose_compose(int ndim, const int *a, const int *b, int *out);

/* The zarr v3 sharding_indexed index.  `src` holds the index bytes exactly as
 * stored (with its crc32c when has_crc); it must be 16 * nchunks (+ 4)
 * bytes.  Fills pairs[2 * nchunks] with (offset, nbytes) in native order
 * after checking the CRC and that every non-empty entry lies inside a shard
 * of shard_size bytes.  Empty inner chunks keep offset = nbytes =
 * CODEC_SHARD_EMPTY. */
#define CODEC_SHARD_EMPTY UINT64_MAX
int codec_shard_index_decode(const uint8_t *src, size_t n, uint64_t nchunks, int big_endian,
                             int has_crc, uint64_t shard_size, uint64_t *pairs,
                             const char *what, cellar_error *err);

/* Standard base64 (RFC 4648, '=' padding optional, no whitespace) into dst
 * (room for 3 * (strlen(text) / 4 + 1) bytes).  Returns the decoded length,
 * or -1 when text is not base64. */
int64_t codec_base64_decode(const char *text, uint8_t *dst);

/* Half-precision bits of a double, rounded to nearest even (for fill
 * values of float16 arrays). */
uint16_t codec_double_to_half(double v);

#endif
