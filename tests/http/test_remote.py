"""Remote stores (issue 18): S3 roots and HTTP mounts.

The zarr fixtures of the local zip-store suite (zip_writers.write_good:
anndata v2 and sharded v3, ZipStore-written twins, a TreeData v3) are
uploaded to a bucket of a real S3 server (SeaweedFS's `weed mini`, built
from the Go module proxy at a pinned version by tests/build_weed.sh) and
served from a folder by Debian's nginx.  One cellar serves them remotely
(`--root s3://cellar/lab` beside a local root, and `--remote NAME=URL`
mounts of the nginx folder), another serves the same folder locally; every
route family answers byte for byte alike.  Then: an object replaced in the
bucket is served in its new version after the recheck interval and never
mixed with the old; faults (the S3 server stopped, hung past the timeout,
a wrong secret key, a remote answering 503 or 404) give clean 502/504
problems naming the remote status within the timeout while local stores
keep being served, and serving recovers when the remote does; /readyz
reports an S3 root that cannot be listed.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import time
import warnings
from pathlib import Path
from urllib.parse import quote

import numpy as np
import pytest
import requests

import remote_servers as RS
import writers as W
import zip_writers as ZW
from conftest import assert_problem, store_path

# The first test pays for the module's fixtures (the stores written, the S3
# server started, some 700 objects uploaded): on a loaded 2-core machine
# that can pass the suite's 60 s.
pytestmark = pytest.mark.timeout(240)

BUCKET = "cellar"
PREFIX = "lab"
TIMEOUT_MS = 3000
RECHECK = 1.0
SETTLE = 2.5  # objects written this recently are not trusted yet (remote_store.h)
MU_ZARR = "mu.zarr"                      # the local suite's MuData (W.MULTI), written as zarr
SPACED = "Zellatlas für Leber 3k.zarr"   # a blank and non-ASCII in the name (and the S3 keys)
SPACED_H5 = "Zellatlas für Leber 3k.h5ad"
DIR_STORES = [ZW.AD_V2_DIR, ZW.AD_V3_DIR, ZW.AD_V2_ZS_DIR, ZW.AD_V3_ZS_DIR, ZW.TD_V3_DIR,
              MU_ZARR, SPACED]
ZIP_STORES = [z.name for z in ZW.ZIPS]   # read by ranges of the one object
AD_H5 = "ad.h5ad"                        # the zarr stores' AnnData, written by anndata as HDF5
H5_STORES = [AD_H5, W.FRAME, W.MULTI, W.LINEAGE, SPACED_H5]  # and the local suite's HDF5 stores
STORES = DIR_STORES + ZIP_STORES + H5_STORES
LOCAL_ONLY = "here.zarr"   # a local store on the remote-serving cellar
DENSE_H5 = "dense.h5ad"    # a dense X of 960,000 bytes, contiguous in the file (not in STORES)


# ------------------------------------------------------------ fixtures
# What the web server serves for a zarr store with groups but no
# consolidated metadata: a consolidated copy.
SERVED_OVER_HTTP = {ZW.TD_V3_DIR: "td_v3_consolidated.zarr", MU_ZARR: "mu_consolidated.zarr"}


@pytest.fixture(scope="module")
def zroot(tmp_path_factory) -> Path:
    """The zip suite's stores, the local suite's MuData as zarr, two
    stores with a blank and non-ASCII letters in their names, and
    consolidated copies of the TreeData and MuData zarr stores: plain HTTP
    has no listing, so a store behind a web server must say what it holds
    (as zarr-python needs over HTTP)."""
    import mudata
    import zarr
    root = tmp_path_factory.mktemp("remote") / "root"
    ZW.write_good(root)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ZW.make_adata().write_h5ad(root / AD_H5)
        mudata.write_zarr(root / MU_ZARR, W.make_multi_mdata())
    W.write_frame(root / W.FRAME)
    W.write_multi(root / W.MULTI)
    W.write_lineage(root / W.LINEAGE)
    shutil.copytree(root / ZW.AD_V2_DIR, root / SPACED)
    write_dense(root / DENSE_H5)
    shutil.copyfile(root / AD_H5, root / SPACED_H5)
    for name, served in SERVED_OVER_HTTP.items():
        shutil.copytree(root / name, root / served)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            zarr.consolidate_metadata(str(root / served))
    return root


def write_dense(path: Path) -> None:
    """An AnnData whose X (1000 x 240 float32) anndata stores as one
    contiguous dataset, four 256 KiB blocks of the file long."""
    import anndata as ad
    import h5py
    rng = np.random.default_rng(18)
    a = ad.AnnData(X=rng.random((1000, 240)).astype(np.float32))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a.write_h5ad(path)
    with h5py.File(path, "r") as f:
        assert f["X"].chunks is None and f["X"].nbytes == 960_000


@pytest.fixture(scope="module")
def weed(tmp_path_factory, zroot):
    work = tmp_path_factory.mktemp("weed")
    s3 = RS.WeedS3(work, work / "weed.log").start()
    client = RS.S3Client(s3.endpoint)
    client.create_bucket(BUCKET)
    client.upload_tree(BUCKET, PREFIX, zroot, STORES + [DENSE_H5])
    time.sleep(SETTLE)  # quiet, so the first versions are trusted at once
    yield s3
    s3.stop()


@pytest.fixture(scope="module")
def web(tmp_path_factory, zroot):
    n = RS.Nginx(zroot, tmp_path_factory.mktemp("nginx")).start()
    yield n
    n.stop()


@pytest.fixture(scope="module")
def creds(tmp_path_factory) -> Path:
    p = tmp_path_factory.mktemp("aws") / "credentials"
    p.write_text(f"[default]\naws_access_key_id = {RS.ACCESS_KEY}\n"
                 f"aws_secret_access_key = {RS.SECRET_KEY}\n")
    return p


@pytest.fixture(scope="module")
def here_root(tmp_path_factory, zroot) -> Path:
    root = tmp_path_factory.mktemp("here")
    shutil.copytree(zroot / ZW.AD_V2_DIR, root / LOCAL_ONLY)
    return root


def remote_args(weed, web, creds, *extra):
    args = ["--root", f"s3://{BUCKET}/{PREFIX}", "--s3-endpoint", weed.endpoint,
            "--s3-credentials-file", str(creds), "--remote-timeout-ms", str(TIMEOUT_MS),
            "--remote-recheck-seconds", str(RECHECK)]
    for name in STORES:
        args += ["--remote", f"web/{name}={web.base}/{quote(SERVED_OVER_HTTP.get(name, name))}"]
    # one store of the bucket mounted by its s3:// URL under another name
    args += ["--remote", f"s3m/{AD_H5}=s3://{BUCKET}/{PREFIX}/{AD_H5}",
             "--remote", f"s3m/{ZW.AD_V3_DIR}=s3://{BUCKET}/{PREFIX}/{ZW.AD_V3_DIR}"]
    return args + list(extra)


@pytest.fixture(scope="module")
def local(zroot, server_factory):
    return server_factory(zroot)


@pytest.fixture(scope="module")
def remote(here_root, weed, web, creds, server_factory):
    return server_factory(here_root, *remote_args(weed, web, creds))


def get(server, store, route="", headers=None):
    seg, _, q = route.partition("?")
    url = server.base + store_path(store) + (f"/{seg}" if seg else "") + (f"?{q}" if q else "")
    return server.session.get(url, headers=headers, timeout=30)


# ------------------------------------------------------------ the servers themselves
def test_the_s3_server_is_real_and_signed(weed, zroot):
    """The bucket holds the fixtures; anonymous reads are refused, a
    listing signed with the test identity works."""
    r = requests.get(f"{weed.endpoint}/{BUCKET}/{PREFIX}/{ZW.AD_V3_DIR}/zarr.json", timeout=10)
    assert r.status_code == 403, r.status_code
    c = RS.S3Client(weed.endpoint)
    r = c.request("GET", BUCKET, f"{PREFIX}/{ZW.AD_V3_DIR}/zarr.json")
    assert r.status_code == 200 and r.content == (zroot / ZW.AD_V3_DIR / "zarr.json").read_bytes()


def test_store_list_names_remote_and_local_stores(remote, local):
    listed = {e["name"]: e for e in remote.get("/v1/stores").json()["stores"]}
    here = {e["name"]: e for e in local.get("/v1/stores").json()["stores"]}
    for name in STORES:
        assert listed[name]["backend"] == here[name]["backend"], name
        assert listed[name]["kind"] == here[name]["kind"], name
        assert listed["web/" + name]["kind"] == here[name]["kind"], name
    for name in ZIP_STORES + H5_STORES:  # one object: its size, from S3's listing and from a HEAD
        assert listed[name]["bytes"] == listed["web/" + name]["bytes"] == here[name]["bytes"], name
    assert listed[LOCAL_ONLY]["kind"] == "anndata"
    # S3 listings add the store's objects up; plain HTTP has no listing
    assert listed[ZW.AD_V3_DIR]["bytes"] == here[ZW.AD_V3_DIR]["bytes"]
    assert listed["web/" + ZW.AD_V3_DIR]["bytes"] is None


# ------------------------------------------------------------ every route equals the local copy
ROUTES = {
    "anndata": ["obs", "var", "obs/schema", "var/schema", "obs?format=csv",
                "obs?rows=3:9&columns=cat,f32", "obs?categorical=codes", "var?format=csv",
                "X", "X?format=bin", "X?format=npy", "X?rows=3:17&cols=1:5", "X?rows=40,2,7",
                "X?cols=2&format=bin", "layers/counts", "layers/counts?layout=csr&format=bin",
                "layers/counts?format=npz", "obsm/X_pca", "obsm/X_pca?format=npy", "varm/loadings",
                "obsp/distances", "obsp/distances?format=bin", "uns", "uns/params", "uns/note",
                "raw/X", "raw/var/schema", "raw/var", "raw/X?cols=0:3&format=bin",
                "obs?obs_names=AAAC-04,AAAC-17", "X?obs_names=AAAC-04",
                "X?var_names=ENSG00003&format=bin", "X?var_names=ENSG00001,ENSG00005"],
    "treedata": ["obs", "obst", "obst/tree1", "obst/tree1?format=newick", "X", "obs/schema",
                 "obst/tree1/leaves"],
    "frame": ["obs", "var", "obs/schema", "obs?format=csv", "obs?rows=-5:&columns=s,nstr",
              "X", "X?format=npy", "X?cols=3&format=bin"],
    "mudata": ["mod", "obs", "var", "mod/rna/obs", "mod/rna/X", "mod/prot/var", "obsmap/rna",
               "varmap/prot", "obsmap/prot?rows=-6:", "mod/rna/obs/schema"],
    "lineage": ["obs", "obst", "obst/tree1", "obst/tree1?format=newick", "X",
                "obst/tree1/leaves"],
}
KIND = {ZW.TD_V3_DIR: "treedata", **{z.name: z.kind for z in ZW.ZIPS},
        W.FRAME: "frame", W.MULTI: "mudata", MU_ZARR: "mudata", W.LINEAGE: "lineage"}
SUMMARY_FILE_KEYS = {"name", "etag", "mtime", "bytes"}


@pytest.mark.parametrize("via", ["s3", "http"])
@pytest.mark.parametrize("name", STORES)
def test_every_route_equals_local(remote, local, name, via):
    """Summary, frames, X by rows and by gene, layers, obsm/obsp, uns,
    raw and trees answer from the bucket (and from nginx) byte for byte
    as from the local copy (the summary: but for what names the copy)."""
    there = name if via == "s3" else "web/" + name
    a, b = get(remote, there), get(local, name)
    assert a.status_code == b.status_code == 200, (a.text[:300], b.text[:300])
    ja, jb = a.json(), b.json()
    assert {k: v for k, v in ja.items() if k not in SUMMARY_FILE_KEYS} == \
           {k: v for k, v in jb.items() if k not in SUMMARY_FILE_KEYS}
    for route in ROUTES[KIND.get(name, "anndata")]:
        a, b = get(remote, there, route), get(local, name, route)
        assert a.status_code == b.status_code == 200, (route, a.text[:300], b.text[:300])
        assert a.content == b.content, route
        assert a.headers.get("Content-Type") == b.headers.get("Content-Type"), route


@pytest.mark.parametrize("via", ["s3", "http"])
def test_trees_subtree_and_nodes_equal_local(remote, local, via):
    there = ZW.TD_V3_DIR if via == "s3" else "web/" + ZW.TD_V3_DIR
    tree = get(local, ZW.TD_V3_DIR, "obst/tree1").json()
    root = next(n["id"] for n in tree["nodes"] if not any(e["target"] == n["id"] for e in tree["links"]))
    for route in (f"obst/tree1/subtree?root={root}&depth=2", f"obst/tree1/nodes/{root}",
                  f"obst/tree1/ancestors?node={root}"):
        a, b = get(remote, there, route), get(local, ZW.TD_V3_DIR, route)
        assert a.status_code == b.status_code, (route, a.text[:200], b.text[:200])
        assert a.content == b.content, route


def _store_files(zroot: Path, name: str) -> dict[str, bytes]:
    d = zroot / name
    return {p.relative_to(d).as_posix(): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def raw(store: str, key: str) -> str:
    return store_path(store) + "/zarr/" + key


@pytest.mark.parametrize("via", ["s3", "http"])
@pytest.mark.parametrize("name", [ZW.AD_V2_DIR, ZW.AD_V3_DIR])
def test_raw_keys_equal_local(remote, local, zroot, name, via):
    """Every key is served with the local copy's bytes and headers (the
    zarr views: metadata as stored or built, chunks and shards), with
    Range and HEAD."""
    there = name if via == "s3" else "web/" + name
    for key, data in _store_files(zroot, name).items():
        a = remote.session.get(remote.base + raw(there, key), timeout=30)
        b = local.session.get(local.base + raw(name, key), timeout=30)
        assert a.status_code == b.status_code == 200, (key, a.text[:300])
        assert a.content == b.content, key
        if key not in ("zarr.json", ".zmetadata"):
            assert a.content == data, key
        assert a.headers["Content-Type"] == b.headers["Content-Type"], key
    key = "X/c/0/0" if name == ZW.AD_V3_DIR else "X/0.0"
    data = (zroot / name / key).read_bytes()
    r = remote.session.get(remote.base + raw(there, key), headers={"Range": "bytes=2-9"}, timeout=30)
    assert r.status_code == 206 and r.content == data[2:10]
    h = remote.session.head(remote.base + raw(there, key), timeout=30)
    assert h.status_code == 200 and int(h.headers["Content-Length"]) == len(data)
    assert_problem(remote.session.get(remote.base + raw(there, "nope/0.0"), timeout=30), 404)


@pytest.mark.parametrize("via", ["s3", "http"])
@pytest.mark.parametrize("name", ["ad_v2_stored.zip", "ad_v3_deflated.zip", "ad_v3.zarr.zip"])
def test_zip_raw_keys_equal_local(remote, local, zroot, name, via):
    """A remote zip's keys (stored ones read by range, deflated ones
    decoded) are the local zip's, and its listing is the same."""
    there = name if via == "s3" else "web/" + name
    twin = ZW.BY_NAME[name].twin
    for key, data in _store_files(zroot, twin).items():
        if key in ("zarr.json", ".zmetadata"):
            continue
        a = remote.session.get(remote.base + raw(there, key), timeout=30)
        b = local.session.get(local.base + raw(name, key), timeout=30)
        assert a.status_code == b.status_code == 200, (key, a.text[:300])
        assert a.content == b.content == data, key
    a = remote.session.get(remote.base + raw(there, ""), timeout=30)
    b = local.session.get(local.base + raw(name, ""), timeout=30)
    assert a.status_code == b.status_code == 200
    assert a.text.replace(there, name) == b.text  # the index names its store


