/* GET/HEAD /v1/stores/{store}/zarr/{key}: the stored bytes of one key of a
 * .zarr directory store, so zarr clients (zarr-python over fsspec HTTP,
 * zarrita.js) read a store through cellar unchanged.  Keys of a store of
 * another key source (a zip: serve_source_key) are answered from the
 * source with the same validators, Range and listing; what follows is
 * about directory stores.
 *
 * The key's file is opened here and handed to the server as res->fd, which
 * sends it with sendfile (no copy, no compression); a key written in the
 * last SETTLED_SECONDS is copied and checked unchanged instead, since it
 * may be being rewritten in place.  Keys are resolved as
 * strictly as store names: plain relative segments only, opened beneath
 * the store directory (zarr_open_file_at: a symlink that leads out is not
 * even opened, a FIFO or device is never read), and the opened file must
 * lie inside the store directory (checked on the opened fd, so a symlink
 * swapped in between cannot escape).  Anything that is not a
 * regular file inside the store is 404, never 403, and so is any file that
 * is not a zarr key of the store (zarr_store_has_key: its metadata files
 * and the chunk keys of the arrays it declares; not dotfiles, .git/ or
 * editor backups).  Keys are opened
 * relative to the store directory's descriptor, and a key whose file was
 * already proven inside, unchanged since (same identity, ctime included),
 * skips the /proc check and reuses its formatted validators, so a repeated
 * key costs open, fstat and sendfile like a static file server.
 *
 * Validators are the key's own: the store version's ETag combined with the
 * file's inode, size and mtime (a chunk rewritten in place changes it), and
 * the file's mtime as Last-Modified; `Cache-Control: no-cache` because
 * chunks may be rewritten in place.  If-None-Match (then If-Modified-Since)
 * answers 304.
 *
 * Range: one `bytes=a-b`, `bytes=a-` or `bytes=-n` answers 206 with
 * Content-Range; an unsatisfiable one 416 with `Content-Range: bytes
 * * /size`.  Several ranges in one header are answered 200 with the whole
 * body (RFC 9110 14.2 lets a server ignore Range); a Range that is not in
 * bytes or not well-formed is ignored the same way.  If-Range is honoured.
 *
 * A v2 store without .zmetadata is answered `.zmetadata` with consolidated
 * metadata built from its per-node files (zarr_build_consolidated), and the
 * root zarr.json of a v3 store without consolidated metadata is answered
 * with it inlined (zarr_build_consolidated_v3); both are cached
 * per store version, so clients do not probe key by key. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "api/zarr/routes.h"
#include "api/encode/problem.h"
#include "storage/h5zarr/h5zarr.h"
#include "storage/zarr/zarr.h"
#include "common/byte_range.h"
#include "common/validators.h"

#define KEY_MAX 2048
/* How long a key of the zarr-csc view waits for its matrix's column index
 * to be built before it is answered 503 (Retry-After). */
#define VIEW_INDEX_WAIT_SECONDS 30.0

/* The zarr keys a request reads: a .zarr (or zip) store's own, or the zarr
 * view of an HDF5 store (storage/h5zarr/h5zarr.h), as a zarr tree. */
typedef struct zkeys {
    node *root;         /* the zarr tree (store_root, or the view's) */
    const char *prefix; /* the route's segment: "zarr" or "zarr-csc" */
    const char *tag;    /* names this tree's built documents among the version's */
} zkeys;



/* The dot-names a zarr store holds (v2 metadata); every other segment
 * that starts with a dot (.git, .env, .DS_Store) is not a zarr key. */
static int zarr_dot_name(const char *s, size_t n)
{
    static const char *const names[] = {".zarray", ".zgroup", ".zattrs", ".zmetadata"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (strlen(names[i]) == n && !memcmp(names[i], s, n))
            return 1;
    return 0;
}

/* What no zarr writer names a key: hidden files and folders other than
 * zarr's own, and editor backups (name~, .name.swp). */
static int segment_is_key(const char *s, size_t n)
{
    if (s[0] == '.' && !zarr_dot_name(s, n))
        return 0;
    return s[n - 1] != '~';
}

/* A key is a relative path of plain segments: no "", ".", ".." segments, no
 * leading '/', no backslash or control characters, and nothing a zarr
 * writer would not name (segment_is_key). */
static int key_is_safe(const char *key)
{
    size_t len = strlen(key);
    if (len == 0 || len > KEY_MAX || key[0] == '/')
        return 0;
    for (const char *p = key; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f || *p == '\\')
            return 0;
    const char *s = key;
    for (;;) {
        const char *e = strchr(s, '/');
        size_t seg = e ? (size_t)(e - s) : strlen(s);
        if (seg == 0 || !segment_is_key(s, seg))
            return 0;
        if (!e)
            return 1;
        s = e + 1;
    }
}

/* A copy of text for the server log: control characters as '?', so a
 * refused key cannot forge log lines. */
static const char *log_text(arena *a, const char *text)
{
    char *out = arena_strdup(a, text);
    if (!out)
        return "(out of memory)";
    for (char *p = out; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f)
            *p = '?';
    return out;
}

static const char *base_name(const char *key)
{
    const char *slash = strrchr(key, '/');
    return slash ? slash + 1 : key;
}

/* Metadata documents are JSON; everything else (chunks, shards) is bytes. */
static const char *key_content_type(const char *key)
{
    static const char *const meta[] = {".zarray", ".zgroup", ".zattrs", ".zmetadata",
                                       "zarr.json"};
    const char *b = base_name(key);
    for (size_t i = 0; i < sizeof meta / sizeof *meta; i++)
        if (!strcmp(b, meta[i]))
            return "application/json";
    return "application/octet-stream";
}

#define ETAG_MAX 192
#define DATE_MAX 40

/* The key's validator: the store version's ETag (quoted) with the file's
 * size and mtime appended inside the quotes (not its inode: replicas over
 * one root or over copies agree).  -1 when it does not fit. */
static int key_etag(const char *store_tag, const struct stat *st, char out[ETAG_MAX])
{
    size_t len = strlen(store_tag);
    if (len < 2 || len >= ETAG_MAX)
        return -1;
    memcpy(out, store_tag, len - 1);
    int n = snprintf(out + len - 1, ETAG_MAX - (len - 1),
                     "-k%" PRIx64 "-%" PRIx64 ".%lx\"", (uint64_t)st->st_size,
                     (uint64_t)st->st_mtim.tv_sec, (unsigned long)st->st_mtim.tv_nsec);
    return n < 0 || (size_t)n >= ETAG_MAX - (len - 1) ? -1 : 0;
}

#define MULTIPART_BOUNDARY "cellar-byteranges-3d9f2a7c"

typedef int (*span_reader)(const void *src, uint64_t off, size_t n, char *to);

static int read_memory(const void *src, uint64_t off, size_t n, char *to)
{
    memcpy(to, (const char *)src + off, n);
    return 0;
}

static int read_fd(const void *src, uint64_t off, size_t n, char *to)
{
    int fd = *(const int *)src;
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(fd, to + got, n - got, (off_t)(off + got));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        got += (size_t)r;
    }
    return 0;
}

