#!/usr/bin/env bash
# router-svc as deployed against nginx, side by side in one run:
#   - spend events on: router-svc appends one event per request to its spool and publishes it to
#     Apache Kafka (one KRaft node from tests/lib/services.sh); a second router-svc without Kafka
#     (no events) gives the event pipeline's own cost by difference;
#   - a plain-http provider and an HTTPS provider: the mock provider is nginx answering a fixed
#     ~400-byte chat completion on a plain and a TLS port (a test CA; both proxies verify it);
#   - baselines: the mock directly, nginx proxy_pass to the plain port, nginx proxy_pass https://
#     to the TLS port (upstream keep-alive pools, TLS session reuse);
#   - streams: the mock answers under /stream/ with an SSE stream of RT_BENCH_STREAM_CHUNKS
#     (100) chat.completion.chunk events, the usage chunk and [DONE]; router-stream (events on)
#     against nginx-stream (proxy_buffering off, as every proxy target here) at
#     RT_BENCH_STREAM_CONC (1000) connections, each a stream in flight; CPU per chunk is the
#     CPU per request over the chunks.
# Placement (2+ cores): the proxies and the mock share one core (RT_BENCH_PROXY_CPU, default 1),
# wrk and Kafka the other (RT_BENCH_LOAD_CPU, default 0); router-svc runs threads: 1 and nginx
# one worker, so both proxies get the same core. Every target is measured in RT_BENCH_ROUNDS
# interleaved rounds of RT_BENCH_SECONDS at RT_BENCH_CONC connections (wrk, closed loop; the
# order reversed every other round); the table gives medians: requests/s, CPU µs per request
# of the proxy process (utime+stime from /proc; utime alone is the user-space part, which
# weighs more where the kernel is cheap), p50/p99 (wrk's latency distribution), the largest
# latency of any round (outliers after the warm-up), RSS. The machine may be shared:
# compare ratios, and the ratios within each round ("per round") before those of medians.
# RT_BENCH_LIBRDKAFKA="linger.ms: 50, ..." adds librdkafka properties to the router's Kafka section
# (router-base's too, unless RT_BENCH_BASE_LIBRDKAFKA gives its own).
# After the rounds, one-connection rounds (RT_BENCH_C1_SECONDS, 3 s each) give the p50 latency a
# proxy adds over the mock directly.
# RT_BENCH_SMAPS=1 prints where the router's idle RSS is (largest mappings).
# RT_BENCH_PREWARM=SECONDS (1; 0: none) of unmeasured traffic before each proxy's timed round, so
# that the round finds its upstream connections open (see PREWARM); the report gives the
# largest latency of the TLS targets' pre-round warm-ups: the cost of reopening a pool.
# A round whose p99 is twice its target's median, or with a request over 50 ms, is listed
# under "Slow rounds" with what else the machine did in it (machine_line), what router-svc
# counted (router_line) and the pauses of Kafka's collector.
# RT_BENCH_PERF="TARGET ..." (router, router-noevents, router-tls, ...) records a perf profile of
# each target's proxy during one extra round after the timed ones (RT_BENCH_PERF_FREQ samples a
# CPU second, 4999) and prints the top symbols by self time in µs per request; with both router
# and router-noevents, also the symbols that differ most between them (where the event
# pipeline's CPU goes). The profiled rounds are not in the figures (perf costs the proxy CPU).
# RT_BENCH_PERF_KEEP=DIR keeps the recordings (with call graphs) for perf report.
# RT_BENCH_SYSCALLS="TARGET ..." counts each target's system calls by thread (perf trace), per
# request, in one more extra round of its own (not the profiled one: a profile taken while perf
# trace hooks every system call would show the tracing), also outside the figures.
# RT_BENCH_CALLGRIND="router router-noevents nginx ..." runs those proxies under valgrind's
# callgrind instead of the timed rounds and prints instructions per request by thread and the
# functions that execute most (user space only; counts repeat where times do not): see cg_run.
# RT_BENCH_GROUPS=N gives every router N more model groups ahead of the benchmark's own, never
# requested (extra_groups): with RT_BENCH_CALLGRIND, what a request costs with a large model_list.
# RT_BENCH_BASE_BIN=PATH runs a second router-svc with events on (another build, e.g. the last
# commit's) as target router-base, interleaved with the others: a change measured side by side
# (the ratio router / router-base), not against a figure from another run.
# RT_BENCH_PIPELINE_CPU=N moves router's event pipeline threads (the publisher, librdkafka's; not
# router-base's) to core N after the warm-up, its loop staying on the proxies' core: with
# RT_BENCH_BASE_BIN this build's router-svc, how much of the loop's extra cost with events comes
# from sharing its core (and caches) with them, side by side.
# router-noevents and router-base serve, between their timed rounds, what router serves in its
# own HTTPS and stream rounds (RT_BENCH_SECONDS of each after each of their rounds, and in the
# warm-up; not measured), as nginx does in nginx-tls and nginx-stream. Without them, router
# against a copy of itself as router-base cost 1.015-1.02 times as much per plain request (four
# runs; its loop thread 1.4-4.1 % more), with them 0.975-1.025 (four runs): a cost of serving the
# three kinds of traffic, not of the events, which entered the event pipeline's figure (router -
# router-noevents). RT_BENCH_MIXED=0 leaves them out (the figures before this).
# RT_BENCH_BASE_SPOOL_DIR=DIR puts router-base's spool in a directory made under DIR (e.g.
# /dev/shm: a filesystem measured side by side, with RT_BENCH_BASE_BIN this build's router-svc).
# The routers with events write up to RT_BENCH_EVENTS_PER_RECORD (64) events per Kafka record
# (kafka.events_per_record), router-base RT_BENCH_BASE_EVENTS_PER_RECORD (64): with
# RT_BENCH_BASE_BIN set to this build's router-svc and 1 here, the setting measured side by side.
# Exits non-zero on a functional failure only (a non-2xx answer, an event not acknowledged by
# Kafka), never on a figure.
set -Eeuo pipefail
# a command that fails stops the run: say which (set -e alone exits without a word; in a
# command substitution its failure is the substitution's, reported where that is used)
trap 'rc_=$?; [ "$BASH_SUBSHELL" != 0 ] ||
    echo "router_bench: line $LINENO: \"$BASH_COMMAND\" failed (exit $rc_)" >&2' ERR
