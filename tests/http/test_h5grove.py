"""The h5grove-compatible routes (/h5grove/...) against h5grove itself.

PyPI's h5grove 4.0.0 (its tornado app, tests/http/h5grove_reference.py)
serves the same folder on 127.0.0.1, and every request below goes to both:
/meta/, /attr/ (all, or attr_keys: known, several, repeated, unknown),
/paths/, /data/ (json, bin, npy, csv, tiff; dtype default, origin and
safe; selections; flatten) and /stats/ over every path of files that
h5py wrote with every dtype it writes (ints, floats, bools, fixed and
variable strings, compound, opaque, enum, complex), scalars, empty arrays,
chunked and compressed datasets, soft, hard and external links, broken
links and committed datatypes.  Answers are compared byte for byte (JSON
control characters aside, which both escape, in other hex case), TIFF by
the image tifffile reads back.

The deliberate differences (api/h5grove/README.md) are checked here too:
- an external link is followed, as h5grove follows it, when its file is
  inside the store's folder (other.h5 beside types.h5: h5grove's very
  bytes); one whose file cellar does not follow (missing.h5) is shown as
  the link where links resolve only when valid and refused with 422
  where they must resolve (README "Bad files");
- where h5grove fails with 500 (a bad selection, /data/ of a group, an
  unknown attr_keys, stats of strings, bytes it cannot encode, big-endian
  integers orjson cannot write), cellar answers 422 or 404 with the
  problem, or the values h5py reads;
- where h5grove's bin answer is not data (h5py.Empty, variable-length
  strings: Python object pointers), cellar answers 422;
- a missing `file` is 422 (h5grove's FastAPI app; its tornado app says 400).
"""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlencode

import h5py
import numpy as np
import pytest
import requests
import tifffile

import h5grove_writers
from conftest import free_port

HERE = Path(__file__).parent
TYPES = "types.h5"
ROUTES = ("meta", "attr", "paths", "data", "stats")


# ------------------------------------------------------------ servers
@pytest.fixture(scope="module")
def grove_root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("h5grove")
    h5grove_writers.write_all(root)
    return root


