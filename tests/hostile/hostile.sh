#!/usr/bin/env bash
# The hostile tier: router-svc under slow and malicious clients while a legitimate client runs
# steady traffic beside them, all in one run.
#
# Phases (the legitimate client runs through all of them at a fixed rate over a pool of
# kept-alive connections, as an SDK does):
#   baseline   nothing else: the legitimate client's own p99
#   slowloris  thousands of connections dribbling a request head one byte a second
#   slowbody   unauthenticated POSTs dribbling a 1 MB body after their headers
#   authslow   authenticated POSTs dribbling their body below body_min_rate
#   bigbody    unauthenticated 24 MiB bodies sent as fast as the socket takes them (the server
#              drops max_body_bytes of each after its 401, then cuts the connection)
#   ctlbytes   heads with NUL, bare CR and control bytes
#   flood      connections that send nothing: past max_connections_per_ip from one address,
#              then past max_connections from several
# Asserted, in the same run: no legitimate request fails; the legitimate p99 of every attack
# phase is within 2x the baseline's; router RSS stays within a bound over its baseline; every
# hostile connection is answered the way its deadline or cap says (408, 401, 400, 503) and
# closed within that deadline; /metrics shows each reaction; the process is alive and serves.
#
# The attackers run at a lower CPU priority (nice): on this 2-core machine they would
# otherwise compete with the router for the same cores, which an attacker on the internet does
# not do.
HERE=$(cd "$(dirname "$0")" && pwd)
# The optimised build (sanitizers would distort the latency and RSS figures asserted on).
export TG_BUILD_DIR="${TG_REL_BUILD_DIR:-${TG_BUILD_DIR:?TG_BUILD_DIR unset}}"
. "$HERE/../integration/router_lib.sh"
. "$HERE/../lib/nofork.sh"

rt_init hostile
HOSTILE=${TG_HOSTILE_BIN:-$TG_BUILD_DIR/tests/hostile/hostile}
[ -x "$HOSTILE" ] || rt_die "hostile not built: $HOSTILE"
RATE=${TG_HOSTILE_RATE:-200}

cat >"$RT_DIR/fake.json" <<'JSON'
{"default": {"prompt_tokens": 12, "completion_tokens": 8, "latency_ms": 2}}
JSON
rt_fake_start "$RT_DIR/fake.json"

# Deadlines short enough for a test, the same mechanisms as the defaults.
HEADER_MS=3000
BODY_MS=5000
cat >"$RT_DIR/router.yaml" <<YAML
model_list:
  - model_name: gpt-main
    litellm_params: {model: openai/fake-ok, api_base: $RT_FAKE/v1,
                     api_key: os.environ/RT_PROVIDER_KEY, timeout: 10}
general_settings: {master_key: os.environ/RT_MASTER_KEY}
tollgate:
  listen: 127.0.0.1:$RT_ROUTER_PORT
  threads: 2
  keys:
    - {key: os.environ/RT_KEY}
  limits: {max_connections: 3000, max_connections_per_ip: 2100, header_timeout_ms: $HEADER_MS,
           body_timeout_ms: $BODY_MS, body_min_rate: 1024, max_body_bytes: 10485760}
YAML
rt_router_start "$RT_DIR/router.yaml"

# --------------------------------------------------------------------- timeline
BASE_S=8
declare -a PH_NAME PH_START PH_END
t_ms() { _tg_now_ms; }

# RSS of router-svc every 0.5 s: "ms_since_t0 kB". It runs beside the legitimate client whose
# p99 is judged, so it starts no process (nofork.sh).
rss_sampler() {
    while kill -0 "$RT_ROUTER_PID" 2>/dev/null; do
        _tg_rss_kb_set "$RT_ROUTER_PID"
        _tg_now_ms_set
        echo "$((_TG_NOW_MS - T0)) $_TG_RSS_KB"
        _tg_sleep 0.5
    done
}

attack() { # NAME SECONDS ARGS...: one attack phase; its JSON in $RT_DIR/NAME.json
    local name=$1 secs=$2
    shift 2
    PH_NAME+=("$name")
    PH_START+=($(($(t_ms) - T0)))
    nice -n 10 "$HOSTILE" attack --port "$RT_ROUTER_PORT" --duration "$secs" "$@" \
        >"$RT_DIR/$name.json" 2>"$RT_DIR/$name.err"
    PH_END+=($(($(t_ms) - T0)))
    echo "   $name: $(cat "$RT_DIR/$name.json")"
}

