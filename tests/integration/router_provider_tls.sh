#!/usr/bin/env bash
# How router-svc verifies an HTTPS provider's certificate (LiteLLM's ssl_verify):
#
# An HTTPS provider (tests/fakes/provider_proxy.py --direct) on a free loopback port presents a
# certificate for 127.0.0.1 signed by a test CA made here. Checked, each over a real TLS
# handshake, once through the built-in client (OpenSSL on the loop, upstream_client: native, the
# default) and once through libcurl (upstream_client: curl), the same words from both:
#  - without ssl_verify (nothing trusts the test CA): 502 whose message names the certificate
#    problem as libcurl words it ("SSL certificate problem: unable to get local issuer
#    certificate"), and the provider sees no request;
#  - ssl_verify: <the test CA> → 200; the same for a name the certificate does not carry
#    (localhost) → 502 naming the name mismatch; ssl_verify: <another CA> → 502;
#  - ssl_verify: false → 200, for the wrong name too;
#  - litellm_settings.ssl_verify: false applies to a deployment without its own, and a
#    deployment's ssl_verify: true wins over it (502);
#  - SSL_CERT_FILE=<the test CA> → 200 for a deployment without ssl_verify, while one with
#    ssl_verify: <another CA> still trusts that bundle alone (502);
#  - SSL_CERT_FILE naming a bundle of 200 CAs is read once, not again for each new connection
#    (libcurl rebuilt its store per connection while a CA directory was set beside the file:
#    some 40 ms on the loop and most of a megabyte per pooled connection);
#  - a bad ssl_verify value is a configuration error naming the key (--check).
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/router_lib.sh"

rt_init router-provider-tls
unset SSL_CERT_FILE SSL_CERT_DIR CURL_CA_BUNDLE https_proxy HTTPS_PROXY http_proxy HTTP_PROXY \
    all_proxy ALL_PROXY

mkca() { # NAME: a test CA in $RT_DIR/NAME.crt (.key)
    openssl req -x509 -newkey rsa:2048 -nodes -keyout "$RT_DIR/$1.key" -out "$RT_DIR/$1.crt" \
        -days 2 -subj "/CN=tollgate-test-$1" -addext basicConstraints=critical,CA:TRUE \
        -addext keyUsage=critical,keyCertSign 2>/dev/null || rt_die "openssl: CA $1"
}
mkca ca
mkca other-ca
openssl req -newkey rsa:2048 -nodes -keyout "$RT_DIR/srv.key" -out "$RT_DIR/srv.csr" \
    -subj /CN=provider 2>/dev/null || rt_die "openssl: server key"
printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' >"$RT_DIR/srv.ext"
openssl x509 -req -in "$RT_DIR/srv.csr" -CA "$RT_DIR/ca.crt" -CAkey "$RT_DIR/ca.key" \
    -CAcreateserial -days 2 -extfile "$RT_DIR/srv.ext" -out "$RT_DIR/srv.crt" 2>/dev/null ||
    rt_die "openssl: server certificate"

python3 "$HERE/../fakes/provider_proxy.py" --direct --port-file "$RT_DIR/tls.port" \
    --cert "$RT_DIR/srv.crt" --key "$RT_DIR/srv.key" --log "$RT_DIR/tls.jsonl" \
    2>"$RT_DIR/tls.err" &
RT_PIDS+=($!)
rt_wait_file "$RT_DIR/tls.port" 10 || rt_die "the HTTPS provider did not start"
TLS_PORT=$(cat "$RT_DIR/tls.port")
BASE="https://127.0.0.1:$TLS_PORT/v1"
WRONG_NAME="https://localhost:$TLS_PORT/v1"

# A sanity check of the fake itself, with curl: it serves TLS with the test CA's certificate.
code=$(curl -sS -o /dev/null -w '%{http_code}' --cacert "$RT_DIR/ca.crt" -X POST \
    -H 'Content-Type: application/json' --data '{"model":"m"}' "$BASE/chat/completions")
rt_eq "the HTTPS provider answers a client that trusts the test CA" "$code" 200

dep() { # GROUP API_BASE [EXTRA litellm_params]
    echo "  - model_name: $1$SFX"
    echo "    litellm_params: {model: openai/m-$1$SFX, api_base: \"$2\", api_key: os.environ/RT_PROVIDER_KEY${3:+, $3}}"
}

write_config() { # FILE LITELLM_SETTINGS_SSL_VERIFY(or "") DEPLOYMENT-LINES...
    local file=$1 global=$2
    shift 2
    {
        echo "model_list:"
        printf '%s\n' "$@"
        echo "router_settings: {num_retries: 0, cooldown_time: 0}"
        [ -z "$global" ] || echo "litellm_settings: {ssl_verify: $global}"
        cat <<YAML
general_settings:
  master_key: os.environ/RT_MASTER_KEY
tollgate:
  listen: 127.0.0.1:$RT_ROUTER_PORT
  threads: 1                   # one loop: its transfers reuse the same handles and sessions
  upstream_client: $CLIENT
  keys:
    - {key: os.environ/RT_KEY}
YAML
    } >"$file"
}

