"""Fixture writers: every store the HTTP suite serves, written with the real
libraries (anndata.write_h5ad, mudata.write_h5mu, treedata.write_h5td).

Only the deliberately odd files are edited afterwards with h5py or plain file
operations (no `mod-order`, truncated, not HDF5).  Everything is seeded, so
two runs write the same data.
"""

from __future__ import annotations

import os
import shutil
import warnings
from pathlib import Path

import anndata as ad
import h5py
import mudata as md
import networkx as nx
import numpy as np
import pandas as pd
import treedata as td

SEED = 20261202

# Names of the stores written under the data root, relative to it.
FRAME = "frame.h5ad"
EMPTY_ROWS = "empty_rows.h5ad"
NO_COLUMNS = "no_columns.h5ad"
UNICODE = "dir with space/naïve é data.h5ad"
MULTI = "multi.h5mu"
AXIS1 = "axis1.h5mu"
NO_MOD_ORDER = "no_mod_order.h5mu"
LINEAGE = "lineage.h5td"
SUBSET = "subset.h5td"
TRUNCATED = "bad/truncated.h5ad"
NOT_HDF5 = "bad/not_hdf5.h5ad"
LINK_FILE = "link.h5ad"          # symlink -> a file outside the root
LINK_DIR = "linkdir"             # symlink -> a directory outside the root
SECRET = "secret.h5ad"           # lives OUTSIDE the root
SECRET_MARK = "TOPSECRETVALUE"   # a value only the secret file holds

# kind of every readable store (what /v1/stores must say)
GOOD_STORES = {
    FRAME: "anndata",
    EMPTY_ROWS: "anndata",
    NO_COLUMNS: "anndata",
    UNICODE: "anndata",
    MULTI: "mudata",
    AXIS1: "mudata",
    NO_MOD_ORDER: "mudata",
    LINEAGE: "treedata",
    SUBSET: "treedata",
}


def _quiet():
    warnings.filterwarnings("ignore")


def frame_obs_names(n: int) -> list[str]:
    names = [f"AAAC-{i:02d}" for i in range(n)]
    names[3] = "cell 03 é"        # space and non-ASCII
    names[7] = "cell,07"          # a comma: only selectable through a POST body
    names[11] = "细胞-11"          # CJK
    names[12] = "12"              # digits only: must stay a string
    return names


def make_frame_adata(n_obs: int = 50, n_vars: int = 7, seed: int = SEED) -> ad.AnnData:
    """An AnnData whose obs holds one column of every kind."""
    rng = np.random.default_rng(seed)
    n = n_obs

    def with_missing(values, every):
        values = list(values)
        for i in range(0, n, every):
            values[i] = None
        return values

    cat = pd.Categorical(with_missing(rng.choice(["T cell", "B cell", "NK"], n), 5),
                         categories=["NK", "T cell", "B cell"])
    ocat = pd.Categorical(with_missing(rng.choice(["low", "mid", "high"], n), 7),
                          categories=["low", "mid", "high"], ordered=True)
    numcat = pd.Categorical(rng.choice([10, 20, 40], n), categories=[10, 20, 40])
    nint = pd.array(with_missing(rng.integers(-1000, 1000, n).tolist(), 4), dtype="Int32")
    nuint = pd.array(with_missing(rng.integers(0, 255, n).tolist(), 6), dtype="UInt8")
    nbool = pd.array(with_missing(rng.random(n) < 0.5, 3), dtype="boolean")
    nstr_vals = with_missing([f"n{i}" for i in range(n)], 8)
    nstr_vals[1] = ""
    nstr_vals[2] = "ünï"
    nstr = pd.array(nstr_vals, dtype="string")  # pd.NA semantics
    s = np.array([f"s-{i}" for i in range(n)], dtype=object)
    s[0] = ""
    s[1] = "α β γ"
    s[2] = "with,comma"
    s[3] = 'quote " inside'
    s[4] = "line\nbreak"
    s[5] = "😀 emoji"
    s_na = [f"v{i % 9}" for i in range(n)]
    s_na[2] = None
    s_na[9] = ""
    f32 = rng.standard_normal(n).astype(np.float32)
    f32[[1, 9]] = np.nan
    f32[2] = np.inf
    f32[3] = -np.inf
    f32[4] = np.float32(1e-30)
    f32[5] = -0.0
    f64 = rng.standard_normal(n)
    f64[[0, 13]] = np.nan
    f64[6] = 1.0 / 3.0
    f64[8] = 1e300
    obs = pd.DataFrame(
        {
            "cat": cat,
            "ocat": ocat,
            "numcat": numcat,
            "nint": nint,
            "nuint": nuint,
            "nbool": nbool,
            "nstr": nstr,
            "b": rng.random(n) < 0.3,
            "i8": rng.integers(-128, 128, n, dtype=np.int8),
            "i16": rng.integers(-32768, 32767, n, dtype=np.int16),
            "i32": rng.integers(-2**31, 2**31 - 1, n, dtype=np.int32),
            "i64": np.array([-2**63, 2**63 - 1] + rng.integers(-2**40, 2**40, n - 2).tolist(), dtype=np.int64),
            "u8": rng.integers(0, 256, n, dtype=np.uint8),
            "u16": rng.integers(0, 65536, n, dtype=np.uint16),
            "u32": rng.integers(0, 2**32, n, dtype=np.uint32),
            "u64": np.array([0, 2**64 - 1] + rng.integers(0, 2**63, n - 2).tolist(), dtype=np.uint64),
            "f32": f32,
            "f64": f64,
            "s": s,
            "s_na": pd.array(s_na, dtype=pd.StringDtype(na_value=np.nan)),
            "name with space é": rng.random(n),
            "a,b": np.arange(n, dtype=np.int16),
        },
        index=frame_obs_names(n),
    )
    var = pd.DataFrame(
        {
            "highly_variable": rng.random(n_vars) < 0.5,
            "means": rng.random(n_vars),
            "feature_types": pd.Categorical(["Gene Expression"] * (n_vars - 2) + ["Antibody", "Antibody"]),
            "n_cells": rng.integers(0, 100, n_vars),
            "symbol": [f"SYM{i}" for i in range(n_vars)],
        },
        index=pd.Index([f"ENSG{i:05d}" for i in range(n_vars)], name="gene_id"),
    )
    X = rng.random((n, n_vars)).astype(np.float32)
    return ad.AnnData(X=X, obs=obs, var=var)


