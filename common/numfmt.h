/* Numbers as text, exactly and without printf where it matters: integers
 * in decimal, float64 and float32 with the shortest text that reads back to
 * the same value (Python's repr), and IEEE half widened to float.  Used by
 * every encoder and by the access log. */
#ifndef CELLAR_NUMFMT_H
#define CELLAR_NUMFMT_H

#include <stddef.h>
#include <stdint.h>

/* Longest text the fmt_* functions write, NUL included. */
#define NUMBER_TEXT_MAX 40

/* Decimal digits of v at out (NUL-terminated, at most 21 bytes), without printf. */
size_t fmt_u64(uint64_t v, char *out);
/* The same for a signed value ('-' first when negative). */
size_t fmt_i64(int64_t v, char *out);

/* Writes the shortest round-trip text of v into out (at least
 * NUMBER_TEXT_MAX bytes) and returns its length; an integral value gets a
 * trailing ".0" like Python's repr.  Returns 0 (and writes "") for NaN and
 * infinities. */
size_t fmt_f64(double v, char *out);
size_t fmt_f32(float v, char *out);

/* The decimal fmt_f32 writes for v, without its text: *digits (no trailing
 * zeros) with *exp10 the decimal exponent of its first digit, and *prec the
 * %g precision fmt_f32 ended on (for its layout).  0, or -1 when v is not
 * a finite normal float above FLT_MIN or only fmt_f32's snprintf path can
 * tell (ties, near-ties, far exponents): then take fmt_f32's text. */
int f32_decimal(float v, uint64_t *digits, int *exp10, int *prec);

/* The value of a hexadecimal digit (either case), -1 for any other character. */
int hex_digit_value(char c);

/* IEEE half -> float, exactly. */
float half_to_float(uint16_t h);

#endif
