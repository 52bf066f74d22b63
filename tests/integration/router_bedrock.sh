#!/usr/bin/env bash
# Amazon Bedrock through router-svc against tests/fakes/cloud_fake.py, which checks what AWS
# checks: it computes the SigV4 signature again from the request as it arrived (with the test
# secret) and refuses a mismatch, a stale date or an unsigned header; ConverseStream answers in
# AWS's binary event-stream framing; STS AssumeRoleWithWebIdentity issues temporary credentials
# for the right token and role. Chat and streams through the OpenAI and the Anthropic APIs, tool
# calls (streamed too), embeddings, usage; errors classified (throttling 429, input too long ->
# context-window fallback, a guardrail -> content-policy fallback, a refused signature final, an
# exception inside a stream -> an in-band error); STS credentials renewed while requests flow;
# no secret, session token or web identity token in the log.
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/router_lib.sh"

rt_init router-bedrock
SSE_CHECK="$TG_BUILD_DIR/tests/tools/sse_check"
CLAUDE=anthropic.claude-3-5-sonnet-20240620-v1:0

export RT_AWS_KEY_ID="AKIA$(head -c 8 /dev/urandom | od -An -tx1 | tr -d ' \n' | tr a-f A-F)"
export RT_AWS_SECRET=$(head -c 30 /dev/urandom | base64 | tr -d '\n/+=')
export RT_WEB_IDENTITY=$(rt_randkey webidentity)
cat >"$RT_DIR/cloud.json" <<JSON
{"bedrock": {"access_key_id": "$RT_AWS_KEY_ID", "secret": "$RT_AWS_SECRET", "region": "us-west-2",
             "models": ["$CLAUDE", "amazon.titan-embed-text-v2:0", "m-429", "m-cw", "m-guard",
                        "m-streamx"]},
 "sts": {"role_arn": "arn:aws:iam::123456789012:role/tollgate", "web_identity_token":
         "$RT_WEB_IDENTITY", "expires_in": 12}}
JSON
python3 "$HERE/../fakes/cloud_fake.py" --config "$RT_DIR/cloud.json" \
    --port-file "$RT_DIR/cloud.port" --log "$RT_DIR/cloud.jsonl" 2>"$RT_DIR/cloud.err" &
RT_PIDS+=($!)
for _ in $(seq 1 100); do
    [ -s "$RT_DIR/cloud.port" ] && break
    sleep 0.1
done
[ -s "$RT_DIR/cloud.port" ] || rt_die "cloud_fake did not start"
CLOUD="http://127.0.0.1:$(cat "$RT_DIR/cloud.port")"

br() { # GROUP MODEL [extra params]
    echo "  - model_name: $1"
    echo "    litellm_params: {model: \"bedrock/$2\", aws_region_name: us-west-2,"
    echo "                     aws_bedrock_runtime_endpoint: $CLOUD, ${3:-aws_access_key_id: os.environ/RT_AWS_KEY_ID, aws_secret_access_key: os.environ/RT_AWS_SECRET}}"
}
{
    echo "model_list:"
    br b-chat "$CLAUDE"
    br b-wrong "$CLAUDE" "aws_access_key_id: os.environ/RT_AWS_KEY_ID, aws_secret_access_key: not-the-secret"
    br b-429 m-429
    br b-cw m-cw
    br b-guard m-guard
    br b-streamx m-streamx
    br b-emb amazon.titan-embed-text-v2:0
    br b-sts "$CLAUDE" "aws_role_name: \"arn:aws:iam::123456789012:role/tollgate\",
                        aws_web_identity_token: os.environ/RT_WEB_IDENTITY, aws_sts_endpoint: $CLOUD/sts/"
    cat <<YAML
router_settings:
  num_retries: 0
  cooldown_time: 0
  content_policy_fallbacks: [{b-guard: [b-chat]}]
  context_window_fallbacks: [{b-cw: [b-chat]}]
general_settings:
  master_key: os.environ/RT_MASTER_KEY
tollgate:
  listen: 127.0.0.1:$RT_ROUTER_PORT
  keys:
    - {key: os.environ/RT_KEY}
YAML
} >"$RT_DIR/router.yaml"
curl -fsS -o /dev/null -X POST "$CLOUD/_control/fault/m-429" -d '{"status":429}'
curl -fsS -o /dev/null -X POST "$CLOUD/_control/fault/m-cw" -d '{"error":"context_window"}'
curl -fsS -o /dev/null -X POST "$CLOUD/_control/fault/m-guard" -d '{"error":"guardrail"}'
curl -fsS -o /dev/null -X POST "$CLOUD/_control/fault/m-streamx" -d '{"error":"stream_exception"}'

export TOLLGATE_LOG_LEVEL=debug
rt_router_start "$RT_DIR/router.yaml"

chat() { # NAME GROUP [stream] [extra members]
    rt_post "$1" /v1/chat/completions \
        "{\"model\":\"$2\",\"stream\":${3:-false},\"messages\":[{\"role\":\"system\",\"content\":\"be brief\"},{\"role\":\"user\",\"content\":\"hi\"}]${4:-}}"
}
msgs() { # NAME GROUP [stream]
    rt_post "$1" /v1/messages \
        "{\"model\":\"$2\",\"max_tokens\":32,\"stream\":${3:-false},\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}"
}
TOOLS=',"tools":[{"type":"function","function":{"name":"weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}]'

