"""Memory bounded by the file, not by what it claims: a 259 KB MuData
whose `mod/rna/X` claims 80 x 1e9 grew the server to 16.5 GB through the
column index built for a gene request.  Written by mudata, then the shape
attribute rewritten by h5py, as a damaged or hostile writer would."""

from __future__ import annotations

import time

import anndata as ad
import h5py
import mudata as md
import numpy as np
import pytest
import scipy.sparse as sp


def vm_kb(pid: int, field: str) -> int:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(field)


@pytest.fixture(scope="module")
def lying_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("lying")
    rng = np.random.default_rng(7)
    x = sp.random(80, 50, density=0.05, format="csr", random_state=7, dtype=np.float32)
    rna = ad.AnnData(X=x)
    rna.obs_names = [f"c{i}" for i in range(80)]
    rna.var_names = [f"g{i}" for i in range(50)]
    prot = ad.AnnData(X=rng.random((80, 4)).astype(np.float32))
    prot.obs_names = rna.obs_names
    prot.var_names = [f"p{i}" for i in range(4)]
    path = root / "lying.h5mu"
    md.MuData({"rna": rna, "prot": prot}).write(path)
    with h5py.File(path, "r+") as f:
        f["mod/rna/X"].attrs["shape"] = np.array([80, 1_000_000_000], dtype=np.int64)
    return root


def test_lying_sparse_shape_stays_small(lying_root, server_factory):
    s = server_factory(lying_root)
    pid = s.proc.pid
    rss0 = vm_kb(pid, "VmRSS")
    for params in ({"var_names": "g3"}, {"cols": "0:5"}, {"cols": "999999990:999999999"},
                   {"rows": "0:2"}, {}):
        r = s.get("/v1/stores/lying.h5mu/mod/rna/X", **params)
        assert r.status_code < 500, (params, r.status_code, r.text[:300])
        if r.status_code != 200:
            assert r.headers["Content-Type"].startswith("application/problem+json")
    # Give a background column index time to be built (or refused).
    time.sleep(2)
    s.get("/v1/stores/lying.h5mu/mod/rna/X", var_names="g3")
    s.get("/v1/stores/lying.h5mu")
    assert s.alive()
    assert vm_kb(pid, "VmHWM") < 300 * 1024, (rss0, vm_kb(pid, "VmHWM"))
    t0 = time.monotonic()
    assert s.stop() == 0
    assert time.monotonic() - t0 < 5
