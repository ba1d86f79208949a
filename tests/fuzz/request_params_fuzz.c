/* Fuzz target: a request's parameters as api/request.c reads them, the way
 * every route does (api_param_str, _int, _list, _selection, api_check_params,
 * api_negotiate_format), with the selections then resolved against an axis.
 * Input: lines; "A:<text>" is the Accept header, "B:<json>" the POST body,
 * "L:<n>" the axis length, any other line one query argument key=value (the
 * server hands them over percent-decoded).  Every refusal must carry its code
 * and a reason; every accepted number must lie in its range; every resolved
 * position in the axis.
 * With libFuzzer: clang -DCELLAR_LIBFUZZER -fsanitize=fuzzer,address ...;
 * without it, main() replays tests/fuzz/corpus/request_params or the paths
 * given. */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api/request.h"
#include "common/arena.h"
#include "storage/selection.h"
#include "tests/fuzz/fuzz.h"

#define MAX_QUERY 16

static void must_fail_cleanly(int rc, const cellar_error *err)
{
    MUST(rc < 0 && err->code == rc && err->detail[0]);
}

static void check_selection(const api_request *req, const char *name, int64_t length)
{
    selection sel;
    int present = 0;
    cellar_error err;
    cellar_error_clear(&err);
    int rc = api_param_selection(req, name, &sel, &present, &err);
    if (rc) {
        must_fail_cleanly(rc, &err);
        return;
    }
    if (!present)
        return;
    dim_sel d;
    rc = selection_resolve(&sel, length, name, req->arena, &d, &err);
    if (rc) {
        must_fail_cleanly(rc, &err);
        return;
    }
    MUST(d.count >= 0);
    for (int64_t i = 0; i < d.count && i < 4096; i++) {
        int64_t at = dim_sel_at(&d, i);
        MUST(at >= 0 && at < length);
    }
    if (!d.index && d.count > 0) {
        __int128 last = (__int128)d.start + (__int128)d.step * (d.count - 1);
        MUST(last >= 0 && last < length);
    }
}

static void check_int(const api_request *req, const char *name, int64_t lo, int64_t hi)
{
    int64_t v = 0;
    int present = 0;
    cellar_error err;
    cellar_error_clear(&err);
    int rc = api_param_int(req, name, lo, hi, &v, &present, &err);
    if (rc) {
        must_fail_cleanly(rc, &err);
        MUST(!present);
        return;
    }
    if (present)
        MUST(v >= lo && v <= hi);
}

static void check_params(const api_request *req, int64_t length)
{
    cellar_error err;
    cellar_error_clear(&err);
    const char *s = NULL;
    int rc = api_param_str(req, "node", &s, &err);
    if (rc)
        must_fail_cleanly(rc, &err);
    const char **items = NULL;
    size_t n = 0;
    cellar_error_clear(&err);
    rc = api_param_list(req, "columns", &items, &n, &err);
    if (rc)
        must_fail_cleanly(rc, &err);
    for (size_t i = 0; !rc && i < n; i++)
        MUST(items[i] != NULL);
    check_selection(req, "rows", length);
    check_selection(req, "cols", length);
    check_int(req, "depth", 0, INT32_MAX);
    check_int(req, "max_nodes", 1, INT32_MAX - 1);
    check_int(req, "any", INT64_MIN, INT64_MAX);
    static const char *const allowed[] = {"rows", "cols", "columns", "depth", NULL};
    cellar_error_clear(&err);
    rc = api_check_params(req, allowed, &err);
    if (rc)
        must_fail_cleanly(rc, &err);
    for (unsigned mask = 1u << FORMAT_JSON; mask < 1u << (FORMAT_NEWICK + 1); mask <<= 1) {
        unsigned allowed_formats = mask | 1u << FORMAT_JSON;
        api_format f = 0;
        cellar_error_clear(&err);
        rc = api_negotiate_format(req, allowed_formats, &f, &err);
        if (rc)
            must_fail_cleanly(rc, &err);
        else
            MUST(allowed_formats & (1u << f));
    }
}

/* Splits the input into its lines (NUL-terminated in text, which the
 * caller frees) and fills req. */
static void split_request(char *text, api_request *req, api_param *query, int64_t *length)
{
    req->query = query;
    for (char *line = text; line;) {
        char *next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        if (strncmp(line, "A:", 2) == 0) {
            req->accept = line + 2;
        } else if (strncmp(line, "B:", 2) == 0) {
            json_decref(req->body);
            req->body = json_loads(line + 2, JSON_DECODE_ANY, NULL);
            req->method = "POST";
        } else if (strncmp(line, "L:", 2) == 0) {
            int64_t v;
            if (selection_parse_int(line + 2, strlen(line + 2), &v) == 0 && v >= 0)
                *length = v;
        } else if (req->n_query < MAX_QUERY) {
            char *eq = strchr(line, '=');
            query[req->n_query].key = line;
            query[req->n_query].value = eq ? eq + 1 : NULL;
            if (eq)
                *eq = '\0';
            req->n_query++;
        }
        line = next;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 8192)
        return 0;
    char *text = malloc(size + 1);
    arena *a = arena_new();
    if (!text || !a)
        goto done;
    memcpy(text, data, size);
    text[size] = '\0';
    api_param query[MAX_QUERY];
    api_request req;
    memset(&req, 0, sizeof req);
    req.arena = a;
    req.method = "GET";
    int64_t length = 10;
    split_request(text, &req, query, &length);
    check_params(&req, length);
    json_decref(req.body);
done:
    arena_free(a);
    free(text);
    return 0;
}

#define FUZZ_NAME "request_params"
#include "tests/fuzz/replay_main.h"
