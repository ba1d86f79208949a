#!/bin/sh
# `make bench`: installs what the benchmark needs, then runs bench/run.py.
#   CELLAR_BIN=build/cellar sh bench/run.sh
# Needs root for the Debian packages (wrk, nginx) when they are missing.
# Never part of `make test`.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")
: "${CELLAR_BIN:?set CELLAR_BIN to the cellar binary}"

# Debian packages: wrk, and nginx (the light build is enough).  The probe
# section alone (BENCH_ONLY=probe) runs neither: it needs GNU time only.
missing=""
if [ "${BENCH_ONLY:-}" != "probe" ]; then
    command -v wrk >/dev/null 2>&1 || missing="$missing wrk"
    command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || missing="$missing nginx-light"
    command -v haproxy >/dev/null 2>&1 || [ -x /usr/sbin/haproxy ] || missing="$missing haproxy"
fi
[ -x /usr/bin/time ] || missing="$missing time"
if [ -n "$missing" ]; then
    echo "[bench] installing:$missing"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null ||
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk nginx >/dev/null
fi
# The Debian package may start a system nginx on port 80; the harness starts
# its own on a free port and leaves that one alone.

# The bench virtualenv: anndata/mudata to write the data, h5grove to serve it.
venv="$here/.venv"
if [ ! -f "$venv/.done" ] || [ "$here/requirements.txt" -nt "$venv/.done" ]; then
    python=$(sh "$repo/tests/find_python.sh" 3.12) || { echo "[bench] no Python >= 3.12 found"; exit 1; }
    rm -rf "$venv"
    "$python" -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check -r "$here/requirements.txt"
    touch "$venv/.done"
fi

# The bare libmicrohttpd reference.
mkdir -p "$here/data/bin"
if [ ! -x "$here/data/bin/mhd_ref" ] || [ "$here/mhd_ref.c" -nt "$here/data/bin/mhd_ref" ]; then
    ${CC:-cc} -std=c11 -D_GNU_SOURCE -O2 -g -Wall -Wextra -Werror "$here/mhd_ref.c" \
        $(pkg-config --cflags --libs libmicrohttpd) -o "$here/data/bin/mhd_ref"
fi
# loadgen: the client of the matrices section (large bodies, 1 MiB reads).
if [ ! -x "$here/data/bin/loadgen" ] || [ "$here/loadgen.c" -nt "$here/data/bin/loadgen" ]; then
    ${CC:-cc} -std=c11 -D_GNU_SOURCE -O2 -g -Wall -Wextra -Werror "$here/loadgen.c" \
        -o "$here/data/bin/loadgen"
fi

# ros3_read: libhdf5's read-only S3 driver, the remote section's other reader.
if [ ! -x "$here/data/bin/ros3_read" ] || [ "$here/ros3_read.c" -nt "$here/data/bin/ros3_read" ]; then
    ${CC:-cc} -std=c11 -D_GNU_SOURCE -O2 -g -Wall -Wextra -Werror "$here/ros3_read.c" \
        $(pkg-config --cflags --libs hdf5) -o "$here/data/bin/ros3_read"
fi

export CELLAR_BIN
exec "$venv/bin/python" "$here/run.py"
