"""The remote servers of tests/http/test_remote.py, started on 127.0.0.1:

- `WeedS3`: SeaweedFS's `weed mini` (master, volume, filer and S3 gateway
  in one process), the binary built by the Makefile from the Go module
  proxy at a pinned version (`CELLAR_WEED`; tests/build_weed.sh), with one
  identity whose keys the tests know; anonymous requests are refused.
- `Nginx`: Debian's nginx serving a folder as a static web server
  (Range, ETag, If-Match), as any store behind plain HTTP.
- `S3Client`: PUT/DELETE of buckets and objects, signed with AWS Signature
  Version 4 by hand (hmac, hashlib), so no SDK is needed for the uploads.
- `Proxy`: a threaded HTTP proxy in front of one of them that can delay
  every request and records what it forwarded (when, how many at once).
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import http.client
import http.server
import json
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path
from urllib.parse import quote

import requests

ACCESS_KEY = "cellartestkey"
SECRET_KEY = "cellartestsecret0123456789"
REGION = "us-east-1"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _port_answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


# ------------------------------------------------------------ signing
def _sign(key: bytes, msg: str) -> bytes:
    return hmac.new(key, msg.encode(), hashlib.sha256).digest()


class S3Client:
    """Path-style S3 requests to endpoint, signed with SigV4."""

    def __init__(self, endpoint: str, access_key: str = ACCESS_KEY, secret_key: str = SECRET_KEY):
        self.endpoint = endpoint.rstrip("/")
        self.access_key, self.secret_key = access_key, secret_key
        self.session = requests.Session()

    def request(self, method: str, bucket: str, key: str = "", body: bytes = b"",
                query: dict | None = None, headers: dict | None = None) -> requests.Response:
        host = self.endpoint.split("://", 1)[1]
        path = "/" + bucket + ("/" + quote(key, safe="/-_.~") if key else "")
        q = sorted((query or {}).items())
        canon_q = "&".join(f"{quote(k, safe='-_.~')}={quote(str(v), safe='-_.~')}" for k, v in q)
        now = datetime.datetime.now(datetime.timezone.utc)
        amz_date, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
        payload = hashlib.sha256(body).hexdigest()
        hdrs = {"host": host, "x-amz-date": amz_date, "x-amz-content-sha256": payload}
        hdrs.update({k.lower(): v for k, v in (headers or {}).items()})
        signed = ";".join(sorted(hdrs))
        canon_h = "".join(f"{k}:{hdrs[k].strip()}\n" for k in sorted(hdrs))
        canon = "\n".join([method, path, canon_q, canon_h, signed, payload])
        scope = f"{day}/{REGION}/s3/aws4_request"
        to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope,
                             hashlib.sha256(canon.encode()).hexdigest()])
        k = _sign(("AWS4" + self.secret_key).encode(), day)
        for part in (REGION, "s3", "aws4_request"):
            k = _sign(k, part)
        sig = hmac.new(k, to_sign.encode(), hashlib.sha256).hexdigest()
        hdrs["authorization"] = (f"AWS4-HMAC-SHA256 Credential={self.access_key}/{scope}, "
                                 f"SignedHeaders={signed}, Signature={sig}")
        del hdrs["host"]
        url = self.endpoint + path + ("?" + canon_q if canon_q else "")
        return self.session.request(method, url, data=body, headers=hdrs, timeout=30)

    def create_bucket(self, bucket: str) -> None:
        r = self.request("PUT", bucket)
        assert r.status_code in (200, 409), (r.status_code, r.text[:300])

    def put(self, bucket: str, key: str, data: bytes) -> None:
        r = self.request("PUT", bucket, key, data)
        assert r.status_code == 200, (key, r.status_code, r.text[:300])

    def delete(self, bucket: str, key: str) -> None:
        r = self.request("DELETE", bucket, key)
        assert r.status_code in (200, 204), (key, r.status_code, r.text[:300])

    def upload_tree(self, bucket: str, prefix: str, root: Path, names=None) -> int:
        """Every file below root (or below the listed names) as prefix/relpath."""
        count = 0
        tops = [root / n for n in names] if names is not None else [root]
        for top in tops:
            files = [top] if top.is_file() else sorted(p for p in top.rglob("*") if p.is_file())
            for p in files:
                rel = p.relative_to(root).as_posix()
                self.put(bucket, (prefix + "/" if prefix else "") + rel, p.read_bytes())
                count += 1
        return count


# ------------------------------------------------------------ weed
def weed_binary() -> Path:
    env = os.environ.get("CELLAR_WEED")
    if not env:
        raise RuntimeError("CELLAR_WEED is not set: make pytest builds SeaweedFS's weed "
                           "(tests/build_weed.sh) and sets it")
    path = Path(env)
    if not path.is_file() or not os.access(path, os.X_OK):
        raise RuntimeError(f"CELLAR_WEED={env} is not an executable")
    return path


class WeedS3:
    """`weed mini` on 127.0.0.1 with its data in workdir; stop() and
    start() again keep the data and the ports (a restarted S3 server)."""

    def __init__(self, workdir: Path, log: Path):
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.log = log
        self.proc = None
        self.ports = {k: free_port() for k in
                      ("master", "master_grpc", "volume", "volume_grpc", "filer", "filer_grpc",
                       "s3", "s3_grpc")}
        config = {"identities": [{"name": "cellar",
                                  "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
                                  "actions": ["Admin", "Read", "List", "Write", "Tagging"]}]}
        self.config = self.workdir / "s3.json"
        self.config.write_text(json.dumps(config))

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.ports['s3']}"

    def command(self) -> list[str]:
        p = self.ports
        return [str(weed_binary()), "mini", f"-dir={self.workdir / 'data'}",
                "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
                f"-master.port={p['master']}", f"-master.port.grpc={p['master_grpc']}",
                f"-volume.port={p['volume']}", f"-volume.port.grpc={p['volume_grpc']}",
                f"-filer.port={p['filer']}", f"-filer.port.grpc={p['filer_grpc']}",
                f"-s3.port={p['s3']}", f"-s3.port.grpc={p['s3_grpc']}",
                "-s3.port.iceberg=0", "-s3.port.lance=0", "-webdav=false", "-admin.ui=false",
                "-master.telemetry=false", f"-s3.config={self.config}"]

    def start(self, timeout: float = 90.0) -> "WeedS3":
        (self.workdir / "data").mkdir(exist_ok=True)
        logf = open(self.log, "ab")
        self.proc = subprocess.Popen(self.command(), stdout=logf, stderr=subprocess.STDOUT,
                                     cwd=self.workdir, start_new_session=True)
        logf.close()
        deadline = time.monotonic() + timeout
        client = S3Client(self.endpoint)
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"weed exited {self.proc.returncode}: "
                                   f"{self.log.read_text(errors='replace')[-3000:]}")
            if _port_answers(self.ports["s3"]):
                try:
                    r = client.request("GET", "")  # ListBuckets
                    if r.status_code == 200:
                        return self
                except requests.RequestException:
                    pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"weed did not serve S3 within {timeout} s: "
                           f"{self.log.read_text(errors='replace')[-3000:]}")

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=5)

    def pause(self) -> None:
        """Stops the process in place (SIGSTOP): connections are accepted
        by the kernel and never answered, as a hung server's."""
        os.killpg(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.killpg(self.proc.pid, signal.SIGCONT)


# ------------------------------------------------------------ nginx
class Nginx:
    """Debian's nginx serving root on 127.0.0.1, in the foreground."""

    def __init__(self, root: Path, workdir: Path):
        self.root = Path(root)
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.proc = None
        nginx = shutil.which("nginx") or "/usr/sbin/nginx"
        if not os.path.exists(nginx):
            raise RuntimeError("nginx is not installed (make deps installs Debian's nginx)")
        self.binary = nginx
        w = self.workdir
        user = "user root;\n" if os.geteuid() == 0 else ""
        (w / "nginx.conf").write_text(f"""{user}daemon off;
worker_processes 1;
pid {w}/nginx.pid;
error_log {w}/error.log;
events {{ worker_connections 256; }}
http {{
    access_log {w}/access.log;
    log_format timed '$msec $request $status';
    access_log {w}/timed.log timed;
    client_body_temp_path {w}/body;
    proxy_temp_path {w}/proxy;
    fastcgi_temp_path {w}/fastcgi;
    uwsgi_temp_path {w}/uwsgi;
    scgi_temp_path {w}/scgi;
    types {{ application/json json; application/octet-stream bin; }}
    default_type application/octet-stream;
    sendfile on;
    keepalive_requests 100000;
    server {{
        listen 127.0.0.1:{self.port};
        root {self.root};
        location / {{ }}
    }}
}}
""")

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> "Nginx":
        self.proc = subprocess.Popen([self.binary, "-p", str(self.workdir), "-e", str(self.workdir / "error.log"),
                                      "-c", str(self.workdir / "nginx.conf")],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("nginx exited: " + (self.workdir / "error.log").read_text(errors="replace"))
            if _port_answers(self.port):
                return self
            time.sleep(0.05)
        raise RuntimeError("nginx did not start")

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGQUIT)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=5)

    def access_lines(self) -> list[str]:
        p = self.workdir / "access.log"
        return p.read_text(errors="replace").splitlines() if p.exists() else []

    def request_times(self, part: str) -> list[float]:
        """When nginx answered each request whose line holds part (its
        $msec: seconds, to the millisecond), in the log's order."""
        p = self.workdir / "timed.log"
        lines = p.read_text(errors="replace").splitlines() if p.exists() else []
        return [float(ln.split(" ", 1)[0]) for ln in lines if part in ln]


