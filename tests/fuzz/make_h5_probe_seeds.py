"""Writes the seed corpus of h5_probe_fuzz: small HDF5 files as the real
writers make them (anndata .h5ad with dense, CSR and CSC matrices,
categoricals, strings, nullable columns and nested uns; mudata .h5mu;
treedata .h5td; h5py files with every layout and filter the server reads:
contiguous, compact, chunked with deflate/shuffle/fletcher32/LZF, fixed
and variable-length strings, references, enums, empty and scalar
datasets), plus a few truncated and bit-flipped copies that libhdf5
rejects cleanly.  Only inputs the probe walk survives are kept, so
`make test` can replay the corpus.

Run from the repository root with the test venv:
    .venv/bin/python tests/fuzz/make_h5_probe_seeds.py BUILD/fuzz/h5_probe_fuzz
"""

import hashlib
import random
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import anndata as ad
import h5py
import mudata as md
import networkx as nx
import numpy as np
import pandas as pd
import scipy.sparse as sp
import treedata as td

OUT = Path("tests/fuzz/corpus/h5_probe")
warnings.filterwarnings("ignore")


def tiny_adata(seed: int) -> ad.AnnData:
    rng = np.random.default_rng(seed)
    n, m = 6, 4
    obs = pd.DataFrame(
        {
            "cell_type": pd.Categorical(rng.choice(["B", "T", "NK"], n)),
            "score": rng.random(n),
            "count": rng.integers(0, 9, n),
            "flag": rng.random(n) > 0.5,
            "label": [f"c{i}" for i in range(n)],
        },
        index=[f"cell{i}" for i in range(n)],
    )
    var = pd.DataFrame({"gene_ids": [f"ENSG{i}" for i in range(m)]}, index=[f"g{i}" for i in range(m)])
    x = sp.random(n, m, density=0.5, format="csr", random_state=seed, dtype=np.float32)
    a = ad.AnnData(X=x, obs=obs, var=var)
    a.layers["dense"] = x.toarray()
    a.layers["csc"] = sp.csc_matrix(x)
    a.obsm["X_umap"] = rng.random((n, 2))
    a.obsp["conn"] = sp.random(n, n, density=0.3, format="csr", random_state=seed)
    a.uns["params"] = {"k": 3, "name": "x", "list": [1, 2, 3], "nested": {"a": 1.5}}
    return a


def tiny_tree(seed: int) -> td.TreeData:
    a = tiny_adata(seed)
    g = nx.DiGraph()
    g.add_edges_from([("root", "n1"), ("root", "n2"), ("n1", "cell0"), ("n1", "cell1"), ("n2", "cell2")])
    for u, v in g.edges:
        g.edges[u, v]["length"] = 1.0
    t = td.TreeData(X=a.X, obs=a.obs, var=a.var, obst={"tree": g})
    return t


def h5py_layouts(path: Path) -> None:
    with h5py.File(path, "w") as f:
        f.create_dataset("contiguous", data=np.arange(20, dtype=np.int32))
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_layout(h5py.h5d.COMPACT)
        space = h5py.h5s.create_simple((4,))
        h5py.h5d.create(f.id, b"compact", h5py.h5t.STD_I16LE, space, dcpl=dcpl).write(
            h5py.h5s.ALL, h5py.h5s.ALL, np.arange(4, dtype=np.int16)
        )
        f.create_dataset("deflate", data=np.arange(64, dtype=np.float64).reshape(8, 8), chunks=(4, 4),
                         compression="gzip", shuffle=True, fletcher32=True)
        f.create_dataset("lzf", data=np.arange(32, dtype=np.int64), chunks=(8,), compression="lzf")
        f.create_dataset("vlen", data=np.array(["a", "bb", "ccc"], dtype=object),
                         dtype=h5py.string_dtype())
        f.create_dataset("fixed", data=np.array([b"ab", b"cd"], dtype="S2"))
        f.create_dataset("scalar", data=3.5)
        f.create_dataset("empty", shape=(0,), dtype=np.float32)
        e = h5py.enum_dtype({"FALSE": 0, "TRUE": 1}, basetype="i1")
        f.create_dataset("bool_enum", data=np.array([0, 1, 1], dtype=np.int8), dtype=e)
        g = f.create_group("grp")
        g.attrs["encoding-type"] = "dict"
        g.attrs["vals"] = np.arange(3)
        g.attrs["ref"] = f["contiguous"].ref
        f["soft"] = h5py.SoftLink("/contiguous")


def walk_survives(binary: str, path: Path) -> bool:
    r = subprocess.run([binary, str(path)], capture_output=True, timeout=60)
    return r.returncode == 0


def main() -> None:
    binary = sys.argv[1]
    OUT.mkdir(parents=True, exist_ok=True)
    seeds: list[bytes] = []
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        tiny_adata(1).write_h5ad(t / "a.h5ad")
        tiny_adata(2).write_h5ad(t / "z.h5ad", compression="gzip")
        md.MuData({"rna": tiny_adata(3), "prot": tiny_adata(4)}).write_h5mu(t / "m.h5mu")
        tiny_tree(5).write_h5td(t / "t.h5td")
        h5py_layouts(t / "l.h5")
        for p in sorted(t.iterdir()):
            seeds.append(p.read_bytes())
        rng = random.Random(20261203)
        mutants = []
        for base in list(seeds):
            for cut in (len(base) // 2, len(base) - 100, 96):
                mutants.append(base[:cut])
            flipped = bytearray(base)
            for _ in range(8):
                i = rng.randrange(len(flipped))
                flipped[i] ^= 1 << rng.randrange(8)
            mutants.append(bytes(flipped))
        kept = 0
        for data in seeds + mutants:
            probe = t / "probe.h5"
            probe.write_bytes(data)
            if not walk_survives(binary, probe):
                continue
            name = hashlib.sha1(data).hexdigest()
            (OUT / name).write_bytes(data)
            kept += 1
    print(f"{kept} seeds in {OUT}")


if __name__ == "__main__":
    main()
