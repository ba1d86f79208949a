/* Matrix elements over in-memory nodes: dense reads, the sparse engine (CSR
 * and CSC, every selection form, blocks crossing MATRIX_BLOCK_ENTRIES),
 * CSR answers, the column index (in memory and as a file), and broken
 * structure. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "storage/anndata/column_index.h"
#include "storage/anndata/matrix.h"
#include "tests/unit/mem_node.h"
#include "tests/unit/unit.h"

/* A deterministic sparse pattern: rows % 7 == 3 and cols % 5 == 2 empty. */
static float cell_value(int64_t r, int64_t c, int64_t n_cols, unsigned density_pct)
{
    if (r % 7 == 3 || c % 5 == 2)
        return 0;
    uint64_t h = (uint64_t)(r * n_cols + c) * 2654435761u;
    h ^= h >> 13;
    if (h % 100 >= density_pct)
        return 0;
    return (float)(r * 1000 + c) + 0.5f;
}

/* Builds a dense reference and a CSR or CSC group of it under root. */
static node *sparse_group(node *root, const char *name, int csc, int64_t nr, int64_t nc,
                          unsigned density, float **dense_out)
{
    float *dense = calloc((size_t)(nr * nc), sizeof *dense);
    int64_t n_major = csc ? nc : nr, n_minor = csc ? nr : nc;
    float *data = malloc((size_t)(nr * nc) * sizeof *data + 4);
    int32_t *indices = malloc((size_t)(nr * nc) * sizeof *indices + 4);
    int64_t *indptr = malloc((size_t)(n_major + 1) * sizeof *indptr);
    int64_t nnz = 0;
    for (int64_t r = 0; r < nr; r++)
        for (int64_t c = 0; c < nc; c++)
            dense[r * nc + c] = cell_value(r, c, nc, density);
    for (int64_t a = 0; a < n_major; a++) {
        indptr[a] = nnz;
        for (int64_t b = 0; b < n_minor; b++) {
            float v = csc ? dense[b * nc + a] : dense[a * nc + b];
            if (v != 0) {
                data[nnz] = v;
                indices[nnz++] = (int32_t)b;
            }
        }
    }
    indptr[n_major] = nnz;
    node *g = mem_enc(mem_group(root, name), csc ? "csc_matrix" : "csr_matrix", "0.1.0");
    char attrs[128];
    snprintf(attrs, sizeof attrs, "{\"shape\": [%lld, %lld]}", (long long)nr, (long long)nc);
    mem_attrs(g, attrs);
    mem_array1(g, "data", DT_FLOAT32, nnz, data);
    mem_array1(g, "indices", DT_INT32, nnz, indices);
    mem_array1(g, "indptr", DT_INT64, n_major + 1, indptr);
    free(data);
    free(indices);
    free(indptr);
    *dense_out = dense;
    return g;
}

/* Compares a dense read of (rows, cols) with the reference. */
static int dense_matches(const matrix *m, const float *ref, const dim_sel *rows,
                         const dim_sel *cols, const column_index *ci)
{
    size_t n = (size_t)rows->count * (size_t)cols->count;
    float *out = malloc(n * sizeof *out + 4);
    cellar_error err;
    cellar_error_clear(&err);
    int rc = matrix_read_dense(m, rows, cols, column_index_csc(ci), out, n * sizeof *out, &err);
    int ok = rc == 0;
    if (rc)
        fprintf(stderr, "matrix_read_dense: %s\n", err.detail);
    for (int64_t i = 0; i < rows->count && ok; i++)
        for (int64_t k = 0; k < cols->count && ok; k++) {
            float want = ref[dim_sel_at(rows, i) * m->shape[1] + dim_sel_at(cols, k)];
            ok = out[i * cols->count + k] == want;
            if (!ok)
                fprintf(stderr, "at (%lld, %lld): %g != %g\n", (long long)i, (long long)k,
                        (double)out[i * cols->count + k], (double)want);
        }
    free(out);
    return ok;
}

