/* Fuzz target: the zip central directory parse (storage/zip/zip_dir.c) and
 * each entry's local header.  Input: the bytes of a zip file.  Invariants:
 * a parse that succeeds gives sorted, distinct, plain relative names, every
 * entry's span inside the file before the directory, and a data offset
 * whose bytes end before the next entry; a failure is CELLAR_EFORMAT (or
 * CELLAR_ENOMEM) with a detail.
 * With libFuzzer: cc -DCELLAR_LIBFUZZER -fsanitize=fuzzer,address ...;
 * without it, main() replays tests/fuzz/corpus/zip_dir or the paths given.
 * Seeds: tests/fuzz/make_zip_dir_seeds.py. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/fuzz/fuzz.h"
#include "storage/zip/zip_dir.h"

typedef struct input {
    const uint8_t *p;
    size_t n;
} input;

static int read_input(void *ctx, uint64_t off, size_t n, void *buf)
{
    const input *in = ctx;
    if (off > in->n || n > in->n - off)
        return -1;
    memcpy(buf, in->p + off, n);
    return 0;
}

static int plain(const char *name)
{
    if (!name[0] || name[0] == '/' || strchr(name, '\\') || strstr(name, "//"))
        return 0;
    for (const char *s = name;;) {
        const char *e = strchr(s, '/');
        size_t len = e ? (size_t)(e - s) : strlen(s);
        if ((len == 1 && s[0] == '.') || (len == 2 && s[0] == '.' && s[1] == '.'))
            return 0;
        if (!e)
            return 1;
        s = e + 1;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    input in = {data, size};
    zip_directory d;
    cellar_error err;
    cellar_error_clear(&err);
    int rc = zip_directory_parse(read_input, &in, size, &d, &err);
    if (rc) {
        MUST((rc == CELLAR_EFORMAT || rc == CELLAR_ENOMEM) && err.code == rc && err.detail[0]);
        return 0;
    }
    MUST(d.directory_offset <= size);
    for (size_t i = 0; i < d.count; i++) {
        zip_entry *e = &d.entries[i];
        MUST(plain(e->name) && e->name[strlen(e->name) - 1] != '/');
        MUST(i == 0 || strcmp(d.entries[i - 1].name, e->name) < 0);
        MUST(zip_directory_find(&d, e->name) == e);
        MUST(e->local_offset < e->end && e->end <= d.directory_offset);
        MUST(e->comp_size <= e->end - e->local_offset);
        if (i >= 256)
            continue;
        cellar_error_clear(&err);
        if (zip_entry_check(e, &err) != 0) {
            MUST(err.code == CELLAR_EFORMAT && err.detail[0]);
            continue;
        }
        uint64_t off = 0;
        cellar_error_clear(&err);
        rc = zip_entry_data_offset(e, read_input, &in, &off, &err);
        if (rc) {
            MUST(rc == CELLAR_EFORMAT && err.detail[0]);
            continue;
        }
        MUST(off >= e->local_offset + 30 && off <= e->end && e->comp_size <= e->end - off);
        uint64_t again = 0;
        MUST(zip_entry_data_offset(e, read_input, &in, &again, &err) == 0 && again == off);
    }
    zip_directory_free(&d);
    return 0;
}

#define FUZZ_NAME "zip_dir"
#include "tests/fuzz/replay_main.h"
