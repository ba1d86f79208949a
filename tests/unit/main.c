/* Runs every unit test, or those named on the command line. */
#include <stdio.h>
#include <string.h>

#include "tests/unit/unit.h"

int unit_failures;

typedef struct {
    const char *name;
    void (*fn)(void);
} unit_entry;

static const unit_entry all_tests[] = {
#define UNIT_TEST(name) {#name, name},
#include "tests/unit/tests.h"
#undef UNIT_TEST
};

int main(int argc, char **argv)
{
    size_t n = sizeof all_tests / sizeof all_tests[0];
    int passed = 0, failed = 0;
    for (size_t i = 0; i < n; i++) {
        if (argc > 1) {
            int wanted = 0;
            for (int a = 1; a < argc; a++)
                wanted |= strcmp(argv[a], all_tests[i].name) == 0;
            if (!wanted)
                continue;
        }
        int before = unit_failures;
        all_tests[i].fn();
        if (unit_failures == before) {
            passed++;
        } else {
            failed++;
            fprintf(stderr, "FAIL %s\n", all_tests[i].name);
        }
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
