"""Memory bounded by the file, not by what it claims (issue 19, points 2
and 3): stores written by anndata, mudata, treedata and zarr-python, then
edited as a damaged or hostile writer would (shapes and chunk shapes
rewritten, an HDF5 dataset recreated with a billion-row dataspace over one
written chunk).  Before these bounds, a 300 KB store claiming a billion
categories made the server fill 8 GB; a chunk shape of 1 GiB over a
2 KB chunk file, or 2^28 strings over a chunk of 80, had it allocate 1-4 GiB
before the decoder saw the bytes; a CSR matrix claiming a billion columns
made a 101-column list or a wide slice cost 8 GB.

Each store gets its own server (the binary of CELLAR_BIN; make test runs
this under AddressSanitizer too).  Every answer must be the expected refusal
(413 over --max-response-bytes for an element read whole, 422 naming the
lie for a chunk), a correct value, or at least a 4xx problem+json; the
server's peak resident memory (VmHWM) stays under PEAK_MB and /healthz
keeps answering.  A watchdog kills a server whose memory passes KILL_MB,
so a regression fails here instead of exhausting the machine."""

from __future__ import annotations

import contextlib
import json
import threading
import time
import warnings
from pathlib import Path

import anndata as ad
import h5py
import mudata as md
import networkx as nx
import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
import treedata as td
import zarr
from test_malformed import strip_consolidated

PEAK_MB = 300
KILL_MB = 2000
BILLION = 10**9


