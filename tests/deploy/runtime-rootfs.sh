#!/usr/bin/env bash
# Runs the runtime stage of each Dockerfile without a container engine: a Debian 12 minbase
# root filesystem (debootstrap) gets the stage's own RUN commands, the built binary where its
# COPY puts it, and the service is started the way Kubernetes starts it: as the image's USER,
# with its ENTRYPOINT, on a read-only root with tmpfs spool and /tmp, and the configuration the
# chart renders. Checks: --check accepts the configuration, liveness answers 200 with every
# dependency unreachable, SIGTERM ends the process with status 0 within its grace period.
#
# Not part of the default test run (needs root, debootstrap and Debian's package mirror, about a
# minute). Run it after tests/deploy/check.sh (which renders the configurations) and a build:
#   TG_BUILD_DIR=build bash tests/deploy/runtime-rootfs.sh
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
build_dir="${TG_REL_BUILD_DIR:-${TG_BUILD_DIR:-$root/build}}"
cache="$here/.cache"
base="$cache/rootfs-base"
configs="$cache/rendered/defaults.configs"
passed=0
failed=0
ok() { passed=$((passed + 1)); echo "ok   $*"; }
bad() { failed=$((failed + 1)); echo "FAIL $*"; }
die() { echo "FAIL $*" >&2; echo "$passed passed, $((failed + 1)) failed"; exit 1; }

[ "$(id -u)" = 0 ] || die "needs root (debootstrap, chroot, mount namespaces)"
for tool in debootstrap unshare chroot curl jq strip; do
    command -v "$tool" >/dev/null || die "$tool is not installed"
done
[ -f "$configs/router.yaml" ] && [ -f "$configs/spend.yaml" ] || die "run tests/deploy/check.sh first (no rendered configurations in $configs)"

if [ ! -x "$base/bin/sh" ]; then
    rm -rf "$base"
    echo "debootstrap --variant=minbase bookworm $base"
    debootstrap --variant=minbase bookworm "$base" >"$cache/debootstrap.log" 2>&1 \
        || die "debootstrap failed: $(tail -3 "$cache/debootstrap.log")"
fi

# Instructions of the last stage of a Dockerfile, continuation lines joined, one per line.
runtime_stage() {
    awk '
        /^FROM / { n++; buf = ""; delete lines; c = 0; next }
        { line = $0 }
        line ~ /^[ \t]*#/ { next }
        {
            if (line ~ /\\[ \t]*$/) { sub(/\\[ \t]*$/, " ", line); buf = buf line; next }
            buf = buf line
            if (buf ~ /[^ \t]/) lines[++c] = buf
            buf = ""
        }
        END { for (i = 1; i <= c; i++) print lines[i] }' "$1"
}

free_port() {
    local p
    for _ in $(seq 1 50); do
        p=$((20000 + RANDOM % 20000))
        ss -ltn "sport = :$p" | grep -q LISTEN || { echo "$p"; return; }
    done
    echo 0
}

