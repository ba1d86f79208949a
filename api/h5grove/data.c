/* /h5grove/data/ and /h5grove/stats/: h5grove's selection syntax over h5py's
 * indexing, the read (plain numeric datasets through the node backend's
 * direct reads, everything else through h5g_read), and the statistics as
 * numpy computes them (api/h5grove/routes.h). */
#include "api/h5grove/routes.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "api/h5grove/grove.h"
#include "common/numfmt.h"

/* ------------------------------------------------------------ selection */

/* One member of h5grove's selection (parse_slice_member). */
typedef struct sel_member {
    int is_index;
    int64_t index;
    int has_start, has_stop, has_step;
    int64_t start, stop, step;
} sel_member;

/* Python's int() of text: blanks around, a sign, digits ('_' between). */
static int py_int(const char *s, size_t n, int64_t *out)
{
    while (n && isspace((unsigned char)*s))
        s++, n--;
    while (n && isspace((unsigned char)s[n - 1]))
        n--;
    char digits[32];
    size_t nd = 0, i = 0;
    if (n && (s[0] == '+' || s[0] == '-'))
        digits[nd++] = s[i++];
    int prev_digit = 0, any = 0;
    for (; i < n; i++) {
        if (s[i] == '_' && prev_digit && i + 1 < n && isdigit((unsigned char)s[i + 1])) {
            prev_digit = 0;
            continue;
        }
        if (!isdigit((unsigned char)s[i]) || nd + 1 >= sizeof digits)
            return -1;
        digits[nd++] = s[i];
        prev_digit = any = 1;
    }
    if (!any)
        return -1;
    digits[nd] = '\0';
    errno = 0;
    char *end = NULL;
    long long v = strtoll(digits, &end, 10);
    if (errno || *end)
        return -1;
    *out = v;
    return 0;
}

static int parse_member(const char *s, size_t n, sel_member *m, cellar_error *err)
{
    memset(m, 0, sizeof *m);
    const char *parts[4];
    size_t lens[4], np = 0;
    const char *p = s, *end = s + n;
    for (;;) {
        const char *c = memchr(p, ':', (size_t)(end - p));
        if (np == 4)
            break;
        parts[np] = p;
        lens[np++] = c ? (size_t)(c - p) : (size_t)(end - p);
        if (!c)
            break;
        p = c + 1;
    }
    if (np == 1) {
        m->is_index = 1;
        if (py_int(s, n, &m->index))
            return cellar_fail(err, CELLAR_EFORMAT, "invalid literal for int() with base 10: '%.*s'",
                               (int)n, s);
        return 0;
    }
    if (np > 3)
        return cellar_fail(err, CELLAR_EFORMAT, "%.*s is not a valid slice", (int)n, s);
    int64_t *vals[3] = {&m->start, &m->stop, &m->step};
    int *has[3] = {&m->has_start, &m->has_stop, &m->has_step};
    for (size_t k = 0; k < np; k++) {
        if (lens[k] == 0)
            continue;
        if (py_int(parts[k], lens[k], vals[k]))
            return cellar_fail(err, CELLAR_EFORMAT,
                               "invalid literal for int() with base 10: '%.*s'", (int)lens[k],
                               parts[k]);
        *has[k] = 1;
    }
    if (np == 2 && !m->has_start) { /* "start:stop" with start "" is 0 */
        m->has_start = 1;
        m->start = 0;
    }
    return 0;
}

/* What a selection reads: per dataset dimension start/step/count, and
 * which dimensions stay in the answer (not indexed by an integer). */
typedef struct sel_plan {
    int ndim;
    int64_t start[GROVE_MAX_DIMS], step[GROVE_MAX_DIMS], count[GROVE_MAX_DIMS];
    int kept[GROVE_MAX_DIMS];
} sel_plan;

/* Python's slice.indices(len) count for step > 0. */
static void slice_bounds(const sel_member *m, int64_t len, int64_t *start, int64_t *count)
{
    int64_t step = m->has_step ? m->step : 1;
    int64_t s = m->has_start ? m->start : 0, e = m->has_stop ? m->stop : len;
    if (s < 0)
        s = s + len < 0 ? 0 : s + len;
    else if (s > len)
        s = len;
    if (e < 0)
        e = e + len < 0 ? 0 : e + len;
    else if (e > len)
        e = len;
    *start = s;
    *count = e > s ? (e - s + step - 1) / step : 0;
}

