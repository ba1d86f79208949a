/* CSV output (RFC 4180): fields separated by commas, records by CRLF; a
 * field holding a comma, a double quote, CR or LF is quoted with its quotes
 * doubled.  Values follow pandas' to_csv: bools as True/False, floats with
 * the shortest round-trip text, NaN and missing values as empty fields. */
#ifndef CELLAR_CSV_OUT_H
#define CELLAR_CSV_OUT_H

#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"
#include "storage/dtype.h"

/* Appends one text field, quoted when needed; invalid UTF-8 is replaced by
 * U+FFFD.  NULL appends an empty field.  0, or -1 when out of memory. */
int csv_field(buf *b, const char *s);
int csv_fieldn(buf *b, const char *s, size_t n);

/* Appends element i of a typed numeric/bool array as a field (no quoting is
 * ever needed): NaN empty, +-inf as inf/-inf. */
int csv_typed(buf *b, dtype_kind dt, const void *data, int64_t i);

/* Appends the separator before every field but the first of a record. */
static inline int csv_sep(buf *b)
{
    return buf_putc(b, ',');
}

static inline int csv_end_record(buf *b)
{
    return buf_append(b, "\r\n", 2);
}

#endif
