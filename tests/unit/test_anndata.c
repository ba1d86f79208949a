/* The AnnData/MuData/TreeData element reader over in-memory trees that
 * mirror what anndata 0.13, mudata 0.4 and treedata 0.4 write (attribute
 * names, types and layouts checked with h5py/h5dump on real files). */
#include <stdlib.h>
#include <string.h>

#include "storage/anndata/anndata.h"
#include "storage/anndata/name_index.h"
#include "storage/node_impl.h"
#include "tests/unit/mem_node.h"
#include "tests/unit/unit.h"

/* ---- builders mirroring the writers ---- */

/* A dataframe 0.2.0 group; column_order is JSON text ("[]" when empty, as
 * the HDF5 backend maps h5py's empty float64 array). */
static node *df_group(node *parent, const char *name, const char *index_key,
                      const char *column_order)
{
    node *g = mem_enc(mem_group(parent, name), "dataframe", "0.2.0");
    char buf[1024];
    snprintf(buf, sizeof buf, "{\"_index\": \"%s\", \"column-order\": %s}", index_key,
             column_order);
    return mem_attrs(g, buf);
}

/* pandas 3 string index/column: nullable-string-array with na-value NaN. */
static node *nullable_strings(node *parent, const char *name, int64_t n,
                              const char *const *values, const uint8_t *mask)
{
    node *g = mem_enc(mem_group(parent, name), "nullable-string-array", "0.1.0");
    mem_attrs(g, "{\"na-value\": \"NaN\"}");
    mem_enc(mem_strings1(g, "values", n, values), "string-array", "0.2.0");
    mem_enc(mem_array1(g, "mask", DT_BOOL, n, mask), "array", "0.2.0");
    return g;
}

static node *categorical(node *parent, const char *name, dtype_kind codes_dt, int64_t n,
                         const void *codes, const char *const *cats, int64_t ncats,
                         const char *ordered_json)
{
    node *g = mem_enc(mem_group(parent, name), "categorical", "0.2.0");
    char buf[64];
    snprintf(buf, sizeof buf, "{\"ordered\": %s}", ordered_json);
    mem_attrs(g, buf);
    mem_enc(mem_array1(g, "codes", codes_dt, n, codes), "array", "0.2.0");
    mem_enc(mem_strings1(g, "categories", ncats, cats), "string-array", "0.2.0");
    return g;
}

static const char *const CELLS[] = {"c1", "c2", "c3", "c4"};
static const uint8_t NO_MASK4[] = {0, 0, 0, 0};

/* The a.h5ad of the brief: obs with categorical, ordered numeric
 * categorical, nullable int/bool, string categorical, float32 and bool
 * columns, an index named "cellid"; var with an unnamed index; CSR X. */
static node *build_adata(void)
{
    node *root = mem_enc(mem_root(), "anndata", "0.1.0");
    node *x = mem_enc(mem_group(root, "X"), "csr_matrix", "0.1.0");
    mem_attrs(x, "{\"shape\": [4, 3]}");
    node *obs = df_group(root, "obs", "cellid",
                         "[\"cat\", \"ocat\", \"nint\", \"nbool\", \"s\", \"f\", \"b\"]");
    /* h5py lists children by name; mirror that order. */
    const uint8_t b[] = {1, 0, 1, 0};
    mem_enc(mem_array1(obs, "b", DT_BOOL, 4, b), "array", "0.2.0");
    const int8_t cat_codes[] = {0, 1, -1, 0};
    const char *const ab[] = {"a", "b"};
    categorical(obs, "cat", DT_INT8, 4, cat_codes, ab, 2, "false");
    nullable_strings(obs, "cellid", 4, CELLS, NO_MASK4);
    const float f[] = {0.5f, 1.5f, 2.5f, 3.5f};
    mem_enc(mem_array1(obs, "f", DT_FLOAT32, 4, f), "array", "0.2.0");
    node *nb = mem_enc(mem_group(obs, "nbool"), "nullable-boolean", "0.1.0");
    const uint8_t nbv[] = {1, 0, 0, 1}, nbm[] = {0, 1, 0, 0};
    mem_enc(mem_array1(nb, "mask", DT_BOOL, 4, nbm), "array", "0.2.0");
    mem_enc(mem_array1(nb, "values", DT_BOOL, 4, nbv), "array", "0.2.0");
    node *ni = mem_enc(mem_group(obs, "nint"), "nullable-integer", "0.1.0");
    const int32_t niv[] = {1, 0, 3, 4};
    const uint8_t nim[] = {0, 1, 0, 0};
    mem_enc(mem_array1(ni, "mask", DT_BOOL, 4, nim), "array", "0.2.0");
    mem_enc(mem_array1(ni, "values", DT_INT32, 4, niv), "array", "0.2.0");
    node *oc = mem_enc(mem_group(obs, "ocat"), "categorical", "0.2.0");
    mem_attrs(oc, "{\"ordered\": true}");
    const int64_t ocats[] = {1, 2};
    const int8_t occ[] = {0, 1, 0, 1};
    mem_enc(mem_array1(oc, "categories", DT_INT64, 2, ocats), "array", "0.2.0");
    mem_enc(mem_array1(oc, "codes", DT_INT8, 4, occ), "array", "0.2.0");
    const int8_t s_codes[] = {1, 2, -1, 0};
    const char *const wxy[] = {"w", "x", "y"};
    categorical(obs, "s", DT_INT8, 4, s_codes, wxy, 3, "false");
    node *var = df_group(root, "var", "_index", "[]");
    const char *const genes[] = {"g1", "g2", "g3"};
    nullable_strings(var, "_index", 3, genes, NO_MASK4);
    mem_enc(mem_group(root, "layers"), "dict", "0.1.0");
    mem_enc(mem_group(root, "uns"), "dict", "0.1.0");
    return root;
}

static cellar_error E(void)
{
    cellar_error e;
    cellar_error_clear(&e);
    return e;
}

static int contains(const char *s, const char *needle)
{
    return s && strstr(s, needle) != NULL;
}

/* ---- tests ---- */

