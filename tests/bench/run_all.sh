#!/usr/bin/env bash
# run_all: every benchmark of tests/bench, then ONE markdown summary table of the figures that
# matter (router-svc vs nginx and vs direct, added latency, CPU and RSS per request, RSS per
# 1,000 in-flight streams, spool appends/s and added p99, spend-svc events/s). The summary,
# followed by each bench's own tables, is also written to bench-results.md in the build
# directory; every bench's full output is kept in bench-logs/ there.
#
#   run_all.sh [--repeats N] [--only "router spool streams spend"]
#
# Benches: tests/bench/router_*.sh and spend_*.sh when present, spool_bench (C) and
# streams_bench.sh. Figures are medians of N repeats (default 3, TG_BENCH_REPEATS) where the
# bench supports repeats: router_bench runs N interleaved rounds itself (RT_BENCH_ROUNDS),
# spool_bench and streams_bench take --repeats, spend_bench is run N times (override with
# TG_BENCH_SPEND_REPEATS). The machine may be shared: compare ratios, not absolute figures.
#
# Binaries come from TG_BENCH_BUILD_DIR, else TG_REL_BUILD_DIR (tests/run exports its optimised
# build there: ctest itself runs in the sanitizer build, whose figures mean nothing), else
# TG_BUILD_DIR. Exits non-zero when a bench fails (a functional failure, never a figure).
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
export TG_SOURCE_DIR=${TG_SOURCE_DIR:-$ROOT}

REPEATS=${TG_BENCH_REPEATS:-3}
ONLY="router spool streams spend"
while [ $# -gt 0 ]; do
    case $1 in
    --repeats) REPEATS=$2; shift ;;
    --only) ONLY=$2; shift ;;
    -h | --help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "run_all: unknown option '$1' (see --help)" >&2; exit 2 ;;
    esac
    shift
done
SPEND_REPEATS=${TG_BENCH_SPEND_REPEATS:-$REPEATS}

CTEST_BUILD=${TG_BUILD_DIR:-}
BUILD=${TG_BENCH_BUILD_DIR:-${TG_REL_BUILD_DIR:-${TG_BUILD_DIR:-}}}
[ -n "$BUILD" ] && [ -d "$BUILD" ] || { echo "run_all: no build directory (set TG_BUILD_DIR)" >&2; exit 2; }
BUILD=$(cd "$BUILD" && pwd)
export TG_BUILD_DIR=$BUILD
BUILD_TYPE=$(awk -F= '/^CMAKE_BUILD_TYPE:/ {print $2}' "$BUILD/CMakeCache.txt" 2>/dev/null)
SANITIZE=$(awk -F= '/^TG_SANITIZE:/ {print $2}' "$BUILD/CMakeCache.txt" 2>/dev/null)
LOGS=$BUILD/bench-logs
mkdir -p "$LOGS"
RESULTS=$BUILD/bench-results.md
LOAD0=$(cut -d' ' -f1 /proc/loadavg)
STARTED=$(date -u +%Y-%m-%dT%H:%MZ)
FAILED=()

log() { echo "[run_all $(date -u +%H:%M:%S)] $*" >&2; }
wants() { case " $ONLY " in *" $1 "*) return 0 ;; esac; return 1; }
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR] = $1} END {if (NR) print a[int((NR + 1) / 2)]}'; }
# md_cell FILE LABEL HEADER: in the markdown tables of FILE, the cell of the row whose first
# cell is LABEL, in the column whose header starts with HEADER (columns found by name, so a
# bench may add columns)
md_cell() {
    awk -F'|' -v l="$2" -v h="$3" '
        function trim(s) { gsub(/^ +| +$/, "", s); return s }
        /^\|/ {
            if (inrow && $0 ~ /^\|[-: |]+$/) {
                n = split(prev, hs, "|"); col = 0
                for (i = 3; i < n; i++) if (index(trim(hs[i]), h) == 1) { col = i; break }
            } else if (col && trim($2) == l) { print trim($col); exit }
            prev = $0; inrow = 1; next
        }
        { inrow = 0; col = 0 }' "$1" 2>/dev/null
}
first_word() { awk '{print $1}'; }
num_or_na() { if [ -n "$1" ]; then echo "$1"; else echo "n/a"; fi; }
calc() { awk "BEGIN { printf \"$1\", $2 }" 2>/dev/null; }
# run_bench NAME LOG CMD...: runs one bench, its output to LOG (and the terminal's stderr)
run_bench() {
    local name=$1 logf=$2 rc
    shift 2
    log "$name: $*"
    "$@" >"$logf" 2>&1
    rc=$?
    if [ "$rc" -ne 0 ]; then
        FAILED+=("$name")
        log "$name FAILED (exit $rc), last lines of $logf:"
        tail -n 15 "$logf" | sed 's/^/    | /' >&2
    fi
    return "$rc"
}
# tables LOG: the markdown lines (tables and their titles) of a bench's output
tables() {
    awk 'function gap() { if (!blank) print ""; blank = 1 }
         /^###/ { gap(); print; blank = 0; gap(); t = 0; next }
         /^\|/ { if (!t) gap(); print; blank = 0; t = 1; next }
         { t = 0 }' "$1" 2>/dev/null
}