/* Whether the file open as fd still has the size, mtime and ctime it had
 * when stat'ed as st (no write, truncate or rename since). */
static int unchanged_since(int fd, const struct stat *st)
{
    struct stat after;
    return fstat(fd, &after) == 0 && after.st_size == st->st_size &&
           after.st_mtim.tv_sec == st->st_mtim.tv_sec &&
           after.st_mtim.tv_nsec == st->st_mtim.tv_nsec &&
           after.st_ctim.tv_sec == st->st_ctim.tv_sec &&
           after.st_ctim.tv_nsec == st->st_ctim.tv_nsec;
}

/* The multipart/byteranges body of the parts of a body of size bytes of
 * type ctype, read from src. */
static int multipart_body(api_request *req, api_response *res, const byte_parts *pt, uint64_t size,
                          const char *ctype, span_reader read, const void *src, cellar_error *err)
{
    for (int i = 0; i < pt->n; i++) {
        if (buf_printf(&res->body,
                       "\r\n--" MULTIPART_BOUNDARY "\r\nContent-Type: %s\r\n"
                       "Content-Range: bytes %" PRIu64 "-%" PRIu64 "/%" PRIu64 "\r\n\r\n",
                       ctype, pt->first[i], pt->first[i] + pt->len[i] - 1, size) != 0)
            return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
        char *to = buf_reserve(&res->body, (size_t)pt->len[i]);
        if (!to)
            return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
        if (read(src, pt->first[i], (size_t)pt->len[i], to) != 0)
            return cellar_fail(err, CELLAR_EIO, "cannot read key '%.300s'", req->key);
        res->body.len += (size_t)pt->len[i];
    }
    if (buf_puts(&res->body, "\r\n--" MULTIPART_BOUNDARY "--\r\n") != 0)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
    res->content_type = "multipart/byteranges; boundary=" MULTIPART_BOUNDARY;
    return 0;
}

/* If-Range: the Range applies only when the validator still matches
 * (an entity tag compared strongly, or the exact Last-Modified date). */
static int if_range_holds(const char *header, const char *etag, struct timespec mtime)
{
    if (!header)
        return 1;
    while (*header == ' ')
        header++;
    if (header[0] == '"')
        return !strcmp(header, etag);
    if (!strncmp(header, "W/", 2))
        return 0;
    time_t t;
    return http_date_parse(header, &t) == 0 && t == mtime.tv_sec;
}

typedef struct validators {
    const char *etag;
    const char *last_modified; /* mtime as an HTTP date */
    struct timespec mtime;
} validators;

static int add_validators(api_request *req, api_response *res, const validators *v,
                          cellar_error *err)
{
    if (api_add_header(req, res, "ETag", v->etag) ||
        api_add_header(req, res, "Last-Modified", v->last_modified) ||
        api_add_header(req, res, "Cache-Control", "no-cache") ||
        api_add_header(req, res, "Accept-Ranges", "bytes"))
        return cellar_fail(err, CELLAR_EINTERNAL, "too many response headers");
    return 0;
}

/* 304 when the client's copy is current: If-None-Match, else
 * If-Modified-Since (whole seconds). */
static int not_modified(const api_request *req, const validators *v)
{
    const char *inm = api_request_header(req, "If-None-Match");
    if (inm)
        return etag_list_holds(inm, v->etag, 0);
    const char *ims = api_request_header(req, "If-Modified-Since");
    time_t since;
    return ims && http_date_parse(ims, &since) == 0 && v->mtime.tv_sec <= since;
}

/* The precondition that fails (RFC 9110 13.2.2: If-Match with strong
 * comparison, else If-Unmodified-Since), or NULL. */
static const char *precondition_fails(const api_request *req, const validators *v)
{
    const char *im = api_request_header(req, "If-Match");
    if (im)
        return etag_list_holds(im, v->etag, 1) ? NULL : "If-Match";
    const char *ius = api_request_header(req, "If-Unmodified-Since");
    time_t since;
    if (ius && http_date_parse(ius, &since) == 0 && v->mtime.tv_sec > since)
        return "If-Unmodified-Since";
    return NULL;
}

/* Decides status and the byte span [*first, *first + *len) of a body of
 * `size` bytes: 412 or 416 (with a problem body), 304, 206 or 200.  Adds
 * the headers. */
