/* Fuzz target: zarr v3 zarr.json text (see zarr_meta_common.h).
 * With libFuzzer: cc -DCELLAR_LIBFUZZER -fsanitize=fuzzer,address ...; without
 * it, main() replays tests/fuzz/corpus/zarr_meta_v3 or the paths given. */
#include "tests/fuzz/zarr_meta_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_zarr_meta(data, size, 3);
    return 0;
}

#define FUZZ_NAME "zarr_meta_v3"
#include "tests/fuzz/replay_main.h"
