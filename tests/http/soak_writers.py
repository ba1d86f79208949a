"""Stores for tests/http/test_soak.py, and the process that changes them.

Every store holds one *version* k of the same AnnData, written by the real
writers (anndata's write_h5ad, and for zarr what its write_zarr does:
write_dispatched into a group opened with mode "w", then zarr's
consolidate_metadata).
k is in every value a route can return, so an answer that mixes two
versions, or holds values of none (the fill value of a chunk not written
yet), is told apart from a whole version:

    obs names  c{i}_v{k:04d}          var names  g{j}_v{k:04d}
    obs.v      k  (int64)             obs.w      k * 1000 + i  (float64)
    obs.s      s{i}_v{k:04d}          obs.cat    {a,b,c}_v{k:04d} (categorical)
    var.gv     k  (int32)             X[i, j]    k * X_BASE + i * N_VARS + j (float32)

Versions share their layout: same shapes, chunks, dtypes and the same
metadata files byte for byte (k is zero-padded to a fixed width, so even an
.h5ad keeps its size), so a rewrite of the chunk files alone leaves a zarr
store's root metadata as it was.

Run as a script, this module is the mutator of one store (one process per
store: the writers never wait for the readers' GIL, nor they for them):

    python soak_writers.py --root R --staging S --store NAME --first K

It writes version K when the store is not there yet, prints `ready`,
reads `go SECONDS` on stdin, then replaces or rewrites the store with
versions K+1, K+2, ... for about that long (run_mutator), cycling through
the methods of MUTATIONS, and prints one JSON line per mutation:
{"k", "method", "t0", "t1", "staged_s"} (time.monotonic(): one clock for
every process of the machine; t0..t1 is when the live store was being
changed, staged_s how long writing the version aside took before).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import random
import shutil
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

N_OBS, N_VARS = 120, 40
X_CHUNKS = (20, 10)      # X in 6 x 4 chunk files (v3 sharded: in shards of them)
FRAME_CHUNK = 16         # obs columns in 8 chunk files, var columns in 3
X_BASE = 10000           # > N_OBS * N_VARS: X's value names its version
W_BASE = 1000            # > N_OBS: obs.w's value names its version
MAX_VERSION = 1600       # k * X_BASE + N_OBS * N_VARS stays exact in float32 (< 2**24)
CATEGORIES = ("a", "b", "c")
OBS_COLUMNS = ["v", "w", "s", "cat"]
VAR_COLUMNS = ["gv"]
IN_PLACE_PAUSE = 0.001   # between two files of an in-place rewrite: a writer that never stops for long


@dataclass(frozen=True)
class StoreSpec:
    name: str
    backend: str          # zarr | hdf5
    zarr_format: int = 0
    sharded: bool = False


STORES = [
    StoreSpec("ad_v2.zarr", "zarr", 2),
    StoreSpec("ad_v3.zarr", "zarr", 3),
    StoreSpec("ad_v3_sharded.zarr", "zarr", 3, sharded=True),   # anndata 0.13's default v3 layout
    StoreSpec("ad.h5ad", "hdf5"),
]
SPECS = {s.name: s for s in STORES}

# How each backend's store is changed, in turn (see mutate()).
MUTATIONS = {
    "zarr": ["inplace", "exchange", "anndata"],
    "hdf5": ["replace", "inplace"],
}
# The methods during which a reader may catch a store half written.
NON_ATOMIC = {"inplace", "anndata"}


# ------------------------------------------------------------ the values of version k
def tag(k: int) -> str:
    return f"v{k:04d}"


def version_of_name(name: str) -> int | None:
    """k of a name or string value ending in _v{k:04d}, else None."""
    head, sep, tail = name.rpartition("_v")
    return int(tail) if sep and len(tail) == 4 and tail.isdigit() else None


def obs_names(k: int, rows) -> list[str]:
    return [f"c{i}_{tag(k)}" for i in rows]


def var_names(k: int, cols) -> list[str]:
    return [f"g{j}_{tag(k)}" for j in cols]


def obs_column(k: int, column: str, rows) -> list:
    if column == "v":
        return [k for _ in rows]
    if column == "w":
        return [float(k * W_BASE + i) for i in rows]
    if column == "s":
        return [f"s{i}_{tag(k)}" for i in rows]
    if column == "cat":
        return [f"{CATEGORIES[i % 3]}_{tag(k)}" for i in rows]
    raise KeyError(column)


def x_block(k: int, rows, cols) -> np.ndarray:
    r = np.asarray(rows, dtype=np.int64)[:, None]
    c = np.asarray(cols, dtype=np.int64)[None, :]
    return (k * X_BASE + r * N_VARS + c).astype(np.float32)


# Numeric arrays whose raw chunks the soak decodes: element value -> k, and
# the expected values of version k at (broadcast) element positions.
RAW_ARRAYS = {
    "X": (lambda v: int(v) // X_BASE, lambda k, i, j: k * X_BASE + i * N_VARS + j),
    "obs/w": (lambda v: int(v) // W_BASE, lambda k, i: k * W_BASE + i),
    "obs/v": (lambda v: int(v), lambda k, i: np.full(np.shape(i), k)),
    "var/gv": (lambda v: int(v), lambda k, j: np.full(np.shape(j), k)),
}


def make_adata(k: int):
    import anndata as ad
    import pandas as pd

    if not 1 <= k <= MAX_VERSION:
        raise ValueError(f"version {k} outside 1..{MAX_VERSION}")
    rows, cols = range(N_OBS), range(N_VARS)
    obs = pd.DataFrame(
        {
            "v": np.full(N_OBS, k, dtype=np.int64),
            "w": np.array(obs_column(k, "w", rows), dtype=np.float64),
            "s": obs_column(k, "s", rows),
            "cat": pd.Categorical.from_codes(np.arange(N_OBS) % 3, [f"{c}_{tag(k)}" for c in CATEGORIES]),
        },
        index=obs_names(k, rows),
    )
    var = pd.DataFrame({"gv": np.full(N_VARS, k, dtype=np.int32)}, index=var_names(k, cols))
    return ad.AnnData(X=x_block(k, rows, cols), obs=obs, var=var)


# ------------------------------------------------------------ writing
@contextlib.contextmanager
def zarr_settings(spec: StoreSpec):
    import anndata as ad

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        old = ad.settings.zarr_write_format, ad.settings.auto_shard_zarr_v3
        ad.settings.zarr_write_format = spec.zarr_format
        ad.settings.auto_shard_zarr_v3 = spec.sharded
    try:
        yield
    finally:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ad.settings.zarr_write_format, ad.settings.auto_shard_zarr_v3 = old


def write_version(path: Path, spec: StoreSpec, k: int) -> None:
    """Writes version k of spec's store at path, the way a user would:
    write_h5ad; or for zarr what anndata's write_zarr does (open the group
    with mode "w", which clears whatever is there, anndata's attributes,
    write_dispatched, consolidate_metadata), with a callback that chunks X
    X_CHUNKS and the obs and var columns FRAME_CHUNK rows, so they span
    several chunk files."""
    import anndata as ad
    import zarr

    warnings.filterwarnings("ignore")
    adata = make_adata(k)
    if spec.backend == "hdf5":
        adata.write_h5ad(path)
        return

    def callback(write_func, store, elem_name, elem, *, dataset_kwargs, iospec):
        name = f"{store.path}/{elem_name}".strip("/")     # elem_name is relative to store
        if name == "X":
            dataset_kwargs = dict(dataset_kwargs, chunks=X_CHUNKS)
        elif name.split("/")[0] in ("obs", "var") and getattr(elem, "ndim", 0) == 1:
            dataset_kwargs = dict(dataset_kwargs, chunks=(FRAME_CHUNK,))
        write_func(store, elem_name, elem, dataset_kwargs=dataset_kwargs)

    with zarr_settings(spec):
        group = zarr.open_group(path, mode="w", zarr_format=spec.zarr_format)
        group.attrs.update({"encoding-type": "anndata", "encoding-version": "0.1.0"})
        ad.experimental.write_dispatched(group, "/", adata, callback=callback)
        zarr.consolidate_metadata(path)


def store_files(path: Path) -> list[str]:
    """Every file of a zarr directory, relative to it, sorted."""
    out = []
    for dirpath, _, files in os.walk(path):
        for f in files:
            out.append(os.path.relpath(os.path.join(dirpath, f), path))
    return sorted(out)


def is_metadata(key: str) -> bool:
    return key.rsplit("/", 1)[-1] in (".zarray", ".zgroup", ".zattrs", ".zmetadata", "zarr.json")


# ------------------------------------------------------------ mutations
_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def exchange(a: Path, b: Path) -> None:
    """Swaps two directories atomically (renameat2 RENAME_EXCHANGE): at every
    instant the live path names one whole store."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"renameat2(RENAME_EXCHANGE) {a} <-> {b}: {os.strerror(err)}")


