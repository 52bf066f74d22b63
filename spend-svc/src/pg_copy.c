/* pg_copy: the binary COPY write paths: the direct COPY into spend_logs (the spend_daily
 * groups folded by pg_fold.c) and the COPY into the session temp table followed by the
 * prepared statement. */
#include "pg_sink.h"

#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pg_int.h"
#include "tg_err.h"
#include "tg_log.h"
#include "tg_time.h"
/* Fast path: binary COPY ----------------------------------------------------------------------- */

/* Text parameter arrays cost Postgres an array parse of every element and a text-to-type
 * conversion of every number; binary COPY hands it each field ready to store. The events go
 * into a session temp table, then a statement prepared once per connection moves them on:
 *   COPY sp_batch FROM STDIN (FORMAT binary); EXECUTE sp_flush(topic, partitions, offsets)
 * Both travel in ONE simple-query message, which Postgres runs as one implicit transaction:
 * the COPY, spend_logs, spend_daily and consumer_offsets commit together or not at all, and
 * ON COMMIT DELETE ROWS empties sp_batch at that commit (a rolled-back COPY leaves nothing).
 * Batches with dead letters take the parameter-array statement above (rare, and it has the
 * dead_letters insert). */
static const char pg_session_sql[] =
    "CREATE TEMP TABLE sp_batch (call_id uuid, kind text, ts_start_ms bigint,"
    " ts_end_ms bigint, endpoint text, stream boolean, key_hash text, key_alias text,"
    " team_id text, user_id text, end_user text, model_requested text, model_group text,"
    " deployment_id text, provider text, model text, status integer, error_class text,"
    " prompt_tokens bigint, completion_tokens bigint, cost_nusd bigint, latency_ms bigint,"
    " ttft_ms bigint, attempts integer, fallbacks integer, trail jsonb, tags jsonb,"
    " trace_id text, kafka_partition integer, kafka_offset bigint) ON COMMIT DELETE ROWS;"
    "PREPARE sp_flush (text, integer[], bigint[]) AS"
    " WITH" SP_PG_SQL_INSERT_FOLD("sp_batch")
    SP_PG_SQL_OFFS("$1", "$2", "$3")
    SP_PG_SQL_RESULT("0::bigint");

#define SP_PG_COPY_CHUNK_BYTES 65536 /* PQputCopyData per call */

/* copy_put: n bytes of the COPY stream, waiting (deadline) while libpq's buffer is full.
 * Returns 0, -1 (connection broken) or -2 (deadline). */
static int copy_put(struct sp_pg *pg, const char *p, size_t n)
{
    for (;;) {
        int w = PQputCopyData(pg->conn, p, (int)n);
        if (w < 0)
            return -1;
        if (w == 1)
            return 0;
        /* nonblocking and the buffer is full: let the socket drain */
        if (sp_pg_wait(pg->conn, POLLOUT, pg->deadline_ms) < 0)
            return -2;
        if (PQflush(pg->conn) < 0)
            return -1;
    }
}

/* copy_stream: the binary COPY stream of the batch's events, straight from the arena: header,
 * the records of the events still held (a revoked partition's records stay in the arena,
 * unused; adjacent records go out together, up to SP_PG_COPY_CHUNK_BYTES), trailer.
 * Returns 0, -1 (connection broken) or -2 (deadline). */
static int copy_stream(struct sp_pg *pg, const struct sp_pg_batch *b)
{
    static const char head[19] = {'P', 'G', 'C', 'O', 'P', 'Y', '\n', '\377', '\r', '\n', '\0',
                                  0, 0, 0, 0, 0, 0, 0, 0}; /* signature, flags, extension */
    static const char trailer[2] = {'\377', '\377'};     /* field count -1 */
    size_t run_off = 0;
    size_t run_len = 0;
    int rc = copy_put(pg, head, sizeof(head));

    for (int i = 0; rc == 0 && i < b->nev; i++) {
        const struct batch_event *e = &b->ev[i];

        if (run_len > 0 && e->rec_off == run_off + run_len &&
            run_len + e->rec_len <= SP_PG_COPY_CHUNK_BYTES) {
            run_len += e->rec_len;
            continue;
        }
        if (run_len > 0)
            rc = copy_put(pg, b->rec.p + run_off, run_len);
        run_off = e->rec_off;
        run_len = e->rec_len;
    }
    if (rc == 0 && run_len > 0)
        rc = copy_put(pg, b->rec.p + run_off, run_len);
    if (rc == 0)
        rc = copy_put(pg, trailer, sizeof(trailer));
    return rc;
}

/* pg_session: the temp table and the prepared statement of the fast path on this connection
 * (once per connection: a reconnect clears session_ready). Returns 0 or a tg_err. */
