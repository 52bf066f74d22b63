#!/usr/bin/env bash
# litellm_import.sh — tollgate-litellm-import brings a LiteLLM proxy's keys (by hash) and teams
# into router-svc. Own PostgreSQL holding LiteLLM's tables (their columns as LiteLLM's
# migration SQL creates them), Apache Kafka (one node) and fake-llm (tests/lib/services.sh):
#   1. the import: keys users already hold authenticate with their limits, an expired key is
#      skipped, a blocked one refused, a key naming a model the router does not serve is
#      reported by name (never by secret) with the API's message, and the exit status says so;
#   2. a second import after changes in LiteLLM updates what exists (limits, blocks), exit 0;
#      teams come first, with their limits, and a team blocked in LiteLLM blocks its keys;
#   3. a router restart replays the imported keys from the control topic;
#   4. --dry-run prints the calls and sends nothing; nothing printed holds a raw key.
set -euo pipefail
SRC="${TG_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}"
BIN="${TG_BUILD_DIR:?TG_BUILD_DIR unset}"
STATE="$(mktemp -d /tmp/tollgate-litellm-import.XXXXXX)"
unset TG_KAFKA_BROKERS TG_KAFKA_CTL
. "$SRC/tests/lib/services.sh"
tg_services_init "$STATE/services"
PIDS=""
PASS=0
cleanup() {
    local rc=$?
    for p in $PIDS; do kill -KILL "$p" 2>/dev/null || true; done
    tg_services_stop_all || true
    if [ "$rc" != 0 ]; then
        echo "--- router-svc log tail" >&2
        tail -n 20 "$STATE"/router*.log >&2 || true
        echo "--- import output" >&2
        tail -n 20 "$STATE"/import*.out "$STATE"/import*.err >&2 || true
    fi
    [ -n "${TG_KEEP:-}" ] || rm -rf "$STATE"
    exit "$rc"
}
trap cleanup EXIT
fail() { echo "FAIL litellm_import: $*" >&2; exit 1; }
ok() { PASS=$((PASS + 1)); echo "ok $PASS - $*"; }

tg_pg_start
tg_kafka_start 1
echo '{"default": {"prompt_tokens": 5, "completion_tokens": 3}}' >"$STATE/fake.json"
tg_fakellm_start "$STATE/fake.json"
export LI_MASTER="sk-master-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"

# LiteLLM's database: the three tables the import reads, with LiteLLM's columns.
LITELLM_DB="postgresql://postgres@127.0.0.1:$TG_PG_PORT/litellm"
psql -q -v ON_ERROR_STOP=1 "$TG_PG_DSN" -c 'CREATE DATABASE litellm' >/dev/null
sql() { psql -q -v ON_ERROR_STOP=1 -At "$LITELLM_DB" -c "$1"; }
sql '
CREATE TABLE "LiteLLM_BudgetTable" (
    "budget_id" TEXT PRIMARY KEY, "max_budget" DOUBLE PRECISION, "soft_budget" DOUBLE PRECISION,
    "max_parallel_requests" INTEGER, "tpm_limit" BIGINT, "rpm_limit" BIGINT,
    "model_max_budget" JSONB, "budget_duration" TEXT, "budget_reset_at" TIMESTAMP(3),
    "created_at" TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP, "created_by" TEXT NOT NULL,
    "updated_at" TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP, "updated_by" TEXT NOT NULL);
CREATE TABLE "LiteLLM_TeamTable" (
    "team_id" TEXT PRIMARY KEY, "team_alias" TEXT, "organization_id" TEXT, "admins" TEXT[],
    "members" TEXT[], "members_with_roles" JSONB NOT NULL DEFAULT '"'"'{}'"'"',
    "metadata" JSONB NOT NULL DEFAULT '"'"'{}'"'"', "max_budget" DOUBLE PRECISION,
    "spend" DOUBLE PRECISION NOT NULL DEFAULT 0.0, "models" TEXT[],
    "max_parallel_requests" INTEGER, "tpm_limit" BIGINT, "rpm_limit" BIGINT,
    "budget_duration" TEXT, "budget_reset_at" TIMESTAMP(3),
    "blocked" BOOLEAN NOT NULL DEFAULT false,
    "created_at" TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updated_at" TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "model_spend" JSONB NOT NULL DEFAULT '"'"'{}'"'"',
    "model_max_budget" JSONB NOT NULL DEFAULT '"'"'{}'"'"', "model_id" INTEGER);