static int answer_span(api_request *req, api_response *res, const validators *v,
                       uint64_t size, uint64_t *first, uint64_t *len, byte_parts *pt,
                       cellar_error *err)
{
    int rc = add_validators(req, res, v, err);
    if (rc)
        return rc;
    *first = 0;
    *len = size;
    pt->n = 0;
    const char *failed = precondition_fails(req, v);
    if (failed) {
        cellar_error e;
        cellar_error_clear(&e);
        cellar_fail(&e, CELLAR_EPRECONDITION, "%s: key '%.300s' is now %s", failed, req->key,
                    v->etag);
        res->status = problem_render(&e, req->path, &res->body);
        res->content_type = PROBLEM_CONTENT_TYPE;
        *len = 0;
        return 0;
    }
    if (not_modified(req, v)) {
        res->status = 304;
        res->fd_length = size; /* the 304 states the 200's length */
        *len = 0;
        return 0;
    }
    res->status = 200;
    /* Range applies to GET only (RFC 9110 14.2). */
    const char *range = strcmp(req->method, "GET") ? NULL : api_request_header(req, "Range");
    if (!range || !if_range_holds(api_request_header(req, "If-Range"), v->etag, v->mtime))
        return 0;
    char text[96];
    range_kind kind = strchr(range, ',') ? byte_ranges_parse(range, size, pt) : byte_range_parse(range, size, first, len);
    if (kind == RANGE_PART && pt->n == 1) { /* one part left: a plain 206 */
        *first = pt->first[0];
        *len = pt->len[0];
        pt->n = 0;
    }
    if (kind == RANGE_PART && pt->n > 1) {
        res->status = 206;
        *first = 0;
        *len = 0;
        return 0;
    }
    switch (kind) {
    case RANGE_WHOLE:
        *first = 0;
        *len = size;
        return 0;
    case RANGE_PART:
        snprintf(text, sizeof text, "bytes %" PRIu64 "-%" PRIu64 "/%" PRIu64, *first,
                 *first + *len - 1, size);
        res->status = 206;
        break;
    case RANGE_UNSATISFIABLE: {
        snprintf(text, sizeof text, "bytes */%" PRIu64, size);
        cellar_error e;
        cellar_error_clear(&e);
        cellar_fail(&e, CELLAR_ERANGE, "the range '%.100s' is outside key '%.300s' (%" PRIu64
                    " bytes)", range, req->key, size);
        res->status = problem_render(&e, req->path, &res->body);
        res->content_type = PROBLEM_CONTENT_TYPE;
        *first = 0;
        *len = 0;
        break;
    }
    }
    if (api_add_header(req, res, "Content-Range", text))
        return cellar_fail(err, CELLAR_EINTERNAL, "too many response headers");
    return 0;
}

/* ---- built .zmetadata ---- */

typedef struct built_doc {
    char *text;
    size_t len;
} built_doc;

/* Builds .zmetadata for a v2 store; ctx is the version's root node. */
static int build_zmetadata(void *ctx, void **value, size_t *bytes, cellar_error *err)
{
    built_doc *doc = calloc(1, sizeof *doc);
    if (!doc)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
    int rc = zarr_build_consolidated(ctx, &doc->text, &doc->len, err);
    if (rc) {
        free(doc);
        return rc;
    }
    *value = doc;
    *bytes = sizeof *doc + doc->len;
    return 0;
}

/* Builds the root zarr.json of a v3 store with consolidated metadata
 * inlined; text stays NULL when the store has its own (serve the file). */
static int build_zarr_json(void *ctx, void **value, size_t *bytes, cellar_error *err)
{
    built_doc *doc = calloc(1, sizeof *doc);
    if (!doc)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
    cellar_error inner;
    cellar_error_clear(&inner);
    int rc = zarr_build_consolidated_v3(ctx, &doc->text, &doc->len, &inner);
    if (rc && rc != CELLAR_ENOTFOUND) {
        free(doc);
        *err = inner;
        return rc;
    }
    *value = doc;
    *bytes = sizeof *doc + doc->len;
    return 0;
}

static void free_zmetadata(void *value)
{
    built_doc *doc = value;
    if (doc)
        free(doc->text);
    free(doc);
}

/* The consolidated document built for this store version (cached), or
 * NULL text when there is nothing to build. */
static int built_doc_get(store *s, const zkeys *zk, int v3, const built_doc **out,
                         cellar_error *err)
{
    void *value = NULL;
    char key[64];
    snprintf(key, sizeof key, "%s:%s", zk->tag, v3 ? "zarr.json" : ".zmetadata");
    int rc = store_derived(s, key, v3 ? build_zarr_json : build_zmetadata, zk->root,
                           free_zmetadata, &value, err);
    *out = value;
    return rc;
}

/* Answers text (len bytes of type ctype, made by cellar for this store
 * version) with the version's ETag joined with suffix: conditionals, Range
 * and several ranges as for a key. */
static int serve_text(api_request *req, api_response *res, const char *text, size_t len,
                      const char *suffix, const char *ctype, cellar_error *err)
{
    store *s = req->store;
    char *etag = etag_join(req->arena, store_etag(s), suffix);
    if (!etag)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
    char date[DATE_MAX];
    http_date(store_mtime(s), date, sizeof date);
    validators v = {etag, date, store_mtime(s)};
    uint64_t first = 0, part = 0;
    byte_parts pt;
    int rc = answer_span(req, res, &v, len, &first, &part, &pt, err);
    if (rc)
        return rc;
    if (pt.n)
        return multipart_body(req, res, &pt, len, ctype, read_memory, text, err);
    if (res->status == 200 || res->status == 206) {
        res->content_type = ctype;
        if (buf_append(&res->body, text + first, (size_t)part) != 0)
            return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
    }
    return 0;
}

static int serve_built_doc(api_request *req, api_response *res, const built_doc *doc,
                           const char *suffix, cellar_error *err)
{
    return serve_text(req, res, doc->text, doc->len, suffix, "application/json", err);
}

/* ---- files ---- */

/* What a request needs of an opened key: its stat and its validators. */
typedef struct opened_key {
    int fd;
    struct stat st;
    char etag[ETAG_MAX];
    char date[DATE_MAX];
} opened_key;

/* Keys already proven to lie inside the store, per store version: a
 * direct-mapped table (a key's slot is its hash; a newer key takes the
 * slot), so memory stays bounded whatever clients ask for.  A slot holds the
 * file's identity as it was when /proc/self/fd showed it inside the store,
 * and the validators made from it.  An opened file with the same device,
 * inode, size, mtime and ctime is that same file, not moved (a rename or a
 * new hard link changes ctime) and not rewritten, so the per-request
 * readlink and the ETag and date formatting are skipped.  Slots are guarded
 * by striped locks: requests for different keys rarely wait on each other. */
#define KEY_SLOTS 4096
#define KEY_LOCKS 64

