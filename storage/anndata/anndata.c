#include "storage/anndata/anndata.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/numfmt.h"
#include "storage/anndata/name_index.h"
#include "storage/budget.h"
#include "storage/registry.h"

/* Rows read at once when a whole index is scanned (name indexes, maps). */
enum { SCAN_CHUNK = 1 << 16 };

/* ---- small helpers ---- */

const char *col_encoding_name(col_encoding e)
{
    switch (e) {
    case COL_ARRAY: return "array";
    case COL_STRING_ARRAY: return "string-array";
    case COL_CATEGORICAL: return "categorical";
    case COL_NULLABLE_INTEGER: return "nullable-integer";
    case COL_NULLABLE_BOOLEAN: return "nullable-boolean";
    case COL_NULLABLE_STRING: return "nullable-string-array";
    default: return "unknown";
    }
}

const char *element_encoding(const node *n)
{
    return node_attr_string(n, "encoding-type");
}

/* A JSON bool, or an integer/real 0 or 1 (h5py enums map to bools, other
 * writers store 0/1).  Returns 0 and sets *out, or -1. */
static int json_flag(const json_t *v, int *out)
{
    if (json_is_boolean(v)) {
        *out = json_is_true(v);
        return 0;
    }
    if (json_is_integer(v) && (json_integer_value(v) == 0 || json_integer_value(v) == 1)) {
        *out = (int)json_integer_value(v);
        return 0;
    }
    if (json_is_real(v) && (json_real_value(v) == 0.0 || json_real_value(v) == 1.0)) {
        *out = json_real_value(v) == 1.0;
        return 0;
    }
    return -1;
}

/* Shortest text that reads back as the same double (or float when
 * single), Python-style: "1.0", "0.1", "1e+20", "nan", "inf". */
static void format_float(double v, int single, char *buf, size_t size)
{
    if (isnan(v)) {
        snprintf(buf, size, "nan");
        return;
    }
    if (isinf(v)) {
        snprintf(buf, size, v < 0 ? "-inf" : "inf");
        return;
    }
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, size, "%.*g", prec, v);
        if (single ? strtof(buf, NULL) == (float)v : strtod(buf, NULL) == v)
            break;
    }
    if (!strpbrk(buf, ".e")) {
        size_t len = strlen(buf);
        if (len + 3 <= size)
            memcpy(buf + len, ".0", 3);
    }
}

/* One numeric value at p (native layout of dtype k) as text: integers in
 * decimal, bools as Python's True/False, floats as above. */
static void format_number(dtype_kind k, const void *p, char *buf, size_t size)
{
    switch (k) {
    case DT_BOOL: snprintf(buf, size, "%s", *(const uint8_t *)p ? "True" : "False"); break;
    case DT_INT8: snprintf(buf, size, "%d", *(const int8_t *)p); break;
    case DT_INT16: snprintf(buf, size, "%d", *(const int16_t *)p); break;
    case DT_INT32: snprintf(buf, size, "%" PRId32, *(const int32_t *)p); break;
    case DT_INT64: snprintf(buf, size, "%" PRId64, *(const int64_t *)p); break;
    case DT_UINT8: snprintf(buf, size, "%u", *(const uint8_t *)p); break;
    case DT_UINT16: snprintf(buf, size, "%u", *(const uint16_t *)p); break;
    case DT_UINT32: snprintf(buf, size, "%" PRIu32, *(const uint32_t *)p); break;
    case DT_UINT64: snprintf(buf, size, "%" PRIu64, *(const uint64_t *)p); break;
    case DT_FLOAT16: format_float(half_to_float(*(const uint16_t *)p), 1, buf, size); break;
    case DT_FLOAT32: format_float(*(const float *)p, 1, buf, size); break;
    case DT_FLOAT64: format_float(*(const double *)p, 0, buf, size); break;
    default: snprintf(buf, size, "?"); break;
    }
}

/* Integer value i of an array of dtype k as int64; -1 when an unsigned
 * value does not fit (callers treat that as out of range). */
static int widen_int(dtype_kind k, const void *data, int64_t i, int64_t *out)
{
    switch (k) {
    case DT_BOOL:
    case DT_UINT8: *out = ((const uint8_t *)data)[i]; return 0;
    case DT_INT8: *out = ((const int8_t *)data)[i]; return 0;
    case DT_INT16: *out = ((const int16_t *)data)[i]; return 0;
    case DT_UINT16: *out = ((const uint16_t *)data)[i]; return 0;
    case DT_INT32: *out = ((const int32_t *)data)[i]; return 0;
    case DT_UINT32: *out = ((const uint32_t *)data)[i]; return 0;
    case DT_INT64: *out = ((const int64_t *)data)[i]; return 0;
    case DT_UINT64: {
        uint64_t u = ((const uint64_t *)data)[i];
        if (u > INT64_MAX)
            return -1;
        *out = (int64_t)u;
        return 0;
    }
    default: return -1;
    }
}

/* Reads the selected items of a numeric array into arena memory. */
static int read_numeric(node *n, const dim_sel *sel, int64_t count, arena *a, void **out,
                        cellar_error *err)
{
    size_t sz = dtype_size(node_get_info(n)->dtype);
    if (count < 0 || (sz && (uint64_t)count > SIZE_MAX / sz))
        return cellar_fail(err, CELLAR_ENOMEM, "selection of '%s' is too large", node_path(n));
    void *buf = arena_alloc(a, (size_t)count * sz);
    if (!buf)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory reading '%s'", node_path(n));
    int rc = node_read(n, sel, buf, (size_t)count * sz, err);
    if (rc)
        return rc;
    *out = buf;
    return 0;
}

static int read_strings(node *n, const dim_sel *sel, int64_t count, arena *a, char ***out,
                        cellar_error *err)
{
    char **v = arena_calloc(a, (size_t)(count > 0 ? count : 1), sizeof *v);
    if (count < 0 || !v)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory reading '%s'", node_path(n));
    int rc = node_read_strings(n, sel, a, v, err);
    if (rc)
        return rc;
    *out = v;
    return 0;
}

/* ---- element helpers ---- */

