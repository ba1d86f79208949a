"""Vitessce renders stores served by cellar (issue 13, "Vitessce renders an
.h5ad served by cellar").

A page built from the `vitessce` npm package (tests/browser/vitessce: its
lock file, bundled by esbuild into a temporary folder) is served from an
origin of its own on 127.0.0.1 and opened in Debian's Chromium through
playwright-core (tests/browser/viewer/browser.mjs: the same launch flags,
every request beyond 127.0.0.1 blocked).  Each view is one Vitessce config
(file type anndata.zarr, obsEmbedding obsm/X_umap, obsFeatureMatrix X, one
scatterplot) pointing at a cellar URL:

- cells.zarr, written by anndata.write_zarr with X as CSC, through
  /v1/stores/cells.zarr/zarr/, drawn plain and coloured by a gene;
- cells.h5ad, written by anndata.write_h5ad with X as CSR, with the
  embedding through /v1/stores/cells.h5ad/zarr/ and the gene through
  /v1/stores/cells.h5ad/zarr-csc/ (the view of HDF5 stores).

What is asserted: the scatterplot's pixels (drawn, and coloured where the
gene is expressed), every request the page made (the keys of the embedding,
the gene as indptr plus the chunks of its column's slice of data and
indices, never the whole matrix), no console errors but Chromium's line for
each 404 of a zarr client's `.zarray` probe of a group (Vitessce documents
those probes), and nothing fetched beyond 127.0.0.1.  Screenshots are kept
in tests/artifacts/vitessce-*.png.
"""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path

import anndata as ad
import numpy as np
import pandas as pd
import pytest
import requests
import scipy.sparse as sp
import zarr

import browser_pages
import viewer_writers

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "tests" / "browser" / "vitessce"
LAUNCHER = REPO / "tests" / "browser" / "viewer"
ARTIFACTS = REPO / "tests" / "artifacts"
GENE = "CD3E"  # marks the first cluster (viewer_writers.cells), drawn right of the centre
OTHER_GENE = "LYZ"  # marks the fourth, opposite it (left of the centre)
ZARR_CHUNK = 1024  # elements per chunk of cells.zarr's X/data, X/indices
# Chromium's console line for a fetch answered 404.
PROBE_404 = "console: Failed to load resource: the server responded with a status of 404 (Not Found)"

pytestmark = pytest.mark.timeout(600)  # esbuild and four page loads on a busy machine


# ------------------------------------------------------------ fixtures
def write_zarr_cells(path: Path) -> ad.AnnData:
    """viewer_writers.cells as a zarr v2 store with X as CSC, its data and
    indices in chunks of ZARR_CHUNK (anndata's own writer for the element)."""
    a = viewer_writers.cells(3000)
    a.X = a.X.tocsc()
    with ad.settings.override(zarr_write_format=2):
        a.write_zarr(path)
        g = zarr.open_group(path, mode="a", use_consolidated=False)
        del g["X"]
        ad.io.write_elem(g, "X", a.X, dataset_kwargs={"chunks": (ZARR_CHUNK,)})
    zarr.consolidate_metadata(str(path))
    return a


def h5ad_cells(n: int = 20000, extra: int = 540) -> ad.AnnData:
    """viewer_writers.cells with more cells and 540 more genes of background
    counts: a CSR X of about 3 M stored values (25 MB of data and indices),
    so one gene's column is a small part of the matrix."""
    a = viewer_writers.cells(n)
    rng = np.random.default_rng(11)
    bg = sp.csr_matrix(rng.poisson(0.3, (n, extra)).astype(np.float32))
    genes = list(a.var_names) + [f"BG{i:03d}" for i in range(extra)]
    b = ad.AnnData(X=sp.hstack([a.X, bg], format="csr"), obs=a.obs, var=pd.DataFrame(index=genes))
    b.obsm["X_umap"] = a.obsm["X_umap"]
    return b


@pytest.fixture(scope="module")
def vit_root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("vitessce")
    write_zarr_cells(root / "cells.zarr")
    h5ad_cells().write_h5ad(root / "cells.h5ad")
    return root


@pytest.fixture(scope="module")
def vserver(vit_root, server_factory):
    return server_factory(vit_root)


