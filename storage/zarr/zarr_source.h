/* Where the keys of a zarr store come from: the seam between the zarr
 * backend (metadata, chunk reads, raw keys) and the container that holds
 * the bytes.  Implemented by a local directory (storage/zarr/zarr_dir.c,
 * zarr_dir) and a zip file (storage/zip/zip_store.h); the backend asks a
 * source only to open a key, read a byte range of it, list a directory and
 * say whether anything changed since the version opened.
 *
 * How a remote source (S3, HTTP) plugs in: implement zarr_source_ops over a
 * range reader, put a zarr_source first in your struct, and open the store
 * with zarr_open_source (storage/zarr/zarr.h), which takes the source over.
 *   - open_key: a HEAD (or a lookup in a listing taken when the version
 *     opened) fills k->size and k->mtime; found = 0 for a 404.  Leave
 *     k->fd = -1: raw keys are then read with read_key into memory and
 *     answered from there (sendfile needs bytes stored in a local file).
 *   - read_key: one ranged GET of [off, off + n); fail with CELLAR_EFORMAT
 *     when the object is shorter than it said, CELLAR_EUNAVAILABLE for a
 *     transient failure.  Sizes are untrusted: the backend bounds them
 *     before it allocates (ZARR_MAX_FILE, codec_max_decoded).
 *   - list: the keys below a prefix ("directories" are common prefixes);
 *     CELLAR_ENOTFOUND when there is none.  Used only for stores without
 *     consolidated metadata and for the raw route's listing.
 *   - changed: 0 unless the source saw the store change under the version
 *     (e.g. an object's ETag differing from the listing's); total_bytes
 *     may return -1 (unknown).
 * Every function may be called from any thread at once: a source holds no
 * per-read state outside the zarr_key the caller owns. */
#ifndef CELLAR_ZARR_SOURCE_H
#define CELLAR_ZARR_SOURCE_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "common/error.h"

typedef struct zarr_source zarr_source;

/* How long a store must have been quiet for a version opened on it to be
 * trusted whole (a source's changed() counts a change up to this long
 * before the version opened); writers put files down milliseconds apart. */
#define ZARR_SETTLE_NS ((int64_t)500 * 1000 * 1000)

/* How long the directory of a chunk found missing must have been quiet for
 * the chunk to be read as its fill value (missing_chunk below).  Longer than ZARR_SETTLE_NS: a
 * writer that creates an array's metadata and then its chunks (anndata's
 * write_zarr, group by group) may pause longer than that between the two on
 * a loaded machine, and an answer of fill values for chunks about to be
 * written is wrong in every version (tests/http/test_soak.py saw it on 2
 * busy cores). */
#define ZARR_MISSING_SETTLE_NS ((int64_t)2000 * 1000 * 1000)

/* One opened key, owned by the caller from open_key to close_key. */
typedef struct zarr_key {
    int found;             /* 0: no such key (nothing else set) */
    uint64_t size;         /* the key's bytes, as zarr sees them (decoded) */
    struct timespec mtime; /* when the key (or its container) last changed */
    uint32_t crc32;        /* the bytes' CRC-32 when the container records it */
    int has_crc32;
    /* fd >= 0: the key's bytes lie as they are, [offset, offset + size) of
     * fd, so they may be read with pread or sent with sendfile; the
     * descriptor is the source's (dup it to keep it past close_key).
     * -1: only read_key gives them (a compressed zip entry, a remote key). */
    int fd;
    uint64_t offset;
    void *priv;            /* the source's own state for this key */
} zarr_key;

/* What a listed name is. */
typedef enum zarr_entry_type { ZARR_ENTRY_FILE = 1, ZARR_ENTRY_DIR, ZARR_ENTRY_OTHER } zarr_entry_type;

/* Called once per entry of a listed directory (any order, each name once);
 * nonzero stops the listing and is returned by list. */
typedef int (*zarr_list_fn)(void *ctx, const char *name, zarr_entry_type type);

typedef struct zarr_source_ops {
    /* Opens the key at the store-relative path rel (plain segments joined
     * by '/').  0 with k->found set or not; CELLAR_EFORMAT when what is
     * there cannot be a key (leads outside, not a regular file, a broken
     * entry), CELLAR_EIO when the system is short of resources.  After 0,
     * close_key must be called whether found or not. */
    int (*open_key)(zarr_source *s, const char *rel, zarr_key *k, cellar_error *err);
    /* Reads [off, off + n) of an opened, found key into buf (off + n <=
     * k->size).  CELLAR_EFORMAT when the bytes are not there or do not
     * decode or would decode past a limit, CELLAR_EIO on a read error,
     * CELLAR_ENOMEM.  what names the key in details. */
    int (*read_key)(zarr_source *s, zarr_key *k, uint64_t off, size_t n, void *buf,
                    const char *what, cellar_error *err);
    void (*close_key)(zarr_source *s, zarr_key *k);
    /* Lists directory rel ("" for the store's own).  CELLAR_ENOTFOUND when
     * rel is no directory, CELLAR_EIO when short of resources,
     * CELLAR_EFORMAT when it cannot be listed. */
    int (*list)(zarr_source *s, const char *rel, zarr_list_fn fn, void *ctx, cellar_error *err);
    /* The bytes the store holds, or -1 when unknown / too costly. */
    int (*total_bytes)(zarr_source *s, uint64_t *bytes);
    /* The newest change seen under the version (ns since the epoch), 0. */
    int64_t (*changed)(zarr_source *s);
    /* Optional (NULL: none): the keys rels[0..n) (store-relative, as for
     * open_key) will be read whole next, so a remote source fetches them
     * at once, in parallel, into its cache.  Failures are not reported
     * here: the reads that follow meet them. */
    void (*prefetch)(zarr_source *s, const char *const *rels, size_t n);
    /* Optional (NULL: none): the chunk key rel, opened and not found, is
     * about to be read as its fill value; unsettled_until then says until
     * when such an answer is not to be trusted (ns since the epoch, 0:
     * trusted), from how recently the place of the chunk changed. */
    void (*missing_chunk)(zarr_source *s, const char *rel);
    int64_t (*unsettled_until)(zarr_source *s);
    void (*destroy)(zarr_source *s);
} zarr_source_ops;

struct zarr_source {
    const zarr_source_ops *ops;
};

/* Reads the whole key (k->size <= max bytes, else CELLAR_EFORMAT naming
 * what) into a malloc'd buffer with one spare NUL byte; the caller frees. */
int zarr_key_read_all(zarr_source *s, zarr_key *k, uint64_t max, char **out, const char *what,
                      cellar_error *err);

#endif
