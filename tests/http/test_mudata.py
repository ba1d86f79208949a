"""MuData: global obs/var, the same frame routes under /mod/{mod}, and the
obsmap / varmap routes, against what mudata.read_h5mu returns."""

from __future__ import annotations

import numpy as np
import pytest

import writers as W
from compare import check_frame_csv, check_frame_json, decode_bin, decode_npy, expected_dtype, indexer
from conftest import assert_json, store_path

MUDATA = [W.MULTI, W.AXIS1, W.NO_MOD_ORDER]
MODS = [(W.MULTI, "rna"), (W.MULTI, "prot"), (W.AXIS1, "smartseq"), (W.AXIS1, "tenx"),
        (W.NO_MOD_ORDER, "rna"), (W.NO_MOD_ORDER, "prot")]


# ------------------------------------------------------------ global frames
@pytest.mark.parametrize("store", MUDATA)
@pytest.mark.parametrize("element", ["obs", "var"])
def test_global_frame(get, ref, store, element):
    m = ref[store]
    js = assert_json(get(store_path(store, element)))
    check_frame_json(js, getattr(m, element), ref.encodings(store, element))


@pytest.mark.parametrize("element", ["obs", "var"])
def test_global_frame_csv(get, ref, element):
    m = ref[W.MULTI]
    r = get(store_path(W.MULTI, element), format="csv")
    assert r.status_code == 200, r.text
    check_frame_csv(r.content.decode("utf-8"), getattr(m, element))


def test_global_obs_has_missing_from_partial_overlap(get, ref):
    """rna:* columns are missing for cells only prot has, and the reverse."""
    m = ref[W.MULTI]
    cols = ["rna:n_genes", "rna:celltype", "prot:isotype_ctrl", "prot:batch"]
    assert all(c in m.obs.columns for c in cols)
    assert m.obs["rna:n_genes"].isna().sum() == 20 and m.obs["prot:batch"].isna().sum() == 25
    js = assert_json(get(store_path(W.MULTI, "obs"), columns=cols, rows="20:45"))
    check_frame_json(js, m.obs.iloc[20:45][cols], ref.encodings(W.MULTI, "obs"))
    assert js["data"]["rna:n_genes"][-1] is None and js["data"]["prot:batch"][0] is None


@pytest.mark.parametrize("store", MUDATA)
def test_global_schema(get, ref, store):
    m = ref[store]
    enc = ref.encodings(store, "obs")
    js = assert_json(get(store_path(store, "obs", "schema")))
    assert js["n_rows"] == m.n_obs
    assert [c["name"] for c in js["columns"]] == list(m.obs.columns)
    assert [c["dtype"] for c in js["columns"]] == [expected_dtype(m.obs[c], enc[c]) for c in m.obs.columns]


# ------------------------------------------------------------ modality frames
@pytest.mark.parametrize("store,mod", MODS)
@pytest.mark.parametrize("element", ["obs", "var"])
def test_mod_frame(get, ref, store, mod, element):
    df = getattr(ref[store][mod], element)
    js = assert_json(get(store_path(store, "mod", mod, element)))
    check_frame_json(js, df, ref.encodings(store, f"mod/{mod}/{element}"))


@pytest.mark.parametrize("store,mod", MODS[:4])
@pytest.mark.parametrize("element", ["obs", "var"])
def test_mod_schema(get, ref, store, mod, element):
    df = getattr(ref[store][mod], element)
    enc = ref.encodings(store, f"mod/{mod}/{element}")
    js = assert_json(get(store_path(store, "mod", mod, element, "schema")))
    assert js["n_rows"] == len(df)
    assert js["index"]["name"] == df.index.name
    assert js["index"]["encoding"] == enc["_index"][0]
    got = [(c["name"], c["dtype"], c["encoding"]) for c in js["columns"]]
    assert got == [(c, expected_dtype(df[c], enc[c]), enc[c][0]) for c in df.columns]
    for c in js["columns"]:
        if c["encoding"] == "categorical":
            assert c["categories"] == [str(x) for x in df[c["name"]].cat.categories]
            assert c["ordered"] is bool(df[c["name"]].cat.ordered)


