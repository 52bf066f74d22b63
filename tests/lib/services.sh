# shellcheck shell=bash
# tests/lib/services.sh: throwaway Redis, PostgreSQL 15, Apache Kafka (or devkafka) and fake-llm
# on loopback.
#
# Shared by deploy/local/up, tests/run and every integration/e2e/chaos test. Source it, then
# call the functions from the shell itself (not from a $(...) subshell: they export variables
# and record PIDs):
#
#   source tests/lib/services.sh
#   tg_services_init DIR             state dir for pids, logs and data (created)
#   trap tg_services_stop_all EXIT   stops everything started, by PID; safe to call twice
#   tg_redis_start                   -> TG_REDIS_HOST TG_REDIS_PORT TG_REDIS_URL
#   tg_pg_start                      -> TG_PG_PORT TG_PG_DSN (database "tollgate", user postgres)
#   tg_kafka_start [NODES] [TOPICS]  Apache Kafka, KRaft, NODES combined broker+controller
#                                    nodes (default 3); TOPICS = "name:partitions,..." (default
#                                    the two tollgate topics) -> TG_KAFKA_BROKERS,
#                                    TG_KAFKA_KIND=apache. With TG_KAFKA=devkafka: devkafka.
#                                    TG_KAFKA_SASL_SSL=1 (default 0) adds a SASL_SSL listener
#                                    (SCRAM-SHA-512 and PLAIN, certificates made here by openssl)
#                                    to every node -> TG_KAFKA_SASL_BROKERS TG_KAFKA_CA
#                                    TG_KAFKA_SASL_USER TG_KAFKA_SASL_PASSWORD (see below)
#   tg_devkafka_start [BROKERS] [TOPICS]  devkafka (librdkafka's mock cluster, default 1 broker)
#                                    -> TG_KAFKA_BROKERS TG_KAFKA_CTL, TG_KAFKA_KIND=devkafka
#   tg_kafka_topic NAME PARTITIONS [KEY=VALUE...]  create a topic on whichever of the two runs
#                                    (topic configs: Apache Kafka only)
#   tg_kafka_given                   0 when this shell was handed a running Kafka (see below)
#   tg_kafka_pids                    PIDs of the Apache Kafka nodes this shell started
#   tg_fakellm_start [CONFIG.json]   -> TG_FAKE_LLM_URL
#
# Fault helpers (chaos suite): tg_redis_hang / tg_redis_resume (SIGSTOP/SIGCONT),
# tg_redis_restart (shutdown, start empty on the same port), tg_redis_stop / tg_redis_relaunch
# (the two halves of a restart, with an outage between), tg_pg_pause / tg_pg_resume
# (SIGSTOP/SIGCONT the postmaster and all its children); on Apache Kafka tg_kafka_leader TOPIC
# PARTITION, tg_kafka_node_kill I [SIGNAL], tg_kafka_node_start I (same ports and data),
# tg_kafka_node_pid I; on devkafka only tg_kafka_down / tg_kafka_up (all brokers, through its
# control channel) and tg_kafka_ctl "COMMAND" (any control command).
# tg_services_pids prints every PID started (for leftover checks).
#
# Ports are picked at random in 20000-31999, checked free with `ss` and reserved under
# /tmp/tollgate-ports (so concurrent users do not collide); fixed ports can be requested with
# TG_FIXED_REDIS_PORT, TG_FIXED_PG_PORT, TG_FIXED_KAFKA_PORTS (comma list, one per broker),
# TG_FIXED_KAFKA_CONTROLLER_PORTS (Apache Kafka, one per node), TG_FIXED_KAFKA_SASL_PORTS
# (Apache Kafka with TG_KAFKA_SASL_SSL=1, one per node), TG_FIXED_KAFKA_CTL_PORT (devkafka),
# TG_FIXED_FAKELLM_PORT. Binaries: TG_BUILD_DIR (default build/local) or
# TG_DEVKAFKA_BIN / TG_FAKE_LLM_BIN / TG_KAFKA_ADMIN_BIN; Kafka's jars: TG_KAFKA_HOME (default
# build/kafka, filled by Maven from tests/lib/kafka/pom.xml on first use). Every start waits for
# readiness for at most TG_START_TIMEOUT_S (default 60) seconds (a whole Kafka cluster:
# TG_KAFKA_START_TIMEOUT_S, default 120) and fails loudly with the log tail.

