/* Reads of HDF5 dataset bytes outside libhdf5: pread, inflate, unshuffle,
 * Fletcher-32 and byte order done here, so that many threads decode at once
 * while libhdf5 serializes every call of its own.
 *
 * storage/hdf5/h5.c (the only file that includes hdf5.h) finds out once where a
 * dataset's bytes are and describes them with an h5d_layout: a contiguous
 * block at a file address, or a chunk grid whose chunks are either listed in
 * a table (file address, stored size, filter mask; built with
 * h5d_plan_add_chunk) or fetched one at a time through a callback.  The plan
 * is immutable once built and may be read by many threads at once.
 *
 * Filters: deflate, shuffle, fletcher32 and h5py's LZF (decoded with
 * liblzf; the stored chunk is one raw LZF block of the whole chunk).
 *
 * Every byte from the file is distrusted: addresses and sizes are bounded by
 * the file size and the chunk size, a decoded chunk must be exactly the
 * chunk's size, and a failing check is CELLAR_EFORMAT, never a crash. */
#ifndef CELLAR_H5_DIRECT_H
#define CELLAR_H5_DIRECT_H

#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "storage/node.h"
#include "storage/selection.h"

/* Filters, numbered as HDF5 numbers them (H5Z_FILTER_*). */
enum {
    H5D_FILTER_DEFLATE = 1,
    H5D_FILTER_SHUFFLE = 2,
    H5D_FILTER_FLETCHER32 = 3,
    H5D_FILTER_LZF = 32000, /* h5py's LZF filter (registered id 32000) */
};

#define H5D_MAX_FILTERS 8
/* Chunks (and the largest filtered chunk) above this are left to libhdf5. */
#define H5D_MAX_CHUNK_BYTES ((size_t)256 << 20)

typedef struct h5d_filter {
    int id;               /* H5D_FILTER_* */
    size_t shuffle_size;  /* shuffle: bytes per element it was applied with */
} h5d_filter;

typedef struct h5d_layout {
    int ndim;                        /* 1..NODE_MAX_DIMS */
    int64_t shape[NODE_MAX_DIMS];
    size_t elem_size;                /* 1, 2, 4 or 8 */
    int swap;                        /* stored bytes are the other byte order */
    unsigned char fill[8];           /* fill value, native order (chunked) */
    uint64_t file_size;              /* every address + size must fit */
    int contiguous;
    uint64_t addr;                   /* contiguous: absolute file offset */
    int64_t chunk[NODE_MAX_DIMS];    /* chunked: chunk shape */
    int nfilters;                    /* chunked: the pipeline, in write order */
    h5d_filter filters[H5D_MAX_FILTERS];
} h5d_layout;

typedef struct h5d_plan h5d_plan;

/* Gets the stored bytes of the chunk starting at element coordinates
 * start[]: a malloc'd *buf of *size bytes (at most max_size, the caller of
 * h5d_read frees it) and its filter mask; *buf NULL when the chunk is not
 * allocated (it reads as the fill value).  Returns 0 or a cellar_code. */
typedef int (*h5d_fetch_fn)(void *ctx, const int64_t *start, size_t max_size, uint8_t **buf,
                            size_t *size, uint32_t *mask, cellar_error *err);

/* Checks a layout and makes a plan of it (*out owned by the caller, freed
 * with h5d_plan_free).  CELLAR_EFORMAT when the layout is impossible (chunk
 * or contiguous block past the end of the file, zero chunk dims),
 * CELLAR_EINVAL when it is one this module does not read (unknown filter,
 * two compressors, chunks over H5D_MAX_CHUNK_BYTES), CELLAR_ENOMEM. */
int h5d_plan_new(const h5d_layout *l, h5d_plan **out, cellar_error *err);

void h5d_plan_free(h5d_plan *p);

struct chunk_cache;

/* Keeps the chunks p decodes in cache c under (store, array), ids of
 * chunk_cache_new_id for the file version and the dataset, so that a read
 * of a chunk decoded before copies it instead of decoding it again. */
void h5d_plan_cache_as(h5d_plan *p, struct chunk_cache *c, uint64_t store, uint64_t array);

/* Chunked plans: records one allocated chunk (start = its first element's
 * coordinates, addr absolute in the file) in the plan's table.  Chunks never
 * added read as the fill value once h5d_plan_finish_table was called.
 * CELLAR_EFORMAT for a start off the chunk grid or outside the shape, a
 * chunk past the end of the file, or an impossible stored size. */
int h5d_plan_add_chunk(h5d_plan *p, const int64_t *start, uint64_t addr, uint64_t size,
                       uint32_t mask, cellar_error *err);

/* Chunked plans: the table is complete (CELLAR_EFORMAT when a chunk was
 * listed twice).  Without this, chunked reads use the fetch callback. */
int h5d_plan_finish_table(h5d_plan *p, cellar_error *err);

/* 1 when the plan reads every byte itself (contiguous, or a finished
 * table), 0 when it needs the fetch callback. */
