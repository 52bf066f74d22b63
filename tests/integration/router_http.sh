#!/usr/bin/env bash
# router-svc against fake-llm: every endpoint, streaming and not; retries, fallbacks, aliases,
# context-window fallback, timeout, cooldown, garbage upstream, body cap, malformed JSON,
# unknown model, auth, client disconnect, pristine fallback body, metrics, graceful stop.
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/router_lib.sh"

rt_init router-http
SSE_CHECK="$TG_BUILD_DIR/tests/tools/sse_check"
[ -x "$SSE_CHECK" ] || rt_die "sse_check not built ($SSE_CHECK)"

cat >"$RT_DIR/fake.json" <<'JSON'
{"default": {"prompt_tokens": 12, "completion_tokens": 8, "chunks": 4},
 "models": {"fake-slow": {"latency_ms": 3000},
            "fake-cw": {"fail_rate": 1.0, "error": "context_window"},
            "fake-garbage": {"error": "garbage", "fail_rate": 1.0},
            "fake-cool-a": {"fail_rate": 1.0, "status": 503},
            "fake-inflight": {"latency_ms": 1500},
            "fake-429": {"fail_rate": 1.0, "status": 429, "retry_after": 7},
            "fake-midstream": {"chunks": 10, "ttft_ms": 50, "latency_ms": 2000},
            "fake-longstream": {"chunks": 40, "ttft_ms": 50, "latency_ms": 8000},
            "fake-huge": {"prompt_tokens": 12, "completion_tokens": 4000, "chunks": 1},
            "gpt-4o-mini": {"prompt_tokens": 12, "cached_tokens": 8, "completion_tokens": 8,
                            "reasoning_tokens": 3},
            "claude-sonnet-4-5": {"prompt_tokens": 5100, "cached_tokens": 4000,
                                  "cache_creation_tokens": 1000, "completion_tokens": 50}}}
JSON
rt_fake_start "$RT_DIR/fake.json"

cat >"$RT_DIR/router.yaml" <<YAML
model_list:
  - model_name: gpt-main
    litellm_params: {model: openai/fake-primary-a, api_base: $RT_FAKE/v1, order: 1,
                     api_key: os.environ/RT_PROVIDER_KEY, timeout: 10,
                     input_cost_per_token: 0.0000005, output_cost_per_token: 0.0000015}
    model_info: {id: main-a}
  - model_name: gpt-main
    litellm_params: {model: openai/fake-primary-b, api_base: $RT_FAKE/v1, order: 2,
                     api_key: os.environ/RT_PROVIDER_KEY, timeout: 10,
                     input_cost_per_token: 0.0000005, output_cost_per_token: 0.0000015}
    model_info: {id: main-b}
  - model_name: gpt-fallback
    litellm_params: {model: openai/fake-fallback, api_base: $RT_FAKE/v1,
                     api_key: os.environ/RT_PROVIDER_KEY, timeout: 10,
                     input_cost_per_token: 0.000001, output_cost_per_token: 0.000002}
    model_info: {id: fallback-1}
  - model_name: claude-main
    litellm_params: {model: anthropic/fake-claude, api_base: $RT_FAKE,
                     api_key: os.environ/RT_PROVIDER_KEY, timeout: 10,
                     input_cost_per_token: 0.000003, output_cost_per_token: 0.000015}
    model_info: {id: claude-1}
  - model_name: embed-main
    litellm_params: {model: openai/fake-embed, api_base: $RT_FAKE/v1,
                     api_key: os.environ/RT_PROVIDER_KEY, timeout: 10,
                     input_cost_per_token: 0.0000001}
    model_info: {id: embed-1}
  - model_name: gpt-cw
    litellm_params: {model: openai/fake-cw, api_base: $RT_FAKE/v1,
                     api_key: os.environ/RT_PROVIDER_KEY, timeout: 10}
    model_info: {id: cw-1}
  - model_name: gpt-big
    litellm_params: {model: openai/fake-big, api_base: $RT_FAKE/v1,
                     api_key: os.environ/RT_PROVIDER_KEY, timeout: 10}
    model_info: {id: big-1}
  - model_name: gpt-slow
    litellm_params: {model: openai/fake-slow, api_base: $RT_FAKE/v1,
                     api_key: os.environ/RT_PROVIDER_KEY, timeout: 1}
    model_info: {id: slow-1}
  - model_name: gpt-slow-only
    litellm_params: {model: openai/fake-slow, api_base: $RT_FAKE/v1,
                     api_key: os.environ/RT_PROVIDER_KEY, timeout: 1}
    model_info: {id: slow-only-1}
  - model_name: gpt-garbage
    litellm_params: {model: openai/fake-garbage, api_base: $RT_FAKE/v1,
                     api_key: os.environ/RT_PROVIDER_KEY, timeout: 10}
    model_info: {id: garbage-1}
  - model_name: gpt-cool
    litellm_params: {model: openai/fake-cool-a, api_base: $RT_FAKE/v1, order: 1,
                     api_key: os.environ/RT_PROVIDER_KEY, timeout: 10}
    model_info: {id: cool-a}
  - model_name: gpt-cool
    litellm_params: {model: openai/fake-cool-b, api_base: $RT_FAKE/v1, order: 2,
                     api_key: os.environ/RT_PROVIDER_KEY, timeout: 10}
    model_info: {id: cool-b}
  - model_name: gpt-inflight
    litellm_params: {model: openai/fake-inflight, api_base: $RT_FAKE/v1,
                     api_key: os.environ/RT_PROVIDER_KEY, timeout: 10}
    model_info: {id: inflight-1}
  - model_name: gpt-429
    litellm_params: {model: openai/fake-429, api_base: $RT_FAKE/v1,
                     api_key: os.environ/RT_PROVIDER_KEY, timeout: 10}
    model_info: {id: r429-1}
  - model_name: gpt-midstream
    litellm_params: {model: openai/fake-midstream, api_base: $RT_FAKE/v1,
                     api_key: os.environ/RT_PROVIDER_KEY, timeout: 10}
    model_info: {id: midstream-1}
  - model_name: gpt-named
    litellm_params: {model: openai/fake-named, api_base: "http://localhost:$RT_FAKE_PORT/v1",
                     api_key: os.environ/RT_PROVIDER_KEY, timeout: 10}
    model_info: {id: named-1}
  - model_name: gpt-listed
    litellm_params: {model: openai/gpt-4o-mini, api_base: $RT_FAKE/v1,
                     api_key: os.environ/RT_PROVIDER_KEY, timeout: 10}
    model_info: {id: listed-1}
  - model_name: claude-listed
    litellm_params: {model: anthropic/claude-sonnet-4-5, api_base: $RT_FAKE,
                     api_key: os.environ/RT_PROVIDER_KEY, timeout: 10}
    model_info: {id: claude-listed-1}
  - model_name: gpt-unpriced
    litellm_params: {model: openai/fake-unpriced, api_base: $RT_FAKE/v1,
                     api_key: os.environ/RT_PROVIDER_KEY, timeout: 10}
    model_info: {id: unpriced-1}
  - model_name: gpt-huge
    litellm_params: {model: openai/fake-huge, api_base: $RT_FAKE/v1,
                     api_key: os.environ/RT_PROVIDER_KEY, timeout: 30,
                     input_cost_per_token: 0.000001, output_cost_per_token: 0.000002}
    model_info: {id: huge-1}
  - model_name: claude-huge
    litellm_params: {model: anthropic/fake-huge, api_base: $RT_FAKE,
                     api_key: os.environ/RT_PROVIDER_KEY, timeout: 30,
                     input_cost_per_token: 0.000001, output_cost_per_token: 0.000002}
    model_info: {id: claude-huge-1}
  - model_name: gpt-longstream
    litellm_params: {model: openai/fake-longstream, api_base: $RT_FAKE/v1,
                     api_key: os.environ/RT_PROVIDER_KEY, timeout: 30}
    model_info: {id: longstream-1}
