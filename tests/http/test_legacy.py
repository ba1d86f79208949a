"""Older layouts anndata still reads, each route equal to what today's
anndata.read_h5ad returns for the file.  No writer of those versions runs
here, so the files are made with h5py in their layouts:

- a 0.7-style file (no root attributes, dataframe 0.1.0 with categories
  behind an HDF5 object reference, an empty column-order written as
  float64, fixed-length byte strings);
- files of anndata before 0.7 (tests/http/legacy_writers.py: 0.5-0.6.6 and
  0.6.7-0.6.22 layouts): compound obs/var/obsm/varm, categories in uns,
  raw.X/raw.var/raw.varm, h5sparse matrices, scalars as 1-element arrays,
  scanpy's neighbors graphs in uns (anndata moves them to obsp)."""

from __future__ import annotations

import warnings

import anndata as ad
import h5py
import numpy as np
import pandas as pd
import pytest

import scipy.sparse as sp

import legacy_writers as lw
from compare import check_frame_csv, check_frame_json, decode_bin, frame_encodings
from conftest import assert_json, assert_problem, store_path

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


# ------------------------------------------------------------ before 0.7
PRE07 = ["legacy_05.h5ad", "legacy_06.h5ad"]


@pytest.fixture(scope="module")
def pre07(tmp_path_factory, server_factory):
    root = tmp_path_factory.mktemp("pre07")
    refs = {}
    for name, write in lw.LAYOUTS.items():
        write(root / name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in PRE07:
            refs[name] = ad.read_h5ad(root / name)
    return server_factory(root), refs, root


def dense(m):
    return m.toarray() if sp.issparse(m) else np.asarray(m)


def fetch_bin(srv, path, **params):
    return decode_bin(srv.get(path, format="bin", **params))


def fetch_csr(srv, path, **params):
    body = assert_json(srv.get(path, layout="csr", **params))
    assert body["layout"] == "csr"
    return sp.csr_matrix((np.array(body["data"], dtype=body["dtype"]), body["indices"],
                          body["indptr"]), shape=body["shape"])


def uns_expected(v):
    """What cellar's uns answer holds for a value anndata read: mappings as
    objects, arrays as (nested) lists, a record array as an object of its
    fields, numpy scalars and strings as JSON values."""
    if isinstance(v, dict):
        return {k: uns_expected(x) for k, x in v.items()}
    if isinstance(v, np.ndarray):
        if v.dtype.names:
            return {n: uns_expected(v[n]) for n in v.dtype.names}
        return v.tolist()
    if isinstance(v, np.generic):
        return v.item()
    return v


def assert_uns_equal(got, exp, where="uns"):
    """Equal, floats compared at their stored width (float32 text is the
    shortest that reads back as the same float32)."""
    if isinstance(exp, dict):
        assert isinstance(got, dict) and set(got) == set(exp), (where, sorted(got), sorted(exp))
        for k in exp:
            assert_uns_equal(got[k], exp[k], f"{where}/{k}")
    elif isinstance(exp, list) and exp and isinstance(exp[0], float):
        np.testing.assert_array_equal(np.array(got, dtype=np.float32),
                                      np.array(exp, dtype=np.float32), err_msg=where)
    else:
        assert got == exp and type(got) is type(exp), (where, got, exp)


@pytest.mark.parametrize("name", PRE07)
def test_pre07_summary(pre07, name):
    srv, refs, _ = pre07
    a = refs[name]
    s = assert_json(srv.get(store_path(name)))
    assert s["kind"] == "anndata"
    assert s["shape"] == list(a.shape)
    assert s["obs"]["columns"] == list(a.obs.columns)
    assert s["obs"]["index_name"] == a.obs.index.name == "index"
    assert s["var"]["columns"] == list(a.var.columns)
    for el in ("obsm", "varm", "obsp", "varp"):
        assert sorted(s[el]) == sorted(getattr(a, el).keys()), el
    assert sorted(s["layers"]) == sorted(k for k in a.layers.keys() if k is not None)
    assert sorted(s["uns"]) == sorted(a.uns.keys())
    assert s["raw"]["shape"] == list(a.raw.shape)
    assert s["X"]["shape"] == list(a.X.shape)


@pytest.mark.parametrize("name", PRE07)
@pytest.mark.parametrize("element", ["obs", "var", "raw/var"])
def test_pre07_frames(pre07, name, element):
    srv, refs, _ = pre07
    a = refs[name]
    df = a.raw.var if element == "raw/var" else getattr(a, element)
    js = assert_json(srv.get(store_path(name, *element.split("/"))))
    check_frame_json(js, df, None)
    check_frame_csv(srv.get(store_path(name, *element.split("/")), format="csv").text, df)
    part = assert_json(srv.get(store_path(name, *element.split("/")), rows="-5:1:-2"))
    check_frame_json(part, df.iloc[-5:1:-2], None)


@pytest.mark.parametrize("name", PRE07)
def test_pre07_categories_from_uns(pre07, name):
    """_clean_uns: a code column with uns['{col}_categories'] is a
    categorical when every code fits the categories (the key leaves uns);
    one whose codes do not fit stays integers and its key stays."""
    srv, refs, _ = pre07
    a = refs[name]
    for element in ("obs", "var"):
        df = getattr(a, element)
        schema = assert_json(srv.get(store_path(name, element, "schema")))
        cols = {c["name"]: c for c in schema["columns"]}
        for col in df.columns:
            if isinstance(df[col].dtype, pd.CategoricalDtype):
                assert cols[col]["encoding"] == "categorical", col
                assert cols[col]["categories"] == list(df[col].cat.categories)
                assert cols[col]["ordered"] is False
                codes = assert_json(srv.get(store_path(name, element), columns=col,
                                            categorical="codes"))
                assert codes["data"][col]["codes"] == df[col].cat.codes.tolist()
            else:
                assert cols[col]["encoding"] != "categorical", col
    uns = assert_json(srv.get(store_path(name, "uns")))
    assert not [k for k in uns if k.endswith("_categories") and k not in a.uns]
    if name == "legacy_05.h5ad":
        assert a.obs["louvain"].dtype == np.int8 and "louvain_categories" in uns
        assert "orphan_categories" in uns
        assert a.obs["bulk_labels"].isna().sum() == 1


@pytest.mark.parametrize("name", PRE07)
def test_pre07_matrices(pre07, name):
    srv, refs, _ = pre07
    a = refs[name]
    x = dense(a.X)
    got = fetch_bin(srv, store_path(name, "X"))
    assert got.dtype == x.dtype
    np.testing.assert_array_equal(got, x)
    np.testing.assert_array_equal(fetch_bin(srv, store_path(name, "X"), rows="3:9", cols="10,0,4"),
                                  x[3:9][:, [10, 0, 4]])
    names = list(a.obs_names[[6, 5, 0]])
    body = srv.post(store_path(name, "X"), {"obs_names": names, "var_names": [a.var_names[2]]},
                    format="bin")
    np.testing.assert_array_equal(decode_bin(body), x[[6, 5, 0]][:, [2]])
    if sp.issparse(a.X):
        got = fetch_csr(srv, store_path(name, "X"), rows="0:20")
        np.testing.assert_array_equal(got.toarray(), x[:20])
    for key, value in a.layers.items():
        if key is None:
            continue
        np.testing.assert_array_equal(fetch_bin(srv, store_path(name, "layers", key)), dense(value))
    for el in ("obsm", "varm", "obsp"):
        for key, value in getattr(a, el).items():
            got = fetch_bin(srv, store_path(name, el, key))
            want = dense(value)
            assert got.dtype == want.dtype and got.shape == want.shape, (el, key)
            np.testing.assert_array_equal(got, want)
    umap = a.obsm["X_umap"]
    js = assert_json(srv.get(store_path(name, "obsm", "X_umap"), rows="1,7,2", cols="1"))
    np.testing.assert_array_equal(np.array(js["data"], dtype=umap.dtype), umap[[1, 7, 2]][:, [1]])


@pytest.mark.parametrize("name", PRE07)
def test_pre07_raw(pre07, name):
    srv, refs, _ = pre07
    raw = refs[name].raw
    np.testing.assert_array_equal(fetch_bin(srv, store_path(name, "raw", "X")), dense(raw.X))
    np.testing.assert_array_equal(fetch_bin(srv, store_path(name, "raw", "X"), cols="14,2"),
                                  dense(raw.X)[:, [14, 2]])
    for key, value in raw.varm.items():
        np.testing.assert_array_equal(fetch_bin(srv, store_path(name, "raw", "varm", key)), value)
    schema = assert_json(srv.get(store_path(name, "raw", "var", "schema")))
    assert [c["name"] for c in schema["columns"]] == list(raw.var.columns)
    # raw.* are not elements of their own
    assert_problem(srv.get(store_path(name, "uns", "raw.X")), 404)


@pytest.mark.parametrize("name", PRE07)
def test_pre07_uns(pre07, name):
    srv, refs, _ = pre07
    a = refs[name]
    assert_uns_equal(assert_json(srv.get(store_path(name, "uns"))), uns_expected(dict(a.uns)))
    for key in a.uns:
        assert_uns_equal(assert_json(srv.get(store_path(name, "uns", key))),
                         uns_expected(a.uns[key]), key)


def test_pre07_uns_scalars_and_records(pre07):
    srv, refs, _ = pre07
    a = refs["legacy_05.h5ad"]
    name = "legacy_05.h5ad"
    assert assert_json(srv.get(store_path(name, "uns", "title"))) == str(a.uns["title"]) == "pbmc 3k"
    assert assert_json(srv.get(store_path(name, "uns", "neighbors"))) == \
        {"params": {"method": "umap", "n_neighbors": [10]}}
    names = assert_json(srv.get(store_path(name, "uns", "rank_genes_groups", "names")))
    rec = a.uns["rank_genes_groups"]["names"]
    assert list(names) == list(rec.dtype.names)
    assert names["CD19+ B"] == rec["CD19+ B"].tolist()
    # the 0.6 layout keeps variable-length strings as 1-element lists
    assert assert_json(srv.get(store_path("legacy_06.h5ad", "uns", "version"))) == ["1.4"]


def test_pre07_both_raws_refused(pre07):
    srv, _, root = pre07
    name = "legacy_both_raws.h5ad"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError, match="legacy and current raw"):
            ad.read_h5ad(root / name)
    assert_problem(srv.get(store_path(name, "raw", "X")), 422, detail_contains="raw")
    assert_problem(srv.get(store_path(name, "raw", "var")), 422)
    # the rest of the store answers
    assert assert_json(srv.get(store_path(name, "obs"), rows="0:2"))["shape"][0] == 2


