#!/usr/bin/env bash
# tests/e2e/rate_limit_matrix.sh: the rate-limit and fallback scenario matrix (issue "Virtual
# keys, rate limits, budgets blocks, and the rate-limit fallback semantics"), checked with curl
# against router-svc in front of fake-llm, on every endpoint, streaming and not.
#
# Configuration (one file for every row): gpt-main rpm 1 -> fallback gpt-fallback; gpt-ex rpm 1
# -> gpt-ex-fb rpm 1; plus gpt-open (no deployment limit) -> gpt-fallback, gpt-alt (a second
# fallback for row 6), claude-main rpm 1 -> claude-fb on Anthropic-native deployments (row 8
# on /v1/messages: a body can only be compared with the client's when no translation happens),
# and gpt-up -> gpt-up-fb whose provider answers 429 itself (row 3u: a provider's 429 falls back,
# and when every provider says 429 the client gets 429 with retry-after, never a 500).
# Static keys in tollgate.keys carry the per-row key settings. A last block checks the other
# limits end to end: key rpm_limit / tpm_limit / max_parallel_requests (429 for the key, no
# fallback), deployment tpm and model_tpm_limit (fall back).
#
# Isolation: every row runs in a fresh router-svc process (limiter windows are per process and
# start empty), and starts with one warm request that is served by the requested group itself;
# the row's cases then run within the same minute. fake-llm counters are reset at each row.
# Kafka: the router runs without tollgate.kafka (no broker configured): the keys are the static
# ones, readiness waits on no control topic, spend events are not published; nothing here waits
# on Kafka.
#
# Output: one line per check, then a table "row endpoint mode result" and a summary. Exit 0 only
# when every check passed.
set -u

SRC=${TG_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
BIN=${TG_REL_BUILD_DIR:-${TG_BUILD_DIR:?TG_BUILD_DIR unset}}
export TG_SOURCE_DIR=$SRC
export TG_BUILD_DIR=$BIN
ROUTER_BIN=$BIN/router-svc/router-svc
SSE_CHECK=$BIN/tests/tools/sse_check
[ -x "$ROUTER_BIN" ] || { echo "FATAL: router-svc not built in $BIN" >&2; exit 1; }
[ -x "$SSE_CHECK" ] || { echo "FATAL: sse_check not built in $BIN" >&2; exit 1; }
export TG_FAKE_LLM_BIN=${TG_FAKE_LLM_BIN:-$BIN/tests/fakes/fake-llm}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$SRC/tests/lib/lsan.supp}

# shellcheck source=../lib/services.sh
. "$SRC/tests/lib/services.sh"

STATE=$(mktemp -d "${TMPDIR:-/tmp}/tollgate-rlmatrix.XXXXXX")
ROUTER_PID=
FAILS=0
PASSES=0
CASE_FAILS=0
RESULTS=$STATE/results.txt
CALL_IDS=$STATE/call_ids.txt
: >"$RESULTS"
: >"$CALL_IDS"

cleanup() {
    router_stop >/dev/null 2>&1
    tg_services_stop_all
    if [ "$FAILS" -eq 0 ] && [ -z "${TG_KEEP_STATE:-}" ]; then
        rm -rf "$STATE"
    fi
}
trap cleanup EXIT
trap 'exit 143' TERM INT # a timeout or Ctrl-C still stops everything this script started

tg_services_init "$STATE/services" || exit 1

now_ms() { date +%s%3N; }

randkey() { printf 'sk-%s-%s' "$1" "$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"; }

# ------------------------------------------------------------------------------ assertions

ok() {
    PASSES=$((PASSES + 1))
    echo "ok   - $1"
}

fail() {
    FAILS=$((FAILS + 1))
    CASE_FAILS=$((CASE_FAILS + 1))
    echo "FAIL - $1" >&2
}

check_eq() { # DESC GOT WANT
    if [ "$2" = "$3" ]; then ok "$1"; else fail "$1: got '$2', want '$3'"; fi
}

check() { # DESC CMD...
    local d=$1
    shift
    if "$@"; then ok "$d"; else fail "$d"; fi
}

# case_begin ROW ENDPOINT MODE / case_end: one line of the results table per case.
case_begin() {
    CASE_ROW=$1
    CASE_EP=$2
    CASE_MODE=$3
    CASE_FAILS=0
}

case_end() {
    local r=PASS
    [ "$CASE_FAILS" -eq 0 ] || r="FAIL($CASE_FAILS)"
    printf '%-4s %-22s %-22s %s\n' "$CASE_ROW" "$CASE_EP" "$CASE_MODE" "$r" >>"$RESULTS"
}

# ------------------------------------------------------------------------------ services

FAKE_CONFIG=$STATE/fake.json
cat >"$FAKE_CONFIG" <<'JSON'
{"default": {"prompt_tokens": 12, "completion_tokens": 8, "chunks": 3},
 "models": {"m-slow": {"latency_ms": 1500}}}
JSON
tg_fakellm_start "$FAKE_CONFIG" || exit 1
FAKE=$TG_FAKE_LLM_URL

