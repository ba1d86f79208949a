"""End-to-end HTTP tests of cellar: fixtures.

The suite writes its stores with anndata / mudata / treedata into a temporary
data root (session-scoped), starts the real binary (`CELLAR_BIN`) on a free
port of 127.0.0.1, waits for /healthz, and kills it at teardown.  Each
server's stderr/stdout goes to a log file; the tail of every log is printed
when a test failed.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import quote, urlencode

import pytest
import requests

sys.path.insert(0, str(Path(__file__).parent))
pytest.register_assert_rewrite("compare")
import compare  # noqa: E402
import writers  # noqa: E402

# The older writers of tests/requirements-py311.txt (Python 3.11) have what
# anndata 0.13 and mudata 0.4 do by default behind a setting; the suite asks
# for it.  anndata 0.12 writes pandas' nullable strings (nullable-string-array)
# only when asked; mudata 0.3 by default pulls the modalities' columns into
# the global obs/var on update() and leaves them out of the file it writes
# (pull_on_update=None), where 0.4 does neither (pull_on_update=False).
import anndata  # noqa: E402
import mudata  # noqa: E402

if getattr(anndata.settings, "allow_write_nullable_strings", None) is False:
    anndata.settings.allow_write_nullable_strings = True
if hasattr(mudata, "set_options"):  # mudata < 0.4
    mudata.set_options(pull_on_update=False)

REPO = Path(__file__).resolve().parents[2]
TEST_TIMEOUT = 60  # seconds per test (pytest-timeout)
_LOGS: list[Path] = []


# ------------------------------------------------------------ pytest hooks
def pytest_configure(config):
    # the writers' own deprecation chatter (pandas 4 / anndata), not ours
    config.addinivalue_line("filterwarnings", "ignore:The 'future.infer_string' option is deprecated")
    if not config.pluginmanager.hasplugin("timeout"):
        config.addinivalue_line("markers", "timeout(seconds): per-test timeout (pytest-timeout)")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(TEST_TIMEOUT))


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if exitstatus == 0 or not _LOGS:
        return
    terminalreporter.section("cellar server logs (tail)")
    for log in _LOGS:
        try:
            lines = log.read_text(errors="replace").splitlines()
        except OSError:
            continue
        terminalreporter.write_line(f"--- {log} ({len(lines)} lines)")
        for line in lines[-40:]:
            terminalreporter.write_line(line)


# ------------------------------------------------------------ paths
def store_path(store: str, *segments: str) -> str:
    """URL path of a store route: folders of the store name stay `/`,
    every other segment is percent-encoded whole (a `/` in a column name
    becomes %2F)."""
    path = "/v1/stores/" + quote(store, safe="/")
    for seg in segments:
        path += "/" + quote(seg, safe="")
    return path


def query_string(params: dict) -> str:
    items = []
    for k, v in params.items():
        if v is None:
            continue
        if isinstance(v, (list, tuple)):
            v = ",".join(str(x) for x in v)
        items.append((k, str(v)))
    # spaces as %20 (not '+'); commas and colons stay readable
    return urlencode(items, quote_via=quote, safe=",:")


class RawResponse:
    """What http.client got, with the bits of requests.Response the
    assertions use."""

    def __init__(self, status, headers, content):
        self.status_code = status
        self.headers = requests.structures.CaseInsensitiveDict(headers)
        self.content = content

    @property
    def text(self):
        return self.content.decode("utf-8", errors="replace")

    def json(self):
        return json.loads(self.content)


# ------------------------------------------------------------ server
def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cellar_bin() -> Path:
    env = os.environ.get("CELLAR_BIN")
    path = Path(env) if env else REPO / "build" / "cellar"
    if not path.is_file() or not os.access(path, os.X_OK):
        pytest.fail(f"cellar binary not found at {path}: build it (make) and set CELLAR_BIN", pytrace=False)
    return path.resolve()


class Server:
    def __init__(self, root: Path, log: Path, args=()):
        self.root = Path(root)
        self.log = log
        self.args = list(args)
        self.port = None
        self.proc = None
        self.session = requests.Session()

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, attempts: int = 3) -> "Server":
        binary = cellar_bin()
        for _ in range(attempts):
            self.port = free_port()
            cmd = [str(binary), "--root", str(self.root), "--bind", "127.0.0.1",
                   "--port", str(self.port), *self.args]
            logf = open(self.log, "ab")
            logf.write(("$ " + " ".join(cmd) + "\n").encode())
            logf.flush()
            env = {k: v for k, v in os.environ.items() if not k.startswith("CELLAR_")}
            self.proc = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, env=env)
            logf.close()
            if self._wait_ready():
                _LOGS.append(self.log)
                return self
            self.stop()
        pytest.fail(f"cellar did not answer /healthz; log:\n{self.log.read_text(errors='replace')[-4000:]}",
                    pytrace=False)

    def _health(self) -> requests.Response:
        return requests.get(self.base + "/healthz", timeout=1)

    def _wait_ready(self, timeout: float = 15.0) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                if self._health().status_code == 200:
                    return True
            except requests.RequestException:
                pass
            time.sleep(0.05)
        return False

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_offset(self) -> int:
        """The log's size once the lines of every request answered so far
        are written (they are buffered): lines after it are later requests'."""
        self.log_lines_since(0)
        return self.log.stat().st_size

    def log_lines_since(self, offset: int, timeout: float = 5.0) -> list[str]:
        """The log's lines after byte offset, once every request answered so
        far is in it.  The access log is buffered and written every 0.1 s,
        in the order requests complete: a marker request's line appearing
        means the lines of all requests before it are there.  The marker is
        in the path (the log leaves query strings out): a 404 of its own."""
        marker = f"/log-marker-{time.monotonic_ns()}"
        self.session.get(self.base + marker, timeout=5)
        deadline = time.monotonic() + timeout
        while True:
            text = self.log.read_bytes()[offset:].decode(errors="replace")
            if marker in text or time.monotonic() > deadline:
                return [ln for ln in text.splitlines() if marker not in ln]
            time.sleep(0.02)

    def stop(self) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        self.session.close()
        return self.proc.returncode

    # -------------------------------------------------------- requests
    def url(self, path: str, params: dict | None = None) -> str:
        qs = query_string(params or {})
        return self.base + path + ("?" + qs if qs else "")

    def get(self, path: str, _headers: dict | None = None, **params) -> requests.Response:
        return self.session.get(self.url(path, params), headers=_headers, timeout=30)

    def head(self, path: str, _headers: dict | None = None, **params) -> requests.Response:
        return self.session.head(self.url(path, params), headers=_headers, timeout=30)

    def post(self, path: str, body, _headers: dict | None = None, **params) -> requests.Response:
        return self.session.post(self.url(path, params), json=body, headers=_headers, timeout=30)

    def options(self, path: str, _headers: dict | None = None) -> requests.Response:
        return self.session.options(self.url(path), headers=_headers, timeout=30)

    def raw(self, path: str, method: str = "GET", headers: dict | None = None) -> RawResponse:
        """Sends `path` byte for byte (no client-side normalization of `..`
        or percent escapes)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            conn.putrequest(method, path, skip_accept_encoding=True)
            for k, v in (headers or {}).items():
                conn.putheader(k, v)
            conn.endheaders()
            r = conn.getresponse()
            return RawResponse(r.status, r.getheaders(), r.read())
        finally:
            conn.close()


# ------------------------------------------------------------ fixtures
@pytest.fixture(scope="session")
def data_dirs(tmp_path_factory):
    """(root, outside): every store written into root; outside holds the
    secret file that root's symlinks point to."""
    base = tmp_path_factory.mktemp("cellar")
    root, outside = base / "root", base / "outside"
    writers.write_all(root, outside)
    return root, outside


