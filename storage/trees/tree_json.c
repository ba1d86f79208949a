/* TreeData trees from JSON text or zarr columns: see storage/trees/tree_json.h. */
#include "storage/trees/tree_json.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <yajl/yajl_gen.h>
#include <yajl/yajl_parse.h>

#include "common/arena.h"
#include "common/dtoa.h"

static const char empty_attrs[] = "{}";

enum { POOL_CHUNK = 64 * 1024, ERR_ID_MAX = 120 };

static int fail_nomem(cellar_error *err)
{
    return cellar_fail(err, CELLAR_ENOMEM, "out of memory while reading a tree");
}

/* ---- the bare-token filter in front of yajl -------------------------------
 * Python's json.dumps writes NaN, Infinity and -Infinity, which yajl (and
 * JSON) reject.  The filter tracks strings, hands yajl the input unchanged
 * except that those three bare tokens become null, and bounds the length of
 * every token so that yajl never buffers more than that.  Runs of input go
 * to yajl in one call each; only a token that must be replaced, or one
 * that is cut by the end of a piece, splits a run (a call per number cost
 * a third of the parse). */

enum { F_OUT, F_STR, F_ESC, F_BARE };

typedef struct jfilter {
    yajl_handle h;
    int state;
    size_t str_len;
    char tok[TREE_JSON_MAX_BARE + 1];
    size_t tok_len;
    int tok_held;            /* the token's first bytes are in tok (an earlier piece) */
    unsigned long long pos;  /* input bytes before the current piece */
    int rc;                  /* first failure, sticky */
    int *cb_rc;              /* where the callbacks record their failure */
    cellar_error *err;
} jfilter;

static int is_bare(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '-' || c == '+' || c == '.';
}

static int jf_yajl(jfilter *f, const char *p, size_t n, unsigned long long at)
{
    if (n == 0 || f->rc < 0)
        return f->rc;
    yajl_status st = yajl_parse(f->h, (const unsigned char *)p, n);
    if (st == yajl_status_ok)
        return 0;
    if (st == yajl_status_client_canceled) {
        f->rc = *f->cb_rc < 0 ? *f->cb_rc
                              : cellar_fail(f->err, CELLAR_EINTERNAL, "tree JSON parse stopped");
        return f->rc;
    }
    unsigned char *msg = yajl_get_error(f->h, 0, NULL, 0);
    for (size_t k = msg ? strlen((char *)msg) : 0; k > 0 && (msg[k - 1] == '\n' || msg[k - 1] == ' ');)
        msg[--k] = '\0';
    f->rc = cellar_fail(f->err, CELLAR_EFORMAT, "invalid tree JSON near byte %llu: %s",
                        at + (unsigned long long)yajl_get_bytes_consumed(f->h),
                        msg ? (const char *)msg : "parse error");
    if (msg)
        yajl_free_error(f->h, msg);
    return f->rc;
}

static int is_nonfinite(const char *s, size_t n)
{
    return (n == 3 && memcmp(s, "NaN", 3) == 0) || (n == 8 && memcmp(s, "Infinity", 8) == 0) ||
           (n == 9 && memcmp(s, "-Infinity", 9) == 0);
}

/* The held token, whole now, to yajl (as null when it is NaN or +-Infinity). */
static int jf_emit_tok(jfilter *f, unsigned long long at)
{
    f->tok_held = 0;
    if (is_nonfinite(f->tok, f->tok_len))
        return jf_yajl(f, "null", 4, at);
    return jf_yajl(f, f->tok, f->tok_len, at);
}

/* Skips string bytes from p[i]; returns the index of the closing quote or
 * backslash, or n. */
static size_t jf_string_run(jfilter *f, const char *p, size_t i, size_t n)
{
    size_t j = i;
    while (j < n && p[j] != '"' && p[j] != '\\')
        j++;
    if (j - i > TREE_JSON_MAX_STRING - f->str_len) {
        f->rc = cellar_fail(f->err, CELLAR_EFORMAT,
                            "tree JSON has a string longer than %u bytes near byte %llu",
                            TREE_JSON_MAX_STRING,
                            f->pos + i + (TREE_JSON_MAX_STRING - f->str_len));
        return n;
    }
    f->str_len += j - i;
    return j;
}

static int jf_feed(jfilter *f, const char *p, size_t n)
{
    size_t run = 0; /* p[run ..] not given to yajl yet */
    size_t ts = 0;  /* where the current bare token starts in p (when not held) */
    for (size_t i = 0; i < n && f->rc == 0; i++) {
        unsigned char c = (unsigned char)p[i];
        switch (f->state) {
        case F_STR:
            i = jf_string_run(f, p, i, n);
            if (i < n && f->rc == 0)
                f->state = p[i] == '"' ? F_OUT : F_ESC;
            continue;
        case F_ESC:
            f->state = F_STR;
            f->str_len++;
            continue;
        case F_BARE:
            if (is_bare(c)) {
                if (f->tok_len == TREE_JSON_MAX_BARE)
                    f->rc = cellar_fail(f->err, CELLAR_EFORMAT,
                                        "invalid tree JSON near byte %llu: a bare token longer "
                                        "than %d bytes",
                                        f->pos + i, TREE_JSON_MAX_BARE);
                else if (f->tok_held)
                    f->tok[f->tok_len++] = (char)c;
                else
                    f->tok_len++;
                continue;
            }
            f->state = F_OUT;
            if (f->tok_held) {
                if (jf_emit_tok(f, f->pos + i) < 0)
                    return f->rc;
                run = i;
            } else if (is_nonfinite(p + ts, f->tok_len)) {
                if (jf_yajl(f, p + run, ts - run, f->pos + run) < 0 ||
                    jf_yajl(f, "null", 4, f->pos + ts) < 0)
                    return f->rc;
                run = i;
            }
            break;
        default:
            break;
        }
        if (c == '"') {
            f->state = F_STR;
            f->str_len = 0;
        } else if (is_bare(c)) {
            f->state = F_BARE;
            f->tok_held = 0;
            f->tok_len = 1;
            ts = i;
        }
    }
    if (f->rc == 0) {
        if (f->state == F_BARE && !f->tok_held) {
            /* The token may go on in the next piece: held back whole. */
            jf_yajl(f, p + run, ts - run, f->pos + run);
            memcpy(f->tok, p + ts, n - ts);
            f->tok_held = 1;
        } else if (f->state != F_BARE) {
            jf_yajl(f, p + run, n - run, f->pos + run);
        }
    }
    f->pos += n;
    return f->rc;
}

static int jf_finish(jfilter *f)
{
    if (f->rc == 0 && f->state == F_BARE) {
        f->state = F_OUT;
        if (f->tok_held)
            jf_emit_tok(f, f->pos);
    }
    if (f->rc < 0)
        return f->rc;
    /* yajl finishes without a word when a string opened after the value
     * never closes ('{}"...'): trailing bytes all the same. */
    if (f->state == F_STR || f->state == F_ESC) {
        f->rc = cellar_fail(f->err, CELLAR_EFORMAT,
                            "invalid tree JSON: it ends inside a string (%llu bytes)", f->pos);
        return f->rc;
    }
    yajl_status st = yajl_complete_parse(f->h);
    if (st == yajl_status_ok)
        return 0;
    if (st == yajl_status_client_canceled) {
        f->rc = *f->cb_rc < 0 ? *f->cb_rc
                              : cellar_fail(f->err, CELLAR_EINTERNAL, "tree JSON parse stopped");
        return f->rc;
    }
    f->rc = cellar_fail(f->err, CELLAR_EFORMAT, "invalid tree JSON: it ends too early (%llu bytes)",
                        f->pos);
    return f->rc;
}

/* ---- capture: one attribute value re-generated compact -------------------- */

