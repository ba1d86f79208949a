/* Arrays of the zarr view made from HDF5 datasets: their .zarray and their
 * chunks (see storage/h5zarr/h5zarr.h for what each layout becomes). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <errno.h>
#include <zlib.h>

#include "common/numfmt.h"
#include "common/satmath.h"
#include "common/utf8.h"
#include "storage/anndata/legacy.h"
#include "storage/h5zarr/h5zarr_impl.h"
#include "storage/hdf5/h5.h"

/* Row blocks of contiguous datasets and of arrays read through the backend. */
#define BLOCK_BYTES ((size_t)1 << 20)
/* Strings per chunk of a string array that HDF5 does not chunk. */
#define BLOCK_STRINGS ((size_t)1 << 16)

void h5za_block_grid(int ndim, const int64_t *shape, size_t item, size_t target, int64_t *chunk)
{
    size_t per = item ? target / item : target;
    if (per == 0)
        per = 1;
    size_t suffix = 1;
    int d = ndim - 1;
    for (; d >= 0; d--) {
        size_t len = shape[d] > 0 ? (size_t)shape[d] : 1;
        if (len > per / suffix)
            break;
        chunk[d] = (int64_t)len;
        suffix *= len;
    }
    if (d >= 0) {
        size_t k = per / suffix;
        chunk[d] = (int64_t)(k ? k : 1);
        for (d--; d >= 0; d--)
            chunk[d] = 1;
    }
}

void h5za_varray_clear(varray *a)
{
    json_decref(a->fill_value);
    json_decref(a->dtype_json);
    free(a->fields);
    a->fill_value = a->dtype_json = NULL;
    a->fields = NULL;
    a->n_fields = 0;
}

/* The fill value of a numeric array as zarr v2 writes it: a number, true or
 * false, or "NaN" / "Infinity" / "-Infinity". */
static json_t *fill_json(dtype_kind k, const unsigned char *v)
{
    double d;
    switch (k) {
    case DT_BOOL: return json_boolean(v[0] != 0);
    case DT_INT8: { int8_t x; memcpy(&x, v, 1); return json_integer(x); }
    case DT_INT16: { int16_t x; memcpy(&x, v, 2); return json_integer(x); }
    case DT_INT32: { int32_t x; memcpy(&x, v, 4); return json_integer(x); }
    case DT_INT64: { int64_t x; memcpy(&x, v, 8); return json_integer((json_int_t)x); }
    case DT_UINT8: return json_integer(v[0]);
    case DT_UINT16: { uint16_t x; memcpy(&x, v, 2); return json_integer(x); }
    case DT_UINT32: { uint32_t x; memcpy(&x, v, 4); return json_integer(x); }
    case DT_UINT64: {
        uint64_t x;
        memcpy(&x, v, 8);
        return x <= (uint64_t)INT64_MAX ? json_integer((json_int_t)x) : json_real((double)x);
    }
    case DT_FLOAT16: { uint16_t x; memcpy(&x, v, 2); d = half_to_float(x); break; }
    case DT_FLOAT32: { float x; memcpy(&x, v, 4); d = x; break; }
    case DT_FLOAT64: memcpy(&d, v, 8); break;
    default: return json_null();
    }
    if (isnan(d))
        return json_string("NaN");
    if (isinf(d))
        return json_string(d > 0 ? "Infinity" : "-Infinity");
    return json_real(d);
}

json_t *h5za_zarray(const varray *a)
{
    json_t *shape = json_array(), *chunks = json_array();
    for (int d = 0; shape && chunks && d < a->ndim; d++) {
        json_array_append_new(shape, json_integer((json_int_t)a->shape[d]));
        json_array_append_new(chunks, json_integer((json_int_t)a->chunk[d]));
    }
    json_t *comp = a->zlib_level >= 0 ? json_pack("{s:s, s:i}", "id", "zlib", "level", a->zlib_level)
                                      : json_null();
    json_t *filters = a->vlen ? json_pack("[{s:s}]", "id", "vlen-utf8") : json_null();
    json_t *dtype = a->dtype_json ? json_incref(a->dtype_json) : json_string(a->dtype);
    return json_pack("{s:o*, s:o*, s:o*, s:O, s:o*, s:o*, s:s, s:s, s:i}", "shape", shape,
                     "chunks", chunks, "dtype", dtype, "fill_value",
                     a->fill_value ? a->fill_value : json_null(), "compressor", comp, "filters",
                     filters, "order", "C", "dimension_separator", ".", "zarr_format", 2);
}

