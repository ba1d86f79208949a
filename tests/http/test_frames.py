"""Data frames `{ad}/obs`, `{ad}/var` and their schemas, on AnnData and
TreeData stores: every column kind, selections, formats."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import writers as W
from compare import (check_frame_csv, check_frame_json, decode_bin, decode_npy,
                     expected_dtype, indexer)
from conftest import assert_json, store_path

# (store, element): the frames compared whole
FRAMES = [
    (W.FRAME, "obs"), (W.FRAME, "var"),
    (W.EMPTY_ROWS, "obs"), (W.EMPTY_ROWS, "var"),
    (W.NO_COLUMNS, "obs"), (W.NO_COLUMNS, "var"),
    (W.UNICODE, "obs"), (W.UNICODE, "var"),
    (W.LINEAGE, "obs"), (W.LINEAGE, "var"),
    (W.SUBSET, "obs"),
]

NUMERIC_OBS = ["b", "i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64", "f32", "f64",
               "name with space é"]


def frame(ref, store, element) -> pd.DataFrame:
    return ref.frame(store, element)


# ------------------------------------------------------------ whole frames
@pytest.mark.parametrize("store,element", FRAMES)
def test_frame_json(get, ref, store, element):
    df = frame(ref, store, element)
    js = assert_json(get(store_path(store, element)))
    check_frame_json(js, df, ref.encodings(store, element))


@pytest.mark.parametrize("store,element", FRAMES)
def test_frame_csv(get, ref, store, element):
    df = frame(ref, store, element)
    r = get(store_path(store, element), format="csv")
    assert r.status_code == 200, r.text
    assert r.headers["Content-Type"].split(";")[0].strip() == "text/csv"
    check_frame_csv(r.content.decode("utf-8"), df)


@pytest.mark.parametrize("store,element", FRAMES)
def test_schema(get, ref, store, element):
    df = frame(ref, store, element)
    enc = ref.encodings(store, element)
    js = assert_json(get(store_path(store, element, "schema")))
    assert js["n_rows"] == len(df)
    assert js["index"]["name"] == df.index.name
    assert js["index"]["dtype"] == expected_dtype(df.index, enc["_index"])
    assert js["index"]["encoding"] == enc["_index"][0]
    assert [c["name"] for c in js["columns"]] == list(df.columns)
    for col in js["columns"]:
        s = df[col["name"]]
        assert col["dtype"] == expected_dtype(s, enc[col["name"]]), col
        assert col["encoding"] == enc[col["name"]][0], col
        if isinstance(s.dtype, pd.CategoricalDtype):
            cats = s.cat.categories
            exp = [int(c) for c in cats] if cats.dtype.kind in "iu" else [str(c) for c in cats]
            assert col["categories"] == exp, col
            assert col["ordered"] is bool(s.cat.ordered), col
            exp_cdt = "str" if cats.dtype.kind in "OU" else str(cats.dtype)
            assert col["categories_dtype"] == exp_cdt, col
        else:
            assert col.get("categories") is None and col.get("ordered") is None, col


def test_fixture_has_every_kind(ref):
    """The obs of frame.h5ad holds what the issue asks to cover."""
    obs = ref[W.FRAME].obs
    enc = ref.encodings(W.FRAME, "obs")
    kinds = {c: enc[c][0] for c in obs.columns}
    assert {"categorical", "nullable-integer", "nullable-boolean", "nullable-string-array",
            "array"} <= set(kinds.values())
    assert obs["ocat"].cat.ordered and not obs["cat"].cat.ordered
    assert obs["cat"].isna().any() and obs["ocat"].isna().any()
    assert obs["nint"].isna().any() and obs["nbool"].isna().any() and obs["nstr"].isna().any()
    assert np.isnan(obs["f32"]).any() and np.isinf(obs["f32"]).any() and np.isnan(obs["f64"]).any()
    assert (obs["s"] == "").any() and (obs["nstr"] == "").any()
    assert str(obs["nstr"].dtype) == "string"
    assert {str(obs[c].dtype) for c in ["i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64"]} == \
        {"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"}


# ------------------------------------------------------------ selections
ROW_SPECS = ["5:20", "::3", "-5:", "10:2:-2", ":", "3,17,42", "-1,0,-1", "40:1000", "7",
             "49,0,12,3", "::-1", "20:10"]


@pytest.mark.parametrize("spec", ROW_SPECS)
def test_rows(get, ref, spec):
    df = ref[W.FRAME].obs
    js = assert_json(get(store_path(W.FRAME, "obs"), rows=spec))
    check_frame_json(js, df.iloc[indexer(spec)], ref.encodings(W.FRAME, "obs"))


@pytest.mark.parametrize("spec", ["1:5:2", "-2,0", ":0"])
def test_var_rows(get, ref, spec):
    df = ref[W.FRAME].var
    js = assert_json(get(store_path(W.FRAME, "var"), rows=spec))
    check_frame_json(js, df.iloc[indexer(spec)], ref.encodings(W.FRAME, "var"))


@pytest.mark.parametrize("cols", [["f32", "cat", "s"], ["name with space é"], ["u64", "nint", "nbool", "nstr"]])
def test_columns(get, ref, cols):
    df = ref[W.FRAME].obs
    js = assert_json(get(store_path(W.FRAME, "obs"), columns=cols))
    check_frame_json(js, df[cols], ref.encodings(W.FRAME, "obs"))


def test_rows_and_columns(get, ref):
    df = ref[W.FRAME].obs
    cols = ["ocat", "f64", "s_na"]
    js = assert_json(get(store_path(W.FRAME, "obs"), rows="2:30:4", columns=cols))
    check_frame_json(js, df.iloc[2:30:4][cols], ref.encodings(W.FRAME, "obs"))


def test_obs_names(get, ref):
    df = ref[W.FRAME].obs
    names = ["AAAC-05", "cell 03 é", "细胞-11", "12", "AAAC-05"]
    js = assert_json(get(store_path(W.FRAME, "obs"), obs_names=names))
    check_frame_json(js, df.loc[names], ref.encodings(W.FRAME, "obs"))


def test_var_names(get, ref):
    df = ref[W.FRAME].var
    names = ["ENSG00006", "ENSG00001"]
    js = assert_json(get(store_path(W.FRAME, "var"), var_names=names, columns="means,symbol"))
    check_frame_json(js, df.loc[names, ["means", "symbol"]], ref.encodings(W.FRAME, "var"))


def test_unicode_store_selection(get, ref):
    df = ref[W.UNICODE].obs
    js = assert_json(get(store_path(W.UNICODE, "obs"), obs_names=["zelle €", "zelle ä"], columns="Größe"))
    check_frame_json(js, df.loc[["zelle €", "zelle ä"], ["Größe"]], ref.encodings(W.UNICODE, "obs"))


def test_post_names_with_commas(post, ref):
    """A name holding a comma goes in a POST body, lists as JSON arrays."""
    df = ref[W.FRAME].obs
    names = ["cell,07", "AAAC-00", "cell 03 é"]
    cols = ["a,b", "cat", "name with space é"]
    js = assert_json(post(store_path(W.FRAME, "obs"), {"obs_names": names, "columns": cols}))
    check_frame_json(js, df.loc[names, cols], ref.encodings(W.FRAME, "obs"))


def test_post_rows_equals_get(get, post, ref):
    df = ref[W.FRAME].obs
    rows = [0, 7, 49, -1, 7]
    via_post = assert_json(post(store_path(W.FRAME, "obs"), {"rows": rows, "columns": ["f32", "nint"]}))
    via_get = assert_json(get(store_path(W.FRAME, "obs"), rows=rows, columns="f32,nint"))
    assert via_post == via_get
    check_frame_json(via_post, df.iloc[rows][["f32", "nint"]], ref.encodings(W.FRAME, "obs"))


def test_post_body_csv(post, ref):
    df = ref[W.FRAME].obs
    r = post(store_path(W.FRAME, "obs"), {"rows": [3, 1], "columns": ["s", "a,b"]}, format="csv")
    assert r.status_code == 200, r.text
    check_frame_csv(r.content.decode("utf-8"), df.iloc[[3, 1]][["s", "a,b"]])


# ------------------------------------------------------------ categoricals
def test_categorical_codes_json(get, ref):
    df = ref[W.FRAME].obs
    js = assert_json(get(store_path(W.FRAME, "obs"), categorical="codes"))
    check_frame_json(js, df, ref.encodings(W.FRAME, "obs"), categorical="codes")


def test_categorical_codes_selection(get, ref):
    df = ref[W.FRAME].obs
    cols = ["cat", "ocat", "numcat", "f64"]
    js = assert_json(get(store_path(W.FRAME, "obs"), categorical="codes", rows="::-7", columns=cols))
    check_frame_json(js, df.iloc[::-7][cols], ref.encodings(W.FRAME, "obs"), categorical="codes")


def test_categorical_codes_csv(get, ref):
    df = ref[W.FRAME].obs
    r = get(store_path(W.FRAME, "obs"), categorical="codes", format="csv", columns="cat,ocat,i8")
    assert r.status_code == 200, r.text
    check_frame_csv(r.content.decode("utf-8"), df[["cat", "ocat", "i8"]], categorical="codes")


# ------------------------------------------------------------ csv
@pytest.mark.parametrize("spec", ["::4", "3,17,42", "-3:"])
def test_csv_rows(get, ref, spec):
    df = ref[W.FRAME].obs
    r = get(store_path(W.FRAME, "obs"), format="csv", rows=spec)
    assert r.status_code == 200, r.text
    check_frame_csv(r.content.decode("utf-8"), df.iloc[indexer(spec)])


def test_csv_by_accept(get, ref):
    df = ref[W.FRAME].var
    r = get(store_path(W.FRAME, "var"), _headers={"Accept": "text/csv"})
    assert r.status_code == 200, r.text
    assert r.headers["Content-Type"].split(";")[0].strip() == "text/csv"
    check_frame_csv(r.content.decode("utf-8"), df)


# ------------------------------------------------------------ bin / npy
@pytest.mark.parametrize("col", NUMERIC_OBS)
def test_bin_column(get, ref, col):
    s = ref[W.FRAME].obs[col]
    arr = decode_bin(get(store_path(W.FRAME, "obs"), columns=col, format="bin"))
    exp = s.to_numpy()
    assert arr.dtype == exp.dtype, (arr.dtype, exp.dtype)
    assert arr.shape == (len(s),)
    np.testing.assert_array_equal(arr, exp)


@pytest.mark.parametrize("col", NUMERIC_OBS)
def test_npy_column(get, ref, col):
    s = ref[W.FRAME].obs[col]
    arr = decode_npy(get(store_path(W.FRAME, "obs"), columns=col, format="npy"))
    exp = s.to_numpy()
    assert arr.dtype == exp.dtype and arr.shape == exp.shape
    np.testing.assert_array_equal(arr, exp)


@pytest.mark.parametrize("spec", ["10:40:3", "49,0,0,5", "::-1"])
def test_bin_rows(get, ref, spec):
    s = ref[W.FRAME].obs["f32"]
    exp = s.to_numpy()[indexer(spec)]
    arr = decode_bin(get(store_path(W.FRAME, "obs"), columns="f32", format="bin", rows=spec))
    np.testing.assert_array_equal(arr, exp)
    arr = decode_npy(get(store_path(W.FRAME, "obs"), columns="f32", format="npy", rows=spec))
    np.testing.assert_array_equal(arr, exp)
    assert arr.dtype == np.float32


def test_npy_obs_names(get, ref):
    s = ref[W.FRAME].obs["u64"]
    names = ["AAAC-01", "12", "细胞-11"]
    arr = decode_npy(get(store_path(W.FRAME, "obs"), columns="u64", format="npy", obs_names=names))
    np.testing.assert_array_equal(arr, s.loc[names].to_numpy())
    assert arr.dtype == np.uint64


def test_post_npy_comma_column(post, ref):
    s = ref[W.FRAME].obs["a,b"]
    arr = decode_npy(post(store_path(W.FRAME, "obs"), {"columns": ["a,b"], "rows": [4, 2]}, format="npy"))
    np.testing.assert_array_equal(arr, s.to_numpy()[[4, 2]])
    assert arr.dtype == np.int16


@pytest.mark.parametrize("col", ["cat", "ocat", "numcat"])
def test_bin_categorical_codes(get, ref, col):
    s = ref[W.FRAME].obs[col]
    codes = s.cat.codes.to_numpy()
    arr = decode_bin(get(store_path(W.FRAME, "obs"), columns=col, format="bin", categorical="codes"))
    assert arr.dtype == codes.dtype
    np.testing.assert_array_equal(arr, codes)
    arr = decode_npy(get(store_path(W.FRAME, "obs"), columns=col, format="npy", categorical="codes"))
    np.testing.assert_array_equal(arr, codes)


def test_bin_by_accept(get, ref):
    s = ref[W.FRAME].obs["f64"]
    arr = decode_bin(get(store_path(W.FRAME, "obs"), columns="f64",
                         _headers={"Accept": "application/octet-stream"}))
    np.testing.assert_array_equal(arr, s.to_numpy())


def test_bin_var_column(get, ref):
    s = ref[W.FRAME].var["means"]
    arr = decode_bin(get(store_path(W.FRAME, "var"), columns="means", format="bin"))
    np.testing.assert_array_equal(arr, s.to_numpy())


def test_npy_zero_rows(get, ref):
    arr = decode_npy(get(store_path(W.EMPTY_ROWS, "obs"), columns="f64", format="npy"))
    assert arr.shape == (0,) and arr.dtype == np.float64
    arr = decode_bin(get(store_path(W.EMPTY_ROWS, "obs"), columns="u16", format="bin"))
    assert arr.shape == (0,) and arr.dtype == np.uint16


def test_head_matches_get(server):
    path = store_path(W.FRAME, "obs")
    g = server.get(path, rows="0:5")
    h = server.head(path, rows="0:5")
    assert g.status_code == 200 and h.status_code == 200
    assert h.content == b""
    assert h.headers.get("ETag") == g.headers.get("ETag")
    assert h.headers["Content-Type"] == g.headers["Content-Type"]


@pytest.mark.parametrize("fmt", ["h5ad", "zarr"])
def test_listed_column_missing_is_422(tmp_path, server_factory, fmt):
    """A column in column-order that is not in the group (damage, or a store
    caught half written) makes the default answer 422, as anndata fails to
    read it; the columns that are there can still be asked for by name."""
    import shutil

    import anndata as ad
    import h5py

    from conftest import assert_problem

    root = tmp_path / "root"
    root.mkdir()
    obs = pd.DataFrame({"a": np.arange(4), "b": np.arange(4) * 2.0}, index=[f"c{i}" for i in range(4)])
    adata = ad.AnnData(obs=obs)
    name = f"gap.{fmt}"
    if fmt == "zarr":
        adata.write_zarr(root / name)
        shutil.rmtree(root / name / "obs" / "b")
        for meta in (root / name).rglob("*"):
            if meta.name == ".zmetadata":
                meta.unlink()
    else:
        adata.write_h5ad(root / name)
        with h5py.File(root / name, "r+") as f:
            del f["obs/b"]
    if fmt == "zarr":
        import json
        root_json = root / name / "zarr.json"
        if root_json.exists():
            doc = json.loads(root_json.read_text())
            doc.pop("consolidated_metadata", None)
            root_json.write_text(json.dumps(doc))
    srv = server_factory(root)
    body = assert_problem(srv.get(store_path(name, "obs")), 422)
    assert "'b'" in body["detail"] and "missing" in body["detail"]
    r = srv.get(store_path(name, "obs"), columns="a")
    assert r.status_code == 200 and r.json()["data"]["a"] == [0, 1, 2, 3]
