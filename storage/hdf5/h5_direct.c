/* HDF5 dataset bytes decoded outside libhdf5; see storage/hdf5/h5_direct.h.
 *
 * A read groups the selected positions of each dimension by the chunk they
 * fall in, then visits every touched chunk once: it gets the chunk's bytes
 * (pread of the stored bytes and the inverse filter pipeline, or only the
 * span of raw bytes the selection touches when the chunk is unfiltered) and
 * copies the selected elements to their places in the output.  Contiguous
 * datasets are read through the same walk over "virtual" chunks: pieces of
 * about 1 MiB that are contiguous in the file. */
#include "storage/hdf5/h5_direct.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include <liblzf/lzf.h>

#include "common/satmath.h"
#include "storage/chunk_cache.h"
#include "storage/codecs.h"

/* Bytes of a contiguous dataset's virtual chunk. */
#define H5D_VCHUNK_BYTES ((size_t)1 << 20)
/* An unfiltered chunk is read as one span from its first to its last
 * touched element when the span is at most this many times the bytes
 * needed (plus H5D_SPAN_SLACK), else row by row. */
#define H5D_SPAN_FACTOR 4
#define H5D_SPAN_SLACK ((size_t)64 << 10)

typedef struct h5d_entry {
    uint64_t gidx; /* linear index in the chunk grid */
    uint64_t addr, size;
    uint32_t mask;
} h5d_entry;

struct h5d_plan {
    h5d_layout l;
    int64_t chunk[NODE_MAX_DIMS];   /* the grid walked (virtual when contiguous) */
    int64_t grid[NODE_MAX_DIMS];    /* chunks along each dimension */
    int64_t cstride[NODE_MAX_DIMS]; /* element strides inside a chunk */
    uint64_t gstride[NODE_MAX_DIMS];
    int64_t fstride[NODE_MAX_DIMS]; /* element strides of the whole dataset */
    size_t chunk_bytes;
    size_t max_stored;
    uint32_t all_filters; /* mask with every filter of the pipeline skipped */
    unsigned char fill_stored[8];
    int has_table;
    h5d_entry *entries;
    size_t nentries, cap;
    chunk_cache *cache; /* decoded chunks kept there (h5d_plan_cache_as), or NULL */
    uint64_t cache_store, cache_array;
};

#define WHAT(w) ((w) ? (w) : "dataset")

static int mul_ok(size_t a, size_t b, size_t *out)
{
    if (a && b > SIZE_MAX / a)
        return 0;
    *out = a * b;
    return 1;
}

/* ------------------------------------------------------------- filters */

uint32_t h5d_fletcher32(const uint8_t *data, size_t n)
{
    size_t len = n / 2;
    uint32_t sum1 = 0, sum2 = 0;
    while (len) {
        size_t tlen = len > 360 ? 360 : len;
        len -= tlen;
        do {
            sum1 += (uint32_t)(((uint16_t)data[0]) << 8) | ((uint16_t)data[1]);
            data += 2;
            sum2 += sum1;
        } while (--tlen);
        sum1 = (sum1 & 0xffff) + (sum1 >> 16);
        sum2 = (sum2 & 0xffff) + (sum2 >> 16);
    }
    if (n % 2) {
        sum1 += (uint32_t)(((uint16_t)*data) << 8);
        sum2 += sum1;
        sum1 = (sum1 & 0xffff) + (sum1 >> 16);
        sum2 = (sum2 & 0xffff) + (sum2 >> 16);
    }
    sum1 = (sum1 & 0xffff) + (sum1 >> 16);
    sum2 = (sum2 & 0xffff) + (sum2 >> 16);
    return (sum2 << 16) | sum1;
}

void h5d_unshuffle(const uint8_t *src, uint8_t *dst, size_t n, size_t size)
{
    size_t count = size ? n / size : 0;
    if (size <= 1 || count <= 1) {
        memcpy(dst, src, n);
        return;
    }
    for (size_t j = 0; j < size; j++) {
        const uint8_t *s = src + j * count;
        uint8_t *d = dst + j;
        for (size_t i = 0; i < count; i++, d += size)
            *d = s[i];
    }
    size_t done = count * size;
    memcpy(dst + done, src + done, n - done);
}

static int inflate_exact(const uint8_t *src, size_t n, uint8_t *dst, size_t want,
                         const char *what, cellar_error *err)
{
    if (n > UINT_MAX || want > UINT_MAX)
        return cellar_fail(err, CELLAR_EFORMAT, "a chunk of '%s' is too large", WHAT(what));
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    if (inflateInit(&zs) != Z_OK)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory decoding '%s'", WHAT(what));
    zs.next_in = (Bytef *)src;
    zs.avail_in = (uInt)n;
    zs.next_out = dst;
    zs.avail_out = (uInt)want;
    int ret = inflate(&zs, Z_FINISH);
    size_t got = (size_t)zs.total_out;
    inflateEnd(&zs);
    if (ret == Z_STREAM_END && got == want)
        return 0;
    if (ret == Z_STREAM_END)
        return cellar_fail(err, CELLAR_EFORMAT,
                           "a chunk of '%s' inflates to %zu bytes, expected %zu", WHAT(what),
                           got, want);
    return cellar_fail(err, CELLAR_EFORMAT,
                       "a chunk of '%s' is not a valid deflate stream of %zu bytes",
                       WHAT(what), want);
}

/* h5py's LZF filter stores one raw LZF block of the whole chunk. */
static int lzf_exact(const uint8_t *src, size_t n, uint8_t *dst, size_t want, const char *what,
                     cellar_error *err)
{
    if (n > UINT_MAX || want > UINT_MAX)
        return cellar_fail(err, CELLAR_EFORMAT, "a chunk of '%s' is too large", WHAT(what));
    unsigned got = lzf_decompress(src, (unsigned)n, dst, (unsigned)want);
    if (got != want)
        return cellar_fail(err, CELLAR_EFORMAT,
                           "a chunk of '%s' is not an LZF block of %zu bytes", WHAT(what), want);
    return 0;
}

static int is_compressor(int id)
{
    return id == H5D_FILTER_DEFLATE || id == H5D_FILTER_LZF;
}

