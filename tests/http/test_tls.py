"""HTTPS (--tls-cert, --tls-key): a CA and server certificates made here
with the openssl command, clients that verify against that CA (requests,
curl, zarr-python over fsspec/aiohttp), an expired certificate and a plain
HTTP request refused cleanly by the client while the server goes on, and
SIGHUP serving a new certificate (the client sees its serial) or keeping
the one in use when the new files do not load."""

from __future__ import annotations

import shutil
import signal
import socket
import ssl
import subprocess
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
import requests

import zarr_writers
from conftest import REPO, Server, assert_problem, cellar_bin, free_port

EXAMPLES = REPO / "examples"

SERIAL_FIRST = 0x1001
SERIAL_SECOND = 0x2002
SERIAL_EXPIRED = 0x3003

LEAF_EXTENSIONS = """\
subjectAltName = IP:127.0.0.1, DNS:localhost
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid, issuer
"""

CA_CONFIG = """\
[req]
distinguished_name = dn
prompt = no
[dn]
CN = cellar test CA
[v3_ca]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid:always
[ca]
default_ca = testca
[testca]
database = index.txt
new_certs_dir = issued
serial = serial.txt
default_md = sha256
policy = any
unique_subject = no
x509_extensions = leaf
[any]
commonName = supplied
[leaf]
""" + LEAF_EXTENSIONS

LEAF_CONFIG = """\
[req]
distinguished_name = dn
prompt = no
[dn]
CN = localhost
"""


def openssl(cwd: Path, *args: str) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def new_key_and_request(d: Path, name: str) -> None:
    openssl(d, "req", "-new", "-config", "leaf.cnf", "-newkey", "ec",
            "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", f"{name}.key", "-out", f"{name}.csr")


def sign(d: Path, name: str, serial: int) -> None:
    openssl(d, "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-set_serial", hex(serial), "-days", "2", "-extfile", "leaf.ext", "-out", f"{name}.crt")
    # the chain as servers send it: the server's certificate, then the CA's
    (d / f"{name}.pem").write_bytes((d / f"{name}.crt").read_bytes() + (d / "ca.pem").read_bytes())


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Path:
    if not shutil.which("openssl"):
        pytest.fail("the openssl command is missing: make deps installs it", pytrace=False)
    d = tmp_path_factory.mktemp("pki")
    (d / "ca.cnf").write_text(CA_CONFIG)
    (d / "leaf.cnf").write_text(LEAF_CONFIG)
    (d / "leaf.ext").write_text(LEAF_EXTENSIONS)
    openssl(d, "req", "-x509", "-config", "ca.cnf", "-extensions", "v3_ca", "-newkey", "ec",
            "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", "ca.key",
            "-out", "ca.pem", "-days", "3")
    for name, serial in (("first", SERIAL_FIRST), ("second", SERIAL_SECOND)):
        new_key_and_request(d, name)
        sign(d, name, serial)
    # expired a long time ago, by the same CA (openssl ca takes the dates)
    new_key_and_request(d, "expired")
    (d / "issued").mkdir()
    (d / "index.txt").write_text("")
    (d / "serial.txt").write_text(f"{SERIAL_EXPIRED:x}\n")
    openssl(d, "ca", "-batch", "-config", "ca.cnf", "-cert", "ca.pem", "-keyfile", "ca.key",
            "-in", "expired.csr", "-out", "expired.crt", "-notext",
            "-startdate", "20200101000000Z", "-enddate", "20200102000000Z")
    (d / "expired.pem").write_bytes((d / "expired.crt").read_bytes() + (d / "ca.pem").read_bytes())
    (d / "garbage.pem").write_text("-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydA==\n"
                                   "-----END CERTIFICATE-----\n")
    return d


class TLSServer(Server):
    """A cellar serving HTTPS with the certificate and key at cert, key
    (files the test may overwrite before a SIGHUP)."""

    def __init__(self, root, log, cert: Path, key: Path, ca: Path, args=()):
        super().__init__(root, log, ["--tls-cert", str(cert), "--tls-key", str(key), *args])
        self.ca = ca

    def get(self, path: str, session: requests.Session | None = None, **kw) -> requests.Response:
        """GET over a connection verified against the test CA (given here:
        REQUESTS_CA_BUNDLE in the environment would override session.verify)."""
        return (session or self.session).get(self.base + path, verify=str(self.ca), timeout=30, **kw)

    @property
    def base(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def _health(self) -> requests.Response:
        # not verified: an expired certificate is served on purpose
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return requests.get(self.base + "/healthz", verify=False, timeout=1)

    def reload(self, needle: str, count: int = 1) -> None:
        """SIGHUP, then wait for the count-th log line holding needle."""
        self.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        while self.log.read_text(errors="replace").count(needle) < count:
            assert time.monotonic() < deadline, f"{needle!r} not logged"
            time.sleep(0.02)


@pytest.fixture(scope="module")
def tls_factory(tmp_path_factory, server_factory, pki):
    def start(name: str, *args: str) -> TLSServer:
        """A server on copies of pki/name.pem and name.key."""
        d = tmp_path_factory.mktemp(f"tls-{name}")
        cert, key = d / "server.pem", d / "server.key"
        shutil.copy(pki / f"{name}.pem", cert)
        shutil.copy(pki / f"{name}.key", key)
        return server_factory(EXAMPLES, *args, make=lambda root, log, a: TLSServer(
            root, log, cert, key, pki / "ca.pem", a))

    return start


@pytest.fixture(scope="module")
def served(tls_factory) -> TLSServer:
    return tls_factory("first")


@pytest.fixture(scope="module")
def plain(server_factory) -> Server:
    return server_factory(EXAMPLES)


def open_tls(port: int, ca: Path) -> ssl.SSLSocket:
    """A new connection, its handshake done and verified against ca for
    127.0.0.1."""
    ctx = ssl.create_default_context(cafile=str(ca))
    return ctx.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=10),
                           server_hostname="127.0.0.1")


