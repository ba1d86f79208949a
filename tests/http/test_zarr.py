"""Zarr stores: every foundation route answers on a `.zarr` store exactly as
on its HDF5 twin and as the Python libraries read it locally; the raw key
route `/v1/stores/{store}/zarr/{key}` (Range, validators, HEAD, built
.zmetadata, no escape from the store); and real zarr clients reading
through it: zarr-python 3 over fsspec HTTP, anndata.read_zarr on the
remote group, and zarrita.js under node.

The fixtures come from zarr_writers.py (anndata v2/v3 x sharding x
compressors, mudata, treedata), written into their own data root."""

from __future__ import annotations

import email.utils
import json
import os
import shutil
import time
import warnings
from pathlib import Path
from urllib.parse import quote

import numpy as np
import pandas as pd
import pytest

import zarr_writers as Z
from compare import check_frame_csv, check_frame_json, expected_dtype
from conftest import assert_json, assert_problem, store_path, zarrita_read

# writing the ~30 fixture stores takes 20-40 s on the 2-core machines (more
# under the sanitizers), inside the first test's time
pytestmark = pytest.mark.timeout(300)

HERE = Path(__file__).resolve().parent

# keys of the summary that name the file rather than describe its content
FILE_KEYS = {"name", "backend", "bytes", "mtime", "etag", "notes", "zarr"}


# ------------------------------------------------------------ fixtures
@pytest.fixture(scope="module")
def zdirs(tmp_path_factory):
    base = tmp_path_factory.mktemp("zarr")
    root, outside = base / "root", base / "outside"
    Z.write_all(root, outside)
    return root, outside


@pytest.fixture(scope="module")
def zroot(zdirs) -> Path:
    return zdirs[0]


@pytest.fixture(scope="module")
def zserver(zroot, server_factory):
    return server_factory(zroot)


@pytest.fixture(scope="module")
def zget(zserver):
    return zserver.get


class Local:
    """What the libraries read from each store of the zarr root, read once."""

    def __init__(self, root: Path):
        self.root = root
        self._cache = {}

    def __getitem__(self, name: str):
        if name not in self._cache:
            self._cache[name] = Z.read_local(self.root / name)
        return self._cache[name]

    def frame(self, name: str, group: str) -> pd.DataFrame:
        """A data frame (`obs`, `mod/rna/var`) as the library reads it.
        TreeData's reader re-derives the label column from the trees, so
        for TreeData the frame is what anndata reads from the element."""
        key = (name, "frame", group)
        if key in self._cache:
            return self._cache[key]
        if Z.BY_NAME[name].kind == "treedata":
            import anndata.io
            import zarr
            df = anndata.io.read_elem(zarr.open_group(self.root / name, mode="r")[group])
        else:
            obj = self[name]
            parts = group.split("/")
            if parts[0] == "mod":
                obj = obj[parts[1]]
            if parts[0] == "raw":
                obj = obj.raw
            df = getattr(obj, parts[-1])
        self._cache[key] = df
        return df

    def encodings(self, name: str, group: str) -> dict:
        key = (name, "enc", group)
        if key not in self._cache:
            self._cache[key] = Z.frame_encodings(self.root / name, group)
        return self._cache[key]


@pytest.fixture(scope="module")
def local(zroot) -> Local:
    return Local(zroot)


def frame_groups(s: Z.ZStore) -> list[str]:
    if s.kind == "mudata":
        return ["obs", "var", "mod/rna/obs", "mod/rna/var", "mod/prot/obs", "mod/prot/var"]
    if s.name.startswith("raw_csc"):
        return ["obs", "var", "raw/var"]
    return ["obs", "var"]


FRAME_CASES = [(s.name, g) for s in Z.ALL_STORES for g in frame_groups(s)]
STORE_NAMES = [s.name for s in Z.ALL_STORES]


def group_path(store: str, group: str) -> str:
    return store_path(store, *group.split("/"))


# ------------------------------------------------------------ the fixtures themselves
def test_fixtures_are_what_they_claim(zroot):
    """Each store has the format, sharding and compressor its name says, as
    written on disk by the writers (so the matrix of cases is real)."""
    for s in Z.ALL_STORES:
        path = zroot / s.name
        if s.zarr_format == 3:
            assert (path / "zarr.json").is_file(), s.name
            assert not (path / ".zgroup").exists(), s.name
        else:
            assert (path / ".zgroup").is_file() and not (path / "zarr.json").exists(), s.name
        if s not in Z.AD_STORES:
            continue
        x = path / "X"
        if s.zarr_format == 2:
            meta = json.loads((x / ".zarray").read_text())
            comp = meta["compressor"]
            # anndata's own default for v2 is blosc (lz4, shuffle)
            exp = {"default": "blosc", "blosc": "blosc", "gzip": "gzip", "zstd": "zstd",
                   "lz4": "lz4", "none": None}[s.compressor]
            assert (comp["id"] if comp else None) == exp, (s.name, comp)
            assert meta["chunks"] == list(Z.CHUNKS)
        else:
            meta = json.loads((x / "zarr.json").read_text())
            codecs = meta["codecs"]
            if s.sharded:
                assert codecs[0]["name"] == "sharding_indexed", s.name
                assert codecs[0]["configuration"]["chunk_shape"] == list(Z.CHUNKS)
                assert meta["chunk_grid"]["configuration"]["chunk_shape"] == [20, 6]
                codecs = codecs[0]["configuration"]["codecs"]
            else:
                assert all(c["name"] != "sharding_indexed" for c in codecs), s.name
                assert meta["chunk_grid"]["configuration"]["chunk_shape"] == list(Z.CHUNKS)
            names = [c["name"] for c in codecs if c["name"] not in ("bytes", "transpose")]
            exp = {"default": ["zstd"], "blosc": ["blosc"], "gzip": ["gzip"], "zstd": ["zstd"],
                   "lz4": ["numcodecs.lz4"], "none": []}[s.compressor]
            assert names == exp, (s.name, names)
    assert not (zroot / Z.NO_ZMETA / ".zmetadata").exists()
    assert not (zroot / "mu_v2.zarr" / ".zmetadata").exists()  # mudata does not consolidate v2
    assert "consolidated_metadata" not in json.loads((zroot / Z.V3_UNCONSOLIDATED / "zarr.json").read_text()) \
        or json.loads((zroot / Z.V3_UNCONSOLIDATED / "zarr.json").read_text())["consolidated_metadata"] is None


