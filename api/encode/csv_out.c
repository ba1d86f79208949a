#include "api/encode/csv_out.h"

#include <math.h>
#include <string.h>

#include "api/encode/json_out.h"

static int needs_quotes(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] == ',' || s[i] == '"' || s[i] == '\r' || s[i] == '\n')
            return 1;
    return 0;
}

static int put_quoted(buf *b, const char *s, size_t n)
{
    if (buf_putc(b, '"'))
        return -1;
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '"')
            continue;
        if (buf_append(b, s + run, i + 1 - run))
            return -1;
        run = i; /* the quote is written again: "" */
    }
    if (buf_append(b, s + run, n - run))
        return -1;
    return buf_putc(b, '"');
}

int csv_fieldn(buf *b, const char *s, size_t n)
{
    if (!s)
        return 0;
    if (!utf8_valid(s, n)) {
        buf clean = {0};
        int rc = utf8_sanitize(s, n, &clean);
        if (!rc)
            rc = csv_fieldn(b, clean.data ? clean.data : "", clean.len);
        buf_destroy(&clean);
        return rc;
    }
    if (needs_quotes(s, n))
        return put_quoted(b, s, n);
    return buf_append(b, s, n);
}

int csv_field(buf *b, const char *s)
{
    return s ? csv_fieldn(b, s, strlen(s)) : 0;
}

int csv_typed(buf *b, dtype_kind dt, const void *data, int64_t i)
{
    char t[NUMBER_TEXT_MAX];
    size_t n = fmt_typed(dt, data, i, "True", "False", t);
    if (n)
        return buf_append(b, t, n);
    if (!dtype_is_float(dt))
        return 0;
    double v = dt == DT_FLOAT64   ? ((const double *)data)[i]
               : dt == DT_FLOAT32 ? (double)((const float *)data)[i]
                                  : (double)half_to_float(((const uint16_t *)data)[i]);
    if (isinf(v))
        return buf_puts(b, v > 0 ? "inf" : "-inf");
    return 0;
}
