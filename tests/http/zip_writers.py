"""Zip store fixtures for tests/http/test_zip_stores.py.

Good stores come from the real writers: anndata's write_zarr on a
zarr.storage.ZipStore (zarr formats 2 and 3), and directory stores (from
the same objects) zipped with Python's zipfile, stored and deflated, at the
zip's root or in one top folder, with zip64 records forced.  Every zip store
has its directory twin, which the tests compare it with.

Bad zips (issue 17, item 4) are good ones edited with struct: the fields of
the central directory, the local headers and the end records, rewritten in
place or rebuilt, so each holds exactly one lie.
"""

from __future__ import annotations

import os
import struct
import warnings
import zipfile
from dataclasses import dataclass
from pathlib import Path

import anndata as ad
import mudata as md
import zarr

import zarr_writers as Z

CEN = struct.Struct("<IHHHHHHIIIHHHHHII")   # central header, 46 bytes
LOC = struct.Struct("<IHHHHHIIIHH")         # local header, 30 bytes
EOCD = struct.Struct("<IHHHHIIH")           # end of central directory, 22 bytes
EOCD64 = struct.Struct("<IQHHIIQQQQ")       # zip64 end record, 56 bytes
LOC64 = struct.Struct("<IIQI")              # zip64 locator, 20 bytes


@dataclass(frozen=True)
class ZipStore:
    name: str         # the zip's name under the root
    twin: str         # its directory twin
    kind: str         # anndata | mudata | treedata
    how: str          # what wrote it
    zarr_format: int


# directory twins
AD_V2_DIR = "ad_v2.zarr"
AD_V3_DIR = "ad_v3.zarr"            # sharded
TD_V3_DIR = "td_v3.zarr"
MU_V3_DIR = "mu_v3.zarr"            # sharded
# ZipStore-written twins: the same writer into a directory
AD_V2_ZS_DIR = "ad_v2_zipstore.zarr"
AD_V3_ZS_DIR = "ad_v3_zipstore.zarr"

ZIPS = [
    ZipStore("ad_v2.zarr.zip", AD_V2_ZS_DIR, "anndata", "zarr.storage.ZipStore", 2),
    ZipStore("ad_v3.zarr.zip", AD_V3_ZS_DIR, "anndata", "zarr.storage.ZipStore", 3),
    ZipStore("ad_v2_stored.zip", AD_V2_DIR, "anndata", "zipfile stored, keys at the root", 2),
    ZipStore("ad_v3_deflated.zip", AD_V3_DIR, "anndata", "zipfile deflated, in one top folder", 3),
    ZipStore("ad_v2_zip64.zip", AD_V2_DIR, "anndata", "zipfile stored, zip64 everywhere", 2),
    ZipStore("ad_v3_zip64_deflated.zarr.zip", AD_V3_DIR, "anndata",
             "zipfile deflated, force_zip64 local headers", 3),
    ZipStore("td_v3.zarr.zip", TD_V3_DIR, "treedata", "zipfile deflated", 3),
    ZipStore("mu_v3.zarr.zip", MU_V3_DIR, "mudata", "zipfile stored, keys at the root", 3),
]
BY_NAME = {z.name: z for z in ZIPS}


def make_adata() -> ad.AnnData:
    """zarr_writers' AnnData (every obs column kind, obsm, varm, a sparse
    layer, obsp, uns) with a .raw."""
    a = Z.make_adata()
    a.raw = a.copy()
    return a


def zip_directory(src: Path, dst: Path, compression: int, *, folder: str = "",
                  force_zip64: bool = False) -> None:
    """Zips every file below src (sorted), named relative to it, under
    folder (with its '/') when given."""
    with zipfile.ZipFile(dst, "w", compression) as zf:
        for p in sorted(src.rglob("*")):
            if p.is_file():
                info = zipfile.ZipInfo(folder + p.relative_to(src).as_posix(),
                                       date_time=(2024, 1, 2, 3, 4, 6))
                info.compress_type = compression
                with zf.open(info, "w", force_zip64=force_zip64) as out:
                    out.write(p.read_bytes())
    if force_zip64:
        conform_zip64_local_headers(dst)


