"""Older layouts anndata still reads: a 0.7-style file (no root attributes,
dataframe 0.1.0 with categories behind an HDF5 object reference, an empty
column-order written as float64, fixed-length byte strings).  No writer on
PyPI that runs here writes them any more, so the file is made with h5py in
that layout, and cellar must answer what today's anndata.read_h5ad reads."""

from __future__ import annotations

import warnings

import anndata as ad
import h5py
import numpy as np
import pytest

from compare import check_frame_json
from conftest import assert_json, store_path

NAME = "legacy_07.h5ad"


def _write_legacy(path) -> None:
    with h5py.File(path, "w") as f:
        obs = f.create_group("obs")
        obs.create_dataset("_index", data=np.array(["c0", "c1", "c2", "c3", "c 4"], dtype=object),
                           dtype=h5py.string_dtype())
        cats = obs.create_group("__categories")
        cat = cats.create_dataset("cat", data=np.array(["B", "T"], dtype=object),
                                  dtype=h5py.string_dtype())
        cat.attrs["ordered"] = True
        codes = obs.create_dataset("cat", data=np.array([1, 0, -1, 1, 0], dtype=np.int8))
        codes.attrs["categories"] = cat.ref
        obs.create_dataset("num", data=np.array([1.5, np.nan, 3, 4, -0.25]))
        obs.create_dataset("flag", data=np.array([True, False, True, True, False]))
        obs.create_dataset("fixed", data=np.array([b"ab", b"", b"xyz", b"q", b"12345"], dtype="S5"))
        obs.attrs["encoding-type"] = "dataframe"
        obs.attrs["encoding-version"] = "0.1.0"
        obs.attrs["_index"] = "_index"
        obs.attrs["column-order"] = np.array(["cat", "num", "flag", "fixed"], dtype=object)
        var = f.create_group("var")
        var.create_dataset("_index", data=np.array(["g0", "g1"], dtype=object), dtype=h5py.string_dtype())
        var.attrs["encoding-type"] = "dataframe"
        var.attrs["encoding-version"] = "0.1.0"
        var.attrs["_index"] = "_index"
        var.attrs["column-order"] = np.array([], dtype=np.float64)
        f.create_dataset("X", data=np.arange(10, dtype=np.float32).reshape(5, 2))


@pytest.fixture(scope="module")
def legacy(tmp_path_factory, server_factory):
    root = tmp_path_factory.mktemp("legacy")
    _write_legacy(root / NAME)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        adata = ad.read_h5ad(root / NAME)
    return server_factory(root), adata


@pytest.mark.parametrize("element", ["obs", "var"])
def test_legacy_frame_equals_anndata(legacy, element):
    srv, adata = legacy
    df = getattr(adata, element)
    js = assert_json(srv.get(store_path(NAME, element)))
    check_frame_json(js, df, None)


def test_legacy_categorical_keeps_order_flag_and_missing(legacy):
    srv, adata = legacy
    schema = assert_json(srv.get(store_path(NAME, "obs", "schema")))
    cat = next(c for c in schema["columns"] if c["name"] == "cat")
    assert cat["categories"] == list(adata.obs["cat"].cat.categories)
    assert cat["ordered"] is bool(adata.obs["cat"].cat.ordered) is True
    codes = assert_json(srv.get(store_path(NAME, "obs"), columns="cat", categorical="codes"))
    assert codes["data"]["cat"]["codes"] == adata.obs["cat"].cat.codes.tolist()


def test_legacy_slice_and_summary(legacy):
    srv, adata = legacy
    js = assert_json(srv.get(store_path(NAME, "obs"), rows="1:5:2", columns="fixed,num"))
    check_frame_json(js, adata.obs.iloc[1:5:2][["fixed", "num"]], None)
    summary = assert_json(srv.get(store_path(NAME)))
    assert summary["kind"] == "anndata"
    assert summary["shape"] == list(adata.shape)
    assert summary["var"]["columns"] == []