def test_mod_selection(get, ref):
    df = ref[W.MULTI]["prot"].obs
    js = assert_json(get(store_path(W.MULTI, "mod", "prot", "obs"), rows="-10::3", categorical="codes"))
    check_frame_json(js, df.iloc[-10::3], ref.encodings(W.MULTI, "mod/prot/obs"), categorical="codes")
    names = ["cell 030 ü", "cell059", "cell025"]
    js = assert_json(get(store_path(W.MULTI, "mod", "prot", "obs"), obs_names=names, columns="batch"))
    check_frame_json(js, df.loc[names, ["batch"]], ref.encodings(W.MULTI, "mod/prot/obs"))


def test_mod_post_comma_name(post, ref):
    df = ref[W.MULTI]["rna"].obs
    names = ["cell,031", "cell000"]
    js = assert_json(post(store_path(W.MULTI, "mod", "rna", "obs"), {"obs_names": names}))
    check_frame_json(js, df.loc[names], ref.encodings(W.MULTI, "mod/rna/obs"))


def test_mod_npy(get, ref):
    s = ref[W.MULTI]["rna"].obs["pct_mt"]
    arr = decode_npy(get(store_path(W.MULTI, "mod", "rna", "obs"), columns="pct_mt", format="npy"))
    assert arr.dtype == np.float32
    np.testing.assert_array_equal(arr, s.to_numpy())


# ------------------------------------------------------------ maps
def _names(m, axis):
    return list(m.obs_names if axis == "obs" else m.var_names)


def _map(m, axis, mod):
    return np.asarray((m.obsmap if axis == "obs" else m.varmap)[mod]).astype(np.uint32)


MAPS = [(W.MULTI, "obs", "rna"), (W.MULTI, "obs", "prot"), (W.MULTI, "var", "rna"),
        (W.MULTI, "var", "prot"), (W.AXIS1, "obs", "smartseq"), (W.AXIS1, "obs", "tenx"),
        (W.AXIS1, "var", "smartseq"), (W.AXIS1, "var", "tenx"), (W.NO_MOD_ORDER, "obs", "prot")]


def _check_forward(js, m, axis, mod, positions):
    names = _names(m, axis)
    amap = _map(m, axis, mod)
    assert js["mod"] == mod
    assert js["rows"] == [int(p) for p in positions]
    assert js[f"{axis}_names"] == [names[p] for p in positions]
    assert js[f"{axis}map"] == [int(amap[p]) for p in positions]


@pytest.mark.parametrize("store,axis,mod", MAPS)
def test_map_forward_all(get, ref, store, axis, mod):
    m = ref[store]
    js = assert_json(get(store_path(store, f"{axis}map", mod)))
    _check_forward(js, m, axis, mod, range(len(_names(m, axis))))


def test_maps_have_zeros(ref):
    """The fixtures' modalities overlap only partly, so maps hold zeros."""
    m = ref[W.MULTI]
    assert (_map(m, "obs", "rna") == 0).sum() == 20 and (_map(m, "obs", "prot") == 0).sum() == 25
    a1 = ref[W.AXIS1]
    assert (_map(a1, "var", "smartseq") == 0).any() and (_map(a1, "var", "tenx") == 0).any()


@pytest.mark.parametrize("spec", ["35:45", "::-9", "0,59,30,31", "-1"])
def test_obsmap_rows(get, ref, spec):
    m = ref[W.MULTI]
    positions = np.arange(m.n_obs)[indexer(spec)]
    for mod in ("rna", "prot"):
        js = assert_json(get(store_path(W.MULTI, "obsmap", mod), rows=spec))
        _check_forward(js, m, "obs", mod, positions)


