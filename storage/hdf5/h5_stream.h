/* Streaming one big variable-length string out of an HDF5 file.
 *
 * TreeData's `.h5td` keeps all trees of `obst`/`vart` as one scalar
 * variable-length string: ~100 MB of JSON for a 1M-node tree.  Read through
 * libhdf5 that string is materialized whole (and node_read_strings copies
 * it once more).  Here libhdf5 is only asked where the dataset's raw bytes
 * lie; the element there is a global heap id (length, collection address,
 * object index), and the string's bytes are the object's data in that
 * global heap collection.  They are read with pread in pieces and handed to
 * a sink, so memory stays at one piece.
 *
 * This is a second module that includes hdf5.h (storage/hdf5/h5.c being the
 * other): it opens the file through libhdf5 a second time, which libhdf5
 * shares with the open store (same inode, one metadata cache), and closes
 * it again before streaming.
 *
 * Every byte from the file is distrusted: the heap id, the collection's
 * signature, version and size, and each object header are checked against
 * the file size; what does not look exactly as expected is "not handled
 * here" (CELLAR_EINVAL, before any byte went to the sink) so that the
 * caller falls back to libhdf5's read. */
#ifndef CELLAR_H5_STREAM_H
#define CELLAR_H5_STREAM_H

#include <stddef.h>

#include <hdf5.h>

#include "common/error.h"

/* Receives the next piece of the string (len > 0); returns 0 or a
 * cellar_code, which stops the stream and is returned as is. */
typedef int (*h5_stream_sink)(void *ctx, const char *data, size_t len, cellar_error *err);

/* Streams the variable-length string of the dataset at `dset_path` (a
 * scalar, or a 1-D dataset of one element) of the HDF5 file `file_path`
 * to `sink` in pieces of at most `piece` bytes (> 0).  The dataset is
 * opened with `dataset_access` (the caller's access list: h5_link_access,
 * whose prefixes every open of a dataset of that file must share).
 *
 * Returns 0 when every byte went to the sink.  CELLAR_EINVAL when the
 * dataset is not one this module reads (not a vlen string, not contiguous,
 * a layout not understood, the file cannot be opened by path): nothing was
 * given to the sink then, and the caller should read the string another
 * way.  After the first piece: what the sink returned, CELLAR_EIO when a
 * read fails, CELLAR_EFORMAT when the file ends early. */
int h5_stream_vlen_string(const char *file_path, const char *dset_path, hid_t dataset_access,
                          size_t piece, h5_stream_sink sink, void *ctx, cellar_error *err);

#endif
