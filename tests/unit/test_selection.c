#include "common/arena.h"
#include "common/buf.h"
#include "storage/selection.h"
#include <stdint.h>
#include <stdlib.h>

#include "tests/unit/unit.h"

static dim_sel resolve(const char *text, int64_t len, int *rc_out)
{
    arena *a = arena_new();
    selection s;
    dim_sel d = {0};
    cellar_error err;
    cellar_error_clear(&err);
    int rc = selection_parse(text, "rows", a, &s, &err);
    if (!rc)
        rc = selection_resolve(&s, len, "rows", a, &d, &err);
    *rc_out = rc;
    /* Index lists are copied out so the arena can go. */
    static int64_t keep[64];
    if (!rc && d.index) {
        for (int64_t i = 0; i < d.count && i < 64; i++)
            keep[i] = d.index[i];
        d.index = keep;
    }
    arena_free(a);
    return d;
}

void test_selection_slices(void)
{
    int rc;
    dim_sel d = resolve("2:5", 10, &rc);
    CHECK_EQ(rc, 0);
    CHECK_EQ(d.start, 2);
    CHECK_EQ(d.count, 3);
    CHECK_EQ(d.step, 1);
    d = resolve(":", 10, &rc);
    CHECK_EQ(d.count, 10);
    d = resolve("-3:", 10, &rc);
    CHECK_EQ(d.start, 7);
    CHECK_EQ(d.count, 3);
    d = resolve("::2", 5, &rc);
    CHECK_EQ(d.count, 3);
    CHECK_EQ(dim_sel_at(&d, 2), 4);
    d = resolve("::-1", 4, &rc);
    CHECK_EQ(d.count, 4);
    CHECK_EQ(dim_sel_at(&d, 0), 3);
    CHECK_EQ(dim_sel_at(&d, 3), 0);
    d = resolve("5:100", 10, &rc);
    CHECK_EQ(d.count, 5);
    d = resolve("8:2", 10, &rc);
    CHECK_EQ(rc, 0);
    CHECK_EQ(d.count, 0);
    d = resolve("0:0", 0, &rc);
    CHECK_EQ(d.count, 0);
    d = resolve("-100:3", 10, &rc);
    CHECK_EQ(d.start, 0);
    CHECK_EQ(d.count, 3);
    d = resolve("9:-11:-3", 10, &rc); /* 9, 6, 3, 0 */
    CHECK_EQ(d.count, 4);
    CHECK_EQ(dim_sel_at(&d, 3), 0);
}

void test_selection_lists(void)
{
    int rc;
    dim_sel d = resolve("3, 1,-1", 10, &rc);
    CHECK_EQ(rc, 0);
    CHECK_EQ(d.count, 3);
    CHECK(d.index != NULL);
    CHECK_EQ(dim_sel_at(&d, 0), 3);
    CHECK_EQ(dim_sel_at(&d, 1), 1);
    CHECK_EQ(dim_sel_at(&d, 2), 9);
    d = resolve("4,5,6", 10, &rc); /* contiguous: becomes a slice */
    CHECK(d.index == NULL);
    CHECK_EQ(d.start, 4);
    CHECK_EQ(d.count, 3);
    d = resolve("7", 10, &rc);
    CHECK_EQ(d.count, 1);
    CHECK_EQ(dim_sel_at(&d, 0), 7);
}

void test_selection_errors(void)
{
    int rc;
    resolve("10", 10, &rc);
    CHECK_EQ(rc, CELLAR_ERANGE);
    resolve("-11", 10, &rc);
    CHECK_EQ(rc, CELLAR_ERANGE);
    resolve("a:b", 10, &rc);
    CHECK_EQ(rc, CELLAR_EINVAL);
    resolve("1:2:0", 10, &rc);
    CHECK_EQ(rc, CELLAR_EINVAL);
    resolve("1:2:3:4", 10, &rc);
    CHECK_EQ(rc, CELLAR_EINVAL);
    resolve("1,,2", 10, &rc);
    CHECK_EQ(rc, CELLAR_EINVAL);
    resolve("", 10, &rc);
    CHECK_EQ(rc, CELLAR_EINVAL);
    resolve("1:2,3", 10, &rc);
    CHECK_EQ(rc, CELLAR_EINVAL);
    resolve("99999999999999999999999", 10, &rc);
    CHECK_EQ(rc, CELLAR_EINVAL);
    resolve("0x10", 10, &rc);
    CHECK_EQ(rc, CELLAR_EINVAL);
}

