#include "api/encode/json_out.h"

#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int typed_is_nonfinite(dtype_kind dt, const void *data, int64_t i)
{
    switch (dt) {
    case DT_FLOAT16: return !isfinite(half_to_float(((const uint16_t *)data)[i]));
    case DT_FLOAT32: return !isfinite(((const float *)data)[i]);
    case DT_FLOAT64: return !isfinite(((const double *)data)[i]);
    default: return 0;
    }
}

size_t fmt_typed(dtype_kind dt, const void *data, int64_t i, const char *true_text,
                 const char *false_text, char *out)
{
    int n = 0;
    switch (dt) {
    case DT_BOOL:
        n = snprintf(out, NUMBER_TEXT_MAX, "%s",
                     ((const uint8_t *)data)[i] ? true_text : false_text);
        break;
    case DT_INT8: return fmt_i64(((const int8_t *)data)[i], out);
    case DT_INT16: return fmt_i64(((const int16_t *)data)[i], out);
    case DT_INT32: return fmt_i64(((const int32_t *)data)[i], out);
    case DT_INT64: return fmt_i64(((const int64_t *)data)[i], out);
    case DT_UINT8: return fmt_u64(((const uint8_t *)data)[i], out);
    case DT_UINT16: return fmt_u64(((const uint16_t *)data)[i], out);
    case DT_UINT32: return fmt_u64(((const uint32_t *)data)[i], out);
    case DT_UINT64: return fmt_u64(((const uint64_t *)data)[i], out);
    case DT_FLOAT16: return fmt_f32(half_to_float(((const uint16_t *)data)[i]), out);
    case DT_FLOAT32: return fmt_f32(((const float *)data)[i], out);
    case DT_FLOAT64: return fmt_f64(((const double *)data)[i], out);
    default: out[0] = '\0'; return 0;
    }
    return n > 0 ? (size_t)n : 0;
}

/* ---- streaming writer ---- */

/* What comes next at one depth. */
enum { JS_START, JS_DONE, JS_MAP_FIRST, JS_MAP_KEY, JS_MAP_VAL, JS_ARRAY_FIRST, JS_ARRAY_NEXT };

static void emit(json_out *j, const char *s, size_t n)
{
    if (j->over || !n)
        return;
    if (j->limit && j->out->len + n > j->limit) {
        j->over = 1;
        return;
    }
    buf_append(j->out, s, n);
}

int json_out_init(json_out *j, buf *out, uint64_t limit, cellar_error *err)
{
    (void)err;
    memset(j, 0, sizeof *j);
    j->out = out;
    j->limit = limit;
    j->state[0] = JS_START;
    return 0;
}

void json_out_destroy(json_out *j)
{
    buf_destroy(&j->scratch);
}

static int ok_or_fail(json_out *j)
{
    return json_out_ok(j) ? 0 : -1;
}

/* The separator a value needs here (',' or ':', 0 for none) in *sep; key
 * says the value is a string that may stand as a map key.  0, or -1 when
 * no value may come. */
static int before_value(json_out *j, int key, char *sep)
{
    *sep = 0;
    switch (j->state[j->depth]) {
    case JS_START: return 0;
    case JS_MAP_FIRST: return key ? 0 : -1;
    case JS_MAP_KEY:
        if (!key)
            return -1;
        *sep = ',';
        return 0;
    case JS_MAP_VAL: *sep = ':'; return 0;
    case JS_ARRAY_FIRST: return 0;
    case JS_ARRAY_NEXT: *sep = ','; return 0;
    default: return -1;
    }
}

/* Room for n more bytes within the limit, or NULL (over the limit, or out
 * of memory: both recorded). Follow with commit(). */
static char *room(json_out *j, size_t n)
{
    if (j->over)
        return NULL;
    if (j->limit && j->out->len + n > j->limit) {
        j->over = 1;
        return NULL;
    }
    return buf_reserve(j->out, n);
}

static void commit(json_out *j, size_t n)
{
    j->out->len += n;
    j->out->data[j->out->len] = '\0';
}

