/* search/ of the Taxonium protocol: a search spec (taxonium_data_handling's
 * filtering.js, searchFilteringIfUncached and singleSearch) over every node
 * of the tree.
 *
 * Specs: {"type": FIELD, "method": "text_match" | "text_exact" |
 * "text_per_line" | "number", "text": ..., "number": ..., "number_method":
 * "==" | ">" | "<" | ">=" | "<="}, or {"type": "boolean", "boolean_method":
 * "and" | "or" | "not", "subspecs": [...]}.  FIELD is "name", "num_tips",
 * "node_id" or "meta_<column>".  Text comparisons ignore ASCII case.  The
 * mutation, genotype and revertant methods find nothing (the trees carry no
 * mutations).  Up to 10,000 matches are answered whole ("complete"); more
 * are thinned as Taxonium thins them ("filtered": those strictly inside the
 * box's y range, one per bin of 2000 x 400 over the box). */
#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "api/taxonium/taxonium.h"
#include "api/taxonium/tx_tree.h"

#define MAX_COMPLETE 10000
#define MAX_SPEC_DEPTH 16
#define PRECISION 2000.0
#define X_FACTOR 5.0

typedef struct field {
    int kind;              /* 0 none, 1 name, 2 num_tips, 3 node_id, 4 meta */
    const tx_column *col;
} field;

typedef struct search_run {
    const tx_req *tr;
    int32_t n;
    buf text;              /* a node's value, lowercased */
    cellar_error *err;
} search_run;

static field find_field(const tx_req *tr, const char *name)
{
    field f = {0, NULL};
    if (!name)
        return f;
    if (!strcmp(name, "name"))
        f.kind = 1;
    else if (!strcmp(name, "num_tips"))
        f.kind = 2;
    else if (!strcmp(name, "node_id"))
        f.kind = 3;
    for (size_t c = 0; !f.kind && c < tr->tab->n_cols; c++)
        if (!strcmp(name, tr->tab->cols[c].meta))
            f = (field){4, &tr->tab->cols[c]};
    return f;
}

/* The field's value of node v: text (*text) or a number (*num); 0 when the
 * node has none. */
static int value_of(const search_run *r, const field *f, int32_t v, const char **text,
                    double *num)
{
    *text = NULL;
    *num = NAN;
    switch (f->kind) {
    case 1: *text = tree_index_id(r->tr->t, v); return 1;
    case 2: *num = tree_index_leaf_count(r->tr->t, v); return 1;
    case 3: *num = v; return 1;
    case 4: return tx_meta_text(r->tr, f->col, v, text, num);
    default: return 0;
    }
}

/* The value as lowercased text in r->text (numbers as JavaScript prints
 * integers, else shortest round trip); NULL when the node has none. */
static const char *lower_text(search_run *r, const field *f, int32_t v)
{
    const char *text;
    double num;
    if (!value_of(r, f, v, &text, &num))
        return NULL;
    r->text.len = 0;
    char nt[NUMBER_TEXT_MAX];
    if (!text) {
        if (num == floor(num) && fabs(num) < 1e15)
            buf_printf(&r->text, "%.0f", num);
        else if (fmt_f64(num, nt))
            buf_puts(&r->text, nt);
        buf_putc(&r->text, '\0');
        return r->text.failed ? NULL : r->text.data;
    }
    size_t n = strlen(text);
    buf_append(&r->text, text, n);
    buf_putc(&r->text, '\0');
    if (r->text.failed)
        return NULL;
    for (size_t i = 0; i < n; i++)
        r->text.data[i] = (char)tolower((unsigned char)r->text.data[i]);
    return r->text.data;
}

static char *lower_dup(const char *s)
{
    char *d = strdup(s ? s : "");
    for (char *p = d; p && *p; p++)
        *p = (char)tolower((unsigned char)*p);
    return d;
}

static const char *spec_str(json_t *spec, const char *key)
{
    return json_string_value(json_object_get(spec, key));
}