SRC="${TG_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}"
BIN="${TG_BUILD_DIR:?TG_BUILD_DIR unset}"
STATE="$(mktemp -d /tmp/tollgate-router-bench.XXXXXX)"
BENCH_T0=$(date +%s.%N)
unset TG_KAFKA_BROKERS TG_KAFKA_CTL
. "$SRC/tests/lib/services.sh"
tg_services_init "$STATE/services"
CONC=${RT_BENCH_CONC:-64}
STREAM_CONC=${RT_BENCH_STREAM_CONC:-1000}
STREAM_CHUNKS=${RT_BENCH_STREAM_CHUNKS:-100}
DUR=${RT_BENCH_SECONDS:-5}
ROUNDS=${RT_BENCH_ROUNDS:-3}
PROXY_CPU=${RT_BENCH_PROXY_CPU:-1}
LOAD_CPU=${RT_BENCH_LOAD_CPU:-0}
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
WRK=$(command -v wrk) || { echo "router_bench: wrk is needed" >&2; exit 2; }
TICK=$(getconf CLK_TCK)
# 1000 streams: wrk, nginx (two descriptors a proxied stream) and router-svc need more than the
# usual 1024 descriptors
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
PIDS=()
cleanup() {
    local rc=$? p
    for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do
        for _ in $(seq 1 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$p" 2>/dev/null || true
    done
    tg_services_stop_all || true
    [ "$rc" = 0 ] || tail -n 20 "$STATE"/*.log >&2 2>/dev/null || true
    [ -n "${TG_KEEP:-}" ] || rm -rf "$STATE" ${BASE_SPOOL:+"$BASE_SPOOL"}
    exit "$rc"
}
trap cleanup EXIT
die() { echo "router_bench: $*" >&2; exit 1; }
# Command prefixes pinning to a core when the machine has it (taskset execs the command: $! of a
# background start is the process itself).
PIN_PROXY=()
PIN_LOAD=()
if command -v taskset >/dev/null; then
    [ "$(nproc)" -gt "$PROXY_CPU" ] && PIN_PROXY=(taskset -c "$PROXY_CPU")
    [ "$(nproc)" -gt "$LOAD_CPU" ] && PIN_LOAD=(taskset -c "$LOAD_CPU")
fi
wait_http() { # URL
    for _ in $(seq 1 300); do
        curl -ksf -o /dev/null --max-time 1 "$1" && return 0
        sleep 0.1
    done
    return 1
}

# ---- Kafka (one node) on the load core ----
# its collector's pauses, time-stamped by the JVM's uptime, go to kafka-gc.log (see slow rounds)
TG_KAFKA_JAVA_OPTS="$TG_KAFKA_JAVA_OPTS -Xlog:gc:file=$STATE/kafka-gc.log:uptimemillis"
tg_kafka_start 1
# the JVM's start (seconds since the epoch), from which its log counts
KAFKA_T0=$(awk -v b="$(awk '$1 == "btime" {print $2}' /proc/stat)" -v tick="$(getconf CLK_TCK)" \
    '{ c = index($0, ") "); split(substr($0, c + 2), f, " "); printf "%.3f", b + f[20] / tick }' \
    "/proc/$(tg_kafka_node_pid 1)/stat")
[ "${#PIN_LOAD[@]}" = 0 ] || taskset -apc "$LOAD_CPU" "$(tg_kafka_node_pid 1)" >/dev/null || true

# ---- test CA and the mock's certificate (127.0.0.1 and localhost) ----
TLS=$STATE/tls
mkdir -p "$TLS"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=bench-ca \
    -keyout "$TLS/ca.key" -out "$TLS/ca.pem" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=localhost \
    -keyout "$TLS/mock.key" -out "$TLS/mock.csr" 2>/dev/null
printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\n' >"$TLS/ext"
openssl x509 -req -in "$TLS/mock.csr" -CA "$TLS/ca.pem" -CAkey "$TLS/ca.key" -CAcreateserial \
    -days 2 -extfile "$TLS/ext" -out "$TLS/mock.pem" 2>/dev/null
# Both proxies trust a full-size store, as deployed: the system's CA bundle with the test CA
# added (a corporate CA is added the same way), named by SSL_CERT_FILE for router-svc.
cat /etc/ssl/certs/ca-certificates.crt "$TLS/ca.pem" >"$TLS/trust.pem" 2>/dev/null ||
    cp "$TLS/ca.pem" "$TLS/trust.pem"

# ---- the mock provider (nginx, one worker) ----
MOCK_PORT=$(tg_port_pick)
MOCK_TLS_PORT=$(tg_port_pick)
MOCK_TLSNEW_PORT=$(tg_port_pick)
ANSWER='{"id":"chatcmpl-bench","object":"chat.completion","created":1700000000,"model":"gpt-main","system_fingerprint":"fp_bench","choices":[{"index":0,"message":{"role":"assistant","content":"Hello! This is the fixed answer of the benchmark mock provider, about as long as a short reply."},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":12,"completion_tokens":8,"total_tokens":20}}'
# the stream: one word a chunk, then the finish, the usage chunk and [DONE]
CHUNK_HEAD='data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1700000000,"model":"gpt-main","choices":[{"index":0,"delta":'
STREAM_BODY=$(
    for i in $(seq 1 "$STREAM_CHUNKS"); do
        printf '%s{"content":"word%d "},"finish_reason":null}]}\n\n' "$CHUNK_HEAD" "$i"
    done
    printf '%s{},"finish_reason":"stop"}]}\n\n' "$CHUNK_HEAD"
    printf 'data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1700000000,"model":"gpt-main","choices":[],"usage":{"prompt_tokens":12,"completion_tokens":%d,"total_tokens":%d}}\n\n' "$STREAM_CHUNKS" $((STREAM_CHUNKS + 12))
    printf 'data: [DONE]'
)
STREAM_BODY+=$'\n\n' # (the command substitution drops the last blank line)
mkdir -p "$STATE/mock"
chmod 0755 "$STATE" "$STATE/mock" # nginx's workers (nobody) read the file
printf '%s' "$STREAM_BODY" >"$STATE/mock/stream.sse" # a file: nginx takes no 17 KB parameter;
# served to a POST (the static module answers 405, which error_page turns into a GET of the file)
nginx_conf() { # DIR BODY-OF-http-BLOCK
    mkdir -p "$1"
    cat >"$1/nginx.conf" <<NGINX
worker_processes 1;
worker_rlimit_nofile 16384;
pid $1/nginx.pid;
error_log $1/error.log warn;
events { worker_connections 8192; }
http {
    access_log off;
    client_body_temp_path $1/body;
    proxy_temp_path $1/proxy;
    fastcgi_temp_path $1/fastcgi;
    uwsgi_temp_path $1/uwsgi;
    scgi_temp_path $1/scgi;
    keepalive_requests 10000000;
    keepalive_timeout 300s;
$2
}
NGINX
}
nginx_conf "$STATE/mock" "
    server {
        listen 127.0.0.1:$MOCK_PORT;
        listen 127.0.0.1:$MOCK_TLS_PORT ssl;
        ssl_certificate $TLS/mock.pem;
        ssl_certificate_key $TLS/mock.key;
        ssl_session_cache shared:bench:1m;
        # TLS 1.3, as providers speak it (nginx before 1.23.4 offers 1.2 at most by default);
        # sessions live 5 minutes (nginx's default ssl_session_timeout)
        ssl_protocols TLSv1.2 TLSv1.3;
        location / { default_type application/json; return 200 '$ANSWER'; }
        location /stream/ { root $STATE/mock; try_files /stream.sse =404;
                            error_page 405 =200 \$uri; }
        location = /stream.sse { root $STATE/mock; default_type text/event-stream; }
    }
    server {
        # the HTTPS provider that closes after each answer and resumes no session: a full
        # handshake a request (RT_BENCH_HANDSHAKE)
        listen 127.0.0.1:$MOCK_TLSNEW_PORT ssl;
        ssl_certificate $TLS/mock.pem;
        ssl_certificate_key $TLS/mock.key;
        ssl_session_cache off;
        ssl_session_tickets off;
        ssl_protocols TLSv1.2 TLSv1.3;
        keepalive_requests 1;
        location / { default_type application/json; return 200 '$ANSWER'; }
    }"
"${PIN_PROXY[@]}" "$NGINX" -c "$STATE/mock/nginx.conf" -p "$STATE/mock" -g 'daemon off;' 2>>"$STATE/mock.log" &
MOCK_PID=$!
PIDS+=("$MOCK_PID")
wait_http "http://127.0.0.1:$MOCK_PORT/" || die "mock did not start"
wait_http "https://127.0.0.1:$MOCK_TLS_PORT/" || die "mock TLS port did not start"
for p in "$MOCK_TLS_PORT" "$MOCK_TLSNEW_PORT"; do
    timeout 10 openssl s_client -connect "127.0.0.1:$p" -brief </dev/null 2>&1 | grep -q 'TLSv1.3' ||
        die "the mock's TLS port $p does not negotiate TLS 1.3"
done

# ---- nginx proxy_pass (one worker): plain upstream and https:// upstream ----
NGINX_PORT=$(tg_port_pick)
NGINX_TLS_PORT=$(tg_port_pick)
NGINX_TLSNEW_PORT=$(tg_port_pick)
# nginx_tls_server PORT UPSTREAM: a server proxying to the https:// UPSTREAM, verified against
# the same store as router-svc's, sessions reused
nginx_tls_server() {
    cat <<CONF
    server {
        listen 127.0.0.1:$1;
        location / { proxy_pass https://$2; proxy_http_version 1.1;
                     proxy_set_header Connection ""; proxy_buffering off;
                     proxy_ssl_session_reuse on; proxy_ssl_verify on;
                     proxy_ssl_protocols TLSv1.2 TLSv1.3;
                     proxy_ssl_trusted_certificate $TLS/trust.pem; proxy_ssl_name localhost;
                     proxy_ssl_server_name on; }
    }
CONF
}
nginx_conf "$STATE/nginx" "
    upstream mock { server 127.0.0.1:$MOCK_PORT; keepalive 256; }
    upstream mock_tls { server 127.0.0.1:$MOCK_TLS_PORT; keepalive 256; }
    upstream mock_tlsnew { server 127.0.0.1:$MOCK_TLSNEW_PORT; keepalive 256; }
    server {
        listen 127.0.0.1:$NGINX_PORT;
        location / { proxy_pass http://mock; proxy_http_version 1.1;
                     proxy_set_header Connection \"\"; proxy_buffering off; }
    }
$(nginx_tls_server "$NGINX_TLS_PORT" mock_tls)
$(nginx_tls_server "$NGINX_TLSNEW_PORT" mock_tlsnew)"
"${PIN_PROXY[@]}" "$NGINX" -c "$STATE/nginx/nginx.conf" -p "$STATE/nginx" -g 'daemon off;' 2>>"$STATE/nginx.log" &
NGINX_PID=$!
PIDS+=("$NGINX_PID")
wait_http "http://127.0.0.1:$NGINX_PORT/" || die "nginx did not start"

# ---- router-svc: with events (Kafka) and without ----
export RB_KEY="sk-bench-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"
export RB_PROVIDER_KEY="sk-provider-$(head -c 8 /dev/urandom | od -An -tx1 | tr -d ' \n')"
router_conf() { # NAME PORT KAFKA(0|1)
    {
        echo "model_list:"
        extra_groups
        cat <<YAML
  - model_name: bench-plain
    litellm_params: {model: openai/gpt-main, api_base: "http://127.0.0.1:$MOCK_PORT/v1",
                     api_key: os.environ/RB_PROVIDER_KEY, timeout: 30,
                     input_cost_per_token: 0.0000005, output_cost_per_token: 0.0000015}
  - model_name: bench-stream
    litellm_params: {model: openai/gpt-main, api_base: "http://127.0.0.1:$MOCK_PORT/stream/v1",
                     api_key: os.environ/RB_PROVIDER_KEY, timeout: 30,
                     input_cost_per_token: 0.0000005, output_cost_per_token: 0.0000015}
  - model_name: bench-tls
    litellm_params: {model: openai/gpt-main, api_base: "https://localhost:$MOCK_TLS_PORT/v1",
                     api_key: os.environ/RB_PROVIDER_KEY, timeout: 30,
                     input_cost_per_token: 0.0000005, output_cost_per_token: 0.0000015}
  - model_name: bench-tlsnew
    litellm_params: {model: openai/gpt-main, api_base: "https://localhost:$MOCK_TLSNEW_PORT/v1",
                     api_key: os.environ/RB_PROVIDER_KEY, timeout: 30,
                     input_cost_per_token: 0.0000005, output_cost_per_token: 0.0000015}
tollgate:
  listen: 127.0.0.1:$2
  threads: 1
  limits: {max_in_flight: 4096, max_connections: 10000, max_response_bytes: 1048576}
  keys:
    - {key: os.environ/RB_KEY, key_alias: bench}
  spool: {dir: $([ "$1" = routerb ] && [ -n "${BASE_SPOOL:-}" ] && echo "$BASE_SPOOL" || echo "$STATE/spool-$1"), max_bytes: 1073741824}
YAML
        [ "$3" = 1 ] && cat <<YAML
  kafka: {brokers: "$TG_KAFKA_BROKERS", events_topic: tollgate.events.v1,
          control_topic: tollgate.control.v1$(rdk_props "$1"),
          events_per_record: $([ "$1" = routerb ] && echo "${RT_BENCH_BASE_EVENTS_PER_RECORD:-64}" || echo "${RT_BENCH_EVENTS_PER_RECORD:-64}")}
YAML
        true
    } >"$STATE/$1.yaml"
}
# RT_BENCH_GROUPS=N more model groups (one deployment each, never requested), listed before the
# benchmark's own, as in a large LiteLLM model_list: what a request costs with many groups (a
# lookup by name that loops over them grows with N)
extra_groups() {
    local i
    for ((i = 0; i < ${RT_BENCH_GROUPS:-0}; i++)); do
        printf '  - {model_name: extra-group-%d, litellm_params: {model: openai/extra-%d, api_base: "http://127.0.0.1:%s/v1"}, model_info: {id: extra-deployment-%d}}\n' \
            "$i" "$i" "$MOCK_PORT" "$i"
    done
}
# the router's librdkafka properties: RT_BENCH_LIBRDKAFKA, or for router-base
# RT_BENCH_BASE_LIBRDKAFKA when set (a property measured side by side)
rdk_props() {
    local p=${RT_BENCH_LIBRDKAFKA:-}
    [ "$1" = routerb ] && [ -n "${RT_BENCH_BASE_LIBRDKAFKA:-}" ] && p=$RT_BENCH_BASE_LIBRDKAFKA
    [ -n "$p" ] && printf ', librdkafka: {%s}' "$p"
    true
}
ROUTER_PORT=$(tg_port_pick)
ROUTER0_PORT=$(tg_port_pick)
router_conf router "$ROUTER_PORT" 1
router_conf router0 "$ROUTER0_PORT" 0
if [ -n "${RT_BENCH_BASE_BIN:-}" ]; then
    [ -x "$RT_BENCH_BASE_BIN" ] || die "RT_BENCH_BASE_BIN: $RT_BENCH_BASE_BIN is not executable"
    if [ -n "${RT_BENCH_BASE_SPOOL_DIR:-}" ]; then
        BASE_SPOOL=$(mktemp -d "$RT_BENCH_BASE_SPOOL_DIR/tollgate-bench-spool.XXXXXX") ||
            die "RT_BENCH_BASE_SPOOL_DIR: cannot make a directory in $RT_BENCH_BASE_SPOOL_DIR"
    fi
    ROUTERB_PORT=$(tg_port_pick)
    router_conf routerb "$ROUTERB_PORT" 1
fi
export TOLLGATE_LOG_LEVEL=warn SSL_CERT_FILE=$TLS/trust.pem
"${PIN_PROXY[@]}" "$BIN/router-svc/router-svc" --config "$STATE/router.yaml" 2>>"$STATE/router.log" &
ROUTER_PID=$!
PIDS+=("$ROUTER_PID")
"${PIN_PROXY[@]}" "$BIN/router-svc/router-svc" --config "$STATE/router0.yaml" 2>>"$STATE/router0.log" &
ROUTER0_PID=$!
PIDS+=("$ROUTER0_PID")
wait_http "http://127.0.0.1:$ROUTER_PORT/health/readiness" || die "router-svc did not become ready"
wait_http "http://127.0.0.1:$ROUTER0_PORT/health/readiness" || die "router-svc (no events) did not become ready"
if [ -n "${RT_BENCH_BASE_BIN:-}" ]; then
    "${PIN_PROXY[@]}" "$RT_BENCH_BASE_BIN" --config "$STATE/routerb.yaml" 2>>"$STATE/routerb.log" &
    ROUTERB_PID=$!
    PIDS+=("$ROUTERB_PID")
    wait_http "http://127.0.0.1:$ROUTERB_PORT/health/readiness" || die "router-svc (base) did not become ready"
fi

# the requests wrk sends, one script a model
for m in bench-plain bench-tls bench-tlsnew bench-stream; do
    stream=
    [ "$m" = bench-stream ] && stream=',"stream":true'
    cat >"$STATE/$m.lua" <<LUA
wrk.method = "POST"
wrk.body = '{"model":"$m","messages":[{"role":"user","content":"hello there"}],"max_tokens":16$stream}'
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer $RB_KEY"
LUA
done

# ---- callgrind: instructions per request, by thread and by function (RT_BENCH_CALLGRIND) ----
# The proxies named (router: events on; router-noevents; nginx: proxy_pass to the plain port)
# run under valgrind's callgrind, one at a time, each on a port of its own: RT_BENCH_CG_WARM (3)
# seconds of load, counters zeroed, RT_BENCH_CG_SECONDS (10) of load at RT_BENCH_CG_CONC (8)
# connections, counters dumped. Instructions in user space only (the kernel's share is not
# counted), repeatable where CPU time is not: a change's effect on the proxy's own code.
# RT_BENCH_CG_MIXED=1: router's warm-up first carries what it carries in the timed rounds
# besides plain requests, RT_BENCH_CG_WARM seconds of HTTPS-upstream requests and of
# RT_BENCH_CG_STREAM_CONC (100) streams in flight (the others' do not): with RT_BENCH_BASE_BIN
# this build's router-svc, whether a router that served them runs more instructions per plain
# request after (one run: 35,266 against 35,164 in its loop thread, +0.3 %).
# serve_mix URL CONC STREAM_CONC SECONDS OUT WHO: the proxy at URL serves what router serves in
# router-tls and router-stream (HTTPS-upstream requests at CONC connections, then STREAM_CONC
# streams in flight), SECONDS of each, not measured (wrk's output in OUT-tls, OUT-stream)
serve_mix() {
    "${PIN_LOAD[@]}" "$WRK" -t1 -c"$2" -d"${4}s" -s "$STATE/bench-tls.lua" \
        "$1/v1/chat/completions" >"$5-tls" 2>&1
    "${PIN_LOAD[@]}" "$WRK" -t1 -c"$3" -d"${4}s" -s "$STATE/bench-stream.lua" \
        "$1/v1/chat/completions" >"$5-stream" 2>&1
    ! grep -q 'Non-2xx' "$5-tls" "$5-stream" || die "$6: non-2xx answers to its HTTPS or stream requests"
}
cg_run() { # NAME COMMAND...: the figures of one proxy under callgrind
    local name=$1 port=$2 pid f reqs
    shift 2
    rm -rf "$STATE/cg.$name" && mkdir -p "$STATE/cg.$name"
    "${PIN_PROXY[@]}" valgrind --tool=callgrind --separate-threads=yes --dump-instr=no \
        --callgrind-out-file="$STATE/cg.$name/out.%p" "$@" 2>>"$STATE/cg.$name.log" &
    pid=$!
    PIDS+=("$pid")
    for _ in $(seq 1 600); do # up: any HTTP answer
        curl -ks -o /dev/null --max-time 2 -w '%{http_code}' "http://127.0.0.1:$port/" |
            grep -q '^[1-5]' && break
        sleep 0.2
    done
    if [ "$name" = router ] && [ -n "${RT_BENCH_CG_MIXED:-}" ]; then
        serve_mix "http://127.0.0.1:$port" "${RT_BENCH_CG_CONC:-8}" "${RT_BENCH_CG_STREAM_CONC:-100}" \
            "${RT_BENCH_CG_WARM:-3}" "$STATE/cg.$name/wrk" "$name under callgrind"
    fi
    "${PIN_LOAD[@]}" "$WRK" -t1 -c"${RT_BENCH_CG_CONC:-8}" -d"${RT_BENCH_CG_WARM:-3}s" \
        -s "$STATE/bench-plain.lua" "http://127.0.0.1:$port/v1/chat/completions" >/dev/null 2>&1
    callgrind_control -z "$pid" >/dev/null
    "${PIN_LOAD[@]}" "$WRK" -t1 -c"${RT_BENCH_CG_CONC:-8}" -d"${RT_BENCH_CG_SECONDS:-10}s" \
        -s "$STATE/bench-plain.lua" "http://127.0.0.1:$port/v1/chat/completions" \
        >"$STATE/cg.$name/wrk" 2>&1
    callgrind_control -d "$pid" >/dev/null
    reqs=$(awk '/requests in/ {print $1}' "$STATE/cg.$name/wrk")
    [ -n "$reqs" ] && [ "$reqs" -gt 0 ] || die "$name under callgrind: no request: $(cat "$STATE/cg.$name/wrk")"
    ! grep -q 'Non-2xx' "$STATE/cg.$name/wrk" || die "$name under callgrind: non-2xx answers"
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    # the dump after the zeroing: part 1 of each thread's file (callgrind numbers threads in
    # creation order; a thread is named by the first function of ours it runs, librdkafka's
    # threads (no symbols) by their library)
    echo
    echo "callgrind, $name: $reqs requests in ${RT_BENCH_CG_SECONDS:-10} s, instructions per request"
    echo
    echo "| thread | Ir/req |"
    echo "|---|---|"
    local total=0 ir tname
    for f in $(ls "$STATE/cg.$name"/out."$pid".1 "$STATE/cg.$name"/out."$pid".1-* 2>/dev/null); do
        ir=$(awk '/^(summary|totals):/ {print $2; exit}' "$f")
        [ -n "$ir" ] && [ "$((ir / reqs))" -gt 0 ] || continue
        total=$((total + ir))
        callgrind_annotate --tree=none --auto=no --threshold=100 "$f" 2>/dev/null |
            sed -nE 's/^ *([0-9,]+) +\( *[0-9.]+%\) +(.*:.*)$/\1 \2/p' | tr -d , |
            awk -v t="$ir" '$1 < 0.9 * t' >"$f.fn" || true # (the frames the zeroing found
            # on the stack, main or the thread's start, are charged with everything: left out)
        tname=$(callgrind_annotate --tree=none --auto=no --inclusive=yes --threshold=100 "$f" 2>/dev/null |
            sed -nE 's/^ *[0-9,]+ +\( *[0-9.]+%\) +([^ ]*\/)?(router-svc|common|proto)\/[^ ]*:([a-z_0-9]+) .*/\3/p' |
            head -1 || true)
        [ -n "$tname" ] || tname=$(awk '/^ob=.*librdkafka/ { print "librdkafka"; exit }' "$f")
        echo "| ${tname:-thread ${f##*-}} | $((ir / reqs)) |"
    done
    echo "| all | $((total / reqs)) |"
    echo
    echo "$name: functions by own instructions per request (all threads):"
    echo
    cat "$STATE/cg.$name"/*.fn | awk -v r="$reqs" '{ v = $1; $1 = ""; s[$0] += v }
        END { for (k in s) if (s[k] / r >= 1) printf "%8.0f %s\n", s[k] / r, k }' |
        sort -rn | head -n "${RT_BENCH_PERF_LINES:-40}" | sed 's/^/    /' || true
}
if [ -n "${RT_BENCH_CALLGRIND:-}" ]; then
    command -v valgrind >/dev/null || die "RT_BENCH_CALLGRIND needs valgrind"
    {
        echo "### callgrind: instructions per request ($(date -u +%Y-%m-%dT%H:%MZ), ${RT_BENCH_CG_CONC:-8} connections, plain upstream)"
        for t in $RT_BENCH_CALLGRIND; do
            p=$(tg_port_pick)
            case $t in
            router) router_conf cg-router "$p" 1
                cg_run router "$p" "$BIN/router-svc/router-svc" --config "$STATE/cg-router.yaml" ;;
            router-noevents) router_conf cg-router0 "$p" 0
                cg_run router-noevents "$p" "$BIN/router-svc/router-svc" --config "$STATE/cg-router0.yaml" ;;
            router-base) [ -n "${RT_BENCH_BASE_BIN:-}" ] || die "router-base needs RT_BENCH_BASE_BIN"
                router_conf cg-routerb "$p" 1
                cg_run router-base "$p" "$RT_BENCH_BASE_BIN" --config "$STATE/cg-routerb.yaml" ;;
            nginx) nginx_conf "$STATE/cg-nginx" "
    upstream mock { server 127.0.0.1:$MOCK_PORT; keepalive 256; }
    server {
        listen 127.0.0.1:$p;
        location / { proxy_pass http://mock; proxy_http_version 1.1;
                     proxy_set_header Connection \"\"; proxy_buffering off; }
    }"
                # one process (no master): the same request path, in the process run
                cg_run nginx "$p" "$NGINX" -c "$STATE/cg-nginx/nginx.conf" -p "$STATE/cg-nginx" \
                    -g 'daemon off; master_process off;' ;;
            *) die "RT_BENCH_CALLGRIND: unknown target $t (router, router-noevents, router-base, nginx)" ;;
            esac
        done
    } | tee "$STATE/callgrind.md"
    exit 0
fi

# ---- targets ----
TARGETS="direct nginx router${RT_BENCH_BASE_BIN:+ router-base} router-noevents nginx-tls router-tls nginx-stream router-stream"
# RT_BENCH_HANDSHAKE=1: also nginx-tlsnew and router-tlsnew, through the HTTPS provider that
# closes each connection after its answer and resumes no session: a TCP connect and a full TLS
# handshake (ECDHE, the certificate verified against the full-size store) a request, what a
# proxy pays when a pool is opened again after a pause, at RT_BENCH_CONC connections
[ "${RT_BENCH_HANDSHAKE:-0}" = 1 ] && TARGETS="$TARGETS nginx-tlsnew router-tlsnew"
url_of() {
    case $1 in
    direct) echo "http://127.0.0.1:$MOCK_PORT" ;;
    nginx) echo "http://127.0.0.1:$NGINX_PORT" ;;
    nginx-tls) echo "http://127.0.0.1:$NGINX_TLS_PORT" ;;
    nginx-tlsnew) echo "http://127.0.0.1:$NGINX_TLSNEW_PORT" ;;
    nginx-stream) echo "http://127.0.0.1:$NGINX_PORT/stream" ;;
    router | router-tls | router-stream | router-tlsnew) echo "http://127.0.0.1:$ROUTER_PORT" ;;
    router-noevents) echo "http://127.0.0.1:$ROUTER0_PORT" ;;
    router-base) echo "http://127.0.0.1:$ROUTERB_PORT" ;;
    esac
}
pids_of() {
    case $1 in
    direct) echo "$MOCK_PID $(pgrep -P "$MOCK_PID" | tr '\n' ' ')" ;;
    nginx | nginx-tls | nginx-stream | nginx-tlsnew) echo "$NGINX_PID $(pgrep -P "$NGINX_PID" | tr '\n' ' ')" ;;
    router | router-tls | router-stream | router-tlsnew) echo "$ROUTER_PID" ;;
    router-noevents) echo "$ROUTER0_PID" ;;
    router-base) echo "$ROUTERB_PID" ;;
    esac
}
model_of() { case $1 in *-tls) echo bench-tls ;; *-tlsnew) echo bench-tlsnew ;; *-stream) echo bench-stream ;; *) echo bench-plain ;; esac; }
conc_of() {
    [ -n "${RB_C1:-}" ] && { echo 1; return; } # the one-connection latency rounds
    case $1 in *-stream) echo "$STREAM_CONC" ;; *) echo "$CONC" ;; esac
}
proc_ticks() { # AWK-EXPR PID...: the sum over the processes of a /proc/PID/stat expression
    local e=$1 t=0 p
    shift
    for p in "$@"; do t=$((t + $(awk "{print $e}" "/proc/$p/stat"))); done
    echo "$t"
}
cpu_ticks() { proc_ticks '$14 + $15' "$@"; } # utime + stime
usr_ticks() { proc_ticks '$14' "$@"; }       # utime
rss_kb() { local t=0 p; for p in "$@"; do t=$((t + $(awk '/^VmRSS:/ {print $2}' "/proc/$p/status"))); done; echo "$t"; }
metric() { # PORT NAME: a router counter's value
    curl -fsS "http://127.0.0.1:$1/metrics" | awk -v n="$2" '$1 == n {print $2}'
}
ms() { # wrk latency "1.23ms" / "850.00us" / "1.02s" -> ms
    awk '{ v = $1; if (v ~ /us$/) { sub(/us$/, "", v); v /= 1000 } else if (v ~ /ms$/) { sub(/ms$/, "", v) } else if (v ~ /s$/) { sub(/s$/, "", v); v *= 1000 } printf "%.3f", v }'
}
thread_ticks() { # PID -> "name ticks voluntary involuntary faults" per thread (threads of one
    # name summed; voluntary: context switches the thread chose, sleeping or waiting; involuntary:
    # those it was preempted in; faults: minor page faults)
    local d
    for d in /proc/"$1"/task/*; do
        printf '%s %s %s\n' "$(tr ' ' _ <"$d/comm")" "$(awk '{print $14 + $15, $10}' "$d/stat")" \
            "$(awk '/^voluntary_ctxt_switches/ {v = $2} /^nonvoluntary_ctxt_switches/ {i = $2}
                END {print v + 0, i + 0}' "$d/status")"
    done | awk '{ t[$1] += $2; f[$1] += $3; v[$1] += $4; i[$1] += $5 } END {
        for (n in t) print n, t[n], v[n], i[n], f[n] }' | sort
}
thread_table() { # PREFIX REQUESTS: the rounds' thread ticks ($STATE/PREFIX.{0,1}.ROUND) per request
    echo
    echo "| thread | µs/req | context switches per 1000 requests (voluntary / preempted) | page faults per 1000 requests |"
    echo "|---|---|---|---|"
    for round in $(seq 1 "$ROUNDS"); do
        join -a1 -e0 -o 0,1.2,2.2,1.3,2.3,1.4,2.4,1.5,2.5 "$STATE/$1.1.$round" "$STATE/$1.0.$round"
    done | awk -v tick="$TICK" -v n="$2" '{ d[$1] += $2 - $3; v[$1] += $4 - $5; i[$1] += $6 - $7
            f[$1] += $8 - $9 }
        END { for (t in d) if (d[t] > 0 || v[t] + i[t] > 0 || f[t] > 0)
            printf "| %s | %.1f | %.1f (%.1f / %.1f) | %.1f |\n", t, d[t] * 1e6 / tick / n,
                (v[t] + i[t]) * 1000 / n, v[t] * 1000 / n, i[t] * 1000 / n, f[t] * 1000 / n }' |
        sort -t'|' -k3 -gr
}
median() { # (of an even count: the mean of the two in the middle)
    tr ' ' '\n' | grep -v '^$' | sort -g |
        awk '{a[NR]=$1} END { if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2 }'
}
# steal ticks of the proxies' core so far (time the hypervisor gave to another guest)
steal_ticks() { awk -v c="cpu$PROXY_CPU" '$1 == c {print $9}' /proc/stat; }
# The machine around each timed round, to explain a round slower than the target's others: the
# CPU ticks of every process (kernel threads too) and of each core, and the kernel's memory and
# writeback counters. machine_snap FILE; machine_line A B PIDS...: one line on what ran in
# between (the CPU the target PIDS and wrk did not use, by process; each core's steal, iowait,
# irq and softirq time; pages written back, dirty and under writeback, reclaim and compaction).
machine_snap() {
    {
        date +%s.%N | awk '{print "t", $1}'
        # a process that ends between the glob and its read fails cat (pipefail: the run)
        { cat /proc/[0-9]*/stat 2>/dev/null || true; } | awk '{ o = index($0, " ("); c = index($0, ") ");
            n = substr($0, o + 2, c - o - 2); gsub(/[^A-Za-z0-9_.:\/-]/, "_", n);
            split(substr($0, c + 2), f, " "); print "p", $1, n, f[12] + f[13] }'
        awk '$1 ~ /^cpu[0-9]+$/ {print "c", $1, $6, $7, $8, $9}' /proc/stat
        awk '$1 ~ /^(nr_dirty|nr_writeback|pgpgout|pgmajfault|pgscan_kswapd|pgscan_direct|compact_stall|thp_fault_alloc|thp_collapse_alloc)$/ {print "v", $1, $2}' /proc/vmstat
    } >"$1"
}
machine_line() {
    local a=$1 b=$2
    shift 2
    awk -v tick="$TICK" -v t0="$BENCH_T0" -v skip=" $* " '
        FNR == 1 && NR != 1 { second = 1 }
        $1 == "t" { if (second) t1 = $2; else ta = $2; next }
        $1 == "p" { k = $2 " " $3; if (second) pb[k] = $4; else pa[k] = $4; next }
        $1 == "c" { k = $2; if (second) { s[k] = $6 - cs[k]; w[k] = $3 - cw[k]; q[k] = $4 + $5 - cq[k] }
                    else { cs[k] = $6; cw[k] = $3; cq[k] = $4 + $5 }; next }
        $1 == "v" { if (second) vb[$2] = $3; else va[$2] = $3 }
        END {
            d = t1 - ta; line = sprintf("at %.0f s, %.1f s:", ta - t0, d)
            for (k in s) line = line sprintf(" %s steal %.0f%% iowait %.0f%% irq %.0f%%;", k,
                s[k] * 100 / tick / d, w[k] * 100 / tick / d, q[k] * 100 / tick / d)
            line = line sprintf(" written back %d kB, dirty %d kB, writeback %d kB",
                vb["pgpgout"] - va["pgpgout"], vb["nr_dirty"] * 4, vb["nr_writeback"] * 4)
            for (k in vb) if (k != "pgpgout" && k !~ /^nr_/ && vb[k] > va[k])
                line = line sprintf(", %s +%d", k, vb[k] - va[k])
            line = line "; others:"
            for (k in pb) { split(k, f, " "); if (index(skip, " " f[1] " ") || f[2] == "wrk") continue
                u = pb[k] - ((k in pa) ? pa[k] : 0); if (u > 0) o[k] = u }
            for (n = 0; n < 5; n++) { m = ""; for (k in o) if (m == "" || o[k] > o[m]) m = k
                if (m == "") break; split(m, f, " "); line = line sprintf(" %s %.0f ms", f[2], o[m] * 1000 / tick)
                delete o[m] }
            print line }' "$a" "$b"
}
run_wrk() { # TARGET SECONDS OUT
    "${PIN_LOAD[@]}" "$WRK" -t1 -c"$(conc_of "$1")" -d"${2}s" --latency -s "$STATE/$(model_of "$1").lua" \
        "$(url_of "$1")/v1/chat/completions" >"$3" 2>&1
}

