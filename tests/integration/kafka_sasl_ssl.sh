#!/usr/bin/env bash
# kafka_sasl_ssl.sh — both services through a SASL_SSL listener of real Apache Kafka.
#
# A 3-node KRaft cluster (tests/lib/services.sh, TG_KAFKA_SASL_SSL=1: a SASL_SSL listener on every
# node with a test CA and a server certificate made by openssl here, SCRAM-SHA-512 and PLAIN for
# one user; inter-broker and controller traffic stay PLAINTEXT on loopback). Three nodes, not
# one: the events topic's leaders are spread over the nodes, so each client opens a TLS session
# to every node and verifies every node's certificate, as against a managed cluster. Only the
# SASL_SSL listener is given to the services (TG_KAFKA_SASL_BROKERS).
#
# The mechanism: SCRAM-SHA-512 when the librdkafka the services run on can do it against Kafka
# 4, else PLAIN over the same TLS listener. librdkafka before 2.6.1 (Debian 12: 2.0.2) repeats
# the client nonce in its SCRAM client-final-message, which Kafka 4 brokers refuse as invalid
# credentials whatever the password (librdkafka#4895); check 0 pins that: with such a librdkafka,
# a router given the right SCRAM-SHA-512 password is refused and says so in readiness.
#
#   1. router-svc (fake-llm as provider; events and control topic) and spend-svc (events into
#      PostgreSQL, control topic) through SASL_SSL: both ready; a key made by /key/generate
#      (the control topic) authenticates; N chat completions with a static key and one with
#      the generated key all answer 200, and spend_logs then holds exactly those N+1 call ids,
#      one row each;
#   2. a router and a spend-svc with a wrong password: readiness 503, kafka down, the reason
#      names the SASL authentication failure; M requests to that router all answer 200 and
#      their events wait in its spool (appended M, acknowledged 0); restarted on the same spool
#      with the right password it is ready, knows the generated key (control topic replayed
#      through SASL_SSL) and delivers the M events: spend_logs gains exactly those call ids;
#   3. a router and a spend-svc trusting another CA: readiness 503, the reason names the
#      certificate verification failure;
#   4. the SASL password is in no log, readiness answer or metrics page of any instance.
# Everything binds to 127.0.0.1; everything started is stopped by PID.
#
#   kafka_sasl_ssl.sh [KAFKA_VERSION]
# KAFKA_VERSION: another Apache Kafka release than the pom's (tests/lib/services.sh,
# TG_KAFKA_VERSION). Run with 3.9.1, a broker that accepts librdkafka 2.0.2's SCRAM: the services
# then authenticate with SCRAM-SHA-512 end to end, which Kafka 4 does not allow them.
set -u
if [ -n "${1:-}" ]; then
    export TG_KAFKA_VERSION=$1
else
    unset TG_KAFKA_VERSION
fi
SRC="${TG_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}"
BIN="${TG_BUILD_DIR:?TG_BUILD_DIR unset}"
export TG_BUILD_DIR="$BIN"
for b in router-svc/router-svc spend-svc/spend-svc tests/fakes/fake-llm tests/tools/kafka_admin; do
    [ -x "$BIN/$b" ] || { echo "kafka_sasl_ssl: $BIN/$b is not built" >&2; exit 1; }
