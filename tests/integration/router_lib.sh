# tests/integration/router_lib.sh: shared functions for the router-svc integration scripts.
#
# Each script starts its own fake-llm and router-svc on free loopback ports, with a generated
# configuration, and stops them by PID when it exits. Binaries come from TG_BUILD_DIR.
#
#   . router_lib.sh
#   rt_init NAME                 state dir, keys, ports; trap for cleanup
#   rt_fake_start FILE.json      fake-llm with that behaviour config
#   rt_router_start FILE.yaml    router-svc (waits for readiness)
#   rt_eq DESC GOT WANT, rt_true DESC CMD...   assertions; rt_finish prints the summary and exits

set -u

RT_FAILS=0
RT_PASSES=0
RT_PIDS=()

rt_die() {
    echo "FATAL: $*" >&2
    exit 1
}

# shellcheck source=tests/lib/ports.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib/ports.sh"

# rt_free_port: a loopback port reserved for this script until it exits (tests/lib/ports.sh).
rt_free_port() {
    tg_port_take "${RT_DIR:?rt_init first}/ports.list"
}

rt_randkey() { echo "sk-$1-$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')"; }

rt_cleanup() {
    local p
    for p in "${RT_PIDS[@]}"; do
        kill -TERM "$p" 2>/dev/null
    done
    for p in "${RT_PIDS[@]}"; do
        for _ in $(seq 1 50); do
            kill -0 "$p" 2>/dev/null || break
            sleep 0.1
        done
        # only when it did not stop: under the callers' set -e a failing kill in this EXIT trap
        # would turn the script's own status into a failure
        if kill -0 "$p" 2>/dev/null; then
            kill -KILL "$p" 2>/dev/null || true
        fi
    done
    tg_ports_release "$RT_DIR/ports.list"
    return 0
}

# rt_exit: rt_init's EXIT trap. After rt_cleanup, the script's directory goes unless the script
# failed or TG_KEEP is set. (A script with a trap of its own calls rt_cleanup, stops what else it
# started from there, then rt_dir_drop; one that started services only uses rt_exit_services.)
rt_exit() {
    local rc=$?
    rt_cleanup
    rt_dir_drop "$rc"
    return "$rc"
}

# rt_exit_services: rt_exit for a script that also started services (tests/lib/services.sh)
# under its directory: they are stopped before it goes.
rt_exit_services() {
    local rc=$?
    rt_cleanup
    tg_services_stop_all >/dev/null 2>&1 || true
    rt_dir_drop "$rc"
    return "$rc"
}

rt_dir_drop() { # RC: the script's directory goes when it passed, unless TG_KEEP is set
    if [ "$1" = 0 ] && [ -z "${TG_KEEP:-}" ]; then
        rm -rf "$RT_DIR"
    fi
}

rt_init() {
    : "${TG_BUILD_DIR:?TG_BUILD_DIR unset}"
    RT_DIR=$(mktemp -d "${TMPDIR:-/tmp}/tollgate-$1.XXXXXX")
    export RT_DIR
    export RT_PROVIDER_KEY=$(rt_randkey provider)
    export RT_KEY=$(rt_randkey virtual)
    export RT_KEY2=$(rt_randkey limited)
    export RT_MASTER_KEY=$(rt_randkey master)
    RT_FAKE_PORT=$(rt_free_port)
    RT_ROUTER_PORT=$(rt_free_port)
    RT_FAKE="http://127.0.0.1:$RT_FAKE_PORT"
    RT_URL="http://127.0.0.1:$RT_ROUTER_PORT"
    trap rt_exit EXIT
}

rt_wait_http() { # URL SECONDS
    local i
    for i in $(seq 1 $(($2 * 10))); do
        curl -fsS -o /dev/null --max-time 1 "$1" 2>/dev/null && return 0
        sleep 0.1
    done
    return 1
}

