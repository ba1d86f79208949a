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
import struct
import time
import zipfile

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

import matrix_writers as mw
from compare import (check_frame_csv, check_frame_json, decode_bin, decode_npy,
                     frame_encodings, indexer)
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


# ------------------------------------------------------------ binary CSR (bin, npz)
def align8(n):
    return (n + 7) // 8 * 8


def decode_csr_bin(r):
    """A layout=csr&format=bin answer as scipy's csr_matrix, by the documented
    layout: indptr | indices | data, each section starting at a multiple of 8."""
    assert r.status_code == 200, r.text[:500]
    assert r.headers["Content-Type"] == "application/octet-stream"
    h = r.headers
    shape = tuple(int(x) for x in h["X-Shape"].split(","))
    nnz = int(h["X-Nnz"])
    ipd = np.dtype(h["X-Indptr-Dtype"]).newbyteorder("<")
    ixd = np.dtype(h["X-Indices-Dtype"]).newbyteorder("<")
    vd = np.dtype(h["X-Dtype"]).newbyteorder("<")
    body = r.content
    ix_off = align8((shape[0] + 1) * ipd.itemsize)
    v_off = align8(ix_off + nnz * ixd.itemsize)
    assert len(body) == v_off + nnz * vd.itemsize
    assert body[(shape[0] + 1) * ipd.itemsize:ix_off] == b"\0" * (ix_off - (shape[0] + 1) * ipd.itemsize)
    indptr = np.frombuffer(body, ipd, shape[0] + 1, 0)
    indices = np.frombuffer(body, ixd, nnz, ix_off)
    data = np.frombuffer(body, vd, nnz, v_off)
    return sp.csr_matrix((data, indices, indptr), shape=shape)


def decode_npz(r):
    assert r.status_code == 200, r.text[:500]
    assert r.headers["Content-Type"] == "application/zip"
    m = sp.load_npz(io.BytesIO(r.content))
    assert m.format == "csr"
    body = r.content
    with zipfile.ZipFile(io.BytesIO(body)) as zf:
        assert zf.testzip() is None   # CRC-32s
        for info in zf.infolist():
            assert info.compress_type == zipfile.ZIP_STORED
            # every array's data starts at a multiple of 64 (read in place)
            at = info.header_offset
            name_len, extra_len = struct.unpack("<HH", body[at + 26:at + 30])
            npy = at + 30 + name_len + extra_len
            assert body[npy:npy + 6] == b"\x93NUMPY"
            (hlen,) = struct.unpack("<H", body[npy + 8:npy + 10])
            assert (npy + 10 + hlen) % 64 == 0, info.filename
    with np.load(io.BytesIO(r.content), allow_pickle=False) as z:
        assert sorted(z.files) == ["data", "format", "indices", "indptr", "shape"]
        assert z["indptr"].dtype == np.dtype(r.headers["X-Indptr-Dtype"])
        assert z["indices"].dtype == np.dtype(r.headers["X-Indices-Dtype"])
    return m


CSR_DECODERS = {"bin": decode_csr_bin, "npz": decode_npz}


def as_csr(m):
    """scipy's CSR of a sparse matrix, its index arrays cast to int64 first
    (scipy's indexing refuses unsigned ones)."""
    m = m.copy()
    m.indices = m.indices.astype(np.int64)
    m.indptr = m.indptr.astype(np.int64)
    return sp.csr_matrix(m)


def assert_csr_equal(got, want, dtype):
    """Equal to scipy's CSR of the selection with each row's columns
    ascending: indptr, indices, data and shape."""
    want = sp.csr_matrix(want)
    want.sort_indices()
    assert got.shape == want.shape
    assert got.dtype == dtype, (got.dtype, dtype)
    np.testing.assert_array_equal(got.indptr, want.indptr)
    np.testing.assert_array_equal(got.indices, want.indices)
    np.testing.assert_array_equal(got.data, want.data)