char *element_read_scalar_string(node *n, arena *a, cellar_error *err)
{
    const node_info *in = node_get_info(n);
    if (in->type != NODE_ARRAY) {
        cellar_fail(err, CELLAR_EFORMAT, "'%s' is a group, not a scalar", node_path(n));
        return NULL;
    }
    if (in->ndim < 0) {
        cellar_fail(err, CELLAR_EFORMAT, "'%s' is empty (null), not a scalar", node_path(n));
        return NULL;
    }
    dim_sel sel[NODE_MAX_DIMS];
    for (int d = 0; d < in->ndim; d++) {
        if (in->shape[d] != 1) {
            cellar_fail(err, CELLAR_EFORMAT, "'%s' holds more than one value, not a scalar",
                        node_path(n));
            return NULL;
        }
        sel[d] = dim_sel_range(0, 1);
    }
    const dim_sel *s = in->ndim ? sel : NULL;
    if (in->dtype == DT_STRING) {
        char *v = NULL;
        if (node_read_strings(n, s, a, &v, err))
            return NULL;
        return v;
    }
    if (!dtype_is_numeric(in->dtype)) {
        cellar_fail(err, CELLAR_EFORMAT, "'%s' has a type cellar does not read", node_path(n));
        return NULL;
    }
    union {
        int64_t i;
        double d;
        unsigned char b[8];
    } v;
    if (node_read(n, s, &v, dtype_size(in->dtype), err))
        return NULL;
    char buf[64];
    format_number(in->dtype, &v, buf, sizeof buf);
    char *out = arena_strdup(a, buf);
    if (!out)
        cellar_fail(err, CELLAR_ENOMEM, "out of memory reading '%s'", node_path(n));
    return out;
}

/* ---- data frame columns ---- */

/* What parsing one column needs to know about its frame. */
typedef struct parse_ctx {
    node *group;     /* the data frame */
    int64_t n_rows;  /* -1 while parsing the index itself */
} parse_ctx;

/* Known (encoding-type, encoding-version) pairs for columns; a missing
 * version is accepted (some writers leave it out). */
static int version_ok(node *n, const char *want)
{
    const char *v = node_attr_string(n, "encoding-version");
    return !v || strcmp(v, want) == 0;
}

static int col_fail_version(const parse_ctx *p, const char *col, node *n, cellar_error *err)
{
    return cellar_fail(err, CELLAR_EFORMAT,
                       "column '%s' of '%s': unsupported encoding-version '%s' of '%s'", col,
                       node_path(p->group), node_attr_string(n, "encoding-version"),
                       element_encoding(n));
}

/* Checks that n is a 1-D array whose length matches the frame's rows. */
static int need_1d(const parse_ctx *p, const char *col, const char *role, node *n,
                   cellar_error *err)
{
    const node_info *in = node_get_info(n);
    if (in->type != NODE_ARRAY || in->ndim != 1)
        return cellar_fail(err, CELLAR_EFORMAT, "column '%s' of '%s': %s is not a 1-D array",
                           col, node_path(p->group), role);
    if (p->n_rows >= 0 && in->shape[0] != p->n_rows)
        return cellar_fail(err, CELLAR_EFORMAT,
                           "column '%s' of '%s': %s has %lld values, the frame has %lld rows",
                           col, node_path(p->group), role, (long long)in->shape[0],
                           (long long)p->n_rows);
    return 0;
}

/* A required child of a column group; EFORMAT naming the column. */
static int need_part(const parse_ctx *p, const char *col, node *g, const char *part,
                     node **out, cellar_error *err)
{
    *out = node_child_opt(g, part);
    if (!*out)
        return cellar_fail(err, CELLAR_EFORMAT, "column '%s' of '%s': %s group has no '%s'",
                           col, node_path(p->group), element_encoding(g), part);
    return 0;
}

static int parse_categories(const parse_ctx *p, const char *col, node *cats, frame_column *c,
                            cellar_error *err)
{
    const node_info *in = node_get_info(cats);
    if (in->type != NODE_ARRAY || in->ndim != 1)
        return cellar_fail(err, CELLAR_EFORMAT,
                           "column '%s' of '%s': categories are not a 1-D array", col,
                           node_path(p->group));
    if (in->dtype != DT_STRING && !dtype_is_numeric(in->dtype))
        return cellar_fail(err, CELLAR_EFORMAT,
                           "column '%s' of '%s': categories have a type cellar does not read",
                           col, node_path(p->group));
    c->categories = cats;
    c->dtype = in->dtype;
    return 0;
}

static int parse_codes(const parse_ctx *p, const char *col, node *codes, frame_column *c,
                       cellar_error *err)
{
    int rc = need_1d(p, col, "codes", codes, err);
    if (rc)
        return rc;
    dtype_kind k = node_get_info(codes)->dtype;
    if (!dtype_is_integer(k))
        return cellar_fail(err, CELLAR_EFORMAT,
                           "column '%s' of '%s': categorical codes are %s, not integers", col,
                           node_path(p->group), dtype_name(k));
    c->values = codes;
    c->codes_dtype = k;
    return 0;
}

static int parse_ordered(const parse_ctx *p, const char *col, node *holder, frame_column *c,
                         cellar_error *err)
{
    const json_t *o = json_object_get(node_attrs(holder), "ordered");
    c->ordered = 0;
    if (o && json_flag(o, &c->ordered))
        return cellar_fail(err, CELLAR_EFORMAT,
                           "column '%s' of '%s': 'ordered' attribute is not a boolean", col,
                           node_path(p->group));
    return 0;
}

/* dataframe 0.1.0 (anndata 0.7.x): a codes array whose `categories`
 * attribute is the path of the categories array, absolute (HDF5 object
 * references as the backend maps them) or relative to the frame (zarr). */
static int parse_legacy_categorical(const parse_ctx *p, const char *col, node *codes,
                                    const char *ref, frame_column *c, cellar_error *err)
{
    cellar_error e2;
    cellar_error_clear(&e2);
    node *cats = NULL;
    if (node_resolve(p->group, ref, &cats, &e2))
        return cellar_fail(err, CELLAR_EFORMAT,
                           "column '%s' of '%s': categories '%s' not found", col,
                           node_path(p->group), ref);
    int rc = parse_codes(p, col, codes, c, err);
    if (!rc)
        rc = parse_categories(p, col, cats, c, err);
    if (!rc)
        rc = parse_ordered(p, col, cats, c, err);
    if (!rc)
        c->encoding = COL_CATEGORICAL;
    return rc;
}

static int is_mask_type(dtype_kind k)
{
    return k == DT_BOOL || k == DT_INT8 || k == DT_UINT8;
}