# ------------------------------------------------------------ foundation routes
def test_store_list_names_every_zarr_store(zget):
    js = assert_json(zget("/v1/stores"))
    got = {s["name"]: s for s in js["stores"]}
    for s in Z.ALL_STORES:
        assert s.name in got, s.name
        assert got[s.name]["backend"] == "zarr" and got[s.name]["kind"] == s.kind, got[s.name]
    assert got[Z.AD_H5]["backend"] == "hdf5"


@pytest.mark.parametrize("store", STORE_NAMES)
def test_summary_equals_hdf5_twin(zget, local, store):
    s = Z.BY_NAME[store]
    js = assert_json(zget(store_path(store)))
    twin = assert_json(zget(store_path(s.twin)))
    assert js["backend"] == "zarr" and js["kind"] == s.kind and js["name"] == store
    strip = lambda d: {k: v for k, v in d.items() if k not in FILE_KEYS}  # noqa: E731
    assert strip(js) == strip(twin)
    obj = local[store]
    assert js["shape"] == list(obj.shape)
    assert js["obs"]["columns"] == list(obj.obs.columns)
    assert js["var"]["columns"] == list(obj.var.columns)
    if s.kind == "anndata":
        for key in ("obsm", "varm", "obsp", "layers", "uns"):
            # anndata 0.13 lists `None` among layers (an alias of X)
            exp = sorted(k for k in getattr(obj, key).keys() if k is not None)
            assert sorted(js[key]) == exp, key
    if s.kind == "mudata":
        assert [m["name"] for m in js["mod"]] == list(obj.mod)
        assert [m["shape"] for m in js["mod"]] == [list(obj[m].shape) for m in obj.mod]


@pytest.mark.parametrize("store,group", FRAME_CASES)
def test_frame_json_equals_local_read_and_twin(zget, local, store, group):
    js = assert_json(zget(group_path(store, group)))
    check_frame_json(js, local.frame(store, group), local.encodings(store, group))
    twin = assert_json(zget(group_path(Z.BY_NAME[store].twin, group)))
    assert js == twin


@pytest.mark.parametrize("store,group", FRAME_CASES)
def test_frame_csv_and_codes_equal_twin(zget, local, store, group):
    twin = Z.BY_NAME[store].twin
    r = zget(group_path(store, group), format="csv")
    assert r.status_code == 200, r.text
    check_frame_csv(r.content.decode("utf-8"), local.frame(store, group))
    assert r.content == zget(group_path(twin, group), format="csv").content
    codes = assert_json(zget(group_path(store, group), categorical="codes", rows="3:40:3"))
    assert codes == assert_json(zget(group_path(twin, group), categorical="codes", rows="3:40:3"))


@pytest.mark.parametrize("store,group", FRAME_CASES)
def test_schema_equals_twin(zget, local, store, group):
    js = assert_json(zget(group_path(store, group) + "/schema"))
    df = local.frame(store, group)
    enc = local.encodings(store, group)
    assert js["n_rows"] == len(df)
    assert [c["name"] for c in js["columns"]] == list(df.columns)
    assert [c["dtype"] for c in js["columns"]] == [expected_dtype(df[c], enc[c]) for c in df.columns]
    assert [c["encoding"] for c in js["columns"]] == [enc[c][0] for c in df.columns]
    assert js == assert_json(zget(group_path(Z.BY_NAME[store].twin, group) + "/schema"))


def test_frame_selections_equal_twin(zget, local):
    """Row selections by position and by name, column subsets, bin/npy."""
    store = Z.V3_SHARDED
    df = local.frame(store, "obs")
    names = [df.index[5], df.index[3], df.index[11]]
    for params in ({"rows": "-7:"}, {"rows": "40,2,17"}, {"columns": "f32,cat,nstr"},
                   {"obs_names": names}, {"columns": "i64", "format": "bin"},
                   {"columns": "f64", "format": "npy"}):
        r = zget(store_path(store, "obs"), **params)
        t = zget(store_path(Z.AD_H5, "obs"), **params)
        assert r.status_code == 200 and t.status_code == 200, (params, r.text)
        assert r.content == t.content, params
    js = assert_json(zget(store_path(store, "obs"), obs_names=names, columns="i32"))
    assert js["data"]["i32"] == [int(v) for v in df.loc[names, "i32"]]


