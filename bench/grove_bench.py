"""The h5grove section of `make bench` (BENCH_ONLY=h5grove) (issue 14, item 2): cellar's
/h5grove/ routes against h5grove itself (PyPI's h5grove 4.0.0, its tornado
app, bench/h5grove_server.py) on the same HDF5 file, the same requests.

- /meta/ of a group of 20 datasets with 20 attributes, and of a chunked
  dataset (what h5web asks when it opens an entity);
- /data/ slices of 100 rows x 500 columns of a float32 matrix stored in
  gzip chunks of 100 rows, as h5web asks for them (format=bin,
  dtype=safe), 19 different slices drawn at random; and the same slices
  as JSON.

Each request's answer is compared between the two first (bytes).  cellar
runs with its answer cache off, so every answer is made anew, as h5grove
makes every answer, and again as it runs by default (answer cache on).
BENCH_REPEAT rounds, each measuring both then h5grove, so outside load
falls on all; each ratio is the median of the rounds' ratios.
"""

import os
import statistics
import sys
import urllib.request

import run as R
import sections as S

FILE = "grove.h5"
ROWS, COLS, CHUNK = 2000, 500, 100
DATA_VERSION = 1


def ensure_data(out_dir):
    path = os.path.join(out_dir, FILE)
    stamp = os.path.join(out_dir, f"version-{DATA_VERSION}")
    if os.path.exists(stamp):
        return path
    import h5py
    import numpy as np
    os.makedirs(out_dir, exist_ok=True)
    rng = np.random.default_rng(14)
    with h5py.File(path, "w") as f:
        f.create_dataset("matrix", data=rng.standard_normal((ROWS, COLS)).astype("f4"),
                         chunks=(CHUNK, COLS), compression="gzip", compression_opts=1)
        g = f.create_group("group")
        for i in range(20):
            g.create_dataset(f"d{i}", data=np.arange(i + 1, dtype="f8"))
            g.attrs[f"a{i}"] = i
    open(stamp, "w").close()
    return path


def start_h5grove(cfg, root, workdir):
    port = R.free_port()
    return R.Server("h5grove", [sys.executable, os.path.join(R.HERE, "h5grove_server.py"), root,
                                str(port)], "/", port, os.path.join(workdir, "h5grove-section.log"))


def get(url):
    with urllib.request.urlopen(url, timeout=60) as r:
        return r.status, r.read()


SCENARIOS = [
    ("meta_group", "/meta of a group (20 datasets, 20 attributes)",
     ["/meta?file=grove.h5&path=/group"]),
    ("meta_dataset", "/meta of a chunked dataset",
     ["/meta?file=grove.h5&path=/matrix"]),
    ("data_bin", "/data slices, 100 x 500 float32, format=bin&dtype=safe (h5web's)",
     [f"/data?file=grove.h5&path=/matrix&selection={r}:{r + 100},0:{COLS}&format=bin&dtype=safe"
      for r in range(0, ROWS - 100, 100)]),
    ("data_json", "/data slices, 100 x 500 float32, JSON",
     [f"/data?file=grove.h5&path=/matrix&selection={r}:{r + 100},0:{COLS}"
      for r in range(0, ROWS - 100, 100)]),
]


def run_h5grove(cfg, workdir):
    out_dir = os.path.join(R.HERE, "data", "h5grove")
    ensure_data(out_dir)
    cellar = S.start_cellar(cfg, out_dir, workdir, "h5grove", extra=S.NO_ANSWER_CACHE)
    cached = S.start_cellar(cfg, out_dir, workdir, "h5grove-cached")
    ref = None
    rows, targets = [], []
    try:
        ref = start_h5grove(cfg, out_dir, workdir)
        for sid, label, paths in SCENARIOS:
            cellar_paths = ["/h5grove" + p.replace("?", "/?", 1) for p in paths]
            for p, q in zip(cellar_paths[:4], paths[:4]):
                a, b = get(cellar.base + p), get(ref.base + q)
                if a != b:
                    raise RuntimeError(f"{p}: cellar and h5grove answer differently "
                                       f"(HTTP {a[0]}, {len(a[1])} bytes; HTTP {b[0]}, {len(b[1])} bytes)")
            files = {}
            sides = (("cellar", cellar, cellar_paths), ("cached", cached, cellar_paths),
                     ("h5grove", ref, paths))
            for side, srv, ps in sides:
                files[side] = os.path.join(workdir, f"paths-h5grove-{sid}-{side}.txt")
                with open(files[side], "w") as f:
                    f.write("".join(p + "\n" for p in ps))
                if cfg["warmup"] > 0:
                    S.run_client("wrk", cfg, srv.base, files[side], cfg["connections"],
                                 cfg["warmup"], False)
            rounds = []
            for _ in range(max(cfg.get("repeat", 1), 1)):
                rounds.append({side: S.measured_run(cfg, srv.base, files[side], cfg["connections"],
                                                    "wrk", srv.pid(), False)
                               for side, srv, _ in sides})
            res = {}
            for side, *_ in sides:
                runs = sorted((r[side] for r in rounds), key=lambda r: r["rps"])
                res[side] = dict(runs[len(runs) // 2], repeat_rps=[round(r[side]["rps"]) for r in rounds])
            h = res["h5grove"]
            for side, how in (("cellar", "answer cache off"), ("cached", "answer cache on (default)")):
                ratio = statistics.median(R.ratio(r[side], r["h5grove"]) or 0.0 for r in rounds)
                c = res[side]
                R.log(f"h5grove {sid} ({how}): cellar {c['repeat_rps']} h5grove {h['repeat_rps']} "
                      f"ratio {ratio:.1f}")
                rows.append(f"| {label}, {how} | {R.fmt_rps(c)} | {R.fmt_ms(c['p50_us'])} | "
                            f"{R.fmt_ms(c['p99_us'])} | {R.fmt_rps(h)} | {R.fmt_ms(h['p50_us'])} | "
                            f"{R.fmt_ms(h['p99_us'])} | **{R.fmt_ratio(ratio)}** |")
                targets.append((f"h5grove {sid}, {how}: at least 50x h5grove's requests/s",
                                ratio >= 50, f"{ratio:.1f}x"))
                targets.append((f"h5grove {sid}, {how}: no errors", c["errors"] + h["errors"] == 0,
                                str(c["errors"] + h["errors"])))
    finally:
        cellar.stop()
        cached.stop()
        if ref:
            ref.stop()
    body = f"""`{FILE}` (`bench/grove_bench.py`: a {ROWS:,} x {COLS} float32 matrix in gzip chunks of
{CHUNK} rows, a group of 20 small datasets with 20 attributes) served by cellar's
`/h5grove/` routes and by h5grove 4.0.0's tornado app (`bench/h5grove_server.py`), the
same requests to both ({cfg['connections']} connections, wrk `bench/wrk/paths.lua`,
a request drawn at random from each row's list; every answer compared byte for
byte first). Two cellars: one with `--answer-cache-bytes 0`, so each answer
is made anew as h5grove's are, and one as it runs by default, whose answer
cache answers a repeated request of an unchanged file without reading it
again (the 19 slices repeat). BENCH_REPEAT rounds, each measuring both
cellars then h5grove; each ratio is the median of the rounds' ratios.

| requests | cellar req/s | p50 (ms) | p99 (ms) | h5grove req/s | p50 (ms) | p99 (ms) | ratio |
|---|---|---|---|---|---|---|---|
{chr(10).join(rows)}"""
    return body, targets
