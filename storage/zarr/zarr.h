/* The zarr backend of storage/node.h: stores in zarr format v2
 * (.zgroup/.zarray/.zattrs, optional .zmetadata) and v3 (zarr.json, with
 * optional inline consolidated metadata), read-only, from a directory or
 * any other key source (storage/zarr/zarr_source.h: a zip file, later
 * remote stores).
 *
 * Supported subset: numeric and bool arrays, vlen-utf8/vlen-bytes strings,
 * fixed-length numpy unicode (<U) and bytes (|S) strings; C and F order and
 * the transpose codec; both chunk key encodings and separators; compressors
 * blosc, zstd, gzip, zlib, lz4 and the crc32c checksum; sharding_indexed with
 * its index at either end.  Missing chunks and empty inner chunks read as the
 * fill value.  Other dtypes open with DT_NONE; unsupported codecs make reads
 * fail with CELLAR_EFORMAT naming the codec.  Every size and name from disk
 * is checked; nothing on disk can make a read crash or over-allocate.
 *
 * Metadata is read once when a node is first opened and never changes, so
 * reads take no lock and any number of threads may read one tree.  Every
 * file is read beneath the directory the version opened, and a file changed
 * after that is noticed (zarr_changed_since_open). */
#ifndef CELLAR_ZARR_H
#define CELLAR_ZARR_H

#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include "common/arena.h"
#include "common/error.h"
#include "storage/node.h"
#include "storage/zarr/zarr_source.h"

/* Opens the zarr store in directory `dir` and returns its root node (a
 * group, or an array for a store that is one array) in *root; the caller
 * frees it with node_tree_free.  Consolidated metadata is used when present
 * (v2 .zmetadata, v3 root zarr.json "consolidated_metadata"), per-node files
 * otherwise.  Errors: CELLAR_EFORMAT when dir is not a zarr store or its root
 * metadata is malformed, CELLAR_EIO, CELLAR_ENOMEM. */
int zarr_open(const char *dir, node **root, cellar_error *err);

/* Opens the zarr store whose keys src gives (a zip, a remote source:
 * storage/zarr/zarr_source.h), as zarr_open does a directory; src is taken
 * over (destroyed with the tree, or at once on failure).  what names the
 * store in details. */
int zarr_open_source(zarr_source *src, const char *what, node **root, cellar_error *err);

/* The key source of the store version whose tree root was opened by
 * zarr_open or zarr_open_source; owned by the version. */
zarr_source *zarr_store_source(node *root);

/* Builds the text of a v2 `.zmetadata` document ({"metadata": {...},
 * "zarr_consolidated_format": 1}) from the per-node metadata files of the v2
 * store whose tree root was opened by zarr_open (read from that version's
 * directory), for stores that have none.  *json_text is malloc'd and
 * NUL-terminated (*len excludes the NUL); the caller frees it.  Errors:
 * CELLAR_EFORMAT (not a v2 store, or a metadata file is not JSON),
 * CELLAR_EIO, CELLAR_ENOMEM. */
int zarr_build_consolidated(node *root, char **json_text, size_t *len, cellar_error *err);

/* Builds the text of the root zarr.json of a v3 store whose root group has no
 * consolidated metadata: the root document with every node's document inlined
 * under "consolidated_metadata" as zarr-python writes it (flattened relative
 * paths; child groups carry an empty inline block), so clients that cannot
 * list directories over HTTP see the whole hierarchy.  *json_text is malloc'd
 * and NUL-terminated.  Errors: CELLAR_ENOTFOUND when the root already has
 * consolidated metadata or is an array (serve the file as it is),
 * CELLAR_EFORMAT, CELLAR_EIO, CELLAR_ENOMEM. */
int zarr_build_consolidated_v3(node *root, char **json_text, size_t *len, cellar_error *err);

/* The entries of the store directory rel ("" for the store's own) of the
 * version root, as a static file server lists them but only what the raw
 * route serves: files that are zarr keys (zarr_store_has_key) and
 * subdirectories with plain names (their names end in '/'), sorted, in
 * a's memory.  Opened beneath the version's directory.  CELLAR_ENOTFOUND
 * when rel is no directory of the store. */
int zarr_key_directory(node *root, const char *rel, arena *a, const char ***names,
                       size_t *count, cellar_error *err);

/* The zarr format (2 or 3) of the store whose tree root was opened by
 * zarr_open. */
int zarr_format(node *root);

/* The bytes of the store version's files (every regular file below its
 * directory), walked once per call: 0, or -1 when the store is too large
 * to walk in bounded time (2 million entries or 2 s). */
int zarr_store_bytes(node *root, uint64_t *bytes);

/* The directory the store version (root from zarr_open) reads beneath,
 * opened O_PATH when it opened; it stays the version's own when the path
 * is later replaced.  Owned by the version: dup it to keep it longer.  -1
 * for a store of another source (zarr_open_source). */
int zarr_directory_fd(node *root);

/* Whether a file or directory the version read has changed since the
 * version opened (a store rewritten in place): the newest such ctime in
 * ns since the epoch, 0 while none.  Answers made from a changed version
 * are made again from a new one. */
int64_t zarr_changed_since_open(node *root);

/* When a store whose version saw a change (zarr_changed_since_open) can be
 * trusted again if nothing changes meanwhile: that change plus the quiet
 * time a new version needs, or the end of zarr_unsettled (ns since the
 * epoch, the later of the two); 0 while none. */
int64_t zarr_settled_at(node *root);

/* Whether answers of the version that read a chunk as missing (its fill
 * value) are not trusted yet: the chunk's directory changed so recently
 * that a writer may be about to put it down (ZARR_MISSING_SETTLE_NS).  The
 * version is still current; the answer is made again a little later. */
int zarr_unsettled(node *root);

/* Whether key names a zarr key of the store whose tree root was opened by
 * zarr_open, judged from the metadata alone (the file may still be
 * missing): a metadata file of the store's format (.zarray, .zgroup,
 * .zattrs, root .zmetadata; zarr.json) below plain path segments, or the
 * key of a chunk (or shard) of an array the metadata declares, under the
 * array's chunk key encoding and inside its chunk grid.  Dotfiles, .git/,
 * editor backups and any other file are not keys.  1 or 0. */
int zarr_store_has_key(node *root, const char *key);

/* Opens the file at the store-relative path rel for reading without leaving
 * the store (store_fd is open on its directory, store_dir is its path):
 * symlinks are followed only while they resolve inside it (relative or
 * absolute), the open never blocks, and only a regular file is kept.  0
 * with *fd >= 0 and *st filled; 0 with *fd = -1 when nothing is there;
 * CELLAR_EFORMAT when it is not a regular file, leads outside the store or
 * loops (the detail names rel); CELLAR_EIO when the system is out of
 * descriptors or memory.  The caller closes *fd. */
int zarr_open_file_at(int store_fd, const char *store_dir, const char *rel, int *fd,
                      struct stat *st, cellar_error *err);

#endif
