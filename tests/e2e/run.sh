#!/usr/bin/env bash
# tests/e2e/run.sh — start the whole stack and run the end-to-end tests with the official
# clients (node's test runner). Uses the services tests/run started (TG_REDIS_URL, TG_PG_DSN,
# TG_KAFKA_BROKERS); starts its own when they are not set.
set -euo pipefail
SRC="${TG_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}"
export TG_BUILD_DIR="${TG_REL_BUILD_DIR:-${TG_BUILD_DIR:-$SRC/build/rel}}"
STATE="$(mktemp -d /tmp/tollgate-e2e.XXXXXX)"
. "$SRC/tests/lib/services.sh"
. "$SRC/tests/lib/stack.sh"
tg_services_init "$STATE/services"
cleanup() {
    tg_stack_stop || true
    tg_services_stop_all || true
    rm -rf "$STATE"
}
trap cleanup EXIT
[ -n "${TG_REDIS_URL:-}" ] || tg_redis_start
[ -n "${TG_PG_DSN:-}" ] || tg_pg_start
[ -n "${TG_KAFKA_BROKERS:-}" ] || tg_kafka_start
if [ ! -d "$SRC/tests/e2e/node_modules/openai" ]; then
    (cd "$SRC/tests/e2e" && npm ci --no-audit --no-fund --loglevel=error)
fi
tg_stack_init "$STATE/stack"
tg_stack_start
cd "$SRC/tests/e2e"
node --test --test-reporter=spec gateway.test.mjs