/* Small keys' bytes are kept in the slot too, so a repeated key costs one
 * fstatat (its identity unchanged) and no open, fstat, sendfile or close.
 * Only files unchanged for SETTLED_SECONDS are kept: a write in the same
 * timestamp tick as our read would leave mtime and ctime as they were
 * (the "racily clean" case), so a file still being written is read from
 * disk each time instead. */
#define KEPT_KEY_MAX (64 * 1024)
#define KEPT_STORE_MAX ((size_t)32 * 1024 * 1024)
#define SETTLED_SECONDS 2

typedef struct key_slot {
    uint64_t hash;
    char *text; /* "key\0etag\0date\0" in one allocation; NULL = empty */
    char *bytes; /* the file's bytes (st_size of them), or NULL */
    dev_t dev;
    ino_t ino;
    off_t size;
    struct timespec mtime, ctime;
} key_slot;

typedef struct raw_keys {
    int dirfd; /* the store directory, for openat */
    atomic_size_t kept; /* bytes held in slots, at most KEPT_STORE_MAX */
    pthread_mutex_t locks[KEY_LOCKS];
    key_slot slots[KEY_SLOTS];
} raw_keys;

static uint64_t key_hash(const char *key)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (const unsigned char *p = (const unsigned char *)key; *p; p++)
        h = (h ^ *p) * 1099511628211ull;
    return h;
}

static int same_file(const key_slot *k, const struct stat *st)
{
    return k->dev == st->st_dev && k->ino == st->st_ino && k->size == st->st_size &&
           k->mtime.tv_sec == st->st_mtim.tv_sec && k->mtime.tv_nsec == st->st_mtim.tv_nsec &&
           k->ctime.tv_sec == st->st_ctim.tv_sec && k->ctime.tv_nsec == st->st_ctim.tv_nsec;
}

/* Whether key was proven inside with the identity of o->st; then copies
 * the validators made at that time into o. */
static int raw_keys_find(raw_keys *keys, const char *key, uint64_t hash, opened_key *o)
{
    size_t i = (size_t)(hash % KEY_SLOTS);
    key_slot *k = &keys->slots[i];
    int found = 0;
    pthread_mutex_lock(&keys->locks[i % KEY_LOCKS]);
    if (k->text && k->hash == hash && !strcmp(k->text, key) && same_file(k, &o->st)) {
        const char *etag = k->text + strlen(k->text) + 1;
        const char *date = etag + strlen(etag) + 1;
        memcpy(o->etag, etag, strlen(etag) + 1);
        memcpy(o->date, date, strlen(date) + 1);
        found = 1;
    }
    pthread_mutex_unlock(&keys->locks[i % KEY_LOCKS]);
    return found;
}

/* Remembers that key, as o->st, lies inside the store, with the file's
 * bytes when given (best effort: out of memory only means the next request
 * checks again). */
static void raw_keys_put(raw_keys *keys, const char *key, uint64_t hash, const opened_key *o,
                         char *bytes)
{
    size_t kl = strlen(key) + 1, el = strlen(o->etag) + 1, dl = strlen(o->date) + 1;
    char *text = malloc(kl + el + dl);
    if (!text) {
        free(bytes);
        return;
    }
    memcpy(text, key, kl);
    memcpy(text + kl, o->etag, el);
    memcpy(text + kl + el, o->date, dl);
    size_t i = (size_t)(hash % KEY_SLOTS);
    key_slot *k = &keys->slots[i];
    pthread_mutex_lock(&keys->locks[i % KEY_LOCKS]);
    char *old = k->text, *old_bytes = k->bytes;
    size_t old_len = old_bytes ? (size_t)k->size : 0;
    *k = (key_slot){hash, text, bytes, o->st.st_dev, o->st.st_ino, o->st.st_size,
                    o->st.st_mtim, o->st.st_ctim};
    pthread_mutex_unlock(&keys->locks[i % KEY_LOCKS]);
    if (old_bytes)
        atomic_fetch_sub(&keys->kept, old_len);
    free(old);
    free(old_bytes);
}

/* The bytes of a small, settled regular file, read whole, or NULL when it
 * is not one, the store's budget is spent, or it changed while read. */
static char *read_small_key(raw_keys *keys, int fd, const struct stat *st)
{
    size_t n = (size_t)st->st_size;
    time_t now = time(NULL);
    if (st->st_size <= 0 || st->st_size > KEPT_KEY_MAX ||
        st->st_mtim.tv_sec > now - SETTLED_SECONDS || st->st_ctim.tv_sec > now - SETTLED_SECONDS)
        return NULL;
    if (atomic_fetch_add(&keys->kept, n) + n > KEPT_STORE_MAX) {
        atomic_fetch_sub(&keys->kept, n);
        return NULL;
    }
    char *bytes = malloc(n);
    if (!bytes || read_fd(&fd, 0, n, bytes) != 0 || !unchanged_since(fd, st)) {
        free(bytes);
        atomic_fetch_sub(&keys->kept, n);
        return NULL;
    }
    return bytes;
}

/* A key written this recently may be being rewritten in place, so it is
 * not handed to sendfile (which would send whatever the file holds as it
 * goes) but copied and checked unchanged after the copy.  Keys of up to
 * UNSETTLED_COPY_MAX bytes; larger ones are sent as they are. */
#define UNSETTLED_COPY_MAX ((uint64_t)16 << 20)

static int recently_changed(const struct stat *st)
{
    time_t now = time(NULL);
    return st->st_mtim.tv_sec > now - SETTLED_SECONDS || st->st_ctim.tv_sec > now - SETTLED_SECONDS;
}

/* Appends bytes [first, first + len) of the file open as fd (stat'ed as
 * st when opened) to body.  0; 1 when the file changed meanwhile or could
 * not be read whole (nothing appended); CELLAR_ENOMEM. */
static int copy_unchanged(int fd, const struct stat *st, uint64_t first, uint64_t len, buf *body)
{
    char *to = buf_reserve(body, (size_t)len ? (size_t)len : 1);
    if (!to)
        return CELLAR_ENOMEM;
    if (read_fd(&fd, first, (size_t)len, to) != 0 || !unchanged_since(fd, st))
        return 1;
    body->len += (size_t)len;
    return 0;
}
/* Whether the slot of key holds its bytes (a hint: checked again under
 * the lock by raw_keys_copy). */
