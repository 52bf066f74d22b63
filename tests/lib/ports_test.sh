#!/usr/bin/env bash
# ports_test: tests/lib/ports.sh, the loopback ports every test script takes.
#
# Regression (router_stress_port_taken): the scripts took a port from bind(0) and closed it; the
# port was in the ephemeral range, so an outgoing connection of a test running beside it could be
# given the same port before router-svc bound it ("bind: Address already in use").
set -euo pipefail

src=${TG_SOURCE_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
tmp=$(mktemp -d /tmp/tollgate-ports-test.XXXXXX)
listener=
cleanup() {
    [ -n "$listener" ] && kill "$listener" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
export TG_PORTS_DIR=$tmp/reservations
# shellcheck source=tests/lib/ports.sh
. "$src/tests/lib/ports.sh"

fails=0
check() { # DESC CMD...
    local desc=$1
    shift
    if "$@"; then
        echo "ok   $desc"
    else
        echo "FAIL $desc"
        fails=$((fails + 1))
    fi
}

read -r lo _ </proc/sys/net/ipv4/ip_local_port_range
list=$tmp/ports.list
taken=()
for _ in $(seq 1 40); do
    taken+=("$(tg_port_take "$list")")
done
below=1
for p in "${taken[@]}"; do
    [ "$p" -ge 20000 ] && [ "$p" -lt 32000 ] && [ "$p" -lt "$lo" ] || below=0
done
check "every port below the ephemeral range (starts at $lo)" test "$below" = 1
check "40 takes, 40 different ports" \
    test "$(printf '%s\n' "${taken[@]}" | sort -u | wc -l)" = 40
check "each is listed" test "$(wc -l <"$list")" = 40
check "each is reserved by this shell" \
    test "$(cat "$TG_PORTS_DIR/${taken[0]}/owner")" = "$$"

# A port another live shell holds is not given out; one whose owner is gone is taken back.
mkdir -p "$TG_PORTS_DIR/21000"
echo 1 >"$TG_PORTS_DIR/21000/owner" # init: alive as long as the machine is
check "a live owner's reservation is refused" eval '! _tg_port_reserve 21000 "$list"'
gone=$(bash -c 'echo $$')
mkdir -p "$TG_PORTS_DIR/21001"
echo "$gone" >"$TG_PORTS_DIR/21001/owner"
check "a dead owner's reservation is taken back" _tg_port_reserve 21001 "$list"
check "and is then this shell's" test "$(cat "$TG_PORTS_DIR/21001/owner")" = "$$"

# A port with a listener counts as busy, and so is never handed out.
python3 - "$tmp/listen.port" <<'PY' &
import socket, sys, time
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen(1)
open(sys.argv[1], "w").write(str(s.getsockname()[1]))
time.sleep(30)
PY
listener=$!
for _ in $(seq 1 100); do
    [ -s "$tmp/listen.port" ] && break
    sleep 0.1
done
check "a listening port is busy" _tg_port_busy "$(cat "$tmp/listen.port")"
check "a taken, unbound port is not" eval '! _tg_port_busy "${taken[1]}"'

tg_ports_release "$list"
left=$(find "$TG_PORTS_DIR" -mindepth 1 -maxdepth 1 | wc -l)
check "release leaves only the other owner's reservation" test "$left" = 1
check "release empties the list" test ! -s "$list"

if [ "$fails" -ne 0 ]; then
    echo "ports_test: $fails failed"
    exit 1
fi
echo "ports_test: all passed"
