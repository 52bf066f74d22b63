#!/usr/bin/env bash
# tests/chaos/redis_vs_pg.sh — exit 0 when today's Redis spend counters equal the totals in
# PostgreSQL's spend_daily (key, team and model group hashes; every field; a field never
# incremented counts as 0). Uses TG_PG_DSN and TG_REDIS_PORT. Prints the differences otherwise.
set -uo pipefail
day=$(date -u +%F)
expected=$(psql "$TG_PG_DSN" -X -q -t -A -F'|' -v ON_ERROR_STOP=1 -c "
    SELECT 'tg:spend:day:$day:key:' || key_hash, sum(requests), sum(failures),
           sum(prompt_tokens), sum(completion_tokens), sum(cost_nusd)
      FROM spend_daily WHERE day = '$day' AND key_hash <> '' GROUP BY key_hash
    UNION ALL
    SELECT 'tg:spend:day:$day:team:' || team_id, sum(requests), sum(failures),
           sum(prompt_tokens), sum(completion_tokens), sum(cost_nusd)
      FROM spend_daily WHERE day = '$day' AND team_id <> '' GROUP BY team_id
    UNION ALL
    SELECT 'tg:spend:day:$day:model:' || model_group, sum(requests), sum(failures),
           sum(prompt_tokens), sum(completion_tokens), sum(cost_nusd)
      FROM spend_daily WHERE day = '$day' AND model_group <> '' GROUP BY model_group
    ORDER BY 1") || { echo "postgres query failed"; exit 1; }
[ -n "$expected" ] || { echo "no spend_daily rows for $day"; exit 1; }
n_pg=$(printf '%s\n' "$expected" | grep -c .)
n_redis=$(redis-cli -p "$TG_REDIS_PORT" --scan --pattern "tg:spend:day:$day:*" | wc -l)
if [ "$n_pg" != "$n_redis" ]; then
    echo "redis has $n_redis counters for $day, postgres $n_pg"
    exit 1
fi
got=$(printf '%s\n' "$expected" | cut -d'|' -f1 | while read -r k; do
    echo "HMGET $k requests failures prompt_tokens completion_tokens cost_nusd"
done | redis-cli -p "$TG_REDIS_PORT" | sed 's/^$/0/' | paste -d'|' - - - - -)
got=$(paste -d'|' <(printf '%s\n' "$expected" | cut -d'|' -f1) <(printf '%s\n' "$got"))
if [ "$got" != "$expected" ]; then
    diff <(printf "%s\n" "$expected") <(printf "%s\n" "$got") | head -n 20
    exit 1
fi
echo "redis = postgres: $n_pg counters for $day"
