#!/bin/sh
# make fresh-check: the README's two commands on a fresh Debian 12.
#
# Builds a minimal bookworm with mmdebstrap (--variant=minbase, plus
# ca-certificates, git and make: no Python, no node, no compiler), clones
# this repository's committed HEAD into it, and in a chroot there, as root
# with a clean environment, runs
#   make run    in the background until /healthz and a store route answer,
#               then stops it
#   make test   to the end
# Each installs what it is missing itself.  About 15 minutes on 2 cores;
# never part of make test.  Needs root (mmdebstrap, mount, chroot).
#
#   FRESH_DIR=/var/tmp/x   where the chroot goes (must not exist; default
#                          a new directory under /var/tmp)
#   FRESH_PORT=N           the port for make run (default: a free one)
#   FRESH_KEEP=1           leave the chroot in place afterwards
#
# The host's apt configuration and CA certificates are copied in first, so
# the chroot reaches Debian's mirrors, PyPI and npm the way this machine
# does.  Everything runs in a private mount namespace: the chroot's /proc,
# /dev, /sys mounts are never seen by the host and vanish with the script
# even if it is killed; the trap unmounts them and removes the chroot.
set -eu

if [ -z "${CELLAR_FRESH_NS:-}" ]; then
    [ "$(id -u)" = 0 ] || { echo "fresh-check: needs root"; exit 1; }
    CELLAR_FRESH_NS=1 exec unshare --mount --propagation private sh "$0" "$@"
fi

repo=$(cd "$(dirname "$0")/.." && pwd)
t0=$(date +%s)
say() { echo "[fresh-check $(( $(date +%s) - t0 ))s] $*"; }

command -v mmdebstrap >/dev/null 2>&1 || {
    say "installing mmdebstrap"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mmdebstrap >/dev/null
}

if [ -n "${FRESH_DIR:-}" ]; then
    root=$FRESH_DIR
    [ ! -e "$root" ] || { echo "fresh-check: $root exists"; exit 1; }
else
    root=$(mktemp -d /var/tmp/cellar-fresh.XXXXXX)
    rmdir "$root"   # mmdebstrap wants a new or empty directory
fi

