/* The store registry: store name -> open store version.
 *
 * Stores are discovered under the data root on demand and opened on their
 * first request.  Each open store is one *version*: the file's identity
 * (device, inode, size, mtime) at open, its node tree and everything derived
 * from it.  A request holds a reference on one version for its whole life;
 * when the file changes on disk the next registry_get opens a new version and
 * the old one is freed when its last reference goes.
 *
 * Thread-safe: every function may be called from any request thread. */
#ifndef CELLAR_REGISTRY_H
#define CELLAR_REGISTRY_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "common/arena.h"
#include "common/error.h"
#include "storage/kind.h"
#include "storage/node.h"
#include "storage/probe_cache.h"
#include "storage/remote/remote_store.h"

typedef struct registry registry;
typedef struct store store;

typedef enum store_backend { BACKEND_HDF5 = 1, BACKEND_ZARR } store_backend;

const char *store_backend_name(store_backend b);

typedef struct registry_config {
    const char *root;          /* data root directory; NULL: only remote stores */
    size_t max_open_stores;    /* LRU bound on open versions kept without references */
    /* Bound on what open versions hold derived (tree indexes, views,
     * tables: registry_cache_bytes): past it, versions nobody holds are
     * closed, least recently used first; 0: no bound. */
    size_t max_open_bytes;
    double idle_seconds;       /* close a store unused this long */
    /* Verdicts of the probe process that walks every HDF5 file version
     * before it is opened here (storage/probe_cache.h); borrowed, must
     * outlive the registry.  NULL: files are opened without a probe
     * (unit tests). */
    probe_cache *probes;
    /* Remote stores (storage/remote/remote_store.h): mounts are served
     * before local stores of the same name, S3 roots' stores after them.
     * Borrowed, must outlive the registry; NULL: none. */
    remote_roots *remote;
    /* External links of an HDF5 store are followed to files anywhere in
     * the root, not only inside the store's own folder
     * (storage/ext_targets.h). */
    int external_links_in_root;
} registry_config;

/* Creates a registry over cfg->root (copied). NULL + err on failure
 * (root missing or not a directory: CELLAR_ENOTFOUND). */
registry *registry_new(const registry_config *cfg, cellar_error *err);

/* Frees the registry; stores still referenced are freed by their last
 * store_release. */
void registry_free(registry *r);

/* Takes a reference on the current version of store `name` (relative to the
 * root), opening or reopening it when needed.  Errors: CELLAR_ENOTFOUND for
 * names that do not resolve to a store file inside the root (traversal
 * attempts included), CELLAR_EFORMAT for a file that is not readable as its
 * format or that its probe found unsafe, CELLAR_EUNAVAILABLE when the file
 * keeps changing or could not be probed now. */
int registry_get(registry *r, const char *name, store **out, cellar_error *err);

/* registry_get that also opens a local file whose name ends in .hdf5, .nxs,
 * .nx or .he5 (no store suffix: the h5grove routes serve any HDF5 file
 * under the root), as an HDF5 store of unknown kind, probed first like
 * every HDF5 version.  Such names are never remote, and the store routes
 * and the store list never see them. */
int registry_get_hdf5(registry *r, const char *name, store **out, cellar_error *err);

/* Fills err with the CELLAR_ENOTFOUND of a store named name that is not
 * there, the one registry_get gives, and returns it: a caller refusing a
 * store that is there answers the same. */
int registry_fail_unknown(cellar_error *err, const char *name);

/* Drops a reference taken by registry_get or store_ref. NULL is fine. */
void store_release(store *s);

/* Takes another reference on a version the caller already holds one on
 * (e.g. for background work that outlives the request); returns s.  Drop
 * it with store_release. */
store *store_ref(store *s);

/* Splits a path like "atlas/liver.zarr/mod/rna/obs" into the store name
 * ("atlas/liver.zarr") and the rest ("mod/rna/obs"), at the first segment
 * that ends with a store suffix.  Returns 0, or CELLAR_ENOTFOUND when no
 * segment has a store suffix. Both outputs are allocated from a. */
