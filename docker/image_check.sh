#!/bin/bash
# make image-check: builds docker/Dockerfile and runs the image it makes.
#
#   1. a debian:bookworm-slim made with mmdebstrap (minbase, with slim's
#      dpkg exclusions), imported into podman: no image registry is
#      reachable here;
#   2. podman build (vfs storage, chroot isolation) of docker/Dockerfile
#      from this work tree; the image must be under 100 MB;
#   3. its filesystem exported to a directory, where the image's ENTRYPOINT
#      and CMD run with the image's environment, in a chroot as the image's
#      USER, on a read-only root with a tmpfs at the cache dir and examples/
#      mounted read-only at the data root, in a network namespace of its own
#      (the image's port is free there): this VM cannot start OCI
#      containers (cgroups v1 in hybrid mode), so `podman run` is not used;
#   4. answers: /healthz, /readyz, /v1/stores (every example), a MuData's
#      modalities, the same AnnData from .h5ad and .zarr, an X slice, a
#      column index saved in the cache dir; the image's HEALTHCHECK command
#      run in the chroot exits 0; SIGTERM stops the server with exit 0
#      within its drain time; the HEALTHCHECK then exits non-zero.
#
# Needs root (mmdebstrap, mount, chroot, unshare); installs podman,
# mmdebstrap, curl and iproute2 when missing.  About 10 minutes on 2 cores;
# never part of make test.
#   IMAGE_CHECK_BASE=FILE  keep the mmdebstrap tarball there and reuse it
#   IMAGE_CHECK_KEEP=1     leave the work directory (image storage, rootfs)
#   IMAGE_CHECK_ENGINE=docker  build with a running Docker engine instead
#                          (pulls debian:bookworm-slim; not run here)
# Everything (image storage, mounts) lives in a new directory under /var/tmp
# and a private mount namespace; the trap on exit undoes it.
set -euo pipefail

MAX_IMAGE_BYTES=100000000
IMAGE=localhost/cellar:image-check

if [ "${1:-}" != --smoke ] && [ -z "${CELLAR_IMAGE_NS:-}" ]; then
    [ "$(id -u)" = 0 ] || { echo "image-check: needs root"; exit 1; }
    CELLAR_IMAGE_NS=1 exec unshare --mount --propagation private bash "$0" "$@"
fi

repo=$(cd "$(dirname "$0")/.." && pwd)
t0=${IMAGE_CHECK_T0:-$(date +%s)}
export IMAGE_CHECK_T0=$t0
say() { echo "[image-check $(( $(date +%s) - t0 ))s] $*"; }
die() { echo "image-check: $*" >&2; exit 1; }