void test_arena_and_buf(void)
{
    arena *a = arena_new();
    CHECK(a != NULL);
    char *s = arena_printf(a, "%s-%d", "x", 42);
    CHECK_STR_EQ(s, "x-42");
    void *big = arena_alloc(a, 1 << 20);
    CHECK(big != NULL);
    CHECK(arena_calloc(a, SIZE_MAX / 2, 4) == NULL);
    arena_free(a);

    buf b = {0};
    for (int i = 0; i < 1000; i++)
        buf_printf(&b, "%d,", i);
    CHECK(!b.failed);
    CHECK(b.len > 2000);
    CHECK_EQ(b.data[b.len], '\0');
    size_t len = 0;
    char *taken = buf_steal(&b, &len);
    CHECK(taken && len > 2000 && b.data == NULL);
    free(taken);
}

void test_selection_extreme_steps(void)
{
    /* Steps and bounds at the ends of int64 (the step was added to the
     * span: signed overflow). */
    int rc;
    dim_sel d = resolve("0:2:9223372036854775807", 10, &rc);
    CHECK_EQ(rc, 0);
    CHECK_EQ(d.start, 0);
    CHECK_EQ(d.count, 1);
    d = resolve("::-9223372036854775808", 10, &rc);
    CHECK_EQ(rc, 0);
    CHECK_EQ(d.start, 9);
    CHECK_EQ(d.count, 1);
    d = resolve("-9223372036854775808:9223372036854775807:3", 10, &rc);
    CHECK_EQ(rc, 0);
    CHECK_EQ(d.start, 0);
    CHECK_EQ(d.count, 4);
    d = resolve("9223372036854775807:-9223372036854775808:-4", 10, &rc);
    CHECK_EQ(rc, 0);
    CHECK_EQ(d.start, 9);
    CHECK_EQ(d.count, 3);
    d = resolve("0:9223372036854775807", INT64_MAX, &rc);
    CHECK_EQ(rc, 0);
    CHECK_EQ(d.count, INT64_MAX);
    /* Past int64 is a 400, not a wrap. */
    resolve("0:9223372036854775808", 10, &rc);
    CHECK_EQ(rc, CELLAR_EINVAL);
    resolve("-9223372036854775809:", 10, &rc);
    CHECK_EQ(rc, CELLAR_EINVAL);
}

