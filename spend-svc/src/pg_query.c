/* pg_query: the reads and small writes outside the batch: stored offsets, the key mirror,
 * totals for Redis rebuilds and budgets, snapshots, reports for the admin HTTP. */
#include "pg_sink.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pg_int.h"
#include "tg_err.h"
#include "tg_log.h"
#include "tg_time.h"
/* Queries -------------------------------------------------------------------------------------- */

int sp_pg_offsets_load(struct sp_pg *pg, const char *topic, const int32_t *parts, int n,
                       int64_t *next)
{
    struct dstr arr = {0};
    const char *values[2];
    PGresult *r = NULL;
    int rc = 0;

    for (int i = 0; i < n; i++)
        next[i] = -1;
    rc |= sp_pg_dstr_putc(&arr, '{');
    for (int i = 0; i < n; i++) {
        rc |= sp_pg_col_sep(&arr, i == 0);
        rc |= sp_pg_dstr_printf(&arr, "%" PRId32, parts[i]);
    }
    rc |= sp_pg_dstr_putc(&arr, '}');
    if (rc) {
        rc = TG_ENOMEM;
        goto out;
    }
    values[0] = topic;
    values[1] = arr.p;
    rc = sp_pg_exec(pg,
                    "SELECT partition, next_offset FROM consumer_offsets WHERE topic = $1 AND"
                    " partition = ANY($2::integer[])",
                    2, values, &r);
    if (rc < 0)
        goto out;
    for (int row = 0; row < PQntuples(r); row++) {
        int32_t p = (int32_t)sp_pg_res_i64(r, row, 0);
        for (int i = 0; i < n; i++)
            if (parts[i] == p)
                next[i] = sp_pg_res_i64(r, row, 1);
    }
    PQclear(r);
out:
    free(arr.p);
    return rc;
}

int sp_pg_api_key_upsert(struct sp_pg *pg, const struct sp_pg_key *k)
{
    char budget[32];
    char period[32];
    const char *values[7];
    PGresult *r = NULL;
    int rc;

    snprintf(budget, sizeof(budget), "%" PRId64, k->max_budget_nusd);
    snprintf(period, sizeof(period), "%" PRId64, k->budget_period_s);
    values[0] = k->key_hash;
    values[1] = k->key_alias;
    values[2] = k->team_id;
    values[3] = k->user_id;
    values[4] = k->max_budget_nusd >= 0 ? budget : NULL;
    values[5] = k->budget_period_s > 0 ? period : NULL;
    values[6] = k->metadata_json ? k->metadata_json : "{}";
    rc = sp_pg_exec(
        pg,
        "INSERT INTO api_keys (key_hash, key_alias, team_id, user_id, max_budget_nusd,"
        " budget_duration_s, metadata) VALUES ($1, $2, $3, $4, $5::bigint, $6::bigint,"
        " $7::jsonb) ON CONFLICT (key_hash) DO UPDATE SET key_alias = EXCLUDED.key_alias,"
        " team_id = EXCLUDED.team_id, user_id = EXCLUDED.user_id,"
        " max_budget_nusd = EXCLUDED.max_budget_nusd,"
        " budget_duration_s = EXCLUDED.budget_duration_s, metadata = EXCLUDED.metadata,"
        " updated_at = now()",
        7, values, &r);
    if (rc == 0)
        PQclear(r);
    return rc;
}

int sp_pg_api_key_delete(struct sp_pg *pg, const char *key_hash)
{
    const char *values[1] = {key_hash};
    PGresult *r = NULL;
    int rc = sp_pg_exec(pg, "DELETE FROM api_keys WHERE key_hash = $1", 1, values, &r);
    if (rc == 0)
        PQclear(r);
    return rc;
}

/* Totals per subject since a time. A period that starts at midnight UTC is summed from
 * spend_daily (cheap); any other start from spend_logs (indexed by subject and ts_end_ms).
 * One statement for both subjects; col is the column that holds the subject. */