@pytest.mark.parametrize("label", SPARSE_STORES)
@pytest.mark.parametrize("layer", ["X"] + SPARSE_LAYERS)
@pytest.mark.parametrize("params,rsel,csel", SPARSE_SELECTIONS)
@pytest.mark.parametrize("fmt", ["bin", "npz"])
def test_csr_binary(msrv, mroot, mref, label, layer, params, rsel, csel, fmt):
    name = mroot[1][label]
    a = mref(name)
    m = a.X if layer == "X" else a.layers[layer]
    sub = as_csr(m)[rsel][:, csel]
    path = store_path(name, "X") if layer == "X" else store_path(name, "layers", layer)
    r = msrv.get(path, layout="csr", format=fmt, **params)
    got = CSR_DECODERS[fmt](r)
    assert_csr_equal(got, sub, m.dtype)
    assert r.headers["X-Indices-Dtype"] == "int32" and r.headers["X-Indptr-Dtype"] == "int32"
    assert int(r.headers["X-Nnz"]) == sub.nnz
    assert r.headers["X-Dtype"] == str(m.dtype)


def test_csr_binary_obsp_and_mudata(msrv, mroot, mref):
    name = mroot[1]["dense-h5"]
    a = mref(name)
    got = decode_npz(msrv.get(store_path(name, "obsp", "distances"), format="npz",
                              rows="0:10"))
    assert_csr_equal(got, as_csr(a.obsp["distances"])[0:10], a.obsp["distances"].dtype)
    got = decode_csr_bin(msrv.get(store_path(name, "raw", "X"), layout="csr", format="bin",
                                  rows="3,1"))
    assert_csr_equal(got, as_csr(a.raw.X)[[3, 1]], a.raw.X.dtype)
    name = mroot[1]["mudata-h5"]
    rna = mref(name).mod["rna"]
    got = decode_npz(msrv.get(store_path(name, "mod", "rna", "X"), format="npz", rows="2:30"))
    assert_csr_equal(got, as_csr(rna.X)[2:30], rna.X.dtype)


def test_csr_binary_errors(mroot, msrv, server_factory):
    root, names = mroot
    name, sname = names["dense-h5"], names["sparse-h5"]
    # npz holds a sparse matrix: dense sources and layout=dense are 406.
    assert_problem(msrv.get(store_path(name, "X"), format="npz"), 406, detail_contains="npz")
    assert_problem(msrv.get(store_path(sname, "X"), format="npz", layout="dense"), 406)
    assert_problem(msrv.get(store_path(sname, "X"), layout="csr", format="csv"), 406)
    assert_problem(msrv.get(store_path(sname, "X"), layout="csr", format="npy"), 406,
                   detail_contains="npz")
    # Bounded by --max-response-bytes like every answer.
    srv = server_factory(root, "--max-response-bytes", "2500")
    big = store_path(sname, "X")
    for fmt in ["bin", "npz"]:
        body = assert_problem(srv.get(big, layout="csr", format=fmt), 413)
        assert "rows=0:" in body["detail"]
        r = srv.get(big, layout="csr", format=fmt, rows="0:5")
        assert r.status_code == 200, r.text


