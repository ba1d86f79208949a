"""Fixture writers for the matrix, uns and raw routes (tests/http/test_matrix.py).

Every store is written by anndata / mudata, as HDF5 and as zarr v2 and v3
(FORMATS; compressed HDF5 copies and the MuData store are HDF5 only).  Only
the legacy `h5sparse_*` matrix and the unsigned sparse index types are made
by editing a written HDF5 file with h5py, since no current writer produces
them.  Seeded: two runs write the same data.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import anndata as ad
import h5py
import mudata as md
import numpy as np
import pandas as pd
import scipy.sparse as sp

SEED = 20261203

# Store formats written: HDF5, zarr v2 and zarr v3 (sharded by anndata).
FORMATS = ["h5", "zarr2", "zarr3"]

N_OBS, N_VARS = 40, 12

# Every numeric dtype and bool, each stored as a layer of DENSE.
DTYPES = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
          "float16", "float32", "float64", "bool"]


def _quiet():
    warnings.filterwarnings("ignore")


def obs_names(n=N_OBS):
    names = [f"cell{i:03d}" for i in range(n)]
    names[5] = "cell,05"   # a comma: only selectable through a POST body
    names[6] = "细胞 06"     # non-ASCII and a space
    return names


def var_names(n=N_VARS):
    return [f"G{i}" for i in range(n)]


def _values(rng, dtype, shape):
    dt = np.dtype(dtype)
    if dt == np.bool_:
        return rng.random(shape) < 0.4
    if dt.kind == "f":
        v = rng.normal(0, 100, shape).astype(dt)
        if v.size > 3:
            flat = v.reshape(-1)
            flat[1] = np.nan
            flat[2] = np.inf
            flat[3] = -0.0
        return v
    info = np.iinfo(dt)
    v = rng.integers(0, min(info.max, 10_000), shape).astype(dt)
    flat = v.reshape(-1)
    flat[0] = info.max   # extremes survive every format
    flat[1] = info.min
    return v


def sparse_with_gaps(rng, shape, density=0.3, dtype="float32", fmt="csr"):
    """A sparse matrix whose rows 1 and 4 and columns 2 and 7 are empty."""
    dense = rng.random(shape) < density
    vals = rng.normal(0, 10, shape).astype(dtype)
    dense = np.where(dense, vals, 0).astype(dtype)
    dense[[1, 4], :] = 0
    dense[:, [2, 7]] = 0
    m = sp.csr_matrix(dense) if fmt == "csr" else sp.csc_matrix(dense)
    m.eliminate_zeros()
    return m


def annotation_frame(index, seed) -> pd.DataFrame:
    """A data frame for obsm / varm (index = the axis' names) holding every
    column kind a frame route serves: categoricals (with a missing value,
    ordered, numeric categories), strings, nullable strings / integers /
    booleans with missing values, floats with NaN and inf, ints, bools."""
    rng = np.random.default_rng(seed)
    n = len(index)
    f = rng.normal(0, 10, n).astype("float32")
    if n > 3:
        f[1], f[2] = np.nan, -np.inf
    return pd.DataFrame({
        "cluster": pd.Categorical([["T", "B", None, "NK"][i % 4] for i in range(n)],
                                  categories=["NK", "T", "B"]),
        "level": pd.Categorical([["lo", "hi"][i % 2] for i in range(n)],
                                categories=["lo", "hi"], ordered=True),
        "k": pd.Categorical([[3, 1, 2][i % 3] for i in range(n)]),
        "label": [f"x{i},{'é' if i % 2 else 'y'}" for i in range(n)],
        "nstr": pd.array([None if i % 7 == 0 else f"n{i}" for i in range(n)], dtype="string"),
        "nint": pd.array([None if i % 5 == 0 else i * 3 - 20 for i in range(n)], dtype="Int32"),
        "nbool": pd.array([None if i % 6 == 0 else i % 2 == 0 for i in range(n)],
                          dtype="boolean"),
        "score": f,
        "count": rng.integers(-1000, 1000, n).astype("int64"),
        "flag": rng.random(n) < 0.5,
        "u8": np.arange(n, dtype="uint8"),
    }, index=index)


def make_dense_adata() -> ad.AnnData:
    rng = np.random.default_rng(SEED)
    X = _values(rng, "float32", (N_OBS, N_VARS))
    a = ad.AnnData(X=X,
                   obs=pd.DataFrame({"n": np.arange(N_OBS)}, index=obs_names()),
                   var=pd.DataFrame({"m": np.arange(N_VARS)}, index=var_names()))
    for dt in DTYPES:
        a.layers[dt] = _values(rng, dt, (N_OBS, N_VARS))
    a.obsm["X_umap"] = rng.normal(size=(N_OBS, 2))
    a.obsm["X_pca"] = rng.normal(size=(N_OBS, 5)).astype("float32")
    a.obsm["frame"] = pd.DataFrame({"a": np.arange(N_OBS)}, index=a.obs_names)
    a.varm["PCs"] = rng.normal(size=(N_VARS, 3))
    a.obsp["distances"] = sparse_with_gaps(rng, (N_OBS, N_OBS), 0.1, "float64")
    a.obsp["dense_pairs"] = rng.random((N_OBS, N_OBS))
    a.varp["corr"] = sparse_with_gaps(rng, (N_VARS, N_VARS), 0.4, "float32", "csc")
    a.uns["title"] = "dense fixture"
    a.uns["n"] = 7
    a.uns["pi"] = 3.5
    a.uns["flag"] = True
    a.uns["small"] = np.arange(5, dtype="int32")
    a.uns["names"] = np.array(["a", "b", "c"], dtype=object)
    a.uns["big"] = np.arange(5000, dtype="float64")
    a.uns["nested"] = {"colors": np.array(["#ff0000", "#00ff00"], dtype=object),
                       "params": {"k": 15, "method": "umap"}}
    raw = ad.AnnData(X=sparse_with_gaps(rng, (N_OBS, N_VARS + 3), 0.3, "float32"),
                     obs=pd.DataFrame(index=obs_names()),
                     var=pd.DataFrame(index=var_names(N_VARS + 3)))
    raw.varm["loadings"] = rng.normal(size=(N_VARS + 3, 2))
    raw.varm["annot"] = annotation_frame(raw.var_names, SEED + 12)
    a.raw = raw
    # Data frames in obsm / varm (their own seeds: the arrays above are unchanged).
    a.obsm["cells"] = annotation_frame(a.obs_names, SEED + 10)
    a.varm["genes"] = annotation_frame(a.var_names, SEED + 11)
    return a


def make_sparse_adata(seed=SEED) -> ad.AnnData:
    rng = np.random.default_rng(seed + 1)
    X = sparse_with_gaps(rng, (N_OBS, N_VARS), 0.35, "float32")
    a = ad.AnnData(X=X,
                   obs=pd.DataFrame(index=obs_names()),
                   var=pd.DataFrame(index=var_names()))
    a.layers["csc"] = sparse_with_gaps(rng, (N_OBS, N_VARS), 0.35, "int32", "csc")
    wide = sparse_with_gaps(rng, (N_OBS, N_VARS), 0.35, "float64")
    wide.indices = wide.indices.astype(np.int64)
    wide.indptr = wide.indptr.astype(np.int64)
    a.layers["csr64"] = wide
    a.layers["csr_u"] = sparse_with_gaps(rng, (N_OBS, N_VARS), 0.35, "int16")
    a.layers["csc_u"] = sparse_with_gaps(rng, (N_OBS, N_VARS), 0.35, "uint8", "csc")
    a.layers["legacy"] = sparse_with_gaps(rng, (N_OBS, N_VARS), 0.35, "float32")
    a.layers["empty"] = sp.csr_matrix((N_OBS, N_VARS), dtype="float32")
    return a


def with_duplicates(rng, shape, dtype="float32", fmt="csr"):
    """A sparse matrix that stores some (row, column) entries two or three
    times, unsorted within some rows, as scipy keeps it
    (has_canonical_format False): every other stored entry of a major
    position is stored once more, the first one of every fourth position
    twice more, and every third position's entries are reversed."""
    base = sparse_with_gaps(rng, shape, 0.35, dtype, fmt)
    data, indices, indptr = [], [], [0]
    for i in range(len(base.indptr) - 1):
        lo, hi = base.indptr[i], base.indptr[i + 1]
        idx = list(base.indices[lo:hi])
        extra = idx[::2] + (idx[:1] * 2 if i % 4 == 0 else [])
        idx += extra
        if np.dtype(dtype).kind == "i":
            info = np.iinfo(dtype)   # large values: sums wrap around, as numpy's do
            vals = list(base.data[lo:hi]) + list(rng.integers(info.min // 2, info.max, len(extra),
                                                               dtype=dtype, endpoint=True))
        else:
            vals = list(base.data[lo:hi]) + list(rng.normal(0, 10, len(extra)).astype(dtype))
        if i % 3 == 0:
            idx, vals = idx[::-1], vals[::-1]
        indices += idx
        data += vals
        indptr.append(len(indices))
    cls = sp.csr_matrix if fmt == "csr" else sp.csc_matrix
    m = cls((np.array(data, dtype=dtype), np.array(indices, dtype="int32"),
             np.array(indptr, dtype="int32")), shape=shape)
    assert not m.has_canonical_format and m.nnz > base.nnz
    return m


DUP_LAYERS = ["csc", "int8"]


def make_duplicates_adata() -> tuple[ad.AnnData, dict]:
    """An AnnData whose X (float32 CSR), layers["csc"] (int32 CSC) and
    layers["int8"] (int8 CSR, sums that wrap) store duplicate entries.
    Returns it and {element path: the non-canonical matrix}."""
    rng = np.random.default_rng(SEED + 20)
    mats = {"X": with_duplicates(rng, (N_OBS, N_VARS), "float32"),
            "layers/csc": with_duplicates(rng, (N_OBS, N_VARS), "int32", "csc"),
            "layers/int8": with_duplicates(rng, (N_OBS, N_VARS), "int8")}
    a = ad.AnnData(X=mats["X"],
                   obs=pd.DataFrame(index=obs_names()),
                   var=pd.DataFrame(index=var_names()))
    for k in DUP_LAYERS:
        a.layers[k] = mats[f"layers/{k}"]
    return a, mats


def write_duplicates(path: Path, fmt: str):
    """HDF5: anndata writes the store with canonical copies, then h5py puts
    the stored arrays of the non-canonical matrices in their place.  zarr:
    anndata writes the non-canonical matrices as they are."""
    a, mats = make_duplicates_adata()
    if fmt != "h5":
        write_h5ad(a, path, fmt)
        return
    canon = a.copy()
    for m in [canon.X] + [canon.layers[k] for k in DUP_LAYERS]:
        m.sum_duplicates()
    write_h5ad(canon, path)
    with h5py.File(path, "r+") as f:
        for key, m in mats.items():
            g = f[key]
            assert g.attrs["encoding-type"] == f"{m.format}_matrix"
            for part in ("data", "indices", "indptr"):
                del g[part]
                g.create_dataset(part, data=getattr(m, part))


def _unsigned_indices(path: Path, layer: str, dtype: str):
    """Rewrites indices and indptr of a sparse layer as unsigned integers."""
    with h5py.File(path, "r+") as f:
        g = f["layers"][layer]
        for part in ("indices", "indptr"):
            v = g[part][()].astype(dtype)
            del g[part]
            g.create_dataset(part, data=v)


def _legacy_h5sparse(path: Path, layer: str):
    """Turns a csr_matrix layer into the pre-0.7 h5sparse form."""
    with h5py.File(path, "r+") as f:
        g = f["layers"][layer]
        shape = np.asarray(g.attrs["shape"], dtype="int64")
        for k in ("encoding-type", "encoding-version", "shape"):
            del g.attrs[k]
        g.attrs["h5sparse_format"] = "csr"
        g.attrs["h5sparse_shape"] = shape


# Store suffix of each format.
EXT = {"h5": ".h5ad", "zarr2": "_v2.zarr", "zarr3": "_v3.zarr"}


def write_h5ad(a: ad.AnnData, path: Path, fmt: str = "h5", **kw):
    """Writes a with the format's writer (HDF5 keywords such as compression
    apply to "h5" only; zarr stores use the writer's default codecs, zarr v3
    sharded)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "h5":
        a.write_h5ad(path, **kw)
        return
    version = 2 if fmt == "zarr2" else 3
    with ad.settings.override(zarr_write_format=version):
        a.write_zarr(path)


def write_all(root: Path) -> dict:
    """Writes every matrix store under root; returns {label: store name}."""
    _quiet()
    names = {}
    for fmt in FORMATS:
        ext = EXT[fmt]
        names[f"dense-{fmt}"] = name = f"matrix/dense{ext}"
        write_h5ad(make_dense_adata(), root / name, fmt)
        names[f"sparse-{fmt}"] = name = f"matrix/sparse{ext}"
        write_h5ad(make_sparse_adata(), root / name, fmt)
        names[f"dup-{fmt}"] = dup = f"matrix/duplicates{ext}"
        write_duplicates(root / dup, fmt)
        if fmt == "h5":
            _unsigned_indices(root / name, "csr_u", "uint32")
            _unsigned_indices(root / name, "csc_u", "uint64")
            _legacy_h5sparse(root / name, "legacy")
            names["gzip-h5"] = name = "matrix/gzip.h5ad"
            write_h5ad(make_dense_adata(), root / name, compression="gzip")
            names["sparse-gzip-h5"] = name = "matrix/sparse_gzip.h5ad"
            write_h5ad(make_sparse_adata(), root / name, compression="gzip")
            names["lzf-h5"] = name = "matrix/lzf.h5ad"
            write_h5ad(make_dense_adata(), root / name, compression="lzf")
            names["sparse-lzf-h5"] = name = "matrix/sparse_lzf.h5ad"
            write_h5ad(make_sparse_adata(), root / name, compression="lzf")
            names["mudata-h5"] = name = "matrix/multi.h5mu"
            mdata = md.MuData({"rna": make_sparse_adata(), "prot": make_dense_adata()})
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            mdata.write_h5mu(root / name)
    return names


def read_reference(path: Path):
    """What anndata / mudata read from a store."""
    _quiet()
    if str(path).endswith(".h5mu"):
        return md.read_h5mu(path)
    if str(path).endswith(".zarr"):
        return ad.read_zarr(path)
    return ad.read_h5ad(path)


def dense(m) -> np.ndarray:
    """A matrix as numpy; sparse index arrays are cast to int64 first
    (scipy's kernels refuse unsigned ones)."""
    if not sp.issparse(m):
        return np.asarray(m)
    cls = sp.csr_matrix if m.format == "csr" else sp.csc_matrix
    m = cls((m.data, m.indices.astype(np.int64), m.indptr.astype(np.int64)), shape=m.shape)
    return m.toarray()