static int parse_nullable(const parse_ctx *p0, const char *col, node *g, col_encoding enc,
                          frame_column *c, cellar_error *err)
{
    parse_ctx p = *p0;
    node *values, *mask;
    int rc = need_part(&p, col, g, "values", &values, err);
    if (!rc)
        rc = need_part(&p, col, g, "mask", &mask, err);
    if (!rc)
        rc = need_1d(&p, col, "values", values, err);
    if (rc)
        return rc;
    if (p.n_rows < 0)
        p.n_rows = node_get_info(values)->shape[0];
    rc = need_1d(&p, col, "mask", mask, err);
    if (rc)
        return rc;
    dtype_kind vk = node_get_info(values)->dtype, mk = node_get_info(mask)->dtype;
    if (!is_mask_type(mk))
        return cellar_fail(err, CELLAR_EFORMAT, "column '%s' of '%s': mask is %s, not bool",
                           col, node_path(p.group), dtype_name(mk));
    int ok = enc == COL_NULLABLE_INTEGER   ? dtype_is_integer(vk)
             : enc == COL_NULLABLE_BOOLEAN ? vk == DT_BOOL || vk == DT_UINT8 || vk == DT_INT8
                                           : vk == DT_STRING;
    if (!ok)
        return cellar_fail(err, CELLAR_EFORMAT,
                           "column '%s' of '%s': %s values are %s", col, node_path(p.group),
                           col_encoding_name(enc), dtype_name(vk));
    c->encoding = enc;
    c->values = values;
    c->mask = mask;
    c->dtype = enc == COL_NULLABLE_BOOLEAN ? DT_BOOL : vk;
    if (enc == COL_NULLABLE_STRING) {
        const char *na = node_attr_string(g, "na-value");
        c->na_value = na ? na : "NA";
    }
    return 0;
}

static int parse_group_column(const parse_ctx *p, const char *col, node *g, frame_column *c,
                              cellar_error *err)
{
    const char *et = element_encoding(g);
    if (!et)
        return cellar_fail(err, CELLAR_EFORMAT,
                           "column '%s' of '%s' is a group without an encoding-type", col,
                           node_path(p->group));
    if (strcmp(et, "categorical") == 0) {
        if (!version_ok(g, "0.2.0"))
            return col_fail_version(p, col, g, err);
        node *codes, *cats;
        int rc = need_part(p, col, g, "codes", &codes, err);
        if (!rc)
            rc = need_part(p, col, g, "categories", &cats, err);
        if (!rc)
            rc = parse_codes(p, col, codes, c, err);
        if (!rc)
            rc = parse_categories(p, col, cats, c, err);
        if (!rc)
            rc = parse_ordered(p, col, g, c, err);
        if (!rc)
            c->encoding = COL_CATEGORICAL;
        return rc;
    }
    col_encoding enc = strcmp(et, "nullable-integer") == 0        ? COL_NULLABLE_INTEGER
                       : strcmp(et, "nullable-boolean") == 0      ? COL_NULLABLE_BOOLEAN
                       : strcmp(et, "nullable-string-array") == 0 ? COL_NULLABLE_STRING
                                                                  : 0;
    if (!enc)
        return cellar_fail(err, CELLAR_EFORMAT,
                           "column '%s' of '%s' has encoding '%s', which cellar cannot read "
                           "as a column",
                           col, node_path(p->group), et);
    if (!version_ok(g, "0.1.0"))
        return col_fail_version(p, col, g, err);
    return parse_nullable(p, col, g, enc, c, err);
}

/* Parses one column (or the index) without reading data. */
static int parse_column(const parse_ctx *p, const char *col, node *n, frame_column *c,
                        cellar_error *err)
{
    memset(c, 0, sizeof *c);
    c->name = col;
    const node_info *in = node_get_info(n);
    int rc;
    if (in->type == NODE_GROUP) {
        rc = parse_group_column(p, col, n, c, err);
    } else {
        const char *et = element_encoding(n);
        const json_t *ref = json_object_get(node_attrs(n), "categories");
        if (!et && json_is_string(ref)) {
            rc = parse_legacy_categorical(p, col, n, json_string_value(ref), c, err);
        } else if (et && strcmp(et, "array") && strcmp(et, "string-array")) {
            rc = cellar_fail(err, CELLAR_EFORMAT,
                             "column '%s' of '%s' has encoding '%s', which cellar cannot read "
                             "as a column",
                             col, node_path(p->group), et);
        } else if (et && !version_ok(n, "0.2.0")) {
            rc = col_fail_version(p, col, n, err);
        } else if ((rc = need_1d(p, col, "its array", n, err)) == 0) {
            if (in->dtype == DT_STRING) {
                c->encoding = COL_STRING_ARRAY;
            } else if (dtype_is_numeric(in->dtype)) {
                c->encoding = COL_ARRAY;
            } else {
                rc = cellar_fail(err, CELLAR_EFORMAT,
                                 "column '%s' of '%s' has a type cellar does not read", col,
                                 node_path(p->group));
            }
            c->values = n;
            c->dtype = in->dtype;
        }
    }
    if (rc) {
        memset(c, 0, sizeof *c);
        c->name = col;
    }
    return rc;
}

static int64_t column_length(const frame_column *c)
{
    return c->values ? node_get_info(c->values)->shape[0] : 0;
}

/* The dataframe's encoding-version check; sets *legacy for 0.1.0. */
static int frame_check(node *group, const char **index_key, cellar_error *err)
{
    const char *path = node_path(group);
    if (node_get_info(group)->type != NODE_GROUP)
        return cellar_fail(err, CELLAR_EFORMAT,
                           "'%s' is an array, not a data frame (pre-0.7 compound data frames "
                           "are not supported)",
                           path);
    const char *et = element_encoding(group);
    const json_t *idx = json_object_get(node_attrs(group), "_index");
    if (et && strcmp(et, "dataframe") != 0)
        return cellar_fail(err, CELLAR_EFORMAT, "'%s' is a '%s' element, not a data frame",
                           path, et);
    if (!et && !idx)
        return cellar_fail(err, CELLAR_EFORMAT, "'%s' is not a data frame", path);
    const char *ver = node_attr_string(group, "encoding-version");
    if (ver && strcmp(ver, "0.1.0") != 0 && strcmp(ver, "0.2.0") != 0)
        return cellar_fail(err, CELLAR_EFORMAT,
                           "'%s': unsupported dataframe encoding-version '%s'", path, ver);
    if (!json_is_string(idx))
        return cellar_fail(err, CELLAR_EFORMAT, "'%s' has no _index attribute naming its index",
                           path);
    *index_key = json_string_value(idx);
    return 0;
}

/* Parses the index of a data frame group into *c (no data read). */
static int frame_parse_index(node *group, frame_column *c, const char **index_key,
                             cellar_error *err)
{
    int rc = frame_check(group, index_key, err);
    if (rc)
        return rc;
    node *ix = node_child_opt(group, *index_key);
    if (!ix)
        return cellar_fail(err, CELLAR_EFORMAT, "index '%s' of '%s' is missing", *index_key,
                           node_path(group));
    parse_ctx p = {group, -1};
    return parse_column(&p, *index_key, ix, c, err);
}

/* Column names in column-order: a list (possibly []), a lone string in odd
 * files, or, when absent, the group's children but the index and 0.1.0's
 * __categories. */
