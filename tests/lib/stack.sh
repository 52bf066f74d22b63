# tests/lib/stack.sh — the whole Tollgate stack for e2e and chaos tests, on loopback.
#
#   . tests/lib/services.sh; . tests/lib/stack.sh
#   tg_stack_init STATE_DIR        (after tg_services_init and the Redis/PostgreSQL/Kafka starts)
#   tg_stack_fake_config FILE.json (optional: replaces the fake provider's behaviour config)
#   tg_stack_start                 fake-llm, spend-svc, router-svc; waits until ready
#   tg_stack_start_router / tg_stack_start_spend   (again, after a kill)
#   tg_stack_stop                  stops what it started, by PID
#
# Exports: TG_ROUTER_URL, TG_SPEND_URL, TG_STACK_KEY (a static virtual key), TG_STACK_LOAD_KEYS
# (four static keys, comma-separated, for load drivers), TG_STACK_MASTER_KEY,
# TG_STACK_PROVIDER_KEY, TG_ROUTER_PID, TG_SPEND_PID, TG_STACK_DIR (configs, logs: router.log,
# spend.log). Binaries come from TG_REL_BUILD_DIR (else TG_BUILD_DIR).
# Kafka names (for a stack on a cluster other tests share): TG_STACK_EVENTS_TOPIC (default
# tollgate.events.v1), TG_STACK_CONTROL_TOPIC (tollgate.control.v1), TG_STACK_GROUP_ID
# (spend-svc's consumer group, default spend-svc).
# The router's spool rolls its segments at TG_STACK_SPOOL_SEGMENT_BYTES (default 1 MiB, the
# smallest allowed): a run of a few minutes rolls and releases many, kills included.
#
# Model groups: gpt-main (deployments main-a, order 1, and main-b, order 2) falls back to
# gpt-fallback; claude-main is an Anthropic deployment; alias-main -> gpt-main; embed-main for
# embeddings; gpt-ex (rpm 1) falls back to gpt-ex-fb (rpm 1) for the rate-limit cases. Prices are per-deployment so that costs can be checked exactly.

tg_stack_bin() { echo "${TG_REL_BUILD_DIR:-${TG_BUILD_DIR:?TG_BUILD_DIR unset}}"; }

tg_stack_randkey() { echo "sk-$1-$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')"; }

tg_stack_wait_http() { # URL SECONDS: until URL answers 2xx (polled without starting a process)
    local url=$1 end
    _tg_now_ms_set
    end=$((_TG_NOW_MS + $2 * 1000))
    while :; do
        tg_http_get "$url" 1
        [[ $TG_HTTP_STATUS == 2?? ]] && return 0
        _tg_now_ms_set
        [ "$_TG_NOW_MS" -lt "$end" ] || return 1
        _tg_sleep 0.1
    done
}

tg_stack_init() {
    TG_STACK_DIR=$1
    mkdir -p "$TG_STACK_DIR"
    export TG_STACK_DIR
    export TG_STACK_PROVIDER_KEY=${TG_STACK_PROVIDER_KEY:-$(tg_stack_randkey provider)}
    export TG_STACK_KEY=${TG_STACK_KEY:-$(tg_stack_randkey virtual)}
    # Load keys for the chaos driver: events are keyed by key hash and devkafka keeps about
    # 5 MiB per partition, so sustained load is spread over several keys (and partitions).
    export TG_STACK_LOAD_KEY1=${TG_STACK_LOAD_KEY1:-$(tg_stack_randkey load1)}
    export TG_STACK_LOAD_KEY2=${TG_STACK_LOAD_KEY2:-$(tg_stack_randkey load2)}
    export TG_STACK_LOAD_KEY3=${TG_STACK_LOAD_KEY3:-$(tg_stack_randkey load3)}
    export TG_STACK_LOAD_KEYS="$TG_STACK_KEY,$TG_STACK_LOAD_KEY1,$TG_STACK_LOAD_KEY2,$TG_STACK_LOAD_KEY3"
    export TG_STACK_MASTER_KEY=${TG_STACK_MASTER_KEY:-$(tg_stack_randkey master)}
    export TG_ROUTER_PORT=${TG_ROUTER_PORT:-$(tg_port_pick)}
    export TG_SPEND_PORT=${TG_SPEND_PORT:-$(tg_port_pick)}
    export TG_ROUTER_URL="http://127.0.0.1:$TG_ROUTER_PORT"
    export TG_SPEND_URL="http://127.0.0.1:$TG_SPEND_PORT"
    TG_STACK_FAKE_CFG="$TG_STACK_DIR/fake.json"
    cat >"$TG_STACK_FAKE_CFG" <<'JSON'
{"default": {"prompt_tokens": 12, "completion_tokens": 8, "chunks": 4},
 "models": {"fake-primary-a": {"fail_rate": 0.0},
            "fake-primary-b": {"fail_rate": 0.0},
            "fake-fallback": {"fail_rate": 0.0}}}
JSON
}