# ------------------------------------------------------------ a proxy that watches
class _ProxyHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    HOP = {"connection", "keep-alive", "transfer-encoding", "proxy-connection", "te", "upgrade"}

    def log_message(self, *args) -> None:
        pass

    def _upstream(self, fresh: bool) -> http.client.HTTPConnection:
        if fresh or getattr(self, "_conn", None) is None:
            host, port = self.server.owner.upstream
            self._conn = http.client.HTTPConnection(host, port, timeout=60)
        return self._conn

    def _forward(self) -> None:
        owner = self.server.owner
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else None
        # Host and every other header as the client sent them: a SigV4
        # signature over them still verifies upstream.
        headers = {k: v for k, v in self.headers.items() if k.lower() not in self.HOP}
        owner._enter(self.command, self.path, headers)
        try:
            time.sleep(owner.delay)
            for attempt in (0, 1):
                conn = self._upstream(fresh=attempt > 0)
                try:
                    conn.request(self.command, self.path, body=body, headers=headers)
                    resp = conn.getresponse()
                    data = resp.read()
                    break
                except (http.client.HTTPException, OSError):
                    conn.close()
                    if attempt:
                        raise
        finally:
            owner._leave()
        self.send_response_only(resp.status, resp.reason)
        for k, v in resp.getheaders():
            if k.lower() not in self.HOP and (k.lower() != "content-length" or self.command == "HEAD"):
                self.send_header(k, v)
        if self.command != "HEAD":
            self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    do_GET = do_HEAD = do_PUT = do_DELETE = do_POST = _forward


class Proxy:
    """A threaded HTTP proxy on 127.0.0.1 in front of upstream (an
    http://host:port endpoint): every request is forwarded as it came
    (its Host header included, so signed requests verify upstream) after
    `delay` seconds.  It keeps what it forwarded (`seen`: monotonic time,
    method, path, headers) and the most requests it held at once
    (`max_in_flight`); reset() forgets both."""

    def __init__(self, upstream: str, delay: float = 0.0):
        hostport = upstream.split("://", 1)[1].rstrip("/")
        host, _, port = hostport.partition(":")
        self.upstream = (host, int(port or 80))
        self.delay = delay
        self._lock = threading.Lock()
        self.seen: list[tuple[float, str, str, dict]] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _ProxyHandler)
        self._server.daemon_threads = True
        self._server.owner = self
        self._thread = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> "Proxy":
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def reset(self) -> None:
        with self._lock:
            self.seen = []
            self.max_in_flight = self.in_flight

    def _enter(self, method: str, path: str, headers: dict) -> None:
        with self._lock:
            self.seen.append((time.monotonic(), method, path, headers))
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)

    def _leave(self) -> None:
        with self._lock:
            self.in_flight -= 1
