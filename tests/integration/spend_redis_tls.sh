#!/usr/bin/env bash
# spend-svc keeps its Redis counters over TLS with an ACL user, and with a password only, end to
# end, against Redis servers the test starts itself.
#
# Redis A: TLS only (no plain port), server certificate for 127.0.0.1 from a CA made here, client
# certificates required (tls-auth-clients yes), the default user off and an ACL user "tollgate".
# Redis B: plain TCP, the default user with a password (requirepass). PostgreSQL from
# tests/lib/services.sh, Apache Kafka the one given or a new one (spend_lib.sh's sp_kafka).
# Checked:
#  - rediss://tollgate@... with redis.password from the environment, tls.ca_file and a client
#    certificate: Redis comes up, every event is stored, Redis equals PostgreSQL (read back over
#    TLS with the ACL user);
#  - without the client certificate, with another CA, with a server_name the certificate does not
#    carry, with a wrong password: Redis stays down with the reason in readiness and the log
#    (handshake, "certificate verify failed", "AUTH refused: WRONGPASS"), while every event is
#    still stored in PostgreSQL (Redis is never on the path of a row);
#  - redis://:PASSWORD@... (password only) on Redis B: Redis equals PostgreSQL;
#  - the passwords appear in no spend-svc log, output, readiness or metrics answer.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck disable=SC1091
. "$HERE/spend_lib.sh"

sp_init spend-redis-tls
# shellcheck disable=SC1091
. "$TG_SOURCE_DIR/tests/lib/services.sh" || sp_die "cannot source tests/lib/services.sh"
tg_services_init "$SP_DIR/services" >/dev/null || sp_die "tg_services_init failed"
tg_pg_start >/dev/null || sp_die "postgres did not start"
sp_kafka

REDIS_PIDS=()
tls_cleanup() {
    local p
    for p in "${REDIS_PIDS[@]}"; do
        kill -TERM "$p" 2>/dev/null
    done
    for p in "${REDIS_PIDS[@]}"; do
        wait "$p" 2>/dev/null
    done
    sp_cleanup
}
trap tls_cleanup EXIT

CERTS=$SP_DIR/certs
sp_test_certs "$CERTS"

