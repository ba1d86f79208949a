"""Nothing outside a zarr store, and nothing but zarr keys: chunk and group
symlinks that lead outside the store, dotfiles and .git/ inside it, a FIFO
planted as a chunk and a chunk linked to itself.  The store is a valid
AnnData written by anndata (zarr); the plants are made by hand."""

from __future__ import annotations

import os
import time

import anndata as ad
import numpy as np
import pytest
import zarr

SECRET = b"Z4RR-S3CR3T-0123456789abcdefgh!!"


def chunk_files(array_dir):
    meta = {".zarray", ".zattrs", ".zgroup", "zarr.json"}
    return sorted(p for p in array_dir.rglob("*")
                  if (p.is_symlink() or p.is_file() or p.is_fifo()) and p.name not in meta)


@pytest.fixture(scope="module")
def zroot(tmp_path_factory):
    base = tmp_path_factory.mktemp("zesc")
    root, outside = base / "root", base / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "secret.bin").write_bytes(SECRET * 8)
    g = zarr.open_group(str(outside / "leak.zarr"), mode="w", zarr_format=2)
    g.create_array("data", data=np.frombuffer(SECRET * 8, dtype=np.int8), compressors=None)
    rng = np.random.default_rng(3)
    a = ad.AnnData(X=rng.random((6, 4)).astype(np.float32))
    a.obs_names = [f"c{i}" for i in range(6)]
    a.obsm["X_umap"] = rng.random((6, 2))
    a.layers["counts"] = rng.random((6, 4)).astype(np.float32)
    for name in ("links.zarr", "dots.zarr", "fifo.zarr"):
        with ad.settings.override(zarr_write_format=2):
            a.write_zarr(root / name)
    links = root / "links.zarr"
    x_chunk = chunk_files(links / "X")[0]
    x_chunk.unlink()
    os.symlink(outside / "secret.bin", x_chunk)
    os.symlink(outside / "leak.zarr", links / "uns" / "leak")
    layer_chunk = chunk_files(links / "layers" / "counts")[0]
    layer_chunk.unlink()
    os.symlink(layer_chunk.name, layer_chunk)  # linked to itself
    dots = root / "dots.zarr"
    (dots / ".git").mkdir()
    (dots / ".git" / "config").write_bytes(SECRET)
    (dots / ".env").write_bytes(SECRET)
    (dots / ".zattrs~").write_bytes(SECRET)
    (dots / "obs" / ".secret").write_bytes(SECRET)
    fifo = root / "fifo.zarr"
    umap_chunk = chunk_files(fifo / "obsm" / "X_umap")[0]
    umap_chunk.unlink()
    os.mkfifo(umap_chunk)
    return root


def assert_no_secret(r, what):
    assert r.status_code < 500, (what, r.status_code, r.text[:300])
    for needle in (SECRET, SECRET[:12], b"Z4RR"):
        assert needle not in r.content, what
    # the int8 values of the secret as JSON numbers
    assert b"90, 52, 82, 82" not in r.content.replace(b",", b", "), what


def test_links_out_of_the_store(zroot, server_factory):
    s = server_factory(zroot)
    x_key = chunk_files(zroot / "links.zarr" / "X")[0].relative_to(zroot / "links.zarr").as_posix()
    for path in ["", "/X", "/X?format=bin", "/uns", "/uns/leak", "/uns/leak/data", "/layers/counts",
                 f"/zarr/{x_key}", "/zarr/uns/leak/data/0", "/zarr/uns/leak/.zgroup"]:
        assert_no_secret(s.get(f"/v1/stores/links.zarr{path}"), path)
    r = s.get("/v1/stores/links.zarr/X")
    assert r.status_code == 422 and "leads outside the store" in r.json()["detail"], r.text
    r = s.get("/v1/stores/links.zarr/layers/counts")
    assert r.status_code == 422 and "loops" in r.json()["detail"], r.text
    assert s.get(f"/v1/stores/links.zarr/zarr/{x_key}").status_code == 404
    # what does not reach out still answers
    assert s.get("/v1/stores/links.zarr/obs").status_code == 200
    assert s.get("/v1/stores/links.zarr/obsm/X_umap").status_code == 200


def test_only_zarr_keys_are_served(zroot, server_factory):
    s = server_factory(zroot)
    for key in [".git/config", ".env", ".zattrs~", "obs/.secret", ".git/", "./.env", "obs/../.env"]:
        r = s.get(f"/v1/stores/dots.zarr/zarr/{key}")
        assert r.status_code == 404, (key, r.status_code)
        assert_no_secret(r, key)
    for key in [".zgroup", ".zattrs", ".zmetadata", "obs/.zattrs", "X/.zarray"]:
        assert s.get(f"/v1/stores/dots.zarr/zarr/{key}").status_code == 200, key


def test_fifo_chunk_answers_at_once(zroot, server_factory):
    s = server_factory(zroot)
    key = chunk_files(zroot / "fifo.zarr" / "obsm" / "X_umap")[0]
    rel = key.relative_to(zroot / "fifo.zarr").as_posix()
    t0 = time.monotonic()
    r = s.get("/v1/stores/fifo.zarr/obsm/X_umap")
    assert r.status_code == 422, r.text
    assert "not a regular file" in r.json()["detail"]
    assert s.get(f"/v1/stores/fifo.zarr/zarr/{rel}").status_code == 404
    assert time.monotonic() - t0 < 5
    assert s.get("/v1/stores/fifo.zarr/X").status_code == 200
