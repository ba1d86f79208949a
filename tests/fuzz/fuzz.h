/* What every fuzz target shares: the libFuzzer entry point and MUST, which
 * aborts (so the fuzzer or the replay stops) when an invariant breaks. */
#ifndef CELLAR_FUZZ_H
#define CELLAR_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MUST(cond)                                                                       \
    do {                                                                                 \
        if (!(cond)) {                                                                   \
            fprintf(stderr, "%s:%d: invariant failed: %s\n", __FILE__, __LINE__, #cond); \
            abort();                                                                     \
        }                                                                                \
    } while (0)

#endif
