#!/usr/bin/env bash
# router-svc serving /v1/responses for an Anthropic deployment (fake-llm speaking Anthropic's
# Messages API) through the Responses <-> chat <-> messages translation: answers and streams in
# the Responses shape (checked with jq and sse_check), usage and cost as for chat, one completed
# call per request, refused fields as 400s naming them.
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/router_lib.sh"

rt_init router-responses
SSE_CHECK="$TG_BUILD_DIR/tests/tools/sse_check"
[ -x "$SSE_CHECK" ] || rt_die "sse_check not built ($SSE_CHECK)"

cat >"$RT_DIR/fake.json" <<'JSON'
{"default": {"prompt_tokens": 12, "completion_tokens": 8, "chunks": 4}}
JSON
rt_fake_start "$RT_DIR/fake.json"

cat >"$RT_DIR/router.yaml" <<YAML
model_list:
  - model_name: claude-main
    litellm_params: {model: anthropic/fake-claude, api_base: $RT_FAKE,
                     api_key: os.environ/RT_PROVIDER_KEY, timeout: 10,
                     input_cost_per_token: 0.000003, output_cost_per_token: 0.000015}
    model_info: {id: claude-1}
general_settings:
  master_key: os.environ/RT_MASTER_KEY
tollgate:
  listen: 127.0.0.1:$RT_ROUTER_PORT
  threads: 2
  upstream_client: ${RT_UPSTREAM_CLIENT:-native}
  keys:
    - {key: os.environ/RT_KEY, key_alias: itest, team_id: team-a}
YAML
rt_router_start "$RT_DIR/router.yaml"

completions() {
    curl -fsS "$RT_URL/metrics" | awk '$1 == "tollgate_router_completions_total" {print $2}'
}
last_upstream_body() {
    curl -fsS "$RT_FAKE/_requests?model=fake-claude&limit=1" | jq -c '.requests[-1].body | fromjson'
}

# -------------------------------------------------------------- an answer
before=$(completions)
rt_post resp /v1/responses '{"model":"claude-main","instructions":"be brief","input":"hello","max_output_tokens":50}'
rt_eq "responses -> anthropic: 200" "$RT_STATUS" 200
rt_eq "responses -> anthropic: the Responses shape" \
    "$(jq -c '[.object, .status, .model, (.id | startswith("resp_")), .output[0].type, .output[0].role, .output[0].content[0].type, (.output[0].content[0].text | length > 0), .max_output_tokens, .instructions]' "$RT_DIR/resp.body")" \
    '["response","completed","claude-main",true,"message","assistant","output_text",true,50,"be brief"]'
rt_eq "responses -> anthropic: usage" \
    "$(jq -c '[.usage.input_tokens, .usage.output_tokens, .usage.total_tokens, .usage.input_tokens_details.cached_tokens, .usage.output_tokens_details.reasoning_tokens]' "$RT_DIR/resp.body")" \
    '[12,8,20,0,0]'
rt_eq "responses -> anthropic: cost as for chat" "$(rt_hdr resp x-tollgate-response-cost)" 0.000156000
rt_eq "responses -> anthropic: Anthropic's request (system, max_tokens, the user's words)" \
    "$(last_upstream_body | jq -c '[.model, .system, .max_tokens, .messages[0].role, .messages[0].content]')" \
    '["fake-claude","be brief",50,"user","hello"]'
rt_eq "responses -> anthropic: one completed call" "$(($(completions) - before))" 1

# -------------------------------------------------------------- a stream
before=$(completions)
rt_post resp_s /v1/responses '{"model":"claude-main","input":"hello","stream":true}' -N
rt_eq "responses stream -> anthropic: 200" "$RT_STATUS" 200
rt_true "responses stream -> anthropic: passes sse_check (openai-responses)" \
    "$SSE_CHECK" --dialect openai-responses "$RT_DIR/resp_s.body"
sed -n 's/^data: //p' "$RT_DIR/resp_s.body" >"$RT_DIR/resp_s.jsonl"
rt_eq "responses stream -> anthropic: event order" \
    "$(jq -r .type "$RT_DIR/resp_s.jsonl" | uniq | tr '\n' ' ')" \
    'response.created response.in_progress response.output_item.added response.content_part.added response.output_text.delta response.output_text.done response.content_part.done response.output_item.done response.completed '
rt_eq "responses stream -> anthropic: sequence numbers 0, 1, 2, ..." \
    "$(jq -s '[.[].sequence_number] == [range(length)]' "$RT_DIR/resp_s.jsonl")" true
rt_eq "responses stream -> anthropic: event names match the types" \
    "$(paste -d' ' <(sed -n 's/^event: //p' "$RT_DIR/resp_s.body") <(jq -r .type "$RT_DIR/resp_s.jsonl") | awk '$1 != $2' | wc -l)" 0
rt_eq "responses stream -> anthropic: deltas joined = the completed text" \
    "$(jq -rj 'select(.type == "response.output_text.delta") | .delta' "$RT_DIR/resp_s.jsonl")" \
    "$(jq -rj 'select(.type == "response.completed") | .response.output[0].content[0].text' "$RT_DIR/resp_s.jsonl")"
rt_eq "responses stream -> anthropic: usage in response.completed" \
    "$(jq -c 'select(.type == "response.completed") | [.response.status, .response.usage.input_tokens, .response.usage.output_tokens, .response.usage.total_tokens]' "$RT_DIR/resp_s.jsonl")" \
    '["completed",12,8,20]'
rt_eq "responses stream -> anthropic: cost trailer as for chat" \
    "$(rt_hdr resp_s x-tollgate-response-cost)" 0.000156000
rt_eq "responses stream -> anthropic: one completed call" "$(($(completions) - before))" 1

# -------------------------------------------------------------- tools
TOOLS='{"model":"claude-main","input":"weather in Paris?","tool_choice":"required","tools":[{"type":"function","name":"get_weather","parameters":{"type":"object","properties":{"location":{"type":"string"}}}}]}'
rt_post tools /v1/responses "$TOOLS"
rt_eq "responses tools -> anthropic: 200" "$RT_STATUS" 200
rt_eq "responses tools -> anthropic: Anthropic's tools and tool_choice" \
    "$(last_upstream_body | jq -c '[.tools[0].name, .tools[0].input_schema.properties.location.type, .tool_choice.type]')" \
    '["get_weather","string","any"]'
rt_eq "responses tools -> anthropic: output items are messages or function calls" \
    "$(jq -c '[.output[] | .type | IN("message", "function_call")] | all' "$RT_DIR/tools.body")" true

# -------------------------------------------------------------- refused: 400 naming the field
rt_post refused /v1/responses '{"model":"claude-main","input":"hi","previous_response_id":"resp_1"}'
rt_eq "previous_response_id: 400" "$RT_STATUS" 400
rt_true "previous_response_id: the message names it" \
    jq -e '.error.message | test("previous_response_id: ")' "$RT_DIR/refused.body"
rt_post refused2 /v1/responses '{"model":"claude-main","input":"hi","tools":[{"type":"web_search_preview"}]}'
rt_eq "a built-in tool: 400 naming tools[0].type" \
    "$RT_STATUS $(jq -r '.error.message | test("tools\\[0\\].type: ")' "$RT_DIR/refused2.body")" "400 true"

rt_finish
