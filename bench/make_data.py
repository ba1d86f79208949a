"""Writes the benchmark stores with the real writers (anndata, mudata).

    python bench/make_data.py OUT_DIR SCALE

Deterministic: every array comes from numpy's PCG64 seeded with SEED, so the
same SCALE always writes the same values.  SCALE=1 is 200,000 cells.

Stores (all in OUT_DIR):
  bench.h5ad  AnnData, N cells x 2000 genes, CSR float32 counts (2% dense),
              obs: cell_type, batch, leiden (categoricals), n_genes (int32),
              total_counts (float32), pct_mito (float64), is_doublet (bool);
              obsm X_pca (N x 64 float32), X_umap (N x 2 float32).
  bench.zarr  the same AnnData as a zarr v3 store; obsm X_pca is chunked
              16384 x 64 and X_umap 128 x 2, both uncompressed, so every
              X_pca chunk key is exactly 4 MiB and every X_umap key 1 KiB.
  bench.h5mu  MuData (axis 0) over the same N cells: modality `rna`
              (90% of the cells, the same genes) and `prot` (80% of the
              cells, 50 dense float32 features); global obs `sample`.
  bench.h5td  TreeData over the same N cells (obs cell_type, X N x 8 float32)
              with obst `lineage`: a binary tree whose leaves are the cells
              (internal nodes node0, node1, ..., the root last), `length` on
              every edge; label "tree", alignment "leaves".
A file `manifest.json` records what was written (scale, sizes, keys) and the
DATA_VERSION, so bench/run.py rewrites the data when this file changes it.
"""

import json
import os
import sys
import time
import warnings

import numpy as np
import pandas as pd
import scipy.sparse as sp

warnings.filterwarnings("ignore")

import anndata as ad  # noqa: E402
import mudata as md  # noqa: E402
import networkx as nx  # noqa: E402
import treedata as td  # noqa: E402
import zarr  # noqa: E402

DATA_VERSION = 2
SEED = 20240611
FULL_CELLS = 200_000
N_GENES = 2000
N_PROT = 50
DENSITY = 0.02
PCA_CHUNK = (16384, 64)   # 16384 * 64 * 4 bytes = 4 MiB per chunk
UMAP_CHUNK = (128, 2)     # 128 * 2 * 4 bytes = 1 KiB per chunk


def cell_names(n):
    return np.array([f"cell_{i:07d}" for i in range(n)], dtype=object)


def make_obs(rng, n):
    cell_types = np.array([f"type_{i:02d}" for i in range(30)], dtype=object)
    obs = pd.DataFrame(index=pd.Index(cell_names(n), name="cell"))
    obs["cell_type"] = pd.Categorical(cell_types[rng.integers(0, 30, n)],
                                      categories=cell_types)
    obs["batch"] = pd.Categorical(
        np.array([f"batch_{i}" for i in range(8)], dtype=object)[rng.integers(0, 8, n)])
    obs["leiden"] = pd.Categorical(
        np.array([str(i) for i in range(25)], dtype=object)[rng.integers(0, 25, n)])
    obs["n_genes"] = rng.integers(200, 6000, n).astype(np.int32)
    obs["total_counts"] = rng.gamma(4.0, 1500.0, n).astype(np.float32)
    obs["pct_mito"] = rng.beta(2.0, 30.0, n).astype(np.float64) * 100
    obs["is_doublet"] = rng.random(n) < 0.05
    return obs


def make_counts(rng, n, m):
    x = sp.random(n, m, density=DENSITY, format="csr", dtype=np.float32,
                  random_state=rng, data_rvs=lambda k: rng.integers(1, 40, k))
    x.sort_indices()
    return x


def make_adata(rng, n):
    obs = make_obs(rng, n)
    var = pd.DataFrame(index=pd.Index([f"gene_{j:04d}" for j in range(N_GENES)],
                                      name="gene"))
    var["mean_counts"] = rng.random(N_GENES).astype(np.float32)
    var["highly_variable"] = rng.random(N_GENES) < 0.1
    adata = ad.AnnData(X=make_counts(rng, n, N_GENES), obs=obs, var=var)
    adata.obsm["X_pca"] = rng.standard_normal((n, 64), dtype=np.float32)
    adata.obsm["X_umap"] = rng.standard_normal((n, 2), dtype=np.float32) * 10
    adata.uns["title"] = f"cellar benchmark, {n} cells"
    return adata


