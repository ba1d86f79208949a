/* storage/hdf5/h5_stream.c on files written by h5py and treedata: the streamed
 * bytes must be exactly the string h5py reads, in pieces of at most the
 * piece size (a string of 2.5 MiB crosses several 1 MiB pieces), and the
 * stream must report that it streamed (0) rather than "not handled here"
 * (CELLAR_EINVAL, the fallback to libhdf5's read).  trees_load with stream set on the
 * treedata file must parse the obst JSON while streaming it (streamed = 1),
 * so a silent fallback to the libhdf5 read fails here.
 *
 * The fixtures are written at test time by the test venv's Python
 * (CELLAR_TEST_PYTHON, else .venv/bin/python, `make venv`), as the files
 * cellar serves are; without it this test fails. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "storage/hdf5/h5.h"
#include "storage/hdf5/h5_stream.h"
#include "storage/node.h"
#include "storage/trees/trees.h"
#include "tests/unit/py_fixture.h"
#include "tests/unit/unit.h"

enum { PIECE = 1 << 20 };

static const char fixture_py[] =
    "import sys, json, h5py, numpy as np, networkx as nx, pandas as pd, treedata as td\n"
    "d = sys.argv[1]\n"
    "big = ''.join('{\"n%d\": \"caf\\u00e9 \\u2603 %d\"}, ' % (i, i * 7) for i in range(110000))\n"
    "assert len(big.encode()) > 2 * 2**20 + 2**19\n"
    "small = '{\"t\": {\"edges\": {}, \"nodes\": {\"x\": {}}}}'\n"
    "with h5py.File(d + '/strings.h5', 'w') as f:\n"
    "    f['big'] = big\n"
    "    f['small'] = small\n"
    "    f.create_dataset('one', data=[small], dtype=h5py.string_dtype())\n"
    "    f['fixed'] = np.bytes_(b'not a vlen string')\n"
    "    f.create_dataset('chunked', data=[small], dtype=h5py.string_dtype(), chunks=(1,),\n"
    "                     maxshape=(None,))\n"
    "    f['number'] = 3.5\n"
    "for name, s in (('big', big), ('small', small)):\n"
    "    open(d + '/' + name + '.txt', 'wb').write(s.encode())\n"
    "g = nx.DiGraph()\n"
    "for i in range(1, 12000):\n"
    "    g.add_edge('n%d' % ((i - 1) // 2), 'n%d' % i, length=i / 7)\n"
    "for v in g.nodes:\n"
    "    g.nodes[v]['label'] = 'node \\u00e9 ' + v\n"
    "t = td.TreeData(X=np.zeros((2, 1), np.float32), obs=pd.DataFrame(index=['n1', 'n2']),\n"
    "                obst={'lineage': g}, label=None, alignment='subset', allow_overlap=True)\n"
    "t.write_h5td(d + '/tree.h5td')\n"
    "with h5py.File(d + '/tree.h5td', 'r') as f:\n"
    "    s = f['obst'][()]\n"
    "open(d + '/obst.txt', 'wb').write(s if isinstance(s, bytes) else s.encode())\n"
    "assert len(open(d + '/obst.txt', 'rb').read()) > 2**20\n"
    "open(d + '/n_nodes.txt', 'w').write(str(g.number_of_nodes()))\n";

static char hs_dir[256];

static int hs_fixtures(void)
{
    static int state; /* 0 not tried, 1 written, -1 failed */
    if (state)
        return state;
    h5_library_init();
    state = py_fixture_run("h5stream-test", fixture_py, hs_dir, sizeof hs_dir) == 0 ? 1 : -1;
    return state;
}

