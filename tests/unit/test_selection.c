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
