"""A self-check of bench/loadgen.c (never part of `make test`: it runs load).

    python3 bench/loadgen_check.py [path/to/loadgen]

Builds loadgen (unless given) and drives it against small local servers:
bodies received must add up to Content-Length x requests, whatever the
server does with its sockets (keep-alive, close after each answer, answers
written in small pieces, two answers in one write), error statuses count as
errors, and chunked or length-less answers stop it with a message.  With
bench/data/bin/mhd_ref built (`make bench` builds it) it also runs against
the bare libmicrohttpd reference.
"""

import http.server
import json
import os
import socket
import socketserver
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BIG = os.urandom(1_600_000)
MID = os.urandom(800_000)
SMALL = b"hi\n"
BODIES = {"/big": BIG, "/mid": MID, "/small": SMALL, "/empty": b""}


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    mode = "plain"

    def log_message(self, *args):
        pass

    def do_GET(self):
        body = BODIES.get(self.path)
        if body is None:
            self.send_response(404)
            self.send_header("Content-Length", "9")
            self.end_headers()
            self.wfile.write(b"not found")
            return
        self.send_response(200)
        if self.mode == "chunked":
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self.wfile.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body))
            return
        if self.mode != "nolength":
            self.send_header("Content-Length", str(len(body)))
        if self.mode == "close" or self.mode == "nolength":
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        if self.mode == "split":
            # The answer in pieces, so that reads end mid-head and mid-body.
            self.wfile.flush()
            for i in range(0, len(body), 100_001):
                self.wfile.write(body[i:i + 100_001])
                self.wfile.flush()
                time.sleep(0.0005)
        else:
            self.wfile.write(body)


def serve(mode):
    handler = type(f"Handler_{mode}", (Handler,), {"mode": mode})
    if mode == "split":
        # The head itself in two writes.
        def send_response(self, code, message=None):
            Handler.send_response(self, code, message)
            self.wfile.write(b"".join(self._headers_buffer[:1])[:7])
            self.wfile.flush()
            self._headers_buffer[0] = self._headers_buffer[0][7:]
        handler.send_response = send_response
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    srv.daemon_threads = True
    srv.handle_error = quiet
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, srv.server_address[1]


def quiet(*args):
    """loadgen closes its sockets mid-answer when its time is up."""


class AheadServer(socketserver.ThreadingTCPServer):
    """Raw HTTP: after every other request it writes two answers at once,
    the second one ahead of the request it answers (leftover bytes that
    follow a complete response in the same read)."""
    daemon_threads = True
    allow_reuse_address = True
    handle_error = quiet

    class RequestHandler(socketserver.BaseRequestHandler):
        def handle(self):
            resp = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(MID), MID)
            buf, count = b"", 0
            while True:
                data = self.request.recv(65536)
                if not data:
                    return
                buf += data
                while b"\r\n\r\n" in buf:
                    _, buf = buf.split(b"\r\n\r\n", 1)
                    count += 1
                    if count % 2:
                        self.request.sendall(resp + resp)


def run(lg, port, *args, paths=None, expect_fail=False):
    argv = [lg, "-d", "1", *args]
    if paths:
        fd, name = tempfile.mkstemp(suffix=".txt")
        with os.fdopen(fd, "w") as f:
            f.write("".join(p + "\n" for p in paths))
        argv += ["-f", name]
    argv.append(f"http://127.0.0.1:{port}/")
    out = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    if expect_fail:
        assert out.returncode != 0, f"{argv}: expected a failure, got {out.stdout}"
        return out.stderr
    assert out.returncode == 0, f"{argv}: rc {out.returncode}: {out.stderr}"
    line = [ln for ln in out.stdout.splitlines() if ln.startswith("BENCH_RESULT ")]
    assert len(line) == 1, out.stdout
    res = json.loads(line[0][len("BENCH_RESULT "):])
    assert res["requests"] > 0, res
    return res


def errors(res):
    return sum(res[k] for k in ("err_connect", "err_read", "err_write", "err_status",
                                "err_timeout"))


