"""schemathesis hooks of test_openapi_conformance.py.

One narrowing, for what OpenAPI 3.1 cannot state about query parameters:
constraints between two of them.  A JSON body states them (its schema has
`not: {required: [rows, obs_names]}` and the like), a query string cannot,
so schemathesis generates `rows=1&obs_names=a` as valid data and the
server's 400 for it as "a valid request rejected".  Such a failure is
dropped only when the request itself breaks one of the rules below (read
from the request, never from the server's answer) and the answer is 400;
every other failure, of every check, stays.
"""

from __future__ import annotations

import ast
import sys
import threading

import schemathesis

# CPython before 3.11.5 (Debian 12 has 3.11.2) keeps ast.parse's recursion
# depth in state shared by threads (gh-106905), so two of schemathesis'
# workers describing hypothesis strategies at once can fail with "AST
# constructor recursion depth mismatch": parse one at a time there.
if sys.version_info < (3, 11, 5):
    _ast_parse, _ast_lock = ast.parse, threading.Lock()

    def _parse_one_at_a_time(*args, **kwargs):
        with _ast_lock:
            return _ast_parse(*args, **kwargs)

    ast.parse = _parse_one_at_a_time

# Parameters the server refuses together (api/v1/frame.c, matrix.c, maps.c).
EXCLUSIVE = [("rows", "obs_names"), ("rows", "var_names"), ("cols", "var_names"),
             ("mod_rows", "rows"), ("mod_rows", "obs_names"), ("mod_rows", "var_names")]


def _params(case) -> dict:
    """The request's parameters, query over body, without JSON nulls."""
    out = {}
    if isinstance(case.body, dict):
        out.update({k: v for k, v in case.body.items() if v is not None})
    out.update({k: v for k, v in (case.query or {}).items() if v is not None})
    return out


def _number(v):
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def breaks_a_cross_parameter_rule(path: str, params: dict) -> str | None:
    """The rule between parameters the request breaks, or None."""
    for a, b in EXCLUSIVE:
        if a in params and b in params:
            return f"{a} with {b}"
    if path.endswith("/viewport"):
        for lo, hi in (("x0", "x1"), ("y0", "y1")):
            a, b = _number(params.get(lo)), _number(params.get(hi))
            if a is not None and b is not None and a > b:
                return f"{lo} > {hi}"
    if "/taxonium/nodes" in path or "/taxonium/search" in path:
        for lo, hi in (("min_x", "max_x"), ("min_y", "max_y")):
            a, b = _number(params.get(lo)), _number(params.get(hi))
            if a is not None and b is not None and a > b:
                return f"{lo} > {hi}"
    fmt = params.get("format", "json")
    if "length" in params and fmt != "newick" and ("/obst/" in path or "/vart/" in path):
        return "length without format=newick"
    if "depth" in params and fmt == "newick":
        return "depth with format=newick"
    columns = params.get("columns")
    if isinstance(columns, str):
        names = columns.split(",")
        if len(set(names)) < len(names):
            return "a column named twice"
    return None


@schemathesis.hook
def filter_failure(context, failure, case, response) -> bool:
    if failure.code != "ST202" or response.status_code != 400:
        return True
    return breaks_a_cross_parameter_rule(case.path, _params(case)) is None