def test_whole_rows_bytes(msrv, mroot, mref):
    """Whole-row selections (read in one piece per chunk) are numpy's bytes."""
    for label in DENSE_STORES:
        name = mroot[1][label]
        a = mref(name)
        want = np.ascontiguousarray(np.asarray(a.layers["float32"]))
        r = msrv.get(store_path(name, "layers", "float32"), format="bin")
        assert r.status_code == 200
        assert r.content == want.astype("<f4").tobytes()
        r = msrv.get(store_path(name, "layers", "int64"), format="bin", rows="7:29")
        assert r.content == np.asarray(a.layers["int64"])[7:29].astype("<i8").tobytes()
    name = mroot[1]["dense-h5"]
    umap = np.asarray(mref(name).obsm["X_umap"])
    r = msrv.get(store_path(name, "obsm", "X_umap"), format="bin")
    assert r.content == umap.astype(umap.dtype.newbyteorder("<")).tobytes()


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
    # layout=csr of a dense matrix is not possible for this element, as
    # format=npz is not: 406 (the OpenAPI description's data-dependent status)
    assert_problem(msrv.get(x, layout="csr"), 406, detail_contains="stored dense")
    assert_problem(msrv.get(x, dtype="tiny"), 400)
    assert_problem(msrv.get(x, colums="1"), 400)
    assert_problem(msrv.get(x, rows="40"), 416)
    assert_problem(msrv.get(x, cols="0,12"), 416)
    assert_problem(msrv.get(x, obs_names="nope"), 404)
    assert_problem(msrv.get(store_path(name, "layers", "nope")), 404)
    # A data frame in obsm is a data frame route: matrix parameters are not
    # possible for it (406, as the OpenAPI description says).
    assert_problem(msrv.get(store_path(name, "obsm", "frame"), cols="0"), 406,
                   detail_contains="cols")
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
    # obsm / varm data frames are bounded as obs is, with the same hint.
    body = assert_problem(srv.get(store_path(name, "obsm", "cells")), 413)
    assert "rows=0:" in body["detail"]
    body = assert_problem(srv.get(store_path(name, "varm", "genes"), format="csv"), 413)
    assert "rows" in body["detail"]
    got = srv.get(store_path(name, "obsm", "cells"), rows="0:3", columns="score,cluster")
    assert got.status_code == 200, got.text


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


@pytest.mark.parametrize("fmt", ["h5", "zarr3"])
def test_column_index_every_dtype(tmp_path, server_factory, fmt):
    """Whole gene columns answered from a ready column index, for CSR
    matrices of every dtype scipy stores (all but float16; integers at their
    extremes, NaN and inf, bool), equal to anndata's own read before and
    after the index is ready."""
    dtypes = [dt for dt in mw.DTYPES if dt != "float16"]
    rng = np.random.default_rng(mw.SEED + 40)
    a = mw.ad.AnnData(obs=pd.DataFrame(index=mw.obs_names()),
                      var=pd.DataFrame(index=mw.var_names()))
    for dt in dtypes:
        dense = mw._values(rng, dt, (mw.N_OBS, mw.N_VARS))
        zeroed = rng.random(dense.shape) < 0.6
        zeroed[0, :4] = False            # the extremes, NaN and inf stay
        dense[zeroed] = 0
        dense[:, 7] = 0                  # an empty column
        a.layers[dt] = sp.csr_matrix(dense)
    name = "dtypes.h5ad" if fmt == "h5" else "dtypes.zarr"
    if fmt == "h5":
        a.write_h5ad(tmp_path / name)
    else:
        with mw.ad.settings.override(zarr_write_format=3):
            a.write_zarr(tmp_path / name)
    ref = mw.read_reference(tmp_path / name)
    srv = server_factory(tmp_path)
    for dt in dtypes:
        path = store_path(name, "layers", dt)
        want = ref.layers[dt].toarray()
        check(srv, path, want[:, [3]], "npy", var_names="G3")
        wait_ready(srv, path, var_names="G3")
        for genes in ["G3", "G0,G7,G11", "G5,G5", "G1,G2"]:
            cols = [int(g[1:]) for g in genes.split(",")]
            check(srv, path, want[:, cols], "npy", var_names=genes)
            check(srv, path, want[:, cols], "bin", var_names=genes)


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


def test_column_index_over_the_bound_scans(mroot, server_factory):
    """--column-index-max-bytes: an index that would be larger is never
    built; gene columns are still right (by scanning) and say why."""
    root, names = mroot
    name = names["sparse-gzip-h5"]
    a = mw.read_reference(root / name)
    srv = server_factory(root, "--column-index-max-bytes", "64")
    path = store_path(name, "X")
    for _ in range(3):
        for gene in ["G3", "G2"]:
            got, state = gene_column(srv, path, gene)
            assert state == "over_limit"
            np.testing.assert_array_equal(got, mw.dense(a[:, gene].X))
    summary = srv.get(store_path(name)).json()
    assert summary["X"]["column_index"]["state"] == "over_limit"
    # Without the bound the same store builds its index.
    free = server_factory(root)
    wait_ready(free, path, var_names="G3")


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