export RLM_PROVIDER_KEY RLM_KEY_PLAIN RLM_KEY_MRL RLM_KEY_MRL_OPEN RLM_KEY_ALIAS RLM_KEY_NOFB \
    RLM_KEY_FB_EMPTY RLM_KEY_FB_NULL RLM_KEY_FB_ABSENT RLM_KEY_ALLOW RLM_KEY_ALLOW_ALT \
    RLM_KEY_RPM RLM_KEY_TPM RLM_KEY_MTPM RLM_KEY_PAR
RLM_PROVIDER_KEY=$(randkey provider)
RLM_KEY_PLAIN=$(randkey plain)
RLM_KEY_MRL=$(randkey mrl)
RLM_KEY_MRL_OPEN=$(randkey mrlopen)
RLM_KEY_ALIAS=$(randkey alias)
RLM_KEY_NOFB=$(randkey nofb)
RLM_KEY_FB_EMPTY=$(randkey fbempty)
RLM_KEY_FB_NULL=$(randkey fbnull)
RLM_KEY_FB_ABSENT=$(randkey fbabsent)
RLM_KEY_ALLOW=$(randkey allow)
RLM_KEY_ALLOW_ALT=$(randkey allowalt)
RLM_KEY_RPM=$(randkey rpm)
RLM_KEY_TPM=$(randkey tpm)
RLM_KEY_MTPM=$(randkey mtpm)
RLM_KEY_PAR=$(randkey par)

ROUTER_PORT=$(tg_port_pick) || exit 1
URL=http://127.0.0.1:$ROUTER_PORT
CONFIG=$STATE/router.yaml
cat >"$CONFIG" <<YAML
model_list:
  - model_name: gpt-main
    litellm_params: {model: openai/m-main, api_base: $FAKE/v1,
                     api_key: os.environ/RLM_PROVIDER_KEY, rpm: 1, timeout: 20}
    model_info: {id: main-1}
  - model_name: gpt-fallback
    litellm_params: {model: openai/m-fallback, api_base: $FAKE/v1,
                     api_key: os.environ/RLM_PROVIDER_KEY, timeout: 20}
    model_info: {id: fallback-1}
  - model_name: gpt-ex
    litellm_params: {model: openai/m-ex, api_base: $FAKE/v1,
                     api_key: os.environ/RLM_PROVIDER_KEY, rpm: 1, timeout: 20}
    model_info: {id: ex-1}
  - model_name: gpt-ex-fb
    litellm_params: {model: openai/m-ex-fb, api_base: $FAKE/v1,
                     api_key: os.environ/RLM_PROVIDER_KEY, rpm: 1, timeout: 20}
    model_info: {id: ex-fb-1}
  - model_name: gpt-open
    litellm_params: {model: openai/m-open, api_base: $FAKE/v1,
                     api_key: os.environ/RLM_PROVIDER_KEY, timeout: 20}
    model_info: {id: open-1}
  - model_name: gpt-alt
    litellm_params: {model: openai/m-alt, api_base: $FAKE/v1,
                     api_key: os.environ/RLM_PROVIDER_KEY, timeout: 20}
    model_info: {id: alt-1}
  - model_name: gpt-up
    litellm_params: {model: openai/m-up, api_base: $FAKE/v1,
                     api_key: os.environ/RLM_PROVIDER_KEY, timeout: 20}
    model_info: {id: up-1}
  - model_name: gpt-up-fb
    litellm_params: {model: openai/m-up-fb, api_base: $FAKE/v1,
                     api_key: os.environ/RLM_PROVIDER_KEY, timeout: 20}
    model_info: {id: up-fb-1}
  - model_name: gpt-tpm
    litellm_params: {model: openai/m-tpm, api_base: $FAKE/v1,
                     api_key: os.environ/RLM_PROVIDER_KEY, tpm: 30, timeout: 20}
    model_info: {id: tpm-1}
  - model_name: gpt-slow
    litellm_params: {model: openai/m-slow, api_base: $FAKE/v1,
                     api_key: os.environ/RLM_PROVIDER_KEY, timeout: 20}
    model_info: {id: slow-1}
  - model_name: claude-main
    litellm_params: {model: anthropic/c-main, api_base: $FAKE,
                     api_key: os.environ/RLM_PROVIDER_KEY, rpm: 1, timeout: 20}
    model_info: {id: claude-main-1}
  - model_name: claude-fb
    litellm_params: {model: anthropic/c-fb, api_base: $FAKE,
                     api_key: os.environ/RLM_PROVIDER_KEY, timeout: 20}
    model_info: {id: claude-fb-1}
router_settings:
  num_retries: 1
  allowed_fails: 1000
  fallbacks:
    - {gpt-up: [gpt-up-fb]}
    - {gpt-tpm: [gpt-fallback]}
    - {gpt-main: [gpt-fallback]}
    - {gpt-ex: [gpt-ex-fb]}
    - {gpt-open: [gpt-fallback]}
    - {claude-main: [claude-fb]}
