"""taxonium-component (npm, pinned in tests/browser/taxonium's lock file,
bundled with esbuild) pointed at a store tree's Taxonium prefix draws the
example tree in Debian's Chromium (playwright-core of tests/browser/viewer;
every request beyond 127.0.0.1 blocked): config/, mutations/ and nodes/ are
answered, the canvas is not blank, and a zoom asks for a smaller box whose
answer holds every node inside it or an ancestor standing for it.
Screenshots are kept in tests/artifacts/."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest
import requests
import treedata as td

from test_taxonium import Layout, check_box_guarantee, check_nodes_answer

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "tests" / "browser" / "taxonium"
VIEWER = REPO / "tests" / "browser" / "viewer"
ARTIFACTS = REPO / "tests" / "artifacts"
EXAMPLES = REPO / "examples"
CHROMIUM = Path("/usr/bin/chromium")

# npm ci (when node_modules is missing), the esbuild bundle and a browser
# run under SwiftShader on 2 shared cores take minutes, not seconds.
pytestmark = pytest.mark.timeout(1500)


def npm_ci(npm, folder):
    r = subprocess.run([npm, "ci", "--no-audit", "--no-fund", "--prefix", str(folder)],
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, f"npm ci in {folder} failed:\n{r.stdout}\n{r.stderr}"


@pytest.fixture(scope="module")
def page_dir(tmp_path_factory):
    node, npm = shutil.which("node"), shutil.which("npm")
    if not node or not npm:
        pytest.fail("node and npm are needed for the Taxonium browser test (make deps)",
                    pytrace=False)
    if not CHROMIUM.exists():
        pytest.fail("/usr/bin/chromium is needed for the Taxonium browser test (make deps)",
                    pytrace=False)
    if not (PAGE / "node_modules" / "taxonium-component").is_dir():
        npm_ci(npm, PAGE)
    if not (VIEWER / "node_modules" / "playwright-core").is_dir():
        npm_ci(npm, VIEWER)
    out = tmp_path_factory.mktemp("taxonium-page")
    r = subprocess.run([node, str(PAGE / "build.mjs"), str(out)], capture_output=True, text=True,
                       timeout=300, cwd=PAGE)
    assert r.returncode == 0, f"esbuild failed:\n{r.stdout}\n{r.stderr}"
    assert (out / "page.js").is_file() and (out / "index.html").is_file()
    return out


@pytest.fixture(scope="module")
def srv(server_factory):
    return server_factory(EXAMPLES)


@pytest.fixture(scope="module")
def seen(srv, page_dir) -> dict:
    ARTIFACTS.mkdir(exist_ok=True)
    backend = srv.base + "/v1/stores/lineage.h5td/obst/lineage/taxonium"
    config = {"backend": backend, "page": str(page_dir), "artifacts": str(ARTIFACTS)}
    r = subprocess.run([shutil.which("node"), str(PAGE / "drive.mjs"), json.dumps(config)],
                       capture_output=True, text=True, timeout=600, cwd=PAGE)
    assert r.returncode == 0, f"driver failed:\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}"
    return json.loads(r.stdout)


@pytest.fixture(scope="module")
def tree():
    return td.read_h5td(EXAMPLES / "lineage.h5td")


def answered(seen, op):
    return [r for r in seen["responses"] if f"/taxonium/{op}" in r["url"]]


def test_no_errors_and_nothing_beyond_127_0_0_1(seen):
    # The component closes its EventSource on the END event, which Chromium
    # may report as an aborted request when the stream's answer has not
    # been taken in whole yet; its 200 is checked below.
    errors = [e for e in seen["errors"]
              if not (e.startswith("requestfailed: ") and "/taxonium/mutations/" in e
                      and e.endswith("net::ERR_ABORTED"))]
    assert errors == [] and seen["dialogs"] == []
    assert seen["blocked"] == []
    assert all(urlparse(u).hostname == "127.0.0.1" for u in seen["requests"])


def test_config_mutations_and_nodes_answered(seen):
    for op, ctype in (("config/", "application/json"), ("mutations/", "text/event-stream"),
                      ("nodes/", "application/json")):
        rs = answered(seen, op)
        assert rs, f"no {op} request"
        assert all(r["status"] == 200 and r["type"].startswith(ctype) for r in rs), rs


def test_the_example_tree_is_drawn(seen, tree):
    g = tree.obst["lineage"]
    first = next(r for r in answered(seen, "nodes/") if "min_x" not in r["url"])
    assert set(first["nodes"]) == set(g.nodes)
    c = seen["canvas"]
    assert c["width"] > 200 and c["height"] > 200
    # lines, dots in the clone colours and labels: far from blank
    assert c["drawn"] > 0.01 * c["width"] * c["height"]
    assert c["colours"] >= 3


def test_zoom_asks_for_a_smaller_box(seen, srv, tree):
    g = tree.obst["lineage"]
    lay = Layout(g)
    zoomed = [r for r in answered(seen, "nodes/") if "min_x" in r["url"]]
    assert zoomed, "the component never asked for a box"
    smallest = min(zoomed, key=lambda r: len(r["nodes"]))
    assert 0 < len(smallest["nodes"]) < g.number_of_nodes()
    assert seen["zoomed"]["drawn"] > 0
    # the very request the component sent, asked again: every node inside the
    # box is there, or an ancestor standing for it
    q = {k: v[0] for k, v in parse_qs(urlparse(smallest["url"]).query).items()}
    assert {"min_x", "max_x", "min_y", "max_y", "xType"} <= set(q)
    js = requests.get(smallest["url"], timeout=30).json()
    assert [n["name"] for n in js["nodes"]] == smallest["nodes"]
    check_nodes_answer(lay, js, tree.obs)
    inside, _ = check_box_guarantee(lay, js)
    # bins finer than this tree's leaves: nothing inside the box is left out
    assert inside and set(inside) <= set(smallest["nodes"])
    assert (ARTIFACTS / "taxonium-tree.png").stat().st_size > 0
    assert (ARTIFACTS / "taxonium-zoomed.png").stat().st_size > 0
