#!/usr/bin/env bash
# streams_bench: router-svc memory per in-flight stream.
#
# fake-llm answers every streaming chat completion slowly (first event after 100 ms, the last
# one after --hold-ms), so N streams opened through router-svc stay in flight together. For each
# N, a fresh router-svc is started and warmed up with a few fast requests; its VmRSS is sampled
# before (RSS_0) and while all N streams are in flight (RSS_N, the tollgate_router_in_flight
# gauge says so before and after the samples); the figure is (RSS_N - RSS_0) / N in KiB per
# stream (target <= 32 KiB), also given per 1,000 streams. Every stream must then complete with
# 200 and a full body: a failed stream is a functional failure (exit 1); the memory figure
# itself is reported, not asserted.
#
#   streams_bench.sh [--counts "1000 2000"] [--repeats 1] [--hold-ms 30000] [--open-rate 500]
#                    [--json FILE]
# Each figure is the median of --repeats runs (each run a fresh router-svc). Needs router-svc,
# fake-llm and loadgen built in TG_BUILD_DIR, and about 2 file descriptors per stream in
# router-svc (the soft limit is raised to the hard one).
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck disable=SC1091
. "$HERE/../integration/router_lib.sh"

COUNTS="1000 2000"
REPEATS=1
HOLD_MS=30000
OPEN_RATE=500
JSON=
while [ $# -gt 0 ]; do
    case $1 in
    --counts) COUNTS=$2; shift ;;
    --repeats) REPEATS=$2; shift ;;
    --hold-ms) HOLD_MS=$2; shift ;;
    --open-rate) OPEN_RATE=$2; shift ;;
    --json) JSON=$2; shift ;;
    -h | --help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "streams_bench: unknown option '$1'" >&2; exit 2 ;;
    esac
    shift
done

rt_init streams-bench
LOADGEN="$TG_BUILD_DIR/tests/chaos/loadgen"
[ -x "$LOADGEN" ] || rt_die "loadgen not built: $LOADGEN"
[ -x "$TG_BUILD_DIR/router-svc/router-svc" ] || rt_die "router-svc not built in $TG_BUILD_DIR"

MAXN=0
for n in $COUNTS; do
    [ "$n" -gt "$MAXN" ] && MAXN=$n
done
# router-svc holds a client and an upstream socket per stream; loadgen and fake-llm one each
ulimit -n "$(ulimit -Hn)" 2>/dev/null
NOFILE=$(ulimit -n)
[ "$NOFILE" = unlimited ] || [ "$NOFILE" -ge $((2 * MAXN + 256)) ] ||
    rt_die "open files limit $NOFILE is too low for $MAXN streams (need $((2 * MAXN + 256)))"

cat >"$RT_DIR/fake.json" <<JSON
{"default": {"prompt_tokens": 12, "completion_tokens": 64, "chunks": 4},
 "models": {"slow-stream": {"ttft_ms": 100, "latency_ms": $HOLD_MS, "chunks": 4}}}
JSON
rt_fake_start "$RT_DIR/fake.json"

TIMEOUT_S=$((HOLD_MS / 1000 + 60))
cat >"$RT_DIR/router.yaml" <<YAML
model_list:
  - model_name: gpt-slow
    litellm_params: {model: openai/slow-stream, api_base: $RT_FAKE/v1,
                     api_key: os.environ/RT_PROVIDER_KEY, timeout: $TIMEOUT_S,
                     stream_timeout: $TIMEOUT_S,
                     input_cost_per_token: 0.0000005, output_cost_per_token: 0.0000015}
    model_info: {id: slow-1}
  - model_name: gpt-fast
    litellm_params: {model: openai/fast, api_base: $RT_FAKE/v1,
                     api_key: os.environ/RT_PROVIDER_KEY, timeout: 30,
                     input_cost_per_token: 0.0000005, output_cost_per_token: 0.0000015}
    model_info: {id: fast-1}
general_settings:
  master_key: os.environ/RT_MASTER_KEY
tollgate:
  listen: 127.0.0.1:$RT_ROUTER_PORT
  threads: 2
  limits: {max_in_flight: $((MAXN + 1024)), max_connections: $((2 * MAXN + 1024))}
  keys:
    - {key: os.environ/RT_KEY, key_alias: streams-bench}
YAML
export TOLLGATE_LOG_LEVEL=warn

rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }
in_flight() {
    curl -fsS --max-time 2 "$RT_URL/metrics" 2>/dev/null |
        awk '/^tollgate_router_in_flight / {printf "%d", $2; found = 1} END {if (!found) print -1}'
}
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }
# forget a stopped PID so that the exit trap never signals a recycled one
forget_pid() {
    local p keep=()
    for p in "${RT_PIDS[@]}"; do
        [ "$p" = "$1" ] || keep+=("$p")
    done
    RT_PIDS=("${keep[@]}")
}
# stop_router: SIGTERM, at most 30 s for a clean exit (status 0), else SIGKILL and fail
stop_router() {
    local i rc=1
    kill -TERM "$RT_ROUTER_PID" 2>/dev/null
    for i in $(seq 1 300); do
        if ! kill -0 "$RT_ROUTER_PID" 2>/dev/null; then
            wait "$RT_ROUTER_PID"
            rc=$?
            break
        fi
        sleep 0.1
    done
    if kill -0 "$RT_ROUTER_PID" 2>/dev/null; then
        kill -KILL "$RT_ROUTER_PID" 2>/dev/null
        wait "$RT_ROUTER_PID" 2>/dev/null
        rc=1
    fi
    forget_pid "$RT_ROUTER_PID"
    return "$rc"
}
rss_samples() { # PID COUNT -> median VmRSS (KiB) of COUNT samples 200 ms apart
    local s=() i
    for i in $(seq 1 "$2"); do
        s+=("$(rss_kib "$1")")
        sleep 0.2
    done
    echo "${s[*]}" | median
}