# warm-up: every target once (connections, TLS sessions, page cache), then idle RSS with TLS
# (taken before the streams' warm-up: 1000 streams in flight leave buffers behind that the
# request targets' idle figure is not about)
for t in $TARGETS; do case $t in *-stream) ;; *) run_wrk "$t" 2 "$STATE/warm.$t" ;; esac; done
if [ -n "${RT_BENCH_PIPELINE_CPU:-}" ]; then
    # router's event pipeline threads (started by now) on a core of their own
    for d in /proc/"$ROUTER_PID"/task/*; do
        case $(cat "$d/comm") in
            tg-publisher | rdk:*) taskset -pc "$RT_BENCH_PIPELINE_CPU" "${d##*/}" >/dev/null ;;
        esac
    done
fi
sleep 1
RSS_IDLE_ROUTER=$(rss_kb "$ROUTER_PID")
for t in $TARGETS; do case $t in *-stream) run_wrk "$t" 2 "$STATE/warm.$t" ;; esac; done
mixed() { # TARGET SECONDS TAG: TARGET (router-noevents, router-base) serves the mix router
    # serves besides plain requests (serve_mix), unless RT_BENCH_MIXED=0
    [ "${RT_BENCH_MIXED:-1}" = 0 ] && return 0
    serve_mix "$(url_of "$1")" "$CONC" "$STREAM_CONC" "$2" "$STATE/$3.$1" "$1 ($3)"
}
for t in router-noevents router-base; do
    if [[ " $TARGETS " == *" $t "* ]]; then mixed "$t" 2 warm; fi
