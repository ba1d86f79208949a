"""The zarr view of HDF5 stores (issue 13): `/v1/stores/{store}/zarr/...` on
an .h5ad, .h5mu, .h5td (or .h5) store answers a zarr v2 store made from the
file, so zarr-python, anndata, mudata and treedata read it over HTTP as
they read a converted .zarr, and every array equals what h5py reads.

Fixtures: view_writers.py (anndata, mudata and treedata stores with
default, gzip, gzip with shuffle and LZF compression; h5py files with every
dtype, layout and filter pipeline, and the types the view leaves out)."""

from __future__ import annotations

import json
import re
import warnings
import zlib
from pathlib import Path
from urllib.parse import quote

import h5py
import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

import view_writers as V
import zarr_writers as Z
from compare import assert_adata_equal, assert_matrix_equal, assert_trees_equal
from conftest import assert_problem, store_path, zarrita_read

# writing the fixtures and reading every array over HTTP takes a while on
# the 2-core machines (more under the sanitizers)
pytestmark = pytest.mark.timeout(300)

AD_STORES = ["ad.h5ad", "ad_gzip.h5ad", "ad_lzf.h5ad", "ad_shuffle.h5ad", "ad_csc.h5ad", "ad_csr.h5ad",
             "empty.h5ad"]
MU_STORES = ["mu.h5mu", "mu_gzip.h5mu"]
TD_STORES = ["td.h5td", "td_lzf.h5td"]
ALL_STORES = AD_STORES + MU_STORES + TD_STORES + ["exotic.h5"]
LEFT_OUT = {"left_out/compound": "compound", "left_out/opaque": "opaque",
            "left_out/reference": "reference", "left_out/compound_2d": "compound"}


