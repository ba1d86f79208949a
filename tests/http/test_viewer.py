"""The built-in viewer (/ and /ui/...): its embedded files as HTTP serves
them, and the page itself in Debian's Chromium (WebGL on SwiftShader)
through playwright-core (tests/browser/viewer/drive.mjs), with every
request beyond 127.0.0.1 blocked.  What the page shows is compared with
what anndata, mudata and treedata read from the same stores.  Screenshots
are kept in tests/artifacts/."""

from __future__ import annotations

import gzip
import hashlib
from decimal import ROUND_HALF_UP, Decimal
import json
import re
import shutil
import subprocess
from pathlib import Path

import anndata as ad
import mudata as md
import networkx as nx
import numpy as np
import pytest
import requests
import treedata as td

import viewer_writers

REPO = Path(__file__).resolve().parents[2]
UI = REPO / "api" / "ui"
DRIVER = REPO / "tests" / "browser" / "viewer"
ARTIFACTS = REPO / "tests" / "artifacts"
EXAMPLES = REPO / "examples"
CHROMIUM = Path("/usr/bin/chromium")
TOKEN = "viewer-test-token-1b9f"


def ui_assets() -> list[str]:
    return sorted(p.name for p in UI.iterdir()
                  if p.is_file() and p.suffix not in (".c", ".h") and p.name != "README.md")


@pytest.fixture(scope="module")
def viewer_root(tmp_path_factory) -> Path:
    """The examples, and cells.h5ad (viewer_writers) for the embedding."""
    root = tmp_path_factory.mktemp("viewer")
    for p in EXAMPLES.iterdir():
        if p.is_dir():
            shutil.copytree(p, root / p.name)
        elif p.suffix in (".h5ad", ".h5mu", ".h5td"):
            shutil.copy2(p, root / p.name)
    viewer_writers.write_cells(root / "cells.h5ad")
    return root


@pytest.fixture(scope="module")
def vserver(viewer_root, server_factory):
    return server_factory(viewer_root)


@pytest.fixture(scope="module")
def driver():
    node, npm = shutil.which("node"), shutil.which("npm")
    if not node or not npm:
        pytest.fail("node and npm are needed for the viewer tests (make deps)", pytrace=False)
    if not CHROMIUM.exists():
        pytest.fail("/usr/bin/chromium is needed for the viewer tests (make deps)", pytrace=False)
    if not (DRIVER / "node_modules" / "playwright-core").is_dir():
        r = subprocess.run([npm, "ci", "--no-audit", "--no-fund", "--prefix", str(DRIVER)],
                           capture_output=True, text=True, timeout=240)
        assert r.returncode == 0, f"npm ci failed:\n{r.stdout}\n{r.stderr}"
    ARTIFACTS.mkdir(exist_ok=True)

    def run(server, scenarios, **extra) -> dict:
        config = {"base": server.base, "artifacts": str(ARTIFACTS), "scenarios": scenarios, **extra}
        r = subprocess.run([node, str(DRIVER / "drive.mjs"), json.dumps(config)],
                           capture_output=True, text=True, timeout=300, cwd=DRIVER)
        assert r.returncode == 0, f"driver failed:\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}"
        out = json.loads(r.stdout)
        for name in scenarios:
            assert "failed" not in out[name], f"scenario {name}:\n{out[name]['failed']}"
        return out

    return run


@pytest.fixture(scope="module")
def seen(vserver, driver) -> dict:
    """One browser run over the examples, the embedding and the tree."""
    return driver(vserver, ["examples", "scatter", "tree"])


@pytest.fixture(scope="module")
def seen_tree(vserver, driver) -> dict:
    """A second browser run: the tree panned and recoloured."""
    out = driver(vserver, ["treePanColour"])
    assert out["blocked"] == []
    return out["treePanColour"]


@pytest.fixture(scope="module")
def cells(viewer_root):
    return ad.read_h5ad(viewer_root / "cells.h5ad")


