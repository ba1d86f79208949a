"""The replicas section of `make bench` (issue 15, point 4): the paths of
the core table's mixed row (a summary, the modality list, obs slices as
JSON and CSV, obsmap lookups, 1 KiB and 4 MiB zarr chunks), drawn
uniformly by bench/wrk/paths.lua, through HAProxy over three cellar replicas
on one data root, against the same load on one replica directly, in the
same run.  On this 2-core VM the replicas, HAProxy and wrk share two
cores, so the ratio is what the balancer costs, not what replicas gain."""

import os
import shutil
import subprocess

import run as R
import sections as S

REPLICAS = 3
HAPROXY_CFG = """\
global
    maxconn 4096
    nbthread 1
defaults
    mode http
    timeout connect 1s
    timeout client 30s
    timeout server 30s
    retries 3
    option redispatch 1
    retry-on conn-failure empty-response response-timeout
    option httpchk GET /readyz
    default-server inter 1s fall 2 rise 1 check
frontend front
    bind 127.0.0.1:{port}
    default_backend cellars
backend cellars
    balance roundrobin
{servers}
"""


def start_haproxy(workdir, replicas):
    haproxy = shutil.which("haproxy") or "/usr/sbin/haproxy"
    if not os.access(haproxy, os.X_OK):
        raise RuntimeError("haproxy is missing (make deps installs it)")
    port = R.free_port()
    servers = "\n".join(f"    server r{i} 127.0.0.1:{r.port}" for i, r in enumerate(replicas))
    conf = os.path.join(workdir, "haproxy.cfg")
    with open(conf, "w") as f:
        f.write(HAPROXY_CFG.format(port=port, servers=servers))
    subprocess.run([haproxy, "-c", "-q", "-f", conf], check=True)
    return R.Server("haproxy", [haproxy, "-db", "-f", conf], "/healthz", port,
                    os.path.join(workdir, "haproxy.log"))


def run_replicas(cfg, workdir):
    _, manifest = R.ensure_core_data(cfg)
    scenarios = R.build_scenarios(manifest, os.path.join(cfg["data_dir"], "bench.zarr"))
    paths = [p for _, p in R.mixed_paths(manifest, scenarios, "cellar")]
    replicas, proxy = [], None
    try:
        for i in range(REPLICAS):
            replicas.append(S.start_cellar(cfg, cfg["data_dir"], workdir, f"replica{i}"))
        proxy = start_haproxy(workdir, replicas)
        conns = cfg["connections"]
        direct = S.load_paths(cfg, workdir, replicas[0].base, "replica-direct", paths, conns,
                              "wrk")
        balanced = S.load_paths(cfg, workdir, proxy.base, "replicas-haproxy", paths, conns,
                                "wrk")
    finally:
        for s in ([proxy] if proxy else []) + replicas:
            s.stop()
    ratio = R.ratio(balanced, direct)
    body = f"""The core mixed row's {len(paths)} paths, drawn uniformly, {conns} connections.
HAProxy 1 thread, round robin, health checks on `/readyz`; each replica
`--threads {cfg['threads']}`.

| served by | req/s | p50 (ms) | p99 (ms) | errors |
|---|---|---|---|---|
| one replica, direct | {R.fmt_rps(direct)} | {R.fmt_ms(direct['p50_us'])} | {R.fmt_ms(direct['p99_us'])} | {direct['errors']} |
| HAProxy over {REPLICAS} replicas | {R.fmt_rps(balanced)} | {R.fmt_ms(balanced['p50_us'])} | {R.fmt_ms(balanced['p99_us'])} | {balanced['errors']} |

Through HAProxy / direct: **{R.fmt_ratio(ratio)}** (all processes share the
machine's {os.cpu_count()} cores: the balancer's cost, not the replicas' gain)."""
    targets = [("no errors through HAProxy", balanced["errors"] == 0 and direct["errors"] == 0,
                f"{balanced['errors']} / {direct['errors']}")]
    return body, targets
