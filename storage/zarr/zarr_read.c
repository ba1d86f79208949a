/* Reading a selection of a zarr array: only the chunks (or inner chunks of
 * shards) the selection touches are read, each with pread, decoded, and the
 * selected elements copied out.  All state lives in one zread per call, so
 * reads need no lock. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "storage/zarr/zarr_impl.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define HOST_BIG_ENDIAN 1
#else
#define HOST_BIG_ENDIAN 0
#endif

/* A stored chunk file may not be larger than this. */
#define ZARR_MAX_FILE (CODEC_MAX_DECODED + ((size_t)1 << 20))

/* The selected positions along one axis, grouped by the chunk they fall in.
 * A slice's groups are computed per chunk, not per position, and its
 * entries are implicit: entry k is output position k, at offset
 * start + k * step - chunk * csize in its chunk.  A list keeps its entries
 * (out, off), sorted by chunk when its order is not already grouped. */
typedef struct dim_plan {
    const dim_sel *s;
    int64_t csize;
    int64_t ngroups;
    int64_t *gchunk, *gstart, *glen;
    uint8_t *gcontig; /* output and chunk offsets both ascend by one */
    int64_t *out, *off; /* lists only */
} dim_plan;

/* A decoded chunk: borrowed from a cache entry (ref) or owned. */
typedef struct zchunk {
    const uint8_t *buf;
    size_t len;
    const codec_vlen_item *items;
    const chunk_cached *ref;
    uint8_t *own;
    codec_vlen_item *own_items;
} zchunk;

/* One shard with its index loaded; its file is opened when an inner chunk
 * must be read (a cached index needs none). */
typedef struct shard_slot {
    int used, missing, opened; /* opened: k is open (found or not) */
    zarr_key k;
    int64_t coord[NODE_MAX_DIMS];
    const uint64_t *pairs; /* 2 * nin: (offset, nbytes) */
    const chunk_cached *ref; /* holds pairs when cached */
    uint64_t *own;          /* holds pairs when not */
    char key[512];
} shard_slot;

/* Shards whose indexes are kept during one read (one when indexes are big),
 * so a selection that crosses shards along its last axis does not reread
 * them for every row of inner chunks. */
#define SHARD_SLOTS 8

typedef struct zread {
    const zarr_array *za;
    zarr_source *src;
    const char *rel, *what;
    int ndim;
    const int64_t *cshape;
    const zarr_chain *ch;
    int64_t strides[NODE_MAX_DIMS];
    uint64_t elems;
    dim_plan plan[NODE_MAX_DIMS];
    int64_t ostride[NODE_MAX_DIMS];
    uint8_t *out;
    size_t es;
    arena *a;
    char **sout;
    char *fill_copy;
    /* sharding: the shards whose index is loaded, a few at a time */
    int64_t cps[NODE_MAX_DIMS];
    uint64_t nin;
    shard_slot slots[SHARD_SLOTS];
    int nslots, victim;
    char key[512];
    /* The read covers the whole array (a scan, e.g. a tree's columns read
     * once to build an index): its chunks are decoded for it but not kept,
     * so a scan neither evicts what repeated slices use nor raises the
     * peak memory of the build it feeds. */
    int scan;
} zread;

static inline int64_t ent_out(const dim_plan *p, int64_t k)
{
    return p->out ? p->out[k] : k;
}

static inline int64_t ent_off(const dim_plan *p, int64_t k, int64_t c)
{
    return p->off ? p->off[k] : p->s->start + k * p->s->step - c * p->csize;
}

typedef struct sort_item {
    int64_t c, i, off;
} sort_item;

static int sort_item_cmp(const void *x, const void *y)
{
    const sort_item *a = x, *b = y;
    if (a->c != b->c)
        return a->c < b->c ? -1 : 1;
    return a->i < b->i ? -1 : a->i > b->i;
}

static void plan_add(dim_plan *p, int64_t k, int64_t i, int64_t c, int64_t off)
{
    int64_t g = p->ngroups - 1;
    if (p->ngroups == 0 || p->gchunk[g] != c) {
        g = p->ngroups++;
        p->gchunk[g] = c;
        p->gstart[g] = k;
        p->glen[g] = 0;
        p->gcontig[g] = 1;
    } else if (i != p->out[k - 1] + 1 || off != p->off[k - 1] + 1) {
        p->gcontig[g] = 0;
    }
    p->out[k] = i;
    p->off[k] = off;
    p->glen[g]++;
}