@pytest.fixture(scope="module")
def vroot(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("view") / "root"
    V.write_all(root)
    return root


@pytest.fixture(scope="module")
def vserver(vroot, server_factory):
    return server_factory(vroot)


def view_url(server, store: str, prefix: str = "zarr") -> str:
    return server.base + store_path(store) + "/" + prefix


def key_path(store: str, key: str, prefix: str = "zarr") -> str:
    return store_path(store) + "/" + prefix + "/" + quote(key, safe="/")


def open_remote(server, store: str, consolidated: bool = True, prefix: str = "zarr"):
    import zarr
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return zarr.open_group(view_url(server, store, prefix), mode="r", use_consolidated=consolidated,
                               zarr_format=2)


# ------------------------------------------------------------ what h5py reads
def kept(name: str, ds) -> bool:
    """Whether the view shows this dataset (zarr can express its type and
    name)."""
    if name.rsplit("/", 1)[-1].startswith("."):
        return False
    dt = ds.dtype
    if dt.names:  # records: a structured dtype of 1-D records with plain fields
        return ds.ndim == 1 and all(_plain_field(dt.fields[n][0]) for n in dt.names)
    if dt.kind == "V" or h5py.check_ref_dtype(dt) is not None:
        return False
    return dt.kind in "biuf" or h5py.check_string_dtype(dt) is not None


def _plain_field(ft) -> bool:
    return ft.shape == () and not ft.names and h5py.check_ref_dtype(ft) is None and \
        (ft.kind in "biufS" or h5py.check_string_dtype(ft) is not None)


def h5_tree(path: Path) -> tuple[dict, set, set]:
    """({array path: h5py's read}, group paths, left-out dataset paths), links
    followed as the view follows them (hard and soft)."""
    arrays, groups, left = {}, set(), set()

    def walk(g, prefix):
        for name in g.keys():
            p = prefix + name
            obj = g[name]
            if isinstance(obj, h5py.Group):
                if name.startswith("."):
                    continue
                groups.add(p)
                walk(obj, p + "/")
            elif kept(p, obj):
                if obj.shape is None:
                    arrays[p] = None
                elif h5py.check_string_dtype(obj.dtype) and h5py.check_string_dtype(obj.dtype).length is None:
                    arrays[p] = np.asarray(obj.asstr()[()], dtype=object)
                else:
                    arrays[p] = np.asarray(obj[()])
            else:
                left.add(p)

    with h5py.File(path, "r") as f:
        walk(f, "")
    return arrays, groups, left


def zarr_tree(g, prefix="") -> tuple[dict, set]:
    import zarr
    arrays, groups = {}, set()
    for name, member in g.members():
        p = prefix + name
        if isinstance(member, zarr.Array):
            arrays[p] = member
        else:
            groups.add(p)
            a, gr = zarr_tree(member, p + "/")
            arrays.update(a)
            groups.update(gr)
    return arrays, groups


def assert_same_values(got: np.ndarray, exp: np.ndarray, what: str) -> None:
    assert got.shape == exp.shape, (what, got.shape, exp.shape)
    if exp.dtype.names:  # field by field; h5py reads a variable-length one as bytes
        assert got.dtype.names == exp.dtype.names, (what, got.dtype, exp.dtype)
        for name in exp.dtype.names:
            e = exp[name]
            if e.dtype.kind == "O":
                assert got[name].dtype.kind == "U", (what, name, got.dtype)
                e = np.array([v.decode() if isinstance(v, bytes) else v for v in e], dtype=object)
            assert_same_values(got[name], e, f"{what}/{name}")
        return
    if exp.dtype.kind == "O":
        assert [str(v) for v in got.ravel()] == [str(v) for v in exp.ravel()], what
        return
    assert got.dtype.kind == exp.dtype.kind and got.dtype.itemsize == exp.dtype.itemsize, \
        (what, got.dtype, exp.dtype)
    if exp.dtype.kind == "f":
        np.testing.assert_array_equal(got, exp, err_msg=what)
    else:
        assert (got == exp).all(), what


# ------------------------------------------------------------ zarr-python
@pytest.mark.parametrize("consolidated", [True, False], ids=["consolidated", "listed"])
@pytest.mark.parametrize("store", ALL_STORES)
def test_every_array_equals_h5py(vserver, vroot, store, consolidated):
    """zarr.open_group(url) over fsspec HTTP, with the built .zmetadata or
    listing directories through their HTML index, lists every group and
    dataset the file holds (but the types zarr cannot express) and every
    array reads equal to h5py."""
    exp_arrays, exp_groups, left = h5_tree(vroot / store)
    remote = open_remote(vserver, store, consolidated)
    got_arrays, got_groups = zarr_tree(remote)
    if store in TD_STORES:  # obst/vart become groups of the columnar tree layout
        exp_arrays = {k: v for k, v in exp_arrays.items() if k not in ("obst", "vart")}
        got_arrays = {k: v for k, v in got_arrays.items() if not k.startswith(("obst", "vart"))}
        got_groups = {k for k in got_groups if not k.startswith(("obst", "vart"))}
    assert sorted(got_groups) == sorted(exp_groups)
    assert sorted(got_arrays) == sorted(exp_arrays)
    assert not set(got_arrays) & left
    for path, exp in exp_arrays.items():
        arr = got_arrays[path]
        if exp is None:  # an HDF5 NULL dataspace: a 0-d array without chunks
            assert arr.shape == () and arr.dtype == np.bool_, path
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = np.asarray(arr[...])
        assert_same_values(got, exp, f"{store}:{path}")


def test_left_out_types_are_missing_with_a_reason(vserver, vroot):
    """Compounds zarr cannot hold (a reference field; records of two
    dimensions), opaque and reference datasets are not listed, and their
    keys are 404 with a detail naming the type; their siblings stay."""
    remote = open_remote(vserver, "exotic.h5")
    assert sorted(remote["left_out"].keys()) == ["kept"]
    for path, kind in LEFT_OUT.items():
        for k in (".zarray", ".zattrs", "0"):
            body = assert_problem(vserver.get(key_path("exotic.h5", f"{path}/{k}")), 404)
            assert f"HDF5 {kind} dataset" in body["detail"], body
            assert "zarr cannot express" in body["detail"], body
    body = assert_problem(vserver.get(key_path("exotic.h5", "left_out/compound_2d/0.0")), 404)
    assert "of 2 dimensions" in body["detail"], body
    # a name zarr cannot hold (a leading dot) is left out as well
    assert ".hidden" not in remote["names with space, comma é"].keys()
    assert vserver.get(key_path("exotic.h5", "left_out/kept/0")).status_code == 200


@pytest.mark.parametrize("key", ["nope/.zarray", "nope/.zgroup", "obs/.zarray", "X/.zgroup",
                                 "obs/i8/9", "obs/i8/0.0", "obs/i8/00", "obs/i8/-1", "zarr.json",
                                 "obs/zarr.json", "obs/i8/.zgroup", "obs//i8/.zarray"])
def test_missing_keys_are_404(vserver, key):
    assert_problem(vserver.get(key_path("ad.h5ad", key)), 404)


def test_metadata_documents(vserver, vroot):
    """.zgroup, .zattrs (every attribute), .zarray (the mapping of layouts
    and filters onto zarr codecs, the fill value)."""
    def doc(store, k):
        r = vserver.get(key_path(store, k))
        assert r.status_code == 200, (k, r.text)
        assert r.headers["Content-Type"] == "application/json"
        return r.json()

    assert doc("ad.h5ad", ".zgroup") == {"zarr_format": 2}
    with h5py.File(vroot / "ad.h5ad") as f:
        assert doc("ad.h5ad", "obs/.zattrs") == {
            "_index": "_index", "column-order": list(f["obs"].attrs["column-order"]),
            "encoding-type": "dataframe", "encoding-version": "0.2.0"}
    assert doc("exotic.h5", ".zattrs") == {"encoding-type": "exotic", "ints": [1, 2, 3], "strs": ["a", "é"],
                                            "flag": True, "empty": [], "pi": 3.25}
    z = lambda k: doc("exotic.h5", k + "/.zarray")  # noqa: E731
    g = z("layouts/gzip")
    assert g["compressor"] == {"id": "zlib", "level": 4} and g["chunks"] == [128, 16]
    assert g["dtype"] == "<i2" and g["filters"] is None and g["order"] == "C"
    assert g["dimension_separator"] == "." and g["zarr_format"] == 2 and g["shape"] == [1000, 50]
    assert z("layouts/gzip_be")["dtype"] == ">f8"
    assert z("layouts/gzip_be")["compressor"]["id"] == "zlib"
    for name in ("shuffle_gzip", "shuffle", "fletcher32", "lzf", "lzf_shuffle", "scaleoffset", "chunked"):
        assert z("layouts/" + name)["compressor"] is None, name
    assert z("layouts/lzf")["chunks"] == [50, 30]
    assert z("layouts/chunked")["chunks"] == [30, 4]
    assert z("layouts/contiguous_1d")["chunks"] == [131072]
    assert z("layouts/contiguous_2d")["chunks"] == [873, 300]  # whole rows, about 1 MiB
    assert z("layouts/contiguous_be")["dtype"] == ">i4"
    assert z("layouts/compact")["chunks"] == [12]
    assert z("types/be_u2")["dtype"] == ">u2" and z("types/le_u2")["dtype"] == "<u2"
    assert z("types/le_i1")["dtype"] == "|i1" and z("types/be_f2")["dtype"] == ">f2"
    assert z("types/bool")["dtype"] == "|b1" and z("types/bool")["fill_value"] is False
    assert z("types/enum_i2")["dtype"] == "<i2"
    assert z("types/fixed_ascii")["dtype"] == "|S7"
    v = z("types/vlen_utf8")
    assert v["dtype"] == "|O" and v["filters"] == [{"id": "vlen-utf8"}] and v["compressor"] is None
    assert z("types/vlen_chunked")["chunks"] == [6]
    s = z("scalars/float")
    assert s["shape"] == [] and s["chunks"] == [] and s["dtype"] == "<f4"
    assert z("scalars/be_f8")["dtype"] in ("<f8", ">f8")
    assert z("layouts/fill_int")["fill_value"] == -7
    assert z("layouts/fill_nan")["fill_value"] == "NaN"
    e = z("scalars/empty")
    assert e["shape"] == [] and e["dtype"] == "|b1"
    assert z("layouts/zero_rows")["shape"] == [0, 3]


def _chunk(vserver, store, k) -> bytes:
    r = vserver.get(key_path(store, k))
    assert r.status_code == 200, (k, r.text)
    assert r.headers["Content-Type"] == "application/octet-stream"
    return r.content


def test_chunks_are_the_stored_bytes(vserver, vroot):
    """Deflated and unfiltered HDF5 chunks are their bytes in the file;
    contiguous datasets are row blocks that are ranges of the file, the last
    one padded to the whole chunk."""
    path = vroot / "exotic.h5"
    raw = path.read_bytes()
    with h5py.File(path) as f:
        for name in ("gzip", "gzip_be", "chunked"):
            ds = f["layouts/" + name]
            for i in range(ds.id.get_num_chunks()):
                info = ds.id.get_chunk_info(i)
                idx = [o // c for o, c in zip(info.chunk_offset, ds.chunks)]
                got = _chunk(vserver, "exotic.h5", f"layouts/{name}/" + ".".join(map(str, idx)))
                assert got == raw[info.byte_offset:info.byte_offset + info.size], (name, idx)
        ds = f["layouts/contiguous_1d"]
        off = ds.id.get_offset()
        block = 131072 * 8
        assert _chunk(vserver, "exotic.h5", "layouts/contiguous_1d/1") == raw[off + block:off + 2 * block]
        last = _chunk(vserver, "exotic.h5", "layouts/contiguous_1d/2")
        tail = 300000 * 8 - 2 * block
        assert len(last) == block and last[:tail] == raw[off + 2 * block:off + 300000 * 8]
        assert last[tail:] == bytes(block - tail)


def test_deflate_skipped_chunk_is_deflated(vserver, vroot):
    """A chunk HDF5 stored with deflate skipped (filter mask) is deflated by
    the server, so every chunk of a zlib array decodes."""
    with h5py.File(vroot / "exotic.h5") as f:
        ds = f["layouts/gzip_skipped"]
        assert ds.id.get_chunk_info(1).filter_mask == 1
        exp = ds[1000:2000]
    got = zlib.decompress(_chunk(vserver, "exotic.h5", "layouts/gzip_skipped/1"))
    assert np.frombuffer(got, dtype="<i4").tolist() == exp.tolist()


def test_unwritten_chunks_are_missing_keys(vserver, vroot):
    """A chunk HDF5 never wrote is a missing key: the client reads the fill
    value, as h5py does."""
    assert vserver.get(key_path("exotic.h5", "layouts/fill_int/0")).status_code == 200
    for k in ("layouts/fill_int/1", "layouts/fill_int/3", "layouts/fill_nan/1.1"):
        assert_problem(vserver.get(key_path("exotic.h5", k)), 404)
    remote = open_remote(vserver, "exotic.h5")
    assert remote["layouts/fill_int"][...].tolist() == [1, 2, 3] + [-7] * 7
    got = remote["layouts/fill_nan"][...]
    assert (got[:2, :2] == 1).all() and np.isnan(got[2:]).all() and np.isnan(got[:, 2:]).all()


def test_many_chunks(vserver, vroot):
    """Datasets of many small chunks, in a file with a userblock: a table
    made by coordinates (chunks sent from the file, the ones never written
    missing), and past any table each chunk through libhdf5; the same
    bytes either way."""
    raw = (vroot / "many_chunks.h5").read_bytes()
    remote = open_remote(vserver, "many_chunks.h5")
    assert remote["many"].chunks == (1,)
    assert remote["many"][1000:1010].tolist() == list(range(1000, 1010))
    assert remote["many_gzip"][2490:].tolist() == [i % 7 for i in range(2490, 2500)]
    assert np.frombuffer(_chunk(vserver, "many_chunks.h5", "many/2499"), "<i2").tolist() == [2499]
    assert np.frombuffer(zlib.decompress(_chunk(vserver, "many_chunks.h5", "many_gzip/2494")),
                         "<i4").tolist() == [2494 % 7]
    with h5py.File(vroot / "many_chunks.h5") as f:
        info = f["many_gzip"].id.get_chunk_info_by_coord((1234,))
        assert _chunk(vserver, "many_chunks.h5", "many_gzip/1234") == \
            raw[info.byte_offset:info.byte_offset + info.size]
    assert remote["many_unwritten"][95:105].tolist() == [9] * 5 + list(range(100, 105))
    assert_problem(vserver.get(key_path("many_chunks.h5", "many_unwritten/99")), 404)
    assert remote["beyond"][69990:].tolist() == [i % 1000 for i in range(69990, 70000)]
    assert np.frombuffer(_chunk(vserver, "many_chunks.h5", "beyond/65537"), "<i4").tolist() == [537]


def test_zmetadata_consolidates_every_document(vserver):
    r = vserver.get(key_path("ad.h5ad", ".zmetadata"))
    assert r.status_code == 200 and r.headers["Content-Type"] == "application/json"
    md = r.json()["metadata"]
    assert r.json()["zarr_consolidated_format"] == 1
    for k in (".zgroup", ".zattrs", "obs/.zgroup", "obs/cat/codes/.zarray", "X/.zarray",
              "uns/params/nested/deeper/list/.zarray", "raw/X/data/.zarray"):
        assert k in md, k
        assert md[k] == vserver.get(key_path("ad.h5ad", k)).json(), k
    again = vserver.get(key_path("ad.h5ad", ".zmetadata"))
    assert again.content == r.content and again.headers["ETag"] == r.headers["ETag"]
    assert vserver.get(key_path("ad.h5ad", ".zmetadata"),
                       _headers={"If-None-Match": r.headers["ETag"]}).status_code == 304


def _cache_bytes(server) -> int:
    m = re.search(r"^cellar_cache_bytes (\d+)$", server.get("/metrics").text, re.M)
    assert m, "cellar_cache_bytes not in /metrics"
    return int(m.group(1))


def test_zmetadata_is_built_once_per_store_version(server_factory, vroot):
    """With the answer cache off, the first .zmetadata of a store version is
    built and kept with the version (cellar_cache_bytes, the bytes of its
    derived structures, grows by at least its size); asking again builds
    nothing more."""
    s = server_factory(vroot, "--answer-cache-bytes", "0")
    path = key_path("ad.h5ad", ".zmetadata")
    assert s.get(key_path("ad.h5ad", ".zgroup")).status_code == 200  # the view itself
    before = _cache_bytes(s)
    first = s.get(path)
    assert first.status_code == 200
    built = _cache_bytes(s)
    assert built - before >= len(first.content), (before, built, len(first.content))
    for _ in range(3):
        again = s.get(path)
        assert again.content == first.content
        assert s.head(path).status_code == 200
    assert _cache_bytes(s) == built


def test_directory_index(vserver):
    """The view's directories answer an HTML index as a .zarr store's do
    (fsspec lists a group by it)."""
    r = vserver.get(store_path("ad.h5ad") + "/zarr/")
    assert r.status_code == 200 and r.headers["Content-Type"] == "text/html; charset=utf-8"
    for name in ("obs/", "X/", ".zgroup", ".zattrs"):
        assert f'href="/v1/stores/ad.h5ad/zarr/{name}"' in r.text, name
    r = vserver.get(store_path("ad.h5ad") + "/zarr/obs/cat")
    assert r.status_code == 200
    assert 'href="/v1/stores/ad.h5ad/zarr/obs/cat/codes/"' in r.text
    r = vserver.get(store_path("ad.h5ad") + "/zarr/obs/cat/codes/")
    assert ".zarray" in r.text
    assert_problem(vserver.get(store_path("ad.h5ad") + "/zarr/nope/"), 404)


# ------------------------------------------------------------ anndata, mudata, treedata
@pytest.mark.parametrize("store", AD_STORES)
def test_anndata_read_zarr_equals_read_h5ad(vserver, vroot, store):
    import anndata as ad
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = ad.read_zarr(view_url(vserver, store))
        exp = ad.read_h5ad(vroot / store)
    assert_adata_equal(got, exp)


@pytest.mark.parametrize("store", MU_STORES)
def test_mudata_read_zarr_equals_read_h5mu(vserver, vroot, store):
    import mudata as md
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = md.read_zarr(view_url(vserver, store))
        exp = md.read_h5mu(vroot / store)
    assert list(got.mod) == list(exp.mod)
    pd.testing.assert_frame_equal(got.obs, exp.obs)
    pd.testing.assert_frame_equal(got.var, exp.var)
    for m in exp.mod:
        assert_adata_equal(got[m], exp[m])
    for k in exp.obsmap:
        np.testing.assert_array_equal(got.obsmap[k], exp.obsmap[k])


def test_html_escapes_nothing_the_view_names(vserver):
    """Names with spaces, commas and non-ASCII are keys of the view and
    links of its index."""
    k = "names with space, comma é/a b,c ü"
    assert vserver.get(key_path("exotic.h5", k + "/.zarray")).json()["shape"] == [3]
    assert np.frombuffer(_chunk(vserver, "exotic.h5", k + "/0"), "<i8").tolist() == [0, 1, 2]
    r = vserver.get(key_path("exotic.h5", "names with space, comma é") + "/")
    assert "a b,c ü/" in r.text


# ------------------------------------------------------------ bad input
def test_corrupt_chunks_are_422_and_serving_goes_on(vserver):
    for k in ("lzf/0", "shuffle_gzip/0", "fletcher/0", "scaleoffset/0"):
        assert_problem(vserver.get(key_path("broken.h5", k)), 422)
    for k in ("lzf/1", "shuffle_gzip/3", "fletcher/2", "fine/0"):
        assert vserver.get(key_path("broken.h5", k)).status_code == 200, k
    for k in ("scaleoffset/1", "scaleoffset/3"):  # the chunks not overwritten decode
        got = np.frombuffer(_chunk(vserver, "broken.h5", k), "<i4")
        i = int(k[-1])
        assert got.tolist() == [v % 97 for v in range(i * 100, i * 100 + 100)], k
    # the native routes read through the same check (h5grove's data route)
    grove = "/h5grove/data/?file=broken.h5&path=/scaleoffset&selection="
    assert_problem(vserver.get(grove + "0:5"), 422)
    assert vserver.get(grove + "100:105").json() == [3, 4, 5, 6, 7]
    assert vserver.get(key_path("ad.h5ad", ".zgroup")).status_code == 200
    assert vserver.alive()


def test_unknown_filter_is_422_naming_it(vserver):
    """A dataset whose chunks went through a filter no library here knows
    is listed (its .zarray is what HDF5 says), and its chunks are 422 with
    a detail saying the filter is missing; serving goes on."""
    assert vserver.get(key_path("broken.h5", "unknown_filter/.zarray")).json()["shape"] == [200]
    for k in ("unknown_filter/0", "unknown_filter/1"):
        body = assert_problem(vserver.get(key_path("broken.h5", k)), 422)
        assert "filter" in body["detail"] and "not registered" in body["detail"], body
    assert vserver.get(key_path("broken.h5", "fine/0")).status_code == 200
    assert vserver.alive()


def test_compressed_fixtures_are_what_they_are_named(vroot):
    """The stores of the equality tests above are compressed as named: every
    chunked dataset of the gzip .h5mu deflated, of the LZF .h5td LZF, of the
    shuffled .h5ad shuffled and deflated (and most datasets chunked)."""
    for store, want in (("mu_gzip.h5mu", {"compression": "gzip"}), ("td_lzf.h5td", {"compression": "lzf"}),
                        ("ad_shuffle.h5ad", {"compression": "gzip", "shuffle": True})):
        seen = []
        with h5py.File(vroot / store) as f:
            f.visititems(lambda name, obj: seen.append((name, obj.chunks, obj.compression, obj.shuffle))
                         if isinstance(obj, h5py.Dataset) else None)
        chunked = [d for d in seen if d[1]]
        assert len(chunked) > len(seen) / 2, (store, seen)
        for name, _, compression, shuffle in chunked:
            assert compression == want["compression"] and shuffle == want.get("shuffle", False), (store, name)


# ------------------------------------------------------------ TreeData's trees
def _zarr_takes(name: str) -> bool:
    """Whether zarr takes name for a node (treedata.write_zarr refuses a '/')."""
    return bool(name) and not name.startswith(".") and "/" not in name and "\\" not in name


def zarr_nameable(t):
    """TreeData t without the trees and attribute keys whose names zarr does
    not take (the view leaves them out; label's obs column made again from
    the trees kept), and what was left out: (axis, tree) and (axis, tree,
    "node" or "edge", key)."""
    import treedata as td
    dropped, trees = set(), {}
    for axis in ("obst", "vart"):
        trees[axis] = {}
        for key, g in getattr(t, axis).items():
            if not _zarr_takes(key):
                dropped.add((axis, key))
                continue
            g = g.copy()
            for side, items in (("node", g.nodes), ("edge", g.edges)):
                for el in items:
                    for k in [k for k in items[el] if not _zarr_takes(k)]:
                        del items[el][k]
                        dropped.add((axis, key, side, k))
            trees[axis][key] = g
    obs = t.obs.drop(columns=[t.label]) if t.label in t.obs else t.obs
    kept = td.TreeData(X=t.X, obs=obs, var=t.var, layers=dict(t.layers), obst=trees["obst"], vart=trees["vart"],
                       label=t.label, alignment=t.alignment, allow_overlap=t.allow_overlap)
    return kept, dropped


SLASH_LEFT_OUT = {("obst", V.SLASH_TREE), ("obst", "tree1", "node", V.SLASH_NODE_ATTR)}


@pytest.mark.parametrize("store", TD_STORES)
def test_treedata_read_zarr_equals_read_h5td(vserver, vroot, store):
    """treedata.read_zarr of the view equals read_h5td of the file (trees
    in obst and vart; obs values with slashes), but for the tree and the
    node attribute whose names hold a '/', which zarr cannot name: those are
    left out (and the obs column of the label says so)."""
    import treedata as td
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = td.read_zarr(view_url(vserver, store))
        exp, dropped = zarr_nameable(td.read_h5td(vroot / store))
    assert dropped == SLASH_LEFT_OUT
    assert len(exp.vart) == 1 and any("/" in v for v in exp.obs["path"]) and "genes/root" in exp.vart["genes"]
    np.testing.assert_array_equal(got.X, exp.X)
    # (the layers' keys of anndata 0.13 list a None as well)
    assert [k for k in got.layers if k is not None] == [k for k in exp.layers if k is not None] == ["above half"]
    np.testing.assert_array_equal(got.layers["above half"], exp.layers["above half"])
    pd.testing.assert_frame_equal(got.obs, exp.obs)
    pd.testing.assert_frame_equal(got.var, exp.var)
    assert (got.label, got.alignment, got.allow_overlap) == (exp.label, exp.alignment, exp.allow_overlap)
    assert_trees_equal(dict(got.obst), dict(exp.obst))
    assert_trees_equal(dict(got.vart), dict(exp.vart))


def _texts(values) -> list:
    """JSON texts of an attribute column, parsed ("" stays: the absent mark)."""
    return [json.loads(v) if v != "" else "" for v in (str(x) for x in values)]


def test_names_zarr_cannot_take_are_left_out_with_a_reason(vserver):
    """The keys of a tree or a node attribute whose name holds a '/' are 404
    with a detail naming what was left out and why; the rest of the tree
    is served."""
    for key, what in ((f"obst/{V.SLASH_TREE}/nodes/.zarray", f"tree '{V.SLASH_TREE}'"),
                      (f"obst/{V.SLASH_TREE}/.zgroup", f"tree '{V.SLASH_TREE}'"),
                      (f"obst/tree1/node_attrs/{V.SLASH_NODE_ATTR}/.zarray",
                       f"node attribute '{V.SLASH_NODE_ATTR}'")):
        body = assert_problem(vserver.get(key_path("td.h5td", key)), 404)
        assert what in body["detail"] and "zarr cannot take its name" in body["detail"], body
    assert vserver.get(key_path("td.h5td", "obst/tree1/node_attrs/depth/.zarray")).status_code == 200
    assert_problem(vserver.get(key_path("td.h5td", "obst/lineage/.zgroup")), 404)


@pytest.mark.parametrize("store", TD_STORES)
def test_trees_are_treedatas_columnar_zarr_layout(vserver, vroot, tmp_path, store):
    """obst/vart of the view hold, key by key, what treedata writes to zarr
    for the same TreeData (less the names zarr cannot take, which it refuses
    to write): the groups, their attributes, the arrays, their dtypes and
    values (attribute texts compared as the JSON they hold)."""
    import treedata as td
    import zarr
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        zarr_nameable(td.read_h5td(vroot / store))[0].write_zarr(tmp_path / "td.zarr")
        here = zarr.open_group(tmp_path / "td.zarr", mode="r")
    there = open_remote(vserver, store)
    assert list(here["vart"].keys()) == ["genes"]
    for axis in ("obst", "vart"):
        h_arrays, h_groups = zarr_tree(here[axis])
        t_arrays, t_groups = zarr_tree(there[axis])
        assert sorted(t_groups) == sorted(h_groups), axis
        assert sorted(t_arrays) == sorted(h_arrays), axis
        assert dict(there[axis].attrs) == dict(here[axis].attrs)
        for g in h_groups:
            assert dict(there[axis][g].attrs) == dict(here[axis][g].attrs), g
        for p, h in h_arrays.items():
            t = t_arrays[p]
            assert dict(t.attrs) == dict(h.attrs), p
            exp, got = h[...], t[...]
            assert got.shape == exp.shape, p
            if exp.dtype.kind in "OUT":
                if "_attrs/" in p:
                    assert _texts(got.ravel()) == _texts(exp.ravel()), p
                else:
                    assert [str(v) for v in got.ravel()] == [str(v) for v in exp.ravel()], p
            else:
                assert got.dtype == exp.dtype, p
                np.testing.assert_array_equal(got, exp, err_msg=p)
    # every kind of column is there: native, JSON texts, explicit nulls
    assert {"tree1/node_attrs/depth", "tree1/node_attrs/note", "tree1/node_attrs/tags",
            "tree1/edge_attrs/length", "tree1/edge_attrs/weird", "second tree/edges"} <= \
        set(zarr_tree(there["obst"])[0])
    assert there["obst/tree1/node_attrs/depth"].dtype == np.int64


# ------------------------------------------------------------ HTTP semantics of the view's keys
# a chunk sent from the file (sendfile), a chunk made in memory (strings),
# a document made in memory
# anndata 0.13 (pandas 3) writes a string obs index as a nullable string array
# (a group with values and mask); anndata 0.12 (the Python 3.11 set) as a plain
# string array.
OBS_INDEX = ("obs/_index/values" if tuple(int(x) for x in __import__("anndata").__version__.split(".")[:2]) >= (0, 13)
             else "obs/_index")
# and keys of zarr-csc/: a chunk made from the column index, a document
HTTP_KEYS = [("exotic.h5", "layouts/contiguous_1d/1", "zarr"), ("exotic.h5", "layouts/gzip/0.0", "zarr"),
             ("ad.h5ad", OBS_INDEX + "/0", "zarr"), ("ad.h5ad", "obs/cat/codes/.zarray", "zarr"),
             ("ad.h5ad", ".zmetadata", "zarr"), ("td.h5td", "obst/tree1/nodes/0", "zarr"),
             ("ad_csr.h5ad", "X/indices/0", "zarr-csc"), ("ad_csr.h5ad", "X/.zattrs", "zarr-csc")]


@pytest.mark.parametrize("store,key,prefix", HTTP_KEYS)
def test_head_range_and_validators_as_on_zarr_keys(vserver, store, key, prefix):
    path = key_path(store, key, prefix)
    r = vserver.get(path, _headers={"Accept-Encoding": "gzip, zstd"})
    assert r.status_code == 200
    if key != ".zmetadata":  # keys are never re-encoded; a built .zmetadata may be, as on .zarr stores
        assert "Content-Encoding" not in r.headers
    r = vserver.get(path, _headers={"Accept-Encoding": "identity"})
    body = r.content
    assert r.headers["Accept-Ranges"] == "bytes" and r.headers["Cache-Control"] == "no-cache"
    etag, lm = r.headers["ETag"], r.headers["Last-Modified"]
    assert etag.startswith('"') and lm
    h = vserver.head(path, _headers={"Accept-Encoding": "identity"})
    assert h.status_code == 200 and not h.content
    assert int(h.headers["Content-Length"]) == len(body) and h.headers["ETag"] == etag
    # one range, a suffix, an open end, several, one outside
    n = len(body)
    for spec, first, last in (("bytes=1-5", 1, 5), (f"bytes=-{min(4, n)}", n - min(4, n), n - 1),
                              (f"bytes={n - 2}-", n - 2, n - 1)):
        p = vserver.get(path, _headers={"Range": spec})
        assert p.status_code == 206, (spec, p.text)
        assert p.content == body[first:last + 1], spec
        assert p.headers["Content-Range"] == f"bytes {first}-{last}/{n}"
    m = vserver.get(path, _headers={"Range": "bytes=0-1,3-4"})
    assert m.status_code == 206 and m.headers["Content-Type"].startswith("multipart/byteranges")
    assert body[0:2] in m.content and body[3:5] in m.content
    bad = vserver.get(path, _headers={"Range": f"bytes={n + 10}-"})
    assert_problem(bad, 416)
    assert bad.headers["Content-Range"] == f"bytes */{n}"
    assert vserver.get(path, _headers={"Range": "bytes=9-0"}).content == body  # malformed: ignored
    # conditionals with the key's own validators
    assert vserver.get(path, _headers={"If-None-Match": etag}).status_code == 304
    assert vserver.get(path, _headers={"If-None-Match": '"other"'}).status_code == 200
    assert vserver.get(path, _headers={"If-Modified-Since": lm}).status_code == 304
    assert vserver.get(path, _headers={"If-Match": etag}).status_code == 200
    assert_problem(vserver.get(path, _headers={"If-Match": '"other"'}), 412)
    stale = vserver.get(path, _headers={"Range": "bytes=0-3", "If-Range": '"other"'})
    assert stale.status_code == 200 and stale.content == body
    fresh = vserver.get(path, _headers={"Range": "bytes=0-3", "If-Range": etag})
    assert fresh.status_code == 206 and fresh.content == body[:4]


@pytest.mark.parametrize("prefix", ["zarr", "zarr-csc"])
def test_cors_and_methods_as_on_zarr_keys(vserver, prefix):
    path = key_path("ad_csr.h5ad", "X/indptr/0" if prefix == "zarr-csc" else "obs/cat/codes/0", prefix)
    r = vserver.get(path, _headers={"Origin": "http://viewer.example"})
    assert r.headers["Access-Control-Allow-Origin"] == "*"
    pre = vserver.options(path, _headers={"Origin": "http://viewer.example",
                                          "Access-Control-Request-Method": "GET",
                                          "Access-Control-Request-Headers": "range"})
    assert pre.status_code == 204
    assert "GET" in pre.headers["Access-Control-Allow-Methods"]
    post = vserver.post(path, {})
    assert_problem(post, 405)
    assert "POST" not in post.headers["Allow"]
    # parameters a key does not use are ignored (signed, cache-busting URLs)
    assert vserver.get(path, token="abc", v="3").content == r.content


def test_a_replaced_file_is_a_new_view(vserver, vroot):
    """Keys follow the file: a store replaced on disk answers from its new
    version with new validators."""
    import shutil
    src = vroot / "ad.h5ad"
    dst = vroot / "swap.h5ad"
    shutil.copyfile(vroot / "ad_csr.h5ad", dst)
    k = key_path("swap.h5ad", "X/.zattrs")
    first = vserver.get(k)
    assert first.json()["encoding-type"] == "csr_matrix"
    tmp = vroot / "swap.tmp"
    shutil.copyfile(src, tmp)
    tmp.rename(dst)
    second = vserver.get(k)
    assert second.json()["encoding-type"] == "array"
    assert second.headers["ETag"] != first.headers["ETag"]
    assert vserver.get(k, _headers={"If-None-Match": first.headers["ETag"]}).status_code == 200


def test_the_view_obeys_tokens(server_factory, vroot, tmp_path):
    """With --auth-file the view's keys need a token granted the store, as
    every store route does: no token 401, another store's token 404 (as a
    store that is not there), the right token 200 and zarr-python reads
    with it."""
    import hashlib
    import zarr
    tok, other = "view-token-1", "view-token-2"
    auth = tmp_path / "tokens"
    auth.write_text(f"{hashlib.sha256(tok.encode()).hexdigest()}  ad.h5ad\n"
                    f"{hashlib.sha256(other.encode()).hexdigest()}  mu.h5mu\n")
    s = server_factory(vroot, "--auth-file", str(auth))
    path = key_path("ad.h5ad", "obs/cat/codes/0")
    assert_problem(s.get(path), 401)
    assert_problem(s.get(key_path("ad.h5ad", ".zmetadata")), 401)
    assert_problem(s.get(path, _headers={"Authorization": f"Bearer {other}"}), 404)
    assert_problem(s.get(store_path("ad.h5ad") + "/zarr/", _headers={"Authorization": f"Bearer {other}"}), 404)
    assert s.get(path, _headers={"Authorization": f"Bearer {tok}"}).status_code == 200
    assert s.get(path, access_token=tok).status_code == 200
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        g = zarr.open_group(view_url(s, "ad.h5ad"), mode="r", zarr_format=2,
                            storage_options={"headers": {"Authorization": f"Bearer {tok}"}})
        assert "obs" in g and g["obs/i8"][...].shape == (50,)


# ------------------------------------------------------------ zarr-csc: CSR matrices as CSC
CSR_ELEMENTS = {"ad_csr.h5ad": ["X", "layers/counts", "obsp/distances", "raw/X"],
                "ad.h5ad": ["layers/counts", "obsp/distances", "raw/X"]}


@pytest.mark.parametrize("store", sorted(CSR_ELEMENTS))
def test_zarr_csc_arrays_are_the_csc_of_each_csr_matrix(vserver, vroot, store):
    """Under zarr-csc/ every CSR matrix is a csc_matrix group whose indptr,
    indices and data equal scipy's CSC of the matrix (from the column
    index); everything else is the zarr view's."""
    import anndata as ad
    remote = open_remote(vserver, store, prefix="zarr-csc")
    plain = open_remote(vserver, store)
    with h5py.File(vroot / store) as f:
        for elem in CSR_ELEMENTS[store]:
            g = f[elem]
            assert g.attrs["encoding-type"] == "csr_matrix"
            exp = ad.io.read_elem(g).tocsc()
            r = remote[elem]
            assert r.attrs["encoding-type"] == "csc_matrix", elem
            assert list(r.attrs["shape"]) == list(g.attrs["shape"]), elem
            assert sorted(r.keys()) == ["data", "indices", "indptr"]
            np.testing.assert_array_equal(r["indptr"][...], exp.indptr, err_msg=elem)
            np.testing.assert_array_equal(r["indices"][...], exp.indices, err_msg=elem)
            np.testing.assert_array_equal(r["data"][...], exp.data, err_msg=elem)
            assert r["data"].dtype == exp.data.dtype and r["indices"].dtype == np.int32
            assert r["indptr"].dtype == np.int64
    # the rest is the view itself
    assert sorted(zarr_tree(remote)[0]) == sorted(zarr_tree(plain)[0])
    np.testing.assert_array_equal(remote["obsm/X_umap"][...], plain["obsm/X_umap"][...])


@pytest.mark.parametrize("store", ["ad_csr.h5ad", "ad.h5ad", "ad_csc.h5ad"])
def test_anndata_reads_zarr_csc_as_csc(vserver, vroot, store):
    """anndata.read_zarr on zarr-csc/ reads every CSR matrix as a CSC one
    with the same values; CSC and dense ones as they are."""
    import anndata as ad
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = ad.read_zarr(view_url(vserver, store, "zarr-csc"))
        exp = ad.read_h5ad(vroot / store)

    def as_csc(m):
        return m.tocsc() if sp.issparse(m) and m.format == "csr" else m

    for attr in ("layers", "obsp"):
        for k in [k for k in getattr(exp, attr).keys() if k is not None]:
            assert_matrix_equal(getattr(got, attr)[k], as_csc(getattr(exp, attr)[k]), f"{attr}/{k}")
    assert_matrix_equal(got.X, as_csc(exp.X), "X")
    assert_matrix_equal(got.raw.X, as_csc(exp.raw.X), "raw/X")
    pd.testing.assert_frame_equal(got.obs, exp.obs)
    np.testing.assert_array_equal(got.obsm["X_umap"], exp.obsm["X_umap"])


def test_zarr_csc_reads_one_gene_with_small_range_reads(vserver, vroot):
    """A Vitessce-style gene read of genes.h5ad (a CSR X whose CSC data and
    indices span many chunks): indptr, then the gene's range of indices and
    data; the chunks fetched are exactly those of the gene's slice, a small
    part of the matrix's."""
    import anndata as ad
    store = "genes.h5ad"
    remote = open_remote(vserver, store, prefix="zarr-csc")
    exp = ad.read_h5ad(vroot / store).X.tocsc()
    g = V.GENES_SHAPE[1] // 2 + 1
    lo, hi = int(exp.indptr[g]), int(exp.indptr[g + 1])
    grids = {}
    for part in ("data", "indices"):
        meta = vserver.get(key_path(store, f"X/{part}/.zarray", "zarr-csc")).json()
        assert meta["shape"] == [exp.nnz]
        grids[part] = (meta["chunks"][0], -(-exp.nnz // meta["chunks"][0]))
        assert grids[part][1] >= 8, (part, meta)  # the matrix is many chunks
    offset = vserver.log_offset()
    indptr = remote["X/indptr"][...]
    assert (int(indptr[g]), int(indptr[g + 1])) == (lo, hi)
    np.testing.assert_array_equal(remote["X/indices"][lo:hi], exp.indices[lo:hi])
    np.testing.assert_array_equal(remote["X/data"][lo:hi], exp.data[lo:hi])
    gets = [ln for ln in vserver.log_lines_since(offset)
            if ln.startswith("GET ") and not ln.startswith("GET /healthz ")]
    assert gets and all(" 200 " in ln for ln in gets), gets
    paths = [ln.split()[1] for ln in gets]
    prefix = store_path(store) + "/zarr-csc/X/"
    assert all(p.startswith(prefix) for p in paths), paths
    for part, (chunk, count) in grids.items():
        read = {p[len(prefix + part) + 1:] for p in paths if p.startswith(f"{prefix}{part}/")}
        assert read == {str(i) for i in range(lo // chunk, (hi - 1) // chunk + 1)}, (part, read)
        assert len(read) <= count / 4, (part, read, count)


def test_zarr_csc_on_zarr_stores_and_missing_keys(vserver, vroot, tmp_path):
    assert_problem(vserver.get(key_path("ad_csr.h5ad", "X/data/99", "zarr-csc")), 404)
    assert_problem(vserver.get(key_path("ad_csr.h5ad", "X/nope/.zarray", "zarr-csc")), 404)
    r = vserver.get(key_path("ad_csr.h5ad", "X/indptr/0", "zarr-csc"))
    assert r.status_code == 200 and r.headers["ETag"]
    assert vserver.get(key_path("ad_csr.h5ad", "X/indptr/0", "zarr-csc"),
                       _headers={"If-None-Match": r.headers["ETag"]}).status_code == 304
    part = vserver.get(key_path("ad_csr.h5ad", "X/indptr/0", "zarr-csc"), _headers={"Range": "bytes=8-15"})
    assert part.status_code == 206 and part.content == r.content[8:16]
    html = vserver.get(store_path("ad_csr.h5ad") + "/zarr-csc/X/")
    assert 'href="/v1/stores/ad_csr.h5ad/zarr-csc/X/indptr/"' in html.text
    # a zarr store has its own keys under zarr/ only
    import zarr
    zarr.open_group(vroot / "plain.zarr", mode="w", zarr_format=2)
    assert_problem(vserver.get(key_path("plain.zarr", ".zgroup", "zarr-csc")), 404,
                   detail_contains="zarr/")


# ------------------------------------------------------------ zarrita.js
ZARRITA_CASES = [
    ("ad.h5ad", "zarr", "X", ()), ("ad.h5ad", "zarr", "X", (10, 20)), ("ad.h5ad", "zarr", "obs/i64", ()),
    ("ad.h5ad", "zarr", "obs/cat/codes", ()), ("ad.h5ad", "zarr", OBS_INDEX, ()),
    ("ad_gzip.h5ad", "zarr", "obsm/X_umap", ()), ("ad_lzf.h5ad", "zarr", "layers/dense i32", ()),
    ("exotic.h5", "zarr", "layouts/gzip_be", ()), ("exotic.h5", "zarr", "layouts/contiguous_2d", (860, 880)),
    ("exotic.h5", "zarr", "layouts/shuffle_gzip", ()), ("exotic.h5", "zarr", "types/be_i2", ()),
    ("exotic.h5", "zarr", "types/bool", ()), ("exotic.h5", "zarr", "layouts/fill_int", ()),
    ("exotic.h5", "zarr", "types/vlen_utf8", ()),
    ("ad_csr.h5ad", "zarr-csc", "X/indptr", ()), ("ad_csr.h5ad", "zarr-csc", "X/indices", ()),
    ("ad_csr.h5ad", "zarr-csc", "X/data", ()), ("ad_csr.h5ad", "zarr-csc", "obsm/X_umap", ()),
    ("ad_csr.h5ad", "zarr", "X/indptr", ()), ("td.h5td", "zarr", "obst/tree1/edges", ()),
]


@pytest.mark.parametrize("store,prefix,path,rows", ZARRITA_CASES)
def test_zarrita_reads_the_view(vserver, node_clients, store, prefix, path, rows):
    """zarrita.js reads the same arrays through both prefixes as zarr-python
    does (zarr-python itself is held to h5py above)."""
    remote = open_remote(vserver, store, prefix=prefix)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exp = remote[path][slice(*rows) if rows else slice(None)]
    got = zarrita_read(node_clients, view_url(vserver, store, prefix), path, *rows)
    assert got["shape"] == list(exp.shape), (path, got["shape"])
    if exp.dtype.kind in "OUT":
        assert got["data"] == [str(v) for v in exp.ravel()], path
        return
    conv = int if exp.dtype.kind in "iu" else float if exp.dtype.kind == "f" else bool
    data = np.array([conv(v) for v in got["data"]], dtype=exp.dtype).reshape(exp.shape)
    np.testing.assert_array_equal(data, exp, err_msg=path)


def test_store_summary_says_which_prefix_for_which_client(vserver, vroot):
    """The summary names the zarr prefixes (relative to the store's URL):
    zarr/ for zarr-python, zarrita.js and the read_zarr of anndata, mudata
    and treedata; zarr-csc/ for viewers that read genes by column."""
    import zarr
    js = vserver.get(store_path("ad_csr.h5ad")).json()
    assert js["zarr"] == {"prefix": "zarr/", "csc_prefix": "zarr-csc/", "hdf5_view": True, "zarr_format": 2}
    for p in (js["zarr"]["prefix"], js["zarr"]["csc_prefix"]):
        assert vserver.get(store_path("ad_csr.h5ad") + "/" + p + ".zgroup").json() == {"zarr_format": 2}
    zarr.open_group(vroot / "summary.zarr", mode="w", zarr_format=2).attrs.update(
        {"encoding-type": "anndata", "encoding-version": "0.1.0"})
    js = vserver.get(store_path("summary.zarr")).json()
    assert js["zarr"] == {"prefix": "zarr/", "csc_prefix": None, "hdf5_view": False, "zarr_format": 2}


def test_unreadable_trees_are_shown_as_the_string_they_are(vserver, vroot):
    """obst whose JSON does not parse stays the 0-d string it is in the
    view (treedata then fails as it fails on the file), and the version
    holding it is freed cleanly when the file is replaced."""
    import shutil
    store = "td_bad_trees.h5td"
    z = vserver.get(key_path(store, "obst/.zarray"))
    assert z.status_code == 200 and z.json()["shape"] == [] and z.json()["dtype"] == "|O", z.text
    assert "obst/.zarray" in vserver.get(key_path(store, ".zmetadata")).json()["metadata"]
    assert_problem(vserver.get(key_path(store, "obst/tree1/.zgroup")), 404)
    tmp = vroot / "td_bad_trees.tmp"
    shutil.copyfile(vroot / "td.h5td", tmp)
    tmp.rename(vroot / store)
    for _ in range(3):
        assert vserver.get(key_path(store, "obst/tree1/.zgroup")).status_code == 200
    assert vserver.get(store_path("ad.h5ad")).status_code == 200
    assert vserver.alive()


def test_tree_attribute_columns_of_a_huge_tree(tmp_path, server_factory):
    """The attribute columns of a tree are made with one element's
    attributes parsed at a time: the build before held every edge's parsed
    attributes at once, and the view of a star of 200,000 edges grew the
    server by 70 MB (test_malformed's t0018, a huge tree, took the full
    corpus's plain server to 378 MB).  The columns hold the lengths."""
    from test_malformed import EXAMPLES, vm_hwm_kb
    from test_soak import is_asan
    from conftest import cellar_bin

    n = 200_000
    lengths = {f"x{i}": (i % 977) * 0.5 for i in range(n)}
    doc = {"lineage": {"edges": {"root": {k: {"length": v} for k, v in lengths.items()}},
                       "nodes": {"root": {}, **{k: {} for k in lengths}}}}
    path = tmp_path / "star.h5td"
    path.write_bytes((EXAMPLES / "lineage.h5td").read_bytes())
    with h5py.File(path, "r+") as f:
        attrs = dict(f["obst"].attrs)
        del f["obst"]
        f.create_dataset("obst", data=json.dumps(doc), dtype=h5py.string_dtype("utf-8"))
        f["obst"].attrs.update(attrs)
    s = server_factory(tmp_path)
    r = s.get(store_path("star.h5td", "obst", "lineage", "viewport"),
              x0=0, x1=1, y0=0, y1=1, max_nodes=10)
    assert r.status_code == 200, r.text  # the tree parsed, before the view's columns
    before = vm_hwm_kb(s.proc.pid)
    meta = s.get(key_path("star.h5td", ".zmetadata")).json()["metadata"]
    grew = vm_hwm_kb(s.proc.pid) - before
    z = meta["obst/lineage/edge_attrs/length/.zarray"]
    assert z["shape"] == [n] and z["dtype"] == "<f8", z
    got = np.concatenate([np.frombuffer(s.get(key_path("star.h5td", f"obst/lineage/edge_attrs/length/{c}"))
                                        .content, "<f8")
                          for c in range(-(-n // z["chunks"][0]))])[:n]
    np.testing.assert_array_equal(got, np.array(list(lengths.values())))
    if not is_asan(cellar_bin()):  # its quarantine keeps what was freed
        assert grew < 24 * 1024, f"the view's columns grew the server by {grew // 1024} MB"