/* Compares a CSR read with the reference, columns ascending in each row. */
static int csr_matches(const matrix *m, const float *ref, const dim_sel *rows,
                       const dim_sel *cols, const column_index *ci)
{
    arena *a = arena_new();
    matrix_csr csr;
    cellar_error err;
    cellar_error_clear(&err);
    int ok = matrix_read_csr(m, rows, cols, column_index_csc(ci), 0, a, &csr, &err) == 0;
    int64_t expect_nnz = 0;
    for (int64_t i = 0; i < rows->count && ok; i++) {
        int64_t k = csr.indptr[i];
        for (int64_t j = 0; j < cols->count && ok; j++) {
            float want = ref[dim_sel_at(rows, i) * m->shape[1] + dim_sel_at(cols, j)];
            if (want == 0)
                continue;
            expect_nnz++;
            ok = k < csr.indptr[i + 1] && csr.indices[k] == j &&
                 ((const float *)csr.data)[k] == want;
            k++;
        }
        ok = ok && k == csr.indptr[i + 1];
    }
    ok = ok && csr.nnz == expect_nnz && csr.n_rows == rows->count && csr.n_cols == cols->count;
    arena_free(a);
    return ok;
}

static void check_selections(const matrix *m, const float *ref, const column_index *ci)
{
    int64_t nr = m->shape[0], nc = m->shape[1];
    static const int64_t rlist[] = {5, 3, 3, 0, 10, 1};
    static const int64_t clist[] = {7, 2, 2, 0, 11};
    dim_sel all_r = dim_sel_range(0, nr), all_c = dim_sel_range(0, nc);
    dim_sel some_r = dim_sel_range(2, 9), one_c = dim_sel_range(4, 1);
    dim_sel step_r = {nr - 1, -3, (nr + 2) / 3, NULL}, step_c = {1, 4, (nc - 1 + 3) / 4, NULL};
    dim_sel list_r = {0, 1, 6, rlist}, list_c = {0, 1, 5, clist};
    dim_sel none = dim_sel_range(0, 0);
    const dim_sel *rs[] = {&all_r, &some_r, &step_r, &list_r, &none};
    const dim_sel *cs[] = {&all_c, &one_c, &step_c, &list_c, &none};
    for (size_t i = 0; i < 5; i++)
        for (size_t k = 0; k < 5; k++) {
            CHECK(dense_matches(m, ref, rs[i], cs[k], ci));
            if (m->layout != MATRIX_DENSE)
                CHECK(csr_matches(m, ref, rs[i], cs[k], ci));
        }
}

