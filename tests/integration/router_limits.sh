#!/usr/bin/env bash
# router-svc front-door limits: the in-flight cap answers 503 at once (nothing queued), the body
# cap set in the config answers 413 naming it, and the connection cap refuses extra connections
# without disturbing the admitted ones.
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/router_lib.sh"

rt_init router-limits
cat >"$RT_DIR/fake.json" <<'JSON'
{"default": {"prompt_tokens": 12, "completion_tokens": 8, "latency_ms": 1500}}
JSON
rt_fake_start "$RT_DIR/fake.json"
cat >"$RT_DIR/router.yaml" <<YAML
model_list:
  - model_name: gpt-main
    litellm_params: {model: openai/fake-a, api_base: $RT_FAKE/v1,
                     api_key: os.environ/RT_PROVIDER_KEY, timeout: 10}
    model_info: {id: main-a}
tollgate:
  listen: 127.0.0.1:$RT_ROUTER_PORT
  threads: 1 # one loop: the connection cap is split between loops
  limits: {max_body_bytes: 1000, max_in_flight: 2, max_connections: 8}
  keys:
    - {key: os.environ/RT_KEY}
YAML
# --check: a valid file exits 0, a broken one prints FILE:LINE: key: problem and exits 2
"$TG_BUILD_DIR/router-svc/router-svc" --config "$RT_DIR/router.yaml" --check >"$RT_DIR/check.out" 2>&1
rt_eq "--check on a valid config exits 0" "$?" 0
rt_true "--check warns about the deployment without a price, naming it" \
    grep -q "model_list\[0\] (main-a): no price for \"openai/fake-a\"" "$RT_DIR/check.out"
rt_true "--check lists it among the prices" \
    grep -q "^  main-a (openai/fake-a): NO PRICE, its calls cost 0$" "$RT_DIR/check.out"
rt_true "--check counts the deployments without a price" \
    grep -q "^prices: 1 of 1 deployments without a price$" "$RT_DIR/check.out"
sed 's/timeout: 10}/timeout: ten}/' "$RT_DIR/router.yaml" >"$RT_DIR/broken.yaml"
"$TG_BUILD_DIR/router-svc/router-svc" --config "$RT_DIR/broken.yaml" --check >"$RT_DIR/check2.out" 2>&1
rt_eq "--check on a broken config exits 2" "$?" 2
rt_true "--check names file, line and key" \
    grep -Eq "^$RT_DIR/broken.yaml:[0-9]+: model_list\[0\]\.litellm_params\.timeout: " "$RT_DIR/check2.out"
TOLLGATE_CONFIG="$RT_DIR/router.yaml" "$TG_BUILD_DIR/router-svc/router-svc" --check >/dev/null 2>&1
rt_eq "TOLLGATE_CONFIG is read" "$?" 0

rt_router_start "$RT_DIR/router.yaml"
BODY='{"model":"gpt-main","messages":[{"role":"user","content":"hi"}]}'

pids=()
for i in 1 2 3 4 5 6; do
    curl -sS -o "$RT_DIR/p$i.body" -w '%{http_code}\n' --max-time 10 -H "Authorization: Bearer $RT_KEY" \
        --data-binary "$BODY" "$RT_URL/v1/chat/completions" >"$RT_DIR/p$i.status" &
    pids+=($!)
done
wait "${pids[@]}"
ok=$(cat "$RT_DIR"/p*.status | grep -c '^200$')
full=$(cat "$RT_DIR"/p*.status | grep -c '^503$')
rt_eq "in-flight cap 2: two served" "$ok" 2
rt_eq "in-flight cap 2: four refused with 503" "$full" 4
rt_true "503 body says why" grep -qh 'in-flight' "$RT_DIR"/p*.body

big=$(head -c 2000 /dev/zero | tr '\0' 'a')
rt_post big /v1/chat/completions "{\"model\":\"gpt-main\",\"messages\":[{\"role\":\"user\",\"content\":\"$big\"}]}"
rt_eq "configured body cap 413" "$RT_STATUS" 413
rt_true "413 names the configured limit" grep -q 'limit is 1000 bytes' "$RT_DIR/big.body"

# connection cap 8: hold 8 idle connections open, a 9th gets no HTTP answer, the held ones work
exec 3<>/dev/tcp/127.0.0.1/$RT_ROUTER_PORT
for fd in 4 5 6 7 8 9 10; do
    eval "exec $fd<>/dev/tcp/127.0.0.1/$RT_ROUTER_PORT"
done
sleep 0.3
code=$(curl -sS -o /dev/null -w '%{http_code}' --max-time 3 "$RT_URL/health/liveness" 2>/dev/null)
rt_true "connection over the cap refused (got '$code')" test "$code" != 200
printf 'GET /health/liveness HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n' >&3
reply=$(timeout 3 head -c 12 <&3)
rt_eq "an admitted connection is served" "$reply" "HTTP/1.1 200"
for fd in 3 4 5 6 7 8 9 10; do
    eval "exec $fd>&-"
done
sleep 0.3
rt_req live GET /health/liveness
rt_eq "after closing, new connections are served" "$RT_STATUS" 200
rt_router_stop
rt_eq "clean exit" "$?" 0

# response cap: a provider answer larger than max_response_bytes is refused as invalid
sed -e 's/^  limits: .*/  limits: {max_response_bytes: 200}/' -e 's/^  threads: 1.*//' \
    "$RT_DIR/router.yaml" >"$RT_DIR/router2.yaml"
printf 'router_settings: {num_retries: 0, allowed_fails: 1000}\n' >>"$RT_DIR/router2.yaml"
rt_router_start "$RT_DIR/router2.yaml"
rt_post small_cap /v1/chat/completions "$BODY"
rt_eq "response over max_response_bytes -> 502" "$RT_STATUS" 502
rt_eq "response over max_response_bytes: invalid_response" "$(jq -r .error.code "$RT_DIR/small_cap.body")" invalid_response
# ... and so is a stream event larger than it (one 100-word chunk, ~700 bytes), in-band, naming
# the limit
rt_fake_control fake-a '{"completion_tokens": 100, "chunks": 1, "latency_ms": 0}'
rt_post small_cap_s /v1/chat/completions \
    '{"model":"gpt-main","messages":[{"role":"user","content":"hi"}],"stream":true}' -N
rt_eq "stream event over max_response_bytes: the stream had started" "$RT_STATUS" 200
rt_true "stream event over max_response_bytes: in-band error naming the limit" \
    grep -q 'upstream stream event larger than limits.max_response_bytes' "$RT_DIR/small_cap_s.body"
rt_router_stop
rt_eq "clean exit (second config)" "$?" 0
rt_finish
