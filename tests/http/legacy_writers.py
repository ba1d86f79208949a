"""Files in the layouts of older writers, made with h5py (no writer of those
versions runs on today's Python), following those writers' code and the
files they left (scverse/anndata tests/data/archives/v0.5.0, written by
anndata 0.6.6):

- anndata 0.5-0.6.6 (`readwrite/write.py`, `df_to_records_fixed_width`):
  obs and var as 1-D compound datasets, the index first (field `index`),
  categorical columns as their codes with the categories in
  uns['{column}_categories'], strings as fixed-length bytes, bools as
  h5py writes numpy bools; obsm and varm as compound datasets with one
  subarray field per key; raw.X, raw.var, raw.varm at the top level;
  sparse matrices as h5sparse groups (`h5sparse_format`, `h5sparse_shape`);
  uns scalars as 1-element arrays; scanpy's neighbors graphs in uns.
- anndata 0.6.7-0.6.22 (`var_len_str=True`): the same with variable-length
  strings in the compounds and in uns, X and layers as h5sparse groups or
  arrays, obsm as a group of arrays, raw.cat holding raw.var's categories.

Those writers recorded no version in the file: the root has no attributes
(the archive's has none), and the only format markers are the h5sparse
attributes, written here as they wrote them."""

from __future__ import annotations

import h5py
import numpy as np
import scipy.sparse as sp

N_OBS, N_VAR, N_RAW = 40, 12, 15


def _records(fields):
    """A structured array of (name, values) fields; 2-D values become
    subarray fields, as numpy's rec.fromarrays makes them."""
    dt = [(n, a.dtype, a.shape[1:]) if a.ndim > 1 else (n, a.dtype) for n, a in fields]
    out = np.zeros(len(fields[0][1]), dtype=dt)
    for n, a in fields:
        out[n] = a
    return out


def _h5sparse(group: h5py.Group, name: str, m, **kw) -> None:
    """anndata.h5py.Group.create_dataset of a scipy sparse matrix."""
    g = group.create_group(name)
    g.attrs["h5sparse_format"] = m.format
    g.attrs["h5sparse_shape"] = np.array(m.shape)
    g.create_dataset("data", data=m.data, maxshape=(None,), **kw)
    g.create_dataset("indices", data=m.indices, maxshape=(None,), **kw)
    g.create_dataset("indptr", data=m.indptr, maxshape=(None,), **kw)


def _fixed(strings) -> np.ndarray:
    return np.array([s.encode() for s in strings])


def _random_sparse(rng, shape, density, dtype, fmt="csr"):
    m = sp.random(*shape, density=density, format=fmt, random_state=rng, dtype=np.float64)
    m.data = np.round(m.data * 10, 3).astype(dtype)
    return m


