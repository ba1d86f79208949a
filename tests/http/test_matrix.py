"""Matrix routes: X, layers, obsm, varm, obsp, varp, raw, under the root and
/mod/{mod}; every dtype, dense and sparse (CSR, CSC, legacy h5sparse,
unsigned and 64-bit indices), compressed HDF5 (gzip, lzf), every selection
form, json / npy / bin / csv, and the CSR column index (before and after it
is ready, across a restart, invalidated by a replaced file).

Each answer is compared with what anndata / mudata read from the same file.
"""

from __future__ import annotations

import io
import json
import shutil
import time

import numpy as np
import pytest
import scipy.sparse as sp

import matrix_writers as mw
from conftest import assert_json, assert_problem, store_path


# ------------------------------------------------------------ fixtures
@pytest.fixture(scope="session")
def mroot(tmp_path_factory):
    root = tmp_path_factory.mktemp("matrix")
    names = mw.write_all(root)
    return root, names


@pytest.fixture(scope="session")
def msrv(mroot, server_factory, tmp_path_factory):
    root, _ = mroot
    cache = tmp_path_factory.mktemp("cix")
    return server_factory(root, "--cache-dir", str(cache))


@pytest.fixture(scope="session")
def mref(mroot):
    root, _ = mroot
    cache = {}

    def read(name):
        if name not in cache:
            cache[name] = mw.read_reference(root / name)
        return cache[name]
    return read


# ------------------------------------------------------------ helpers
def as_array(values, dtype):
    """JSON values -> numpy: null becomes NaN (the writer's NaN and inf)."""
    dt = np.dtype(dtype)
    if dt.kind == "f":
        return np.array([[np.nan if v is None else v for v in row] for row in values]
                        if values and isinstance(values[0], list) else
                        [np.nan if v is None else v for v in values],
                        dtype="float64").astype(dt)  # shortest text at the value's width
    return np.array(values, dtype=dt)


def finite_or_nan(a):
    a = np.array(a)
    if a.dtype.kind == "f":
        a[~np.isfinite(a)] = np.nan
    return a


def fetch(srv, path, fmt, **params):
    """The answer as a numpy array, in one format."""
    if fmt == "json":
        body = assert_json(srv.get(path, **params))
        assert body["layout"] == "dense", body
        data = body["data"]
        arr = as_array(data, body["dtype"])
        if len(body["shape"]) == 2:
            arr = arr.reshape(body["shape"])
        return arr, body
    r = srv.get(path, format=fmt, **params)
    assert r.status_code == 200, r.text[:500]
    if fmt == "npy":
        assert r.headers["Content-Type"] == "application/x-npy"
        arr = np.load(io.BytesIO(r.content), allow_pickle=False)
    else:
        assert r.headers["Content-Type"] == "application/octet-stream"
        dt = np.dtype(r.headers["X-Dtype"])
        shape = tuple(int(x) for x in r.headers["X-Shape"].split(",") if x)
        arr = np.frombuffer(r.content, dtype=dt.newbyteorder("<")).reshape(shape)
    assert r.headers["X-Shape"] == ",".join(str(s) for s in arr.shape)
    assert r.headers["X-Dtype"] == str(arr.dtype)
    return arr, r


def check(srv, path, expected, fmt="json", **params):
    got, _ = fetch(srv, path, fmt, **params)
    expected = np.asarray(expected)
    assert got.shape == expected.shape, (got.shape, expected.shape)
    if fmt == "json":
        np.testing.assert_array_equal(got, finite_or_nan(expected) if expected.dtype.kind == "f"
                                      else expected)
    else:
        assert got.dtype == expected.dtype, (got.dtype, expected.dtype)
        np.testing.assert_array_equal(got, expected)
    return got


class CSR:
    """A CSR answer, densified by hand (dtype kept, duplicates kept apart)."""

    def __init__(self, body):
        assert body["layout"] == "csr"
        self.shape = tuple(body["shape"])
        self.dtype = np.dtype(body["dtype"])
        self.body = body

    def toarray(self):
        b = self.body
        data = np.array([np.nan if v is None else v for v in b["data"]],
                        dtype="float64" if self.dtype.kind == "f" else self.dtype)
        data = data.astype(self.dtype)
        out = np.zeros(self.shape, dtype=self.dtype)
        indptr, indices = b["indptr"], b["indices"]
        assert len(indptr) == self.shape[0] + 1 and indptr[0] == 0
        assert indptr[-1] == len(indices) == len(data)
        for i in range(self.shape[0]):
            seg = indices[indptr[i]:indptr[i + 1]]
            assert seg == sorted(seg), (i, seg)   # columns ascending within each row
            for k in range(indptr[i], indptr[i + 1]):
                out[i, indices[k]] = data[k]
        return out


