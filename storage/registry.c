#include "storage/registry.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/hash.h"
#include "storage/ext_targets.h"
#include "storage/hdf5/h5.h"
#include "storage/zarr/zarr.h"
#include "storage/zip/zip_store.h"

/* How long a reopen of a file rewritten in place waits for requests still
 * reading the old version (libhdf5 shares open files by device and inode, so
 * the old handle must be closed before the new contents can be read). */
#define REGISTRY_DRAIN_SECONDS 30
#define REGISTRY_LIST_MAX_DEPTH 16

typedef struct derived_entry {
    struct derived_entry *next;
    char *key;
    int ready;
    void *value;
    size_t bytes;
    derived_free_fn free_fn;
} derived_entry;

typedef struct file_identity {
    dev_t dev;
    ino_t ino;
    off_t size;
    struct timespec mtime;
    /* A file store's ctime (zero for a zarr directory): a file rewritten
     * in place with its size and mtime put back (touch -r) changes only
     * this, and libhdf5 must never read bytes its probe did not walk.  Not
     * part of the ETag (copies of a store do not share it). */
    struct timespec ctime;
    struct timespec dir_mtime; /* zarr: the directory's own mtime */
    unsigned meta;             /* zarr: bit i set when zarr_meta[i] exists */
    /* A remote store (storage/remote/remote_store.h): ino holds the hash
     * of the ETags its identity covers, dev is 0. */
    int remote;
    /* zarr: the newest change an earlier version of this name saw in its
     * files while it served (zarr_changed_since_open), 0 when none.  Not
     * on disk but part of the ETag: a store rewritten in place with its
     * root metadata unchanged still gets a new one.  identity_equal
     * ignores it. */
    int64_t rewritten;
} file_identity;

/* The newest in-place rewrite seen per store name (file_identity.rewritten),
 * kept past its versions so every later version's ETag differs from the
 * ones before the rewrite. */
typedef struct rewrite_mark {
    char *name;
    int64_t at;
} rewrite_mark;
#define REWRITE_MARKS_MAX 4096

/* The root metadata documents of a zarr store, part of its identity. */
static const char *const zarr_meta[] = {"zarr.json", ".zmetadata", ".zgroup", ".zattrs"};

struct store {
    registry *reg;
    char *name;
    char *path;
    store_backend backend;
    store_kind kind;
    node *root;
    remote_object *remote_obj; /* a remote HDF5 file: what its tree reads */
    /* the other files an HDF5 version reaches (its tree borrows it), NULL
     * when none */
    ext_targets *ext;
    file_identity id;
    char etag[128];
    char cache_tag[192]; /* store_cache_tag */

    /* Guarded by reg->lock. */
    struct store *next_retired; /* retired but still referenced */
    int refs;
    int current;       /* still the registry's version for this name */
    double last_used;
    /* Set once an answer made from this version went out (store_answered):
     * only then does a rewrite it notices need a rewrite mark, since a
     * version that answered nothing gave no client its ETag. */
    atomic_int answered;

    pthread_mutex_t derived_lock;
    pthread_cond_t derived_cond;
    derived_entry *derived;
    size_t derived_bytes;
};

struct registry {
    char *root;        /* realpath of the data root */
    size_t root_len;
    registry_config cfg;
    pthread_mutex_t lock;
    pthread_mutex_t open_lock; /* serializes opening new HDF5 versions */
    /* serializes opening new zarr versions: apart from open_lock, so a
     * file stuck inside libhdf5 does not hold up zarr stores */
    pthread_mutex_t zarr_open_lock;
    /* serializes opening remote versions: a slow remote holds up no local
     * store */
    pthread_mutex_t remote_open_lock;
    pthread_cond_t released; /* a non-current version was freed */
    store **open;      /* current versions */
    store *retired;    /* older versions still referenced by requests */
    size_t n_open, cap_open;
    rewrite_mark *marks; /* guarded by lock */
    size_t n_marks, cap_marks;
};

/* ".zip" also takes ".zarr.zip": a zarr store in a zip file. */
static const char *const store_suffixes[] = {".h5ad", ".h5mu", ".h5td", ".h5", ".zarr", ".zip"};
/* Other names of HDF5 files (NeXus, HDF-EOS), which only registry_get_hdf5
 * opens: no store suffix, so the store routes and listings never see them. */
static const char *const hdf5_file_suffixes[] = {".hdf5", ".nxs", ".nx", ".he5"};

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

const char *store_backend_name(store_backend b)
{
    return b == BACKEND_ZARR ? "zarr" : "hdf5";
}

static int has_suffix(const char *s, size_t len, const char *suffix)
{
    size_t sl = strlen(suffix);
    return len > sl && memcmp(s + len - sl, suffix, sl) == 0;
}

/* Zip stores are zarr stores read from a zip (storage/zip/zip_store.h). */
static store_backend backend_of(const char *name)
{
    return has_suffix(name, strlen(name), ".zarr") || zip_store_name(name) ? BACKEND_ZARR
                                                                            : BACKEND_HDF5;
}

/* Whether the store's identity is its directory and root metadata (a zarr
 * directory), not one file's (HDF5, a zip). */
static int is_zarr_directory(const char *name)
{
    return backend_of(name) == BACKEND_ZARR && !zip_store_name(name);
}

static int segment_is_store(const char *s, size_t len)
{
    for (size_t i = 0; i < sizeof store_suffixes / sizeof *store_suffixes; i++)
        if (has_suffix(s, len, store_suffixes[i]))
            return 1;
    return 0;
}

static int is_hdf5_file_name(const char *s, size_t len)
{
    for (size_t i = 0; i < sizeof hdf5_file_suffixes / sizeof *hdf5_file_suffixes; i++)
        if (has_suffix(s, len, hdf5_file_suffixes[i]))
            return 1;
    return 0;
}

static store_kind kind_from_suffix(const char *name)
{
    size_t len = strlen(name);
    if (has_suffix(name, len, ".h5mu"))
        return KIND_MUDATA;
    if (has_suffix(name, len, ".h5td"))
        return KIND_TREEDATA;
    if (has_suffix(name, len, ".h5ad"))
        return KIND_ANNDATA;
    return KIND_UNKNOWN;
}

int registry_split_name(const char *path, arena *a, const char **name, const char **rest)
{
    *name = NULL;
    *rest = NULL;
    const char *s = path;
    while (*s) {
        const char *e = strchr(s, '/');
        size_t len = e ? (size_t)(e - s) : strlen(s);
        if (segment_is_store(s, len)) {
            *name = arena_strndup(a, path, (size_t)(s + len - path));
            *rest = arena_strdup(a, e ? e + 1 : "");
            return (*name && *rest) ? 0 : CELLAR_ENOMEM;
        }
        if (!e)
            break;
        s = e + 1;
    }
    return CELLAR_ENOTFOUND;
}

