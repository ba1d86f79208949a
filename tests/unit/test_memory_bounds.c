/* Memory bounded by the stored bytes, not by what metadata claims (issue
 * 19, points 2 and 3): stores written by zarr-python and h5py, then edited
 * as a damaged or hostile writer would (chunk shapes of 1 GiB over chunk
 * files of a hundred bytes, 2^28 strings in a chunk of 80, codec headers
 * claiming 1 GiB, shard indexes a shard cannot hold, an HDF5 deflate chunk
 * under a 256 MiB chunk shape).  Every read must fail with CELLAR_EFORMAT
 * naming what lied, before the claim sizes an allocation: each runs in a
 * child process whose address space may grow by only BOUND_HEADROOM, where
 * such an allocation fails (CELLAR_ENOMEM) instead.  Under AddressSanitizer,
 * which reserves terabytes of address space, the reads run in this process
 * and only their codes and details are checked.
 *
 * The fixtures are written at test time by the test venv's Python
 * (CELLAR_TEST_PYTHON, else .venv/bin/python, `make venv`); without it this
 * test fails. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/arena.h"
#include "storage/budget.h"
#include "storage/codecs.h"
#include "storage/hdf5/h5_direct.h"
#include "storage/node.h"
#include "storage/zarr/zarr.h"
#include "storage/zarr/zarr_impl.h"
#include "tests/unit/py_fixture.h"
#include "tests/unit/unit.h"

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif
#ifndef UNDER_ASAN
#define UNDER_ASAN 0
#endif

/* What a bounded read may allocate beyond what the process holds. */
#define BOUND_HEADROOM ((rlim_t)256 << 20)