router_settings:
  num_retries: 2
  allowed_fails: 2
  cooldown_time: 120
  fallbacks: [{gpt-main: [gpt-fallback]}, {gpt-slow: [gpt-fallback]}]
  context_window_fallbacks: [{gpt-cw: [gpt-big]}]
  model_group_alias: {alias-main: gpt-main}
  enable_pre_call_checks: true
general_settings:
  master_key: os.environ/RT_MASTER_KEY
tollgate:
  listen: 127.0.0.1:$RT_ROUTER_PORT
  limits: {max_body_bytes: 10485760, max_connections: 1000, max_in_flight: 256}
  threads: 2
  upstream_client: ${RT_UPSTREAM_CLIENT:-native}
  keys:
    - {key: os.environ/RT_KEY, key_alias: itest, team_id: team-a}
YAML
export TOLLGATE_LOG_LEVEL=debug
rt_router_start "$RT_DIR/router.yaml"

CHAT='{"model":"gpt-main","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hello"}],"max_tokens":50,"temperature":0.2,"user":"end-user-1"}'
CHAT_S='{"model":"gpt-main","stream":true,"messages":[{"role":"user","content":"hello"}]}'
MSG='{"model":"claude-main","max_tokens":64,"system":"be brief","messages":[{"role":"user","content":"hello"}]}'
RESP='{"model":"gpt-main","input":"hello"}'
EMB='{"model":"embed-main","input":"hello"}'

uuid_re='^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$'

# -------------------------------------------------------------- health, models
rt_req live GET /health/liveness
rt_eq "liveness 200" "$RT_STATUS" 200
rt_req ready GET /health/readiness
rt_eq "readiness 200" "$RT_STATUS" 200
rt_eq "readiness says ready" "$(jq -r .status "$RT_DIR/ready.body")" ready
rt_req models GET /v1/models -H "Authorization: Bearer $RT_KEY"
rt_eq "models 200" "$RT_STATUS" 200
rt_eq "models lists gpt-main and alias-main" \
    "$(jq -r '[.data[].id] | (index("gpt-main") != null) and (index("alias-main") != null)' "$RT_DIR/models.body")" true
rt_req models_noauth GET /v1/models
rt_eq "models without key 401" "$RT_STATUS" 401
# One kept-alive connection whose credential changes from request to request: each request is
# judged by its own key (the connection remembers its last key's digest, to spare a hash a
# request, never to stand in for a different key: one of the same length differs in its last
# byte here)
last=${RT_KEY: -1}
[ "$last" = x ] && other=y || other=x
ka() { printf '%s\n' -o /dev/null -w '%{http_code}/%{num_connects} ' "$@" "$RT_URL/v1/models"; }
mapfile -t ka_args < <(ka -H "Authorization: Bearer $RT_KEY"; echo --next
    ka -H "Authorization: Bearer ${RT_KEY%?}$other"; echo --next
    ka -H "Authorization: Bearer $RT_MASTER_KEY"; echo --next
    ka -H "x-api-key: $RT_KEY"; echo --next
    ka -H "Authorization: Bearer wrong"; echo --next
    ka -H "Authorization: Bearer $RT_KEY"; echo --next
    ka)
rt_eq "one connection, keys changing: own key, same-length other, master, x-api-key, wrong, own, none" \
    "$(curl -sS --max-time 30 "${ka_args[@]}")" "200/1 401/0 200/0 200/0 401/0 200/0 401/0 "

# -------------------------------------------------------------- success, every endpoint
rt_post chat /v1/chat/completions "$CHAT"
rt_eq "chat 200" "$RT_STATUS" 200
rt_true "chat call id is a uuid v7" grep -Eq "$uuid_re" <<<"$(rt_hdr chat x-tollgate-call-id)"
rt_eq "chat model group" "$(rt_hdr chat x-tollgate-model-group)" gpt-main
rt_eq "chat attempts" "$(rt_hdr chat x-tollgate-attempts)" 1
rt_eq "chat fallbacks" "$(rt_hdr chat x-tollgate-fallbacks)" 0
# 12 * 0.0000005 + 8 * 0.0000015 = 0.000018
rt_eq "chat cost" "$(rt_hdr chat x-tollgate-response-cost)" 0.000018000
rt_true "chat overhead header" grep -Eq '^[0-9]+\.[0-9]{3}$' <<<"$(rt_hdr chat x-tollgate-overhead-ms)"
rt_eq "chat usage" "$(jq -c '[.usage.prompt_tokens,.usage.completion_tokens]' "$RT_DIR/chat.body")" "[12,8]"