def check_exact(res, size, what):
    assert errors(res) == 0, (what, res)
    assert res["body_bytes"] == res["requests"] * size, (what, res)
    print(f"ok  {what}: {res['requests']} requests, {res['body_bytes']} body bytes, "
          f"{res['recv_calls'] / res['requests']:.1f} recv per response, "
          f"p50 {res['p50_us']} us")


def main():
    lg = sys.argv[1] if len(sys.argv) > 1 else None
    if not lg:
        lg = os.path.join(tempfile.mkdtemp(), "loadgen")
        subprocess.run(["cc", "-std=c11", "-O2", "-Wall", "-Wextra", "-Werror",
                        os.path.join(HERE, "loadgen.c"), "-o", lg], check=True)
    plain, port = serve("plain")
    for path, body in BODIES.items():
        check_exact(run(lg, port, "-c", "4", paths=[path]), len(body), f"keep-alive {path}")
    res = run(lg, port, "-c", "1", "-o", "cycle", paths=["/mid", "/small"])
    a = (res["body_bytes"] - 3 * res["requests"]) // (len(MID) - 3)
    assert errors(res) == 0 and a * len(MID) + (res["requests"] - a) * 3 == res["body_bytes"]
    assert abs(2 * a - res["requests"]) <= 1, res   # alternating, in file order
    print(f"ok  cycle /mid,/small: {a} of {res['requests']} were /mid")
    res = run(lg, port, "-c", "2", "-s", "7", paths=["/small", "/nope"])
    assert 0 < res["err_status"] < res["requests"], res
    print(f"ok  404s counted: {res['err_status']} of {res['requests']}")
    check_exact(run(lg, serve("close")[1], "-c", "4", paths=["/mid"]), len(MID),
                "Connection: close after each answer")
    check_exact(run(lg, serve("split")[1], "-c", "3", paths=["/big"]), len(BIG),
                "answers written in pieces")
    ahead = AheadServer(("127.0.0.1", 0), AheadServer.RequestHandler)
    threading.Thread(target=ahead.serve_forever, daemon=True).start()
    check_exact(run(lg, ahead.server_address[1], "-c", "2", paths=["/x"]), len(MID),
                "two answers in one write")
    err = run(lg, serve("chunked")[1], "-c", "1", paths=["/mid"], expect_fail=True)
    assert "Content-Length" in err, err
    print(f"ok  chunked refused: {err.strip()}")
    err = run(lg, serve("nolength")[1], "-c", "1", paths=["/mid"], expect_fail=True)
    assert "Content-Length" in err, err
    print(f"ok  no length refused: {err.strip()}")
    out = subprocess.run([lg, "-d", "1", "http://192.0.2.1:80/"], capture_output=True,
                         text=True)
    assert out.returncode != 0 and "127.0.0.1" in out.stderr, out.stderr
    print(f"ok  other hosts refused: {out.stderr.strip()}")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed_port = s.getsockname()[1]
    out = subprocess.run([lg, "-d", "1", f"http://127.0.0.1:{closed_port}/"],
                         capture_output=True, text=True)
    assert out.returncode != 0 and "connect" in out.stderr, out.stderr
    print(f"ok  connection failure: {out.stderr.strip()}")
    mhd = os.path.join(HERE, "data", "bin", "mhd_ref")
    if os.access(mhd, os.X_OK):
        d = tempfile.mkdtemp()
        with open(os.path.join(d, "big"), "wb") as f:
            f.write(BIG)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            mport = s.getsockname()[1]
        p = subprocess.Popen([mhd, "--port", str(mport), "--threads", "2", "--bodies", d,
                              "--files", d], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
        try:
            time.sleep(0.5)
            check_exact(run(lg, mport, "-c", "8", "-w", "0.5", paths=["/mem/big"]), len(BIG),
                        "mhd_ref /mem/big, 8 connections")
        finally:
            p.terminate()
            p.wait()
    print("loadgen_check: all ok")


if __name__ == "__main__":
    main()
