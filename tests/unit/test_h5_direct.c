/* storage/hdf5/h5_direct.c through storage/hdf5/h5.c: direct reads (pread + decode
 * outside libhdf5) must equal libhdf5's reads and the values written, for
 * every layout and filter pipeline they take, and must fail cleanly on
 * corrupt chunks. */
#include <fcntl.h>
#include <hdf5.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include <liblzf/lzf.h>

#include "storage/hdf5/h5.h"
#include "storage/hdf5/h5_direct.h"
#include "storage/node.h"
#include "tests/unit/unit.h"

static char hd_dir[256];

static void hd_path(char *buf, size_t size, const char *name)
{
    if (!hd_dir[0]) {
        snprintf(hd_dir, sizeof hd_dir, "/tmp/cellar-h5direct-test-XXXXXX");
        if (!mkdtemp(hd_dir)) {
            perror("mkdtemp");
            abort();
        }
        h5_library_init();
    }
    snprintf(buf, size, "%s/%s", hd_dir, name);
}

static dim_sel sl(int64_t start, int64_t step, int64_t count)
{
    dim_sel d = {.start = start, .step = step, .count = count, .index = NULL};
    return d;
}

static node *hd_open(const char *path)
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

static node *hd_child(node *root, const char *name)
{
    node *n = NULL;
    cellar_error err;
    cellar_error_clear(&err);
    int rc = node_resolve(root, name, &n, &err);
    CHECK_EQ(rc, 0);
    if (rc)
        fprintf(stderr, "node_resolve(%s): %s\n", name, err.detail);
    return n;
}

/* ------------------------------------------------------- the datasets */

enum { FT_I32LE, FT_F64LE, FT_I16LE, FT_I64BE, FT_F32LE, FT_U16LE, FT_U8, FT_BOOL, FT_F16LE,
       FT_F64BE, FT_F16BE, FT_I32BE };

enum { TR_PLAIN, TR_I16, TR_U8, TR_F16, TR_BOOL, TR_FRAC };

typedef struct ds_spec {
    const char *name;
    int ft;
    dtype_kind k;
    int rank;
    hsize_t dims[3];
    hsize_t chunk[3];     /* chunk[0] == 0: contiguous */
    const char *filters;  /* in pipeline order: s shuffle, d deflate, f fletcher32 */
    int tr;
    int has_fill;
    double fill;
    hsize_t wlo[3], whi[3]; /* the written block; whi[0] == 0: everything */
} ds_spec;

static const ds_spec hd_specs[] = {
    {"contig2d", FT_I32LE, DT_INT32, 2, {37, 23}, {0}, "", TR_PLAIN, 0, 0, {0}, {0}},
    {"contig_be", FT_F64BE, DT_FLOAT64, 2, {19, 11}, {0}, "", TR_FRAC, 0, 0, {0}, {0}},
    {"contig_wide", FT_F32LE, DT_FLOAT32, 2, {3, 300000}, {0}, "", TR_FRAC, 0, 0, {0}, {0}},
    {"contig_tall", FT_F32LE, DT_FLOAT32, 2, {2000, 300}, {0}, "", TR_FRAC, 0, 0, {0}, {0}},
    {"gzip2d", FT_F64LE, DT_FLOAT64, 2, {50, 33}, {8, 7}, "d", TR_FRAC, 0, 0, {0}, {0}},
    {"shufgz2d", FT_I16LE, DT_INT16, 2, {41, 29}, {10, 6}, "sd", TR_I16, 0, 0, {0}, {0}},
    {"be1d", FT_I64BE, DT_INT64, 1, {1000}, {64}, "sd", TR_PLAIN, 0, 0, {0}, {0}},
    {"be_plain", FT_I32BE, DT_INT32, 1, {300}, {32}, "", TR_PLAIN, 0, 0, {0}, {0}},
    {"fl1d", FT_F32LE, DT_FLOAT32, 1, {777}, {50}, "sdf", TR_FRAC, 0, 0, {0}, {0}},
    {"fl_only", FT_U16LE, DT_UINT16, 2, {30, 20}, {7, 9}, "f", TR_PLAIN, 0, 0, {0}, {0}},
    {"sparse1d", FT_I32LE, DT_INT32, 1, {500}, {40}, "d", TR_PLAIN, 1, -7, {45}, {121}},
    {"sparse2d", FT_U16LE, DT_UINT16, 2, {60, 40}, {16, 16}, "sd", TR_PLAIN, 0, 0, {20, 3},
     {37, 18}},
    {"u8_plain", FT_U8, DT_UINT8, 2, {90, 70}, {32, 64}, "", TR_U8, 0, 0, {0}, {0}},
    {"bool", FT_BOOL, DT_BOOL, 1, {203}, {16}, "d", TR_BOOL, 0, 0, {0}, {0}},
    {"f16", FT_F16LE, DT_FLOAT16, 2, {21, 17}, {5, 5}, "s", TR_F16, 0, 0, {0}, {0}},
    {"f16be", FT_F16BE, DT_FLOAT16, 1, {77}, {10}, "d", TR_F16, 0, 0, {0}, {0}},
    {"cube", FT_I32LE, DT_INT32, 3, {7, 9, 11}, {3, 4, 5}, "d", TR_PLAIN, 0, 0, {0}, {0}},
    {"many", FT_I32LE, DT_INT32, 1, {12000}, {4}, "", TR_PLAIN, 0, 0, {0}, {0}},
};
#define HD_NSPECS (sizeof hd_specs / sizeof hd_specs[0])

static hid_t hd_bool_type(void)
{
    hid_t t = H5Tenum_create(H5T_STD_I8LE);
    signed char f = 0, tr = 1;
    H5Tenum_insert(t, "FALSE", &f);
    H5Tenum_insert(t, "TRUE", &tr);
    return t;
}

static hid_t hd_f16(H5T_order_t order)
{
    hid_t t = H5Tcopy(H5T_IEEE_F32LE);
    H5Tset_fields(t, 15, 10, 5, 0, 10);
    H5Tset_size(t, 2);
    H5Tset_ebias(t, 15);
    H5Tset_order(t, order);
    return t;
}

/* A new file type id for ft (the caller closes it). */
static hid_t hd_ftype(int ft)
{
    switch (ft) {
    case FT_I32LE: return H5Tcopy(H5T_STD_I32LE);
    case FT_I32BE: return H5Tcopy(H5T_STD_I32BE);
    case FT_F64LE: return H5Tcopy(H5T_IEEE_F64LE);
    case FT_I16LE: return H5Tcopy(H5T_STD_I16LE);
    case FT_I64BE: return H5Tcopy(H5T_STD_I64BE);
    case FT_F32LE: return H5Tcopy(H5T_IEEE_F32LE);
    case FT_U16LE: return H5Tcopy(H5T_STD_U16LE);
    case FT_U8: return H5Tcopy(H5T_STD_U8LE);
    case FT_BOOL: return hd_bool_type();
    case FT_F16LE: return hd_f16(H5T_ORDER_LE);
    case FT_F16BE: return hd_f16(H5T_ORDER_BE);
    case FT_F64BE: return H5Tcopy(H5T_IEEE_F64BE);
    default: return H5I_INVALID_HID;
    }
}

