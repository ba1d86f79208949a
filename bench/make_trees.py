"""Writes the tree benchmark stores (issue 4) with treedata's own writers.

    python bench/make_trees.py OUT_DIR SCALE

SCALE=1 is a 999,999-node tree (500,000 leaves); SCALE=0.1, the quick run,
is 99,999 nodes (50,000 leaves).  Deterministic: numpy's PCG64 seeded
with SEED.

The tree is a random binary tree grown by coalescence: starting from the
leaves (`cell_0000000`, ...), two nodes drawn at random among those without
a parent are joined under a new internal node (`node0`, `node1`, ..., the
root last), until one is left.  Every edge has `length` (exponential, mean
0.1); every node has two attributes, `time` (its distance from the root,
float) and `state` (a string, one of 12).

Stores (in OUT_DIR):
  trees.h5td  TreeData with obst `lineage` (label "tree", alignment
              "leaves"): the obs are the leaves (one column, `clone`);
              no X.  treedata stores the trees as one JSON string.
  trees.zarr  the same TreeData written by treedata.write_zarr (zarr v3,
              the columnar tree layout).
`manifest.json` records the sizes (nodes, JSON bytes, files), sample ids
the queries use, and TREES_VERSION, so bench/run.py rewrites the data when
this file changes it.
"""

import json
import os
import sys
import time
import warnings

import numpy as np
import pandas as pd

warnings.filterwarnings("ignore")

import h5py  # noqa: E402
import networkx as nx  # noqa: E402
import treedata as td  # noqa: E402

TREES_VERSION = 1
SEED = 20240612
FULL_LEAVES = 500_000
N_STATES = 12


def coalescent(n_leaves, rng):
    """(parent, child) edges of a random binary tree; the root is the last
    internal node.  Children are drawn from the unparented pool."""
    pool = list(range(n_leaves))           # ids: leaves 0..n-1, internal n..
    draws = rng.random((n_leaves - 1, 2))
    parents = np.empty(2 * n_leaves - 2, dtype=np.int64)
    children = np.empty(2 * n_leaves - 2, dtype=np.int64)
    nxt = n_leaves
    for k in range(n_leaves - 1):
        size = len(pool)
        i = int(draws[k, 0] * size)
        a = pool[i]
        pool[i] = pool[-1]
        pool.pop()
        j = int(draws[k, 1] * (size - 1))
        b = pool[j]
        pool[j] = pool[-1]
        pool.pop()
        pool.append(nxt)
        parents[2 * k], children[2 * k] = nxt, a
        parents[2 * k + 1], children[2 * k + 1] = nxt, b
        nxt += 1
    return parents, children, nxt - 1


def make_tree(n_leaves, rng):
    parents, children, root = coalescent(n_leaves, rng)
    n_nodes = 2 * n_leaves - 1
    names = [f"cell_{i:07d}" for i in range(n_leaves)] + \
            [f"node{i}" for i in range(n_leaves - 1)]
    lengths = np.round(rng.exponential(0.1, len(children)), 4)
    # time = distance from the root: parents are created after their
    # children, so walking the edges from the last one sets parents first.
    time_of = np.zeros(n_nodes)
    for e in range(len(children) - 1, -1, -1):
        time_of[children[e]] = time_of[parents[e]] + lengths[e]
    states = rng.integers(0, N_STATES, n_nodes)
    g = nx.DiGraph()
    # Nodes root first (the order treedata writes them in).
    for v in range(n_nodes - 1, -1, -1):
        g.add_node(names[v], time=round(float(time_of[v]), 4), state=f"s{states[v]}")
    g.add_edges_from((names[p], names[c], {"length": float(x)})
                     for p, c, x in zip(parents.tolist(), children.tolist(), lengths.tolist()))
    depth = np.zeros(n_nodes, dtype=np.int64)
    for e in range(len(children) - 1, -1, -1):
        depth[children[e]] = depth[parents[e]] + 1
    return g, names, names[root], depth


def main():
    out = sys.argv[1]
    scale = float(sys.argv[2])
    n_leaves = max(1000, int(round(FULL_LEAVES * scale)))
    os.makedirs(out, exist_ok=True)
    rng = np.random.Generator(np.random.PCG64(SEED))
    t0 = time.time()
    tree, names, root, depth = make_tree(n_leaves, rng)
    obs = pd.DataFrame(index=pd.Index(names[:n_leaves], name="cell"))
    obs["clone"] = rng.integers(0, 100, n_leaves).astype(np.int32)
    tdata = td.TreeData(obs=obs, obst={"lineage": tree}, label="tree", alignment="leaves",
                        allow_overlap=False)
    tdata.write_h5td(os.path.join(out, "trees.h5td"))
    tdata.write_zarr(os.path.join(out, "trees.zarr"))
    with h5py.File(os.path.join(out, "trees.h5td"), "r") as f:
        json_bytes = len(f["obst"][()])
    # Sample ids for the queries: leaves and internal nodes spread over the
    # ids, plus the deepest leaf.
    leaves = [names[i] for i in rng.choice(n_leaves, 256, replace=False)]
    internal = [names[n_leaves + i] for i in rng.choice(n_leaves - 1, 256, replace=False)]
    manifest = {
        "version": TREES_VERSION,
        "scale": scale,
        "seed": SEED,
        "n_leaves": n_leaves,
        "n_nodes": tree.number_of_nodes(),
        "n_edges": tree.number_of_edges(),
        "root": root,
        "max_depth": int(depth.max()),
        "mean_leaf_depth": round(float(depth[:n_leaves].mean()), 2),
        "deepest_leaf": names[int(np.argmax(depth[:n_leaves]))],
        "json_bytes": json_bytes,
        "leaves": leaves,
        "internal": internal,
        "seconds": round(time.time() - t0, 1),
        "files": {name: file_bytes(os.path.join(out, name)) for name in ("trees.h5td", "trees.zarr")},
    }
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    print(json.dumps({k: v for k, v in manifest.items() if k not in ("leaves", "internal")}))


def file_bytes(path):
    if os.path.isfile(path):
        return os.path.getsize(path)
    total = 0
    for base, _, files in os.walk(path):
        total += sum(os.path.getsize(os.path.join(base, f)) for f in files)
    return total


if __name__ == "__main__":
    main()