void test_matrix_sparse_reads(void)
{
    node *root = mem_root();
    float *ref_csr, *ref_csc;
    node *gr = sparse_group(root, "X", 0, 40, 12, 35, &ref_csr);
    node *gc = sparse_group(root, "C", 1, 40, 12, 35, &ref_csc);
    matrix mr, mc;
    cellar_error err;
    cellar_error_clear(&err);
    CHECK_EQ(matrix_open(gr, &mr, &err), 0);
    CHECK_EQ(matrix_open(gc, &mc, &err), 0);
    CHECK_EQ(mr.layout, MATRIX_CSR);
    CHECK_EQ(mc.layout, MATRIX_CSC);
    CHECK_EQ(mr.shape[0], 40);
    CHECK_EQ(mr.shape[1], 12);
    CHECK_EQ(mr.dtype, DT_FLOAT32);
    check_selections(&mr, ref_csr, NULL);
    check_selections(&mc, ref_csc, NULL);

    /* The same answers through the column index. */
    column_index *ci = NULL;
    CHECK_EQ(column_index_build(&mr, NULL, &ci, &err), 0);
    CHECK(ci != NULL);
    if (ci) {
        CHECK_EQ(ci->csc.nnz, mr.nnz);
        CHECK(ci->csc.rows32 != NULL);
        /* Without a cache directory: an unnamed file in the page cache,
         * mapped read-only once built. */
        CHECK_EQ(ci->file_backed, 1);
        /* Its size is known before building it (what max_bytes is held to). */
        CHECK_EQ(column_index_bytes(&mr), ci->map_bytes);
        CHECK_EQ(column_index_bytes(&mc), 0);
        check_selections(&mr, ref_csr, ci);
        /* Column 2 is empty; column 3 holds the rows with values. */
        CHECK_EQ(ci->csc.colptr[3] - ci->csc.colptr[2], 0);
        int64_t k = ci->csc.colptr[3];
        for (int64_t r = 0; r < 40; r++)
            if (ref_csr[r * 12 + 3] != 0)
                CHECK_EQ(matrix_csc_row(&ci->csc, k++), r);
        CHECK_EQ(k, ci->csc.colptr[4]);
    }
    column_index *none = NULL;
    CHECK_EQ(column_index_build(&mc, NULL, &none, &err), CELLAR_EINVAL);
    CHECK(none == NULL);

    /* A row slice of CSR reads only its own entries. */
    uint64_t before = mem_values_read(mr.data);
    dim_sel rows = dim_sel_range(10, 2), cols = dim_sel_range(0, 12);
    int64_t want = 0;
    for (int64_t i = 10 * 12; i < 12 * 12; i++)
        want += ref_csr[i] != 0;
    CHECK(dense_matches(&mr, ref_csr, &rows, &cols, NULL));
    CHECK_EQ(mem_values_read(mr.data) - before, want);
    uint64_t nnz = 0;
    CHECK_EQ(matrix_count_nnz(&mr, &rows, &cols, NULL, &nnz, &err), 0);
    CHECK_EQ(nnz, want);

    /* Whole rows straight into caller memory: indptr as stored, entries in
     * both index widths, equal to the reference. */
    CHECK(matrix_csr_is_run(&mr, &rows, &cols));
    CHECK(!matrix_csr_is_run(&mc, &rows, &cols));
    dim_sel some = dim_sel_range(3, 2);
    CHECK(!matrix_csr_is_run(&mr, &rows, &some));
    dim_sel run = dim_sel_range(5, 10);
    int64_t ip[11];
    CHECK_EQ(matrix_run_indptr(&mr, &run, ip, &err), 0);
    int64_t n = ip[10] - ip[0];
    int32_t idx32[480];
    int64_t idx64[480];
    float vals[480];
    int asc = 0;
    CHECK(n > 0 && n <= 120);
    for (int w = 0; w < 2 && n > 0 && n <= 120; w++) {
        before = mem_values_read(mr.data);
        CHECK_EQ(matrix_run_entries(&mr, ip, 10, w ? DT_INT64 : DT_INT32,
                                    w ? (void *)idx64 : (void *)idx32, vals, &asc, &err), 0);
        CHECK_EQ(asc, 1);
        CHECK_EQ(mem_values_read(mr.data) - before, (uint64_t)n);
        int64_t k = 0;
        for (int64_t r = 5; r < 15; r++)
            for (int64_t c = 0; c < 12; c++)
                if (ref_csr[r * 12 + c] != 0) {
                    CHECK_EQ(w ? idx64[k] : idx32[k], c);
                    CHECK(vals[k] == ref_csr[r * 12 + c]);
                    k++;
                }
        CHECK_EQ(k, n);
    }

    column_index_free(ci);
    free(ref_csr);
    free(ref_csc);
    node_tree_free(root);
}

/* Enough entries to cross MATRIX_BLOCK_ENTRIES inside a run and a row. */
void test_matrix_sparse_blocks(void)
{
    node *root = mem_root();
    float *ref;
    node *g = sparse_group(root, "X", 0, 400, 2000, 80, &ref);
    matrix m;
    cellar_error err;
    cellar_error_clear(&err);
    CHECK_EQ(matrix_open(g, &m, &err), 0);
    CHECK(m.nnz > MATRIX_BLOCK_ENTRIES);
    dim_sel all_r = dim_sel_range(0, 400), all_c = dim_sel_range(0, 2000);
    static const int64_t genes[] = {1999, 0, 17, 17};
    dim_sel g4 = {0, 1, 4, genes};
    CHECK(dense_matches(&m, ref, &all_r, &all_c, NULL));
    CHECK(dense_matches(&m, ref, &all_r, &g4, NULL));
    column_index *ci = NULL;
    CHECK_EQ(column_index_build(&m, NULL, &ci, &err), 0);
    CHECK(dense_matches(&m, ref, &all_r, &g4, ci));
    CHECK(csr_matches(&m, ref, &all_r, &g4, ci));
    uint64_t nnz = 0;
    CHECK_EQ(matrix_count_nnz(&m, &all_r, &g4, column_index_csc(ci), &nnz, &err), 0);
    int64_t want = 0;
    for (int64_t r = 0; r < 400; r++)
        for (int k = 0; k < 4; k++)
            want += ref[r * 2000 + genes[k]] != 0;
    CHECK_EQ(nnz, want);
    column_index_free(ci);
    free(ref);
    node_tree_free(root);
}

