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

/* The value of a hexadecimal digit (either case), -1 for any other character. */
int hex_digit_value(char c);

/* IEEE half -> float, exactly. */
float half_to_float(uint16_t h);

#endif
