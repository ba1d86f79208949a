#include "common/dtoa.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/dtoa_pow5.h"

__extension__ typedef unsigned __int128 u128;

#define MANTISSA_BITS 52
#define EXPONENT_BIAS 1023

/* The three log approximations Ryu needs, exact over the exponents a double
 * reaches (checked against exact integers for 0 <= e < 1100). */
static inline int log10_pow2(int e) /* floor(log10(2^e)) */
{
    return (int)(((uint32_t)e * 78913u) >> 18);
}

static inline int log10_pow5(int e) /* floor(log10(5^e)) */
{
    return (int)(((uint32_t)e * 732923u) >> 20);
}

static inline int pow5_bits(int e) /* bit length of 5^e */
{
    return (int)((((uint32_t)e * 1217359u) >> 19) + 1);
}

static inline int multiple_of_pow5(uint64_t v, int p)
{
    int count = 0;
    while (v % 5 == 0) { /* v > 0 */
        v /= 5;
        count++;
    }
    return count >= p;
}

static inline int multiple_of_pow2(uint64_t v, int p)
{
    return (v & ((UINT64_C(1) << p) - 1)) == 0;
}

/* (m * mul) >> j for a 125-bit table entry mul and m < 2^55: the product
 * has at most 180 bits and 118 <= j <= 125 (for every double), so only
 * its top 128 bits matter. */
static inline uint64_t mul_shift(uint64_t m, const uint64_t *mul, int j)
{
    u128 lo = (u128)m * mul[0], hi = (u128)m * mul[1];
    return (uint64_t)(((lo >> 64) + hi) >> (j - 64));
}

/* One digit off v's scaled value and both bounds; *last is the digit
 * dropped from vr, *vr_zeros stays set while every digit before it was 0. */
static inline void drop_digit(uint64_t *vr, uint64_t *vp, uint64_t *vm, int *last,
                              int *vr_zeros)
{
    *vr_zeros &= *last == 0;
    *last = (int)(*vr % 10);
    *vr /= 10;
    *vp /= 10;
    *vm /= 10;
}

/* digits * 10^exp */
typedef struct decimal {
    uint64_t digits;
    int exp;
} decimal;

/* Ryu: the shortest decimal in the interval of reals that round to the
 * positive double with these IEEE fields (not zero, not inf/NaN), and of
 * those the nearest to it (ties to even).  The interval's bounds are
 * scaled into [vm, vp] with v at vr, all as integers times 10^e10; digits
 * are dropped while the bounds still differ.  The *_zeros flags track
 * whether the dropped digits were exactly zero, where that can happen (a
 * bound that is itself a short decimal, or an exact tie at v). */
static decimal shortest(uint64_t ieee_m, unsigned ieee_e)
{
    int e2;
    uint64_t m2;
    if (ieee_e == 0) {
        e2 = 1 - EXPONENT_BIAS - MANTISSA_BITS - 2; /* 2 extra bits for the bounds */
        m2 = ieee_m;
    } else {
        e2 = (int)ieee_e - EXPONENT_BIAS - MANTISSA_BITS - 2;
        m2 = (UINT64_C(1) << MANTISSA_BITS) | ieee_m;
    }
    /* strtod rounds a tie to the even mantissa: an even one owns its bounds */
    int accept_bounds = (m2 & 1) == 0;
    uint64_t mv = 4 * m2;
    /* the gap below a power of two is half the gap above */
    uint64_t mm_shift = ieee_m != 0 || ieee_e <= 1;
    uint64_t mp = mv + 2, mm = mv - 1 - mm_shift;

    uint64_t vr, vp, vm;
    int e10, vm_zeros = 0, vr_zeros = 0;
    if (e2 >= 0) {
        int q = log10_pow2(e2) - (e2 > 3);
        e10 = q;
        int shift = -e2 + q + DTOA_POW5_BITS + pow5_bits(q) - 1;
        const uint64_t *mul = DTOA_POW5_INV[q];
        vr = mul_shift(mv, mul, shift);
        vp = mul_shift(mp, mul, shift);
        vm = mul_shift(mm, mul, shift);
        if (q <= 21) {
            /* only one of mm, mv, mp can be a multiple of 5 */
            if (mv % 5 == 0)
                vr_zeros = multiple_of_pow5(mv, q);
            else if (accept_bounds)
                vm_zeros = multiple_of_pow5(mm, q);
            else
                vp -= (uint64_t)multiple_of_pow5(mp, q);
        }
    } else {
        int q = log10_pow5(-e2) - (-e2 > 1);
        e10 = q + e2;
        int i = -e2 - q;
        int shift = q - (pow5_bits(i) - DTOA_POW5_BITS);
        const uint64_t *mul = DTOA_POW5[i];
        vr = mul_shift(mv, mul, shift);
        vp = mul_shift(mp, mul, shift);
        vm = mul_shift(mm, mul, shift);
        if (q <= 1) {
            vr_zeros = 1; /* mv has two trailing zero bits */
            if (accept_bounds)
                vm_zeros = mm_shift == 1;
            else
                vp--;
        } else if (q < 63) {
            vr_zeros = multiple_of_pow2(mv, q);
        }
    }

    /* Drop digits while the bounds still differ; then, if the lower bound
     * is a short decimal itself and allowed, while it ends in 0. */
    int removed = 0, last = 0;
    while (vp / 10 > vm / 10) {
        vm_zeros &= vm % 10 == 0;
        drop_digit(&vr, &vp, &vm, &last, &vr_zeros);
        removed++;
    }
    if (vm_zeros) {
        while (vm % 10 == 0) {
            drop_digit(&vr, &vp, &vm, &last, &vr_zeros);
            removed++;
        }
    }
    if (vr_zeros && last == 5 && vr % 2 == 0)
        last = 4; /* an exact tie: to even */
    /* vr + 1 when vr is outside the interval or v rounds up */
    uint64_t out = vr + ((vr == vm && (!accept_bounds || !vm_zeros)) || last >= 5);
    return (decimal){out, e10 + removed};
}

