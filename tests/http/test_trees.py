"""Tree routes ({ad}/obst, {ad}/vart, ...) compared with networkx on the
trees treedata itself reads back (read_h5td / read_zarr)."""

from __future__ import annotations

import concurrent.futures
import itertools
import math
import re
from functools import reduce

import networkx as nx
import pytest

import tree_writers as W
from conftest import assert_json, assert_problem, store_path

GOOD = [W.RICH_H5, W.RICH_ZARR, W.LEGACY_ZARR, W.NODES_H5, W.SUBSET_ZARR]
RICH = [W.RICH_H5, W.RICH_ZARR, W.LEGACY_ZARR]


# ------------------------------------------------------------ fixtures
@pytest.fixture(scope="module")
def troot(tmp_path_factory):
    root = tmp_path_factory.mktemp("trees")
    W.write_tree_root(root)
    return root


@pytest.fixture(scope="module")
def tsrv(troot, server_factory):
    return server_factory(troot)


@pytest.fixture(scope="module")
def tref(troot):
    cache = {}

    def get(name):
        if name not in cache:
            cache[name] = W.read_trees(troot / name)
        return cache[name]
    return get


def trees_of(tref, name, axis):
    return getattr(tref(name), axis)


def all_trees(tref):
    for name in GOOD:
        for axis in ("obst", "vart"):
            for key, g in trees_of(tref, name, axis).items():
                yield name, axis, key, g


def case_ids():
    return [(n, a, k) for n in GOOD for a, keys in
            (("obst", {W.NODES_H5: ["g1", "g2"], W.SUBSET_ZARR: ["s"]}.get(n, ["t1", "t2"])),
             ("vart", ["v1"] if n in RICH else []))
            for k in keys]


CASES = case_ids()