/* ---- describing a dataset ---- */

static int static_key_describe; /* node_memo key */

typedef struct described {
    varray a;
    int ok;
    char why[320];
} described;

static void described_free(void *value)
{
    described *d = value;
    if (d)
        h5za_varray_clear(&d->a);
    free(d);
}

static void numeric_array(node *n, const node_info *in, const h5_storage *st, varray *a)
{
    size_t es = dtype_size(in->dtype);
    a->item = es;
    switch (st->kind) {
    case H5_STORE_CHUNKS:
        a->how = HOW_STORED;
        a->zlib_level = st->deflate_level;
        break;
    case H5_STORE_DECODED: a->how = HOW_DECODED; break;
    case H5_STORE_CONTIGUOUS:
        a->how = HOW_CONTIG;
        a->offset = st->offset;
        a->fd = st->fd;
        break;
    default: a->how = HOW_READ; break;
    }
    if (a->how == HOW_READ)
        snprintf(a->dtype, sizeof a->dtype, "%s", dtype_npy_descr(in->dtype));
    else
        snprintf(a->dtype, sizeof a->dtype, "%s", st->typestr);
    if (a->ndim == 0)
        ; /* one chunk, the value */
    else if (st->chunked && a->how != HOW_CONTIG)
        memcpy(a->chunk, st->chunk, sizeof a->chunk);
    else
        h5za_block_grid(a->ndim, a->shape, es, BLOCK_BYTES, a->chunk);
    memcpy(a->fill, st->fill, sizeof a->fill);
    unsigned char zero[8] = {0};
    a->fill_value = fill_json(in->dtype, st->has_fill ? st->fill : zero);
    (void)n;
}

/* Characters in the UTF-8 text s (invalid bytes as U+FFFD each, as
 * utf8_next reads them). */
static size_t text_chars(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t n = strlen(s), chars = 0;
    unsigned long cp;
    for (size_t i = 0; i < n; chars++)
        i += utf8_next(p + i, n - i, &cp);
    return chars;
}

/* The widest string of the 1-D string array n in characters (1 at least:
 * numpy has no <U0), read BLOCK_STRINGS at a time. */
static int text_width(node *n, size_t *width, cellar_error *err)
{
    const node_info *in = node_get_info(n);
    *width = 1;
    for (int64_t start = 0; start < in->shape[0]; start += (int64_t)BLOCK_STRINGS) {
        int64_t k = in->shape[0] - start;
        if (k > (int64_t)BLOCK_STRINGS)
            k = (int64_t)BLOCK_STRINGS;
        arena *a = arena_new();
        char **s = a ? arena_calloc(a, (size_t)k, sizeof *s) : NULL;
        if (!s) {
            arena_free(a);
            return cellar_fail(err, CELLAR_ENOMEM, "out of memory reading '%s'", node_path(n));
        }
        dim_sel sel = dim_sel_range(start, k);
        int rc = node_read_strings(n, &sel, a, s, err);
        for (int64_t i = 0; !rc && i < k; i++) {
            size_t c = s[i] ? text_chars(s[i]) : 0;
            if (c > *width)
                *width = c;
        }
        arena_free(a);
        if (rc)
            return rc;
    }
    return 0;
}

/* Strings shown as numpy's fixed-width text (<U: UTF-32 code units). */
static int text_array(node *n, const node_info *in, varray *a, cellar_error *err)
{
    size_t width;
    int rc = text_width(n, &width, err);
    if (rc)
        return rc;
    if (width > (SIZE_MAX / 4) / 2)
        return cellar_fail(err, CELLAR_ETOOBIG, "the strings of '%s' are too long", node_path(n));
    a->how = HOW_UNICODE;
    a->item = 4 * width;
    snprintf(a->dtype, sizeof a->dtype, "<U%zu", width);
    h5za_block_grid(a->ndim, in->shape, a->item, BLOCK_BYTES, a->chunk);
    a->fill_value = json_string("");
    return 0;
}

