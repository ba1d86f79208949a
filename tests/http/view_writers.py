"""Fixtures of the zarr view of HDF5 stores (tests/http/test_zarr_view.py):
stores written by anndata, mudata and treedata (default, gzip, gzip with
shuffle and LZF compression, CSR and CSC matrices, raw, nested uns, an
empty frame with no X, trees in obst and vart, names with slashes), and
h5py files with every dtype, layout and filter pipeline the view maps, plus
the types it leaves out."""

from __future__ import annotations

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

import writers as W

SEED = 1313


def make_adata(seed: int = SEED) -> ad.AnnData:
    """writers.make_frame_adata with every element kind around it."""
    rng = np.random.default_rng(seed)
    a = W.make_frame_adata(n_obs=50, n_vars=7, seed=seed)
    n, m = a.shape
    a.layers["counts"] = sp.random(n, m, density=0.3, format="csr", dtype=np.float32, random_state=1)
    a.layers["dense i32"] = rng.integers(0, 9, (n, m)).astype(np.int32)
    a.obsm["X_umap"] = rng.standard_normal((n, 2))
    a.obsm["X pca, é"] = rng.standard_normal((n, 3)).astype(np.float32)
    a.obsm["frame"] = pd.DataFrame({"x": rng.random(n), "k": pd.Categorical(rng.choice(["u", "v"], n))},
                                   index=a.obs_names)
    a.varm["loadings"] = rng.standard_normal((m, 3))
    a.obsp["distances"] = sp.random(n, n, density=0.1, format="csr", random_state=2)
    a.varp["corr"] = rng.random((m, m))
    a.uns["note"] = "hello é"
    a.uns["params"] = {"n_neighbors": 15, "method": "umap", "scale": 0.5, "flag": True,
                       "nested": {"deeper": {"list": np.arange(4), "strs": np.array(["a", "b c"], dtype=object)},
                                  "none": None}}
    a.uns["colors"] = np.array(["#ff0000", "#00ff00"], dtype=object)
    a.uns["empty dict"] = {}
    # scanpy's rank_genes_groups: rec-arrays (HDF5 compounds) of names and scores
    a.uns["rank_genes_groups"] = {
        "names": np.rec.fromarrays([np.array(["g1", "g2 é"]), np.array(["g3", "g4"])], names=["0", "1"]),
        "scores": np.rec.fromarrays([np.array([1.5, 0.25], dtype=np.float32),
                                     np.array([2.0, -1.0], dtype=np.float32)], names=["0", "1"])}
    raw = a.copy()
    raw.X = sp.csr_matrix(rng.random((n, m)).astype(np.float32))
    a.raw = raw
    return a


def write_anndata(root: Path) -> None:
    a = make_adata()
    a.write_h5ad(root / "ad.h5ad", convert_strings_to_categoricals=False)
    a.write_h5ad(root / "ad_gzip.h5ad", compression="gzip", convert_strings_to_categoricals=False)
    a.write_h5ad(root / "ad_lzf.h5ad", compression="lzf", convert_strings_to_categoricals=False)
    c = make_adata(SEED + 1)
    c.X = sp.csc_matrix(sp.random(*c.shape, density=0.4, format="csc", dtype=np.float64, random_state=3))
    c.write_h5ad(root / "ad_csc.h5ad")
    r = make_adata(SEED + 2)
    r.X = sp.random(*r.shape, density=0.4, format="csr", dtype=np.float32, random_state=4)
    r.write_h5ad(root / "ad_csr.h5ad")
    # an empty frame and no X
    e = ad.AnnData(obs=pd.DataFrame(index=pd.Index([], dtype=object)),
                   var=pd.DataFrame({"g": [1, 2]}, index=["a", "b"]))
    e.write_h5ad(root / "empty.h5ad")
    # every dataset but the scalars shuffled and deflated (anndata's writer
    # passes shuffle on to its scalars, which h5py refuses)
    a.write_h5ad(root / "ad_shuffle.h5ad", compression="gzip", convert_strings_to_categoricals=False)
    refilter(root / "ad_shuffle.h5ad", shuffle=True, compression="gzip")
    write_genes(root / "genes.h5ad")


# a CSR matrix whose CSC view (256 KiB chunks: 65536 values of data and
# indices) spans many chunks, each gene's column a slice of one or two
GENES_SHAPE = (12000, 100)


def write_genes(path: Path) -> None:
    x = sp.random(*GENES_SHAPE, density=0.5, format="csr", dtype=np.float32, random_state=5)
    ad.AnnData(X=x).write_h5ad(path)