static int text_match(search_run *r, json_t *spec, int exact, uint8_t *hit)
{
    field f = find_field(r->tr, spec_str(spec, "type"));
    char *want = lower_dup(spec_str(spec, "text"));
    if (!want)
        return cellar_fail(r->err, CELLAR_ENOMEM, "out of memory");
    for (int32_t v = 0; v < r->n && *want; v++) {
        const char *got = lower_text(r, &f, v);
        hit[v] = got && (exact ? !strcmp(got, want) : strstr(got, want) != NULL);
    }
    free(want);
    return 0;
}

static char *trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    size_t n = strlen(s);
    while (n > 0 && isspace((unsigned char)s[n - 1]))
        s[--n] = '\0';
    return s;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int text_per_line(search_run *r, json_t *spec, uint8_t *hit)
{
    field f = find_field(r->tr, spec_str(spec, "type"));
    char *all = lower_dup(spec_str(spec, "text"));
    size_t cap = 1;
    for (char *p = all; p && *p; p++)
        cap += *p == '\n';
    char **lines = malloc(cap * sizeof *lines);
    if (!all || !lines) {
        free(all);
        free(lines);
        return cellar_fail(r->err, CELLAR_ENOMEM, "out of memory");
    }
    size_t k = 0;
    for (char *save = NULL, *line = strtok_r(all, "\n", &save); line;
         line = strtok_r(NULL, "\n", &save)) {
        char *t = trim(line);
        if (*t)
            lines[k++] = t;
    }
    qsort(lines, k, sizeof *lines, cmp_str);
    for (int32_t v = 0; v < r->n && k; v++) {
        const char *got = lower_text(r, &f, v);
        if (!got)
            continue;
        char *key = trim(r->text.data ? r->text.data : (char *)"");
        hit[v] = bsearch(&key, lines, k, sizeof *lines, cmp_str) != NULL;
    }
    free(lines);
    free(all);
    return 0;
}

static int compare(double x, const char *op, double y)
{
    if (!strcmp(op, "=="))
        return x == y;
    if (!strcmp(op, ">"))
        return x > y;
    if (!strcmp(op, "<"))
        return x < y;
    if (!strcmp(op, ">="))
        return x >= y;
    return x <= y;
}

static int number_match(search_run *r, json_t *spec, uint8_t *hit)
{
    field f = find_field(r->tr, spec_str(spec, "type"));
    json_t *nv = json_object_get(spec, "number");
    const char *op = spec_str(spec, "number_method");
    static const char *const ops[] = {"==", ">", "<", ">=", "<="};
    int known = 0;
    for (size_t i = 0; op && i < sizeof ops / sizeof *ops; i++)
        known |= !strcmp(op, ops[i]);
    if (!known)
        return cellar_fail(r->err, CELLAR_EINVAL, "number_method must be ==, >, <, >= or <=");
    double want = NAN;
    if (json_is_number(nv))
        want = json_number_value(nv);
    else if (json_is_string(nv) && *json_string_value(nv))
        want = strtod(json_string_value(nv), NULL);
    for (int32_t v = 0; v < r->n && !isnan(want); v++) {
        const char *text;
        double num;
        if (!value_of(r, &f, v, &text, &num))
            continue;
        if (text) {
            char *end;
            num = strtod(text, &end);
            if (end == text || *end)
                continue;
        }
        hit[v] = compare(num, op, want);
    }
    return 0;
}

static int eval(search_run *r, json_t *spec, uint8_t *hit, int depth);

