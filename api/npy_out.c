#include "api/npy_out.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* numpy leaves room for the first axis to grow to 21 digits in place
 * (numpy/lib/format.py, GROWTH_AXIS_MAX_DIGITS). */
#define NPY_GROWTH_DIGITS 21
#define NPY_ALIGN 64

int npy_header(buf *b, dtype_kind dt, const int64_t *shape, int ndim)
{
    const char *descr = dtype_npy_descr(dt);
    if (!descr || ndim < 0 || ndim > 8)
        return -1;
    char dict[512];
    size_t n = (size_t)snprintf(dict, sizeof dict,
                                "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
    for (int d = 0; d < ndim; d++)
        n += (size_t)snprintf(dict + n, sizeof dict - n, d ? ", %" PRId64 : "%" PRId64,
                              shape[d]);
    if (ndim == 1)
        dict[n++] = ',';
    n += (size_t)snprintf(dict + n, sizeof dict - n, "), }");
    if (ndim > 0) {
        char first[32];
        int digits = snprintf(first, sizeof first, "%" PRId64, shape[0]);
        for (int k = digits; k < NPY_GROWTH_DIGITS; k++)
            dict[n++] = ' ';
    }
    size_t total = 10 + n + 1;
    /* Like numpy: a header that is already aligned still gets 64 spaces. */
    size_t pad = NPY_ALIGN - total % NPY_ALIGN;
    size_t hlen = n + pad + 1;
    unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0,
                             (unsigned char)(hlen & 0xff), (unsigned char)(hlen >> 8)};
    if (buf_append(b, pre, sizeof pre) || buf_append(b, dict, n))
        return -1;
    for (size_t k = 0; k < pad; k++)
        if (buf_putc(b, ' '))
            return -1;
    return buf_putc(b, '\n');
}

void npy_shape_text(const int64_t *shape, int ndim, char *out, size_t size)
{
    size_t n = 0;
    out[0] = '\0';
    for (int d = 0; d < ndim && n < size; d++)
        n += (size_t)snprintf(out + n, size - n, d ? ",%" PRId64 : "%" PRId64, shape[d]);
}
