#!/usr/bin/env bash
# Concurrency soak for the suspend/resume and stream paths: many parallel requests over every
# endpoint, streaming and not, with a share of clients hanging up mid-stream and a share of
# provider failures. Afterwards nothing may be left in flight (requests or upstream transfers),
# the router still answers, stops cleanly on SIGTERM, and (in a sanitizer build) reported no
# error.
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/router_lib.sh"

rt_init router-stress
N=${RT_STRESS_REQUESTS:-600}

cat >"$RT_DIR/fake.json" <<'JSON'
{"default": {"prompt_tokens": 12, "completion_tokens": 8, "chunks": 12, "ttft_ms": 10,
             "latency_ms": 300},
 "models": {"fake-flaky": {"fail_rate": 0.3, "status": 503, "chunks": 12, "ttft_ms": 10,
                           "latency_ms": 300}}}
JSON
rt_fake_start "$RT_DIR/fake.json"
cat >"$RT_DIR/router.yaml" <<YAML
model_list:
  - model_name: gpt-main
    litellm_params: {model: openai/fake-flaky, api_base: $RT_FAKE/v1,
                     api_key: os.environ/RT_PROVIDER_KEY, timeout: 10}
    model_info: {id: flaky-1}
  - model_name: gpt-main
    litellm_params: {model: openai/fake-ok, api_base: $RT_FAKE/v1,
                     api_key: os.environ/RT_PROVIDER_KEY, timeout: 10}
    model_info: {id: ok-1}
  - model_name: claude-main
    litellm_params: {model: anthropic/fake-claude, api_base: $RT_FAKE,
                     api_key: os.environ/RT_PROVIDER_KEY, timeout: 10}
    model_info: {id: claude-1}
router_settings: {num_retries: 2, allowed_fails: 1000000, cooldown_time: 1}
tollgate:
  listen: 127.0.0.1:$RT_ROUTER_PORT
  threads: 2
  keys:
    - {key: os.environ/RT_KEY}
YAML
rt_router_start "$RT_DIR/router.yaml"

{
    for i in $(seq 1 "$N"); do
        case $((i % 6)) in
        0) path=/v1/chat/completions model=gpt-main ;;
        1) path=/v1/messages model=claude-main ;;
        2) path=/v1/responses model=gpt-main ;;
        3) path=/v1/messages model=gpt-main ;;
        4) path=/v1/chat/completions model=claude-main ;;
        5) path=/v1/embeddings model=gpt-main ;;
        esac
        stream=false
        [ $((i % 2)) -eq 0 ] && [ "$path" != /v1/embeddings ] && stream=true
        body=$(jq -cn --arg m "$model" --argjson s $stream \
            '{model:$m, stream:$s, max_tokens:32, input:"hi", messages:[{role:"user",content:"hi"}]}')
        printf '%s' "$body" >"$RT_DIR/b$i.json"
        echo "url = \"$RT_URL$path\""
        echo "data-binary = \"@$RT_DIR/b$i.json\""
        echo "header = \"Authorization: Bearer $RT_KEY\""
        echo "output = \"/dev/null\""
        # every third request hangs up early (mid-stream for the streams)
        [ $((i % 3)) -eq 0 ] && echo "max-time = 0.15"
        echo "write-out = \"%{http_code}\\n\""
        [ "$i" -lt "$N" ] && echo "next"
    done
} >"$RT_DIR/batch.cfg"
curl -sS --no-progress-meter --parallel --parallel-max 64 -K "$RT_DIR/batch.cfg" \
    >"$RT_DIR/status.txt" 2>/dev/null
sort "$RT_DIR/status.txt" | uniq -c | tr -s ' \n' ' ' >"$RT_DIR/summary.txt"
echo "# statuses: $(cat "$RT_DIR/summary.txt")"
rt_true "most requests served" test "$(grep -c '^200$' "$RT_DIR/status.txt")" -ge $((N / 2))
rt_true "no 5xx from the router itself" bash -c "! grep -Eq '^(500|502|504)$' '$RT_DIR/status.txt'"

in_flight=1
active=1
for i in $(seq 1 100); do
    rt_req metrics GET /metrics
    in_flight=$(awk '/^tollgate_router_in_flight / {print $2}' "$RT_DIR/metrics.body")
    active=$(awk '/^tollgate_router_upstream_active / {print $2}' "$RT_DIR/metrics.body")
    [ "$in_flight" = 0 ] && [ "$active" = 0 ] && break
    sleep 0.1
done
rt_eq "nothing left in flight" "$in_flight" 0
rt_eq "no upstream transfer left" "$active" 0
rt_true "hang-ups aborted upstream transfers" \
    test "$(awk '/^tollgate_router_upstream_cancelled_total / {print $2}' "$RT_DIR/metrics.body")" -ge 1
# a client's hang-up cancels its transfer: a stream's provider connection is closed (the
# provider stops generating), a non-stream one's response (due 150 ms later) is read out and the
# connection kept; every connection opened is closed or still open within the pool's bound
closed_metric() {
    awk -v r="$1" '$1 == "tollgate_router_upstream_connections_closed_total{reason=\""r"\"}" {print $2}' \
        "$RT_DIR/metrics.body"
}
drained=$(awk '/^tollgate_router_upstream_drained_total / {print $2}' "$RT_DIR/metrics.body")
opened=$(awk '/^tollgate_router_upstream_connections_opened_total / {print $2}' "$RT_DIR/metrics.body")
closed=$(awk '/^tollgate_router_upstream_connections_closed_total\{/ {n += $2} END {print n + 0}' \
    "$RT_DIR/metrics.body")
echo "# provider connections: $opened opened; closed: $(grep '^tollgate_router_upstream_connections_closed_total' "$RT_DIR/metrics.body" | sed 's/.*reason="//; s/"}//' | tr '\n' ' '); $drained drained"
rt_true "hang-ups of non-stream requests kept their provider connections (drained: ${drained:-none})" \
    test "${drained:-0}" -ge 1
rt_true "hang-ups of streams closed theirs (cancelled: $(closed_metric cancelled))" \
    test "$(closed_metric cancelled)" -ge 1
rt_true "connections opened ($opened) minus closed ($closed): open, within the pool's bound" \
    test "$opened" -ge "$closed" -a $((opened - closed)) -le 1024
rt_post after /v1/chat/completions '{"model":"gpt-main","messages":[{"role":"user","content":"x"}]}'
rt_eq "router still serves" "$RT_STATUS" 200
rt_router_stop
rt_eq "clean exit" "$?" 0
rt_true "no sanitizer report" bash -c "! grep -Eq 'ERROR: (Address|Leak)Sanitizer|runtime error' '$RT_DIR/router.log'"
rt_finish
