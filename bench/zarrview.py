"""The zarr view section of `make bench` (issue 13): chunk keys and a gene
read through cellar's zarr view of an .h5ad against nginx serving the same
data converted to zarr (bench/make_zarrview.py writes both, same chunks).

- Chunk keys: every key of obsm/X_umap (1 KiB chunks; the first 64 rows of
  chunks at larger scales) and of obsm/X_pca (4 MiB chunks), drawn at random
  by bench/wrk/paths.lua, through /v1/stores/view.h5ad/zarr/ and from nginx's
  view.zarr/ (uncompressed on both sides: the view sends HDF5's chunk bytes
  as they are).  The bytes of each key are compared first.  Bare
  libmicrohttpd (bench/mhd_ref.c, cellar's daemon flags and connection
  memory limit) sends the same view.zarr files by sendfile: the ceiling of
  any server built on that library here, so its ratio to nginx says how
  much of the gap is the HTTP library's.
- A gene read as Vitessce makes it (its anndata loader, 4.0.8): through
  /v1/stores/view.h5ad/zarr-csc/, X/indptr, then the chunks of X/data and
  X/indices that hold the gene's column; from nginx, the CSR view.zarr's
  X/indptr and every chunk of X/data and X/indices (a CSR matrix has no
  column slice: Vitessce scans it, vitessce#2565).  One keep-alive
  connection per side (http.client), the chunks fetched in turn; the
  column read through zarr-csc is checked against the h5ad's first.

BENCH_REPEAT rounds, each measuring cellar, nginx and bare libmicrohttpd in
turn, so outside load falls on all; each ratio is the median of the rounds'
ratios.
"""

import http.client
import json
import math
import os
import statistics
import time
import zlib

import numpy as np

import run as R
import sections as S

STORE = "view.h5ad"
VIEW = f"/v1/stores/{STORE}/zarr"
CSC_VIEW = f"/v1/stores/{STORE}/zarr-csc"
REF = "/view.zarr"
UMAP_KEYS = 64  # rows of 1 KiB chunks drawn from, as the core table's zarr_1k


class Client:
    """GETs over one keep-alive connection to 127.0.0.1."""

    def __init__(self, base):
        host, port = base.split("://", 1)[1].split(":")
        self.conn = http.client.HTTPConnection(host, int(port), timeout=600)

    def get(self, path):
        self.conn.request("GET", path)
        r = self.conn.getresponse()
        body = r.read()
        return r.status, body

    def json(self, path):
        status, body = self.get(path)
        if status != 200:
            raise RuntimeError(f"GET {path}: HTTP {status} {body[:300]!r}")
        return json.loads(body)

    def close(self):
        self.conn.close()


def chunk_key(index, meta):
    return meta.get("dimension_separator", ".").join(str(i) for i in index)


def grid(meta):
    return [math.ceil(s / c) for s, c in zip(meta["shape"], meta["chunks"])]


def decode(body, meta):
    """A 1-D chunk of an array without filters, uncompressed or zlib."""
    if meta.get("filters"):
        raise RuntimeError(f"filters {meta['filters']} are not decoded here")
    comp = meta.get("compressor")
    if comp:
        if comp.get("id") not in ("zlib", "gzip"):
            raise RuntimeError(f"compressor {comp} is not decoded here")
        body = zlib.decompress(body, 47 if comp["id"] == "gzip" else 15)
    return np.frombuffer(body, dtype=np.dtype(meta["dtype"]))


def read_1d(client, prefix, meta, lo, hi):
    """Elements lo..hi of a 1-D array, fetching only the chunks that hold
    them: (values, requests, bytes)."""
    c = meta["chunks"][0]
    parts, n_bytes, first = [], 0, lo // c
    last = (hi - 1) // c if hi > lo else first - 1
    for i in range(first, last + 1):
        status, body = client.get(f"{prefix}/{chunk_key((i,), meta)}")
        if status != 200:
            raise RuntimeError(f"GET {prefix}/{i}: HTTP {status}")
        n_bytes += len(body)
        parts.append(decode(body, meta))
    values = np.concatenate(parts) if parts else np.zeros(0, np.dtype(meta["dtype"]))
    return values[lo - first * c: hi - first * c], last - first + 1, n_bytes