tollgate:
  listen: 127.0.0.1:$ROUTER_PORT
  keys:
    - {key: os.environ/RLM_KEY_PLAIN, key_alias: plain}
    - {key: os.environ/RLM_KEY_MRL, key_alias: mrl, model_rpm_limit: {gpt-main: 1}}
    - {key: os.environ/RLM_KEY_MRL_OPEN, key_alias: mrl-open, model_rpm_limit: {gpt-open: 1}}
    - {key: os.environ/RLM_KEY_ALIAS, key_alias: alias,
       router_settings: {model_group_alias: {alias-main: gpt-main}}}
    - {key: os.environ/RLM_KEY_NOFB, key_alias: nofb, metadata: {disable_fallbacks: true}}
    - {key: os.environ/RLM_KEY_FB_EMPTY, key_alias: fb-empty, router_settings: {fallbacks: []}}
    - {key: os.environ/RLM_KEY_FB_NULL, key_alias: fb-null, router_settings: {fallbacks: null}}
    - {key: os.environ/RLM_KEY_FB_ABSENT, key_alias: fb-absent, router_settings: {num_retries: 1}}
    - {key: os.environ/RLM_KEY_ALLOW, key_alias: allow, models: [gpt-main]}
    - {key: os.environ/RLM_KEY_ALLOW_ALT, key_alias: allow-alt, models: [gpt-main, gpt-alt],
       router_settings: {fallbacks: [{gpt-main: [gpt-fallback, gpt-alt]}]}}
    - {key: os.environ/RLM_KEY_RPM, key_alias: rpm, rpm_limit: 2}
    - {key: os.environ/RLM_KEY_TPM, key_alias: tpm, tpm_limit: 30}
    - {key: os.environ/RLM_KEY_MTPM, key_alias: mtpm, model_tpm_limit: {gpt-open: 30}}
    - {key: os.environ/RLM_KEY_PAR, key_alias: par, max_parallel_requests: 1}
YAML

check "config validates (--check)" "$ROUTER_BIN" --config "$CONFIG" --check

ROUTER_N=0
# router_start: a fresh router-svc process (empty limiter windows); waits for readiness.
router_start() {
    local i
    ROUTER_N=$((ROUTER_N + 1))
    ROUTER_LOG=$STATE/router.$ROUTER_N.log
    "$ROUTER_BIN" --config "$CONFIG" >"$ROUTER_LOG" 2>&1 </dev/null &
    ROUTER_PID=$!
    for i in $(seq 1 200); do
        curl -fsS -o /dev/null --max-time 1 "$URL/health/readiness" 2>/dev/null && return 0
        kill -0 "$ROUTER_PID" 2>/dev/null || break
        sleep 0.05
    done
    tail -n 30 "$ROUTER_LOG" >&2
    echo "FATAL: router-svc did not become ready" >&2
    exit 1
}

# router_stop: SIGTERM the router started above, by PID; its exit status must be 0.
router_stop() {
    local rc
    [ -n "$ROUTER_PID" ] || return 0
    kill -TERM "$ROUTER_PID" 2>/dev/null
    wait "$ROUTER_PID"
    rc=$?
    ROUTER_PID=
    if [ "$rc" -ne 0 ]; then
        fail "router-svc exited with status $rc (log $ROUTER_LOG)"
        tail -n 20 "$ROUTER_LOG" >&2
    fi
    return 0
}

fake_reset() {
    curl -fsS -o /dev/null -X POST "$FAKE/_control/reset" || { echo "FATAL: fake reset" >&2; exit 1; }
}

fake_count() { # MODEL: provider requests fake-llm received for that deployment model
    curl -fsS "$FAKE/_stats" | jq -r --arg m "$1" '.models[$m].requests // 0'
}

# ------------------------------------------------------------------------------ requests

# body_for ENDPOINT MODEL STREAM(0|1) [EXTRA_JSON]: a client request body for the endpoint.
body_for() {
    local ep=$1 model=$2 stream=$3 extra=${4:-'{}'} base
    local s=false
    [ "$stream" = 1 ] && s=true
    case "$ep" in
    /v1/chat/completions)
        base='{"messages":[{"role":"user","content":"Say hi"}],"max_tokens":16}' ;;
    /v1/messages)
        base='{"messages":[{"role":"user","content":"Say hi"}],"max_tokens":16}' ;;
    /v1/responses)
        base='{"input":"Say hi","max_output_tokens":16}' ;;
    /v1/embeddings)
        base='{"input":"Say hi"}' ;;
    esac
    if [ "$ep" = /v1/embeddings ]; then
        jq -cn --argjson b "$base" --argjson x "$extra" --arg m "$model" '$b + {model: $m} + $x'
    else
        jq -cn --argjson b "$base" --argjson x "$extra" --arg m "$model" --argjson s "$s" \
            '$b + {model: $m, stream: $s} + $x'
    fi
}

# send NAME KEY ENDPOINT BODY: POST; body in NAME.body, lower-cased headers in NAME.hdr,
# status in STATUS. Records the call id.
send() {
    local name=$1 key=$2 ep=$3 body=$4 cid
    local -a auth=(-H "Authorization: Bearer $key")
    [ "$ep" = /v1/messages ] && auth=(-H "x-api-key: $key" -H 'anthropic-version: 2023-06-01')
    STATUS=$(curl -sS -o "$STATE/$name.body" -D "$STATE/$name.rawhdr" -w '%{http_code}' \
        --max-time 30 -X POST "${auth[@]}" -H 'Content-Type: application/json' \
        --data-binary "$body" "$URL$ep")
    tr '[:upper:]' '[:lower:]' <"$STATE/$name.rawhdr" | tr -d '\r' >"$STATE/$name.hdr"
    cid=$(hdr "$name" x-tollgate-call-id)
    [ -n "$cid" ] && printf '%s\n' "$cid" >>"$CALL_IDS"
    return 0
}

