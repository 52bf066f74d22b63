# tests/integration/spend_lib.sh: helpers for spend-svc's integration tests and bench.
#
# Each test owns its Redis and PostgreSQL, started through tests/lib/services.sh in a state dir
# of its own, because several tests inject faults (SIGSTOP of PostgreSQL, Redis hang/restart)
# that must not reach other tests running at the same time. No test here breaks Kafka: they use
# the Kafka they are given (tests/run's 3-node Apache Kafka, shared by the tests that only need
# a broker) on topics of their own, or start one (3 KRaft nodes) when run on their own.
# Everything is on 127.0.0.1, every wait is bounded, and every process started here is stopped
# by PID on exit.
#
#   . spend_lib.sh
#   sp_init NAME                   state dir, trap for cleanup; SP_UNIQ: a tag no other run of
#                                  any test has (for topic names on a shared Kafka)
#   sp_services                    Redis, PostgreSQL (exports TG_* addresses), and Kafka:
#                                  sp_kafka
#   sp_kafka                       the Kafka given (tg_kafka_given) or a new one (Apache Kafka
#                                  unless TG_KAFKA=devkafka: no test here needs devkafka's fault
#                                  channel, the faults are PostgreSQL's, Redis's, spend-svc's);
#                                  SP_CONTROL_TOPIC: the control topic (compacted) of this test
#   sp_topic NAME PARTITIONS       create an events topic (replication 3, min.insync.replicas 2)
#   sp_db NAME                     create a database, sets SP_DSN
#   sp_config FILE TOPIC [EXTRA]   spend-svc config for SP_DSN and TOPIC (EXTRA: YAML lines)
#   sp_start FILE                  start spend-svc, wait for liveness; PID in SP_PID
#   sp_produce ARGS...             run spend_produce against the brokers
#   sp_wait_rows N SECONDS         wait until spend_logs has N rows
#   sp_check_totals PRODUCER_OUT   exact totals vs the producer's report, aggregates vs rows
#   sp_redis_matches               0 when today's Redis counters equal spend_daily
#   sp_check DESC CMD... / sp_finish

set -u

SP_FAILS=0
SP_PASSES=0
SP_PIDS=()

sp_log() { echo "[$(date -u +%H:%M:%S)] $*"; }

sp_die() {
    echo "FATAL: $*" >&2
    if [ -n "${SP_LAST_LOG:-}" ] && [ -f "$SP_LAST_LOG" ]; then
        echo "--- spend-svc log tail" >&2
        tail -n 30 "$SP_LAST_LOG" >&2
    fi
    exit 1
}

# shellcheck source=tests/lib/ports.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib/ports.sh"

# sp_free_port: a loopback port reserved for this script until it exits (tests/lib/ports.sh).
sp_free_port() {
    tg_port_take "${SP_DIR:?sp_init first}/ports.list"
}

sp_cleanup() {
    local p
    for p in "${SP_PIDS[@]}"; do
        kill -TERM "$p" 2>/dev/null
    done
    for p in "${SP_PIDS[@]}"; do
        for _ in $(seq 1 50); do
            kill -0 "$p" 2>/dev/null || break
            sleep 0.1
        done
        kill -CONT "$p" 2>/dev/null
        kill -KILL "$p" 2>/dev/null
    done
    if declare -F tg_services_stop_all >/dev/null; then
        tg_services_stop_all >/dev/null 2>&1
    fi
    tg_ports_release "$SP_DIR/ports.list"
    if [ "${SP_KEEP:-0}" != 1 ]; then
        rm -rf "$SP_DIR"
    fi
}