void test_matrix_dense_and_errors(void)
{
    node *root = mem_root();
    float vals[12 * 12];
    for (int i = 0; i < 144; i++)
        vals[i] = (float)i * 1.5f;
    int64_t shape[2] = {12, 12};
    node *x = mem_enc(mem_array(root, "X", DT_FLOAT32, 2, shape, vals), "array", "0.2.0");
    matrix m;
    cellar_error err;
    cellar_error_clear(&err);
    CHECK_EQ(matrix_open(x, &m, &err), 0);
    CHECK_EQ(m.layout, MATRIX_DENSE);
    check_selections(&m, vals, NULL);
    arena *a = arena_new();
    matrix_csr csr;
    dim_sel r = dim_sel_range(0, 12), c = dim_sel_range(0, 12);
    CHECK_EQ(matrix_read_csr(&m, &r, &c, NULL, 0, a, &csr, &err), CELLAR_EINVAL);

    /* 1-D arrays take one column. */
    node *v = mem_array1(root, "v", DT_INT16, 3, (int16_t[]){4, -5, 6});
    CHECK_EQ(matrix_open(v, &m, &err), 0);
    CHECK_EQ(m.ndim, 1);
    CHECK_EQ(m.shape[1], 1);
    int16_t out[3];
    dim_sel all = dim_sel_range(0, 3), one = dim_sel_range(0, 1);
    CHECK_EQ(matrix_read_dense(&m, &all, &one, NULL, out, sizeof out, &err), 0);
    CHECK_EQ(out[1], -5);

    /* Not matrices. */
    cellar_error_clear(&err);
    CHECK_EQ(matrix_open(mem_strings1(root, "s", 1, (const char *const[]){"a"}), &m, &err),
             CELLAR_EFORMAT);
    cellar_error_clear(&err);
    CHECK_EQ(matrix_open(mem_enc(mem_group(root, "df"), "dataframe", "0.2.0"), &m, &err),
             CELLAR_EFORMAT);
    CHECK(strstr(err.detail, "dataframe") != NULL);

    /* Broken CSR: an index past the columns, then indptr going back. */
    node *b = mem_attrs(mem_enc(mem_group(root, "bad"), "csr_matrix", "0.1.0"),
                        "{\"shape\": [2, 3]}");
    mem_array1(b, "data", DT_FLOAT64, 2, (double[]){1, 2});
    mem_array1(b, "indices", DT_UINT32, 2, (uint32_t[]){0, 3});
    mem_array1(b, "indptr", DT_INT32, 3, (int32_t[]){0, 1, 2});
    cellar_error_clear(&err);
    CHECK_EQ(matrix_open(b, &m, &err), 0);
    double d[6];
    dim_sel r2 = dim_sel_range(0, 2), c3 = dim_sel_range(0, 3);
    CHECK_EQ(matrix_read_dense(&m, &r2, &c3, NULL, d, sizeof d, &err), CELLAR_EFORMAT);
    CHECK(strstr(err.detail, "indices") != NULL);
    node *b2 = mem_attrs(mem_enc(mem_group(root, "bad2"), "csr_matrix", "0.1.0"),
                         "{\"shape\": [2, 3]}");
    mem_array1(b2, "data", DT_FLOAT64, 2, (double[]){1, 2});
    mem_array1(b2, "indices", DT_INT64, 2, (int64_t[]){0, 1});
    mem_array1(b2, "indptr", DT_INT64, 3, (int64_t[]){0, 2, 1});
    cellar_error_clear(&err);
    CHECK_EQ(matrix_open(b2, &m, &err), 0);
    CHECK_EQ(matrix_read_dense(&m, &r2, &c3, NULL, d, sizeof d, &err), CELLAR_EFORMAT);
    CHECK(strstr(err.detail, "indptr") != NULL);
    /* indptr of the wrong length is refused at open. */
    node *b3 = mem_attrs(mem_enc(mem_group(root, "bad3"), "csr_matrix", "0.1.0"),
                         "{\"shape\": [5, 3]}");
    mem_array1(b3, "data", DT_FLOAT64, 2, (double[]){1, 2});
    mem_array1(b3, "indices", DT_INT64, 2, (int64_t[]){0, 1});
    mem_array1(b3, "indptr", DT_INT64, 3, (int64_t[]){0, 2, 2});
    cellar_error_clear(&err);
    CHECK_EQ(matrix_open(b3, &m, &err), CELLAR_EFORMAT);
    arena_free(a);
    node_tree_free(root);
}