def write_frame(path: Path) -> None:
    a = make_frame_adata()
    # keep the string columns strings (with their masks) instead of letting
    # the writer turn repetitive ones into categoricals
    a.write_h5ad(path, convert_strings_to_categoricals=False)


def write_empty_rows(path: Path) -> None:
    obs = pd.DataFrame(
        {
            "f64": np.array([], dtype=np.float64),
            "cat": pd.Categorical([], categories=["a", "b"]),
            "s": np.array([], dtype=object),
            "nint": pd.array([], dtype="Int64"),
            "u16": np.array([], dtype=np.uint16),
        },
        index=pd.Index([], dtype=object),
    )
    var = pd.DataFrame({"w": np.arange(4, dtype=np.float32)}, index=[f"g{i}" for i in range(4)])
    a = ad.AnnData(X=np.zeros((0, 4), dtype=np.float32), obs=obs, var=var)
    a.write_h5ad(path, convert_strings_to_categoricals=False)


def write_no_columns(path: Path) -> None:
    obs = pd.DataFrame(index=[f"r{i}" for i in range(8)])
    var = pd.DataFrame(index=pd.Index([], dtype=object))
    a = ad.AnnData(X=np.zeros((8, 0), dtype=np.float32), obs=obs, var=var)
    a.write_h5ad(path)


def write_unicode(path: Path) -> None:
    rng = np.random.default_rng(SEED + 1)
    obs = pd.DataFrame(
        {"é col": rng.random(5), "Größe": pd.Categorical(["klein", "groß", "klein", "groß", None])},
        index=["zelle ä", "zelle ö", "zelle ü", "zelle ß", "zelle €"],
    )
    var = pd.DataFrame(index=["gen α", "gen β"])
    a = ad.AnnData(X=rng.random((5, 2)).astype(np.float32), obs=obs, var=var)
    a.write_h5ad(path)


def make_multi_mdata(seed: int = SEED) -> md.MuData:
    """axis 0: `rna` holds cells 0..39, `prot` cells 25..59 (partial overlap);
    mod-order is deliberately not alphabetical."""
    rng = np.random.default_rng(seed)
    cells = [f"cell{i:03d}" for i in range(60)]
    cells[30] = "cell 030 ü"
    cells[31] = "cell,031"
    rna = ad.AnnData(
        X=rng.random((40, 6)).astype(np.float32),
        obs=pd.DataFrame(
            {
                "n_genes": rng.integers(0, 5000, 40),
                "celltype": pd.Categorical(rng.choice(["T", "B", "Mono"], 40)),
                "pct_mt": rng.random(40).astype(np.float32),
            },
            index=cells[:40],
        ),
        var=pd.DataFrame(
            {"highly_variable": rng.random(6) < 0.5, "gene_symbol": [f"GENE{i}" for i in range(6)]},
            index=[f"ENSG{i:03d}" for i in range(6)],
        ),
    )
    prot = ad.AnnData(
        X=rng.random((35, 3)),
        obs=pd.DataFrame(
            {
                "isotype_ctrl": rng.random(35),
                "batch": pd.Categorical(rng.choice(["b1", "b2"], 35), categories=["b2", "b1"], ordered=True),
            },
            index=cells[25:],
        ),
        var=pd.DataFrame({"antibody": ["CD3", "CD4", "CD8"]}, index=["p_CD3", "p_CD4", "p_CD8"]),
    )
    m = md.MuData({"rna": rna, "prot": prot})
    m.pull_obs()  # brings rna:n_genes ... with missing values for cells absent there
    m.obs["sample"] = pd.Categorical(rng.choice(["s1", "s2", "s3"], m.n_obs))
    m.obs["qc_pass"] = rng.random(m.n_obs) < 0.8
    m.var["global_note"] = [f"v{i}" for i in range(m.n_vars)]
    return m


