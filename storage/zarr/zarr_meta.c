/* Zarr array metadata (v2 .zarray, v3 zarr.json) into zarr_array. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "storage/zarr/zarr_impl.h"

/* One chunk may decode to at most this many bytes (and vlen chunks to at
 * most this many items). */
#define ZARR_MAX_CHUNK_BYTES CODEC_MAX_DECODED

void zarr_array_clear(zarr_array *a)
{
    if (!a)
        return;
    free(a->fill_str);
    free(a->unsupported);
    for (int i = 0; i < a->n_fields; i++)
        free(a->fields[i].name);
    free(a->fields);
    memset(a, 0, sizeof *a);
}

/* Records why the array cannot be read: head, then arg (may be NULL), then
 * tail.  The first reason wins. */
static void set_unsupported3(zarr_array *a, const char *head, const char *arg, const char *tail)
{
    if (a->unsupported)
        return;
    if (!arg)
        arg = "";
    size_t n = strlen(head) + strlen(arg) + strlen(tail) + 1;
    a->unsupported = malloc(n);
    if (a->unsupported)
        snprintf(a->unsupported, n, "%s%s%s", head, arg, tail);
}

/* ---- JSON text ---------------------------------------------------------- */

/* Copies text replacing bare NaN, Infinity and -Infinity outside strings by
 * null (Python's json.dumps writes them). */
static char *json_sanitize(const char *text, size_t len)
{
    /* "null" is one byte longer than "NaN". */
    char *o = len < SIZE_MAX / 2 ? malloc(2 * len + 1) : NULL;
    if (!o)
        return NULL;
    size_t j = 0;
    int in_str = 0;
    for (size_t i = 0; i < len;) {
        char c = text[i];
        if (in_str) {
            o[j++] = c;
            if (c == '\\' && i + 1 < len) {
                o[j++] = text[i + 1];
                i += 2;
                continue;
            }
            if (c == '"')
                in_str = 0;
            i++;
            continue;
        }
        if (c == '"')
            in_str = 1;
        size_t skip = 0;
        if (len - i >= 3 && memcmp(text + i, "NaN", 3) == 0)
            skip = 3;
        else if (len - i >= 8 && memcmp(text + i, "Infinity", 8) == 0)
            skip = 8;
        else if (len - i >= 9 && memcmp(text + i, "-Infinity", 9) == 0)
            skip = 9;
        if (skip) {
            memcpy(o + j, "null", 4);
            j += 4;
            i += skip;
            continue;
        }
        o[j++] = c;
        i++;
    }
    o[j] = '\0';
    return o;
}

int zarr_json_parse(const char *text, size_t len, json_t **out, const char *what,
                    cellar_error *err)
{
    json_error_t jerr;
    *out = json_loadb(text, len, 0, &jerr);
    if (*out)
        return 0;
    char *clean = json_sanitize(text, len);
    if (!clean)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory parsing %s", what);
    json_error_t jerr2;
    *out = json_loads(clean, 0, &jerr2);
    free(clean);
    if (*out)
        return 0;
    return cellar_fail(err, CELLAR_EFORMAT, "%s is not valid JSON (line %d: %s)", what,
                       jerr.line, jerr.text);
}

/* ---- shapes ------------------------------------------------------------- */

static int parse_dims(const json_t *arr, int64_t *out, int *ndim, int64_t min, const char *key,
                      const char *what, cellar_error *err)
{
    if (!json_is_array(arr))
        return cellar_fail(err, CELLAR_EFORMAT, "%s: '%s' is not a list", what, key);
    size_t n = json_array_size(arr);
    if (n > NODE_MAX_DIMS)
        return cellar_fail(err, CELLAR_EFORMAT, "%s: %zu dimensions (at most %d supported)",
                           what, n, NODE_MAX_DIMS);
    for (size_t i = 0; i < n; i++) {
        const json_t *v = json_array_get(arr, i);
        if (!json_is_integer(v) || json_integer_value(v) < min ||
            json_integer_value(v) > ((int64_t)1 << 53))
            return cellar_fail(err, CELLAR_EFORMAT, "%s: '%s' item %zu is not a valid size",
                               what, key, i);
        out[i] = json_integer_value(v);
    }
    *ndim = (int)n;
    return 0;
}