static int plan_selection(const char *text, int ndim, const int64_t *shape, arena *a,
                          sel_plan *p, cellar_error *err)
{
    memset(p, 0, sizeof *p);
    p->ndim = ndim;
    for (int d = 0; d < ndim; d++) {
        p->step[d] = 1;
        p->count[d] = shape[d];
        p->kept[d] = 1;
    }
    if (!text)
        return 0;
    if (ndim < 0)
        return cellar_fail(err, CELLAR_EFORMAT, "an empty dataset (h5py.Empty) cannot be sliced");
    size_t n = strlen(text), members = 1;
    for (size_t i = 0; i < n; i++)
        members += text[i] == ',';
    if (members > (size_t)ndim)
        return cellar_fail(err, CELLAR_EFORMAT,
                           "%s has too many members to slice a %dD dataset", text, ndim);
    (void)a;
    const char *s = text;
    for (int d = 0; d < (int)members; d++) {
        const char *c = strchr(s, ',');
        size_t len = c ? (size_t)(c - s) : strlen(s);
        sel_member m;
        int rc = parse_member(s, len, &m, err);
        if (rc)
            return rc;
        if (m.is_index) {
            int64_t i = m.index < 0 ? m.index + shape[d] : m.index;
            if (i < 0 || i >= shape[d])
                return cellar_fail(err, CELLAR_EFORMAT, "Index (%lld) out of range for (0-%lld)",
                                   (long long)m.index, (long long)shape[d] - 1);
            p->start[d] = i;
            p->count[d] = 1;
            p->kept[d] = 0;
        } else {
            if (m.has_step && m.step < 1)
                return cellar_fail(err, CELLAR_EFORMAT, "Step must be >= 1 (got %lld)",
                                   (long long)m.step);
            p->step[d] = m.has_step ? m.step : 1;
            slice_bounds(&m, shape[d], &p->start[d], &p->count[d]);
        }
        s = c ? c + 1 : s + len;
    }
    return 0;
}

/* ----------------------------------------------------------------- read */

/* The h5g_type of a node array of dtype k (stored little-endian). */
static const h5g_type *grove_node_type(dtype_kind k, arena *a)
{
    h5g_type *t = arena_calloc(a, 1, sizeof *t);
    if (!t)
        return NULL;
    t->size = t->mem_size = dtype_size(k);
    if (k == DT_BOOL) {
        h5g_type *base = arena_calloc(a, 1, sizeof *base);
        if (!base)
            return NULL;
        base->cls = GROVE_T_INTEGER;
        base->size = base->mem_size = 1;
        base->sign = 1;
        t->cls = GROVE_T_ENUM;
        t->is_bool = 1;
        t->base = base;
    } else if (dtype_is_float(k)) {
        t->cls = GROVE_T_FLOAT;
    } else {
        t->cls = GROVE_T_INTEGER;
        t->sign = dtype_is_signed(k);
    }
    return t;
}

/* The values through the node backend (direct reads, no libhdf5 for
 * metadata): 1 when it took the request, 0 to go the general way. */
