#!/usr/bin/env bash
# spend-svc integration tests against real Redis, PostgreSQL and Apache Kafka (3 KRaft nodes:
# tests/run's shared cluster, on topics of the test's own; started here when run alone).
#
#   spend_pipeline_test.sh exactly_once   50,000 events, 10 % duplicated call ids, a restart and
#                                         a second consumer joining mid-stream (at half-time)
#   spend_pipeline_test.sh pg_pause       PostgreSQL SIGSTOPped 15 s mid-stream
#   spend_pipeline_test.sh redis_outage   Redis hung mid-stream, then restarted empty
#   spend_pipeline_test.sh sigkill        spend-svc SIGKILLed mid-batch and restarted
#   spend_pipeline_test.sh dead_letters   malformed and oversized events; admin endpoints
#   spend_pipeline_test.sh budget         budget crossing -> block record, period roll-over
#   spend_pipeline_test.sh backlog_parks  a backlog drained in small batches by two writers, so
#                                         that a writer with both batches taken parks its
#                                         partitions; a second consumer leaves mid-drain
#   spend_pipeline_test.sh replica_rebuilds  Redis rebuilt by one replica while another commits
#   spend_pipeline_test.sh kafka_auth     SASL refused by the broker: readiness names the reason
#   spend_pipeline_test.sh records        records of up to 64 events (one key each) beside
#                                         one-event records, batches of 50 (smaller than a
#                                         record), one consumer SIGKILLed mid-drain with its
#                                         increments unsent (its Redis away): the other takes
#                                         over and rebuilds; bad events in shared records: one
#                                         dead letter each
#
# Every check compares exact numbers: rows = distinct call ids, sums = what was produced,
# spend_daily = spend_logs, Redis = Postgres. Topics have 24 partitions and events are spread
# over 240 keys so that no partition holds more than ~3 MiB (so they also run on devkafka, which
# keeps ~5 MiB each: TG_KAFKA=devkafka).
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck disable=SC1091
. "$HERE/spend_lib.sh"

SCENARIO=${1:?scenario}
sp_init "spend-$SCENARIO"
sp_services
TOPIC="spend.$SCENARIO.$SP_UNIQ.v1"
sp_topic "$TOPIC" 24
sp_db "spend_$SCENARIO"
# sp_sum_reports FILE...: one spend_produce report of several: every count is a sum.
sp_sum_reports() {
    cat "$@" | tr ' ' '\n' | awk -F= '
        $1 != "" && $2 ~ /^[0-9]+$/ { if (!($1 in v)) order[++n] = $1; v[$1] += $2 }
        END { for (i = 1; i <= n; i++) printf "%s%s=%.0f", (i > 1 ? " " : ""), order[i], v[order[i]]
              print "" }'
}
# sp_is_400_naming BODY_AND_STATUS PARAM: curl output with -w '%{http_code}' appended.
sp_is_400_naming() {
    [ "${1: -3}" = 400 ] && printf '%s' "${1%???}" | jq -e --arg p "$2" '.error.param == $p' >/dev/null
}
RUN=$(printf '%08x' $((RANDOM * 32768 + RANDOM)))

# small_batch_backlog_config: configs a.yaml and b.yaml with batches of 50 and two writers;
# small_batch_backlog: those, and a backlog of 40,000 events (+10 % duplicates) produced while
# no consumer runs.
small_batch_backlog_config() {
    local f
    for f in a b; do
        sp_config "$SP_DIR/$f.yaml" "$TOPIC"
        sed -i "s/^batch: .*/batch: {max_events: 50, max_wait_ms: 100}/;s/retry_max_ms: 1000}/retry_max_ms: 1000, writers: 2}/" \
            "$SP_DIR/$f.yaml"
        grep -q "max_events: 50," "$SP_DIR/$f.yaml" && grep -q "writers: 2}" "$SP_DIR/$f.yaml" ||
            sp_die "cannot set the batch size and writers"
    done
}
small_batch_backlog() {
    small_batch_backlog_config
    sp_log "producing a backlog of 40,000 events (+10 % duplicates), no consumer running"
    sp_produce --topic "$TOPIC" --count 40000 --dup-pct 10 --keys 240 --run "$RUN" \
        >"$SP_DIR/produce.out" || sp_die "producer failed"
    cat "$SP_DIR/produce.out"
}