#define PG_TOTALS_SQL(col)                                                                         \
    "SELECT u.i, coalesce(sum(t.requests), 0)::bigint, coalesce(sum(t.failures), 0)::bigint,"      \
    " coalesce(sum(t.prompt_tokens), 0)::bigint, coalesce(sum(t.completion_tokens), 0)::bigint,"   \
    " coalesce(sum(t.cost_nusd), 0)::bigint"                                                       \
    " FROM unnest($1::text[], $2::bigint[]) WITH ORDINALITY AS u(subject, since, i)"               \
    " LEFT JOIN LATERAL ("                                                                         \
    "  SELECT d.requests, d.failures, d.prompt_tokens, d.completion_tokens, d.cost_nusd"           \
    "  FROM spend_daily d WHERE u.since % 86400000 = 0 AND d." col " = u.subject"                  \
    "  AND d.day >= date '1970-01-01' + (u.since / 86400000)::integer"                             \
    "  UNION ALL"                                                                                  \
    "  SELECT 1, (s.status >= 400)::integer, s.prompt_tokens, s.completion_tokens, s.cost_nusd"    \
    "  FROM spend_logs s WHERE u.since % 86400000 <> 0 AND s." col " = u.subject"                  \
    "  AND s.ts_end_ms >= u.since AND s.kind = 'request') t ON true"                               \
    " GROUP BY u.i ORDER BY u.i"

static const char pg_totals_key_sql[] = PG_TOTALS_SQL("key_hash");
static const char pg_totals_team_sql[] = PG_TOTALS_SQL("team_id");

#undef PG_TOTALS_SQL

/* res_totals: the five columns from col on of a result row (requests, failures, prompt tokens,
 * completion tokens, cost in nUSD; NULL reads 0) into t. */
static void res_totals(const PGresult *r, int row, int col, struct sp_pg_totals *t)
{
    t->requests = sp_pg_res_i64(r, row, col);
    t->failures = sp_pg_res_i64(r, row, col + 1);
    t->prompt_tokens = sp_pg_res_i64(r, row, col + 2);
    t->completion_tokens = sp_pg_res_i64(r, row, col + 3);
    t->cost_nusd = sp_pg_res_i64(r, row, col + 4);
}

int sp_pg_totals_since(struct sp_pg *pg, int by_team, const char *const *subject,
                       const int64_t *since_ms, int n, struct sp_pg_totals *out)
{
    struct dstr subj = {0};
    struct dstr since = {0};
    const char *values[2];
    PGresult *r = NULL;
    int rc = 0;

    memset(out, 0, sizeof(*out) * (size_t)n);
    if (n == 0)
        return 0;
    rc |= sp_pg_dstr_putc(&subj, '{');
    rc |= sp_pg_dstr_putc(&since, '{');
    for (int i = 0; i < n; i++) {
        rc |= sp_pg_col_sep(&subj, i == 0);
        rc |= sp_pg_col_sep(&since, i == 0);
        rc |= sp_pg_arr_str(&subj, subject[i]);
        rc |= sp_pg_dstr_printf(&since, "%" PRId64, since_ms[i]);
    }
    rc |= sp_pg_dstr_putc(&subj, '}');
    rc |= sp_pg_dstr_putc(&since, '}');
    if (rc) {
        rc = TG_ENOMEM;
        goto out;
    }
    values[0] = subj.p;
    values[1] = since.p;
    rc = sp_pg_exec(pg, by_team ? pg_totals_team_sql : pg_totals_key_sql, 2, values, &r);
    if (rc < 0)
        goto out;
    for (int row = 0; row < PQntuples(r); row++) {
        int64_t i = sp_pg_res_i64(r, row, 0) - 1;
        if (i < 0 || i >= n)
            continue;
        res_totals(r, row, 1, &out[i]);
    }
    PQclear(r);
out:
    free(subj.p);
    free(since.p);
    return rc;
}

