#!/usr/bin/env bash
# router_teams_restart.sh — LiteLLM teams on the control topic (issue 22, item 2). Own devkafka
# and fake-llm (tests/lib/services.sh), router-svc from TG_BUILD_DIR:
#   1. /team/new, then a key in the team: the team's models (also in /v1/models) and rpm_limit
#      limit the key (429 naming the team), shared by a second key of the team;
#   2. restart with Kafka up: the team is replayed from the topic (/team/info, and its rpm_limit
#      limits the key again), and a second replica knows it too;
#   3. /team/block on one replica refuses the team's keys on the other (401 team_blocked);
#      /team/unblock lifts it; /team/delete deletes the team's keys on every replica (as
#      LiteLLM's does), and a key naming the team afterwards has only its own limits;
#   4. Kafka down, restart from the local snapshots (keys.snapshot, teams.snapshot): a blocked
#      team's key is still refused (401 team_blocked), a team's rpm_limit and models still hold,
#      and a team deleted before the restart does not come back.
set -euo pipefail
SRC="${TG_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}"
BIN="${TG_BUILD_DIR:?TG_BUILD_DIR unset}"
STATE="$(mktemp -d /tmp/tollgate-router-teams.XXXXXX)"
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
fail() { echo "FAIL router_teams_restart: $*" >&2; exit 1; }

tg_devkafka_start 1 "tollgate.events.v1:2,tollgate.control.v1:1"
echo '{"default": {"prompt_tokens": 5, "completion_tokens": 3}}' >"$STATE/fake.json"
tg_fakellm_start "$STATE/fake.json"
export KT_MASTER="sk-master-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"

config() { # NAME PORT
    cat >"$STATE/$1.yaml" <<YAML
model_list:
  - model_name: gpt-main
    litellm_params: {model: openai/fake-main, api_base: $TG_FAKE_LLM_URL/v1, api_key: sk-provider}
  - model_name: gpt-other
    litellm_params: {model: openai/fake-other, api_base: $TG_FAKE_LLM_URL/v1, api_key: sk-provider}
general_settings: {master_key: os.environ/KT_MASTER}
tollgate:
  listen: 127.0.0.1:$2
  kafka: {brokers: "$TG_KAFKA_BROKERS", events_topic: tollgate.events.v1,
          control_topic: tollgate.control.v1}
  spool: {dir: $STATE/spool-$1, max_bytes: 67108864}
YAML
}
start() { # NAME PORT
    "$BIN/router-svc/router-svc" --config "$STATE/$1.yaml" 2>>"$STATE/router-$1.log" &
    eval "PID_$1=$!"
    PIDS="$PIDS $!"
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
chat() { # PORT KEY [MODEL] -> HTTP status; the body in $STATE/chat.out
    curl -sS -o "$STATE/chat.out" -w '%{http_code}' -H "Authorization: Bearer $2" \
        -H 'Content-Type: application/json' \
        -d "{\"model\":\"${3:-gpt-main}\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}" \
        "http://127.0.0.1:$1/v1/chat/completions"
}
admin() { # PORT PATH BODY -> body, status in $STATE/status
    curl -sS -o "$STATE/admin.out" -w '%{http_code}' -H "Authorization: Bearer $KT_MASTER" \
        -H 'Content-Type: application/json' -d "$3" "http://127.0.0.1:$1$2" >"$STATE/status"
    cat "$STATE/admin.out"
}
get() { # PORT PATH?QUERY -> body
    curl -sS -H "Authorization: Bearer $KT_MASTER" "http://127.0.0.1:$1$2"
}
eventually() { # PORT KEY STATUS [TEXT]: the chat status becomes STATUS (with TEXT in the
    # answer, when given) within 5 s
    for _ in $(seq 1 50); do
        [ "$(chat "$1" "$2")" = "$3" ] && grep -q -- "${4:-}" "$STATE/chat.out" && return 0
        sleep 0.1
    done
    return 1
}

A=$(tg_port_pick)
B=$(tg_port_pick)
config a "$A"
config b "$B"
start a "$A"

# 1. A team, two keys in it: the team's models and rpm_limit limit both keys together.
admin "$A" /team/new '{"team_id":"team-int","team_alias":"integration","models":["gpt-main"],
    "rpm_limit":3,"max_budget":10,"budget_duration":"30d"}' >/dev/null
[ "$(cat "$STATE/status")" = 200 ] || fail "team/new: $(cat "$STATE/admin.out")"
jq -e '.team_id == "team-int" and .rpm_limit == 3 and (.budget_reset_at | type) == "string"' \
    "$STATE/admin.out" >/dev/null || fail "team/new answer: $(cat "$STATE/admin.out")"