TG_SOURCE_DIR=${TG_SOURCE_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
TG_BUILD_DIR=${TG_BUILD_DIR:-$TG_SOURCE_DIR/build/local}
TG_PG_BIN=${TG_PG_BIN:-/usr/lib/postgresql/15/bin}
# shellcheck source=tests/lib/ports.sh
. "$TG_SOURCE_DIR/tests/lib/ports.sh"
TG_START_TIMEOUT_S=${TG_START_TIMEOUT_S:-60}
export TG_SOURCE_DIR TG_BUILD_DIR

_tg_log() {
    printf 'tollgate-services: %s\n' "$*" >&2
}

# The fork-free helpers (_tg_now_ms_set, _tg_sleep, tg_http_get): nofork.sh.
. "$(dirname "${BASH_SOURCE[0]}")/nofork.sh"

_tg_log_tail() {
    local log=$1
    [ -f "$log" ] || return 0
    _tg_log "last lines of $log:"
    tail -n 30 "$log" | sed 's/^/  | /' >&2
}

_tg_need_init() {
    if [ -z "${TG_STATE_DIR:-}" ] || [ ! -d "$TG_STATE_DIR" ]; then
        _tg_log "call tg_services_init DIR first"
        return 1
    fi
}

# tg_services_init DIR: create the state dir and start a fresh registry.
tg_services_init() {
    local dir=${1:-}
    if [ -z "$dir" ]; then
        _tg_log "usage: tg_services_init DIR"
        return 1
    fi
    mkdir -p "$dir" || return 1
    TG_STATE_DIR=$(cd "$dir" && pwd)
    export TG_STATE_DIR
    : >"$TG_STATE_DIR/services.list"
    : >"$TG_STATE_DIR/ports.list"
    : >"$TG_STATE_DIR/dirs.list"
    _TG_STOPPING=0
}

# _tg_register KIND PID / _tg_unregister KIND PID: the registry tg_services_stop_all reads.
_tg_register() {
    printf '%s %s\n' "$1" "$2" >>"$TG_STATE_DIR/services.list"
}

_tg_unregister() {
    local f=$TG_STATE_DIR/services.list
    [ -f "$f" ] || return 0
    grep -v -x -- "$1 $2" "$f" >"$f.tmp" || true
    mv -f "$f.tmp" "$f"
}

# tg_port_pick: print a free, reserved port in 20000-31999 (below the ephemeral range).
tg_port_pick() {
    _tg_need_init || return 1
    tg_port_take "$TG_STATE_DIR/ports.list"
}

# _tg_port_fixed PORT: reserve a port that was asked for explicitly; fail loudly if taken.
_tg_port_fixed() {
    local port=$1 out
    # Only a listener makes a fixed port unusable (servers bind with SO_REUSEADDR, so
    # TIME_WAIT leftovers of an earlier run do not count).
    out=$(ss -ltnpH "( sport = :$port )" 2>/dev/null || true)
    if [ -n "$out" ]; then
        _tg_log "port $port is already in use: $out"
        return 1
    fi
    _tg_port_reserve "$port" "$TG_STATE_DIR/ports.list" || true
    printf '%s\n' "$port"
}

# _tg_spawn KIND LOG CMD...: start CMD in the background, register it; PID in _TG_PID.
_tg_spawn() {
    local kind=$1 log=$2
    shift 2
    "$@" >>"$log" 2>&1 </dev/null &
    _TG_PID=$!
    _tg_register "$kind" "$_TG_PID"
}

# _tg_wait_ready DESC PID LOG CMD...: poll CMD until it succeeds, PID dies, or the timeout.
_tg_wait_ready() {
    local desc=$1 pid=$2 log=$3 deadline polls=0
    shift 3
    _tg_now_ms_set
    deadline=$((_TG_NOW_MS + TG_START_TIMEOUT_S * 1000))
    while :; do
        if "$@" >/dev/null 2>&1; then
            return 0
        fi
        if [ -n "$pid" ] && ! _tg_alive "$pid"; then
            _tg_log "$desc exited before becoming ready"
            _tg_log_tail "$log"
            return 1
        fi
        _tg_now_ms_set
        if [ "$_TG_NOW_MS" -ge "$deadline" ]; then
            _tg_log "$desc not ready after ${TG_START_TIMEOUT_S}s"
            _tg_log_tail "$log"
            return 1
        fi
        # Ten times a second for the first 2 s (most services are up by then), then twice a
        # second: a JVM's start takes seconds, and CMD may start a process per poll.
        polls=$((polls + 1))
        if [ "$polls" -le 20 ]; then _tg_sleep 0.1; else _tg_sleep 0.5; fi
    done
}

# _tg_stop_pid PID [GRACE_S]: SIGCONT + SIGTERM, wait, then SIGKILL. Only the given PID.
_tg_stop_pid() {
    local pid=$1 grace=${2:-10} deadline
    _tg_alive "$pid" || return 0
    kill -CONT "$pid" 2>/dev/null || true
    kill -TERM "$pid" 2>/dev/null || true
    _tg_now_ms_set
    deadline=$((_TG_NOW_MS + grace * 1000))
    while _tg_alive "$pid"; do
        _tg_now_ms_set
        if [ "$_TG_NOW_MS" -ge "$deadline" ]; then
            _tg_log "pid $pid did not stop within ${grace}s, killing it"
            kill -KILL "$pid" 2>/dev/null || true
            sleep 0.2
            break
        fi
        _tg_sleep 0.05
    done
    wait "$pid" 2>/dev/null || true
    return 0
}

# _tg_stop_pids GRACE_S PID...: _tg_stop_pid for several processes at once (the nodes of a
# Kafka cluster: stopped one after the other, the last ones would wait for a quorum that is gone).
_tg_stop_pids() {
    local grace=$1 pid deadline left
    shift
    for pid in "$@"; do
        _tg_alive "$pid" || continue
        kill -CONT "$pid" 2>/dev/null || true
        kill -TERM "$pid" 2>/dev/null || true
    done
    _tg_now_ms_set
    deadline=$((_TG_NOW_MS + grace * 1000))
    while :; do
        left=
        for pid in "$@"; do
            _tg_alive "$pid" && left="$left $pid"
        done
        [ -z "$left" ] && break
        _tg_now_ms_set
        if [ "$_TG_NOW_MS" -ge "$deadline" ]; then
            _tg_log "pids$left did not stop within ${grace}s, killing them"
            for pid in $left; do
                kill -KILL "$pid" 2>/dev/null || true
            done
            sleep 0.2
            break
        fi
        _tg_sleep 0.05
    done
    for pid in "$@"; do
        wait "$pid" 2>/dev/null || true
    done
    return 0
}

# ---------------------------------------------------------------------------------- Redis

_tg_redis_ping() {
    [ "$(redis-cli -h 127.0.0.1 -p "$1" ping 2>/dev/null)" = "PONG" ]
}

_tg_redis_launch() {
    local port=$1 dir=$TG_STATE_DIR/redis
    mkdir -p "$dir" || return 1
    _tg_spawn redis "$dir/redis.log" redis-server --port "$port" --bind 127.0.0.1 \
        --save "" --appendonly no --daemonize no --dir "$dir" --logfile "" \
        --protected-mode yes
    _TG_REDIS_PID=$_TG_PID
    _tg_wait_ready "redis on port $port" "$_TG_REDIS_PID" "$dir/redis.log" \
        _tg_redis_ping "$port" || return 1
    TG_REDIS_HOST=127.0.0.1
    TG_REDIS_PORT=$port
    TG_REDIS_URL=redis://127.0.0.1:$port/0
    export TG_REDIS_HOST TG_REDIS_PORT TG_REDIS_URL
}

# tg_redis_start: Redis without persistence on 127.0.0.1.
tg_redis_start() {
    local port
    _tg_need_init || return 1
    if [ -n "${TG_FIXED_REDIS_PORT:-}" ]; then
        port=$(_tg_port_fixed "$TG_FIXED_REDIS_PORT") || return 1
    else
        port=$(tg_port_pick) || return 1
    fi
    _tg_redis_launch "$port"
}

tg_redis_hang() {
    kill -STOP "${_TG_REDIS_PID:?redis not started}"
}

tg_redis_resume() {
    kill -CONT "${_TG_REDIS_PID:?redis not started}"
}

# tg_redis_stop: stop Redis, keeping its port reserved (clients see connection refused);
# tg_redis_relaunch starts it again, empty, on the same port.
tg_redis_stop() {
    local pid=${_TG_REDIS_PID:?redis not started}
    _tg_stop_pid "$pid" 10
    _tg_unregister redis "$pid"
}

tg_redis_relaunch() {
    _tg_redis_launch "${TG_REDIS_PORT:?redis not started}"
}

# tg_redis_restart: stop Redis (data is lost: it is a cache) and start it empty, same port.
tg_redis_restart() {
    tg_redis_stop && tg_redis_relaunch
}

# ----------------------------------------------------------------------------- PostgreSQL

# _tg_pg_run CMD ARGS...: run a PostgreSQL server binary as the postgres user when root.
_tg_pg_run() {
    local cmd=$1
    shift
    if [ "$(id -u)" -eq 0 ]; then
        runuser -u postgres -- "$TG_PG_BIN/$cmd" "$@"
    else
        "$TG_PG_BIN/$cmd" "$@"
    fi
}

_tg_pg_query() {
    psql -X -q -A -t -h 127.0.0.1 -p "$1" -U postgres -d "$2" -c "$3"
}

# _tg_pg_root PREFIX: a new directory /tmp/PREFIX.XXXXXX for a cluster, registered for removal,
# mode 700 and owned by postgres when root (under /tmp: the state dir may sit where postgres
# cannot go); its path on stdout.
_tg_pg_root() {
    local root
    root=$(mktemp -d "/tmp/$1.XXXXXX") || return 1
    printf '%s\n' "$root" >>"$TG_STATE_DIR/dirs.list"
    chmod 700 "$root"
    if [ "$(id -u)" -eq 0 ]; then
        chown postgres:postgres "$root" || return 1
    fi
    printf '%s\n' "$root"
}

# _tg_pg_initdb DATA LOG: a new cluster in DATA (its parent owned by postgres when root).
_tg_pg_initdb() {
    if ! _tg_pg_run initdb -D "$1" -U postgres -A trust -E UTF8 --locale=C --no-sync \
        >"$2" 2>&1; then
        _tg_log "initdb failed"
        _tg_log_tail "$2"
        return 1
    fi
}

# tg_pg_template_make: initdb once into a directory of this registry and export TG_PG_TEMPLATE:
# every tg_pg_start from then on, in this shell and in the processes it starts, copies that
# cluster instead of running initdb (tests/run makes one for the whole run).
tg_pg_template_make() {
    local root
    _tg_need_init || return 1
    root=$(_tg_pg_root tollgate-pgtpl) || return 1
    _tg_pg_initdb "$root/data" "$root/initdb.log" || return 1
    TG_PG_TEMPLATE=$root/data
    export TG_PG_TEMPLATE
}

# tg_pg_start: a throwaway PostgreSQL 15 cluster (fsync off) with database "tollgate"; a copy
# of TG_PG_TEMPLATE when one is set (tg_pg_template_make), else made by initdb.
tg_pg_start() {
    local port root data pid
    _tg_need_init || return 1
    if [ -n "${TG_FIXED_PG_PORT:-}" ]; then
        port=$(_tg_port_fixed "$TG_FIXED_PG_PORT") || return 1
    else
        port=$(tg_port_pick) || return 1
    fi
    root=$(_tg_pg_root tollgate-pg) || return 1
    data=$root/data
    if [ -n "${TG_PG_TEMPLATE:-}" ] && [ -f "$TG_PG_TEMPLATE/PG_VERSION" ]; then
        # a copy of the cluster tg_pg_template_make made: what initdb would write (a whole start
        # took 566 ms so, 1,402 ms with initdb; each chaos scenario and spend test starts one)
        if ! cp -a "$TG_PG_TEMPLATE" "$data" 2>"$root/initdb.log"; then
            _tg_log "copy of the template cluster $TG_PG_TEMPLATE failed"
            _tg_log_tail "$root/initdb.log"
            return 1
        fi
    elif ! _tg_pg_initdb "$data" "$root/initdb.log"; then
        return 1
    fi
    cat >>"$data/postgresql.conf" <<EOF
# tollgate throwaway cluster: speed over durability
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = '$data'
fsync = off
synchronous_commit = off
full_page_writes = off
max_connections = 200
EOF
    cat >"$data/pg_hba.conf" <<EOF
local all all trust
host all all 127.0.0.1/32 trust
EOF
    ln -sf "$root/postgres.log" "$TG_STATE_DIR/postgres.log" 2>/dev/null || true
    if ! _tg_pg_run pg_ctl -D "$data" -l "$root/postgres.log" -w -t "$TG_START_TIMEOUT_S" \
        start >"$root/pg_ctl.log" 2>&1; then
        _tg_log "pg_ctl start failed (port $port)"
        _tg_log_tail "$root/pg_ctl.log"
        _tg_log_tail "$root/postgres.log"
        pid=$(head -n 1 "$data/postmaster.pid" 2>/dev/null || true)
        [ -n "$pid" ] && _tg_register pg "$pid"
        return 1
    fi
    pid=$(head -n 1 "$data/postmaster.pid")
    _tg_register pg "$pid"
    _TG_PG_PID=$pid
    _TG_PG_DATA=$data
    _tg_wait_ready "postgres on port $port" "$pid" "$root/postgres.log" \
        _tg_pg_query "$port" postgres "SELECT 1" || return 1
    if ! _tg_pg_query "$port" postgres "CREATE DATABASE tollgate" >"$root/createdb.log" 2>&1; then
        _tg_log "CREATE DATABASE tollgate failed"
        _tg_log_tail "$root/createdb.log"
        return 1
    fi
    TG_PG_PORT=$port
    TG_PG_DSN=postgresql://postgres@127.0.0.1:$port/tollgate
    export TG_PG_PORT TG_PG_DSN
}

_tg_pg_family() {
    local pm=$1
    printf '%s\n' "$pm"
    pgrep -P "$pm" 2>/dev/null || true
}

# tg_pg_pause: SIGSTOP the postmaster first (no new backends), then every child.
tg_pg_pause() {
    local pm=${_TG_PG_PID:?postgres not started} p
    kill -STOP "$pm" || return 1
    for p in $(pgrep -P "$pm" 2>/dev/null || true); do
        kill -STOP "$p" 2>/dev/null || true
    done
}

# tg_pg_resume: SIGCONT every child and the postmaster.
tg_pg_resume() {
    local pm=${_TG_PG_PID:?postgres not started} p
    for p in $(pgrep -P "$pm" 2>/dev/null || true); do
        kill -CONT "$p" 2>/dev/null || true
    done
    kill -CONT "$pm"
}

_tg_pg_stop() {
    local pm=$1 data p deadline
    data=$(readlink "/proc/$pm/cwd" 2>/dev/null || true)
    _tg_alive "$pm" || return 0
    for p in $(_tg_pg_family "$pm"); do
        kill -CONT "$p" 2>/dev/null || true
    done
    if [ -n "$data" ] && [ -f "$data/postmaster.pid" ]; then
        _tg_pg_run pg_ctl -D "$data" -m fast -w -t 20 stop >/dev/null 2>&1 || true
    else
        kill -INT "$pm" 2>/dev/null || true
    fi
    _tg_now_ms_set
    deadline=$((_TG_NOW_MS + 20000))
    while _tg_alive "$pm" && _tg_now_ms_set && [ "$_TG_NOW_MS" -lt "$deadline" ]; do
        _tg_sleep 0.1
    done
    if _tg_alive "$pm"; then
        _tg_log "postgres $pm did not stop, killing it and its children"
        for p in $(_tg_pg_family "$pm"); do
            kill -KILL "$p" 2>/dev/null || true
        done
    fi
    return 0
}

# ---------------------------------------------------------------------------------- Kafka
#
# Two brokers are on offer. tg_kafka_start runs real Apache Kafka (KRaft, every node both
# broker and controller, default 3 nodes) from the jars that tests/lib/kafka/pom.xml names,
# fetched once with Maven into TG_KAFKA_HOME (default build/kafka) and run on the system JRE.
# tg_devkafka_start (or tg_kafka_start with TG_KAFKA=devkafka) runs devkafka, librdkafka's mock
# cluster: in-memory, starts in milliseconds, and has a control channel (tg_kafka_ctl,
# tg_kafka_down, tg_kafka_up) that can make every broker unreachable at once or inject request
# errors -- faults a real cluster cannot be told to have. Tests that need that channel start
# devkafka; everything else runs on Apache Kafka.

# TG_KAFKA_VERSION (set before this file is sourced) runs another Apache Kafka release than the
# pom's, from jars of its own (build/kafka-VERSION): a test that needs a 3.x broker (SCRAM with
# the librdkafka of Debian 12, see kafka_sasl_ssl.sh).
if [ -n "${TG_KAFKA_VERSION:-}" ]; then
    TG_KAFKA_HOME=${TG_KAFKA_HOME:-$TG_SOURCE_DIR/build/kafka-$TG_KAFKA_VERSION}
else
    TG_KAFKA_HOME=${TG_KAFKA_HOME:-$TG_SOURCE_DIR/build/kafka}
fi
# Six JVM starts on two cores (format, then the nodes): 12-25 s, more on a busy machine.
TG_KAFKA_START_TIMEOUT_S=${TG_KAFKA_START_TIMEOUT_S:-120}
# Small heaps and the serial collector: three brokers on a 2-core machine next to the services
# under test. Override with TG_KAFKA_JAVA_OPTS.
TG_KAFKA_JAVA_OPTS=${TG_KAFKA_JAVA_OPTS:--Xms64m -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -XX:MaxDirectMemorySize=128m -XX:+ExitOnOutOfMemoryError -XX:-UsePerfData -Djava.awt.headless=true}
# TG_KAFKA_SCHED_IDLE=1: the nodes run under the SCHED_IDLE scheduling policy (chrt --idle), so
# that they take only the CPU time the rest of the machine leaves. In production the brokers are
# other machines; here three JVMs share two cores with the services under test, and a node's
# start (class loading, JIT, log recovery, catching up) takes most of both cores for seconds:
# the chaos scenarios, which compare the router's latency and CPU during a Kafka fault with
# outside it, set it so that they measure the router's reaction to the fault, not a JVM taking
# its cores. A waking thread of any other process preempts a SCHED_IDLE one at once.
TG_KAFKA_SCHED_IDLE=${TG_KAFKA_SCHED_IDLE:-}
# TG_KAFKA_CPUS=LIST (taskset's list, e.g. 1): the nodes launched while it is set run on those
# CPUs only (chaos c11 restarts each node on the machine's last CPU, so that the other is left
# to the services under test).
TG_KAFKA_CPUS=${TG_KAFKA_CPUS:-}

# SASL_SSL (TG_KAFKA_SASL_SSL=1 before tg_kafka_start; default 0, the cluster as before): every
# node gets a third listener, SASL_SSL://127.0.0.1:PORT (ports picked like the others, or
# TG_FIXED_KAFKA_SASL_PORTS), with TLS from a PEM keystore and two SASL mechanisms for one user:
# SCRAM-SHA-512 (the credential is written into the metadata when the storage is formatted,
# kafka-storage format --add-scram) and PLAIN (the listener's JAAS user_NAME entry). The broker
# and controller listeners stay PLAINTEXT on loopback (inter-broker and controller traffic,
# kafka_admin, TG_KAFKA_BROKERS). openssl makes a test CA and one server certificate (SAN
# IP:127.0.0.1 and DNS:localhost: every node listens on 127.0.0.1) at each start, under
# TG_STATE_DIR/kafka-tls. The start then checks each SASL_SSL listener with openssl s_client
# (certificate verified against the CA for 127.0.0.1) and a metadata request through them as
# that user (PLAIN).
# Why PLAIN too: librdkafka before 2.6.1 (Debian 12 has 2.0.2) repeats the client nonce in its
# SCRAM client-final-message, which Kafka 4 brokers refuse as invalid credentials whatever the
# password (librdkafka#4895): with such a librdkafka only PLAIN authenticates here. Exports:
#   TG_KAFKA_SASL_BROKERS   the SASL_SSL bootstrap list (127.0.0.1:PORT,...)
#   TG_KAFKA_CA             the CA certificate (PEM) that signed the brokers' certificate
#   TG_KAFKA_SASL_USER      TG_KAFKA_SASL_USER when set before, else "tollgate"
#   TG_KAFKA_SASL_PASSWORD  TG_KAFKA_SASL_PASSWORD when set before, else random (hex)
#   TG_KAFKA_SASL_CONFIG    librdkafka properties for that user with PLAIN (kafka_admin -c FILE;
#                           mode 600)
# User and password: letters, digits, '.', '_', '-' (they go into --add-scram's [name=,password=]
# and the JAAS entry).

# _tg_kafka_tls_make DIR: into DIR (mode 700) a test CA (ca.pem, ca.key) and the brokers'
# certificate signed by it, as the PEM keystore Kafka reads (server-keystore.pem: the private key
# as encrypted PKCS#8, then the certificate and the CA) and its key password (key.password).
# Kafka's file-based PEM keystore needs an encrypted key and ssl.key.password, and decrypts it
# with the JRE's SecretKeyFactory, which (Java 17) has no PBES2: the key is PKCS#5 v1.5
# PBE-SHA1-3DES (a throwaway test key).
_tg_kafka_tls_make() {
    local dir=$1
    rm -rf "$dir" && mkdir -p "$dir" && chmod 700 "$dir" || return 1
    head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$dir/key.password" || return 1
    printf '%s\n' "subjectAltName=IP:127.0.0.1,DNS:localhost" \
        "basicConstraints=critical,CA:FALSE" "keyUsage=critical,digitalSignature,keyEncipherment" \
        "extendedKeyUsage=serverAuth" >"$dir/server.ext"
    if ! (
        cd "$dir" &&
            openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 2 \
                -subj "/CN=tollgate test Kafka CA" \
                -addext "basicConstraints=critical,CA:TRUE" \
                -addext "keyUsage=critical,keyCertSign,cRLSign" &&
            openssl req -new -newkey rsa:2048 -nodes -keyout server.key -out server.csr \
                -subj "/CN=127.0.0.1" &&
            openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial \
                -days 2 -extfile server.ext -out server.pem &&
            openssl pkcs8 -topk8 -v1 PBE-SHA1-3DES -in server.key -passout file:key.password \
                -out server.key.p8 &&
            cat server.key.p8 server.pem ca.pem >server-keystore.pem &&
            rm -f server.key server.csr
    ) >"$dir/openssl.log" 2>&1; then
        _tg_log "kafka: making the test certificates failed"
        _tg_log_tail "$dir/openssl.log"
        return 1
    fi
}

# _tg_kafka_tls_check PORT: the SASL_SSL listener on PORT completes a TLS handshake whose
# certificate chain verifies against TG_KAFKA_CA for IP 127.0.0.1.
_tg_kafka_tls_check() {
    timeout 10 openssl s_client -connect "127.0.0.1:$1" -CAfile "$TG_KAFKA_CA" \
        -verify_ip 127.0.0.1 -verify_return_error -brief </dev/null >/dev/null 2>&1
}

# tg_kafka_fetch: the broker's jars in TG_KAFKA_HOME/lib, fetched with Maven when absent or when
# the pom changed. Several shells may call it at once (flock).
tg_kafka_fetch() {
    local pom=$TG_SOURCE_DIR/tests/lib/kafka/pom.xml home=$TG_KAFKA_HOME sum rc=0
    local -a version=()
    [ -z "${TG_KAFKA_VERSION:-}" ] || version=("-Dkafka.version=$TG_KAFKA_VERSION")
    if [ -z "${TG_KAFKA_VERSION:-}" ]; then
        sum=$(sha256sum "$pom" | cut -d' ' -f1) || return 1
    else
        sum=$( (cat "$pom"; printf '%s\n' "$TG_KAFKA_VERSION") | sha256sum | cut -d' ' -f1) ||
            return 1
    fi
    [ "$(cat "$home/lib.sha256" 2>/dev/null || true)" = "$sum" ] && return 0
    mkdir -p "$home" || return 1
    (
        flock 9 || exit 1
        [ "$(cat "$home/lib.sha256" 2>/dev/null || true)" = "$sum" ] && exit 0
        _tg_log "fetching Apache Kafka with Maven into $home/lib (once)"
        rm -rf "$home/lib.new" "$home/lib" "$home/lib.sha256"
        if ! mvn -B -q -f "$pom" "${version[@]}" dependency:copy-dependencies \
            -DincludeScope=runtime \
            -DoutputDirectory="$home/lib.new" >"$home/mvn.log" 2>&1; then
            _tg_log "mvn dependency:copy-dependencies failed"
            _tg_log_tail "$home/mvn.log"
            exit 1
        fi
        mv "$home/lib.new" "$home/lib" && printf '%s\n' "$sum" >"$home/lib.sha256"
    ) 9>"$home/.lock" || rc=1
    return $rc
}

_tg_kafka_admin() {
    local bin=${TG_KAFKA_ADMIN_BIN:-$TG_BUILD_DIR/tests/tools/kafka_admin}
    "$bin" "$@"
}

# _tg_kafka_node_launch I: start node I of the Apache Kafka cluster from its own directory
# (config written by tg_kafka_start); PID in _TG_KAFKA_PIDS[I].
_tg_kafka_node_launch() {
    local i=$1 ndir=$TG_STATE_DIR/kafka/node$1
    local -a opts
    read -r -a opts <<<"$TG_KAFKA_JAVA_OPTS"
    _tg_spawn kafka "$ndir/kafka.log" ${TG_KAFKA_CPUS:+taskset -c "$TG_KAFKA_CPUS"} ${TG_KAFKA_SCHED_IDLE:+chrt --idle 0} java "${opts[@]}" \
        "-Dlog4j2.configurationFile=$TG_SOURCE_DIR/tests/lib/kafka/log4j2.properties" \
        -cp "$TG_KAFKA_HOME/lib/*" kafka.Kafka "$ndir/server.properties"
    _TG_KAFKA_PIDS[i]=$_TG_PID
    printf '%s\n' "$_TG_PID" >"$ndir/pid"
}

# _tg_kafka_cluster_wait N: every node alive and N brokers live in the metadata, within
# TG_KAFKA_START_TIMEOUT_S.
_tg_kafka_cluster_wait() {
    local n=$1 deadline i
    _tg_now_ms_set
    deadline=$((_TG_NOW_MS + TG_KAFKA_START_TIMEOUT_S * 1000))
    while :; do
        for ((i = 1; i <= n; i++)); do
            if ! _tg_alive "${_TG_KAFKA_PIDS[i]}"; then
                _tg_log "kafka node $i exited before the cluster was ready"
                _tg_log_tail "$TG_STATE_DIR/kafka/node$i/kafka.log"
                return 1
            fi
        done
        _tg_kafka_admin "$TG_KAFKA_BROKERS" ready "$n" 1000 >/dev/null 2>&1 && return 0
        _tg_now_ms_set
        if [ "$_TG_NOW_MS" -ge "$deadline" ]; then
            _tg_log "kafka cluster ($TG_KAFKA_BROKERS) not ready after ${TG_KAFKA_START_TIMEOUT_S}s"
            for ((i = 1; i <= n; i++)); do
                _tg_log_tail "$TG_STATE_DIR/kafka/node$i/kafka.log"
            done
            return 1
        fi
        _tg_sleep 0.2
    done
}

_tg_kafka_stop_nodes() {
    local i pids=()
    for i in "${!_TG_KAFKA_PIDS[@]}"; do
        pids+=("${_TG_KAFKA_PIDS[i]}")
        _tg_unregister kafka "${_TG_KAFKA_PIDS[i]}"
    done
    [ "${#pids[@]}" -gt 0 ] && _tg_stop_pids 20 "${pids[@]}"
    _TG_KAFKA_PIDS=()
}

# tg_kafka_start [NODES] [TOPICS]: Apache Kafka (TG_KAFKA=devkafka: tg_devkafka_start) with NODES
# combined broker+controller KRaft nodes (default 3) on 127.0.0.1, each with a broker and a
# controller port picked like every other port here (TG_FIXED_KAFKA_PORTS and
# TG_FIXED_KAFKA_CONTROLLER_PORTS, comma lists, fix them) and kept for the cluster's life, so a
# node restarted with tg_kafka_node_start comes back where clients expect it. Data under
# TG_STATE_DIR/kafka/nodeI. TOPICS: "name:partitions,..." (default the tollgate topics), each
# with replication min(3, NODES) and min.insync.replicas min(2, NODES); tollgate.control.v1 is
# compacted. Exports TG_KAFKA_BROKERS, TG_KAFKA_KIND=apache; unsets TG_KAFKA_CTL (no fault
# channel on a real cluster). TG_KAFKA_SASL_SSL=1: also the SASL_SSL listener (see above).
tg_kafka_start() {
    if [ "${TG_KAFKA:-apache}" = devkafka ]; then
        if [ "${TG_KAFKA_SASL_SSL:-0}" != 0 ]; then
            _tg_log "TG_KAFKA_SASL_SSL needs Apache Kafka (devkafka speaks no SASL)"
            return 1
        fi
        tg_devkafka_start "$@"
        return
    fi
    local n=${1:-3} topics=${2:-tollgate.events.v1:6,tollgate.control.v1:1}
    local dir attempt i p t bports cports sports voters cid rf misr started fails
    local sasl=${TG_KAFKA_SASL_SSL:-0} tls lst adv map
    local user=${TG_KAFKA_SASL_USER:-tollgate} pw=${TG_KAFKA_SASL_PASSWORD:-}
    local -a bp cp sp fpids scram
    _tg_need_init || return 1
    unset TG_KAFKA_SASL_BROKERS TG_KAFKA_CA TG_KAFKA_SASL_USER TG_KAFKA_SASL_PASSWORD \
        TG_KAFKA_SASL_CONFIG
    case "$sasl" in
    0 | 1) ;;
    *)
        _tg_log "TG_KAFKA_SASL_SSL must be 0 or 1, not '$sasl'"
        return 1
        ;;
    esac
    if [ ! -x "${TG_KAFKA_ADMIN_BIN:-$TG_BUILD_DIR/tests/tools/kafka_admin}" ]; then
        _tg_log "kafka_admin not built in $TG_BUILD_DIR (build the kafka_admin target)"
        return 1
    fi
    tg_kafka_fetch || return 1
    rf=$((n < 3 ? n : 3))
    misr=$((rf < 2 ? rf : 2))
    dir=$TG_STATE_DIR/kafka
    started=$(_tg_now_ms)
    scram=()
    if [ "$sasl" = 1 ]; then
        tls=$TG_STATE_DIR/kafka-tls
        [ -n "$pw" ] || pw=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
        if ! [[ "$user" =~ ^[A-Za-z0-9._-]+$ && "$pw" =~ ^[A-Za-z0-9._-]+$ ]]; then
            _tg_log "kafka: TG_KAFKA_SASL_USER and TG_KAFKA_SASL_PASSWORD:" \
                "letters, digits, . _ - only"
            return 1
        fi
        _tg_kafka_tls_make "$tls" || return 1
        scram=(--add-scram "SCRAM-SHA-512=[name=$user,password=$pw]")
    fi
    for ((attempt = 1; attempt <= 3; attempt++)); do
        rm -rf "$dir" && mkdir -p "$dir" || return 1
        if [ -n "${TG_FIXED_KAFKA_PORTS:-}" ]; then
            IFS=, read -r -a bp <<<"$TG_FIXED_KAFKA_PORTS"
            for p in "${bp[@]}"; do
                _tg_port_fixed "$p" >/dev/null || return 1
            done
        else
            bp=()
            for ((i = 0; i < n; i++)); do
                p=$(tg_port_pick) || return 1
                bp+=("$p")
            done
        fi
        if [ -n "${TG_FIXED_KAFKA_CONTROLLER_PORTS:-}" ]; then
            IFS=, read -r -a cp <<<"$TG_FIXED_KAFKA_CONTROLLER_PORTS"
            for p in "${cp[@]}"; do
                _tg_port_fixed "$p" >/dev/null || return 1
            done
        else
            cp=()
            for ((i = 0; i < n; i++)); do
                p=$(tg_port_pick) || return 1
                cp+=("$p")
            done
        fi
        sp=()
        if [ "$sasl" = 1 ] && [ -n "${TG_FIXED_KAFKA_SASL_PORTS:-}" ]; then
            IFS=, read -r -a sp <<<"$TG_FIXED_KAFKA_SASL_PORTS"
            for p in "${sp[@]}"; do
                _tg_port_fixed "$p" >/dev/null || return 1
            done
        elif [ "$sasl" = 1 ]; then
            for ((i = 0; i < n; i++)); do
                p=$(tg_port_pick) || return 1
                sp+=("$p")
            done
        fi
        if [ "${#bp[@]}" -ne "$n" ] || [ "${#cp[@]}" -ne "$n" ]; then
            _tg_log "kafka: $n nodes need $n broker and $n controller ports"
            return 1
        fi
        if [ "$sasl" = 1 ] && [ "${#sp[@]}" -ne "$n" ]; then
            _tg_log "kafka: $n nodes need $n SASL_SSL ports"
            return 1
        fi
        voters=
        bports=
        sports=
        for ((i = 1; i <= n; i++)); do
            voters=${voters:+$voters,}$i@127.0.0.1:${cp[i - 1]}
            bports=${bports:+$bports,}127.0.0.1:${bp[i - 1]}
            [ "$sasl" = 1 ] && sports=${sports:+$sports,}127.0.0.1:${sp[i - 1]}
        done
        cports=$(IFS=,; echo "${cp[*]}")
        # A cluster id is 16 random bytes in URL-safe base64 without padding; never one that
        # starts with '-' (the storage tool would read it as an option: 1 start in 64 failed).
        cid=$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | cut -c1-22)
        cid=A${cid#?}
        for ((i = 1; i <= n; i++)); do
            mkdir -p "$dir/node$i/data" || return 1
            lst=PLAINTEXT://127.0.0.1:${bp[i - 1]},CONTROLLER://127.0.0.1:${cp[i - 1]}
            adv=PLAINTEXT://127.0.0.1:${bp[i - 1]}
            map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
            if [ "$sasl" = 1 ]; then
                lst=$lst,SASL_SSL://127.0.0.1:${sp[i - 1]}
                adv=$adv,SASL_SSL://127.0.0.1:${sp[i - 1]}
                map=$map,SASL_SSL:SASL_SSL
            fi
            cat >"$dir/node$i/server.properties" <<EOF
# written by tests/lib/services.sh: node $i of a $n-node test cluster on loopback
process.roles=broker,controller
node.id=$i
controller.quorum.voters=$voters
listeners=$lst
advertised.listeners=$adv
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=$map
log.dirs=$dir/node$i/data
auto.create.topics.enable=false
num.partitions=1
default.replication.factor=$rf
min.insync.replicas=$misr
offsets.topic.replication.factor=$rf
offsets.topic.num.partitions=6
transaction.state.log.replication.factor=$rf
transaction.state.log.min.isr=$misr
transaction.state.log.num.partitions=3
share.coordinator.state.topic.replication.factor=$rf
share.coordinator.state.topic.min.isr=$misr
group.initial.rebalance.delay.ms=0
# few threads and a small cleaner buffer: the heap is 256 MiB
num.network.threads=2
num.io.threads=2
background.threads=2
num.recovery.threads.per.data.dir=1
log.cleaner.threads=1
log.cleaner.dedupe.buffer.size=8388608
log.segment.bytes=16777216
EOF
            if [ "$sasl" = 1 ]; then
                cat >>"$dir/node$i/server.properties" <<EOF
# the SASL_SSL listener: SCRAM-SHA-512 (users in the metadata, added at format time) and PLAIN
# (the user below) over TLS with the test CA's certificate; clients show no certificate
listener.name.sasl_ssl.sasl.enabled.mechanisms=SCRAM-SHA-512,PLAIN
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_$user="$pw";
listener.name.sasl_ssl.ssl.keystore.type=PEM
listener.name.sasl_ssl.ssl.keystore.location=$tls/server-keystore.pem
listener.name.sasl_ssl.ssl.key.password=$(cat "$tls/key.password")
listener.name.sasl_ssl.ssl.truststore.type=PEM
listener.name.sasl_ssl.ssl.truststore.location=$tls/ca.pem
listener.name.sasl_ssl.ssl.client.auth=none
EOF
            fi
        done
        # Format every node's storage (kafka-storage format), in parallel: a JVM start each.
        fpids=()
        for ((i = 1; i <= n; i++)); do
            java -Xshare:auto -XX:TieredStopAtLevel=1 -XX:+UseSerialGC -XX:-UsePerfData \
                "-Dlog4j2.configurationFile=$TG_SOURCE_DIR/tests/lib/kafka/log4j2.properties" \
                -cp "$TG_KAFKA_HOME/lib/*" kafka.tools.StorageTool format \
                --config "$dir/node$i/server.properties" "--cluster-id=$cid" "${scram[@]}" \
                >"$dir/node$i/format.log" 2>&1 </dev/null &
            fpids+=($!)
        done
        fails=0
        for ((i = 1; i <= n; i++)); do
            if ! wait "${fpids[i - 1]}"; then
                _tg_log "kafka-storage format failed for node $i"
                _tg_log_tail "$dir/node$i/format.log"
                fails=1
            fi
        done
        [ "$fails" = 0 ] || return 1
        _TG_KAFKA_PIDS=()
        for ((i = 1; i <= n; i++)); do
            _tg_kafka_node_launch "$i"
        done
        TG_KAFKA_BROKERS=$bports
        export TG_KAFKA_BROKERS
        if _tg_kafka_cluster_wait "$n"; then
            break
        fi
        _tg_kafka_stop_nodes
        # A port taken between the check and the broker's bind: try other ports.
        if [ -z "${TG_FIXED_KAFKA_PORTS:-}${TG_FIXED_KAFKA_CONTROLLER_PORTS:-}" ] &&
            grep -q "Address already in use" "$dir"/node*/kafka.log; then
            _tg_log "retrying kafka on other ports"
            continue
        fi
        unset TG_KAFKA_BROKERS
        return 1
    done
    [ "${#_TG_KAFKA_PIDS[@]}" -eq "$n" ] || return 1
    if [ "$sasl" = 1 ]; then
        TG_KAFKA_CA=$tls/ca.pem
        TG_KAFKA_SASL_CONFIG=$tls/client.properties
        (umask 077 && printf '%s\n' security.protocol=SASL_SSL sasl.mechanisms=PLAIN \
            "sasl.username=$user" "sasl.password=$pw" "ssl.ca.location=$TG_KAFKA_CA" \
            >"$TG_KAFKA_SASL_CONFIG") || return 1
        for p in "${sp[@]}"; do
            if ! _tg_kafka_tls_check "$p"; then
                _tg_log "kafka: the SASL_SSL listener on port $p does not present a certificate" \
                    "of the test CA for 127.0.0.1"
                return 1
            fi
        done
        # a metadata request through the SASL_SSL listeners as that user: every node
        if ! _tg_kafka_admin -c "$TG_KAFKA_SASL_CONFIG" "$sports" ready "$n" \
            $((TG_START_TIMEOUT_S * 1000)); then
            _tg_log "kafka: user $user not accepted on the SASL_SSL listeners ($sports)"
            return 1
        fi
        TG_KAFKA_SASL_BROKERS=$sports
        TG_KAFKA_SASL_USER=$user
        TG_KAFKA_SASL_PASSWORD=$pw
        export TG_KAFKA_SASL_BROKERS TG_KAFKA_CA TG_KAFKA_SASL_USER TG_KAFKA_SASL_PASSWORD \
            TG_KAFKA_SASL_CONFIG
    fi
    for t in ${topics//,/ }; do
        tg_kafka_topic "${t%%:*}" "${t##*:}" || return 1
    done
    TG_KAFKA_KIND=apache
    _TG_KAFKA_NODES=$n
    _TG_KAFKA_CONTROLLER_PORTS=$cports
    export TG_KAFKA_KIND
    unset TG_KAFKA_CTL
    _tg_log "kafka: $n node(s) ready with topics in $(($(_tg_now_ms) - started)) ms" \
        "($TG_KAFKA_BROKERS${sports:+; SASL_SSL $sports})"
}

# tg_kafka_topic NAME PARTITIONS [KEY=VALUE...]: create a topic on the running broker (an
# existing one is kept). Apache Kafka: replication min(3, brokers), min.insync.replicas min(2,
# replication), then the topic configs given (cleanup.policy=compact for a control topic of
# another name); tollgate.control.v1 is compacted. devkafka: through its control channel.
tg_kafka_topic() {
    local name=$1 parts=$2 rf misr
    local -a cfg
    shift 2
    if [ "${TG_KAFKA_KIND:-}" = devkafka ]; then
        tg_kafka_ctl topic "$name" "$parts" >/dev/null
        return
    fi
    # as many replicas as brokers, at most 3 (the brokers are the nodes: TG_KAFKA_BROKERS
    # names every one, also in a shell that did not start them)
    rf=$(tr ',' '\n' <<<"${TG_KAFKA_BROKERS:?kafka not started}" | grep -c .)
    [ "$rf" -le 3 ] || rf=3
    misr=$((rf < 2 ? rf : 2))
    cfg=("min.insync.replicas=$misr" "$@")
    [ "$name" = tollgate.control.v1 ] && cfg+=(cleanup.policy=compact)
    if ! _tg_kafka_admin "${TG_KAFKA_BROKERS:?kafka not started}" create "$name" "$parts" \
        "$rf" "${cfg[@]}" -- $((TG_START_TIMEOUT_S * 1000)); then
        _tg_log "kafka: creating topic $name failed"
        return 1
    fi
}

# tg_kafka_given: 0 when this shell was handed a running Kafka through its environment
# (TG_KAFKA_BROKERS and TG_KAFKA_KIND, and TG_KAFKA_CTL for devkafka, as tests/run exports for
# the cluster it shares between tests). A test that uses it creates topics of its own, with
# names no other test uses, and never stops the cluster or injects a fault into it; a test
# that breaks Kafka starts its own.
tg_kafka_given() {
    [ -n "${TG_KAFKA_BROKERS:-}" ] || return 1
    case "${TG_KAFKA_KIND:-}" in
    apache) return 0 ;;
    devkafka) [ -n "${TG_KAFKA_CTL:-}" ] ;;
    *) return 1 ;;
    esac
}