static int filter_active(uint32_t mask, int i)
{
    return !(mask & ((uint32_t)1 << i));
}

/* Runs the pipeline backwards over n stored bytes; *out points at the
 * chunk_bytes decoded bytes (in b0, b1 or stored itself). */
static int decode_chunk(const h5d_plan *p, const uint8_t *stored, size_t n, uint32_t mask,
                        uint8_t *b0, uint8_t *b1, const uint8_t **out, const char *what,
                        cellar_error *err)
{
    const h5d_layout *l = &p->l;
    size_t insize[H5D_MAX_FILTERS];
    size_t s = p->chunk_bytes;
    for (int i = 0; i < l->nfilters; i++) {
        insize[i] = s;
        if (!filter_active(mask, i) || s == SIZE_MAX)
            continue;
        if (l->filters[i].id == H5D_FILTER_FLETCHER32)
            s += 4;
        else if (is_compressor(l->filters[i].id))
            s = SIZE_MAX;
    }
    const uint8_t *cur = stored;
    size_t len = n;
    for (int i = l->nfilters - 1; i >= 0; i--) {
        if (!filter_active(mask, i))
            continue;
        uint8_t *dst = cur == b0 ? b1 : b0;
        switch (l->filters[i].id) {
        case H5D_FILTER_FLETCHER32: {
            if (len < 4)
                return cellar_fail(err, CELLAR_EFORMAT,
                                   "a chunk of '%s' is too short for its checksum", WHAT(what));
            const uint8_t *c = cur + len - 4;
            uint32_t want = (uint32_t)c[0] | (uint32_t)c[1] << 8 | (uint32_t)c[2] << 16 |
                            (uint32_t)c[3] << 24;
            uint32_t f = h5d_fletcher32(cur, len - 4);
            uint32_t rev = ((f & 0x00ff00ffu) << 8) | ((f >> 8) & 0x00ff00ffu);
            if (want != f && want != rev)
                return cellar_fail(err, CELLAR_EFORMAT,
                                   "a chunk of '%s' fails its Fletcher-32 checksum", WHAT(what));
            len -= 4;
            break;
        }
        case H5D_FILTER_DEFLATE:
        case H5D_FILTER_LZF: {
            if (insize[i] == SIZE_MAX || insize[i] > p->chunk_bytes + 4 * H5D_MAX_FILTERS)
                return cellar_fail(err, CELLAR_EFORMAT, "a chunk of '%s' has an unusable "
                                   "filter pipeline", WHAT(what));
            int rc = l->filters[i].id == H5D_FILTER_LZF
                         ? lzf_exact(cur, len, dst, insize[i], what, err)
                         : inflate_exact(cur, len, dst, insize[i], what, err);
            if (rc)
                return rc;
            cur = dst;
            len = insize[i];
            break;
        }
        case H5D_FILTER_SHUFFLE:
            if ((insize[i] != SIZE_MAX && len != insize[i]) ||
                len > p->chunk_bytes + 4 * H5D_MAX_FILTERS)
                return cellar_fail(err, CELLAR_EFORMAT,
                                   "a chunk of '%s' has %zu bytes where %zu were expected",
                                   WHAT(what), len, insize[i]);
            h5d_unshuffle(cur, dst, len, l->filters[i].shuffle_size);
            cur = dst;
            break;
        default:
            return cellar_fail(err, CELLAR_EINTERNAL, "unknown filter reached '%s'", WHAT(what));
        }
    }
    if (len != p->chunk_bytes)
        return cellar_fail(err, CELLAR_EFORMAT, "a chunk of '%s' decodes to %zu bytes, expected %zu",
                           WHAT(what), len, p->chunk_bytes);
    *out = cur;
    return 0;
}

/* ---------------------------------------------------------------- plans */

/* Virtual chunks of a contiguous dataset: (1, ..., 1, k, full, ..., full),
 * or (1, ..., 1, L) when one row is too long, so each is one run of the
 * file. */
static void contiguous_grid(h5d_plan *p)
{
    const h5d_layout *l = &p->l;
    size_t target = H5D_VCHUNK_BYTES / l->elem_size;
    size_t suffix = 1;
    int d = l->ndim - 1;
    for (; d >= 0; d--) {
        size_t len = l->shape[d] > 0 ? (size_t)l->shape[d] : 1;
        if (len > target / suffix)
            break;
        p->chunk[d] = (int64_t)len;
        suffix *= len;
    }
    if (d >= 0) {
        size_t k = target / suffix;
        p->chunk[d] = (int64_t)(k ? k : 1);
        for (d--; d >= 0; d--)
            p->chunk[d] = 1;
    }
}

static int plan_check_filters(h5d_plan *p, const char *what, cellar_error *err)
{
    const h5d_layout *l = &p->l;
    if (l->nfilters < 0 || l->nfilters > H5D_MAX_FILTERS)
        return cellar_fail(err, CELLAR_EINVAL, "'%s' has too many filters", WHAT(what));
    int compressors = 0;
    size_t extra = 0;
    for (int i = 0; i < l->nfilters; i++) {
        switch (l->filters[i].id) {
        case H5D_FILTER_DEFLATE:
        case H5D_FILTER_LZF: compressors++; break;
        case H5D_FILTER_FLETCHER32: extra += 4; break;
        case H5D_FILTER_SHUFFLE:
            if (!l->filters[i].shuffle_size)
                return cellar_fail(err, CELLAR_EFORMAT, "'%s' shuffles 0-byte elements",
                                   WHAT(what));
            break;
        default:
            return cellar_fail(err, CELLAR_EINVAL, "'%s' uses filter %d", WHAT(what),
                               l->filters[i].id);
        }
    }
    if (compressors > 1)
        return cellar_fail(err, CELLAR_EINVAL, "'%s' is compressed twice", WHAT(what));
    p->all_filters = l->nfilters ? (uint32_t)((1u << l->nfilters) - 1) : 0;
    /* deflate's worst case grows a chunk by a few bytes per 16 KiB; h5py's
     * LZF filter stores a chunk raw (filter skipped) rather than grow it */
    p->max_stored = p->chunk_bytes + (compressors ? p->chunk_bytes / 8 + 4096 : 0) + extra;
    return 0;
}

