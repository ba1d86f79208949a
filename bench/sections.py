"""The trees (issue 4), matrices (issue 5) and probe (issue 19) sections of
`make bench`.

bench/run.py calls run_trees / run_matrices / run_probe, which return a Markdown block
and a list of (target, holds, value); each section has its own data folder
(`bench/data/trees-S/`, `bench/data/matrix-S/`, written once by
make_trees.py / make_matrix.py), its own cellar processes (started fresh,
`--root` that folder) and its own references, all in the same run.
"""

import json
import os
import resource
import statistics
import subprocess
import sys
import time
import urllib.parse
import urllib.request

import run as R

CLK_TCK = os.sysconf("SC_CLK_TCK")


# --------------------------------------------------------------------------
# Helpers


def ensure_data(script, out_dir, scale, version_name):
    with open(os.path.join(R.HERE, script)) as f:
        import re
        want = int(re.search(rf"^{version_name} = (\d+)", f.read(), re.M).group(1))
    manifest_path = os.path.join(out_dir, "manifest.json")
    if R.data_version(manifest_path) != want:
        import shutil
        shutil.rmtree(out_dir, ignore_errors=True)
        R.log(f"writing {script} data at scale {scale:g} into {out_dir} (once)")
        subprocess.run([sys.executable, os.path.join(R.HERE, script), out_dir, str(scale)],
                       check=True, stdout=subprocess.DEVNULL)
    with open(manifest_path) as f:
        return json.load(f)


def start_cellar(cfg, root, workdir, name, extra=(), scheme="http"):
    port = R.free_port()
    return R.Server("cellar", [cfg["cellar_bin"], "--root", root, "--bind", "127.0.0.1",
                               "--port", str(port), "--threads", str(cfg["threads"]), *extra],
                    "/healthz", port, os.path.join(workdir, f"cellar-{name}.log"),
                    scheme=scheme)


# Queries are measured with cellar's answer cache off, so every answer is
# made from the index or the store (what a request that does not repeat
# costs); rows marked "answer cache on" repeat the viewports as users run it.
NO_ANSWER_CACHE = ("--answer-cache-bytes", "0")
CACHED_SUFFIX = "_cached"


def timed_get(url, timeout=600):
    """(seconds, status, headers, body) of one GET."""
    t0 = time.perf_counter()
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            body = r.read()
            status, headers = r.status, r.headers
    except urllib.error.HTTPError as e:
        body, status, headers = e.read(), e.code, e.headers
    return time.perf_counter() - t0, status, headers, body


def cache_bytes(base):
    _, status, _, body = timed_get(base + "/metrics", timeout=30)
    if status != 200:
        return None
    for line in body.decode().splitlines():
        if line.startswith("cellar_cache_bytes "):
            return int(float(line.split()[1]))
    return None


def cpu_ticks(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])   # utime + stime
    except (OSError, IndexError, ValueError):
        return None


def thread_ticks(pid):
    """{tid: utime + stime} of every thread of pid."""
    out = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            out[tid] = int(fields[11]) + int(fields[12])
        except (OSError, IndexError, ValueError):
            pass
    return out


def python_ref(args, timeout=3600):
    out = subprocess.run([sys.executable, os.path.join(R.HERE, "py_ref.py")] + args,
                         capture_output=True, text=True, timeout=timeout)
    for line in out.stdout.splitlines():
        if line.startswith("PY_RESULT "):
            return json.loads(line[len("PY_RESULT "):])
    raise RuntimeError(f"py_ref {args[0]} failed: {out.stderr[-800:]}")


# The load client of each section.  wrk (like h2load and ab) reads the
# socket 8 KiB per recv: fine for the trees' small answers, but an 800 KB
# matrix body costs it ~100 recv calls, and on two shared cores wrk then
# used more CPU than the server it measured.  bench/loadgen.c reads up to
# 1 MiB per recv; it measures both sides of every matrices ratio.  The
# matrices section also runs every query under wrk (MATRICES_ALSO), the
# client issue 5 names, and shows those numbers and targets beside loadgen's.
TREES_CLIENT = "wrk"
MATRICES_CLIENT = "loadgen"
MATRICES_ALSO = ("wrk",)
MATRICES_CLIENTS = (MATRICES_CLIENT, *MATRICES_ALSO)
LOADGEN_BIN = os.path.join(R.HERE, "data", "bin", "loadgen")


def load_client(section, cfg):
    """The client named in a section's header line."""
    wrk = f"wrk {cfg['wrk_threads']} thread(s)"
    if section == "matrices" and MATRICES_CLIENT == "loadgen":
        return (f"`bench/loadgen` (1 thread, 1 MiB reads) for the Queries table, and {wrk} "
                "(`bench/wrk/paths.lua`) for the same queries in \"Same queries under wrk\"; "
                "each target row names its client")
    if section == "probe":
        n = max(cfg.get("repeat", 1), 1)
        return (f"runs: `cellar --probe-file FILE` {R.env_int('BENCH_PROBE_RUNS', PROBE_RUNS) * n} "
                f"times per store, and {R.env_int('BENCH_PROBE_FIRST_RUNS', PROBE_FIRST_RUNS) * n}"
                " first requests per store and probe mode, one GET (urllib) per freshly "
                f"started cellar" + (f" (BENCH_REPEAT={n})" if n > 1 else ""))
    if section == "remote":
        import remote
        return (f"runs: one GET (urllib) at a time, {remote.COLD_RUNS} cold first requests and "
                f"{remote.WARM_RUNS} warm ones per request and side")
    if section == "viewer":
        import viewer
        n = viewer.PAGE_LOADS * max(cfg.get("repeat", 1), 1)
        return (f"runs: `bench/viewer_time.mjs` (playwright-core, Debian's Chromium), {n} page "
                f"loads per store, and {n} GETs (urllib) of the embedding")
    if section == "zarrview":
        return (f"{wrk} (`bench/wrk/paths.lua`) for the chunk keys, and one keep-alive "
                "http.client connection per side for the gene reads")
    return wrk


def client_runs(q, client):
    """{connections: result} of one query under client: the primary
    client's runs sit in the query's own dict, the others' under their name."""
    return q if client == MATRICES_CLIENT else (q.get(client) or {})


def run_loadgen(base, path_file, connections, seconds, cycle):
    if not os.access(LOADGEN_BIN, os.X_OK):
        raise RuntimeError(f"{LOADGEN_BIN} is missing: bench/run.sh (make bench) builds it")
    argv = [LOADGEN_BIN, "-c", str(connections), "-d", f"{seconds:g}", "-t", "10",
            "-f", path_file, "-o", "cycle" if cycle else "random", "-s", "1", base + "/"]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 60)
    return R.bench_result("loadgen", out)


def run_client(client, cfg, base, path_file, connections, seconds, cycle, authorization=None):
    """One run of wrk (bench/wrk/paths.lua) or loadgen over the paths in
    path_file, no warm-up of its own; authorization, when given, is sent as
    the Authorization header of every request (wrk only)."""
    if client == "loadgen":
        if authorization:
            raise ValueError("loadgen sends no Authorization header")
        return run_loadgen(base, path_file, connections, seconds, cycle)
    env = {"BENCH_PATHS": path_file, "BENCH_ORDER": "cycle" if cycle else "random"}
    if authorization:
        env["BENCH_AUTHORIZATION"] = authorization
    # wrk's CPU: the children's rusage grows by it when subprocess reaps it
    # (no other child of this process ends meanwhile: the servers run on).
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    res = R.run_wrk(base + "/", connections, seconds, cfg,
                    script=os.path.join(R.LUA_DIR, "paths.lua"), extra_env=env, warmup=False)
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    res["client_cpu_us"] = round(1e6 * (ru1.ru_utime + ru1.ru_stime
                                        - ru0.ru_utime - ru0.ru_stime))
    return res