# ------------------------------------------------------------ the files
def test_every_file_of_api_ui_is_listed_and_served(vserver):
    listed = re.findall(r'^UI_FILE\(\w+, "([^"]+)"', (UI / "ui_files.h").read_text(), re.M)
    assert sorted(listed) == ui_assets()
    types = {".html": "text/html; charset=utf-8", ".css": "text/css; charset=utf-8",
             ".js": "text/javascript; charset=utf-8", ".svg": "image/svg+xml"}
    for name in listed:
        r = vserver.get("/ui/" + name, _headers={"Accept-Encoding": "identity"})
        assert r.status_code == 200, name
        assert r.content == (UI / name).read_bytes(), name
        assert r.headers["Content-Type"] == types[Path(name).suffix], name
        assert r.headers["Cache-Control"] == "no-cache"
    index = (UI / "index.html").read_bytes()
    for path in ("/", "/ui/", "/ui"):
        r = vserver.get(path)
        assert r.status_code == 200 and r.content == index, path
    for path in ("/ui/nope.js", "/ui/a/main.js", "/index.html", "/ui/README.md", "/ui/ui.c"):
        r = vserver.get(path)
        assert r.status_code == 404, path
        assert r.headers["Content-Type"] == "application/problem+json"


def test_files_have_etags_304_and_gzip(vserver):
    body = (UI / "main.js").read_bytes()
    r = vserver.get("/ui/main.js", _headers={"Accept-Encoding": "gzip"})
    assert r.headers["Content-Encoding"] == "gzip"
    assert r.content == body  # requests decodes it
    assert "Accept-Encoding" in r.headers["Vary"]
    raw = vserver.raw("/ui/main.js", headers={"Accept-Encoding": "gzip"})
    assert gzip.decompress(raw.content) == body and len(raw.content) < len(body) / 2
    etag = r.headers["ETag"]
    assert re.fullmatch(r'W/"ui-[0-9a-f]{16}"', etag)
    plain = vserver.get("/ui/main.js", _headers={"Accept-Encoding": "identity"})
    assert plain.headers["ETag"] == etag and "Content-Encoding" not in plain.headers
    again = vserver.get("/ui/main.js", _headers={"If-None-Match": etag})
    assert again.status_code == 304 and again.content == b""
    assert again.headers["ETag"] == etag
    assert vserver.get("/ui/main.js", _headers={"If-None-Match": '"other", ' + etag}).status_code == 304
    assert vserver.get("/ui/main.js", _headers={"If-None-Match": 'W/"ui-0000000000000000"'}).status_code == 200
    other = vserver.get("/ui/tree.js").headers["ETag"]
    assert other != etag
    head = vserver.head("/ui/viewer.css", _headers={"Accept-Encoding": "identity"})
    assert head.status_code == 200 and head.content == b""
    assert int(head.headers["Content-Length"]) == (UI / "viewer.css").stat().st_size


def test_viewer_files_need_no_token(viewer_root, server_factory, tmp_path):
    auth = tmp_path / "tokens.txt"
    auth.write_text(hashlib.sha256(TOKEN.encode()).hexdigest() + " blood.h5ad\n")
    s = server_factory(viewer_root, "--auth-file", str(auth))
    assert s.get("/").status_code == 200
    assert s.get("/ui/main.js").status_code == 200
    assert s.get("/v1/stores").status_code == 401
    assert s.get("/ui/nope.js").status_code == 404


# ------------------------------------------------------------ the page
def test_no_console_errors_and_nothing_beyond_127_0_0_1(seen, vserver):
    assert seen["blocked"] == []
    for name in ("examples", "scatter", "tree"):
        assert seen[name]["errors"] == [], name
        assert seen[name]["origins"] == [vserver.base], name


def test_loads_the_examples(seen, vserver):
    ex = seen["examples"]
    listed = vserver.get("/v1/stores").json()["stores"]
    assert [s["name"] for s in ex["storeList"]] == [s["name"] for s in listed]
    for row, s in zip(ex["homeRows"], listed):
        assert row[:3] == [s["name"], s["kind"], s["backend"]]
    pages = ex["pages"]

    blood = ad.read_h5ad(EXAMPLES / "blood.h5ad")
    for name in ("blood.h5ad", "blood.zarr"):
        p = pages[name]
        assert p["title"] == name
        assert p["facts"]["shape"].startswith(f"{blood.n_obs} × {blood.n_vars}")
        assert [c["name"] for c in p["obs"]] == list(blood.obs.columns)
        assert [c["name"] for c in p["var"]] == list(blood.var.columns)
        for c in p["obs"]:
            col = blood.obs[c["name"]]
            if hasattr(col, "cat"):
                assert c["dtype"] == "category" and c["categories"][:len(col.cat.categories)] == list(col.cat.categories)
        assert p["tableHead"][2:] == list(blood.obs.columns)
        assert [r[1] for r in p["tableRows"]] == list(blood.obs_names[:25])
        assert not p["embedding"] and not p["tree"]

    pbmc = md.read_h5mu(EXAMPLES / "pbmc_small.h5mu")
    assert pages["pbmc_small.h5mu"]["mods"] == ["global", *pbmc.mod]
    assert [c["name"] for c in pages["pbmc_small.h5mu"]["obs"]] == list(pbmc.obs.columns)
    rna = pages["pbmc_small.h5mu-rna"]
    assert rna["title"].startswith("pbmc_small.h5mu") and "rna" in rna["title"]
    assert [c["name"] for c in rna["obs"]] == list(pbmc["rna"].obs.columns)
    assert [r[1] for r in rna["tableRows"]] == list(pbmc["rna"].obs_names[:25])

    lineage = td.read_h5td(EXAMPLES / "lineage.h5td")
    for name in ("lineage.h5td", "lineage.zarr"):
        p = pages[name]
        assert p["tree"] and p["facts"]["trees"] == "lineage"
        assert [r[1] for r in p["tableRows"]] == list(lineage.obs_names[:25])