static int raw_keys_has_bytes(raw_keys *keys, const char *key, uint64_t hash)
{
    size_t i = (size_t)(hash % KEY_SLOTS);
    key_slot *k = &keys->slots[i];
    pthread_mutex_lock(&keys->locks[i % KEY_LOCKS]);
    int has = k->bytes && k->hash == hash && !strcmp(k->text, key);
    pthread_mutex_unlock(&keys->locks[i % KEY_LOCKS]);
    return has;
}

/* Copies the kept bytes [first, first + len) of key into body when the
 * slot still holds key with the identity of o->st (the caller's fstatat),
 * with its validators into o.  Returns 1 when copied. */
static int raw_keys_copy(raw_keys *keys, const char *key, uint64_t hash, opened_key *o,
                         uint64_t first, uint64_t len, buf *body)
{
    size_t i = (size_t)(hash % KEY_SLOTS);
    key_slot *k = &keys->slots[i];
    int copied = 0;
    pthread_mutex_lock(&keys->locks[i % KEY_LOCKS]);
    if (k->bytes && k->hash == hash && !strcmp(k->text, key) && same_file(k, &o->st) &&
        first + len <= (uint64_t)k->size) {
        const char *etag = k->text + strlen(k->text) + 1;
        const char *date = etag + strlen(etag) + 1;
        memcpy(o->etag, etag, strlen(etag) + 1);
        memcpy(o->date, date, strlen(date) + 1);
        copied = buf_append(body, k->bytes + first, (size_t)len) == 0;
    }
    pthread_mutex_unlock(&keys->locks[i % KEY_LOCKS]);
    return copied;
}

static void raw_keys_free(void *value)
{
    raw_keys *keys = value;
    if (!keys)
        return;
    for (size_t i = 0; i < KEY_SLOTS; i++) {
        free(keys->slots[i].text);
        free(keys->slots[i].bytes);
    }
    for (size_t i = 0; i < KEY_LOCKS; i++)
        pthread_mutex_destroy(&keys->locks[i]);
    if (keys->dirfd >= 0)
        close(keys->dirfd);
    free(keys);
}

/* Takes this version's own store directory (ctx is its root node): keys
 * are opened beneath the directory the version opened, so a store
 * replaced by another under its name is never read half from each. */
static int raw_keys_build(void *ctx, void **value, size_t *bytes, cellar_error *err)
{
    raw_keys *keys = calloc(1, sizeof *keys);
    if (!keys)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
    for (size_t i = 0; i < KEY_LOCKS; i++)
        pthread_mutex_init(&keys->locks[i], NULL);
    int dir = zarr_directory_fd(ctx);
    keys->dirfd = dir < 0 ? -1 : fcntl(dir, F_DUPFD_CLOEXEC, 0);
    if (keys->dirfd < 0) {
        raw_keys_free(keys);
        return cellar_fail(err, CELLAR_EIO, "cannot open the store directory");
    }
    *value = keys;
    *bytes = sizeof *keys;
    return 0;
}

static int raw_keys_get(store *s, raw_keys **out, cellar_error *err)
{
    void *value = NULL;
    int rc = store_derived(s, "zarr-raw:keys", raw_keys_build, store_root(s),
                           raw_keys_free, &value, err);
    *out = value;
    return rc;
}

/* Whether the file open as fd lies inside the store directory open as
 * dirfd (where it is now) or, without /proc, inside dir (its canonical
 * path), judged on the opened file itself; dir/key is what was opened. */
static int fd_inside(int fd, int dirfd, const char *dir, const char *key)
{
    char link[64], real[PATH_MAX + 1], dir_now[PATH_MAX + 1];
    snprintf(link, sizeof link, "/proc/self/fd/%d", dirfd);
    ssize_t dn = readlink(link, dir_now, sizeof dir_now - 1);
    if (dn > 0) {
        dir_now[dn] = '\0';
        dir = dir_now;
    }
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, real, sizeof real - 1);
    if (n > 0) {
        real[n] = '\0';
    } else {
        char path[PATH_MAX];
        int pn = snprintf(path, sizeof path, "%s/%s", dir, key);
        char *r = pn < 0 || (size_t)pn >= sizeof path ? NULL : realpath(path, NULL);
        if (!r)
            return 0;
        snprintf(real, sizeof real, "%s", r);
        free(r);
    }
    size_t dl = strlen(dir);
    return !strncmp(real, dir, dl) && real[dl] == '/';
}

/* Opens key of the store: a regular file that stays inside, with its
 * validators.  Returns 0 with o->fd open, CELLAR_ENOTFOUND (*missing set
 * when nothing is there; errno-like reasons kept out of the detail) or
 * CELLAR_EIO. */
static int open_key(arena *a, raw_keys *keys, const char *dir, const char *store_tag,
                    const char *key, uint64_t hash, opened_key *o, int *missing)
{
    *missing = 0;
    o->fd = -1;
    int fd = -1;
    cellar_error why;
    cellar_error_clear(&why);
    int rc = zarr_open_file_at(keys->dirfd, dir, key, &fd, &o->st, &why);
    if (rc == CELLAR_EIO)
        return CELLAR_EIO;
    if (rc) {
        fprintf(stderr, "cellar: refused zarr key: %s\n", log_text(a, why.detail));
        return CELLAR_ENOTFOUND;
    }
    if (fd < 0) {
        *missing = 1;
        return CELLAR_ENOTFOUND;
    }
    if (raw_keys_find(keys, key, hash, o)) {
        /* Proven before; keep its bytes now if it was not settled then. */
        if (o->st.st_size <= KEPT_KEY_MAX && !raw_keys_has_bytes(keys, key, hash)) {
            char *bytes = read_small_key(keys, fd, &o->st);
            if (bytes)
                raw_keys_put(keys, key, hash, o, bytes);
        }
    } else {
        if (!fd_inside(fd, keys->dirfd, dir, key)) {
            fprintf(stderr, "cellar: refused zarr key '%.300s': resolves outside its store\n",
                    log_text(a, key));
            close(fd);
            return CELLAR_ENOTFOUND;
        }
        if (key_etag(store_tag, &o->st, o->etag) != 0) {
            close(fd);
            return CELLAR_EIO;
        }
        http_date(o->st.st_mtim, o->date, sizeof o->date);
        raw_keys_put(keys, key, hash, o, read_small_key(keys, fd, &o->st));
    }
    /* Regular files ignore O_NONBLOCK on Linux; cleared anyway so the
     * descriptor handed to the server behaves like any opened file. */
    fcntl(fd, F_SETFL, 0);
    o->fd = fd;
    return 0;
}

