"""Bearer tokens (--auth-file, --metrics-token-file) and the CORS origin list.

The servers serve examples/ with the access log on.  Every route family is
asked with no token, a wrong token, a token granted other stores, and the
right token in the Authorization header and as access_token=: 401 with a
Bearer challenge, 404 exactly like a store that is not there, and the very
bytes an open server answers.  The access log is then searched for every
token sent.  A reload (SIGHUP after rewriting the file) revokes and grants
without a restart; a file that does not parse keeps the tokens in use.
"""

from __future__ import annotations

import hashlib
import re
import secrets
import signal
import time
import warnings

import numpy as np
import pytest
import requests

from conftest import REPO, assert_problem

EXAMPLES = REPO / "examples"

ORIGIN_A = "https://a.example"
ORIGIN_B = "http://localhost:5173"

# (family, path, store it reads)
ROUTES = [
    ("summary", "/v1/stores/blood.h5ad", "blood.h5ad"),
    ("mod", "/v1/stores/pbmc_small.h5mu/mod", "pbmc_small.h5mu"),
    ("obs", "/v1/stores/blood.h5ad/obs?rows=0:5&columns=cell_type,n_counts", "blood.h5ad"),
    ("obs_schema", "/v1/stores/blood.h5ad/obs/schema", "blood.h5ad"),
    ("X", "/v1/stores/blood.h5ad/X?rows=0:4&cols=0:3", "blood.h5ad"),
    ("X_bin", "/v1/stores/blood.h5ad/layers/counts?rows=0:4&format=bin", "blood.h5ad"),
    ("uns", "/v1/stores/blood.h5ad/uns", "blood.h5ad"),
    ("zarr_native", "/v1/stores/blood.zarr/obs?rows=0:3", "blood.zarr"),
    ("zarr_raw_meta", "/v1/stores/blood.zarr/zarr/zarr.json", "blood.zarr"),
    ("zarr_raw_dir", "/v1/stores/blood.zarr/zarr/obs/", "blood.zarr"),
    ("obsmap", "/v1/stores/pbmc_small.h5mu/obsmap/prot?rows=0:6", "pbmc_small.h5mu"),
    ("mod_obs", "/v1/stores/pbmc_small.h5mu/mod/rna/obs?rows=0:3", "pbmc_small.h5mu"),
    ("trees", "/v1/stores/lineage.h5td/obst", "lineage.h5td"),
    ("tree", "/v1/stores/lineage.h5td/obst/lineage", "lineage.h5td"),
    ("subtree", "/v1/stores/lineage.h5td/obst/lineage/subtree?root=node22&depth=2", "lineage.h5td"),
    ("tree_zarr", "/v1/stores/lineage.zarr/obst", "lineage.zarr"),
    ("view_zmetadata", "/v1/stores/blood.h5ad/zarr/.zmetadata", "blood.h5ad"),
    ("view_chunk", "/v1/stores/blood.h5ad/zarr/X/0.0", "blood.h5ad"),
    ("view_dir", "/v1/stores/blood.h5ad/zarr/obs/", "blood.h5ad"),
    ("view_csc", "/v1/stores/blood.h5ad/zarr-csc/layers/counts/indptr/0", "blood.h5ad"),
    ("grove_meta", "/h5grove/meta/?file=blood.h5ad&path=/obs", "blood.h5ad"),
    ("grove_attr", "/h5grove/attr/?file=blood.h5ad&path=/obs", "blood.h5ad"),
    ("grove_data", "/h5grove/data/?file=blood.h5ad&path=/X&selection=0:3", "blood.h5ad"),
    ("grove_paths", "/h5grove/paths/?file=blood.h5ad&path=/", "blood.h5ad"),
    ("grove_stats", "/h5grove/stats/?file=blood.h5ad&path=/X", "blood.h5ad"),
    ("taxonium_config", "/v1/stores/lineage.h5td/obst/lineage/taxonium/config/", "lineage.h5td"),
    ("taxonium_nodes", "/v1/stores/lineage.h5td/obst/lineage/taxonium/nodes/", "lineage.h5td"),
    ("taxonium_zarr", "/v1/stores/lineage.zarr/obst/lineage/taxonium/config/", "lineage.zarr"),
]

# token name -> globs it may read
GRANTS = {
    "blood": ["blood.*"],
    "trees": ["lineage.h5td", "lineage.z?rr"],
    "pbmc": ["pbmc_small.h5mu"],
    "all": ["*"],
}


