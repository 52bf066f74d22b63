#!/usr/bin/env bash
# fake-llm integration tests: one case per endpoint and per fault mode.
#
#   fake_llm_test.sh CASE FAKE_LLM_BIN SSE_CHECK_BIN
#
# Every case starts its own fake-llm on a free loopback port (tests/lib/services.sh), talks to
# it with curl, checks bodies with jq and streams with sse_check, and stops it by PID.
set -u -o pipefail

CASE=${1:?case}
export TG_FAKE_LLM_BIN=${2:?fake-llm binary}
SSE_CHECK=${3:?sse_check binary}
SRC=${TG_SOURCE_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}

# shellcheck source=../lib/services.sh
source "$SRC/tests/lib/services.sh"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/fake-llm-test.XXXXXX")
FAILS=0

export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$SRC/tests/lib/lsan.supp}

# Stop fake-llm (SIGTERM, clean shutdown) and fail on any sanitizer report in its log.
cleanup() {
    local rc=$? log=$WORK/state/fakellm/fake-llm.log
    # Only what this script started (cases without a fake-llm never call tg_services_init).
    if [ -d "$WORK/state" ]; then
        tg_services_stop_all
    fi
    if grep -qE 'ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:' "$log" 2>/dev/null; then
        echo "FAIL [$CASE]: sanitizer report in the fake-llm log:" >&2
        grep -E -A 40 'ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:' "$log" | head -n 80 >&2
        rc=1
    fi
    rm -rf "$WORK"
    exit "$rc"
}
trap cleanup EXIT

fail() {
    echo "FAIL [$CASE]: $*" >&2
    FAILS=$((FAILS + 1))
}

check() { # check DESCRIPTION CONDITION-COMMAND...
    local what=$1
    shift
    if ! "$@" >/dev/null; then
        fail "$what"
    fi
}

eq() { # eq DESCRIPTION GOT WANT
    if [ "$2" != "$3" ]; then
        fail "$1: got '$2', want '$3'"
    fi
}

start() { # start [CONFIG-JSON-TEXT]
    tg_services_init "$WORK/state" || exit 1
    if [ -n "${1:-}" ]; then
        printf '%s\n' "$1" >"$WORK/config.json"
        tg_fakellm_start "$WORK/config.json" || exit 1
    else
        tg_fakellm_start || exit 1
    fi
    URL=$TG_FAKE_LLM_URL
}

# post PATH BODY: body to $WORK/out, headers to $WORK/hdr; prints the status code.
post() {
    curl -sS -m 20 -o "$WORK/out" -D "$WORK/hdr" -w '%{http_code}' \
        -H 'content-type: application/json' --data-binary "$2" "$URL$1"
}

get() {
    curl -sS -m 20 -o "$WORK/out" -w '%{http_code}' "$URL$1"
}

control() { # control MODEL JSON
    local code
    code=$(curl -sS -m 10 -o "$WORK/ctl" -w '%{http_code}' --data-binary "$2" \
        "$URL/_control/models/$1")
    [ "$code" = 200 ] || fail "control $1 $2 -> $code $(cat "$WORK/ctl")"
}

header() { # header NAME: value of a response header from $WORK/hdr (case-insensitive)
    tr -d '\r' <"$WORK/hdr" | awk -v n="$(echo "$1" | tr 'A-Z' 'a-z')" -F': ' \
        'tolower($1) == n { print $2 }'
}

counter() { # counter MODEL FIELD
    curl -sS -m 10 "$URL/_stats" | jq -r --arg m "$1" --arg f "$2" '.models[$m][$f] // "missing"'
}

now_ms() {
    local t
    t=$(date +%s%N)
    echo $((t / 1000000))
}

# stream PATH BODY DIALECT: stream to $WORK/sse, validated; the report to $WORK/report.
stream() {
    curl -sS -N -m 20 -o "$WORK/sse" -D "$WORK/hdr" -H 'content-type: application/json' \
        --data-binary "$2" "$URL$1" || fail "stream $1: curl failed"
    if ! "$SSE_CHECK" --dialect "$3" "$WORK/sse" >"$WORK/report"; then
        fail "stream $1 is not a valid $3 stream"
        return 1
    fi
    case $(header content-type) in
    text/event-stream*) ;;
    *) fail "stream $1: content-type $(header content-type)" ;;
    esac
}

# ---------------------------------------------------------------------------------- cases

