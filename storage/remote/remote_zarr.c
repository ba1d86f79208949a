/* A remote zarr store as a key source of the zarr backend, and reads of
 * one remote object (storage/remote/remote_store.h). */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "storage/remote/remote_store_impl.h"
#include "storage/remote/remote_store.h"

/* A key of a plain HTTP store is first fetched as its first bytes (one GET
 * that tells the size too); most keys (metadata, chunks) fit. */
#define HTTP_PREFIX_BYTES ((size_t)1 << 20)
/* Largest single ranged GET. */
#define RANGE_MAX_BYTES ((size_t)256 << 20)
/* Remote objects (HDF5 files, zips) are read and cached in aligned blocks
 * of this size, so the many small reads of their metadata cost a few
 * GETs, and a read's missing blocks are fetched in one. */
#define OBJECT_BLOCK ((uint64_t)256 << 10)

typedef struct rzarr {
    zarr_source base;
    remote_client *client;
    remote_cache *cache;
    remote_loc loc;
    remote_listing *listing; /* S3: the version's listing; NULL over plain HTTP */
    char version[32];        /* the version's tag, for cache ids without an ETag */
    uint64_t tag;
    char name[1025];
    _Atomic int64_t changed;
    /* Plain HTTP, where no listing ties a key to the version: fetch_seq
     * counts the keys fetched (and the cached ones this source has not
     * vouched for), verified_seq the count a check of the root documents
     * begun after them found unchanged (remote_source_unchanged). */
    uint64_t serial; /* this source among every one opened */
    _Atomic uint64_t fetch_seq, verified_seq;
} rzarr;

/* Plain HTTP: what the first GET of a key told, kept in the byte cache
 * under the version (beside its first bytes), with the source and the
 * fetch that read it. */
typedef struct http_head {
    uint64_t serial, seq;
    uint64_t size;
    int64_t mtime;
    uint32_t found, prefix_len;
    char etag[160];
} http_head;

static _Atomic uint64_t next_serial = 1;

/* One opened key. */
typedef struct rkey {
    char url[2600];
    char etag[160];
    uint8_t *prefix; /* plain HTTP: the first bytes fetched by open_key */
    size_t prefix_len;
} rkey;

static int64_t realtime_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void note_changed(_Atomic int64_t *changed)
{
    int64_t now = realtime_ns(), was = atomic_load(changed);
    while (now > was && !atomic_compare_exchange_weak(changed, &was, now))
        ;
}

/* The cache id of an object: its URL with its ETag, or with the store
 * version that read it when the server gives none. */
static void cache_id(const char *url, const char *etag, const char *version, char *out,
                     size_t size)
{
    snprintf(out, size, "%s\n%s", url, etag[0] ? etag : version);
}

/* One ranged GET of [off, off + n) of url (If-Match etag) into buf,
 * through the cache.  CELLAR_EUNAVAILABLE (and *changed) when the object
 * is no longer the one the version knows. */
static int ranged_read(remote_client *client, remote_cache *cache, const char *url, int sign,
                       const char *etag, const char *version, uint64_t size, uint64_t off,
                       size_t n, void *buf, _Atomic int64_t *changed, const char *what,
                       cellar_error *err)
{
    if (!n)
        return 0;
    char id[2900];
    cache_id(url, etag, version, id, sizeof id);
    if (remote_cache_get(cache, id, off, n, buf) ||
        (size <= RANGE_MAX_BYTES &&
         remote_cache_get_within(cache, id, 0, (size_t)size, off, n, buf)))
        return 0;
    if (n > RANGE_MAX_BYTES)
        return cellar_fail(err, CELLAR_EFORMAT, "%s: a read of %zu bytes is over the limit", what,
                           n);
    remote_request q = {.url = url, .sign = sign, .ranged = 1, .off = off, .len = n,
                        .if_match = etag[0] ? etag : NULL, .max_bytes = n};
    remote_response resp = {0};
    int rc = remote_fetch(client, &q, &resp, err);
    char where[600];
    remote_url_for_humans(url, where, sizeof where);
    if (!rc && (resp.status == 412 || resp.status == 404)) {
        note_changed(changed);
        rc = cellar_fail(err, CELLAR_EUNAVAILABLE, "%s: remote %s changed while being read; retry",
                         what, where);
    } else if (!rc && resp.status != 206 && !(resp.status == 200 && off == 0 && resp.len == n)) {
        rc = remote_fail_status(err, &resp, where);
    } else if (!rc && resp.len != n) {
        rc = cellar_fail(err, CELLAR_EFORMAT, "%s: remote %s is shorter than it said", what,
                         where);
    }
    if (!rc) {
        memcpy(buf, resp.body, n);
        remote_cache_put(cache, id, off, resp.body, n);
    }
    remote_response_clear(&resp);
    return rc;
}

