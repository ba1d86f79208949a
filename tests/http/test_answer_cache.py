"""The answer cache (--answer-cache-bytes): a repeated GET is answered from
the answers kept for the store version, byte for byte what the handler made;
a changed file, another query, another encoding or a POST never gets a kept
answer; SIGHUP and --answer-cache-bytes 0 drop or disable it."""

from __future__ import annotations

import gzip
import os
import signal
import time
import warnings
from pathlib import Path

import anndata as ad
import numpy as np
import pandas as pd
import pytest

from conftest import Server
from test_server import metric

OBS_PATH = "/v1/stores/cache.h5ad/obs"
QUERY = {"rows": "2:7", "columns": "score,kind"}


def write_store(path: Path, offset: float) -> ad.AnnData:
    """A small AnnData; `offset` changes every obs score."""
    n = 10
    obs = pd.DataFrame(
        {"score": np.arange(n, dtype=np.float64) + offset,
         "kind": pd.Categorical(["a", "b"] * (n // 2))},
        index=[f"cell{i}" for i in range(n)])
    adata = ad.AnnData(X=np.ones((n, 3), dtype=np.float32), obs=obs)
    tmp = path.with_suffix(".tmp.h5ad")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        adata.write_h5ad(tmp)
    os.replace(tmp, path)  # a new file (new inode): a new store version
    return adata


def counters(srv: Server) -> tuple[float, float, float]:
    text = srv.get("/metrics").text
    return (metric(text, "cellar_answer_cache_hits_total"),
            metric(text, "cellar_answer_cache_misses_total"),
            metric(text, "cellar_answer_cache_entries"))


@pytest.fixture()
def cache_root(tmp_path) -> Path:
    root = tmp_path / "root"
    root.mkdir()
    write_store(root / "cache.h5ad", 0.0)
    return root


def test_repeated_get_is_answered_from_the_cache(cache_root, server_factory):
    srv = server_factory(cache_root)
    first = srv.get(OBS_PATH, **QUERY)
    assert first.status_code == 200
    hits0, misses0, entries0 = counters(srv)
    assert entries0 == 1
    for i in range(3):
        again = srv.get(OBS_PATH, **QUERY)
        assert again.status_code == 200
        assert again.content == first.content
        for h in ("Content-Type", "ETag", "Last-Modified", "Cache-Control", "Vary",
                  "Access-Control-Allow-Origin"):
            assert again.headers.get(h) == first.headers.get(h), h
        assert counters(srv)[0] == hits0 + i + 1
    # HEAD shares the GET's answer: same headers, no body.
    head = srv.head(OBS_PATH, **QUERY)
    assert head.status_code == 200 and head.content == b""
    assert head.headers["ETag"] == first.headers["ETag"]
    assert int(head.headers["Content-Length"]) == len(first.content)
    # A conditional request still gets its 304 (answered before the cache).
    cond = srv.get(OBS_PATH, {"If-None-Match": first.headers["ETag"]}, **QUERY)
    assert cond.status_code == 304 and cond.content == b""


def test_other_queries_formats_and_encodings_are_other_answers(cache_root, server_factory):
    srv = server_factory(cache_root)
    plain = srv.get(OBS_PATH, **QUERY)
    other_rows = srv.get(OBS_PATH, rows="0:3", columns="score,kind")
    assert other_rows.content != plain.content
    csv = srv.get(OBS_PATH, format="csv", **QUERY)
    assert csv.headers["Content-Type"].startswith("text/csv")
    csv_by_accept = srv.get(OBS_PATH, {"Accept": "text/csv"}, **QUERY)
    assert csv_by_accept.headers["Content-Type"].startswith("text/csv")
    assert csv_by_accept.content == csv.content
    assert srv.get(OBS_PATH, **QUERY).content == plain.content  # still JSON

    # Bodies of 1 KiB and more are compressed when asked: each encoding is
    # its own answer, and the identity one never comes back compressed.
    big = {"rows": "0:10"}
    ident = srv.get(OBS_PATH, {"Accept-Encoding": "identity"}, **big)
    assert len(ident.content) >= 1024 or "Content-Encoding" not in ident.headers
    for _ in range(2):
        raw = srv.session.get(srv.url(OBS_PATH, big), headers={"Accept-Encoding": "gzip"},
                              stream=True, timeout=30)
        body = raw.raw.read(decode_content=False)
        if len(ident.content) >= 1024:
            assert raw.headers["Content-Encoding"] == "gzip"
            assert gzip.decompress(body) == ident.content
        again = srv.get(OBS_PATH, {"Accept-Encoding": "identity"}, **big)
        assert "Content-Encoding" not in again.headers
        assert again.content == ident.content


def test_replaced_file_is_never_answered_from_old_answers(cache_root, server_factory):
    srv = server_factory(cache_root)
    before = srv.get(OBS_PATH, **QUERY)
    assert srv.get(OBS_PATH, **QUERY).content == before.content
    expected = write_store(cache_root / "cache.h5ad", 100.0)
    after = srv.get(OBS_PATH, **QUERY)
    assert after.status_code == 200
    assert after.headers["ETag"] != before.headers["ETag"]
    assert after.content != before.content
    doc = after.json()
    assert doc["data"]["score"] == expected.obs["score"].iloc[2:7].tolist()
    assert doc["index"] == expected.obs_names[2:7].tolist()
    assert before.json()["data"]["score"] == [2.0, 3.0, 4.0, 5.0, 6.0]
    assert srv.get(OBS_PATH, **QUERY).content == after.content


def test_errors_and_posts_are_not_kept(cache_root, server_factory):
    srv = server_factory(cache_root)
    _, _, entries0 = counters(srv)
    for _ in range(2):
        assert srv.get(OBS_PATH, columns="no_such_column").status_code == 404
    assert counters(srv)[2] == entries0
    hits0 = counters(srv)[0]
    a = srv.post(OBS_PATH, {"rows": [2, 3, 4], "columns": ["score"]})
    b = srv.post(OBS_PATH, {"rows": [2, 3, 4], "columns": ["score"]})
    assert a.status_code == b.status_code == 200 and a.content == b.content
    assert counters(srv)[0] == hits0


def test_sighup_drops_kept_answers(cache_root, server_factory):
    srv = server_factory(cache_root)
    srv.get(OBS_PATH, **QUERY)
    assert counters(srv)[2] == 1
    srv.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 5
    while counters(srv)[2] != 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert counters(srv)[2] == 0
    assert srv.get(OBS_PATH, **QUERY).status_code == 200


def test_cache_off_with_zero_bytes(cache_root, server_factory):
    srv = server_factory(cache_root, "--answer-cache-bytes", "0")
    first = srv.get(OBS_PATH, **QUERY)
    for _ in range(3):
        assert srv.get(OBS_PATH, **QUERY).content == first.content
    hits, misses, entries = counters(srv)
    assert (hits, entries) == (0, 0)


def test_bound_is_kept(cache_root, server_factory):
    # 16 KiB: the 55 distinct row ranges of 10 rows cannot all stay.
    srv = server_factory(cache_root, "--answer-cache-bytes", "16384")
    first = {}
    for start in range(10):
        for stop in range(start + 1, 11):
            r = srv.get(OBS_PATH, rows=f"{start}:{stop}", columns="score")
            assert r.status_code == 200
            first[(start, stop)] = r.content
    hits, misses, entries = counters(srv)
    assert 0 < entries < len(first)
    assert metric(srv.get("/metrics").text, "cellar_answer_cache_bytes") <= 16384
    # Evicted or kept, every answer is still the same.
    for (start, stop), body in first.items():
        assert srv.get(OBS_PATH, rows=f"{start}:{stop}", columns="score").content == body
