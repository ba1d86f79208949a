"""The probe process: no HDF5 file reaches libhdf5 in the serving process
before a disposable child has walked it (server/probe.c,
storage/hdf5/h5_probe.c).

Damaged files are made from the committed examples with seeded mutations
(the same procedure found them: `mutate` below); each seed listed crashed
or hung libhdf5 in a walk when it was picked.  A file whose probe crashes,
hangs or outgrows its memory is 422 for that version, remembered, and the
server and every other store keep answering.
"""

from __future__ import annotations

import io
import os
import random
import re
import shutil
import struct
import threading
import time
from pathlib import Path

import h5py
import numpy as np
import pytest

from conftest import REPO

EXAMPLES = REPO / "examples"
SOURCES = ["blood.h5ad", "lineage.h5td", "pbmc_small.h5mu"]
# Seeds of mutate() on which libhdf5 hung (never returned) when they were
# picked, in the probe and in the server; since cellar checks heap ids
# before libhdf5 follows them (storage/hdf5/h5_heap.h) the walk and the
# server's reads stop short of the hang.  The seeds that crashed libhdf5
# (78, 82, 185) and made it allocate 5 GB (121) are walked cleanly now
# too; HEAP_DAMAGE makes files that still crash, hang and outgrow it.
HANGING_SEEDS = [64, 73]
# Seeds of test_malformed.mutate_hdf5 (the corpus of make test-corpus)
# whose global heap libhdf5 reads out of bounds, following heap ids it does
# not check (H5HG_read): valgrind found h0007_zero.h5td copying a vlen
# string attribute past its collection, h0531_flip.h5ad indexing past the
# collection's object table (the corpus crash: the server died in H5Aread
# of "encoding-type" from attrs_load while the probe had passed the file),
# h0594_flip.h5ad the same under H5Dread of a string column.  What such a
# read does depends on the heap around it.  cellar now checks heap ids
# before libhdf5 follows them (storage/hdf5/h5_heap.h), and the probe's
# heap faults where libhdf5 strays anyway (server/probe_heap.h).
STRAYING_SEEDS = [7, 531, 594]


def heap_damaged(kind: str) -> bytes:
    """An AnnData file as anndata 0.6 wrote it (obs and var compound datasets
    with a variable-length string field) whose global heap is damaged under
    the first obs name, where libhdf5 follows it unchecked (cellar checks
    the heap ids of plain strings, not of compound fields):
      hang:   the collection's first object made free space of size 0, so
              libhdf5's collection parser (H5HG__cache_heap_deserialize)
              never moves on;
      crash:  the object and the id 1 MiB long, so libhdf5 copies 1 MiB out
              of a 4 KiB collection (past the probe's guarded buffer);
      memory: the id 3 GiB long, which libhdf5 allocates for the string;
      none:   left as written (the same size as the damaged ones)."""
    vstr = h5py.string_dtype()
    obs = np.array([(f"cell{i}", i) for i in range(10)], dtype=[("index", vstr), ("x", "f8")])
    var = np.array([("g0",), ("g1",)], dtype=[("index", vstr)])
    buf = io.BytesIO()
    with h5py.File(buf, "w") as f:
        f.create_dataset("X", data=np.ones((10, 2), dtype=np.float32))
        f.create_dataset("obs", data=obs)
        f.create_dataset("var", data=var)
    data = bytearray(buf.getvalue())
    gcol = data.find(b"GCOL")
    assert gcol > 0 and data.find(b"GCOL", gcol + 1) < 0
    first = gcol + 16  # the first object, after the collection's header
    assert struct.unpack_from("<H", data, first)[0] == 1
    # obs' first record: its heap id (u32 length, u64 collection, u32 index)
    ref = data.find(struct.pack("<Q", gcol)) - 4
    assert ref > 0 and struct.unpack_from("<I", data, ref + 12)[0] == 1
    if kind == "hang":
        struct.pack_into("<H", data, first, 0)      # index 0: free space
        struct.pack_into("<Q", data, first + 8, 0)  # of size 0
    elif kind == "crash":
        struct.pack_into("<Q", data, first + 8, 1 << 20)
        struct.pack_into("<I", data, ref, 1 << 20)
    elif kind == "memory":
        struct.pack_into("<I", data, ref, 3 << 30)
    elif kind != "none":
        raise ValueError(kind)
    return bytes(data)


