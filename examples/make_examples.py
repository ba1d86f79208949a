"""Writes the example stores that `make run` serves, with the real writers
(mudata.write_h5mu, anndata.write_h5ad, treedata.write_h5td).

    python examples/make_examples.py [OUTDIR]     # default: this folder

Needs anndata 0.13.4, mudata 0.4.1, treedata 0.4.0 (tests/requirements.txt).
Seeded: the same versions of the libraries write the same data.
"""

from __future__ import annotations

import shutil
import sys
import warnings
from pathlib import Path

import anndata as ad
import mudata as md
import networkx as nx
import numpy as np
import pandas as pd
import scipy.sparse as sp
import treedata as td

SEED = 0


def _counts(rng, n, m, density=0.15):
    x = sp.random(n, m, density=density, format="csr", random_state=rng, dtype=np.float32)
    x.data = np.ceil(x.data * 20).astype(np.float32)
    return x


def pbmc_small(rng) -> md.MuData:
    """rna: 80 cells x 30 genes; prot: 60 cells x 8 antibodies; they share
    cells 40..79 only (axis 0; 100 cells in all)."""
    cells = [f"AAACCTG-{i:03d}-1" for i in range(100)]
    rna_cells, prot_cells = cells[:80], cells[40:]
    genes = ["CD3E", "CD3D", "MS4A1", "CD79A", "LYZ", "CD14", "FCGR3A", "NKG7", "GNLY", "PPBP"] + \
        [f"GENE{i}" for i in range(20)]
    celltypes = np.array(["CD4 T", "CD8 T", "B", "CD14 Mono", "NK", "Platelet"])
    rna = ad.AnnData(
        X=_counts(rng, 80, len(genes)),
        obs=pd.DataFrame(
            {
                "n_genes": rng.integers(200, 2500, 80),
                "pct_counts_mt": rng.random(80).astype(np.float32) * 10,
                "leiden": pd.Categorical(rng.choice(["0", "1", "2", "3", "4"], 80)),
                "celltype": pd.Categorical(rng.choice(celltypes, 80), categories=celltypes),
            },
            index=rna_cells,
        ),
        var=pd.DataFrame(
            {
                "highly_variable": rng.random(len(genes)) < 0.4,
                "means": rng.random(len(genes)),
                "feature_types": pd.Categorical(["Gene Expression"] * len(genes)),
            },
            index=genes,
        ),
    )
    rna.obsm["X_umap"] = rng.standard_normal((80, 2)).astype(np.float32)
    antibodies = ["CD3", "CD4", "CD8a", "CD14", "CD16", "CD19", "CD56", "IgG1"]
    prot = ad.AnnData(
        X=rng.random((60, len(antibodies))).astype(np.float32) * 100,
        obs=pd.DataFrame(
            {
                "total_counts": rng.integers(500, 5000, 60),
                "isotype_ctrl": rng.random(60),
                "batch": pd.Categorical(rng.choice(["run1", "run2"], 60)),
            },
            index=prot_cells,
        ),
        var=pd.DataFrame({"isotype": [a == "IgG1" for a in antibodies]}, index=antibodies),
    )
    m = md.MuData({"rna": rna, "prot": prot})
    m.obs["sample"] = pd.Categorical(rng.choice(["donor_A", "donor_B"], m.n_obs))
    m.obs["qc_score"] = rng.random(m.n_obs)
    return m


