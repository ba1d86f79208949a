/* The zarr backend on tiny stores written here by hand: metadata JSON and
 * chunk files made with the compression libraries. */
#define _XOPEN_SOURCE 700
#include <blosc.h>
#include <errno.h>
#include <ftw.h>
#include <lz4.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include "storage/codecs.h"
#include "storage/node.h"
#include "storage/zarr/zarr.h"
#include "storage/zarr/zarr_impl.h"
#include "tests/unit/unit.h"

/* ---- writing stores ----------------------------------------------------- */

static char *make_tmpdir(void)
{
    char t[] = "/tmp/cellar-zarr-test-XXXXXX";
    if (!mkdtemp(t))
        return NULL;
    return strdup(t);
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

static void rm_tree(char *dir)
{
    if (dir)
        nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    free(dir);
}

/* Writes root/rel, making its directories; shared with test_zarr_chunks.c. */
void zarr_test_put(const char *root, const char *rel, const void *data, size_t n);

void zarr_test_put(const char *root, const char *rel, const void *data, size_t n)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", root, rel);
    for (char *p = path + strlen(root) + 1; *p; p++) {
        if (*p == '/') {
            *p = '\0';
            mkdir(path, 0755);
            *p = '/';
        }
    }
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (!f)
        return;
    if (n)
        CHECK_EQ(fwrite(data, 1, n, f), n);
    fclose(f);
}

static void put_text(const char *root, const char *rel, const char *text)
{
    zarr_test_put(root, rel, text, strlen(text));
}

/* A growable byte buffer for building chunks. */
typedef struct bytes {
    uint8_t *p;
    size_t n;
} bytes;

static void bytes_add(bytes *b, const void *d, size_t n)
{
    b->p = realloc(b->p, b->n + n + 1);
    memcpy(b->p + b->n, d, n);
    b->n += n;
}

static void bytes_u32(bytes *b, uint32_t v)
{
    uint8_t le[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    bytes_add(b, le, 4);
}

static void bytes_u64(bytes *b, uint64_t v)
{
    bytes_u32(b, (uint32_t)v);
    bytes_u32(b, (uint32_t)(v >> 32));
}

static bytes zlib_of(const void *d, size_t n)
{
    bytes b = {malloc(compressBound(n)), 0};
    uLongf len = compressBound(n);
    compress2(b.p, &len, d, n, 6);
    b.n = len;
    return b;
}

static bytes gzip_of(const void *d, size_t n)
{
    bytes b = {malloc(n + 128), 0};
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    deflateInit2(&zs, 6, Z_DEFLATED, 31, 8, Z_DEFAULT_STRATEGY);
    zs.next_in = (Bytef *)d;
    zs.avail_in = (uInt)n;
    zs.next_out = b.p;
    zs.avail_out = (uInt)(n + 128);
    deflate(&zs, Z_FINISH);
    b.n = zs.total_out;
    deflateEnd(&zs);
    return b;
}

static bytes zstd_of(const void *d, size_t n)
{
    bytes b = {malloc(ZSTD_compressBound(n)), 0};
    b.n = ZSTD_compress(b.p, ZSTD_compressBound(n), d, n, 1);
    return b;
}

static bytes lz4_of(const void *d, size_t n)
{
    int bound = LZ4_compressBound((int)n);
    bytes b = {malloc((size_t)bound + 4), 0};
    int k = LZ4_compress_default(d, (char *)b.p + 4, (int)n, bound);
    b.p[0] = (uint8_t)n, b.p[1] = (uint8_t)(n >> 8), b.p[2] = (uint8_t)(n >> 16), b.p[3] = 0;
    b.n = (size_t)k + 4;
    return b;
}

static bytes blosc_of(const void *d, size_t n, size_t typesize)
{
    bytes b = {malloc(n + BLOSC_MAX_OVERHEAD), 0};
    b.n = (size_t)blosc_compress_ctx(5, 1, typesize, n, d, b.p, n + BLOSC_MAX_OVERHEAD, "lz4",
                                     0, 1);
    return b;
}

static bytes vlen_of(const char *const *s, size_t n)
{
    bytes b = {0};
    bytes_u32(&b, (uint32_t)n);
    for (size_t i = 0; i < n; i++) {
        bytes_u32(&b, (uint32_t)strlen(s[i]));
        bytes_add(&b, s[i], strlen(s[i]));
    }
    return b;
}

static void bytes_crc(bytes *b)
{
    bytes_u32(b, codec_crc32c(0, b->p, b->n));
}

/* ---- reading ------------------------------------------------------------ */

static node *open_at(node *root, const char *path)
{
    node *n = NULL;
    cellar_error err;
    cellar_error_clear(&err);
    int rc = node_resolve(root, path, &n, &err);
    if (rc)
        fprintf(stderr, "resolve %s: %s\n", path, err.detail);
    CHECK_EQ(rc, 0);
    return n;
}

static int read_sel(node *n, const dim_sel *sel, void *out, size_t bytes_out, cellar_error *err)
{
    cellar_error_clear(err);
    int rc = node_read(n, sel, out, bytes_out, err);
    if (rc)
        fprintf(stderr, "read %s: %s\n", node_path(n), err->detail);
    return rc;
}

static int64_t v2d(int64_t i, int64_t j)
{
    return i * 100 + j;
}

/* Checks a full 2-D int32 read and a few strided / listed ones against
 * want(i, j) with fill where (i, j) falls in a missing chunk. */
static void check_grid_i32(node *n, int64_t rows, int64_t cols, int32_t (*want)(int64_t, int64_t))
{
    if (!n)
        return;
    cellar_error err;
    int32_t *buf = calloc((size_t)(rows * cols), sizeof *buf);
    dim_sel sel[2] = {dim_sel_range(0, rows), dim_sel_range(0, cols)};
    CHECK_EQ(read_sel(n, sel, buf, (size_t)(rows * cols) * 4, &err), 0);
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++)
            CHECK_EQ(buf[i * cols + j], want(i, j));
    /* Reversed rows with step -2, columns 1 and 0 and the last by list. */
    static const int64_t idx[3] = {1, 0, -1};
    int64_t lst[3] = {idx[0], idx[1], cols - 1};
    dim_sel s2[2] = {{.start = rows - 1, .step = -2, .count = (rows + 1) / 2, .index = NULL},
                     {.start = 0, .step = 1, .count = 3, .index = lst}};
    size_t cnt = (size_t)s2[0].count * 3;
    CHECK_EQ(read_sel(n, s2, buf, cnt * 4, &err), 0);
    for (int64_t a = 0; a < s2[0].count; a++)
        for (int64_t b = 0; b < 3; b++)
            CHECK_EQ(buf[a * 3 + b], want(rows - 1 - 2 * a, lst[b]));
    /* A single element in the middle. */
    dim_sel s3[2] = {dim_sel_range(rows / 2, 1), dim_sel_range(cols / 2, 1)};
    CHECK_EQ(read_sel(n, s3, buf, 4, &err), 0);
    CHECK_EQ(buf[0], want(rows / 2, cols / 2));
    free(buf);
}

/* v2 "a": 5x7 int32, chunks 2x3, C order; chunk (1,1) is missing (fill 42). */
static int32_t want_a(int64_t i, int64_t j)
{
    if (i / 2 == 1 && j / 3 == 1)
        return 42;
    return (int32_t)v2d(i, j);
}