# name -> what libhdf5 does on it (heap_damaged)
DAMAGED = {"crash.h5ad": "crash", "hang1.h5ad": "hang", "hang2.h5ad": "hang",
           "memory.h5ad": "memory"}


def mutate(seed: int) -> tuple[str, bytes]:
    """The seeded mutation of one example: bit flips, a zeroed region or a
    truncation.  Returns (example name, damaged bytes)."""
    rnd = random.Random(seed)
    name = SOURCES[seed % 3]
    d = bytearray((EXAMPLES / name).read_bytes())
    kind = rnd.choice(["flip", "zero", "trunc"])
    if kind == "flip":
        for _ in range(rnd.randint(1, 20)):
            i = rnd.randrange(len(d))
            d[i] ^= 1 << rnd.randrange(8)
    elif kind == "zero":
        a = rnd.randrange(len(d))
        b = min(len(d), a + rnd.choice([8, 64, 512, 4096]))
        d[a:b] = bytes(b - a)
    else:
        d = d[: rnd.randrange(len(d))]
    return name, bytes(d)


def metric(server, name: str) -> float:
    text = server.get("/metrics").text
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    raise AssertionError(f"{name} not in /metrics")


def probes(server, outcome: str) -> float:
    return metric(server, f'cellar_probes_total{{outcome="{outcome}"}}')


def assert_problem(r, status: int, *words: str):
    assert r.status_code == status, (r.status_code, r.text[:300])
    assert r.headers["Content-Type"].startswith("application/problem+json")
    body = r.json()
    assert body["status"] == status and body["detail"]
    for w in words:
        assert w in body["detail"], body["detail"]
    return body


@pytest.fixture(scope="module")
def damaged_root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("probe-root")
    for name in SOURCES:
        shutil.copy(EXAMPLES / name, root / name)
    for name, kind in DAMAGED.items():
        (root / name).write_bytes(heap_damaged(kind))
    return root


@pytest.fixture(scope="module")
def probe_server(damaged_root, server_factory):
    return server_factory(damaged_root, "--probe-timeout-seconds", "3", "--probe-concurrency", "2",
                          "--probe-wait-seconds", "0.3", "--probe-memory-bytes", str(512 << 20))


def get_settled(server, path: str, timeout: float = 20.0):
    """GET path until it is no longer 503 (a probe still running), as a
    client honouring Retry-After would."""
    deadline = time.monotonic() + timeout
    while True:
        r = server.get(path)
        if r.status_code != 503 or time.monotonic() > deadline:
            return r
        assert r.headers.get("Retry-After") == "1"
        assert_problem(r, 503, "is being checked")
        time.sleep(0.2)


def test_damaged_files_are_refused_and_the_server_keeps_serving(probe_server):
    s = probe_server
    # A valid store opened first keeps answering while probes crash and hang.
    r = s.get("/v1/stores/blood.h5ad")
    assert r.status_code == 200, r.text
    hung = {}

    def ask(name):
        t0 = time.monotonic()
        r = s.get(f"/v1/stores/{name}")
        hung[name] = (r, time.monotonic() - t0)

    threads = [threading.Thread(target=ask, args=(name,))
               for name, kind in DAMAGED.items() if kind == "hang"]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert len(hung) == 2
    for name, (r, took) in hung.items():
        # A request thread waits --probe-wait-seconds for a hanging probe, no longer.
        assert r.status_code == 503 and took < 2, (name, r.status_code, took)
        assert r.headers.get("Retry-After") == "1"
    # Both probes still hang (deadline 3 s), and request threads are free.
    t0 = time.monotonic()
    r = s.get("/v1/stores/blood.h5ad/obs", columns="cell_type")
    assert r.status_code == 200 and time.monotonic() - t0 < 1.0
    assert s.get("/healthz").status_code == 200
    for name in DAMAGED:
        t0 = time.monotonic()
        r = get_settled(s, f"/v1/stores/{name}")
        # Settled by the probe's deadline (3 s) or memory bound.
        assert time.monotonic() - t0 < 12, (name, time.monotonic() - t0)
        assert r.status_code < 500, (name, r.status_code, r.text[:200])
        if r.status_code != 200:
            assert r.headers["Content-Type"].startswith("application/problem+json")
        assert s.alive()
    # The files do what they were made for: the probes crashed, timed out
    # and outgrew their bound, and the server did not.
    assert probes(s, "crashed") >= 1
    assert probes(s, "timed_out") >= 1
    assert probes(s, "out_of_memory") >= 1
    assert metric(s, "cellar_refused_store_versions") >= 3
    # The server itself never held what the damaged files asked for.
    pid = s.proc.pid
    hwm_kb = int([ln for ln in open(f"/proc/{pid}/status") if ln.startswith("VmHWM")][0].split()[1])
    assert hwm_kb < 300 * 1024, hwm_kb
    # Other stores' first requests wait for their own probes (503 with
    # Retry-After past --probe-wait-seconds 0.3, as on a loaded machine).
    assert get_settled(s, "/v1/stores/lineage.h5td/obst").status_code == 200
    assert get_settled(s, "/v1/stores/pbmc_small.h5mu/mod").status_code == 200


