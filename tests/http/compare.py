"""Expected values and comparisons: what cellar's answers must equal, computed
from the objects anndata / mudata / treedata return for the same file."""

from __future__ import annotations

import csv
import io
import math

import h5py
import numpy as np
import pandas as pd
import scipy.sparse as sp
from pandas.api.types import is_bool_dtype, is_float_dtype, is_integer_dtype

PANDAS_MAJOR = int(pd.__version__.split(".")[0])


# ---------------------------------------------------------------- on disk
def frame_encodings(path, group: str) -> dict:
    """{"_index": (encoding, na-value), column: (encoding, na-value)} of a
    dataframe group as the library wrote it (read with h5py)."""
    out = {}
    with h5py.File(path, "r") as f:
        g = f[group]
        index_key = g.attrs["_index"]
        for key in g:
            attrs = g[key].attrs
            enc = attrs.get("encoding-type")
            na = attrs.get("na-value")
            name = "_index" if key == index_key else key
            out[name] = (str(enc) if enc is not None else None, str(na) if na is not None else None)
    return out


def expected_dtype(series, encoding: tuple | None) -> str:
    """pandas' name for a column's dtype.  For string columns the name
    follows the encoding on disk, as anndata.read_elem reads it: a
    string-array is `str`, a nullable-string-array is `string` for na-value
    NA and `str` for NaN.  (mudata's update() may turn `str` into `string`
    in memory, and an empty string column reads back as `object`; neither is
    a property of the file.)"""
    if encoding is not None:
        enc, na = encoding
        if enc == "string-array":
            return "str"
        if enc == "nullable-string-array":
            return "string" if (na or "NA") == "NA" else "str"
    name = str(series.dtype)
    present = series[series.notna()]
    if name == "object" and PANDAS_MAJOR < 3 and len(present) and all(isinstance(v, str) for v in present):
        # pandas 2 (tests/requirements-py311.txt) reads a column of strings
        # with no encoding to go by as `object`; pandas 3, whose names cellar
        # gives, reads it as `str`
        return "str"
    return name


def indexer(spec: str):
    """A `rows=` text as the Python indexer it means (slice or list)."""
    if ":" in spec:
        return slice(*[int(p) if p.strip() else None for p in spec.split(":")])
    return [int(p) for p in spec.split(",")]


# ---------------------------------------------------------------- values
def py_value(v):
    """A numpy / pandas scalar as the JSON value cellar must give."""
    if v is None or v is pd.NA:
        return None
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if isinstance(v, (int, np.integer)):
        return int(v)
    if isinstance(v, (float, np.floating)):
        f = float(v)
        return f if math.isfinite(f) else None
    if isinstance(v, str):
        return v
    raise TypeError(f"unexpected value {v!r} ({type(v)})")


def _missing(series) -> np.ndarray:
    return np.asarray(pd.isna(series), dtype=bool)


def _first_diff(got, exp) -> str:
    for i, (g, e) in enumerate(zip(got, exp)):
        if not (g == e and type(g) is type(e)):
            return f"first difference at position {i}: got {g!r}, expected {e!r}"
    return f"lengths differ: got {len(got)}, expected {len(exp)}"


def column_kind(series) -> str:
    dt = series.dtype
    if isinstance(dt, pd.CategoricalDtype):
        return "category"
    if is_bool_dtype(dt):
        return "bool"
    if is_integer_dtype(dt):
        return "int"
    if is_float_dtype(dt):
        return "float"
    return "str"


def check_values(got, series, name: str) -> None:
    """`got` (a JSON list) equals the series' values: numbers exactly (floats
    after conversion to the column's dtype; NaN and +-inf as null), bools as
    JSON booleans, strings exactly, missing values as null."""
    assert isinstance(got, list), f"column {name!r}: data is {type(got).__name__}, not a list"
    assert len(got) == len(series), f"column {name!r}: {len(got)} values, expected {len(series)}"
    kind = column_kind(series)
    miss = _missing(series)
    if kind == "category":
        cats = series.cat.categories
        exp = [None if c < 0 else py_value(cats[c]) for c in series.cat.codes.to_numpy()]
        assert got == exp and all(type(g) is type(e) for g, e in zip(got, exp)), \
            f"column {name!r}: {_first_diff(got, exp)}"
    elif kind == "float":
        dt = np.dtype(series.dtype)
        for i, g in enumerate(got):
            # integral floats are written with a `.0` (docs/responses.md)
            assert g is None or type(g) is float, f"column {name!r}[{i}]: {g!r} is not a JSON float"
        arr = np.array([np.nan if g is None else g for g in got], dtype=dt)
        exp = series.to_numpy(dtype=dt).copy()
        exp[~np.isfinite(exp)] = np.nan
        bad = ~((arr == exp) | (np.isnan(arr) & np.isnan(exp)))
        assert not bad.any(), (f"column {name!r} ({dt}): first difference at position "
                               f"{int(np.argmax(bad))}: got {got[int(np.argmax(bad))]!r}, "
                               f"expected {exp[int(np.argmax(bad))]!r}")
    else:
        want = {"int": int, "bool": bool, "str": str}[kind]
        exp = [None if m else py_value(v) for v, m in zip(series.tolist(), miss)]
        if kind == "int":
            exp = [None if e is None else int(e) for e in exp]
        assert got == exp and all(g is None or type(g) is want for g in got), \
            f"column {name!r}: {_first_diff(got, exp)}"