static void plan_free(dim_plan *p)
{
    free(p->gchunk);
    free(p->gstart);
    free(p->glen);
    free(p->gcontig);
    free(p->out);
    free(p->off);
}

static int plan_alloc_groups(dim_plan *p, size_t n)
{
    p->gchunk = malloc(n * sizeof(int64_t));
    p->gstart = malloc(n * sizeof(int64_t));
    p->glen = malloc(n * sizeof(int64_t));
    p->gcontig = malloc(n);
    return p->gchunk && p->gstart && p->glen && p->gcontig ? 0 : -1;
}

/* A slice's groups: one step per chunk it crosses. */
static int plan_slice(const dim_sel *s, int64_t csize, dim_plan *p)
{
    int64_t last = s->start + (s->count - 1) * s->step;
    int64_t lo = s->step > 0 ? s->start : last, hi = s->step > 0 ? last : s->start;
    int64_t span = hi / csize - lo / csize + 1;
    size_t n = (size_t)(s->count < span ? s->count : span);
    if (plan_alloc_groups(p, n ? n : 1))
        return -1;
    for (int64_t k = 0; k < s->count;) {
        int64_t c;
        int64_t len = dim_sel_run_in_chunk(s, k, csize, &c);
        int64_t g = p->ngroups++;
        p->gchunk[g] = c;
        p->gstart[g] = k;
        p->glen[g] = len;
        p->gcontig[g] = s->step == 1;
        k += len;
    }
    return 0;
}

static int plan_list(const dim_sel *s, int64_t csize, dim_plan *p)
{
    size_t n = (size_t)(s->count ? s->count : 1);
    p->out = malloc(n * sizeof(int64_t));
    p->off = malloc(n * sizeof(int64_t));
    if (plan_alloc_groups(p, n) || !p->out || !p->off)
        return -1;
    int grouped = 1;
    for (int64_t i = 1; i < s->count && grouped; i++)
        grouped = s->index[i - 1] / csize <= s->index[i] / csize;
    if (grouped) {
        for (int64_t i = 0; i < s->count; i++)
            plan_add(p, i, i, s->index[i] / csize, s->index[i] % csize);
        return 0;
    }
    sort_item *t = malloc(n * sizeof *t);
    if (!t)
        return -1;
    for (int64_t i = 0; i < s->count; i++) {
        t[i].c = s->index[i] / csize;
        t[i].off = s->index[i] % csize;
        t[i].i = i;
    }
    qsort(t, (size_t)s->count, sizeof *t, sort_item_cmp);
    for (int64_t k = 0; k < s->count; k++)
        plan_add(p, k, t[k].i, t[k].c, t[k].off);
    free(t);
    return 0;
}

static int plan_dim(const dim_sel *s, int64_t csize, dim_plan *p)
{
    memset(p, 0, sizeof *p);
    p->s = s;
    p->csize = csize;
    if (s->count <= 0)
        return plan_alloc_groups(p, 1);
    return s->index ? plan_list(s, csize, p) : plan_slice(s, csize, p);
}

/* ---- files -------------------------------------------------------------- */

/* Opens the chunk or shard key r->key of the array (found or not); close
 * it with close_key after 0. */
static int open_key(zread *r, zarr_key *k, cellar_error *err)
{
    char rel[4096];
    int n = snprintf(rel, sizeof rel, "%s%s%s", r->rel, r->rel[0] ? "/" : "", r->key);
    if (n < 0 || (size_t)n >= sizeof rel)
        return cellar_fail(err, CELLAR_EFORMAT, "chunk path of '%s' is too long", r->what);
    cellar_error local;
    cellar_error_clear(&local);
    int rc = r->src->ops->open_key(r->src, rel, k, &local);
    if (rc)
        return cellar_fail(err, rc, "chunk '%s' of '%s': %s", r->key, r->what, local.detail);
    if (!k->found && r->src->ops->missing_chunk)
        r->src->ops->missing_chunk(r->src, rel);
    return 0;
}

static void close_key(zread *r, zarr_key *k)
{
    r->src->ops->close_key(r->src, k);
}