def test_a_refused_version_is_remembered_and_a_new_version_probed_again(damaged_root, probe_server):
    s = probe_server
    name = "crash.h5ad"
    first = get_settled(s, f"/v1/stores/{name}")
    assert first.status_code == 422, f"{name} no longer crashes the probe: {first.text[:200]}"
    before = sum(probes(s, o) for o in ("ok", "unreadable", "crashed", "timed_out", "out_of_memory"))
    body = assert_problem(s.get(f"/v1/stores/{name}/obs"), 422)
    assert assert_problem(s.get(f"/v1/stores/{name}"), 422)["detail"] == first.json()["detail"]
    after = sum(probes(s, o) for o in ("ok", "unreadable", "crashed", "timed_out", "out_of_memory"))
    assert after == before, "a remembered version must not be probed again"
    assert "could not be read safely" in body["detail"] or "corrupt" in body["detail"]
    # Logged once for the version, however often it is asked for.
    for _ in range(3):
        assert_problem(s.get(f"/v1/stores/{name}/var"), 422)
    s.log_lines_since(0)  # the access log flushed: every request so far is in the log
    refusals = [ln for ln in s.log.read_text(errors="replace").splitlines()
                if f"store '{name}' is refused in this version" in ln]
    assert len(refusals) == 1, refusals
    # The file replaced by a good one: a new version, probed and served.
    ok_before = probes(s, "ok")
    tmp = damaged_root / ".replace.tmp"
    shutil.copy(EXAMPLES / "blood.h5ad", tmp)
    tmp.rename(damaged_root / name)
    r = get_settled(s, f"/v1/stores/{name}")
    assert r.status_code == 200, r.text[:300]
    assert r.json()["shape"] == s.get("/v1/stores/blood.h5ad").json()["shape"]
    assert probes(s, "ok") == ok_before + 1


def test_truncated_file_is_the_librarys_reason(damaged_root, probe_server):
    s = probe_server
    data = (EXAMPLES / "blood.h5ad").read_bytes()
    (damaged_root / "short.h5ad").write_bytes(data[:3000])
    assert_problem(get_settled(s, "/v1/stores/short.h5ad"), 422, "truncated or corrupt HDF5 file")
    assert probes(s, "unreadable") >= 1


def test_concurrent_first_requests_share_one_probe(damaged_root, probe_server):
    s = probe_server
    shutil.copy(EXAMPLES / "pbmc_small.h5mu", damaged_root / "fresh.h5mu")
    before = probes(s, "ok")
    results = []

    def ask():
        results.append(get_settled(s, "/v1/stores/fresh.h5mu/mod").status_code)

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert results == [200] * 8
    assert probes(s, "ok") == before + 1


def probe_children(server) -> int:
    """The probe processes the server runs now (its children that exec'd
    cellar --probe)."""
    n = 0
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmd = (d / "cmdline").read_bytes().split(b"\0")
        except (OSError, IndexError, ValueError):
            continue
        if ppid == server.proc.pid and b"--probe-file" in cmd:
            n += 1
    return n