typedef struct capture {
    yajl_gen g;
    int depth;           /* open containers of the value being captured */
    int require_object;  /* a value at depth 0 must be an object */
    int key_is_length;   /* the last key at depth 1 was "length" */
    double length;       /* numeric top-level "length", else NAN */
    int rc;
    cellar_error *err;
    const char *what;    /* for messages: "node 'x'", set by the caller */
    /* When set, called to fill `what` just before a message uses it, so
     * that the common case formats nothing. */
    void (*describe)(void *ctx);
    void *describe_ctx;
} capture;

static const char *cap_what(capture *c)
{
    if (c->describe)
        c->describe(c->describe_ctx);
    return c->what;
}

static int cap_gen(capture *c, yajl_gen_status st)
{
    if (st == yajl_gen_status_ok)
        return 1;
    c->rc = cellar_fail(c->err, CELLAR_EINTERNAL, "re-encoding the attributes of %s failed (%d)",
                        cap_what(c), (int)st);
    return 0;
}

static int cap_scalar_ok(capture *c)
{
    if (c->depth == 0 && c->require_object) {
        c->rc = cellar_fail(c->err, CELLAR_EFORMAT, "the attributes of %s are not a JSON object",
                            cap_what(c));
        return 0;
    }
    return 1;
}

static int cap_null(void *ctx)
{
    capture *c = ctx;
    return cap_scalar_ok(c) && cap_gen(c, yajl_gen_null(c->g));
}

static int cap_bool(void *ctx, int v)
{
    capture *c = ctx;
    return cap_scalar_ok(c) && cap_gen(c, yajl_gen_bool(c->g, v));
}

static double tree_json_number(const char *s, size_t n)
{
    /* A plain decimal of at most 15 digits is an integer below 2^53 over a
     * power of ten, both exact doubles, and IEEE division rounds the
     * quotient correctly, as strtod does (Clinger's fast path). */
    static const double p10[] = {1e0, 1e1, 1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15};
    size_t i = n > 0 && s[0] == '-';
    uint64_t m = 0;
    int digits = 0, frac = -1;
    for (; i < n; i++) {
        if (s[i] >= '0' && s[i] <= '9' && digits < 15) {
            m = m * 10 + (uint64_t)(s[i] - '0');
            digits++;
            frac += frac >= 0;
        } else if (s[i] == '.' && frac < 0) {
            frac = 0;
        } else {
            break;
        }
    }
    if (i == n && digits > 0) {
        double v = (double)m / p10[frac > 0 ? frac : 0];
        return s[0] == '-' ? -v : v;
    }
    char buf[TREE_JSON_MAX_BARE + 1];
    size_t k = n < TREE_JSON_MAX_BARE ? n : TREE_JSON_MAX_BARE;
    memcpy(buf, s, k);
    buf[k] = '\0';
    return strtod(buf, NULL);
}

static int cap_number(void *ctx, const char *s, size_t n)
{
    capture *c = ctx;
    if (!cap_scalar_ok(c))
        return 0;
    if (c->depth == 1 && c->key_is_length)
        c->length = tree_json_number(s, n);
    return cap_gen(c, yajl_gen_number(c->g, s, n));
}

static int cap_string(void *ctx, const unsigned char *s, size_t n)
{
    capture *c = ctx;
    return cap_scalar_ok(c) && cap_gen(c, yajl_gen_string(c->g, s, n));
}

static int cap_open(capture *c, int is_map)
{
    if (c->depth == 0 && c->require_object && !is_map)
        return cap_scalar_ok(c);
    if (c->depth >= TREE_JSON_MAX_ATTR_DEPTH) {
        c->rc = cellar_fail(c->err, CELLAR_EFORMAT,
                            "the attributes of %s nest deeper than %d levels", cap_what(c),
                            TREE_JSON_MAX_ATTR_DEPTH);
        return 0;
    }
    c->depth++;
    return cap_gen(c, is_map ? yajl_gen_map_open(c->g) : yajl_gen_array_open(c->g));
}

static int cap_start_map(void *ctx) { return cap_open(ctx, 1); }
static int cap_start_array(void *ctx) { return cap_open(ctx, 0); }

static int cap_map_key(void *ctx, const unsigned char *s, size_t n)
{
    capture *c = ctx;
    if (c->depth == 1) {
        c->key_is_length = n == 6 && memcmp(s, "length", 6) == 0;
        if (c->key_is_length)
            c->length = NAN;
    }
    return cap_gen(c, yajl_gen_string(c->g, s, n));
}

static int cap_end_map(void *ctx)
{
    capture *c = ctx;
    c->depth--;
    return cap_gen(c, yajl_gen_map_close(c->g));
}

static int cap_end_array(void *ctx)
{
    capture *c = ctx;
    c->depth--;
    return cap_gen(c, yajl_gen_array_close(c->g));
}

static const yajl_callbacks cap_callbacks = {
    cap_null,   cap_bool,      NULL,        NULL,        cap_number,      cap_string,
    cap_start_map, cap_map_key, cap_end_map, cap_start_array, cap_end_array,
};

static int cap_init(capture *c)
{
    memset(c, 0, sizeof *c);
    c->g = yajl_gen_alloc(NULL);
    c->length = NAN;
    c->what = "a tree node";
    return c->g ? 0 : -1;
}

static void cap_destroy(capture *c)
{
    if (c->g)
        yajl_gen_free(c->g);
    c->g = NULL;
}

static void cap_begin(capture *c, cellar_error *err, const char *what)
{
    yajl_gen_clear(c->g);
    yajl_gen_reset(c->g, NULL);
    c->depth = 0;
    c->key_is_length = 0;
    c->length = NAN;
    c->rc = 0;
    c->err = err;
    c->what = what;
    c->describe = NULL;
}

static void cap_result(capture *c, const char **text, size_t *len)
{
    const unsigned char *p = NULL;
    size_t n = 0;
    yajl_gen_get_buf(c->g, &p, &n);
    *text = (const char *)p;
    *len = n;
}

/* Prefixes the detail already in err with `prefix: `. */
static void err_prefix(cellar_error *err, const char *prefix)
{
    if (!err || !err->code)
        return;
    char detail[CELLAR_ERROR_DETAIL_MAX];
    int code = err->code;
    snprintf(detail, sizeof detail, "%s", err->detail);
    cellar_error_clear(err);
    cellar_fail(err, code, "%s: %s", prefix, detail);
}

/* Parses one JSON text into the capture (as a value at the capture's depth). */
static int cap_parse_text(capture *c, const char *text, size_t len)
{
    int rc = 0;
    jfilter f = {0};
    f.err = c->err;
    f.cb_rc = &c->rc;
    f.h = yajl_alloc(&cap_callbacks, NULL, c);
    if (!f.h)
        return fail_nomem(c->err);
    if ((rc = jf_feed(&f, text, len)) == 0)
        rc = jf_finish(&f);
    yajl_free(f.h);
    if (rc < 0 && c->rc == 0) {
        /* The text itself is bad: the callbacks' messages name c->what already. */
        c->rc = rc;
        err_prefix(c->err, cap_what(c));
    }
    return rc;
}

/* ---- the builder ----------------------------------------------------------- */

typedef struct node_head {
    int32_t v;             /* node number (interning order) */
    int32_t decl;          /* declaration number, -1 until declared */
    const char *attrs;     /* attribute text (in the arena, or static) */
} node_head;

enum { BATCH = 16 };

typedef struct pending_add {
    int is_edge, same_src;
    uint32_t h1, h2;       /* hashes of the id (or source) and destination */
    uint32_t ht;           /* hash of the attribute text */
    size_t a, alen, d, dlen, t, tlen; /* the ids and attribute text in btext */
    double length;
} pending_add;

typedef struct dedup_slot {
    const char *text;
    uint32_t hash;
    uint32_t len;
} dedup_slot;