TP=00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01
rt_post chat_tp /v1/chat/completions "$CHAT" -H "traceparent: $TP"
rt_eq "traceparent request 200" "$RT_STATUS" 200
rt_true "completion event carries the client's trace id" \
    grep -q "call_id=$(rt_hdr chat_tp x-tollgate-call-id) .*trace_id=0af7651916cd43dd8448eb211c80319c" "$RT_DIR/router.log"
rt_true "completion event carries the end user" grep -q "msg=request_complete call_id=$(rt_hdr chat x-tollgate-call-id) " "$RT_DIR/router.log"

rt_post chat_alt /chat/completions "$CHAT"
rt_eq "/chat/completions 200" "$RT_STATUS" 200

rt_post chat_s /v1/chat/completions "$CHAT_S" -N
rt_eq "chat stream 200" "$RT_STATUS" 200
rt_true "chat stream is event-stream" grep -q '^content-type: text/event-stream' "$RT_DIR/chat_s.hdrl"
rt_true "chat stream ends with [DONE]" grep -q '^data: \[DONE\]' "$RT_DIR/chat_s.body"
rt_true "chat stream: usage chunk the client did not ask for is not forwarded" \
    bash -c "! grep -q '\"usage\":{' '$RT_DIR/chat_s.body'"
rt_eq "chat stream cost trailer" "$(rt_hdr chat_s x-tollgate-response-cost)" 0.000018000
rt_true "chat stream passes sse_check" "$SSE_CHECK" --dialect openai-chat "$RT_DIR/chat_s.body"
rt_post chat_su /v1/chat/completions \
    '{"model":"gpt-main","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}' -N
rt_eq "chat stream with include_usage carries usage" \
    "$(grep '"usage":{' "$RT_DIR/chat_su.body" | sed 's/^data: //' | jq -c '[.usage.prompt_tokens,.usage.completion_tokens]')" "[12,8]"
rt_true "chat stream with usage passes sse_check --require-usage" \
    "$SSE_CHECK" --dialect openai-chat --require-usage "$RT_DIR/chat_su.body"

rt_post emb /v1/embeddings "$EMB"
rt_eq "embeddings 200" "$RT_STATUS" 200
rt_eq "embeddings cost" "$(rt_hdr emb x-tollgate-response-cost)" 0.000001200
rt_eq "embeddings model group" "$(rt_hdr emb x-tollgate-model-group)" embed-main

rt_post resp /v1/responses "$RESP"
rt_eq "responses 200" "$RT_STATUS" 200
rt_eq "responses cost" "$(rt_hdr resp x-tollgate-response-cost)" 0.000018000
rt_post resp_s /v1/responses '{"model":"gpt-main","input":"hello","stream":true}' -N
rt_eq "responses stream 200" "$RT_STATUS" 200
rt_true "responses stream has response.completed" grep -q 'response.completed' "$RT_DIR/resp_s.body"
rt_eq "responses stream cost trailer" "$(rt_hdr resp_s x-tollgate-response-cost)" 0.000018000
rt_true "responses stream passes sse_check" "$SSE_CHECK" --dialect openai-responses "$RT_DIR/resp_s.body"

# Stream events far over 12 KiB (one 4,000-word chunk, ~25 KB; the Responses stream's
# output_text.done and response.completed repeat the whole text): passed through, translated
# both ways, and billed (12 x 1e-6 + 4000 x 2e-6 = 0.008012 USD).
rt_post huge_s /v1/chat/completions \
    '{"model":"gpt-huge","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true}}' -N
rt_eq "25 KB chat stream event: 200" "$RT_STATUS" 200
rt_true "25 KB chat stream event passes sse_check --require-usage" \
    "$SSE_CHECK" --dialect openai-chat --require-usage "$RT_DIR/huge_s.body"
rt_true "25 KB chat stream event: the whole event arrived" \
    test "$(grep -m1 '"content":"The' "$RT_DIR/huge_s.body" | wc -c)" -gt 20000
rt_eq "25 KB chat stream event: cost" "$(rt_hdr huge_s x-tollgate-response-cost)" 0.008012000
rt_post huge_r /v1/responses '{"model":"gpt-huge","input":"hi","stream":true}' -N
rt_eq "25 KB responses stream events: 200" "$RT_STATUS" 200
rt_true "25 KB responses stream events pass sse_check --require-usage" \
    "$SSE_CHECK" --dialect openai-responses --require-usage "$RT_DIR/huge_r.body"
rt_true "responses stream: response.completed over 20 KB arrived" \
    test "$(grep -m1 '"type":"response.completed"' "$RT_DIR/huge_r.body" | wc -c)" -gt 20000
rt_eq "25 KB responses stream events: cost" "$(rt_hdr huge_r x-tollgate-response-cost)" 0.008012000
rt_post huge_m /v1/messages \
    '{"model":"gpt-huge","max_tokens":5000,"messages":[{"role":"user","content":"hi"}],"stream":true}' -N
rt_eq "25 KB chat event translated to messages: 200" "$RT_STATUS" 200
rt_true "25 KB chat event translated to messages passes sse_check" \
    "$SSE_CHECK" --dialect anthropic --require-usage "$RT_DIR/huge_m.body"
rt_eq "25 KB chat event translated to messages: cost" "$(rt_hdr huge_m x-tollgate-response-cost)" 0.008012000
rt_post huge_c /v1/chat/completions \
    '{"model":"claude-huge","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true}}' -N
rt_eq "25 KB messages event translated to chat: 200" "$RT_STATUS" 200
rt_true "25 KB messages event translated to chat passes sse_check" \
    "$SSE_CHECK" --dialect openai-chat --require-usage "$RT_DIR/huge_c.body"
rt_eq "25 KB messages event translated to chat: cost" "$(rt_hdr huge_c x-tollgate-response-cost)" 0.008012000

rt_post msg /v1/messages "$MSG"
rt_eq "messages 200" "$RT_STATUS" 200
rt_eq "messages shape" "$(jq -r .type "$RT_DIR/msg.body")" message
# 12 * 0.000003 + 8 * 0.000015 = 0.000156
rt_eq "messages cost" "$(rt_hdr msg x-tollgate-response-cost)" 0.000156000
rt_eq "messages: the default anthropic-version reached the provider" \
    "$(curl -fsS "$RT_FAKE/_requests?model=fake-claude&limit=1" | jq -r '.requests[-1].headers["anthropic-version"]')" \
    2023-06-01