def js_bytes(n) -> str:
    """main.js's bytes(): powers of 1000, one decimal under 10 (toFixed
    rounds the double's exact value half up)."""
    if n is None:
        return "–"
    units, i = ["B", "KB", "MB", "GB", "TB"], 0
    while n >= 1000 and i < len(units) - 1:
        n /= 1000
        i += 1
    if not i:
        return f"{n} {units[i]}"
    q = Decimal("0.1") if n < 10 else Decimal("1")
    return f"{Decimal(n).quantize(q, rounding=ROUND_HALF_UP)} {units[i]}"


PAGES = {"blood.h5ad": ("blood.h5ad", None), "blood.zarr": ("blood.zarr", None),
         "pbmc_small.h5mu": ("pbmc_small.h5mu", None), "pbmc_small.h5mu-rna": ("pbmc_small.h5mu", "rna"),
         "lineage.h5td": ("lineage.h5td", None), "lineage.zarr": ("lineage.zarr", None)}


def test_store_list_shows_each_stores_size(seen, vserver):
    ex = seen["examples"]
    listed = {s["name"]: s for s in vserver.get("/v1/stores").json()["stores"]}
    assert len(ex["homeRows"]) == len(listed)
    for row in ex["homeRows"]:
        assert row[3] == js_bytes(listed[row[0]]["bytes"]), row
    for item in ex["storeList"]:
        assert item["meta"].endswith("· " + js_bytes(listed[item["name"]]["bytes"])), item
    for name, (store, _) in PAGES.items():
        assert ex["pages"][name]["facts"]["size"] == js_bytes(listed[store]["bytes"]), name


def test_every_columns_dtype_is_the_schemas(seen, vserver):
    pages = seen["examples"]["pages"]
    for name, (store, mod) in PAGES.items():
        ad_path = f"/v1/stores/{store}" + (f"/mod/{mod}" if mod else "")
        for axis in ("obs", "var"):
            schema = vserver.get(f"{ad_path}/{axis}/schema").json()["columns"]
            shown = [(c["name"], c["dtype"]) for c in pages[name][axis]]
            assert shown == [(c["name"], c["dtype"]) for c in schema], (name, axis)


def test_scatterplot_is_drawn_and_changes_with_the_colour(seen, cells):
    sc = seen["scatter"]
    first = sc["byCellType"]
    assert first["drawn"] > 20000 and first["colours"] > len(viewer_writers.CELL_TYPES)
    assert sc["byBatch"]["drawn"] > 20000
    assert sc["diffCellTypeBatch"] > first["drawn"] * 0.3
    counts = cells.obs["cell_type"].value_counts()
    assert sc["legendCellType"] == [[k, f"{counts[k]:,}"] for k in cells.obs["cell_type"].cat.categories]
    lo, hi = cells.obs["score"].min(), cells.obs["score"].max()
    assert sc["legendScore"]["bar"]
    assert [float(t) for t in sc["legendScore"]["ticks"][::2]] == pytest.approx([lo, hi], rel=1e-3)


def test_colouring_by_a_gene_is_one_column_request(seen, cells):
    sc = seen["scatter"]
    assert sc["completion"] == ["CD3E"]
    column_requests = [p for p in sc["geneRequests"] if re.search(r"/X(\?|$)", p)]
    assert column_requests == ["/v1/stores/cells.h5ad/X?var_names=CD3E&format=bin"]
    assert sc["colorValue"] == "gene:CD3E"
    assert sc["diffScoreGene"] > sc["byGene"]["drawn"] * 0.3
    expr = np.asarray(cells[:, "CD3E"].X.todense()).ravel()
    assert sc["legendGene"]["title"].startswith("CD3E")
    assert [float(t) for t in sc["legendGene"]["ticks"][::2]] == [expr.min(), expr.max()]


