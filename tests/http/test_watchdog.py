"""The request watchdog (server/watchdog.c): a request past
--request-timeout-seconds is logged with its route and store while it
runs and answered 503; /readyz fails while a call into libhdf5 is stuck
longer than the deadline, so a balancer routes around the replica."""

from __future__ import annotations

import shutil
import signal
import threading
import time
from pathlib import Path

import requests

from test_probe import EXAMPLES, heap_damaged


def fresh_get(url: str, attempts: int = 12) -> requests.Response | None:
    """GET on a new connection each try: a thread stuck in a handler stalls
    the connections it serves (each request thread runs its own), so a
    balancer's probe, on a new connection, reaches another thread."""
    for _ in range(attempts):
        try:
            return requests.get(url, timeout=2, headers={"Connection": "close"})
        except requests.RequestException:
            continue
    return None


def hanging_file(root: Path) -> str:
    """A file on which libhdf5 never returns (test_probe.heap_damaged: a
    damaged global heap under a compound's string field, which cellar does
    not check before libhdf5 follows it)."""
    (root / "stuck.h5ad").write_bytes(heap_damaged("hang"))
    return "stuck.h5ad"


def test_overdue_request_is_logged_and_answered_503(tmp_path, server_factory):
    fname = hanging_file(tmp_path)
    s = server_factory(tmp_path, "--request-timeout-seconds", "1", "--probe-timeout-seconds", "5",
                       "--probe-wait-seconds", "3")
    offset = s.log_offset()
    t0 = time.monotonic()
    r = s.get(f"/v1/stores/{fname}/obs")
    took = time.monotonic() - t0
    assert 2.5 < took < 6, took
    assert r.status_code == 503, r.text[:300]
    assert r.headers["Content-Type"].startswith("application/problem+json")
    assert "took longer than 1 s (--request-timeout-seconds)" in r.json()["detail"]
    assert r.headers.get("Retry-After") == "1"
    lines = s.log_lines_since(offset)
    overdue = [ln for ln in lines if "still running after" in ln]
    assert len(overdue) == 1, lines
    assert f"GET /v1/stores/{fname}/obs (route {{ad}}/{{obs|var}}, store {fname})" in overdue[0]
    assert s.get("/readyz").status_code == 200  # the probe hung, not libhdf5 in the server


def test_readyz_fails_while_libhdf5_is_stuck(tmp_path, server_factory):
    """Without the probe (--probe 0, for this test only) a damaged file hangs
    libhdf5 inside the server: the request thread never returns, /readyz
    turns 503 after the deadline, /healthz and zarr stores still answer."""
    fname = hanging_file(tmp_path)
    shutil.copytree(EXAMPLES / "blood.zarr", tmp_path / "blood.zarr")
    s = server_factory(tmp_path, "--probe", "0", "--request-timeout-seconds", "1", "--threads", "4",
                       "--drain-seconds", "2")
    assert s.get("/readyz").status_code == 200

    def stuck():
        try:
            requests.get(s.url(f"/v1/stores/{fname}/obs"), timeout=8)
        except requests.RequestException:
            pass

    t = threading.Thread(target=stuck, daemon=True)
    t.start()
    try:
        deadline = time.monotonic() + 10
        r = None
        while time.monotonic() < deadline:
            time.sleep(0.3)
            r = fresh_get(s.url("/readyz"))
            if r is not None and r.status_code == 503:
                break
        assert r is not None and r.status_code == 503, r and r.text
        assert "a call into libhdf5 has been running" in r.json()["detail"]
        assert fresh_get(s.url("/healthz")).status_code == 200
        assert fresh_get(s.url("/v1/stores/blood.zarr")).status_code == 200
        # SIGTERM: the stuck thread never returns, so the process does not
        # wait for it past --drain-seconds (it used to stay up for good,
        # spinning a core, until SIGKILL)
        t0 = time.monotonic()
        s.proc.send_signal(signal.SIGTERM)
        rc = s.proc.wait(timeout=15)
        took = time.monotonic() - t0
        assert rc == 1 and 1.5 < took < 10, (rc, took)
        log = s.log.read_text(errors="replace")
        assert "1 request(s) still running after --drain-seconds 2; exiting without them" in log, \
            log[-2000:]
    finally:
        s.stop()