# ------------------------------------------------------------ smoke test
# Runs in its own network namespace (unshare --net), inside the mount
# namespace of the build phase; $1 is the work directory holding rootfs/
# and config/.
smoke() {
    local work=$1 rootfs=$1/rootfs cfg=$1/config
    local -a entry cmd env hc
    mapfile -t entry < "$cfg/entrypoint"
    mapfile -t cmd < "$cfg/cmd"
    mapfile -t env < "$cfg/env"
    mapfile -t hc < "$cfg/healthcheck"
    local user stop_signal
    user=$(cat "$cfg/user")
    stop_signal=$(cat "$cfg/stopsignal")

    [[ $user =~ ^[0-9]+:[0-9]+$ ]] || die "USER is '$user', not a numeric uid:gid (runAsNonRoot needs one)"
    local uid=${user%%:*} gid=${user#*:} chroot
    chroot=$(command -v chroot)
    [ "$uid" != 0 ] || die "the image runs as root"
    [ "$stop_signal" = SIGTERM ] || die "STOPSIGNAL is '$stop_signal', not SIGTERM"
    [ "${#entry[@]}" -gt 0 ] || die "the image has no ENTRYPOINT"
    env_of() { local kv; for kv in "${env[@]}"; do [ "${kv%%=*}" != "$1" ] || { echo "${kv#*=}"; return; }; done; echo "$2"; }
    local data port cache drain
    data=$(env_of CELLAR_ROOT "")
    port=$(env_of CELLAR_PORT 8080)
    cache=$(env_of CELLAR_CACHE_DIR "")
    drain=$(env_of CELLAR_DRAIN_SECONDS 30)
    [ -n "$data" ] && [ -n "$cache" ] || die "the image sets no CELLAR_ROOT or CELLAR_CACHE_DIR"
    grep -qx "$port/tcp" "$cfg/exposed" || die "CELLAR_PORT $port is not EXPOSEd ($(tr '\n' ' ' < "$cfg/exposed"))"

    ip link set lo up

    # A read-only root, as the Kubernetes Deployment has it; a container's
    # /proc, a /dev of the usual nodes, tmpfs at /tmp and the cache dir.
    mount --bind "$rootfs" "$rootfs"
    mount -o remount,bind,ro "$rootfs"
    mount -t proc proc "$rootfs/proc"
    mount -t tmpfs -o mode=755,nosuid,size=1m tmpfs "$rootfs/dev"
    local node
    for node in null:3 zero:5 full:7 random:8 urandom:9; do
        mknod -m 666 "$rootfs/dev/${node%%:*}" c 1 "${node#*:}"
    done
    mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs "$rootfs/tmp"
    mount -t tmpfs -o "mode=700,uid=$uid,gid=$gid,nosuid,nodev" tmpfs "$rootfs$cache"
    mount --bind "$repo/examples" "$rootfs$data"
    mount -o remount,bind,ro "$rootfs$data"
    local libs
    libs=$(env -i "$chroot" "$rootfs" ldd "${entry[0]}") || die "ldd ${entry[0]} failed in the image"
    if grep 'not found' <<< "$libs"; then die "${entry[0]} misses shared libraries in the image"; fi

    say "starting ${entry[*]} ${cmd[*]} as $uid:$gid (${env[*]})"
    setsid env -i "${env[@]}" "$chroot" --userspec="$uid:$gid" --groups="$gid" "$rootfs" \
        "${entry[@]}" "${cmd[@]}" > "$work/server.log" 2>&1 &
    local pid=$!
    echo "$pid" > "$work/server.pid"
    get() { curl -fsS --max-time 10 "http://127.0.0.1:$port$1"; }
    local deadline=$(( $(date +%s) + 30 ))
    until get /healthz > /dev/null 2>&1; do
        kill -0 "$pid" 2>/dev/null || { cat "$work/server.log"; die "the server exited before serving"; }
        [ "$(date +%s)" -lt "$deadline" ] || { cat "$work/server.log"; die "no /healthz in 30 s"; }
        sleep 0.2
    done
    head -1 "$work/server.log"

    local body
    body=$(get /healthz) || die "/healthz failed"
    [ "$body" = '{"status":"ok"}' ] || die "/healthz answered $body"
    say "ok /healthz: $body"
    body=$(get /readyz) || die "/readyz failed"
    say "ok /readyz: $body"

    body=$(get /v1/stores) || die "/v1/stores failed"
    local f n=0
    for f in "$repo"/examples/*.h5ad "$repo"/examples/*.h5mu "$repo"/examples/*.h5td "$repo"/examples/*.zarr; do
        [ -e "$f" ] || continue
        case $body in *"\"name\":\"${f##*/}\""*) n=$((n + 1));; *) die "/v1/stores lacks ${f##*/}: $body";; esac
    done
    [ "$n" -ge 4 ] || die "only $n example stores"
    say "ok /v1/stores: all $n examples"

    body=$(get /v1/stores/pbmc_small.h5mu/mod) || die "the modalities of pbmc_small.h5mu failed"
    case $body in *'"name":"rna"'*'"name":"prot"'*) ;; *) die "the modalities of pbmc_small.h5mu: $body";; esac
    say "ok /v1/stores/pbmc_small.h5mu/mod: $body"

    local h5ad zarr
    h5ad=$(get '/v1/stores/blood.h5ad/obs?rows=0:5') || die "obs of blood.h5ad failed"
    zarr=$(get '/v1/stores/blood.zarr/obs?rows=0:5') || die "obs of blood.zarr failed"
    case $h5ad in *'"index":["blood-000","blood-001","blood-002","blood-003","blood-004"]'*) ;;
        *) die "blood.h5ad obs rows 0:5: $h5ad";; esac
    [ "$h5ad" = "$zarr" ] || die "blood.zarr's obs differs from blood.h5ad's: $zarr"
    say "ok obs rows 0:5 of blood.h5ad (libhdf5, after its probe) and blood.zarr agree ($(echo "$h5ad" | wc -c) bytes)"

    body=$(get '/v1/stores/blood.h5ad/X?rows=0:2&cols=0:3') || die "X of blood.h5ad failed"
    case $body in '{"shape":[2,3],'*'"data":[['*) ;; *) die "X rows 0:2, cols 0:3: $body";; esac
    say "ok X rows 0:2, cols 0:3: $body"

    # The HDF5 stores were walked by probe processes (cellar --probe, started
    # from /proc/self/exe) before the server opened them.
    local probes_ok probes_bad
    body=$(get /metrics) || die "/metrics failed"
    probes_ok=$(sed -n 's/^cellar_probes_total{outcome="ok"} //p' <<< "$body")
    probes_bad=$(grep -E '^cellar_probes_total\{outcome="(crashed|timed_out|out_of_memory|not_run)"\} [1-9]' <<< "$body" || true)
    [ "${probes_ok:-0}" -ge 2 ] && [ -z "$probes_bad" ] || die "probes: ok ${probes_ok:-none}; $probes_bad"
    say "ok /metrics: $probes_ok HDF5 files walked by probe processes, none failed"

    # A CSR layer's column slice builds a column index in the background and
    # saves it in the cache dir (as the image's user, the root read-only).
    local state="" index=""
    deadline=$(( $(date +%s) + 20 ))
    while [ "$(date +%s)" -lt "$deadline" ]; do
        state=$(curl -fsS --max-time 10 -o /dev/null -D - \
            "http://127.0.0.1:$port/v1/stores/blood.h5ad/layers/counts?rows=0:3&cols=0:2" |
            tr -d '\r' | sed -n 's/^X-Column-Index: //Ip')
        index=$(find "$rootfs$cache" -type f -name '*.cix' -user "$uid" | head -1)
        case $state in ready*) [ -z "$index" ] || break;; esac
        sleep 0.2
    done
    case $state in ready*) ;; *) die "the column index is '$state'";; esac
    [ -n "$index" ] || die "no column index owned by $uid in the cache dir $cache"
    say "ok column index $state, saved as ${index#"$rootfs"}"

    local -a hc_argv
    case ${hc[0]:-} in
        CMD) hc_argv=("${hc[@]:1}");;
        CMD-SHELL) hc_argv=(/bin/sh -c "${hc[*]:1}");;
        *) die "the image has no HEALTHCHECK (${hc[*]:-none})";;
    esac
    env -i "${env[@]}" "$chroot" --userspec="$uid:$gid" --groups="$gid" "$rootfs" "${hc_argv[@]}" ||
        die "HEALTHCHECK ${hc_argv[*]} failed while the server serves"
    say "ok HEALTHCHECK ${hc_argv[*]}: exit 0"

    local t_stop rc=0 waited
    t_stop=$(date +%s)
    kill -TERM "$pid"
    deadline=$(( t_stop + ${drain%.*} ))
    while kill -0 "$pid" 2>/dev/null && [ "$(date +%s)" -le "$deadline" ]; do sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && die "still running $drain s after SIGTERM"
    wait "$pid" || rc=$?
    rm -f "$work/server.pid"
    waited=$(( $(date +%s) - t_stop ))
    [ "$rc" = 0 ] || { tail -5 "$work/server.log"; die "exit status $rc after SIGTERM"; }
    say "ok SIGTERM: exit 0 after ${waited} s (drain time ${drain} s); log ends: $(tail -1 "$work/server.log")"

    local hc_err
    if hc_err=$(env -i "${env[@]}" "$chroot" --userspec="$uid:$gid" --groups="$gid" "$rootfs" \
            "${hc_argv[@]}" 2>&1); then
        die "HEALTHCHECK exits 0 with the server stopped"
    fi
    say "ok HEALTHCHECK after the stop: exit non-zero ($hc_err)"
}