@pytest.mark.parametrize("store", [s.name for s in Z.MU_STORES])
def test_mudata_mod_and_maps_equal_twin(zget, local, store):
    twin = Z.MU_H5
    m = local[store]
    js = assert_json(zget(store_path(store, "mod")))
    assert js == assert_json(zget(store_path(twin, "mod")))
    assert [x["name"] for x in js["mod"]] == list(m.mod)
    for mod in m.mod:
        for route, params in (("obsmap", {}), ("varmap", {}), ("obsmap", {"rows": "20:45"}),
                              ("obsmap", {"mod_rows": "0:10"}), ("varmap", {"mod_rows": "1,2"})):
            got = assert_json(zget(store_path(store, route, mod), **params))
            assert got == assert_json(zget(store_path(twin, route, mod), **params)), (mod, route, params)
        got = assert_json(zget(store_path(store, "obsmap", mod)))
        assert got["obsmap"] == [int(v) for v in np.asarray(m.obsmap[mod]).ravel()]


ELEMENT_ROUTES = {
    "anndata": ["X", "X?rows=3:17&cols=1:5&format=npy", "X?layout=csr", "layers/counts",
                "layers/counts?layout=dense", "obsm/X_pca", "varm/loadings", "obsp/distances",
                "uns", "uns/params", "raw/X", "raw/X?cols=1:4&format=npy",
                "X?var_names=ENSG00002,ENSG00005"],
    "mudata": ["mod/rna/X", "mod/prot/X?rows=30:35", "uns"],
    "treedata": ["X", "obst", "obst/tree1", "obst/tree1?format=newick"],
}


@pytest.mark.parametrize("store", STORE_NAMES)
def test_element_routes_equal_twin(zserver, store):
    """The element routes beyond the foundation (matrices, uns, trees)
    answer byte for byte as on the HDF5 twin (errors: the same status)."""
    s = Z.BY_NAME[store]
    for path in ELEMENT_ROUTES[s.kind]:
        a = zserver.session.get(zserver.base + store_path(store) + "/" + path, timeout=30)
        b = zserver.session.get(zserver.base + store_path(s.twin) + "/" + path, timeout=30)
        assert a.status_code == b.status_code, (path, a.text[:300], b.text[:300])
        if a.status_code == 200:
            assert a.content == b.content, path


def test_foundation_errors_equal_twin(zget):
    for path in ("obs?columns=nope", "mod", "obsmap/rna", "mod/nope/obs", "obs?rows=900"):
        seg, _, q = path.partition("?")
        params = dict([q.split("=")]) if q else {}
        r = zget(store_path(Z.V2, *seg.split("/")), **params)
        t = zget(store_path(Z.AD_H5, *seg.split("/")), **params)
        assert r.status_code == t.status_code and r.status_code >= 400, (path, r.text)


# ------------------------------------------------------------ raw keys
def raw(store: str, key: str) -> str:
    """URL path of a raw key: each key segment percent-encoded whole."""
    return store_path(store) + "/zarr/" + "/".join(quote(k, safe="") for k in key.split("/"))


@pytest.mark.parametrize("store,key", [
    (Z.V2, ".zgroup"), (Z.V2, ".zattrs"), (Z.V2, ".zmetadata"), (Z.V2, "X/.zarray"),
    (Z.V2, "X/0.0"), (Z.V2, "X/4.2"), (Z.V2, "obs/name with space é/.zarray"),
    (Z.V3_SHARDED, "zarr.json"), (Z.V3_SHARDED, "X/zarr.json"), (Z.V3_SHARDED, "X/c/0/0"),
    (Z.V3_SHARDED, "X/c/2/1"), (Z.V3_CHUNKED, "X/c/4/2"), ("mu_v2.zarr", "mod/rna/X/.zarray"),
    ("td_v3.zarr", "obst/tree1/zarr.json"),
])
def test_raw_key_bytes_and_headers(zserver, zroot, store, key):
    path = zroot / store / key
    data = path.read_bytes()
    r = zserver.get(raw(store, key))
    assert r.status_code == 200, r.text
    assert r.content == data
    assert int(r.headers["Content-Length"]) == len(data)
    meta = key.rsplit("/", 1)[-1] in (".zgroup", ".zattrs", ".zarray", ".zmetadata", "zarr.json")
    assert r.headers["Content-Type"] == ("application/json" if meta else "application/octet-stream")
    assert "Content-Encoding" not in r.headers
    assert r.headers["Accept-Ranges"] == "bytes"
    assert r.headers["Cache-Control"] == "no-cache"
    etag = r.headers["ETag"]
    assert etag.startswith('"') and etag.endswith('"')
    lm = email.utils.parsedate_to_datetime(r.headers["Last-Modified"]).timestamp()
    assert lm == int(path.stat().st_mtime)
    # the key's validator is not the store's
    assert etag != zserver.get(store_path(store)).headers["ETag"]
    h = zserver.head(raw(store, key))
    assert h.status_code == 200 and h.content == b""
    assert int(h.headers["Content-Length"]) == len(data) and h.headers["ETag"] == etag


def test_raw_gzip_is_never_applied(zserver, zroot):
    """Stored bytes go out as stored even when the client takes gzip."""
    r = zserver.get(raw(Z.V2, ".zmetadata"), _headers={"Accept-Encoding": "gzip, zstd"})
    assert r.status_code == 200 and "Content-Encoding" not in r.headers
    assert r.content == (zroot / Z.V2 / ".zmetadata").read_bytes()