struct tree_builder {
    arena *a;              /* the future index's arena */
    char *what;
    char *pool;            /* string pool chunk in `a` */
    size_t pool_left;
    int32_t n, n_decl;
    /* The nodes in interning order, one node_head each followed by the id
     * (NUL-terminated, padded to 8 bytes): what a lookup and a declaration
     * touch lies together, so that interning a known id costs two cache
     * misses (its slot, its head), not four (slot, id pointer, id, decl). */
    char *heads;
    size_t heads_len, heads_cap;
    size_t id_bytes;       /* sum of the ids' lengths + 1 */
    uint64_t *slot;        /* hash << 32 | head offset / 8; UINT64_MAX empty */
    size_t slot_cap;
    /* recent attribute texts by hash, so that repeated ones are kept once */
    dedup_slot *dedup;
    /* the batch of queued nodes and edges, their ids in btext */
    pending_add pend[BATCH];
    int npend;
    char *btext;
    size_t btext_len, btext_cap;
    int32_t last_src;      /* node of the source of the last edge added */
    int32_t ne, ecap;
    int32_t *src, *dst;
    const char **eattrs;
    double *elen;
    capture cap;
    char msg[ERR_ID_MAX * 4 + 64];
};

enum { DEDUP_SLOTS = 1 << 16 };

tree_builder *tree_builder_new(const char *what)
{
    tree_builder *b = calloc(1, sizeof *b);
    if (!b)
        return NULL;
    b->a = arena_new();
    b->what = strdup(what ? what : "tree");
    b->last_src = -1;
    if (!b->a || !b->what || cap_init(&b->cap) < 0) {
        tree_builder_free(b);
        return NULL;
    }
    return b;
}

static void heads_unmap(tree_builder *b);

void tree_builder_free(tree_builder *b)
{
    if (!b)
        return;
    arena_free(b->a);
    free(b->what);
    heads_unmap(b);
    free(b->btext);
    free(b->dedup);
    free(b->slot);
    free(b->src);
    free(b->dst);
    free(b->eattrs);
    free(b->elen);
    cap_destroy(&b->cap);
    free(b);
}

static const char *pool_dup(tree_builder *b, const char *s, size_t n)
{
    if (n == 2 && s[0] == '{' && s[1] == '}')
        return empty_attrs;
    if (n + 1 > b->pool_left) {
        if (n + 1 > POOL_CHUNK / 4) {
            char *big = arena_alloc(b->a, n + 1);
            if (!big)
                return NULL;
            memcpy(big, s, n);
            big[n] = '\0';
            return big;
        }
        b->pool = arena_alloc(b->a, POOL_CHUNK);
        if (!b->pool)
            return NULL;
        b->pool_left = POOL_CHUNK;
    }
    char *p = b->pool;
    memcpy(p, s, n);
    p[n] = '\0';
    b->pool += n + 1;
    b->pool_left -= n + 1;
    return p;
}

/* pool_dup for attribute texts: a text equal to a recent one (same slot of
 * a small table by hash) is kept once; the index never writes to them. */
static const char *attrs_dup_hashed(tree_builder *b, const char *s, size_t n, uint32_t h)
{
    if (n == 2 && s[0] == '{' && s[1] == '}')
        return empty_attrs;
    if (!b->dedup && !(b->dedup = calloc(DEDUP_SLOTS, sizeof *b->dedup)))
        return NULL;
    dedup_slot *slot = &b->dedup[h & (DEDUP_SLOTS - 1)];
    /* hash and length first: a text that differs is not read */
    if (slot->text && slot->hash == h && slot->len == n && memcmp(slot->text, s, n) == 0)
        return slot->text;
    const char *p = pool_dup(b, s, n);
    if (p && n <= UINT32_MAX)
        *slot = (dedup_slot){p, h, (uint32_t)n};
    return p;
}

static const char *attrs_dup(tree_builder *b, const char *s, size_t n)
{
    return attrs_dup_hashed(b, s, n, tree_index_hash_id(s, n));
}

/* A short printable form of an id for messages. */
static const char *short_id(char *buf, size_t size, const char *s, size_t n)
{
    size_t k = n < size - 4 ? n : size - 4;
    memcpy(buf, s, k);
    strcpy(buf + k, n > k ? "..." : "");
    for (size_t i = 0; i < k; i++)
        if ((unsigned char)buf[i] < 0x20)
            buf[i] = '?';
    return buf;
}

static node_head *head_at(const tree_builder *b, uint64_t unit)
{
    return (node_head *)(void *)(b->heads + unit * 8);
}

static const char *head_id(const node_head *h)
{
    return (const char *)(h + 1);
}

static size_t head_size(size_t id_len)
{
    return sizeof(node_head) + ((id_len + 1 + 7) & ~(size_t)7);
}

/* The heads live in a mapping of their own, grown with mremap: grown with
 * realloc they were copied while malloc's mmap threshold kept them in the
 * heap, and the old copies stayed resident (tens of MB at 1M nodes). */
static int heads_grow(tree_builder *b, size_t need)
{
    size_t cap = b->heads_cap ? b->heads_cap : 64 * 1024;
    while (cap < need)
        cap *= 2;
    void *p = b->heads ? mremap(b->heads, b->heads_cap, cap, MREMAP_MAYMOVE)
                       : mmap(NULL, cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                              -1, 0);
    if (p == MAP_FAILED)
        return -1;
    b->heads = p;
    b->heads_cap = cap;
    return 0;
}

static void heads_unmap(tree_builder *b)
{
    if (b->heads)
        munmap(b->heads, b->heads_cap);
    b->heads = NULL;
    b->heads_cap = b->heads_len = 0;
}

/* Appends a head for a new node; its offset / 8, or -1 when out of memory
 * (or past what a slot can address). */
static int64_t add_head(tree_builder *b, const char *id, size_t len)
{
    size_t need = head_size(len);
    if (b->n == INT32_MAX - 1 || b->heads_len + need < need ||
        (b->heads_len + need) / 8 > UINT32_MAX)
        return -1;
    if (b->heads_len + need > b->heads_cap && heads_grow(b, b->heads_len + need) < 0)
        return -1;
    uint64_t unit = b->heads_len / 8;
    node_head *h = head_at(b, unit);
    *h = (node_head){.v = b->n, .decl = -1, .attrs = empty_attrs};
    char *text = (char *)(h + 1);
    memcpy(text, id, len);
    memset(text + len, 0, need - sizeof *h - len);
    b->heads_len += need;
    b->id_bytes += len + 1;
    b->n++;
    return (int64_t)unit;
}

static int rehash(tree_builder *b)
{
    size_t cap = b->slot_cap ? b->slot_cap * 2 : 128;
    uint64_t *slot = tree_index_calloc(cap, sizeof *slot);
    if (!slot)
        return -1;
    memset(slot, 0xff, cap * sizeof *slot);
    for (size_t k = 0; k < b->slot_cap; k++) {
        uint64_t e = b->slot[k];
        if (e == UINT64_MAX)
            continue;
        size_t i = (uint32_t)(e >> 32) & (cap - 1);
        while (slot[i] != UINT64_MAX)
            i = (i + 1) & (cap - 1);
        slot[i] = e;
    }
    free(b->slot);
    b->slot = slot;
    b->slot_cap = cap;
    return 0;
}

/* The head of id (whose tree_index_hash_id is h), created undeclared when
 * new; NULL on failure. */
static node_head *intern(tree_builder *b, const char *id, size_t len, uint32_t h,
                         cellar_error *err)
{
    char sid[ERR_ID_MAX];
    if (memchr(id, '\0', len)) {
        cellar_fail(err, CELLAR_EFORMAT, "%s: node id '%s' contains a NUL character", b->what,
                    short_id(sid, sizeof sid, id, strlen(id)));
        return NULL;
    }
    if ((size_t)b->n * 2 >= b->slot_cap && rehash(b) < 0) {
        fail_nomem(err);
        return NULL;
    }
    size_t i = h & (b->slot_cap - 1);
    for (; b->slot[i] != UINT64_MAX; i = (i + 1) & (b->slot_cap - 1)) {
        if ((uint32_t)(b->slot[i] >> 32) != h)
            continue;
        node_head *nh = head_at(b, (uint32_t)b->slot[i]);
        const char *known = head_id(nh);
        if (memcmp(known, id, len) == 0 && known[len] == '\0')
            return nh;
    }
    int64_t unit = add_head(b, id, len);
    if (unit < 0) {
        cellar_fail(err, CELLAR_ENOMEM, "%s: out of memory at %d nodes", b->what, (int)b->n);
        return NULL;
    }
    b->slot[i] = (uint64_t)h << 32 | (uint64_t)unit;
    return head_at(b, (uint64_t)unit);
}