/* ---- the key source ---- */

/* A listing whose newest object was written less than REMOTE_SETTLE_S
 * ago may have been taken while a writer was still putting the store's
 * objects one by one: the version reports a change that settles then
 * (zarr_settled_at adds ZARR_SETTLE_NS), so its answers are made again
 * from a later listing.  Last-Modified has whole seconds; one far in the
 * future (clock skew) is not waited for. */
static int64_t unsettled_since(const remote_listing *l)
{
    if (!l)
        return 0;
    time_t newest = 0;
    for (size_t i = 0; i < l->l.n; i++)
        if (l->l.objs[i].mtime > newest)
            newest = l->l.objs[i].mtime;
    int64_t now = realtime_ns();
    int64_t quiet_at = ((int64_t)newest + REMOTE_SETTLE_S) * 1000000000;
    if (!newest || quiet_at <= now || quiet_at > now + (int64_t)60 * 1000000000)
        return 0;
    return quiet_at - ZARR_SETTLE_NS;
}

static int key_url(const rzarr *z, const char *rel, char *out, size_t size)
{
    int n = snprintf(out, size, "%s/", z->loc.url);
    if (n < 0 || (size_t)n >= size)
        return -1;
    return s3_encode(rel, 1, out, size);
}

static void http_ids(const rzarr *z, const char *url, char *head, char *prefix, size_t size)
{
    snprintf(head, size, "%s\n%s\nhead", url, z->version);
    snprintf(prefix, size, "%s\n%s\nprefix", url, z->version);
}

/* Takes what h (found in the cache) tells of the key.  A record another
 * source, or a fetch no check has vouched for yet, read counts as a fetch
 * of this source (the answer is checked against the root documents) and
 * is kept as this source's.  0, or -1 when the first bytes are gone. */
static int http_take_cached(rzarr *z, http_head *h, const char *hid, const char *pid,
                            rkey *rk, zarr_key *k)
{
    uint8_t *p = NULL;
    if (h->prefix_len > HTTP_PREFIX_BYTES || h->prefix_len > h->size)
        return -1;
    if (h->prefix_len && (!(p = malloc(h->prefix_len)) ||
                          !remote_cache_get(z->cache, pid, 0, h->prefix_len, p))) {
        free(p);
        return -1;
    }
    if (h->serial != z->serial || h->seq > atomic_load(&z->verified_seq)) {
        h->serial = z->serial;
        h->seq = atomic_fetch_add(&z->fetch_seq, 1) + 1;
        remote_cache_put(z->cache, hid, 0, h, sizeof *h);
    }
    k->found = (int)h->found;
    k->size = h->size;
    k->mtime = (struct timespec){(time_t)h->mtime, 0};
    snprintf(rk->etag, sizeof rk->etag, "%s", h->etag);
    rk->prefix = p;
    rk->prefix_len = h->prefix_len;
    return 0;
}