done
# router-base after the same warm-up as router's, streams included (router's idle figure above is
# taken before its streams): compare router-base's figures with router's after the rounds
[ -n "${RT_BENCH_BASE_BIN:-}" ] && RSS_WARM_ROUTERB=$(rss_kb "$ROUTERB_PID")
if [ -n "${RT_BENCH_SMAPS:-}" ]; then
    # where the router's idle RSS is: the largest mappings
    awk '/^[0-9a-f]+-[0-9a-f]+ / { name = ($6 == "" ? "[anon]" : $6) } /^Rss:/ { rss[name] += $2 }
         END { for (n in rss) if (rss[n] >= 256) printf "%8d kB  %s\n", rss[n], n }' \
        "/proc/$ROUTER_PID/smaps" | sort -rn | head -20 >"$STATE/smaps.txt"
    RSS_IDLE_ROUTER0=$(rss_kb "$ROUTER0_PID")
fi
RSS_IDLE_NGINX=$(rss_kb $(pids_of nginx))
APPENDED0=$(metric "$ROUTER_PORT" tollgate_router_events_appended_total)

declare -A RPS_ALL CPU_ALL USR_ALL P50_ALL P99_ALL MAX_ALL FAILS REQS STEAL_ALL
declare -A EXTRA_REQS # requests through router's targets outside the timed rounds, after warm-up
# Before each timed round of a proxy, RT_BENCH_PREWARM (1) seconds of the same traffic, not
# measured (0: none). Both proxies close an upstream connection idle for 60 s (nginx's upstream
# keepalive_timeout, router-svc's pool), and this schedule leaves a target idle for up to ~75 s
# between its rounds (the order reversed every other round, the streams and the mixed rounds in
# between): without it, such a round began by opening its 64 upstream connections again, TLS
# handshakes at once on the proxies' core, and from 5 minutes after the warm-up (the mock's
# session lifetime, nginx's default ssl_session_timeout) full ones. That is the cost of traffic
# coming back after a pause, not of steady traffic: the pre-round warm-ups report it (the largest
# latency in each, and router-tls's TLS handshakes).
PREWARM=${RT_BENCH_PREWARM:-1}
# the targets in order in odd rounds, in reverse in even ones: a drift of the machine's speed
# through a round weighs on both sides of each pair alike over two rounds
round_order() { if [ $(($1 % 2)) = 1 ]; then echo $TARGETS; else echo $TARGETS | tr ' ' '\n' | tac; fi; }
for round in $(seq 1 "$ROUNDS"); do
    for t in $(round_order "$round"); do
        pids=$(pids_of "$t")
        [ "$t" = router ] && thread_ticks "$ROUTER_PID" >"$STATE/threads.0.$round"
        [ "$t" = router-base ] && thread_ticks "$ROUTERB_PID" >"$STATE/threads-base.0.$round"
        [ "$t" = router-noevents ] && thread_ticks "$ROUTER0_PID" >"$STATE/threads-noevents.0.$round"
        port=$(url_of "$t" | sed 's/.*://') # (read for router targets only: no path in their URL)
        if [ "$PREWARM" != 0 ] && [ "$t" != direct ]; then
            case $t in router*) curl -fsS "http://127.0.0.1:$port/metrics" >"$STATE/metrics.$t.$round.w" ;; esac
            run_wrk "$t" "$PREWARM" "$STATE/prewarm.$t.$round"
            case $t in router | router-tls | router-stream | router-tlsnew)
                EXTRA_REQS[$t]=$((${EXTRA_REQS[$t]:-0} + $(awk '/requests in/ {print $1}' "$STATE/prewarm.$t.$round"))) ;;
            esac
        fi
        case $t in router*) curl -fsS "http://127.0.0.1:$port/metrics" >"$STATE/metrics.$t.$round.0" ;; esac
        machine_snap "$STATE/machine.0"
        c0=$(cpu_ticks $pids)
        u0=$(usr_ticks $pids)
        s0=$(steal_ticks)
        run_wrk "$t" "$DUR" "$STATE/wrk.$t.$round"
        c1=$(cpu_ticks $pids)
        u1=$(usr_ticks $pids)
        s1=$(steal_ticks)
        machine_snap "$STATE/machine.1"
        case $t in router*) curl -fsS "http://127.0.0.1:$port/metrics" >"$STATE/metrics.$t.$round.1" ;; esac
        machine_line "$STATE/machine.0" "$STATE/machine.1" $pids >"$STATE/machine.$t.$round"
        awk '$1 == "t" {printf "%s ", $2}' "$STATE/machine.0" "$STATE/machine.1" >"$STATE/when.$t.$round"
        [ "$t" = router ] && thread_ticks "$ROUTER_PID" >"$STATE/threads.1.$round"
        [ "$t" = router-base ] && thread_ticks "$ROUTERB_PID" >"$STATE/threads-base.1.$round"
        [ "$t" = router-noevents ] && thread_ticks "$ROUTER0_PID" >"$STATE/threads-noevents.1.$round"
        case $t in router-noevents | router-base) mixed "$t" "$DUR" "round$round" ;; esac
        f=$STATE/wrk.$t.$round
        rps=$(awk '/^Requests\/sec:/ {print $2}' "$f")
        reqs=$(awk '/requests in/ {print $1}' "$f")
        [ -n "$reqs" ] && [ "$reqs" -gt 0 ] || die "$t: wrk made no request: $(cat "$f")"
        non2xx=$(awk '/Non-2xx/ {print $5}' "$f")
        errs=$(awk '/Socket errors/ {n = 0; for (i = 1; i <= NF; i++) if ($i ~ /^[0-9]+,?$/) n += $i; print n}' "$f")
        RPS_ALL[$t]="${RPS_ALL[$t]:-} ${rps%.*}"
        CPU_ALL[$t]="${CPU_ALL[$t]:-} $(echo "$c0 $c1 $TICK $reqs" | awk '{printf "%.1f", ($2 - $1) * 1e6 / $3 / $4}')"
        USR_ALL[$t]="${USR_ALL[$t]:-} $(echo "$u0 $u1 $TICK $reqs" | awk '{printf "%.1f", ($2 - $1) * 1e6 / $3 / $4}')"
        P50_ALL[$t]="${P50_ALL[$t]:-} $(awk '$1 == "50%" {print $2}' "$f" | ms)"
        P99_ALL[$t]="${P99_ALL[$t]:-} $(awk '$1 == "99%" {print $2}' "$f" | ms)"
        MAX_ALL[$t]="${MAX_ALL[$t]:-} $(awk '$1 == "Latency" {print $4; exit}' "$f" | ms)"
        FAILS[$t]=$((${FAILS[$t]:-0} + ${non2xx:-0} + ${errs:-0}))
        REQS[$t]=$((${REQS[$t]:-0} + reqs))
        STEAL_ALL[$t]="${STEAL_ALL[$t]:-} $(echo "$s0 $s1 $TICK $DUR" | awk '{printf "%.0f", ($2 - $1) * 100 / $3 / $4}')"
    done