# ------------------------------------------------------------ data frames in obsm / varm
# (element path, names parameter, the axis' names of the AnnData)
FRAME_ELEMENTS = [("obsm/cells", "obs_names"), ("varm/genes", "var_names"),
                  ("raw/varm/annot", "var_names")]


def zarr_frame_encodings(path, group: str) -> dict:
    """compare.frame_encodings for a zarr store (v2 or v3), read with zarr."""
    import zarr
    g = zarr.open_group(str(path), mode="r")[group]
    index_key = g.attrs["_index"]
    out = {}
    for key, member in g.members():
        attrs = member.attrs
        enc, na = attrs.get("encoding-type"), attrs.get("na-value")
        out["_index" if key == index_key else key] = (
            str(enc) if enc is not None else None, str(na) if na is not None else None)
    return out


@pytest.fixture(scope="session")
def fref(mroot, mref):
    """(data frame as anndata reads it, encodings on disk) of an element."""
    root, names = mroot
    cache = {}

    def get(label, element):
        key = (label, element)
        if key not in cache:
            name = names[label]
            a = mref(name)
            parts = element.split("/")
            owner = a.raw if parts[0] == "raw" else a
            df = getattr(owner, parts[-2])[parts[-1]]
            assert isinstance(df, pd.DataFrame), type(df)
            path = root / name
            enc = (zarr_frame_encodings(path, element) if name.endswith(".zarr")
                   else frame_encodings(path, element))
            cache[key] = (df, enc)
        return cache[key]
    return get


FRAME_STORES = [f"dense-{f}" for f in mw.FORMATS]
FRAME_SELECTIONS = [None, "2:9", "::-3", "7,0,0,3"]


@pytest.mark.parametrize("label", FRAME_STORES)
@pytest.mark.parametrize("element,names_param", FRAME_ELEMENTS)
@pytest.mark.parametrize("spec", FRAME_SELECTIONS)
def test_frame_in_m_json_csv(msrv, mroot, fref, label, element, names_param, spec):
    name = mroot[1][label]
    df, enc = fref(label, element)
    assert df.shape[1] == 11
    path = store_path(name, *element.split("/"))
    params = {"rows": spec} if spec else {}
    want = df.iloc[indexer(spec)] if spec else df
    check_frame_json(assert_json(msrv.get(path, **params)), want, enc)
    check_frame_json(assert_json(msrv.get(path, categorical="codes", **params)), want, enc,
                     categorical="codes")
    r = msrv.get(path, format="csv", **params)
    assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/csv"), r.text
    check_frame_csv(r.content.decode("utf-8"), want)
    r = msrv.get(path, format="csv", categorical="codes", **params)
    check_frame_csv(r.content.decode("utf-8"), want, categorical="codes")


@pytest.mark.parametrize("label", FRAME_STORES)
@pytest.mark.parametrize("element,names_param", FRAME_ELEMENTS)
def test_frame_in_m_binary_and_names(msrv, mroot, fref, label, element, names_param):
    name = mroot[1][label]
    df, enc = fref(label, element)
    path = store_path(name, *element.split("/"))
    for col in ["score", "count", "flag", "u8"]:
        want = df[col].to_numpy()
        got = decode_npy(msrv.get(path, columns=col, format="npy"))
        assert got.dtype == want.dtype, (col, got.dtype, want.dtype)
        np.testing.assert_array_equal(got, want)
        got = decode_bin(msrv.get(path, columns=col, format="bin", rows="5:1:-2"))
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want[5:1:-2])
    # A categorical's codes at their stored width.
    got = decode_npy(msrv.get(path, columns="cluster", categorical="codes", format="npy"))
    np.testing.assert_array_equal(got, df["cluster"].cat.codes.to_numpy())
    assert got.dtype.kind == "i"
    # Names of the element's axis (its index), columns in the asked order.
    names = [df.index[3], df.index[0], df.index[3]]
    cols = ["nint", "cluster", "label"]
    js = assert_json(msrv.get(path, columns=",".join(cols), **{names_param: names}))
    check_frame_json(js, df.loc[names, cols], enc)
    r = msrv.get(path, format="csv", columns=",".join(cols), **{names_param: names})
    check_frame_csv(r.content.decode("utf-8"), df.loc[names, cols])
    # POST: the same answer, and names holding a comma.
    body = {names_param: list(df.index[[5, 1]]), "columns": ["label", "nstr"]}
    js = assert_json(msrv.post(path, body))
    check_frame_json(js, df.iloc[[5, 1]][["label", "nstr"]], enc)


