/* The pure parts of api/: number and string formatting, CSV quoting, .npy
 * headers, request parameters and format negotiation. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api/encode/csv_out.h"
#include "api/encode/json_out.h"
#include "api/encode/npy_out.h"
#include "api/request.h"
#include "common/arena.h"
#include "common/buf.h"
#include "tests/unit/unit.h"

static const char *f32(float v)
{
    static char t[NUMBER_TEXT_MAX];
    fmt_f32(v, t);
    return t;
}

static const char *f64(double v)
{
    static char t[NUMBER_TEXT_MAX];
    fmt_f64(v, t);
    return t;
}

void test_api_number_format(void)
{
    CHECK_STR_EQ(f32(0.1f), "0.1");
    CHECK_STR_EQ(f32(1.0f / 3.0f), "0.33333334");
    CHECK_STR_EQ(f32(16777216.0f), "16777216.0");
    CHECK_STR_EQ(f32(-2.5f), "-2.5");
    CHECK_STR_EQ(f32(3.4028235e38f), "3.4028235e+38");
    CHECK_STR_EQ(f32(1e-45f), "1e-45");
    CHECK_STR_EQ(f64(0.1), "0.1");
    CHECK_STR_EQ(f64(1.0 / 3.0), "0.3333333333333333");
    CHECK_STR_EQ(f64(0.1 + 0.2), "0.30000000000000004");
    CHECK_STR_EQ(f64(2.0), "2.0");
    CHECK_STR_EQ(f64(5e-324), "5e-324");
    CHECK_STR_EQ(f64(1.7976931348623157e308), "1.7976931348623157e+308");
    /* Every float32 text reads back to the same float. */
    for (uint32_t bits = 0x3f800000u; bits < 0x3f800000u + 5000u; bits += 7) {
        float v;
        memcpy(&v, &bits, sizeof v);
        CHECK(strtof(f32(v), NULL) == v);
    }
    char t[NUMBER_TEXT_MAX];
    CHECK_EQ(fmt_f64(NAN, t), 0);
    CHECK_EQ(fmt_f32(-INFINITY, t), 0);
    CHECK_DBL_EQ(half_to_float(0x3c00), 1.0);
    CHECK_DBL_EQ(half_to_float(0xc000), -2.0);
    CHECK_DBL_EQ(half_to_float(0x3555), 0.333251953125);
    CHECK_DBL_EQ(half_to_float(0x0001), 5.9604644775390625e-08);
    CHECK(isinf(half_to_float(0x7c00)));
    CHECK(isnan(half_to_float(0x7e00)));
    uint16_t h = 0x3555;
    CHECK_EQ(fmt_typed(DT_FLOAT16, &h, 0, "T", "F", t), 10);
    CHECK_STR_EQ(t, "0.33325195");
}

static char *json_of(void (*write)(json_out *), uint64_t limit, int *rc)
{
    buf b = {0};
    json_out j;
    cellar_error err;
    cellar_error_clear(&err);
    json_out_init(&j, &b, limit, &err);
    write(&j);
    *rc = json_out_finish(&j, NULL, &err);
    json_out_destroy(&j);
    return buf_steal(&b, NULL);
}

static void write_numbers(json_out *j)
{
    float f = 0.1f;
    double d = NAN;
    uint8_t yes = 1;
    json_out_array_open(j);
    json_out_uint(j, UINT64_MAX);
    json_out_int(j, INT64_MIN);
    json_out_f64(j, d);
    json_out_f32(j, INFINITY);
    json_out_f32(j, f);
    json_out_f64(j, 1e16);
    json_out_typed(j, DT_BOOL, &yes, 0);
    json_out_typed(j, DT_FLOAT32, &f, 0);
    json_out_typed(j, DT_FLOAT64, &d, 0);
    json_out_array_close(j);
}