tg_stack_fake_config() { cp "$1" "$TG_STACK_FAKE_CFG"; }

tg_stack_write_configs() {
    local fake=$TG_FAKE_LLM_URL
    cat >"$TG_STACK_DIR/router.yaml" <<YAML
model_list:
  - model_name: gpt-main
    litellm_params: {model: openai/fake-primary-a, api_base: $fake/v1,
                     api_key: os.environ/TG_STACK_PROVIDER_KEY, order: 1, timeout: 10,
                     input_cost_per_token: 0.0000005, output_cost_per_token: 0.0000015}
    model_info: {id: main-a}
  - model_name: gpt-main
    litellm_params: {model: openai/fake-primary-b, api_base: $fake/v1,
                     api_key: os.environ/TG_STACK_PROVIDER_KEY, order: 2, timeout: 10,
                     input_cost_per_token: 0.0000005, output_cost_per_token: 0.0000015}
    model_info: {id: main-b}
  - model_name: gpt-fallback
    litellm_params: {model: openai/fake-fallback, api_base: $fake/v1,
                     api_key: os.environ/TG_STACK_PROVIDER_KEY, timeout: 10,
                     input_cost_per_token: 0.000001, output_cost_per_token: 0.000002}
    model_info: {id: fallback-1}
  - model_name: claude-main
    litellm_params: {model: anthropic/fake-claude, api_base: $fake,
                     api_key: os.environ/TG_STACK_PROVIDER_KEY, timeout: 10,
                     input_cost_per_token: 0.000003, output_cost_per_token: 0.000015}
    model_info: {id: claude-1}
  - model_name: embed-main
    litellm_params: {model: openai/fake-embed, api_base: $fake/v1,
                     api_key: os.environ/TG_STACK_PROVIDER_KEY, timeout: 10,
                     input_cost_per_token: 0.0000001, output_cost_per_token: 0}
    model_info: {id: embed-1}
  - model_name: gpt-ex
    litellm_params: {model: openai/fake-ex, api_base: $fake/v1, rpm: 1,
                     api_key: os.environ/TG_STACK_PROVIDER_KEY, timeout: 10,
                     input_cost_per_token: 0.0000005, output_cost_per_token: 0.0000015}
    model_info: {id: ex-1}
  - model_name: gpt-ex-fb
    litellm_params: {model: openai/fake-ex-fb, api_base: $fake/v1, rpm: 1,
                     api_key: os.environ/TG_STACK_PROVIDER_KEY, timeout: 10,
                     input_cost_per_token: 0.0000005, output_cost_per_token: 0.0000015}
    model_info: {id: ex-fb-1}
router_settings:
  num_retries: 1
  allowed_fails: 1000000
  cooldown_time: 1
  fallbacks: [{gpt-main: [gpt-fallback]}, {gpt-ex: [gpt-ex-fb]}]
  model_group_alias: {alias-main: gpt-main}
general_settings:
  master_key: os.environ/TG_STACK_MASTER_KEY
tollgate:
  listen: 127.0.0.1:$TG_ROUTER_PORT
  kafka: {brokers: "$TG_KAFKA_BROKERS", events_topic: ${TG_STACK_EVENTS_TOPIC:-tollgate.events.v1},
          control_topic: ${TG_STACK_CONTROL_TOPIC:-tollgate.control.v1},
          events_per_record: ${TG_STACK_EVENTS_PER_RECORD:-64}}
  spool: {dir: $TG_STACK_DIR/spool, max_bytes: 268435456,
          segment_bytes: ${TG_STACK_SPOOL_SEGMENT_BYTES:-1048576}}
  keys:
    - {key: os.environ/TG_STACK_KEY, key_alias: stack, team_id: stack-team}
    - {key: os.environ/TG_STACK_LOAD_KEY1, key_alias: load1, team_id: stack-team}
    - {key: os.environ/TG_STACK_LOAD_KEY2, key_alias: load2, team_id: load-team}
    - {key: os.environ/TG_STACK_LOAD_KEY3, key_alias: load3}
YAML
    cat >"$TG_STACK_DIR/spend.yaml" <<YAML
listen: 127.0.0.1:$TG_SPEND_PORT
master_key: os.environ/TG_STACK_MASTER_KEY
kafka: {brokers: "$TG_KAFKA_BROKERS", topic: ${TG_STACK_EVENTS_TOPIC:-tollgate.events.v1},
        control_topic: ${TG_STACK_CONTROL_TOPIC:-tollgate.control.v1},
        group_id: ${TG_STACK_GROUP_ID:-spend-svc}}
postgres: {dsn: "$TG_PG_DSN"}
redis: {url: "$TG_REDIS_URL"}
batch: {max_events: 5000, max_wait_ms: 200}
alerting:
  default_webhook_url: $fake/slack/stack
  rate_per_second: 1
  burst: 3
  dedupe_window_s: 600
YAML
}