/* Reads n bytes at off of the opened key k. */
static int read_key(zread *r, zarr_key *k, void *buf, size_t n, uint64_t off, const char *what,
                    cellar_error *err)
{
    return r->src->ops->read_key(r->src, k, off, n, buf, what, err);
}

static void make_key(zread *r, const int64_t *coords)
{
    const zarr_array *za = r->za;
    char sep[2] = {za->sep, '\0'};
    int n = snprintf(r->key, sizeof r->key, "%s", !za->v2_keys ? "c" : za->ndim ? "" : "0");
    size_t o = (size_t)n;
    for (int d = 0; d < za->ndim; d++) {
        n = snprintf(r->key + o, sizeof r->key - o, "%s%lld", za->v2_keys && d == 0 ? "" : sep,
                     (long long)coords[d]);
        o += (size_t)n;
    }
}

/* ---- decoding ----------------------------------------------------------- */

static void chunk_free(zchunk *c)
{
    chunk_cache_release(c->ref);
    free(c->own);
    free(c->own_items);
    memset(c, 0, sizeof *c);
}

static void cache_key(const zread *r, const int64_t *coords, uint32_t kind, chunk_cache_key *k)
{
    memset(k, 0, sizeof *k);
    k->store = r->za->cache_store;
    k->array = r->za->cache_array;
    k->kind = kind;
    memcpy(k->coords, coords, (size_t)r->ndim * sizeof *coords);
}

/* Hands the decoded buffers to the cache (when the array has a cache
 * identity) and points c at what it keeps. */
static int chunk_keep(zread *r, const int64_t *coords, uint8_t *buf, size_t len,
                      codec_vlen_item *items, zchunk *c, cellar_error *err)
{
    if (!r->za->cache_array || r->scan) {
        c->buf = c->own = buf;
        c->len = len;
        c->items = c->own_items = items;
        return 0;
    }
    chunk_cache_key k;
    cache_key(r, coords, CHUNK_CACHE_CHUNK, &k);
    c->ref = chunk_cache_put(chunk_cache_of(CHUNK_CACHE_ZARR), &k, buf, len, items, items ? (size_t)r->elems : 0);
    if (!c->ref)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory reading '%s'", r->what);
    c->buf = chunk_cached_buf(c->ref, &c->len, &c->items);
    return 0;
}

/* A decoded chunk from the cache: 1 when found. */
static int chunk_from_cache(zread *r, const int64_t *coords, zchunk *c)
{
    if (!r->za->cache_array)
        return 0;
    chunk_cache_key k;
    cache_key(r, coords, CHUNK_CACHE_CHUNK, &k);
    c->ref = chunk_cache_get(chunk_cache_of(CHUNK_CACHE_ZARR), &k);
    if (!c->ref)
        return 0;
    c->buf = chunk_cached_buf(c->ref, &c->len, &c->items);
    return 1;
}

/* Decodes raw (owned, freed here) with the chain into c; the chunk is the
 * one at coords (for the cache). */
static int chunk_decode(zread *r, const int64_t *coords, uint8_t *raw, size_t n, zchunk *c,
                        cellar_error *err)
{
    const zarr_array *za = r->za;
    const zarr_chain *ch = r->ch;
    char what[700];
    snprintf(what, sizeof what, "chunk '%s' of '%s'", r->key, r->what);
    int vlen = ch->a2b == ZA_VLEN;
    size_t a2b_size = vlen ? CODEC_SIZE_UNKNOWN : (size_t)r->elems * za->itemsize;
    uint8_t *cur = raw;
    size_t curn = n;
    codec_vlen_item *items = NULL;
    int rc = 0;
    for (int i = ch->nb2b - 1; i >= 0; i--) {
        uint8_t *next = NULL;
        size_t nn = 0;
        rc = codec_decode(ch->b2b[i], cur, curn, i == 0 ? a2b_size : CODEC_SIZE_UNKNOWN,
                          CODEC_MAX_DECODED, &next, &nn, what, err);
        free(cur);
        cur = next;
        if (rc)
            goto fail;
        curn = nn;
    }
    if (!vlen && curn != a2b_size) {
        rc = cellar_fail(err, CELLAR_EFORMAT, "%s holds %zu bytes, expected %zu", what, curn,
                         a2b_size);
        goto fail;
    }
    if (vlen) {
        /* Every string costs a 4-byte length after the 4-byte count: a
         * chunk shape that claims more strings than the decoded bytes can
         * hold is refused before its items are allocated. */
        if (curn < 4 || r->elems > (curn - 4) / 4) {
            rc = cellar_fail(err, CELLAR_EFORMAT,
                             "%s holds %zu bytes, too few for the %llu strings of its chunk "
                             "shape", what, curn, (unsigned long long)r->elems);
            goto fail;
        }
        items = malloc((size_t)(r->elems ? r->elems : 1) * sizeof *items);
        if (!items) {
            rc = cellar_fail(err, CELLAR_ENOMEM, "out of memory decoding %s", what);
            goto fail;
        }
        rc = codec_vlen_decode(cur, curn, r->elems, za->kind == ZK_VLEN_UTF8, items, what, err);
        if (rc)
            goto fail;
    } else if (za->kind == ZK_NUMERIC && ch->big_endian != HOST_BIG_ENDIAN) {
        codec_byteswap(cur, (size_t)r->elems, za->itemsize);
    }
    return chunk_keep(r, coords, cur, curn, items, c, err);
fail:
    free(cur);
    free(items);
    return rc;
}