def csr_from_json(body):
    return CSR(body)


# ------------------------------------------------------------ dense
FORMATS = ["json", "npy", "bin"]

def lzf(label):
    """LZF stores are ordinary cases: the binary links liblzf so Debian's
    hdf5-plugin-lzf loads (see the Makefile)."""
    return label


DENSE_STORES = [f"dense-{f}" for f in mw.FORMATS] + ["gzip-h5", "lzf-h5"]
SPARSE_STORES = [f"sparse-{f}" for f in mw.FORMATS] + ["sparse-gzip-h5", "sparse-lzf-h5"]


@pytest.mark.parametrize("label", [lzf(x) for x in DENSE_STORES])
@pytest.mark.parametrize("dtype", mw.DTYPES)
@pytest.mark.parametrize("fmt", FORMATS)
def test_dense_dtypes(msrv, mroot, mref, label, dtype, fmt):
    name = mroot[1][label]
    want = np.asarray(mref(name).layers[dtype])
    assert want.dtype == np.dtype(dtype)
    check(msrv, store_path(name, "layers", dtype), want, fmt)
    check(msrv, store_path(name, "layers", dtype), want[3:9, [4, 0, 4]], fmt,
          rows="3:9", cols="4,0,4")


def test_dense_x_csv(msrv, mroot, mref):
    name = mroot[1]["dense-h5"]
    r = msrv.get(store_path(name, "layers", "int32"), format="csv", rows="0:3")
    assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/csv")
    lines = r.text.split("\r\n")
    assert lines[-1] == "" and len(lines) == 4
    want = np.asarray(mref(name).layers["int32"])[:3]
    got = np.array([[int(x) for x in line.split(",")] for line in lines[:3]])
    np.testing.assert_array_equal(got, want)


SELECTIONS = [
    ({"rows": "2:10"}, np.s_[2:10], np.s_[:]),
    ({"rows": "::3", "cols": "1:11:4"}, np.s_[::3], np.s_[1:11:4]),
    ({"rows": "-1:-20:-3"}, np.s_[-1:-20:-3], np.s_[:]),
    ({"rows": "7,3,3,0,-1", "cols": "11,0"}, [7, 3, 3, 0, -1], [11, 0]),
    ({"rows": "100:200"}, np.s_[100:200], np.s_[:]),
    ({"cols": "5"}, np.s_[:], [5]),
]


@pytest.mark.parametrize("label", [f"dense-{f}" for f in mw.FORMATS])
@pytest.mark.parametrize("params,rsel,csel", SELECTIONS)
@pytest.mark.parametrize("fmt", FORMATS)
def test_dense_selections(msrv, mroot, mref, label, params, rsel, csel, fmt):
    name = mroot[1][label]
    X = np.asarray(mref(name).X)
    check(msrv, store_path(name, "X"), X[rsel][:, csel], fmt, **params)


def test_names_and_post(msrv, mroot, mref):
    name = mroot[1]["dense-h5"]
    a = mref(name)
    X = np.asarray(a.X)
    obs = ["细胞 06", "cell010", "cell000"]
    want = X[[a.obs_names.get_loc(o) for o in obs]][:, [2, 9]]
    got, body = fetch(msrv, store_path(name, "X"), "json", obs_names=obs, var_names="G2,G9")
    np.testing.assert_array_equal(got, finite_or_nan(want))
    assert body["rows"] == [6, 10, 0] and body["cols"] == [2, 9]
    # A name holding a comma only fits in a POST body.
    r = msrv.post(store_path(name, "X"), {"obs_names": ["cell,05", "cell001"], "cols": [3, 1]})
    body = assert_json(r)
    np.testing.assert_array_equal(as_array(body["data"], "float32"),
                                  finite_or_nan(X[[5, 1]][:, [3, 1]]))
    r = msrv.post(store_path(name, "X"), {"rows": "0:4"}, format="npy")
    assert r.status_code == 200
    np.testing.assert_array_equal(np.load(io.BytesIO(r.content)), X[:4])


