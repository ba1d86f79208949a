/* HTTP Range headers in bytes (RFC 9110 14.1-14.2), for every route that
 * answers ranges: the raw zarr keys and the binary element answers. */
#ifndef CELLAR_BYTE_RANGE_H
#define CELLAR_BYTE_RANGE_H

#include <stdint.h>

typedef enum range_kind { RANGE_WHOLE = 0, RANGE_PART, RANGE_UNSATISFIABLE } range_kind;

/* The parts of a multi-range request (RFC 9110 14.6, answered as
 * multipart/byteranges like nginx does): at most BYTE_PARTS_MAX ranges, and a
 * body of at most BYTE_PARTS_BYTES_MAX bytes, else the whole body (200). */
#define BYTE_PARTS_MAX 16
#define BYTE_PARTS_BYTES_MAX ((uint64_t)64 << 20)
typedef struct byte_parts {
    int n; /* 0: not a multi-range answer */
    uint64_t first[BYTE_PARTS_MAX], len[BYTE_PARTS_MAX];
} byte_parts;

/* Interprets a Range header of one range against a body of size bytes:
 * RANGE_PART with [*first, *first + *len), RANGE_UNSATISFIABLE (416), or
 * RANGE_WHOLE when it is to be ignored (another unit, several ranges,
 * malformed, bytes=9-0). */
range_kind byte_range_parse(const char *header, uint64_t size, uint64_t *first, uint64_t *len);

/* A Range of several byte ranges: each parsed as byte_range_parse parses
 * one; one malformed makes the header ignored (RANGE_WHOLE), unsatisfiable
 * ones are dropped, none left is RANGE_UNSATISFIABLE.  Too many ranges, or
 * parts larger than BYTE_PARTS_BYTES_MAX (or than the body) together, give
 * the whole body. */
range_kind byte_ranges_parse(const char *header, uint64_t size, byte_parts *out);

#endif
