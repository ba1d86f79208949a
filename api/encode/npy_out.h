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

/* The same for any numpy descr text ("<f4", "|S3"). */
int npy_header_descr(buf *b, const char *descr, const int64_t *shape, int ndim);

/* numpy .npz output: a zip archive of .npy entries, stored (not
 * compressed), as np.savez writes it and np.load / scipy.sparse.load_npz
 * read it.  Entries are laid out first (header written, room for the data
 * left, its offset in b returned), then the caller fills every entry's data
 * (b->data + offset stays valid until npz_finish), then npz_finish writes
 * the CRC-32s, the central directory and the end record.  Each entry's
 * data starts at a multiple of 64 bytes from the archive's start (as the
 * data of an .npy file does), so it can be read in place.  No zip64: the
 * archive must stay under 4 GiB (NPZ_MAX_BYTES); npz_finish fails beyond. */
#define NPZ_MAX_ENTRIES 8
#define NPZ_MAX_BYTES ((uint64_t)0xffffffffu - 4096)

typedef struct npz_writer {
    buf *b;
    size_t start;  /* offset of the archive in b */
    size_t n;
    struct {
        char name[32];      /* "data.npy" */
        size_t local;       /* offset of the local header */
        size_t extra;       /* bytes of its alignment padding (extra field) */
        size_t first;       /* offset of the .npy header */
        size_t end;         /* offset after the data */
    } e[NPZ_MAX_ENTRIES];
} npz_writer;

void npz_init(npz_writer *z, buf *b);

/* Adds entry `name` + ".npy" holding an array of descr and shape, with
 * data_bytes of data to be filled at *data_off.  -1 when out of memory or
 * out of entries. */
int npz_add(npz_writer *z, const char *name, const char *descr, const int64_t *shape,
            int ndim, size_t data_bytes, size_t *data_off);

/* Finishes the archive; -1 when out of memory or over NPZ_MAX_BYTES. */
int npz_finish(npz_writer *z);

/* Writes the X-Shape text of a shape ("100", "3,4", "" for 0-d) into out
 * (at least 200 bytes). */
void npy_shape_text(const int64_t *shape, int ndim, char *out, size_t size);

#endif
