"""Bad input: every error is application/problem+json with status, title and
detail; nothing outside the data root is ever read; the server survives."""

from __future__ import annotations

import json
import re
from urllib.parse import quote

import anndata as ad
import numpy as np
import pytest
import zarr

import writers as W
from conftest import assert_json, assert_problem, store_path

OBS = store_path(W.FRAME, "obs")


# ------------------------------------------------------------ 404
@pytest.mark.parametrize("path", [
    "/v1/stores/nope.h5ad",
    "/v1/stores/nope.h5ad/obs",
    "/v1/stores/nope.h5mu/mod",
    store_path("dir with space/nope.h5ad"),
    store_path("nodir/frame.h5ad", "obs"),
    store_path(W.FRAME, "nosuchelement"),
    store_path(W.FRAME, "obs", "nosuch"),
    store_path(W.FRAME, "mod"),                    # not a MuData
    store_path(W.LINEAGE, "mod"),
    store_path(W.FRAME, "mod", "rna", "obs"),
    store_path(W.MULTI, "mod", "nope"),
    store_path(W.MULTI, "mod", "nope", "obs"),
    store_path(W.MULTI, "mod", "RNA", "obs"),      # names are case-sensitive
    store_path(W.MULTI, "obsmap", "nope"),
    store_path(W.MULTI, "varmap", "nope"),
    store_path(W.FRAME, "obsmap", "rna"),          # no maps in an AnnData
    "/v1/nosuchroute",
])
def test_not_found(get, path):
    assert_problem(get(path), 404)


@pytest.mark.parametrize("columns,named", [
    ("nope", "nope"),
    ("f32,nope", "nope"),
    ("a,b", "a"),         # "a,b" is one name, only selectable through a POST body
    ("F32", "F32"),       # names are case-sensitive
])
def test_unknown_column(get, columns, named):
    """The detail names the column."""
    assert_problem(get(OBS, columns=columns), 404, detail_contains=named)


def test_unknown_column_post(post):
    assert_problem(post(OBS, {"columns": ["f32", "no such col"]}), 404, detail_contains="no such col")


def test_unknown_column_in_mod(get):
    assert_problem(get(store_path(W.MULTI, "mod", "rna", "obs"), columns="isotype_ctrl"), 404,
                   detail_contains="isotype_ctrl")


@pytest.mark.parametrize("path,params", [
    (OBS, {"obs_names": "AAAC-00,not-a-cell"}),
    (store_path(W.FRAME, "var"), {"var_names": "NOTAGENE"}),
    (store_path(W.MULTI, "obsmap", "rna"), {"obs_names": "nobody"}),
])
def test_unknown_name(get, path, params):
    """An unknown row name is like an unknown key (pandas' KeyError)."""
    assert_problem(get(path, **params), 404)


# ------------------------------------------------------------ 400
@pytest.mark.parametrize("params", [
    {"rows": "abc"},
    {"rows": "1:2:0"},          # zero step
    {"rows": "1:2:3:4"},
    {"rows": "1,,2"},
    {"rows": "1.5"},
    {"rows": "0x10"},
    {"rows": "--1"},
    {"rowz": "1"},              # unknown parameter
    {"categorical": "bogus"},
    {"format": "xml"},          # unknown format
])
def test_bad_parameter(get, params):
    assert_problem(get(OBS, **params), 400)


def test_bad_mod_rows(get):
    assert_problem(get(store_path(W.MULTI, "obsmap", "rna"), mod_rows="x:y"), 400)


@pytest.mark.parametrize("params", [{"mod_rows": "0:3", "rows": "0:3"},
                                    {"mod_rows": "1", "obs_names": "cell000"}])
def test_mod_rows_with_rows(get, params):
    """mod_rows together with rows/obs_names is 400 (docs/responses.md)."""
    assert_problem(get(store_path(W.MULTI, "obsmap", "rna"), **params), 400)


@pytest.mark.parametrize("body", [
    b"{not json",
    b"[1, 2, 3]",
    b'{"rows": ["a", "b"]}',
    b'{"rows": [1.5]}',
    b'{"columns": [1, {"x": 2}]}',
])
def test_bad_post_body(server, body):
    r = server.session.post(server.url(OBS), data=body, headers={"Content-Type": "application/json"})
    assert_problem(r, 400)


