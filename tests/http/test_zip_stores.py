"""Zip stores (issue 17, items 3 and 4): a `.zarr.zip`, or a `.zip` holding
a zarr store, is served as the zarr store it holds.

The stores come from the real writers (zip_writers.py): anndata's
write_zarr on a zarr.storage.ZipStore (zarr v2 and v3), and directory
stores zipped with Python's zipfile (stored, deflated, in one top folder,
zip64 forced in the local headers, zip64 in the central directory and end
records).  Each has a directory twin written from the same object, and every
route answers on the zip as on the twin: byte for byte where the twin's
answer is deterministic, the summary but for the fields that name the file.
zarr-python (fsspec HTTP) and zarrita.js read the arrays through /zarr/ on
the zip equal to the twin's.  Each bad zip of item 4 is answered 422
problem+json, and the server keeps serving."""

from __future__ import annotations

import email.utils
import json
import os
import shutil
import subprocess
import threading
import time
import warnings
import zipfile
from pathlib import Path
from urllib.parse import quote

import numpy as np
import pytest

import zarr_writers as Z
import zip_writers as ZW
from conftest import assert_problem, metric_reaches, metric_value, store_path

pytestmark = pytest.mark.timeout(300)

HERE = Path(__file__).resolve().parent
CLIENTS = HERE / "zarr_clients"
FILE_KEYS = {"name", "bytes", "mtime", "etag"}
ZIP_NAMES = [z.name for z in ZW.ZIPS]
AD_ZIPS = [z.name for z in ZW.ZIPS if z.kind == "anndata"]
LIMIT = 1 << 20   # --max-response-bytes of the bad zips' server