def load_paths(cfg, workdir, base, name, paths, connections, client, cpu_pid=None, cycle=False,
               authorization=None):
    """The client over a list of paths, after a warm-up run; with cpu_pid,
    the server's CPU use over the measured run (percent of one core).  With
    BENCH_REPEAT=n the measured run is made n times and the one with the
    median req/s is kept (whole, with its own latencies and CPU): one burst
    of steal or outside load then moves no number."""
    path_file = os.path.join(workdir, f"paths-{name}.txt")
    with open(path_file, "w") as f:
        f.write("".join(p + "\n" for p in paths))
    if cfg["warmup"] > 0:
        run_client(client, cfg, base, path_file, connections, cfg["warmup"], cycle, authorization)
    runs = [measured_run(cfg, base, path_file, connections, client, cpu_pid, cycle, authorization)
            for _ in range(max(cfg.get("repeat", 1), 1))]
    runs.sort(key=lambda r: r["rps"])
    res = runs[len(runs) // 2]
    if len(runs) > 1:
        res["repeat_rps"] = [round(r["rps"]) for r in runs]
    R.log(f"{name} {client} c{connections}: {res['rps']:.0f} req/s p50 {res['p50_us']}us "
          f"p99 {res['p99_us']}us errors {res['errors']}"
          + (f" cpu {res['cpu_pct']:.0f}% threads {res.get('thread_pct')}" if "cpu_pct" in res
             else "")
          + f" machine {res['machine_pct']:.0f}% steal {res['steal_pct']:.0f}%"
          + (f" {client} {res['client_pct']:.0f}%" if "client_pct" in res else "")
          + (f", {res['recv_calls'] / max(res['requests'], 1):.1f} recv/response"
             if "recv_calls" in res else "")
          + (f" (median of {res['repeat_rps']} req/s)" if "repeat_rps" in res else ""))
    return res


def measured_run(cfg, base, path_file, connections, client, cpu_pid, cycle, authorization=None):
    t0, c0 = time.time(), cpu_ticks(cpu_pid) if cpu_pid else None
    th0 = thread_ticks(cpu_pid) if cpu_pid else {}
    m0 = R.stat_ticks()
    res = run_client(client, cfg, base, path_file, connections, cfg["duration"], cycle,
                     authorization)
    m1 = R.stat_ticks()
    if "client_cpu_us" in res:
        res["client_pct"] = 100.0 * res["client_cpu_us"] / max(res["duration_us"], 1)
    # The whole machine's busy share, in percent of one core (200% = two).
    res["machine_pct"] = R.core_pct(m0, m1, 0)
    res["steal_pct"] = R.steal_pct(m0, m1)
    if cpu_pid:
        c1 = cpu_ticks(cpu_pid)
        wall = max(time.time() - t0, 1e-6)
        if c0 is not None and c1 is not None:
            res["cpu_pct"] = 100.0 * (c1 - c0) / CLK_TCK / wall
        # Per thread: do both request threads work, whatever else runs?
        th1 = thread_ticks(cpu_pid)
        busy = sorted((100.0 * (th1[t] - th0.get(t, 0)) / CLK_TCK / wall for t in th1),
                      reverse=True)
        res["thread_pct"] = [round(b) for b in busy if b >= 1]
    return res


def mb(kb):
    """MB (MiB) from kB, as /proc reports."""
    return f"{kb / 1024:,.1f}" if kb is not None else "—"


def mbb(nbytes):
    """MB (MiB) from bytes."""
    return f"{nbytes / 1048576:,.1f}" if nbytes is not None else "—"


def fmt_s(s):
    return f"{s * 1000:.1f} ms" if s < 1 else f"{s:.2f} s"


def enc(s):
    return urllib.parse.quote(s, safe="")


# --------------------------------------------------------------------------
# Trees (issue 4)

TREE_STORES = ("trees.h5td", "trees.zarr")
TREE_FIRST_RUNS = 3


def tree_queries(m):
    leaves, internal = m["leaves"], m["internal"]
    n = m["n_leaves"]
    window = max(2, n // 50)
    zooms = []
    for k in range(32):
        y0 = (n - window) * k // 31
        zooms.append(f"viewport?y0={y0}&y1={y0 + window}&max_nodes=2000")
    return [
        ("node", "node (attributes, children)", [f"nodes/{enc(x)}" for x in internal + leaves]),
        ("ancestors", "ancestors of a leaf", [f"ancestors?node={enc(x)}" for x in leaves]),
        ("subtree", "subtree, depth 3", [f"subtree?root={enc(x)}&depth=3" for x in internal]),
        ("lca", "lca of 2 leaves", [f"lca?nodes={enc(leaves[i])},{enc(leaves[-1 - i])}"
                                    for i in range(128)]),
        ("viewport_full", "viewport, whole tree, 2000 nodes max", ["viewport?max_nodes=2000"]),
        ("viewport_zoom", "viewport, 1/50 of the leaves, 2000 nodes max", zooms),
    ]


def first_answer(cfg, root, workdir, store, m):
    """A fresh cellar per run: RSS before, the first tree request (store
    open, JSON parse and index), RSS and cache after, a second request."""
    url_path = f"/v1/stores/{store}/obst/lineage/nodes/{enc(m['root'])}"
    runs = []
    for i in range(TREE_FIRST_RUNS):
        srv = start_cellar(cfg, root, workdir, f"trees-first-{i}")
        try:
            rss0 = R.read_status_kb(srv.pid(), "VmRSS")
            secs, status, _, body = timed_get(srv.base + url_path)
            if status != 200:
                raise RuntimeError(f"{store}: first tree request answered {status}: {body[:300]!r}")
            rss1 = R.read_status_kb(srv.pid(), "VmRSS")
            hwm = R.read_status_kb(srv.pid(), "VmHWM")
            cb = cache_bytes(srv.base)
            second, _, _, _ = timed_get(srv.base + url_path)
            runs.append({"seconds": secs, "second_s": second, "rss0_kb": rss0, "rss1_kb": rss1,
                         "hwm_kb": hwm, "cache_bytes": cb})
            R.log(f"{store} first answer {secs * 1000:.0f} ms, rss {rss0} -> {rss1} kB "
                  f"(peak {hwm}), cache {cb}")
        finally:
            srv.stop()
    runs.sort(key=lambda r: r["seconds"])
    med = runs[len(runs) // 2]
    return {"seconds": med["seconds"], "all_s": [r["seconds"] for r in runs],
            "second_s": statistics.median(r["second_s"] for r in runs),
            "rss0_kb": med["rss0_kb"], "rss1_kb": med["rss1_kb"],
            "hwm_kb": max(r["hwm_kb"] or 0 for r in runs),
            "growth_kb": max((r["rss1_kb"] or 0) - (r["rss0_kb"] or 0) for r in runs),
            "peak_growth_kb": max((r["hwm_kb"] or 0) - (r["rss0_kb"] or 0) for r in runs),
            "cache_bytes": med["cache_bytes"]}


def run_trees(cfg, workdir):
    scale = cfg["scale"]
    root = os.path.join(R.HERE, "data", f"trees-{scale:g}")
    m = ensure_data("make_trees.py", root, scale, "TREES_VERSION")
    os.chmod(root, 0o755)
    out = {"manifest": m, "stores": {}}
    queries = tree_queries(m)
    queries += [(qid + CACHED_SUFFIX, label + ", repeated views (answer cache on)", paths)
                for qid, label, paths in tree_queries(m) if qid.startswith("viewport")]
    conns = sorted({1, cfg["connections"]})
    for store in TREE_STORES:
        st = out["stores"][store] = {}
        st["first"] = first_answer(cfg, root, workdir, store, m)
        R.log(f"{store}: Python reference (treedata)")
        st["python"] = python_ref(["tree", os.path.join(root, store)])
        R.log(f"{store}: Python {st['python']['seconds']:.2f} s")
        for cached in (False, True):
            run_tree_queries(cfg, root, workdir, store, st, queries, conns, cached)
    out["conns"] = conns
    return tree_markdown(cfg, out, queries), tree_targets(out, queries)


def measure_queries(cfg, workdir, srv, store, st, queries, conns, clients):
    """Each query (id, label, paths) under each client at each connection
    count, into st[id] (see client_runs); a first path answering other than
    200 is noted instead."""
    for qid, _, paths in queries:
        _, status, _, body = timed_get(srv.base + paths[0])
        if status != 200:
            st[qid] = {"note": f"HTTP {status}"}
            R.log(f"{store} {qid}: HTTP {status} {body[:300]!r}")
            continue
        st[qid] = {"body_bytes": len(body)}
        measure_clients(cfg, workdir, srv, f"{store}-{qid}", paths, conns, clients, st[qid])


def measure_clients(cfg, workdir, srv, name, paths, conns, clients, q, cpu=True, cycle=False):
    """The paths under each client (the first is the primary: its runs go
    into q itself) at each connection count; each count runs all clients
    back to back so that they see the same machine."""
    for c in conns:
        for client in clients:
            runs = q if client == clients[0] else q.setdefault(client, {})
            runs[c] = load_paths(cfg, workdir, srv.base, name, paths, c, client,
                                 cpu_pid=srv.pid() if cpu else None, cycle=cycle)


def run_tree_queries(cfg, root, workdir, store, st, queries, conns, cached):
    """The queries with (cached) or without the answer cache, on one cellar."""
    srv = start_cellar(cfg, root, workdir, f"trees-{store}-{'cached' if cached else 'fresh'}",
                       () if cached else NO_ANSWER_CACHE)
    try:
        R.reset_peak_rss(srv.pid())
        base_path = f"/v1/stores/{store}/obst/lineage/"
        mine = [(qid, label, [base_path + p for p in paths]) for qid, label, paths in queries
                if qid.endswith(CACHED_SUFFIX) == cached]
        measure_queries(cfg, workdir, srv, store, st, mine, conns, (TREES_CLIENT,))
        hwm = R.read_status_kb(srv.pid(), "VmHWM")
        st["hwm_kb"] = max(st.get("hwm_kb") or 0, hwm or 0)
    finally:
        srv.stop()


def tree_targets(out, queries):
    t = []
    jb = out["manifest"]["json_bytes"]
    for store, st in out["stores"].items():
        f, py = st["first"], st["python"]
        r = py["seconds"] / f["seconds"]
        t.append((f"{store}: first answer >= 15x faster than treedata's read + networkx graph",
                  r >= 15, f"{r:.1f}x ({fmt_s(f['seconds'])} vs {py['seconds']:.2f} s)"))
        cb = f["cache_bytes"] or 0
        t.append((f"{store}: index memory (cellar_cache_bytes) under 2x the JSON "
                  f"({mbb(jb)} MB)", cb < 2 * jb, f"{cb / jb:.2f}x ({mbb(cb)} MB)"))
        pg = f["peak_growth_kb"] * 1024
        t.append((f"{store}: peak RSS growth across the first request under 2x the JSON",
                  pg < 2 * jb, f"{pg / jb:.2f}x ({mbb(pg)} MB; RSS after it "
                               f"+{mb(f['growth_kb'])} MB)"))
        for qid, label, _ in queries:
            q = st.get(qid) or {}
            limit = 20 if qid.startswith("viewport") else 1
            for c in out["conns"]:
                if c not in q:
                    continue
                p50 = q[c]["p50_us"] / 1000
                t.append((f"{store}: {label}, p50 under {limit} ms ({c} conn.)", p50 < limit,
                          f"{R.fmt_ms(q[c]['p50_us'])} ms"))
    return t


def conn_cells(q, conns):
    """(" req/s | p50 | p99 |" for each connection count, errors summed)
    of one query's runs."""
    row, errors = "", 0
    for c in conns:
        r = q.get(c)
        if not r:
            row += " — | — | — |"
            continue
        errors += r["errors"]
        row += f" {r['rps']:,.0f} | {R.fmt_ms(r['p50_us'])} | {R.fmt_ms(r['p99_us'])} |"
    return row, errors


def tree_markdown(cfg, out, queries):
    m = out["manifest"]
    lines = []
    lines.append(f"Data (`bench/make_trees.py`, seed {m['seed']}, BENCH_SCALE={m['scale']:g}): "
                 f"one random binary tree (coalescent), {m['n_nodes']:,} nodes, "
                 f"{m['n_leaves']:,} leaves, depth up to {m['max_depth']} (leaves "
                 f"{m['mean_leaf_depth']} on average), `length` on every edge, node "
                 f"attributes `time` (float) and `state` (string). treedata's JSON string: "
                 f"{m['json_bytes']:,} bytes; files: "
                 + ", ".join(f"`{k}` {v / 1e6:,.1f} MB" for k, v in m["files"].items())
                 + ". BENCH_SCALE=1 is 999,999 nodes, the quick run (0.1) 99,999.")
    lines.append("")
    lines.append("### First answer and memory")
    lines.append("")
    lines.append("| store | cellar first answer | runs (s) | second answer | treedata read + graph "
                 "| ratio | cellar RSS before -> after MB | RSS growth MB (peak) | "
                 "cellar_cache_bytes MB | cache / JSON | peak growth / JSON | Python peak RSS MB |")
    lines.append("|" + "---|" * 12)
    jb = m["json_bytes"]
    for store, st in out["stores"].items():
        f, py = st["first"], st["python"]
        cb = f["cache_bytes"] or 0
        lines.append(
            f"| `{store}` | {fmt_s(f['seconds'])} | {', '.join(f'{s:.3f}' for s in f['all_s'])} | "
            f"{fmt_s(f['second_s'])} | {py['seconds']:.2f} s | "
            f"{py['seconds'] / f['seconds']:.1f}x | {mb(f['rss0_kb'])} -> {mb(f['rss1_kb'])} | "
            f"{mb(f['growth_kb'])} ({mb(f['peak_growth_kb'])}) | {mbb(cb)} | {cb / jb:.2f} | "
            f"{f['peak_growth_kb'] * 1024 / jb:.2f} | {mb(py['rss_kb'])} |")
    lines.append("")
    lines.append(f"The first answer is `GET /v1/stores/{{store}}/obst/lineage/nodes/{m['root']}` "
                 f"(the root) on a freshly started cellar: opening the store, reading and "
                 f"parsing the trees and building the index happen in it; median of "
                 f"{TREE_FIRST_RUNS} fresh processes (files in the page cache for both sides). "
                 "The reference is `treedata.read_h5td(path)` (`read_zarr` for the zarr "
                 "store), which parses the JSON (zarr: the columns) and builds the networkx "
                 "DiGraph, in a fresh Python (imports not timed), once. Index memory: "
                 "`cellar_cache_bytes` from `/metrics` after the first answer, and cellar's "
                 "RSS growth across the first request (after it; in parentheses the peak, "
                 "VmHWM minus the RSS before), against the JSON string's size (the zarr "
                 "store holds columns instead, compared with the same JSON size).")
    lines.append("")
    lines.append("### Queries")
    lines.append("")
    head = "| query | store | body bytes (first path) |"
    for c in out["conns"]:
        head += f" req/s c{c} | p50 ms c{c} | p99 ms c{c} |"
    cmax = out["conns"][-1]
    lines.append(head + f" cellar CPU c{cmax} (machine) | errors |")
    lines.append("|" + "---|" * (5 + 3 * len(out["conns"])))
    for qid, label, paths in queries:
        for store, st in out["stores"].items():
            q = st.get(qid) or {}
            if "note" in q:
                lines.append(f"| {label} | `{store}` | {q['note']} |" + " |" * (2 + 3 * len(out["conns"])))
                continue
            row = f"| {label} ({len(paths)} paths) | `{store}` | {q.get('body_bytes', '—')} |"
            cells, errors = conn_cells(q, out["conns"])
            row += cells
            r = q.get(cmax) or {}
            row += (f" {r['cpu_pct']:.0f}% = {'+'.join(str(x) for x in r.get('thread_pct', []))}"
                    f" ({r['machine_pct']:.0f}%) |" if "cpu_pct" in r else " — |")
            lines.append(row + f" {errors} |")
    lines.append("")
    ex = {qid: paths[0] for qid, _, paths in queries}
    lines.append("Queries run on a cellar started with `--answer-cache-bytes 0`: every "
                 "answer is made from the tree index, as for a request that does not repeat. "
                 "The rows marked *answer cache on* repeat the same viewports on a cellar as "
                 "users run it (a view many clients open, or one asked for again), answered "
                 "from the answers it keeps.")
    lines.append("")
    lines.append("Each query draws its path at random from a list (`bench/wrk/paths.lua`) "
                 "under `/v1/stores/{store}/obst/lineage/`, e.g. "
                 + "; ".join(f"`{p}`" for p in ex.values())
                 + ". CPU: cellar's user + system time over the measured run at the most "
                 "connections, in percent of one core (200% = both), and in parentheses the "
                 "whole machine's (cellar, wrk and anything else running); a p50 at many "
                 "connections on two cores is mostly queueing (16 connections, 2 threads)."
                 " Node ids are random leaves and internal nodes (seeded); the lca pairs "
                 "are two random leaves; the zoomed viewports are 32 windows of 1/50 of the "
                 "leaf ranks over the whole x range. Peak RSS over the query runs: "
                 + ", ".join(f"`{s}` {mb(st.get('hwm_kb'))} MB" for s, st in out["stores"].items())
                 + ".")
    return "\n".join(lines)


# --------------------------------------------------------------------------
# Matrices (issue 5)

MATRIX_STORES = ("matrix.h5ad", "matrix.zarr")
MATRIX_CONNS = (1, 64)


def matrix_queries(m, store):
    s = f"/v1/stores/{store}"
    return [
        ("x_gene", "one gene's column, dense float32 (`format=bin`)",
         [f"{s}/X?var_names={g}&format=bin" for g in m["gene_names"]]),
        ("x_rows", "100 cells' rows (`layout=csr&format=bin`: indptr, indices, data)",
         [f"{s}/X?rows={r}:{r + 100}&layout=csr&format=bin" for r in m["row_starts"]]),
        ("obsm", "obsm X_umap, all cells, 2 columns (`format=bin`)",
         [f"{s}/obsm/X_umap?format=bin"]),
    ]


def h5grove_queries(root, m):
    """h5grove's requests for the same selections, grouped: each group is
    one logical request (paths.lua cycles through them in order)."""
    import h5py

    f = "file=matrix.h5ad"
    rows = []
    with h5py.File(os.path.join(root, "matrix.h5ad"), "r") as h5:
        indptr = h5["X/indptr"]
        for r in m["row_starts"]:
            a, b = int(indptr[r]), int(indptr[r + 100])
            rows.append([f"/data?{f}&path=/X/indptr&selection={r}:{r + 101}&format=bin",
                         f"/data?{f}&path=/X/indices&selection={a}:{b}&format=bin",
                         f"/data?{f}&path=/X/data&selection={a}:{b}&format=bin"])
    return {"x_rows": rows, "obsm": [[f"/data?{f}&path=/obsm/X_umap&format=bin"]]}


def column_index_state(base, store):
    _, status, _, body = timed_get(f"{base}/v1/stores/{store}", timeout=60)
    if status != 200:
        return None, None
    x = json.loads(body).get("X") or {}
    ci = x.get("column_index") or {}
    return ci.get("state"), ci.get("bytes")


def run_matrix_store(cfg, root, workdir, store, m):
    st = {}
    srv = start_cellar(cfg, root, workdir, f"matrix-{store}", NO_ANSWER_CACHE)
    try:
        pid = srv.pid()
        queries = matrix_queries(m, store)
        gene_path = queries[0][2][0]
        rss0 = R.read_status_kb(pid, "VmRSS")
        secs, status, headers, body = timed_get(srv.base + gene_path)
        if status != 200:
            raise RuntimeError(f"{store}: gene column answered {status}: {body[:300]!r}")
        st["scan"] = {"seconds": secs, "header": headers.get("X-Column-Index"),
                      "body_bytes": len(body)}
        R.log(f"{store}: first gene column {secs * 1000:.0f} ms, "
              f"X-Column-Index: {st['scan']['header']}")
        t0 = time.time()
        state, nbytes = column_index_state(srv.base, store)
        while state in ("absent", "building") and time.time() - t0 < 1800:
            time.sleep(0.2)
            state, nbytes = column_index_state(srv.base, store)
        st["index"] = {"state": state, "bytes": nbytes, "wait_s": time.time() - t0 + secs,
                       "rss_kb": R.read_status_kb(pid, "VmRSS"), "rss0_kb": rss0}
        R.log(f"{store}: column index {state} after {st['index']['wait_s']:.1f} s, "
              f"{nbytes} bytes")
        secs, status, headers, _ = timed_get(srv.base + gene_path)
        st["indexed"] = {"seconds": secs, "header": headers.get("X-Column-Index")}
        R.reset_peak_rss(pid)
        measure_queries(cfg, workdir, srv, store, st, queries, MATRIX_CONNS,
                        MATRICES_CLIENTS)
        st["hwm_kb"] = R.read_status_kb(pid, "VmHWM")
    finally:
        srv.stop()
    R.log(f"{store}: Python reference (anndata backed)")
    st["python"] = python_ref(["matrix", os.path.join(root, store),
                               os.path.join(root, "manifest.json"),
                               str(max(2.0, cfg["duration"]))])
    return st


def run_matrices(cfg, workdir):
    scale = cfg["scale"]
    root = os.path.join(R.HERE, "data", f"matrix-{scale:g}")
    m = ensure_data("make_matrix.py", root, scale, "MATRIX_VERSION")
    os.chmod(root, 0o755)
    out = {"manifest": m, "stores": {}}
    for store in MATRIX_STORES:
        out["stores"][store] = run_matrix_store(cfg, root, workdir, store, m)
    out["h5grove"] = {}
    if "h5grove" in cfg["refs"]:
        port = R.free_port()
        try:
            srv = R.Server("h5grove", [sys.executable, os.path.join(R.HERE, "h5grove_server.py"),
                                       root, str(port)], "/", port,
                           os.path.join(workdir, "h5grove-matrix.log"))
        except Exception as e:  # noqa: BLE001 - reported, not fatal
            R.log(f"h5grove did not start: {e}")
            srv = None
        if srv:
            try:
                for qid, groups in h5grove_queries(root, m).items():
                    bad = None
                    for p in groups[0]:
                        _, status, _, body = timed_get(srv.base + p)
                        if status != 200:
                            bad = f"HTTP {status}"
                            R.log(f"h5grove {qid}: {p} HTTP {status} {body[:300]!r}")
                    if bad:
                        out["h5grove"][qid] = {"note": bad}
                        continue
                    flat = [p for g in groups for p in g]
                    res = out["h5grove"][qid] = {"per_logical": len(groups[0]),
                                                 "example": groups[0]}
                    measure_clients(cfg, workdir, srv, f"h5grove-{qid}", flat, MATRIX_CONNS,
                                    MATRICES_CLIENTS, res, cpu=False, cycle=True)
            finally:
                srv.stop()
    return matrix_markdown(cfg, out), matrix_targets(out)


def balanced(thread_pct):
    """The two busiest threads (the request threads: the libuv control
    thread idles) share the work, the lesser doing at least a third."""
    busy = sorted(thread_pct, reverse=True)[:2]
    return len(busy) == 2 and busy[1] * 3 >= sum(busy)


def logical_rps(res, k):
    return res["rps"] / k


def matrix_targets(out):
    """The targets under each client, loadgen's rows first; each row names
    its client."""
    return [t for client in MATRICES_CLIENTS for t in client_targets(out, client)]


def h5grove_ratio(out, qid, c, client):
    """cellar's (.h5ad) req/s over h5grove's logical req/s, both under
    client; None when either side is missing."""
    h = out["h5grove"].get(qid) or {}
    q = (out["stores"].get("matrix.h5ad") or {}).get(qid)
    if "per_logical" not in h or not isinstance(q, dict):
        return None
    mine, theirs = client_runs(q, client).get(c), client_runs(h, client).get(c)
    if not mine or not theirs:
        return None
    return mine["rps"] / logical_rps(theirs, h["per_logical"])


def client_targets(out, client):
    t = []
    for store, st in out["stores"].items():
        g = client_runs(st.get("x_gene") or {}, client)
        for c in MATRIX_CONNS:
            if c in g:
                p50 = g[c]["p50_us"] / 1000
                t.append((f"{store}: gene column p50 under 10 ms once indexed ({c} conn.) "
                          f"({client})",
                          p50 < 10 and st["index"]["state"] == "ready",
                          f"{R.fmt_ms(g[c]['p50_us'])} ms (index {st['index']['state']})"))
        if 64 in g:
            runs = [(q, client_runs(st[q], client)[64]) for q in ("x_gene", "x_rows", "obsm")
                    if isinstance(st.get(q), dict) and 64 in client_runs(st[q], client)
                    and "cpu_pct" in client_runs(st[q], client)[64]]
            if runs:
                # The client runs on the same two cores and takes its share, so
                # "both cores" means the work is spread: each request thread
                # does at least a third of cellar's work (none idles while
                # another carries the load).
                t.append((f"{store}: 64 connections use both cores (each request thread does "
                          "at least 1/3 of cellar's CPU, each query; cellar's CPU = threads, "
                          f"machine busy in parentheses) ({client})",
                          all(balanced(r.get("thread_pct", [])) for _, r in runs),
                          ", ".join(f"{q} {r['cpu_pct']:.0f}% = "
                                    f"{'+'.join(str(x) for x in r.get('thread_pct', []))} "
                                    f"({r['machine_pct']:.0f}%)" for q, r in runs)))
    for qid in out["h5grove"]:
        for c in MATRIX_CONNS:
            r = h5grove_ratio(out, qid, c, client)
            if r is not None:
                t.append((f"matrix.h5ad {qid}: >= 20x h5grove's requests/s ({c} conn.) "
                          f"({client})", r >= 20, f"{r:.1f}x"))
    return t


def client_cpu_per_response(res):
    """The client's CPU (user + system) per response, in microseconds."""
    return res["client_cpu_us"] / max(res["requests"], 1)


def client_note(out):
    """Which clients measured the matrices, and why loadgen is the primary one."""
    h5ad = out["stores"].get("matrix.h5ad") or {}
    per, cost = [], []
    for qid in ("x_gene", "x_rows", "obsm"):
        q = h5ad.get(qid) or {}
        r, w = q.get(64), (q.get("wrk") or {}).get(64)
        if r and r.get("requests"):
            per.append(f"{qid} {r['recv_calls'] / r['requests']:.1f}")
        if r and w and "client_cpu_us" in r and "client_cpu_us" in w:
            cost.append(f"{qid} ({q['body_bytes']:,} bytes) {client_cpu_per_response(r):.0f} us "
                        f"against {client_cpu_per_response(w):.0f} us")
    return ("- Clients: issue 5 names wrk, so every query (cellar `.h5ad`, cellar `.zarr`, "
            "h5grove) runs at 1 and 64 connections under both `bench/loadgen` "
            "(`bench/loadgen.c`, built by `bench/run.sh`) and wrk 1 thread "
            "(`bench/wrk/paths.lua`), one client right after the other on the same server; "
            "each client measures both sides of every ratio (cellar and h5grove under the same "
            "client, never mixed). loadgen's numbers are the Queries table above; wrk's are "
            "\"Same queries under wrk\" below, and the targets are checked under each. "
            "loadgen is the primary client because it measures the server, not itself: wrk "
            "(like h2load and ab) reads the socket 8 KiB per recv, so an 800 KB body (a gene "
            "column at BENCH_SCALE=1) costs it ~100 recv calls, and on the two cores it shares "
            "with the server its one thread can reach a full core on these bodies while cellar "
            "has CPU to spare: then the client, not the server, sets the numbers. loadgen "
            "reads up to 1 MiB per recv (the body is still copied out of the kernel, as any "
            "client does): one thread, epoll, keep-alive connections in a closed loop (each "
            "sends its next request when the previous answer is complete), paths drawn at "
            "random with a fixed seed, or cycled in file order for h5grove's groups, as "
            "`bench/wrk/paths.lua` does; latency runs from the request's send to the last byte "
            "of the body. "
            + (f"loadgen's recv calls per response in this run (`.h5ad`, c64): {', '.join(per)}. "
               if per else "")
            + ("Client CPU per response in this run (`.h5ad`, c64), loadgen against wrk: "
               + "; ".join(cost) + "." if cost else ""))


# The wrk table's query names (the Queries table has the long ones).
SHORT_LABELS = {"x_gene": "gene column", "x_rows": "100 cells' rows", "obsm": "obsm X_umap"}


def wrk_markdown(out, labels):
    """The wrk table: the same queries, cellar and h5grove, under wrk."""
    wrk = MATRICES_ALSO[0]
    L = ["### Same queries under wrk", ""]
    L.append(f"| query | server | req/s c1 | p50 ms c1 | req/s c64 | p50 ms c64 | p99 ms c64 "
             f"| ratio to h5grove c1 | c64 | req/s c64 {wrk} / {MATRICES_CLIENT} "
             f"| CPU c64: cellar (machine), {wrk} |")
    L.append("|" + "---|" * 11)

    for qid in ("x_gene", "x_rows", "obsm"):
        rows = [(f"cellar `{store}`", st.get(qid) or {}, 1, store == "matrix.h5ad")
                for store, st in out["stores"].items()]
        h = out["h5grove"].get(qid) or {}
        if "per_logical" in h:
            rows.append((f"h5grove ({h['per_logical']} request(s) each)", h, h["per_logical"],
                         False))
        for server, q, k, ratios in rows:
            runs, prim = client_runs(q, wrk), client_runs(q, MATRICES_CLIENT)
            if "note" in q or not runs:
                continue
            row = f"| {labels[qid]} | {server} |"
            r1, r64 = runs.get(1), runs.get(64)
            row += (f" {logical_rps(r1, k):,.0f} | {R.fmt_ms(r1['p50_us'])} |" if r1
                    else " — | — |")
            row += (f" {logical_rps(r64, k):,.0f} | {R.fmt_ms(r64['p50_us'])} | "
                    f"{R.fmt_ms(r64['p99_us'])} |" if r64 else " — | — | — |")
            for c in MATRIX_CONNS:
                r = h5grove_ratio(out, qid, c, wrk) if ratios else None
                row += f" {r:.1f}x |" if r is not None else " — |"
            p64 = prim.get(64)
            row += (f" {r64['rps'] / max(p64['rps'], 1e-9):.2f} |" if r64 and p64 else " — |")
            cpu = []
            if r64 and "cpu_pct" in r64:
                cpu.append(f"{r64['cpu_pct']:.0f}% ({r64['machine_pct']:.0f}%, "
                           f"steal {r64['steal_pct']:.0f}%)")
            if r64 and "client_pct" in r64:
                cpu.append(f"{wrk} {r64['client_pct']:.0f}%")
            L.append(row + f" {', '.join(cpu) or '—'} |")
    L.append("")
    L.append(f"- Same paths, order, warm-up and duration as loadgen's runs, {wrk} run right "
             "after loadgen at each connection count on the same server process. h5grove's "
             "req/s counts its request groups, as above. The ratio columns are cellar's "
             f"(`.h5ad`) req/s over h5grove's, both under {wrk}. \"req/s c64 {wrk} / "
             f"{MATRICES_CLIENT}\" compares the two clients on the same row. CPU: cellar's, "
             "the machine's busy share and its steal in parentheses (as above; h5grove's own CPU is not "
             f"measured), and {wrk}'s user + system time (this process's children's "
             f"`getrusage` across the {wrk} run), each in percent of one core.")
    return L


def matrix_markdown(cfg, out):
    m = out["manifest"]
    L = []
    L.append(f"Data (`bench/make_matrix.py`, seed {m['seed']}, BENCH_SCALE={m['scale']:g}): "
             f"{m['cells']:,} cells x {m['genes']:,} genes, CSR float32, {m['nnz']:,} "
             f"stored values ({m['nnz'] / m['cells']:.0f} per cell: {m['per_cell']} genes drawn "
             "per cell, duplicates dropped), written block by block with anndata's "
             "`write_elem` + `sparse_dataset(...).append`; `data`/`indices` in chunks of "
             f"{m['chunk']:,} entries (h5ad: uncompressed; zarr v3: shards of {m['shard']:,} "
             "entries, zstd); obsm X_umap float32. Files: "
             + ", ".join(f"`{k}` {v / 1e6:,.0f} MB" for k, v in m["files"].items())
             + ". BENCH_SCALE=1 is 200,000 cells (~195M values); the quick run (0.1) "
             "20,000 cells with the same genes and values per cell (~19.5M values).")
    L.append("")
    L.append("### Column index")
    L.append("")
    L.append("| store | first gene column (scan) | X-Column-Index then | index ready after "
             "| index bytes | RSS before -> after index MB | same gene, indexed | header |")
    L.append("|" + "---|" * 8)
    for store, st in out["stores"].items():
        sc, ix, ie = st["scan"], st["index"], st["indexed"]
        L.append(f"| `{store}` | {fmt_s(sc['seconds'])} | `{sc['header']}` | "
                 f"{ix['wait_s']:.1f} s ({ix['state']}) | "
                 f"{ix['bytes'] / 1e6 if ix['bytes'] else 0:,.0f} MB | "
                 f"{mb(ix['rss0_kb'])} -> {mb(ix['rss_kb'])} | {fmt_s(ie['seconds'])} | "
                 f"`{ie['header']}` |")
    L.append("")
    L.append("The first gene column goes to a freshly started cellar (the store is opened in "
             "it); the index state is then polled from the summary "
             "(`X.column_index.state`) until `ready`; every measured row below runs after that.")
    L.append("")
    L.append(f"### Queries ({MATRICES_CLIENT})")
    L.append("")
    head = "| query | server | body bytes |"
    for c in MATRIX_CONNS:
        head += f" req/s c{c} | p50 ms c{c} | p99 ms c{c} |"
    head += " cellar CPU c64 | ratio to h5grove c1 | c64 | anndata per call | ratio to anndata (c1 p50) |"
    L.append(head)
    L.append("|" + "---|" * (3 + 3 * len(MATRIX_CONNS) + 5))
    labels = {q: lbl for q, lbl, _ in matrix_queries(m, "")}
    for qid in ("x_gene", "x_rows", "obsm"):
        for store, st in out["stores"].items():
            q = st.get(qid) or {}
            if "note" in q:
                L.append(f"| {labels[qid]} | cellar `{store}` | {q['note']} |"
                         + " |" * (3 * len(MATRIX_CONNS) + 5))
                continue
            row = f"| {labels[qid]} | cellar `{store}` | {q.get('body_bytes', '—')} |"
            for c in MATRIX_CONNS:
                r = q.get(c)
                row += (f" {r['rps']:,.0f} | {R.fmt_ms(r['p50_us'])} | {R.fmt_ms(r['p99_us'])} |"
                        if r else " — | — | — |")
            cpu = (q.get(64) or {}).get("cpu_pct")
            client = (f", client {q[64]['client_pct']:.0f}%" if cpu is not None
                      and "client_pct" in q[64] else "")
            row += (f" {cpu:.0f}% = {'+'.join(str(x) for x in q[64].get('thread_pct', []))} "
                    f"(machine {q[64]['machine_pct']:.0f}%, steal {q[64]['steal_pct']:.0f}%"
                    f"{client}) |" if cpu is not None
                    else " — |")
            for c in MATRIX_CONNS:
                r = h5grove_ratio(out, qid, c, MATRICES_CLIENT) if store == "matrix.h5ad" else None
                row += f" {r:.1f}x |" if r is not None else " — |"
            py = st["python"].get(qid)
            if py and 1 in q:
                row += (f" {fmt_s(py['median_s'])} | "
                        f"{py['median_s'] * 1e6 / max(q[1]['p50_us'], 1):.1f}x |")
            else:
                row += " — | — |"
            L.append(row)
        h = out["h5grove"].get(qid)
        if h and "note" in h:
            L.append(f"| {labels[qid]} | h5grove | {h['note']} |" + " |" * (3 * len(MATRIX_CONNS) + 5))
        elif h:
            row = f"| {labels[qid]} | h5grove ({h['per_logical']} request(s) each) | — |"
            for c in MATRIX_CONNS:
                r = h.get(c)
                row += (f" {logical_rps(r, h['per_logical']):,.0f} | {R.fmt_ms(r['p50_us'])} | "
                        f"{R.fmt_ms(r['p99_us'])} |" if r else " — | — | — |")
            L.append(row + " — | — | — | — | — |")
        elif qid == "x_gene":
            L.append(f"| {labels[qid]} | h5grove | not expressible: a CSR column needs all of "
                     "`X/indices` |" + " |" * (3 * len(MATRIX_CONNS) + 5))
    L.append("")
    py = {s: st["python"] for s, st in out["stores"].items()}
    L.append("- cellar runs with `--answer-cache-bytes 0`: every answer is read from the "
             "store (and the column index), none comes from answers kept earlier.")
    L.append("- cellar: genes drawn at random from 256 (seeded), rows from 64 starts "
             "(`rows=s:s+100`); e.g. " + "; ".join(
                 f"`{p[0]}`" for _, _, p in matrix_queries(m, "matrix.h5ad")) + ". CPU is "
             "cellar's user + system time over the measured 64-connection run (from "
             "`/proc/<pid>/stat`), in percent of one core (200% = both cores), split by "
             "thread (`/proc/<pid>/task/*/stat`: the request threads; threads under 1% left "
             "out); in parentheses "
             f"the whole machine's busy share over the same run (`/proc/stat`): cellar, "
             f"{MATRICES_CLIENT} (same two cores) and anything else running, of which steal "
             "is the time the hypervisor gave this VM's cores to other guests (a run with "
             "much steal measures a slower machine), and the client's own CPU (its "
             "`getrusage`).")
    L.append(client_note(out))
    ex = out["h5grove"].get("x_rows", {}).get("example")
    if ex:
        L.append("- h5grove (from PyPI, `bench/h5grove_server.py`, one tornado process) on "
                 "the same `.h5ad`: 100 rows are 3 requests (`X/indptr` slice, then the "
                 "`X/indices` and `X/data` ranges it gives), cycled in order, e.g. "
                 + ", ".join(f"`{p}`" for p in ex) + "; its req/s column counts those "
                 f"3-request groups ({MATRICES_CLIENT}'s req/s / 3), its latencies are per "
                 "request; cellar "
                 "answers the same three arrays in one binary request (`layout=csr&format=bin`: "
                 "indptr | indices | data, see docs/responses.md). "
                 "obsm is one request `/data?file=matrix.h5ad&path=/obsm/X_umap&format=bin`. "
                 "Ratios are cellar's req/s (`.h5ad`) over h5grove's.")
    L.append("- anndata (Python, same run, one call at a time): "
             + "; ".join(f"`{s}` by `{p['how']}` (open {fmt_s(p['open_s'])}, peak RSS "
                         f"{mb(p['rss_kb'])} MB)" for s, p in py.items())
             + ". Gene: `X[:, j].toarray()`; rows: `X[s:s+100]`; obsm: "
             "`anndata.io.read_elem` of `obsm/X_umap`. Median seconds per call; the ratio "
             "is that over cellar's p50 at 1 connection (HTTP included).")
    if MATRICES_ALSO:
        L.append("")
        L += wrk_markdown(out, SHORT_LABELS)
    return "\n".join(L)


# --------------------------------------------------------------------------
# The probe (issue 19)
#
# Before the server opens an HDF5 file version with libhdf5, a child
# `cellar --probe-file FILE` walks it (server/probe.c, storage/hdf5/h5_probe.c).
# This section measures that walk on every HDF5 store the harness makes:
# run directly (wall time, CPU and peak RSS from wait4, what the verdict
# line says it walked), and as it shows in a first request (a fresh cellar
# per request, `--probe 1` as users run it against `--probe 0`, and the
# probe seconds the server itself counts in /metrics).

# (data folder kind, store) of every HDF5 store the harness writes.
PROBE_STORES = (("core", "bench.h5ad"), ("core", "bench.h5mu"), ("core", "bench.h5td"),
                ("trees", "trees.h5td"), ("matrix", "matrix.h5ad"))
# Runs per store: direct probes, and first requests per mode; each times
# BENCH_REPEAT (BENCH_PROBE_RUNS / BENCH_PROBE_FIRST_RUNS override the base).
PROBE_RUNS = 9
PROBE_FIRST_RUNS = 5
# The server's defaults (server/config.c) the targets are checked against.
PROBE_DEFAULT_TIMEOUT_S = 60
PROBE_DEFAULT_MEMORY = 256 << 20
PROBE_DEFAULT_WAIT_S = 10
VERDICT_FIELDS = ("groups", "datasets", "attributes", "strings_read", "bytes_read",
                  "chunk_lookups", "broken", "over_limit")


def probe_roots(cfg):
    """{kind: data folder} for PROBE_STORES, each written once if missing."""
    scale = cfg["scale"]
    roots = {"core": R.ensure_core_data(cfg)[0],
             "trees": os.path.join(R.HERE, "data", f"trees-{scale:g}"),
             "matrix": os.path.join(R.HERE, "data", f"matrix-{scale:g}")}
    ensure_data("make_trees.py", roots["trees"], scale, "TREES_VERSION")
    ensure_data("make_matrix.py", roots["matrix"], scale, "MATRIX_VERSION")
    for r in roots.values():
        os.chmod(r, 0o755)
    return roots


TIME_BIN = "/usr/bin/time"


def spawn_timed(argv, workdir=None):
    """(wall seconds, exit status, output, {"cpu_s", "user_s", "rss_kb"}) of
    one child run.  With GNU time (`/usr/bin/time`) the child is started by
    it: a child forked from this Python process would report this process's
    peak RSS (Linux keeps the larger of the old image's and the new one's
    high-water mark across exec), while time's own is a megabyte or two.
    Without it, wait4's rusage, whose ru_maxrss is then an upper bound."""
    use_time = workdir is not None and os.access(TIME_BIN, os.X_OK)
    stats = os.path.join(workdir, "probe-time.txt") if use_time else None
    full = [TIME_BIN, "-o", stats, "-f", "%M %U %S", *argv] if use_time else argv
    t0 = time.perf_counter()
    p = subprocess.Popen(full, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT)
    out = p.stdout.read()
    _, status, ru = os.wait4(p.pid, 0)
    secs = time.perf_counter() - t0
    p.stdout.close()
    p.returncode = os.waitstatus_to_exitcode(status)
    res = {"cpu_s": ru.ru_utime + ru.ru_stime, "user_s": ru.ru_utime, "rss_kb": ru.ru_maxrss,
           "rss_from": "wait4"}
    if use_time:
        with open(stats) as f:
            last = f.read().strip().splitlines()[-1].split()
        res = {"rss_kb": int(last[0]), "user_s": float(last[1]),
               "cpu_s": float(last[1]) + float(last[2]), "rss_from": "time"}
    return secs, p.returncode, out.decode(errors="replace"), res


def parse_verdict(out):
    """The probe's verdict line: {"verdict": ok|fail|nomem|gone, counts...}."""
    import re
    m = re.search(r"^CELLAR-PROBE (\w+)(.*)$", out, re.M)
    if not m:
        return {"verdict": "none", "detail": out[-300:]}
    v = {"verdict": m.group(1)}
    f = m.group(2).split()
    if v["verdict"] == "ok" and len(f) == 5 + len(VERDICT_FIELDS):
        # dev ino size mtime_sec mtime_nsec, then the walk's counts
        v.update(zip(VERDICT_FIELDS, (int(x) for x in f[5:])))
    elif f:
        v["detail"] = " ".join(f[5:])
    return v


def pctl(xs, q):
    """The q-quantile (0..1) of xs, nearest rank (p50 of 9 runs = the 5th)."""
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, int(round(q * (len(s) - 1)))))]


