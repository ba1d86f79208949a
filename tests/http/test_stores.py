"""Service routes, the store list and store summaries."""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

import h5py
import numpy as np
import pytest

import writers as W
from conftest import assert_json, store_path


def test_healthz(get):
    r = get("/healthz")
    assert r.status_code == 200
    assert r.json() == {"status": "ok"}


def test_readyz(get):
    r = get("/readyz")
    assert r.status_code == 200
    assert r.json() == {"status": "ready"}


def _iso_utc(text: str) -> dt.datetime:
    assert text.endswith("Z"), f"mtime {text!r} is not UTC ISO 8601"
    return dt.datetime.fromisoformat(text[:-1]).replace(tzinfo=dt.timezone.utc)


def test_list_stores(get, data_root):
    js = assert_json(get("/v1/stores"))
    assert isinstance(js.get("stores"), list), js
    stores = js["stores"]
    names = [s["name"] for s in stores]
    assert names == sorted(names), "stores not sorted by name"
    assert len(names) == len(set(names)), "a store listed twice"
    by_name = {s["name"]: s for s in stores}
    for name, kind in W.GOOD_STORES.items():
        assert name in by_name, f"{name!r} missing from /v1/stores: {names}"
        entry = by_name[name]
        st = os.stat(data_root / name)
        assert entry["kind"] == kind, entry
        assert entry["backend"] == "hdf5", entry
        assert entry["bytes"] == st.st_size, entry
        mtime = _iso_utc(entry["mtime"])
        real = dt.datetime.fromtimestamp(st.st_mtime, dt.timezone.utc)
        assert abs((mtime - real).total_seconds()) < 1.0, (entry["mtime"], real)
    # nothing that resolves outside the root is listed
    assert not [n for n in names if n.endswith(W.SECRET)], "the secret file outside the root is listed"
    assert W.LINK_FILE not in by_name, "a symlink leaving the root is listed"
    assert f"{W.LINK_DIR}/{W.SECRET}" not in by_name, "a store under a symlinked outside folder is listed"
    assert all(".." not in n.split("/") and not n.startswith("/") for n in names), names
    # nothing else: the unreadable files may be listed (by suffix), nothing more
    assert set(names) <= set(W.GOOD_STORES) | {W.TRUNCATED, W.NOT_HDF5}, names


def _check_frame_summary(got, df):
    assert got["index_name"] == df.index.name
    assert got["columns"] == list(df.columns)


def _keys(mapping):
    return sorted(k for k in mapping.keys() if k is not None)


def _check_anndata_summary(js, a, *, check_x=True):
    assert js["shape"] == [a.n_obs, a.n_vars]
    _check_frame_summary(js["obs"], a.obs)
    _check_frame_summary(js["var"], a.var)
    for key in ("obsm", "varm", "obsp", "varp", "layers"):
        assert sorted(js[key]) == _keys(getattr(a, key)), key
    assert sorted(js["uns"]) == sorted(a.uns.keys())
    if a.raw is None:
        assert js["raw"] is None
    else:
        assert js["raw"]["shape"] == [a.raw.n_obs, a.raw.n_vars]
    if check_x:
        if a.X is None:
            assert js["X"] is None
        else:
            assert js["X"]["shape"] == list(a.X.shape)
            assert js["X"]["dtype"] == str(a.X.dtype)
            enc = "array" if isinstance(a.X, np.ndarray) else f"{a.X.format}_matrix"
            assert js["X"]["encoding"] == enc


@pytest.mark.parametrize("name", [W.FRAME, W.EMPTY_ROWS, W.NO_COLUMNS, W.UNICODE])
def test_summary_anndata(get, ref, data_root, name):
    js = assert_json(get(store_path(name)))
    st = os.stat(data_root / name)
    assert js["name"] == name
    assert js["kind"] == "anndata"
    assert js["backend"] == "hdf5"
    assert js["bytes"] == st.st_size
    assert isinstance(js["etag"], str) and js["etag"]
    _check_anndata_summary(js, ref[name])
    # AnnData has no MuData / TreeData keys, or they are empty/absent
    assert "mod" not in js or not js["mod"]


def test_summary_frame_details(get, ref):
    """The fixture really has what the summary test relies on: a named var
    index and the odd column names."""
    js = assert_json(get(store_path(W.FRAME)))
    assert js["var"]["index_name"] == "gene_id"
    assert js["obs"]["index_name"] is None
    assert "name with space é" in js["obs"]["columns"] and "a,b" in js["obs"]["columns"]
    assert js["X"] == {"shape": [50, 7], "dtype": "float32", "encoding": "array"}


