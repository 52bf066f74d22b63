#!/usr/bin/env bash
# The front door, end to end through router-svc: each defect of the front-door issue that needs
# the whole process (its in-flight slots, its JSON parse, its start-up checks, a real HTTP/2
# provider) is pinned here by a check named after it. The head parser's byte policy is pinned in
# router_hsrv_test, the config checks in router_config_test and spend_config_test.
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/router_lib.sh"

rt_init router-front-door

cat >"$RT_DIR/fake.json" <<'JSON'
{"default": {"prompt_tokens": 12, "completion_tokens": 8, "chunks": 4, "ttft_ms": 5}}
JSON
rt_fake_start "$RT_DIR/fake.json"

# A real HTTP/2 provider over TLS (nghttpd, a static SSE answer of 200 events, every fourth
# close to the 12 KiB event cap): after a pause libcurl hands on what HTTP/2 kept delivering in
# pieces larger than its buffer (2 KiB seen with libcurl 7.88, up to 16 KiB by its contract).
H2_PORT=$(rt_free_port)
mkdir -p "$RT_DIR/h2/v1/chat"
openssl req -x509 -newkey rsa:2048 -nodes -keyout "$RT_DIR/h2.key" -out "$RT_DIR/h2.crt" \
    -days 2 -subj /CN=127.0.0.1 -addext "subjectAltName=IP:127.0.0.1" 2>/dev/null ||
    rt_die "openssl could not make a test certificate"
python3 - "$RT_DIR/h2/v1/chat/completions" <<'PY'
import json, sys
ev = []
for i in range(200):
    # every fourth event close to the event cap (12 KiB), the rest small
    n = 11800 if i % 4 == 0 else 500
    ev.append("data: " + json.dumps({"id": "chatcmpl-h2", "object": "chat.completion.chunk",
              "created": 1, "model": "h2-model",
              "choices": [{"index": 0, "delta": {"content": "x" * n}, "finish_reason": None}]})
              + "\n\n")
ev.append("data: " + json.dumps({"id": "chatcmpl-h2", "object": "chat.completion.chunk",
          "created": 1, "model": "h2-model", "choices": [],
          "usage": {"prompt_tokens": 7, "completion_tokens": 200, "total_tokens": 207}}) + "\n\n")
ev.append("data: [DONE]\n\n")
open(sys.argv[1], "w").write("".join(ev))
PY
nghttpd -d "$RT_DIR/h2" "$H2_PORT" "$RT_DIR/h2.key" "$RT_DIR/h2.crt" >"$RT_DIR/nghttpd.log" 2>&1 &
RT_PIDS+=($!)
rt_wait_http "https://127.0.0.1:$H2_PORT/v1/chat/completions --cacert $RT_DIR/h2.crt" 1 ||
    sleep 1
export SSL_CERT_FILE="$RT_DIR/h2.crt"

cat >"$RT_DIR/router.yaml" <<YAML
model_list:
  - model_name: gpt-main
    litellm_params: {model: openai/fake-ok, api_base: $RT_FAKE/v1,
                     api_key: os.environ/RT_PROVIDER_KEY, timeout: 10}
  - model_name: h2-main
    litellm_params: {model: openai/h2-model, api_base: https://127.0.0.1:$H2_PORT/v1,
                     api_key: os.environ/RT_PROVIDER_KEY, timeout: 10, stream_timeout: 5}
general_settings: {master_key: os.environ/RT_MASTER_KEY}
tollgate:
  listen: 127.0.0.1:$RT_ROUTER_PORT
  threads: 1
  upstream_client: curl   # the HTTP/2-only provider: the built-in client speaks HTTP/1.1
  keys:
    - {key: os.environ/RT_KEY}
  limits: {max_in_flight: 4, max_json_depth: 16, max_json_elements: 1000}
YAML
rt_router_start "$RT_DIR/router.yaml"
CHAT='{"model":"gpt-main","messages":[{"role":"user","content":"hi"}]}'

metric() { curl -s "$RT_URL/metrics" | awk -v m="$1" '$1 == m {print $2}'; }