/* Keeps what the first GET of a key told (resp: its first bytes). */
static void http_keep(rzarr *z, const char *hid, const char *pid, const zarr_key *k,
                      const remote_response *resp)
{
    http_head h = {.serial = z->serial, .seq = atomic_fetch_add(&z->fetch_seq, 1) + 1,
                   .size = k->size, .mtime = (int64_t)k->mtime.tv_sec, .found = (uint32_t)k->found,
                   .prefix_len = k->found ? (uint32_t)resp->len : 0};
    snprintf(h.etag, sizeof h.etag, "%s", resp->etag);
    if (h.prefix_len)
        remote_cache_put(z->cache, pid, 0, resp->body, h.prefix_len);
    remote_cache_put(z->cache, hid, 0, &h, sizeof h);
}

/* Plain HTTP: the key's first bytes, which tell its size and ETag; kept
 * in the byte cache for the version, so a warm request sends nothing. */
static int http_open(rzarr *z, rkey *rk, zarr_key *k, cellar_error *err)
{
    char hid[2900], pid[2900];
    http_ids(z, rk->url, hid, pid, sizeof hid);
    http_head h;
    if (remote_cache_get(z->cache, hid, 0, sizeof h, &h) &&
        http_take_cached(z, &h, hid, pid, rk, k) == 0)
        return 0;
    remote_request q = {.url = rk->url, .sign = z->loc.s3, .ranged = 1, .off = 0,
                        .len = HTTP_PREFIX_BYTES, .max_bytes = HTTP_PREFIX_BYTES};
    remote_response resp = {0};
    int rc = remote_fetch(z->client, &q, &resp, err);
    char where[600];
    remote_url_for_humans(rk->url, where, sizeof where);
    if (rc)
        return rc;
    if (resp.status == 404 || resp.status == 410) {
        http_keep(z, hid, pid, k, &resp);
        remote_response_clear(&resp);
        return 0;
    }
    if (resp.status == 416 && resp.has_total && resp.total == 0) {
        k->found = 1;
        k->size = 0;
    } else if (resp.status == 206 && resp.has_total && resp.total >= resp.len) {
        k->found = 1;
        k->size = resp.total;
    } else if (resp.status == 200) {
        k->found = 1;
        k->size = resp.len;
    } else {
        rc = remote_fail_status(err, &resp, where);
        remote_response_clear(&resp);
        return rc;
    }
    snprintf(rk->etag, sizeof rk->etag, "%s", resp.etag);
    k->mtime = (struct timespec){resp.mtime, 0};
    http_keep(z, hid, pid, k, &resp);
    rk->prefix = resp.body;
    rk->prefix_len = resp.len;
    resp.body = NULL;
    remote_response_clear(&resp);
    return 0;
}

static int rz_open_key(zarr_source *s, const char *rel, zarr_key *k, cellar_error *err)
{
    rzarr *z = (rzarr *)s;
    memset(k, 0, sizeof *k);
    k->fd = -1;
    rkey *rk = calloc(1, sizeof *rk);
    if (!rk)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory opening a remote key");
    k->priv = rk;
    if (key_url(z, rel, rk->url, sizeof rk->url) != 0)
        return 0; /* too long to be a key of ours */
    if (!z->listing)
        return http_open(z, rk, k, err);
    char full[S3_KEY_MAX + 1100];
    snprintf(full, sizeof full, "%s/%s", z->loc.key, rel);
    const s3_object *o = s3_listing_find(&z->listing->l, full);
    if (!o)
        return 0;
    k->found = 1;
    k->size = o->size;
    k->mtime = (struct timespec){o->mtime, 0};
    snprintf(rk->etag, sizeof rk->etag, "%s", o->etag);
    return 0;
}

static int rz_read_key(zarr_source *s, zarr_key *k, uint64_t off, size_t n, void *buf,
                       const char *what, cellar_error *err)
{
    rzarr *z = (rzarr *)s;
    rkey *rk = k->priv;
    if (off > k->size || n > k->size - off)
        return cellar_fail(err, CELLAR_EFORMAT, "%s ends early", what);
    if (rk->prefix && off + n <= rk->prefix_len) {
        if (n)
            memcpy(buf, rk->prefix + off, n);
        return 0;
    }
    /* Past its first bytes, a plain HTTP key is read with If-Match of the
     * ETag its first GET told: only a key without one needs a check. */
    if (!z->listing && !rk->etag[0])
        atomic_fetch_add(&z->fetch_seq, 1);
    return ranged_read(z->client, z->cache, rk->url, z->loc.s3, rk->etag, z->version, k->size,
                       off, n, buf, &z->changed, what, err);
}