static int frame_column_names(node *group, const char *index_key, arena *a,
                              const char ***names, size_t *count, cellar_error *err)
{
    const json_t *co = json_object_get(node_attrs(group), "column-order");
    *names = NULL;
    *count = 0;
    if (json_is_string(co)) {
        const char **v = arena_calloc(a, 1, sizeof *v);
        if (!v)
            return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
        v[0] = json_string_value(co);
        *names = v;
        *count = 1;
        return 0;
    }
    if (json_is_array(co)) {
        size_t n = json_array_size(co), k = 0;
        const char **v = arena_calloc(a, n ? n : 1, sizeof *v);
        if (!v)
            return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
        for (size_t i = 0; i < n; i++) {
            const char *s = json_string_value(json_array_get(co, i));
            if (s)
                v[k++] = s;
        }
        *names = v;
        *count = k;
        return 0;
    }
    const char **kids;
    size_t nk;
    int rc = node_children(group, a, &kids, &nk, err);
    if (rc)
        return rc;
    size_t k = 0;
    for (size_t i = 0; i < nk; i++)
        if (strcmp(kids[i], index_key) != 0 && strcmp(kids[i], "__categories") != 0)
            kids[k++] = kids[i];
    *names = kids;
    *count = k;
    return 0;
}

/* A frame with its index only (no columns): for scans of the index. */
static int frame_open_index(node *group, frame *out, cellar_error *err)
{
    memset(out, 0, sizeof *out);
    const char *index_key = NULL;
    int rc = frame_parse_index(group, &out->index, &index_key, err);
    if (rc)
        return rc;
    out->group = group;
    out->n_rows = column_length(&out->index);
    out->index_name = strcmp(index_key, "_index") == 0 ? NULL : index_key;
    return 0;
}

static int frame_parse(node *group, arena *a, frame *out, cellar_error *err)
{
    int rc = frame_open_index(group, out, err);
    if (rc)
        return rc;
    const char *index_key = node_attr_string(group, "_index");
    const char **names;
    size_t n;
    rc = frame_column_names(group, index_key, a, &names, &n, err);
    if (rc)
        return rc;
    out->columns = arena_calloc(a, n ? n : 1, sizeof *out->columns);
    if (!out->columns)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory opening '%s'", node_path(group));
    parse_ctx p = {group, out->n_rows};
    for (size_t i = 0; i < n; i++) {
        node *cn = node_child_opt(group, names[i]);
        cellar_error ignored;
        cellar_error_clear(&ignored);
        frame_column *c = &out->columns[i];
        if (!cn || parse_column(&p, names[i], cn, c, &ignored)) {
            memset(c, 0, sizeof *c);
            c->name = names[i]; /* unreadable: encoding 0, explained when read */
        }
    }
    out->n_columns = n;
    return 0;
}

/* A parsed frame kept on its group node (node_memo): the group's
 * attributes and children never change within a store version. */
typedef struct frame_memo {
    arena *a;
    frame f;
} frame_memo;

static const char frame_memo_key = 0;

static void frame_memo_free(void *value)
{
    frame_memo *m = value;
    if (m)
        arena_free(m->a);
    free(m);
}

static int frame_memo_build(node *group, void *ctx, void **value, cellar_error *err)
{
    (void)ctx;
    frame_memo *m = calloc(1, sizeof *m);
    arena *a = m ? arena_new() : NULL;
    if (!a) {
        free(m);
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory opening '%s'", node_path(group));
    }
    m->a = a;
    int rc = frame_parse(group, a, &m->f, err);
    if (rc) {
        frame_memo_free(m);
        return rc;
    }
    *value = m;
    return 0;
}

int frame_open(node *group, arena *a, frame *out, cellar_error *err)
{
    (void)a; /* the parsed frame lives on the group node */
    memset(out, 0, sizeof *out);
    void *v = NULL;
    int rc = node_memo(group, &frame_memo_key, frame_memo_build, NULL, frame_memo_free, &v,
                       err);
    if (rc)
        return rc;
    *out = ((const frame_memo *)v)->f;
    return 0;
}

int frame_find_column(const frame *f, const char *name)
{
    for (size_t i = 0; i < f->n_columns; i++)
        if (strcmp(f->columns[i].name, name) == 0)
            return (int)i;
    return -1;
}

/* Why a column is unreadable: parses it again, this time keeping the error. */
static int explain_unreadable(const frame *f, const frame_column *c, cellar_error *err)
{
    node *cn = NULL;
    cellar_error e2;
    cellar_error_clear(&e2);
    int orc = node_child(f->group, c->name, &cn, &e2);
    if (orc == CELLAR_ENOTFOUND)
        return cellar_fail(err, CELLAR_EFORMAT,
                           "column '%s' is listed in column-order of '%s' but missing",
                           c->name, node_path(f->group));
    if (orc)
        return cellar_fail(err, CELLAR_EFORMAT, "column '%s' of '%s' cannot be opened: %s",
                           c->name, node_path(f->group), e2.detail);
    parse_ctx p = {f->group, f->n_rows};
    frame_column tmp;
    int rc = parse_column(&p, c->name, cn, &tmp, err);
    if (rc)
        return rc;
    return cellar_fail(err, CELLAR_EFORMAT, "column '%s' of '%s' cannot be read", c->name,
                       node_path(f->group));
}

static int check_rows(const frame *f, const dim_sel *rows, cellar_error *err)
{
    if (rows->count < 0)
        return cellar_fail(err, CELLAR_EINTERNAL, "negative row count");
    if (rows->count == 0)
        return 0;
    if (rows->index) {
        for (int64_t i = 0; i < rows->count; i++)
            if (rows->index[i] < 0 || rows->index[i] >= f->n_rows)
                return cellar_fail(err, CELLAR_ERANGE, "row %lld is outside '%s' (%lld rows)",
                                   (long long)rows->index[i], node_path(f->group),
                                   (long long)f->n_rows);
        return 0;
    }
    int64_t first = rows->start, last = dim_sel_at(rows, rows->count - 1);
    if (first < 0 || first >= f->n_rows || last < 0 || last >= f->n_rows)
        return cellar_fail(err, CELLAR_ERANGE, "rows outside '%s' (%lld rows)",
                           node_path(f->group), (long long)f->n_rows);
    return 0;
}

static int read_mask(node *mask, const dim_sel *rows, int64_t count, arena *a, uint8_t **out,
                     cellar_error *err)
{
    void *m;
    int rc = read_numeric(mask, rows, count, a, &m, err);
    if (rc)
        return rc;
    uint8_t *b = m; /* every mask type is one byte wide */
    for (int64_t i = 0; i < count; i++)
        b[i] = b[i] != 0;
    *out = b;
    return 0;
}

/* All categories of a categorical column, kept on the categories node
 * (node_memo): read once per store version. */
typedef struct cats_memo {
    arena *a;
    int64_t n;
    void *values; /* char *[n] or n numbers */
} cats_memo;

static const char cats_memo_key = 0;