def test_frame_in_m_errors(msrv, mroot):
    name = mroot[1]["dense-h5"]
    cells = store_path(name, "obsm", "cells")
    genes = store_path(name, "varm", "genes")
    assert_problem(msrv.get(cells, var_names="G1"), 400, detail_contains="var_names")
    assert_problem(msrv.get(genes, obs_names="cell000"), 400, detail_contains="obs_names")
    # array parameters of a data frame, and frame parameters of an array: 406
    assert_problem(msrv.get(cells, layout="csr"), 406, detail_contains="data frame")
    assert_problem(msrv.get(cells, cols="0:2"), 406, detail_contains="cols")
    assert_problem(msrv.get(store_path(name, "obsm", "X_pca"), columns="a"), 406,
                   detail_contains="is an array")
    assert_problem(msrv.get(store_path(name, "obsm", "nope"), columns="a"), 404)
    assert_problem(msrv.get(cells, rows="0:2", obs_names="cell000"), 400)
    assert_problem(msrv.get(cells, categorical="both"), 400)
    assert_problem(msrv.get(cells, columns="nope"), 404, detail_contains="obsm/cells")
    assert_problem(msrv.get(cells, obs_names="nope"), 404)
    assert_problem(msrv.get(genes, var_names="G1,nope"), 404)
    assert_problem(msrv.get(cells, rows="40"), 416)
    assert_problem(msrv.get(cells, format="npy"), 406, detail_contains="one column")
    assert_problem(msrv.get(cells, format="bin", columns="label"), 406)
    assert_problem(msrv.get(cells, format="npy", columns="cluster"), 406,
                   detail_contains="categorical=codes")
    assert_problem(msrv.get(cells, format="newick"), 406)
    # The matrices next to them are still matrices.
    assert_problem(msrv.get(store_path(name, "obsm", "X_umap"), columns="a"), 406,
                   detail_contains="is an array")
    assert_problem(msrv.get(store_path(name, "obsm", "nope")), 404)


def test_frame_in_m_mudata_and_head(msrv, mroot, mref):
    name = mroot[1]["mudata-h5"]
    df = mref(name).mod["prot"].obsm["cells"]
    path = store_path(name, "mod", "prot", "obsm", "cells")
    js = assert_json(msrv.get(path, rows="0:6", columns="cluster,score,nbool"))
    check_frame_json(js, df.iloc[0:6][["cluster", "score", "nbool"]], None)
    assert_problem(msrv.get(path, columns="nope"), 404, detail_contains="modality 'prot'")
    r = msrv.head(path, rows="0:6")
    assert r.status_code == 200 and r.content == b""


# ------------------------------------------------------------ duplicate entries
DUP_STORES = [f"dup-{f}" for f in mw.FORMATS]


def dup_matrix(a, layer):
    return a.X if layer == "X" else a.layers[layer]


def test_duplicates_read_back(mroot, mref):
    """The fixture really holds duplicates, and anndata reads them back as
    they are stored."""
    _, mats = mw.make_duplicates_adata()
    for label in DUP_STORES:
        a = mref(mroot[1][label])
        for layer in ["X"] + mw.DUP_LAYERS:
            m = dup_matrix(a, layer)
            stored = mats["X" if layer == "X" else f"layers/{layer}"]
            assert sp.issparse(m) and not m.has_canonical_format, (label, layer)
            assert m.nnz == stored.nnz
            canon = m.copy()
            canon.sum_duplicates()
            assert canon.nnz < m.nnz
            np.testing.assert_array_equal(m.indices, stored.indices)