case_chat() {
    start '{"models":{"gpt-a":{"prompt_tokens":30,"completion_tokens":9,"chunks":3}}}'
    eq "chat status" "$(post /v1/chat/completions '{"model":"gpt-a","messages":[{"role":"user","content":"hi"}]}')" 200
    check "chat object" jq -e '.object == "chat.completion" and (.id | startswith("chatcmpl-"))
        and (.created | type == "number") and .model == "gpt-a"
        and .choices[0].message.role == "assistant"
        and (.choices[0].message.content | length > 0)
        and .choices[0].finish_reason == "stop"
        and .usage == {"prompt_tokens":30,"completion_tokens":9,"total_tokens":39,"prompt_tokens_details":{"cached_tokens":0,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0,"audio_tokens":0}}' "$WORK/out"
    local text
    text=$(jq -r '.choices[0].message.content' "$WORK/out")
    eq "nine words" "$(wc -w <<<"$text" | tr -d ' ')" 9

    stream /v1/chat/completions '{"model":"gpt-a","stream":true,"stream_options":{"include_usage":true}}' openai-chat
    check "chat stream usage" jq -e '.usage == {"prompt_tokens":30,"completion_tokens":9,"total_tokens":39,"prompt_tokens_details":{"cached_tokens":0,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0,"audio_tokens":0}}
        and .events == 5 and .finish_reason == "stop"' "$WORK/report"
    eq "stream text equals non-stream text" "$(jq -r .text "$WORK/report")" "$text"
    check "usage chunk has empty choices" grep -q '"choices":\[\],"usage":{' "$WORK/sse"
    check "ends with [DONE] and a blank line" test "$(tail -c 14 "$WORK/sse" | od -An -c | tr -d ' \n')" = 'data:[DONE]\n\n'

    stream /v1/chat/completions '{"model":"gpt-a","stream":true}' openai-chat
    check "no usage without include_usage" jq -e '.usage == null and .events == 4' "$WORK/report"
    # The unprefixed path is served too.
    eq "/chat/completions" "$(post /chat/completions '{"model":"gpt-a"}')" 200
}

case_embeddings() {
    start '{"models":{"emb":{"prompt_tokens":7}}}'
    eq "one input" "$(post /v1/embeddings '{"model":"emb","input":"hello"}')" 200
    check "embedding list" jq -e '.object == "list" and (.data | length) == 1
        and .data[0].object == "embedding" and .data[0].index == 0
        and (.data[0].embedding | length) == 8 and .model == "emb"
        and .usage == {"prompt_tokens":7,"total_tokens":7}' "$WORK/out"
    eq "three inputs" "$(post /v1/embeddings '{"model":"emb","input":["a","b","c"],"dimensions":5}')" 200
    check "one embedding per input" jq -e '(.data | length) == 3 and ([.data[].index] == [0,1,2])
        and all(.data[]; (.embedding | length) == 5 and all(.embedding[]; type == "number"))' "$WORK/out"
    eq "token array is one input" "$(post /v1/embeddings '{"model":"emb","input":[1,2,3]}')" 200
    check "token array" jq -e '(.data | length) == 1' "$WORK/out"
    eq "missing input" "$(post /v1/embeddings '{"model":"emb"}')" 400
    check "openai error shape" jq -e '.error.type == "invalid_request_error" and (.error.message | length > 0)' "$WORK/out"
    eq "stream flag ignored for embeddings" "$(post /v1/embeddings '{"model":"emb","input":"x","stream":true}')" 200
    check "embeddings never stream" jq -e '.object == "list"' "$WORK/out"
}

case_responses() {
    start '{"models":{"resp":{"prompt_tokens":11,"completion_tokens":5,"chunks":2}}}'
    eq "responses status" "$(post /v1/responses '{"model":"resp","input":"hi"}')" 200
    check "response object" jq -e '.object == "response" and .status == "completed"
        and (.id | startswith("resp_")) and .model == "resp"
        and .output[0].type == "message" and .output[0].content[0].type == "output_text"
        and (.output[0].content[0].text | length > 0)
        and .usage.input_tokens == 11 and .usage.output_tokens == 5 and .usage.total_tokens == 16' "$WORK/out"
    local text
    text=$(jq -r '.output[0].content[0].text' "$WORK/out")
    stream /v1/responses '{"model":"resp","input":"hi","stream":true}' openai-responses
    check "responses stream usage" jq -e '.usage.input_tokens == 11 and .usage.output_tokens == 5
        and .usage.total_tokens == 16' "$WORK/report"
    eq "responses stream text" "$(jq -r .text "$WORK/report")" "$text"
    check "every event has an event: line" test "$(grep -c '^event: ' "$WORK/sse")" = "$(grep -c '^data: ' "$WORK/sse")"
    check "starts with response.created" test "$(head -n 1 "$WORK/sse")" = "event: response.created"
    check "ends with response.completed" grep -q '^event: response.completed$' <(tail -n 3 "$WORK/sse")
    check "has output_text deltas" test "$(grep -c '^event: response.output_text.delta$' "$WORK/sse")" = 2
}