@pytest.mark.parametrize("limit", [1, 2])
def test_at_most_n_probes_at_a_time(tmp_path, server_factory, limit):
    """--probe-concurrency N: three files whose probes hang, asked for at
    once, never have more than N probe processes running together (and do
    have N: the count is seen)."""
    for i in range(3):
        (tmp_path / f"hang{i}.h5ad").write_bytes(heap_damaged("hang"))
    s = server_factory(tmp_path, "--probe-timeout-seconds", "2", "--probe-concurrency", str(limit),
                       "--probe-wait-seconds", "0.1")
    threads = [threading.Thread(target=get_settled, args=(s, f"/v1/stores/hang{i}.h5ad", 30))
               for i in range(3)]
    for t in threads:
        t.start()
    most = 0
    deadline = time.monotonic() + 4
    while time.monotonic() < deadline:
        most = max(most, probe_children(s))
        time.sleep(0.02)
    for t in threads:
        t.join(40)
    assert most == limit, f"{most} probes ran at once with --probe-concurrency {limit}"
    assert probes(s, "timed_out") == 3
    assert s.get("/healthz").status_code == 200


def test_probe_deadline(tmp_path, server_factory):
    """A probe past its deadline is killed: with a deadline shorter than
    any walk, even a valid file is refused, and says why."""
    shutil.copy(EXAMPLES / "blood.h5ad", tmp_path / "blood.h5ad")
    s = server_factory(tmp_path, "--probe-timeout-seconds", "0.001")
    body = assert_problem(s.get("/v1/stores/blood.h5ad"), 422, "could not be read safely",
                          "took longer than 0.001 s")
    assert body["title"]
    assert probes(s, "timed_out") == 1
    assert s.get("/healthz").status_code == 200


def test_probe_memory_bound(tmp_path, server_factory):
    """A walk that needs more memory than --probe-memory-bytes is killed:
    a 200 MB string read whole through libhdf5."""
    path = tmp_path / "big.h5ad"
    with h5py.File(path, "w") as f:
        f.attrs["encoding-type"] = "anndata"
        f.attrs["encoding-version"] = "0.1.0"
        uns = f.create_group("uns")
        uns.attrs["encoding-type"] = "dict"
        uns.attrs["encoding-version"] = "0.1.0"
        # two strings: read through libhdf5 (a single one would be streamed)
        uns.create_dataset("text", data=["x" * (100 << 20), "y" * (100 << 20)],
                           dtype=h5py.string_dtype())
    s = server_factory(tmp_path, "--probe-memory-bytes", str(150 << 20))
    assert_problem(s.get("/v1/stores/big.h5ad"), 422, "could not be read safely", "more than 150 MB")
    assert probes(s, "out_of_memory") == 1
    # With a bound above what it needs the same file is fine.
    s2 = server_factory(tmp_path, "--probe-memory-bytes", str(4 << 30))
    assert s2.get("/v1/stores/big.h5ad").status_code == 200


def rewrite_in_place_keeping_mtime(path: Path, data: bytes):
    """Overwrites path with data of the same size and puts its mtime back
    (as touch -r does): only its ctime tells the rewrite."""
    st = path.stat()
    assert len(data) == st.st_size
    time.sleep(0.02)  # a ctime apart from the last one on any clock granularity
    with open(path, "r+b") as f:
        f.write(data)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    now = path.stat()
    assert (now.st_ino, now.st_size, now.st_mtime_ns) == (st.st_ino, st.st_size, st.st_mtime_ns)
    assert now.st_ctime_ns != st.st_ctime_ns


def test_a_file_rewritten_with_its_mtime_put_back_is_probed_again(tmp_path, server_factory):
    """A file probed and served, then rewritten in place at the same size
    with its mtime put back: libhdf5 must not read the new bytes unprobed
    (the version's identity holds the ctime), and every later version's
    ETag differs from the first's though name, size and mtime are equal."""
    path = tmp_path / "inplace.h5ad"
    path.write_bytes(heap_damaged("none"))
    s = server_factory(tmp_path, "--probe-timeout-seconds", "3")
    first = get_settled(s, "/v1/stores/inplace.h5ad/obs")
    assert first.status_code == 200, first.text[:300]
    rewrite_in_place_keeping_mtime(path, heap_damaged("crash"))
    assert_problem(get_settled(s, "/v1/stores/inplace.h5ad/obs"), 422, "could not be read safely")
    assert s.get("/healthz").status_code == 200
    rewrite_in_place_keeping_mtime(path, heap_damaged("none"))
    again = get_settled(s, "/v1/stores/inplace.h5ad/obs")
    assert again.status_code == 200, again.text[:300]
    assert again.content == first.content
    assert again.headers["ETag"] != first.headers["ETag"], "a rewrite must not reuse an ETag"