def conform_zip64_local_headers(path: Path) -> None:
    """Local headers with a zip64 extra field get all ones in their 32-bit
    sizes and version 4.5 (APPNOTE 4.5.3), as zipfile writes them since
    Python 3.11.4; Debian 12's 3.11.2 left the real sizes there."""
    data = bytearray(path.read_bytes())
    for _, cf, _ in central_entries(bytes(data)):
        loc = cf[16]
        f = list(LOC.unpack_from(data, loc))
        extra = bytes(data[loc + 30 + f[9]:loc + 30 + f[9] + f[10]])
        if len(extra) >= 4 and struct.unpack_from("<H", extra)[0] == 1:
            f[1], f[7], f[8] = max(f[1], 45), 0xFFFFFFFF, 0xFFFFFFFF
            LOC.pack_into(data, loc, *f)
    path.write_bytes(bytes(data))


# ------------------------------------------------------------ parsing a zip
def end_record(data: bytes) -> tuple[int, tuple]:
    pos = data.rfind(b"PK\x05\x06")
    return pos, EOCD.unpack_from(data, pos)


def central_entries(data: bytes) -> list[tuple[int, tuple, bytes]]:
    """(offset of the header, its fields, its name) of each central header."""
    pos, eocd = end_record(data)
    off, count, out = eocd[6], eocd[4], []
    if off == 0xFFFFFFFF:   # the zip64 end record has them
        e64 = EOCD64.unpack_from(data, data.rfind(b"PK\x06\x06"))
        off, count = e64[9], e64[7]
    for _ in range(count):
        f = CEN.unpack_from(data, off)
        name = data[off + 46:off + 46 + f[10]]
        out.append((off, f, name))
        off += 46 + f[10] + f[11] + f[12]
    return out


def find_entry(data: bytes, name: str) -> tuple[int, tuple, bytes]:
    hits = [e for e in central_entries(data) if e[2] == name.encode()]
    assert hits, name
    return hits[-1]


def set_central(data: bytearray, name: str, **fields) -> None:
    """Rewrites fields of name's central header (flags, method, csize,
    usize, offset) in place."""
    index = {"flags": 3, "method": 4, "crc": 7, "csize": 8, "usize": 9, "offset": 16}
    off, f, _ = find_entry(bytes(data), name)
    f = list(f)
    for k, v in fields.items():
        f[index[k]] = v
    CEN.pack_into(data, off, *f)


def set_local(data: bytearray, name: str, **fields) -> None:
    index = {"flags": 2, "method": 3, "usize": 8}
    _, cf, _ = find_entry(bytes(data), name)
    loc = cf[16]
    f = list(LOC.unpack_from(data, loc))
    for k, v in fields.items():
        f[index[k]] = v
    LOC.pack_into(data, loc, *f)


def rename(data: bytearray, old: str, new: str) -> None:
    """Gives entry old the name new (of the same length) in both headers."""
    assert len(old) == len(new)
    off, f, _ = find_entry(bytes(data), old)
    data[off + 46:off + 46 + len(old)] = new.encode()
    data[f[16] + 30:f[16] + 30 + len(old)] = new.encode()


def to_full_zip64(src: Path, dst: Path) -> None:
    """Rewrites a zip so that every central header keeps its sizes and
    offset in a zip64 extra field (all ones in the header) and the end is a
    zip64 end record, its locator and an end record of all ones: what a
    writer does past 4 GiB or 65535 entries, on a small file."""
    data = src.read_bytes()
    pos, eocd = end_record(data)
    body = data[:eocd[6]]
    central = bytearray()
    entries = central_entries(data)
    for _, f, name in entries:
        f = list(f)
        extra = struct.pack("<HHQQQ", 1, 24, f[9], f[8], f[16])
        f[8] = f[9] = f[16] = 0xFFFFFFFF
        f[11] = len(extra)   # drop any old extra field (Python writes none here)
        f[12] = 0
        central += CEN.pack(*f) + name + extra
    cd_off, cd_size = len(body), len(central)
    end64 = EOCD64.pack(0x06064B50, 44, 45, 45, 0, 0, len(entries), len(entries), cd_size, cd_off)
    loc64 = LOC64.pack(0x07064B50, 0, cd_off + cd_size, 1)
    end = EOCD.pack(0x06054B50, 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0)
    dst.write_bytes(body + bytes(central) + end64 + loc64 + end)