static int read_by_node(api_request *req, const char *path, const char *sel_text,
                        grove_values *v, buf *into, cellar_error *err, int *rc)
{
    node *n = NULL;
    cellar_error local;
    cellar_error_clear(&local);
    if (node_resolve(store_root(req->store), path, &n, &local))
        return 0;
    const node_info *in = node_get_info(n);
    if (in->type != NODE_ARRAY || in->ndim < 0 || in->stored_big_endian ||
        !dtype_is_numeric(in->dtype))
        return 0;
    /* an HDF5 dataset, not a field of a compound one (which the node
     * backend shows as an array of its own) */
    const char *slash = strrchr(path, '/');
    if (slash && slash != path) {
        char *parent_path = arena_strndup(req->arena, path, (size_t)(slash - path));
        node *parent = NULL;
        if (!parent_path || node_resolve(store_root(req->store), parent_path, &parent, &local) ||
            node_get_info(parent)->type != NODE_GROUP)
            return 0;
    }
    sel_plan p;
    *rc = plan_selection(sel_text, in->ndim, in->shape, req->arena, &p, err);
    if (*rc)
        return 1;
    const h5g_type *t = grove_node_type(in->dtype, req->arena);
    if (!t) {
        *rc = cellar_fail(err, CELLAR_ENOMEM, "out of memory");
        return 1;
    }
    v->type = t;
    v->ndim = 0;
    v->count = 1;
    dim_sel sel[NODE_MAX_DIMS];
    for (int d = 0; d < in->ndim; d++) {
        sel[d] = (dim_sel){.start = p.start[d], .step = p.step[d], .count = p.count[d]};
        if (p.kept[d])
            v->shape[v->ndim++] = p.count[d];
        v->count *= (uint64_t)p.count[d];
    }
    uint64_t bytes = v->count * t->mem_size;
    uint64_t limit = api_limit(req);
    if (limit && bytes > limit) {
        *rc = api_check_budget(req, bytes, "values", t->mem_size, err);
        return 1;
    }
    unsigned char *data = into ? (unsigned char *)buf_reserve(into, bytes ? bytes : 1)
                               : arena_alloc(req->arena, bytes ? bytes : 1);
    if (!data) {
        *rc = cellar_fail(err, CELLAR_ENOMEM, "out of memory");
        return 1;
    }
    v->data = data;
    *rc = v->count ? node_read(n, in->ndim ? sel : NULL, data, bytes, err) : 0;
    return 1;
}

/* The values of the dataset at path, as h5py's dataset[selection].  into:
 * when not NULL, values the node backend reads go into its reserved room
 * (grove_encode_bin then only counts them in), else into the arena. */
static int read_values(api_request *req, const char *path, h5g_links links,
                       const char *sel_text, grove_values *v, buf *into, cellar_error *err)
{
    memset(v, 0, sizeof *v);
    int rc = grove_open_store(req, err);
    if (rc)
        return rc;
    if (links != GROVE_LINKS_NONE && store_get_backend(req->store) == BACKEND_HDF5 &&
        read_by_node(req, path, sel_text, v, into, err, &rc))
        return rc;
    h5g_object o;
    rc = grove_open(req, path, links, &o, err);
    if (rc)
        return rc;
    h5g_type *t = NULL;
    int ndim = 0;
    int64_t shape[GROVE_MAX_DIMS];
    sel_plan p;
    if (o.kind == GROVE_EXTERNAL_LINK) {
        rc = cellar_fail(err, CELLAR_EFORMAT,
                         "%s is an external link to '%s', which cellar does not follow", path,
                         o.target_file);
    } else if (o.kind != GROVE_DATASET) {
        rc = cellar_fail(err, CELLAR_EFORMAT, "%s is not a dataset", path);
    } else if (!(rc = h5g_type_of(&o, req->arena, &t, err)) &&
               !(rc = h5g_shape(&o, &ndim, shape, err)) &&
               !(rc = plan_selection(sel_text, ndim, shape, req->arena, &p, err))) {
        v->type = t;
        v->ndim = ndim < 0 ? -1 : 0;
        v->count = ndim < 0 ? 0 : 1;
        for (int d = 0; d < ndim; d++) {
            if (p.kept[d])
                v->shape[v->ndim++] = p.count[d];
            v->count *= (uint64_t)p.count[d];
        }
        void *data = NULL;
        if (ndim >= 0)
            rc = h5g_read(&o, t, ndim, p.start, p.step, p.count, api_limit(req), req->arena,
                          &data, err);
        v->data = data;
    }
    h5g_close(&o);
    return rc;
}

/* ----------------------------------------------------------------- data */

static int flatten_param(const api_request *req)
{
    const char *f = grove_param(req, "flatten");
    return f && strcasecmp(f, "false") != 0;
}