/* Declares node id (hash h) with the attribute text `attrs` (in the pool,
 * or NULL: none). */
static int node_add(tree_builder *b, const char *id, size_t len, uint32_t h, const char *attrs,
                    cellar_error *err)
{
    char sid[ERR_ID_MAX];
    node_head *nh = intern(b, id, len, h, err);
    if (!nh)
        return err && err->code ? err->code : CELLAR_EFORMAT;
    if (nh->decl >= 0)
        return cellar_fail(err, CELLAR_EFORMAT, "%s: node '%s' is listed twice", b->what,
                           short_id(sid, sizeof sid, id, len));
    if (attrs)
        nh->attrs = attrs;
    nh->decl = b->n_decl++;
    return 0;
}

static int add_node_raw(tree_builder *b, const char *id, size_t len, const char *attrs,
                        size_t attrs_len, cellar_error *err)
{
    const char *text = NULL;
    if (attrs && !(text = attrs_dup(b, attrs, attrs_len)))
        return fail_nomem(err);
    return node_add(b, id, len, tree_index_hash_id(id, len), text, err);
}

static int grow_edges(tree_builder *b)
{
    if (b->ne == INT32_MAX - 1)
        return -1;
    int32_t cap = b->ecap ? (b->ecap > INT32_MAX / 2 ? INT32_MAX - 1 : b->ecap * 2) : 64;
    int32_t *src = realloc(b->src, (size_t)cap * sizeof *src);
    if (src)
        b->src = src;
    int32_t *dst = src ? realloc(b->dst, (size_t)cap * sizeof *dst) : NULL;
    if (dst)
        b->dst = dst;
    const char **ea = dst ? realloc(b->eattrs, (size_t)cap * sizeof *ea) : NULL;
    if (ea)
        b->eattrs = ea;
    double *len = ea ? realloc(b->elen, (size_t)cap * sizeof *len) : NULL;
    if (!len)
        return -1;
    b->elen = len;
    b->ecap = cap;
    return 0;
}

/* The edge s -> d (hashes hs, hd) with the attribute text `text` (in the
 * pool, or static).  *src_node (may be NULL) caches the node number of s
 * across calls with the same s (-1: not known yet; hs is not used then). */
static int edge_add(tree_builder *b, const char *s, size_t slen, uint32_t hs, const char *d,
                    size_t dlen, uint32_t hd, const char *text, double length,
                    int32_t *src_node, cellar_error *err)
{
    int32_t u = -1, v = -1;
    if (src_node && *src_node >= 0) {
        u = *src_node;
    } else {
        node_head *h = intern(b, s, slen, hs, err);
        u = h ? h->v : -1;
    }
    if (src_node)
        *src_node = u;
    node_head *dh = u < 0 ? NULL : intern(b, d, dlen, hd, err);
    v = dh ? dh->v : -1;
    if (v < 0)
        return err && err->code ? err->code : CELLAR_EFORMAT;
    if (b->ne == b->ecap && grow_edges(b) < 0)
        return cellar_fail(err, CELLAR_ENOMEM, "%s: out of memory at %d edges", b->what,
                           (int)b->ne);
    b->src[b->ne] = u;
    b->dst[b->ne] = v;
    b->eattrs[b->ne] = text;
    b->elen[b->ne] = length;
    b->ne++;
    return 0;
}

static int add_edge_raw(tree_builder *b, const char *s, size_t slen, const char *d, size_t dlen,
                        const char *attrs, size_t attrs_len, double length, int32_t *src_node,
                        cellar_error *err)
{
    const char *text = attrs ? attrs_dup(b, attrs, attrs_len) : empty_attrs;
    if (!text)
        return fail_nomem(err);
    uint32_t hs = src_node && *src_node >= 0 ? 0 : tree_index_hash_id(s, slen);
    return edge_add(b, s, slen, hs, d, dlen, tree_index_hash_id(d, dlen), text, length,
                    src_node, err);
}

/* ---- batches: lookups of several ids overlapped ---------------------------
 * Looking up an id costs cache misses (its slot, its head) that stall the
 * parse one after another.  The JSON reader queues nodes and edges and
 * adds them BATCH at a time: first the slots of all their ids are
 * prefetched, then the heads the slots point at, then each is added in
 * order exactly as add_node_raw / add_edge_raw would (the prefetches are
 * hints only; so are those of the attribute texts' dedup slots). */

static void batch_prefetch_slot(const tree_builder *b, uint32_t h)
{
    __builtin_prefetch(&b->slot[h & (b->slot_cap - 1)]);
}

static void batch_prefetch_head(const tree_builder *b, uint32_t h)
{
    for (size_t i = h & (b->slot_cap - 1); b->slot[i] != UINT64_MAX;
         i = (i + 1) & (b->slot_cap - 1)) {
        if ((uint32_t)(b->slot[i] >> 32) == h) {
            __builtin_prefetch(head_at(b, (uint32_t)b->slot[i]));
            return;
        }
    }
}

static int batch_flush(tree_builder *b, cellar_error *err)
{
    int n = b->npend, rc = 0;
    b->npend = 0;
    if (b->slot_cap) {
        for (int k = 0; k < n; k++) {
            if (b->dedup)
                __builtin_prefetch(&b->dedup[b->pend[k].ht & (DEDUP_SLOTS - 1)]);
            batch_prefetch_slot(b, b->pend[k].h1);
            if (b->pend[k].is_edge)
                batch_prefetch_slot(b, b->pend[k].h2);
        }
        for (int k = 0; k < n; k++)
            if (!b->pend[k].is_edge || !b->pend[k].same_src)
                batch_prefetch_head(b, b->pend[k].h1);
    }
    for (int k = 0; k < n && rc == 0; k++) {
        const pending_add *q = &b->pend[k];
        const char *a = b->btext + q->a;
        const char *text = attrs_dup_hashed(b, b->btext + q->t, q->tlen, q->ht);
        if (!text) {
            rc = fail_nomem(err);
            break;
        }
        if (!q->is_edge) {
            rc = node_add(b, a, q->alen, q->h1, text, err);
            continue;
        }
        if (!q->same_src)
            b->last_src = -1;
        rc = edge_add(b, a, q->alen, q->h1, b->btext + q->d, q->dlen, q->h2, text, q->length,
                      &b->last_src, err);
    }
    b->btext_len = 0;
    return rc;
}

/* Copies the id into the batch's text; its offset, or SIZE_MAX.  The text
 * is allocated even for empty ids only, so that batch_flush never offsets a
 * NULL pointer. */
static size_t batch_text(tree_builder *b, const char *s, size_t n)
{
    if (b->btext_len + n > b->btext_cap || !b->btext) {
        size_t cap = b->btext_cap ? b->btext_cap : 1024;
        while (cap < b->btext_len + n)
            cap *= 2;
        char *p = realloc(b->btext, cap);
        if (!p)
            return SIZE_MAX;
        b->btext = p;
        b->btext_cap = cap;
    }
    size_t at = b->btext_len;
    if (n) /* an empty id: s may be NULL */
        memcpy(b->btext + at, s, n);
    b->btext_len += n;
    return at;
}

/* Queues node id (d == NULL) or edge id -> d with the attribute text
 * `attrs`; same_src: an edge from the source of the edge queued before. */