# ------------------------------------------------------------ the zarr views of older files
def _view_url(srv, name: str, prefix: str = "zarr") -> str:
    return srv.base + store_path(name) + "/" + prefix


def _read_view(read, srv, name: str, prefix: str = "zarr"):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return read(_view_url(srv, name, prefix))


def _str_scalars(v):
    """uns as anndata's zarr reader gives it: a scalar that old writers boxed
    in a 1-element byte string array is a numpy str from read_h5ad
    (read_dataset) and a str from read_zarr (the view's 0-d string); the
    strings are equal."""
    if isinstance(v, dict):
        return {k: _str_scalars(x) for k, x in v.items()}
    return str(v) if isinstance(v, np.str_) else v


def _as_csc(m):
    return m.tocsc() if sp.issparse(m) and m.format == "csr" else m


@pytest.mark.parametrize("prefix", ["zarr", "zarr-csc"])
@pytest.mark.parametrize("name", PRE07)
def test_pre07_zarr_view_reads_as_read_h5ad(pre07, name, prefix):
    """anndata.read_zarr over the zarr views reads what read_h5ad reads of a
    file from before anndata 0.7: compound obs/var as dataframes (string
    fields as str, categories from uns and gone from uns), compound obsm as
    arrays, raw.X/raw.var as raw, h5sparse matrices, scanpy's neighbors
    graphs in obsp (zarr-csc/: every CSR matrix as CSC)."""
    from compare import assert_adata_equal

    srv, refs, _ = pre07
    got = _read_view(ad.read_zarr, srv, name, prefix)
    exp = refs[name].copy()
    exp.uns = _str_scalars(dict(exp.uns))
    if prefix == "zarr-csc":
        exp.X = _as_csc(exp.X)
        for attr in ("layers", "obsp"):
            for k in [k for k in getattr(exp, attr).keys() if k is not None]:
                getattr(exp, attr)[k] = _as_csc(getattr(exp, attr)[k])
        if exp.raw is not None:
            exp.raw = ad.AnnData(X=_as_csc(exp.raw.X), var=exp.raw.var, obs=exp.obs)
    assert_adata_equal(got, exp)


