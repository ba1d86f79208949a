"""Soak: 256 keep-alive connections over mixed routes while the stores under
them are replaced atomically and rewritten in place, with the caches on and
with them off (issue 19, point 6: never mixed).

Four stores (zarr v2, zarr v3, zarr v3 sharded, .h5ad; soak_writers.py says
how version k is written into every value, with identical metadata for
every k) are changed by one mutator process each, for about SOAK_SECONDS
per configuration, by turns:
  - zarr `exchange`: the next version written aside, swapped in with
    renameat2(RENAME_EXCHANGE) (the live name always holds a whole store),
    then the old directory removed while requests may still read it;
  - zarr `inplace`: every file of the next version copied over the live one
    in place and not atomically (truncate, write), in random order with
    1 ms pauses; the root metadata keeps its bytes (only its times change);
  - zarr `anndata`: what anndata's write_zarr does, straight over the live
    store (mode "w" clears it, then group by group, then consolidation);
  - hdf5 `replace` (os.replace of a staged file) and `inplace` (truncated
    and copied over the same inode in 16 KiB pieces).
Readers ask for the summary, obs and var slices (JSON, categorical codes,
one column as bin), X row and column slices (JSON and bin) and, on zarr
stores, raw metadata keys (whole and by Range) and chunk and shard keys,
whose chunks they decode with the codec the array's metadata names.

What must hold, for every answer of the soak:
  - a 200/206 is wholly one version k: every value is exactly what version k
    has at that selection.  An answer mixing versions, or holding the fill
    value of a chunk not written yet, or a frame missing a column, is wrong
    in every phase: no version ever held it.  A server that cannot tell
    whether a store is still being written may say so with a 503;
  - each store ETag names one k for the whole run; each raw key's ETag one
    body (strong validators);
  - 503 carries Retry-After (allowed anywhere, counted);
  - 404, 406 and 422 only from a request overlapping a non-atomic rewrite
    of its store (an element or file caught missing, empty or half
    written: a refusal, never data), and 404 for a raw key during any
    mutation (the old version's file removed under it); never during an
    atomic replace of an element, never in a steady state;
  - a raw key's body that is not the whole file of some version (caught
    empty or half written: torn) only during a non-atomic rewrite, and one
    cut off under sendfile only during an in-place rewrite;
  - no other status, no connection error, no answer left hanging
    (REQUEST_TIMEOUT), no crash.
After the soak: /healthz is 200, the process lives, every route answers the
final version, the descriptors are back to their count after the warm-up,
RSS is within the caches' bounds of its start (see rss_bound), and the
server exits 0 on SIGTERM (under ASan, with leak detection).

Only 127.0.0.1 is contacted; the run stops by itself.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import random
import re
import struct
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numcodecs
import numpy as np
from numcodecs.checksum32 import CRC32C
import pytest

import soak_writers as W
from conftest import cellar_bin, query_string, store_path

HERE = Path(__file__).resolve().parent
CONNECTIONS = 256
SERVER_THREADS = 16
SOAK_SECONDS = 20.0          # per configuration: the mutators' run
# A reader's pause between two requests (uniform, this mean): 256 readers
# at full speed keep both cores of a small VM busy parsing answers and
# starve the writers.  With it they offer ~1300 requests a second, and the
# server answers 200-900 of them (ASan or not): hundreds land in every
# rewrite.
THINK_SECONDS = 0.2
REQUEST_TIMEOUT = 20.0       # seconds a reader waits for an answer: longer is a hang
MIB = 1 << 20
ANSWER_CACHE_DEFAULT = 32 * MIB      # server/config.c defaults
CHUNK_CACHE_DEFAULT = 64 * MIB
CONFIGS = {
    "caches_on": [],
    "caches_off": ["--answer-cache-bytes", "0", "--zarr-chunk-cache-bytes", "0"],
}

pytestmark = pytest.mark.timeout(150)

ROW_SELECTIONS = ["0:120", "0:16", "5:37", "100:120", "3,17,42,119", "::7", "-10:"]
COL_SELECTIONS = ["0:40", "0:10", "7:23", "35:40", "1,9,30"]


def resolve(sel: str, n: int) -> list[int]:
    """Positions a rows=/cols= selection names, as Python indexes them."""
    if ":" in sel:
        parts = [int(p) if p else None for p in sel.split(":")]
        return list(range(n)[slice(*parts)])
    return [int(p) for p in sel.split(",")]


# ------------------------------------------------------------ outcomes of one answer
class Wrong(Exception):
    """A 200 whose values are not one version's."""


class Torn(Exception):
    """A raw key's bytes that are no whole file (caught mid-write)."""


def versions_in(values, to_k: Callable) -> list:
    """The versions values name (for the report of a wrong answer)."""
    out = set()
    for v in values:
        try:
            out.add(to_k(v))
        except (TypeError, ValueError):
            out.add(repr(v)[:20])
    return sorted(out, key=str)


def name_k(s):
    k = W.version_of_name(s) if isinstance(s, str) else None
    if k is None:
        raise ValueError(s)
    return k


