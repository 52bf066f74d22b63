# shellcheck shell=bash
# tests/lib/nofork.sh: waiting, clocks and HTTP probes that start no process. Sourced by
# services.sh and by the tests that measure a service while they poll it.

# The helpers that wait poll while scenarios measure latency and CPU on a 2-core machine, so
# the polling itself starts no process: a fork and exec of date, awk or sleep costs about 2 ms
# of CPU each on a virtual machine, ten times a second is a tenth of a CPU beside the service
# under test. Time comes from bash's EPOCHREALTIME, /proc is read with read, and _tg_sleep
# waits on a FIFO that nobody writes to.

# _tg_now_ms: milliseconds since the epoch, printed. _tg_now_ms_set sets _TG_NOW_MS instead
# (no subshell).
_tg_now_ms_set() {
    local t=${EPOCHREALTIME/[.,]/}
    _TG_NOW_MS=$((10#$t / 1000))
}
_tg_now_ms() {
    _tg_now_ms_set
    printf '%s\n' "$_TG_NOW_MS"
}

# _tg_sleep SECONDS: sleep (fractions allowed) without starting a process. The FIFO is opened
# once per shell (a background subshell opens its own); processes started later inherit the
# descriptor and, as nobody writes to it, never see a byte.
_tg_sleep() {
    if [ -z "${_TG_SLEEP_FD:-}" ] || ! [ -e "/proc/$BASHPID/fd/$_TG_SLEEP_FD" ]; then
        local fifo
        fifo=$(mktemp -u "${TMPDIR:-/tmp}/tollgate-sleep.XXXXXX")
        mkfifo -m 600 "$fifo" || { sleep "$1"; return 0; }
        exec {_TG_SLEEP_FD}<>"$fifo"
        rm -f "$fifo"
    fi
    read -r -t "$1" -u "$_TG_SLEEP_FD" _ || true
}

# _tg_rss_kb_set PID: sets _TG_RSS_KB to the process's resident set in kB (0 when it is gone),
# read from /proc with read.
_tg_rss_kb_set() {
    local k v
    _TG_RSS_KB=0
    while read -r k v _; do
        if [ "$k" = VmRSS: ]; then
            _TG_RSS_KB=$v
            return 0
        fi
    done 2>/dev/null <"/proc/$1/status" || true
}

# _tg_cpu_ns_set PID: sets _TG_CPU_NS to the CPU time the process's threads have run, in ns
# (their /proc schedstat), or -1 when it is gone.
_tg_cpu_ns_set() {
    local f a
    _TG_CPU_NS=0
    for f in /proc/"$1"/task/*/schedstat; do
        { read -r a _ <"$f"; } 2>/dev/null && _TG_CPU_NS=$((_TG_CPU_NS + a))
    done
    [ -d "/proc/$1" ] || _TG_CPU_NS=-1
}

# tg_http_get URL [SECONDS]: GET over bash's /dev/tcp, for the same reason (a probe of curl
# and sleep ten times a second is the fork and exec above). Plain http to ADDRESS:PORT only;
# HTTP/1.0, so the server closes after its answer and the body ends there. SECONDS bounds
# each read (2). Sets TG_HTTP_STATUS (000 when nothing answered) and TG_HTTP_BODY.
tg_http_get() {
    local url=${1#http://} t=${2:-2} hp path fd line status=000 body=""
    hp=${url%%/*}
    path=/
    [ "$hp" = "$url" ] || path=/${url#*/}
    if { exec {fd}<>"/dev/tcp/${hp%:*}/${hp##*:}"; } 2>/dev/null; then
        printf 'GET %s HTTP/1.0\r\nHost: %s\r\n\r\n' "$path" "$hp" >&"$fd" 2>/dev/null || true
        if IFS= read -r -t "$t" -u "$fd" line; then
            [[ $line =~ ^HTTP/1\.[01]\ ([0-9]{3}) ]] && status=${BASH_REMATCH[1]}
            while IFS= read -r -t "$t" -u "$fd" line && [ -n "${line%$'\r'}" ]; do :; done
            while IFS= read -r -t "$t" -u "$fd" line || [ -n "$line" ]; do body+=$line$'\n'; done
        fi
        exec {fd}<&-
    fi
    TG_HTTP_STATUS=$status
    TG_HTTP_BODY=$body
}