hdr() { # NAME HEADER(lower-case)
    grep -m1 "^$2:" "$STATE/$1.hdr" 2>/dev/null | sed "s/^$2: *//"
}

dialect_of() {
    case "$1" in
    /v1/chat/completions) echo openai-chat ;;
    /v1/messages) echo anthropic ;;
    /v1/responses) echo openai-responses ;;
    esac
}

# expect_served NAME ENDPOINT STREAM GROUP [FALLBACKS]: 200 from GROUP (after FALLBACKS fallback
# groups, default 1 for a fallback group, 0 otherwise; EXP_ATTEMPTS attempts in all) with a valid
# body for the API.
EXP_ATTEMPTS=1
expect_served() {
    local name=$1 ep=$2 stream=$3 group=$4 what="$1" ctype cid fb
    case "$group" in
    gpt-fallback | gpt-ex-fb | gpt-alt | claude-fb | gpt-up-fb) fb=${5:-1} ;;
    *) fb=${5:-0} ;;
    esac
    check_eq "$what: status" "$STATUS" 200
    check_eq "$what: x-tollgate-model-group" "$(hdr "$name" x-tollgate-model-group)" "$group"
    check_eq "$what: x-tollgate-fallbacks" "$(hdr "$name" x-tollgate-fallbacks)" "$fb"
    check_eq "$what: x-tollgate-attempts" "$(hdr "$name" x-tollgate-attempts)" "$EXP_ATTEMPTS"
    cid=$(hdr "$name" x-tollgate-call-id)
    check "$what: x-tollgate-call-id is a UUID" \
        grep -Eq '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$' <<<"$cid"
    ctype=$(hdr "$name" content-type)
    if [ "$stream" = 1 ]; then
        check "$what: content-type text/event-stream" grep -q '^text/event-stream' <<<"$ctype"
        local -a req=()
        [ "$ep" != /v1/chat/completions ] && req=(--require-usage)
        if "$SSE_CHECK" --dialect "$(dialect_of "$ep")" "${req[@]}" "$STATE/$name.body" \
            >"$STATE/$name.sse" 2>&1; then
            ok "$what: stream valid ($(dialect_of "$ep"))"
        else
            fail "$what: stream invalid: $(cat "$STATE/$name.sse")"
        fi
    else
        check "$what: content-type application/json" grep -q '^application/json' <<<"$ctype"
        local filter
        case "$ep" in
        /v1/chat/completions) filter='.object == "chat.completion" and (.choices | length) > 0' ;;
        /v1/messages) filter='.type == "message" and .role == "assistant"' ;;
        /v1/responses) filter='.object == "response" and .status == "completed"' ;;
        /v1/embeddings) filter='.object == "list" and (.data | length) >= 1 and (.data[0].embedding | length) > 0' ;;
        esac
        check "$what: body is the API's success shape" jq -e "$filter" "$STATE/$name.body" \
            >/dev/null
    fi
}

# expect_429 NAME ENDPOINT MESSAGE: router-made 429 before any stream, in the API's error
# shape, naming the requested model and its limit, with retry-after >= 1 and no attempt made.
expect_429() {
    local name=$1 ep=$2 msg=$3 what="$1" ra ctype
    check_eq "$what: status" "$STATUS" 429
    ra=$(hdr "$name" retry-after)
    check "$what: retry-after present and >= 1 (got '$ra')" \
        test -n "$ra" -a "$ra" -ge 1 -a "$ra" -le 60
    ctype=$(hdr "$name" content-type)
    check "$what: content-type application/json, no stream (got '$ctype')" \
        grep -q '^application/json' <<<"$ctype"
    check_eq "$what: x-tollgate-attempts" "$(hdr "$name" x-tollgate-attempts)" 0
    check "$what: x-tollgate-call-id present" test -n "$(hdr "$name" x-tollgate-call-id)"
    if [ "$ep" = /v1/messages ]; then
        check "$what: Anthropic error shape" jq -e \
            '.type == "error" and .error.type == "rate_limit_error" and (.error.message | type) == "string"' \
            "$STATE/$name.body" >/dev/null
        check_eq "$what: message" "$(jq -r '.error.message' "$STATE/$name.body")" "$msg"
    else
        check "$what: OpenAI error shape" jq -e \
            '(.error | type) == "object" and .error.type == "rate_limit_error" and (.error.message | type) == "string"' \
            "$STATE/$name.body" >/dev/null
        check_eq "$what: message" "$(jq -r '.error.message' "$STATE/$name.body")" "$msg"
    fi
}

# expect_upstream_429 NAME ENDPOINT ATTEMPTS: every provider answered 429: the client gets 429
# (not 500) before any stream, in its API's error shape, with retry-after >= 1.
expect_upstream_429() {
    local name=$1 ep=$2 attempts=$3 what="$1" ra ctype
    check_eq "$what: status" "$STATUS" 429
    ra=$(hdr "$name" retry-after)
    check "$what: retry-after present and >= 1 (got '$ra')" test -n "$ra" -a "$ra" -ge 1
    ctype=$(hdr "$name" content-type)
    check "$what: content-type application/json, no stream (got '$ctype')" \
        grep -q '^application/json' <<<"$ctype"
    check_eq "$what: x-tollgate-attempts" "$(hdr "$name" x-tollgate-attempts)" "$attempts"
    if [ "$ep" = /v1/messages ]; then
        check "$what: Anthropic error shape" jq -e \
            '.type == "error" and .error.type == "rate_limit_error"' "$STATE/$name.body" >/dev/null
    else
        check "$what: OpenAI error shape" jq -e '.error.type == "rate_limit_error"' \
            "$STATE/$name.body" >/dev/null
    fi
}