def csc_gene_read(client, metas, j):
    """Vitessce's read of column j of a CSC matrix: indptr, then the two
    slices.  (values by row, requests, bytes)."""
    indptr, r0, b0 = read_1d(client, f"{CSC_VIEW}/X/indptr", metas["indptr"], 0, metas["indptr"]["shape"][0])
    lo, hi = int(indptr[j]), int(indptr[j + 1])
    data, r1, b1 = read_1d(client, f"{CSC_VIEW}/X/data", metas["data"], lo, hi)
    rows, r2, b2 = read_1d(client, f"{CSC_VIEW}/X/indices", metas["indices"], lo, hi)
    return (data, rows), r0 + r1 + r2, b0 + b1 + b2


def csr_whole_read(client, metas):
    """The same read of the CSR zarr: indptr and every chunk of data and
    indices (fetched, not decoded).  (requests, bytes)."""
    n_req = n_bytes = 0
    for part in ("indptr", "data", "indices"):
        for i in range(grid(metas[part])[0]):
            status, body = client.get(f"{REF}/X/{part}/{chunk_key((i,), metas[part])}")
            if status != 200:
                raise RuntimeError(f"GET {REF}/X/{part}/{i}: HTTP {status}")
            n_req += 1
            n_bytes += len(body)
    return n_req, n_bytes


def chunk_paths(meta, prefix, max_rows=None):
    rows, cols = grid(meta)
    rows = min(rows, max_rows) if max_rows else rows
    return [f"{prefix}/{chunk_key((r, c), meta)}" for r in range(rows) for c in range(cols)]