static void rz_close_key(zarr_source *s, zarr_key *k)
{
    (void)s;
    rkey *rk = k->priv;
    if (rk)
        free(rk->prefix);
    free(rk);
    k->priv = NULL;
}

static int rz_list(zarr_source *s, const char *rel, zarr_list_fn fn, void *ctx, cellar_error *err)
{
    rzarr *z = (rzarr *)s;
    if (!z->listing)
        return cellar_fail(err, CELLAR_ENOTFOUND,
                           "a store over plain HTTP cannot be listed ('%.200s')", rel);
    char prefix[S3_KEY_MAX + 1200];
    int pn = snprintf(prefix, sizeof prefix, "%s/%s%s", z->loc.key, rel, rel[0] ? "/" : "");
    if (pn < 0 || (size_t)pn >= sizeof prefix)
        return cellar_fail(err, CELLAR_ENOTFOUND, "no directory '%.200s' in the store", rel);
    size_t plen = (size_t)pn, found = 0;
    const s3_listing *l = &z->listing->l;
    char last_dir[1024] = "";
    for (size_t i = s3_listing_lower_bound(l, prefix); i < l->n; i++) {
        const char *name = l->objs[i].key;
        if (strncmp(name, prefix, plen) != 0)
            break;
        found++;
        const char *rest = name + plen;
        const char *slash = strchr(rest, '/');
        int rc;
        if (!slash) {
            rc = fn(ctx, rest, ZARR_ENTRY_FILE);
        } else {
            size_t len = (size_t)(slash - rest);
            if (len >= sizeof last_dir || (!strncmp(last_dir, rest, len) && !last_dir[len]))
                continue;
            memcpy(last_dir, rest, len);
            last_dir[len] = '\0';
            rc = fn(ctx, last_dir, ZARR_ENTRY_DIR);
        }
        if (rc)
            return rc;
    }
    if (!found && rel[0])
        return cellar_fail(err, CELLAR_ENOTFOUND, "no directory '%.200s' in the store", rel);
    return 0;
}

static int rz_total_bytes(zarr_source *s, uint64_t *bytes)
{
    rzarr *z = (rzarr *)s;
    if (!z->listing)
        return -1;
    uint64_t t = 0;
    for (size_t i = 0; i < z->listing->l.n; i++)
        t += z->listing->l.objs[i].size;
    *bytes = t;
    return 0;
}

static int64_t rz_changed(zarr_source *s)
{
    return atomic_load(&((rzarr *)s)->changed);
}

static void rz_destroy(zarr_source *s)
{
    rzarr *z = (rzarr *)s;
    if (!z)
        return;
    remote_listing_release(z->listing);
    free(z);
}

/* S3 keys listed for the version and not yet in the byte cache, fetched
 * whole on one multi handle (at most the client's max_parallel at once),
 * each GET naming the listed ETag; what arrives goes to the cache, where
 * the reads that follow find it. */
