"""Writes the data of the zarr view section (issue 13) with the real writers.

    python bench/make_zarrview.py OUT_DIR SCALE

Stores (in OUT_DIR), from bench/make_data.py's AnnData (same seed, N cells x
2000 genes, CSR float32 counts 2% dense; N = 200,000 x SCALE):
  view.h5ad  written by anndata.write_h5ad, then obsm X_umap (N x 2 float32)
             and X_pca (N x 64 float32) rewritten by h5py as chunked,
             uncompressed datasets of 128 x 2 (1 KiB) and 16384 x 64 (4 MiB)
             chunks; X stays as anndata writes it (contiguous CSR).
  view.zarr  the same AnnData converted (anndata.write_zarr, zarr v2, what
             the view presents), obsm rewritten with the same chunks,
             uncompressed, and X's data, indices and indptr in uncompressed
             chunks of the h5ad's own (h5py's chunking of anndata's sparse
             datasets): what nginx serves as the reference.
manifest.json records sizes, the genes the gene read picks and
ZARRVIEW_VERSION, so bench/run.py rewrites the data when this file changes.
"""

import json
import os
import sys
import warnings

import numpy as np

warnings.filterwarnings("ignore")

import anndata as ad  # noqa: E402
import h5py  # noqa: E402
import zarr  # noqa: E402

import make_data  # noqa: E402

ZARRVIEW_VERSION = 1
N_GENES_READ = 5    # genes of the gene read, spread over the var axis


def write_h5ad(adata, path):
    adata.write_h5ad(path)
    with h5py.File(path, "a") as f:
        for key, chunks in (("X_pca", make_data.PCA_CHUNK), ("X_umap", make_data.UMAP_CHUNK)):
            values = adata.obsm[key]
            attrs = dict(f["obsm"][key].attrs)
            del f["obsm"][key]
            d = f["obsm"].create_dataset(key, data=values, chunks=chunks)
            d.attrs.update(attrs)


def write_zarr(adata, path, x_chunks):
    with ad.settings.override(zarr_write_format=2):
        adata.write_zarr(path)
        g = zarr.open_group(path, mode="a", use_consolidated=False)
        for key, chunks in (("X_pca", make_data.PCA_CHUNK), ("X_umap", make_data.UMAP_CHUNK)):
            del g["obsm"][key]
            ad.io.write_elem(g["obsm"], key, adata.obsm[key],
                             dataset_kwargs={"chunks": chunks, "compressors": None})
        del g["X"]
        ad.io.write_elem(g, "X", adata.X)
        for part, chunk in x_chunks.items():
            values = g["X"][part][...]
            del g["X"][part]
            g["X"].create_array(part, data=values, chunks=chunk, compressors=None)
    zarr.consolidate_metadata(path)


def main():
    out, scale = sys.argv[1], float(sys.argv[2])
    os.makedirs(out, exist_ok=True)
    n = max(int(make_data.FULL_CELLS * scale), 1000)
    rng = np.random.default_rng(make_data.SEED)
    adata = make_data.make_adata(rng, n)
    write_h5ad(adata, os.path.join(out, "view.h5ad"))
    with h5py.File(os.path.join(out, "view.h5ad"), "r") as f:
        x_chunks = {part: f["X"][part].chunks or f["X"][part].shape for part in ("data", "indices", "indptr")}
    write_zarr(adata, os.path.join(out, "view.zarr"), x_chunks)
    m = adata.n_vars
    genes = [int(j) for j in np.linspace(m // (2 * N_GENES_READ), m - 1, N_GENES_READ)]
    manifest = {
        "version": ZARRVIEW_VERSION, "scale": scale, "cells": n, "genes": m,
        "nnz": int(adata.X.nnz), "x_chunks": {k: list(v) for k, v in x_chunks.items()},
        "read_genes": [str(adata.var_names[j]) for j in genes], "read_gene_index": genes,
    }
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)


if __name__ == "__main__":
    main()