# ------------------------------------------------------------ 416
@pytest.mark.parametrize("path,params", [
    (OBS, {"rows": "0,50"}),
    (OBS, {"rows": "-51"}),
    (OBS, {"rows": "1000"}),
    (store_path(W.FRAME, "var"), {"rows": "7"}),
    (store_path(W.EMPTY_ROWS, "obs"), {"rows": "0"}),
    (store_path(W.MULTI, "mod", "prot", "obs"), {"rows": "35"}),
    (store_path(W.MULTI, "obsmap", "rna"), {"rows": "60"}),
    (store_path(W.MULTI, "obsmap", "prot"), {"mod_rows": "35"}),
    (store_path(W.MULTI, "varmap", "prot"), {"mod_rows": "0,-4"}),
])
def test_out_of_range(get, path, params):
    assert_problem(get(path, **params), 416)


def test_out_of_range_post(post):
    assert_problem(post(OBS, {"rows": [0, 50]}), 416)


# ------------------------------------------------------------ 406
@pytest.mark.parametrize("params", [
    {"format": "npy", "columns": "f32,f64"},   # several columns
    {"format": "bin", "columns": "f32,f64"},
    {"format": "npy"},                         # all columns
    {"format": "bin", "columns": "s"},         # strings
    {"format": "npy", "columns": "cat"},       # categorical values, not codes
    {"format": "newick"},                      # trees only
])
def test_not_acceptable(get, params):
    assert_problem(get(OBS, **params), 406)


def test_not_acceptable_schema(get):
    assert_problem(get(store_path(W.FRAME, "obs", "schema"), format="npy"), 406)


# ------------------------------------------------------------ 413
def test_over_the_limit(data_root, server_factory, ref):
    small = server_factory(data_root, "--max-response-bytes", "2048")
    r = small.get(OBS)
    body = assert_problem(r, 413)
    m = re.search(r"rows=0:(\d+)", body["detail"])
    assert m, f"413 detail gives no split hint (rows=0:N): {body['detail']!r}"
    n = int(m.group(1))
    assert 0 < n < 50
    part = small.get(OBS, rows=f"0:{n}")
    assert part.status_code == 200, f"the hinted rows=0:{n} is refused: {part.text[:300]}"
    assert len(part.content) <= 2048
    assert part.json()["index"] == list(ref[W.FRAME].obs_names[:n])
    # a small selection passes, the server is fine
    assert small.get(OBS, rows="0:2", columns="i8").status_code == 200
    assert small.get("/healthz").status_code == 200


# ------------------------------------------------------------ traversal
def _traversal_paths(data_dirs):
    root, outside = data_dirs
    rel = "../" + outside.name + "/" + W.SECRET       # ../outside/secret.h5ad from the root
    absolute = str(outside / W.SECRET)
    return [
        "/v1/stores/" + quote(rel, safe=""),              # ..%2Foutside%2Fsecret.h5ad
        "/v1/stores/" + quote(rel, safe="") + "/obs",
        "/v1/stores/%2E%2E/" + outside.name + "/" + W.SECRET,
        "/v1/stores/%2e%2e%2f" + outside.name + "%2f" + W.SECRET + "/obs",
        "/v1/stores/" + rel,                              # literal ../ (sent as is)
        "/v1/stores/" + rel + "/obs",
        "/v1/stores/dir%20with%20space/../../" + outside.name + "/" + W.SECRET + "/obs",
        "/v1/stores/" + absolute.lstrip("/"),             # the absolute path made relative
        "/v1/stores/" + absolute,                         # //tmp/...: an absolute name
        "/v1/stores/" + quote(absolute, safe="") + "/obs",
        "/v1/stores/" + W.FRAME + "%00",
        "/v1/stores/" + W.FRAME + "%00/obs",
        "/v1/stores/" + W.FRAME + "%00.txt/obs",
        "/v1/stores/" + quote(rel, safe="") + "%00.h5ad/obs",
        "/v1/stores/" + W.LINK_FILE,                      # symlink inside root -> outside
        "/v1/stores/" + W.LINK_FILE + "/obs",
        "/v1/stores/" + W.LINK_DIR + "/" + W.SECRET,      # symlinked folder -> outside
        "/v1/stores/" + W.LINK_DIR + "/" + W.SECRET + "/obs",
        "/v1/stores/" + W.LINK_DIR + "%2F" + W.SECRET + "/obs",
    ]