# start_ab_until ROWS: consumers a and b (a.yaml, b.yaml) started together (A, B); back once
# more than ROWS rows are stored, or after 15 s.
start_ab_until() {
    sp_start "$SP_DIR/a.yaml" a
    A=$SP_PID
    sp_start "$SP_DIR/b.yaml" b
    B=$SP_PID
    for _ in $(seq 1 150); do
        [ "$(sp_sql "SELECT count(*) FROM spend_logs")" -gt "$1" ] && break
        sleep 0.1
    done
}

case "$SCENARIO" in
exactly_once)
    # In two halves, so that the second consumer surely joins mid-stream: the first half while
    # a restarts, the second once b holds partitions (a fixed delay raced with a's restart: on a
    # slow host b joined after the last event, was handed partitions with nothing left in them,
    # and inserted no row).
    sp_config "$SP_DIR/a.yaml" "$TOPIC"
    sp_config "$SP_DIR/b.yaml" "$TOPIC"
    sp_start "$SP_DIR/a.yaml" a
    A=$SP_PID
    sp_wait_ready "$SP_DIR/a.yaml" 30 || sp_die "not ready"
    sp_log "producing 25,000 events (+10 % duplicates) at 8,000/s"
    sp_produce --topic "$TOPIC" --count 25000 --dup-pct 10 --keys 240 --run "$RUN" \
        --rate 8000 >"$SP_DIR/produce1.out" &
    PROD=$!
    sleep 1.5
    sp_log "restarting consumer a (SIGTERM)"
    sp_stop "$A"
    sp_check "spend-svc exits 0 on SIGTERM" [ $? = 0 ]
    sp_start "$SP_DIR/a.yaml" a
    A=$SP_PID
    wait "$PROD" || sp_die "producer failed (first half)"
    sp_log "second consumer b joins"
    sp_start "$SP_DIR/b.yaml" b
    B=$SP_PID
    for _ in $(seq 1 600); do
        grep -q 'msg="partitions assigned"' "$SP_DIR/b.log" && break
        sleep 0.1
    done
    grep -q 'msg="partitions assigned"' "$SP_DIR/b.log" ||
        sp_die "b was given no partitions in 60 s"
    sp_log "b holds partitions; producing 25,000 more"
    sp_produce --topic "$TOPIC" --count 25000 --start 25000 --dup-pct 10 --keys 240 \
        --run "$RUN" --rate 8000 >"$SP_DIR/produce2.out" || sp_die "producer failed (second half)"
    # one report for both halves: every count is a sum
    sp_sum_reports "$SP_DIR/produce1.out" "$SP_DIR/produce2.out" >"$SP_DIR/produce.out"
    cat "$SP_DIR/produce.out"
    sp_check "every distinct event stored once" sp_wait_rows "$(sp_field "$SP_DIR/produce.out" distinct)" 90
    sleep 1 # last offsets
    sp_check_totals "$SP_DIR/produce.out"
    sp_check "no call id stored twice" [ "$(sp_sql "SELECT count(*) - count(DISTINCT call_id) FROM spend_logs")" = 0 ]
    INS_A=$(sp_metric "$SP_DIR/a.yaml" tollgate_spend_rows_inserted_total)
    INS_B=$(sp_metric "$SP_DIR/b.yaml" tollgate_spend_rows_inserted_total)
    sp_log "rows inserted after restart: a=$INS_A b=$INS_B"
    sp_check "the joining consumer took part (b inserted rows)" [ "${INS_B:-0}" -gt 0 ]
    T=$(sp_wait_redis 15)
    sp_check "Redis counters equal Postgres totals (after ${T:-?} s)" [ -n "$T" ]
    sp_stop "$A"
    sp_stop "$B"
    ;;

