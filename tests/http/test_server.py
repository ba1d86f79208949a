"""The server itself: service routes, flags and environment, signals, the
store cache bounds, HEAD, compression and the access log."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
import requests

from conftest import Server, assert_json, assert_problem, cellar_bin, free_port


def metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            if line.split(" ")[0] == name:
                return float(line.split(" ")[1])
    raise AssertionError(f"metric {name} not in /metrics:\n{text}")


def readable_anndata(srv: Server) -> str:
    """The first .h5ad store of the listing that opens."""
    for entry in srv.get("/v1/stores").json()["stores"]:
        if entry["name"].endswith(".h5ad") and srv.get(f"/v1/stores/{entry['name']}").status_code == 200:
            return entry["name"]
    raise AssertionError("no readable .h5ad store in the test root")


def test_healthz_and_readyz(server):
    assert assert_json(server.get("/healthz")) == {"status": "ok"}
    assert assert_json(server.get("/readyz")) == {"status": "ready"}


def test_readyz_fails_when_root_unreadable(tmp_path, server_factory):
    root = tmp_path / "root"
    root.mkdir()
    srv = server_factory(root)
    assert srv.get("/readyz").status_code == 200
    root.rename(tmp_path / "moved")
    assert_problem(srv.get("/readyz"), 503)
    assert srv.get("/healthz").status_code == 200


def test_openapi_is_served_and_lists_the_routes(server):
    doc = assert_json(server.get("/v1/openapi.json"))
    assert doc["openapi"].startswith("3.1")
    paths = doc["paths"]
    for route in ["/v1/stores", "/v1/stores/{store}", "/v1/stores/{store}/mod",
                  "/healthz", "/readyz", "/metrics"]:
        assert route in paths, route


def test_metrics_count_requests_by_route_and_status(server):
    before = server.get("/metrics").text
    server.get("/v1/stores")
    server.get("/v1/stores/nope.h5ad")
    text = server.get("/metrics").text
    assert server.get("/metrics").headers["Content-Type"].startswith("text/plain")

    def count(t, route, status):
        key = f'cellar_requests_total{{route="{route}",status="{status}"}} '
        for line in t.splitlines():
            if line.startswith(key):
                return int(line.split(" ")[1])
        return 0

    assert count(text, "/v1/stores", 200) == count(before, "/v1/stores", 200) + 1
    assert count(text, "/v1/stores/{store}", 404) == count(before, "/v1/stores/{store}", 404) + 1
    assert metric(text, "cellar_request_duration_seconds_count") >= 3
    assert metric(text, "cellar_open_stores") >= 0
    assert "cellar_cache_bytes" in text


def test_head_has_headers_and_no_body(server, data_root):
    name = readable_anndata(server)
    get = server.get(f"/v1/stores/{name}")
    head = server.head(f"/v1/stores/{name}")
    assert head.status_code == 200
    assert head.content == b""
    assert head.headers["ETag"] == get.headers["ETag"]
    assert int(head.headers["Content-Length"]) == len(get.content)


def test_method_not_allowed(server):
    r = server.session.delete(server.base + "/v1/stores", timeout=10)
    assert_problem(r, 405)
    assert "GET" in r.headers["Allow"]


def test_compression_gzip_and_zstd(server):
    path = "/v1/openapi.json"
    plain = server.raw(path, headers={"Accept-Encoding": "identity"})
    assert plain.status_code == 200
    assert "Content-Encoding" not in plain.headers
    assert len(plain.content) > 1024
    raw = server.raw(path, headers={"Accept-Encoding": "gzip"})
    assert raw.headers["Content-Encoding"] == "gzip"
    assert gzip.decompress(raw.content) == plain.content
    raw = server.raw(path, headers={"Accept-Encoding": "deflate, gzip;q=0.5, zstd"})
    assert raw.headers["Content-Encoding"] == "zstd"
    zstd = shutil.which("zstd")
    if zstd:
        out = subprocess.run([zstd, "-d", "-c"], input=raw.content, capture_output=True, check=True)
        assert out.stdout == plain.content


def test_help_lists_every_flag():
    out = subprocess.run([str(cellar_bin()), "--help"], capture_output=True, text=True, timeout=10)
    assert out.returncode == 0
    for flag in ["--root", "--bind", "--port", "--threads", "--max-response-bytes",
                 "--max-open-stores", "--idle-seconds", "--cors-origin", "CELLAR_ROOT", "CELLAR_PORT"]:
        assert flag in out.stdout, flag


def test_bad_flag_exits_nonzero():
    out = subprocess.run([str(cellar_bin()), "--no-such-flag"], capture_output=True, text=True, timeout=10)
    assert out.returncode != 0
    assert "--no-such-flag" in out.stderr


def _spawn(env_extra: dict, args: list[str], log: Path) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CELLAR_")}
    env.update(env_extra)
    return subprocess.Popen([str(cellar_bin()), *args], env=env,
                            stdout=open(log, "wb"), stderr=subprocess.STDOUT)


def _wait_health(port: int, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        assert proc.poll() is None, "server exited early"
        try:
            if requests.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return
        except requests.RequestException:
            time.sleep(0.05)
    raise AssertionError("server did not come up")


def test_environment_variables_configure_the_server(tmp_path, data_root):
    port = free_port()
    proc = _spawn({"CELLAR_ROOT": str(data_root), "CELLAR_PORT": str(port),
                   "CELLAR_CORS_ORIGIN": "https://viewer.example"}, [], tmp_path / "log")
    try:
        _wait_health(port, proc)
        r = requests.get(f"http://127.0.0.1:{port}/v1/stores", timeout=5)
        assert r.status_code == 200
        names = [s["name"] for s in r.json()["stores"]]
        assert names and all((data_root / n).exists() for n in names)
        assert r.headers["Access-Control-Allow-Origin"] == "https://viewer.example"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_probe_flag_alone_turns_the_probe_off(tmp_path, data_root):
    """`cellar --probe 0` with nothing else on the command line (the rest
    from the environment) is the flag: a server that opens HDF5 stores
    without a probe process, not the internal probe mode walking a file
    named "0" (which the child mode once took it for)."""
    port = free_port()
    proc = _spawn({"CELLAR_ROOT": str(data_root), "CELLAR_PORT": str(port)}, ["--probe", "0"],
                  tmp_path / "log")
    try:
        _wait_health(port, proc)
        h5 = next(n for n in sorted(p.name for p in data_root.iterdir()) if n.endswith(".h5ad"))
        assert requests.get(f"http://127.0.0.1:{port}/v1/stores/{h5}", timeout=10).status_code == 200
        metrics = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
        # No probe ran (with the probe on, outcome="ok" counts 1 here).
        probes = [line for line in metrics.splitlines() if line.startswith("cellar_probes_total{")]
        assert sum(float(line.rsplit(" ", 1)[1]) for line in probes) == 0, probes
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_sigterm_drains_and_exits_zero(tmp_path, data_root):
    port = free_port()
    proc = _spawn({}, ["--root", str(data_root), "--port", str(port)], tmp_path / "log")
    _wait_health(port, proc)
    results = []

    def hammer():
        s = requests.Session()
        for _ in range(200):
            try:
                results.append(s.get(f"http://127.0.0.1:{port}/v1/stores", timeout=5).status_code)
            except requests.RequestException:
                break

    t = threading.Thread(target=hammer)
    t.start()
    time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=15) == 0
    t.join(timeout=15)
    assert results and all(code == 200 for code in results)
    assert "SIGTERM" in (tmp_path / "log").read_text()


def test_sighup_drops_cached_stores(tmp_path, data_root, server_factory, server):
    srv = server_factory(data_root)
    name = readable_anndata(server)
    assert srv.get(f"/v1/stores/{name}").status_code == 200
    assert metric(srv.get("/metrics").text, "cellar_open_stores") >= 1
    srv.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        if metric(srv.get("/metrics").text, "cellar_open_stores") == 0:
            break
        time.sleep(0.05)
    assert metric(srv.get("/metrics").text, "cellar_open_stores") == 0
    assert srv.get(f"/v1/stores/{name}").status_code == 200
    assert srv.alive()


def test_idle_stores_are_closed(tmp_path, data_root, server_factory, server):
    srv = server_factory(data_root, "--idle-seconds", "0.5")
    name = readable_anndata(server)
    assert srv.get(f"/v1/stores/{name}").status_code == 200
    assert metric(srv.get("/metrics").text, "cellar_open_stores") == 1
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and metric(srv.get("/metrics").text, "cellar_open_stores"):
        time.sleep(0.1)
    assert metric(srv.get("/metrics").text, "cellar_open_stores") == 0


def test_open_stores_are_bounded(tmp_path, data_root, server_factory):
    srv = server_factory(data_root, "--max-open-stores", "2")
    names = [s["name"] for s in srv.get("/v1/stores").json()["stores"]
             if s["name"].endswith((".h5ad", ".h5mu")) and srv.get(f"/v1/stores/{s['name']}").status_code == 200]
    assert len(names) >= 3
    for name in names:
        assert srv.get(f"/v1/stores/{name}").status_code == 200
        assert metric(srv.get("/metrics").text, "cellar_open_stores") <= 2
    # The least recently used store was closed, and still answers when asked again.
    assert srv.get(f"/v1/stores/{names[0]}").status_code == 200


def test_access_log_has_one_line_per_request(tmp_path, data_root, server_factory):
    srv = server_factory(data_root)
    srv.get("/v1/stores/does-not-exist.h5ad")
    lines = [l for l in srv.log_lines_since(0) if "does-not-exist.h5ad" in l]
    assert len(lines) == 1
    method, path, status, size, micros = lines[0].split(" ")
    assert (method, path, status) == ("GET", "/v1/stores/does-not-exist.h5ad", "404")
    assert int(size) > 0 and int(micros) >= 0


def test_port_in_use_fails_cleanly(tmp_path, server):
    out = subprocess.run([str(cellar_bin()), "--root", str(tmp_path), "--port", str(server.port)],
                         capture_output=True, text=True, timeout=10)
    assert out.returncode != 0
    assert "cannot listen" in out.stderr


def _gauge(s, name: str) -> float:
    for line in s.get("/metrics").text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not in /metrics")


def test_open_stores_are_bounded_by_the_bytes_they_hold(tmp_path, server_factory):
    """--max-open-bytes: once the indexes open stores hold pass the bound,
    idle stores are closed, least recently used first, and they open again
    when asked for; without the bound every tree store stays open."""
    examples = Path(__file__).resolve().parents[2] / "examples"
    names = []
    for i in range(4):
        name = f"lineage{i}.h5td"
        shutil.copy(examples / "lineage.h5td", tmp_path / name)
        names.append(name)

    def index_all(s):
        most = 0.0
        for name in names:
            r = s.get(f"/v1/stores/{name}/obst/lineage/subtree", root="node22", depth=2)
            assert r.status_code == 200, r.text[:200]
            most = max(most, _gauge(s, "cellar_cache_bytes"))
        return most

    free = server_factory(tmp_path, "--max-open-bytes", "0", "--answer-cache-bytes", "0")
    index_all(free)
    one = _gauge(free, "cellar_cache_bytes") / len(names)
    assert one > 0 and _gauge(free, "cellar_open_stores") == len(names)
    free.stop()

    bound = int(one * 1.5)  # room for one store's index, not two
    s = server_factory(tmp_path, "--max-open-bytes", str(bound), "--answer-cache-bytes", "0")
    index_all(s)
    assert _gauge(s, "cellar_open_stores") == 1
    assert _gauge(s, "cellar_cache_bytes") <= bound
    # The closed ones answer again (their index built anew), the bound kept.
    r = s.get(f"/v1/stores/{names[0]}/obst/lineage/subtree", root="node22", depth=2)
    assert r.status_code == 200
    assert _gauge(s, "cellar_open_stores") == 1 and _gauge(s, "cellar_cache_bytes") <= bound