/* How field f (the array of one field of 1-D records) goes into a packed
 * record: numbers in native order, fixed-length strings as they are (|S),
 * variable-length ones as fixed-width text (<U, as wide as the widest),
 * which anndata's readers decode as they decode them from HDF5.  0 when
 * zarr cannot hold the field (an array field, a nested record, a
 * reference): *typestr unset. */
static int field_layout(node *f, vfield *out, char *typestr, size_t cap, cellar_error *err)
{
    const node_info *in = node_get_info(f);
    out->field = f;
    if (in->ndim != 1 || in->n_fields)
        return 0;
    if (dtype_is_numeric(in->dtype)) {
        out->how = VF_NUMBER;
        out->size = dtype_size(in->dtype);
        snprintf(typestr, cap, "%s", dtype_npy_descr(in->dtype));
        return 1;
    }
    if (in->dtype != DT_STRING)
        return 0;
    if (in->string_size) {
        out->how = VF_BYTES;
        out->size = in->string_size;
        snprintf(typestr, cap, "|S%zu", in->string_size);
        return 1;
    }
    size_t width;
    int rc = text_width(f, &width, err);
    if (rc)
        return -rc;
    if (width > (SIZE_MAX / 4) / 2)
        return 0;
    out->how = VF_TEXT;
    out->size = 4 * width;
    snprintf(typestr, cap, "<U%zu", width);
    return 1;
}

/* A 1-D array of records as a zarr v2 structured dtype of packed records
 * (numpy's layout for a list of fields), row blocks of about 1 MiB.
 * CELLAR_ENOTFOUND with d->why set when a field cannot be held. */
static int records_array(node *n, const node_info *in, described *d, cellar_error *err)
{
    varray *a = &d->a;
    arena *ar = arena_new();
    const char **names = NULL;
    size_t count = 0;
    int rc = ar ? node_children(n, ar, &names, &count, err)
                : cellar_fail(err, CELLAR_ENOMEM, "out of memory");
    if (rc)
        goto done;
    a->fields = calloc(count ? count : 1, sizeof *a->fields);
    a->dtype_json = json_array();
    if (!a->fields || !a->dtype_json) {
        rc = cellar_fail(err, CELLAR_ENOMEM, "out of memory");
        goto done;
    }
    size_t offset = 0;
    for (size_t i = 0; i < count && in->ndim == 1; i++) {
        node *f = NULL;
        char typestr[32];
        rc = node_child(n, names[i], &f, err);
        int ok = rc ? 0 : field_layout(f, &a->fields[i], typestr, sizeof typestr, err);
        if (rc || ok < 0) {
            rc = rc ? rc : -ok;
            goto done;
        }
        if (!ok || offset > SIZE_MAX / 2) {
            snprintf(d->why, sizeof d->why,
                     "'%.80s' is an HDF5 compound dataset whose field '%.80s' zarr cannot express "
                     "in a structured dtype: the zarr view leaves it out",
                     node_path(n), names[i]);
            d->ok = 0;
            goto done;
        }
        a->fields[i].offset = offset;
        offset += a->fields[i].size;
        if (json_array_append_new(a->dtype_json, json_pack("[s,s]", names[i], typestr))) {
            rc = cellar_fail(err, CELLAR_ENOMEM, "out of memory");
            goto done;
        }
    }
    if (in->ndim != 1 || !count) {
        snprintf(d->why, sizeof d->why,
                 "'%.100s' is an HDF5 compound dataset of %d dimensions and %zu fields, which "
                 "zarr cannot express in a structured dtype: the zarr view leaves it out",
                 node_path(n), in->ndim, count);
        d->ok = 0;
        goto done;
    }
    a->n_fields = count;
    a->how = HOW_RECORDS;
    a->item = offset ? offset : 1;
    snprintf(a->dtype, sizeof a->dtype, "|V%zu", a->item);
    h5za_block_grid(1, in->shape, a->item, BLOCK_BYTES, a->chunk);
    a->fill_value = json_null();
done:
    arena_free(ar);
    return rc;
}