int registry_split_name(const char *path, arena *a, const char **name, const char **rest);

/* One entry of the root listing. */
typedef struct store_listing {
    const char *name;
    store_kind kind;
    store_backend backend;
    uint64_t bytes;      /* the file's, or a zarr store's files' total */
    int bytes_known;     /* 0: too large to add up in bounded time (null) */
    struct timespec mtime;
} store_listing;

/* Lists every store under the root (recursively, not following symlinks
 * that leave the root), sorted by name. Memory from a. */
int registry_list(registry *r, arena *a, store_listing **out, size_t *count,
                  cellar_error *err);

/* Closes every version no request holds (SIGHUP); later requests reopen. */
void registry_drop_all(registry *r);

/* Closes versions unused for idle_seconds (called by the server's timer). */
void registry_evict_idle(registry *r);

/* Number of store versions open (for /metrics). */
size_t registry_open_count(registry *r);

/* The probe verdicts of cfg->probes (for /metrics), NULL when none. */
probe_cache *registry_probes(registry *r);

/* Whether the data root is readable (for /readyz). */
int registry_root_ok(registry *r);

/* The remote roots of the configuration (for /metrics), or NULL. */
remote_roots *registry_remote(registry *r);

/* Whether every S3 root can be listed (for /readyz): 0, else the reason
 * in why. */
int registry_remote_ready(registry *r, char *why, size_t size);

/* ---- one store version ---- */

const char *store_name(const store *s);
/* The store's canonical path on disk (realpath, inside the root; for zarr the
 * directory), or a remote store's URL. Borrowed, valid while the version is
 * referenced. */
const char *store_path(const store *s);
store_kind store_get_kind(const store *s);
store_backend store_get_backend(const store *s);
node *store_root(store *s);
uint64_t store_bytes(const store *s);

/* What the store version holds on disk: the file's size, or for a zarr
 * store every file below its directory added up once per version
 * (bounded: -1 with *out unknown when the store is too large to walk). */
int store_total_bytes(store *s, uint64_t *out);

/* Whether the file on disk still has this version's identity.  Reads are
 * lazy, so a file rewritten in place while a request read it may have given
 * bytes of the new contents: the server checks this after answering and
 * answers again from the new version when it fails. */
int store_unchanged(const store *s);

/* Notes that an answer made from this version is going out (its ETag with
 * it): a rewrite the version notices later then gives the next version a
 * new ETag (a rewrite mark). */
void store_answered(store *s);

/* How long to wait before a new version of a store that changed under this
 * one may be trusted (a zarr store rewritten file by file must be quiet a
 * moment first), in seconds; 0 when it may be opened at once. */
double store_settle_seconds(const store *s);
struct timespec store_mtime(const store *s);

/* Strong validator of this version, quoted, from what the data is (a hash
 * of the name, size, mtime; see store_name_etag): the same in every replica
 * that holds the same files, e.g. "\"5d41402abc4b2a76-51200-674e1a30.000000123\"". */
const char *store_etag(const store *s);

/* This process's own name for this version, unquoted: the ETag's fields
 * and the file's device and inode, so that a file replaced by another of
 * the same name, size and mtime is never taken for the old one by what
 * this process keys on the version (the answer cache, --cache-dir files).
 * Not for HTTP: it differs between replicas. */
const char *store_cache_tag(const store *s);

/* Derived structures of one store version (name indexes, maps, tree and
 * column indexes): built once by the first caller under `key`, concurrent
 * callers for the same key wait for that build, then everyone shares the
 * immutable value until the version is freed (free_fn is called then).
 * A failed build is not cached: the next caller tries again. */
typedef int (*derived_build_fn)(void *ctx, void **value, size_t *bytes, cellar_error *err);
typedef void (*derived_free_fn)(void *value);

int store_derived(store *s, const char *key, derived_build_fn build, void *ctx,
                  derived_free_fn free_fn, void **value, cellar_error *err);

/* Total bytes of derived structures held by open versions (for /metrics). */
size_t registry_cache_bytes(registry *r);

#endif