/* Writes the chunks of a rows x cols int32 grid with chunk shape cr x cc;
 * skip(ci, cj) leaves a chunk out; encode() compresses. */
static void put_grid(const char *root, const char *arr, int64_t rows, int64_t cols, int64_t cr,
                     int64_t cc, int fortran, int big_endian, char sep, int v3_prefix,
                     int (*skip)(int64_t, int64_t), bytes (*encode)(const void *, size_t))
{
    for (int64_t ci = 0; ci * cr < rows; ci++) {
        for (int64_t cj = 0; cj * cc < cols; cj++) {
            if (skip && skip(ci, cj))
                continue;
            int32_t *c = calloc((size_t)(cr * cc), 4);
            for (int64_t r = 0; r < cr; r++) {
                for (int64_t q = 0; q < cc; q++) {
                    int64_t i = ci * cr + r, j = cj * cc + q;
                    int32_t v = i < rows && j < cols ? (int32_t)v2d(i, j) : 0;
                    if (big_endian)
                        v = (int32_t)__builtin_bswap32((uint32_t)v);
                    c[fortran ? q * cr + r : r * cc + q] = v;
                }
            }
            char key[256];
            snprintf(key, sizeof key, "%s/%s%lld%c%lld", arr, v3_prefix ? "c/" : "",
                     (long long)ci, sep, (long long)cj);
            if (encode) {
                bytes b = encode(c, (size_t)(cr * cc) * 4);
                zarr_test_put(root, key, b.p, b.n);
                free(b.p);
            } else {
                zarr_test_put(root, key, c, (size_t)(cr * cc) * 4);
            }
            free(c);
        }
    }
}

static int skip_11(int64_t ci, int64_t cj)
{
    return ci == 1 && cj == 1;
}

static int32_t want_plain(int64_t i, int64_t j)
{
    return (int32_t)v2d(i, j);
}

static bytes blosc4_of(const void *d, size_t n)
{
    return blosc_of(d, n, 4);
}

void test_zarr_v2_numeric(void)
{
    char *dir = make_tmpdir();
    put_text(dir, ".zgroup", "{\"zarr_format\": 2}");
    put_text(dir, ".zattrs", "{\"encoding-type\": \"anndata\", \"x\": [1, 2], \"n\": NaN}");
    put_text(dir, "g/.zgroup", "{\"zarr_format\": 2}");
    put_text(dir, "g/a/.zarray",
             "{\"zarr_format\":2,\"shape\":[5,7],\"chunks\":[2,3],\"dtype\":\"<i4\","
             "\"compressor\":null,\"filters\":null,\"fill_value\":42,\"order\":\"C\"}");
    put_grid(dir, "g/a", 5, 7, 2, 3, 0, 0, '.', 0, skip_11, NULL);
    put_text(dir, "g/f/.zarray",
             "{\"zarr_format\":2,\"shape\":[5,7],\"chunks\":[4,2],\"dtype\":\">i4\","
             "\"compressor\":{\"id\":\"zlib\",\"level\":1},\"filters\":null,\"fill_value\":0,"
             "\"order\":\"F\",\"dimension_separator\":\"/\"}");
    put_grid(dir, "g/f", 5, 7, 4, 2, 1, 1, '/', 0, NULL, zlib_of);
    put_text(dir, "g/b/.zarray",
             "{\"zarr_format\":2,\"shape\":[5,7],\"chunks\":[3,3],\"dtype\":\"<i4\","
             "\"compressor\":{\"id\":\"blosc\",\"cname\":\"lz4\",\"clevel\":5,\"shuffle\":1},"
             "\"filters\":null,\"fill_value\":0,\"order\":\"C\"}");
    put_grid(dir, "g/b", 5, 7, 3, 3, 0, 0, '.', 0, NULL, blosc4_of);
    put_text(dir, "g/l/.zarray",
             "{\"zarr_format\":2,\"shape\":[5,7],\"chunks\":[5,2],\"dtype\":\"<i4\","
             "\"compressor\":{\"id\":\"lz4\"},\"filters\":null,\"fill_value\":0,\"order\":\"C\"}");
    put_grid(dir, "g/l", 5, 7, 5, 2, 0, 0, '.', 0, NULL, lz4_of);
    /* float64 with a NaN fill and a missing chunk; a 0-d bool (anndata null). */
    put_text(dir, "g/nanf/.zarray",
             "{\"zarr_format\":2,\"shape\":[4],\"chunks\":[2],\"dtype\":\"<f8\","
             "\"compressor\":null,\"filters\":null,\"fill_value\":\"NaN\",\"order\":\"C\"}");
    double d0[2] = {1.5, -2.25};
    zarr_test_put(dir, "g/nanf/0", d0, sizeof d0);
    put_text(dir, "g/null/.zarray",
             "{\"zarr_format\":2,\"shape\":[],\"chunks\":[],\"dtype\":\"|b1\","
             "\"compressor\":null,\"filters\":null,\"fill_value\":false,\"order\":\"C\"}");
    zarr_test_put(dir, "g/null/0", "\x07", 1);

    node *root = NULL;
    cellar_error err;
    cellar_error_clear(&err);
    CHECK_EQ(zarr_open(dir, &root, &err), 0);
    if (!root)
        goto done;
    CHECK_EQ(zarr_format(root), 2);
    CHECK_EQ(node_get_info(root)->type, NODE_GROUP);
    CHECK_STR_EQ(node_attr_string(root, "encoding-type"), "anndata");
    CHECK_EQ(json_array_size(json_object_get(node_attrs(root), "x")), 2);
    CHECK(json_is_null(json_object_get(node_attrs(root), "n")));

    arena *ar = arena_new();
    const char **names = NULL;
    size_t count = 0;
    CHECK_EQ(node_children(open_at(root, "/g"), ar, &names, &count, &err), 0);
    CHECK_EQ(count, 6);
    if (count == 6) {
        CHECK_STR_EQ(names[0], "a");
        CHECK_STR_EQ(names[1], "b");
        CHECK_STR_EQ(names[5], "null");
    }
    arena_free(ar);

    node *a = open_at(root, "/g/a");
    if (a) {
        const node_info *in = node_get_info(a);
        CHECK_EQ(in->type, NODE_ARRAY);
        CHECK_EQ(in->ndim, 2);
        CHECK_EQ(in->shape[0], 5);
        CHECK_EQ(in->shape[1], 7);
        CHECK_EQ(in->dtype, DT_INT32);
        CHECK_STR_EQ(node_path(a), "/g/a");
    }
    check_grid_i32(a, 5, 7, want_a);
    node *f = open_at(root, "g/f");
    if (f)
        CHECK_EQ(node_get_info(f)->stored_big_endian, 1);
    check_grid_i32(f, 5, 7, want_plain);
    check_grid_i32(open_at(root, "g/b"), 5, 7, want_plain);
    check_grid_i32(open_at(root, "g/l"), 5, 7, want_plain);

    node *nf = open_at(root, "g/nanf");
    double dv[4] = {0};
    dim_sel s1 = dim_sel_range(0, 4);
    if (nf) {
        CHECK_EQ(read_sel(nf, &s1, dv, sizeof dv, &err), 0);
        CHECK_DBL_EQ(dv[0], 1.5);
        CHECK_DBL_EQ(dv[1], -2.25);
        CHECK(isnan(dv[2]) && isnan(dv[3]));
    }
    node *nl = open_at(root, "g/null");
    uint8_t bv = 9;
    if (nl) {
        CHECK_EQ(node_get_info(nl)->ndim, 0);
        CHECK_EQ(read_sel(nl, NULL, &bv, 1, &err), 0);
        CHECK_EQ(bv, 1); /* bools read as 0/1 */
    }
    node *missing = NULL;
    cellar_error_clear(&err);
    CHECK_EQ(node_child(root, "nope", &missing, &err), CELLAR_ENOTFOUND);
    cellar_error_clear(&err);
    CHECK_EQ(node_resolve(root, "g/../g", &missing, &err), CELLAR_ENOTFOUND);
    node_tree_free(root);
done:
    rm_tree(dir);
}