def test_hover_shows_the_cells_obs_row(seen, cells):
    sc = seen["scatter"]
    i = sc["hoverTarget"]
    row = cells.obs.iloc[i]
    tip = sc["tooltip"]
    assert tip["name"] == cells.obs_names[i]
    assert tip["rows"]["cell_type"] == row["cell_type"]
    assert tip["rows"]["n_genes"] == str(row["n_genes"])
    assert tip["rows"]["batch"] == row["batch"]
    assert tip["rows"]["passed_qc"] == str(bool(row["passed_qc"])).lower()


def test_obs_table_follows_the_selection(seen, cells):
    sc = seen["scatter"]
    picked = viewer_writers.CELL_TYPES[2]
    names = list(cells.obs_names[cells.obs["cell_type"] == picked])
    assert sc["selectionHead"].startswith(f"{len(names)} selected cells")
    assert [r[1] for r in sc["selectionRows"]] == names[:25]
    assert {r[2] for r in sc["selectionRows"]} == {picked}
    assert [int(r[0]) for r in sc["selectionRows"]] == [cells.obs_names.get_loc(n) for n in names[:25]]
    assert sc["selectionPage2"] == names[25:50]


def test_a_shared_url_restores_the_view(seen):
    sc = seen["scatter"]
    assert re.search(r"[#&]s=cells\.h5ad(&|$)", sc["sharedUrl"])
    assert "&v=" in sc["sharedUrl"] and "c=obs%3Acell_type" in sc["sharedUrl"]
    assert sc["zoomView"]["zoom"] > 2
    # While the wheel and the drag go on, frames move the last picture; the
    # points are drawn again once the input rests (at least once), and fewer
    # times than frames were shown.
    assert sc["moveDrawn"] >= 1 and sc["moveFrames"] > sc["moveDrawn"], (sc["moveFrames"], sc["moveDrawn"])
    assert sc["restoredView"] == sc["zoomView"]
    assert sc["restoredControls"] == {"store": "cells.h5ad", "obsm": "X_umap", "color": "obs:cell_type"}
    assert sc["restored"]["drawn"] > 1000
    assert sc["restored"]["hash"] == sc["zoomed"]["hash"]
    assert sc["zoomed"]["hash"] != sc["byCellType"]["hash"]


def test_tree_view_shows_the_example_tree(seen):
    tr = seen["tree"]
    tdata = td.read_h5td(EXAMPLES / "lineage.h5td")
    g = tdata.obst["lineage"]
    assert tr["first"]["drawn"] > 2000
    assert {n["id"] for n in tr["nodes"]} == set(g.nodes)
    assert {n["id"]: n["parent"] for n in tr["nodes"]} == {
        v: next(iter(g.predecessors(v)), None) for v in g.nodes}
    assert not any(n["collapsed"] for n in tr["nodes"])
    assert tr["colorValue"] == "obs:clone"
    for n in tr["nodes"]:
        if n["leaf"]:
            assert n["obs"] == {"clone": tdata.obs.loc[n["id"], "clone"]}


def test_tree_zoom_issues_a_viewport_request(seen):
    tr = seen["tree"]
    assert tr["viewportsBefore"] == 1
    assert tr["viewportsAfter"] > tr["viewportsBefore"]
    assert tr["zoomRequests"]
    q = dict(p.split("=") for p in tr["zoomRequests"][-1].split("?")[1].split("&"))
    assert {"x0", "x1", "y0", "y1", "max_nodes"} <= set(q)
    # three wheel steps in: well under the whole tree's 24 leaves, padded
    assert float(q["y1"]) - float(q["y0"]) < 0.6 * 23 * 1.5 and q["obs_columns"] == "clone"
    assert tr["diffZoom"] > 1000
    # Only the viewport route ever brings tree nodes.
    tree_paths = [p for p in tr["requests"] if "/obst/" in p]
    assert tree_paths and all(re.search(r"/obst/lineage/(viewport|nodes/|ancestors|leaves)", p) for p in tree_paths)
    assert not any(p.split("?")[0].endswith("/obst/lineage") for p in tr["requests"])
    assert re.search(r"tv=[-0-9.e%C]+", tr["zoomedHash"])
    assert tr["restored"]["hash"] == tr["zoomed"]["hash"]


