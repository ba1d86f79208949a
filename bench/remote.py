"""The remote section of `make bench` (issue 18's benchmark): an obs slice
and a gene column of the core bench matrix (bench.h5ad, 200,000 cells at
BENCH_SCALE=1, and the same AnnData as bench.zarr) and a 4 MiB zarr chunk,
read from a loopback S3 server (SeaweedFS's `weed mini`, the one the
tests build: CELLAR_WEED) against the same stores on local disk, by two
cellars of the same binary started for each measurement.

Cold: the first request of a freshly started cellar (it opens the store:
for the .h5ad, after the probe, whose reads the server makes for it).
Warm: the same request again, `WARM_RUNS` times, with the answer cache off
(every answer made again, from the zarr chunk cache, the remote byte cache
and the page cache).  GETs: the requests cellar sent to S3 for it
(`cellar_remote_requests_total`, HEADs and listings included).

Beside cellar's remote path, the .h5ad's obs slice and gene column are
read through libhdf5's own read-only S3 driver (ros3, which Debian's
libhdf5 has): bench/ros3_read.c opens the file on the same S3 server and
reads the datasets the answer is made of, cold in a fresh process and
warm with the file kept open; its GETs are counted by a proxy in front of
the server (tests/http/remote_servers.Proxy), in a run of their own."""

import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import time

import run as R
import sections as S

sys.path.insert(0, os.path.join(R.REPO, "tests", "http"))
import remote_servers as RS  # noqa: E402

BUCKET = "bench"
WARM_RUNS = 20
COLD_RUNS = 3
STORES = ("bench.h5ad", "bench.zarr")