def measure_keys(cfg, workdir, name, sides):
    """sides: [(label, server, paths, cpu_pid)].  After a warm-up of each,
    BENCH_REPEAT rounds running every side in turn; each side keeps its
    median run; ratio_<label>, the first side's to each other's, and with
    three sides ratio_<third>_<second>, are medians of the rounds' ratios."""
    files = {}
    conns = cfg["connections"]
    for label, srv, paths, _ in sides:
        files[label] = os.path.join(workdir, f"paths-zarrview-{name}-{label}.txt")
        with open(files[label], "w") as f:
            f.write("".join(p + "\n" for p in paths))
        if cfg["warmup"] > 0:
            S.run_client("wrk", cfg, srv.base, files[label], conns, cfg["warmup"], False)
    rounds = [{label: S.measured_run(cfg, srv.base, files[label], conns, "wrk", pid, False)
               for label, srv, _, pid in sides} for _ in range(max(cfg.get("repeat", 1), 1))]
    out = {}
    for label, *_ in sides:
        runs = sorted((r[label] for r in rounds), key=lambda r: r["rps"])
        out[label] = dict(runs[len(runs) // 2], repeat_rps=[round(r[label]["rps"]) for r in rounds])
    first = sides[0][0]
    for label, *_ in sides[1:]:
        out[f"ratio_{label}"] = statistics.median(R.ratio(r[first], r[label]) or 0.0 for r in rounds)
    if len(sides) > 2:  # the second side against the third
        b, c = sides[1][0], sides[2][0]
        out[f"ratio_{c}_{b}"] = statistics.median(R.ratio(r[c], r[b]) or 0.0 for r in rounds)
    R.log(f"zarrview {name}: " + " ".join(f"{label} {out[label]['repeat_rps']}" for label, *_ in sides)
          + " ratios " + " ".join(f"{k[6:]} {v:.2f}" for k, v in out.items() if k.startswith("ratio_")))
    return out


def same_bytes(cellar, nginx, cellar_paths, nginx_paths, limit=8):
    """The first keys of both sides, byte for byte."""
    a, b = Client(cellar.base), Client(nginx.base)
    try:
        for p, q in list(zip(cellar_paths, nginx_paths))[:limit]:
            sa, ba = a.get(p)
            sb, bb = b.get(q)
            if sa != 200 or sb != 200 or ba != bb:
                return f"{p}: HTTP {sa}, {len(ba)} bytes; {q}: HTTP {sb}, {len(bb)} bytes"
    finally:
        a.close()
        b.close()
    return None


def unavailable_body(detail):
    return (f"The zarr view of HDF5 stores answered `GET {VIEW}/.zattrs` with {detail}: "
            f"{R.NOT_AVAILABLE}; nothing was measured."), [("the zarr view answers", False, detail)]


def run_zarrview(cfg, workdir):
    out_dir = os.path.join(R.HERE, "data", f"zarrview-{cfg['scale']:g}")
    m = S.ensure_data("make_zarrview.py", out_dir, cfg["scale"], "ZARRVIEW_VERSION")
    cellar = S.start_cellar(cfg, out_dir, workdir, "zarrview")
    nginx = mhd = None
    try:
        probe = Client(cellar.base)
        status, body = probe.get(f"{VIEW}/.zattrs")
        if status != 200:
            probe.close()
            return unavailable_body(f"HTTP {status} {body[:200].decode(errors='replace')!r}")
        nginx = R.start_nginx(dict(cfg, data_dir=out_dir), workdir)
        ref = Client(nginx.base)
        bodies = os.path.join(workdir, "zarrview-mhd-bodies")
        os.makedirs(bodies, exist_ok=True)
        mhd = R.start_mhd(cfg, workdir, bodies, cfg["pool_kib"], "bare libmicrohttpd (zarrview)",
                          files=os.path.join(out_dir, REF.strip("/")))
        rows, targets = [], []
        for label, key in (("1 KiB", "obsm/X_umap"), ("4 MiB", "obsm/X_pca")):
            vm, zm = probe.json(f"{VIEW}/{key}/.zarray"), ref.json(f"{REF}/{key}/.zarray")
            if vm["chunks"] != zm["chunks"]:
                raise RuntimeError(f"{key}: the view's chunks {vm['chunks']} are not the zarr's {zm['chunks']}")
            max_rows = UMAP_KEYS if key.endswith("umap") else None
            vp, zp = chunk_paths(vm, f"{VIEW}/{key}", max_rows), chunk_paths(zm, f"{REF}/{key}", max_rows)
            mp = ["/file" + q[len(REF):] for q in zp]
            diff = same_bytes(cellar, nginx, vp, zp) or same_bytes(nginx, mhd, zp, mp)
            if diff:
                raise RuntimeError(f"{key}: the view and the zarr differ: {diff}")
            chunk_bytes = int(np.prod(vm["chunks"])) * np.dtype(vm["dtype"]).itemsize
            res = measure_keys(cfg, workdir, key.replace("/", "_"),
                               [("cellar", cellar, vp, cellar.pid()), ("nginx", nginx, zp, None),
                                ("mhd", mhd, mp, None)])
            c, n, b = res["cellar"], res["nginx"], res["mhd"]
            ratio = res["ratio_nginx"]
            rows.append(f"| {label} chunks (`{key}`, {chunk_bytes:,} bytes, {len(vp)} keys) | "
                        f"{R.fmt_rps(c)} | {R.fmt_ms(c['p50_us'])} | {R.fmt_ms(c['p99_us'])} | "
                        f"{R.fmt_rps(n)} | {R.fmt_ms(n['p50_us'])} | {R.fmt_ms(n['p99_us'])} | "
                        f"**{R.fmt_ratio(ratio)}** | {R.fmt_rps(b)} | "
                        f"{R.fmt_ratio(res['ratio_mhd_nginx'])} | {R.fmt_ratio(res['ratio_mhd'])} |")
            errors = c["errors"] + n["errors"] + b["errors"]
            targets.append((f"view chunk keys, {label}: at least 0.9x nginx", ratio >= 0.9,
                            f"{ratio:.2f}x (bare libmicrohttpd: {res['ratio_mhd_nginx']:.2f}x)"))
            targets.append((f"view chunk keys, {label}: no errors", errors == 0, str(errors)))

        # The gene read.
        csc = {p: probe.json(f"{CSC_VIEW}/X/{p}/.zarray") for p in ("indptr", "data", "indices")}
        csr = {p: ref.json(f"{REF}/X/{p}/.zarray") for p in ("indptr", "data", "indices")}
        enc = probe.json(f"{CSC_VIEW}/X/.zattrs").get("encoding-type")
        if enc != "csc_matrix":
            raise RuntimeError(f"{CSC_VIEW}/X is {enc}, not csc_matrix")
        first = Client(cellar.base)
        t0 = time.perf_counter()
        csc_gene_read(first, csc, m["read_gene_index"][0])
        first_s = time.perf_counter() - t0
        first.close()
        import anndata as ad  # the bench venv's, to check the columns
        want_x = ad.read_h5ad(os.path.join(out_dir, STORE)).X.tocsc()
        for j in m["read_gene_index"]:
            (data, rows_), _, _ = csc_gene_read(probe, csc, j)
            want = want_x[:, j].toarray().ravel()
            got = np.zeros(m["cells"], dtype=want.dtype)
            got[rows_.astype(np.int64)] = data
            if not np.array_equal(got, want):
                raise RuntimeError(f"zarr-csc column {j} differs from the h5ad's")
        del want_x
        view_t, ref_t, ratios = [], [], []
        view_req = view_bytes = ref_req = ref_bytes = 0
        for _ in range(max(cfg.get("repeat", 1), 1)):
            vt = []
            for j in m["read_gene_index"]:
                t0 = time.perf_counter()
                _, view_req, view_bytes = csc_gene_read(probe, csc, j)
                vt.append(time.perf_counter() - t0)
            rt = []
            for _ in m["read_gene_index"]:
                t0 = time.perf_counter()
                ref_req, ref_bytes = csr_whole_read(ref, csr)
                rt.append(time.perf_counter() - t0)
            view_t.append(statistics.median(vt))
            ref_t.append(statistics.median(rt))
            ratios.append(ref_t[-1] / view_t[-1])
            R.log(f"zarrview gene read: zarr-csc {view_t[-1] * 1000:.2f} ms, "
                  f"CSR via nginx {ref_t[-1] * 1000:.1f} ms, {ratios[-1]:.0f}x")
        probe.close()
        ref.close()
        ratio = statistics.median(ratios)
        gene_rows = [
            f"| through `zarr-csc/` (cellar) | {S.fmt_s(statistics.median(view_t))} | {view_req} | "
            f"{S.mbb(view_bytes)} | **{ratio:,.0f}x** faster |",
            f"| CSR `view.zarr` (nginx) | {S.fmt_s(statistics.median(ref_t))} | {ref_req} | "
            f"{S.mbb(ref_bytes)} | 1x |",
        ]
        targets.append(("gene read through zarr-csc faster than the CSR read from nginx", ratio > 1,
                        f"{ratio:,.0f}x"))
    finally:
        cellar.stop()
        if nginx:
            nginx.stop()
        if mhd:
            mhd.stop()
    genes = ", ".join(m["read_genes"])
    body = f"""`{STORE}` ({m['cells']:,} cells x {m['genes']:,} genes, {m['nnz']:,} stored values in a
CSR X; `bench/make_zarrview.py`) through cellar's zarr view, against nginx serving
`view.zarr`, the same AnnData converted by anndata.write_zarr with the same chunks,
uncompressed on both sides; the bytes of every key compared first. Bare
libmicrohttpd (`bench/mhd_ref.c`: cellar's daemon flags and
{cfg['pool_kib']} KiB connection memory limit, a file opened per request and
sent by sendfile) serves the same `view.zarr` files: no server built on
that library goes faster here. BENCH_REPEAT rounds, cellar, nginx and bare
libmicrohttpd in turn in each; each ratio is the median of the rounds' ratios.

Chunk keys ({cfg['connections']} connections, wrk `bench/wrk/paths.lua`, keys at random):

| keys | cellar req/s | p50 (ms) | p99 (ms) | nginx req/s | p50 (ms) | p99 (ms) | cellar / nginx | bare libmicrohttpd req/s | libmicrohttpd / nginx | cellar / libmicrohttpd |
|---|---|---|---|---|---|---|---|---|---|---|
{chr(10).join(rows)}

One gene read as Vitessce's anndata loader makes it: through `zarr-csc/`, `X/indptr`
then the chunks of `X/data` and `X/indices` that hold the gene's column (checked
against the h5ad's column); from the CSR zarr, `X/indptr` and every chunk of
`X/data` and `X/indices`, as Vitessce must scan a CSR matrix (vitessce#2565). One
keep-alive connection per side, chunks fetched in turn (http.client); median over
the genes {genes}.
The first read on a fresh cellar, which builds the column index, took {S.fmt_s(first_s)}.

| gene read | time | requests | MB | ratio |
|---|---|---|---|---|
{chr(10).join(gene_rows)}"""
    return body, targets