/* A store name is a relative path of plain segments ending in a store
 * suffix (or, with hdf5_names, in one of hdf5_file_suffixes): no "", ".",
 * ".." segments, no leading '/', no backslashes or control characters. */
static int name_is_safe(const char *name, int hdf5_names)
{
    size_t len = strlen(name);
    if (len == 0 || len > 1024 || name[0] == '/')
        return 0;
    const char *s = name;
    for (;;) {
        const char *e = strchr(s, '/');
        size_t seg = e ? (size_t)(e - s) : strlen(s);
        if (seg == 0 || (seg == 1 && s[0] == '.') || (seg == 2 && s[0] == '.' && s[1] == '.'))
            return 0;
        if (!e)
            break;
        s = e + 1;
    }
    for (const char *p = name; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == '\\' || *p == 0x7f)
            return 0;
    return (segment_is_store(name, len) || (hdf5_names && is_hdf5_file_name(name, len))) &&
           !strstr(name, "//");
}

int registry_fail_unknown(cellar_error *err, const char *name)
{
    return cellar_fail(err, CELLAR_ENOTFOUND, "no store named '%.200s'", name);
}

/* Resolves name against the root to a canonical path that is still inside
 * the root (symlinks followed, then checked). Returns a malloc'd path. */
static int resolve_inside(registry *r, const char *name, int hdf5_names, char **out,
                          cellar_error *err)
{
    *out = NULL;
    if (!r->root)
        return registry_fail_unknown(err, name);
    if (!name_is_safe(name, hdf5_names)) {
        fprintf(stderr, "cellar: refused store name '%.200s' (not a plain relative name)\n",
                name);
        return registry_fail_unknown(err, name);
    }
    size_t len = r->root_len + 1 + strlen(name) + 1;
    char *joined = malloc(len);
    if (!joined)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
    snprintf(joined, len, "%s/%s", r->root, name);
    char *real = realpath(joined, NULL);
    free(joined);
    if (!real)
        return registry_fail_unknown(err, name);
    if (strncmp(real, r->root, r->root_len) != 0 ||
        (real[r->root_len] != '/' && r->root_len > 1)) {
        fprintf(stderr, "cellar: refused store '%.200s': resolves outside the data root\n",
                name);
        free(real);
        return registry_fail_unknown(err, name);
    }
    *out = real;
    return 0;
}

/* The identity of a store on disk. For a zarr directory, the directory and its
 * root metadata documents both count, so a rewritten store is noticed.
 * known: NULL to look for every metadata document, or an identity read
 * before, to stat only the documents it found: a document that appears or
 * goes adds or removes a directory entry, which changes the directory's
 * own mtime (dir_mtime), so the missing ones need no stat.  That keeps the
 * per-request check of an unchanged v3 store at two stats instead of five. */
static int read_identity_as(const char *path, int zarr_directory, const file_identity *known,
                            file_identity *id)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return -1;
    id->dev = st.st_dev;
    id->ino = st.st_ino;
    id->size = st.st_size;
    id->mtime = st.st_mtim;
    id->ctime = zarr_directory ? (struct timespec){0, 0} : st.st_ctim;
    id->dir_mtime = st.st_mtim;
    id->meta = 0;
    id->rewritten = 0;
    id->remote = 0;
    if (!zarr_directory)
        return 0;
    char p[PATH_MAX];
    size_t pl = strlen(path);
    if (pl + sizeof "/.zmetadata" > sizeof p)
        return -1;
    memcpy(p, path, pl);
    p[pl] = '/';
    for (size_t i = 0; i < sizeof zarr_meta / sizeof *zarr_meta; i++) {
        if (known && !(known->meta & (1u << i)))
            continue;
        strcpy(p + pl + 1, zarr_meta[i]);
        struct stat ms;
        if (stat(p, &ms) != 0)
            continue;
        id->meta |= 1u << i;
        id->size += ms.st_size;
        if (ms.st_mtim.tv_sec > id->mtime.tv_sec ||
            (ms.st_mtim.tv_sec == id->mtime.tv_sec && ms.st_mtim.tv_nsec > id->mtime.tv_nsec))
            id->mtime = ms.st_mtim;
    }
    return 0;
}

static int read_identity(const char *path, int zarr_directory, file_identity *id)
{
    return read_identity_as(path, zarr_directory, NULL, id);
}

static int timespec_equal(struct timespec a, struct timespec b)
{
    return a.tv_sec == b.tv_sec && a.tv_nsec == b.tv_nsec;
}

static int identity_equal(const file_identity *a, const file_identity *b)
{
    return a->remote == b->remote && a->dev == b->dev && a->ino == b->ino && a->size == b->size &&
           timespec_equal(a->mtime, b->mtime) && timespec_equal(a->ctime, b->ctime) &&
           timespec_equal(a->dir_mtime, b->dir_mtime) && a->meta == b->meta;
}

/* When now differs from old only where the ETag does not look (the file
 * rewritten in place, its size and mtime put back), the rewrite's time
 * (now's ctime in ns) for a rewrite mark, so the new version's ETag is not
 * the old one's; else 0. */
static int64_t rewrite_hidden_from_etag(const file_identity *old, const file_identity *now)
{
    if (old->remote || now->remote || old->size != now->size ||
        !timespec_equal(old->mtime, now->mtime) || timespec_equal(old->ctime, now->ctime))
        return 0;
    return (int64_t)now->ctime.tv_sec * 1000000000 + now->ctime.tv_nsec;
}

/* Whether a file the version read changed after it opened: zarr reads
 * note it (storage/zarr/zarr_impl.h, zarr_dir); an HDF5 file rewritten in
 * place changes the file's own identity instead, and the other files it
 * reaches (external links, raw storage, virtual sources) are checked here. */
static int store_files_changed(const store *s)
{
    int64_t at = 0;
    if (s->ext && ext_targets_changed(s->ext, &at))
        return 1;
    if (s->remote_obj)
        return remote_object_changed(s->remote_obj) != 0;
    return s->backend == BACKEND_ZARR && s->root && zarr_changed_since_open(s->root) != 0;
}

/* When the change store_files_changed saw happened (ns since the epoch). */
static int64_t store_changed_at(const store *s)
{
    int64_t at = 0;
    if (s->ext && ext_targets_changed(s->ext, &at))
        return at;
    return zarr_changed_since_open(s->root);
}

static int64_t rewrite_mark_of_locked(const registry *r, const char *name)
{
    for (size_t i = 0; i < r->n_marks; i++)
        if (!strcmp(r->marks[i].name, name))
            return r->marks[i].at;
    return 0;
}

/* Raises name's mark to at.  At REWRITE_MARKS_MAX names the oldest entry
 * goes (a later version of that store may then reuse an ETag it had
 * before its rewrite: only after 4096 other stores were rewritten). */