TOTAL_S=$((BASE_S + 12 + 14 + 9 + 8 + 5 + 14 + 4))
T0=$(($(t_ms) + 100)) # the legitimate client starts its clock after opening its pool
"$HOSTILE" legit --port "$RT_ROUTER_PORT" --key "$RT_KEY" --rate "$RATE" --conns 8 \
    --duration "$TOTAL_S" --out "$RT_DIR/legit.tsv" --src 127.0.0.1 >"$RT_DIR/legit.json" &
LEGIT_PID=$!
rss_sampler >"$RT_DIR/rss.tsv" &
RSS_PID=$!
RT_PIDS+=("$RSS_PID")

sleep "$BASE_S"
PH_NAME+=(baseline)
PH_START+=(1000)
PH_END+=($((BASE_S * 1000)))
attack slowloris 12 --kind slowloris --conns 2000 --src 127.0.0.2 --gap-ms 1000 \
    --deadline-ms $((HEADER_MS + 2500))
attack slowbody 14 --kind slowbody --conns 200 --src 127.0.0.3 --gap-ms 500 --deadline-ms 12500
attack authslow 9 --kind authslow --conns 50 --src 127.0.0.4 --gap-ms 500 --key "$RT_KEY" \
    --deadline-ms $((BODY_MS + 2500))
attack bigbody 8 --kind bigbody --conns 4 --src 127.0.0.5 --deadline-ms 12500 --open-rate 20
attack ctlbytes 5 --kind ctlbytes --conns 50 --src 127.0.0.6 --deadline-ms 2000 --open-rate 400
# flood: one address past its cap, then several addresses past the total
PH_NAME+=(flood)
PH_START+=($(($(t_ms) - T0)))
nice -n 10 "$HOSTILE" attack --port "$RT_ROUTER_PORT" --duration 14 --kind flood --conns 2400 \
    --src 127.0.0.7 --deadline-ms $((HEADER_MS + 2500)) >"$RT_DIR/flood_ip.json" &
F1=$!
sleep 1
for a in 1 2 3; do
    nice -n 10 "$HOSTILE" attack --port "$RT_ROUTER_PORT" --duration 12 --kind flood \
        --conns 600 --src "127.0.1.$a" --deadline-ms $((HEADER_MS + 2500)) \
        >"$RT_DIR/flood_$a.json" &
    eval "F$((a + 1))=\$!"
done
wait "$F1" "$F2" "$F3" "$F4"
PH_END+=($(($(t_ms) - T0)))
for f in flood_ip flood_1 flood_2 flood_3; do echo "   $f: $(cat "$RT_DIR/$f.json")"; done
wait "$LEGIT_PID"
LEGIT_RC=$?
echo "   legit: $(cat "$RT_DIR/legit.json")"

# --------------------------------------------------------------------- legitimate traffic
rt_eq "the legitimate client: no failed request" "$(jq -r .failed "$RT_DIR/legit.json")" 0
rt_eq "the legitimate client exited 0" "$LEGIT_RC" 0
rt_true "the legitimate client sent its load" \
    test "$(jq -r .requests "$RT_DIR/legit.json")" -ge $((RATE * TOTAL_S * 9 / 10))

p99_between() { # FROM_MS TO_MS: p99 latency (us) of the legitimate requests scheduled then
    awk -v a="$1" -v b="$2" '$1 >= a && $1 < b {print $2}' "$RT_DIR/legit.tsv" | sort -n |
        awk '{v[NR] = $1} END {if (NR == 0) print 0; else print v[int((NR - 1) * 0.99) + 1]}'
}
rss_max_between() {
    awk -v a="$1" -v b="$2" '$1 >= a && $1 < b && $2 > m {m = $2} END {print m + 0}' "$RT_DIR/rss.tsv"
}
BASE_P99=$(p99_between 1000 $((BASE_S * 1000)))
BASE_RSS=$(rss_max_between 0 $((BASE_S * 1000)))
# RSS bound over the baseline: 2,000 dribbling heads hold a 1 KiB read buffer each (2 MB), the
# flood's 3,000 connections their state (about 1.5 MB); 16 MB leaves room for the allocator,
# and fails if a dribbled head were to hold the whole head cap (2,000 x 17 KiB = 34 MB).
RSS_SLACK_KB=$((16 * 1024))
printf '   %-10s %10s %10s %8s %10s\n' phase p99_us ratio rss_kB requests
for i in "${!PH_NAME[@]}"; do
    n=${PH_NAME[$i]}
    a=$((PH_START[i] + 500))
    b=${PH_END[$i]}
    p=$(p99_between "$a" "$b")
    cnt=$(awk -v a="$a" -v b="$b" '$1 >= a && $1 < b' "$RT_DIR/legit.tsv" | wc -l)
    r=$(awk -v p="$p" -v q="$BASE_P99" 'BEGIN {if (q > 0) printf "%.2f", p / q; else print 0}')
    m=$(rss_max_between "$a" "$b")
    printf '   %-10s %10s %10s %8s %10s\n' "$n" "$p" "$r" "$m" "$cnt"
    [ "$n" = baseline ] && continue
    rt_true "$n: legitimate p99 ${p} us within 2x the baseline's ${BASE_P99} us" \
        test "$p" -le $((2 * BASE_P99))
    rt_true "$n: router RSS ${m} kB within ${RSS_SLACK_KB} kB of the baseline's ${BASE_RSS} kB" \
        test "$m" -le $((BASE_RSS + RSS_SLACK_KB))
    rt_true "$n: the legitimate client was served meanwhile ($cnt requests)" test "$cnt" -gt 0
