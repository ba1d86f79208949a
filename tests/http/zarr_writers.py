"""Zarr fixtures for tests/http/test_zarr.py, written with the real writers:
anndata 0.13 (`write_zarr` with `zarr_write_format` 2 and 3, v3 with and
without sharding, the writer's default compressor and explicit blosc, gzip,
zstd, lz4 and none), mudata's `write_zarr` and treedata's `write_zarr`.

Every zarr store has an HDF5 twin written from the same object, so the
routes can be compared between the two and with what the libraries read.
A few extra stores are edited afterwards with plain file operations (a v2
store without .zmetadata, symlinks, a scratch store the tests rewrite).
"""

from __future__ import annotations

import contextlib
import inspect
import json
import os
import shutil
import warnings
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

import anndata as ad
import mudata as md
import numcodecs
import numpy as np
import pandas as pd
import scipy.sparse as sp
import treedata as td
import zarr
from numcodecs import zarr3 as nz3
from zarr.codecs import BloscCodec, GzipCodec, ZstdCodec

import writers as W

SEED = 20261203
AD_H5 = "ad.h5ad"          # the HDF5 twin of every anndata zarr store
MU_H5 = "mu.h5mu"
TD_H5 = "td.h5td"
NO_ZMETA = "ad_v2_no_zmetadata.zarr"   # v2 default with .zmetadata removed
V3_UNCONSOLIDATED = "ad_v3_unconsolidated.zarr"
SCRATCH = "scratch.zarr"   # a copy the tests rewrite in place
OUTSIDE_SECRET = "outside_secret.bin"
SECRET_BYTES = b"ZARR-SECRET-OUTSIDE-THE-STORE\n"
# X's chunks: with auto sharding, shards of 2x2 chunks (20, 6) over X's
# (50, 7), edge chunks and shards partial
CHUNKS = (10, 3)


@dataclass(frozen=True)
class ZStore:
    name: str          # store name under the root
    twin: str          # its HDF5 twin
    kind: str          # anndata | mudata | treedata
    zarr_format: int
    sharded: bool = False
    compressor: str = "default"


COMPRESSORS = ["default", "blosc", "gzip", "zstd", "lz4", "none"]


def _anndata_stores() -> list[ZStore]:
    out = []
    for comp in COMPRESSORS:
        out.append(ZStore(f"ad_v2_{comp}.zarr", AD_H5, "anndata", 2, False, comp))
    for sharded in (True, False):
        for comp in COMPRESSORS:
            tag = "sharded" if sharded else "chunked"
            out.append(ZStore(f"ad_v3_{tag}_{comp}.zarr", AD_H5, "anndata", 3, sharded, comp))
    return out


AD_STORES = _anndata_stores()
MU_STORES = [ZStore("mu_v2.zarr", MU_H5, "mudata", 2), ZStore("mu_v3.zarr", MU_H5, "mudata", 3, True)]
TD_STORES = [ZStore("td_v2.zarr", TD_H5, "treedata", 2), ZStore("td_v3.zarr", TD_H5, "treedata", 3, True)]
EXTRA_STORES = [ZStore(NO_ZMETA, AD_H5, "anndata", 2), ZStore(V3_UNCONSOLIDATED, AD_H5, "anndata", 3, True)]
# the odd AnnData of writers.py (no rows, no columns, non-ASCII names) and
# one with .raw and a CSC X, each in v2 and v3 beside its .h5ad twin
EDGE_WRITERS = {"empty_rows": W.write_empty_rows, "no_columns": W.write_no_columns,
                "unicode": W.write_unicode}
EDGE_STORES = [ZStore(f"{n}_v{f}.zarr", f"{n}.h5ad", "anndata", f, f == 3)
               for n in (*EDGE_WRITERS, "raw_csc") for f in (2, 3)]
ALL_STORES = AD_STORES + MU_STORES + TD_STORES + EXTRA_STORES + EDGE_STORES
BY_NAME = {s.name: s for s in ALL_STORES}

# the stores the real-client tests read (a v2 one and a v3 sharded one)
V2 = "ad_v2_default.zarr"
V3_SHARDED = "ad_v3_sharded_default.zarr"
V3_CHUNKED = "ad_v3_chunked_blosc.zarr"


# ------------------------------------------------------------ objects
def make_adata() -> ad.AnnData:
    """writers.make_frame_adata (every obs column kind) plus obsm, varm,
    a sparse layer, obsp and uns, so the summary lists every key family."""
    a = W.make_frame_adata(seed=SEED)
    rng = np.random.default_rng(SEED)
    a.obsm["X_pca"] = rng.standard_normal((a.n_obs, 3))
    a.varm["loadings"] = rng.random((a.n_vars, 2)).astype(np.float32)
    counts = sp.random(a.n_obs, a.n_vars, density=0.3, format="csr", random_state=1,
                       dtype=np.float32)
    a.layers["counts"] = counts
    a.obsp["distances"] = sp.random(a.n_obs, a.n_obs, density=0.05, format="csr",
                                    random_state=2)
    a.uns["note"] = "written by zarr_writers"
    a.uns["params"] = {"n_pcs": 3, "seed": SEED}
    return a


