/* A libhdf5 virtual file driver over a reader (h5_vfd_reader below, filled
 * from storage/hdf5/h5.h's h5_reader):
 * HDF5 files read by ranges from anywhere, a remote object's above all
 * (storage/remote/).  Read-only; reads past the end are zero-filled, as
 * libhdf5's sec2 driver does.  A reader's failure (a remote's 502 or 504,
 * a file changed under its version) is kept for the calling thread, so
 * the error libhdf5 then reports is answered as that failure rather than
 * as a damaged file (h5_vfd_take_error). */
#ifndef CELLAR_H5_VFD_H
#define CELLAR_H5_VFD_H

#include <hdf5.h>

#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

/* What the driver reads: size bytes through read (0, or a cellar code
 * with err filled), ctx borrowed (storage/hdf5/h5.h's h5_reader). */
typedef struct h5_vfd_reader {
    void *ctx;
    uint64_t size;
    int (*read)(void *ctx, uint64_t off, size_t n, void *buf, cellar_error *err);
} h5_vfd_reader;

/* Registers the driver (once, from h5_library_init). */
void h5_vfd_init(void);

/* File access properties for opening the file rd reads (h5_access's,
 * with this driver; rd is copied, its ctx borrowed), or -1. */
hid_t h5_vfd_fapl(const h5_vfd_reader *rd);

/* The code of the last reader failure on this thread since the last call
 * (its detail copied into err), or 0; clears it. */
int h5_vfd_take_error(cellar_error *err);

/* Forgets a failure kept for this thread. */
void h5_vfd_clear_error(void);

#endif