static int batch_push(tree_builder *b, const char *id, size_t len, const char *d, size_t dlen,
                      const char *attrs, size_t attrs_len, double length, int same_src,
                      cellar_error *err)
{
    if (b->npend == BATCH) {
        int rc = batch_flush(b, err);
        if (rc < 0)
            return rc;
    }
    pending_add *q = &b->pend[b->npend];
    q->is_edge = d != NULL;
    q->same_src = same_src;
    q->length = length;
    q->a = batch_text(b, id, len);
    q->d = d ? batch_text(b, d, dlen) : 0;
    q->t = batch_text(b, attrs, attrs_len);
    if (q->a == SIZE_MAX || q->d == SIZE_MAX || q->t == SIZE_MAX)
        return fail_nomem(err);
    q->alen = len;
    q->dlen = dlen;
    q->tlen = attrs_len;
    q->ht = tree_index_hash_id(attrs, attrs_len);
    q->h1 = tree_index_hash_id(id, len);
    q->h2 = d ? tree_index_hash_id(d, dlen) : 0;
    b->npend++;
    return 0;
}

/* After a failure rc that comes after the queued nodes and edges (a later
 * syntax or attribute error): those are added first, so that an error
 * among them is the one reported, as when each was added at once.  A
 * failure of batch_flush itself leaves nothing queued. */
static int batch_settle(tree_builder *b, int rc, cellar_error *err)
{
    if (rc == 0 || !b || b->npend == 0)
        return rc;
    cellar_error saved;
    cellar_error_clear(&saved);
    if (err) {
        saved = *err;
        cellar_error_clear(err);
    }
    int drc = batch_flush(b, err);
    if (drc < 0)
        return drc;
    if (err)
        *err = saved;
    return rc;
}

/* Parses attrs_json (an object) into the builder's capture. */
static int normalize_attrs(tree_builder *b, const char *attrs_json, const char *what,
                           cellar_error *err)
{
    cap_begin(&b->cap, err, what);
    b->cap.require_object = 1;
    int rc = cap_parse_text(&b->cap, attrs_json, strlen(attrs_json));
    b->cap.require_object = 0;
    return rc;
}

int tree_builder_add_node(tree_builder *b, const char *id, const char *attrs_json,
                          cellar_error *err)
{
    if (!attrs_json)
        return add_node_raw(b, id, strlen(id), NULL, 0, err);
    char sid[ERR_ID_MAX];
    snprintf(b->msg, sizeof b->msg, "node '%s' of %s",
             short_id(sid, sizeof sid, id, strlen(id)), b->what);
    int rc = normalize_attrs(b, attrs_json, b->msg, err);
    if (rc < 0)
        return rc;
    const char *text;
    size_t len;
    cap_result(&b->cap, &text, &len);
    return add_node_raw(b, id, strlen(id), text, len, err);
}

int tree_builder_add_edge(tree_builder *b, const char *src, const char *dst,
                          const char *attrs_json, cellar_error *err)
{
    if (!attrs_json)
        return add_edge_raw(b, src, strlen(src), dst, strlen(dst), NULL, 0, NAN, NULL, err);
    char s1[ERR_ID_MAX], s2[ERR_ID_MAX];
    snprintf(b->msg, sizeof b->msg, "edge '%s' -> '%s' of %s",
             short_id(s1, sizeof s1, src, strlen(src)), short_id(s2, sizeof s2, dst, strlen(dst)),
             b->what);
    int rc = normalize_attrs(b, attrs_json, b->msg, err);
    if (rc < 0)
        return rc;
    const char *text;
    size_t len;
    cap_result(&b->cap, &text, &len);
    return add_edge_raw(b, src, strlen(src), dst, strlen(dst), text, len, b->cap.length, NULL,
                        err);
}

static int column_is_absent(const tree_attr_column *col, int64_t row)
{
    if (col->kind != TREE_COLUMN_JSON)
        return 0;
    const char *s = ((const char *const *)col->values)[row];
    return !s || !*s;
}

/* A JSON number exactly as the grammar has it (no NaN, no spaces). */
static int json_plain_number(const char *s, size_t n)
{
    size_t i = 0;
    if (i < n && s[i] == '-')
        i++;
    if (i < n && s[i] == '0')
        i++;
    else if (i < n && s[i] >= '1' && s[i] <= '9')
        while (i < n && s[i] >= '0' && s[i] <= '9')
            i++;
    else
        return 0;
    if (i < n && s[i] == '.') {
        size_t d = ++i;
        while (i < n && s[i] >= '0' && s[i] <= '9')
            i++;
        if (i == d)
            return 0;
    }
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        if (i < n && (s[i] == '+' || s[i] == '-'))
            i++;
        size_t d = i;
        while (i < n && s[i] >= '0' && s[i] <= '9')
            i++;
        if (i == d)
            return 0;
    }
    return i == n;
}

/* A quoted string of printable ASCII that needs no escape. */
static int json_plain_string(const char *s, size_t n)
{
    if (n < 2 || s[0] != '"' || s[n - 1] != '"')
        return 0;
    for (size_t i = 1; i + 1 < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c > 0x7e || c == '"' || c == '\\')
            return 0;
    }
    return 1;
}

/* One JSON text of a column into the capture: the plain texts that
 * parsing would hand over unchanged go straight in (no parser per value),
 * anything else is parsed. */
static int cap_json_value(capture *c, const char *s)
{
    size_t n = strlen(s);
    if (json_plain_string(s, n))
        return cap_string(c, (const unsigned char *)s + 1, n - 2) ? 0 : -1;
    if (json_plain_number(s, n))
        return cap_number(c, s, n) ? 0 : -1;
    if (n == 4 && memcmp(s, "null", 4) == 0)
        return cap_null(c) ? 0 : -1;
    if ((n == 4 && memcmp(s, "true", 4) == 0) || (n == 5 && memcmp(s, "false", 5) == 0))
        return cap_bool(c, n == 4) ? 0 : -1;
    return cap_parse_text(c, s, n);
}

static int cap_column_value(capture *c, const tree_attr_column *col, int64_t row)
{
    char buf[40];
    _Static_assert(sizeof buf >= DTOA_TEXT_MAX, "room for dtoa_shortest");
    switch (col->kind) {
    case TREE_COLUMN_INT64: {
        long long v = (long long)((const int64_t *)col->values)[row];
        int n = snprintf(buf, sizeof buf, "%lld", v);
        return cap_number(c, buf, (size_t)n) ? 0 : -1;
    }
    case TREE_COLUMN_FLOAT64: {
        double v = ((const double *)col->values)[row];
        if (!isfinite(v))
            return cap_null(c) ? 0 : -1;
        size_t n = dtoa_shortest(v, buf); /* always a '.' or an exponent */
        return cap_number(c, buf, n) ? 0 : -1;
    }
    case TREE_COLUMN_BOOL:
        return cap_bool(c, ((const uint8_t *)col->values)[row] != 0) ? 0 : -1;
    case TREE_COLUMN_JSON:
        return cap_json_value(c, ((const char *const *)col->values)[row]);
    }
    c->rc = cellar_fail(c->err, CELLAR_EINVAL, "attribute column '%s' has an unknown kind",
                        col->name);
    return -1;
}

/* Builds the attribute object of one row from the columns into the capture. */
/* Names the row of a column for messages, formatted only when one is made. */
typedef struct row_name {
    tree_builder *b;
    const char *id, *dst;  /* node id, or edge source and dst */
} row_name;

static void row_describe(void *ctx)
{
    row_name *rn = ctx;
    char s1[ERR_ID_MAX], s2[ERR_ID_MAX];
    if (!rn->dst)
        snprintf(rn->b->msg, sizeof rn->b->msg, "node '%s' of %s",
                 short_id(s1, sizeof s1, rn->id, strlen(rn->id)), rn->b->what);
    else
        snprintf(rn->b->msg, sizeof rn->b->msg, "edge '%s' -> '%s' of %s",
                 short_id(s1, sizeof s1, rn->id, strlen(rn->id)),
                 short_id(s2, sizeof s2, rn->dst, strlen(rn->dst)), rn->b->what);
}