# ---------------------------------------------------------------- preauth_slot_exhaustion
# max_in_flight (4) slow unauthenticated POSTs used to hold every in-flight slot until their
# bodies arrived, and every real request got 503. Now they are answered 401 from their headers
# and hold nothing.
# raw_client OUT HOLD_S BYTES: connect, send BYTES (printf %b escapes), keep the connection
# HOLD_S seconds (or until the server closes it), write what the server sent to OUT.
raw_client() {
    python3 - "$RT_ROUTER_PORT" "$1" "$2" "$3" <<'PY'
import socket, sys, time
port, out, hold, data = int(sys.argv[1]), sys.argv[2], float(sys.argv[3]), sys.argv[4]
s = socket.create_connection(("127.0.0.1", port))
s.sendall(data.encode("latin-1").decode("unicode_escape").encode("latin-1"))
s.settimeout(0.2)
got, end = b"", time.time() + hold
while time.time() < end:
    try:
        b = s.recv(65536)
        if not b:
            break
        got += b
    except socket.timeout:
        pass
    except OSError:
        break
open(out, "wb").write(got)
PY
}
slow=()
for i in 1 2 3 4 5 6; do
    # headers, then a body that never finishes (the connection held 4 s)
    raw_client "$RT_DIR/slow$i.out" 4 \
        'POST /v1/chat/completions HTTP/1.1\r\nHost: r\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{"model":' &
    slow+=($!)
done
sleep 1
rt_post held /v1/chat/completions "$CHAT"
rt_eq "preauth_slot_exhaustion: a real request is served beside 6 slow unauthenticated POSTs" \
    "$RT_STATUS" 200
wait "${slow[@]}"
for i in 1 2 3 4 5 6; do
    rt_true "preauth_slot_exhaustion: slow POST $i answered 401 from its headers" \
        grep -q '^HTTP/1.1 401' "$RT_DIR/slow$i.out"
done

# ---------------------------------------------------------------- expect_100_continue_before_auth
# An unauthenticated request with Expect: 100-continue gets its 401 and never a 100 Continue.
raw_client "$RT_DIR/expect.out" 3 \
    'POST /v1/chat/completions HTTP/1.1\r\nHost: r\r\nExpect: 100-continue\r\nContent-Length: 50\r\n\r\n'
rt_eq "expect_100_continue_before_auth: 401 first" "$(head -c 12 "$RT_DIR/expect.out")" "HTTP/1.1 401"
rt_true "expect_100_continue_before_auth: no 100 Continue" \
    bash -c "! grep -q '100 Continue' '$RT_DIR/expect.out'"
raw_client "$RT_DIR/expect_ok.out" 3 \
    "POST /v1/chat/completions HTTP/1.1\\r\\nHost: r\\r\\nAuthorization: Bearer $RT_KEY\\r\\nExpect: 100-continue\\r\\nContent-Length: 500\\r\\nConnection: close\\r\\n\\r\\n"
rt_eq "with the key: 100 Continue before the body" \
    "$(head -c 25 "$RT_DIR/expect_ok.out" | tr -d '\r\n')" "HTTP/1.1 100 Continue"

# ---------------------------------------------------------------- preauth_json_parse
# An unauthenticated body the fast scanner declines (an exponent) used to be parsed whole by
# jansson before the key was checked. Now: 401, and no parse happened (bad_json unchanged).
bad0=$(metric 'tollgate_router_rejected_total{reason="bad_json"}')
python3 -c 'print("{\"model\":\"gpt-main\",\"x\":[" + ",".join(["1e0"] * 200000) + "]}")' \
    >"$RT_DIR/big_unauth.json"
rt_req unauth_json POST /v1/chat/completions --data-binary "@$RT_DIR/big_unauth.json"
rt_eq "preauth_json_parse: 401" "$RT_STATUS" 401
rt_eq "preauth_json_parse: nothing was parsed" \
    "$(metric 'tollgate_router_rejected_total{reason="bad_json"}')" "$bad0"
# With a key, the slow path is bounded: depth and elements.
python3 -c 'print("{\"model\":\"gpt-main\",\"x\":" + "[" * 40 + "1e0" + "]" * 40 + "}")' \
    >"$RT_DIR/deep.json"
