"""The Markdown table of bench/zip_libs.sh: reads lines "ZIP SIZE {json of
zip_libs}" from stdin, prints the medians per zip and reader."""

import json
import statistics
import sys


def main() -> None:
    rows: dict = {}
    for line in sys.stdin:
        name, size, doc = line.split(" ", 2)
        d = json.loads(doc)
        rows.setdefault((name, int(size), d["lib"]), []).append(d)
    print("| zip | entries | size | reader | open (ms) | heap after open (MB) "
          "| per entry (us) | data offset (sendfile) |")
    print("|---|---:|---:|---|---:|---:|---:|---|")
    for (name, size, lib), ds in rows.items():
        def med(key):
            return statistics.median(d[key] for d in ds)
        offset = "yes" if ds[0]["data_offset_known"] else "no (no API gives it)"
        print(f"| {name} | {ds[0]['entries']:,} | {size / 1e6:.1f} MB | {lib} "
              f"| {med('open_s') * 1e3:.1f} | {med('open_heap_bytes') / 1e6:.2f} "
              f"| {med('per_entry_us'):.1f} | {offset} |")


if __name__ == "__main__":
    main()