/* Answers key from its kept bytes when the file still has the identity
 * they were read with (one fstatat).  Returns 1 when answered (rc in *rc),
 * 0 to go to the file. */
static int serve_kept(api_request *req, api_response *res, raw_keys *keys, const char *key,
                      uint64_t hash, int *rc, cellar_error *err)
{
    opened_key o;
    if (fstatat(keys->dirfd, key, &o.st, 0) != 0 || !S_ISREG(o.st.st_mode))
        return 0;
    buf kept = {0};
    if (!raw_keys_copy(keys, key, hash, &o, 0, (uint64_t)o.st.st_size, &kept)) {
        buf_destroy(&kept);
        return 0;
    }
    validators v = {o.etag, o.date, o.st.st_mtim};
    uint64_t first = 0, len = 0;
    byte_parts pt;
    *rc = answer_span(req, res, &v, (uint64_t)o.st.st_size, &first, &len, &pt, err);
    if (*rc == 0 && pt.n) {
        res->stored_bytes = 1;
        *rc = multipart_body(req, res, &pt, (uint64_t)o.st.st_size, key_content_type(key),
                             read_memory, kept.data, err);
    } else if (*rc == 0 && (res->status == 200 || res->status == 206)) {
        res->content_type = key_content_type(key);
        res->stored_bytes = 1;
        if (first == 0 && len == kept.len) {
            buf_destroy(&res->body);
            res->body = kept;
            kept = (buf){0};
        } else if (buf_append(&res->body, kept.data + first, (size_t)len) != 0) {
            *rc = cellar_fail(err, CELLAR_ENOMEM, "out of memory");
        }
    }
    buf_destroy(&kept);
    return 1;
}

/* ---- keys of other sources (zip stores) ---- */

/* Why a key of an HDF5 view is missing, when it lies under a dataset the
 * view leaves out, else the plain 404. */
static int missing_key(const zkeys *zk, const char *key, const char *name, cellar_error *err)
{
    int rc = h5zarr_explain_missing(zk->root, key, err);
    if (rc)
        return rc;
    return cellar_fail(err, CELLAR_ENOTFOUND, "no key '%.300s' in zarr store '%.300s'", key,
                       name);
}

/* Reads the parts of a multipart answer from an opened key of a source. */
typedef struct source_span {
    zarr_source *src;
    zarr_key *k;
    const char *what;
} source_span;

static int read_source(const void *ctx, uint64_t off, size_t n, char *to)
{
    const source_span *sp = ctx;
    cellar_error ignored;
    cellar_error_clear(&ignored);
    return sp->src->ops->read_key(sp->src, sp->k, off, n, to, sp->what, &ignored) ? -1 : 0;
}

/* The built consolidated document to answer key with instead of the key
 * itself (a v2 .zmetadata that is missing, a v3 root zarr.json without
 * consolidated metadata), or NULL. */
static int built_instead(store *s, const zkeys *zk, const char *key, int found,
                         const built_doc **out, cellar_error *err)
{
    *out = NULL;
    int v2_missing = !found && !strcmp(key, ".zmetadata") && zarr_format(zk->root) == 2;
    int v3_root = found && !strcmp(key, "zarr.json");
    if (!v2_missing && !v3_root)
        return 0;
    const built_doc *doc = NULL;
    int rc = built_doc_get(s, zk, v3_root, &doc, err);
    if (!rc && doc->text)
        *out = doc;
    return rc;
}

/* Answers a key of a store whose keys come from a source other than a
 * directory (a zip, storage/zip/zip_store.h): validated like a file key,
 * with the version's ETag joined with the key's CRC-32 and size and the
 * store's Last-Modified.  Bytes stored as they are in the container file
 * are sent from it (sendfile of their byte range), others (deflated)
 * decoded into the body; a zip written in the last SETTLED_SECONDS is
 * copied, as a recently written file key is. */
static int serve_source_key(api_request *req, api_response *res, const zkeys *zk,
                            const char *key, cellar_error *err)
{
    store *s = req->store;
    const char *name = store_name(s);
    zarr_source *src = zarr_store_source(zk->root);
    zarr_key k;
    int rc = src->ops->open_key(src, key, &k, err);
    if (rc)
        return rc;
    const built_doc *built = NULL;
    rc = built_instead(s, zk, key, k.found, &built, err);
    if (rc || built) {
        src->ops->close_key(src, &k);
        return rc ? rc : serve_built_doc(req, res, built, k.found ? "consolidated" : "zmetadata",
                                         err);
    }
    if (!k.found) {
        src->ops->close_key(src, &k);
        return missing_key(zk, key, name, err);
    }
    char suffix[48];
    snprintf(suffix, sizeof suffix, "z%08" PRIx32 "-%" PRIx64, k.has_crc32 ? k.crc32 : 0,
             k.size);
    char *etag = etag_join(req->arena, store_etag(s), suffix);
    char date[DATE_MAX];
    http_date(k.mtime, date, sizeof date);
    validators v = {etag, date, k.mtime};
    uint64_t first = 0, len = 0;
    byte_parts pt;
    rc = etag ? answer_span(req, res, &v, k.size, &first, &len, &pt, err)
              : cellar_fail(err, CELLAR_ENOMEM, "out of memory");
    if (rc || (res->status != 200 && res->status != 206))
        goto done;
    res->content_type = key_content_type(key);
    res->stored_bytes = 1;
    source_span sp = {src, &k, key};
    time_t now = time(NULL);
    int recent = k.mtime.tv_sec > now - SETTLED_SECONDS;
    if (pt.n) {
        rc = multipart_body(req, res, &pt, k.size, key_content_type(key), read_source, &sp, err);
    } else if (k.fd >= 0 && !(recent && len <= UNSETTLED_COPY_MAX)) {
        res->fd = fcntl(k.fd, F_DUPFD_CLOEXEC, 0);
        if (res->fd < 0)
            rc = cellar_fail(err, CELLAR_EIO, "cannot send key '%.300s' of '%.300s' now", key,
                             name);
        res->fd_offset = k.offset + first;
        res->fd_length = len;
    } else {
        char *to = buf_reserve(&res->body, (size_t)len);
        if (!to)
            rc = cellar_fail(err, CELLAR_ENOMEM, "out of memory");
        else if (!(rc = src->ops->read_key(src, &k, first, (size_t)len, to, key, err)))
            res->body.len += (size_t)len;
    }
done:
    src->ops->close_key(src, &k);
    return rc;
}

