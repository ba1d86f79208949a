#!/bin/sh
# The zip section of BENCHMARKS.md: cellar's storage/zip against libzip and
# minizip on zarr zip stores of many entries (bench/zip_libs.c, bench/make_zip.py).
#   make bench-zip            (or: sh bench/zip_libs.sh BUILD_DIR)
# Installs libzip-dev and libminizip-dev when missing (as root), writes the
# zips once into bench/data/zip/ (git-ignored), runs each reader 3 times on
# each zip and prints the medians as a Markdown table.  minizip's own lookup
# (unzLocateFile) walks the central directory from its start each time, so
# on the 100,000-entry zips it reads 20 random entries, not all of them.
set -eu
BUILD=${1:-build}
HERE=$(cd "$(dirname "$0")" && pwd)
DATA=$HERE/data/zip
mkdir -p "$DATA" "$HERE/data/bin"
missing=""
pkg-config --exists libzip || missing="$missing libzip-dev"
pkg-config --exists minizip || missing="$missing libminizip-dev"
if [ -n "$missing" ]; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $missing >/dev/null
fi
BIN=$HERE/data/bin/zip_libs
${CC:-cc} -std=c11 -D_GNU_SOURCE -Wall -Wextra -Wshadow -Wstrict-prototypes -Wformat=2 -Wvla \
    -Werror -O2 -I"$HERE/.." $(pkg-config --cflags libzip) "$HERE/zip_libs.c" \
    "$BUILD/libcellar.a" $(pkg-config --libs libzip minizip) -o "$BIN"
for spec in "1k.zip 1000" "100k.zip 100000" "100k_zip64.zip 100000 zip64"; do
    set -- $spec
    [ -s "$DATA/$1" ] || python3 "$HERE/make_zip.py" "$DATA/$1" "$2" ${3:-}
done
for z in 1k.zip 100k.zip 100k_zip64.zip; do
    for lib in cellar libzip minizip minizip-index; do
        n=0
        [ "$lib" = minizip ] && [ "$z" != 1k.zip ] && n=20
        for run in 1 2 3; do
            printf '%s %s ' "$z" "$(stat -c %s "$DATA/$z")"
            "$BIN" "$lib" "$DATA/$z" $n
        done
    done
done | python3 "$HERE/zip_table.py"