static void mark_rewrite_locked(registry *r, const char *name, int64_t at)
{
    for (size_t i = 0; i < r->n_marks; i++) {
        if (!strcmp(r->marks[i].name, name)) {
            /* Strictly rising: every retired version's ETag stays its own,
             * even when the change it saw predates the mark. */
            r->marks[i].at = at > r->marks[i].at ? at : r->marks[i].at + 1;
            return;
        }
    }
    char *copy = strdup(name);
    if (!copy)
        return;
    if (r->n_marks == REWRITE_MARKS_MAX) {
        free(r->marks[0].name);
        memmove(r->marks, r->marks + 1, --r->n_marks * sizeof *r->marks);
    }
    if (r->n_marks == r->cap_marks) {
        size_t cap = r->cap_marks ? r->cap_marks * 2 : 8;
        rewrite_mark *grown = realloc(r->marks, cap * sizeof *grown);
        if (!grown) {
            free(copy);
            return;
        }
        r->marks = grown;
        r->cap_marks = cap;
    }
    r->marks[r->n_marks++] = (rewrite_mark){copy, at};
}

registry *registry_new(const registry_config *cfg, cellar_error *err)
{
    char *real = cfg->root ? realpath(cfg->root, NULL) : NULL;
    struct stat st;
    if (cfg->root && (!real || stat(real, &st) != 0 || !S_ISDIR(st.st_mode))) {
        free(real);
        cellar_fail(err, CELLAR_ENOTFOUND, "data root '%s' is not a readable directory",
                    cfg->root);
        return NULL;
    }
    registry *r = calloc(1, sizeof *r);
    if (!r) {
        free(real);
        cellar_fail(err, CELLAR_ENOMEM, "out of memory");
        return NULL;
    }
    r->root = real;
    r->root_len = real ? strlen(real) : 0;
    r->cfg = *cfg;
    r->cfg.root = r->root;
    if (r->cfg.max_open_stores == 0)
        r->cfg.max_open_stores = 1;
    pthread_mutex_init(&r->lock, NULL);
    pthread_mutex_init(&r->open_lock, NULL);
    pthread_mutex_init(&r->zarr_open_lock, NULL);
    pthread_mutex_init(&r->remote_open_lock, NULL);
    pthread_cond_init(&r->released, NULL);
    return r;
}

static void store_free(store *s)
{
    if (!s)
        return;
    derived_entry *d = s->derived;
    while (d) {
        derived_entry *next = d->next;
        if (d->ready && d->free_fn)
            d->free_fn(d->value);
        free(d->key);
        free(d);
        d = next;
    }
    node_tree_free(s->root);
    ext_targets_free(s->ext);
    remote_object_free(s->remote_obj);
    pthread_mutex_destroy(&s->derived_lock);
    pthread_cond_destroy(&s->derived_cond);
    free(s->name);
    free(s->path);
    free(s);
}

void registry_free(registry *r)
{
    if (!r)
        return;
    pthread_mutex_lock(&r->lock);
    for (size_t i = 0; i < r->n_open; i++) {
        store *s = r->open[i];
        s->current = 0;
        s->reg = NULL;
        if (s->refs == 0)
            store_free(s);
    }
    r->n_open = 0;
    for (store *s = r->retired; s; s = s->next_retired)
        s->reg = NULL;
    r->retired = NULL;
    pthread_mutex_unlock(&r->lock);
    pthread_mutex_destroy(&r->lock);
    pthread_mutex_destroy(&r->open_lock);
    pthread_mutex_destroy(&r->zarr_open_lock);
    pthread_mutex_destroy(&r->remote_open_lock);
    pthread_cond_destroy(&r->released);
    for (size_t i = 0; i < r->n_marks; i++)
        free(r->marks[i].name);
    free(r->marks);
    free(r->open);
    free(r->root);
    free(r);
}


/* The version's ETag, from what the data is: a hash of the store's name, its
 * size and mtime (for zarr: of the root metadata, the newest of them), and
 * the rewrite mark.  Not the device or inode, so replicas over one shared
 * root, or over copies that keep mtimes (rsync -a, cp -p), agree; the name
 * keeps two stores of equal size and mtime apart in the answer cache. */
static void store_name_etag(store *s)
{
    const file_identity *id = &s->id;
    int n = snprintf(s->etag, sizeof s->etag, "\"%016" PRIx64 "-%llx-%llx.%09lx",
                     hash64(s->name, strlen(s->name)), (unsigned long long)id->size,
                     (unsigned long long)id->mtime.tv_sec, (unsigned long)id->mtime.tv_nsec);
    if (id->remote && n > 0 && (size_t)n < sizeof s->etag)
        n += snprintf(s->etag + n, sizeof s->etag - (size_t)n, "-t%llx",
                      (unsigned long long)id->ino);
    uint64_t targets = ext_targets_hash(s->ext);
    if (targets && n > 0 && (size_t)n < sizeof s->etag)
        n += snprintf(s->etag + n, sizeof s->etag - (size_t)n, "-x%llx",
                      (unsigned long long)targets);
    if (id->rewritten && n > 0 && (size_t)n < sizeof s->etag)
        n += snprintf(s->etag + n, sizeof s->etag - (size_t)n, "-r%llx",
                      (unsigned long long)id->rewritten);
    if (n > 0 && (size_t)n < sizeof s->etag - 1)
        snprintf(s->etag + n, sizeof s->etag - (size_t)n, "\"");
}

/* store_cache_tag: the ETag without its quotes, then device and inode. */
static void store_name_cache_tag(store *s)
{
    size_t len = strlen(s->etag);
    snprintf(s->cache_tag, sizeof s->cache_tag, "%.*s-%lx-%lx", len > 2 ? (int)(len - 2) : 0,
             s->etag + 1, (unsigned long)s->id.dev, (unsigned long)s->id.ino);
}

static int remote_zip_read(void *ctx, uint64_t off, size_t n, void *buf, cellar_error *err)
{
    return remote_object_read(ctx, off, n, buf, err);
}

static int64_t remote_zip_changed(void *ctx)
{
    return remote_object_changed(ctx);
}

static void remote_zip_close(void *ctx)
{
    remote_object_free(ctx);
}

/* A remote store's tree, from the identity remote_roots_identity gave
 * last: zarr directory stores through a remote key source, zips by
 * ranged reads of their object. */
static int open_remote(registry *r, store *s, cellar_error *err)
{
    zarr_source *src = NULL;
    int rc;
    if (s->backend == BACKEND_ZARR && zip_store_name(s->name)) {
        remote_object *o = NULL;
        rc = remote_roots_open_object(r->cfg.remote, s->name, &o, err);
        if (rc)
            return rc;
        zip_reader rd = {.ctx = o,
                         .size = remote_object_size(o),
                         .mtime = s->id.mtime,
                         .read = remote_zip_read,
                         .changed = remote_zip_changed,
                         .close = remote_zip_close};
        rc = zip_store_open_reader(&rd, &src, err);
    } else if (s->backend == BACKEND_ZARR) {
        rc = remote_roots_open_zarr(r->cfg.remote, s->name, &src, err);
    } else {
        rc = remote_roots_open_object(r->cfg.remote, s->name, &s->remote_obj, err);
        if (rc)
            return rc;
        h5_reader rd = {.ctx = s->remote_obj,
                        .size = remote_object_size(s->remote_obj),
                        .read = remote_zip_read};
        return h5_open_reader(&rd, s->name, &s->root, err);
    }
    return rc ? rc : zarr_open_source(src, s->name, &s->root, err);
}

