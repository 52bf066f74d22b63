#!/usr/bin/env bash
# tests/e2e/providers_run.sh — router-svc in front of the cloud provider fakes
# (tests/fakes/cloud_fake.py: Azure OpenAI + Entra ID, Gemini API, Vertex AI + Google OAuth,
# Bedrock + STS) and fake-llm (an Anthropic and an OpenAI deployment, for tools through
# translation), then providers.test.mjs with the official openai and @anthropic-ai/sdk
# clients. No Kafka, Redis or Postgres: spend events stay in router-svc's log.
set -euo pipefail
SRC="${TG_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}"
export TG_BUILD_DIR="${TG_REL_BUILD_DIR:-${TG_BUILD_DIR:-$SRC/build/rel}}"
. "$SRC/tests/integration/router_lib.sh"
set -e

rt_init e2e-providers

if [ ! -d "$SRC/tests/e2e/node_modules/openai" ]; then
    (cd "$SRC/tests/e2e" && npm ci --no-audit --no-fund --loglevel=error)
fi

openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$RT_DIR/sa.key" 2>/dev/null
openssl pkey -in "$RT_DIR/sa.key" -pubout -out "$RT_DIR/sa.pub" 2>/dev/null
export RT_AZ_KEY=$(rt_randkey azure)
export RT_ENTRA_SECRET=$(rt_randkey entra)
export RT_GEMINI_KEY=$(rt_randkey gemini)
export RT_AWS_KEY_ID=AKIAE2ETESTKEY00001
export RT_AWS_SECRET=$(rt_randkey aws)
export RT_WEB_IDENTITY=$(rt_randkey webid)
CLAUDE=anthropic.claude-3-5-sonnet-20240620-v1:0
cat >"$RT_DIR/cloud.json" <<JSON
{"azure": {"api_key": "$RT_AZ_KEY", "api_version": "2024-10-21",
           "deployments": ["gpt-dep", "gpt-entra", "emb-dep"]},
 "entra": {"tenant": "tenant-1", "client_id": "app-1", "client_secret": "$RT_ENTRA_SECRET",
           "expires_in": 3600},
 "gemini": {"api_key": "$RT_GEMINI_KEY", "models": ["gemini-2.0-flash", "text-embedding-004"]},
 "vertex": {"project": "proj-e2e", "location": "us-central1",
            "models": ["gemini-2.0-flash", "claude-3-5-sonnet@20240620", "text-embedding-005"]},
 "google": {"client_email": "svc@proj-e2e.iam.gserviceaccount.com", "kid": "kid-1",
            "public_key": "$RT_DIR/sa.pub", "expires_in": 3600},
 "bedrock": {"access_key_id": "$RT_AWS_KEY_ID", "secret": "$RT_AWS_SECRET",
             "region": "us-east-1", "models": ["$CLAUDE", "amazon.titan-embed-text-v2:0", "m-429"]},
 "sts": {"role_arn": "arn:aws:iam::123456789012:role/e2e", "web_identity_token":
         "$RT_WEB_IDENTITY", "expires_in": 3600}}
JSON
echo '{"default": {}}' >"$RT_DIR/fake.json"
rt_fake_start "$RT_DIR/fake.json"
python3 "$SRC/tests/fakes/cloud_fake.py" --config "$RT_DIR/cloud.json" \
    --port-file "$RT_DIR/cloud.port" --log "$RT_DIR/cloud.jsonl" 2>"$RT_DIR/cloud.err" &
RT_PIDS+=($!)
for _ in $(seq 1 100); do
    [ -s "$RT_DIR/cloud.port" ] && break
    sleep 0.1
done
[ -s "$RT_DIR/cloud.port" ] || rt_die "cloud_fake did not start"
CLOUD="http://127.0.0.1:$(cat "$RT_DIR/cloud.port")"
jq -cn --rawfile k "$RT_DIR/sa.key" --arg uri "$CLOUD/token" \
    '{type: "service_account", project_id: "proj-e2e", private_key_id: "kid-1", private_key: $k,
      client_email: "svc@proj-e2e.iam.gserviceaccount.com", token_uri: $uri}' >"$RT_DIR/sa.json"
curl -fsS -o /dev/null -X POST "$CLOUD/_control/fault/m-429" -d '{"status":429}'

AWS="aws_region_name: us-east-1, aws_bedrock_runtime_endpoint: $CLOUD"
KEYS="aws_access_key_id: os.environ/RT_AWS_KEY_ID, aws_secret_access_key: os.environ/RT_AWS_SECRET"
VX="vertex_credentials: $RT_DIR/sa.json, vertex_location: us-central1, api_base: $CLOUD"
cat >"$RT_DIR/router.yaml" <<YAML
model_list:
  - model_name: azure-key
    litellm_params: {model: azure/gpt-dep, api_base: $CLOUD, api_key: os.environ/RT_AZ_KEY}
  - model_name: azure-entra
    litellm_params: {model: azure/gpt-entra, api_base: $CLOUD, tenant_id: tenant-1,
                     client_id: app-1, client_secret: os.environ/RT_ENTRA_SECRET,
                     azure_authority_host: $CLOUD}
  - model_name: azure-embed
    litellm_params: {model: azure/emb-dep, api_base: $CLOUD, api_key: os.environ/RT_AZ_KEY}
  - model_name: gemini
    litellm_params: {model: gemini/gemini-2.0-flash, api_base: $CLOUD/v1beta,
                     api_key: os.environ/RT_GEMINI_KEY}
  - model_name: gemini-embed
    litellm_params: {model: gemini/text-embedding-004, api_base: $CLOUD/v1beta,
                     api_key: os.environ/RT_GEMINI_KEY}
  - model_name: vertex-gemini
    litellm_params: {model: vertex_ai/gemini-2.0-flash, $VX}
  - model_name: vertex-claude
    litellm_params: {model: "vertex_ai/claude-3-5-sonnet@20240620", $VX}
  - model_name: vertex-embed
    litellm_params: {model: vertex_ai/text-embedding-005, $VX}
  - model_name: bedrock
    litellm_params: {model: "bedrock/$CLAUDE", $AWS, $KEYS}
  - model_name: bedrock-sts
    litellm_params: {model: "bedrock/$CLAUDE", $AWS,
                     aws_role_name: "arn:aws:iam::123456789012:role/e2e",
                     aws_web_identity_token: os.environ/RT_WEB_IDENTITY,
                     aws_sts_endpoint: $CLOUD/sts/}
  - model_name: bedrock-embed
    litellm_params: {model: "bedrock/amazon.titan-embed-text-v2:0", $AWS, $KEYS}
  - model_name: bedrock-429
    litellm_params: {model: bedrock/m-429, $AWS, $KEYS}
  - model_name: fl-anthropic
    litellm_params: {model: anthropic/fake-claude, api_base: $RT_FAKE, api_key: sk-fake}
  - model_name: fl-openai
    litellm_params: {model: openai/fake-gpt, api_base: $RT_FAKE/v1, api_key: sk-fake}
router_settings:
  num_retries: 0
general_settings:
  master_key: os.environ/RT_MASTER_KEY
tollgate:
  listen: 127.0.0.1:$RT_ROUTER_PORT
  keys:
    - {key: os.environ/RT_KEY}
YAML
rt_router_start "$RT_DIR/router.yaml"
cd "$SRC/tests/e2e"
TG_ROUTER_URL="$RT_URL" TG_STACK_KEY="$RT_KEY" node --test --test-reporter=spec providers.test.mjs
