/* fmt_f32's double-arithmetic path against the snprintf/strtof reference it
 * replaced: the same text for every float tried. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <inttypes.h>

#include "api/encode/json_out.h"
#include "common/buf.h"
#include "tests/unit/unit.h"

/* The reference: the first precision from 6 (1 for subnormals) to 9 whose
 * %g text reads back, with ".0" added to integral-looking text. */
static void ref_f32(float v, char *out)
{
    if (!isfinite(v)) {
        out[0] = '\0';
        return;
    }
    int n = 0;
    for (int p = fabsf(v) < FLT_MIN ? 1 : 6; p <= 9; p++) {
        n = snprintf(out, NUMBER_TEXT_MAX - 2, "%.*g", p, (double)v);
        if (p == 9 || strtof(out, NULL) == v)
            break;
    }
    if (!strpbrk(out, ".eEnN"))
        strcpy(out + n, ".0");
}

static int same_as_ref(uint32_t bits)
{
    float v;
    memcpy(&v, &bits, sizeof v);
    char want[NUMBER_TEXT_MAX], got[NUMBER_TEXT_MAX];
    ref_f32(v, want);
    size_t n = fmt_f32(v, got);
    if (strcmp(want, got) != 0 || n != strlen(want)) {
        fprintf(stderr, "fmt_f32(0x%08x): \"%s\", want \"%s\"\n", (unsigned)bits, got, want);
        return 0;
    }
    return 1;
}

void test_json_fmt_f32_matches_reference(void)
{
    char t[NUMBER_TEXT_MAX];
    CHECK_EQ(fmt_f32(0.0f, t), 3);
    CHECK_STR_EQ(t, "0.0");
    CHECK_EQ(fmt_f32(-0.0f, t), 4);
    CHECK_STR_EQ(t, "-0.0");
    fmt_f32(123456.0f, t);
    CHECK_STR_EQ(t, "123456.0");
    fmt_f32(1234567.0f, t);
    CHECK_STR_EQ(t, "1234567.0");
    fmt_f32(1e-5f, t);
    CHECK_STR_EQ(t, "1e-05");
    fmt_f32(0.0001f, t);
    CHECK_STR_EQ(t, "0.0001");
    fmt_f32(1e10f, t);
    CHECK_STR_EQ(t, "1e+10");
    fmt_f32(2567.06665f, t); /* 9 digits end in 5, the value lies above */
    CHECK_STR_EQ(t, "2567.0667");
    fmt_f32(19617.875f, t); /* an exact tie at 7 digits (to even), 8 read back */
    CHECK_STR_EQ(t, "19617.875");
    fmt_f32(1048576.5f, t);
    CHECK_STR_EQ(t, "1048576.5");
    fmt_f32(-9.999999e-39f, t); /* subnormal: the reference path */
    CHECK_STR_EQ(t, "-1e-38");
    int bad = 0;
    /* Every exponent, a spread of mantissas, both signs. */
    for (uint32_t e = 0; e < 256 && bad < 10; e++)
        for (uint32_t m = 0; m < (1u << 23) && bad < 10; m += 65537)
            for (uint32_t s = 0; s < 2; s++)
                bad += !same_as_ref(s << 31 | e << 23 | m);
    /* Dense runs where the text is short (integers, round decimals). */
    for (uint32_t bits = 0x3f800000u; bits < 0x3f800000u + 200000u && bad < 10; bits++)
        bad += !same_as_ref(bits);
    for (int i = -100000; i <= 100000 && bad < 10; i++) {
        float v = (float)i / 1000.0f, w = (float)i;
        uint32_t b;
        memcpy(&b, &v, sizeof b);
        bad += !same_as_ref(b);
        memcpy(&b, &w, sizeof b);
        bad += !same_as_ref(b);
    }
    /* Dyadic values with exact decimal ties (19617.875 at 7 digits). */
    for (int i = 1; i <= 200000 && bad < 10; i++) {
        float v = (float)i / 8.0f, w = (float)i * 64.0f + 0.5f;
        uint32_t b;
        memcpy(&b, &v, sizeof b);
        bad += !same_as_ref(b);
        memcpy(&b, &w, sizeof b);
        bad += !same_as_ref(b);
    }
    /* Random bit patterns. */
    uint64_t x = 0x9e3779b97f4a7c15u;
    for (int i = 0; i < 300000 && bad < 10; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        bad += !same_as_ref((uint32_t)x);
    }
    CHECK_EQ(bad, 0);
}