CREATE TABLE "LiteLLM_VerificationToken" (
    "token" TEXT PRIMARY KEY, "key_name" TEXT, "key_alias" TEXT,
    "soft_budget_cooldown" BOOLEAN NOT NULL DEFAULT false,
    "spend" DOUBLE PRECISION NOT NULL DEFAULT 0.0, "expires" TIMESTAMP(3), "models" TEXT[],
    "aliases" JSONB NOT NULL DEFAULT '"'"'{}'"'"', "config" JSONB NOT NULL DEFAULT '"'"'{}'"'"',
    "user_id" TEXT, "team_id" TEXT, "permissions" JSONB NOT NULL DEFAULT '"'"'{}'"'"',
    "max_parallel_requests" INTEGER, "metadata" JSONB NOT NULL DEFAULT '"'"'{}'"'"',
    "blocked" BOOLEAN, "tpm_limit" BIGINT, "rpm_limit" BIGINT, "max_budget" DOUBLE PRECISION,
    "budget_duration" TEXT, "budget_reset_at" TIMESTAMP(3),
    "allowed_cache_controls" TEXT[] DEFAULT ARRAY[]::TEXT[],
    "model_spend" JSONB NOT NULL DEFAULT '"'"'{}'"'"',
    "model_max_budget" JSONB NOT NULL DEFAULT '"'"'{}'"'"', "budget_id" TEXT,
    "organization_id" TEXT, "created_at" TIMESTAMP(3) DEFAULT CURRENT_TIMESTAMP,
    "created_by" TEXT, "updated_at" TIMESTAMP(3) DEFAULT CURRENT_TIMESTAMP, "updated_by" TEXT,
    "allowed_routes" TEXT[] DEFAULT ARRAY[]::TEXT[]);'

# Keys as LiteLLM stores them: the SHA-256 of the key in "token", times in UTC without zone.
rand() { head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n'; }
K_ALPHA="sk-alpha-$(rand)"
K_EXPIRED="sk-expired-$(rand)"
K_BLOCKED="sk-blocked-$(rand)"
K_BUDGET="sk-budget-$(rand)"
K_UNKNOWN="sk-unknown-$(rand)"
h() { printf %s "$1" | sha256sum | cut -c1-64; }
sql "
INSERT INTO \"LiteLLM_TeamTable\" (team_id, team_alias, models, rpm_limit, max_budget,
        budget_duration, metadata)
    VALUES ('team-search', 'search', '{gpt-main}', 100, 250.0, '7d', '{\"cost_center\": \"42\"}');
INSERT INTO \"LiteLLM_BudgetTable\" (budget_id, rpm_limit, max_budget, created_by, updated_by)
    VALUES ('tier-1', 1, 50.0, 'admin', 'admin');
INSERT INTO \"LiteLLM_VerificationToken\" (token, key_name, key_alias, spend, expires, models,
        rpm_limit, metadata, budget_duration, max_budget)
    VALUES ('$(h "$K_ALPHA")', 'sk-...alph', 'alpha', 0.5,
        (now() AT TIME ZONE 'UTC') + interval '1 day', '{gpt-main}', 2,
        '{\"tags\": [\"imported\"]}', '30d', 10.0);
INSERT INTO \"LiteLLM_VerificationToken\" (token, key_alias, expires)
    VALUES ('$(h "$K_EXPIRED")', 'expired', (now() AT TIME ZONE 'UTC') - interval '1 day');
INSERT INTO \"LiteLLM_VerificationToken\" (token, key_alias, blocked, models)
    VALUES ('$(h "$K_BLOCKED")', 'blocked', true, '{all-proxy-models}');
INSERT INTO \"LiteLLM_VerificationToken\" (token, key_alias, budget_id, team_id)
    VALUES ('$(h "$K_BUDGET")', 'budget', 'tier-1', 'team-search');
INSERT INTO \"LiteLLM_VerificationToken\" (token, key_alias, models)
    VALUES ('$(h "$K_UNKNOWN")', 'unknown-model', '{gpt-main,no-such-model}');"

PORT=$(tg_port_pick)
cat >"$STATE/router.yaml" <<YAML
model_list:
  - model_name: gpt-main
    litellm_params: {model: openai/fake-main, api_base: $TG_FAKE_LLM_URL/v1, api_key: sk-provider}
general_settings: {master_key: os.environ/LI_MASTER}
tollgate:
  listen: 127.0.0.1:$PORT
  kafka: {brokers: "$TG_KAFKA_BROKERS", events_topic: tollgate.events.v1,
          control_topic: tollgate.control.v1}
  spool: {dir: $STATE/spool, max_bytes: 67108864}