void test_zarr_v2_strings(void)
{
    char *dir = make_tmpdir();
    put_text(dir, ".zgroup", "{\"zarr_format\": 2}");
    /* |O with vlen-utf8 as a filter and zstd; 5 items in chunks of 2, the
     * middle chunk missing (fill ""), the edge chunk padded. */
    put_text(dir, "s/.zarray",
             "{\"zarr_format\":2,\"shape\":[5],\"chunks\":[2],\"dtype\":\"|O\","
             "\"compressor\":{\"id\":\"zstd\",\"level\":0},\"filters\":[{\"id\":\"vlen-utf8\"}],"
             "\"fill_value\":\"\",\"order\":\"C\"}");
    const char *c0[2] = {"alpha", "h\xc3\xa9llo"}, *c2[2] = {"last", ""};
    bytes v0 = vlen_of(c0, 2), v2 = vlen_of(c2, 2);
    bytes z0 = zstd_of(v0.p, v0.n), z2 = zstd_of(v2.p, v2.n);
    zarr_test_put(dir, "s/0", z0.p, z0.n);
    zarr_test_put(dir, "s/2", z2.p, z2.n);
    /* vlen-utf8 as the compressor (zarr-python 3 style), 0-d. */
    put_text(dir, "scalar/.zarray",
             "{\"zarr_format\":2,\"shape\":[],\"chunks\":[],\"dtype\":\"|O\","
             "\"compressor\":{\"id\":\"vlen-utf8\"},\"filters\":null,\"fill_value\":0}");
    const char *one[1] = {"just one"};
    bytes v1 = vlen_of(one, 1);
    zarr_test_put(dir, "scalar/0", v1.p, v1.n);
    /* <U3 fixed unicode, 0-d (old anndata scalar strings). */
    put_text(dir, "u/.zarray",
             "{\"zarr_format\":2,\"shape\":[],\"chunks\":[],\"dtype\":\"<U3\","
             "\"compressor\":null,\"filters\":null,\"fill_value\":\"\"}");
    uint32_t u[3] = {'o', 0xe9, 0};
    zarr_test_put(dir, "u/0", u, sizeof u);
    /* |S4 with a base64 fill ("AAAA" padded) for a missing chunk. */
    put_text(dir, "b/.zarray",
             "{\"zarr_format\":2,\"shape\":[3],\"chunks\":[2],\"dtype\":\"|S4\","
             "\"compressor\":{\"id\":\"gzip\",\"level\":1},\"filters\":null,"
             "\"fill_value\":\"eHl6\"}");
    bytes g = gzip_of("ab\0\0wxyz", 8);
    zarr_test_put(dir, "b/0", g.p, g.n);

    node *root = NULL;
    cellar_error err;
    cellar_error_clear(&err);
    CHECK_EQ(zarr_open(dir, &root, &err), 0);
    arena *ar = arena_new();
    char *out[5] = {0};
    node *s = root ? open_at(root, "s") : NULL;
    if (s) {
        CHECK_EQ(node_get_info(s)->dtype, DT_STRING);
        CHECK_EQ(node_get_info(s)->string_size, 0);
        dim_sel all = dim_sel_range(0, 5);
        CHECK_EQ(node_read_strings(s, &all, ar, out, &err), 0);
        CHECK_STR_EQ(out[0], "alpha");
        CHECK_STR_EQ(out[1], "h\xc3\xa9llo");
        CHECK_STR_EQ(out[2], "");
        CHECK_STR_EQ(out[3], "");
        CHECK_STR_EQ(out[4], "last");
        int64_t idx[3] = {4, 0, 4};
        dim_sel l = {.start = 0, .step = 1, .count = 3, .index = idx};
        CHECK_EQ(node_read_strings(s, &l, ar, out, &err), 0);
        CHECK_STR_EQ(out[0], "last");
        CHECK_STR_EQ(out[1], "alpha");
        CHECK_STR_EQ(out[2], "last");
        /* Numeric reads of strings are refused. */
        int32_t x;
        dim_sel one_sel = dim_sel_range(0, 1);
        CHECK(node_read(s, &one_sel, &x, 4, &err) != 0);
    }
    node *sc = root ? open_at(root, "scalar") : NULL;
    if (sc) {
        CHECK_EQ(node_read_strings(sc, NULL, ar, out, &err), 0);
        CHECK_STR_EQ(out[0], "just one");
    }
    node *un = root ? open_at(root, "u") : NULL;
    if (un) {
        CHECK_EQ(node_get_info(un)->string_size, 12);
        CHECK_EQ(node_read_strings(un, NULL, ar, out, &err), 0);
        CHECK_STR_EQ(out[0], "o\xc3\xa9");
    }
    node *b = root ? open_at(root, "b") : NULL;
    if (b) {
        dim_sel all = dim_sel_range(0, 3);
        CHECK_EQ(node_read_strings(b, &all, ar, out, &err), 0);
        CHECK_STR_EQ(out[0], "ab");
        CHECK_STR_EQ(out[1], "wxyz");
        CHECK_STR_EQ(out[2], "xyz");
    }
    arena_free(ar);
    node_tree_free(root);
    free(v0.p), free(v2.p), free(z0.p), free(z2.p), free(v1.p), free(g.p);
    rm_tree(dir);
}