/* ---- directory indexes ---- */

/* Appends text as a URL path with only what would change its meaning
 * percent-encoded (controls, '#', '%', '?'): fsspec takes the names from
 * the links without decoding them, so anything more (a space as %20)
 * would reach zarr as a different name; it quotes what it requests
 * itself, as browsers do. */
static int put_url_path(buf *out, const char *text)
{
    static const char hex[] = "0123456789ABCDEF";
    for (const unsigned char *p = (const unsigned char *)text; *p; p++) {
        int plain = *p >= 0x20 && *p != 0x7f && !strchr("#%?", *p);
        char esc[3] = {'%', hex[*p >> 4], hex[*p & 15]};
        if (plain ? buf_putc(out, (char)*p) : buf_append(out, esc, 3))
            return -1;
    }
    return 0;
}

/* Appends text escaped for HTML text and attribute values. */
static int put_html(buf *out, const char *text)
{
    for (const char *p = text; *p; p++) {
        const char *e = *p == '<' ? "&lt;" : *p == '>' ? "&gt;" : *p == '&' ? "&amp;"
                      : *p == '"' ? "&quot;" : *p == '\'' ? "&#39;" : NULL;
        if (e ? buf_puts(out, e) : buf_putc(out, *p))
            return -1;
    }
    return 0;
}

/* The HTML index of directory rel of the store, as static file servers
 * answer a directory (fsspec's HTTP filesystem lists a directory by
 * reading the links of its page): one absolute link per entry the raw
 * route serves, directories ending in '/'. */
static int index_page(api_request *req, const zkeys *zk, const char *rel, const char **names,
                      size_t n, buf *out)
{
    buf base = {0};
    int rc = buf_puts(&base, "/v1/stores/") || put_url_path(&base, store_name(req->store)) ||
             buf_putc(&base, '/') || buf_puts(&base, zk->prefix) || buf_putc(&base, '/') || (rel[0] && (put_url_path(&base, rel) ||
                                                      buf_putc(&base, '/'))) ||
             buf_putc(&base, '\0');
    if (!rc) {
        rc = buf_puts(out, "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>Index of ") ||
             put_html(out, base.data) || buf_puts(out, "</title></head>\n<body><h1>Index of ") ||
             put_html(out, base.data) || buf_puts(out, "</h1>\n<ul>\n");
    }
    for (size_t i = 0; !rc && i < n; i++) {
        buf href = {0};
        rc = buf_puts(&href, base.data) || put_url_path(&href, names[i]) || buf_putc(&href, '\0') ||
             buf_puts(out, "<li><a href=\"") || put_html(out, href.data) || buf_puts(out, "\">") ||
             put_html(out, names[i]) || buf_puts(out, "</a></li>\n");
        buf_destroy(&href);
    }
    if (!rc)
        rc = buf_puts(out, "</ul>\n</body></html>\n");
    buf_destroy(&base);
    return rc ? -1 : 0;
}

/* Answers directory rel ("" for the store's own) with its index; 0 with
 * *answered = 0 when rel is no directory of the store. */
static int serve_directory(api_request *req, api_response *res, const zkeys *zk, const char *rel,
                           int *answered, cellar_error *err)
{
    *answered = 0;
    const char **names = NULL;
    size_t n = 0;
    cellar_error local;
    cellar_error_clear(&local);
    int rc = zarr_key_directory(zk->root, rel, req->arena, &names, &n, &local);
    if (rc == CELLAR_ENOTFOUND)
        return 0;
    if (rc) {
        *err = local;
        return rc;
    }
    *answered = 1;
    buf page = {0};
    if (index_page(req, zk, rel, names, n, &page) != 0) {
        buf_destroy(&page);
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
    }
    char suffix[24];
    snprintf(suffix, sizeof suffix, "d%016" PRIx64, key_hash(page.data ? page.data : ""));
    rc = serve_text(req, res, page.data ? page.data : "", page.len, suffix,
                    "text/html; charset=utf-8", err);
    buf_destroy(&page);
    return rc;
}

/* The directory a key names: "" (the store), "a/b/" with its slash, or
 * NULL when key does not end like one. */
static char *directory_of(arena *a, const char *key)
{
    size_t n = strlen(key);
    if (n == 0)
        return arena_strdup(a, "");
    if (key[n - 1] != '/')
        return NULL;
    char *rel = arena_strdup(a, key);
    if (rel)
        rel[n - 1] = '\0';
    return rel && key_is_safe(rel) ? rel : NULL;
}