@pytest.mark.parametrize("spec,first,last", [
    ("bytes=0-9", 0, 9), ("bytes=5-", 5, None), ("bytes=-7", -7, None), ("bytes=3-3", 3, 3),
    ("bytes=10-100000", 10, None), ("bytes=-100000", 0, None), ("BYTES = 2-4", 2, 4),
    ("bytes=4-99999999999999999999999", 4, None), ("bytes=-99999999999999999999999", 0, None),
])
def test_raw_range(zserver, zroot, spec, first, last):
    key = "X/c/0/0"
    data = (zroot / Z.V3_SHARDED / key).read_bytes()
    size = len(data)
    r = zserver.raw(raw(Z.V3_SHARDED, key), headers={"Range": spec.replace("BYTES = ", "bytes=")})
    exp = data[first:] if last is None else data[first:last + 1]
    assert r.status_code == 206, r.text
    assert r.content == exp
    start = first % size if first < 0 else first
    assert r.headers["Content-Range"] == f"bytes {start}-{start + len(exp) - 1}/{size}"
    assert int(r.headers["Content-Length"]) == len(exp)
    assert r.headers["Accept-Ranges"] == "bytes" and "ETag" in r.headers


@pytest.mark.parametrize("spec", ["bytes=100000-", "bytes=100000-100010", "bytes=-0",
                                  "bytes=99999999999999999999999-", "bytes=18446744073709551615-",
                                  "bytes=100000-,200000-"])
def test_raw_range_unsatisfiable(zserver, zroot, spec):
    size = (zroot / Z.V3_SHARDED / "X/c/0/0").stat().st_size
    r = zserver.raw(raw(Z.V3_SHARDED, "X/c/0/0"), headers={"Range": spec})
    assert_problem(r, 416, detail_contains="X/c/0/0")
    assert r.headers["Content-Range"] == f"bytes */{size}"


@pytest.mark.parametrize("spec", ["items=0-5", "bytes=a-b", "bytes=5", "bytes=9-3", "bytes=0-1,a-b",
                                  "bytes=0-0," * 20 + "1-1"])
def test_raw_range_malformed_gives_whole_body(zserver, zroot, spec):
    """Another unit, a malformed spec (bytes=9-3 is one: RFC 9110 14.1.1),
    or more ranges than cellar answers in parts: the Range is ignored and
    the whole key comes back with 200 (RFC 9110 14.2)."""
    data = (zroot / Z.V2 / "X/0.0").read_bytes()
    r = zserver.raw(raw(Z.V2, "X/0.0"), headers={"Range": spec})
    assert r.status_code == 200 and r.content == data and "Content-Range" not in r.headers


def test_raw_several_ranges_are_multipart(zserver, zroot):
    """Several ranges: 206 multipart/byteranges, each part with its own
    Content-Range, in the order asked, as nginx answers (issue 16, item 5)."""
    data = (zroot / Z.V2 / "X/0.0").read_bytes()
    size = len(data)
    r = zserver.raw(raw(Z.V2, "X/0.0"), headers={"Range": "bytes=0-1, 4-5,-3"})
    assert r.status_code == 206
    ctype = r.headers["Content-Type"]
    assert ctype.startswith("multipart/byteranges; boundary=")
    boundary = ctype.split("boundary=", 1)[1].encode()
    assert int(r.headers["Content-Length"]) == len(r.content)
    assert "Content-Range" not in r.headers
    pieces = r.content.split(b"--" + boundary)
    assert pieces[0] == b"\r\n" and pieces[-1] == b"--\r\n"
    parts = []
    for piece in pieces[1:-1]:
        head, body = piece[2:].split(b"\r\n\r\n", 1)
        headers = dict(line.split(": ", 1) for line in head.decode().split("\r\n"))
        assert body.endswith(b"\r\n")
        parts.append((headers["Content-Range"], headers["Content-Type"], body[:-2]))
    assert parts == [
        (f"bytes 0-1/{size}", "application/octet-stream", data[0:2]),
        (f"bytes 4-5/{size}", "application/octet-stream", data[4:6]),
        (f"bytes {size - 3}-{size - 1}/{size}", "application/octet-stream", data[-3:]),
    ]
    # HEAD ignores Range (RFC 9110 14.2: it applies to GET).
    h = zserver.raw(raw(Z.V2, "X/0.0"), method="HEAD", headers={"Range": "bytes=0-1"})
    assert h.status_code == 200 and int(h.headers["Content-Length"]) == size


def test_raw_empty_file(zserver, zroot):
    (zroot / Z.SCRATCH / "X/c/4/2").write_bytes(b"")   # a chunk key of X
    r = zserver.get(raw(Z.SCRATCH, "X/c/4/2"))
    assert r.status_code == 200 and r.content == b"" and r.headers["Content-Length"] == "0"
    r = zserver.raw(raw(Z.SCRATCH, "X/c/4/2"), headers={"Range": "bytes=0-"})
    assert_problem(r, 416)
    assert r.headers["Content-Range"] == "bytes */0"


def test_raw_conditionals(zserver):
    url = raw(Z.V2, "X/1.1")
    r = zserver.get(url)
    etag, lm = r.headers["ETag"], r.headers["Last-Modified"]
    for headers in ({"If-None-Match": etag}, {"If-None-Match": f'"nope", W/{etag}'},
                    {"If-None-Match": "*"}, {"If-Modified-Since": lm}):
        nm = zserver.get(url, _headers=headers)
        assert nm.status_code == 304, headers
        assert nm.content == b"" and nm.headers["ETag"] == etag
    for headers in ({"If-None-Match": '"other"'},
                    {"If-Modified-Since": "Mon, 01 Jan 2001 00:00:00 GMT"},
                    # If-None-Match wins over If-Modified-Since
                    {"If-None-Match": '"other"', "If-Modified-Since": lm}):
        assert zserver.get(url, _headers=headers).status_code == 200, headers
    # the store's own ETag does not validate a key
    store_tag = zserver.get(store_path(Z.V2)).headers["ETag"]
    assert zserver.get(url, _headers={"If-None-Match": store_tag}).status_code == 200
    # If-Range: the range applies only while the validator holds
    assert zserver.get(url, _headers={"Range": "bytes=0-3", "If-Range": etag}).status_code == 206
    assert zserver.get(url, _headers={"Range": "bytes=0-3", "If-Range": lm}).status_code == 206
    r = zserver.get(url, _headers={"Range": "bytes=0-3", "If-Range": '"stale"'})
    assert r.status_code == 200 and len(r.content) == int(r.headers["Content-Length"]) > 4