/* Elements in one chunk of `shape`, with the per-chunk limits. */
static int chunk_elems(const int64_t *shape, int ndim, size_t itemsize, const char *what,
                       cellar_error *err)
{
    uint64_t e = 1;
    for (int d = 0; d < ndim; d++) {
        if ((uint64_t)shape[d] > ZARR_MAX_CHUNK_BYTES / e)
            return cellar_fail(err, CELLAR_EFORMAT, "%s: chunks are too large", what);
        e *= (uint64_t)shape[d];
    }
    size_t per = itemsize ? itemsize : 4;
    if (e > ZARR_MAX_CHUNK_BYTES / per)
        return cellar_fail(err, CELLAR_EFORMAT, "%s: chunks are too large", what);
    return 0;
}

/* ---- dtypes ------------------------------------------------------------- */

static dtype_kind numeric_kind(char kind, unsigned size)
{
    switch (kind) {
    case 'b': return size == 1 ? DT_BOOL : DT_NONE;
    case 'i':
        return size == 1 ? DT_INT8 : size == 2 ? DT_INT16 : size == 4 ? DT_INT32
             : size == 8 ? DT_INT64 : DT_NONE;
    case 'u':
        return size == 1 ? DT_UINT8 : size == 2 ? DT_UINT16 : size == 4 ? DT_UINT32
             : size == 8 ? DT_UINT64 : DT_NONE;
    case 'f':
        return size == 2 ? DT_FLOAT16 : size == 4 ? DT_FLOAT32 : size == 8 ? DT_FLOAT64
             : DT_NONE;
    default: return DT_NONE;
    }
}

static void parse_v2_records(const json_t *j, zarr_array *a);

/* numpy typestr: "<i4", "|b1", ">f8", "|O", "<U12", "|S5"; or a list of
 * fields (a structured dtype). */
static void parse_v2_dtype(const json_t *j, zarr_array *a, int *big_endian)
{
    const char *s = json_string_value(j);
    a->dtype = DT_NONE;
    *big_endian = 0;
    if (json_is_array(j)) {
        parse_v2_records(j, a);
        return;
    }
    if (!s) {
        set_unsupported3(a, "dtype is neither a string nor a list of fields", NULL, "");
        return;
    }
    size_t len = strlen(s);
    if (len < 2 || !strchr("<>|=", s[0])) {
        set_unsupported3(a, "dtype '", s, "' is not supported");
        return;
    }
    *big_endian = s[0] == '>';
    char kind = s[1];
    if (kind == 'O' && len == 2) {
        a->dtype = DT_STRING;
        a->kind = ZK_VLEN_UTF8; /* refined by the object codec */
        a->itemsize = 0;
        return;
    }
    unsigned long size = 0;
    if (len > 2 && len <= 10) {
        for (size_t i = 2; i < len; i++) {
            if (!isdigit((unsigned char)s[i])) {
                size = 0;
                break;
            }
            size = size * 10 + (unsigned long)(s[i] - '0');
        }
    }
    if (kind == 'U' || kind == 'S') {
        if (size == 0 || size > (1ul << 20)) {
            set_unsupported3(a, "dtype '", s, "' is not supported");
            return;
        }
        a->dtype = DT_STRING;
        a->kind = kind == 'U' ? ZK_FIXED_UTF32 : ZK_FIXED_BYTES;
        a->itemsize = kind == 'U' ? 4 * size : size;
        return;
    }
    a->dtype = numeric_kind(kind, (unsigned)size);
    if (a->dtype == DT_NONE) {
        set_unsupported3(a, "dtype '", s, "' is not supported");
        return;
    }
    a->kind = ZK_NUMERIC;
    a->itemsize = dtype_size(a->dtype);
}

/* A structured dtype [[name, typestr], [name, typestr, shape], ...]: its
 * fields packed in order (numpy's layout of a list of fields).  Fields of
 * numbers, bools and fixed-length strings are read; subarray and nested
 * fields are listed with DT_NONE. */
