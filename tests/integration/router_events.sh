#!/usr/bin/env bash
# router_events.sh — spend events from router-svc to Kafka, end to end (issue: spool and
# publisher). Starts its own devkafka and fake-llm (through tests/lib/services.sh) and
# router-svc from TG_BUILD_DIR:
#   1. 10,000 requests (every endpoint, half streaming) -> 10,000 distinct call ids on the
#      topic, each event <= 4 KiB and decodable (tests/tools/topic_ids);
#   2. SIGTERM -> exit 0 and no spool segment left behind;
#   3. SIGKILL under load, restart -> every call id that received a 200 is on the topic;
#   4. Kafka down, requests served, SIGKILL, a torn record appended to the spool, restart with
#      Kafka back -> every call id that received a 200 arrives (the torn tail is skipped).
set -euo pipefail
SRC="${TG_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}"
BIN="${TG_BUILD_DIR:?TG_BUILD_DIR unset}"
STATE="$(mktemp -d /tmp/tollgate-router-events.XXXXXX)"
unset TG_KAFKA_BROKERS TG_KAFKA_CTL
. "$SRC/tests/lib/services.sh"
tg_services_init "$STATE/services"
ROUTER_PID=""
LOAD_PID=""
cleanup() {
    local rc=$?
    for p in $LOAD_PID $ROUTER_PID; do kill -KILL "$p" 2>/dev/null || true; done
    tg_services_stop_all || true
    if [ "$rc" != 0 ]; then
        echo "--- router-svc log tail" >&2
        tail -n 20 "$STATE/router.log" >&2 || true
    fi
    [ -n "${TG_KEEP:-}" ] || rm -rf "$STATE"
    exit "$rc"
}
trap cleanup EXIT
fail() { echo "FAIL router_events: $*" >&2; exit 1; }

tg_devkafka_start 1 "tollgate.events.v1:6,tollgate.control.v1:1"
echo '{"default": {"prompt_tokens": 12, "completion_tokens": 8, "chunks": 3}}' >"$STATE/fake.json"
tg_fakellm_start "$STATE/fake.json"
PORT=$(tg_port_pick)
# Eight keys: events are keyed by key hash, and devkafka keeps only ~5 MiB per partition, so the
# 10,000 events must spread over the partitions.
EV_KEYS=""
for i in 1 2 3 4 5 6 7 8; do
    k="sk-events$i-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"
    export "EV_KEY$i=$k"
    EV_KEYS="$EV_KEYS${EV_KEYS:+,}$k"
done
cat >"$STATE/router.yaml" <<YAML
model_list:
  - model_name: gpt-main
    litellm_params: {model: openai/fake-main, api_base: $TG_FAKE_LLM_URL/v1, api_key: sk-provider,
                     input_cost_per_token: 0.0000005, output_cost_per_token: 0.0000015}
    model_info: {id: main-1}
tollgate:
  listen: 127.0.0.1:$PORT
  kafka: {brokers: "$TG_KAFKA_BROKERS", events_topic: tollgate.events.v1,
          control_topic: tollgate.control.v1}
  spool: {dir: $STATE/spool, max_bytes: 268435456}
  keys:
$(for i in 1 2 3 4 5 6 7 8; do echo "    - {key: os.environ/EV_KEY$i, key_alias: events$i}"; done)
YAML

start_router() {
    "$BIN/router-svc/router-svc" --config "$STATE/router.yaml" 2>>"$STATE/router.log" &
    ROUTER_PID=$!
    for _ in $(seq 1 300); do
        curl -fsS -o /dev/null "http://127.0.0.1:$PORT/health/readiness" 2>/dev/null && return 0
        kill -0 "$ROUTER_PID" 2>/dev/null || fail "router-svc exited at start"
        sleep 0.1
    done
    fail "router-svc not ready"
}
load() { # RATE DURATION OUT
    "$BIN/tests/chaos/loadgen" --url "http://127.0.0.1:$PORT" --key "$EV_KEYS" --model gpt-main \
        --rate "$1" --duration "$2" --stream-ratio 0.5 --out "$3" >"$3.json" 2>/dev/null
}
ok_ids() { awk -F'\t' 'NR > 1 && $7 == 1 && $8 != "-" { print $8 }' "$1" | sort -u; }
topic_ids() { "$BIN/tests/tools/topic_ids" "$TG_KAFKA_BROKERS" tollgate.events.v1 60000 | sort; }
# wait_on_topic IDS_FILE SECONDS: until every id in the file is on the topic.
wait_on_topic() {
    local missing=-1
    for _ in $(seq 1 "$2"); do
        topic_ids | sort -u >"$STATE/topic.ids"
        missing=$(comm -23 "$1" "$STATE/topic.ids" | wc -l)
        [ "$missing" = 0 ] && return 0
        sleep 1
    done
    echo "$missing call ids with a 200 are not on the topic" >&2
    return 1
}
segments() { find "$STATE/spool" -name 'seg-*.tgs' | wc -l; }