def test_traversal(server, data_dirs):
    for path in _traversal_paths(data_dirs):
        r = server.raw(path)
        assert W.SECRET_MARK.encode() not in r.content, f"{path}: the secret file was read"
        assert b"secret_column" not in r.content, f"{path}: the secret file was read"
        assert_problem(r, 404)


def test_traversal_query(server, data_dirs):
    """The same names through requests (as a client would send them)."""
    root, outside = data_dirs
    for name in ["../" + outside.name + "/" + W.SECRET, str(outside / W.SECRET)]:
        r = server.get("/v1/stores/" + quote(name, safe="") + "/obs")
        assert W.SECRET_MARK not in r.text
        assert_problem(r, 404)


# ------------------------------------------------------------ 422
@pytest.mark.parametrize("name", [W.TRUNCATED, W.NOT_HDF5])
@pytest.mark.parametrize("route", [(), ("obs",), ("var", "schema")])
def test_unreadable_file(get, name, route):
    assert_problem(get(store_path(name, *route)), 422)


def test_unreadable_file_does_not_hurt_others(get, ref):
    assert_problem(get(store_path(W.TRUNCATED)), 422)
    js = assert_json(get(OBS, rows="0:3", columns="i8"))
    assert js["data"]["i8"] == [int(x) for x in ref[W.FRAME].obs["i8"][:3]]


# ------------------------------------------------------------ still alive
def test_zz_still_healthy(server, get):
    """Runs after the tests above (file order): the process survived them."""
    assert server.alive(), "the server process died"
    r = get("/healthz")
    assert r.status_code == 200 and r.json() == {"status": "ok"}
    assert_json(get(store_path(W.FRAME)))
    # error bodies are well-formed JSON with the fields, even for odd paths
    r = server.raw("/v1/stores/%ZZ")
    assert r.status_code in (400, 404), r.status_code
    json.loads(r.content)


# ------------------------------------------------------------ lying zarr metadata
def _break_array_metadata(store, fmt: int, how: str):
    """X's own metadata document damaged, with no consolidated copy to
    hide it (zarr clients then read the array's document too)."""
    doc = store / "X" / ("zarr.json" if fmt == 3 else ".zarray")
    meta = json.loads(doc.read_text())
    if how == "json":
        doc.write_text(json.dumps(meta)[:-1])  # the closing brace gone
        return
    dtype_key = "data_type" if fmt == 3 else "dtype"
    if how == "dtype":
        meta[dtype_key] = "complex999" if fmt == 3 else "<c999"
    elif how == "shape":
        meta["shape"][0] = -4
    doc.write_text(json.dumps(meta))


@pytest.mark.parametrize("fmt", [2, 3])
@pytest.mark.parametrize("how", ["json", "dtype", "shape"])
def test_invalid_array_metadata_is_422_not_404(tmp_path, server_factory, fmt, how):
    """An array whose zarr metadata is invalid is there but unreadable:
    422 naming it, never 404 'has no X' (issue 19); the store still
    answers its summary and its other elements."""
    a = ad.AnnData(X=np.ones((4, 3), dtype="f4"))
    a.obs_names = [f"c{i}" for i in range(4)]
    store = tmp_path / f"bad_{how}_v{fmt}.zarr"
    with ad.settings.override(zarr_write_format=fmt):
        a.write_zarr(store)
    for name in (".zmetadata", "zarr.json"):  # drop the consolidated copy
        p = store / name
        if name == ".zmetadata":
            p.unlink(missing_ok=True)
        elif p.exists():
            root = json.loads(p.read_text())
            root.pop("consolidated_metadata", None)
            p.write_text(json.dumps(root))
    assert zarr.open_group(store, mode="r", use_consolidated=False)["obs"] is not None
    _break_array_metadata(store, fmt, how)
    s = server_factory(tmp_path)
    base = f"/v1/stores/{store.name}"
    for route in ("/X?rows=0:2", "/X?rows=0:2&format=bin"):
        body = assert_problem(s.get(base + route), 422)
        assert "X" in body["detail"], body["detail"]
    assert s.get(base).status_code == 200
    assert s.get(base + "/obs").status_code == 200