int h5d_plan_new(const h5d_layout *l, h5d_plan **out, cellar_error *err)
{
    *out = NULL;
    if (l->ndim < 1 || l->ndim > NODE_MAX_DIMS ||
        (l->elem_size != 1 && l->elem_size != 2 && l->elem_size != 4 && l->elem_size != 8))
        return cellar_fail(err, CELLAR_EINVAL, "unsupported dataset for direct reads");
    h5d_plan *p = calloc(1, sizeof *p);
    if (!p)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory planning a read");
    p->l = *l;
    int rc = 0;
    size_t total = 1, chunk_elems = 1;
    for (int d = 0; d < l->ndim; d++) {
        if (l->shape[d] < 0 || !mul_ok(total, (size_t)l->shape[d], &total)) {
            rc = cellar_fail(err, CELLAR_EFORMAT, "impossible shape");
            goto done;
        }
    }
    if (l->contiguous) {
        size_t bytes;
        if (!mul_ok(total, l->elem_size, &bytes) || l->addr > l->file_size ||
            bytes > l->file_size - l->addr) {
            rc = cellar_fail(err, CELLAR_EFORMAT, "the data lies past the end of the file");
            goto done;
        }
        contiguous_grid(p);
    } else {
        memcpy(p->chunk, l->chunk, sizeof p->chunk);
    }
    for (int d = 0; d < l->ndim; d++) {
        if (p->chunk[d] < 1 || !mul_ok(chunk_elems, (size_t)p->chunk[d], &chunk_elems)) {
            rc = cellar_fail(err, CELLAR_EFORMAT, "impossible chunk shape");
            goto done;
        }
        p->grid[d] = (l->shape[d] + p->chunk[d] - 1) / p->chunk[d];
    }
    if (!mul_ok(chunk_elems, l->elem_size, &p->chunk_bytes) ||
        p->chunk_bytes > H5D_MAX_CHUNK_BYTES) {
        rc = cellar_fail(err, CELLAR_EINVAL, "chunks too large for direct reads");
        goto done;
    }
    int64_t cs = 1, fs = 1;
    uint64_t gs = 1;
    for (int d = l->ndim - 1; d >= 0; d--) {
        p->cstride[d] = cs;
        p->fstride[d] = fs;
        p->gstride[d] = gs;
        cs *= p->chunk[d];
        fs *= l->shape[d];
        gs *= (uint64_t)p->grid[d]; /* <= total elements */
    }
    if (l->contiguous) {
        p->max_stored = p->chunk_bytes;
    } else {
        rc = plan_check_filters(p, NULL, err);
        if (rc)
            goto done;
    }
    memcpy(p->fill_stored, l->fill, l->elem_size);
    if (l->swap)
        codec_byteswap(p->fill_stored, 1, l->elem_size);
done:
    if (rc)
        h5d_plan_free(p);
    else
        *out = p;
    return rc;
}

void h5d_plan_cache_as(h5d_plan *p, chunk_cache *c, uint64_t store, uint64_t array)
{
    p->cache = c;
    p->cache_store = store;
    p->cache_array = array;
}

void h5d_plan_free(h5d_plan *p)
{
    if (!p)
        return;
    free(p->entries);
    free(p);
}

int h5d_plan_add_chunk(h5d_plan *p, const int64_t *start, uint64_t addr, uint64_t size,
                       uint32_t mask, cellar_error *err)
{
    if (p->l.contiguous || p->has_table)
        return cellar_fail(err, CELLAR_EINTERNAL, "chunk added to a finished plan");
    uint64_t gidx = 0;
    for (int d = 0; d < p->l.ndim; d++) {
        if (start[d] < 0 || start[d] % p->chunk[d] || start[d] / p->chunk[d] >= p->grid[d])
            return cellar_fail(err, CELLAR_EFORMAT, "a chunk lies outside the dataset");
        gidx += (uint64_t)(start[d] / p->chunk[d]) * p->gstride[d];
    }
    int unfiltered = (mask & p->all_filters) == p->all_filters;
    if (size == 0 || size > p->max_stored || (unfiltered && size != p->chunk_bytes))
        return cellar_fail(err, CELLAR_EFORMAT, "a chunk has an impossible size (%llu bytes)",
                           (unsigned long long)size);
    if (addr > p->l.file_size || size > p->l.file_size - addr)
        return cellar_fail(err, CELLAR_EFORMAT, "a chunk lies past the end of the file");
    if (p->nentries == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 64;
        h5d_entry *grown = realloc(p->entries, cap * sizeof *grown);
        if (!grown)
            return cellar_fail(err, CELLAR_ENOMEM, "out of memory planning a read");
        p->entries = grown;
        p->cap = cap;
    }
    p->entries[p->nentries++] = (h5d_entry){.gidx = gidx, .addr = addr, .size = size,
                                            .mask = mask};
    return 0;
}

static int cmp_entry(const void *a, const void *b)
{
    uint64_t x = ((const h5d_entry *)a)->gidx, y = ((const h5d_entry *)b)->gidx;
    return (x > y) - (x < y);
}

int h5d_plan_finish_table(h5d_plan *p, cellar_error *err)
{
    if (p->l.contiguous)
        return 0;
    if (p->nentries)
        qsort(p->entries, p->nentries, sizeof *p->entries, cmp_entry);
    for (size_t i = 1; i < p->nentries; i++)
        if (p->entries[i].gidx == p->entries[i - 1].gidx)
            return cellar_fail(err, CELLAR_EFORMAT, "a chunk is listed twice");
    p->has_table = 1;
    return 0;
}

int h5d_plan_is_direct(const h5d_plan *p)
{
    return p->l.contiguous || p->has_table;
}

int h5d_plan_contiguous_extent(const h5d_plan *p, uint64_t *offset, uint64_t *length)
{
    const h5d_layout *l = &p->l;
    if (!l->contiguous || l->swap)
        return 1;
    uint64_t n = l->elem_size;
    for (int d = 0; d < l->ndim; d++)
        n *= (uint64_t)l->shape[d]; /* checked against the file size by h5d_plan_new */
    *offset = l->addr;
    *length = n;
    return 0;
}