done

# --------------------------------------------------------------------- hostile reactions
js() { jq -r "$2" "$RT_DIR/$1.json"; }
for n in slowloris slowbody authslow bigbody ctlbytes flood_ip flood_1 flood_2 flood_3; do
    rt_eq "$n: no connection outlived its deadline" "$(js "$n" .over_deadline)" 0
    rt_true "$n: the server closed connections" test "$(js "$n" .closed_by_server)" -gt 0
done
rt_true "slowloris: 408 for heads not finished in time" test "$(js slowloris '.statuses["408"] // 0')" -gt 1000
rt_eq "slowloris: nothing but 408 (or still open at the end)" \
    "$(js slowloris '.statuses | keys - ["0", "408"] | length')" 0
rt_true "slowbody: 401 from the headers alone" test "$(js slowbody '.statuses["401"] // 0')" -gt 100
rt_eq "slowbody: nothing but 401" "$(js slowbody '.statuses | keys - ["0", "401"] | length')" 0
rt_true "authslow: 408 for a body below the minimum rate" test "$(js authslow '.statuses["408"] // 0')" -gt 10
rt_eq "authslow: nothing but 408" "$(js authslow '.statuses | keys - ["0", "408"] | length')" 0
rt_true "bigbody: 401 before the body" test "$(js bigbody '.statuses["401"] // 0')" -gt 0
rt_eq "bigbody: nothing but 401" "$(js bigbody '.statuses | keys - ["0", "401"] | length')" 0
rt_true "ctlbytes: 400 for forbidden bytes" test "$(js ctlbytes '.statuses["400"] // 0')" -gt 100
rt_eq "ctlbytes: nothing but 400" "$(js ctlbytes '.statuses | keys - ["400"] | length')" 0
rt_true "flood from one address: 503 past max_connections_per_ip" \
    test "$(js flood_ip '.statuses["503"] // 0')" -gt 0
total503=0
for a in 1 2 3; do total503=$((total503 + $(js "flood_$a" '.statuses["503"] // 0'))); done
rt_true "flood from several addresses: 503 past max_connections ($total503)" test "$total503" -gt 0

# --------------------------------------------------------------------- metrics and liveness
curl -fsS "$RT_URL/metrics" >"$RT_DIR/metrics.txt" || rt_fail "metrics"
metric() { awk -v m="$1" '$1 == m {print $2}' "$RT_DIR/metrics.txt"; }
rt_true "metrics: header timeouts counted" \
    test "$(metric 'tollgate_router_http_timeouts_total{phase="header"}')" -gt 1000
rt_true "metrics: body timeouts counted" \
    test "$(metric 'tollgate_router_http_timeouts_total{phase="body"}')" -gt 10
rt_true "metrics: unauthenticated requests counted" \
    test "$(metric 'tollgate_router_rejected_total{reason="auth"}')" -gt 100
rt_true "metrics: bodies cut after the bounded discard" \
    test "$(metric tollgate_router_http_linger_cut_total)" -gt 0
rt_true "metrics: malformed heads counted" \
    test "$(metric tollgate_router_http_bad_requests_total)" -gt 100
rt_true "metrics: refusals past the per-address cap counted" \
    test "$(metric 'tollgate_router_http_connections_refused_total{reason="per_ip"}')" -gt 0
rt_true "metrics: refusals past max_connections counted" \
    test "$(metric 'tollgate_router_http_connections_refused_total{reason="max_connections"}')" -gt 0
rt_true "router-svc alive" kill -0 "$RT_ROUTER_PID"
rt_eq "liveness after the attacks" \
    "$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 "$RT_URL/health/liveness")" 200
rt_eq "a chat completion after the attacks" \
    "$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 -H "Authorization: Bearer $RT_KEY" \
        -d '{"model":"gpt-main","messages":[{"role":"user","content":"hi"}]}' \
        "$RT_URL/v1/chat/completions")" 200
rt_finish