rt_post msg_beta /v1/messages "$MSG" -H 'anthropic-beta: prompt-caching-2024-07-31,token-efficient-tools-2025-02-19' \
    -H 'anthropic-version: 2023-06-01'
rt_eq "messages with anthropic-beta 200" "$RT_STATUS" 200
rt_eq "anthropic-beta forwarded to the Anthropic API as sent" \
    "$(curl -fsS "$RT_FAKE/_requests?model=fake-claude&limit=1" | jq -r '.requests[-1].headers["anthropic-beta"]')" \
    prompt-caching-2024-07-31,token-efficient-tools-2025-02-19
# /v1/messages/count_tokens: Anthropic's API counts (passed through, the fake answers its
# prompt_tokens, 12), other providers' deployments get the router's estimate without a provider
# request; never billed, never streamed.
rt_post ct /v1/messages/count_tokens "$(jq -c '.stream=true' <<<"$MSG")"
rt_eq "count_tokens on an Anthropic deployment: 200" "$RT_STATUS" 200
rt_eq "count_tokens on an Anthropic deployment: the provider's count" "$(jq -c . "$RT_DIR/ct.body")" '{"input_tokens":12}'
rt_eq "count_tokens reached the provider's count_tokens" \
    "$(curl -fsS "$RT_FAKE/_requests?model=fake-claude&limit=1" | jq -r '.requests[-1].path')" \
    /v1/messages/count_tokens
rt_eq "count_tokens is not billed" "$(rt_hdr ct x-tollgate-response-cost)" 0.000000000
before=$(curl -fsS "$RT_FAKE/_requests?model=fake-primary-a&limit=1" | jq .total)
rt_post ct_oa /v1/messages/count_tokens "$(jq -c '.model="gpt-main" | .messages[0].content="one two three four five six seven eight"' <<<"$MSG")"
rt_eq "count_tokens on an OpenAI deployment: 200" "$RT_STATUS" 200
rt_true "count_tokens on an OpenAI deployment: an estimate ($(cat "$RT_DIR/ct_oa.body"))" \
    jq -e '.input_tokens >= 8 and .input_tokens < 100' "$RT_DIR/ct_oa.body"
rt_eq "count_tokens on an OpenAI deployment: no provider request" \
    "$(curl -fsS "$RT_FAKE/_requests?model=fake-primary-a&limit=1" | jq .total)" "$before"
rt_post msg_beta_oa /v1/messages "$(jq -c '.model="gpt-main"' <<<"$MSG")" -H 'anthropic-beta: x-1'
rt_eq "anthropic-beta to an OpenAI deployment: 200" "$RT_STATUS" 200
rt_eq "anthropic-beta not sent to an OpenAI-API provider" \
    "$(curl -fsS "$RT_FAKE/_requests?model=fake-primary-a&limit=1" | jq -r '.requests[-1].headers["anthropic-beta"]')" \
    null
rt_post msg_s /v1/messages "$(jq -c '.stream=true' <<<"$MSG")" -N
rt_eq "messages stream 200" "$RT_STATUS" 200
rt_true "messages stream has message_stop" grep -q '^event: message_stop' "$RT_DIR/msg_s.body"
rt_eq "messages stream cost trailer" "$(rt_hdr msg_s x-tollgate-response-cost)" 0.000156000
rt_true "messages stream passes sse_check" "$SSE_CHECK" --dialect anthropic --require-usage "$RT_DIR/msg_s.body"

# -------------------------------------------------------------- prices from the built-in map
# gpt-4o-mini and claude-sonnet-4-5 carry no prices in the config: the built-in map's entries
# price them (USD per token: gpt-4o-mini input 1.5e-7, cached input 7.5e-8, output 6e-7;
# claude-sonnet-4-5 input 3e-6, cache read 3e-7, cache write 3.75e-6, output 1.5e-5).
# 4 * 1.5e-7 + 8 * 7.5e-8 + 8 * 6e-7 (3 of them reasoning, at the output price) = 0.000006
rt_post listed /v1/chat/completions '{"model":"gpt-listed","messages":[{"role":"user","content":"hi"}]}'
rt_eq "listed model 200" "$RT_STATUS" 200
rt_eq "listed model: cached input at its own price" "$(rt_hdr listed x-tollgate-response-cost)" 0.000006000
rt_post listed_s /v1/chat/completions '{"model":"gpt-listed","stream":true,"messages":[{"role":"user","content":"hi"}]}' -N
rt_eq "listed model stream: the same cost in the trailer" "$(rt_hdr listed_s x-tollgate-response-cost)" 0.000006000
# 100 * 3e-6 + 4000 * 3e-7 + 1000 * 3.75e-6 + 50 * 1.5e-5 = 0.006
rt_post clisted /v1/messages '{"model":"claude-listed","max_tokens":64,"messages":[{"role":"user","content":"hi"}]}'
rt_eq "anthropic listed model: cache reads and writes at their prices" "$(rt_hdr clisted x-tollgate-response-cost)" 0.006000000
rt_post clisted_s /v1/messages '{"model":"claude-listed","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"hi"}]}' -N
rt_eq "anthropic listed model stream: the same cost" "$(rt_hdr clisted_s x-tollgate-response-cost)" 0.006000000
# an OpenAI client of the Anthropic deployment: translated, priced the same, cache counts shown
rt_post clisted_tr /v1/chat/completions '{"model":"claude-listed","messages":[{"role":"user","content":"hi"}]}'
rt_eq "translated: the same cost" "$(rt_hdr clisted_tr x-tollgate-response-cost)" 0.006000000
rt_eq "translated: usage in OpenAI's shape with the cache's part" \
    "$(jq -c '[.usage.prompt_tokens,.usage.prompt_tokens_details.cached_tokens,.usage.completion_tokens]' "$RT_DIR/clisted_tr.body")" "[5100,4000,50]"
# pre-call checks: gpt-4o-mini takes 128,000 input tokens (the built-in map); a request of about
# 150,000 words is refused before it is sent, in OpenAI's words
{ printf '{"model":"gpt-listed","messages":[{"role":"user","content":"'
  yes brown | head -n 150000 | tr '\n' ' '
  printf '"}]}'; } >"$RT_DIR/long.json"