def direct_probes(cfg, workdir, path, runs):
    """`cellar --probe-file path` run `runs` times after one unmeasured run (the
    file then sits in the page cache, as for a server that just saw it)."""
    argv = [cfg["cellar_bin"], "--probe-file", path]
    spawn_timed(argv, workdir)
    out = []
    for _ in range(runs):
        secs, rc, text, use = spawn_timed(argv, workdir)
        out.append({"seconds": secs, "rc": rc, **use, **parse_verdict(text)})
    return out


def probe_metrics(base):
    """cellar_probe_seconds_total / _max and the ok count from /metrics."""
    _, status, _, body = timed_get(base + "/metrics", timeout=30)
    got = {}
    if status != 200:
        return got
    for line in body.decode().splitlines():
        for key, name in (("seconds_total", "cellar_probe_seconds_total "),
                          ("seconds_max", "cellar_probe_seconds_max "),
                          ("ok", 'cellar_probes_total{outcome="ok"} ')):
            if line.startswith(name):
                got[key] = float(line[len(name):])
    return got


def first_request(cfg, root, workdir, store, probe_on):
    """One GET /v1/stores/{store} on a freshly started cellar.  A 503 (the
    probe outlasted --probe-wait-seconds) is retried every 50 ms, as a
    client honouring Retry-After would, and the time to the 200 kept."""
    extra = () if probe_on else ("--probe", "0")
    srv = start_cellar(cfg, root, workdir, f"probe-{'on' if probe_on else 'off'}", extra)
    try:
        t0 = time.perf_counter()
        n503 = 0
        while True:
            _, status, _, body = timed_get(srv.base + f"/v1/stores/{store}", timeout=600)
            if status != 503 or time.perf_counter() - t0 > 600:
                break
            n503 += 1
            time.sleep(0.05)
        secs = time.perf_counter() - t0
        if status != 200:
            raise RuntimeError(f"{store}: first request answered {status}: {body[:300]!r}")
        res = {"seconds": secs, "n503": n503}
        if probe_on:
            res.update(probe_metrics(srv.base))
        return res
    finally:
        srv.stop()