tg_stack_start_router() {
    local bin
    bin=$(tg_stack_bin)
    "$bin/router-svc/router-svc" --config "$TG_STACK_DIR/router.yaml" \
        >>"$TG_STACK_DIR/router.out" 2>>"$TG_STACK_DIR/router.log" &
    TG_ROUTER_PID=$!
    export TG_ROUTER_PID
    if ! tg_stack_wait_http "$TG_ROUTER_URL/health/readiness" 30; then
        echo "router-svc did not become ready; log tail:" >&2
        tail -n 30 "$TG_STACK_DIR/router.log" >&2
        return 1
    fi
}

tg_stack_start_spend() {
    local bin
    bin=$(tg_stack_bin)
    "$bin/spend-svc/spend-svc" --config "$TG_STACK_DIR/spend.yaml" \
        >>"$TG_STACK_DIR/spend.out" 2>>"$TG_STACK_DIR/spend.log" &
    TG_SPEND_PID=$!
    export TG_SPEND_PID
    if ! tg_stack_wait_http "$TG_SPEND_URL/health/liveness" 30; then
        echo "spend-svc did not start; log tail:" >&2
        tail -n 30 "$TG_STACK_DIR/spend.log" >&2
        return 1
    fi
}

tg_stack_start() {
    tg_fakellm_start "$TG_STACK_FAKE_CFG" || return 1
    tg_stack_write_configs
    tg_stack_start_spend || return 1
    tg_stack_start_router || return 1
}

tg_stack_stop_pid() { # PID [SIGNAL]
    local p=$1 sig=${2:-TERM} i
    [ -n "$p" ] || return 0
    kill -CONT "$p" 2>/dev/null || true
    kill -"$sig" "$p" 2>/dev/null || return 0
    for i in $(seq 1 100); do
        kill -0 "$p" 2>/dev/null || return 0
        sleep 0.1
    done
    kill -KILL "$p" 2>/dev/null || true
}

tg_stack_stop() {
    tg_stack_stop_pid "${TG_ROUTER_PID:-}"
    tg_stack_stop_pid "${TG_SPEND_PID:-}"
    TG_ROUTER_PID=""
    TG_SPEND_PID=""
}