done
RSS_ROUTER=$(rss_kb "$ROUTER_PID")
[ -n "${RT_BENCH_BASE_BIN:-}" ] && RSS_ROUTERB=$(rss_kb "$ROUTERB_PID")

# The instrumented rounds, after the timed ones and outside their figures: a profile (perf
# record) of each RT_BENCH_PERF target, then a count of system calls (perf trace) of each
# RT_BENCH_SYSCALLS target, one round each (nginx: the master and its worker, whose work it is)
instrumented() { # KIND TARGET: one round of TARGET with perf KIND (perf or trace) attached
    local t=$2 pids ipid
    pids=$(pids_of "$t")
    if [ "$1" = perf ]; then
        perf record -F "${RT_BENCH_PERF_FREQ:-4999}" -g -p "$(echo $pids | tr ' ' ',')" \
            -o "$STATE/perf.$t.data" -- sleep "$DUR" >/dev/null 2>&1 &
    else
        perf trace -s -p "$(echo $pids | tr ' ' ',')" -o "$STATE/syscalls.$t" \
            -- sleep "$DUR" >/dev/null 2>&1 &
    fi
    ipid=$!
    run_wrk "$t" "$DUR" "$STATE/wrk.$t.$1"
    wait "$ipid" || true
    EXTRA_REQS[$t]=$((${EXTRA_REQS[$t]:-0} + $(awk '/requests in/ {print $1}' "$STATE/wrk.$t.$1")))
}
for t in ${RT_BENCH_PERF:-}; do instrumented perf "$t"; done
for t in ${RT_BENCH_SYSCALLS:-}; do instrumented trace "$t"; done
RSS_NGINX=$(rss_kb $(pids_of nginx))

