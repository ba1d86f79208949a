"""The `make bench` harness: cellar against its references, in one run.

    python bench/run.py            (bench/run.sh calls it; see BENCHMARKS.md)

Environment:
  CELLAR_BIN          the cellar binary to measure (required)
  BENCH_SCALE         data size, 1 = 200,000 cells (default 0.1, a quick run)
  BENCH_DURATION      seconds each measured wrk run lasts (default 4)
  BENCH_WARMUP        seconds of unmeasured load before each run (default 1)
  BENCH_CONNECTIONS   connections of the single-endpoint runs (default 16)
  BENCH_THREADS       server threads: cellar --threads, the bare
                      libmicrohttpd pool, nginx workers (default: cores)
  BENCH_WRK_THREADS   wrk threads (default 1: the rest is left to the server)
  BENCH_REPEAT        the trees and matrices sections make each measured run
                      this many times and keep the median one (default 1);
                      on a VM whose host takes CPU in bursts (steal) use 3;
                      the probe section multiplies its runs by it
  BENCH_PROBE_RUNS    direct `cellar --probe-file FILE` runs per store (default 9,
                      times BENCH_REPEAT)
  BENCH_PROBE_FIRST_RUNS  first requests per store and probe mode (default 5,
                      times BENCH_REPEAT), each on a freshly started cellar
  BENCH_OUT           the Markdown file to rewrite (default BENCHMARKS.md)
  BENCH_REFS          references to run (default mhd,nginx,h5grove)
  BENCH_ONLY          comma list of scenario ids to run (summary, modlist,
                      obs_json, ..., mixed) and/or sections (trees, matrices,
                      probe, replicas, deploy, viewer, zarrview, h5grove,
                      remote, taxonium);
                      default all.  A run of sections only rewrites their
                      blocks of BENCHMARKS.md and keeps the rest of the file.

Every server listens on 127.0.0.1 on a free port and is stopped at the end.
"""

import json
import os
import platform
import re
import shlex
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from datetime import datetime, timezone

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
LUA_DIR = os.path.join(HERE, "wrk")

NOT_AVAILABLE = "route not available yet"
MHD_DEFAULT_POOL_KIB = 32


def env_float(name, default):
    value = os.environ.get(name, "")
    return float(value) if value.strip() else default


def env_int(name, default):
    value = os.environ.get(name, "")
    return int(value) if value.strip() else default


def log(msg):
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------
# Processes


def stat_ticks():
    """(busy, total, steal) jiffies of all cores, from /proc/stat.  Busy
    counts steal: time the hypervisor gave this VM's cores to others."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + (v[4] if len(v) > 4 else 0)
    return sum(v[:8]) - idle, sum(v[:8]), (v[7] if len(v) > 7 else 0)


def core_pct(t0, t1, field):
    """One field of stat_ticks() (0 busy, 2 steal) between two readings, in
    percent of one core (200% = two)."""
    return 100.0 * (os.cpu_count() or 1) * (t1[field] - t0[field]) / max(t1[1] - t0[1], 1)


def steal_pct(t0, t1):
    return core_pct(t0, t1, 2)


def steal_note(pct):
    return (f"the hypervisor took {pct:.0f}% of one core's time from this VM (steal, "
            "`/proc/stat`; 200% = both cores)")


def copy_gbps():
    """One core's memory copy speed now (GB/s, best of 5 copies of 64 MiB):
    the bodies here are copies, and a VM's neighbours change this without
    any steal showing."""
    src, dst = bytearray(64 << 20), bytearray(64 << 20)
    dst[:] = src  # touch every page first
    best = float("inf")
    for _ in range(5):
        t = time.perf_counter()
        dst[:] = src
        best = min(best, time.perf_counter() - t)
    return (64 << 20) / best / 1e9


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url, proc, seconds=30.0):
    # An https server of the run has a certificate made for the run: the
    # question is only whether it answers.
    context = ssl._create_unverified_context() if url.startswith("https:") else None
    deadline = time.time() + seconds
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"exited with {proc.returncode} before answering {url}")
        try:
            with urllib.request.urlopen(url, timeout=2, context=context) as r:
                r.read()
                return
        except urllib.error.HTTPError:
            return  # it answers
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"no answer from {url} after {seconds:.0f}s")


class Server:
    """A server process started for the run and stopped at its end."""

    def __init__(self, name, argv, ready_path, port, log_path, cwd=None, scheme="http"):
        self.name = name
        self.port = port
        self.base = f"{scheme}://127.0.0.1:{port}"
        self.log = open(log_path, "w")
        log(f"start {name}: {' '.join(shlex.quote(a) for a in argv)}")
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT,
                                     cwd=cwd, start_new_session=True)
        try:
            wait_http(self.base + ready_path, self.proc)
        except Exception:
            self.stop()
            raise

    def pid(self):
        return self.proc.pid

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def read_status_kb(pid, field):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def reset_peak_rss(pid):
    """Resets VmHWM to the current RSS (Linux >= 4.0, owner or root)."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


# --------------------------------------------------------------------------
# wrk


