#!/usr/bin/env bash
# Rate limits across router replicas (tollgate.redis): two, then three router-svc replicas share
# one test Redis (tests/lib/services.sh) in front of fake-llm.
# - Redis up: a key with rpm_limit N sees at most N + a bounded overshoot admitted across the
#   replicas in its window (not N x replicas); the overshoot is measured and printed.
# - Redis stopped mid-run: each replica admits N / replicas seen (the count from the last
#   exchange), never N each; every other answer is a 200, no 5xx.
# - Redis back: the exchange resumes (rounds go on, fallback off) and the global limit holds.
# Each phase uses a key of its own, so that the one-minute windows never overlap.
HERE=$(cd "$(dirname "$0")" && pwd)
SRC=$(cd "$HERE/../.." && pwd)
. "$HERE/router_lib.sh"

rt_init router-limits-replicas
unset TG_REDIS_URL TG_REDIS_PORT TG_REDIS_HOST
. "$SRC/tests/lib/services.sh"
tg_services_init "$RT_DIR/services" || rt_die "services init"
cleanup_all() {
    local rc=$?
    rt_cleanup
    tg_services_stop_all || true
    if [ "$rc" != 0 ]; then
        for f in "$RT_DIR"/router*.log; do
            echo "--- $f" >&2
            tail -n 15 "$f" >&2
        done
    fi
    [ -n "${TG_KEEP:-}" ] || rm -rf "$RT_DIR"
    exit "$rc"
}
trap cleanup_all EXIT
unset REDIS_HOST REDIS_PORT REDIS_PASSWORD
tg_redis_start >/dev/null || rt_die "redis did not start"

SYNC_MS=50
N=20    # rpm_limit of the keys of the two-replica phases
N3=30   # and of the three-replica phases
for k in KA KB KC KD KE KF; do
    export "RLR_$k=$(rt_randkey "$k")"
done

cat >"$RT_DIR/fake.json" <<'JSON'
{"default": {"prompt_tokens": 5, "completion_tokens": 3, "latency_ms": 0}}
JSON
rt_fake_start "$RT_DIR/fake.json"

PORTS=()
RPIDS=()
start_router() { # I
    local i=$1 port
    port=$(rt_free_port)
    PORTS[$i]=$port
    cat >"$RT_DIR/router$i.yaml" <<YAML
model_list:
  - model_name: gpt-main
    litellm_params: {model: openai/fake-a, api_base: $RT_FAKE/v1,
                     api_key: os.environ/RT_PROVIDER_KEY, timeout: 10,
                     input_cost_per_token: 0, output_cost_per_token: 0}
    model_info: {id: main-a}
router_settings:
  redis_host: 127.0.0.1          # LiteLLM's names for the Redis the replicas share
  redis_port: $TG_REDIS_PORT
tollgate:
  listen: 127.0.0.1:$port
  threads: 1
  redis: {sync_interval_ms: $SYNC_MS, timeout_ms: 200}
  keys:
    - {key: os.environ/RLR_KA, rpm_limit: $N}
    - {key: os.environ/RLR_KB, rpm_limit: $N}
    - {key: os.environ/RLR_KC, rpm_limit: $N}
    - {key: os.environ/RLR_KD, rpm_limit: $N3}
    - {key: os.environ/RLR_KE, rpm_limit: $N3}
    - {key: os.environ/RLR_KF, rpm_limit: $N}
YAML
    "$TG_BUILD_DIR/router-svc/router-svc" --config "$RT_DIR/router$i.yaml" \
        >>"$RT_DIR/router$i.out" 2>>"$RT_DIR/router$i.log" &
    RPIDS[$i]=$!
    RT_PIDS+=("${RPIDS[$i]}")
    rt_wait_http "http://127.0.0.1:$port/health/readiness" 30 || {
        tail -n 20 "$RT_DIR/router$i.log" >&2
        rt_die "router $i did not become ready"
    }
}