backlog_parks)
    # batches of 50 fill in well under a millisecond from a backlog while the writer's previous
    # statement takes several: its partitions are parked and read again from the first
    # message not kept. Two consumers start together (each rebuilds Redis at start, before
    # the group hands out partitions); b stops mid-drain, so its partitions move to a while
    # a's own are parked: no message may be lost or stored twice.
    small_batch_backlog
    start_ab_until 8000
    PARKS_A=$(sp_metric "$SP_DIR/a.yaml" tollgate_spend_partition_parks_total)
    PARKS_B=$(sp_metric "$SP_DIR/b.yaml" tollgate_spend_partition_parks_total)
    sp_log "consumer b stops mid-drain ($(sp_sql "SELECT count(*) FROM spend_logs") rows; parks so far a=${PARKS_A:-?} b=${PARKS_B:-?})"
    sp_stop "$B"
    sp_check "spend-svc b exits 0 on SIGTERM" [ $? = 0 ]
    sp_check "every distinct event stored once" sp_wait_rows "$(sp_field "$SP_DIR/produce.out" distinct)" 90
    sleep 1
    sp_check_totals "$SP_DIR/produce.out"
    sp_check "no call id stored twice" [ "$(sp_sql "SELECT count(*) - count(DISTINCT call_id) FROM spend_logs")" = 0 ]
    PARKS_A=$(sp_metric "$SP_DIR/a.yaml" tollgate_spend_partition_parks_total)
    sp_log "a parked its writers' partitions ${PARKS_A:-?} times"
    sp_check "a writer with both batches taken parked its partitions" [ "${PARKS_A:-0}" -gt 0 ]
    T=$(sp_wait_redis 15)
    sp_check "Redis counters equal Postgres totals (after ${T:-?} s)" [ -n "$T" ]
    sp_stop "$A"
    ;;

replica_rebuilds)
    # Redis rebuilds by one replica while another keeps committing: a joins a drain in
    # progress (its start rebuild), then the sentinel is deleted twice (both rebuild at once,
    # one after the other). Small batches commit every few milliseconds, so flushes and
    # rebuild snapshots interleave; the counters must still equal Postgres exactly.
    small_batch_backlog
    sp_start "$SP_DIR/b.yaml" b
    B=$SP_PID
    for _ in $(seq 1 150); do
        [ "$(sp_sql "SELECT count(*) FROM spend_logs")" -gt 3000 ] && break
        sleep 0.1
    done
    sp_log "consumer a joins while b commits ($(sp_sql "SELECT count(*) FROM spend_logs") rows)"
    sp_start "$SP_DIR/a.yaml" a
    A=$SP_PID
    for k in 1 2; do
        sleep 3
        sp_log "sentinel deleted: both replicas rebuild ($(sp_sql "SELECT count(*) FROM spend_logs") rows)"
        redis-cli -p "$TG_REDIS_PORT" DEL tg:spend:sentinel >/dev/null
    done
    sp_check "every distinct event stored once" sp_wait_rows "$(sp_field "$SP_DIR/produce.out" distinct)" 120
    sleep 1
    sp_check_totals "$SP_DIR/produce.out"
    # both_metric NAME: the sum of a's and b's counter (0 where absent)
    both_metric() {
        local x y
        x=$(sp_metric "$SP_DIR/a.yaml" "$1")
        y=$(sp_metric "$SP_DIR/b.yaml" "$1")
        echo $((${x:-0} + ${y:-0}))
    }
    RB_A=$(sp_metric "$SP_DIR/a.yaml" tollgate_spend_redis_rebuilds_total)
    RB_B=$(sp_metric "$SP_DIR/b.yaml" tollgate_spend_redis_rebuilds_total)
    sp_log "rebuilds a=${RB_A:-?} b=${RB_B:-?}; flushes skipped" \
        "$(both_metric tollgate_spend_redis_flushes_skipped_total), deferred" \
        "$(both_metric tollgate_spend_redis_flushes_deferred_total), mixed" \
        "$(both_metric tollgate_spend_redis_flushes_mixed_total)"
    # each start rebuilds, and each deletion is rebuilt by whichever replica sees it first (the
    # other may find the sentinel back already): at least 4 rebuilds in all
    sp_check "the replicas rebuilt at least 4 times in all" [ "$(( ${RB_A:-0} + ${RB_B:-0} ))" -ge 4 ]
    T=$(sp_wait_redis 15)
    sp_check "Redis counters equal Postgres totals (after ${T:-?} s)" [ -n "$T" ]
    sp_stop "$A"
    sp_stop "$B"
    ;;