static int compose_row(tree_builder *b, int64_t row, size_t n_cols,
                       const tree_attr_column *cols, row_name *rn, cellar_error *err)
{
    capture *c = &b->cap;
    cap_begin(c, err, b->msg);
    c->describe = row_describe;
    c->describe_ctx = rn;
    if (!cap_start_map(c))
        return c->rc;
    for (size_t k = 0; k < n_cols; k++) {
        if (column_is_absent(&cols[k], row))
            continue;
        const char *name = cols[k].name ? cols[k].name : "";
        if (!cap_map_key(c, (const unsigned char *)name, strlen(name)))
            return c->rc;
        if (cap_column_value(c, &cols[k], row) < 0) {
            char prefix[ERR_ID_MAX + 32];
            snprintf(prefix, sizeof prefix, "attribute column '%.*s'", ERR_ID_MAX, name);
            err_prefix(err, prefix);
            return c->rc < 0 ? c->rc : CELLAR_EFORMAT;
        }
    }
    return cap_end_map(c) ? 0 : c->rc;
}

int tree_builder_add_nodes(tree_builder *b, int64_t n, const char *const *ids, size_t n_cols,
                           const tree_attr_column *cols, cellar_error *err)
{
    for (int64_t i = 0; i < n; i++) {
        const char *id = ids[i] ? ids[i] : "";
        row_name rn = {b, id, NULL};
        int rc = compose_row(b, i, n_cols, cols, &rn, err);
        if (rc < 0)
            return batch_settle(b, rc, err);
        const char *text;
        size_t len;
        cap_result(&b->cap, &text, &len);
        if ((rc = batch_push(b, id, strlen(id), NULL, 0, text, len, NAN, 0, err)) < 0)
            return rc;
    }
    return batch_flush(b, err);
}

int tree_builder_add_edges(tree_builder *b, int64_t n, const char *const *src,
                           const char *const *dst, size_t n_cols,
                           const tree_attr_column *cols, cellar_error *err)
{
    for (int64_t i = 0; i < n; i++) {
        const char *s = src[i] ? src[i] : "", *d = dst[i] ? dst[i] : "";
        /* edges come grouped by source: its lookup is done once a group */
        int same_src = i > 0 && strcmp(s, src[i - 1] ? src[i - 1] : "") == 0;
        row_name rn = {b, s, d};
        int rc = compose_row(b, i, n_cols, cols, &rn, err);
        if (rc < 0)
            return batch_settle(b, rc, err);
        const char *text;
        size_t len;
        cap_result(&b->cap, &text, &len);
        rc = batch_push(b, s, strlen(s), d, strlen(d), text, len, b->cap.length, same_src, err);
        if (rc < 0)
            return rc;
    }
    return batch_flush(b, err);
}

static node_head *head_next(const node_head *h)
{
    return (node_head *)(void *)((char *)h + head_size(strlen(head_id(h))));
}

/* The slot table with declaration numbers instead of head offsets, as
 * 32-bit entries in the same memory (shrunk to them). */
static uint32_t *slots_renumbered(tree_builder *b)
{
    unsigned char *mem = (unsigned char *)b->slot;
    for (size_t i = 0; i < b->slot_cap; i++) {
        uint64_t e;
        memcpy(&e, mem + i * sizeof e, sizeof e);
        /* entry i of the 32-bit table lies at or below entry i of the 64-bit
         * one, which was read already */
        uint32_t v = e == UINT64_MAX ? UINT32_MAX : (uint32_t)head_at(b, (uint32_t)e)->decl;
        memcpy(mem + i * sizeof v, &v, sizeof v);
    }
    uint32_t *slot = realloc(mem, b->slot_cap * sizeof *slot);
    b->slot = NULL;
    return slot ? slot : (uint32_t *)mem;
}

/* ids[] (copied into the arena, one block) and attrs[] in declaration
 * order, edges renumbered to it; the heads are freed. */
static int take_nodes(tree_builder *b, tree_parts *p)
{
    size_t n = (size_t)b->n;
    int32_t *decl = malloc((n ? n : 1) * sizeof *decl);
    p->ids = malloc((n ? n : 1) * sizeof *p->ids);
    p->attrs = malloc((n ? n : 1) * sizeof *p->attrs);
    char *text = arena_alloc(b->a, b->id_bytes ? b->id_bytes : 1);
    if (!decl || !p->ids || !p->attrs || !text) {
        free(decl);
        return -1;
    }
    node_head *h = (node_head *)(void *)b->heads;
    for (size_t v = 0; v < n; v++, h = head_next(h)) {
        const char *id = head_id(h);
        size_t len = strlen(id) + 1;
        memcpy(text, id, len);
        decl[v] = h->decl;
        p->ids[h->decl] = text;
        p->attrs[h->decl] = h->attrs;
        text += len;
    }
    for (int32_t e = 0; e < b->ne; e++) {
        b->src[e] = decl[b->src[e]];
        b->dst[e] = decl[b->dst[e]];
    }
    free(decl);
    if (b->slot) {
        p->slot_cap = b->slot_cap;
        p->slot = slots_renumbered(b);
    }
    heads_unmap(b);
    return 0;
}

/* Renumbers nodes in declaration order and hands everything to the index. */
static int builder_build(tree_builder *b, tree_index **out, cellar_error *err)
{
    tree_parts p = {.n_nodes = b->n, .n_edges = b->ne};
    free(b->dedup);
    b->dedup = NULL;
    if (take_nodes(b, &p) < 0) {
        tree_parts_free(&p);
        return fail_nomem(err);
    }
    p.src = b->src;
    p.dst = b->dst;
    p.eattrs = b->eattrs;
    p.elen = b->elen;
    b->eattrs = NULL;
    b->src = b->dst = NULL;
    b->elen = NULL;
    arena *a = b->a;
    b->a = NULL;
    int rc = tree_index_build(a, &p, out, err);
    if (rc < 0 && err && err->code == rc)
        err_prefix(err, b->what);
    return rc;
}

int tree_builder_finish(tree_builder *b, tree_index **out, cellar_error *err)
{
    int rc = 0;
    *out = NULL;
    if (!b)
        return fail_nomem(err);
    if ((rc = batch_flush(b, err)) < 0)
        goto done;
    node_head *h = (node_head *)(void *)b->heads;
    for (int32_t v = 0; v < b->n; v++, h = head_next(h)) {
        if (h->decl < 0) {
            char sid[ERR_ID_MAX];
            const char *id = head_id(h);
            rc = cellar_fail(err, CELLAR_EFORMAT,
                             "%s: node '%s' appears in an edge but is not listed in nodes",
                             b->what, short_id(sid, sizeof sid, id, strlen(id)));
            goto done;
        }
    }
    rc = builder_build(b, out, err);
done:
    tree_builder_free(b);
    return rc;
}

/* ---- the streaming reader ------------------------------------------------- */

enum { SEC_NONE, SEC_NODES, SEC_EDGES, SEC_SKIP };

/* Where a reader of treedata 0.0.x's raw.treedata is in its outer object
 * (OUTER_NONE: a plain reader, the document is the forest). */
enum { OUTER_NONE, OUTER_START, OUTER_KEYS, OUTER_MEMBER, OUTER_END };
/* The top-level scalar the outer key names: none, label, allow_overlap. */
enum { SET_NONE, SET_LABEL, SET_OVERLAP };

typedef struct keybuf {
    char *s;
    size_t len, cap;
} keybuf;

struct tree_json_reader {
    jfilter f;
    capture *cap;          /* the builder's capture while capturing, else NULL */
    int depth;             /* open containers of the structure (0 .. 4) */
    int section;           /* of the current tree, at depth >= 2 */
    int skip;              /* open containers of a value being skipped */
    int pending_skip;      /* the next value at depth 2 is skipped */
    int top_done;
    int rc;
    int outer;             /* OUTER_*: raw.treedata's object around the forest */
    char *member;          /* its member holding the forest (NULL: none) */
    int setting;           /* SET_*: the outer value now read */
    tree_json_legacy legacy;
    keybuf tree_key, k3, k4;
    int32_t k3_node;       /* >= 0 once an edge from k3 was queued, else -1 */
    char what[ERR_ID_MAX + 16];
    tree_builder *b;
    tree_forest *forest;
    cellar_error *err;
};