def peer_serial(port: int, ca: Path) -> int:
    """The serial of the certificate a new connection is shown."""
    with open_tls(port, ca) as tls:
        return int(tls.getpeercert()["serialNumber"], 16)


PATHS = [
    "/v1/stores",
    "/v1/stores/blood.h5ad",
    "/v1/stores/blood.h5ad/obs?rows=0:10&columns=cell_type,n_counts",
    "/v1/stores/blood.h5ad/X?rows=0:5&format=bin",
    "/v1/stores/pbmc_small.h5mu/mod/rna/obs?rows=0:4",
    "/v1/stores/lineage.h5td/obst/lineage/subtree?root=node22&depth=2",
    "/v1/stores/blood.zarr/zarr/zarr.json",
    "/v1/stores/blood.zarr/zarr/X/c/0/0",
]


def test_requests_reads_stores_over_https(served, plain):
    assert peer_serial(served.port, served.ca) == SERIAL_FIRST
    for path in PATHS:
        expected = requests.get(plain.base + path, timeout=30)
        assert expected.status_code == 200, path
        got = served.get(path)
        assert got.status_code == 200, path
        assert got.content == expected.content, path
        assert got.headers["Content-Type"] == expected.headers["Content-Type"]
    # Range over TLS (file-backed answers are read, not sendfile'd, there)
    key = "/v1/stores/blood.zarr/zarr/zarr.json"
    whole = requests.get(plain.base + key, timeout=30).content
    part = served.get(key, headers={"Range": "bytes=10-99"})
    assert part.status_code == 206 and part.content == whole[10:100]
    # errors are the same problem+json
    assert_problem(served.get("/v1/stores/nothere.h5ad"), 404)
    # without the test CA the certificate is not trusted
    with pytest.raises(requests.exceptions.SSLError):
        requests.get(served.base + "/healthz", timeout=10)


def test_curl_reads_stores_over_https(served, plain):
    for path in PATHS[:4]:
        p = subprocess.run(["curl", "-sS", "--fail", "--cacert", str(served.ca), served.base + path],
                           capture_output=True, timeout=60)
        assert p.returncode == 0, p.stderr
        assert p.stdout == requests.get(plain.base + path, timeout=30).content, path
    p = subprocess.run(["curl", "-sS", served.base + "/healthz"], capture_output=True, timeout=60,
                       env={"PATH": "/usr/bin:/bin", "CURL_CA_BUNDLE": "/nonexistent"})
    assert p.returncode != 0


def zarr_ssl_context(ca: Path | None) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(ca)) if ca else ssl.create_default_context()


def test_zarr_python_reads_over_https(served):
    """zarr-python over fsspec's HTTP store (aiohttp), verifying against the
    test CA, reads every array as the local zarr store holds it."""
    import zarr
    url = served.base + "/v1/stores/blood.zarr/zarr"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        remote = zarr.open_group(url, mode="r", storage_options={"ssl": zarr_ssl_context(served.ca)})
        here = zarr_writers.arrays(EXAMPLES / "blood.zarr")
        there = zarr_writers.arrays(remote)
        assert sorted(there) == sorted(here) and "X" in here
        for path, arr in here.items():
            np.testing.assert_array_equal(np.asarray(there[path][...]), np.asarray(arr[...]),
                                          err_msg=path)
        with pytest.raises(Exception, match="(?i)certificate"):
            zarr.open_group(url, mode="r", storage_options={"ssl": zarr_ssl_context(None)})


def test_plain_http_to_the_tls_port_fails_cleanly(served):
    with pytest.raises(requests.exceptions.ConnectionError):
        requests.get(f"http://127.0.0.1:{served.port}/healthz", timeout=10)
    # by hand: the connection is closed, with no HTTP answer, at once
    start = time.monotonic()
    with socket.create_connection(("127.0.0.1", served.port), timeout=10) as sock:
        sock.sendall(b"GET /v1/stores HTTP/1.1\r\nHost: x\r\n\r\n")
        try:
            data = sock.recv(4096)
        except ConnectionResetError:
            data = b""
    assert not data.startswith(b"HTTP/"), data[:100]
    assert time.monotonic() - start < 5
    assert served.alive()
    assert served.get("/v1/stores").status_code == 200
    assert peer_serial(served.port, served.ca) == SERIAL_FIRST