def test_dtype_safe(msrv, mroot, mref):
    name = mroot[1]["dense-h5"]
    want = np.asarray(mref(name).layers["float16"])
    r = msrv.get(store_path(name, "layers", "float16"), format="bin", dtype="safe")
    assert r.headers["X-Dtype"] == "float32"
    got = np.frombuffer(r.content, dtype="<f4").reshape(N := want.shape)
    assert got.shape == N
    np.testing.assert_array_equal(got, want.astype("float32"))
    r = msrv.get(store_path(name, "layers", "int64"), format="bin", dtype="safe")
    assert r.headers["X-Dtype"] == "int64"


def test_obsm_varm_obsp(msrv, mroot, mref):
    name = mroot[1]["dense-h5"]
    a = mref(name)
    for fmt in FORMATS:
        check(msrv, store_path(name, "obsm", "X_umap"), a.obsm["X_umap"], fmt)
        check(msrv, store_path(name, "obsm", "X_pca"), a.obsm["X_pca"][5:9, 1:3], fmt,
              rows="5:9", cols="1:3")
        check(msrv, store_path(name, "varm", "PCs"), a.varm["PCs"][[3, 1]], fmt,
              var_names="G3,G1")
        check(msrv, store_path(name, "obsp", "dense_pairs"), a.obsp["dense_pairs"][:3, [0, 39]],
              fmt, rows="0:3", cols="0,39")
        check(msrv, store_path(name, "obsp", "distances"),
              mw.dense(a.obsp["distances"])[[0, 4, 9]], fmt, obs_names="cell000,cell004,cell009",
              layout="dense")
    # obsp is CSR rows by default in JSON.
    body = assert_json(msrv.get(store_path(name, "obsp", "distances"), rows="0:10"))
    np.testing.assert_array_equal(csr_from_json(body).toarray(),
                                  mw.dense(a.obsp["distances"])[:10])
    body = assert_json(msrv.get(store_path(name, "varp", "corr"), cols="0,3,3"))
    np.testing.assert_array_equal(csr_from_json(body).toarray(),
                                  mw.dense(a.varp["corr"])[:, [0, 3, 3]])


def test_raw(msrv, mroot, mref):
    name = mroot[1]["dense-h5"]
    raw = mref(name).raw
    for fmt in FORMATS:
        check(msrv, store_path(name, "raw", "X"), mw.dense(raw.X), fmt)
        check(msrv, store_path(name, "raw", "X"), mw.dense(raw.X)[:, [14, 0]], fmt,
              var_names="G14,G0")
        check(msrv, store_path(name, "raw", "varm", "loadings"), raw.varm["loadings"], fmt)
    body = assert_json(msrv.get(store_path(name, "raw", "X"), layout="csr", rows="3,1"))
    np.testing.assert_array_equal(csr_from_json(body).toarray(), mw.dense(raw.X)[[3, 1]])


# ------------------------------------------------------------ sparse
SPARSE_LAYERS = ["csc", "csr64", "csr_u", "csc_u", "empty"]

SPARSE_SELECTIONS = [
    ({}, np.s_[:], np.s_[:]),
    ({"rows": "1:9"}, np.s_[1:9], np.s_[:]),
    ({"rows": "30,1,4,4,0"}, [30, 1, 4, 4, 0], np.s_[:]),
    ({"cols": "7,2,3,3"}, np.s_[:], [7, 2, 3, 3]),
    ({"rows": "::-5", "cols": "0:12:5"}, np.s_[::-5], np.s_[0:12:5]),
    ({"var_names": "G3", "rows": "0:20"}, np.s_[0:20], [3]),
]


@pytest.mark.parametrize("label", [lzf(x) for x in SPARSE_STORES])
@pytest.mark.parametrize("layer", ["X"] + SPARSE_LAYERS)
@pytest.mark.parametrize("params,rsel,csel", SPARSE_SELECTIONS)
def test_sparse(msrv, mroot, mref, label, layer, params, rsel, csel):
    name = mroot[1][label]
    a = mref(name)
    m = a.X if layer == "X" else a.layers[layer]
    if layer in ("csr_u", "csc_u") and label == "sparse-h5":
        assert sp.issparse(m)  # rewritten with unsigned indices
    full = mw.dense(m)
    want = full[rsel][:, csel]
    path = store_path(name, "X") if layer == "X" else store_path(name, "layers", layer)
    for fmt in FORMATS:
        check(msrv, path, want, fmt, **params)
    body = assert_json(msrv.get(path, layout="csr", **params))
    assert body["dtype"] == str(full.dtype)
    np.testing.assert_array_equal(csr_from_json(body).toarray(), want)
    assert body["nnz"] == np.count_nonzero(want)