/* The value written at pos. */
static double hd_value(const ds_spec *s, const int64_t *pos)
{
    double acc = 0;
    for (int d = 0; d < s->rank; d++)
        acc = acc * 1000 + (double)pos[d];
    switch (s->tr) {
    case TR_I16: return fmod(acc, 30011) - 15000;
    case TR_U8: return fmod(acc, 251);
    case TR_F16: return fmod(acc, 1024) * 0.5;
    case TR_BOOL: return fmod(acc, 3) == 0 ? 1 : 0;
    case TR_FRAC: return acc + 0.25;
    default: return acc;
    }
}

static int hd_written(const ds_spec *s, const int64_t *pos)
{
    if (!s->whi[0])
        return 1;
    for (int d = 0; d < s->rank; d++)
        if (pos[d] < (int64_t)s->wlo[d] || pos[d] >= (int64_t)s->whi[d])
            return 0;
    return 1;
}

/* unlimited: chunked datasets get unlimited maximum dims (other chunk
 * indexes in the latest file format). */
static void hd_write_one(hid_t f, const ds_spec *s, int unlimited)
{
    hid_t ft = hd_ftype(s->ft);
    hsize_t maxdims[3] = {H5S_UNLIMITED, H5S_UNLIMITED, H5S_UNLIMITED};
    hid_t space = H5Screate_simple(s->rank, s->dims, unlimited && s->chunk[0] ? maxdims : NULL);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    if (s->chunk[0]) {
        H5Pset_chunk(dcpl, s->rank, s->chunk);
        for (const char *c = s->filters; *c; c++) {
            if (*c == 's')
                H5Pset_shuffle(dcpl);
            else if (*c == 'd')
                H5Pset_deflate(dcpl, 6);
            else if (*c == 'f')
                H5Pset_fletcher32(dcpl);
        }
        if (s->has_fill)
            H5Pset_fill_value(dcpl, H5T_NATIVE_DOUBLE, &s->fill);
    }
    hid_t ds = H5Dcreate2(f, s->name, ft, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    CHECK(ds >= 0);
    size_t total = 1;
    for (int d = 0; d < s->rank; d++)
        total *= s->dims[d];
    double *vals = malloc(total * sizeof *vals);
    int8_t *bools = malloc(total);
    int64_t pos[3] = {0};
    for (size_t i = 0; i < total; i++) {
        vals[i] = hd_value(s, pos);
        bools[i] = (int8_t)vals[i];
        for (int d = s->rank - 1; d >= 0 && ++pos[d] == (int64_t)s->dims[d]; d--)
            pos[d] = 0;
    }
    hid_t fsel = H5S_ALL, msel = H5S_ALL;
    if (s->whi[0]) {
        hsize_t count[3];
        for (int d = 0; d < s->rank; d++)
            count[d] = s->whi[d] - s->wlo[d];
        fsel = H5Scopy(space);
        msel = H5Scopy(space);
        H5Sselect_hyperslab(fsel, H5S_SELECT_SET, s->wlo, NULL, count, NULL);
        H5Sselect_hyperslab(msel, H5S_SELECT_SET, s->wlo, NULL, count, NULL);
    }
    if (s->ft == FT_BOOL)
        CHECK(H5Dwrite(ds, ft, msel, fsel, H5P_DEFAULT, bools) >= 0);
    else
        CHECK(H5Dwrite(ds, H5T_NATIVE_DOUBLE, msel, fsel, H5P_DEFAULT, vals) >= 0);
    if (fsel != H5S_ALL) {
        H5Sclose(fsel);
        H5Sclose(msel);
    }
    free(vals);
    free(bools);
    H5Dclose(ds);
    H5Pclose(dcpl);
    H5Sclose(space);
    H5Tclose(ft);
}

/* latest: the latest file format (fixed array, extensible array and v2
 * B-tree chunk indexes), with unlimited dims. */
static void hd_write_file(const char *path, hsize_t userblock, int latest)
{
    hid_t fcpl = H5Pcreate(H5P_FILE_CREATE);
    if (userblock)
        H5Pset_userblock(fcpl, userblock);
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    if (latest)
        H5Pset_libver_bounds(fapl, H5F_LIBVER_LATEST, H5F_LIBVER_LATEST);
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, fcpl, fapl);
    CHECK(f >= 0);
    H5Pclose(fcpl);
    H5Pclose(fapl);
    for (size_t i = 0; i < HD_NSPECS; i++)
        hd_write_one(f, &hd_specs[i], latest);
    H5Fclose(f);
    if (userblock) {
        const char header[] = "MuData (format-version=0.1.0;creator=muon)";
        int fd = open(path, O_WRONLY);
        CHECK(fd >= 0);
        CHECK_EQ(pwrite(fd, header, sizeof header, 0), (long long)sizeof header);
        close(fd);
    }
}

/* ------------------------------------------------------------ checking */

static double half_to_double(uint16_t h)
{
    int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    double v = e == 0 ? ldexp(m, -24) : e == 31 ? INFINITY : ldexp(m + 1024, e - 25);
    return (h & 0x8000) ? -v : v;
}

static double elem_to_double(const unsigned char *p, dtype_kind k)
{
    switch (k) {
    case DT_BOOL: return p[0];
    case DT_INT8: { int8_t v; memcpy(&v, p, 1); return v; }
    case DT_UINT8: return p[0];
    case DT_INT16: { int16_t v; memcpy(&v, p, 2); return v; }
    case DT_UINT16: { uint16_t v; memcpy(&v, p, 2); return v; }
    case DT_INT32: { int32_t v; memcpy(&v, p, 4); return v; }
    case DT_UINT32: { uint32_t v; memcpy(&v, p, 4); return v; }
    case DT_INT64: { int64_t v; memcpy(&v, p, 8); return (double)v; }
    case DT_UINT64: { uint64_t v; memcpy(&v, p, 8); return (double)v; }
    case DT_FLOAT16: { uint16_t v; memcpy(&v, p, 2); return half_to_double(v); }
    case DT_FLOAT32: { float v; memcpy(&v, p, 4); return v; }
    case DT_FLOAT64: { double v; memcpy(&v, p, 8); return v; }
    default: return NAN;
    }
}

#define HD_MAX_SELS 8

/* Selections along an axis of n: slices (full, middle, reversed, steps,
 * negative steps) and index lists (unordered with duplicates, sorted). */