/* ---- copying ------------------------------------------------------------ */

static int put_string(zread *r, const zchunk *c, int64_t src, int64_t dst, cellar_error *err)
{
    const zarr_array *za = r->za;
    char *s = NULL;
    if (!c) {
        r->sout[dst] = r->fill_copy;
        return 0;
    }
    if (za->kind == ZK_VLEN_UTF8 || za->kind == ZK_VLEN_BYTES) {
        const codec_vlen_item *it = &c->items[src];
        s = arena_strndup(r->a, (const char *)c->buf + it->off, it->len);
    } else if (za->kind == ZK_FIXED_BYTES) {
        const char *p = (const char *)c->buf + (size_t)src * za->itemsize;
        s = arena_strndup(r->a, p, strnlen(p, za->itemsize));
    } else {
        s = arena_alloc(r->a, za->itemsize + 1);
        if (s && codec_utf32_to_utf8(c->buf + (size_t)src * za->itemsize, za->itemsize / 4,
                                     r->ch->big_endian, s, r->what, err) < 0)
            return CELLAR_EFORMAT;
    }
    if (!s)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory reading '%s'", r->what);
    r->sout[dst] = s;
    return 0;
}

static void put_number(zread *r, const zchunk *c, int64_t src, int64_t dst)
{
    uint8_t *o = r->out + (size_t)dst * r->es;
    if (!c && r->es > sizeof r->za->fill)
        memset(o, 0, r->es); /* records: zeros */
    else if (!c)
        memcpy(o, r->za->fill, r->es);
    else if (r->za->dtype == DT_BOOL)
        *o = c->buf[src] != 0;
    else
        memcpy(o, c->buf + (size_t)src * r->es, r->es);
}

/* rows runs of row_bytes each, sstep bytes apart in the chunk and dstep in
 * the output.  Narrow runs (a chunk one or two columns wide, as anndata
 * writes obsm embeddings) are copied as single values, not by a memcpy call
 * each. */
static void copy_rows(uint8_t *dst, const uint8_t *src, int64_t rows, size_t row_bytes,
                      size_t sstep, size_t dstep)
{
#define COPY_ROWS_OF(T)                                                                   \
    for (int64_t i = 0; i < rows; i++, src += sstep, dst += dstep) {                      \
        T v;                                                                              \
        memcpy(&v, src, sizeof v);                                                        \
        memcpy(dst, &v, sizeof v);                                                        \
    }
    switch (row_bytes) {
    case 1: COPY_ROWS_OF(uint8_t); break;
    case 2: COPY_ROWS_OF(uint16_t); break;
    case 4: COPY_ROWS_OF(uint32_t); break;
    case 8: COPY_ROWS_OF(uint64_t); break;
    default:
        for (int64_t i = 0; i < rows; i++, src += sstep, dst += dstep)
            memcpy(dst, src, row_bytes);
    }
#undef COPY_ROWS_OF
}

/* Copies the selected elements of the chunk at group indices gidx (c NULL:
 * the chunk is missing, use the fill value).  A run that ascends by one both
 * in the chunk's last axis and in the output is one copy, and when the
 * next-to-last axis ascends by one too, its rows go in one strided pass. */