static const h5d_entry *table_find(const h5d_plan *p, uint64_t gidx)
{
    size_t lo = 0, hi = p->nentries;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (p->entries[mid].gidx < gidx)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < p->nentries && p->entries[lo].gidx == gidx ? &p->entries[lo] : NULL;
}

/* ---------------------------------------------------------------- reads */

/* The selected positions along one dimension, grouped by chunk. */
typedef struct dim_walk {
    const dim_sel *s;
    int64_t chunk;
    size_t ngroups;
    int64_t *gchunk, *gfirst, *gcount, *gmin, *gmax;
    /* index lists: entry k is output position eout[k] at offset eoff[k] in
     * its chunk; NULL for slices (entry k is output position k). */
    int64_t *eout, *eoff;
} dim_walk;

static void dim_walk_free(dim_walk *w)
{
    free(w->gchunk);
    free(w->gfirst);
    free(w->gcount);
    free(w->gmin);
    free(w->gmax);
    free(w->eout);
    free(w->eoff);
}

static inline int64_t ent_out(const dim_walk *w, int64_t k)
{
    return w->eout ? w->eout[k] : k;
}

static inline int64_t ent_off(const dim_walk *w, int64_t k, int64_t c)
{
    return w->eoff ? w->eoff[k] : w->s->start + k * w->s->step - c * w->chunk;
}

typedef struct pos_key {
    int64_t c, i;
} pos_key;

static int cmp_pos_key(const void *a, const void *b)
{
    const pos_key *x = a, *y = b;
    if (x->c != y->c)
        return (x->c > y->c) - (x->c < y->c);
    return (x->i > y->i) - (x->i < y->i);
}

/* Sorts an index list that is not already grouped by chunk. */
static int walk_sort_list(dim_walk *w, int64_t count)
{
    pos_key *keys = malloc((size_t)count * sizeof *keys);
    if (!keys)
        return -1;
    for (int64_t i = 0; i < count; i++)
        keys[i] = (pos_key){.c = w->s->index[i] / w->chunk, .i = i};
    qsort(keys, (size_t)count, sizeof *keys, cmp_pos_key);
    for (int64_t k = 0; k < count; k++) {
        w->eout[k] = keys[k].i;
        w->eoff[k] = w->s->index[keys[k].i] % w->chunk;
    }
    free(keys);
    return 0;
}

/* The groups of a slice, computed per chunk rather than per position (a
 * slice of a million entries makes a few groups, not a million steps). */
static int walk_slice_groups(dim_walk *w, size_t maxg, const char *what, cellar_error *err)
{
    const dim_sel *s = w->s;
    int64_t chunk = w->chunk;
    for (int64_t k = 0; k < s->count;) {
        int64_t pos = s->start + k * s->step, c;
        int64_t n = dim_sel_run_in_chunk(s, k, chunk, &c);
        int64_t end = pos + (n - 1) * s->step;
        if (w->ngroups == maxg)
            return cellar_fail(err, CELLAR_EINTERNAL, "bad chunk grouping of '%s'", WHAT(what));
        size_t g = w->ngroups++;
        w->gchunk[g] = c;
        w->gfirst[g] = k;
        w->gcount[g] = n;
        w->gmin[g] = (s->step > 0 ? pos : end) - c * chunk;
        w->gmax[g] = (s->step > 0 ? end : pos) - c * chunk;
        k += n;
    }
    return 0;
}

static int walk_init(dim_walk *w, const dim_sel *s, int64_t len, int64_t chunk,
                     int64_t grid, const char *what, cellar_error *err)
{
    memset(w, 0, sizeof *w);
    w->s = s;
    w->chunk = chunk;
    int64_t count = s->count;
    if (count <= 0)
        return cellar_fail(err, CELLAR_EINTERNAL, "empty selection reached '%s'", WHAT(what));
    if (!s->index) {
        int64_t last = s->start + (count - 1) * s->step;
        if (s->step == 0 || s->start < 0 || s->start >= len || last < 0 || last >= len)
            return cellar_fail(err, CELLAR_ERANGE, "selection outside '%s'", WHAT(what));
    } else {
        for (int64_t i = 0; i < count; i++)
            if (s->index[i] < 0 || s->index[i] >= len)
                return cellar_fail(err, CELLAR_ERANGE, "selection outside '%s'", WHAT(what));
    }
    size_t maxg = (size_t)(count < grid ? count : grid);
    w->gchunk = malloc(maxg * sizeof *w->gchunk);
    w->gfirst = malloc(maxg * sizeof *w->gfirst);
    w->gcount = malloc(maxg * sizeof *w->gcount);
    w->gmin = malloc(maxg * sizeof *w->gmin);
    w->gmax = malloc(maxg * sizeof *w->gmax);
    if (!w->gchunk || !w->gfirst || !w->gcount || !w->gmin || !w->gmax)
        goto oom;
    if (s->index) {
        w->eout = malloc((size_t)count * sizeof *w->eout);
        w->eoff = malloc((size_t)count * sizeof *w->eoff);
        if (!w->eout || !w->eoff)
            goto oom;
        int up = 1, down = 1;
        for (int64_t i = 1; i < count; i++) {
            int64_t a = s->index[i - 1] / chunk, b = s->index[i] / chunk;
            up &= a <= b;
            down &= a >= b;
        }
        if (up || down) {
            for (int64_t i = 0; i < count; i++) {
                w->eout[i] = i;
                w->eoff[i] = s->index[i] % chunk;
            }
        } else if (walk_sort_list(w, count)) {
            goto oom;
        }
    }
    if (!s->index)
        return walk_slice_groups(w, maxg, what, err);
    /* Groups: runs of entries in the same chunk. */
    for (int64_t k = 0; k < count;) {
        int64_t pos = dim_sel_at(s, ent_out(w, k));
        int64_t c = pos / chunk;
        int64_t first = k, mn = INT64_MAX, mx = -1;
        for (; k < count; k++) {
            int64_t pk = dim_sel_at(s, ent_out(w, k));
            if (pk / chunk != c)
                break;
            int64_t off = pk - c * chunk;
            mn = off < mn ? off : mn;
            mx = off > mx ? off : mx;
        }
        if (w->ngroups == maxg)
            return cellar_fail(err, CELLAR_EINTERNAL, "bad chunk grouping of '%s'", WHAT(what));
        size_t g = w->ngroups++;
        w->gchunk[g] = c;
        w->gfirst[g] = first;
        w->gcount[g] = k - first;
        w->gmin[g] = mn;
        w->gmax[g] = mx;
    }
    return 0;
oom:
    return cellar_fail(err, CELLAR_ENOMEM, "out of memory reading '%s'", WHAT(what));
}

