/* Values and types as h5grove encodes them (api/h5grove/grove.h). */
#include "api/h5grove/grove.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "api/encode/npy_out.h"
#include "common/numfmt.h"

/* ------------------------------------------------------------- numbers */

/* orjson's text of the decimal digits[0..nd) (no leading or trailing
 * zeros but a lone "0") times 10^(e - nd + 1), '-' first when neg:
 * positional for decimal exponents e in [lo, hi), else d[.ddd]e[+-]x. */
static size_t orjson_digits(int neg, const char *digits, size_t nd, int e, int lo, int hi,
                            char *out)
{
    size_t o = 0;
    if (neg)
        out[o++] = '-';
    if (e >= lo && e < hi) {
        if (e >= 0) {
            for (int k = 0; k <= e; k++)
                out[o++] = (size_t)k < nd ? digits[k] : '0';
            out[o++] = '.';
            if ((size_t)e + 1 < nd)
                for (size_t k = (size_t)e + 1; k < nd; k++)
                    out[o++] = digits[k];
            else
                out[o++] = '0';
        } else {
            out[o++] = '0';
            out[o++] = '.';
            for (int k = 0; k < -e - 1; k++)
                out[o++] = '0';
            memcpy(out + o, digits, nd);
            o += nd;
        }
    } else {
        out[o++] = digits[0];
        if (nd > 1) {
            out[o++] = '.';
            memcpy(out + o, digits + 1, nd - 1);
            o += nd - 1;
        }
        o += (size_t)snprintf(out + o, 8, "e%c%d", e < 0 ? '-' : '+', e < 0 ? -e : e);
    }
    out[o] = '\0';
    return o;
}

/* Re-lays Python's repr of a float (fmt_f64/fmt_f32) as orjson writes it
 * (orjson_digits). */
static size_t orjson_layout(const char *repr, size_t n, int lo, int hi, char *out)
{
    if (!n)
        return 0;
    char digits[NUMBER_TEXT_MAX];
    size_t nd = 0, i = 0;
    int neg = repr[0] == '-', point = -1, exp10 = 0;
    if (neg)
        i++;
    for (; i < n && repr[i] != 'e'; i++) {
        if (repr[i] == '.')
            point = (int)nd;
        else
            digits[nd++] = repr[i];
    }
    if (i < n)
        exp10 = atoi(repr + i + 1);
    if (point < 0)
        point = (int)nd;
    /* strip leading zeros (0.00015 -> 15 with the point moved) */
    size_t lead = 0;
    while (lead + 1 < nd && digits[lead] == '0') {
        lead++;
        point--;
    }
    memmove(digits, digits + lead, nd - lead);
    nd -= lead;
    while (nd > 1 && digits[nd - 1] == '0')
        nd--;
    int e = point - 1 + exp10; /* value = d.ddd x 10^e */
    if (nd == 1 && digits[0] == '0')
        e = 0;
    return orjson_digits(neg, digits, nd, e, lo, hi, out);
}

size_t grove_fmt_f64(double v, char *out)
{
    char repr[NUMBER_TEXT_MAX];
    size_t n = fmt_f64(v, repr);
    return orjson_layout(repr, n, -5, 16, out);
}

size_t grove_fmt_f32(float v, char *out)
{
    uint64_t d;
    int e, prec;
    if (f32_decimal(v, &d, &e, &prec) == 0) {
        /* fmt_f32's decimal without its text: the same layout, one pass */
        char digits[24];
        size_t i = sizeof digits;
        do {
            digits[--i] = (char)('0' + d % 10);
            d /= 10;
        } while (d);
        return orjson_digits(signbit(v) != 0, digits + i, sizeof digits - i, e, -6, 13, out);
    }
    char repr[NUMBER_TEXT_MAX];
    size_t n = fmt_f32(v, repr);
    return orjson_layout(repr, n, -6, 13, out);
}

/* ------------------------------------------------------------ raw reads */