static void rz_prefetch(zarr_source *s, const char *const *rels, size_t n)
{
    rzarr *z = (rzarr *)s;
    if (!z->listing || n < 2)
        return;
    remote_request *q = calloc(n, sizeof *q);
    remote_response *resp = calloc(n, sizeof *resp);
    int *rcs = calloc(n, sizeof *rcs);
    char(*urls)[2600] = calloc(n, sizeof *urls);
    char(*ids)[2900] = calloc(n, sizeof *ids);
    size_t m = 0;
    for (size_t i = 0; q && resp && rcs && urls && ids && i < n; i++) {
        char full[S3_KEY_MAX + 1100];
        snprintf(full, sizeof full, "%s/%s", z->loc.key, rels[i]);
        const s3_object *o = s3_listing_find(&z->listing->l, full);
        if (!o || !o->size || o->size > RANGE_MAX_BYTES ||
            key_url(z, rels[i], urls[m], sizeof urls[m]) != 0)
            continue;
        cache_id(urls[m], o->etag, z->version, ids[m], sizeof ids[m]);
        if (remote_cache_contains(z->cache, ids[m], 0, (size_t)o->size))
            continue;
        q[m] = (remote_request){.url = urls[m], .sign = 1, .ranged = 1, .off = 0,
                                .len = o->size, .if_match = o->etag[0] ? o->etag : NULL,
                                .max_bytes = (size_t)o->size};
        m++;
    }
    if (m > 1 && remote_fetch_many(z->client, q, resp, rcs, NULL, m) == 0) {
        for (size_t i = 0; i < m; i++)
            if (!rcs[i] && resp[i].status == 206 && resp[i].len == q[i].len)
                remote_cache_put(z->cache, ids[i], 0, resp[i].body, resp[i].len);
    }
    for (size_t i = 0; resp && i < m; i++)
        remote_response_clear(&resp[i]);
    free(q);
    free(resp);
    free(rcs);
    free(urls);
    free(ids);
}

static const zarr_source_ops rzarr_ops = {
    .prefetch = rz_prefetch,
    .open_key = rz_open_key,
    .read_key = rz_read_key,
    .close_key = rz_close_key,
    .list = rz_list,
    .total_bytes = rz_total_bytes,
    .changed = rz_changed,
    .destroy = rz_destroy,
};

int remote_roots_open_zarr(remote_roots *r, const char *name, zarr_source **out,
                           cellar_error *err)
{
    *out = NULL;
    rzarr *z = calloc(1, sizeof *z);
    if (!z)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
    remote_taken t;
    if (remote_roots_take(r, name, &t) != 0) {
        free(z);
        return cellar_fail(err, CELLAR_ENOTFOUND, "no store named '%.200s'", name);
    }
    z->base.ops = &rzarr_ops;
    z->client = remote_roots_client(r);
    z->cache = remote_roots_cache(r);
    z->loc = t.loc;
    z->listing = t.listing;
    snprintf(z->version, sizeof z->version, "v%016llx", (unsigned long long)t.tag);
    snprintf(z->name, sizeof z->name, "%s", name);
    z->tag = t.tag;
    atomic_init(&z->changed, unsettled_since(z->listing));
    z->serial = atomic_fetch_add(&next_serial, 1);
    atomic_init(&z->fetch_seq, 0);
    atomic_init(&z->verified_seq, 0);
    *out = &z->base;
    return 0;
}

int remote_source_unchanged(remote_roots *r, zarr_source *src)
{
    if (!src || src->ops != &rzarr_ops)
        return 1;
    rzarr *z = (rzarr *)src;
    uint64_t seq = atomic_load(&z->fetch_seq);
    if (z->listing || seq <= atomic_load(&z->verified_seq))
        return 1;
    remote_identity id;
    cellar_error err;
    cellar_error_clear(&err);
    /* A root document that cannot be fetched now says nothing of a change. */
    if (remote_roots_identity(r, z->name, 1, 1, &id, &err) != 0)
        return 1;
    if (id.tag != z->tag) {
        note_changed(&z->changed);
        return 0;
    }
    /* Every fetch counted before the check began is of this version. */
    uint64_t was = atomic_load(&z->verified_seq);
    while (seq > was && !atomic_compare_exchange_weak(&z->verified_seq, &was, seq))
        ;
    return 1;
}

/* ---- one object ---- */

struct remote_object {
    remote_client *client;
    remote_cache *cache;
    remote_loc loc;
    char etag[160];
    char version[32];
    uint64_t size;
    _Atomic int64_t changed;
};