static void cats_memo_free(void *value)
{
    cats_memo *m = value;
    if (m)
        arena_free(m->a);
    free(m);
}

static int cats_memo_build(node *cats, void *ctx, void **value, cellar_error *err)
{
    (void)ctx;
    cats_memo *m = calloc(1, sizeof *m);
    arena *a = m ? arena_new() : NULL;
    if (!a) {
        free(m);
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory reading '%s'", node_path(cats));
    }
    m->a = a;
    const node_info *in = node_get_info(cats);
    m->n = in->shape[0];
    dim_sel all = dim_sel_range(0, m->n);
    /* The shape sizes the whole read: bounded before it is allocated. */
    char what[300];
    snprintf(what, sizeof what, "the categories '%s'", node_path(cats));
    int rc = budget_check_whole(m->n, in->dtype == DT_STRING ? BUDGET_STRING_BYTES
                                                             : dtype_size(in->dtype),
                                what, err);
    if (rc) {
        cats_memo_free(m);
        return rc;
    }
    if (in->dtype == DT_STRING) {
        char **v = NULL;
        rc = read_strings(cats, &all, m->n, a, &v, err);
        m->values = v;
    } else {
        rc = read_numeric(cats, &all, m->n, a, &m->values, err);
    }
    if (rc) {
        cats_memo_free(m);
        return rc;
    }
    *value = m;
    return 0;
}

static int read_categories(const frame *f, const frame_column *c, arena *a, column_values *out,
                           cellar_error *err)
{
    (void)f;
    (void)a;
    void *v = NULL;
    int rc = node_memo(c->categories, &cats_memo_key, cats_memo_build, NULL, cats_memo_free, &v,
                       err);
    if (rc)
        return rc;
    const cats_memo *m = v;
    out->n_categories = m->n;
    out->categories_dtype = c->dtype;
    out->categories = m->values;
    return 0;
}

static int read_categorical(const frame *f, const frame_column *c, const dim_sel *rows,
                            arena *a, column_values *out, cellar_error *err)
{
    int rc = read_categories(f, c, a, out, err);
    if (rc)
        return rc;
    void *raw;
    rc = read_numeric(c->values, rows, rows->count, a, &raw, err);
    if (rc)
        return rc;
    int64_t *codes = arena_calloc(a, (size_t)(rows->count ? rows->count : 1), sizeof *codes);
    uint8_t *missing = arena_alloc(a, (size_t)rows->count);
    if (!codes || !missing)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory reading column '%s'", c->name);
    for (int64_t i = 0; i < rows->count; i++) {
        int64_t v;
        if (widen_int(c->codes_dtype, raw, i, &v) || v < -1 || v >= out->n_categories)
            return cellar_fail(err, CELLAR_EFORMAT,
                               "column '%s' of '%s': code at row %lld is outside its %lld "
                               "categories",
                               c->name, node_path(f->group), (long long)dim_sel_at(rows, i),
                               (long long)out->n_categories);
        codes[i] = v;
        missing[i] = v < 0;
    }
    out->dtype = DT_INT64;
    out->data = codes;
    out->missing = missing;
    return 0;
}

/* String indexes (nullable or not) up to this many rows are read whole
 * once per store version and kept on their node (every obs/var answer
 * names its rows); a nullable one's mask is still read per request. */
#define INDEX_KEEP_MAX_ROWS ((int64_t)1 << 20)

typedef struct strings_memo {
    arena *a;
    int64_t n;
    char **v;
} strings_memo;

static const char strings_memo_key = 0;

static void strings_memo_free(void *value)
{
    strings_memo *m = value;
    if (m)
        arena_free(m->a);
    free(m);
}

static int strings_memo_build(node *n, void *ctx, void **value, cellar_error *err)
{
    (void)ctx;
    strings_memo *m = calloc(1, sizeof *m);
    arena *a = m ? arena_new() : NULL;
    if (!a) {
        free(m);
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory reading '%s'", node_path(n));
    }
    m->a = a;
    m->n = node_get_info(n)->shape[0];
    m->v = arena_calloc(a, (size_t)(m->n ? m->n : 1), sizeof *m->v);
    int rc = m->v ? 0 : cellar_fail(err, CELLAR_ENOMEM, "out of memory reading '%s'",
                                    node_path(n));
    for (int64_t start = 0; !rc && start < m->n; start += SCAN_CHUNK) {
        int64_t k = m->n - start < SCAN_CHUNK ? m->n - start : SCAN_CHUNK;
        dim_sel sel = dim_sel_range(start, k);
        rc = node_read_strings(n, &sel, a, m->v + start, err);
    }
    if (rc) {
        strings_memo_free(m);
        return rc;
    }
    *value = m;
    return 0;
}

/* The selected rows of a string index from its kept copy; 1 when the
 * index is not one that is kept (the caller reads it). */
static int read_kept_index(const frame *f, const frame_column *c, const dim_sel *rows,
                           arena *a, column_values *out, cellar_error *err)
{
    if (c != &f->index ||
        (c->encoding != COL_STRING_ARRAY && c->encoding != COL_NULLABLE_STRING) || !c->values ||
        f->n_rows > INDEX_KEEP_MAX_ROWS || node_get_info(c->values)->ndim != 1)
        return 1;
    void *v = NULL;
    int rc = node_memo(c->values, &strings_memo_key, strings_memo_build, NULL, strings_memo_free,
                       &v, err);
    if (rc)
        return rc;
    const strings_memo *m = v;
    char **data = arena_calloc(a, (size_t)(rows->count ? rows->count : 1), sizeof *data);
    if (!data)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory reading column '%s'", c->name);
    for (int64_t i = 0; i < rows->count; i++) {
        int64_t r = dim_sel_at(rows, i);
        if (r < 0 || r >= m->n)
            return cellar_fail(err, CELLAR_ERANGE, "row %lld is outside '%s'", (long long)r,
                               node_path(c->values));
        data[i] = m->v[r];
    }
    out->data = data;
    out->dtype = DT_STRING;
    return c->mask ? read_mask(c->mask, rows, rows->count, a, &out->missing, err) : 0;
}