# ------------------------------------------------------------ writing
def write_zipstore(a, path: Path, zarr_format: int, sharded: bool) -> None:
    """anndata's write_zarr into a zarr.storage.ZipStore."""
    with Z.zarr_settings(zarr_format, sharded):
        store = zarr.storage.ZipStore(path, mode="w")
        try:
            ad.io.write_zarr(store, a, chunks=Z.CHUNKS, convert_strings_to_categoricals=False)
        finally:
            store.close()


def write_dir(a, path: Path, zarr_format: int, sharded: bool) -> None:
    with Z.zarr_settings(zarr_format, sharded):
        ad.io.write_zarr(path, a, chunks=Z.CHUNKS, convert_strings_to_categoricals=False)


def write_good(root: Path) -> None:
    warnings.simplefilter("ignore")
    root.mkdir(parents=True, exist_ok=True)
    a = make_adata()
    write_dir(a, root / AD_V2_DIR, 2, False)
    write_dir(a, root / AD_V3_DIR, 3, True)
    write_dir(a, root / AD_V2_ZS_DIR, 2, False)
    write_dir(a, root / AD_V3_ZS_DIR, 3, True)
    write_zipstore(a, root / "ad_v2.zarr.zip", 2, False)
    write_zipstore(a, root / "ad_v3.zarr.zip", 3, True)
    t = Z.make_tdata()
    with Z.zarr_settings(3, False):
        t.write_zarr(zarr.open_group(root / TD_V3_DIR, mode="w", zarr_format=3))
    zip_directory(root / AD_V2_DIR, root / "ad_v2_stored.zip", zipfile.ZIP_STORED)
    zip_directory(root / AD_V3_DIR, root / "ad_v3_deflated.zip", zipfile.ZIP_DEFLATED,
                  folder=AD_V3_DIR + "/")
    zip_directory(root / AD_V2_DIR, root / "tmp_zip64.zip", zipfile.ZIP_STORED, force_zip64=True)
    to_full_zip64(root / "tmp_zip64.zip", root / "ad_v2_zip64.zip")
    os.unlink(root / "tmp_zip64.zip")
    zip_directory(root / AD_V3_DIR, root / "ad_v3_zip64_deflated.zarr.zip", zipfile.ZIP_DEFLATED,
                  force_zip64=True)
    zip_directory(root / TD_V3_DIR, root / "td_v3.zarr.zip", zipfile.ZIP_DEFLATED)
    with Z.zarr_settings(3, True):
        md.write_zarr(root / MU_V3_DIR, Z.make_mdata())
    zip_directory(root / MU_V3_DIR, root / "mu_v3.zarr.zip", zipfile.ZIP_STORED)


# ------------------------------------------------------------ bad zips
CHUNK = "X/0.0"   # a chunk of X in the v2 store
META = "X/.zarray"


def _bad(good: bytes, edit) -> bytes:
    data = bytearray(good)
    edit(data)
    return bytes(data)


def _huge_directory(good: bytes) -> bytes:
    """The end record claims a central directory of 4 GiB - 16 at offset 0."""
    data = bytearray(good)
    pos, f = end_record(good)
    f = list(f)
    f[5], f[6] = 0xFFFFFFF0, 0
    EOCD.pack_into(data, pos, *f)
    return bytes(data)


def _many_entries(good: bytes) -> bytes:
    """The end record claims 65534 entries in the directory it has."""
    data = bytearray(good)
    pos, f = end_record(good)
    f = list(f)
    f[3] = f[4] = 65534
    EOCD.pack_into(data, pos, *f)
    return bytes(data)


def _huge_zip64_directory(full64: bytes) -> bytes:
    """A zip64 end record claiming 2^60 bytes of directory."""
    data = bytearray(full64)
    at = data.rfind(b"PK\x06\x06")
    f = list(EOCD64.unpack_from(data, at))
    f[8] = 1 << 60
    EOCD64.pack_into(data, at, *f)
    return bytes(data)


def _offset_past_end(good: bytes) -> bytes:
    return _bad(good, lambda d: set_central(d, CHUNK, offset=len(good) + 1000))