def test_pre07_zarr_view_keys(pre07):
    """What zarr-python sees: the layout anndata reads, not the stored one
    (no compound dataset, no raw.* names), and the stored chunks of a
    dataset the view shows as it is still come from the file."""
    import zarr

    srv, _, root = pre07
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        g = zarr.open_group(_view_url(srv, "legacy_06.h5ad"), mode="r")
    assert {"X", "layers", "obs", "obsm", "obsp", "raw", "uns", "var"} <= set(g.group_keys())
    assert not [k for k in g.keys() if k.startswith("raw.")]
    assert dict(g["obs"].attrs)["encoding-type"] == "dataframe"
    index = g["obs"][dict(g["obs"].attrs)["_index"]]
    assert index.dtype.kind == "U" and "cell é,5" in list(index[:])
    with h5py.File(root / "legacy_06.h5ad") as f:
        np.testing.assert_array_equal(g["raw/X"][:], f["raw.X"][:])
        np.testing.assert_array_equal(g["obs/n_counts"][:], f["obs"]["n_counts"])
        np.testing.assert_array_equal(g["obsp/distances"][:], f["uns/neighbors/distances"][:])
    assert "leiden_categories" not in g["uns"]


def test_legacy_07_zarr_view_reads_as_read_h5ad(legacy):
    """anndata 0.7's dataframe 0.1.0 names its categories by an object
    reference: the view gives anndata's zarr reader the key it looks up."""
    from compare import assert_adata_equal

    srv, adata = legacy
    assert_adata_equal(_read_view(ad.read_zarr, srv, NAME), adata)


