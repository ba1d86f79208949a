/* Fuzz target: S3 ListObjectsV2 answers (storage/remote/s3_list.c), the
 * XML an S3 server (any, so untrusted) sends for a listing.  Input: one
 * answer's bytes.  Invariants: a parse that succeeds gives keys of at
 * most S3_KEY_MAX bytes without control characters, a continuation token
 * exactly when the answer says it is truncated, and a sorted listing in
 * which every key is found; a failure is CELLAR_EFORMAT (or ENOMEM,
 * ETOOBIG) with a detail.
 * With libFuzzer: cc -DCELLAR_LIBFUZZER -fsanitize=fuzzer,address ...;
 * without it, main() replays tests/fuzz/corpus/s3_list or the paths given. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/fuzz/fuzz.h"
#include "storage/remote/s3_list.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    s3_listing l = {0};
    int truncated = 0;
    char *token = NULL;
    cellar_error err;
    cellar_error_clear(&err);
    int rc = s3_list_parse((const char *)data, size, &l, &truncated, &token, &err);
    if (rc) {
        MUST((rc == CELLAR_EFORMAT || rc == CELLAR_ENOMEM || rc == CELLAR_ETOOBIG) &&
             err.code == rc && err.detail[0]);
        MUST(token == NULL || rc);
        free(token);
        s3_listing_free(&l);
        return 0;
    }
    MUST(!truncated == !token);
    MUST(!token || (token[0] && strlen(token) <= 4096));
    s3_listing_sort(&l);
    for (size_t i = 0; i < l.n; i++) {
        const char *k = l.objs[i].key;
        size_t n = strlen(k);
        MUST(n > 0 && n <= S3_KEY_MAX);
        for (size_t j = 0; j < n; j++)
            MUST((unsigned char)k[j] >= 0x20);
        MUST(i == 0 || strcmp(l.objs[i - 1].key, k) < 0);
        MUST(s3_listing_find(&l, k) == &l.objs[i]);
        MUST(strlen(l.objs[i].etag) < sizeof l.objs[i].etag);
    }
    free(token);
    s3_listing_free(&l);
    return 0;
}

#define FUZZ_NAME "s3_list"
#include "tests/fuzz/replay_main.h"