static const char fixture_py[] =
    "import json, struct, sys\n"
    "from pathlib import Path\n"
    "import h5py, numcodecs, numpy as np, zarr\n"
    "from zarr.codecs import ZstdCodec\n"
    "d = Path(sys.argv[1])\n"
    "x = np.arange(80 * 50, dtype=np.float32).reshape(80, 50) % 7\n"
    "names = np.array(['cell-%d' % i for i in range(80)], dtype=object)\n"
    "def edit(p, fn):\n"
    "    m = p / 'zarr.json' if (p / 'zarr.json').exists() else p / '.zarray'\n"
    "    doc = json.loads(m.read_text()); fn(doc); m.write_text(json.dumps(doc))\n"
    "def chunks(shape):\n"
    "    def fn(doc):\n"
    "        if doc.get('zarr_format') == 3:\n"
    "            doc['chunk_grid']['configuration']['chunk_shape'] = shape\n"
    "        else:\n"
    "            doc['chunks'] = shape\n"
    "    return fn\n"
    "def inner(shape):\n"
    "    def fn(doc):\n"
    "        doc['codecs'][0]['configuration']['chunk_shape'] = shape\n"
    "    return fn\n"
    "for name, comp in (('zstd', numcodecs.Zstd(level=3)), ('zlib', numcodecs.Zlib(level=5)),\n"
    "                   ('gzip', numcodecs.GZip(level=5)), ('lz4', numcodecs.LZ4()),\n"
    "                   ('blosc', numcodecs.Blosc(cname='lz4', clevel=5))):\n"
    "    p = d / ('v2_%s_big.zarr' % name)\n"
    "    a = zarr.create_array(str(p), shape=x.shape, chunks=x.shape, dtype=x.dtype,\n"
    "                          zarr_format=2, compressors=comp)\n"
    "    a[...] = x\n"
    "    edit(p, chunks([16384, 16384]))\n"
    "p = d / 'v3_zstd_big.zarr'\n"
    "a = zarr.create_array(str(p), shape=x.shape, chunks=x.shape, dtype=x.dtype,\n"
    "                      compressors=ZstdCodec(level=3))\n"
    "a[...] = x\n"
    "edit(p, chunks([16384, 16384]))\n"
    "for fmt in (2, 3):\n"
    "    p = d / ('v%d_vlen.zarr' % fmt)\n"
    "    a = zarr.create_array(str(p), shape=(80,), chunks=(80,), dtype=str, zarr_format=fmt)\n"
    "    a[...] = names\n"
    "    edit(p, chunks([1 << 28]))\n"
    "p = d / 'v2_vlen_lz4_header.zarr'\n"
    "a = zarr.create_array(str(p), shape=(80,), chunks=(80,), dtype=str, zarr_format=2,\n"
    "                      compressors=numcodecs.LZ4())\n"
    "a[...] = names\n"
    "c = p / '0'; b = bytearray(c.read_bytes())\n"
    "b[0:4] = struct.pack('<I', (1 << 30) - 16); c.write_bytes(bytes(b))\n"
    "p = d / 'v3_vlen_zstd_header.zarr'\n"
    "a = zarr.create_array(str(p), shape=(80,), chunks=(80,), dtype=str,\n"
    "                      compressors=ZstdCodec(level=3))\n"
    "a[...] = names\n"
    "c = p / 'c' / '0'; b = c.read_bytes()\n"
    "assert b[:4] == b'\\x28\\xb5\\x2f\\xfd'\n"
    "fhd = b[4]; single = (fhd >> 5) & 1\n"
    "fcs = [1 if single else 0, 2, 4, 8][fhd >> 6]\n"
    "at = 5 + (0 if single else 1) + [0, 1, 2, 4][fhd & 3]\n"
    "c.write_bytes(b[:4] + bytes([(fhd & 0x3f) | 0x80]) + b[5:at] +\n"
    "              struct.pack('<I', (1 << 30) - 16) + b[at + fcs:])\n"
    "p = d / 'v3_shard_index.zarr'\n"
    "a = zarr.create_array(str(p), shape=x.shape, shards=(80, 50), chunks=(20, 25), dtype=x.dtype)\n"
    "a[...] = x\n"
    "edit(p, chunks([1024, 1024])); edit(p, inner([1, 1]))\n"
    "p = d / 'v3_shard_inner.zarr'\n"
    "a = zarr.create_array(str(p), shape=x.shape, shards=(80, 50), chunks=(20, 25), dtype=x.dtype)\n"
    "a[...] = x\n"
    "edit(p, inner([1, 1]))\n"
    "p = d / 'v3_shard_big.zarr'\n"
    "a = zarr.create_array(str(p), shape=x.shape, shards=(80, 50), chunks=(80, 50), dtype=x.dtype)\n"
    "a[...] = x\n"
    "edit(p, chunks([16384, 16384])); edit(p, inner([16384, 16384]))\n"
    "with h5py.File(d / 'deflate.h5', 'w') as f:\n"
    "    ds = f.create_dataset('x', data=x, chunks=x.shape, compression='gzip')\n"
    "    i = ds.id.get_chunk_info(0)\n"
    "(d / 'deflate.txt').write_text('%d %d %d\\n' % (i.byte_offset, i.size, i.filter_mask))\n";

static char mb_dir[256];

static void mb_cleanup(void)
{
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", mb_dir);
    if (mb_dir[0] && system(cmd) != 0)
        fprintf(stderr, "test_memory_bounds: could not remove %s\n", mb_dir);
}

static int mb_fixtures(void)
{
    static int state; /* 0 not tried, 1 written, -1 failed */
    if (state)
        return state;
    state = py_fixture_run("memory-bounds", fixture_py, mb_dir, sizeof mb_dir) == 0 ? 1 : -1;
    atexit(mb_cleanup);
    return state;
}

/* Every test below reads the fixtures. */
#define NEED_FIXTURES()                                                                 \
    do {                                                                                \
        if (mb_fixtures() != 1) {                                                       \
            CHECK(!"fixtures written");                                                 \
            return;                                                                     \
        }                                                                               \
    } while (0)

