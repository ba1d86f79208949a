/* Remote stores: roots, mounts and identities (storage/remote/remote_store.h).
 * The zarr key source and object reads are in remote_zarr.c. */
#include "storage/remote/remote_store.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/hash.h"
#include "storage/remote/remote_store_impl.h"

#define LIST_PAGE_MAX_BYTES ((size_t)16 << 20)
#define READY_KEEP_MS 1000

typedef struct s3_root {
    char *bucket;
    char *prefix; /* "" or ending in '/' */
} s3_root;

typedef struct mount {
    char *name;
    remote_loc loc;
} mount;

/* The identity fetched last for one store name. */
typedef struct known {
    char *name;
    remote_identity id;
    remote_loc loc;
    int zarr_dir;
    int64_t checked_ms;
    remote_listing *listing; /* S3 zarr stores: the version's listing */
    char etag[160];          /* objects: the ETag, "" when the server sends none */
    uint64_t objsize;
} known;

struct remote_roots {
    remote_client *client;
    remote_cache *cache;
    char *endpoint;  /* no trailing '/' */
    int path_style;
    double recheck;
    s3_root *roots;
    size_t nroots;
    mount *mounts;
    size_t nmounts;
    pthread_mutex_t lock;
    known *known;
    size_t nknown, capknown;
    int64_t ready_at_ms;
    int ready_rc;
    char ready_why[400];
};

/* ---- listings ---- */

remote_listing *remote_listing_ref(remote_listing *l)
{
    if (l)
        atomic_fetch_add(&l->refs, 1);
    return l;
}

void remote_listing_release(remote_listing *l)
{
    if (l && atomic_fetch_sub(&l->refs, 1) == 1) {
        s3_listing_free(&l->l);
        free(l);
    }
}

/* ---- set-up ---- */