# ------------------------------------------------------------ older MuData
MU01, MU_NO_AXIS = "mudata_01.h5mu", "mudata_no_axis.h5mu"


@pytest.fixture(scope="module")
def old_mudata(tmp_path_factory, server_factory):
    """mudata 0.1.x's layout, and a file without axis and mod-order.  Today's
    mudata has no reader for the 0.1 modalities' encoding-type "AnnData",
    so the reference for that file is mudata's read of a copy that says
    "anndata" (tmp, outside the served root)."""
    import mudata

    root = tmp_path_factory.mktemp("old_mudata")
    side = tmp_path_factory.mktemp("old_mudata_ref")
    lw.write_mudata_01(root / MU01)
    lw.modern_encodings_copy(root / MU01, side / MU01)
    lw.write_mudata_no_axis(root / MU_NO_AXIS)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            direct = mudata.read_h5mu(root / MU01)
        except Exception as e:  # mudata 0.4: no reader for encoding-type "AnnData"
            assert "AnnData" in str(e), e
            direct = None
        refs = {MU01: mudata.read_h5mu(side / MU01), MU_NO_AXIS: mudata.read_h5mu(root / MU_NO_AXIS)}
    if direct is not None:  # mudata 0.3 (the Python 3.11 set) still reads the 0.1 layout: the same
        assert list(direct.mod) == list(refs[MU01].mod) and direct.shape == refs[MU01].shape
        assert list(direct.obs_names) == list(refs[MU01].obs_names)
    return server_factory(root), refs, root


