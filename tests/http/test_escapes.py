"""Nothing outside the root, and nothing but what a store declares, over
every route at once.  test_hdf5_escapes.py and test_zarr_escapes.py plant
one escape per kind (HDF5 external storage, virtual datasets, external
links; zarr v2 chunk and group symlinks, dotfiles, a FIFO chunk, a chunk
linked to itself); this file adds what they leave out:

- libhdf5 never even opens a file an element names outside the root: the
  external file, the virtual dataset's source and the external link's
  target are FIFOs there, and a request that opened one would hang; soft
  links whose path runs through an external link are refused too;
- zarr v3 stores (consolidated and not) whose chunks and groups are
  symlinks out of the store, next to symlinks that stay inside (relative
  and absolute), which still answer the right values;
- raw keys: regular files inside a store that are no zarr key (notes,
  editor backups, chunks outside the grid or of the wrong rank, numbers
  written differently) are 404 like a missing key;
- stores that are a FIFO or a symlink to themselves are answered at once;
- Range headers with numbers past 2^64 are ignored or 416 (RFC 9110 14.2).

Request traversals (`..`, %2F, absolute paths, NUL) are covered by
test_errors.py (store names) and test_zarr.py (raw keys).

Each store is written by anndata, h5py or zarr; the plants are made by
hand.  The secret's bytes must appear in no answer."""

from __future__ import annotations

import json
import os
import shutil
import time

import anndata as ad
import h5py
import numpy as np
import pytest
import zarr

from zarr_writers import zarr_settings

SECRET = b"ESC4PE-S3CR3T-0123456789abcdef!!"  # 32 bytes: 4 float64s, 32 int8s
NEEDLES = (SECRET, SECRET[:12], SECRET.hex().encode(), b"ESC4PE")
SECRET_INTS = ", ".join(str(b) for b in SECRET[:4]).encode()  # as JSON numbers
QUICK = 5.0  # seconds: an answer that took longer waited on a FIFO

ROUTES = ["", "/obs", "/var", "/X", "/X?format=bin", "/X?format=npy", "/uns", "/obsm",
          "/obsm/X_umap", "/obsm/X_umap?format=bin", "/layers/counts",
          "/layers/counts?format=bin", "/uns/ext", "/uns/vds", "/uns/vds_unlimited",
          "/uns/linked", "/uns/leak", "/uns/leak/data", "/uns/leak/data?format=bin"]


def make_adata() -> ad.AnnData:
    rng = np.random.default_rng(19)
    a = ad.AnnData(X=rng.random((6, 4)).astype(np.float32))
    a.obs_names = [f"c{i}" for i in range(6)]
    a.obsm["X_umap"] = rng.random((6, 2))
    a.layers["counts"] = rng.random((6, 4)).astype(np.float32)
    return a


def first_chunk(array_dir):
    """The path of an array's first chunk file (v3 default keys)."""
    return sorted(p for p in (array_dir / "c").rglob("*") if not p.is_dir())[0]


def write_outside(outside):
    (outside / "secret.bin").write_bytes(SECRET * 8)
    with h5py.File(outside / "secret.h5", "w") as f:
        f["data"] = np.frombuffer(SECRET * 8, dtype=np.int8)
        f["text"] = SECRET.decode()
    g = zarr.open_group(str(outside / "leak.zarr"), mode="w", zarr_format=3)
    g.create_array("data", data=np.frombuffer(SECRET * 8, dtype=np.int8), compressors=None)
    for name in ("pipe.bin", "pipe.h5"):
        os.mkfifo(outside / name)