static int set_attachment(api_request *req, api_response *res, const char *type,
                          const char *name)
{
    res->content_type = type;
    return api_add_header(req, res, "Content-Disposition",
                          arena_printf(req->arena, "attachment; filename=\"%s\"", name));
}

int api_h5grove_data(api_request *req, api_response *res, cellar_error *err)
{
    h5g_links links;
    int rc = grove_links_param(req, &links, err);
    if (rc)
        return rc;
    const char *dtype = grove_param(req, "dtype");
    const char *format = grove_param(req, "format");
    const char *path = grove_path(req);
    grove_values v;
    /* bin sends the values as read: read them where the body goes */
    buf *into = format && !strcmp(format, "bin") ? &res->body : NULL;
    rc = read_values(req, path, links, grove_param(req, "selection"), &v, into, err);
    if (rc)
        return rc;
    if (dtype && strcmp(dtype, "origin") && strcmp(dtype, "safe"))
        return cellar_fail(err, CELLAR_EFORMAT, "Unsupported dtype %s", dtype);
    if (dtype && !strcmp(dtype, "safe") && (rc = grove_make_safe(&v, req->arena, err)))
        return rc;
    if (v.ndim == 0 && (rc = grove_make_scalar(&v, req->arena, err)))
        return rc;
    if (flatten_param(req) && v.ndim > 0) {
        v.shape[0] = (int64_t)v.count;
        v.ndim = 1;
    }
    res->status = 200;
    if (!format || !strcmp(format, "json")) {
        json_out j;
        rc = grove_json_begin(req, res, &j, err);
        if (rc)
            return rc;
        grove_json_values(&j, &v);
        return grove_json_end(res, &j, err);
    }
    if (!strcmp(format, "bin")) {
        res->content_type = "application/octet-stream";
        return grove_encode_bin(&v, &res->body, err);
    }
    if (!grove_is_numeric(v.type) || v.ndim < 0)
        return cellar_fail(err, CELLAR_EFORMAT, "Unsupported encoding %s for non-numeric content",
                           format);
    if (!strcmp(format, "npy"))
        return set_attachment(req, res, "application/octet-stream", "data.npy") ||
               grove_encode_npy(&v, req->arena, &res->body, err);
    if (v.ndim == 0 && (!strcmp(format, "csv") || !strcmp(format, "tiff")))
        return cellar_fail(err, CELLAR_EFORMAT,
                           "Unsupported encoding %s for empty and scalar datasets", format);
    if (!strcmp(format, "csv"))
        return set_attachment(req, res, "text/csv", "data.csv") ||
               grove_encode_csv(&v, &res->body, err);
    if (!strcmp(format, "tiff"))
        return set_attachment(req, res, "image/tiff", "data.tiff") ||
               grove_encode_tiff(&v, &res->body, err);
    return cellar_fail(err, CELLAR_EFORMAT, "Unsupported encoding %s", format);
}

/* ---------------------------------------------------------------- stats */

/* numpy's arithmetic in the precision of a float type: each operation
 * rounded to it (a double holds float32's and float16's sums exactly
 * before that rounding, so this is exact). */
typedef enum prec { PREC_F64, PREC_F32, PREC_F16 } prec;

static uint16_t float_to_half(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u, mant = x & 0x7fffffu;
    int exp = (int)((x >> 23) & 0xff);
    if (exp == 0xff)
        return (uint16_t)(sign | 0x7c00u | (mant ? 0x200u : 0));
    int e = exp - 127 + 15;
    if (e >= 31)
        return (uint16_t)(sign | 0x7c00u);
    if (e <= 0) {
        if (e < -10)
            return (uint16_t)sign;
        mant |= 0x800000u;
        int shift = 14 - e;
        uint32_t half = mant >> shift, rest = mant & ((1u << shift) - 1), mid = 1u << (shift - 1);
        if (rest > mid || (rest == mid && (half & 1)))
            half++;
        return (uint16_t)(sign | half);
    }
    uint32_t half = ((uint32_t)e << 10) | (mant >> 13), rest = mant & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (half & 1)))
        half++;
    return (uint16_t)(sign | half);
}