def make_raw_csc() -> ad.AnnData:
    """A CSC X and a .raw with more variables than X."""
    rng = np.random.default_rng(SEED + 5)
    full = ad.AnnData(
        X=sp.random(30, 9, density=0.2, format="csc", random_state=3, dtype=np.float32),
        obs=pd.DataFrame({"g": pd.Categorical(rng.choice(["x", "y"], 30))},
                         index=[f"o{i}" for i in range(30)]),
        var=pd.DataFrame({"w": rng.random(9)}, index=[f"v{i}" for i in range(9)]),
    )
    full.raw = full
    return full[:, :5].copy()


def object_written_by(write_fn) -> tuple[ad.AnnData, dict]:
    """The AnnData a writers.py function writes and the keyword arguments
    it passes to write_h5ad (captured on the way, the file goes to a
    throwaway path), so its zarr copies come from the same object."""
    import tempfile
    captured = {}
    original = ad.AnnData.write_h5ad

    def capture(self, path, **kwargs):
        captured["adata"], captured["kwargs"] = self, kwargs

    ad.AnnData.write_h5ad = capture
    try:
        with tempfile.TemporaryDirectory() as tmp:
            write_fn(Path(tmp) / "x.h5ad")
    finally:
        ad.AnnData.write_h5ad = original
    return captured["adata"], captured["kwargs"]


def make_mdata() -> md.MuData:
    return W.make_multi_mdata(seed=SEED)


def make_tdata() -> td.TreeData:
    rng = np.random.default_rng(SEED + 3)
    cells = [f"c{i}" for i in range(12)]
    obs = pd.DataFrame({"clone": pd.Categorical(rng.choice(["A", "B"], 12)), "time": rng.random(12)},
                       index=cells)
    return td.TreeData(
        X=rng.random((12, 3)).astype(np.float32),
        obs=obs,
        obst={"tree1": W._tree("n", cells, SEED)},
        label="lineage",
        alignment="leaves",
        allow_overlap=False,
    )


# ------------------------------------------------------------ writing
@contextlib.contextmanager
def zarr_settings(zarr_format: int, sharded: bool):
    old_fmt = ad.settings.__dict__.get("zarr_write_format", 3)
    old_shard = ad.settings.auto_shard_zarr_v3
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ad.settings.zarr_write_format = zarr_format
        ad.settings.auto_shard_zarr_v3 = sharded
    try:
        yield
    finally:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ad.settings.zarr_write_format = old_fmt
            ad.settings.auto_shard_zarr_v3 = old_shard


def compressor_kwargs(name: str, zarr_format: int) -> dict:
    """dataset kwargs for zarr.create_array naming an explicit compressor."""
    if name == "default":
        return {}
    if name == "none":
        return {"compressors": None}
    if zarr_format == 2:
        codec = {"blosc": numcodecs.Blosc(cname="lz4", clevel=5, shuffle=numcodecs.Blosc.SHUFFLE),
                 "gzip": numcodecs.GZip(level=5), "zstd": numcodecs.Zstd(level=3),
                 "lz4": numcodecs.LZ4()}[name]
    else:
        codec = {"blosc": BloscCodec(cname="zstd", clevel=5, shuffle="bitshuffle"),
                 "gzip": GzipCodec(level=5), "zstd": ZstdCodec(level=3),
                 "lz4": nz3.LZ4()}[name]
    return {"compressors": codec}


def write_anndata_zarr(a: ad.AnnData, path: Path, s: ZStore, consolidate: bool = True) -> None:
    kwargs = dict(chunks=CHUNKS, convert_strings_to_categoricals=False,
                  **compressor_kwargs(s.compressor, s.zarr_format))
    with zarr_settings(s.zarr_format, s.sharded):
        if "consolidate_metadata" in inspect.signature(ad.io.write_zarr).parameters:
            ad.io.write_zarr(path, a, consolidate_metadata=consolidate, **kwargs)
        elif consolidate:
            ad.io.write_zarr(path, a, **kwargs)
        else:
            # anndata 0.12 (tests/requirements-py311.txt) always ends
            # write_zarr with zarr.consolidate_metadata; 0.13's
            # consolidate_metadata=False is the same writer without that call
            with mock.patch.object(zarr, "consolidate_metadata", lambda *args, **kw: None):
                ad.io.write_zarr(path, a, **kwargs)