# run_once N TAG: sets R0 and RN (KiB); exits on a functional failure
run_once() {
    local n=$1 tag=$2 lg_pid inf=0 deadline ok summary dur
    rt_router_start "$RT_DIR/router.yaml"
    # warm-up: fast requests (streaming and not) so one-time allocations are in RSS_0
    "$LOADGEN" --url "$RT_URL" --key "$RT_KEY" --model gpt-fast --rate 100 --duration 1 \
        --mix chat --stream-ratio 0.5 --max-inflight 64 >"$RT_DIR/warm.$tag" 2>&1 ||
        rt_die "warm-up load failed: $(tail -n 3 "$RT_DIR/warm.$tag")"
    sleep 1
    R0=$(rss_samples "$RT_ROUTER_PID" 5)
    dur=$(awk -v n="$n" -v r="$OPEN_RATE" 'BEGIN { printf "%.3f", n / r }')
    "$LOADGEN" --url "$RT_URL" --key "$RT_KEY" --model gpt-slow --rate "$OPEN_RATE" \
        --duration "$dur" --mix chat --stream-ratio 1 --max-inflight $((n + 64)) \
        --timeout-ms $((HOLD_MS + 60000)) --out "$RT_DIR/streams.$tag.tsv" \
        >"$RT_DIR/streams.$tag.out" 2>"$RT_DIR/streams.$tag.err" &
    lg_pid=$!
    RT_PIDS+=("$lg_pid")
    # all N must be in flight well before the first of them ends
    deadline=$(($(date +%s) + HOLD_MS / 1000 - 5))
    while [ "$(date +%s)" -lt "$deadline" ]; do
        inf=$(in_flight)
        [ "$inf" -ge "$n" ] && break
        sleep 0.25
    done
    if [ "$inf" -lt "$n" ]; then
        kill -TERM "$lg_pid" 2>/dev/null
        wait "$lg_pid"
        rt_die "only $inf of $n streams in flight through router-svc (loadgen: $(tail -n 3 "$RT_DIR/streams.$tag.err"))"
    fi
    sleep 1 # the last streams opened get their first event (100 ms) before the samples
    RN=$(rss_samples "$RT_ROUTER_PID" 5)
    inf=$(in_flight)
    [ "$inf" -ge "$n" ] || rt_die "streams ended while RSS was sampled ($inf of $n in flight)"
    wait "$lg_pid"
    forget_pid "$lg_pid"
    summary=$(grep '^{' "$RT_DIR/streams.$tag.out" | tail -n 1)
    ok=$(jq -r '.ok' <<<"$summary")
    [ "$ok" = "$n" ] || rt_die "$tag: $ok of $n streams completed ($summary)"
    stop_router || rt_die "router-svc did not stop cleanly within 30 s"
    echo "streams_bench: N=$n run $tag: RSS_0 ${R0} KiB, RSS_N ${RN} KiB" >&2
}

declare -A R0S RNS PER
for n in $COUNTS; do
    for rep in $(seq 1 "$REPEATS"); do
        run_once "$n" "$n.$rep"
        R0S[$n]="${R0S[$n]:-} $R0"
        RNS[$n]="${RNS[$n]:-} $RN"
        PER[$n]="${PER[$n]:-} $(awk -v a="$R0" -v b="$RN" -v n="$n" 'BEGIN { printf "%.2f", (b - a) / n }')"
    done
done

{
    echo
    echo "### router-svc RSS per in-flight stream ($(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, load average $(cut -d' ' -f1 /proc/loadavg); streams held ${HOLD_MS} ms, opened at ${OPEN_RATE}/s; median of $REPEATS run(s), a fresh router-svc each)"
    echo
    echo "| streams in flight (N) | RSS_0 KiB | RSS_N KiB | (RSS_N - RSS_0) / N KiB per stream | RSS per 1,000 streams MiB | target <= 32 KiB per stream |"
    echo "|---|---|---|---|---|---|"
    for n in $COUNTS; do
        per=$(echo "${PER[$n]}" | median)
        echo "| $n | $(echo "${R0S[$n]}" | median) | $(echo "${RNS[$n]}" | median) | $per (runs:${PER[$n]}) | $(awk -v p="$per" 'BEGIN { printf "%.1f", p * 1000 / 1024 }') | $(awk -v p="$per" 'BEGIN { print (p <= 32 ? "met" : "MISSED") }') |"
    done
} | tee "$RT_DIR/streams.md"

if [ -n "$JSON" ]; then
    {
        printf '{"repeats":%s,"hold_ms":%s,"counts":[' "$REPEATS" "$HOLD_MS"
        sep=
        for n in $COUNTS; do
            printf '%s{"n":%s,"rss0_kib":%s,"rssn_kib":%s,"kib_per_stream":%s}' "$sep" "$n" \
                "$(echo "${R0S[$n]}" | median)" "$(echo "${RNS[$n]}" | median)" \
                "$(echo "${PER[$n]}" | median)"
            sep=,
        done
        printf ']}\n'
    } >"$JSON"
fi
rt_ok "every stream completed through router-svc"
rt_finish