/* ext: the other files an HDF5 store may reach (NULL: none); the version
 * takes it over when it opens. */
static int store_open(registry *r, const char *name, const char *path,
                      const file_identity *id, ext_targets *ext, store **out, cellar_error *err)
{
    *out = NULL;
    store *s = calloc(1, sizeof *s);
    if (!s)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
    s->reg = r;
    s->name = strdup(name);
    s->path = strdup(path);
    s->backend = backend_of(name);
    s->id = *id;
    pthread_mutex_init(&s->derived_lock, NULL);
    pthread_cond_init(&s->derived_cond, NULL);
    int rc = 0;
    if (!s->name || !s->path) {
        rc = cellar_fail(err, CELLAR_ENOMEM, "out of memory");
        goto done;
    }
    if (id->remote) {
        rc = open_remote(r, s, err);
        goto opened;
    }
    struct stat st;
    if (stat(path, &st) != 0) {
        rc = registry_fail_unknown(err, name);
        goto done;
    }
    if (zip_store_name(name)) {
        if (!S_ISREG(st.st_mode)) {
            rc = registry_fail_unknown(err, name);
            goto done;
        }
        zarr_source *src = NULL;
        rc = zip_store_open(path, &src, err);
        if (!rc)
            rc = zarr_open_source(src, name, &s->root, err);
    } else if (s->backend == BACKEND_ZARR) {
        if (!S_ISDIR(st.st_mode)) {
            rc = cellar_fail(err, CELLAR_EFORMAT, "store '%s' is not a zarr directory", name);
            goto done;
        }
        rc = zarr_open(path, &s->root, err);
    } else {
        if (!S_ISREG(st.st_mode)) {
            rc = registry_fail_unknown(err, name);
            goto done;
        }
        rc = h5_open_with_targets(path, ext, &s->root, err);
        if (!rc)
            s->ext = ext;
    }
opened:
    if (rc)
        goto done;
    s->kind = store_kind_detect(s->root);
    store_name_etag(s);
    store_name_cache_tag(s);
done:
    if (rc) {
        store_free(s);
        return rc;
    }
    *out = s;
    return 0;
}

static store *find_open(registry *r, const char *name, size_t *pos)
{
    for (size_t i = 0; i < r->n_open; i++) {
        if (strcmp(r->open[i]->name, name) == 0) {
            if (pos)
                *pos = i;
            return r->open[i];
        }
    }
    return NULL;
}

/* Removes entry i from the current set; returns the store if nobody holds it
 * (the caller frees it outside the lock), else NULL. Lock held. */
static store *retire_locked(registry *r, size_t i)
{
    store *s = r->open[i];
    r->open[i] = r->open[--r->n_open];
    s->current = 0;
    if (s->refs == 0)
        return s;
    s->next_retired = r->retired;
    r->retired = s;
    return NULL;
}

/* Closes least recently used idle versions while over the bound. Lock held;
 * victims are appended to *victims for freeing outside the lock. */
/* What the open versions hold derived.  Lock held. */
static size_t open_bytes_locked(registry *r)
{
    size_t total = 0;
    for (size_t i = 0; i < r->n_open; i++) {
        store *s = r->open[i];
        pthread_mutex_lock(&s->derived_lock);
        total += s->derived_bytes;
        pthread_mutex_unlock(&s->derived_lock);
    }
    return total;
}

/* Whether the open versions are past a bound: their count, or the bytes
 * they hold derived. */
static int over_bound_locked(registry *r)
{
    return r->n_open > r->cfg.max_open_stores ||
           (r->cfg.max_open_bytes && open_bytes_locked(r) > r->cfg.max_open_bytes);
}

static void enforce_bound_locked(registry *r, store **victims, size_t *n_victims,
                                 size_t max_victims)
{
    while (over_bound_locked(r) && *n_victims < max_victims) {
        size_t best = SIZE_MAX;
        for (size_t i = 0; i < r->n_open; i++) {
            if (r->open[i]->refs)
                continue;
            if (best == SIZE_MAX || r->open[i]->last_used < r->open[best]->last_used)
                best = i;
        }
        if (best == SIZE_MAX)
            return;
        store *v = retire_locked(r, best);
        if (v)
            victims[(*n_victims)++] = v;
    }
}

static int install_locked(registry *r, store *s)
{
    if (r->n_open == r->cap_open) {
        size_t cap = r->cap_open ? r->cap_open * 2 : 16;
        store **p = realloc(r->open, cap * sizeof *p);
        if (!p)
            return CELLAR_ENOMEM;
        r->open = p;
        r->cap_open = cap;
    }
    r->open[r->n_open++] = s;
    s->current = 1;
    return 0;
}

static int retired_holds_file(registry *r, const void *what)
{
    const file_identity *id = what;
    for (store *s = r->retired; s; s = s->next_retired)
        if (s->id.dev == id->dev && s->id.ino == id->ino)
            return 1;
    return 0;
}

/* Waits, for at most REGISTRY_DRAIN_SECONDS, until held(r, what) is false
 * (retired versions going as their requests end). Lock held. */
static int wait_released_locked(registry *r, int (*held)(registry *, const void *),
                                const void *what)
{
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += REGISTRY_DRAIN_SECONDS;
    while (held(r, what))
        if (pthread_cond_timedwait(&r->released, &r->lock, &deadline) == ETIMEDOUT)
            return CELLAR_EUNAVAILABLE;
    return 0;
}

/* Waits until no older version of the same (dev, ino) is alive, so libhdf5
 * does not hand back its cached view of the old contents. Lock held. */
static int wait_same_file_closed_locked(registry *r, const file_identity *id)
{
    return wait_released_locked(r, retired_holds_file, id);
}

static int retired_holds_targets(registry *r, const void *ext)
{
    for (store *s = r->retired; s; s = s->next_retired)
        if (ext_targets_stale_for(s->ext, ext))
            return 1;
    return 0;
}

/* The same for the files a new version follows (ext): current versions
 * of any store that hold an older version of one are retired first
 * (appended to victims while there is room). Lock held. */
static int wait_targets_closed_locked(registry *r, const ext_targets *ext, store **victims,
                                      size_t *n_victims, size_t max_victims)
{
    for (size_t i = 0; i < r->n_open;) {
        if (*n_victims < max_victims && ext_targets_stale_for(r->open[i]->ext, ext)) {
            store *v = retire_locked(r, i);
            if (v)
                victims[(*n_victims)++] = v;
            continue;
        }
        i++;
    }
    return wait_released_locked(r, retired_holds_targets, ext);
}