# tg_kafka_pids: the PIDs of every Apache Kafka node running, on one line.
tg_kafka_pids() {
    echo "${_TG_KAFKA_PIDS[*]}"
}

# tg_kafka_node_pid I: PID of Apache Kafka node I (node ids are 1..NODES).
tg_kafka_node_pid() {
    printf '%s\n' "${_TG_KAFKA_PIDS[$1]:?kafka node $1 not started}"
}

# tg_kafka_node_kill I [SIGNAL]: signal node I (default SIGKILL) and, for KILL, forget it.
tg_kafka_node_kill() {
    local i=$1 sig=${2:-KILL} pid
    pid=${_TG_KAFKA_PIDS[i]:?kafka node $i not started}
    kill "-$sig" "$pid" || return 1
    if [ "$sig" = KILL ]; then
        wait "$pid" 2>/dev/null || true
        _tg_unregister kafka "$pid"
        unset '_TG_KAFKA_PIDS[i]'
    fi
}

_tg_kafka_started_count() {
    grep -c "Kafka Server started" "$TG_STATE_DIR/kafka/node$1/kafka.log" 2>/dev/null || true
}

_tg_kafka_started_since() {
    [ "$(_tg_kafka_started_count "$1")" -gt "$2" ]
}

# tg_kafka_node_start I: start node I again (after tg_kafka_node_kill) on its own ports and
# data, and wait until it says it has started and the cluster lists every node. (The controller
# may still list a killed node as live for broker.session.timeout.ms, so the cluster's metadata
# alone does not tell that the new process is up.)
tg_kafka_node_start() {
    local i=$1 before
    before=$(_tg_kafka_started_count "$i")
    _tg_kafka_node_launch "$i"
    _tg_wait_ready "kafka node $i" "${_TG_KAFKA_PIDS[i]}" "$TG_STATE_DIR/kafka/node$i/kafka.log" \
        _tg_kafka_started_since "$i" "$before" || return 1
    _tg_kafka_cluster_wait "${_TG_KAFKA_NODES:?kafka not started}"
}

