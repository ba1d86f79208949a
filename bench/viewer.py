"""The viewer section of `make bench` (issue 14, item 1's benchmark): the
time from page load to the first drawn embedding of the core stores' cells
(200,000 at BENCH_SCALE=1) in headless Chromium, for the .h5ad and the
.zarr store, on a freshly started cellar (the first load pays the store's
open and the probe) and then warm.  The reference, measured in the same run
on the same server, is the embedding's bytes alone fetched with urllib (the
request the page makes): the ratio says what the page adds to the data.
On the last load of each store, the latency of zooms, pans and hovers made
with the mouse (item 1: "200k cells stay interactive")."""

import json
import os
import shutil
import statistics
import subprocess

import run as R
import sections as S

PAGE_LOADS = 5
IX_STEPS = 12  # bench/viewer_time.mjs's STEPS
INTERACTIVE_MS = 100
VIEWER_TESTS = os.path.join(R.REPO, "tests", "browser", "viewer")


def ensure_playwright():
    if not os.path.isdir(os.path.join(VIEWER_TESTS, "node_modules", "playwright-core")):
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund", "--prefix", VIEWER_TESTS],
                       check=True, stdout=subprocess.DEVNULL)
    if not shutil.which(os.environ.get("CELLAR_CHROMIUM", "/usr/bin/chromium")):
        raise RuntimeError("chromium is missing (make deps installs it)")


def page_loads(base, store, runs):
    """One dict per page load of the viewer on store's X_umap."""
    out = subprocess.run(["node", os.path.join(R.HERE, "viewer_time.mjs"), base,
                          f"s={store}&e=X_umap", str(runs)],
                         check=True, capture_output=True, text=True, timeout=60 + 150 * runs)
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    blocked = [r for r in rows if "blocked" in r]
    if blocked:
        raise RuntimeError(f"the page asked beyond 127.0.0.1: {blocked[0]['blocked'][:3]}")
    return rows


def data_fetch_ms(base, store, runs):
    """Wall times (ms) of the page's embedding request made with urllib."""
    url = f"{base}/v1/stores/{store}/obsm/X_umap?format=bin"
    times = []
    for _ in range(runs):
        seconds, status, _, body = S.timed_get(url)
        if status != 200:
            raise RuntimeError(f"{url}: {status} {body[:200]!r}")
        times.append(seconds * 1000)
    return times


def run_viewer(cfg, workdir):
    ensure_playwright()
    data_dir, manifest = R.ensure_core_data(cfg)
    runs = PAGE_LOADS * max(cfg.get("repeat", 1), 1)
    rows, ix_rows, targets = [], [], []
    for store in ("bench.h5ad", "bench.zarr"):
        srv = S.start_cellar(cfg, data_dir, workdir, f"viewer-{store}")
        try:
            loads = page_loads(srv.base, store, runs)
            fetch = data_fetch_ms(srv.base, store, runs)
        finally:
            srv.stop()
        errors = sum(len(r.get("errors", ())) for r in loads)
        cold, warm = loads[0], loads[1:] or loads
        warm_ms = [r["drawn_ms"] for r in warm]
        p50 = statistics.median(warm_ms)
        fetch_p50 = statistics.median(fetch)
        R.log(f"viewer {store}: first drawn {[round(x) for x in warm_ms]} ms warm, "
              f"{cold['drawn_ms']:.0f} ms cold; data alone {[round(x) for x in fetch]} ms")
        rows.append(f"| {store} | {cold['points']:,} | {cold['drawn_ms']:.0f} | {p50:.0f} | "
                    f"{max(warm_ms):.0f} | {statistics.median(r['fetch_ms'] for r in warm):.0f} | "
                    f"{fetch_p50:.1f} | {p50 / fetch_p50:.1f}x | {errors} |")
        ix = loads[-1].get("interaction")
        if ix:
            cells = []
            for what in ("zoom", "pan", "hover"):
                ms = ix[what]
                cells.append(f"{statistics.median(ms):.0f} / {max(ms):.0f}")
                targets.append((f"viewer on {store}: {what} p50 under {INTERACTIVE_MS} ms",
                                statistics.median(ms) < INTERACTIVE_MS,
                                f"{statistics.median(ms):.0f} ms over {len(ms)}"))
            ix_rows.append(f"| {store} | {cold['points']:,} | " + " | ".join(cells) + " |")
        targets.append((f"viewer on {store}: every point drawn, no console errors",
                        errors == 0 and all(r["points"] == manifest["cells"] for r in loads),
                        f"{cold['points']} points, {errors} errors"))
    body = f"""The built-in viewer opened at `/#s=STORE&e=X_umap` in Debian's Chromium
(headless, WebGL on SwiftShader: the CPU draws, as on a machine without a
GPU), {runs} page loads per store on a freshly started cellar, each in a new
page: the time from navigation start to the first frame drawn with every
point (the scatterplot's `cellar:embedding-drawn` mark). The first load
opens the store (and probes the .h5ad); the others are warm. "Data alone" is
the page's embedding request (`obsm/X_umap?format=bin`) made with urllib
from the harness against the same server, {runs} times.

| store | cells | first load (ms) | warm p50 (ms) | warm max (ms) | its embedding request in the page, p50 (ms) | data alone, p50 (ms) | page / data alone | console errors |
|---|---|---|---|---|---|---|---|---|
{chr(10).join(rows)}

Interaction on the last page load of each store, with playwright's mouse
(`bench/viewer_time.mjs`): the time from the input event to the end of the
frame it caused (the draw of every point, then `gl.finish`, so SwiftShader's
CPU work is in it; a frame waits for the display's next refresh) for
{IX_STEPS} wheel zooms and {IX_STEPS} steps of a drag pan, and to the
tooltip showing the hovered cell's obs row (its 40 ms debounce and its
`/obs?rows=i` request included) for up to {IX_STEPS} cells never hovered
before. Goal: p50 under {INTERACTIVE_MS} ms, the response budget within which
an interface feels immediate.

| store | cells | zoom p50 / max (ms) | pan p50 / max (ms) | hover p50 / max (ms) |
|---|---|---|---|---|
{chr(10).join(ix_rows)}"""
    return body, targets