static int copy_chunk(zread *r, const int64_t *gidx, const int64_t *coords, const zchunk *c,
                      cellar_error *err)
{
    int nd = r->ndim;
    int strings = r->za->dtype == DT_STRING;
    if (nd == 0)
        return strings ? put_string(r, c, 0, 0, err) : (put_number(r, c, 0, 0), 0);
    int64_t k[NODE_MAX_DIMS];
    for (int d = 0; d < nd; d++)
        k[d] = r->plan[d].gstart[gidx[d]];
    const dim_plan *lp = &r->plan[nd - 1];
    int64_t lg = gidx[nd - 1], lstart = lp->gstart[lg], llen = lp->glen[lg];
    int64_t lc = coords[nd - 1], lstride = r->strides[nd - 1];
    int fast = c && !strings && r->za->dtype != DT_BOOL && lp->gcontig[lg] && lstride == 1;
    const dim_plan *rp = nd >= 2 ? &r->plan[nd - 2] : NULL;
    int64_t rg = nd >= 2 ? gidx[nd - 2] : 0;
    int row_pass = fast && rp && rp->gcontig[rg];
    for (;;) {
        int64_t sb = 0, db = 0;
        for (int d = 0; d < nd - 1; d++) {
            sb += ent_off(&r->plan[d], k[d], coords[d]) * r->strides[d];
            db += ent_out(&r->plan[d], k[d]) * r->ostride[d];
        }
        if (row_pass) {
            int64_t s0 = sb + ent_off(lp, lstart, lc), d0 = db + ent_out(lp, lstart);
            copy_rows(r->out + (size_t)d0 * r->es, c->buf + (size_t)s0 * r->es, rp->glen[rg],
                      (size_t)llen * r->es, (size_t)r->strides[nd - 2] * r->es,
                      (size_t)r->ostride[nd - 2] * r->es);
            k[nd - 2] = rp->gstart[rg] + rp->glen[rg] - 1; /* the pass did them all */
        } else if (fast) {
            int64_t s0 = sb + ent_off(lp, lstart, lc), d0 = db + ent_out(lp, lstart);
            memcpy(r->out + (size_t)d0 * r->es, c->buf + (size_t)s0 * r->es,
                   (size_t)llen * r->es);
        } else {
            for (int64_t j = lstart; j < lstart + llen; j++) {
                int64_t s = sb + ent_off(lp, j, lc) * lstride, dd = db + ent_out(lp, j);
                if (strings) {
                    int rc = put_string(r, c, s, dd, err);
                    if (rc)
                        return rc;
                } else {
                    put_number(r, c, s, dd);
                }
            }
        }
        int d = nd - 2;
        for (; d >= 0; d--) {
            const dim_plan *p = &r->plan[d];
            if (++k[d] < p->gstart[gidx[d]] + p->glen[gidx[d]])
                break;
            k[d] = p->gstart[gidx[d]];
        }
        if (d < 0)
            return 0;
    }
}

/* ---- chunk sources ------------------------------------------------------ */

static int read_whole_chunk(zread *r, const int64_t *coords, zchunk *c, int *missing,
                            cellar_error *err)
{
    *missing = 0;
    if (chunk_from_cache(r, coords, c))
        return 0;
    make_key(r, coords);
    zarr_key k;
    int rc = open_key(r, &k, err);
    if (rc)
        return rc;
    *missing = !k.found;
    uint64_t size = k.size;
    uint8_t *raw = NULL;
    if (!k.found)
        goto done;
    if (size > ZARR_MAX_FILE) {
        rc = cellar_fail(err, CELLAR_EFORMAT, "chunk '%s' of '%s' is too large", r->key,
                         r->what);
        goto done;
    }
    raw = malloc(size ? (size_t)size : 1);
    if (!raw) {
        rc = cellar_fail(err, CELLAR_ENOMEM, "out of memory reading '%s'", r->what);
        goto done;
    }
    char what[700];
    snprintf(what, sizeof what, "chunk '%s' of '%s'", r->key, r->what);
    rc = read_key(r, &k, raw, (size_t)size, 0, what, err);
    if (!rc) {
        rc = chunk_decode(r, coords, raw, (size_t)size, c, err);
        raw = NULL;
    }
done:
    free(raw);
    close_key(r, &k);
    return rc;
}

static void slot_clear(zread *r, shard_slot *sl)
{
    if (sl->opened)
        close_key(r, &sl->k);
    chunk_cache_release(sl->ref);
    free(sl->own);
    memset(sl, 0, sizeof *sl);
}