typedef struct read_ctx {
    const h5d_plan *p;
    int fd;
    const h5d_file_reader *rd; /* when not NULL, the file's bytes come from it */
    h5d_fetch_fn fetch;
    void *fetch_ctx;
    const char *what;
    cellar_error *err;
    /* the read decodes more than the cache takes from one read: its chunks
     * are not kept, so a large read evicts nothing slices use */
    int scan;
    dim_walk w[NODE_MAX_DIMS];
    int64_t ostride[NODE_MAX_DIMS];
    unsigned char *out;
    /* scratch, grown as needed */
    uint8_t *stored, *b0, *b1, *span;
    size_t stored_cap, span_cap;
} read_ctx;

static int grow(uint8_t **buf, size_t *cap, size_t need)
{
    if (need <= *cap)
        return 0;
    uint8_t *p = realloc(*buf, need);
    if (!p)
        return -1;
    *buf = p;
    *cap = need;
    return 0;
}

static int pread_fd(int fd, uint8_t *buf, size_t n, uint64_t off, const char *what,
                    cellar_error *err)
{
    while (n) {
        if (off > (uint64_t)INT64_MAX)
            return cellar_fail(err, CELLAR_EFORMAT, "'%s' points past the end of the file",
                               WHAT(what));
        ssize_t r = pread(fd, buf, n, (off_t)off);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return cellar_fail(err, CELLAR_EIO, "reading '%s' failed: %s", WHAT(what),
                               strerror(errno));
        }
        if (r == 0)
            return cellar_fail(err, CELLAR_EFORMAT, "'%s' is truncated", WHAT(what));
        buf += r;
        n -= (size_t)r;
        off += (uint64_t)r;
    }
    return 0;
}

/* [off, off + n) of the file: pread of its descriptor, or its reader's
 * read (a remote file: its own failure, 502, 504 or a change). */
static int pread_all(const read_ctx *r, uint8_t *buf, size_t n, uint64_t off, const char *what,
                     cellar_error *err)
{
    if (!r->rd)
        return pread_fd(r->fd, buf, n, off, what, err);
    if (off > r->rd->size || n > r->rd->size - off)
        return cellar_fail(err, CELLAR_EFORMAT, "'%s' is truncated", WHAT(what));
    return n ? r->rd->read(r->rd->ctx, off, n, buf, err) : 0;
}

/* Where the elements of one chunk come from. */
typedef struct chunk_src {
    const uint8_t *buf; /* NULL: the fill value */
    int64_t base;       /* chunk element index of buf[0] */
    int row_mode;       /* pread each row's span from addr */
    uint64_t addr;      /* file offset of the chunk's element 0 */
} chunk_src;

static void copy_row(read_ctx *r, const chunk_src *src, const uint8_t *row, int64_t row_base,
                     int64_t obase, int64_t sbase, const int64_t *c, const int64_t *g)
{
    const h5d_plan *p = r->p;
    int last = p->l.ndim - 1;
    const dim_walk *w = &r->w[last];
    size_t es = p->l.elem_size;
    int64_t k0 = w->gfirst[g[last]], n = w->gcount[g[last]];
    if (!src->buf) {
        for (int64_t k = k0; k < k0 + n; k++)
            memcpy(r->out + (size_t)(obase + ent_out(w, k)) * es, p->fill_stored, es);
        return;
    }
    if (!w->eout && w->s->step == 1) {
        int64_t s = sbase + ent_off(w, k0, c[last]) - row_base;
        memcpy(r->out + (size_t)(obase + k0) * es, row + (size_t)s * es, (size_t)n * es);
        return;
    }
    for (int64_t k = k0; k < k0 + n; k++) {
        int64_t s = sbase + ent_off(w, k, c[last]) - row_base;
        memcpy(r->out + (size_t)(obase + ent_out(w, k)) * es, row + (size_t)s * es, es);
    }
}

/* Whether the selected elements of one chunk (groups g) are one run both in
 * the chunk and in the output: every dimension selected by a step-1 slice,
 * the dimensions inside the outermost one with more than one position
 * covered whole in the output (so output rows follow each other) and the
 * chunk elements between the first and the last all selected (so chunk
 * rows do too).  Then *src0 (chunk element index), *out0 (output element
 * index) and *n locate it, and it is copied (or read) in one piece: the
 * whole-rows selections that viewers ask for (an embedding, a block of
 * rows) cost one memcpy or one pread per chunk, not one per row. */
static int block_run(const read_ctx *r, const int64_t *g, int64_t *src0, int64_t *out0,
                     size_t *n)
{
    const h5d_plan *p = r->p;
    int64_t mn = 0, mx = 0, o = 0;
    size_t needed = 1;
    int outer = -1;
    for (int d = 0; d < p->l.ndim; d++) {
        const dim_walk *w = &r->w[d];
        int64_t cnt = w->gcount[g[d]];
        if (w->eout || w->s->step != 1 || (outer >= 0 && cnt != w->s->count))
            return 0;
        if (outer < 0 && cnt > 1)
            outer = d;
        mn += w->gmin[g[d]] * p->cstride[d];
        mx += w->gmax[g[d]] * p->cstride[d];
        o += w->gfirst[g[d]] * r->ostride[d];
        needed *= (size_t)cnt;
    }
    if ((size_t)(mx - mn + 1) != needed)
        return 0;
    *src0 = mn;
    *out0 = o;
    *n = needed;
    return 1;
}

