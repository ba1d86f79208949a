"""Other files an HDF5 store names, inside the root (issue 19, point 5).

External raw storage (H5Pset_external), virtual datasets and external
links are followed when the file they name resolves inside the data root
(an external link's: inside the store's own folder, unless
--external-links-in-root 1 allows the whole root); the answers equal what
h5py reads.  HDF5 files libhdf5 parses for it (link targets, virtual
sources) pass the probe first: a damaged one is 422 for its element and
the server goes on.  A version's answers depend on its targets: a target
rewritten is a new version, with a new ETag.  Targets outside the root stay
refused (tests/http/test_hdf5_escapes.py, test_escapes.py)."""

from __future__ import annotations

import os
import time

import anndata as ad
import h5py
import numpy as np
import pytest

from test_probe import heap_damaged


def write_store(path):
    a = ad.AnnData(X=np.ones((4, 3), dtype=np.float32))
    a.obs_names = [f"c{i}" for i in range(4)]
    a.var_names = ["g0", "g1", "g2"]
    a.write_h5ad(path)


@pytest.fixture(scope="module")
def ext_root(tmp_path_factory):
    base = tmp_path_factory.mktemp("external")
    root, outside = base / "root", base / "outside"
    study, shared, damaged, rw = root / "study", root / "shared", root / "damaged", root / "rw"
    for d in (study, shared, damaged, rw, outside):
        d.mkdir(parents=True)
    (study / "x.bin").write_bytes(np.arange(12, dtype="<f8").tobytes())
    (study / "raw.bin").write_bytes(np.arange(16, dtype="i1").tobytes())
    (study / "short.bin").write_bytes(np.arange(5, dtype="<f8").tobytes())  # 40 of 128 bytes
    with h5py.File(study / "src.h5", "w") as f:
        f["data"] = np.arange(100, 108, dtype="<f8")
    with h5py.File(study / "other.h5", "w") as f:
        f["values"] = np.array([1.5, 2.5, 3.5])
        g = f.create_group("group")
        g["inner"] = np.array([7, 8, 9], dtype="<i4")
        g["names"] = np.array(["a", "bb", "ccc"], dtype=object)
    with h5py.File(shared / "far.h5", "w") as f:
        f["values"] = np.array([4.0, 5.0])
    with h5py.File(outside / "secret.h5", "w") as f:
        f["values"] = np.array([6.0, 6.0])
    write_store(study / "store.h5ad")
    with h5py.File(study / "store.h5ad", "r+") as f:
        del f["X"]
        f.create_dataset("X", shape=(4, 3), dtype="<f8", external=[("x.bin", 0, 96)])
        f["uns"].create_dataset("raw_ext", shape=(16,), dtype="i1",
                                external=[(str(study / "raw.bin"), 0, 16)])
        f["uns"].create_dataset("short", shape=(16,), dtype="<f8", external=[("short.bin", 0, 128)])
        for name, src in (("vds", "src.h5"), ("vds_abs", str(study / "src.h5"))):
            layout = h5py.VirtualLayout(shape=(8,), dtype="<f8")
            layout[:] = h5py.VirtualSource(src, "data", shape=(8,))
            f["uns"].create_virtual_dataset(name, layout, fillvalue=-1)
        f["uns/linked"] = h5py.ExternalLink("other.h5", "/values")
        f["uns/linked_abs"] = h5py.ExternalLink(str(study / "other.h5"), "/values")
        f["uns/linked_group"] = h5py.ExternalLink("other.h5", "/group")
        f["uns/far"] = h5py.ExternalLink("../shared/far.h5", "/values")
        f["uns/outside"] = h5py.ExternalLink(str(outside / "secret.h5"), "/values")
    # a damaged link target beside a good one
    (damaged / "crash.h5").write_bytes(heap_damaged("crash"))
    with h5py.File(damaged / "good.h5", "w") as f:
        f["values"] = np.array([9.0, 8.0])
    write_store(damaged / "dmg.h5ad")
    with h5py.File(damaged / "dmg.h5ad", "r+") as f:
        f["uns/bad"] = h5py.ExternalLink("crash.h5", "/obs")
        f["uns/good"] = h5py.ExternalLink("good.h5", "/values")
    write_store(root / "plain.h5ad")
    # a link target that a test rewrites
    with h5py.File(rw / "t.h5", "w") as f:
        f["values"] = np.array([1.0, 2.0, 3.0])
    write_store(rw / "rw.h5ad")
    with h5py.File(rw / "rw.h5ad", "r+") as f:
        f["uns/linked"] = h5py.ExternalLink("t.h5", "/values")
    return root


def h5py_read(root, store, element):
    """What h5py reads, external raw storage found beside the store."""
    path = root / store
    cwd = os.getcwd()
    os.chdir(path.parent)  # libhdf5's default for relative raw storage names
    try:
        with h5py.File(path, "r") as f:
            return f[element][()]
    finally:
        os.chdir(cwd)


def get_json(s, store, element):
    r = s.get(f"/v1/stores/{store}{element}", format="json")
    assert r.status_code == 200, (element, r.status_code, r.text[:300])
    return r.json()