remote_roots *remote_roots_new(const remote_roots_config *cfg, cellar_error *err)
{
    remote_roots *r = calloc(1, sizeof *r);
    if (!r) {
        cellar_fail(err, CELLAR_ENOMEM, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&r->lock, NULL);
    r->recheck = cfg->recheck_seconds;
    const char *region = cfg->client.region && *cfg->client.region ? cfg->client.region
                                                                   : "us-east-1";
    char ep[512];
    if (cfg->s3_endpoint && *cfg->s3_endpoint)
        snprintf(ep, sizeof ep, "%s", cfg->s3_endpoint);
    else
        snprintf(ep, sizeof ep, "https://s3.%s.amazonaws.com", region);
    size_t el = strlen(ep);
    while (el && ep[el - 1] == '/')
        ep[--el] = '\0';
    r->endpoint = strdup(ep);
    r->path_style = cfg->path_style >= 0 ? cfg->path_style
                                         : (cfg->s3_endpoint && *cfg->s3_endpoint);
    r->client = remote_client_new(&cfg->client, err);
    r->cache = remote_cache_new(cfg->cache_bytes);
    if (!r->endpoint || !r->client || !r->cache ||
        (strncmp(ep, "http://", 7) && strncmp(ep, "https://", 8))) {
        if (r->endpoint && r->client && r->cache)
            cellar_fail(err, CELLAR_EINVAL, "the S3 endpoint '%.200s' is not an http(s) URL", ep);
        else
            cellar_fail(err, CELLAR_ENOMEM, "out of memory");
        remote_roots_free(r);
        return NULL;
    }
    return r;
}

static void known_clear(known *k)
{
    free(k->name);
    remote_listing_release(k->listing);
    memset(k, 0, sizeof *k);
}

void remote_roots_free(remote_roots *r)
{
    if (!r)
        return;
    for (size_t i = 0; i < r->nroots; i++) {
        free(r->roots[i].bucket);
        free(r->roots[i].prefix);
    }
    free(r->roots);
    for (size_t i = 0; i < r->nmounts; i++)
        free(r->mounts[i].name);
    free(r->mounts);
    for (size_t i = 0; i < r->nknown; i++)
        known_clear(&r->known[i]);
    free(r->known);
    remote_client_free(r->client);
    remote_cache_free(r->cache);
    free(r->endpoint);
    pthread_mutex_destroy(&r->lock);
    free(r);
}

/* Splits "s3://bucket/rest" into bucket and rest (no leading '/'). */
static int split_s3(const char *url, char *bucket, size_t bsize, const char **rest)
{
    if (strncmp(url, "s3://", 5) != 0)
        return -1;
    const char *b = url + 5, *slash = strchr(b, '/');
    size_t bl = slash ? (size_t)(slash - b) : strlen(b);
    if (bl < 3 || bl >= bsize || bl > 63)
        return -1;
    for (size_t i = 0; i < bl; i++) {
        char c = b[i];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.'))
            return -1;
    }
    memcpy(bucket, b, bl);
    bucket[bl] = '\0';
    *rest = slash ? slash + 1 : "";
    return 0;
}

/* A key or key prefix of plain segments (no "", "." or ".."). */
static int plain_path(const char *p)
{
    if (!*p)
        return 1;
    if (strlen(p) > S3_KEY_MAX - 64)
        return 0;
    for (const char *s = p;;) {
        const char *e = strchr(s, '/');
        size_t n = e ? (size_t)(e - s) : strlen(s);
        if (n == 0 || (n == 1 && s[0] == '.') || (n == 2 && s[0] == '.' && s[1] == '.'))
            return 0;
        if (!e)
            break;
        s = e + 1;
    }
    for (const unsigned char *c = (const unsigned char *)p; *c; c++)
        if (*c < 0x20 || *c == 0x7f || *c == '\\')
            return 0;
    return 1;
}

int remote_roots_add_s3(remote_roots *r, const char *url, cellar_error *err)
{
    char bucket[64];
    const char *rest = NULL;
    if (split_s3(url, bucket, sizeof bucket, &rest) != 0)
        return cellar_fail(err, CELLAR_EINVAL, "'%.200s' is not s3://bucket[/prefix]", url);
    char prefix[S3_KEY_MAX];
    snprintf(prefix, sizeof prefix, "%s", rest);
    size_t pl = strlen(prefix);
    while (pl && prefix[pl - 1] == '/')
        prefix[--pl] = '\0';
    if (!plain_path(prefix))
        return cellar_fail(err, CELLAR_EINVAL, "the prefix of '%.200s' is not a plain path", url);
    if (pl)
        strcat(prefix, "/");
    s3_root *g = realloc(r->roots, (r->nroots + 1) * sizeof *g);
    if (!g)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
    r->roots = g;
    s3_root *nr = &r->roots[r->nroots];
    nr->bucket = strdup(bucket);
    nr->prefix = strdup(prefix);
    if (!nr->bucket || !nr->prefix) {
        free(nr->bucket);
        free(nr->prefix);
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
    }
    r->nroots++;
    return 0;
}

/* The URL of an S3 object (key "" for the bucket itself). */
static int s3_url(const remote_roots *r, const char *bucket, const char *key, char *out,
                  size_t size)
{
    out[0] = '\0';
    int n;
    if (r->path_style) {
        n = snprintf(out, size, "%s/%s/", r->endpoint, bucket);
    } else {
        const char *host = strstr(r->endpoint, "://") + 3;
        n = snprintf(out, size, "%.*s%s.%s/", (int)(host - r->endpoint), r->endpoint, bucket,
                     host);
    }
    if (n < 0 || (size_t)n >= size)
        return -1;
    return s3_encode(key, 1, out, size);
}

int remote_loc_s3(const remote_roots *r, const char *bucket, const char *key, remote_loc *l)
{
    memset(l, 0, sizeof *l);
    l->s3 = 1;
    if (strlen(bucket) >= sizeof l->bucket || strlen(key) >= sizeof l->key)
        return -1;
    strcpy(l->bucket, bucket);
    strcpy(l->key, key);
    return s3_url(r, bucket, key, l->url, sizeof l->url);
}

int remote_roots_add_mount(remote_roots *r, const char *spec, cellar_error *err)
{
    const char *eq = strchr(spec, '=');
    if (!eq || eq == spec)
        return cellar_fail(err, CELLAR_EINVAL, "--remote takes NAME=URL, not '%.200s'", spec);
    char name[1025];
    size_t nl = (size_t)(eq - spec);
    if (nl >= sizeof name)
        return cellar_fail(err, CELLAR_EINVAL, "the store name of '%.200s' is too long", spec);
    memcpy(name, spec, nl);
    name[nl] = '\0';
    if (!plain_path(name))
        return cellar_fail(err, CELLAR_EINVAL, "'%.200s' is not a plain store name", name);
    const char *url = eq + 1;
    mount m = {0};
    if (!strncmp(url, "s3://", 5)) {
        char bucket[64];
        const char *rest = NULL;
        char key[S3_KEY_MAX];
        if (split_s3(url, bucket, sizeof bucket, &rest) != 0 || !*rest)
            return cellar_fail(err, CELLAR_EINVAL, "'%.200s' is not s3://bucket/key", url);
        snprintf(key, sizeof key, "%s", rest);
        size_t kl = strlen(key);
        while (kl && key[kl - 1] == '/')
            key[--kl] = '\0';
        if (!plain_path(key) || remote_loc_s3(r, bucket, key, &m.loc) != 0)
            return cellar_fail(err, CELLAR_EINVAL, "'%.200s' is not s3://bucket/key", url);
    } else if (!strncmp(url, "http://", 7) || !strncmp(url, "https://", 8)) {
        size_t ul = strlen(url);
        while (ul && url[ul - 1] == '/')
            ul--;
        if (ul >= sizeof m.loc.url || strchr(url, '?') || strchr(url, '#') ||
            !strchr(strstr(url, "://") + 3, '/'))
            return cellar_fail(err, CELLAR_EINVAL,
                               "'%.200s' is not an http(s) URL of a store (no query)", url);
        for (size_t i = 0; i < ul; i++)
            if ((unsigned char)url[i] <= 0x20 || url[i] == 0x7f)
                return cellar_fail(err, CELLAR_EINVAL, "'%.200s' has blanks or control bytes",
                                   url);
        memcpy(m.loc.url, url, ul);
        m.loc.url[ul] = '\0';
    } else {
        return cellar_fail(err, CELLAR_EINVAL, "--remote %s: the URL must be http://, https:// "
                                               "or s3://", name);
    }
    mount *g = realloc(r->mounts, (r->nmounts + 1) * sizeof *g);
    if (!g)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
    r->mounts = g;
    m.name = strdup(name);
    if (!m.name)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
    r->mounts[r->nmounts++] = m;
    return 0;
}

int remote_roots_any(const remote_roots *r)
{
    return r && (r->nroots || r->nmounts);
}

static const mount *find_mount(const remote_roots *r, const char *name)
{
    for (size_t i = 0; r && i < r->nmounts; i++)
        if (!strcmp(r->mounts[i].name, name))
            return &r->mounts[i];
    return NULL;
}

int remote_roots_is_mount(const remote_roots *r, const char *name)
{
    return find_mount(r, name) != NULL;
}

int remote_roots_has_s3(const remote_roots *r)
{
    return r && r->nroots;
}

remote_cache *remote_roots_cache(remote_roots *r)
{
    return r->cache;
}

remote_client *remote_roots_client(remote_roots *r)
{
    return r->client;
}

/* ---- S3 listings ---- */

static int list_url(const remote_roots *r, const char *bucket, const char *prefix,
                    const char *token, int max_keys, char *out, size_t size)
{
    if (s3_url(r, bucket, "", out, size) != 0)
        return -1;
    size_t n = strlen(out);
    /* Parameters in the canonical (sorted) order SigV4 signs them in. */
    if (token) {
        if (n + 21 >= size)
            return -1;
        strcat(out, "?continuation-token=");
        if (s3_encode(token, 0, out, size) != 0)
            return -1;
    }
    char tail[64];
    snprintf(tail, sizeof tail, "%slist-type=2%s", token ? "&" : "?", "");
    if (max_keys > 0)
        snprintf(tail, sizeof tail, "%slist-type=2&max-keys=%d", token ? "&" : "?", max_keys);
    if (strlen(out) + strlen(tail) + 8 >= size)
        return -1;
    strcat(out, tail);
    strcat(out, "&prefix=");
    return s3_encode(prefix, 0, out, size);
}

int remote_s3_list(remote_roots *r, const char *bucket, const char *prefix, int max_keys,
                   s3_listing *out, cellar_error *err)
{
    memset(out, 0, sizeof *out);
    char *token = NULL;
    int rc = 0;
    for (;;) {
        char url[4096];
        if (list_url(r, bucket, prefix, token, max_keys, url, sizeof url) != 0) {
            rc = cellar_fail(err, CELLAR_EINVAL, "the listing URL of '%.200s' is too long", prefix);
            break;
        }
        free(token);
        token = NULL;
        remote_request q = {.url = url, .sign = 1, .max_bytes = LIST_PAGE_MAX_BYTES};
        remote_response resp = {0};
        rc = remote_fetch(r->client, &q, &resp, err);
        if (!rc && resp.status == 404)
            rc = cellar_fail(err, CELLAR_ENOTFOUND, "no bucket '%.100s'", bucket);
        else if (!rc && resp.status != 200) {
            char what[300];
            snprintf(what, sizeof what, "s3://%.100s (listing)", bucket);
            rc = remote_fail_status(err, &resp, what);
        }
        int truncated = 0;
        if (!rc) {
            cellar_error perr;
            cellar_error_clear(&perr);
            rc = s3_list_parse((const char *)resp.body, resp.len, out, &truncated, &token,
                               &perr);
            if (rc)
                rc = cellar_fail(err, CELLAR_EUPSTREAM, "s3://%.100s: %s", bucket, perr.detail);
        }
        remote_response_clear(&resp);
        if (rc || !truncated || max_keys > 0)
            break;
    }
    free(token);
    if (rc)
        s3_listing_free(out);
    else
        s3_listing_sort(out);
    return rc;
}

/* ---- identities ---- */

static uint64_t mix(uint64_t h, const void *p, size_t n)
{
    uint64_t parts[2] = {h, hash64(p, n)};
    return hash64(parts, sizeof parts);
}

/* A zarr store on S3: its prefix's listing. */
static int identity_s3_zarr(remote_roots *r, known *k, cellar_error *err)
{
    remote_listing *l = calloc(1, sizeof *l);
    if (!l)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
    atomic_init(&l->refs, 1);
    char prefix[S3_KEY_MAX + 2];
    snprintf(prefix, sizeof prefix, "%s/", k->loc.key);
    int rc = remote_s3_list(r, k->loc.bucket, prefix, 0, &l->l, err);
    if (!rc && l->l.n == 0)
        rc = CELLAR_ENOTFOUND;
    if (rc) {
        remote_listing_release(l);
        return rc;
    }
    uint64_t tag = 0x5a;
    for (size_t i = 0; i < l->l.n; i++) {
        const s3_object *o = &l->l.objs[i];
        k->id.size += o->size;
        if (o->mtime > k->id.mtime)
            k->id.mtime = o->mtime;
        tag = mix(tag, o->key, strlen(o->key));
        tag = mix(tag, o->etag, strlen(o->etag));
        tag = mix(tag, &o->size, sizeof o->size);
    }
    k->id.tag = tag;
    k->listing = l;
    return 0;
}

/* A zarr store over plain HTTP: HEADs of its root metadata documents. */
static int identity_http_zarr(remote_roots *r, known *k, cellar_error *err)
{
    static const char *const docs[] = {"zarr.json", ".zmetadata", ".zgroup", ".zattrs"};
    enum { N = sizeof docs / sizeof *docs };
    char urls[N][sizeof k->loc.url + 16];
    remote_request q[N];
    remote_response resp[N];
    int rcs[N];
    cellar_error errs[N];
    for (int i = 0; i < N; i++) {
        snprintf(urls[i], sizeof urls[i], "%s/%s", k->loc.url, docs[i]);
        q[i] = (remote_request){.url = urls[i], .head = 1, .sign = k->loc.s3};
        cellar_error_clear(&errs[i]);
    }
    int rc = remote_fetch_many(r->client, q, resp, rcs, errs, N);
    if (rc)
        return cellar_fail(err, rc, "out of memory");
    uint64_t tag = 0x7a;
    int found = 0;
    for (int i = 0; i < N && !rc; i++) {
        if (rcs[i]) {
            rc = cellar_fail(err, rcs[i], "%s", errs[i].detail);
        } else if (resp[i].status == 200) {
            found = 1;
            k->id.size += resp[i].total;
            if (resp[i].mtime > k->id.mtime)
                k->id.mtime = resp[i].mtime;
            tag = mix(tag, docs[i], strlen(docs[i]));
            tag = mix(tag, resp[i].etag, strlen(resp[i].etag));
            tag = mix(tag, &resp[i].total, sizeof resp[i].total);
        } else if (resp[i].status != 404 && resp[i].status != 410) {
            char what[600];
            remote_url_for_humans(urls[i], what, sizeof what);
            rc = remote_fail_status(err, &resp[i], what);
        }
    }
    for (int i = 0; i < N; i++)
        remote_response_clear(&resp[i]);
    if (!rc && !found)
        rc = CELLAR_ENOTFOUND;
    k->id.tag = tag;
    return rc;
}

/* One object (an HDF5 file, a zip): a HEAD. */
static int identity_object(remote_roots *r, known *k, cellar_error *err)
{
    remote_request q = {.url = k->loc.url, .head = 1, .sign = k->loc.s3};
    remote_response resp = {0};
    int rc = remote_fetch(r->client, &q, &resp, err);
    if (!rc && (resp.status == 404 || resp.status == 410))
        rc = CELLAR_ENOTFOUND;
    else if (!rc && resp.status != 200) {
        char what[600];
        remote_url_for_humans(k->loc.url, what, sizeof what);
        rc = remote_fail_status(err, &resp, what);
    } else if (!rc && !resp.has_total) {
        rc = cellar_fail(err, CELLAR_EUPSTREAM, "remote %.400s gives no Content-Length",
                         k->loc.url);
    }
    if (!rc) {
        k->id.size = resp.total;
        k->id.mtime = resp.mtime;
        k->objsize = resp.total;
        snprintf(k->etag, sizeof k->etag, "%s", resp.etag);
        uint64_t tag = mix(0x6f, resp.etag, strlen(resp.etag));
        k->id.tag = mix(tag, &resp.total, sizeof resp.total);
        if (!resp.etag[0])
            k->id.tag = mix(k->id.tag, &resp.mtime, sizeof resp.mtime);
    }
    remote_response_clear(&resp);
    return rc;
}

static int fetch_identity(remote_roots *r, known *k, cellar_error *err)
{
    remote_url_for_humans(k->loc.url, k->id.url, sizeof k->id.url);
    if (!k->zarr_dir)
        return identity_object(r, k, err);
    return k->loc.s3 ? identity_s3_zarr(r, k, err) : identity_http_zarr(r, k, err);
}

static known *find_known_locked(remote_roots *r, const char *name)
{
    for (size_t i = 0; i < r->nknown; i++)
        if (!strcmp(r->known[i].name, name))
            return &r->known[i];
    return NULL;
}

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Keeps k (taken over) as name's identity. */
static int keep_known(remote_roots *r, known *k)
{
    pthread_mutex_lock(&r->lock);
    known *old = find_known_locked(r, k->name);
    if (old) {
        known_clear(old);
        *old = *k;
    } else {
        if (r->nknown == r->capknown) {
            size_t cap = r->capknown ? r->capknown * 2 : 16;
            known *g = realloc(r->known, cap * sizeof *g);
            if (!g) {
                pthread_mutex_unlock(&r->lock);
                known_clear(k);
                return CELLAR_ENOMEM;
            }
            r->known = g;
            r->capknown = cap;
        }
        r->known[r->nknown++] = *k;
    }
    pthread_mutex_unlock(&r->lock);
    return 0;
}

int remote_roots_identity(remote_roots *r, const char *name, int zarr_dir, int force,
                          remote_identity *id, cellar_error *err)
{
    pthread_mutex_lock(&r->lock);
    known *k = find_known_locked(r, name);
    if (k && !force && mono_ms() - k->checked_ms < (int64_t)(r->recheck * 1000)) {
        *id = k->id;
        pthread_mutex_unlock(&r->lock);
        return 0;
    }
    pthread_mutex_unlock(&r->lock);
    const mount *m = find_mount(r, name);
    size_t candidates = m ? 1 : r->nroots;
    int rc = CELLAR_ENOTFOUND;
    for (size_t i = 0; i < candidates; i++) {
        known fresh = {0};
        fresh.zarr_dir = zarr_dir;
        fresh.checked_ms = mono_ms();
        if (m) {
            fresh.loc = m->loc;
        } else {
            char key[S3_KEY_MAX + 1100];
            snprintf(key, sizeof key, "%s%s", r->roots[i].prefix, name);
            if (strlen(key) > S3_KEY_MAX - 64 || remote_loc_s3(r, r->roots[i].bucket, key,
                                                               &fresh.loc) != 0)
                continue;
        }
        rc = fetch_identity(r, &fresh, err);
        if (rc == CELLAR_ENOTFOUND) {
            known_clear(&fresh);
            continue;
        }
        if (rc) {
            known_clear(&fresh);
            return rc;
        }
        fresh.name = strdup(name);
        if (!fresh.name) {
            known_clear(&fresh);
            return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
        }
        *id = fresh.id;
        if (keep_known(r, &fresh) != 0)
            return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
        return 0;
    }
    /* A mount names its store: its absence is the remote's failure. */
    if (m)
        return cellar_fail(err, CELLAR_EUPSTREAM, "remote %.400s answered 404: no store there",
                           m->loc.url);
    return cellar_fail(err, CELLAR_ENOTFOUND, "no store named '%.200s'", name);
}

int remote_roots_still(remote_roots *r, const char *name, uint64_t tag)
{
    pthread_mutex_lock(&r->lock);
    known *k = find_known_locked(r, name);
    int same = k && k->id.tag == tag;
    pthread_mutex_unlock(&r->lock);
    return same;
}

int remote_roots_take(remote_roots *r, const char *name, remote_taken *t)
{
    memset(t, 0, sizeof *t);
    pthread_mutex_lock(&r->lock);
    known *k = find_known_locked(r, name);
    if (k) {
        t->loc = k->loc;
        t->listing = remote_listing_ref(k->listing);
        snprintf(t->etag, sizeof t->etag, "%s", k->etag);
        t->size = k->objsize;
        t->tag = k->id.tag;
    }
    pthread_mutex_unlock(&r->lock);
    return k ? 0 : CELLAR_ENOTFOUND;
}

/* ---- the listing of every store ---- */

typedef struct listed_acc {
    remote_listed *items;
    size_t n, cap;
} listed_acc;

static int acc_add(listed_acc *a, const char *name, size_t len, uint64_t size, time_t mtime)
{
    if (a->n && strlen(a->items[a->n - 1].name) == len &&
        !strncmp(a->items[a->n - 1].name, name, len)) {
        remote_listed *e = &a->items[a->n - 1];
        e->size += size;
        if (mtime > e->mtime)
            e->mtime = mtime;
        return 0;
    }
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 32;
        remote_listed *g = realloc(a->items, cap * sizeof *g);
        if (!g)
            return CELLAR_ENOMEM;
        a->items = g;
        a->cap = cap;
    }
    char *copy = strndup(name, len);
    if (!copy)
        return CELLAR_ENOMEM;
    a->items[a->n++] = (remote_listed){copy, size, mtime};
    return 0;
}