void test_mem_node_reads(void)
{
    node *root = mem_root();
    int32_t v[12];
    for (int i = 0; i < 12; i++)
        v[i] = i;
    const int64_t shape[] = {3, 4};
    node *m = mem_array(root, "m", DT_INT32, 2, shape, v);
    CHECK(m != NULL);
    CHECK(mem_group(root, "m") == NULL); /* names are unique */
    cellar_error err = E();
    /* rows 2,0 (list), columns 3:0:-2 -> (3, 1) */
    const int64_t rows[] = {2, 0};
    dim_sel sel[2] = {{0, 1, 2, rows}, {3, -2, 2, NULL}};
    int32_t out[4] = {0};
    CHECK_EQ(node_read(m, sel, out, sizeof out, &err), 0);
    CHECK_EQ(out[0], 11);
    CHECK_EQ(out[1], 9);
    CHECK_EQ(out[2], 3);
    CHECK_EQ(out[3], 1);
    CHECK_EQ(mem_values_read(m), 4);
    /* an index out of range is ERANGE */
    const int64_t bad[] = {1, 3};
    dim_sel sel2[2] = {{0, 1, 2, bad}, {0, 1, 1, NULL}};
    int32_t out2[2];
    CHECK_EQ(node_read(m, sel2, out2, sizeof out2, &err), CELLAR_ERANGE);
    /* strings, 0-d scalar */
    const char *const s[] = {"hello"};
    node *sc = mem_strings(root, "s", 0, NULL, s);
    arena *a = arena_new();
    char *got = NULL;
    err = E();
    CHECK_EQ(node_read_strings(sc, NULL, a, &got, &err), 0);
    CHECK_STR_EQ(got, "hello");
    /* children in creation order */
    const char **names;
    size_t n;
    CHECK_EQ(node_children(root, a, &names, &n, &err), 0);
    CHECK_EQ(n, 2);
    CHECK_STR_EQ(names[0], "m");
    CHECK_STR_EQ(names[1], "s");
    node *found = NULL;
    CHECK_EQ(node_resolve(root, "/m", &found, &err), 0);
    CHECK(found == m);
    arena_free(a);
    node_tree_free(root);
}

void test_name_index(void)
{
    cellar_error err = E();
    name_index *ix = name_index_new(1000, &err);
    CHECK(ix != NULL);
    char buf[32];
    for (int i = 0; i < 1000; i++) {
        snprintf(buf, sizeof buf, "cell-%d", i % 900); /* 100 duplicates */
        CHECK_EQ(name_index_add(ix, buf, i, &err), 0);
    }
    CHECK_EQ(name_index_count(ix), 900);
    CHECK_EQ(name_index_find(ix, "cell-0"), 0);
    CHECK_EQ(name_index_find(ix, "cell-899"), 899);
    CHECK_EQ(name_index_find(ix, "cell-50"), 50); /* first occurrence, not 950 */
    CHECK_EQ(name_index_find(ix, "cell-900"), -1);
    CHECK_EQ(name_index_find(ix, ""), -1);
    CHECK(name_index_bytes(ix) > 900 * 8);
    name_index_free(ix);
    /* a larger table: every name found at its row */
    ix = name_index_new(200000, &err);
    for (int i = 0; i < 200000; i++) {
        snprintf(buf, sizeof buf, "%08x", (unsigned)i * 2654435761u);
        CHECK_EQ(name_index_add(ix, buf, i, &err), 0);
    }
    int bad = 0;
    for (int i = 0; i < 200000; i++) {
        snprintf(buf, sizeof buf, "%08x", (unsigned)i * 2654435761u);
        bad += name_index_find(ix, buf) != i;
    }
    CHECK_EQ(bad, 0);
    CHECK_EQ(name_index_find(ix, "zzzzzzzz"), -1);
    name_index_free(ix);
    CHECK(name_index_new((int64_t)1 << 33, &err) == NULL);
    CHECK_EQ(err.code, CELLAR_ENOMEM);
    err = E();
    ix = name_index_new(1, &err);
    CHECK_EQ(name_index_add(ix, "", 0, &err), 0);
    CHECK_EQ(name_index_find(ix, ""), 0);
    CHECK_EQ(name_index_add(ix, "b", 1, &err), CELLAR_EINTERNAL);
    name_index_free(ix);
}

void test_anndata_kind(void)
{
    node *ad = build_adata();
    CHECK_EQ(store_kind_detect(ad), KIND_ANNDATA);
    CHECK_STR_EQ(store_kind_name(store_kind_detect(ad)), "anndata");
    node_tree_free(ad);
    node *md = mem_enc(mem_root(), "MuData", "0.1.0");
    mem_group(md, "mod");
    CHECK_EQ(store_kind_detect(md), KIND_MUDATA);
    node_tree_free(md);
    node *legacy_md = mem_root(); /* no root attributes, a mod group */
    mem_group(legacy_md, "mod");
    CHECK_EQ(store_kind_detect(legacy_md), KIND_MUDATA);
    node_tree_free(legacy_md);
    node *td = mem_enc(mem_root(), "treedata", "0.1.0");
    CHECK_EQ(store_kind_detect(td), KIND_TREEDATA);
    node_tree_free(td);
    node *td01 = mem_enc(mem_root(), "anndata", "0.1.0"); /* treedata 0.1.x */
    mem_strings(td01, "obst", 0, NULL, (const char *const[]){"{}"});
    CHECK_EQ(store_kind_detect(td01), KIND_TREEDATA);
    node_tree_free(td01);
    node *old = mem_root(); /* anndata 0.7.x: no root attributes */
    mem_group(old, "obs");
    CHECK_EQ(store_kind_detect(old), KIND_ANNDATA);
    node_tree_free(old);
    node *odd = mem_enc(mem_root(), "dict", "0.1.0");
    CHECK_EQ(store_kind_detect(odd), KIND_UNKNOWN);
    CHECK_STR_EQ(store_kind_name(KIND_UNKNOWN), "unknown");
    node_tree_free(odd);
}

void test_frame_open_020(void)
{
    node *root = build_adata();
    arena *a = arena_new();
    cellar_error err = E();
    frame f;
    CHECK_EQ(frame_open(node_child_opt(root, "obs"), a, &f, &err), 0);
    CHECK_EQ(f.n_rows, 4);
    CHECK_STR_EQ(f.index_name, "cellid");
    CHECK_EQ(f.index.encoding, COL_NULLABLE_STRING);
    CHECK_STR_EQ(f.index.na_value, "NaN");
    CHECK_EQ(f.n_columns, 7);
    static const char *const names[] = {"cat", "ocat", "nint", "nbool", "s", "f", "b"};
    static const col_encoding encs[] = {COL_CATEGORICAL,      COL_CATEGORICAL,
                                        COL_NULLABLE_INTEGER, COL_NULLABLE_BOOLEAN,
                                        COL_CATEGORICAL,      COL_ARRAY,
                                        COL_ARRAY};
    static const dtype_kind dts[] = {DT_STRING, DT_INT64, DT_INT32, DT_BOOL,
                                     DT_STRING, DT_FLOAT32, DT_BOOL};
    for (size_t i = 0; i < 7 && i < f.n_columns; i++) {
        CHECK_STR_EQ(f.columns[i].name, names[i]);
        CHECK_EQ(f.columns[i].encoding, encs[i]);
        CHECK_EQ(f.columns[i].dtype, dts[i]);
    }
    CHECK_EQ(f.columns[0].codes_dtype, DT_INT8);
    CHECK_EQ(f.columns[0].ordered, 0);
    CHECK_EQ(f.columns[1].ordered, 1);
    CHECK(f.columns[2].mask != NULL);
    CHECK_EQ(frame_find_column(&f, "nbool"), 3);
    CHECK_EQ(frame_find_column(&f, "cellid"), -1);
    CHECK_EQ(frame_find_column(&f, "nope"), -1);
    CHECK_STR_EQ(col_encoding_name(f.columns[2].encoding), "nullable-integer");

    frame v;
    CHECK_EQ(frame_open(node_child_opt(root, "var"), a, &v, &err), 0);
    CHECK_EQ(v.n_rows, 3);
    CHECK(v.index_name == NULL); /* _index == "_index": pandas reports None */
    CHECK_EQ(v.n_columns, 0);

    /* not data frames */
    err = E();
    CHECK_EQ(frame_open(node_child_opt(root, "uns"), a, &v, &err), CELLAR_EFORMAT);
    CHECK(contains(err.detail, "'/uns'"));
    err = E();
    CHECK_EQ(frame_open(root, a, &v, &err), CELLAR_EFORMAT);
    arena_free(a);
    node_tree_free(root);
}