void test_zarr_v2_consolidated(void)
{
    char *dir = make_tmpdir();
    put_text(dir, ".zgroup", "{\"zarr_format\": 2}");
    put_text(dir, ".zattrs", "{\"k\": \"on disk\"}");
    put_text(dir, "obs/.zgroup", "{\"zarr_format\": 2}");
    put_text(dir, "obs/n/.zarray",
             "{\"zarr_format\":2,\"shape\":[3],\"chunks\":[3],\"dtype\":\"<i8\","
             "\"compressor\":null,\"filters\":null,\"fill_value\":0,\"order\":\"C\"}");
    int64_t n3[3] = {7, 8, 9};
    zarr_test_put(dir, "obs/n/0", n3, sizeof n3);
    /* Without .zmetadata: the directory is listed, and a consolidated
     * document can be built. */
    char *text = NULL;
    size_t len = 0;
    cellar_error err;
    cellar_error_clear(&err);
    node *built_from = NULL;
    CHECK_EQ(zarr_open(dir, &built_from, &err), 0);
    CHECK_EQ(zarr_build_consolidated(built_from, &text, &len, &err), 0);
    node_tree_free(built_from);
    json_t *doc = text ? json_loadb(text, len, 0, NULL) : NULL;
    CHECK(doc != NULL);
    json_t *md = json_object_get(doc, "metadata");
    CHECK_EQ(json_integer_value(json_object_get(doc, "zarr_consolidated_format")), 1);
    CHECK(json_object_get(md, ".zgroup") != NULL);
    CHECK_STR_EQ(json_string_value(json_object_get(json_object_get(md, ".zattrs"), "k")),
                 "on disk");
    CHECK(json_object_get(md, "obs/.zgroup") != NULL);
    CHECK_EQ(json_integer_value(json_array_get(
                 json_object_get(json_object_get(md, "obs/n/.zarray"), "shape"), 0)),
             3);
    CHECK_EQ(json_object_size(md), 4);
    json_decref(doc);
    free(text);

    /* With a .zmetadata that differs from the files, it wins: attributes
     * and a child known only there. */
    put_text(dir, ".zmetadata",
             "{\"zarr_consolidated_format\":1,\"metadata\":{"
             "\".zgroup\":{\"zarr_format\":2},\".zattrs\":{\"k\":\"consolidated\"},"
             "\"obs/.zgroup\":{\"zarr_format\":2},"
             "\"obs/n/.zarray\":{\"zarr_format\":2,\"shape\":[3],\"chunks\":[3],"
             "\"dtype\":\"<i8\",\"compressor\":null,\"filters\":null,\"fill_value\":0},"
             "\"obs/m/.zarray\":{\"zarr_format\":2,\"shape\":[2],\"chunks\":[2],"
             "\"dtype\":\"<u2\",\"compressor\":null,\"filters\":null,\"fill_value\":5},"
             "\"obs/m/.zattrs\":{\"encoding-type\":\"array\"}}}");
    node *root = NULL;
    CHECK_EQ(zarr_open(dir, &root, &err), 0);
    if (root) {
        CHECK_STR_EQ(node_attr_string(root, "k"), "consolidated");
        arena *ar = arena_new();
        const char **names = NULL;
        size_t count = 0;
        node *obs = open_at(root, "obs");
        CHECK_EQ(obs ? node_children(obs, ar, &names, &count, &err) : -1, 0);
        CHECK_EQ(count, 2);
        if (count == 2) {
            CHECK_STR_EQ(names[0], "m");
            CHECK_STR_EQ(names[1], "n");
        }
        node *m = open_at(root, "obs/m");
        uint16_t mv[2] = {0};
        dim_sel s2 = dim_sel_range(0, 2);
        if (m) {
            CHECK_STR_EQ(node_attr_string(m, "encoding-type"), "array");
            CHECK_EQ(read_sel(m, &s2, mv, sizeof mv, &err), 0);
            CHECK_EQ(mv[0], 5); /* no chunk on disk: fill */
            CHECK_EQ(mv[1], 5);
        }
        int64_t nv[3] = {0};
        dim_sel s3 = dim_sel_range(0, 3);
        node *nn = open_at(root, "/obs/n");
        CHECK_EQ(nn ? read_sel(nn, &s3, nv, sizeof nv, &err) : -1, 0);
        CHECK_EQ(nv[2], 9);
        arena_free(ar);
    }
    node_tree_free(root);
    rm_tree(dir);
}

/* ---- v3 ----------------------------------------------------------------- */

static const char *V3_GROUP = "{\"zarr_format\":3,\"node_type\":\"group\",\"attributes\":{}}";

static bytes gzip_be_of(const void *d, size_t n)
{
    /* put_grid already wrote big-endian values when asked. */
    return gzip_of(d, n);
}

void test_zarr_v3_arrays(void)
{
    char *dir = make_tmpdir();
    put_text(dir, "zarr.json",
             "{\"zarr_format\":3,\"node_type\":\"group\",\"attributes\":{\"encoding-type\":"
             "\"anndata\",\"encoding-version\":\"0.1.0\"}}");
    put_text(dir, "grp/zarr.json", V3_GROUP);
    /* Big-endian bytes + gzip, default keys with '/', missing chunk (1,1). */
    put_text(dir, "grp/a/zarr.json",
             "{\"zarr_format\":3,\"node_type\":\"array\",\"shape\":[5,7],\"data_type\":\"int32\","
             "\"chunk_grid\":{\"name\":\"regular\",\"configuration\":{\"chunk_shape\":[2,3]}},"
             "\"chunk_key_encoding\":{\"name\":\"default\","
             "\"configuration\":{\"separator\":\"/\"}},"
             "\"fill_value\":42,\"codecs\":[{\"name\":\"bytes\",\"configuration\":{\"endian\":"
             "\"big\"}},{\"name\":\"gzip\",\"configuration\":{\"level\":1}}],"
             "\"attributes\":{\"encoding-type\":\"array\"}}");
    put_grid(dir, "grp/a", 5, 7, 2, 3, 0, 1, '/', 1, skip_11, gzip_be_of);
    /* transpose [1,0] (F order), "." separator, crc32c after zstd. */
    put_text(dir, "grp/t/zarr.json",
             "{\"zarr_format\":3,\"node_type\":\"array\",\"shape\":[5,7],\"data_type\":\"int32\","
             "\"chunk_grid\":{\"name\":\"regular\",\"configuration\":{\"chunk_shape\":[4,2]}},"
             "\"chunk_key_encoding\":{\"name\":\"default\","
             "\"configuration\":{\"separator\":\".\"}},"
             "\"fill_value\":0,\"codecs\":[{\"name\":\"transpose\",\"configuration\":{\"order\":"
             "[1,0]}},{\"name\":\"bytes\",\"configuration\":{\"endian\":\"little\"}},"
             "{\"name\":\"zstd\",\"configuration\":{\"level\":0,\"checksum\":false}},"
             "{\"name\":\"crc32c\"}]}");
    for (int64_t ci = 0; ci < 2; ci++) {
        for (int64_t cj = 0; cj < 4; cj++) {
            int32_t c[8];
            for (int64_t r = 0; r < 4; r++)
                for (int64_t q = 0; q < 2; q++) {
                    int64_t i = ci * 4 + r, j = cj * 2 + q;
                    c[q * 4 + r] = i < 5 && j < 7 ? (int32_t)v2d(i, j) : 0;
                }
            bytes z = zstd_of(c, sizeof c);
            bytes_crc(&z);
            char key[64];
            snprintf(key, sizeof key, "grp/t/c.%lld.%lld", (long long)ci, (long long)cj);
            zarr_test_put(dir, key, z.p, z.n);
            free(z.p);
        }
    }
    /* "v2" chunk key encoding, float32 with a NaN fill, one chunk present. */
    put_text(dir, "grp/v/zarr.json",
             "{\"zarr_format\":3,\"node_type\":\"array\",\"shape\":[4],\"data_type\":\"float32\","
             "\"chunk_grid\":{\"name\":\"regular\",\"configuration\":{\"chunk_shape\":[2]}},"
             "\"chunk_key_encoding\":{\"name\":\"v2\"},\"fill_value\":\"NaN\","
             "\"codecs\":[{\"name\":\"bytes\",\"configuration\":{\"endian\":\"little\"}}]}");
    float f2[2] = {0.5f, 3.0f};
    zarr_test_put(dir, "grp/v/1", f2, sizeof f2);
    /* strings: vlen-utf8 then zstd, 0-d and 1-d. */
    put_text(dir, "grp/s/zarr.json",
             "{\"zarr_format\":3,\"node_type\":\"array\",\"shape\":[3],\"data_type\":\"string\","
             "\"chunk_grid\":{\"name\":\"regular\",\"configuration\":{\"chunk_shape\":[3]}},"
             "\"chunk_key_encoding\":{\"name\":\"default\"},\"fill_value\":\"\","
             "\"codecs\":[{\"name\":\"vlen-utf8\",\"configuration\":{}},{\"name\":\"zstd\","
             "\"configuration\":{\"level\":0,\"checksum\":false}}]}");
    const char *sv[3] = {"x", "\xe2\x82\xac", "zz"};
    bytes vs = vlen_of(sv, 3);
    bytes zs = zstd_of(vs.p, vs.n);
    zarr_test_put(dir, "grp/s/c/0", zs.p, zs.n);
    put_text(dir, "grp/u/zarr.json",
             "{\"zarr_format\":3,\"node_type\":\"array\",\"shape\":[],\"data_type\":{\"name\":"
             "\"fixed_length_utf32\",\"configuration\":{\"length_bytes\":8}},"
             "\"chunk_grid\":{\"name\":\"regular\",\"configuration\":{\"chunk_shape\":[]}},"
             "\"chunk_key_encoding\":{\"name\":\"default\"},\"fill_value\":\"\","
             "\"codecs\":[{\"name\":\"bytes\",\"configuration\":{\"endian\":\"big\"}}]}");
    zarr_test_put(dir, "grp/u/c", "\0\0\0h\0\0\0i", 8);

    node *root = NULL;
    cellar_error err;
    cellar_error_clear(&err);
    CHECK_EQ(zarr_open(dir, &root, &err), 0);
    if (!root)
        goto done;
    CHECK_EQ(zarr_format(root), 3);
    CHECK_STR_EQ(node_attr_string(root, "encoding-version"), "0.1.0");
    arena *ar = arena_new();
    const char **names = NULL;
    size_t count = 0;
    CHECK_EQ(node_children(open_at(root, "grp"), ar, &names, &count, &err), 0);
    CHECK_EQ(count, 5);
    node *a = open_at(root, "grp/a");
    if (a) {
        CHECK_STR_EQ(node_attr_string(a, "encoding-type"), "array");
        CHECK_EQ(node_get_info(a)->stored_big_endian, 1);
    }
    check_grid_i32(a, 5, 7, want_a);
    check_grid_i32(open_at(root, "grp/t"), 5, 7, want_plain);
    node *v = open_at(root, "grp/v");
    float fv[4];
    dim_sel s4 = dim_sel_range(0, 4);
    if (v) {
        CHECK_EQ(read_sel(v, &s4, fv, sizeof fv, &err), 0);
        CHECK(isnan(fv[0]) && isnan(fv[1]));
        CHECK_DBL_EQ(fv[2], 0.5);
        CHECK_DBL_EQ(fv[3], 3.0);
    }
    char *so[3] = {0};
    dim_sel s3 = {.start = 2, .step = -1, .count = 3, .index = NULL};
    node *s = open_at(root, "grp/s");
    if (s) {
        CHECK_EQ(node_read_strings(s, &s3, ar, so, &err), 0);
        CHECK_STR_EQ(so[0], "zz");
        CHECK_STR_EQ(so[1], "\xe2\x82\xac");
        CHECK_STR_EQ(so[2], "x");
    }
    node *u = open_at(root, "grp/u");
    if (u) {
        CHECK_EQ(node_read_strings(u, NULL, ar, so, &err), 0);
        CHECK_STR_EQ(so[0], "hi");
    }
    arena_free(ar);
    node_tree_free(root);
done:
    free(vs.p), free(zs.p);
    rm_tree(dir);
}