/* The store a key below a root belongs to: the key up to its first
 * segment with a store suffix; 0 when none. */
static size_t store_of_key(const char *rel, int (*is_store)(const char *, size_t))
{
    for (const char *s = rel;;) {
        const char *e = strchr(s, '/');
        size_t n = e ? (size_t)(e - s) : strlen(s);
        if (n && is_store(s, n))
            return (size_t)(s + n - rel);
        if (!e)
            return 0;
        s = e + 1;
    }
}

static int listed_cmp(const void *a, const void *b)
{
    return strcmp(((const remote_listed *)a)->name, ((const remote_listed *)b)->name);
}

int remote_roots_list(remote_roots *r, int (*is_store)(const char *name, size_t len),
                      remote_listed **out, size_t *count, cellar_error *err)
{
    listed_acc a = {0};
    int rc = 0;
    for (size_t i = 0; i < r->nroots && !rc; i++) {
        s3_listing l;
        rc = remote_s3_list(r, r->roots[i].bucket, r->roots[i].prefix, 0, &l, err);
        size_t pl = strlen(r->roots[i].prefix);
        for (size_t j = 0; !rc && j < l.n; j++) {
            const char *rel = l.objs[j].key + pl;
            size_t sl = store_of_key(rel, is_store);
            if (sl && plain_path(rel) && !find_mount(r, rel))
                rc = acc_add(&a, rel, sl, l.objs[j].size, l.objs[j].mtime);
        }
        if (!rc || rc == CELLAR_ENOMEM)
            s3_listing_free(&l);
        if (rc == CELLAR_ENOMEM)
            cellar_fail(err, rc, "out of memory");
    }
    for (size_t i = 0; i < r->nmounts && !rc; i++) {
        const char *name = r->mounts[i].name;
        size_t len = strlen(name);
        remote_identity id;
        cellar_error local;
        cellar_error_clear(&local);
        int zarr_dir = !(len > 4 && !strcmp(name + len - 4, ".zip")) &&
                       len > 5 && !strcmp(name + len - 5, ".zarr");
        if (remote_roots_identity(r, name, zarr_dir, 0, &id, &local) == 0)
            rc = acc_add(&a, name, len, id.size, id.mtime);
    }
    if (rc) {
        for (size_t i = 0; i < a.n; i++)
            free(a.items[i].name);
        free(a.items);
        return rc;
    }
    if (a.n)
        qsort(a.items, a.n, sizeof *a.items, listed_cmp);
    *out = a.items;
    *count = a.n;
    return 0;
}

