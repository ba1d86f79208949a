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
(`cellar_remote_requests_total`, HEADs and listings included)."""

import os
import pathlib
import shutil
import statistics
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


def run_remote(cfg, workdir):
    data_dir, manifest = R.ensure_core_data(cfg)
    wdir = os.path.join(workdir, "weed")
    weed = RS.WeedS3(wdir, os.path.join(workdir, "weed.log")).start()
    rows, targets = [], []
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
{chr(10).join(rows)}"""
    return body, targets


RS_SETTLE = 2.5  # the stores' objects quiet, as storage/remote trusts them (REMOTE_SETTLE_S)