def run_probe(cfg, workdir):
    repeat = max(cfg.get("repeat", 1), 1)
    runs = R.env_int("BENCH_PROBE_RUNS", PROBE_RUNS) * repeat
    first_runs = R.env_int("BENCH_PROBE_FIRST_RUNS", PROBE_FIRST_RUNS) * repeat
    roots = probe_roots(cfg)
    # The floor of any probe: a process of the same binary started and
    # reaped (`cellar --version`), measured in this run.
    floor = [spawn_timed([cfg["cellar_bin"], "--version"], workdir)
             for _ in range(runs + 1)][1:]
    out = {"runs": runs, "first_runs": first_runs, "stores": {},
           "floor_p50": pctl([f[0] for f in floor], 0.5), "floor_max": max(f[0] for f in floor),
           "floor_rss_kb": max(f[3]["rss_kb"] for f in floor), "rss_from": floor[0][3]["rss_from"]}
    R.log(f"probe: process floor (cellar --version) p50 {out['floor_p50'] * 1000:.1f} ms")
    for kind, store in PROBE_STORES:
        root = roots[kind]
        path = os.path.join(root, store)
        st = out["stores"][store] = {"kind": kind, "bytes": os.path.getsize(path)}
        st["direct"] = direct_probes(cfg, workdir, path, runs)
        d = st["direct"]
        R.log(f"probe {store}: p50 {pctl([r['seconds'] for r in d], 0.5) * 1000:.1f} ms "
              f"max {max(r['seconds'] for r in d) * 1000:.1f} ms, "
              f"rss {max(r['rss_kb'] for r in d)} kB, verdict {d[0]['verdict']}")
        # Probe off and on alternate (off first in even runs, on first in odd
        # ones), so slow drift of the machine falls on both.
        st["off"], st["on"] = [], []
        for i in range(first_runs):
            for on in ((False, True) if i % 2 == 0 else (True, False)):
                st["on" if on else "off"].append(first_request(cfg, root, workdir, store, on))
        R.log(f"probe {store}: first request off p50 "
              f"{pctl([r['seconds'] for r in st['off']], 0.5) * 1000:.1f} ms, on p50 "
              f"{pctl([r['seconds'] for r in st['on']], 0.5) * 1000:.1f} ms, server probe p50 "
              f"{pctl([r.get('seconds_total', 0) for r in st['on']], 0.5) * 1000:.1f} ms")
    return probe_markdown(cfg, out), probe_targets(out)


