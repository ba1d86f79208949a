"""Tree stores for tests/http/test_trees.py, written by treedata (PyPI) and,
for the broken and legacy layouts, edited afterwards with h5py / zarr.

Every store goes into one data root of its own (write_tree_root)."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import h5py
import networkx as nx
import numpy as np
import pandas as pd
import treedata as td

SEED = 7

RICH_H5 = "rich.h5td"          # alignment leaves, allow_overlap False, obst t1/t2 + vart v1
RICH_ZARR = "rich.zarr"        # the same TreeData through write_zarr (columnar, v3, sharded)
NODES_H5 = "nodes.h5td"        # alignment nodes, allow_overlap True, overlapping trees
SUBSET_ZARR = "subset.zarr"    # alignment subset
LEGACY_ZARR = "legacy.zarr"    # zarr with obst / vart as JSON string scalars (pre-0.3)
DEEP_H5 = "deep.h5td"          # a caterpillar of DEEP_N nodes (depth DEEP_N - 1)
DEEP_N = 30000
BAD = {                        # name -> nodes one of which the 422 detail names (None: any)
    "bad_cycle.h5td": ("q1", "q2", "q3"),
    "bad_two_parents.h5td": ("c3",),
    "bad_unknown.h5td": ("ghost",),
    "bad_not_object.h5td": None,
    "bad_garbage.h5td": None,
}
GARBAGE_BYTES = 100 << 20

# Node ids that need care: Newick quoting, '/', a comma, non-ASCII, numbers.
ODD_LEAVES = ["cell 10", "a,b", "it's", "x/y", "ünï", "(p)", "c:1", "7"]


def _quiet():
    warnings.filterwarnings("ignore")


def rich_tree(leaves: list[str], prefix: str, seed: int) -> nx.DiGraph:
    """A random binary tree over `leaves` with attributes of every kind:
    int and bool on every node (native zarr columns), float on some, string,
    list, nested dict, an explicit None and a mixed-type attribute (JSON
    columns); edges with float `length`, int `w` and a sparse string `tag`."""
    rng = np.random.default_rng(seed)
    g = nx.DiGraph()
    level = list(leaves)
    k = 0
    while len(level) > 1:
        rng.shuffle(level)
        a, b = level.pop(), level.pop()
        # one internal node whose id reads as a number (Newick must quote it)
        parent = "42" if (k == 2 and prefix == "n") else f"{prefix}{k}"
        k += 1
        for child in (a, b):
            g.add_edge(parent, child, length=float(np.round(rng.random() + 0.01, 4)),
                       w=int(rng.integers(0, 100)))
            if rng.random() < 0.3:
                g.edges[parent, child]["tag"] = f"t{k}"
        level.insert(0, parent)
    for i, n in enumerate(g.nodes):
        a = g.nodes[n]
        a["i"] = i
        a["flag"] = bool(i % 2)
        if i % 3 == 0:
            a["f"] = float(i) / 4
        if i % 4 == 0:
            a["s"] = f"name {i}"
        if i % 5 == 0:
            a["lst"] = [i, "x", None, 1.5]
        if i == 1:
            a["d"] = {"k": {"z": [1, 2]}, "e": {}}
        if i % 3 == 1:
            a["none"] = None
        if i % 6 == 2:
            a["mixed"] = "str" if i % 12 == 2 else i
    return g


def _write_rich(root: Path):
    rng = np.random.default_rng(SEED)
    cells = [f"c{i}" for i in range(10)] + ODD_LEAVES + [f"d{i}" for i in range(8)] + \
        [f"free{i}" for i in range(4)]
    genes = [f"g{i}" for i in range(6)]
    obs = pd.DataFrame({
        "score": rng.random(len(cells)),
        "kind": pd.Categorical(rng.choice(["A", "B", "C"], len(cells))),
        "n": rng.integers(0, 9, len(cells)),
        "name": [f"cell-{c}" for c in cells],
    }, index=cells)
    var = pd.DataFrame({"mean": rng.random(len(genes))}, index=genes)
    t1_leaves = [f"c{i}" for i in range(10)] + ODD_LEAVES
    t2_leaves = [f"d{i}" for i in range(8)]
    t = td.TreeData(
        X=rng.random((len(cells), len(genes))).astype(np.float32),
        obs=obs, var=var,
        obst={"t1": rich_tree(t1_leaves, "n", 1), "t2": rich_tree(t2_leaves, "m", 2)},
        vart={"v1": rich_tree(genes, "gn", 3)},
        label="tree", alignment="leaves", allow_overlap=False,
    )
    t.write_h5td(root / RICH_H5)
    t.write_zarr(root / RICH_ZARR)
    return t


def _write_nodes(root: Path):
    """alignment nodes: every node is an observation; two trees share nodes."""
    g1 = nx.DiGraph([("r", "a"), ("r", "b"), ("a", "a1"), ("a", "a2")])
    g2 = nx.DiGraph([("r2", "b"), ("r2", "z")])
    for g in (g1, g2):
        for n in g.nodes:
            g.nodes[n]["depth"] = len(nx.ancestors(g, n))
    names = sorted(set(g1.nodes) | set(g2.nodes))
    obs = pd.DataFrame({"v": np.arange(len(names), dtype=np.float64)}, index=names)
    t = td.TreeData(X=np.zeros((len(names), 1), np.float32), obs=obs,
                    obst={"g1": g1, "g2": g2}, alignment="nodes", allow_overlap=True)
    t.write_h5td(root / NODES_H5)


def _write_subset(root: Path):
    g = nx.DiGraph([("top", "u"), ("top", "v"), ("u", "s0"), ("u", "s1")])
    nx.set_edge_attributes(g, 0.5, "length")
    names = ["s0", "s1", "other"]
    obs = pd.DataFrame({"v": [1.0, 2.0, 3.0]}, index=names)
    t = td.TreeData(X=np.zeros((3, 1), np.float32), obs=obs, obst={"s": g},
                    alignment="subset", allow_overlap=True, label=None)
    t.write_zarr(root / SUBSET_ZARR)


def _write_legacy(root: Path, rich: td.TreeData):
    """A zarr TreeData whose obst / vart are JSON string scalars, as
    treedata < 0.3 wrote them."""
    import zarr
    from anndata.io import write_elem

    path = root / LEGACY_ZARR
    rich.write_zarr(path)
    g = zarr.open_group(path, mode="r+")
    for axis, trees in (("obst", rich.obst), ("vart", rich.vart)):
        del g[axis]
        doc = {k: {"edges": nx.to_dict_of_dicts(v), "nodes": dict(v.nodes(data=True))}
               for k, v in trees.items()}
        write_elem(g, axis, json.dumps(doc))


def _write_deep(root: Path):
    """A caterpillar written by editing the JSON (networkx is slow here)."""
    g = nx.DiGraph([("q0", "q1")])
    obs_names = ["q1"]
    t = td.TreeData(X=np.zeros((1, 1), np.float32), obs=pd.DataFrame(index=obs_names),
                    obst={"cat": g}, alignment="subset")
    path = root / DEEP_H5
    t.write_h5td(path)
    edges = {f"q{i}": {f"q{i + 1}": {"length": 1.0}, f"leaf{i}": {"length": 2.0}}
             for i in range(DEEP_N // 2 - 1)}
    nodes = {}
    for i in range(DEEP_N // 2):
        nodes[f"q{i}"] = {"i": i}
    for i in range(DEEP_N // 2 - 1):
        nodes[f"leaf{i}"] = {}
    _set_json(path, "obst", {"cat": {"edges": edges, "nodes": nodes}})


def _set_json(path: Path, axis: str, doc) -> None:
    text = doc if isinstance(doc, str) else json.dumps(doc)
    with h5py.File(path, "r+") as f:
        attrs = dict(f[axis].attrs)
        del f[axis]
        f.create_dataset(axis, data=text, dtype=h5py.string_dtype("utf-8"))
        for k, v in attrs.items():
            f[axis].attrs[k] = v


def _write_bad(root: Path):
    base = nx.DiGraph([("c0", "c1"), ("c0", "c2"), ("c1", "c3")])
    t = td.TreeData(X=np.zeros((2, 1), np.float32),
                    obs=pd.DataFrame(index=["c2", "c3"]), obst={"ok": base})
    good = {"ok": {"edges": {"c0": {"c1": {}, "c2": {}}, "c1": {"c3": {}}},
                   "nodes": {"c0": {}, "c1": {}, "c2": {}, "c3": {}}}}
    # q1 -> q2 -> q3 -> q1: every node has one parent, and there is no root
    cycle = {"loop": {"edges": {"q1": {"q2": {}}, "q2": {"q3": {}}, "q3": {"q1": {}}},
                      "nodes": {"q1": {}, "q2": {}, "q3": {}}}}
    two = {"two": {"edges": {"c0": {"c1": {}, "c2": {}}, "c1": {"c3": {}}, "c2": {"c3": {}}},
                   "nodes": {"c0": {}, "c1": {}, "c2": {}, "c3": {}}}}
    unknown = {"u": {"edges": {"c0": {"c1": {}, "ghost": {}}},
                     "nodes": {"c0": {}, "c1": {}}}}
    docs = {
        "bad_cycle.h5td": {**good, **cycle},
        "bad_two_parents.h5td": two,
        "bad_unknown.h5td": unknown,
        "bad_not_object.h5td": json.dumps([1, 2, 3]),
        "bad_garbage.h5td": None,
    }
    for name, doc in docs.items():
        path = root / name
        t.write_h5td(path)
        if doc is None:
            rng = np.random.default_rng(SEED)
            garbage = rng.integers(33, 127, GARBAGE_BYTES, dtype=np.uint8).tobytes().decode("ascii")
            doc = "{\"t\": " + garbage
        _set_json(path, "obst", doc)


def write_tree_root(root: Path) -> td.TreeData:
    _quiet()
    root.mkdir(parents=True, exist_ok=True)
    rich = _write_rich(root)
    _write_nodes(root)
    _write_subset(root)
    _write_legacy(root, rich)
    _write_deep(root)
    _write_bad(root)
    return rich


def read_trees(path: Path) -> td.TreeData:
    _quiet()
    if str(path).endswith(".zarr"):
        return td.read_zarr(path)
    return td.read_h5td(path)
