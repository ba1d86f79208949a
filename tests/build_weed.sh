#!/bin/sh
# Builds SeaweedFS's weed (the S3 server of tests/http/test_remote.py) at
# one pinned version from the Go module proxy, into OUT; the Makefile
# calls it only when OUT is missing, so the build (a few minutes) is paid
# once per machine and version.
#   sh tests/build_weed.sh VERSION OUT
# Go: `go` on PATH, else /usr/local/go/bin/go, when it is at least the
# version weed's go.mod asks for (1.26.6 for the pinned one).  Otherwise
# Debian's golang-go (1.19 on bookworm, too old to build it and without
# GOTOOLCHAIN) is installed and used only to fetch the Go toolchain module
# golang.org/toolchain from the same proxy, which then builds weed.  The
# module and build caches live under the cache directory and are removed
# after a successful build (they take some GB; the binary is what is kept).
set -eu
VERSION=$1
OUT=$2
MODULE=github.com/seaweedfs/seaweedfs
NEED_GO=1.26.6
TOOLCHAIN=v0.0.1-go1.26.8.linux-amd64
CACHE=$(dirname "$OUT")
WORK=$CACHE/build
mkdir -p "$WORK"
export GOMODCACHE="$WORK/mod" GOCACHE="$WORK/cache" GOPATH="$WORK/gopath" GOFLAGS=-modcacherw GOTOOLCHAIN=local

version_ok() { # go binary -> 0 when its version is >= NEED_GO
    v=$("$1" env GOVERSION 2>/dev/null | sed 's/^go//') || return 1
    [ -n "$v" ] && [ "$(printf '%s\n%s\n' "$NEED_GO" "$v" | sort -V | head -1)" = "$NEED_GO" ]
}

GO=""
for g in "$(command -v go 2>/dev/null || true)" /usr/local/go/bin/go "$WORK/toolchain/bin/go"; do
    if [ -n "$g" ] && [ -x "$g" ] && version_ok "$g"; then GO=$g; break; fi
done
if [ -z "$GO" ]; then
    boot=$(command -v go 2>/dev/null || true)
    [ -n "$boot" ] || boot=/usr/lib/go-1.19/bin/go
    if [ ! -x "$boot" ]; then
        echo "build_weed: installing Debian's golang-go to fetch the Go $NEED_GO toolchain module"
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq golang-go
        boot=$(command -v go)
    fi
    zip=$("$boot" mod download -json "golang.org/toolchain@$TOOLCHAIN" | sed -n 's/.*"Zip": "\(.*\)",*$/\1/p')
    [ -n "$zip" ] && [ -f "$zip" ] || { echo "build_weed: no toolchain module zip"; exit 1; }
    rm -rf "$WORK/toolchain.tmp"
    python3 - "$zip" "$WORK/toolchain.tmp" <<'EOF'
import os, sys, zipfile
zf, dst = zipfile.ZipFile(sys.argv[1]), sys.argv[2]
first = zf.namelist()[0]   # golang.org/toolchain@VERSION/...: the module's folder
prefix = first[:first.index("/", first.index("@")) + 1]
for info in zf.infolist():
    name = info.filename[len(prefix):]
    if not name or name.endswith("/"):
        continue
    path = os.path.join(dst, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with zf.open(info) as src, open(path, "wb") as out:
        out.write(src.read())
    if name.startswith("bin/") or name.startswith("pkg/tool/"):
        os.chmod(path, 0o755)
EOF
    rm -rf "$WORK/toolchain" && mv "$WORK/toolchain.tmp" "$WORK/toolchain"
    GO=$WORK/toolchain/bin/go
    version_ok "$GO" || { echo "build_weed: the toolchain module does not run"; exit 1; }
fi
echo "build_weed: $($GO version), building $MODULE@$VERSION (a few minutes, once)"
# weed's go.mod has replace directives, which `go install pkg@version`
# refuses: build inside the downloaded module instead.
dir=$("$GO" mod download -json "$MODULE@$VERSION" | sed -n 's/.*"Dir": "\(.*\)",*$/\1/p')
[ -n "$dir" ] && [ -d "$dir" ] || { echo "build_weed: $MODULE@$VERSION did not download"; exit 1; }
(cd "$dir" && nice "$GO" build -trimpath -ldflags=-s -o "$OUT.tmp" ./weed)
mv "$OUT.tmp" "$OUT"
"$GO" clean -modcache >/dev/null 2>&1 || true
rm -rf "$WORK"
echo "build_weed: $OUT"