def run_wrk(url, connections, duration, cfg, script=None, extra_env=None, warmup=True):
    script = script or os.path.join(LUA_DIR, "report.lua")
    threads = max(1, min(cfg["wrk_threads"], connections))
    env = dict(os.environ, BENCH_LUA_DIR=LUA_DIR, **(extra_env or {}))

    def once(seconds):
        argv = ["wrk", "-t", str(threads), "-c", str(connections), "-d", f"{max(1, round(seconds))}s",
                "--timeout", "10s", "-s", script, url]
        out = subprocess.run(argv, env=env, capture_output=True, text=True,
                             timeout=seconds + 60)
        return bench_result("wrk", out)

    if warmup and cfg["warmup"] > 0:
        once(cfg["warmup"])
    return once(duration)


def bench_result(client, out):
    """The BENCH_RESULT line of a finished client run (wrk with report.lua,
    or bench/loadgen), with req/s and the error total added."""
    m = re.search(r"^BENCH_RESULT (\{.*\})$", out.stdout, re.M)
    if not m:
        raise RuntimeError(f"{client} gave no result (exit {out.returncode}): "
                           f"{out.stdout[-500:]} {out.stderr[-500:]}")
    res = json.loads(m.group(1))
    res["rps"] = res["requests"] / (res["duration_us"] / 1e6) if res["duration_us"] else 0.0
    res["errors"] = sum(res[k] for k in ("err_connect", "err_read", "err_write",
                                         "err_status", "err_timeout"))
    return res


# --------------------------------------------------------------------------
# Scenarios