static int describe(node *n, void *ctx, void **value, cellar_error *err)
{
    (void)ctx;
    described *d = calloc(1, sizeof *d);
    if (!d)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
    const node_info *in = node_get_info(n);
    varray *a = &d->a;
    a->zlib_level = -1;
    a->fd = -1;
    a->ndim = in->ndim < 0 ? 0 : in->ndim;
    memcpy(a->shape, in->shape, sizeof a->shape);
    h5_storage st;
    h5_zarr_storage(n, &st);
    d->ok = 1;
    if (in->ndim < 0) {
        a->how = HOW_EMPTY;
        snprintf(a->dtype, sizeof a->dtype, "|b1");
        a->item = 1;
        a->fill_value = json_false();
    } else if (in->dtype == DT_STRING && legacy_text(n)) {
        int rc = text_array(n, in, a, err);
        if (rc) {
            described_free(d);
            return rc;
        }
    } else if (in->dtype == DT_STRING) {
        a->how = in->string_size ? HOW_FIXED : HOW_VLEN;
        a->vlen = !in->string_size;
        a->item = in->string_size;
        if (in->string_size)
            snprintf(a->dtype, sizeof a->dtype, "|S%zu", in->string_size);
        else
            snprintf(a->dtype, sizeof a->dtype, "|O");
        if (a->ndim && st.chunked)
            memcpy(a->chunk, st.chunk, sizeof a->chunk);
        else if (a->ndim)
            h5za_block_grid(a->ndim, a->shape, in->string_size ? in->string_size : 1,
                            in->string_size ? BLOCK_BYTES : BLOCK_STRINGS, a->chunk);
        a->fill_value = json_string("");
    } else if (dtype_is_numeric(in->dtype)) {
        numeric_array(n, in, &st, a);
    } else if (in->n_fields > 0) {
        int rc = records_array(n, in, d, err);
        if (rc) {
            described_free(d);
            return rc;
        }
    } else {
        d->ok = 0;
        snprintf(d->why, sizeof d->why,
                 "'%s' is an HDF5 %s dataset, which zarr cannot express: the zarr view "
                 "leaves it out",
                 node_path(n), h5_type_class_name(n));
    }
    for (int k = 0; d->ok && k < a->ndim; k++)
        if (a->chunk[k] < 1)
            a->chunk[k] = 1;
    if (d->ok && !a->fill_value) {
        described_free(d);
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
    }
    *value = d;
    return 0;
}

int h5za_describe(node *n, const varray **out, const char **why, cellar_error *err)
{
    void *value = NULL;
    *out = NULL;
    *why = NULL;
    int rc = node_memo(n, &static_key_describe, describe, NULL, described_free, &value, err);
    if (rc)
        return rc;
    const described *d = value;
    if (!d->ok) {
        *why = d->why;
        return cellar_fail(err, CELLAR_ENOTFOUND, "%s", d->why);
    }
    *out = &d->a;
    return 0;
}

/* ---- chunks ---- */

/* Items of a whole chunk, and the part of it inside the array (start and
 * count per dimension); 0 when an item count overflows. */
static int chunk_box(const varray *a, const int64_t *cidx, int64_t *start, int64_t *count,
                     uint64_t *items, uint64_t *inside)
{
    uint64_t all = 1, in = 1;
    for (int d = 0; d < a->ndim; d++) {
        start[d] = cidx[d] * a->chunk[d];
        int64_t left = a->shape[d] - start[d];
        count[d] = left < a->chunk[d] ? left : a->chunk[d];
        all = sat_mul_u64(all, (uint64_t)a->chunk[d]);
        in = sat_mul_u64(in, (uint64_t)count[d]);
    }
    *items = all;
    *inside = in;
    return all != UINT64_MAX;
}