/* The writer against yajl's generator (which it replaced): the same bytes
 * for strings of every byte value, nested maps and arrays, numbers. */
#include <yajl/yajl_gen.h>

static void yajl_to_buf(void *ctx, const char *s, size_t n)
{
    buf_append(ctx, s, n);
}

void test_json_writer_matches_yajl(void)
{
    buf mine = {0}, theirs = {0};
    json_out j;
    cellar_error err;
    cellar_error_clear(&err);
    CHECK_EQ(json_out_init(&j, &mine, 0, &err), 0);
    yajl_gen g = yajl_gen_alloc(NULL);
    yajl_gen_config(g, yajl_gen_validate_utf8, 0);
    yajl_gen_config(g, yajl_gen_print_callback, yajl_to_buf, (void *)&theirs);
    uint64_t x = 0x2545f4914f6cdd1du;
    json_out_map_open(&j);
    yajl_gen_map_open(g);
    for (int k = 0; k < 300; k++) {
        char key[16], text[64];
        snprintf(key, sizeof key, "k%d", k);
        json_out_str(&j, key);
        yajl_gen_string(g, (const unsigned char *)key, strlen(key));
        json_out_array_open(&j);
        yajl_gen_array_open(g);
        for (int i = 0; i < 8; i++) {
            size_t n = 0;
            for (; n < (size_t)(k % 40); n++) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                unsigned char c = (unsigned char)x;
                text[n] = (char)(c < 0x80 ? c : 'a' + c % 26); /* valid UTF-8 */
            }
            json_out_strn(&j, text, n);
            yajl_gen_string(g, (const unsigned char *)text, n);
            json_out_int(&j, (int64_t)(x >> 1) * (i % 2 ? -1 : 1));
            snprintf(text, sizeof text, "%" PRId64, (int64_t)(x >> 1) * (i % 2 ? -1 : 1));
            yajl_gen_number(g, text, strlen(text));
        }
        json_out_null(&j);
        yajl_gen_null(g);
        json_out_bool(&j, k & 1);
        yajl_gen_bool(g, k & 1);
        json_out_map_open(&j);
        yajl_gen_map_open(g);
        json_out_map_close(&j);
        yajl_gen_map_close(g);
        json_out_array_close(&j);
        yajl_gen_array_close(g);
    }
    json_out_map_close(&j);
    yajl_gen_map_close(g);
    CHECK_EQ(json_out_finish(&j, NULL, &err), 0);
    CHECK_EQ(mine.len, theirs.len);
    CHECK(mine.len == theirs.len && memcmp(mine.data, theirs.data, mine.len) == 0);
    /* Misuse fails as yajl's did: a number as a key, a second document. */
    CHECK_EQ(json_out_map_open(&j), -1);
    json_out_destroy(&j);
    buf_destroy(&mine);
    CHECK_EQ(json_out_init(&j, &mine, 0, &err), 0);
    json_out_map_open(&j);
    CHECK_EQ(json_out_int(&j, 1), -1);
    json_out_destroy(&j);
    yajl_gen_free(g);
    buf_destroy(&mine);
    buf_destroy(&theirs);
}

/* fmt_u64 / fmt_i64 (two digits per division) against printf: every power
 * of ten and its neighbours, the extremes, and random values of every
 * length. */
void test_fmt_int_matches_printf(void)
{
    char got[NUMBER_TEXT_MAX], want[NUMBER_TEXT_MAX];
    uint64_t p = 1, seed = 88172645463325252ull;
    for (int i = 0; i < 2000; i++) {
        uint64_t v;
        if (i < 60) {
            v = p + (uint64_t)(i % 3) - 1; /* p - 1, p, p + 1 */
            if (i % 3 == 2 && p <= UINT64_MAX / 10)
                p *= 10;
        } else if (i < 64) {
            v = i == 60 ? 0 : i == 61 ? UINT64_MAX : i == 62 ? (uint64_t)INT64_MAX : 1ull << 63;
        } else {
            seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
            v = seed >> (seed % 64);
        }
        size_t n = fmt_u64(v, got);
        snprintf(want, sizeof want, "%" PRIu64, v);
        CHECK_EQ(n, strlen(want));
        CHECK_STR_EQ(got, want);
        int64_t s = (int64_t)v;
        n = fmt_i64(s, got);
        snprintf(want, sizeof want, "%" PRId64, s);
        CHECK_EQ(n, strlen(want));
        CHECK_STR_EQ(got, want);
    }
}