static int key_set(keybuf *k, const unsigned char *s, size_t n)
{
    if (n + 1 > k->cap) {
        size_t cap = n + 1 < 64 ? 64 : n + 1;
        char *p = realloc(k->s, cap);
        if (!p)
            return -1;
        k->s = p;
        k->cap = cap;
    }
    memcpy(k->s, s, n);
    k->s[n] = '\0';
    k->len = n;
    return 0;
}

static int rd_fail(tree_json_reader *r, int code, const char *what)
{
    char sid[ERR_ID_MAX];
    r->rc = cellar_fail(r->err, code, "tree '%s': %s",
                        short_id(sid, sizeof sid, r->tree_key.s ? r->tree_key.s : "",
                                 r->tree_key.len),
                        what);
    return 0;
}

/* A value where the structure needs an object. */
static int rd_not_object(tree_json_reader *r)
{
    char buf[ERR_ID_MAX * 2 + 64], s1[ERR_ID_MAX], s2[ERR_ID_MAX];
    switch (r->depth) {
    case 0:
        r->rc = cellar_fail(r->err, CELLAR_EFORMAT,
                            "tree JSON is not an object of trees ({key: {nodes, edges}})");
        return 0;
    case 1:
        return rd_fail(r, CELLAR_EFORMAT, "the tree is not a JSON object");
    case 2:
        return rd_fail(r, CELLAR_EFORMAT,
                       r->section == SEC_NODES ? "'nodes' is not a JSON object"
                                               : "'edges' is not a JSON object");
    case 3:
        snprintf(buf, sizeof buf,
                 r->section == SEC_NODES ? "the attributes of node '%s' are not a JSON object"
                                         : "the edges of node '%s' are not a JSON object",
                 short_id(s1, sizeof s1, r->k3.s, r->k3.len));
        return rd_fail(r, CELLAR_EFORMAT, buf);
    default:
        snprintf(buf, sizeof buf, "the attributes of edge '%s' -> '%s' are not a JSON object",
                 short_id(s1, sizeof s1, r->k3.s, r->k3.len),
                 short_id(s2, sizeof s2, r->k4.s, r->k4.len));
        return rd_fail(r, CELLAR_EFORMAT, buf);
    }
}

/* Called for every value start; returns 1 when the value is being skipped. */
static int rd_skipping_scalar(tree_json_reader *r)
{
    if (r->skip > 0)
        return 1;
    if (r->pending_skip) {
        r->pending_skip = 0;
        return 1;
    }
    return 0;
}

static int rd_capture_done(tree_json_reader *r)
{
    const char *text;
    size_t len;
    capture *c = r->cap;
    r->cap = NULL;
    cap_result(c, &text, &len);
    int rc = 0;
    if (r->section == SEC_NODES) {
        rc = batch_push(r->b, r->k3.s, r->k3.len, NULL, 0, text, len, NAN, 0, r->err);
    } else {
        rc = batch_push(r->b, r->k3.s, r->k3.len, r->k4.s, r->k4.len, text, len, c->length,
                        r->k3_node >= 0, r->err);
        r->k3_node = 0; /* the next edge of this source: same_src */
    }
    if (rc < 0) {
        r->rc = rc;
        return 0;
    }
    return 1;
}

/* A scalar that is a member of raw.treedata's object: label or
 * allow_overlap is kept, others are skipped.  1 when taken. */
static int rd_outer_scalar(tree_json_reader *r, int kind, const char *s, size_t n, int flag)
{
    if (r->outer != OUTER_KEYS || r->skip > 0)
        return 0;
    int setting = r->setting;
    r->setting = SET_NONE;
    r->pending_skip = 0;
    if (setting == SET_LABEL) {
        free(r->legacy.label);
        r->legacy.label = NULL;
        r->legacy.has_label = 1;
        if (kind == 's' && !(r->legacy.label = strndup(s, n))) {
            r->rc = fail_nomem(r->err);
            return -1;
        }
    } else if (setting == SET_OVERLAP) {
        /* _parse_legacy: bool(allow_overlap) */
        r->legacy.has_allow_overlap = 1;
        r->legacy.allow_overlap = kind == 'b' ? flag
                                  : kind == 'n' ? strtod(s, NULL) != 0
                                  : kind == 's' ? n > 0
                                                : 0;
    }
    return 1;
}

static int rd_scalar_outside(tree_json_reader *r, int kind, const char *s, size_t n, int flag)
{
    int taken = rd_outer_scalar(r, kind, s, n, flag);
    if (taken)
        return taken > 0;
    if (rd_skipping_scalar(r))
        return 1;
    if (r->outer == OUTER_START) {
        r->rc = cellar_fail(r->err, CELLAR_EFORMAT, "raw.treedata is not a JSON object");
        return 0;
    }
    return rd_not_object(r);
}

static int rd_null(void *ctx)
{
    tree_json_reader *r = ctx;
    if (r->cap)
        return cap_null(r->cap) ? 1 : (r->rc = r->cap->rc, 0);
    return rd_scalar_outside(r, 'z', NULL, 0, 0);
}

static int rd_bool(void *ctx, int v)
{
    tree_json_reader *r = ctx;
    if (r->cap)
        return cap_bool(r->cap, v) ? 1 : (r->rc = r->cap->rc, 0);
    return rd_scalar_outside(r, 'b', NULL, 0, v);
}

static int rd_number(void *ctx, const char *s, size_t n)
{
    tree_json_reader *r = ctx;
    if (r->cap)
        return cap_number(r->cap, s, n) ? 1 : (r->rc = r->cap->rc, 0);
    char buf[TREE_JSON_MAX_BARE + 1];
    size_t k = n < TREE_JSON_MAX_BARE ? n : TREE_JSON_MAX_BARE;
    memcpy(buf, s, k);
    buf[k] = '\0';
    return rd_scalar_outside(r, 'n', buf, k, 0);
}

static int rd_string(void *ctx, const unsigned char *s, size_t n)
{
    tree_json_reader *r = ctx;
    if (r->cap)
        return cap_string(r->cap, s, n) ? 1 : (r->rc = r->cap->rc, 0);
    return rd_scalar_outside(r, 's', (const char *)s, n, 0);
}

static int rd_open_skip(tree_json_reader *r)
{
    if (r->skip >= TREE_JSON_MAX_ATTR_DEPTH)
        return rd_fail(r, CELLAR_EFORMAT, "a skipped member nests too deep");
    r->skip++;
    return 1;
}

static int rd_begin_tree(tree_json_reader *r)
{
    char sid[ERR_ID_MAX];
    snprintf(r->what, sizeof r->what, "tree '%s'",
             short_id(sid, sizeof sid, r->tree_key.s, r->tree_key.len));
    r->b = tree_builder_new(r->what);
    if (!r->b) {
        r->rc = fail_nomem(r->err);
        return 0;
    }
    r->depth = 2;
    r->section = SEC_NONE;
    return 1;
}

static void rd_describe(void *ctx)
{
    tree_json_reader *r = ctx;
    char s1[ERR_ID_MAX], s2[ERR_ID_MAX];
    if (r->section == SEC_NODES)
        snprintf(r->b->msg, sizeof r->b->msg, "node '%s' of %s",
                 short_id(s1, sizeof s1, r->k3.s, r->k3.len), r->what);
    else
        snprintf(r->b->msg, sizeof r->b->msg, "edge '%s' -> '%s' of %s",
                 short_id(s1, sizeof s1, r->k3.s, r->k3.len),
                 short_id(s2, sizeof s2, r->k4.s, r->k4.len), r->what);
}

static int rd_begin_capture(tree_json_reader *r)
{
    r->cap = &r->b->cap;
    cap_begin(r->cap, r->err, r->b->msg);
    r->cap->describe = rd_describe;
    r->cap->describe_ctx = r;
    return cap_start_map(r->cap) ? 1 : (r->rc = r->cap->rc, 0);
}

