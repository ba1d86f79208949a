"""The TLS and tokens section of `make bench` (issue 15, points 5 and 6):
the core table's mixed paths (a summary, the modality list, obs slices as
JSON and CSV, obsmap lookups, 1 KiB and 4 MiB zarr chunks), drawn uniformly
by bench/wrk/paths.lua, against one cellar over plain HTTP, one with
--tls-cert/--tls-key (a certificate made for the run with openssl), one with
--auth-file (every request sends its bearer token) and one with both, all
in the same run on the same data.  wrk keeps its connections alive, so TLS
costs its record encryption, not a handshake per request."""

import hashlib
import os
import secrets
import shutil
import subprocess

import run as R
import sections as S


def make_certificate(workdir):
    """A self-signed P-256 certificate for 127.0.0.1, valid for a day."""
    openssl = shutil.which("openssl")
    if not openssl:
        raise RuntimeError("openssl is missing (make deps installs it)")
    cert, key = os.path.join(workdir, "tls.crt"), os.path.join(workdir, "tls.key")
    subprocess.run([openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1", "-subj",
                    "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", key, "-out", cert], check=True, capture_output=True)
    return cert, key


def make_auth_file(workdir):
    """(path, token): a token granted every store, among 99 others granted
    one store each, as a lab's file might hold (the check reads every line)."""
    token = secrets.token_urlsafe(32)
    lines = [f"{hashlib.sha256(secrets.token_urlsafe(32).encode()).hexdigest()} store{i}.h5ad"
             for i in range(99)]
    lines.append(f"{hashlib.sha256(token.encode()).hexdigest()} *")
    path = os.path.join(workdir, "tokens.txt")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return path, token


def measure_interleaved(cfg, workdir, servers, variants, set_name, paths):
    """{variant: result} over paths: after a warm-up of each server, BENCH_REPEAT
    rounds that run every variant once, in turn, so outside load on this
    shared VM falls on all of them alike; each variant keeps its median run,
    and its ratio is the median over rounds of its req/s over plain HTTP's in
    the same round."""
    path_file = os.path.join(workdir, f"paths-deploy-{set_name}.txt")
    with open(path_file, "w") as f:
        f.write("".join(p + "\n" for p in paths))
    conns = cfg["connections"]
    for _, name, _, _, authorization in variants:
        if cfg["warmup"] > 0:
            S.run_client("wrk", cfg, servers[name].base, path_file, conns, cfg["warmup"], False,
                         authorization)
    rounds = []
    for _ in range(max(cfg.get("repeat", 1), 1)):
        rounds.append({name: S.measured_run(cfg, servers[name].base, path_file, conns, "wrk",
                                            servers[name].pid(), False, authorization)
                       for _, name, _, _, authorization in variants})
    out = {}
    for _, name, _, _, _ in variants:
        runs = sorted((r[name] for r in rounds), key=lambda r: r["rps"])
        res = dict(runs[len(runs) // 2])
        ratios = sorted(R.ratio(r[name], r["plain"]) or 0.0 for r in rounds)
        res["ratio"] = ratios[len(ratios) // 2]
        res["repeat_rps"] = [round(r[name]["rps"]) for r in rounds]
        R.log(f"deploy {set_name} {name}: req/s by round {res['repeat_rps']}, "
              f"ratio {res['ratio']:.2f}")
        out[name] = res
    return out


def run_deploy(cfg, workdir):
    _, manifest = R.ensure_core_data(cfg)
    scenarios = R.build_scenarios(manifest, os.path.join(cfg["data_dir"], "bench.zarr"))
    mixed = R.mixed_paths(manifest, scenarios, "cellar")
    # Plain HTTP sends the 4 MiB chunks with sendfile; TLS must encrypt every
    # byte of them, so the small answers alone are measured too.
    path_sets = (("mixed", [p for _, p in mixed]),
                 ("small", [p for kind, p in mixed if kind != "zarr_4m"]))
    cert, key = make_certificate(workdir)
    auth_file, token = make_auth_file(workdir)
    tls = ("--tls-cert", cert, "--tls-key", key)
    auth = ("--auth-file", auth_file)
    variants = (("plain HTTP", "plain", (), "http", None),
                ("TLS", "tls", tls, "https", None),
                ("bearer tokens", "auth", auth, "http", f"Bearer {token}"),
                ("TLS and bearer tokens", "tls-auth", tls + auth, "https", f"Bearer {token}"))
    conns = cfg["connections"]
    servers = {}
    try:
        for _, name, extra, scheme, _ in variants:
            servers[name] = S.start_cellar(cfg, cfg["data_dir"], workdir, name, extra, scheme)
        results = {}
        for set_name, paths in path_sets:
            by_name = measure_interleaved(cfg, workdir, servers, variants, set_name, paths)
            results.update(((name, set_name), r) for name, r in by_name.items())
    finally:
        for srv in servers.values():
            srv.stop()
    rows = []
    for set_name, paths in path_sets:
        for label, name, _, _, _ in variants:
            r = results[name, set_name]
            rows.append(f"| {set_name} ({len(paths)} paths) | {label} | {R.fmt_rps(r)} | "
                        f"{R.fmt_ms(r['p50_us'])} | {R.fmt_ms(r['p99_us'])} | {r['errors']} | "
                        f"**{R.fmt_ratio(r['ratio'])}** |")
    table = "\n".join(rows)
    body = f"""The core mixed row's paths, drawn uniformly ("mixed"), and the same without
its 4 MiB zarr chunks ("small"), {conns} keep-alive connections; each cellar
`--threads {cfg['threads']}`, all four up at once and measured in turn,
BENCH_REPEAT rounds (the ratio is the median over rounds of each round's
req/s over plain HTTP's in that round). TLS: libmicrohttpd's
GnuTLS, a P-256 certificate made for the run (plain HTTP sends chunk files
with sendfile, TLS encrypts every byte). Tokens: `--auth-file` of 100 lines
(a request's token is checked against all of them, in constant time).

| paths | served with | req/s | p50 (ms) | p99 (ms) | errors | ratio to plain HTTP |
|---|---|---|---|---|---|---|
{table}"""
    targets = [(f"{label}, {set_name}: no errors", results[name, set_name]["errors"] == 0,
                str(results[name, set_name]["errors"]))
               for set_name, _ in path_sets for label, name, _, _, _ in variants]
    return body, targets