static void parse_v2_records(const json_t *j, zarr_array *a)
{
    size_t n = json_array_size(j), off = 0;
    if (n == 0 || n > ZARR_MAX_FIELDS) {
        set_unsupported3(a, "a structured dtype with no or too many fields", NULL, "");
        return;
    }
    a->fields = calloc(n, sizeof *a->fields);
    if (!a->fields) {
        set_unsupported3(a, "out of memory", NULL, "");
        return;
    }
    a->n_fields = (int)n;
    for (size_t i = 0; i < n; i++) {
        const json_t *f = json_array_get(j, i);
        const char *name = json_string_value(json_array_get(f, 0));
        zarr_array one;
        memset(&one, 0, sizeof one);
        int big = 0;
        size_t nf = json_array_size(f);
        if (!json_is_array(f) || nf < 2 || nf > 3 || !name || !name[0] || strlen(name) > 1024 ||
            !json_is_string(json_array_get(f, 1))) {
            set_unsupported3(a, "a field of the structured dtype is not [name, type]", NULL, "");
            return;
        }
        for (size_t k = 0; k < i; k++)
            if (strcmp(a->fields[k].name, name) == 0) {
                set_unsupported3(a, "the structured dtype names field '", name, "' twice");
                return;
            }
        parse_v2_dtype(json_array_get(f, 1), &one, &big);
        size_t count = 1;
        const json_t *sub = nf == 3 ? json_array_get(f, 2) : NULL;
        for (size_t d = 0; sub && d < json_array_size(sub); d++) {
            json_int_t v = json_integer_value(json_array_get(sub, d));
            if (!json_is_integer(json_array_get(sub, d)) || v < 0 || v > (1 << 20) ||
                (v && count > ((size_t)1 << 30) / (size_t)v)) {
                zarr_array_clear(&one);
                set_unsupported3(a, "field '", name, "' has a bad shape");
                return;
            }
            count *= (size_t)v;
        }
        size_t fsize = one.itemsize * count;
        zarr_field *zf = &a->fields[i];
        zf->name = strdup(name);
        zf->offset = off;
        zf->itemsize = one.itemsize;
        zf->kind = one.kind;
        zf->big_endian = big;
        /* vlen fields cannot be stored; subarrays are not read */
        zf->dtype = !one.unsupported && one.kind != ZK_VLEN_UTF8 && one.kind != ZK_VLEN_BYTES &&
                            one.itemsize && !sub
                        ? one.dtype
                        : DT_NONE;
        int bad = !zf->name || !one.itemsize || one.unsupported;
        zarr_array_clear(&one);
        if (!zf->name) {
            set_unsupported3(a, "out of memory", NULL, "");
            return;
        }
        if (bad || off > ((size_t)1 << 30) - fsize) {
            set_unsupported3(a, "field '", name, "' of the structured dtype is not supported");
            return;
        }
        off += fsize;
    }
    a->kind = ZK_RECORDS;
    a->itemsize = off;
}

static void parse_v3_dtype(const json_t *j, zarr_array *a)
{
    static const struct {
        const char *name;
        dtype_kind dt;
    } names[] = {
        {"bool", DT_BOOL},       {"int8", DT_INT8},       {"int16", DT_INT16},
        {"int32", DT_INT32},     {"int64", DT_INT64},     {"uint8", DT_UINT8},
        {"uint16", DT_UINT16},   {"uint32", DT_UINT32},   {"uint64", DT_UINT64},
        {"float16", DT_FLOAT16}, {"float32", DT_FLOAT32}, {"float64", DT_FLOAT64},
    };
    const char *name = json_string_value(j);
    const json_t *conf = NULL;
    if (json_is_object(j)) {
        name = json_string_value(json_object_get(j, "name"));
        conf = json_object_get(j, "configuration");
    }
    a->dtype = DT_NONE;
    if (!name) {
        set_unsupported3(a, "data_type is not a name", NULL, "");
        return;
    }
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (strcmp(name, names[i].name) == 0) {
            a->dtype = names[i].dt;
            a->kind = ZK_NUMERIC;
            a->itemsize = dtype_size(a->dtype);
            return;
        }
    }
    if (strcmp(name, "string") == 0) {
        a->dtype = DT_STRING;
        a->kind = ZK_VLEN_UTF8;
        return;
    }
    if (strcmp(name, "variable_length_bytes") == 0 || strcmp(name, "bytes") == 0) {
        a->dtype = DT_STRING;
        a->kind = ZK_VLEN_BYTES;
        return;
    }
    int utf32 = strcmp(name, "fixed_length_utf32") == 0;
    if (utf32 || strcmp(name, "null_terminated_bytes") == 0) {
        json_int_t n = json_integer_value(json_object_get(conf, "length_bytes"));
        if (n <= 0 || n > (1 << 22) || (utf32 && n % 4)) {
            set_unsupported3(a, "data_type '", name, "' has an invalid length_bytes");
            return;
        }
        a->dtype = DT_STRING;
        a->kind = utf32 ? ZK_FIXED_UTF32 : ZK_FIXED_BYTES;
        a->itemsize = (size_t)n;
        return;
    }
    set_unsupported3(a, "data_type '", name, "' is not supported");
}