/* A sharded int32 array of 10 x 6 with shards of 4 x 6 and inner chunks of
 * 2 x 3 (2 x 2 inner chunks per shard).  Shard 1 is missing; in shard 0 the
 * inner chunk (1,1) is empty; in shard 2 the inner row 1 (rows 10-11) is
 * empty.  Inner chunks are stored in reverse order. */
static int32_t want_shard(int64_t i, int64_t j)
{
    if (i >= 4 && i < 8)
        return -1;
    if (i >= 2 && i < 4 && j >= 3)
        return -1;
    return (int32_t)(i * 10 + j);
}

static bytes make_shard(int64_t s, int at_start, int corrupt)
{
    bytes data = {0}, idx = {0};
    uint64_t offs[4], lens[4];
    size_t isz = 4 * 16 + 4;
    for (int k = 3; k >= 0; k--) {
        int64_t ir = k / 2, ic = k % 2;
        int empty = (s == 0 && k == 3) || (s == 2 && ir == 1);
        if (empty) {
            offs[k] = lens[k] = UINT64_MAX;
            continue;
        }
        int32_t c[6];
        for (int r = 0; r < 2; r++)
            for (int q = 0; q < 3; q++)
                c[r * 3 + q] = (int32_t)((s * 4 + ir * 2 + r) * 10 + ic * 3 + q);
        bytes z = zstd_of(c, sizeof c);
        offs[k] = (at_start ? isz : 0) + data.n;
        lens[k] = z.n;
        bytes_add(&data, z.p, z.n);
        free(z.p);
    }
    if (corrupt == 1)
        offs[0] = 1000000;
    for (int k = 0; k < 4; k++) {
        bytes_u64(&idx, offs[k]);
        bytes_u64(&idx, lens[k]);
    }
    bytes_crc(&idx);
    if (corrupt == 2)
        idx.p[3] ^= 0x10;
    bytes out = {0};
    if (at_start) {
        bytes_add(&out, idx.p, idx.n);
        bytes_add(&out, data.p, data.n);
    } else {
        bytes_add(&out, data.p, data.n);
        bytes_add(&out, idx.p, idx.n);
    }
    free(idx.p);
    free(data.p);
    return out;
}

static void put_sharded(const char *dir, const char *name, int at_start, int corrupt)
{
    char meta[2048], rel[256];
    snprintf(meta, sizeof meta,
             "{\"zarr_format\":3,\"node_type\":\"array\",\"shape\":[10,6],\"data_type\":\"int32\","
             "\"chunk_grid\":{\"name\":\"regular\",\"configuration\":{\"chunk_shape\":[4,6]}},"
             "\"chunk_key_encoding\":{\"name\":\"default\","
             "\"configuration\":{\"separator\":\"/\"}},"
             "\"fill_value\":-1,\"codecs\":[{\"name\":\"sharding_indexed\",\"configuration\":{"
             "\"chunk_shape\":[2,3],\"codecs\":[{\"name\":\"bytes\",\"configuration\":{"
             "\"endian\":\"little\"}},{\"name\":\"zstd\",\"configuration\":{\"level\":0}}],"
             "\"index_codecs\":[{\"name\":\"bytes\",\"configuration\":{\"endian\":\"little\"}},"
             "{\"name\":\"crc32c\"}],\"index_location\":\"%s\"}}],\"attributes\":{}}",
             at_start ? "start" : "end");
    snprintf(rel, sizeof rel, "%s/zarr.json", name);
    put_text(dir, rel, meta);
    for (int64_t s = 0; s < 3; s += 2) {
        bytes b = make_shard(s, at_start, s == 0 ? corrupt : 0);
        snprintf(rel, sizeof rel, "%s/c/%lld/0", name, (long long)s);
        zarr_test_put(dir, rel, b.p, b.n);
        free(b.p);
    }
}