def write_hdf5_fifo_stores(root, outside):
    """Each store names a FIFO outside the root: libhdf5 opening it hangs."""
    for name, plant in (("ext_fifo.h5ad", "ext"), ("vds_fifo.h5ad", "vds"),
                        ("elink_fifo.h5ad", "elink")):
        make_adata().write_h5ad(root / name)
        with h5py.File(root / name, "r+") as f:
            if plant == "ext":
                f["uns"].create_dataset("ext", shape=(256,), dtype="i1",
                                        external=[(str(outside / "pipe.bin"), 0, 256)])
            elif plant == "vds":
                layout = h5py.VirtualLayout(shape=(256,), dtype="i1")
                layout[:] = h5py.VirtualSource(str(outside / "pipe.h5"), "data", shape=(256,))
                f["uns"].create_virtual_dataset("vds", layout)
                # unlimited: its extent comes from the sources
                layout = h5py.VirtualLayout(shape=(256,), maxshape=(None,), dtype="i1")
                src = h5py.VirtualSource(str(outside / "pipe.h5"), "data", shape=(256,),
                                         maxshape=(None,))
                layout[0:h5py.h5s.UNLIMITED] = src[0:h5py.h5s.UNLIMITED]
                f["uns"].create_virtual_dataset("vds_unlimited", layout)
            else:
                f["uns/linked"] = h5py.ExternalLink(str(outside / "pipe.h5"), "/data")
    # Soft links whose path runs through an external link ("/uns/door/x"):
    # libhdf5 would open the door's file while resolving them.
    for name, target in (("soft_fifo.h5ad", "pipe.h5"), ("soft_secret.h5ad", "secret.h5")):
        make_adata().write_h5ad(root / name)
        with h5py.File(root / name, "r+") as f:
            f["uns/door"] = h5py.ExternalLink(str(outside / target), "/")
            f["uns/linked"] = h5py.SoftLink("/uns/door/data")
            f["uns/text"] = h5py.SoftLink("/uns/door/text")
            f["var"].attrs["_index"] = "door/text"  # a name that is a path
    # An external link to another file of the same folder: followed (issue
    # 19, point 5; README "Bad files"), its file probed first.
    with h5py.File(root / "sibling.h5", "w") as f:
        f["data"] = np.arange(4, dtype=np.int8)
    make_adata().write_h5ad(root / "elink_sibling.h5ad")
    with h5py.File(root / "elink_sibling.h5ad", "r+") as f:
        f["uns/linked"] = h5py.ExternalLink("sibling.h5", "/data")


def plant_zarr_links(store, outside):
    """Chunks and a group that lead out of the store, and chunks linked
    inside it (absolute and relative), which must keep working."""
    x_chunk = first_chunk(store / "X")
    x_chunk.unlink()
    os.symlink(outside / "secret.bin", x_chunk)
    os.symlink(outside / "leak.zarr", store / "uns" / "leak", target_is_directory=True)
    counts = first_chunk(store / "layers" / "counts")
    kept = store / "layers" / "counts" / "kept_chunk"
    counts.rename(kept)
    os.symlink(kept.resolve(), counts)                     # absolute, inside
    umap = first_chunk(store / "obsm" / "X_umap")
    umap.rename(umap.with_name("kept_chunk"))
    os.symlink("kept_chunk", umap)                         # relative, inside


def write_zarr_stores(root, outside):
    for name in ("v3links.zarr", "v3plain.zarr", "v3keys.zarr", "v2keys.zarr"):
        with zarr_settings(2 if name.startswith("v2") else 3, False):
            make_adata().write_zarr(root / name)
    # consolidated again after the plants: the store declares uns/leak
    plant_zarr_links(root / "v3links.zarr", outside)
    zarr.consolidate_metadata(str(root / "v3links.zarr"))
    # no consolidated metadata: every node is looked up through the links
    plain = root / "v3plain.zarr"
    doc = json.loads((plain / "zarr.json").read_text())
    doc.pop("consolidated_metadata", None)
    (plain / "zarr.json").write_text(json.dumps(doc))
    plant_zarr_links(plain, outside)
    # regular files inside the stores that are no zarr keys
    keys = root / "v3keys.zarr"
    for rel in ("notes.txt", "X/c/0/0~", "X/c/0/.0.swp", "X/c/9/9", "X/c/0/0.orig",
                "X/zarr.json.bak", "X/c/00/0", "obs/.DS_Store", ".zattrs", "X/.zarray"):
        (keys / rel).parent.mkdir(parents=True, exist_ok=True)
        (keys / rel).write_bytes(SECRET)
    keys2 = root / "v2keys.zarr"
    for rel in ("X/0.0~", "X/0.0.swp", "X/9.9", "X/0.0.0", "X/00.0", "X/c/0/0", "X/zarr.json",
                "obs/.zmetadata", "README"):
        (keys2 / rel).parent.mkdir(parents=True, exist_ok=True)
        (keys2 / rel).write_bytes(SECRET)