/* Copies the selected elements of the chunk at grid coords c (groups g). */
static int copy_chunk(read_ctx *r, const chunk_src *src, const int64_t *c, const int64_t *g)
{
    const h5d_plan *p = r->p;
    int last = p->l.ndim - 1;
    size_t es = p->l.elem_size;
    int64_t src0, out0;
    size_t run;
    if (src->buf && !src->row_mode && block_run(r, g, &src0, &out0, &run)) {
        memcpy(r->out + (size_t)out0 * es, src->buf + (size_t)(src0 - src->base) * es, run * es);
        return 0;
    }
    int64_t k[NODE_MAX_DIMS];
    for (int d = 0; d < last; d++)
        k[d] = r->w[d].gfirst[g[d]];
    const dim_walk *wl = &r->w[last];
    int64_t lmin = wl->gmin[g[last]], lmax = wl->gmax[g[last]];
    for (;;) {
        int64_t obase = 0, sbase = 0;
        for (int d = 0; d < last; d++) {
            obase += ent_out(&r->w[d], k[d]) * r->ostride[d];
            sbase += ent_off(&r->w[d], k[d], c[d]) * p->cstride[d];
        }
        if (src->row_mode) {
            size_t n = (size_t)(lmax - lmin + 1) * es;
            int rc = pread_all(r, r->span, n, src->addr + (uint64_t)(sbase + lmin) * es,
                               r->what, r->err);
            if (rc)
                return rc;
            copy_row(r, src, r->span, sbase + lmin, obase, sbase, c, g);
        } else {
            copy_row(r, src, src->buf, src->base, obase, sbase, c, g);
        }
        int d = last - 1;
        while (d >= 0 && ++k[d] == r->w[d].gfirst[g[d]] + r->w[d].gcount[g[d]]) {
            k[d] = r->w[d].gfirst[g[d]];
            d--;
        }
        if (d < 0)
            break;
    }
    return 0;
}

/* Unfiltered bytes at addr: one span read, or row by row when the
 * selection is sparse inside the chunk. */
static int read_raw(read_ctx *r, uint64_t addr, const int64_t *c, const int64_t *g)
{
    const h5d_plan *p = r->p;
    size_t es = p->l.elem_size;
    int64_t mn = 0, mx = 0;
    size_t needed = 1;
    for (int d = 0; d < p->l.ndim; d++) {
        mn += r->w[d].gmin[g[d]] * p->cstride[d];
        mx += r->w[d].gmax[g[d]] * p->cstride[d];
        needed *= (size_t)r->w[d].gcount[g[d]];
    }
    size_t span = (size_t)(mx - mn + 1);
    chunk_src src = {.addr = addr};
    int64_t src0, out0;
    size_t run;
    if (block_run(r, g, &src0, &out0, &run))
        return pread_all(r, r->out + (size_t)out0 * es, run * es,
                         addr + (uint64_t)src0 * es, r->what, r->err);
    if (span <= H5D_SPAN_FACTOR * needed + H5D_SPAN_SLACK / es) {
        if (grow(&r->span, &r->span_cap, span * es))
            return cellar_fail(r->err, CELLAR_ENOMEM, "out of memory reading '%s'",
                               WHAT(r->what));
        int rc = pread_all(r, r->span, span * es, addr + (uint64_t)mn * es, r->what, r->err);
        if (rc)
            return rc;
        src.buf = r->span;
        src.base = mn;
        return copy_chunk(r, &src, c, g);
    }
    int last = p->l.ndim - 1;
    size_t row = (size_t)(r->w[last].gmax[g[last]] - r->w[last].gmin[g[last]] + 1) * es;
    if (grow(&r->span, &r->span_cap, row))
        return cellar_fail(r->err, CELLAR_ENOMEM, "out of memory reading '%s'", WHAT(r->what));
    src.buf = r->span;
    src.row_mode = 1;
    return copy_chunk(r, &src, c, g);
}

/* An LZF back reference of 3 bytes copies at most 264 (liblzf's format). */
#define LZF_MAX_RATIO 88

/* Whether n stored bytes, through the active filters of mask, can make a
 * whole chunk: a chunk shape that claims more than its stored bytes can
 * inflate to is refused before it sizes the decode buffers. */
static int check_stored_size(const h5d_plan *p, size_t n, uint32_t mask, const char *what,
                             cellar_error *err)
{
    const h5d_layout *l = &p->l;
    uint64_t most = n;
    const char *by = "unfiltered";
    for (int i = 0; i < l->nfilters; i++) {
        if (!filter_active(mask, i))
            continue;
        if (l->filters[i].id == H5D_FILTER_DEFLATE) {
            most = codec_max_decoded(CODEC_ZLIB, n);
            by = "deflate";
        } else if (l->filters[i].id == H5D_FILTER_LZF) {
            most = sat_mul_u64(n, LZF_MAX_RATIO);
            by = "LZF";
        }
    }
    if (most >= p->chunk_bytes)
        return 0;
    return cellar_fail(err, CELLAR_EFORMAT,
                       "a chunk of '%s' stores %zu bytes, which %s cannot make into the %zu "
                       "bytes of its chunk shape",
                       WHAT(what), n, by, p->chunk_bytes);
}

/* The cache key of chunk c of p's dataset; 0 when p keeps no chunks. */
static int cache_key(const h5d_plan *p, const int64_t *c, chunk_cache_key *k)
{
    if (!p->cache)
        return 0;
    memset(k, 0, sizeof *k);
    k->store = p->cache_store;
    k->array = p->cache_array;
    k->kind = CHUNK_CACHE_CHUNK;
    memcpy(k->coords, c, (size_t)p->l.ndim * sizeof *c);
    return 1;
}

/* Chunk c decoded before, copied from the cache: 1, else 0 (a miss, or
 * no cache). */
static int copy_cached(read_ctx *r, const int64_t *c, const int64_t *g, int *rc)
{
    chunk_cache_key k;
    const chunk_cached *ref = cache_key(r->p, c, &k) ? chunk_cache_get(r->p->cache, &k) : NULL;
    if (!ref)
        return 0;
    size_t len;
    chunk_src src = {.buf = chunk_cached_buf(ref, &len, NULL)};
    *rc = len == r->p->chunk_bytes ? copy_chunk(r, &src, c, g)
                                   : cellar_fail(r->err, CELLAR_EINTERNAL, "a cached chunk of '%s' "
                                                 "has the wrong size", WHAT(r->what));
    chunk_cache_release(ref);
    return 1;
}

