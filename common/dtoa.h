/* Shortest round-trip text of a float64, without printf: the text JSON and
 * CSV answers print for a double.
 *
 * The text is byte for byte what cellar's printf loop gave (and what
 * Python's repr gives for most values): the first precision p from 15 up
 * (from 1 for subnormals) whose "%.{p}g" reads back to the same double, so
 * fixed notation for a decimal exponent -4 <= k < max(15, digits), else
 * d.ddde+XX; an integral-looking text gets ".0" ("1.0", "-0.0", "1e+15"
 * stays).  The digits come from Ryu (Ulf Adams, PLDI 2018), exact for every
 * double. */
#ifndef CELLAR_DTOA_H
#define CELLAR_DTOA_H

#include <stddef.h>
#include <stdint.h>

/* Longest text dtoa_shortest writes, NUL included
 * ("-2.2250738585072014e-308" is 24 bytes). */
#define DTOA_TEXT_MAX 25

/* Writes the text of v into out (at least DTOA_TEXT_MAX bytes),
 * NUL-terminated, and returns its length.  NaN and infinities write "" and
 * return 0. */
size_t dtoa_shortest(double v, char *out);

/* The text "%.{p}g" prints for the decimal d (> 0, any trailing zeros are
 * dropped) whose first digit has the decimal exponent k: fixed notation
 * for -4 <= k < p, else d.ddde+XX with at least two exponent digits; ".0"
 * added to an integral-looking fixed text; '-' first when neg.  For
 * formatters whose digits come from elsewhere (float32).  Returns the
 * length; out holds at least DTOA_TEXT_MAX bytes for d < 10^17. */
size_t dtoa_layout(int neg, uint64_t d, int k, int p, char *out);

#endif