pg_pause)
    sp_config "$SP_DIR/a.yaml" "$TOPIC"
    sp_start "$SP_DIR/a.yaml" a
    A=$SP_PID
    sp_wait_ready "$SP_DIR/a.yaml" 30 || sp_die "not ready"
    sp_produce --topic "$TOPIC" --count 20000 --dup-pct 10 --keys 240 --run "$RUN" \
        --rate 1000 >"$SP_DIR/produce.out" &
    PROD=$!
    sleep 2
    sp_log "pausing PostgreSQL (every process SIGSTOPped) for 15 s"
    sp_pg_pause
    sleep 5
    R=$(curl -s -m 2 -o /dev/null -w '%{http_code}' "$(sp_url "$SP_DIR/a.yaml")/health/readiness")
    sp_check "readiness answers 503 while PostgreSQL is paused (got $R)" [ "$R" = 503 ]
    L=$(curl -s -m 2 -o /dev/null -w '%{http_code}' "$(sp_url "$SP_DIR/a.yaml")/health/liveness")
    sp_check "liveness stays 200 while PostgreSQL is paused" [ "$L" = 200 ]
    sleep 10
    sp_pg_resume
    sp_log "PostgreSQL resumed"
    wait "$PROD" || sp_die "producer failed"
    cat "$SP_DIR/produce.out"
    sp_check "catch-up: every distinct event stored once" sp_wait_rows "$(sp_field "$SP_DIR/produce.out" distinct)" 60
    sleep 1
    sp_check_totals "$SP_DIR/produce.out"
    sp_check "readiness back to 200" sp_wait_ready "$SP_DIR/a.yaml" 10
    F=$(sp_metric "$SP_DIR/a.yaml" tollgate_spend_commit_failures_total)
    sp_check "the outage was seen (commit failures: ${F:-0})" [ "${F:-0}" -gt 0 ]
    # a statement that timed out while PostgreSQL was stopped is executed (and may commit) when
    # it resumes: spend-svc cannot know, so the counters are read back from PostgreSQL
    if grep -q 'postgres query timed out' "$SP_DIR/a.log"; then
        D=$(sp_metric "$SP_DIR/a.yaml" tollgate_spend_redis_doubtful_commit_rebuilds_total)
        sp_check "a statement given up mid-flight leads to a rebuild (${D:-0})" [ "${D:-0}" -gt 0 ]
    fi
    T=$(sp_wait_redis 15)
    sp_check "Redis counters equal Postgres totals (after ${T:-?} s)" [ -n "$T" ]
    sp_stop "$A"
    sp_check "spend-svc exits 0 on SIGTERM" [ $? = 0 ]
    ;;

redis_outage)
    sp_config "$SP_DIR/a.yaml" "$TOPIC"
    sp_start "$SP_DIR/a.yaml" a
    A=$SP_PID
    sp_wait_ready "$SP_DIR/a.yaml" 30 || sp_die "not ready"
    sp_produce --topic "$TOPIC" --count 12000 --keys 240 --run "$RUN" --rate 2000 \
        >"$SP_DIR/produce.out" &
    PROD=$!
    sleep 1
    sp_log "Redis hangs (SIGSTOP) for 8 s"
    sp_redis_hang
    sleep 4
    P=$(sp_metric "$SP_DIR/a.yaml" tollgate_spend_redis_pending_increments)
    UP=$(sp_metric "$SP_DIR/a.yaml" tollgate_spend_redis_up)
    sp_check "increments are held while Redis hangs (pending ${P:-?}, redis_up ${UP:-?})" \
        [ "${P:-0}" -gt 0 -a "${UP:-1}" = 0 ]
    R=$(curl -s -m 2 -o /dev/null -w '%{http_code}' "$(sp_url "$SP_DIR/a.yaml")/health/readiness")
    sp_check "readiness does not fail on Redis (got $R)" [ "$R" = 200 ]
    sleep 4
    sp_redis_resume
    sp_log "Redis resumed"
    wait "$PROD" || sp_die "producer failed"
    cat "$SP_DIR/produce.out"
    sp_check "every distinct event stored once" sp_wait_rows "$(sp_field "$SP_DIR/produce.out" distinct)" 30
    T=$(sp_wait_redis 5)
    sp_check "Redis equals Postgres within 5 s of its return (${T:-no} s)" [ -n "$T" ]
    sp_log "Redis restarted empty"
    sp_redis_restart
    T=$(sp_wait_redis 10)
    sp_check "counters rebuilt after an empty restart (${T:-no} s)" [ -n "$T" ]
    RB=$(sp_metric "$SP_DIR/a.yaml" tollgate_spend_redis_rebuilds_total)
    sp_check "a rebuild from Postgres happened (rebuilds ${RB:-0})" [ "${RB:-0}" -ge 2 ]
    sp_check_totals "$SP_DIR/produce.out"
    sp_stop "$A"
    ;;

