/* Fuzz target: the selection parser and its resolution against an axis
 * (what rows=, cols= and mod_rows= take).  Input: bytes 0-7 give the axis
 * length (little-endian, any int64, negative ones made positive); the rest
 * is the selection text.  Every resolved position must lie in the axis; a
 * refusal must say why; a slice's chunk runs (dim_sel_run_in_chunk, chunk
 * size from bytes 0-1) must cover it chunk by chunk.
 * With libFuzzer: cc -DCELLAR_LIBFUZZER -fsanitize=fuzzer,address ...;
 * without it, main() replays tests/fuzz/corpus/selection or the paths given. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/arena.h"
#include "storage/selection.h"
#include "tests/fuzz/fuzz.h"

/* Walks a resolved slice chunk by chunk as the readers do: every run stays
 * in its chunk, is at least one long and the runs cover the slice. */
static void check_chunk_runs(const dim_sel *d, int64_t chunk)
{
    int64_t k = 0;
    for (int runs = 0; k < d->count && runs < 10000; runs++) {
        int64_t c = -1, n = dim_sel_run_in_chunk(d, k, chunk, &c);
        MUST(n >= 1 && n <= d->count - k);
        int64_t first = dim_sel_at(d, k), last = dim_sel_at(d, k + n - 1);
        MUST(first / chunk == c && last / chunk == c);
        if (k + n < d->count)
            MUST(dim_sel_at(d, k + n) / chunk != c);
        k += n;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 8 || size > 8 + 4096)
        return 0;
    uint64_t raw = 0;
    memcpy(&raw, data, 8);
    int64_t length = (int64_t)(raw & (uint64_t)INT64_MAX);
    if (data[0] & 1)
        length %= 1000; /* short axes, where clamping happens */
    char *text = malloc(size - 8 + 1);
    arena *a = arena_new();
    if (!text || !a)
        goto done;
    memcpy(text, data + 8, size - 8);
    text[size - 8] = '\0';
    selection sel;
    cellar_error err;
    cellar_error_clear(&err);
    int rc = selection_parse(text, "rows", a, &sel, &err);
    if (rc) {
        MUST(err.code == rc && err.detail[0]);
        goto done;
    }
    dim_sel d;
    cellar_error_clear(&err);
    rc = selection_resolve(&sel, length, "rows", a, &d, &err);
    if (rc) {
        MUST(err.code == rc && err.detail[0]);
        goto done;
    }
    MUST(d.count >= 0);
    MUST(d.index || d.count <= length); /* a list may repeat positions */
    if (d.index) {
        for (int64_t i = 0; i < d.count; i++)
            MUST(d.index[i] >= 0 && d.index[i] < length);
    } else if (d.count > 0) {
        MUST(d.step != 0);
        MUST(d.start >= 0 && d.start < length);
        /* the last position, computed without overflow */
        __int128 last = (__int128)d.start + (__int128)d.step * (d.count - 1);
        MUST(last >= 0 && last < length);
        /* chunks of a few entries, or a third of the axis (huge ones) */
        check_chunk_runs(&d, data[0] & 2 ? 1 + data[1] % 64 : length / 3 + 1);
    }
done:
    arena_free(a);
    free(text);
    return 0;
}

#define FUZZ_NAME "selection"
#include "tests/fuzz/replay_main.h"