@pytest.mark.parametrize("name", [W.MULTI, W.AXIS1, W.NO_MOD_ORDER])
def test_summary_mudata(get, ref, name):
    m = ref[name]
    js = assert_json(get(store_path(name)))
    assert js["kind"] == "mudata"
    assert js["backend"] == "hdf5"
    assert js["shape"] == [m.n_obs, m.n_vars]
    assert js["axis"] == m.axis
    assert js["mod"] == [{"name": k, "shape": [v.n_obs, v.n_vars]} for k, v in m.mod.items()]
    _check_frame_summary(js["obs"], m.obs)
    _check_frame_summary(js["var"], m.var)
    for key in ("obsm", "varm", "obsp", "varp"):
        assert sorted(js[key]) == _keys(getattr(m, key)), key
    assert js.get("X") is None


def test_mod_order_is_respected(get, ref):
    """multi.h5mu lists rna before prot (not alphabetical); without
    mod-order the order is h5py's (alphabetical), as mudata reads it."""
    assert [m["name"] for m in assert_json(get(store_path(W.MULTI)))["mod"]] == ["rna", "prot"]
    assert [m["name"] for m in assert_json(get(store_path(W.NO_MOD_ORDER)))["mod"]] == list(ref[W.NO_MOD_ORDER].mod)
    assert list(ref[W.NO_MOD_ORDER].mod) == ["prot", "rna"]
    with h5py.File(ref.root / W.NO_MOD_ORDER) as f:
        assert "mod-order" not in f["mod"].attrs


@pytest.mark.parametrize("name", [W.MULTI, W.AXIS1, W.NO_MOD_ORDER])
def test_mod_route(get, ref, name):
    m = ref[name]
    js = assert_json(get(store_path(name, "mod")))
    assert js["axis"] == m.axis
    assert js["mod"] == [{"name": k, "shape": [v.n_obs, v.n_vars]} for k, v in m.mod.items()]


@pytest.mark.parametrize("name", [W.LINEAGE, W.SUBSET])
def test_summary_treedata(get, ref, name):
    t = ref[name]
    js = assert_json(get(store_path(name)))
    assert js["kind"] == "treedata"
    assert js["backend"] == "hdf5"
    assert js["label"] == t.label
    assert js["alignment"] == t.alignment
    assert js["allow_overlap"] is bool(t.allow_overlap)
    assert sorted(js["obst"]) == sorted(t.obst.keys())
    assert sorted(js["vart"]) == sorted(t.vart.keys())
    _check_anndata_summary(js, t)


def test_treedata_fixture_values(ref):
    """The two tree stores differ in every summary field the test checks."""
    a, b = ref[W.LINEAGE], ref[W.SUBSET]
    assert (a.label, a.alignment, a.allow_overlap) == ("lineage", "leaves", False)
    assert (b.label, b.alignment, b.allow_overlap) == (None, "subset", True)


def test_examples_are_served(server_factory):
    """`make run` serves examples/: the committed stores open and hold what
    examples/README.md says."""
    examples = Path(__file__).resolve().parents[2] / "examples"
    srv = server_factory(examples)
    listed = {s["name"]: s["kind"] for s in assert_json(srv.get("/v1/stores"))["stores"]}
    assert listed == {"pbmc_small.h5mu": "mudata", "blood.h5ad": "anndata", "lineage.h5td": "treedata",
                      "blood.zarr": "anndata", "lineage.zarr": "treedata"}
    for name in listed:
        path = examples / name
        files = [f for f in path.rglob("*") if f.is_file()] if path.is_dir() else [path]
        assert sum(f.stat().st_size for f in files) < 1_000_000
    pbmc = assert_json(srv.get(store_path("pbmc_small.h5mu", "mod")))
    assert pbmc["mod"] == [{"name": "rna", "shape": [80, 30]}, {"name": "prot", "shape": [60, 8]}]
    amap = assert_json(srv.get(store_path("pbmc_small.h5mu", "obsmap", "prot"), rows="38:42"))["obsmap"]
    assert amap == [0, 0, 1, 2]
    tree = assert_json(srv.get(store_path("lineage.h5td")))
    assert (tree["label"], tree["alignment"], tree["allow_overlap"], tree["obst"]) == \
        ("tree", "leaves", False, ["lineage"])
    blood = assert_json(srv.get(store_path("blood.h5ad", "obs"), columns="n_counts,is_doublet", rows="3:6"))
    assert blood["dtypes"] == {"n_counts": "Int64", "is_doublet": "boolean"}
    assert blood["data"]["is_doublet"][0] is None and blood["data"]["n_counts"][2] is None
    # The zarr twins answer exactly what their HDF5 originals answer.
    for h5, zarr_name, route in [("blood.h5ad", "blood.zarr", ("obs",)),
                                 ("blood.h5ad", "blood.zarr", ("X",)),
                                 ("lineage.h5td", "lineage.zarr", ("obst", "lineage", "subtree"))]:
        params = {"root": "node0", "depth": "2"} if route[-1] == "subtree" else {}
        assert assert_json(srv.get(store_path(zarr_name, *route), **params)) == \
            assert_json(srv.get(store_path(h5, *route), **params)), (zarr_name, route)
    assert assert_json(srv.get(store_path("blood.zarr", "zarr", "zarr.json")))["zarr_format"] == 3