static uint64_t load_uint(const unsigned char *p, size_t size, int big_endian)
{
    uint64_t v = 0;
    for (size_t i = 0; i < size && i < 8; i++)
        v = (v << 8) | p[big_endian ? i : size - 1 - i];
    return v;
}

static int64_t load_int(const unsigned char *p, size_t size, int big_endian)
{
    uint64_t v = load_uint(p, size, big_endian);
    if (size < 8 && size > 0 && (v >> (size * 8 - 1)) & 1)
        v |= ~(uint64_t)0 << (size * 8);
    return (int64_t)v;
}

static double load_float(const unsigned char *p, size_t size, int big_endian)
{
    uint64_t bits = load_uint(p, size, big_endian);
    if (size == 2)
        return half_to_float((uint16_t)bits);
    if (size == 4) {
        uint32_t b = (uint32_t)bits;
        float f;
        memcpy(&f, &b, 4);
        return f;
    }
    double d;
    memcpy(&d, &bits, 8);
    return d;
}

/* The integer type under an enum (its values as h5py reads them). */
static const h5g_type *int_of(const h5g_type *t)
{
    return t->cls == GROVE_T_ENUM && t->base ? t->base : t;
}

double grove_number_at(const grove_values *v, uint64_t i, int *is_int, int64_t *iv,
                       int *is_unsigned)
{
    const h5g_type *t = int_of(v->type);
    const unsigned char *p = v->data + i * v->type->mem_size;
    *is_unsigned = 0;
    if (v->type->is_bool) {
        *is_int = 1;
        *iv = p[0] != 0;
        return (double)*iv;
    }
    if (t->cls == GROVE_T_INTEGER) {
        *is_int = 1;
        if (!t->sign) {
            uint64_t u = load_uint(p, t->size, t->order);
            *is_unsigned = 1;
            *iv = (int64_t)u;
            return (double)u;
        }
        *iv = load_int(p, t->size, t->order);
        return (double)*iv;
    }
    *is_int = 0;
    return load_float(p, t->size, t->order);
}

/* --------------------------------------------------------------- dtypes */

int grove_is_numeric(const h5g_type *t)
{
    switch (t->cls) {
    case GROVE_T_INTEGER:
    case GROVE_T_FLOAT:
        return 1;
    case GROVE_T_ENUM:
        return t->is_bool || (t->base && t->base->cls == GROVE_T_INTEGER);
    case GROVE_T_COMPOUND:
        return t->is_complex;
    default:
        return 0;
    }
}

static char order_char(const h5g_type *t)
{
    return t->size == 1 ? '|' : t->order ? '>' : '<';
}

const char *grove_dtype_str(const h5g_type *t, arena *a)
{
    switch (t->cls) {
    case GROVE_T_INTEGER:
        return arena_printf(a, "%c%c%zu", order_char(t), t->sign ? 'i' : 'u', t->size);
    case GROVE_T_FLOAT:
        return arena_printf(a, "%c%c%zu", order_char(t), 'f', t->size);
    case GROVE_T_BITFIELD:
        return arena_printf(a, "%c%c%zu", order_char(t), 'u', t->size);
    case GROVE_T_STRING:
        return t->vlen_str ? "|O" : arena_printf(a, "|S%zu", t->size);
    case GROVE_T_OPAQUE:
    case GROVE_T_ARRAY:
        return arena_printf(a, "|V%zu", t->size);
    case GROVE_T_REFERENCE:
    case GROVE_T_VLEN:
        return "|O";
    case GROVE_T_ENUM:
        return t->is_bool ? "|b1" : t->base ? grove_dtype_str(t->base, a) : NULL;
    case GROVE_T_COMPOUND:
        if (t->is_complex)
            return arena_printf(a, "%c%c%zu", t->members[0].type->order ? '>' : '<', 'c',
                                t->size);
        return NULL;
    default:
        return NULL;
    }
}

/* The "dtype" of get_type_metadata: stringify_dtype (a dict of members
 * for a compound that is not complex). */
