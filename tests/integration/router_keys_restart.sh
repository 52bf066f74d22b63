#!/usr/bin/env bash
# router_keys_restart.sh — virtual keys survive router restarts (issue: keys on the control
# topic). Own devkafka and fake-llm (tests/lib/services.sh), router-svc from TG_BUILD_DIR:
#   1. a key generated through /key/generate works; restart with Kafka up: it still works, and a
#      second router started afterwards (another replica) knows it from the topic;
#   2. Kafka down, restart: the key authenticates from the local snapshot, /key/generate answers
#      503 with a clear message; a deleted key stays deleted across a restart.
set -euo pipefail
SRC="${TG_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}"
BIN="${TG_BUILD_DIR:?TG_BUILD_DIR unset}"
STATE="$(mktemp -d /tmp/tollgate-router-keys.XXXXXX)"
unset TG_KAFKA_BROKERS TG_KAFKA_CTL
. "$SRC/tests/lib/services.sh"
tg_services_init "$STATE/services"
PIDS=""
cleanup() {
    local rc=$?
    for p in $PIDS; do kill -KILL "$p" 2>/dev/null || true; done
    tg_services_stop_all || true
    if [ "$rc" != 0 ]; then
        echo "--- router-svc log tail" >&2
        tail -n 20 "$STATE"/router*.log >&2 || true
    fi
    [ -n "${TG_KEEP:-}" ] || rm -rf "$STATE"
    exit "$rc"
}
trap cleanup EXIT
fail() { echo "FAIL router_keys_restart: $*" >&2; exit 1; }

tg_devkafka_start 1 "tollgate.events.v1:2,tollgate.control.v1:1"
echo '{"default": {"prompt_tokens": 5, "completion_tokens": 3}}' >"$STATE/fake.json"
tg_fakellm_start "$STATE/fake.json"
export KR_MASTER="sk-master-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"

config() { # NAME PORT
    cat >"$STATE/$1.yaml" <<YAML
model_list:
  - model_name: gpt-main
    litellm_params: {model: openai/fake-main, api_base: $TG_FAKE_LLM_URL/v1, api_key: sk-provider}
general_settings: {master_key: os.environ/KR_MASTER}
tollgate:
  listen: 127.0.0.1:$2
  kafka: {brokers: "$TG_KAFKA_BROKERS", events_topic: tollgate.events.v1,
          control_topic: tollgate.control.v1}
  spool: {dir: $STATE/spool-$1, max_bytes: 67108864}
YAML
}
start() { # NAME PORT [readiness required: 1|0]
    "$BIN/router-svc/router-svc" --config "$STATE/$1.yaml" 2>>"$STATE/router-$1.log" &
    eval "PID_$1=$!"
    PIDS="$PIDS $!"
    for _ in $(seq 1 300); do
        curl -fsS -o /dev/null "http://127.0.0.1:$2/health/liveness" 2>/dev/null && break
        sleep 0.1
    done
    for _ in $(seq 1 300); do
        curl -fsS -o /dev/null "http://127.0.0.1:$2/health/readiness" 2>/dev/null && return 0
        sleep 0.1
    done
    fail "router $1 not ready: $(curl -sS "http://127.0.0.1:$2/health/readiness")"
}
stop() { # NAME
    local pid
    eval "pid=\$PID_$1"
    kill -TERM "$pid"
    wait "$pid" || fail "router $1 exited $? on SIGTERM"
}
chat() { # PORT KEY -> HTTP status
    curl -sS -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $2" \
        -H 'Content-Type: application/json' \
        -d '{"model":"gpt-main","messages":[{"role":"user","content":"hi"}]}' \
        "http://127.0.0.1:$1/v1/chat/completions"
}
admin() { # PORT PATH BODY -> body, status in $STATE/status
    curl -sS -o "$STATE/admin.out" -w '%{http_code}' -H "Authorization: Bearer $KR_MASTER" \
        -H 'Content-Type: application/json' -d "$3" "http://127.0.0.1:$1$2" >"$STATE/status"
    cat "$STATE/admin.out"
}

A=$(tg_port_pick)
B=$(tg_port_pick)
config a "$A"
config b "$B"
start a "$A"
KEY=$(admin "$A" /key/generate '{"key_alias":"restart","models":["gpt-main"]}' | jq -r .key)
[ "$(cat "$STATE/status")" = 200 ] || fail "generate: $(cat "$STATE/admin.out")"
GONE=$(admin "$A" /key/generate '{"key_alias":"deleted"}' | jq -r .key)
admin "$A" /key/delete "{\"keys\":[\"$GONE\"]}" >/dev/null
[ "$(cat "$STATE/status")" = 200 ] || fail "delete: $(cat "$STATE/admin.out")"
[ "$(chat "$A" "$KEY")" = 200 ] || fail "a new key does not work"
[ "$(chat "$A" "$GONE")" = 401 ] || fail "a deleted key still works"

