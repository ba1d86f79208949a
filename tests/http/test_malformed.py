"""A seeded corpus of malformed stores, every applicable route on each:
no crash, no hang, every answer a 2xx or a problem+json 4xx (503 with
Retry-After allowed), the server's peak memory under 300 MB, and /healthz
plus an unrelated valid store answering correctly throughout.

The stores are made from valid ones: the committed examples (written by
anndata, mudata and treedata; see examples/make_examples.py), blood.h5ad
written again by anndata as zarr v2, and zip stores of the zarr ones
(stored and deflated).  HDF5 files and zips are truncated, bit-flipped and
zeroed as bytes; zarr v3 (sharded), v2 and TreeData zarr stores get lying
metadata (huge, negative and zero shapes and chunks, unknown dtypes and
codecs), damaged chunks, a chunk that is a directory, garbage, groups
nested deep and symlinked in a cycle; every source but the zips gets lying
AnnData encodings written with h5py / zarr (categorical codes out of range,
non-monotone indptr, indices out of range, wrong lengths, link cycles); the
TreeData ones get garbage, deep, cyclic and huge trees.  Routes: the
native ones, the zarr view's metadata and chunk keys (zarr/ and zarr-csc/),
h5grove's on HDF5 files and Taxonium's on trees.  A 2xx answer about an
element a mutation left alone must equal the source's.  CELLAR_CORPUS=full
makes the whole corpus (make test-corpus); the default is a seeded subset
that covers every kind; CELLAR_CORPUS_MEMORY_TRACE=FILE writes the
server's resident and peak memory after each store, to find what grows.  Under the sanitizer build (make test runs this
file under both builds) a sanitizer report in the log is a failure.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import time
import warnings
import zipfile
from pathlib import Path

import anndata as ad
import h5py
import numpy as np
import pytest
import requests
import zarr

from conftest import REPO

EXAMPLES = REPO / "examples"
HDF5_SOURCES = ["blood.h5ad", "lineage.h5td", "pbmc_small.h5mu"]
# blood.zarr: AnnData, zarr v3 sharded; lineage.zarr: TreeData, zarr v3
# (columnar trees); blood_v2.zarr: blood.h5ad written by anndata as zarr v2
ZARR_SOURCES = ["blood.zarr", "lineage.zarr", "blood_v2.zarr"]
# zip stores of the zarr ones, mutated as bytes like the HDF5 files
ZIP_SOURCES = {"blood_stored.zarr.zip": ("blood.zarr", zipfile.ZIP_STORED),
               "blood_v2_deflated.zarr.zip": ("blood_v2.zarr", zipfile.ZIP_DEFLATED),
               "lineage_deflated.zarr.zip": ("lineage.zarr", zipfile.ZIP_DEFLATED)}
ENCODING_SOURCES = ["blood.h5ad", "blood.zarr", "blood_v2.zarr", "pbmc_small.h5mu",
                    "lineage.h5td", "lineage.zarr"]
TREE_SOURCES = ["lineage.h5td", "lineage.zarr"]
FULL = os.environ.get("CELLAR_CORPUS") == "full"
N_HDF5 = 600 if FULL else 72
N_ZARR = 400 if FULL else 60
N_ZIP = 105 if FULL else 21
N_ENCODING = 180 if FULL else 24
N_TREE = 120 if FULL else 15
REQUEST_TIMEOUT = 30  # seconds: a request not answered by then is a hang


# ------------------------------------------------------------ the sources
def make_sources(dest: Path) -> Path:
    """The committed examples, blood_v2.zarr and the zips, under dest."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in HDF5_SOURCES:
        shutil.copy(EXAMPLES / name, dest / name)
    for name in ("blood.zarr", "lineage.zarr"):
        shutil.copytree(EXAMPLES / name, dest / name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with ad.settings.override(zarr_write_format=2):
            ad.read_h5ad(EXAMPLES / "blood.h5ad").write_zarr(dest / "blood_v2.zarr")
    for name, (src, how) in ZIP_SOURCES.items():
        with zipfile.ZipFile(dest / name, "w", how) as zf:
            for f in sorted((dest / src).rglob("*")):
                if f.is_file():
                    zf.write(f, f.relative_to(dest / src).as_posix())
    return dest


# ------------------------------------------------------------ bytes
def _mutate_bytes(d: bytearray, rnd: random.Random, kind: str, seed: int) -> bytearray:
    if kind == "flip":
        for _ in range(rnd.randint(1, 40)):
            i = rnd.randrange(len(d))
            d[i] ^= 1 << rnd.randrange(8)
    elif kind == "zero":
        a = rnd.randrange(len(d))
        b = min(len(d), a + rnd.choice([8, 64, 512, 4096]))
        d[a:b] = bytes(b - a)
    elif kind == "zero_big":
        a = rnd.randrange(len(d) // 2)
        d[a:] = bytes(len(d) - a)
    elif kind == "garbage":
        d = bytearray(rnd.randbytes(rnd.choice([0, 1, 8, 512, 4096, 70000])))
        if seed % 12 == 5:
            d[:8] = b"\x89HDF\r\n\x1a\n"  # a signature and nothing behind it
    else:
        d = d[: rnd.randrange(len(d))]
    return d


def mutate_hdf5(seed: int) -> tuple[str, str, bytes]:
    rnd = random.Random(seed)
    src = HDF5_SOURCES[seed % len(HDF5_SOURCES)]
    d = bytearray((EXAMPLES / src).read_bytes())
    kind = ["flip", "zero", "trunc", "flip", "zero_big", "garbage"][seed % 6]
    return src, kind, bytes(_mutate_bytes(d, rnd, kind, seed))


def mutate_zip(seed: int, sources: Path) -> tuple[str, str, bytes]:
    rnd = random.Random(20_000 + seed)
    names = sorted(ZIP_SOURCES)
    src = names[seed % len(names)]
    d = bytearray((sources / src).read_bytes())
    kind = ["flip", "zero", "trunc", "flip", "zero_big", "garbage", "flip_tail"][seed % 7]
    if kind == "flip_tail":
        # the central directory and the end records, where the zip's own
        # offsets and sizes are
        for _ in range(rnd.randint(1, 6)):
            i = len(d) - 1 - rnd.randrange(min(len(d), 1024))
            d[i] ^= 1 << rnd.randrange(8)
    else:
        d = _mutate_bytes(d, rnd, kind, seed + 1)
    return src, kind, bytes(d)


# ------------------------------------------------------------ zarr metadata
def _json_files(store: Path) -> list[Path]:
    return sorted(p for p in store.rglob("*") if p.name in ("zarr.json", ".zarray", ".zattrs"))


def _chunk_files(store: Path) -> list[Path]:
    meta = {"zarr.json", ".zarray", ".zattrs", ".zgroup", ".zmetadata"}
    return sorted(p for p in store.rglob("*") if p.is_file() and p.name not in meta)


LIES = [
    ("shape", [2**62, 3]), ("shape", [-5]), ("shape", [0]), ("shape", [10**12, 10**12]),
    ("chunks", [0]), ("chunks", [2**40]), ("chunks", [-1, 2]),
    ("dtype", "<q9"), ("dtype", "|O"), ("data_type", "complex512"), ("data_type", "int8"),
    ("codecs", [{"name": "no-such-codec"}]), ("compressor", {"id": "lzma9"}),
    ("codecs", [{"name": "sharding_indexed", "configuration": {"chunk_shape": [1 << 30],
                                                                "codecs": [{"name": "bytes"}]}}]),
    ("fill_value", "not a number"), ("zarr_format", 7), ("node_type", "banana"),
    ("attributes", {"encoding-type": "csr_matrix", "encoding-version": "0.1.0", "shape": [9, 9]}),
    ("attributes", {"encoding-type": "categorical", "encoding-version": "0.2.0"}),
    ("attributes", {"encoding-type": "dataframe", "encoding-version": "0.2.0",
                    "_index": "nope", "column-order": ["a", "b"]}),
]


def strip_consolidated(store: Path) -> None:
    """So that the mutated per-node metadata is what is read."""
    root = store / "zarr.json"
    if root.exists():
        doc = json.loads(root.read_text())
        doc.pop("consolidated_metadata", None)
        root.write_text(json.dumps(doc))
    (store / ".zmetadata").unlink(missing_ok=True)


def _group_doc(store: Path) -> tuple[str, str]:
    """The name and text of a group's metadata file in store's format."""
    if (store / "zarr.json").exists():
        return "zarr.json", json.dumps({"zarr_format": 3, "node_type": "group",
                                        "attributes": {"encoding-type": "dict",
                                                       "encoding-version": "0.1.0"}})
    return ".zgroup", json.dumps({"zarr_format": 2})


def mutate_zarr(seed: int, dest: Path, sources: Path = EXAMPLES) -> tuple[str, str]:
    rnd = random.Random(10_000 + seed)
    src = ZARR_SOURCES[seed % len(ZARR_SOURCES)]
    shutil.copytree(sources / src, dest)
    kinds = ["lie", "lie", "chunk_flip", "chunk_trunc", "chunk_dir", "json_garbage",
             "lie_consolidated", "deep_groups", "group_cycle", "lie"]
    kind = kinds[seed % len(kinds)]
    if kind != "lie_consolidated":
        strip_consolidated(dest)
    if kind in ("lie", "lie_consolidated"):
        target = rnd.choice(_json_files(dest))
        doc = json.loads(target.read_text() or "{}")
        key, value = LIES[rnd.randrange(len(LIES))]
        if target.name == ".zattrs" and key != "attributes":
            doc[key] = value
        elif key == "attributes" and target.name == "zarr.json":
            doc["attributes"] = value
        else:
            doc[key] = value
        target.write_text(json.dumps(doc))
        if kind == "lie_consolidated":
            meta = None
            if (dest / "zarr.json").exists():
                root = json.loads((dest / "zarr.json").read_text())
                meta, where = root.get("consolidated_metadata", {}).get("metadata", {}), "zarr.json"
            elif (dest / ".zmetadata").exists():
                root = json.loads((dest / ".zmetadata").read_text())
                meta, where = root.get("metadata", {}), ".zmetadata"
            if meta:
                k = rnd.choice(sorted(meta))
                meta[k][key] = value
                (dest / where).write_text(json.dumps(root))
    elif kind in ("chunk_flip", "chunk_trunc", "chunk_dir"):
        chunk = rnd.choice(_chunk_files(dest))
        data = bytearray(chunk.read_bytes())
        if kind == "chunk_flip" and data:
            for _ in range(rnd.randint(1, 10)):
                i = rnd.randrange(len(data))
                data[i] ^= 1 << rnd.randrange(8)
            chunk.write_bytes(data)
        elif kind == "chunk_trunc":
            chunk.write_bytes(data[: rnd.randrange(len(data) + 1)])
        else:
            chunk.unlink()
            chunk.mkdir()
    elif kind == "deep_groups":
        # uns/g/g/.../g, each a dict group, as deep as a path allows
        fname, text = _group_doc(dest)
        at = dest / "uns"
        for _ in range(rnd.choice([64, 300, 1000] if FULL else [64, 300])):
            at = at / "g"
            try:
                at.mkdir()
                (at / fname).write_text(text)
            except OSError:  # ENAMETOOLONG
                break
    elif kind == "group_cycle":
        # a group that is a symlink to its parent, or to the store's root,
        # or to itself
        how = rnd.choice(["parent", "root", "self"])
        link = dest / "uns" / "loop"
        link.symlink_to({"parent": ".", "root": "..", "self": "loop"}[how])
        kind = f"group_cycle_{how}"
    else:
        target = rnd.choice(_json_files(dest))
        text = target.read_bytes()
        target.write_bytes(text[: rnd.randrange(len(text) + 1)] + rnd.randbytes(rnd.randrange(8)))
    return src, kind


# ------------------------------------------------------------ AnnData encodings
class Editor:
    """One element tree of an HDF5 file (h5py) or a zarr store (zarr),
    arrays replaced with anndata's write_elem, their attributes kept."""

    def __init__(self, path: Path, consolidate: bool = True):
        self.path = path
        self.consolidate = consolidate
        self.zarr = path.suffix == ".zarr"
        if self.zarr:
            self.root = zarr.open_group(path, mode="r+", use_consolidated=False)
        else:
            self.root = h5py.File(path, "r+")

    def close(self) -> None:
        if self.zarr and self.consolidate:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                zarr.consolidate_metadata(self.path)
        elif self.zarr:
            strip_consolidated(self.path)
        else:
            self.root.close()

    def elements(self) -> dict[str, object]:
        out = {}
        if self.zarr:
            for k, v in self.root.members(max_depth=None):
                out[k] = v
        else:
            self.root.visititems(lambda k, v: out.__setitem__(k, v))
        return out

    def read(self, path: str) -> np.ndarray:
        a = self.root[path][()] if not self.zarr else self.root[path][...]
        if a.dtype.kind in "OT" or (not self.zarr and h5py.check_string_dtype(self.root[path].dtype)):
            a = np.array([x.decode() if isinstance(x, bytes) else str(x) for x in np.ravel(a)],
                         dtype=object).reshape(np.shape(a))
        return a

    def write(self, path: str, value: np.ndarray) -> None:
        attrs = dict(self.root[path].attrs) if path in self.root else {}
        parent, _, name = path.rpartition("/")
        if path in self.root:
            del self.root[path]
        group = self.root[parent] if parent else self.root
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ad.io.write_elem(group, name, value)
        self.root[path].attrs.update(attrs)


def _is(node, kind: str) -> bool:
    return node.attrs.get("encoding-type") == kind


_TARGETS: dict[str, dict[str, list[str]]] = {}


def _encoding_targets(ed: Editor, src: str) -> dict[str, list[str]]:
    """The elements of src (ed's source, the same tree) lies can go to."""
    if src in _TARGETS:
        return _TARGETS[src]
    els = ed.elements()
    t: dict[str, list[str]] = {"categorical": [], "sparse": [], "column": [], "nullable": [],
                               "index": [], "dense2d": []}
    for k, v in els.items():
        parent = k.rpartition("/")[0]
        if _is(v, "categorical") and not k.startswith("raw"):
            t["categorical"].append(k)
        elif _is(v, "csr_matrix") or _is(v, "csc_matrix"):
            t["sparse"].append(k)
        elif _is(v, "nullable-integer") or _is(v, "nullable-boolean") or _is(v, "nullable-string-array"):
            t["nullable"].append(k)
        elif parent in els and _is(els[parent], "dataframe") and _is(v, "array"):
            t["column"].append(k)
        if _is(v, "dataframe"):
            idx = v.attrs.get("_index")
            if isinstance(idx, str) and f"{k}/{idx}" in els:
                t["index"].append(f"{k}/{idx}")
        if _is(v, "array") and len(getattr(v, "shape", ())) == 2 and v.shape[0] > 1:
            t["dense2d"].append(k)
    _TARGETS[src] = t
    return t


def _lie(ed: Editor, src: str, rnd: random.Random) -> str:
    """One lying encoding written into ed; returns what it is (and where)."""
    t = _encoding_targets(ed, src)
    choices = []
    if t["categorical"]:
        choices += ["codes_high", "codes_negative", "codes_length", "categories_empty"]
    if t["sparse"]:
        choices += ["indptr_nonmonotone", "indptr_past_end", "indptr_length", "indices_high",
                    "indices_negative", "data_length", "sparse_shape"]
    if t["column"]:
        choices += ["column_length", "column_length"]
    if t["nullable"]:
        choices += ["mask_length"]
    if t["index"]:
        choices += ["index_length"]
    if t["dense2d"]:
        choices += ["dense_rows"]
    choices += ["link_cycle"]
    lie = rnd.choice(choices)
    if lie.startswith("codes") or lie == "categories_empty":
        cat = rnd.choice(t["categorical"])
        codes = ed.read(f"{cat}/codes")
        n_cats = len(ed.read(f"{cat}/categories"))
        if lie == "codes_high":
            codes[rnd.randrange(len(codes))] = min(np.iinfo(codes.dtype).max, n_cats + rnd.choice([0, 1, 100]))
        elif lie == "codes_negative":
            codes[rnd.randrange(len(codes))] = rnd.choice([-2, -100, np.iinfo(codes.dtype).min])
        elif lie == "codes_length":
            codes = codes[: len(codes) - rnd.randint(1, len(codes))] if rnd.random() < 0.5 \
                else np.concatenate([codes, codes[: rnd.randint(1, 5)]])
        if lie == "categories_empty":
            ed.write(f"{cat}/categories", np.array([], dtype=object))
        else:
            ed.write(f"{cat}/codes", codes)
        return f"{lie} {cat}"
    if lie in ("indptr_nonmonotone", "indptr_past_end", "indptr_length", "indices_high",
               "indices_negative", "data_length", "sparse_shape"):
        m = rnd.choice(t["sparse"])
        shape = [int(x) for x in ed.root[m].attrs["shape"]]
        csr = _is(ed.root[m], "csr_matrix")
        minor = shape[1] if csr else shape[0]
        if lie.startswith("indptr"):
            p = ed.read(f"{m}/indptr").astype(np.int64)
            if lie == "indptr_nonmonotone":
                i = rnd.randrange(1, len(p) - 1)
                p[i] = p[i + 1] + rnd.choice([1, 50, 10**6]) if rnd.random() < 0.5 else -rnd.choice([1, 7])
            elif lie == "indptr_past_end":
                p[-rnd.randint(1, 2)] = p[-1] + rnd.choice([1, 1000, 2**40])
            else:
                p = p[: rnd.randint(0, len(p) - 1)] if rnd.random() < 0.5 else np.concatenate([p, p[-1:]])
            ed.write(f"{m}/indptr", p)
        elif lie.startswith("indices"):
            idx = ed.read(f"{m}/indices")
            if len(idx):
                bad = minor + rnd.choice([0, 1, 1000]) if lie == "indices_high" else rnd.choice([-1, -1000])
                idx[rnd.randrange(len(idx))] = max(np.iinfo(idx.dtype).min, min(np.iinfo(idx.dtype).max, bad))
            ed.write(f"{m}/indices", idx)
        elif lie == "data_length":
            data = ed.read(f"{m}/data")
            ed.write(f"{m}/data", data[: max(0, len(data) - rnd.randint(1, 5))])
        else:
            k = rnd.randrange(2)
            shape[k] = rnd.choice([0, shape[k] - 1, shape[k] + 7, 2**40])
            ed.root[m].attrs["shape"] = shape
        return f"{lie} {m}"
    if lie in ("column_length", "mask_length", "index_length", "dense_rows"):
        if lie == "mask_length":
            col = rnd.choice(t["nullable"])
            sub = rnd.choice([k for k in ("mask", "values") if f"{col}/{k}" in ed.root])
            path = f"{col}/{sub}"
        else:
            path = rnd.choice(t[{"column_length": "column", "index_length": "index",
                                 "dense_rows": "dense2d"}[lie]])
            if path not in ed.root or not hasattr(ed.root[path], "shape"):  # a nullable index
                path = f"{path}/values"
        a = ed.read(path)
        a = a[: len(a) - rnd.randint(1, len(a))] if rnd.random() < 0.5 \
            else np.concatenate([a, a[: rnd.randint(1, 3)]])
        ed.write(path, a)
        return f"{lie} {path}"
    # a group holding a link to an ancestor: for HDF5 a hard link to the
    # root, a soft link to itself or an external link to the file itself;
    # for zarr a symlink to the root (written by the caller's filesystem)
    if ed.zarr:
        (ed.path / "uns" / "loop").symlink_to("..")
        return "link_cycle uns/loop -> root"
    how = rnd.choice(["hard", "soft", "external"])
    g = ed.root.require_group("uns/nest")
    g.attrs.update({"encoding-type": "dict", "encoding-version": "0.1.0"})
    if how == "hard":
        g["up"] = ed.root["/"]
    elif how == "soft":
        g["up"] = h5py.SoftLink("/uns/nest/up")
    else:
        g["up"] = h5py.ExternalLink(ed.path.name, "/uns")
    return f"link_cycle uns/nest/up ({how})"


def mutate_encoding(seed: int, dest: Path, sources: Path) -> tuple[str, str]:
    rnd = random.Random(30_000 + seed)
    src = ENCODING_SOURCES[seed % len(ENCODING_SOURCES)]
    if src.endswith(".zarr"):
        shutil.copytree(sources / src, dest)
    else:
        shutil.copy(sources / src, dest)
    # consolidated again (the lie in both places) or not at all (the lie
    # read from the element's own metadata)
    ed = Editor(dest, consolidate=seed % 4 == 2)
    try:
        what = _lie(ed, src, rnd)
    finally:
        if ed.zarr and (dest / "uns" / "loop").is_symlink():
            strip_consolidated(dest)  # zarr's consolidation would walk the cycle for good
        else:
            ed.close()
    return src, what


# ------------------------------------------------------------ trees
def _tree_edges(rnd: random.Random, kind: str, leaves: list[str]) -> tuple[list[str], list[tuple[str, str]]]:
    """Node ids and edges of one tree of a kind."""
    if kind == "deep":  # a caterpillar
        n = rnd.choice([2000, 20000] if FULL else [2000, 5000])
        nodes = [f"q{i}" for i in range(n)] + leaves
        edges = [(f"q{i}", f"q{i + 1}") for i in range(n - 1)] + [(f"q{i % n}", leaf) for i, leaf in enumerate(leaves)]
        return nodes, edges
    if kind == "huge":  # a star and a comb: many nodes, one level
        n = rnd.choice([200_000, 400_000] if FULL else [30_000])
        nodes = ["root"] + leaves + [f"x{i}" for i in range(n)]
        edges = [("root", v) for v in nodes[1:]]
        return nodes, edges
    nodes = ["r", "a", "b"] + leaves
    edges = [("r", "a"), ("r", "b")] + [(rnd.choice(["a", "b"]), leaf) for leaf in leaves]
    if kind == "cycle":        # no root at all
        edges = [("a", "b"), ("b", "r"), ("r", "a")] + edges[2:]
    elif kind == "cycle_below":  # a root, and a loop under it
        edges += [("a", "c"), ("c", "d"), ("d", "a")]
        nodes += ["c", "d"]
    elif kind == "self_loop":
        edges.append(("b", "b"))
    elif kind == "two_parents":
        edges.append(("a", leaves[0]))
    elif kind == "unknown_node":
        edges.append(("a", "ghost"))
    elif kind == "empty_id":
        edges.append(("a", ""))
        nodes.append("")
    elif kind == "duplicate_nodes":
        nodes += nodes[:3]
    return nodes, edges


TREE_KINDS = ["garbage", "truncated", "deep", "huge", "cycle", "cycle_below", "self_loop",
              "two_parents", "unknown_node", "empty_id", "duplicate_nodes", "deep_json",
              "not_object", "wrong_shape", "attrs_length"]


def _json_tree(rnd: random.Random, kind: str, leaves: list[str], good: str) -> str:
    if kind == "garbage":
        return "".join(chr(rnd.randrange(1, 0x2FF)) for _ in range(rnd.choice([1, 100, 5000])))
    if kind == "truncated":
        return good[: rnd.randrange(len(good))]
    if kind == "not_object":
        return rnd.choice(["[1, 2, 3]", "null", "\"lineage\"", "{\"lineage\": 7}",
                           "{\"lineage\": {\"edges\": [1], \"nodes\": {}}}"])
    if kind == "deep_json":  # an attribute nested deeper than any stack
        depth = rnd.choice([10_000, 200_000])
        deep = "[" * depth + "]" * depth
        return ("{\"lineage\": {\"edges\": {\"r\": {\"" + leaves[0] + "\": {}}}, \"nodes\": {\"r\": {\"x\": "
                + deep + "}, \"" + leaves[0] + "\": {}}}}")
    if kind in ("wrong_shape", "attrs_length"):
        kind = "cycle"
    nodes, edges = _tree_edges(rnd, kind, leaves)
    adj: dict[str, dict] = {}
    for u, v in edges:
        adj.setdefault(u, {})[v] = {"length": rnd.choice([1.0, -1.0, 1e308])}
    text = json.dumps({"lineage": {"edges": adj, "nodes": {v: {} for v in nodes}}})
    if kind == "duplicate_nodes":  # the same key twice in one object
        text = text.replace("\"nodes\": {", "\"nodes\": {\"r\": {\"dup\": 1}, ", 1)
    return text


def mutate_tree(seed: int, dest: Path, sources: Path) -> tuple[str, str]:
    rnd = random.Random(40_000 + seed)
    src = TREE_SOURCES[seed % len(TREE_SOURCES)]
    kind = TREE_KINDS[seed % len(TREE_KINDS)]  # 15 and 2: every pair within 30 seeds
    leaves = [f"cell{i:02d}" for i in range(24)]  # lineage's obs names
    if src.endswith(".h5td"):
        shutil.copy(sources / src, dest)
        with h5py.File(dest, "r+") as f:
            good = f["obst"][()].decode()
            attrs = dict(f["obst"].attrs)
            del f["obst"]
            f.create_dataset("obst", data=_json_tree(rnd, kind, leaves, good),
                             dtype=h5py.string_dtype("utf-8"))
            f["obst"].attrs.update(attrs)
        return src, kind
    shutil.copytree(sources / src, dest)
    ed = Editor(dest, consolidate=seed % 4 == 1)
    tree = "obst/lineage"
    try:
        if kind in ("garbage", "truncated", "not_object", "deep_json"):
            # the pre-0.3 layout: obst a JSON string where a group is expected
            del ed.root["obst"]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                ad.io.write_elem(ed.root, "obst", _json_tree(rnd, kind, leaves, "{}" * 20))
            return src, kind
        if kind == "wrong_shape":
            ed.write(f"{tree}/edges", np.array(rnd.choice([["r", "a", "b"], [["r", "a", "b"]]]), dtype=object))
            return src, kind
        if kind == "attrs_length":
            n = len(ed.read(f"{tree}/edge_attrs/length"))
            ed.write(f"{tree}/edge_attrs/length", np.arange(n + rnd.choice([-5, 3]), dtype=np.float64))
            return src, kind
        nodes, edges = _tree_edges(rnd, kind, leaves)
        ed.write(f"{tree}/nodes", np.array(nodes, dtype=object))
        ed.write(f"{tree}/edges", np.array(edges, dtype=object).reshape(len(edges), 2))
        ed.write(f"{tree}/edge_attrs/length", np.ones(len(edges), dtype=np.float64))
        return src, kind
    finally:
        ed.close()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    sources = make_sources(tmp_path_factory.mktemp("sources"))
    root = tmp_path_factory.mktemp("malformed")
    stores = []
    for seed in range(N_HDF5):
        src, kind, data = mutate_hdf5(seed)
        name = f"h{seed:04d}_{kind}{Path(src).suffix}"
        (root / name).write_bytes(data)
        stores.append((name, src, kind))
    for seed in range(N_ZIP):
        src, kind, data = mutate_zip(seed, sources)
        name = f"p{seed:04d}_{kind}.zarr.zip"
        (root / name).write_bytes(data)
        stores.append((name, src, kind))
    for seed in range(N_ZARR):
        name = f"z{seed:04d}.zarr"
        src, kind = mutate_zarr(seed, root / name, sources)
        stores.append((name, src, kind))
    for seed in range(N_ENCODING):
        src = ENCODING_SOURCES[seed % len(ENCODING_SOURCES)]
        name = f"e{seed:04d}{Path(src).suffix}"
        src, kind = mutate_encoding(seed, root / name, sources)
        stores.append((name, src, kind))
    for seed in range(N_TREE):
        src = TREE_SOURCES[seed % len(TREE_SOURCES)]
        name = f"t{seed:04d}{Path(src).suffix}"
        src, kind = mutate_tree(seed, root / name, sources)
        stores.append((name, src, kind))
    # the unrelated valid store, checked throughout
    shutil.copy(EXAMPLES / "blood.h5ad", root / "good.h5ad")
    # the sources, for the answers a mutation cannot have changed
    for src in set(ENCODING_SOURCES) | set(TREE_SOURCES):
        if src.endswith(".zarr"):
            shutil.copytree(sources / src, root / f"src_{src}")
        else:
            shutil.copy(sources / src, root / f"src_{src}")
    return root, stores


# ------------------------------------------------------------ the routes
HDF5_SUFFIXES = (".h5ad", ".h5mu", ".h5td")


def routes_for(summary: dict, gene: str | None) -> list[str]:
    r = ["", "/obs", "/var", "/obs/schema", "/obs?format=csv", "/obs?categorical=codes",
         "/X", "/X?format=bin", "/X?format=npy", "/X?rows=0:3", "/X?cols=0:2&layout=csr",
         "/uns", "/raw/X", "/mod", "/obst", "/zarr/.zmetadata", "/zarr/zarr.json",
         "/zarr-csc/.zmetadata"]
    if gene:
        r.append(f"/X?var_names={gene}")
    for key in ("obsm", "varm", "obsp", "layers"):
        for k in (summary.get(key) or [])[:2]:
            r.append(f"/{key}/{k}")
    for k in (summary.get("uns") or [])[:4]:
        r.append(f"/uns/{k}")
    for mod in (summary.get("mod") or [])[:2]:
        m = mod["name"] if isinstance(mod, dict) else mod
        r += [f"/mod/{m}/obs", f"/mod/{m}/X?rows=0:2", f"/obsmap/{m}?rows=0:3"]
    for tree in (summary.get("obst") or [])[:1]:
        t = tree if isinstance(tree, str) else tree.get("key", "")
        r += [f"/obst/{t}", f"/obst/{t}?format=newick",
              f"/obst/{t}/viewport?x0=0&x1=10&y0=0&y1=10&max_nodes=50",
              f"/obst/{t}/taxonium/config/", f"/obst/{t}/taxonium/nodes/"]
    return r


def h5grove_routes(name: str, datasets: list[str], rnd: random.Random) -> list[str]:
    """h5grove's routes on one HDF5 file, on datasets of its source."""
    r = [f"/h5grove/meta/?file={name}&path=/", f"/h5grove/attr/?file={name}&path=/obs",
         f"/h5grove/paths/?file={name}&path=/"]
    for ds in rnd.sample(datasets, min(2, len(datasets))):
        r += [f"/h5grove/data/?file={name}&path=/{ds}",
              f"/h5grove/data/?file={name}&path=/{ds}&format=bin",
              f"/h5grove/stats/?file={name}&path=/{ds}"]
    return r


def chunk_keys(meta: dict, rnd: random.Random, prefix: str, csc_only: bool = False) -> list[str]:
    """The first chunk key of up to 3 arrays of a consolidated zarr
    document (v2 .zmetadata or v3 zarr.json), X first."""
    arrays: dict[str, dict] = {}
    if "metadata" in meta and isinstance(meta["metadata"], dict):  # v2
        for k, v in meta["metadata"].items():
            if k.endswith(".zarray") and isinstance(v, dict):
                key = k[: -len("/.zarray")] if "/" in k else ""
                arrays[key] = {"ndim": len(v.get("shape") or []),
                               "sep": v.get("dimension_separator", "."), "v": 2}
    cm = meta.get("consolidated_metadata")
    if isinstance(cm, dict) and isinstance(cm.get("metadata"), dict):  # v3
        for k, v in cm["metadata"].items():
            if isinstance(v, dict) and v.get("node_type") == "array":
                enc = (v.get("chunk_key_encoding") or {})
                sep = (enc.get("configuration") or {}).get("separator", "/" if enc.get("name") != "v2" else ".")
                arrays[k] = {"ndim": len(v.get("shape") or []), "sep": sep,
                             "v": 3 if enc.get("name") != "v2" else 2}
    if csc_only:
        arrays = {k: v for k, v in arrays.items() if k.rpartition("/")[2] in ("data", "indices", "indptr")}
    names = sorted(arrays)
    picked = [k for k in names if k == "X" or k.startswith("X/")][:1]
    rest = [k for k in names if k not in picked]
    picked += rnd.sample(rest, min(3 - len(picked), len(rest)))
    out = []
    for k in picked:
        a = arrays[k]
        zeros = a["sep"].join(["0"] * a["ndim"]) if a["ndim"] else "0"
        if a["v"] == 3:
            zeros = "c" + (a["sep"] + zeros if a["ndim"] else "")
        out.append(f"{prefix}{k}/{zeros}" if k else f"{prefix}{zeros}")
        if a["v"] == 2:
            out.append(f"{prefix}{k}/.zarray" if k else f"{prefix}.zarray")
    return out


# Routes whose answer a mutation leaves alone, by what it touched.
UNTOUCHED_BY_TREES = ["/obs", "/var", "/X?rows=0:3", "/uns"]


def untouched_routes(name: str, kind: str) -> list[str]:
    if name.startswith("t"):
        return UNTOUCHED_BY_TREES
    if not name.startswith("e"):
        return []
    where = kind.split(" ", 1)[1] if " " in kind else ""
    out = []
    if not where.startswith(("uns", "mod")):
        out.append("/uns")
    if not where.startswith(("var", "mod", "raw")):
        out.append("/var")
    return out


def check_answer(r: requests.Response, where: str, failures: list):
    if r.status_code < 400:
        return
    ctype = r.headers.get("Content-Type", "")
    if r.status_code >= 500 and not (r.status_code == 503 and r.headers.get("Retry-After")):
        failures.append(f"{where}: {r.status_code} {r.text[:200]}")
    elif not ctype.startswith("application/problem+json"):
        failures.append(f"{where}: {r.status_code} without problem+json ({ctype})")
    else:
        body = r.json()
        if body.get("status") != r.status_code or not body.get("detail"):
            failures.append(f"{where}: malformed problem {body}")


def vm_kb(pid: int, field: str) -> int:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith(field):
            return int(line.split()[1])
    return 0


def vm_hwm_kb(pid: int) -> int:
    return vm_kb(pid, "VmHWM:")


# CELLAR_CORPUS_MEMORY_TRACE=FILE: one line per store, its name, kind and the
# server's resident and peak MB after its routes.
MEMORY_TRACE = os.environ.get("CELLAR_CORPUS_MEMORY_TRACE")


def _datasets(path: Path) -> list[str]:
    out = []
    with h5py.File(path, "r") as f:
        f.visititems(lambda k, v: out.append(k) if isinstance(v, h5py.Dataset) else None)
    return sorted(out)


# The caches that fill over a thousand stores (decoded zarr and HDF5 chunks,
# finished answers: 160 MiB by default) are bounded here too, 16 MiB each,
# so the peak measures what a request and an open store hold.
CORPUS_CACHES = ("--zarr-chunk-cache-bytes", str(16 << 20), "--hdf5-chunk-cache-bytes", str(16 << 20),
                 "--answer-cache-bytes", str(16 << 20))


@pytest.mark.timeout(3600 if FULL else 900)
def test_malformed_corpus(corpus, server_factory, tmp_path):
    root, stores = corpus
    # Bounded as a server of a shared root would be: answers, the stores
    # kept open (each HDF5 file has libhdf5's metadata cache) and what they
    # may hold derived (huge trees' indexes and views).
    s = server_factory(root, "--probe-timeout-seconds", "5", "--probe-wait-seconds", "30",
                       "--max-response-bytes", str(64 << 20), "--max-open-stores", "16",
                       "--max-open-bytes", str(64 << 20), *CORPUS_CACHES)
    good = s.get("/v1/stores/good.h5ad/obs", columns="cell_type").json()
    ref = ad.read_h5ad(EXAMPLES / "blood.h5ad")
    assert good["index"] == list(ref.obs_names)
    datasets = {src: _datasets(EXAMPLES / src) for src in HDF5_SOURCES}
    failures: list[str] = []
    session = requests.Session()
    source_answers: dict[tuple[str, str], bytes] = {}

    def ask(url: str, where: str) -> requests.Response | None:
        nonlocal session
        try:
            r = session.get(url, timeout=REQUEST_TIMEOUT)
        except requests.RequestException as e:
            failures.append(f"{where}: no answer ({e.__class__.__name__})")
            session = requests.Session()
            return None
        check_answer(r, where, failures)
        return r

    def source_answer(src: str, route: str) -> bytes | None:
        if (src, route) not in source_answers:
            r = session.get(f"{s.base}/v1/stores/src_{src}{route}", timeout=REQUEST_TIMEOUT)
            assert r.status_code in (200, 404), f"src_{src}{route}: {r.status_code} {r.text[:200]}"
            source_answers[(src, route)] = r.content if r.status_code == 200 else None
        return source_answers[(src, route)]

    started = time.monotonic()
    seconds: dict[str, float] = {}  # by store name's first letter
    for i, (name, src, kind) in enumerate(stores):
        t0 = time.monotonic()
        base = f"{s.base}/v1/stores/{name}"
        label = f"{name} ({src}, {kind})"
        rnd = random.Random(name)
        summary = ask(base, f"{label} summary")
        ok = summary is not None and summary.status_code == 200
        gene = None
        if ok:
            v = ask(base + "/var?rows=0:1", f"{label} /var?rows=0:1")
            index = v.json().get("index") if v is not None and v.status_code == 200 else None
            gene = index[0] if index and isinstance(index[0], str) else None
        paths = routes_for(summary.json() if ok else {}, gene)
        answers: dict[str, requests.Response] = {}
        for route in paths:
            r = ask(base + route, f"{label} {route or '/'}")
            if r is not None:
                answers[route] = r
        # the zarr view's (or the store's own) chunk keys, from its metadata
        for prefix, doc_route, csc in (("/zarr/", "/zarr/.zmetadata", False),
                                       ("/zarr/", "/zarr/zarr.json", False),
                                       ("/zarr-csc/", "/zarr-csc/.zmetadata", True)):
            r = answers.get(doc_route)
            if r is None or r.status_code != 200:
                continue
            try:
                meta = r.json()
            except ValueError:
                failures.append(f"{label} {doc_route}: 200 that is not JSON")
                continue
            for key in chunk_keys(meta, rnd, prefix, csc):
                ask(base + key, f"{label} {key}")
        if name.endswith(HDF5_SUFFIXES):
            for route in h5grove_routes(name, datasets.get(src, ["X"]), rnd):
                ask(s.base + route, f"{label} {route}")
        # an element the mutation left alone answers as the source's does
        for route in untouched_routes(name, kind):
            r = answers.get(route) or ask(base + route, f"{label} {route}")
            if r is not None and r.status_code == 200 and r.content != source_answer(src, route):
                failures.append(f"{label} {route}: 200 that differs from the source's "
                                f"({r.content[:120]!r} vs {(source_answer(src, route) or b'')[:120]!r})")
        if not s.alive():
            failures.append(f"{label}: the server died")
            break
        hwm = vm_hwm_kb(s.proc.pid)
        if MEMORY_TRACE:  # where the memory grows, store by store
            with open(MEMORY_TRACE, "a") as trace:
                gauges = re.findall(r"^(cellar_(?:cache_bytes|answer_cache_bytes|open_stores)) (\d+)",
                                    s.get("/metrics").text, re.M)
                trace.write(f"{name}\t{kind}\t{vm_kb(s.proc.pid, 'VmRSS:') // 1024}\t{hwm // 1024}\t"
                            + " ".join(f"{k[7:]}={v}" for k, v in gauges) + "\n")
        if hwm > 300 * 1024 and not any("peak resident" in f for f in failures):
            failures.append(f"{label}: peak resident memory {hwm // 1024} MB "
                            "after its routes (over 300 MB)")
        if i % 25 == 0:
            assert s.get("/healthz").status_code == 200
            again = s.get("/v1/stores/good.h5ad/obs", columns="cell_type").json()
            assert again == good, f"the valid store changed its answer after {name}"
        seconds[name[0]] = seconds.get(name[0], 0.0) + time.monotonic() - t0
    took = time.monotonic() - started
    log = s.log.read_text(errors="replace")
    for marker in ("ERROR: AddressSanitizer", "runtime error:", "ERROR: LeakSanitizer"):
        if marker in log:
            at = log.index(marker)
            failures.append(f"sanitizer report in the log: {log[at:at + 800]}")
    hwm = vm_hwm_kb(s.proc.pid) if s.alive() else 0
    if hwm > 300 * 1024 and not any("peak resident" in f for f in failures):
        failures.append(f"peak resident memory {hwm // 1024} MB (over 300 MB)")
    report = tmp_path / "malformed-failures.json"
    report.write_text(json.dumps({"stores": len(stores), "seconds": took, "seconds_by_kind": seconds,
                                  "failures": failures}, indent=1))
    assert s.alive(), "the server died"
    assert not failures, f"{len(failures)} failures (all in {report}):\n" + "\n".join(failures[:40])


def _zarr_keys(s, store: str, doc: str) -> set[str]:
    r = s.get(f"/v1/stores/{store}/zarr/{doc}")
    assert r.status_code == 200, (store, doc, r.status_code, r.text[:300])
    meta = r.json()
    return set(meta["metadata"] if doc == ".zmetadata" else meta["consolidated_metadata"]["metadata"])


def test_link_cycles_are_not_followed(server_factory, tmp_path):
    """A group that links back to a group containing it (an HDF5 hard link,
    a zarr directory symlink) is one element that answers 422, not a path
    that goes round: followed, the zarr view listed the whole store again
    under each turn up to its depth limit (600 KB of metadata and 22 MB kept
    per such store in the full corpus), and a zarr store's consolidated
    metadata was refused as nesting too deeply."""
    shutil.copy(EXAMPLES / "blood.h5ad", tmp_path / "plain.h5ad")
    shutil.copy(EXAMPLES / "blood.h5ad", tmp_path / "cycle.h5ad")
    with h5py.File(tmp_path / "cycle.h5ad", "r+") as f:
        g = f.require_group("uns/nest")
        g.attrs.update({"encoding-type": "dict", "encoding-version": "0.1.0"})
        g["up"] = f["/"]
    a = ad.read_h5ad(EXAMPLES / "blood.h5ad")
    for name in ("plain.zarr", "cycle.zarr"):
        with ad.settings.override(zarr_write_format=3):
            a.write_zarr(tmp_path / name)
        (tmp_path / name / "zarr.json").write_text(json.dumps(
            {k: v for k, v in json.loads((tmp_path / name / "zarr.json").read_text()).items()
             if k != "consolidated_metadata"}))  # the server consolidates the store itself
    (tmp_path / "cycle.zarr" / "uns" / "loop").symlink_to("..")
    s = server_factory(tmp_path)

    r = s.get("/v1/stores/cycle.h5ad/uns/nest/up")
    assert r.status_code == 422 and r.headers["Content-Type"] == "application/problem+json", r.text
    assert "'/uns/nest/up' links back to '/'" in r.json()["detail"] and "cycle" in r.json()["detail"]
    assert s.get("/v1/stores/cycle.h5ad/uns/nest").json() == {"up": None}
    plain = _zarr_keys(s, "plain.h5ad", ".zmetadata")
    assert _zarr_keys(s, "cycle.h5ad", ".zmetadata") == plain | {"uns/nest/.zgroup", "uns/nest/.zattrs"}
    # h5grove answers as h5py reads: the hard link is a group like any other
    meta = s.get("/h5grove/meta/?file=cycle.h5ad&path=/uns/nest/up").json()
    assert {c["name"] for c in meta["children"]} >= {"obs", "var", "X", "uns"}

    plain = _zarr_keys(s, "plain.zarr", "zarr.json")
    assert _zarr_keys(s, "cycle.zarr", "zarr.json") == plain
    assert "loop" not in s.get("/v1/stores/cycle.zarr/uns").json()
    assert s.get("/v1/stores/cycle.zarr/uns").json() == s.get("/v1/stores/plain.zarr/uns").json()
    assert s.get("/healthz").status_code == 200