rt_wait_file() { # FILE SECONDS: until FILE exists and is not empty (a fake's port file)
    local i
    for i in $(seq 1 $(($2 * 10))); do
        [ -s "$1" ] && return 0
        sleep 0.1
    done
    return 1
}

rt_fake_start() { # CONFIG.json
    "$TG_BUILD_DIR/tests/fakes/fake-llm" --listen "127.0.0.1:$RT_FAKE_PORT" --config "$1" \
        --threads 2 2>>"$RT_DIR/fake.log" &
    RT_FAKE_PID=$!
    RT_PIDS+=("$RT_FAKE_PID")
    rt_wait_http "$RT_FAKE/_stats" 20 || rt_die "fake-llm did not start"
}

rt_router_start() { # CONFIG.yaml
    "$TG_BUILD_DIR/router-svc/router-svc" --config "$1" >>"$RT_DIR/router.out" \
        2>>"$RT_DIR/router.log" &
    RT_ROUTER_PID=$!
    RT_PIDS+=("$RT_ROUTER_PID")
    local i
    for i in $(seq 1 300); do
        curl -fsS -o /dev/null --max-time 1 "$RT_URL/health/readiness" 2>/dev/null && return 0
        kill -0 "$RT_ROUTER_PID" 2>/dev/null || break
        sleep 0.1
    done
    if true; then
        tail -n 30 "$RT_DIR/router.log" >&2
        rt_die "router-svc did not become ready"
    fi
}

rt_router_stop() { # stops router-svc with SIGTERM, waits, returns its exit status
    local rc
    kill -TERM "$RT_ROUTER_PID"
    wait "$RT_ROUTER_PID"
    rc=$?
    return $rc
}

rt_ok() {
    RT_PASSES=$((RT_PASSES + 1))
    echo "ok   - $1"
}

rt_fail() {
    RT_FAILS=$((RT_FAILS + 1))
    echo "FAIL - $1" >&2
}

rt_eq() { # DESC GOT WANT
    if [ "$2" = "$3" ]; then
        rt_ok "$1"
    else
        rt_fail "$1: got '$2', want '$3'"
    fi
}

rt_true() { # DESC CMD...
    local d=$1
    shift
    if "$@"; then
        rt_ok "$d"
    else
        rt_fail "$d"
    fi
}

# rt_req NAME METHOD PATH [curl args...]: response body in $RT_DIR/NAME.body, headers in
# $RT_DIR/NAME.hdr (lowercase names), status in RT_STATUS.
rt_req() {
    local name=$1 method=$2 path=$3
    shift 3
    RT_STATUS=$(curl -sS -o "$RT_DIR/$name.body" -D "$RT_DIR/$name.hdr" -w '%{http_code}' \
        --max-time 30 -X "$method" "$RT_URL$path" "$@")
    tr 'A-Z' 'a-z' <"$RT_DIR/$name.hdr" | tr -d '\r' >"$RT_DIR/$name.hdrl"
}

# rt_post NAME PATH JSON [extra curl args...] with the virtual key.
rt_post() {
    local name=$1 path=$2 body=$3
    shift 3
    rt_req "$name" POST "$path" -H "Authorization: Bearer $RT_KEY" \
        -H 'Content-Type: application/json' --data-binary "$body" "$@"
}

rt_hdr() { # NAME HEADER(lowercase): value of the header (first)
    grep -m1 "^$2:" "$RT_DIR/$1.hdrl" | sed "s/^$2: *//"
}

rt_fake_control() { # MODEL JSON
    curl -fsS -o /dev/null -X POST "$RT_FAKE/_control/models/$1" --data-binary "$2" ||
        rt_die "fake-llm control failed for $1"
}

rt_fake_stat() { # MODEL FIELD
    curl -fsS "$RT_FAKE/_stats" | jq -r --arg m "$1" --arg f "$2" '.models[$m][$f] // 0'
}

rt_finish() {
    echo "# $RT_PASSES passed, $RT_FAILS failed (state in $RT_DIR)"
    [ "$RT_FAILS" -eq 0 ]
    exit $?
}