static int too_big(const varray *a, uint64_t bytes, uint64_t max, cellar_error *err)
{
    (void)a;
    return cellar_fail(err, CELLAR_ETOOBIG,
                       "a chunk of this array would take %llu bytes, over the %llu a chunk of "
                       "the zarr view may take",
                       (unsigned long long)bytes, (unsigned long long)max);
}

/* Copies the block (count[] items, C order) into the whole chunk (chunk[]
 * items, C order, already holding the padding), items of es bytes. */
static void place_block(const unsigned char *block, const int64_t *count, unsigned char *whole,
                        const int64_t *chunk, int ndim, size_t es)
{
    if (ndim == 0) {
        memcpy(whole, block, es);
        return;
    }
    int64_t idx[NODE_MAX_DIMS] = {0};
    size_t row = (size_t)count[ndim - 1] * es;
    int64_t rows = 1;
    for (int d = 0; d < ndim - 1; d++)
        rows *= count[d];
    for (int64_t r = 0; r < rows; r++) {
        uint64_t off = 0;
        for (int d = 0; d < ndim - 1; d++)
            off = off * (uint64_t)chunk[d] + (uint64_t)idx[d];
        off *= (uint64_t)chunk[ndim - 1];
        memcpy(whole + off * es, block + (size_t)r * row, row);
        for (int d = ndim - 2; d >= 0; d--) {
            if (++idx[d] < count[d])
                break;
            idx[d] = 0;
        }
    }
}

/* The position in the block (count[]) of item i of the whole chunk
 * (chunk[]), or -1 when it is padding. */
static int64_t block_pos(uint64_t i, const int64_t *count, const int64_t *chunk, int ndim)
{
    int64_t pos = 0, stride = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        int64_t c = (int64_t)(i % (uint64_t)chunk[d]);
        i /= (uint64_t)chunk[d];
        if (c >= count[d])
            return -1;
        pos += c * stride;
        stride *= count[d];
    }
    return pos;
}

static void selection_of(const varray *a, const int64_t *start, const int64_t *count, dim_sel *sel)
{
    for (int d = 0; d < a->ndim; d++)
        sel[d] = dim_sel_range(start[d], count[d]);
}

static int chunk_read(node *n, const varray *a, const int64_t *start, const int64_t *count,
                      uint64_t items, uint64_t inside, uint64_t max, vchunk *out,
                      cellar_error *err)
{
    uint64_t bytes = sat_mul_u64(items, a->item);
    if (bytes > max)
        return too_big(a, bytes, max, err);
    unsigned char *whole = (unsigned char *)buf_reserve(&out->bytes, (size_t)bytes ? (size_t)bytes : 1);
    if (!whole)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory reading '%s'", node_path(n));
    for (uint64_t i = 0; i < items; i++)
        memcpy(whole + i * a->item, a->fill, a->item);
    dim_sel sel[NODE_MAX_DIMS];
    selection_of(a, start, count, sel);
    int rc;
    if (inside == items) {
        rc = node_read(n, a->ndim ? sel : NULL, whole, (size_t)bytes, err);
    } else {
        unsigned char *block = malloc((size_t)(inside * a->item));
        if (!block)
            return cellar_fail(err, CELLAR_ENOMEM, "out of memory reading '%s'", node_path(n));
        rc = node_read(n, sel, block, (size_t)(inside * a->item), err);
        if (!rc)
            place_block(block, count, whole, a->chunk, a->ndim, a->item);
        free(block);
    }
    if (!rc)
        out->bytes.len = (size_t)bytes;
    return rc;
}

int h5za_vlen_encode(const char *const *s, const size_t *len, size_t n, uint64_t max_bytes, buf *out,
                     cellar_error *err)
{
    uint64_t total = 4;
    for (size_t i = 0; i < n; i++)
        total = sat_add_u64(total, sat_add_u64(4, s[i] ? len[i] : 0));
    if (total > max_bytes || n > UINT32_MAX)
        return cellar_fail(err, CELLAR_ETOOBIG,
                           "a chunk of strings would take %llu bytes, over the %llu a chunk of "
                           "the zarr view may take",
                           (unsigned long long)total, (unsigned long long)max_bytes);
    unsigned char *p = (unsigned char *)buf_reserve(out, (size_t)total);
    if (!p)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory encoding strings");
    uint32_t v = (uint32_t)n;
    memcpy(p, &v, 4); /* little-endian hosts only, as the rest of cellar */
    p += 4;
    for (size_t i = 0; i < n; i++) {
        uint32_t l = s[i] ? (uint32_t)len[i] : 0;
        memcpy(p, &l, 4);
        p += 4;
        if (l)
            memcpy(p, s[i], l);
        p += l;
    }
    out->len += (size_t)total;
    return 0;
}