if [ "${1:-}" = --smoke ]; then
    smoke_work=$2
    trap 'if [ -f "$smoke_work/server.pid" ]; then kill -KILL "-$(cat "$smoke_work/server.pid")" 2>/dev/null; fi' EXIT
    smoke "$smoke_work"
    exit 0
fi

# ------------------------------------------------------------ build
engine=${IMAGE_CHECK_ENGINE:-podman}
missing=""
for c in mmdebstrap:mmdebstrap curl:curl ip:iproute2 python3:python3 "$engine:$engine"; do
    [ "$engine" != docker ] || [ "${c%%:*}" != mmdebstrap ] || continue
    command -v "${c%%:*}" >/dev/null 2>&1 || missing="$missing ${c#*:}"
done
if [ -n "$missing" ]; then
    [ "$engine" = podman ] || case $missing in *docker*) die "no docker command";; esac
    say "installing:$missing"
    apt-get update -qq
    # shellcheck disable=SC2086
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
fi

work=$(mktemp -d /var/tmp/cellar-image.XXXXXX)
mkdir -p "$work/rootfs" "$work/config"
case $engine in
podman)
    E=(podman --root "$work/storage" --runroot "$work/run" --storage-driver vfs)
    build_flags=(--format docker --isolation chroot --pull=never);;
docker)
    E=(docker)
    build_flags=();;
*) die "IMAGE_CHECK_ENGINE is podman or docker";;
esac
container=""