/* The separator then text[0..n), in one append. */
static void emit_sep(json_out *j, char sep, const char *text, size_t n)
{
    char *p = room(j, n + (sep != 0));
    if (!p)
        return;
    size_t o = 0;
    if (sep)
        p[o++] = sep;
    memcpy(p + o, text, n);
    commit(j, o + n);
}

static void after_value(json_out *j)
{
    unsigned char *st = &j->state[j->depth];
    switch (*st) {
    case JS_START: *st = JS_DONE; break;
    case JS_MAP_FIRST:
    case JS_MAP_KEY: *st = JS_MAP_VAL; break;
    case JS_MAP_VAL: *st = JS_MAP_KEY; break;
    case JS_ARRAY_FIRST: *st = JS_ARRAY_NEXT; break;
    default: break;
    }
}

/* A scalar (text already JSON). */
static int scalar(json_out *j, const char *text, size_t n)
{
    char sep;
    if (before_value(j, 0, &sep)) {
        j->failed = 1;
        return -1;
    }
    emit_sep(j, sep, text, n);
    after_value(j);
    return ok_or_fail(j);
}

static int open_container(json_out *j, char c, unsigned char first)
{
    char sep;
    if (j->depth >= JSON_OUT_MAX_DEPTH || before_value(j, 0, &sep)) {
        j->failed = 1;
        return -1;
    }
    emit_sep(j, sep, &c, 1);
    j->state[++j->depth] = first;
    return ok_or_fail(j);
}

static int close_container(json_out *j, char c, unsigned char first, unsigned char next)
{
    unsigned char st = j->state[j->depth];
    if (!j->depth || (st != first && st != next)) {
        j->failed = 1;
        return -1;
    }
    j->depth--;
    emit(j, &c, 1);
    after_value(j);
    return ok_or_fail(j);
}

int json_out_map_open(json_out *j) { return open_container(j, '{', JS_MAP_FIRST); }
int json_out_map_close(json_out *j) { return close_container(j, '}', JS_MAP_FIRST, JS_MAP_KEY); }
int json_out_array_open(json_out *j) { return open_container(j, '[', JS_ARRAY_FIRST); }
int json_out_array_close(json_out *j)
{
    return close_container(j, ']', JS_ARRAY_FIRST, JS_ARRAY_NEXT);
}
int json_out_null(json_out *j) { return scalar(j, "null", 4); }
int json_out_bool(json_out *j, int v) { return v ? scalar(j, "true", 4) : scalar(j, "false", 5); }

/* The escape of byte c inside a JSON string (yajl's: the two-character
 * forms, \u00XX for other control characters), or NULL when c stands as
 * itself. */
static const char *escape_of(unsigned char c, char *hex)
{
    switch (c) {
    case '"': return "\\\"";
    case '\\': return "\\\\";
    case '\b': return "\\b";
    case '\f': return "\\f";
    case '\n': return "\\n";
    case '\r': return "\\r";
    case '\t': return "\\t";
    default:
        if (c >= 0x20)
            return NULL;
        static const char digits[] = "0123456789ABCDEF";
        memcpy(hex, "\\u00", 4);
        hex[4] = digits[c >> 4];
        hex[5] = digits[c & 15];
        hex[6] = '\0';
        return hex;
    }
}

/* s[0..n), valid UTF-8, quoted and escaped, after sep. */
static void emit_string(json_out *j, char sep, const char *s, size_t n)
{
    size_t clean = 0;
    while (clean < n && (unsigned char)s[clean] >= 0x20 && s[clean] != '"' && s[clean] != '\\')
        clean++;
    if (clean == n) { /* nothing to escape: one append */
        char *p = room(j, n + 2 + (sep != 0));
        if (!p)
            return;
        size_t o = 0;
        if (sep)
            p[o++] = sep;
        p[o++] = '"';
        memcpy(p + o, s, n);
        o += n;
        p[o++] = '"';
        commit(j, o);
        return;
    }
    char open[2] = {sep, '"'};
    emit(j, sep ? open : open + 1, sep ? 2 : 1);
    size_t run = 0;
    char hex[8];
    for (size_t i = clean; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\')
            continue;
        const char *e = escape_of(c, hex);
        emit(j, s + run, i - run);
        emit(j, e, strlen(e));
        run = i + 1;
    }
    emit(j, s + run, n - run);
    emit(j, "\"", 1);
}