/* ---- fill values -------------------------------------------------------- */

/* A double as an int64 without undefined behaviour (NaN -> 0, clamped). */
static int64_t double_to_i64(double v)
{
    if (v != v)
        return 0;
    if (v >= 9223372036854775807.0)
        return INT64_MAX;
    if (v <= -9223372036854775808.0)
        return INT64_MIN;
    return (int64_t)v;
}

static void store_number(zarr_array *a, double dv, int64_t iv, int is_int)
{
    uint8_t *f = a->fill;
    if (!is_int)
        iv = double_to_i64(dv);
    else
        dv = (double)iv;
    union {
        int8_t i8;
        int16_t i16;
        int32_t i32;
        int64_t i64;
        uint16_t u16;
        float f32;
        double f64;
    } u;
    switch (a->dtype) {
    case DT_BOOL: f[0] = is_int ? iv != 0 : dv != 0; return;
    case DT_INT8: case DT_UINT8: u.i8 = (int8_t)(uint8_t)iv; break;
    case DT_INT16: case DT_UINT16: u.i16 = (int16_t)(uint16_t)iv; break;
    case DT_INT32: case DT_UINT32: u.i32 = (int32_t)(uint32_t)iv; break;
    case DT_INT64: case DT_UINT64: u.i64 = iv; break;
    case DT_FLOAT16: u.u16 = codec_double_to_half(dv); break;
    case DT_FLOAT32:
        u.f32 = dv != dv || (dv < 3.5e38 && dv > -3.5e38) ? (float)dv
                                                        : (dv > 0 ? INFINITY : -INFINITY);
        break;
    case DT_FLOAT64: u.f64 = dv; break;
    default: return;
    }
    memcpy(f, &u, a->itemsize <= sizeof u ? a->itemsize : sizeof u);
}

/* "0x7fc00000": the raw bits of a float fill value (zarr v3). */
static int store_hex_bits(zarr_array *a, const char *s)
{
    size_t n = strlen(s + 2);
    if (n != 2 * a->itemsize || !dtype_is_float(a->dtype))
        return -1;
    uint64_t bits = 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[2 + i];
        int v = isdigit((unsigned char)c) ? c - '0'
              : (c >= 'a' && c <= 'f') ? c - 'a' + 10
              : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : -1;
        if (v < 0)
            return -1;
        bits = bits << 4 | (uint64_t)v;
    }
    if (a->itemsize == 2) {
        uint16_t v = (uint16_t)bits;
        memcpy(a->fill, &v, 2);
    } else if (a->itemsize == 4) {
        uint32_t v = (uint32_t)bits;
        memcpy(a->fill, &v, 4);
    } else {
        memcpy(a->fill, &bits, 8);
    }
    return 0;
}

static int parse_fill(const json_t *j, zarr_array *a, const char *what, cellar_error *err)
{
    memset(a->fill, 0, sizeof a->fill);
    if (a->dtype == DT_STRING) {
        const char *s = json_string_value(j);
        if (!s)
            s = "";
        if (a->kind == ZK_FIXED_BYTES && *s) {
            uint8_t *b = malloc(3 * (strlen(s) / 4 + 1) + 1);
            if (!b)
                return cellar_fail(err, CELLAR_ENOMEM, "out of memory parsing %s", what);
            int64_t n = codec_base64_decode(s, b);
            if (n < 0) {
                free(b);
                a->fill_str = strdup(s);
            } else {
                b[n] = 0;
                a->fill_str = (char *)b;
            }
        } else {
            a->fill_str = strdup(s);
        }
        if (!a->fill_str)
            return cellar_fail(err, CELLAR_ENOMEM, "out of memory parsing %s", what);
        return 0;
    }
    if (a->dtype == DT_NONE || json_is_null(j) || !j)
        return 0;
    if (json_is_boolean(j)) {
        store_number(a, 0, json_is_true(j), 1);
    } else if (json_is_integer(j)) {
        store_number(a, 0, json_integer_value(j), 1);
    } else if (json_is_real(j)) {
        store_number(a, json_real_value(j), 0, 0);
    } else if (json_is_string(j)) {
        const char *s = json_string_value(j);
        if (strcmp(s, "NaN") == 0)
            store_number(a, NAN, 0, 0);
        else if (strcmp(s, "Infinity") == 0)
            store_number(a, INFINITY, 0, 0);
        else if (strcmp(s, "-Infinity") == 0)
            store_number(a, -INFINITY, 0, 0);
        else if (!(s[0] == '0' && (s[1] == 'x' || s[1] == 'X') && store_hex_bits(a, s) == 0))
            return cellar_fail(err, CELLAR_EFORMAT, "%s: fill_value '%.40s' is not a number",
                               what, s);
    } else {
        return cellar_fail(err, CELLAR_EFORMAT, "%s: fill_value is not a number", what);
    }
    return 0;
}