# One connection, one request at a time: the latency a proxy adds to a request (p50 over the
# mock directly), in RT_BENCH_C1_SECONDS (3) interleaved rounds like the others; router-base
# and router-noevents tell how much of the router's share a build or the events make
C1_TARGETS="direct nginx router${RT_BENCH_BASE_BIN:+ router-base} router-noevents nginx-tls router-tls"
declare -A C1_P50_ALL C1_P50
for round in $(seq 1 "$ROUNDS"); do
    for t in $C1_TARGETS; do
        RB_C1=1 run_wrk "$t" "${RT_BENCH_C1_SECONDS:-3}" "$STATE/c1.$t.$round"
        case $t in router | router-tls) C1_REQS=$((${C1_REQS:-0} + $(awk '/requests in/ {print $1}' "$STATE/c1.$t.$round"))) ;; esac
        C1_P50_ALL[$t]="${C1_P50_ALL[$t]:-} $(awk '$1 == "50%" {print $2}' "$STATE/c1.$t.$round" | ms)"
    done
done
for t in $C1_TARGETS; do C1_P50[$t]=$(echo "${C1_P50_ALL[$t]}" | median); done

# every event of the router with Kafka acknowledged (the publisher drains within seconds)
APPENDED=$(( $(metric "$ROUTER_PORT" tollgate_router_events_appended_total) - APPENDED0 ))
WANT=$((REQS[router] + REQS[router-tls] + REQS[router-stream] + ${REQS[router-tlsnew]:-0} +
    ${C1_REQS:-0} + ${EXTRA_REQS[router]:-0} + ${EXTRA_REQS[router-tls]:-0} +
    ${EXTRA_REQS[router-stream]:-0} + ${EXTRA_REQS[router-tlsnew]:-0}))
for _ in $(seq 1 300); do
    acked=$(metric "$ROUTER_PORT" tollgate_router_events_acked_total)
    total=$(metric "$ROUTER_PORT" tollgate_router_events_appended_total)
    [ "${acked%.*}" -ge "${total%.*}" ] && break
    sleep 0.1
done

