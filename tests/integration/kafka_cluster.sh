#!/usr/bin/env bash
# kafka_cluster.sh — the spend pipeline on real Apache Kafka: a 3-node KRaft cluster (every node
# broker and controller, tests/lib/services.sh), tollgate.events.v1 with replication 3 and
# min.insync.replicas 2, router-svc and spend-svc (tests/lib/stack.sh) with their own Redis and
# PostgreSQL:
#   1. the cluster: 3 brokers live, every partition of both topics fully in sync;
#   2. 1,500 requests (half streaming, four keys): every one answered 200, and every call id
#      has exactly one spend_logs row, counted once in spend_daily; Redis equals PostgreSQL;
#   3. SIGKILL of the node leading partition 0 of tollgate.events.v1 under load; once another
#      node leads it, the killed node is restarted on its own ports and data and catches up:
#      no failed request, and again exactly one row per call id that got a 200, none missing,
#      none twice.
# Prints the cluster's start time and the RSS of its JVMs.
set -euo pipefail
SRC="${TG_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}"
export TG_BUILD_DIR="${TG_BUILD_DIR:?TG_BUILD_DIR unset}"
BIN="$TG_BUILD_DIR"
for b in router-svc/router-svc spend-svc/spend-svc tests/fakes/fake-llm tests/chaos/loadgen \
    tests/tools/kafka_admin; do
    [ -x "$BIN/$b" ] || { echo "kafka_cluster: $BIN/$b is not built" >&2; exit 1; }
done
STATE="$(mktemp -d /tmp/tollgate-kafka-cluster.XXXXXX)"
# Own services: this test kills a broker.
unset TG_REDIS_URL TG_REDIS_PORT TG_REDIS_HOST TG_PG_DSN TG_PG_PORT TG_KAFKA_BROKERS TG_KAFKA_CTL
unset TG_KAFKA
. "$SRC/tests/lib/services.sh"
. "$SRC/tests/lib/stack.sh"
tg_services_init "$STATE/services"
LOAD_PID=""
cleanup() {
    local rc=$?
    [ -z "$LOAD_PID" ] || kill -KILL "$LOAD_PID" 2>/dev/null || true
    tg_stack_stop || true
    tg_services_stop_all || true
    if [ "$rc" != 0 ]; then
        echo "--- router-svc log tail" >&2
        tail -n 20 "$STATE/stack/router.log" >&2 || true
        echo "--- spend-svc log tail" >&2
        tail -n 20 "$STATE/stack/spend.log" >&2 || true
    fi
    [ -n "${TG_KEEP:-}" ] || rm -rf "$STATE"
    exit "$rc"
}
trap cleanup EXIT
PASSES=0
fail() { echo "FAIL kafka_cluster: $*" >&2; exit 1; }
ok() { PASSES=$((PASSES + 1)); echo "ok $PASSES - $*"; }

tg_redis_start
tg_pg_start
t0=$(_tg_now_ms)
tg_kafka_start 3 "tollgate.events.v1:6,tollgate.control.v1:1"
START_MS=$(($(_tg_now_ms) - t0))
[ "$TG_KAFKA_KIND" = apache ] || fail "tg_kafka_start did not start Apache Kafka"
rss_mb() {
    local i kb total=0
    for i in 1 2 3; do
        kb=$(awk '/^VmRSS:/ { print $2 }' "/proc/$(tg_kafka_node_pid "$i")/status")
        total=$((total + kb))
    done
    echo $((total / 1024))
}
echo "kafka_cluster: 3 nodes with topics ready in $START_MS ms, RSS of the JVMs $(rss_mb) MiB"

# 1. The cluster as the services will see it.
"$BIN/tests/tools/kafka_admin" "$TG_KAFKA_BROKERS" ready 3 10000 || fail "3 brokers not live"
for topic in tollgate.events.v1 tollgate.control.v1; do
    # create on an existing topic: waits until every partition has 3 in-sync replicas
    "$BIN/tests/tools/kafka_admin" "$TG_KAFKA_BROKERS" create "$topic" 1 3 -- 10000 ||
        fail "$topic not fully replicated"
done
ok "3 brokers live, both topics with 3 in-sync replicas on every partition"

tg_stack_init "$STATE/stack"
tg_stack_start || fail "stack did not start"