def test_no_probe_flag(tmp_path, server_factory):
    shutil.copy(EXAMPLES / "blood.h5ad", tmp_path / "blood.h5ad")
    s = server_factory(tmp_path, "--probe", "0")
    assert s.get("/v1/stores/blood.h5ad").status_code == 200
    assert "cellar_probes_total" not in s.get("/metrics").text


def test_probe_walks_what_the_server_reads(tmp_path):
    """`cellar --probe-file FILE` itself: one verdict line with the file's identity
    and what was walked (strings read through libhdf5, datasets, attributes)."""
    import subprocess

    from conftest import cellar_bin

    path = tmp_path / "strings.h5"
    with h5py.File(path, "w") as f:
        g = f.create_group("obs")
        g.attrs["note"] = "hello"
        g.create_dataset("names", data=np.array([f"c{i}" for i in range(70000)], dtype=object),
                         dtype=h5py.string_dtype())
        g.create_dataset("scaled", data=np.arange(1000, dtype="i4"), scaleoffset=0, chunks=(100,))
        f["obs/again"] = g["names"]  # a hard link: walked once
        f["loop"] = f["obs"]         # a cycle through a hard link to a group
    out = subprocess.run([str(cellar_bin()), "--probe-file", str(path)], capture_output=True, text=True,
                         timeout=30).stdout
    fields = out.split()
    assert fields[:2] == ["CELLAR-PROBE", "ok"], out
    st = path.stat()
    assert [int(x) for x in fields[2:5]] == [st.st_dev, st.st_ino, st.st_size]
    assert int(fields[7]) * 10**9 + int(fields[8]) == st.st_ctime_ns  # a ctime-only rewrite is seen
    groups, datasets, attributes, strings, nbytes, lookups, broken, over = map(int, fields[9:17])
    assert (groups, datasets, strings) == (2, 2, 70000), out
    assert attributes == 1 and broken == 0 and over == 0
    assert nbytes == 4000  # the scale-offset dataset, which direct reads do not take


def probe_verdict(path: Path) -> tuple[int, list[str]]:
    """`cellar --probe path`: its exit status and its verdict line's fields."""
    import subprocess

    from conftest import cellar_bin

    out = subprocess.run([str(cellar_bin()), "--probe-file", str(path)], capture_output=True, text=True,
                         timeout=60)
    line = next((ln for ln in out.stdout.splitlines() if ln.startswith("CELLAR-PROBE ")), "")
    return out.returncode, line.split()


@pytest.mark.parametrize("probe", ["on", "off"])
def test_heap_ids_libhdf5_would_stray_on(tmp_path, server_factory, probe):
    """Files on which libhdf5 reads its global heap out of bounds: the
    probe crashes (its guarded heap) or finishes with the damaged values
    refused; the server, with the probe or without it (heap ids are checked
    in the server too: without the check the sanitizer build's server died
    on h0531 in the full corpus), answers every route with a value or a
    problem and goes on."""
    from test_malformed import mutate_hdf5

    names = []
    for seed in STRAYING_SEEDS:
        src, kind, data = mutate_hdf5(seed)
        name = f"stray{seed}_{kind}{Path(src).suffix}"
        (tmp_path / name).write_bytes(data)
        names.append(name)
        if probe == "on":
            # crashed (the guarded heap), or walked with the damaged values
            # refused: a verdict either way, never a hang
            rc, fields = probe_verdict(tmp_path / name)
            assert rc != 0 or fields[:2] in (["CELLAR-PROBE", "ok"], ["CELLAR-PROBE", "fail"]), \
                (seed, rc, fields)
    shutil.copy(EXAMPLES / "blood.h5ad", tmp_path / "blood.h5ad")
    s = server_factory(tmp_path, "--probe", "1" if probe == "on" else "0",
                       "--probe-timeout-seconds", "20", "--probe-wait-seconds", "30")
    for name in names:
        for route in ("", "/obs", "/var", "/uns", "/X?rows=0:3", "/obsm", "/obst"):
            r = get_settled(s, f"/v1/stores/{name}{route}")
            assert r.status_code < 500, (name, route, r.status_code, r.text[:300])
            if r.status_code >= 400:
                assert_problem(r, r.status_code)
            assert s.alive(), (name, route)
    assert s.get("/v1/stores/blood.h5ad/obs", columns="cell_type").status_code == 200


