#include "common/numfmt.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/dtoa.h"

/* "00" .. "99": two digits per division, the way the digits of big
 * answers (node ids, counts) are written. */
static const char digit_pairs[201] =
    "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
    "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
    "8081828384858687888990919293949596979899";

size_t fmt_u64(uint64_t v, char *out)
{
    size_t n = 1;
    for (uint64_t t = v;; t /= 10000, n += 4) {
        if (t < 10)
            break;
        if (t < 100) {
            n += 1;
            break;
        }
        if (t < 1000) {
            n += 2;
            break;
        }
        if (t < 10000) {
            n += 3;
            break;
        }
    }
    out[n] = '\0';
    char *p = out + n;
    while (v >= 100) {
        unsigned d = (unsigned)(v % 100) * 2;
        v /= 100;
        *--p = digit_pairs[d + 1];
        *--p = digit_pairs[d];
    }
    if (v >= 10) {
        *--p = digit_pairs[v * 2 + 1];
        *--p = digit_pairs[v * 2];
    } else {
        *--p = (char)('0' + v);
    }
    return n;
}

size_t fmt_i64(int64_t v, char *out)
{
    if (v >= 0)
        return fmt_u64((uint64_t)v, out);
    out[0] = '-';
    return 1 + fmt_u64((uint64_t)0 - (uint64_t)v, out + 1);
}

/* Appends ".0" to an integral-looking number, as Python's repr does, so a
 * float column stays recognisably float in JSON and CSV. */
static size_t add_point(char *out, size_t n)
{
    if (strpbrk(out, ".eEnN"))
        return n;
    out[n++] = '.';
    out[n++] = '0';
    out[n] = '\0';
    return n;
}

_Static_assert(NUMBER_TEXT_MAX >= DTOA_TEXT_MAX, "fmt_f64 writes dtoa_shortest's text");

/* Ryu's digits in the layout the printf loop gave (see common/dtoa.h). */
size_t fmt_f64(double v, char *out)
{
    return dtoa_shortest(v, out);
}

/* The first precision from 6 (1 for subnormals) to 9 whose %g text reads
 * back through strtof (a float that reads back from p significant digits
 * reads back from any more, so the first is the shortest): the reference
 * fmt_f32 falls back to. */
static size_t fmt_f32_slow(float v, char *out)
{
    int n = 0;
    for (int p = fabsf(v) < FLT_MIN ? 1 : 6; p <= 9; p++) {
        n = snprintf(out, NUMBER_TEXT_MAX - 2, "%.*g", p, (double)v);
        if (p == 9 || strtof(out, NULL) == v)
            break;
    }
    return add_point(out, (size_t)n);
}

