#!/usr/bin/env bash
# Azure OpenAI through router-svc against tests/fakes/cloud_fake.py, which checks what Azure
# checks: the URL shape ({api_base}/openai/deployments/{deployment}/...), the api-version, the
# api-key, or a Microsoft Entra ID token its own token endpoint issued (client credentials) and
# that has not expired. Chat (stream and not), /v1/messages through the translation, embeddings,
# responses; errors classified (content filter -> content-policy fallback, context window ->
# context-window fallback, 429 with Azure's retry-after, auth and api-version refusals final);
# the Entra ID token refreshed off the request path while requests keep flowing; a deployment
# whose token cannot be had answers a clear 503; no key, secret or token in the log.
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/router_lib.sh"

rt_init router-azure

export RT_AZ_KEY=$(rt_randkey azure)
export RT_ENTRA_SECRET=$(rt_randkey entra)
cat >"$RT_DIR/cloud.json" <<JSON
{"azure": {"api_key": "$RT_AZ_KEY", "api_version": "2024-10-21",
           "deployments": ["gpt-dep", "gpt-entra", "gpt-filter", "gpt-429", "gpt-cw", "emb-dep"]},
 "entra": {"tenant": "tenant-1", "client_id": "app-1", "client_secret": "$RT_ENTRA_SECRET",
           "expires_in": 12}}
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

az() { # GROUP DEPLOYMENT [extra params]
    echo "  - model_name: $1"
    echo "    litellm_params: {model: azure/$2, api_base: $CLOUD, $3}"
}
{
    echo "model_list:"
    az az-key gpt-dep "api_key: os.environ/RT_AZ_KEY, api_version: \"2024-10-21\""
    # the default api-version is the GA one the fake requires
    az az-entra gpt-entra "tenant_id: tenant-1, client_id: app-1,
                           client_secret: os.environ/RT_ENTRA_SECRET, azure_authority_host: $CLOUD"
    az az-entra-bad gpt-entra "tenant_id: tenant-1, client_id: app-1, client_secret: not-it,
                               azure_authority_host: $CLOUD"
    az az-oldver gpt-dep "api_key: os.environ/RT_AZ_KEY, api_version: \"2023-05-15\""
    az az-badkey gpt-dep "api_key: sk-not-the-key"
    az az-filter gpt-filter "api_key: os.environ/RT_AZ_KEY"
    az az-429 gpt-429 "api_key: os.environ/RT_AZ_KEY"
    az az-cw gpt-cw "api_key: os.environ/RT_AZ_KEY"
    az az-emb emb-dep "api_key: os.environ/RT_AZ_KEY"
    cat <<YAML
router_settings:
  num_retries: 0
  cooldown_time: 0
  content_policy_fallbacks: [{az-filter: [az-key]}]
  context_window_fallbacks: [{az-cw: [az-key]}]
general_settings:
  master_key: os.environ/RT_MASTER_KEY
tollgate:
  listen: 127.0.0.1:$RT_ROUTER_PORT
  keys:
    - {key: os.environ/RT_KEY}
YAML
} >"$RT_DIR/router.yaml"
curl -fsS -o /dev/null -X POST "$CLOUD/_control/fault/gpt-filter" -d '{"error":"content_filter"}'
curl -fsS -o /dev/null -X POST "$CLOUD/_control/fault/gpt-429" -d '{"status":429,"retry_after":7}'
curl -fsS -o /dev/null -X POST "$CLOUD/_control/fault/gpt-cw" -d '{"error":"context_window"}'

export TOLLGATE_LOG_LEVEL=debug
t0=$(date +%s%N)
rt_router_start "$RT_DIR/router.yaml"
t1=$(date +%s%N)
echo "# router ready after $(((t1 - t0) / 1000000)) ms (first Entra ID tokens fetched at start)"

chat() { # NAME GROUP [stream]
    rt_post "$1" /v1/chat/completions \
        "{\"model\":\"$2\",\"stream\":${3:-false},\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}"
}
last_req() { # DEPLOYMENT-IN-PATH: the fake's record of the last request for it
    grep -F "\"path\": \"/openai/deployments/$1/" "$RT_DIR/cloud.jsonl" | tail -n 1
}

chat key az-key
rt_eq "api-key: 200" "$RT_STATUS" 200
rt_eq "api-key: the answer" "$(jq -r .choices[0].message.content "$RT_DIR/key.body")" \
    "hello from the cloud fake"
rt_eq "api-key: URL shape, api-version and key as Azure wants them" \
    "$(last_req gpt-dep | jq -r '[.path, .query, .auth["api-key"], (.auth.authorization // "-")] | join(" ")')" \
    "/openai/deployments/gpt-dep/chat/completions api-version=2024-10-21 $RT_AZ_KEY -"

chat stream az-key true
rt_eq "stream: 200" "$RT_STATUS" 200
rt_true "stream: ends with [DONE]" grep -q '^data: \[DONE\]' "$RT_DIR/stream.body"
rt_eq "stream: the text" "$(sed -n 's/^data: \({.*\)/\1/p' "$RT_DIR/stream.body" |
    jq -rj '.choices[0].delta.content // empty')" "hello from the cloud fake"

rt_post msg /v1/messages \
    '{"model":"az-key","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}'
rt_eq "/v1/messages through the chat translation: 200" "$RT_STATUS" 200
rt_eq "/v1/messages: Anthropic shape" "$(jq -r '.type + " " + .content[0].text' "$RT_DIR/msg.body")" \
    "message hello from the cloud fake"