static double round_to(prec p, double x)
{
    if (p == PREC_F32)
        return (float)x;
    if (p == PREC_F16)
        return half_to_float(float_to_half((float)x));
    return x;
}

/* numpy's pairwise_sum (8 accumulators, blocks of 128), each addition in
 * precision p. */
static double pairwise(const double *a, uint64_t n, prec p)
{
    if (n < 8) {
        double res = 0.;
        for (uint64_t i = 0; i < n; i++)
            res = round_to(p, res + a[i]);
        return res;
    }
    if (n <= 128) {
        double r[8];
        for (int k = 0; k < 8; k++)
            r[k] = a[k];
        uint64_t i;
        for (i = 8; i < n - (n % 8); i += 8)
            for (int k = 0; k < 8; k++)
                r[k] = round_to(p, r[k] + a[i + k]);
        double res = round_to(p, round_to(p, round_to(p, r[0] + r[1]) + round_to(p, r[2] + r[3])) +
                                         round_to(p, round_to(p, r[4] + r[5]) +
                                                         round_to(p, r[6] + r[7])));
        for (; i < n; i++)
            res = round_to(p, res + a[i]);
        return res;
    }
    uint64_t n2 = n / 2;
    n2 -= n2 % 8;
    return round_to(p, pairwise(a, n2, p) + pairwise(a + n2, n - n2, p));
}

/* add.reduce: through buffers of 8192 values when the values are cast on
 * the way (integers to float64), else in one pairwise sum. */
static double reduce_sum(const double *a, uint64_t n, prec p, int cast)
{
    if (p == PREC_F16) /* numpy's half sums are float sums, rounded once */
        return round_to(p, 0. + pairwise(a, n, PREC_F32));
    if (!cast)
        return round_to(p, 0. + pairwise(a, n, p));
    double total = 0.;
    for (uint64_t i = 0; i < n; i += 8192)
        total = round_to(p, total + pairwise(a + i, n - i < 8192 ? n - i : 8192, p));
    return total;
}

/* Writes an integer-valued double exactly (Python's int() of a float). */
static void json_int_of(json_out *j, double d)
{
    d = trunc(d);
    if (!isfinite(d)) {
        json_out_null(j);
        return;
    }
    if (fabs(d) < 9.2e18) {
        json_out_int(j, (int64_t)d);
        return;
    }
    char text[400];
    int n = snprintf(text, sizeof text, "%.0f", d);
    json_out_raw(j, text, (size_t)n);
}

static void json_stat_float(json_out *j, double d)
{
    char text[NUMBER_TEXT_MAX];
    size_t n = grove_fmt_f64(d, text);
    n ? json_out_raw(j, text, n) : json_out_null(j);
}

typedef struct stat_extreme {
    int any;
    double d;
    int64_t i;
    int is_unsigned;
} stat_extreme;

static void extreme_take(stat_extreme *e, double d, int64_t iv, int is_int, int is_unsigned,
                         int want_min)
{
    int better = !e->any;
    if (!better && !is_int)
        better = want_min ? d < e->d : d > e->d;
    else if (!better && is_unsigned)
        better = want_min ? (uint64_t)iv < (uint64_t)e->i : (uint64_t)iv > (uint64_t)e->i;
    else if (!better)
        better = want_min ? iv < e->i : iv > e->i;
    if (better) {
        e->any = 1;
        e->d = d;
        e->i = iv;
        e->is_unsigned = is_unsigned;
    }
}

static void json_extreme(json_out *j, const stat_extreme *e, int is_int)
{
    if (!e->any)
        json_out_null(j);
    else if (!is_int)
        json_stat_float(j, e->d);
    else if (e->is_unsigned)
        json_out_uint(j, (uint64_t)e->i);
    else
        json_out_int(j, e->i);
}

static const char *const stat_keys[] = {"strict_positive_min", "positive_min", "min",
                                         "max", "mean", "std"};

/* The answer for no values (numpy's empty selection). */
static int stats_nulls(api_request *req, api_response *res, cellar_error *err)
{
    json_out j;
    int rc = grove_json_begin(req, res, &j, err);
    if (rc)
        return rc;
    json_out_map_open(&j);
    for (size_t k = 0; k < 6; k++) {
        json_out_str(&j, stat_keys[k]);
        json_out_null(&j);
    }
    json_out_map_close(&j);
    return grove_json_end(res, &j, err);
}