sigkill)
    sp_config "$SP_DIR/a.yaml" "$TOPIC"
    sp_start "$SP_DIR/a.yaml" a
    A=$SP_PID
    sp_wait_ready "$SP_DIR/a.yaml" 30 || sp_die "not ready"
    sp_produce --topic "$TOPIC" --count 30000 --dup-pct 5 --keys 240 --run "$RUN" --rate 10000 \
        >"$SP_DIR/produce.out" &
    PROD=$!
    N=0
    for k in 1 2; do
        # kill while batches are flowing: wait until this instance has committed rows
        for _ in $(seq 1 100); do
            M=$(sp_sql "SELECT count(*) FROM spend_logs")
            [ "$M" -gt "$N" ] && break
            sleep 0.2
        done
        sleep 0.3
        N=$(sp_sql "SELECT count(*) FROM spend_logs")
        sp_log "SIGKILL spend-svc mid-stream ($N rows so far)"
        kill -KILL "$A"
        wait "$A" 2>/dev/null
        sp_start "$SP_DIR/a.yaml" a
        A=$SP_PID
    done
    wait "$PROD" || sp_die "producer failed"
    cat "$SP_DIR/produce.out"
    sp_check "every distinct event stored once" sp_wait_rows "$(sp_field "$SP_DIR/produce.out" distinct)" 60
    sleep 1
    sp_check_totals "$SP_DIR/produce.out"
    T=$(sp_wait_redis 15)
    sp_check "Redis counters equal Postgres totals (after ${T:-?} s)" [ -n "$T" ]
    sp_stop "$A"
    ;;

records)
    # A backlog as routers writing several events per record leave it (after one-event
    # records of an older router), read by two consumers with batches of 50, smaller than a
    # record of 64: a record is never split between two transactions. b is SIGKILLed
    # mid-drain: its partitions go to a, which reads them again from the offsets in Postgres.
    # b's Redis is a port nobody listens on, so every batch b committed is in Postgres only when
    # it dies (what a kill between a commit and its flush leaves): a, taking b's partitions
    # over, must rebuild the counters from Postgres.
    small_batch_backlog_config
    NOBODY=$(sp_free_port)
    sed -i "s|^redis: {url: \"[^\"]*\"|redis: {url: \"redis://127.0.0.1:$NOBODY/0\"|" "$SP_DIR/b.yaml"
    grep -q "127.0.0.1:$NOBODY/" "$SP_DIR/b.yaml" || sp_die "cannot point b at a Redis nobody serves"
    sp_log "producing 4,000 events one per record, then 36,000 (+10 % duplicates) up to 64 per record"
    sp_produce --topic "$TOPIC" --count 4000 --keys 240 --run "$RUN" >"$SP_DIR/produce1.out" ||
        sp_die "producer failed (one-event records)"
    sp_produce --topic "$TOPIC" --count 36000 --start 4000 --dup-pct 10 --keys 24 --run "$RUN" \
        --per-record 64 --malformed 5 --oversized 3 >"$SP_DIR/produce2.out" ||
        sp_die "producer failed (records of several events)"
    sp_sum_reports "$SP_DIR/produce1.out" "$SP_DIR/produce2.out" >"$SP_DIR/produce.out"
    cat "$SP_DIR/produce.out"
    RECS=$(sp_field "$SP_DIR/produce2.out" records)
    sp_check "records of several events were produced ($RECS records for $(sp_field "$SP_DIR/produce2.out" produced) events)" \
        [ "${RECS:-0}" -gt 0 -a "${RECS:-0}" -lt 1000 ]
    start_ab_until 10000
    for _ in $(seq 1 100); do
        INS_B=$(sp_metric "$SP_DIR/b.yaml" tollgate_spend_rows_inserted_total)
        [ "${INS_B:-0}" -gt 0 ] && break
        sleep 0.1
    done
    TAKE0=$(sp_metric "$SP_DIR/a.yaml" tollgate_spend_redis_takeover_rebuilds_total)
    sp_log "SIGKILL consumer b mid-drain ($(sp_sql "SELECT count(*) FROM spend_logs") rows, b inserted ${INS_B:-?})"
    kill -KILL "$B"
    wait "$B" 2>/dev/null
    sp_check "b committed rows it could not send to Redis before it was killed (${INS_B:-0})" \
        [ "${INS_B:-0}" -gt 0 ]
    sp_check "every distinct event stored once" sp_wait_rows 40000 120
    sleep 1
    sp_check "no call id stored twice" [ "$(sp_sql "SELECT count(*) - count(DISTINCT call_id) FROM spend_logs")" = 0 ]
    for _ in $(seq 1 50); do
        [ "$(sp_sql "SELECT count(*) FROM dead_letters")" = 8 ] && break
        sleep 0.2
    done
    sp_check "8 dead letters, one per bad event of the shared records" \
        [ "$(sp_sql "SELECT count(*) FROM dead_letters")" = 8 ]
    sp_check "the 5 malformed events: one record, places 0-4" \
        [ "$(sp_sql "SELECT count(DISTINCT (kafka_partition, kafka_offset)) || ':' || string_agg(kafka_index::text, ',' ORDER BY kafka_index) FROM dead_letters WHERE reason LIKE 'invalid JSON%'")" = "1:0,1,2,3,4" ]
    sp_check "the 3 oversized events: one record, places 0-2" \
        [ "$(sp_sql "SELECT count(DISTINCT (kafka_partition, kafka_offset)) || ':' || string_agg(kafka_index::text, ',' ORDER BY kafka_index) FROM dead_letters WHERE reason LIKE 'event too large%'")" = "1:0,1,2" ]
    sp_check_totals "$SP_DIR/produce.out"
    T=$(sp_wait_redis 15)
    sp_check "Redis counters equal Postgres totals (after ${T:-?} s)" [ -n "$T" ]
    TAKE1=$(sp_metric "$SP_DIR/a.yaml" tollgate_spend_redis_takeover_rebuilds_total)
    sp_check "a rebuilt the counters when it took b's partitions over (${TAKE0:-?} -> ${TAKE1:-?})" \
        [ "${TAKE1:-0}" -gt "${TAKE0:-0}" ]
    M=$(sp_metric "$SP_DIR/a.yaml" tollgate_spend_events_consumed_total)
    sp_log "consumer a read ${M:-?} events"
    sp_stop "$A"
    ;;