int remote_roots_ready(remote_roots *r, char *why, size_t size)
{
    pthread_mutex_lock(&r->lock);
    int64_t now = mono_ms();
    if (r->ready_at_ms && now - r->ready_at_ms < READY_KEEP_MS) {
        int rc = r->ready_rc;
        snprintf(why, size, "%s", r->ready_why);
        pthread_mutex_unlock(&r->lock);
        return rc;
    }
    pthread_mutex_unlock(&r->lock);
    int rc = 0;
    char reason[400] = "";
    for (size_t i = 0; i < r->nroots && !rc; i++) {
        s3_listing l;
        cellar_error e;
        cellar_error_clear(&e);
        rc = remote_s3_list(r, r->roots[i].bucket, r->roots[i].prefix, 1, &l, &e);
        if (rc)
            snprintf(reason, sizeof reason, "the S3 root s3://%.60s/%.60s cannot be listed: %.150s",
                     r->roots[i].bucket, r->roots[i].prefix, e.detail);
        else
            s3_listing_free(&l);
    }
    pthread_mutex_lock(&r->lock);
    r->ready_at_ms = mono_ms();
    r->ready_rc = rc;
    snprintf(r->ready_why, sizeof r->ready_why, "%s", reason);
    pthread_mutex_unlock(&r->lock);
    snprintf(why, size, "%s", reason);
    return rc;
}