void test_column_index_file(void)
{
    node *root = mem_root();
    float *ref, *ref2;
    node *g = sparse_group(root, "X", 0, 40, 12, 35, &ref);
    node *g2 = sparse_group(root, "Y", 0, 40, 13, 35, &ref2);
    matrix m, m2;
    cellar_error err;
    cellar_error_clear(&err);
    CHECK_EQ(matrix_open(g, &m, &err), 0);
    CHECK_EQ(matrix_open(g2, &m2, &err), 0);
    char dir[] = "/tmp/cellar-cix-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char *path = column_index_path(dir, "\"2a-1f3-51200\"", "/mod/rna/X");
    char want[256];
    snprintf(want, sizeof want, "%s/_2a-1f3-51200_-_mod_rna_X.cix", dir);
    CHECK_STR_EQ(path, want);

    column_index *ci = NULL, *loaded = NULL;
    CHECK_EQ(column_index_load(path, &m, &loaded, &err), CELLAR_ENOTFOUND);
    CHECK_EQ(column_index_build(&m, path, &ci, &err), 0);
    CHECK(access(path, F_OK) == 0);
    cellar_error_clear(&err);
    CHECK_EQ(column_index_load(path, &m, &loaded, &err), 0);
    if (loaded && ci) {
        CHECK_EQ(loaded->map_bytes, ci->map_bytes);
        CHECK(memcmp(loaded->map, ci->map, ci->map_bytes) == 0);
        check_selections(&m, ref, loaded);
    }
    /* The file of another matrix does not fit. */
    column_index *other = NULL;
    cellar_error_clear(&err);
    CHECK_EQ(column_index_load(path, &m2, &other, &err), CELLAR_EFORMAT);
    CHECK(other == NULL);
    /* Nor does a damaged one. */
    FILE *f = fopen(path, "r+b");
    CHECK(f != NULL);
    if (f) {
        fseek(f, 24, SEEK_SET);
        fputc(99, f);
        fclose(f);
    }
    cellar_error_clear(&err);
    CHECK_EQ(column_index_load(path, &m, &other, &err), CELLAR_EFORMAT);
    column_index_free(ci);
    column_index_free(loaded);
    unlink(path);
    rmdir(dir);
    free(path);
    free(ref);
    free(ref2);
    node_tree_free(root);
}

/* A 2 x 3 CSR group whose row 0 holds column 1 three times and column 0
 * once, row 1 column 2 twice: values v[0..5] of dtype dt in that order. */
static node *dup_group(node *root, const char *name, dtype_kind dt, const void *v)
{
    node *g = mem_attrs(mem_enc(mem_group(root, name), "csr_matrix", "0.1.0"),
                        "{\"shape\": [2, 3]}");
    mem_array1(g, "data", dt, 6, v);
    mem_array1(g, "indices", DT_INT32, 6, (int32_t[]){1, 0, 1, 1, 2, 2});
    mem_array1(g, "indptr", DT_INT32, 3, (int32_t[]){0, 4, 6});
    return g;
}

/* Entries stored twice at one (row, column): dense answers add them (as
 * scipy's toarray), CSR answers keep them apart in stored order. */