def ms(s):
    return f"{s * 1000:,.1f}" if s < 10 else f"{s * 1000:,.0f}"


def probe_targets(out):
    t = []
    for store, st in out["stores"].items():
        d = st["direct"]
        bad = [r for r in d if r["verdict"] != "ok" or r.get("broken") or r.get("over_limit")]
        t.append((f"{store}: probe verdict ok, nothing broken or past a walk bound",
                  not bad, "ok" if not bad else
                  f"{bad[0]['verdict']} broken {bad[0].get('broken')} over "
                  f"{bad[0].get('over_limit')} {bad[0].get('detail', '')}"[:120]))
        mx = max(r["seconds"] for r in d)
        t.append((f"{store}: slowest probe under the default --probe-wait-seconds "
                  f"({PROBE_DEFAULT_WAIT_S} s; {PROBE_DEFAULT_TIMEOUT_S} s is the deadline)",
                  mx < PROBE_DEFAULT_WAIT_S, f"{ms(mx)} ms"))
        rss = max(r["rss_kb"] for r in d)
        t.append((f"{store}: probe peak RSS under the default --probe-memory-bytes (256 MiB)",
                  rss * 1024 < PROBE_DEFAULT_MEMORY, f"{mb(rss)} MB"))
        n503 = sum(r["n503"] for r in st["on"])
        t.append((f"{store}: first request with the probe on answered without a 503",
                  n503 == 0, f"{n503} 503s"))
    return t