/* ---- v2 ----------------------------------------------------------------- */

static int is_vlen_name(const char *name)
{
    return name && (strcmp(name, "vlen-utf8") == 0 || strcmp(name, "vlen-bytes") == 0);
}

/* Filters then compressor, in encoding order. */
static void build_v2_chain(const json_t *filters, const json_t *compressor, zarr_array *a)
{
    const char *ids[ZARR_MAX_CODECS + 2];
    size_t n = 0;
    if (json_is_array(filters)) {
        for (size_t i = 0; i < json_array_size(filters); i++) {
            if (n == ZARR_MAX_CODECS) {
                set_unsupported3(a, "too many filters", NULL, "");
                return;
            }
            const char *id = json_string_value(json_object_get(json_array_get(filters, i), "id"));
            ids[n++] = id ? id : "(unnamed)";
        }
    } else if (!json_is_null(filters) && filters) {
        set_unsupported3(a, "filters is not a list", NULL, "");
        return;
    }
    if (json_is_object(compressor)) {
        const char *id = json_string_value(json_object_get(compressor, "id"));
        ids[n++] = id ? id : "(unnamed)";
    } else if (!json_is_null(compressor) && compressor) {
        set_unsupported3(a, "compressor is not an object", NULL, "");
        return;
    }
    size_t i = 0;
    zarr_chain *c = &a->chain;
    c->a2b = ZA_BYTES;
    if (a->dtype == DT_STRING && (a->kind == ZK_VLEN_UTF8 || a->kind == ZK_VLEN_BYTES)) {
        if (n == 0 || !is_vlen_name(ids[0])) {
            set_unsupported3(a, "object arrays need a vlen-utf8 or vlen-bytes codec", NULL, "");
            return;
        }
        a->kind = strcmp(ids[0], "vlen-utf8") == 0 ? ZK_VLEN_UTF8 : ZK_VLEN_BYTES;
        c->a2b = ZA_VLEN;
        i = 1;
    }
    for (; i < n; i++) {
        codec_id id = codec_from_name(ids[i]);
        if (!id || id == CODEC_CRC32C) {
            set_unsupported3(a, "codec '", ids[i], "' is not supported");
            return;
        }
        c->b2b[c->nb2b++] = id;
    }
}

