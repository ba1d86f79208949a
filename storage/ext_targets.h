/* The other files an HDF5 store version reaches (DESIGN.md, "Trust"):
 * the targets of its external links, the files of its external raw
 * storage (H5Pset_external) and the source files of its virtual datasets,
 * as the probe of each file reported their names (storage/probe_cache.h).
 *
 * cellar decides each one before libhdf5 may open it: the name is
 * resolved as libhdf5 1.10 resolves it (storage/hdf5/h5.c sets the prefixes
 * so that it does: relative names against the directory of the file that
 * names them, an absolute name that is missing by its last component
 * there; the HDF5_*_PREFIX variables are unset at startup), and the file
 * found must be a regular file whose real path is inside the data root
 * (an external link's: inside the store's own folder, unless
 * links_in_root).  HDF5 files libhdf5 will parse (link targets, virtual
 * sources) must also pass the probe; the caller runs it
 * (ext_targets_next_unprobed) with no lock held.  Raw storage files are
 * bytes libhdf5 only reads, within the dataset's declared extent.
 *
 * A table belongs to one store version: it records the identity of the
 * file each name resolved to, so that a changed target makes a new
 * version (ext_targets_changed).  Immutable once built, read by many
 * threads without locks. */
#ifndef CELLAR_EXT_TARGETS_H
#define CELLAR_EXT_TARGETS_H

#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "storage/probe_cache.h"

/* What names the file: one letter, as the probe reports it. */
enum {
    EXT_LINK = 'l',    /* an external link's target file */
    EXT_RAW = 'r',     /* a file of external raw storage */
    EXT_VIRTUAL = 'v', /* a virtual dataset's source file ("." is the file itself) */
};

typedef struct ext_target {
    char kind;
    char *base;       /* the directory libhdf5 resolves the name against */
    char *name;       /* as stored in the file */
    char *path;       /* where libhdf5 opens it (base/name, or name), NULL when refused */
    char *why;        /* why not followed (NULL when followed) */
    int exists;       /* path existed when the version opened */
    probe_file_id id; /* its identity then */
    int probed;       /* link and virtual targets: the probe has passed it */
    int names_files;  /* its probe reported names of other files */
    int depth;        /* 0: named by the store file itself */
} ext_target;

typedef struct ext_targets ext_targets;

/* An empty table for the store file at store_path (a real path) under the
 * data root root (a real path).  NULL when out of memory. */
ext_targets *ext_targets_new(const char *root, const char *store_path, int links_in_root);

void ext_targets_free(ext_targets *t);

/* Adds the names the probe reported for the file libhdf5 opens as
 * opened_as (refs: lines "K NAME" with NAME percent-escaped, as
 * probe_cache_targets gives them), each resolved and checked at once.
 * depth: how many files away from the store file that file is; names
 * past the depth and count bounds are refused.  0, or CELLAR_ENOMEM. */
int ext_targets_add(ext_targets *t, const char *opened_as, const char *refs, int depth);

/* The next target that resolved to a file libhdf5 will parse and that
 * has not been probed yet, or NULL.  The caller probes ->path and calls
 * ext_targets_probed. */
ext_target *ext_targets_next_unprobed(ext_targets *t);

/* Records the probe's answer for e: rc 0 (refs: the names its probe
 * reported, or NULL), else the refusal's detail. */
int ext_targets_probed(ext_targets *t, ext_target *e, int rc, const char *detail,
                       const char *refs);

/* The entry for name of the given kind, named by the file whose
 * directory (as libhdf5 resolves names against it) is base; NULL when
 * the probe did not report it. */
const ext_target *ext_targets_find(const ext_targets *t, const char *base, char kind,
                                   const char *name);

/* Whether e's file is still the one the version resolved (same identity,
 * or still missing). */
int ext_target_unchanged(const ext_target *e);

/* Whether any target changed since the table was made; *at then holds
 * the change's time (ns since the epoch, its ctime, or now when it went). */
int ext_targets_changed(const ext_targets *t, int64_t *at);

/* Whether old follows a file that now follows too (same device and
 * inode) but in another version (size, mtime or ctime differ): libhdf5
 * shares open files by device and inode, so while old's tree is alive a
 * tree over now would get old's cached view of that file. */
int ext_targets_stale_for(const ext_targets *old, const ext_targets *now);

/* A hash of what the targets are (names, sizes, mtimes): part of the
 * version's ETag, so it differs when a target does. 0 for an empty table. */
uint64_t ext_targets_hash(const ext_targets *t);

/* The directory part of path as libhdf5 keeps it for resolving names
 * (everything before the last '/'), in out; 0, or -1 when it does not fit. */
int ext_targets_dir_of(const char *path, char *out, size_t size);

#endif