def write_odd_stores(root):
    os.mkfifo(root / "pipe.h5ad")
    os.symlink("loop.h5ad", root / "loop.h5ad")
    shutil.copytree(root / "v3keys.zarr", root / "fifometa.zarr")
    (root / "fifometa.zarr" / "zarr.json").unlink()
    os.mkfifo(root / "fifometa.zarr" / "zarr.json")


@pytest.fixture(scope="module")
def escape_dirs(tmp_path_factory):
    base = tmp_path_factory.mktemp("escapes")
    root, outside = base / "root", base / "outside"
    root.mkdir()
    outside.mkdir()
    write_outside(outside)
    write_hdf5_fifo_stores(root, outside)
    write_zarr_stores(root, outside)
    write_odd_stores(root)
    return root, outside


@pytest.fixture(scope="module")
def esrv(escape_dirs, server_factory):
    return server_factory(escape_dirs[0])


def timed_get(s, path, headers=None):
    t0 = time.monotonic()
    r = s.get(path, _headers=headers)
    took = time.monotonic() - t0
    assert took < QUICK, (path, took)
    return r


def assert_clean(r, what):
    assert r.status_code < 500, (what, r.status_code, r.text[:300])
    for needle in NEEDLES:
        assert needle not in r.content, what
    assert SECRET_INTS not in r.content.replace(b",", b", "), what
    if r.status_code >= 400:
        assert r.headers["Content-Type"].startswith("application/problem+json"), what


def store_files(store_dir):
    return sorted(p.relative_to(store_dir).as_posix() for p in store_dir.rglob("*")
                  if not p.is_dir() or p.is_symlink())


def sweep(s, root, store):
    """Every route and every file of the store as a raw key."""
    statuses = {}
    paths = [f"/v1/stores/{store}{route}" for route in ROUTES]
    if store.endswith(".zarr") and (root / store).is_dir():
        paths += [f"/v1/stores/{store}/zarr/{key}" for key in store_files(root / store)]
    for path in paths:
        r = timed_get(s, path)
        assert_clean(r, path)
        statuses[path] = r.status_code
    assert s.alive()
    return statuses


@pytest.mark.parametrize("store", ["ext_fifo.h5ad", "vds_fifo.h5ad", "elink_fifo.h5ad"])
def test_hdf5_opens_nothing_an_element_names(escape_dirs, esrv, store):
    root, _ = escape_dirs
    statuses = sweep(esrv, root, store)
    base = f"/v1/stores/{store}"
    assert statuses[base] == 200 and statuses[base + "/obs"] == 200
    assert statuses[base + "/X"] == 200
    element = {"ext": "/uns/ext", "vds": "/uns/vds", "elink": "/uns/linked"}[store.split("_")[0]]
    r = timed_get(esrv, base + element)
    assert r.status_code == 422, r.text
    word = {"/uns/ext": "external storage", "/uns/vds": "virtual dataset",
            "/uns/linked": "external link"}[element]
    assert word in r.json()["detail"], r.json()
    if element == "/uns/vds":
        assert statuses[base + "/uns/vds_unlimited"] == 422


