"""The decoded HDF5 chunk cache (--hdf5-chunk-cache-bytes): chunks cellar
decodes itself (deflate, shuffle, LZF) are inflated once, slices read again
copy them, answers stay equal to h5py's read, large reads and scans evict
nothing slices read again, the bound and the off switch hold, and a file replaced is read
anew (its chunks are another version's)."""

from __future__ import annotations

import io
import os
from pathlib import Path

import h5py
import numpy as np
import pytest

import test_zarr_chunk_cache as zarr_cache_test

NAME = "chunks.h5ad"
FILTERS = {"gzip": {"compression": "gzip"}, "shuffle_gzip": {"compression": "gzip", "shuffle": True},
           "lzf": {"compression": "lzf"}}


def write_store(path: Path, x: np.ndarray, **filters) -> None:
    """A dense X in chunks of 50 rows, as anndata writes an array."""
    tmp = path.with_suffix(".tmp")
    with h5py.File(tmp, "w") as f:
        f.attrs["encoding-type"], f.attrs["encoding-version"] = "anndata", "0.1.0"
        d = f.create_dataset("X", data=x, chunks=(50, x.shape[1]), **filters)
        d.attrs["encoding-type"], d.attrs["encoding-version"] = "array", "0.2.0"
        for axis, n in (("obs", x.shape[0]), ("var", x.shape[1])):
            g = f.create_group(axis)
            g.attrs["encoding-type"], g.attrs["encoding-version"] = "dataframe", "0.2.0"
            g.attrs["_index"] = "_index"
            g.attrs.create("column-order", [], dtype=h5py.string_dtype())
            g.create_dataset("_index", data=np.array([f"{axis}{i}" for i in range(n)], dtype=object),
                             dtype=h5py.string_dtype())
    os.replace(tmp, path)


@pytest.fixture(params=list(FILTERS))
def chunk_root(request, tmp_path) -> tuple[Path, np.ndarray, dict]:
    root = tmp_path / "root"
    root.mkdir()
    # small integers: data LZF compresses (it stores a chunk it cannot shrink raw)
    x = np.random.default_rng(7).integers(0, 10, (400, 30)).astype(np.float32)
    write_store(root / NAME, x, **FILTERS[request.param])
    with h5py.File(root / NAME) as f:
        assert f["X"].chunks == (50, 30) and f["X"].compression  # the chunks cellar decodes
        back = f["X"][()]
    return root, back, FILTERS[request.param]


def stats(srv) -> dict[str, float]:
    return zarr_cache_test.stats(srv, "hdf5")


def read_rows(srv, rows: str) -> np.ndarray:
    return zarr_cache_test.read_rows(srv, rows, NAME)


def test_slices_read_again_come_from_the_cache(chunk_root, server_factory):
    root, x, _ = chunk_root
    srv = server_factory(root, "--answer-cache-bytes", "0")
    assert stats(srv)["limit_bytes"] == 64 << 20
    np.testing.assert_array_equal(read_rows(srv, "10:20"), x[10:20])
    first = stats(srv)
    assert first["entries"] == 1 and first["bytes"] >= 50 * 30 * 4 and first["misses_total"] == 1
    for rows, want in (("10:20", x[10:20]), ("12:15", x[12:15]), ("5,11,49", x[[5, 11, 49]])):
        np.testing.assert_array_equal(read_rows(srv, rows), want)
    again = stats(srv)
    assert again["misses_total"] == first["misses_total"]  # nothing inflated again
    assert again["hits_total"] >= first["hits_total"] + 3
    # a slice across two chunks: one from the cache, one decoded
    np.testing.assert_array_equal(read_rows(srv, "40:60"), x[40:60])
    across = stats(srv)
    assert (across["entries"], across["misses_total"]) == (2, first["misses_total"] + 1)
    # the h5grove route reads through the same path
    r = srv.session.get(srv.url("/h5grove/data/", {"file": NAME, "path": "/X", "selection": "45:55,0:30",
                                                   "format": "bin", "dtype": "safe"}), timeout=30)
    assert r.status_code == 200
    np.testing.assert_array_equal(np.frombuffer(r.content, "<f4").reshape(10, 30), x[45:55])
    assert stats(srv)["misses_total"] == across["misses_total"]


def test_whole_array_reads_are_kept_when_small(chunk_root, server_factory):
    root, x, _ = chunk_root
    srv = server_factory(root, "--answer-cache-bytes", "0")
    r = srv.get(f"/v1/stores/{NAME}/X", format="npy")
    np.testing.assert_array_equal(np.load(io.BytesIO(r.content)), x)
    first = stats(srv)
    assert first["entries"] == 8  # h5web reads small datasets whole, again and again
    np.testing.assert_array_equal(read_rows(srv, "0:3"), x[0:3])
    assert stats(srv)["misses_total"] == first["misses_total"]


def test_scans_leave_slices_read_again(chunk_root, server_factory):
    """Reads decoding more than a quarter of the bound keep nothing, and a
    scan of chunks read once (a column index built, an array sent in pieces)
    passes through without evicting a chunk that slices read again."""
    root, x, _ = chunk_root
    bound = 4 * (50 * 30 * 4 + 500)  # four chunks; a quarter holds one
    srv = server_factory(root, "--answer-cache-bytes", "0", "--hdf5-chunk-cache-bytes", str(bound))
    for _ in range(2):
        np.testing.assert_array_equal(read_rows(srv, "10:20"), x[10:20])
    assert stats(srv)["entries"] == 1
    np.testing.assert_array_equal(read_rows(srv, "50:150"), x[50:150])  # two chunks: a scan
    assert stats(srv)["entries"] == 1
    for start in range(50, 400, 50):
        np.testing.assert_array_equal(read_rows(srv, f"{start}:{start + 50}"), x[start:start + 50])
        assert stats(srv)["bytes"] <= bound
    before = stats(srv)
    assert before["entries"] >= 2
    np.testing.assert_array_equal(read_rows(srv, "10:20"), x[10:20])
    after = stats(srv)
    assert after["misses_total"] == before["misses_total"]
    assert after["hits_total"] == before["hits_total"] + 1


def test_off_and_bounded(chunk_root, server_factory):
    root, x, _ = chunk_root
    off = server_factory(root, "--answer-cache-bytes", "0", "--hdf5-chunk-cache-bytes", "0")
    for _ in range(2):
        np.testing.assert_array_equal(read_rows(off, "100:110"), x[100:110])
    s = stats(off)
    assert (s["entries"], s["bytes"], s["hits_total"], s["misses_total"]) == (0, 0, 0, 2)
    bound = 5 * (50 * 30 * 4 + 200)  # five chunks (one may take a quarter of the bound)
    small = server_factory(root, "--answer-cache-bytes", "0", "--hdf5-chunk-cache-bytes", str(bound))
    for start in range(0, 400, 37):
        np.testing.assert_array_equal(read_rows(small, f"{start}:{start + 5}"), x[start:start + 5])
        assert stats(small)["bytes"] <= bound
    assert stats(small)["entries"] >= 2


def test_a_file_replaced_is_read_anew(chunk_root, server_factory):
    root, x, filters = chunk_root
    srv = server_factory(root, "--answer-cache-bytes", "0")
    np.testing.assert_array_equal(read_rows(srv, "60:70"), x[60:70])
    y = x * 2 + 1
    write_store(root / NAME, y, **filters)
    np.testing.assert_array_equal(read_rows(srv, "60:70"), y[60:70])