log "build $BUILD (${BUILD_TYPE:-?}${SANITIZE:+, TG_SANITIZE=$SANITIZE}), repeats $REPEATS, load average $LOAD0"
[ "$SANITIZE" = ON ] && log "WARNING: a sanitizer build: the figures are not meaningful"
DETAILS=$LOGS/details.md
: >"$DETAILS"

# ---------------------------------------------------------------------------- router-svc
R_NGINX= R_DIRECT= R_P50= R_P99= R_CPU= R_CPU_NGINX= R_RSS= R_RSS_NGINX= R_RPS= R_NOTE=
if wants router; then
    found=0
    for s in "$HERE"/router_*.sh; do
        [ -f "$s" ] || continue
        found=1
        n=$(basename "$s" .sh)
        RT_BENCH_ROUNDS=$REPEATS run_bench "$n" "$LOGS/$n.log" bash "$s"
        tables "$LOGS/$n.log" >>"$DETAILS"
    done
    if [ "$found" = 1 ] && [ -f "$LOGS/router_bench.log" ]; then
        L=$LOGS/router_bench.log
        R_NGINX=$(md_cell "$L" "router / nginx throughput" value)
        R_DIRECT=$(md_cell "$L" "router / direct throughput" value)
        R_RPS=$(md_cell "$L" router "req/s" | first_word)
        R_CPU=$(md_cell "$L" router "CPU" | first_word)
        R_CPU_NGINX=$(md_cell "$L" nginx "CPU" | first_word)
        R_RSS=$(md_cell "$L" router "RSS" | first_word)
        R_RSS_NGINX=$(md_cell "$L" nginx "RSS" | first_word)
        p50r=$(md_cell "$L" router "p50" | first_word) p50d=$(md_cell "$L" direct "p50" | first_word)
        p99r=$(md_cell "$L" router "p99" | first_word) p99d=$(md_cell "$L" direct "p99" | first_word)
        [ -n "$p50r" ] && [ -n "$p50d" ] && R_P50=$(calc "%.3f" "$p50r - $p50d")
        [ -n "$p99r" ] && [ -n "$p99d" ] && R_P99=$(calc "%.3f" "$p99r - $p99d")
        R_NOTE="median of $REPEATS interleaved rounds"
    else
        R_NOTE="no router bench in tests/bench"
    fi
fi

# ---------------------------------------------------------------------------- spool
S_A1= S_A4= S_1= S_4= S_PUB1= S_PUB4= S_P99= S_P99_ALONE= S_RATE= S_NOTE=
if wants spool; then
    SB=$BUILD/tests/bench/spool_bench
    if [ -x "$SB" ]; then
        if run_bench spool_bench "$LOGS/spool_bench.log" "$SB" --repeats "$REPEATS" \
            --json "$LOGS/spool_bench.json"; then
            J=$LOGS/spool_bench.json
            q() { jq -r "$1" "$J"; }
            row() { q ".rows[] | select(.mode == \"$1\" and .paced == $2 and .threads == $3) | .$4"; }
            S_A1=$(row append false 1 appends_per_s)
            S_A4=$(row append false 4 appends_per_s)
            S_1=$(row spool false 1 appends_per_s)
            S_4=$(row spool false 4 appends_per_s)
            S_PUB1=$(row publisher false 1 appends_per_s)
            S_PUB4=$(row publisher false 4 appends_per_s)
            S_P99=$(row publisher true 1 p99_us)
            S_P99_ALONE=$(row spool true 1 p99_us)
            S_RATE=$(q '.rate')
        fi
        tables "$LOGS/spool_bench.log" >>"$DETAILS"
        S_NOTE="median of $REPEATS runs"
    else
        FAILED+=(spool_bench)
        S_NOTE="spool_bench not built in $BUILD"
        log "$S_NOTE"
    fi
fi

# ---------------------------------------------------------------------------- streams
T_KIB= T_MIB= T_N= T_NOTE=
if wants streams; then
    if run_bench streams_bench "$LOGS/streams_bench.log" bash "$HERE/streams_bench.sh" \
        --repeats "$REPEATS" --json "$LOGS/streams_bench.json"; then
        J=$LOGS/streams_bench.json
        T_N=$(jq -r '[.counts[].n] | max' "$J")
        T_KIB=$(jq -r --argjson n "$T_N" '.counts[] | select(.n == $n) | .kib_per_stream' "$J")
        T_MIB=$(calc "%.1f" "$T_KIB * 1000 / 1024")
        T_ALL=$(jq -r '[.counts[] | "N=\(.n): \(.kib_per_stream)"] | join(", ")' "$J")
        T_NOTE="KiB per stream $T_ALL; median of $REPEATS runs"
    else
        T_NOTE="failed (see bench-logs/streams_bench.log)"
    fi
    tables "$LOGS/streams_bench.log" >>"$DETAILS"
fi