class Reference:
    """h5grove's tornado app on 127.0.0.1 (its own process)."""

    def __init__(self, root: Path, log: Path):
        self.port = free_port()
        self.log = open(log, "wb")
        self.proc = subprocess.Popen(
            [sys.executable, str(HERE / "h5grove_reference.py"), str(root), str(self.port)],
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                if requests.get(self.base + "/", timeout=1).text == "ok":
                    return
            except requests.RequestException:
                time.sleep(0.1)
        self.stop()
        pytest.fail("h5grove's reference app did not start", pytrace=False)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


@pytest.fixture(scope="module")
def reference(grove_root, tmp_path_factory):
    ref = Reference(grove_root, tmp_path_factory.mktemp("h5grove-log") / "h5grove.log")
    yield ref
    ref.stop()


@pytest.fixture(scope="module")
def cellar(grove_root, server_factory):
    return server_factory(grove_root)


def ask(base: str, route: str, params: list[tuple[str, str]], slash: str = "") -> requests.Response:
    return requests.get(f"{base}/{route}{slash}?{urlencode(params)}", timeout=30)


def both(reference, cellar, route, params):
    ref = ask(reference.base, route, params)
    got = ask(cellar.base + "/h5grove", route, params, slash="/")
    return ref, got


# ------------------------------------------------------------ requests
def file_paths(path: Path) -> dict[str, str]:
    """Every path of the file -> what h5py finds there without following
    links: group, dataset, datatype, soft, external."""
    out = {"/": "group"}
    with h5py.File(path, "r") as f:
        def visit(name):
            link = f.get(name, getlink=True)
            if isinstance(link, h5py.SoftLink):
                out["/" + name] = "soft"
            elif isinstance(link, h5py.ExternalLink):
                out["/" + name] = "external"
            else:
                obj = f[name]
                out["/" + name] = ("group" if isinstance(obj, h5py.Group) else
                                   "dataset" if isinstance(obj, h5py.Dataset) else "datatype")
        f.id.links.visit(lambda n: visit(n.decode()))
    return out


def dataset_ndim(path: Path, name: str) -> int | None:
    with h5py.File(path, "r") as f:
        try:
            d = f[name]
        except (KeyError, OSError):
            return None
        if not isinstance(d, h5py.Dataset):
            return None
        return -1 if d.shape is None else d.ndim


SELECTIONS = {1: ["0", "1:3", "::2", "-1", "-2:", "2:1", "1:", ":"],
              2: ["1", "1:3", "::2,1", ":,1", "0,0", "-1,-2:", "1:3,::2", "2:1,:"],
              3: ["1", "0,1", ":,1,::2", "1,2,3"]}


def attr_names(path: Path, name: str) -> list[str]:
    """The attribute names of the object at name (h5py's order), [] where
    there is none or no object."""
    with h5py.File(path, "r") as f:
        try:
            return list(f[name].attrs.keys())
        except (KeyError, OSError):
            return []


def attr_requests(f: list[tuple[str, str]], names: list[str]) -> list[tuple[str, list[tuple[str, str]]]]:
    """/attr/ with attr_keys: one known key, several (repeated parameter, in
    another order than the file's), the same key twice, an unknown key, and
    an unknown beside a known one."""
    reqs = [("attr", f + [("attr_keys", "no_such_attr")])]
    if names:
        reqs += [("attr", f + [("attr_keys", names[0])]),
                 ("attr", f + [("attr_keys", k) for k in reversed(names)]),
                 ("attr", f + [("attr_keys", names[-1]), ("attr_keys", names[-1])]),
                 ("attr", f + [("attr_keys", names[0]), ("attr_keys", "no_such_attr")])]
    return reqs


def requests_for(root: Path) -> list[tuple[str, list[tuple[str, str]]]]:
    reqs = []
    kinds = file_paths(root / TYPES)
    for p, kind in kinds.items():
        f = [("file", TYPES), ("path", p)]
        for links in (None, "none", "all", "only_valid"):
            reqs.append(("meta", f + ([("resolve_links", links)] if links else [])))
        reqs.append(("attr", f))
        reqs += attr_requests(f, attr_names(root / TYPES, p) if kind != "external" else [])
        if kind == "group":
            reqs.append(("paths", f))
            reqs.append(("paths", f + [("resolve_links", "none")]))
        ndim = dataset_ndim(root / TYPES, p) if kind in ("dataset", "soft", "external") else None
        if ndim is None:
            if kind != "group":
                reqs.append(("data", f))
            continue
        for fmt in (None, "json", "bin", "npy", "csv", "tiff"):
            for dtype in (None, "origin", "safe"):
                q = f + ([("format", fmt)] if fmt else []) + ([("dtype", dtype)] if dtype else [])
                reqs.append(("data", q))
        for sel in SELECTIONS.get(ndim, []):
            reqs.append(("data", f + [("selection", sel)]))
            reqs.append(("data", f + [("selection", sel), ("format", "bin")]))
            reqs.append(("stats", f + [("selection", sel)]))
        if ndim >= 2:
            reqs.append(("data", f + [("flatten", "true")]))
            reqs.append(("data", f + [("flatten", "true"), ("selection", "1:3"), ("format", "npy")]))
        reqs.append(("stats", f))
    return reqs


# ------------------------------------------------------------ differences
def external(params) -> bool:
    """Whether the request's path is an external link cellar does not
    follow (its file is missing) and resolve_links is not none."""
    q = dict(params)
    path = q.get("path", "/")
    return path.startswith("/links/external_broken") and q.get("resolve_links") != "none"


def unresolve_externals(doc, root: Path):
    """h5grove's metadata with every valid external link shown as the link
    itself, as cellar shows it."""
    if isinstance(doc, dict) and "children" in doc:
        out = dict(doc)
        out["children"] = [unresolve_externals(c, root) for c in doc["children"]]
        return out
    return doc


def external_link_meta(name: str) -> dict:
    return {"kind": "external_link", "name": name, "target_file": "other.h5",
            "target_path": "/data"}


def normalize_json(body: bytes) -> bytes:
    # \u001f and \u001F are the same JSON
    return re.sub(rb"\\u([0-9a-fA-F]{4})", lambda m: b"\\u" + m.group(1).lower(), body)


def h5py_value(root: Path, params) -> object:
    """What h5py reads for a /data/ request (the JSON cellar should give
    where h5grove itself fails)."""
    q = dict(params)
    with h5py.File(root / q["file"], "r") as f:
        d = f[q["path"]]
        v = d[()]
        if "selection" in q:
            parts = tuple(int(s) if ":" not in s else slice(*[int(x) if x else None for x in s.split(":")])
                          for s in q["selection"].split(","))
            v = d[parts]
    return np.asarray(v).tolist()


def numpy_stats(root: Path, params) -> dict:
    """h5grove's get_array_stats without its JSON encoder (which fails on
    integers past 64 bits, as the mean of two uint64 near 2**64 is)."""
    q = dict(params)
    with h5py.File(root / q["file"], "r") as f:
        d = f[q["path"]]
        sel = tuple(int(s) if ":" not in s else slice(*[int(x) if x else None for x in s.split(":")])
                    for s in q["selection"].split(",")) if "selection" in q else ()
        data = np.asarray(d[sel] if sel else d[()])
    cast = float if np.issubdtype(data.dtype, np.floating) else int
    sp, p = data[data > 0], data[data >= 0]
    return {"strict_positive_min": cast(sp.min()) if sp.size else None,
            "positive_min": cast(p.min()) if p.size else None,
            "min": cast(data.min()), "max": cast(data.max()),
            "mean": cast(np.mean(data)), "std": cast(np.std(data))}


def check_same(ref, got, route, params, root):
    where = f"{route} {params}"
    fmt = dict(params).get("format")
    assert "message" not in got.headers.get("content-type", "")
    if ref.status_code == 500 or (route == "data" and fmt == "bin" and ref.status_code == 200
                                  and dict(params)["path"] in BIN_NOT_DATA):
        # h5grove fails (or answers pointers): cellar answers the problem
        # or, where h5py reads values, the values
        assert got.status_code in (200, 404, 422), where
        if got.status_code != 200:
            problem = got.json()
            assert problem["status"] == got.status_code and problem["message"], where
            return "h5grove fails"
        if route == "stats":
            assert got.json() == numpy_stats(root, params), where
        else:
            assert route == "data" and fmt in (None, "json"), where
            assert got.json() == h5py_value(root, params), where
        return "h5grove fails, cellar answers h5py's values"
    if external(params) and ref.status_code != 500:
        # shown as the link where links resolve only when valid, refused
        # where they must resolve (all) or where values are asked for
        name = dict(params)["path"].rsplit("/", 1)[1]
        if route == "meta" and dict(params).get("resolve_links") in (None, "only_valid"):
            assert got.status_code == 200, where
            assert got.json() == external_link_meta(name) | {"target_file": "missing.h5"}, where
        else:
            assert got.status_code == 422, where
            assert "external link" in got.json()["message"], where
        return "external link not followed"
    if route == "stats" and ref.status_code == 200 and dict(params)["path"] == "/numbers/c16" \
            and ref.json()["min"] is not None:
        # h5grove's stats of complex numbers are int() of their real parts
        assert got.status_code == 422, where
        return "complex stats refused"
    if fmt == "tiff" and ref.status_code == 200 and dict(params)["path"] in TIFF_NOT_2D:
        # h5grove writes these as tifffile does (pages, bilevel, an empty
        # strip); cellar writes 2D images of numbers only
        assert got.status_code == 422 and "2D" in got.json()["message"], where
        return "tiff refused"
    assert got.status_code == ref.status_code, f"{where}: {got.status_code} != {ref.status_code}: {got.text[:300]}"
    if ref.status_code != 200:
        assert got.json()["message"], where
        assert ref.json()["message"], where
        return "same error"
    for h in ("content-type", "content-disposition"):
        if h in ref.headers:
            assert got.headers.get(h, "").split(";")[0] == ref.headers[h].split(";")[0], (where, h)
    if fmt == "tiff":
        a = tifffile.imread(io.BytesIO(ref.content))
        b = tifffile.imread(io.BytesIO(got.content))
        assert a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b, equal_nan=True), where
        return "same image"
    if fmt in (None, "json"):
        assert normalize_json(got.content) == normalize_json(ref.content), \
            f"{where}\n cellar  {got.content[:400]!r}\n h5grove {ref.content[:400]!r}"
    else:
        assert got.content == ref.content, f"{where}\n cellar  {got.content[:200]!r}\n h5grove {ref.content[:200]!r}"
    return "same bytes"