rt_req deep POST /v1/chat/completions -H "Authorization: Bearer $RT_KEY" \
    --data-binary "@$RT_DIR/deep.json"
rt_eq "max_json_depth: 400" "$RT_STATUS" 400
rt_true "max_json_depth: named" grep -q 'max_json_depth' "$RT_DIR/deep.body"
python3 -c 'print("{\"model\":\"gpt-main\",\"x\":[" + ",".join(["1e0"] * 2000) + "]}")' \
    >"$RT_DIR/wide.json"
rt_req wide POST /v1/chat/completions -H "Authorization: Bearer $RT_KEY" \
    --data-binary "@$RT_DIR/wide.json"
rt_eq "max_json_elements: 400" "$RT_STATUS" 400
rt_true "max_json_elements: named" grep -q 'max_json_elements' "$RT_DIR/wide.body"
rt_req ok_json POST /v1/chat/completions -H "Authorization: Bearer $RT_KEY" \
    --data-binary '{"model":"gpt-main","temperature":1e0,"messages":[{"role":"user","content":"hi"}]}'
rt_eq "a body within the bounds through the full parser: 200" "$RT_STATUS" 200

# ---------------------------------------------------------------- path_percent_decoded
rt_req enc POST /key%2Fgenerate -H "Authorization: Bearer $RT_MASTER_KEY" -d '{}'
rt_eq "path_percent_decoded: /key%2Fgenerate is not the key API" "$RT_STATUS" 404
rt_req enc2 POST /v1/chat%2Fcompletions -H "Authorization: Bearer $RT_KEY" -d "$CHAT"
rt_eq "path_percent_decoded: /v1/chat%2Fcompletions is not an endpoint" "$RT_STATUS" 404

# ---------------------------------------------------------------- key_info_raw_key_in_url
rt_req info_raw GET "/key/info?key=$RT_KEY" -H "Authorization: Bearer $RT_MASTER_KEY"
rt_eq "key_info_raw_key_in_url: 400" "$RT_STATUS" 400
rt_true "key_info_raw_key_in_url: the key is not echoed" \
    bash -c "! grep -q -- '$RT_KEY' '$RT_DIR/info_raw.body'"
rt_req info_body POST /key/info -H "Authorization: Bearer $RT_MASTER_KEY" \
    --data-binary "{\"key\":\"$RT_KEY\"}"
rt_eq "POST /key/info with the key in the body: 200" "$RT_STATUS" 200
rt_req info_noauth POST /key/info -H "Authorization: Bearer $RT_KEY" -d "{\"key\":\"$RT_KEY\"}"
rt_eq "the key API without the master key: 401 from the headers" "$RT_STATUS" 401

# ---------------------------------------------------------------- http2_delivery_repaused
# A stream from an HTTP/2 provider: curl's deliveries (up to 16 KiB) used to exceed the stream
# buffer when it was empty, so the transfer paused with nothing left to consume and the stream
# stalled until its timeout. The deliveries are now cut to the receiver's piece size.
# The client reads slowly (200 kB/s), so the router pauses the provider transfer, with a large
# event half in its buffer, while HTTP/2 keeps delivering into libcurl. A piece larger than the
# room left beside a partial event used to pause the transfer again with nothing the reader
# could consume: the stream stalled.
start=$(date +%s%N)
rt_req h2 POST /v1/chat/completions -H "Authorization: Bearer $RT_KEY" -N --limit-rate 200k \
    --data-binary '{"model":"h2-main","stream":true,"messages":[{"role":"user","content":"hi"}]}'
ms=$((($(date +%s%N) - start) / 1000000))
rt_eq "http2_delivery_repaused: 200" "$RT_STATUS" 200
# (200 content events; the usage event the router asked for itself is not relayed)
rt_eq "http2_delivery_repaused: every event relayed" \
    "$(grep -c '^data: {' "$RT_DIR/h2.body")" 200
