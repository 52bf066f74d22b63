#!/usr/bin/env bash
# deps_test: the install step of tests/run and deploy/local/up, against stand-ins for dpkg-query,
# apt-get and id on PATH, under the callers' own shell options (set -euo pipefail).
#
# Regression (install_step_sees_nothing_missing): dpkg-query exits 1 when any package of the list
# is unknown to dpkg — the normal case on a fresh machine — and that used to end tg_deps_missing
# inside a process substitution before it printed anything, so tg_install_deps saw "nothing
# missing" and installed nothing.
set -euo pipefail

src=${TG_SOURCE_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
tmp=$(mktemp -d /tmp/tollgate-deps-test.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail=0
bad() {
    echo "FAIL: $*" >&2
    fail=1
}

# Stand-ins. dpkg-query reports every package installed except those listed in $tmp/absent, which
# it does not know at all (like a fresh machine): "no packages found" on stderr, exit 1.
mkdir -p "$tmp/bin"
cat >"$tmp/bin/dpkg-query" <<'EOF'
#!/usr/bin/env bash
absent=" $(cat "$TG_FAKE_DIR/absent" 2>/dev/null | tr '\n' ' ') "
[ -f "$TG_FAKE_DIR/dpkg-broken" ] && exit 2
rc=0
shift 2 # -W -f=FORMAT
for p in "$@"; do
    case "$absent" in
    *" $p "*) echo "dpkg-query: no packages found matching $p" >&2; rc=1 ;;
    *) printf '%s:installed ' "$p" ;;
    esac
done
exit $rc
EOF
cat >"$tmp/bin/apt-get" <<'EOF'
#!/usr/bin/env bash
echo "$*" >>"$TG_FAKE_DIR/apt-get.calls"
EOF
cat >"$tmp/bin/id" <<'EOF'
#!/usr/bin/env bash
echo 0
EOF
chmod +x "$tmp/bin/"*
export TG_FAKE_DIR=$tmp

# run_install: source deps.sh and call tg_install_deps the way the callers do. Prints its status.
run_install() {
    rm -f "$tmp/apt-get.calls"
    env PATH="$tmp/bin:$PATH" bash -c '
        set -euo pipefail
        source "$1/tests/lib/deps.sh"
        # nodejs/npm are judged by command -v; the stand-in dir hides nothing else
        command() { if [ "$1" = -v ] && { [ "$2" = node ] || [ "$2" = npm ]; }; then return 1; fi; builtin command "$@"; }
        tg_install_deps
        echo "after-install"
    ' _ "$src" >"$tmp/out" 2>&1 && echo 0 || echo $?
}

# 1. one package unknown to dpkg: the install must be attempted, with that package
printf 'libcmocka-dev\n' >"$tmp/absent"
rc=$(run_install)
[ "$rc" = 0 ] || bad "missing package: tg_install_deps failed ($rc): $(cat "$tmp/out")"
grep -q "^install .*libcmocka-dev" "$tmp/apt-get.calls" 2>/dev/null ||
    bad "install_step_sees_nothing_missing: apt-get install was not called with libcmocka-dev ($(cat "$tmp/apt-get.calls" 2>/dev/null))"
grep -q "^update" "$tmp/apt-get.calls" 2>/dev/null || bad "apt-get update was not run first"
[ "$(head -n 1 "$tmp/apt-get.calls" 2>/dev/null | cut -d' ' -f1)" = update ] ||
    bad "apt-get update is not the first call"
grep -q "after-install" "$tmp/out" || bad "the caller did not go on after the install"

# 2. several missing, among them the first and the last of the list: all of them, nothing else
printf 'build-essential\nclang\nmaven\n' >"$tmp/absent"
rc=$(run_install)
[ "$rc" = 0 ] || bad "several missing: failed ($rc)"
inst=$(grep '^install' "$tmp/apt-get.calls" || true)
for p in build-essential clang maven; do
    grep -qw -- "$p" <<<"$inst" || bad "several missing: $p not installed ($inst)"
done
grep -qw -- libcmocka-dev <<<"$inst" && bad "several missing: a present package was installed"

# 3. nothing missing: no apt-get at all
: >"$tmp/absent"
rc=$(run_install)
[ "$rc" = 0 ] || bad "nothing missing: failed ($rc)"
[ ! -s "$tmp/apt-get.calls" ] || bad "nothing missing: apt-get was called: $(cat "$tmp/apt-get.calls")"

# 4. dpkg-query broken (exit 2, no output): every package is reported missing, never "none"
touch "$tmp/dpkg-broken"
rc=$(run_install)
[ "$rc" = 0 ] || bad "dpkg-query broken: failed ($rc)"
grep -q '^install .*cmake' "$tmp/apt-get.calls" 2>/dev/null ||
    bad "dpkg-query broken: the install was not attempted"
rm -f "$tmp/dpkg-broken"

# 5. the callers source deps.sh under set -euo pipefail and call tg_install_deps directly
for caller in tests/run deploy/local/up; do
    grep -q '^set -euo pipefail' "$src/$caller" || bad "$caller: not under set -euo pipefail"
    grep -q 'tg_install_deps' "$src/$caller" || bad "$caller: does not call tg_install_deps"
done

[ "$fail" = 0 ] && echo "deps_test: ok"
exit $fail