def write_multi(path: Path) -> None:
    make_multi_mdata().write_h5mu(path)


def write_axis1(path: Path) -> None:
    rng = np.random.default_rng(SEED + 2)
    genes = ["CD3E", "MS4A1", "LYZ", "NKG7", "GNLY"]
    a = ad.AnnData(
        X=rng.random((4, 4)).astype(np.float32),
        obs=pd.DataFrame({"donor": pd.Categorical(["d1", "d1", "d2", "d2"])}, index=[f"a{i}" for i in range(4)]),
        var=pd.DataFrame({"dispersion": rng.random(4)}, index=genes[:4]),
    )
    b = ad.AnnData(
        X=rng.random((3, 3)).astype(np.float32),
        obs=pd.DataFrame({"donor": pd.Categorical(["d3", "d3", "d4"])}, index=[f"b{i}" for i in range(3)]),
        var=pd.DataFrame({"dispersion": rng.random(3)}, index=[genes[1], genes[4], genes[2]]),
    )
    m = md.MuData({"smartseq": a, "tenx": b}, axis=1)
    m.write_h5mu(path)


def write_no_mod_order(src: Path, path: Path) -> None:
    shutil.copyfile(src, path)
    with h5py.File(path, "r+") as f:
        del f["mod"].attrs["mod-order"]


def _tree(prefix: str, leaves: list[str], seed: int) -> nx.DiGraph:
    """A binary tree over `leaves` with a `length` on every edge and a
    `depth` attribute on every node."""
    rng = np.random.default_rng(seed)
    g = nx.DiGraph()
    level = list(leaves)
    k = 0
    while len(level) > 1:
        nxt = []
        for i in range(0, len(level), 2):
            pair = level[i:i + 2]
            if len(pair) == 1:
                nxt.append(pair[0])
                continue
            parent = f"{prefix}{k}"
            k += 1
            for child in pair:
                g.add_edge(parent, child, length=float(np.round(rng.random(), 3)))
            nxt.append(parent)
        level = nxt
    for node in g.nodes:
        g.nodes[node]["depth"] = nx.shortest_path_length(g, level[0], node)
    return g


def write_lineage(path: Path) -> None:
    rng = np.random.default_rng(SEED + 3)
    cells = [f"c{i}" for i in range(12)]
    obs = pd.DataFrame({"clone": pd.Categorical(rng.choice(["A", "B"], 12)), "time": rng.random(12)}, index=cells)
    t = td.TreeData(
        X=rng.random((12, 3)).astype(np.float32),
        obs=obs,
        obst={"tree1": _tree("n", cells, SEED)},
        label="lineage",
        alignment="leaves",
        allow_overlap=False,
    )
    t.write_h5td(path)


def write_subset(path: Path) -> None:
    rng = np.random.default_rng(SEED + 4)
    cells = [f"x{i}" for i in range(8)]
    t = td.TreeData(
        X=rng.random((8, 2)).astype(np.float32),
        obs=pd.DataFrame({"score": rng.random(8)}, index=cells),
        obst={"left": _tree("l", cells[:5], 1), "right": _tree("r", cells[3:], 2)},
        label=None,
        alignment="subset",
        allow_overlap=True,
    )
    t.write_h5td(path)


def write_secret(path: Path) -> None:
    obs = pd.DataFrame({"secret_column": [SECRET_MARK] * 3}, index=["s0", "s1", "s2"])
    ad.AnnData(X=np.zeros((3, 1), dtype=np.float32), obs=obs).write_h5ad(
        path, convert_strings_to_categoricals=False)


def write_all(root: Path, outside: Path) -> None:
    """Writes every store under `root`, and the secret file under `outside`
    (a directory that is not inside root)."""
    _quiet()
    root.mkdir(parents=True, exist_ok=True)
    outside.mkdir(parents=True, exist_ok=True)
    (root / "dir with space").mkdir(exist_ok=True)
    (root / "bad").mkdir(exist_ok=True)
    write_frame(root / FRAME)
    write_empty_rows(root / EMPTY_ROWS)
    write_no_columns(root / NO_COLUMNS)
    write_unicode(root / UNICODE)
    write_multi(root / MULTI)
    write_axis1(root / AXIS1)
    write_no_mod_order(root / MULTI, root / NO_MOD_ORDER)
    write_lineage(root / LINEAGE)
    write_subset(root / SUBSET)
    # odd files
    write_secret(outside / SECRET)
    data = (root / FRAME).read_bytes()
    (root / TRUNCATED).write_bytes(data[: len(data) // 2])
    (root / NOT_HDF5).write_bytes(b"this is not an HDF5 file, only text named .h5ad\n" * 20)
    os.symlink(outside / SECRET, root / LINK_FILE)
    os.symlink(outside, root / LINK_DIR, target_is_directory=True)


def read_store(path: Path):
    """The object the reference library returns for `path`."""
    _quiet()
    suffix = path.suffix
    if suffix == ".h5mu":
        return md.read_h5mu(path)
    if suffix == ".h5td":
        return td.read_h5td(path)
    return ad.read_h5ad(path)