static int pg_session(struct sp_pg *pg)
{
    PGresult *r = NULL;
    int rc;

    if (pg->conn && pg->session_ready && PQstatus(pg->conn) == CONNECTION_OK)
        return 0;
    rc = sp_pg_run(pg, pg_session_sql, 0, NULL, 1, pg->timeout_ms, &r);
    if (rc < 0)
        return rc;
    PQclear(r);
    pg->session_ready = 1;
    return 0;
}

/* Direct path: COPY straight into spend_logs --------------------------------------------------- */

/* Redelivered events are rare (a restart, a rebalance, the router's spool replay): a batch
 * usually holds only new call ids. Such a batch is written as
 *   COPY spend_logs FROM STDIN (FORMAT binary); INSERT INTO spend_daily ... ON CONFLICT DO
 *   UPDATE; INSERT INTO consumer_offsets ... ON CONFLICT DO UPDATE
 * in one simple-query message (one implicit transaction), with the spend_daily groups and the
 * Redis increments folded here from the batch's records: no temp table, no speculative
 * insertion, no RETURNING, and COPY's multi-row inserts. A call id that is already stored
 * fails the COPY with unique_violation: nothing was written, and the batch goes through the
 * temp-table statement (ON CONFLICT DO NOTHING RETURNING), which counts only new rows. */

static const char direct_copy_sql[] =
    "COPY spend_logs (" SP_PG_SQL_LOG_COLUMNS ") FROM STDIN (FORMAT binary);";

/* put_lit: s (n bytes) as an SQL string literal. Returns 0 or TG_ENOMEM. */
static int put_lit(struct sp_pg *pg, struct dstr *q, const char *s, size_t n)
{
    char *lit = PQescapeLiteral(pg->conn, s, n);
    int rc;

    if (!lit)
        return TG_ENOMEM;
    rc = sp_pg_dstr_put(q, lit, strlen(lit));
    PQfreemem(lit);
    return rc;
}

/* direct_sql: the statements after the COPY into q: the spend_daily upsert of pg->daily (in
 * key order, as the temp-table statement, so that writers lock rows in the same order) and
 * the consumer_offsets upsert. Returns 0 or TG_ENOMEM. */
static int direct_sql(struct sp_pg *pg, struct sp_pg_batch *b, const char *topic,
                      struct dstr *q)
{
    static const int scols[] = {C_KEY_HASH, C_TEAM, C_MODEL_GROUP, C_DEPLOYMENT};
    const struct fold *fd = pg->daily;
    int rc = 0;

    sp_pg_dstr_reset(q);
    rc |= sp_pg_dstr_put(q, direct_copy_sql, sizeof(direct_copy_sql) - 1);
    if (fd->n > 0) {
        /* one array per column (day numbers, the four strings, the five sums), each group
         * appended to all ten in one pass; b->col[0..9] are free while this batch is sent */
        struct dstr *arr = b->col;

        for (int k = 0; k < 10; k++) {
            sp_pg_dstr_reset(&arr[k]);
            rc |= sp_pg_dstr_putc(&arr[k], '{');
        }
        int first = 1;

        for (size_t j = 0; j < fd->cap; j++) {
            const struct fold_ent *e = &fd->e[j];
            const int64_t sums[6] = {e->t, e->requests, e->failures, e->prompt, e->completion,
                                     e->cost};
            struct rec_field g[SP_PG_NCOLS];

            if (e->rec < 0)
                continue;
            sp_pg_rec_fields(b, e->rec, g);
            for (int k = 0; k < 10; k++)
                rc |= sp_pg_col_sep(&arr[k], first);
            first = 0;
            for (int k = 0; k < 4; k++)
                rc |= sp_pg_arr_strn(&arr[1 + k], g[scols[k]].p, (size_t)g[scols[k]].len);
            rc |= sp_pg_dstr_printf(&arr[0], "%" PRId64, sums[0]);
            for (int k = 1; k < 6; k++)
                rc |= sp_pg_dstr_printf(&arr[4 + k], "%" PRId64, sums[k]);
        }
        rc |= sp_pg_dstr_puts(
            q, "INSERT INTO spend_daily AS d (day, key_hash, team_id, model_group,"
               " deployment_id, requests, failures, prompt_tokens,"
               " completion_tokens, cost_nusd) SELECT date '1970-01-01' + dn, kh, tm,"
               " mg, dp, rq, fl, pt, ct, cs FROM unnest(");
        for (int k = 0; k < 10; k++) {
            rc |= sp_pg_dstr_putc(&arr[k], '}');
            if (k > 0)
                rc |= sp_pg_dstr_putc(q, ',');
            rc |= put_lit(pg, q, arr[k].p, arr[k].len);
            rc |= sp_pg_dstr_puts(q, k == 0 ? "::integer[]" : k <= 4 ? "::text[]" : "::bigint[]");
        }
        rc |= sp_pg_dstr_puts(q, ") AS z(dn, kh, tm, mg, dp, rq, fl, pt, ct, cs)"
                                 " ORDER BY 1, 2, 3, 4, 5" SP_PG_SQL_DAILY_ADD ";");
    }
    rc |= sp_pg_dstr_puts(
        q, "INSERT INTO consumer_offsets AS c (topic, partition, next_offset) SELECT ");
    rc |= put_lit(pg, q, topic, strlen(topic));
    rc |= sp_pg_dstr_puts(q, ", p, n FROM unnest('{");
    for (int i = 0; i < b->npart; i++) {
        rc |= sp_pg_col_sep(q, i == 0);
        rc |= sp_pg_dstr_printf(q, "%" PRId32, b->part[i]);
    }
    rc |= sp_pg_dstr_puts(q, "}'::integer[], '{");
    for (int i = 0; i < b->npart; i++) {
        rc |= sp_pg_col_sep(q, i == 0);
        rc |= sp_pg_dstr_printf(q, "%" PRId64, b->next[i]);
    }
    rc |= sp_pg_dstr_puts(q, "}'::bigint[]) AS z(p, n)" SP_PG_SQL_OFFSETS_FORWARD);
    return rc ? TG_ENOMEM : 0;
}

