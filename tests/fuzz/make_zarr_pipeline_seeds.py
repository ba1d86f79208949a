"""Writes the seed corpus of zarr_pipeline_fuzz: small arrays written by
zarr-python (v3: bytes, transpose, sharding, every compressor cellar reads,
crc32c; v2: blosc, zstd, gzip, zlib, lz4, F order, strings), each as
mode byte + metadata length + metadata + the array's first chunk file.

Run from the repository root with the test venv:
    .venv/bin/python tests/fuzz/make_zarr_pipeline_seeds.py
"""

import json
import struct
import tempfile
from pathlib import Path

import numcodecs
import numpy as np
import zarr
from zarr.codecs import (
    BloscCodec,
    BytesCodec,
    Crc32cCodec,
    GzipCodec,
    ShardingCodec,
    TransposeCodec,
    ZstdCodec,
)

OUT = Path("tests/fuzz/corpus/zarr_pipeline")


def first_chunk(store: Path, meta: dict, v2: bool) -> bytes:
    ndim = len(meta["shape"])
    if v2:
        sep = meta.get("dimension_separator", ".")
        key = sep.join(["0"] * ndim) or "0"
    else:
        enc = meta["chunk_key_encoding"]
        sep = enc.get("configuration", {}).get("separator", "/" if enc["name"] == "default" else ".")
        if enc["name"] == "v2":
            key = sep.join(["0"] * ndim) or "0"
        else:
            key = sep.join(["c"] + ["0"] * ndim)
    path = store / key
    return path.read_bytes() if path.exists() else b""


def seed(name: str, store: Path, v2: bool, mode: int = 0) -> None:
    meta_file = store / (".zarray" if v2 else "zarr.json")
    meta = meta_file.read_bytes()
    chunk = first_chunk(store, json.loads(meta), v2)
    data = bytes([mode | (1 if v2 else 0)]) + struct.pack("<H", len(meta)) + meta + chunk
    (OUT / name).write_bytes(data)


def write(tmp: Path, name: str, data, zarr_format: int, mode: int = 0, **kwargs) -> None:
    path = tmp / name
    kwargs.setdefault("dtype", data.dtype)
    a = zarr.create_array(str(path), shape=data.shape, zarr_format=zarr_format, **kwargs)
    a[...] = data
    seed(name, path, zarr_format == 2, mode)


def v3(tmp: Path, name: str, data, mode: int = 0, **kwargs) -> None:
    write(tmp, name, data, 3, mode, **kwargs)


def v2(tmp: Path, name: str, data, mode: int = 0, **kwargs) -> None:
    write(tmp, name, data, 2, mode, **kwargs)


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(19)
    m = rng.integers(0, 100, size=(6, 5)).astype("<i4")
    f = rng.random((6, 5)).astype("<f8")
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        v3(tmp, "v3_bytes_le", m, chunks=(4, 4), compressors=None)
        v3(tmp, "v3_bytes_be", m, chunks=(4, 4), serializer=BytesCodec(endian="big"), compressors=None)
        v3(tmp, "v3_transpose", f, 2, chunks=(4, 4), filters=[TransposeCodec(order=(1, 0))], compressors=None)
        v3(tmp, "v3_size1_axis", m[:1], chunks=(1, 5), filters=[TransposeCodec(order=(1, 0))])
        v3(tmp, "v3_zstd", f, chunks=(4, 4), compressors=ZstdCodec(level=1))
        v3(tmp, "v3_gzip", m, 4, chunks=(4, 4), compressors=GzipCodec(level=1))
        v3(tmp, "v3_blosc_lz4", f, chunks=(4, 4), compressors=BloscCodec(cname="lz4", shuffle="shuffle"))
        v3(tmp, "v3_blosc_zstd_bit", m, chunks=(4, 4), compressors=BloscCodec(cname="zstd", shuffle="bitshuffle"))
        v3(tmp, "v3_crc32c", m, chunks=(4, 4), compressors=[ZstdCodec(level=1), Crc32cCodec()])
        v3(tmp, "v3_1d", np.arange(20, dtype="<u2"), chunks=(8,))
        v3(tmp, "v3_0d", np.array(3.5, dtype="<f4"), compressors=None)
        v3(tmp, "v3_bool", m > 50, chunks=(4, 4))
        v3(tmp, "v3_3d", np.arange(60, dtype="<i8").reshape(3, 4, 5), chunks=(2, 2, 5))
        v3(tmp, "v3_strings", np.array(["a", "bé", "", "long string"] * 3, dtype=object).reshape(3, 4),
           chunks=(2, 4), dtype=zarr.dtype.VariableLengthUTF8())
        v3(tmp, "v3_shard", m, chunks=(2, 2), shards=(4, 4))
        v3(tmp, "v3_shard_backwards", f, 2, chunks=(2, 2), shards=(4, 4), compressors=ZstdCodec(level=1))
        v3(tmp, "v3_shard_start", m, 4, chunks=(4, 4),
           serializer=ShardingCodec(chunk_shape=(2, 2), index_location="start"), compressors=None)
        v3(tmp, "v3_shard_partial", m[:3], chunks=(2, 2), shards=(4, 4))
        v3(tmp, "v3_shard_strings", np.array(["x", "yy", "zzz", "ü"] * 4, dtype=object).reshape(4, 4),
           chunks=(2, 2), shards=(4, 4), dtype=zarr.dtype.VariableLengthUTF8())
        v3(tmp, "v3_sep_dot", m, chunks=(4, 4), chunk_key_encoding={"name": "default", "separator": "."})
        v3(tmp, "v3_v2_keys", m, chunks=(4, 4), chunk_key_encoding={"name": "v2", "separator": "."})
        v3(tmp, "v3_fill", m, chunks=(4, 4), fill_value=7, compressors=None)
        v2(tmp, "v2_blosc", f, chunks=(4, 4), compressors=numcodecs.Blosc(cname="lz4"))
        v2(tmp, "v2_zstd", m, chunks=(4, 4), compressors=numcodecs.Zstd(level=1))
        v2(tmp, "v2_gzip", m, 2, chunks=(4, 4), compressors=numcodecs.GZip(level=1))
        v2(tmp, "v2_zlib", f, chunks=(4, 4), compressors=numcodecs.Zlib(level=1))
        v2(tmp, "v2_lz4", m, chunks=(4, 4), compressors=numcodecs.LZ4())
        v2(tmp, "v2_order_f", f, chunks=(4, 4), order="F", compressors=None)
        v2(tmp, "v2_big_endian", m.astype(">i4"), chunks=(4, 4), compressors=None)
        v2(tmp, "v2_strings", np.array(["a", "bc", "", "d"] * 3, dtype=object), chunks=(8,),
           dtype=str)
        v2(tmp, "v2_fixed_utf32", np.array(["ab", "c", "déf"], dtype="<U3"), chunks=(2,))
        v2(tmp, "v2_fixed_bytes", np.array([b"ab", b"c", b"def"], dtype="|S3"), chunks=(2,))
        v2(tmp, "v2_slash", m, chunks=(4, 4), chunk_key_encoding={"name": "v2", "separator": "/"})


if __name__ == "__main__":
    main()