for g in b-chat b-sts; do
    chat "$g" $g
    rt_eq "$g: chat" \
        "$RT_STATUS $(jq -r '[.choices[0].message.content, .choices[0].finish_reason, .usage.prompt_tokens, .usage.completion_tokens] | join(" ")' "$RT_DIR/$g.body")" \
        "200 hello from bedrock stop 21 6"
done
rt_true "the model id's colon travelled as %3A, the request signed and verified" \
    grep -q "\"path\": \"/model/anthropic.claude-3-5-sonnet-20240620-v1%3A0/converse\"" \
    "$RT_DIR/cloud.jsonl"
chat stream b-chat true ',"stream_options":{"include_usage":true}'
rt_eq "stream: a valid OpenAI chat stream with usage, from event-stream frames" \
    "$("$SSE_CHECK" --dialect openai-chat --require-usage "$RT_DIR/stream.body" |
        jq -r '[.text, .finish_reason, .usage.prompt_tokens, .usage.completion_tokens] | join(" ")')" \
    "hello from bedrock stop 21 6"
msgs msg b-chat
rt_eq "/v1/messages" "$RT_STATUS $(jq -r '.content[0].text + " " + .stop_reason' "$RT_DIR/msg.body")" \
    "200 hello from bedrock end_turn"
msgs msgstream b-chat true
rt_eq "/v1/messages stream" \
    "$("$SSE_CHECK" --dialect anthropic "$RT_DIR/msgstream.body" | jq -r '.text + " " + .finish_reason')" \
    "hello from bedrock end_turn"
chat tools b-chat false "$TOOLS"
rt_eq "tools: toolUse as tool_calls" \
    "$(jq -r '.choices[0].finish_reason + " " + .choices[0].message.tool_calls[0].id + " " + .choices[0].message.tool_calls[0].function.arguments' "$RT_DIR/tools.body")" \
    'tool_calls tooluse_1 {"city":"Paris"}'
chat toolstream b-chat true "$TOOLS"
rt_eq "tools streamed: the input's pieces joined" \
    "$(sed -n 's/^data: \({.*\)/\1/p' "$RT_DIR/toolstream.body" | jq -rj '.choices[0].delta.tool_calls[0].function.arguments // empty')" \
    '{"city":"Paris"}'
rt_true "tools streamed: finish tool_calls" grep -q '"finish_reason":"tool_calls"' "$RT_DIR/toolstream.body"
rt_post emb /v1/embeddings '{"model":"b-emb","input":"hello"}'
rt_eq "embeddings (Titan)" "$RT_STATUS $(jq -r '(.data | length | tostring) + " " + (.usage.prompt_tokens | tostring)' "$RT_DIR/emb.body")" "200 1 3"
rt_post resp /v1/responses '{"model":"b-chat","input":"hi"}'
rt_eq "responses through the chat translation: a Responses answer" \
    "$RT_STATUS $(jq -r '.object + " " + .status + " " + .output[0].type' "$RT_DIR/resp.body")" \
    "200 response completed message"

chat wrong b-wrong
rt_eq "a signature AWS refuses: 403, not retried" "$RT_STATUS $(rt_hdr wrong x-tollgate-attempts)" "403 1"
chat r429 b-429
rt_eq "throttling: 429" "$RT_STATUS" 429
chat cw b-cw
rt_eq "input too long: context-window fallback served it" \
    "$RT_STATUS $(rt_hdr cw x-tollgate-model-group)" "200 b-chat"
chat guard b-guard
rt_eq "a guardrail's refusal: content-policy fallback served it" \
    "$RT_STATUS $(rt_hdr guard x-tollgate-model-group)" "200 b-chat"
chat streamx b-streamx true
rt_true "an exception inside a stream: an in-band error, no [DONE]" \
    bash -c "grep -q '\"error\"' '$RT_DIR/streamx.body' && ! grep -q '\\[DONE\\]' '$RT_DIR/streamx.body'"

# STS: credentials renewed (12 s: half way) while requests keep flowing, none waiting.
issued0=$(curl -fsS "$CLOUD/_stats" | jq .tokens_issued)
ok=0
slow=0
end=$(($(date +%s) + 14))
while [ "$(date +%s)" -lt "$end" ]; do
    s=$(date +%s%N)
    chat loop b-sts
    [ "$RT_STATUS" = 200 ] && ok=$((ok + 1))
    [ $((($(date +%s%N) - s) / 1000000)) -gt 1000 ] && slow=$((slow + 1))
    sleep 0.2
done
stats=$(curl -fsS "$CLOUD/_stats")
rt_true "STS: credentials renewed during 14 s of requests ($issued0 -> $(echo "$stats" | jq .tokens_issued))" \
    test "$(echo "$stats" | jq .tokens_issued)" -gt "$issued0"
rt_true "STS: $ok requests answered 200" test "$ok" -gt 20
rt_eq "STS: no request waited (none over 1 s)" "$slow" 0
rt_true "signatures verified by the fake ($stats)" test "$(echo "$stats" | jq .sig_verified)" -gt 30
rt_eq "signatures refused: only the wrong secret's" "$(echo "$stats" | jq .sig_refused)" 1
rt_router_stop

leaks=""
for s in "$RT_AWS_SECRET" "$RT_WEB_IDENTITY" "$RT_KEY" "$RT_MASTER_KEY"; do
    if grep -qF -- "$s" "$RT_DIR/router.log" "$RT_DIR/router.out" "$RT_DIR"/*.body \
        "$RT_DIR"/*.hdr 2>/dev/null; then
        leaks="$leaks ${s:0:10}..."
    fi
done
rt_eq "no secret or web identity token in the log, bodies or headers" "${leaks:-none}" none
rt_finish