TIFF_NOT_2D = {"/numbers/zero_length", "/numbers/cube", "/numbers/bool", "/storage/lzf",
               "/storage/fletcher", "/numbers/f8_big", "/numbers/nonfinite", "/numbers/i4_be",
               "/uses_committed", "/deep/er/est/leaf", "/numbers/c16", "/attrs/with_attrs"}

# h5grove's bin of these is Python object pointers, not data
BIN_NOT_DATA = {"/numbers/empty_null", "/strings/vlen", "/strings/vlen_ascii",
                "/strings/scalar_vlen", "/strings/vlen_2d", "/storage/gzip_strings"}


@pytest.mark.timeout(600)  # ~2,000 requests to each server; h5grove takes most of the time
def test_every_route_and_format_as_h5grove(grove_root, reference, cellar):
    reqs = requests_for(grove_root)
    assert len(reqs) > 500
    outcomes: dict[str, int] = {}
    failures = []
    for route, params in reqs:
        ref, got = both(reference, cellar, route, params)
        try:
            out = check_same(ref, got, route, params, grove_root)
        except AssertionError as e:
            failures.append(str(e)[:800])
            continue
        outcomes[out] = outcomes.get(out, 0) + 1
    if failures:
        (Path(__file__).parents[1] / "artifacts").mkdir(exist_ok=True)
        (Path(__file__).parents[1] / "artifacts" / "h5grove_differences.txt").write_text(
            "\n\n".join(failures))
    assert not failures, f"{len(failures)} of {len(reqs)} differ:\n" + "\n".join(failures[:25])
    print(outcomes)
    # most answers are h5grove's very bytes
    assert outcomes.get("same bytes", 0) > 0.6 * len(reqs), outcomes
    assert outcomes.get("same error", 0) > 10, outcomes