static int boolean_match(search_run *r, json_t *spec, uint8_t *hit, int depth)
{
    const char *m = spec_str(spec, "boolean_method");
    json_t *subs = json_object_get(spec, "subspecs");
    size_t ns = json_is_array(subs) ? json_array_size(subs) : 0;
    if (!m || (strcmp(m, "and") && strcmp(m, "or") && strcmp(m, "not")))
        return cellar_fail(r->err, CELLAR_EINVAL, "boolean_method must be and, or or not");
    int is_and = !strcmp(m, "and"), is_not = !strcmp(m, "not");
    if (ns == 0 && !is_not)
        return 0;
    uint8_t *sub = malloc((size_t)(r->n ? r->n : 1));
    if (!sub)
        return cellar_fail(r->err, CELLAR_ENOMEM, "out of memory");
    memset(hit, is_and || is_not, (size_t)r->n);
    int rc = 0;
    for (size_t i = 0; i < ns && !rc; i++) {
        memset(sub, 0, (size_t)r->n);
        if ((rc = eval(r, json_array_get(subs, i), sub, depth + 1)))
            break;
        for (int32_t v = 0; v < r->n; v++)
            hit[v] = is_and ? hit[v] & sub[v] : is_not ? hit[v] & !sub[v] : hit[v] | sub[v];
    }
    free(sub);
    return rc;
}

static int eval(search_run *r, json_t *spec, uint8_t *hit, int depth)
{
    if (!json_is_object(spec))
        return cellar_fail(r->err, CELLAR_EINVAL, "a search spec must be a JSON object");
    if (depth > MAX_SPEC_DEPTH)
        return cellar_fail(r->err, CELLAR_EINVAL, "search specs nest at most %d deep",
                           MAX_SPEC_DEPTH);
    const char *type = spec_str(spec, "type"), *method = spec_str(spec, "method");
    if (type && !strcmp(type, "boolean"))
        return boolean_match(r, spec, hit, depth);
    if (!method)
        return 0;
    if (!strcmp(method, "text_match") || !strcmp(method, "text_exact"))
        return text_match(r, spec, !strcmp(method, "text_exact"), hit);
    if (!strcmp(method, "text_per_line"))
        return text_per_line(r, spec, hit);
    if (!strcmp(method, "number"))
        return number_match(r, spec, hit);
    return 0; /* mutation, genotype, revertant: no mutations here */
}

/* The spec from json= (Taxonium sends a JSON string holding the spec's
 * JSON text, so a string is parsed once more). */
static int parse_spec(const api_request *req, json_t **out, cellar_error *err)
{
    const char *text;
    int rc = api_param_str(req, "json", &text, err);
    if (rc)
        return rc;
    if (!text)
        return cellar_fail(err, CELLAR_EINVAL, "parameter 'json' (the search spec) is required");
    json_t *spec = json_loads(text, JSON_DECODE_ANY, NULL);
    if (json_is_string(spec)) {
        json_t *inner = json_loads(json_string_value(spec), JSON_DECODE_ANY, NULL);
        json_decref(spec);
        spec = inner;
    }
    if (!json_is_object(spec)) {
        json_decref(spec);
        return cellar_fail(err, CELLAR_EINVAL, "json must be a search spec (a JSON object, or "
                           "a JSON string of one)");
    }
    *out = spec;
    return 0;
}

typedef struct cell_key {
    double kx, ky, y;
    int32_t node;
} cell_key;

static int cmp_cell(const void *pa, const void *pb)
{
    const cell_key *a = pa, *b = pb;
    if (a->ky != b->ky)
        return a->ky < b->ky ? -1 : 1;
    if (a->kx != b->kx)
        return a->kx < b->kx ? -1 : 1;
    return (a->y > b->y) - (a->y < b->y);
}

static int cmp_y(const void *pa, const void *pb, void *ctx)
{
    const tx_req *tr = ctx;
    double a = tree_index_y(tr->t, *(const int32_t *)pa), b = tree_index_y(tr->t, *(const int32_t *)pb);
    if (a != b)
        return a < b ? -1 : 1;
    return (*(const int32_t *)pa > *(const int32_t *)pb) - (*(const int32_t *)pa < *(const int32_t *)pb);
}

/* More than MAX_COMPLETE hits: those strictly inside the y range, one per
 * bin (Taxonium's reduceOverPlotting). */
