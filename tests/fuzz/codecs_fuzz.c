/* Fuzz target: every codec in storage/codecs.h on arbitrary bytes.
 * Input: byte 0 picks the codec, byte 1 the expected size, the rest is the
 * encoded data.  With libFuzzer: cc -DCELLAR_LIBFUZZER -fsanitize=fuzzer,address
 * ...; without it, main() replays tests/fuzz/corpus/codecs or the paths given. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/fuzz/fuzz.h"
#include "common/utf8.h"
#include "storage/codecs.h"

static void fuzz_decode(codec_id id, uint8_t mode, const uint8_t *data, size_t size)
{
    /* mode odd: the decoded size is known, (mode >> 1) * 16 bytes. */
    size_t expect = mode & 1 ? (size_t)(mode >> 1) * 16 : CODEC_SIZE_UNKNOWN;
    uint8_t *out = NULL;
    size_t len = 0;
    cellar_error err;
    cellar_error_clear(&err);
    int rc = codec_decode(id, data, size, expect, (size_t)1 << 24, &out, &len, "fuzz", &err);
    if (rc) {
        MUST(out == NULL && err.code == rc && err.detail[0]);
        return;
    }
    MUST(expect == CODEC_SIZE_UNKNOWN || len == expect);
    MUST(len <= ((size_t)1 << 24));
    unsigned sum = 0;
    for (size_t i = 0; i < len; i++)
        sum += out[i];
    (void)sum;
    free(out);
}

static void fuzz_vlen(uint8_t mode, const uint8_t *data, size_t size)
{
    codec_vlen_item items[256];
    cellar_error err;
    cellar_error_clear(&err);
    if (codec_vlen_decode(data, size, mode, mode & 1, items, "fuzz", &err) != 0)
        return;
    for (unsigned i = 0; i < mode; i++) {
        MUST(items[i].off <= size && items[i].len <= size - items[i].off);
        if (mode & 1)
            MUST(utf8_valid((const char *)data + items[i].off, items[i].len));
    }
}

static void fuzz_text(uint8_t mode, const uint8_t *data, size_t size)
{
    size_t nchars = size / 4;
    char *dst = malloc(4 * nchars + 1);
    cellar_error err;
    cellar_error_clear(&err);
    int64_t n = codec_utf32_to_utf8(data, nchars, mode & 1, dst, "fuzz", &err);
    if (n >= 0) {
        MUST((size_t)n == strlen(dst) && (size_t)n <= 4 * nchars);
        MUST(utf8_valid(dst, (size_t)n));
    }
    free(dst);
    char *text = malloc(size + 1);
    memcpy(text, data, size);
    text[size] = '\0';
    uint8_t *b = malloc(3 * (size / 4 + 1));
    int64_t m = codec_base64_decode(text, b);
    MUST(m <= (int64_t)(3 * (size / 4 + 1)));
    free(b);
    free(text);
}

static void fuzz_transpose(uint8_t mode, const uint8_t *data, size_t size)
{
    int ndim = mode % (8 + 1);
    if (size < (size_t)ndim * 2)
        return;
    int perm[8];
    int64_t shape[8], strides[8];
    for (int d = 0; d < ndim; d++) {
        perm[d] = data[d] % (ndim + 1);
        shape[d] = data[ndim + d];
    }
    cellar_error err;
    cellar_error_clear(&err);
    if (codec_transpose_strides(ndim, shape, perm, strides, &err) == 0) {
        /* The strides map the chunk's positions one to one onto [0, total):
         * the last position lands on total - 1, and an axis with more than
         * one position steps inside the chunk (a size-1 axis may have any
         * stride: it is never stepped along). */
        int64_t total = 1, last = 0;
        for (int d = 0; d < ndim; d++)
            total *= shape[d];
        for (int d = 0; d < ndim; d++) {
            if (total && shape[d] > 1)
                MUST(strides[d] < total);
            if (total)
                last += strides[d] * (shape[d] - 1);
        }
        MUST(total == 0 || last == total - 1);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    uint8_t which = data[0], mode = data[1];
    data += 2;
    size -= 2;
    switch (which % 9) {
    case 0: fuzz_decode(CODEC_BLOSC, mode, data, size); break;
    case 1: fuzz_decode(CODEC_ZSTD, mode, data, size); break;
    case 2: fuzz_decode(CODEC_GZIP, mode, data, size); break;
    case 3: fuzz_decode(CODEC_ZLIB, mode, data, size); break;
    case 4: fuzz_decode(CODEC_LZ4, mode, data, size); break;
    case 5: fuzz_decode(CODEC_CRC32C, mode, data, size); break;
    case 6: fuzz_vlen(mode, data, size); break;
    case 7: fuzz_text(mode, data, size); break;
    default: fuzz_transpose(mode, data, size); break;
    }
    return 0;
}

#define FUZZ_NAME "codecs"
#include "tests/fuzz/replay_main.h"