# ------------------------------------------------------------ helpers
def same(a, b) -> bool:
    """Equal JSON values where a bool is never a number (1 != True)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def root_of(g, n):
    while True:
        p = list(g.predecessors(n))
        if not p:
            return n
        n = p[0]


def leaves_under(g, n):
    return {m for m in nx.descendants(g, n) | {n} if g.out_degree(m) == 0}


def tpath(name, axis, key, *rest):
    return store_path(name, axis, key, *rest)


def parse_newick(text):
    """A small Newick reader: [(label, parent label, length or None)] of
    every node, for each tree.  Labels may be quoted ('' is a quote)."""
    trees, i, n = [], 0, len(text)

    def label():
        nonlocal i
        if i < n and text[i] == "'":
            i += 1
            out = []
            while True:
                j = text.index("'", i)
                out.append(text[i:j])
                i = j + 1
                if i < n and text[i] == "'":
                    out.append("'")
                    i += 1
                    continue
                return "".join(out)
        m = re.compile(r"[^\s()\[\]:;,']*").match(text, i)
        i = m.end()
        return m.group()

    def length():
        nonlocal i
        if i < n and text[i] == ":":
            m = re.compile(r":([^\s(),;]+)").match(text, i)
            i = m.end()
            return float(m.group(1))
        return None

    while True:
        while i < n and text[i].isspace():
            i += 1
        if i >= n:
            return trees
        nodes = []   # (label, parent index, length)
        stack = []   # indices of open clades
        cur = None

        def new(parent):
            nodes.append([None, parent, None])
            return len(nodes) - 1
        top = new(None)
        cur = top
        while text[i] != ";":
            c = text[i]
            if c == "(":
                stack.append(cur)
                i += 1
                cur = new(stack[-1])
            elif c == ",":
                i += 1
                cur = new(stack[-1])
            elif c == ")":
                i += 1
                cur = stack.pop()
            else:
                nodes[cur][0] = label()
                nodes[cur][2] = length()
        i += 1
        trees.append([(lab, nodes[p][0] if p is not None else None, ln) for lab, p, ln in nodes])


# ------------------------------------------------------------ list, summary
@pytest.mark.parametrize("name", GOOD)
@pytest.mark.parametrize("axis", ["obst", "vart"])
def test_list(tsrv, tref, name, axis):
    js = assert_json(tsrv.get(store_path(name, axis)))
    ref = trees_of(tref, name, axis)
    assert js["axis"] == axis
    assert sorted(t["key"] for t in js["trees"]) == sorted(ref)
    if name.endswith(".h5td"):  # file order
        assert [t["key"] for t in js["trees"]] == list(ref)
    for t in js["trees"]:
        g = ref[t["key"]]
        assert t["n_nodes"] == g.number_of_nodes()
        assert t["n_edges"] == g.number_of_edges()
        assert set(t["roots"]) == {n for n in g if g.in_degree(n) == 0}
        assert t["n_roots"] == len(t["roots"])
        assert t["n_leaves"] == sum(1 for n in g if g.out_degree(n) == 0)
        assert t["bytes"] > 0
    if ref:
        assert js["bytes"] > 0


@pytest.mark.parametrize("name", GOOD)
def test_summary(tsrv, tref, name):
    t = tref(name)
    js = assert_json(tsrv.get(store_path(name)))
    assert js["kind"] == "treedata"
    assert (js["label"], js["alignment"], js["allow_overlap"]) == \
        (t.label, t.alignment, bool(t.allow_overlap))
    assert sorted(js["obst"]) == sorted(t.obst.keys())
    assert sorted(js["vart"]) == sorted(t.vart.keys())
    assert "notes" not in js


def test_fixture_variety(tref):
    """The fixtures cover what the issue lists."""
    rich, nodes, sub = tref(W.RICH_H5), tref(W.NODES_H5), tref(W.SUBSET_ZARR)
    assert {rich.alignment, nodes.alignment, sub.alignment} == {"leaves", "nodes", "subset"}
    assert {bool(rich.allow_overlap), bool(nodes.allow_overlap)} == {True, False}
    g = rich.obst["t1"]
    kinds = {type(v) for _, a in g.nodes(data=True) for v in a.values()}
    assert {int, float, bool, str, list, dict, type(None)} <= kinds
    assert any("none" not in a for _, a in g.nodes(data=True))
    assert any("none" in a and a["none"] is None for _, a in g.nodes(data=True))
    assert all("length" in a for _, _, a in g.edges(data=True))


# ------------------------------------------------------------ node-link
@pytest.mark.parametrize("name,axis,key", CASES)
def test_node_link(tsrv, tref, name, axis, key):
    g = trees_of(tref, name, axis)[key]
    js = assert_json(tsrv.get(tpath(name, axis, key)))
    assert js["directed"] is True and js["multigraph"] is False and js["graph"] == {}
    h = nx.node_link_graph(js, edges="links")
    assert set(h.nodes) == set(g.nodes)
    assert [n["id"] for n in js["nodes"]] == list(g.nodes)
    for n in g.nodes:
        assert same(h.nodes[n], g.nodes[n]), (n, h.nodes[n], g.nodes[n])
    assert set(h.edges) == set(g.edges)
    for u, v in g.edges:
        assert same(h.edges[u, v], g.edges[u, v]), (u, v)


def test_absent_and_null_distinct(tsrv, tref):
    for name in RICH:
        js = assert_json(tsrv.get(tpath(name, "obst", "t1")))
        by_id = {n["id"]: n for n in js["nodes"]}
        g = tref(name).obst["t1"]
        with_null = [n for n, a in g.nodes(data=True) if "none" in a]
        without = [n for n, a in g.nodes(data=True) if "none" not in a]
        assert with_null and without
        assert all("none" in by_id[n] and by_id[n]["none"] is None for n in with_null)
        assert all("none" not in by_id[n] for n in without)


# ------------------------------------------------------------ newick
@pytest.mark.parametrize("name,axis,key", CASES)
def test_newick(tsrv, tref, name, axis, key):
    g = trees_of(tref, name, axis)[key]
    r = tsrv.get(tpath(name, axis, key), format="newick")
    assert r.status_code == 200, r.text
    assert r.headers["Content-Type"].startswith("text/x-newick")
    trees = parse_newick(r.text)
    roots = [n for n in g if g.in_degree(n) == 0]
    assert len(trees) == len(roots)
    got = {lab: (parent, ln) for t in trees for lab, parent, ln in t}
    assert set(got) == set(g.nodes)
    for n in g.nodes:
        parent, ln = got[n]
        preds = list(g.predecessors(n))
        assert parent == (preds[0] if preds else None)
        want = g.edges[preds[0], n].get("length") if preds else None
        assert (ln is None and want is None) or ln == pytest.approx(want, rel=0, abs=0), n


def test_newick_quoting_and_length_choice(tsrv, tref):
    g = tref(W.RICH_H5).obst["t1"]
    text = tsrv.get(tpath(W.RICH_H5, "obst", "t1"), format="newick").text
    for odd in ["'cell 10'", "'a,b'", "'it''s'", "'(p)'", "'c:1'", ")'42'"]:
        assert odd in text, odd
    assert "x/y" in text and "ünï" in text
    by_w = {lab: ln for lab, _, ln in parse_newick(
        tsrv.get(tpath(W.RICH_H5, "obst", "t1"), format="newick", length="w").text)[0]}
    for u, v, a in g.edges(data=True):
        assert by_w[v] == a["w"]
    none = parse_newick(tsrv.get(tpath(W.RICH_H5, "obst", "t1"), format="newick", length="").text)[0]
    assert all(ln is None for _, _, ln in none)
    r = tsrv.get(tpath(W.RICH_H5, "obst", "t1"), _headers={"Accept": "text/x-newick"})
    assert r.status_code == 200 and r.text.startswith("(")


def test_newick_deep_caterpillar(tsrv):
    r = tsrv.get(tpath(W.DEEP_H5, "obst", "cat"), format="newick")
    assert r.status_code == 200, r.text[:300]
    t = parse_newick(r.text)[0]
    assert len(t) == W.DEEP_N - 1
    parent = {lab: p for lab, p, _ in t}
    assert parent["q1"] == "q0" and parent[f"q{W.DEEP_N // 2 - 1}"] == f"q{W.DEEP_N // 2 - 2}"
    assert r.text.count("(") == W.DEEP_N // 2 - 1


# ------------------------------------------------------------ node
@pytest.mark.parametrize("name,axis,key", CASES)
def test_node(tsrv, tref, name, axis, key):
    g = trees_of(tref, name, axis)[key]
    for n in g.nodes:
        js = assert_json(tsrv.get(tpath(name, axis, key, "nodes", n)))
        preds = list(g.predecessors(n))
        assert js["id"] == n
        assert same(js["attrs"], g.nodes[n])
        assert js["parent"] == (preds[0] if preds else None)
        assert js["children"] == list(g.successors(n))
        assert js["n_children"] == g.out_degree(n)
        assert js["depth"] == nx.shortest_path_length(g, root_of(g, n), n)
        assert js["is_leaf"] is (g.out_degree(n) == 0)
        assert js["n_leaves"] == len(leaves_under(g, n))
        assert js["n_descendants"] == len(nx.descendants(g, n))
        if preds:
            assert same(js["edge_attrs"], g.edges[preds[0], n])
        else:
            assert js["edge_attrs"] is None


def test_unknown_tree_and_node(tsrv):
    assert_problem(tsrv.get(tpath(W.RICH_H5, "obst", "nope")), 404, detail_contains="nope")
    assert_problem(tsrv.get(tpath(W.RICH_H5, "obst", "t1", "nodes", "nope")), 404,
                   detail_contains="nope")
    assert_problem(tsrv.get(tpath(W.RICH_H5, "obst", "t1", "ancestors"), node="zz"), 404,
                   detail_contains="zz")
    assert_problem(tsrv.get(tpath(W.RICH_H5, "obst", "t1", "lca"), nodes="c0,zz"), 404)
    assert_problem(tsrv.get(tpath(W.RICH_H5, "obst", "t1"), bogus=1), 400)
    assert_problem(tsrv.get(tpath(W.RICH_H5, "obst", "t1", "ancestors")), 400)
    assert_problem(tsrv.get(tpath(W.RICH_H5, "obst", "t1", "subtree"), depth="-1"), 400)
    assert_problem(tsrv.get(tpath(W.RICH_H5, "obst", "t1", "frob")), 404)
    assert_problem(tsrv.get(tpath(W.RICH_H5, "obst", "t1"), format="csv"), 406)


# ------------------------------------------------------------ subtree, ancestors, leaves
@pytest.mark.parametrize("name", [W.RICH_H5, W.RICH_ZARR])
def test_subtree(tsrv, tref, name):
    g = tref(name).obst["t1"]
    internal = [n for n in g if g.out_degree(n) > 0]
    for root in internal[:8]:
        for depth in (None, 0, 1, 2):
            js = assert_json(tsrv.get(tpath(name, "obst", "t1", "subtree"), root=root, depth=depth))
            lengths = nx.single_source_shortest_path_length(g, root, cutoff=depth)
            h = nx.node_link_graph(js, edges="links")
            assert set(h.nodes) == set(lengths)
            assert set(h.edges) == {(u, v) for u, v in g.edges if u in lengths and v in lengths}
            assert js["nodes"][0]["id"] == root and js["root"] == root
            for n in h.nodes:
                assert same(h.nodes[n], g.nodes[n])
    # no root: the whole tree
    js = assert_json(tsrv.get(tpath(name, "obst", "t1", "subtree")))
    assert len(js["nodes"]) == g.number_of_nodes()
    # newick of a clade
    root = internal[0]
    t = parse_newick(tsrv.get(tpath(name, "obst", "t1", "subtree"), root=root, format="newick").text)[0]
    assert {lab for lab, _, _ in t} == nx.descendants(g, root) | {root}


def test_subtree_max_nodes(tsrv, tref):
    g = tref(W.RICH_H5).obst["t1"]
    root = next(n for n in g if g.in_degree(n) == 0)
    body = assert_problem(tsrv.get(tpath(W.RICH_H5, "obst", "t1", "subtree"), root=root, max_nodes=5), 413)
    assert "depth" in body["detail"] and "max_nodes" in body["detail"]
    assert_problem(tsrv.get(tpath(W.RICH_H5, "obst", "t1", "subtree"), root=root, depth=3, max_nodes=5), 413)
    js = assert_json(tsrv.get(tpath(W.RICH_H5, "obst", "t1", "subtree"), root=root, depth=1, max_nodes=3))
    assert len(js["nodes"]) == 3


@pytest.mark.parametrize("name,axis,key", CASES)
def test_ancestors_and_leaves(tsrv, tref, name, axis, key):
    g = trees_of(tref, name, axis)[key]
    for n in g.nodes:
        js = assert_json(tsrv.get(tpath(name, axis, key, "ancestors"), node=n))
        want = nx.shortest_path(g, root_of(g, n), n)
        assert [p["id"] for p in js["path"]] == want
        assert set(want[:-1]) == nx.ancestors(g, n)
        assert [p["depth"] for p in js["path"]] == list(range(len(want)))
        js = assert_json(tsrv.get(tpath(name, axis, key, "leaves"), node=n))
        ids = [p["id"] for p in js["leaves"]]
        assert len(ids) == len(set(ids)) == js["n_leaves"]
        assert set(ids) == leaves_under(g, n)
    js = assert_json(tsrv.get(tpath(name, axis, key, "leaves")))
    assert {p["id"] for p in js["leaves"]} == {n for n in g if g.out_degree(n) == 0}


def test_leaves_max_nodes(tsrv):
    body = assert_problem(tsrv.get(tpath(W.RICH_H5, "obst", "t1", "leaves"), max_nodes=3), 413)
    assert "node=" in body["detail"]


# ------------------------------------------------------------ lca
@pytest.mark.parametrize("name,axis,key", CASES)
def test_lca(tsrv, tref, name, axis, key):
    g = trees_of(tref, name, axis)[key]
    nodes = list(g.nodes)
    pairs = list(itertools.combinations(nodes, 2))[::7][:40] + [(nodes[0], nodes[0])]
    for pair in pairs:
        r1, r2 = root_of(g, pair[0]), root_of(g, pair[1])
        want = nx.lowest_common_ancestor(g, *pair) if r1 == r2 else None
        js = assert_json(tsrv.post(tpath(name, axis, key, "lca"), {"nodes": list(pair)}))
        assert (js["lca"]["id"] if js["lca"] else None) == want, pair
    trio = nodes[-3:]
    if len({root_of(g, n) for n in trio}) == 1:
        want = reduce(lambda a, b: nx.lowest_common_ancestor(g, a, b), trio)
        ids = ",".join(trio)
        if "," not in "".join(trio):
            js = assert_json(tsrv.get(tpath(name, axis, key, "lca"), nodes=ids))
        else:
            js = assert_json(tsrv.post(tpath(name, axis, key, "lca"), {"nodes": trio}))
        assert js["lca"]["id"] == want
        assert js["nodes"] == trio


def test_lca_comma_in_id_by_post(tsrv, tref):
    g = tref(W.RICH_H5).obst["t1"]
    js = assert_json(tsrv.post(tpath(W.RICH_H5, "obst", "t1", "lca"), {"nodes": ["a,b", "it's"]}))
    assert js["lca"]["id"] == nx.lowest_common_ancestor(g, "a,b", "it's")
    assert_problem(tsrv.get(tpath(W.RICH_H5, "obst", "t1", "lca"), nodes="a,b"), 404)


# ------------------------------------------------------------ viewport
def layout(g):
    """x = sum of lengths from the root (depth when some edge lacks one),
    y of leaves = rank in preorder."""
    uses_length = all(isinstance(a.get("length"), (int, float)) and a["length"] >= 0
                      for _, _, a in g.edges(data=True))
    x, rank = {}, {}
    for r in [n for n in g if g.in_degree(n) == 0]:
        for n in nx.dfs_preorder_nodes(g, r):
            p = list(g.predecessors(n))
            x[n] = 0.0 if not p else x[p[0]] + (g.edges[p[0], n]["length"] if uses_length else 1)
            if g.out_degree(n) == 0:
                rank[n] = len(rank)
    return x, rank, uses_length


@pytest.mark.parametrize("name", [W.RICH_H5, W.RICH_ZARR, W.SUBSET_ZARR])
def test_viewport_whole(tsrv, tref, name):
    key = "s" if name == W.SUBSET_ZARR else "t1"
    g = tref(name).obst[key]
    js = assert_json(tsrv.get(tpath(name, "obst", key, "viewport"), max_nodes=10000))
    x, rank, uses = layout(g)
    assert js["uses_length"] is uses and js["truncated"] is False
    assert {n["id"] for n in js["nodes"]} == set(g.nodes)
    for n in js["nodes"]:
        assert n["x"] == pytest.approx(x[n["id"]])
        if n["is_leaf"]:
            assert n["y"] == rank[n["id"]]
        assert n["collapsed"] is False
    assert js["extent"]["y1"] == len(rank) - 1


def test_viewport_collapses(tsrv, tref):
    g = tref(W.RICH_H5).obst["t1"]
    x, rank, _ = layout(g)
    js = assert_json(tsrv.get(tpath(W.RICH_H5, "obst", "t1", "viewport"), max_nodes=6))
    assert js["truncated"] is True
    assert 0 < len(js["nodes"]) <= 6
    covered = set()
    for n in js["nodes"]:
        if n["collapsed"]:
            under = leaves_under(g, n["id"])
            assert n["n_leaves"] == len(under)
            assert sorted(rank[m] for m in under) == list(range(n["y_min"], n["y_max"] + 1))
            covered |= under
        elif n["is_leaf"]:
            covered.add(n["id"])
    assert covered == set(rank)
    # a box: only what lies inside (or clades reaching into it)
    js = assert_json(tsrv.get(tpath(W.RICH_H5, "obst", "t1", "viewport"), x0=0, x1=1e9, y0=2, y1=4,
                              max_nodes=10000))
    inside = {n for n in g if 2 <= (rank.get(n, -1)) <= 4}
    got = {n["id"] for n in js["nodes"]}
    assert inside <= got
    for n in js["nodes"]:
        assert 2 <= n["y"] <= 4
    assert_problem(tsrv.get(tpath(W.RICH_H5, "obst", "t1", "viewport"), x0=2, x1=1), 400)


# ------------------------------------------------------------ obs / var joins
@pytest.mark.parametrize("name", RICH)
def test_obs_columns_leaves_alignment(tsrv, tref, name):
    t = tref(name)
    g = t.obst["t1"]
    js = assert_json(tsrv.get(tpath(name, "obst", "t1"), obs_columns="score,kind,n,name"))
    for n in js["nodes"]:
        if g.out_degree(n["id"]) == 0:
            row = t.obs.loc[n["id"]]
            assert n["obs"]["score"] == pytest.approx(float(row["score"]))
            assert n["obs"]["kind"] == str(row["kind"])
            assert n["obs"]["n"] == int(row["n"])
            assert n["obs"]["name"] == row["name"]
        else:
            assert "obs" not in n
    js = assert_json(tsrv.get(tpath(name, "obst", "t1", "leaves"), obs_columns="kind"))
    assert all(leaf["obs"]["kind"] == str(t.obs.loc[leaf["id"], "kind"]) for leaf in js["leaves"])
    js = assert_json(tsrv.get(tpath(name, "vart", "v1", "nodes", "g2"), var_columns="mean"))
    assert js["var"]["mean"] == pytest.approx(float(t.var.loc["g2", "mean"]))
    assert_problem(tsrv.get(tpath(name, "vart", "v1"), obs_columns="score"), 400,
                   detail_contains="var_columns")
    assert_problem(tsrv.post(tpath(name, "obst", "t1"), {"var_columns": "mean"}), 400,
                   detail_contains="obs_columns")
    js = assert_json(tsrv.post(tpath(name, "obst", "t1", "lca"), {"nodes": ["c0", "c1"],
                                                                  "obs_columns": ["kind"]}))
    assert js["lca"]["id"] == nx.lowest_common_ancestor(t.obst["t1"], "c0", "c1")
    assert_problem(tsrv.get(tpath(name, "obst", "t1"), obs_columns="nope"), 404,
                   detail_contains="nope")


def test_obs_columns_nodes_alignment(tsrv, tref):
    t = tref(W.NODES_H5)
    for key in ("g1", "g2"):
        js = assert_json(tsrv.get(tpath(W.NODES_H5, "obst", key), obs_columns="v"))
        for n in js["nodes"]:
            assert n["obs"]["v"] == float(t.obs.loc[n["id"], "v"])
    js = assert_json(tsrv.get(tpath(W.NODES_H5, "obst", "g1", "ancestors"), node="a2", obs_columns="v"))
    assert [p["obs"]["v"] for p in js["path"]] == [float(t.obs.loc[n, "v"]) for n in ("r", "a", "a2")]


def test_obs_columns_subset_alignment(tsrv, tref):
    t = tref(W.SUBSET_ZARR)
    js = assert_json(tsrv.get(tpath(W.SUBSET_ZARR, "obst", "s"), obs_columns="v"))
    got = {n["id"]: n.get("obs") for n in js["nodes"]}
    assert got["s0"] == {"v": 1.0} and got["s1"] == {"v": 2.0}
    assert got["top"] is None and got["u"] is None
    assert t.obs.loc["s0", "v"] == 1.0


# ------------------------------------------------------------ limits
def test_max_nodes_whole_tree(tsrv):
    body = assert_problem(tsrv.get(tpath(W.DEEP_H5, "obst", "cat"), max_nodes=1000), 413)
    assert "subtree" in body["detail"] and "viewport" in body["detail"]
    js = assert_json(tsrv.get(tpath(W.DEEP_H5, "obst", "cat")))
    assert len(js["nodes"]) == W.DEEP_N - 1
    assert_problem(tsrv.get(tpath(W.DEEP_H5, "obst", "cat"), max_nodes=0), 400)


def test_response_limit(troot, server_factory):
    srv = server_factory(troot, "--max-response-bytes", "100000")
    body = assert_problem(srv.get(tpath(W.DEEP_H5, "obst", "cat")), 413)
    assert "subtree" in body["detail"]
    assert_problem(srv.get(tpath(W.DEEP_H5, "obst", "cat"), format="newick"), 413)
    assert_problem(srv.get(tpath(W.DEEP_H5, "obst", "cat", "leaves")), 413)
    js = assert_json(srv.get(tpath(W.DEEP_H5, "obst", "cat", "subtree"), root="q0", depth=3))
    assert len(js["nodes"]) == 7


def test_deep_queries(tsrv):
    last = f"q{W.DEEP_N // 2 - 1}"
    js = assert_json(tsrv.get(tpath(W.DEEP_H5, "obst", "cat", "nodes", last)))
    assert js["depth"] == W.DEEP_N // 2 - 1 and js["is_leaf"] is True
    js = assert_json(tsrv.get(tpath(W.DEEP_H5, "obst", "cat", "lca"), nodes=f"{last},leaf3"))
    assert js["lca"]["id"] == "q3"
    js = assert_json(tsrv.get(tpath(W.DEEP_H5, "obst", "cat", "ancestors"), node=last))
    assert len(js["path"]) == W.DEEP_N // 2
    js = assert_json(tsrv.get(tpath(W.DEEP_H5, "obst", "cat", "viewport"), max_nodes=50))
    assert len(js["nodes"]) <= 50 and js["truncated"] is True


# ------------------------------------------------------------ bad trees
@pytest.mark.parametrize("name", sorted(W.BAD))
def test_bad_trees_422(tsrv, name):
    for path in (store_path(name, "obst"), store_path(name, "obst", "t1"),
                 store_path(name, "obst", "t1", "nodes", "c0")):
        body = assert_problem(tsrv.get(path), 422)
        nodes = W.BAD[name]
        if nodes:
            assert any(f"'{n}'" in body["detail"] for n in nodes), body
    # the store itself and the other stores keep answering
    js = assert_json(tsrv.get(store_path(name)))
    assert js["obst"] == [] and any("obst" in n for n in js["notes"])
    assert assert_json(tsrv.get(store_path(W.RICH_H5, "obst")))["trees"]
    assert_json(tsrv.get(store_path(name, "obs")))


def test_bad_garbage_answers_the_same_422_every_time(tsrv):
    # The failure is remembered per store version (how fast that makes the
    # repeats is for bench/, not for a test): every answer is the same 422.
    first = assert_problem(tsrv.get(store_path("bad_garbage.h5td", "obst")), 422)
    for _ in range(5):
        again = assert_problem(tsrv.get(store_path("bad_garbage.h5td", "obst")), 422,
                               detail_contains="invalid tree JSON")
        assert again["detail"] == first["detail"]
    assert tsrv.get("/healthz").status_code == 200


# ------------------------------------------------------------ concurrency, metrics
def test_concurrent_first_requests(troot, server_factory):
    srv = server_factory(troot)
    path = tpath(W.DEEP_H5, "obst", "cat", "nodes", "q100")

    def one(_):
        r = srv.session.get(srv.url(path), timeout=30)
        return r.status_code, r.text
    with concurrent.futures.ThreadPoolExecutor(8) as ex:
        out = list(ex.map(one, range(16)))
    assert {s for s, _ in out} == {200}
    assert len({t for _, t in out}) == 1
    metrics = srv.get("/metrics").text
    m = re.search(r"^cellar_cache_bytes (\d+)", metrics, re.M)
    assert m and int(m.group(1)) > 0


def test_mod_prefix_and_raw(tsrv):
    assert_problem(tsrv.get(store_path(W.RICH_H5, "raw", "obst")), 404)
    assert_problem(tsrv.get(store_path(W.RICH_H5, "mod", "x", "obst")), 404)
