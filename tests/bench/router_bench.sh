#!/usr/bin/env bash
# router-svc overhead: the same load against fake-llm directly, through nginx proxy_pass and
# through router-svc, in one run on one machine.
#   1. throughput at fixed concurrency (wrk, closed loop; curl driver when wrk is missing)
#   2. p50/p99 at half of the direct throughput (loadgen, open loop, same rate for all three)
#   3. CPU microseconds per request of the proxy process(es) (/proc/PID/stat utime+stime)
#   4. RSS of the proxy after the run
# Prints a markdown table with ratios. Numbers depend on the machine: compare ratios only.
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/../integration/router_lib.sh"

rt_init router-bench
CONC=${RT_BENCH_CONC:-64}
DUR=${RT_BENCH_SECONDS:-5}
LOADGEN="$TG_BUILD_DIR/tests/chaos/loadgen"
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
WRK=$(command -v wrk || true)
NGINX_PORT=$(rt_free_port)
TICK=$(getconf CLK_TCK)

cat >"$RT_DIR/fake.json" <<'JSON'
{"default": {"prompt_tokens": 12, "completion_tokens": 8, "chunks": 4}}
JSON
rt_fake_start "$RT_DIR/fake.json"

cat >"$RT_DIR/router.yaml" <<YAML
model_list:
  - model_name: gpt-main
    litellm_params: {model: openai/gpt-main, api_base: $RT_FAKE/v1,
                     api_key: os.environ/RT_PROVIDER_KEY, timeout: 30,
                     input_cost_per_token: 0.0000005, output_cost_per_token: 0.0000015}
    model_info: {id: main-1}
general_settings:
  master_key: os.environ/RT_MASTER_KEY
tollgate:
  listen: 127.0.0.1:$RT_ROUTER_PORT
  threads: 2
  limits: {max_in_flight: 4096, max_connections: 10000}
  keys:
    - {key: os.environ/RT_KEY, key_alias: bench}
YAML
export TOLLGATE_LOG_LEVEL=warn
rt_router_start "$RT_DIR/router.yaml"

mkdir -p "$RT_DIR/nginx"
cat >"$RT_DIR/nginx/nginx.conf" <<NGINX
worker_processes 2;
pid $RT_DIR/nginx/nginx.pid;
error_log $RT_DIR/nginx/error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path $RT_DIR/nginx/body;
    proxy_temp_path $RT_DIR/nginx/proxy;
    fastcgi_temp_path $RT_DIR/nginx/fastcgi;
    uwsgi_temp_path $RT_DIR/nginx/uwsgi;
    scgi_temp_path $RT_DIR/nginx/scgi;
    upstream fake { server 127.0.0.1:$RT_FAKE_PORT; keepalive 256; }
    server {
        listen 127.0.0.1:$NGINX_PORT;
        location / {
            proxy_pass http://fake;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
        }
    }
}
NGINX
"$NGINX" -c "$RT_DIR/nginx/nginx.conf" -p "$RT_DIR/nginx" -g 'daemon off;' 2>>"$RT_DIR/nginx/stderr" &
NGINX_PID=$!
RT_PIDS+=("$NGINX_PID")
rt_wait_http "http://127.0.0.1:$NGINX_PORT/_stats" 10 || rt_die "nginx did not start"

BODY='{"model":"gpt-main","messages":[{"role":"user","content":"hello there"}],"max_tokens":16}'
cat >"$RT_DIR/post.lua" <<LUA
wrk.method = "POST"
wrk.body = '$BODY'
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer $RT_KEY"
LUA

pids_of() { # target -> PIDs whose CPU is the proxy's cost
    case $1 in
    direct) echo "$RT_FAKE_PID" ;;
    nginx) echo "$NGINX_PID $(pgrep -P "$NGINX_PID" | tr '\n' ' ')" ;;
    router) echo "$RT_ROUTER_PID" ;;
    esac
}
cpu_ticks() { # PIDs...
    local t=0 p
    for p in "$@"; do
        t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat")))
    done
    echo "$t"
}
rss_kb() { # PIDs...
    local t=0 p
    for p in "$@"; do
        t=$((t + $(awk '/^VmRSS:/ {print $2}' "/proc/$p/status")))
    done
    echo "$t"
}
url_of() {
    case $1 in
    direct) echo "$RT_FAKE" ;;
    nginx) echo "http://127.0.0.1:$NGINX_PORT" ;;
    router) echo "$RT_URL" ;;
    esac
}