psql_q() { psql "$TG_PG_DSN" -X -q -t -A -v ON_ERROR_STOP=1 "$@"; }
ok_ids() { awk -F'\t' 'NR > 1 && $7 == 1 && $8 != "-" { print $8 }' "$1" | sort -u; }
load() { # RATE DURATION OUT
    "$BIN/tests/chaos/loadgen" --url "$TG_ROUTER_URL" --key "$TG_STACK_LOAD_KEYS" \
        --model gpt-main --rate "$1" --duration "$2" --stream-ratio 0.5 --out "$3" \
        >"$3.json" 2>"$3.err"
}
# check_rows IDS_FILE: every id has exactly one spend_logs row (waits up to 90 s for the last
# ones), no call id twice, spend_daily counts every row once, spend_logs holds nothing else.
check_rows() {
    local ids=$1 missing=-1 dups extra agg
    psql_q -c "CREATE TABLE IF NOT EXISTS kc_ok(call_id uuid primary key)" -c "TRUNCATE kc_ok"
    psql_q -c "\\copy kc_ok FROM '$ids'"
    for _ in $(seq 1 90); do
        missing=$(psql_q -c "SELECT count(*) FROM kc_ok o WHERE NOT EXISTS
                             (SELECT 1 FROM spend_logs s WHERE s.call_id = o.call_id)")
        [ "$missing" = 0 ] && break
        sleep 1
    done
    dups=$(psql_q -c "SELECT count(*) FROM (SELECT call_id FROM spend_logs GROUP BY call_id
                      HAVING count(*) > 1) d")
    extra=$(psql_q -c "SELECT count(*) FROM spend_logs s WHERE NOT EXISTS
                       (SELECT 1 FROM kc_ok o WHERE o.call_id = s.call_id)")
    agg=$(psql_q -c "SELECT (SELECT coalesce(sum(requests),0) FROM spend_daily) -
                            (SELECT count(*) FROM spend_logs)")
    [ "$missing" = 0 ] || {
        echo "$missing call ids with a 200 have no spend_logs row" >&2
        pipeline_state >&2
        return 1
    }
    [ "$dups" = 0 ] || { echo "$dups call ids have more than one spend_logs row" >&2; return 1; }
    [ "$extra" = 0 ] || { echo "$extra spend_logs rows for call ids that got no 200" >&2; return 1; }
    [ "$agg" = 0 ] || { echo "spend_daily counts $agg requests more than spend_logs" >&2; return 1; }
}
# pipeline_state: where events stop, for a failure's report: the router's publisher counters,
# each partition's end offset in Kafka against spend-svc's next offset in PostgreSQL, and
# spend-svc's consumer metrics.
pipeline_state() {
    echo "--- router-svc publisher"
    curl -s --max-time 5 "$TG_ROUTER_URL/metrics" |
        grep -E '^tollgate_router_(events|spool|producer|kafka|delivery)' || true
    echo "--- tollgate.events.v1: partition, low, high (Kafka); next offset (PostgreSQL)"
    "$BIN/tests/tools/kafka_admin" "$TG_KAFKA_BROKERS" ends tollgate.events.v1 6 10000 || true
    psql_q -c "SELECT partition, next_offset, updated_at FROM consumer_offsets
               WHERE topic = 'tollgate.events.v1' ORDER BY partition" || true
    echo "--- spend-svc consumer"
    curl -s --max-time 5 "$TG_SPEND_URL/metrics" | grep -E '^tollgate_spend_(consumer|kafka|events|messages|partition|rebalances|rows|batches|commit|dead|duplicates|postgres)' ||
        true
}
redis_matches() {
    for _ in $(seq 1 30); do
        bash "$SRC/tests/chaos/redis_vs_pg.sh" >"$STATE/redis_vs_pg.out" 2>&1 && return 0
        sleep 1
    done
    cat "$STATE/redis_vs_pg.out" >&2
    return 1
}

# 2. Plain delivery through the replicated topic.
load 100 15 "$STATE/r2.tsv" || fail "load driver: $(cat "$STATE/r2.tsv.err")"
[ "$(jq .ok "$STATE/r2.tsv.json")" = 1500 ] || fail "load 2: $(cat "$STATE/r2.tsv.json")"
ok_ids "$STATE/r2.tsv" >"$STATE/ok2"
[ "$(wc -l <"$STATE/ok2")" = 1500 ] || fail "1,500 requests gave $(wc -l <"$STATE/ok2") call ids"
check_rows "$STATE/ok2" || fail "delivery on the 3-node cluster"
redis_matches || fail "Redis counters differ from PostgreSQL"
ok "1,500 requests: 1,500 call ids, exactly one spend_logs row each, Redis equals PostgreSQL"

# 3. SIGKILL of the leader of partition 0 under load, restart after 5 s.
leader=$(tg_kafka_leader tollgate.events.v1 0) || fail "no leader for tollgate.events.v1[0]"
load 80 40 "$STATE/r3.tsv" &
LOAD_PID=$!
sleep 8
t0=$(_tg_now_ms)
tg_kafka_node_kill "$leader" KILL
# The controller fences the dead node after broker.session.timeout.ms and moves its leaderships:
# wait for that, so that the load runs against a new leader before the node returns.
new_leader=$(tg_kafka_leader_moved tollgate.events.v1 0 "$leader" 30) ||
    fail "partition 0 still led by the killed node $leader after 30 s"
t1=$(_tg_now_ms)
sleep 3
tg_kafka_node_start "$leader" || fail "node $leader did not come back"
"$BIN/tests/tools/kafka_admin" "$TG_KAFKA_BROKERS" create tollgate.events.v1 1 3 -- 60000 ||
    fail "tollgate.events.v1 not back to 3 in-sync replicas"
echo "kafka_cluster: node $leader killed; partition 0 led by node $new_leader after" \
    "$((t1 - t0)) ms; node back and every replica in sync after $(($(_tg_now_ms) - t0)) ms"
wait "$LOAD_PID" || fail "load driver: $(cat "$STATE/r3.tsv.err")"
LOAD_PID=""
[ "$(jq .ok "$STATE/r3.tsv.json")" = 3200 ] ||
    fail "requests failed around the broker kill: $(cat "$STATE/r3.tsv.json")"
ok_ids "$STATE/r3.tsv" >"$STATE/ok3"
sort -u "$STATE/ok2" "$STATE/ok3" >"$STATE/ok23"
[ "$(wc -l <"$STATE/ok23")" = 4700 ] || fail "4,700 requests gave $(wc -l <"$STATE/ok23") call ids"
check_rows "$STATE/ok23" || fail "delivery across the leader's SIGKILL"
redis_matches || fail "Redis counters differ from PostgreSQL after the broker kill"
ok "SIGKILL of partition 0's leader (node $leader) under load: 3,200 requests answered 200, exactly one spend_logs row per call id"
echo "kafka_cluster: RSS of the JVMs at the end $(rss_mb) MiB"
echo "$PASSES passed, 0 failed"