dead_letters)
    sp_config "$SP_DIR/a.yaml" "$TOPIC"
    sp_start "$SP_DIR/a.yaml" a
    A=$SP_PID
    sp_wait_ready "$SP_DIR/a.yaml" 30 || sp_die "not ready"
    sp_produce --topic "$TOPIC" --count 200 --keys 10 --run "$RUN" --malformed 5 --oversized 3 \
        >"$SP_DIR/produce.out" || sp_die "producer failed"
    cat "$SP_DIR/produce.out"
    sp_check "valid events stored" sp_wait_rows 200 30
    for _ in $(seq 1 50); do
        [ "$(sp_sql "SELECT count(*) FROM dead_letters")" = 8 ] && break
        sleep 0.2
    done
    sp_check "8 dead letters" [ "$(sp_sql "SELECT count(*) FROM dead_letters")" = 8 ]
    sp_check "malformed events carry the decoder's reason" \
        [ "$(sp_sql "SELECT count(*) FROM dead_letters WHERE reason LIKE 'invalid JSON%'")" = 5 ]
    sp_check "oversized events carry the size reason" \
        [ "$(sp_sql "SELECT count(*) FROM dead_letters WHERE reason LIKE 'event too large%'")" = 3 ]
    sp_check "dead letter payloads are capped at 8 KiB" \
        [ "$(sp_sql "SELECT max(length(payload)) <= 8192 FROM dead_letters")" = t ]
    sleep 0.5
    sp_check_totals "$SP_DIR/produce.out"
    M=$(sp_metric "$SP_DIR/a.yaml" 'tollgate_spend_dead_letters_total{reason="too_large"}')
    sp_check "dead letter metric by reason (too_large=${M:-?})" [ "${M:-0}" = 3 ]
    # admin endpoints
    U=$(sp_url "$SP_DIR/a.yaml")
    AUTH="Authorization: Bearer $TG_SPEND_TEST_MASTER_KEY"
    CID=$(sp_sql "SELECT call_id FROM spend_logs ORDER BY call_id LIMIT 1")
    C=$(curl -s -o /dev/null -w '%{http_code}' "$U/spend/logs?call_id=$CID")
    sp_check "/spend/logs without the master key: 401" [ "$C" = 401 ]
    C=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer wrong" "$U/spend/logs?call_id=$CID")
    sp_check "/spend/logs with a wrong key: 401" [ "$C" = 401 ]
    B=$(curl -s -H "$AUTH" "$U/spend/logs?call_id=$CID")
    sp_check "/spend/logs returns the row" [ "$(echo "$B" | jq -r .call_id)" = "$CID" ]
    B=$(curl -s -w '%{http_code}' -H "$AUTH" "$U/spend/logs?call_id=not-a-uuid")
    sp_check "/spend/logs bad call_id: 400 naming it" sp_is_400_naming "$B" call_id
    C=$(curl -s -o /dev/null -w '%{http_code}' -H "$AUTH" "$U/spend/logs?call_id=00000000-0000-4000-8000-000000000000")
    sp_check "/spend/logs unknown call_id: 404" [ "$C" = 404 ]
    D=$(date -u +%F)
    B=$(curl -s -H "$AUTH" "$U/spend/report?group_by=team&from=$D&to=$D")
    S=$(echo "$B" | jq '[.rows[].cost_nusd] | add')
    sp_check "/spend/report by team sums to the day's cost ($S)" [ "$S" = "$(sp_field "$SP_DIR/produce.out" cost_nusd)" ]
    B=$(curl -s -w '%{http_code}' -H "$AUTH" "$U/spend/report?group_by=colour&from=$D&to=$D")
    sp_check "/spend/report bad group_by: 400 naming it" sp_is_400_naming "$B" group_by
    B=$(curl -s -w '%{http_code}' -H "$AUTH" "$U/spend/report?group_by=key&from=2026-02-30&to=$D")
    sp_check "/spend/report bad from: 400 naming it" sp_is_400_naming "$B" from
    B=$(curl -s "$U/health/readiness")
    sp_check "readiness reports each dependency" [ "$(echo "$B" | jq -r '.kafka + .postgres + .redis')" = upupup ]
    sp_stop "$A"
    ;;

