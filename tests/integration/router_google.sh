#!/usr/bin/env bash
# The Gemini API and Vertex AI through router-svc against tests/fakes/cloud_fake.py, which
# checks what Google checks: the Gemini API key in x-goog-api-key and the generateContent shape;
# on Vertex the project/location path, a bearer token from its own token endpoint, which issues
# one only for a JWT whose RS256 signature verifies against the test service account's public
# key (and whose claims are right); Claude on Vertex in its rawPredict form. Chat and streams
# through the OpenAI and the Anthropic APIs, tool calls, embeddings, usage; errors classified
# (a refused prompt -> content-policy fallback, input too long -> context-window fallback, 429
# with the RetryInfo delay, a bad key final); a service account whose key the endpoint refuses
# answers a clear 503; no key, private key or token in the log.
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/router_lib.sh"

rt_init router-google
SSE_CHECK="$TG_BUILD_DIR/tests/tools/sse_check"

# A test service account (its key made here), and one whose key the endpoint does not know.
openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$RT_DIR/sa.key" 2>/dev/null &&
    openssl pkey -in "$RT_DIR/sa.key" -pubout -out "$RT_DIR/sa.pub" 2>/dev/null &&
    openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$RT_DIR/other.key" \
        2>/dev/null || rt_die "openssl: test keys"
PORT=$(rt_free_port)
CLOUD="http://127.0.0.1:$PORT"
sa_json() { # KEYFILE
    jq -cn --rawfile k "$1" --arg uri "$CLOUD/token" \
        '{type: "service_account", project_id: "proj-test", private_key_id: "kid-1",
          private_key: $k, client_email: "svc@proj-test.iam.gserviceaccount.com",
          client_id: "1", token_uri: $uri}'
}
sa_json "$RT_DIR/sa.key" >"$RT_DIR/sa.json"
sa_json "$RT_DIR/other.key" >"$RT_DIR/other.json"
export RT_GEMINI_KEY="AIza-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"
# the inline form, from the variable LiteLLM reads
export VERTEXAI_CREDENTIALS=$(cat "$RT_DIR/sa.json")

cat >"$RT_DIR/cloud.json" <<JSON
{"gemini": {"api_key": "$RT_GEMINI_KEY",
            "models": ["gemini-2.0-flash", "gemini-429", "gemini-block", "gemini-cw",
                       "text-embedding-004"]},
 "vertex": {"project": "proj-test", "location": "europe-west4",
            "models": ["gemini-2.0-flash", "claude-3-5-sonnet@20240620", "text-embedding-005"]},
 "google": {"client_email": "svc@proj-test.iam.gserviceaccount.com", "kid": "kid-1",
            "public_key": "$RT_DIR/sa.pub", "expires_in": 3599}}
JSON
# the fake on the port the service accounts' token_uri names
python3 - "$PORT" "$HERE/../fakes/cloud_fake.py" "$RT_DIR" <<'PY' &
import runpy, sys, socket
port, fake, d = int(sys.argv[1]), sys.argv[2], sys.argv[3]
from http.server import ThreadingHTTPServer
orig = ThreadingHTTPServer.__init__
def init(self, addr, h, *a, **k):
    orig(self, ("127.0.0.1", port), h, *a, **k)
ThreadingHTTPServer.__init__ = init
sys.argv = [fake, "--config", d + "/cloud.json", "--port-file", d + "/cloud.port",
            "--log", d + "/cloud.jsonl"]
runpy.run_path(fake, run_name="__main__")
PY
RT_PIDS+=($!)
for _ in $(seq 1 100); do
    [ -s "$RT_DIR/cloud.port" ] && break
    sleep 0.1
done
[ -s "$RT_DIR/cloud.port" ] || rt_die "cloud_fake did not start"

cat >"$RT_DIR/router.yaml" <<YAML
model_list:
  - model_name: g-chat
    litellm_params: {model: gemini/gemini-2.0-flash, api_base: $CLOUD/v1beta,
                     api_key: os.environ/RT_GEMINI_KEY}
  - model_name: g-badkey
    litellm_params: {model: gemini/gemini-2.0-flash, api_base: $CLOUD/v1beta, api_key: AIza-wrong}
  - model_name: g-429
    litellm_params: {model: gemini/gemini-429, api_base: $CLOUD/v1beta,
                     api_key: os.environ/RT_GEMINI_KEY}
  - model_name: g-block
    litellm_params: {model: gemini/gemini-block, api_base: $CLOUD/v1beta,
                     api_key: os.environ/RT_GEMINI_KEY}
  - model_name: g-cw
    litellm_params: {model: gemini/gemini-cw, api_base: $CLOUD/v1beta,
                     api_key: os.environ/RT_GEMINI_KEY}
  - model_name: g-emb
    litellm_params: {model: gemini/text-embedding-004, api_base: $CLOUD/v1beta,
                     api_key: os.environ/RT_GEMINI_KEY}
  - model_name: v-chat
    litellm_params: {model: vertex_ai/gemini-2.0-flash, vertex_credentials: $RT_DIR/sa.json,
                     vertex_location: europe-west4, api_base: $CLOUD}
  - model_name: v-claude
    litellm_params: {model: "vertex_ai/claude-3-5-sonnet@20240620",
                     vertex_location: europe-west4, api_base: $CLOUD}
  - model_name: v-emb
    litellm_params: {model: vertex_ai/text-embedding-005, vertex_credentials: $RT_DIR/sa.json,
                     vertex_location: europe-west4, api_base: $CLOUD}
  - model_name: v-badsa
    litellm_params: {model: vertex_ai/gemini-2.0-flash, vertex_credentials: $RT_DIR/other.json,
                     vertex_location: europe-west4, api_base: $CLOUD}