/* ---- credentials files ---- */

static char *trim(char *s)
{
    while (*s == ' ' || *s == '\t')
        s++;
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\n' || s[n - 1] == '\r'))
        s[--n] = '\0';
    return s;
}

int remote_credentials_read(const char *path, const char *profile, char *key, char *secret,
                            char *token, size_t size, cellar_error *err)
{
    key[0] = secret[0] = token[0] = '\0';
    FILE *f = fopen(path, "r");
    if (!f)
        return cellar_fail(err, CELLAR_ENOTFOUND, "no credentials file '%.200s'", path);
    char line[4096];
    int in = 0, rc = 0, lineno = 0;
    while (!rc && fgets(line, sizeof line, f)) {
        lineno++;
        char *t = trim(line);
        if (!*t || *t == '#' || *t == ';')
            continue;
        if (*t == '[') {
            char *e = strchr(t, ']');
            if (!e) {
                rc = cellar_fail(err, CELLAR_EINVAL, "%.200s:%d: a section without ']'", path,
                                 lineno);
                break;
            }
            *e = '\0';
            char *name = trim(t + 1);
            if (!strncmp(name, "profile ", 8))
                name = trim(name + 8);
            in = !strcmp(name, profile);
            continue;
        }
        char *eq = strchr(t, '=');
        if (!eq) {
            rc = cellar_fail(err, CELLAR_EINVAL, "%.200s:%d: not NAME = VALUE", path, lineno);
            break;
        }
        *eq = '\0';
        char *name = trim(t), *value = trim(eq + 1);
        char *dst = !strcmp(name, "aws_access_key_id")       ? key
                    : !strcmp(name, "aws_secret_access_key") ? secret
                    : !strcmp(name, "aws_session_token")     ? token
                                                             : NULL;
        if (!in || !dst)
            continue;
        if (strlen(value) >= size)
            rc = cellar_fail(err, CELLAR_EINVAL, "%.200s:%d: %s is too long", path, lineno, name);
        else
            strcpy(dst, value);
    }
    fclose(f);
    return rc;
}