rand() { head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n'; }
PW_A="acl-$(rand)"
PW_B="req-$(rand)"

redis_launch() { # NAME ARGS...: a redis-server of this test, waits for its log's ready line
    local name=$1 dir=$SP_DIR/$1
    shift
    mkdir -p "$dir"
    redis-server --bind 127.0.0.1 --save "" --appendonly no --daemonize no --dir "$dir" \
        --logfile "$dir/redis.log" "$@" >/dev/null 2>&1 &
    REDIS_PIDS+=("$!")
    for _ in $(seq 1 100); do
        grep -q "Ready to accept connections" "$dir/redis.log" 2>/dev/null && return 0
        kill -0 "$!" 2>/dev/null || sp_die "redis $name exited: $(tail -n 5 "$dir/redis.log")"
        sleep 0.1
    done
    sp_die "redis $name did not start"
}

PORT_A=$(tg_port_pick) || sp_die "no free port"
PORT_B=$(tg_port_pick) || sp_die "no free port"
# ACL rules as arguments: the password never reaches a file of the test (ps shows it; the test
# host is the test's)
redis_launch a --port 0 --tls-port "$PORT_A" --tls-cert-file "$CERTS/server.crt" \
    --tls-key-file "$CERTS/server.key" --tls-ca-cert-file "$CERTS/ca.crt" \
    --tls-auth-clients yes --user default off --user tollgate on ">$PW_A" "~*" "&*" "+@all"
redis_launch b --port "$PORT_B" --requirepass "$PW_B"
sp_log "redis A (TLS, ACL) on $PORT_A, redis B (password) on $PORT_B"

sp_db spend_redis_tls
TOPIC=spend.redistls.$SP_UNIQ.v1
sp_topic "$TOPIC" 4
RUN=$(printf '%08x' $((RANDOM * 32768 + RANDOM)))

# config FILE URL-VARIABLE [TLS-YAML]: redis.url and redis.password from the environment
TG_REDIS_URL=unset # sp_config's placeholder, replaced below
config() {
    sp_config "$1" "$TOPIC"
    sed -i "s|^redis: {url: \"[^\"]*\"|redis: {url: os.environ/$2, password: os.environ/SP_REDIS_PW|" "$1"
    grep -q "url: os.environ/$2" "$1" || sp_die "cannot set the Redis URL variable in $1"
    [ -z "${3:-}" ] || sed -i "s|^redis: {\(.*\)}$|redis: {\1, tls: {$3}}|" "$1"
}
ready_json() { curl -s -m 2 "$(sp_url "$1")/health/readiness"; }
redis_state() { # CONFIG: "up" or "down" as readiness says
    ready_json "$1" | sed -n 's/.*"redis":"\([a-z]*\)".*/\1/p'
}
wait_redis_up() { # CONFIG SECONDS
    for _ in $(seq 1 $(($2 * 10))); do
        [ "$(redis_state "$1")" = up ] && return 0
        sleep 0.1
    done
    return 1
}
stays_down_with() { # CONFIG SECONDS TEXT: Redis down that long, readiness naming TEXT
    for _ in $(seq 1 $(($2 * 10))); do
        [ "$(redis_state "$1")" = up ] && return 1
        sleep 0.1
    done
    ready_json "$1" | grep -qF -e "$3"
}

sp_redis_cli() {
    REDISCLI_AUTH=$PW_A redis-cli --tls --cacert "$CERTS/ca.crt" --cert "$CERTS/client.crt" \
        --key "$CERTS/client.key" -h 127.0.0.1 -p "$PORT_A" --user tollgate "$@"
}

# 1. TLS, ACL user, client certificate: the counters equal PostgreSQL.
export SP_REDIS_URL_A="rediss://tollgate@127.0.0.1:$PORT_A/0" SP_REDIS_PW=$PW_A
TLS_OK="ca_file: $CERTS/ca.crt, cert_file: $CERTS/client.crt, key_file: $CERTS/client.key"
config "$SP_DIR/ok.yaml" SP_REDIS_URL_A "$TLS_OK"
sp_start "$SP_DIR/ok.yaml" ok
OK_PID=$SP_PID
sp_check "TLS with an ACL user and a client certificate: ready" sp_wait_ready "$SP_DIR/ok.yaml" 30
sp_check "Redis up over TLS" wait_redis_up "$SP_DIR/ok.yaml" 20
sp_produce --topic "$TOPIC" --count 400 --keys 20 --run "$RUN" >"$SP_DIR/p1.out" ||
    sp_die "producer failed"
sp_check "every event stored" sp_wait_rows "$(sp_field "$SP_DIR/p1.out" distinct)" 30
sp_check_totals "$SP_DIR/p1.out"
sp_check "Redis (read over TLS with the ACL user) equals PostgreSQL" sp_wait_redis 20
METRICS=$(curl -s -m 2 "$(sp_url "$SP_DIR/ok.yaml")/metrics")
sp_check "metrics say Redis is up" grep -q '^tollgate_spend_redis_up 1' <<<"$METRICS"
sp_stop "$OK_PID"
sp_check "stops cleanly (exit 0)" [ $? = 0 ]

# 2.-5. Refusals: Redis stays down with its reason; rows still go to PostgreSQL.
refused() { # NAME URL-VARIABLE TLS-YAML TEXT DESC
    local n
    config "$SP_DIR/$1.yaml" "$2" "$3"
    sp_start "$SP_DIR/$1.yaml" "$1"
    sp_check "$5: ready without Redis (rows do not wait for it)" sp_wait_ready "$SP_DIR/$1.yaml" 30
    sp_check "$5: Redis stays down, readiness says \"$4\"" \
        stays_down_with "$SP_DIR/$1.yaml" 3 "$4"
    sp_check "$5: the log names it" grep -qF -e "$4" "$SP_DIR/$1.log"
    n=$(sp_sql "SELECT count(*) FROM spend_logs")
    sp_produce --topic "$TOPIC" --count 50 --keys 5 --start "$((100000 + ${#REFUSED} * 1000))" \
        --run "$RUN" >"$SP_DIR/$1.p.out" || sp_die "producer failed"
    sp_check "$5: events still stored in PostgreSQL" \
        sp_wait_rows "$((n + $(sp_field "$SP_DIR/$1.p.out" distinct)))" 30
    sp_stop "$SP_PID"
    REFUSED+=x
}
REFUSED=
refused nocert SP_REDIS_URL_A "ca_file: $CERTS/ca.crt" "TLS:" "no client certificate"
refused otherca SP_REDIS_URL_A "ca_file: $CERTS/other-ca.crt, cert_file: $CERTS/client.crt, key_file: $CERTS/client.key" \
    "certificate verify failed" "another CA"
refused wrongname SP_REDIS_URL_A "$TLS_OK, server_name: redis.example.internal" \
    "certificate verify failed" "a server_name the certificate does not carry"
SP_REDIS_PW="wrong-$PW_A"
refused badpw SP_REDIS_URL_A "$TLS_OK" "AUTH refused: WRONGPASS" "a wrong password"
SP_REDIS_PW=$PW_A

# 6. Password only (requirepass), in the URL.
export SP_REDIS_URL_B="redis://:$PW_B@127.0.0.1:$PORT_B/0"
config "$SP_DIR/pw.yaml" SP_REDIS_URL_B
sed -i "s|, password: os.environ/SP_REDIS_PW||" "$SP_DIR/pw.yaml"
sp_redis_cli() { REDISCLI_AUTH=$PW_B redis-cli -h 127.0.0.1 -p "$PORT_B" "$@"; }
sp_start "$SP_DIR/pw.yaml" pw
sp_check "password only: ready, Redis up" wait_redis_up "$SP_DIR/pw.yaml" 30
sp_check "password only: Redis equals PostgreSQL" sp_wait_redis 30
READY=$(ready_json "$SP_DIR/pw.yaml")
METRICS=$(curl -s -m 2 "$(sp_url "$SP_DIR/pw.yaml")/metrics")
sp_check "readiness and metrics hold neither password" \
    bash -c '! grep -qF -e "$1" -e "$2" <<<"$3$4"' _ "$PW_A" "$PW_B" "$READY" "$METRICS"
sp_stop "$SP_PID"

sp_check "no spend-svc log or output holds a password" \
    bash -c '! grep -rqF -e "$1" -e "$2" "$3"/*.log "$3"/*.out' _ "$PW_A" "$PW_B" "$SP_DIR"
sp_check "the configs do not hold them either (os.environ/)" \
    bash -c '! grep -qF -e "$1" -e "$2" "$3"/*.yaml' _ "$PW_A" "$PW_B" "$SP_DIR"

sp_finish