static column_values read_col(const frame *f, const char *name, dim_sel rows, arena *a, int *rc,
                              cellar_error *err)
{
    column_values v;
    memset(&v, 0, sizeof v);
    int i = frame_find_column(f, name);
    const frame_column *c = i < 0 ? &f->index : &f->columns[i];
    *rc = frame_read_column(f, c, &rows, a, &v, err);
    return v;
}

void test_frame_read_columns(void)
{
    node *root = build_adata();
    node *obs = node_child_opt(root, "obs");
    arena *a = arena_new();
    cellar_error err = E();
    frame f;
    CHECK_EQ(frame_open(obs, a, &f, &err), 0);
    int rc;

    /* float column, slice 1:3 reads exactly two values */
    column_values v = read_col(&f, "f", dim_sel_range(1, 2), a, &rc, &err);
    CHECK_EQ(rc, 0);
    CHECK_EQ(v.count, 2);
    CHECK_EQ(v.dtype, DT_FLOAT32);
    CHECK_DBL_EQ(((float *)v.data)[0], 1.5);
    CHECK_DBL_EQ(((float *)v.data)[1], 2.5);
    CHECK(v.missing == NULL);
    CHECK_EQ(mem_values_read(node_child_opt(obs, "f")), 2);

    /* bool column, negative step ::-1 */
    dim_sel rev = {3, -1, 4, NULL};
    v = read_col(&f, "b", rev, a, &rc, &err);
    CHECK_EQ(rc, 0);
    CHECK_EQ(v.dtype, DT_BOOL);
    CHECK_EQ(((uint8_t *)v.data)[0], 0);
    CHECK_EQ(((uint8_t *)v.data)[1], 1);
    CHECK_EQ(((uint8_t *)v.data)[3], 1);

    /* categorical: codes widened, -1 missing, all categories read */
    const int64_t pick[] = {2, 1, 2};
    dim_sel list = {0, 1, 3, pick};
    v = read_col(&f, "cat", list, a, &rc, &err);
    CHECK_EQ(rc, 0);
    CHECK_EQ(v.dtype, DT_INT64);
    CHECK_EQ(((int64_t *)v.data)[0], -1);
    CHECK_EQ(((int64_t *)v.data)[1], 1);
    CHECK_EQ(v.missing[0], 1);
    CHECK_EQ(v.missing[1], 0);
    CHECK_EQ(v.n_categories, 2);
    CHECK_EQ(v.categories_dtype, DT_STRING);
    CHECK_STR_EQ(((char **)v.categories)[1], "b");
    CHECK_EQ(mem_values_read(node_child_opt(node_child_opt(obs, "cat"), "codes")), 3);

    /* numeric categories */
    v = read_col(&f, "ocat", dim_sel_range(0, 4), a, &rc, &err);
    CHECK_EQ(rc, 0);
    CHECK_EQ(v.categories_dtype, DT_INT64);
    CHECK_EQ(((int64_t *)v.categories)[1], 2);
    CHECK_EQ(((int64_t *)v.data)[3], 1);

    /* nullable integer: mask read for the same rows */
    dim_sel step2 = {0, 2, 2, NULL}; /* rows 0, 2 */
    v = read_col(&f, "nint", step2, a, &rc, &err);
    CHECK_EQ(rc, 0);
    CHECK_EQ(v.dtype, DT_INT32);
    CHECK_EQ(((int32_t *)v.data)[1], 3);
    CHECK_EQ(v.missing[0], 0);
    v = read_col(&f, "nint", dim_sel_range(1, 1), a, &rc, &err);
    CHECK_EQ(v.missing[0], 1);
    CHECK_EQ(mem_values_read(node_child_opt(node_child_opt(obs, "nint"), "mask")), 3);

    /* nullable boolean */
    v = read_col(&f, "nbool", dim_sel_range(0, 4), a, &rc, &err);
    CHECK_EQ(rc, 0);
    CHECK_EQ(v.dtype, DT_BOOL);
    CHECK_EQ(((uint8_t *)v.data)[0], 1);
    CHECK_EQ(v.missing[1], 1);
    CHECK_EQ(v.missing[2], 0);

    /* the index (nullable strings) */
    v = read_col(&f, "(index)", dim_sel_range(2, 2), a, &rc, &err);
    CHECK_EQ(rc, 0);
    CHECK_EQ(v.dtype, DT_STRING);
    CHECK_STR_EQ(((char **)v.data)[0], "c3");
    CHECK_STR_EQ(((char **)v.data)[1], "c4");
    CHECK_EQ(v.missing[1], 0);

    /* empty selection */
    v = read_col(&f, "f", dim_sel_range(0, 0), a, &rc, &err);
    CHECK_EQ(rc, 0);
    CHECK_EQ(v.count, 0);

    /* out of range */
    err = E();
    v = read_col(&f, "f", dim_sel_range(3, 2), a, &rc, &err);
    CHECK_EQ(rc, CELLAR_ERANGE);
    const int64_t far[] = {0, 4};
    dim_sel farsel = {0, 1, 2, far};
    err = E();
    v = read_col(&f, "cat", farsel, a, &rc, &err);
    CHECK_EQ(rc, CELLAR_ERANGE);
    CHECK(contains(err.detail, "row 4"));

    /* costs */
    CHECK_EQ(frame_column_cost(&f.columns[frame_find_column(&f, "f")], 10), 40);
    CHECK_EQ(frame_column_cost(&f.columns[0], 10), 80);
    CHECK_EQ(frame_column_cost(&f.columns[2], 10), 50);
    CHECK_EQ(frame_column_cost(&f.index, 10), 170);
    CHECK_EQ(frame_column_cost(&f.columns[0], 0), 0);
    CHECK(frame_column_cost(&f.columns[0], INT64_MAX) == UINT64_MAX);
    arena_free(a);
    node_tree_free(root);
}

