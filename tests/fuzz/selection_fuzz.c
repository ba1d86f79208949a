/* Fuzz target: the selection parser and its resolution against an axis
 * (what rows=, cols= and mod_rows= take).  Input: bytes 0-7 give the axis
 * length (little-endian, any int64, negative ones made positive); the rest
 * is the selection text.  Every resolved position must lie in the axis; a
 * refusal must say why.
 * With libFuzzer: cc -DCELLAR_LIBFUZZER -fsanitize=fuzzer,address ...;
 * without it, main() replays tests/fuzz/corpus/selection or the paths given. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/arena.h"
#include "storage/selection.h"
#include "tests/fuzz/fuzz.h"

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
    }
done:
    arena_free(a);
    free(text);
    return 0;
}

#define FUZZ_NAME "selection"
#include "tests/fuzz/replay_main.h"