/* items strings (len[i] bytes of UTF-8, NULL as empty) as numpy <U of
 * `width` characters each: UTF-32LE, padded with zeros, cut at width. */
static int text_encode(const char *const *s, const size_t *len, uint64_t items, size_t width,
                       uint64_t max, buf *out, cellar_error *err)
{
    uint64_t bytes = sat_mul_u64(items, sat_mul_u64(width, 4));
    if (bytes > max)
        return cellar_fail(err, CELLAR_ETOOBIG,
                           "a chunk of strings would take %llu bytes, over the %llu a chunk of "
                           "the zarr view may take",
                           (unsigned long long)bytes, (unsigned long long)max);
    unsigned char *p = (unsigned char *)buf_reserve(out, (size_t)bytes ? (size_t)bytes : 1);
    if (!p)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory encoding strings");
    memset(p, 0, (size_t)bytes);
    for (uint64_t i = 0; i < items; i++) {
        const unsigned char *t = (const unsigned char *)s[i];
        unsigned char *cell = p + i * width * 4;
        for (size_t at = 0, c = 0; t && at < len[i] && c < width; c++) {
            unsigned long cp;
            at += utf8_next(t + at, len[i] - at, &cp);
            for (int b = 0; b < 4; b++)
                cell[c * 4 + (size_t)b] = (unsigned char)(cp >> (8 * b));
        }
    }
    out->len = (size_t)bytes;
    return 0;
}

static int chunk_strings(node *n, const varray *a, const int64_t *start, const int64_t *count,
                         uint64_t items, uint64_t inside, uint64_t max, vchunk *out,
                         cellar_error *err)
{
    if (items > max / 4)
        return too_big(a, sat_mul_u64(items, 4), max, err);
    arena *ar = arena_new();
    char **block = ar ? arena_calloc(ar, (size_t)(inside ? inside : 1), sizeof *block) : NULL;
    const char **all = ar ? arena_calloc(ar, (size_t)items, sizeof *all) : NULL;
    size_t *len = ar ? arena_calloc(ar, (size_t)items, sizeof *len) : NULL;
    int rc = 0;
    if (!block || !all || !len) {
        rc = cellar_fail(err, CELLAR_ENOMEM, "out of memory reading '%s'", node_path(n));
        goto done;
    }
    dim_sel sel[NODE_MAX_DIMS];
    selection_of(a, start, count, sel);
    if (inside)
        rc = node_read_strings(n, a->ndim ? sel : NULL, ar, block, err);
    if (rc)
        goto done;
    for (uint64_t i = 0; i < items; i++) {
        int64_t pos = a->ndim ? block_pos(i, count, a->chunk, a->ndim) : 0;
        all[i] = pos >= 0 ? block[pos] : NULL;
        len[i] = all[i] ? strlen(all[i]) : 0;
    }
    if (a->vlen) {
        rc = h5za_vlen_encode(all, len, (size_t)items, max, &out->bytes, err);
        goto done;
    }
    if (a->how == HOW_UNICODE) {
        rc = text_encode(all, len, items, a->item / 4, max, &out->bytes, err);
        goto done;
    }
    uint64_t bytes = sat_mul_u64(items, a->item);
    if (bytes > max) {
        rc = too_big(a, bytes, max, err);
        goto done;
    }
    char *p = buf_reserve(&out->bytes, (size_t)bytes ? (size_t)bytes : 1);
    if (!p) {
        rc = cellar_fail(err, CELLAR_ENOMEM, "out of memory reading '%s'", node_path(n));
        goto done;
    }
    memset(p, 0, (size_t)bytes);
    for (uint64_t i = 0; i < items; i++)
        memcpy(p + i * a->item, all[i] ? all[i] : "", len[i] < a->item ? len[i] : a->item);
    out->bytes.len = (size_t)bytes;
done:
    arena_free(ar);
    return rc;
}

