#!/usr/bin/env bash
# services_test: tests/lib/services.sh against the real Redis, PostgreSQL, devkafka and Apache
# Kafka. Starts everything, checks each answers, exercises every fault helper, stops everything
# and checks that no process it started is left. Exit status 0 = pass.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/lib/services.sh
source "$here/services.sh"

fails=0
check() {
    local what=$1
    shift
    if "$@"; then
        echo "ok   - $what"
    else
        echo "FAIL - $what"
        fails=$((fails + 1))
    fi
}
not() { ! "$@"; }

state=$(mktemp -d "${TMPDIR:-/tmp}/tollgate-services-test.XXXXXX")
tg_services_init "$state"
trap 'tg_services_stop_all; rm -rf "$state"' EXIT

tg_redis_start
unset TG_PG_TEMPLATE # tests/run's: this first cluster is made by initdb, a copy comes below
tg_pg_start
tg_devkafka_start 2 "tollgate.events.v1:6,tollgate.control.v1:1"
with_fake=0
if [ -x "${TG_FAKE_LLM_BIN:-$TG_BUILD_DIR/tests/fakes/fake-llm}" ]; then
    # shellcheck disable=SC2119
    tg_fakellm_start
    with_fake=1
fi

check "TG_REDIS_URL exported" test "$TG_REDIS_URL" = "redis://127.0.0.1:$TG_REDIS_PORT/0"
check "TG_PG_DSN exported" test "$TG_PG_DSN" = "postgresql://postgres@127.0.0.1:$TG_PG_PORT/tollgate"
check "TG_KAFKA_BROKERS has two brokers" test "$(tr ',' '\n' <<<"$TG_KAFKA_BROKERS" | wc -l)" = 2
check "ports below the ephemeral range" test "$TG_REDIS_PORT" -lt 32768 -a "$TG_PG_PORT" -lt 32768

redis_ping() { [ "$(timeout 3 redis-cli -p "$TG_REDIS_PORT" ping 2>/dev/null)" = PONG ]; }
pg_one() { [ "$(PGCONNECT_TIMEOUT=2 timeout 4 psql -X -Atq "$TG_PG_DSN" -c 'SELECT 1' 2>/dev/null)" = 1 ]; }
broker_accepts() {
    local first=${TG_KAFKA_BROKERS%%,*}
    timeout 2 bash -c "exec 3<>/dev/tcp/${first%:*}/${first##*:}" 2>/dev/null
}

check "redis PING" redis_ping
check "postgres SELECT 1 on tollgate" pg_one
check "postgres settings: fsync off" \
    test "$(psql -X -Atq "$TG_PG_DSN" -c 'SHOW fsync')" = off
ctl_ping() { tg_kafka_ctl ping >/dev/null; }
check "devkafka control ping" ctl_ping
check "kafka broker accepts connections" broker_accepts
if [ "$with_fake" = 1 ]; then
    check "fake-llm /_stats" curl -fsS -m 2 -o /dev/null "$TG_FAKE_LLM_URL/_stats"
else
    echo "skip - fake-llm not built"
fi

tg_pg_pause
check "postgres query times out while paused" not pg_one
tg_pg_resume
check "postgres answers after resume" pg_one

tg_redis_hang
check "redis PING times out while hung" not redis_ping
tg_redis_resume
check "redis PING after resume" redis_ping

redis-cli -p "$TG_REDIS_PORT" set tg:services:test 1 >/dev/null
old_port=$TG_REDIS_PORT
tg_redis_restart
check "redis restarted on the same port" test "$TG_REDIS_PORT" = "$old_port"
check "redis restarted empty" test -z "$(redis-cli -p "$TG_REDIS_PORT" get tg:services:test)"

tg_kafka_down
check "kafka broker refuses connections while down" not broker_accepts
tg_kafka_up
check "kafka broker accepts connections after up" broker_accepts

# A cluster copied from a template (tg_pg_template_make; tests/run makes one for the whole run).
first_dsn=$TG_PG_DSN
tg_pg_template_make
tg_pg_start
check "a copy of the template cluster on a port of its own" test "$TG_PG_DSN" != "$first_dsn"
check "the copy: SELECT 1 on tollgate" pg_one
check "the copy: fsync off" test "$(psql -X -Atq "$TG_PG_DSN" -c 'SHOW fsync')" = off
check "the template itself was not started" test ! -e "$TG_PG_TEMPLATE/postmaster.pid"

mapfile -t pids < <(tg_services_pids)
check "at least 4 processes registered" test "${#pids[@]}" -ge 4
ports=$(cat "$TG_STATE_DIR/ports.list")
tg_services_stop_all
tg_services_stop_all
left=
for p in "${pids[@]}"; do
    if _tg_alive "$p"; then
        left="$left $p"
    fi
done
check "no process left after stop_all (pids: ${pids[*]})" test -z "$left"
released=1
for p in $ports; do
    [ -d "$TG_PORTS_DIR/$p" ] && [ "$(cat "$TG_PORTS_DIR/$p/owner" 2>/dev/null)" = "$$" ] && released=0
done
check "port reservations released" test "$released" = 1
check "throwaway postgres dirs removed" test -z "$(cat "$TG_STATE_DIR/dirs.list")"

# Apache Kafka: the default tg_kafka_start, 3 KRaft nodes, in a state dir of its own.
tg_services_init "$state/apache"
unset TG_KAFKA
tg_kafka_start
check "tg_kafka_start runs Apache Kafka" test "${TG_KAFKA_KIND:-}" = apache
check "TG_KAFKA_BROKERS has three brokers" test "$(tr ',' '\n' <<<"$TG_KAFKA_BROKERS" | wc -l)" = 3
check "no fault channel on Apache Kafka" test -z "${TG_KAFKA_CTL:-}"
check "kafka broker accepts connections" broker_accepts
kafka_ready() { "${TG_KAFKA_ADMIN_BIN:-$TG_BUILD_DIR/tests/tools/kafka_admin}" "$TG_KAFKA_BROKERS" ready 3 5000; }
check "3 brokers live in the metadata" kafka_ready
leader=$(tg_kafka_leader tollgate.control.v1 0)
check "tollgate.control.v1 has a leader ($leader)" test "$leader" -ge 1 -a "$leader" -le 3
killed=$(tg_kafka_node_pid "$leader")
tg_kafka_node_kill "$leader" KILL
check "SIGKILL of node $leader ends it" not _tg_alive "$killed"
tg_kafka_node_start "$leader"
check "node $leader restarted and 3 brokers live" kafka_ready
mapfile -t pids < <(tg_services_pids)
check "3 kafka processes registered" test "${#pids[@]}" = 3
tg_services_stop_all
left=
for p in "${pids[@]}"; do
    if _tg_alive "$p"; then
        left="$left $p"
    fi
done
check "no kafka process left after stop_all (pids: ${pids[*]})" test -z "$left"

echo "services_test: $fails failure(s)"
[ "$fails" -eq 0 ]