def test_hdf5_follows_an_external_link_beside_the_store(escape_dirs, esrv):
    """A sibling file in the store's folder is inside the root: the link is
    followed (its file probed first), with h5py's values."""
    root, _ = escape_dirs
    statuses = sweep(esrv, root, "elink_sibling.h5ad")
    base = "/v1/stores/elink_sibling.h5ad"
    assert statuses[base] == 200 and statuses[base + "/obs"] == 200
    r = timed_get(esrv, base + "/uns/linked?format=json")
    assert r.status_code == 200, r.text
    with h5py.File(root / "elink_sibling.h5ad", "r") as f:
        assert r.json() == f["uns/linked"][()].tolist()


VIEWER_ELEMENTS = ["/uns", "/uns/ext", "/uns/vds", "/uns/vds_unlimited", "/uns/linked",
                   "/uns/door", "/uns/text"]


@pytest.fixture(scope="module")
def esrv_unprobed(escape_dirs, server_factory):
    """The same root with the probe off: the serving process's own reads
    must open nothing either (not only the probe's walk)."""
    return server_factory(escape_dirs[0], "--probe", "0")


@pytest.mark.parametrize("probe", ["on", "off"])
@pytest.mark.parametrize("store", ["ext_fifo.h5ad", "vds_fifo.h5ad", "elink_fifo.h5ad",
                                   "soft_fifo.h5ad"])
def test_hdf5_viewer_routes_open_nothing(escape_dirs, esrv, esrv_unprobed, store, probe):
    """h5grove's routes (h5web) and the zarr view name the elements whose
    values live elsewhere: their metadata is answered from this file (an
    unlimited virtual dataset's extent would make libhdf5 open every source,
    here a FIFO), their values refused."""
    s = esrv if probe == "on" else esrv_unprobed
    statuses = {}
    for element in VIEWER_ELEMENTS:
        q = f"file={store}&path={element}"
        for route in ("meta", "attr", "data", "stats", "paths"):
            path = f"/h5grove/{route}/?{q}"
            r = timed_get(s, path)
            assert_clean(r, path)
            statuses[(route, element)] = r.status_code
        for key in (".zattrs", ".zarray", ".zgroup", "0"):
            path = f"/v1/stores/{store}/zarr{element}/{key}"
            assert_clean(timed_get(s, path), path)
    assert_clean(timed_get(s, f"/v1/stores/{store}/zarr/.zmetadata"), ".zmetadata")
    assert statuses[("meta", "/uns")] == 200
    values_elsewhere = {"ext_fifo.h5ad": "/uns/ext", "vds_fifo.h5ad": "/uns/vds_unlimited"}
    if store in values_elsewhere:
        element = values_elsewhere[store]
        assert statuses[("meta", element)] == 200
        r = timed_get(s, f"/h5grove/data/?file={store}&path={element}")
        assert r.status_code == 422 and "other files" in r.json()["detail"], r.text
    assert s.alive()


@pytest.mark.parametrize("store", ["soft_fifo.h5ad", "soft_secret.h5ad"])
def test_hdf5_soft_links_through_external_links(escape_dirs, esrv, store):
    root, _ = escape_dirs
    statuses = sweep(esrv, root, store)
    base = f"/v1/stores/{store}"
    assert statuses[base + "/obs"] == 200 and statuses[base + "/X"] == 200
    for element in ("/uns/linked", "/uns/text", "/uns/door"):
        r = timed_get(esrv, base + element)
        assert r.status_code == 422 and "external link" in r.json()["detail"], r.text
    assert_clean(timed_get(esrv, base + "/uns/text?format=json"), "text")


@pytest.mark.parametrize("store", ["v3links.zarr", "v3plain.zarr"])
def test_zarr_v3_links(escape_dirs, esrv, store):
    root, _ = escape_dirs
    sweep(esrv, root, store)
    base = f"/v1/stores/{store}"
    r = timed_get(esrv, base + "/X")
    assert r.status_code == 422 and "outside the store" in r.json()["detail"], r.text
    r = timed_get(esrv, base + "/uns/leak/data")
    assert r.status_code in (404, 422), r.text
    x_key = first_chunk(root / store / "X").relative_to(root / store).as_posix()
    assert timed_get(esrv, f"{base}/zarr/{x_key}").status_code == 404
    assert timed_get(esrv, f"{base}/zarr/uns/leak/data/c/0").status_code == 404
    assert timed_get(esrv, base + "/obs").status_code == 200