/* One field's values of rows [start, start + rows) into the packed records
 * at rec (a record every a->item bytes). */
static int field_into_records(const varray *a, const vfield *f, int64_t start, int64_t rows,
                              unsigned char *rec, cellar_error *err)
{
    dim_sel sel = dim_sel_range(start, rows);
    if (f->how == VF_NUMBER) {
        unsigned char *v = malloc((size_t)rows * f->size + 1);
        if (!v)
            return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
        int rc = node_read(f->field, &sel, v, (size_t)rows * f->size, err);
        for (int64_t r = 0; !rc && r < rows; r++)
            memcpy(rec + (size_t)r * a->item + f->offset, v + (size_t)r * f->size, f->size);
        free(v);
        return rc;
    }
    arena *ar = arena_new();
    char **s = ar ? arena_calloc(ar, (size_t)rows + 1, sizeof *s) : NULL;
    size_t *len = ar ? arena_calloc(ar, (size_t)rows + 1, sizeof *len) : NULL;
    buf text = {0};
    int rc = s && len ? node_read_strings(f->field, &sel, ar, s, err)
                      : cellar_fail(err, CELLAR_ENOMEM, "out of memory");
    for (int64_t r = 0; !rc && r < rows; r++)
        len[r] = s[r] ? strlen(s[r]) : 0;
    if (!rc && f->how == VF_TEXT)
        rc = text_encode((const char *const *)s, len, (uint64_t)rows, f->size / 4, UINT64_MAX,
                         &text, err);
    for (int64_t r = 0; !rc && r < rows; r++) {
        unsigned char *to = rec + (size_t)r * a->item + f->offset;
        if (f->how == VF_TEXT)
            memcpy(to, text.data + (size_t)r * f->size, f->size);
        else if (s[r])
            memcpy(to, s[r], len[r] < f->size ? len[r] : f->size);
    }
    buf_destroy(&text);
    arena_free(ar);
    return rc;
}

/* A row block of packed records (zeros past the last row). */
static int chunk_records(const varray *a, const int64_t *start, const int64_t *count,
                         uint64_t items, uint64_t max, vchunk *out, cellar_error *err)
{
    uint64_t bytes = sat_mul_u64(items, a->item);
    if (bytes > max)
        return too_big(a, bytes, max, err);
    unsigned char *rec = (unsigned char *)buf_reserve(&out->bytes, (size_t)bytes ? (size_t)bytes : 1);
    if (!rec)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
    memset(rec, 0, (size_t)bytes);
    for (size_t i = 0; i < a->n_fields; i++) {
        int rc = field_into_records(a, &a->fields[i], start[0], count[0], rec, err);
        if (rc)
            return rc;
    }
    out->bytes.len = (size_t)bytes;
    return 0;
}

int h5za_pread(int fd, void *to, size_t n, uint64_t off, const char *what, cellar_error *err)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(fd, (char *)to + got, n - got, (off_t)(off + got));
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return cellar_fail(err, CELLAR_EIO, "reading '%s' failed: %s", what, strerror(errno));
        if (r == 0)
            return cellar_fail(err, CELLAR_EFORMAT, "'%s' lies past the end of the file", what);
        got += (size_t)r;
    }
    return 0;
}

/* A whole row block of a contiguous dataset: one range of the file, the
 * last block of the array read and padded (zarr's edge chunks are whole). */