def owner_of(store: str) -> str:
    for name, globs in GRANTS.items():
        if name != "all" and any(re.fullmatch(g.replace(".", r"\.").replace("*", ".*")
                                              .replace("?", "."), store) for g in globs):
            return name
    raise AssertionError(store)


def other_than(store: str) -> str:
    return next(n for n in GRANTS if n not in ("all", owner_of(store)))


def sha256_hex(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def write_auth_file(path, tokens: dict, grants: dict) -> None:
    lines = ["# cellar tokens: sha256 of the token, then the stores it may read"]
    for name, globs in grants.items():
        lines.append(f"{sha256_hex(tokens[name])}  {' '.join(globs)}   # {name}")
    path.write_text("\n".join(lines) + "\n")


def bearer(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


def with_query_token(path: str, token: str) -> str:
    return path + ("&" if "?" in path else "?") + "access_token=" + token


def flushed_log(server) -> str:
    """The server's log once every request answered so far is in it."""
    marker = f"/v1/log-marker-{time.monotonic_ns()}"
    requests.get(server.base + marker, timeout=5)
    deadline = time.monotonic() + 5
    while True:
        text = server.log.read_text(errors="replace")
        if marker in text or time.monotonic() > deadline:
            return text
        time.sleep(0.02)


def wait_for_log(server, needle: str, count: int, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while server.log.read_text(errors="replace").count(needle) < count:
        assert time.monotonic() < deadline, f"{needle!r} not logged {count} times"
        time.sleep(0.02)


@pytest.fixture(scope="module")
def tokens():
    t = {name: f"{name}-{secrets.token_urlsafe(24)}" for name in GRANTS}
    t["metrics"] = f"metrics-{secrets.token_urlsafe(24)}"
    t["wrong"] = f"wrong-{secrets.token_urlsafe(24)}"
    return t


@pytest.fixture(scope="module")
def token_files(tmp_path_factory, tokens):
    d = tmp_path_factory.mktemp("auth")
    auth_file, metrics_file = d / "tokens.txt", d / "metrics-tokens.txt"
    write_auth_file(auth_file, tokens, GRANTS)
    metrics_file.write_text(f"# prometheus\n{sha256_hex(tokens['metrics'])}\n")
    return auth_file, metrics_file


@pytest.fixture(scope="module")
def open_server(server_factory):
    return server_factory(EXAMPLES)


@pytest.fixture(scope="module")
def guarded(server_factory, token_files):
    auth_file, metrics_file = token_files
    return server_factory(EXAMPLES, "--auth-file", str(auth_file),
                          "--metrics-token-file", str(metrics_file),
                          "--cors-origin", f"{ORIGIN_A}, {ORIGIN_B}")


def get(server, path, headers=None, **kw):
    return requests.get(server.base + path, headers=headers, timeout=30, **kw)


def assert_challenge(r, error: str | None):
    body = assert_problem(r, 401)
    challenge = r.headers.get("WWW-Authenticate", "")
    assert challenge.startswith("Bearer"), r.headers
    if error:
        assert f'error="{error}"' in challenge, challenge
    else:
        assert "error=" not in challenge, challenge
    return body


# ------------------------------------------------------------ the matrix
@pytest.mark.parametrize("family,path,store", ROUTES, ids=[r[0] for r in ROUTES])
def test_route_without_token_is_401(guarded, family, path, store):
    assert_challenge(get(guarded, path), None)
    assert_challenge(get(guarded, path, {"Authorization": "Basic dXNlcjpwdw=="}), None)


@pytest.mark.parametrize("family,path,store", ROUTES, ids=[r[0] for r in ROUTES])
def test_route_with_wrong_token_is_401(guarded, tokens, family, path, store):
    assert_challenge(get(guarded, path, bearer(tokens["wrong"])), "invalid_token")
    assert_challenge(get(guarded, with_query_token(path, tokens["wrong"])), "invalid_token")
    # a token of the metrics file opens no store
    assert_challenge(get(guarded, path, bearer(tokens["metrics"])), "invalid_token")
    # one character off
    assert_challenge(get(guarded, path, bearer(tokens[owner_of(store)][:-1])), "invalid_token")


@pytest.mark.parametrize("family,path,store", ROUTES, ids=[r[0] for r in ROUTES])
def test_route_outside_the_grant_is_404_like_a_missing_store(guarded, tokens, family, path, store):
    """A store the token may not read answers what a store that is not there
    answers: same status, body and headers (its name aside)."""
    other = tokens[other_than(store)]
    denied = get(guarded, path, bearer(other))
    body = assert_problem(denied, 404)
    missing_name = "nothere" + store[store.index("."):]
    missing = get(guarded, path.replace(store, missing_name), bearer(other))
    assert_problem(missing, 404)
    assert denied.text == missing.text.replace(missing_name, store)
    assert sorted(k for k in denied.headers if k.lower() != "date") == \
        sorted(k for k in missing.headers if k.lower() != "date")
    assert "ETag" not in denied.headers and "WWW-Authenticate" not in denied.headers
    assert store in body["detail"]
    # the same by access_token
    assert get(guarded, with_query_token(path, other)).text == denied.text


@pytest.mark.parametrize("family,path,store", ROUTES, ids=[r[0] for r in ROUTES])
def test_route_with_its_token_answers_as_an_open_server(guarded, open_server, tokens, family, path,
                                                          store):
    expected = get(open_server, path)
    assert expected.status_code == 200, expected.text[:300]
    for token in (tokens[owner_of(store)], tokens["all"]):
        by_header = get(guarded, path, bearer(token))
        by_query = get(guarded, with_query_token(path, token))
        for r in (by_header, by_query):
            assert r.status_code == 200, r.text[:300]
            assert r.content == expected.content
            assert r.headers["Content-Type"] == expected.headers["Content-Type"]
            assert r.headers.get("ETag") == expected.headers.get("ETag")


def test_head_and_post_obey_the_token(guarded, open_server, tokens):
    path = "/v1/stores/blood.h5ad/obs"
    body = {"rows": [0, 3, 5], "columns": ["cell_type"]}
    assert_challenge(requests.post(guarded.base + path, json=body, timeout=30), None)
    denied = requests.post(guarded.base + path, json=body, headers=bearer(tokens["trees"]), timeout=30)
    assert_problem(denied, 404)
    ok = requests.post(guarded.base + path, json=body, headers=bearer(tokens["blood"]), timeout=30)
    assert ok.status_code == 200
    assert ok.content == requests.post(open_server.base + path, json=body, timeout=30).content
    assert requests.head(guarded.base + path, timeout=30).status_code == 401
    assert requests.head(guarded.base + path, headers=bearer(tokens["blood"]),
                         timeout=30).status_code == 200


def test_store_listing_holds_only_granted_stores(guarded, open_server, tokens):
    everything = get(open_server, "/v1/stores").json()["stores"]
    names = sorted(s["name"] for s in everything)
    assert {"blood.h5ad", "blood.zarr", "lineage.h5td", "lineage.zarr",
            "pbmc_small.h5mu"} <= set(names)
    assert_challenge(get(guarded, "/v1/stores"), None)
    assert_challenge(get(guarded, "/v1/stores", bearer(tokens["wrong"])), "invalid_token")
    for name in ("blood", "trees", "pbmc"):
        for r in (get(guarded, "/v1/stores", bearer(tokens[name])),
                  get(guarded, with_query_token("/v1/stores", tokens[name]))):
            assert r.status_code == 200
            listed = r.json()["stores"]
            assert sorted(s["name"] for s in listed) == [n for n in names if owner_of(n) == name]
            assert listed == [s for s in everything if owner_of(s["name"]) == name]
    assert get(guarded, "/v1/stores", bearer(tokens["all"])).json()["stores"] == everything


def test_unmatched_paths_need_a_token_too(guarded, tokens):
    """Without a token a path tells nothing, not even whether it is a route."""
    for path in ("/v1/stores/blood.h5ad/nosuch", "/nosuch", "/v1/stores/nothere.h5ad"):
        assert_challenge(get(guarded, path), None)
        assert_problem(get(guarded, path, bearer(tokens["blood"])), 404)


def test_token_sent_twice_is_400(guarded, tokens):
    path = with_query_token("/v1/stores/blood.h5ad", tokens["blood"])
    assert_problem(get(guarded, path, bearer(tokens["blood"])), 400)
    twice = with_query_token(path, tokens["blood"])
    assert_problem(get(guarded, twice), 400)


def test_service_routes(guarded, tokens):
    for path in ("/healthz", "/readyz", "/v1/openapi.json"):
        assert get(guarded, path).status_code == 200, path
    assert_challenge(get(guarded, "/metrics"), None)
    assert_challenge(get(guarded, "/metrics", bearer(tokens["all"])), "invalid_token")
    for r in (get(guarded, "/metrics", bearer(tokens["metrics"])),
              get(guarded, with_query_token("/metrics", tokens["metrics"]))):
        assert r.status_code == 200
        assert "cellar_requests_total" in r.text
        # the 401s asked above are counted
        assert re.search(r'cellar_requests_total\{[^}]*status="401"[^}]*\} [1-9]', r.text), r.text[:2000]


def test_zarr_python_reads_with_a_token(guarded, open_server, tokens):
    """zarr-python (fsspec HTTP) reads a store with the token in its headers;
    without one it cannot open the store."""
    import zarr
    url = guarded.base + "/v1/stores/blood.zarr/zarr"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        remote = zarr.open_group(url, mode="r",
                                 storage_options={"headers": bearer(tokens["blood"])})
        reference = zarr.open_group(open_server.base + "/v1/stores/blood.zarr/zarr", mode="r")
        np.testing.assert_array_equal(remote["X"][...], reference["X"][...])
        with pytest.raises(Exception):
            zarr.open_group(url, mode="r",
                            storage_options={"headers": bearer(tokens["trees"])})["X"][...]
        with pytest.raises(Exception):
            zarr.open_group(url, mode="r")["X"][...]


def test_access_log_never_holds_a_token(guarded, tokens):
    """Run after the matrix: the log holds its requests, by path, and no
    token (valid or not, from the header or the query) anywhere."""
    for token in tokens.values():
        get(guarded, with_query_token("/v1/stores/blood.h5ad/obs?rows=0:1", token))
        get(guarded, with_query_token("/metrics", token))
    log = flushed_log(guarded)
    assert re.search(r"^GET /v1/stores/blood\.h5ad/obs 200 ", log, re.M)
    assert re.search(r"^GET /v1/stores/blood\.h5ad/obs 401 ", log, re.M)
    assert re.search(r"^GET /metrics 200 ", log, re.M)
    for name, token in tokens.items():
        assert token not in log, name
        assert token[len(name) + 1:] not in log, name
    assert "access_token" not in log


# ------------------------------------------------------------ CORS
def test_cors_listed_origins(guarded, tokens):
    path = "/v1/stores/blood.h5ad/obs?rows=0:2"
    # the same answer for two origins, then again: a kept answer carries the
    # Access-Control headers of its own origin
    for origin in (ORIGIN_A, ORIGIN_B, ORIGIN_A, ORIGIN_B):
        r = get(guarded, path, {**bearer(tokens["blood"]), "Origin": origin})
        assert r.status_code == 200
        assert r.headers["Access-Control-Allow-Origin"] == origin
        assert r.headers["Access-Control-Allow-Credentials"] == "true"
        assert "Origin" in [v.strip() for v in r.headers["Vary"].split(",")]
    for origin in ("https://evil.example", "https://a.example.evil.example", None):
        headers = {**bearer(tokens["blood"]), **({"Origin": origin} if origin else {})}
        r = get(guarded, path, headers)
        assert r.status_code == 200
        assert "Access-Control-Allow-Origin" not in r.headers
        assert "Access-Control-Allow-Credentials" not in r.headers
        assert "Origin" in [v.strip() for v in r.headers["Vary"].split(",")]


def test_cors_401_is_readable_by_a_listed_page(guarded):
    r = get(guarded, "/v1/stores", {"Origin": ORIGIN_A})
    assert_challenge(r, None)
    assert r.headers["Access-Control-Allow-Origin"] == ORIGIN_A
    assert "WWW-Authenticate" in r.headers["Access-Control-Expose-Headers"]


def test_cors_preflight_allows_authorization_without_a_token(guarded):
    r = requests.options(guarded.base + "/v1/stores/blood.h5ad/obs",
                         headers={"Origin": ORIGIN_B, "Access-Control-Request-Method": "GET",
                                  "Access-Control-Request-Headers": "authorization"}, timeout=30)
    assert r.status_code == 204
    assert r.headers["Access-Control-Allow-Origin"] == ORIGIN_B
    allowed = [h.strip().lower() for h in r.headers["Access-Control-Allow-Headers"].split(",")]
    assert "authorization" in allowed
    assert "Origin" in r.headers["Vary"]


def test_cors_one_entry_and_star(open_server, server_factory):
    """`*` (the default) is never paired with credentials; one origin is
    sent on every answer, which then does not vary with the Origin."""
    r = get(open_server, "/v1/stores", {"Origin": ORIGIN_A})
    assert r.headers["Access-Control-Allow-Origin"] == "*"
    assert "Access-Control-Allow-Credentials" not in r.headers
    assert "Origin" not in r.headers["Vary"]
    one = server_factory(EXAMPLES, "--cors-origin", ORIGIN_B)
    for headers in ({"Origin": ORIGIN_A}, {}):
        r = get(one, "/v1/stores", headers)
        assert r.headers["Access-Control-Allow-Origin"] == ORIGIN_B
        assert r.headers["Access-Control-Allow-Credentials"] == "true"
        assert "Origin" not in r.headers["Vary"]
    mixed = server_factory(EXAMPLES, "--cors-origin", f"{ORIGIN_A},*")
    r = get(mixed, "/v1/stores", {"Origin": "https://other.example"})
    assert r.headers["Access-Control-Allow-Origin"] == "*"
    assert "Access-Control-Allow-Credentials" not in r.headers
    assert "Origin" in r.headers["Vary"]
    r = get(mixed, "/v1/stores", {"Origin": ORIGIN_A})
    assert r.headers["Access-Control-Allow-Origin"] == ORIGIN_A
    assert r.headers["Access-Control-Allow-Credentials"] == "true"


# ------------------------------------------------------------ reload
def test_sighup_reloads_the_token_file(server_factory, tmp_path, tokens):
    auth_file = tmp_path / "tokens.txt"
    fresh = f"fresh-{secrets.token_urlsafe(24)}"
    grants = {"blood": ["blood.h5ad"], "trees": ["lineage.h5td"]}
    write_auth_file(auth_file, tokens, grants)
    s = server_factory(EXAMPLES, "--auth-file", str(auth_file))
    summary = "/v1/stores/blood.h5ad"
    assert get(s, summary, bearer(tokens["blood"])).status_code == 200
    assert_challenge(get(s, summary, bearer(fresh)), "invalid_token")
    # /metrics is open without --metrics-token-file
    assert get(s, "/metrics").status_code == 200
    # a connection kept alive across the reload sees it too
    session = requests.Session()
    assert session.get(s.base + summary, headers=bearer(tokens["blood"]), timeout=30).status_code == 200

    # revoke "blood", give its store to a new token, move "trees" to the zarr
    write_auth_file(auth_file, {**tokens, "fresh": fresh},
                    {"fresh": ["blood.h5ad"], "trees": ["lineage.zarr"]})
    s.proc.send_signal(signal.SIGHUP)
    wait_for_log(s, f"SIGHUP: {auth_file}: 2 tokens", 1)
    assert_challenge(session.get(s.base + summary, headers=bearer(tokens["blood"]), timeout=30),
                     "invalid_token")
    assert_challenge(get(s, with_query_token(summary, tokens["blood"])), "invalid_token")
    assert get(s, summary, bearer(fresh)).status_code == 200
    assert get(s, with_query_token(summary, fresh)).status_code == 200
    assert_problem(get(s, "/v1/stores/lineage.h5td", bearer(tokens["trees"])), 404)
    assert get(s, "/v1/stores/lineage.zarr", bearer(tokens["trees"])).status_code == 200
    assert [x["name"] for x in get(s, "/v1/stores", bearer(tokens["trees"])).json()["stores"]] == \
        ["lineage.zarr"]

    # a file that does not parse leaves the tokens in use, and says why
    auth_file.write_text(f"{sha256_hex(fresh)}\n")
    s.proc.send_signal(signal.SIGHUP)
    wait_for_log(s, "SIGHUP: kept the tokens in use", 1)
    assert "line 1: a token needs the store names or globs" in s.log.read_text()
    assert get(s, summary, bearer(fresh)).status_code == 200
    auth_file.unlink()
    s.proc.send_signal(signal.SIGHUP)
    wait_for_log(s, "SIGHUP: kept the tokens in use", 2)
    assert get(s, summary, bearer(fresh)).status_code == 200
    assert_challenge(get(s, summary, bearer(tokens["blood"])), "invalid_token")
    assert s.alive()
    log = flushed_log(s)
    for token in (fresh, *tokens.values()):
        assert token not in log
    session.close()
    assert s.stop() == 0


def test_bad_token_files_at_start(tmp_path):
    """A token file that is missing or does not parse stops the server at
    start with a message naming the file and line."""
    import subprocess
    from conftest import cellar_bin, free_port
    bad = tmp_path / "bad.txt"
    cases = [
        (["--auth-file", str(tmp_path / "missing.txt")], "cannot open"),
        (["--auth-file", str(bad)], "line 2: the first field is not a SHA-256"),
        (["--metrics-token-file", str(bad)], "line 2"),
        (["--cors-origin", "https://a.example/path"], "is not an origin"),
    ]
    bad.write_text(f"# ok\nnot-a-hash blood.h5ad\n")
    for args, message in cases:
        p = subprocess.run([str(cellar_bin()), "--root", str(EXAMPLES), "--port", str(free_port()),
                            *args], capture_output=True, text=True, timeout=30)
        assert p.returncode != 0, args
        assert message in p.stderr, (args, p.stderr)
