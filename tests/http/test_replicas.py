"""Replicas behind a load balancer (issue 15, point 4).

Three cellar processes on 127.0.0.1 over one data root behind HAProxy
(Debian's), under mixed load from several clients: each replica is
restarted in turn (SIGTERM: it stops taking connections, /readyz answers
503, requests in flight finish, exit 0) and a store file is replaced on the
shared root mid-run.  No request may fail; every replica must answer the
same ETag and the same bytes for the same store version; and the new
version must be what every replica serves from the first request sent after
the rename (cellar checks a store's identity on every request; see the
README's "Replicas").

Before that, the ETag itself: replicas that hold copies of the same files
(rsync -a, cp -p: same names, sizes, mtimes, other inodes) must agree, so
the ETag comes from what the data is, not from device and inode numbers."""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
import warnings
from pathlib import Path

import anndata as ad
import numpy as np
import pandas as pd
import pytest
import requests

import writers as W
from conftest import cellar_bin, free_port, store_path

HAPROXY = shutil.which("haproxy") or "/usr/sbin/haproxy"
N_OBS, N_VARS = 400, 60


# ------------------------------------------------------------ stores
def cells(version: int) -> ad.AnnData:
    """An AnnData whose every value names its version."""
    rng = np.random.default_rng(version)
    obs = pd.DataFrame({"version": np.full(N_OBS, version, dtype=np.int64),
                        "score": rng.random(N_OBS)},
                       index=[f"v{version}-cell{i}" for i in range(N_OBS)])
    var = pd.DataFrame(index=[f"g{i}" for i in range(N_VARS)])
    x = (rng.random((N_OBS, N_VARS)) + version).astype(np.float32)
    return ad.AnnData(X=x, obs=obs, var=var, obsm={"X_umap": rng.random((N_OBS, 2))})


