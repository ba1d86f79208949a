/* Element types the storage layer can hand out, independent of backend. */
#ifndef CELLAR_DTYPE_H
#define CELLAR_DTYPE_H

#include <stddef.h>

typedef enum dtype_kind {
    DT_NONE = 0,  /* a group, or a type we do not read (compound, reference, ...) */
    DT_BOOL,      /* read as one byte per value, 0 or 1 */
    DT_INT8, DT_INT16, DT_INT32, DT_INT64,
    DT_UINT8, DT_UINT16, DT_UINT32, DT_UINT64,
    DT_FLOAT16, DT_FLOAT32, DT_FLOAT64,
    DT_STRING     /* text, fixed or variable length; read with node_read_strings */
} dtype_kind;

/* Bytes of one value as node_read delivers it (native byte order);
 * 0 for DT_NONE and DT_STRING. */
size_t dtype_size(dtype_kind k);

/* numpy's name: "int32", "float64", "bool", "str"; "none" for DT_NONE. */
const char *dtype_name(dtype_kind k);

/* numpy typestr in native (little-endian) order for .npy headers: "<i4",
 * "|b1", "<f8"; NULL for DT_NONE and DT_STRING. */
const char *dtype_npy_descr(dtype_kind k);

int dtype_is_integer(dtype_kind k);
int dtype_is_signed(dtype_kind k);
int dtype_is_float(dtype_kind k);
int dtype_is_numeric(dtype_kind k); /* integer, float or bool */

#endif
