"""Writes the seed corpus of zip_dir_fuzz: small zarr stores in zips as
zarr.storage.ZipStore (v2, v3) and Python's zipfile (stored, deflated,
force_zip64, zip64 directory and end records) write them, and a few of
tests/http/zip_writers.py's bad zips (overlapping entries, a name with
'..', a lying directory size, a lying offset, truncated).

Run from the repository root with the test venv:
    .venv/bin/python tests/fuzz/make_zip_dir_seeds.py
"""

import sys
import tempfile
import warnings
import zipfile
from pathlib import Path

import numpy as np
import zarr

sys.path.insert(0, "tests/http")
import zip_writers as ZW  # noqa: E402

OUT = Path("tests/fuzz/corpus/zip_dir")


def small_store(path, zarr_format, store=None):
    g = zarr.open_group(store if store is not None else path, mode="w", zarr_format=zarr_format)
    g.attrs["encoding-type"] = "anndata"
    x = g.create_array("X", shape=(4, 6), chunks=(2, 3), dtype="f4")
    x[...] = np.arange(24, dtype="f4").reshape(4, 6)
    g.create_group("obs").attrs["n"] = 1


def main():
    warnings.simplefilter("ignore")
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for fmt in (2, 3):
            small_store(tmp / f"v{fmt}.zarr", fmt)
            zs = zarr.storage.ZipStore(tmp / f"zipstore_v{fmt}.zip", mode="w")
            small_store(None, fmt, zs)
            zs.close()
            (OUT / f"zipstore_v{fmt}.zip").write_bytes((tmp / f"zipstore_v{fmt}.zip").read_bytes())
        ZW.zip_directory(tmp / "v2.zarr", OUT / "stored_v2.zip", zipfile.ZIP_STORED)
        ZW.zip_directory(tmp / "v3.zarr", OUT / "deflated_v3_folder.zip", zipfile.ZIP_DEFLATED,
                         folder="v3.zarr/")
        ZW.zip_directory(tmp / "v3.zarr", OUT / "forced_zip64_v3.zip", zipfile.ZIP_DEFLATED,
                         force_zip64=True)
        ZW.to_full_zip64(OUT / "stored_v2.zip", OUT / "full_zip64_v2.zip")
        good = (OUT / "stored_v2.zip").read_bytes()
        full64 = (OUT / "full_zip64_v2.zip").read_bytes()
        (OUT / "bad_overlapping.zip").write_bytes(ZW._overlapping())
        (OUT / "bad_dotdot.zip").write_bytes(ZW._bad(good, lambda d: ZW.rename(d, "X/.zarray", "../zarray")))
        (OUT / "bad_huge_directory.zip").write_bytes(ZW._huge_directory(good))
        (OUT / "bad_huge_zip64_directory.zip").write_bytes(ZW._huge_zip64_directory(full64))
        (OUT / "bad_offset_shifted.zip").write_bytes(ZW._offset_shifted(good))
        (OUT / "bad_truncated.zip").write_bytes(good[: len(good) // 2])
        (OUT / "bad_encrypted.zip").write_bytes(
            ZW._bad(good, lambda d: (ZW.set_central(d, "X/0.0", flags=1), ZW.set_local(d, "X/0.0", flags=1))))


if __name__ == "__main__":
    main()