int frame_read_column(const frame *f, const frame_column *c, const dim_sel *rows, arena *a,
                      column_values *out, cellar_error *err)
{
    memset(out, 0, sizeof *out);
    out->column = c;
    if (!c->encoding)
        return explain_unreadable(f, c, err);
    int rc = check_rows(f, rows, err);
    if (rc)
        return rc;
    out->count = rows->count;
    rc = rows->count ? read_kept_index(f, c, rows, a, out, err) : 1;
    if (rc <= 0)
        return rc;
    switch (c->encoding) {
    case COL_CATEGORICAL:
        return read_categorical(f, c, rows, a, out, err);
    case COL_STRING_ARRAY:
    case COL_NULLABLE_STRING: {
        char **v = NULL;
        rc = read_strings(c->values, rows, rows->count, a, &v, err);
        out->data = v;
        out->dtype = DT_STRING;
        break;
    }
    default:
        rc = read_numeric(c->values, rows, rows->count, a, &out->data, err);
        out->dtype = node_get_info(c->values)->dtype;
        if (c->encoding == COL_NULLABLE_BOOLEAN) {
            uint8_t *b = out->data; /* bool values may come as int8/uint8 */
            for (int64_t i = 0; !rc && i < rows->count; i++)
                b[i] = b[i] != 0;
            out->dtype = DT_BOOL;
        }
        break;
    }
    if (!rc && c->mask)
        rc = read_mask(c->mask, rows, rows->count, a, &out->missing, err);
    return rc;
}

uint64_t frame_column_cost(const frame_column *c, int64_t rows)
{
    if (rows <= 0)
        return 0;
    uint64_t per;
    switch (c->encoding) {
    case COL_ARRAY: per = dtype_size(c->dtype); break;
    case COL_STRING_ARRAY: per = 16; break;
    case COL_NULLABLE_STRING: per = 17; break;
    case COL_NULLABLE_INTEGER:
    case COL_NULLABLE_BOOLEAN: per = dtype_size(c->dtype) + 1; break;
    default: per = 8; break; /* categorical codes; unreadable columns fail before I/O */
    }
    if ((uint64_t)rows > UINT64_MAX / per)
        return UINT64_MAX;
    return (uint64_t)rows * per;
}

/* ---- derived structures ---- */

/* store_derived, or a plain build without caching when s is NULL (unit
 * tests); then *owned is set and the caller frees the value. */
static int derived_get(struct store *s, const char *key, derived_build_fn build, void *ctx,
                       derived_free_fn free_fn, void **value, int *owned, cellar_error *err)
{
    *value = NULL;
    *owned = 0;
    if (s)
        return store_derived(s, key, build, ctx, free_fn, value, err);
    size_t bytes = 0;
    int rc = build(ctx, value, &bytes, err);
    if (!rc)
        *owned = 1;
    return rc;
}

/* Text of value i of a column read (index): NULL when missing. */
static const char *value_text(const column_values *v, int64_t i, char *buf, size_t size)
{
    if (v->missing && v->missing[i])
        return NULL;
    if (v->column->encoding == COL_CATEGORICAL) {
        int64_t code = ((const int64_t *)v->data)[i];
        if (v->categories_dtype == DT_STRING)
            return ((char *const *)v->categories)[code];
        format_number(v->categories_dtype,
                      (const unsigned char *)v->categories +
                          (size_t)code * dtype_size(v->categories_dtype),
                      buf, size);
        return buf;
    }
    if (v->dtype == DT_STRING)
        return ((char *const *)v->data)[i];
    format_number(v->dtype, (const unsigned char *)v->data + (size_t)i * dtype_size(v->dtype),
                  buf, size);
    return buf;
}

/* Calls fn(name, row, ctx) for every non-missing index entry of f, reading
 * SCAN_CHUNK rows at a time. */
typedef int (*index_visit_fn)(const char *name, int64_t row, void *ctx, cellar_error *err);

static int frame_scan_index(const frame *f, index_visit_fn fn, void *ctx, cellar_error *err)
{
    int rc = 0;
    for (int64_t start = 0; !rc && start < f->n_rows; start += SCAN_CHUNK) {
        arena *tmp = arena_new();
        if (!tmp)
            return cellar_fail(err, CELLAR_ENOMEM, "out of memory reading an index");
        int64_t n = f->n_rows - start < SCAN_CHUNK ? f->n_rows - start : SCAN_CHUNK;
        dim_sel sel = dim_sel_range(start, n);
        column_values v;
        rc = frame_read_column(f, &f->index, &sel, tmp, &v, err);
        for (int64_t i = 0; !rc && i < n; i++) {
            char buf[64];
            const char *name = value_text(&v, i, buf, sizeof buf);
            if (name)
                rc = fn(name, start + i, ctx, err);
        }
        arena_free(tmp);
    }
    return rc;
}

static int add_name(const char *name, int64_t row, void *ctx, cellar_error *err)
{
    return name_index_add(ctx, name, row, err);
}

typedef struct names_ctx {
    const frame *f;
} names_ctx;

static int build_names(void *ctx, void **value, size_t *bytes, cellar_error *err)
{
    const frame *f = ((names_ctx *)ctx)->f;
    name_index *ix = name_index_new(f->n_rows, err);
    if (!ix)
        return err ? err->code : CELLAR_ENOMEM;
    int rc = frame_scan_index(f, add_name, ix, err);
    if (rc) {
        name_index_free(ix);
        return rc;
    }
    *value = ix;
    *bytes = name_index_bytes(ix);
    return 0;
}

static void free_names(void *value)
{
    name_index_free(value);
}

/* "obs" for .../obs, "var" for .../var: how the error names a row. */
static int unknown_name(const frame *f, const char *name, cellar_error *err)
{
    const char *g = node_name(f->group);
    if (strcmp(g, "obs") == 0 || strcmp(g, "var") == 0)
        return cellar_fail(err, CELLAR_ENOTFOUND, "no %s name '%.200s' in '%s'", g, name,
                           node_path(f->group));
    return cellar_fail(err, CELLAR_ENOTFOUND, "no row named '%.200s' in '%s'", name,
                       node_path(f->group));
}

static int lookup_names(struct store *s, const frame *f, const char *const *names, size_t n,
                        int64_t *rows_out, int lenient, cellar_error *err)
{
    if (n == 0)
        return 0;
    const char *path = node_path(f->group);
    size_t klen = strlen(path) + sizeof "names:";
    char *key = malloc(klen);
    if (!key)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
    snprintf(key, klen, "names:%s", path);
    names_ctx ctx = {f};
    void *v = NULL;
    int owned = 0;
    int rc = derived_get(s, key, build_names, &ctx, free_names, &v, &owned, err);
    free(key);
    if (rc)
        return rc;
    for (size_t i = 0; i < n; i++) {
        rows_out[i] = name_index_find(v, names[i]);
        if (rows_out[i] < 0 && !lenient) {
            rc = unknown_name(f, names[i], err);
            break;
        }
    }
    if (owned)
        name_index_free(v);
    return rc;
}

int frame_lookup_names(struct store *s, const frame *f, const char *const *names, size_t n,
                       int64_t *rows_out, cellar_error *err)
{
    return lookup_names(s, f, names, n, rows_out, 0, err);
}

int frame_find_names(struct store *s, const frame *f, const char *const *names, size_t n,
                     int64_t *rows_out, cellar_error *err)
{
    return lookup_names(s, f, names, n, rows_out, 1, err);
}

/* ---- AnnData ---- */