def test_tree_pan_issues_a_viewport_request(seen_tree):
    tr = seen_tree
    assert tr["errors"] == [] and tr["zoomRequests"]
    assert tr["panRequests"], "no viewport request after the drag"
    box = lambda p: dict(kv.split("=") for kv in p.split("?")[1].split("&"))
    zoom, pan = box(tr["zoomRequests"][-1]), box(tr["panRequests"][-1])
    assert pan["obs_columns"] == "clone" and pan["max_nodes"] == zoom["max_nodes"]
    zx0, zx1, zy0, zy1 = (float(zoom[k]) for k in ("x0", "x1", "y0", "y1"))
    px0, px1, py0, py1 = (float(pan[k]) for k in ("x0", "x1", "y0", "y1"))
    # The same size of box, moved against the drag (right and down) by as
    # much of its width as the drag is of the canvas' (both axes alike).
    assert px1 - px0 == pytest.approx(zx1 - zx0, rel=1e-3)
    assert py1 - py0 == pytest.approx(zy1 - zy0, rel=1e-3)
    fx = (zx0 - px0) / (zx1 - zx0) / (tr["panDrag"][0] / tr["treeBox"][2])
    fy = (zy0 - py0) / (zy1 - zy0) / (tr["panDrag"][1] / tr["treeBox"][3])
    assert 0.3 < fx < 1.01 and fy == pytest.approx(fx, rel=0.05)
    assert tr["diffPan"] > 1000


def test_tree_colour_by_an_obs_column_changes_the_canvas(seen_tree):
    tr = seen_tree
    assert tr["errors"] == []
    assert [p for p in tr["timeRequests"] if "obs_columns=time" in p]
    assert tr["byTime"]["drawn"] > 2000
    assert tr["byTime"]["colours"] != tr["byClone"]["colours"]
    assert tr["diffCloneTime"] > 1000
    # Back to clone: the same picture as before.
    assert [p for p in tr["cloneRequests"] if "obs_columns=clone" in p]
    assert tr["diffCloneAgain"] == 0


def test_tree_click_shows_attributes_ancestors_and_leaves(seen):
    tr = seen["tree"]
    tdata = td.read_h5td(EXAMPLES / "lineage.h5td")
    g = tdata.obst["lineage"]
    root = next(v for v in g.nodes if g.in_degree(v) == 0)
    leaf = tr["leaf"]
    assert leaf["ancestors"] == nx.shortest_path(g, root, "cell05")
    parent = next(iter(g.predecessors("cell05")))
    assert float(leaf["attrs"]["edge length"]) == pytest.approx(g.edges[parent, "cell05"]["length"])
    assert leaf["attrs"]["obs clone"] == tdata.obs.loc["cell05", "clone"]
    assert leaf["facts"]["depth"] == str(len(leaf["ancestors"]) - 1)
    internal = tr["internal"]
    below = nx.descendants(g, "node12")
    assert internal["ancestors"] == nx.shortest_path(g, root, "node12")
    assert internal["leaves"] == sorted(v for v in below if g.out_degree(v) == 0)
    assert internal["facts"]["children"] == str(g.out_degree("node12"))
    assert set(tr["hiddenAfterCollapse"]) == below
    assert tr["toggleText"] == "expand clade" and tr["hiddenAfterExpand"] == []


def test_the_viewer_asks_for_a_token(viewer_root, server_factory, driver, tmp_path):
    auth = tmp_path / "tokens.txt"
    auth.write_text(hashlib.sha256(TOKEN.encode()).hexdigest() + " blood.h5ad lineage.*\n")
    s = server_factory(viewer_root, "--auth-file", str(auth))
    out = driver(s, ["auth"], token=TOKEN)
    a = out["auth"]
    assert out["blocked"] == []
    assert "needs a bearer token" in a["firstPrompt"]
    assert "not accepted" in a["secondPrompt"]
    assert a["storeList"] == ["blood.h5ad", "lineage.h5td", "lineage.zarr"]
    assert a["title"] == "blood.h5ad"
    sent = [r["authorization"] for r in a["dataRequests"]]
    assert sent[0] is None and "Bearer not-the-token" in sent
    first_good = sent.index("Bearer " + TOKEN)
    assert all(v == "Bearer " + TOKEN for v in sent[first_good:])
    assert any(r["path"] == "/v1/stores/blood.h5ad/obs" for r in a["dataRequests"][first_good:])
    # 401s are the only console errors (Chromium logs each failed load).
    assert all("401" in e for e in a["errors"]), a["errors"]
    assert not requests.get(s.base + "/v1/stores").ok
