"""The Taxonium section of `make bench` (issue 14, item 3's benchmark):
Taxonium's `nodes/` on the tree section's bench tree (bench/make_trees.py:
999,999 nodes at BENCH_SCALE=1), `trees.h5td` and `trees.zarr`, as
taxonium-component asks for it: the whole tree (its first request, no
bounds) and zoomed boxes (a twentieth of the y range with the client's
padding of one view on each side, whole x, 32 boxes down the tree), plus
`config/` and a name search.  wrk (bench/wrk/paths.lua) at 1 connection
and BENCH_CONNECTIONS, cellar's answer cache off so that every answer is
made from the tree index.  Target: nodes/ p50 under 20 ms at 1 connection."""

import json
import os
import urllib.parse

import run as R
import sections as S

STORES = ("trees.h5td", "trees.zarr")
ZOOM_BOXES = 32
ZOOM_FRACTION = 20


def queries(extent, manifest):
    """(id, label, paths below the taxonium prefix) for one store."""
    max_x, max_y = extent
    view = max_y / ZOOM_FRACTION
    zooms = []
    for k in range(ZOOM_BOXES):
        y = view + (max_y - 3 * view) * k / (ZOOM_BOXES - 1)
        zooms.append(f"nodes/?type=leaves&sid=bench&min_x={-max_x / 2:g}&max_x={1.5 * max_x:g}"
                     f"&min_y={y - view:.4f}&max_y={y + 2 * view:.4f}&xType=x_dist")
    spec = json.dumps(json.dumps({"key": "bench", "type": "name", "method": "text_match",
                                  "text": manifest["leaves"][0][-4:]}))
    return [
        ("nodes_whole", "nodes/, the whole tree (the client's first request)",
         ["nodes/?type=leaves&sid=bench&xType=x_dist"]),
        ("nodes_zoom", f"nodes/, zoomed boxes (1/{ZOOM_FRACTION} of y and its padding)", zooms),
        ("config", "config/", ["config/?sid=bench"]),
        ("search", "search/, a name (text_match over every node)",
         [f"search/?json={urllib.parse.quote(spec)}&sid=bench&xType=x_dist"]),
    ]


def extent(base, prefix):
    _, status, _, body = S.timed_get(base + prefix + "config/?sid=bench")
    if status != 200:
        raise RuntimeError(f"{prefix}config/: HTTP {status} {body[:300]!r}")
    c = json.loads(body)
    return c["overallMaxX"], c["overallMaxY"], c["num_nodes"]


def run_taxonium(cfg, workdir):
    scale = cfg["scale"]
    root = os.path.join(R.HERE, "data", f"trees-{scale:g}")
    m = S.ensure_data("make_trees.py", root, scale, "TREES_VERSION")
    os.chmod(root, 0o755)
    conns = sorted({1, cfg["connections"]})
    out = {"manifest": m, "stores": {}, "conns": conns}
    for store in STORES:
        st = out["stores"][store] = {}
        srv = S.start_cellar(cfg, root, workdir, f"taxonium-{store}", S.NO_ANSWER_CACHE)
        try:
            prefix = f"/v1/stores/{store}/obst/lineage/taxonium/"
            seconds, status, _, _ = S.timed_get(srv.base + prefix + "config/?sid=bench")
            st["first_s"] = seconds
            max_x, max_y, n = extent(srv.base, prefix)
            st["extent"] = (max_x, max_y)
            qs = queries((max_x, max_y), m)
            mine = [(qid, label, [prefix + p for p in paths]) for qid, label, paths in qs]
            for qid, _, paths in mine:
                if qid.startswith("nodes"):
                    _, _, _, body = S.timed_get(srv.base + paths[0])
                    st[qid + "_nodes"] = len(json.loads(body)["nodes"])
            S.measure_queries(cfg, workdir, srv, store, st, mine, conns, (S.TREES_CLIENT,))
            for qid, _, _ in mine:
                if qid + "_nodes" in st and qid in st:
                    st[qid]["nodes"] = st.pop(qid + "_nodes")
        finally:
            srv.stop()
    out["queries"] = qs
    return markdown(cfg, out), targets(out)


def targets(out):
    t = []
    for store, st in out["stores"].items():
        for qid in ("nodes_whole", "nodes_zoom"):
            q = st.get(qid) or {}
            if 1 not in q:
                t.append((f"{store}: Taxonium {qid}, p50 under 20 ms (1 conn.)", False,
                          q.get("note", "not measured")))
                continue
            p50 = q[1]["p50_us"] / 1000
            t.append((f"{store}: Taxonium {qid.replace('_', ' ')}, p50 under 20 ms (1 conn.)",
                      p50 < 20, f"{R.fmt_ms(q[1]['p50_us'])} ms"))
    return t


def cpu_ms(r):
    """cellar's CPU time per answer at 1 connection (its CPU share over the
    run divided by the answers): on a VM whose cores other work shares, the
    cost of an answer, where the p50 also holds the waits for a core."""
    if not r or "cpu_pct" not in r or not r.get("rps"):
        return "—"
    return f"{r['cpu_pct'] / 100 / r['rps'] * 1000:.1f}"


def markdown(cfg, out):
    m = out["manifest"]
    L = []
    L.append(f"Data: the tree section's tree (`bench/make_trees.py`, seed {m['seed']}), "
             f"{m['n_nodes']:,} nodes, {m['n_leaves']:,} leaves, served as "
             "`/v1/stores/{store}/obst/lineage/taxonium/`; the obs column `clone` is "
             "`meta_clone` on the leaves. Answer cache off: every answer is made from the "
             "tree index (a repeated view is answered from the cache, faster).")
    L.append("")
    head = "| query | store | nodes in the answer | body bytes | cellar CPU ms per answer c1 |"
    for c in out["conns"]:
        head += f" req/s c{c} | p50 ms c{c} | p99 ms c{c} |"
    L.append(head + " errors |")
    L.append("|" + "---|" * (6 + 3 * len(out["conns"])))
    for qid, label, paths in out["queries"]:
        for store, st in out["stores"].items():
            q = st.get(qid) or {}
            if "note" in q:
                L.append(f"| {label} | `{store}` | {q['note']} |" + " |" * (3 + 3 * len(out["conns"])))
                continue
            row = (f"| {label} ({len(paths)} path{'s' if len(paths) > 1 else ''}) | `{store}` | "
                   f"{q.get('nodes', '—')} | {q.get('body_bytes', '—')} | {cpu_ms(q.get(1))} |")
            cells, errors = S.conn_cells(q, out["conns"])
            L.append(row + cells + f" {errors} |")
    L.append("")
    L.append("cellar CPU ms per answer: cellar's CPU share over the 1-connection run divided "
             "by its answers, the cost of one answer on a core of its own; the p50 also holds "
             "the time the answer waited for a core on this shared VM (the machine's load is "
             "in the header).")
    L.append("")
    L.append("Nodes in the answer: of the first path (the whole tree; the first zoomed box). "
             "`nodes/` thins a box to 2000 bins along y plus their ancestors "
             "(`storage/trees/tree_thin.h`); the zoomed boxes are what taxonium-component asks "
             "when the view shows a twentieth of the tree (its box is the view and one view "
             "more on each side).")
    return "\n".join(L)
