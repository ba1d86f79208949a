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
 * details.  rd's ctx must outlive the tree.  Every read goes through
 * libhdf5 (no direct reads: they need a descriptor). */
int h5_open_reader(const h5_reader *rd, const char *what, node **root, cellar_error *err);

/* Direct reads (storage/hdf5/h5_direct.h): numeric and bool datasets that are
 * contiguous, or chunked with only deflate, shuffle and fletcher32, are read
 * with pread and decoded outside libhdf5's lock, so concurrent reads use
 * every core.  Small chunked datasets get a table of chunk addresses on
 * first read; bigger ones get each chunk's stored bytes from libhdf5 and
 * decode them outside it.  Everything else goes through libhdf5.
 * mode 0 turns direct reads off (every read through libhdf5), 1 on (the
 * default; CELLAR_H5_DIRECT=0 in the environment at h5_library_init turns
 * them off), 2 on without chunk tables (for tests; applies to datasets first
 * read after the call). */
void h5_set_direct_reads(int mode);

/* How reads of n go now (makes its plan when not made yet): 0 through libhdf5,
 * 1 direct (pread), 2 chunk bytes through libhdf5, decoded outside it.
 * For tests and diagnostics. */
int h5_direct_kind(node *n);

/* ---- for the probe's walk (storage/hdf5/h5_probe.c) ---- */

/* An identity of n's HDF5 object within its file (hard links to one object
 * share it), for telling cycles apart.  0, or -1 when there is none. */
int h5_object_address(node *n, uint64_t *addr);

/* Looks every chunk of the chunked dataset n up in its chunk index (as
 * chunk reads do), in C order, at most max_lookups of them; *lookups says
 * how many.  0 for other layouts; CELLAR_EFORMAT when the layout cannot be
 * read. */
int h5_chunk_index_walk(node *n, uint64_t max_lookups, uint64_t *lookups, cellar_error *err);

#endif