static int chunk_contiguous(node *n, const varray *a, const int64_t *start, uint64_t items,
                            uint64_t inside, uint64_t max, vchunk *out, cellar_error *err)
{
    uint64_t first = 0;
    for (int d = 0; d < a->ndim; d++)
        first = first * (uint64_t)a->shape[d] + (uint64_t)start[d];
    uint64_t off = a->offset + first * a->item; /* inside the file: checked by the plan */
    uint64_t bytes = items * a->item;
    if (inside == items) {
        out->fd = a->fd;
        out->offset = off;
        out->size = bytes;
        return 0;
    }
    if (bytes > max)
        return too_big(a, bytes, max, err);
    char *p = buf_reserve(&out->bytes, (size_t)bytes);
    if (!p)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory reading '%s'", node_path(n));
    memset(p, 0, (size_t)bytes);
    int rc = h5za_pread(a->fd, p, (size_t)(inside * a->item), off, node_path(n), err);
    if (rc)
        return rc;
    out->bytes.len = (size_t)bytes;
    return 0;
}

/* An HDF5 chunk: as it is stored (deflated or not), or decoded.  A
 * deflated chunk that HDF5 left uncompressed (deflate's filter is
 * optional) is deflated here, at level 1, so every chunk of the array
 * decodes alike. */
static int chunk_stored(node *n, const varray *a, const int64_t *cidx, uint64_t max,
                        vchunk *out, cellar_error *err)
{
    h5_chunk_bytes cb;
    int rc = h5_zarr_chunk(n, cidx, &cb, err);
    if (rc)
        return rc;
    if (!cb.allocated) {
        out->absent = 1;
        return 0;
    }
    if (a->zlib_level >= 0 && cb.raw) {
        unsigned char *raw = cb.data;
        if (!raw && cb.size <= max) {
            raw = malloc((size_t)cb.size ? (size_t)cb.size : 1);
            if (raw && (rc = h5za_pread(cb.fd, raw, (size_t)cb.size, cb.offset, node_path(n), err))) {
                free(raw);
                return rc;
            }
        }
        if (!raw)
            return cb.size > max ? too_big(a, cb.size, max, err)
                                 : cellar_fail(err, CELLAR_ENOMEM, "out of memory");
        uLongf bound = compressBound((uLong)cb.size);
        char *p = buf_reserve(&out->bytes, (size_t)bound);
        rc = !p ? cellar_fail(err, CELLAR_ENOMEM, "out of memory")
             : compress2((Bytef *)p, &bound, raw, (uLong)cb.size, 1) != Z_OK
                 ? cellar_fail(err, CELLAR_EINTERNAL, "cannot deflate a chunk of '%s'", node_path(n))
                 : 0;
        if (!rc)
            out->bytes.len = (size_t)bound;
        free(raw);
        return rc;
    }
    if (cb.data) {
        buf_destroy(&out->bytes);
        out->bytes = (buf){.data = (char *)cb.data, .len = (size_t)cb.size, .cap = (size_t)cb.size};
        return 0;
    }
    out->fd = cb.fd;
    out->offset = cb.offset;
    out->size = cb.size;
    return 0;
}

int h5za_chunk(node *n, const varray *a, const int64_t *cidx, uint64_t max_bytes, vchunk *out,
               cellar_error *err)
{
    memset(out, 0, sizeof *out);
    out->fd = -1;
    int64_t start[NODE_MAX_DIMS], count[NODE_MAX_DIMS];
    uint64_t items, inside;
    if (!chunk_box(a, cidx, start, count, &items, &inside))
        return too_big(a, UINT64_MAX, max_bytes, err);
    switch (a->how) {
    case HOW_STORED:
    case HOW_DECODED: return chunk_stored(n, a, cidx, max_bytes, out, err);
    case HOW_CONTIG: return chunk_contiguous(n, a, start, items, inside, max_bytes, out, err);
    case HOW_READ: return chunk_read(n, a, start, count, items, inside, max_bytes, out, err);
    case HOW_VLEN:
    case HOW_FIXED:
    case HOW_UNICODE: return chunk_strings(n, a, start, count, items, inside, max_bytes, out, err);
    case HOW_RECORDS: return chunk_records(a, start, count, items, max_bytes, out, err);
    case HOW_EMPTY: out->absent = 1; return 0;
    default: return cellar_fail(err, CELLAR_EINTERNAL, "no chunks for '%s'", node_path(n));
    }
}