def write_h5ad(a: ad.AnnData, path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a.write_h5ad(path)


def write_zarr(a: ad.AnnData, path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a.write_zarr(path)


def zarr_chunk_key(store: Path) -> str:
    """The key of one chunk of X in a zarr store, as a client asks for it."""
    for p in sorted((store / "X").rglob("*")):
        if p.is_file() and p.name not in ("zarr.json", ".zarray", ".zattrs", ".zgroup"):
            return p.relative_to(store).as_posix()
    raise AssertionError(f"no chunk under {store}/X")


def meta_key(store: Path, group: str = "") -> str:
    """The metadata key of a group or array, as the writer's zarr format
    names it (anndata 0.12 writes v2, 0.13 v3)."""
    for name in ("zarr.json", ".zarray", ".zgroup"):
        key = f"{group}/{name}" if group else name
        if (store / key).is_file():
            return key
    raise AssertionError(f"no metadata for {group!r} in {store}")


def routes(root: Path) -> list[str]:
    chunk = zarr_chunk_key(root / "cells.zarr")
    return [
        store_path("cells.h5ad"),
        store_path("cells.h5ad", "obs") + "?rows=0:20",
        store_path("cells.h5ad", "X") + "?rows=0:5&cols=0:6",
        store_path("cells.h5ad", "X") + "?rows=10:40&format=bin",
        store_path("cells.h5ad", "obsm", "X_umap") + "?rows=0:50",
        store_path("cells.zarr", "obs") + "?rows=0:20",
        store_path("cells.zarr", "X") + "?cols=3",
        store_path("cells.zarr", "zarr", *meta_key(root / "cells.zarr", "X").split("/")),
        store_path("cells.zarr", "zarr", *chunk.split("/")),
        "/v1/stores",
    ]


# ------------------------------------------------------------ processes
class Replica:
    """One cellar on a fixed port (HAProxy's configuration names it)."""

    def __init__(self, name: str, root: Path, port: int, log: Path):
        self.name, self.root, self.port, self.log = name, root, port, log
        self.proc: subprocess.Popen | None = None

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        cmd = [str(cellar_bin()), "--root", str(self.root), "--bind", "127.0.0.1",
               "--port", str(self.port), "--drain-seconds", "10", "--threads", "4"]
        env = {k: v for k, v in os.environ.items() if not k.startswith("CELLAR_")}
        with open(self.log, "ab") as logf:
            logf.write(("$ " + " ".join(cmd) + "\n").encode())
            self.proc = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.log.read_text(errors="replace")[-3000:]
            try:
                if requests.get(self.base + "/readyz", timeout=1).status_code == 200:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.05)
        raise AssertionError(f"{self.name} did not become ready")

    def stop(self, timeout: float = 20) -> int:
        """SIGTERM, and its exit status once it has drained."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"{self.name} did not exit within {timeout} s of SIGTERM")


HAPROXY_CFG = """\
global
    maxconn 1024
defaults
    mode http
    timeout connect 1s
    timeout client 20s
    timeout server 20s
    timeout http-keep-alive 5s
    # a replica that is stopping refuses connections or closes its
    # kept-alive ones: GETs are idempotent and retried on another
    retries 3
    option redispatch 1
    retry-on conn-failure empty-response response-timeout
    option httpchk GET /readyz
    http-check expect status 200
    default-server inter 100ms fastinter 100ms downinter 100ms fall 1 rise 2 check
frontend front
    bind 127.0.0.1:{port}
    default_backend cellars
    http-after-response set-header X-Served-By %[srv_name]
backend cellars
    balance roundrobin
{servers}
"""


@pytest.fixture()
def haproxy(tmp_path):
    procs = []

    def start(replicas: list[Replica]) -> str:
        port = free_port()
        servers = "\n".join(f"    server {r.name} 127.0.0.1:{r.port}" for r in replicas)
        cfg = tmp_path / "haproxy.cfg"
        cfg.write_text(HAPROXY_CFG.format(port=port, servers=servers))
        check = subprocess.run([HAPROXY, "-c", "-q", "-f", str(cfg)], capture_output=True,
                               text=True)
        assert check.returncode == 0, check.stdout + check.stderr
        log = open(tmp_path / "haproxy.log", "wb")
        procs.append(subprocess.Popen([HAPROXY, "-db", "-f", str(cfg)], stdout=log,
                                      stderr=subprocess.STDOUT))
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                if requests.get(base + "/healthz", timeout=1).status_code == 200:
                    return base
            except requests.RequestException:
                pass
            time.sleep(0.05)
        raise AssertionError((tmp_path / "haproxy.log").read_text(errors="replace"))

    yield start
    for p in procs:
        p.terminate()
        p.wait(timeout=10)


@pytest.fixture()
def replicas(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    write_h5ad(cells(1), root / "cells.h5ad")
    write_zarr(cells(7), root / "cells.zarr")
    ports = set()
    while len(ports) < 3:
        ports.add(free_port())
    reps = [Replica(f"r{i}", root, port, tmp_path / f"r{i}.log")
            for i, port in enumerate(sorted(ports))]
    for r in reps:
        r.start()
    yield root, reps
    for r in reps:
        r.stop()


# ------------------------------------------------------------ load
class Record:
    __slots__ = ("sent", "done", "route", "status", "etag", "digest", "replica", "error")

    def __init__(self, sent, route):
        self.sent, self.route = sent, route
        self.done = self.status = self.etag = self.digest = self.replica = self.error = None


def drive(base: str, paths: list[str], stop: threading.Event, out: list[Record], seed: int):
    rng = np.random.default_rng(seed)
    session = requests.Session()
    while not stop.is_set():
        route = paths[int(rng.integers(len(paths)))]
        rec = Record(time.monotonic(), route)
        try:
            r = session.get(base + route, timeout=20)
            rec.status, rec.etag = r.status_code, r.headers.get("ETag")
            rec.digest = hashlib.sha256(r.content).hexdigest()
            rec.replica = r.headers.get("X-Served-By")
        except requests.RequestException as e:
            rec.error = f"{e.__class__.__name__}: {e}"
        rec.done = time.monotonic()
        out.append(rec)


def direct_answers(reps: list[Replica], paths: list[str]) -> dict[str, set]:
    """route -> {(ETag, sha256 of body)} over every replica, asked directly."""
    seen: dict[str, set] = {}
    for r in reps:
        with requests.Session() as s:
            for route in paths:
                resp = s.get(r.base + route, timeout=10)
                assert resp.status_code == 200, (r.name, route, resp.status_code, resp.text[:300])
                seen.setdefault(route, set()).add(
                    (resp.headers.get("ETag"), hashlib.sha256(resp.content).hexdigest()))
    return seen


def wait_in_rotation(base: str, name: str, timeout: float = 10) -> None:
    """Until HAProxy sends requests to replica `name` again."""
    deadline = time.monotonic() + timeout
    with requests.Session() as s:
        while time.monotonic() < deadline:
            for _ in range(6):
                if s.get(base + "/healthz", timeout=5).headers.get("X-Served-By") == name:
                    return
            time.sleep(0.05)
    raise AssertionError(f"HAProxy did not take {name} back within {timeout} s")


# ------------------------------------------------------------ the tests
@pytest.mark.timeout(240)
def test_replicas_behind_haproxy(replicas, haproxy, tmp_path):
    root, reps = replicas
    paths = routes(root)
    base = haproxy(reps)
    before = direct_answers(reps, paths)
    for route, answers in before.items():
        if route != "/v1/stores":
            assert len(answers) == 1, f"replicas disagree on {route}: {answers}"

    records: list[Record] = []
    stop = threading.Event()
    threads = [threading.Thread(target=drive, args=(base, paths, stop, records, i), daemon=True)
               for i in range(6)]
    for t in threads:
        t.start()
    try:
        time.sleep(1.0)
        for r in reps:                      # each replica restarted in turn
            assert r.stop() == 0, f"{r.name} did not exit 0 on SIGTERM"
            time.sleep(0.3)                 # load goes on with one replica missing
            r.start()
            wait_in_rotation(base, r.name)
            time.sleep(0.3)
        staging = tmp_path / "staging"
        staging.mkdir()
        write_h5ad(cells(2), staging / "cells.h5ad")
        replace_started = time.monotonic()
        os.replace(staging / "cells.h5ad", root / "cells.h5ad")
        replaced = time.monotonic()
        time.sleep(1.5)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=30)
    after = direct_answers(reps, paths)

    failed = [f"{x.route}: {x.error or x.status}" for x in records
              if x.error or x.status != 200]
    assert not failed, f"{len(failed)} of {len(records)} requests failed: {failed[:10]}"
    assert len(records) > 300, len(records)
    served = {x.replica for x in records}
    assert served == {r.name for r in reps}, served

    for route in paths:
        if route == "/v1/stores":
            continue    # lists sizes and ETags of both versions' stores
        old, new = before[route], after[route]
        assert len(new) == 1, f"replicas disagree on {route} after the replacement: {new}"
        h5ad = "cells.h5ad" in route
        assert (old != new) == h5ad, (route, old, new)
        for x in records:
            if x.route != route:
                continue
            got = (x.etag, x.digest)
            if h5ad and x.sent >= replaced:
                assert got in new, f"{route} sent {x.sent - replaced:.3f} s after the " \
                                   f"rename answered the old version (by {x.replica})"
            elif h5ad and x.done <= replace_started:
                assert got in old, f"{route} before the rename: not the first version"
            else:
                assert got in old | new, f"{route}: an answer of neither version: {got}"
    # the ETag names the bytes: one body per ETag across all replicas
    bodies: dict[tuple, set] = {}
    for x in records:
        if x.route != "/v1/stores":
            bodies.setdefault((x.route, x.etag), set()).add(x.digest)
    mixed = {k: v for k, v in bodies.items() if len(v) > 1}
    assert not mixed, mixed


def test_stopping_replica_fails_readyz_and_finishes_requests(tmp_path):
    """On SIGTERM: /readyz 503 at once (on a connection kept alive from
    before), answers say Connection: close, the request in flight is
    answered whole, exit 0."""
    root = tmp_path / "root"
    root.mkdir()
    big = ad.AnnData(X=np.ones((4000, 2000), np.float32),
                     obs=pd.DataFrame(index=[f"c{i}" for i in range(4000)]),
                     var=pd.DataFrame(index=[f"g{i}" for i in range(2000)]))
    write_h5ad(big, root / "big.h5ad")
    r = Replica("solo", root, free_port(), tmp_path / "solo.log")
    r.start()
    try:
        kept = requests.Session()
        assert kept.get(r.base + "/readyz", timeout=5).status_code == 200
        # a 32 MB answer, more than the socket buffers hold, whose client
        # reads nothing yet: in flight
        slow = socket.create_connection(("127.0.0.1", r.port))
        slow.sendall(f"GET {store_path('big.h5ad', 'X')}?format=bin HTTP/1.1\r\n"
                     f"Host: 127.0.0.1\r\nConnection: close\r\n\r\n".encode())
        time.sleep(0.5)
        r.proc.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        assert r.proc.poll() is None, "exited with a request in flight"
        ready = kept.get(r.base + "/readyz", timeout=5)
        assert ready.status_code == 503, ready.status_code
        assert ready.headers["Content-Type"].startswith("application/problem+json")
        assert "stopping" in ready.json()["detail"]
        assert ready.headers.get("Connection", "").lower() == "close"
        with pytest.raises(requests.ConnectionError):
            requests.get(r.base + "/healthz", timeout=2)    # no new connections
        data = b""
        slow.settimeout(10)
        while True:
            piece = slow.recv(1 << 20)
            if not piece:
                break
            data += piece
        slow.close()
        head, _, body = data.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200"), head[:200]
        assert len(body) == 4000 * 2000 * 4, len(body)
        assert r.proc.wait(timeout=15) == 0
    finally:
        r.stop()


def test_copies_agree_on_etags(data_root, server_factory, tmp_path):
    """Two replicas over copies of the same files (new inodes, same names,
    sizes and mtimes, as rsync -a or cp -p make) answer the same ETags and
    bytes for every store, route and raw zarr key."""
    a = tmp_path / "a"
    a.mkdir()
    for name in (W.FRAME, W.MULTI, W.LINEAGE):
        shutil.copy2(data_root / name, a / name)
    write_zarr(cells(5), a / "cells.zarr")
    b = tmp_path / "b"
    shutil.copytree(a, b, copy_function=shutil.copy2)   # copystat on every directory too
    assert os.stat(a / W.FRAME).st_ino != os.stat(b / W.FRAME).st_ino
    sa, sb = server_factory(a), server_factory(b)
    chunk = zarr_chunk_key(a / "cells.zarr")
    paths = [store_path(W.FRAME), store_path(W.FRAME, "obs"), store_path(W.FRAME, "X") + "?rows=0:3",
             store_path(W.MULTI, "mod", "rna", "obs"), store_path(W.LINEAGE, "obst"),
             store_path("cells.zarr"), store_path("cells.zarr", "obs") + "?rows=0:4",
             store_path("cells.zarr", "zarr", meta_key(a / "cells.zarr")),
             store_path("cells.zarr", "zarr", *chunk.split("/"))]
    for path in paths:
        ra, rb = sa.session.get(sa.base + path, timeout=10), sb.session.get(sb.base + path, timeout=10)
        assert ra.status_code == rb.status_code == 200, (path, ra.status_code, rb.status_code)
        assert ra.headers["ETag"] == rb.headers["ETag"], (path, ra.headers["ETag"], rb.headers["ETag"])
        assert ra.content == rb.content, path
        # a validator from one replica is good on the other
        again = sb.session.get(sb.base + path, headers={"If-None-Match": ra.headers["ETag"]},
                               timeout=10)
        assert again.status_code == 304, (path, again.status_code)
    # another store of the same size and mtime still has its own ETag
    shutil.copy2(a / W.FRAME, a / "twin.h5ad")
    ta = sa.session.get(sa.base + store_path("twin.h5ad"), timeout=10)
    assert ta.status_code == 200
    assert ta.headers["ETag"] != sa.session.get(sa.base + store_path(W.FRAME), timeout=10).headers["ETag"]