before=$(rt_fake_stat gpt-4o-mini requests)
rt_true "the fake counts gpt-4o-mini's requests (the check below can fail)" [ "$before" -gt 0 ]
rt_post toolong /v1/chat/completions "@$RT_DIR/long.json"
rt_eq "pre-call check: 400" "$RT_STATUS" 400
rt_eq "pre-call check: OpenAI's code" "$(jq -r .error.code "$RT_DIR/toolong.body")" context_length_exceeded
rt_true "pre-call check: the message names the window" grep -q 'more than the 128000' "$RT_DIR/toolong.body"
rt_eq "pre-call check: nothing reached the provider" "$(rt_fake_stat gpt-4o-mini requests)" "$before"

# no price anywhere: the cost is unknown, not a silent 0, and counted
rt_post unpriced /v1/chat/completions '{"model":"gpt-unpriced","messages":[{"role":"user","content":"hi"}]}'
rt_eq "unpriced 200" "$RT_STATUS" 200
rt_eq "unpriced: cost unknown" "$(rt_hdr unpriced x-tollgate-response-cost)" unknown
rt_post unpriced_s /v1/chat/completions '{"model":"gpt-unpriced","stream":true,"messages":[{"role":"user","content":"hi"}]}' -N
rt_eq "unpriced stream: cost unknown in the trailer" "$(rt_hdr unpriced_s x-tollgate-response-cost)" unknown
rt_req price_metrics GET /metrics
rt_true "unpriced calls counted" \
    grep -q '^tollgate_router_unpriced_calls_total{deployment="unpriced-1"} 2$' "$RT_DIR/price_metrics.body"
rt_true "priced calls not counted" \
    grep -q '^tollgate_router_unpriced_calls_total{deployment="listed-1"} 0$' "$RT_DIR/price_metrics.body"
rt_true "the log warned about the unpriced deployment at start" \
    grep -q 'no price for .*openai/fake-unpriced' "$RT_DIR/router.log"

# -------------------------------------------------------------- translation
rt_post tr1 /v1/messages "$(jq -c '.model="gpt-main"' <<<"$MSG")"
rt_eq "messages -> openai deployment 200" "$RT_STATUS" 200
rt_eq "messages -> openai: Anthropic shape with usage" \
    "$(jq -c '[.type,.role,.content[0].type,.usage.input_tokens,.usage.output_tokens]' "$RT_DIR/tr1.body")" \
    '["message","assistant","text",12,8]'
rt_eq "messages -> openai: upstream got a chat body" \
    "$(curl -fsS "$RT_FAKE/_requests?model=fake-primary-a&limit=1" | jq -r '.requests[-1].path')" \
    /v1/chat/completions
rt_post tr2 /v1/chat/completions "$(jq -c '.model="claude-main"' <<<"$CHAT")"
rt_eq "chat -> anthropic deployment 200" "$RT_STATUS" 200
rt_eq "chat -> anthropic: OpenAI shape with usage" \
    "$(jq -c '[.object,.choices[0].message.role,.usage.prompt_tokens,.usage.completion_tokens]' "$RT_DIR/tr2.body")" \
    '["chat.completion","assistant",12,8]'
rt_eq "chat -> anthropic: system moved to the top level" \
    "$(curl -fsS "$RT_FAKE/_requests?model=fake-claude&limit=1" | jq -r '.requests[-1].body | fromjson | .system')" \
    "be brief"
rt_post tr3 /v1/messages "$(jq -c '.model="gpt-main" | .stream=true' <<<"$MSG")" -N
rt_eq "messages stream -> openai 200" "$RT_STATUS" 200
rt_true "messages stream -> openai: message_start .. message_stop" \
    bash -c "grep -q '^event: message_start' '$RT_DIR/tr3.body' && grep -q '^event: content_block_delta' '$RT_DIR/tr3.body' && grep -q '^event: message_stop' '$RT_DIR/tr3.body'"
rt_true "messages stream -> openai passes sse_check" "$SSE_CHECK" --dialect anthropic --require-usage "$RT_DIR/tr3.body"
rt_eq "messages stream -> openai: usage mapped" \
    "$(grep '"message_delta"' "$RT_DIR/tr3.body" | sed 's/^data: //' | jq -c '.usage.output_tokens')" 8
rt_post tr4 /v1/chat/completions "$(jq -c '.model="claude-main" | .stream=true' <<<"$CHAT")" -N
rt_eq "chat stream -> anthropic 200" "$RT_STATUS" 200
rt_true "chat stream -> anthropic: chunks and [DONE]" \
    bash -c "grep -q 'chat.completion.chunk' '$RT_DIR/tr4.body' && grep -q '^data: \[DONE\]' '$RT_DIR/tr4.body'"
rt_eq "chat stream -> anthropic: cost from the stream" "$(rt_hdr tr4 x-tollgate-response-cost)" 0.000156000
rt_true "chat stream -> anthropic passes sse_check" "$SSE_CHECK" --dialect openai-chat "$RT_DIR/tr4.body"
# tools and tool_choice reach Anthropic in its shape; what it cannot express is a 400 naming it
rt_post tr5 /v1/chat/completions "$(jq -c '.model="claude-main" | .tool_choice="required" | .tools=[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"location":{"type":"string"}}}}}]' <<<"$CHAT")"
rt_eq "chat tools -> anthropic 200" "$RT_STATUS" 200
rt_eq "chat tools -> anthropic: tools and tool_choice in Anthropic's shape" \
    "$(curl -fsS "$RT_FAKE/_requests?model=fake-claude&limit=1" | jq -c '.requests[-1].body | fromjson | [.tools[0].name, .tools[0].input_schema.properties.location.type, .tool_choice.type]')" \
    '["get_weather","string","any"]'
rt_post tr6 /v1/chat/completions "$(jq -c '.model="claude-main" | .n=2' <<<"$CHAT")"
rt_eq "chat n=2 -> anthropic: 400" "$RT_STATUS" 400
rt_true "chat n=2 -> anthropic: the message names n" \
    jq -e '.error.message | test("n: ")' "$RT_DIR/tr6.body"

# -------------------------------------------------------------- client errors
rt_post bad /v1/chat/completions '{"model": "gpt-main", "messages": [}'
rt_eq "malformed JSON 400" "$RT_STATUS" 400
rt_true "malformed JSON names the position" grep -q 'line 1, column' "$RT_DIR/bad.body"
rt_eq "malformed JSON OpenAI error shape" "$(jq -r '.error.type' "$RT_DIR/bad.body")" invalid_request_error
rt_post bad_m /v1/messages '{"model": '
rt_eq "malformed JSON on /v1/messages: Anthropic shape" \
    "$(jq -r '[.type,.error.type] | join(",")' "$RT_DIR/bad_m.body")" "error,invalid_request_error"