@pytest.mark.parametrize("name", [MU01, MU_NO_AXIS])
def test_old_mudata_zarr_view_reads_as_read_h5mu(old_mudata, name, tmp_path):
    """mudata.read_zarr over the zarr view of a MuData without axis and
    mod-order reads what read_h5mu reads; of one in mudata 0.1's layout,
    what read_h5mu reads of its copy in today's encodings."""
    import mudata
    from compare import assert_adata_equal

    srv, refs, _ = old_mudata
    got, exp = _read_view(mudata.read_zarr, srv, name), refs[name]
    assert list(got.mod) == list(exp.mod) and got.axis == exp.axis
    pd.testing.assert_frame_equal(got.obs, exp.obs)
    raw_read = _mudata_zarr_reads_raw(tmp_path, exp)
    for m in exp.mod:
        _plain_strings_as(got[m].obs, exp[m].obs)
        if exp[m].raw is not None and not raw_read:
            # What this mudata reads of a converted zarr: no raw.  The view's
            # raw is then held to exp's through anndata's own zarr reader.
            assert got[m].raw is None
            got_mod = _read_view(ad.read_zarr, srv, name, f"zarr/mod/{m}")
            _plain_strings_as(got_mod.obs, exp[m].obs)
            assert_adata_equal(got_mod, exp[m])
            exp_m = exp[m].copy()
            del exp_m.raw  # the rest of the modality as mudata read it
            assert_adata_equal(got[m], exp_m)
        else:
            assert_adata_equal(got[m], exp[m])


def _mudata_zarr_reads_raw(tmp_path, mdata) -> bool:
    """Whether this mudata's read_zarr gives a modality's raw back, found on
    a real zarr it writes of mdata.  mudata 0.3 (the Python 3.11 set) reads
    a modality's raw only from the legacy raw.X/raw.var keys
    (_read_zarr_mod passes _read_legacy_raw a modern raw it never read), so
    a raw group is left out of every zarr it reads, converted or served;
    mudata 0.4 reads each modality with anndata's read_elem, raw included."""
    import mudata

    with_raw = [m for m in mdata.mod if mdata[m].raw is not None]
    if not with_raw:
        return True
    path = tmp_path / "written_by_mudata.zarr"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mudata.write_zarr(path, mdata.copy())  # it turns string columns into categoricals in place
        back = mudata.read_zarr(path)
    return all(back[m].raw is not None for m in with_raw)


def _plain_strings_as(got: pd.DataFrame, exp: pd.DataFrame) -> None:
    """A string column of a 0.7 data frame is a dataset without an
    encoding: anndata's h5 reader hands it to pandas as an object array
    (pandas 3 makes it str), its zarr reader as zarr 3's numpy StringDType
    array (kept as object).  Such a column of got, its values strings,
    takes exp's dtype; the values are still compared."""
    for c in exp.columns:
        if got[c].dtype == object and pd.api.types.is_string_dtype(exp[c].dtype) \
                and not isinstance(exp[c].dtype, pd.CategoricalDtype):
            assert all(isinstance(v, str) for v in got[c]), c
            got[c] = got[c].astype(exp[c].dtype)


@pytest.mark.parametrize("name", [MU01, MU_NO_AXIS])
def test_old_mudata_modalities(old_mudata, name):
    srv, refs, root = old_mudata
    m = refs[name]
    assert m.axis == 0
    mods = assert_json(srv.get(store_path(name, "mod")))
    assert mods["axis"] == 0
    assert [x["name"] for x in mods["mod"]] == list(m.mod) == sorted(m.mod)  # name order
    assert [x["shape"] for x in mods["mod"]] == [list(m[k].shape) for k in m.mod]
    s = assert_json(srv.get(store_path(name)))
    assert s["kind"] == "mudata" and s["axis"] == 0 and s["shape"] == list(m.shape)
    for element in ("obs", "var"):
        check_frame_json(assert_json(srv.get(store_path(name, element))), getattr(m, element),
                         frame_encodings(root / name, element))