def rewrite_files_in_place(live: Path, staged: Path, rng: random.Random) -> None:
    """Copies every file of staged over the same file of live, in place and
    not atomically (open r+b, truncate, write: the inode stays, and for a
    moment the file is empty), in random order, metadata files included
    (their bytes are the same), IN_PLACE_PAUSE between files."""
    files = store_files(staged)
    rng.shuffle(files)
    for rel in files:
        data = (staged / rel).read_bytes()
        target = live / rel
        try:
            f = open(target, "r+b")
        except FileNotFoundError:
            f = open(target, "wb")
        with f:
            f.truncate(0)
            f.write(data)
        time.sleep(IN_PLACE_PAUSE)


def copy_file_in_place(live: Path, staged: Path) -> None:
    """An .h5ad rewritten over itself (same inode): truncated, then written
    in 16 KiB pieces with a pause between them."""
    with open(staged, "rb") as src, open(live, "r+b") as dst:
        dst.truncate(0)
        while block := src.read(16 * 1024):
            dst.write(block)
            dst.flush()
            time.sleep(IN_PLACE_PAUSE)


def mutate(spec: StoreSpec, live: Path, staging: Path, k: int, method: str,
           rng: random.Random) -> tuple[float, float]:
    """Changes the live store to version k by `method`; returns the span
    (t0, t1) during which the live store was being changed."""
    staged = staging / f"{spec.name}.{k}"
    if method != "anndata":
        write_version(staged, spec, k)     # written aside first, then swapped in or copied
    t0 = time.monotonic()
    if method == "exchange":        # zarr, atomic: swap the directories, then remove the old one
        exchange(staged, live)
        shutil.rmtree(staged)       # requests still reading the old version see its files go
    elif method == "replace":       # hdf5, atomic: rename over (a new inode)
        os.replace(staged, live)
    elif method == "inplace" and spec.backend == "zarr":
        rewrite_files_in_place(live, staged, rng)
    elif method == "inplace":
        copy_file_in_place(live, staged)
    elif method == "anndata":       # write_zarr straight over the live store
        write_version(live, spec, k)
    else:
        raise ValueError(method)
    t1 = time.monotonic()
    if staged.is_dir():
        shutil.rmtree(staged)
    elif staged.exists():
        staged.unlink()
    return t0, t1


