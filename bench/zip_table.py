"""The Markdown table of bench/zip_libs.sh: reads lines "ZIP SIZE {json of
zip_libs}" from stdin, prints the medians per zip and reader."""

import json
import statistics
import sys

# Whether one open handle can serve several request threads at once: from
# the libraries' APIs, not measured.
THREADS = {
    "cellar": "yes (read-only directory, pread)",
    "libzip": "no (a zip_t's state)",
    "minizip": "no (one current entry and stream per unzFile)",
    "minizip-index": "no (one current entry and stream per unzFile)",
}


def main() -> None:
    rows: dict = {}
    for line in sys.stdin:
        name, size, doc = line.split(" ", 2)
        d = json.loads(doc)
        rows.setdefault((name, int(size), d["lib"]), []).append(d)
    print("| zip | entries | size | reader | open (ms) | heap after open (MB) "
          "| entries read | per entry (us) | data offset (sendfile) "
          "| one handle, several threads |")
    print("|---|---:|---:|---|---:|---:|---:|---:|---|---|")
    for (name, size, lib), ds in rows.items():
        def med(key):
            return statistics.median(d[key] for d in ds)
        offset = "yes" if ds[0]["data_offset_known"] else "no (no API gives it)"
        print(f"| {name} | {ds[0]['entries']:,} | {size / 1e6:.1f} MB | {lib} "
              f"| {med('open_s') * 1e3:.1f} | {med('open_heap_bytes') / 1e6:.2f} "
              f"| {ds[0]['read']:,} | {med('per_entry_us'):.1f} | {offset} "
              f"| {THREADS.get(lib, '?')} |")


if __name__ == "__main__":
    main()
