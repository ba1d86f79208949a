"""A store for the viewer's browser tests, written by anndata: cells in
well separated clusters of a 2-D embedding (so colourings draw different
pictures), a CSR X whose genes mark clusters, and obs columns of every
kind the viewer colours by."""

from __future__ import annotations

from pathlib import Path

import anndata as ad
import numpy as np
import pandas as pd
import scipy.sparse as sp

CELL_TYPES = ["T cell", "B cell", "NK", "Monocyte", "Dendritic", "Platelet"]
GENES = ["CD3E", "MS4A1", "NKG7", "LYZ", "FCER1A", "PPBP"] + [f"GENE{i:03d}" for i in range(54)]


def cells(n: int = 3000, seed: int = 7) -> ad.AnnData:
    rng = np.random.default_rng(seed)
    k = len(CELL_TYPES)
    code = rng.integers(0, k, n)
    angle = 2 * np.pi * np.arange(k) / k
    centres = np.stack([np.cos(angle), np.sin(angle)], 1) * 9
    emb = centres[code] + rng.standard_normal((n, 2)) * np.array([1.4, 0.9])
    stretch = rng.random(n) * 3
    emb += np.stack([np.cos(angle[code] + 1.2), np.sin(angle[code] + 1.2)], 1) * stretch[:, None]
    counts = rng.poisson(0.3, (n, len(GENES))).astype(np.float32)
    for c in range(k):
        counts[code == c, c] += rng.poisson(6.0, int((code == c).sum()))
    obs = pd.DataFrame(
        {
            "cell_type": pd.Categorical(np.array(CELL_TYPES)[code], categories=CELL_TYPES),
            "n_genes": (counts > 0).sum(1).astype(np.int64),
            "score": emb[:, 0] / 10 + rng.standard_normal(n) * 0.1,
            "batch": pd.Categorical(rng.choice(["b1", "b2", "b3"], n)),
            "passed_qc": rng.random(n) < 0.9,
        },
        index=[f"cell-{i:05d}" for i in range(n)],
    )
    a = ad.AnnData(X=sp.csr_matrix(counts), obs=obs, var=pd.DataFrame(index=GENES))
    a.obsm["X_umap"] = emb.astype(np.float32)
    a.obsm["X_pca"] = np.concatenate([emb, rng.standard_normal((n, 8))], 1).astype(np.float32)
    return a


def write_cells(path: Path, n: int = 3000) -> ad.AnnData:
    a = cells(n)
    a.write_h5ad(path)
    return a