static json_t *dtype_json(const h5g_type *t, arena *a)
{
    if (t->cls == GROVE_T_COMPOUND && !t->is_complex) {
        json_t *o = json_object();
        for (size_t i = 0; o && i < t->n_members; i++) {
            json_t *m = dtype_json(t->members[i].type, a);
            if (!m || json_object_set_new(o, t->members[i].name, m)) {
                json_decref(o);
                return NULL;
            }
        }
        return o;
    }
    const char *s = grove_dtype_str(t, a);
    return s ? json_string(s) : NULL;
}

static int set_int(json_t *o, const char *k, json_int_t v)
{
    return json_object_set_new(o, k, json_integer(v));
}

json_t *grove_type_meta(const h5g_type *t, arena *a, cellar_error *err)
{
    json_t *o = json_object(), *dt = dtype_json(t, a);
    if (!o || !dt) {
        json_decref(o);
        json_decref(dt);
        cellar_fail(err, CELLAR_EFORMAT, "h5py has no numpy dtype for this type (class %d)",
                    t->cls);
        return NULL;
    }
    int bad = set_int(o, "class", t->cls) || json_object_set_new(o, "dtype", dt) ||
              set_int(o, "size", (json_int_t)t->size);
    switch (t->cls) {
    case GROVE_T_INTEGER:
        bad |= set_int(o, "order", t->order) || set_int(o, "sign", t->sign);
        break;
    case GROVE_T_FLOAT:
    case GROVE_T_BITFIELD:
        bad |= set_int(o, "order", t->order);
        break;
    case GROVE_T_STRING:
        bad |= set_int(o, "cset", t->cset) || set_int(o, "strpad", t->strpad) ||
               json_object_set_new(o, "vlen", json_boolean(t->vlen_str));
        break;
    case GROVE_T_OPAQUE:
        bad |= json_object_set_new(o, "tag", json_str_sanitized(t->tag ? t->tag : ""));
        break;
    case GROVE_T_COMPOUND: {
        json_t *members = json_array();
        bad |= !members || json_object_set_new(o, "members", members);
        for (size_t i = 0; !bad && i < t->n_members; i++) {
            json_t *m = grove_type_meta(t->members[i].type, a, err);
            json_t *named = json_object();
            bad |= !m || !named ||
                   json_object_set_new(named, "name", json_str_sanitized(t->members[i].name)) ||
                   json_object_update(named, m) || json_array_append_new(members, named);
            json_decref(m);
            if (bad && named && !m)
                json_decref(named);
        }
        break;
    }
    case GROVE_T_ENUM: {
        json_t *members = json_object();
        bad |= !members || json_object_set_new(o, "members", members);
        for (size_t i = 0; !bad && i < t->n_members; i++)
            bad |= set_int(members, t->members[i].name, (json_int_t)t->members[i].value);
        json_t *base = t->base ? grove_type_meta(t->base, a, err) : NULL;
        bad |= !base || json_object_set_new(o, "base", base);
        break;
    }
    case GROVE_T_VLEN:
    case GROVE_T_ARRAY: {
        if (t->cls == GROVE_T_ARRAY) {
            json_t *dims = json_array();
            for (int d = 0; dims && d < t->ndims; d++)
                json_array_append_new(dims, json_integer((json_int_t)t->dims[d]));
            bad |= !dims || json_object_set_new(o, "dims", dims);
        }
        json_t *base = t->base ? grove_type_meta(t->base, a, err) : NULL;
        bad |= !base || json_object_set_new(o, "base", base);
        break;
    }
    default:
        break;
    }
    if (bad) {
        json_decref(o);
        if (!err || !err->code)
            cellar_fail(err, CELLAR_ENOMEM, "out of memory");
        return NULL;
    }
    return o;
}

/* ----------------------------------------------------------------- JSON */

/* One element at p.  in_list: inside what numpy's tolist() made (a
 * compound's members), where floats are Python floats. */
