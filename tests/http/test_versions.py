"""Store versions: ETag / Last-Modified and conditional requests, CORS, and
files replaced on disk while the server runs."""

from __future__ import annotations

import datetime as dt
import email.utils
import os
import time

import anndata as ad
import numpy as np
import pandas as pd
import pytest

import writers as W
from compare import check_frame_json, frame_encodings
from conftest import assert_json, assert_problem, store_path

ROUTES = [
    store_path(W.FRAME),
    store_path(W.FRAME, "obs"),
    store_path(W.FRAME, "var", "schema"),
    store_path(W.MULTI, "mod"),
    store_path(W.MULTI, "obs"),
    store_path(W.MULTI, "mod", "rna", "var"),
    store_path(W.MULTI, "obsmap", "prot"),
    store_path(W.LINEAGE),
]


def _strip_etag(tag: str) -> str:
    tag = tag.strip()
    if tag.startswith("W/"):
        tag = tag[2:]
    return tag.strip('"')


def _store_of(path: str) -> str:
    for name in W.GOOD_STORES:
        if path.startswith(store_path(name)):
            return name
    raise KeyError(path)


# ------------------------------------------------------------ ETag, Last-Modified
@pytest.mark.parametrize("path", ROUTES)
def test_etag_and_last_modified(get, data_root, path):
    r = get(path)
    assert r.status_code == 200, r.text
    etag = r.headers.get("ETag")
    assert etag, f"no ETag on {path}"
    assert etag.startswith(('"', 'W/"')) and etag.endswith('"'), f"ETag {etag!r} is not quoted"
    lm = r.headers.get("Last-Modified")
    assert lm, f"no Last-Modified on {path}"
    when = email.utils.parsedate_to_datetime(lm)
    mtime = os.stat(data_root / _store_of(path)).st_mtime
    real = dt.datetime.fromtimestamp(int(mtime), dt.timezone.utc)
    assert abs((when - real).total_seconds()) < 1.0, (lm, real)


@pytest.mark.parametrize("path", ROUTES)
def test_if_none_match_304(get, path):
    r = get(path)
    etag = r.headers["ETag"]
    again = get(path, _headers={"If-None-Match": etag})
    assert again.status_code == 304, f"{path}: If-None-Match {etag} gave {again.status_code}"
    assert again.content == b""
    assert again.headers.get("ETag") == etag
    other = get(path, _headers={"If-None-Match": '"not-the-etag"'})
    assert other.status_code == 200
    assert other.content == r.content


def test_if_none_match_list(get):
    path = store_path(W.FRAME, "obs")
    etag = get(path).headers["ETag"]
    r = get(path, _headers={"If-None-Match": f'"zzz", {etag}'})
    assert r.status_code == 304


def test_if_modified_since(get):
    path = store_path(W.FRAME, "obs")
    lm = get(path).headers["Last-Modified"]
    assert get(path, _headers={"If-Modified-Since": lm}).status_code == 304
    past = email.utils.format_datetime(email.utils.parsedate_to_datetime(lm) - dt.timedelta(hours=1),
                                       usegmt=True)
    assert get(path, _headers={"If-Modified-Since": past}).status_code == 200


def test_summary_etag_matches_header(get):
    # The header names the representation: the version's tag (the summary's
    # "etag") joined with what the bytes depend on (issue 16, item 3).
    r = get(store_path(W.FRAME))
    js = assert_json(r)
    version = _strip_etag(js["etag"])
    header = _strip_etag(r.headers["ETag"])
    assert header.startswith(version + "-") and len(header) > len(version) + 1


def test_etag_differs_between_stores(get):
    a = get(store_path(W.FRAME)).headers["ETag"]
    b = get(store_path(W.UNICODE)).headers["ETag"]
    assert a != b


# ------------------------------------------------------------ CORS
ORIGIN = {"Origin": "https://viewer.example.org"}


@pytest.mark.parametrize("path", [store_path(W.FRAME, "obs"), "/v1/stores", store_path(W.MULTI, "mod")])
def test_cors_header(get, path):
    r = get(path, _headers=ORIGIN)
    assert r.status_code == 200
    assert r.headers.get("Access-Control-Allow-Origin") == "*"


def test_cors_exposes_headers(get):
    r = get(store_path(W.FRAME, "obs"), _headers=ORIGIN, columns="f32", format="bin")
    assert r.status_code == 200
    exposed = {h.strip().lower() for h in r.headers.get("Access-Control-Expose-Headers", "").split(",")}
    for h in ("etag", "x-shape", "x-dtype", "content-length", "content-range", "x-nnz",
              "x-indptr-dtype", "x-indices-dtype", "x-column-index"):
        assert h in exposed, f"{h} not in Access-Control-Expose-Headers: {exposed}"


def test_cors_on_errors(get):
    r = get("/v1/stores/nope.h5ad", _headers=ORIGIN)
    assert_problem(r, 404)
    assert r.headers.get("Access-Control-Allow-Origin") == "*"