# throughput: closed loop at CONC connections for DUR seconds. The machine may be shared, so
# the three targets are measured in ROUNDS interleaved rounds and the median round is kept.
ROUNDS=${RT_BENCH_ROUNDS:-3}
declare -A RPS CPU_US RSS P50 P99 FAILS
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print a[int((NR + 1) / 2)]}'; }
declare -A RPS_ALL CPU_ALL
for round in $(seq 1 "$ROUNDS"); do
    for t in direct nginx router; do
        url=$(url_of $t)
        pids=$(pids_of $t)
        if [ -n "$WRK" ]; then
            "$WRK" -t2 -c"$CONC" -d1s -s "$RT_DIR/post.lua" "$url/v1/chat/completions" >/dev/null 2>&1
        fi
        c0=$(cpu_ticks $pids)
        if [ -n "$WRK" ]; then
            "$WRK" -t2 -c"$CONC" -d"${DUR}s" -s "$RT_DIR/post.lua" "$url/v1/chat/completions" \
                >"$RT_DIR/wrk.$t.$round" 2>&1
            rps=$(awk '/^Requests\/sec:/ {print $2}' "$RT_DIR/wrk.$t.$round")
            reqs=$(awk '/requests in/ {print $1}' "$RT_DIR/wrk.$t.$round")
            non2xx=$(awk '/Non-2xx/ {print $5}' "$RT_DIR/wrk.$t.$round")
        else
            "$LOADGEN" --url "$url" --key "$RT_KEY" --rate 100000 --duration "$DUR" --mix chat \
                --stream-ratio 0 --max-inflight "$CONC" >"$RT_DIR/wrk.$t.$round" 2>&1
            reqs=$(grep '^{' "$RT_DIR/wrk.$t.$round" | tail -1 | jq '.ok')
            rps=$(echo "$reqs $DUR" | awk '{printf "%.0f", $1 / $2}')
            non2xx=0
        fi
        c1=$(cpu_ticks $pids)
        RPS_ALL[$t]="${RPS_ALL[$t]:-} ${rps%.*}"
        CPU_ALL[$t]="${CPU_ALL[$t]:-} $(echo "$c0 $c1 $TICK $reqs" | awk '{printf "%.1f", ($2 - $1) * 1e6 / $3 / $4}')"
        FAILS[$t]=$((${FAILS[$t]:-0} + ${non2xx:-0}))
    done
done
for t in direct nginx router; do
    RPS[$t]=$(echo "${RPS_ALL[$t]}" | median)
    CPU_US[$t]=$(echo "${CPU_ALL[$t]}" | median)
    RSS[$t]=$(rss_kb $(pids_of $t))
done

# latency at half load: open loop (loadgen) at half of the slowest target's capacity, the
# same rate for all three. Capacity is measured with loadgen itself (in-flight capped at CONC,
# offered at the target's closed-loop throughput: offering far more would only make the
# generator burn the shared CPU on refused slots), since the generator shares the machine.
declare -A CAP
for t in direct nginx router; do
    "$LOADGEN" --url "$(url_of $t)" --key "$RT_KEY" --rate "${RPS[$t]}" --duration "$DUR" --mix chat \
        --stream-ratio 0 --max-inflight "$CONC" >"$RT_DIR/cap.$t" 2>&1
    CAP[$t]=$(grep '^{' "$RT_DIR/cap.$t" | tail -1 | jq --argjson d "$DUR" '(.ok / $d) | floor')
done
RATE=${CAP[direct]}
for t in nginx router; do
    [ "${CAP[$t]}" -lt "$RATE" ] && RATE=${CAP[$t]}
done
RATE=$((RATE / 2))
# the same rounds, interleaved, median per target: one 5 s run's p99 on a shared 2-core machine
# is mostly the scheduler's
declare -A P50_ALL P99_ALL
# the router's own share of each request (tollgate_router_overhead_seconds: from the parsed
# request to the queued response, provider time excluded), over the latency rounds only
overhead_hist() { curl -fsS "$RT_URL/metrics" | grep '^tollgate_router_overhead_seconds_bucket' |
    sed -E 's/.*le="([^"]+)"} ([0-9]+)$/\1 \2/'; }