@pytest.mark.parametrize("probe", ["on", "off"])
def test_heap_ids_checked_in_viewer_routes(tmp_path, server_factory, probe):
    """h5grove's routes (h5web) and the zarr view read attribute and string
    values through their own code (storage/hdf5/h5_grove.c): the heap ids
    are checked there too.  On the hanging seeds' files (a damaged global
    heap) the build before hung libhdf5 inside the server on
    /h5grove/attr/ of /obs with the probe off, and every HDF5 request
    queued behind it; now every route answers a value or a problem."""
    names = []
    for seed in HANGING_SEEDS:
        src, data = mutate(seed)
        names.append(f"hang{seed}{Path(src).suffix}")
        (tmp_path / names[-1]).write_bytes(data)
    from test_malformed import mutate_hdf5
    for seed in STRAYING_SEEDS:
        src, kind, data = mutate_hdf5(seed)
        names.append(f"stray{seed}_{kind}{Path(src).suffix}")
        (tmp_path / names[-1]).write_bytes(data)
    s = server_factory(tmp_path, "--probe", "1" if probe == "on" else "0",
                       "--probe-timeout-seconds", "20", "--probe-wait-seconds", "30")
    for name in names:
        paths = [f"/h5grove/{route}/?file={name}&path={element}"
                 for route in ("attr", "meta", "data", "paths")
                 for element in ("/", "/obs", "/var", "/obs/_index", "/var/_index", "/uns")]
        paths += [f"/v1/stores/{name}/zarr/{key}"
                  for key in (".zmetadata", ".zattrs", "obs/.zattrs", "obs/_index/0", "var/_index/0")]
        for path in paths:
            t0 = time.monotonic()
            r = get_settled(s, path)
            assert time.monotonic() - t0 < 25, path
            assert r.status_code < 500, (path, r.status_code, r.text[:300])
            if r.status_code >= 400:
                assert_problem(r, r.status_code)
            assert s.alive(), path



# A variable-length string datatype as h5py writes it (version 1, class 9:
# sequence type string, size 16) and its base, a 1-byte integer whose size
# is bytes 12..15 of the match.
VLEN_STRING_TYPE = re.compile(rb"\x19..\x00\x10\x00\x00\x00\x10\x00\x00\x00\x01\x00\x00\x00\x00\x00\x08\x00",
                              re.S)


@pytest.mark.parametrize("probe", ["on", "off"])
def test_vlen_strings_of_wide_characters(tmp_path, server_factory, probe):
    """The characters of a variable-length string are one byte; libhdf5
    1.10 trusts the stored size, sizes its conversion buffer as a string's
    length times it and fills it.  test_malformed's h0048_flip.h5ad (a bit
    flipped there: 2**27 + 1 bytes) grew the server to 2.6 GB on
    /h5grove/attr/ of /obs.  Such strings are unreadable now: every route
    answers a value or a problem and the server stays under 300 MB."""
    from test_malformed import vm_hwm_kb

    data = bytearray((EXAMPLES / "blood.h5ad").read_bytes())
    hits = list(VLEN_STRING_TYPE.finditer(data))
    assert len(hits) > 5
    for m in hits:
        data[m.start() + 12:m.start() + 16] = struct.pack("<I", 2**27 + 1)
    name = "wide.h5ad"
    (tmp_path / name).write_bytes(bytes(data))
    shutil.copy(EXAMPLES / "blood.h5ad", tmp_path / "blood.h5ad")
    s = server_factory(tmp_path, "--probe", "1" if probe == "on" else "0",
                       "--probe-timeout-seconds", "20", "--probe-wait-seconds", "30")
    paths = [f"/h5grove/{route}/?file={name}&path={element}"
             for route in ("attr", "meta", "data")
             for element in ("/", "/obs", "/var", "/obs/_index", "/var/_index", "/uns/title")]
    paths += [f"/v1/stores/{name}{route}" for route in ("", "/obs", "/var", "/uns")]
    paths += [f"/v1/stores/{name}/zarr/{key}"
              for key in (".zmetadata", "obs/.zattrs", "obs/cell_type/categories/0", "var/_index/0")]
    for path in paths:
        r = get_settled(s, path)
        assert r.status_code < 500, (path, r.status_code, r.text[:300])
        if r.status_code >= 400:
            assert_problem(r, r.status_code)
        assert s.alive(), path
        assert vm_hwm_kb(s.proc.pid) < 300 * 1024, path
    assert s.get("/v1/stores/blood.h5ad/obs", columns="cell_type").status_code == 200