rt_post unk /v1/chat/completions '{"model":"no-such-model","messages":[{"role":"user","content":"x"}]}'
rt_eq "unknown model 400" "$RT_STATUS" 400
rt_req noauth POST /v1/chat/completions --data-binary "$CHAT"
rt_eq "no key 401" "$RT_STATUS" 401

# -------------------------------------------------------------- request header size
# Request line and headers up to 8 KiB are served, a stream included; larger ones are answered
# 431 (by the router in the API's error shape up to what the connection memory holds, by the
# HTTP server beyond), and the router goes on serving.
rt_post hdr_ok /v1/chat/completions "$CHAT_S" -N -H "x-pad: $(head -c 7800 /dev/zero | tr '\0' a)"
rt_eq "7,800-byte header: stream 200" "$RT_STATUS" 200
rt_true "7,800-byte header: stream passes sse_check" "$SSE_CHECK" --dialect openai-chat "$RT_DIR/hdr_ok.body"
rt_post hdr_big /v1/chat/completions "$CHAT_S" -N -H "x-pad: $(head -c 8400 /dev/zero | tr '\0' a)"
rt_eq "8,400-byte header: 431" "$RT_STATUS" 431
rt_eq "8,400-byte header: OpenAI error shape" "$(jq -r '.error.code' "$RT_DIR/hdr_big.body")" \
    request_header_fields_too_large
rt_post hdr_big_m /v1/messages "$MSG" -H "x-pad: $(head -c 8400 /dev/zero | tr '\0' a)"
rt_eq "8,400-byte header on /v1/messages: Anthropic shape" \
    "$(jq -r '[.type,.error.type] | join(",")' "$RT_DIR/hdr_big_m.body")" "error,invalid_request_error"
rt_post hdr_huge /v1/chat/completions "$CHAT" -H "x-pad: $(head -c 40000 /dev/zero | tr '\0' a)"
rt_eq "40,000-byte header: 431" "$RT_STATUS" 431
rt_post hdr_after /v1/chat/completions "$CHAT"
rt_eq "served after header rejections" "$RT_STATUS" 200
rt_req hdr_metrics GET /metrics
rt_true "header rejections answered by the router are counted" \
    grep -q '^tollgate_router_rejected_total{reason="headers_too_large"} 2$' "$RT_DIR/hdr_metrics.body"

# An HTTP/1.0 client gets its stream unchunked, through the response's small block buffer.
rt_post chat_s10 /v1/chat/completions "$(jq -c '.model="gpt-midstream"' <<<"$CHAT_S")" -N --http1.0
rt_eq "HTTP/1.0 stream 200" "$RT_STATUS" 200
rt_true "HTTP/1.0 stream passes sse_check" "$SSE_CHECK" --dialect openai-chat "$RT_DIR/chat_s10.body"