# 1. Restart with Kafka up; a second replica learns the key from the topic.
stop a
start a "$A"
[ "$(chat "$A" "$KEY")" = 200 ] || fail "the key did not survive a restart"
start b "$B"
[ "$(chat "$B" "$KEY")" = 200 ] || fail "another replica does not know the key"
[ "$(chat "$B" "$GONE")" = 401 ] || fail "another replica accepts a deleted key"
echo "ok 1 - keys survive a restart and reach another replica through the control topic"

# 1b. /key/block on one replica refuses the key on every replica (the record travels on the
# control topic); /key/unblock lets it in again; /key/list shows it on the other replica.
# eventually PORT KEY STATUS: the chat status becomes STATUS within 5 s
eventually() {
    for _ in $(seq 1 50); do
        [ "$(chat "$1" "$2")" = "$3" ] && return 0
        sleep 0.1
    done
    return 1
}
admin "$A" /key/block "{\"key\":\"$KEY\"}" >/dev/null
[ "$(cat "$STATE/status")" = 200 ] || fail "block: $(cat "$STATE/admin.out")"
[ "$(chat "$A" "$KEY")" = 401 ] || fail "a blocked key still works on the replica that blocked it"
eventually "$B" "$KEY" 401 || fail "another replica still accepts a blocked key"
HASH=$(printf %s "$KEY" | sha256sum | cut -c1-64)
curl -sS -H "Authorization: Bearer $KR_MASTER" \
    "http://127.0.0.1:$B/key/list?key_alias=restart&return_full_object=true" >"$STATE/list.out"
[ "$(jq -c '[.total_count, .keys[0].key_hash, .keys[0].admin_blocked]' "$STATE/list.out")" = \
    "[1,\"$HASH\",true]" ] || fail "/key/list on the other replica: $(cat "$STATE/list.out")"
admin "$B" /key/unblock "{\"key\":\"$HASH\"}" >/dev/null
[ "$(cat "$STATE/status")" = 200 ] || fail "unblock: $(cat "$STATE/admin.out")"
eventually "$A" "$KEY" 200 || fail "an unblocked key is still refused on the first replica"
echo "ok 1b - /key/block and /key/unblock reach every replica; /key/list lists the key"

# 1c. /key/regenerate on one replica: the new key works everywhere, the old one is refused
# everywhere.
ROT=$(admin "$A" /key/generate '{"key_alias":"rotate","models":["gpt-main"]}' | jq -r .key)
[ "$(cat "$STATE/status")" = 200 ] || fail "generate (rotate): $(cat "$STATE/admin.out")"
eventually "$B" "$ROT" 200 || fail "the key to rotate does not reach the other replica"
NEW=$(admin "$A" /key/regenerate "{\"key\":\"$ROT\"}" | jq -r .key)
[ "$(cat "$STATE/status")" = 200 ] || fail "regenerate: $(cat "$STATE/admin.out")"
[ "$NEW" != "$ROT" ] && [ -n "$NEW" ] || fail "regenerate returned no new key"
[ "$(chat "$A" "$ROT")" = 401 ] || fail "the old key still works on the replica that rotated it"
[ "$(chat "$A" "$NEW")" = 200 ] || fail "the new key does not work on the replica that made it"
eventually "$B" "$ROT" 401 || fail "another replica still accepts the old key"
eventually "$B" "$NEW" 200 || fail "another replica does not know the new key"
echo "ok 1c - /key/regenerate: the new key everywhere, the old one refused everywhere"

# 2. Kafka down: restart from the snapshot; creation answers 503.
tg_kafka_down
stop a
start a "$A"
[ "$(chat "$A" "$KEY")" = 200 ] || fail "with Kafka down the key does not authenticate from the snapshot"
[ "$(chat "$A" "$GONE")" = 401 ] || fail "with Kafka down a deleted key came back"
body=$(admin "$A" /key/generate '{"key_alias":"while-down"}')
[ "$(cat "$STATE/status")" = 503 ] || fail "generate with Kafka down: $(cat "$STATE/status") $body"
echo "$body" | jq -e '.error.message | test("unavailable|retry"; "i")' >/dev/null ||
    fail "503 without a clear message: $body"
tg_kafka_up
echo "ok 2 - Kafka down: keys from the snapshot authenticate; generate answers 503 ($(echo "$body" | jq -r .error.message))"
echo "4 passed, 0 failed"