case_messages() {
    start '{"models":{"claude-x":{"prompt_tokens":21,"completion_tokens":6,"chunks":3}}}'
    eq "messages status" "$(post /v1/messages '{"model":"claude-x","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}')" 200
    check "message object" jq -e '.type == "message" and .role == "assistant" and (.id | startswith("msg_"))
        and .model == "claude-x" and .content[0].type == "text" and (.content[0].text | length > 0)
        and .stop_reason == "end_turn"
        and .usage == {"input_tokens":21,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":6}' "$WORK/out"
    local text
    text=$(jq -r '.content[0].text' "$WORK/out")
    stream /v1/messages '{"model":"claude-x","stream":true}' anthropic
    check "anthropic stream usage" jq -e '.usage == {"input_tokens":21,"output_tokens":6}
        and .finish_reason == "end_turn" and .events == 8' "$WORK/report"
    eq "anthropic stream text" "$(jq -r .text "$WORK/report")" "$text"
    eq "event order" "$(grep '^event: ' "$WORK/sse" | cut -d' ' -f2 | uniq | tr '\n' ' ')" \
        "message_start content_block_start content_block_delta content_block_stop message_delta message_stop "
    eq "bad json" "$(post /v1/messages '{"model":')" 400
    check "anthropic error shape" jq -e '.type == "error" and .error.type == "invalid_request_error"' "$WORK/out"
}

case_models() {
    start '{"models":{"alpha":{},"beta":{"latency_ms":1}}}'
    eq "models status" "$(get /v1/models)" 200
    check "models list" jq -e '.object == "list" and ([.data[].id] | sort) == ["alpha","beta"]
        and all(.data[]; .object == "model")' "$WORK/out"
    post /v1/chat/completions '{"model":"gamma"}' >/dev/null
    get /v1/models >/dev/null
    check "models seen in requests are listed" jq -e '[.data[].id] | index("gamma") != null' "$WORK/out"
    eq "POST on models" "$(post /v1/models '{}')" 405
    eq "unknown path" "$(get /v1/nothing)" 404
}

case_fault_status() {
    start '{"models":{"busy":{"status":503,"retry_after":7},"limited":{"status":429,"retry_after":3}}}'
    eq "503" "$(post /v1/chat/completions '{"model":"busy"}')" 503
    eq "retry-after on 503" "$(header retry-after)" 7
    check "server_error shape" jq -e '.error.type == "server_error" and (.error.message | length > 0)' "$WORK/out"
    eq "429" "$(post /v1/chat/completions '{"model":"limited"}')" 429
    eq "retry-after on 429" "$(header retry-after)" 3
    check "rate limit shape" jq -e '.error.code == "rate_limit_exceeded"' "$WORK/out"
    eq "429 anthropic" "$(post /v1/messages '{"model":"limited"}')" 429
    check "anthropic rate limit shape" jq -e '.type == "error" and .error.type == "rate_limit_error"' "$WORK/out"
    eq "streams fail before streaming" "$(post /v1/chat/completions '{"model":"busy","stream":true}')" 503
    check "failed stream is a JSON error" jq -e '.error' "$WORK/out"
    control busy '{"status":null}'
    eq "status null returns to success" "$(post /v1/chat/completions '{"model":"busy"}')" 200
    eq "no retry-after on success" "$(header retry-after)" ""
    eq "failed count" "$(counter busy failed)" 2
    eq "ok count" "$(counter busy ok)" 1
}

case_fault_context_window() {
    start '{"models":{"small":{"error":"context_window","prompt_tokens":9000}}}'
    eq "openai 400" "$(post /v1/chat/completions '{"model":"small"}')" 400
    check "context_length_exceeded" jq -e '.error.code == "context_length_exceeded"
        and .error.type == "invalid_request_error" and (.error.message | test("maximum context length"))' "$WORK/out"
    eq "responses 400" "$(post /v1/responses '{"model":"small"}')" 400
    check "responses code" jq -e '.error.code == "context_length_exceeded"' "$WORK/out"
    eq "anthropic 400" "$(post /v1/messages '{"model":"small"}')" 400
    check "prompt is too long" jq -e '.type == "error" and .error.type == "invalid_request_error"
        and (.error.message | startswith("prompt is too long"))' "$WORK/out"
    eq "stream request 400" "$(post /v1/chat/completions '{"model":"small","stream":true}')" 400
}

case_fault_content_policy() {
    start '{"models":{"strict":{"error":"content_policy"}}}'
    eq "openai 400" "$(post /v1/chat/completions '{"model":"strict"}')" 400
    check "content_policy_violation" jq -e '.error.code == "content_policy_violation"' "$WORK/out"
    eq "anthropic 400" "$(post /v1/messages '{"model":"strict"}')" 400
    check "anthropic content policy" jq -e '.type == "error" and .error.type == "invalid_request_error"
        and (.error.message | test("content_policy_violation"))' "$WORK/out"
}