def write_zarr(adata, path):
    """anndata's zarr writer, then obsm rewritten with fixed chunk shapes."""
    plain = adata.copy()
    del plain.obsm["X_pca"]
    del plain.obsm["X_umap"]
    plain.write_zarr(path)
    root = zarr.open_group(path, mode="r+", use_consolidated=False)
    obsm = root["obsm"]
    for key, chunks in (("X_pca", PCA_CHUNK), ("X_umap", UMAP_CHUNK)):
        ad.io.write_elem(obsm, key, adata.obsm[key],
                         dataset_kwargs={"chunks": chunks, "compressors": None})
    zarr.consolidate_metadata(path)


def make_mudata(rng, adata):
    n = adata.n_obs
    in_rna = rng.random(n) < 0.9
    in_prot = rng.random(n) < 0.8
    rna = adata[in_rna].copy()
    del rna.obsm["X_pca"]
    prot_obs = pd.DataFrame(index=adata.obs_names[in_prot])
    prot_obs["isotype_ctrl"] = rng.random(int(in_prot.sum())).astype(np.float32)
    prot = ad.AnnData(
        X=rng.gamma(2.0, 50.0, (int(in_prot.sum()), N_PROT)).astype(np.float32),
        obs=prot_obs,
        var=pd.DataFrame(index=[f"prot_{j:02d}" for j in range(N_PROT)]))
    mdata = md.MuData({"rna": rna, "prot": prot})
    samples = np.array([f"sample_{i}" for i in range(4)], dtype=object)
    mdata.obs["sample"] = pd.Categorical(samples[rng.integers(0, 4, mdata.n_obs)])
    return mdata


def binary_tree(leaves, rng):
    """Pairs neighbours level by level: node0.. are the first level's parents."""
    edges = []
    level, k = list(leaves), 0
    while len(level) > 1:
        nxt = []
        for i in range(0, len(level) - 1, 2):
            parent = f"node{k}"
            k += 1
            edges.append((parent, level[i]))
            edges.append((parent, level[i + 1]))
            nxt.append(parent)
        if len(level) % 2:
            nxt.append(level[-1])
        level = nxt
    lengths = np.round(rng.random(len(edges)), 3)
    g = nx.DiGraph()
    g.add_edges_from((a, b, {"length": float(x)}) for (a, b), x in zip(edges, lengths))
    return g, level[0]


def make_treedata(rng, adata):
    n = adata.n_obs
    obs = pd.DataFrame(index=adata.obs_names.copy())
    obs["cell_type"] = adata.obs["cell_type"].to_numpy()
    tree, root = binary_tree(list(adata.obs_names), rng)
    tdata = td.TreeData(X=rng.random((n, 8), dtype=np.float32), obs=obs,
                        obst={"lineage": tree}, label="tree", alignment="leaves",
                        allow_overlap=False)
    return tdata, root, tree.number_of_nodes()


def main():
    out = sys.argv[1]
    scale = float(sys.argv[2])
    n = max(1000, int(round(FULL_CELLS * scale)))
    os.makedirs(out, exist_ok=True)
    rng = np.random.Generator(np.random.PCG64(SEED))
    t0 = time.time()
    adata = make_adata(rng, n)
    adata.write_h5ad(os.path.join(out, "bench.h5ad"))
    write_zarr(adata, os.path.join(out, "bench.zarr"))
    mdata = make_mudata(rng, adata)
    md.write_h5mu(os.path.join(out, "bench.h5mu"), mdata)
    tdata, tree_root, tree_nodes = make_treedata(rng, adata)
    tdata.write_h5td(os.path.join(out, "bench.h5td"))
    global_names = np.asarray(mdata.obs_names)
    pick = np.linspace(0, len(global_names) - 1, 100).round().astype(int)
    manifest = {
        "version": DATA_VERSION,
        "scale": scale,
        "cells": n,
        "genes": N_GENES,
        "nnz": int(adata.X.nnz),
        "mudata_cells": int(mdata.n_obs),
        "rna_cells": int(mdata["rna"].n_obs),
        "prot_cells": int(mdata["prot"].n_obs),
        "tree_root": tree_root,
        "tree_nodes": tree_nodes,
        "seed": SEED,
        # 100 global obs names spread over the MuData, for obsmap lookups.
        "obsmap_names": [str(x) for x in global_names[pick]],
        "seconds": round(time.time() - t0, 1),
        "files": {name: file_bytes(os.path.join(out, name))
                  for name in ("bench.h5ad", "bench.zarr", "bench.h5mu", "bench.h5td")},
    }
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    print(json.dumps(manifest))


def file_bytes(path):
    if os.path.isfile(path):
        return os.path.getsize(path)
    total = 0
    for base, _, files in os.walk(path):
        total += sum(os.path.getsize(os.path.join(base, f)) for f in files)
    return total


if __name__ == "__main__":
    main()