# tg_kafka_node_stop I [GRACE_S]: stop node I with SIGTERM (a controlled shutdown: its
# leaderships move first), SIGKILL after GRACE_S (default 30), and forget it; tg_kafka_node_start
# brings it back.
tg_kafka_node_stop() {
    local i=$1 pid
    pid=${_TG_KAFKA_PIDS[i]:?kafka node $i not started}
    _tg_stop_pid "$pid" "${2:-30}"
    _tg_unregister kafka "$pid"
    unset '_TG_KAFKA_PIDS[i]'
}

# tg_kafka_nodes_stop: stop every node at once (SIGTERM, SIGKILL after 20 s): the whole cluster
# is gone, controllers included. tg_kafka_nodes_start brings it back.
tg_kafka_nodes_stop() {
    _tg_kafka_stop_nodes
}

# tg_kafka_nodes_start: start every node again on its own ports and data (all at once: a single
# node of a 3-voter KRaft quorum cannot elect a controller), and wait until each says it has
# started and the cluster lists them all.
tg_kafka_nodes_start() {
    local n=${_TG_KAFKA_NODES:?kafka not started} i
    local -a before
    for ((i = 1; i <= n; i++)); do
        before[i]=$(_tg_kafka_started_count "$i")
        _tg_kafka_node_launch "$i"
    done
    for ((i = 1; i <= n; i++)); do
        _tg_wait_ready "kafka node $i" "${_TG_KAFKA_PIDS[i]}" \
            "$TG_STATE_DIR/kafka/node$i/kafka.log" _tg_kafka_started_since "$i" "${before[i]}" ||
            return 1
    done
    _tg_kafka_cluster_wait "$n"
}