@pytest.fixture(scope="module")
def driver(tmp_path_factory):
    """Runs tests/browser/vitessce/drive.mjs on a page bundled for this run."""
    node, npm = browser_pages.node_and_npm("the Vitessce test")
    browser_pages.npm_ready(npm, LAUNCHER, "playwright-core")
    browser_pages.npm_ready(npm, PAGE, "vitessce")
    dist = tmp_path_factory.mktemp("vitessce-page")
    browser_pages.build_page(node, PAGE, dist)
    ARTIFACTS.mkdir(exist_ok=True)

    def run(views: list[dict]) -> dict:
        config = {"dist": str(dist), "artifacts": str(ARTIFACTS), "views": views}
        r = subprocess.run([node, str(PAGE / "drive.mjs"), json.dumps(config)],
                           capture_output=True, text=True, timeout=360, cwd=PAGE)
        assert r.returncode == 0, f"driver failed:\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}"
        out = json.loads(r.stdout)
        for v in views:
            assert "failed" not in out["views"][v["name"]], f"view {v['name']}:\n{out['views'][v['name']]['failed']}"
        return out

    return run


def vitessce_config(embedding_url: str, matrix_url: str, gene: str | None) -> dict:
    """One scatterplot of obsm/X_umap, coloured by `gene` when given.  The
    embedding and the matrix are one file when they share a URL, else two
    files of the dataset."""
    values = {"obsType": "cell", "featureType": "gene", "featureValueType": "expression"}
    embedding = {"obsEmbedding": [{"path": "obsm/X_umap", "embeddingType": "UMAP"}]}
    matrix = {"obsFeatureMatrix": {"path": "X"}}
    if embedding_url == matrix_url:
        files = [{"fileType": "anndata.zarr", "url": embedding_url, "coordinationValues": values,
                  "options": {**embedding, **matrix}}]
    else:
        files = [{"fileType": "anndata.zarr", "url": url, "coordinationValues": values, "options": options}
                 for url, options in ((embedding_url, embedding), (matrix_url, matrix))]
    scopes = {"embeddingType": "A", "featureSelection": "A", "obsColorEncoding": "A", "featureValueColormap": "A"}
    return {
        "version": "1.0.16", "name": "cellar", "initStrategy": "auto",
        "datasets": [{"uid": "A", "name": "cells", "files": files}],
        "coordinationSpace": {
            "embeddingType": {"A": "UMAP"},
            "featureSelection": {"A": [gene] if gene else None},
            "obsColorEncoding": {"A": "geneSelection" if gene else "cellSetSelection"},
            "featureValueColormap": {"A": "plasma"},
        },
        "layout": [{"component": "scatterplot", "coordinationScopes": scopes, "x": 0, "y": 0, "w": 12, "h": 12}],
    }


def prefix(server, store: str, view: str = "zarr") -> str:
    return f"{server.base}/v1/stores/{store}/{view}"


@pytest.fixture(scope="module")
def seen_zarr(vserver, driver) -> dict:
    url = prefix(vserver, "cells.zarr")
    return driver([{"name": "zarr-plain", "config": vitessce_config(url, url, None)},
                   {"name": "zarr-gene", "config": vitessce_config(url, url, GENE)},
                   {"name": "zarr-other-gene", "config": vitessce_config(url, url, OTHER_GENE)}])


@pytest.fixture(scope="module")
def h5ad_view(vserver):
    """The server, once the zarr view of cells.h5ad answers (a build
    without the view fails every test that uses it)."""
    r = vserver.get("/v1/stores/cells.h5ad/zarr/.zattrs")
    assert r.status_code == 200, r.text
    assert r.json()["encoding-type"] == "anndata"
    return vserver


@pytest.fixture(scope="module")
def seen_h5ad(h5ad_view, driver) -> dict:
    return driver([{"name": "h5ad-gene", "config": vitessce_config(
        prefix(h5ad_view, "cells.h5ad"), prefix(h5ad_view, "cells.h5ad", "zarr-csc"), GENE)}])


# ------------------------------------------------------------ helpers
# anndata 0.13 (pandas 3) writes a string obs index as a nullable string array
# (a group with values and mask); anndata 0.12 (the Python 3.11 set) as a plain
# string array.
OBS_INDEX = ("obs/_index/values" if tuple(int(x) for x in __import__("anndata").__version__.split(".")[:2]) >= (0, 13)
             else "obs/_index")


def keys(view: dict, url_prefix: str) -> list[str]:
    """The keys the page read under one prefix (/v1/stores/S/zarr), in order."""
    p = url_prefix.split("://", 1)[1].split("/", 1)[1]
    p = "/" + p + "/"
    return [a["path"][len(p):] for a in view["answers"] if a["path"].startswith(p)]


def array_meta(url: str) -> dict:
    r = requests.get(url + "/.zarray", timeout=10)
    assert r.status_code == 200, url
    return r.json()


