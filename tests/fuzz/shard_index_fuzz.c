/* Fuzz target: the sharding_indexed index decoder.  Input: byte 0 gives the
 * number of inner chunks (1 + b % 64), byte 1 the layout (bit 0 big-endian,
 * bit 1 crc32c), bytes 2-4 the shard size in bytes (little-endian); the rest is
 * the index.
 * With libFuzzer: cc -DCELLAR_LIBFUZZER -fsanitize=fuzzer,address ...;
 * without it, main() replays tests/fuzz/corpus/shard_index or the paths given. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "tests/fuzz/fuzz.h"
#include "storage/codecs.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 5)
        return 0;
    uint64_t nchunks = 1 + data[0] % 64;
    int big_endian = data[1] & 1, crc = (data[1] >> 1) & 1;
    uint64_t shard_size = (uint64_t)data[2] | (uint64_t)data[3] << 8 | (uint64_t)data[4] << 16;
    uint64_t pairs[2 * 64];
    cellar_error err;
    cellar_error_clear(&err);
    int rc = codec_shard_index_decode(data + 5, size - 5, nchunks, big_endian, crc, shard_size,
                                      pairs, "fuzz", &err);
    if (rc) {
        MUST(err.code == rc && err.detail[0]);
        return 0;
    }
    MUST(size - 5 == nchunks * 16 + (crc ? 4 : 0));
    for (uint64_t i = 0; i < nchunks; i++) {
        uint64_t off = pairs[2 * i], nb = pairs[2 * i + 1];
        if (off == CODEC_SHARD_EMPTY && nb == CODEC_SHARD_EMPTY)
            continue;
        MUST(off <= shard_size && nb <= shard_size - off);
    }
    return 0;
}

#define FUZZ_NAME "shard_index"
#include "tests/fuzz/replay_main.h"