EPS_STREAMING="/v1/chat/completions /v1/messages /v1/responses"
ALL_EPS="/v1/chat/completions /v1/messages /v1/responses /v1/embeddings"

# variants ROW KEY MODEL EXTRA EXPECT ARG: every endpoint x stream mode of one case.
# EXPECT: served (ARG = group) or 429 (ARG = message).
variants() {
    local row=$1 key=$2 model=$3 extra=$4 expect=$5 arg=$6 label=${7:-}
    local ep stream name mode
    for ep in $ALL_EPS; do
        for stream in 0 1; do
            [ "$ep" = /v1/embeddings ] && [ "$stream" = 1 ] && continue
            mode=$([ "$stream" = 1 ] && echo stream || echo plain)
            [ -n "$label" ] && mode="$label/$mode"
            name="r$row-$(basename "$ep")-${mode//\//-}"
            case_begin "$row" "$ep" "$mode"
            send "$name" "$key" "$ep" "$(body_for "$ep" "$model" "$stream" "$extra")"
            if [ "$expect" = served ]; then
                expect_served "$name" "$ep" "$stream" "$arg"
            elif [ "$expect" = upstream429 ]; then
                expect_upstream_429 "$name" "$ep" "$arg"
            else
                expect_429 "$name" "$ep" "$arg"
            fi
            case_end
        done
    done
}

# warm ROW KEY MODEL GROUP: the first request of the minute, served by GROUP itself.
warm() {
    local name="r$1-warm"
    case_begin "$1" warm "$3"
    send "$name" "$2" /v1/chat/completions "$(body_for /v1/chat/completions "$3" 0)"
    expect_served "$name" /v1/chat/completions 0 "$4"
    case_end
}

MAIN_MSG='Model capacity reached for gpt-main: rpm limit 1, remaining 0'

# ------------------------------------------------------------------------------ row 1
echo "# row 1: key model_rpm_limit {gpt-main: 1}: the second request falls back"
fake_reset
router_start
warm 1 "$RLM_KEY_MRL" gpt-main gpt-main
variants 1 "$RLM_KEY_MRL" gpt-main '{}' served gpt-fallback
check_eq "row 1: gpt-main's deployment saw only the warm request" "$(fake_count m-main)" 1
# the key limit alone (a group without a deployment limit): the key is limited, another key not
warm 1k "$RLM_KEY_MRL_OPEN" gpt-open gpt-open
variants 1k "$RLM_KEY_MRL_OPEN" gpt-open '{}' served gpt-fallback key-limit-only
case_begin 1k other-key /v1/chat/completions
send r1k-other "$RLM_KEY_PLAIN" /v1/chat/completions "$(body_for /v1/chat/completions gpt-open 0)"
expect_served r1k-other /v1/chat/completions 0 gpt-open
case_end
router_stop

# ------------------------------------------------------------------------------ row 2
echo "# row 2: key-level model_group_alias alias-main -> gpt-main, falls back to gpt-fallback"
fake_reset
router_start
warm 2 "$RLM_KEY_ALIAS" alias-main gpt-main
variants 2 "$RLM_KEY_ALIAS" alias-main '{}' served gpt-fallback
case_begin 2 other-key /v1/chat/completions
send r2-noalias "$RLM_KEY_PLAIN" /v1/chat/completions "$(body_for /v1/chat/completions alias-main 0)"
check_eq "row 2: the alias is the key's own (another key gets 400)" "$STATUS" 400
case_end
router_stop

# ------------------------------------------------------------------------------ row 3
echo "# row 3: gpt-ex and gpt-ex-fb both saturated -> 429 naming gpt-ex"
fake_reset
router_start
warm 3 "$RLM_KEY_PLAIN" gpt-ex gpt-ex
case_begin 3 saturate-fb /v1/chat/completions
send r3-fb "$RLM_KEY_PLAIN" /v1/chat/completions "$(body_for /v1/chat/completions gpt-ex 0)"
expect_served r3-fb /v1/chat/completions 0 gpt-ex-fb
case_end
variants 3 "$RLM_KEY_PLAIN" gpt-ex '{}' 429 'Model capacity reached for gpt-ex: rpm limit 1, remaining 0'
check_eq "row 3: gpt-ex saw one request" "$(fake_count m-ex)" 1
check_eq "row 3: gpt-ex-fb saw one request" "$(fake_count m-ex-fb)" 1
router_stop