static void json_element(json_out *j, const h5g_type *t, const unsigned char *p, int in_list)
{
    char text[NUMBER_TEXT_MAX];
    switch (t->cls) {
    case GROVE_T_INTEGER:
    case GROVE_T_BITFIELD:
        if (t->sign)
            json_out_int(j, load_int(p, t->size, t->order));
        else
            json_out_uint(j, load_uint(p, t->size, t->order));
        return;
    case GROVE_T_ENUM:
        if (t->is_bool)
            json_out_bool(j, p[0] != 0);
        else if (t->base)
            json_element(j, t->base, p, in_list);
        else
            json_out_null(j);
        return;
    case GROVE_T_FLOAT: {
        double d = load_float(p, t->size, t->order);
        size_t n = t->size <= 4 && !in_list ? grove_fmt_f32((float)d, text)
                                            : grove_fmt_f64(d, text);
        n ? json_out_raw(j, text, n) : json_out_null(j);
        return;
    }
    case GROVE_T_STRING:
        if (t->vlen_str) {
            const char *s;
            memcpy(&s, p, sizeof s);
            json_out_str(j, s ? s : "");
        } else {
            size_t len = t->size; /* numpy's S strips trailing NULs only */
            while (len && p[len - 1] == '\0')
                len--;
            json_out_strn(j, (const char *)p, len);
        }
        return;
    case GROVE_T_OPAQUE:
        json_out_strn(j, (const char *)p, t->size);
        return;
    case GROVE_T_REFERENCE: {
        int null = 1;
        for (size_t i = 0; i < t->size; i++)
            null &= p[i] == 0;
        json_out_str(j, t->ref_region ? (null ? "<HDF5 region reference (null)>"
                                              : "<HDF5 region reference>")
                                      : (null ? "<HDF5 object reference (null)>"
                                              : "<HDF5 object reference>"));
        return;
    }
    case GROVE_T_COMPOUND:
        json_out_array_open(j);
        for (size_t i = 0; i < t->n_members; i++)
            json_element(j, t->members[i].type, p + t->members[i].mem_offset, 1);
        json_out_array_close(j);
        return;
    case GROVE_T_ARRAY: {
        uint64_t n = 1;
        for (int d = 0; d < t->ndims; d++)
            n *= t->dims[d];
        json_out_array_open(j);
        for (uint64_t i = 0; t->base && i < n; i++)
            json_element(j, t->base, p + i * t->base->mem_size, in_list);
        json_out_array_close(j);
        return;
    }
    default:
        json_out_null(j);
        return;
    }
}

/* The innermost list of a native float32 array: n floats from p, in one
 * loop without json_element's dispatch. */
static void json_f32_row(json_out *j, const unsigned char *p, int64_t n)
{
    char text[NUMBER_TEXT_MAX];
    json_out_array_open(j);
    for (int64_t i = 0; i < n && json_out_ok(j); i++) {
        float f;
        memcpy(&f, p + (size_t)i * sizeof f, sizeof f);
        size_t len = grove_fmt_f32(f, text);
        len ? json_out_raw(j, text, len) : json_out_null(j);
    }
    json_out_array_close(j);
}

/* Nested arrays over shape[d..], elements from *pos on. */
static void json_nested(json_out *j, const grove_values *v, int d, uint64_t *pos)
{
    if (d == v->ndim) {
        json_element(j, v->type, v->data + (*pos)++ * v->type->mem_size, 0);
        return;
    }
    const h5g_type *t = v->type;
    if (d == v->ndim - 1 && t->cls == GROVE_T_FLOAT && t->size == 4 && t->mem_size == 4 &&
        t->order == 0) {
        json_f32_row(j, v->data + *pos * 4, v->shape[d]);
        *pos += (uint64_t)v->shape[d];
        return;
    }
    json_out_array_open(j);
    for (int64_t i = 0; i < v->shape[d] && json_out_ok(j); i++)
        json_nested(j, v, d + 1, pos);
    json_out_array_close(j);
}

void grove_json_values(json_out *j, const grove_values *v)
{
    if (v->ndim < 0) {
        json_out_null(j);
        return;
    }
    uint64_t pos = 0;
    json_nested(j, v, 0, &pos);
}