def blood(rng) -> ad.AnnData:
    """40 cells x 12 genes, obs/var columns of different kinds."""
    n, m = 40, 12
    stage = pd.Categorical(rng.choice(["early", "mid", "late"], n),
                           categories=["early", "mid", "late"], ordered=True)
    doublet = pd.array(rng.random(n) < 0.1, dtype="boolean")
    doublet[[3, 17]] = pd.NA
    n_counts = pd.array(rng.integers(1000, 20000, n), dtype="Int64")
    n_counts[[5]] = pd.NA
    score = rng.standard_normal(n)
    score[[2, 30]] = np.nan
    obs = pd.DataFrame(
        {
            "cell_type": pd.Categorical(rng.choice(["erythrocyte", "neutrophil", "monocyte", "B cell"], n)),
            "stage": stage,
            "n_counts": n_counts,
            "is_doublet": doublet,
            "score": score,
            "umi_per_gene": rng.random(n).astype(np.float32),
            "passed_qc": rng.random(n) < 0.9,
            "donor": [f"donor {i % 3}" for i in range(n)],
        },
        index=[f"blood-{i:03d}" for i in range(n)],
    )
    var = pd.DataFrame(
        {
            "gene_symbol": ["HBB", "HBA1", "HBA2", "S100A8", "S100A9", "LYZ", "CD14", "MS4A1",
                            "CD79A", "ALAS2", "CA1", "ELANE"],
            "n_cells": rng.integers(0, n, m).astype(np.int32),
            "dispersion": rng.random(m),
        },
        index=pd.Index([f"ENSG{i:011d}" for i in range(m)], name="gene_ids"),
    )
    a = ad.AnnData(X=rng.poisson(2.0, (n, m)).astype(np.float32), obs=obs, var=var)
    a.layers["counts"] = sp.csr_matrix(a.X)
    a.uns["title"] = "small blood sample"
    return a


def _binary_tree(leaves, rng) -> nx.DiGraph:
    g = nx.DiGraph()
    level, k = list(leaves), 0
    while len(level) > 1:
        nxt = []
        for i in range(0, len(level), 2):
            pair = level[i:i + 2]
            if len(pair) == 1:
                nxt.append(pair[0])
                continue
            parent = f"node{k}"
            k += 1
            for child in pair:
                g.add_edge(parent, child, length=float(np.round(rng.random(), 3)))
            nxt.append(parent)
        level = nxt
    return g


def lineage(rng) -> td.TreeData:
    """24 cells with one lineage tree (obst['lineage']) over them."""
    cells = [f"cell{i:02d}" for i in range(24)]
    obs = pd.DataFrame(
        {"clone": pd.Categorical(rng.choice(["c1", "c2", "c3"], 24)), "time": rng.random(24) * 10},
        index=cells,
    )
    return td.TreeData(
        X=rng.random((24, 5)).astype(np.float32),
        obs=obs,
        obst={"lineage": _binary_tree(cells, rng)},
        label="tree",
        alignment="leaves",
        allow_overlap=False,
    )


def main(outdir: Path) -> None:
    warnings.filterwarnings("ignore")
    outdir.mkdir(parents=True, exist_ok=True)
    pbmc_small(np.random.default_rng(SEED)).write_h5mu(outdir / "pbmc_small.h5mu")
    blood(np.random.default_rng(SEED + 1)).write_h5ad(outdir / "blood.h5ad")
    lineage(np.random.default_rng(SEED + 2)).write_h5td(outdir / "lineage.h5td")
    # The same AnnData and tree as zarr v3 stores (the zarr backend, and
    # zarr clients through /zarr/): blood.zarr sharded, as anndata writes
    # large stores.
    for name in ("blood.zarr", "lineage.zarr"):
        shutil.rmtree(outdir / name, ignore_errors=True)
    with ad.settings.override(zarr_write_format=3, auto_shard_zarr_v3=True):
        blood(np.random.default_rng(SEED + 1)).write_zarr(outdir / "blood.zarr")
        lineage(np.random.default_rng(SEED + 2)).write_zarr(outdir / "lineage.zarr")
    for name in ("pbmc_small.h5mu", "blood.h5ad", "lineage.h5td", "blood.zarr", "lineage.zarr"):
        path = outdir / name
        files = [f for f in path.rglob("*") if f.is_file()] if path.is_dir() else [path]
        size = sum(f.stat().st_size for f in files)
        assert size < 1_000_000, f"{name} is {size} bytes"
        print(f"wrote {path} ({size} bytes in {len(files)} file(s))")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent)