@pytest.mark.parametrize("label", DUP_STORES)
@pytest.mark.parametrize("layer", ["X"] + mw.DUP_LAYERS)
@pytest.mark.parametrize("params,rsel,csel", SPARSE_SELECTIONS)
def test_duplicates_dense_sum(msrv, mroot, mref, label, layer, params, rsel, csel):
    """Dense answers add duplicate entries, as scipy's toarray() does."""
    name = mroot[1][label]
    m = dup_matrix(mref(name), layer)
    full = m.toarray()
    want = full[rsel][:, csel]
    path = store_path(name, "X") if layer == "X" else store_path(name, "layers", layer)
    for fmt in FORMATS:
        check(msrv, path, want, fmt, **params)
    r = msrv.get(path, format="csv", **params)
    assert r.status_code == 200, r.text
    # shortest text at the value's width: parse, then narrow to the dtype
    got = np.array([[float(x) for x in line.split(",")] for line in r.text.split("\r\n")[:-1]])
    np.testing.assert_array_equal(got.reshape(want.shape).astype(want.dtype), want)


def csr_rows(indptr, indices, data):
    """Each row's entries as a sorted list of (column, value)."""
    return [sorted(zip(list(indices[indptr[i]:indptr[i + 1]]),
                       [float(v) for v in data[indptr[i]:indptr[i + 1]]]))
            for i in range(len(indptr) - 1)]


@pytest.mark.parametrize("label", DUP_STORES)
@pytest.mark.parametrize("layer", ["X"] + mw.DUP_LAYERS)
@pytest.mark.parametrize("params,rsel,csel", SPARSE_SELECTIONS)
def test_duplicates_csr_kept(msrv, mroot, mref, label, layer, params, rsel, csel):
    """layout=csr keeps duplicate entries apart, as scipy's X[rows][:, cols]
    holds them, with each row's columns ascending."""
    name = mroot[1][label]
    m = dup_matrix(mref(name), layer)
    sub = m[rsel][:, csel].tocsr()
    path = store_path(name, "X") if layer == "X" else store_path(name, "layers", layer)
    body = assert_json(msrv.get(path, layout="csr", **params))
    assert body["shape"] == list(sub.shape) and body["dtype"] == str(m.dtype)
    assert body["nnz"] == sub.nnz
    indptr, indices = body["indptr"], body["indices"]
    data = np.array(body["data"], dtype=m.dtype)
    for i in range(len(indptr) - 1):
        seg = indices[indptr[i]:indptr[i + 1]]
        assert seg == sorted(seg), (i, seg)
    assert csr_rows(indptr, indices, data) == csr_rows(sub.indptr, sub.indices, sub.data)
    # Summed by hand, the entries give scipy's toarray().
    dense = np.zeros(sub.shape, dtype=m.dtype)
    with np.errstate(over="ignore"):   # int8 sums wrap around, as in scipy
        for i in range(len(indptr) - 1):
            for k in range(indptr[i], indptr[i + 1]):
                dense[i, indices[k]] += data[k]
    np.testing.assert_array_equal(dense, sub.toarray())


def test_duplicates_column_index(mroot, server_factory, mref):
    """Column selections through the ready column index sum and keep
    duplicates the same way."""
    root, names = mroot
    srv = server_factory(root)
    name = names["dup-h5"]
    m = mref(name).X
    path = store_path(name, "X")
    wait_ready(srv, path, var_names="G3")
    for cols in [[3], [0, 11, 3, 3], [2]]:
        spec = ",".join(str(c) for c in cols)
        check(srv, path, m.toarray()[:, cols], "npy", cols=spec)
        check(srv, path, m.toarray()[5:30, cols], "json", cols=spec, rows="5:30")
        body = assert_json(srv.get(path, layout="csr", cols=spec))
        sub = m[:, cols].tocsr()
        assert body["nnz"] == sub.nnz
        assert csr_rows(body["indptr"], body["indices"], np.array(body["data"], "float32")) == \
            csr_rows(sub.indptr, sub.indices, sub.data)