YAML
start() {
    "$BIN/router-svc/router-svc" --config "$STATE/router.yaml" 2>>"$STATE/router.log" &
    RPID=$!
    PIDS="$PIDS $RPID"
    for _ in $(seq 1 300); do
        curl -fsS -o /dev/null "http://127.0.0.1:$PORT/health/readiness" 2>/dev/null && return 0
        sleep 0.1
    done
    fail "router not ready: $(curl -sS "http://127.0.0.1:$PORT/health/readiness")"
}
chat() { # KEY -> HTTP status
    curl -sS -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $1" \
        -H 'Content-Type: application/json' \
        -d '{"model":"gpt-main","messages":[{"role":"user","content":"hi"}]}' \
        "http://127.0.0.1:$PORT/v1/chat/completions"
}
import() { # NAME [ARGS...] -> exit status in $STATE/NAME.rc
    local name=$1
    shift
    set +e
    DATABASE_URL="$LITELLM_DB" TOLLGATE_MASTER_KEY="$LI_MASTER" \
        "$BIN/tools/tollgate-litellm-import" --router "http://127.0.0.1:$PORT" "$@" \
        >"$STATE/$name.out" 2>"$STATE/$name.err"
    echo $? >"$STATE/$name.rc"
    set -e
}
no_secret() { # FILE...: no raw key of the test in them
    local k
    for k in "$K_ALPHA" "$K_EXPIRED" "$K_BLOCKED" "$K_BUDGET" "$K_UNKNOWN" "$LI_MASTER"; do
        ! grep -qF "$k" "$@" || fail "a raw key in $*"
    done
}
start

# 1. The first import.
import import1
[ "$(cat "$STATE/import1.rc")" = 1 ] || fail "first import: exit $(cat "$STATE/import1.rc"), want 1 (one key failed)"
grep -qx 'teams: 1 created, 0 updated, 0 skipped, 0 failed; keys: 3 created, 0 updated, 1 skipped, 1 failed' \
    "$STATE/import1.out" || fail "first import summary: $(cat "$STATE/import1.out")"
grep -q "key $(h "$K_UNKNOWN" | cut -c1-12) (alias \"unknown-model\"): 400 .*models\[1\]" \
    "$STATE/import1.err" || fail "the failed key is not reported by name and field: $(cat "$STATE/import1.err")"
grep -q "alias \"expired\"): skipped: expired" "$STATE/import1.err" ||
    fail "the expired key's skip is not reported: $(cat "$STATE/import1.err")"
no_secret "$STATE/import1.out" "$STATE/import1.err" "$STATE/router.log"
ok "import: 3 keys created, the expired one skipped, the unknown model reported by name and field"

[ "$(chat "$K_ALPHA")" = 200 ] || fail "an imported key does not authenticate"
[ "$(chat "$K_ALPHA")" = 200 ] || fail "an imported key's second request"
[ "$(chat "$K_ALPHA")" = 429 ] || fail "an imported key's rpm_limit 2 is not enforced"
[ "$(chat "$K_BUDGET")" = 200 ] || fail "a key with a LiteLLM budget row does not authenticate"
[ "$(chat "$K_BUDGET")" = 429 ] || fail "the budget row's rpm_limit 1 is not enforced"
[ "$(chat "$K_EXPIRED")" = 401 ] || fail "an expired key was imported"
[ "$(chat "$K_BLOCKED")" = 401 ] || fail "a blocked key is not refused"
[ "$(chat "$K_UNKNOWN")" = 401 ] || fail "a key that failed to import authenticates"
curl -sS -H "Authorization: Bearer $LI_MASTER" \
    "http://127.0.0.1:$PORT/key/info?key=$(h "$K_ALPHA")" >"$STATE/info.json"
[ "$(jq -c '[.info.key_alias, .info.models, .info.max_budget, .info.budget_duration, .info.spend, .info.metadata.tags]' "$STATE/info.json")" = \
    '["alpha",["gpt-main"],10,"30d",0.5,["imported"]]' ] || fail "/key/info of an imported key: $(cat "$STATE/info.json")"
curl -sS -H "Authorization: Bearer $LI_MASTER" \
    "http://127.0.0.1:$PORT/team/info?team_id=team-search" >"$STATE/team.json"
jq -e '(.team_info // .) | .team_alias == "search" and .models == ["gpt-main"] and .rpm_limit == 100
       and .max_budget == 250 and .budget_duration == "7d" and .metadata.cost_center == "42"' \
    "$STATE/team.json" >/dev/null || fail "/team/info of an imported team: $(cat "$STATE/team.json")"
ok "imported keys authenticate with LiteLLM's limits (own and budget row), blocks and expiry; the team with its limits"