@pytest.mark.parametrize("store", ["v3links.zarr", "v3plain.zarr"])
def test_zarr_links_inside_the_store_still_work(escape_dirs, esrv, store):
    root, _ = escape_dirs
    a = make_adata()
    base = f"/v1/stores/{store}"
    for element, want in (("/obsm/X_umap", a.obsm["X_umap"]), ("/layers/counts",
                                                              a.layers["counts"])):
        r = timed_get(esrv, base + element + "?format=bin")
        assert r.status_code == 200, (element, r.text)
        got = np.frombuffer(r.content, dtype=want.dtype).reshape(want.shape)
        np.testing.assert_array_equal(got, want)
    for array in ("obsm/X_umap", "layers/counts"):
        chunk = first_chunk(root / store / array)
        key = chunk.relative_to(root / store).as_posix()
        r = timed_get(esrv, f"{base}/zarr/{key}")
        assert r.status_code == 200 and r.content == chunk.read_bytes(), key


@pytest.mark.parametrize("store,good", [
    ("v3keys.zarr", ["zarr.json", "X/zarr.json", "X/c/0/0", "obs/zarr.json"]),
    ("v2keys.zarr", [".zgroup", ".zattrs", ".zmetadata", "X/.zarray", "X/0.0", "obs/.zattrs"]),
])
def test_raw_keys_are_only_zarr_keys(escape_dirs, esrv, store, good):
    root, _ = escape_dirs
    statuses = sweep(esrv, root, store)
    for key in good:
        assert statuses[f"/v1/stores/{store}/zarr/{key}"] == 200, key
    planted = [k for k in store_files(root / store) if (root / store / k).read_bytes() == SECRET]
    assert len(planted) >= 8
    for key in planted:
        assert statuses[f"/v1/stores/{store}/zarr/{key}"] == 404, key


@pytest.mark.parametrize("store", ["pipe.h5ad", "loop.h5ad", "fifometa.zarr"])
def test_odd_store_files_answer_at_once(escape_dirs, esrv, store):
    root, _ = escape_dirs
    for route in ("", "/obs", "/X", "/zarr/zarr.json"):
        r = timed_get(esrv, f"/v1/stores/{store}{route}")
        assert_clean(r, route)
        assert r.status_code in (404, 422), (route, r.status_code)
    assert timed_get(esrv, "/v1/stores/v3keys.zarr/X").status_code == 200


HUGE = "184467440737095516160000"  # past 2^64


@pytest.mark.parametrize("header,status,span", [
    (f"bytes=0-{HUGE}", 206, "all"),
    (f"bytes=1-{HUGE}", 206, "from1"),
    (f"bytes={HUGE}-", 416, None),
    (f"bytes={HUGE}-{HUGE}0", 416, None),
    (f"bytes=-{HUGE}", 206, "all"),
    (f"bytes={HUGE}", 200, "all"),         # malformed: ignored
    (f"bytes=0-{HUGE}x", 200, "all"),
    ("bytes=-0", 416, None),
])
def test_range_numbers_past_2_64(escape_dirs, esrv, header, status, span):
    root, _ = escape_dirs
    body = (root / "v3keys.zarr" / "X" / "c" / "0" / "0").read_bytes()
    r = esrv.raw("/v1/stores/v3keys.zarr/zarr/X/c/0/0", headers={"Range": header})
    assert r.status_code == status, (header, r.status_code, r.content[:200])
    if span == "all":
        assert r.content == body
    elif span == "from1":
        assert r.content == body[1:]
        assert r.headers["Content-Range"] == f"bytes 1-{len(body) - 1}/{len(body)}"
    else:
        assert r.headers["Content-Range"] == f"bytes */{len(body)}"
    assert esrv.alive()