# tg_kafka_leader TOPIC PARTITION: node id of the partition's current leader.
tg_kafka_leader() {
    _tg_kafka_admin "${TG_KAFKA_BROKERS:?kafka not started}" leader "$1" "$2" 30000
}

# tg_kafka_leader_moved TOPIC PARTITION NODE SECONDS: waits (one process) until a node other than
# NODE leads the partition; prints its id. Fails after SECONDS.
tg_kafka_leader_moved() {
    _tg_kafka_admin "${TG_KAFKA_BROKERS:?kafka not started}" moved "$1" "$2" "$3" $(($4 * 1000))
}

_tg_kafka_ping() {
    local file=$1
    [ -s "$file" ] || return 1
    TG_KAFKA_CTL=$2 tg_kafka_ctl ping >/dev/null
}

# tg_devkafka_start [BROKERS] [TOPICS]: devkafka with BROKERS brokers (default 1) on fixed free
# ports and a control port. TOPICS: "name:partitions,..." (default the tollgate topics).
# Exports TG_KAFKA_BROKERS, TG_KAFKA_CTL, TG_KAFKA_KIND=devkafka.
tg_devkafka_start() {
    local brokers=${1:-1} topics=${2:-tollgate.events.v1:6,tollgate.control.v1:1}
    local bin=${TG_DEVKAFKA_BIN:-$TG_BUILD_DIR/deploy/local/devkafka/devkafka}
    local dir attempt i ports ctl p t log bootfile
    local -a args
    _tg_need_init || return 1
    if [ ! -x "$bin" ]; then
        _tg_log "devkafka not built: $bin (build the devkafka target)"
        return 1
    fi
    dir=$TG_STATE_DIR/kafka
    mkdir -p "$dir" || return 1
    log=$dir/devkafka.log
    bootfile=$dir/bootstrap
    for ((attempt = 1; attempt <= 3; attempt++)); do
        rm -f "$bootfile"
        if [ -n "${TG_FIXED_KAFKA_PORTS:-}" ]; then
            ports=$TG_FIXED_KAFKA_PORTS
            for p in ${ports//,/ }; do
                _tg_port_fixed "$p" >/dev/null || return 1
            done
        else
            ports=
            for ((i = 0; i < brokers; i++)); do
                p=$(tg_port_pick) || return 1
                ports=${ports:+$ports,}$p
            done
        fi
        if [ -n "${TG_FIXED_KAFKA_CTL_PORT:-}" ]; then
            ctl=$(_tg_port_fixed "$TG_FIXED_KAFKA_CTL_PORT") || return 1
        else
            ctl=$(tg_port_pick) || return 1
        fi
        args=(--brokers "$brokers" --ports "$ports" --control "127.0.0.1:$ctl"
            --bootstrap-file "$bootfile")
        for t in ${topics//,/ }; do
            args+=(--topic "$t")
        done
        _tg_spawn kafka "$log" "$bin" "${args[@]}"
        _TG_KAFKA_PID=$_TG_PID
        if _tg_wait_ready "devkafka (ports $ports, control $ctl)" "$_TG_KAFKA_PID" "$log" \
            _tg_kafka_ping "$bootfile" "127.0.0.1:$ctl"; then
            TG_KAFKA_BROKERS=$(tr -d '\n' <"$bootfile")
            TG_KAFKA_CTL=127.0.0.1:$ctl
            TG_KAFKA_KIND=devkafka
            export TG_KAFKA_BROKERS TG_KAFKA_CTL TG_KAFKA_KIND
            return 0
        fi
        _tg_stop_pid "$_TG_KAFKA_PID" 5
        _tg_unregister kafka "$_TG_KAFKA_PID"
        # A port taken between the check and devkafka's bind: try other ports.
        if [ -z "${TG_FIXED_KAFKA_PORTS:-}${TG_FIXED_KAFKA_CTL_PORT:-}" ] &&
            tail -n 5 "$log" | grep -q "Address already in use"; then
            _tg_log "retrying devkafka on other ports"
            continue
        fi
        return 1
    done
    return 1
}

# tg_kafka_ctl COMMAND...: send one line to devkafka's control channel (TG_KAFKA_CTL), print
# the answer; 0 when it starts with "ok".
tg_kafka_ctl() {
    local addr=${TG_KAFKA_CTL:?TG_KAFKA_CTL not set} fd reply=
    exec {fd}<>"/dev/tcp/${addr%:*}/${addr##*:}" || return 1
    printf '%s\n' "$*" >&"$fd"
    IFS= read -r -t 10 reply <&"$fd" || true
    exec {fd}>&-
    printf '%s\n' "$reply"
    [ "${reply%% *}" = "ok" ]
}

tg_kafka_down() {
    tg_kafka_ctl down all >/dev/null
}

tg_kafka_up() {
    tg_kafka_ctl up all >/dev/null
}

# ------------------------------------------------------------------------------- fake-llm

_tg_fakellm_ping() {
    curl -fsS -m 2 -o /dev/null "http://127.0.0.1:$1/_stats"
}

# tg_fakellm_start [CONFIG]: the fake provider on 127.0.0.1.
tg_fakellm_start() {
    local config=${1:-} bin=${TG_FAKE_LLM_BIN:-$TG_BUILD_DIR/tests/fakes/fake-llm}
    local port dir
    local -a args
    _tg_need_init || return 1
    if [ ! -x "$bin" ]; then
        _tg_log "fake-llm not built: $bin (build the fake-llm target)"
        return 1
    fi
    if [ -n "${TG_FIXED_FAKELLM_PORT:-}" ]; then
        port=$(_tg_port_fixed "$TG_FIXED_FAKELLM_PORT") || return 1
    else
        port=$(tg_port_pick) || return 1
    fi
    dir=$TG_STATE_DIR/fakellm
    mkdir -p "$dir" || return 1
    args=(--listen "127.0.0.1:$port")
    [ -n "$config" ] && args+=(--config "$config")
    _tg_spawn fakellm "$dir/fake-llm.log" "$bin" "${args[@]}"
    _TG_FAKELLM_PID=$_TG_PID
    _tg_wait_ready "fake-llm on port $port" "$_TG_FAKELLM_PID" "$dir/fake-llm.log" \
        _tg_fakellm_ping "$port" || return 1
    TG_FAKE_LLM_URL=http://127.0.0.1:$port
    export TG_FAKE_LLM_URL
}

# ------------------------------------------------------------------------------ teardown

# tg_services_pids: every PID started and still registered (postgres children included).
tg_services_pids() {
    local kind pid
    [ -n "${TG_STATE_DIR:-}" ] && [ -f "$TG_STATE_DIR/services.list" ] || return 0
    while read -r kind pid; do
        [ -n "$pid" ] || continue
        if [ "$kind" = pg ]; then
            _tg_pg_family "$pid"
        else
            printf '%s\n' "$pid"
        fi
    done <"$TG_STATE_DIR/services.list"
}

# tg_services_stop_all: stop everything this state dir started, newest first, by PID; remove
# the throwaway data and release reserved ports. Safe to call twice and from a trap.
tg_services_stop_all() {
    local kind pid d
    [ -n "${TG_STATE_DIR:-}" ] && [ -d "$TG_STATE_DIR" ] || return 0
    [ "${_TG_STOPPING:-0}" = 1 ] && return 0
    _TG_STOPPING=1
    if [ -f "$TG_STATE_DIR/services.list" ]; then
        local -a kafka_pids
        mapfile -t kafka_pids < <(awk '$1 == "kafka" { print $2 }' "$TG_STATE_DIR/services.list")
        while read -r kind pid; do
            [ -n "$pid" ] || continue
            case "$kind" in
            pg) _tg_pg_stop "$pid" ;;
            kafka)
                # Every Kafka node at once, when the newest of them comes up; a caller whose
                # cluster is thrown away sets TG_KAFKA_STOP_GRACE_S=0 (SIGKILL at once: a
                # 3-node cluster's shutdown takes ~6 s).
                if [ "${#kafka_pids[@]}" -gt 0 ]; then
                    _tg_stop_pids "${TG_KAFKA_STOP_GRACE_S:-20}" "${kafka_pids[@]}"
                    kafka_pids=()
                fi
                ;;
            *) _tg_stop_pid "$pid" 10 ;;
            esac
        done < <(tac "$TG_STATE_DIR/services.list")
        : >"$TG_STATE_DIR/services.list"
    fi
    if [ -f "$TG_STATE_DIR/dirs.list" ]; then
        while read -r d; do
            case "$d" in
            /tmp/tollgate-pg.*) rm -rf "$d" ;;
            esac
        done <"$TG_STATE_DIR/dirs.list"
        : >"$TG_STATE_DIR/dirs.list"
    fi
    tg_ports_release "$TG_STATE_DIR/ports.list"
    unset TG_REDIS_HOST TG_REDIS_PORT TG_REDIS_URL TG_PG_PORT TG_PG_DSN TG_KAFKA_BROKERS \
        TG_KAFKA_CTL TG_KAFKA_KIND TG_FAKE_LLM_URL _TG_REDIS_PID _TG_PG_PID _TG_KAFKA_PID \
        _TG_FAKELLM_PID _TG_KAFKA_NODES TG_KAFKA_SASL_BROKERS TG_KAFKA_CA TG_KAFKA_SASL_USER \
        TG_KAFKA_SASL_PASSWORD TG_KAFKA_SASL_CONFIG
    _TG_KAFKA_PIDS=()
    _TG_STOPPING=0
    return 0
}