def write_all(root: Path, outside: Path) -> None:
    W._quiet()
    warnings.simplefilter("ignore")
    root.mkdir(parents=True, exist_ok=True)
    outside.mkdir(parents=True, exist_ok=True)
    a = make_adata()
    a.write_h5ad(root / AD_H5, convert_strings_to_categoricals=False)
    for s in AD_STORES:
        write_anndata_zarr(a, root / s.name, s)
    write_anndata_zarr(a, root / V3_UNCONSOLIDATED, BY_NAME[V3_UNCONSOLIDATED], consolidate=False)
    shutil.copytree(root / V2, root / NO_ZMETA)
    (root / NO_ZMETA / ".zmetadata").unlink()

    for name in (*EDGE_WRITERS, "raw_csc"):
        if name == "raw_csc":
            obj, kwargs = make_raw_csc(), {}
        else:
            obj, kwargs = object_written_by(EDGE_WRITERS[name])
        obj.write_h5ad(root / f"{name}.h5ad", **kwargs)
        conv = kwargs.get("convert_strings_to_categoricals", True)
        for fmt in (2, 3):
            with zarr_settings(fmt, fmt == 3):
                ad.io.write_zarr(root / f"{name}_v{fmt}.zarr", obj,
                                 convert_strings_to_categoricals=conv)

    # mudata's writers update() the object they write (a `str` column
    # becomes `string`), so each MuData copy is written from a fresh object
    # built the same seeded way
    make_mdata().write_h5mu(root / MU_H5)
    for s in MU_STORES:
        with zarr_settings(s.zarr_format, s.sharded):
            md.write_zarr(root / s.name, make_mdata())

    t = make_tdata()
    t.write_h5td(root / TD_H5)
    for s in TD_STORES:
        # treedata opens a path as zarr v3 whatever the anndata setting
        # says; a group of the wanted format is written as it is
        with zarr_settings(s.zarr_format, s.sharded):
            t.write_zarr(zarr.open_group(root / s.name, mode="w", zarr_format=s.zarr_format))

    # the scratch store and the escape attempts
    shutil.copytree(root / V3_CHUNKED, root / SCRATCH)
    (outside / OUTSIDE_SECRET).write_bytes(SECRET_BYTES)
    os.symlink(outside / OUTSIDE_SECRET, root / SCRATCH / "leak")
    os.symlink(outside, root / SCRATCH / "leakdir", target_is_directory=True)
    os.symlink("zarr.json", root / SCRATCH / "alias.json")
    os.unlink(root / SCRATCH / "X/c/3/2")
    os.symlink("../0/0", root / SCRATCH / "X/c/3/2")   # a chunk key inside the store
    os.mkfifo(root / SCRATCH / "fifo")


# ------------------------------------------------------------ reading
def read_local(path: Path):
    """The object the library returns for a store (zarr or its twin)."""
    W._quiet()
    warnings.simplefilter("ignore")
    name = path.name
    if name.endswith(".h5mu"):
        return md.read_h5mu(path)
    if name.endswith(".h5td"):
        return td.read_h5td(path)
    if name.endswith(".h5ad"):
        return ad.read_h5ad(path)
    kind = BY_NAME[name].kind
    if kind == "mudata":
        return md.read_zarr(path)
    if kind == "treedata":
        return td.read_zarr(path)
    return ad.read_zarr(path)


def frame_encodings(path: Path, group: str) -> dict:
    """compare.frame_encodings for a zarr store: {"_index" | column:
    (encoding, na-value)} from the zarr attributes."""
    g = zarr.open_group(path, mode="r")[group]
    index_key = g.attrs["_index"]
    out = {}
    for key in g:
        attrs = g[key].attrs
        enc = attrs.get("encoding-type")
        na = attrs.get("na-value")
        name = "_index" if key == index_key else key
        out[name] = (str(enc) if enc is not None else None, str(na) if na is not None else None)
    return out


def arrays(path_or_group, prefix: str = ""):
    """Every array of a zarr group, recursively: {path: zarr.Array}."""
    g = path_or_group if isinstance(path_or_group, zarr.Group) else zarr.open_group(path_or_group, mode="r")
    out = {}
    for name, member in g.members():
        p = f"{prefix}{name}"
        if isinstance(member, zarr.Array):
            out[p] = member
        else:
            out.update(arrays(member, p + "/"))
    return out


def assert_arrays_equal(there: dict, here: dict) -> None:
    """Two {path: zarr.Array} maps (arrays()) hold the same paths, and each
    array the same dtype, shape and values (NaN equal to NaN)."""
    assert sorted(there) == sorted(here) and here, (sorted(there), sorted(here))
    for path, arr in here.items():
        exp = np.asarray(arr[...])
        got = np.asarray(there[path][...])
        assert got.dtype == exp.dtype and got.shape == exp.shape, path
        if exp.dtype.kind == "f":
            np.testing.assert_array_equal(got, exp, err_msg=path)
        else:
            assert (got == exp).all(), path


def zmetadata(path: Path) -> dict:
    return json.loads((path / ".zmetadata").read_text())