def test_legacy_h5sparse(msrv, mroot, mref):
    name = mroot[1]["sparse-h5"]
    # The same layer, written the current way in the gzip copy.
    want = mw.dense(mref(mroot[1]["sparse-gzip-h5"]).layers["legacy"])
    for fmt in FORMATS:
        check(msrv, store_path(name, "layers", "legacy"), want, fmt)
        check(msrv, store_path(name, "layers", "legacy"), want[:, [5, 1]], fmt, cols="5,1")
    body = assert_json(msrv.get(store_path(name, "layers", "legacy"), rows="2:5", layout="csr"))
    np.testing.assert_array_equal(csr_from_json(body).toarray(), want[2:5])


def test_mudata(msrv, mroot, mref):
    name = mroot[1]["mudata-h5"]
    m = mref(name)
    rna, prot = m.mod["rna"], m.mod["prot"]
    for fmt in FORMATS:
        check(msrv, store_path(name, "mod", "rna", "X"), mw.dense(rna.X)[:, [3]], fmt,
              var_names="G3")
        check(msrv, store_path(name, "mod", "prot", "layers", "uint16"),
              np.asarray(prot.layers["uint16"])[2:4], fmt, rows="2:4")
        check(msrv, store_path(name, "mod", "prot", "obsm", "X_umap"), prot.obsm["X_umap"], fmt)


# ------------------------------------------------------------ errors
def test_errors(msrv, mroot):
    name = mroot[1]["dense-h5"]
    sname = mroot[1]["sparse-h5"]
    x = store_path(name, "X")
    assert_problem(msrv.get(x, rows="abc"), 400, detail_contains="rows")
    assert_problem(msrv.get(x, rows="0:2", obs_names="cell000"), 400)
    assert_problem(msrv.get(x, layout="diagonal"), 400)
    assert_problem(msrv.get(x, layout="csr"), 400)
    assert_problem(msrv.get(x, dtype="tiny"), 400)
    assert_problem(msrv.get(x, colums="1"), 400)
    assert_problem(msrv.get(x, rows="40"), 416)
    assert_problem(msrv.get(x, cols="0,12"), 416)
    assert_problem(msrv.get(x, obs_names="nope"), 404)
    assert_problem(msrv.get(store_path(name, "layers", "nope")), 404)
    assert_problem(msrv.get(store_path(name, "obsm", "frame")), 406)
    assert_problem(msrv.get(store_path(sname, "X"), layout="csr", format="npy"), 406)
    assert_problem(msrv.get(store_path(name, "obsm", "X_umap"), rows="0:2", var_names="G1"),
                   400)


def test_over_limit(mroot, server_factory):
    root, names = mroot
    srv = server_factory(root, "--max-response-bytes", "2000")
    name = names["dense-h5"]
    body = assert_problem(srv.get(store_path(name, "X")), 413)
    assert "rows=0:" in body["detail"]
    got = srv.get(store_path(name, "X"), rows="0:2", format="npy")
    assert got.status_code == 200
    assert_problem(srv.get(store_path(names["sparse-h5"], "X"), layout="csr"), 413)


# ------------------------------------------------------------ column index
def column_state(r):
    return r.headers.get("X-Column-Index", "").split(";")[0]


def wait_ready(srv, path, **params):
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        r = srv.get(path, **params)
        assert r.status_code == 200, r.text
        if column_state(r) == "ready":
            return r
        time.sleep(0.05)
    pytest.fail("the column index never became ready")


def gene_column(srv, path, gene, fmt="npy"):
    r = srv.get(path, var_names=gene, format=fmt)
    assert r.status_code == 200, r.text
    return np.load(io.BytesIO(r.content)), column_state(r)