rt_true "http2_delivery_repaused: the stream ends with [DONE]" grep -q '^data: \[DONE\]' "$RT_DIR/h2.body"
rt_true "http2_delivery_repaused: in time (${ms} ms for 700 kB at 200 kB/s)" test "$ms" -lt 12000
rt_eq "the provider speaks HTTP/2 only (an HTTP/1.1 request to it fails)" \
    "$(curl -s -o /dev/null -w '%{http_code}' --http1.1 --cacert "$RT_DIR/h2.crt" --max-time 5 \
        "https://127.0.0.1:$H2_PORT/v1/chat/completions")" 000

# ---------------------------------------------------------------- start-up checks
rt_router_stop
cat >"$RT_DIR/open.yaml" <<YAML
model_list:
  - model_name: gpt-main
    litellm_params: {model: openai/fake-ok, api_base: $RT_FAKE/v1}
tollgate: {listen: 127.0.0.1:$RT_ROUTER_PORT}
YAML
"$TG_BUILD_DIR/router-svc/router-svc" --config "$RT_DIR/open.yaml" >"$RT_DIR/open.out" 2>&1
rt_eq "open_mode_failed_open: no master key and no keys is a start-up error" "$?" 2
rt_true "open_mode_failed_open: the error names the way out" \
    grep -q 'tollgate.allow_unauthenticated: true' "$RT_DIR/open.out"
"$TG_BUILD_DIR/router-svc/router-svc" --config "$RT_DIR/open.yaml" --check >"$RT_DIR/open_check.out" 2>&1
rt_eq "open_mode_failed_open: --check reports it too" "$?" 2

printf 'tollgate: {listen: 127.0.0.1:%s, allow_unauthenticated: true}\n' "$RT_ROUTER_PORT" \
    >"$RT_DIR/open2.tail"
sed '$d' "$RT_DIR/open.yaml" >"$RT_DIR/open2.yaml"
cat "$RT_DIR/open2.tail" >>"$RT_DIR/open2.yaml"
rt_router_start "$RT_DIR/open2.yaml"
rt_req open_ok POST /v1/chat/completions -d "$CHAT"
rt_eq "allow_unauthenticated: true serves without a key, on purpose" "$RT_STATUS" 200
rt_req open_bad POST /v1/chat/completions -H "Authorization: Bearer sk-not-a-key" -d "$CHAT"
rt_eq "allow_unauthenticated: a wrong key is still refused" "$RT_STATUS" 401
rt_router_stop

# config_values_with_crlf: a provider key with a trailing newline is refused at start
RT_PROVIDER_KEY="$RT_PROVIDER_KEY"$'\n' "$TG_BUILD_DIR/router-svc/router-svc" \
    --config "$RT_DIR/router.yaml" --check >"$RT_DIR/crlf.out" 2>&1
rt_eq "config_values_with_crlf: --check exits 2" "$?" 2
rt_true "config_values_with_crlf: names the key and the variable" \
    grep -q 'api_key: the value of environment variable RT_PROVIDER_KEY contains a control character (0x0a at byte .*a trailing newline' "$RT_DIR/crlf.out"

# rlimit_nofile_never_raised: raised when the process may; refused, naming the limits, when not
prlimit --nofile=512:"$(ulimit -Hn)" "$TG_BUILD_DIR/router-svc/router-svc" --config "$RT_DIR/router.yaml" \
    >>"$RT_DIR/router.out" 2>>"$RT_DIR/router.log" &
RT_ROUTER_PID=$!
RT_PIDS+=("$RT_ROUTER_PID")
rt_wait_http "$RT_URL/health/readiness" 20 || rt_fail "router with a low soft limit did not start"
rt_true "rlimit_nofile_never_raised: the soft limit is raised to fit the limits" \
    grep -q 'msg=fd_limit_raised from=512' "$RT_DIR/router.log"
rt_router_stop
if command -v setpriv >/dev/null 2>&1; then
    # without CAP_SYS_RESOURCE the hard limit cannot be raised: a clear start-up error
    prlimit --nofile=512:512 setpriv --inh-caps=-all --bounding-set=-sys_resource \
        "$TG_BUILD_DIR/router-svc/router-svc" --config "$RT_DIR/router.yaml" >"$RT_DIR/nofile.out" 2>&1
    rt_eq "rlimit_nofile_never_raised: a hard limit too low is a start-up error" "$?" 1
    rt_true "rlimit_nofile_never_raised: the error names both limits" \
        grep -q 'limits.max_connections and limits.max_in_flight need .* file descriptors, but RLIMIT_NOFILE allows 512' "$RT_DIR/nofile.out"
