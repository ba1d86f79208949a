/* numpy .npy output (format version 1.0) and the raw `bin` format's header
 * values.  The header is what numpy itself writes: magic, version 1.0, a
 * little-endian uint16 header length, the dict
 * "{'descr': '<f4', 'fortran_order': False, 'shape': (n,), }" followed by
 * numpy's growth padding and spaces so that the data starts at a multiple of
 * 64 bytes, and a final '\n'. */
#ifndef CELLAR_NPY_OUT_H
#define CELLAR_NPY_OUT_H

#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"
#include "storage/dtype.h"

/* Appends the .npy header for a C-order array of dtype dt (numeric or bool)
 * and the given shape (ndim 0..8).  0, or -1 for an unsupported dtype or
 * when out of memory. */
int npy_header(buf *b, dtype_kind dt, const int64_t *shape, int ndim);

/* Writes the X-Shape text of a shape ("100", "3,4", "" for 0-d) into out
 * (at least 200 bytes). */
void npy_shape_text(const int64_t *shape, int ndim, char *out, size_t size);

#endif