/* Rows of a data frame group from its index alone (no arena, no column
 * parsing); legacy 1-D compound frames count their records. */
static int frame_length(node *g, int64_t *n, cellar_error *err)
{
    const node_info *in = node_get_info(g);
    if (in->type == NODE_ARRAY && in->ndim == 1 && !element_encoding(g)) {
        *n = in->shape[0];
        return 0;
    }
    frame f;
    cellar_error ignored;
    cellar_error_clear(&ignored);
    if (frame_open(g, NULL, &f, &ignored) == 0) { /* parsed once per version */
        *n = f.n_rows;
        return 0;
    }
    frame_column c;
    const char *key;
    int rc = frame_parse_index(g, &c, &key, err);
    if (!rc)
        *n = column_length(&c);
    return rc;
}

/* Shape of X: a 2-D array, or a sparse group's `shape` (legacy
 * `h5sparse_shape`).  Returns 0 when X gives no shape. */
static int x_shape(node *group, int64_t *rows, int64_t *cols)
{
    node *x = node_child_opt(group, "X");
    if (!x)
        return 0;
    const node_info *in = node_get_info(x);
    if (in->type == NODE_ARRAY) {
        if (in->ndim != 2)
            return 0;
        *rows = in->shape[0];
        *cols = in->shape[1];
        return 1;
    }
    const json_t *sh = json_object_get(node_attrs(x), "shape");
    if (!sh)
        sh = json_object_get(node_attrs(x), "h5sparse_shape");
    if (json_array_size(sh) != 2 || !json_is_integer(json_array_get(sh, 0)) ||
        !json_is_integer(json_array_get(sh, 1)))
        return 0;
    *rows = json_integer_value(json_array_get(sh, 0));
    *cols = json_integer_value(json_array_get(sh, 1));
    return *rows >= 0 && *cols >= 0;
}

int anndata_open(node *group, anndata_info *out, cellar_error *err)
{
    memset(out, 0, sizeof *out);
    if (node_get_info(group)->type != NODE_GROUP)
        return cellar_fail(err, CELLAR_EFORMAT, "'%s' is not an AnnData group",
                           node_path(group));
    out->group = group;
    int64_t xr = 0, xc = 0;
    int have_x = x_shape(group, &xr, &xc);
    node *obs = node_child_opt(group, "obs"), *var = node_child_opt(group, "var");
    int rc = 0;
    if (obs)
        rc = frame_length(obs, &out->n_obs, err);
    else
        out->n_obs = have_x ? xr : 0;
    if (rc)
        return rc;
    if (var)
        rc = frame_length(var, &out->n_vars, err);
    else
        out->n_vars = have_x ? xc : 0;
    return rc;
}

/* ---- MuData ---- */

static int mudata_mod_group(node *root, node **out, cellar_error *err)
{
    *out = node_child_opt(root, "mod");
    if (!*out || node_get_info(*out)->type != NODE_GROUP)
        return cellar_fail(err, CELLAR_EFORMAT, "'%s' has no 'mod' group: not a MuData",
                           node_path(root));
    return 0;
}

static int name_in(const char *name, const char *const *list, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(list[i], name) == 0)
            return 1;
    return 0;
}

int mudata_open(node *root, arena *a, mudata_info *out, cellar_error *err)
{
    memset(out, 0, sizeof *out);
    const json_t *ax = json_object_get(node_attrs(root), "axis");
    if (ax) {
        double v = json_is_integer(ax) ? (double)json_integer_value(ax)
                   : json_is_real(ax)  ? json_real_value(ax)
                                       : 99;
        if (v != 0 && v != 1 && v != -1)
            return cellar_fail(err, CELLAR_EFORMAT,
                               "'axis' attribute of MuData '%s' must be 0, 1 or -1",
                               node_path(root));
        out->axis = (int)v;
    }
    node *mod;
    int rc = mudata_mod_group(root, &mod, err);
    if (rc)
        return rc;
    const char **kids;
    size_t nk;
    rc = node_children(mod, a, &kids, &nk, err);
    if (rc)
        return rc;
    size_t ng = 0;
    for (size_t i = 0; i < nk; i++) {
        node *m = node_child_opt(mod, kids[i]);
        if (m && node_get_info(m)->type == NODE_GROUP)
            kids[ng++] = kids[i];
    }
    nk = ng;
    out->mods = kids;
    out->n_mods = nk;
    /* mudata's reader: mod-order only when every listed name exists, and
     * then exactly the listed modalities (duplicates dropped). */
    const json_t *mo = json_object_get(node_attrs(mod), "mod-order");
    if (json_is_string(mo) || json_is_array(mo)) {
        size_t n = json_is_string(mo) ? 1 : json_array_size(mo), k = 0;
        const char **v = arena_calloc(a, n ? n : 1, sizeof *v);
        if (!v)
            return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
        int all = 1;
        for (size_t i = 0; all && i < n; i++) {
            const char *s = json_string_value(json_is_string(mo) ? mo : json_array_get(mo, i));
            if (!s || !name_in(s, kids, nk))
                all = 0;
            else if (!name_in(s, v, k))
                v[k++] = s;
        }
        if (all) {
            out->mods = v;
            out->n_mods = k;
            out->has_mod_order = 1;
        }
    }
    return 0;
}

int mudata_mod(node *root, const char *mod, node **out, cellar_error *err)
{
    *out = NULL;
    node *g;
    int rc = mudata_mod_group(root, &g, err);
    if (rc)
        return rc;
    *out = node_child_opt(g, mod);
    if (!*out)
        return cellar_fail(err, CELLAR_ENOTFOUND, "no modality '%.200s' in '%s'", mod,
                           node_path(root));
    return 0;
}

typedef struct map_value {
    int64_t n;
    uint32_t *map;
} map_value;

static void free_map(void *value)
{
    map_value *m = value;
    if (m)
        free(m->map);
    free(m);
}

typedef struct map_ctx {
    node *root;
    const char *axis_name;  /* "obs" or "var" */
    const char *mod;
} map_ctx;

/* The stored map when it is as long as the global axis and every value is
 * at most the modality's length; 1 when it was used. */