/* ----------------------------------------------------------------- safe */

static void swap_bytes(unsigned char *p, size_t size)
{
    for (size_t i = 0; i < size / 2; i++) {
        unsigned char c = p[i];
        p[i] = p[size - 1 - i];
        p[size - 1 - i] = c;
    }
}

static int to_native(grove_values *v, arena *a, int widen_half, cellar_error *err);

int grove_make_safe(grove_values *v, arena *a, cellar_error *err)
{
    if (v->ndim < 0 || !grove_is_numeric(v->type))
        return cellar_fail(err, CELLAR_EFORMAT, "Unsupported dtype safe for non-numeric data");
    return to_native(v, a, 1, err);
}

int grove_make_scalar(grove_values *v, arena *a, cellar_error *err)
{
    const h5g_type *t = v->type;
    if (t->cls == GROVE_T_STRING && !t->vlen_str) {
        size_t len = t->size;
        while (len && v->data[len - 1] == '\0')
            len--;
        h5g_type *nt = arena_calloc(a, 1, sizeof *nt);
        if (!nt)
            return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
        *nt = *t;
        nt->size = nt->mem_size = len;
        v->type = nt;
        return 0;
    }
    return grove_is_numeric(t) ? to_native(v, a, 0, err) : 0;
}

/* Numbers in little-endian order, float16 widened to float32 when
 * widen_half (dtype=safe). */
static int to_native(grove_values *v, arena *a, int widen_half, cellar_error *err)
{
    const h5g_type *t = v->type;
    if (t->is_bool)
        return 0;
    const h5g_type *num = t->is_complex ? t->members[0].type : int_of(t);
    int half = widen_half && num->cls == GROVE_T_FLOAT && num->size == 2;
    if (!num->order && !half)
        return 0;
    size_t parts = t->is_complex ? 2 : 1;
    size_t out_size = half ? 4 : num->size;
    h5g_type *nt = arena_calloc(a, 1, sizeof *nt);
    h5g_type *nm = arena_calloc(a, 1, sizeof *nm);
    unsigned char *out = arena_alloc(a, v->count * parts * out_size + 1);
    if (!nt || !nm || !out)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
    *nm = *num;
    nm->order = 0;
    nm->size = nm->mem_size = out_size;
    for (uint64_t i = 0; i < v->count * parts; i++) {
        const unsigned char *src = v->data + i * num->size;
        unsigned char *dst = out + i * out_size;
        if (half) {
            float f = (float)load_float(src, 2, num->order);
            memcpy(dst, &f, 4);
        } else {
            memcpy(dst, src, num->size);
            swap_bytes(dst, num->size);
        }
    }
    if (t->is_complex) {
        *nt = *t;
        h5g_member *members = arena_calloc(a, 2, sizeof *members);
        if (!members)
            return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
        members[0] = t->members[0];
        members[1] = t->members[1];
        members[0].type = members[1].type = nm;
        members[1].offset = members[1].mem_offset = out_size;
        nt->members = members;
        nt->size = nt->mem_size = 2 * out_size;
        v->type = nt;
    } else {
        v->type = nm;
    }
    v->data = out;
    return 0;
}

/* -------------------------------------------------------------- formats */

int grove_encode_bin(const grove_values *v, buf *out, cellar_error *err)
{
    const h5g_type *t = v->type;
    if (v->ndim < 0)
        return cellar_fail(err, CELLAR_EFORMAT,
                           "an empty dataset (h5py.Empty) has no bytes to send");
    if (t->mem_size != t->size || (t->cls == GROVE_T_STRING && t->vlen_str))
        return cellar_fail(err, CELLAR_EFORMAT,
                           "Unsupported encoding bin for variable-length values");
    size_t n = v->count * t->size;
    if (v->count && v->data == (const unsigned char *)out->data + out->len) {
        out->len += n; /* read into out's reserved room (api/h5grove/data.c) */
        return 0;
    }
    if (v->count && buf_append(out, v->data, n))
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
    return 0;
}