def run_mutator(root: Path, staging: Path, spec: StoreSpec, first: int, seconds: float,
                seed: int, out) -> None:
    """Mutates for `seconds` (no new mutation once the longest so far would
    overrun them), and in any case until every method ran once, but never
    past twice `seconds` (a machine too busy to write even that much)."""
    rng = random.Random(seed)
    methods = MUTATIONS[spec.backend]
    live = root / spec.name
    start = time.monotonic()
    k, n, longest = first, 0, 0.0
    while True:
        elapsed = time.monotonic() - start
        if elapsed + longest >= seconds and (n >= len(methods) or elapsed >= 2 * seconds):
            break
        k += 1
        method = methods[n % len(methods)]
        n += 1
        started = time.monotonic()
        t0, t1 = mutate(spec, live, staging, k, method, rng)
        longest = max(longest, time.monotonic() - started)
        out.write(json.dumps({"k": k, "method": method, "t0": t0, "t1": t1, "staged_s": t0 - started}) + "\n")
        out.flush()
        time.sleep(rng.uniform(0.05, 0.25))   # a steady moment between changes


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--root", type=Path, required=True)
    p.add_argument("--staging", type=Path, required=True)
    p.add_argument("--store", required=True, choices=sorted(SPECS))
    p.add_argument("--first", type=int, required=True, help="the version live now")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    warnings.filterwarnings("ignore")
    spec = SPECS[args.store]
    live = args.root / spec.name
    if not live.exists():          # the first version, written here beside the other stores'
        write_version(live, spec, args.first)
    print("ready", flush=True)
    line = sys.stdin.readline().split()
    if len(line) != 2 or line[0] != "go":
        return 2
    run_mutator(args.root, args.staging, spec, args.first, float(line[1]), args.seed, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