void test_zarr_v3_sharded(void)
{
    char *dir = make_tmpdir();
    put_text(dir, "zarr.json", V3_GROUP);
    put_sharded(dir, "s_end", 0, 0);
    put_sharded(dir, "s_start", 1, 0);
    put_sharded(dir, "s_outside", 0, 1);
    put_sharded(dir, "s_badcrc", 0, 2);
    node *root = NULL;
    cellar_error err;
    cellar_error_clear(&err);
    CHECK_EQ(zarr_open(dir, &root, &err), 0);
    if (!root)
        goto done;
    check_grid_i32(open_at(root, "s_end"), 10, 6, want_shard);
    check_grid_i32(open_at(root, "s_start"), 10, 6, want_shard);
    int32_t buf[60];
    dim_sel all[2] = {dim_sel_range(0, 10), dim_sel_range(0, 6)};
    node *bad = open_at(root, "s_outside");
    cellar_error_clear(&err);
    CHECK_EQ(bad ? node_read(bad, all, buf, sizeof buf, &err) : 0, CELLAR_EFORMAT);
    CHECK(strstr(err.detail, "outside") != NULL);
    /* Rows of shard 2 only never touch the corrupt shard 0. */
    dim_sel tail[2] = {dim_sel_range(8, 2), dim_sel_range(0, 6)};
    CHECK_EQ(bad ? read_sel(bad, tail, buf, 12 * 4, &err) : -1, 0);
    CHECK_EQ(buf[0], 80);
    node *crc = open_at(root, "s_badcrc");
    cellar_error_clear(&err);
    CHECK_EQ(crc ? node_read(crc, all, buf, sizeof buf, &err) : 0, CELLAR_EFORMAT);
    CHECK(strstr(err.detail, "crc32c") != NULL);
    node_tree_free(root);
done:
    rm_tree(dir);
}

void test_zarr_v3_consolidated(void)
{
    char *dir = make_tmpdir();
    /* The root zarr.json holds every node; only chunk files are on disk. */
    put_text(dir, "zarr.json",
             "{\"zarr_format\":3,\"node_type\":\"group\",\"attributes\":{\"r\":1},"
             "\"consolidated_metadata\":{\"kind\":\"inline\",\"must_understand\":false,"
             "\"metadata\":{\"obs\":{\"zarr_format\":3,\"node_type\":\"group\",\"attributes\":"
             "{\"encoding-type\":\"dataframe\"},\"consolidated_metadata\":{\"kind\":\"inline\","
             "\"must_understand\":false,\"metadata\":{}}},"
             "\"obs/x\":{\"zarr_format\":3,\"node_type\":\"array\",\"shape\":[3],"
             "\"data_type\":\"uint8\",\"chunk_grid\":{\"name\":\"regular\",\"configuration\":"
             "{\"chunk_shape\":[3]}},\"chunk_key_encoding\":{\"name\":\"default\"},"
             "\"fill_value\":0,\"codecs\":[{\"name\":\"bytes\"}],\"attributes\":{\"a\":\"b\"}},"
             "\"obs/y\":{\"zarr_format\":3,\"node_type\":\"array\",\"shape\":[2],"
             "\"data_type\":\"bool\",\"chunk_grid\":{\"name\":\"regular\",\"configuration\":"
             "{\"chunk_shape\":[2]}},\"chunk_key_encoding\":{\"name\":\"default\"},"
             "\"fill_value\":true,\"codecs\":[{\"name\":\"bytes\"}]}}}}");
    zarr_test_put(dir, "obs/x/c/0", "\x01\x02\x03", 3);
    node *root = NULL;
    cellar_error err;
    cellar_error_clear(&err);
    CHECK_EQ(zarr_open(dir, &root, &err), 0);
    if (!root)
        goto done;
    arena *ar = arena_new();
    const char **names = NULL;
    size_t count = 0;
    CHECK_EQ(node_children(root, ar, &names, &count, &err), 0);
    CHECK_EQ(count, 1);
    node *obs = open_at(root, "obs");
    CHECK_STR_EQ(obs ? node_attr_string(obs, "encoding-type") : NULL, "dataframe");
    CHECK_EQ(obs ? node_children(obs, ar, &names, &count, &err) : -1, 0);
    CHECK_EQ(count, 2);
    node *x = open_at(root, "obs/x");
    uint8_t xv[3] = {0};
    dim_sel s3 = dim_sel_range(0, 3);
    CHECK_EQ(x ? read_sel(x, &s3, xv, 3, &err) : -1, 0);
    CHECK_EQ(xv[2], 3);
    CHECK_STR_EQ(x ? node_attr_string(x, "a") : NULL, "b");
    node *y = open_at(root, "obs/y");
    uint8_t yv[2] = {0};
    dim_sel s2 = dim_sel_range(0, 2);
    CHECK_EQ(y ? read_sel(y, &s2, yv, 2, &err) : -1, 0);
    CHECK_EQ(yv[0], 1);
    CHECK_EQ(yv[1], 1);
    arena_free(ar);
    node_tree_free(root);
done:
    rm_tree(dir);
}

/* ---- distrust ----------------------------------------------------------- */

static void check_open_child_fails(node *root, const char *name, int code)
{
    node *c = NULL;
    cellar_error err;
    cellar_error_clear(&err);
    CHECK_EQ(node_child(root, name, &c, &err), code);
    CHECK(err.detail[0] != '\0');
}