def check_codes(got, series, name: str) -> None:
    """categorical=codes: {"codes", "categories", "ordered"}."""
    assert isinstance(got, dict), f"column {name!r}: codes form must be an object, got {got!r}"
    assert set(got) >= {"codes", "categories", "ordered"}, f"column {name!r}: keys {sorted(got)}"
    codes = [int(c) for c in series.cat.codes.to_numpy()]
    assert got["codes"] == codes and all(type(c) is int for c in got["codes"]), \
        f"column {name!r} codes: {_first_diff(got['codes'], codes)}"
    cats = [py_value(c) for c in series.cat.categories]
    assert got["categories"] == cats, f"column {name!r} categories: {got['categories']} != {cats}"
    assert got["ordered"] is bool(series.cat.ordered), f"column {name!r}: ordered {got['ordered']!r}"


def check_frame_json(js: dict, df: pd.DataFrame, encodings: dict | None,
                     categorical: str = "values") -> None:
    """A JSON data frame answer equals `df` (already sliced as requested)."""
    assert isinstance(js, dict)
    for key in ("shape", "index_name", "index", "columns", "dtypes", "data"):
        assert key in js, f"answer lacks {key!r}: keys {sorted(js)}"
    assert js["shape"] == [len(df), len(df.columns)]
    assert js["index_name"] == df.index.name
    exp_index = [str(v) for v in df.index]
    assert js["index"] == exp_index, f"index: {_first_diff(js['index'], exp_index)}"
    assert js["columns"] == list(df.columns)
    assert isinstance(js["data"], dict) and list(js["data"]) == list(df.columns), \
        f"data keys {list(js['data'])} != columns {list(df.columns)}"
    for c in df.columns:
        s = df[c]
        if categorical == "codes" and column_kind(s) == "category":
            check_codes(js["data"][c], s, c)
        else:
            check_values(js["data"][c], s, c)
    # dtypes last, so that a wrong dtype name does not hide wrong values
    encodings = encodings or {}
    exp_dtypes = {c: expected_dtype(df[c], encodings.get(c)) for c in df.columns}
    assert js["dtypes"] == exp_dtypes


# ---------------------------------------------------------------- CSV
_TRUE = {"True", "true", "TRUE"}
_FALSE = {"False", "false", "FALSE"}


def _csv_cell(text: str, kind: str, name: str, i: int):
    """One CSV field parsed for a column kind; None for an empty field."""
    if text == "" and kind != "str":
        return None
    try:
        if kind == "int":
            return int(text)
        if kind == "float":
            return float(text)
        if kind == "bool":
            if text in _TRUE:
                return True
            if text in _FALSE:
                return False
            raise ValueError(text)
    except ValueError as e:
        raise AssertionError(f"csv column {name!r} row {i}: {text!r} is not a {kind}") from e
    return text