def test_raw_rewritten_chunk_changes_its_etag(zserver, zroot):
    key = "X/c/1/1"
    path = zroot / Z.SCRATCH / key
    url = raw(Z.SCRATCH, key)
    first = zserver.get(url)
    other = zserver.get(raw(Z.SCRATCH, "X/c/0/0")).headers["ETag"]
    data = path.read_bytes()
    time.sleep(0.01)
    with open(path, "r+b") as f:      # in place: same inode
        f.write(data[::-1])
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 2_000_000_000))
    second = zserver.get(url)
    assert second.status_code == 200 and second.content == data[::-1]
    assert second.headers["ETag"] != first.headers["ETag"]
    assert zserver.get(url, _headers={"If-None-Match": first.headers["ETag"]}).status_code == 200
    assert zserver.get(url, _headers={"If-None-Match": second.headers["ETag"]}).status_code == 304
    assert zserver.get(raw(Z.SCRATCH, "X/c/0/0")).headers["ETag"] == other


@pytest.mark.parametrize("key", ["nope", "X/9.9", "X/c/9/9", "nope/", "X/9.9/"])
def test_raw_missing_key_is_404(zserver, key):
    for store in (Z.V2, Z.V3_SHARDED):
        assert_problem(zserver.get(raw(store, key.rstrip("/")) + ("/" if key.endswith("/") else "")), 404)


@pytest.mark.parametrize("key", ["X", "X/", "obs", "X/c"])
def test_raw_directory_is_its_index(zserver, zroot, key):
    """A directory is answered with its index where it exists (issue 16,
    item 1), a key that is none is 404."""
    for store in (Z.V2, Z.V3_SHARDED):
        r = zserver.get(raw(store, key.rstrip("/")) + ("/" if key.endswith("/") else ""))
        if (zroot / store / key.rstrip("/")).is_dir():
            assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/html")
            assert "<a href=" in r.text
        else:
            assert_problem(r, 404)


@pytest.mark.parametrize("path", [
    "/zarr/../../ad.h5ad", "/zarr/%2e%2e/ad.h5ad", "/zarr/X/%2e%2e/%2e%2e/ad.h5ad",
    "/zarr/%2e%2e%2fad.h5ad", "/zarr/X%2f.zarray", "/zarr//etc/passwd", "/zarr/%2fetc%2fpasswd",
    "/zarr/.", "/zarr/X/./.zarray", "/zarr/X%5c.zarray", "/zarr/.zgroup%00", "/zarr/%00",
    "/zarr/leak", "/zarr/leakdir/" + Z.OUTSIDE_SECRET, "/zarr/fifo", "/zarr/X/c/0%0a",
])
def test_raw_keys_cannot_escape_the_store(zserver, path):
    r = zserver.raw(store_path(Z.SCRATCH) + path)
    assert r.status_code in (400, 404), (path, r.status_code, r.text)
    assert r.status_code != 403
    assert Z.SECRET_BYTES not in r.content
    assert b"root:" not in r.content
    if r.status_code == 404:
        assert_problem(r, 404)


def test_raw_symlink_inside_the_store_is_served(zserver, zroot):
    # X/c/3/2 is a relative symlink to X/c/0/0 (a zarr key); alias.json, a
    # symlink to zarr.json, is inside too but is no zarr key
    r = zserver.get(raw(Z.SCRATCH, "X/c/3/2"))
    assert r.status_code == 200 and r.content == (zroot / Z.SCRATCH / "X/c/0/0").read_bytes()
    assert_problem(zserver.get(raw(Z.SCRATCH, "alias.json")), 404)


def test_raw_repeated_key_follows_rewrites_and_swaps(zserver, zdirs):
    """A key answered before (its identity and validators remembered, its
    bytes possibly kept once the file has settled) still follows the disk:
    rewritten in place it answers the new bytes and ETag; swapped for a
    symlink out of the store it is 404 and leaks nothing."""
    zroot, outside = zdirs
    path = zroot / Z.SCRATCH / "X/c/4/0"   # a chunk key of X, rewritten by hand
    path.write_bytes(b"first version of the key\n" * 8)
    url = raw(Z.SCRATCH, "X/c/4/0")
    time.sleep(2.5)                   # settled: old enough to be kept in memory
    answers = [zserver.get(url) for _ in range(3)]
    assert all(r.status_code == 200 and r.content == path.read_bytes() for r in answers)
    assert len({r.headers["ETag"] for r in answers}) == 1
    part = zserver.get(url, _headers={"Range": "bytes=6-12"})
    assert part.status_code == 206 and part.content == path.read_bytes()[6:13]
    assert part.headers["Content-Range"] == f"bytes 6-12/{path.stat().st_size}"
    h = zserver.head(url)
    assert h.status_code == 200 and int(h.headers["Content-Length"]) == path.stat().st_size
    nm = zserver.get(url, _headers={"If-None-Match": answers[0].headers["ETag"]})
    assert nm.status_code == 304 and nm.content == b""

    with open(path, "r+b") as f:      # same size, same inode, in place
        f.write(b"SECOND")
    r = zserver.get(url)
    assert r.status_code == 200 and r.content == path.read_bytes()
    assert r.content.startswith(b"SECOND") and r.headers["ETag"] != answers[0].headers["ETag"]

    secret = outside / "swapped_secret.bin"
    secret.write_bytes(Z.SECRET_BYTES)
    path.unlink()
    os.symlink(secret, path)
    for _ in range(2):
        r = zserver.get(url)
        assert_problem(r, 404)
        assert Z.SECRET_BYTES not in r.content


