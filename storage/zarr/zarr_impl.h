/* Inside the zarr backend: parsed array metadata and the chunk reader,
 * shared by storage/zarr/zarr.c, storage/zarr/zarr_meta.c, storage/zarr/zarr_read.c and the
 * fuzz targets.  Not for use outside storage/zarr*.c and tests. */
#ifndef CELLAR_ZARR_IMPL_H
#define CELLAR_ZARR_IMPL_H

#include <dirent.h>
#include <jansson.h>
#include <stdint.h>
#include <time.h>

#include "storage/chunk_cache.h"
#include "storage/codecs.h"
#include "storage/node.h"
#include "storage/zarr/zarr_source.h"

#define ZARR_MAX_CODECS 8

/* How one element is stored. */
typedef enum zarr_kind {
    ZK_NUMERIC = 1,  /* fixed-size numbers and bools */
    ZK_VLEN_UTF8,    /* numcodecs vlen-utf8 */
    ZK_VLEN_BYTES,   /* numcodecs vlen-bytes */
    ZK_FIXED_UTF32,  /* numpy <U{n}: n UTF-32 code units */
    ZK_FIXED_BYTES,  /* numpy |S{n}: n bytes, NUL-padded */
    ZK_RECORDS       /* a v2 structured dtype: records of fixed-size fields */
} zarr_kind;

/* Fields of a structured dtype (anndata's rec-arrays in zarr v2) beyond
 * which the dtype is not read. */
#define ZARR_MAX_FIELDS 4096

/* One field of a record: its bytes at offset within each record. */
typedef struct zarr_field {
    char *name;
    size_t offset, itemsize;
    zarr_kind kind;       /* ZK_NUMERIC, ZK_FIXED_UTF32 or ZK_FIXED_BYTES */
    dtype_kind dtype;     /* DT_NONE: listed, not readable (subarrays, nesting) */
    int big_endian;
} zarr_field;

/* The array -> bytes step of a codec chain. */
typedef enum zarr_a2b { ZA_BYTES = 1, ZA_VLEN, ZA_SHARD } zarr_a2b;

/* A decoding pipeline for one chunk (or one inner chunk of a shard). */
typedef struct zarr_chain {
    int has_perm;                   /* transpose / F order */
    int perm[NODE_MAX_DIMS];        /* composed permutation, encoding direction */
    zarr_a2b a2b;
    int big_endian;                 /* ZA_BYTES: stored byte order */
    int nb2b;
    codec_id b2b[ZARR_MAX_CODECS];  /* bytes -> bytes, in encoding order */
} zarr_chain;

typedef struct zarr_array {
    int ndim;
    int64_t shape[NODE_MAX_DIMS];
    int64_t chunk[NODE_MAX_DIMS];   /* chunk grid: the shard shape when sharded */
    dtype_kind dtype;               /* DT_NONE when the dtype is not supported */
    zarr_kind kind;
    size_t itemsize;                /* stored bytes per item; 0 for vlen */
    int v2_keys;                    /* keys "1.2" (v2 and v3 "v2" encoding), else "c/1/2" */
    char sep;                       /* '.' or '/' */
    uint8_t fill[8];                /* numeric fill value, native order */
    char *fill_str;                 /* string fill value (UTF-8), malloc'd */
    zarr_chain chain;               /* outer chain */
    int sharded;
    int64_t inner[NODE_MAX_DIMS];   /* inner chunk shape */
    zarr_chain inner_chain;
    int index_at_start, index_big_endian, index_crc;
    char *unsupported;              /* why reads fail, malloc'd; NULL when readable */
    zarr_field *fields;             /* ZK_RECORDS: the fields, malloc'd */
    int n_fields;
    /* Chunk cache identity (chunk_cache_new_id): the store version and the
     * array; 0 when the array is not of an opened store (no caching). */
    uint64_t cache_store, cache_array;
} zarr_array;

/* Parse the metadata of one array: v2 `.zarray` contents or a v3 array
 * `zarr.json` document.  `what` names the node in error details.  A
 * structurally broken document fails with CELLAR_EFORMAT; an unsupported
 * dtype or codec still succeeds but sets out->unsupported (and dtype
 * DT_NONE for dtypes).  On success the caller frees with zarr_array_clear. */
int zarr_array_parse_v2(const json_t *zarray, zarr_array *out, const char *what,
                        cellar_error *err);
int zarr_array_parse_v3(const json_t *doc, zarr_array *out, const char *what,
                        cellar_error *err);
void zarr_array_clear(zarr_array *a);

/* Parses JSON text from disk.  Accepts Python's bare NaN / Infinity /
 * -Infinity tokens (read as null), which json.dumps writes into attributes.
 * *out is a new reference. */