int h5d_plan_is_direct(const h5d_plan *p);

/* When the plan is a contiguous dataset whose stored bytes are exactly what
 * h5d_read returns for the whole of it (native byte order): its absolute
 * file offset and byte length, and 0; else 1.  For answering a whole
 * dataset from the file itself (sendfile), without reading it. */
int h5d_plan_contiguous_extent(const h5d_plan *p, uint64_t *offset, uint64_t *length);

/* Reads a selection (one dim_sel per dimension, counts > 0, positions in
 * range) into out in C order over the selected positions, native byte
 * order, exactly as node_read promises.  fd is the file (pread only, never
 * moved); fetch/fetch_ctx get chunks when the plan has no table (may be
 * NULL otherwise).  `what` names the dataset in error details.
 * Errors: CELLAR_ERANGE (selection outside), CELLAR_EFORMAT (corrupt or
 * truncated data), CELLAR_EIO (the read failed), CELLAR_ENOMEM, and what
 * fetch returns. */
int h5d_read(const h5d_plan *p, int fd, h5d_fetch_fn fetch, void *fetch_ctx,
             const dim_sel *sel, void *out, size_t out_bytes, const char *what,
             cellar_error *err);

/* ---- whole chunks (the zarr view, storage/h5zarr/) ---- */

/* The layout the plan was made from (borrowed from the plan). */
const h5d_layout *h5d_plan_layout(const h5d_plan *p);

/* Bytes of one whole chunk of a chunked plan (edge chunks included: HDF5
 * stores them whole). */
size_t h5d_plan_chunk_bytes(const h5d_plan *p);

/* Where the stored bytes of one chunk are. */
typedef struct h5d_stored {
    int allocated;    /* 0: never written, it reads as the fill value */
    uint64_t addr;    /* buf NULL: the bytes are [addr, addr + size) of the file */
    uint64_t size;
    uint8_t *buf;     /* else the bytes, malloc'd (the caller frees), size of them */
    uint32_t mask;    /* filters skipped for this chunk (bit i: filter i) */
} h5d_stored;

/* Finds the stored bytes of the chunk at grid coordinates cidx of a chunked
 * plan: from its table (an address and size checked against the file and
 * the chunk size), or through fetch (the bytes themselves).  CELLAR_ERANGE
 * for coordinates outside the grid, CELLAR_EFORMAT for an impossible
 * chunk, CELLAR_EINVAL for a contiguous plan, and what fetch returns. */
int h5d_chunk_stored(const h5d_plan *p, h5d_fetch_fn fetch, void *fetch_ctx, const int64_t *cidx,
                     h5d_stored *out, const char *what, cellar_error *err);

/* Whether a chunk of n elements of size bytes each, as the scale-offset
 * filter (H5Z_FILTER_SCALEOFFSET) left it (len bytes), is one that filter
 * wrote: its header (minbits, a 4-byte little-endian count of bits per
 * value, at most 8 * size; the size of minval; minval: 21 bytes in all)
 * and as many packed bytes as minbits says.  libhdf5 1.10 decodes such a
 * chunk without these checks (minbits is only asserted), so a corrupt one
 * reads as made-up values or past the chunk's end. */
int h5d_scaleoffset_ok(const uint8_t *chunk, size_t len, uint64_t n, size_t size);

/* Decodes a whole chunk found by h5d_chunk_stored (the fill value when not
 * allocated) into out (h5d_plan_chunk_bytes(p) bytes), in the stored byte
 * order.  fd is the file (pread only).  Errors as h5d_read. */
int h5d_chunk_decode(const h5d_plan *p, int fd, const h5d_stored *st, uint8_t *out,
                     const char *what, cellar_error *err);

/* The bytes of a file read through a reader rather than a descriptor (a
 * remote HDF5 file: storage/hdf5/h5.h's h5_reader): read fills [off, off +
 * n) of its size bytes, from any thread at once. */
typedef struct h5d_file_reader {
    void *ctx;
    uint64_t size;
    int (*read)(void *ctx, uint64_t off, size_t n, void *buf, cellar_error *err);
} h5d_file_reader;

/* h5d_read with the file's bytes from rd when rd is not NULL (fd unused),
 * the reader's failures returned as they are. */
int h5d_read_from(const h5d_plan *p, int fd, const h5d_file_reader *rd, h5d_fetch_fn fetch,
                  void *fetch_ctx, const dim_sel *sel, void *out, size_t out_bytes,
                  const char *what, cellar_error *err);

/* HDF5's Fletcher-32 of n bytes (as its fletcher32 filter stores it,
 * little-endian, after the data). */
uint32_t h5d_fletcher32(const uint8_t *data, size_t n);

/* Undoes HDF5's shuffle filter: src holds n bytes shuffled with elements of
 * `size` bytes (a tail of n % size bytes stays in place); dst gets n bytes. */
void h5d_unshuffle(const uint8_t *src, uint8_t *dst, size_t n, size_t size);

#endif