@pytest.mark.parametrize("name", [MU01, MU_NO_AXIS])
def test_old_mudata_mod_routes(old_mudata, name):
    srv, refs, root = old_mudata
    m = refs[name]
    for mod, a in m.mod.items():
        for element in ("obs", "var"):
            js = assert_json(srv.get(store_path(name, "mod", mod, element)))
            check_frame_json(js, getattr(a, element), frame_encodings(root / name, f"mod/{mod}/{element}"))
        np.testing.assert_array_equal(fetch_bin(srv, store_path(name, "mod", mod, "X")), dense(a.X))
        for key, value in a.obsm.items():
            np.testing.assert_array_equal(fetch_bin(srv, store_path(name, "mod", mod, "obsm", key)),
                                          dense(value))
        for key, value in a.layers.items():
            if key is not None:
                np.testing.assert_array_equal(
                    fetch_bin(srv, store_path(name, "mod", mod, "layers", key)), dense(value))
        for axis in ("obs", "var"):
            js = assert_json(srv.get(store_path(name, f"{axis}map", mod)))
            assert js[f"{axis}map"] == getattr(m, f"{axis}map")[mod].tolist()
        if a.raw is not None:
            np.testing.assert_array_equal(fetch_bin(srv, store_path(name, "mod", mod, "raw", "X")),
                                          dense(a.raw.X))
            check_frame_json(assert_json(srv.get(store_path(name, "mod", mod, "raw", "var"))),
                             a.raw.var, None)
    if name == MU01:
        schema = assert_json(srv.get(store_path(name, "mod", "rna", "obs", "schema")))
        cluster = next(c for c in schema["columns"] if c["name"] == "cluster")
        assert cluster["ordered"] is True and cluster["categories"] == ["a", "b", "c"]