# ------------------------------------------------------------------------------ row 3u
echo "# row 3u: provider-side 429s: fall back; every provider 429 -> 429 with retry-after"
fake_reset
router_start
curl -fsS -o /dev/null -X POST "$FAKE/_control/models/m-up" --data-binary '{"status": 429}'
EXP_ATTEMPTS=3
variants 3u "$RLM_KEY_PLAIN" gpt-up '{}' served gpt-up-fb provider-429
EXP_ATTEMPTS=1
check_eq "row 3u: the primary was tried and retried (2 x 7)" "$(fake_count m-up)" 14
curl -fsS -o /dev/null -X POST "$FAKE/_control/models/m-up-fb" --data-binary '{"status": 429}'
variants 3u "$RLM_KEY_PLAIN" gpt-up '{}' upstream429 4 all-providers-429
curl -fsS -o /dev/null -X POST "$FAKE/_control/reset?config=1"
router_stop

# ------------------------------------------------------------------------------ row 4
echo "# row 4: disable_fallbacks (key metadata, request body) -> 429, no fallback attempted"
fake_reset
router_start
t0=$(now_ms)
warm 4 "$RLM_KEY_PLAIN" gpt-main gpt-main
t1=$(now_ms)
# retry-after is exact: the warm request leaves the window 60 whole seconds after its own second
case_begin 4 retry-after exact
t2=$(now_ms)
send r4-ra "$RLM_KEY_NOFB" /v1/chat/completions "$(body_for /v1/chat/completions gpt-main 0)"
t3=$(now_ms)
ra=$(hdr r4-ra retry-after)
lo=$((60 - (t3 - t0 + 999) / 1000))
hi=$((60 - (t2 - t1) / 1000))
check "row 4: retry-after $ra within [$lo, $hi] (60 s after the warm request's second)" \
    test -n "$ra" -a "$ra" -ge "$lo" -a "$ra" -le "$hi"
case_end
variants 4 "$RLM_KEY_NOFB" gpt-main '{}' 429 "$MAIN_MSG" key-metadata
variants 4 "$RLM_KEY_PLAIN" gpt-main '{"disable_fallbacks":true}' 429 "$MAIN_MSG" body
check_eq "row 4: no fallback attempted (gpt-fallback saw nothing)" "$(fake_count m-fallback)" 0
check_eq "row 4: gpt-main saw only the warm request" "$(fake_count m-main)" 1
# disable_fallbacks is the gateway's parameter: a served request does not pass it to the provider
# (OpenAI answers 400 to an unknown argument)
for ep in $ALL_EPS; do
    model=gpt-open
    fmodel=m-open
    if [ "$ep" = /v1/messages ]; then
        model=claude-fb
        fmodel=c-fb
    fi
    case_begin 4b "$ep" "body flag, served"
    send "r4b-$(basename "$ep")" "$RLM_KEY_PLAIN" "$ep" \
        "$(body_for "$ep" "$model" 0 '{"disable_fallbacks":true}')"
    check_eq "r4b-$(basename "$ep"): status" "$STATUS" 200
    got=$(curl -fsS "$FAKE/_requests?model=$fmodel&limit=1" | jq -r '.requests[-1].body')
    check_eq "r4b-$(basename "$ep"): disable_fallbacks not forwarded upstream" \
        "$(jq 'has("disable_fallbacks")' <<<"$got")" false
    case_end
done
router_stop

# ------------------------------------------------------------------------------ row 5
echo "# row 5: key router_settings.fallbacks: [] -> 429; absent or null -> the global list"
fake_reset
router_start
warm 5 "$RLM_KEY_PLAIN" gpt-main gpt-main
variants 5 "$RLM_KEY_FB_EMPTY" gpt-main '{}' 429 "$MAIN_MSG" fallbacks-empty
check_eq "row 5: fallbacks [] attempted no fallback" "$(fake_count m-fallback)" 0
variants 5 "$RLM_KEY_FB_NULL" gpt-main '{}' served gpt-fallback fallbacks-null
variants 5 "$RLM_KEY_FB_ABSENT" gpt-main '{}' served gpt-fallback fallbacks-absent
check_eq "row 5: null and absent fell back (14 requests)" "$(fake_count m-fallback)" 14
router_stop

# ------------------------------------------------------------------------------ row 6
echo "# row 6: a fallback group missing from the key's models is skipped"
fake_reset
router_start
warm 6 "$RLM_KEY_ALLOW" gpt-main gpt-main
variants 6 "$RLM_KEY_ALLOW" gpt-main '{}' 429 "$MAIN_MSG" nothing-left
check_eq "row 6: the disallowed fallback saw nothing" "$(fake_count m-fallback)" 0
variants 6 "$RLM_KEY_ALLOW_ALT" gpt-main '{}' served gpt-alt next-allowed
check_eq "row 6: still nothing for the disallowed fallback" "$(fake_count m-fallback)" 0
router_stop

# ------------------------------------------------------------------------------ row 7
echo "# row 7: a burst of 36 (12 per endpoint, half streaming) with gpt-main saturated"
fake_reset
router_start
warm 7 "$RLM_KEY_PLAIN" gpt-main gpt-main
pids=()
for ep in $EPS_STREAMING; do
    for i in $(seq 1 12); do
        stream=$((i % 2))
        name="r7-$(basename "$ep")-$i"
        (
            send "$name" "$RLM_KEY_PLAIN" "$ep" "$(body_for "$ep" gpt-main "$stream")"
            echo "$STATUS" >"$STATE/$name.status"
        ) &
        pids+=($!)
    done