admin "$A" /team/new '{"team_id":"team-int"}' >/dev/null
[ "$(cat "$STATE/status")" = 409 ] || fail "a second team/new with the same id: $(cat "$STATE/status")"
admin "$A" /team/new '{"team_alias":"x","rpm":5}' >/dev/null
[ "$(cat "$STATE/status")" = 400 ] && jq -e '.error.param == "rpm"' "$STATE/admin.out" >/dev/null ||
    fail "an unknown team field: $(cat "$STATE/status") $(cat "$STATE/admin.out")"
K1=$(admin "$A" /key/generate '{"key_alias":"team-key-1","team_id":"team-int"}' | jq -r .key)
[ "$(cat "$STATE/status")" = 200 ] || fail "generate: $(cat "$STATE/admin.out")"
K2=$(admin "$A" /key/generate '{"key_alias":"team-key-2","team_id":"team-int"}' | jq -r .key)
[ "$(cat "$STATE/status")" = 200 ] || fail "generate: $(cat "$STATE/admin.out")"
[ "$(chat "$A" "$K1" gpt-other)" = 401 ] || fail "a model the team does not allow was served"
curl -sS -H "Authorization: Bearer $K1" "http://127.0.0.1:$A/v1/models" >"$STATE/models.out"
[ "$(jq -c '[.data[].id]' "$STATE/models.out")" = '["gpt-main"]' ] ||
    fail "/v1/models lists what the key's team does not allow: $(cat "$STATE/models.out")"
[ "$(chat "$A" "$K1")" = 200 ] || fail "key 1 in the team: $(cat "$STATE/chat.out")"
[ "$(chat "$A" "$K2")" = 200 ] || fail "key 2 in the team: $(cat "$STATE/chat.out")"
[ "$(chat "$A" "$K1")" = 200 ] || fail "key 1, third request: $(cat "$STATE/chat.out")"
[ "$(chat "$A" "$K2")" = 429 ] || fail "the team's rpm_limit (3) did not limit its keys"
grep -q 'team_id=team-int' "$STATE/chat.out" || fail "the 429 does not name the team: $(cat "$STATE/chat.out")"
echo "ok 1 - a team's models and rpm_limit limit every key of the team"

# 2. Restart: the team comes back from the control topic; another replica knows it.
stop a
start a "$A"
get "$A" "/team/info?team_id=team-int" >"$STATE/info.out"
jq -e '.team_info.rpm_limit == 3 and (.keys | length) == 2' "$STATE/info.out" >/dev/null ||
    fail "team/info after a restart: $(cat "$STATE/info.out")"
for i in 1 2 3; do
    [ "$(chat "$A" "$K1")" = 200 ] || fail "after the restart, request $i: $(cat "$STATE/chat.out")"
done
[ "$(chat "$A" "$K2")" = 429 ] || fail "after a restart the team's rpm_limit is not enforced (not replayed)"
start b "$B"
get "$B" /team/list >"$STATE/list.out"
jq -e 'length == 1 and .[0].team_id == "team-int"' "$STATE/list.out" >/dev/null ||
    fail "team/list on another replica: $(cat "$STATE/list.out")"
echo "ok 2 - the team is replayed after a restart and reaches another replica"

# 3. /team/block on one replica: the team's keys are refused on the other.
admin "$A" /team/block '{"team_id":"team-int"}' >/dev/null
[ "$(cat "$STATE/status")" = 200 ] || fail "team/block: $(cat "$STATE/admin.out")"
eventually "$B" "$K1" 401 || fail "another replica serves a blocked team's key"
grep -q 'team_blocked\|Team is blocked' "$STATE/chat.out" || fail "401 without the team's block: $(cat "$STATE/chat.out")"
admin "$B" /team/unblock '{"team_id":"team-int"}' >/dev/null
[ "$(cat "$STATE/status")" = 200 ] || fail "team/unblock: $(cat "$STATE/admin.out")"
eventually "$A" "$K1" 429 || fail "an unblocked team's key: $(cat "$STATE/chat.out")"
# /team/delete deletes the team's keys too (as LiteLLM's does), on every replica
admin "$B" /team/delete '{"team_ids":["team-int"]}' >/dev/null
[ "$(cat "$STATE/status")" = 200 ] || fail "team/delete: $(cat "$STATE/admin.out")"
for k in "$K1" "$K2"; do
    jq -e --arg h "$(printf %s "$k" | sha256sum | cut -c1-64)" '.deleted_keys | index($h) != null' \
        "$STATE/admin.out" >/dev/null || fail "team/delete does not list a key of the team: $(cat "$STATE/admin.out")"
    eventually "$A" "$k" 401 || fail "a deleted team's key still works on the other replica"
    [ "$(chat "$B" "$k")" = 401 ] || fail "a deleted team's key still works where it was deleted"