static int decode_and_copy(read_ctx *r, const uint8_t *stored, size_t n, uint32_t mask,
                           const int64_t *c, const int64_t *g)
{
    const h5d_plan *p = r->p;
    int rc = check_stored_size(p, n, mask, r->what, r->err);
    if (rc)
        return rc;
    size_t cap = p->chunk_bytes + 4 * H5D_MAX_FILTERS;
    if (!r->b0)
        r->b0 = malloc(cap);
    if (!r->b1)
        r->b1 = malloc(cap);
    if (!r->b0 || !r->b1)
        return cellar_fail(r->err, CELLAR_ENOMEM, "out of memory reading '%s'", WHAT(r->what));
    const uint8_t *data = NULL;
    rc = decode_chunk(p, stored, n, mask, r->b0, r->b1, &data, r->what, r->err);
    if (rc)
        return rc;
    chunk_cache_key k;
    if (r->scan || !cache_key(p, c, &k) || (data != r->b0 && data != r->b1)) {
        chunk_src src = {.buf = data};
        return copy_chunk(r, &src, c, g);
    }
    /* The buffer the chunk was decoded into goes to the cache (a new one
     * is made for the next chunk). */
    uint8_t **owner = data == r->b0 ? &r->b0 : &r->b1;
    *owner = NULL;
    const chunk_cached *ref = chunk_cache_put(p->cache, &k, (uint8_t *)data, p->chunk_bytes, NULL, 0);
    if (!ref)
        return cellar_fail(r->err, CELLAR_ENOMEM, "out of memory reading '%s'", WHAT(r->what));
    size_t len;
    chunk_src src = {.buf = chunk_cached_buf(ref, &len, NULL)};
    rc = copy_chunk(r, &src, c, g);
    chunk_cache_release(ref);
    return rc;
}

static int visit_chunk(read_ctx *r, const int64_t *c, const int64_t *g)
{
    const h5d_plan *p = r->p;
    const h5d_layout *l = &p->l;
    if (l->contiguous) {
        int64_t first = 0;
        for (int d = 0; d < l->ndim; d++)
            first += c[d] * p->chunk[d] * p->fstride[d];
        return read_raw(r, l->addr + (uint64_t)first * l->elem_size, c, g);
    }
    if (p->has_table) {
        uint64_t gidx = 0;
        for (int d = 0; d < l->ndim; d++)
            gidx += (uint64_t)c[d] * p->gstride[d];
        const h5d_entry *e = table_find(p, gidx);
        if (!e) {
            chunk_src fill = {0};
            return copy_chunk(r, &fill, c, g);
        }
        if ((e->mask & p->all_filters) == p->all_filters)
            return read_raw(r, e->addr, c, g);
        int rc = 0;
        if (copy_cached(r, c, g, &rc))
            return rc;
        if (grow(&r->stored, &r->stored_cap, e->size))
            return cellar_fail(r->err, CELLAR_ENOMEM, "out of memory reading '%s'",
                               WHAT(r->what));
        rc = pread_all(r, r->stored, e->size, e->addr, r->what, r->err);
        return rc ? rc : decode_and_copy(r, r->stored, e->size, e->mask, c, g);
    }
    if (!r->fetch)
        return cellar_fail(r->err, CELLAR_EINTERNAL, "no way to read chunks of '%s'",
                           WHAT(r->what));
    int rc = 0;
    if (l->nfilters && copy_cached(r, c, g, &rc))
        return rc;
    int64_t start[NODE_MAX_DIMS];
    for (int d = 0; d < l->ndim; d++)
        start[d] = c[d] * p->chunk[d];
    uint8_t *buf = NULL;
    size_t n = 0;
    uint32_t mask = 0;
    rc = r->fetch(r->fetch_ctx, start, p->max_stored, &buf, &n, &mask, r->err);
    if (rc)
        goto done;
    if (!buf) {
        chunk_src fill = {0};
        rc = copy_chunk(r, &fill, c, g);
    } else if (n > p->max_stored) {
        rc = cellar_fail(r->err, CELLAR_EFORMAT, "a chunk of '%s' is too large", WHAT(r->what));
    } else if ((mask & p->all_filters) == p->all_filters) {
        if (n != p->chunk_bytes) {
            rc = cellar_fail(r->err, CELLAR_EFORMAT, "a chunk of '%s' has %zu bytes, expected %zu",
                             WHAT(r->what), n, p->chunk_bytes);
        } else {
            chunk_src src = {.buf = buf};
            rc = copy_chunk(r, &src, c, g);
        }
    } else {
        rc = decode_and_copy(r, buf, n, mask, c, g);
    }
done:
    free(buf);
    return rc;
}

int h5d_read(const h5d_plan *p, int fd, h5d_fetch_fn fetch, void *fetch_ctx,
             const dim_sel *sel, void *out, size_t out_bytes, const char *what,
             cellar_error *err)
{
    return h5d_read_from(p, fd, NULL, fetch, fetch_ctx, sel, out, out_bytes, what, err);
}

int h5d_read_from(const h5d_plan *p, int fd, const h5d_file_reader *rd, h5d_fetch_fn fetch,
                  void *fetch_ctx, const dim_sel *sel, void *out, size_t out_bytes,
                  const char *what, cellar_error *err)
{
    const h5d_layout *l = &p->l;
    read_ctx r = {.p = p, .fd = fd, .rd = rd, .fetch = fetch, .fetch_ctx = fetch_ctx,
                  .what = what, .err = err, .out = out};
    int rc = 0, ndim = l->ndim;
    size_t total = 1;
    size_t chunks = 1;
    for (int d = 0; d < ndim; d++) {
        rc = walk_init(&r.w[d], &sel[d], l->shape[d], p->chunk[d], p->grid[d], what, err);
        if (rc)
            goto done;
        chunks = (size_t)sat_mul_u64(chunks, r.w[d].ngroups);
        if (!mul_ok(total, (size_t)sel[d].count, &total)) {
            rc = cellar_fail(err, CELLAR_ETOOBIG, "selection of '%s' too large", WHAT(what));
            goto done;
        }
    }
    r.scan = p->cache && sat_mul_u64(chunks, p->chunk_bytes) > chunk_cache_largest(p->cache);
    size_t need;
    if (!mul_ok(total, l->elem_size, &need) || out_bytes < need) {
        rc = cellar_fail(err, CELLAR_EINTERNAL, "output size mismatch reading '%s'", WHAT(what));
        goto done;
    }
    int64_t os = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        r.ostride[d] = os;
        os *= sel[d].count;
    }
    int64_t g[NODE_MAX_DIMS] = {0}, c[NODE_MAX_DIMS];
    for (;;) {
        for (int d = 0; d < ndim; d++)
            c[d] = r.w[d].gchunk[g[d]];
        rc = visit_chunk(&r, c, g);
        if (rc)
            goto done;
        int d = ndim - 1;
        while (d >= 0 && ++g[d] == (int64_t)r.w[d].ngroups)
            g[d--] = 0;
        if (d < 0)
            break;
    }
    if (l->swap)
        codec_byteswap(out, total, l->elem_size);