static void shards_close(zread *r)
{
    for (int i = 0; i < r->nslots; i++)
        slot_clear(r, &r->slots[i]);
}

/* Reads and decodes the index of the shard open in sl. */
static int shard_index_load(zread *r, shard_slot *sl, uint64_t size, cellar_error *err)
{
    const zarr_array *za = r->za;
    char what[700];
    snprintf(what, sizeof what, "shard '%s' of '%s'", sl->key, r->what);
    size_t isz = (size_t)r->nin * 16 + (za->index_crc ? 4 : 0);
    if (size < isz)
        return cellar_fail(err, CELLAR_EFORMAT, "%s is smaller than its index", what);
    uint64_t *pairs = malloc((size_t)r->nin * 2 * sizeof *pairs);
    uint8_t *idx = malloc(isz);
    int rc = 0;
    if (!pairs || !idx) {
        rc = cellar_fail(err, CELLAR_ENOMEM, "out of memory reading %s", what);
        goto done;
    }
    rc = read_key(r, &sl->k, idx, isz, za->index_at_start ? 0 : size - isz, what, err);
    if (!rc)
        rc = codec_shard_index_decode(idx, isz, r->nin, za->index_big_endian, za->index_crc,
                                      size, pairs, what, err);
    if (rc)
        goto done;
    if (!za->cache_array) {
        sl->pairs = sl->own = pairs;
        pairs = NULL;
        goto done;
    }
    chunk_cache_key k;
    cache_key(r, sl->coord, CHUNK_CACHE_SHARD_INDEX, &k);
    sl->ref = chunk_cache_put(chunk_cache_of(CHUNK_CACHE_ZARR), &k, (uint8_t *)pairs, (size_t)r->nin * 2 * sizeof *pairs, NULL, 0);
    pairs = NULL;
    if (!sl->ref) {
        rc = cellar_fail(err, CELLAR_ENOMEM, "out of memory reading %s", what);
        goto done;
    }
    size_t len;
    sl->pairs = (const uint64_t *)chunk_cached_buf(sl->ref, &len, NULL);
done:
    free(idx);
    free(pairs);
    return rc;
}

static int shard_load(zread *r, shard_slot *sl, const int64_t *scoord, cellar_error *err)
{
    slot_clear(r, sl);
    make_key(r, scoord);
    memcpy(sl->key, r->key, sizeof sl->key);
    memcpy(sl->coord, scoord, sizeof sl->coord);
    if (r->za->cache_array) {
        chunk_cache_key k;
        cache_key(r, scoord, CHUNK_CACHE_SHARD_INDEX, &k);
        if ((sl->ref = chunk_cache_get(chunk_cache_of(CHUNK_CACHE_ZARR), &k))) {
            size_t len;
            sl->pairs = (const uint64_t *)chunk_cached_buf(sl->ref, &len, NULL);
            sl->used = 1;
            return 0;
        }
    }
    int rc = open_key(r, &sl->k, err);
    if (rc)
        return rc;
    sl->opened = 1;
    sl->missing = !sl->k.found;
    if (!sl->missing)
        rc = shard_index_load(r, sl, sl->k.size, err);
    sl->used = rc == 0;
    return rc;
}

static int shard_find(zread *r, const int64_t *scoord, shard_slot **out, cellar_error *err)
{
    for (int i = 0; i < r->nslots; i++) {
        if (r->slots[i].used && memcmp(r->slots[i].coord, scoord, sizeof r->slots[i].coord) == 0) {
            *out = &r->slots[i];
            return 0;
        }
    }
    shard_slot *sl = &r->slots[r->victim];
    r->victim = (r->victim + 1) % r->nslots;
    *out = sl;
    return shard_load(r, sl, scoord, err);
}