void test_frame_categorical_variants(void)
{
    node *root = mem_root();
    node *obs = df_group(root, "obs", "_index", "[\"c16\", \"c32\", \"c64\", \"o1\", \"bad\"]");
    mem_enc(mem_strings1(obs, "_index", 4, CELLS), "string-array", "0.2.0");
    const char *const abc[] = {"a", "b", "c"};
    const int16_t c16[] = {2, -1, 0, 1};
    const int32_t c32[] = {0, 0, -1, 2};
    const int64_t c64[] = {1, 1, 1, -1};
    categorical(obs, "c16", DT_INT16, 4, c16, abc, 3, "0");
    categorical(obs, "c32", DT_INT32, 4, c32, abc, 3, "1");
    categorical(obs, "c64", DT_INT64, 4, c64, abc, 3, "false");
    /* float categories, ordered true */
    node *o1 = mem_enc(mem_group(obs, "o1"), "categorical", "0.2.0");
    mem_attrs(o1, "{\"ordered\": true}");
    const double fc[] = {0.5, 1.0};
    const int8_t oc[] = {1, 0, 1, 0};
    mem_enc(mem_array1(o1, "categories", DT_FLOAT64, 2, fc), "array", "0.2.0");
    mem_enc(mem_array1(o1, "codes", DT_INT8, 4, oc), "array", "0.2.0");
    const int8_t badc[] = {0, 3, 0, 0}; /* 3 is outside two categories */
    categorical(obs, "bad", DT_INT8, 4, badc, abc, 2, "false");

    arena *a = arena_new();
    cellar_error err = E();
    frame f;
    CHECK_EQ(frame_open(obs, a, &f, &err), 0);
    CHECK_EQ(f.index.encoding, COL_STRING_ARRAY);
    CHECK_EQ(f.columns[0].codes_dtype, DT_INT16);
    CHECK_EQ(f.columns[0].ordered, 0);
    CHECK_EQ(f.columns[1].ordered, 1);
    CHECK_EQ(f.columns[3].ordered, 1);
    CHECK_EQ(f.columns[3].dtype, DT_FLOAT64);
    int rc;
    column_values v = read_col(&f, "c16", dim_sel_range(0, 4), a, &rc, &err);
    CHECK_EQ(rc, 0);
    CHECK_EQ(((int64_t *)v.data)[0], 2);
    CHECK_EQ(((int64_t *)v.data)[1], -1);
    CHECK_EQ(v.missing[1], 1);
    v = read_col(&f, "c32", dim_sel_range(2, 2), a, &rc, &err);
    CHECK_EQ(((int64_t *)v.data)[0], -1);
    CHECK_EQ(((int64_t *)v.data)[1], 2);
    v = read_col(&f, "c64", dim_sel_range(3, 1), a, &rc, &err);
    CHECK_EQ(v.missing[0], 1);
    v = read_col(&f, "o1", dim_sel_range(0, 1), a, &rc, &err);
    CHECK_DBL_EQ(((double *)v.categories)[((int64_t *)v.data)[0]], 1.0);
    err = E();
    v = read_col(&f, "bad", dim_sel_range(0, 4), a, &rc, &err);
    CHECK_EQ(rc, CELLAR_EFORMAT);
    CHECK(contains(err.detail, "'bad'"));
    CHECK(contains(err.detail, "row 1"));
    err = E();
    v = read_col(&f, "bad", dim_sel_range(2, 2), a, &rc, &err); /* rows without the bad code */
    CHECK_EQ(rc, 0);
    arena_free(a);
    node_tree_free(root);
}