budget)
    HASH=$(printf 'budget-%s' "$RUN" | sha256sum | cut -d' ' -f1)
    sp_config "$SP_DIR/a.yaml" "$TOPIC" "budgets: {thresholds: [50, 80, 100], check_interval_ms: 500}"
    sp_start "$SP_DIR/a.yaml" a
    A=$SP_PID
    sp_wait_ready "$SP_DIR/a.yaml" 30 || sp_die "not ready"
    sp_produce --topic "$SP_CONTROL_TOPIC" --key-record "$HASH" --max-budget-nusd 100000 \
        --budget-duration 1m --alias budget-test --team team-b || sp_die "key record failed"
    for _ in $(seq 1 50); do
        [ "$(sp_sql "SELECT count(*) FROM api_keys WHERE key_hash = '$HASH'")" = 1 ] && break
        sleep 0.2
    done
    sp_check "api_keys mirrors the key: record (never the key)" \
        [ "$(sp_sql "SELECT key_alias || ' ' || max_budget_nusd || ' ' || budget_duration_s FROM api_keys WHERE key_hash = '$HASH'")" = "budget-test 100000 60" ]
    # Stay clear of a minute boundary so that the spend lands in one budget period.
    while [ "$(date -u +%S | sed 's/^0//')" -gt 45 ]; do sleep 1; done
    sp_produce --topic "$TOPIC" --count 6 --key-hash "$HASH" --cost-nusd 10000 --run "$RUN" \
        >"$SP_DIR/p1.out" || sp_die "producer failed"
    sp_wait_rows 6 20
    sleep 1
    L=$(sp_sql "SELECT level_pct FROM budget_state WHERE kind = 'key' AND subject = '$HASH'")
    sp_check "60 % of the budget: the 50 % threshold is recorded ($L)" [ "$L" = 50 ]
    sp_produce --topic "$TOPIC" --count 5 --start 6 --key-hash "$HASH" --cost-nusd 10000 \
        --run "$RUN" >"$SP_DIR/p2.out" || sp_die "producer failed"
    sp_check "block:<hash> published to the control topic" \
        sp_produce --topic "$SP_CONTROL_TOPIC" --expect-block "$HASH" --timeout-s 20
    L=$(sp_sql "SELECT level_pct FROM budget_state WHERE kind = 'key' AND subject = '$HASH'")
    sp_check "100 % recorded once for the period ($L)" [ "$L" = 100 ]
    X=$(sp_metric "$SP_DIR/a.yaml" tollgate_spend_budget_crossings_total)
    sp_check "two crossings announced (50 %, then 100 %): ${X:-0}" [ "${X:-0}" = 2 ]
    sp_check "block lifted (tombstone) when the 1-minute period rolls over" \
        sp_produce --topic "$SP_CONTROL_TOPIC" --expect-block "$HASH" --unblocked --timeout-s 75
    sp_stop "$A"
    ;;

