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

import json

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


# ------------------------------------------------------------ MuData
def _df07(g: h5py.Group, index, columns: dict) -> None:
    """A data frame as anndata 0.7.x wrote it (dataframe 0.1.0): a categorical
    column is its codes with a `categories` object reference to
    __categories/{column}, which carries `ordered`."""
    vstr = h5py.string_dtype()
    g.attrs["encoding-type"] = "dataframe"
    g.attrs["encoding-version"] = "0.1.0"
    g.attrs["_index"] = "_index"
    g.attrs["column-order"] = (np.array(list(columns), dtype=object) if columns
                               else np.array([], dtype=np.float64))
    g.create_dataset("_index", data=np.array(index, dtype=object), dtype=vstr)
    for name, value in columns.items():
        if isinstance(value, tuple):  # (codes, categories, ordered)
            codes, cats, ordered = value
            c = g.require_group("__categories").create_dataset(
                name, data=np.array(cats, dtype=object), dtype=vstr)
            c.attrs["ordered"] = ordered
            d = g.create_dataset(name, data=np.asarray(codes, dtype=np.int8))
            d.attrs["categories"] = c.ref
        elif np.asarray(value).dtype.kind in "OU":
            g.create_dataset(name, data=np.array(value, dtype=object), dtype=vstr)
        else:
            g.create_dataset(name, data=value)


def _csr07(g: h5py.Group, name: str, m) -> None:
    s = g.create_group(name)
    s.attrs["encoding-type"] = f"{m.format}_matrix"
    s.attrs["encoding-version"] = "0.1.0"
    s.attrs["shape"] = np.array(m.shape)
    for part in ("data", "indices", "indptr"):
        s.create_dataset(part, data=getattr(m, part), maxshape=(None,))


def write_mudata_01(path) -> None:
    """mudata 0.1.x (`_write_h5mu` with anndata 0.7's write_attribute): the
    512-byte userblock, root MuData 0.1.0, modalities with encoding-type
    "AnnData" 0.1.0, no mod-order, no axis, 0.7 data frames, raw as a
    "raw" group, uint32 obsmap/varmap."""
    rng = np.random.default_rng(11)
    cells = [f"c{i:02d}" for i in range(30)]
    rna_cells, atac_cells = cells[:20], cells[8:]
    genes, peaks = [f"gene{j}" for j in range(6)], [f"chr1:{j}00-{j}99" for j in range(4)]
    with h5py.File(path, "w", userblock_size=512) as f:
        _df07(f.create_group("obs"), cells,
              {"sample": (rng.integers(0, 2, 30), ["s1", "s2"], False)})
        _df07(f.create_group("var"), genes + peaks, {})
        for k in ("obsm", "varm", "obsp", "varp", "uns"):
            f.create_group(k)
        om, vm = f.create_group("obsmap"), f.create_group("varmap")
        mod = f.create_group("mod")
        for name, obs_names, var_names in (("rna", rna_cells, genes), ("atac", atac_cells, peaks)):
            g = mod.create_group(name)
            x = _random_sparse(rng, (len(obs_names), len(var_names)), 0.5, np.float32)
            if name == "rna":
                _csr07(g, "X", x)
                raw = g.create_group("raw")
                raw.attrs["encoding-type"] = "raw"
                raw.attrs["encoding-version"] = "0.1.0"
                raw.attrs["shape"] = np.array([len(obs_names), len(var_names) + 2])
                raw.create_dataset("X", data=rng.random((len(obs_names), len(var_names) + 2)))
                _df07(raw.create_group("var"), var_names + ["extra1", "extra2"],
                      {"mean": rng.random(len(var_names) + 2)})
                raw.create_group("varm")
            else:
                g.create_dataset("X", data=x.toarray())
            _df07(g.create_group("obs"), obs_names, {
                "cluster": (rng.integers(-1, 3, len(obs_names)), ["a", "b", "c"], True),
                "n_counts": rng.random(len(obs_names)).astype(np.float32),
                "label": [f"l{i % 4}" for i in range(len(obs_names))],
            })
            _df07(g.create_group("var"), var_names, {"highly_variable": rng.random(len(var_names)) < 0.5})
            g.create_group("obsm").create_dataset("X_pca", data=rng.random((len(obs_names), 3)))
            for k in ("varm", "obsp", "varp", "uns"):
                g.create_group(k)
            g.create_group("layers").create_dataset("counts", data=x.toarray().astype(np.int32))
            g.attrs["encoding-type"] = "AnnData"
            g.attrs["encoding-version"] = "0.1.0"
            g.attrs["encoder"] = "mudata"
            g.attrs["encoder-version"] = "0.1.1"
            om.create_dataset(name, data=np.array(
                [obs_names.index(c) + 1 if c in obs_names else 0 for c in cells], dtype=np.uint32))
            vm.create_dataset(name, data=np.array(
                [var_names.index(v) + 1 if v in var_names else 0 for v in genes + peaks],
                dtype=np.uint32))
        f.attrs["encoding-type"] = "MuData"
        f.attrs["encoding-version"] = "0.1.0"
        f.attrs["encoder"] = "mudata"
        f.attrs["encoder-version"] = "0.1.1"
    with open(path, "r+b") as fh:
        head = b"MuData (format-version=0.1.0;creator=mudata;creator-version=0.1.1)"
        fh.write(head + b"\0" * (512 - len(head)))


