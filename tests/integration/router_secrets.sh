#!/usr/bin/env bash
# Secret scanner: after a run of mixed failures (provider errors, timeouts, garbage, bad keys,
# bad JSON that contains a key, streams cut mid-way), neither the provider key, the master key
# nor any virtual key value appears in router-svc's log (at debug level), in an error body or
# in an x- header.
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/router_lib.sh"

rt_init router-secrets

cat >"$RT_DIR/fake.json" <<'JSON'
{"default": {"prompt_tokens": 12, "completion_tokens": 8, "chunks": 3},
 "models": {"fake-500": {"fail_rate": 1.0, "status": 500},
            "fake-429": {"fail_rate": 1.0, "status": 429, "retry_after": 2},
            "fake-garbage": {"fail_rate": 1.0, "error": "garbage"},
            "fake-drop": {"fail_rate": 1.0, "error": "drop_mid_stream", "chunks": 6},
            "fake-policy": {"fail_rate": 1.0, "error": "content_policy"},
            "fake-slow": {"latency_ms": 2500}}}
JSON
rt_fake_start "$RT_DIR/fake.json"

{
    echo "model_list:"
    for m in 500 429 garbage drop policy slow ok; do
        cat <<YAML
  - model_name: g-$m
    litellm_params: {model: openai/fake-$m, api_base: $RT_FAKE/v1,
                     api_key: os.environ/RT_PROVIDER_KEY, timeout: 1}
    model_info: {id: d-$m}
  - model_name: a-$m
    litellm_params: {model: anthropic/fake-$m, api_base: $RT_FAKE,
                     api_key: os.environ/RT_PROVIDER_KEY, timeout: 1}
    model_info: {id: a-$m}
YAML
    done
    cat <<YAML
router_settings:
  num_retries: 1
  allowed_fails: 2
  cooldown_time: 1
  fallbacks: [{g-500: [g-429]}, {g-garbage: [g-500]}]
general_settings:
  master_key: os.environ/RT_MASTER_KEY
tollgate:
  listen: 127.0.0.1:$RT_ROUTER_PORT
  keys:
    - {key: os.environ/RT_KEY, key_alias: scan}
    - {key: os.environ/RT_KEY2, key_alias: scan2, models: [g-ok]}
YAML
} >"$RT_DIR/router.yaml"
export TOLLGATE_LOG_LEVEL=debug
rt_router_start "$RT_DIR/router.yaml"

n=0
for m in 500 429 garbage drop policy slow ok; do
    for stream in false true; do
        for ep in /v1/chat/completions /v1/messages /v1/responses; do
            for prefix in g a; do
                n=$((n + 1))
                body=$(jq -cn --arg m "$prefix-$m" --argjson s $stream \
                    '{model:$m, stream:$s, max_tokens:16, input:"hi", messages:[{role:"user",content:"hi"}]}')
                rt_post "r$n" "$ep" "$body" -N
            done
        done
    done
done
# the limited key on a model it may not use; bad keys that look like keys; a key in bad JSON
rt_req "r$((n + 1))" POST /v1/chat/completions -H "Authorization: Bearer $RT_KEY2" \
    --data-binary '{"model":"g-500","messages":[{"role":"user","content":"x"}]}'
rt_req "r$((n + 2))" POST /v1/chat/completions -H "Authorization: Bearer ${RT_KEY}x" \
    --data-binary '{"model":"g-ok","messages":[]}'
rt_req "r$((n + 3))" POST /v1/messages -H "x-api-key: $RT_KEY" \
    --data-binary "{\"model\":\"g-ok\",\"api_key\":\"$RT_PROVIDER_KEY\" , }"
rt_req "r$((n + 4))" POST /v1/chat/completions -H "Authorization: Bearer $RT_KEY" \
    --data-binary "{\"model\":\"$RT_PROVIDER_KEY\",\"messages\":[]}"
rt_req "r$((n + 5))" POST /v1/chat/completions -H "Authorization: Bearer $RT_KEY" \
    --data-binary "{\"model\":\"$RT_MASTER_KEY\",\"messages\":[]}"
n=$((n + 5))

statuses=$(for i in $(seq 1 $n); do grep -m1 '^HTTP' "$RT_DIR/r$i.hdr" | awk '{print $2}'; done | sort | uniq -c | tr -s ' \n' ' ')
echo "# $n requests, statuses: $statuses"
rt_true "mixed run produced failures" bash -c "echo '$statuses' | grep -Eq ' (4|5)[0-9][0-9]'"
rt_true "mixed run produced successes" bash -c "echo '$statuses' | grep -q ' 200'"

rt_router_stop
scan() { # DESC FILES...
    local d=$1 s found=""
    shift
    for s in "$RT_PROVIDER_KEY" "$RT_KEY" "$RT_KEY2" "$RT_MASTER_KEY"; do
        if grep -qF -- "$s" "$@" 2>/dev/null; then
            found="$found ${s%%-*}-..."
        fi
    done
    rt_eq "$d" "${found:-none}" none
}
error_bodies=()
for i in $(seq 1 $n); do
    st=$(grep -m1 '^HTTP' "$RT_DIR/r$i.hdr" | awk '{print $2}')
    [ "$st" != 200 ] && error_bodies+=("$RT_DIR/r$i.body")
    # in-band stream errors count as error bodies too
    grep -q '"error"' "$RT_DIR/r$i.body" && error_bodies+=("$RT_DIR/r$i.body")
done
grep -hi '^x-' "$RT_DIR"/r*.hdr >"$RT_DIR/x-headers.txt"
rt_true "log is not empty" test -s "$RT_DIR/router.log"
scan "no secret in router log ($(wc -l <"$RT_DIR/router.log") lines)" "$RT_DIR/router.log" "$RT_DIR/router.out"
scan "no secret in ${#error_bodies[@]} error bodies" "${error_bodies[@]}"
scan "no secret in x- headers" "$RT_DIR/x-headers.txt"
rt_finish