case_fault_garbage() {
    start '{"models":{"junk":{"error":"garbage"}}}'
    eq "garbage is 200" "$(post /v1/chat/completions '{"model":"junk"}')" 200
    check "garbage has bytes" test -s "$WORK/out"
    if jq -e . "$WORK/out" >/dev/null 2>&1; then
        fail "garbage body parsed as JSON"
    fi
    eq "garbage stream is 200" "$(post /v1/chat/completions '{"model":"junk","stream":true}')" 200
    if "$SSE_CHECK" --dialect openai-chat "$WORK/out" >/dev/null 2>&1; then
        fail "garbage stream passed sse_check"
    fi
    eq "garbage counted as failed" "$(counter junk failed)" 2
}

case_fault_drop() {
    start '{"models":{"flaky":{"error":"drop_mid_stream","chunks":6}}}'
    local rc
    curl -sS -N -m 10 -o "$WORK/sse" --data-binary '{"model":"flaky","stream":true}' \
        "$URL/v1/chat/completions" 2>"$WORK/err"
    rc=$?
    check "stream drop is a transfer error (curl rc $rc)" test "$rc" = 18 -o "$rc" = 56
    check "some chunks arrived before the drop" grep -q '^data: {' "$WORK/sse"
    check "no [DONE] after a drop" test "$(grep -c 'DONE' "$WORK/sse")" = 0
    if "$SSE_CHECK" --dialect openai-chat "$WORK/sse" >/dev/null 2>&1; then
        fail "dropped stream passed sse_check"
    fi
    curl -sS -m 10 -o "$WORK/out" --data-binary '{"model":"flaky"}' "$URL/v1/chat/completions" 2>"$WORK/err"
    rc=$?
    check "non-stream drop is a transfer error (curl rc $rc)" test "$rc" = 18 -o "$rc" = 56
    curl -sS -N -m 10 -o "$WORK/sse" --data-binary '{"model":"flaky","stream":true}' \
        "$URL/v1/messages" 2>/dev/null
    check "anthropic stream drop" test $? != 0
    eq "drops counted as failed" "$(counter flaky failed)" 3
    eq "drops are not client aborts" "$(counter flaky aborted)" 0
}

case_latency() {
    start '{"models":{"slow":{"latency_ms":400},"ttft":{"ttft_ms":300,"latency_ms":900,"chunks":4}}}'
    local t0 t1 dt
    t0=$(now_ms)
    eq "slow status" "$(post /v1/chat/completions '{"model":"slow"}')" 200
    t1=$(now_ms)
    dt=$((t1 - t0))
    check "latency honoured ($dt ms >= 400)" test "$dt" -ge 390
    check "latency not excessive ($dt ms < 3000)" test "$dt" -lt 3000

    # Stream: first data line after ttft, whole stream after latency.
    t0=$(now_ms)
    local first=0 line
    while IFS= read -r line; do
        if [ "$first" = 0 ] && [[ $line == data:* ]]; then
            first=$(($(now_ms) - t0))
        fi
    done < <(curl -sS -N -m 10 --data-binary '{"model":"ttft","stream":true}' "$URL/v1/chat/completions")
    dt=$(($(now_ms) - t0))
    check "ttft honoured ($first ms >= 300)" test "$first" -ge 290
    check "ttft not excessive ($first ms < 2000)" test "$first" -lt 2000
    check "stream spread over latency ($dt ms >= 900)" test "$dt" -ge 890

    # Delays do not hold worker threads: 40 concurrent 600 ms requests on 2 threads finish in
    # about 600 ms, not 40 * 600 / 2.
    control slow '{"latency_ms":600}'
    local -a args=()
    for _ in $(seq 1 40); do
        args+=(--next -sS -m 20 -o /dev/null -w '%{http_code}\n' --data-binary '{"model":"slow"}' "$URL/v1/chat/completions")
    done
    t0=$(now_ms)
    curl -Z --parallel-max 40 "${args[@]:1}" >"$WORK/codes"
    dt=$(($(now_ms) - t0))
    eq "40 concurrent delayed requests answered" "$(grep -c '^200$' "$WORK/codes")" 40
    check "delays overlap ($dt ms < 4000)" test "$dt" -lt 4000
    check "delays honoured under concurrency ($dt ms >= 600)" test "$dt" -ge 590
}