static int hd_sels(int64_t n, dim_sel *out, int64_t lists[2][8])
{
    int k = 0;
    out[k++] = sl(0, 1, n);
    int64_t a = n / 3, cnt = n / 2 + 1;
    if (a + cnt > n)
        cnt = n - a;
    out[k++] = sl(a, 1, cnt);
    out[k++] = sl(n - 1, -1, n);
    int64_t s3 = n > 1 ? 1 : 0;
    out[k++] = sl(s3, 3, (n - 1 - s3) / 3 + 1);
    out[k++] = sl(n - 1, -4, (n - 1) / 4 + 1);
    int64_t l0[8] = {n - 1, 0, n / 2, n / 2, 1 % n, n - 1, 2 * n / 3, n / 5};
    memcpy(lists[0], l0, sizeof l0);
    out[k] = sl(0, 1, 8);
    out[k++].index = lists[0];
    int64_t l1[6] = {0, 1 % n, n / 4, n / 4 + 1 < n ? n / 4 + 1 : n - 1, n > 2 ? n - 2 : 0, n - 1};
    memcpy(lists[1], l1, sizeof l1);
    out[k] = sl(0, 1, 6);
    out[k++].index = lists[1];
    out[k++] = sl(n / 2, 1, 1);
    return k;
}

typedef struct hd_trees {
    node *lib, *direct, *fetch; /* libhdf5; direct with tables; chunks via libhdf5 */
} hd_trees;

static int hd_read(node *n, int mode, const dim_sel *sel, void *out, size_t bytes)
{
    cellar_error err;
    cellar_error_clear(&err);
    h5_set_direct_reads(mode);
    int rc = node_read(n, sel, out, bytes, &err);
    h5_set_direct_reads(1);
    if (rc)
        fprintf(stderr, "node_read(%s, mode %d): %s\n", node_path(n), mode, err.detail);
    return rc;
}

/* Every combination of selections: the three read paths agree byte for byte
 * and with the values written.  Returns the number of bad elements. */
static long hd_check_spec(const ds_spec *s, hd_trees *t)
{
    node *nl = hd_child(t->lib, s->name), *nd = hd_child(t->direct, s->name),
         *nf = hd_child(t->fetch, s->name);
    if (!nl || !nd || !nf)
        return 1;
    size_t es = dtype_size(s->k);
    dim_sel sels[3][HD_MAX_SELS];
    int64_t lists[3][2][8];
    int nsel[3] = {1, 1, 1};
    for (int d = 0; d < s->rank; d++)
        nsel[d] = hd_sels((int64_t)s->dims[d], sels[d], lists[d]);
    /* big dims: fewer combinations */
    long bad = 0;
    int idx[3] = {0};
    for (;;) {
        dim_sel sel[3];
        size_t total = 1;
        for (int d = 0; d < s->rank; d++) {
            sel[d] = sels[d][idx[d]];
            total *= (size_t)sel[d].count;
        }
        unsigned char *a = malloc(total * es), *b = malloc(total * es), *c = malloc(total * es);
        memset(a, 0xA5, total * es);
        memset(b, 0x5A, total * es);
        memset(c, 0x33, total * es);
        int ra = hd_read(nl, 0, sel, a, total * es);
        int rb = hd_read(nd, 1, sel, b, total * es);
        int rc = hd_read(nf, 1, sel, c, total * es);
        CHECK_EQ(ra, 0);
        CHECK_EQ(rb, 0);
        CHECK_EQ(rc, 0);
        if (!ra && !rb && !rc) {
            int same_b = memcmp(a, b, total * es) == 0, same_c = memcmp(a, c, total * es) == 0;
            if (!same_b || !same_c) {
                fprintf(stderr, "%s: direct reads differ from libhdf5 (sel %d %d %d)\n",
                        s->name, idx[0], idx[1], idx[2]);
                bad++;
            }
            int64_t o[3] = {0};
            for (size_t i = 0; i < total; i++) {
                int64_t pos[3];
                for (int d = 0; d < s->rank; d++)
                    pos[d] = dim_sel_at(&sel[d], o[d]);
                double want = hd_written(s, pos) ? hd_value(s, pos) : s->fill;
                double got = elem_to_double(b + i * es, s->k);
                if (got != want) {
                    if (bad < 5)
                        fprintf(stderr, "%s[%lld,%lld,%lld]: %g, expected %g\n", s->name,
                                (long long)pos[0], (long long)pos[1], (long long)pos[2], got,
                                want);
                    bad++;
                }
                for (int d = s->rank - 1; d >= 0 && ++o[d] == sel[d].count; d--)
                    o[d] = 0;
            }
        } else {
            bad++;
        }
        free(a);
        free(b);
        free(c);
        int d = s->rank - 1;
        while (d >= 0 && ++idx[d] == nsel[d])
            idx[d--] = 0;
        if (d < 0)
            break;
    }
    return bad;
}

static void hd_open_trees(const char *path, hd_trees *t)
{
    t->lib = hd_open(path);
    t->direct = hd_open(path);
    h5_set_direct_reads(2);
    t->fetch = hd_open(path);
    /* plans are made on first use: make the fetch tree's now, in mode 2 */
    for (size_t i = 0; t->fetch && i < HD_NSPECS; i++) {
        node *n = hd_child(t->fetch, hd_specs[i].name);
        int want = hd_specs[i].chunk[0] ? 2 : 1;
        CHECK_EQ(n ? h5_direct_kind(n) : -1, want);
    }
    h5_set_direct_reads(1);
}

static void hd_close_trees(hd_trees *t)
{
    node_tree_free(t->lib);
    node_tree_free(t->direct);
    node_tree_free(t->fetch);
}

static void hd_check_file(const char *path)
{
    hd_trees t;
    hd_open_trees(path, &t);
    if (!t.lib || !t.direct || !t.fetch) {
        hd_close_trees(&t);
        return;
    }
    for (size_t i = 0; i < HD_NSPECS; i++) {
        const ds_spec *s = &hd_specs[i];
        node *n = hd_child(t.direct, s->name);
        /* "many" has more chunks than libhdf5 lists cheaply (2048): its
         * table is made by looking chunks up by coordinates, direct too */
        int want = 1;
        int kind = n ? h5_direct_kind(n) : -1;
        if (kind != want)
            fprintf(stderr, "%s: read path %d, expected %d\n", s->name, kind, want);
        CHECK_EQ(kind, want);
        long bad = hd_check_spec(s, &t);
        if (bad)
            fprintf(stderr, "%s: %ld bad\n", s->name, bad);
        CHECK_EQ(bad, 0);
    }
    hd_close_trees(&t);
}

void test_h5_direct_layouts(void)
{
    char path[512];
    hd_path(path, sizeof path, "direct.h5");
    hd_write_file(path, 0, 0);
    hd_check_file(path);
}

void test_h5_direct_latest_format(void)
{
    char path[512];
    hd_path(path, sizeof path, "direct-latest.h5");
    hd_write_file(path, 0, 1);
    hd_check_file(path);
}