for svc in router-svc spend-svc; do
    df="$root/deploy/docker/$svc.Dockerfile"
    bin="$build_dir/$svc/$svc"
    [ -x "$bin" ] || { bad "$svc: no binary at $bin"; continue; }
    fs="$cache/rootfs-$svc"
    rm -rf "$fs"
    cp -a "$base" "$fs"
    cp /etc/resolv.conf "$fs/etc/resolv.conf"
    user=""; entry=""; envs=()
    stage_ok=1
    while IFS= read -r ins; do
        case "$ins" in
            ENV\ *) envs+=("${ins#ENV }") ;;
            RUN\ *)
                if ! unshare -m --propagation private sh -c \
                    "mount -t proc proc '$fs/proc' && exec chroot '$fs' env ${envs[*]} /bin/sh -c '${ins#RUN }'" \
                    >"$cache/rootfs-$svc.log" 2>&1; then
                    bad "$svc: RUN failed: $(tail -3 "$cache/rootfs-$svc.log")"
                    stage_ok=0
                    break
                fi
                ;;
            COPY\ --from=build\ *)
                dest="$(awk '{ print $NF }' <<<"$ins")"
                install -D -m 0755 "$bin" "$fs$dest" && strip --strip-unneeded "$fs$dest"
                ;;
            USER\ *) user="${ins#USER }" ;;
            ENTRYPOINT\ *) entry="${ins#ENTRYPOINT }" ;;
        esac
    done < <(runtime_stage "$df")
    [ "$stage_ok" = 1 ] || continue
    mapfile -t argv < <(jq -r '.[]' <<<"$entry")
    [ "${#argv[@]}" -ge 3 ] || { bad "$svc: ENTRYPOINT not parsed: $entry"; continue; }
    missing="$(chroot "$fs" ldd "${argv[0]}" 2>&1 | grep 'not found')"
    if [ -z "$missing" ]; then
        ok "$svc: runtime stage installs every library ${argv[0]} needs"
    else
        bad "$svc: libraries missing in the runtime stage: $missing"
        continue
    fi

    # The chart's configuration, on loopback: listen on a free port, Kafka on a closed port.
    cfg_name="$(basename "${argv[2]}")"
    port="$(free_port)"
    sed -e "s|listen: 0.0.0.0:[0-9]*|listen: 127.0.0.1:$port|" \
        -e "s|brokers: .*|brokers: 127.0.0.1:1|" \
        -e "s|url: redis://.*|url: redis://127.0.0.1:1/0|" \
        "$configs/$cfg_name" >"$fs${argv[2]}"
    envfile="$configs/${cfg_name%.yaml}.env"
    run() {
        # Read-only root, writable spool and /tmp (emptyDir), the image's user.
        unshare -m --propagation private bash -c '
            fs="$1"; envfile="$2"; user="$3"; shift 3
            mount --bind "$fs" "$fs" && mount -o remount,bind,ro "$fs" || exit 90
            mount -t proc proc "$fs/proc"
            if [ -d "$fs/var/lib/tollgate/spool" ]; then
                mount -t tmpfs -o uid=10001,gid=10001,mode=0750,size=64m tmpfs "$fs/var/lib/tollgate/spool" || exit 91
            fi
            mount -t tmpfs -o mode=1777,size=16m tmpfs "$fs/tmp" || exit 92
            set -a; . "$envfile"; set +a
            export TOLLGATE_SHUTDOWN_GRACE_S=5
            export DATABASE_URL=postgresql://tollgate@127.0.0.1:1/tollgate  # nothing listens there
            exec chroot --userspec="$user" "$fs" "$@"' _ "$fs" "$envfile" "$user" "$@"
    }
    if run "${argv[@]}" --check >"$cache/rootfs-$svc.check.log" 2>&1; then
        ok "$svc: $(tail -1 "$cache/rootfs-$svc.check.log")"
    else
        bad "$svc --check in the runtime root: $(tail -3 "$cache/rootfs-$svc.check.log")"
        continue
    fi
    run "${argv[@]}" >"$cache/rootfs-$svc.run.log" 2>&1 &
    pid=$!
    code=000
    for _ in $(seq 1 50); do
        code="$(curl -s -o /dev/null -m 2 -w '%{http_code}' "http://127.0.0.1:$port/health/liveness")"
        [ "$code" = 200 ] && break
        sleep 0.2
    done
    ready="$(curl -s -m 2 -w ' %{http_code}' "http://127.0.0.1:$port/health/readiness")"
    spid="$(pgrep -u 10001 -f -- "^${argv[0]} --config" | head -1)"
    if [ "$code" = 200 ]; then
        ok "$svc: liveness 200 from pid ${spid:-?} (uid 10001) on a read-only root, every dependency unreachable (readiness: $ready)"
    else
        bad "$svc: liveness answered $code: $(tail -3 "$cache/rootfs-$svc.run.log")"
    fi
    [ -n "$spid" ] && kill -TERM "$spid" 2>/dev/null
    status=124
    for _ in $(seq 1 100); do
        if ! kill -0 "$pid" 2>/dev/null; then
            wait "$pid"
            status=$?
            break
        fi
        sleep 0.1
    done
    if [ "$status" = 0 ]; then
        ok "$svc: SIGTERM -> exit 0"
    else
        [ -n "$spid" ] && kill -KILL "$spid" 2>/dev/null
        wait "$pid" 2>/dev/null
        bad "$svc: SIGTERM -> status $status (124: still running after 10 s)"
    fi
    rm -rf "$fs"
done

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