def test_expired_certificate_fails_cleanly_until_a_good_one_is_loaded(tls_factory, pki):
    s = tls_factory("expired")
    assert "the TLS certificate is not valid now" in s.log.read_text()
    with pytest.raises(requests.exceptions.SSLError, match="(?i)expired"):
        requests.get(s.base + "/v1/stores", verify=str(s.ca), timeout=10)
    p = subprocess.run(["curl", "-sS", "--cacert", str(s.ca), s.base + "/v1/stores"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 60, (p.returncode, p.stderr)
    assert "expired" in p.stderr
    assert s.alive()
    # the server goes on: a client told not to check still reads it
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert requests.get(s.base + "/v1/stores", verify=False, timeout=10).status_code == 200
    cert, key = Path(s.args[1]), Path(s.args[3])
    shutil.copy(pki / "first.pem", cert)
    shutil.copy(pki / "first.key", key)
    s.reload("SIGHUP: TLS certificate")
    assert peer_serial(s.port, s.ca) == SERIAL_FIRST
    assert requests.get(s.base + "/v1/stores", verify=str(s.ca), timeout=10).status_code == 200


def test_sighup_serves_a_new_certificate(tls_factory, pki):
    s = tls_factory("first")
    cert, key = Path(s.args[1]), Path(s.args[3])
    assert peer_serial(s.port, s.ca) == SERIAL_FIRST
    kept = requests.Session()
    assert s.get("/v1/stores", kept).status_code == 200
    first = open_tls(s.port, s.ca)  # held open across every reload below
    assert int(first.getpeercert()["serialNumber"], 16) == SERIAL_FIRST
    shutil.copy(pki / "second.pem", cert)
    shutil.copy(pki / "second.key", key)
    s.reload(f"SIGHUP: TLS certificate {cert}: CN=localhost, serial {SERIAL_SECOND:x}")
    assert peer_serial(s.port, s.ca) == SERIAL_SECOND
    # a connection opened before the reload goes on with its own certificate
    assert s.get("/v1/stores/blood.h5ad", kept).status_code == 200
    kept.close()

    # files that do not load keep the certificate in use, and say why
    bad = [("garbage.pem", "second.key", "--tls-cert"),
           ("first.pem", "second.key", "is not the key of"),
           ("second.pem", "first.key", "is not the key of")]
    for i, (c, k, why) in enumerate(bad, start=1):
        shutil.copy(pki / c, cert)
        shutil.copy(pki / k, key)
        s.reload("SIGHUP: kept the TLS certificate in use", i)
        line = [ln for ln in s.log.read_text().splitlines() if "kept the TLS certificate" in ln][-1]
        assert why in line, line
        assert peer_serial(s.port, s.ca) == SERIAL_SECOND
    key.unlink()
    s.reload("SIGHUP: kept the TLS certificate in use", len(bad) + 1)
    assert peer_serial(s.port, s.ca) == SERIAL_SECOND
    assert s.alive()
    assert requests.get(s.base + "/readyz", verify=str(s.ca), timeout=10).status_code == 200
    # SIGTERM with a connection still open on each certificate: exit 0 (and
    # under the sanitizers, neither identity leaked)
    second = open_tls(s.port, s.ca)
    assert int(second.getpeercert()["serialNumber"], 16) == SERIAL_SECOND
    assert s.stop() == 0
    first.close()
    second.close()


def test_tokens_over_https(tls_factory, tmp_path):
    import hashlib
    token = "tls-token-" + "x" * 20
    auth = tmp_path / "tokens.txt"
    auth.write_text(f"{hashlib.sha256(token.encode()).hexdigest()} blood.h5ad\n")
    s = tls_factory("first", "--auth-file", str(auth))
    r = s.get("/v1/stores/blood.h5ad")
    assert r.status_code == 401 and r.headers["WWW-Authenticate"].startswith("Bearer")
    r = s.get("/v1/stores/blood.h5ad", headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 200


def test_bad_certificate_or_key_at_start(pki, tmp_path):
    """The server does not start on files it cannot serve, and says which."""
    cases = [
        (["--tls-cert", str(pki / "first.pem")], "--tls-cert and --tls-key go together"),
        (["--tls-cert", str(tmp_path / "none.pem"), "--tls-key", str(pki / "first.key")],
         f"--tls-cert {tmp_path / 'none.pem'}"),
        (["--tls-cert", str(pki / "garbage.pem"), "--tls-key", str(pki / "first.key")],
         f"--tls-cert {pki / 'garbage.pem'}"),
        (["--tls-cert", str(pki / "first.pem"), "--tls-key", str(pki / "ca.pem")],
         f"--tls-key {pki / 'ca.pem'}"),
        (["--tls-cert", str(pki / "first.pem"), "--tls-key", str(pki / "second.key")],
         "is not the key of --tls-cert"),
    ]
    for args, message in cases:
        p = subprocess.run([str(cellar_bin()), "--root", str(EXAMPLES), "--port", str(free_port()),
                            *args], capture_output=True, text=True, timeout=30)
        assert p.returncode != 0, args
        assert message in p.stderr, (args, p.stderr)