/* Takes a reference on the current version of name when it still has this
 * identity; else retires a stale one (appending it to victims when nobody
 * holds it) and returns NULL. Lock held. */
static store *take_current_locked(registry *r, const char *name, const file_identity *id,
                                  store **victims, size_t *n_victims)
{
    size_t pos = 0;
    store *cur = find_open(r, name, &pos);
    int changed = cur && store_files_changed(cur);
    /* A version retired before it answered anything (most often one opened
     * while a writer was still going) leaves no mark: replicas that opened
     * the store only once it was quiet then agree on the next one's ETag. */
    if (changed && atomic_load(&cur->answered))
        mark_rewrite_locked(r, name, store_changed_at(cur));
    int64_t hidden = cur && !changed ? rewrite_hidden_from_etag(&cur->id, id) : 0;
    if (hidden && atomic_load(&cur->answered))
        mark_rewrite_locked(r, name, hidden);
    if (cur && !changed && identity_equal(&cur->id, id)) {
        cur->refs++;
        cur->last_used = now_seconds();
        return cur;
    }
    if (cur) {
        store *freed = retire_locked(r, pos);
        if (freed)
            victims[(*n_victims)++] = freed;
    }
    return NULL;
}

static void free_victims(store **victims, size_t n)
{
    for (size_t i = 0; i < n; i++)
        store_free(victims[i]);
}

/* Opens a version whose identity did not change while it was opened: the
 * file is stat'ed, opened by path, and stat'ed again, so a file replaced or
 * still being written in between is never served under the identity (and
 * ETag) of another version.  A file that keeps changing is 503. */
static int open_stable(registry *r, const char *name, const char *path,
                       const file_identity *first, ext_targets *ext, store **out,
                       cellar_error *err)
{
    enum { ATTEMPTS = 5 };
    if (first->remote) /* the identity is the remote's, fetched once */
        return store_open(r, name, path, first, NULL, out, err);
    file_identity before = *first;
    for (int attempt = 0; attempt < ATTEMPTS; attempt++) {
        store *s = NULL;
        cellar_error open_err;
        cellar_error_clear(&open_err);
        int rc = store_open(r, name, path, &before, ext, &s, &open_err);
        if (s)
            s->ext = NULL; /* the caller's until the version is taken */
        file_identity after;
        if (read_identity(path, is_zarr_directory(name), &after) != 0) {
            store_free(s);
            return registry_fail_unknown(err, name);
        }
        if (identity_equal(&before, &after)) {
            if (rc) {
                if (err && !err->code)
                    *err = open_err;
                return rc;
            }
            s->ext = ext;
            *out = s;
            return 0;
        }
        store_free(s);
        after.rewritten = before.rewritten;
        before = after;
        struct timespec pause = {0, 20 * 1000 * 1000};
        nanosleep(&pause, NULL);
    }
    return cellar_fail(err, CELLAR_EUNAVAILABLE,
                       "store '%s' kept changing on disk while being opened; retry", name);
}

/* Opens a new version and installs it as current.  Called with its
 * backend's open lock held, so one store of a backend is opened at a time:
 * libhdf5 shares an open file between handles by (device, inode), and two
 * handles of one file must not be opened and closed concurrently. */
static int open_and_install(registry *r, const char *name, const char *path,
                            const file_identity *id, ext_targets *ext, store **out,
                            cellar_error *err)
{
    store *victims[8];
    size_t n_victims = 0;
    pthread_mutex_lock(&r->lock);
    *out = take_current_locked(r, name, id, victims, &n_victims);
    int rc = 0;
    if (!*out && !id->remote && backend_of(name) == BACKEND_HDF5 &&
        wait_same_file_closed_locked(r, id))
        rc = cellar_fail(err, CELLAR_EUNAVAILABLE, "store '%s' is being rewritten; retry",
                         name);
    if (!*out && !rc && ext) {
        pthread_mutex_unlock(&r->lock);
        free_victims(victims, n_victims); /* freed outside the lock, then waited for */
        n_victims = 0;
        pthread_mutex_lock(&r->lock);
        if (wait_targets_closed_locked(r, ext, victims, &n_victims,
                                       sizeof victims / sizeof *victims))
            rc = cellar_fail(err, CELLAR_EUNAVAILABLE,
                             "a file store '%s' reaches is being rewritten; retry", name);
        /* victims retired here are freed below, before this version opens */
    }
    pthread_mutex_unlock(&r->lock);
    free_victims(victims, n_victims);
    n_victims = 0;
    if (*out || rc)
        return rc;

    file_identity marked = *id;
    pthread_mutex_lock(&r->lock);
    marked.rewritten = rewrite_mark_of_locked(r, name);
    pthread_mutex_unlock(&r->lock);
    store *fresh = NULL;
    rc = open_stable(r, name, path, &marked, ext, &fresh, err);
    if (rc) {
        if (rc == CELLAR_EFORMAT)
            fprintf(stderr, "cellar: store '%s' is not readable: %s\n", name,
                    err ? err->detail : "");
        return rc;
    }
    pthread_mutex_lock(&r->lock);
    if (install_locked(r, fresh) != 0) {
        pthread_mutex_unlock(&r->lock);
        store_free(fresh);
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
    }
    fresh->refs = 1;
    fresh->last_used = now_seconds();
    enforce_bound_locked(r, victims, &n_victims, sizeof victims / sizeof *victims);
    pthread_mutex_unlock(&r->lock);
    free_victims(victims, n_victims);
    *out = fresh;
    return 0;
}

/* The fast path of registry_get: a reference on the current version of
 * name when the file the name reaches now (root/name, symlinks followed by
 * stat) has that version's identity.  That file (same device and inode)
 * was resolved and checked to be inside the root when the version opened,
 * so no realpath is needed; anything else (a new file, a retargeted or
 * broken symlink, a name never opened) returns NULL for the full path. */
static store *take_unchanged(registry *r, const char *name, int hdf5_names)
{
    if (!r->root || !name_is_safe(name, hdf5_names))
        return NULL;
    char joined[PATH_MAX];
    int n = snprintf(joined, sizeof joined, "%s/%s", r->root, name);
    if (n < 0 || (size_t)n >= sizeof joined)
        return NULL;
    pthread_mutex_lock(&r->lock);
    store *cur = find_open(r, name, NULL);
    file_identity known = cur ? cur->id : (file_identity){0};
    pthread_mutex_unlock(&r->lock);
    file_identity id;
    if (!cur || read_identity_as(joined, is_zarr_directory(name), &known, &id))
        return NULL;
    pthread_mutex_lock(&r->lock);
    cur = find_open(r, name, NULL);
    if (cur && identity_equal(&cur->id, &id) && !store_files_changed(cur)) {
        cur->refs++;
        cur->last_used = now_seconds();
    } else {
        cur = NULL;
    }
    pthread_mutex_unlock(&r->lock);
    return cur;
}