int zarr_json_parse(const char *text, size_t len, json_t **out, const char *what,
                    cellar_error *err);

/* The directory of one store version, and what its reads saw of changes.
 *
 * Every file of the version is opened beneath the directory descriptor
 * taken when the version opened, so a store directory replaced by another
 * (renamed over, a symlink retargeted) is not read half from each: the old
 * version reads on in its own directory.  A store rewritten in place is
 * noticed by ctime, which every write, truncate, rename and link sets and
 * no user can set back: a file read (before and after its bytes are read),
 * a chunk found missing (its nearest existing directory) or a directory
 * listed whose ctime is at or after `born` was changed after the version
 * opened, and `changed` keeps the newest such ctime.  So does a ctime up
 * to ZARR_SETTLE_NS before `born`: a version opened while a writer was
 * still going (files rewritten one by one, a store deleted and written
 * again) holds part of each store, so it is not trusted until the store
 * has been quiet that long.  The registry then
 * serves a new version, and an answer made while it changed is made again
 * (server/http.c run_handler).  It costs one fstat per file read: in an
 * A/B run against the build before it (bench.zarr at BENCH_SCALE=1, caches
 * off, 100-row obs and X slices, 3 rounds of 5 s) within noise (1.02x and
 * 1.14x the requests/s). */
typedef struct zarr_dir {
    zarr_source src;          /* the directory as a key source (zarr_dir_open sets it) */
    int fd;                   /* O_PATH on the directory; -1: every file missing */
    char *path;               /* its path when opened (the openat2 fallback) */
    struct timespec born;     /* CLOCK_REALTIME_COARSE just before it opened */
    _Atomic int64_t changed;  /* ns since the epoch; 0 while nothing changed */
    /* Until when (ns since the epoch) answers that read a chunk as missing
     * are not trusted: its directory changed less than
     * ZARR_MISSING_SETTLE_NS before (a writer may be about to put it down).
     * The version stays (no change was seen); the answer is made again. */
    _Atomic int64_t unsettled_until;
} zarr_dir;

/* Opens dir as the directory of a new version, d->src its key source
 * (whose destroy is not for a zarr_dir of the caller's: close it with
 * zarr_dir_close).  A directory that cannot be opened leaves d->fd = -1
 * (every key missing) and returns the errno. */
int zarr_dir_open(zarr_dir *d, const char *path);
void zarr_dir_close(zarr_dir *d);

/* A new zarr_dir on the heap opened on path, as a key source whose destroy
 * closes and frees it.  0, or the errno (*out NULL). */
int zarr_dir_source_new(const char *path, zarr_dir **out);

/* Opens the file at the store-relative path rel beneath d for reading
 * without leaving the store (zarr_open_file_at in storage/zarr/zarr.h:
 * symlinks followed only while they stay inside, never blocking, regular
 * files only), noting a change in the file (or, when it is missing, in
 * its nearest existing directory).  0 with *fd >= 0 and *size; 0 with
 * *fd = -1 when there is no such file (or d has no directory);
 * CELLAR_EFORMAT when it is not a regular file, leads outside the store,
 * loops or cannot be opened; CELLAR_EIO when the system is out of
 * descriptors or memory. */
int zarr_dir_open_file(zarr_dir *d, const char *rel, int *fd, uint64_t *size,
                       cellar_error *err);

/* Notes a change seen in a file or directory of d after reading it. */
void zarr_dir_note_fd(zarr_dir *d, int fd);

/* Opens the directory rel ("" for the store's own) beneath d for listing,
 * or NULL with errno. */
DIR *zarr_dir_list(zarr_dir *d, const char *rel);

/* The bytes of every regular file below d (symlinks not followed), or -1
 * when the walk would pass max_entries entries or max_seconds. */
int zarr_dir_bytes(zarr_dir *d, uint64_t max_entries, double max_seconds, uint64_t *bytes);

/* Reads a selection of the array stored under directory `rel` of the store
 * version's key source src: numeric into out (out_bytes as node_read), strings
 * into sout from a (as node_read_strings; out NULL); the records of a
 * ZK_RECORDS array as their stored bytes into out (itemsize each; a
 * missing chunk gives zeros).  `what` is the node path for details. */
int zarr_array_read(const zarr_array *za, zarr_source *src, const char *rel, const char *what,
                    const dim_sel *sel, void *out, size_t out_bytes, arena *a, char **sout,
                    cellar_error *err);

/* The ranges a shard index describes (exposed for the fuzz target): decodes
 * the index bytes `src` of a shard with the array's index layout. */
int zarr_shard_index_read(const zarr_array *za, const uint8_t *src, size_t n,
                          uint64_t shard_size, uint64_t **pairs, uint64_t *nchunks,
                          cellar_error *err);

#endif
