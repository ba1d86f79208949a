"""The Taxonium backend protocol ({ad}/{obst|vart}/{key}/taxonium/...) over
TreeData stores written by treedata (and the example tree), compared with
the trees treedata reads back (networkx) and the obs / var frames anndata
reads: config/, nodes/ (a zoomed box holds every node inside it or an
ancestor that stands for it; sorted by y), search/, node_details/,
tip_atts, mutations/ (server-sent events) and nextstrain_json/{node_id}."""

from __future__ import annotations

import hashlib
import json
import math
import secrets
import warnings
from pathlib import Path

import networkx as nx
import numpy as np
import pandas as pd
import pytest
import requests
import treedata as td

import tree_writers as W
from conftest import assert_json, assert_problem, store_path

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
BIG_H5, BIG_ZARR = "big.h5td", "big.zarr"
BIG_LEAVES = 6000        # 12,299 nodes: past 10,000, where Taxonium's y scale changes
STAR_CHILDREN = 300      # one node with this many leaf children (siblings to merge)
ROWS = 2000


# ------------------------------------------------------------ fixtures
def big_tree(rng) -> tuple[nx.DiGraph, list[str]]:
    """A random binary tree by coalescence over cells c0..; one internal
    node also gets STAR_CHILDREN more leaves; every edge a `length`."""
    leaves = [f"c{i}" for i in range(BIG_LEAVES)]
    pool = list(leaves)
    g = nx.DiGraph()
    k = 0
    while len(pool) > 1:
        a = pool.pop(int(rng.integers(len(pool))))
        b = pool.pop(int(rng.integers(len(pool))))
        p = f"n{k}"
        k += 1
        for c in (a, b):
            g.add_edge(p, c, length=float(np.round(rng.exponential(0.1) + 0.001, 4)))
        pool.append(p)
    hub = "n" + str(k // 2)
    star = [f"s{i}" for i in range(STAR_CHILDREN)]
    for s in star:
        g.add_edge(hub, s, length=float(np.round(rng.random() * 0.5 + 0.01, 4)))
    for n in g.nodes:
        g.nodes[n]["depthish"] = len(n)
    return g, leaves + star


@pytest.fixture(scope="module")
def xroot(tmp_path_factory):
    warnings.filterwarnings("ignore")
    root = tmp_path_factory.mktemp("taxonium")
    W.write_tree_root(root)
    rng = np.random.default_rng(11)
    g, cells = big_tree(rng)
    obs = pd.DataFrame({
        "kind": pd.Categorical(rng.choice(["alpha", "Beta", "gamma"], len(cells))),
        "score": rng.random(len(cells)),
        "count": rng.integers(0, 50, len(cells)),
        "label": [f"Lab-{i % 97}" for i in range(len(cells))],
    }, index=cells)
    t = td.TreeData(obs=obs, obst={"big": g}, label=None, alignment="leaves",
                    allow_overlap=False)
    t.write_h5td(root / BIG_H5)
    t.write_zarr(root / BIG_ZARR)
    for name in ("lineage.h5td", "lineage.zarr"):
        dst = root / name
        if (EXAMPLES / name).is_dir():
            import shutil
            shutil.copytree(EXAMPLES / name, dst)
        else:
            dst.write_bytes((EXAMPLES / name).read_bytes())
    return root


@pytest.fixture(scope="module")
def xsrv(xroot, server_factory):
    return server_factory(xroot)


@pytest.fixture(scope="module")
def xref(xroot):
    cache = {}

    def get(name):
        if name not in cache:
            cache[name] = W.read_trees(xroot / name)
        return cache[name]
    return get


def get_tx(srv, store, axis, key, op, **params):
    params.setdefault("sid", "null")
    return srv.get(store_path(store, axis, key, "taxonium", op) + "/", **params)


# ------------------------------------------------------------ reference layout
class Layout:
    """The layout the tree routes document: x = sum of lengths from the root
    (depth when some edge lacks a length), leaves get their rank in
    preorder, an internal node the mean of its first and last child's y."""

    def __init__(self, g: nx.DiGraph):
        self.g = g
        self.uses_length = all(isinstance(a.get("length"), (int, float)) and a["length"] >= 0
                               for _, _, a in g.edges(data=True))
        self.x, self.y, self.lo, self.hi, self.xmax, self.parent = {}, {}, {}, {}, {}, {}
        rank = 0
        self.roots = [n for n in g if g.in_degree(n) == 0]
        for r in self.roots:
            order = list(nx.dfs_preorder_nodes(g, r))
            for n in order:
                p = next(iter(g.predecessors(n)), None)
                self.parent[n] = p
                self.x[n] = 0.0 if p is None else self.x[p] + (
                    g.edges[p, n]["length"] if self.uses_length else 1)
                if g.out_degree(n) == 0:
                    self.y[n] = self.lo[n] = self.hi[n] = rank
                    rank += 1
            for n in reversed(order):
                kids = list(g.successors(n))
                if kids:
                    self.y[n] = (self.y[kids[0]] + self.y[kids[-1]]) / 2
                    self.lo[n], self.hi[n] = self.lo[kids[0]], self.hi[kids[-1]]
                    self.xmax[n] = max([self.x[n]] + [self.xmax[c] for c in kids])
                else:
                    self.xmax[n] = self.x[n]
        self.n_leaves = rank
        self.max_x = max(self.xmax[r] for r in self.roots)

    def scales(self):
        n = self.g.number_of_nodes()
        return 600 / self.max_x, 2400 / (n if n > 10000 else n * 0.6666)


def node_names(answer):
    return {n["node_id"]: n["name"] for n in answer}


def check_nodes_answer(lay: Layout, js: dict, obs: pd.DataFrame | None = None):
    """What every nodes/ answer must be: Taxonium node objects at the scaled
    layout, sorted by y, each with its parent present."""
    sx, sy = lay.scales()
    nodes = js["nodes"]
    by_id = node_names(nodes)
    ys = [n["y"] for n in nodes]
    assert ys == sorted(ys)
    names = set()
    for n in nodes:
        name = n["name"]
        assert name not in names
        names.add(name)
        # rounded to 5 and 6 decimals, as Taxonium's backend sends them
        assert n["x_dist"] == round(lay.x[name] * sx, 5) or \
            abs(n["x_dist"] - lay.x[name] * sx) <= 5.000001e-6
        assert n["y"] == round(lay.y[name] * sy, 6) or abs(n["y"] - lay.y[name] * sy) <= 5.000001e-7
        assert n["num_tips"] == lay.hi[name] - lay.lo[name] + 1
        assert n["is_tip"] is (lay.g.out_degree(name) == 0)
        assert n["mutations"] == []
        p = lay.parent[name]
        if p is None:
            assert n["parent_id"] == n["node_id"]
        else:
            assert by_id[n["parent_id"]] == p      # the parent is in the answer
        if obs is not None:
            if lay.g.out_degree(name) == 0 and name in obs.index:
                row = obs.loc[name]
                for col in obs.columns:
                    want = row[col]
                    got = n["meta_" + col]
                    if isinstance(want, (float, np.floating)):
                        assert got == pytest.approx(float(want))
                    elif isinstance(want, (int, np.integer)):
                        assert got == int(want)
                    else:
                        assert got == str(want)
            else:
                assert not any(k.startswith("meta_") for k in n)
    return names


def check_box_guarantee(lay: Layout, js: dict):
    """Every node inside the box is in the answer, or its nearest ancestor in
    the answer stands for it: collapsed with its whole clade in one bin, or
    the node's clade hanging from it lies in one bin beside a kept sibling
    clade of the same bin reaching at least as far right."""
    sx, sy = lay.scales()
    b = js["bins"]
    rows = b["rows"]
    assert rows == ROWS
    ty0, ty1 = b["min_y"] / sy, b["max_y"] / sy
    h = (ty1 - ty0) / rows

    def row(y):
        if y < ty0:
            return -1
        if y > ty1:
            return rows
        if h <= 0:
            return 0
        return min(math.floor((y - ty0) / h), rows - 1)

    def thin(v):
        return row(lay.lo[v]) == row(lay.hi[v])

    got = {n["name"] for n in js["nodes"]}
    collapsed = {n["name"] for n in js["nodes"] if n.get("collapsed")}
    for n in js["nodes"]:
        if n.get("collapsed"):
            assert thin(n["name"]) or lay.x[n["name"]] * sx > b["max_x"]
            assert not n["is_tip"]
    inside = [u for u in lay.g if b["min_x"] <= lay.x[u] * sx <= b["max_x"]
              and b["min_y"] <= lay.y[u] * sy <= b["max_y"]]
    stood_for = 0
    for u in inside:
        if u in got:
            continue
        stood_for += 1
        path = [u]
        while path[-1] not in got:
            path.append(lay.parent[path[-1]])
            assert path[-1] is not None, f"{u}: no ancestor in the answer"
        a = path[-1]
        if a in collapsed:
            continue
        c = path[-2]
        assert thin(c), (u, a, c)
        r = row(lay.lo[c])
        kept = [k for k in lay.g.successors(a) if k in got and thin(k) and row(lay.lo[k]) == r]
        assert kept, (u, a, c)
        assert max(lay.xmax[k] for k in kept) >= lay.xmax[c]
    return inside, stood_for


# ------------------------------------------------------------ config/
@pytest.mark.parametrize("name", [BIG_H5, BIG_ZARR])
def test_config(xsrv, xref, name):
    t = xref(name)
    lay = Layout(t.obst["big"])
    js = assert_json(get_tx(xsrv, name, "obst", "big", "config"))
    sx, sy = lay.scales()
    assert js["num_nodes"] == lay.g.number_of_nodes()
    assert js["num_tips"] == lay.n_leaves
    assert js["x_scale"] == pytest.approx(sx) and js["y_scale"] == pytest.approx(sy)
    assert js["overallMaxX"] == pytest.approx(600)
    assert js["overallMaxY"] == pytest.approx((lay.n_leaves - 1) * sy)
    assert js["initial_x"] == pytest.approx(300)
    assert js["initial_y"] == pytest.approx(js["overallMaxY"] / 2)
    assert js["initial_zoom"] == -2
    assert js["useHydratedMutations"] is False and js["rootMutations"] == [] and js["genes"] == []
    assert js["name_accessor"] == "name" and js["x_accessors"] == ["x_dist"]
    metas = ["meta_" + c for c in t.obs.columns]
    assert js["keys_to_display"] == metas
    assert js["colorBy"]["colorByOptions"] == metas + ["None"]
    assert js["defaultColorByField"] == "meta_kind"
    types = {s["name"]: s["type"] for s in js["search_types"]}
    assert types == {"name": "text_match", "meta_kind": "text_match", "meta_score": "number",
                     "meta_count": "number", "meta_label": "text_match", "num_tips": "number",
                     "boolean": "boolean"}
    assert {s["name"]: s["label"] for s in js["search_types"]}["meta_kind"] == "Kind"
    # rootId is the root's node_id: the node that is its own parent
    nodes = assert_json(get_tx(xsrv, name, "obst", "big", "nodes"))["nodes"]
    root = [n for n in nodes if n["parent_id"] == n["node_id"]]
    assert [n["name"] for n in root] == lay.roots
    assert js["rootId"] == root[0]["node_id"]


def test_config_vart_and_small_scale(xsrv, xref):
    t = xref(W.RICH_H5)
    js = assert_json(get_tx(xsrv, W.RICH_H5, "vart", "v1", "config"))
    assert js["keys_to_display"] == ["meta_" + c for c in t.var.columns]
    lay = Layout(t.vart["v1"])
    assert js["y_scale"] == pytest.approx(2400 / (lay.g.number_of_nodes() * 0.6666))
    nodes = assert_json(get_tx(xsrv, W.RICH_H5, "vart", "v1", "nodes"))
    check_nodes_answer(lay, nodes, t.var)
    assert {n["name"] for n in nodes["nodes"]} == set(lay.g.nodes)
    js = assert_json(get_tx(xsrv, W.DEEP_H5, "obst", "cat", "config"))
    metas = ["meta_" + c for c in xref(W.DEEP_H5).obs.columns]
    assert js["keys_to_display"] == metas and js["colorBy"]["colorByOptions"] == metas + ["None"]
    assert ("colorMapping" in js) is (not metas)


# ------------------------------------------------------------ nodes/
@pytest.mark.parametrize("name", [BIG_H5, BIG_ZARR])
def test_nodes_whole_tree_thinned(xsrv, xref, name):
    t = xref(name)
    lay = Layout(t.obst["big"])
    js = assert_json(get_tx(xsrv, name, "obst", "big", "nodes", type="leaves"))
    check_nodes_answer(lay, js, t.obs)
    inside, stood_for = check_box_guarantee(lay, js)
    assert len(inside) == lay.g.number_of_nodes()
    assert js["thinned"] is True and stood_for > 0
    # about 2000 bins plus their ancestors: well under the whole tree
    assert len(js["nodes"]) < 0.7 * lay.g.number_of_nodes()
    # the star's leaves in one bin were merged
    hub = next(n for n in lay.g if lay.g.out_degree(n) > 2)
    kept = [c for c in lay.g.successors(hub) if c in {n["name"] for n in js["nodes"]}]
    assert len(kept) < STAR_CHILDREN / 2


@pytest.mark.parametrize("box", [
    (0, 600, 300.5, 900.25),          # a band of the y range, all x
    (120.3, 410.7, 1000.1, 1900.9),   # zoomed in on x and y
    (250.0, 260.0, 0, 2400),          # a narrow column: clades pass through it
    (0, 600, 1200.2, 1231.7),         # thin enough that every node has its own bin
    (-500, 90000, -1e6, 1e9),         # past the extent: clamped to it
])
def test_nodes_zoomed_box(xsrv, xref, box):
    t = xref(BIG_H5)
    lay = Layout(t.obst["big"])
    x0, x1, y0, y1 = box
    js = assert_json(get_tx(xsrv, BIG_H5, "obst", "big", "nodes", type="leaves",
                            min_x=x0, max_x=x1, min_y=y0, max_y=y1, xType="x_dist"))
    sx, sy = lay.scales()
    b = js["bins"]
    assert b["min_x"] == max(x0, 0) and b["max_x"] == pytest.approx(min(x1, 600))
    assert b["min_y"] == max(y0, 0) and b["max_y"] == pytest.approx(min(y1, (lay.n_leaves - 1) * sy))
    check_nodes_answer(lay, js, t.obs)
    inside, _ = check_box_guarantee(lay, js)
    assert inside
    got = {n["name"] for n in js["nodes"]}
    if (y1 - y0) / sy / ROWS < 1 and x0 <= 0 and x1 >= 600:
        # bins finer than the leaves: nothing thinned, and exactly the
        # clades that reach into the y range are there
        assert js["thinned"] is False
        want = {v for v in lay.g if lay.lo[v] <= b["max_y"] / sy and lay.hi[v] >= b["min_y"] / sy}
        assert got == want
        assert set(inside) <= got


def test_nodes_same_for_h5_and_zarr(xsrv):
    for params in ({}, {"min_x": 10, "max_x": 500, "min_y": 40, "max_y": 700}):
        a = assert_json(get_tx(xsrv, BIG_H5, "obst", "big", "nodes", **params))
        b = assert_json(get_tx(xsrv, BIG_ZARR, "obst", "big", "nodes", **params))
        assert a == b
    a = assert_json(get_tx(xsrv, "lineage.h5td", "obst", "lineage", "nodes"))
    b = assert_json(get_tx(xsrv, "lineage.zarr", "obst", "lineage", "nodes"))
    assert a == b


@pytest.mark.parametrize("name,key", [(W.RICH_H5, "t1"), (W.RICH_ZARR, "t2"), (W.NODES_H5, "g1"),
                                      (W.SUBSET_ZARR, "s"), ("lineage.h5td", "lineage")])
def test_nodes_small_trees_whole(xsrv, xref, name, key):
    t = xref(name)
    lay = Layout(t.obst[key])
    js = assert_json(get_tx(xsrv, name, "obst", key, "nodes", type="leaves"))
    check_nodes_answer(lay, js)
    assert {n["name"] for n in js["nodes"]} == set(lay.g.nodes)
    assert js["thinned"] is False
    # meta_*: every node that names an obs row (alignment nodes: every node)
    ad = t.obs
    for n in js["nodes"]:
        named = n["name"] in ad.index and (t.alignment != "leaves" or n["is_tip"])
        assert any(k.startswith("meta_") for k in n) is (named and len(ad.columns) > 0)


def test_nodes_caterpillar(xsrv):
    """A caterpillar of 30,000 nodes: the spine is what draws it."""
    js = assert_json(get_tx(xsrv, W.DEEP_H5, "obst", "cat", "nodes"))
    names = [n["name"] for n in js["nodes"]]
    assert len(names) == len(set(names))
    by_id = node_names(js["nodes"])
    for n in js["nodes"]:
        assert n["parent_id"] == n["node_id"] or n["parent_id"] in by_id
    assert sum(1 for x in names if x.startswith("q")) > 10000


def test_nodes_errors(xsrv):
    p = (BIG_H5, "obst", "big", "nodes")
    assert_problem(get_tx(xsrv, *p, min_x=5, max_x=1), 400, detail_contains="min_x")
    assert_problem(get_tx(xsrv, *p, min_y="abc"), 400, detail_contains="min_y")
    assert_problem(get_tx(xsrv, *p, xType="x_time"), 400, detail_contains="x_dist")
    assert_problem(get_tx(xsrv, *p, bogus=1), 400, detail_contains="bogus")
    assert_problem(get_tx(xsrv, BIG_H5, "obst", "nope", "nodes"), 404, detail_contains="nope")
    assert_problem(get_tx(xsrv, BIG_H5, "vart", "big", "nodes"), 404)
    assert_problem(xsrv.get(store_path(BIG_H5, "obst", "big", "taxonium", "bogus")), 404)
    # a box beside the tree holds nothing
    js = assert_json(get_tx(xsrv, *p, min_y=1e6, max_y=2e6))
    assert js["nodes"] == []
    # the client's exact URL shape: trailing slash, sid, type
    r = xsrv.get(store_path(BIG_H5, "obst", "big", "taxonium", "nodes") +
                 "/?type=leaves&sid=1234&min_x=1&max_x=2&min_y=3&max_y=4&xType=x_dist")
    assert_json(r)


# ------------------------------------------------------------ search/
def search(srv, store, key, spec, **params):
    # Taxonium sends the spec's JSON text as a JSON string
    return assert_json(get_tx(srv, store, "obst", key, "search",
                              json=json.dumps(json.dumps(spec)), xType="x_dist", **params))


def names_of(res):
    return {n["name"] for n in res["data"]}


def test_search(xsrv, xref):
    t = xref(BIG_H5)
    g, obs = t.obst["big"], t.obs
    lay = Layout(g)
    r = search(xsrv, BIG_H5, "big", {"key": "k", "type": "name", "method": "text_match",
                                     "text": "C59"})
    assert r["type"] == "complete"
    assert names_of(r) == {n for n in g if "c59" in n.lower()} and r["total_count"] == len(r["data"])
    r = search(xsrv, BIG_H5, "big", {"type": "meta_kind", "method": "text_exact", "text": "beta"})
    assert names_of(r) == set(obs.index[obs["kind"] == "Beta"])
    for n in r["data"]:
        assert n["meta_kind"] == "Beta" and n["y"] == pytest.approx(lay.y[n["name"]] * lay.scales()[1])
    r = search(xsrv, BIG_H5, "big", {"type": "meta_label", "method": "text_per_line",
                                     "text": "lab-3\n  LAB-5 \n\nnope"})
    assert names_of(r) == set(obs.index[obs["label"].isin(["Lab-3", "Lab-5"])])
    r = search(xsrv, BIG_H5, "big", {"type": "meta_score", "method": "number", "number": "0.9",
                                     "number_method": ">="})
    assert names_of(r) == set(obs.index[obs["score"] >= 0.9])
    r = search(xsrv, BIG_H5, "big", {"type": "num_tips", "method": "number", "number": 1000,
                                     "number_method": ">"})
    assert names_of(r) == {n for n in g if lay.hi[n] - lay.lo[n] + 1 > 1000}
    spec = {"type": "boolean", "boolean_method": "and", "subspecs": [
        {"type": "meta_kind", "method": "text_match", "text": "ALPHA"},
        {"type": "boolean", "boolean_method": "not", "subspecs": [
            {"type": "meta_count", "method": "number", "number": "10", "number_method": "<"}]}]}
    r = search(xsrv, BIG_H5, "big", spec)
    assert names_of(r) == set(obs.index[(obs["kind"] == "alpha") & ~(obs["count"] < 10)])
    spec = {"type": "boolean", "boolean_method": "or", "subspecs": [
        {"type": "name", "method": "text_exact", "text": "c1"},
        {"type": "name", "method": "text_exact", "text": "n0"}]}
    assert names_of(search(xsrv, BIG_H5, "big", spec)) == {"c1", "n0"}
    # an empty text, an unknown field and mutation searches find nothing
    for spec in ({"type": "name", "method": "text_match", "text": ""},
                 {"type": "meta_nope", "method": "text_match", "text": "a"},
                 {"type": "mutation", "method": "mutation", "gene": "S", "position": 501,
                  "new_residue": "Y", "min_tips": 0}):
        r = search(xsrv, BIG_H5, "big", spec)
        assert r == {"type": "complete", "total_count": 0, "data": []}


def test_search_over_10000_is_filtered(xsrv, xref):
    t = xref(BIG_H5)
    lay = Layout(t.obst["big"])
    sx, sy = lay.scales()
    spec = {"type": "num_tips", "method": "number", "number": "1", "number_method": ">="}
    r = search(xsrv, BIG_H5, "big", spec, min_x=0, max_x=600, min_y=100, max_y=900)
    assert r["type"] == "filtered" and r["total_count"] == lay.g.number_of_nodes()
    assert 0 < len(r["data"]) < r["total_count"]
    cells = set()
    for n in r["data"]:
        assert 100 < n["y"] < 900
        cell = (round(n["x_dist"] * 2000 / 600 / 5), round(n["y"] * 2000 / 800))
        assert cell not in cells
        cells.add(cell)
    # every hit in the range shares a bin with one answered
    for v in lay.g:
        y = round(lay.y[v] * sy, 6)
        if 100 < y < 900:
            assert (round(round(lay.x[v] * sx, 5) * 2000 / 600 / 5), round(y * 2000 / 800)) in cells


def test_search_errors(xsrv):
    p = (BIG_H5, "obst", "big", "search")
    assert_problem(get_tx(xsrv, *p), 400, detail_contains="json")
    assert_problem(get_tx(xsrv, *p, json="[1,2]"), 400, detail_contains="search spec")
    assert_problem(get_tx(xsrv, *p, json="{nope"), 400)
    spec = {"type": "num_tips", "method": "number", "number": "1", "number_method": "~"}
    assert_problem(get_tx(xsrv, *p, json=json.dumps(spec)), 400, detail_contains="number_method")
    deep = {"type": "name", "method": "text_match", "text": "c1"}
    for _ in range(40):
        deep = {"type": "boolean", "boolean_method": "or", "subspecs": [deep]}
    assert_problem(get_tx(xsrv, *p, json=json.dumps(deep)), 400, detail_contains="nest")
    # the spec given once encoded (not as a JSON string) works too
    r = assert_json(get_tx(xsrv, *p, json=json.dumps({"type": "name", "method": "text_exact",
                                                       "text": "C7"})))
    assert names_of(r) == {"c7"}


# ------------------------------------------------------------ node_details/, tip_atts
def ids_by_name(srv, store, key):
    js = assert_json(get_tx(srv, store, "obst", key, "search",
                            json=json.dumps({"type": "num_tips", "method": "number",
                                             "number": 0, "number_method": ">"})))
    assert js["type"] == "complete"
    return {n["name"]: n["node_id"] for n in js["data"]}


def test_node_details_and_tip_atts(xsrv, xref):
    t = xref(W.RICH_H5)
    g = t.obst["t1"]
    lay = Layout(g)
    ids = ids_by_name(xsrv, W.RICH_H5, "t1")
    assert set(ids) == set(g.nodes) and sorted(ids.values()) == list(range(len(ids)))
    for name in g.nodes:
        js = assert_json(get_tx(xsrv, W.RICH_H5, "obst", "t1", "node_details", id=ids[name]))
        assert js["name"] == name and js["node_id"] == ids[name]
        assert js["attrs"] == {k: v for k, v in g.nodes[name].items()}
        p = lay.parent[name]
        assert js["edge_attrs"] == (None if p is None else g.edges[p, name])
        assert js["parent_id"] == (ids[p] if p else ids[name])
        assert js["depth"] == nx.shortest_path_length(g, lay.roots[0], name)
        if g.out_degree(name) == 0:
            assert js["meta_kind"] == str(t.obs.loc[name, "kind"])
    inner = next(n for n in g if g.out_degree(n) and len(nx.descendants(g, n)) > 4)
    tips = [n for n in nx.dfs_preorder_nodes(g, inner) if g.out_degree(n) == 0]
    got = assert_json(get_tx(xsrv, W.RICH_H5, "obst", "t1", "tip_atts", id=ids[inner],
                             att="meta_score"))
    assert got == pytest.approx([float(t.obs.loc[n, "score"]) for n in tips])
    assert assert_json(get_tx(xsrv, W.RICH_H5, "obst", "t1", "tip_atts", id=ids[inner],
                              att="name")) == tips
    assert assert_json(get_tx(xsrv, W.RICH_H5, "obst", "t1", "tip_atts", id=ids[inner],
                              att="meta_nope")) == [None] * len(tips)
    # tip_atts is asked without a trailing slash
    r = xsrv.get(store_path(W.RICH_H5, "obst", "t1", "taxonium", "tip_atts") +
                 f"?id={ids[inner]}&att=num_tips&sid=x")
    assert assert_json(r) == [1] * len(tips)
    p = (W.RICH_H5, "obst", "t1")
    assert_problem(get_tx(xsrv, *p, "node_details"), 400, detail_contains="id")
    assert_problem(get_tx(xsrv, *p, "node_details", id="c1"), 400, detail_contains="integer")
    assert_problem(get_tx(xsrv, *p, "node_details", id=len(ids)), 404)
    assert_problem(get_tx(xsrv, *p, "node_details", id=-1), 400)
    assert_problem(get_tx(xsrv, *p, "tip_atts", id=0), 400, detail_contains="att")


# ------------------------------------------------------------ mutations/ (SSE)
def sse_events(text):
    events, data = [], []
    for line in text.split("\n"):
        if line == "":
            if data:
                events.append("\n".join(data))
                data = []
        elif line.startswith("data:"):
            data.append(line[5:].lstrip(" "))
    return events


@pytest.mark.parametrize("name,axis,key", [(BIG_H5, "obst", "big"), (W.RICH_ZARR, "vart", "v1")])
def test_mutations_event_stream(xsrv, name, axis, key):
    r = xsrv.get(store_path(name, axis, key, "taxonium", "mutations") + "/",
                 _headers={"Accept": "text/event-stream"}, sid="null")
    assert r.status_code == 200
    assert r.headers["Content-Type"] == "text/event-stream"
    events = sse_events(r.text)
    assert events[-1] == "END"
    chunks = [json.loads(e) for e in events[:-1]]
    assert all(isinstance(c, list) for c in chunks) and sum(map(len, chunks)) == 0
    assert_problem(xsrv.get(store_path(name, axis, "nope", "taxonium", "mutations") + "/"), 404)


# ------------------------------------------------------------ nextstrain_json/
def test_nextstrain_json(xsrv, xref):
    t = xref(BIG_H5)
    g = t.obst["big"]
    lay = Layout(g)
    r = assert_json(get_tx(xsrv, BIG_H5, "obst", "big", "search",
                           json=json.dumps({"type": "num_tips", "method": "number",
                                            "number": 200, "number_method": ">="})))
    # a clade of a few hundred nodes
    clade = min(r["data"], key=lambda n: n["num_tips"])
    r = xsrv.get(store_path(BIG_H5, "obst", "big", "taxonium", "nextstrain_json",
                            str(clade["node_id"])))
    js = assert_json(r)
    assert r.headers["Content-Disposition"] == \
        f"attachment; filename={clade['node_id']}.nextstrain.json"
    assert js["version"] == "v2" and js["meta"]["panels"] == ["tree"]
    assert {c["key"] for c in js["meta"]["colorings"]} == set(t.obs.columns)
    root = clade["name"]
    seen = 0
    stack = [js["tree"]]
    while stack:
        n = stack.pop()
        seen += 1
        name = n["name"]
        assert n["node_attrs"]["div"] == pytest.approx(lay.x[name] - lay.x[root], abs=1e-9)
        assert n["branch_attrs"] == {"mutations": {}}
        kids = [c["name"] for c in n.get("children", [])]
        assert kids == list(g.successors(name))
        if not kids:
            assert n["node_attrs"]["kind"] == {"value": str(t.obs.loc[name, "kind"])}
        stack.extend(n.get("children", []))
    assert seen == len(nx.descendants(g, root)) + 1
    # a leaf on its own, and the deep caterpillar (nesting as deep as the tree)
    c5 = search(xsrv, BIG_H5, "big", {"type": "name", "method": "text_exact", "text": "c5"})
    leaf = assert_json(xsrv.get(store_path(BIG_H5, "obst", "big", "taxonium", "nextstrain_json",
                                           str(c5["data"][0]["node_id"]))))
    assert leaf["tree"]["name"] == "c5" and "children" not in leaf["tree"]
    assert leaf["tree"]["node_attrs"]["score"]["value"] == pytest.approx(t.obs.loc["c5", "score"])
    deep = xsrv.get(store_path(W.DEEP_H5, "obst", "cat", "taxonium", "nextstrain_json", "0"))
    assert deep.status_code == 200 and deep.text.count('"children"') == W.DEEP_N // 2 - 1
    assert_problem(xsrv.get(store_path(BIG_H5, "obst", "big", "taxonium", "nextstrain_json",
                                       "999999")), 404)
    assert_problem(xsrv.get(store_path(BIG_H5, "obst", "big", "taxonium", "nextstrain_json",
                                       "x")), 400)


def test_response_limit(xroot, server_factory):
    srv = server_factory(xroot, "--max-response-bytes", "20000")
    assert_problem(get_tx(srv, BIG_H5, "obst", "big", "nodes"), 413, detail_contains="smaller box")
    js = assert_json(get_tx(srv, BIG_H5, "obst", "big", "nodes", min_y=10, max_y=12))
    assert js["nodes"]


# ------------------------------------------------------------ tokens
def test_auth(xroot, server_factory, tmp_path):
    token, other = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
    auth = tmp_path / "tokens.txt"
    auth.write_text(f"{hashlib.sha256(token.encode()).hexdigest()} {BIG_H5}\n"
                    f"{hashlib.sha256(other.encode()).hexdigest()} lineage.*\n")
    srv = server_factory(xroot, "--auth-file", str(auth))
    for op in ("config", "nodes", "mutations", "search", "node_details", "tip_atts"):
        path = store_path(BIG_H5, "obst", "big", "taxonium", op) + "/"
        params = {"search": {"json": '{"type":"name","method":"text_match","text":"c1"}'},
                  "node_details": {"id": 0}, "tip_atts": {"id": 0, "att": "name"}}.get(op, {})
        r = requests.get(srv.base + path, params=params, timeout=30)
        assert r.status_code == 401 and r.headers["WWW-Authenticate"].startswith("Bearer")
        r = requests.get(srv.base + path, params=params, timeout=30,
                         headers={"Authorization": f"Bearer {token}"})
        assert r.status_code == 200, (op, r.text[:300])
        r = requests.get(srv.base + path, params={**params, "access_token": token}, timeout=30)
        assert r.status_code == 200, (op, r.text[:300])
        r = requests.get(srv.base + path, params=params, timeout=30,
                         headers={"Authorization": f"Bearer {other}"})
        assert r.status_code == 404
    path = store_path(BIG_H5, "obst", "big", "taxonium", "nextstrain_json", "0")
    assert requests.get(srv.base + path, timeout=30).status_code == 401
    assert requests.get(srv.base + path, params={"access_token": token}, timeout=30).ok