@pytest.fixture(scope="session")
def data_root(data_dirs) -> Path:
    return data_dirs[0]


@pytest.fixture(scope="session")
def server_factory(tmp_path_factory):
    """Starts extra servers (own root or flags); all stopped at teardown."""
    started = []
    logdir = tmp_path_factory.mktemp("logs")

    def start(root: Path, *args: str, make=Server) -> Server:
        """make(root, log, args) builds the server: Server, or a subclass."""
        s = make(root, logdir / f"cellar-{len(started)}.log", args)
        started.append(s)
        return s.start()

    yield start
    for s in started:
        s.stop()


@pytest.fixture(scope="session")
def server(data_root, server_factory) -> Server:
    return server_factory(data_root)


@pytest.fixture(scope="session")
def get(server):
    """get(path, _headers=None, **params) against the main server."""
    return server.get


@pytest.fixture(scope="session")
def post(server):
    """post(path, body, _headers=None, **params) against the main server."""
    return server.post


class References:
    """What the reference libraries read from each store, read once."""

    def __init__(self, root: Path):
        self.root = root
        self._cache = {}
        self._enc = {}

    def __getitem__(self, name: str):
        if name not in self._cache:
            self._cache[name] = writers.read_store(self.root / name)
        return self._cache[name]

    def frame(self, name: str, group: str):
        """A data frame of a store (`obs`, `var`, `mod/rna/obs`) as the
        reference library returns it.  TreeData's reader re-derives the
        label column from the trees, so for .h5td the frame is what
        anndata reads from the stored element (anndata.io.read_elem)."""
        if name.endswith(".h5td"):
            key = (name, "frame", group)
            if key not in self._cache:
                import anndata.io
                import h5py
                with h5py.File(self.root / name, "r") as f:
                    self._cache[key] = anndata.io.read_elem(f[group])
            return self._cache[key]
        obj = self[name]
        parts = group.split("/")
        if parts[0] == "mod":
            obj = obj[parts[1]]
        return getattr(obj, parts[-1])

    def encodings(self, name: str, group: str) -> dict:
        """Encodings of a dataframe group (`obs`, `mod/rna/var`, ...)."""
        key = (name, group)
        if key not in self._enc:
            self._enc[key] = compare.frame_encodings(self.root / name, group)
        return self._enc[key]