/* ---- reads in a bounded child ---- */

typedef int (*bounded_fn)(const char *arg, cellar_error *err);

static rlim_t vm_size_bytes(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    unsigned long long kb = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmSize: %llu kB", &kb) == 1)
            break;
    if (f)
        fclose(f);
    return (rlim_t)kb << 10;
}

/* fn(arg) in a child whose address space may grow by BOUND_HEADROOM only;
 * its code and detail come back in err.  A child that dies is
 * CELLAR_EINTERNAL. */
static int run_bounded(bounded_fn fn, const char *arg, cellar_error *err)
{
    cellar_error_clear(err);
    if (UNDER_ASAN)
        return fn(arg, err);
    int fds[2];
    if (pipe(fds) != 0)
        return cellar_fail(err, CELLAR_EINTERNAL, "pipe failed");
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        cellar_error e;
        cellar_error_clear(&e);
        rlim_t as = vm_size_bytes() + BOUND_HEADROOM;
        struct rlimit lim = {as, as};
        if (setrlimit(RLIMIT_AS, &lim) != 0)
            cellar_fail(&e, CELLAR_EINTERNAL, "setrlimit failed");
        else
            fn(arg, &e);
        ssize_t w = write(fds[1], &e, sizeof e);
        _exit(w == (ssize_t)sizeof e ? 0 : 1);
    }
    close(fds[1]);
    cellar_error got;
    cellar_error_clear(&got);
    ssize_t r = pid > 0 ? read(fds[0], &got, sizeof got) : -1;
    close(fds[0]);
    int status = 0;
    if (pid > 0)
        waitpid(pid, &status, 0);
    if (r != (ssize_t)sizeof got || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return cellar_fail(err, CELLAR_EINTERNAL, "the bounded child died (status %d)", status);
    *err = got;
    return got.code;
}

/* Opens the zarr store mb_dir/arg (one array) and reads its first element
 * (or first row of strings). */
static int read_first(const char *arg, cellar_error *err)
{
    char dir[400];
    snprintf(dir, sizeof dir, "%s/%s", mb_dir, arg);
    node *root = NULL;
    int rc = zarr_open(dir, &root, err);
    if (rc)
        return rc;
    const node_info *in = node_get_info(root);
    dim_sel sel[NODE_MAX_DIMS];
    for (int d = 0; d < in->ndim; d++)
        sel[d] = dim_sel_range(0, 1);
    if (in->dtype == DT_STRING) {
        arena *a = arena_new();
        char *s = NULL;
        rc = a ? node_read_strings(root, sel, a, &s, err) : CELLAR_ENOMEM;
        arena_free(a);
    } else {
        double v = 0;
        rc = node_read(root, sel, &v, dtype_size(in->dtype), err);
    }
    node_tree_free(root);
    return rc;
}

/* Fails with the store's name and the detail when the read did not refuse
 * with code and a detail holding `says`. */
static void check_refused(const char *store, int code, const char *says)
{
    cellar_error err;
    int rc = run_bounded(read_first, store, &err);
    if (rc != code || !strstr(err.detail, says)) {
        fprintf(stderr, "test_memory_bounds: %s: code %d (want %d), detail '%s' (want '%s')\n",
                store, rc, code, err.detail, says);
        unit_failures++;
    }
}

/* ---- the tests ---- */

void test_memory_bounds_chunk_shapes(void)
{
    NEED_FIXTURES();
    /* 1 GiB chunk shapes over chunk files of a hundred bytes: refused as
     * claims the stored bytes cannot make, for every codec. */
    const char *stores[] = {"v2_zstd_big.zarr", "v2_zlib_big.zarr", "v2_gzip_big.zarr",
                            "v2_lz4_big.zarr", "v2_blosc_big.zarr", "v3_zstd_big.zarr"};
    for (size_t i = 0; i < sizeof stores / sizeof stores[0]; i++)
        check_refused(stores[i], CELLAR_EFORMAT, "decode to at most");
    /* The same claim from an inner chunk of a shard. */
    check_refused("v3_shard_big.zarr", CELLAR_EFORMAT, "decode to at most");
}