/* sp_pg_copy_send: send the fast-path query, wait for the server to accept the COPY, stream the
 * batch and end the COPY. The statement then runs; sp_pg_collect gets its result. Returns 0 or a
 * tg_err; on error nothing was committed (the transaction cannot end before the COPY does). */
int sp_pg_copy_send(struct sp_pg *pg, struct sp_pg_batch *b, const char *topic, int direct)
{
    struct dstr *q = &b->col[C_OFF_PART];
    char *lit = NULL;
    PGresult *r = NULL;
    int rc;

    pg->direct = direct;
    if (direct) {
        rc = sp_pg_connect(pg);
        if (rc == 0)
            rc = sp_pg_fold_batch(pg, b);
        if (rc == 0)
            rc = direct_sql(pg, b, topic, q);
        if (rc < 0)
            return rc;
        goto send;
    }
    rc = pg_session(pg);
    if (rc < 0)
        return rc;
    lit = PQescapeLiteral(pg->conn, topic, strlen(topic));
    if (!lit)
        return TG_ENOMEM;
    sp_pg_dstr_reset(q);
    rc |= sp_pg_dstr_put(q, "COPY sp_batch FROM STDIN (FORMAT binary);EXECUTE sp_flush(", 58);
    rc |= sp_pg_dstr_put(q, lit, strlen(lit));
    rc |= sp_pg_dstr_put(q, ",'{", 3);
    for (int i = 0; i < b->npart; i++) {
        rc |= sp_pg_col_sep(q, i == 0);
        rc |= sp_pg_dstr_printf(q, "%" PRId32, b->part[i]);
    }
    rc |= sp_pg_dstr_put(q, "}','{", 5);
    for (int i = 0; i < b->npart; i++) {
        rc |= sp_pg_col_sep(q, i == 0);
        rc |= sp_pg_dstr_printf(q, "%" PRId64, b->next[i]);
    }
    rc |= sp_pg_dstr_put(q, "}')", 3);
    PQfreemem(lit);
    if (rc)
        return TG_ENOMEM;
send:
    rc = sp_pg_send(pg, q->p, 0, NULL, 1, pg->timeout_ms);
    if (rc < 0)
        return rc;
    /* the server runs the COPY statement and asks for the data */
    for (;;) {
        if (!PQconsumeInput(pg->conn))
            goto broken;
        if (!PQisBusy(pg->conn))
            break;
        if (sp_pg_wait(pg->conn, POLLIN, pg->deadline_ms) < 0)
            goto timeout;
    }
    r = PQgetResult(pg->conn);
    if (!r || PQresultStatus(r) != PGRES_COPY_IN) {
        /* e.g. the session lost its temp table: start over on a new connection */
        rc = r ? sp_pg_classify(pg, r) : TG_EUNAVAIL;
        TG_WARN_RL("msg=\"postgres refused the batch copy\" sqlstate=%s err=%s", pg->sqlstate,
                   tg_errname(rc));
        if (r)
            PQclear(r);
        sp_pg_close(pg);
        return TG_EUNAVAIL;
    }
    PQclear(r);
    rc = copy_stream(pg, b);
    if (rc == -1)
        goto broken;
    if (rc == -2)
        goto timeout;
    for (;;) {
        int w = PQputCopyEnd(pg->conn, NULL);
        if (w < 0)
            goto broken;
        if (w == 1)
            break;
        if (sp_pg_wait(pg->conn, POLLOUT, pg->deadline_ms) < 0)
            goto timeout;
        if (PQflush(pg->conn) < 0)
            goto broken;
    }
    return sp_pg_push(pg);
timeout:
    TG_WARN_RL("msg=\"postgres query timed out\" timeout_ms=%d", pg->timeout_used_ms);
    sp_pg_abandon(pg);
    return TG_ETIMEOUT;
broken:
    sp_pg_close(pg);
    return TG_EUNAVAIL;
}
