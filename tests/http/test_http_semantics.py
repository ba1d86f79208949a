"""HTTP as caches, fsspec and other real clients expect it (issue 16):
representation ETags and Vary, 304s, preconditions, Range on binary
answers, Accept-Encoding q-values, and problem details that survive
multi-byte text."""

from __future__ import annotations

import gzip
import json
import time

import fsspec
import numpy as np
import pytest
import requests
from numcodecs import Zstd

import writers as W
from conftest import assert_problem, metric_reaches, metric_value, store_path

OBS = store_path(W.FRAME, "obs")
X_BIN = store_path(W.FRAME, "X")
LONG_OBS = store_path(W.FRAME, "obs")


def _etag(r) -> str:
    return r.headers["ETag"]


# ---- item 3: one ETag per representation, Vary on all of them --------------

def test_each_representation_has_its_own_etag(get):
    json_r = get(OBS, rows="0:5")
    csv_r = get(OBS, rows="0:5", format="csv")
    acc_r = get(OBS, _headers={"Accept": "text/csv"}, rows="0:5")
    other_rows = get(OBS, rows="0:6")
    gz = get(OBS, _headers={"Accept-Encoding": "gzip"}, rows="0:40")
    plain = get(OBS, _headers={"Accept-Encoding": "identity"}, rows="0:40")
    for r in (json_r, csv_r, acc_r, other_rows, gz, plain):
        assert r.status_code == 200
        assert r.headers["Vary"] == "Accept, Accept-Encoding"
    tags = [_etag(r) for r in (json_r, csv_r, acc_r, other_rows)]
    assert len(set(tags)) == 4, tags
    assert gz.headers.get("Content-Encoding") == "gzip"
    assert "Content-Encoding" not in plain.headers
    assert _etag(gz) != _etag(plain)
    # The same request again: the same ETag (a function of the version and
    # the request, not of time).
    assert _etag(get(OBS, rows="0:5")) == tags[0]


def test_304_is_per_representation(get):
    json_r = get(OBS, rows="0:5")
    csv_tag = _etag(get(OBS, rows="0:5", format="csv"))
    # The JSON client's tag does not validate the CSV representation.
    r = get(OBS, _headers={"If-None-Match": _etag(json_r)}, rows="0:5", format="csv")
    assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/csv")
    r = get(OBS, _headers={"If-None-Match": csv_tag}, rows="0:5", format="csv")
    assert r.status_code == 304


def test_whole_array_sent_from_the_file_has_its_own_etag_and_vary(server):
    """The whole dense X as bin is sent from the h5ad itself (sendfile: the
    file-answer counter of /metrics moves); that 200 and its 304 carry Vary
    and an ETag of their own, not the JSON answer's."""
    url = server.url(X_BIN, {"format": "bin"})
    before = metric_value(server, "cellar_file_answers_total")
    r = requests.get(url)
    assert r.status_code == 200 and r.headers["Content-Type"] == "application/octet-stream"
    assert metric_reaches(server, "cellar_file_answers_total", before + 1) == before + 1
    json_r = requests.get(server.url(X_BIN))
    assert json_r.status_code == 200 and json_r.headers["Content-Type"].startswith("application/json")
    tag = _etag(r)
    assert tag != _etag(json_r)
    assert r.headers["Vary"] == "Accept, Accept-Encoding"
    assert json_r.headers["Vary"] == "Accept, Accept-Encoding"
    nm = requests.get(url, headers={"If-None-Match": tag})
    assert nm.status_code == 304 and nm.content == b""
    assert nm.headers["ETag"] == tag
    assert nm.headers["Vary"] == "Accept, Accept-Encoding"
    # The JSON answer's tag does not validate the binary one.
    assert requests.get(url, headers={"If-None-Match": _etag(json_r)}).status_code == 200


# ---- item 4: 304 headers, If-Match, If-Unmodified-Since, If-Range ----------

def test_304_keeps_validators_and_states_the_200_length(server):
    full = requests.get(server.url(OBS, {"rows": "0:5"}), headers={"Accept-Encoding": "identity"})
    tag = _etag(full)
    for weak in (tag, "W/" + tag, '"other", ' + tag):
        r = requests.get(server.url(OBS, {"rows": "0:5"}),
                         headers={"If-None-Match": weak, "Accept-Encoding": "identity"})
        assert r.status_code == 304 and r.content == b""
        assert r.headers["ETag"] == tag
        assert r.headers["Vary"] == "Accept, Accept-Encoding"
        assert r.headers["Cache-Control"] == "no-cache"
        assert r.headers["Last-Modified"] == full.headers["Last-Modified"]
        # libmicrohttpd always writes a Content-Length: it is the 200's
        # (RFC 9110 8.6), never a length of its own such as 0.
        assert r.headers["Content-Length"] == str(len(full.content))


