/* pg_schema: the schema migrations of spend-svc's tables and sp_pg_migrate. */
#include "pg_sink.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pg_int.h"
#include "tg_err.h"
#include "tg_log.h"

#define SP_PG_ADVISORY_LOCK_ID 7270016001LL /* migrations lock, any replica */
#define SP_PG_MIGRATE_TIMEOUT_MS 60000

/* Migrations ----------------------------------------------------------------------------------- */

struct migration {
    int version;
    const char *sql;
};

static const struct migration pg_migrations[] = {
    {1,
     "CREATE TABLE spend_logs ("
     " call_id uuid PRIMARY KEY,"
     " kind text NOT NULL,"
     " ts_start_ms bigint NOT NULL,"
     " ts_end_ms bigint NOT NULL,"
     " endpoint text NOT NULL,"
     " stream boolean NOT NULL,"
     " key_hash text NOT NULL,"
     " key_alias text NOT NULL,"
     " team_id text NOT NULL,"
     " user_id text NOT NULL,"
     " end_user text NOT NULL,"
     " model_requested text NOT NULL,"
     " model_group text NOT NULL,"
     " deployment_id text NOT NULL,"
     " provider text NOT NULL,"
     " model text NOT NULL,"
     " status integer NOT NULL,"
     " error_class text NOT NULL,"
     " prompt_tokens bigint NOT NULL,"
     " completion_tokens bigint NOT NULL,"
     " cost_nusd bigint NOT NULL,"
     " latency_ms bigint NOT NULL,"
     " ttft_ms bigint NOT NULL,"
     " attempts integer NOT NULL,"
     " fallbacks integer NOT NULL,"
     " trail jsonb NOT NULL,"
     " tags jsonb NOT NULL,"
     " trace_id text NOT NULL,"
     " kafka_partition integer NOT NULL,"
     " kafka_offset bigint NOT NULL,"
     " inserted_at timestamptz NOT NULL DEFAULT now());"
     /* budgets over periods that do not start at midnight read recent rows by time: a BRIN
      * index costs almost nothing per insert, where btrees on (key, time) halved the insert
      * rate; whole-day periods read spend_daily */
     "CREATE INDEX spend_logs_ts_brin ON spend_logs USING brin (ts_end_ms);"
     "CREATE TABLE spend_daily ("
     " day date NOT NULL,"
     " key_hash text NOT NULL,"
     " team_id text NOT NULL,"
     " model_group text NOT NULL,"
     " deployment_id text NOT NULL,"
     " requests bigint NOT NULL DEFAULT 0,"
     " failures bigint NOT NULL DEFAULT 0,"
     " prompt_tokens bigint NOT NULL DEFAULT 0,"
     " completion_tokens bigint NOT NULL DEFAULT 0,"
     " cost_nusd bigint NOT NULL DEFAULT 0,"
     " PRIMARY KEY (day, key_hash, team_id, model_group, deployment_id))"
     /* rows are updated in place after every batch: room on the page keeps those updates
      * HOT (no index entries, no bottom-up index cleanup) */
     " WITH (fillfactor = 50);"
     "CREATE INDEX spend_daily_key_day ON spend_daily (key_hash, day);"
     "CREATE INDEX spend_daily_team_day ON spend_daily (team_id, day);"
     "CREATE TABLE consumer_offsets ("
     " topic text NOT NULL,"
     " partition integer NOT NULL,"
     " next_offset bigint NOT NULL,"
     " updated_at timestamptz NOT NULL DEFAULT now(),"
     " PRIMARY KEY (topic, partition));"
     "CREATE TABLE dead_letters ("
     " id bigserial PRIMARY KEY,"
     " source text NOT NULL,"
     " reason text NOT NULL,"
     " payload bytea NOT NULL,"
     " payload_bytes integer NOT NULL,"
     " kafka_partition integer NOT NULL,"
     " kafka_offset bigint NOT NULL,"
     " created_at timestamptz NOT NULL DEFAULT now(),"
     " UNIQUE (source, kafka_partition, kafka_offset));"
     "CREATE TABLE api_keys ("
     " key_hash text PRIMARY KEY,"
     " key_alias text NOT NULL DEFAULT '',"
     " team_id text NOT NULL DEFAULT '',"
     " user_id text NOT NULL DEFAULT '',"
     " max_budget_nusd bigint,"
     " budget_duration_s bigint,"
     " metadata jsonb NOT NULL DEFAULT '{}',"
     " updated_at timestamptz NOT NULL DEFAULT now());"
     "CREATE TABLE budget_state ("
     " kind text NOT NULL,"
     " subject text NOT NULL,"
     " period_start_ms bigint NOT NULL,"
     " level_pct integer NOT NULL DEFAULT 0,"
     " blocked_period_ms bigint,"
     " updated_at timestamptz NOT NULL DEFAULT now(),"
     " PRIMARY KEY (kind, subject));"},
    /* 2: a record of the events topic may hold several events: a dead letter is one event of
     * a record, named by its place in the record (kafka_index, 0 for a one-event record). */
    {2,
     "ALTER TABLE dead_letters ADD COLUMN kafka_index integer NOT NULL DEFAULT 0;"
     "ALTER TABLE dead_letters DROP CONSTRAINT dead_letters_source_kafka_partition_kafka_offset_key;"
     "ALTER TABLE dead_letters ADD CONSTRAINT dead_letters_position"
     " UNIQUE (source, kafka_partition, kafka_offset, kafka_index);"},
};