# -------------------------------------------------------------- HTTP/1.1 server
# Raw bytes on one connection (bash's /dev/tcp): two requests written in one piece are both
# answered, in order; a malformed request line gets the server's own 400 and the connection
# closes; both it and the 40,000-byte header above are counted as bad requests.
rt_raw() { # NAME BYTES: what the router answers on a fresh connection (reads to EOF, 10 s)
    local hostport=${RT_URL#http://}
    timeout 10 bash -c 'exec 3<>"/dev/tcp/${1%:*}/${1##*:}"; printf "%b" "$2" >&3; cat <&3' \
        _ "$hostport" "$2" >"$RT_DIR/$1.raw" 2>/dev/null
    tr -d '\r' <"$RT_DIR/$1.raw" >"$RT_DIR/$1.rawl"
}
rt_raw pipe 'GET /health/liveness HTTP/1.1\r\nHost: x\r\n\r\nGET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer '"$RT_KEY"'\r\nConnection: close\r\n\r\n'
rt_eq "pipelined requests: two responses" "$(grep -o 'HTTP/1.1 200 OK' "$RT_DIR/pipe.rawl" | wc -l)" 2
rt_eq "pipelined requests: liveness first, then the models list" \
    "$(grep -o '"status":"alive"\|"object":"list"' "$RT_DIR/pipe.rawl" | tr '\n' ,)" \
    '"status":"alive","object":"list",'
rt_raw garbage 'GARBAGE\r\n\r\n'
rt_eq "malformed request line: 400" "$(head -1 "$RT_DIR/garbage.rawl")" "HTTP/1.1 400 Bad Request"
rt_true "malformed request line: connection closed" grep -qi '^connection: close' "$RT_DIR/garbage.rawl"
rt_raw v2 'GET /health/liveness HTTP/2.0\r\n\r\n'
rt_eq "HTTP/2.0 request line: 505" "$(head -1 "$RT_DIR/v2.rawl")" "HTTP/1.1 505 HTTP Version Not Supported"
rt_raw smuggle 'POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n'
rt_eq "Content-Length with Transfer-Encoding: 400" "$(head -1 "$RT_DIR/smuggle.rawl")" "HTTP/1.1 400 Bad Request"
rt_raw chunked_body "POST /v1/chat/completions HTTP/1.1\\r\\nHost: x\\r\\nAuthorization: Bearer $RT_KEY\\r\\nTransfer-Encoding: chunked\\r\\nConnection: close\\r\\n\\r\\n10\\r\\n${CHAT:0:16}\\r\\n$(printf '%x' $((${#CHAT} - 16)))\\r\\n${CHAT:16}\\r\\n0\\r\\n\\r\\n"
rt_eq "chunked request body: 200" "$(head -1 "$RT_DIR/chunked_body.rawl")" "HTTP/1.1 200 OK"
rt_req http_metrics GET /metrics
rt_true "server-answered bad requests counted (40,000-byte header, garbage, HTTP/2.0, smuggling)" \
    grep -q '^tollgate_router_http_bad_requests_total 4$' "$RT_DIR/http_metrics.body"
rt_true "connections counted" \
    grep -q '^tollgate_router_http_connections_accepted_total [1-9]' "$RT_DIR/http_metrics.body"
rt_req badkey POST /v1/messages -H "x-api-key: sk-not-a-real-key-0123456789abcdef" --data-binary "$MSG"
rt_eq "bad key 401 on /v1/messages" "$RT_STATUS" 401
rt_eq "bad key error in Anthropic shape" "$(jq -r .error.type "$RT_DIR/badkey.body")" authentication_error
rt_req master POST /v1/chat/completions -H "Authorization: Bearer $RT_MASTER_KEY" --data-binary "$CHAT"
rt_eq "master key accepted" "$RT_STATUS" 200

head -c $((11 * 1024 * 1024)) /dev/zero | tr '\0' 'a' >"$RT_DIR/big.txt"
printf '{"model":"gpt-main","messages":[{"role":"user","content":"' >"$RT_DIR/big.json"
cat "$RT_DIR/big.txt" >>"$RT_DIR/big.json"
printf '"}]}' >>"$RT_DIR/big.json"
rt_req big POST /v1/chat/completions -H "Authorization: Bearer $RT_KEY" --data-binary "@$RT_DIR/big.json"
rt_eq "11 MB body 413" "$RT_STATUS" 413
rt_true "413 names the limit" grep -q '10485760' "$RT_DIR/big.body"
rt_req big_chunked POST /v1/chat/completions -H "Authorization: Bearer $RT_KEY" \
    -H 'Transfer-Encoding: chunked' --data-binary "@$RT_DIR/big.json"
rt_eq "11 MB chunked body (no Content-Length) 413" "$RT_STATUS" 413

# -------------------------------------------------------------- retry and fallback
curl -fsS -o /dev/null -X POST "$RT_FAKE/_control/reset"
rt_fake_control fake-primary-a '{"fail_rate":1.0,"status":500}'
rt_fake_control fake-primary-b '{"fail_rate":1.0,"status":500}'
rt_post fb /v1/chat/completions "$CHAT"
rt_eq "primary failing -> 200" "$RT_STATUS" 200
rt_eq "served by the fallback group" "$(rt_hdr fb x-tollgate-model-group)" gpt-fallback
rt_eq "fallbacks header" "$(rt_hdr fb x-tollgate-fallbacks)" 1
rt_true "attempts header counts the retries" test "$(rt_hdr fb x-tollgate-attempts)" -ge 3
rt_true "both primaries were tried" \
    test "$(rt_fake_stat fake-primary-a requests)" -ge 1 -a "$(rt_fake_stat fake-primary-b requests)" -ge 1
# 12 * 0.000001 + 8 * 0.000002 = 0.000028
rt_eq "fallback cost at the fallback's prices" "$(rt_hdr fb x-tollgate-response-cost)" 0.000028000
# the fallback sees the client's body with only "model" changed
got=$(curl -fsS "$RT_FAKE/_requests?model=fake-fallback&limit=1" | jq -S '.requests[-1].body | fromjson')
want=$(jq -S '.model="fake-fallback"' <<<"$CHAT")
rt_eq "fallback body is the client body with only model swapped" "$got" "$want"
for ep in stream responses responses_stream messages messages_stream alias; do
    case $ep in
    stream) rt_post fb_$ep /v1/chat/completions "$CHAT_S" -N ;;
    responses) rt_post fb_$ep /v1/responses "$RESP" ;;
    responses_stream) rt_post fb_$ep /v1/responses "$(jq -c '.stream=true' <<<"$RESP")" -N ;;
    messages) rt_post fb_$ep /v1/messages "$(jq -c '.model="gpt-main"' <<<"$MSG")" ;;
    messages_stream) rt_post fb_$ep /v1/messages "$(jq -c '.model="gpt-main" | .stream=true' <<<"$MSG")" -N ;;
    alias) rt_post fb_$ep /v1/chat/completions "$(jq -c '.model="alias-main"' <<<"$CHAT")" ;;
    esac
    rt_eq "fallback ($ep) 200" "$RT_STATUS" 200
    rt_eq "fallback ($ep) served by gpt-fallback" "$(rt_hdr fb_$ep x-tollgate-model-group)" gpt-fallback
done
rt_true "fallback stream complete" grep -q '^data: \[DONE\]' "$RT_DIR/fb_stream.body"
rt_true "fallback responses stream complete" "$SSE_CHECK" --dialect openai-responses "$RT_DIR/fb_responses_stream.body"
rt_true "fallback messages stream complete" "$SSE_CHECK" --dialect anthropic "$RT_DIR/fb_messages_stream.body"
rt_fake_control fake-primary-a '{"fail_rate":0.0}'
rt_fake_control fake-primary-b '{"fail_rate":0.0}'

# -------------------------------------------------------------- context window, timeout
rt_post cw /v1/chat/completions "$(jq -c '.model="gpt-cw"' <<<"$CHAT")"
rt_eq "context window -> 200" "$RT_STATUS" 200
rt_eq "context window fallback group" "$(rt_hdr cw x-tollgate-model-group)" gpt-big
rt_post slow /v1/chat/completions "$(jq -c '.model="gpt-slow"' <<<"$CHAT")"
rt_eq "timeout -> fallback 200" "$RT_STATUS" 200
rt_eq "timeout fallback group" "$(rt_hdr slow x-tollgate-model-group)" gpt-fallback
rt_post slow_s /v1/chat/completions "$(jq -c '.model="gpt-slow" | .stream=true' <<<"$CHAT")" -N
rt_eq "stream timeout before the first byte -> fallback 200" "$RT_STATUS" 200
rt_eq "stream timeout fallback group" "$(rt_hdr slow_s x-tollgate-model-group)" gpt-fallback
t0=$(date +%s%N)
rt_post slow2 /v1/chat/completions "$(jq -c '.model="gpt-slow-only"' <<<"$CHAT")"
t1=$(date +%s%N)
rt_true "timeout without fallback -> 504/408" test "$RT_STATUS" = 504 -o "$RT_STATUS" = 408
rt_eq "timeout error class" "$(jq -r .error.code "$RT_DIR/slow2.body")" timeout
n_att=$(rt_hdr slow2 x-tollgate-attempts)
ms=$(((t1 - t0) / 1000000))
rt_true "deployment timeout (1 s) honoured, not the provider's 3 s ($n_att attempts in $ms ms)" \
    test "$ms" -ge $((n_att * 1000 - 100)) -a "$ms" -lt $((n_att * 1000 + 1500))