def _recording_trace():
    """An aiohttp trace config that records the URL of every request the
    fsspec HTTP filesystem sends, and the list it records into."""
    import aiohttp
    urls: list[str] = []
    tc = aiohttp.TraceConfig()

    async def on_start(session, ctx, params):
        urls.append(f"{params.method} {params.url}")

    tc.on_request_start.append(on_start)
    return tc, urls


@pytest.mark.parametrize("store,consolidated", [(Z.V2, True), (Z.V3_SHARDED, True),
                                                (Z.NO_ZMETA, False)])
def test_zarr_python_reads_through_query_strings(zserver, zroot, store, consolidated):
    """Signed and cache-busting URLs through zarr-python and fsspec (issue
    16, item 2): with storage_options {"params": ...} fsspec puts
    ?token=...&v=3 on every GET (metadata, chunks, shard ranges and, with
    use_consolidated=False, directory listings), and every array reads
    equal to the local store."""
    import zarr
    tc, urls = _recording_trace()
    opts = {"params": {"token": "abc def", "v": "3"}, "client_kwargs": {"trace_configs": [tc]}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        remote = zarr.open_group(_remote(zserver, store), mode="r", storage_options=opts,
                                 use_consolidated=None if consolidated else False)
        here = Z.arrays(zroot / store)
        Z.assert_arrays_equal(Z.arrays(remote), here)
    gets = [u for u in urls if u.startswith("GET ")]
    assert len(gets) > len(here), gets
    assert all("token=abc" in u and "v=3" in u for u in urls), [u for u in urls if "token=" not in u]


@pytest.mark.parametrize("query", ["?token=x", "?token=abc&v=3", "?X-Amz-Signature=0f3a&format=json"])
def test_fsspec_opens_a_key_with_a_query_string(zserver, zroot, query):
    """fsspec.open on a raw key's URL with a query string: its size, a
    seek and read inside (Range) and the whole, as the file's bytes."""
    import fsspec
    data = (zroot / Z.V2 / "X" / "0.0").read_bytes()
    assert len(data) > 40
    url = zserver.base + raw(Z.V2, "X/0.0") + query
    with fsspec.open(url, "rb", block_size=16).open() as f:
        assert f.size == len(data)
        f.seek(20)
        assert f.read(10) == data[20:30]
        f.seek(0)
        assert f.read() == data


def test_raw_methods(zserver):
    r = zserver.post(raw(Z.V2, ".zgroup"), {})
    assert_problem(r, 405)
    assert "GET" in r.headers["Allow"] and "POST" not in r.headers["Allow"]
    assert zserver.options(raw(Z.V2, ".zgroup")).status_code == 204
    # Parameters a key does not use are ignored, as by static servers:
    # signed and cache-busting URLs (issue 16, item 2).
    plain = zserver.get(raw(Z.V2, ".zgroup"))
    for params in ({"layout": "csr"}, {"token": "abc", "v": "3"}, {"format": "json"}):
        r = zserver.get(raw(Z.V2, ".zgroup"), **params)
        assert r.status_code == 200 and r.content == plain.content
        assert r.headers["ETag"] == plain.headers["ETag"]


def test_raw_on_hdf5_store_is_its_zarr_view(zserver):
    """HDF5 stores answer the keys of their zarr view (issue 13,
    tests/http/test_zarr_view.py); a store that is not there stays 404."""
    for store in (Z.AD_H5, Z.MU_H5, Z.TD_H5):
        r = zserver.get(raw(store, ".zgroup"))
        assert r.status_code == 200 and r.json() == {"zarr_format": 2}, (store, r.text)
    assert_problem(zserver.get(raw("nope.zarr", ".zgroup")), 404)


def _canon(meta: dict) -> dict:
    return json.loads(json.dumps(meta, sort_keys=True))


@pytest.mark.parametrize("store,consolidated_twin", [(Z.NO_ZMETA, Z.V2), ("mu_v2.zarr", None)])
def test_built_zmetadata(zserver, zroot, store, consolidated_twin):
    """A v2 store without .zmetadata is answered one, equal to what
    zarr.consolidate_metadata writes for it."""
    import zarr
    r = zserver.get(raw(store, ".zmetadata"))
    assert r.status_code == 200, r.text
    assert r.headers["Content-Type"] == "application/json"
    got = r.json()
    assert got["zarr_consolidated_format"] == 1
    # exactly the store's metadata files, each as stored
    on_disk = {str(p.relative_to(zroot / store)) for p in (zroot / store).rglob("*")
               if p.name in (".zgroup", ".zarray", ".zattrs")}
    assert set(got["metadata"]) == on_disk
    for key, doc in got["metadata"].items():
        assert doc == json.loads((zroot / store / key).read_text()), key
    # and what zarr-python consolidates (which adds an empty
    # "consolidated_metadata" to the .zgroup of v2 subgroups)
    if consolidated_twin:
        exp = Z.zmetadata(zroot / consolidated_twin)
    else:
        copy = zroot.parent / ("consolidated-" + store)
        shutil.copytree(zroot / store, copy)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            zarr.consolidate_metadata(str(copy), zarr_format=2)
        exp = Z.zmetadata(copy)
    for key, doc in exp["metadata"].items():
        if key.endswith(".zgroup") and key != ".zgroup":
            doc.pop("consolidated_metadata", None)
    assert _canon(got["metadata"]) == _canon(exp["metadata"])
    # validators, HEAD, Range and 304 work on the built document too
    etag = r.headers["ETag"]
    assert zserver.get(raw(store, ".zmetadata"), _headers={"If-None-Match": etag}).status_code == 304
    h = zserver.head(raw(store, ".zmetadata"), _headers={"Accept-Encoding": "identity"})
    assert h.status_code == 200 and int(h.headers["Content-Length"]) == len(r.content)
    part = zserver.get(raw(store, ".zmetadata"), _headers={"Range": "bytes=1-20", "Accept-Encoding": "gzip"})
    assert part.status_code == 206 and part.content == r.content[1:21]
    assert part.headers["Content-Range"] == f"bytes 1-20/{len(r.content)}"
    assert "Content-Encoding" not in part.headers
    assert not (zroot / store / ".zmetadata").exists()  # nothing written into the store


def test_no_zmetadata_for_v3(zserver):
    assert_problem(zserver.get(raw(Z.V3_SHARDED, ".zmetadata")), 404)


@pytest.mark.parametrize("store", [Z.V3_UNCONSOLIDATED, "mu_v3.zarr", "td_v3.zarr"])
def test_built_v3_consolidated_zarr_json(zserver, zroot, store):
    """The root zarr.json of a v3 store without consolidated metadata is
    answered with it inlined, equal to what zarr.consolidate_metadata writes;
    nothing is written into the store, and a consolidated store's zarr.json
    is served byte for byte."""
    import zarr
    on_disk = (zroot / store / "zarr.json").read_bytes()
    assert json.loads(on_disk).get("consolidated_metadata") is None
    r = zserver.get(raw(store, "zarr.json"))
    assert r.status_code == 200, r.text
    assert r.headers["Content-Type"] == "application/json"
    got = r.json()
    copy = zroot.parent / ("consolidated-" + store)
    if not copy.exists():
        shutil.copytree(zroot / store, copy)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            zarr.consolidate_metadata(str(copy))
    exp = json.loads((copy / "zarr.json").read_text())
    assert _canon(got) == _canon(exp)
    assert (zroot / store / "zarr.json").read_bytes() == on_disk
    etag = r.headers["ETag"]
    assert zserver.get(raw(store, "zarr.json"), _headers={"If-None-Match": etag}).status_code == 304
    # a store that has consolidated metadata: the file as stored
    plain = zserver.get(raw(Z.V3_SHARDED, "zarr.json"))
    assert plain.content == (zroot / Z.V3_SHARDED / "zarr.json").read_bytes()


# ------------------------------------------------------------ real clients
def _remote(zserver, store: str) -> str:
    return zserver.base + store_path(store) + "/zarr"


def _server_log_since(zserver, offset: int) -> list[str]:
    return zserver.log_lines_since(offset)


@pytest.mark.parametrize("store", [Z.V2, Z.V3_SHARDED, Z.NO_ZMETA, "mu_v2.zarr", "td_v2.zarr",
                                   "ad_v2_lz4.zarr", "ad_v3_sharded_blosc.zarr", "mu_v3.zarr",
                                   "td_v3.zarr", Z.V3_UNCONSOLIDATED])
def test_zarr_python_reads_every_array_over_http(zserver, zroot, store):
    """zarr-python opens the store by its URL (fsspec HTTP), lists it and
    reads every array equal to the local read.  HTTP has no directory
    listing: a v2 store is listed through .zmetadata and a v3 store through
    the consolidated metadata of its root zarr.json, which cellar builds
    where the store has none."""
    import zarr
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        remote = zarr.open_group(_remote(zserver, store), mode="r")
        Z.assert_arrays_equal(Z.arrays(remote), Z.arrays(zroot / store))


def test_zarr_python_sharded_partial_read_uses_range(zserver, zroot):
    import zarr
    offset = zserver.log_offset()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        remote = zarr.open_group(_remote(zserver, Z.V3_SHARDED), mode="r")
        got = remote["X"][10:20, 0:3]
        exp = zarr.open_group(zroot / Z.V3_SHARDED, mode="r")["X"][10:20, 0:3]
    np.testing.assert_array_equal(got, exp)
    lines = [ln for ln in _server_log_since(zserver, offset)
             if f"/{Z.V3_SHARDED}/zarr/X/c/0/0 " in ln]
    assert lines and all(" 206 " in ln for ln in lines), lines


@pytest.mark.parametrize("store", [Z.NO_ZMETA, Z.V3_SHARDED, "mu_v2.zarr"])
def test_unconsolidated_open_lists_directories(zserver, zroot, store):
    """zarr.open_group(url, use_consolidated=False) lists groups through
    fsspec's HTTP filesystem, which GETs a directory's URL and reads the
    links of its page: cellar answers a directory (with or without its
    slash) with an HTML index of the keys it serves (issue 16, item 1).
    It used to be 404, and the group came out empty."""
    import fsspec
    import zarr
    fs = fsspec.filesystem("http")
    base = _remote(zserver, store)
    here = zarr.open_group(zroot / store, mode="r", use_consolidated=False)
    for url in (base, base + "/"):
        listed = sorted(p.rstrip("/").rsplit("/", 1)[1] for p in fs.ls(url, detail=False))
        local_names = sorted(p.name for p in (zroot / store).iterdir() if not p.name.startswith(".")
                             or p.name in (".zgroup", ".zattrs", ".zarray", ".zmetadata"))
        assert listed == local_names
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        remote = zarr.open_group(base, mode="r", use_consolidated=False)
        assert sorted(remote.keys()) == sorted(here.keys())
        assert sorted(Z.arrays(remote)) == sorted(Z.arrays(here))


def test_directory_index_lists_only_keys(zserver, zroot):
    """The index of a directory holds only what the raw route serves: no
    dotfiles, .git/, editor backups or other files; a file is no
    directory, and a directory that is not there is 404."""
    d = zroot / Z.SCRATCH
    (d / ".env").write_text("SECRET=1")
    (d / "notes.txt").write_text("x")
    (d / "obs~").mkdir(exist_ok=True)
    (d / ".git").mkdir(exist_ok=True)
    time.sleep(0.6)  # a store changed in the last 0.5 s is not trusted yet (a writer may be going)
    zserver.get(raw(Z.SCRATCH, ""))  # notices the files added: a new version
    r = zserver.get(raw(Z.SCRATCH, ""))
    assert r.status_code == 200 and r.headers["Content-Type"] == "text/html; charset=utf-8"
    for hidden in (".env", "notes.txt", "obs~", ".git", "SECRET"):
        assert hidden not in r.text
    assert f'href="/v1/stores/{Z.SCRATCH}/zarr/X/"' in r.text
    assert "ETag" in r.headers
    assert zserver.get(raw(Z.SCRATCH, ""), _headers={"If-None-Match": r.headers["ETag"]}).status_code == 304
    assert_problem(zserver.get(raw(Z.SCRATCH, "nope/")), 404)
    assert_problem(zserver.get(raw(Z.SCRATCH, ".git/")), 404)


@pytest.mark.parametrize("store", [Z.V2, Z.V3_SHARDED, "mu_v2.zarr", "td_v3.zarr"])
def test_zarr_store_bytes_are_its_files(zserver, zroot, store):
    """/v1/stores and the summary report a zarr store's bytes as its files
    added up, not its directory entry's 4096 (issue 16, item 8)."""
    files = sum(p.stat().st_size for p in (zroot / store).rglob("*") if p.is_file() and not p.is_symlink())
    listed = {e["name"]: e for e in zserver.get("/v1/stores").json()["stores"]}
    assert listed[store]["bytes"] == files
    assert zserver.get(store_path(store)).json()["bytes"] == files


def test_anndata_read_zarr_over_http_equals_local(zserver, local):
    import anndata as ad
    for store in (Z.V2, Z.V3_SHARDED):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            remote = ad.read_zarr(_remote(zserver, store))
        here = local[store]
        pd.testing.assert_frame_equal(remote.obs, here.obs)
        pd.testing.assert_frame_equal(remote.var, here.var)
        np.testing.assert_array_equal(remote.X, here.X)
        np.testing.assert_array_equal(remote.obsm["X_pca"], here.obsm["X_pca"])
        assert (remote.layers["counts"] != here.layers["counts"]).nnz == 0
        assert (remote.obsp["distances"] != here.obsp["distances"]).nnz == 0
        assert remote.uns["note"] == here.uns["note"]
        assert dict(remote.uns["params"]) == dict(here.uns["params"])


@pytest.mark.parametrize("store", [Z.V2, Z.V3_SHARDED, "ad_v3_chunked_gzip.zarr", "ad_v2_blosc.zarr"])
def test_zarrita_reads_arrays_equal_to_local(zserver, zroot, node_clients, store):
    import zarr
    loc = zarr.open_group(zroot / store, mode="r")
    for path, rows in (("X", ()), ("X", (15, 35)), ("obs/i64", ()), ("obs/f32", ()),
                       ("obs/cat/codes", ())):
        offset = zserver.log_offset()
        got = zarrita_read(node_clients, _remote(zserver, store), path, *rows)
        if store == Z.V3_SHARDED and path == "X":
            # inner chunks come out of the shards by Range (206)
            gets = [ln for ln in _server_log_since(zserver, offset)
                    if ln.startswith("GET ") and f"/{store}/zarr/X/c/" in ln]
            assert gets and all(" 206 " in ln for ln in gets), gets
        exp = loc[path][slice(*rows) if rows else slice(None)]
        assert got["shape"] == list(exp.shape), (path, got["shape"])
        conv = int if exp.dtype.kind in "iu" else float if exp.dtype.kind == "f" else bool
        data = np.array([conv(v) for v in got["data"]], dtype=exp.dtype).reshape(exp.shape)
        if exp.dtype.kind == "f":
            np.testing.assert_array_equal(data, exp, err_msg=path)
        else:
            assert (data == exp).all(), path


@pytest.mark.parametrize("store", [Z.V2, Z.V3_SHARDED])
def test_zarrita_reads_through_signed_urls(zserver, zroot, node_clients, store):
    """A signed or cache-busting store URL (issue 16, item 2): zarrita.js
    copies the base URL's query string onto every key it fetches, metadata,
    chunks and shard ranges alike; raw keys ignore parameters they do not
    use, so the arrays read as without it."""
    import zarr
    loc = zarr.open_group(zroot / store, mode="r")
    url = _remote(zserver, store) + "/?X-Amz-Signature=0f3a9c&v=3&token=abc%20def"
    for path, rows in (("X", ()), ("X", (15, 35)), ("obs/cat/codes", ())):
        got = zarrita_read(node_clients, url, path, *rows)
        exp = loc[path][slice(*rows) if rows else slice(None)]
        assert got["shape"] == list(exp.shape), (path, got["shape"])
        data = np.array(got["data"], dtype=exp.dtype).reshape(exp.shape)
        np.testing.assert_array_equal(data, exp, err_msg=path)
