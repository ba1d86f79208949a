"""Zarr zip stores with many entries for bench/zip_libs.sh (standard
library only): a zarr v2 group whose array X has one chunk per entry
(256 bytes each, stored), written with zipfile.

    python3 make_zip.py OUT.zip ENTRIES [zip64]

More than 65535 entries makes zipfile write zip64 end records; "zip64"
also forces zip64 extra fields into every local header (force_zip64)."""

import json
import random
import sys
import zipfile


def main() -> None:
    out, n = sys.argv[1], int(sys.argv[2])
    force = len(sys.argv) > 3 and sys.argv[3] == "zip64"
    rnd = random.Random(20261206)
    meta = {"zarr_format": 2, "shape": [n * 32], "chunks": [32], "dtype": "<f8",
            "compressor": None, "fill_value": 0.0, "filters": None, "order": "C"}
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as zf:
        zf.writestr(".zgroup", json.dumps({"zarr_format": 2}))
        zf.writestr("X/.zarray", json.dumps(meta))
        for i in range(n):
            info = zipfile.ZipInfo(f"X/{i}", date_time=(2024, 1, 2, 3, 4, 6))
            with zf.open(info, "w", force_zip64=force) as f:
                f.write(rnd.randbytes(256))


if __name__ == "__main__":
    main()