void test_selection_int_parse(void)
{
    int64_t v = 0;
    CHECK_EQ(selection_parse_int("9223372036854775807", 19, &v), 0);
    CHECK_EQ(v, INT64_MAX);
    CHECK_EQ(selection_parse_int("-9223372036854775808", 20, &v), 0);
    CHECK(v == INT64_MIN);
    CHECK_EQ(selection_parse_int(" +42 ", 5, &v), 0);
    CHECK_EQ(v, 42);
    CHECK_EQ(selection_parse_int("-0", 2, &v), 0);
    CHECK_EQ(v, 0);
    /* Leading zeros are digits like any other, however many. */
    CHECK_EQ(selection_parse_int("000000000000000000000000000007", 30, &v), 0);
    CHECK_EQ(v, 7);
    /* One past either end, and far past: out of range, never a wrap. */
    v = 123;
    CHECK_EQ(selection_parse_int("9223372036854775808", 19, &v), SELECTION_INT_RANGE);
    CHECK_EQ(selection_parse_int("-9223372036854775809", 20, &v), SELECTION_INT_RANGE);
    CHECK_EQ(selection_parse_int("18446744073709551616", 20, &v), SELECTION_INT_RANGE);
    CHECK_EQ(selection_parse_int("99999999999999999999999999999999999999", 38, &v),
             SELECTION_INT_RANGE);
    CHECK_EQ(v, 123);
    static const char *const bad[] = {"", " ", "-", "+", "--1", "+-1", "1-", "0x10", "1e3",
                                      "1.0", "1 2", "١", "9223372036854775808x"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK_EQ(selection_parse_int(bad[i], strlen(bad[i]), &v), SELECTION_INT_BAD);
    /* The length bounds the text: no NUL is needed or read. */
    CHECK_EQ(selection_parse_int("12345", 2, &v), 0);
    CHECK_EQ(v, 12);
}

static int parse_detail(const char *text, char *detail, size_t size)
{
    arena *a = arena_new();
    selection s;
    cellar_error err;
    cellar_error_clear(&err);
    int rc = selection_parse(text, "rows", a, &s, &err);
    snprintf(detail, size, "%s", err.detail);
    arena_free(a);
    return rc;
}

void test_selection_int_edges(void)
{
    int rc;
    char detail[512];
    /* Every part of a slice and every list item: past int64 is a 400 that
     * says so. */
    static const char *const too_big[] = {
        "9223372036854775808:", ":9223372036854775808", "::9223372036854775808",
        "::-9223372036854775809", "1,2,9223372036854775808", "-9223372036854775809"};
    for (size_t i = 0; i < sizeof too_big / sizeof too_big[0]; i++) {
        CHECK_EQ(parse_detail(too_big[i], detail, sizeof detail), CELLAR_EINVAL);
        CHECK(strstr(detail, "outside the 64-bit integer range") != NULL);
        CHECK(strstr(detail, "rows") != NULL);
    }
    CHECK_EQ(parse_detail("1,x,3", detail, sizeof detail), CELLAR_EINVAL);
    CHECK(strstr(detail, "'x' is not an integer") != NULL);
    CHECK_EQ(parse_detail("1:2.5", detail, sizeof detail), CELLAR_EINVAL);
    CHECK(strstr(detail, "'2.5' is not an integer") != NULL);

    /* Slices with every bound at an end of int64, on short and huge axes. */
    dim_sel d = resolve("-9223372036854775808:-9223372036854775808", 10, &rc);
    CHECK_EQ(rc, 0);
    CHECK_EQ(d.count, 0);
    d = resolve("9223372036854775807::-1", 10, &rc);
    CHECK_EQ(rc, 0);
    CHECK_EQ(d.start, 9);
    CHECK_EQ(d.count, 10);
    d = resolve("::9223372036854775807", INT64_MAX, &rc);
    CHECK_EQ(rc, 0);
    CHECK_EQ(d.count, 1);
    d = resolve("::-9223372036854775808", INT64_MAX, &rc);
    CHECK_EQ(rc, 0);
    CHECK_EQ(d.start, INT64_MAX - 1);
    CHECK_EQ(d.count, 1);
    d = resolve("::-1", INT64_MAX, &rc);
    CHECK_EQ(rc, 0);
    CHECK_EQ(d.count, INT64_MAX);
    CHECK_EQ(dim_sel_at(&d, INT64_MAX - 1), 0);
    d = resolve("::2", INT64_MAX, &rc);
    CHECK_EQ(rc, 0);
    CHECK_EQ(d.count, INT64_MAX / 2 + 1);
    d = resolve("-9223372036854775807::", INT64_MAX, &rc);
    CHECK_EQ(rc, 0);
    CHECK_EQ(d.start, 0);
    CHECK_EQ(d.count, INT64_MAX);

    /* Lists: the ends of int64 against the ends of the axis. */
    d = resolve("-9223372036854775807,9223372036854775806", INT64_MAX, &rc);
    CHECK_EQ(rc, 0);
    CHECK_EQ(d.count, 2);
    CHECK_EQ(dim_sel_at(&d, 0), 0);
    CHECK_EQ(dim_sel_at(&d, 1), INT64_MAX - 1);
    resolve("-9223372036854775808", INT64_MAX, &rc);
    CHECK_EQ(rc, CELLAR_ERANGE);
    resolve("9223372036854775807", INT64_MAX, &rc);
    CHECK_EQ(rc, CELLAR_ERANGE);
    resolve("-9223372036854775808,0", 10, &rc);
    CHECK_EQ(rc, CELLAR_ERANGE);
    resolve("0", 0, &rc);
    CHECK_EQ(rc, CELLAR_ERANGE);
}

void test_selection_huge_list(void)
{
    /* 200000 items, the last one past the axis: refused after all are read. */
    enum { N = 200000 };
    char *text = malloc((size_t)N * 8 + 32);
    CHECK(text != NULL);
    if (!text)
        return;
    size_t len = 0;
    for (int i = 0; i < N; i++)
        len += (size_t)sprintf(text + len, "%s%d", i ? "," : "", (i * 7) % N);
    arena *a = arena_new();
    selection s;
    dim_sel d;
    cellar_error err;
    cellar_error_clear(&err);
    CHECK_EQ(selection_parse(text, "rows", a, &s, &err), 0);
    CHECK_EQ(s.count, N);
    CHECK_EQ(selection_resolve(&s, N, "rows", a, &d, &err), 0);
    CHECK_EQ(d.count, N);
    CHECK(d.index != NULL);
    if (d.index)
        CHECK_EQ(d.index[N - 1], ((int64_t)(N - 1) * 7) % N);
    sprintf(text + len, ",%d", N);
    CHECK_EQ(selection_parse(text, "rows", a, &s, &err), 0);
    CHECK_EQ(selection_resolve(&s, N, "rows", a, &d, &err), CELLAR_ERANGE);
    CHECK(strstr(err.detail, "outside an axis of length 200000") != NULL);
    arena_free(a);
    free(text);
}

void test_selection_chunk_runs(void)
{
    /* Walking a slice chunk by chunk near INT64_MAX: no intermediate past
     * int64 (the chunk's end was formed as (c + 1) * chunk). */
    int64_t c = -1;
    dim_sel d = {.start = INT64_MAX - 1, .step = 1, .count = 1, .index = NULL};
    CHECK_EQ(dim_sel_run_in_chunk(&d, 0, (int64_t)1 << 62, &c), 1);
    CHECK_EQ(c, 1);
    d = (dim_sel){.start = INT64_MAX - 1, .step = INT64_MIN, .count = 1, .index = NULL};
    CHECK_EQ(dim_sel_run_in_chunk(&d, 0, 1000, &c), 1);
    CHECK_EQ(c, (INT64_MAX - 1) / 1000);
    d = (dim_sel){.start = 0, .step = INT64_MAX, .count = 1, .index = NULL};
    CHECK_EQ(dim_sel_run_in_chunk(&d, 0, INT64_MAX, &c), 1);
    CHECK_EQ(c, 0);
    /* Ordinary runs keep their counts. */
    d = (dim_sel){.start = 3, .step = 2, .count = 10, .index = NULL}; /* 3,5,...,21 */
    CHECK_EQ(dim_sel_run_in_chunk(&d, 0, 10, &c), 4);                  /* 3,5,7,9 */
    CHECK_EQ(c, 0);
    CHECK_EQ(dim_sel_run_in_chunk(&d, 4, 10, &c), 5); /* 11..19 */
    CHECK_EQ(c, 1);
    d = (dim_sel){.start = 21, .step = -3, .count = 8, .index = NULL}; /* 21,18,...,0 */
    CHECK_EQ(dim_sel_run_in_chunk(&d, 0, 10, &c), 1);                  /* 21 */
    CHECK_EQ(c, 2);
    CHECK_EQ(dim_sel_run_in_chunk(&d, 1, 10, &c), 3); /* 18,15,12 */
    CHECK_EQ(dim_sel_run_in_chunk(&d, 4, 10, &c), 4); /* 9,6,3,0 */
    CHECK_EQ(c, 0);
}
