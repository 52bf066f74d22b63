#!/usr/bin/env bash
# spend-svc throughput: events/s end to end (Kafka -> Postgres spend_logs/spend_daily/offsets
# -> Redis counters), measured by draining a backlog, and the drain time of a 90 s backlog.
#
#   spend_bench.sh [EVENTS] [RATE_FOR_90S_BACKLOG]
#     EVENTS (default 200000): backlog produced while spend-svc is stopped; spend-svc is then
#       started and timed until every row is in Postgres and Redis equals Postgres.
#     RATE (default 1000 events/s): a 90 s backlog at that rate (90 x RATE events) is drained
#       the same way, on a fresh topic and database.
#   SPEND_BENCH_WRITERS (environment, default: spend-svc's own, 2): postgres.writers, the
#     batches written side by side (one connection each, partitions spread over them).
#   SPEND_BENCH_PER_RECORD (environment, default 1): events per Kafka record, one key's each,
#     as router-svc writes them with kafka.events_per_record (spend_produce --per-record).
#   SPEND_BENCH_BATCH (environment, default 5000): spend-svc's batch.max_events (max_bytes
#     follows at 1,600 bytes per event). Every batch folds its distinct (day, key, team, model
#     group, deployment) groups into spend_daily once; this workload has ~4,480 such groups per
#     5,000 events, so the fold costs Postgres about as much as the inserts at 5,000 and a
#     quarter of that at 20,000.
# Prints a markdown table. Use a build without sanitizers for meaningful numbers
# (TG_BUILD_DIR pointing at a RelWithDebInfo tree). Topics have 64 partitions so that no
# partition holds more than ~3 MiB (devkafka keeps ~5 MiB per partition).
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck disable=SC1091
. "$HERE/../integration/spend_lib.sh"

EVENTS=${1:-200000}
RATE=${2:-1000}
BATCH=${SPEND_BENCH_BATCH:-5000}
WRITERS=${SPEND_BENCH_WRITERS:-}
sp_init spend-bench
sp_services
RUN=$(printf '%08x' $((RANDOM * 32768 + RANDOM)))

now_s() { date +%s.%N; }

# cpu_ticks PID...: utime + stime of the processes, in clock ticks.
cpu_ticks() {
    local p t=0 v
    for p in "$@"; do
        v=$(awk '{ print $14 + $15 }' "/proc/$p/stat" 2>/dev/null) || continue
        t=$((t + ${v:-0}))
    done
    echo "$t"
}

# pg_pids: the postmaster and its children (backends, walwriter, ...).
pg_pids() {
    local pm=${_TG_PG_PID:?postgres not started by services.sh}
    echo "$pm $(pgrep -P "$pm" | tr '\n' ' ')"
}