@pytest.mark.parametrize("path", [store_path(W.FRAME, "obs"), store_path(W.MULTI, "obsmap", "rna")])
def test_cors_preflight(server, path):
    r = server.options(path, _headers={**ORIGIN, "Access-Control-Request-Method": "POST",
                                       "Access-Control-Request-Headers": "content-type, range"})
    assert r.status_code in (200, 204), r.status_code
    assert r.headers.get("Access-Control-Allow-Origin") == "*"
    methods = {m.strip().upper() for m in r.headers.get("Access-Control-Allow-Methods", "").split(",")}
    assert {"GET", "POST"} <= methods, methods
    allowed = r.headers.get("Access-Control-Allow-Headers", "").lower()
    assert "content-type" in allowed or allowed.strip() == "*", allowed


# ------------------------------------------------------------ replaced files
def _adata(prefix: str, n: int, seed: int) -> ad.AnnData:
    rng = np.random.default_rng(seed)
    obs = pd.DataFrame({f"{prefix}_score": rng.random(n),
                        "group": pd.Categorical(rng.choice([f"{prefix}1", f"{prefix}2"], n))},
                       index=[f"{prefix}-{i}" for i in range(n)])
    return ad.AnnData(X=rng.random((n, 3)).astype(np.float32), obs=obs)


@pytest.fixture
def versioned(tmp_path, server_factory):
    root = tmp_path / "root"
    staging = tmp_path / "staging"
    root.mkdir()
    staging.mkdir()
    _adata("a", 10, 1).write_h5ad(root / "v.h5ad")
    return root, staging, server_factory(root)


def _check_served(srv, root):
    path = store_path("v.h5ad", "obs")
    r = srv.get(path)
    js = assert_json(r)
    a = ad.read_h5ad(root / "v.h5ad")
    check_frame_json(js, a.obs, frame_encodings(root / "v.h5ad", "obs"))
    summary = assert_json(srv.get(store_path("v.h5ad")))
    assert summary["shape"] == [a.n_obs, a.n_vars]
    assert summary["bytes"] == os.stat(root / "v.h5ad").st_size
    return r.headers["ETag"]


def test_replaced_file(versioned):
    root, staging, srv = versioned
    etag1 = _check_served(srv, root)
    # os.replace: a new inode under the same name
    _adata("b", 17, 2).write_h5ad(staging / "v.h5ad")
    ino = os.stat(root / "v.h5ad").st_ino
    os.replace(staging / "v.h5ad", root / "v.h5ad")
    assert os.stat(root / "v.h5ad").st_ino != ino
    etag2 = _check_served(srv, root)
    assert etag2 != etag1
    r = srv.get(store_path("v.h5ad", "obs"), _headers={"If-None-Match": etag1})
    assert r.status_code == 200, "the old version's ETag still matches"
    assert r.json()["index"][0] == "b-0"
    # rewritten in place (same inode, another size)
    size = os.stat(root / "v.h5ad").st_size
    ino = os.stat(root / "v.h5ad").st_ino
    _adata("c", 400, 3).write_h5ad(root / "v.h5ad")
    assert os.stat(root / "v.h5ad").st_ino == ino and os.stat(root / "v.h5ad").st_size != size
    etag3 = _check_served(srv, root)
    assert etag3 not in (etag1, etag2)
    listed = {s["name"]: s for s in assert_json(srv.get("/v1/stores"))["stores"]}
    assert listed["v.h5ad"]["bytes"] == os.stat(root / "v.h5ad").st_size
    assert srv.get(store_path("v.h5ad", "obs"), _headers={"If-None-Match": etag3}).status_code == 304


def test_new_and_removed_files(versioned):
    root, staging, srv = versioned
    assert srv.get(store_path("later.h5ad")).status_code == 404
    _adata("d", 5, 4).write_h5ad(root / "later.h5ad")
    js = assert_json(srv.get(store_path("later.h5ad", "obs")))
    assert js["index"] == [f"d-{i}" for i in range(5)]
    assert "later.h5ad" in [s["name"] for s in assert_json(srv.get("/v1/stores"))["stores"]]
    os.unlink(root / "later.h5ad")
    assert_problem(srv.get(store_path("later.h5ad", "obs")), 404)
    assert "later.h5ad" not in [s["name"] for s in assert_json(srv.get("/v1/stores"))["stores"]]


def test_replaced_while_reading(versioned):
    """Requests keep answering (old or new version, never an error) while
    the file is swapped repeatedly."""
    root, staging, srv = versioned
    versions = [("a", 10, 1), ("e", 12, 5), ("f", 14, 6)]
    for i, (prefix, n, seed) in enumerate(versions * 2):
        _adata(prefix, n, seed).write_h5ad(staging / f"{i}.h5ad")
    for i, (prefix, n, seed) in enumerate(versions * 2):
        os.replace(staging / f"{i}.h5ad", root / "v.h5ad")
        js = assert_json(srv.get(store_path("v.h5ad", "obs"), columns="group"))
        assert js["index"] == [f"{prefix}-{k}" for k in range(n)]
        time.sleep(0.01)