# 2. Changes in LiteLLM, imported again: existing keys are updated.
sql "UPDATE \"LiteLLM_TeamTable\" SET rpm_limit = NULL, blocked = true WHERE team_id = 'team-search';
     UPDATE \"LiteLLM_VerificationToken\" SET rpm_limit = 50 WHERE key_alias = 'alpha';
     UPDATE \"LiteLLM_VerificationToken\" SET blocked = false WHERE key_alias = 'blocked';
     DELETE FROM \"LiteLLM_VerificationToken\" WHERE key_alias = 'unknown-model';"
import import2
[ "$(cat "$STATE/import2.rc")" = 0 ] || fail "second import: exit $(cat "$STATE/import2.rc"): $(cat "$STATE/import2.err")"
grep -qx 'teams: 0 created, 1 updated, 0 skipped, 0 failed; keys: 0 created, 3 updated, 1 skipped, 0 failed' \
    "$STATE/import2.out" || fail "second import summary: $(cat "$STATE/import2.out")"
[ "$(chat "$K_BLOCKED")" = 200 ] || fail "a block lifted in LiteLLM is still in force after the import"
curl -sS -H "Authorization: Bearer $LI_MASTER" \
    "http://127.0.0.1:$PORT/key/info?key=$(h "$K_ALPHA")" >"$STATE/info.json"
[ "$(jq -c .info.rpm_limit "$STATE/info.json")" = 50 ] || fail "rpm_limit not updated: $(cat "$STATE/info.json")"
[ "$(chat "$K_BUDGET")" = 401 ] || fail "a key of a team blocked in LiteLLM still works after the import"
curl -sS -H "Authorization: Bearer $LI_MASTER" \
    "http://127.0.0.1:$PORT/team/info?team_id=team-search" >"$STATE/team.json"
jq -e '(.team_info // .) | .rpm_limit == null and .blocked == true' "$STATE/team.json" >/dev/null ||
    fail "team not updated: $(cat "$STATE/team.json")"
ok "a second import updates the keys and teams that exist (limits cleared, blocks set and lifted), exit 0"

# 3. Restart: the imported keys come back from the control topic.
kill -TERM "$RPID"
wait "$RPID" || fail "router exited $? on SIGTERM"
rm -rf "$STATE/spool"
start
[ "$(chat "$K_ALPHA")" = 200 ] || fail "an imported key did not survive a restart"
[ "$(chat "$K_EXPIRED")" = 401 ] || fail "after a restart an expired key authenticates"
ok "imported keys survive a router restart (replayed from the control topic)"

# 4. Dry run: the calls, nothing sent, no secret.
sql "INSERT INTO \"LiteLLM_VerificationToken\" (token, key_alias) VALUES ('$(h "$K_UNKNOWN")', 'dry');"
import dry --dry-run
[ "$(cat "$STATE/dry.rc")" = 0 ] || fail "dry run: exit $(cat "$STATE/dry.rc")"
[ "$(jq -s 'map(select(.path == "/key/generate")) | length' "$STATE/dry.out")" = 4 ] &&
    [ "$(jq -s 'map(select(.path == "/team/new")) | length' "$STATE/dry.out")" = 1 ] ||
    fail "dry run calls: $(cat "$STATE/dry.out")"
jq -e -s "map(.body.key_hash) | index(\"$(h "$K_UNKNOWN")\") != null" "$STATE/dry.out" >/dev/null ||
    fail "dry run misses the new key"
[ "$(chat "$K_UNKNOWN")" = 401 ] || fail "a dry run sent a key"
no_secret "$STATE/dry.out" "$STATE/dry.err"
ok "--dry-run prints the calls (key_hash, never a key) and sends nothing"

# Errors before any work: no database, wrong database.
DATABASE_URL= TOLLGATE_MASTER_KEY=x "$BIN/tools/tollgate-litellm-import" 2>"$STATE/e1" && fail "no database accepted"
grep -q 'DATABASE_URL' "$STATE/e1" || fail "no-database error: $(cat "$STATE/e1")"
set +e
TOLLGATE_MASTER_KEY=x "$BIN/tools/tollgate-litellm-import" --database-url "$TG_PG_DSN" 2>"$STATE/e2"
rc=$?
set -e
[ "$rc" = 2 ] && grep -q 'LiteLLM_VerificationToken' "$STATE/e2" || fail "not-LiteLLM database: exit $rc $(cat "$STATE/e2")"
ok "usage and database errors exit 2 with a message naming what is wrong"
echo "$PASS passed, 0 failed"