@pytest.mark.parametrize("label", DUP_STORES)
@pytest.mark.parametrize("layer", ["X", "csc", "int8"])
@pytest.mark.parametrize("params", [{}, {"rows": "1:9"}, {"rows": "3:4"}, {"cols": "7,2,3"}])
@pytest.mark.parametrize("fmt", ["bin", "npz"])
def test_csr_binary_duplicates(msrv, mroot, mref, label, layer, params, fmt):
    """Rows stored out of order (non-canonical) come back ordered, duplicates
    kept, as in the JSON answer."""
    name = mroot[1][label]
    m = dup_matrix(mref(name), layer)
    path = store_path(name, "X") if layer == "X" else store_path(name, "layers", layer)
    js = assert_json(msrv.get(path, layout="csr", **params))
    got = CSR_DECODERS[fmt](msrv.get(path, layout="csr", format=fmt, **params))
    assert got.shape == tuple(js["shape"]) and got.nnz == js["nnz"]
    np.testing.assert_array_equal(got.indptr, js["indptr"])
    np.testing.assert_array_equal(got.indices, js["indices"])
    np.testing.assert_array_equal(got.data, np.array(js["data"], dtype=m.dtype))
    rsel = np.s_[1:9] if params.get("rows") == "1:9" else np.s_[3:4] if "rows" in params \
        else np.s_[:]
    csel = [7, 2, 3] if "cols" in params else np.s_[:]
    sub = m[rsel][:, csel].tocsr()
    assert csr_rows(got.indptr, got.indices, got.data) == \
        csr_rows(sub.indptr, sub.indices, sub.data)


# ------------------------------------------------------------ zarr chunk shapes
NARROW_DTYPES = ["int8", "int16", "float32", "float64", "bool"]


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_zarr_narrow_and_odd_chunks(tmp_path, server_factory, zarr_format):
    """obsm arrays stored in chunks one column wide (as anndata writes large
    embeddings), in partial edge chunks and in chunks wider than one row,
    read whole and by every selection form equal zarr's own read; values of
    1, 2, 4 and 8 bytes and bools, whose copies take different paths."""
    import zarr
    rng = np.random.default_rng(mw.SEED + 50)
    a = mw.ad.AnnData(obs=pd.DataFrame(index=mw.obs_names()))
    arrays = {}
    for dt in NARROW_DTYPES:
        arrays[dt] = mw._values(rng, dt, (mw.N_OBS, 3))
    name = f"narrow{zarr_format}.zarr"
    group = zarr.open_group(tmp_path / name, mode="w", zarr_format=zarr_format)
    mw.ad.io.write_elem(group, "/", a)
    for i, dt in enumerate(NARROW_DTYPES):
        chunks = [(7, 1), (16, 2), (40, 1), (3, 3), (11, 1)][i]
        mw.ad.io.write_elem(group["obsm"], dt, arrays[dt], dataset_kwargs={"chunks": chunks})
    back = zarr.open_group(tmp_path / name, mode="r")
    srv = server_factory(tmp_path)
    for i, dt in enumerate(NARROW_DTYPES):
        assert back["obsm"][dt].chunks == [(7, 1), (16, 2), (40, 1), (3, 3), (11, 1)][i]
        want = np.asarray(back["obsm"][dt][...])
        np.testing.assert_array_equal(want, arrays[dt])
        path = store_path(name, "obsm", dt)
        for fmt in ["bin", "npy", "json"]:
            check(srv, path, want, fmt)
        check(srv, path, want[5:33], "npy", rows="5:33")
        check(srv, path, want[5:33, 1:3], "bin", rows="5:33", cols="1:3")
        check(srv, path, want[::3, ::2], "npy", rows="::3", cols="::2")
        check(srv, path, want[[30, 2, 2, 17]][:, [2, 0]], "npy", rows="30,2,2,17", cols="2,0")