case_fail_rate() {
    export FAKE_LLM_SEED=42
    start '{"models":{"coin":{"fail_rate":0.3,"status":502}}}'
    local -a args=()
    for _ in $(seq 1 200); do
        args+=(--next -s -m 10 -o /dev/null -w '%{http_code}\n' --data-binary '{"model":"coin"}' "$URL/v1/chat/completions")
    done
    curl "${args[@]:1}" >"$WORK/run1"
    local failed ok
    failed=$(grep -c '^502$' "$WORK/run1")
    ok=$(grep -c '^200$' "$WORK/run1")
    eq "every answer is 200 or 502" "$((failed + ok))" 200
    check "fail rate ~0.3 ($failed/200 in 35..85)" test "$failed" -ge 35 -a "$failed" -le 85
    eq "stats failed" "$(counter coin failed)" "$failed"
    eq "stats ok" "$(counter coin ok)" "$ok"
    # Same seed, same sequence after a reset.
    curl -sS -m 10 -o /dev/null -X POST "$URL/_control/reset"
    curl "${args[@]:1}" >"$WORK/run2"
    check "the seed fixes the sequence" cmp -s "$WORK/run1" "$WORK/run2"
    # Another model's traffic does not change this model's sequence.
    curl -sS -m 10 -o /dev/null -X POST "$URL/_control/reset"
    control other '{"fail_rate":0.5}'
    args=()
    for _ in $(seq 1 50); do
        args+=(--next -s -m 10 -o /dev/null --data-binary '{"model":"other"}' "$URL/v1/chat/completions")
        args+=(--next -s -m 10 -o /dev/null -w '%{http_code}\n' --data-binary '{"model":"coin"}' "$URL/v1/chat/completions")
    done
    curl "${args[@]:1}" >"$WORK/run3"
    check "per-model sequences are independent" cmp -s <(head -n 50 "$WORK/run1") "$WORK/run3"
    # fail_rate 0 with a status means never fail; 1 means always.
    control coin '{"fail_rate":0}'
    eq "fail_rate 0" "$(post /v1/chat/completions '{"model":"coin"}')" 200
    control coin '{"fail_rate":1}'
    eq "fail_rate 1" "$(post /v1/chat/completions '{"model":"coin"}')" 502
}

case_stats() {
    start '{"models":{"good":{},"bad":{"status":500},"slowstream":{"ttft_ms":3000}}}'
    post /v1/chat/completions '{"model":"good"}' >/dev/null
    post /v1/embeddings '{"model":"good","input":"x"}' >/dev/null
    post /v1/messages '{"model":"good"}' >/dev/null
    stream /v1/chat/completions '{"model":"good","stream":true}' openai-chat
    stream /v1/messages '{"model":"good","stream":true}' anthropic
    post /v1/chat/completions '{"model":"bad"}' >/dev/null
    post /v1/chat/completions '{"model":"bad","stream":true}' >/dev/null
    post /v1/chat/completions '{"messages":[]}' >/dev/null # no model: totals only
    # A client that gives up mid-stream is counted as aborted once the fake notices.
    curl -sS -N -m 1 -o /dev/null --data-binary '{"model":"slowstream","stream":true}' \
        "$URL/v1/chat/completions" 2>/dev/null
    local aborted="" i
    for i in $(seq 1 50); do
        aborted=$(counter slowstream aborted)
        [ "$aborted" = 1 ] && break
        sleep 0.1
    done
    curl -sS -m 10 "$URL/_stats" >"$WORK/stats"
    check "good counters" jq -e '.models.good == {"requests":5,"ok":5,"failed":0,"streams":2,"aborted":0}' "$WORK/stats"
    check "bad counters" jq -e '.models.bad == {"requests":2,"ok":0,"failed":2,"streams":1,"aborted":0}' "$WORK/stats"
    check "aborted stream counters" jq -e '.models.slowstream == {"requests":1,"ok":1,"failed":0,"streams":1,"aborted":1}' "$WORK/stats"
    check "totals" jq -e '.total == {"requests":9,"ok":6,"failed":3,"streams":4,"aborted":1}' "$WORK/stats"
    curl -sS -m 10 -o /dev/null -X POST "$URL/_control/reset"
    check "reset zeroes counters" jq -e '.total == {"requests":0,"ok":0,"failed":0,"streams":0,"aborted":0}
        and .models.good.requests == 0' <(curl -sS -m 10 "$URL/_stats")
    check "reset keeps behaviour" test "$(post /v1/chat/completions '{"model":"bad"}')" = 500
}