int grove_encode_npy(const grove_values *v, arena *a, buf *out, cellar_error *err)
{
    if (v->ndim < 0 || !grove_is_numeric(v->type))
        return cellar_fail(err, CELLAR_EFORMAT, "Unsupported encoding npy for non-numeric content");
    const char *descr = grove_dtype_str(v->type, a);
    if (!descr || v->ndim > 8 || npy_header_descr(out, descr, v->shape, v->ndim))
        return cellar_fail(err, CELLAR_EFORMAT, "Unsupported encoding npy for this content");
    return grove_encode_bin(v, out, err);
}

/* Python's '%.18e' % x: glibc's, but NaN and infinities as Python
 * writes them. */
static int put_e18(buf *out, double d)
{
    if (isnan(d))
        return buf_puts(out, "nan");
    if (isinf(d))
        return buf_puts(out, d < 0 ? "-inf" : "inf");
    return buf_printf(out, "%.18e", d);
}

int grove_encode_csv(const grove_values *v, buf *out, cellar_error *err)
{
    if (v->ndim < 0 || !grove_is_numeric(v->type))
        return cellar_fail(err, CELLAR_EFORMAT, "Unsupported encoding csv for non-numeric content");
    if (v->ndim == 0)
        return cellar_fail(err, CELLAR_EFORMAT,
                           "Unsupported encoding csv for empty and scalar datasets");
    if (v->ndim > 2)
        return cellar_fail(err, CELLAR_EFORMAT,
                           "Expected 1D or 2D array, got %dD array instead", v->ndim);
    int64_t rows = v->shape[0], cols = v->ndim == 2 ? v->shape[1] : 1;
    const h5g_type *t = v->type;
    int rc = 0;
    for (int64_t r = 0; r < rows && !rc; r++) {
        for (int64_t c = 0; c < cols && !rc; c++) {
            uint64_t i = (uint64_t)(r * cols + c);
            if (c && buf_putc(out, ','))
                rc = -1;
            if (t->is_complex) {
                const unsigned char *p = v->data + i * t->mem_size;
                const h5g_type *m = t->members[0].type;
                double re = load_float(p, m->size, m->order);
                double im = load_float(p + t->members[1].mem_offset, m->size, m->order);
                rc = buf_puts(out, " (") || put_e18(out, re) ||
                     (!(signbit(im) && !isnan(im)) && buf_putc(out, '+')) || put_e18(out, im) ||
                     buf_puts(out, "j)");
                continue;
            }
            int is_int = 0, is_unsigned = 0;
            int64_t iv = 0;
            double d = grove_number_at(v, i, &is_int, &iv, &is_unsigned);
            rc = put_e18(out, d);
        }
        if (!rc && buf_putc(out, '\n'))
            rc = -1;
    }
    return rc ? cellar_fail(err, CELLAR_ENOMEM, "out of memory") : 0;
}

/* ----------------------------------------------------------------- TIFF */

static void put_u16(unsigned char *p, unsigned v)
{
    p[0] = (unsigned char)(v & 0xff);
    p[1] = (unsigned char)(v >> 8);
}

static void put_u32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

/* One IFD entry: tag, type (3 SHORT, 4 LONG, 2 ASCII, 5 RATIONAL), count,
 * value or offset. */
static void tiff_entry(unsigned char *e, unsigned tag, unsigned type, uint32_t count,
                       uint32_t value)
{
    put_u16(e, tag);
    put_u16(e + 2, type);
    put_u32(e + 4, count);
    if (type == 3 && count == 1) {
        put_u16(e + 8, value);
        put_u16(e + 10, 0);
    } else {
        put_u32(e + 8, value);
    }
}