cleanup() {
    local rc=$? m
    set +e
    if [ -f "$work/server.pid" ]; then kill -KILL "-$(cat "$work/server.pid")" 2>/dev/null; fi
    [ -z "$container" ] || "${E[@]}" rm -f "$container" > /dev/null 2>&1
    "${E[@]}" rmi -f "$IMAGE" > /dev/null 2>&1
    [ "$engine" != podman ] || "${E[@]}" rmi -af > /dev/null 2>&1
    # deepest first, so that a mount is never left under a removed one
    for m in $(awk -v w="$work/" 'index($5, w) == 1 { print $5 }' /proc/self/mountinfo | sort -r); do
        umount "$m" 2>/dev/null || umount -l "$m"
    done
    if grep -q " $work/" /proc/self/mountinfo; then
        echo "image-check: mounts remain under $work, not removing it"
    elif [ "${IMAGE_CHECK_KEEP:-0}" = 1 ]; then
        echo "image-check: kept $work"
    else
        rm -rf --one-file-system "$work"
    fi
    say "$([ "$rc" = 0 ] && echo PASSED || echo "FAILED ($rc)")"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

if [ "$engine" = podman ]; then
    # debian:bookworm-slim as Docker's image is made: minbase, merged /usr
    # without the usrmerge package, no documentation, man pages or locales.
    base=${IMAGE_CHECK_BASE:-$work/base.tar}
    if [ ! -s "$base" ]; then
        say "mmdebstrap bookworm (minbase, slim's exclusions) into $base"
        mmdebstrap --quiet --format=tar --variant=minbase --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
            --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
            --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/groff/*' \
            --dpkgopt='path-exclude=/usr/share/info/*' --dpkgopt='path-exclude=/usr/share/lintian/*' \
            --dpkgopt='path-exclude=/usr/share/linda/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
            --dpkgopt='path-include=/usr/share/locale/locale.alias' \
            --aptopt='Acquire::Languages "none"' \
            bookworm "$base.part" \
            "deb http://deb.debian.org/debian bookworm main" \
            "deb http://deb.debian.org/debian bookworm-updates main" \
            "deb http://deb.debian.org/debian-security bookworm-security main" > "$work/mmdebstrap.log" 2>&1 ||
            { tail -20 "$work/mmdebstrap.log"; die "mmdebstrap failed"; }
        mv "$base.part" "$base"
    fi
    "${E[@]}" import --change 'CMD ["bash"]' "$base" docker.io/library/debian:bookworm-slim > /dev/null 2>&1 ||
        die "podman import of $base failed"
    say "debian:bookworm-slim imported: $("${E[@]}" image inspect --format '{{.Size}}' \
        docker.io/library/debian:bookworm-slim | awk '{ printf "%.1f MB", $1 / 1e6 }')"
fi

say "$engine build ${build_flags[*]} -f docker/Dockerfile $repo"
"${E[@]}" build "${build_flags[@]}" -f "$repo/docker/Dockerfile" -t "$IMAGE" "$repo" > "$work/build.log" 2>&1 ||
    { tail -40 "$work/build.log"; die "the build failed"; }
size=$("${E[@]}" image inspect --format '{{.Size}}' "$IMAGE")
[ "$size" -lt "$MAX_IMAGE_BYTES" ] ||
    die "the image is $size bytes, over $MAX_IMAGE_BYTES"
say "ok image $IMAGE: $(awk -v s="$size" 'BEGIN { printf "%.1f MB", s / 1e6 }') ($size bytes, under $MAX_IMAGE_BYTES)"

# The image's config, one value a line, for the smoke test (podman keeps
# the HEALTHCHECK beside the config, docker in it).
"${E[@]}" image inspect "$IMAGE" | python3 -c '
import json, os, sys
image = json.load(sys.stdin)[0]
config = image["Config"]
health = image.get("Healthcheck") or config.get("Healthcheck") or {}
values = {
    "entrypoint": config.get("Entrypoint") or [],
    "cmd": config.get("Cmd") or [],
    "env": config.get("Env") or [],
    "exposed": sorted(config.get("ExposedPorts") or {}),
    "healthcheck": health.get("Test") or [],
    "user": [config.get("User") or ""],
    "stopsignal": [config.get("StopSignal") or ""],
    "workdir": [config.get("WorkingDir") or ""],
}
for name, lines in values.items():
    with open(os.path.join(sys.argv[1], name), "w") as f:
        f.writelines(line + "\n" for line in lines)
' "$work/config"
[ -z "$(tr -d '/\n' < "$work/config/workdir")" ] || die "the image sets a WORKDIR; the smoke test runs in /"

container=$("${E[@]}" create --no-healthcheck "$IMAGE")
"${E[@]}" export "$container" | tar -x -C "$work/rootfs" --numeric-owner
"${E[@]}" rm "$container" > /dev/null
container=""
say "exported the image's filesystem ($(du -sm "$work/rootfs" | cut -f1) MB)"

unshare --net bash "$0" --smoke "$work"