def write_v05(path) -> None:
    """anndata 0.5 / 0.6.6 (the layout of the v0.5.0 archive)."""
    rng = np.random.default_rng(5)
    gz = {"compression": "gzip"}
    cells = [f"AAAC{i:03d}-1" for i in range(N_OBS)]
    genes = [f"GENE{j}" for j in range(N_VAR)]
    raw_genes = genes + [f"RAW{j}" for j in range(N_RAW - N_VAR)]
    bulk = rng.integers(0, 4, N_OBS).astype(np.int8)
    bulk[3] = -1  # a missing value: pandas' code -1
    phase = rng.integers(0, 3, N_OBS).astype(np.int8)
    louvain = rng.integers(0, 5, N_OBS).astype(np.int8)  # codes past its 2 categories
    obs = _records([
        ("index", _fixed(cells)),
        ("bulk_labels", bulk),
        ("n_genes", rng.integers(200, 3000, N_OBS).astype(np.int64)),
        ("percent_mito", np.where(np.arange(N_OBS) == 7, np.nan,
                                  rng.random(N_OBS)).astype(np.float32)),
        ("phase", phase),
        ("louvain", louvain),
        ("is_doublet", rng.random(N_OBS) < 0.3),
        ("batch", _fixed([f"b{i % 3}" for i in range(N_OBS)])),
    ])
    var = _records([
        ("index", _fixed(genes)),
        ("n_counts", rng.random(N_VAR).astype(np.float32) * 1000),
        ("means", rng.random(N_VAR)),
        ("highly_variable", rng.random(N_VAR) < 0.5),
        ("gene_type", rng.integers(0, 2, N_VAR).astype(np.int8)),
    ])
    with h5py.File(path, "w") as f:
        f.create_dataset("X", data=rng.random((N_OBS, N_VAR)).astype(np.float32),
                         chunks=(8, 6), **gz)
        f.create_dataset("obs", data=obs, **gz)
        f.create_dataset("var", data=var, **gz)
        f.create_dataset("obsm", data=_records([
            ("X_pca", rng.random((N_OBS, 5)).astype(np.float32)),
            ("X_umap", rng.random((N_OBS, 2))),
        ]), **gz)
        f.create_dataset("varm", data=_records([("PCs", rng.random((N_VAR, 5)))]), **gz)
        _h5sparse(f, "raw.X", _random_sparse(rng, (N_OBS, N_RAW), 0.3, np.float32), **gz)
        f.create_dataset("raw.var", data=_records([
            ("index", _fixed(raw_genes)),
            ("n_cells", rng.integers(0, 40, N_RAW).astype(np.int64)),
        ]), **gz)
        f.create_dataset("raw.varm", data=_records([("PCs", rng.random((N_RAW, 3)).astype(np.float32))]),
                         **gz)
        uns = f.create_group("uns")
        uns.create_dataset("bulk_labels_categories",
                           data=_fixed(["CD14+ Monocyte", "CD19+ B", "CD34+", "Dendritic"]), **gz)
        uns.create_dataset("bulk_labels_colors", data=_fixed(["#1f77b4", "#ff7f0e", "#2ca02c",
                                                              "#d62728"]), **gz)
        uns.create_dataset("phase_categories", data=_fixed(["G1", "G2M", "S"]), **gz)
        uns.create_dataset("louvain_categories", data=_fixed(["0", "1"]), **gz)
        uns.create_dataset("gene_type_categories", data=_fixed(["coding", "lncRNA"]), **gz)
        uns.create_dataset("orphan_categories", data=_fixed(["x", "y"]), **gz)
        uns.create_dataset("title", data=_fixed(["pbmc 3k"]))
        nb = uns.create_group("neighbors")
        params = nb.create_group("params")
        params.create_dataset("method", data=_fixed(["umap"]), **gz)
        params.create_dataset("n_neighbors", data=np.array([10]), **gz)
        _h5sparse(nb, "distances", _random_sparse(rng, (N_OBS, N_OBS), 0.1, np.float64), **gz)
        _h5sparse(nb, "connectivities", _random_sparse(rng, (N_OBS, N_OBS), 0.1, np.float64),
                  **gz)
        pca = uns.create_group("pca")
        pca.create_dataset("variance", data=rng.random(5).astype(np.float32), **gz)
        rgg = uns.create_group("rank_genes_groups")
        groups = ["CD4+/CD25 T Reg", "CD19+ B", "Dendritic"]  # a field name with a slash
        rgg.create_dataset("names", data=_records([
            (g, _fixed([genes[(k + i) % N_VAR] for k in range(6)]).astype("S200"))
            for i, g in enumerate(groups)]), **gz)
        rgg.create_dataset("scores", data=_records([
            (g, rng.random(6).astype(np.float32)) for g in groups]), **gz)
        rp = rgg.create_group("params")
        rp.create_dataset("groupby", data=_fixed(["bulk_labels"]))
        rp.create_dataset("use_raw", data=np.array([True]))