int remote_roots_open_object(remote_roots *r, const char *name, remote_object **out,
                             cellar_error *err)
{
    *out = NULL;
    remote_object *o = calloc(1, sizeof *o);
    if (!o)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
    remote_taken t;
    if (remote_roots_take(r, name, &t) != 0) {
        free(o);
        return cellar_fail(err, CELLAR_ENOTFOUND, "no store named '%.200s'", name);
    }
    remote_listing_release(t.listing);
    o->client = remote_roots_client(r);
    o->cache = remote_roots_cache(r);
    o->loc = t.loc;
    o->size = t.size;
    snprintf(o->etag, sizeof o->etag, "%s", t.etag);
    snprintf(o->version, sizeof o->version, "v%016llx", (unsigned long long)t.tag);
    atomic_init(&o->changed, 0);
    *out = o;
    return 0;
}

uint64_t remote_object_size(const remote_object *o)
{
    return o->size;
}

/* Block [b * OBJECT_BLOCK, ...) of o, at most OBJECT_BLOCK bytes. */
static size_t block_len(const remote_object *o, uint64_t b)
{
    uint64_t start = b * OBJECT_BLOCK;
    return (size_t)(o->size - start < OBJECT_BLOCK ? o->size - start : OBJECT_BLOCK);
}

/* Fetches blocks [first, last] of o in one ranged GET (adjacent blocks a
 * read needs are coalesced) and keeps each in the cache; the bytes of
 * [off, off + n) among them go to buf. */
static int fetch_blocks(remote_object *o, uint64_t first, uint64_t last, uint64_t off, size_t n,
                        uint8_t *buf, const char *id, cellar_error *err)
{
    uint64_t start = first * OBJECT_BLOCK;
    uint64_t end = last * OBJECT_BLOCK + block_len(o, last);
    size_t len = (size_t)(end - start);
    uint8_t *tmp = malloc(len);
    if (!tmp)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory reading a remote file");
    /* One GET through a cache id the blocks are not kept under. */
    int rc = ranged_read(o->client, NULL, o->loc.url, o->loc.s3, o->etag, o->version, o->size,
                         start, len, tmp, &o->changed, "the remote file", err);
    if (!rc) {
        for (uint64_t b = first; b <= last; b++)
            remote_cache_put(o->cache, id, b * OBJECT_BLOCK, tmp + (b - first) * OBJECT_BLOCK,
                             block_len(o, b));
        uint64_t a = off > start ? off : start, z = off + n < end ? off + n : end;
        if (z > a)
            memcpy(buf + (a - off), tmp + (a - start), (size_t)(z - a));
    }
    free(tmp);
    return rc;
}

int remote_object_read(remote_object *o, uint64_t off, size_t n, void *buf, cellar_error *err)
{
    if (off > o->size || n > o->size - off)
        return cellar_fail(err, CELLAR_EFORMAT, "a read past the end of remote %.300s",
                           o->loc.url);
    if (!n)
        return 0;
    if (n > RANGE_MAX_BYTES)
        return cellar_fail(err, CELLAR_EFORMAT, "a read of %zu bytes of a remote file is over "
                                                "the limit", n);
    char id[2900];
    cache_id(o->loc.url, o->etag, o->version, id, sizeof id);
    uint8_t *out = buf;
    uint64_t first = off / OBJECT_BLOCK, last = (off + n - 1) / OBJECT_BLOCK;
    uint64_t run = UINT64_MAX; /* the first block of a run of missing ones */
    for (uint64_t b = first; b <= last + 1; b++) {
        int have = 0;
        if (b <= last) {
            uint64_t bs = b * OBJECT_BLOCK;
            size_t bl = block_len(o, b);
            uint64_t a = off > bs ? off : bs, z = off + n < bs + bl ? off + n : bs + bl;
            have = remote_cache_get_within(o->cache, id, bs, bl, a, (size_t)(z - a),
                                           out + (a - off));
        }
        if (!have && b <= last && run == UINT64_MAX)
            run = b;
        if ((have || b > last) && run != UINT64_MAX) {
            int rc = fetch_blocks(o, run, b - 1, off, n, out, id, err);
            if (rc)
                return rc;
            run = UINT64_MAX;
        }
    }
    return 0;
}

int64_t remote_object_changed(const remote_object *o)
{
    return atomic_load(&((remote_object *)o)->changed);
}

void remote_object_free(remote_object *o)
{
    free(o);
}