def test_if_match_and_if_unmodified_since(get):
    tag = _etag(get(OBS, rows="0:5"))
    assert get(OBS, _headers={"If-Match": tag}, rows="0:5").status_code == 200
    assert get(OBS, _headers={"If-Match": "*"}, rows="0:5").status_code == 200
    body = assert_problem(get(OBS, _headers={"If-Match": '"nope"'}, rows="0:5"), 412)
    assert "If-Match" in body["detail"]
    # If-Match compares strongly: a weak tag never matches.
    assert_problem(get(OBS, _headers={"If-Match": "W/" + tag}, rows="0:5"), 412)
    lm = get(OBS, rows="0:5").headers["Last-Modified"]
    assert get(OBS, _headers={"If-Unmodified-Since": lm}, rows="0:5").status_code == 200
    assert_problem(get(OBS, _headers={"If-Unmodified-Since": "Mon, 01 Jan 2001 00:00:00 GMT"},
                       rows="0:5"), 412)
    # If-Match wins over If-Unmodified-Since (RFC 9110 13.2.2).
    r = get(OBS, _headers={"If-Match": tag, "If-Unmodified-Since": "Mon, 01 Jan 2001 00:00:00 GMT"},
            rows="0:5")
    assert r.status_code == 200


# ---- item 5: Range on binary answers; HEAD and invalid ranges ignored -------

def test_binary_answers_honour_range(server):
    url = server.url(X_BIN, {"format": "bin"})
    full = requests.get(url).content
    assert len(full) > 64
    r = requests.get(url, headers={"Range": "bytes=8-39"})
    assert r.status_code == 206 and r.content == full[8:40]
    assert r.headers["Content-Range"] == f"bytes 8-39/{len(full)}"
    assert r.headers["Accept-Ranges"] == "bytes"
    assert r.headers["Vary"] == "Accept, Accept-Encoding"
    r = requests.get(url, headers={"Range": f"bytes=-10"})
    assert r.status_code == 206 and r.content == full[-10:]
    assert_problem(requests.get(url, headers={"Range": f"bytes={len(full) + 5}-"}), 416)
    for ignored in ("bytes=9-0", "items=0-3", "bytes=x-y"):
        r = requests.get(url, headers={"Range": ignored})
        assert r.status_code == 200 and r.content == full, ignored
    h = requests.head(url, headers={"Range": "bytes=0-3"})
    assert h.status_code == 200 and int(h.headers["Content-Length"]) == len(full)
    # If-Range with the current ETag applies the Range; with another, the whole 200.
    tag = requests.get(url).headers["ETag"]
    assert requests.get(url, headers={"Range": "bytes=0-3", "If-Range": tag}).status_code == 206
    r = requests.get(url, headers={"Range": "bytes=0-3", "If-Range": '"stale"'})
    assert r.status_code == 200 and r.content == full


SPARSE = "sparse.h5ad"


@pytest.fixture(scope="module")
def sparse_server(tmp_path_factory, server_factory):
    """A store whose X is CSR, so that format=npz is a valid answer."""
    import anndata as ad
    import scipy.sparse as sp
    root = tmp_path_factory.mktemp("sparse-root")
    X = sp.random(60, 20, density=0.3, format="csr", dtype=np.float32, random_state=7)
    ad.AnnData(X=X).write_h5ad(root / SPARSE)
    return server_factory(root)


