#include "api/encode/json_out.h"

#include "common/dtoa.h"

#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

size_t fmt_u64(uint64_t v, char *out)
{
    char t[24];
    size_t n = 0;
    do {
        t[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    for (size_t i = 0; i < n; i++)
        out[i] = t[n - 1 - i];
    out[n] = '\0';
    return n;
}

static size_t fmt_i64(int64_t v, char *out)
{
    if (v >= 0)
        return fmt_u64((uint64_t)v, out);
    out[0] = '-';
    return 1 + fmt_u64((uint64_t)0 - (uint64_t)v, out + 1);
}

/* Appends ".0" to an integral-looking number, as Python's repr does, so a
 * float column stays recognisably float in JSON and CSV. */
static size_t add_point(char *out, size_t n)
{
    if (strpbrk(out, ".eEnN"))
        return n;
    out[n++] = '.';
    out[n++] = '0';
    out[n] = '\0';
    return n;
}

_Static_assert(NUMBER_TEXT_MAX >= DTOA_TEXT_MAX, "fmt_f64 writes dtoa_shortest's text");

/* Ryu's digits in the layout the printf loop gave (see common/dtoa.h). */
size_t fmt_f64(double v, char *out)
{
    return dtoa_shortest(v, out);
}

/* The first precision from 6 (1 for subnormals) to 9 whose %g text reads
 * back through strtof (a float that reads back from p significant digits
 * reads back from any more, so the first is the shortest): the reference
 * fmt_f32 falls back to. */
static size_t fmt_f32_slow(float v, char *out)
{
    int n = 0;
    for (int p = fabsf(v) < FLT_MIN ? 1 : 6; p <= 9; p++) {
        n = snprintf(out, NUMBER_TEXT_MAX - 2, "%.*g", p, (double)v);
        if (p == 9 || strtof(out, NULL) == v)
            break;
    }
    return add_point(out, (size_t)n);
}

static const double pow10_exact[23] = {
    1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
    1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

/* a * 10^n in one correctly rounded double operation (|n| <= 22: the power
 * is exact). */
static double scale10(double a, int n)
{
    return n >= 0 ? a * pow10_exact[n] : a / pow10_exact[-n];
}

/* The nearest p-digit decimal to a (a positive normal float32, exact in a
 * double), as *d in [10^(p-1), 10^p) times 10^(*k - p + 1) (so *k is the
 * decimal exponent %g reports).  a * 10^n in double has a relative error
 * under 2^-52, so the rounding is decided exactly unless the scaled value
 * lies within 1e-6 of a half (an exact tie or too close to call): then
 * returns -1 and the caller asks snprintf. */
static int f32_round(double a, int p, int *k, uint64_t *d, int *side)
{
    for (int tries = 0; tries < 4; tries++) {
        int n = p - 1 - *k;
        if (n > 22 || n < -22)
            return -1;
        double scaled = scale10(a, n);
        double whole = (double)(uint64_t)scaled, frac = scaled - whole; /* 0 < scaled < 2^40 */
        if (fabs(frac - 0.5) < 1e-6)
            return -1;
        if (scaled < pow10_exact[p - 1]) {
            (*k)--;
            continue;
        }
        uint64_t r = (uint64_t)whole + (frac > 0.5);
        if (r >= (uint64_t)pow10_exact[p]) {
            (*k)++; /* a carry (9.999995 -> 10.0000) or k one too small */
            continue;
        }
        *d = r;
        /* where the exact value lies from r: above (1), below (-1), on it
         * (2: a * 10^n is exact for 0 <= n <= 12, 24 bits times 5^n fitting
         * in 53), or too close to tell (0) */
        double diff = frac > 0.5 ? frac - 1.0 : frac;
        *side = diff > 1e-6 ? 1 : diff < -1e-6 ? -1 : 0;
        if (frac == 0.0 && n >= 0 && n <= 12)
            *side = 2;
        return 0;
    }
    return -1;
}

/* Whether the decimal d * 10^(k - p + 1) reads back (as strtof would: one
 * correct rounding to float) as a; -1 when the double in between sits
 * exactly halfway between two floats, where rounding twice could differ. */
static int f32_reads_back(double a, uint64_t d, int p, int k)
{
    int n = p - 1 - k;
    if (n > 22 || n < -22)
        return -1;
    double x = scale10((double)d, -n); /* d < 2^53: exact; one rounding */
    float f = (float)x;
    if ((double)f != x) {
        float g = nextafterf(f, x > (double)f ? INFINITY : 0.0f);
        if ((double)f + (double)g == 2.0 * x)
            return -1;
    }
    return (double)f == a;
}

/* d9 rounded to fewer digits (div = 10^(9 - p)) into *d; -1 when only
 * snprintf can tell (see fmt_f32). */
static inline int round_from9(uint64_t d9, int side, uint64_t div, uint64_t *d)
{
    uint64_t half = div / 2, q = d9 / div, rem = d9 % div;
    if (rem == half && !side)
        return -1;
    if (rem == half && side == 2)
        q += q & 1; /* an exact tie: to even, as printf rounds */
    else
        q += rem > half || (rem == half && side > 0);
    *d = q;
    return 0;
}

/* The same text as fmt_f32_slow (the first precision from 6 up whose
 * nearest decimal reads back), computed from the 9-digit rounding with a
 * few double operations instead of snprintf and strtof; the rare cases the double
 * arithmetic cannot decide (ties, near-ties, subnormals, far exponents) go
 * to fmt_f32_slow. */
size_t fmt_f32(float v, char *out)
{
    if (!isfinite(v)) {
        out[0] = '\0';
        return 0;
    }
    if (v == 0.0f) {
        strcpy(out, signbit(v) ? "-0.0" : "0.0");
        return strlen(out);
    }
    double a = fabs((double)v);
    if (a < FLT_MIN)
        return fmt_f32_slow(v, out);
    uint32_t bits;
    memcpy(&bits, &v, sizeof bits);
    int e2 = (int)((bits >> 23) & 0xff) - 127; /* a in [2^e2, 2^(e2+1)) */
    int k9 = (int)floor(e2 * 0.30102999566398120); /* log10(2): within one */
    uint64_t d9;
    int side;
    if (f32_round(a, 9, &k9, &d9, &side))
        return fmt_f32_slow(v, out);
    /* Shorter roundings from the 9-digit one: the exact value x lies within
     * 0.5 of d9 and the rounding boundary is an integer, so the dropped
     * digits decide, unless they are exactly half: then the side of d9 x
     * lies on decides (x == d9: a tie, to even), and snprintf when that is
     * too close to tell. */
    for (int p = 6; p <= 8; p++) {
        uint64_t d;
        /* constant divisors: multiplications, not divisions */
        int r = p == 6 ? round_from9(d9, side, 1000, &d)
                : p == 7 ? round_from9(d9, side, 100, &d)
                         : round_from9(d9, side, 10, &d);
        if (r)
            return fmt_f32_slow(v, out);
        int k = k9;
        if (d == (uint64_t)pow10_exact[p]) { /* carried to the next power of ten */
            d /= 10;
            k++;
        }
        int ok = f32_reads_back(a, d, p, k);
        if (ok < 0)
            return fmt_f32_slow(v, out);
        if (ok)
            return dtoa_layout(signbit(v) != 0, d, k, p, out);
    }
    return dtoa_layout(signbit(v) != 0, d9, k9, 9, out);
}

float half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h >> 15) << 31;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t mant = h & 0x3ff;
    uint32_t bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (mant << 13);
    } else if (exp != 0) {
        bits = sign | ((exp + 112) << 23) | (mant << 13);
    } else if (mant == 0) {
        bits = sign;
    } else {
        /* Subnormal half: normalise into a float. */
        int e = -1;
        do {
            e++;
            mant <<= 1;
        } while (!(mant & 0x400));
        bits = sign | ((uint32_t)(112 - e) << 23) | ((mant & 0x3ff) << 13);
    }
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

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

/* Length of the valid UTF-8 sequence at s (RFC 3629: no overlongs, no
 * surrogates, nothing above U+10FFFF), or 0 when invalid. */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    if (c < 0x80)
        return 1;
    size_t len;
    unsigned lo = 0x80, hi = 0xbf;
    if (c >= 0xc2 && c <= 0xdf) {
        len = 2;
    } else if (c >= 0xe0 && c <= 0xef) {
        len = 3;
        if (c == 0xe0)
            lo = 0xa0;
        else if (c == 0xed)
            hi = 0x9f;
    } else if (c >= 0xf0 && c <= 0xf4) {
        len = 4;
        if (c == 0xf0)
            lo = 0x90;
        else if (c == 0xf4)
            hi = 0x8f;
    } else {
        return 0;
    }
    if (n < len || s[1] < lo || s[1] > hi)
        return 0;
    for (size_t k = 2; k < len; k++)
        if (s[k] < 0x80 || s[k] > 0xbf)
            return 0;
    return len;
}