def probe(url):
    """(status, body) of one GET, without compression."""
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def build_scenarios(manifest, zarr_dir):
    n = manifest["cells"]
    mid = (n // 2) // 100 * 100
    rows = f"{mid}:{mid + 100}"
    cols = "cell_type,n_genes,total_counts"
    names = ",".join(manifest["obsmap_names"])
    stores = "/v1/stores"
    h5g_obs = f"/data?file=bench.h5ad&path=/obs/n_genes&selection={mid}:{mid + 100}"
    s = [
        dict(id="summary", label="store summary (.h5mu)", group="small",
             cellar=f"{stores}/bench.h5mu", mhd="mem",
             h5grove="/meta?file=bench.h5mu&path=/",
             h5grove_note="/meta of the root group"),
        dict(id="modlist", label="modality list (.h5mu)", group="small",
             cellar=f"{stores}/bench.h5mu/mod", mhd="mem",
             h5grove="/meta?file=bench.h5mu&path=/mod",
             h5grove_note="/meta of /mod"),
        dict(id="obs_json", label="obs 100 rows x 3 cols, json", group="small",
             cellar=f"{stores}/bench.h5ad/obs?rows={rows}&columns={cols}", mhd="mem",
             h5grove=h5g_obs, h5grove_note="/data of one numeric column, 100 rows"),
        dict(id="obs_csv", label="obs 100 rows x 3 cols, csv", group="small",
             cellar=f"{stores}/bench.h5ad/obs?rows={rows}&columns={cols}&format=csv",
             mhd="mem", h5grove=h5g_obs + "&format=csv",
             h5grove_note="/data of one numeric column, 100 rows, csv"),
        dict(id="obsmap", label="obsmap lookup, 100 names", group="small",
             cellar=f"{stores}/bench.h5mu/obsmap/rna?obs_names={names}", mhd="mem",
             h5grove=f"/data?file=bench.h5mu&path=/obsmap/rna&selection={mid}:{mid + 100}",
             h5grove_note="/data of /obsmap/rna, 100 rows by position (names are not expressible)"),
        dict(id="zarr_1k", label="zarr key, 1 KiB chunk", group="zarr", optional=True,
             cellar=f"{stores}/bench.zarr/zarr/obsm/X_umap/c/0/0",
             mhd="file", key="obsm/X_umap/c/0/0", nginx="/bench.zarr/obsm/X_umap/c/0/0"),
        dict(id="zarr_4m", label="zarr key, 4 MiB chunk", group="zarr", optional=True,
             cellar=f"{stores}/bench.zarr/zarr/obsm/X_pca/c/0/0",
             mhd="file", key="obsm/X_pca/c/0/0", nginx="/bench.zarr/obsm/X_pca/c/0/0"),
        dict(id="x_gene", label="X one gene column (CSR)", group="matrices", optional=True,
             cellar=f"{stores}/bench.h5ad/X?var_names=gene_0042", mhd="mem"),
    ]
    tree = f"{stores}/bench.h5td/obst/lineage"
    root = manifest.get("tree_root", "node0")
    leaves = [f"cell_{i:07d}" for i in (n // 7, n // 3, (n * 5) // 6)]
    s += [
        dict(id="tree_node", label="tree node (attributes, children)", group="trees",
             optional=True, cellar=f"{tree}/nodes/{root}", mhd="mem"),
        dict(id="tree_ancestors", label="tree ancestors of a leaf", group="trees",
             optional=True, cellar=f"{tree}/ancestors?node={leaves[0]}", mhd="mem"),
        dict(id="tree_lca", label="tree LCA of 3 leaves", group="trees", optional=True,
             cellar=f"{tree}/lca?nodes={','.join(leaves)}", mhd="mem"),
        dict(id="tree_subtree", label="tree subtree, depth 6 from the root", group="trees",
             optional=True, cellar=f"{tree}/subtree?root={root}&depth=6", mhd="mem"),
        dict(id="tree_viewport", label="tree viewport, 2000 nodes max", group="trees",
             optional=True, mhd="mem",
             cellar=f"{tree}/viewport?x0=0&x1=1000000&y0=0&y1={n // 10}&max_nodes=2000"),
    ]
    for sc in s:
        if sc.get("key"):
            sc["key_bytes"] = os.path.getsize(os.path.join(zarr_dir, sc["key"]))
    return s


def mixed_paths(manifest, scenarios, target):
    """Lines "kind<TAB>path" for mixed.lua; target 'cellar' or 'mhd'."""
    n = manifest["cells"]
    names = manifest["obsmap_names"]
    by_id = {sc["id"]: sc for sc in scenarios}
    lines = []
    for kind in ("summary", "modlist", "obs_json", "obs_csv", "obsmap", "zarr_1k", "zarr_4m"):
        sc = by_id[kind]
        if sc.get("unavailable"):
            continue
        if target == "mhd":
            path = f"/mem/{kind}" if sc["mhd"] == "mem" else f"/file/{sc['key']}"
            lines.append((kind, path))
            continue
        if kind in ("obs_json", "obs_csv"):
            fmt = "&format=csv" if kind == "obs_csv" else ""
            for w in range(16):
                start = (n - 100) * w // 16
                lines.append((kind, f"/v1/stores/bench.h5ad/obs?rows={start}:{start + 100}"
                                    f"&columns=cell_type,n_genes,total_counts{fmt}"))
        elif kind == "obsmap":
            for w in range(8):
                picked = ",".join(names[(w * 13 + k) % len(names)] for k in range(100))
                lines.append((kind, f"/v1/stores/bench.h5mu/obsmap/rna?obs_names={picked}"))
        elif kind == "zarr_1k":
            for c in range(0, min(64, (n + 127) // 128)):
                lines.append((kind, f"/v1/stores/bench.zarr/zarr/obsm/X_umap/c/{c}/0"))
        elif kind == "zarr_4m":
            for c in range(0, (n + 16383) // 16384):
                lines.append((kind, f"/v1/stores/bench.zarr/zarr/obsm/X_pca/c/{c}/0"))
        else:
            lines.append((kind, sc["cellar"]))
    return lines


# --------------------------------------------------------------------------
# The run


class Results:
    def __init__(self):
        self.rows = {}    # (scenario id, server) -> result dict or {"note": ...}

    def put(self, sid, server, res):
        self.rows[(sid, server)] = res

    def get(self, sid, server):
        return self.rows.get((sid, server))


def write_paths(path, lines):
    with open(path, "w") as f:
        for kind, p in lines:
            f.write(f"{kind}\t{p}\n")


# cellar as users run it, and with its answer cache off: the second shows
# what a request costs when its answer is made anew (first requests, or
# requests that never repeat).
NO_ANSWER_CACHE = ("--answer-cache-bytes", "0")


def start_cellar(cfg, workdir, extra=()):
    port = free_port()
    return Server("cellar", [cfg["cellar_bin"], "--root", cfg["data_dir"], "--bind", "127.0.0.1",
                             "--port", str(port), "--threads", str(cfg["threads"]), *extra],
                  "/healthz", port, os.path.join(workdir, "cellar.log"))


def probe_cellar(srv, scenarios, results, bodies):
    """Checks every route once and saves cellar's answers for the bare
    reference; a 404 on a route still being built marks the row."""
    for sc in scenarios:
        status, body = probe(srv.base + sc["cellar"])
        if status == 404 and sc.get("optional"):
            sc["unavailable"] = True
            results.put(sc["id"], "cellar", {"note": NOT_AVAILABLE})
            log(f"{sc['id']}: 404 from cellar, {NOT_AVAILABLE}")
            continue
        if status != 200:
            sc["unavailable"] = True
            results.put(sc["id"], "cellar", {"note": f"HTTP {status}"})
            log(f"{sc['id']}: HTTP {status} {body[:200]!r}")
            continue
        sc["body_bytes"] = len(body)
        with open(os.path.join(bodies, sc["id"]), "wb") as f:
            f.write(body)


def start_mhd(cfg, workdir, bodies, pool_kib, name, files=None):
    """The bare libmicrohttpd reference: /mem/ answers the files of bodies,
    /file/ sends the files under files (default the data's bench.zarr)."""
    port = free_port()
    files = files or os.path.join(cfg["data_dir"], "bench.zarr")
    return Server(name, [cfg["mhd_bin"], "--port", str(port), "--threads", str(cfg["threads"]),
                         "--bodies", bodies, "--files", files,
                         "--memory-limit", str(pool_kib)],
                  "/", port, os.path.join(workdir, f"{name.replace(' ', '_')}.log"))


def start_nginx(cfg, workdir):
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    prefix = os.path.join(workdir, "nginx")
    os.makedirs(prefix, exist_ok=True)
    port = free_port()
    with open(os.path.join(HERE, "nginx.conf.in")) as f:
        conf = f.read()
    conf = (conf.replace("@PREFIX@", prefix).replace("@PORT@", str(port))
            .replace("@ROOT@", cfg["data_dir"]).replace("@WORKERS@", str(cfg["threads"]))
            .replace("@USER@", "user root;" if os.geteuid() == 0 else ""))
    conf_path = os.path.join(prefix, "nginx.conf")
    with open(conf_path, "w") as f:
        f.write(conf)
    return Server("nginx", [nginx, "-p", prefix, "-c", conf_path, "-e",
                            os.path.join(prefix, "error.log")],
                  "/bench.zarr/zarr.json", port, os.path.join(workdir, "nginx.log"))


def start_h5grove(cfg, workdir):
    port = free_port()
    return Server("h5grove", [sys.executable, os.path.join(HERE, "h5grove_server.py"),
                              cfg["data_dir"], str(port)],
                  "/", port, os.path.join(workdir, "h5grove.log"))


def try_start(name, fn):
    try:
        return fn()
    except Exception as e:  # noqa: BLE001 - a missing reference is reported, not fatal
        log(f"{name} did not start: {e}")
        return None


def measure(results, sid, server, url, cfg, rss_pid=None, **kw):
    if rss_pid:
        reset_peak_rss(rss_pid)
    res = run_wrk(url, kw.pop("connections", cfg["connections"]), cfg["duration"], cfg, **kw)
    if rss_pid:
        res["rss_kb"] = read_status_kb(rss_pid, "VmHWM")
        results.cellar_peak_kb = max(results.cellar_peak_kb, res["rss_kb"] or 0)
    results.put(sid, server, res)
    extra = f" rss {res['rss_kb']} kB" if rss_pid else ""
    log(f"{server:>16} {sid}: {res['rps']:>9.0f} req/s p50 {res['p50_us']}us "
        f"p99 {res['p99_us']}us errors {res['errors']}{extra}")
    return res


def run_all(cfg, manifest, scenarios, results, workdir):
    """Every server is started first; then each scenario runs on cellar and
    right after on its references, so that all of them see the same machine
    (load from other work on it shifts the pairs together, not the ratios)."""
    bodies = os.path.join(workdir, "bodies")
    os.makedirs(bodies, exist_ok=True)
    servers = {}

    def fresh_cellar(extra=()):
        # A new process for each scenario: its peak RSS is that scenario's
        # own (the caches it fills), not what earlier scenarios left.
        if servers.get("cellar"):
            servers.pop("cellar").stop()
        servers["cellar"] = start_cellar(cfg, workdir, extra)
        return servers["cellar"]

    try:
        probe_cellar(fresh_cellar(), scenarios, results, bodies)
        if "mhd" in cfg["refs"]:
            servers["mhd"] = try_start("mhd", lambda: start_mhd(
                cfg, workdir, bodies, cfg["pool_kib"], "bare libmicrohttpd"))
            if cfg["pool_kib"] != MHD_DEFAULT_POOL_KIB:
                servers["mhd_default_pool"] = try_start("mhd", lambda: start_mhd(
                    cfg, workdir, bodies, MHD_DEFAULT_POOL_KIB, "mhd default pool"))
        if "nginx" in cfg["refs"]:
            servers["nginx"] = try_start("nginx", lambda: start_nginx(cfg, workdir))
        if "h5grove" in cfg["refs"]:
            servers["h5grove"] = try_start("h5grove", lambda: start_h5grove(cfg, workdir))
        for sc in scenarios:
            sid = sc["id"]
            if cfg["only"] and sid not in cfg["only"]:
                continue
            if not sc.get("unavailable"):
                cellar = fresh_cellar()
                measure(results, sid, "cellar", cellar.base + sc["cellar"], cfg,
                        rss_pid=cellar.pid())
                if sc["mhd"] == "mem":  # raw zarr keys are never kept as answers
                    cellar = fresh_cellar(NO_ANSWER_CACHE)
                    measure(results, sid, "cellar_no_answer_cache", cellar.base + sc["cellar"],
                            cfg, rss_pid=cellar.pid())
                mhd = servers.get("mhd")
                if mhd:
                    path = f"/mem/{sid}" if sc["mhd"] == "mem" else f"/file/{sc['key']}"
                    measure(results, sid, "mhd", mhd.base + path, cfg)
                dp = servers.get("mhd_default_pool")
                if dp and sid in ("modlist", "obs_json"):
                    measure(results, sid, "mhd_default_pool", dp.base + f"/mem/{sid}", cfg)
            elif sc.get("key") and servers.get("mhd"):
                measure(results, sid, "mhd", servers["mhd"].base + f"/file/{sc['key']}", cfg)
            ref_path = sc.get("nginx") or sc.get("h5grove")
            ref_name = "nginx" if sc.get("nginx") else "h5grove"
            if not ref_path:
                continue
            ref = servers.get(ref_name)
            if not ref:
                results.put(sid, ref_name, {"note": f"{ref_name} did not run"})
                continue
            status, body = probe(ref.base + ref_path)
            if status != 200:
                results.put(sid, ref_name, {"note": f"HTTP {status}"})
                log(f"{ref_name} {sid}: HTTP {status} {body[:200]!r}")
                continue
            measure(results, sid, ref_name, ref.base + ref_path, cfg)
        mixed = os.path.join(LUA_DIR, "mixed.lua")
        names = ["cellar"] + (["mhd"] if servers.get("mhd") else [])
        for name in names:
            write_paths(os.path.join(workdir, f"mixed-{name}.tsv"),
                        mixed_paths(manifest, scenarios, name))
        for conns in (1, 16, 256) if not cfg["only"] or "mixed" in cfg["only"] else ():
            for name in names + ["cellar_no_answer_cache"]:
                paths = os.path.join(workdir, f"mixed-{'mhd' if name == 'mhd' else 'cellar'}.tsv")
                if name == "mhd":
                    srv = servers[name]
                else:
                    srv = fresh_cellar(NO_ANSWER_CACHE if name != "cellar" else ())
                measure(results, f"mixed_{conns}", name, srv.base + "/", cfg,
                        rss_pid=srv.pid() if name != "mhd" else None,
                        connections=conns, script=mixed, extra_env={"BENCH_PATHS": paths})
    finally:
        for srv in servers.values():
            if srv:
                srv.stop()


# --------------------------------------------------------------------------
# Report


def fmt_rps(res):
    if not res:
        return "—"
    if "note" in res:
        return res["note"]
    return f"{res['rps']:,.0f}"


def fmt_ms(us):
    ms = us / 1000.0
    return f"{ms:.3f}" if ms < 1 else f"{ms:.2f}" if ms < 100 else f"{ms:.0f}"


def ratio(a, b):
    if not a or not b or "rps" not in a or "rps" not in b or not b["rps"]:
        return None
    return a["rps"] / b["rps"]


def fmt_ratio(r):
    if r is None:
        return "—"
    return f"{r:.2f}" if r < 10 else f"{r:.0f}x" if r >= 100 else f"{r:.1f}x"


def build_table(scenarios, results, cfg):
    head = ("| scenario | conns | body bytes | cellar req/s | p50 ms | p99 ms | cellar peak RSS MB "
            "| errors | bare MHD req/s | ratio to MHD | other reference | ref req/s | ratio "
            "| no answer cache: req/s | ratio to MHD | ratio to other |")
    sep = "|" + "---|" * 16
    lines = [head, sep]
    rows = [(sc["id"], sc["label"], cfg["connections"], sc) for sc in scenarios]
    rows += [(f"mixed_{c}", f"mixed load (mixed.lua)", c, None) for c in (1, 16, 256)]
    for sid, label, conns, sc in rows:
        c = results.get(sid, "cellar")
        m = results.get(sid, "mhd")
        if sc and sc.get("nginx"):
            other_name, o = "nginx (static file)", results.get(sid, "nginx")
        elif sc and sc.get("h5grove"):
            other_name, o = "h5grove", results.get(sid, "h5grove")
        else:
            other_name, o = "—", None
        n = results.get(sid, "cellar_no_answer_cache")
        if c and "note" in c:
            lines.append(f"| {label} | {conns} | — | {c['note']} | — | — | — | — | "
                         f"{fmt_rps(m)} | — | {other_name} | {fmt_rps(o)} | — | — | — | — |")
            continue
        if not c:
            continue
        body = sc.get("body_bytes", "—") if sc else "mixed"
        lines.append(
            f"| {label} | {conns} | {body} | {c['rps']:,.0f} | {fmt_ms(c['p50_us'])} | "
            f"{fmt_ms(c['p99_us'])} | {(c.get('rss_kb') or 0) / 1024:.0f} | {c['errors']} | "
            f"{fmt_rps(m)} | {fmt_ratio(ratio(c, m))} | {other_name} | {fmt_rps(o)} | "
            f"{fmt_ratio(ratio(c, o))} | {fmt_rps(n)} | {fmt_ratio(ratio(n, m))} | "
            f"{fmt_ratio(ratio(n, o))} |")
    return "\n".join(lines)


def build_raw_table(results):
    lines = ["| scenario | server | req/s | p50 ms | p90 ms | p99 ms | max ms | errors | requests |",
             "|" + "---|" * 9]
    for (sid, server), res in results.rows.items():
        if "note" in res:
            lines.append(f"| {sid} | {server} | {res['note']} | | | | | | |")
            continue
        lines.append(f"| {sid} | {server} | {res['rps']:,.0f} | {fmt_ms(res['p50_us'])} | "
                     f"{fmt_ms(res['p90_us'])} | {fmt_ms(res['p99_us'])} | "
                     f"{fmt_ms(res['max_us'])} | {res['errors']} | {res['requests']} |")
    return "\n".join(lines)


def check_targets(scenarios, results, cfg):
    out = []
    for sid in ("summary", "modlist", "obs_json", "obs_csv", "obsmap"):
        c, m, h = (results.get(sid, s) for s in ("cellar", "mhd", "h5grove"))
        r = ratio(c, m)
        if r is not None:
            out.append((f"{sid}: >= 0.9 of bare libmicrohttpd req/s "
                        f"({cfg['connections']} connections)", r >= 0.9, f"{r:.2f}"))
        r = ratio(c, h)
        if r is not None:
            out.append((f"{sid}: >= 20x h5grove req/s", r >= 20, f"{r:.1f}x"))
    c = results.get("mixed_256", "cellar")
    if c and "rps" in c:
        out.append(("mixed load, 256 connections: no errors", c["errors"] == 0,
                    f"{c['errors']} errors"))
        spread = c["p99_us"] / max(c["p50_us"], 1)
        out.append(("mixed load, 256 connections: p99 under 10x p50", spread < 10,
                    f"p99/p50 = {spread:.1f}"))
        rss = (c.get("rss_kb") or 0) / 1024
        scope = "" if cfg["scale"] >= 1 else f" (measured at BENCH_SCALE={cfg['scale']:g}; " \
                                                "the target is for BENCH_SCALE=1)"
        out.append((f"mixed load, 256 connections: RSS under 150 MB{scope}", rss < 150,
                    f"{rss:.0f} MB"))
    return out


def machine_info(cfg):
    info = {}
    try:
        with open("/proc/cpuinfo") as f:
            m = re.search(r"^model name\s*:\s*(.+)$", f.read(), re.M)
            info["cpu"] = m.group(1).strip() if m else platform.processor()
    except OSError:
        info["cpu"] = platform.processor()
    info["cores"] = os.cpu_count()
    try:
        with open("/proc/meminfo") as f:
            kb = int(re.search(r"^MemTotal:\s*(\d+)", f.read(), re.M).group(1))
            info["memory"] = f"{kb / 1024 / 1024:.1f} GiB"
    except (OSError, AttributeError):
        info["memory"] = "?"
    info["kernel"] = platform.release()

    def version(argv, pattern=r"(\S+)"):
        try:
            out = subprocess.run(argv, capture_output=True, text=True, timeout=10)
            text = out.stdout + out.stderr
            m = re.search(pattern, text)
            return m.group(1) if m else text.strip().splitlines()[0]
        except (OSError, IndexError, subprocess.TimeoutExpired):
            return "?"

    info["cellar"] = version([cfg["cellar_bin"], "--version"], r"(\d+\.\d+\.\d+\S*)")
    info["commit"] = version(["git", "-C", REPO, "rev-parse", "--short", "HEAD"])
    info["libmicrohttpd"] = version(["pkg-config", "--modversion", "libmicrohttpd"])
    info["wrk"] = version(["wrk", "-v"], r"wrk (\S+)")
    info["nginx"] = version([shutil.which("nginx") or "/usr/sbin/nginx", "-v"],
                            r"nginx/(\S+)")
    try:
        from importlib.metadata import version as pkg_version
        info["h5grove"] = pkg_version("h5grove")
        info["tornado"] = pkg_version("tornado")
    except Exception:  # noqa: BLE001 - only for the report
        info["h5grove"] = "?"
    return info


def write_markdown(path, cfg, manifest, scenarios, results, table, targets, info, seconds):
    date = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    t_lines = [f"| {name} | {'holds' if ok else '**does not hold**'} | {value} |"
               for name, ok, value in targets]
    notes = []
    for sc in scenarios:
        if sc.get("h5grove"):
            notes.append(f"- {sc['label']}: cellar `{sc['cellar'][:120]}"
                         f"{'…' if len(sc['cellar']) > 120 else ''}`; h5grove "
                         f"`{sc['h5grove']}` ({sc['h5grove_note']}).")
        elif sc.get("nginx"):
            notes.append(f"- {sc['label']}: cellar `{sc['cellar']}`; nginx `{sc['nginx']}`; "
                         f"bare libmicrohttpd sends the same file ({sc['key_bytes']} bytes) "
                         "by sendfile.")
        else:
            notes.append(f"- {sc['label']}: cellar `{sc['cellar']}`.")
    text = f"""# Benchmarks

Written by `make bench` ({cfg['command']}); do not edit by hand. Every number
in a section comes from one run on one machine: cellar and its references were
started by the harness on 127.0.0.1, on the same files, one after the other,
and driven by the same wrk settings. The trees and matrices sections at the
end state their own run (`BENCH_ONLY=trees,matrices` reruns only those).

- Date: {date} (the run took {seconds:.0f} s)
- Command: `{cfg['command']}`
- Machine: {info['cpu']}, {info['cores']} cores, {info['memory']} memory, Linux {info['kernel']}
- Versions: cellar {info['cellar']} (commit {info['commit']}), libmicrohttpd {info['libmicrohttpd']},
  wrk {info['wrk']}, nginx {info['nginx']}, h5grove {info['h5grove']} (tornado {info.get('tornado', '?')})
- Data: BENCH_SCALE={cfg['scale']:g}: {manifest['cells']:,} cells x {manifest['genes']} genes
  ({manifest['nnz']:,} stored values in X); the MuData holds {manifest['mudata_cells']:,} cells
  (`rna` {manifest['rna_cells']:,}, `prot` {manifest['prot_cells']:,}). Written by
  `bench/make_data.py` with anndata/mudata, seed {manifest['seed']}.
- Other load: the 1-minute load average was {cfg['load_start']:.1f} at the start and
  {cfg['load_end']:.1f} at the end ({info['cores']} cores); over the run
  {steal_note(cfg['steal_core'])}; one core copied memory at {cfg['copy_start']:.1f} GB/s
  at the start; each scenario runs on cellar and
  right after on its references, so outside load shifts both sides of a ratio.
- Load: wrk, {cfg['wrk_threads']} thread(s), {cfg['duration']:g} s per run after
  {cfg['warmup']:g} s of warm-up, {cfg['connections']} connections unless stated;
  servers with {cfg['threads']} threads (cellar `--threads`, the libmicrohttpd pool,
  nginx workers; h5grove runs in one tornado process).

## Results

Ratios are cellar's requests/s over the reference's, from this run. Latencies
are wrk's (p50, p99). RSS is cellar's peak resident size (VmHWM): each
scenario runs on a freshly started cellar (its warm-up fills the caches it
uses), so the RSS is that scenario's own.  cellar runs as users run it, with
its answer cache (a repeated GET of an unchanged store is answered from the
answers it kept, `--answer-cache-bytes`); the last three columns are the
same scenario on a cellar started with `--answer-cache-bytes 0`, where every
request reads the store and builds its answer (its own caches of parsed
metadata, names and indexes stay on).

{table}

## Targets (issue 6)

| target | result | value |
|---|---|---|
{chr(10).join(t_lines)}

## What each row requests

{chr(10).join(notes)}
- Bare libmicrohttpd (`bench/mhd_ref.c`): same daemon flags as cellar
  (thread pool, epoll, the {cfg['pool_kib']} KiB connection memory limit read
  from `server/http.c`), answering from memory a body of exactly the size of
  cellar's answer to the same scenario (saved from cellar in this run), or
  the zarr key's file by sendfile. libmicrohttpd zeroes a connection's pool
  between keep-alive requests, so the pool size is a per-request cost: the
  `mhd_default_pool` rows below are the same bodies with libmicrohttpd's
  default {MHD_DEFAULT_POOL_KIB} KiB pool.
- h5grove cannot express most requests the way cellar answers them: a
  three-column obs slice with its index and categorical values is four or more
  h5grove requests (index, codes, categories, each column); an obsmap lookup by
  names needs the names resolved first. The h5grove rows measure the single
  closest request listed above, so the ratio to h5grove understates cellar.
- Mixed load: `bench/wrk/mixed.lua` holds the weights; the bare
  libmicrohttpd mixed run draws the same kinds with the same weights from
  bodies of the same sizes.
- The full run: `make bench BENCH_SCALE=1 BENCH_DURATION=15` (200,000 cells;
  several minutes more for the data the first time). Data is generated once
  per scale into `bench/data/` (git-ignored).

## Every run

{build_raw_table(results)}
"""
    return text


SECTIONS = ("trees", "matrices", "probe", "replicas", "deploy", "viewer", "zarrview", "h5grove",
            "remote", "taxonium")
SECTION_RE = re.compile(r"<!-- bench:([\w@.]+) -->\n.*?<!-- /bench:\1 -->\n?", re.S)


def old_sections(path):
    """(text without the section blocks, {name: block}) of the current file."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        return "# Benchmarks\n", {}
    blocks = {m.group(1): m.group(0) for m in SECTION_RE.finditer(text) if "@" in m.group(1)}
    return SECTION_RE.sub("", text), blocks


def repeat_note(cfg):
    n = cfg.get("repeat", 1)
    return (f", each run made {n} times and the one with the median req/s kept"
            if n > 1 else "")


def section_block(name, title, cfg, info, body, targets, seconds, client, steal, copy):
    """client: the load client, or (for sections that run no load) a
    sentence of its own, starting "runs:", naming what the section runs."""
    date = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    runs = (client[len("runs:"):].strip() if client.startswith("runs:") else
            f"{client},\n  {cfg['duration']:g} s per run after {cfg['warmup']:g} s of "
            f"warm-up{repeat_note(cfg)}")
    t_lines = [f"| {n} | {'holds' if ok else '**does not hold**'} | {v} |" for n, ok, v in targets]
    return f"""<!-- bench:{name} -->
## {title}

- Run: {date}, `{cfg['command']}` ({seconds:.0f} s for this section); {info['cpu']},
  {info['cores']} cores, cellar {info['cellar']} (commit {info['commit']}); load average
  {cfg['load_start']:.1f} at the start of the run; over this section
  {steal_note(steal)}; one core copied memory at {copy:.1f} GB/s at its start; {runs}; cellar `--threads {cfg['threads']}`.

{body}

| target | result | value |
|---|---|---|
{chr(10).join(t_lines)}
<!-- /bench:{name} -->
"""


def wanted_data_version():
    with open(os.path.join(HERE, "make_data.py")) as f:
        return int(re.search(r"^DATA_VERSION = (\d+)", f.read(), re.M).group(1))


def data_version(manifest_path):
    try:
        with open(manifest_path) as f:
            return json.load(f).get("version")
    except (OSError, ValueError):
        return None


def cellar_pool_kib():
    """cellar's libmicrohttpd connection memory limit, read from server/http.c
    so that the bare reference runs with the same (default 256 KiB)."""
    try:
        with open(os.path.join(REPO, "server", "http.c")) as f:
            m = re.search(r"MHD_OPTION_CONNECTION_MEMORY_LIMIT,\s*\(size_t\)\s*\((\d+)\s*\*\s*1024\)",
                          f.read())
        return int(m.group(1)) if m else 256
    except OSError:
        return 256


def ensure_core_data(cfg):
    """(folder, manifest) of the core stores at cfg's scale, written once."""
    manifest_path = os.path.join(cfg["data_dir"], "manifest.json")
    if data_version(manifest_path) != wanted_data_version():
        shutil.rmtree(cfg["data_dir"], ignore_errors=True)
        log(f"writing data at scale {cfg['scale']:g} into {cfg['data_dir']}")
        subprocess.run([sys.executable, os.path.join(HERE, "make_data.py"), cfg["data_dir"],
                        str(cfg["scale"])], check=True, stdout=subprocess.DEVNULL)
    with open(manifest_path) as f:
        manifest = json.load(f)
    os.chmod(cfg["data_dir"], 0o755)
    return cfg["data_dir"], manifest


def main():
    scale = env_float("BENCH_SCALE", 0.1)
    cfg = {
        "cellar_bin": os.path.abspath(os.environ["CELLAR_BIN"]),
        "scale": scale,
        "duration": env_float("BENCH_DURATION", 4),
        "warmup": env_float("BENCH_WARMUP", 1),
        "connections": env_int("BENCH_CONNECTIONS", 16),
        "threads": env_int("BENCH_THREADS", os.cpu_count() or 2),
        "wrk_threads": env_int("BENCH_WRK_THREADS", 1),
        "repeat": env_int("BENCH_REPEAT", 1),
        "data_dir": os.path.join(HERE, "data", f"scale-{scale:g}"),
        "mhd_bin": os.path.join(HERE, "data", "bin", "mhd_ref"),
        "out": os.environ.get("BENCH_OUT") or os.path.join(REPO, "BENCHMARKS.md"),
        "only": set(filter(None, os.environ.get("BENCH_ONLY", "").split(","))),
        "refs": set(filter(None, os.environ.get("BENCH_REFS", "mhd,nginx,h5grove").split(","))),
        "pool_kib": cellar_pool_kib(),
    }
    cfg["command"] = os.environ.get("BENCH_COMMAND") or (
        f"make bench BENCH_SCALE={scale:g} BENCH_DURATION={cfg['duration']:g}"
        + (f" BENCH_REPEAT={cfg['repeat']}" if cfg["repeat"] > 1 else "")
        + (f" BENCH_ONLY={os.environ['BENCH_ONLY']}" if cfg["only"] else ""))
    t0 = time.time()
    cfg["load_start"] = os.getloadavg()[0]
    ticks0 = stat_ticks()
    only = cfg["only"]
    run_core = not only or bool(only - set(SECTIONS))
    # Per run, so that two runs at once (two engineers) do not share one.
    workdir = os.path.join(HERE, "data", f"run-{os.getpid()}")
    shutil.rmtree(workdir, ignore_errors=True)
    os.makedirs(workdir)
    core_text, blocks = None, {}
    info = machine_info(cfg)
    all_targets = []
    if run_core:
        cfg["copy_start"] = copy_gbps()
        _, manifest = ensure_core_data(cfg)
        scenarios = build_scenarios(manifest, os.path.join(cfg["data_dir"], "bench.zarr"))
        results = Results()
        results.cellar_peak_kb = 0
        run_all(cfg, manifest, scenarios, results, workdir)
        table = build_table(scenarios, results, cfg)
        targets = check_targets(scenarios, results, cfg)
        all_targets += targets
        cfg["load_end"] = os.getloadavg()[0]
        cfg["steal_core"] = steal_pct(ticks0, stat_ticks())
        seconds = time.time() - t0
        core_text = write_markdown(cfg["out"], cfg, manifest, scenarios, results, table,
                                   targets, info, seconds)
        print(table)
        print(f"\ncellar peak RSS over the run: {results.cellar_peak_kb / 1024:.0f} MB")
    import deploy
    import grove_bench
    import remote
    import replicas
    import sections
    import taxonium
    import viewer
    import zarrview
    for name, title, fn in (("trees", "Trees (issue 4)", sections.run_trees),
                            ("matrices", "Matrices (issue 5)", sections.run_matrices),
                            ("probe", "The HDF5 probe (issue 19)", sections.run_probe),
                            ("replicas", "Replicas behind HAProxy (issue 15)",
                             replicas.run_replicas),
                            ("deploy", "TLS and bearer tokens (issue 15)", deploy.run_deploy),
                            ("viewer", "The built-in viewer (issue 14)", viewer.run_viewer),
                            ("zarrview", "The zarr view of HDF5 stores (issue 13)",
                             zarrview.run_zarrview),
                            ("h5grove", "The h5grove routes against h5grove (issue 14)",
                             grove_bench.run_h5grove),
                            ("remote", "Remote stores on S3 (issue 18)", remote.run_remote),
                            ("taxonium", "Taxonium's nodes/ (issue 14)", taxonium.run_taxonium)):
        if only and name not in only:
            continue
        copy = copy_gbps()
        t1, s1 = time.time(), stat_ticks()
        body, targets = fn(cfg, workdir)
        all_targets += targets
        # One block per section and scale: a full run does not drop the quick one.
        key = f"{name}@{cfg['scale']:g}"
        blocks[key] = section_block(key, f"{title}, BENCH_SCALE={cfg['scale']:g}", cfg, info,
                                    body, targets, time.time() - t1,
                                    sections.load_client(name, cfg),
                                    steal_pct(s1, stat_ticks()), copy)
        print(body)
    # The file as it is now (another run may have rewritten it meanwhile):
    # its other parts are kept.
    old_core, old_blocks = old_sections(cfg["out"])
    blocks = {**old_blocks, **blocks}
    text = (core_text or old_core).rstrip("\n") + "\n"
    def order(key):
        name, _, scale = key.partition("@")
        rank = SECTIONS.index(name) if name in SECTIONS else len(SECTIONS)
        return rank, -float(scale or 0)
    for key in sorted(blocks, key=order):
        text += "\n" + blocks[key].rstrip("\n") + "\n"
    with open(cfg["out"], "w") as f:
        f.write(text)
    print()
    for name, ok, value in all_targets:
        print(f"{'OK  ' if ok else 'MISS'} {name}: {value}")
    print(f"\nwrote {os.path.relpath(cfg['out'], REPO)} in {time.time() - t0:.0f} s")
    shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
