"""The decoded zarr chunk cache (--zarr-chunk-cache-bytes): slices read again
decode nothing new, answers stay equal to the local read, reads of a whole
array are not kept, and the bound and the off switch hold."""

from __future__ import annotations

import io
import warnings
from pathlib import Path

import anndata as ad
import numpy as np
import pytest

from test_server import metric

NAME = "chunks.zarr"


@pytest.fixture()
def chunk_root(tmp_path) -> tuple[Path, np.ndarray]:
    root = tmp_path / "root"
    root.mkdir()
    rng = np.random.default_rng(7)
    x = rng.random((400, 30), dtype=np.float32)
    adata = ad.AnnData(X=x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ad.settings.zarr_write_format = 3
        try:
            adata.write_zarr(root / NAME)
        finally:
            ad.settings.zarr_write_format = 2
    back = ad.read_zarr(root / NAME).X
    return root, np.asarray(back)


def stats(srv, cache: str = "zarr") -> dict[str, float]:
    """The /metrics of one decoded-chunk cache (zarr or hdf5)."""
    text = srv.get("/metrics").text
    return {k: metric(text, f"cellar_{cache}_chunk_cache_{k}")
            for k in ("bytes", "entries", "hits_total", "misses_total", "limit_bytes")}


def read_rows(srv, rows: str, name: str = NAME) -> np.ndarray:
    r = srv.get(f"/v1/stores/{name}/X", rows=rows, format="npy")
    assert r.status_code == 200, r.text
    return np.load(io.BytesIO(r.content))


def test_slices_read_again_come_from_the_cache(chunk_root, server_factory):
    root, x = chunk_root
    srv = server_factory(root, "--answer-cache-bytes", "0")
    assert stats(srv)["limit_bytes"] == 64 << 20
    np.testing.assert_array_equal(read_rows(srv, "10:20"), x[10:20])
    first = stats(srv)
    assert first["entries"] >= 1 and first["bytes"] > 0 and first["misses_total"] >= 1
    for rows, want in (("10:20", x[10:20]), ("12:15", x[12:15]), ("5,11,19", x[[5, 11, 19]])):
        np.testing.assert_array_equal(read_rows(srv, rows), want)
    again = stats(srv)
    assert again["misses_total"] == first["misses_total"]  # nothing decoded again
    assert again["hits_total"] >= first["hits_total"] + 3


def test_whole_array_reads_are_not_kept(chunk_root, server_factory):
    root, x = chunk_root
    srv = server_factory(root, "--answer-cache-bytes", "0")
    r = srv.get(f"/v1/stores/{NAME}/X", format="npy")
    np.testing.assert_array_equal(np.load(io.BytesIO(r.content)), x)
    # At most a shard's index (a few bytes an inner chunk) stays, no values.
    scanned = stats(srv)
    assert scanned["bytes"] < 4096, scanned
    np.testing.assert_array_equal(read_rows(srv, "0:3"), x[0:3])
    assert stats(srv)["bytes"] >= scanned["bytes"] + 4 * 3 * 30


def test_off_and_bounded(chunk_root, server_factory):
    root, x = chunk_root
    off = server_factory(root, "--answer-cache-bytes", "0", "--zarr-chunk-cache-bytes", "0")
    for _ in range(2):
        np.testing.assert_array_equal(read_rows(off, "100:110"), x[100:110])
    s = stats(off)
    assert (s["entries"], s["bytes"], s["hits_total"]) == (0, 0, 0)
    small = server_factory(root, "--answer-cache-bytes", "0", "--zarr-chunk-cache-bytes", "200000")
    for start in range(0, 400, 37):
        np.testing.assert_array_equal(read_rows(small, f"{start}:{start + 5}"), x[start:start + 5])
    assert stats(small)["bytes"] <= 200000
