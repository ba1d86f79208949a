"""A seeded corpus of malformed stores, every applicable route on each:
no crash, no hang, every answer a 2xx or a problem+json 4xx (503 with
Retry-After allowed), the server's peak memory under 300 MB, and /healthz
plus an unrelated valid store answering correctly throughout.

The stores are made from the committed examples (written by anndata,
mudata and treedata; see examples/make_examples.py): HDF5 files truncated,
bit-flipped and zeroed; zarr v3 and v2 stores with lying metadata (huge,
negative and zero shapes and chunks, unknown dtypes and codecs), damaged
chunks and a chunk that is a directory; garbage.  CELLAR_CORPUS=full makes
the whole corpus (make test-corpus); the default is a seeded subset that
covers every kind.  Under the sanitizer build (make test runs this file
under both builds) a sanitizer report in the log is a failure.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import time
from pathlib import Path

import anndata as ad
import pytest
import requests

from conftest import REPO

EXAMPLES = REPO / "examples"
HDF5_SOURCES = ["blood.h5ad", "lineage.h5td", "pbmc_small.h5mu"]
ZARR_SOURCES = ["blood.zarr", "lineage.zarr"]
FULL = os.environ.get("CELLAR_CORPUS") == "full"
N_HDF5 = 600 if FULL else 120
N_ZARR = 400 if FULL else 90
REQUEST_TIMEOUT = 30  # seconds: a request not answered by then is a hang


# ------------------------------------------------------------ the corpus
def mutate_hdf5(seed: int) -> tuple[str, str, bytes]:
    rnd = random.Random(seed)
    src = HDF5_SOURCES[seed % len(HDF5_SOURCES)]
    d = bytearray((EXAMPLES / src).read_bytes())
    kind = ["flip", "zero", "trunc", "flip", "zero_big", "garbage"][seed % 6]
    if kind == "flip":
        for _ in range(rnd.randint(1, 40)):
            i = rnd.randrange(len(d))
            d[i] ^= 1 << rnd.randrange(8)
    elif kind == "zero":
        a = rnd.randrange(len(d))
        b = min(len(d), a + rnd.choice([8, 64, 512, 4096]))
        d[a:b] = bytes(b - a)
    elif kind == "zero_big":
        a = rnd.randrange(len(d) // 2)
        d[a:] = bytes(len(d) - a)
    elif kind == "garbage":
        d = bytearray(rnd.randbytes(rnd.choice([0, 1, 8, 512, 4096, 70000])))
        if seed % 12 == 5:
            d[:8] = b"\x89HDF\r\n\x1a\n"  # a signature and nothing behind it
    else:
        d = d[: rnd.randrange(len(d))]
    return src, kind, bytes(d)


def _json_files(store: Path) -> list[Path]:
    return sorted(p for p in store.rglob("*") if p.name in ("zarr.json", ".zarray", ".zattrs"))


def _chunk_files(store: Path) -> list[Path]:
    meta = {"zarr.json", ".zarray", ".zattrs", ".zgroup", ".zmetadata"}
    return sorted(p for p in store.rglob("*") if p.is_file() and p.name not in meta)


LIES = [
    ("shape", [2**62, 3]), ("shape", [-5]), ("shape", [0]), ("shape", [10**12, 10**12]),
    ("chunks", [0]), ("chunks", [2**40]), ("chunks", [-1, 2]),
    ("dtype", "<q9"), ("dtype", "|O"), ("data_type", "complex512"), ("data_type", "int8"),
    ("codecs", [{"name": "no-such-codec"}]), ("compressor", {"id": "lzma9"}),
    ("codecs", [{"name": "sharding_indexed", "configuration": {"chunk_shape": [1 << 30],
                                                                "codecs": [{"name": "bytes"}]}}]),
    ("fill_value", "not a number"), ("zarr_format", 7), ("node_type", "banana"),
    ("attributes", {"encoding-type": "csr_matrix", "encoding-version": "0.1.0", "shape": [9, 9]}),
    ("attributes", {"encoding-type": "categorical", "encoding-version": "0.2.0"}),
    ("attributes", {"encoding-type": "dataframe", "encoding-version": "0.2.0",
                    "_index": "nope", "column-order": ["a", "b"]}),
]


def strip_consolidated(store: Path) -> None:
    """So that the mutated per-node metadata is what is read."""
    root = store / "zarr.json"
    if root.exists():
        doc = json.loads(root.read_text())
        doc.pop("consolidated_metadata", None)
        root.write_text(json.dumps(doc))
    (store / ".zmetadata").unlink(missing_ok=True)


def mutate_zarr(seed: int, dest: Path) -> tuple[str, str]:
    rnd = random.Random(10_000 + seed)
    src = ZARR_SOURCES[seed % len(ZARR_SOURCES)]
    shutil.copytree(EXAMPLES / src, dest)
    kind = ["lie", "lie", "chunk_flip", "chunk_trunc", "chunk_dir", "json_garbage", "lie_consolidated"][seed % 7]
    if kind != "lie_consolidated":
        strip_consolidated(dest)
    if kind in ("lie", "lie_consolidated"):
        target = rnd.choice(_json_files(dest))
        doc = json.loads(target.read_text() or "{}")
        key, value = LIES[rnd.randrange(len(LIES))]
        if target.name == ".zattrs" and key != "attributes":
            doc[key] = value
        elif key == "attributes" and target.name == "zarr.json":
            doc["attributes"] = value
        else:
            doc[key] = value
        target.write_text(json.dumps(doc))
        if kind == "lie_consolidated" and (dest / "zarr.json").exists():
            root = json.loads((dest / "zarr.json").read_text())
            meta = root.get("consolidated_metadata", {}).get("metadata", {})
            if meta:
                k = rnd.choice(sorted(meta))
                meta[k][key] = value
                (dest / "zarr.json").write_text(json.dumps(root))
    elif kind in ("chunk_flip", "chunk_trunc", "chunk_dir"):
        chunk = rnd.choice(_chunk_files(dest))
        data = bytearray(chunk.read_bytes())
        if kind == "chunk_flip" and data:
            for _ in range(rnd.randint(1, 10)):
                i = rnd.randrange(len(data))
                data[i] ^= 1 << rnd.randrange(8)
            chunk.write_bytes(data)
        elif kind == "chunk_trunc":
            chunk.write_bytes(data[: rnd.randrange(len(data) + 1)])
        else:
            chunk.unlink()
            chunk.mkdir()
    else:
        target = rnd.choice(_json_files(dest))
        text = target.read_bytes()
        target.write_bytes(text[: rnd.randrange(len(text) + 1)] + rnd.randbytes(rnd.randrange(8)))
    return src, kind


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("malformed")
    stores = []
    for seed in range(N_HDF5):
        src, kind, data = mutate_hdf5(seed)
        name = f"h{seed:04d}_{kind}{Path(src).suffix}"
        (root / name).write_bytes(data)
        stores.append((name, src, kind))
    for seed in range(N_ZARR):
        name = f"z{seed:04d}.zarr"
        src, kind = mutate_zarr(seed, root / name)
        stores.append((name, src, kind))
    # the unrelated valid store, checked throughout
    shutil.copy(EXAMPLES / "blood.h5ad", root / "good.h5ad")
    return root, stores


# ------------------------------------------------------------ the routes
def routes_for(summary: dict, gene: str | None) -> list[str]:
    r = ["", "/obs", "/var", "/obs/schema", "/obs?format=csv", "/obs?categorical=codes",
         "/X", "/X?format=bin", "/X?format=npy", "/X?rows=0:3", "/X?cols=0:2&layout=csr",
         "/uns", "/raw/X", "/mod", "/obst", "/zarr/.zmetadata", "/zarr/zarr.json"]
    if gene:
        r.append(f"/X?var_names={gene}")
    for key in ("obsm", "varm", "obsp", "layers"):
        for k in (summary.get(key) or [])[:2]:
            r.append(f"/{key}/{k}")
    for k in (summary.get("uns") or [])[:4]:
        r.append(f"/uns/{k}")
    for mod in (summary.get("mod") or [])[:2]:
        m = mod["name"] if isinstance(mod, dict) else mod
        r += [f"/mod/{m}/obs", f"/mod/{m}/X?rows=0:2", f"/obsmap/{m}?rows=0:3"]
    for tree in (summary.get("obst") or [])[:1]:
        t = tree if isinstance(tree, str) else tree.get("key", "")
        r += [f"/obst/{t}", f"/obst/{t}?format=newick",
              f"/obst/{t}/viewport?x0=0&x1=10&y0=0&y1=10&max_nodes=50"]
    return r


def check_answer(r: requests.Response, where: str, failures: list):
    if r.status_code < 400:
        return
    ctype = r.headers.get("Content-Type", "")
    if r.status_code >= 500 and not (r.status_code == 503 and r.headers.get("Retry-After")):
        failures.append(f"{where}: {r.status_code} {r.text[:200]}")
    elif not ctype.startswith("application/problem+json"):
        failures.append(f"{where}: {r.status_code} without problem+json ({ctype})")
    else:
        body = r.json()
        if body.get("status") != r.status_code or not body.get("detail"):
            failures.append(f"{where}: malformed problem {body}")


def vm_hwm_kb(pid: int) -> int:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


@pytest.mark.timeout(3000 if FULL else 900)
def test_malformed_corpus(corpus, server_factory, tmp_path):
    root, stores = corpus
    s = server_factory(root, "--probe-timeout-seconds", "5", "--probe-wait-seconds", "30",
                       "--max-response-bytes", str(64 << 20))
    good = s.get("/v1/stores/good.h5ad/obs", columns="cell_type").json()
    ref = ad.read_h5ad(EXAMPLES / "blood.h5ad")
    assert good["index"] == list(ref.obs_names)
    failures: list[str] = []
    session = requests.Session()
    started = time.monotonic()
    for i, (name, src, kind) in enumerate(stores):
        base = f"{s.base}/v1/stores/{name}"
        try:
            summary = session.get(base, timeout=REQUEST_TIMEOUT)
        except requests.RequestException as e:
            failures.append(f"{name} ({src}, {kind}) summary: no answer ({e.__class__.__name__})")
            session = requests.Session()
            summary = None
        ok = summary is not None and summary.status_code == 200
        gene = None
        if ok:
            try:
                v = session.get(base + "/var", params={"rows": "0:1"}, timeout=REQUEST_TIMEOUT)
                check_answer(v, f"{name} ({src}, {kind}) /var?rows=0:1", failures)
                index = v.json().get("index") if v.status_code == 200 else None
                gene = index[0] if index and isinstance(index[0], str) else None
            except requests.RequestException as e:
                failures.append(f"{name} ({src}, {kind}) /var: no answer ({e.__class__.__name__})")
                session = requests.Session()
        paths = routes_for(summary.json() if ok else {}, gene)
        for route in paths:
            where = f"{name} ({src}, {kind}) {route or '/'}"
            try:
                r = session.get(base + route, timeout=REQUEST_TIMEOUT)
            except requests.RequestException as e:
                failures.append(f"{where}: no answer ({e.__class__.__name__})")
                session = requests.Session()
                continue
            check_answer(r, where, failures)
        if not s.alive():
            failures.append(f"{name} ({src}, {kind}): the server died")
            break
        hwm = vm_hwm_kb(s.proc.pid)
        if hwm > 300 * 1024 and not any("peak resident" in f for f in failures):
            failures.append(f"{name} ({src}, {kind}): peak resident memory {hwm // 1024} MB "
                            "after its routes (over 300 MB)")
        if i % 25 == 0:
            assert s.get("/healthz").status_code == 200
            again = s.get("/v1/stores/good.h5ad/obs", columns="cell_type").json()
            assert again == good, f"the valid store changed its answer after {name}"
    took = time.monotonic() - started
    log = s.log.read_text(errors="replace")
    for marker in ("ERROR: AddressSanitizer", "runtime error:", "ERROR: LeakSanitizer"):
        if marker in log:
            at = log.index(marker)
            failures.append(f"sanitizer report in the log: {log[at:at + 800]}")
    hwm = vm_hwm_kb(s.proc.pid) if s.alive() else 0
    if hwm > 300 * 1024 and not any("peak resident" in f for f in failures):
        failures.append(f"peak resident memory {hwm // 1024} MB (over 300 MB)")
    report = tmp_path / "malformed-failures.json"
    report.write_text(json.dumps({"stores": len(stores), "seconds": took, "failures": failures}, indent=1))
    assert s.alive(), "the server died"
    assert not failures, f"{len(failures)} failures (all in {report}):\n" + "\n".join(failures[:40])