def queries(manifest):
    n = manifest["cells"]
    mid = (n // 2) // 100 * 100
    rows = f"{mid}:{mid + 100}"
    cols = "cell_type,n_genes,total_counts"
    out = []
    for store in STORES:
        out.append((f"obs 100 rows x 3 cols ({store})",
                    f"/v1/stores/{store}/obs?rows={rows}&columns={cols}"))
        out.append((f"X one gene column ({store})", f"/v1/stores/{store}/X?var_names=gene_0042"))
    out.append(("zarr key, 4 MiB chunk (bench.zarr)", "/v1/stores/bench.zarr/zarr/obsm/X_pca/c/0/0"))
    return out


def remote_gets(base):
    _, status, _, body = S.timed_get(base + "/metrics", timeout=30)
    for line in body.decode().splitlines():
        if line.startswith("cellar_remote_requests_total "):
            return int(float(line.split()[1]))
    return 0


def get_ok(url):
    seconds, status, _, body = S.timed_get(url)
    if status != 200:
        raise RuntimeError(f"{url}: {status} {body[:300]!r}")
    return seconds, body


def measure(cfg, workdir, name, args, path):
    """(cold seconds list, warm seconds list, GETs of the cold request,
    GETs per warm request, the body)."""
    colds, gets_cold, warm, gets_warm, body = [], [], [], [], None
    for i in range(COLD_RUNS):
        srv = S.start_cellar(cfg, args[0], workdir, f"remote-{name}-{i}",
                             extra=(*args[1:], *S.NO_ANSWER_CACHE))
        try:
            g0 = remote_gets(srv.base)
            seconds, body = get_ok(srv.base + path)
            colds.append(seconds)
            gets_cold.append(remote_gets(srv.base) - g0)
            if i == COLD_RUNS - 1:
                g0 = remote_gets(srv.base)
                for _ in range(WARM_RUNS):
                    seconds, b = get_ok(srv.base + path)
                    assert b == body
                    warm.append(seconds)
                gets_warm = (remote_gets(srv.base) - g0) / WARM_RUNS
        finally:
            srv.stop()
    return colds, warm, gets_cold, gets_warm, body


ROS3_BIN = os.path.join(R.HERE, "data", "bin", "ros3_read")  # built by bench/run.sh
ROS3_WARM_RUNS = 5  # each reads the whole CSR matrix again for a gene column


def h5_reads(h5path, manifest):
    """What the .h5ad's obs slice and gene column are made of, as
    ros3_read specs ("dataset" whole, "dataset:start:count" rows): the obs
    index and three columns over 100 rows (a categorical's codes over the
    rows and its categories whole); the var index (to find the gene) and
    the CSR matrix's indptr, indices and data whole (a column of CSR needs
    every row's indices)."""
    import h5py
    n = manifest["cells"]
    mid = (n // 2) // 100 * 100

    def rows(f, path):
        el = f[path]
        if isinstance(el, h5py.Dataset):
            return [f"{path}:{mid}:100"]
        if el.attrs.get("encoding-type") == "categorical":
            return [f"{path}/codes:{mid}:100", f"{path}/categories"]
        return [f"{path}/{k}:{mid}:100" for k in el]

    def whole(f, path):
        el = f[path]
        return [path] if isinstance(el, h5py.Dataset) else [f"{path}/{k}" for k in el]

    with h5py.File(h5path, "r") as f:
        obs = ["obs/" + f["obs"].attrs["_index"], "obs/cell_type", "obs/n_genes",
               "obs/total_counts"]
        obs_specs = [s for p in obs for s in rows(f, p)]
        gene_specs = whole(f, "var/" + f["var"].attrs["_index"]) + \
            [f"X/{k}" for k in ("indptr", "indices", "data")]
    return {"obs": obs_specs, "gene": gene_specs}


def ros3(url, warm, specs):
    """(cold seconds, bytes libhdf5 read, the cold phase's end on the
    monotonic clock, warm seconds list) of one ros3_read process."""
    out = subprocess.run([ROS3_BIN, url, RS.REGION, RS.ACCESS_KEY, RS.SECRET_KEY, str(warm),
                          *specs], check=True, capture_output=True, text=True, timeout=600).stdout
    cold, warms = None, []
    for line in out.splitlines():
        f = line.split()
        if f[0] == "cold":
            cold = (float(f[1]), int(f[2]), float(f[3]))
        elif f[0] == "warm":
            warms.append(float(f[1]))
    return (*cold, warms)


def measure_ros3(weed, specs):
    """(cold seconds list, warm seconds list, GETs cold, GETs per warm
    read, bytes read): timed against the server directly, GETs counted
    through a proxy in a separate process run."""
    colds, warm, nbytes = [], [], 0
    for i in range(COLD_RUNS):
        c, nbytes, _, w = ros3(f"{weed.endpoint}/{BUCKET}/bench.h5ad",
                               ROS3_WARM_RUNS if i == COLD_RUNS - 1 else 0, specs)
        colds.append(c)
        warm = w or warm
    proxy = RS.Proxy(weed.endpoint).start()
    try:
        _, _, cold_end, _ = ros3(f"{proxy.endpoint}/{BUCKET}/bench.h5ad", 1, specs)
        times = [t for t, *_ in proxy.seen]
    finally:
        proxy.stop()
    gets_cold = sum(1 for t in times if t <= cold_end)
    return colds, warm, gets_cold, len(times) - gets_cold, nbytes


def run_remote(cfg, workdir):
    data_dir, manifest = R.ensure_core_data(cfg)
    wdir = os.path.join(workdir, "weed")
    weed = RS.WeedS3(wdir, os.path.join(workdir, "weed.log")).start()
    rows, targets, h5_rows, cellar_h5 = [], [], [], {}
    try:
        client = RS.S3Client(weed.endpoint)
        client.create_bucket(BUCKET)
        t0 = time.time()
        n = client.upload_tree(BUCKET, "", pathlib.Path(data_dir), list(STORES))
        R.log(f"remote: uploaded {n} objects in {time.time() - t0:.1f} s")
        time.sleep(RS_SETTLE)
        creds = os.path.join(workdir, "aws-credentials")
        with open(creds, "w") as f:
            f.write(f"[default]\naws_access_key_id = {RS.ACCESS_KEY}\n"
                    f"aws_secret_access_key = {RS.SECRET_KEY}\n")
        empty = os.path.join(workdir, "empty-root")
        os.makedirs(empty, exist_ok=True)
        remote_args = (empty, "--root", f"s3://{BUCKET}", "--s3-endpoint", weed.endpoint,
                       "--s3-credentials-file", creds)
        for label, path in queries(manifest):
            lc, lw, _, _, lbody = measure(cfg, workdir, "local", (data_dir,), path)
            rc, rw, gc, gw, rbody = measure(cfg, workdir, "s3", remote_args, path)
            same = lbody == rbody
            R.log(f"remote {label}: cold local {statistics.median(lc) * 1000:.1f} ms, "
                  f"S3 {statistics.median(rc) * 1000:.1f} ms ({gc} GETs); warm local "
                  f"{statistics.median(lw) * 1000:.2f} ms, S3 {statistics.median(rw) * 1000:.2f} ms "
                  f"({gw:.2f} GETs)")
            rows.append(f"| {label} | {len(lbody):,} | {statistics.median(lc) * 1000:.1f} | "
                        f"{statistics.median(rc) * 1000:.1f} | {statistics.median(gc):.0f} | "
                        f"{statistics.median(lw) * 1000:.2f} | {statistics.median(rw) * 1000:.2f} | "
                        f"{gw:.2f} | {statistics.median(rw) / statistics.median(lw):.1f}x |")
            targets.append((f"remote {label}: the S3 answer is the local one byte for byte",
                            same, "equal" if same else "differs"))
            if "(bench.h5ad)" in label:
                cellar_h5["gene" if "gene" in label else "obs"] = (label, rc, rw, gc, gw)
        reads = h5_reads(os.path.join(data_dir, "bench.h5ad"), manifest)
        for what, (label, rc, rw, gc, gw) in cellar_h5.items():
            hc, hw, hgc, hgw, nbytes = measure_ros3(weed, reads[what])
            R.log(f"remote {label} through ros3: cold {statistics.median(hc) * 1000:.1f} ms "
                  f"({hgc} GETs), warm {statistics.median(hw) * 1000:.2f} ms ({hgw:.1f} GETs)")
            h5_rows.append(f"| {label.replace(' (bench.h5ad)', '')} | "
                           f"{statistics.median(rc) * 1000:.1f} | {statistics.median(gc):.0f} | "
                           f"{statistics.median(rw) * 1000:.2f} | {gw:.2f} | "
                           f"{statistics.median(hc) * 1000:.1f} | {hgc} | "
                           f"{statistics.median(hw) * 1000:.2f} | {hgw:.1f} | {nbytes:,} |")
    finally:
        weed.stop()
        shutil.rmtree(wdir, ignore_errors=True)
    body = f"""The same stores read from a loopback S3 server (SeaweedFS `weed mini`,
built by `tests/build_weed.sh`; `--root s3://{BUCKET}`, SigV4-signed) and from
local disk, each measurement on freshly started cellars with the answer
cache off. Cold: the first request of a new cellar ({COLD_RUNS} cellars,
median), which opens the store (the .h5ad after its probe, whose reads the
server makes through the remote byte cache). Warm: the request repeated
{WARM_RUNS} times on the last of them (median). GETs: requests sent to S3
(`cellar_remote_requests_total`: the store's identity HEAD or listing
included); warm requests send none while the store's identity is within
`--remote-recheck-seconds` (10). The local side reads from the page cache.

| request | bytes | local cold (ms) | S3 cold (ms) | S3 GETs, cold | local warm (ms) | S3 warm (ms) | S3 GETs per warm request | S3 / local, warm |
|---|---|---|---|---|---|---|---|---|
{chr(10).join(rows)}

The .h5ad's two requests beside libhdf5's read-only S3 driver (ros3,
libhdf5 {ros3_version()}): `bench/ros3_read.c` opens `bench.h5ad` on the same
server and reads what the answer is made of ({'; '.join(ROS3_WHAT)}), cold in a
fresh process ({COLD_RUNS} processes, median) and warm ({ROS3_WARM_RUNS} times with the
file kept open, median). Its GETs are counted by a proxy in front of the
server in a run of their own (its HEAD included); cellar's columns are the
S3 rows above, whose cold request also probes the file (a process walks all
of it) and opens the store, where ros3_read reads only the datasets.

| request (bench.h5ad) | cellar cold (ms) | cellar GETs, cold | cellar warm (ms) | cellar GETs per warm request | ros3 cold (ms) | ros3 GETs, cold | ros3 warm (ms) | ros3 GETs per warm read | bytes libhdf5 read through ros3 |
|---|---|---|---|---|---|---|---|---|---|
{chr(10).join(h5_rows)}"""
    return body, targets


ROS3_WHAT = ("obs slice: the index and the three columns over the 100 rows, a categorical's "
             "categories whole",
             "gene column: the var index, and the CSR matrix's indptr, indices and data whole, "
             "as a column of CSR needs")


def ros3_version():
    out = subprocess.run(["pkg-config", "--modversion", "hdf5"], capture_output=True, text=True)
    return out.stdout.strip() or "?"


RS_SETTLE = 2.5  # the stores' objects quiet, as storage/remote trusts them (REMOTE_SETTLE_S)
