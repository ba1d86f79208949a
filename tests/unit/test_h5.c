/* storage/hdf5/h5.c against small HDF5 files written here with the C API. */
#include <fcntl.h>
#include <hdf5.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/arena.h"
#include "storage/hdf5/h5.h"
#include "storage/hdf5/h5_probe.h"
#include "storage/node.h"
#include "tests/unit/unit.h"

/* ------------------------------------------------------------ helpers */

static char h5_tmp_dir[256];

static void tmp_path(char *buf, size_t size, const char *name)
{
    if (!h5_tmp_dir[0]) {
        snprintf(h5_tmp_dir, sizeof h5_tmp_dir, "/tmp/cellar-h5-test-XXXXXX");
        if (!mkdtemp(h5_tmp_dir)) {
            perror("mkdtemp");
            abort();
        }
        h5_library_init();
    }
    snprintf(buf, size, "%s/%s", h5_tmp_dir, name);
}

static hid_t space_of(int rank, const hsize_t *dims)
{
    if (rank < 0)
        return H5Screate(H5S_NULL);
    if (rank == 0)
        return H5Screate(H5S_SCALAR);
    return H5Screate_simple(rank, dims, NULL);
}

static void mk_ds(hid_t loc, const char *name, hid_t ftype, hid_t mtype, int rank,
                  const hsize_t *dims, const void *data)
{
    hid_t sp = space_of(rank, dims);
    hid_t ds = H5Dcreate2(loc, name, ftype, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    CHECK(ds >= 0);
    if (data)
        CHECK(H5Dwrite(ds, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) >= 0);
    H5Dclose(ds);
    H5Sclose(sp);
}

static void mk_attr(hid_t loc, const char *name, hid_t ftype, hid_t mtype, int rank,
                    const hsize_t *dims, const void *data)
{
    hid_t sp = space_of(rank, dims);
    hid_t at = H5Acreate2(loc, name, ftype, sp, H5P_DEFAULT, H5P_DEFAULT);
    CHECK(at >= 0);
    if (data)
        CHECK(H5Awrite(at, mtype, data) >= 0);
    H5Aclose(at);
    H5Sclose(sp);
}

static hid_t vlen_utf8(void)
{
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, H5T_VARIABLE);
    H5Tset_cset(t, H5T_CSET_UTF8);
    return t;
}

static hid_t fixed_str(size_t size, H5T_str_t pad)
{
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, size);
    H5Tset_strpad(t, pad);
    return t;
}

/* h5py's bool type. */
static hid_t bool_enum(void)
{
    hid_t t = H5Tenum_create(H5T_STD_I8LE);
    signed char f = 0, tr = 1;
    H5Tenum_insert(t, "FALSE", &f);
    H5Tenum_insert(t, "TRUE", &tr);
    return t;
}

static hid_t float16_le(void)
{
    hid_t t = H5Tcopy(H5T_IEEE_F32LE);
    H5Tset_fields(t, 15, 10, 5, 0, 10);
    H5Tset_size(t, 2);
    H5Tset_ebias(t, 15);
    return t;
}

static node *open_ok(const char *path)
{
    node *root = NULL;
    cellar_error err;
    cellar_error_clear(&err);
    int rc = h5_open(path, &root, &err);
    CHECK_EQ(rc, 0);
    if (rc)
        fprintf(stderr, "h5_open(%s): %s\n", path, err.detail);
    return root;
}

static node *child(node *root, const char *path)
{
    node *n = NULL;
    cellar_error err;
    cellar_error_clear(&err);
    int rc = node_resolve(root, path, &n, &err);
    CHECK_EQ(rc, 0);
    if (rc)
        fprintf(stderr, "node_resolve(%s): %s\n", path, err.detail);
    return n;
}

static dim_sel sl(int64_t start, int64_t step, int64_t count)
{
    dim_sel d = {.start = start, .step = step, .count = count, .index = NULL};
    return d;
}

static dim_sel lst(const int64_t *index, int64_t count)
{
    dim_sel d = {.start = 0, .step = 1, .count = count, .index = index};
    return d;
}

/* -------------------------------------------------------------- types */

static void write_types_file(const char *path)
{
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hsize_t d3 = 3, d4 = 4;
    int8_t i8[3] = {-128, 0, 127};
    int16_t i16[3] = {-32768, 1, 32767};
    int32_t i32[3] = {INT32_MIN, 2, INT32_MAX};
    int64_t i64[3] = {INT64_MIN, 3, INT64_MAX};
    uint8_t u8[3] = {0, 1, 255};
    uint16_t u16[3] = {0, 2, 65535};
    uint32_t u32[3] = {0, 3, UINT32_MAX};
    uint64_t u64[3] = {0, 4, UINT64_MAX};
    float f32[3] = {1.5f, -0.25f, 3e38f};
    double f64[3] = {1.5, -0.25, 1e300};
    float f16src[4] = {1.5f, -2.0f, 0.25f, 65504.0f};
    mk_ds(f, "i8", H5T_STD_I8LE, H5T_NATIVE_INT8, 1, &d3, i8);
    mk_ds(f, "i16", H5T_STD_I16LE, H5T_NATIVE_INT16, 1, &d3, i16);
    mk_ds(f, "i32", H5T_STD_I32LE, H5T_NATIVE_INT32, 1, &d3, i32);
    mk_ds(f, "i64", H5T_STD_I64LE, H5T_NATIVE_INT64, 1, &d3, i64);
    mk_ds(f, "u8", H5T_STD_U8LE, H5T_NATIVE_UINT8, 1, &d3, u8);
    mk_ds(f, "u16", H5T_STD_U16LE, H5T_NATIVE_UINT16, 1, &d3, u16);
    mk_ds(f, "u32", H5T_STD_U32LE, H5T_NATIVE_UINT32, 1, &d3, u32);
    mk_ds(f, "u64", H5T_STD_U64LE, H5T_NATIVE_UINT64, 1, &d3, u64);
    mk_ds(f, "f32", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 1, &d3, f32);
    mk_ds(f, "f64", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, 1, &d3, f64);
    mk_ds(f, "i32be", H5T_STD_I32BE, H5T_NATIVE_INT32, 1, &d3, i32);
    mk_ds(f, "f64be", H5T_IEEE_F64BE, H5T_NATIVE_DOUBLE, 1, &d3, f64);
    hid_t h16 = float16_le();
    mk_ds(f, "f16", h16, H5T_NATIVE_FLOAT, 1, &d4, f16src);
    H5Tclose(h16);

    hid_t be = bool_enum();
    int8_t bools[4] = {1, 0, 0, 1};
    mk_ds(f, "bool", be, be, 1, &d4, bools);
    int8_t btrue = 1;
    mk_ds(f, "bool_scalar", be, be, 0, NULL, &btrue);
    H5Tclose(be);

    hid_t en = H5Tenum_create(H5T_STD_I16LE);
    int16_t ea = 1, eb = 700;
    H5Tenum_insert(en, "A", &ea);
    H5Tenum_insert(en, "B", &eb);
    int16_t evals[3] = {700, 1, 700};
    mk_ds(f, "enum16", en, en, 1, &d3, evals);
    H5Tclose(en);

    hid_t vs = vlen_utf8();
    const char *strs[4] = {"\xce\xb1\xce\xb2", "b", "", NULL};
    mk_ds(f, "vstr", vs, vs, 1, &d4, strs);
    const char *hello = "hello";
    mk_ds(f, "vstr_scalar", vs, vs, 0, NULL, &hello);
    H5Tclose(vs);

    hid_t np = fixed_str(4, H5T_STR_NULLPAD);
    mk_ds(f, "fnullpad", np, np, 1, &d3, "ab\0\0abcdx\0\0\0");
    H5Tclose(np);
    hid_t spd = fixed_str(4, H5T_STR_SPACEPAD);
    mk_ds(f, "fspacepad", spd, spd, 1, &d3, "ab  a b     ");
    H5Tclose(spd);

    double sc = 2.5;
    mk_ds(f, "scalar", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, 0, NULL, &sc);
    mk_ds(f, "null", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, -1, NULL, NULL);

    hid_t cmp = H5Tcreate(H5T_COMPOUND, 8);
    H5Tinsert(cmp, "r", 0, H5T_NATIVE_FLOAT);
    H5Tinsert(cmp, "i", 4, H5T_NATIVE_FLOAT);
    float cvals[6] = {1, 2, 3, 4, 5, 6};
    mk_ds(f, "complex", cmp, cmp, 1, &d3, cvals);
    H5Tclose(cmp);
    H5Fclose(f);
}