sp_init() {
    : "${TG_BUILD_DIR:?TG_BUILD_DIR unset}"
    : "${TG_SOURCE_DIR:?TG_SOURCE_DIR unset}"
    SP_DIR=$(mktemp -d "${TMPDIR:-/tmp}/tollgate-$1.XXXXXX")
    chmod 755 "$SP_DIR"
    export SP_DIR
    SP_UNIQ=${SP_DIR##*.}
    SP_BIN="$TG_BUILD_DIR/spend-svc/spend-svc"
    SP_PRODUCE="$TG_BUILD_DIR/tests/integration/spend_produce"
    [ -x "$SP_BIN" ] || sp_die "missing $SP_BIN"
    [ -x "$SP_PRODUCE" ] || sp_die "missing $SP_PRODUCE"
    export TG_SPEND_TEST_MASTER_KEY="mk-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"
    trap sp_cleanup EXIT
}

# Services ------------------------------------------------------------------------------------------

sp_services() {
    # shellcheck disable=SC1091
    . "$TG_SOURCE_DIR/tests/lib/services.sh" || sp_die "cannot source tests/lib/services.sh"
    tg_services_init "$SP_DIR/services" >/dev/null || sp_die "tg_services_init failed"
    tg_redis_start >/dev/null || sp_die "redis did not start"
    tg_pg_start >/dev/null || sp_die "postgres did not start"
    sp_kafka
    sp_log "services: redis=$TG_REDIS_PORT postgres=$TG_PG_PORT kafka=$TG_KAFKA_BROKERS"
}

# sp_kafka: services.sh sourced and initialised. On a given Kafka the control topic is this
# test's own: budget tests read block records from it, and spend-svc reads every key record on
# it.
sp_kafka() {
    if tg_kafka_given; then
        SP_CONTROL_TOPIC="spend.control.$SP_UNIQ"
        tg_kafka_topic "$SP_CONTROL_TOPIC" 1 cleanup.policy=compact ||
            sp_die "cannot create topic $SP_CONTROL_TOPIC on the Kafka given ($TG_KAFKA_BROKERS)"
        sp_log "kafka: the one given ($TG_KAFKA_KIND, $TG_KAFKA_BROKERS), control topic $SP_CONTROL_TOPIC"
    else
        tg_kafka_start >/dev/null || sp_die "kafka did not start"
        SP_CONTROL_TOPIC=tollgate.control.v1
    fi
    export SP_CONTROL_TOPIC
}

sp_pg_pause() { tg_pg_pause; }
sp_pg_resume() { tg_pg_resume; }
sp_redis_hang() { tg_redis_hang; }
sp_redis_resume() { tg_redis_resume; }
sp_redis_restart() { tg_redis_restart >/dev/null; }

# Kafka and Postgres ------------------------------------------------------------------------------

sp_topic() { # NAME PARTITIONS
    tg_kafka_topic "$1" "$2" || sp_die "cannot create topic $1"
}

sp_db() { # NAME
    local base=${TG_PG_DSN%/*}
    psql "$base/postgres" -X -q -v ON_ERROR_STOP=1 -c "CREATE DATABASE $1" >/dev/null ||
        sp_die "cannot create database $1"
    SP_DSN="$base/$1"
    export SP_DSN
}

sp_sql() { psql "$SP_DSN" -X -q -t -A -v ON_ERROR_STOP=1 -c "$1"; }

# sp_config FILE TOPIC [EXTRA_YAML]: port in SP_PORT_<n> chosen here; prints nothing.
sp_config() {
    local file=$1 topic=$2 extra=${3:-} port
    port=$(sp_free_port)
    cat >"$file" <<YAML
listen: 127.0.0.1:$port
master_key: os.environ/TG_SPEND_TEST_MASTER_KEY
kafka: {brokers: "$TG_KAFKA_BROKERS", topic: $topic, control_topic: ${SP_CONTROL_TOPIC:?sp_kafka first},
        group_id: spend-$topic, session_timeout_ms: 6000}
postgres: {dsn: "$SP_DSN", query_timeout_ms: 2000, retry_max_ms: 1000}
redis: {url: "$TG_REDIS_URL", timeout_ms: 300}
batch: {max_events: 5000, max_wait_ms: 100}
$extra
YAML
    echo "$port" >"$file.port"
}

sp_url() { echo "http://127.0.0.1:$(cat "$1.port")"; }

# sp_start CONFIG [NAME]: start spend-svc; PID in SP_PID; log in $SP_DIR/NAME.log.
sp_start() {
    local cfg=$1 name=${2:-spend} url
    url=$(sp_url "$cfg")
    SP_LAST_LOG="$SP_DIR/$name.log"
    "$SP_BIN" --config "$cfg" >>"$SP_DIR/$name.out" 2>>"$SP_LAST_LOG" &
    SP_PID=$!
    SP_PIDS+=("$SP_PID")
    for _ in $(seq 1 100); do
        curl -fsS -m 1 "$url/health/liveness" >/dev/null 2>&1 && return 0
        kill -0 "$SP_PID" 2>/dev/null || sp_die "spend-svc exited at start"
        sleep 0.1
    done
    sp_die "spend-svc did not answer liveness"
}

sp_wait_ready() { # CONFIG SECONDS
    local url
    url=$(sp_url "$1")
    for _ in $(seq 1 $(($2 * 10))); do
        curl -fsS -m 1 "$url/health/readiness" >/dev/null 2>&1 && return 0
        sleep 0.1
    done
    return 1
}

sp_stop() { # PID: SIGTERM and wait (bounded); returns the exit status
    local pid=$1 rc
    kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 1 150); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
        kill -KILL "$pid"
        wait "$pid" 2>/dev/null
        return 99
    fi
    wait "$pid"
    rc=$?
    return $rc
}

sp_produce() { "$SP_PRODUCE" --brokers "$TG_KAFKA_BROKERS" "$@"; }

sp_field() { # FILE NAME: value of NAME=... in a producer report
    tr ' ' '\n' <"$1" | sed -n "s/^$2=//p"
}

sp_wait_rows() { # N SECONDS
    local n
    for _ in $(seq 1 $(($2 * 5))); do
        n=$(sp_sql "SELECT count(*) FROM spend_logs" 2>/dev/null)
        [ "$n" = "$1" ] && return 0
        sleep 0.2
    done
    echo "spend_logs has ${n:-?} rows, expected $1" >&2
    return 1
}

# sp_check_totals OUT: rows = distinct call ids, exact sums, aggregates = rows, no duplicate.
sp_check_totals() {
    local out=$1 got want
    want="$(sp_field "$out" distinct)|$(sp_field "$out" failures)|$(sp_field "$out" prompt_tokens)|$(sp_field "$out" completion_tokens)|$(sp_field "$out" cost_nusd)"
    got=$(sp_sql "SELECT count(*), count(*) FILTER (WHERE status >= 400), sum(prompt_tokens),
                  sum(completion_tokens), sum(cost_nusd) FROM spend_logs WHERE kind = 'request'")
    sp_check "spend_logs totals equal the distinct events produced ($want)" [ "$got" = "$want" ]
    got=$(sp_sql "SELECT sum(requests), sum(failures), sum(prompt_tokens), sum(completion_tokens),
                  sum(cost_nusd) FROM spend_daily")
    want=$(sp_sql "SELECT count(*), count(*) FILTER (WHERE status >= 400), sum(prompt_tokens),
                   sum(completion_tokens), sum(cost_nusd) FROM spend_logs WHERE kind = 'request'")
    sp_check "spend_daily sums equal spend_logs sums ($got)" [ "$got" = "$want" ]
    got=$(sp_sql "SELECT sum(next_offset) FROM consumer_offsets")
    sp_check "consumer_offsets cover every record produced ($(sp_field "$out" records))" \
        [ "$got" = "$(sp_field "$out" records)" ]
}

# sp_test_certs DIR: test certificates made by openssl: a CA (ca.crt, ca.key) and another CA
# (other-ca.*) that signed nothing here; from the first, a server certificate for 127.0.0.1
# (server.crt, server.key) and a client certificate (client.crt, client.key). Valid 2 days.
sp_test_certs() {
    local dir=$1 ca who
    mkdir -p "$dir" || sp_die "mkdir $dir"
    for ca in ca other-ca; do
        openssl req -x509 -newkey rsa:2048 -nodes -keyout "$dir/$ca.key" -out "$dir/$ca.crt" \
            -days 2 -subj "/CN=tollgate-test-$ca" -addext basicConstraints=critical,CA:TRUE \
            -addext keyUsage=critical,keyCertSign 2>/dev/null || sp_die "openssl: $ca"
    done
    printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' >"$dir/server.ext"
    printf 'extendedKeyUsage=clientAuth\n' >"$dir/client.ext"
    for who in server client; do
        openssl req -newkey rsa:2048 -nodes -keyout "$dir/$who.key" -out "$dir/$who.csr" \
            -subj "/CN=tollgate-test-$who" 2>/dev/null || sp_die "openssl: $who key"
        openssl x509 -req -in "$dir/$who.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" \
            -CAcreateserial -days 2 -extfile "$dir/$who.ext" -out "$dir/$who.crt" 2>/dev/null ||
            sp_die "openssl: $who certificate"
    done
    chmod 644 "$dir"/*.crt
}

# sp_redis_cli ARGS...: redis-cli against the test's Redis (a test with a Redis of its own, TLS or
# ACL, redefines it).
sp_redis_cli() { redis-cli -p "$TG_REDIS_PORT" "$@"; }

# sp_redis_matches: every per-day counter of today (key, team, model) equals spend_daily, and
# Redis holds no other counter for today. Prints the first difference. A field the sink never
# incremented (it skips increments of 0) is absent: 0, as in tests/chaos/redis_vs_pg.sh.
sp_redis_matches() {
    local day expected got n_pg n_redis
    day=$(date -u +%F)
    expected=$(sp_sql "
        SELECT 'tg:spend:day:$day:key:' || key_hash, sum(requests), sum(failures),
               sum(prompt_tokens), sum(completion_tokens), sum(cost_nusd)
          FROM spend_daily WHERE day = '$day' AND key_hash <> '' GROUP BY key_hash
        UNION ALL
        SELECT 'tg:spend:day:$day:team:' || team_id, sum(requests), sum(failures),
               sum(prompt_tokens), sum(completion_tokens), sum(cost_nusd)
          FROM spend_daily WHERE day = '$day' AND team_id <> '' GROUP BY team_id
        UNION ALL
        SELECT 'tg:spend:day:$day:model:' || model_group, sum(requests), sum(failures),
               sum(prompt_tokens), sum(completion_tokens), sum(cost_nusd)
          FROM spend_daily WHERE day = '$day' AND model_group <> '' GROUP BY model_group
        ORDER BY 1") || return 1
    n_pg=$(printf '%s\n' "$expected" | grep -c . )
    n_redis=$(sp_redis_cli --scan --pattern "tg:spend:day:$day:*" 2>/dev/null | wc -l)
    if [ "$n_pg" != "$n_redis" ]; then
        echo "redis has $n_redis counters for $day, postgres $n_pg" >&2
        return 1
    fi
    got=$(printf '%s\n' "$expected" | cut -d'|' -f1 | while read -r k; do
        echo "HMGET $k requests failures prompt_tokens completion_tokens cost_nusd"
    done | sp_redis_cli 2>/dev/null | sed 's/^$/0/' | paste -d'|' - - - - - )
    got=$(paste -d'|' <(printf '%s\n' "$expected" | cut -d'|' -f1) <(printf '%s\n' "$got"))
    if [ "$got" != "$expected" ]; then
        diff <(printf '%s\n' "$expected") <(printf '%s\n' "$got") | head -n 4 >&2
        return 1
    fi
    return 0
}

sp_wait_redis() { # SECONDS: until Redis equals Postgres; prints the seconds it took
    local t0 i
    t0=$(date +%s.%N)
    for i in $(seq 1 $(($1 * 5))); do
        if sp_redis_matches 2>/dev/null; then
            awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f\n", b - a }'
            return 0
        fi
        sleep 0.2
    done
    sp_redis_matches
    return 1
}

sp_metric() { # CONFIG NAME_WITH_LABELS
    curl -fsS -m 2 "$(sp_url "$1")/metrics" | awk -v n="$2" '$1 == n { print $2 }'
}

sp_check() { # DESC CMD...
    local desc=$1
    shift
    if "$@"; then
        SP_PASSES=$((SP_PASSES + 1))
        echo "ok   - $desc"
    else
        SP_FAILS=$((SP_FAILS + 1))
        echo "FAIL - $desc"
    fi
}

sp_finish() {
    echo "# $SP_PASSES passed, $SP_FAILS failed"
    if [ "$SP_FAILS" -ne 0 ]; then
        [ -n "${SP_LAST_LOG:-}" ] && { echo "--- spend-svc log tail"; tail -n 30 "$SP_LAST_LOG"; }
        exit 1
    fi
    exit 0
}