/* Walks a remote HDF5 file version in a probe process before libhdf5
 * sees it here, as a local one (its bytes read by this process for the
 * probe, through the remote byte cache the open then reads from too). */
static int probe_remote(registry *r, const char *name, const file_identity *id,
                        cellar_error *err)
{
    remote_object *o = NULL;
    int rc = remote_roots_open_object(r->cfg.remote, name, &o, err);
    if (rc)
        return rc;
    probe_reader rd = {.ctx = o,
                       .size = remote_object_size(o),
                       .read = remote_zip_read,
                       .free = remote_zip_close};
    probe_file_id pid = {0, (uint64_t)id->ino, (uint64_t)id->size, (int64_t)id->mtime.tv_sec, 0, 0, 0};
    char key[1100];
    snprintf(key, sizeof key, "remote:%s", name);
    return probe_cache_check_reader(r->cfg.probes, name, key, &pid, &rd, err);
}

/* registry_get of a remote store: its identity (kept for
 * --remote-recheck-seconds, fetched again at once when the version in use
 * saw an object change under it), then the version of that identity. */
static int get_remote(registry *r, const char *name, store **out, cellar_error *err)
{
    if (!name_is_safe(name, 0))
        return registry_fail_unknown(err, name);
    pthread_mutex_lock(&r->lock);
    store *cur = find_open(r, name, NULL);
    int force = cur && store_files_changed(cur);
    pthread_mutex_unlock(&r->lock);
    remote_identity rid;
    cellar_error local;
    cellar_error_clear(&local);
    int rc = remote_roots_identity(r->cfg.remote, name, is_zarr_directory(name), force, &rid,
                                   &local);
    if (rc == CELLAR_ENOTFOUND)
        return registry_fail_unknown(err, name);
    if (rc)
        return cellar_fail(err, rc, "store '%s': %s", name, local.detail);
    file_identity id = {.remote = 1,
                        .ino = (ino_t)rid.tag,
                        .size = (off_t)rid.size,
                        .mtime = {rid.mtime, 0},
                        .dir_mtime = {rid.mtime, 0}};
    store *victims[1];
    size_t n_victims = 0;
    pthread_mutex_lock(&r->lock);
    *out = take_current_locked(r, name, &id, victims, &n_victims);
    pthread_mutex_unlock(&r->lock);
    free_victims(victims, n_victims);
    if (*out)
        return 0;
    if (backend_of(name) == BACKEND_HDF5 && r->cfg.probes) {
        rc = probe_remote(r, name, &id, err);
        if (rc)
            return rc;
    }
    pthread_mutex_lock(&r->remote_open_lock);
    rc = open_and_install(r, name, rid.url, &id, NULL, out, err);
    pthread_mutex_unlock(&r->remote_open_lock);
    return rc;
}

/* The table of the other files the store file at path names (refs, as
 * its probe reported them: storage/ext_targets.h), each resolved and
 * checked, and each HDF5 file among them probed in turn (its own names
 * added), as the store's was: before libhdf5 sees it and with no lock
 * held.  A target whose probe is still running, or could not run, makes
 * the request 503 (a version would otherwise refuse it for good). */
static int targets_build(registry *r, const char *name, const char *path, const char *refs,
                         ext_targets **out, cellar_error *err)
{
    ext_targets *t = r->root ? ext_targets_new(r->root, path, r->cfg.external_links_in_root)
                             : NULL;
    int rc = t ? ext_targets_add(t, path, refs, 0) : CELLAR_ENOMEM;
    ext_target *e;
    while (!rc && (e = ext_targets_next_unprobed(t)) != NULL) {
        char *real = realpath(e->path, NULL), *sub = NULL;
        cellar_error local;
        cellar_error_clear(&local);
        int prc = real ? probe_cache_check_targets(r->cfg.probes, real + r->root_len + 1, real,
                                                   &e->id, &sub, &local)
                       : cellar_fail(&local, CELLAR_EUNAVAILABLE, "'%s' went away", e->name);
        free(real);
        if (prc && prc != CELLAR_EFORMAT) {
            free(sub);
            ext_targets_free(t);
            return cellar_fail(err, prc, "store '%s': %s", name, local.detail);
        }
        rc = ext_targets_probed(t, e, prc, local.detail, sub);
        free(sub);
    }
    if (rc) {
        ext_targets_free(t);
        return cellar_fail(err, rc, "out of memory");
    }
    *out = t;
    return 0;
}

/* registry_get of a name under the root; hdf5_names: also the names of
 * registry_get_hdf5, which are never looked up remotely. */
static int get_local(registry *r, const char *name, int hdf5_names, store **out,
                     cellar_error *err)
{
    *out = take_unchanged(r, name, hdf5_names);
    if (*out)
        return 0;
    char *path = NULL;
    cellar_error local;
    cellar_error_clear(&local);
    int rc = resolve_inside(r, name, hdf5_names, &path, &local);
    if (rc == CELLAR_ENOTFOUND && !hdf5_names && remote_roots_has_s3(r->cfg.remote))
        return get_remote(r, name, out, err);
    if (rc)
        return cellar_fail(err, rc, "%s", local.detail);
    file_identity id;
    if (read_identity(path, is_zarr_directory(name), &id) != 0) {
        free(path);
        return registry_fail_unknown(err, name);
    }
    store *victims[1];
    size_t n_victims = 0;
    ext_targets *ext = NULL;
    pthread_mutex_lock(&r->lock);
    *out = take_current_locked(r, name, &id, victims, &n_victims);
    pthread_mutex_unlock(&r->lock);
    free_victims(victims, n_victims);
    if (!*out && backend_of(name) == BACKEND_HDF5 && r->cfg.probes) {
        /* Before libhdf5 sees the version, and outside open_lock: a slow
         * probe must not hold up opening other stores. */
        probe_file_id pid = {(uint64_t)id.dev, (uint64_t)id.ino, (uint64_t)id.size,
                             (int64_t)id.mtime.tv_sec, id.mtime.tv_nsec,
                             (int64_t)id.ctime.tv_sec, id.ctime.tv_nsec};
        char *refs = NULL;
        rc = probe_cache_check_targets(r->cfg.probes, name, path, &pid, &refs, err);
        if (!rc && refs)
            rc = targets_build(r, name, path, refs, &ext, err);
        free(refs);
    }
    if (!*out && !rc) {
        pthread_mutex_t *lock =
            backend_of(name) == BACKEND_ZARR ? &r->zarr_open_lock : &r->open_lock;
        pthread_mutex_lock(lock);
        rc = open_and_install(r, name, path, &id, ext, out, err);
        pthread_mutex_unlock(lock);
    }
    if (!*out || (*out)->ext != ext)
        ext_targets_free(ext);
    free(path);
    return rc;
}

int registry_get(registry *r, const char *name, store **out, cellar_error *err)
{
    *out = NULL;
    if (r->cfg.remote && remote_roots_is_mount(r->cfg.remote, name))
        return get_remote(r, name, out, err);
    return get_local(r, name, 0, out, err);
}