metric() { # I NAME: the value of an unlabelled series of router I
    curl -fsS --max-time 2 "http://127.0.0.1:${PORTS[$1]}/metrics" 2>/dev/null |
        awk -v n="$2" '$1 == n { print $2; exit }'
}

wait_metric() { # DESC SECONDS NAME VALUE I...: until every router I reports NAME == VALUE
    local desc=$1 secs=$2 name=$3 want=$4 i t ok
    shift 4
    for t in $(seq 1 $((secs * 10))); do
        ok=1
        for i in "$@"; do
            [ "$(metric "$i" "$name")" = "$want" ] || ok=0
        done
        if [ "$ok" = 1 ]; then
            rt_ok "$desc"
            return 0
        fi
        sleep 0.1
    done
    for i in "$@"; do
        echo "  router $i: $name = $(metric "$i" "$name")" >&2
    done
    rt_fail "$desc"
    return 1
}

BODY='{"model":"gpt-main","messages":[{"role":"user","content":"hi"}]}'
FIVEXX=0
# send KEYVAR COUNT I...: COUNT requests with key KEYVAR, round robin over routers I, paced;
# sets OK[i] (200s per router), ADMITTED (all 200s), LIMITED (429s); 5xx and others counted
send() {
    local keyvar=$1 count=$2 n code i
    shift 2
    local -a rs=("$@")
    OK=()
    for i in "${rs[@]}"; do OK[$i]=0; done
    ADMITTED=0
    LIMITED=0
    for n in $(seq 0 $((count - 1))); do
        i=${rs[$((n % ${#rs[@]}))]}
        code=$(curl -sS -o /dev/null -w '%{http_code}' --max-time 10 \
            -H "Authorization: Bearer ${!keyvar}" -H 'Content-Type: application/json' \
            --data-binary "$BODY" "http://127.0.0.1:${PORTS[$i]}/v1/chat/completions")
        case "$code" in
        200) OK[$i]=$((OK[$i] + 1)); ADMITTED=$((ADMITTED + 1)) ;;
        429) LIMITED=$((LIMITED + 1)) ;;
        *) FIVEXX=$((FIVEXX + 1)); echo "  unexpected status $code from router $i" >&2 ;;
        esac
        sleep 0.01
    done
}

# burst KEYVAR COUNT PARALLEL I...: COUNT requests, PARALLEL at a time, round robin over routers
# I, unpaced; sets ADMITTED and counts 5xx in FIVEXX
burst() {
    local keyvar=$1 count=$2 par=$3 n
    shift 3
    local -a rs=("$@")
    for n in $(seq 0 $((count - 1))); do
        echo "http://127.0.0.1:${PORTS[${rs[$((n % ${#rs[@]}))]}]}/v1/chat/completions"
    done | xargs -P "$par" -n 1 curl -sS -o /dev/null -w '%{http_code}\n' --max-time 10 \
        -H "Authorization: Bearer ${!keyvar}" -H 'Content-Type: application/json' \
        --data-binary "$BODY" >"$RT_DIR/burst.codes"
    ADMITTED=$(grep -c '^200$' "$RT_DIR/burst.codes")
    FIVEXX=$((FIVEXX + $(grep -vc '^200$\|^429$' "$RT_DIR/burst.codes")))
}

# the bound the README documents: N + (replicas - 1) x (rate per replica) x (the age of the
# counts: up to two exchanges), plus one first request per other replica before its slot's first
# exchange
bound() { # N REPLICAS MS_ELAPSED COUNT
    local n=$1 r=$2 ms=$3 count=$4
    # per-replica rate in requests/ms x 3 intervals (two exchanges and their rounds), rounded up,
    # per other replica
    echo $((n + (r - 1) * ((count * 3 * SYNC_MS + r * ms - 1) / (r * ms) + 1)))
}

# held DESC KEYVAR N COUNT SENDER I...: COUNT requests with key KEYVAR over routers I, by SENDER
# (send: paced, one at a time; burst: 8 clients, unpaced); then N <= admitted <= the bound, and
# fewer than 2N (without the exchange the replicas would admit N each)
held() {
    local desc=$1 keyvar=$2 n=$3 count=$4 sender=$5 t0 ms b
    shift 5
    t0=$(date +%s%3N)
    if [ "$sender" = burst ]; then
        burst "$keyvar" "$count" 8 "$@"
    else
        send "$keyvar" "$count" "$@"
    fi
    ms=$(($(date +%s%3N) - t0))
    b=$(bound "$n" $# "$ms" "$count")
    echo "  $desc: rpm_limit $n, $# replicas, $sender: admitted $ADMITTED, overshoot $((ADMITTED - n)), bound $b, $count requests in $ms ms"
    rt_true "$desc: at least the limit admitted ($ADMITTED >= $n)" test "$ADMITTED" -ge "$n"
    rt_true "$desc: at most N + bounded overshoot ($ADMITTED <= $b), not N x $#" \
        test "$ADMITTED" -le "$b" -a "$ADMITTED" -lt $((2 * n))
}

echo "# two replicas, Redis up"
start_router 1
start_router 2
wait_metric "both replicas see 2 replicas" 10 tollgate_router_limit_sync_replicas_seen 2 1 2
wait_metric "no fallback while Redis is up" 5 tollgate_router_limit_sync_fallback 0 1 2
held "2 replicas" RLR_KA $N 60 send 1 2
rt_eq "2 replicas: the rest are 429s" "$LIMITED" $((60 - ADMITTED))

echo "# two replicas, Redis up, a burst"
held "burst" RLR_KF $N 120 burst 1 2

echo "# two replicas, Redis stopped"
rounds_before=$(metric 1 tollgate_router_limit_sync_rounds_total)
tg_redis_stop || rt_die "redis did not stop"
wait_metric "fallback on both replicas once Redis is gone" 10 tollgate_router_limit_sync_fallback 1 1 2
rt_eq "router 1 keeps the replicas it last saw" "$(metric 1 tollgate_router_limit_sync_replicas_seen)" 2
rt_true "sync failures counted" test "$(metric 1 tollgate_router_limit_sync_failures_total)" -ge 1
send RLR_KB 60 1 2
echo "  Redis down, rpm_limit $N, 2 replicas seen: router1 ${OK[1]}, router2 ${OK[2]}"
rt_eq "Redis down: router 1 admits N / 2" "${OK[1]}" $((N / 2))
rt_eq "Redis down: router 2 admits N / 2" "${OK[2]}" $((N / 2))
rt_eq "Redis down: the rest are 429s" "$LIMITED" $((60 - N))
rt_eq "readiness does not depend on Redis" \
    "$(curl -sS -o /dev/null -w '%{http_code}' "http://127.0.0.1:${PORTS[1]}/health/readiness")" 200

echo "# two replicas, Redis back"
tg_redis_relaunch >/dev/null || rt_die "redis did not start again"
wait_metric "the exchange resumes: fallback off" 15 tollgate_router_limit_sync_fallback 0 1 2
rt_true "sync rounds go on" test "$(metric 1 tollgate_router_limit_sync_rounds_total)" -gt "$rounds_before"
held "Redis back" RLR_KC $N 60 send 1 2

echo "# three replicas"
start_router 3
wait_metric "every replica sees 3 replicas" 10 tollgate_router_limit_sync_replicas_seen 3 1 2 3
held "3 replicas" RLR_KD $N3 90 send 1 2 3
tg_redis_stop || rt_die "redis did not stop"
wait_metric "3 replicas: fallback once Redis is gone" 10 tollgate_router_limit_sync_fallback 1 1 2 3
send RLR_KE 90 1 2 3
echo "  Redis down, rpm_limit $N3, 3 replicas seen: ${OK[1]} / ${OK[2]} / ${OK[3]}"
for i in 1 2 3; do
    rt_eq "Redis down: router $i admits N / 3" "${OK[$i]}" $((N3 / 3))
done
rt_eq "no request failed with anything but the limit's 429" "$FIVEXX" 0
for i in 1 2 3; do
    rt_true "router $i still alive" kill -0 "${RPIDS[$i]}"
done
rt_finish
