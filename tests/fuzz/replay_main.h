/* A plain main() for a fuzz target, so every saved input is replayed with gcc
 * in `make test` (no libFuzzer needed).  Include it last in a target after
 * defining FUZZ_NAME; with -DCELLAR_LIBFUZZER it adds nothing.
 *
 * Usage: ./target [file-or-directory ...]; with no argument it replays
 * tests/fuzz/corpus/FUZZ_NAME.  An input that breaks an invariant aborts. */
#ifndef CELLAR_LIBFUZZER
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int replay_file(const char *path)
{
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        perror(path);
        return -1;
    }
    size_t cap = 4096, len = 0, got;
    uint8_t *data = malloc(cap);
    while (data && (got = fread(data + len, 1, cap - len, fp)) > 0) {
        len += got;
        if (len == cap) {
            uint8_t *more = realloc(data, cap * 2);
            if (!more) {
                free(data);
                data = NULL;
                break;
            }
            data = more;
            cap *= 2;
        }
    }
    fclose(fp);
    if (!data)
        return -1;
    /* A copy of exactly len bytes, so ASan sees reads past the input. */
    uint8_t *exact = malloc(len ? len : 1);
    if (!exact) {
        free(data);
        return -1;
    }
    memcpy(exact, data, len);
    free(data);
    LLVMFuzzerTestOneInput(exact, len);
    free(exact);
    return 0;
}

static int replay_path(const char *path, int *count)
{
    DIR *d = opendir(path);
    if (!d) {
        if (replay_file(path) < 0)
            return -1;
        (*count)++;
        return 0;
    }
    struct dirent *de;
    int rc = 0;
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.')
            continue;
        char full[4096];
        snprintf(full, sizeof full, "%s/%s", path, de->d_name);
        if (replay_file(full) < 0)
            rc = -1;
        else
            (*count)++;
    }
    closedir(d);
    return rc;
}

int main(int argc, char **argv)
{
    int count = 0, failed = 0;
    if (argc < 2)
        failed |= replay_path("tests/fuzz/corpus/" FUZZ_NAME, &count) < 0;
    for (int i = 1; i < argc; i++)
        failed |= replay_path(argv[i], &count) < 0;
    printf("%s_fuzz: replayed %d inputs\n", FUZZ_NAME, count);
    return failed || count == 0 ? 1 : 0;
}
#endif
