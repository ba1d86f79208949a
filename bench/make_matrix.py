"""Writes the matrix benchmark stores (issue 5), in chunks, with anndata's
backed writers (never a dense array, never the whole matrix in memory).

    python bench/make_matrix.py OUT_DIR SCALE

SCALE=1: 200,000 cells x 20,000 genes, about 1,000 stored values per cell
(1,000 genes drawn per cell, duplicates dropped: ~975), so ~195M non-zeros.
SCALE=0.1, the quick run: 20,000 cells, the same genes and values per cell
(~19.5M non-zeros).  Deterministic: numpy's PCG64 seeded with SEED, one
block of BLOCK cells at a time.

Stores (in OUT_DIR):
  matrix.h5ad  AnnData: X CSR float32 (counts 1..39), int32 indices,
               `data`/`indices` chunked (CHUNK entries, uncompressed, as
               anndata's appendable writer needs chunks); obs `cell_type`
               (categorical), var `highly_variable`; obsm X_umap
               (N x 2 float32).
  matrix.zarr  the same AnnData in zarr v3 (anndata's writer), X's
               `data`/`indices` sharded: shards of SHARD entries holding
               chunks of CHUNK entries (zarr's default zstd).
X is written as a first block by `anndata.io.write_elem`, then
`anndata.io.sparse_dataset(...).append(block)` block after block.
`manifest.json` records sizes, the genes and rows the queries use, and
MATRIX_VERSION, so bench/run.py rewrites the data when this file changes it.
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
import h5py  # noqa: E402
import zarr  # noqa: E402

MATRIX_VERSION = 1
SEED = 20240613
FULL_CELLS = 200_000
N_GENES = 20_000
PER_CELL = 1000
BLOCK = 5000                 # cells generated and appended at once
CHUNK = 262_144              # entries per chunk (1 MiB of float32)
SHARD = 16 * CHUNK           # entries per zarr shard (16 MiB of float32)


def block_csr(rng, rows):
    idx = rng.integers(0, N_GENES, (rows, PER_CELL), dtype=np.int32)
    idx.sort(axis=1)
    keep = np.ones(idx.shape, dtype=bool)
    keep[:, 1:] = idx[:, 1:] != idx[:, :-1]
    indices = idx[keep]
    indptr = np.zeros(rows + 1, dtype=np.int64)
    np.cumsum(keep.sum(axis=1), out=indptr[1:])
    data = rng.integers(1, 40, len(indices)).astype(np.float32)
    return sp.csr_matrix((data, indices, indptr), shape=(rows, N_GENES))


def skeleton(rng, n):
    obs = pd.DataFrame(index=pd.Index([f"cell_{i:07d}" for i in range(n)], name="cell"))
    types = np.array([f"type_{i:02d}" for i in range(30)], dtype=object)
    obs["cell_type"] = pd.Categorical(types[rng.integers(0, 30, n)], categories=types)
    var = pd.DataFrame(index=pd.Index([f"gene_{j:05d}" for j in range(N_GENES)], name="gene"))
    var["highly_variable"] = rng.random(N_GENES) < 0.1
    a = ad.AnnData(obs=obs, var=var)
    a.obsm["X_umap"] = (rng.standard_normal((n, 2), dtype=np.float32) * 10)
    return a


def write_x(group, n, seed, kwargs):
    """Block after block from its own generator, so both stores get the
    same values."""
    rng = np.random.Generator(np.random.PCG64(seed))
    nnz = 0
    for start in range(0, n, BLOCK):
        block = block_csr(rng, min(BLOCK, n - start))
        nnz += block.nnz
        if start == 0:
            ad.io.write_elem(group, "X", block, dataset_kwargs=kwargs)
            x = ad.io.sparse_dataset(group["X"])
        else:
            x.append(block)
    return nnz


def main():
    out = sys.argv[1]
    scale = float(sys.argv[2])
    n = max(BLOCK, int(round(FULL_CELLS * scale)))
    os.makedirs(out, exist_ok=True)
    rng = np.random.Generator(np.random.PCG64(SEED))
    t0 = time.time()
    a = skeleton(rng, n)
    h5 = os.path.join(out, "matrix.h5ad")
    zr = os.path.join(out, "matrix.zarr")
    a.write_h5ad(h5)
    with h5py.File(h5, "r+") as f:
        nnz = write_x(f, n, SEED + 1, {"chunks": (CHUNK,)})
    t_h5 = time.time() - t0
    ad.settings.zarr_write_format = 3
    a.write_zarr(zr)
    g = zarr.open_group(zr, mode="r+", use_consolidated=False)
    nnz_z = write_x(g, n, SEED + 1, {"chunks": (CHUNK,), "shards": (SHARD,)})
    zarr.consolidate_metadata(zr)
    assert nnz == nnz_z
    genes = [f"gene_{j:05d}" for j in rng.choice(N_GENES, 256, replace=False)]
    row_starts = sorted(int(x) for x in rng.choice(n - 100, 64, replace=False))
    manifest = {
        "version": MATRIX_VERSION,
        "scale": scale,
        "seed": SEED,
        "cells": n,
        "genes": N_GENES,
        "nnz": nnz,
        "per_cell": PER_CELL,
        "chunk": CHUNK,
        "shard": SHARD,
        "gene_names": genes,
        "row_starts": row_starts,
        "seconds_h5ad": round(t_h5, 1),
        "seconds": round(time.time() - t0, 1),
        "files": {name: file_bytes(os.path.join(out, name))
                  for name in ("matrix.h5ad", "matrix.zarr")},
    }
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    print(json.dumps({k: v for k, v in manifest.items()
                      if k not in ("gene_names", "row_starts")}))


def file_bytes(path):
    if os.path.isfile(path):
        return os.path.getsize(path)
    total = 0
    for base, _, files in os.walk(path):
        total += sum(os.path.getsize(os.path.join(base, f)) for f in files)
    return total


if __name__ == "__main__":
    main()