int zarr_array_parse_v2(const json_t *z, zarr_array *a, const char *what, cellar_error *err)
{
    memset(a, 0, sizeof *a);
    int rc = 0, nd_chunks = 0;
    if (!json_is_object(z)) {
        rc = cellar_fail(err, CELLAR_EFORMAT, "%s: .zarray is not a JSON object", what);
        goto done;
    }
    const json_t *fmt = json_object_get(z, "zarr_format");
    if (fmt && json_integer_value(fmt) != 2) {
        rc = cellar_fail(err, CELLAR_EFORMAT, "%s: .zarray is not zarr_format 2", what);
        goto done;
    }
    rc = parse_dims(json_object_get(z, "shape"), a->shape, &a->ndim, 0, "shape", what, err);
    if (!rc)
        rc = parse_dims(json_object_get(z, "chunks"), a->chunk, &nd_chunks, 1, "chunks", what,
                        err);
    if (rc)
        goto done;
    if (nd_chunks != a->ndim) {
        rc = cellar_fail(err, CELLAR_EFORMAT, "%s: chunks and shape differ in length", what);
        goto done;
    }
    parse_v2_dtype(json_object_get(z, "dtype"), a, &a->chain.big_endian);
    rc = chunk_elems(a->chunk, a->ndim, a->itemsize, what, err);
    if (rc)
        goto done;
    a->v2_keys = 1;
    a->sep = '.';
    const json_t *sep = json_object_get(z, "dimension_separator");
    if (sep && !json_is_null(sep)) {
        const char *s = json_string_value(sep);
        if (!s || (strcmp(s, ".") && strcmp(s, "/"))) {
            rc = cellar_fail(err, CELLAR_EFORMAT, "%s: dimension_separator must be '.' or '/'",
                             what);
            goto done;
        }
        a->sep = s[0];
    }
    const char *order = json_string_value(json_object_get(z, "order"));
    if (order && strcmp(order, "F") == 0) {
        a->chain.has_perm = 1;
        for (int d = 0; d < a->ndim; d++)
            a->chain.perm[d] = a->ndim - 1 - d;
    } else if (order && strcmp(order, "C") != 0) {
        rc = cellar_fail(err, CELLAR_EFORMAT, "%s: order must be 'C' or 'F'", what);
        goto done;
    }
    if (a->dtype != DT_NONE || a->kind == ZK_RECORDS)
        build_v2_chain(json_object_get(z, "filters"), json_object_get(z, "compressor"), a);
    rc = parse_fill(json_object_get(z, "fill_value"), a, what, err);
done:
    if (rc)
        zarr_array_clear(a);
    return rc;
}

/* ---- v3 ----------------------------------------------------------------- */

static const char *codec_name(const json_t *c)
{
    const char *name = json_string_value(json_object_get(c, "name"));
    if (!name)
        name = json_string_value(c);
    return name;
}

static int parse_transpose(const json_t *conf, int ndim, int *perm)
{
    const json_t *order = json_object_get(conf, "order");
    const char *s = json_string_value(order);
    if (s) {
        int f = strcmp(s, "F") == 0;
        if (!f && strcmp(s, "C") != 0)
            return -1;
        for (int d = 0; d < ndim; d++)
            perm[d] = f ? ndim - 1 - d : d;
        return 0;
    }
    if (!json_is_array(order) || json_array_size(order) != (size_t)ndim)
        return -1;
    int seen[NODE_MAX_DIMS] = {0};
    for (int d = 0; d < ndim; d++) {
        json_int_t v = json_integer_value(json_array_get(order, (size_t)d));
        if (!json_is_integer(json_array_get(order, (size_t)d)) || v < 0 || v >= ndim || seen[v])
            return -1;
        seen[v] = 1;
        perm[d] = (int)v;
    }
    return 0;
}

static int parse_endian(const json_t *conf, int *big_endian)
{
    const json_t *e = json_object_get(conf, "endian");
    if (!e || json_is_null(e)) {
        *big_endian = 0;
        return 0;
    }
    const char *s = json_string_value(e);
    if (!s || (strcmp(s, "little") && strcmp(s, "big")))
        return -1;
    *big_endian = strcmp(s, "big") == 0;
    return 0;
}

static int parse_sharding(const json_t *conf, zarr_array *a, const char *what,
                          cellar_error *err);

/* Parses a v3 codec list into c.  allow_shard: the outer list of an array
 * (a nested sharding_indexed is not supported). */