def chunk_keys(meta: dict) -> set[str]:
    sep = meta.get("dimension_separator", ".")
    grid = [range(math.ceil(s / c)) for s, c in zip(meta["shape"], meta["chunks"])]
    out = {""}
    for axis in grid:
        out = {(k + sep if k else "") + str(i) for k in out for i in axis}
    return out


def slice_chunks(lo: int, hi: int, chunk: int) -> set[str]:
    return {str(i) for i in range(lo // chunk, (hi - 1) // chunk + 1)} if hi > lo else set()


def assert_clean_console(view: dict, server) -> None:
    """No console error but one 404 line per 404 answer, each the `.zarray`
    probe of a key that the store serves as a group."""
    assert [e for e in view["errors"] if e != PROBE_404] == []
    missing = [a for a in view["answers"] if a["status"] != 200]
    assert view["errors"].count(PROBE_404) == len(missing)
    for a in missing:
        assert a["status"] == 404 and a["method"] == "GET" and a["path"].endswith("/.zarray"), a
        group = a["path"][: -len("/.zarray")]
        assert requests.get(server.base + group + "/.zgroup", timeout=10).status_code == 200, a


def assert_scatterplot_drawn(view: dict, n_cells: int) -> None:
    px = view["pixels"]
    assert px["width"] > 600 and px["height"] > 400
    # every cell is a dot of a few pixels
    assert px["drawn"] > n_cells and px["colours"] > 10
    assert f"{n_cells:,} cells" in view["text"]


def assert_coloured_by_gene(view: dict, gene: str, expr: np.ndarray) -> float:
    """Plasma colours: the cells that express the gene purple to yellow, the
    others dark blue, the warm ones right of the centre for GENE's cluster, left of it
    for OTHER_GENE's; the legend's range is the gene's.  The warm pixels'
    mean x (0..1 of the width)."""
    hues = view["pixels"]["hues"]
    warm = [h for h in hues[:5] + hues[18:] if h["n"]]  # 270-75 degrees: purple to yellow
    cool = [h for h in hues[15:18] if h["n"]]  # 225-270: plasma's dark blue, the zeros
    n_warm, n_cool = sum(h["n"] for h in warm), sum(h["n"] for h in cool)
    assert n_warm > 200 and n_cool > n_warm
    warm_x = sum(h["n"] * h["x"] for h in warm) / n_warm
    cool_x = sum(h["n"] * h["x"] for h in cool) / n_cool
    side = {GENE: 1, OTHER_GENE: -1}[gene]
    assert (warm_x - cool_x) * side > 0.2, (gene, warm_x, cool_x)
    lines = view["text"].split("\n")
    assert gene in lines
    assert f"{expr.max():.0f}" in lines and f"{expr.max():.1f}" in lines
    return warm_x


# ------------------------------------------------------------ .zarr
def test_zarr_nothing_beyond_127_0_0_1_and_no_console_errors(seen_zarr, vserver):
    assert seen_zarr["blocked"] == []
    for name in ("zarr-plain", "zarr-gene", "zarr-other-gene"):
        v = seen_zarr["views"][name]
        assert set(v["origins"]) == {seen_zarr["pageOrigin"], vserver.base}, name
        assert_clean_console(v, vserver)


def test_zarr_scatterplot_is_drawn_from_the_embedding(seen_zarr, vserver, vit_root):
    plain = seen_zarr["views"]["zarr-plain"]
    assert_scatterplot_drawn(plain, 3000)
    # no colour by default: grey dots, no hue
    assert sum(h["n"] for h in plain["pixels"]["hues"]) < plain["pixels"]["drawn"] * 0.01
    url = prefix(vserver, "cells.zarr")
    got = keys(plain, url)
    emb = array_meta(url + "/obsm/X_umap")
    assert {k[len("obsm/X_umap/"):] for k in got if k.startswith("obsm/X_umap/") and ".z" not in k} == chunk_keys(emb)
    assert OBS_INDEX + "/0" in got  # the cells' names
    # without a gene, nothing of X is read
    assert not [k for k in got if k.startswith("X/")]
    assert (ARTIFACTS / "vitessce-zarr-plain.png").stat().st_size > 10000


def test_zarr_colouring_by_a_gene_reads_its_column(seen_zarr, vserver, vit_root):
    v = seen_zarr["views"]["zarr-gene"]
    a = ad.read_zarr(vit_root / "cells.zarr")
    warm_x = {}
    for name, gene in (("zarr-gene", GENE), ("zarr-other-gene", OTHER_GENE)):
        seen = seen_zarr["views"][name]
        expr = np.asarray(a[:, gene].X.todense()).ravel()
        assert_scatterplot_drawn(seen, a.n_obs)
        warm_x[gene] = assert_coloured_by_gene(seen, gene, expr)
        assert seen["pixels"]["hash"] != seen_zarr["views"]["zarr-plain"]["pixels"]["hash"]
    assert warm_x[GENE] - warm_x[OTHER_GENE] > 0.4

    url = prefix(vserver, "cells.zarr")
    got = keys(v, url)
    x = zarr.open_group(vit_root / "cells.zarr")["X"]
    j = list(a.var_names).index(GENE)
    lo, hi = int(x["indptr"][j]), int(x["indptr"][j + 1])
    want = slice_chunks(lo, hi, ZARR_CHUNK)
    for part in ("data", "indices"):
        meta = array_meta(f"{url}/X/{part}")
        assert meta["chunks"] == [ZARR_CHUNK]
        read = {k.split("/")[-1] for k in got if k.startswith(f"X/{part}/") and ".z" not in k}
        assert read == want, part
        assert len(read) < len(chunk_keys(meta)) / 4, part  # not the whole matrix
    assert {k for k in got if k.startswith("X/indptr/") and ".z" not in k} == \
        {f"X/indptr/{k}" for k in chunk_keys(array_meta(url + "/X/indptr"))}
    assert (ARTIFACTS / "vitessce-zarr-gene.png").stat().st_size > 10000


# ------------------------------------------------------------ .h5ad through the view
def test_h5ad_is_drawn_and_coloured_through_the_view(seen_h5ad, h5ad_view, vit_root):
    v = seen_h5ad["views"]["h5ad-gene"]
    assert seen_h5ad["blocked"] == []
    assert set(v["origins"]) == {seen_h5ad["pageOrigin"], h5ad_view.base}
    assert_clean_console(v, h5ad_view)
    a = ad.read_h5ad(vit_root / "cells.h5ad")
    expr = np.asarray(a[:, GENE].X.todense()).ravel()
    assert_scatterplot_drawn(v, a.n_obs)
    assert_coloured_by_gene(v, GENE, expr)

    plain, csc = prefix(h5ad_view, "cells.h5ad"), prefix(h5ad_view, "cells.h5ad", "zarr-csc")
    emb_keys = keys(v, plain)
    assert {k[len("obsm/X_umap/"):] for k in emb_keys if k.startswith("obsm/X_umap/") and ".z" not in k} == \
        chunk_keys(array_meta(plain + "/obsm/X_umap"))
    # the matrix is read through zarr-csc only
    assert not [k for k in emb_keys if k.startswith("X/")]
    assert (ARTIFACTS / "vitessce-h5ad-gene.png").stat().st_size > 10000


def test_h5ad_gene_is_read_through_zarr_csc_as_small_reads(seen_h5ad, h5ad_view, vit_root):
    v = seen_h5ad["views"]["h5ad-gene"]
    a = ad.read_h5ad(vit_root / "cells.h5ad")
    csc_x = a.X.tocsc()
    j = list(a.var_names).index(GENE)
    lo, hi = int(csc_x.indptr[j]), int(csc_x.indptr[j + 1])
    csc = prefix(h5ad_view, "cells.h5ad", "zarr-csc")
    assert requests.get(csc + "/X/.zattrs", timeout=10).json()["encoding-type"] == "csc_matrix"
    got = keys(v, csc)
    bytes_read = {a_["path"]: a_["bytes"] for a_ in v["answers"]}
    whole = 0
    for part in ("data", "indices"):
        meta = array_meta(f"{csc}/X/{part}")
        assert meta["shape"] == [csc_x.nnz]
        (chunk,) = meta["chunks"]
        read = {k.split("/")[-1] for k in got if k.startswith(f"X/{part}/") and ".z" not in k}
        assert read == slice_chunks(lo, hi, chunk), part
        assert len(read) < len(chunk_keys(meta)), part
        whole += csc_x.nnz * np.dtype(meta["dtype"]).itemsize
    indptr = array_meta(csc + "/X/indptr")
    assert indptr["shape"] == [a.n_vars + 1]
    assert {k for k in got if k.startswith("X/indptr/") and ".z" not in k} == \
        {f"X/indptr/{k}" for k in chunk_keys(indptr)}
    sent = sum(n for p, n in bytes_read.items() if "/zarr-csc/X/data/" in p or "/zarr-csc/X/indices/" in p)
    # the column, not the matrix: a small part of data and indices
    assert 0 < sent < whole / 4, (sent, whole)