done
STATE="$(mktemp -d /tmp/tollgate-kafka-sasl-ssl.XXXXXX)"
chmod 755 "$STATE"
# Own services: the SASL_SSL listener is this test's.
unset TG_REDIS_URL TG_REDIS_PORT TG_REDIS_HOST TG_PG_DSN TG_PG_PORT TG_KAFKA_BROKERS TG_KAFKA_CTL
unset TG_KAFKA TG_KAFKA_SASL_USER TG_KAFKA_SASL_PASSWORD
# shellcheck disable=SC1091
. "$SRC/tests/lib/services.sh"
tg_services_init "$STATE/services" >/dev/null || { echo "tg_services_init failed" >&2; exit 1; }
PIDS=()
cleanup() {
    local rc=$? p
    for p in "${PIDS[@]}"; do
        _tg_stop_pid "$p" 10
    done
    tg_services_stop_all >/dev/null 2>&1
    if [ "$rc" != 0 ]; then
        for p in "$STATE"/*.log; do
            [ -f "$p" ] || continue
            echo "--- $(basename "$p") (last lines)" >&2
            tail -n 8 "$p" >&2
        done
    fi
    [ -n "${TG_KEEP:-}" ] || rm -rf "$STATE"
    exit "$rc"
}
trap cleanup EXIT
PASSES=0
FAILS=0
ok() { PASSES=$((PASSES + 1)); echo "ok   - $*"; }
bad() { FAILS=$((FAILS + 1)); echo "FAIL - $*" >&2; }
check() { # DESC CMD...
    local d=$1
    shift
    if "$@"; then ok "$d"; else bad "$d"; fi
}
die() { echo "FATAL kafka_sasl_ssl: $*" >&2; exit 1; }

T0=$(_tg_now_ms)
tg_redis_start >/dev/null || die "redis did not start"
tg_pg_start >/dev/null || die "postgres did not start"
TG_KAFKA_SASL_SSL=1 tg_kafka_start 3 "tollgate.events.v1:6,tollgate.control.v1:1" ||
    die "kafka with a SASL_SSL listener did not start"
echo "kafka_sasl_ssl: 3 nodes with SASL_SSL ready after $(($(_tg_now_ms) - T0)) ms" \
    "(SASL_SSL $TG_KAFKA_SASL_BROKERS)"
echo '{"default": {"prompt_tokens": 7, "completion_tokens": 5}}' >"$STATE/fake.json"
tg_fakellm_start "$STATE/fake.json" || die "fake-llm did not start"

LIBRDKAFKA=$(pkg-config --modversion rdkafka) || die "pkg-config does not know rdkafka"
BROKER=${TG_KAFKA_VERSION:-$(sed -n 's|.*<kafka.version>\(.*\)</kafka.version>.*|\1|p' \
    "$SRC/tests/lib/kafka/pom.xml")}
[ -n "$BROKER" ] || die "no Kafka version"
if [ "$(printf '%s\n' 2.6.1 "$LIBRDKAFKA" | sort -V | head -n 1)" = 2.6.1 ] ||
    [ "${BROKER%%.*}" -lt 4 ]; then
    MECH=SCRAM-SHA-512
else
    MECH=PLAIN
fi
echo "kafka_sasl_ssl: librdkafka $LIBRDKAFKA, Kafka $BROKER: the services authenticate with $MECH"

export KS_MASTER="sk-master-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"
export KS_KEY="sk-static-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"
export KS_PROVIDER="sk-provider-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"
export KS_KAFKA_PW="$TG_KAFKA_SASL_PASSWORD"
export KS_BAD_PW="wrong-$(head -c 8 /dev/urandom | od -An -tx1 | tr -d ' \n')"
# another CA, which did not sign the brokers' certificate
openssl req -x509 -newkey rsa:2048 -nodes -keyout "$STATE/other-ca.key" -out "$STATE/other-ca.pem" \
    -days 2 -subj "/CN=some other CA" >/dev/null 2>&1 || die "openssl: another CA"

# kafka_sec PWVAR MECH CA INDENT: the security keys of a kafka section, password from $PWVAR
kafka_sec() {
    printf '%s\n' "security_protocol: SASL_SSL" \
        "sasl: {mechanism: $2, username: $TG_KAFKA_SASL_USER, password: os.environ/$1}" \
        "ssl: {ca_file: $3}" | sed "s/^/$4/"
}
# router_config NAME PORT PWVAR MECH CA
router_config() {
    cat >"$STATE/$1.yaml" <<YAML
model_list:
  - model_name: gpt-main
    litellm_params: {model: openai/fake-main, api_base: $TG_FAKE_LLM_URL/v1,
                     api_key: os.environ/KS_PROVIDER,
                     input_cost_per_token: 0.000001, output_cost_per_token: 0.000002}
general_settings: {master_key: os.environ/KS_MASTER}
tollgate:
  listen: 127.0.0.1:$2
  kafka:
    brokers: "$TG_KAFKA_SASL_BROKERS"
    events_topic: tollgate.events.v1
    control_topic: tollgate.control.v1
$(kafka_sec "$3" "$4" "$5" "    ")
    librdkafka: {reconnect.backoff.ms: 200, reconnect.backoff.max.ms: 2000}
  spool: {dir: $STATE/spool-$1, max_bytes: 67108864}
  keys:
    - {key: os.environ/KS_KEY, key_alias: static, team_id: sasl-team}
YAML
    echo "$2" >"$STATE/$1.port"
}
# spend_config NAME PORT PWVAR MECH CA
spend_config() {
    cat >"$STATE/$1.yaml" <<YAML
listen: 127.0.0.1:$2
master_key: os.environ/KS_MASTER
kafka:
  brokers: "$TG_KAFKA_SASL_BROKERS"
  topic: tollgate.events.v1
  control_topic: tollgate.control.v1
  group_id: spend-$1
  session_timeout_ms: 6000
$(kafka_sec "$3" "$4" "$5" "  ")
  librdkafka: {reconnect.backoff.ms: 200, reconnect.backoff.max.ms: 2000}
postgres: {dsn: "$TG_PG_DSN", query_timeout_ms: 2000, retry_max_ms: 1000}
redis: {url: "$TG_REDIS_URL", timeout_ms: 300}
batch: {max_events: 5000, max_wait_ms: 100}
YAML
    echo "$2" >"$STATE/$1.port"
}
url() { echo "http://127.0.0.1:$(cat "$STATE/$1.port")"; }
# start BIN NAME: start the service with config NAME.yaml, wait for liveness; PID in PID_NAME
start() {
    local bin=$1 name=$2 pid
    TOLLGATE_FLUSH_DEADLINE_S=2 TOLLGATE_SHUTDOWN_GRACE_S=2 \
        "$BIN/$bin" --config "$STATE/$name.yaml" >>"$STATE/$name.out" 2>>"$STATE/$name.log" &
    pid=$!
    PIDS+=("$pid")
    eval "PID_${name//-/_}=$pid"
    for _ in $(seq 1 200); do
        curl -fsS -m 1 -o /dev/null "$(url "$name")/health/liveness" 2>/dev/null && return 0
        _tg_alive "$pid" || die "$name exited at start: $(tail -n 5 "$STATE/$name.log")"
        sleep 0.1
    done
    die "$name did not answer liveness"
}
# stop NAME: SIGTERM, wait; 0 when it exited 0
stop() {
    local pid
    eval "pid=\$PID_${1//-/_}"
    kill -TERM "$pid" 2>/dev/null || return 1
    wait "$pid"
}
# ready NAME SECONDS: until /health/readiness answers 200
ready() {
    for _ in $(seq 1 $(($2 * 10))); do
        curl -fsS -m 1 -o /dev/null "$(url "$1")/health/readiness" 2>/dev/null && return 0
        sleep 0.1
    done
    return 1
}
# readiness NAME: the body into NAME.ready.json, the status printed
readiness() {
    curl -sS -m 2 -o "$STATE/$1.ready.json" -w '%{http_code}' "$(url "$1")/health/readiness"
}
# wait_reason NAME JQ_PATH REGEX SECONDS: until readiness reports a reason matching REGEX
wait_reason() {
    for _ in $(seq 1 $(($4 * 10))); do
        readiness "$1" >"$STATE/$1.ready.status" 2>/dev/null
        jq -r "$2 // \"\"" "$STATE/$1.ready.json" 2>/dev/null | grep -Eq -- "$3" && return 0
        sleep 0.1
    done
    return 1
}
# chat NAME KEY: one chat completion; prints "STATUS CALL_ID"
chat() {
    local st id
    st=$(curl -sS -m 30 -D "$STATE/chat.hdr" -o /dev/null -w '%{http_code}' \
        -H "Authorization: Bearer $2" -H 'Content-Type: application/json' \
        -d '{"model":"gpt-main","messages":[{"role":"user","content":"hi"}]}' \
        "$(url "$1")/v1/chat/completions")
    id=$(tr -d '\r' <"$STATE/chat.hdr" | awk -F': ' 'tolower($1) == "x-tollgate-call-id" { print $2 }')
    echo "$st ${id:--}"
}
# chats NAME KEY COUNT OUT: COUNT chat completions; call ids of the 200s into OUT; prints the
# number of 200s
chats() {
    local i st id n=0
    : >"$4"
    for ((i = 0; i < $3; i++)); do
        read -r st id < <(chat "$1" "$2")
        if [ "$st" = 200 ] && [ "$id" != - ]; then
            echo "$id" >>"$4"
            n=$((n + 1))
        fi
    done
    echo "$n"
}
metric() { # NAME METRIC: the sample's value
    curl -fsS -m 2 "$(url "$1")/metrics" | awk -v n="$2" '$1 == n { print $2 }'
}
# metric_reaches NAME METRIC WANT: the sample reads WANT within 10 s (the router learns of an
# acknowledgement when its publisher next serves the delivery reports: up to 50 ms after Kafka
# gave it when the router is quiet, possibly after spend-svc has written the row); prints the
# last value read
metric_reaches() {
    local v=""
    for _ in $(seq 1 50); do
        v=$(metric "$1" "$2")
        [ "$v" = "$3" ] && break
        sleep 0.2
    done
    echo "$v"
}
psql_q() { psql "$TG_PG_DSN" -X -q -t -A -v ON_ERROR_STOP=1 "$@"; }
# rows_are IDS_FILE SECONDS: spend_logs holds exactly the call ids of IDS_FILE, one row each
rows_are() {
    local want got
    want=$(sort -u "$1")
    for _ in $(seq 1 $(($2 * 5))); do
        got=$(psql_q -c "SELECT call_id FROM spend_logs ORDER BY 1" 2>/dev/null | sort)
        [ "$got" = "$want" ] && break
        sleep 0.2
    done
    local n dups
    n=$(psql_q -c "SELECT count(*) FROM spend_logs" 2>/dev/null)
    dups=$(psql_q -c "SELECT count(*) - count(DISTINCT call_id) FROM spend_logs" 2>/dev/null)
    if [ "$got" != "$want" ] || [ "$n" != "$(wc -l <"$1")" ] || [ "$dups" != 0 ]; then
        echo "spend_logs: $n rows ($dups duplicates), want $(wc -l <"$1") call ids" >&2
        diff <(printf '%s\n' "$want") <(printf '%s\n' "$got") | head -n 6 >&2
        return 1
    fi
}

# 0. The known SCRAM defect of librdkafka before 2.6.1, as this build meets it.
if [ "$MECH" != SCRAM-SHA-512 ]; then
    router_config router-scram "$(tg_port_pick)" KS_KAFKA_PW SCRAM-SHA-512 "$TG_KAFKA_CA"
    start router-svc/router-svc router-scram
    wait_reason router-scram .reasons.kafka '^_AUTHENTICATION: .*SCRAM-SHA-512' 30
    echo "kafka_sasl_ssl: SCRAM-SHA-512 with the right password: $(cat "$STATE/router-scram.ready.json")"
    check "librdkafka $LIBRDKAFKA: SCRAM-SHA-512 with the right password is refused by Kafka 4 (librdkafka#4895), and readiness says so" \
        jq -e '.reasons.kafka | test("^_AUTHENTICATION: .*SASL authentication error: .*invalid credentials with SASL mechanism SCRAM-SHA-512")' \
        "$STATE/router-scram.ready.json"
    stop router-scram || bad "router-scram did not exit 0 on SIGTERM"
fi

# 1. Both services through SASL_SSL.
spend_config spend "$(tg_port_pick)" KS_KAFKA_PW "$MECH" "$TG_KAFKA_CA"
router_config router "$(tg_port_pick)" KS_KAFKA_PW "$MECH" "$TG_KAFKA_CA"
start spend-svc/spend-svc spend
start router-svc/router-svc router
check "spend-svc ready through SASL_SSL" ready spend 60
check "router-svc ready through SASL_SSL (the control topic replayed)" ready router 60
RS=$(readiness router)
check "router-svc readiness 200 with keys and kafka up (got $RS)" bash -c \
    '[ "$1" = 200 ] && jq -e ".dependencies.kafka == \"up\" and .dependencies.keys == \"up\"" "$2" >/dev/null' \
    _ "$RS" "$STATE/router.ready.json"
GEN=$(curl -sS -m 30 -o "$STATE/generate.json" -w '%{http_code}' \
    -H "Authorization: Bearer $KS_MASTER" -H 'Content-Type: application/json' \
    -d '{"key_alias":"through-sasl-ssl","models":["gpt-main"]}' "$(url router)/key/generate")
check "/key/generate through the control topic on SASL_SSL answers 200 (got $GEN)" [ "$GEN" = 200 ]
GENKEY=$(jq -r '.key // ""' "$STATE/generate.json")
N=60
OKS=$(chats router "$KS_KEY" "$N" "$STATE/ids1")
check "$N chat completions through the router all answer 200 (got $OKS)" [ "$OKS" = "$N" ]
read -r ST ID < <(chat router "$GENKEY")
check "the generated key authenticates (got $ST)" [ "$ST" = 200 ]
[ "$ID" != - ] && echo "$ID" >>"$STATE/ids1"
check "spend_logs holds exactly the $((N + 1)) call ids, one row each" rows_are "$STATE/ids1" 60
ACK=$(metric_reaches router tollgate_router_events_acked_total $((N + 1)))
check "router-svc: Kafka acknowledged all $((N + 1)) events (got ${ACK:-?})" [ "${ACK:-0}" = $((N + 1)) ]
check "spend-svc ready" ready spend 5

# 2. A wrong password, then the right one on the same spool; 3. another CA. All at once.
router_config router-badpw "$(tg_port_pick)" KS_BAD_PW "$MECH" "$TG_KAFKA_CA"
spend_config spend-badpw "$(tg_port_pick)" KS_BAD_PW "$MECH" "$TG_KAFKA_CA"
router_config router-badca "$(tg_port_pick)" KS_KAFKA_PW "$MECH" "$STATE/other-ca.pem"
spend_config spend-badca "$(tg_port_pick)" KS_KAFKA_PW "$MECH" "$STATE/other-ca.pem"
for n in router-badpw router-badca; do start router-svc/router-svc "$n"; done
for n in spend-badpw spend-badca; do start spend-svc/spend-svc "$n"; done
# router_down_with / spend_down_with PREFIX REGEX: the readiness answer saved by wait_reason was
# a 503 with kafka down and a reason matching REGEX
router_down_with() {
    [ "$(cat "$1.ready.status")" = 503 ] && jq -e --arg re "$2" \
        '.dependencies.kafka == "down" and (.reasons.kafka | test($re))' "$1.ready.json" >/dev/null
}
spend_down_with() {
    [ "$(cat "$1.ready.status")" = 503 ] && jq -e --arg re "$2" \
        '.kafka == "down" and (.kafka_reason | test($re))' "$1.ready.json" >/dev/null
}
AUTH_RE='^_AUTHENTICATION: .*SASL authentication error: .*(invalid credentials|Invalid username or password)'
CERT_RE='^_SSL: .*SSL handshake failed: .*certificate verify failed'
wait_reason router-badpw .reasons.kafka "$AUTH_RE" 30
echo "kafka_sasl_ssl: router, wrong password: $(cat "$STATE/router-badpw.ready.json")"
check "router-svc with a wrong password: readiness 503, kafka down" bash -c \
    '[ "$(cat "$1.ready.status")" = 503 ] &&
     jq -e ".dependencies.kafka == \"down\"" "$1.ready.json" >/dev/null' _ "$STATE/router-badpw"
check "router-svc with a wrong password: the reason names the SASL authentication failure" \
    jq -e --arg re "$AUTH_RE" '.reasons.kafka | test($re)' "$STATE/router-badpw.ready.json"
wait_reason spend-badpw .kafka_reason "$AUTH_RE" 30
echo "kafka_sasl_ssl: spend-svc, wrong password: $(cat "$STATE/spend-badpw.ready.json")"
check "spend-svc with a wrong password: readiness 503, kafka down, the reason names the SASL authentication failure" \
    spend_down_with "$STATE/spend-badpw" "$AUTH_RE"
wait_reason router-badca .reasons.kafka "$CERT_RE" 30
echo "kafka_sasl_ssl: router, another CA: $(cat "$STATE/router-badca.ready.json")"
check "router-svc trusting another CA: readiness 503, the reason names the certificate verification failure" \
    router_down_with "$STATE/router-badca" "$CERT_RE"
wait_reason spend-badca .kafka_reason "$CERT_RE" 30
echo "kafka_sasl_ssl: spend-svc, another CA: $(cat "$STATE/spend-badca.ready.json")"
check "spend-svc trusting another CA: readiness 503, the reason names the certificate verification failure" \
    spend_down_with "$STATE/spend-badca" "$CERT_RE"

M=30
OKS=$(chats router-badpw "$KS_KEY" "$M" "$STATE/ids2")
check "$M requests to the router with a wrong password all answer 200 (got $OKS)" [ "$OKS" = "$M" ]
APP=$(metric router-badpw tollgate_router_events_appended_total)
ACK=$(metric router-badpw tollgate_router_events_acked_total)
check "their events wait in its spool (appended ${APP:-?}, acknowledged ${ACK:-?})" \
    [ "${APP:-x}|${ACK:-x}" = "$M|0" ]
check "none of them reached spend_logs" \
    [ "$(psql_q -c "SELECT count(*) FROM spend_logs")" = $((N + 1)) ]
for n in spend-badpw spend-badca router-badca; do
    stop "$n" || bad "$n did not exit 0 on SIGTERM"
done
stop router-badpw || bad "router-badpw did not exit 0 on SIGTERM"
# the same router, same spool, the right password
sed -i 's|password: os.environ/KS_BAD_PW|password: os.environ/KS_KAFKA_PW|' "$STATE/router-badpw.yaml"
grep -q 'password: os.environ/KS_KAFKA_PW' "$STATE/router-badpw.yaml" || die "cannot fix the password"
start router-svc/router-svc router-badpw
check "restarted with the right password: ready (control topic replayed through SASL_SSL)" \
    ready router-badpw 60
read -r ST ID < <(chat router-badpw "$GENKEY")
check "it knows the generated key from the control topic (got $ST)" [ "$ST" = 200 ]
[ "$ID" != - ] && echo "$ID" >>"$STATE/ids2"
cat "$STATE/ids1" "$STATE/ids2" >"$STATE/ids12"
check "the spooled events are delivered: spend_logs holds exactly the $((N + M + 2)) call ids" \
    rows_are "$STATE/ids12" 60
ACK=$(metric_reaches router-badpw tollgate_router_events_acked_total $((M + 1)))
check "router-svc: Kafka acknowledged the $((M + 1)) events of the restarted router (got ${ACK:-?})" \
    [ "${ACK:-0}" = $((M + 1)) ]

# 4. The password nowhere.
for n in router router-badpw spend; do
    readiness "$n" >/dev/null
    curl -sS -m 2 -o "$STATE/$n.metrics.txt" "$(url "$n")/metrics"
done
check "readiness answers and metrics pages were read" \
    bash -c 'for f in "$@"; do [ -s "$f" ] || exit 1; done' _ "$STATE"/router.ready.json \
    "$STATE"/spend.metrics.txt "$STATE"/router.metrics.txt "$STATE"/router-badpw.metrics.txt
check "the SASL passwords are in no log, readiness answer or metrics page" \
    bash -c '! grep -rqF -e "$1" -e "$2" "$3"/*.log "$3"/*.out "$3"/*.json "$3"/*.txt' \
    _ "$KS_KAFKA_PW" "$KS_BAD_PW" "$STATE"
for n in router router-badpw spend; do
    stop "$n" || bad "$n did not exit 0 on SIGTERM"
done
echo "kafka_sasl_ssl: done in $(($(_tg_now_ms) - T0)) ms"
echo "$PASSES passed, $FAILS failed"
[ "$FAILS" = 0 ]