done
for _ in $(seq 1 50); do
    [ "$(curl -sS -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $KT_MASTER" \
        "http://127.0.0.1:$A/team/info?team_id=team-int")" = 404 ] && break
    sleep 0.1
done
# a key naming the team after its deletion has only its own limits: the team's are gone
K5=$(admin "$A" /key/generate '{"key_alias":"after-delete","team_id":"team-int"}' | jq -r .key)
[ "$(cat "$STATE/status")" = 200 ] || fail "generate after delete: $(cat "$STATE/admin.out")"
eventually "$A" "$K5" 200 || fail "a key made after the team's deletion: $(cat "$STATE/chat.out")"
for i in 1 2 3; do
    [ "$(chat "$A" "$K5")" = 200 ] || fail "a deleted team still limits keys (request $i): $(cat "$STATE/chat.out")"
done
[ "$(chat "$A" "$K5" gpt-other)" = 200 ] || fail "a deleted team's models still apply"
echo "ok 3 - /team/block, /team/unblock and /team/delete (with the team's keys) reach every replica"

# 4. Kafka down: a restarted router has its teams from the snapshot.
admin "$A" /team/new '{"team_id":"team-down","models":["gpt-main"],"rpm_limit":2}' >/dev/null
[ "$(cat "$STATE/status")" = 200 ] || fail "team/new team-down: $(cat "$STATE/admin.out")"
admin "$A" /team/new '{"team_id":"team-blk"}' >/dev/null
[ "$(cat "$STATE/status")" = 200 ] || fail "team/new team-blk: $(cat "$STATE/admin.out")"
K3=$(admin "$A" /key/generate '{"key_alias":"down-key","team_id":"team-down"}' | jq -r .key)
[ "$(cat "$STATE/status")" = 200 ] || fail "generate: $(cat "$STATE/admin.out")"
K4=$(admin "$A" /key/generate '{"key_alias":"blk-key","team_id":"team-blk"}' | jq -r .key)
[ "$(cat "$STATE/status")" = 200 ] || fail "generate: $(cat "$STATE/admin.out")"
admin "$A" /team/block '{"team_id":"team-blk"}' >/dev/null
[ "$(cat "$STATE/status")" = 200 ] || fail "team/block team-blk: $(cat "$STATE/admin.out")"
# the block itself, not a key A has not taken yet (also a 401): the snapshot holds what A holds
eventually "$A" "$K4" 401 team_blocked ||
    fail "a blocked team's key is served before the restart: $(cat "$STATE/chat.out")"
tg_kafka_down
stop a
[ -s "$STATE/spool-a/teams.snapshot" ] || fail "no teams snapshot in the spool directory"
head -n 1 "$STATE/spool-a/teams.snapshot" | grep -q '^tollgate-teams-snapshot v1 ' ||
    fail "teams snapshot header: $(head -c 80 "$STATE/spool-a/teams.snapshot")"
grep -q '"team_id":"team-int"' "$STATE/spool-a/teams.snapshot" &&
    fail "a deleted team is in the teams snapshot"
start a "$A"
[ "$(chat "$A" "$K4")" = 401 ] || fail "with Kafka down a blocked team's key was served: $(cat "$STATE/chat.out")"
grep -q 'team_blocked' "$STATE/chat.out" || fail "401 without team_blocked: $(cat "$STATE/chat.out")"
[ "$(chat "$A" "$K3" gpt-other)" = 401 ] || fail "with Kafka down a team's models do not apply"
[ "$(chat "$A" "$K3")" = 200 ] || fail "with Kafka down, team-down request 1: $(cat "$STATE/chat.out")"
[ "$(chat "$A" "$K3")" = 200 ] || fail "with Kafka down, team-down request 2: $(cat "$STATE/chat.out")"
[ "$(chat "$A" "$K3")" = 429 ] || fail "with Kafka down the team's rpm_limit (2) is not enforced"
grep -q 'team_id=team-down' "$STATE/chat.out" || fail "the 429 does not name the team: $(cat "$STATE/chat.out")"
for i in 1 2 3 4; do
    [ "$(chat "$A" "$K5")" = 200 ] || fail "with Kafka down a deleted team came back (request $i): $(cat "$STATE/chat.out")"
done
curl -fsS "http://127.0.0.1:$A/metrics" >"$STATE/metrics.out"
grep -q '^tollgate_router_control_snapshot_teams 2$' "$STATE/metrics.out" ||
    fail "snapshot teams metric: $(grep snapshot_teams "$STATE/metrics.out")"
tg_kafka_up
echo "ok 4 - Kafka down: a restarted router enforces its teams from the snapshot"
echo "4 passed, 0 failed"