void test_h5_direct_userblock(void)
{
    char path[512];
    hd_path(path, sizeof path, "direct.h5mu");
    hd_write_file(path, 512, 0);
    hd_check_file(path);
    hd_path(path, sizeof path, "direct-latest.h5mu");
    hd_write_file(path, 512, 1);
    hd_check_file(path);
}

/* ----------------------------------------------------- not direct, 0-d */

void test_h5_direct_fallbacks(void)
{
    char path[512];
    hd_path(path, sizeof path, "fallback.h5");
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hsize_t n = 100, ch = 10;
    int32_t v[100];
    for (int i = 0; i < 100; i++)
        v[i] = i * 5;
    hid_t sp = H5Screate_simple(1, &n, NULL);
    /* scale-offset: a filter direct reads do not know */
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(dcpl, 1, &ch);
    H5Pset_scaleoffset(dcpl, H5Z_SO_INT, H5Z_SO_INT_MINBITS_DEFAULT);
    hid_t ds = H5Dcreate2(f, "scaleoffset", H5T_STD_I32LE, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    H5Dwrite(ds, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, v);
    H5Dclose(ds);
    H5Pclose(dcpl);
    /* compact layout */
    dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_layout(dcpl, H5D_COMPACT);
    ds = H5Dcreate2(f, "compact", H5T_STD_I32LE, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    H5Dwrite(ds, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, v);
    H5Dclose(ds);
    H5Pclose(dcpl);
    /* contiguous, never written: no storage */
    ds = H5Dcreate2(f, "unwritten", H5T_STD_I32LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dclose(ds);
    /* a non-bool enum */
    hid_t en = H5Tenum_create(H5T_STD_I16LE);
    int16_t ea = 1, eb = 700;
    H5Tenum_insert(en, "A", &ea);
    H5Tenum_insert(en, "B", &eb);
    int16_t ev[100];
    for (int i = 0; i < 100; i++)
        ev[i] = i % 2 ? 700 : 1;
    ds = H5Dcreate2(f, "enum", en, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dwrite(ds, en, H5S_ALL, H5S_ALL, H5P_DEFAULT, ev);
    H5Dclose(ds);
    H5Tclose(en);
    H5Sclose(sp);
    /* a scalar */
    sp = H5Screate(H5S_SCALAR);
    double sc = 4.5;
    ds = H5Dcreate2(f, "scalar", H5T_IEEE_F64LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dwrite(ds, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, &sc);
    H5Dclose(ds);
    H5Sclose(sp);
    H5Fclose(f);

    node *root = hd_open(path);
    if (!root)
        return;
    const char *names[] = {"scaleoffset", "compact", "unwritten", "enum"};
    for (size_t i = 0; i < 4; i++) {
        node *nn = hd_child(root, names[i]);
        CHECK_EQ(nn ? h5_direct_kind(nn) : -1, 0);
    }
    int32_t out[4];
    dim_sel s = sl(97, -31, 4);
    CHECK_EQ(hd_read(hd_child(root, "scaleoffset"), 1, &s, out, sizeof out), 0);
    CHECK(out[0] == 485 && out[1] == 330 && out[2] == 175 && out[3] == 20);
    CHECK_EQ(hd_read(hd_child(root, "compact"), 1, &s, out, sizeof out), 0);
    CHECK(out[0] == 485 && out[3] == 20);
    CHECK_EQ(hd_read(hd_child(root, "unwritten"), 1, &s, out, sizeof out), 0);
    CHECK(out[0] == 0 && out[3] == 0);
    int16_t e[4];
    CHECK_EQ(hd_read(hd_child(root, "enum"), 1, &s, e, sizeof e), 0);
    CHECK(e[0] == 700 && e[1] == 1 && e[2] == 700 && e[3] == 1);
    double d = 0;
    CHECK_EQ(hd_read(hd_child(root, "scalar"), 1, NULL, &d, sizeof d), 0);
    CHECK_DBL_EQ(d, 4.5);
    CHECK_EQ(h5_direct_kind(hd_child(root, "scalar")), 0);
    node_tree_free(root);
}

/* ------------------------------------------------------------- corrupt */

/* Address and stored size of the chunk at `off` of dataset name. */
static int hd_chunk_at(const char *path, const char *name, hsize_t off, haddr_t *addr,
                       hsize_t *size)
{
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t ds = H5Dopen2(f, name, H5P_DEFAULT);
    unsigned mask = 0;
    herr_t st = H5Dget_chunk_info_by_coord(ds, &off, &mask, addr, size);
    H5Dclose(ds);
    H5Fclose(f);
    return st < 0 ? -1 : 0;
}

static void hd_patch(const char *path, haddr_t at, const void *bytes, size_t n)
{
    int fd = open(path, O_WRONLY);
    CHECK(fd >= 0);
    CHECK_EQ(pwrite(fd, bytes, n, (off_t)at), (long long)n);
    close(fd);
}

static void hd_write_1d(hid_t f, const char *name, const char *filters)
{
    hsize_t n = 400, ch = 100;
    int32_t v[400];
    for (int i = 0; i < 400; i++)
        v[i] = i * 7 + 1;
    hid_t sp = H5Screate_simple(1, &n, NULL);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(dcpl, 1, &ch);
    for (const char *c = filters; *c; c++) {
        if (*c == 's')
            H5Pset_shuffle(dcpl);
        else if (*c == 'd')
            H5Pset_deflate(dcpl, 6);
        else if (*c == 'f')
            H5Pset_fletcher32(dcpl);
    }
    hid_t ds = H5Dcreate2(f, name, H5T_STD_I32LE, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    H5Dwrite(ds, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, v);
    H5Dclose(ds);
    H5Pclose(dcpl);
    H5Sclose(sp);
}

/* Reads of the chunk at 100..199 in both direct paths: the code, and the
 * detail of the first. */
static void hd_expect_corrupt(const char *path, const char *name, const char *needle)
{
    for (int mode = 1; mode <= 2; mode++) {
        h5_set_direct_reads(mode);
        node *root = hd_open(path);
        node *n = root ? hd_child(root, name) : NULL;
        CHECK_EQ(n ? h5_direct_kind(n) : -1, mode);
        h5_set_direct_reads(1);
        if (!n) {
            node_tree_free(root);
            continue;
        }
        int32_t out[50];
        dim_sel s = sl(120, 1, 50);
        cellar_error err;
        cellar_error_clear(&err);
        CHECK_EQ(node_read(n, &s, out, sizeof out, &err), CELLAR_EFORMAT);
        if (needle && !strstr(err.detail, needle))
            fprintf(stderr, "%s: detail '%s' lacks '%s'\n", name, err.detail, needle);
        if (needle)
            CHECK(strstr(err.detail, needle) != NULL);
        CHECK(strstr(err.detail, name) != NULL);
        /* Other chunks still read. */
        dim_sel ok = sl(0, 1, 50);
        cellar_error_clear(&err);
        CHECK_EQ(node_read(n, &ok, out, sizeof out, &err), 0);
        CHECK_EQ(out[49], 49 * 7 + 1);
        node_tree_free(root);
    }
}

void test_h5_direct_corrupt(void)
{
    char path[512];
    hd_path(path, sizeof path, "corrupt.h5");
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hd_write_1d(f, "garbage", "sd");
    hd_write_1d(f, "short", "d");
    hd_write_1d(f, "checksum", "f");
    hd_write_1d(f, "checksum_gz", "df");
    H5Fclose(f);
    haddr_t addr;
    hsize_t size;

    /* Garbage instead of a deflate stream. */
    CHECK_EQ(hd_chunk_at(path, "garbage", 100, &addr, &size), 0);
    unsigned char junk[4096];
    for (size_t i = 0; i < sizeof junk; i++)
        junk[i] = (unsigned char)(i * 131 + 17);
    CHECK(size < sizeof junk);
    hd_patch(path, addr, junk, (size_t)size);

    /* A valid zlib stream of half the chunk. */
    CHECK_EQ(hd_chunk_at(path, "short", 100, &addr, &size), 0);
    unsigned char half[200];
    memset(half, 3, sizeof half);
    unsigned char z[512];
    uLongf zn = sizeof z;
    CHECK_EQ(compress2(z, &zn, half, sizeof half, 6), Z_OK);
    CHECK(zn <= size);
    hd_patch(path, addr, z, (size_t)zn);

    /* One flipped bit under a checksum. */
    CHECK_EQ(hd_chunk_at(path, "checksum", 100, &addr, &size), 0);
    CHECK_EQ(size, 404);
    unsigned char byte = 0x40 ^ (unsigned char)((100 * 7 + 1) & 0xff);
    hd_patch(path, addr, &byte, 1);
    CHECK_EQ(hd_chunk_at(path, "checksum_gz", 100, &addr, &size), 0);
    unsigned char b2[1] = {0};
    int fd = open(path, O_RDONLY);
    CHECK_EQ(pread(fd, b2, 1, (off_t)(addr + size / 2)), 1);
    close(fd);
    b2[0] ^= 0x10;
    hd_patch(path, addr + size / 2, b2, 1);

    hd_expect_corrupt(path, "garbage", NULL);
    hd_expect_corrupt(path, "short", "inflates to 200 bytes");
    hd_expect_corrupt(path, "checksum", "Fletcher-32");
    hd_expect_corrupt(path, "checksum_gz", NULL);
}

/* A plan refuses what it cannot read, and chunks that cannot be. */
void test_h5_direct_plan_checks(void)
{
    h5d_layout l;
    memset(&l, 0, sizeof l);
    l.ndim = 1;
    l.shape[0] = 100;
    l.elem_size = 4;
    l.file_size = 1000;
    l.contiguous = 1;
    l.addr = 700; /* 400 bytes do not fit */
    h5d_plan *p = NULL;
    cellar_error err;
    cellar_error_clear(&err);
    CHECK_EQ(h5d_plan_new(&l, &p, &err), CELLAR_EFORMAT);
    CHECK(p == NULL);
    l.addr = 600;
    cellar_error_clear(&err);
    CHECK_EQ(h5d_plan_new(&l, &p, &err), 0);
    CHECK(p && h5d_plan_is_direct(p));
    h5d_plan_free(p);

    l.contiguous = 0;
    l.file_size = 100000;
    l.chunk[0] = 10;
    l.nfilters = 1;
    l.filters[0].id = 32001; /* blosc: not read here */
    cellar_error_clear(&err);
    CHECK_EQ(h5d_plan_new(&l, &p, &err), CELLAR_EINVAL);
    l.nfilters = 2;
    l.filters[0].id = H5D_FILTER_LZF;
    l.filters[1].id = H5D_FILTER_DEFLATE;
    cellar_error_clear(&err);
    CHECK_EQ(h5d_plan_new(&l, &p, &err), CELLAR_EINVAL);
    l.nfilters = 2;
    l.filters[0].id = H5D_FILTER_DEFLATE;
    l.filters[1].id = H5D_FILTER_DEFLATE;
    cellar_error_clear(&err);
    CHECK_EQ(h5d_plan_new(&l, &p, &err), CELLAR_EINVAL);
    l.nfilters = 1;
    cellar_error_clear(&err);
    CHECK_EQ(h5d_plan_new(&l, &p, &err), 0);
    if (!p)
        return;
    CHECK_EQ(h5d_plan_is_direct(p), 0);
    int64_t start = 10;
    cellar_error_clear(&err);
    CHECK_EQ(h5d_plan_add_chunk(p, &start, 100, 30, 0, &err), 0);
    start = 15; /* off the grid */
    cellar_error_clear(&err);
    CHECK_EQ(h5d_plan_add_chunk(p, &start, 200, 30, 0, &err), CELLAR_EFORMAT);
    start = 100; /* outside */
    cellar_error_clear(&err);
    CHECK_EQ(h5d_plan_add_chunk(p, &start, 200, 30, 0, &err), CELLAR_EFORMAT);
    start = 20; /* past the end of the file */
    cellar_error_clear(&err);
    CHECK_EQ(h5d_plan_add_chunk(p, &start, 99990, 30, 0, &err), CELLAR_EFORMAT);
    cellar_error_clear(&err); /* far too big for a 40-byte chunk */
    CHECK_EQ(h5d_plan_add_chunk(p, &start, 0, 9000, 0, &err), CELLAR_EFORMAT);
    cellar_error_clear(&err); /* unfiltered (mask) but not 40 bytes */
    CHECK_EQ(h5d_plan_add_chunk(p, &start, 0, 30, 1, &err), CELLAR_EFORMAT);
    start = 10; /* twice */
    cellar_error_clear(&err);
    CHECK_EQ(h5d_plan_add_chunk(p, &start, 300, 30, 0, &err), 0);
    cellar_error_clear(&err);
    CHECK_EQ(h5d_plan_finish_table(p, &err), CELLAR_EFORMAT);
    h5d_plan_free(p);

    /* Unshuffle with a tail, and Fletcher-32 against libhdf5 in the tests
     * above. */
    const uint8_t src[7] = {1, 2, 3, 10, 20, 30, 99};
    uint8_t dst[7];
    h5d_unshuffle(src, dst, 7, 2);
    const uint8_t want[7] = {1, 10, 2, 20, 3, 30, 99};
    CHECK(memcmp(dst, want, 7) == 0);
    /* sum1 = 0x0102, sum2 = 0x0102 for one 16-bit word */
    const uint8_t w[2] = {1, 2};
    CHECK_EQ(h5d_fletcher32(w, 2), 0x01020102u);
}

/* ------------------------------------------------- LZF and block runs */

/* A 12 x 16 int32 dataset in chunks of 5 x 16 written by hand: chunk 0
 * LZF compressed, chunk 1 stored raw with the filter skipped (as h5py's
 * filter does when LZF would not shrink it), chunk 2 corrupt (truncated
 * LZF) in a second plan.  Values repeat along a row so that LZF shrinks
 * them. */
#define HL_C 16
#define HL_CHUNK (5 * HL_C * 4)

static int64_t hl_value(int64_t r, int64_t c)
{
    return r * 100 + c / 8;
}

static int hl_read(const h5d_plan *p, int fd, dim_sel r, dim_sel c, int32_t *out)
{
    dim_sel sel[2] = {r, c};
    cellar_error err;
    cellar_error_clear(&err);
    return h5d_read(p, fd, NULL, NULL, sel, out, (size_t)(r.count * c.count) * 4, "t", &err);
}

static void hl_check(const h5d_plan *p, int fd, dim_sel r, dim_sel c)
{
    int32_t out[12 * HL_C];
    CHECK_EQ(hl_read(p, fd, r, c, out), 0);
    for (int64_t i = 0; i < r.count; i++)
        for (int64_t k = 0; k < c.count; k++)
            CHECK_EQ(out[i * c.count + k], hl_value(dim_sel_at(&r, i), dim_sel_at(&c, k)));
}

void test_h5_direct_lzf_runs(void)
{
    char path[512];
    hd_path(path, sizeof path, "lzf.bin");
    int32_t vals[10 * HL_C];
    for (int r = 0; r < 10; r++)
        for (int c = 0; c < HL_C; c++)
            vals[r * HL_C + c] = (int32_t)hl_value(r, c);
    uint8_t packed[2 * HL_CHUNK];
    unsigned n0 = lzf_compress(vals, HL_CHUNK, packed, sizeof packed);
    CHECK(n0 > 0 && n0 < HL_CHUNK);
    if (!n0)
        return;
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (!f)
        return;
    fwrite(packed, 1, n0, f);                      /* chunk 0 at 0 */
    fwrite(&vals[5 * HL_C], 1, HL_CHUNK, f);       /* chunk 1 at n0, raw */
    fwrite(packed, 1, n0 / 2, f);                  /* chunk 2: truncated */
    fclose(f);

    h5d_layout l;
    memset(&l, 0, sizeof l);
    l.ndim = 2;
    l.shape[0] = 12;
    l.shape[1] = HL_C;
    l.elem_size = 4;
    l.file_size = n0 + HL_CHUNK + n0 / 2;
    l.chunk[0] = 5;
    l.chunk[1] = HL_C;
    l.nfilters = 1;
    l.filters[0].id = H5D_FILTER_LZF;
    h5d_plan *p = NULL;
    cellar_error err;
    cellar_error_clear(&err);
    CHECK_EQ(h5d_plan_new(&l, &p, &err), 0);
    if (!p)
        return;
    uint64_t off, len;
    CHECK_EQ(h5d_plan_contiguous_extent(p, &off, &len), 1); /* chunked */
    int64_t s0[2] = {0, 0}, s1[2] = {5, 0}, s2[2] = {10, 0};
    CHECK_EQ(h5d_plan_add_chunk(p, s0, 0, n0, 0, &err), 0);
    CHECK_EQ(h5d_plan_add_chunk(p, s1, n0, HL_CHUNK, 1, &err), 0);
    CHECK_EQ(h5d_plan_finish_table(p, &err), 0);
    int fd = open(path, O_RDONLY);
    CHECK(fd >= 0);
    /* Whole rows (one run per chunk), part rows, steps, lists. */
    hl_check(p, fd, sl(0, 1, 10), sl(0, 1, HL_C));
    hl_check(p, fd, sl(3, 1, 5), sl(0, 1, HL_C));
    hl_check(p, fd, sl(1, 1, 8), sl(6, 1, 4));
    hl_check(p, fd, sl(9, -2, 5), sl(15, -3, 5));
    int64_t rows[3] = {7, 0, 7};
    dim_sel list = {0, 1, 3, rows};
    hl_check(p, fd, list, sl(0, 1, HL_C));
    /* Rows 10 and 11: never written, the fill value (0). */
    int32_t out[12 * HL_C];
    CHECK_EQ(hl_read(p, fd, sl(9, 1, 3), sl(0, 1, HL_C), out), 0);
    CHECK_EQ(out[0], hl_value(9, 0));
    CHECK_EQ(out[HL_C], 0);
    CHECK_EQ(out[3 * HL_C - 1], 0);
    h5d_plan_free(p);

    /* The truncated chunk: an error, never a crash. */
    p = NULL;
    CHECK_EQ(h5d_plan_new(&l, &p, &err), 0);
    if (p) {
        CHECK_EQ(h5d_plan_add_chunk(p, s2, n0 + HL_CHUNK, n0 / 2, 0, &err), 0);
        CHECK_EQ(h5d_plan_finish_table(p, &err), 0);
        CHECK_EQ(hl_read(p, fd, sl(10, 1, 2), sl(0, 1, HL_C), out), CELLAR_EFORMAT);
        h5d_plan_free(p);
    }

    /* Contiguous: chunk 1's bytes as a 5-row dataset, read in whole-row runs. */
    l.nfilters = 0;
    l.contiguous = 1;
    l.addr = n0;
    l.shape[0] = 5;
    p = NULL;
    CHECK_EQ(h5d_plan_new(&l, &p, &err), 0);
    if (p) {
        off = len = 0;
        CHECK_EQ(h5d_plan_contiguous_extent(p, &off, &len), 0);
        CHECK_EQ(off, n0);
        CHECK_EQ(len, HL_CHUNK);
        CHECK_EQ(hl_read(p, fd, sl(0, 1, 5), sl(0, 1, HL_C), out), 0);
        CHECK(memcmp(out, &vals[5 * HL_C], HL_CHUNK) == 0);
        CHECK_EQ(hl_read(p, fd, sl(2, 1, 2), sl(0, 1, HL_C), out), 0);
        CHECK(memcmp(out, &vals[7 * HL_C], 2 * HL_C * 4) == 0);
        h5d_plan_free(p);
    }
    close(fd);
}

/* ----------------------------------------------------------- threads */

#define HT_R 200
#define HT_C 150

typedef struct hd_thread {
    node *n;
    unsigned seed;
    long bad;
} hd_thread;

static void *hd_reader(void *arg)
{
    hd_thread *t = arg;
    int64_t rows[40], cols[30];
    double *out = malloc(40 * 30 * sizeof *out);
    for (int it = 0; it < 60; it++) {
        for (int i = 0; i < 40; i++)
            rows[i] = rand_r(&t->seed) % HT_R;
        for (int j = 0; j < 30; j++)
            cols[j] = rand_r(&t->seed) % HT_C;
        dim_sel sel[2] = {sl(0, 1, 40), sl(0, 1, 30)};
        sel[0].index = rows;
        sel[1].index = cols;
        if (it % 3 == 1)
            sel[1] = sl(HT_C - 1 - it, -2, 30);
        cellar_error err;
        cellar_error_clear(&err);
        if (node_read(t->n, sel, out, 40 * 30 * sizeof *out, &err)) {
            t->bad++;
            continue;
        }
        for (int i = 0; i < 40; i++)
            for (int j = 0; j < 30; j++) {
                double want = rows[i] * 1000.0 + (double)dim_sel_at(&sel[1], j) + 0.5;
                t->bad += out[i * 30 + j] != want;
            }
    }
    free(out);
    return NULL;
}

void test_h5_direct_threads(void)
{
    char path[512];
    hd_path(path, sizeof path, "threads.h5");
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hsize_t dims[2] = {HT_R, HT_C}, ch[2] = {16, 16};
    double *v = malloc(HT_R * HT_C * sizeof *v);
    for (int r = 0; r < HT_R; r++)
        for (int c = 0; c < HT_C; c++)
            v[r * HT_C + c] = r * 1000.0 + c + 0.5;
    hid_t sp = H5Screate_simple(2, dims, NULL);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(dcpl, 2, ch);
    H5Pset_shuffle(dcpl);
    H5Pset_deflate(dcpl, 4);
    hid_t ds = H5Dcreate2(f, "X", H5T_IEEE_F64LE, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    H5Dwrite(ds, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, v);
    H5Dclose(ds);
    H5Pclose(dcpl);
    H5Sclose(sp);
    H5Fclose(f);
    free(v);

    for (int mode = 1; mode <= 2; mode++) {
        h5_set_direct_reads(mode);
        node *root = hd_open(path);
        node *x = root ? hd_child(root, "X") : NULL;
        /* Threads race to make the plan too: no h5_direct_kind first. */
        enum { T = 4 };
        pthread_t th[T];
        hd_thread args[T];
        for (int i = 0; x && i < T; i++) {
            args[i] = (hd_thread){.n = x, .seed = (unsigned)(i * 7919 + mode)};
            CHECK_EQ(pthread_create(&th[i], NULL, hd_reader, &args[i]), 0);
        }
        for (int i = 0; x && i < T; i++) {
            pthread_join(th[i], NULL);
            CHECK_EQ(args[i].bad, 0);
        }
        CHECK_EQ(x ? h5_direct_kind(x) : -1, mode);
        h5_set_direct_reads(1);
        node_tree_free(root);
    }
}

/* ------------------------------------------- libhdf5's lock not taken */

typedef struct hd_holder {
    const char *path;
    volatile int inside, stop, left;
} hd_holder;

/* Runs inside libhdf5 (its global lock held) until told to stop. */
static herr_t hd_hold_cb(hid_t g, const char *name, const H5L_info_t *info, void *data)
{
    (void)g;
    (void)name;
    (void)info;
    hd_holder *h = data;
    __atomic_store_n(&h->inside, 1, __ATOMIC_SEQ_CST);
    for (int i = 0; i < 2000 && !__atomic_load_n(&h->stop, __ATOMIC_SEQ_CST); i++)
        usleep(5000);
    return 1; /* one link is enough */
}

static void *hd_holder_main(void *arg)
{
    hd_holder *h = arg;
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    hid_t f = H5Fopen(h->path, H5F_ACC_RDONLY, H5P_DEFAULT);
    hsize_t idx = 0;
    if (f >= 0) {
        H5Literate(f, H5_INDEX_NAME, H5_ITER_INC, &idx, hd_hold_cb, h);
        H5Fclose(f);
    }
    __atomic_store_n(&h->left, 1, __ATOMIC_SEQ_CST);
    return NULL;
}

typedef struct hd_lib_reader {
    node *n;
    volatile int done;
    int rc;
} hd_lib_reader;

static void *hd_lib_reader_main(void *arg)
{
    hd_lib_reader *r = arg;
    int64_t out[10];
    dim_sel s = sl(100, 1, 10);
    cellar_error err;
    cellar_error_clear(&err);
    r->rc = node_read(r->n, &s, out, sizeof out, &err);
    __atomic_store_n(&r->done, 1, __ATOMIC_SEQ_CST);
    return NULL;
}

/* While another thread sits inside libhdf5, a direct read completes; a
 * read through libhdf5 waits for it. */
void test_h5_direct_no_library_lock(void)
{
    char path[512];
    hd_path(path, sizeof path, "lock.h5");
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hd_write_one(f, &hd_specs[6], 0); /* be1d: shuffle + deflate, big-endian */
    hd_write_one(f, &hd_specs[0], 0); /* contig2d */
    H5Fclose(f);
    /* libhdf5's lock is one for all files: the holder iterates another. */
    char other[512];
    hd_path(other, sizeof other, "lock-other.h5");
    f = H5Fcreate(other, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hd_write_one(f, &hd_specs[0], 0);
    H5Fclose(f);
    node *root = hd_open(path);
    node *be = root ? hd_child(root, "be1d") : NULL, *ct = root ? hd_child(root, "contig2d") : NULL;
    if (!be || !ct) {
        node_tree_free(root);
        return;
    }
    CHECK_EQ(h5_direct_kind(be), 1);
    CHECK_EQ(h5_direct_kind(ct), 1);
    hd_holder h = {.path = other};
    pthread_t th;
    CHECK_EQ(pthread_create(&th, NULL, hd_holder_main, &h), 0);
    while (!__atomic_load_n(&h.inside, __ATOMIC_SEQ_CST) &&
           !__atomic_load_n(&h.left, __ATOMIC_SEQ_CST))
        usleep(1000);
    CHECK_EQ(h.inside, 1);

    int64_t out[10];
    dim_sel s = sl(990, -97, 10);
    CHECK_EQ(hd_read(be, 1, &s, out, sizeof out), 0);
    CHECK_EQ(out[0], 990);
    CHECK_EQ(out[9], 990 - 9 * 97);
    int32_t c[6];
    dim_sel s2[2] = {sl(36, -7, 3), sl(1, 20, 2)};
    CHECK_EQ(hd_read(ct, 1, s2, c, sizeof c), 0);
    CHECK(c[0] == 36001 && c[1] == 36021 && c[5] == 22021);
    /* Both done while the other thread still holds libhdf5. */
    CHECK_EQ(__atomic_load_n(&h.left, __ATOMIC_SEQ_CST), 0);

    /* Through libhdf5 the same read has to wait. */
    h5_set_direct_reads(0);
    hd_lib_reader r = {.n = be};
    pthread_t rt;
    CHECK_EQ(pthread_create(&rt, NULL, hd_lib_reader_main, &r), 0);
    usleep(200000);
    CHECK_EQ(__atomic_load_n(&r.done, __ATOMIC_SEQ_CST), 0);
    __atomic_store_n(&h.stop, 1, __ATOMIC_SEQ_CST);
    pthread_join(th, NULL);
    pthread_join(rt, NULL);
    h5_set_direct_reads(1);
    CHECK_EQ(r.rc, 0);
    CHECK_EQ(r.done, 1);
    node_tree_free(root);
}

/* Whole chunks for the zarr view (h5d_chunk_stored, h5d_chunk_decode): a
 * chunk found in the table is its address and size, one never written is
 * absent and decodes to the fill value, coordinates off the grid are
 * refused, a deflated chunk decodes to its values, a corrupt one or one
 * whose size lies is CELLAR_EFORMAT. */
void test_h5_direct_whole_chunks(void)
{
    char path[300];
    hd_path(path, sizeof path, "whole_chunks.bin");
    int32_t vals[10], got[10];
    for (int i = 0; i < 10; i++)
        vals[i] = i * 7 - 3;
    unsigned char z[200];
    uLongf zn = sizeof z;
    CHECK_EQ(compress2(z, &zn, (const Bytef *)vals, sizeof vals, 6), Z_OK);
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (!f)
        return;
    fwrite(vals, 1, sizeof vals, f);           /* offset 0: the raw chunk */
    fwrite(z, 1, zn, f);                       /* offset 40: the deflated one */
    unsigned char junk[64];
    memset(junk, 0x5a, sizeof junk);
    fwrite(junk, 1, sizeof junk, f);           /* offset 40 + zn: garbage */
    fclose(f);
    int fd = open(path, O_RDONLY);
    CHECK(fd >= 0);
    h5d_layout l;
    memset(&l, 0, sizeof l);
    l.ndim = 1;
    l.shape[0] = 35; /* 4 chunks of 10, the last one partial */
    l.elem_size = 4;
    l.file_size = 40 + zn + sizeof junk;
    l.chunk[0] = 10;
    l.nfilters = 1;
    l.filters[0].id = H5D_FILTER_DEFLATE;
    int32_t fill = -1;
    memcpy(l.fill, &fill, 4);
    h5d_plan *p = NULL;
    cellar_error err;
    cellar_error_clear(&err);
    CHECK_EQ(h5d_plan_new(&l, &p, &err), 0);
    if (!p) {
        close(fd);
        return;
    }
    CHECK_EQ(h5d_plan_chunk_bytes(p), 40);
    int64_t start = 0;
    CHECK_EQ(h5d_plan_add_chunk(p, &start, 0, 40, 1, &err), 0);  /* deflate skipped */
    start = 10;
    CHECK_EQ(h5d_plan_add_chunk(p, &start, 40, zn, 0, &err), 0);
    start = 30;
    CHECK_EQ(h5d_plan_add_chunk(p, &start, 40 + zn, 20, 0, &err), 0); /* garbage */
    CHECK_EQ(h5d_plan_finish_table(p, &err), 0);
    h5d_stored st;
    int64_t c = 0;
    CHECK_EQ(h5d_chunk_stored(p, NULL, NULL, &c, &st, "t", &err), 0);
    CHECK(st.allocated && st.addr == 0 && st.size == 40 && st.mask == 1 && !st.buf);
    CHECK_EQ(h5d_chunk_decode(p, fd, &st, (uint8_t *)got, "t", &err), 0);
    CHECK(!memcmp(got, vals, sizeof vals));
    c = 1;
    CHECK_EQ(h5d_chunk_stored(p, NULL, NULL, &c, &st, "t", &err), 0);
    CHECK(st.allocated && st.addr == 40 && st.size == zn && st.mask == 0);
    memset(got, 0, sizeof got);
    CHECK_EQ(h5d_chunk_decode(p, fd, &st, (uint8_t *)got, "t", &err), 0);
    CHECK(!memcmp(got, vals, sizeof vals));
    c = 2; /* never written */
    CHECK_EQ(h5d_chunk_stored(p, NULL, NULL, &c, &st, "t", &err), 0);
    CHECK_EQ(st.allocated, 0);
    CHECK_EQ(h5d_chunk_decode(p, fd, &st, (uint8_t *)got, "t", &err), 0);
    for (int i = 0; i < 10; i++)
        CHECK_EQ(got[i], -1);
    c = 3;
    CHECK_EQ(h5d_chunk_stored(p, NULL, NULL, &c, &st, "t", &err), 0);
    cellar_error_clear(&err);
    CHECK_EQ(h5d_chunk_decode(p, fd, &st, (uint8_t *)got, "t", &err), CELLAR_EFORMAT);
    h5d_stored lying = {.allocated = 1, .addr = 0, .size = 41, .mask = 1};
    cellar_error_clear(&err);
    CHECK_EQ(h5d_chunk_decode(p, fd, &lying, (uint8_t *)got, "t", &err), CELLAR_EFORMAT);
    c = 4; /* off the grid */
    cellar_error_clear(&err);
    CHECK_EQ(h5d_chunk_stored(p, NULL, NULL, &c, &st, "t", &err), CELLAR_ERANGE);
    c = -1;
    cellar_error_clear(&err);
    CHECK_EQ(h5d_chunk_stored(p, NULL, NULL, &c, &st, "t", &err), CELLAR_ERANGE);
    h5d_plan_free(p);
    close(fd);
}

/* Scale-offset chunks (h5d_scaleoffset_ok): a header of 21 bytes (minbits,
 * 4 bytes little-endian; the size of minval; minval) and the packed values.
 * minbits past the type's bits, a chunk shorter than its header or than
 * the bytes minbits packs, and a full-precision chunk short of n * size
 * are refused; 0 bits (every value minval) needs no packed bytes. */
void test_h5_direct_scaleoffset_header(void)
{
    uint8_t c[21 + 400];
    memset(c, 0, sizeof c);
    c[4] = 8;
    c[0] = 7; /* 100 values of 7 bits: 88 bytes */
    CHECK_EQ(h5d_scaleoffset_ok(c, 21 + 88, 100, 4), 1);
    CHECK_EQ(h5d_scaleoffset_ok(c, 21 + 87, 100, 4), 0);
    c[0] = 0;
    CHECK_EQ(h5d_scaleoffset_ok(c, 21, 100, 4), 1);
    CHECK_EQ(h5d_scaleoffset_ok(c, 20, 100, 4), 0);
    c[0] = 32; /* full precision: the values as they are */
    CHECK_EQ(h5d_scaleoffset_ok(c, 21 + 400, 100, 4), 1);
    CHECK_EQ(h5d_scaleoffset_ok(c, 21 + 399, 100, 4), 0);
    c[0] = 33;
    CHECK_EQ(h5d_scaleoffset_ok(c, sizeof c, 100, 4), 0);
    c[0] = 0x4d, c[1] = 0x2f, c[2] = 0x2c, c[3] = 0x85; /* the corrupt chunk of test_zarr_view */
    CHECK_EQ(h5d_scaleoffset_ok(c, sizeof c, 100, 4), 0);
    c[0] = 8, c[1] = c[2] = c[3] = 0;
    CHECK_EQ(h5d_scaleoffset_ok(c, sizeof c, UINT64_MAX / 2, 4), 0); /* n * minbits overflows */
    CHECK_EQ(h5d_scaleoffset_ok(c, sizeof c, 100, 0), 0);
}