static const node_info *info_of(node *root, const char *name)
{
    node *n = child(root, name);
    static const node_info none = {0};
    return n ? node_get_info(n) : &none;
}

static void read_all(node *root, const char *name, void *out, size_t bytes, int64_t count)
{
    node *n = child(root, name);
    if (!n)
        return;
    dim_sel s = sl(0, 1, count);
    cellar_error err;
    cellar_error_clear(&err);
    int rc = node_read(n, &s, out, bytes, &err);
    CHECK_EQ(rc, 0);
    if (rc)
        fprintf(stderr, "node_read(%s): %s\n", name, err.detail);
}

void test_h5_types(void)
{
    char path[512];
    tmp_path(path, sizeof path, "types.h5");
    write_types_file(path);
    node *root = open_ok(path);
    if (!root)
        return;
    CHECK_EQ(node_get_info(root)->type, NODE_GROUP);
    CHECK_STR_EQ(node_path(root), "/");

    static const struct {
        const char *name;
        dtype_kind k;
    } kinds[] = {
        {"i8", DT_INT8},     {"i16", DT_INT16},    {"i32", DT_INT32},  {"i64", DT_INT64},
        {"u8", DT_UINT8},    {"u16", DT_UINT16},   {"u32", DT_UINT32}, {"u64", DT_UINT64},
        {"f16", DT_FLOAT16}, {"f32", DT_FLOAT32},  {"f64", DT_FLOAT64}, {"i32be", DT_INT32},
        {"f64be", DT_FLOAT64}, {"bool", DT_BOOL},  {"enum16", DT_INT16}, {"vstr", DT_STRING},
        {"fnullpad", DT_STRING}, {"complex", DT_NONE},
    };
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        const node_info *in = info_of(root, kinds[i].name);
        CHECK_EQ(in->type, NODE_ARRAY);
        if ((int)in->dtype != (int)kinds[i].k)
            fprintf(stderr, "dtype of %s\n", kinds[i].name);
        CHECK_EQ(in->dtype, kinds[i].k);
        CHECK_EQ(in->ndim, 1);
    }
    CHECK_EQ(info_of(root, "i32")->shape[0], 3);
    CHECK_EQ(info_of(root, "f16")->shape[0], 4);
    CHECK_EQ(info_of(root, "i32be")->stored_big_endian, 1);
    CHECK_EQ(info_of(root, "f64be")->stored_big_endian, 1);
    CHECK_EQ(info_of(root, "i32")->stored_big_endian, 0);
    CHECK_EQ(info_of(root, "vstr")->string_size, 0);
    CHECK_EQ(info_of(root, "fnullpad")->string_size, 4);
    CHECK_EQ(info_of(root, "scalar")->ndim, 0);
    CHECK_EQ(info_of(root, "scalar")->dtype, DT_FLOAT64);
    CHECK_EQ(info_of(root, "null")->ndim, -1);
    CHECK_EQ(info_of(root, "null")->dtype, DT_FLOAT32);
    CHECK_EQ(info_of(root, "bool_scalar")->ndim, 0);

    int8_t i8[3];
    read_all(root, "i8", i8, sizeof i8, 3);
    CHECK_EQ(i8[0], -128);
    CHECK_EQ(i8[2], 127);
    int16_t i16[3];
    read_all(root, "i16", i16, sizeof i16, 3);
    CHECK_EQ(i16[0], -32768);
    CHECK_EQ(i16[2], 32767);
    int32_t i32[3];
    read_all(root, "i32", i32, sizeof i32, 3);
    CHECK_EQ(i32[0], INT32_MIN);
    CHECK_EQ(i32[1], 2);
    memset(i32, 0, sizeof i32);
    read_all(root, "i32be", i32, sizeof i32, 3);
    CHECK_EQ(i32[0], INT32_MIN);
    CHECK_EQ(i32[1], 2);
    CHECK_EQ(i32[2], INT32_MAX);
    int64_t i64[3];
    read_all(root, "i64", i64, sizeof i64, 3);
    CHECK(i64[0] == INT64_MIN && i64[2] == INT64_MAX);
    uint8_t u8[3];
    read_all(root, "u8", u8, sizeof u8, 3);
    CHECK_EQ(u8[2], 255);
    uint16_t u16[3];
    read_all(root, "u16", u16, sizeof u16, 3);
    CHECK_EQ(u16[2], 65535);
    uint32_t u32[3];
    read_all(root, "u32", u32, sizeof u32, 3);
    CHECK(u32[2] == UINT32_MAX);
    uint64_t u64[3];
    read_all(root, "u64", u64, sizeof u64, 3);
    CHECK(u64[2] == UINT64_MAX && u64[1] == 4);
    float f32[3];
    read_all(root, "f32", f32, sizeof f32, 3);
    CHECK_DBL_EQ(f32[1], -0.25f);
    CHECK_DBL_EQ(f32[2], 3e38f);
    double f64[3];
    read_all(root, "f64be", f64, sizeof f64, 3);
    CHECK_DBL_EQ(f64[0], 1.5);
    CHECK_DBL_EQ(f64[2], 1e300);
    uint16_t f16[4];
    read_all(root, "f16", f16, sizeof f16, 4);
    CHECK_EQ(f16[0], 0x3E00); /* 1.5 */
    CHECK_EQ(f16[1], 0xC000); /* -2.0 */
    CHECK_EQ(f16[2], 0x3400); /* 0.25 */
    CHECK_EQ(f16[3], 0x7BFF); /* 65504 */
    uint8_t b[4];
    read_all(root, "bool", b, sizeof b, 4);
    CHECK(b[0] == 1 && b[1] == 0 && b[2] == 0 && b[3] == 1);
    int16_t e16[3];
    read_all(root, "enum16", e16, sizeof e16, 3);
    CHECK(e16[0] == 700 && e16[1] == 1 && e16[2] == 700);

    cellar_error err;
    cellar_error_clear(&err);
    double sc = 0;
    CHECK_EQ(node_read(child(root, "scalar"), NULL, &sc, sizeof sc, &err), 0);
    CHECK_DBL_EQ(sc, 2.5);
    uint8_t bs = 7;
    CHECK_EQ(node_read(child(root, "bool_scalar"), NULL, &bs, 1, &err), 0);
    CHECK_EQ(bs, 1);
    float nf = 0;
    cellar_error_clear(&err);
    CHECK_EQ(node_read(child(root, "null"), NULL, &nf, sizeof nf, &err), CELLAR_EINVAL);
    float cf[3];
    cellar_error_clear(&err);
    dim_sel s3 = sl(0, 1, 3);
    CHECK_EQ(node_read(child(root, "complex"), &s3, cf, sizeof cf, &err), CELLAR_EINVAL);

    arena *a = arena_new();
    char *out[4] = {0};
    dim_sel s4 = sl(0, 1, 4);
    cellar_error_clear(&err);
    CHECK_EQ(node_read_strings(child(root, "vstr"), &s4, a, out, &err), 0);
    CHECK_STR_EQ(out[0], "\xce\xb1\xce\xb2");
    CHECK_STR_EQ(out[1], "b");
    CHECK_STR_EQ(out[2], "");
    CHECK_STR_EQ(out[3], "");
    CHECK_EQ(node_read_strings(child(root, "vstr_scalar"), NULL, a, out, &err), 0);
    CHECK_STR_EQ(out[0], "hello");
    CHECK_EQ(node_read_strings(child(root, "fnullpad"), &s3, a, out, &err), 0);
    CHECK_STR_EQ(out[0], "ab");
    CHECK_STR_EQ(out[1], "abcd");
    CHECK_STR_EQ(out[2], "x");
    CHECK_EQ(node_read_strings(child(root, "fspacepad"), &s3, a, out, &err), 0);
    CHECK_STR_EQ(out[0], "ab");
    CHECK_STR_EQ(out[1], "a b");
    CHECK_STR_EQ(out[2], "");
    /* Reversed and repeated fixed strings. */
    int64_t idx[4] = {2, 0, 1, 0};
    dim_sel l4 = lst(idx, 4);
    CHECK_EQ(node_read_strings(child(root, "fnullpad"), &l4, a, out, &err), 0);
    CHECK_STR_EQ(out[0], "x");
    CHECK_STR_EQ(out[1], "ab");
    CHECK_STR_EQ(out[2], "abcd");
    CHECK_STR_EQ(out[3], "ab");
    dim_sel rev = sl(3, -1, 4);
    CHECK_EQ(node_read_strings(child(root, "vstr"), &rev, a, out, &err), 0);
    CHECK_STR_EQ(out[0], "");
    CHECK_STR_EQ(out[2], "b");
    CHECK_STR_EQ(out[3], "\xce\xb1\xce\xb2");
    CHECK_EQ(err.code, 0);
    arena_free(a);
    node_tree_free(root);
}

