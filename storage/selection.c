#include "storage/selection.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

selection selection_all(void)
{
    selection s;
    memset(&s, 0, sizeof s);
    return s;
}

dim_sel dim_sel_range(int64_t start, int64_t count)
{
    dim_sel d = {.start = start, .step = 1, .count = count, .index = NULL};
    return d;
}

int selection_parse_int(const char *s, size_t len, int64_t *out)
{
    const char *e = s + len;
    while (s < e && isspace((unsigned char)*s))
        s++;
    while (e > s && isspace((unsigned char)e[-1]))
        e--;
    int negative = s < e && *s == '-';
    if (s < e && (*s == '-' || *s == '+'))
        s++;
    if (s == e)
        return SELECTION_INT_BAD;
    /* The magnitude in uint64, checked before each step: INT64_MIN's is one
     * more than INT64_MAX's. */
    uint64_t limit = negative ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX, v = 0;
    int too_big = 0;
    for (; s < e; s++) {
        if (*s < '0' || *s > '9')
            return SELECTION_INT_BAD;
        unsigned digit = (unsigned)(*s - '0');
        if (v > (limit - digit) / 10)
            too_big = 1;
        else
            v = v * 10 + digit;
    }
    if (too_big)
        return SELECTION_INT_RANGE;
    *out = negative ? (int64_t)(0 - v) : (int64_t)v;
    return 0;
}

/* selection_parse_int on [s, e), failing with a detail that names `what`
 * and the text: `form` says what was expected. */
static int parse_item(const char *s, const char *e, const char *what, const char *form,
                      int64_t *out, cellar_error *err)
{
    int rc = selection_parse_int(s, (size_t)(e - s), out);
    int n = e - s > 100 ? 100 : (int)(e - s);
    if (rc == SELECTION_INT_RANGE)
        return cellar_fail(err, CELLAR_EINVAL,
                           "%s: '%.*s' is outside the 64-bit integer range (-2^63 to 2^63-1)",
                           what, n, s);
    if (rc)
        return cellar_fail(err, CELLAR_EINVAL, "%s: '%.*s' is not %s", what, n, s, form);
    return 0;
}

static int is_blank(const char *s, const char *e)
{
    for (; s < e; s++)
        if (!isspace((unsigned char)*s))
            return 0;
    return 1;
}

static int parse_slice(const char *text, const char *what, selection *out, cellar_error *err)
{
    const char *parts[3][2];
    int n = 0;
    const char *s = text;
    for (;;) {
        const char *c = strchr(s, ':');
        if (n == 3)
            return cellar_fail(err, CELLAR_EINVAL, "%s: a slice has at most two ':'", what);
        parts[n][0] = s;
        parts[n][1] = c ? c : s + strlen(s);
        n++;
        if (!c)
            break;
        s = c + 1;
    }
    int64_t *vals[3] = {&out->start, &out->stop, &out->step};
    int *has[3] = {&out->has_start, &out->has_stop, &out->has_step};
    for (int i = 0; i < n; i++) {
        if (is_blank(parts[i][0], parts[i][1]))
            continue;
        int rc = parse_item(parts[i][0], parts[i][1], what,
                            "an integer (a slice is start:stop[:step])", vals[i], err);
        if (rc)
            return rc;
        *has[i] = 1;
    }
    if (out->has_step && out->step == 0)
        return cellar_fail(err, CELLAR_EINVAL, "%s: slice step cannot be zero", what);
    return 0;
}

static int parse_list(const char *text, const char *what, arena *a, selection *out,
                      cellar_error *err)
{
    size_t n = 1;
    for (const char *p = text; *p; p++)
        n += *p == ',';
    int64_t *items = arena_calloc(a, n, sizeof *items);
    if (!items)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory parsing %s", what);
    const char *s = text;
    for (size_t i = 0; i < n; i++) {
        const char *c = strchr(s, ',');
        const char *e = c ? c : s + strlen(s);
        int rc = parse_item(s, e, what, "an integer (a list is like 3,17,42)", &items[i], err);
        if (rc)
            return rc;
        s = e + 1;
    }
    out->is_list = 1;
    out->items = items;
    out->count = n;
    return 0;
}