def write_v06(path) -> None:
    """anndata 0.6.7-0.6.22 (variable-length strings, obsm a group, raw.cat)."""
    rng = np.random.default_rng(6)
    vstr = h5py.string_dtype()
    cells = [f"cell-{i}" for i in range(N_OBS)]
    cells[5] = "cell é,5"  # not ASCII, a comma
    genes = [f"g{j}" for j in range(N_VAR)]
    leiden = rng.integers(0, 3, N_OBS).astype(np.int8)
    obs = np.zeros(N_OBS, dtype=[("index", vstr), ("leiden", "i1"), ("n_counts", "<f4"),
                                 ("sample", vstr)])
    obs["index"] = cells
    obs["leiden"] = leiden
    obs["n_counts"] = rng.random(N_OBS).astype(np.float32) * 5000
    obs["sample"] = [f"s{i % 2}" for i in range(N_OBS)]
    var = np.zeros(N_VAR, dtype=[("index", vstr), ("feature_types", "i1"), ("dispersions", "<f8")])
    var["index"] = genes
    var["feature_types"] = rng.integers(0, 2, N_VAR).astype(np.int8)
    var["dispersions"] = rng.random(N_VAR)
    raw_var = np.zeros(N_RAW, dtype=[("index", vstr), ("feature_types", "i1")])
    raw_var["index"] = genes + [f"r{j}" for j in range(N_RAW - N_VAR)]
    raw_var["feature_types"] = rng.integers(0, 2, N_RAW).astype(np.int8)
    with h5py.File(path, "w") as f:
        _h5sparse(f, "X", _random_sparse(rng, (N_OBS, N_VAR), 0.4, np.float32, "csc"))
        f.create_dataset("obs", data=obs)
        f.create_dataset("var", data=var)
        layers = f.create_group("layers")
        layers.create_dataset("counts", data=rng.integers(0, 9, (N_OBS, N_VAR)).astype(np.int32))
        _h5sparse(layers, "spliced", _random_sparse(rng, (N_OBS, N_VAR), 0.2, np.float64))
        obsm = f.create_group("obsm")
        obsm.create_dataset("X_umap", data=rng.random((N_OBS, 2)).astype(np.float32))
        f.create_dataset("raw.X", data=rng.random((N_OBS, N_RAW)).astype(np.float32))
        f.create_dataset("raw.var", data=raw_var)
        rc = f.create_group("raw.cat")
        rc.create_dataset("feature_types_categories", data=np.array(["Gene", "Peak"], dtype=object),
                          dtype=vstr)
        uns = f.create_group("uns")
        uns.create_dataset("leiden_categories", data=np.array(["0", "1", "2"], dtype=object),
                           dtype=vstr)
        uns.create_dataset("feature_types_categories",
                           data=np.array(["Gene Expression", "Peaks"], dtype=object), dtype=vstr)
        uns.create_dataset("leiden_colors", data=np.array(["#1f77b4", "#ff7f0e", "#279e68"],
                                                          dtype=object), dtype=vstr)
        uns.create_dataset("version", data=np.array(["1.4"], dtype=object), dtype=vstr)
        uns.create_dataset("n_pcs", data=np.array([50]))
        nb = uns.create_group("neighbors")
        nb.create_dataset("distances", data=rng.random((N_OBS, N_OBS)))  # dense 2-D: moved too
        nb.create_dataset("connectivities", data=rng.random(N_OBS))  # 1-D: stays in uns


def write_both_raws(path) -> None:
    """raw as a group and as raw.X: anndata refuses the file's raw."""
    write_v05(path)
    with h5py.File(path, "a") as f:
        raw = f.create_group("raw")
        raw.create_dataset("X", data=np.zeros((N_OBS, N_RAW), dtype=np.float32))


LAYOUTS = {
    "legacy_05.h5ad": write_v05,
    "legacy_06.h5ad": write_v06,
    "legacy_both_raws.h5ad": write_both_raws,
}