@pytest.fixture(scope="session")
def ref(data_root) -> References:
    return References(data_root)


# ------------------------------------------------------------ assertions
def assert_problem(resp, status: int, *, detail_contains: str | None = None) -> dict:
    """An RFC 9457 problem+json answer with this status."""
    assert resp.status_code == status, \
        f"expected {status}, got {resp.status_code}: {resp.text[:500]}"
    ctype = resp.headers.get("Content-Type", "")
    assert ctype.split(";")[0].strip() == "application/problem+json", f"Content-Type {ctype!r}"
    body = resp.json()
    assert body.get("status") == status, body
    assert isinstance(body.get("title"), str) and body["title"], body
    assert isinstance(body.get("detail"), str) and body["detail"], body
    if detail_contains is not None:
        assert detail_contains in body["detail"], body
    return body


def metric_value(server, name: str) -> float:
    """The value of an unlabelled /metrics sample."""
    for line in server.get("/metrics").text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not in /metrics")


def metric_reaches(server, name: str, value: float, timeout: float = 2.0) -> float:
    """The sample once it is at least value (requests are counted when
    libmicrohttpd reports them complete, which may be just after the client
    has its answer), or its last value after timeout."""
    deadline = time.monotonic() + timeout
    while True:
        got = metric_value(server, name)
        if got >= value or time.monotonic() > deadline:
            return got
        time.sleep(0.02)


def assert_json(resp) -> dict:
    assert resp.status_code == 200, f"{resp.status_code}: {resp.text[:1000]}"
    ctype = resp.headers.get("Content-Type", "")
    assert ctype.split(";")[0].strip() == "application/json", f"Content-Type {ctype!r}"
    return resp.json()


# ------------------------------------------------------------ zarrita.js
ZARR_CLIENTS = Path(__file__).resolve().parent / "zarr_clients"


@pytest.fixture(scope="session")
def node_clients() -> str:
    """node, with zarrita installed from the committed lock file (npm ci)
    once; tests/http/zarr_clients/read_array.mjs reads one array with it."""
    import shutil
    node, npm = shutil.which("node"), shutil.which("npm")
    if not node or not npm:
        pytest.fail("node and npm are needed for the zarrita.js tests (apt-get install nodejs npm)",
                    pytrace=False)
    if not (ZARR_CLIENTS / "node_modules" / "zarrita").is_dir():
        r = subprocess.run([npm, "ci", "--no-audit", "--no-fund", "--prefix", str(ZARR_CLIENTS)],
                           capture_output=True, text=True, timeout=240)
        assert r.returncode == 0, f"npm ci failed:\n{r.stdout}\n{r.stderr}"
    return node


def zarrita_read(node: str, url: str, path: str, *rows) -> dict:
    """{"dtype", "shape", "data"} of array `path` of the zarr store at url, read
    by zarrita.js (rows: a start and stop along the first axis)."""
    r = subprocess.run([node, str(ZARR_CLIENTS / "read_array.mjs"), url, path, *map(str, rows)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, f"zarrita failed on {path}:\n{r.stderr}"
    return json.loads(r.stdout)