def test_external_raw_storage_in_the_store_folder(ext_root, server_factory):
    s = server_factory(ext_root)
    store = "study/store.h5ad"
    assert get_json(s, store, "/uns/raw_ext") == h5py_read(ext_root, store, "uns/raw_ext").tolist()
    x = h5py_read(ext_root, store, "X")
    assert get_json(s, store, "/X")["data"] == x.tolist()
    r = s.get(f"/v1/stores/{store}/X", format="npy")
    assert r.status_code == 200 and r.content.endswith(x.astype("<f8").tobytes())


def test_external_raw_storage_shorter_than_declared(ext_root, server_factory):
    """The segment declares 128 bytes, its file holds 40: libhdf5 reads the
    rest as zeros, as h5py does; the server answers and stays up."""
    s = server_factory(ext_root)
    want = h5py_read(ext_root, "study/store.h5ad", "uns/short")
    assert want[:5].tolist() == [0.0, 1.0, 2.0, 3.0, 4.0] and not want[5:].any()
    assert get_json(s, "study/store.h5ad", "/uns/short") == want.tolist()
    assert s.alive()


@pytest.mark.parametrize("element", ["/uns/vds", "/uns/vds_abs"])
def test_virtual_dataset_over_an_in_root_source(ext_root, server_factory, element):
    s = server_factory(ext_root)
    want = h5py_read(ext_root, "study/store.h5ad", element.lstrip("/"))
    assert want.tolist() == list(np.arange(100, 108, dtype="f8"))
    assert get_json(s, "study/store.h5ad", element) == want.tolist()


@pytest.mark.parametrize("element", ["/uns/linked", "/uns/linked_abs", "/uns/linked_group/inner",
                                     "/uns/linked_group/names"])
def test_external_link_in_the_store_folder(ext_root, server_factory, element):
    s = server_factory(ext_root)
    want = h5py_read(ext_root, "study/store.h5ad", element.lstrip("/"))
    got = get_json(s, "study/store.h5ad", element)
    if want.dtype == object:
        want = np.array([v.decode() for v in want], dtype=object)
    assert got == want.tolist()


def test_external_link_to_a_group_reads_as_uns(ext_root, server_factory):
    s = server_factory(ext_root)
    uns = get_json(s, "study/store.h5ad", "/uns")
    assert uns["linked_group"] == {"inner": [7, 8, 9], "names": ["a", "bb", "ccc"]}
    assert uns["linked"] == [1.5, 2.5, 3.5] and uns["vds"][0] == 100.0
    r = s.get("/v1/stores/study/store.h5ad/uns/outside")
    assert r.status_code == 422 and "outside the data root" in r.json()["detail"], r.text


def test_external_link_to_another_folder_needs_the_flag(ext_root, server_factory):
    s = server_factory(ext_root)
    r = s.get("/v1/stores/study/store.h5ad/uns/far")
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert "/uns/far" in detail and "external link" in detail and "store's folder" in detail
    wide = server_factory(ext_root, "--external-links-in-root", "1")
    assert get_json(wide, "study/store.h5ad", "/uns/far") == [4.0, 5.0]
    # the whole root, not more
    r = wide.get("/v1/stores/study/store.h5ad/uns/outside")
    assert r.status_code == 422 and b"6.0" not in r.content, r.text


def test_damaged_link_target_is_refused_and_the_server_goes_on(ext_root, server_factory):
    s = server_factory(ext_root)
    r = s.get("/v1/stores/damaged/dmg.h5ad/uns/bad")
    assert r.status_code == 422, r.text
    assert r.headers["Content-Type"].startswith("application/problem+json")
    detail = r.json()["detail"]
    assert "/uns/bad" in detail and "could not be read safely" in detail, detail
    assert s.alive()
    assert get_json(s, "damaged/dmg.h5ad", "/uns/good") == [9.0, 8.0]
    assert s.get("/v1/stores/plain.h5ad/obs").status_code == 200
    assert s.get("/v1/stores/damaged/dmg.h5ad/obs").status_code == 200
    assert s.alive()


def test_rewritten_target_makes_a_new_version(ext_root, server_factory):
    s = server_factory(ext_root)
    store, target = "rw/rw.h5ad", ext_root / "rw" / "t.h5"
    r1 = s.get(f"/v1/stores/{store}/uns/linked", format="json")
    assert r1.status_code == 200 and r1.json() == [1.0, 2.0, 3.0]
    etag1 = r1.headers["ETag"]
    time.sleep(0.05)
    tmp = target.with_suffix(".tmp")
    with h5py.File(tmp, "w") as f:
        f["values"] = np.array([4.0, 5.0, 6.0])
    os.replace(tmp, target)
    r2 = s.get(f"/v1/stores/{store}/uns/linked", format="json")
    assert r2.status_code == 200 and r2.json() == [4.0, 5.0, 6.0], r2.text
    assert r2.headers["ETag"] != etag1
    # rewritten in place, its size and mtime put back: a new version still
    st = target.stat()
    with h5py.File(target, "r+") as f:
        f["values"][...] = np.array([7.0, 8.0, 9.0])
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert target.stat().st_size == st.st_size
    r3 = s.get(f"/v1/stores/{store}/uns/linked", format="json")
    assert r3.status_code == 200 and r3.json() == [7.0, 8.0, 9.0], r3.text
    assert r3.headers["ETag"] not in (etag1, r2.headers["ETag"])
