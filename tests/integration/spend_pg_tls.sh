#!/usr/bin/env bash
# spend-svc writes to PostgreSQL over TLS, verifying the server (sslmode=verify-full), end to end.
#
# The test starts its own throwaway PostgreSQL 15 cluster (as tests/lib/services.sh does, as the
# postgres user, on a free loopback port) with ssl=on and a server certificate for 127.0.0.1
# signed by a CA made here; pg_hba takes only TLS connections over TCP (hostssl,
# scram-sha-256) and rejects the rest (hostnossl reject). Redis comes from tests/lib/services.sh,
# Kafka is the one given or a new one (spend_lib.sh's sp_kafka). Checked:
#  - DSN ...?sslmode=verify-full&sslrootcert=<the CA>: spend-svc becomes ready, stores every
#    event produced (exact totals), and its connections are TLS (pg_stat_ssl);
#  - sslrootcert=<another CA>: never ready, the log names the certificate failure;
#  - sslmode=disable: refused by the server (no TLS), never ready;
#  - a wrong password: never ready, the log names the authentication failure;
#  - a malformed DSN whose libpq error would quote the password: logged without the reason;
#  - the password (in the DSN, from the environment) appears in no spend-svc log or output,
#    nor in a readiness or metrics answer.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck disable=SC1091
. "$HERE/spend_lib.sh"

PG_BIN=${TG_PG_BIN:-/usr/lib/postgresql/15/bin}
[ -x "$PG_BIN/postgres" ] || sp_die "missing $PG_BIN/postgres"

sp_init spend-pg-tls
# shellcheck disable=SC1091
. "$TG_SOURCE_DIR/tests/lib/services.sh" || sp_die "cannot source tests/lib/services.sh"
tg_services_init "$SP_DIR/services" >/dev/null || sp_die "tg_services_init failed"
tg_redis_start >/dev/null || sp_die "redis did not start"
sp_kafka

PG_ROOT=""
PG_PID=""
# a PostgreSQL binary as the postgres user when root: services.sh's own helper
pg_run() { TG_PG_BIN=$PG_BIN _tg_pg_run "$@"; }

tls_cleanup() {
    if [ -n "$PG_PID" ] && kill -0 "$PG_PID" 2>/dev/null; then
        pg_run pg_ctl -D "$PG_ROOT/data" -m immediate -w -t 20 stop >/dev/null 2>&1 ||
            kill -KILL "$PG_PID" 2>/dev/null
    fi
    [ -z "$PG_ROOT" ] || [ "${SP_KEEP:-0}" = 1 ] || rm -rf "$PG_ROOT"
    sp_cleanup
}
trap tls_cleanup EXIT

# Certificates: a CA, another CA, a server certificate for 127.0.0.1 from the first.
CERTS=$SP_DIR/certs
sp_test_certs "$CERTS"

# The cluster: under /tmp, owned by postgres (the state dir may sit where postgres cannot go).
PG_ROOT=$(mktemp -d /tmp/tollgate-pgtls.XXXXXX) || sp_die "mktemp"
chmod 700 "$PG_ROOT"
cp "$CERTS/server.crt" "$CERTS/server.key" "$PG_ROOT/"
chmod 600 "$PG_ROOT/server.key"
PG_PASSWORD="pw-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"
printf '%s\n' "$PG_PASSWORD" >"$PG_ROOT/pwfile"
if [ "$(id -u)" -eq 0 ]; then
    chown -R postgres:postgres "$PG_ROOT" || sp_die "chown"
fi
pg_run initdb -D "$PG_ROOT/data" -U postgres --auth-local=trust --auth-host=scram-sha-256 \
    --pwfile="$PG_ROOT/pwfile" -E UTF8 --locale=C --no-sync >"$SP_DIR/initdb.log" 2>&1 ||
    sp_die "initdb failed: $(tail -n 5 "$SP_DIR/initdb.log")"
rm -f "$PG_ROOT/pwfile"
cat >"$PG_ROOT/data/pg_hba.conf" <<EOF
local all all trust
hostssl all all 127.0.0.1/32 scram-sha-256
hostnossl all all 127.0.0.1/32 reject
EOF
PG_PORT=$(tg_port_pick) || sp_die "no free port"
pg_run pg_ctl -D "$PG_ROOT/data" -l "$PG_ROOT/postgres.log" -w -t 60 \
    -o "-c listen_addresses=127.0.0.1 -c port=$PG_PORT -c unix_socket_directories=$PG_ROOT/data -c fsync=off -c ssl=on -c ssl_cert_file=$PG_ROOT/server.crt -c ssl_key_file=$PG_ROOT/server.key" \
    start >"$SP_DIR/pg_ctl.log" 2>&1 || sp_die "postgres did not start: $(tail -n 5 "$SP_DIR/pg_ctl.log")"
PG_PID=$(head -n 1 "$PG_ROOT/data/postmaster.pid")
psql_local() { psql -X -q -t -A -v ON_ERROR_STOP=1 -h "$PG_ROOT/data" -p "$PG_PORT" -U postgres "$@"; }
psql_local -d postgres -c "CREATE DATABASE tollgate" >/dev/null || sp_die "CREATE DATABASE failed"
sp_log "postgres with TLS on 127.0.0.1:$PG_PORT (pid $PG_PID)"

TOPIC=spend.pgtls.$SP_UNIQ.v1
sp_topic "$TOPIC" 4
RUN=$(printf '%08x' $((RANDOM * 32768 + RANDOM)))
BASE_DSN="postgresql://postgres@127.0.0.1:$PG_PORT/tollgate"
# spend_lib's helpers (sp_sql, sp_wait_rows, sp_check_totals) query through the socket
SP_DSN="postgresql:///tollgate?host=$PG_ROOT/data&port=$PG_PORT&user=postgres"
export SP_DSN

