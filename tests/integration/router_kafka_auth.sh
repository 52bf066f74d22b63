#!/usr/bin/env bash
# router-svc's Kafka security settings reach its Kafka clients, and a broker that refuses the
# authentication is named in readiness.
#
# devkafka (started through tests/lib/services.sh) speaks no SASL, so a router configured with
# security_protocol SASL_PLAINTEXT / PLAIN fails to authenticate there the way it fails with a
# wrong password at a real broker (librdkafka's _AUTHENTICATION). Checked: /health/readiness
# (503: the key store waits for the control topic) reports kafka "down" with reasons.kafka naming
# the authentication failure; the log line says it too; the start-up line describes the Kafka
# settings without a value; the SASL password appears in no answer or log.
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/router_lib.sh"

rt_init router-kafka-auth
unset TG_KAFKA_BROKERS TG_KAFKA_CTL
# shellcheck disable=SC1091
. "$TG_SOURCE_DIR/tests/lib/services.sh" || rt_die "cannot source tests/lib/services.sh"
tg_services_init "$RT_DIR/services" >/dev/null || rt_die "tg_services_init failed"
trap rt_exit_services EXIT
tg_kafka_start 1 "tollgate.events.v1:1,tollgate.control.v1:1" >/dev/null || rt_die "devkafka did not start"
echo '{"default": {"prompt_tokens": 5, "completion_tokens": 3}}' >"$RT_DIR/fake.json"
rt_fake_start "$RT_DIR/fake.json"

export RT_KAFKA_PW="kpw-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"
cat >"$RT_DIR/router.yaml" <<YAML
model_list:
  - model_name: m
    litellm_params: {model: openai/m, api_base: "$RT_FAKE/v1", api_key: os.environ/RT_PROVIDER_KEY}
general_settings:
  master_key: os.environ/RT_MASTER_KEY
tollgate:
  listen: 127.0.0.1:$RT_ROUTER_PORT
  kafka:
    brokers: "$TG_KAFKA_BROKERS"
    security_protocol: SASL_PLAINTEXT
    sasl: {mechanism: PLAIN, username: router, password: os.environ/RT_KAFKA_PW}
    librdkafka: {reconnect.backoff.ms: 200}
  spool: {dir: $RT_DIR/spool, max_bytes: 16777216}
  keys:
    - {key: os.environ/RT_KEY}
YAML
# Not rt_router_start: readiness waits for the control topic's replay, which a broker refusing
# the router never allows (readiness saying why is the point here); liveness answers.
"$TG_BUILD_DIR/router-svc/router-svc" --config "$RT_DIR/router.yaml" >>"$RT_DIR/router.out" \
    2>>"$RT_DIR/router.log" &
RT_ROUTER_PID=$!
RT_PIDS+=("$RT_ROUTER_PID")
rt_wait_http "$RT_URL/health/liveness" 30 || rt_die "router-svc did not answer liveness"
for _ in $(seq 1 100); do
    rt_req ready GET /health/readiness
    jq -e '.reasons.kafka // "" | startswith("_AUTHENTICATION: ")' "$RT_DIR/ready.body" \
        >/dev/null 2>&1 && break
    sleep 0.1
done
echo "readiness: $(cat "$RT_DIR/ready.body")"
rt_eq "readiness is 503 (the key store waits for the control topic)" "$RT_STATUS" 503
rt_eq "readiness reports kafka down" "$(jq -r .dependencies.kafka "$RT_DIR/ready.body")" down
rt_true "readiness names the authentication failure" \
    bash -c 'jq -r .reasons.kafka "$1" | grep -q "^_AUTHENTICATION: .*SASL"' _ "$RT_DIR/ready.body"
rt_true "the log names it too" \
    grep -q 'event=kafka_error code=_AUTHENTICATION reason=".*SASL' "$RT_DIR/router.log"
rt_true "the router's start-up line describes the Kafka settings without a value" \
    grep -q 'msg=kafka_client .*security_protocol=SASL_PLAINTEXT sasl_mechanism=PLAIN properties=5' \
    "$RT_DIR/router.log"
rt_true "the SASL password is in no answer or log" \
    bash -c '! grep -rqF -e "$1" "$2"/*.body "$2"/*.log "$2"/router.out' _ "$RT_KAFKA_PW" "$RT_DIR"
rt_router_stop || rt_fail "router-svc did not stop cleanly"
rt_finish