int registry_get_hdf5(registry *r, const char *name, store **out, cellar_error *err)
{
    size_t len = strlen(name);
    *out = NULL;
    if (segment_is_store(name, len) || !is_hdf5_file_name(name, len))
        return registry_get(r, name, out, err);
    return get_local(r, name, 1, out, err);
}

store *store_ref(store *s)
{
    registry *r = s->reg;
    if (r)
        pthread_mutex_lock(&r->lock);
    s->refs++;
    if (r)
        pthread_mutex_unlock(&r->lock);
    return s;
}

void store_release(store *s)
{
    if (!s)
        return;
    registry *r = s->reg;
    if (!r) {
        /* The registry is gone (shutdown): last holder frees. */
        if (--s->refs == 0)
            store_free(s);
        return;
    }
    pthread_mutex_lock(&r->lock);
    int free_it = --s->refs == 0 && !s->current;
    s->last_used = now_seconds();
    if (free_it) {
        for (store **p = &r->retired; *p; p = &(*p)->next_retired) {
            if (*p == s) {
                *p = s->next_retired;
                break;
            }
        }
        pthread_cond_broadcast(&r->released);
    }
    pthread_mutex_unlock(&r->lock);
    if (free_it)
        store_free(s);
}

void registry_drop_all(registry *r)
{
    pthread_mutex_lock(&r->lock);
    size_t n = 0;
    store **victims = calloc(r->n_open ? r->n_open : 1, sizeof *victims);
    while (r->n_open) {
        store *v = retire_locked(r, r->n_open - 1);
        if (v && victims)
            victims[n++] = v;
    }
    pthread_mutex_unlock(&r->lock);
    for (size_t i = 0; i < n; i++)
        store_free(victims[i]);
    free(victims);
}

void registry_evict_idle(registry *r)
{
    double limit = now_seconds() - r->cfg.idle_seconds;
    pthread_mutex_lock(&r->lock);
    size_t n = 0;
    store **victims = calloc(r->n_open ? r->n_open : 1, sizeof *victims);
    for (size_t i = 0; i < r->n_open;) {
        store *s = r->open[i];
        if (s->refs == 0 && s->last_used < limit) {
            store *v = retire_locked(r, i);
            if (v && victims)
                victims[n++] = v;
            continue;
        }
        i++;
    }
    pthread_mutex_unlock(&r->lock);
    for (size_t i = 0; i < n; i++)
        store_free(victims[i]);
    free(victims);
}

size_t registry_open_count(registry *r)
{
    pthread_mutex_lock(&r->lock);
    size_t n = r->n_open;
    pthread_mutex_unlock(&r->lock);
    return n;
}

size_t registry_cache_bytes(registry *r)
{
    pthread_mutex_lock(&r->lock);
    size_t total = open_bytes_locked(r);
    pthread_mutex_unlock(&r->lock);
    return total;
}

probe_cache *registry_probes(registry *r)
{
    return r->cfg.probes;
}

int registry_root_ok(registry *r)
{
    return !r->root || access(r->root, R_OK | X_OK) == 0;
}

remote_roots *registry_remote(registry *r)
{
    return remote_roots_any(r->cfg.remote) ? r->cfg.remote : NULL;
}

int registry_remote_ready(registry *r, char *why, size_t size)
{
    if (!remote_roots_any(r->cfg.remote))
        return 0;
    return remote_roots_ready(r->cfg.remote, why, size);
}

/* ---- listing ---- */

typedef struct listing_acc {
    arena *a;
    store_listing *items;
    size_t n, cap;
} listing_acc;

static int listing_push(listing_acc *acc, const char *name, const struct stat *st)
{
    if (acc->n == acc->cap) {
        size_t cap = acc->cap ? acc->cap * 2 : 32;
        store_listing *p = arena_calloc(acc->a, cap, sizeof *p);
        if (!p)
            return CELLAR_ENOMEM;
        if (acc->n)
            memcpy(p, acc->items, acc->n * sizeof *p);
        acc->items = p;
        acc->cap = cap;
    }
    store_listing *e = &acc->items[acc->n++];
    e->name = arena_strdup(acc->a, name);
    e->backend = backend_of(name);
    e->kind = kind_from_suffix(name);
    e->bytes = (uint64_t)st->st_size;
    e->bytes_known = 1;
    e->mtime = st->st_mtim;
    return e->name ? 0 : CELLAR_ENOMEM;
}

static int listing_walk(registry *r, listing_acc *acc, const char *rel, int depth)
{
    if (depth > REGISTRY_LIST_MAX_DEPTH)
        return 0;
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s%s%s", r->root, rel[0] ? "/" : "", rel);
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int rc = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.')
            continue;
        char child_rel[PATH_MAX];
        int w = snprintf(child_rel, sizeof child_rel, "%s%s%s", rel, rel[0] ? "/" : "",
                         de->d_name);
        if (w < 0 || (size_t)w >= sizeof child_rel)
            continue;
        char *real = NULL;
        /* Names that are not store names (README.md, folders) are passed
         * over quietly: resolve_inside logs refusals for requests. */
        if (!name_is_safe(child_rel, 0) || resolve_inside(r, child_rel, 0, &real, NULL) != 0) {
            /* Not a store name: maybe a folder to descend into. */
            char full[PATH_MAX];
            int fw = snprintf(full, sizeof full, "%s/%s", r->root, child_rel);
            struct stat lst;
            if (fw > 0 && (size_t)fw < sizeof full && lstat(full, &lst) == 0 &&
                S_ISDIR(lst.st_mode))
                rc = listing_walk(r, acc, child_rel, depth + 1);
            if (rc)
                break;
            continue;
        }
        struct stat st;
        int ok = stat(real, &st) == 0;
        free(real);
        if (!ok)
            continue;
        int is_dir = is_zarr_directory(child_rel);
        if ((is_dir && !S_ISDIR(st.st_mode)) || (!is_dir && !S_ISREG(st.st_mode)))
            continue;
        rc = listing_push(acc, child_rel, &st);
        if (rc)
            break;
    }
    closedir(d);
    return rc;
}

static int listing_cmp(const void *a, const void *b)
{
    return strcmp(((const store_listing *)a)->name, ((const store_listing *)b)->name);
}

/* The remote roots' and mounts' stores, after the local ones (a local
 * store of the same name is served, so its entry stays). */
