# shellcheck shell=bash
# tests/lib/ports.sh: loopback ports for tests that cannot be taken from under them.
#
# A port is picked in 20000-31999, below the kernel's ephemeral range (32768-60999 on Linux), so
# no outgoing connection of another process is ever given it between the pick and the bind (a
# port from bind(0) can be, and a server then fails with "Address already in use"). Concurrent
# tests do not pick the same port: each pick is reserved by a directory under TG_PORTS_DIR that
# names its owner shell; a reservation whose owner is gone is taken back.
#
#   tg_port_take LIST      print a free port, reserved, and append it to the file LIST
#   tg_ports_release LIST  release every port LIST names (by this shell), then empty LIST

TG_PORTS_DIR=${TG_PORTS_DIR:-/tmp/tollgate-ports}

# _tg_alive PID: 0 when PID is a live process (not a zombie).
_tg_alive() {
    local pid=$1 line state
    [ -n "$pid" ] && [ -e "/proc/$pid" ] || return 1
    { read -r line <"/proc/$pid/stat"; } 2>/dev/null || return 1
    state=${line##*) }
    state=${state%% *}
    [ -n "$state" ] && [ "$state" != "Z" ] && [ "$state" != "X" ]
}

# _tg_port_busy PORT: 0 when any TCP socket uses PORT locally (listening or not).
_tg_port_busy() {
    local out
    out=$(ss -tanH "( sport = :$1 )" 2>/dev/null) || return 0
    [ -n "$out" ]
}

# _tg_port_reserve PORT LIST: 0 when this shell now holds the reservation of PORT (noted in LIST).
_tg_port_reserve() {
    local port=$1 list=$2 d owner
    d=$TG_PORTS_DIR/$port
    mkdir -p "$TG_PORTS_DIR" 2>/dev/null || true
    chmod 1777 "$TG_PORTS_DIR" 2>/dev/null || true
    if ! mkdir "$d" 2>/dev/null; then
        # Reclaim a reservation whose owner shell is gone.
        owner=$(cat "$d/owner" 2>/dev/null || true)
        if [ -n "$owner" ] && ! _tg_alive "$owner"; then
            rm -rf "$d"
            mkdir "$d" 2>/dev/null || return 1
        else
            return 1
        fi
    fi
    printf '%s\n' "$$" >"$d/owner"
    printf '%s\n' "$port" >>"$list"
}

_tg_port_release() {
    local port=$1 d
    d=$TG_PORTS_DIR/$port
    if [ "$(cat "$d/owner" 2>/dev/null || true)" = "$$" ]; then
        rm -rf "$d"
    fi
}

tg_port_take() {
    local list=$1 i port
    for ((i = 0; i < 200; i++)); do
        port=$((20000 + (RANDOM * 32768 + RANDOM) % 12000))
        _tg_port_busy "$port" && continue
        _tg_port_reserve "$port" "$list" || continue
        if _tg_port_busy "$port"; then
            _tg_port_release "$port"
            continue
        fi
        printf '%s\n' "$port"
        return 0
    done
    printf 'tollgate-ports: no free port found in 20000-31999\n' >&2
    return 1
}

tg_ports_release() {
    local list=$1 p
    [ -f "$list" ] || return 0
    while read -r p; do
        [ -n "$p" ] && _tg_port_release "$p"
    done <"$list"
    : >"$list"
}
