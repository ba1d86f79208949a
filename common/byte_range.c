#include "common/byte_range.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

/* Parses a decimal number, saturating at UINT64_MAX (a huge position is
 * still a position: past the end); -1 when empty or not all digits. */
static int parse_u64(const char *s, size_t len, uint64_t *out)
{
    if (len == 0)
        return -1;
    uint64_t v = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        unsigned d = (unsigned)(s[i] - '0');
        v = v > (UINT64_MAX - d) / 10 ? UINT64_MAX : v * 10 + d;
    }
    *out = v;
    return 0;
}

range_kind byte_range_parse(const char *header, uint64_t size, uint64_t *first,
                              uint64_t *len)
{
    while (*header == ' ')
        header++;
    if (strncasecmp(header, "bytes=", 6) != 0)
        return RANGE_WHOLE; /* another unit: ignored */
    const char *spec = header + 6;
    while (*spec == ' ')
        spec++;
    if (strchr(spec, ','))
        return RANGE_WHOLE; /* several ranges: the whole body, 200 */
    size_t n = strlen(spec);
    while (n && (spec[n - 1] == ' ' || spec[n - 1] == '\t'))
        n--;
    const char *dash = memchr(spec, '-', n);
    if (!dash)
        return RANGE_WHOLE; /* malformed: ignored */
    size_t a_len = (size_t)(dash - spec), b_len = n - a_len - 1;
    uint64_t a = 0, b = 0;
    if (a_len == 0) { /* bytes=-n: the last n bytes */
        if (parse_u64(dash + 1, b_len, &b) != 0)
            return RANGE_WHOLE;
        if (b == 0 || size == 0)
            return RANGE_UNSATISFIABLE;
        if (b > size)
            b = size;
        *first = size - b;
        *len = b;
        return RANGE_PART;
    }
    if (parse_u64(spec, a_len, &a) != 0)
        return RANGE_WHOLE;
    if (b_len == 0) {
        b = UINT64_MAX;
    } else {
        if (parse_u64(dash + 1, b_len, &b) != 0 || b < a)
            return RANGE_WHOLE; /* bytes=9-0 is not a range: ignored (RFC 9110 14.1.1) */
    }
    if (a >= size)
        return RANGE_UNSATISFIABLE;
    if (b >= size)
        b = size - 1;
    *first = a;
    *len = b - a + 1;
    return RANGE_PART;
}

/* The answer to a multi-range request that is to be ignored. */
static range_kind whole(byte_parts *out)
{
    out->n = 0;
    return RANGE_WHOLE;
}

range_kind byte_ranges_parse(const char *header, uint64_t size, byte_parts *out)
{
    out->n = 0;
    while (*header == ' ')
        header++;
    if (strncasecmp(header, "bytes=", 6) != 0)
        return whole(out);
    const char *p = header + 6;
    uint64_t total = 0;
    int seen = 0;
    while (*p) {
        const char *e = strchr(p, ',');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        char one[96];
        if (n + 7 > sizeof one || ++seen > BYTE_PARTS_MAX)
            return whole(out);
        snprintf(one, sizeof one, "bytes=%.*s", (int)n, p);
        uint64_t first = 0, len = 0;
        size_t blank = strspn(one + 6, " \t");
        if (one[6 + blank] == '\0')
            return whole(out);
        range_kind k = byte_range_parse(one, size, &first, &len);
        if (k == RANGE_WHOLE)
            return whole(out);
        if (k == RANGE_PART) {
            out->first[out->n] = first;
            out->len[out->n++] = len;
            total += len;
        }
        p = e ? e + 1 : p + n;
    }
    if (out->n == 0)
        return RANGE_UNSATISFIABLE;
    if (total > BYTE_PARTS_BYTES_MAX || total > size) { /* overlapping parts: the whole is smaller */
        out->n = 0;
        return whole(out);
    }
    return RANGE_PART;
}

