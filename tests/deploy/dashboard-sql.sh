#!/usr/bin/env bash
# Runs the dashboard's spend-per-hour SQL panels against spend-svc's real schema: a scratch
# database gets spend-svc's own migrations (spend-svc is started on it and stopped), 30 known
# spend_logs rows over two hours, then each panel's query with Grafana's time macros expanded.
# Asserts the USD totals, the hourly buckets and the series names.
#
# Usage: dashboard-sql.sh DASHBOARD.json SPEND_SVC_BINARY
# Uses TG_PG_DSN when set (a scratch database is created there and dropped), else starts its
# own PostgreSQL through tests/lib/services.sh. Prints "ok ..." lines; exits 1 on a failure.
set -uo pipefail
export PGTZ=UTC

dash="$1"
spend="$2"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
work="$(mktemp -d /tmp/tg-dashboard-sql.XXXXXX)"
own_pg=0
db="tg_dashboard_$$"
spid=""

cleanup() {
    [ -n "$spid" ] && kill -KILL "$spid" 2>/dev/null
    if [ -n "${admin_dsn:-}" ]; then
        psql "$admin_dsn" -q -c "DROP DATABASE IF EXISTS $db" >/dev/null 2>&1
    fi
    [ "$own_pg" = 1 ] && tg_services_stop_all >/dev/null 2>&1
    rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAIL $*"; exit 1; }

command -v psql >/dev/null || fail "psql is not installed"
if [ -z "${TG_PG_DSN:-}" ]; then
    # shellcheck source=/dev/null
    . "$root/tests/lib/services.sh"
    tg_services_init "$work/services" >/dev/null || fail "tg_services_init"
    own_pg=1
    tg_pg_start >/dev/null || fail "cannot start PostgreSQL"
fi
admin_dsn="$TG_PG_DSN"
dsn="${TG_PG_DSN%/*}/$db"
psql "$admin_dsn" -q -v ON_ERROR_STOP=1 -c "CREATE DATABASE $db" >"$work/psql.log" 2>&1 \
    || fail "CREATE DATABASE: $(cat "$work/psql.log")"

# spend-svc applies its migrations at start, whatever else is unreachable.
cat >"$work/spend.yaml" <<EOF
listen: 127.0.0.1:0
kafka: {brokers: "127.0.0.1:1", topic: tollgate.events.v1, control_topic: tollgate.control.v1, group_id: dashboard-sql}
postgres: {dsn: "$dsn"}
redis: {url: "redis://127.0.0.1:1/0"}
EOF
"$spend" --config "$work/spend.yaml" >"$work/spend.log" 2>&1 &
spid=$!
for _ in $(seq 1 100); do
    [ "$(psql "$dsn" -Atc "SELECT to_regclass('spend_logs') IS NOT NULL" 2>/dev/null)" = t ] && break
    kill -0 "$spid" 2>/dev/null || break
    sleep 0.1
done
kill -TERM "$spid" 2>/dev/null
wait "$spid" 2>/dev/null
spid=""
[ "$(psql "$dsn" -Atc "SELECT to_regclass('spend_logs') IS NOT NULL")" = t ] \
    || fail "spend-svc did not create spend_logs: $(tail -3 "$work/spend.log")"

# 30 calls of 1.5 USD (1,500,000,000 nano-USD) at 2026-01-01 00:30 and 01:30 UTC: keys by
# i % 3, team-a for even i (else no team), gpt-main for i % 4 == 0 (else claude).
t0=1767227400000
psql "$dsn" -q -v ON_ERROR_STOP=1 >"$work/psql.log" 2>&1 <<EOF || fail "insert: $(cat "$work/psql.log")"
INSERT INTO spend_logs (call_id, kind, ts_start_ms, ts_end_ms, endpoint, stream, key_hash,
    key_alias, team_id, user_id, end_user, model_requested, model_group, deployment_id, provider,
    model, status, error_class, prompt_tokens, completion_tokens, cost_nusd, latency_ms, ttft_ms,
    attempts, fallbacks, trail, tags, trace_id, kafka_partition, kafka_offset)
SELECT gen_random_uuid(), 'request', ts - 100, ts, '/v1/chat/completions', false,
    'keyhash' || (i % 3) || '-0123456789abcdef', '',
    CASE WHEN i % 2 = 0 THEN 'team-a' ELSE '' END, '', '', g, g, 'd1', 'openai', 'm', 200, '',
    10, 5, 1500000000, 100, 0, 1, 0, '[]'::jsonb, '[]'::jsonb, '', 0, i
FROM (SELECT i, $t0 + (i % 2) * 3600000 AS ts,
             CASE WHEN i % 4 = 0 THEN 'gpt-main' ELSE 'claude' END AS g
      FROM generate_series(1, 30) AS i) AS x;
EOF

from=$((t0 / 1000 - 86400))
to=$((t0 / 1000 + 86400))
n=0
while IFS= read -r -d '' q; do
    title="${q%%$'\n'*}"
    sql="${q#*$'\n'}"
    sql="${sql//\$__unixEpochFrom()/$from}"
    sql="${sql//\$__unixEpochTo()/$to}"
    if ! psql "$dsn" -At -F'|' -v ON_ERROR_STOP=1 -c "$sql" >"$work/out" 2>&1; then
        fail "$title: $(cat "$work/out")"
    fi
    rows="$(wc -l <"$work/out")"
    total="$(awk -F'|' '{ s += $3 } END { printf "%.2f", s }' "$work/out")"
    hours="$(cut -d'|' -f1 "$work/out" | sort -u | tr '\n' ',')"
    series="$(cut -d'|' -f2 "$work/out" | sort -u | tr '\n' ',')"
    case "$title" in
        *"by key"*) want_rows=6 want_series="keyhash0-012,keyhash1-012,keyhash2-012," ;;
        *"by team"*) want_rows=2 want_series="(no team),team-a," ;;
        *"by model group"*) want_rows=3 want_series="claude,gpt-main," ;;
        *) fail "unexpected SQL panel: $title" ;;
    esac
    [ "$total" = "45.00" ] || fail "$title: total $total USD, expected 45.00 (30 x 1.5)"
    [ "$rows" = "$want_rows" ] || fail "$title: $rows rows, expected $want_rows: $(tr '\n' ' ' <"$work/out")"
    [ "$series" = "$want_series" ] || fail "$title: series $series, expected $want_series"
    case "$hours" in
        "2026-01-01 00:00:00+00,2026-01-01 01:00:00+00,") ;;
        *) fail "$title: hourly buckets $hours" ;;
    esac
    n=$((n + 1))
done < <(jq -j '.panels[] | select(.datasource.type == "grafana-postgresql-datasource")
                | .title + "\n" + .targets[0].rawSql + "\u0000"' "$dash")
[ "$n" = 3 ] || fail "expected 3 SQL panels, ran $n"
echo "ok   dashboard SQL on spend-svc's schema: $n panels, 45.00 USD in two hourly buckets each"
