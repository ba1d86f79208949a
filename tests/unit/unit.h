/* A tiny unit-test harness: CHECK macros that print file, line and both
 * values, and a runner (tests/unit/main.c) over the list in tests.h. */
#ifndef CELLAR_UNIT_H
#define CELLAR_UNIT_H

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

extern int unit_failures;

#define CHECK(cond)                                                                     \
    do {                                                                                \
        if (!(cond)) {                                                                  \
            fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond);    \
            unit_failures++;                                                            \
        }                                                                               \
    } while (0)

#define CHECK_EQ(a, b)                                                                  \
    do {                                                                                \
        long long va_ = (long long)(a), vb_ = (long long)(b);                           \
        if (va_ != vb_) {                                                               \
            fprintf(stderr, "%s:%d: %s == %s failed: %lld != %lld\n", __FILE__,         \
                    __LINE__, #a, #b, va_, vb_);                                        \
            unit_failures++;                                                            \
        }                                                                               \
    } while (0)

#define CHECK_DBL_EQ(a, b)                                                              \
    do {                                                                                \
        double va_ = (double)(a), vb_ = (double)(b);                                    \
        if (!(va_ == vb_)) {                                                            \
            fprintf(stderr, "%s:%d: %s == %s failed: %.17g != %.17g\n", __FILE__,       \
                    __LINE__, #a, #b, va_, vb_);                                        \
            unit_failures++;                                                            \
        }                                                                               \
    } while (0)

#define CHECK_STR_EQ(a, b)                                                              \
    do {                                                                                \
        const char *va_ = (a), *vb_ = (b);                                              \
        if (!va_ || !vb_ || strcmp(va_, vb_) != 0) {                                    \
            fprintf(stderr, "%s:%d: %s == %s failed: \"%s\" != \"%s\"\n", __FILE__,     \
                    __LINE__, #a, #b, va_ ? va_ : "(null)", vb_ ? vb_ : "(null)");      \
            unit_failures++;                                                            \
        }                                                                               \
    } while (0)

/* Every test: declared here, listed in tests.h. */
#define UNIT_TEST(name) void name(void);
#include "tests/unit/tests.h"
#undef UNIT_TEST

#endif