static int listing_remote(registry *r, listing_acc *acc, cellar_error *err)
{
    remote_listed *items = NULL;
    size_t n = 0;
    size_t local = acc->n;
    int rc = remote_roots_list(r->cfg.remote, segment_is_store, &items, &n, err);
    if (rc)
        return rc;
    for (size_t i = 0; i < n && !rc; i++) {
        int shadowed = 0;
        for (size_t j = 0; j < local && !shadowed; j++)
            shadowed = !strcmp(acc->items[j].name, items[i].name) &&
                       !remote_roots_is_mount(r->cfg.remote, items[i].name);
        if (shadowed || !name_is_safe(items[i].name, 0))
            continue;
        struct stat st;
        memset(&st, 0, sizeof st);
        st.st_size = (off_t)items[i].size;
        st.st_mtim.tv_sec = items[i].mtime;
        rc = listing_push(acc, items[i].name, &st);
    }
    for (size_t i = 0; i < n; i++)
        free(items[i].name);
    free(items);
    return rc ? cellar_fail(err, rc, "out of memory listing remote stores") : 0;
}

int registry_list(registry *r, arena *a, store_listing **out, size_t *count,
                  cellar_error *err)
{
    listing_acc acc = {.a = a};
    int rc = r->root ? listing_walk(r, &acc, "", 0) : 0;
    if (rc)
        return cellar_fail(err, rc, "could not list the data root");
    if (remote_roots_any(r->cfg.remote)) {
        rc = listing_remote(r, &acc, err);
        if (rc)
            return rc;
    }
    if (acc.n)
        qsort(acc.items, acc.n, sizeof *acc.items, listing_cmp);
    /* Kinds the suffix cannot tell (.h5, .zarr) come from opening the store. */
    for (size_t i = 0; i < acc.n; i++) {
        if (acc.items[i].kind != KIND_UNKNOWN)
            continue;
        store *s = NULL;
        if (registry_get(r, acc.items[i].name, &s, NULL) == 0) {
            acc.items[i].kind = s->kind;
            acc.items[i].bytes_known = store_total_bytes(s, &acc.items[i].bytes) == 0;
            store_release(s);
        } else if (is_zarr_directory(acc.items[i].name)) {
            acc.items[i].bytes_known = 0; /* a directory's own size says nothing */
        }
    }
    *out = acc.items;
    *count = acc.n;
    return 0;
}

/* ---- store accessors ---- */

const char *store_name(const store *s)
{
    return s->name;
}

const char *store_path(const store *s)
{
    return s->path;
}

store_kind store_get_kind(const store *s)
{
    return s->kind;
}

store_backend store_get_backend(const store *s)
{
    return s->backend;
}

node *store_root(store *s)
{
    return s->root;
}

int store_unchanged(const store *s)
{
    if (s->id.remote)
        return !store_files_changed(s) && s->reg &&
               remote_roots_still(s->reg->cfg.remote, s->name, (uint64_t)s->id.ino) &&
               (s->backend != BACKEND_ZARR ||
                remote_source_unchanged(s->reg->cfg.remote, zarr_store_source(s->root)));
    if (s->backend == BACKEND_ZARR && s->root && zarr_unsettled(s->root))
        return 0;
    file_identity now;
    return !store_files_changed(s) && read_identity_as(s->path, is_zarr_directory(s->name), &s->id, &now) == 0 &&
           identity_equal(&now, &s->id);
}

void store_answered(store *s)
{
    atomic_store(&s->answered, 1);
}

double store_settle_seconds(const store *s)
{
    if (s->backend != BACKEND_ZARR || !s->root)
        return 0;
    int64_t at = zarr_settled_at(s->root);
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    int64_t left = at - ((int64_t)now.tv_sec * 1000000000 + now.tv_nsec);
    return at && left > 0 ? (double)left / 1e9 : 0;
}

uint64_t store_bytes(const store *s)
{
    return (uint64_t)s->id.size;
}

static int build_total_bytes(void *ctx, void **value, size_t *bytes, cellar_error *err)
{
    uint64_t *total = malloc(sizeof *total);
    if (!total)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
    if (zarr_store_bytes(ctx, total) != 0)
        *total = UINT64_MAX;
    *value = total;
    *bytes = sizeof *total;
    return 0;
}

int store_total_bytes(store *s, uint64_t *out)
{
    *out = (uint64_t)s->id.size;
    if (s->backend != BACKEND_ZARR)
        return 0;
    void *value = NULL;
    if (store_derived(s, "registry:total-bytes", build_total_bytes, s->root, free, &value, NULL))
        return -1;
    *out = *(uint64_t *)value;
    return *out == UINT64_MAX ? -1 : 0;
}

struct timespec store_mtime(const store *s)
{
    return s->id.mtime;
}

const char *store_etag(const store *s)
{
    return s->etag;
}

const char *store_cache_tag(const store *s)
{
    return s->cache_tag;
}

/* ---- derived structures ---- */

static derived_entry *derived_find(store *s, const char *key)
{
    for (derived_entry *d = s->derived; d; d = d->next)
        if (strcmp(d->key, key) == 0)
            return d;
    return NULL;
}

static void derived_unlink(store *s, derived_entry *e)
{
    for (derived_entry **p = &s->derived; *p; p = &(*p)->next) {
        if (*p == e) {
            *p = e->next;
            return;
        }
    }
}

/* Closes idle versions while what the open ones hold derived is past
 * --max-open-bytes: a version grows after it opened (a tree index, a
 * view), so the bound is kept where it grows too. */
static void close_past_bytes(registry *r)
{
    store *victims[8];
    size_t n_victims = 0;
    pthread_mutex_lock(&r->lock);
    enforce_bound_locked(r, victims, &n_victims, sizeof victims / sizeof *victims);
    pthread_mutex_unlock(&r->lock);
    free_victims(victims, n_victims);
}

int store_derived(store *s, const char *key, derived_build_fn build, void *ctx,
                  derived_free_fn free_fn, void **value, cellar_error *err)
{
    *value = NULL;
    pthread_mutex_lock(&s->derived_lock);
    derived_entry *e;
    while ((e = derived_find(s, key)) != NULL && !e->ready)
        pthread_cond_wait(&s->derived_cond, &s->derived_lock);
    if (e) {
        *value = e->value;
        pthread_mutex_unlock(&s->derived_lock);
        return 0;
    }
    e = calloc(1, sizeof *e);
    char *k = strdup(key);
    if (!e || !k) {
        free(e);
        free(k);
        pthread_mutex_unlock(&s->derived_lock);
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
    }
    e->key = k;
    e->free_fn = free_fn;
    e->next = s->derived;
    s->derived = e;
    pthread_mutex_unlock(&s->derived_lock);

    void *v = NULL;
    size_t bytes = 0;
    int rc = build(ctx, &v, &bytes, err);

    pthread_mutex_lock(&s->derived_lock);
    if (rc) {
        derived_unlink(s, e);
        free(e->key);
        free(e);
    } else {
        e->value = v;
        e->bytes = bytes;
        e->ready = 1;
        s->derived_bytes += bytes;
        *value = v;
    }
    pthread_cond_broadcast(&s->derived_cond);
    pthread_mutex_unlock(&s->derived_lock);
    if (!rc && bytes && s->reg && s->reg->cfg.max_open_bytes)
        close_past_bytes(s->reg);
    return rc;
}