def _offset_shifted(good: bytes) -> bytes:
    """A chunk's local header offset 7 bytes too far: its span runs into
    the next entry (and no local header is there)."""
    _, f, _ = find_entry(good, CHUNK)
    return _bad(good, lambda d: set_central(d, CHUNK, offset=f[16] + 7))


def _two_entries_one_header(good: bytes) -> bytes:
    """Two central entries (X/0.0 and X/0.1) pointing at one local header."""
    _, f, _ = find_entry(good, "X/0.1")
    return _bad(good, lambda d: set_central(d, CHUNK, offset=f[16]))


def _overlapping() -> bytes:
    """The overlapping-files construction: entry A's stored bytes hold a
    whole local header and data of entry B, and the directory points B
    inside A.  Built by hand (zipfile would not)."""
    import zlib
    b_name, b_data = b"zarr.json", b'{"zarr_format": 3, "node_type": "group", "attributes": {}}'
    b_local = LOC.pack(0x04034B50, 20, 0, 0, 0, 0, zlib.crc32(b_data), len(b_data), len(b_data),
                       len(b_name), 0) + b_name + b_data
    a_name, a_data = b"pad", b"x" * 8 + b_local + b"y" * 8
    a_local = LOC.pack(0x04034B50, 20, 0, 0, 0, 0, zlib.crc32(a_data), len(a_data), len(a_data),
                       len(a_name), 0) + a_name
    body = a_local + a_data
    b_off = len(a_local) + 8
    cen = CEN.pack(0x02014B50, 20, 20, 0, 0, 0, 0, zlib.crc32(a_data), len(a_data), len(a_data),
                   len(a_name), 0, 0, 0, 0, 0, 0) + a_name
    cen += CEN.pack(0x02014B50, 20, 20, 0, 0, 0, 0, zlib.crc32(b_data), len(b_data), len(b_data),
                    len(b_name), 0, 0, 0, 0, 0, b_off) + b_name
    end = EOCD.pack(0x06054B50, 0, 0, 2, 2, len(cen), len(body), 0)
    return body + cen + end


def _deflated_over_limit(root: Path, tmp: Path) -> bytes:
    """The v3 store deflated, with X's first shard replaced by 4 MiB of
    zeros (deflate keeps them in ~4 KB: within deflate's own bound, past a
    --max-response-bytes of 1 MiB)."""
    out = tmp / "over.zip"
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        for p in sorted((root / AD_V3_DIR).rglob("*")):
            if p.is_file():
                rel = p.relative_to(root / AD_V3_DIR).as_posix()
                zf.writestr(rel, bytes(4 << 20) if rel == "X/c/0/0" else p.read_bytes())
    return out.read_bytes()


def _lying_inflated_size(deflated: bytes) -> bytes:
    """A deflated shard claiming (in both headers) one byte less than its
    stream makes: a zip bomb's lie, caught when the stream goes on."""
    real = find_entry(deflated, "X/c/0/0")[1][9]
    return _bad(deflated, lambda d: (set_central(d, "X/c/0/0", usize=real - 1),
                                     set_local(d, "X/c/0/0", usize=real - 1)))


def _claims_4gib(deflated: bytes) -> bytes:
    """A deflated shard claiming 4 GiB - 2 from its few hundred bytes: past
    deflate's largest expansion (1032:1), refused before any allocation."""
    return _bad(deflated, lambda d: (set_central(d, "X/c/0/0", usize=0xFFFFFFFE),
                                     set_local(d, "X/c/0/0", usize=0xFFFFFFFE)))


def _v3_meta_method(deflated: bytes) -> bytes:
    return _bad(deflated, lambda d: (set_central(d, "zarr.json", method=99),
                                     set_local(d, "zarr.json", method=99)))


