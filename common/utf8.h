/* UTF-8 checks (RFC 3629: no overlong forms, no surrogates, nothing above
 * U+10FFFF) and repair, for every string that reaches an answer. */
#ifndef CELLAR_UTF8_H
#define CELLAR_UTF8_H

#include <stddef.h>

struct buf; /* common/buf.h */

/* Length of the valid UTF-8 sequence at s (n > 0 bytes left), or 0 when
 * the bytes there do not start one. */
size_t utf8_seq_len(const unsigned char *s, size_t n);

/* Appends s[0..n) to out with every invalid UTF-8 sequence (overlong forms,
 * surrogates, code points over U+10FFFF, truncated sequences) replaced by
 * U+FFFD.  Returns 0, or -1 when out of memory. */
int utf8_sanitize(const char *s, size_t n, struct buf *out);

/* Removes in place every character that was cut short (a lead byte and
 * the continuation bytes that followed it, fewer than it needs), as a
 * text truncated to a byte count leaves at the cut; other invalid bytes
 * stay.  Returns the new length (NUL-terminated when shorter). */
size_t utf8_drop_cuts(char *s, size_t n);

/* The character at s (n > 0 bytes left) in *cp and the bytes it spans; an
 * invalid sequence is U+FFFD over the bytes utf8_sanitize replaces. */
size_t utf8_next(const unsigned char *s, size_t n, unsigned long *cp);

/* Whether s[0..n) is valid UTF-8. */
int utf8_valid(const char *s, size_t n);

#endif