static int string_value(json_out *j, const char *s, size_t n)
{
    char sep;
    if (before_value(j, 1, &sep)) {
        j->failed = 1;
        return -1;
    }
    emit_string(j, sep, s, n);
    after_value(j);
    return ok_or_fail(j);
}

int json_out_strn(json_out *j, const char *s, size_t n)
{
    if (utf8_valid(s, n))
        return string_value(j, s, n);
    j->scratch.len = 0;
    if (utf8_sanitize(s, n, &j->scratch) || j->scratch.failed) {
        j->failed = 1;
        return -1;
    }
    return string_value(j, j->scratch.data, j->scratch.len);
}

int json_out_str(json_out *j, const char *s)
{
    return s ? json_out_strn(j, s, strlen(s)) : json_out_null(j);
}

static int number(json_out *j, const char *text, size_t n)
{
    if (!n)
        return json_out_null(j);
    return scalar(j, text, n);
}

int json_out_raw(json_out *j, const char *text, size_t n)
{
    return scalar(j, text, n);
}

int json_out_int(json_out *j, int64_t v)
{
    char t[NUMBER_TEXT_MAX];
    return number(j, t, fmt_i64(v, t));
}

int json_out_uint(json_out *j, uint64_t v)
{
    char t[NUMBER_TEXT_MAX];
    return number(j, t, fmt_u64(v, t));
}

int json_out_f64(json_out *j, double v)
{
    char t[NUMBER_TEXT_MAX];
    return number(j, t, fmt_f64(v, t));
}

int json_out_f32(json_out *j, float v)
{
    char t[NUMBER_TEXT_MAX];
    return number(j, t, fmt_f32(v, t));
}

int json_out_typed(json_out *j, dtype_kind dt, const void *data, int64_t i)
{
    if (dt == DT_BOOL)
        return json_out_bool(j, ((const uint8_t *)data)[i]);
    char t[NUMBER_TEXT_MAX];
    return number(j, t, fmt_typed(dt, data, i, "true", "false", t));
}

int json_out_finish(json_out *j, const char *hint, cellar_error *err)
{
    if (j->over)
        return cellar_fail(err, CELLAR_ETOOBIG,
                           "the answer grew over the limit of %" PRIu64 " bytes%s%s", j->limit,
                           hint ? "; " : "", hint ? hint : "");
    if (j->out->failed || j->scratch.failed)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory writing JSON");
    if (j->failed)
        return cellar_fail(err, CELLAR_EINTERNAL, "JSON writer failed");
    return 0;
}

/* ---- jansson helpers ---- */

json_t *json_str_sanitized(const char *s)
{
    if (!s)
        return json_null();
    size_t n = strlen(s);
    if (utf8_valid(s, n))
        return json_stringn(s, n);
    buf tmp = {0};
    json_t *v = NULL;
    if (!utf8_sanitize(s, n, &tmp) && !tmp.failed)
        v = json_stringn(tmp.data ? tmp.data : "", tmp.len);
    buf_destroy(&tmp);
    return v;
}

static int dump_cb(const char *text, size_t size, void *data)
{
    return buf_append(data, text, size);
}

int json_dump_buf(const json_t *doc, buf *out, cellar_error *err)
{
    if (json_dump_callback(doc, dump_cb, out, JSON_COMPACT | JSON_ENCODE_ANY) != 0 ||
        out->failed)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory writing JSON");
    return 0;
}

uint64_t fmt_max_text(dtype_kind dt)
{
    switch (dt) {
    case DT_BOOL: return 6;
    case DT_INT8: case DT_UINT8: return 5;
    case DT_INT16: case DT_UINT16: return 7;
    case DT_INT32: case DT_UINT32: return 12;
    case DT_INT64: case DT_UINT64: return 21;
    case DT_FLOAT16: return 12;
    case DT_FLOAT32: return 16;
    case DT_FLOAT64: return 25;
    default: return 8;
    }
}