def modern_encodings_copy(src, dst) -> None:
    """A copy of a mudata 0.1 file whose modalities say "anndata", as
    today's mudata needs to read them (it has no reader for "AnnData")."""
    import shutil
    shutil.copyfile(src, dst)
    with h5py.File(dst, "r+") as f:
        for name in f["mod"]:
            f["mod"][name].attrs["encoding-type"] = "anndata"


def write_mudata_no_axis(path) -> None:
    """A file of today's mudata without `axis` and `mod-order` (as files of
    mudata before 0.2 and other writers have): axis 0, modalities in name
    order."""
    import writers
    writers.make_multi_mdata().write_h5mu(path)
    with h5py.File(path, "r+") as f:
        del f.attrs["axis"]
        del f["mod"].attrs["mod-order"]


# ------------------------------------------------------------ TreeData
def _tree_doc(trees) -> dict:
    """{key: {"edges", "nodes"}} as treedata's digraph_to_dict wrote them."""
    import networkx as nx
    return {k: {"edges": nx.to_dict_of_dicts(g), "nodes": dict(g.nodes(data=True))}
            for k, g in trees.items()}


def _small_treedata():
    import networkx as nx
    import pandas as pd
    import treedata as td
    rng = np.random.default_rng(17)
    cells = [f"L{i}" for i in range(8)]
    genes = [f"G{j}" for j in range(4)]

    def tree(prefix, leaves):
        g = nx.DiGraph()
        g.add_node(f"{prefix}root", depth=0)
        for k, half in enumerate((leaves[: len(leaves) // 2], leaves[len(leaves) // 2:])):
            mid = f"{prefix}n{k}"
            g.add_edge(f"{prefix}root", mid, length=0.5 + k)
            g.nodes[mid]["depth"] = 1
            for leaf in half:
                g.add_edge(mid, leaf, length=float(np.round(rng.random(), 3)))
                g.nodes[leaf]["depth"] = 2
                g.nodes[leaf]["clone"] = f"c{k}"
        return g

    obs = pd.DataFrame({"n": np.arange(8)}, index=cells)
    t = td.TreeData(X=rng.random((8, 4)).astype(np.float32), obs=obs,
                    var=pd.DataFrame(index=genes),
                    obst={"t1": tree("a", cells[:6]), "t2": tree("b", cells[6:])},
                    vart={"v1": tree("g", genes)}, label="tree", allow_overlap=False)
    return t


def _drop_null_elements(g) -> None:
    """anndata 0.12+ writes a missing raw (and other None) as a `null`
    element; the writers of these layouts wrote nothing."""
    for k in list(g.keys()):
        if g[k].attrs.get("encoding-type") == "null":
            del g[k]


def _zarr2_string(g, name: str, text: str, attrs: dict | None = None) -> None:
    """A string scalar as zarr-python 2 wrote one: a 0-d fixed-length
    unicode (<U{n}) array (anndata <= 0.11 added the string encoding)."""
    arr = g.create_array(name, shape=(), dtype=f"<U{max(len(text), 1)}", compressors=None)
    arr[()] = text
    if attrs:
        arr.attrs.update(attrs)


def write_treedata_000_h5(path) -> None:
    """treedata 0.0.x: an AnnData (write_h5ad) with the trees and settings in
    one JSON string, raw.treedata (h5py: a variable-length string)."""
    import anndata as ad
    t = _small_treedata()
    ad.AnnData(X=t.X, obs=t.obs, var=t.var).write_h5ad(path)
    doc = {"obst": _tree_doc(t.obst), "vart": _tree_doc(t.vart), "label": "tree",
           "allow_overlap": False}
    with h5py.File(path, "a") as f:
        _drop_null_elements(f)
        f.create_dataset("raw.treedata", data=json.dumps(doc))


def write_treedata_000_zarr(path) -> None:
    """treedata 0.0.x's write_zarr (anndata's zarr v2 store, raw.treedata a
    fixed-length unicode scalar); its JSON without a label (read as None)
    and with an integer allow_overlap."""
    import anndata as ad
    import zarr
    t = _small_treedata()
    g = zarr.open_group(path, mode="w", zarr_format=2)
    ad.io.write_elem(g, "/", ad.AnnData(X=t.X, obs=t.obs, var=t.var))
    _drop_null_elements(g)
    _zarr2_string(g, "raw.treedata", json.dumps({"obst": _tree_doc(t.obst), "vart": {},
                                                 "allow_overlap": 1}))


def write_treedata_01_h5(path) -> None:
    """treedata 0.1.x: root encoding-type "anndata", obst/vart as JSON
    strings, label and allow_overlap elements, no alignment."""
    t = _small_treedata()
    t.write_h5td(path)
    with h5py.File(path, "r+") as f:
        f.attrs["encoding-type"] = "anndata"
        del f["alignment"]


def write_treedata_02_zarr(path) -> None:
    """treedata 0.2.x's write_zarr under zarr-python 2: a zarr v2 store,
    obst/vart as JSON string scalars (not the columnar groups of 0.3),
    alignment "subset"; and no label element (read as treedata's default)."""
    import anndata as ad
    import zarr
    t = _small_treedata()
    g = zarr.open_group(path, mode="w", zarr_format=2)
    ad.io.write_elem(g, "/", ad.AnnData(X=t.X, obs=t.obs, var=t.var))
    _drop_null_elements(g)
    enc = {"encoding-type": "string", "encoding-version": "0.2.0"}
    for axis, trees in (("obst", t.obst), ("vart", t.vart)):
        _zarr2_string(g, axis, json.dumps(_tree_doc(trees)), enc)
    _zarr2_string(g, "alignment", "subset", enc)
    ov = g.create_array("allow_overlap", shape=(), dtype=bool, compressors=None)
    ov[()] = False
    ov.attrs.update({"encoding-type": "numeric-scalar", "encoding-version": "0.2.0"})
    g.attrs.update({"encoding-type": "treedata", "encoding-version": "0.1.0"})


TREEDATA_LAYOUTS = {
    "treedata_000.h5ad": write_treedata_000_h5,
    "treedata_000.zarr": write_treedata_000_zarr,
    "treedata_01.h5ad": write_treedata_01_h5,
    "treedata_02.zarr": write_treedata_02_zarr,
}


# ------------------------------------------------------------ anndata 0.7 zarr
def _z2(g, name, data, **attrs):
    """An array as zarr-python 2 under anndata 0.7 wrote it: Blosc lz4,
    strings as object arrays with the vlen-utf8 filter, no encoding
    attributes on plain arrays."""
    import numcodecs
    data = np.asarray(data)
    kw = {"compressors": numcodecs.Blosc(cname="lz4", clevel=5, shuffle=1)}
    if data.dtype.kind in "OU" and data.ndim:  # scalars stay fixed-length <U
        data = data.astype(object)
        kw["dtype"] = str
    arr = g.create_array(name, shape=data.shape, chunks=data.shape,
                         dtype=kw.pop("dtype", data.dtype), **kw)
    arr[...] = data
    if attrs:
        arr.attrs.update(attrs)
    return arr


def _z2_frame(g, name, index, columns: dict):
    """dataframe 0.1.0 in zarr: a categorical's `categories` attribute is
    the path of its categories relative to the frame."""
    df = g.create_group(name)
    _z2(df, "_index", index)
    cats = None
    for col, value in columns.items():
        if isinstance(value, tuple):
            codes, categories, ordered = value
            cats = cats or df.create_group("__categories")
            _z2(cats, col, categories, ordered=ordered)
            _z2(df, col, np.asarray(codes, dtype=np.int8), categories=f"__categories/{col}")
        else:
            _z2(df, col, value)
    df.attrs.update({"_index": "_index", "column-order": list(columns),
                     "encoding-type": "dataframe", "encoding-version": "0.1.0"})


def _z2_sparse(g, name, m):
    s = g.create_group(name)
    for part in ("data", "indices", "indptr"):
        _z2(s, part, getattr(m, part))
    s.attrs.update({"encoding-type": f"{m.format}_matrix", "encoding-version": "0.1.0",
                    "shape": list(m.shape)})


def write_anndata_07_zarr(path) -> None:
    """anndata 0.7.x's write_zarr (zarr v2; the v0.7.0 / v0.7.8 archives'
    layout): no root attributes, dataframe 0.1.0, csr_matrix groups, a
    raw group, plain arrays and dicts without encoding attributes."""
    import zarr
    rng = np.random.default_rng(7)
    n_obs, n_var, n_raw = 30, 12, 16
    cells = [f"cell_{i}" for i in range(n_obs)]
    genes = [f"gene_{j}" for j in range(n_raw)]
    g = zarr.open_group(path, mode="w", zarr_format=2)
    _z2_sparse(g, "X", _random_sparse(rng, (n_obs, n_var), 0.3, np.float32))
    _z2_frame(g, "obs", cells, {
        "cat": (rng.integers(-1, 3, n_obs), ["a", "b", "c"], False),
        "cat_ordered": (rng.integers(0, 2, n_obs), ["lo", "hi"], True),
        "int64": rng.integers(0, 100, n_obs),
        "float64": rng.random(n_obs),
        "uint8": rng.integers(0, 9, n_obs).astype(np.uint8),
    })
    _z2_frame(g, "var", genes[:n_var], {"var_cat": (rng.integers(0, 2, n_var), ["x", "y"], False)})
    obsm = g.create_group("obsm")
    _z2(obsm, "X_umap", rng.random((n_obs, 2)).astype(np.float32))
    _z2_sparse(obsm, "sparse", _random_sparse(rng, (n_obs, 5), 0.4, np.float64))
    _z2_frame(obsm, "df", cells, {"score": rng.random(n_obs)})
    g.create_group("varm")
    obsp = g.create_group("obsp")
    _z2_sparse(obsp, "distances", _random_sparse(rng, (n_obs, n_obs), 0.1, np.float64))
    layers = g.create_group("layers")
    _z2(layers, "counts", rng.integers(0, 7, (n_obs, n_var)).astype(np.int32))
    raw = g.create_group("raw")
    raw.attrs.update({"encoding-type": "raw", "encoding-version": "0.1.0",
                      "shape": [n_obs, n_raw]})
    _z2_sparse(raw, "X", _random_sparse(rng, (n_obs, n_raw), 0.3, np.float32))
    _z2_frame(raw, "var", genes, {"mean": rng.random(n_raw)})
    _z2(raw.create_group("varm"), "PCs", rng.random((n_raw, 3)))
    uns = g.create_group("uns")
    _z2(uns, "colors", ["#aa0000", "#00bb00", "#0000cc"])
    _z2(uns, "n_pcs", np.array([50]))
    params = uns.create_group("neighbors").create_group("params")
    _z2(params, "n_neighbors", np.array(15))
    _z2(params, "method", np.array("umap"))
    # a rec-array as 0.7 wrote them (_to_fixed_length_strings: <U fields),
    # e.g. scanpy's rank_genes_groups; one field big-endian
    rec = np.zeros(6, dtype=[("CD4+ T", "<U8"), ("B/plasma", "<U8"), ("score", ">f4"),
                             ("rank", "<i2"), ("ok", "|b1")])
    rec["CD4+ T"] = [f"g{i}" for i in range(6)]
    rec["B/plasma"] = [f"gène{i}" for i in range(6)]
    rec["score"] = rng.random(6).astype(np.float32)
    rec["rank"] = np.arange(6)
    rec["ok"] = np.arange(6) % 2 == 0
    rgg = uns.create_group("rank_genes_groups")
    _z2(rgg, "names", rec)