static int32_t thin_hits(const tx_req *tr, int32_t *hits, int32_t k, const double b[4],
                         cell_key *keys)
{
    double px = PRECISION / (b[1] - b[0]) / X_FACTOR, py = PRECISION / (b[3] - b[2]);
    int32_t m = 0;
    for (int32_t i = 0; i < k; i++) {
        int32_t v = hits[i];
        double x = tx_round(tx_x(tr, v), 5), y = tx_round(tx_y(tr, v), 6);
        if (!(y > b[2] && y < b[3]))
            continue;
        keys[m++] = (cell_key){isfinite(px) ? round(x * px) : 0, isfinite(py) ? round(y * py) : 0,
                               y, v};
    }
    qsort(keys, (size_t)m, sizeof *keys, cmp_cell);
    int32_t out = 0;
    for (int32_t i = 0; i < m; i++)
        if (i == 0 || keys[i].kx != keys[i - 1].kx || keys[i].ky != keys[i - 1].ky)
            hits[out++] = keys[i].node;
    return out;
}

static int write_result(api_request *req, api_response *res, const tx_req *tr, int32_t *hits,
                        int32_t k, int32_t total, int filtered, cellar_error *err)
{
    qsort_r(hits, (size_t)k, sizeof *hits, cmp_y, (void *)tr);
    json_out j;
    res->body.len = 0;
    int rc = json_out_init(&j, &res->body, api_limit(req), err);
    if (rc)
        return rc;
    json_out_map_open(&j);
    json_out_str(&j, "type");
    json_out_str(&j, filtered ? "filtered" : "complete");
    json_out_str(&j, "total_count");
    json_out_int(&j, total);
    json_out_str(&j, "data");
    json_out_array_open(&j);
    for (int32_t i = 0; i < k && json_out_ok(&j); i++) {
        tx_write_node_open(&j, tr, hits[i]);
        json_out_map_close(&j);
    }
    json_out_array_close(&j);
    json_out_map_close(&j);
    return tx_finish(&j, res, "search for fewer nodes", err);
}

int api_taxonium_search(api_request *req, api_response *res, cellar_error *err)
{
    static const char *const extra[] = {"json", "min_x", "max_x", "min_y", "max_y", "xType",
                                        NULL};
    tx_req tr;
    json_t *spec = NULL;
    double b[4];
    int rc = tx_open(req, &tr, extra, 1, err);
    if (rc || (rc = tx_box_params(req, &tr, b, err)) || (rc = parse_spec(req, &spec, err)))
        return rc;
    search_run r = {.tr = &tr, .n = tree_index_node_count(tr.t), .err = err};
    uint8_t *hit = calloc((size_t)(r.n ? r.n : 1), 1);
    int32_t *hits = arena_calloc(req->arena, (size_t)(r.n ? r.n : 1), sizeof *hits);
    cell_key *keys = NULL;
    if (!hit || !hits) {
        rc = cellar_fail(err, CELLAR_ENOMEM, "out of memory");
        goto done;
    }
    if ((rc = eval(&r, spec, hit, 0)))
        goto done;
    if (r.text.failed) {
        rc = cellar_fail(err, CELLAR_ENOMEM, "out of memory");
        goto done;
    }
    int32_t k = 0;
    for (int32_t v = 0; v < r.n; v++)
        if (hit[v])
            hits[k++] = v;
    int32_t total = k;
    if (total > MAX_COMPLETE) {
        if (!(keys = malloc((size_t)k * sizeof *keys))) {
            rc = cellar_fail(err, CELLAR_ENOMEM, "out of memory");
            goto done;
        }
        k = thin_hits(&tr, hits, k, b, keys);
    }
    rc = write_result(req, res, &tr, hits, k, total, total > MAX_COMPLETE, err);
done:
    free(hit);
    free(keys);
    buf_destroy(&r.text);
    json_decref(spec);
    return rc;
}