tls_config() { # FILE DSN-VARIABLE
    sp_config "$1" "$TOPIC"
    sed -i "s|^postgres: {dsn: \"[^\"]*\"|postgres: {dsn: os.environ/$2|" "$1"
    grep -q "dsn: os.environ/$2" "$1" || sp_die "cannot set the DSN variable in $1"
}

never_ready() { # CONFIG SECONDS: readiness stays false that long
    ! sp_wait_ready "$1" "$2"
}

# 1. verify-full with the right CA, the password from the environment.
export SP_TLS_DSN="postgresql://postgres:$PG_PASSWORD@127.0.0.1:$PG_PORT/tollgate?sslmode=verify-full&sslrootcert=$CERTS/ca.crt"
tls_config "$SP_DIR/ok.yaml" SP_TLS_DSN
sp_start "$SP_DIR/ok.yaml" ok
OK_PID=$SP_PID
sp_check "sslmode=verify-full with the CA: ready" sp_wait_ready "$SP_DIR/ok.yaml" 30
sp_produce --topic "$TOPIC" --count 500 --keys 20 --run "$RUN" --dup-pct 10 \
    >"$SP_DIR/produce.out" || sp_die "producer failed"
sp_check "every event stored over TLS" sp_wait_rows "$(sp_field "$SP_DIR/produce.out" distinct)" 30
sleep 0.5
sp_check_totals "$SP_DIR/produce.out"
N_SSL=$(psql_local -d postgres -c "SELECT count(*) FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid)
                                    WHERE a.datname = 'tollgate' AND a.client_addr IS NOT NULL AND s.ssl")
N_ALL=$(psql_local -d postgres -c "SELECT count(*) FROM pg_stat_activity
                                    WHERE datname = 'tollgate' AND client_addr IS NOT NULL")
sp_check "spend-svc's connections are TLS ($N_SSL of $N_ALL)" \
    [ "$N_ALL" -ge 1 -a "$N_SSL" = "$N_ALL" ]
READY=$(curl -s -m 2 "$(sp_url "$SP_DIR/ok.yaml")/health/readiness")
METRICS=$(curl -s -m 2 "$(sp_url "$SP_DIR/ok.yaml")/metrics")
sp_check "readiness and metrics do not hold the password" \
    bash -c '! grep -qF -e "$1" <<<"$2$3"' _ "$PG_PASSWORD" "$READY" "$METRICS"
sp_stop "$OK_PID"
sp_check "stops cleanly (exit 0)" [ $? = 0 ]

# 2. Another CA: the server's certificate does not verify.
export SP_TLS_DSN_OTHER="postgresql://postgres:$PG_PASSWORD@127.0.0.1:$PG_PORT/tollgate?sslmode=verify-full&sslrootcert=$CERTS/other-ca.crt"
tls_config "$SP_DIR/other.yaml" SP_TLS_DSN_OTHER
sp_start "$SP_DIR/other.yaml" other
sp_check "sslrootcert=<another CA>: never ready" never_ready "$SP_DIR/other.yaml" 5
sp_check "the log names the certificate failure" grep -q "certificate verify failed" "$SP_DIR/other.log"
sp_stop "$SP_PID"

# 3. No TLS: refused by the server.
export SP_TLS_DSN_PLAIN="postgresql://postgres:$PG_PASSWORD@127.0.0.1:$PG_PORT/tollgate?sslmode=disable"
tls_config "$SP_DIR/plain.yaml" SP_TLS_DSN_PLAIN
sp_start "$SP_DIR/plain.yaml" plain
sp_check "sslmode=disable: never ready" never_ready "$SP_DIR/plain.yaml" 5
sp_check "the log names the refusal" grep -q "no encryption" "$SP_DIR/plain.log"
sp_stop "$SP_PID"

# 4. A wrong password over verified TLS.
export SP_TLS_DSN_BADPW="postgresql://postgres:wrong-$PG_PASSWORD@127.0.0.1:$PG_PORT/tollgate?sslmode=verify-full&sslrootcert=$CERTS/ca.crt"
tls_config "$SP_DIR/badpw.yaml" SP_TLS_DSN_BADPW
sp_start "$SP_DIR/badpw.yaml" badpw
sp_check "a wrong password: never ready" never_ready "$SP_DIR/badpw.yaml" 5
sp_check "the log names the authentication failure" \
    grep -q "password authentication failed" "$SP_DIR/badpw.log"
sp_stop "$SP_PID"

# 5. A malformed DSN whose error libpq words by quoting the password (a bad percent escape in it).
export SP_TLS_DSN_BAD="postgresql://postgres:$PG_PASSWORD%zz@127.0.0.1:$PG_PORT/tollgate?sslmode=verify-full&sslrootcert=$CERTS/ca.crt"
tls_config "$SP_DIR/baddsn.yaml" SP_TLS_DSN_BAD
sp_start "$SP_DIR/baddsn.yaml" baddsn
sp_check "a malformed DSN: never ready" never_ready "$SP_DIR/baddsn.yaml" 3
sp_check "the log says the reason is not shown" grep -q "postgres connect failed.*not shown" \
    "$SP_DIR/baddsn.log"
sp_stop "$SP_PID"

# The password was in every DSN above: it must be in no log or output of spend-svc.
sp_check "no spend-svc log or output holds the password" \
    bash -c '! grep -rqF -e "$1" "$2"/*.log "$2"/*.out' _ "$PG_PASSWORD" "$SP_DIR"
sp_check "the configs do not hold it either (os.environ/)" \
    bash -c '! grep -qF -e "$1" "$2"/*.yaml' _ "$PG_PASSWORD" "$SP_DIR"

sp_finish