int sp_pg_snapshot_begin(struct sp_pg *pg, const char *topic, char *offsets, size_t cap)
{
    const char *values[1] = {topic};
    PGresult *r = NULL;
    int rc;

    offsets[0] = '\0';
    rc = sp_pg_exec(pg, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", 0, NULL, &r);
    if (rc < 0)
        return rc;
    PQclear(r);
    pg->snap_gen = pg->conn_gen;
    /* the transaction's snapshot is taken by its first query: this one */
    rc = sp_pg_exec(pg,
                    "SELECT coalesce(string_agg(partition || ':' || next_offset, ','"
                    " ORDER BY partition), '') FROM consumer_offsets WHERE topic = $1",
                    1, values, &r);
    if (rc < 0)
        return rc;
    if (pg->conn_gen != pg->snap_gen || PQntuples(r) != 1 ||
        (size_t)PQgetlength(r, 0, 0) >= cap) {
        PQclear(r);
        sp_pg_snapshot_end(pg);
        return TG_EUNAVAIL;
    }
    memcpy(offsets, PQgetvalue(r, 0, 0), (size_t)PQgetlength(r, 0, 0) + 1);
    PQclear(r);
    return 0;
}

int sp_pg_snapshot_end(struct sp_pg *pg)
{
    PGresult *r = NULL;
    int rc;

    if (pg->conn == NULL || pg->conn_gen != pg->snap_gen) {
        /* the connection was replaced: what was read did not all come from the snapshot */
        sp_pg_close(pg);
        return TG_EUNAVAIL;
    }
    rc = sp_pg_exec(pg, "COMMIT", 0, NULL, &r);
    if (rc < 0)
        return rc;
    PQclear(r);
    return pg->conn_gen == pg->snap_gen ? 0 : TG_EUNAVAIL;
}

int sp_pg_day_totals(struct sp_pg *pg, const char *day, sp_pg_totals_fn fn, void *ctx)
{
    const char *values[1] = {day};
    PGresult *r = NULL;
    int rc;

    rc = sp_pg_exec(
        pg,
        "SELECT 'key', key_hash, sum(requests)::bigint, sum(failures)::bigint,"
        " sum(prompt_tokens)::bigint, sum(completion_tokens)::bigint,"
        " sum(cost_nusd)::bigint FROM spend_daily WHERE day = $1::date AND key_hash <> ''"
        " GROUP BY key_hash"
        " UNION ALL SELECT 'team', team_id, sum(requests)::bigint, sum(failures)::bigint,"
        " sum(prompt_tokens)::bigint, sum(completion_tokens)::bigint,"
        " sum(cost_nusd)::bigint FROM spend_daily WHERE day = $1::date AND team_id <> ''"
        " GROUP BY team_id"
        " UNION ALL SELECT 'model', model_group, sum(requests)::bigint,"
        " sum(failures)::bigint, sum(prompt_tokens)::bigint,"
        " sum(completion_tokens)::bigint, sum(cost_nusd)::bigint FROM spend_daily"
        " WHERE day = $1::date AND model_group <> '' GROUP BY model_group",
        1, values, &r);
    if (rc < 0)
        return rc;
    for (int row = 0; row < PQntuples(r); row++) {
        struct sp_pg_totals t;
        res_totals(r, row, 2, &t);
        fn(ctx, PQgetvalue(r, row, 0), PQgetvalue(r, row, 1), &t);
    }
    PQclear(r);
    return 0;
}

int sp_pg_budget_raise(struct sp_pg *pg, const char *kind, const char *subject,
                       int64_t period_start_ms, int level, int *raised)
{
    char period[32];
    char lvl[16];
    const char *values[4];
    PGresult *r = NULL;
    int rc;

    *raised = 0;
    snprintf(period, sizeof(period), "%" PRId64, period_start_ms);
    snprintf(lvl, sizeof(lvl), "%d", level);
    values[0] = kind;
    values[1] = subject;
    values[2] = period;
    values[3] = lvl;
    rc =
        sp_pg_exec(pg,
                   "INSERT INTO budget_state AS b (kind, subject, period_start_ms, level_pct)"
                   " VALUES ($1, $2, $3::bigint, $4::integer) ON CONFLICT (kind, subject) DO UPDATE"
                   " SET period_start_ms = EXCLUDED.period_start_ms,"
                   " level_pct = EXCLUDED.level_pct, updated_at = now()"
                   " WHERE b.period_start_ms < EXCLUDED.period_start_ms OR"
                   " (b.period_start_ms = EXCLUDED.period_start_ms AND"
                   " b.level_pct < EXCLUDED.level_pct) RETURNING 1",
                   4, values, &r);
    if (rc < 0)
        return rc;
    *raised = PQntuples(r) > 0;
    PQclear(r);
    return 0;
}

int sp_pg_budget_set_blocked(struct sp_pg *pg, const char *kind, const char *subject,
                             int64_t period_start_ms, int blocked)
{
    char period[32];
    const char *values[4];
    PGresult *r = NULL;
    int rc;

    snprintf(period, sizeof(period), "%" PRId64, period_start_ms);
    values[0] = kind;
    values[1] = subject;
    values[2] = period;
    values[3] = blocked ? "t" : "f";
    rc = sp_pg_exec(pg,
                    "INSERT INTO budget_state AS b (kind, subject, period_start_ms, level_pct,"
                    " blocked_period_ms) VALUES ($1, $2, $3::bigint, 0,"
                    " CASE WHEN $4::boolean THEN $3::bigint END) ON CONFLICT (kind, subject) DO"
                    " UPDATE SET blocked_period_ms = CASE WHEN $4::boolean THEN $3::bigint END,"
                    " updated_at = now()",
                    4, values, &r);
    if (rc == 0)
        PQclear(r);
    return rc;
}

int sp_pg_budget_blocked(struct sp_pg *pg, sp_pg_blocked_fn fn, void *ctx)
{
    PGresult *r = NULL;
    int rc;

    rc = sp_pg_exec(pg,
                    "SELECT kind, subject, blocked_period_ms FROM budget_state"
                    " WHERE blocked_period_ms IS NOT NULL",
                    0, NULL, &r);
    if (rc < 0)
        return rc;
    for (int row = 0; row < PQntuples(r); row++)
        fn(ctx, PQgetvalue(r, row, 0), PQgetvalue(r, row, 1), sp_pg_res_i64(r, row, 2));
    PQclear(r);
    return 0;
}

int sp_pg_day_top(struct sp_pg *pg, const char *day, int per_dim, sp_pg_totals_fn fn, void *ctx,
                  int64_t *total_cost, int64_t *total_requests)
{
    char cap[16];
    const char *values[2];
    PGresult *r = NULL;
    int rc;

    *total_cost = 0;
    *total_requests = 0;
    snprintf(cap, sizeof(cap), "%d", per_dim);
    values[0] = day;
    values[1] = cap;
    rc = sp_pg_exec(
        pg,
        "WITH d AS (SELECT * FROM spend_daily WHERE day = $1::date),"
        " k AS (SELECT 'key'::text AS dim, coalesce(nullif(a.key_alias, ''), left(d.key_hash, 12))"
        "  AS name, sum(d.requests) AS rq, sum(d.failures) AS fl,"
        "  sum(d.prompt_tokens + d.completion_tokens) AS tk, sum(d.cost_nusd) AS c FROM d"
        "  LEFT JOIN api_keys a ON a.key_hash = d.key_hash WHERE d.key_hash <> '' GROUP BY 2"
        "  ORDER BY c DESC LIMIT $2::integer),"
        " t AS (SELECT 'team'::text, team_id, sum(requests), sum(failures),"
        "  sum(prompt_tokens + completion_tokens), sum(cost_nusd) AS c FROM d"
        "  WHERE team_id <> '' GROUP BY 2 ORDER BY c DESC LIMIT $2::integer),"
        " m AS (SELECT 'model'::text, model_group, sum(requests), sum(failures),"
        "  sum(prompt_tokens + completion_tokens), sum(cost_nusd) AS c FROM d"
        "  WHERE model_group <> '' GROUP BY 2 ORDER BY c DESC LIMIT $2::integer)"
        " SELECT 'total', '', coalesce(sum(requests), 0)::bigint, 0::bigint, 0::bigint,"
        "  coalesce(sum(cost_nusd), 0)::bigint FROM d"
        " UNION ALL SELECT * FROM k UNION ALL SELECT * FROM t UNION ALL SELECT * FROM m",
        2, values, &r);
    if (rc < 0)
        return rc;
    for (int row = 0; row < PQntuples(r); row++) {
        struct sp_pg_totals t;
        memset(&t, 0, sizeof(t));
        t.requests = sp_pg_res_i64(r, row, 2);
        t.failures = sp_pg_res_i64(r, row, 3);
        t.prompt_tokens = sp_pg_res_i64(r, row, 4);
        t.cost_nusd = sp_pg_res_i64(r, row, 5);
        if (strcmp(PQgetvalue(r, row, 0), "total") == 0) {
            *total_cost = t.cost_nusd;
            *total_requests = t.requests;
            continue;
        }
        fn(ctx, PQgetvalue(r, row, 0), PQgetvalue(r, row, 1), &t);
    }
    PQclear(r);
    return 0;
}

int sp_pg_spend_log_json(struct sp_pg *pg, const char *call_id, struct tg_buf *out)
{
    const char *values[1] = {call_id};
    PGresult *r = NULL;
    int rc;

    rc = sp_pg_exec(pg, "SELECT row_to_json(s)::text FROM spend_logs s WHERE call_id = $1::uuid", 1,
                    values, &r);
    if (rc < 0)
        return rc;
    if (PQntuples(r) == 0) {
        PQclear(r);
        return TG_ENOTFOUND;
    }
    tg_buf_puts(out, PQgetvalue(r, 0, 0));
    PQclear(r);
    return 0;
}

int sp_pg_spend_report_json(struct sp_pg *pg, const char *group_by, const char *from,
                            const char *to, int row_cap, struct tg_buf *out)
{
    char cap[16];
    const char *values[4];
    PGresult *r = NULL;
    int rc;

    snprintf(cap, sizeof(cap), "%d", row_cap);
    values[0] = group_by;
    values[1] = from;
    values[2] = to;
    values[3] = cap;
    rc = sp_pg_exec(
        pg,
        "WITH g AS (SELECT CASE $1::text WHEN 'key' THEN key_hash WHEN 'team' THEN team_id"
        " ELSE model_group END AS subject, sum(requests)::bigint AS requests,"
        " sum(failures)::bigint AS failures, sum(prompt_tokens)::bigint AS prompt_tokens,"
        " sum(completion_tokens)::bigint AS completion_tokens, sum(cost_nusd)::bigint AS"
        " cost_nusd FROM spend_daily WHERE day BETWEEN $2::date AND $3::date GROUP BY 1),"
        " t AS (SELECT * FROM g ORDER BY cost_nusd DESC, subject LIMIT $4::integer)"
        " SELECT json_build_object('group_by', $1::text, 'from', $2::text, 'to', $3::text,"
        " 'rows', coalesce((SELECT json_agg(t ORDER BY t.cost_nusd DESC, t.subject) FROM t),"
        " '[]'::json), 'truncated', (SELECT count(*) FROM g) > $4::integer)::text",
        4, values, &r);
    if (rc < 0)
        return rc;
    tg_buf_puts(out, PQntuples(r) > 0 ? PQgetvalue(r, 0, 0) : "{}");
    PQclear(r);
    return 0;
}
