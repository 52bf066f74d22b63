#!/usr/bin/env bash
# No key ever reaches a host other than its deployment's own (the provider issue's leak: groq/,
# mistral/, deepseek/ deployments without api_base were sent to api.openai.com with their keys).
#
# router-svc runs with every provider of its table configured without api_base, keys from the
# providers' own environment variables (LiteLLM's names) or from api_key, and its https_proxy /
# http_proxy pointing at tests/fakes/provider_proxy.py, which terminates TLS for every provider
# host with a test CA (SSL_CERT_FILE) and records where each request was meant to go and the
# credentials it carried. Checked: every request reached exactly its provider's documented host
# and path with exactly its own key; a provider key from the environment is not sent to an
# api_base that is another host; every row of `router-svc --providers` is covered here.
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/router_lib.sh"

rt_init router-provider-hosts

# The documented endpoint of each provider (written here independently of the table in
# router-svc/src/providers/openai_compat.c, so that a wrong row fails this test).
declare -A WANT_URL=(
    [openai]=https://api.openai.com/v1/chat/completions
    [anthropic]=https://api.anthropic.com/v1/messages
    [groq]=https://api.groq.com/openai/v1/chat/completions
    [mistral]=https://api.mistral.ai/v1/chat/completions
    [deepseek]=https://api.deepseek.com/v1/chat/completions
    [together_ai]=https://api.together.xyz/v1/chat/completions
    [fireworks_ai]=https://api.fireworks.ai/inference/v1/chat/completions
    [openrouter]=https://openrouter.ai/api/v1/chat/completions
    [perplexity]=https://api.perplexity.ai/chat/completions
    [xai]=https://api.x.ai/v1/chat/completions
    [cerebras]=https://api.cerebras.ai/v1/chat/completions
    [deepinfra]=https://api.deepinfra.com/v1/openai/chat/completions
    [nvidia_nim]=https://integrate.api.nvidia.com/v1/chat/completions
    [ollama]=http://localhost:11434/v1/chat/completions
    [ollama_chat]=http://localhost:11434/v1/chat/completions
    [hosted_vllm]=http://vllm.test:8000/v1/chat/completions # from HOSTED_VLLM_API_BASE
    [lm_studio]=http://localhost:1234/v1/chat/completions
    # from AZURE_API_BASE / AZURE_AI_API_BASE (a resource's own endpoint; no default)
    [azure]="https://res-test.openai.azure.com/openai/deployments/m-azure/chat/completions?api-version=2024-10-21"
    [azure_ai]=https://hub-test.services.ai.azure.com/models/chat/completions
    [gemini]="https://generativelanguage.googleapis.com/v1beta/models/m-gemini:generateContent"
    # project from the service account, location from VERTEXAI_LOCATION
    [bedrock]="https://bedrock-runtime.eu-central-1.amazonaws.com/model/m-bedrock/converse" # AWS_REGION
    [vertex_ai]="https://us-central1-aiplatform.googleapis.com/v1/projects/proj-h/locations/us-central1/publishers/google/models/m-vertex_ai:generateContent"
)
"$TG_BUILD_DIR/router-svc/router-svc" --providers >"$RT_DIR/providers.tsv" ||
    rt_die "router-svc --providers failed"
missing=""
while IFS=$'\t' read -r name _; do
    [ -n "${WANT_URL[$name]:-}" ] || missing="$missing $name"
done <"$RT_DIR/providers.tsv"
rt_eq "every provider of the table has its documented endpoint in this test" "${missing:-none}" none

# A test CA and one certificate for every https provider host.
hosts=$(for u in "${WANT_URL[@]}"; do echo "$u"; done | sed -n 's|^https://\([^/:?]*\).*|\1|p' | sort -u)
san=$(for h in $hosts oauth2.googleapis.com; do printf 'DNS:%s,' "$h"; done)
openssl req -x509 -newkey rsa:2048 -nodes -keyout "$RT_DIR/ca.key" -out "$RT_DIR/ca.crt" \
    -days 2 -subj /CN=tollgate-test-ca -addext basicConstraints=critical,CA:TRUE \
    -addext keyUsage=critical,keyCertSign 2>/dev/null || rt_die "openssl: test CA"
openssl req -newkey rsa:2048 -nodes -keyout "$RT_DIR/hosts.key" -out "$RT_DIR/hosts.csr" \
    -subj /CN=providers 2>/dev/null || rt_die "openssl: host key"
printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth\n' "${san%,}" >"$RT_DIR/hosts.ext"
openssl x509 -req -in "$RT_DIR/hosts.csr" -CA "$RT_DIR/ca.crt" -CAkey "$RT_DIR/ca.key" \
    -CAcreateserial -days 2 -extfile "$RT_DIR/hosts.ext" -out "$RT_DIR/hosts.crt" 2>/dev/null ||
    rt_die "openssl: host certificate"