# drain NAME EVENTS: produce a backlog of EVENTS, start spend-svc, time the drain.
# Sets D_TOTAL (s from start to all rows + Redis synced), D_ROWS (s from first row to last).
drain() {
    local name=$1 n=$2 t0 t_first="" t_rows t_redis c pid
    sp_topic "spend.bench.$name" 64
    sp_db "bench_$name"
    sp_config "$SP_DIR/$name.yaml" "spend.bench.$name"
    sed -i "s/^batch: .*/batch: {max_events: $BATCH, max_wait_ms: 100, max_bytes: $((BATCH * 1600))}/" \
        "$SP_DIR/$name.yaml"
    grep -q "max_events: $BATCH," "$SP_DIR/$name.yaml" || sp_die "cannot set the batch size"
    if [ -n "$WRITERS" ]; then
        sed -i "s/retry_max_ms: 1000}/retry_max_ms: 1000, writers: $WRITERS}/" "$SP_DIR/$name.yaml"
        grep -q "writers: $WRITERS}" "$SP_DIR/$name.yaml" || sp_die "cannot set the writers"
    fi
    sp_log "$name: producing a backlog of $n events"
    sp_produce --topic "spend.bench.$name" --count "$n" --keys 640 --run "$RUN" \
        --per-record "${SPEND_BENCH_PER_RECORD:-1}" >"$SP_DIR/$name.produce" ||
        sp_die "producer failed"
    cat "$SP_DIR/$name.produce"
    # one Redis for both runs: start each from an empty cache
    redis-cli -p "$TG_REDIS_PORT" FLUSHALL >/dev/null
    t0=$(now_s)
    sp_start "$SP_DIR/$name.yaml" "$name"
    pid=$SP_PID
    local pg_cpu0 sp_cpu0 hz
    hz=$(getconf CLK_TCK)
    # shellcheck disable=SC2046 # one PID per word
    pg_cpu0=$(cpu_ticks $(pg_pids))
    sp_cpu0=$(cpu_ticks "$pid")
    # progress from spend-svc's committed-rows counter (the database is fresh, so it equals
    # count(spend_logs)): polling count(*) would scan the growing table ten times a second and
    # start a backend each time, inside the PostgreSQL CPU being measured
    for _ in $(seq 1 3000); do
        c=$(sp_metric "$SP_DIR/$name.yaml" tollgate_spend_rows_inserted_total 2>/dev/null)
        c=${c:-0}
        if [ -z "$t_first" ] && [ "$c" -gt 0 ]; then
            t_first=$(now_s)
        fi
        [ "$c" -ge "$n" ] && break
        sleep 0.1
    done
    t_rows=$(now_s)
    # CPU spent by spend-svc and by every PostgreSQL process during the drain: per event, and
    # the rate one free core for each would sustain (load-independent, unlike wall time on a
    # shared machine)
    # shellcheck disable=SC2046 # one PID per word
    D_PG_US=$(awk -v t="$(( $(cpu_ticks $(pg_pids)) - pg_cpu0 ))" -v hz="$hz" -v n="$n" 'BEGIN { printf "%.1f", t / hz * 1e6 / n }')
    D_SP_US=$(awk -v t="$(( $(cpu_ticks "$pid") - sp_cpu0 ))" -v hz="$hz" -v n="$n" 'BEGIN { printf "%.1f", t / hz * 1e6 / n }')
    c=$(sp_sql "SELECT count(*) FROM spend_logs")
    [ "$c" = "$n" ] || sp_die "$name: $c of $n rows in spend_logs after 300 s"
    # mean committed batch: the fold costs Postgres per distinct group of a batch, so smaller
    # batches cost more per event
    D_BATCH=$(awk -v s="$(sp_metric "$SP_DIR/$name.yaml" tollgate_spend_batch_size_sum)" \
        -v c="$(sp_metric "$SP_DIR/$name.yaml" tollgate_spend_batch_size_count)" \
        'BEGIN { if (c > 0) printf "%.0f", s / c; else print "?" }')
    # times a writer's partitions were paused because both its batches were taken
    D_PARKS=$(sp_metric "$SP_DIR/$name.yaml" tollgate_spend_partition_parks_total)
    sp_wait_redis 60 >/dev/null || sp_die "$name: Redis did not converge"
    t_redis=$(now_s)
    sp_check "$name: exact totals" true
    sp_check_totals "$SP_DIR/$name.produce"
    sp_stop "$pid"
    D_TOTAL=$(awk -v a="$t0" -v b="$t_redis" 'BEGIN { printf "%.2f", b - a }')
    D_ROWS=$(awk -v a="$t_first" -v b="$t_rows" 'BEGIN { printf "%.2f", b - a }')
    sp_log "$name: $n events, first row to last row $D_ROWS s, start to Redis synced $D_TOTAL s," \
        "mean batch $D_BATCH events"
}

LOAD0=$(cut -d' ' -f1 /proc/loadavg)
drain throughput "$EVENTS"
TP_TOTAL=$D_TOTAL
TP_ROWS=$D_ROWS
TP_PG_US=$D_PG_US
TP_SP_US=$D_SP_US
TP_BATCH=$D_BATCH
TP_PARKS=$D_PARKS
drain backlog90 $((90 * RATE))
BL_TOTAL=$D_TOTAL

echo
echo "| spend-svc | value |"
echo "|---|---|"
echo "| backlog drained | $EVENTS events, ${SPEND_BENCH_PER_RECORD:-1} per Kafka record at most |"
echo "| batch.max_events / mean committed batch | $BATCH / $TP_BATCH |"
echo "| postgres.writers | ${WRITERS:-2 (default)} |"
echo "| writer parks (partitions paused while both of a writer's batches were taken) | ${TP_PARKS:-?} |"
echo "| events/s, first row to last row | $(awk -v n="$EVENTS" -v t="$TP_ROWS" 'BEGIN { printf "%.0f", n / t }') |"
echo "| events/s, start to Redis synced (incl. start-up and group join) | $(awk -v n="$EVENTS" -v t="$TP_TOTAL" 'BEGIN { printf "%.0f", n / t }') |"
echo "| drain time of a 90 s backlog at $RATE events/s ($((90 * RATE)) events) | $BL_TOTAL s |"
echo "| CPU per event: PostgreSQL (all processes) / spend-svc | $TP_PG_US µs / $TP_SP_US µs |"
echo "| events/s if CPU were the only limit ($(nproc) cores / CPU per event of both) | $(awk -v a="$TP_PG_US" -v b="$TP_SP_US" -v c="$(nproc)" 'BEGIN { printf "%.0f", c * 1e6 / (a + b) }') |"
echo "| load average at start (cores: $(nproc)) | $LOAD0 |"
sp_finish