void test_memory_bounds_vlen_counts(void)
{
    NEED_FIXTURES();
    /* 2^28 strings claimed by the chunk shape, 80 in the chunk: refused
     * before 4 GiB of items are allocated. */
    check_refused("v2_vlen.zarr", CELLAR_EFORMAT, "too few for the 268435456 strings");
    check_refused("v3_vlen.zarr", CELLAR_EFORMAT, "too few for the 268435456 strings");
}

void test_memory_bounds_codec_headers(void)
{
    NEED_FIXTURES();
    /* Strings: the decoded size is not known beforehand, so the codec's
     * own header is what claims 1 GiB.  lz4's says it outright; zstd's
     * frame content size only sizes a first buffer, and the stream then
     * fails as the corrupt frame it is. */
    check_refused("v2_vlen_lz4_header.zarr", CELLAR_EFORMAT, "its lz4 header says");
    check_refused("v3_vlen_zstd_header.zarr", CELLAR_EFORMAT, "zstd");
    /* The bound itself, per codec: what a stream of n bytes can make. */
    CHECK_EQ(codec_max_decoded(CODEC_CRC32C, 10), 6);
    CHECK_EQ(codec_max_decoded(CODEC_CRC32C, 3), 0);
    CHECK_EQ(codec_max_decoded(CODEC_ZLIB, 100), 100 * 1032 + 1024);
    CHECK_EQ(codec_max_decoded(CODEC_LZ4, 100), 100 * 256 + 1024);
    CHECK_EQ(codec_max_decoded(CODEC_ZSTD, 100), 100 * 32768 + 1024);
    CHECK(codec_max_decoded(CODEC_BLOSC, UINT64_MAX / 2) == UINT64_MAX);
    /* A metadata claim over the bound fails before anything is decoded,
     * and one within it still needs the bytes to match. */
    uint8_t zeros[64] = {0}, *out = NULL;
    size_t len = 0;
    cellar_error err;
    cellar_error_clear(&err);
    CHECK_EQ(codec_decode(CODEC_ZSTD, zeros, sizeof zeros, (size_t)1 << 30, CODEC_MAX_DECODED,
                          &out, &len, "claim", &err),
             CELLAR_EFORMAT);
    CHECK(strstr(err.detail, "the metadata says 1073741824 decoded bytes") != NULL);
    CHECK(out == NULL);
}

void test_memory_bounds_shard_indexes(void)
{
    NEED_FIXTURES();
    /* Index counts the shard file cannot hold: 2^20 and 4000 inner chunks
     * (16 bytes each) claimed over shards of a few kilobytes. */
    check_refused("v3_shard_index.zarr", CELLAR_EFORMAT, "smaller than its index");
    check_refused("v3_shard_inner.zarr", CELLAR_EFORMAT, "smaller than its index");
    /* The decoder of an index given alone checks its count against its
     * bytes before it sizes the pairs. */
    json_t *doc = json_loads(
        "{\"zarr_format\":3,\"node_type\":\"array\",\"shape\":[1024,1024],"
        "\"data_type\":\"float32\",\"chunk_grid\":{\"name\":\"regular\",\"configuration\":"
        "{\"chunk_shape\":[1024,1024]}},\"chunk_key_encoding\":{\"name\":\"default\"},"
        "\"fill_value\":0,\"codecs\":[{\"name\":\"sharding_indexed\",\"configuration\":"
        "{\"chunk_shape\":[1,1],\"codecs\":[{\"name\":\"bytes\"}]}}]}",
        0, NULL);
    zarr_array za;
    cellar_error err;
    cellar_error_clear(&err);
    CHECK_EQ(zarr_array_parse_v3(doc, &za, "t", &err), 0);
    uint8_t idx[32];
    memset(idx, 0xff, sizeof idx);
    uint64_t *pairs = NULL, n = 0;
    CHECK_EQ(zarr_shard_index_read(&za, idx, sizeof idx, 1 << 20, &pairs, &n, &err),
             CELLAR_EFORMAT);
    CHECK(strstr(err.detail, "not 16 for each of its 1048576 inner chunks") != NULL);
    CHECK(pairs == NULL);
    zarr_array_clear(&za);
    json_decref(doc);
}