python3 "$HERE/../fakes/provider_proxy.py" --port-file "$RT_DIR/proxy.port" \
    --cert "$RT_DIR/hosts.crt" --key "$RT_DIR/hosts.key" --log "$RT_DIR/proxy.jsonl" \
    2>"$RT_DIR/proxy.err" &
RT_PIDS+=($!)
for _ in $(seq 1 100); do
    [ -s "$RT_DIR/proxy.port" ] && break
    sleep 0.1
done
[ -s "$RT_DIR/proxy.port" ] || rt_die "provider_proxy did not start"
PROXY="http://127.0.0.1:$(cat "$RT_DIR/proxy.port")"

export AWS_REGION=eu-central-1
export AWS_ACCESS_KEY_ID="AKIA$(head -c 8 /dev/urandom | od -An -tx1 | tr -d ' \n' | tr a-f A-F)"
export AWS_SECRET_ACCESS_KEY=$(rt_randkey aws-secret)
unset AWS_SESSION_TOKEN AWS_ROLE_ARN AWS_WEB_IDENTITY_TOKEN_FILE
# One deployment per provider, no api_base. Keys: the provider's first variable (a distinct
# random value each), except mistral's, given as api_key.
declare -A KEY_OF SET_HERE
{
    echo "model_list:"
    while IFS=$'\t' read -r name base keyvars basevars; do
        var=${keyvars%%,*}
        if [ "$name" = bedrock ]; then
            # AWS_* credentials for AWS's own endpoint; the access key id is what travels (in
            # the signature's Credential=), the secret never does
            KEY_OF[$name]=$AWS_ACCESS_KEY_ID
            extra=""
        elif [ "$name" = vertex_ai ]; then
            # a service account (its key made here) whose token_uri is Google's: the JWT goes
            # there, the token the proxy issues goes to the regional host
            KEY_OF[$name]=proxy-token-
            extra=""
        elif [ "$name" = mistral ]; then
            KEY_OF[$name]=$(rt_randkey "$name")
            export RT_MISTRAL_KEY=${KEY_OF[$name]}
            extra=", api_key: os.environ/RT_MISTRAL_KEY"
        else
            # a random value, never a real key from this machine; set once per variable
            # (ollama and ollama_chat share theirs)
            [ -n "${SET_HERE[$var]:-}" ] || export "$var=$(rt_randkey "$name")"
            SET_HERE[$var]=1
            KEY_OF[$name]=${!var}
            extra=""
        fi
        echo "  - {model_name: p-$name, litellm_params: {model: $name/m-$name$extra}}"
    done <"$RT_DIR/providers.tsv"
    # A provider key in the environment is not sent to an api_base on another host: OpenAI's key
    # to groq's host, groq's key to together's host.
    echo "  - {model_name: x-openai, litellm_params: {model: openai/m-x-openai,"
    echo "     api_base: https://api.groq.com/openai/v1}}"
    echo "  - {model_name: x-groq, litellm_params: {model: groq/m-x-groq,"
    echo "     api_base: https://api.together.xyz/v1}}"
    cat <<YAML
general_settings:
  master_key: os.environ/RT_MASTER_KEY
tollgate:
  listen: 127.0.0.1:$RT_ROUTER_PORT
  keys:
    - {key: os.environ/RT_KEY}
YAML
} >"$RT_DIR/router.yaml"
openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$RT_DIR/sa.key" 2>/dev/null ||
    rt_die "openssl: service-account key"
export VERTEXAI_CREDENTIALS=$(jq -cn --rawfile k "$RT_DIR/sa.key" \
    '{type: "service_account", project_id: "proj-h", private_key_id: "k1", private_key: $k,
      client_email: "svc@proj-h.iam.gserviceaccount.com",
      token_uri: "https://oauth2.googleapis.com/token"}')
export VERTEXAI_LOCATION=us-central1
export HOSTED_VLLM_API_BASE=http://vllm.test:8000/v1
export AZURE_API_BASE=https://res-test.openai.azure.com
export AZURE_AI_API_BASE=https://hub-test.services.ai.azure.com

# The proxy for router-svc only; 127.0.0.1 (this script's own requests to the router) bypasses it.
export https_proxy=$PROXY http_proxy=$PROXY no_proxy=127.0.0.1 NO_PROXY=127.0.0.1
export SSL_CERT_FILE=$RT_DIR/ca.crt
"$TG_BUILD_DIR/router-svc/router-svc" --config "$RT_DIR/router.yaml" --check \
    >"$RT_DIR/check.out" 2>&1