def probe_markdown(cfg, out):
    L = []
    L.append(f"Every HDF5 store the harness writes, at BENCH_SCALE={cfg['scale']:g}: the core "
             "stores (`bench/make_data.py`), the tree (`make_trees.py`: "
             + ("999,999" if cfg["scale"] >= 1 else f"{int(round(1e6 * cfg['scale'])) - 1:,}")
             + " nodes) and the CSR matrix (`make_matrix.py`). The probe is `cellar --probe "
             "FILE` run directly, the way the server starts it (the file in the page cache "
             f"after one unmeasured run), {out['runs']} times per store; wall time from spawn "
             "to reaping; CPU and peak RSS "
             + ("from GNU time (`/usr/bin/time -f '%M %U %S'`, started in between so the peak "
                "is the probe's own)" if out["rss_from"] == "time" else
                "from `wait4` (no `/usr/bin/time` here: the peak includes this Python "
                "process's, which the child inherits across exec)")
             + ". The reference is a process of the same binary started and reaped (`cellar "
             f"--version`: p50 {ms(out['floor_p50'])} ms, max {ms(out['floor_max'])} ms, "
             f"{mb(out['floor_rss_kb'])} MB peak RSS in this run), and the store's first "
             "request with the probe off (below).")
    L.append("")
    L.append("| store | file MB | probe p50 ms | max ms | p50 / process start | "
             "p50 / first request, probe off | CPU p50 ms | peak RSS MB | groups | datasets "
             "| attributes | strings read | bytes read | chunk lookups |")
    L.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for store, st in out["stores"].items():
        d = st["direct"]
        p50 = pctl([r["seconds"] for r in d], 0.5)
        off = pctl([r["seconds"] for r in st["off"]], 0.5)
        v = d[0]
        counts = " | ".join(f"{v.get(k, '—'):,}" if isinstance(v.get(k), int) else "—"
                            for k in VERDICT_FIELDS[:6])
        L.append(f"| `{store}` | {st['bytes'] / 1e6:,.1f} | {ms(p50)} | "
                 f"{ms(max(r['seconds'] for r in d))} | {p50 / out['floor_p50']:.1f}x | "
                 f"{p50 / off:.2f}x | {ms(pctl([r['cpu_s'] for r in d], 0.5))} | "
                 f"{mb(max(r['rss_kb'] for r in d))} | {counts} |")
    L.append("")
    L.append(f"First request: `GET /v1/stores/{{store}}` on a freshly started cellar "
             f"(`--threads {cfg['threads']}`, `--root` the store's folder), {out['first_runs']} "
             "times with the probe on (the default) and as many with `--probe 0`, alternated; "
             "time from sending the request to the whole 200 answer (a 503 would be retried "
             "every 50 ms and counted). *Server probe* is `cellar_probe_seconds_total` from "
             "that server's /metrics after its one probe (the runner's own clock: fork, exec, "
             "the walk, the verdict read back).")
    L.append("")
    L.append("| store | probe off p50 ms | probe on p50 ms | on / off | added p50 ms | "
             "on max ms | server probe p50 ms | max ms | server probe / direct probe p50 |")
    L.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for store, st in out["stores"].items():
        off = pctl([r["seconds"] for r in st["off"]], 0.5)
        on = pctl([r["seconds"] for r in st["on"]], 0.5)
        sp = [r.get("seconds_total", 0.0) for r in st["on"]]
        direct = pctl([r["seconds"] for r in st["direct"]], 0.5)
        L.append(f"| `{store}` | {ms(off)} | {ms(on)} | {on / off:.2f}x | {ms(on - off)} | "
                 f"{ms(max(r['seconds'] for r in st['on']))} | {ms(pctl(sp, 0.5))} | "
                 f"{ms(max(sp))} | {pctl(sp, 0.5) / direct:.2f}x |")
    L.append("")
    L.append("Ratios are against the reference measured in the same run, on this noisy "
             "2-core VM; `BENCH_REPEAT=n` multiplies the runs (n x "
             f"{PROBE_RUNS} probes, n x {PROBE_FIRST_RUNS} first requests per mode). Peak RSS "
             "is the probe's high-water mark (`ru_maxrss`); the server bounds the child's "
             "resident size (`/proc/PID/statm`, every 10 ms) at `--probe-memory-bytes`. GNU "
             "time reports CPU in 10 ms steps. *process start* is `cellar --version` "
             "(the dynamic libraries, libhdf5's among them, loaded and the process reaped), "
             "which every probe pays before its walk; the p50 of a probe less it is the walk.")
    return "\n".join(L)