def refilter(path: Path, **filters) -> None:
    """Rewrites every chunked dataset of path with the h5py filters given
    (same data, dtype, chunks and attributes)."""
    with h5py.File(path, "r+") as f:
        names = []
        f.visititems(lambda name, obj: names.append(name)
                     if isinstance(obj, h5py.Dataset) and obj.chunks else None)
        for name in names:
            old = f[name]
            data, dtype, chunks, attrs = old[()], old.dtype, old.chunks, dict(old.attrs)
            del f[name]
            new = f.create_dataset(name, data=data, dtype=dtype, chunks=chunks, **filters)
            new.attrs.update(attrs)


def write_mudata(root: Path) -> None:
    m = W.make_multi_mdata()
    m.write_h5mu(root / "mu.h5mu")
    m.write_h5mu(root / "mu_gzip.h5mu", compression="gzip")


# names zarr cannot take (a '/' separates a key's parts), which the view
# leaves out: a tree of obst and a node attribute of obst's tree1
SLASH_TREE = "lineage/v2"
SLASH_NODE_ATTR = "fate/score"


def write_treedata(root: Path) -> None:
    rng = np.random.default_rng(SEED + 3)
    cells = [f"c{i}" for i in range(10)]
    t1 = W._tree("n", cells, SEED)
    t1.nodes["n0"]["note"] = "a string"
    t1.nodes["c1"]["tags"] = [1, 2]
    t1.edges[next(iter(t1.edges))]["weird"] = None
    for i, n in enumerate(t1.nodes):
        t1.nodes[n][SLASH_NODE_ATTR] = i / 4
    t2 = nx.DiGraph()
    t2.add_edges_from([("root two", "c0"), ("root two", "c1")])
    t3 = nx.DiGraph()
    t3.add_edges_from([("r/3", "c2"), ("r/3", "c3")])
    genes = W._tree("g", ["0", "1", "2"], SEED + 1)
    genes = nx.relabel_nodes(genes, {n: "genes/root" for n, d in genes.in_degree() if d == 0})
    genes.nodes["0"]["name"] = "gene a/b"
    obs = pd.DataFrame({"clone": pd.Categorical(rng.choice(["A", "B"], 10)),
                        "path": [f"dir {i % 3}/sub/{i}" for i in range(10)],
                        "kind": pd.Categorical(rng.choice(["a/b", "c/d"], 10))}, index=cells)
    x = rng.random((10, 3)).astype(np.float32)
    t = td.TreeData(X=x, obs=obs, layers={"above half": (x > 0.5).astype(np.int64)},
                    obst={"tree1": t1, "second tree": t2, SLASH_TREE: t3}, vart={"genes": genes},
                    label="lineage", alignment="leaves", allow_overlap=True)
    t.write_h5td(root / "td.h5td")
    t.write_h5td(root / "td_lzf.h5td", compression="lzf")


# ------------------------------------------------------------ h5py files
def _bool_enum():
    return h5py.enum_dtype({"FALSE": 0, "TRUE": 1}, basetype="i1")