/* Answers req->key of the zarr keys zk of the request's store. */
static int serve_zarr_key(api_request *req, api_response *res, const zkeys *zk,
                          cellar_error *err)
{
    int rc;
    store *s = req->store;
    const char *name = store_name(s);
    const char *key = req->key ? req->key : "";
    const char *dir = directory_of(req->arena, key);
    if (dir || !*key) {
        int answered = 0;
        rc = dir ? serve_directory(req, res, zk, dir, &answered, err) : 0;
        if (rc || answered)
            return rc;
        return cellar_fail(err, CELLAR_ENOTFOUND, "no directory '%.300s' in zarr store '%.300s'",
                           key, name);
    }
    if (!key_is_safe(key)) {
        fprintf(stderr, "cellar: refused zarr key '%.300s' of '%.300s' (not a plain relative key)\n",
                log_text(req->arena, key), name);
        return cellar_fail(err, CELLAR_ENOTFOUND, "no key '%.300s' in zarr store '%.300s'", key,
                           name);
    }
    /* Only what zarr reads: metadata files and declared chunk keys; never
     * .git/config, .env, editor backups or other files kept beside. */
    if (!zarr_store_has_key(zk->root, key)) {
        int answered = 0;
        rc = serve_directory(req, res, zk, key, &answered, err);
        if (rc || answered)
            return rc;
        if (h5zarr_is_view(zk->root))
            return missing_key(zk, key, name, err);
        fprintf(stderr, "cellar: refused zarr key '%.300s' of '%.300s' (not a zarr key)\n",
                log_text(req->arena, key), name);
        return cellar_fail(err, CELLAR_ENOTFOUND, "no key '%.300s' in zarr store '%.300s'", key,
                           name);
    }
    if (zarr_directory_fd(zk->root) < 0)
        return serve_source_key(req, res, zk, key, err);
    raw_keys *keys = NULL;
    rc = raw_keys_get(s, &keys, err);
    if (rc)
        return rc;
    uint64_t hash = key_hash(key);
    /* The root zarr.json may be answered with a built document instead. */
    if (strcmp(key, "zarr.json") != 0 && raw_keys_has_bytes(keys, key, hash) &&
        serve_kept(req, res, keys, key, hash, &rc, err))
        return rc;
    opened_key o;
    int missing = 0;
    int orc = open_key(req->arena, keys, store_path(s), store_etag(s), key, hash, &o, &missing);
    const built_doc *built = NULL;
    if (orc && missing && !strcmp(key, ".zmetadata") && zarr_format(zk->root) == 2) {
        rc = built_doc_get(s, zk, 0, &built, err);
        return rc ? rc : serve_built_doc(req, res, built, "zmetadata", err);
    }
    /* A v3 store without consolidated metadata: its root zarr.json is
     * answered with every node's document inlined. */
    if (!orc && !strcmp(key, "zarr.json")) {
        rc = built_doc_get(s, zk, 1, &built, err);
        if (rc) {
            close(o.fd);
            return rc;
        }
        if (built->text) {
            close(o.fd);
            return serve_built_doc(req, res, built, "consolidated", err);
        }
    }
    if (orc == CELLAR_EIO)
        return cellar_fail(err, CELLAR_EIO, "cannot open key '%.300s' of '%.300s'", key, name);
    if (orc)
        return cellar_fail(err, CELLAR_ENOTFOUND, "no key '%.300s' in zarr store '%.300s'", key,
                           name);

    validators v = {o.etag, o.date, o.st.st_mtim};
    uint64_t first = 0, len = 0;
    byte_parts pt;
    rc = answer_span(req, res, &v, (uint64_t)o.st.st_size, &first, &len, &pt, err);
    if (rc || (res->status != 200 && res->status != 206)) {
        close(o.fd);
        return rc;
    }
    if (pt.n) {
        res->stored_bytes = 1;
        rc = multipart_body(req, res, &pt, (uint64_t)o.st.st_size, key_content_type(key), read_fd,
                            &o.fd, err);
        close(o.fd);
        return rc;
    }
    res->content_type = key_content_type(key);
    if (recently_changed(&o.st) && len <= UNSETTLED_COPY_MAX) {
        res->stored_bytes = 1;
        rc = copy_unchanged(o.fd, &o.st, first, len, &res->body);
        close(o.fd);
        if (rc == 1)
            return cellar_fail(err, CELLAR_EUNAVAILABLE,
                               "key '%.300s' of '%.300s' changed while it was read; retry", key,
                               name);
        return rc ? cellar_fail(err, rc, "cannot read key '%.300s' of '%.300s'", key, name) : 0;
    }
    res->fd = o.fd;
    res->fd_offset = first;
    res->fd_length = len;
    return 0;
}

/* The zarr keys of the request's store: its own (a .zarr or zip store), or
 * the zarr view of an HDF5 store (csc: CSR matrices as CSC). */
static int zarr_keys_of(api_request *req, int csc, zkeys *zk, cellar_error *err)
{
    store *s = req->store;
    zk->prefix = csc ? "zarr-csc" : "zarr";
    if (store_get_backend(s) != BACKEND_HDF5) {
        if (csc)
            return cellar_fail(err, CELLAR_ENOTFOUND,
                               "store '%.300s' is a zarr store: zarr-csc/ serves the zarr view of "
                               "HDF5 stores, read its keys under zarr/",
                               store_name(s));
        zk->root = store_root(s);
        zk->tag = "zarr-raw";
        return 0;
    }
    const api_config *cfg = req->config;
    h5zarr_options o = {
        .csc = csc,
        .index = {.cache_dir = cfg ? cfg->cache_dir : NULL,
                  .submit = cfg ? cfg->submit_background : NULL,
                  .submit_ctx = cfg ? cfg->background_ctx : NULL,
                  .max_bytes = cfg ? cfg->column_index_max_bytes : 0},
        .index_wait_seconds = VIEW_INDEX_WAIT_SECONDS,
        .max_chunk_bytes = cfg ? cfg->max_response_bytes : 0,
    };
    zk->tag = csc ? "h5zarr-csc" : "h5zarr";
    return h5zarr_view(s, &o, &zk->root, err);
}

static int serve_route(api_request *req, api_response *res, int csc, cellar_error *err)
{
    /* No parameter check: a key is a file, and signed or cache-busting
     * URLs (?token=..., ?v=3) that zarrita.js and fsspec send must reach
     * it, as on a static file server. */
    int rc = api_open_store(req, err);
    if (rc)
        return rc;
    zkeys zk;
    rc = zarr_keys_of(req, csc, &zk, err);
    return rc ? rc : serve_zarr_key(req, res, &zk, err);
}

int api_zarr_raw(api_request *req, api_response *res, cellar_error *err)
{
    return serve_route(req, res, 0, err);
}

int api_zarr_csc(api_request *req, api_response *res, cellar_error *err)
{
    return serve_route(req, res, 1, err);
}