/* --------------------------------------------------------- attributes */

void test_h5_attrs(void)
{
    char path[512];
    tmp_path(path, sizeof path, "attrs.h5");
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hid_t g = H5Gcreate2(f, "g", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    hid_t cats = H5Gcreate2(f, "cats", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    hsize_t d1 = 1, d2 = 2, d0 = 0, d3 = 3, d23[2] = {2, 3};
    int32_t one = 1;
    mk_ds(cats, "x", H5T_STD_I32LE, H5T_NATIVE_INT32, 1, &d1, &one);

    hid_t vs = vlen_utf8();
    const char *et = "dataframe";
    mk_attr(g, "encoding-type", vs, vs, 0, NULL, &et);
    const char *co[3] = {"a", "\xc3\xa9t\xc3\xa9", "c"};
    mk_attr(g, "column-order", vs, vs, 1, &d3, co);
    H5Tclose(vs);
    mk_attr(g, "empty", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, 1, &d0, NULL);
    hid_t vstr_empty = vlen_utf8();
    mk_attr(g, "empty_str", vstr_empty, vstr_empty, 1, &d0, NULL);
    H5Tclose(vstr_empty);
    int64_t shape[2] = {7, 11};
    mk_attr(g, "shape", H5T_STD_I64LE, H5T_NATIVE_INT64, 1, &d2, shape);
    hid_t be = bool_enum();
    int8_t fls = 0, tr[2] = {1, 0};
    mk_attr(g, "ordered", be, be, 0, NULL, &fls);
    mk_attr(g, "bools", be, be, 1, &d2, tr);
    H5Tclose(be);
    hid_t np = fixed_str(6, H5T_STR_NULLPAD);
    mk_attr(g, "fixed_np", np, np, 0, NULL, "csr\0\0\0");
    H5Tclose(np);
    hid_t sp = fixed_str(5, H5T_STR_SPACEPAD);
    mk_attr(g, "fixed_sp", sp, sp, 1, &d2, "ab   xyz  ");
    H5Tclose(sp);
    int64_t axis = -1;
    mk_attr(g, "axis", H5T_STD_I64LE, H5T_NATIVE_INT64, 0, NULL, &axis);
    uint64_t big = UINT64_MAX;
    mk_attr(g, "big", H5T_STD_U64LE, H5T_NATIVE_UINT64, 0, NULL, &big);
    double fl[3] = {0.5, NAN, -INFINITY};
    mk_attr(g, "floats", H5T_IEEE_F64BE, H5T_NATIVE_DOUBLE, 1, &d3, fl);
    int32_t m[6] = {1, 2, 3, 4, 5, 6};
    mk_attr(g, "matrix", H5T_STD_I32LE, H5T_NATIVE_INT32, 2, d23, m);
    hobj_ref_t ref;
    CHECK(H5Rcreate(&ref, f, "/cats/x", H5R_OBJECT, -1) >= 0);
    mk_attr(g, "categories", H5T_STD_REF_OBJ, H5T_STD_REF_OBJ, 0, NULL, &ref);
    hid_t cmp = H5Tcreate(H5T_COMPOUND, 8);
    H5Tinsert(cmp, "a", 0, H5T_NATIVE_INT64);
    int64_t cv = 5;
    mk_attr(g, "compound", cmp, cmp, 0, NULL, &cv);
    H5Tclose(cmp);
    float nul = 0;
    (void)nul;
    mk_attr(g, "null_space", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, -1, NULL, NULL);
    H5Gclose(cats);
    H5Gclose(g);
    H5Fclose(f);

    node *root = open_ok(path);
    if (!root)
        return;
    node *gn = child(root, "g");
    if (!gn) {
        node_tree_free(root);
        return;
    }
    CHECK_EQ(json_object_size(node_attrs(root)), 0);
    const json_t *at = node_attrs(gn);
    char *dump = json_dumps(at, JSON_COMPACT | JSON_SORT_KEYS);
    CHECK_STR_EQ(dump, "{\"axis\":-1,\"big\":1.8446744073709552e19,\"bools\":[true,false],"
                       "\"categories\":\"/cats/x\",\"column-order\":[\"a\",\"\xc3\xa9t\xc3\xa9\","
                       "\"c\"],\"empty\":[],\"empty_str\":[],\"encoding-type\":\"dataframe\","
                       "\"fixed_np\":\"csr\",\"fixed_sp\":[\"ab\",\"xyz\"],"
                       "\"floats\":[0.5,null,null],\"matrix\":[[1,2,3],[4,5,6]],"
                       "\"null_space\":null,\"ordered\":false,\"shape\":[7,11]}");
    free(dump);
    CHECK_STR_EQ(node_attr_string(gn, "encoding-type"), "dataframe");
    CHECK(node_attr_string(gn, "shape") == NULL);
    CHECK(json_object_get(at, "compound") == NULL);
    node_tree_free(root);
}

/* --------------------------------------------------------- selections */

#define GRID_R 6
#define GRID_C 5

static void write_grid_file(const char *path)
{
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    int32_t grid[GRID_R][GRID_C];
    for (int r = 0; r < GRID_R; r++)
        for (int c = 0; c < GRID_C; c++)
            grid[r][c] = r * 10 + c;
    hsize_t dims[2] = {GRID_R, GRID_C};
    mk_ds(f, "grid", H5T_STD_I32LE, H5T_NATIVE_INT32, 2, dims, grid);

    /* Chunked big-endian 1-D, for many-run index lists. */
    enum { N = 5000 };
    int64_t *line = malloc(N * sizeof *line);
    for (int i = 0; i < N; i++)
        line[i] = (int64_t)i * 3;
    hsize_t dn = N, chunk = 64;
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(dcpl, 1, &chunk);
    hid_t sp = H5Screate_simple(1, &dn, NULL);
    hid_t ds = H5Dcreate2(f, "line", H5T_STD_I64BE, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    H5Dwrite(ds, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, line);
    H5Dclose(ds);
    H5Sclose(sp);
    H5Pclose(dcpl);
    free(line);

    enum { S = 40 };
    static double sq[S][S];
    for (int r = 0; r < S; r++)
        for (int c = 0; c < S; c++)
            sq[r][c] = r * 100 + c + 0.5;
    hsize_t ds2[2] = {S, S};
    mk_ds(f, "square", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, 2, ds2, sq);

    hid_t vs = vlen_utf8();
    const char *names[2][3] = {{"a0", "a1", "a2"}, {"b0", "b1", "b2"}};
    hsize_t d23[2] = {2, 3};
    mk_ds(f, "names", vs, vs, 2, d23, names);
    H5Tclose(vs);
    H5Fclose(f);
}

static int grid_read(node *g, dim_sel rows, dim_sel cols, int32_t *out)
{
    dim_sel sel[2] = {rows, cols};
    cellar_error err;
    cellar_error_clear(&err);
    int rc = node_read(g, sel, out, (size_t)(rows.count * cols.count) * sizeof *out, &err);
    if (rc)
        fprintf(stderr, "grid_read: %s\n", err.detail);
    return rc;
}

static void grid_expect(const int32_t *got, dim_sel rows, dim_sel cols)
{
    for (int64_t i = 0; i < rows.count; i++)
        for (int64_t j = 0; j < cols.count; j++) {
            int64_t want = dim_sel_at(&rows, i) * 10 + dim_sel_at(&cols, j);
            CHECK_EQ(got[i * cols.count + j], want);
        }
}

void test_h5_selections(void)
{
    char path[512];
    tmp_path(path, sizeof path, "grid.h5");
    write_grid_file(path);
    node *root = open_ok(path);
    if (!root)
        return;
    node *g = child(root, "grid");
    if (!g) {
        node_tree_free(root);
        return;
    }
    CHECK_EQ(node_get_info(g)->ndim, 2);
    CHECK_EQ(node_get_info(g)->shape[0], GRID_R);
    CHECK_EQ(node_get_info(g)->shape[1], GRID_C);
    int32_t out[64];

    dim_sel r = sl(1, 1, 3), c = sl(0, 1, GRID_C);
    memset(out, 0, sizeof out);
    CHECK_EQ(grid_read(g, r, c, out), 0);
    CHECK_EQ(out[0], 10);
    CHECK_EQ(out[14], 34);
    grid_expect(out, r, c);

    r = sl(0, 2, 3);
    c = sl(1, 3, 2);
    CHECK_EQ(grid_read(g, r, c, out), 0);
    CHECK(out[0] == 1 && out[1] == 4 && out[2] == 21 && out[3] == 24 && out[4] == 41 &&
          out[5] == 44);

    r = sl(5, -1, 6);
    c = sl(3, -1, 3);
    CHECK_EQ(grid_read(g, r, c, out), 0);
    CHECK(out[0] == 53 && out[1] == 52 && out[2] == 51 && out[3] == 43);
    grid_expect(out, r, c);

    r = sl(4, -2, 3);
    c = sl(2, 1, 1);
    CHECK_EQ(grid_read(g, r, c, out), 0);
    CHECK(out[0] == 42 && out[1] == 22 && out[2] == 2);

    int64_t ri[4] = {4, 1, 4, 0}, ci[3] = {3, 3, 0};
    r = lst(ri, 4);
    c = lst(ci, 3);
    CHECK_EQ(grid_read(g, r, c, out), 0);
    CHECK(out[0] == 43 && out[1] == 43 && out[2] == 40 && out[3] == 13 && out[5] == 10);
    grid_expect(out, r, c);

    int64_t sorted[3] = {0, 2, 5};
    r = lst(sorted, 3);
    c = sl(4, -3, 2);
    CHECK_EQ(grid_read(g, r, c, out), 0);
    CHECK(out[0] == 4 && out[1] == 1 && out[4] == 54 && out[5] == 51);

    int64_t one[1] = {4};
    r = sl(2, 1, 1);
    c = lst(one, 1);
    CHECK_EQ(grid_read(g, r, c, out), 0);
    CHECK_EQ(out[0], 24);

    /* A selection outside the array is refused, not read. */
    int64_t bad[2] = {1, 9};
    r = lst(bad, 2);
    c = sl(0, 1, 1);
    dim_sel sel[2] = {r, c};
    cellar_error err;
    cellar_error_clear(&err);
    CHECK_EQ(node_read(g, sel, out, 2 * sizeof *out, &err), CELLAR_ERANGE);

    /* Many runs: several batches of file selections, big-endian chunked. */
    node *line = child(root, "line");
    enum { M = 1600 };
    int64_t *idx = malloc(M * sizeof *idx), *vals = malloc(M * sizeof *vals);
    for (int i = 0; i < M; i++)
        idx[i] = (i % 7 == 3) ? idx[i - 1] : 4999 - 3 * i;
    dim_sel li = lst(idx, M);
    cellar_error_clear(&err);
    CHECK_EQ(node_read(line, &li, vals, M * sizeof *vals, &err), 0);
    int bad_vals = 0;
    for (int i = 0; i < M; i++)
        bad_vals += vals[i] != idx[i] * 3;
    CHECK_EQ(bad_vals, 0);
    dim_sel every = sl(1, 3, M);
    CHECK_EQ(node_read(line, &every, vals, M * sizeof *vals, &err), 0);
    CHECK_EQ(vals[0], 3);
    CHECK_EQ(vals[M - 1], (1 + 3 * (M - 1)) * 3);
    free(idx);
    free(vals);

    /* Both axes irregular: more blocks than one batch holds. */
    node *sq = child(root, "square");
    int64_t rows[30], cols[25];
    for (int i = 0; i < 30; i++)
        rows[i] = (i * 17) % 40 / 2 * 2;
    for (int j = 0; j < 25; j++)
        cols[j] = 39 - (j * 13) % 39;
    double *dv = malloc(30 * 25 * sizeof *dv);
    dim_sel s2[2] = {lst(rows, 30), lst(cols, 25)};
    CHECK_EQ(node_read(sq, s2, dv, 30 * 25 * sizeof *dv, &err), 0);
    int bad_sq = 0;
    for (int i = 0; i < 30; i++)
        for (int j = 0; j < 25; j++)
            bad_sq += dv[i * 25 + j] != rows[i] * 100 + cols[j] + 0.5;
    CHECK_EQ(bad_sq, 0);

    /* Long runs on both axes, more blocks than one batch: rows in runs of
     * 3 (reversed, one repeated), columns in runs of 5. */
    int64_t lr[31], lc[34];
    int nr_ = 0, nc_ = 0;
    for (int k = 39; k >= 0; k--)
        if (k % 4 != 3)
            lr[nr_++] = k;
    lr[nr_++] = 5;
    for (int k = 0; k < 40; k++)
        if (k % 6 != 5)
            lc[nc_++] = k;
    CHECK_EQ(nr_, 31);
    CHECK_EQ(nc_, 34);
    free(dv);
    dv = malloc(31 * 34 * sizeof *dv);
    dim_sel s3[2] = {lst(lr, 31), lst(lc, 34)};
    CHECK_EQ(node_read(sq, s3, dv, 31 * 34 * sizeof *dv, &err), 0);
    bad_sq = 0;
    for (int i = 0; i < 31; i++)
        for (int j = 0; j < 34; j++)
            bad_sq += dv[i * 34 + j] != lr[i] * 100 + lc[j] + 0.5;
    CHECK_EQ(bad_sq, 0);
    CHECK_DBL_EQ(dv[0], 3800.5);
    CHECK_DBL_EQ(dv[30 * 34 + 33], 539.5);
    free(dv);

    /* 1-D runs of 10 every 20 positions: hyperslab batches. */
    int64_t *runs = malloc(2500 * sizeof *runs), *rv = malloc(2500 * sizeof *rv);
    for (int i = 0; i < 2500; i++)
        runs[i] = (i / 10) * 20 + i % 10;
    dim_sel rs = lst(runs, 2500);
    CHECK_EQ(node_read(line, &rs, rv, 2500 * sizeof *rv, &err), 0);
    int bad_runs = 0;
    for (int i = 0; i < 2500; i++)
        bad_runs += rv[i] != runs[i] * 3;
    CHECK_EQ(bad_runs, 0);
    CHECK_EQ(rv[2499], 4989 * 3);
    free(runs);
    free(rv);

    /* 2-D strings with a reversed column slice and a row list. */
    node *names = child(root, "names");
    arena *a = arena_new();
    char *so[6] = {0};
    int64_t nr[3] = {1, 0, 1};
    dim_sel ns[2] = {lst(nr, 3), sl(2, -2, 2)};
    CHECK_EQ(node_read_strings(names, ns, a, so, &err), 0);
    CHECK_STR_EQ(so[0], "b2");
    CHECK_STR_EQ(so[1], "b0");
    CHECK_STR_EQ(so[2], "a2");
    CHECK_STR_EQ(so[3], "a0");
    CHECK_STR_EQ(so[4], "b2");
    CHECK_STR_EQ(so[5], "b0");
    CHECK_EQ(err.code, 0);
    arena_free(a);
    node_tree_free(root);
}

/* -------------------------------------------------- groups and links */

static void expect_children(node *n, const char *const *want, size_t nwant)
{
    arena *a = arena_new();
    const char **names = NULL;
    size_t count = 0;
    cellar_error err;
    cellar_error_clear(&err);
    CHECK_EQ(node_children(n, a, &names, &count, &err), 0);
    CHECK_EQ(count, nwant);
    for (size_t i = 0; i < count && i < nwant; i++)
        CHECK_STR_EQ(names[i], want[i]);
    arena_free(a);
}

void test_h5_groups(void)
{
    char path[512];
    tmp_path(path, sizeof path, "groups.h5");
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hid_t gcpl = H5Pcreate(H5P_GROUP_CREATE);
    H5Pset_link_creation_order(gcpl, H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED);
    hid_t ord = H5Gcreate2(f, "ordered", H5P_DEFAULT, gcpl, H5P_DEFAULT);
    H5Pclose(gcpl);
    hid_t plain = H5Gcreate2(f, "plain", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    const char *order[3] = {"zeta", "alpha", "mid"};
    for (int i = 0; i < 3; i++) {
        H5Gclose(H5Gcreate2(ord, order[i], H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
        H5Gclose(H5Gcreate2(plain, order[i], H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    }
    int32_t v = 42;
    hsize_t d1 = 1;
    mk_ds(plain, "zeta/value", H5T_STD_I32LE, H5T_NATIVE_INT32, 1, &d1, &v);
    H5Lcreate_soft("/plain/zeta/value", f, "soft", H5P_DEFAULT, H5P_DEFAULT);
    H5Lcreate_soft("/nowhere", f, "dangling", H5P_DEFAULT, H5P_DEFAULT);
    H5Lcreate_external("other.h5", "/x", f, "external", H5P_DEFAULT, H5P_DEFAULT);
    H5Gclose(ord);
    H5Gclose(plain);
    H5Fclose(f);

    node *root = open_ok(path);
    if (!root)
        return;
    static const char *const crt[3] = {"zeta", "alpha", "mid"};
    static const char *const byname[3] = {"alpha", "mid", "zeta"};
    expect_children(child(root, "ordered"), crt, 3);
    expect_children(child(root, "plain"), byname, 3);
    static const char *const top[5] = {"dangling", "external", "ordered", "plain", "soft"};
    expect_children(root, top, 5);

    node *val = child(root, "/plain/zeta/value");
    CHECK_STR_EQ(node_path(val), "/plain/zeta/value");
    CHECK_STR_EQ(node_name(val), "value");
    node *again = child(root, "plain/zeta/value");
    CHECK(val == again);
    node *soft = child(root, "soft");
    int32_t got = 0;
    dim_sel s = sl(0, 1, 1);
    cellar_error err;
    cellar_error_clear(&err);
    CHECK_EQ(node_read(soft, &s, &got, sizeof got, &err), 0);
    CHECK_EQ(got, 42);

    node *n = NULL;
    cellar_error_clear(&err);
    CHECK_EQ(node_child(root, "external", &n, &err), CELLAR_EFORMAT);
    CHECK(strstr(err.detail, "external link") != NULL);
    cellar_error_clear(&err);
    CHECK_EQ(node_child(root, "dangling", &n, &err), CELLAR_EFORMAT);
    cellar_error_clear(&err);
    CHECK_EQ(node_child(root, "missing", &n, &err), CELLAR_ENOTFOUND);
    CHECK(strstr(err.detail, "missing") != NULL);
    cellar_error_clear(&err);
    CHECK_EQ(node_child(root, ".", &n, &err), CELLAR_ENOTFOUND);
    cellar_error_clear(&err);
    CHECK_EQ(node_resolve(root, "plain/zeta/value/x", &n, &err), CELLAR_ENOTFOUND);
    CHECK(node_child_opt(root, "nope") == NULL);
    node_tree_free(root);
}

/* ------------------------------------------- opening, errors, closing */

static void write_bytes(const char *path, const void *data, size_t n)
{
    FILE *fp = fopen(path, "wb");
    CHECK(fp != NULL);
    if (!fp)
        return;
    fwrite(data, 1, n, fp);
    fclose(fp);
}

static int open_code(const char *path, char *detail, size_t size)
{
    node *root = NULL;
    cellar_error err;
    cellar_error_clear(&err);
    int rc = h5_open(path, &root, &err);
    CHECK(rc != 0 || root != NULL);
    snprintf(detail, size, "%s", err.detail);
    node_tree_free(root);
    return rc;
}

void test_h5_open_errors(void)
{
    char path[512], detail[CELLAR_ERROR_DETAIL_MAX];
    tmp_path(path, sizeof path, "text.h5ad");
    const char *text = "this is not an HDF5 file, just some text that is long enough\n";
    write_bytes(path, text, strlen(text));
    CHECK_EQ(open_code(path, detail, sizeof detail), CELLAR_EFORMAT);
    CHECK(strstr(detail, "not an HDF5 file") != NULL);

    tmp_path(path, sizeof path, "empty.h5");
    write_bytes(path, "", 0);
    CHECK_EQ(open_code(path, detail, sizeof detail), CELLAR_EFORMAT);

    tmp_path(path, sizeof path, "does-not-exist.h5");
    CHECK_EQ(open_code(path, detail, sizeof detail), CELLAR_ENOTFOUND);
    CHECK_EQ(open_code(h5_tmp_dir, detail, sizeof detail), CELLAR_EFORMAT);

    /* Truncations of a real file, at several lengths. */
    char full[512];
    tmp_path(full, sizeof full, "grid.h5");
    write_grid_file(full);
    FILE *fp = fopen(full, "rb");
    static char bytes[1 << 20];
    size_t n = fp ? fread(bytes, 1, sizeof bytes, fp) : 0;
    if (fp)
        fclose(fp);
    CHECK(n > 4096 && n < sizeof bytes);
    size_t cuts[] = {8, 100, 1000, n / 2, n - 1};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        tmp_path(path, sizeof path, "truncated.h5");
        write_bytes(path, bytes, cuts[i]);
        int rc = open_code(path, detail, sizeof detail);
        CHECK_EQ(rc, CELLAR_EFORMAT);
        if (cuts[i] >= 100)
            CHECK(strstr(detail, "truncated or corrupt") != NULL);
    }
    /* Garbage after a valid signature. */
    memset(bytes + 8, 0xAB, 200);
    tmp_path(path, sizeof path, "corrupt.h5");
    write_bytes(path, bytes, n);
    CHECK_EQ(open_code(path, detail, sizeof detail), CELLAR_EFORMAT);
    CHECK_EQ(H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL), 0);
}

void test_h5_userblock(void)
{
    char path[512];
    tmp_path(path, sizeof path, "mu.h5mu");
    hid_t fcpl = H5Pcreate(H5P_FILE_CREATE);
    H5Pset_userblock(fcpl, 512);
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, fcpl, H5P_DEFAULT);
    H5Pclose(fcpl);
    hid_t vs = vlen_utf8();
    const char *et = "MuData";
    mk_attr(f, "encoding-type", vs, vs, 0, NULL, &et);
    const char *mods[2] = {"rna", "prot"};
    hsize_t d2 = 2;
    hid_t mod = H5Gcreate2(f, "mod", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    mk_attr(mod, "mod-order", vs, vs, 1, &d2, mods);
    H5Gclose(mod);
    H5Tclose(vs);
    H5Fclose(f);
    const char header[] = "MuData (format-version=0.1.0;creator=muon;creator-version=0.4.1)";
    int fd = open(path, O_WRONLY);
    CHECK(fd >= 0);
    CHECK_EQ(pwrite(fd, header, sizeof header, 0), (long long)sizeof header);
    close(fd);

    node *root = open_ok(path);
    if (!root)
        return;
    CHECK_STR_EQ(node_attr_string(root, "encoding-type"), "MuData");
    node *m = child(root, "mod");
    char *dump = m ? json_dumps(json_object_get(node_attrs(m), "mod-order"), JSON_COMPACT) : NULL;
    CHECK_STR_EQ(dump, "[\"rna\",\"prot\"]");
    free(dump);
    node_tree_free(root);
}

void test_h5_close(void)
{
    char path[512];
    tmp_path(path, sizeof path, "close.h5");
    write_types_file(path);
    node *r1 = open_ok(path), *r2 = open_ok(path);
    if (!r1 || !r2)
        return;
    child(r1, "i32");
    child(r1, "vstr");
    child(r2, "i32");
    node_tree_free(r1);
    /* The other open of the same file is untouched. */
    int32_t v[3] = {0};
    read_all(r2, "i32", v, sizeof v, 3);
    CHECK_EQ(v[1], 2);
    CHECK(H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_FILE) > 0);
    node_tree_free(r2);
    CHECK_EQ(H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL), 0);
    /* Truly closed: libhdf5 lets us truncate and rewrite it in place. */
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    CHECK(f >= 0);
    hsize_t d1 = 1;
    int32_t seven = 7;
    mk_ds(f, "i32", H5T_STD_I32LE, H5T_NATIVE_INT32, 1, &d1, &seven);
    H5Fclose(f);
    node *r3 = open_ok(path);
    if (!r3)
        return;
    CHECK_EQ(node_get_info(child(r3, "i32"))->shape[0], 1);
    CHECK(node_child_opt(r3, "vstr") == NULL);
    node_tree_free(r3);
}

/* -------------------------------------------------------------- threads */

typedef struct thread_arg {
    node *grid;
    const char *bad_path;
    int failures;
    int printing_on;
} thread_arg;

static void *reader_thread(void *p)
{
    thread_arg *t = p;
    node *root = NULL;
    cellar_error err;
    cellar_error_clear(&err);
    if (h5_open(t->bad_path, &root, &err) != CELLAR_EFORMAT)
        t->failures++;
    H5E_auto2_t fn = NULL;
    void *data = NULL;
    H5Eget_auto2(H5E_DEFAULT, &fn, &data);
    t->printing_on = fn != NULL;
    for (int k = 0; k < 300; k++) {
        int64_t rows[3] = {k % GRID_R, (k * 7) % GRID_R, 0};
        dim_sel sel[2] = {lst(rows, 3), sl(GRID_C - 1, -1, GRID_C)};
        int32_t out[15];
        cellar_error_clear(&err);
        if (node_read(t->grid, sel, out, sizeof out, &err)) {
            t->failures++;
            continue;
        }
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < GRID_C; j++)
                t->failures += out[i * GRID_C + j] != rows[i] * 10 + (GRID_C - 1 - j);
    }
    return NULL;
}

void test_h5_threads(void)
{
    char path[512], bad[512];
    tmp_path(path, sizeof path, "threads.h5");
    tmp_path(bad, sizeof bad, "threads-bad.h5");
    write_grid_file(path);
    write_bytes(bad, "nope nope nope nope", 19);
    node *root = open_ok(path);
    if (!root)
        return;
    node *g = child(root, "grid");
    enum { T = 4 };
    pthread_t th[T];
    thread_arg args[T];
    for (int i = 0; i < T; i++) {
        args[i] = (thread_arg){.grid = g, .bad_path = bad};
        CHECK_EQ(pthread_create(&th[i], NULL, reader_thread, &args[i]), 0);
    }
    for (int i = 0; i < T; i++) {
        pthread_join(th[i], NULL);
        CHECK_EQ(args[i].failures, 0);
        CHECK_EQ(args[i].printing_on, 0);
    }
    node_tree_free(root);
}

/* ------------------------------------------------- rewrite in place */

static size_t slurp(const char *path, char *buf, size_t size)
{
    FILE *fp = fopen(path, "rb");
    size_t n = fp ? fread(buf, 1, size, fp) : 0;
    if (fp)
        fclose(fp);
    return n;
}

void test_h5_rewrite_in_place(void)
{
    char a[512], b[512], path[512];
    tmp_path(a, sizeof a, "rewrite-a.h5");
    tmp_path(b, sizeof b, "rewrite-b.h5");
    tmp_path(path, sizeof path, "rewrite.h5");
    write_grid_file(a);
    write_types_file(b);
    static char bytes_a[1 << 20], bytes_b[1 << 20];
    size_t na = slurp(a, bytes_a, sizeof bytes_a), nb = slurp(b, bytes_b, sizeof bytes_b);
    CHECK(na > 0 && nb > 0 && na != nb);
    write_bytes(path, bytes_a, na);
    node *old = open_ok(path);
    if (!old)
        return;
    CHECK(node_child_opt(old, "grid") != NULL);
    /* Same inode, new contents: libhdf5 would hand back the old file. */
    int fd = open(path, O_WRONLY | O_TRUNC);
    CHECK(fd >= 0);
    CHECK_EQ(write(fd, bytes_b, nb), (long long)nb);
    close(fd);
    node *root = NULL;
    cellar_error err;
    cellar_error_clear(&err);
    CHECK_EQ(h5_open(path, &root, &err), CELLAR_EUNAVAILABLE);
    CHECK(root == NULL);
    CHECK(strstr(err.detail, "rewritten in place") != NULL);
    node_tree_free(old);
    root = open_ok(path);
    if (!root)
        return;
    CHECK(node_child_opt(root, "grid") == NULL);
    CHECK_EQ(info_of(root, "i32")->dtype, DT_INT32);
    node_tree_free(root);
}

/* ------------------------------------------------------------ compound fields */

typedef struct rec {
    char index[6];
    int8_t code;
    float val; /* stored big-endian */
    uint8_t flag;
    double vec[3];
    const char *name;
    struct {
        int32_t a, b;
    } nested;
} rec;

/* anndata < 0.7 stored obs, var, obsm and varm as compound datasets: each
 * field is an array of its own, a member that is an array adds its
 * dimensions, and the probe walks every field. */
void test_h5_compound_fields(void)
{
    char path[512];
    tmp_path(path, sizeof path, "compound.h5");
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hid_t idx = fixed_str(6, H5T_STR_NULLPAD), name = vlen_utf8();
    hid_t boolt = H5Tenum_create(H5T_NATIVE_INT8);
    int8_t fv = 0, tv = 1;
    H5Tenum_insert(boolt, "FALSE", &fv);
    H5Tenum_insert(boolt, "TRUE", &tv);
    hsize_t three = 3;
    hid_t vec_m = H5Tarray_create2(H5T_NATIVE_DOUBLE, 1, &three);
    hid_t vec_f = H5Tarray_create2(H5T_IEEE_F64LE, 1, &three);
    hid_t nest = H5Tcreate(H5T_COMPOUND, 8);
    H5Tinsert(nest, "a", 0, H5T_NATIVE_INT32);
    H5Tinsert(nest, "b", 4, H5T_NATIVE_INT32);
    hid_t mt = H5Tcreate(H5T_COMPOUND, sizeof(rec));
    H5Tinsert(mt, "index", HOFFSET(rec, index), idx);
    H5Tinsert(mt, "code", HOFFSET(rec, code), H5T_NATIVE_INT8);
    H5Tinsert(mt, "val", HOFFSET(rec, val), H5T_NATIVE_FLOAT);
    H5Tinsert(mt, "flag", HOFFSET(rec, flag), boolt);
    H5Tinsert(mt, "vec", HOFFSET(rec, vec), vec_m);
    H5Tinsert(mt, "name", HOFFSET(rec, name), name);
    H5Tinsert(mt, "nested", HOFFSET(rec, nested), nest);
    /* the file type packed, val big-endian */
    size_t off = 0;
    hid_t ft = H5Tcreate(H5T_COMPOUND, 6 + 1 + 4 + 1 + 24 + sizeof(hvl_t) + 8);
    H5Tinsert(ft, "index", off, idx), off += 6;
    H5Tinsert(ft, "code", off, H5T_STD_I8LE), off += 1;
    H5Tinsert(ft, "val", off, H5T_IEEE_F32BE), off += 4;
    H5Tinsert(ft, "flag", off, boolt), off += 1;
    H5Tinsert(ft, "vec", off, vec_f), off += 24;
    H5Tinsert(ft, "name", off, name), off += sizeof(hvl_t);
    H5Tinsert(ft, "nested", off, nest);
    rec r[5];
    memset(r, 0, sizeof r);
    const char *names[5] = {"zero", "one", "twö", "three", "four"};
    for (int i = 0; i < 5; i++) {
        snprintf(r[i].index, sizeof r[i].index, "c%d", i * 11);
        r[i].code = (int8_t)(i - 1);
        r[i].val = 0.5f * (float)i;
        r[i].flag = (uint8_t)(i % 2);
        for (int k = 0; k < 3; k++)
            r[i].vec[k] = 10.0 * i + k;
        r[i].name = names[i];
        r[i].nested.a = i;
    }
    memcpy(r[4].index, "full6!", 6); /* NULLPAD: no terminator */
    hsize_t five = 5;
    mk_ds(f, "recs", ft, mt, 1, &five, r);
    H5Tclose(mt), H5Tclose(ft), H5Tclose(nest), H5Tclose(vec_m), H5Tclose(vec_f);
    H5Tclose(boolt), H5Tclose(idx), H5Tclose(name);
    H5Fclose(f);

    node *root = open_ok(path);
    if (!root)
        return;
    node *recs = child(root, "recs");
    const node_info *ri = node_get_info(recs);
    CHECK_EQ(ri->type, NODE_ARRAY);
    CHECK_EQ(ri->dtype, DT_NONE);
    CHECK_EQ(ri->n_fields, 7);
    static const char *const fields[7] = {"index", "code", "val", "flag", "vec", "name", "nested"};
    expect_children(recs, fields, 7);
    cellar_error err;
    cellar_error_clear(&err);

    node *val = child(root, "recs/val");
    CHECK_STR_EQ(node_path(val), "/recs/val");
    CHECK_EQ(node_get_info(val)->dtype, DT_FLOAT32);
    CHECK_EQ(node_get_info(val)->ndim, 1);
    CHECK_EQ(node_get_info(val)->shape[0], 5);
    CHECK_EQ(node_get_info(val)->n_fields, 0);
    int64_t pick[3] = {4, 0, 2};
    dim_sel s = {.count = 3, .index = pick};
    float fvals[3] = {0};
    CHECK_EQ(node_read(val, &s, fvals, sizeof fvals, &err), 0);
    CHECK_DBL_EQ(fvals[0], 2.0);
    CHECK_DBL_EQ(fvals[1], 0.0);
    CHECK_DBL_EQ(fvals[2], 1.0);

    node *code = child(root, "recs/code");
    int8_t codes[5];
    s = sl(0, 1, 5);
    CHECK_EQ(node_read(code, &s, codes, sizeof codes, &err), 0);
    CHECK_EQ(codes[0], -1);
    CHECK_EQ(codes[4], 3);

    node *flag = child(root, "recs/flag");
    CHECK_EQ(node_get_info(flag)->dtype, DT_BOOL);
    uint8_t flags[5];
    CHECK_EQ(node_read(flag, &s, flags, sizeof flags, &err), 0);
    CHECK_EQ(flags[1], 1);
    CHECK_EQ(flags[2], 0);

    /* a member float64[3]: a 2-D field; rows backwards, columns listed */
    node *vec = child(root, "recs/vec");
    CHECK_EQ(node_get_info(vec)->ndim, 2);
    CHECK_EQ(node_get_info(vec)->shape[1], 3);
    CHECK_EQ(node_get_info(vec)->dtype, DT_FLOAT64);
    int64_t cols[2] = {2, 0};
    dim_sel vs[2] = {sl(4, -2, 3), {.count = 2, .index = cols}};
    double v6[6] = {0};
    CHECK_EQ(node_read(vec, vs, v6, sizeof v6, &err), 0);
    CHECK_DBL_EQ(v6[0], 42.0);
    CHECK_DBL_EQ(v6[1], 40.0);
    CHECK_DBL_EQ(v6[2], 22.0);
    CHECK_DBL_EQ(v6[5], 0.0);
    int64_t bad[1] = {3};
    dim_sel vb[2] = {sl(0, 1, 1), {.count = 1, .index = bad}};
    double one = 0;
    cellar_error_clear(&err);
    CHECK_EQ(node_read(vec, vb, &one, sizeof one, &err), CELLAR_ERANGE);

    arena *a = arena_new();
    char *strs[5] = {0};
    node *index = child(root, "recs/index");
    CHECK_EQ(node_get_info(index)->dtype, DT_STRING);
    CHECK_EQ(node_read_strings(index, &s, a, strs, &err), 0);
    CHECK_STR_EQ(strs[1], "c11");
    CHECK_STR_EQ(strs[4], "full6!");
    node *nm = child(root, "recs/name");
    CHECK_EQ(node_read_strings(nm, &s, a, strs, &err), 0);
    CHECK_STR_EQ(strs[2], "twö");
    cellar_error_clear(&err);
    CHECK_EQ(node_stream_string(nm, 64, NULL, NULL, &err), CELLAR_EINVAL);
    CHECK_EQ(node_get_info(child(root, "recs/nested"))->dtype, DT_NONE);
    node *n = NULL;
    cellar_error_clear(&err);
    CHECK_EQ(node_child(recs, "nope", &n, &err), CELLAR_ENOTFOUND);
    cellar_error_clear(&err);
    CHECK_EQ(node_child(val, "x", &n, &err), CELLAR_ENOTFOUND);
    uint64_t addr;
    CHECK(h5_object_address(val, &addr) != 0);
    arena_free(a);
    node_tree_free(root);

    h5_probe_limits lim = H5_PROBE_DEFAULT_LIMITS;
    h5_probe_report rep;
    cellar_error_clear(&err);
    CHECK_EQ(h5_probe_file(path, &lim, &rep, &err), 0);
    CHECK_EQ(rep.datasets, 8); /* the dataset and its seven fields */
    CHECK_EQ(rep.broken, 0);
    CHECK_EQ(rep.strings_read, 10);
    CHECK(rep.bytes_read >= 5 * (1 + 4 + 1 + 24));
}

/* ------------------------------------------- heap ids (h5_heap.c)
 * Heap ids checked before libhdf5 follows them: a file with a vlen string
 * attribute and a vlen string dataset, then its global heap collection
 * damaged byte by byte the ways libhdf5 reads out of bounds on (an object
 * index the collection lacks, an object larger than its collection, one
 * longer than its string).  The damaged value is skipped (attribute) or
 * refused (dataset), never handed to libhdf5; the rest of the file reads. */

#define ATTR_VALUE "ATTRVALUE-one"
static const char *const DSET_VALUES[3] = {"DSETVAL-a", "DSETVAL-b", "DSETVAL-c"};

static void heap_write_valid(const char *path)
{
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, H5T_VARIABLE);
    H5Tset_cset(t, H5T_CSET_UTF8);
    hid_t scalar = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(f, "note", t, scalar, H5P_DEFAULT, H5P_DEFAULT);
    const char *v = ATTR_VALUE;
    CHECK(a >= 0 && H5Awrite(a, t, &v) >= 0);
    H5Aclose(a);
    int32_t count = 3;
    hid_t ca = H5Acreate2(f, "count", H5T_STD_I32LE, scalar, H5P_DEFAULT, H5P_DEFAULT);
    CHECK(ca >= 0 && H5Awrite(ca, H5T_NATIVE_INT32, &count) >= 0);
    H5Aclose(ca);
    hsize_t dims = 3;
    hid_t sp = H5Screate_simple(1, &dims, NULL);
    hid_t d = H5Dcreate2(f, "names", t, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    CHECK(d >= 0 && H5Dwrite(d, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, DSET_VALUES) >= 0);
    H5Dclose(d);
    H5Sclose(sp);
    H5Sclose(scalar);
    H5Tclose(t);
    H5Fclose(f);
}

/* The offset of the heap object whose data is s (its header, 16 bytes
 * with 8-byte lengths, right before it, ends with the data's size), or -1. */
static long object_data(const unsigned char *d, size_t n, const char *s)
{
    size_t len = strlen(s);
    for (size_t i = 16; i + len <= n; i++) {
        uint64_t size = 0;
        for (int b = 7; b >= 0; b--)
            size = size << 8 | d[i - 8 + (size_t)b];
        if (size == len && memcmp(d + i, s, len) == 0)
            return (long)i;
    }
    return -1;
}

static void put_le(unsigned char *p, uint64_t v, size_t n)
{
    for (size_t i = 0; i < n; i++, v >>= 8)
        p[i] = (unsigned char)v;
}

enum damage { INDEX_MISSING, SIZE_PAST_COLLECTION, SIZE_PAST_STRING };

/* A copy of valid with the heap object of value damaged; its path in out. */
static int write_damaged(const char *valid, const char *value, enum damage how, char *out,
                         size_t out_size, const char *name)
{
    static unsigned char d[1 << 16];
    size_t n = slurp(valid, (char *)d, sizeof d);
    CHECK(n > 0 && n < sizeof d);
    long at = object_data(d, n, value);
    CHECK(at > 0);
    if (at <= 0)
        return -1;
    unsigned char *hdr = d + at - 16;
    if (how == INDEX_MISSING)
        put_le(hdr, 999, 2);
    else if (how == SIZE_PAST_COLLECTION)
        put_le(hdr + 8, 1u << 20, 8);
    else
        put_le(hdr + 8, strlen(value) + 8, 8);
    tmp_path(out, out_size, name);
    write_bytes(out, d, n);
    return 0;
}

static int read_names(node *root, char **out, arena *a, cellar_error *err)
{
    node *names = NULL;
    int rc = node_resolve(root, "names", &names, err);
    if (rc)
        return rc;
    dim_sel sel = dim_sel_range(0, 3);
    return node_read_strings(names, &sel, a, out, err);
}

void test_h5_heap_ids_checked(void)
{
    char valid[512];
    tmp_path(valid, sizeof valid, "heap_valid.h5");
    heap_write_valid(valid);
    cellar_error err;
    cellar_error_clear(&err);
    node *root = NULL;
    CHECK_EQ(h5_open(valid, &root, &err), 0);
    if (!root)
        return;
    CHECK_STR_EQ(json_string_value(json_object_get(node_attrs(root), "note")), ATTR_VALUE);
    arena *a = arena_new();
    char *got[3] = {0};
    CHECK_EQ(read_names(root, got, a, &err), 0);
    for (int i = 0; i < 3; i++)
        CHECK_STR_EQ(got[i], DSET_VALUES[i]);
    node_tree_free(root);

    static const enum damage hows[] = {INDEX_MISSING, SIZE_PAST_COLLECTION, SIZE_PAST_STRING};
    for (size_t k = 0; k < sizeof hows / sizeof *hows; k++) {
        /* the attribute's value: skipped, the other attribute and the
         * dataset read */
        char path[512], name[64];
        snprintf(name, sizeof name, "heap_attr%zu.h5", k);
        if (write_damaged(valid, ATTR_VALUE, hows[k], path, sizeof path, name))
            continue;
        root = NULL;
        cellar_error_clear(&err);
        CHECK_EQ(h5_open(path, &root, &err), 0);
        if (root) {
            CHECK(json_object_get(node_attrs(root), "note") == NULL);
            CHECK_EQ(json_integer_value(json_object_get(node_attrs(root), "count")), 3);
            /* A size that moved the objects after it (the dataset's
             * strings) leaves libhdf5 none of them: refused too. */
            char *again[3] = {0};
            cellar_error_clear(&err);
            int rrc = read_names(root, again, a, &err);
            if (hows[k] == INDEX_MISSING) {
                CHECK_EQ(rrc, 0);
                CHECK_STR_EQ(again[2], DSET_VALUES[2]);
            } else {
                CHECK(rrc == 0 || rrc == CELLAR_EFORMAT);
            }
            node_tree_free(root);
        }
        /* one of the dataset's values: the read refused, naming why */
        snprintf(name, sizeof name, "heap_dset%zu.h5", k);
        if (write_damaged(valid, DSET_VALUES[1], hows[k], path, sizeof path, name))
            continue;
        root = NULL;
        cellar_error_clear(&err);
        CHECK_EQ(h5_open(path, &root, &err), 0);
        if (root) {
            CHECK_STR_EQ(json_string_value(json_object_get(node_attrs(root), "note")),
                         ATTR_VALUE);
            char *bad[3] = {0};
            cellar_error_clear(&err);
            CHECK_EQ(read_names(root, bad, a, &err), CELLAR_EFORMAT);
            CHECK(strstr(err.detail, "cannot read the strings of '/names' safely") != NULL);
            node_tree_free(root);
        }
    }
    arena_free(a);
    CHECK_EQ(H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL), 0);
}
