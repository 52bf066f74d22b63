#!/usr/bin/env bash
# Both services check their topics at start and create them on demand, on real Apache Kafka (3
# KRaft nodes, auto.create.topics.enable=false, as a production cluster should have it).
#
# Checked:
#  - router-svc with topics that do not exist: readiness reports dependencies.topics "down"
#    with a reason naming the missing topic and --create-topics, and the log says it; created
#    while it runs, they are seen at its next check (no restart);
#  - router-svc --create-topics --partitions 4: both topics created (events 4 partitions,
#    control 3, replication 3, the control topic compacted), said one line each, exit 0; again:
#    "exists", exit 0; spend-svc --create-topics on the same topics: "exists", exit 0;
#  - router-svc restarted: topics "up", ready (the control topic replays);
#  - spend-svc with an uncompacted control topic: readiness "topics":"problem" with
#    "not compacted" (keys would expire), logged as a warning; its --create-topics refuses to
#    pass over it (exit 1, naming it); with an events topic that does not exist: "does not
#    exist";
#  - spend-svc with its topics as created: "topics":"ok".
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck disable=SC1091
. "$HERE/router_lib.sh"

rt_init kafka-topics
unset TG_KAFKA_BROKERS TG_KAFKA_CTL
# shellcheck disable=SC1091
. "$TG_SOURCE_DIR/tests/lib/services.sh" || rt_die "cannot source tests/lib/services.sh"
tg_services_init "$RT_DIR/services" >/dev/null || rt_die "tg_services_init failed"
trap rt_exit_services EXIT
tg_pg_start >/dev/null || rt_die "postgres did not start"
tg_redis_start >/dev/null || rt_die "redis did not start"
# a cluster without the topics under test (one unrelated topic)
tg_kafka_start 3 "unrelated.v1:1" >/dev/null || rt_die "kafka did not start"
SPEND=$TG_BUILD_DIR/spend-svc/spend-svc
ROUTER=$TG_BUILD_DIR/router-svc/router-svc

