/* The HDF5 backend of the node interface (storage/node.h), over libhdf5.
 *
 * This module and storage/hdf5/h5.c are the only place that knows about libhdf5;
 * everything above sees plain nodes.  The subset of HDF5 that is mapped
 * (types, attributes, links) is described in storage/node.h and in the
 * comments of h5.c.
 *
 * Thread safety: libhdf5 (thread-safe build) serializes every call behind its
 * global lock; the nodes made here keep no shared scratch state, so one tree
 * may be used by many threads at once, as node.h promises.  Reads of plain
 * numeric datasets avoid that lock (see h5_set_direct_reads). */
#ifndef CELLAR_H5_H
#define CELLAR_H5_H

#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "storage/node.h"

/* Global set-up, called once at startup before any other thread uses HDF5:
 * initialises the library and switches off its automatic error printing
 * (errors are translated into cellar_error instead).  Every entry point of
 * this module also switches the printing off in the calling thread, since
 * libhdf5 keeps that setting per thread. */
void h5_library_init(void);

/* Opens the HDF5 file at path read-only and returns its root group in *root
 * (owned by the caller, released with node_tree_free, which really closes
 * the file).  A userblock (MuData's 512 bytes) is fine.
 * The file is opened without HDF5 file locks, so writers are never blocked.
 *
 * libhdf5 shares one open file per (device, inode), metadata cache included:
 * a second h5_open of an inode whose tree is still alive gets that same
 * file.  If the file was rewritten in place meanwhile (same inode, new size)
 * this returns CELLAR_EUNAVAILABLE rather than a tree over stale metadata;
 * it opens fine once the older tree is freed.  A same-size in-place rewrite
 * cannot be told apart: callers that detect a change should free the old
 * tree before reopening when the inode is unchanged.
 *
 * Errors: CELLAR_ENOTFOUND when there is no such file, CELLAR_EFORMAT when it
 * is not HDF5 or is truncated/corrupt, CELLAR_EIO when it cannot be read,
 * CELLAR_EUNAVAILABLE as above, CELLAR_ENOMEM. */
int h5_open(const char *path, node **root, cellar_error *err);

struct ext_targets;

/* h5_open, following the external links, external raw storage and
 * virtual datasets that targets (storage/ext_targets.h; borrowed, must
 * outlive the tree) followed; every other one is CELLAR_EFORMAT naming
 * the element and why.  h5_open follows none. */
int h5_open_with_targets(const char *path, const struct ext_targets *targets, node **root,
                         cellar_error *err);

/* A file read by ranges through callbacks rather than from a local path
 * (a remote object: storage/remote/remote_store.h).  read fills [off, off
 * + n) (within size) and returns 0, or a cellar code with err filled: a
 * libhdf5 call that fails on such a read fails with that code and detail
 * (a 502, 504 or change), not as a damaged file. */
typedef struct h5_reader {
    void *ctx;
    uint64_t size;
    int (*read)(void *ctx, uint64_t off, size_t n, void *buf, cellar_error *err);
} h5_reader;

/* Opens the HDF5 file rd reads, as h5_open does a path (through a virtual
 * file driver of ours over rd: storage/hdf5/h5_vfd.h); what names it in
 * details.  rd's ctx must outlive the tree.  Direct reads
 * (h5_set_direct_reads) read through rd too, from any thread at once. */
int h5_open_reader(const h5_reader *rd, const char *what, node **root, cellar_error *err);

/* Direct reads (storage/hdf5/h5_direct.h): numeric and bool datasets that are
 * contiguous, or chunked with only deflate, shuffle and fletcher32, are read
 * with pread and decoded outside libhdf5's lock, so concurrent reads use
 * every core.  Chunked datasets of up to 65536 chunks get a table of chunk
 * addresses on first read (listed for up to 2048 allocated chunks, looked
 * up by coordinates for more); bigger ones get each chunk's stored bytes
 * from libhdf5 and decode them outside it.  Everything else goes through libhdf5.
 * mode 0 turns direct reads off (every read through libhdf5), 1 on (the
 * default; CELLAR_H5_DIRECT=0 in the environment at h5_library_init turns
 * them off), 2 on without chunk tables (for tests; applies to datasets first
 * read after the call). */
void h5_set_direct_reads(int mode);

/* How reads of n go now (makes its plan when not made yet): 0 through libhdf5,
 * 1 direct (pread), 2 chunk bytes through libhdf5, decoded outside it.
 * For tests and diagnostics. */
int h5_direct_kind(node *n);

