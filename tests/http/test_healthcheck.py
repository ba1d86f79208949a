"""`cellar --healthcheck`: the container health check (Dockerfile
HEALTHCHECK, compose) without curl.  Exit 0 when the server answers 200,
1 with a one-line reason on stderr otherwise: against a real cellar that is
up, then stopped, and against stand-in servers on 127.0.0.1 that answer 503,
answer nothing, or answer something that is not HTTP."""

from __future__ import annotations

import os
import socket
import ssl
import subprocess
import threading
import time

import pytest

from conftest import cellar_bin, free_port


def healthcheck(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith("CELLAR_")}
    return subprocess.run([str(cellar_bin()), "--healthcheck", *args], capture_output=True, text=True,
                          timeout=20, env={**base, **(env or {})})


class StandIn:
    """A one-thread TCP server on 127.0.0.1 that reads a request head and
    answers `reply` (or nothing, holding the connection, when reply is None)."""

    def __init__(self, reply: bytes | None, tls: ssl.SSLContext | None = None):
        self.reply = reply
        self.tls = tls
        self.requests: list[bytes] = []
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        self.sock.settimeout(0.2)
        held = []
        while not self.done.is_set():
            try:
                conn, _ = self.sock.accept()
            except (socket.timeout, OSError):
                continue
            conn.settimeout(5)
            head = b""
            if self.tls:
                try:
                    conn = self.tls.wrap_socket(conn, server_side=True)
                except OSError:  # a client that does not speak TLS
                    conn.close()
                    continue
            try:
                while b"\r\n\r\n" not in head:
                    chunk = conn.recv(4096)
                    if not chunk:
                        break
                    head += chunk
            except OSError:
                pass
            self.requests.append(head)
            if self.reply is None:
                held.append(conn)
                continue
            conn.sendall(self.reply)
            conn.close()
        for conn in held:
            conn.close()

    def close(self):
        self.done.set()
        self.thread.join(timeout=5)
        self.sock.close()


@pytest.fixture
def stand_in():
    made = []

    def make(reply: bytes | None, tls: ssl.SSLContext | None = None) -> StandIn:
        s = StandIn(reply, tls)
        made.append(s)
        return s

    yield make
    for s in made:
        s.close()


@pytest.fixture(scope="module")
def certificate(tmp_path_factory) -> tuple[str, str]:
    """A self-signed certificate for localhost (openssl, as the README's)."""
    d = tmp_path_factory.mktemp("healthcheck-tls")
    cert, key = d / "cert.pem", d / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                    "-nodes", "-days", "2", "-keyout", str(key), "-out", str(cert), "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
                   check=True, capture_output=True, timeout=30)
    return str(cert), str(key)


@pytest.fixture
def tls_context(certificate) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(*certificate)
    return ctx


@pytest.fixture
def empty_server(server_factory, tmp_path_factory):
    return server_factory(tmp_path_factory.mktemp("empty-root"))


def test_up_then_down(empty_server):
    port = str(empty_server.port)
    up = healthcheck("--port", port)
    assert up.returncode == 0, up.stderr
    assert up.stderr == ""
    # the same through a URL, and on the readiness route
    assert healthcheck(f"http://127.0.0.1:{port}/healthz").returncode == 0
    assert healthcheck(f"http://127.0.0.1:{port}/readyz").returncode == 0
    # a route that is not 200 is unhealthy
    missing = healthcheck(f"http://127.0.0.1:{port}/v1/stores/nothing.h5ad")
    assert missing.returncode == 1
    assert "answered 404" in missing.stderr

    assert empty_server.stop() == 0
    down = healthcheck("--port", port)
    assert down.returncode == 1
    assert down.stderr.count("\n") == 1
    assert f"http://127.0.0.1:{port}/healthz" in down.stderr
    assert "refused" in down.stderr


def test_port_from_environment(empty_server):
    """With no arguments it asks CELLAR_PORT, the port the server's own
    environment gives (as in the image)."""
    ok = healthcheck(env={"CELLAR_PORT": str(empty_server.port)})
    assert ok.returncode == 0, ok.stderr
    wrong = healthcheck(env={"CELLAR_PORT": str(empty_server.port), "CELLAR_BIND": "127.0.0.2"})
    assert wrong.returncode == 1
    assert "127.0.0.2" in wrong.stderr