router_settings:
  num_retries: 0
  cooldown_time: 0
  content_policy_fallbacks: [{g-block: [g-chat]}]
  context_window_fallbacks: [{g-cw: [g-chat]}]
general_settings:
  master_key: os.environ/RT_MASTER_KEY
tollgate:
  listen: 127.0.0.1:$RT_ROUTER_PORT
  keys:
    - {key: os.environ/RT_KEY}
YAML
curl -fsS -o /dev/null -X POST "$CLOUD/_control/fault/gemini-429" -d '{"status":429,"retry_after":7}'
curl -fsS -o /dev/null -X POST "$CLOUD/_control/fault/gemini-block" -d '{"error":"block"}'
curl -fsS -o /dev/null -X POST "$CLOUD/_control/fault/gemini-cw" -d '{"error":"context_window"}'

export TOLLGATE_LOG_LEVEL=debug
rt_router_start "$RT_DIR/router.yaml"
unset VERTEXAI_CREDENTIALS

chat() { # NAME GROUP [stream] [extra members]
    rt_post "$1" /v1/chat/completions \
        "{\"model\":\"$2\",\"stream\":${3:-false},\"messages\":[{\"role\":\"system\",\"content\":\"be brief\"},{\"role\":\"user\",\"content\":\"hi\"}]${4:-}}"
}
msgs() { # NAME GROUP [stream]
    rt_post "$1" /v1/messages \
        "{\"model\":\"$2\",\"max_tokens\":32,\"stream\":${3:-false},\"system\":\"be brief\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}"
}
fake_last() { # PATH-PART: the fake's record of the last request whose path has it
    grep -F "$1" "$RT_DIR/cloud.jsonl" | tail -n 1
}
for api in gemini vertex; do
    g=g-chat
    [ $api = vertex ] && g=v-chat
    chat "$api-chat" $g
    rt_eq "$api: chat 200" "$RT_STATUS" 200
    rt_eq "$api: the answer and its usage (thoughts count as completion)" \
        "$(jq -r '[.choices[0].message.content, .choices[0].finish_reason, .usage.prompt_tokens, .usage.completion_tokens] | join(" ")' "$RT_DIR/$api-chat.body")" \
        "hello from gemini stop 13 8"
    chat "$api-stream" $g true ',"stream_options":{"include_usage":true}'
    rt_eq "$api: stream 200" "$RT_STATUS" 200
    rt_eq "$api: a valid OpenAI chat stream with usage" \
        "$("$SSE_CHECK" --dialect openai-chat --require-usage "$RT_DIR/$api-stream.body" |
            jq -r '[.text, .finish_reason, .usage.prompt_tokens, .usage.completion_tokens] | join(" ")')" \
        "hello from gemini stop 13 8"
    chat "$api-stream-nousage" $g true
    rt_eq "$api: without include_usage the usage chunk is not forwarded" \
        "$(grep -c '"usage"' "$RT_DIR/$api-stream-nousage.body")" 0
    msgs "$api-msg" $g
    rt_eq "$api: /v1/messages" "$RT_STATUS $(jq -r '.type + " " + .content[0].text + " " + (.usage.output_tokens|tostring)' "$RT_DIR/$api-msg.body")" \
        "200 message hello from gemini 8"
    msgs "$api-msg-stream" $g true
    rt_eq "$api: /v1/messages stream" \
        "$("$SSE_CHECK" --dialect anthropic "$RT_DIR/$api-msg-stream.body" | jq -r '.text + " " + .finish_reason')" \
        "hello from gemini end_turn"
    chat "$api-tools" $g false ',"tools":[{"type":"function","function":{"name":"weather","parameters":{"type":"object","properties":{"city":{"type":"string"}},"additionalProperties":false}}}]'
    rt_eq "$api: a tool call comes back as tool_calls" \
        "$(jq -r '.choices[0].finish_reason + " " + .choices[0].message.tool_calls[0].function.name + " " + .choices[0].message.tool_calls[0].function.arguments' "$RT_DIR/$api-tools.body")" \
        'tool_calls weather {"city":"Paris"}'
done
rt_eq "gemini: the key in x-goog-api-key" \
    "$(grep -F '/v1beta/models/gemini-2.0-flash:generateContent' "$RT_DIR/cloud.jsonl" | head -n 1 | jq -r '.auth["x-goog-api-key"]')" \
    "$RT_GEMINI_KEY"