# ---------------------------------------------------------------------------- spend-svc
P_EPS= P_RUNS= P_NOTE=
if wants spend; then
    found=0
    for s in "$HERE"/spend_*.sh; do
        [ -f "$s" ] || continue
        found=1
        n=$(basename "$s" .sh)
        for rep in $(seq 1 "$SPEND_REPEATS"); do
            run_bench "$n" "$LOGS/$n.$rep.log" bash "$s" || break
            if [ "$n" = spend_bench ]; then
                v=$(md_cell "$LOGS/$n.$rep.log" "events/s, first row to last row" value | first_word)
                P_RUNS="$P_RUNS $v"
            fi
        done
        tables "$LOGS/$n.1.log" >>"$DETAILS"
    done
    if [ -n "$P_RUNS" ]; then
        P_EPS=$(echo "$P_RUNS" | median)
        P_NOTE="first row to last row, backlog drain; median of runs:$P_RUNS"
    elif [ "$found" = 0 ]; then
        P_NOTE="no spend bench in tests/bench"
    else
        P_NOTE="failed (see bench-logs)"
    fi
fi

# ---------------------------------------------------------------------------- summary
na() { num_or_na "$1"; }
target() { # VALUE OP LIMIT -> met / MISSED / n/a
    [ -n "$1" ] || { echo "n/a"; return; }
    awk -v v="$1" -v l="$3" -v op="$2" 'BEGIN {
        ok = (op == ">=") ? (v + 0 >= l + 0) : (v + 0 <= l + 0); print ok ? "met" : "MISSED" }'
}
{
    echo "## Tollgate benchmarks ($STARTED, $(nproc) cores, load average at start $LOAD0, build ${BUILD_TYPE:-?}${SANITIZE:+ TG_SANITIZE=$SANITIZE})"
    echo
    echo "The machine may be shared with other work: figures are medians and noisy; compare ratios."
    echo
    echo "| figure | value | target | how measured |"
    echo "|---|---|---|---|"
    if wants router; then
        echo "| router-svc throughput / nginx proxy_pass | $(na "$R_NGINX") | >= 0.8 ($(target "$R_NGINX" ">=" 0.8)) | closed loop, same load generator; $R_NOTE |"
        echo "| router-svc throughput / direct to fake-llm | $(na "$R_DIRECT") | | router-svc $(na "$R_RPS") req/s |"
        echo "| added p50 at half load, ms (router - direct) | $(na "$R_P50") | | open loop at half the slowest target's throughput |"
        echo "| added p99 at half load, ms (router - direct) | $(na "$R_P99") | <= 1 ($(target "$R_P99" "<=" 1)) | same run |"
        echo "| CPU µs per request, router-svc (nginx) | $(na "$R_CPU") ($(na "$R_CPU_NGINX")) | | /proc utime+stime over the throughput run |"
        echo "| RSS after load, router-svc (nginx), kB | $(na "$R_RSS") ($(na "$R_RSS_NGINX")) | | VmRSS |"
    fi
    if wants streams; then
        echo "| RSS per 1,000 in-flight streams, MiB (N=$(na "$T_N")) | $(na "$T_MIB") | <= 31.25 (32 KiB per stream: $(target "$T_KIB" "<=" 32)) | $T_NOTE |"
    fi
    if wants spool; then
        echo "| spool appends/s, 1 thread (4 threads), events encoded beforehand | $(na "$S_A1") ($(na "$S_A4")) | | rt_spool_append at full speed; $S_NOTE |"
        echo "| spool appends/s, 1 thread (4 threads), encode + append | $(na "$S_1") ($(na "$S_4")) | | what a request thread does, no Kafka |"
        echo "| spool appends/s with the publisher producing to Kafka, 1 thread (4 threads) | $(na "$S_PUB1") ($(na "$S_PUB4")) | | rt_publisher_submit at full speed |"
        echo "| spool added p99 per request, µs, at $(na "$S_RATE")/s with the publisher (spool alone) | $(na "$S_P99") ($(na "$S_P99_ALONE")) | | per-call latency of rt_publisher_submit, one request thread |"
    fi
    if wants spend; then
        echo "| spend-svc events/s (Kafka -> Postgres + Redis) | $(na "$P_EPS") | | $P_NOTE |"
    fi
    if [ ${#FAILED[@]} -gt 0 ]; then
        echo
        echo "FAILED: ${FAILED[*]} (logs in $LOGS)"
    fi
} >"$LOGS/summary.md"

{
    cat "$LOGS/summary.md"
    echo
    echo "## Details (each bench's own tables)"
    cat "$DETAILS"
} >"$RESULTS"
if [ -n "$CTEST_BUILD" ] && [ -d "$CTEST_BUILD" ] && [ "$(cd "$CTEST_BUILD" && pwd)" != "$BUILD" ]; then
    cp "$RESULTS" "$CTEST_BUILD/bench-results.md"
fi

echo
cat "$LOGS/summary.md"
echo
echo "(written to $RESULTS; full outputs in $LOGS)"
[ ${#FAILED[@]} -eq 0 ]
