#!/bin/sh
# Judges the crashes, timeouts and out-of-memory inputs that h5_probe_fuzz
# saved in libFuzzer's fork mode (make fuzz): each is run again and its
# report's first stack frame outside the sanitizer and libFuzzer runtimes
# decides whose it is.  In libhdf5 (or libz/libsz it calls) it is
# libhdf5's: the probe process exists to contain those (tests/http/
# test_probe.py).  Anywhere else it is ours: the input is kept in
# DIR/ours/ and the run fails.
#   tests/fuzz/judge_h5_crashes.sh FUZZ_BINARY ARTIFACT_DIR
set -u
bin=$1
dir=$2
ours=0
theirs=0
alone=0
mkdir -p "$dir/ours"
for f in "$dir"/crash-* "$dir"/timeout-* "$dir"/oom-* "$dir"/slow-unit-*; do
    [ -f "$f" ] || continue
    report=$(ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
        "$bin" -timeout=10 -rss_limit_mb=2048 "$f" 2>&1)
    # The deciding frame: the first one with a source file of ours (a path
    # ending in .c:LINE) or in libhdf5 and the compression libraries it
    # calls; sanitizer interceptors, libFuzzer and libc frames are skipped.
    frame=$(printf '%s\n' "$report" | grep -E '^ +#[0-9]+ 0x[0-9a-f]+ ' |
        grep -E '\.c:[0-9]+|libhdf5|libz\.so|libsz\.so|libaec\.so' |
        grep -vE '/sysdeps/|/nptl/|/stdlib/|/csu/|compiler-rt' | head -1)
    case "$frame" in
    *libhdf5*|*libz.so*|*libsz.so*|*libaec.so*)
        theirs=$((theirs + 1)) ;;
    "")
        # No stack (a deadly signal with the stack cut short, or the input
        # passes when run alone): libFuzzer's own verdict stands, judged by
        # where the run stopped, which only libhdf5 code can be.
        if printf '%s\n' "$report" | grep -q 'Executed .* in [0-9]* ms'; then
            alone=$((alone + 1))  # passes alone: state left by earlier inputs
        else
            echo "== $f: no stack to judge"; printf '%s\n' "$report" | tail -20
            cp "$f" "$dir/ours/"; ours=$((ours + 1))
        fi ;;
    *)
        echo "== $f: ours: $frame"; printf '%s\n' "$report" | grep -E '^(==|SUMMARY| +#)' | head -30
        cp "$f" "$dir/ours/"; ours=$((ours + 1)) ;;
    esac
done
echo "h5_probe_fuzz: $theirs crash(es) inside libhdf5 (contained by the probe process)," \
    "$alone that pass when run alone, $ours of ours"
[ "$ours" -eq 0 ]
