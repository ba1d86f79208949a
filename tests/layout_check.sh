#!/bin/sh
# The layering rules of the source tree (README "Layout"), checked on what
# the preprocessor really includes:
#   - only storage/hdf5/ sees hdf5.h, only server/ sees microhttpd.h;
#   - nothing in storage/ or common/ includes an api/ or server/ header,
#     nothing in common/ a storage/ header, nothing in api/ a server/ one;
#   - no two modules include each other, directly or through others (a
#     module is a .c with its .h; name_impl.h belongs to module name).
# Tests and benchmarks are not checked: the HDF5 backend's unit tests write
# their fixture files with libhdf5.
# Usage: CPPFLAGS='-I. $(pkg-config --cflags ...)' sh tests/layout_check.sh
set -u
cd "$(dirname "$0")/.."
fail=0
bad() { echo "layout: $*"; fail=1; }

sources=$(find server api storage common -name '*.c' | sort)
for f in $sources; do
    deps=$(${CC:-cc} -std=c11 -D_GNU_SOURCE ${CPPFLAGS:-} -I. -M "$f" 2>/dev/null | tr ' \\' '\n\n' | grep -v ':$' | grep .) ||
        { bad "$f: the preprocessor failed (CPPFLAGS?)"; continue; }
    case "$f" in
    storage/hdf5/*) ;;
    *) echo "$deps" | grep -q '/hdf5\.h$' && bad "$f includes hdf5.h (only storage/hdf5/ may)" ;;
    esac
    case "$f" in
    server/*) ;;
    *) echo "$deps" | grep -q '/microhttpd\.h$' && bad "$f includes microhttpd.h (only server/ may)" ;;
    esac
    own=$(echo "$deps" | grep -E '^(server|api|storage|common)/')
    case "$f" in
    storage/*) echo "$own" | grep -E '^(api|server)/' | sed "s|^|layout: $f includes |" | grep . && fail=1 ;;
    common/*) echo "$own" | grep -E '^(api|server|storage)/' | sed "s|^|layout: $f includes |" | grep . && fail=1 ;;
    api/*) echo "$own" | grep -E '^server/' | sed "s|^|layout: $f includes |" | grep . && fail=1 ;;
    esac
done

# Direct includes between modules, then a topological sort: tsort reports
# any loop.
edges=$(for f in $(find server api storage common -name '*.[ch]' | sort); do
    m=${f%.*}; m=${m%_impl}
    sed -n 's/^#include "\(.*\)\.h".*/\1/p' "$f" | while read -r d; do
        d=${d%_impl}
        [ "$d" = "$m" ] || echo "$m $d"
    done
done | sort -u)
if ! loops=$(echo "$edges" | tsort 2>&1 >/dev/null) || [ -n "$loops" ]; then
    echo "$loops" | sed 's/^tsort: -: input contains a loop:/layout: include loop:/; s/^tsort: /layout:   /'
    fail=1
fi
[ $fail -eq 0 ] && echo "layout: ok ($(echo "$sources" | wc -l) sources, $(echo "$edges" | wc -l) module edges, no loops)"
exit $fail