@pytest.mark.parametrize("via", ["s3", "http"])
@pytest.mark.parametrize("name", [AD_H5, W.MULTI])
def test_zarr_view_of_remote_hdf5_equals_local(remote, local, name, via):
    """The zarr view of a remote HDF5 store (its .zmetadata, every array's
    first chunk) is the local copy's byte for byte."""
    import json
    there = name if via == "s3" else "web/" + name
    a = remote.session.get(remote.base + raw(there, ".zmetadata"), timeout=30)
    b = local.session.get(local.base + raw(name, ".zmetadata"), timeout=30)
    assert a.status_code == b.status_code == 200, a.text[:300]
    assert a.content == b.content
    arrays = [k[: -len("/.zarray")] for k in json.loads(b.content)["metadata"] if k.endswith("/.zarray")]
    assert arrays
    for arr in arrays[:40]:
        meta = json.loads(b.content)["metadata"][arr + "/.zarray"]
        key = arr + "/" + ".".join("0" for _ in meta["shape"]) if meta["shape"] else arr + "/0"
        ra = remote.session.get(remote.base + raw(there, key), timeout=30)
        rb = local.session.get(local.base + raw(name, key), timeout=30)
        assert ra.status_code == rb.status_code, (key, ra.text[:200])
        assert ra.content == rb.content, key


