/* Saturating arithmetic for sizes that only bound a request: an overflow
 * means "too big", never a wrapped small number. */
#ifndef CELLAR_SATMATH_H
#define CELLAR_SATMATH_H

#include <stdint.h>

static inline uint64_t sat_add_u64(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

static inline uint64_t sat_mul_u64(uint64_t a, uint64_t b)
{
    return b && a > UINT64_MAX / b ? UINT64_MAX : a * b;
}

#endif