# prewarm_line: the pre-round warm-ups of the TLS targets: their largest latency in each round,
# and router-tls's upstream TLS handshakes (resumed) in them
prewarm_line() {
    local t round f
    [ "$PREWARM" != 0 ] || return 0
    echo "Pre-round warm-ups ($PREWARM s, not measured), largest latency in each round, ms:"
    echo
    for t in nginx-tls router-tls; do
        printf -- '- %s:' "$t"
        for round in $(seq 1 "$ROUNDS"); do
            f=$STATE/prewarm.$t.$round
            printf ' %s' "$(awk '$1 == "Latency" {print $4; exit}' "$f" | ms)"
            [ "$t" = router-tls ] && awk 'FNR == 1 && NR != 1 { second = 1 }
                $1 ~ /^tollgate_router_upstream_(tls_handshakes|tls_resumed|connections_opened|drained)_total$/ { v[$1] += second ? $2 : -$2 }
                END { h = v["tollgate_router_upstream_tls_handshakes_total"]
                      if (h) printf " (%d TLS handshakes, %d resumed)", h, v["tollgate_router_upstream_tls_resumed_total"]
                      if (v["tollgate_router_upstream_drained_total"]) printf " (%d drained)", v["tollgate_router_upstream_drained_total"] }' \
                "$STATE/metrics.$t.$round.w" "$STATE/metrics.$t.$round.0"
        done
        echo
    done
}
# router_line A B: what the router counted between two scrapes of its metrics: requests over
# 25 and 50 ms by its own clock, upstream TLS handshakes (resumed), retries, requests that found
# every upstream connection taken
router_line() {
    awk 'FNR == 1 && NR != 1 { second = 1 }
        /^#/ { next }
        { k = $1; sub(/\{.*/, "", k); l = $1
          if (k == "tollgate_router_request_duration_seconds_bucket") k = k (l ~ /le="0.025"/ ? "25" : l ~ /le="0.05"/ ? "50" : "")
          if (k == "tollgate_router_request_duration_seconds_count" || k ~ /_bucket(25|50)$/ ||
              k ~ /^tollgate_router_(upstream_tls_handshakes|upstream_tls_resumed|upstream_connections_opened|retries|upstream_full|upstream_timeouts)_total$/)
              v[k] += (second ? $2 : -$2) }
        END { n = v["tollgate_router_request_duration_seconds_count"]
              printf " router: %d requests, %d over 25 ms and %d over 50 ms by its clock, %d upstream connections opened, %d TLS handshakes (%d resumed), %d retries, %d upstream full, %d upstream timeouts;",
                n, n - v["tollgate_router_request_duration_seconds_bucket25"],
                n - v["tollgate_router_request_duration_seconds_bucket50"],
                v["tollgate_router_upstream_connections_opened_total"],
                v["tollgate_router_upstream_tls_handshakes_total"], v["tollgate_router_upstream_tls_resumed_total"],
                v["tollgate_router_retries_total"], v["tollgate_router_upstream_full_total"],
                v["tollgate_router_upstream_timeouts_total"] }' "$1" "$2"
}
# conns_line T: T's provider connections over the whole run (its last scrape): opened, closed by
# reason, drained (cancelled transfers whose connection was kept)
conns_line() {
    local f=$STATE/metrics.$1.$ROUNDS.1
    [ -f "$f" ] || return 0
    awk -v t="$1" '$1 == "tollgate_router_upstream_connections_opened_total" { o = $2 }
        $1 == "tollgate_router_upstream_drained_total" { d = $2 }
        $1 ~ /^tollgate_router_upstream_connections_closed_total\{/ && $2 > 0 {
            r = $1; sub(/.*reason="/, "", r); sub(/".*/, "", r); c = c sprintf(" %s %d", r, $2) }
        END { printf "- %s: %d provider connections opened; closed:%s; %d drained\n", t, o, c == "" ? " none" : c, d }' "$f"
}
# slow_rounds: rounds slower than the target's others (a p99 at least twice the target's median,
# or a request over 50 ms, streams and tlsnew's full handshakes aside): what else the machine did
# meanwhile (machine_line), what router-svc counted (router_line), the pauses of Kafka's collector
slow_rounds() {
    local t round p99 max when long rl
    echo "Slow rounds (p99 at least twice the target's median p99, or a request over 50 ms):"
    echo
    for t in $TARGETS; do
        round=0
        for p99 in ${P99_ALL[$t]}; do
            round=$((round + 1))
            max=$(echo "${MAX_ALL[$t]}" | awk -v r="$round" '{print $r}')
            # (a stream lasts longer than 50 ms, and so does a request behind 64 full handshakes)
            case $t in *-stream | *-tlsnew) long=1 ;; *) long=0 ;; esac
            echo "$p99 ${P99[$t]} $max $long" |
                awk '{ exit !($1 >= 2 * $2 || ($3 > 50 && $4 == 0)) }' || continue
            read -r -a when <"$STATE/when.$t.$round"
            rl=
            case $t in router*) rl=$(router_line "$STATE/metrics.$t.$round.0" "$STATE/metrics.$t.$round.1") ;; esac
            echo "- $t, round $round: p99 $p99 ms (median ${P99[$t]}), max $max ms;" \
                "$(cat "$STATE/machine.$t.$round");$rl" \
                "Kafka's collector: $(awk -v k0="$KAFKA_T0" -v a="${when[0]}" -v b="${when[1]}" '
                    { u = $1; gsub(/[^0-9]/, "", u); p = $NF }
                    p ~ /ms$/ && k0 + u / 1000 >= a && k0 + u / 1000 <= b {
                        sub(/ms$/, "", p); n++; s += p; if (p > m) m = p }
                    END { if (n) printf "%d pauses, %.1f ms, the longest %.1f ms", n, s, m
                          else printf "no pause" }' "$STATE/kafka-gc.log" 2>/dev/null)"
        done
    done | grep . || echo "none"
}
declare -A RPS CPU USR P50 P99 MAX
for t in $TARGETS; do
    MAX[$t]=$(echo "${MAX_ALL[$t]}" | tr ' ' '\n' | grep -v '^$' | sort -g | tail -1)
    RPS[$t]=$(echo "${RPS_ALL[$t]}" | median)
    CPU[$t]=$(echo "${CPU_ALL[$t]}" | median)
    USR[$t]=$(echo "${USR_ALL[$t]}" | median)
    P50[$t]=$(echo "${P50_ALL[$t]}" | median)
    P99[$t]=$(echo "${P99_ALL[$t]}" | median)