static int use_stored_map(const map_ctx *m, int64_t n, int64_t mod_len, uint32_t *map,
                          cellar_error *err)
{
    char path[512];
    snprintf(path, sizeof path, "%smap/%s", m->axis_name, m->mod);
    node *stored = NULL;
    cellar_error ignored;
    cellar_error_clear(&ignored);
    if (strchr(m->mod, '/') || node_resolve(m->root, path, &stored, &ignored))
        return 0;
    const node_info *in = node_get_info(stored);
    if (in->type != NODE_ARRAY || in->ndim != 1 || in->shape[0] != n ||
        !dtype_is_integer(in->dtype))
        return 0;
    /* Read SCAN_CHUNK values at a time into the map, which is already
     * sized: a second whole copy would double what the axis costs. */
    size_t sz = dtype_size(in->dtype);
    void *raw = malloc(SCAN_CHUNK * sz);
    if (!raw) {
        cellar_fail(err, CELLAR_ENOMEM, "out of memory reading '%s'", node_path(stored));
        return -1;
    }
    int used = 1;
    for (int64_t start = 0; used == 1 && start < n; start += SCAN_CHUNK) {
        int64_t k = n - start < SCAN_CHUNK ? n - start : SCAN_CHUNK;
        dim_sel sel = dim_sel_range(start, k);
        if (node_read(stored, &sel, raw, (size_t)k * sz, err)) {
            used = -1;
            break;
        }
        for (int64_t i = 0; i < k; i++) {
            int64_t v;
            if (widen_int(in->dtype, raw, i, &v) || v < 0 || v > mod_len) {
                used = 0;
                break;
            }
            map[start + i] = (uint32_t)v;
        }
    }
    free(raw);
    return used;
}

typedef struct rebuild_ctx {
    name_index *local;
    uint32_t *map;
} rebuild_ctx;

static int map_name(const char *name, int64_t row, void *ctx, cellar_error *err)
{
    (void)err;
    rebuild_ctx *r = ctx;
    int64_t pos = name_index_find(r->local, name);
    r->map[row] = pos < 0 ? 0 : (uint32_t)(pos + 1);
    return 0;
}

static int build_map(void *ctx, void **value, size_t *bytes, cellar_error *err)
{
    const map_ctx *m = ctx;
    map_value *mv = NULL;
    name_index *local = NULL;
    frame global, mf;
    node *gframe, *mod, *mframe;
    int rc = node_child(m->root, m->axis_name, &gframe, err);
    if (!rc)
        rc = frame_open_index(gframe, &global, err);
    if (!rc)
        rc = mudata_mod(m->root, m->mod, &mod, err);
    if (!rc)
        rc = node_child(mod, m->axis_name, &mframe, err);
    if (!rc)
        rc = frame_open_index(mframe, &mf, err);
    if (rc)
        goto done;
    if (mf.n_rows >= (int64_t)UINT32_MAX) {
        rc = cellar_fail(err, CELLAR_EFORMAT, "modality '%s' has too many rows for a %smap",
                         m->mod, m->axis_name);
        goto done;
    }
    /* Four bytes a global row, whatever the modality holds: the global
     * index's shape sizes it, so it is bounded before it is allocated. */
    char what[300];
    snprintf(what, sizeof what, "the %smap of modality '%s' over '%s'", m->axis_name, m->mod,
             node_path(gframe));
    rc = budget_check_whole(global.n_rows, sizeof(uint32_t), what, err);
    if (rc)
        goto done;
    mv = calloc(1, sizeof *mv);
    if (mv && (uint64_t)global.n_rows <= SIZE_MAX / sizeof(uint32_t))
        mv->map = calloc((size_t)(global.n_rows ? global.n_rows : 1), sizeof(uint32_t));
    if (!mv || !mv->map) {
        rc = cellar_fail(err, CELLAR_ENOMEM, "out of memory building %smap '%s'", m->axis_name,
                         m->mod);
        goto done;
    }
    mv->n = global.n_rows;
    int used = use_stored_map(m, global.n_rows, mf.n_rows, mv->map, err);
    if (used < 0) {
        rc = err ? err->code : CELLAR_EIO;
        goto done;
    }
    if (!used) {
        names_ctx nc = {&mf};
        void *ix = NULL;
        size_t ignored;
        rc = build_names(&nc, &ix, &ignored, err);
        local = ix;
        if (rc)
            goto done;
        rebuild_ctx r = {local, mv->map};
        memset(mv->map, 0, (size_t)mv->n * sizeof(uint32_t));
        rc = frame_scan_index(&global, map_name, &r, err);
    }
done:
    name_index_free(local);
    if (rc) {
        free_map(mv);
        return rc;
    }
    *value = mv;
    *bytes = sizeof *mv + (size_t)mv->n * sizeof(uint32_t);
    return 0;
}

int mudata_map(struct store *s, node *root, const char *axis_name, const char *mod,
               const uint32_t **map, int64_t *n, cellar_error *err)
{
    *map = NULL;
    *n = 0;
    if (strcmp(axis_name, "obs") != 0 && strcmp(axis_name, "var") != 0)
        return cellar_fail(err, CELLAR_EINVAL, "map axis must be 'obs' or 'var', not '%s'",
                           axis_name);
    node *modg;
    int rc = mudata_mod(root, mod, &modg, err);
    if (rc)
        return rc;
    size_t klen = strlen(mod) + sizeof "map:obs:";
    char *key = malloc(klen);
    if (!key)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
    snprintf(key, klen, "map:%s:%s", axis_name, mod);
    map_ctx ctx = {root, axis_name, mod};
    void *v = NULL;
    int owned = 0;
    rc = derived_get(s, key, build_map, &ctx, free_map, &v, &owned, err);
    free(key);
    if (rc)
        return rc;
    map_value *mv = v;
    *map = mv->map;
    *n = mv->n;
    if (owned)
        free(mv); /* the caller owns the array itself (documented for s == NULL) */
    return 0;
}

/* ---- TreeData ---- */

static int scalar_is_null(node *n)
{
    const char *et = element_encoding(n);
    return node_get_info(n)->ndim < 0 || (et && strcmp(et, "null") == 0);
}

int treedata_open(node *root, arena *a, treedata_info *out, cellar_error *err)
{
    out->label = "tree";
    out->alignment = "leaves";
    out->allow_overlap = 1;
    node *n = node_child_opt(root, "label");
    if (n) {
        if (scalar_is_null(n)) {
            out->label = NULL;
        } else if (!(out->label = element_read_scalar_string(n, a, err))) {
            return err ? err->code : CELLAR_EFORMAT;
        }
    }
    n = node_child_opt(root, "alignment");
    if (n && !scalar_is_null(n) && !(out->alignment = element_read_scalar_string(n, a, err)))
        return err ? err->code : CELLAR_EFORMAT;
    n = node_child_opt(root, "allow_overlap");
    if (n && !scalar_is_null(n)) {
        const char *t = element_read_scalar_string(n, a, err);
        if (!t)
            return err ? err->code : CELLAR_EFORMAT;
        if (!strcmp(t, "True") || !strcmp(t, "true") || !strcmp(t, "1"))
            out->allow_overlap = 1;
        else if (!strcmp(t, "False") || !strcmp(t, "false") || !strcmp(t, "0"))
            out->allow_overlap = 0;
        else
            return cellar_fail(err, CELLAR_EFORMAT, "'%s' is not a boolean", node_path(n));
    }
    return 0;
}