int selection_parse(const char *text, const char *what, arena *a, selection *out,
                    cellar_error *err)
{
    *out = selection_all();
    if (!text || is_blank(text, text + strlen(text)))
        return cellar_fail(err, CELLAR_EINVAL, "%s: empty selection", what);
    if (strchr(text, ':')) {
        if (strchr(text, ','))
            return cellar_fail(err, CELLAR_EINVAL,
                               "%s: use either start:stop[:step] or a comma list", what);
        return parse_slice(text, what, out, err);
    }
    return parse_list(text, what, a, out, err);
}

int selection_from_list(const int64_t *items, size_t count, arena *a, selection *out,
                        cellar_error *err)
{
    *out = selection_all();
    out->is_list = 1;
    out->count = count;
    out->items = arena_calloc(a, count ? count : 1, sizeof *items);
    if (!out->items)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory for a selection");
    if (count)
        memcpy(out->items, items, count * sizeof *items);
    return 0;
}

/* Python's slice.indices(length). */
static void slice_indices(const selection *s, int64_t length, int64_t *start, int64_t *stop,
                          int64_t *step)
{
    int64_t st = s->has_step ? s->step : 1;
    int64_t lo = st < 0 ? -1 : 0, hi = st < 0 ? length - 1 : length;
    int64_t b, e;
    if (!s->has_start) {
        b = st < 0 ? hi : lo;
    } else {
        b = s->start;
        if (b < 0) {
            b += length;
            if (b < lo)
                b = lo;
        } else if (b > hi) {
            b = hi;
        }
    }
    if (!s->has_stop) {
        e = st < 0 ? lo : hi;
    } else {
        e = s->stop;
        if (e < 0) {
            e += length;
            if (e < lo)
                e = lo;
        } else if (e > hi) {
            e = hi;
        }
    }
    *start = b;
    *stop = e;
    *step = st;
}

int selection_resolve(const selection *sel, int64_t length, const char *what, arena *a,
                      dim_sel *out, cellar_error *err)
{
    if (length < 0)
        return cellar_fail(err, CELLAR_EFORMAT, "%s: the axis has a negative length %lld", what,
                           (long long)length);
    if (!sel->is_list) {
        int64_t b, e, st;
        if (sel->has_step && sel->step == 0)
            return cellar_fail(err, CELLAR_EINVAL, "%s: slice step cannot be zero", what);
        slice_indices(sel, length, &b, &e, &st);
        /* ceil(span / |step|) without adding the step to the span (a step
         * near INT64_MAX would overflow), |step| unsigned (INT64_MIN). */
        int64_t count = 0;
        uint64_t abs_step = st < 0 ? (uint64_t)0 - (uint64_t)st : (uint64_t)st;
        if (st > 0 && e > b)
            count = (int64_t)((uint64_t)(e - b - 1) / abs_step + 1);
        else if (st < 0 && b > e)
            count = (int64_t)((uint64_t)(b - e - 1) / abs_step + 1);
        out->start = count ? b : 0;
        out->step = st;
        out->count = count;
        out->index = NULL;
        return 0;
    }
    int64_t *idx = arena_calloc(a, sel->count ? sel->count : 1, sizeof *idx);
    if (!idx)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory resolving %s", what);
    int contiguous = 1;
    for (size_t i = 0; i < sel->count; i++) {
        int64_t v = sel->items[i];
        if (v < -length || v >= length)
            return cellar_fail(err, CELLAR_ERANGE,
                               "%s: position %lld is outside an axis of length %lld", what,
                               (long long)v, (long long)length);
        idx[i] = v < 0 ? v + length : v;
        if (i && idx[i] != idx[i - 1] + 1)
            contiguous = 0;
    }
    if (contiguous && sel->count) {
        *out = dim_sel_range(idx[0], (int64_t)sel->count);
        return 0;
    }
    out->start = 0;
    out->step = 1;
    out->count = (int64_t)sel->count;
    out->index = idx;
    return 0;
}