done
ratio() { echo "$1 $2" | awk '{ if ($2 > 0) printf "%.2f", $1 / $2; else print "n/a" }'; }
diff_us() { echo "$1 $2" | awk '{ printf "%.1f", $1 - $2 }'; }
# paired ARRAY A B [diff]: A's figure over B's (or minus, with diff) in each round, as
# "median (round 1, round 2, ...)"
paired() {
    local -n all=$1
    local v
    v=$(paste -d' ' <(echo "${all[$2]}" | tr ' ' '\n' | grep -v '^$') \
                    <(echo "${all[$3]}" | tr ' ' '\n' | grep -v '^$') |
        awk -v op="${4:-ratio}" '{ if (op == "diff") printf "%.1f ", $1 - $2;
                                   else if ($2 > 0) printf "%.2f ", $1 / $2 }')
    echo "$(echo "$v" | median) (${v% })"
}
{
    echo
    echo "### router-svc as deployed ($(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, load average $(cut -d' ' -f1 /proc/loadavg), $CONC connections, median of $ROUNDS interleaved ${DUR}s rounds)"
    echo
    echo "Spend events on (Apache Kafka, one node) unless said; proxies and mock on core $PROXY_CPU, wrk and Kafka on core $LOAD_CPU;"
    echo "router-svc \`threads: 1\`, nginx one worker; the mock is nginx answering a fixed $(printf %s "$ANSWER" | wc -c)-byte chat completion."
    echo
    echo "| target | req/s | CPU µs/req (proxy) | of it in user space | p50 ms | p99 ms | max ms (all rounds) | non-2xx + errors | steal % of the proxies' core (rounds) |"
    echo "|---|---|---|---|---|---|---|---|---|"
    for t in $TARGETS; do
        echo "| $t | ${RPS[$t]} (runs:${RPS_ALL[$t]}) | ${CPU[$t]} (runs:${CPU_ALL[$t]}) | ${USR[$t]} | ${P50[$t]} | ${P99[$t]} (runs:${P99_ALL[$t]}) | ${MAX[$t]} | ${FAILS[$t]} |${STEAL_ALL[$t]} |"
    done
    echo
    echo "A ratio of medians (value) sets figures from different rounds against each other; where the"
    echo "machine's speed moves between rounds, the ratio within each round (the two targets measured"
    echo "seconds apart) is the steadier figure: \"per round\" gives their median and each."
    echo
    echo "| ratio | value | per round | target |"
    echo "|---|---|---|---|"
    echo "| router / nginx throughput | $(ratio "${RPS[router]}" "${RPS[nginx]}") | $(paired RPS_ALL router nginx) | >= 0.95 |"
    echo "| router / nginx CPU per request | $(ratio "${CPU[router]}" "${CPU[nginx]}") | $(paired CPU_ALL router nginx) | <= 1.1 |"
    echo "| router / nginx p99 | $(ratio "${P99[router]}" "${P99[nginx]}") | $(paired P99_ALL router nginx) | |"
    echo "| router-tls / nginx-tls throughput | $(ratio "${RPS[router-tls]}" "${RPS[nginx-tls]}") | $(paired RPS_ALL router-tls nginx-tls) | >= 0.9 |"
    echo "| router-tls / nginx-tls CPU per request | $(ratio "${CPU[router-tls]}" "${CPU[nginx-tls]}") | $(paired CPU_ALL router-tls nginx-tls) | <= 1.2 |"
    echo "| router-tls / nginx-tls p99 | $(ratio "${P99[router-tls]}" "${P99[nginx-tls]}") | $(paired P99_ALL router-tls nginx-tls) | <= 1.2 |"
    if [ "${RT_BENCH_HANDSHAKE:-0}" = 1 ]; then
        echo "| router-tlsnew / nginx-tlsnew throughput (a full handshake a request) | $(ratio "${RPS[router-tlsnew]}" "${RPS[nginx-tlsnew]}") | $(paired RPS_ALL router-tlsnew nginx-tlsnew) | |"
        echo "| router-tlsnew / nginx-tlsnew CPU per request | $(ratio "${CPU[router-tlsnew]}" "${CPU[nginx-tlsnew]}") | $(paired CPU_ALL router-tlsnew nginx-tlsnew) | |"
    fi
    echo "| router-tls largest latency in any round (after warm-up) | ${MAX[router-tls]} ms (nginx-tls ${MAX[nginx-tls]} ms) | | <= 50 ms |"
    echo "| router-stream / nginx-stream CPU per chunk ($STREAM_CHUNKS chunks a stream, $STREAM_CONC streams in flight) | $(ratio "${CPU[router-stream]}" "${CPU[nginx-stream]}") ($(echo "${CPU[router-stream]} ${CPU[nginx-stream]} $STREAM_CHUNKS" | awk '{printf "%.2f / %.2f", $1 / $3, $2 / $3}') µs) | $(paired CPU_ALL router-stream nginx-stream) | <= 1.2 |"
    echo "| router-stream / nginx-stream throughput (streams/s) | $(ratio "${RPS[router-stream]}" "${RPS[nginx-stream]}") | $(paired RPS_ALL router-stream nginx-stream) | |"
    echo "| router / direct throughput | $(ratio "${RPS[router]}" "${RPS[direct]}") | | |"
    us_over() { echo "$1 $2" | awk '{ printf "%+.0f", ($1 - $2) * 1000 }'; }
    echo "| one connection: p50 added over direct, µs (direct ${C1_P50[direct]} ms) | router $(us_over "${C1_P50[router]}" "${C1_P50[direct]}"),$([ -n "${RT_BENCH_BASE_BIN:-}" ] && echo " router-base $(us_over "${C1_P50[router-base]}" "${C1_P50[direct]}"),") router-noevents $(us_over "${C1_P50[router-noevents]}" "${C1_P50[direct]}"), nginx $(us_over "${C1_P50[nginx]}" "${C1_P50[direct]}") | | router <= +60 |"
    echo "| one connection, HTTPS upstream: p50 added over direct, µs | router-tls $(us_over "${C1_P50[router-tls]}" "${C1_P50[direct]}"), nginx-tls $(us_over "${C1_P50[nginx-tls]}" "${C1_P50[direct]}") | | |"
    echo "| event pipeline CPU µs/req (router - router-noevents) | $(diff_us "${CPU[router]}" "${CPU[router-noevents]}") | $(paired CPU_ALL router router-noevents diff) | <= 3 |"
    if [ -n "${RT_BENCH_BASE_BIN:-}" ]; then
        echo "| router / router-base ($RT_BENCH_BASE_BIN) CPU per request | $(ratio "${CPU[router]}" "${CPU[router-base]}") | $(paired CPU_ALL router router-base) | |"
        echo "| router / router-base throughput | $(ratio "${RPS[router]}" "${RPS[router-base]}") | $(paired RPS_ALL router router-base) | |"
    fi
    echo "| router RSS kB idle after warm-up (TLS upstream pooled) / after the rounds | $RSS_IDLE_ROUTER / $RSS_ROUTER | | <= 25600 idle |"
    [ -n "${RT_BENCH_BASE_BIN:-}" ] &&
        echo "| router-base RSS kB after its warm-up, streams included / after the rounds | $RSS_WARM_ROUTERB / $RSS_ROUTERB | | |"
    echo "| nginx RSS kB idle / after | $RSS_IDLE_NGINX / $RSS_NGINX | | |"
    echo "| events appended / requests through the router with Kafka | $APPENDED / $WANT | | equal, up to the requests in flight when wrk stops (connections x rounds) |"
    echo "| events per Kafka record (router$([ -n "${RT_BENCH_BASE_BIN:-}" ] && echo ", router-base")) | $(metric "$ROUTER_PORT" tollgate_router_events_acked_total | awk -v r="$(metric "$ROUTER_PORT" tollgate_router_kafka_records_produced_total)" '{printf "%.1f", (r > 0 ? $1 / r : 0)}')$([ -n "${RT_BENCH_BASE_BIN:-}" ] && metric "$ROUTERB_PORT" tollgate_router_events_acked_total | awk -v r="$(metric "$ROUTERB_PORT" tollgate_router_kafka_records_produced_total)" '{printf ", %.1f", (r > 0 ? $1 / r : 0)}') | | |"
    echo "| memory trims after bursts of events in flight (router) | $(metric "$ROUTER_PORT" tollgate_router_memory_trims_total) | | |"
    echo
    echo "router-svc (events on, plain upstream) CPU by thread, µs per request, summed over the rounds:"
    thread_table threads "${REQS[router]}"
    echo
    echo "router-noevents CPU by thread, µs per request:"
    thread_table threads-noevents "${REQS[router-noevents]}"
    if [ -n "${RT_BENCH_BASE_BIN:-}" ]; then
        echo
        echo "router-base (events_per_record: ${RT_BENCH_BASE_EVENTS_PER_RECORD:-64}) CPU by thread, µs per request:"
        thread_table threads-base "${REQS[router-base]}"
    fi
    echo
    prewarm_line
    echo
    echo "Provider connections of the router targets over the run (from the start):"
    echo
    for t in $TARGETS; do case $t in router*) conns_line "$t" ;; esac; done
    echo
    slow_rounds
} | tee "$STATE/bench.md"
if [ -f "$STATE/smaps.txt" ]; then
    echo
    echo "router-svc idle RSS by mapping (events on; the router without events: $RSS_IDLE_ROUTER0 kB):"
    echo
    sed 's/^/    /' "$STATE/smaps.txt"
fi
# perf_us TARGET: "µs-per-request comm dso symbol" lines of the target's profile (self time;
# samples / frequency over the requests of the profiled round)
perf_us() {
    local reqs
    reqs=$(awk '/requests in/ {print $1}' "$STATE/wrk.$1.perf")
    perf report -i "$STATE/perf.$1.data" --stdio --no-children -g none -n --sort comm,dso,sym \
        2>/dev/null | awk -v f="${RT_BENCH_PERF_FREQ:-4999}" -v r="$reqs" '
        /^#/ || !/%/ { next }
        { s = $2; $1 = ""; $2 = ""; sub(/^ +/, ""); printf "%.3f %s\n", s / f * 1e6 / r, $0 }'
}
for t in ${RT_BENCH_SYSCALLS:-}; do
    [ -f "$STATE/syscalls.$t" ] || continue
    echo
    echo "system calls of $t (a round of its own, traced), by thread, calls per request:"
    awk -v r="$(awk '/requests in/ {print $1}' "$STATE/wrk.$t.trace")" '
        /events,/ { th = $1 " " $2; sub(/,$/, "", th); next }
        $2 ~ /^[0-9]+$/ && $1 ~ /^[a-z_0-9]+$/ && th != "" {
            if ($2 / r >= 0.001) printf "    %-28s %-16s %8.3f\n", th, $1, $2 / r }' "$STATE/syscalls.$t"
done
for t in ${RT_BENCH_PERF:-}; do
    [ -f "$STATE/perf.$t.data" ] || continue
    echo
    echo "perf profile of $t (a round of its own), self time by symbol, µs per request:"
    perf_us "$t" | sort -rn >"$STATE/perf.$t.txt"
    head -n "${RT_BENCH_PERF_LINES:-40}" "$STATE/perf.$t.txt" | sed 's/^/    /'
    awk '{ s += $1 } END { printf "    (%.1f µs per request in all)\n", s }' "$STATE/perf.$t.txt"
    if [ -n "${RT_BENCH_PERF_KEEP:-}" ]; then
        mkdir -p "$RT_BENCH_PERF_KEEP" && cp "$STATE/perf.$t.data" "$RT_BENCH_PERF_KEEP/" &&
            echo "perf data kept in $RT_BENCH_PERF_KEEP/perf.$t.data"
    fi
done
if [ -f "$STATE/perf.router.txt" ] && [ -f "$STATE/perf.router-noevents.txt" ]; then
    echo
    echo "router - router-noevents, µs per request by symbol (threads by name; largest differences):"
    awk '{ k = $0; sub(/^[^ ]+ /, "", k) }
         NR == FNR { a[k] += $1; next }
         { b[k] += $1 }
         END { for (k in a) d[k] = a[k] - b[k]; for (k in b) if (!(k in a)) d[k] = -b[k];
               for (k in d) printf "%+.3f %s\n", d[k], k }' \
        "$STATE/perf.router.txt" "$STATE/perf.router-noevents.txt" |
        sort -rn -k1,1 | awk -v n="${RT_BENCH_PERF_LINES:-40}" '
            { v = $1 + 0 } (v >= 0.02 || v <= -0.02) && ++k <= n { print "    " $0 }'
fi
for t in $TARGETS; do
    [ "${FAILS[$t]}" = 0 ] || die "$t: ${FAILS[$t]} non-2xx answers or socket errors"
done
[ "$APPENDED" -ge "$WANT" ] || die "events appended $APPENDED < requests $WANT"
acked=$(metric "$ROUTER_PORT" tollgate_router_events_acked_total)
total=$(metric "$ROUTER_PORT" tollgate_router_events_appended_total)
[ "${acked%.*}" -ge "${total%.*}" ] || die "events not acknowledged by Kafka: acked $acked of $total"
echo "router_bench: ok"
