/* The central directory of a zip file, read by our own code (fuzzed:
 * tests/fuzz/zip_dir_fuzz.c).  Why not libzip or minizip: the store needs
 * each entry's data offset in the file, to pread stored chunks straight
 * from the zip and sendfile raw keys, and libzip (1.7.3, Debian 12) has no
 * call that gives it; it also opens a 100,000-entry zip ten times slower
 * in 2.5 times the memory (measured: make bench-zip, storage/zip/README.md).
 * minizip's does give it, but finds an entry by walking the central
 * directory from its start (70 ms an entry in a 100,000-entry zip), and an
 * index of our own around it opens 6-11 times slower than this.  What is
 * parsed is small: the end of central directory record (and the zip64
 * locator and record), the central directory entries with their zip64
 * extra field, and, per entry when it is first read, its local header.
 *
 * Every number is distrusted.  The directory must lie inside the file and
 * end exactly where the end record starts (no prepended or interleaved
 * data), its size is bounded by the file before anything is allocated
 * (and by ZIP_MAX_DIRECTORY_BYTES), the entry count by the directory's
 * size; every entry's span (local header, name, data) must lie before the
 * directory and not overlap another's; names are plain relative paths
 * (no "", ".", ".." segments, no leading '/', no backslash, no drive, no
 * control character); of a name given twice the last counts, as in
 * Python's zipfile.  Anything else is CELLAR_EFORMAT naming what is wrong.  Encrypted entries and methods other than stored and
 * deflate are kept and refused when read (zip_entry_check). */
#ifndef CELLAR_ZIP_DIR_H
#define CELLAR_ZIP_DIR_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

/* A directory larger than this is refused (a million keys take ~80 MB). */
#define ZIP_MAX_DIRECTORY_BYTES ((uint64_t)512 << 20)

enum { ZIP_STORED = 0, ZIP_DEFLATED = 8 };

typedef struct zip_entry {
    const char *name;         /* in the directory's name block, NUL-terminated */
    uint64_t local_offset;    /* its local header */
    uint64_t end;             /* where the next entry (or the directory) starts */
    uint64_t comp_size, size; /* stored and decoded bytes */
    uint32_t crc32;
    uint16_t method, flags;
    uint16_t name_len;
    uint64_t order;           /* its place in the central directory */
    /* The data's offset, from the local header when first read; 0 until
     * then (a real one is at least 30). */
    _Atomic uint64_t data_offset;
} zip_entry;

typedef struct zip_directory {
    zip_entry *entries; /* files only (directory entries dropped), sorted by name */
    size_t count;
    char *names;
    uint64_t directory_offset; /* where the central directory starts */
} zip_directory;

/* Reads n bytes at off of the zip into buf: 0, or -1 when they are not all
 * there (short file, read error). */
typedef int (*zip_read_fn)(void *ctx, uint64_t off, size_t n, void *buf);

/* Parses the directory of a zip of file_size bytes read through rd.
 * CELLAR_EFORMAT when it is not a zip or is malformed, CELLAR_ENOMEM.
 * On success free with zip_directory_free. */
int zip_directory_parse(zip_read_fn rd, void *ctx, uint64_t file_size, zip_directory *out,
                        cellar_error *err);
void zip_directory_free(zip_directory *d);

/* The entry named name, or NULL. */
const zip_entry *zip_directory_find(const zip_directory *d, const char *name);

/* The index of the first entry whose name is >= prefix (count when none). */
size_t zip_directory_lower_bound(const zip_directory *d, const char *prefix);

/* Whether the entry can be read: not encrypted, stored or deflated, a
 * stored entry's sizes equal.  CELLAR_EFORMAT naming the entry. */
int zip_entry_check(const zip_entry *e, cellar_error *err);

/* The offset of the entry's data: its local header read (through rd) and
 * checked against the directory (signature, the same name, method and
 * encryption; sizes when it records them), and the data [offset, offset +
 * comp_size) checked to end before the next entry.  Kept in the entry. */
int zip_entry_data_offset(zip_entry *e, zip_read_fn rd, void *ctx, uint64_t *offset,
                          cellar_error *err);

#endif
