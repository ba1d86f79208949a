"""Nothing outside the root: HDF5 external storage, virtual datasets and
external links that point at a file outside the data root never hand out
its bytes.  Each store is a valid AnnData written by anndata, with one
element added by h5py that reaches out of the root (absolute and relative
paths); the secret file's unique bytes must appear in no answer."""

from __future__ import annotations

import os

import anndata as ad
import h5py
import numpy as np
import pytest

SECRET = b"S3CR3T-BYTES-0123456789abcdef!!"  # 32 bytes, 4 float64s, 32 int8s


@pytest.fixture(scope="module")
def escape_root(tmp_path_factory):
    base = tmp_path_factory.mktemp("escape")
    root, outside = base / "root", base / "outside"
    root.mkdir()
    outside.mkdir()
    raw = outside / "secret.bin"
    raw.write_bytes(SECRET * 4)
    with h5py.File(outside / "secret.h5", "w") as f:
        f["data"] = np.frombuffer(SECRET * 4, dtype=np.int8)
        f["text"] = SECRET.decode()

    def base_store(name):
        a = ad.AnnData(X=np.ones((4, 2), dtype=np.float32))
        a.obs_names = [f"c{i}" for i in range(4)]
        a.write_h5ad(root / name)
        return h5py.File(root / name, "r+")

    for name, target in (("ext_abs.h5ad", str(raw)), ("ext_rel.h5ad", os.path.relpath(raw, root))):
        with base_store(name) as f:
            f["uns"].create_dataset("ext_data", shape=(128,), dtype="i1", external=[(target, 0, 128)])
            del f["X"]
            f.create_dataset("X", shape=(4, 4), dtype="<f8", external=[(target, 0, 128)])
    for name, target in (("vds_abs.h5ad", str(outside / "secret.h5")),
                         ("vds_rel.h5ad", os.path.relpath(outside / "secret.h5", root))):
        with base_store(name) as f:
            layout = h5py.VirtualLayout(shape=(128,), dtype="i1")
            layout[:] = h5py.VirtualSource(target, "data", shape=(128,))
            f["uns"].create_virtual_dataset("vds", layout)
    for name, target in (("elink_abs.h5ad", str(outside / "secret.h5")),
                         ("elink_rel.h5ad", os.path.relpath(outside / "secret.h5", root))):
        with base_store(name) as f:
            f["uns/linked"] = h5py.ExternalLink(target, "/text")
            f["uns/linked_data"] = h5py.ExternalLink(target, "/data")
    return root


ROUTES = ["", "/obs", "/var", "/X", "/X?format=bin", "/X?format=npy", "/uns", "/uns/ext_data",
          "/uns/ext_data?format=json", "/uns/vds", "/uns/linked", "/uns/linked_data"]
STORES = ["ext_abs.h5ad", "ext_rel.h5ad", "vds_abs.h5ad", "vds_rel.h5ad", "elink_abs.h5ad",
          "elink_rel.h5ad"]


@pytest.mark.parametrize("store", STORES)
def test_secret_never_served(escape_root, server_factory, store):
    s = server_factory(escape_root)
    statuses = {}
    for route in ROUTES:
        r = s.get(f"/v1/stores/{store}{route}")
        statuses[route] = r.status_code
        assert r.status_code < 500, (route, r.status_code, r.text[:300])
        for needle in (SECRET, SECRET[:16], SECRET.hex().encode(), b"S3CR3T"):
            assert needle not in r.content, (store, route)
        # the int8 values of the secret as JSON numbers
        assert b"83, 51, 67, 82" not in r.content.replace(b",", b", ")
    assert s.alive()
    # The element that reaches out is refused by name; the store still answers.
    assert statuses[""] == 200
    assert statuses["/obs"] == 200
    refused = [r for r in ROUTES[3:] if statuses[r] == 422]
    assert refused, statuses
    kind = store.split("_")[0]
    probe = {"ext": "/X", "vds": "/uns/vds", "elink": "/uns/linked"}[kind]
    r = s.get(f"/v1/stores/{store}{probe}")
    assert r.status_code in (404, 422)
    assert r.headers["Content-Type"].startswith("application/problem+json")
    word = {"ext": "external storage", "vds": "virtual dataset", "elink": "external link"}[kind]
    assert word in r.json()["detail"], r.json()