static void write_strings(json_out *j)
{
    json_out_array_open(j);
    json_out_strn(j, "a\x01" "b\"\\\n\t", 7);
    json_out_str(j, "\xff");
    json_out_str(j, "ok\xe2\x82!");
    json_out_str(j, "\xc0\xaf");
    json_out_str(j, "\xed\xa0\x80");
    json_out_str(j, "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
    json_out_strn(j, "nul\0x", 5);
    json_out_str(j, NULL);
    json_out_array_close(j);
}

static void write_long(json_out *j)
{
    json_out_array_open(j);
    for (int i = 0; i < 1000 && json_out_ok(j); i++)
        json_out_int(j, i);
    json_out_array_close(j);
}

void test_api_json_writer(void)
{
    int rc;
    char *s = json_of(write_numbers, 0, &rc);
    CHECK_EQ(rc, 0);
    CHECK_STR_EQ(s, "[18446744073709551615,-9223372036854775808,null,null,0.1,1e+16,true,0.1,"
                    "null]");
    free(s);
    s = json_of(write_strings, 0, &rc);
    CHECK_EQ(rc, 0);
    CHECK_STR_EQ(s, "[\"a\\u0001b\\\"\\\\\\n\\t\",\"\xef\xbf\xbd\",\"ok\xef\xbf\xbd!\","
                    "\"\xef\xbf\xbd\xef\xbf\xbd\",\"\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\","
                    "\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\",\"nul\\u0000x\",null]");
    free(s);
    s = json_of(write_long, 100, &rc);
    CHECK_EQ(rc, CELLAR_ETOOBIG);
    CHECK(strlen(s) <= 100);
    free(s);

    json_t *v = json_str_sanitized("x\xffy");
    CHECK(v != NULL);
    CHECK_STR_EQ(json_string_value(v), "x\xef\xbf\xbdy");
    json_decref(v);
    CHECK(utf8_valid("\xf4\x8f\xbf\xbf", 4));
    CHECK(!utf8_valid("\xf4\x90\x80\x80", 4));
    CHECK(!utf8_valid("\xe0\x80\x80", 3));
}

void test_api_csv_quoting(void)
{
    buf b = {0};
    csv_field(&b, "plain");
    csv_sep(&b);
    csv_field(&b, "a,b");
    csv_sep(&b);
    csv_field(&b, "say \"hi\"");
    csv_sep(&b);
    csv_field(&b, "line\nbreak");
    csv_sep(&b);
    csv_field(&b, " lead ");
    csv_sep(&b);
    csv_field(&b, NULL);
    csv_sep(&b);
    csv_field(&b, "bad\xff");
    csv_end_record(&b);
    CHECK_STR_EQ(b.data, "plain,\"a,b\",\"say \"\"hi\"\"\",\"line\nbreak\", lead ,,"
                         "bad\xef\xbf\xbd\r\n");
    buf_destroy(&b);

    uint8_t bools[2] = {1, 0};
    float fl[4] = {0.1f, NAN, 2.0f, -INFINITY};
    int64_t big = INT64_MAX;
    csv_typed(&b, DT_BOOL, bools, 0);
    csv_sep(&b);
    csv_typed(&b, DT_BOOL, bools, 1);
    for (int i = 0; i < 4; i++) {
        csv_sep(&b);
        csv_typed(&b, DT_FLOAT32, fl, i);
    }
    csv_sep(&b);
    csv_typed(&b, DT_INT64, &big, 0);
    CHECK_STR_EQ(b.data, "True,False,0.1,,2.0,-inf,9223372036854775807");
    buf_destroy(&b);
}

void test_api_npy_header(void)
{
    buf b = {0};
    int64_t shape1[1] = {100};
    CHECK_EQ(npy_header(&b, DT_FLOAT64, shape1, 1), 0);
    /* Exactly what numpy 2.x np.save writes for np.zeros(100). */
    static const char dict[] = "{'descr': '<f8', 'fortran_order': False, 'shape': (100,), }";
    CHECK_EQ(b.len, 128);
    CHECK(memcmp(b.data, "\x93NUMPY\x01\x00\x76\x00", 10) == 0);
    CHECK(memcmp(b.data + 10, dict, sizeof dict - 1) == 0);
    for (size_t i = 10 + sizeof dict - 1; i < 127; i++)
        CHECK_EQ(b.data[i], ' ');
    CHECK_EQ(b.data[127], '\n');
    buf_destroy(&b);

    int64_t shape2[2] = {3, 4};
    CHECK_EQ(npy_header(&b, DT_BOOL, shape2, 2), 0);
    static const char dict2[] = "{'descr': '|b1', 'fortran_order': False, 'shape': (3, 4), }";
    CHECK_EQ(b.len, 128);
    CHECK(memcmp(b.data + 10, dict2, sizeof dict2 - 1) == 0);
    CHECK_EQ(b.data[127], '\n');
    buf_destroy(&b);

    CHECK_EQ(npy_header(&b, DT_STRING, shape1, 1), -1);
    buf_destroy(&b);
    char text[200];
    npy_shape_text(shape2, 2, text, sizeof text);
    CHECK_STR_EQ(text, "3,4");
}

static api_request make_request(arena *a, api_param *q, size_t nq, json_t *body)
{
    api_request r;
    memset(&r, 0, sizeof r);
    r.arena = a;
    r.method = body ? "POST" : "GET";
    r.query = q;
    r.n_query = nq;
    r.body = body;
    return r;
}

void test_api_params_query(void)
{
    arena *a = arena_new();
    api_param q[] = {{"rows", "0:10"}, {"columns", "a,b,,c"}, {"format", "csv"}};
    api_request r = make_request(a, q, 3, NULL);
    cellar_error err;
    cellar_error_clear(&err);
    const char *s = NULL;
    CHECK_EQ(api_param_str(&r, "format", &s, &err), 0);
    CHECK_STR_EQ(s, "csv");
    CHECK_EQ(api_param_str(&r, "obs_names", &s, &err), 0);
    CHECK(s == NULL);
    const char **items = NULL;
    size_t n = 0;
    CHECK_EQ(api_param_list(&r, "columns", &items, &n, &err), 0);
    CHECK_EQ(n, 4);
    if (n == 4) {
        CHECK_STR_EQ(items[0], "a");
        CHECK_STR_EQ(items[2], "");
        CHECK_STR_EQ(items[3], "c");
    }
    CHECK_EQ(api_param_list(&r, "obs_names", &items, &n, &err), 0);
    CHECK(items == NULL);
    CHECK_EQ(n, 0);
    selection sel;
    int present = 0;
    CHECK_EQ(api_param_selection(&r, "rows", &sel, &present, &err), 0);
    CHECK_EQ(present, 1);
    CHECK_EQ(sel.is_list, 0);
    CHECK_EQ(sel.start, 0);
    CHECK_EQ(sel.stop, 10);
    CHECK_EQ(api_param_selection(&r, "mod_rows", &sel, &present, &err), 0);
    CHECK_EQ(present, 0);

    static const char *const ok[] = {"rows", "columns", NULL};
    static const char *const rows_only[] = {"rows", NULL};
    CHECK_EQ(api_check_params(&r, ok, &err), 0);
    CHECK_EQ(api_check_params(&r, rows_only, &err), CELLAR_EINVAL);
    CHECK(strstr(err.detail, "'columns'") != NULL);

    cellar_error_clear(&err);
    api_param dup[] = {{"rows", "1"}, {"rows", "2"}};
    api_request r2 = make_request(a, dup, 2, NULL);
    CHECK_EQ(api_param_str(&r2, "rows", &s, &err), CELLAR_EINVAL);

    api_response res;
    memset(&res, 0, sizeof res);
    for (int i = 0; i < API_MAX_HEADERS; i++)
        CHECK_EQ(api_add_header(&r, &res, "X-Test", "v"), 0);
    CHECK(api_add_header(&r, &res, "X-Test", "v") != 0);
    CHECK_EQ(res.n_headers, API_MAX_HEADERS);
    arena_free(a);
}

void test_api_params_body(void)
{
    arena *a = arena_new();
    json_error_t jerr;
    json_t *body = json_loads("{\"rows\": [5, 1, -1], \"obs_names\": [\"a,b\", \"c\", 7],"
                              " \"columns\": \"x,y\", \"categorical\": \"codes\", \"n\": 5,"
                              " \"flag\": true, \"bad\": [1.5], \"format\": \"json\"}",
                              0, &jerr);
    CHECK(body != NULL);
    api_param q[] = {{"format", "npy"}};
    api_request r = make_request(a, q, 1, body);
    cellar_error err;
    cellar_error_clear(&err);
    const char *s = NULL;
    CHECK_EQ(api_param_str(&r, "format", &s, &err), 0);
    CHECK_STR_EQ(s, "npy"); /* the query wins */
    CHECK_EQ(api_param_str(&r, "n", &s, &err), 0);
    CHECK_STR_EQ(s, "5");
    CHECK_EQ(api_param_str(&r, "flag", &s, &err), 0);
    CHECK_STR_EQ(s, "true");
    CHECK_EQ(api_param_str(&r, "obs_names", &s, &err), CELLAR_EINVAL);
    cellar_error_clear(&err);

    const char **items = NULL;
    size_t n = 0;
    CHECK_EQ(api_param_list(&r, "obs_names", &items, &n, &err), 0);
    CHECK_EQ(n, 3);
    if (n == 3) {
        CHECK_STR_EQ(items[0], "a,b");
        CHECK_STR_EQ(items[2], "7");
    }
    CHECK_EQ(api_param_list(&r, "columns", &items, &n, &err), 0);
    CHECK_EQ(n, 2);
    if (n == 2)
        CHECK_STR_EQ(items[1], "y");
    CHECK_EQ(api_param_list(&r, "bad", &items, &n, &err), CELLAR_EINVAL);
    cellar_error_clear(&err);

    selection sel;
    int present = 0;
    CHECK_EQ(api_param_selection(&r, "rows", &sel, &present, &err), 0);
    CHECK_EQ(present, 1);
    CHECK_EQ(sel.is_list, 1);
    CHECK_EQ(sel.count, 3);
    if (sel.count == 3) {
        CHECK_EQ(sel.items[0], 5);
        CHECK_EQ(sel.items[2], -1);
    }
    CHECK_EQ(api_param_selection(&r, "bad", &sel, &present, &err), CELLAR_EINVAL);
    cellar_error_clear(&err);

    static const char *const allowed[] = {"rows", "obs_names", "columns", "categorical",
                                          "n",    "flag",      "bad",     NULL};
    static const char *const fewer[] = {"rows", "obs_names", "columns", NULL};
    CHECK_EQ(api_check_params(&r, allowed, &err), 0);
    CHECK_EQ(api_check_params(&r, fewer, &err), CELLAR_EINVAL);
    json_decref(body);
    arena_free(a);
}

static int negotiate(const char *format, const char *accept, unsigned allowed, api_format *out)
{
    arena *a = arena_new();
    api_param q[] = {{"format", format}};
    api_request r = make_request(a, q, format ? 1 : 0, NULL);
    r.accept = accept;
    cellar_error err;
    cellar_error_clear(&err);
    *out = 0;
    int rc = api_negotiate_format(&r, allowed, out, &err);
    arena_free(a);
    return rc;
}

void test_api_negotiate_format(void)
{
    unsigned frame_fmts = (1u << FORMAT_JSON) | (1u << FORMAT_CSV) | (1u << FORMAT_BIN) |
                     (1u << FORMAT_NPY);
    unsigned json_only = 1u << FORMAT_JSON;
    api_format f;
    CHECK_EQ(negotiate(NULL, NULL, frame_fmts, &f), 0);
    CHECK_EQ(f, FORMAT_JSON);
    CHECK_EQ(negotiate("csv", NULL, frame_fmts, &f), 0);
    CHECK_EQ(f, FORMAT_CSV);
    CHECK_EQ(negotiate("npy", NULL, frame_fmts, &f), 0);
    CHECK_EQ(f, FORMAT_NPY);
    CHECK_EQ(negotiate("xml", NULL, frame_fmts, &f), CELLAR_EINVAL);
    CHECK_EQ(negotiate("csv", NULL, json_only, &f), CELLAR_ENOTACCEPT);
    CHECK_EQ(negotiate("json", "text/csv", frame_fmts, &f), 0);
    CHECK_EQ(f, FORMAT_JSON); /* ?format= wins over Accept */
    CHECK_EQ(negotiate(NULL, "text/csv", frame_fmts, &f), 0);
    CHECK_EQ(f, FORMAT_CSV);
    CHECK_EQ(negotiate(NULL, "application/octet-stream", frame_fmts, &f), 0);
    CHECK_EQ(f, FORMAT_BIN);
    CHECK_EQ(negotiate(NULL, "application/x-npy", frame_fmts, &f), 0);
    CHECK_EQ(f, FORMAT_NPY);
    CHECK_EQ(negotiate(NULL, "application/json;q=0.5, text/csv", frame_fmts, &f), 0);
    CHECK_EQ(f, FORMAT_CSV);
    CHECK_EQ(negotiate(NULL, "text/html,application/xhtml+xml,*/*;q=0.8", frame_fmts, &f), 0);
    CHECK_EQ(f, FORMAT_JSON);
    CHECK_EQ(negotiate(NULL, "text/html", frame_fmts, &f), 0);
    CHECK_EQ(f, FORMAT_JSON);
    CHECK_EQ(negotiate(NULL, "text/csv", json_only, &f), CELLAR_ENOTACCEPT);
}

void test_api_budget(void)
{
    arena *a = arena_new();
    api_config cfg = {.max_response_bytes = 1000};
    api_request r = make_request(a, NULL, 0, NULL);
    r.config = &cfg;
    cellar_error err;
    cellar_error_clear(&err);
    CHECK_EQ(api_check_budget(&r, 1000, "rows", 10, &err), 0);
    CHECK_EQ(api_check_budget(&r, 5000, "rows", 10, &err), CELLAR_ETOOBIG);
    CHECK(strstr(err.detail, "about 5000 bytes") != NULL);
    CHECK(strstr(err.detail, "at most 100 rows") != NULL);
    CHECK(strstr(err.detail, "rows=0:100") != NULL);
    cellar_error_clear(&err);
    CHECK_EQ(api_check_budget(&r, 5000, "rows", 2000, &err), CELLAR_ETOOBIG);
    CHECK(strstr(err.detail, "fewer columns") != NULL);
    arena_free(a);
}