static char *read_file_all(const char *name, size_t *len)
{
    char path[400];
    snprintf(path, sizeof path, "%s/%s", hs_dir, name);
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc(n > 0 ? (size_t)n + 1 : 1); /* NUL-terminated for strtol */
    if (buf && n > 0 && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    if (buf)
        buf[n > 0 ? n : 0] = '\0';
    fclose(f);
    *len = n > 0 ? (size_t)n : 0;
    return buf;
}

typedef struct collected {
    char *data;
    size_t len, cap;
    int pieces;
    size_t largest;
} collected;

static int collect(void *ctx, const char *data, size_t len, cellar_error *err)
{
    (void)err;
    collected *c = ctx;
    if (c->len + len > c->cap) {
        size_t cap = (c->len + len) * 2;
        char *p = realloc(c->data, cap);
        if (!p)
            return CELLAR_ENOMEM;
        c->data = p;
        c->cap = cap;
    }
    memcpy(c->data + c->len, data, len);
    c->len += len;
    c->pieces++;
    if (len > c->largest)
        c->largest = len;
    return 0;
}

/* Streams `dset` of `file` and compares it with the text file `expect`. */
static void check_streamed(const char *file, const char *dset, const char *expect,
                           int min_pieces)
{
    char path[400];
    snprintf(path, sizeof path, "%s/%s", hs_dir, file);
    size_t want_len = 0;
    char *want = read_file_all(expect, &want_len);
    CHECK(want != NULL);
    collected c = {0};
    cellar_error err;
    cellar_error_clear(&err);
    int rc = h5_stream_vlen_string(path, dset, H5P_DEFAULT, PIECE, collect, &c, &err);
    if (rc)
        fprintf(stderr, "streaming %s %s: %s\n", file, dset, err.detail);
    CHECK_EQ(rc, 0); /* streamed, not "not handled here" */
    CHECK_EQ(c.len, want_len);
    CHECK(want && c.len == want_len && memcmp(c.data, want, want_len) == 0);
    CHECK(c.pieces >= min_pieces);
    CHECK(c.largest <= PIECE);
    free(c.data);
    free(want);
}

/* A dataset the stream does not read: CELLAR_EINVAL and nothing sunk. */
static void check_not_handled(const char *dset)
{
    char path[400];
    snprintf(path, sizeof path, "%s/strings.h5", hs_dir);
    collected c = {0};
    cellar_error err;
    cellar_error_clear(&err);
    CHECK_EQ(h5_stream_vlen_string(path, dset, H5P_DEFAULT, PIECE, collect, &c, &err), CELLAR_EINVAL);
    CHECK_EQ(c.pieces, 0);
    free(c.data);
}

void test_h5_stream_h5py_strings(void)
{
    CHECK_EQ(hs_fixtures(), 1);
    if (hs_fixtures() != 1)
        return;
    check_streamed("strings.h5", "/big", "big.txt", 3);
    check_streamed("strings.h5", "/small", "small.txt", 1);
    check_streamed("strings.h5", "/one", "small.txt", 1);
    check_streamed("tree.h5td", "/obst", "obst.txt", 2);
    check_not_handled("/fixed");
    check_not_handled("/chunked");
    check_not_handled("/number");
    check_not_handled("/absent");

    /* The tree loader takes the streaming path for treedata's file. */
    char path[400];
    snprintf(path, sizeof path, "%s/tree.h5td", hs_dir);
    size_t nlen = 0;
    char *ntext = read_file_all("n_nodes.txt", &nlen);
    long want_nodes = ntext ? strtol(ntext, NULL, 10) : -1;
    free(ntext);
    node *root = NULL;
    cellar_error err;
    cellar_error_clear(&err);
    CHECK_EQ(h5_open(path, &root, &err), 0);
    if (!root)
        return; /* the files stay for a look */
    trees_loaded *t = NULL;
    CHECK_EQ(trees_load(root, "obst", 1, &t, &err), 0);
    if (t) {
        CHECK_EQ(t->streamed, 1);
        const tree_index *ti = tree_forest_get(t->forest, "lineage");
        CHECK(ti != NULL);
        if (ti) {
            CHECK_EQ(tree_index_node_count(ti), want_nodes);
            int32_t v = tree_index_find(ti, "n11998", 6);
            CHECK(v >= 0);
            if (v >= 0)
                CHECK_STR_EQ(tree_index_attrs(ti, v), "{\"label\":\"node \xc3\xa9 n11998\"}");
        }
    }
    trees_free(t);
    /* Without streaming the same tree is read whole. */
    t = NULL;
    CHECK_EQ(trees_load(root, "obst", 0, &t, &err), 0);
    if (t)
        CHECK_EQ(t->streamed, 0);
    trees_free(t);
    node_tree_free(root);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", hs_dir);
    CHECK_EQ(system(cmd), 0);
}