static int parse_v3_chain(const json_t *codecs, zarr_array *a, zarr_chain *c, int allow_shard,
                          const char *what, cellar_error *err)
{
    memset(c, 0, sizeof *c);
    if (!json_is_array(codecs) || json_array_size(codecs) == 0)
        return cellar_fail(err, CELLAR_EFORMAT, "%s: codecs is not a non-empty list", what);
    for (size_t i = 0; i < json_array_size(codecs); i++) {
        const json_t *cj = json_array_get(codecs, i);
        const char *name = codec_name(cj);
        const json_t *conf = json_object_get(cj, "configuration");
        if (!name)
            return cellar_fail(err, CELLAR_EFORMAT, "%s: codec %zu has no name", what, i);
        if (strcmp(name, "transpose") == 0) {
            int p[NODE_MAX_DIMS];
            if (c->a2b)
                return cellar_fail(err, CELLAR_EFORMAT, "%s: transpose after the array->bytes "
                                   "codec", what);
            if (parse_transpose(conf, a->ndim, p))
                return cellar_fail(err, CELLAR_EFORMAT, "%s: transpose order is invalid", what);
            if (!c->has_perm) {
                memcpy(c->perm, p, sizeof p);
                c->has_perm = 1;
            } else {
                codec_transpose_compose(a->ndim, c->perm, p, c->perm);
            }
            continue;
        }
        int is_a2b = strcmp(name, "bytes") == 0 || strcmp(name, "endian") == 0 ||
                     is_vlen_name(name) || strcmp(name, "sharding_indexed") == 0;
        if (is_a2b) {
            if (c->a2b)
                return cellar_fail(err, CELLAR_EFORMAT, "%s: two array->bytes codecs", what);
            if (strcmp(name, "sharding_indexed") == 0) {
                if (!allow_shard) {
                    set_unsupported3(a, "nested sharding is not supported", NULL, "");
                    c->a2b = ZA_BYTES;
                    continue;
                }
                if (c->has_perm || i + 1 != json_array_size(codecs)) {
                    set_unsupported3(a, "codecs around sharding_indexed are not supported",
                                     NULL, "");
                    c->a2b = ZA_SHARD;
                    continue;
                }
                c->a2b = ZA_SHARD;
                int rc = parse_sharding(conf, a, what, err);
                if (rc)
                    return rc;
            } else if (is_vlen_name(name)) {
                c->a2b = ZA_VLEN;
                if (a->kind != ZK_VLEN_UTF8 && a->kind != ZK_VLEN_BYTES)
                    set_unsupported3(a, "codec '", name, "' needs a variable-length data_type");
            } else {
                c->a2b = ZA_BYTES;
                if (parse_endian(conf, &c->big_endian))
                    return cellar_fail(err, CELLAR_EFORMAT, "%s: bytes codec endian is invalid",
                                       what);
                if (a->kind == ZK_VLEN_UTF8 || a->kind == ZK_VLEN_BYTES)
                    set_unsupported3(a, "codec '", name, "' cannot encode variable-length strings");
            }
            continue;
        }
        codec_id id = codec_from_name(name);
        if (!id) {
            set_unsupported3(a, "codec '", name, "' is not supported");
            continue;
        }
        if (!c->a2b)
            return cellar_fail(err, CELLAR_EFORMAT, "%s: codec '%s' before the array->bytes "
                               "codec", what, name);
        if (c->nb2b == ZARR_MAX_CODECS)
            return cellar_fail(err, CELLAR_EFORMAT, "%s: too many codecs", what);
        c->b2b[c->nb2b++] = id;
    }
    if (!c->a2b)
        return cellar_fail(err, CELLAR_EFORMAT, "%s: no array->bytes codec", what);
    if (c->a2b == ZA_SHARD && c->nb2b)
        set_unsupported3(a, "codecs after sharding_indexed are not supported", NULL, "");
    return 0;
}

static int parse_sharding(const json_t *conf, zarr_array *a, const char *what,
                          cellar_error *err)
{
    int nd = 0;
    int rc = parse_dims(json_object_get(conf, "chunk_shape"), a->inner, &nd, 1,
                        "sharding chunk_shape", what, err);
    if (rc)
        return rc;
    if (nd != a->ndim)
        return cellar_fail(err, CELLAR_EFORMAT, "%s: inner chunk_shape has %d dimensions, not %d",
                           what, nd, a->ndim);
    uint64_t nchunks = 1;
    for (int d = 0; d < a->ndim; d++) {
        if (a->chunk[d] % a->inner[d])
            return cellar_fail(err, CELLAR_EFORMAT,
                               "%s: inner chunks do not divide the shard shape", what);
        nchunks *= (uint64_t)(a->chunk[d] / a->inner[d]);
        if (nchunks > ((uint64_t)1 << 20))
            return cellar_fail(err, CELLAR_EFORMAT, "%s: too many inner chunks per shard", what);
    }
    a->sharded = 1;
    rc = parse_v3_chain(json_object_get(conf, "codecs"), a, &a->inner_chain, 0, what, err);
    if (rc)
        return rc;
    const json_t *ic = json_object_get(conf, "index_codecs");
    a->index_big_endian = 0;
    a->index_crc = 0;
    if (ic) {
        size_t n = json_array_size(ic);
        const char *first = n ? codec_name(json_array_get(ic, 0)) : NULL;
        if (!first || strcmp(first, "bytes") ||
            parse_endian(json_object_get(json_array_get(ic, 0), "configuration"),
                         &a->index_big_endian))
            return cellar_fail(err, CELLAR_EFORMAT, "%s: index_codecs must start with bytes",
                               what);
        if (n == 2) {
            const char *second = codec_name(json_array_get(ic, 1));
            if (!second || strcmp(second, "crc32c"))
                set_unsupported3(a, "index codec '", second, "' is not supported");
            a->index_crc = 1;
        } else if (n > 2) {
            set_unsupported3(a, "index_codecs other than bytes and crc32c are not supported",
                             NULL, "");
        }
    }
    const char *loc = json_string_value(json_object_get(conf, "index_location"));
    if (loc && strcmp(loc, "start") && strcmp(loc, "end"))
        return cellar_fail(err, CELLAR_EFORMAT, "%s: index_location must be start or end", what);
    a->index_at_start = loc && strcmp(loc, "start") == 0;
    return 0;
}