# name -> (what the 422's detail says, the request that shows it: the
# summary for a zip refused whole, a route reading the broken entry else)
BAD = {
    "bad_huge_directory.zip": ("does not end where its end record starts", ""),
    "bad_many_entries.zip": ("claims 65534 entries", ""),
    "bad_huge_zip64_directory.zip": ("does not end where its end record starts", ""),
    "bad_offset_past_end.zip": ("overlaps", ""),
    "bad_offset_shifted.zip": ("overlaps", ""),
    "bad_two_entries_one_header.zip": ("overlaps", ""),
    "bad_overlapping.zarr.zip": ("overlaps", ""),
    "bad_dotdot.zip": ("plain relative path", ""),
    "bad_dotdot_inner.zip": ("plain relative path", ""),
    "bad_absolute.zip": ("plain relative path", ""),
    "bad_backslash.zip": ("plain relative path", ""),
    "bad_encrypted_chunk.zip": ("encrypted", "X"),
    "bad_encrypted_meta.zip": ("encrypted", "zarr/.zgroup"),
    "bad_bzip2_chunk.zip": ("compression method 12", "X"),
    "bad_method_meta.zip": ("compression method 99", ""),
    "bad_local_disagrees.zip": ("local header disagrees", "X"),
    "bad_over_limit.zip": ("past the limit", "X"),
    "bad_lying_inflated_size.zip": ("does not inflate to the", "X"),
    "bad_claims_4gib.zip": ("past the limit", "X"),
    "bad_truncated.zarr.zip": ("not a zip", ""),
    "bad_not_a_zip.zip": ("not a zip", ""),
    "bad_no_store.zip": ("no zarr store", ""),
}


def write_bad(root: Path, tmp: Path) -> dict:
    """Writes every zip of BAD into root (which must hold the good stores);
    returns BAD."""
    tmp.mkdir(parents=True, exist_ok=True)
    good = (root / "ad_v2_stored.zip").read_bytes()
    full64 = (root / "ad_v2_zip64.zip").read_bytes()
    zip_directory(root / AD_V3_DIR, tmp / "deflated.zip", zipfile.ZIP_DEFLATED)
    deflated = (tmp / "deflated.zip").read_bytes()
    made = {
        "bad_huge_directory.zip": _huge_directory(good),
        "bad_many_entries.zip": _many_entries(good),
        "bad_huge_zip64_directory.zip": _huge_zip64_directory(full64),
        "bad_offset_past_end.zip": _offset_past_end(good),
        "bad_offset_shifted.zip": _offset_shifted(good),
        "bad_two_entries_one_header.zip": _two_entries_one_header(good),
        "bad_overlapping.zarr.zip": _overlapping(),
        "bad_dotdot.zip": _bad(good, lambda d: rename(d, "X/.zarray", "../zarray")),
        "bad_dotdot_inner.zip": _bad(good, lambda d: rename(d, "X/.zarray", "X/../zarr")),
        "bad_absolute.zip": _bad(good, lambda d: rename(d, "X/.zarray", "/X/zarray")),
        "bad_backslash.zip": _bad(good, lambda d: rename(d, "X/.zarray", "X\\.zarray")),
        "bad_encrypted_chunk.zip": _bad(good, lambda d: (set_central(d, CHUNK, flags=1),
                                                         set_local(d, CHUNK, flags=1))),
        "bad_encrypted_meta.zip": _bad(good, lambda d: (set_central(d, ".zgroup", flags=1),
                                                        set_local(d, ".zgroup", flags=1))),
        "bad_bzip2_chunk.zip": _bad(good, lambda d: (set_central(d, CHUNK, method=12),
                                                     set_local(d, CHUNK, method=12))),
        "bad_method_meta.zip": _v3_meta_method(deflated),
        "bad_local_disagrees.zip": _bad(good, lambda d: set_local(d, CHUNK, method=8)),
        "bad_over_limit.zip": _deflated_over_limit(root, tmp),
        "bad_lying_inflated_size.zip": _lying_inflated_size(deflated),
        "bad_claims_4gib.zip": _claims_4gib(deflated),
        "bad_truncated.zarr.zip": good[: len(good) // 2],
        "bad_not_a_zip.zip": b"this is a text file, not a zip\n" * 4,
    }
    with zipfile.ZipFile(tmp / "nostore.zip", "w") as zf:
        zf.writestr("README.txt", "no zarr here")
        zf.writestr("data/values.csv", "1,2,3\n")
    made["bad_no_store.zip"] = (tmp / "nostore.zip").read_bytes()
    assert set(made) == set(BAD)
    for name, data in made.items():
        (root / name).write_bytes(data)
    return BAD