overhead_hist >"$RT_DIR/overhead.before"
for round in $(seq 1 "$ROUNDS"); do
    for t in direct nginx router; do
        "$LOADGEN" --url "$(url_of $t)" --key "$RT_KEY" --rate "$RATE" --duration "$DUR" \
            --mix chat --stream-ratio 0 --max-inflight 4096 >"$RT_DIR/lat.$t.$round" 2>&1
        summary=$(grep '^{' "$RT_DIR/lat.$t.$round" | tail -1)
        P50_ALL[$t]="${P50_ALL[$t]:-} $(jq -r '.p50_ms // .latency_ms.p50 // empty' <<<"$summary")"
        P99_ALL[$t]="${P99_ALL[$t]:-} $(jq -r '.p99_ms // .latency_ms.p99 // empty' <<<"$summary")"
    done
done
overhead_hist >"$RT_DIR/overhead.after"
# smallest bucket bound holding 99 % of the rounds' requests, and the share under 0.5 ms
OVERHEAD=$(paste "$RT_DIR/overhead.before" "$RT_DIR/overhead.after" | awk '
    { le[NR] = $1; n[NR] = $4 - $2 } END {
        total = n[NR]; if (total <= 0) { print "n/a"; exit }
        for (i = 1; i <= NR; i++) if (n[i] >= 0.99 * total) { p99 = le[i]; break }
        printf "<= %s ms (%.2f %% of %d requests <= 0.5 ms)", p99 * 1000, 100 * n[1] / total, total }')
for t in direct nginx router; do
    P50[$t]=$(echo "${P50_ALL[$t]}" | median)
    P99[$t]=$(echo "${P99_ALL[$t]}" | median)
done

ratio() { echo "$1 $2" | awk '{ if ($2 > 0) printf "%.2f", $1 / $2; else print "n/a" }'; }
added() { echo "$1 $2" | awk '{ printf "%.3f", $1 - $2 }'; }
{
    echo
    echo "### router-svc bench ($(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, load average $(cut -d' ' -f1 /proc/loadavg), concurrency $CONC, median of $ROUNDS interleaved ${DUR}s runs; latency open loop at $RATE/s, median of $ROUNDS interleaved runs)"
    echo
    echo "Both proxies keep their upstream connections alive: nginx with \`keepalive 256\`, HTTP/1.1 and"
    echo "an empty Connection header; router-svc with its built-in HTTP/1.1 client's kept-alive connections (per loop)."
    echo
    echo "| target | req/s (wrk) | loadgen capacity req/s | non-2xx | CPU µs/req (proxy) | RSS kB (proxy) | p50 ms @ $RATE/s | p99 ms @ $RATE/s |"
    echo "|---|---|---|---|---|---|---|---|"
    for t in direct nginx router; do
        echo "| $t | ${RPS[$t]} (runs:${RPS_ALL[$t]}) | ${CAP[$t]} | ${FAILS[$t]} | ${CPU_US[$t]} | ${RSS[$t]} | ${P50[$t]} | ${P99[$t]} (runs:${P99_ALL[$t]}) |"
    done
    echo
    echo "| ratio | value |"
    echo "|---|---|"
    echo "| router / nginx throughput | $(ratio "${RPS[router]}" "${RPS[nginx]}") |"
    echo "| router / direct throughput | $(ratio "${RPS[router]}" "${RPS[direct]}") |"
    echo "| router / nginx CPU per request | $(ratio "${CPU_US[router]}" "${CPU_US[nginx]}") |"
    echo "| router added p99 vs direct (ms) | $(added "${P99[router]}" "${P99[direct]}") |"
    echo "| nginx added p99 vs direct (ms) | $(added "${P99[nginx]}" "${P99[direct]}") |"
    echo "| router's own overhead p99 in the latency rounds (histogram bucket) | $OVERHEAD |"
} | tee "$RT_DIR/bench.md"
rt_true "router answered during the bench" test "${RPS[router]:-0}" -gt 0
rt_eq "router gave no non-2xx" "${FAILS[router]}" 0
rt_finish