done:
    for (int d = 0; d < ndim; d++)
        dim_walk_free(&r.w[d]);
    free(r.stored);
    free(r.b0);
    free(r.b1);
    free(r.span);
    return rc;
}

/* ---------------------------------------------------------- whole chunks */

const h5d_layout *h5d_plan_layout(const h5d_plan *p)
{
    return &p->l;
}

size_t h5d_plan_chunk_bytes(const h5d_plan *p)
{
    return p->chunk_bytes;
}

int h5d_chunk_stored(const h5d_plan *p, h5d_fetch_fn fetch, void *fetch_ctx, const int64_t *cidx,
                     h5d_stored *out, const char *what, cellar_error *err)
{
    const h5d_layout *l = &p->l;
    memset(out, 0, sizeof *out);
    if (l->contiguous)
        return cellar_fail(err, CELLAR_EINVAL, "'%s' is not chunked", WHAT(what));
    uint64_t gidx = 0;
    int64_t start[NODE_MAX_DIMS];
    for (int d = 0; d < l->ndim; d++) {
        if (cidx[d] < 0 || cidx[d] >= p->grid[d])
            return cellar_fail(err, CELLAR_ERANGE, "no such chunk of '%s'", WHAT(what));
        gidx += (uint64_t)cidx[d] * p->gstride[d];
        start[d] = cidx[d] * p->chunk[d];
    }
    if (p->has_table) {
        const h5d_entry *e = table_find(p, gidx);
        if (e) {
            *out = (h5d_stored){.allocated = 1, .addr = e->addr, .size = e->size, .mask = e->mask};
        }
        return 0;
    }
    if (!fetch)
        return cellar_fail(err, CELLAR_EINTERNAL, "no way to read chunks of '%s'", WHAT(what));
    uint8_t *buf = NULL;
    size_t n = 0;
    uint32_t mask = 0;
    int rc = fetch(fetch_ctx, start, p->max_stored, &buf, &n, &mask, err);
    if (rc) {
        free(buf);
        return rc;
    }
    if (!buf)
        return 0;
    int unfiltered = (mask & p->all_filters) == p->all_filters;
    if (n == 0 || n > p->max_stored || (unfiltered && n != p->chunk_bytes)) {
        free(buf);
        return cellar_fail(err, CELLAR_EFORMAT, "a chunk of '%s' has an impossible size (%zu bytes)",
                           WHAT(what), n);
    }
    *out = (h5d_stored){.allocated = 1, .size = n, .buf = buf, .mask = mask};
    return 0;
}

int h5d_chunk_decode(const h5d_plan *p, int fd, const h5d_stored *st, uint8_t *out,
                     const char *what, cellar_error *err)
{
    size_t es = p->l.elem_size, cb = p->chunk_bytes;
    if (p->l.contiguous)
        return cellar_fail(err, CELLAR_EINVAL, "'%s' is not chunked", WHAT(what));
    if (!st->allocated) {
        for (size_t i = 0; i + es <= cb; i += es)
            memcpy(out + i, p->fill_stored, es);
        return 0;
    }
    int unfiltered = (st->mask & p->all_filters) == p->all_filters;
    if (st->size == 0 || st->size > p->max_stored || (unfiltered && st->size != cb))
        return cellar_fail(err, CELLAR_EFORMAT, "a chunk of '%s' has an impossible size (%llu bytes)",
                           WHAT(what), (unsigned long long)st->size);
    size_t n = (size_t)st->size;
    uint8_t *stored = st->buf, *b0 = NULL, *b1 = NULL, *own = NULL;
    int rc = 0;
    if (!stored) {
        own = malloc(n);
        if (!own)
            return cellar_fail(err, CELLAR_ENOMEM, "out of memory reading '%s'", WHAT(what));
        rc = pread_fd(fd, own, n, st->addr, what, err);
        if (rc)
            goto done;
        stored = own;
    }
    if (unfiltered) {
        memcpy(out, stored, cb);
        goto done;
    }
    rc = check_stored_size(p, n, st->mask, what, err);
    if (rc)
        goto done;
    b0 = malloc(cb + 4 * H5D_MAX_FILTERS);
    b1 = malloc(cb + 4 * H5D_MAX_FILTERS);
    if (!b0 || !b1) {
        rc = cellar_fail(err, CELLAR_ENOMEM, "out of memory reading '%s'", WHAT(what));
        goto done;
    }
    const uint8_t *data = NULL;
    rc = decode_chunk(p, stored, n, st->mask, b0, b1, &data, what, err);
    if (!rc)
        memcpy(out, data, cb);
done:
    free(own);
    free(b0);
    free(b1);
    return rc;
}

int h5d_scaleoffset_ok(const uint8_t *chunk, size_t len, uint64_t n, size_t size)
{
    enum { HEADER = 21 }; /* H5Zscaleoffset.c: buf_offset */
    if (len < HEADER || size == 0 || size > 8)
        return 0;
    uint32_t minbits = (uint32_t)chunk[0] | (uint32_t)chunk[1] << 8 | (uint32_t)chunk[2] << 16 |
                       (uint32_t)chunk[3] << 24;
    if (minbits > 8 * size)
        return 0;
    /* n * minbits bits, overflow-checked: n * 64 must fit */
    if (n > UINT64_MAX / 64)
        return 0;
    uint64_t packed = minbits == 8 * size ? n * size : (n * minbits + 7) / 8;
    return packed <= (uint64_t)(len - HEADER);
}