void test_frame_unreadable_columns(void)
{
    node *root = mem_root();
    node *obs = df_group(root, "obs", "_index",
                         "[\"ok\", \"short\", \"awk\", \"gone\", \"mask\", \"twod\", \"ver\", "
                         "\"plain\", \"scalar\"]");
    mem_enc(mem_strings1(obs, "_index", 4, CELLS), "string-array", "0.2.0");
    const double d4[] = {1, 2, 3, 4};
    mem_enc(mem_array1(obs, "ok", DT_FLOAT64, 4, d4), "array", "0.2.0");
    const int8_t c3[] = {0, 0, 0};
    categorical(obs, "short", DT_INT8, 3, c3, (const char *const[]){"a"}, 1, "false");
    mem_attrs(mem_enc(mem_group(obs, "awk"), "awkward-array", "0.1.0"), "{\"length\": 4}");
    node *ni = mem_enc(mem_group(obs, "mask"), "nullable-integer", "0.1.0");
    const int32_t niv[] = {1, 2, 3, 4};
    const uint8_t m3[] = {0, 0, 0};
    mem_enc(mem_array1(ni, "values", DT_INT32, 4, niv), "array", "0.2.0");
    mem_enc(mem_array1(ni, "mask", DT_BOOL, 3, m3), "array", "0.2.0");
    const int64_t sh[] = {4, 2};
    const double d8[8] = {0};
    mem_enc(mem_array(obs, "twod", DT_FLOAT64, 2, sh, d8), "array", "0.2.0");
    mem_enc(mem_array1(obs, "ver", DT_FLOAT64, 4, d4), "array", "9.9.9");
    mem_group(obs, "plain");
    mem_enc(mem_strings(obs, "scalar", 0, NULL, (const char *const[]){"x"}), "string",
            "0.2.0");

    arena *a = arena_new();
    cellar_error err = E();
    frame f;
    CHECK_EQ(frame_open(obs, a, &f, &err), 0);
    CHECK_EQ(err.code, 0);
    CHECK_EQ(f.n_columns, 9);
    CHECK_EQ(f.columns[0].encoding, COL_ARRAY);
    static const struct {
        const char *name, *detail;
    } bad[] = {{"short", "codes has 3 values"}, {"awk", "awkward-array"},
               {"gone", "missing"},             {"mask", "mask has 3 values"},
               {"twod", "not a 1-D array"},     {"ver", "9.9.9"},
               {"plain", "without an encoding-type"},
               {"scalar", "'string'"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int k = frame_find_column(&f, bad[i].name);
        CHECK(k > 0);
        if (k < 0)
            continue;
        CHECK_EQ(f.columns[k].encoding, 0);
        int rc;
        err = E();
        read_col(&f, bad[i].name, dim_sel_range(0, 1), a, &rc, &err);
        CHECK_EQ(rc, CELLAR_EFORMAT);
        if (!contains(err.detail, bad[i].detail) || !contains(err.detail, bad[i].name)) {
            fprintf(stderr, "detail for %s: %s\n", bad[i].name, err.detail);
            CHECK(0);
        }
    }
    /* a frame whose index mask does not fit fails as a whole */
    node *var = df_group(root, "var", "_index", "[]");
    const uint8_t m2[] = {0, 0};
    nullable_strings(var, "_index", 4, CELLS, NO_MASK4);
    node *var2 = df_group(root, "var2", "_index", "[]");
    node *ix = mem_enc(mem_group(var2, "_index"), "nullable-string-array", "0.1.0");
    mem_strings1(ix, "values", 4, CELLS);
    mem_array1(ix, "mask", DT_BOOL, 2, m2);
    err = E();
    CHECK_EQ(frame_open(var, a, &f, &err), 0);
    err = E();
    CHECK_EQ(frame_open(var2, a, &f, &err), CELLAR_EFORMAT);
    CHECK(contains(err.detail, "mask has 2 values"));
    /* missing index, unknown dataframe version */
    node *v3 = df_group(root, "var3", "names", "[]");
    err = E();
    CHECK_EQ(frame_open(v3, a, &f, &err), CELLAR_EFORMAT);
    CHECK(contains(err.detail, "index 'names'"));
    node *v4 = mem_attrs(df_group(root, "var4", "_index", "[]"),
                         "{\"encoding-version\": \"0.3.0\"}");
    mem_strings1(v4, "_index", 4, CELLS);
    err = E();
    CHECK_EQ(frame_open(v4, a, &f, &err), CELLAR_EFORMAT);
    CHECK(contains(err.detail, "0.3.0"));
    arena_free(a);
    node_tree_free(root);
}

/* anndata 0.7.x: dataframe 0.1.0, categorical columns as codes plus a
 * `categories` path (absolute from HDF5 references, relative in zarr), the
 * categories dataset carrying `ordered`. */
void test_frame_legacy_010(void)
{
    node *root = mem_root();
    node *obs = mem_enc(mem_group(root, "obs"), "dataframe", "0.1.0");
    mem_attrs(obs, "{\"_index\": \"index\", \"column-order\": [\"abs\", \"rel\", \"n\"]}");
    node *cats = mem_group(obs, "__categories");
    const char *const xy[] = {"x", "y"};
    mem_attrs(mem_strings1(cats, "abs", 2, xy), "{\"ordered\": false}");
    const int32_t nums[] = {10, 20, 30};
    mem_attrs(mem_array1(cats, "rel", DT_INT32, 3, nums), "{\"ordered\": 1}");
    const int8_t ca[] = {1, 0, -1, 1}, cr[] = {2, 2, 0, 1};
    mem_attrs(mem_array1(obs, "abs", DT_INT8, 4, ca), "{\"categories\": \"/obs/__categories/abs\"}");
    mem_attrs(mem_array1(obs, "rel", DT_INT8, 4, cr), "{\"categories\": \"__categories/rel\"}");
    const int64_t n[] = {5, 6, 7, 8};
    mem_array1(obs, "n", DT_INT64, 4, n);
    mem_strings1(obs, "index", 4, CELLS);

    arena *a = arena_new();
    cellar_error err = E();
    frame f;
    CHECK_EQ(frame_open(obs, a, &f, &err), 0);
    CHECK_STR_EQ(f.index_name, "index");
    CHECK_EQ(f.n_rows, 4);
    CHECK_EQ(f.n_columns, 3);
    CHECK_EQ(f.columns[0].encoding, COL_CATEGORICAL);
    CHECK_EQ(f.columns[0].ordered, 0);
    CHECK_EQ(f.columns[1].encoding, COL_CATEGORICAL);
    CHECK_EQ(f.columns[1].ordered, 1);
    CHECK_EQ(f.columns[1].dtype, DT_INT32);
    CHECK_EQ(f.columns[2].encoding, COL_ARRAY);
    int rc;
    column_values v = read_col(&f, "abs", dim_sel_range(0, 4), a, &rc, &err);
    CHECK_EQ(rc, 0);
    CHECK_STR_EQ(((char **)v.categories)[((int64_t *)v.data)[0]], "y");
    CHECK_EQ(v.missing[2], 1);
    v = read_col(&f, "rel", dim_sel_range(0, 1), a, &rc, &err);
    CHECK_EQ(((int32_t *)v.categories)[((int64_t *)v.data)[0]], 30);

    /* without column-order: children but the index and __categories */
    json_object_del(obs->attrs, "column-order");
    CHECK_EQ(frame_open(obs, a, &f, &err), 0);
    CHECK_EQ(f.n_columns, 3);
    CHECK_STR_EQ(f.columns[0].name, "abs");
    CHECK_STR_EQ(f.columns[2].name, "n");
    /* a lone string column-order (odd writers) */
    mem_attrs(obs, "{\"column-order\": \"n\"}");
    CHECK_EQ(frame_open(obs, a, &f, &err), 0);
    CHECK_EQ(f.n_columns, 1);
    CHECK_STR_EQ(f.columns[0].name, "n");
    /* a dangling categories path: the column is unreadable */
    mem_attrs(obs, "{\"column-order\": [\"dang\"]}");
    mem_attrs(mem_array1(obs, "dang", DT_INT8, 4, ca), "{\"categories\": \"/nowhere\"}");
    CHECK_EQ(frame_open(obs, a, &f, &err), 0);
    CHECK_EQ(f.columns[0].encoding, 0);
    err = E();
    read_col(&f, "dang", dim_sel_range(0, 1), a, &rc, &err);
    CHECK_EQ(rc, CELLAR_EFORMAT);
    CHECK(contains(err.detail, "/nowhere"));
    arena_free(a);
    node_tree_free(root);
}

void test_frame_lookup_names(void)
{
    node *root = build_adata();
    arena *a = arena_new();
    cellar_error err = E();
    frame f;
    CHECK_EQ(frame_open(node_child_opt(root, "obs"), a, &f, &err), 0);
    const char *names[] = {"c4", "c1", "c4"};
    int64_t rows[3] = {-7, -7, -7};
    CHECK_EQ(frame_lookup_names(NULL, &f, names, 3, rows, &err), 0);
    CHECK_EQ(rows[0], 3);
    CHECK_EQ(rows[1], 0);
    CHECK_EQ(rows[2], 3);
    const char *bad[] = {"c2", "zz"};
    err = E();
    CHECK_EQ(frame_lookup_names(NULL, &f, bad, 2, rows, &err), CELLAR_ENOTFOUND);
    CHECK(contains(err.detail, "no obs name 'zz'"));

    /* duplicates map to the first; masked (NA) entries match nothing;
     * numeric indexes match their decimal text */
    node *df = df_group(root, "other", "_index", "[]");
    const char *const dup[] = {"x", "y", "x", ""};
    const uint8_t mask[] = {0, 0, 0, 1};
    nullable_strings(df, "_index", 4, dup, mask);
    CHECK_EQ(frame_open(df, a, &f, &err), 0);
    const char *q[] = {"x", "y"};
    CHECK_EQ(frame_lookup_names(NULL, &f, q, 2, rows, &err), 0);
    CHECK_EQ(rows[0], 0);
    CHECK_EQ(rows[1], 1);
    const char *empty[] = {""};
    err = E();
    CHECK_EQ(frame_lookup_names(NULL, &f, empty, 1, rows, &err), CELLAR_ENOTFOUND);
    CHECK(contains(err.detail, "no row named ''"));

    node *num = df_group(root, "num", "id", "[]");
    const int64_t ids[] = {7, -3, 100000000000};
    mem_enc(mem_array1(num, "id", DT_INT64, 3, ids), "array", "0.2.0");
    CHECK_EQ(frame_open(num, a, &f, &err), 0);
    CHECK_EQ(f.index.encoding, COL_ARRAY);
    const char *nq[] = {"100000000000", "-3"};
    CHECK_EQ(frame_lookup_names(NULL, &f, nq, 2, rows, &err), 0);
    CHECK_EQ(rows[0], 2);
    CHECK_EQ(rows[1], 1);
    node *fl = df_group(root, "fl", "x", "[]");
    const double xs[] = {1.0, 0.1, 2.5e20};
    mem_enc(mem_array1(fl, "x", DT_FLOAT64, 3, xs), "array", "0.2.0");
    CHECK_EQ(frame_open(fl, a, &f, &err), 0);
    const char *fq[] = {"1.0", "0.1", "2.5e+20"};
    CHECK_EQ(frame_lookup_names(NULL, &f, fq, 3, rows, &err), 0);
    CHECK_EQ(rows[0], 0);
    CHECK_EQ(rows[1], 1);
    CHECK_EQ(rows[2], 2);
    arena_free(a);
    node_tree_free(root);
}

void test_anndata_shape(void)
{
    cellar_error err = E();
    anndata_info info;
    node *root = build_adata();
    CHECK_EQ(anndata_open(root, &info, &err), 0);
    CHECK_EQ(info.n_obs, 4);
    CHECK_EQ(info.n_vars, 3);
    CHECK(info.group == root);
    node_tree_free(root);

    /* no obs/var: dense X */
    root = mem_enc(mem_root(), "anndata", "0.1.0");
    const int64_t sh[] = {5, 2};
    const float z[10] = {0};
    mem_enc(mem_array(root, "X", DT_FLOAT32, 2, sh, z), "array", "0.2.0");
    CHECK_EQ(anndata_open(root, &info, &err), 0);
    CHECK_EQ(info.n_obs, 5);
    CHECK_EQ(info.n_vars, 2);
    node_tree_free(root);

    /* sparse X, legacy h5sparse_shape; obs present, var missing */
    root = mem_root();
    mem_attrs(mem_group(root, "X"), "{\"h5sparse_format\": \"csr\", \"h5sparse_shape\": [4, 9]}");
    node *obs = df_group(root, "obs", "_index", "[]");
    mem_strings1(obs, "_index", 4, CELLS);
    CHECK_EQ(anndata_open(root, &info, &err), 0);
    CHECK_EQ(info.n_obs, 4);
    CHECK_EQ(info.n_vars, 9);
    node_tree_free(root);

    /* nothing: 0 x 0; null X */
    root = mem_root();
    mem_enc(mem_empty(root, "X", DT_FLOAT32), "null", "0.1.0");
    CHECK_EQ(anndata_open(root, &info, &err), 0);
    CHECK_EQ(info.n_obs, 0);
    CHECK_EQ(info.n_vars, 0);
    /* a broken obs is an error */
    mem_enc(mem_group(root, "obs"), "dataframe", "0.2.0");
    err = E();
    CHECK_EQ(anndata_open(root, &info, &err), CELLAR_EFORMAT);
    CHECK(contains(err.detail, "/obs"));
    node_tree_free(root);
}

/* m0.h5mu: rna (c1 c2 c3 x g1 g2) and prot (c2 c3 c5 x p1 p2), axis 0,
 * mod-order [rna, prot], group order prot, rna (h5py: by name). */
static node *modality(node *mod, const char *name, const char *const *obs_names, int64_t n_obs,
                      const char *const *var_names, int64_t n_vars)
{
    node *m = mem_enc(mem_group(mod, name), "anndata", "0.1.0");
    mem_attrs(m, "{\"encoder\": \"mudata\", \"encoder-version\": \"0.4.1\"}");
    const int64_t sh[] = {n_obs, n_vars};
    float *x = calloc((size_t)(n_obs * n_vars + 1), sizeof *x);
    mem_enc(mem_array(m, "X", DT_FLOAT32, 2, sh, x), "array", "0.2.0");
    free(x);
    uint8_t nomask[16] = {0};
    nullable_strings(df_group(m, "obs", "_index", "[]"), "_index", n_obs, obs_names, nomask);
    nullable_strings(df_group(m, "var", "_index", "[]"), "_index", n_vars, var_names, nomask);
    return m;
}

static node *build_mudata(int with_maps)
{
    node *root = mem_enc(mem_root(), "MuData", "0.1.0");
    mem_attrs(root, "{\"axis\": 0, \"encoder\": \"mudata\", \"encoder-version\": \"0.4.1\"}");
    node *mod = mem_attrs(mem_group(root, "mod"), "{\"mod-order\": [\"rna\", \"prot\"]}");
    modality(mod, "prot", (const char *const[]){"c2", "c3", "c5"}, 3,
             (const char *const[]){"p1", "p2"}, 2);
    modality(mod, "rna", (const char *const[]){"c1", "c2", "c3"}, 3,
             (const char *const[]){"g1", "g2"}, 2);
    uint8_t nomask[4] = {0};
    nullable_strings(df_group(root, "obs", "_index", "[]"), "_index", 4,
                     (const char *const[]){"c1", "c2", "c3", "c5"}, nomask);
    nullable_strings(df_group(root, "var", "_index", "[]"), "_index", 4,
                     (const char *const[]){"g1", "g2", "p1", "p2"}, nomask);
    if (with_maps) {
        node *om = mem_enc(mem_group(root, "obsmap"), "dict", "0.1.0");
        const uint32_t prot[] = {0, 1, 2, 3}, rna[] = {1, 2, 3, 0};
        mem_enc(mem_array1(om, "prot", DT_UINT32, 4, prot), "array", "0.2.0");
        mem_enc(mem_array1(om, "rna", DT_UINT32, 4, rna), "array", "0.2.0");
        node *vm = mem_enc(mem_group(root, "varmap"), "dict", "0.1.0");
        const uint32_t vprot[] = {0, 0, 1, 2}, vrna[] = {1, 2, 0, 0};
        mem_enc(mem_array1(vm, "prot", DT_UINT32, 4, vprot), "array", "0.2.0");
        mem_enc(mem_array1(vm, "rna", DT_UINT32, 4, vrna), "array", "0.2.0");
    }
    return root;
}

void test_mudata_open(void)
{
    node *root = build_mudata(1);
    arena *a = arena_new();
    cellar_error err = E();
    mudata_info mi;
    CHECK_EQ(mudata_open(root, a, &mi, &err), 0);
    CHECK_EQ(mi.axis, 0);
    CHECK_EQ(mi.n_mods, 2);
    CHECK_EQ(mi.has_mod_order, 1);
    CHECK_STR_EQ(mi.mods[0], "rna");
    CHECK_STR_EQ(mi.mods[1], "prot");
    node *mod = node_child_opt(root, "mod");
    /* a listed name that does not exist: group order (groups only) */
    const uint8_t one = 1;
    mem_array1(mod, "stray", DT_BOOL, 1, &one);
    mem_attrs(mod, "{\"mod-order\": [\"rna\", \"atac\"]}");
    CHECK_EQ(mudata_open(root, a, &mi, &err), 0);
    CHECK_EQ(mi.has_mod_order, 0);
    CHECK_EQ(mi.n_mods, 2);
    CHECK_STR_EQ(mi.mods[0], "prot");
    CHECK_STR_EQ(mi.mods[1], "rna");
    /* a subset: exactly the listed ones, as mudata reads it */
    mem_attrs(mod, "{\"mod-order\": [\"rna\"]}");
    CHECK_EQ(mudata_open(root, a, &mi, &err), 0);
    CHECK_EQ(mi.has_mod_order, 1);
    CHECK_EQ(mi.n_mods, 1);
    CHECK_STR_EQ(mi.mods[0], "rna");
    /* axis: 1, -1, missing (0), bad */
    mem_attrs(root, "{\"axis\": 1}");
    CHECK_EQ(mudata_open(root, a, &mi, &err), 0);
    CHECK_EQ(mi.axis, 1);
    mem_attrs(root, "{\"axis\": -1}");
    CHECK_EQ(mudata_open(root, a, &mi, &err), 0);
    CHECK_EQ(mi.axis, -1);
    json_object_del(root->attrs, "axis");
    CHECK_EQ(mudata_open(root, a, &mi, &err), 0);
    CHECK_EQ(mi.axis, 0);
    mem_attrs(root, "{\"axis\": 2}");
    err = E();
    CHECK_EQ(mudata_open(root, a, &mi, &err), CELLAR_EFORMAT);
    CHECK(contains(err.detail, "axis"));

    node *m = NULL;
    err = E();
    CHECK_EQ(mudata_mod(root, "prot", &m, &err), 0);
    CHECK_STR_EQ(node_path(m), "/mod/prot");
    anndata_info info;
    CHECK_EQ(anndata_open(m, &info, &err), 0);
    CHECK_EQ(info.n_obs, 3);
    CHECK_EQ(info.n_vars, 2);
    CHECK_EQ(mudata_mod(root, "atac", &m, &err), CELLAR_ENOTFOUND);
    CHECK(contains(err.detail, "'atac'"));
    /* root shape: global obs/var */
    CHECK_EQ(anndata_open(root, &info, &err), 0);
    CHECK_EQ(info.n_obs, 4);
    CHECK_EQ(info.n_vars, 4);
    arena_free(a);
    node_tree_free(root);
}

static void check_map(node *root, const char *axis, const char *mod, const uint32_t *want,
                      int64_t n_want)
{
    cellar_error err = E();
    const uint32_t *map = NULL;
    int64_t n = -1;
    CHECK_EQ(mudata_map(NULL, root, axis, mod, &map, &n, &err), 0);
    CHECK_EQ(n, n_want);
    for (int64_t i = 0; map && i < n && i < n_want; i++)
        if (map[i] != want[i]) {
            fprintf(stderr, "%smap %s [%lld]: %u != %u\n", axis, mod, (long long)i, map[i],
                    want[i]);
            CHECK(0);
        }
    free((void *)map);
}

void test_mudata_map(void)
{
    /* stored maps, as mudata wrote them */
    node *root = build_mudata(1);
    check_map(root, "obs", "rna", (const uint32_t[]){1, 2, 3, 0}, 4);
    check_map(root, "obs", "prot", (const uint32_t[]){0, 1, 2, 3}, 4);
    check_map(root, "var", "rna", (const uint32_t[]){1, 2, 0, 0}, 4);
    check_map(root, "var", "prot", (const uint32_t[]){0, 0, 1, 2}, 4);
    /* a stored map that fits is trusted even where names would differ */
    node *om = node_child_opt(root, "obsmap");
    const uint32_t odd[] = {3, 2, 1, 0};
    mem_array1(om, "odd", DT_UINT32, 4, odd);
    node *mod = node_child_opt(root, "mod");
    modality(mod, "odd", (const char *const[]){"c1", "c2", "c3"}, 3,
             (const char *const[]){"g1", "g2"}, 2);
    check_map(root, "obs", "odd", odd, 4);
    /* too long, or a value past the modality: rebuilt by name */
    const uint32_t long5[] = {1, 2, 3, 0, 0}, big[] = {1, 2, 9, 0};
    mem_array1(om, "long", DT_UINT32, 5, long5);
    modality(mod, "long", (const char *const[]){"c5", "c1"}, 2,
             (const char *const[]){"g1"}, 1);
    check_map(root, "obs", "long", (const uint32_t[]){2, 0, 0, 1}, 4);
    mem_array1(om, "big", DT_UINT32, 4, big);
    modality(mod, "big", (const char *const[]){"c3", "c2", "c2"}, 3,
             (const char *const[]){"g1"}, 1);
    check_map(root, "obs", "big", (const uint32_t[]){0, 2, 1, 0}, 4);
    node_tree_free(root);

    /* no maps at all: rebuilt */
    root = build_mudata(0);
    check_map(root, "obs", "rna", (const uint32_t[]){1, 2, 3, 0}, 4);
    check_map(root, "obs", "prot", (const uint32_t[]){0, 1, 2, 3}, 4);
    check_map(root, "var", "prot", (const uint32_t[]){0, 0, 1, 2}, 4);
    cellar_error err = E();
    const uint32_t *map;
    int64_t n;
    CHECK_EQ(mudata_map(NULL, root, "obs", "atac", &map, &n, &err), CELLAR_ENOTFOUND);
    err = E();
    CHECK_EQ(mudata_map(NULL, root, "foo", "rna", &map, &n, &err), CELLAR_EINVAL);
    node_tree_free(root);

    /* m1.h5mu: axis 1, shared var; a (o1 o2 x g1 g2 g3), b (o3 o4 x g2 g4) */
    root = mem_enc(mem_root(), "MuData", "0.1.0");
    mem_attrs(root, "{\"axis\": 1}");
    mod = mem_attrs(mem_group(root, "mod"), "{\"mod-order\": [\"a\", \"b\"]}");
    modality(mod, "a", (const char *const[]){"o1", "o2"}, 2,
             (const char *const[]){"g1", "g2", "g3"}, 3);
    modality(mod, "b", (const char *const[]){"o3", "o4"}, 2, (const char *const[]){"g2", "g4"},
             2);
    uint8_t nomask[4] = {0};
    nullable_strings(df_group(root, "obs", "_index", "[]"), "_index", 4,
                     (const char *const[]){"o1", "o2", "o3", "o4"}, nomask);
    nullable_strings(df_group(root, "var", "_index", "[]"), "_index", 4,
                     (const char *const[]){"g1", "g2", "g3", "g4"}, nomask);
    check_map(root, "var", "a", (const uint32_t[]){1, 2, 3, 0}, 4);
    check_map(root, "var", "b", (const uint32_t[]){0, 1, 0, 2}, 4);
    check_map(root, "obs", "b", (const uint32_t[]){0, 0, 1, 2}, 4);
    mudata_info mi;
    arena *a = arena_new();
    CHECK_EQ(mudata_open(root, a, &mi, &err), 0);
    CHECK_EQ(mi.axis, 1);
    arena_free(a);
    node_tree_free(root);
}

/* t.h5td / t2.h5td: label, alignment, allow_overlap as root elements. */
void test_treedata_open(void)
{
    arena *a = arena_new();
    cellar_error err = E();
    treedata_info ti;
    node *root = mem_enc(mem_root(), "treedata", "0.1.0");
    mem_enc(mem_strings(root, "alignment", 0, NULL, (const char *const[]){"nodes"}), "string",
            "0.2.0");
    const uint8_t f = 0;
    mem_enc(mem_array(root, "allow_overlap", DT_BOOL, 0, NULL, &f), "numeric-scalar", "0.2.0");
    mem_enc(mem_strings(root, "label", 0, NULL, (const char *const[]){"clade"}), "string",
            "0.2.0");
    CHECK_EQ(treedata_open(root, a, &ti, &err), 0);
    CHECK_STR_EQ(ti.label, "clade");
    CHECK_STR_EQ(ti.alignment, "nodes");
    CHECK_EQ(ti.allow_overlap, 0);
    node_tree_free(root);

    root = mem_enc(mem_root(), "treedata", "0.1.0");
    mem_enc(mem_empty(root, "label", DT_FLOAT32), "null", "0.1.0");
    const uint8_t t = 1;
    mem_enc(mem_array(root, "allow_overlap", DT_BOOL, 0, NULL, &t), "numeric-scalar", "0.2.0");
    CHECK_EQ(treedata_open(root, a, &ti, &err), 0);
    CHECK(ti.label == NULL);
    CHECK_STR_EQ(ti.alignment, "leaves");
    CHECK_EQ(ti.allow_overlap, 1);
    node_tree_free(root);

    root = mem_enc(mem_root(), "treedata", "0.1.0"); /* nothing: defaults */
    CHECK_EQ(treedata_open(root, a, &ti, &err), 0);
    CHECK_STR_EQ(ti.label, "tree");
    CHECK_STR_EQ(ti.alignment, "leaves");
    CHECK_EQ(ti.allow_overlap, 1);
    const double two = 2;
    mem_array(root, "allow_overlap", DT_FLOAT64, 0, NULL, &two);
    err = E();
    CHECK_EQ(treedata_open(root, a, &ti, &err), CELLAR_EFORMAT);
    CHECK(contains(err.detail, "allow_overlap"));
    node_tree_free(root);
    arena_free(a);
}

void test_element_scalars(void)
{
    arena *a = arena_new();
    cellar_error err = E();
    node *root = mem_root();
    const int64_t i = -42;
    const double d = 0.1;
    const float fl = 1.5f;
    const uint16_t half = 0x3c00; /* 1.0 */
    const int64_t one = 1;
    const int32_t one_elem[] = {7};
    mem_array(root, "i", DT_INT64, 0, NULL, &i);
    mem_array(root, "d", DT_FLOAT64, 0, NULL, &d);
    mem_array(root, "f", DT_FLOAT32, 0, NULL, &fl);
    mem_array(root, "h", DT_FLOAT16, 0, NULL, &half);
    mem_array(root, "one", DT_INT32, 1, &one, one_elem);
    const int64_t two = 2;
    mem_array(root, "two", DT_INT32, 1, &two, (const int32_t[]){1, 2});
    mem_enc(mem_empty(root, "null", DT_FLOAT32), "null", "0.1.0");
    mem_enc(mem_strings(root, "s", 0, NULL, (const char *const[]){"leaves"}), "string",
            "0.2.0");
    CHECK_STR_EQ(element_read_scalar_string(node_child_opt(root, "i"), a, &err), "-42");
    CHECK_STR_EQ(element_read_scalar_string(node_child_opt(root, "d"), a, &err), "0.1");
    CHECK_STR_EQ(element_read_scalar_string(node_child_opt(root, "f"), a, &err), "1.5");
    CHECK_STR_EQ(element_read_scalar_string(node_child_opt(root, "h"), a, &err), "1.0");
    CHECK_STR_EQ(element_read_scalar_string(node_child_opt(root, "one"), a, &err), "7");
    CHECK_STR_EQ(element_read_scalar_string(node_child_opt(root, "s"), a, &err), "leaves");
    CHECK_STR_EQ(element_encoding(node_child_opt(root, "s")), "string");
    CHECK(element_encoding(node_child_opt(root, "i")) == NULL);
    err = E();
    CHECK(element_read_scalar_string(node_child_opt(root, "two"), a, &err) == NULL);
    CHECK_EQ(err.code, CELLAR_EFORMAT);
    err = E();
    CHECK(element_read_scalar_string(node_child_opt(root, "null"), a, &err) == NULL);
    CHECK_EQ(err.code, CELLAR_EFORMAT);
    err = E();
    CHECK(element_read_scalar_string(root, a, &err) == NULL);
    CHECK_EQ(err.code, CELLAR_EFORMAT);
    node_tree_free(root);
    arena_free(a);
}