static int parse_key_encoding(const json_t *k, zarr_array *a, const char *what,
                              cellar_error *err)
{
    const char *name = json_string_value(json_object_get(k, "name"));
    if (!name)
        name = json_string_value(k);
    if (!name || (strcmp(name, "default") && strcmp(name, "v2")))
        return cellar_fail(err, CELLAR_EFORMAT, "%s: chunk_key_encoding is not default or v2",
                           what);
    a->v2_keys = strcmp(name, "v2") == 0;
    a->sep = a->v2_keys ? '.' : '/';
    const json_t *sep = json_object_get(json_object_get(k, "configuration"), "separator");
    if (sep) {
        const char *s = json_string_value(sep);
        if (!s || (strcmp(s, ".") && strcmp(s, "/")))
            return cellar_fail(err, CELLAR_EFORMAT, "%s: chunk key separator must be '.' or '/'",
                               what);
        a->sep = s[0];
    }
    return 0;
}

int zarr_array_parse_v3(const json_t *doc, zarr_array *a, const char *what, cellar_error *err)
{
    memset(a, 0, sizeof *a);
    int rc = 0, nd = 0;
    if (!json_is_object(doc) || json_integer_value(json_object_get(doc, "zarr_format")) != 3) {
        rc = cellar_fail(err, CELLAR_EFORMAT, "%s: zarr.json is not a zarr_format 3 document",
                         what);
        goto done;
    }
    const char *nt = json_string_value(json_object_get(doc, "node_type"));
    if (!nt || strcmp(nt, "array")) {
        rc = cellar_fail(err, CELLAR_EFORMAT, "%s: zarr.json is not an array", what);
        goto done;
    }
    rc = parse_dims(json_object_get(doc, "shape"), a->shape, &a->ndim, 0, "shape", what, err);
    if (rc)
        goto done;
    const json_t *grid = json_object_get(doc, "chunk_grid");
    const char *gname = json_string_value(json_object_get(grid, "name"));
    if (!gname || strcmp(gname, "regular")) {
        rc = cellar_fail(err, CELLAR_EFORMAT, "%s: only the regular chunk grid is supported",
                         what);
        goto done;
    }
    rc = parse_dims(json_object_get(json_object_get(grid, "configuration"), "chunk_shape"),
                    a->chunk, &nd, 1, "chunk_shape", what, err);
    if (rc)
        goto done;
    if (nd != a->ndim) {
        rc = cellar_fail(err, CELLAR_EFORMAT, "%s: chunk_shape and shape differ in length", what);
        goto done;
    }
    rc = parse_key_encoding(json_object_get(doc, "chunk_key_encoding"), a, what, err);
    if (rc)
        goto done;
    parse_v3_dtype(json_object_get(doc, "data_type"), a);
    rc = parse_v3_chain(json_object_get(doc, "codecs"), a, &a->chain, 1, what, err);
    if (rc)
        goto done;
    rc = chunk_elems(a->sharded ? a->inner : a->chunk, a->ndim, a->itemsize, what, err);
    if (rc)
        goto done;
    const json_t *st = json_object_get(doc, "storage_transformers");
    if (st && json_array_size(st) > 0)
        set_unsupported3(a, "storage transformers are not supported", NULL, "");
    rc = parse_fill(json_object_get(doc, "fill_value"), a, what, err);
done:
    if (rc)
        zarr_array_clear(a);
    return rc;
}