team_budget)
    # A team's budget from a team: record (router-svc's /team/new): spend of the team's keys over
    # it blocks every key of the team (block:<hash> with scope team) until the period rolls over.
    HASH=$(printf 'team-budget-%s' "$RUN" | sha256sum | cut -d' ' -f1)
    TEAM="team-tb-$RUN"
    sp_config "$SP_DIR/a.yaml" "$TOPIC" "budgets: {thresholds: [50, 80, 100], check_interval_ms: 500}"
    sp_start "$SP_DIR/a.yaml" a
    A=$SP_PID
    sp_wait_ready "$SP_DIR/a.yaml" 30 || sp_die "not ready"
    sp_produce --topic "$SP_CONTROL_TOPIC" --team-record "$TEAM" --max-budget-nusd 100000 \
        --budget-duration 1m --alias team-budget-test || sp_die "team record failed"
    sp_produce --topic "$SP_CONTROL_TOPIC" --key-record "$HASH" --max-budget-nusd -1 \
        --alias team-key --team "$TEAM" || sp_die "key record failed"
    for _ in $(seq 1 50); do
        [ "$(sp_sql "SELECT count(*) FROM api_keys WHERE key_hash = '$HASH'")" = 1 ] && break
        sleep 0.2
    done
    sp_check "api_keys mirrors the team's key" \
        [ "$(sp_sql "SELECT team_id FROM api_keys WHERE key_hash = '$HASH'")" = "$TEAM" ]
    while [ "$(date -u +%S | sed 's/^0//')" -gt 45 ]; do sleep 1; done
    sp_produce --topic "$TOPIC" --count 11 --key-hash "$HASH" --team "$TEAM" --cost-nusd 10000 \
        --run "$RUN" >"$SP_DIR/p1.out" || sp_die "producer failed"
    sp_check "block:<hash> of the team's key published, scope team" \
        sp_produce --topic "$SP_CONTROL_TOPIC" --expect-block "$HASH" --scope team --timeout-s 20
    L=$(sp_sql "SELECT level_pct FROM budget_state WHERE kind = 'team' AND subject = '$TEAM'")
    sp_check "100 % of the team's budget recorded ($L)" [ "$L" = 100 ]
    sp_check "block lifted (tombstone) when the team's 1-minute period rolls over" \
        sp_produce --topic "$SP_CONTROL_TOPIC" --expect-block "$HASH" --scope team --unblocked \
        --timeout-s 75
    sp_stop "$A"
    ;;

kafka_auth)
    # SASL towards a broker that refuses it (devkafka speaks no SASL: the same failure path as a
    # wrong password at a real broker, librdkafka's _AUTHENTICATION): readiness names it.
    export SP_KAFKA_PW="kpw-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"
    sp_config "$SP_DIR/a.yaml" "$TOPIC"
    sed -i 's|session_timeout_ms: 6000}|session_timeout_ms: 6000, security_protocol: SASL_PLAINTEXT,\n        sasl: {mechanism: PLAIN, username: spend, password: os.environ/SP_KAFKA_PW}}|' \
        "$SP_DIR/a.yaml"
    grep -q "password: os.environ/SP_KAFKA_PW" "$SP_DIR/a.yaml" || sp_die "cannot add the SASL keys"
    sp_start "$SP_DIR/a.yaml" a
    U=$(sp_url "$SP_DIR/a.yaml")
    for _ in $(seq 1 100); do
        B=$(curl -s -m 2 -w '%{http_code}' "$U/health/readiness")
        printf '%s' "$B" | grep -q '"kafka_reason":"_AUTHENTICATION: ' && break
        sleep 0.1
    done
    sp_check "readiness is 503 while Kafka refuses the authentication" [ "${B: -3}" = 503 ]
    B=${B%???}
    echo "readiness: $B"
    sp_check "readiness says kafka is down" \
        [ "$(printf '%s' "$B" | jq -r .kafka)" = down ]
    sp_check "readiness names the authentication failure" \
        bash -c 'printf "%s" "$1" | jq -r .kafka_reason | grep -q "^_AUTHENTICATION: .*SASL"' _ "$B"
    sp_check "the log names it too" grep -q 'msg="kafka error" err=_AUTHENTICATION reason=".*SASL' \
        "$SP_DIR/a.log"
    sp_check "the Kafka password is in no answer or log" \
        bash -c '! grep -qF -e "$1" <<<"$2" && ! grep -rqF -e "$1" "$3"/*.log "$3"/*.out' \
        _ "$SP_KAFKA_PW" "$B" "$SP_DIR"
    sp_stop "$SP_PID"
    ;;
*)
    sp_die "unknown scenario $SCENARIO"
    ;;
esac
sp_finish