# -------------------------------------------------------------- cooldown
for i in $(seq 1 12); do
    rt_post cool_$i /v1/chat/completions "$(jq -c '.model="gpt-cool"' <<<"$CHAT")"
    [ "$RT_STATUS" = 200 ] || rt_fail "cooldown request $i status $RT_STATUS"
done
a1=$(rt_fake_stat fake-cool-a requests)
for i in $(seq 1 10); do
    rt_post coolb_$i /v1/chat/completions "$(jq -c '.model="gpt-cool"' <<<"$CHAT")"
done
a2=$(rt_fake_stat fake-cool-a requests)
rt_true "cooldown: failing deployment got at most allowed_fails+1 requests ($a1)" test "$a1" -le 3
rt_eq "cooldown: no traffic to the cooled deployment afterwards" "$a2" "$a1"
rt_true "cooldown: healthy deployment served" test "$(rt_fake_stat fake-cool-b requests)" -ge 22

# -------------------------------------------------------------- garbage upstream
rt_post garb /v1/chat/completions "$(jq -c '.model="gpt-garbage"' <<<"$CHAT")"
rt_eq "garbage upstream 502" "$RT_STATUS" 502
rt_eq "garbage error class" "$(jq -r .error.code "$RT_DIR/garb.body")" invalid_response
rt_true "garbage error body has no provider key" bash -c "! grep -qF '$RT_PROVIDER_KEY' '$RT_DIR/garb.body'"

# -------------------------------------------------------------- provider 429 passed on
rt_post r429 /v1/chat/completions "$(jq -c '.model="gpt-429"' <<<"$CHAT")"
rt_eq "provider 429 with no fallback -> 429" "$RT_STATUS" 429
rt_eq "429 carries retry-after" "$(rt_hdr r429 retry-after)" 7
rt_post r429m /v1/messages "$(jq -c '.model="gpt-429"' <<<"$MSG")"
rt_eq "429 on /v1/messages in Anthropic shape" "$(jq -r .error.type "$RT_DIR/r429m.body")" rate_limit_error

# -------------------------------------------------------------- client disconnect mid-stream
curl -sS -N --max-time 1 -o "$RT_DIR/disc.body" -H "Authorization: Bearer $RT_KEY" \
    --data-binary '{"model":"gpt-longstream","stream":true,"messages":[{"role":"user","content":"x"}]}' \
    "$RT_URL/v1/chat/completions" 2>/dev/null
aborted=0
for i in $(seq 1 50); do
    aborted=$(rt_fake_stat fake-longstream aborted)
    [ "$aborted" -ge 1 ] && break
    sleep 0.1
done
rt_true "client got the first chunks before disconnecting" grep -q '^data: {' "$RT_DIR/disc.body"
rt_true "client disconnect aborted the upstream transfer (aborted=$aborted)" test "$aborted" -ge 1

# -------------------------------------------------------------- metrics
rt_req metrics GET /metrics
rt_eq "metrics 200" "$RT_STATUS" 200
for m in tollgate_router_requests_total tollgate_router_attempts_total tollgate_router_retries_total \
    tollgate_router_fallbacks_total tollgate_router_cooldowns_total \
    tollgate_router_request_duration_seconds_bucket tollgate_router_overhead_seconds_bucket \
    tollgate_router_in_flight tollgate_router_upstream_native_transfers_total \
    tollgate_router_upstream_native_table_full_total; do
    rt_true "metric $m" grep -q "^$m" "$RT_DIR/metrics.body"
done
rt_true "fallback counted gpt-main -> gpt-fallback" \
    grep -q '^tollgate_router_fallbacks_total{from="gpt-main",to="gpt-fallback"} [1-9]' "$RT_DIR/metrics.body"
rt_true "cooldown counted for cool-a" \
    grep -q '^tollgate_router_cooldowns_total{deployment="cool-a"} [1-9]' "$RT_DIR/metrics.body"

# -------------------------------------------------------------- upstream client
# A provider by host name: served at once (through libcurl while the name is being resolved off
# the loop), then through the built-in client when it is on.
native_total() {
    curl -sS -m 5 "$RT_URL/metrics" | awk '/^tollgate_router_upstream_native_transfers_total / {print $2}'
}
NAMED='{"model":"gpt-named","messages":[{"role":"user","content":"hi"}]}'
n0=$(native_total)
rt_post named /v1/chat/completions "$NAMED"
rt_eq "provider by host name: first request 200" "$RT_STATUS" 200
sleep 1.2
for i in 1 2 3; do
    rt_post named /v1/chat/completions "$NAMED"
    rt_eq "provider by host name: request $((i + 1)) 200" "$RT_STATUS" 200
done
n1=$(native_total)
if [ "${RT_UPSTREAM_CLIENT:-native}" = curl ]; then
    rt_eq "upstream_client curl: no transfer through the built-in client" "$n1" 0
else
    rt_true "built-in client carried the host-name provider once resolved (native $n0 -> $n1)" \
        test "$((n1 - n0))" -ge 3
fi

# -------------------------------------------------------------- graceful stop
curl -sS -o "$RT_DIR/inflight.body" -w '%{http_code}' -H "Authorization: Bearer $RT_KEY" \
    --data-binary "$(jq -c '.model="gpt-inflight"' <<<"$CHAT")" "$RT_URL/v1/chat/completions" \
    >"$RT_DIR/inflight.status" &
curl_pid=$!
curl -sS -N -o "$RT_DIR/inflight_s.body" -H "Authorization: Bearer $RT_KEY" \
    --data-binary '{"model":"gpt-midstream","stream":true,"messages":[{"role":"user","content":"x"}]}' \
    "$RT_URL/v1/chat/completions" &
curl_s_pid=$!
sleep 0.3
rt_router_stop
rc=$?
wait "$curl_pid" "$curl_s_pid"
rt_eq "SIGTERM exit status" "$rc" 0
rt_eq "request in flight at SIGTERM was served" "$(cat "$RT_DIR/inflight.status")" 200
rt_true "stream in flight at SIGTERM ran to its end" grep -q '^data: \[DONE\]' "$RT_DIR/inflight_s.body"
rt_true "stream in flight at SIGTERM passes sse_check" "$SSE_CHECK" --dialect openai-chat "$RT_DIR/inflight_s.body"

rt_finish