static int read_inner_chunk(zread *r, const int64_t *coords, zchunk *c, int *missing,
                            cellar_error *err)
{
    *missing = 0;
    if (chunk_from_cache(r, coords, c))
        return 0;
    int64_t scoord[NODE_MAX_DIMS] = {0};
    uint64_t lin = 0;
    for (int d = 0; d < r->ndim; d++) {
        scoord[d] = coords[d] / r->cps[d];
        lin = lin * (uint64_t)r->cps[d] + (uint64_t)(coords[d] % r->cps[d]);
    }
    shard_slot *sl = NULL;
    int rc = shard_find(r, scoord, &sl, err);
    if (rc)
        return rc;
    *missing = 1;
    if (sl->missing || sl->pairs[2 * lin] == CODEC_SHARD_EMPTY)
        return 0;
    *missing = 0;
    uint64_t off = sl->pairs[2 * lin], nb = sl->pairs[2 * lin + 1];
    memcpy(r->key, sl->key, sizeof r->key);
    char what[700];
    snprintf(what, sizeof what, "inner chunk %llu of shard '%s' of '%s'",
             (unsigned long long)lin, sl->key, r->what);
    if (!sl->opened) {
        /* The index came from the cache: open the shard now. */
        rc = open_key(r, &sl->k, err);
        if (rc)
            return rc;
        sl->opened = 1;
    }
    if (!sl->k.found)
        return cellar_fail(err, CELLAR_EIO, "%s disappeared", what);
    if (nb > ZARR_MAX_FILE)
        return cellar_fail(err, CELLAR_EFORMAT, "%s is too large", what);
    uint8_t *raw = malloc(nb ? (size_t)nb : 1);
    if (!raw)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory reading %s", what);
    if (off > sl->k.size || nb > sl->k.size - off) {
        free(raw);
        return cellar_fail(err, CELLAR_EFORMAT, "%s ends early", what);
    }
    rc = read_key(r, &sl->k, raw, (size_t)nb, off, what, err);
    if (rc) {
        free(raw);
        return rc;
    }
    return chunk_decode(r, coords, raw, (size_t)nb, c, err);
}

/* ---- entry -------------------------------------------------------------- */

/* Chunk keys handed to a source's prefetch at most per call. */
#define PREFETCH_MAX 256

/* Tells a source that fetches ahead (a remote one) which whole chunk keys
 * the read needs and the decoded chunk cache lacks, so it fetches them at
 * once rather than one after the other.  Not for sharded arrays (their
 * inner chunks are ranges of a shard, read after its index). */
static void prefetch_chunks(zread *r)
{
    if (!r->src->ops->prefetch || r->za->sharded)
        return;
    int nd = r->ndim;
    int64_t gidx[NODE_MAX_DIMS] = {0}, coords[NODE_MAX_DIMS] = {0};
    for (int d = 0; d < nd; d++)
        if (r->plan[d].ngroups == 0)
            return;
    char *keys[PREFETCH_MAX];
    size_t n = 0;
    for (int more = 1; more && n < PREFETCH_MAX;) {
        for (int d = 0; d < nd; d++)
            coords[d] = r->plan[d].gchunk[gidx[d]];
        zchunk c = {0};
        if (chunk_from_cache(r, coords, &c)) {
            chunk_free(&c);
        } else {
            make_key(r, coords);
            size_t len = strlen(r->rel) + 1 + strlen(r->key) + 1;
            char *k = malloc(len);
            if (!k)
                break;
            snprintf(k, len, "%s%s%s", r->rel, r->rel[0] ? "/" : "", r->key);
            keys[n++] = k;
        }
        int d = nd - 1;
        for (; d >= 0; d--) {
            if (++gidx[d] < r->plan[d].ngroups)
                break;
            gidx[d] = 0;
        }
        more = d >= 0;
    }
    if (n > 1)
        r->src->ops->prefetch(r->src, (const char *const *)keys, n);
    for (size_t i = 0; i < n; i++)
        free(keys[i]);
}

static int read_all_chunks(zread *r, cellar_error *err)
{
    int nd = r->ndim;
    int64_t gidx[NODE_MAX_DIMS] = {0}, coords[NODE_MAX_DIMS] = {0};
    for (int d = 0; d < nd; d++)
        if (r->plan[d].ngroups == 0)
            return 0;
    prefetch_chunks(r);
    for (;;) {
        for (int d = 0; d < nd; d++)
            coords[d] = r->plan[d].gchunk[gidx[d]];
        zchunk c = {0};
        int missing = 0;
        int rc = r->za->sharded ? read_inner_chunk(r, coords, &c, &missing, err)
                                : read_whole_chunk(r, coords, &c, &missing, err);
        if (!rc)
            rc = copy_chunk(r, gidx, coords, missing ? NULL : &c, err);
        chunk_free(&c);
        if (rc)
            return rc;
        int d = nd - 1;
        for (; d >= 0; d--) {
            if (++gidx[d] < r->plan[d].ngroups)
                break;
            gidx[d] = 0;
        }
        if (d < 0)
            return 0;
    }
}