case_requests() {
    start
    post /v1/chat/completions '{"model":"m1","messages":[{"role":"user","content":"first"}]}' >/dev/null
    post /v1/messages '{"model":"m2","messages":[{"role":"user","content":"caf\u00e9"}]}' >/dev/null
    post /v1/chat/completions '{"model":"m1","messages":[{"role":"user","content":"third"}]}' >/dev/null
    eq "_requests" "$(get '/_requests')" 200
    check "all three, oldest first" jq -e '[.requests[].model] == ["m1","m2","m1"]
        and .requests[0].path == "/v1/chat/completions" and .requests[1].path == "/v1/messages"
        and (.requests[0].body | fromjson | .messages[0].content) == "first"
        and all(.requests[]; (.ts_ms | type) == "number" and .truncated == false)' "$WORK/out"
    curl -sS -m 10 -o /dev/null -H 'Authorization: Bearer sk-upstream' \
        -H 'traceparent: 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01' \
        --data-binary '{"model":"hdr"}' "$URL/v1/chat/completions"
    get '/_requests?model=hdr' >/dev/null
    check "request headers recorded, names lower-cased" jq -e '.requests[0].headers.authorization == "Bearer sk-upstream"
        and .requests[0].headers.traceparent == "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
        and (.requests[0].headers | has("host"))' "$WORK/out"
    get '/_requests?model=m1&limit=1' >/dev/null
    check "model filter and limit keep the newest" jq -e '(.requests | length) == 1
        and (.requests[0].body | fromjson | .messages[0].content) == "third"' "$WORK/out"
    # Bodies are kept up to 64 KiB each.
    head -c 100000 /dev/zero | tr '\0' 'a' | jq -Rc '{model:"big",input:.}' >"$WORK/big.json"
    curl -sS -m 10 -o /dev/null --data-binary @"$WORK/big.json" "$URL/v1/embeddings"
    get '/_requests?model=big' >/dev/null
    local size
    size=$(wc -c <"$WORK/big.json" | tr -d ' ')
    check "big body truncated at 64 KiB" jq -e --argjson size "$size" '.requests[0].truncated == true
        and .requests[0].size == $size and (.requests[0].body | length) == 65536' "$WORK/out"
    # The ring keeps the last 256.
    local -a args=()
    for i in $(seq 1 300); do
        args+=(--next -s -m 10 -o /dev/null --data-binary "{\"model\":\"r\",\"n\":$i}" "$URL/v1/chat/completions")
    done
    curl "${args[@]:1}"
    get '/_requests?limit=1000' >/dev/null
    check "ring keeps 256, newest last" jq -e '(.requests | length) == 256 and .total == 305
        and .dropped == 49 and (.requests[-1].body | fromjson | .n) == 300
        and (.requests[0].body | fromjson | .n) == 45' "$WORK/out"
    curl -sS -m 10 -o /dev/null -X POST "$URL/_control/reset"
    get '/_requests' >/dev/null
    check "reset clears requests" jq -e '(.requests | length) == 0 and .total == 0' "$WORK/out"
}

case_slack() {
    start
    eq "slack ok" "$(post /slack/T000/B000/XXX '{"text":"hello"}')" 200
    eq "slack body" "$(cat "$WORK/out")" ok
    eq "_slack" "$(get /_slack)" 200
    check "message recorded" jq -e '.count == 1 and .messages[0].path == "/slack/T000/B000/XXX"
        and (.messages[0].body | fromjson | .text) == "hello" and (.messages[0].ts_ms | type) == "number"' "$WORK/out"
    curl -sS -m 10 -o /dev/null --data-binary '{"mode":"429","retry_after":5}' "$URL/_control/slack"
    eq "slack 429" "$(post /slack/x '{"text":"rejected"}')" 429
    eq "slack retry-after" "$(header retry-after)" 5
    curl -sS -m 10 -o /dev/null --data-binary '{"mode":"500"}' "$URL/_control/slack"
    eq "slack 500" "$(post /slack/x '{"text":"rejected too"}')" 500
    curl -sS -m 10 -o /dev/null --data-binary '{"mode":"429","retry_after":1,"times":2}' "$URL/_control/slack"
    eq "times: 1st rejected" "$(post /slack/x '{"text":"a"}')" 429
    eq "times: 2nd rejected" "$(post /slack/x '{"text":"b"}')" 429
    eq "times: then ok" "$(post /slack/x '{"text":"c"}')" 200
    get /_slack >/dev/null
    check "rejected messages are counted, not recorded" jq -e '.count == 2 and .rejected == 4
        and .received == 6 and ([.messages[].body | fromjson | .text] == ["hello","c"])' "$WORK/out"
    eq "bad control" "$(curl -sS -m 10 -o /dev/null -w '%{http_code}' --data-binary '{"mode":"302"}' "$URL/_control/slack")" 400
    # The record keeps the last 1024 messages.
    local -a args=()
    for i in $(seq 1 1100); do
        args+=(--next -s -m 10 -o /dev/null --data-binary "{\"text\":\"m$i\"}" "$URL/slack/bulk")
    done
    curl "${args[@]:1}"
    get /_slack >/dev/null
    check "slack ring keeps 1024" jq -e '(.messages | length) == 1024 and .count == 1102
        and (.messages[-1].body | fromjson | .text) == "m1100"' "$WORK/out"
    curl -sS -m 10 -o /dev/null -X POST "$URL/_slack/reset"
    get /_slack >/dev/null
    check "slack reset" jq -e '.count == 0 and (.messages | length) == 0 and .mode == "ok"' "$WORK/out"
}