NEXUS_FILES = ("scan.nxs", "scan.hdf5")


def nexus_requests(name: str) -> list[tuple[str, list[tuple[str, str]]]]:
    """Every route of h5web's session on a NeXus file (h5grove_writers.write_nexus)."""
    reqs = []
    for p in ("/", "/entry", "/entry/data", "/entry/data/counts", "/entry/data/x", "/entry/title"):
        f = [("file", name), ("path", p)]
        reqs += [("meta", f), ("attr", f)]
        if p.count("/") < 3 and p != "/entry/title":
            reqs.append(("paths", f))
    counts = [("file", name), ("path", "/entry/data/counts")]
    for q in ([], [("selection", "2:9,::3")], [("format", "bin"), ("dtype", "safe")],
              [("selection", "1"), ("format", "npy")], [("format", "csv")], [("format", "tiff")]):
        reqs.append(("data", counts + q))
    reqs += [("data", [("file", name), ("path", "/entry/data/x")]),
             ("data", [("file", name), ("path", "/entry/title")]),
             ("stats", counts), ("attr", counts + [("attr_keys", "units")])]
    return reqs


def test_hdf5_file_names_as_h5grove(grove_root, reference, cellar):
    """Files named as HDF5 files are but not as stores (.nxs, .hdf5) are
    served by the h5grove routes as by h5grove, after a probe walked them,
    and stay out of the store routes and the store list."""
    probes = metric_sum(cellar, "cellar_probes_total")
    for name in NEXUS_FILES:
        for route, params in nexus_requests(name):
            ref, got = both(reference, cellar, route, params)
            assert ref.status_code == 200, (route, params, ref.text[:200])
            assert check_same(ref, got, route, params, grove_root) in ("same bytes", "same image")
        assert requests.get(f"{cellar.base}/v1/stores/{name}").status_code == 404
    assert metric_sum(cellar, "cellar_probes_total") >= probes + len(NEXUS_FILES)
    listed = {s["name"] for s in requests.get(cellar.base + "/v1/stores").json()["stores"]}
    assert TYPES in listed and not listed & set(NEXUS_FILES)
    # the suffixes only, not any name: a file without one is no HDF5 file here
    (grove_root / "scan.txt").write_bytes((grove_root / "scan.nxs").read_bytes())
    try:
        got = requests.get(cellar.base + "/h5grove/meta/", params={"file": "scan.txt"})
        assert got.status_code == 404
    finally:
        (grove_root / "scan.txt").unlink()


def metric_sum(srv, name: str) -> float:
    """The sum of a metric over its labels."""
    text = requests.get(srv.base + "/metrics").text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name + "{") or line.startswith(name + " "))