chat() { # NAME GROUP: status in RT_STATUS, error message in RT_MSG
    rt_post "$1$SFX" /v1/chat/completions "{\"model\":\"$2$SFX\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}"
    RT_MSG=$(jq -r '.error.message // ""' "$RT_DIR/$1$SFX.body" 2>/dev/null)
}

served() { # MODEL: requests the provider received for it
    grep -c "\"model\": \"m-$1$SFX\"" "$RT_DIR/tls.jsonl"
}

metric() { curl -s "$RT_URL/metrics" | awk -v m="$1" '$1 == m {print $2}'; }

# Both clients verify the same way and fail with the same words: the built-in one (OpenSSL on
# the loop, the default) and libcurl (upstream_client: curl).
for CLIENT in native curl; do
SFX=""
[ "$CLIENT" = native ] || SFX="-$CLIENT"
echo "# upstream_client: $CLIENT"

# 1. Deployment-level ssl_verify, no SSL_CERT_FILE.
write_config "$RT_DIR/r1.yaml" "" \
    "$(dep plain "$BASE")" \
    "$(dep with-ca "$BASE" "ssl_verify: $RT_DIR/ca.crt")" \
    "$(dep with-ca-wrong-name "$WRONG_NAME" "ssl_verify: $RT_DIR/ca.crt")" \
    "$(dep other-ca "$BASE" "ssl_verify: $RT_DIR/other-ca.crt")" \
    "$(dep no-verify "$BASE" "ssl_verify: false")" \
    "$(dep no-verify-wrong-name "$WRONG_NAME" "ssl_verify: False")"
rt_router_start "$RT_DIR/r1.yaml"
# A host name goes through libcurl until the resolver thread has its address; the deployments'
# names are asked for at start, so even the first request for localhost is the built-in
# client's (counted below).
chat first-by-name with-ca-wrong-name
rt_eq "the first request for a host name: 502 as below" "$RT_STATUS" 502

chat plain plain
rt_eq "no ssl_verify, a CA nobody trusts: 502" "$RT_STATUS" 502
rt_true "the 502 names the certificate problem (got: $RT_MSG)" \
    grep -q "SSL certificate problem: unable to get local issuer certificate" <<<"$RT_MSG"
rt_eq "the provider saw no request from the failed handshake" "$(served plain)" 0
chat with-ca with-ca
rt_eq "ssl_verify: <the test CA>: 200" "$RT_STATUS" 200
rt_eq "the provider served it" "$(served with-ca)" 1
chat wrong-name with-ca-wrong-name
rt_eq "ssl_verify: <the test CA>, a name the certificate lacks: 502" "$RT_STATUS" 502
rt_true "the 502 names the name mismatch (got: $RT_MSG)" \
    grep -q "no alternative certificate subject name matches target host name 'localhost'" <<<"$RT_MSG"
chat other-ca other-ca
rt_eq "ssl_verify: <another CA>: 502" "$RT_STATUS" 502
rt_true "the 502 names the certificate problem (got: $RT_MSG)" \
    grep -q "SSL certificate problem" <<<"$RT_MSG"
chat no-verify no-verify
rt_eq "ssl_verify: false: 200" "$RT_STATUS" 200
chat no-verify-wrong-name no-verify-wrong-name
rt_eq "ssl_verify: False, wrong name: 200" "$RT_STATUS" 200
# The handles are reused: a verified transfer after unverified ones still verifies.
chat plain-again plain
rt_eq "no ssl_verify after ssl_verify: false on the same loop: still 502" "$RT_STATUS" 502
chat with-ca-again with-ca
rt_eq "ssl_verify: <the test CA> again: 200" "$RT_STATUS" 200
rt_true "no secret in the router's log" bash -c "! grep -q -e '$RT_PROVIDER_KEY' -e '$RT_KEY' '$RT_DIR/router.log'"
transfers=$(metric tollgate_router_upstream_native_transfers_total)
handshakes=$(metric tollgate_router_upstream_tls_handshakes_total)
if [ "$CLIENT" = native ]; then
    rt_eq "$CLIENT: every transfer went through the built-in client, the first by name too" \
        "$transfers" 9
    # six verified or failed connections, the unverified and the verified origins kept apart:
    # each transfer of an origin after its first reuses its connection
    rt_true "$CLIENT: TLS handshakes of the built-in client counted (got ${handshakes:-none})" \
        test "${handshakes:-0}" -ge 3
