/* Every number a request or a flag gives: parsed with overflow checks, an
 * overflow or an out-of-range value refused (400 / a startup error), never
 * wrapped or clamped. */
#include <jansson.h>
#include <stdint.h>
#include <string.h>

#include "api/request.h"
#include "common/arena.h"
#include "server/config.h"
#include "storage/selection.h"
#include "tests/unit/unit.h"

static int param_int(const char *value, int64_t lo, int64_t hi, int64_t *out, char *detail,
                     size_t size)
{
    arena *a = arena_new();
    api_param q[] = {{"depth", value}};
    api_request r;
    memset(&r, 0, sizeof r);
    r.arena = a;
    r.method = "GET";
    r.query = q;
    r.n_query = 1;
    cellar_error err;
    cellar_error_clear(&err);
    int present = 0;
    int rc = api_param_int(&r, "depth", lo, hi, out, &present, &err);
    snprintf(detail, size, "%s", err.detail);
    if (rc == 0 && !present)
        rc = 1;
    arena_free(a);
    return rc;
}

void test_api_param_int(void)
{
    char detail[512];
    int64_t v = 0;
    CHECK_EQ(param_int("17", 0, 100, &v, detail, sizeof detail), 0);
    CHECK_EQ(v, 17);
    CHECK_EQ(param_int("9223372036854775807", INT64_MIN, INT64_MAX, &v, detail, sizeof detail),
             0);
    CHECK_EQ(v, INT64_MAX);
    CHECK_EQ(param_int("-9223372036854775808", INT64_MIN, INT64_MAX, &v, detail, sizeof detail),
             0);
    CHECK(v == INT64_MIN);
    /* strtoll clamped these to LLONG_MAX / LLONG_MIN without a word. */
    static const char *const too_big[] = {"9223372036854775808", "-9223372036854775809",
                                          "99999999999999999999999999"};
    for (size_t i = 0; i < sizeof too_big / sizeof too_big[0]; i++) {
        v = 5;
        CHECK_EQ(param_int(too_big[i], INT64_MIN, INT64_MAX, &v, detail, sizeof detail),
                 CELLAR_EINVAL);
        CHECK(strstr(detail, "outside the 64-bit integer range") != NULL);
        CHECK(strstr(detail, "depth must be an integer") != NULL);
        CHECK_EQ(v, 5);
    }
    static const char *const bad[] = {"", " ", "1.5", "1e3", "0x10", "ten", "3 4", "--1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK_EQ(param_int(bad[i], 0, 100, &v, detail, sizeof detail), CELLAR_EINVAL);
    /* Out of the parameter's own range, at both ends. */
    CHECK_EQ(param_int("101", 0, 100, &v, detail, sizeof detail), CELLAR_EINVAL);
    CHECK(strstr(detail, "from 0 to 100, not '101'") != NULL);
    CHECK_EQ(param_int("-1", 0, 100, &v, detail, sizeof detail), CELLAR_EINVAL);
    CHECK_EQ(param_int("2147483648", 0, INT32_MAX, &v, detail, sizeof detail), CELLAR_EINVAL);
    CHECK_EQ(param_int("2147483647", 0, INT32_MAX, &v, detail, sizeof detail), 0);
    CHECK_EQ(v, INT32_MAX);
}

void test_api_param_int_body(void)
{
    /* A POST body's numbers arrive as JSON: integers and integral reals are
     * taken by their text, anything past int64 is refused. */
    arena *a = arena_new();
    json_error_t jerr;
    json_t *body = json_loads("{\"depth\": 12, \"max_nodes\": 3.0, \"big\": 1e30, "
                              "\"rows\": \"0:2:9223372036854775807\", \"cols\": "
                              "[9223372036854775807, -9223372036854775808]}",
                              0, &jerr);
    CHECK(body != NULL);
    api_request r;
    memset(&r, 0, sizeof r);
    r.arena = a;
    r.method = "POST";
    r.body = body;
    cellar_error err;
    cellar_error_clear(&err);
    int64_t v = 0;
    int present = 0;
    CHECK_EQ(api_param_int(&r, "depth", 0, 100, &v, &present, &err), 0);
    CHECK_EQ(present, 1);
    CHECK_EQ(v, 12);
    CHECK_EQ(api_param_int(&r, "max_nodes", 1, 100, &v, &present, &err), 0);
    CHECK_EQ(v, 3);
    CHECK_EQ(api_param_int(&r, "big", INT64_MIN, INT64_MAX, &v, &present, &err), CELLAR_EINVAL);
    CHECK_EQ(present, 0);
    CHECK_EQ(api_param_int(&r, "absent", 0, 1, &v, &present, &err), 0);
    CHECK_EQ(present, 0);
    selection sel;
    CHECK_EQ(api_param_selection(&r, "rows", &sel, &present, &err), 0);
    CHECK_EQ(sel.step, INT64_MAX);
    CHECK_EQ(api_param_selection(&r, "cols", &sel, &present, &err), 0);
    CHECK_EQ(sel.count, 2);
    dim_sel d;
    CHECK_EQ(selection_resolve(&sel, 10, "cols", a, &d, &err), CELLAR_ERANGE);
    json_decref(body);
    arena_free(a);
}

static int parse_flag(const char *flag, const char *value, server_config *cfg)
{
    char *argv[] = {"cellar", (char *)flag, (char *)value, NULL};
    return config_parse(cfg, 3, argv);
}

void test_config_numeric_flags(void)
{
    server_config cfg;
    CHECK_EQ(parse_flag("--port", "65535", &cfg), 0);
    CHECK_EQ(cfg.port, 65535);
    CHECK_EQ(parse_flag("--max-response-bytes", "18446744073709551615", &cfg), 0);
    CHECK(cfg.max_response_bytes == UINT64_MAX);
    CHECK_EQ(parse_flag("--idle-seconds", "0.25", &cfg), 0);
    CHECK_DBL_EQ(cfg.idle_seconds, 0.25);
    /* strtoull took a leading blank and then a minus: " -1" was 2^64 - 1. */
    static const struct {
        const char *flag, *value;
    } bad[] = {
        {"--max-response-bytes", " -1"},
        {"--max-response-bytes", "-1"},
        {"--max-response-bytes", "+5"},
        {"--max-response-bytes", "18446744073709551616"},
        {"--max-response-bytes", "0x10"},
        {"--max-response-bytes", ""},
        {"--max-open-stores", "99999999999999999999"},
        {"--threads", "4294967296"},
        {"--port", "65536"},
        {"--probe-concurrency", "1.5"},
        {"--idle-seconds", "inf"},
        {"--idle-seconds", "nan"},
        {"--idle-seconds", "1e999"},
        {"--idle-seconds", "-0.5"},
        {"--drain-seconds", "1e300"},
        {"--request-timeout-seconds", "infinity"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = parse_flag(bad[i].flag, bad[i].value, &cfg);
        if (rc != -1)
            fprintf(stderr, "%s '%s' was taken\n", bad[i].flag, bad[i].value);
        CHECK_EQ(rc, -1);
    }
}