rt_true "gemini: the stream asked with alt=sse" \
    grep -q '"path": "/v1beta/models/gemini-2.0-flash:streamGenerateContent", "query": "alt=sse"' \
    "$RT_DIR/cloud.jsonl"
rt_true "vertex: a bearer token from the JWT grant" \
    bash -c "grep -F '/publishers/google/models/gemini-2.0-flash:generateContent' '$RT_DIR/cloud.jsonl' | head -n 1 | jq -e '.auth.authorization | startswith(\"Bearer ya29.fake-\")' >/dev/null"
stats=$(curl -fsS "$CLOUD/_stats")
rt_true "vertex: JWTs verified against the service account's public key ($stats)" \
    test "$(echo "$stats" | jq .jwt_verified)" -ge 1
rt_true "vertex: the JWT signed with another key was refused" \
    test "$(echo "$stats" | jq .jwt_refused)" -ge 1

# Claude on Vertex: Anthropic's API in its rawPredict form, credentials from VERTEXAI_CREDENTIALS
msgs claude-msg v-claude
rt_eq "vertex claude: /v1/messages passed through" \
    "$RT_STATUS $(jq -r '.content[0].text' "$RT_DIR/claude-msg.body")" "200 hello from claude on vertex"
rt_true "vertex claude: at rawPredict" \
    grep -q 'publishers/anthropic/models/claude-3-5-sonnet@20240620:rawPredict' "$RT_DIR/cloud.jsonl"
msgs claude-msg-stream v-claude true
rt_eq "vertex claude: stream (streamRawPredict)" \
    "$("$SSE_CHECK" --dialect anthropic "$RT_DIR/claude-msg-stream.body" | jq -r .text)" \
    "hello from claude on vertex"
chat claude-chat v-claude
rt_eq "vertex claude: chat through the translation" \
    "$RT_STATUS $(jq -r '.choices[0].message.content + " " + (.usage.prompt_tokens|tostring)' "$RT_DIR/claude-chat.body")" \
    "200 hello from claude on vertex 17"
chat claude-chat-stream v-claude true
rt_eq "vertex claude: chat stream through the translation" \
    "$("$SSE_CHECK" --dialect openai-chat "$RT_DIR/claude-chat-stream.body" | jq -r .text)" \
    "hello from claude on vertex"

for e in g-emb v-emb; do
    rt_post "$e" /v1/embeddings "{\"model\":\"$e\",\"input\":[\"a\",\"b\",\"c\"]}"
    rt_eq "$e: embeddings, one vector per input" \
        "$RT_STATUS $(jq -r '.object + " " + (.data | length | tostring)' "$RT_DIR/$e.body")" "200 list 3"
done
rt_eq "vertex embeddings: usage from the predictions' token counts" \
    "$(jq .usage.prompt_tokens "$RT_DIR/v-emb.body")" 12
rt_post resp /v1/responses '{"model":"g-chat","input":"hi"}'
rt_eq "responses through the chat translation: a Responses answer" \
    "$RT_STATUS $(jq -r '.object + " " + .status + " " + .output[0].type' "$RT_DIR/resp.body")" \
    "200 response completed message"

chat badkey g-badkey
rt_eq "a key Google refuses: 400, not retried" "$RT_STATUS $(rt_hdr badkey x-tollgate-attempts)" "400 1"
chat r429 g-429
rt_eq "429: the RetryInfo delay as retry-after" "$RT_STATUS $(rt_hdr r429 retry-after)" "429 7"
chat block g-block
rt_eq "a refused prompt: content-policy fallback served it" \
    "$RT_STATUS $(rt_hdr block x-tollgate-model-group)" "200 g-chat"
chat cw g-cw
rt_eq "input too long: context-window fallback served it" \
    "$RT_STATUS $(rt_hdr cw x-tollgate-model-group)" "200 g-chat"
chat badsa v-badsa
rt_eq "a service account the endpoint refuses: 503" "$RT_STATUS" 503
rt_true "... with the reason" grep -q 'token endpoint answered HTTP 400, error \\"invalid_grant\\"' \
    "$RT_DIR/badsa.body"
rt_router_stop

# No key, private key line or token anywhere it must not be.
jq -r '.auth.authorization // empty' "$RT_DIR/cloud.jsonl" | sed -n 's/^Bearer //p' | sort -u \
    >"$RT_DIR/tokens.txt"
sed -n 5p "$RT_DIR/sa.key" >"$RT_DIR/keyline.txt"
leaks=""
for s in "$RT_GEMINI_KEY" "$RT_KEY" "$RT_MASTER_KEY" $(cat "$RT_DIR/tokens.txt" "$RT_DIR/keyline.txt"); do
    if grep -qF -- "$s" "$RT_DIR/router.log" "$RT_DIR/router.out" "$RT_DIR"/*.body \
        "$RT_DIR"/*.hdr 2>/dev/null; then
        leaks="$leaks ${s:0:10}..."
    fi
done
rt_eq "no key, private key or token in the log, bodies or headers" "${leaks:-none}" none
rt_finish