done
wait "${pids[@]}"
for ep in $EPS_STREAMING; do
    for stream in 0 1; do
        mode=$([ "$stream" = 1 ] && echo stream || echo plain)
        case_begin 7 "$ep" "burst/$mode x6"
        for i in $(seq 1 12); do
            [ $((i % 2)) = "$stream" ] || continue
            name="r7-$(basename "$ep")-$i"
            STATUS=$(cat "$STATE/$name.status")
            expect_served "$name" "$ep" "$stream" gpt-fallback
        done
        case_end
    done
done
case_begin 7 all "distinct call ids"
check_eq "row 7: 36 distinct call ids" \
    "$(cat "$STATE"/r7-*-[0-9]*.hdr | grep '^x-tollgate-call-id:' | sort -u | wc -l)" 36
check_eq "row 7: gpt-fallback served 36" "$(fake_count m-fallback)" 36
check_eq "row 7: gpt-main saw only the warm request" "$(fake_count m-main)" 1
case_end
router_stop

# ------------------------------------------------------------------------------ row 8
echo "# row 8: the fallback deployment receives the client's request with only model changed"
fake_reset
router_start
warm 8 "$RLM_KEY_PLAIN" gpt-main gpt-main
case_begin 8 warm claude-main
send r8-warm-claude "$RLM_KEY_PLAIN" /v1/messages "$(body_for /v1/messages claude-main 0)"
expect_served r8-warm-claude /v1/messages 0 claude-main
case_end

# same_body NAME FAKE_MODEL CLIENT_BODY [usage]: the newest body fake-llm recorded for
# FAKE_MODEL equals the client's with "model" deleted on both sides (and the model is the
# deployment's). With "usage": a streaming chat completion whose client did not ask for usage,
# where the router adds stream_options.include_usage (the one documented addition, so that the
# call can be billed; the extra usage chunk is not forwarded) and nothing else.
same_body() {
    local name=$1 fmodel=$2 client=$3 got
    got=$(curl -fsS "$FAKE/_requests?model=$fmodel&limit=1" | jq -r '.requests[-1].body')
    check_eq "$name: upstream model is the deployment's" "$(jq -r '.model' <<<"$got")" "$fmodel"
    local a b
    if [ "${4:-}" = usage ]; then
        a=$(jq -S 'del(.model) | .stream_options = ((.stream_options // {}) + {include_usage: true})' \
            <<<"$client")
    else
        a=$(jq -S 'del(.model)' <<<"$client")
    fi
    b=$(jq -S 'del(.model)' <<<"$got")
    if [ "$a" = "$b" ]; then
        ok "$name: fallback body equals the client's except model"
    else
        fail "$name: fallback body differs from the client's: $(diff <(echo "$a") <(echo "$b") | tr '\n' ' ')"
    fi
}

RICH_CHAT='{"temperature":0.25,"top_p":0.9,"user":"end-user-8","metadata":{"trace":"r8"},"seed":7,"stop":["\n\n"],"n":1,"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Say hi"}],"max_tokens":16}'
RICH_MSG='{"system":"Be brief.","temperature":0.25,"top_k":5,"metadata":{"user_id":"end-user-8"},"stop_sequences":["END"],"messages":[{"role":"user","content":[{"type":"text","text":"Say hi"}]}],"max_tokens":16}'
RICH_RESP='{"instructions":"Be brief.","temperature":0.25,"user":"end-user-8","metadata":{"trace":"r8"},"input":[{"role":"user","content":"Say hi"}],"max_output_tokens":16}'
RICH_EMB='{"input":["Say hi","Say bye"],"dimensions":4,"user":"end-user-8","encoding_format":"float"}'

for stream in 0 1; do
    mode=$([ "$stream" = 1 ] && echo stream || echo plain)
    s=$([ "$stream" = 1 ] && echo true || echo false)

    case_begin 8 /v1/chat/completions "$mode"
    b=$(jq -c --argjson s "$s" '. + {model: "gpt-main", stream: $s}' <<<"$RICH_CHAT")
    send "r8-chat-$mode" "$RLM_KEY_PLAIN" /v1/chat/completions "$b"
    expect_served "r8-chat-$mode" /v1/chat/completions "$stream" gpt-fallback
    same_body "r8-chat-$mode" m-fallback "$b" "$([ "$stream" = 1 ] && echo usage)"
    case_end

    if [ "$stream" = 1 ]; then
        case_begin 8 /v1/chat/completions "stream+include_usage"
        b=$(jq -c '. + {model: "gpt-main", stream: true, stream_options: {include_usage: true}}' \
            <<<"$RICH_CHAT")
        send r8-chat-usage "$RLM_KEY_PLAIN" /v1/chat/completions "$b"
        expect_served r8-chat-usage /v1/chat/completions 1 gpt-fallback
        same_body r8-chat-usage m-fallback "$b"
        case_end
    fi

    case_begin 8 /v1/messages "anthropic/$mode"
    b=$(jq -c --argjson s "$s" '. + {model: "claude-main", stream: $s}' <<<"$RICH_MSG")
    send "r8-msg-$mode" "$RLM_KEY_PLAIN" /v1/messages "$b"
    expect_served "r8-msg-$mode" /v1/messages "$stream" claude-fb
    same_body "r8-msg-$mode" c-fb "$b"
    case_end

    case_begin 8 /v1/responses "$mode"
    b=$(jq -c --argjson s "$s" '. + {model: "gpt-main", stream: $s}' <<<"$RICH_RESP")
    send "r8-resp-$mode" "$RLM_KEY_PLAIN" /v1/responses "$b"
    expect_served "r8-resp-$mode" /v1/responses "$stream" gpt-fallback
    same_body "r8-resp-$mode" m-fallback "$b"
    case_end