def test_column_index_lifecycle(tmp_path, server_factory, mroot):
    src_root, names = mroot
    root, cache = tmp_path / "root", tmp_path / "cache"
    cache.mkdir()
    (root / "matrix").mkdir(parents=True)
    shutil.copy(src_root / names["sparse-gzip-h5"], root / "matrix" / "genes.h5ad")
    a = mw.read_reference(root / "matrix" / "genes.h5ad")
    path = store_path("matrix/genes.h5ad", "X")
    srv = server_factory(root, "--cache-dir", str(cache))
    summary = srv.get(store_path("matrix/genes.h5ad")).json()
    assert summary["X"]["column_index"] == {"state": "absent", "bytes": 0}
    got, state = gene_column(srv, path, "G3")
    assert state in ("building", "ready")
    np.testing.assert_array_equal(got, mw.dense(a[:, "G3"].X))
    ready = wait_ready(srv, path, var_names="G3")
    index_bytes = int(ready.headers["X-Column-Index"].split("bytes=")[1])
    assert index_bytes > 64
    summary = srv.get(store_path("matrix/genes.h5ad")).json()
    assert summary["X"]["column_index"] == {"state": "ready", "bytes": index_bytes}
    metrics = srv.get("/metrics").text
    held = [line for line in metrics.splitlines() if line.startswith("cellar_cache_bytes ")]
    assert held and int(held[0].split()[1]) >= index_bytes, held
    for gene in ["G3", "G0", "G2", "G11"]:   # G2 is an empty column
        got, state = gene_column(srv, path, gene)
        assert state == "ready"
        np.testing.assert_array_equal(got, mw.dense(a[:, gene].X))
    files = list(cache.iterdir())
    assert len(files) == 1 and files[0].suffix == ".cix", files
    srv.stop()

    # A restart reuses the saved index at the first request.
    srv2 = server_factory(root, "--cache-dir", str(cache))
    got, state = gene_column(srv2, path, "G5")
    assert state == "ready"
    np.testing.assert_array_equal(got, mw.dense(a[:, "G5"].X))
    body = assert_json(srv2.get(path, var_names="G5,G7", layout="csr"))
    np.testing.assert_array_equal(csr_from_json(body).toarray(), mw.dense(a[:, ["G5", "G7"]].X))

    # A replaced file has another identity: its old index is not used.
    time.sleep(0.05)
    tmp = root / "matrix" / "genes.h5ad.new"
    shutil.copy(src_root / names["sparse-h5"], tmp)
    tmp.replace(root / "matrix" / "genes.h5ad")
    b = mw.read_reference(root / "matrix" / "genes.h5ad")
    got, state = gene_column(srv2, path, "G5")
    assert state in ("building", "ready")
    np.testing.assert_array_equal(got, mw.dense(b[:, "G5"].X))
    wait_ready(srv2, path, var_names="G5")
    got, _ = gene_column(srv2, path, "G5")
    np.testing.assert_array_equal(got, mw.dense(b[:, "G5"].X))
    assert len(list(cache.iterdir())) == 2


def test_column_index_without_cache_dir(mroot, server_factory):
    root, names = mroot
    srv = server_factory(root)
    name = names["sparse-gzip-h5"]
    a = mw.read_reference(root / name)
    path = store_path(name, "layers", "csr64")
    wait_ready(srv, path, cols="4")
    for cols in ["4", "0,11,4", "2"]:
        want = mw.dense(a.layers["csr64"])[:, [int(c) for c in cols.split(",")]]
        check(srv, path, want, "npy", cols=cols)
        check(srv, path, want[5:30], "json", cols=cols, rows="5:30")


# ------------------------------------------------------------ uns
def test_uns(msrv, mroot, mref):
    name = mroot[1]["dense-h5"]
    uns = mref(name).uns
    body = assert_json(msrv.get(store_path(name, "uns")))
    assert body["title"] == uns["title"] and body["n"] == uns["n"] == 7
    assert body["pi"] == uns["pi"] and body["flag"] is True
    assert body["small"] == uns["small"].tolist()
    assert body["names"] == list(uns["names"])
    assert body["nested"] == {"colors": list(uns["nested"]["colors"]),
                              "params": {"k": 15, "method": "umap"}}
    # A large array is summarized in the whole, given whole by its path.
    assert body["big"] == {"shape": [5000], "dtype": "float64", "encoding": "array",
                           "summarized": True}
    big = assert_json(msrv.get(store_path(name, "uns", "big")))
    np.testing.assert_array_equal(np.array(big), uns["big"])
    assert assert_json(msrv.get(store_path(name, "uns", "nested", "params"))) == \
        {"k": 15, "method": "umap"}
    assert assert_json(msrv.get(store_path(name, "uns", "nested", "params", "k"))) == 15
    assert_problem(msrv.get(store_path(name, "uns", "nope")), 404)
    assert_problem(msrv.get(store_path(name, "uns"), rows="1"), 400)
    assert_problem(msrv.get(store_path(name, "uns"), format="npy"), 406)


def test_uns_limit_and_mod(mroot, server_factory, mref):
    root, names = mroot
    srv = server_factory(root, "--max-response-bytes", "4000")
    name = names["dense-h5"]
    assert_problem(srv.get(store_path(name, "uns", "big")), 413)
    mname = names["mudata-h5"]
    body = assert_json(srv.get(store_path(mname, "mod", "prot", "uns", "nested", "colors")))
    assert body == list(mref(mname).mod["prot"].uns["nested"]["colors"])