def test_s3_listing_serves_unconsolidated_directories(remote, local):
    """The raw route's directory index comes from the S3 listing."""
    import fsspec
    fs = fsspec.filesystem("http")
    for rel in ("", "obs", "X"):
        a = sorted(p.rstrip("/").rsplit("/", 1)[1]
                   for p in fs.ls(remote.base + store_path(ZW.AD_V2_DIR) + "/zarr/" + rel, detail=False))
        b = sorted(p.rstrip("/").rsplit("/", 1)[1]
                   for p in fs.ls(local.base + store_path(ZW.AD_V2_DIR) + "/zarr/" + rel, detail=False))
        assert a == b and a, (rel, a, b)


def test_zarr_python_reads_the_bucket_through_cellar(remote, zroot):
    import zarr
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        g = zarr.open_group(remote.base + store_path(ZW.AD_V3_DIR) + "/zarr", mode="r")
        here = zarr.open_group(zroot / ZW.AD_V3_DIR, mode="r")
        for path in ("X", "obs/f32", "obsm/X_pca", "layers/counts/data"):
            np.testing.assert_array_equal(g[path][...], here[path][...], err_msg=path)


def test_remote_hdf5_files_are_probed_first(remote):
    """libhdf5 sees a remote HDF5 version only after a probe process walked
    it (its bytes read by the server for it, through the byte cache)."""
    text = remote.get("/metrics").text
    ok = next(float(ln.split()[1]) for ln in text.splitlines()
              if ln.startswith('cellar_probes_total{outcome="ok"}'))
    assert ok >= len(H5_STORES) * 2  # from S3 and from nginx


