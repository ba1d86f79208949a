/* dtoa_shortest against the snprintf/strtod loop it replaced (cellar's
 * fmt_f64 before Ryu): the same bytes for every double tried. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/dtoa.h"
#include "tests/unit/unit.h"

/* The reference costs ~1 us a value, ~5 us for random bit patterns (three
 * printf and two strtod calls at any exponent): the bulk loops run an
 * eighth as many under the sanitizers. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_UNDEFINED__)
#define BULK_DIV 8
#else
#define BULK_DIV 1
#endif
#define RANDOM_BITS (2000000 / BULK_DIV)

/* The reference: the first precision from 15 (1 for subnormals) to 17 whose
 * %g text reads back, with ".0" added to integral-looking text; "" for NaN
 * and infinities. */
static void ref_f64(double v, char *out)
{
    if (!isfinite(v)) {
        out[0] = '\0';
        return;
    }
    int n = 0;
    for (int p = fabs(v) < DBL_MIN ? 1 : 15; p <= 17; p++) {
        n = snprintf(out, DTOA_TEXT_MAX, "%.*g", p, v);
        if (p == 17 || strtod(out, NULL) == v)
            break;
    }
    if (!strpbrk(out, ".eEnN"))
        strcpy(out + n, ".0");
}

static uint64_t bits_of(double v)
{
    uint64_t b;
    memcpy(&b, &v, sizeof b);
    return b;
}

static double from_bits(uint64_t b)
{
    double v;
    memcpy(&v, &b, sizeof v);
    return v;
}

static int same_as_ref(double v)
{
    char want[DTOA_TEXT_MAX + 8], got[DTOA_TEXT_MAX + 8];
    ref_f64(v, want);
    memset(got, 'x', sizeof got);
    size_t n = dtoa_shortest(v, got);
    if (strcmp(want, got) != 0 || n != strlen(want)) {
        fprintf(stderr, "dtoa_shortest(0x%016" PRIx64 "): \"%s\" (%zu), want \"%s\"\n",
                bits_of(v), got, n, want);
        return 0;
    }
    return 1;
}

/* v and -v, and the two doubles either side of each. */
static int around(double v)
{
    int bad = 0;
    for (int s = 0; s < 2; s++, v = -v) {
        bad += !same_as_ref(v);
        double up = v, down = v;
        for (int i = 0; i < 2; i++) {
            up = nextafter(up, INFINITY);
            down = nextafter(down, -INFINITY);
            bad += !same_as_ref(up) + !same_as_ref(down);
        }
    }
    return bad;
}

static uint64_t xorshift(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

/* Texts written out, so the reference itself is pinned down too. */
static void check_known_texts(void)
{
    static const struct {
        double v;
        const char *text;
    } known[] = {
        {0.0, "0.0"},
        {-0.0, "-0.0"},
        {0.1, "0.1"},
        {0.3, "0.3"},
        {2.5, "2.5"},
        {-1.0, "-1.0"},
        {100.0, "100.0"},
        {1e23, "1e+23"},
        {1e15, "1e+15"},
        {123456789012345.0, "123456789012345.0"},
        {1234567890123456.0, "1234567890123456.0"},
        {12345678901234567.0, "12345678901234568.0"},
        {9007199254740993.0, "9007199254740992.0"},
        {0.0001, "0.0001"},
        {0.00001, "1e-05"},
        {0.1 + 0.2, "0.30000000000000004"},
        {253685.43419596096, "253685.43419596096"},
        {5e-324, "5e-324"},
        {-5e-324, "-5e-324"},
        {DBL_MAX, "1.7976931348623157e+308"},
        {DBL_MIN, "2.2250738585072014e-308"},
        {-DBL_MIN, "-2.2250738585072014e-308"},
        {0x1p-1022 - 0x1p-1074, "2.225073858507201e-308"},
    };
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
        char t[DTOA_TEXT_MAX], r[DTOA_TEXT_MAX];
        size_t n = dtoa_shortest(known[i].v, t);
        CHECK_STR_EQ(t, known[i].text);
        CHECK_EQ(n, strlen(known[i].text));
        ref_f64(known[i].v, r);
        CHECK_STR_EQ(r, known[i].text);
    }
    char t[DTOA_TEXT_MAX];
    CHECK_EQ(dtoa_shortest(NAN, t), 0);
    CHECK_STR_EQ(t, "");
    CHECK_EQ(dtoa_shortest(-INFINITY, t), 0);
    CHECK_EQ(dtoa_shortest(INFINITY, t), 0);
}

void test_dtoa_matches_reference(void)
{
    check_known_texts();
    int bad = 0;
    /* Every power of two (each with its asymmetric interval) and its
     * neighbours, both signs. */
    for (int e = -1074; e <= 1023 && bad < 10; e++)
        bad += around(ldexp(1.0, e));
    /* Powers of ten (as strtod reads them) and their neighbours. */
    for (int e = -325; e <= 308 && bad < 10; e++) {
        char s[16];
        snprintf(s, sizeof s, "1e%d", e);
        bad += around(strtod(s, NULL));
    }
    bad += around(DBL_MIN) + around(DBL_MAX) + around(DBL_TRUE_MIN);
    static const double special[] = {0.1, 0.2, 0.3, 0.7, 1e23, 5e-324, 9007199254740993.0,
                                     9007199254740992.0, 4503599627370496.5, 1e21, 1e22,
                                     123456.789, 2.5, 0.5, 1.5, 1e-4, 1e-5, 1e16, 1e17};
    for (size_t i = 0; i < sizeof special / sizeof special[0]; i++)
        bad += around(special[i]);
    uint64_t x = 0x9e3779b97f4a7c15u;
    /* Random bit patterns (any sign, exponent, mantissa; NaN and inf too). */
    for (int i = 0; i < RANDOM_BITS && bad < 10; i++)
        bad += !same_as_ref(from_bits(xorshift(&x)));
    /* Subnormals. */
    for (int i = 0; i < 50000 / BULK_DIV && bad < 10; i++)
        bad += !same_as_ref(from_bits(xorshift(&x) & ((UINT64_C(1) << 52) - 1)));
    /* Uniform in [0, 1) as generators make them, and their negatives. */
    for (int i = 0; i < 100000 / BULK_DIV && bad < 10; i++) {
        double u = (double)(xorshift(&x) >> 11) * 0x1p-53;
        bad += !same_as_ref(u) + !same_as_ref(-u);
    }
    /* Integers up to 2^53, and ones of each length. */
    for (int i = 0; i < 100000 / BULK_DIV && bad < 10; i++) {
        uint64_t r = xorshift(&x);
        bad += !same_as_ref((double)(r >> 11));
        bad += !same_as_ref((double)(r >> (11 + r % 53)));
    }
    /* Short decimals (coordinates, prices): i / 1000, i * 0.1, i / 8. */
    for (int i = -200000 / BULK_DIV; i <= 200000 / BULK_DIV && bad < 10; i++)
        bad += !same_as_ref(i / 1000.0) + !same_as_ref(i * 0.1) + !same_as_ref(i / 8.0);
    /* Typical magnitudes with full 17-digit mantissas: 10^k * u. */
    for (int i = 0; i < 100000 / BULK_DIV && bad < 10; i++) {
        double u = (double)(xorshift(&x) >> 11) * 0x1p-53;
        bad += !same_as_ref(u * pow(10.0, (double)(int)(xorshift(&x) % 40) - 20));
    }
    CHECK_EQ(bad, 0);
}