def test_obsmap_obs_names(get, post, ref):
    m = ref[W.MULTI]
    names = ["cell010", "cell050", "cell 030 ü", "cell010"]
    positions = [list(m.obs_names).index(n) for n in names]
    js = assert_json(get(store_path(W.MULTI, "obsmap", "prot"), obs_names=names))
    _check_forward(js, m, "obs", "prot", positions)
    names = ["cell,031", "cell045"]
    positions = [list(m.obs_names).index(n) for n in names]
    js = assert_json(post(store_path(W.MULTI, "obsmap", "rna"), {"obs_names": names}))
    _check_forward(js, m, "obs", "rna", positions)


def test_varmap_var_names(get, ref):
    m = ref[W.AXIS1]
    names = ["NKG7", "CD3E", "GNLY"]
    positions = [list(m.var_names).index(n) for n in names]
    for mod in ("smartseq", "tenx"):
        js = assert_json(get(store_path(W.AXIS1, "varmap", mod), var_names=names))
        _check_forward(js, m, "var", mod, positions)


def _reverse(m, axis, mod, mod_positions):
    amap = _map(m, axis, mod)
    out = []
    for k in mod_positions:
        hits = np.flatnonzero(amap == k + 1)
        assert len(hits) == 1
        out.append(int(hits[0]))
    return out


@pytest.mark.parametrize("store,axis,mod,spec", [
    (W.MULTI, "obs", "rna", "0:5"), (W.MULTI, "obs", "prot", "0,34,-1,10"),
    (W.MULTI, "obs", "prot", "::-4"), (W.MULTI, "var", "prot", ":"),
    (W.AXIS1, "obs", "tenx", ":"), (W.AXIS1, "var", "tenx", "2,0"),
    (W.AXIS1, "var", "smartseq", "1:"), (W.NO_MOD_ORDER, "obs", "rna", "38:"),
])
def test_map_reverse(get, ref, store, axis, mod, spec):
    m = ref[store]
    n_mod = m[mod].n_obs if axis == "obs" else m[mod].n_vars
    mod_positions = [int(p) for p in np.arange(n_mod)[indexer(spec)]]
    js = assert_json(get(store_path(store, f"{axis}map", mod), mod_rows=spec))
    assert js["mod"] == mod
    assert js["mod_rows"] == mod_positions
    assert js["rows"] == _reverse(m, axis, mod, mod_positions)


def test_map_reverse_post(post, ref):
    m = ref[W.MULTI]
    js = assert_json(post(store_path(W.MULTI, "obsmap", "prot"), {"mod_rows": [3, 0, 34]}))
    assert js["mod_rows"] == [3, 0, 34]
    assert js["rows"] == _reverse(m, "obs", "prot", [3, 0, 34])


def test_map_npy_bin(get, ref):
    m = ref[W.MULTI]
    exp = _map(m, "obs", "prot")
    arr = decode_npy(get(store_path(W.MULTI, "obsmap", "prot"), format="npy"))
    assert arr.dtype == np.uint32
    np.testing.assert_array_equal(arr, exp)
    arr = decode_bin(get(store_path(W.MULTI, "obsmap", "prot"), format="bin", rows="20:30"))
    assert arr.dtype == np.uint32
    np.testing.assert_array_equal(arr, exp[20:30])
    arr = decode_npy(get(store_path(W.MULTI, "varmap", "rna"), format="npy"))
    np.testing.assert_array_equal(arr, _map(m, "var", "rna"))


def test_map_reverse_npy(get, ref):
    """bin/npy of a reverse map give the int64 global rows only."""
    m = ref[W.MULTI]
    exp = np.array(_reverse(m, "obs", "prot", list(range(35))), dtype=np.int64)
    arr = decode_npy(get(store_path(W.MULTI, "obsmap", "prot"), mod_rows=":", format="npy"))
    assert arr.dtype == np.int64
    np.testing.assert_array_equal(arr, exp)
    arr = decode_bin(get(store_path(W.MULTI, "obsmap", "prot"), mod_rows="5:1:-1", format="bin"))
    assert arr.dtype == np.int64
    np.testing.assert_array_equal(arr, exp[5:1:-1])