static int rd_start_map(void *ctx)
{
    tree_json_reader *r = ctx;
    if (r->cap)
        return cap_start_map(r->cap) ? 1 : (r->rc = r->cap->rc, 0);
    if (r->skip > 0 || r->pending_skip) {
        r->pending_skip = 0;
        r->setting = SET_NONE;
        return rd_open_skip(r);
    }
    if (r->outer == OUTER_START) {
        r->outer = OUTER_KEYS;
        return 1;
    }
    switch (r->depth) {
    case 0:
        r->depth = 1;
        return 1;
    case 1:
        return rd_begin_tree(r);
    case 2:
        r->depth = 3;
        return 1;
    case 3:
        if (r->section == SEC_NODES)
            return rd_begin_capture(r);
        r->depth = 4;
        return 1;
    default:
        return rd_begin_capture(r);
    }
}

static int rd_start_array(void *ctx)
{
    tree_json_reader *r = ctx;
    if (r->cap)
        return cap_start_array(r->cap) ? 1 : (r->rc = r->cap->rc, 0);
    if (r->skip > 0 || r->pending_skip) {
        r->pending_skip = 0;
        r->setting = SET_NONE;
        return rd_open_skip(r);
    }
    if (r->outer == OUTER_START) {
        r->rc = cellar_fail(r->err, CELLAR_EFORMAT, "raw.treedata is not a JSON object");
        return 0;
    }
    return rd_not_object(r);
}

static int rd_map_key(void *ctx, const unsigned char *s, size_t n)
{
    tree_json_reader *r = ctx;
    if (r->cap)
        return cap_map_key(r->cap, s, n) ? 1 : (r->rc = r->cap->rc, 0);
    if (r->skip > 0)
        return 1;
    if (r->outer == OUTER_KEYS) {
        /* the forest's member (its first occurrence); label and
         * allow_overlap are kept; every other value is skipped */
        if (r->member && !r->legacy.has_trees && n == strlen(r->member) &&
            memcmp(s, r->member, n) == 0) {
            r->outer = OUTER_MEMBER;
            r->legacy.has_trees = 1;
            return 1;
        }
        r->setting = n == 5 && memcmp(s, "label", 5) == 0            ? SET_LABEL
                     : n == 13 && memcmp(s, "allow_overlap", 13) == 0 ? SET_OVERLAP
                                                                       : SET_NONE;
        r->pending_skip = 1;
        return 1;
    }
    keybuf *k = r->depth == 1 ? &r->tree_key : r->depth == 3 ? &r->k3 : &r->k4;
    if (r->depth == 2) {
        r->section = n == 5 && memcmp(s, "nodes", 5) == 0   ? SEC_NODES
                     : n == 5 && memcmp(s, "edges", 5) == 0 ? SEC_EDGES
                                                            : SEC_SKIP;
        r->pending_skip = r->section == SEC_SKIP;
        return 1;
    }
    if (key_set(k, s, n) < 0) {
        r->rc = fail_nomem(r->err);
        return 0;
    }
    if (r->depth == 3)
        r->k3_node = -1;
    return 1;
}

static int rd_end_tree(tree_json_reader *r)
{
    tree_index *t = NULL;
    tree_builder *b = r->b;
    r->b = NULL;
    int rc = tree_builder_finish(b, &t, r->err);
    if (rc == 0)
        rc = tree_forest_add(r->forest, r->tree_key.s, t, r->err);
    if (rc < 0) {
        r->rc = rc;
        return 0;
    }
    r->depth = 1;
    return 1;
}

static int rd_end_map(void *ctx)
{
    tree_json_reader *r = ctx;
    if (r->cap) {
        if (!cap_end_map(r->cap)) {
            r->rc = r->cap->rc;
            return 0;
        }
        return r->cap->depth == 0 ? rd_capture_done(r) : 1;
    }
    if (r->skip > 0) {
        r->skip--;
        return 1;
    }
    if (r->outer == OUTER_KEYS) {
        r->outer = OUTER_END;
        return 1;
    }
    switch (r->depth) {
    case 1:
        r->depth = 0;
        r->top_done = 1;
        if (r->outer == OUTER_MEMBER)
            r->outer = OUTER_KEYS;
        return 1;
    case 2:
        return rd_end_tree(r);
    default:
        r->depth--;
        return 1;
    }
}

static int rd_end_array(void *ctx)
{
    tree_json_reader *r = ctx;
    if (r->cap)
        return cap_end_array(r->cap) ? 1 : (r->rc = r->cap->rc, 0);
    r->skip--;
    return 1;
}

static const yajl_callbacks rd_callbacks = {
    rd_null,      rd_bool,    NULL,       NULL,           rd_number,    rd_string,
    rd_start_map, rd_map_key, rd_end_map, rd_start_array, rd_end_array,
};

tree_json_reader *tree_json_reader_new(void)
{
    tree_json_reader *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->forest = tree_forest_new();
    r->f.h = yajl_alloc(&rd_callbacks, NULL, r);
    r->f.cb_rc = &r->rc;
    if (!r->forest || !r->f.h || key_set(&r->tree_key, (const unsigned char *)"", 0) < 0) {
        tree_json_reader_free(r);
        return NULL;
    }
    return r;
}

void tree_json_reader_free(tree_json_reader *r)
{
    if (!r)
        return;
    if (r->f.h)
        yajl_free(r->f.h);
    tree_builder_free(r->b);
    tree_forest_free(r->forest);
    free(r->member);
    free(r->legacy.label);
    free(r->tree_key.s);
    free(r->k3.s);
    free(r->k4.s);
    free(r);
}

/* After a failure of the JSON itself (not of a callback): the nodes and
 * edges queued before it are added first, so that an error among them is
 * reported, as when each was added at once. */
static int rd_settle(tree_json_reader *r, int rc, cellar_error *err)
{
    int settled = batch_settle(r->b, rc, err);
    if (settled != rc)
        r->f.rc = settled;
    return settled;
}

int tree_json_reader_feed(tree_json_reader *r, const char *data, size_t len, cellar_error *err)
{
    if (r->f.rc < 0)
        return cellar_fail(err, r->f.rc, "tree JSON already failed");
    r->err = err;
    r->f.err = err;
    return rd_settle(r, jf_feed(&r->f, data, len), err);
}

int tree_json_reader_finish(tree_json_reader *r, tree_forest **out, cellar_error *err)
{
    *out = NULL;
    if (r->f.rc < 0)
        return cellar_fail(err, r->f.rc, "tree JSON already failed");
    r->err = err;
    r->f.err = err;
    int rc = rd_settle(r, jf_finish(&r->f), err);
    if (rc < 0)
        return rc;
    if (r->outer != OUTER_NONE && r->outer != OUTER_END)
        return cellar_fail(err, CELLAR_EFORMAT, "raw.treedata is not a complete JSON object");
    if (!r->top_done && r->outer == OUTER_NONE)
        return cellar_fail(err, CELLAR_EFORMAT, "tree JSON is empty");
    *out = r->forest;
    r->forest = NULL;
    return 0;
}

tree_json_reader *tree_json_reader_new_legacy(const char *axis)
{
    tree_json_reader *r = tree_json_reader_new();
    if (!r)
        return NULL;
    r->outer = OUTER_START;
    if (axis && !(r->member = strdup(axis))) {
        tree_json_reader_free(r);
        return NULL;
    }
    return r;
}

void tree_json_reader_legacy(tree_json_reader *r, tree_json_legacy *out)
{
    *out = r->legacy;
    memset(&r->legacy, 0, sizeof r->legacy);
}

int tree_forest_from_json(const char *json, size_t len, tree_forest **out, cellar_error *err)
{
    *out = NULL;
    tree_json_reader *r = tree_json_reader_new();
    if (!r)
        return fail_nomem(err);
    int rc = tree_json_reader_feed(r, json, len, err);
    if (rc == 0)
        rc = tree_json_reader_finish(r, out, err);
    tree_json_reader_free(r);
    return rc;
}