def check_frame_csv(text: str, df: pd.DataFrame, categorical: str = "values") -> None:
    """A CSV answer (RFC 4180: header of index name then columns, missing
    values as empty fields) equals `df`."""
    header = next(csv.reader(io.StringIO(text)), None)
    exp_header = [df.index.name or ""] + [str(c) for c in df.columns]
    if header is None:
        header = []
    if not df.columns.size:
        # only the index: a one-field CSV whose header may be an empty line
        rows = list(csv.reader(io.StringIO(text)))
        assert rows and rows[0] in ([exp_header[0]], []), f"csv header {rows[:1]}"
        assert [r[0] if r else "" for r in rows[1:]] == [str(v) for v in df.index]
        return
    assert header == exp_header, f"csv header {header} != {exp_header}"
    body = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False, na_filter=False)
    assert body.shape == (len(df), len(df.columns) + 1), f"csv shape {body.shape}"
    assert body.iloc[:, 0].tolist() == [str(v) for v in df.index]
    for j, c in enumerate(df.columns, start=1):
        s = df[c]
        kind = column_kind(s)
        fields = body.iloc[:, j].tolist()
        if kind == "category":
            if categorical == "codes":
                got = [_csv_cell(t, "int", c, i) for i, t in enumerate(fields)]
                assert got == [int(x) for x in s.cat.codes], f"csv column {c!r} codes"
            else:
                cats = s.cat.categories
                exp = ["" if k < 0 else str(py_value(cats[k])) for k in s.cat.codes.to_numpy()]
                assert fields == exp, f"csv column {c!r}: {_first_diff(fields, exp)}"
        elif kind == "float":
            dt = np.dtype(s.dtype)
            got = np.array([np.nan if t in ("", "nan", "NaN") else _csv_cell(t, "float", c, i)
                            for i, t in enumerate(fields)], dtype=dt)
            exp = s.to_numpy(dtype=dt)
            bad = ~((got == exp) | (np.isnan(got) & np.isnan(exp)))
            assert not bad.any(), (f"csv column {c!r}: row {int(np.argmax(bad))}: got "
                                   f"{fields[int(np.argmax(bad))]!r}, expected {exp[int(np.argmax(bad))]!r}")
        elif kind == "str":
            exp = ["" if m else str(v) for v, m in zip(s.tolist(), _missing(s))]
            assert fields == exp, f"csv column {c!r}: {_first_diff(fields, exp)}"
        else:
            got = [_csv_cell(t, kind, c, i) for i, t in enumerate(fields)]
            exp = [None if m else py_value(v) for v, m in zip(s.tolist(), _missing(s))]
            assert got == exp, f"csv column {c!r}: {_first_diff(got, exp)}"


# ---------------------------------------------------------------- bin / npy
def decode_bin(resp) -> np.ndarray:
    """A `bin` answer as numpy reads it: raw little-endian values shaped by
    X-Shape, typed by X-Dtype."""
    assert resp.status_code == 200, resp.text
    ctype = resp.headers.get("Content-Type", "")
    assert ctype.startswith("application/octet-stream"), ctype
    dtype = resp.headers.get("X-Dtype")
    shape = resp.headers.get("X-Shape")
    assert dtype, "no X-Dtype header"
    assert shape is not None, "no X-Shape header"
    dims = tuple(int(x) for x in shape.replace("[", "").replace("]", "").split(",") if x.strip())
    dt = np.dtype(dtype).newbyteorder("<")
    arr = np.frombuffer(resp.content, dtype=dt)
    assert arr.size == int(np.prod(dims)), f"{arr.size} values for X-Shape {shape}"
    return arr.reshape(dims)


def decode_npy(resp) -> np.ndarray:
    assert resp.status_code == 200, resp.text
    return np.load(io.BytesIO(resp.content), allow_pickle=False)


# ------------------------------------------------------------ objects read two ways
def assert_matrix_equal(got, exp, what):
    assert sp.issparse(got) == sp.issparse(exp), what
    if sp.issparse(exp):
        assert got.format == exp.format and got.shape == exp.shape, what
        assert (got != exp).nnz == 0, what
    elif isinstance(exp, pd.DataFrame):
        pd.testing.assert_frame_equal(got, exp)
    else:
        np.testing.assert_array_equal(np.asarray(got), np.asarray(exp), err_msg=what)


def assert_uns_equal(got, exp, what="uns"):
    if isinstance(exp, dict):
        assert sorted(got) == sorted(exp), what
        for k in exp:
            assert_uns_equal(got[k], exp[k], f"{what}/{k}")
    elif isinstance(exp, np.ndarray):
        np.testing.assert_array_equal(got, exp, err_msg=what)
    else:
        assert got == exp and type(got) is type(exp), (what, got, exp)


def assert_adata_equal(got, exp):
    pd.testing.assert_frame_equal(got.obs, exp.obs)
    pd.testing.assert_frame_equal(got.var, exp.var)
    if exp.X is None:
        assert got.X is None
    else:
        assert_matrix_equal(got.X, exp.X, "X")
    for attr in ("layers", "obsm", "varm", "obsp", "varp"):
        g, e = getattr(got, attr), getattr(exp, attr)
        keys = sorted(k for k in e.keys() if k is not None)  # anndata 0.13: layers[None] is X
        assert sorted(k for k in g.keys() if k is not None) == keys, attr
        for k in keys:
            assert_matrix_equal(g[k], e[k], f"{attr}/{k}")
    assert_uns_equal(dict(got.uns), dict(exp.uns))
    assert (got.raw is None) == (exp.raw is None)
    if exp.raw is not None:
        assert_matrix_equal(got.raw.X, exp.raw.X, "raw/X")
        pd.testing.assert_frame_equal(got.raw.var, exp.raw.var)


def assert_trees_equal(got: dict, exp: dict) -> None:
    assert sorted(got) == sorted(exp)
    for key, g in exp.items():
        t = got[key]
        assert sorted(t.nodes(data=True)) == sorted(g.nodes(data=True)), key
        assert sorted(t.edges(data=True)) == sorted(g.edges(data=True)), key