run_pid=""
cleanup() {
    rc=$?
    set +e
    if [ -n "$run_pid" ] && kill -0 "-$run_pid" 2>/dev/null; then
        kill -TERM "-$run_pid" 2>/dev/null; sleep 2; kill -KILL "-$run_pid" 2>/dev/null
    fi
    for m in mnt/src sys dev/shm dev/pts dev proc; do
        if mountpoint -q "$root/$m" 2>/dev/null; then
            umount -R "$root/$m" 2>/dev/null || umount -R -l "$root/$m"
        fi
    done
    if grep -q " $root/" /proc/self/mountinfo; then
        echo "fresh-check: mounts remain under $root, not removing it"
    elif [ "${FRESH_KEEP:-0}" = 1 ]; then
        echo "fresh-check: chroot kept in $root"
    elif [ -d "$root" ]; then
        rm -rf --one-file-system "$root"
    fi
    say "$([ "$rc" = 0 ] && echo PASSED || echo "FAILED ($rc)")"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

# ---------------------------------------------------------- the system
# The sources of an installed bookworm (with its updates and security
# suites), the host's apt configuration before apt first runs, its CA
# certificates once ca-certificates is in (its local ones too, so that a
# later update-ca-certificates keeps them), and the /etc/hosts every
# installed Debian has (minbase has none).
say "mmdebstrap bookworm (minbase + ca-certificates, git, make) into $root"
mmdebstrap --quiet --variant=minbase --include=ca-certificates,git,make \
    --setup-hook='mkdir -p "$1/etc/apt/apt.conf.d" && cp /etc/apt/apt.conf.d/* "$1/etc/apt/apt.conf.d/"' \
    --customize-hook='cp /etc/ssl/certs/ca-certificates.crt "$1/etc/ssl/certs/ca-certificates.crt"' \
    --customize-hook='printf "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n" > "$1/etc/hosts"' \
    --customize-hook='for c in /usr/local/share/ca-certificates/*.crt; do [ ! -f "$c" ] || cp "$c" "$1/usr/local/share/ca-certificates/"; done' \
    bookworm "$root" \
    "deb http://deb.debian.org/debian bookworm main" \
    "deb http://deb.debian.org/debian bookworm-updates main" \
    "deb http://deb.debian.org/debian-security bookworm-security main"
for tool in python3 node npm cc; do
    if [ -e "$root/usr/bin/$tool" ]; then echo "fresh-check: $tool is already in the minimal system"; exit 1; fi
done

mount -t proc proc "$root/proc"
mount --bind /dev "$root/dev"
mount --make-private "$root/dev"
mount --bind /dev/pts "$root/dev/pts"
mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs "$root/dev/shm"
mount -t sysfs sysfs "$root/sys" 2>/dev/null || mount --rbind /sys "$root/sys"
mkdir -p "$root/mnt/src"
mount --bind "$repo" "$root/mnt/src"
mount -o remount,bind,ro "$root/mnt/src"

# As a root login on a fresh machine: nothing of this host's environment.
clean_env="env -i HOME=/root USER=root LOGNAME=root SHELL=/bin/sh TERM=dumb
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
in_root() { $clean_env chroot "$root" "$@"; }

in_root git clone -q --no-local /mnt/src /root/cellar
say "cloned $(in_root git -C /root/cellar log -1 --format='%h %s' | cut -c1-80)"
umount "$root/mnt/src"

# ---------------------------------------------------------- make run
port=${FRESH_PORT:-}
if [ -z "$port" ]; then
    for p in $(seq 18080 18180); do
        if ! grep -qi ":$(printf '%04X' "$p") " /proc/net/tcp /proc/net/tcp6 2>/dev/null; then port=$p; break; fi
    done
fi
[ -n "$port" ] || { echo "fresh-check: no free port"; exit 1; }

say "make run PORT=$port (in the background)"
# its own session, so that make and the server it starts stop together
$clean_env setsid chroot "$root" sh -c "cd /root/cellar && exec make run PORT=$port" \
    > "$root/root/make-run.log" 2>&1 &
run_pid=$!
get() { in_root sh -c "command -v curl >/dev/null && curl -fsS --max-time 10 'http://127.0.0.1:$port$1'"; }
deadline=$(( $(date +%s) + 1800 ))
until get /healthz >/dev/null 2>&1; do
    if ! kill -0 "$run_pid" 2>/dev/null; then
        tail -40 "$root/root/make-run.log"; echo "fresh-check: make run exited before serving"; exit 1
    fi
    if [ "$(date +%s)" -gt "$deadline" ]; then
        tail -40 "$root/root/make-run.log"; echo "fresh-check: make run did not serve in 30 minutes"; exit 1
    fi
    sleep 3
done
health=$(get /healthz)
mods=$(get /v1/stores/pbmc_small.h5mu/mod)
stores=$(get /v1/stores)
echo "  /healthz: $health"
echo "  /v1/stores/pbmc_small.h5mu/mod: $(echo "$mods" | cut -c1-160)"
case $mods in *'"rna"'*'"prot"'*) ;; *) echo "fresh-check: the modalities of pbmc_small.h5mu are not rna and prot"; exit 1;; esac
case $stores in *blood.h5ad*blood.zarr*|*blood.zarr*blood.h5ad*) ;; *) echo "fresh-check: /v1/stores lacks the examples"; exit 1;; esac
kill -TERM "-$run_pid"
wait "$run_pid" || true
n=0
while kill -0 "-$run_pid" 2>/dev/null && [ "$n" -lt 40 ]; do sleep 1; n=$((n + 1)); done
kill -0 "-$run_pid" 2>/dev/null && { echo "fresh-check: make run's server did not stop on SIGTERM"; exit 1; }
run_pid=""
grep '^installing:' "$root/root/make-run.log" | cut -c1-400 || true
say "make run served the examples; stopped"

# ---------------------------------------------------------- make test
say "make test"
in_root sh -c 'cd /root/cellar && make test' 2>&1
say "make test passed ($(in_root sh -c 'python3 --version; node --version' | tr '\n' ' '))"
