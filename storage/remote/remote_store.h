/* Remote stores: what the registry serves from S3 (--root s3://bucket/prefix)
 * and from plain HTTP servers that honour Range (--remote NAME=URL).
 *
 * An S3 root's stores are named by their keys below the prefix, as a
 * local root's by their paths: s3://b/p holding p/atlas/liver.zarr/... and
 * p/pbmc.h5ad serves atlas/liver.zarr and pbmc.h5ad.  A mount names one
 * store (NAME must end in a store suffix) at an http(s):// URL, or an
 * s3:// one.
 *
 * A store's identity (store version) comes from the remote: for a zarr
 * store on S3, the listing of its prefix (every object's key, size, ETag
 * and Last-Modified, one ListObjectsV2 per 1000 keys); for a zarr store
 * over plain HTTP, HEADs of its root metadata documents; for a file
 * store (HDF5, zip), a HEAD of the object.  It is fetched again at most
 * every recheck_seconds (--remote-recheck-seconds); a changed identity is
 * a new store version, as a changed file is locally.  Reads of a version
 * send If-Match with the ETag the version knows, so an object replaced
 * under a version is noticed (412) rather than mixed in: the version
 * reports the change and the answer is made again from a new version.
 *
 * Thread-safe. */
#ifndef CELLAR_REMOTE_STORE_H
#define CELLAR_REMOTE_STORE_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "common/error.h"
#include "storage/remote/remote_cache.h"
#include "storage/remote/remote_http.h"
#include "storage/zarr/zarr_source.h"

typedef struct remote_roots remote_roots;

typedef struct remote_roots_config {
    remote_client_config client;
    const char *s3_endpoint;  /* http(s)://host[:port]; NULL: https://s3.REGION.amazonaws.com */
    int path_style;           /* 1: ENDPOINT/BUCKET/KEY, 0: BUCKET.HOST/KEY, -1: path style
                               * with an endpoint, virtual hosts without */
    double recheck_seconds;   /* identities kept this long before they are fetched again */
    size_t cache_bytes;       /* the remote byte cache's bound */
} remote_roots_config;

/* No roots or mounts yet.  NULL + err on failure. */
remote_roots *remote_roots_new(const remote_roots_config *cfg, cellar_error *err);
void remote_roots_free(remote_roots *r);

/* Adds an S3 root, "s3://bucket" or "s3://bucket/prefix".  CELLAR_EINVAL
 * for a malformed URL. */
int remote_roots_add_s3(remote_roots *r, const char *url, cellar_error *err);

/* Adds a mount "NAME=URL" (URL http://, https:// or s3://).  CELLAR_EINVAL
 * when NAME is not a plain store name or the URL is malformed. */
int remote_roots_add_mount(remote_roots *r, const char *spec, cellar_error *err);

/* Whether any root or mount was added. */
int remote_roots_any(const remote_roots *r);

/* Whether name is a mount's (served remotely before any local store). */
int remote_roots_is_mount(const remote_roots *r, const char *name);

/* Whether name could be a store of an S3 root (there are roots). */
int remote_roots_has_s3(const remote_roots *r);

/* A remote store version's identity. */
typedef struct remote_identity {
    uint64_t size;   /* the object's bytes; a zarr store's listed bytes or root documents' */
    time_t mtime;    /* the newest Last-Modified */
    uint64_t tag;    /* a hash of the ETags (and keys) it covers */
    char url[512];   /* where the store is, without query (for store_path) */
} remote_identity;

/* The current identity of remote store name (zarr: a directory store,
 * i.e. a name not ending in .zip; else one object), from what was fetched
 * within recheck_seconds unless force.  CELLAR_ENOTFOUND when no root or
 * mount has it, CELLAR_EUPSTREAM / CELLAR_ETIMEOUT when the remote
 * failed. */
int remote_roots_identity(remote_roots *r, const char *name, int zarr_dir, int force,
                          remote_identity *id, cellar_error *err);

/* Whether the identity fetched last for name (without fetching) is still
 * tag. */
int remote_roots_still(remote_roots *r, const char *name, uint64_t tag);

/* A key source over the zarr directory store name, of the identity
 * remote_roots_identity gave last (its listing, for S3).  The caller owns
 * it (hand it to zarr_open_source). */
int remote_roots_open_zarr(remote_roots *r, const char *name, zarr_source **out,
                           cellar_error *err);

/* Whether a version's key source (of remote_roots_open_zarr) still reads
 * the store it opened: over plain HTTP there is no listing to tie each
 * key to the version, so after a read that fetched keys the root
 * documents are fetched again (a store swapped on the web server while
 * an answer was made is noticed, and the answer made again); 1 for any
 * other source. */
int remote_source_unchanged(remote_roots *r, zarr_source *src);

/* A zarr store on S3 whose newest object is younger than this (seconds)
 * is not trusted yet: it may still be being written object by object. */
#define REMOTE_SETTLE_S 2

/* Reads of one remote object (an HDF5 file, a zip) of a store version:
 * ranged GETs with If-Match of the version's ETag, through the byte cache.
 * Thread-safe; the caller owns it. */
typedef struct remote_object remote_object;
int remote_roots_open_object(remote_roots *r, const char *name, remote_object **out,
                             cellar_error *err);
uint64_t remote_object_size(const remote_object *o);
/* Reads [off, off + n) (within the size).  CELLAR_EUNAVAILABLE when the
 * object changed under the version (then remote_object_changed is set). */
int remote_object_read(remote_object *o, uint64_t off, size_t n, void *buf, cellar_error *err);
int64_t remote_object_changed(const remote_object *o);
void remote_object_free(remote_object *o);

/* One store of the remote roots' listing. */
typedef struct remote_listed {
    char *name;      /* malloc'd */
    uint64_t size;
    time_t mtime;
} remote_listed;

/* Every store of every root and mount (S3 roots listed, mounts HEADed),
 * sorted by name; *out malloc'd (free each name, then it).  A root that
 * cannot be listed fails the call (CELLAR_EUPSTREAM / ETIMEOUT). */
int remote_roots_list(remote_roots *r, int (*is_store)(const char *name, size_t len),
                      remote_listed **out, size_t *count, cellar_error *err);

/* Whether every S3 root can be listed now (for /readyz); the answer is
 * kept for a second.  0 when ready, else the reason in why. */
int remote_roots_ready(remote_roots *r, char *why, size_t size);

/* Reads aws_access_key_id, aws_secret_access_key and aws_session_token of
 * [profile] from an AWS shared credentials file into the buffers (each
 * "" when absent).  0; CELLAR_ENOTFOUND when the file is not there;
 * CELLAR_EINVAL when a line is malformed or a value too long. */
int remote_credentials_read(const char *path, const char *profile, char *key, char *secret,
                            char *token, size_t size, cellar_error *err);

/* The byte cache and the client, for /metrics. */
remote_cache *remote_roots_cache(remote_roots *r);
remote_client *remote_roots_client(remote_roots *r);

#endif