int api_h5grove_stats(api_request *req, api_response *res, cellar_error *err)
{
    h5g_links links;
    int rc = grove_links_param(req, &links, err);
    if (rc)
        return rc;
    const char *path = grove_path(req);
    grove_values v;
    rc = read_values(req, path, links, grove_param(req, "selection"), &v, NULL, err);
    if (rc)
        return rc;
    if (v.ndim >= 0 && v.count == 0)
        return stats_nulls(req, res, err);
    if (v.ndim < 0 || !grove_is_numeric(v.type) || v.type->is_complex)
        return cellar_fail(err, CELLAR_EFORMAT,
                           "statistics are for datasets of numbers (this one holds %s)",
                           v.ndim < 0 ? "no values" : "other values");
    double *vals = arena_alloc(req->arena, (v.count ? v.count : 1) * sizeof *vals);
    if (!vals)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
    const h5g_type *num = v.type->cls == GROVE_T_ENUM && v.type->base ? v.type->base : v.type;
    int is_int = v.type->is_bool || num->cls == GROVE_T_INTEGER;
    prec p = is_int || num->size == 8 ? PREC_F64 : num->size == 4 ? PREC_F32 : PREC_F16;
    stat_extreme mn = {0}, mx = {0}, spos = {0}, pos = {0};
    uint64_t n = 0;
    for (uint64_t i = 0; i < v.count; i++) {
        int vi = 0, uns = 0;
        int64_t iv = 0;
        double d = grove_number_at(&v, i, &vi, &iv, &uns);
        if (!is_int && !isfinite(d))
            continue;
        vals[n++] = d;
        extreme_take(&mn, d, iv, is_int, uns, 1);
        extreme_take(&mx, d, iv, is_int, uns, 0);
        if (is_int ? (uns ? iv != 0 : iv > 0) : d > 0)
            extreme_take(&spos, d, iv, is_int, uns, 1);
        if (is_int ? (uns || iv >= 0) : d >= 0)
            extreme_take(&pos, d, iv, is_int, uns, 1);
    }
    if (n == 0)
        return stats_nulls(req, res, err);
    const char *const *keys = stat_keys;
    /* mean: float16 sums in float32 (cast), integers in float64 (cast) */
    prec mean_p = p == PREC_F16 ? PREC_F32 : p;
    double mean = reduce_sum(vals, n, mean_p, is_int || p == PREC_F16);
    mean = round_to(mean_p, mean / (double)n);
    if (p == PREC_F16)
        mean = round_to(PREC_F16, mean);
    /* std as numpy's _var: the mean in the values' precision (float64 for
     * integers), squared deviations, their mean, its square root */
    double vmean = round_to(p, reduce_sum(vals, n, p, is_int) / (double)n);
    for (uint64_t i = 0; i < n; i++) {
        double x = round_to(p, vals[i] - vmean);
        vals[i] = round_to(p, x * x);
    }
    double var = round_to(p, reduce_sum(vals, n, p, 0) / (double)n);
    double sd = round_to(p, sqrt(var));
    json_out j;
    rc = grove_json_begin(req, res, &j, err);
    if (rc)
        return rc;
    json_out_map_open(&j);
    json_out_str(&j, keys[0]);
    json_extreme(&j, &spos, is_int);
    json_out_str(&j, keys[1]);
    json_extreme(&j, &pos, is_int);
    json_out_str(&j, keys[2]);
    json_extreme(&j, &mn, is_int);
    json_out_str(&j, keys[3]);
    json_extreme(&j, &mx, is_int);
    json_out_str(&j, keys[4]);
    if (is_int)
        json_int_of(&j, mean);
    else
        json_stat_float(&j, mean);
    json_out_str(&j, keys[5]);
    if (is_int)
        json_int_of(&j, sd);
    else
        json_stat_float(&j, sd);
    json_out_map_close(&j);
    return grove_json_end(res, &j, err);
}