void test_zarr_errors(void)
{
    char *dir = make_tmpdir();
    node *root = NULL;
    cellar_error err;
    cellar_error_clear(&err);
    CHECK_EQ(zarr_open(dir, &root, &err), CELLAR_EFORMAT); /* empty directory */
    CHECK(strstr(err.detail, "not a zarr store") != NULL);
    put_text(dir, ".zgroup", "{\"zarr_format\": 2}");
    const char *base = "\"zarr_format\":2,\"compressor\":null,\"filters\":null,"
                       "\"fill_value\":0,\"order\":\"C\"";
    char meta[1024];
    snprintf(meta, sizeof meta,
             "{%s,\"shape\":[1,1,1,1,1,1,1,1,1],\"chunks\":[1,1,1,1,1,1,1,1,1],"
             "\"dtype\":\"<i4\"}", base);
    put_text(dir, "deep/.zarray", meta);
    snprintf(meta, sizeof meta,
             "{%s,\"shape\":[100000000000],\"chunks\":[100000000000],\"dtype\":\"<f8\"}", base);
    put_text(dir, "huge/.zarray", meta);
    snprintf(meta, sizeof meta, "{%s,\"shape\":[4],\"chunks\":[0],\"dtype\":\"<f8\"}", base);
    put_text(dir, "zero/.zarray", meta);
    snprintf(meta, sizeof meta, "{%s,\"shape\":[4],\"chunks\":[4,4],\"dtype\":\"<f8\"}", base);
    put_text(dir, "mismatch/.zarray", meta);
    put_text(dir, "notjson/.zarray", "{\"shape\": [4,");
    snprintf(meta, sizeof meta, "{%s,\"shape\":[4],\"chunks\":[4],\"dtype\":\"<M8[ns]\"}", base);
    put_text(dir, "dt/.zarray", meta);
    put_text(dir, "codec/.zarray",
             "{\"zarr_format\":2,\"shape\":[4],\"chunks\":[4],\"dtype\":\"<i4\","
             "\"compressor\":{\"id\":\"bz2\"},\"filters\":null,\"fill_value\":0}");
    /* A chunk that decodes to the wrong size. */
    snprintf(meta, sizeof meta, "{%s,\"shape\":[4],\"chunks\":[4],\"dtype\":\"<i4\"}", base);
    put_text(dir, "short/.zarray", meta);
    zarr_test_put(dir, "short/0", "\1\2\3\4\5\6\7\10", 8);
    /* A compressed chunk that is truncated. */
    put_text(dir, "trunc/.zarray",
             "{\"zarr_format\":2,\"shape\":[4],\"chunks\":[4],\"dtype\":\"<i4\","
             "\"compressor\":{\"id\":\"zstd\"},\"filters\":null,\"fill_value\":0}");
    int32_t four[4] = {1, 2, 3, 4};
    bytes z = zstd_of(four, sizeof four);
    zarr_test_put(dir, "trunc/0", z.p, z.n - 3);
    free(z.p);
    /* A vlen chunk claiming more strings than the chunk holds. */
    put_text(dir, "vl/.zarray",
             "{\"zarr_format\":2,\"shape\":[2],\"chunks\":[2],\"dtype\":\"|O\","
             "\"compressor\":null,\"filters\":[{\"id\":\"vlen-utf8\"}],\"fill_value\":\"\"}");
    const char *three[3] = {"a", "b", "c"};
    bytes v = vlen_of(three, 3);
    zarr_test_put(dir, "vl/0", v.p, v.n);
    free(v.p);

    CHECK_EQ(zarr_open(dir, &root, &err), 0);
    if (!root)
        goto done;
    check_open_child_fails(root, "deep", CELLAR_EFORMAT);
    check_open_child_fails(root, "huge", CELLAR_EFORMAT);
    check_open_child_fails(root, "zero", CELLAR_EFORMAT);
    check_open_child_fails(root, "mismatch", CELLAR_EFORMAT);
    check_open_child_fails(root, "notjson", CELLAR_EFORMAT);
    check_open_child_fails(root, "..", CELLAR_ENOTFOUND);
    check_open_child_fails(root, ".zgroup", CELLAR_ENOTFOUND);
    node *dt = open_at(root, "dt");
    CHECK(dt && node_get_info(dt)->dtype == DT_NONE);
    int32_t out[4];
    dim_sel s4 = dim_sel_range(0, 4);
    const char *fail_names[] = {"codec", "short", "trunc"};
    for (size_t i = 0; i < 3; i++) {
        node *n = open_at(root, fail_names[i]);
        cellar_error_clear(&err);
        CHECK_EQ(n ? node_read(n, &s4, out, sizeof out, &err) : 0, CELLAR_EFORMAT);
        CHECK(err.detail[0] != '\0');
    }
    CHECK(strstr(err.detail, "trunc") != NULL);
    node *vl = open_at(root, "vl");
    arena *ar = arena_new();
    char *so[2];
    dim_sel s2 = dim_sel_range(0, 2);
    cellar_error_clear(&err);
    CHECK_EQ(vl ? node_read_strings(vl, &s2, ar, so, &err) : 0, CELLAR_EFORMAT);
    arena_free(ar);
    node_tree_free(root);
done:
    rm_tree(dir);
}

/* The metadata parsers directly: accepted and rejected documents. */
void test_zarr_meta_parse(void)
{
    const char *ok_v3 =
        "{\"zarr_format\":3,\"node_type\":\"array\",\"shape\":[8,8],\"data_type\":\"float16\","
        "\"chunk_grid\":{\"name\":\"regular\",\"configuration\":{\"chunk_shape\":[8,8]}},"
        "\"chunk_key_encoding\":{\"name\":\"default\"},\"fill_value\":\"0x3c00\","
        "\"codecs\":[{\"name\":\"sharding_indexed\",\"configuration\":{\"chunk_shape\":[4,4],"
        "\"codecs\":[{\"name\":\"bytes\",\"configuration\":{\"endian\":\"big\"}}],"
        "\"index_codecs\":[{\"name\":\"bytes\",\"configuration\":{\"endian\":\"little\"}}],"
        "\"index_location\":\"start\"}}]}";
    json_t *j = json_loads(ok_v3, 0, NULL);
    zarr_array za;
    cellar_error err;
    cellar_error_clear(&err);
    CHECK_EQ(zarr_array_parse_v3(j, &za, "t", &err), 0);
    CHECK_EQ(za.sharded, 1);
    CHECK_EQ(za.index_at_start, 1);
    CHECK_EQ(za.index_crc, 0);
    CHECK_EQ(za.inner_chain.big_endian, 1);
    CHECK_EQ(za.inner[1], 4);
    uint16_t h;
    memcpy(&h, za.fill, 2);
    CHECK_EQ(h, 0x3c00);
    CHECK(za.unsupported == NULL);
    uint64_t *pairs = NULL, n = 0;
    uint8_t idx[64];
    memset(idx, 0xff, sizeof idx);
    CHECK_EQ(zarr_shard_index_read(&za, idx, sizeof idx, 64, &pairs, &n, &err), 0);
    CHECK_EQ(n, 4);
    CHECK(pairs && pairs[0] == CODEC_SHARD_EMPTY);
    free(pairs);
    zarr_array_clear(&za);
    json_decref(j);

    /* Inner chunks that do not divide the shard. */
    j = json_loads("{\"zarr_format\":3,\"node_type\":\"array\",\"shape\":[8],"
                   "\"data_type\":\"int8\",\"chunk_grid\":{\"name\":\"regular\","
                   "\"configuration\":{\"chunk_shape\":[8]}},\"chunk_key_encoding\":{\"name\":"
                   "\"default\"},\"fill_value\":0,\"codecs\":[{\"name\":\"sharding_indexed\","
                   "\"configuration\":{\"chunk_shape\":[3],\"codecs\":[{\"name\":\"bytes\"}]}}]}",
                   0, NULL);
    CHECK_EQ(zarr_array_parse_v3(j, &za, "t", &err), CELLAR_EFORMAT);
    json_decref(j);
    /* An unknown codec is recorded, not fatal. */
    j = json_loads("{\"zarr_format\":3,\"node_type\":\"array\",\"shape\":[8],"
                   "\"data_type\":\"int8\",\"chunk_grid\":{\"name\":\"regular\","
                   "\"configuration\":{\"chunk_shape\":[8]}},\"chunk_key_encoding\":{\"name\":"
                   "\"default\"},\"fill_value\":0,\"codecs\":[{\"name\":\"bytes\"},"
                   "{\"name\":\"bz2\"}]}",
                   0, NULL);
    CHECK_EQ(zarr_array_parse_v3(j, &za, "t", &err), 0);
    CHECK(za.unsupported && strstr(za.unsupported, "bz2"));
    zarr_array_clear(&za);
    json_decref(j);
    /* Python's bare NaN in JSON text. */
    json_t *doc = NULL;
    const char *py = "{\"a\": NaN, \"b\": \"NaN\", \"c\": -Infinity}";
    CHECK_EQ(zarr_json_parse(py, strlen(py), &doc, "t", &err), 0);
    CHECK(json_is_null(json_object_get(doc, "a")));
    CHECK_STR_EQ(json_string_value(json_object_get(doc, "b")), "NaN");
    CHECK(json_is_null(json_object_get(doc, "c")));
    json_decref(doc);
    CHECK_EQ(zarr_json_parse("{\"a\": ", 6, &doc, "t", &err), CELLAR_EFORMAT);
}

/* Many threads reading one tree at once (reads take no lock). */
typedef struct thread_job {
    node *root;
    int bad;
} thread_job;