def expect_equal(what: str, got, want, to_k: Callable, k: int) -> None:
    if got != want:
        found = versions_in(got if isinstance(got, list) else [got], to_k)
        raise Wrong(f"{what}: versions {found} in an answer whose index names v{k}")


# ------------------------------------------------------------ element checks (return k)
def check_summary(spec: W.StoreSpec, body: bytes, headers) -> None:
    doc = json.loads(body)
    got = (doc.get("kind"), doc.get("backend"), doc.get("shape"), doc.get("obs", {}).get("columns"),
           doc.get("var", {}).get("columns"), (doc.get("X") or {}).get("shape"),
           (doc.get("X") or {}).get("dtype"))
    want = ("anndata", spec.backend, [W.N_OBS, W.N_VARS], W.OBS_COLUMNS, W.VAR_COLUMNS,
            [W.N_OBS, W.N_VARS], "float32")
    if got != want:
        raise Wrong(f"summary {got} is no version's")
    return None


def frame_check(axis: str, rows_sel: str, codes: bool):
    n = W.N_OBS if axis == "obs" else W.N_VARS
    rows = resolve(rows_sel, n)
    columns = W.OBS_COLUMNS if axis == "obs" else W.VAR_COLUMNS
    names = W.obs_names if axis == "obs" else W.var_names

    def check(spec, body, headers):
        doc = json.loads(body)
        index = doc.get("index") or [None]
        k = W.version_of_name(index[0]) if isinstance(index[0], str) else None
        if k is None:
            raise Wrong(f"{axis} index starts {index[0]!r}")
        expect_equal(f"{axis} index", doc["index"], names(k, rows), name_k, k)
        data = doc["data"]
        if list(data) != columns:
            raise Wrong(f"{axis} columns {list(data)}")
        for col in columns:
            got = data[col]
            if axis == "var":
                expect_equal("var.gv", got, [k] * len(rows), int, k)
            elif col == "cat" and codes:
                want = {"codes": [i % 3 for i in rows],
                        "categories": [f"{c}_{W.tag(k)}" for c in W.CATEGORIES], "ordered": False}
                if got != want:
                    raise Wrong(f"obs.cat codes: versions {versions_in(got.get('categories', []), name_k)} "
                                f"in an answer whose index names v{k}")
            else:
                to_k = {"v": int, "w": lambda v: int(v) // W.W_BASE}.get(col, name_k)
                expect_equal(f"obs.{col}", got, W.obs_column(k, col, rows), to_k, k)
        return k

    return check


def obs_bin_check(rows_sel: str):
    rows = resolve(rows_sel, W.N_OBS)

    def check(spec, body, headers):
        if headers.get("X-Dtype") != "float64" or headers.get("X-Shape") != str(len(rows)):
            raise Wrong(f"obs.w bin: X-Dtype {headers.get('X-Dtype')} X-Shape {headers.get('X-Shape')}")
        got = np.frombuffer(body, "<f8")
        return array_version("obs.w bin", got, np.asarray(W.obs_column(0, "w", rows)),
                             lambda v: int(v) // W.W_BASE, W.W_BASE)

    return check


def array_version(what: str, got: np.ndarray, base: np.ndarray, to_k: Callable, scale: int) -> int:
    """k when got == base + k * scale exactly (X and obs.w), else Wrong."""
    if got.shape != base.shape or got.size == 0:
        raise Wrong(f"{what}: shape {got.shape}, want {base.shape}")
    k = to_k(got.flat[0])
    if not np.array_equal(got, base + np.float64(k) * scale):
        raise Wrong(f"{what}: versions {versions_in(np.unique(got).tolist(), to_k)[:8]}")
    return k


def x_check(rows_sel: str, cols_sel: str, fmt: str):
    rows, cols = resolve(rows_sel, W.N_OBS), resolve(cols_sel, W.N_VARS)
    base = W.x_block(0, rows, cols).astype(np.float64)
    to_k = lambda v: int(v) // W.X_BASE  # noqa: E731

    def check(spec, body, headers):
        if fmt == "bin":
            shape = headers.get("X-Shape")
            if headers.get("X-Dtype") != "float32" or shape != f"{len(rows)},{len(cols)}":
                raise Wrong(f"X bin: X-Dtype {headers.get('X-Dtype')} X-Shape {shape}")
            got = np.frombuffer(body, "<f4").astype(np.float64).reshape(len(rows), len(cols))
        else:
            doc = json.loads(body)
            got = np.asarray(doc["data"], dtype=np.float64)
        return array_version(f"X {fmt}", got, base, to_k, W.X_BASE)

    return check


# ------------------------------------------------------------ raw zarr keys
@dataclass
class RawArray:
    """What decoding one array's raw chunks takes, from its metadata."""
    name: str               # X, obs/w, ...
    zarr_format: int
    shape: tuple
    chunks: tuple           # the (inner) chunk shape
    shard: tuple | None     # v3 sharding: the shard shape
    dtype: str
    codec: object           # a numcodecs codec that decompresses one (inner) chunk


V3_DTYPES = {"float32": "<f4", "float64": "<f8", "int64": "<i8", "int32": "<i4"}


def v3_compressor(codecs: list) -> object:
    names = [c["name"] for c in codecs]
    if names[0] != "bytes" or len(names) != 2:
        raise ValueError(f"codecs {names}")
    return {"zstd": numcodecs.Zstd, "gzip": numcodecs.GZip, "blosc": numcodecs.Blosc}[names[1]]()


def raw_array(store: Path, name: str) -> RawArray:
    if (store / name / ".zarray").exists():
        m = json.loads((store / name / ".zarray").read_text())
        assert m["filters"] is None and m["order"] == "C"
        return RawArray(name, 2, tuple(m["shape"]), tuple(m["chunks"]), None, m["dtype"],
                        numcodecs.get_codec(dict(m["compressor"])))
    m = json.loads((store / name / "zarr.json").read_text())
    outer = tuple(m["chunk_grid"]["configuration"]["chunk_shape"])
    codecs = m["codecs"]
    if codecs[0]["name"] == "sharding_indexed":
        conf = codecs[0]["configuration"]
        assert conf.get("index_location", "end") == "end"
        return RawArray(name, 3, tuple(m["shape"]), tuple(conf["chunk_shape"]), outer,
                        V3_DTYPES[m["data_type"]], v3_compressor(conf["codecs"]))
    return RawArray(name, 3, tuple(m["shape"]), outer, None, V3_DTYPES[m["data_type"]],
                    v3_compressor(codecs))


def chunk_coords(arr: RawArray, key: str) -> tuple:
    rest = key[len(arr.name) + 1:]
    parts = rest.split(".") if arr.zarr_format == 2 else rest.split("/")[1:]
    return tuple(int(p) for p in parts)


def decode_raw_chunk(arr: RawArray, key: str, body: bytes) -> list[tuple[tuple, np.ndarray]]:
    """The (inner) chunks a raw chunk or shard key holds: (chunk index, values)."""
    coords = chunk_coords(arr, key)
    n_items = int(np.prod(arr.chunks))

    def one(raw: bytes) -> np.ndarray:
        if isinstance(arr.codec, numcodecs.Blosc):
            # blosc decodes a cut-off buffer without a word: check its sizes first
            # (its 16-byte header: version, versionlz, flags, typesize, nbytes, blocksize, cbytes)
            if len(raw) < 16:
                raise ValueError(f"blosc buffer of {len(raw)} bytes")
            nbytes, _, cbytes = struct.unpack_from("<III", raw, 4)
            if cbytes != len(raw) or nbytes != n_items * np.dtype(arr.dtype).itemsize:
                raise ValueError(f"blosc buffer of {len(raw)} bytes says {cbytes}")
        out = np.frombuffer(bytes(arr.codec.decode(raw)), arr.dtype)
        if out.size != n_items:
            raise ValueError(f"{out.size} values, want {n_items}")
        return out.reshape(arr.chunks)

    if arr.shard is None:
        return [(coords, one(body))]
    per = tuple(s // c for s, c in zip(arr.shard, arr.chunks))
    n = int(np.prod(per))
    index_bytes = n * 16 + 4            # (offset, nbytes) per chunk, then crc32c
    if len(body) < index_bytes:
        raise ValueError("shorter than its index")
    index = np.frombuffer(CRC32C().decode(body[-index_bytes:]), "<u8").reshape(n, 2)   # checksum checked
    out = []
    for flat, (off, nbytes) in enumerate(index.tolist()):
        if off == 2**64 - 1 and nbytes == 2**64 - 1:
            continue                    # an empty inner chunk
        if off + nbytes > len(body) - index_bytes:
            raise ValueError("an inner chunk past the data")
        inner = np.unravel_index(flat, per)
        absolute = tuple(c * p + i for c, p, i in zip(coords, per, inner))
        out.append((absolute, one(body[off:off + nbytes])))
    return out


def raw_chunk_check(arr: RawArray, key: str):
    to_k, value = W.RAW_ARRAYS[arr.name]

    def check(spec, body, headers):
        try:
            chunks = decode_raw_chunk(arr, key, body)
        except Exception as exc:  # noqa: BLE001 - any failure to decode is a torn file
            raise Torn(f"{type(exc).__name__}: {exc}"[:120])
        if not chunks:
            raise Torn("a shard with no chunk")
        ks = set()
        for idx, values in chunks:
            # the part of the chunk inside the array (edge chunks are padded)
            sl = tuple(slice(0, min(c, s - i * c)) for i, c, s in zip(idx, arr.chunks, arr.shape))
            if any(s.stop <= 0 for s in sl):
                raise Wrong(f"{key}: a chunk {idx} outside the array")
            got = values[sl].astype(np.float64)
            grids = np.meshgrid(*[np.arange(s.stop) + i * c for s, i, c in zip(sl, idx, arr.chunks)],
                                indexing="ij")
            k = to_k(got.flat[0])
            if not np.array_equal(got, np.asarray(value(k, *grids), dtype=np.float64)):
                raise Wrong(f"raw {key}: versions {versions_in(np.unique(got).tolist(), to_k)[:8]}")
            ks.add(k)
        if len(ks) != 1:
            raise Wrong(f"raw {key}: chunks of versions {sorted(ks)}")
        return ks.pop()

    return check


def raw_meta_check(expected: bytes, byte_range: tuple[int, int] | None):
    want = expected if byte_range is None else expected[byte_range[0]:byte_range[1]]

    def check(spec, body, headers):
        if body != want:
            raise Torn(f"{len(body)} bytes, not the metadata every version has")
        return None

    return check


# ------------------------------------------------------------ the request menu
@dataclass
class Route:
    store: str
    name: str                 # for the report: summary, obs, var, X json, X bin, raw meta, raw chunk
    path: str
    check: Callable
    headers: dict = field(default_factory=dict)
    raw_key: str | None = None
    status: int = 200


def element_routes(spec: W.StoreSpec) -> list[Route]:
    s = spec.name
    routes = [Route(s, "summary", store_path(s), lambda sp, b, h: check_summary(sp, b, h))]
    for rows in ROW_SELECTIONS:
        routes.append(Route(s, "obs", store_path(s, "obs") + "?" + query_string({"rows": rows}),
                            frame_check("obs", rows, False)))
    routes.append(Route(s, "obs", store_path(s, "obs") + "?" + query_string(
        {"rows": "5:37", "columns": "v,w,s,cat", "categorical": "codes"}), frame_check("obs", "5:37", True)))
    for rows in ("0:120", "3,17,42,119", "-10:"):
        routes.append(Route(s, "obs bin", store_path(s, "obs") + "?" + query_string(
            {"rows": rows, "columns": "w", "format": "bin"}), obs_bin_check(rows)))
    for rows in ("0:40", "3:19", "-5:"):
        routes.append(Route(s, "var", store_path(s, "var") + "?" + query_string({"rows": rows}),
                            frame_check("var", rows, False)))
    for rows in ROW_SELECTIONS:                       # row slices, every column
        routes.append(Route(s, "X json", store_path(s, "X") + "?" + query_string({"rows": rows}),
                            x_check(rows, "0:40", "json")))
    for cols in COL_SELECTIONS:                       # column slices, every row
        routes.append(Route(s, "X json", store_path(s, "X") + "?" + query_string({"cols": cols}),
                            x_check("0:120", cols, "json")))
    for rows, cols in [("0:120", "0:40"), ("5:37", "7:23"), ("3,17,42,119", "1,9,30"), ("100:120", "0:10"),
                       ("::7", "35:40")]:
        routes.append(Route(s, "X bin", store_path(s, "X") + "?" + query_string(
            {"rows": rows, "cols": cols, "format": "bin"}), x_check(rows, cols, "bin")))
    return routes


def raw_routes(spec: W.StoreSpec, live: Path) -> list[Route]:
    s = spec.name
    routes = []
    files = W.store_files(live)
    for key in files:
        if W.is_metadata(key):
            data = (live / key).read_bytes()
            path = store_path(s, "zarr", *key.split("/"))
            routes.append(Route(s, "raw meta", path, raw_meta_check(data, None), raw_key=key))
            routes.append(Route(s, "raw meta", path, raw_meta_check(data, (0, 16)), raw_key=key,
                                headers={"Range": "bytes=0-15"}, status=206))
    for name in W.RAW_ARRAYS:
        arr = raw_array(live, name)
        for key in files:
            if key.startswith(name + "/") and not W.is_metadata(key):
                routes.append(Route(s, "raw chunk", store_path(s, "zarr", *key.split("/")),
                                    raw_chunk_check(arr, key), raw_key=key))
    return routes


def menu(root: Path) -> dict[str, dict[str, list[Route]]]:
    """store -> route name -> routes."""
    out = {}
    for spec in W.STORES:
        routes = element_routes(spec)
        if spec.backend == "zarr":
            routes += raw_routes(spec, root / spec.name)
        by_name = defaultdict(list)
        for r in routes:
            by_name[r.name].append(r)
        out[spec.name] = dict(by_name)
    return out


# Weights of the route kinds a reader picks (then a route of that kind).
KIND_WEIGHTS = {"summary": 1, "obs": 3, "obs bin": 1, "var": 1, "X json": 3, "X bin": 2,
                "raw meta": 1, "raw chunk": 3}


# ------------------------------------------------------------ what the readers saw
@dataclass
class Event:
    """An answer that is allowed only at some moments (or never)."""
    store: str
    route: str
    what: str                 # 404, 422, torn, aborted, wrong, status 500, ...
    detail: str
    t0: float
    t1: float


@dataclass
class Tally:
    counts: Counter = field(default_factory=Counter)           # (store, route, outcome)
    etags: dict = field(default_factory=lambda: defaultdict(set))     # (store, etag) -> {k}
    raw_etags: dict = field(default_factory=lambda: defaultdict(set))  # (store, key, etag) -> {sha1}
    ks: dict = field(default_factory=lambda: defaultdict(set))        # store -> {k}
    events: list = field(default_factory=list)
    connects: int = 0

    def merge(self, other: "Tally") -> None:
        self.counts.update(other.counts)
        for src, dst in ((other.etags, self.etags), (other.raw_etags, self.raw_etags), (other.ks, self.ks)):
            for key, vals in src.items():
                dst[key] |= vals
        self.events += other.events
        self.connects += other.connects


def ask(conn: http.client.HTTPConnection, route: Route, tally: Tally, specs) -> int | None:
    """One request; records its outcome; returns the k it answered."""
    key = (route.store, route.name)
    t0 = time.monotonic()
    try:
        conn.request("GET", route.path, headers=route.headers)
        resp = conn.getresponse()
        body = resp.read()
    except (OSError, http.client.HTTPException) as exc:
        conn.close()
        # a server that stops sending (a file shrunk under sendfile) leaves the
        # client waiting: a hang, never allowed; a connection cut short is
        # allowed for raw keys only, during an in-place rewrite
        what = "timeout" if isinstance(exc, TimeoutError) else "aborted" if route.raw_key else "connection"
        tally.counts[key + (what,)] += 1
        tally.events.append(Event(route.store, route.name, what, f"{type(exc).__name__}: {exc}"[:160],
                                  t0, time.monotonic()))
        return None
    t1 = time.monotonic()
    status = resp.status
    if status == 503:
        ok = resp.getheader("Retry-After") is not None
        tally.counts[key + ("503" if ok else "503 without Retry-After",)] += 1
        if not ok:
            tally.events.append(Event(route.store, route.name, "503 without Retry-After", "", t0, t1))
        return None
    if status in (404, 406, 422) or (status == 416 and "Range" in route.headers):
        tally.counts[key + (str(status),)] += 1
        tally.events.append(Event(route.store, route.name, str(status), body[:160].decode(errors="replace"),
                                  t0, t1))
        return None
    if status != route.status:
        tally.counts[key + (f"status {status}",)] += 1
        tally.events.append(Event(route.store, route.name, f"status {status}",
                                  body[:160].decode(errors="replace"), t0, t1))
        return None
    try:
        k = route.check(specs[route.store], body, resp.headers)
    except Torn as exc:
        tally.counts[key + ("torn",)] += 1
        tally.events.append(Event(route.store, route.name, "torn", f"{route.raw_key}: {exc}", t0, t1))
        k = "torn:" + hashlib.sha1(body).hexdigest()[:12]
    except Wrong as exc:
        tally.counts[key + ("wrong",)] += 1
        tally.events.append(Event(route.store, route.name, "wrong", str(exc)[:200], t0, t1))
        return None
    except Exception as exc:  # noqa: BLE001 - an undecodable element answer is wrong
        tally.counts[key + ("wrong",)] += 1
        tally.events.append(Event(route.store, route.name, "wrong", f"{type(exc).__name__}: {exc}"[:200],
                                  t0, t1))
        return None
    else:
        tally.counts[key + ("ok",)] += 1
    etag = resp.getheader("ETag")
    if etag is None:
        tally.counts[key + ("no ETag",)] += 1
        tally.events.append(Event(route.store, route.name, "no ETag", "", t0, t1))
        return None
    if route.raw_key is not None:
        if status == 200:
            tally.raw_etags[(route.store, route.raw_key, etag)].add(hashlib.sha1(body).hexdigest())
    elif isinstance(k, int):
        tally.etags[(route.store, etag)].add(k)
        tally.ks[route.store].add(k)
    return k if isinstance(k, int) else None


def reader(port: int, routes: dict, specs, stop: threading.Event, seed: int, out: list) -> None:
    rng = random.Random(seed)
    tally = Tally()
    stores = sorted(routes)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=REQUEST_TIMEOUT)
    try:
        while not stop.is_set():
            by_kind = routes[rng.choice(stores)]
            kinds = [k for k in KIND_WEIGHTS if k in by_kind]
            kind = rng.choices(kinds, [KIND_WEIGHTS[k] for k in kinds])[0]
            if conn.sock is None:
                tally.connects += 1
            ask(conn, rng.choice(by_kind[kind]), tally, specs)
            stop.wait(rng.uniform(0, 2 * THINK_SECONDS))
    finally:
        conn.close()
        out.append(tally)


# ------------------------------------------------------------ the server process
def healthz(port: int) -> int | str:
    """/healthz's status (or why there is none), on a connection closed at
    once (requests' pool would keep one open past the descriptor count)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=REQUEST_TIMEOUT)
    try:
        conn.request("GET", "/healthz")
        resp = conn.getresponse()
        resp.read()
        return resp.status
    except (OSError, http.client.HTTPException) as exc:
        return f"{type(exc).__name__}: {exc}"
    finally:
        conn.close()


def proc_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


TCP_STATES = {"01": "established", "06": "time-wait", "07": "close", "08": "close-wait",
              "0A": "listen", "09": "last-ack", "04": "fin-wait1", "05": "fin-wait2"}


def tcp_sockets() -> dict[str, str]:
    """socket inode -> 'tcp <state> <local port>-><remote port>' (IPv4)."""
    out = {}
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            p = line.split()
            local, remote, state, inode = p[1], p[2], p[3], p[9]
            out[inode] = (f"tcp {TCP_STATES.get(state, state)} "
                          f"{int(local.split(':')[1], 16)}->{int(remote.split(':')[1], 16)}")
    return out


def fd_targets(pid: int) -> Counter:
    """What the process's descriptors are open on: files by path, TCP
    sockets by state (their ports too unless listening), others by kind."""
    tcp, out = tcp_sockets(), Counter()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        m = re.match(r"socket:\[(\d+)\]", target)
        if m and m.group(1) in tcp:
            desc = tcp[m.group(1)]
            target = desc.split(" ->")[0] if "listen" in desc else desc
        out[re.sub(r"^(socket|pipe|anon_inode):.*", r"\1", target)] += 1
    return out


def fd_diff(before: Counter, after: Counter) -> str:
    more, fewer = after - before, before - after
    return f"more: {dict(more)}, fewer: {dict(fewer)}"


def proc_rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def settled_fds(pid: int, want: int | None = None, timeout: float = 5.0) -> int:
    """The descriptor count once closed connections are gone: equal to want,
    or unchanged for 0.5 s."""
    deadline = time.monotonic() + timeout
    last, since = proc_fds(pid), time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.05)
        now = proc_fds(pid)
        if want is not None and now == want:
            return now
        if now != last:
            last, since = now, time.monotonic()
        elif want is None and time.monotonic() - since >= 0.5:
            return now
    return last


def is_asan(binary: Path) -> bool:
    return b"__asan_init" in binary.read_bytes()


def rss_bound(args: list[str], asan: bool) -> int:
    """How far RSS may end above its start after the soak.  Memory that may
    stay: the answer cache and the decoded chunk cache, each bounded by its
    flag (both 0 with caches off); derived structures of the current
    versions (name indexes of 120 and 40 names: well under 1 MiB); and what
    the allocator keeps of the peak of 256 requests at once (each holds at
    most a few answers of < 100 KiB here, and libmicrohttpd's 64 KiB
    connection pool), 48 MiB.  Under AddressSanitizer freed memory sits in
    its quarantine (quarantine_size_mb, 256 by default) and its allocator
    keeps per-thread caches: 64 MiB more for those."""
    def flag(name: str, default: int) -> int:
        return int(args[args.index(name) + 1]) if name in args else default

    bound = flag("--answer-cache-bytes", ANSWER_CACHE_DEFAULT) + \
        flag("--zarr-chunk-cache-bytes", CHUNK_CACHE_DEFAULT) + 48 * MIB
    if asan:
        m = re.search(r"quarantine_size_mb=(\d+)", os.environ.get("ASAN_OPTIONS", ""))
        bound += (int(m.group(1)) if m else 256) * MIB + 64 * MIB
    return bound


class Sampler(threading.Thread):
    """Peaks of the server's descriptors and RSS while the soak runs."""

    def __init__(self, pid: int):
        super().__init__(daemon=True)
        self.pid, self.stop, self.peak_fds, self.peak_rss = pid, threading.Event(), 0, 0

    def run(self):
        while not self.stop.wait(0.2):
            try:
                self.peak_fds = max(self.peak_fds, proc_fds(self.pid))
                self.peak_rss = max(self.peak_rss, proc_rss(self.pid))
            except OSError:
                return


# ------------------------------------------------------------ mutators
def start_mutators(procs: dict, root: Path, staging: Path, first: dict, logdir: Path) -> None:
    """One soak_writers.py process per store, into procs; returns once each
    has written its first version and waits for `go`."""
    for n, spec in enumerate(W.STORES):
        err = open(logdir / f"mutator-{spec.name}.log", "wb")
        procs[spec.name] = subprocess.Popen(
            [sys.executable, str(HERE / "soak_writers.py"), "--root", str(root), "--staging", str(staging),
             "--store", spec.name, "--first", str(first[spec.name]), "--seed", str(1000 + n)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True)
        err.close()
    for name, p in procs.items():
        line = p.stdout.readline()
        log = (logdir / f"mutator-{name}.log").read_text(errors="replace")
        assert line.strip() == "ready", f"mutator of {name} did not start: {line!r}\n{log[-3000:]}"


def finish_mutators(procs: dict, logdir: Path) -> dict[str, list[dict]]:
    out = {}
    for name, p in procs.items():
        stdout = p.stdout.read()           # to its end: the mutator stops by itself
        p.wait(timeout=10)
        log = (logdir / f"mutator-{name}.log").read_text(errors="replace")
        assert p.returncode == 0, f"mutator of {name} failed ({p.returncode}):\n{log[-3000:]}"
        out[name] = [json.loads(line) for line in stdout.splitlines() if line.strip()]
    return out


# ------------------------------------------------------------ judging
def spans_during(mutations: list[dict], ev: Event) -> list[str]:
    """The methods of the mutations of ev's store that overlapped the request."""
    return sorted({m["method"] for m in mutations if ev.t0 <= m["t1"] and ev.t1 >= m["t0"]})


def allowed(ev: Event, methods: list[str], raw: bool) -> bool:
    """Whether an answer other than a whole version is explainable by what
    the store's mutator was doing meanwhile."""
    non_atomic = any(m in W.NON_ATOMIC for m in methods)
    if ev.what in ("404", "406", "422", "416"):
        # a refusal of a store caught half written: an element or file
        # missing, truncated (a Range past its end is 416) or not yet what
        # its metadata says (never data)
        return non_atomic or (raw and ev.what == "404" and bool(methods))
    if ev.what == "torn":
        return raw and non_atomic
    if ev.what == "aborted":     # a file cut short under sendfile: only when truncated in place
        return raw and "inplace" in methods
    return False                 # wrong values, other statuses, connection errors


def judge(tally: Tally, mutations: dict) -> tuple[list[str], Counter, Counter]:
    """(failures, allowed counts, failure counts) with phase = overlapping methods."""
    failures, ok_counts, bad_counts = [], Counter(), Counter()
    for ev in tally.events:
        methods = spans_during(mutations[ev.store], ev)
        phase = "+".join(methods) or "steady"
        raw = ev.route.startswith("raw")
        key = (ev.store, phase, ev.route, ev.what)
        if allowed(ev, methods, raw):
            ok_counts[key] += 1
        else:
            bad_counts[key] += 1
            if bad_counts[key] <= 3:
                failures.append(f"{ev.store} [{phase}] {ev.route} {ev.what}: {ev.detail}")
    for (store, etag), ks in sorted(tally.etags.items()):
        if len(ks) != 1:
            bad_counts[(store, "-", "ETag", "names several versions")] += 1
            failures.append(f"{store}: ETag {etag} answered versions {sorted(ks)[:10]}")
    for (store, key, etag), bodies in sorted(tally.raw_etags.items()):
        if len(bodies) != 1:
            bad_counts[(store, "-", "raw ETag", "names several bodies")] += 1
            if bad_counts[(store, "-", "raw ETag", "names several bodies")] <= 5:
                failures.append(f"{store}: raw key {key} ETag {etag} answered {len(bodies)} bodies")
    return failures, ok_counts, bad_counts


def table(counter: Counter) -> str:
    return "\n".join(f"  {n:6d}  {' | '.join(k)}" for k, n in sorted(counter.items())) or "  (none)"


# ------------------------------------------------------------ one sequential pass
def full_pass(port: int, routes: dict, specs, final: dict, patience: float = 10.0) -> list[str]:
    """Every route once, each a whole answer of version final[store]; a
    503 (a server may wait for a store to settle) is asked again for up to
    `patience` seconds."""
    problems = []
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=REQUEST_TIMEOUT)
    deadline = time.monotonic() + patience
    try:
        for store, by_kind in routes.items():
            for kind, rs in by_kind.items():
                for r in rs:
                    while True:
                        t = Tally()
                        k = ask(conn, r, t, specs)
                        if not (t.counts[(store, r.name, "503")] and time.monotonic() < deadline):
                            break
                        time.sleep(0.1)
                    if t.events or t.counts[(store, r.name, "503")]:
                        what = t.events[0].what + " " + t.events[0].detail if t.events else "503"
                        problems.append(f"{store} {r.path}: {what}")
                    elif k is not None and k != final[store]:
                        problems.append(f"{store} {r.path}: version {k}, want {final[store]}")
    finally:
        conn.close()
    return problems


# ------------------------------------------------------------ the test
@pytest.fixture
def soak_root(tmp_path):
    """(root, staging): an empty data root (each store's mutator writes its
    first version) and, on the same file system, where the next versions
    are written before they are swapped in."""
    root, staging = tmp_path / "root", tmp_path / "staging"
    root.mkdir()
    staging.mkdir()
    return root, staging


def mutation_summary(mutations: dict, final: dict) -> str:
    lines = []
    for name, ms in mutations.items():
        by = defaultdict(list)
        for m in ms:
            by[m["method"]].append(m["t1"] - m["t0"])
        staged = [m["staged_s"] for m in ms if m["method"] != "anndata"]
        lines.append(f"  {name} -> v{final[name]}: " + ", ".join(
            f"{meth} x{len(d)} ({max(d):.2f} s at most)" for meth, d in by.items())
            + (f"; staged writes {sum(staged) / len(staged):.2f} s on average" if staged else ""))
    return "\n".join(lines)


@pytest.mark.parametrize("config", list(CONFIGS))
def test_soak_never_mixed(config, soak_root, server_factory, tmp_path):
    root, staging = soak_root
    specs = W.SPECS
    clock = {"start": time.monotonic()}
    first = {s.name: 1 for s in W.STORES}
    mutators, stop, tallies, readers = {}, threading.Event(), [], []
    try:
        start_mutators(mutators, root, staging, first, tmp_path)    # each writes its store's v1
        args = ["--threads", str(SERVER_THREADS), *CONFIGS[config]]
        srv = server_factory(root, *args)
        pid = srv.proc.pid
        routes = menu(root)
        warm = full_pass(srv.port, routes, specs, first)
        assert not warm, warm[:5]
        fds0 = settled_fds(pid)
        targets0 = fd_targets(pid)
        rss0 = proc_rss(pid)
        clock["warm"] = time.monotonic()

        sampler = Sampler(pid)
        sampler.start()
        readers += [threading.Thread(target=reader, args=(srv.port, routes, specs, stop, i, tallies),
                                     daemon=True) for i in range(CONNECTIONS)]
        for t in readers:
            t.start()
        for p in mutators.values():
            p.stdin.write(f"go {SOAK_SECONDS}\n")
            p.stdin.close()
        mutations = finish_mutators(mutators, tmp_path)
        time.sleep(0.3)            # a steady moment after the last change
        stop.set()
        for t in readers:
            t.join(timeout=60)
        assert not any(t.is_alive() for t in readers), "a reader hung"
        clock["soak"] = time.monotonic()
        sampler.stop.set()
        sampler.join()
    finally:
        stop.set()
        for p in mutators.values():
            if p.poll() is None:
                p.kill()
                p.wait()

    tally = Tally()
    for t in tallies:
        tally.merge(t)
    failures, allowed_counts, bad_counts = judge(tally, mutations)
    final = {name: (m[-1]["k"] if m else first[name]) for name, m in mutations.items()}

    # after the soak: alive, healthy, the final versions, resources back
    health = healthz(srv.port) if srv.alive() else f"the server died (exit {srv.proc.returncode})"
    last, fds1, targets1, rss1 = ["not asked: the server is not healthy"], -1, Counter(), -1
    if health == 200:
        time.sleep(0.5)
        last = full_pass(srv.port, routes, specs, final)
        fds1 = settled_fds(pid, want=fds0)
        targets1 = fd_targets(pid)
        rss1 = proc_rss(pid)
    bound = rss_bound(args, is_asan(cellar_bin()))
    clock["after"] = time.monotonic()

    answered = Counter()
    for (store, route, outcome), n in tally.counts.items():
        answered[outcome] += n
    report = "\n".join([
        f"soak {config}: {CONNECTIONS} connections ({tally.connects} connects), "
        f"{sum(answered.values())} requests: {dict(answered)}",
        f"seconds: setup and warm-up {clock['warm'] - clock['start']:.1f}, soak {clock['soak'] - clock['warm']:.1f}, "
        f"after {clock['after'] - clock['soak']:.1f}",
        "mutations:", mutation_summary(mutations, final),
        "versions answered: " + ", ".join(f"{s} {len(ks)}" for s, ks in sorted(tally.ks.items())),
        f"after the soak: /healthz {health}; fds {fds0} -> peak {sampler.peak_fds} -> {fds1}; "
        f"RSS {rss0 / MIB:.1f} MiB -> peak {sampler.peak_rss / MIB:.1f} -> {rss1 / MIB:.1f} MiB "
        f"(bound +{bound / MIB:.0f} MiB)" + ("" if fds1 in (fds0, -1) else f"; descriptors {fd_diff(targets0, targets1)}"),
        "allowed (store | phase | route | outcome):", table(allowed_counts),
        "FAILURES (store | phase | route | outcome):", table(bad_counts),
    ])
    print(report)
    assert not failures, report + "\nfirst failures:\n  " + "\n  ".join(failures[:60])
    assert health == 200, f"/healthz after the soak: {health}\n{report}"
    assert not last, report + "\nafter the soak:\n  " + "\n  ".join(last[:20])
    # the soak did what it says
    for spec in W.STORES:
        done = {m["method"] for m in mutations[spec.name]}
        assert done == set(W.MUTATIONS[spec.backend]), f"{spec.name}: only {done} ran\n{report}"
        assert len(tally.ks[spec.name]) >= 3, f"{spec.name}: readers saw versions {tally.ks[spec.name]}"
    assert sampler.peak_fds >= fds0 + CONNECTIONS, \
        f"the server never held {CONNECTIONS} connections at once\n{report}"
    assert fds1 == fds0, \
        f"descriptors {fds0} before the soak, {fds1} after ({fd_diff(targets0, targets1)})\n{report}"
    assert rss1 - rss0 <= bound, f"RSS grew {(rss1 - rss0) / MIB:.1f} MiB\n{report}"
    assert healthz(srv.port) == 200 and srv.alive()
    rc = srv.stop()
    assert rc == 0, f"cellar exited {rc} on SIGTERM (a sanitizer report?)\n{report}"