int zarr_array_read(const zarr_array *za, zarr_source *src, const char *rel, const char *what,
                    const dim_sel *sel, void *out, size_t out_bytes, arena *a, char **sout,
                    cellar_error *err)
{
    (void)out_bytes;
    if (za->unsupported)
        return cellar_fail(err, CELLAR_EFORMAT, "'%s' cannot be read: %s", what, za->unsupported);
    zread r;
    memset(&r, 0, sizeof r);
    r.za = za;
    r.src = src;
    r.rel = rel;
    r.what = what;
    r.ndim = za->ndim;
    r.cshape = za->sharded ? za->inner : za->chunk;
    r.ch = za->sharded ? &za->inner_chain : &za->chain;
    r.out = out;
    r.es = za->kind == ZK_RECORDS ? za->itemsize : dtype_size(za->dtype);
    r.a = a;
    r.sout = sout;
    r.scan = 1;
    for (int d = 0; d < za->ndim; d++)
        r.scan &= !sel[d].index && sel[d].step == 1 && sel[d].start == 0 &&
                  sel[d].count == za->shape[d];
    int rc = codec_transpose_strides(za->ndim, r.cshape, r.ch->has_perm ? r.ch->perm : NULL,
                                     r.strides, err);
    if (rc)
        return rc;
    r.elems = 1;
    for (int d = 0; d < za->ndim; d++)
        r.elems *= (uint64_t)r.cshape[d];
    if (sout) {
        r.fill_copy = arena_strdup(a, za->fill_str ? za->fill_str : "");
        if (!r.fill_copy)
            return cellar_fail(err, CELLAR_ENOMEM, "out of memory reading '%s'", what);
    }
    if (za->sharded) {
        r.nin = 1;
        for (int d = 0; d < za->ndim; d++) {
            r.cps[d] = za->chunk[d] / za->inner[d];
            r.nin *= (uint64_t)r.cps[d];
        }
        r.nslots = r.nin * 16 <= ((uint64_t)256 << 10) ? SHARD_SLOTS : 1;
    }
    int64_t os = 1;
    for (int d = za->ndim - 1; d >= 0; d--) {
        r.ostride[d] = os;
        os *= sel[d].count;
    }
    for (int d = 0; d < za->ndim && !rc; d++)
        if (plan_dim(&sel[d], r.cshape[d], &r.plan[d]))
            rc = cellar_fail(err, CELLAR_ENOMEM, "out of memory planning a read of '%s'", what);
    if (!rc)
        rc = read_all_chunks(&r, err);
    for (int d = 0; d < za->ndim; d++)
        plan_free(&r.plan[d]);
    shards_close(&r);
    return rc;
}

int zarr_shard_index_read(const zarr_array *za, const uint8_t *src, size_t n,
                          uint64_t shard_size, uint64_t **pairs, uint64_t *nchunks,
                          cellar_error *err)
{
    *pairs = NULL;
    *nchunks = 0;
    if (!za->sharded)
        return cellar_fail(err, CELLAR_EINVAL, "array is not sharded");
    uint64_t nin = 1;
    for (int d = 0; d < za->ndim; d++)
        nin *= (uint64_t)(za->chunk[d] / za->inner[d]);
    /* The index is 16 bytes an inner chunk: its count is checked against
     * the bytes given before it sizes the pairs (zarr_array_parse_v3 keeps
     * it at most 2^20). */
    if (nin > (SIZE_MAX - 4) / 16 || n != (size_t)nin * 16 + (za->index_crc ? 4 : 0))
        return cellar_fail(err, CELLAR_EFORMAT, "shard index has %zu bytes, not 16 for each "
                           "of its %llu inner chunks", n, (unsigned long long)nin);
    uint64_t *p = malloc((size_t)nin * 2 * sizeof *p);
    if (!p)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory for a shard index");
    int rc = codec_shard_index_decode(src, n, nin, za->index_big_endian, za->index_crc,
                                      shard_size, p, "shard index", err);
    if (rc) {
        free(p);
        return rc;
    }
    *pairs = p;
    *nchunks = nin;
    return 0;
}