def test_503_is_unhealthy(stand_in):
    s = stand_in(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n")
    r = healthcheck("--port", str(s.port))
    assert r.returncode == 1
    assert "answered 503" in r.stderr
    # what it sent: one HTTP/1.0 GET of /healthz naming the host
    head = s.requests[0].decode()
    assert head.startswith("GET /healthz HTTP/1.0\r\n")
    assert f"\r\nHost: 127.0.0.1:{s.port}\r\n" in head


def test_200_from_any_server_is_healthy(stand_in):
    s = stand_in(b"HTTP/1.0 200 OK\r\n\r\n{}")
    r = healthcheck(f"http://127.0.0.1:{s.port}/healthz")
    assert r.returncode == 0, r.stderr


def test_no_answer_times_out(stand_in):
    s = stand_in(None)
    r = healthcheck("--port", str(s.port), "--timeout", "0.5")
    assert r.returncode == 1
    assert "no answer within 0.5 s" in r.stderr


@pytest.mark.parametrize("reply", [b"SSH-2.0-OpenSSH_9.2\r\n", b"", b"HTTP/1.1 2000 OK\r\n\r\n"])
def test_not_http_is_unhealthy(stand_in, reply):
    s = stand_in(reply)
    r = healthcheck("--port", str(s.port))
    assert r.returncode == 1
    assert "not an HTTP answer" in r.stderr or "closed without an answer" in r.stderr


@pytest.mark.parametrize("args", [["bogus"], ["--port"], ["--port", "0"], ["--port", "65536"],
                                  ["ftp://127.0.0.1:8080/healthz"], ["http://127.0.0.1:x/"],
                                  ["--timeout", "-1"], ["http://[::1/healthz"]])
def test_bad_arguments(args):
    r = healthcheck(*args)
    assert r.returncode == 1
    assert r.stderr.startswith("cellar --healthcheck: ")
    assert r.stderr.count("\n") == 1


# ------------------------------------------------------------ https
def test_https_stand_in(stand_in, tls_context):
    """Over https the answer counts as over http; the certificate (self
    signed, here) is not checked."""
    ok = stand_in(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}", tls_context)
    r = healthcheck(f"https://localhost:{ok.port}/healthz")
    assert r.returncode == 0, r.stderr
    assert ok.requests[0].startswith(b"GET /healthz HTTP/1.0\r\n")
    busy = stand_in(b"HTTP/1.1 503 Service Unavailable\r\n\r\n", tls_context)
    r = healthcheck(f"https://127.0.0.1:{busy.port}/readyz")
    assert r.returncode == 1 and "answered 503" in r.stderr


def test_https_to_plain_and_plain_to_https_fail(stand_in, tls_context, empty_server):
    r = healthcheck(f"https://127.0.0.1:{empty_server.port}/healthz", "--timeout", "2")
    assert r.returncode == 1 and "TLS handshake" in r.stderr
    tls = stand_in(b"HTTP/1.1 200 OK\r\n\r\n", tls_context)
    r = healthcheck(f"http://127.0.0.1:{tls.port}/healthz", "--timeout", "2")
    assert r.returncode == 1


def test_https_to_cellar_from_its_environment(certificate, tmp_path):
    """A cellar serving TLS: with the server's own environment
    (CELLAR_PORT, CELLAR_TLS_CERT) and no arguments it asks over https."""
    cert, key = certificate
    port = str(free_port())
    base = {k: v for k, v in os.environ.items() if not k.startswith("CELLAR_")}
    env = {"CELLAR_PORT": port, "CELLAR_TLS_CERT": cert, "CELLAR_TLS_KEY": key}
    with open(tmp_path / "cellar.log", "wb") as log:
        proc = subprocess.Popen([str(cellar_bin()), "--root", str(tmp_path), "--bind", "127.0.0.1"],
                                env={**base, **env}, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 15
        while (r := healthcheck(env=env)).returncode != 0:
            assert proc.poll() is None, (tmp_path / "cellar.log").read_text()
            assert time.monotonic() < deadline, r.stderr
            time.sleep(0.1)
        assert r.stderr == ""
        # the same server asked over plain HTTP: no answer
        plain = healthcheck("--port", port, "--timeout", "2")
        assert plain.returncode == 1
        assert f"http://127.0.0.1:{port}/healthz" in plain.stderr
    finally:
        proc.terminate()
        assert proc.wait(timeout=30) == 0