int sp_pg_migrate(struct sp_pg *pg)
{
    char lock_sql[128];
    char unlock_sql[128];
    char check_sql[128];
    PGresult *res = NULL;
    struct dstr q = {0};
    int locked = 0;
    int applied = 0;
    int rc;

    snprintf(lock_sql, sizeof(lock_sql), "SELECT pg_advisory_lock(%lld)",
             (long long)SP_PG_ADVISORY_LOCK_ID);
    snprintf(unlock_sql, sizeof(unlock_sql), "SELECT pg_advisory_unlock(%lld)",
             (long long)SP_PG_ADVISORY_LOCK_ID);
    rc = sp_pg_run(pg, lock_sql, 0, NULL, 1, SP_PG_MIGRATE_TIMEOUT_MS, &res);
    if (rc < 0)
        goto out;
    PQclear(res);
    res = NULL;
    locked = 1;
    rc = sp_pg_run(pg,
                   "CREATE TABLE IF NOT EXISTS schema_migrations (version integer PRIMARY KEY,"
                   " applied_at timestamptz NOT NULL DEFAULT now())",
                   0, NULL, 1, SP_PG_MIGRATE_TIMEOUT_MS, &res);
    if (rc < 0)
        goto out;
    PQclear(res);
    res = NULL;
    for (size_t i = 0; i < sizeof(pg_migrations) / sizeof(pg_migrations[0]); i++) {
        const struct migration *m = &pg_migrations[i];
        int have;
        snprintf(check_sql, sizeof(check_sql),
                 "SELECT 1 FROM schema_migrations WHERE version = %d", m->version);
        rc = sp_pg_run(pg, check_sql, 0, NULL, 1, SP_PG_MIGRATE_TIMEOUT_MS, &res);
        if (rc < 0)
            goto out;
        have = PQntuples(res) > 0;
        PQclear(res);
        res = NULL;
        if (have)
            continue;
        sp_pg_dstr_reset(&q);
        if (sp_pg_dstr_put(&q, "BEGIN;", 6) < 0 || sp_pg_dstr_put(&q, m->sql, strlen(m->sql)) < 0 ||
            sp_pg_dstr_printf(&q, ";INSERT INTO schema_migrations (version) VALUES (%d);",
                              m->version) < 0 ||
            sp_pg_dstr_put(&q, "COMMIT;", 7) < 0) {
            rc = TG_ENOMEM;
            goto out;
        }
        rc = sp_pg_run(pg, q.p, 0, NULL, 1, SP_PG_MIGRATE_TIMEOUT_MS, &res);
        if (rc < 0) {
            TG_ERROR("msg=\"migration failed\" version=%d sqlstate=%s", m->version, pg->sqlstate);
            goto out;
        }
        PQclear(res);
        res = NULL;
        applied++;
        TG_INFO("msg=\"migration applied\" version=%d", m->version);
    }
    rc = 0;
out:
    if (res)
        PQclear(res);
    if (locked && pg->conn) {
        PGresult *u = NULL;
        if (sp_pg_run(pg, unlock_sql, 0, NULL, 1, SP_PG_MIGRATE_TIMEOUT_MS, &u) == 0)
            PQclear(u);
    }
    free(q.p);
    if (rc == 0)
        TG_INFO("msg=\"schema ready\" applied=%d", applied);
    return rc;
}
