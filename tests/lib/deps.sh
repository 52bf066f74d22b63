# shellcheck shell=bash
# tests/lib/deps.sh: install the Debian packages Tollgate needs, only when some are missing.
#
#   source tests/lib/deps.sh
#   tg_install_deps            # quiet when everything is present; needs root otherwise
#
# Node.js and npm count as present when `node` / `npm` are on PATH (they are often installed
# outside dpkg, e.g. from a vendor package that bundles npm and conflicts with Debian's).

TG_DEPS_PACKAGES=(
    build-essential cmake pkg-config git
    libmicrohttpd-dev libcurl4-openssl-dev librdkafka-dev libjansson-dev libhiredis-dev
    libpq-dev libyaml-dev libssl-dev libcmocka-dev
    redis-server postgresql-15 postgresql-client-15
    curl jq procps iproute2 nginx-light clang libclang-rt-14-dev wrk nodejs npm unzip yamllint
    ca-certificates libhttp-parser-dev default-jre-headless maven nghttp2-server python3 openssl
    tzdata
)

# tg_deps_missing: print the missing package names, one per line. Safe under the callers'
# `set -euo pipefail`: dpkg-query exits 1 when any package of the list is unknown to dpkg (the
# usual case on a fresh machine), and that status must not end the function before it printed
# what is missing.
tg_deps_missing() {
    local p installed status
    # One dpkg-query for the whole list; unknown packages simply do not show up as installed.
    status=$(dpkg-query -W -f='${Package}:${db:Status-Status} ' "${TG_DEPS_PACKAGES[@]}" \
        2>/dev/null) || true
    installed=" $(printf '%s' "$status" | tr ' ' '\n' |
        sed -n 's/^\([^:]*\)\(:[a-z0-9]*\)\{0,1\}:installed$/\1/p' | tr '\n' ' ')"
    for p in "${TG_DEPS_PACKAGES[@]}"; do
        case "$p" in
        nodejs) command -v node >/dev/null 2>&1 && continue ;;
        npm) command -v npm >/dev/null 2>&1 && continue ;;
        esac
        case "$installed" in
        *" $p "*) ;;
        *) printf '%s\n' "$p" ;;
        esac
    done
}

# tg_install_deps: apt-get update + install of the missing packages; nothing when none are.
# Returns non-zero (with a message) when installation fails or root is needed.
tg_install_deps() {
    local missing list
    # Not `mapfile < <(tg_deps_missing)`: a process substitution's failure is invisible, which is
    # how a failing check once read as "nothing missing".
    list=$(tg_deps_missing) || {
        echo "tollgate: cannot tell which packages are missing (dpkg-query failed)" >&2
        return 1
    }
    [ -z "$list" ] && return 0
    mapfile -t missing <<<"$list"
    echo "tollgate: installing missing packages: ${missing[*]}" >&2
    if [ "$(id -u)" -ne 0 ]; then
        echo "tollgate: installing packages needs root (run as root or install them yourself)" >&2
        return 1
    fi
    DEBIAN_FRONTEND=noninteractive apt-get update -q || return 1
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" ||
        return 1
}