fi
# admin_listener: with tollgate.admin_listen, /metrics and the key API answer only there (the
# public listener says 404 as for any unknown path), and the admin listener serves nothing else
# but the health checks; the same port twice is a config error
ADMIN_PORT=$(rt_free_port)
sed "s|^  listen: 127.0.0.1:$RT_ROUTER_PORT|  listen: 127.0.0.1:$RT_ROUTER_PORT\n  admin_listen: 127.0.0.1:$ADMIN_PORT|" \
    "$RT_DIR/router.yaml" >"$RT_DIR/admin.yaml"
rt_router_start "$RT_DIR/admin.yaml"
ADMIN="http://127.0.0.1:$ADMIN_PORT"
rt_true "admin_listener: the log names it" grep -q "admin_port=$ADMIN_PORT" "$RT_DIR/router.log"
rt_eq "admin_listener: public /metrics 404" \
    "$(curl -s -o /dev/null -w '%{http_code}' "$RT_URL/metrics")" 404
rt_eq "admin_listener: public key API 404" \
    "$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $RT_MASTER_KEY" \
        -H 'Content-Type: application/json' -d '{}' "$RT_URL/key/generate")" 404
rt_eq "admin_listener: public API still served" \
    "$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $RT_KEY" \
        -H 'Content-Type: application/json' -d "$CHAT" "$RT_URL/v1/chat/completions")" 200
rt_eq "admin_listener: admin /metrics 200" \
    "$(curl -s -o "$RT_DIR/admin_metrics" -w '%{http_code}' "$ADMIN/metrics")" 200
rt_true "admin_listener: the metrics count the public request" \
    grep -q '^tollgate_router_requests_total{model_group="gpt-main",status="200"} 1$' "$RT_DIR/admin_metrics"
rt_eq "admin_listener: admin key API 200 with the master key" \
    "$(curl -s -o "$RT_DIR/admin_key" -w '%{http_code}' -H "Authorization: Bearer $RT_MASTER_KEY" \
        -H 'Content-Type: application/json' -d "{\"key\":\"$RT_KEY\"}" "$ADMIN/key/info")" 200
rt_true "admin_listener: the key's info came back" jq -e '.info.static == true and (.info.key_hash | length == 64)' "$RT_DIR/admin_key"
rt_eq "admin_listener: admin key API 401 without it" \
    "$(curl -s -o /dev/null -w '%{http_code}' -H 'Content-Type: application/json' -d '{}' \
        "$ADMIN/key/generate")" 401
rt_eq "admin_listener: no API calls on the admin port" \
    "$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $RT_KEY" \
        -H 'Content-Type: application/json' -d "$CHAT" "$ADMIN/v1/chat/completions")" 404
rt_eq "admin_listener: health on both" \
    "$(curl -s -o /dev/null -w '%{http_code}' "$ADMIN/health/liveness")$(curl -s -o /dev/null -w '%{http_code}' "$RT_URL/health/liveness")" 200200
rt_router_stop
sed "s|^  listen: 127.0.0.1:$RT_ROUTER_PORT|  listen: 127.0.0.1:$RT_ROUTER_PORT\n  admin_listen: 0.0.0.0:$RT_ROUTER_PORT|" \
    "$RT_DIR/router.yaml" >"$RT_DIR/admin_same.yaml"
"$TG_BUILD_DIR/router-svc/router-svc" --config "$RT_DIR/admin_same.yaml" --check >"$RT_DIR/admin_same.out" 2>&1
rt_eq "admin_listener: the public port twice is a config error" "$?" 2
rt_true "admin_listener: ... naming the key" \
    grep -q "tollgate.admin_listen: the port of tollgate.listen" "$RT_DIR/admin_same.out"
rt_finish