int grove_encode_tiff(const grove_values *v, buf *out, cellar_error *err)
{
    const h5g_type *t = v->type;
    if (v->ndim < 0 || !grove_is_numeric(t))
        return cellar_fail(err, CELLAR_EFORMAT,
                           "Unsupported encoding tiff for non-numeric content");
    if (v->ndim == 0)
        return cellar_fail(err, CELLAR_EFORMAT,
                           "Unsupported encoding tiff for empty and scalar datasets");
    if (v->ndim != 2 || t->is_bool || t->is_complex)
        return cellar_fail(err, CELLAR_EFORMAT,
                           "format=tiff takes a 2D array of integers or floats (this is %dD%s)",
                           v->ndim, t->is_bool ? " bool" : t->is_complex ? " complex" : "");
    const h5g_type *num = int_of(t);
    uint64_t bytes = v->count * num->size;
    if (v->shape[0] > UINT32_MAX || v->shape[1] > UINT32_MAX || bytes > UINT32_MAX - 4096)
        return cellar_fail(err, CELLAR_ETOOBIG, "the image is too large for a TIFF");
    char desc[128];
    int dn = snprintf(desc, sizeof desc, "{\"shape\": [%lld, %lld]}", (long long)v->shape[0],
                      (long long)v->shape[1]);
    static const char software[] = "tifffile.py";
    int sample_format = num->cls == GROVE_T_FLOAT ? 3 : num->sign ? 2 : 1;
    unsigned n_tags = sample_format == 1 ? 14 : 15;
    uint32_t ifd = 8, after = ifd + 2 + n_tags * 12 + 4;
    uint32_t desc_at = after, xres_at = desc_at + (uint32_t)dn + 1;
    xres_at += xres_at & 1;
    uint32_t yres_at = xres_at + 8, soft_at = yres_at + 8;
    uint32_t data_at = soft_at + (uint32_t)sizeof software;
    data_at = (data_at + 15) & ~(uint32_t)15;
    size_t total = data_at + (size_t)bytes;
    unsigned char *p = (unsigned char *)buf_reserve(out, total);
    if (!p)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
    memset(p, 0, total);
    memcpy(p, "II*\0", 4);
    put_u32(p + 4, ifd);
    put_u16(p + ifd, n_tags);
    unsigned char *e = p + ifd + 2;
    uint32_t w = (uint32_t)v->shape[1], h = (uint32_t)v->shape[0];
    tiff_entry(e, 256, 4, 1, w), e += 12;
    tiff_entry(e, 257, 4, 1, h), e += 12;
    tiff_entry(e, 258, 3, 1, (uint32_t)(num->size * 8)), e += 12;
    tiff_entry(e, 259, 3, 1, 1), e += 12;
    tiff_entry(e, 262, 3, 1, 1), e += 12;
    tiff_entry(e, 270, 2, (uint32_t)dn + 1, desc_at), e += 12;
    tiff_entry(e, 273, 4, 1, data_at), e += 12;
    tiff_entry(e, 277, 3, 1, 1), e += 12;
    tiff_entry(e, 278, 4, 1, h), e += 12;
    tiff_entry(e, 279, 4, 1, (uint32_t)bytes), e += 12;
    tiff_entry(e, 282, 5, 1, xres_at), e += 12;
    tiff_entry(e, 283, 5, 1, yres_at), e += 12;
    tiff_entry(e, 296, 3, 1, 1), e += 12;
    tiff_entry(e, 305, 2, (uint32_t)sizeof software, soft_at), e += 12;
    if (sample_format != 1)
        tiff_entry(e, 339, 3, 1, (uint32_t)sample_format), e += 12;
    put_u32(e, 0);
    memcpy(p + desc_at, desc, (size_t)dn);
    put_u32(p + xres_at, 1);
    put_u32(p + xres_at + 4, 1);
    put_u32(p + yres_at, 1);
    put_u32(p + yres_at + 4, 1);
    memcpy(p + soft_at, software, sizeof software);
    /* little-endian samples, as the header says */
    for (uint64_t i = 0; i < v->count; i++) {
        unsigned char *dst = p + data_at + i * num->size;
        memcpy(dst, v->data + i * t->mem_size, num->size);
        if (num->order)
            swap_bytes(dst, num->size);
    }
    out->len += total;
    return 0;
}