else
    rt_eq "$CLIENT: no transfer through the built-in client" "$transfers" 0
    rt_eq "$CLIENT: no handshake of the built-in client" "$handshakes" 0
fi
rt_router_stop || rt_fail "router-svc did not stop cleanly"

# 2. litellm_settings.ssl_verify: false for every deployment without its own; a deployment's
#    ssl_verify: true wins.
write_config "$RT_DIR/r2.yaml" false \
    "$(dep inherits "$BASE")" \
    "$(dep strict "$BASE" "ssl_verify: true")"
rt_router_start "$RT_DIR/r2.yaml"
chat inherits inherits
rt_eq "litellm_settings.ssl_verify: false applies: 200" "$RT_STATUS" 200
chat strict strict
rt_eq "the deployment's ssl_verify: true wins over the global false: 502" "$RT_STATUS" 502
rt_router_stop || rt_fail "router-svc did not stop cleanly"

# 3. litellm_settings.ssl_verify: <the test CA>.
write_config "$RT_DIR/r3.yaml" "$RT_DIR/ca.crt" "$(dep global-ca "$BASE")"
rt_router_start "$RT_DIR/r3.yaml"
chat global-ca global-ca
rt_eq "litellm_settings.ssl_verify: <the test CA>: 200" "$RT_STATUS" 200
rt_router_stop || rt_fail "router-svc did not stop cleanly"

# 4. SSL_CERT_FILE.
write_config "$RT_DIR/r4.yaml" "" \
    "$(dep env-ca "$BASE")" \
    "$(dep env-but-other "$BASE" "ssl_verify: $RT_DIR/other-ca.crt")"
export SSL_CERT_FILE=$RT_DIR/ca.crt
rt_router_start "$RT_DIR/r4.yaml"
unset SSL_CERT_FILE
chat env-ca env-ca
rt_eq "SSL_CERT_FILE=<the test CA>: 200" "$RT_STATUS" 200
chat env-but-other env-but-other
rt_eq "ssl_verify: <another CA> trusts that bundle alone, not SSL_CERT_FILE: 502" "$RT_STATUS" 502
rt_router_stop || rt_fail "router-svc did not stop cleanly"

# 5. SSL_CERT_FILE naming a bundle of 200 CAs (a system bundle's size): read once, never again
#    for a new connection. 24 requests at once each need a connection of their own; bytes the
#    process read (/proc/PID/io rchar: files, and the TLS sockets OpenSSL reads with read(2))
#    stay under one reading of the bundle.
write_config "$RT_DIR/r6.yaml" "" "$(dep env-big "$BASE")"
for _ in $(seq 1 200); do cat "$RT_DIR/other-ca.crt"; done >"$RT_DIR/big.crt"
cat "$RT_DIR/ca.crt" >>"$RT_DIR/big.crt"
big=$(stat -c %s "$RT_DIR/big.crt")
export SSL_CERT_FILE=$RT_DIR/big.crt
rt_router_start "$RT_DIR/r6.yaml"
unset SSL_CERT_FILE
chat env-big env-big
rt_eq "SSL_CERT_FILE=<200 CAs and the test CA>: 200" "$RT_STATUS" 200
read0=$(awk '$1 == "rchar:" {print $2}' "/proc/$RT_ROUTER_PID/io")
seq 1 24 | xargs -P 24 -I{} curl -s -o /dev/null -w '%{http_code}\n' --max-time 60 \
    -H "Authorization: Bearer $RT_KEY" -H 'Content-Type: application/json' \
    -d "{\"model\":\"env-big$SFX\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}" \
    "$RT_URL/v1/chat/completions" >"$RT_DIR/big$SFX.codes"
read1=$(awk '$1 == "rchar:" {print $2}' "/proc/$RT_ROUTER_PID/io")
rt_eq "24 requests at once: 24 answers 200" "$(grep -c '^200$' "$RT_DIR/big$SFX.codes")" 24
rt_eq "the provider served 25" "$(served env-big)" 25
rt_true "$CLIENT: the bundle ($big bytes) was not read again for the new connections (read $((read1 - read0)) bytes)" \
    test $((read1 - read0)) -lt "$big"
rt_router_stop || rt_fail "router-svc did not stop cleanly"
done

# 5. A bad value is a configuration error naming the key.
write_config "$RT_DIR/r5.yaml" "" "$(dep bad "$BASE" "ssl_verify: $RT_DIR/nonexistent.pem")"
out=$("$TG_BUILD_DIR/router-svc/router-svc" --check --config "$RT_DIR/r5.yaml" 2>&1)
rt_eq "--check refuses an unreadable ssl_verify path" "$?" 2
rt_true "the error names the key (got: $out)" \
    grep -q "model_list\[0\].litellm_params.ssl_verify: expected true, false or the path of a CA bundle: cannot read" <<<"$out"

rt_finish