def write_exotic(path: Path) -> None:
    """Every dtype, layout and filter pipeline; groups and names the view
    must keep; types it leaves out (under `left_out/`)."""
    rng = np.random.default_rng(SEED)
    with h5py.File(path, "w") as f:
        f.attrs["encoding-type"] = "exotic"
        f.attrs["ints"] = np.array([1, 2, 3], dtype=np.int16)
        f.attrs["strs"] = np.array(["a", "é"], dtype=h5py.string_dtype())
        f.attrs["flag"] = np.bool_(True)
        f.attrs["empty"] = np.array([], dtype=np.float64)
        f.attrs["pi"] = 3.25
        t = f.create_group("types")
        for code in ("i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8"):
            info = np.iinfo(code)
            vals = np.array([info.min, info.max, 0, 1, 7, info.max // 3] * 5, dtype=code)
            for order in "<>":
                t.create_dataset(f"{order.replace('<', 'le').replace('>', 'be')}_{code}", data=vals.astype(order + code))
        for code in ("f2", "f4", "f8"):
            vals = np.array([0.5, -1.25, np.nan, np.inf, -np.inf, 1e-3, 65000] * 4).astype(code)
            for order in "<>":
                t.create_dataset(f"{order.replace('<', 'le').replace('>', 'be')}_{code}", data=vals.astype(order + code))
        t.create_dataset("bool", data=rng.random(33) < 0.5)
        t.create_dataset("bool_2d", data=rng.random((5, 6)) < 0.5)
        t.create_dataset("enum_i2", data=np.array([0, 1, 42, 1, 0], dtype=np.int16),
                         dtype=h5py.enum_dtype({"RED": 0, "GREEN": 1, "BLUE": 42}, basetype="i2"))
        t.create_dataset("fixed_ascii", data=np.array([b"ab", b"", b"cdefghi", b"x"], dtype="S7"))
        fu = t.create_dataset("fixed_utf8", shape=(2,), dtype=h5py.string_dtype("utf-8", 10))
        fu[0] = "é".encode()
        fu[1] = b"plain"
        t.create_dataset("vlen_ascii", data=np.array(["a", "", "bcd"], dtype=object),
                         dtype=h5py.string_dtype("ascii"))
        t.create_dataset("vlen_utf8", data=np.array(["é ü", "", "😀", "x,y"], dtype=object),
                         dtype=h5py.string_dtype())
        t.create_dataset("vlen_2d", data=np.array([[f"r{i}c{j}" for j in range(4)] for i in range(3)], dtype=object),
                         dtype=h5py.string_dtype())
        t.create_dataset("vlen_chunked", data=np.array([f"s{i}" * (i % 5) for i in range(20)], dtype=object),
                         dtype=h5py.string_dtype(), chunks=(6,), compression="gzip")
        s = f.create_group("scalars")
        s.create_dataset("int", data=np.int64(-5))
        s.create_dataset("float", data=np.float32(2.5))
        s.create_dataset("string", data="scalar é", dtype=h5py.string_dtype())
        s.create_dataset("bool", data=np.bool_(True))
        s.create_dataset("be_f8", data=np.array(1.5, dtype=">f8"))
        s.create_dataset("empty", data=h5py.Empty("f4"))
        lay = f.create_group("layouts")
        # compact: through the low-level API
        space = h5py.h5s.create_simple((12,))
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_layout(h5py.h5d.COMPACT)
        h5py.h5d.create(lay.id, b"compact", h5py.h5t.NATIVE_INT32, space, dcpl=dcpl).write(
            h5py.h5s.ALL, h5py.h5s.ALL, np.arange(12, dtype=np.int32))
        lay.create_dataset("contiguous_1d", data=rng.standard_normal(300000))
        lay.create_dataset("contiguous_2d", data=rng.standard_normal((1000, 300)).astype(np.float32))
        lay.create_dataset("contiguous_be", data=np.arange(200000, dtype=">i4"))
        lay.create_dataset("chunked", data=rng.integers(0, 1000, (100, 7)).astype(np.int32), chunks=(30, 4))
        lay.create_dataset("gzip", data=rng.integers(0, 50, (1000, 50)).astype(np.int16), chunks=(128, 16),
                           compression="gzip", compression_opts=4)
        lay.create_dataset("gzip_be", data=np.arange(5000, dtype=">f8"), chunks=(700,), compression="gzip")
        # random bytes do not deflate: HDF5 stores those chunks unfiltered
        lay.create_dataset("gzip_incompressible", data=rng.integers(0, 256, 4096).astype(np.uint8), chunks=(1024,),
                           compression="gzip")
        # a chunk written with deflate skipped (filter mask 1), as HDF5 does
        # for a chunk its optional filter could not shrink
        skip = lay.create_dataset("gzip_skipped", shape=(3000,), dtype=np.int32, chunks=(1000,),
                                  compression="gzip")
        skip[:] = np.arange(3000, dtype=np.int32) % 11
        skip.id.write_direct_chunk((1000,), (np.arange(1000, 2000, dtype=np.int32) * 3).tobytes(),
                                   filter_mask=1)
        lay.create_dataset("shuffle_gzip", data=rng.random((300, 9)), chunks=(64, 9), shuffle=True,
                           compression="gzip")
        lay.create_dataset("shuffle", data=rng.integers(0, 10**6, 1000), chunks=(256,), shuffle=True)
        lay.create_dataset("fletcher32", data=rng.random(777).astype(np.float32), chunks=(100,), fletcher32=True)
        lay.create_dataset("lzf", data=rng.integers(0, 5, (200, 30)).astype(np.int64), chunks=(50, 30),
                           compression="lzf")
        lay.create_dataset("lzf_shuffle", data=rng.random(500), chunks=(128,), compression="lzf", shuffle=True)
        lay.create_dataset("scaleoffset", data=rng.integers(0, 100, 300).astype(np.int32), chunks=(64,),
                           scaleoffset=0)
        lay.create_dataset("chunked_be_bool", data=rng.random(70) < 0.5, chunks=(16,))
        fill = lay.create_dataset("fill_int", shape=(10,), dtype=np.int32, chunks=(3,), fillvalue=-7)
        fill[0:3] = [1, 2, 3]
        nanfill = lay.create_dataset("fill_nan", shape=(4, 4), dtype=np.float64, chunks=(2, 2), fillvalue=np.nan)
        nanfill[0:2, 0:2] = 1.0
        lay.create_dataset("zero_len", shape=(0,), dtype=np.float32)
        lay.create_dataset("zero_rows", shape=(0, 3), maxshape=(None, 3), dtype=np.int64, chunks=(4, 3))
        lay["soft link"] = h5py.SoftLink("/layouts/chunked")
        names = f.create_group("names with space, comma é")
        names.create_dataset("a b,c ü", data=np.arange(3))
        names.create_group("empty group")
        names.create_dataset(".hidden", data=np.arange(2))  # no zarr name: left out
        out = f.create_group("left_out")
        out.create_dataset("compound", data=np.array([(1, None)], dtype=[("a", "i4"), ("r", h5py.ref_dtype)]))
        # records of plain fields, but in two dimensions: no zarr v2 structured array
        out.create_dataset("compound_2d", data=np.zeros((2, 3), dtype=[("a", "<i4"), ("b", "<f8")]))
        f["types"].create_dataset("records", data=np.array([(1, 2.5, b"ab"), (-3, 0.0, b"xyz")],
                                                           dtype=[("a", "<i4"), ("b", "<f8"), ("s", "S3")]))
        out.create_dataset("opaque", data=np.void(b"\x01\x02\x03"))
        ref = out.create_dataset("reference", shape=(2,), dtype=h5py.ref_dtype)
        ref[0] = f["types"].ref
        out.create_dataset("kept", data=np.arange(4))


def write_many_chunks(path: Path) -> None:
    """More chunks than libhdf5 lists cheaply (2048: the table is made by
    looking chunks up by their coordinates), and more than any table takes
    (65536: chunks come through libhdf5 one at a time); a userblock before
    the HDF5 data, as MuData writes, so chunk addresses must be offset."""
    with h5py.File(path, "w", userblock_size=512) as f:
        f.create_dataset("many", data=np.arange(2500, dtype=np.int16), chunks=(1,))
        f.create_dataset("many_gzip", data=np.arange(2500, dtype=np.int32) % 7, chunks=(1,), compression="gzip")
        sparse = f.create_dataset("many_unwritten", shape=(3000,), dtype=np.int32, chunks=(1,), fillvalue=9)
        sparse[100:200] = np.arange(100, 200)
        f.create_dataset("beyond", data=np.arange(70000, dtype=np.int32) % 1000, chunks=(1,))


# A filter id no library registers (the range of ids for testing,
# https://support.hdfgroup.org/services/contributions.html).
UNKNOWN_FILTER = 32700


def write_broken(path: Path) -> None:
    """An LZF dataset, a shuffled one, a Fletcher-32 one and a scale-offset
    one whose first chunk is overwritten with garbage after the file was
    written, and one whose chunks went through a filter nobody knows."""
    rng = np.random.default_rng(SEED)
    values = np.arange(400) % 5 * 1.5  # compressible: LZF keeps it compressed
    with h5py.File(path, "w") as f:
        f.create_dataset("lzf", data=values, chunks=(100,), compression="lzf")
        f.create_dataset("shuffle_gzip", data=values, chunks=(100,), shuffle=True, compression="gzip")
        f.create_dataset("fletcher", data=values, chunks=(100,), fletcher32=True)
        f.create_dataset("scaleoffset", data=np.arange(400, dtype=np.int32) % 97, chunks=(100,), scaleoffset=0)
        f.create_dataset("fine", data=np.arange(10))
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_chunk((100,))
        dcpl.set_filter(UNKNOWN_FILTER, h5py.h5z.FLAG_OPTIONAL)
        unknown = h5py.h5d.create(f.id, b"unknown_filter", h5py.h5t.STD_I32LE,
                                  h5py.h5s.create_simple((200,)), dcpl=dcpl)
        for i in range(2):  # as if the filter had run (filter mask 0)
            unknown.write_direct_chunk((i * 100,), np.arange(i * 100, i * 100 + 100, dtype="<i4").tobytes())
        offsets = {k: (f[k].id.get_chunk_info(0).byte_offset, f[k].id.get_chunk_info(0).size)
                   for k in ("lzf", "shuffle_gzip", "fletcher", "scaleoffset")}
        assert all(f[k].id.get_chunk_info(0).filter_mask == 0 for k in offsets)
    with open(path, "r+b") as fh:
        for off, size in offsets.values():
            fh.seek(off)
            fh.write(bytes(rng.integers(0, 256, size, dtype=np.uint8)))


def write_bad_trees(src: Path, path: Path) -> None:
    """A TreeData whose obst JSON does not parse."""
    import shutil
    shutil.copyfile(src, path)
    with h5py.File(path, "r+") as f:
        attrs = dict(f["obst"].attrs)
        del f["obst"]
        f.create_dataset("obst", data="{not json", dtype=h5py.string_dtype())
        f["obst"].attrs.update(attrs)


def write_all(root: Path) -> None:
    warnings.filterwarnings("ignore")
    root.mkdir(parents=True, exist_ok=True)
    write_anndata(root)
    write_mudata(root)
    write_treedata(root)
    write_bad_trees(root / "td.h5td", root / "td_bad_trees.h5td")
    write_exotic(root / "exotic.h5")
    write_many_chunks(root / "many_chunks.h5")
    write_broken(root / "broken.h5")