rt_eq "/v1/messages: usage" "$(jq -r '"\(.usage.input_tokens) \(.usage.output_tokens)"' "$RT_DIR/msg.body")" "11 5"

rt_post emb /v1/embeddings '{"model":"az-emb","input":["a","b"]}'
rt_eq "embeddings: 200 with two vectors" "$RT_STATUS $(jq '.data | length' "$RT_DIR/emb.body")" "200 2"
rt_eq "embeddings: URL" "$(last_req emb-dep | jq -r '.path + "?" + .query')" \
    "/openai/deployments/emb-dep/embeddings?api-version=2024-10-21"

rt_post resp /v1/responses '{"model":"az-key","input":"hi"}'
rt_eq "responses: 200" "$RT_STATUS" 200
rt_eq "responses: at /openai/responses with the deployment as model" \
    "$(grep -F '"path": "/openai/responses"' "$RT_DIR/cloud.jsonl" | tail -n 1 | jq -r '.model + " " + .query')" \
    "gpt-dep api-version=2024-10-21"

# Entra ID: the token the fake issued, as a bearer token; refreshed before it expires (12 s:
# renewed half way) while requests keep being served without waiting for it.
chat entra az-entra
rt_eq "Entra ID: 200" "$RT_STATUS" 200
rt_true "Entra ID: a bearer token from the token endpoint, no api-key" \
    bash -c "last_req() { grep -F '\"path\": \"/openai/deployments/gpt-entra/' '$RT_DIR/cloud.jsonl' | tail -n 1; };
             last_req | jq -e '(.auth.authorization | startswith(\"Bearer entra-\")) and (.auth[\"api-key\"] == null)' >/dev/null"
issued0=$(curl -fsS "$CLOUD/_stats" | jq .tokens_issued)
slow=0
ok=0
end=$(($(date +%s) + 15))
while [ "$(date +%s)" -lt "$end" ]; do
    s=$(date +%s%N)
    chat loop az-entra
    ms=$((($(date +%s%N) - s) / 1000000))
    [ "$RT_STATUS" = 200 ] && ok=$((ok + 1))
    [ "$ms" -gt 1000 ] && slow=$((slow + 1))
    sleep 0.2
done
issued1=$(curl -fsS "$CLOUD/_stats" | jq .tokens_issued)
rt_true "Entra ID: the token was renewed during 15 s of requests ($issued0 -> $issued1 issued)" \
    test "$issued1" -gt "$issued0"
rt_eq "Entra ID: no request waited across the renewals (none over 1 s)" "$slow" 0
rt_true "Entra ID: $ok requests answered 200" test "$ok" -gt 20
rt_true "Entra ID: a token endpoint that refuses the secret" \
    grep -q 'msg=token_fetch_failed deployment=az-entra-bad-2 provider=azure.*invalid_client' \
    "$RT_DIR/router.log"
chat entrabad az-entra-bad
rt_eq "no token: 503" "$RT_STATUS" 503
rt_true "no token: the reason in the error body" \
    grep -q 'no valid token from its token endpoint: token endpoint answered HTTP 401, error \\"invalid_client\\"' \
    "$RT_DIR/entrabad.body"

chat oldver az-oldver
rt_eq "an api-version Azure refuses: its 404, not retried" "$RT_STATUS $(rt_hdr oldver x-tollgate-attempts)" "404 1"
chat badkey az-badkey
rt_eq "a key Azure refuses: 401, not retried" "$RT_STATUS $(rt_hdr badkey x-tollgate-attempts)" "401 1"
chat filter az-filter
rt_eq "content filter: content-policy fallback served it" \
    "$RT_STATUS $(rt_hdr filter x-tollgate-model-group) $(rt_hdr filter x-tollgate-fallbacks)" "200 az-key 1"
chat cw az-cw
rt_eq "context window: context-window fallback served it" \
    "$RT_STATUS $(rt_hdr cw x-tollgate-model-group)" "200 az-key"
chat r429 az-429
rt_eq "429: Azure's retry-after passed on" "$RT_STATUS $(rt_hdr r429 retry-after)" "429 7"

curl -fsS "$RT_URL/metrics" >"$RT_DIR/metrics.txt"
rt_true "metrics: tokens fetched counted" \
    awk '$1 == "tollgate_router_tokens_fetched_total" && $2 >= 2 { f = 1 } END { exit !f }' "$RT_DIR/metrics.txt"
rt_true "metrics: failed fetches counted" \
    awk '$1 == "tollgate_router_token_fetch_failures_total" && $2 >= 1 { f = 1 } END { exit !f }' "$RT_DIR/metrics.txt"
rt_router_stop

# No key, client secret or issued token in the log, in error bodies or in x- headers.
jq -r '.auth.authorization // empty' "$RT_DIR/cloud.jsonl" | sed -n 's/^Bearer //p' | sort -u \
    >"$RT_DIR/tokens.txt"
rt_true "tokens were issued" test -s "$RT_DIR/tokens.txt"
leaks=""
for s in "$RT_AZ_KEY" "$RT_ENTRA_SECRET" "$RT_KEY" "$RT_MASTER_KEY" $(cat "$RT_DIR/tokens.txt"); do
    if grep -qF -- "$s" "$RT_DIR/router.log" "$RT_DIR/router.out" "$RT_DIR"/*.body \
        "$RT_DIR"/*.hdr 2>/dev/null; then
        leaks="$leaks ${s:0:10}..."
    fi
done
rt_eq "no key, secret or token in the log, bodies or headers" "${leaks:-none}" none
rt_finish
