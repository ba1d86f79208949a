/* Global heap ids checked before libhdf5 follows them (storage/README.md, "Trust").
 *
 * A variable-length string is stored as a heap id (u32 length | collection
 * address | u32 object index); its bytes are the object's data in that
 * global heap collection.  libhdf5 1.10 follows an id without checking it:
 * an index past the collection's object table is read out of bounds
 * (H5HG_read), an object larger than its collection is copied past the
 * collection's end, and one larger than the length the id claims
 * overflows the buffer the length sized.  What such a read does depends on
 * the heap around it, so a probe process could survive a file on which
 * the server then crashed (the malformed corpus's h0531_flip.h5ad, in
 * H5Aread of an attribute's "encoding-type").
 *
 * So before a vlen string attribute is read through libhdf5, its heap ids
 * are read raw (a conversion to an opaque type that copies the stored
 * bytes, registered with libhdf5 once) and each one is checked against the
 * collection it names, parsed here from the file's bytes the way libhdf5
 * parses it: the collection inside the file, the object there, its data
 * inside the collection and exactly as long as the id says.  A value that
 * fails is not read: the attribute is skipped, as libhdf5 failures are,
 * and a read of string values is refused (422).  The same goes for the
 * string values of datasets read through libhdf5.  The probe reads
 * through the same code (storage/hdf5/h5.c), so it checks what the server
 * will.  A file whose bytes cellar does not hold itself (no descriptor,
 * no reader) is read unchecked, as before. */
#ifndef CELLAR_H5_HEAP_H
#define CELLAR_H5_HEAP_H

#include <hdf5.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "storage/hdf5/h5_direct.h"

/* Where the file's bytes come from, and how its addresses are written. */
typedef struct h5_heap_file {
    int fd;                      /* a descriptor of the file, or -1 */
    const h5d_file_reader *rd;   /* or its reader (fd unused), or NULL */
    uint64_t size;               /* the file's size */
    uint64_t base;               /* the base address (the userblock's size) */
    size_t sizeof_addr, sizeof_size;
} h5_heap_file;

/* The little-endian unsigned integer of n bytes (n <= 8) at p. */
uint64_t h5_heap_le(const unsigned char *p, size_t n);

/* Reads how file's addresses and lengths are written into f (fd, rd and
 * size are the caller's); 0, or -1 when libhdf5 cannot tell. */
int h5_heap_file_sizes(hid_t file, h5_heap_file *f);

/* For attr, whose n values (n > 0) are variable-length strings: 0 when
 * each heap id is safe for libhdf5 to follow (or names no data: a null
 * id of length 0) and the strings' characters are of one byte,
 * CELLAR_EFORMAT with the reason when not,
 * CELLAR_EIO when the file cannot be read, CELLAR_ENOMEM. */
int h5_heap_check_attr(hid_t attr, size_t n, const h5_heap_file *f, cellar_error *err);

/* The same for the n values (n > 0) of dataset dset, a variable-length
 * string, that H5Dread(dset, ..., mspace, fspace, dxpl, ...) would read. */
int h5_heap_check_dataset(hid_t dset, hid_t mspace, hid_t fspace, hid_t dxpl, size_t n,
                          const h5_heap_file *f, cellar_error *err);

#endif