/* The deflate chunk h5py wrote, read under a chunk shape of 256 MiB (the
 * largest direct reads take) as if the file's layout message said so. */
static int read_deflate_lie(const char *arg, cellar_error *err)
{
    (void)arg;
    char path[400];
    snprintf(path, sizeof path, "%s/deflate.txt", mb_dir);
    FILE *f = fopen(path, "r");
    unsigned long long addr = 0, size = 0;
    unsigned mask = 0;
    int got = f ? fscanf(f, "%llu %llu %u", &addr, &size, &mask) : 0;
    if (f)
        fclose(f);
    snprintf(path, sizeof path, "%s/deflate.h5", mb_dir);
    int fd = open(path, O_RDONLY);
    struct stat st;
    if (got != 3 || fd < 0 || fstat(fd, &st) != 0) {
        if (fd >= 0)
            close(fd);
        return cellar_fail(err, CELLAR_EINTERNAL, "no deflate fixture");
    }
    h5d_layout l;
    memset(&l, 0, sizeof l);
    l.ndim = 2;
    l.shape[0] = l.shape[1] = l.chunk[0] = l.chunk[1] = 8192;
    l.elem_size = 4;
    l.file_size = (uint64_t)st.st_size;
    l.nfilters = 1;
    l.filters[0].id = H5D_FILTER_DEFLATE;
    h5d_plan *p = NULL;
    int64_t start[2] = {0, 0};
    int rc = h5d_plan_new(&l, &p, err);
    if (!rc)
        rc = h5d_plan_add_chunk(p, start, addr, size, mask, err);
    if (!rc)
        rc = h5d_plan_finish_table(p, err);
    float v = 0;
    dim_sel sel[2] = {dim_sel_range(0, 1), dim_sel_range(0, 1)};
    if (!rc)
        rc = h5d_read(p, fd, NULL, NULL, sel, &v, sizeof v, "/x", err);
    h5d_plan_free(p);
    close(fd);
    return rc;
}

void test_memory_bounds_h5_chunk(void)
{
    NEED_FIXTURES();
    cellar_error err;
    CHECK_EQ(run_bounded(read_deflate_lie, NULL, &err), CELLAR_EFORMAT);
    CHECK(strstr(err.detail, "which deflate cannot make into the 268435456 bytes") != NULL);
}

void test_memory_bounds_budget(void)
{
    cellar_error err;
    cellar_error_clear(&err);
    uint64_t was = budget_whole();
    budget_set_whole(1000);
    CHECK_EQ(budget_check_whole(40, 25, "forty", &err), 0);
    CHECK_EQ(budget_check_whole(41, 25, "forty-one", &err), CELLAR_ETOOBIG);
    CHECK(strstr(err.detail, "forty-one: 41 values, about 1025 bytes") != NULL);
    cellar_error_clear(&err);
    CHECK_EQ(budget_check_whole(INT64_MAX, 8, "huge", &err), CELLAR_ETOOBIG);
    cellar_error_clear(&err);
    CHECK_EQ(budget_check_whole(-1, 1, "negative", &err), CELLAR_ETOOBIG);
    budget_set_whole(0);
    CHECK_EQ(budget_whole(), BUDGET_DEFAULT_BYTES);
    budget_set_whole(was);
}