@pytest.mark.parametrize("fmt", ["bin", "npy", "npz"])
def test_fsspec_opens_binary_answers_as_files(server, sparse_server, fmt):
    srv, path = (sparse_server, store_path(SPARSE, "X")) if fmt == "npz" else (server, X_BIN)
    url = srv.url(path, {"format": fmt})
    full = requests.get(url).content
    with fsspec.open(url, block_size=16).open() as f:
        assert f.size == len(full)
        f.seek(len(full) // 2)
        assert f.read(24) == full[len(full) // 2: len(full) // 2 + 24]
        f.seek(3)
        assert f.read(5) == full[3:8]
    if fmt == "npz":
        import io
        import scipy.sparse as sp
        with fsspec.open(url, block_size=16).open() as f:
            m = sp.load_npz(io.BytesIO(f.read()))
        assert m.format == "csr" and m.shape == (60, 20) and m.nnz == 360
    if fmt == "npy":
        with fsspec.open(url).open() as f:
            arr = np.load(f)
        as_bin = requests.get(server.url(X_BIN, {"format": "bin"})).content
        assert arr.ndim == 2 and arr.tobytes() == as_bin


# ---- item 6: Accept-Encoding with q-values, identity and * ----------------

@pytest.mark.parametrize("header,expected", [
    ("gzip;q=1, zstd;q=0.1", "gzip"),
    ("zstd;q=0.5, gzip;q=0.4", "zstd"),
    ("gzip, zstd", "zstd"),
    ("zstd;q=0, gzip", "gzip"),
    ("gzip;q=0, zstd;q=0", None),
    ("*", "zstd"),
    ("*;q=0.2, zstd;q=0", "gzip"),
    ("identity", None),
    ("br", None),
    ("GZIP;Q=0.8", "gzip"),
    ("gzip;q=1.5, zstd;q=0.1", "zstd"),   # 1.5 is not a qvalue: that member is ignored
])
def test_accept_encoding_q_values(server, header, expected):
    url = server.url(OBS, {"rows": "0:60"})
    raw = requests.get(url, headers={"Accept-Encoding": header}, stream=True)
    body = raw.raw.read()
    assert raw.status_code == 200
    assert raw.headers.get("Content-Encoding") == expected
    plain = requests.get(url, headers={"Accept-Encoding": "identity"}).content
    if expected == "gzip":
        body = gzip.decompress(body)
    elif expected == "zstd":
        body = bytes(Zstd().decode(body))
    assert body == plain


def test_identity_refused_compresses_small_answers(server):
    url = server.url(store_path(W.MULTI, "mod"))
    r = requests.get(url, headers={"Accept-Encoding": "identity;q=0, gzip"}, stream=True)
    assert r.headers.get("Content-Encoding") == "gzip"
    assert json.loads(gzip.decompress(r.raw.read()))
    small = requests.get(url, headers={"Accept-Encoding": "gzip"}, stream=True)
    assert "Content-Encoding" not in small.headers  # small: not worth it while identity is fine


# ---- item 7: every problem has its detail, cut on a character boundary -----

@pytest.mark.parametrize("count", [0, 1, 5, 40, 75, 76, 77, 78, 100, 200])
@pytest.mark.parametrize("lead", ["a", "ab", "abc", ""])
def test_problem_detail_survives_multibyte_values(server, lead, count):
    value = lead + "\U0001d47b" * count
    r = requests.get(server.url(OBS, {"rows": value or "x"}))
    body = assert_problem(r, 400)
    assert set(body) >= {"type", "title", "status", "detail", "instance"}
    assert body["instance"] == OBS
    # Whatever was cut, what is left is whole characters of the value.
    quoted = body["detail"].split("'")[1] if "'" in body["detail"] else ""
    assert (value or "x").startswith(quoted)


def test_problem_detail_with_invalid_utf8_in_request(server):
    r = server.raw(OBS + "?rows=a%FF%FE%F0%9D", headers={})
    body = assert_problem(r, 400)
    assert "\ufffd" in body["detail"] and body["instance"] == OBS


# ---- item 9: what libmicrohttpd answers itself, and a body announced too big

def _exchange(server, raw: bytes, timeout: float = 5.0) -> bytes:
    import socket
    s = socket.create_connection(("127.0.0.1", server.port), timeout=timeout)
    try:
        s.sendall(raw)
        out = b""
        while True:
            try:
                d = s.recv(65536)
            except TimeoutError:
                break
            if not d:
                break
            out += d
        return out
    finally:
        s.close()


def test_body_announced_over_the_limit_is_refused_at_once(server):
    start = time.monotonic()
    out = _exchange(server, b"POST " + store_path(W.FRAME, "obs").encode() + b" HTTP/1.1\r\n"
                    b"Host: x\r\nContent-Type: application/json\r\n"
                    b"Content-Length: 99999999999\r\n\r\n{\"rows\":")
    assert time.monotonic() - start < 4, "the server waited for a body it will refuse"
    head, body = out.split(b"\r\n\r\n", 1)
    assert head.startswith(b"HTTP/1.1 413 ")
    assert b"Content-Type: application/problem+json" in head
    problem = json.loads(body)
    assert problem["status"] == 413 and "limit" in problem["detail"]
    assert requests.get(server.url("/healthz")).status_code == 200


@pytest.mark.parametrize("raw,status", [
    (b"GET /" + b"a" * 70000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", 414),
    (b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"b" * 70000 + b"\r\n\r\n", 431),
    (b"GET /healthz HTTP/2.5\r\nHost: x\r\n\r\n", 505),
])
def test_answers_libmicrohttpd_makes_itself(server, raw, status):
    """These come from libmicrohttpd before cellar sees the request, with
    its own short HTML body (README, "Errors" says so); the server keeps
    serving."""
    out = _exchange(server, raw)
    assert out.startswith(f"HTTP/1.1 {status} ".encode())
    assert requests.get(server.url("/healthz")).status_code == 200


def test_request_line_between_32_and_64_kib_reaches_cellar(server):
    """The connection memory is 64 KiB (README, "Errors"): a 40 KB request
    line is cellar's to answer (its 404 problem), not libmicrohttpd's 414."""
    out = _exchange(server, b"GET /" + b"a" * 40000 + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    head, _, body = out.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 404 "), head[:200]
    assert b"Content-Type: application/problem+json" in head


@pytest.mark.parametrize("raw", [b"GARBAGE\r\n\r\n", b"GET\r\n\r\n"])
def test_unparsable_request_line_closes_the_connection(server, raw):
    """README, "Errors": a request line that cannot be parsed closes the
    connection (at most libmicrohttpd's own 400, never a cellar answer);
    the server keeps serving."""
    start = time.monotonic()
    out = _exchange(server, raw)
    assert time.monotonic() - start < 4, "the connection was left open"
    assert out == b"" or out.startswith(b"HTTP/1.1 400 "), out[:200]
    assert b"application/problem+json" not in out
    assert requests.get(server.url("/healthz")).status_code == 200