/* ---- for the zarr view of HDF5 stores (storage/h5zarr/) ---- */

/* How the values of a numeric or bool dataset lie in the file, so that the
 * zarr view can serve them as they are stored. */
typedef enum h5_store_kind {
    H5_STORE_NONE = 0,   /* read them with node_read (compact layout, filters or
                          * types direct reads do not take, not allocated) */
    H5_STORE_CONTIGUOUS, /* one run of the file from `offset`, every element as stored */
    H5_STORE_CHUNKS,     /* HDF5 chunks, each stored as it is (no filter) or deflated only */
    H5_STORE_DECODED,    /* HDF5 chunks through a pipeline cellar decodes (shuffle,
                          * Fletcher-32, LZF, deflate with them): h5_zarr_chunk decodes */
} h5_store_kind;

typedef struct h5_storage {
    h5_store_kind kind;
    /* numpy's typestr of the stored bytes ("<f4", ">i2", "|b1"; bools as
     * HDF5 stores them: one byte, 0 false), for every kind but NONE */
    char typestr[8];
    int chunked;                   /* chunked in HDF5 (any kind): chunk[] is its chunk shape */
    int64_t chunk[NODE_MAX_DIMS];
    uint64_t offset;               /* CONTIGUOUS: absolute file offset */
    int fd;                        /* CONTIGUOUS: the store's file (borrowed: valid while the tree is) */
    int deflate_level;             /* CHUNKS: deflate's level, -1 when unfiltered */
    int has_fill;                  /* fill holds the fill value (native byte order, as node_read) */
    unsigned char fill[8];
} h5_storage;

/* Fills *out for the dataset n (making its direct-read plan when not made
 * yet); kind, typestr and fill only for numeric and bool datasets.  0; -1
 * when n is not an HDF5 dataset (a group, a field of a compound dataset;
 * *out then says H5_STORE_NONE). */
int h5_zarr_storage(node *n, h5_storage *out);

/* The HDF5 type class of dataset n ("compound", "reference", "opaque",
 * "bitfield", "array", "vlen", "time", "enum", "integer", "float",
 * "string"), or "unknown". */
const char *h5_type_class_name(node *n);

/* One chunk of a dataset of kind H5_STORE_CHUNKS or H5_STORE_DECODED. */
typedef struct h5_chunk_bytes {
    int allocated;       /* 0: never written, it reads as the fill value */
    int fd;              /* >= 0: the bytes are [offset, offset + size) of the
                          * store's file (borrowed: valid while the tree is) */
    uint64_t offset, size;
    uint8_t *data;       /* fd < 0: size bytes, malloc'd (the caller frees) */
    int raw;             /* CHUNKS only: the stored bytes skip the filter (deflate
                          * left this chunk as it was), so they are the values */
} h5_chunk_bytes;

/* The chunk at grid coordinates cidx of n: for H5_STORE_CHUNKS its stored
 * bytes exactly as in the file (a deflate stream, or the values), for
 * H5_STORE_DECODED the whole chunk decoded (stored byte order).  Errors:
 * CELLAR_ERANGE (no such chunk), CELLAR_EINVAL (not one of those kinds),
 * CELLAR_EFORMAT (a chunk that cannot be, or does not decode), CELLAR_EIO,
 * CELLAR_ENOMEM. */
int h5_zarr_chunk(node *n, const int64_t *cidx, h5_chunk_bytes *out, cellar_error *err);

/* ---- for the probe's walk (storage/hdf5/h5_probe.c) ---- */

/* Called with the name of each other file an element names (kind
 * EXT_LINK, EXT_RAW or EXT_VIRTUAL of storage/ext_targets.h) as it is
 * opened; such elements are then refused. */
typedef void (*h5_reference_sink)(void *ctx, char kind, const char *name);

/* Sets the sink for the whole process (the probe's, before any thread
 * runs; NULL: none). */
void h5_set_reference_sink(h5_reference_sink sink, void *ctx);

/* An identity of n's HDF5 object within its file (hard links to one object
 * share it), for telling cycles apart.  0, or -1 when there is none. */
int h5_object_address(node *n, uint64_t *addr);

/* Looks every chunk of the chunked dataset n up in its chunk index (as
 * chunk reads do), in C order, at most max_lookups of them; *lookups says
 * how many.  0 for other layouts; CELLAR_EFORMAT when the layout cannot be
 * read. */
int h5_chunk_index_walk(node *n, uint64_t max_lookups, uint64_t *lookups, cellar_error *err);

#endif