void test_matrix_duplicates(void)
{
    node *root = mem_root();
    matrix m;
    cellar_error err;
    cellar_error_clear(&err);
    dim_sel r = dim_sel_range(0, 2), c = dim_sel_range(0, 3);

    CHECK_EQ(matrix_open(dup_group(root, "f32", DT_FLOAT32,
                                   (float[]){1.5f, -2, 10, 100, 0.25f, 0.5f}), &m, &err), 0);
    float f[6];
    CHECK_EQ(matrix_read_dense(&m, &r, &c, NULL, f, sizeof f, &err), 0);
    CHECK(f[0] == -2 && f[1] == 111.5f && f[2] == 0);
    CHECK(f[3] == 0 && f[4] == 0 && f[5] == 0.75f);
    /* A list selection repeating a column and a row, and a CSC twin. */
    static const int64_t cl[] = {1, 2, 1}, rl[] = {1, 0, 1};
    dim_sel cs = {0, 1, 3, cl}, rs = {0, 1, 3, rl};
    float g[9];
    CHECK_EQ(matrix_read_dense(&m, &rs, &cs, NULL, g, sizeof g, &err), 0);
    CHECK(g[0] == 0 && g[1] == 0.75f && g[2] == 0);
    CHECK(g[3] == 111.5f && g[4] == 0 && g[5] == 111.5f);
    CHECK(g[6] == 0 && g[7] == 0.75f && g[8] == 0);

    /* The CSR answer keeps the four entries of row 0, column 0 first, then
     * column 1's three in stored order. */
    arena *a = arena_new();
    matrix_csr csr;
    CHECK_EQ(matrix_read_csr(&m, &r, &c, NULL, 0, a, &csr, &err), 0);
    CHECK_EQ(csr.nnz, 6);
    CHECK_EQ(csr.indptr[1], 4);
    CHECK_EQ(csr.indptr[2], 6);
    static const int64_t want_idx[] = {0, 1, 1, 1, 2, 2};
    static const float want_val[] = {-2, 1.5f, 10, 100, 0.25f, 0.5f};
    for (int i = 0; i < 6; i++) {
        CHECK_EQ(csr.indices[i], want_idx[i]);
        CHECK(((const float *)csr.data)[i] == want_val[i]);
    }
    /* The same through a column index. */
    column_index *ci = NULL;
    CHECK_EQ(column_index_build(&m, NULL, &ci, &err), 0);
    dim_sel c1 = dim_sel_range(1, 1);
    float h[2];
    CHECK_EQ(matrix_read_dense(&m, &r, &c1, column_index_csc(ci), h, sizeof h, &err), 0);
    CHECK(h[0] == 111.5f && h[1] == 0);
    CHECK_EQ(matrix_read_csr(&m, &r, &c1, column_index_csc(ci), 0, a, &csr, &err), 0);
    CHECK_EQ(csr.nnz, 3);
    CHECK(((const float *)csr.data)[0] == 1.5f && ((const float *)csr.data)[2] == 100);
    column_index_free(ci);

    /* Integers wrap at their width, as numpy's do. */
    CHECK_EQ(matrix_open(dup_group(root, "i8", DT_INT8, (int8_t[]){100, 7, 100, -3, 127, 1}),
                         &m, &err), 0);
    int8_t i8[6];
    CHECK_EQ(matrix_read_dense(&m, &r, &c, NULL, i8, sizeof i8, &err), 0);
    CHECK_EQ(i8[0], 7);
    CHECK_EQ(i8[1], -59);  /* 197 wraps to -59 */
    CHECK_EQ(i8[5], -128);
    CHECK_EQ(matrix_open(dup_group(root, "u64", DT_UINT64,
                                   (uint64_t[]){UINT64_MAX, 1, 2, 0, 5, 6}), &m, &err), 0);
    uint64_t u64[6];
    CHECK_EQ(matrix_read_dense(&m, &r, &c, NULL, u64, sizeof u64, &err), 0);
    CHECK_EQ(u64[1], 1);
    CHECK_EQ(u64[5], 11);
    /* Bools are or-ed. */
    CHECK_EQ(matrix_open(dup_group(root, "b", DT_BOOL, (uint8_t[]){1, 0, 1, 0, 0, 0}), &m,
                         &err), 0);
    uint8_t b[6];
    CHECK_EQ(matrix_read_dense(&m, &r, &c, NULL, b, sizeof b, &err), 0);
    CHECK(b[0] == 0 && b[1] == 1 && b[5] == 0);
    /* float16 rounds at each step: 2048 + 1 is 2048 (ties to even), + 2
     * is 2050; 0.5 + 0.25 = 0.75; 65504 + 65504 overflows to inf. */
    CHECK_EQ(matrix_open(dup_group(root, "f16", DT_FLOAT16,
                                   (uint16_t[]){0x6800, 0x3c00, 0x3c00, 0x4000, 0x7bff, 0x7bff}),
                         &m, &err), 0);
    uint16_t hh[6];
    CHECK_EQ(matrix_read_dense(&m, &r, &c, NULL, hh, sizeof hh, &err), 0);
    CHECK_EQ(hh[0], 0x3c00);  /* 1.0, stored once */
    CHECK_EQ(hh[1], 0x6801);  /* 2048 + 1 -> 2048, + 2 -> 2050 */
    CHECK_EQ(hh[5], 0x7c00);  /* inf */
    CHECK_EQ(matrix_open(dup_group(root, "f16b", DT_FLOAT16,
                                   (uint16_t[]){0x3800, 0, 0x3400, 0x0001, 0x0001, 0x0001}),
                         &m, &err), 0);
    CHECK_EQ(matrix_read_dense(&m, &r, &c, NULL, hh, sizeof hh, &err), 0);
    CHECK_EQ(hh[1], 0x3a00);  /* 0.5 + 0.25 + 2^-24 -> 0.75 */
    CHECK_EQ(hh[5], 0x0002);  /* subnormals add exactly */
    arena_free(a);
    node_tree_free(root);
}
