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
    ca-certificates
)

# tg_deps_missing: print the missing package names, one per line.
tg_deps_missing() {
    local p installed
    # One dpkg-query for the whole list; unknown packages simply do not show up as installed.
    installed=" $(dpkg-query -W -f='${Package}:${db:Status-Status} ' "${TG_DEPS_PACKAGES[@]}" \
        2>/dev/null | tr ' ' '\n' | sed -n 's/^\([^:]*\)\(:[a-z0-9]*\)\{0,1\}:installed$/\1/p' |
        tr '\n' ' ')"
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
    local missing
    mapfile -t missing < <(tg_deps_missing)
    [ "${#missing[@]}" -eq 0 ] && return 0
    echo "tollgate: installing missing packages: ${missing[*]}" >&2
    if [ "$(id -u)" -ne 0 ]; then
        echo "tollgate: installing packages needs root (run as root or install them yourself)" >&2
        return 1
    fi
    DEBIAN_FRONTEND=noninteractive apt-get update -q || return 1
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" ||
        return 1
}