static const uint64_t pow10_u64[20] = {
    UINT64_C(1), UINT64_C(10), UINT64_C(100), UINT64_C(1000), UINT64_C(10000),
    UINT64_C(100000), UINT64_C(1000000), UINT64_C(10000000), UINT64_C(100000000),
    UINT64_C(1000000000), UINT64_C(10000000000), UINT64_C(100000000000),
    UINT64_C(1000000000000), UINT64_C(10000000000000), UINT64_C(100000000000000),
    UINT64_C(1000000000000000), UINT64_C(10000000000000000),
    UINT64_C(100000000000000000), UINT64_C(1000000000000000000),
    UINT64_C(10000000000000000000)};

static int decimal_length(uint64_t v)
{
    int n = 1;
    while (n < 20 && v >= pow10_u64[n])
        n++;
    return n;
}

/* The old printf loop, for the one case Ryu's answer does not settle (see
 * dtoa_shortest): the first of %.15g, %.16g, %.17g that reads back. */
static size_t printf_loop(double v, char *out)
{
    int n = 0;
    for (int p = 15; p <= 17; p++) {
        n = snprintf(out, DTOA_TEXT_MAX, "%.*g", p, v);
        if (p == 17 || strtod(out, NULL) == v)
            break;
    }
    if (!strpbrk(out, ".e")) {
        memcpy(out + n, ".0", 3);
        n += 2;
    }
    return (size_t)n;
}

/* dtoa_layout for an n-digit d without trailing zeros. */
static size_t layout_digits(int neg, uint64_t d, int n, int k, int p, char *out)
{
    char dig[20];
    for (int i = n - 1; i >= 0; i--) {
        dig[i] = (char)('0' + d % 10);
        d /= 10;
    }
    size_t o = 0;
    if (neg)
        out[o++] = '-';
    if (k < -4 || k >= p) {
        out[o++] = dig[0];
        if (n > 1) {
            out[o++] = '.';
            memcpy(out + o, dig + 1, (size_t)n - 1);
            o += (size_t)n - 1;
        }
        out[o++] = 'e';
        out[o++] = k < 0 ? '-' : '+';
        int e = abs(k);
        if (e >= 100)
            out[o++] = (char)('0' + e / 100);
        out[o++] = (char)('0' + e / 10 % 10);
        out[o++] = (char)('0' + e % 10);
    } else if (k < 0) {
        out[o++] = '0';
        out[o++] = '.';
        memset(out + o, '0', (size_t)(-k - 1));
        o += (size_t)(-k - 1);
        memcpy(out + o, dig, (size_t)n);
        o += (size_t)n;
    } else if (n <= k + 1) {
        memcpy(out + o, dig, (size_t)n);
        o += (size_t)n;
        memset(out + o, '0', (size_t)(k + 1 - n));
        o += (size_t)(k + 1 - n);
        out[o++] = '.';
        out[o++] = '0';
    } else {
        memcpy(out + o, dig, (size_t)k + 1);
        o += (size_t)k + 1;
        out[o++] = '.';
        memcpy(out + o, dig + k + 1, (size_t)(n - k - 1));
        o += (size_t)(n - k - 1);
    }
    out[o] = '\0';
    return o;
}

/* Which %g precision the printf loop ended on, from the shortest length n.
 * A double's rounding interval is narrower than the gap between 15-digit
 * decimals, so when n <= 15 the nearest 15-digit decimal is the shortest
 * one (zero padded) and %.15g prints it.  With 17 digits the nearest
 * always reads back.  With 16 the nearest reads back whenever any 16-digit
 * decimal does, as the interval is symmetric around v, except below a
 * power of two, where the lower half is half as wide: the nearest may
 * lie just outside while Ryu's lies above; there printf decides. */
size_t dtoa_shortest(double v, char *out)
{
    uint64_t bits;
    memcpy(&bits, &v, sizeof bits);
    int neg = (int)(bits >> 63);
    uint64_t ieee_m = bits & ((UINT64_C(1) << MANTISSA_BITS) - 1);
    unsigned ieee_e = (unsigned)(bits >> MANTISSA_BITS) & 0x7ffu;
    if (ieee_e == 0x7ff) {
        out[0] = '\0';
        return 0;
    }
    if (ieee_e == 0 && ieee_m == 0) {
        memcpy(out, neg ? "-0.0" : "0.0", neg ? 5 : 4);
        return neg ? 4 : 3;
    }
    decimal dec = shortest(ieee_m, ieee_e);
    while (dec.digits % 10 == 0) {
        dec.digits /= 10;
        dec.exp++;
    }
    int n = decimal_length(dec.digits), p;
    if (ieee_e == 0)
        p = n; /* subnormal: the loop started at one digit */
    else if (n <= 15)
        p = 15;
    else if (n == 16 && ieee_m == 0)
        return printf_loop(v, out);
    else
        p = n;
    return layout_digits(neg, dec.digits, n, dec.exp + n - 1, p, out);
}

size_t dtoa_layout(int neg, uint64_t d, int k, int p, char *out)
{
    while (d % 10 == 0)
        d /= 10;
    return layout_digits(neg, d, decimal_length(d), k, p, out);
}
