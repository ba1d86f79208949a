/* Inside storage/remote/: what remote_store.c (roots, identities) and
 * remote_zarr.c (key sources, object reads) share.  Not for use outside
 * storage/remote/ and tests. */
#ifndef CELLAR_REMOTE_STORE_IMPL_H
#define CELLAR_REMOTE_STORE_IMPL_H

#include <stdint.h>

#include "storage/remote/remote_store.h"
#include "storage/remote/s3_list.h"

/* Where a store is: an S3 object or prefix (bucket and key), or a plain
 * HTTP URL.  url is the object's (or the zarr store directory's) URL,
 * percent-encoded, without a trailing '/'. */
typedef struct remote_loc {
    int s3;
    char bucket[64];
    char key[S3_KEY_MAX];
    char url[2048];
} remote_loc;

/* A listing shared by the identity cache and the versions that read it. */
typedef struct remote_listing {
    _Atomic int refs;
    s3_listing l;
} remote_listing;

remote_listing *remote_listing_ref(remote_listing *l);
void remote_listing_release(remote_listing *l);

/* What the identity fetched last for a name holds, for opening a version
 * of it (the listing with a reference the taker releases). */
typedef struct remote_taken {
    remote_loc loc;
    remote_listing *listing;
    char etag[160];
    uint64_t size;
    uint64_t tag;
} remote_taken;

int remote_roots_take(remote_roots *r, const char *name, remote_taken *t);

/* The location of key in bucket (url built for the roots' endpoint). */
int remote_loc_s3(const remote_roots *r, const char *bucket, const char *key, remote_loc *l);

/* Lists the keys below prefix in bucket (every page; max_keys > 0: one
 * page of at most that many), sorted.  CELLAR_ENOTFOUND for no bucket. */
int remote_s3_list(remote_roots *r, const char *bucket, const char *prefix, int max_keys,
                   s3_listing *out, cellar_error *err);

#endif
