/* A zarr store inside a zip file (`.zarr.zip`, or a `.zip` holding one), as
 * a key source of the zarr backend (storage/zarr/zarr_source.h).
 *
 * The zip's central directory is read once when the version opens
 * (storage/zip/zip_dir.h: every offset, size and name checked).  The store
 * is at the zip's root (zarr.storage.ZipStore, `zip -r` inside the store
 * directory) or in its one top folder (`zip -r x.zip store.zarr`).  Stored
 * entries are read with pread straight from the zip and offered to raw
 * keys as a byte range of it (sendfile); deflated entries are decoded
 * whole, bounded before anything is allocated by deflate's largest
 * expansion of the stored bytes, by CODEC_MAX_DECODED and by
 * --max-response-bytes (storage/budget.h), their CRC-32 checked.  The zip
 * is opened once and read through that descriptor, so a file replaced
 * under the name is not read half from each; one changed in place since
 * the version opened (ctime) is reported by the source's changed(). */
#ifndef CELLAR_ZIP_STORE_H
#define CELLAR_ZIP_STORE_H

#include <stdint.h>
#include <time.h>

#include "common/error.h"
#include "storage/zarr/zarr_source.h"

/* Opens the zip at path as a key source (the caller owns it: destroy, or
 * hand it to zarr_open_source).  CELLAR_EFORMAT when it is not a zip, is
 * malformed, or holds no zarr store; CELLAR_EIO, CELLAR_ENOMEM. */
int zip_store_open(const char *path, zarr_source **out, cellar_error *err);

/* A zip read through callbacks rather than from a local file (a remote
 * object: storage/remote/remote_store.h).  read fills [off, off + n) of
 * the zip (0, or a cellar code with err filled: the code is the one the
 * store's reads fail with); changed says when the zip changed under the
 * version (0 while not); close releases ctx. */
typedef struct zip_reader {
    void *ctx;
    uint64_t size;
    struct timespec mtime;
    int (*read)(void *ctx, uint64_t off, size_t n, void *buf, cellar_error *err);
    int64_t (*changed)(void *ctx);
    void (*close)(void *ctx);
} zip_reader;

/* Opens the zip rd gives as a key source, as zip_store_open does a file
 * (every entry read through rd: raw keys have no descriptor).  rd's ctx
 * is taken over (closed with the source, or at once on failure). */
int zip_store_open_reader(const zip_reader *rd, zarr_source **out, cellar_error *err);

/* Whether name is a zip store's name (ends in .zip). */
int zip_store_name(const char *name);

#endif