router_config() { # FILE EVENTS CONTROL
    cat >"$1" <<YAML
model_list:
  - model_name: m
    litellm_params: {model: openai/m, api_base: "http://127.0.0.1:9/v1", api_key: os.environ/RT_PROVIDER_KEY}
general_settings:
  master_key: os.environ/RT_MASTER_KEY
tollgate:
  listen: 127.0.0.1:$RT_ROUTER_PORT
  kafka: {brokers: "$TG_KAFKA_BROKERS", events_topic: $2, control_topic: $3}
  spool: {dir: $RT_DIR/spool, max_bytes: 16777216}
YAML
}
spend_config() { # FILE EVENTS CONTROL
    local port
    port=$(rt_free_port)
    cat >"$1" <<YAML
listen: 127.0.0.1:$port
kafka: {brokers: "$TG_KAFKA_BROKERS", topic: $2, control_topic: $3, group_id: g-$(basename "$1")}
postgres: {dsn: "$TG_PG_DSN"}
redis: {url: "$TG_REDIS_URL"}
YAML
    echo "$port" >"$1.port"
}
topics_field() { # URL JQ: wait until readiness has checked the topics, print the field
    local body
    for _ in $(seq 1 150); do
        body=$(curl -s -m 2 "$1/health/readiness")
        if [ -n "$(jq -r "$2 // empty" <<<"$body" 2>/dev/null)" ] &&
            [ "$(jq -r "$2" <<<"$body")" != unknown ] && [ "$(jq -r "$2" <<<"$body")" != unchecked ]; then
            break
        fi
        sleep 0.1
    done
    echo "$body" >>"$RT_DIR/readiness.log"
    jq -r "$2" <<<"$body"
}

# 1. Router with neither topic: the check names them.
router_config "$RT_DIR/a.yaml" tg.ev.v1 tg.ctl.v1
"$ROUTER" --config "$RT_DIR/a.yaml" >>"$RT_DIR/router.out" 2>>"$RT_DIR/router.log" &
RT_ROUTER_PID=$!
RT_PIDS+=("$RT_ROUTER_PID")
rt_wait_http "$RT_URL/health/liveness" 30 || rt_die "router-svc did not answer liveness"
rt_eq "router: missing topics reported down" "$(topics_field "$RT_URL" .dependencies.topics)" down
REASON=$(curl -s -m 2 "$RT_URL/health/readiness" | jq -r .reasons.topics)
rt_true "router: the reason names the missing control topic and --create-topics ($REASON)" \
    grep -q "tg.ctl.v1: does not exist (create it: --create-topics)" <<<"$REASON"
rt_true "router: the log warns about it" grep -q 'kafka topics not as expected.*tg.ev.v1: does not exist' "$RT_DIR/router.log"

# 2. --create-topics, twice, then spend-svc's.
OUT=$("$ROUTER" --config "$RT_DIR/a.yaml" --create-topics --partitions 4 2>>"$RT_DIR/create.err")
RC=$?
echo "$OUT"
rt_eq "router --create-topics: exit 0" "$RC" 0
# the running router keeps checking until its topics are as expected: it sees them created
up_without_restart() {
    for _ in $(seq 1 250); do
        [ "$(curl -s -m 2 "$RT_URL/health/readiness" | jq -r .dependencies.topics)" = up ] &&
            return 0
        sleep 0.1
    done
    return 1
}
rt_true "router: the topics created while it runs are seen, no restart" up_without_restart
rt_router_stop >/dev/null
rt_true "events topic created: 4 partitions, replication 3, not compacted" \
    grep -qx "created tg.ev.v1: 4 partitions, replication 3, cleanup.policy=delete" <<<"$OUT"
rt_true "control topic created: 3 partitions, replication 3, compacted" \
    grep -qx "created tg.ctl.v1: 3 partitions, replication 3, cleanup.policy=compact" <<<"$OUT"
OUT=$("$ROUTER" --config "$RT_DIR/a.yaml" --create-topics 2>>"$RT_DIR/create.err")
RC=$?
rt_eq "router --create-topics again: exit 0" "$RC" 0
rt_true "again: both exist, left as they are" \
    bash -c 'grep -qx "exists tg.ev.v1: 4 partitions, replication 3, cleanup.policy=delete" <<<"$1" &&
             grep -qx "exists tg.ctl.v1: 3 partitions, replication 3, cleanup.policy=compact" <<<"$1"' _ "$OUT"
spend_config "$RT_DIR/s-ok.yaml" tg.ev.v1 tg.ctl.v1
OUT=$("$SPEND" --config "$RT_DIR/s-ok.yaml" --create-topics 2>>"$RT_DIR/create.err")
rt_eq "spend-svc --create-topics on existing topics: exit 0" "$?" 0
rt_true "spend-svc says they exist" grep -q "^exists tg.ctl.v1: .*cleanup.policy=compact" <<<"$OUT"

# 3. The router again: topics up, ready.
rt_router_start "$RT_DIR/a.yaml"
rt_eq "router: topics up once created" "$(topics_field "$RT_URL" .dependencies.topics)" up
rt_true "router: the log reports partitions, replication and policy" \
    grep -q 'msg="kafka topics" topics="tg.ev.v1: 4 partitions, replication 3, cleanup.policy=delete; tg.ctl.v1: 3 partitions' "$RT_DIR/router.log"
rt_router_stop >/dev/null

# 4. spend-svc: an uncompacted control topic, a missing events topic, then the good ones.
"$TG_BUILD_DIR/tests/tools/kafka_admin" "$TG_KAFKA_BROKERS" create tg.badctl.v1 1 3 -- 60000 ||
    rt_die "cannot create tg.badctl.v1"
spend_run() { # NAME CONFIG: start, wait for liveness; PID in SP_RUN_PID
    "$SPEND" --config "$2" >>"$RT_DIR/$1.out" 2>>"$RT_DIR/$1.log" &
    SP_RUN_PID=$!
    RT_PIDS+=("$SP_RUN_PID")
    rt_wait_http "http://127.0.0.1:$(cat "$2.port")/health/liveness" 30 ||
        rt_die "spend-svc $1 did not answer liveness"
}
spend_topics() { topics_field "http://127.0.0.1:$(cat "$1.port")" .topics; } # CONFIG
spend_stop() { kill -TERM "$SP_RUN_PID"; wait "$SP_RUN_PID"; }

spend_config "$RT_DIR/s-bad.yaml" tg.ev.v1 tg.badctl.v1
spend_run bad "$RT_DIR/s-bad.yaml"
rt_eq "spend-svc: an uncompacted control topic is a problem" "$(spend_topics "$RT_DIR/s-bad.yaml")" problem
REASON=$(curl -s -m 2 "http://127.0.0.1:$(cat "$RT_DIR/s-bad.yaml.port")/health/readiness" | jq -r .topics_reason)
rt_true "spend-svc: the reason says keys would expire ($REASON)" \
    grep -q "tg.badctl.v1: cleanup.policy=delete, not compacted: keys would expire" <<<"$REASON"
rt_true "spend-svc: logged as a warning" grep -q 'level=warn.*kafka topics not as expected.*not compacted' "$RT_DIR/bad.log"
spend_stop
OUT=$("$SPEND" --config "$RT_DIR/s-bad.yaml" --create-topics 2>&1)
RC=$?
echo "$OUT"
rt_eq "spend-svc --create-topics does not pass over an uncompacted control topic: exit 1" "$RC" 1
rt_true "and names it" grep -q "problem: tg.badctl.v1: cleanup.policy=delete, not compacted" <<<"$OUT"

spend_config "$RT_DIR/s-missing.yaml" tg.missing.v1 tg.ctl.v1
spend_run missing "$RT_DIR/s-missing.yaml"
rt_eq "spend-svc: a missing events topic is a problem" "$(spend_topics "$RT_DIR/s-missing.yaml")" problem
rt_true "spend-svc: the reason names it" \
    bash -c 'curl -s -m 2 "$1/health/readiness" | jq -r .topics_reason | grep -q "tg.missing.v1: does not exist"' \
    _ "http://127.0.0.1:$(cat "$RT_DIR/s-missing.yaml.port")"
spend_stop

spend_run ok "$RT_DIR/s-ok.yaml"
rt_eq "spend-svc: its topics as created are ok" "$(spend_topics "$RT_DIR/s-ok.yaml")" ok
spend_stop
rt_finish