rt_eq "--check warns that OPENAI_API_KEY and GROQ_API_KEY are not sent to another host" \
    "$(grep -c 'is set but not sent' "$RT_DIR/check.out")" 2
rt_router_start "$RT_DIR/router.yaml"

while IFS=$'\t' read -r name _; do
    rt_post "$name" /v1/chat/completions \
        "{\"model\":\"p-$name\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}"
    rt_eq "$name: 200 through its provider" "$RT_STATUS" 200
done <"$RT_DIR/providers.tsv"
for x in x-openai x-groq; do
    rt_post "$x" /v1/chat/completions \
        "{\"model\":\"$x\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}"
    rt_eq "$x: 200" "$RT_STATUS" 200
done
# a stream and an Anthropic-shaped request through a named provider
rt_post groq-stream /v1/chat/completions \
    '{"model":"p-groq","stream":true,"messages":[{"role":"user","content":"hi"}]}'
rt_true "groq: a stream ends with [DONE]" grep -q '^data: \[DONE\]' "$RT_DIR/groq-stream.body"
rt_post groq-messages /v1/messages \
    '{"model":"p-groq","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}'
rt_eq "groq: /v1/messages through the chat translation" \
    "$(jq -r .content[0].text "$RT_DIR/groq-messages.body")" "hello from the proxy"
rt_router_stop

# Where each request was meant to go: scheme://authority/path from the CONNECT target (https) or
# the absolute URL (http), the Host header agreeing; the one credential it carried.
jq -r '
  (if .tunnel != "" then "https://" + (.tunnel | sub(":443$"; "")) else "http://" + .authority end)
  as $url
  | [.model, $url + .path, (.host | sub(":443$"; "")), (.auth | to_entries | map(.key + "=" + .value) | join(";"))]
  | @tsv' "$RT_DIR/proxy.jsonl" >"$RT_DIR/seen.tsv"
rt_true "the proxy saw requests" test -s "$RT_DIR/seen.tsv"

while IFS=$'\t' read -r name _; do
    want=${WANT_URL[$name]}
    want_host=${want#*://}
    want_host=${want_host%%/*}
    case $name in
    anthropic) want_auth="x-api-key=${KEY_OF[$name]}" ;;
    azure | azure_ai) want_auth="api-key=${KEY_OF[$name]}" ;;
    gemini) want_auth="x-goog-api-key=${KEY_OF[$name]}" ;;
    bedrock) want_auth="" ;; # checked below: a signature, not the key
    *) want_auth="authorization=Bearer ${KEY_OF[$name]}" ;;
    esac
    got=$(awk -F'\t' -v m="m-$name" '$1 == m' "$RT_DIR/seen.tsv" | sort -u)
    if [ "$name" = bedrock ]; then
        got=$(echo "$got" | sed 's/authorization=AWS4-HMAC-SHA256 Credential=\([^/]*\)\/.*/sigv4=\1/')
        want_auth="sigv4=${KEY_OF[$name]}"
    fi
    rt_eq "$name: the request went to $want with its own key" "$got" \
        "m-$name	$want	$want_host	$want_auth"
done <"$RT_DIR/providers.tsv"
rt_eq "vertex_ai: the service account's JWT went to its token_uri, Google's, and only there" \
    "$(awk -F'\t' '$2 ~ /\/token$/ { print $2 }' "$RT_DIR/seen.tsv" | sort -u)" \
    "https://oauth2.googleapis.com/token"
rt_eq "openai/ with api_base on groq's host: OPENAI_API_KEY not sent" \
    "$(awk -F'\t' '$1 == "m-x-openai"' "$RT_DIR/seen.tsv")" \
    "m-x-openai	https://api.groq.com/openai/v1/chat/completions	api.groq.com	"
rt_eq "groq/ with api_base on together's host: GROQ_API_KEY not sent" \
    "$(awk -F'\t' '$1 == "m-x-groq"' "$RT_DIR/seen.tsv")" \
    "m-x-groq	https://api.together.xyz/v1/chat/completions	api.together.xyz	"

# Over every request the proxy saw: each key only ever at its own provider's host.
leaks=""
for name in "${!KEY_OF[@]}"; do
    want=${WANT_URL[$name]#*://}
    want=${want%%/*}
    others=$(awk -F'\t' -v k="${KEY_OF[$name]}" -v h="$want" \
        'index($4, k) > 0 && $3 != h { print $3 }' "$RT_DIR/seen.tsv" | sort -u | tr '\n' ' ')
    [ -z "$others" ] || leaks="$leaks $name->$others"
done
rt_eq "no key seen at a host other than its provider's" "${leaks:-none}" none
rt_eq "the AWS secret never went on a wire" \
    "$(grep -cF -- "$AWS_SECRET_ACCESS_KEY" "$RT_DIR/proxy.jsonl")" 0
rt_finish
