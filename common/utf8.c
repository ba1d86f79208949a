#include "common/utf8.h"

#include <string.h>

#include "common/buf.h"

size_t utf8_seq_len(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    if (c < 0x80)
        return 1;
    size_t len;
    unsigned lo = 0x80, hi = 0xbf;
    if (c >= 0xc2 && c <= 0xdf) {
        len = 2;
    } else if (c >= 0xe0 && c <= 0xef) {
        len = 3;
        if (c == 0xe0)
            lo = 0xa0;
        else if (c == 0xed)
            hi = 0x9f;
    } else if (c >= 0xf0 && c <= 0xf4) {
        len = 4;
        if (c == 0xf0)
            lo = 0x90;
        else if (c == 0xf4)
            hi = 0x8f;
    } else {
        return 0;
    }
    if (n < len || s[1] < lo || s[1] > hi)
        return 0;
    for (size_t k = 2; k < len; k++)
        if (s[k] < 0x80 || s[k] > 0xbf)
            return 0;
    return len;
}

int utf8_valid(const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        size_t l = utf8_seq_len(p + i, n - i);
        if (!l)
            return 0;
        i += l;
    }
    return 1;
}

/* How many bytes an invalid sequence at s spans: its lead byte and the
 * continuation bytes that still fitted, so that each maximal invalid
 * subpart becomes one U+FFFD (Unicode's recommended practice, as Python's
 * "replace" does). */
static size_t utf8_bad_len(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    size_t len;
    unsigned lo = 0x80, hi = 0xbf;
    if (c >= 0xc2 && c <= 0xdf)
        len = 2;
    else if (c >= 0xe0 && c <= 0xef)
        len = 3, lo = c == 0xe0 ? 0xa0 : 0x80, hi = c == 0xed ? 0x9f : 0xbf;
    else if (c >= 0xf0 && c <= 0xf4)
        len = 4, lo = c == 0xf0 ? 0x90 : 0x80, hi = c == 0xf4 ? 0x8f : 0xbf;
    else
        return 1;
    size_t k = 1;
    if (k < n && k < len && s[k] >= lo && s[k] <= hi) {
        k++;
        while (k < n && k < len && s[k] >= 0x80 && s[k] <= 0xbf)
            k++;
    }
    return k;
}

int utf8_sanitize(const char *s, size_t n, buf *out)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0, run = 0;
    while (i < n) {
        size_t l = utf8_seq_len(p + i, n - i);
        if (l) {
            i += l;
            continue;
        }
        if (buf_append(out, s + run, i - run) || buf_append(out, "\xef\xbf\xbd", 3))
            return -1;
        i += utf8_bad_len(p + i, n - i);
        run = i;
    }
    return buf_append(out, s + run, n - run);
}

/* The length a sequence led by c has, 0 when c leads none. */
static size_t utf8_lead_len(unsigned c)
{
    return c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
}

size_t utf8_drop_cuts(char *s, size_t n)
{
    unsigned char *p = (unsigned char *)s;
    size_t i = 0, o = 0;
    while (i < n) {
        size_t l = utf8_seq_len(p + i, n - i);
        if (l) {
            memmove(p + o, p + i, l);
            i += l, o += l;
            continue;
        }
        size_t bad = utf8_bad_len(p + i, n - i);
        if (bad < utf8_lead_len(p[i])) { /* the start of a character, cut */
            i += bad;
            continue;
        }
        memmove(p + o, p + i, bad);
        i += bad, o += bad;
    }
    if (o < n)
        p[o] = '\0';
    return o;
}

size_t utf8_next(const unsigned char *s, size_t n, unsigned long *cp)
{
    size_t len = utf8_seq_len(s, n);
    if (!len) {
        *cp = 0xfffd;
        return utf8_bad_len(s, n);
    }
    static const unsigned char lead_mask[5] = {0, 0x7f, 0x1f, 0x0f, 0x07};
    unsigned long c = s[0] & lead_mask[len];
    for (size_t k = 1; k < len; k++)
        c = (c << 6) | (s[k] & 0x3f);
    *cp = c;
    return len;
}