# ------------------------------------------------------------ older TreeData
def _same(a, b) -> bool:
    """Equal JSON values where a bool is never a number."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return a == b


@pytest.fixture(scope="module")
def old_treedata(tmp_path_factory, server_factory):
    import treedata

    root = tmp_path_factory.mktemp("old_treedata")
    refs = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, write in lw.TREEDATA_LAYOUTS.items():
            write(root / name)
            read = treedata.read_zarr if name.endswith(".zarr") else treedata.read_h5td
            refs[name] = read(root / name)
    return server_factory(root), refs


@pytest.mark.parametrize("name", list(lw.TREEDATA_LAYOUTS))
def test_old_treedata_summary(old_treedata, name):
    srv, refs = old_treedata
    t = refs[name]
    s = assert_json(srv.get(store_path(name)))
    assert s["kind"] == "treedata"
    assert (s["label"], s["alignment"], s["allow_overlap"]) == (t.label, t.alignment,
                                                                bool(t.allow_overlap))
    assert s["obst"] == list(t.obst.keys()) and s["vart"] == list(t.vart.keys())
    assert "notes" not in s
    assert s["shape"] == list(t.shape)


@pytest.mark.parametrize("name", list(lw.TREEDATA_LAYOUTS))
def test_old_treedata_trees(old_treedata, name):
    import networkx as nx

    srv, refs = old_treedata
    t = refs[name]
    for axis in ("obst", "vart"):
        listing = assert_json(srv.get(store_path(name, axis)))
        assert [x["key"] for x in listing["trees"]] == list(getattr(t, axis).keys())
        for key, g in getattr(t, axis).items():
            js = assert_json(srv.get(store_path(name, axis, key)))
            h = nx.node_link_graph(js, edges="links")
            assert [n["id"] for n in js["nodes"]] == list(g.nodes)
            assert all(_same(h.nodes[n], g.nodes[n]) for n in g.nodes), key
            assert set(h.edges) == set(g.edges)
            assert all(_same(h.edges[e], g.edges[e]) for e in g.edges), key
    # a join of obs onto the leaves follows the alignment treedata reads
    leaf = next(n for n in t.obst["t1"] if t.obst["t1"].out_degree(n) == 0)
    js = assert_json(srv.get(store_path(name, "obst", "t1", "nodes", leaf), obs_columns="n"))
    assert js["obs"] == {"n": int(t.obs.loc[leaf, "n"])}


@pytest.mark.parametrize("name", [n for n in lw.TREEDATA_LAYOUTS if not n.endswith(".zarr")])
def test_old_treedata_zarr_view_reads_as_read_h5td(old_treedata, name):
    """treedata.read_zarr over the zarr view of an older .h5 TreeData reads
    what read_h5td reads: its trees, label and alignment."""
    import treedata
    from compare import assert_trees_equal

    srv, refs = old_treedata
    got, exp = _read_view(treedata.read_zarr, srv, name), refs[name]
    assert (got.label, got.alignment, bool(got.allow_overlap)) == \
        (exp.label, exp.alignment, bool(exp.allow_overlap))
    pd.testing.assert_frame_equal(got.obs, exp.obs)
    assert_trees_equal(dict(got.obst), dict(exp.obst))
    assert_trees_equal(dict(got.vart), dict(exp.vart))


# ------------------------------------------------------------ anndata 0.7 zarr
AD07_ZARR = "anndata_07.zarr"


@pytest.fixture(scope="module")
def ad07_zarr(tmp_path_factory, server_factory):
    root = tmp_path_factory.mktemp("ad07_zarr")
    lw.write_anndata_07_zarr(root / AD07_ZARR)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = ad.read_zarr(root / AD07_ZARR)
    return server_factory(root), a


def test_anndata_07_zarr_every_route(ad07_zarr):
    srv, a = ad07_zarr
    s = assert_json(srv.get(store_path(AD07_ZARR)))
    assert s["kind"] == "anndata" and s["backend"] == "zarr" and s["shape"] == list(a.shape)
    assert s["raw"]["shape"] == list(a.raw.shape)
    for el in ("obsm", "varm", "obsp", "layers", "uns"):
        assert sorted(s[el]) == sorted(k for k in getattr(a, el).keys() if k is not None), el
    for element in ("obs", "var"):
        check_frame_json(assert_json(srv.get(store_path(AD07_ZARR, element))), getattr(a, element),
                         None)
    schema = assert_json(srv.get(store_path(AD07_ZARR, "obs", "schema")))
    ordered = {c["name"]: c.get("ordered") for c in schema["columns"]}
    assert ordered["cat_ordered"] is True and ordered["cat"] is False
    np.testing.assert_array_equal(fetch_bin(srv, store_path(AD07_ZARR, "X")), dense(a.X))
    np.testing.assert_array_equal(fetch_csr(srv, store_path(AD07_ZARR, "X"), rows="3:9").toarray(),
                                  dense(a.X)[3:9])
    np.testing.assert_array_equal(fetch_bin(srv, store_path(AD07_ZARR, "layers", "counts")),
                                  a.layers["counts"])
    for key, value in a.obsm.items():
        if hasattr(value, "columns"):
            check_frame_json(assert_json(srv.get(store_path(AD07_ZARR, "obsm", key))), value, None)
        else:
            np.testing.assert_array_equal(fetch_bin(srv, store_path(AD07_ZARR, "obsm", key)),
                                          dense(value))
    np.testing.assert_array_equal(fetch_bin(srv, store_path(AD07_ZARR, "obsp", "distances")),
                                  dense(a.obsp["distances"]))
    np.testing.assert_array_equal(fetch_bin(srv, store_path(AD07_ZARR, "raw", "X")), dense(a.raw.X))
    check_frame_json(assert_json(srv.get(store_path(AD07_ZARR, "raw", "var"))), a.raw.var, None)
    np.testing.assert_array_equal(fetch_bin(srv, store_path(AD07_ZARR, "raw", "varm", "PCs")),
                                  a.raw.varm["PCs"])
    assert_uns_equal(assert_json(srv.get(store_path(AD07_ZARR, "uns"))), uns_expected(dict(a.uns)))