def test_damaged_remote_hdf5_is_422_and_serving_goes_on(remote, weed, zroot, tmp_path):
    data = (zroot / AD_H5).read_bytes()
    c = RS.S3Client(weed.endpoint)
    c.put(BUCKET, f"{PREFIX}/cut.h5ad", data[: len(data) // 3])
    c.put(BUCKET, f"{PREFIX}/text.h5ad", b"not an HDF5 file at all\n" * 50)
    time.sleep(SETTLE)
    assert_problem(get(remote, "cut.h5ad", "obs"), 422)
    assert_problem(get(remote, "text.h5ad", "obs"), 422)
    assert get(remote, AD_H5, "obs").status_code == 200
    assert get(remote, LOCAL_ONLY, "obs").status_code == 200


def _metric(server, name):
    for ln in server.get("/metrics").text.splitlines():
        if ln.startswith(name + " "):
            return float(ln.split()[1])
    raise AssertionError(name)


def test_chunks_one_request_needs_are_fetched_together(here_root, weed, web, creds,
                                                       server_factory, local, zroot):
    """A slice over many chunks of an S3 store: the chunks are fetched on
    one multi handle before they are decoded (the reads then find them in
    the byte cache), and the answer is the local one."""
    s = server_factory(here_root, *remote_args(weed, web, creds, "--answer-cache-bytes", "0"))
    assert get(s, ZW.AD_V2_DIR, "obs/schema").status_code == 200  # opened
    chunks = len(list((zroot / ZW.AD_V2_DIR / "X").glob("[0-9]*.[0-9]*")))
    assert chunks >= 10
    hits0 = _metric(s, "cellar_remote_cache_hits_total")
    r = get(s, ZW.AD_V2_DIR, "X?format=bin")
    assert r.status_code == 200 and r.content == get(local, ZW.AD_V2_DIR, "X?format=bin").content
    assert _metric(s, "cellar_remote_cache_hits_total") - hits0 >= chunks


def s3_args(endpoint, creds, *extra):
    """Flags of a cellar serving only the bucket's root through endpoint
    (the S3 server, or a proxy in front of it), identities kept a minute."""
    return ["--root", f"s3://{BUCKET}/{PREFIX}", "--s3-endpoint", endpoint,
            "--s3-credentials-file", str(creds), "--remote-timeout-ms", "20000",
            "--remote-recheck-seconds", "60", "--answer-cache-bytes", "0", *extra]


def test_chunks_one_request_needs_are_fetched_in_parallel(here_root, weed, creds, server_factory,
                                                          local, zroot):
    """Through a proxy that holds every request 150 ms: the chunk GETs of
    one slice overlap (several in flight at once), so the answer takes far
    less than one delay per chunk."""
    delay = 0.15
    proxy = RS.Proxy(weed.endpoint, delay=delay).start()
    try:
        s = server_factory(here_root, *s3_args(proxy.endpoint, creds))
        assert get(s, ZW.AD_V2_DIR, "obs/schema").status_code == 200  # opened
        chunks = len(list((zroot / ZW.AD_V2_DIR / "X").glob("[0-9]*.[0-9]*")))
        assert chunks >= 10
        proxy.reset()
        t0 = time.monotonic()
        r = get(s, ZW.AD_V2_DIR, "X?format=bin")
        took = time.monotonic() - t0
        assert r.status_code == 200 and r.content == get(local, ZW.AD_V2_DIR, "X?format=bin").content
        fetched = [path for _, _, path, _ in proxy.seen
                   if "/X/" in path and not path.rsplit("/", 1)[1].startswith(".")]
        assert len(fetched) == chunks, [p for _, _, p, _ in proxy.seen]
        assert proxy.max_in_flight >= 2, proxy.max_in_flight
        # One after the other they would take chunks x delay at least; at
        # most 8 at once, two rounds (0.45 s on an idle machine).
        assert took < chunks * delay * 0.7, (took, chunks)
    finally:
        proxy.stop()


def test_adjacent_blocks_of_a_remote_file_are_one_get(here_root, weed, creds, server_factory,
                                                      local):
    """A contiguous dataset of 960,000 bytes (four 256 KiB blocks) of a
    remote .h5ad, read after the file is open: its missing blocks are
    fetched in one ranged GET."""
    s = server_factory(here_root, *s3_args(weed.endpoint, creds))
    assert get(s, DENSE_H5, "obs/schema").status_code == 200  # probed and opened
    n0 = _metric(s, "cellar_remote_requests_total")
    r = get(s, DENSE_H5, "X?format=bin")
    assert r.status_code == 200 and len(r.content) == 960_000
    assert r.content == get(local, DENSE_H5, "X?format=bin").content
    assert _metric(s, "cellar_remote_requests_total") - n0 == 1


def test_identities_are_not_fetched_again_within_the_recheck(here_root, weed, web, creds,
                                                             server_factory):
    """Within --remote-recheck-seconds of its identity's last fetch, a
    store answers from what is cached without one request to the remote
    (no listing, HEAD or GET); once the interval has passed, the next
    request fetches the identity again."""
    recheck = 6.0  # the loop below ends some 4 s before the identities fetched for it are due
    s = server_factory(here_root, *remote_args(weed, web, creds, "--remote-recheck-seconds",
                                               str(recheck), "--answer-cache-bytes", "0"))
    asked = [(ZW.AD_V3_DIR, "X?format=bin"), (AD_H5, "obs?rows=0:5"), (AD_H5, "X?format=bin"),
             ("web/" + ZW.AD_V2_DIR, "obs"), ("ad_v2_stored.zip", "X?format=bin")]
    for _ in range(2):
        for store, route in asked:
            assert get(s, store, route).status_code == 200, (store, route)
    time.sleep(recheck + 0.2)
    n0 = _metric(s, "cellar_remote_requests_total")
    for store, route in asked:
        assert get(s, store, route).status_code == 200, (store, route)
    t1 = time.monotonic()
    n1 = _metric(s, "cellar_remote_requests_total")
    assert n1 - n0 >= 4  # a listing, two HEADs of objects, the web store's root document
    answered = 0
    while time.monotonic() < t1 + 2:
        for store, route in asked:
            assert get(s, store, route).status_code == 200, (store, route)
            answered += 1
    assert answered >= len(asked)
    assert _metric(s, "cellar_remote_requests_total") == n1


def test_s3_configured_by_the_environment_alone(tmp_path, here_root, weed, server_factory,
                                                local, monkeypatch):
    """AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL_S3 and
    AWS_REGION, no S3 flag and no credentials file: the bucket is read,
    signed for that region, and answers as the local copy."""
    proxy = RS.Proxy(weed.endpoint).start()
    try:
        for var in ("AWS_SESSION_TOKEN", "AWS_SHARED_CREDENTIALS_FILE", "AWS_PROFILE",
                    "AWS_ENDPOINT_URL", "AWS_DEFAULT_REGION"):
            monkeypatch.delenv(var, raising=False)
        monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.aws/credentials
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", RS.ACCESS_KEY)
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", RS.SECRET_KEY)
        monkeypatch.setenv("AWS_ENDPOINT_URL_S3", proxy.endpoint)
        monkeypatch.setenv("AWS_REGION", "eu-central-1")
        s = server_factory(here_root, "--root", f"s3://{BUCKET}/{PREFIX}")
        for route in ("obs", "X?format=bin"):
            a, b = get(s, ZW.AD_V3_DIR, route), get(local, ZW.AD_V3_DIR, route)
            assert a.status_code == b.status_code == 200, (route, a.text[:300])
            assert a.content == b.content, route
        auth = [h.get("Authorization", "") for _, _, _, h in proxy.seen]
        assert auth and all(f"Credential={RS.ACCESS_KEY}/" in a and "/eu-central-1/s3/aws4_request"
                            in a for a in auth), auth[:3]
    finally:
        proxy.stop()


def test_remote_bytes_spill_to_the_cache_dir(tmp_path, here_root, weed, web, creds,
                                             server_factory, local):
    """With --cache-dir, remote bytes pushed out of a small
    --remote-cache-bytes go to files there and are read back from them
    (answers unchanged, no new GET); the files go with the server."""
    cache = tmp_path / "cache"
    cache.mkdir()
    s = server_factory(here_root, *remote_args(weed, web, creds, "--cache-dir", str(cache),
                                               "--remote-cache-bytes", "4000",
                                               "--zarr-chunk-cache-bytes", "0",
                                               "--answer-cache-bytes", "0"))
    routes = ["X?format=bin", "layers/counts?layout=csr&format=bin", "obsm/X_pca?format=npy",
              "obs?format=csv", "raw/X?format=bin"]
    first = {r: get(s, ZW.AD_V2_DIR, r) for r in routes}
    for r, resp in first.items():
        assert resp.status_code == 200 and resp.content == get(local, ZW.AD_V2_DIR, r).content, r
    assert _metric(s, "cellar_remote_cache_disk_entries") > 0, [ln for ln in s.get("/metrics").text.splitlines() if ln.startswith("cellar_remote")]
    assert list(cache.glob("remote-*/*.bin"))
    hits0 = _metric(s, "cellar_remote_cache_disk_hits_total")
    gets0 = _metric(s, "cellar_remote_requests_total")
    for r in routes:
        assert get(s, ZW.AD_V2_DIR, r).content == first[r].content, r
    assert _metric(s, "cellar_remote_cache_disk_hits_total") > hits0
    assert _metric(s, "cellar_remote_requests_total") < gets0 + len(routes) * 3
    s.stop()
    assert not list(cache.glob("remote-*"))


def test_local_stores_beside_remote(remote, zroot):
    r = get(remote, LOCAL_ONLY, "X?format=bin")
    assert r.status_code == 200
    ref = get(remote, ZW.AD_V2_DIR, "X?format=bin")
    assert r.content == ref.content


def test_metrics_count_remote_requests(remote):
    text = remote.get("/metrics").text
    lines = {ln.split(" ")[0]: ln.split(" ")[1] for ln in text.splitlines()
             if ln.startswith("cellar_remote_")}
    assert float(lines["cellar_remote_requests_total"]) > 0
    assert "cellar_remote_cache_bytes" in lines and "cellar_remote_cache_hits_total" in lines


# ------------------------------------------------------------ replaced objects
def _digest(resp) -> str:
    return hashlib.sha256(resp.content).hexdigest()


def _versions_of(zroot: Path, tmp: Path):
    """Two versions of one store: the fixture's, and the same store with
    X doubled (written by anndata), differing in every chunk of X."""
    import anndata as ad
    a = ZW.make_adata()
    b = a.copy()
    b.X = b.X * 2
    va, vb = tmp / "a.zarr", tmp / "b.zarr"
    ZW.write_dir(a, va, 3, False)
    ZW.write_dir(b, vb, 3, False)
    assert not np.array_equal(ad.read_zarr(va).X, ad.read_zarr(vb).X)
    return va, vb


def _wait_for_version(server, store, route, want, other, limit):
    """Polls until the answer is want; every answer on the way is either
    version whole.  Returns the seconds it took."""
    t0 = time.monotonic()
    while True:
        r = get(server, store, route)
        assert r.status_code in (200, 503), (r.status_code, r.text[:300])
        if r.status_code == 200:
            d = _digest(r)
            assert d in (want, other), "an answer mixed two versions"
            if d == want:
                return time.monotonic() - t0, r
        assert time.monotonic() - t0 < limit, "the new version was not served in time"
        time.sleep(0.05)


def test_replaced_objects_are_a_new_version_never_mixed(remote, weed, tmp_path, zroot,
                                                      server_factory):
    """Every object of a store replaced in the bucket, one PUT after the
    other: the old version is served whole until the recheck interval has
    passed, then the new one with a new ETag; no answer ever holds chunks
    of both (a listing taken while the objects were being written is not
    trusted until they are quiet, and every GET names the ETag its
    version listed)."""
    va, vb = _versions_of(zroot, tmp_path)
    ref = server_factory(tmp_path)  # the two versions, read locally
    want_a = _digest(get(ref, "a.zarr", "X?format=bin"))
    want_b = _digest(get(ref, "b.zarr", "X?format=bin"))
    assert want_a != want_b
    c = RS.S3Client(weed.endpoint)
    c.upload_tree(BUCKET, f"{PREFIX}/swap.zarr", va)
    _, ra = _wait_for_version(remote, "swap.zarr", "X?format=bin", want_a, want_a, 10)
    c.upload_tree(BUCKET, f"{PREFIX}/swap.zarr", vb)
    took, rb = _wait_for_version(remote, "swap.zarr", "X?format=bin", want_b, want_a,
                                 RECHECK + SETTLE + 8)
    assert rb.headers["ETag"] != ra.headers["ETag"]
    for _ in range(5):
        assert _digest(get(remote, "swap.zarr", "X?format=bin")) == want_b


def test_replaced_zip_object_is_a_new_version(remote, weed, tmp_path, zroot, server_factory):
    """A zip store is one object: replaced by one PUT, it is served in the
    new version after the recheck interval (its ranges of the old version
    are never mixed in: each names the ETag of its version)."""
    import zipfile
    va, vb = _versions_of(zroot, tmp_path)
    ZW.zip_directory(va, tmp_path / "a.zip", zipfile.ZIP_STORED)
    ZW.zip_directory(vb, tmp_path / "b.zip", zipfile.ZIP_DEFLATED)
    _swap_object(remote, weed, server_factory(tmp_path), tmp_path / "a.zip", tmp_path / "b.zip")


def _swap_object(remote, weed, ref, a: Path, b: Path) -> str:
    """Puts file a as the bucket's swap<suffix>, then b over it: each is
    served in turn (b after the recheck interval) and no answer on the way
    mixes the two (ref serves a and b locally).  The name served."""
    name = "swap" + a.suffix
    want_a = _digest(get(ref, a.name, "X?format=bin"))
    want_b = _digest(get(ref, b.name, "X?format=bin"))
    assert want_a != want_b
    c = RS.S3Client(weed.endpoint)
    c.put(BUCKET, f"{PREFIX}/{name}", a.read_bytes())
    _, ra = _wait_for_version(remote, name, "X?format=bin", want_a, want_a, 10)
    c.put(BUCKET, f"{PREFIX}/{name}", b.read_bytes())
    _, rb = _wait_for_version(remote, name, "X?format=bin", want_b, want_a, RECHECK + 8)
    assert rb.headers["ETag"] != ra.headers["ETag"]
    for _ in range(3):
        assert _digest(get(remote, name, "X?format=bin")) == want_b
    return name


def test_replaced_hdf5_object_is_a_new_version(remote, weed, tmp_path, server_factory):
    """A remote .h5ad replaced by one PUT of another file: served in the
    new version after the recheck interval, never an answer mixing the
    bytes (or the metadata) of the two.  Both files are several 256 KiB
    blocks long, so blocks of the old one at the same offsets would be
    found if the byte cache did not tell the versions apart."""
    import anndata as ad
    a = ad.AnnData(X=np.random.default_rng(4).random((1000, 240)).astype(np.float32))
    b = a.copy()
    b.X = b.X * 2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a.write_h5ad(tmp_path / "a.h5ad")
        b.write_h5ad(tmp_path / "b.h5ad", compression="gzip")
    assert not np.array_equal(ad.read_h5ad(tmp_path / "a.h5ad").X, ad.read_h5ad(tmp_path / "b.h5ad").X)
    ref = server_factory(tmp_path)
    name = _swap_object(remote, weed, ref, tmp_path / "a.h5ad", tmp_path / "b.h5ad")
    assert get(remote, name, "obs").content == get(ref, "b.h5ad", "obs").content


def test_http_mount_replaced(tmp_path, zroot, server_factory, creds, weed):
    """A store behind nginx replaced on the web server (renamed over): the
    mount serves the new version after the recheck interval, never mixed."""
    va, vb = _versions_of(zroot, tmp_path)
    site = tmp_path / "site"
    site.mkdir()
    shutil.copytree(va, site / "s.zarr")
    n = RS.Nginx(site, tmp_path / "nginx").start()
    try:
        s = server_factory(site, "--remote", f"m/s.zarr={n.base}/s.zarr", "--remote-recheck-seconds",
                           str(RECHECK), "--remote-timeout-ms", str(TIMEOUT_MS))
        ra = get(s, "m/s.zarr", "X?format=bin")
        assert ra.status_code == 200, ra.text[:300]
        da = _digest(ra)
        # The new directory as a writer would leave it: files newer than
        # the old ones (copytree would keep vb's times, of the same second
        # as va's), so the root documents' ETags (nginx: mtime and size)
        # say it is another store.
        tmp = site / "s.zarr.tmp"
        shutil.copytree(vb, tmp)
        newer = (site / "s.zarr" / "zarr.json").stat().st_mtime + 2
        for p in tmp.rglob("*"):
            os.utime(p, (newer, newer))
        shutil.rmtree(site / "s.zarr")
        tmp.rename(site / "s.zarr")
        want = _digest(get(s, "s.zarr", "X?format=bin"))  # the same folder, read locally
        assert want != da
        _, rb = _wait_for_version(s, "m/s.zarr", "X?format=bin", want, da, 10 * RECHECK + 5)
        assert rb.headers["ETag"] != ra.headers["ETag"]
    finally:
        n.stop()


# ------------------------------------------------------------ faults
@pytest.mark.parametrize("name", [AD_H5, ZW.AD_V3_DIR])
def test_s3_url_mounts_equal_local(remote, local, name):
    for route in ("obs", "X?format=bin", "obsm/X_pca?format=npy"):
        a, b = get(remote, "s3m/" + name, route), get(local, name, route)
        assert a.status_code == b.status_code == 200, (route, a.text[:200])
        assert a.content == b.content, route


def test_without_credentials_requests_go_unsigned(tmp_path, here_root, weed, web, server_factory,
                                                  monkeypatch):
    """No AWS_* variables and no credentials file: requests are anonymous
    (for public buckets); this bucket refuses them, which is a 502 naming
    S3's refusal, and the web server's stores (no key needed) are served."""
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
                "AWS_SHARED_CREDENTIALS_FILE", "AWS_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.aws/credentials
    args = [a for a in remote_args(weed, web, tmp_path / "unused")]
    i = args.index("--s3-credentials-file")
    del args[i:i + 2]
    s = server_factory(here_root, *args)
    body = assert_problem(get(s, ZW.AD_V3_DIR, "obs"), 502, detail_contains="403")
    assert "AccessDenied" in body["detail"], body
    assert get(s, "web/" + ZW.AD_V3_DIR, "obs").status_code == 200
    assert "anonymous requests" in s.log.read_text(errors="replace")


def test_wrong_secret_key_is_502_naming_the_refusal(tmp_path, here_root, weed, web, server_factory):
    bad = tmp_path / "credentials"
    bad.write_text(f"[default]\naws_access_key_id = {RS.ACCESS_KEY}\naws_secret_access_key = wrong\n")
    s = server_factory(here_root, *remote_args(weed, web, bad))
    t0 = time.monotonic()
    body = assert_problem(get(s, ZW.AD_V3_DIR, "obs"), 502, detail_contains="403")
    assert "SignatureDoesNotMatch" in body["detail"] or "AccessDenied" in body["detail"], body
    assert time.monotonic() - t0 < TIMEOUT_MS / 1000 + 2
    assert get(s, LOCAL_ONLY, "obs").status_code == 200
    assert get(s, "web/" + ZW.AD_V3_DIR, "obs").status_code == 200  # nginx needs no key
    r = s.get("/readyz")
    assert_problem(r, 503, detail_contains="cannot be listed")
    assert f"s3://{BUCKET}" in r.json()["detail"]


def nginx_down(tmp_path) -> RS.Nginx:
    """nginx over an empty folder, answering 503 to every path below /down/."""
    site = tmp_path / "site"
    site.mkdir()
    n = RS.Nginx(site, tmp_path / "nginx")
    conf = (n.workdir / "nginx.conf").read_text().replace(
        "location / { }", "location / { }\n        location /down/ { return 503; }")
    (n.workdir / "nginx.conf").write_text(conf)
    return n.start()


def test_remote_answering_503_is_retried_then_502(tmp_path, here_root, server_factory):
    n = nginx_down(tmp_path)
    try:
        s = server_factory(here_root, "--remote", f"d/s.zarr={n.base}/down/s.zarr",
                           "--remote", f"gone/s.zarr={n.base}/missing/s.zarr",
                           "--remote-retries", "2", "--remote-timeout-ms", str(TIMEOUT_MS))
        before = len(n.access_lines())
        assert_problem(get(s, "d/s.zarr", "obs"), 502, detail_contains="503")
        tries = [ln for ln in n.access_lines()[before:] if "/down/s.zarr/zarr.json" in ln]
        assert len(tries) == 3, tries  # the first GET and two retries
        assert_problem(get(s, "gone/s.zarr", "obs"), 502, detail_contains="404")
        assert get(s, LOCAL_ONLY, "obs").status_code == 200
    finally:
        n.stop()


def test_retries_back_off(tmp_path, here_root, server_factory):
    """A remote answering 503: each retry waits longer than the one
    before (50 ms, then doubling), as nginx's clock sees the attempts."""
    n = nginx_down(tmp_path)
    try:
        s = server_factory(here_root, "--remote", f"d/s.zarr={n.base}/down/s.zarr",
                           "--remote-retries", "3", "--remote-timeout-ms", "5000")
        before = len(n.request_times("/down/s.zarr/zarr.json"))
        assert_problem(get(s, "d/s.zarr", "obs"), 502, detail_contains="503")
        times = n.request_times("/down/s.zarr/zarr.json")[before:]
        assert len(times) == 4, times  # the first GET and three retries
        gaps = [b - a for a, b in zip(times, times[1:])]
        # Each wait at least its doubling share (50, 100, 200 ms, less
        # nginx's millisecond clock): a loaded machine only lengthens a
        # wait, so the measured gaps are not compared with each other.
        assert all(g >= 0.045 * 2 ** i for i, g in enumerate(gaps)), gaps
    finally:
        n.stop()


def test_s3_server_stopped_then_back(tmp_path, here_root, weed, web, creds, server_factory):
    """The S3 server stopped mid-run: stores it holds are 502 within the
    timeout (the remote's error in the detail), /readyz says the root
    cannot be listed, local stores and the nginx mounts go on; when it is
    back, everything is served again."""
    s = server_factory(here_root, *remote_args(weed, web, creds))
    assert get(s, ZW.AD_V3_DIR, "X?format=bin").status_code == 200
    assert s.get("/readyz").status_code == 200
    weed.stop()
    try:
        time.sleep(RECHECK + 0.2)  # past the recheck: the identity is fetched again
        t0 = time.monotonic()
        body = assert_problem(get(s, ZW.AD_V3_DIR, "obs?rows=0:4"), 502)
        assert "cannot be reached" in body["detail"], body
        assert time.monotonic() - t0 < TIMEOUT_MS / 1000 + 2
        assert_problem(get(s, ZW.AD_V2_DIR, "obs"), 502)
        assert_problem(get(s, "ad_v2_stored.zip", "obs"), 502)
        assert_problem(get(s, AD_H5, "obs"), 502)
        assert get(s, LOCAL_ONLY, "obs").status_code == 200
        assert get(s, "web/" + ZW.AD_V3_DIR, "obs").status_code == 200
        assert_problem(s.get("/readyz"), 503, detail_contains="cannot be listed")
    finally:
        weed.start()
    deadline = time.monotonic() + 20
    while get(s, ZW.AD_V3_DIR, "obs?rows=0:4").status_code != 200:
        assert time.monotonic() < deadline, "no recovery after the S3 server came back"
        time.sleep(0.2)
    assert get(s, ZW.AD_V2_DIR, "X?format=bin").status_code == 200
    deadline = time.monotonic() + 5
    while s.get("/readyz").status_code != 200:
        assert time.monotonic() < deadline
        time.sleep(0.2)


def test_slow_s3_server_is_504_within_the_timeout(tmp_path, here_root, weed, web, creds,
                                                   server_factory, local):
    """The S3 server hung (SIGSTOP: connections accepted, never answered):
    a read past --remote-timeout-ms is 504 in about that time; local stores
    are served meanwhile; it recovers when the server goes on."""
    s = server_factory(here_root, *remote_args(weed, web, creds, "--remote-timeout-ms", "1500"))
    assert get(s, ZW.AD_V3_ZS_DIR, "obs").status_code == 200
    weed.pause()
    try:
        time.sleep(RECHECK + 0.2)
        t0 = time.monotonic()
        body = assert_problem(get(s, ZW.AD_V3_ZS_DIR, "obs?rows=1:3"), 504)
        took = time.monotonic() - t0
        assert "did not answer within 1500 ms" in body["detail"], body
        assert 1.3 < took < 4, took
        t0 = time.monotonic()
        assert get(s, LOCAL_ONLY, "obs?rows=0:3").status_code == 200
        assert time.monotonic() - t0 < 1
    finally:
        weed.resume()
    deadline = time.monotonic() + 20
    while get(s, ZW.AD_V3_ZS_DIR, "obs?rows=1:3").status_code != 200:
        assert time.monotonic() < deadline, "no recovery after the S3 server went on"
        time.sleep(0.2)
    a = get(s, ZW.AD_V3_ZS_DIR, "obs?rows=1:3")
    assert a.content == get(local, ZW.AD_V3_ZS_DIR, "obs?rows=1:3").content
