"""h5web on cellar: a page built from @h5web/app's H5GroveProvider (npm,
tests/browser/h5web's lock file, bundled by esbuild into a temporary
folder) is served from a second origin on 127.0.0.1 and opened in Debian's
Chromium through playwright-core (tests/browser/viewer/browser.mjs), every
request beyond 127.0.0.1 blocked, pointed at cellar's /h5grove/.  It
selects datasets written by h5py and their Matrix view; the text of every
matrix cell it shows is compared with h5py's read of the same file.
Screenshots are kept in tests/artifacts/."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import h5py
import numpy as np
import pytest

import browser_pages

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "tests" / "browser" / "h5web"
LAUNCHER = REPO / "tests" / "browser" / "viewer"
ARTIFACTS = REPO / "tests" / "artifacts"
FILE = "scans/matrix.h5"
# esbuild's bundle and five page loads in Chromium (about 40 s on a quiet machine)
pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def h5web_root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("h5web")
    (root / "scans").mkdir()
    rng = np.random.default_rng(7)
    with h5py.File(root / FILE, "w") as f:
        f["ints"] = np.arange(12 * 6, dtype="i4").reshape(12, 6) * 7 - 100
        f["floats"] = rng.standard_normal((40, 9)) * 1000
        g = f.create_group("detector")
        g.attrs["NX_class"] = "NXdetector"
        g.create_dataset("frames", data=rng.integers(0, 4000, (16, 10), dtype="u2"),
                         chunks=(4, 10), compression="gzip")
        g.create_dataset("half", data=(rng.standard_normal((8, 5)) * 10).astype("f2"))
    return root


@pytest.fixture(scope="module")
def h5web_server(h5web_root, server_factory):
    return server_factory(h5web_root)


@pytest.fixture(scope="module")
def driver(tmp_path_factory):
    node, npm = browser_pages.node_and_npm("the h5web test")
    browser_pages.npm_ready(npm, LAUNCHER, "playwright-core")
    browser_pages.npm_ready(npm, PAGE, "@h5web/app")
    dist = tmp_path_factory.mktemp("h5web-page")
    browser_pages.build_page(node, PAGE, dist)
    ARTIFACTS.mkdir(exist_ok=True)

    def run(grove: str, views: list[dict]) -> dict:
        config = {"dist": str(dist), "artifacts": str(ARTIFACTS), "grove": grove, "file": FILE,
                  "views": views}
        r = subprocess.run([node, str(PAGE / "drive.mjs"), json.dumps(config)],
                           capture_output=True, text=True, timeout=300, cwd=PAGE)
        assert r.returncode == 0, f"driver failed:\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}"
        out = json.loads(r.stdout)
        for v in views:
            assert "failed" not in out["views"][v["name"]], \
                f"view {v['name']}:\n{out['views'][v['name']]['failed']}"
        return out

    return run


VIEWS = [{"name": "ints", "path": "/ints", "notation": "Exact"},
         {"name": "floats", "path": "/floats", "notation": "Exact"},
         {"name": "floats-scientific", "path": "/floats", "notation": "Scientific"},
         {"name": "frames", "path": "/detector/frames", "notation": "Exact"},
         {"name": "half", "path": "/detector/half", "notation": "Exact"}]


@pytest.fixture(scope="module")
def seen(h5web_server, driver) -> dict:
    return driver(h5web_server.base + "/h5grove", VIEWS)


def number(text: str) -> float:
    return float(text.replace("\u2212", "-"))


def test_nothing_beyond_127_0_0_1_and_no_console_errors(seen, h5web_server):
    assert seen["blocked"] == []
    for name, view in seen["views"].items():
        assert view["errors"] == [], name
        grove = [u for u in view["requests"] if u.startswith(h5web_server.base)]
        # h5web reads through the h5grove routes only: meta, then the values
        assert grove and all("/h5grove/" in u for u in grove), name
        assert any("/h5grove/meta" in u for u in grove) and any("/h5grove/data" in u for u in grove)


@pytest.mark.parametrize("view", [v["name"] for v in VIEWS])
def test_matrix_shows_h5pys_values(seen, h5web_root, view):
    spec = next(v for v in VIEWS if v["name"] == view)
    shown = seen["views"][view]
    with h5py.File(h5web_root / FILE, "r") as f:
        want = f[spec["path"]][()]
    assert (shown["rows"], shown["cols"]) == want.shape
    cells = shown["cells"]
    # the grid shows what fits (virtualized): a good part of the matrix
    assert len(cells) >= min(want.size, 60), len(cells)
    assert len({(r, c) for r, c, _ in cells}) == len(cells)
    for r, c, text in cells:
        v = want[r, c]
        if spec.get("notation") == "Exact":
            # the value itself (a float16 as the float32 h5web gets with dtype=safe)
            assert number(text) == float(np.float32(v) if want.dtype == np.float16 else v), (r, c, text, v)
        else:
            # h5web's scientific notation: four significant digits
            assert text.replace("\u2212", "-") == f"{v:.3e}".replace("e+0", "e+").replace("e-0", "e-"), \
                (r, c, text, v)