case_body_cap() {
    start
    local cap=$((16 * 1024 * 1024))
    # Exactly at the cap: accepted.
    {
        printf '{"model":"cap","pad":"'
        head -c $((cap - 24)) /dev/zero | tr '\0' 'x'
        printf '"}'
    } >"$WORK/at_cap.json"
    eq "body at the cap is $cap bytes" "$(wc -c <"$WORK/at_cap.json" | tr -d ' ')" "$cap"
    eq "body at the cap accepted" "$(curl -sS -m 60 -o /dev/null -w '%{http_code}' --data-binary @"$WORK/at_cap.json" "$URL/v1/chat/completions")" 200
    # One byte more: 413, with Content-Length and with chunked upload.
    printf ' ' >>"$WORK/at_cap.json"
    eq "cap+1 with content-length" "$(curl -sS -m 60 -o "$WORK/out" -w '%{http_code}' --data-binary @"$WORK/at_cap.json" "$URL/v1/chat/completions")" 413
    check "413 has an OpenAI error body" jq -e '.error.message' "$WORK/out"
    eq "cap+1 chunked" "$(curl -sS -m 60 -o "$WORK/out" -w '%{http_code}' -H 'transfer-encoding: chunked' --data-binary @"$WORK/at_cap.json" "$URL/v1/chat/completions")" 413
    eq "cap+1 anthropic" "$(curl -sS -m 60 -o "$WORK/out" -w '%{http_code}' --data-binary @"$WORK/at_cap.json" "$URL/v1/messages")" 413
    check "413 has an Anthropic error body" jq -e '.type == "error" and .error.type == "request_too_large"' "$WORK/out"
    eq "still serving after 413s" "$(post /v1/chat/completions '{"model":"cap"}')" 200
    check "413s counted" jq -e '.body_too_large == 3' <(curl -sS -m 10 "$URL/_stats")
}

case_control() {
    start '{"default":{"completion_tokens":3},"models":{"cfg":{"latency_ms":50,"prompt_tokens":99}}}'
    post /v1/chat/completions '{"model":"cfg"}' >/dev/null
    check "config file applies" jq -e '.usage == {"prompt_tokens":99,"completion_tokens":3,"total_tokens":102,"prompt_tokens_details":{"cached_tokens":0,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0,"audio_tokens":0}}' "$WORK/out"
    control cfg '{"completion_tokens":4}'
    check "control answers the effective behaviour" jq -e '.model == "cfg" and .behaviour.latency_ms == 50
        and .behaviour.prompt_tokens == 99 and .behaviour.completion_tokens == 4' "$WORK/ctl"
    post /v1/chat/completions '{"model":"cfg"}' >/dev/null
    check "merge keeps earlier fields" jq -e '.usage.prompt_tokens == 99 and .usage.completion_tokens == 4' "$WORK/out"
    control cfg '{"prompt_tokens":null}'
    post /v1/chat/completions '{"model":"cfg"}' >/dev/null
    check "null returns to the default" jq -e '.usage.prompt_tokens == 12' "$WORK/out"
    curl -sS -m 10 -o /dev/null --data-binary '{"prompt_tokens":5}' "$URL/_control/default"
    post /v1/chat/completions '{"model":"cfg"}' >/dev/null
    check "default changes apply to inheriting fields" jq -e '.usage.prompt_tokens == 5' "$WORK/out"
    local code
    code=$(curl -sS -m 10 -o "$WORK/ctl" -w '%{http_code}' --data-binary '{"fail_rat":0.5}' "$URL/_control/models/cfg")
    eq "unknown field refused" "$code" 400
    check "reason names the field" grep -q fail_rat "$WORK/ctl"
    code=$(curl -sS -m 10 -o /dev/null -w '%{http_code}' --data-binary '{"fail_rate":2}' "$URL/_control/models/cfg")
    eq "out of range refused" "$code" 400
    code=$(curl -sS -m 10 -o /dev/null -w '%{http_code}' --data-binary '{"error":"boom"}' "$URL/_control/models/cfg")
    eq "unknown error mode refused" "$code" 400
    code=$(curl -sS -m 10 -o /dev/null -w '%{http_code}' --data-binary 'not json' "$URL/_control/models/cfg")
    eq "invalid JSON refused" "$code" 400
    check "a refused merge changes nothing" jq -e '.models.cfg.completion_tokens == 4 and .models.cfg.latency_ms == 50
        and .models.cfg.fail_rate == 0' <(curl -sS -m 10 "$URL/_control/models")
    curl -sS -m 10 -o /dev/null -X POST "$URL/_control/reset?config=1"
    post /v1/chat/completions '{"model":"cfg"}' >/dev/null
    check "reset?config=1 restores the file" jq -e '.usage == {"prompt_tokens":99,"completion_tokens":3,"total_tokens":102,"prompt_tokens_details":{"cached_tokens":0,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0,"audio_tokens":0}}' "$WORK/out"
    # The model table is bounded: 256 models, then 507 from the control endpoint.
    local -a args=()
    for i in $(seq 1 260); do
        args+=(--next -s -m 10 -o /dev/null -w '%{http_code}\n' --data-binary '{"chunks":2}' "$URL/_control/models/m$i")
    done
    curl "${args[@]:1}" >"$WORK/codes"
    eq "models accepted until full" "$(grep -c '^200$' "$WORK/codes")" 255
    eq "then 507" "$(grep -c '^507$' "$WORK/codes")" 5
    eq "requests for untracked models still served" "$(post /v1/chat/completions '{"model":"overflow"}')" 200
    check "untracked counted" jq -e '.untracked == 1 and .total.requests >= 1' <(curl -sS -m 10 "$URL/_stats")
}

