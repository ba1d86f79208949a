"""Many requests at once while stores are replaced and rewritten on disk:
every answer is one whole version (its data matches its ETag), nothing
fails, and the server keeps serving. Bounded in count and time."""

from __future__ import annotations

import os
import shutil
import threading
import time

import anndata as ad
import numpy as np
import pandas as pd
import requests

from conftest import store_path

N_ROWS = 200
ROUNDS = 12
THREADS = 6


def _write_version(path, value: int) -> None:
    obs = pd.DataFrame(
        {"v": np.full(N_ROWS, value, dtype=np.int64), "w": np.arange(N_ROWS, dtype=np.float64) * value},
        index=[f"c{i}" for i in range(N_ROWS)],
    )
    # Versions differ in size too, so an in-place rewrite changes the identity.
    var = pd.DataFrame(index=[f"g{i}" for i in range(value % 5 + 1)])
    ad.AnnData(obs=obs, var=var).write_h5ad(path)


def test_answers_are_whole_versions_under_replacement(tmp_path, server_factory):
    root = tmp_path / "root"
    root.mkdir()
    target = root / "churn.h5ad"
    _write_version(target, 1)
    staged = tmp_path / "staged"
    staged.mkdir()
    srv = server_factory(root, "--threads", "4")
    url = srv.base + store_path("churn.h5ad", "obs")
    stop = threading.Event()
    seen: dict[str, set] = {}
    problems: list[str] = []
    lock = threading.Lock()

    def reader():
        session = requests.Session()
        deadline = time.monotonic() + 60
        while not stop.is_set() and time.monotonic() < deadline:
            try:
                r = session.get(url, params={"columns": "v,w"}, timeout=10)
            except requests.RequestException as exc:
                with lock:
                    problems.append(f"request failed: {exc}")
                return
            if r.status_code == 503:
                continue  # a rewrite in progress may ask to retry
            if r.status_code != 200:
                with lock:
                    problems.append(f"{r.status_code}: {r.text[:200]}")
                continue
            body = r.json()
            values = set(body["data"]["v"])
            if len(values) != 1 or len(body["data"]["v"]) != N_ROWS:
                with lock:
                    problems.append(f"mixed answer: {sorted(values)[:5]}")
                continue
            value = values.pop()
            expected_w = [float(i * value) for i in range(N_ROWS)]
            if body["data"]["w"] != expected_w:
                with lock:
                    problems.append(f"column w does not belong to version {value}")
            with lock:
                seen.setdefault(r.headers["ETag"], set()).add(value)

    threads = [threading.Thread(target=reader) for _ in range(THREADS)]
    for t in threads:
        t.start()
    try:
        for version in range(2, ROUNDS + 2):
            time.sleep(0.05)
            if version % 2:
                # Replace: write elsewhere, then rename over (new inode).
                tmp = staged / f"v{version}.h5ad"
                _write_version(tmp, version)
                os.replace(tmp, target)
            else:
                # Rewrite in place (same inode), as a careless user would.
                tmp = staged / f"v{version}.h5ad"
                _write_version(tmp, version)
                with open(tmp, "rb") as src, open(target, "r+b") as dst:
                    dst.truncate(0)
                    shutil.copyfileobj(src, dst)
                # Make sure the new identity is visible even within one mtime tick.
                st = os.stat(target)
                os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
        time.sleep(0.2)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=30)

    # An in-place rewrite can be caught half-written by a reader: then the
    # server must answer 422 or a whole version, never a mix. Only whole
    # versions are counted above; anything else must be a clean error.
    bad = [p for p in problems if not p.startswith("422")]
    assert not bad, bad[:5]
    assert len(seen) >= 2, f"readers saw only {len(seen)} version(s)"
    for etag, values in seen.items():
        assert len(values) == 1, f"ETag {etag} served versions {values}"
    final = srv.get(store_path("churn.h5ad", "obs"), columns="v").json()
    assert set(final["data"]["v"]) == {ROUNDS + 1}
    assert srv.get("/healthz").status_code == 200
    assert srv.alive()
