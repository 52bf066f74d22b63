#!/usr/bin/env bash
# Regression for the retry-record blow-up: 10,000 requests whose every attempt fails, over a
# group of 4 deployments with retries and a fallback that fails too, must leave router-svc's
# RSS within 5 MB of where it was after the first 1,000. Each request makes several attempts;
# the trail stays at 4 fixed-size entries and nothing else may grow with them.
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/router_lib.sh"

rt_init router-rss
TOTAL=${RT_RSS_REQUESTS:-10000}
WARM=$((TOTAL / 10))
PAR=16

cat >"$RT_DIR/fake.json" <<'JSON'
{"default": {"fail_rate": 1.0, "status": 500, "prompt_tokens": 12, "completion_tokens": 8}}
JSON
rt_fake_start "$RT_DIR/fake.json"

{
    echo "model_list:"
    for i in 1 2 3 4; do
        cat <<YAML
  - model_name: gpt-fail
    litellm_params: {model: openai/fail-$i, api_base: $RT_FAKE/v1,
                     api_key: os.environ/RT_PROVIDER_KEY, timeout: 10}
    model_info: {id: fail-$i}
YAML
    done
    cat <<YAML
  - model_name: gpt-fail-fb
    litellm_params: {model: openai/fail-fb, api_base: $RT_FAKE/v1,
                     api_key: os.environ/RT_PROVIDER_KEY, timeout: 10}
    model_info: {id: fail-fb}
router_settings:
  num_retries: 3
  allowed_fails: 1000000
  cooldown_time: 1
  fallbacks: [{gpt-fail: [gpt-fail-fb]}]
general_settings:
  master_key: os.environ/RT_MASTER_KEY
tollgate:
  listen: 127.0.0.1:$RT_ROUTER_PORT
  threads: 2
  keys:
    - {key: os.environ/RT_KEY, key_alias: rss}
YAML
} >"$RT_DIR/router.yaml"
# A sanitizer build keeps freed memory in quarantine, which is not growth: turn it off here.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}quarantine_size_mb=0:thread_local_quarantine_size_kb=0"
rt_router_start "$RT_DIR/router.yaml"

BODY='{"model":"gpt-fail","messages":[{"role":"user","content":"this request fails everywhere"}]}'
printf '%s' "$BODY" >"$RT_DIR/body.json"

# run N requests through curl's parallel mode; counts statuses into RT_DIR/status.N
run_batch() { # N TAG
    local n=$1 tag=$2 i
    {
        for i in $(seq 1 "$n"); do
            echo "url = \"$RT_URL/v1/chat/completions\""
            echo "data-binary = \"@$RT_DIR/body.json\""
            echo "header = \"Authorization: Bearer $RT_KEY\""
            echo "output = \"/dev/null\""
            echo "write-out = \"%{http_code} %{errormsg}\\n\""
            [ "$i" -lt "$n" ] && echo "next"
        done
    } >"$RT_DIR/batch.cfg"
    curl -sS --no-progress-meter --parallel --parallel-max "$PAR" --max-time 60 -K "$RT_DIR/batch.cfg" >"$RT_DIR/status.$tag"
}

rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$RT_ROUTER_PID/status"; }

run_batch "$WARM" warm
rss1=$(rss_kb)
left=$((TOTAL - WARM))
while [ "$left" -gt 0 ]; do
    n=$((left > 3000 ? 3000 : left))
    run_batch "$n" "rest.$left"
    left=$((left - n))
done
rss2=$(rss_kb)
cat "$RT_DIR"/status.* | sort | uniq -c >"$RT_DIR/summary.txt"
total=$(cat "$RT_DIR"/status.* | wc -l)
bad=$(cat "$RT_DIR"/status.* | grep -vc '^500 *$')
echo "# RSS after $WARM: ${rss1} kB, after $TOTAL: ${rss2} kB; statuses: $(tr -s " \n" " " <"$RT_DIR/summary.txt")"
rt_eq "every request answered" "$total" "$TOTAL"
rt_eq "every request failed with the provider's 500 after its fallback" "$bad" 0
attempts=$(curl -fsS "$RT_FAKE/_stats" | jq '.total.requests')
rt_true "several attempts per request ($attempts upstream requests)" test "$attempts" -ge $((TOTAL * 4))
rt_true "RSS grew by less than 5 MB ($((rss2 - rss1)) kB)" test $((rss2 - rss1)) -lt 5120

rt_router_stop
rt_eq "clean exit" "$?" 0
rt_finish