# sse_check itself: valid streams pass, each kind of defect is refused with its reason.
case_sse_check() {
    local ok=$'data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n'
    rejects() { # rejects DIALECT REASON-REGEX INPUT
        local err
        if err=$(printf '%s' "$3" | "$SSE_CHECK" --dialect "$1" 2>&1 >/dev/null); then
            fail "sse_check accepted: $2"
        elif ! grep -qE "$2" <<<"$err"; then
            fail "sse_check reason '$err' does not match '$2'"
        fi
    }
    check "valid chat stream" "$SSE_CHECK" --dialect openai-chat <(printf '%s' "$ok")
    check "comments, id and retry are fine" "$SSE_CHECK" <(printf ': c\n\nid: 1\nretry: 5\ndata: a\ndata: b\n\n')
    rejects sse 'does not end with' $'data: x\n\ndata: y'
    rejects sse 'trailing partial event' $'data: x\n\ndata: y\n'
    rejects sse 'carriage return' $'data: x\r\n\r\n'
    rejects sse 'unknown field' $'foo: x\n\n'
    rejects sse 'retry' $'retry: 1s\ndata: x\n\n'
    rejects sse 'without a data field' $'event: a\n\n'
    rejects sse 'blank line without' $'data: x\n\n\n'
    rejects sse 'invalid UTF-8' $'data: \xff\n\n'
    rejects sse 'empty body' ''
    rejects openai-chat 'not JSON' $'data: {oops\n\ndata: [DONE]\n\n'
    rejects openai-chat 'DONE' "${ok%data: \[DONE\]*}"
    rejects openai-chat 'after \[DONE\]' "$ok$ok"
    rejects openai-chat 'no event: field' "event: x"$'\n'"$ok"
    rejects openai-chat 'usage .* != ' $'data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\ndata: {"id":"c1","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":4}}\n\ndata: [DONE]\n\n'
    rejects openai-chat 'id changed' $'data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"a"}}]}\n\ndata: {"id":"c2","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n'
    rejects anthropic 'not message_start' $'event: message_stop\ndata: {"type":"message_stop"}\n\n'
    rejects anthropic 'does not match' $'event: message_start\ndata: {"type":"ping"}\n\n'
    rejects anthropic 'message_stop before message_delta' $'event: message_start\ndata: {"type":"message_start","message":{"usage":{"input_tokens":1}}}\n\nevent: message_stop\ndata: {"type":"message_stop"}\n\n'
    rejects anthropic 'outside its block' $'event: message_start\ndata: {"type":"message_start","message":{"usage":{"input_tokens":1}}}\n\nevent: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"x"}}\n\n'
    rejects openai-responses 'not response.created' $'event: response.completed\ndata: {"type":"response.completed","response":{"status":"completed"}}\n\n'
    rejects openai-responses 'does not end with response.completed' $'event: response.created\ndata: {"type":"response.created"}\n\n'
    rejects openai-responses 'sequence_number' $'event: response.created\ndata: {"type":"response.created","sequence_number":0}\n\nevent: response.in_progress\ndata: {"type":"response.in_progress","sequence_number":2}\n\n'
}

# ----------------------------------------------------------------------------------- main

if ! declare -F "case_$CASE" >/dev/null; then
    echo "unknown case: $CASE" >&2
    exit 2
fi
"case_$CASE"
if [ "$FAILS" -gt 0 ]; then
    echo "[$CASE] $FAILS check(s) failed; fake-llm log:" >&2
    tail -n 20 "$WORK/state/fakellm/fake-llm.log" >&2 2>/dev/null
    exit 1
fi
echo "[$CASE] ok"