int utf8_valid(const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        size_t l = utf8_seq(p + i, n - i);
        if (!l)
            return 0;
        i += l;
    }
    return 1;
}

/* How many bytes an invalid sequence at s spans: its lead byte and the
 * continuation bytes that still fitted, so that each maximal invalid
 * subpart becomes one U+FFFD (Unicode's recommended practice, as Python's
 * "replace" does). */
static size_t utf8_bad_len(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    size_t len;
    unsigned lo = 0x80, hi = 0xbf;
    if (c >= 0xc2 && c <= 0xdf)
        len = 2;
    else if (c >= 0xe0 && c <= 0xef)
        len = 3, lo = c == 0xe0 ? 0xa0 : 0x80, hi = c == 0xed ? 0x9f : 0xbf;
    else if (c >= 0xf0 && c <= 0xf4)
        len = 4, lo = c == 0xf0 ? 0x90 : 0x80, hi = c == 0xf4 ? 0x8f : 0xbf;
    else
        return 1;
    size_t k = 1;
    if (k < n && k < len && s[k] >= lo && s[k] <= hi) {
        k++;
        while (k < n && k < len && s[k] >= 0x80 && s[k] <= 0xbf)
            k++;
    }
    return k;
}

int utf8_sanitize(const char *s, size_t n, buf *out)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0, run = 0;
    while (i < n) {
        size_t l = utf8_seq(p + i, n - i);
        if (l) {
            i += l;
            continue;
        }
        if (buf_append(out, s + run, i - run) || buf_append(out, "\xef\xbf\xbd", 3))
            return -1;
        i += utf8_bad_len(p + i, n - i);
        run = i;
    }
    return buf_append(out, s + run, n - run);
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