done
case_begin 8 /v1/embeddings plain
b=$(jq -c '. + {model: "gpt-main"}' <<<"$RICH_EMB")
send r8-emb "$RLM_KEY_PLAIN" /v1/embeddings "$b"
expect_served r8-emb /v1/embeddings 0 gpt-fallback
same_body r8-emb m-fallback "$b"
case_end
router_stop

# ------------------------------------------------------------------------------ limits
echo "# limits: key rpm_limit / tpm_limit / max_parallel_requests, deployment tpm, model_tpm_limit"
fake_reset
router_start
chat_open=$(body_for /v1/chat/completions gpt-open 0)
# key rpm_limit 2: the third request in the minute is refused for the key, no fallback tried
case_begin L key-rpm_limit plain+stream
send L-rpm1 "$RLM_KEY_RPM" /v1/chat/completions "$chat_open"
expect_served L-rpm1 /v1/chat/completions 0 gpt-open
send L-rpm2 "$RLM_KEY_RPM" /v1/chat/completions "$chat_open"
expect_served L-rpm2 /v1/chat/completions 0 gpt-open
for stream in 0 1; do
    send "L-rpm3-$stream" "$RLM_KEY_RPM" /v1/chat/completions \
        "$(body_for /v1/chat/completions gpt-open "$stream")"
    expect_429 "L-rpm3-$stream" /v1/chat/completions \
        'Rate limit reached for this key: rpm limit 2, remaining 0'
done
check_eq "L: a key limit tries no fallback" "$(fake_count m-fallback)" 0
case_end
# deployment tpm 30 (each call uses 12 + 8 tokens, added when it ends): two calls fit, the third
# finds the deployment over its tpm and falls back
case_begin L deployment-tpm plain
for i in 1 2 3; do
    send "L-dtpm$i" "$RLM_KEY_PLAIN" /v1/chat/completions "$(body_for /v1/chat/completions gpt-tpm 0)"
    [ "$i" -lt 3 ] && g=gpt-tpm || g=gpt-fallback
    expect_served "L-dtpm$i" /v1/chat/completions 0 "$g"
done
case_end
# key tpm_limit 30
case_begin L key-tpm_limit plain
for i in 1 2 3; do
    send "L-ktpm$i" "$RLM_KEY_TPM" /v1/chat/completions "$chat_open"
    if [ "$i" -lt 3 ]; then
        expect_served "L-ktpm$i" /v1/chat/completions 0 gpt-open
    else
        expect_429 "L-ktpm$i" /v1/chat/completions \
            'Rate limit reached for this key: tpm limit 30, remaining 0'
    fi
done
case_end
# model_tpm_limit {gpt-open: 30}: the third request goes to the fallback
case_begin L model_tpm_limit plain
for i in 1 2 3; do
    send "L-mtpm$i" "$RLM_KEY_MTPM" /v1/chat/completions "$chat_open"
    [ "$i" -lt 3 ] && g=gpt-open || g=gpt-fallback
    expect_served "L-mtpm$i" /v1/chat/completions 0 "$g"
done
case_end
# max_parallel_requests 1: of two concurrent requests (the provider takes 1.5 s) one is served,
# the other refused at once; afterwards the slot is free again
case_begin L max_parallel_requests concurrent
chat_slow=$(body_for /v1/chat/completions gpt-slow 0)
send L-par1 "$RLM_KEY_PAR" /v1/chat/completions "$chat_slow" &
par_pid=$!
for i in $(seq 1 40); do
    [ "$(curl -fsS "$FAKE/_stats" | jq -r '.models["m-slow"].requests // 0')" = 1 ] && break
    sleep 0.05
done
send L-par2 "$RLM_KEY_PAR" /v1/chat/completions "$chat_slow"
expect_429 L-par2 /v1/chat/completions \
    'Rate limit reached for this key: max_parallel_requests limit 1, remaining 0'
check_eq "L-par2: retry-after 1" "$(hdr L-par2 retry-after)" 1
wait "$par_pid"
STATUS=$(sed -n '1s/^http\/[0-9.]* \([0-9]*\).*/\1/p' "$STATE/L-par1.hdr")
expect_served L-par1 /v1/chat/completions 0 gpt-slow
send L-par3 "$RLM_KEY_PAR" /v1/chat/completions "$chat_slow"
expect_served L-par3 /v1/chat/completions 0 gpt-slow
case_end
router_stop

# ------------------------------------------------------------------------------ summary
case_begin all call-ids distinct
check_eq "every response carried its own call id" "$(sort "$CALL_IDS" | uniq -d | wc -l)" 0
case_end

echo
echo "# row endpoint               mode                   result"
cat "$RESULTS"
echo "# $PASSES checks passed, $FAILS failed (state in $STATE)"
[ "$FAILS" -eq 0 ]