static void *thread_reads(void *arg)
{
    thread_job *job = arg;
    int32_t buf[60];
    for (int it = 0; it < 30; it++) {
        node *n = NULL;
        cellar_error err;
        cellar_error_clear(&err);
        if (node_resolve(job->root, it % 2 ? "s_end" : "s_start", &n, &err)) {
            job->bad++;
            continue;
        }
        dim_sel all[2] = {dim_sel_range(0, 10), dim_sel_range(0, 6)};
        if (node_read(n, all, buf, sizeof buf, &err)) {
            job->bad++;
            continue;
        }
        for (int i = 0; i < 10; i++)
            for (int j = 0; j < 6; j++)
                job->bad += buf[i * 6 + j] != want_shard(i, j);
    }
    return NULL;
}

void test_zarr_threads(void)
{
    char *dir = make_tmpdir();
    put_text(dir, "zarr.json", V3_GROUP);
    put_sharded(dir, "s_end", 0, 0);
    put_sharded(dir, "s_start", 1, 0);
    node *root = NULL;
    cellar_error err;
    cellar_error_clear(&err);
    CHECK_EQ(zarr_open(dir, &root, &err), 0);
    if (root) {
        pthread_t th[4];
        thread_job jobs[4];
        for (int i = 0; i < 4; i++) {
            jobs[i].root = root;
            jobs[i].bad = 0;
            CHECK_EQ(pthread_create(&th[i], NULL, thread_reads, &jobs[i]), 0);
        }
        for (int i = 0; i < 4; i++) {
            pthread_join(th[i], NULL);
            CHECK_EQ(jobs[i].bad, 0);
        }
        node_tree_free(root);
    }
    rm_tree(dir);
}

/* A v2 structured dtype (anndata's rec-arrays in zarr v2): packed records
 * whose fields read as arrays of their own, in chunks (one missing: zeros),
 * a big-endian field, strings fixed UTF-32 and bytes; bad field lists. */
void test_zarr_v2_records(void)
{
    char *dir = make_tmpdir();
    put_text(dir, ".zgroup", "{\"zarr_format\": 2}");
    put_text(dir, "r/.zarray",
             "{\"zarr_format\":2,\"shape\":[5],\"chunks\":[2],\"dtype\":[[\"name\",\"<U2\"],"
             "[\"score\",\">f4\"],[\"n\",\"<i2\"],[\"ok\",\"|b1\"],[\"tag\",\"|S3\"],"
             "[\"vec\",\"<f8\",[2]]],\"compressor\":{\"id\":\"zlib\",\"level\":1},"
             "\"filters\":null,\"fill_value\":null,\"order\":\"C\"}");
    enum { REC = 8 + 4 + 2 + 1 + 3 + 16 };
    uint8_t c0[2 * REC], c2[2 * REC];
    memset(c0, 0, sizeof c0);
    memset(c2, 0, sizeof c2);
    uint8_t *chunks[2] = {c0, c2};
    int rows[2][2] = {{0, 1}, {4, -1}};
    for (int c = 0; c < 2; c++)
        for (int k = 0; k < 2; k++) {
            int i = rows[c][k];
            if (i < 0)
                continue;
            uint8_t *p = chunks[c] + k * REC;
            uint32_t u[2] = {'a' + (uint32_t)i, 0x4e2d}; /* "a中" */
            memcpy(p, u, 8);
            float f = 0.25f * (float)(i + 1);
            uint32_t bits;
            memcpy(&bits, &f, 4);
            bits = __builtin_bswap32(bits);
            memcpy(p + 8, &bits, 4);
            int16_t n = (int16_t)(-i);
            memcpy(p + 12, &n, 2);
            p[14] = (uint8_t)(i % 2 ? 7 : 0);
            memcpy(p + 15, i ? "xy" : "abc", i ? 2 : 3);
        }
    bytes z0 = zlib_of(c0, sizeof c0), z2 = zlib_of(c2, sizeof c2);
    zarr_test_put(dir, "r/0", z0.p, z0.n);
    zarr_test_put(dir, "r/2", z2.p, z2.n);
    put_text(dir, "dup/.zarray",
             "{\"zarr_format\":2,\"shape\":[1],\"chunks\":[1],\"dtype\":[[\"a\",\"<i4\"],"
             "[\"a\",\"<i4\"]],\"compressor\":null,\"filters\":null,\"fill_value\":null}");
    put_text(dir, "nest/.zarray",
             "{\"zarr_format\":2,\"shape\":[1],\"chunks\":[1],\"dtype\":[[\"a\",[[\"b\",\"<i4\"]]]],"
             "\"compressor\":null,\"filters\":null,\"fill_value\":null}");

    node *root = NULL;
    cellar_error err;
    cellar_error_clear(&err);
    CHECK_EQ(zarr_open(dir, &root, &err), 0);
    node *r = root ? open_at(root, "r") : NULL;
    if (r) {
        const node_info *ri = node_get_info(r);
        CHECK_EQ(ri->n_fields, 6);
        CHECK_EQ(ri->dtype, DT_NONE);
        arena *ar = arena_new();
        const char **names = NULL;
        size_t nn = 0;
        CHECK_EQ(node_children(r, ar, &names, &nn, &err), 0);
        CHECK_EQ(nn, 6);
        CHECK_STR_EQ(names[0], "name");
        CHECK_STR_EQ(names[5], "vec");
        node *score = open_at(root, "r/score");
        CHECK_EQ(node_get_info(score)->dtype, DT_FLOAT32);
        int64_t pick[4] = {4, 0, 2, 1};
        dim_sel s = {.count = 4, .index = pick};
        float fv[4] = {0};
        CHECK_EQ(node_read(score, &s, fv, sizeof fv, &err), 0);
        CHECK_DBL_EQ(fv[0], 1.25);
        CHECK_DBL_EQ(fv[1], 0.25);
        CHECK_DBL_EQ(fv[2], 0.0); /* chunk 1 missing */
        CHECK_DBL_EQ(fv[3], 0.5);
        int16_t nv[5];
        dim_sel all = dim_sel_range(0, 5);
        CHECK_EQ(node_read(open_at(root, "r/n"), &all, nv, sizeof nv, &err), 0);
        CHECK_EQ(nv[4], -4);
        uint8_t ok[5];
        CHECK_EQ(node_read(open_at(root, "r/ok"), &all, ok, sizeof ok, &err), 0);
        CHECK_EQ(ok[1], 1);
        CHECK_EQ(ok[4], 0);
        char *sv[5] = {0};
        CHECK_EQ(node_read_strings(open_at(root, "r/name"), &all, ar, sv, &err), 0);
        CHECK_STR_EQ(sv[4], "e\xe4\xb8\xad");
        CHECK_STR_EQ(sv[2], "");
        CHECK_EQ(node_read_strings(open_at(root, "r/tag"), &all, ar, sv, &err), 0);
        CHECK_STR_EQ(sv[0], "abc");
        CHECK_STR_EQ(sv[1], "xy");
        CHECK_EQ(node_get_info(open_at(root, "r/vec"))->dtype, DT_NONE);
        node *n = NULL;
        cellar_error_clear(&err);
        CHECK_EQ(node_child(r, "nope", &n, &err), CELLAR_ENOTFOUND);
        arena_free(ar);
    }
    node *dup = root ? open_at(root, "dup") : NULL;
    if (dup)
        CHECK_EQ(node_get_info(dup)->n_fields, 0);
    node *nest = root ? open_at(root, "nest") : NULL;
    if (nest)
        CHECK_EQ(node_get_info(nest)->n_fields, 0);
    node_tree_free(root);
    free(z0.p), free(z2.p);
    rm_tree(dir);
}