static const double pow10_exact[23] = {
    1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
    1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

/* a * 10^n in one correctly rounded double operation (|n| <= 22: the power
 * is exact). */
static double scale10(double a, int n)
{
    return n >= 0 ? a * pow10_exact[n] : a / pow10_exact[-n];
}

/* The nearest p-digit decimal to a (a positive normal float32, exact in a
 * double), as *d in [10^(p-1), 10^p) times 10^(*k - p + 1) (so *k is the
 * decimal exponent %g reports), and *scaled = a * 10^(p - 1 - *k) as the
 * double that rounded to it.  a * 10^n in double has a relative error
 * under 2^-52, so the rounding is decided exactly unless the scaled value
 * lies within 1e-6 of a half (an exact tie or too close to call): then
 * returns -1 and the caller asks snprintf. */
static int f32_round(double a, int p, int *k, uint64_t *d, int *side, double *scaled_out)
{
    for (int tries = 0; tries < 4; tries++) {
        int n = p - 1 - *k;
        if (n > 22 || n < -22)
            return -1;
        double scaled = scale10(a, n);
        double whole = (double)(uint64_t)scaled, frac = scaled - whole; /* 0 < scaled < 2^40 */
        if (fabs(frac - 0.5) < 1e-6)
            return -1;
        if (scaled < pow10_exact[p - 1]) {
            (*k)--;
            continue;
        }
        uint64_t r = (uint64_t)whole + (frac > 0.5);
        if (r >= (uint64_t)pow10_exact[p]) {
            (*k)++; /* a carry (9.999995 -> 10.0000) or k one too small */
            continue;
        }
        *d = r;
        *scaled_out = scaled;
        /* where the exact value lies from r: above (1), below (-1), on it
         * (2: a * 10^n is exact for 0 <= n <= 12, 24 bits times 5^n fitting
         * in 53), or too close to tell (0) */
        double diff = frac > 0.5 ? frac - 1.0 : frac;
        *side = diff > 1e-6 ? 1 : diff < -1e-6 ? -1 : 0;
        if (frac == 0.0 && n >= 0 && n <= 12)
            *side = 2;
        return 0;
    }
    return -1;
}

/* d9 rounded to fewer digits (div = 10^(9 - p)) into *d; -1 when only
 * snprintf can tell (see fmt_f32). */
static inline int round_from9(uint64_t d9, int side, uint64_t div, uint64_t *d)
{
    uint64_t half = div / 2, q = d9 / div, rem = d9 % div;
    if (rem == half && !side)
        return -1;
    if (rem == half && side == 2)
        q += q & 1; /* an exact tie: to even, as printf rounds */
    else
        q += rem > half || (rem == half && side > 0);
    *d = q;
    return 0;
}

/* Whether the decimal c (in the units of the 9-digit rounding, where a is
 * `scaled`) reads back as a, as strtof would: inside a's rounding interval,
 * hi above a and lo below (half the gaps to its neighbours, in the same
 * units).  -1 when c lies within 1e-6 of an end: the doubles cannot tell,
 * and an exact end is a tie strtof breaks to even. */
static inline int f32_reads_back(double c, double scaled, double lo, double hi)
{
    double dist = c - scaled, bound = dist >= 0 ? hi : lo;
    dist = fabs(dist);
    if (fabs(dist - bound) < 1e-6)
        return -1;
    return dist < bound;
}

int f32_decimal(float v, uint64_t *digits, int *exp10, int *prec)
{
    double a = fabs((double)v);
    if (!isfinite(v) || a <= FLT_MIN)
        return -1;
    uint32_t bits;
    memcpy(&bits, &v, sizeof bits);
    int e2 = (int)((bits >> 23) & 0xff) - 127; /* a in [2^e2, 2^(e2+1)) */
    /* floor(log10(a)): floor(e2 * log10(2)) (1233 / 4096 a little under
     * it: within one), or one more when a reaches the next power of ten
     * (f32_round corrects a wrong guess at the price of a second try) */
    int k9 = (e2 * 1233) >> 12;
    if (k9 + 1 >= -22 && k9 + 1 <= 22 && a >= (k9 + 1 >= 0 ? pow10_exact[k9 + 1]
                                                           : 1.0 / pow10_exact[-k9 - 1]))
        k9++;
    uint64_t d9;
    int side;
    double scaled;
    if (f32_round(a, 9, &k9, &d9, &side, &scaled))
        return -1;
    /* Half the gap to the next float up, 2^(e2 - 24), and down (half that
     * at a power of two, where the float below is twice as close), both
     * times the scale of the 9-digit rounding: one rounding each. */
    uint64_t hbits = (uint64_t)(e2 - 24 + 1023) << 52;
    double half_ulp;
    memcpy(&half_ulp, &hbits, sizeof half_ulp);
    double hi = scale10(half_ulp, 8 - k9);
    double lo = (bits & 0x7fffffu) ? hi : hi / 2;
    /* Shorter roundings from the 9-digit one: the exact value x lies within
     * 0.5 of d9 and the rounding boundary is an integer, so the dropped
     * digits decide, unless they are exactly half: then the side of d9 x
     * lies on decides (x == d9: a tie, to even), and snprintf when that is
     * too close to tell. */
    static const uint64_t divs[3] = {1000, 100, 10};
    for (int p = 6; p <= 8; p++) {
        uint64_t d;
        /* constant divisors: multiplications, not divisions */
        int r = p == 6 ? round_from9(d9, side, 1000, &d)
                : p == 7 ? round_from9(d9, side, 100, &d)
                         : round_from9(d9, side, 10, &d);
        if (r)
            return -1;
        int ok = f32_reads_back((double)(d * divs[p - 6]), scaled, lo, hi);
        if (ok < 0)
            return -1;
        if (ok) {
            int k = k9;
            if (d == (uint64_t)pow10_exact[p]) { /* carried to the next power of ten */
                d /= 10;
                k++;
            }
            while (d % 10 == 0)
                d /= 10;
            *digits = d;
            *exp10 = k;
            *prec = p;
            return 0;
        }
    }
    while (d9 % 10 == 0)
        d9 /= 10;
    *digits = d9;
    *exp10 = k9;
    *prec = 9;
    return 0;
}

/* The same text as fmt_f32_slow (the first precision from 6 up whose
 * nearest decimal reads back), computed from the 9-digit rounding with a
 * few double operations instead of snprintf and strtof; the rare cases the
 * double arithmetic cannot decide (ties, near-ties, subnormals, far
 * exponents) go to fmt_f32_slow. */
size_t fmt_f32(float v, char *out)
{
    if (!isfinite(v)) {
        out[0] = '\0';
        return 0;
    }
    if (v == 0.0f) {
        strcpy(out, signbit(v) ? "-0.0" : "0.0");
        return strlen(out);
    }
    uint64_t d;
    int k, p;
    if (f32_decimal(v, &d, &k, &p))
        return fmt_f32_slow(v, out);
    return dtoa_layout(signbit(v) != 0, d, k, p, out);
}

float half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h >> 15) << 31;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t mant = h & 0x3ff;
    uint32_t bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (mant << 13);
    } else if (exp != 0) {
        bits = sign | ((exp + 112) << 23) | (mant << 13);
    } else if (mant == 0) {
        bits = sign;
    } else {
        /* Subnormal half: normalise into a float. */
        int e = -1;
        do {
            e++;
            mant <<= 1;
        } while (!(mant & 0x400));
        bits = sign | ((uint32_t)(112 - e) << 23) | ((mant & 0x3ff) << 13);
    }
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

int hex_digit_value(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}