def test_errors_and_routes(grove_root, reference, cellar):
    c = cellar.base + "/h5grove"
    assert requests.get(c + "/").text == "ok"
    # the trailing slash is optional, as h5grove's own routes have none
    a = requests.get(c + "/meta", params={"file": TYPES, "path": "/numbers"})
    b = requests.get(c + "/meta/", params={"file": TYPES, "path": "/numbers"})
    assert a.status_code == 200 and a.content == b.content
    for route in ROUTES:
        ref, got = both(reference, cellar, route, [("file", "nope.h5"), ("path", "/")])
        assert ref.status_code == got.status_code == 404
        assert got.json()["message"]
        # a missing file: 422 (tornado says 400)
        got = requests.get(f"{c}/{route}/", params={"path": "/"})
        assert got.status_code == 422 and "file" in got.json()["message"]
        assert got.headers["content-type"] == "application/problem+json"
    # a compound's field is no HDF5 path (cellar's node backend shows
    # fields as arrays of their own, for anndata before 0.7)
    for route in ("data", "meta", "stats"):
        ref, got = both(reference, cellar, route, [("file", TYPES), ("path", "/other/compound/x")])
        assert ref.status_code == got.status_code == 404, route
    # file names never leave the root
    for bad in ("../types.h5", "/etc/passwd.h5", "numbers/../../x.h5"):
        assert requests.get(c + "/meta/", params={"file": bad}).status_code == 404


def test_auth_grants_the_file(grove_root, server_factory, tmp_path):
    import hashlib
    tok_types, tok_other = "h5grove-token-types", "h5grove-token-other"
    auth = tmp_path / "tokens"
    auth.write_text(f"{hashlib.sha256(tok_types.encode()).hexdigest()} {TYPES}\n"
                    f"{hashlib.sha256(tok_other.encode()).hexdigest()} other.h5\n")
    srv = server_factory(grove_root, "--auth-file", str(auth))
    try:
        url = srv.base + "/h5grove/data/"
        q = {"file": TYPES, "path": "/numbers/i4"}
        assert requests.get(url, params=q).status_code == 401
        assert requests.get(url, params=q, headers={"Authorization": f"Bearer {tok_other}"}).status_code == 404
        ok = requests.get(url, params=q, headers={"Authorization": f"Bearer {tok_types}"})
        assert ok.status_code == 200 and ok.json() == h5py.File(grove_root / TYPES)["numbers/i4"][()].tolist()
        assert requests.get(url, params={**q, "access_token": tok_types}).status_code == 200
    finally:
        srv.stop()


@pytest.mark.skipif(not Path("/usr/bin/setpriv").exists() or __import__("os").geteuid() != 0,
                    reason="needs root and setpriv to run cellar as another user")
def test_unreadable_file_is_403(tmp_path_factory):
    """A file the server may not read is 403, with h5grove's message
    (h5grove's open_file_with_error_fallback).  Root reads every file, so
    cellar runs as nobody here."""
    import os
    import shutil
    from conftest import cellar_bin
    root = Path("/tmp") / f"h5grove-403-{os.getpid()}"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(mode=0o755)
    try:
        h5grove_writers.write_other(root / "ok.h5")
        h5grove_writers.write_other(root / "secret.h5")
        os.chmod(root / "ok.h5", 0o644)
        os.chmod(root / "secret.h5", 0o600)
        port = free_port()
        proc = subprocess.Popen(["/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                                 str(cellar_bin()), "--root", str(root), "--port", str(port)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            base = f"http://127.0.0.1:{port}/h5grove"
            deadline = time.monotonic() + 15
            while True:
                try:
                    if requests.get(base + "/", timeout=1).status_code == 200:
                        break
                except requests.RequestException:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)
            for route in ROUTES:
                ok = requests.get(f"{base}/{route}/", params={"file": "ok.h5", "path": "/data"})
                # /paths/ of a dataset is 422 (h5grove: 500)
                assert ok.status_code == (422 if route == "paths" else 200), (route, ok.text)
                r = requests.get(f"{base}/{route}/", params={"file": "secret.h5", "path": "/data"})
                assert r.status_code == 403, (route, r.text)
                assert r.json()["message"] == "Cannot read file: Permission denied!"
        finally:
            proc.terminate()
            proc.wait(timeout=10)
    finally:
        shutil.rmtree(root, ignore_errors=True)