# ------------------------------------------------------------ writing and editing
@contextlib.contextmanager
def quiet_writers(zarr_format: int = 3):
    """anndata's zarr format, unsharded (sharding is written explicitly),
    and plain object string columns and indexes (pandas' string dtype would
    write nullable ones, whose mask keeps a lying values array apart from
    the frame already)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        old_fmt = ad.settings.zarr_write_format
        old_nullable = ad.settings.allow_write_nullable_strings
        old_shard = ad.settings.auto_shard_zarr_v3
        old_infer = pd.get_option("future.infer_string")
        ad.settings.zarr_write_format = zarr_format
        ad.settings.allow_write_nullable_strings = False
        ad.settings.auto_shard_zarr_v3 = False
        pd.set_option("future.infer_string", False)
        try:
            yield
        finally:
            ad.settings.zarr_write_format = old_fmt
            ad.settings.allow_write_nullable_strings = old_nullable
            ad.settings.auto_shard_zarr_v3 = old_shard
            pd.set_option("future.infer_string", old_infer)


def make_adata() -> ad.AnnData:
    rng = np.random.default_rng(19)
    obs = pd.DataFrame({"cat": pd.Categorical(["a", "b", "c", "a"] * 20),
                        "icat": pd.Categorical([10, 20, 30, 40] * 20),
                        "s": [f"s{i}" for i in range(80)],
                        "n": np.arange(80, dtype=np.int64)},
                       index=[f"c{i}" for i in range(80)])
    var = pd.DataFrame(index=[f"g{i}" for i in range(50)])
    return ad.AnnData(X=rng.random((80, 50)).astype(np.float32), obs=obs, var=var)


def make_csr() -> ad.AnnData:
    x = sp.random(80, 50, density=0.2, format="csr", random_state=19, dtype=np.float32)
    return ad.AnnData(X=x, obs=pd.DataFrame(index=[f"c{i}" for i in range(80)]),
                      var=pd.DataFrame(index=[f"g{i}" for i in range(50)]))


def make_mdata() -> md.MuData:
    rng = np.random.default_rng(5)
    rna = ad.AnnData(X=rng.random((80, 6)).astype(np.float32),
                     obs=pd.DataFrame(index=[f"c{i}" for i in range(80)]),
                     var=pd.DataFrame(index=[f"g{i}" for i in range(6)]))
    prot = ad.AnnData(X=rng.random((60, 3)).astype(np.float32),
                      obs=pd.DataFrame(index=[f"c{i}" for i in range(60)]),
                      var=pd.DataFrame(index=[f"p{i}" for i in range(3)]))
    return md.MuData({"rna": rna, "prot": prot})


def make_tdata() -> td.TreeData:
    g = nx.DiGraph()
    for i in range(1, 15):
        g.add_edge(f"n{(i - 1) // 2}", f"n{i}", length=float(i))
    leaves = [v for v in g.nodes if g.out_degree(v) == 0]
    return td.TreeData(X=np.zeros((len(leaves), 2), np.float32),
                       obs=pd.DataFrame(index=leaves), obst={"t": g})


def edit_zarr(store: Path, array: str, fn) -> None:
    meta = store / array / "zarr.json"
    if not meta.exists():
        meta = store / array / ".zarray"
    doc = json.loads(meta.read_text())
    fn(doc)
    meta.write_text(json.dumps(doc))


def set_shape(shape):
    return lambda doc: doc.__setitem__("shape", shape)


def set_chunks(shape):
    def fn(doc):
        if doc.get("zarr_format") == 3:
            doc["chunk_grid"]["configuration"]["chunk_shape"] = shape
        else:
            doc["chunks"] = shape
    return fn


def set_inner(shape):
    def fn(doc):
        doc["codecs"][0]["configuration"]["chunk_shape"] = shape
    return fn


def write_adata_zarr(path: Path, zarr_format: int, a: ad.AnnData | None = None) -> Path:
    with quiet_writers(zarr_format):
        ad.io.write_zarr(path, a if a is not None else make_adata(), chunks=(20, 25),
                         convert_strings_to_categoricals=False)
    strip_consolidated(path)
    return path


def huge_h5_dataset(path: Path, name: str, n: int) -> None:
    """Recreates dataset `name` with a dataspace of n rows in chunks of 1024,
    of which only the first is written: what libhdf5 opens as n values of
    which the rest read as the fill value."""
    with h5py.File(path, "r+") as f:
        old = f[name]
        values, attrs, dtype = old[()], dict(old.attrs), old.dtype
        del f[name]
        ds = f.create_dataset(name, shape=(n,), maxshape=(None,), chunks=(1024,), dtype=dtype)
        ds[: len(values)] = values
        for k, v in attrs.items():
            ds.attrs[k] = v


def write_stores(root: Path) -> None:
    for fmt in (2, 3):
        p = write_adata_zarr(root / f"cats_v{fmt}.zarr", fmt)
        edit_zarr(p, "obs/cat/categories", set_shape([BILLION]))
        p = write_adata_zarr(root / f"xchunks_v{fmt}.zarr", fmt)
        edit_zarr(p, "X", set_chunks([16384, 16384]))
        p = write_adata_zarr(root / f"strchunks_v{fmt}.zarr", fmt)
        edit_zarr(p, "obs/s", set_chunks([2**28]))
    # sharded: X one shard of one inner chunk, then both claimed 1 GiB
    p = write_adata_zarr(root / "shard_v3.zarr", 3)
    a = make_adata()
    g = zarr.open_group(p, mode="r+")
    x = g.create_array("X", shape=a.X.shape, shards=a.X.shape, chunks=a.X.shape,
                       dtype=a.X.dtype, overwrite=True)
    x[...] = a.X
    x.attrs.update({"encoding-type": "array", "encoding-version": "0.2.0"})
    strip_consolidated(p)
    edit_zarr(p, "X", set_chunks([16384, 16384]))
    edit_zarr(p, "X", set_inner([16384, 16384]))
    # HDF5: integer categories over a billion-row dataspace of one chunk
    p = root / "cats.h5ad"
    with quiet_writers():
        make_adata().write_h5ad(p, convert_strings_to_categoricals=False)
    huge_h5_dataset(p, "obs/icat/categories", BILLION)
    # MuData: the global index, and a modality's index
    p = root / "mu_global.zarr"
    with quiet_writers():
        md.write_zarr(p, make_mdata())
    strip_consolidated(p)
    edit_zarr(p, "obs/_index", set_shape([BILLION]))
    for mod in ("rna", "prot"):
        edit_zarr(p, f"obsmap/{mod}", set_shape([BILLION]))
    p = root / "mu_mod.zarr"
    with quiet_writers():
        md.write_zarr(p, make_mdata())
    strip_consolidated(p)
    edit_zarr(p, "mod/prot/obs/_index", set_shape([BILLION]))
    # TreeData (columnar zarr): nodes, edges
    for part, shape in (("nodes", [BILLION]), ("edges", [BILLION, 2])):
        p = root / f"td_{part}.zarr"
        with quiet_writers():
            make_tdata().write_zarr(zarr.open_group(p, mode="w", zarr_format=3))
        strip_consolidated(p)
        edit_zarr(p, f"obst/t/{part}", set_shape(shape))
    # CSR claiming a billion columns (the report's lie), HDF5 and zarr
    p = root / "csr_cols.h5ad"
    make_csr().write_h5ad(p)
    with h5py.File(p, "r+") as f:
        f["X"].attrs["shape"] = np.array([80, BILLION], dtype=np.int64)
    p = write_adata_zarr(root / "csr_cols.zarr", 3, make_csr())
    edit_zarr(p, "X", lambda doc: doc["attributes"].__setitem__("shape", [80, BILLION]))


# ------------------------------------------------------------ expectations
def refused(status: int, says: str):
    def check(r):
        assert r.status_code == status, (r.status_code, r.text[:300])
        assert r.headers["Content-Type"].startswith("application/problem+json")
        assert says in r.json()["detail"], r.json()["detail"]
    return check


def obs_rows(names: list[str], n: list[int] | None = None):
    def check(r):
        assert r.status_code == 200, (r.status_code, r.text[:300])
        body = r.json()
        assert body["index"] == names
        if n is not None:
            assert body["data"]["n"] == n
    return check


def any_answer(r):
    """A value, or a 4xx problem+json: never a 5xx."""
    assert r.status_code < 500, (r.status_code, r.text[:300])
    if r.status_code >= 400:
        assert r.headers["Content-Type"].startswith("application/problem+json")


CSR = make_csr().X
EVEN = list(range(0, 202, 2))  # 101 columns, most past the 50 really stored


def csr_answer(rows: slice, cols: list[int]):
    """The CSR answer scipy gives for the columns that exist; the claimed
    columns past them hold nothing."""
    real = [c for c in cols if c < CSR.shape[1]]
    want = CSR[rows][:, real].tocsr()
    out_of = {c: i for i, c in enumerate(cols)}

    def check(r):
        assert r.status_code == 200, (r.status_code, r.text[:300])
        body = r.json()
        assert body["layout"] == "csr" and body["nnz"] == want.nnz
        assert body["indptr"] == want.indptr.tolist()
        assert body["indices"] == [out_of[real[k]] for k in want.indices]
        assert np.allclose(body["data"], want.data)
    return check


def dense_answer(rows: slice, cols: list[int]):
    want = np.zeros((rows.stop - rows.start, len(cols)), np.float32)
    dense = CSR[rows].toarray()
    for i, c in enumerate(cols):
        if c < CSR.shape[1]:
            want[:, i] = dense[:, c]

    def check(r):
        assert r.status_code == 200, (r.status_code, r.text[:300])
        assert np.allclose(np.array(r.json()["data"], dtype=np.float32), want)
    return check


FIRST = [f"c{i}" for i in range(5)]
CASES = {
    **{f"cats_v{fmt}.zarr": [
        ("/obs?columns=cat", refused(413, "the categories '/obs/cat/categories'")),
        ("/obs?rows=0:5&columns=n", obs_rows(FIRST, [0, 1, 2, 3, 4])),
        ("/obs?obs_names=c1,c2&columns=n", obs_rows(["c1", "c2"], [1, 2])),
        ("/obs/schema", any_answer), ("/obs?categorical=codes", any_answer), ("", any_answer),
    ] for fmt in (2, 3)},
    **{f"xchunks_v{fmt}.zarr": [
        ("/X?rows=0:2&cols=0:3", refused(422, "decode to at most")),
        ("/X?var_names=g3", refused(422, "decode to at most")),
        ("/obs?rows=0:5&columns=n", obs_rows(FIRST, [0, 1, 2, 3, 4])),
    ] for fmt in (2, 3)},
    **{f"strchunks_v{fmt}.zarr": [
        ("/obs?rows=0:3&columns=s", refused(422, "too few for the 268435456 strings")),
        ("/obs?rows=0:5&columns=n", obs_rows(FIRST, [0, 1, 2, 3, 4])),
    ] for fmt in (2, 3)},
    "shard_v3.zarr": [
        ("/X?rows=0:2&cols=0:3", refused(422, "decode to at most")),
        ("/X?format=bin", refused(422, "decode to at most")),
    ],
    "cats.h5ad": [
        ("/obs?columns=icat", refused(413, "the categories '/obs/icat/categories'")),
        ("/obs?rows=0:5&columns=n", obs_rows(FIRST, [0, 1, 2, 3, 4])),
        ("/obs?columns=cat&rows=0:2", obs_rows(["c0", "c1"])),
        ("/obs/schema", any_answer), ("", any_answer),
    ],
    "mu_global.zarr": [
        ("/obsmap/rna?rows=0:3", refused(413, "the obsmap of modality 'rna'")),
        ("/obsmap/prot?mod_rows=0:3", refused(413, "the obsmap of modality 'prot'")),
        ("/mod/rna/obs?rows=0:3", obs_rows(["c0", "c1", "c2"])),
    ],
    "mu_mod.zarr": [
        ("/obsmap/prot?mod_rows=0:3", refused(413, "the reverse obsmap of modality 'prot'")),
        ("/mod/rna/obs?rows=0:3", obs_rows(["c0", "c1", "c2"])),
    ],
    "td_nodes.zarr": [
        ("/obst/t", refused(413, "the nodes of obst/t")),
        ("/obst/t/nodes/n1", refused(413, "the nodes of obst/t")),
        ("/obst", any_answer), ("", any_answer),
    ],
    "td_edges.zarr": [
        ("/obst/t?format=newick", refused(413, "the edges of obst/t")),
        ("/obst", any_answer),
    ],
    **{name: [
        ("/X?rows=0:2&cols=1:1000000000&layout=csr",
         csr_answer(slice(0, 2), list(range(1, 50)))),
        ("/X?layout=csr&rows=0:6&cols=" + ",".join(map(str, EVEN)), csr_answer(slice(0, 6), EVEN)),
        ("/X?rows=0:3&cols=" + ",".join(map(str, EVEN)), dense_answer(slice(0, 3), EVEN)),
        ("/X?var_names=g3", any_answer),
    ] for name in ("csr_cols.h5ad", "csr_cols.zarr")},
}


# ------------------------------------------------------------ the test
@pytest.fixture(scope="module")
def lying_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("lying_sizes")
    write_stores(root / "all")
    return root


def vm_kb(pid: int, field: str) -> int:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(field)


class Watchdog:
    """Kills the server when its resident memory passes KILL_MB."""

    def __init__(self, proc):
        self.proc, self.peak_kb, self.killed = proc, 0, False
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while not self.stop.is_set() and self.proc.poll() is None:
            try:
                kb = vm_kb(self.proc.pid, "VmRSS")
            except (OSError, AssertionError):
                return
            self.peak_kb = max(self.peak_kb, kb)
            if kb > KILL_MB * 1024:
                self.killed = True
                self.proc.kill()
                return
            time.sleep(0.005)

    def close(self):
        self.stop.set()
        self.thread.join()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("store", sorted(CASES))
def test_lying_sizes_stay_bounded(store, lying_root, server_factory):
    root = lying_root / store.replace(".", "_")
    root.mkdir(exist_ok=True)
    target = root / store
    if not target.exists():
        (lying_root / "all" / store).rename(target)
    s = server_factory(root, "--probe-wait-seconds", "60", "--threads", "2")
    dog = Watchdog(s.proc)
    failures = []
    try:
        for route, check in CASES[store]:
            try:
                r = s.session.get(f"{s.base}/v1/stores/{store}{route}", timeout=60)
                check(r)
            except Exception as e:  # noqa: BLE001 - every route is reported
                failures.append(f"{route}: {e.__class__.__name__}: {str(e)[:400]}")
            if not s.alive():
                break
        assert s.alive(), f"the server died (watchdog killed it: {dog.killed}, peak " \
                          f"{dog.peak_kb // 1024} MB); {failures}"
        assert s.session.get(s.base + "/healthz", timeout=5).status_code == 200
        hwm = vm_kb(s.proc.pid, "VmHWM")
    finally:
        dog.close()
    assert not failures, "\n".join(failures)
    assert hwm < PEAK_MB * 1024, f"peak resident memory {hwm // 1024} MB"
    assert s.stop() == 0
    log = s.log.read_text(errors="replace")
    for marker in ("ERROR: AddressSanitizer", "runtime error:", "ERROR: LeakSanitizer"):
        assert marker not in log, log[log.index(marker):][:800]