@pytest.fixture(scope="module")
def zroot(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("zipstores") / "root"
    ZW.write_good(root)
    return root


@pytest.fixture(scope="module")
def zserver(zroot, server_factory):
    return server_factory(zroot)


@pytest.fixture(scope="module")
def bad_root(zroot, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("badzips") / "root"
    root.mkdir()
    shutil.copytree(zroot / ZW.AD_V3_DIR, root / ZW.AD_V3_DIR)
    for name in ("ad_v2_stored.zip", "ad_v2_zip64.zip"):
        shutil.copy2(zroot / name, root / name)
    ZW.write_bad(root, tmp_path_factory.mktemp("badzips-tmp"))
    return root


@pytest.fixture(scope="module")
def bad_server(bad_root, server_factory):
    return server_factory(bad_root, "--max-response-bytes", str(LIMIT))


def raw(store: str, key: str) -> str:
    return store_path(store) + "/zarr/" + "/".join(quote(k, safe="") for k in key.split("/"))


def twin_files(zroot: Path, z: ZW.ZipStore) -> dict[str, bytes]:
    d = zroot / z.twin
    return {p.relative_to(d).as_posix(): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


# ------------------------------------------------------------ the fixtures themselves
def test_fixtures_are_what_they_claim(zroot):
    """Each zip is what its name says: ZipStore's have the writer's format
    and its duplicate (rewritten) metadata entries; the zipfile ones are
    stored or deflated, in a top folder or not, zip64 where forced; every
    one is a zip Python reads whole (CRCs checked)."""
    for z in ZW.ZIPS:
        with zipfile.ZipFile(zroot / z.name) as zf:
            assert zf.testzip() is None, z.name
            infos = zf.infolist()
            names = [i.filename for i in infos]
        root_doc = "zarr.json" if z.zarr_format == 3 else ".zgroup"
        if "top folder" in z.how:
            assert all(n.startswith(z.twin + "/") for n in names) and z.twin + "/" + root_doc in names
        else:
            assert root_doc in names, z.name
        if "ZipStore" in z.how:
            assert len(names) > len(set(names)), "ZipStore appends rewritten metadata again"
            assert {i.compress_type for i in infos} == {zipfile.ZIP_STORED}
        elif "stored" in z.how:
            assert {i.compress_type for i in infos} == {zipfile.ZIP_STORED}
        else:
            assert {i.compress_type for i in infos} == {zipfile.ZIP_DEFLATED}
    data = (zroot / "ad_v2_zip64.zip").read_bytes()
    assert b"PK\x06\x06" in data and b"PK\x06\x07" in data  # zip64 end record and locator
    _, f, _ = ZW.central_entries(data)[0]
    assert f[8] == f[9] == f[16] == 0xFFFFFFFF               # sizes and offset in the extra field
    forced = (zroot / "ad_v3_zip64_deflated.zarr.zip").read_bytes()
    _, f, _ = ZW.central_entries(forced)[0]
    local = ZW.LOC.unpack_from(forced, f[16])
    assert local[7] == local[8] == 0xFFFFFFFF                # zip64 local header


def test_store_list_names_every_zip(zserver, zroot):
    listed = {e["name"]: e for e in zserver.get("/v1/stores").json()["stores"]}
    for z in ZW.ZIPS:
        e = listed[z.name]
        assert e["backend"] == "zarr" and e["kind"] == z.kind, e
        assert e["bytes"] == (zroot / z.name).stat().st_size  # the zip's own size


# ------------------------------------------------------------ every route equals the twin
ROUTES = {
    "anndata": ["", "obs", "var", "obs/schema", "var/schema", "obs?format=csv",
                "obs?rows=3:9&columns=cat,f32", "obs?categorical=codes", "var?format=csv",
                "X", "X?format=bin", "X?format=npy", "X?rows=3:17&cols=1:5", "X?rows=40,2,7",
                "layers/counts", "layers/counts?layout=csr&format=bin", "layers/counts?format=npz",
                "obsm/X_pca", "obsm/X_pca?format=npy", "varm/loadings",
                "obsp/distances", "obsp/distances?format=bin", "uns", "uns/params",
                "uns/note", "raw/X", "raw/var/schema", "raw/var", "raw/X?cols=0:3&format=bin",
                "obs?obs_names=AAAC-04,AAAC-17", "X?obs_names=AAAC-04"],
    "treedata": ["", "obs", "obst", "obst/tree1", "obst/tree1?format=newick", "X", "obs/schema",
                 "obst/tree1/leaves"],
    "mudata": ["", "obs", "var", "obs/schema", "obs?format=csv", "mod", "mod/rna/obs",
               "mod/prot/obs?categorical=codes", "mod/prot/var", "mod/rna/X",
               "mod/rna/X?format=bin", "mod/prot/X?rows=30:35", "mod/rna/X?rows=3:17&cols=1:5",
               "obsmap/rna", "obsmap/prot", "varmap/rna", "varmap/prot", "obsmap/rna?rows=20:45",
               "obsmap/prot?mod_rows=0:10", "varmap/prot?mod_rows=1,2", "uns"],
}
# the directories whose index pages test_listing_is_the_twins compares
LISTED = {"anndata": ("", "obs", "X"), "treedata": ("", "obs", "X"),
          "mudata": ("", "obs", "mod", "mod/rna", "mod/prot/X")}


def _route_pairs(z: ZW.ZipStore):
    for route in ROUTES[z.kind]:
        seg, _, q = route.partition("?")
        yield route, seg, q


@pytest.mark.parametrize("name", ZIP_NAMES)
def test_every_route_equals_directory_twin(zserver, name):
    """Each route answers on the zip byte for byte as on its directory
    twin (the summary: equal but for the fields naming the file)."""
    z = ZW.BY_NAME[name]
    s = zserver.session
    for route, seg, q in _route_pairs(z):
        url = lambda store: zserver.base + store_path(store) + (f"/{seg}" if seg else "") + (f"?{q}" if q else "")
        a, b = s.get(url(name), timeout=30), s.get(url(z.twin), timeout=30)
        assert a.status_code == b.status_code, (route, a.text[:300], b.text[:300])
        if route == "":
            ja, jb = a.json(), b.json()
            assert {k: v for k, v in ja.items() if k not in FILE_KEYS} == \
                   {k: v for k, v in jb.items() if k not in FILE_KEYS}
            assert ja["name"] == name
        else:
            assert a.status_code == 200, (route, a.text[:300])
            assert a.content == b.content, route
            assert a.headers.get("Content-Type") == b.headers.get("Content-Type"), route


def test_treedata_subtree_equals_twin(zserver):
    z = ZW.BY_NAME["td_v3.zarr.zip"]
    tree = zserver.get(store_path(z.twin, "obst", "tree1")).json()
    root = next(n["id"] for n in tree["nodes"] if not any(e["target"] == n["id"] for e in tree["links"]))
    for route in (f"obst/tree1/subtree?root={root}&depth=2", f"obst/tree1/nodes/{root}"):
        seg, _, q = route.partition("?")
        a = zserver.session.get(zserver.base + store_path(z.name) + "/" + seg + (f"?{q}" if q else ""))
        b = zserver.session.get(zserver.base + store_path(z.twin) + "/" + seg + (f"?{q}" if q else ""))
        assert a.status_code == b.status_code == 200, (route, a.text[:200])
        assert a.content == b.content


@pytest.mark.parametrize("name", ZIP_NAMES)
def test_raw_keys_are_the_twins_files(zserver, zroot, name):
    """Every file of the twin is a raw key of the zip with the same bytes
    (stored entries sent from the zip, deflated ones decoded), with the
    headers of a directory store's key and a validator of its own."""
    z = ZW.BY_NAME[name]
    files = twin_files(zroot, z)
    store_etag = zserver.get(store_path(name)).headers["ETag"]
    etags = set()
    for key, data in files.items():
        if key in ("zarr.json", ".zmetadata"):
            continue  # answered with consolidated metadata (below)
        r = zserver.session.get(zserver.base + raw(name, key), timeout=30)
        assert r.status_code == 200, (key, r.text[:300])
        assert r.content == data, key
        assert int(r.headers["Content-Length"]) == len(data)
        meta = key.rsplit("/", 1)[-1] in (".zgroup", ".zattrs", ".zarray", "zarr.json")
        assert r.headers["Content-Type"] == ("application/json" if meta else "application/octet-stream")
        assert r.headers["Accept-Ranges"] == "bytes" and r.headers["Cache-Control"] == "no-cache"
        assert "Content-Encoding" not in r.headers
        assert r.headers["ETag"] != store_etag
        etags.add(r.headers["ETag"])
        lm = email.utils.parsedate_to_datetime(r.headers["Last-Modified"]).timestamp()
        assert lm == int((zroot / name).stat().st_mtime)
    assert len(etags) > 1


@pytest.mark.parametrize("name", ["ad_v2_stored.zip", "ad_v2.zarr.zip", "ad_v2_zip64.zip"])
def test_zmetadata_equals_twins(zserver, name):
    """A v2 zip's .zmetadata: the stored one (the twin's bytes), or the one
    cellar builds for a store without it, equal to the twin's answer."""
    z = ZW.BY_NAME[name]
    a = zserver.get(raw(name, ".zmetadata"))
    b = zserver.get(raw(z.twin, ".zmetadata"))
    assert a.status_code == b.status_code == 200
    assert a.content == b.content


@pytest.mark.parametrize("name", ["ad_v3.zarr.zip", "ad_v3_deflated.zip", "td_v3.zarr.zip"])
def test_v3_root_zarr_json_equals_twins(zserver, name):
    z = ZW.BY_NAME[name]
    a = zserver.get(raw(name, "zarr.json"))
    b = zserver.get(raw(z.twin, "zarr.json"))
    assert a.status_code == b.status_code == 200
    assert json.loads(a.content) == json.loads(b.content)
    assert a.content == b.content


@pytest.mark.parametrize("name,key", [("ad_v2_stored.zip", "X/0.0"), ("ad_v3_deflated.zip", "X/c/0/0"),
                                      ("ad_v3.zarr.zip", "X/c/0/0"), ("ad_v2_zip64.zip", "obs/f32/0")])
def test_raw_range_head_and_conditionals(zserver, zroot, name, key):
    """Range (one, suffix, several), HEAD, If-None-Match, If-Match and
    If-Range on a zip's key as on a directory store's."""
    z = ZW.BY_NAME[name]
    data = twin_files(zroot, z)[key]
    assert len(data) > 20
    url = raw(name, key)
    r = zserver.get(url, _headers={"Range": "bytes=3-10"})
    assert r.status_code == 206 and r.content == data[3:11]
    assert r.headers["Content-Range"] == f"bytes 3-10/{len(data)}"
    r = zserver.get(url, _headers={"Range": "bytes=-5"})
    assert r.status_code == 206 and r.content == data[-5:]
    r = zserver.get(url, _headers={"Range": f"bytes={len(data) + 5}-"})
    assert_problem(r, 416)
    r = zserver.get(url, _headers={"Range": "bytes=0-1,5-9"})
    assert r.status_code == 206 and r.headers["Content-Type"].startswith("multipart/byteranges")
    assert data[0:2] in r.content and data[5:10] in r.content
    full = zserver.get(url)
    etag = full.headers["ETag"]
    h = zserver.head(url)
    assert h.status_code == 200 and h.content == b"" and int(h.headers["Content-Length"]) == len(data)
    assert h.headers["ETag"] == etag
    assert zserver.get(url, _headers={"If-None-Match": etag}).status_code == 304
    assert_problem(zserver.get(url, _headers={"If-Match": '"other"'}), 412)
    assert zserver.get(url, _headers={"If-Match": etag}).status_code == 200
    r = zserver.get(url, _headers={"Range": "bytes=0-3", "If-Range": '"stale"'})
    assert r.status_code == 200 and r.content == data
    r = zserver.get(url, _headers={"Range": "bytes=0-3", "If-Range": etag})
    assert r.status_code == 206 and r.content == data[:4]


FILE_ANSWERS = "cellar_file_answers_total"


def test_stored_entries_are_sent_from_the_zip_once_settled(zserver, zroot):
    """Issue 17, point 3: a stored entry of a zip unchanged for 2 s
    (SETTLED_SECONDS, api/zarr/raw.c) is sent from the zip with sendfile
    (/metrics cellar_file_answers_total counts it); a deflated entry is
    decoded and one of a zip changed in the last 2 s copied (and checked),
    so neither is counted.  Every answer is the twin's bytes."""
    past = time.time() - 3600
    stored, deflated, other = "ad_v2_stored.zip", "ad_v3_deflated.zip", "ad_v2_zip64.zip"
    for name in (stored, deflated, other):
        os.utime(zroot / name, (past, past))
    time.sleep(0.6)   # a store changed in the last 0.5 s is not opened yet

    def fetch(name, key, **headers):
        r = zserver.session.get(zserver.base + raw(name, key), headers=headers, timeout=30)
        assert r.status_code in (200, 206), (name, key, r.text[:300])
        full = twin_files(zroot, ZW.BY_NAME[name])[key]
        assert r.content == (full if r.status_code == 200 else full[2:12]), (name, key)

    before = metric_value(zserver, FILE_ANSWERS)
    fetch(stored, "X/0.0")
    assert metric_reaches(zserver, FILE_ANSWERS, before + 1) == before + 1
    fetch(stored, "X/0.0", Range="bytes=2-11")
    assert metric_reaches(zserver, FILE_ANSWERS, before + 2) == before + 2
    # a deflated entry, then a stored one of another zip: one more
    fetch(deflated, "X/c/0/0")
    fetch(other, "obs/f32/0")
    assert metric_reaches(zserver, FILE_ANSWERS, before + 3) == before + 3
    # a zip whose mtime is not 2 s old: its stored entry is copied (the
    # mtime a few seconds ahead, so that no delay of a loaded machine lets
    # it settle before the request)
    recent = time.time() + 6
    os.utime(zroot / stored, (recent, recent))
    fetch(stored, "X/0.0")
    fetch(other, "obs/f32/0")
    assert metric_reaches(zserver, FILE_ANSWERS, before + 4) == before + 4
    # settled again: from the file
    os.utime(zroot / stored, (past, past))
    time.sleep(0.6)
    fetch(stored, "X/0.0")
    assert metric_reaches(zserver, FILE_ANSWERS, before + 5) == before + 5


def _zip_with_x(zroot: Path, tmp: Path, scale: float) -> tuple[bytes, np.ndarray]:
    """The v2 twin zipped stored, with X rewritten as X * scale + 1 by zarr
    (another version of the same store, valid all through), and its first
    10 rows as zarr reads them."""
    import zarr
    d = tmp / f"x{scale}.zarr"
    shutil.rmtree(d, ignore_errors=True)
    shutil.copytree(zroot / ZW.AD_V2_DIR, d)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        x = zarr.open_array(d / "X", mode="r+")
        x[...] = np.asarray(x[...]) * scale + 1
        rows = np.asarray(zarr.open_array(d / "X", mode="r")[0:10])
    out = tmp / f"x{scale}.zip"
    ZW.zip_directory(d, out, zipfile.ZIP_STORED)
    return out.read_bytes(), rows


def _rows_of(r) -> np.ndarray:
    return np.array(r.json()["data"], dtype=np.float32)


def _get_settled(srv, path: str, **params):
    """GET, retried while the store is 503 (being rewritten)."""
    for _ in range(100):
        r = srv.get(path, **params)
        if r.status_code != 503:
            return r
        time.sleep(0.1)
    return r


def test_replaced_zip_is_a_new_version(zserver, zroot, tmp_path):
    """A zip replaced by another (os.replace, the same mtime) is a new
    version (issue 17, point 3: 'the store's identity is the zip file's'):
    new ETags, new data, the old validators no longer match."""
    name = "swap.zip"
    (one, rows1), (two, rows2) = _zip_with_x(zroot, tmp_path, 1.0), _zip_with_x(zroot, tmp_path, 2.0)
    mtime = time.time() - 3600
    (zroot / name).write_bytes(one)
    os.utime(zroot / name, (mtime, mtime))
    time.sleep(0.6)
    x1 = _get_settled(zserver, store_path(name, "X"), rows="0:10")
    k1 = _get_settled(zserver, raw(name, "X/0.0"))
    s1 = _get_settled(zserver, store_path(name))
    assert x1.status_code == k1.status_code == s1.status_code == 200
    tmp = zroot / ".swap.tmp"
    tmp.write_bytes(two)
    os.utime(tmp, (mtime, mtime))
    os.replace(tmp, zroot / name)
    time.sleep(0.6)
    x2 = _get_settled(zserver, store_path(name, "X"), rows="0:10")
    k2 = _get_settled(zserver, raw(name, "X/0.0"))
    s2 = _get_settled(zserver, store_path(name))
    assert x2.status_code == k2.status_code == s2.status_code == 200
    np.testing.assert_array_equal(_rows_of(x1), rows1)
    np.testing.assert_array_equal(_rows_of(x2), rows2)
    assert not np.array_equal(rows1, rows2)
    with zipfile.ZipFile(zroot / name) as zf:
        assert k2.content == zf.read("X/0.0") != k1.content
    for old, new in ((x1, x2), (k1, k2), (s1, s2)):
        assert old.headers["ETag"] != new.headers["ETag"]
    assert s1.json()["etag"] != s2.json()["etag"]
    r = zserver.get(store_path(name, "X"), _headers={"If-None-Match": x1.headers["ETag"]}, rows="0:10")
    assert r.status_code == 200 and r.json()["data"] == x2.json()["data"]
    r = zserver.get(raw(name, "X/0.0"), _headers={"If-None-Match": k1.headers["ETag"]})
    assert r.status_code == 200 and r.content == k2.content
    os.unlink(zroot / name)


def test_zip_rewritten_in_place_never_mixes_versions(zserver, zroot, tmp_path):
    """A zip rewritten in place (the same name: truncate, write) while
    requests run: every answer is wholly one version's (a chunk's bytes,
    X's values) and one ETag never names two contents.  As in test_soak,
    a request overlapping a non-atomic rewrite may also be 503 (being
    rewritten) or 422 (the zip as it was then: empty, cut short); once the
    writer stops, the last version answers."""
    name = "inplace.zip"
    made = [_zip_with_x(zroot, tmp_path, s) for s in (1.0, 2.0, 3.0)]
    versions, xs = [m[0] for m in made], [m[1] for m in made]
    chunks = []
    for data in versions:
        (zroot / name).write_bytes(data)
        with zipfile.ZipFile(zroot / name) as zf:
            chunks.append(zf.read("X/0.0"))
    assert len(set(chunks)) == 3
    stop = threading.Event()
    last = [0]

    def rewrite():
        i = 0
        while not stop.is_set():
            with open(zroot / name, "r+b") as f:
                f.truncate(0)
                f.write(versions[i % 3])
            last[0] = i % 3
            i += 1
            time.sleep(0.3 * (i % 4))   # 0 to 0.9 s: some versions settle

    (zroot / name).write_bytes(versions[0])
    os.utime(zroot / name, (time.time() - 10, time.time() - 10))
    time.sleep(0.6)
    r = _get_settled(zserver, store_path(name, "X"), rows="0:10")
    np.testing.assert_array_equal(_rows_of(r), xs[0])
    writer = threading.Thread(target=rewrite)
    writer.start()
    seen_chunk, seen_x, statuses, problems = {}, {}, [], []
    try:
        for i in range(300):
            if i % 2:
                r = zserver.session.get(zserver.base + raw(name, "X/0.0"), timeout=30)
                statuses.append(r.status_code)
                if r.status_code not in (200, 503):
                    problems.append(r.text[:300])
                    assert r.headers["Content-Type"] == "application/problem+json"
                if r.status_code == 200:
                    assert r.content in chunks, f"a chunk of no version ({len(r.content)} bytes)"
                    assert seen_chunk.setdefault(r.headers["ETag"], r.content) == r.content
            else:
                r = zserver.get(store_path(name, "X"), rows="0:10")
                statuses.append(r.status_code)
                if r.status_code not in (200, 503):
                    problems.append(r.text[:300])
                    assert r.headers["Content-Type"] == "application/problem+json"
                if r.status_code == 200:
                    got = _rows_of(r)
                    assert any(np.array_equal(got, x) for x in xs), "X of no version"
                    assert seen_x.setdefault(r.headers["ETag"], got.tobytes()) == got.tobytes()
    finally:
        stop.set()
        writer.join()
    assert set(statuses) <= {200, 422, 503}, (sorted(set(statuses)), problems[:5])
    assert statuses.count(200) > 30, {c: statuses.count(c) for c in set(statuses)}
    time.sleep(0.6)
    r = _get_settled(zserver, store_path(name, "X"), rows="0:10")
    assert r.status_code == 200, r.text[:300]
    np.testing.assert_array_equal(_rows_of(r), xs[last[0]])
    r = _get_settled(zserver, raw(name, "X/0.0"))
    assert r.status_code == 200 and r.content == chunks[last[0]]
    assert zserver.alive()
    os.unlink(zroot / name)


@pytest.mark.parametrize("name", ZIP_NAMES)
def test_listing_is_the_twins(zserver, zroot, name):
    """The directory index of the zip's root and of a group lists what
    the twin's does (from the central directory: directories are the
    names' prefixes)."""
    import fsspec
    z = ZW.BY_NAME[name]
    fs = fsspec.filesystem("http")
    for rel in LISTED[z.kind]:
        a = sorted(p.rstrip("/").rsplit("/", 1)[1]
                   for p in fs.ls(zserver.base + store_path(name) + "/zarr/" + rel, detail=False))
        b = sorted(p.rstrip("/").rsplit("/", 1)[1]
                   for p in fs.ls(zserver.base + store_path(z.twin) + "/zarr/" + rel, detail=False))
        assert a == b and a, (rel, a, b)
    assert_problem(zserver.get(raw(name, "nope") + "/"), 404)
    assert_problem(zserver.get(raw(name, "nope/0.0")), 404)


# ------------------------------------------------------------ real clients
def _remote(server, store: str) -> str:
    return server.base + store_path(store) + "/zarr"


@pytest.mark.parametrize("name", ZIP_NAMES)
def test_zarr_python_reads_every_array_equal_to_twin(zserver, zroot, name):
    """zarr-python opens the zip store by its URL (fsspec HTTP) and reads
    every array equal to the local read of the twin directory."""
    import zarr
    z = ZW.BY_NAME[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        remote = zarr.open_group(_remote(zserver, name), mode="r")
        Z.assert_arrays_equal(Z.arrays(remote), Z.arrays(zroot / z.twin))


def test_zarr_python_reads_the_zip_itself_as_we_serve_it(zserver, zroot):
    """What zarr reads from the ZipStore file locally is what it reads
    through cellar."""
    import zarr
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in ("ad_v2.zarr.zip", "ad_v3.zarr.zip"):
            store = zarr.storage.ZipStore(zroot / name, mode="r")
            local = zarr.open_group(store, mode="r")
            remote = zarr.open_group(_remote(zserver, name), mode="r")
            for path in ("X", "obs/f32", "obsm/X_pca", "layers/counts/data"):
                np.testing.assert_array_equal(remote[path][...], local[path][...], err_msg=path)
            store.close()


def test_anndata_read_zarr_over_http_equals_twin(zserver, zroot):
    import anndata as ad
    import pandas as pd
    for name in ("ad_v2.zarr.zip", "ad_v3_deflated.zip"):
        z = ZW.BY_NAME[name]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            remote = ad.read_zarr(_remote(zserver, name))
            here = ad.read_zarr(zroot / z.twin)
        pd.testing.assert_frame_equal(remote.obs, here.obs)
        np.testing.assert_array_equal(remote.X, here.X)
        np.testing.assert_array_equal(remote.obsm["X_pca"], here.obsm["X_pca"])
        assert (remote.layers["counts"] != here.layers["counts"]).nnz == 0
        np.testing.assert_array_equal(remote.raw.X, here.raw.X)


@pytest.fixture(scope="module")
def node_clients():
    node, npm = shutil.which("node"), shutil.which("npm")
    if not node or not npm:
        pytest.fail("node and npm are needed for the zarrita.js test", pytrace=False)
    if not (CLIENTS / "node_modules" / "zarrita").is_dir():
        r = subprocess.run([npm, "ci", "--no-audit", "--no-fund", "--prefix", str(CLIENTS)],
                           capture_output=True, text=True, timeout=240)
        assert r.returncode == 0, f"npm ci failed:\n{r.stdout}\n{r.stderr}"
    return node


@pytest.mark.parametrize("name", AD_ZIPS)
def test_zarrita_reads_arrays_equal_to_twin(zserver, zroot, node_clients, name):
    import zarr
    z = ZW.BY_NAME[name]
    loc = zarr.open_group(zroot / z.twin, mode="r")
    for path, rows in (("X", ()), ("X", (15, 35)), ("obs/i64", ()), ("obs/f32", ()),
                       ("obs/cat/codes", ()), ("obsm/X_pca", ())):
        r = subprocess.run([node_clients, str(CLIENTS / "read_array.mjs"), _remote(zserver, name),
                            path, *map(str, rows)], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, f"zarrita failed:\n{r.stderr}"
        got = json.loads(r.stdout)
        exp = loc[path][slice(*rows) if rows else slice(None)]
        assert got["shape"] == list(exp.shape), (path, got["shape"])
        conv = int if exp.dtype.kind in "iu" else float if exp.dtype.kind == "f" else bool
        data = np.array([conv(v) for v in got["data"]], dtype=exp.dtype).reshape(exp.shape)
        np.testing.assert_array_equal(data, exp, err_msg=path)


# ------------------------------------------------------------ bad zips (item 4)
def test_bad_zips_are_what_they_claim(bad_root):
    """Each bad zip holds its one lie: Python's zipfile refuses (or reads
    wrong) what cellar must refuse."""
    for name in ("bad_huge_directory.zip", "bad_truncated.zarr.zip", "bad_not_a_zip.zip"):
        with pytest.raises(zipfile.BadZipFile):
            zipfile.ZipFile(bad_root / name)
    with zipfile.ZipFile(bad_root / "bad_dotdot.zip") as zf:
        assert "../zarray" in zf.namelist()
    with zipfile.ZipFile(bad_root / "bad_encrypted_chunk.zip") as zf:
        assert zf.getinfo(ZW.CHUNK).flag_bits & 1
    with zipfile.ZipFile(bad_root / "bad_bzip2_chunk.zip") as zf:
        assert zf.getinfo(ZW.CHUNK).compress_type == 12
    with zipfile.ZipFile(bad_root / "bad_overlapping.zarr.zip") as zf:
        a, b = zf.infolist()
        assert a.header_offset < b.header_offset < a.header_offset + 30 + len(a.filename) + a.file_size
    with zipfile.ZipFile(bad_root / "bad_over_limit.zip") as zf:
        info = zf.getinfo("X/c/0/0")
        assert info.file_size > LIMIT and info.compress_size < info.file_size / 100


@pytest.mark.parametrize("name", sorted(ZW.BAD))
def test_bad_zip_is_422_and_serving_goes_on(bad_server, name):
    detail, route = ZW.BAD[name]
    path = store_path(name) + (f"/{route}" if route else "")
    r = bad_server.get(path)
    p = assert_problem(r, 422)
    assert detail in p["detail"], p["detail"]
    # the same answer again (the version's verdict stays), and every
    # other route that reads the entry is refused too
    assert_problem(bad_server.get(path), 422)
    if route == "X":
        key = "X/0.0" if "v3" not in name and "deflated" not in name and "limit" not in name \
            and "inflated" not in name and "4gib" not in name else "X/c/0/0"
        rk = bad_server.get(raw(name, key))
        assert_problem(rk, 422)
        # what does not touch the broken entry still answers
        assert bad_server.get(store_path(name, "obs")).status_code == 200
    assert bad_server.get("/healthz").status_code == 200
    good = bad_server.get(store_path("ad_v2_stored.zip", "X"), rows="0:5")
    assert good.status_code == 200 and good.json()["shape"] == [5, 7]
    assert bad_server.get(store_path("ad_v2_zip64.zip", "obs")).status_code == 200
    assert bad_server.alive()