# 1. 10,000 requests, every one on the topic exactly as a distinct call id.
start_router
load 500 20 "$STATE/r1.tsv"
[ "$(jq .ok "$STATE/r1.tsv.json")" = 10000 ] || fail "load 1: $(cat "$STATE/r1.tsv.json")"
ok_ids "$STATE/r1.tsv" >"$STATE/ok1"
[ "$(wc -l <"$STATE/ok1")" = 10000 ] || fail "10,000 requests gave $(wc -l <"$STATE/ok1") call ids"

# 2. SIGTERM: exit 0, the producer flushed, nothing left in the spool.
kill -TERM "$ROUTER_PID"
wait "$ROUTER_PID" || fail "router-svc exited $? on SIGTERM"
ROUTER_PID=""
[ "$(segments)" = 0 ] || fail "$(segments) spool segments left behind after SIGTERM"
topic_ids >"$STATE/t1"
[ "$(wc -l <"$STATE/t1")" = 10000 ] || fail "topic holds $(wc -l <"$STATE/t1") events, want 10,000"
[ "$(sort -u "$STATE/t1" | wc -l)" = 10000 ] || fail "topic holds duplicate call ids"
[ "$(comm -3 "$STATE/ok1" <(sort -u "$STATE/t1") | wc -l)" = 0 ] || fail "topic ids differ from the 200s"
echo "ok 1 - 10,000 requests -> 10,000 distinct decodable call ids on the topic"
echo "ok 2 - SIGTERM: exit 0, spool empty"

# 3. SIGKILL under load, restart: every 200 is on the topic.
start_router
load 200 10 "$STATE/r3.tsv" &
LOAD_PID=$!
sleep 4
kill -KILL "$ROUTER_PID"
wait "$ROUTER_PID" 2>/dev/null || true
start_router
wait "$LOAD_PID" || true
LOAD_PID=""
ok_ids "$STATE/r3.tsv" >"$STATE/ok3"
[ "$(wc -l <"$STATE/ok3")" -gt 1000 ] || fail "too few 200s around the kill: $(cat "$STATE/r3.tsv.json")"
wait_on_topic "$STATE/ok3" 60 || fail "after SIGKILL + restart"
echo "ok 3 - SIGKILL under load: all $(wc -l <"$STATE/ok3") call ids with a 200 are on the topic"

# 4. Kafka down: served, spooled; SIGKILL; torn record appended; restart with Kafka back.
tg_kafka_down
load 50 4 "$STATE/r4.tsv"
[ "$(jq .ok "$STATE/r4.tsv.json")" = 200 ] || fail "requests failed while Kafka was down: $(cat "$STATE/r4.tsv.json")"
kill -KILL "$ROUTER_PID"
wait "$ROUTER_PID" 2>/dev/null || true
ROUTER_PID=""
last=$(find "$STATE/spool" -name 'seg-*.tgs' | sort | tail -n 1)
[ -n "$last" ] || fail "no spool segment while Kafka was down"
printf 'TGL1\x40\x00\x00\x00torn' >>"$last"
tg_kafka_up
start_router
ok_ids "$STATE/r4.tsv" >"$STATE/ok4"
wait_on_topic "$STATE/ok4" 60 || fail "after Kafka down + SIGKILL + torn tail"
# (the exposition is read whole first: with pipefail, grep -q leaving early fails curl's write)
curl -fsS -o "$STATE/metrics4.txt" "http://127.0.0.1:$PORT/metrics" || fail "metrics"
grep -q '^tollgate_router_spool_corrupt_records_total [1-9]' "$STATE/metrics4.txt" ||
    fail "the torn record was not counted"
echo "ok 4 - Kafka down, SIGKILL, torn tail: all 200 call ids arrive, the torn record is counted"
echo "4 passed, 0 failed"
