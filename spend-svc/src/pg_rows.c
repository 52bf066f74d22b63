/* pg_rows: the parameter-array write path: one statement with the batch's columns as arrays
 * (INSERT ... ON CONFLICT DO NOTHING RETURNING, the spend_daily fold of the returned rows, dead
 * letters, consumer offsets), and the one-by-one retry of a batch Postgres refused. */
#include "pg_sink.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pg_int.h"
#include "tg_err.h"
#include "tg_log.h"
#include "tg_time.h"

/* Flush ---------------------------------------------------------------------------------------- */

/* One statement, one transaction. Parameters:
 *   $1..$30  spend_logs columns as arrays (see pg_build)
 *   $31..$34 dead letters: reason text[], payload bytea[], partition int[], offset bigint[]
 *   $35      topic
 *   $36..$37 consumer offsets: partition int[], next_offset bigint[]
 *   $38      dead letters: index in the record int[]
 * Result: rows with t = 0 are the aggregates of inserted request rows (per minute, key, team,
 * model group); the single row with t = 1 carries the inserted and dead-letter counts. */
static const char pg_flush_sql[] =
    "WITH u AS (SELECT * FROM unnest($1::uuid[], $2::text[], $3::bigint[], $4::bigint[],"
    " $5::text[], $6::boolean[], $7::text[], $8::text[], $9::text[], $10::text[], $11::text[],"
    " $12::text[], $13::text[], $14::text[], $15::text[], $16::text[], $17::integer[],"
    " $18::text[], $19::bigint[], $20::bigint[], $21::bigint[], $22::bigint[], $23::bigint[],"
    " $24::integer[], $25::integer[], $26::jsonb[], $27::jsonb[], $28::text[], $29::integer[],"
    " $30::bigint[]) AS x(" SP_PG_SQL_LOG_COLUMNS ")),"
    SP_PG_SQL_INSERT_FOLD("u")
    " dl AS (INSERT INTO dead_letters (source, reason, payload, payload_bytes, kafka_partition,"
    " kafka_offset, kafka_index) SELECT $35::text, r, p, length(p), pa, o, ix FROM"
    " unnest($31::text[], $32::bytea[], $33::integer[], $34::bigint[], $38::integer[])"
    " AS y(r, p, pa, o, ix)"
    " ON CONFLICT (source, kafka_partition, kafka_offset, kafka_index) DO NOTHING RETURNING 1),"
    SP_PG_SQL_OFFS("$35::text", "$36::integer[]", "$37::bigint[]")
    SP_PG_SQL_RESULT("(SELECT count(*) FROM dl)");

/* col_is_text: the column's record field is text (for the trail and tags: after jsonb's
 * version byte). */
static int col_is_text(int k)
{
    return k == C_KIND || k == C_ENDPOINT || (k >= C_KEY_HASH && k <= C_MODEL) ||
           k == C_ERROR_CLASS || k == C_TRAIL || k == C_TAGS || k == C_TRACE;
}

/* pg_build: fill the parameter arrays from events [ev_from, ev_to), dead letters
 * [dl_from, dl_to) and the offsets given. */
static int pg_build(struct sp_pg_batch *b, int ev_from, int ev_to, int dl_from, int dl_to,
                    const int32_t *opart, const int64_t *onext, int noff)
{
    struct dstr *c = b->col;
    int rc = 0;

    for (int k = 0; k < C_TMP; k++) {
        sp_pg_dstr_reset(&c[k]);
        rc |= sp_pg_dstr_putc(&c[k], '{');
    }
    for (int i = ev_from; i < ev_to; i++) {
        struct rec_field f[SP_PG_NCOLS];
        int first = i == ev_from;
        sp_pg_rec_fields(b, i, f);
        for (int k = 0; k < SP_PG_NCOLS; k++) {
            rc |= sp_pg_col_sep(&c[k], first);
            if (k == C_CALL_ID) {
                char id[40];
                sp_pg_rec_uuid_text(&f[k], id);
                rc |= sp_pg_arr_str(&c[k], id);
            } else if (k == C_TRAIL || k == C_TAGS)
                rc |= sp_pg_arr_strn(&c[k], f[k].p + 1, (size_t)f[k].len - 1);
            else if (col_is_text(k))
                rc |= sp_pg_arr_strn(&c[k], f[k].p, (size_t)f[k].len);
            else if (k == C_STREAM)
                rc |= sp_pg_dstr_putc(&c[k], sp_pg_rec_int(&f[k]) ? 't' : 'f');
            else
                rc |= sp_pg_dstr_printf(&c[k], "%" PRId64, sp_pg_rec_int(&f[k]));
        }
    }
    for (int i = dl_from; i < dl_to; i++) {
        const struct batch_dead *d = &b->dead[i];
        static const char hex[] = "0123456789abcdef";
        int first = i == dl_from;
        rc |= sp_pg_col_sep(&c[C_DL_REASON], first);
        rc |= sp_pg_col_sep(&c[C_DL_PAYLOAD], first);
        rc |= sp_pg_col_sep(&c[C_DL_PART], first);
        rc |= sp_pg_col_sep(&c[C_DL_OFFSET], first);
        rc |= sp_pg_col_sep(&c[C_DL_INDEX], first);
        rc |= sp_pg_arr_str(&c[C_DL_REASON], d->reason);
        /* bytea hex form inside an array element: "\\x..." */
        rc |= sp_pg_dstr_put(&c[C_DL_PAYLOAD], "\"\\\\x", 4);
        if (sp_pg_dstr_reserve(&c[C_DL_PAYLOAD], d->len * 2 + 2) < 0) {
            rc |= TG_ENOMEM;
        } else {
            for (size_t k = 0; k < d->len; k++) {
                unsigned char ch = (unsigned char)d->payload[k];
                c[C_DL_PAYLOAD].p[c[C_DL_PAYLOAD].len++] = hex[ch >> 4];
                c[C_DL_PAYLOAD].p[c[C_DL_PAYLOAD].len++] = hex[ch & 15];
            }
            c[C_DL_PAYLOAD].p[c[C_DL_PAYLOAD].len] = '\0';
        }
        rc |= sp_pg_dstr_putc(&c[C_DL_PAYLOAD], '"');
        rc |= sp_pg_dstr_printf(&c[C_DL_PART], "%" PRId32, d->partition);
        rc |= sp_pg_dstr_printf(&c[C_DL_OFFSET], "%" PRId64, d->offset);
        rc |= sp_pg_dstr_printf(&c[C_DL_INDEX], "%" PRId32, d->index);
    }
    for (int i = 0; i < noff; i++) {
        rc |= sp_pg_col_sep(&c[C_OFF_PART], i == 0);
        rc |= sp_pg_col_sep(&c[C_OFF_NEXT], i == 0);
        rc |= sp_pg_dstr_printf(&c[C_OFF_PART], "%" PRId32, opart[i]);
        rc |= sp_pg_dstr_printf(&c[C_OFF_NEXT], "%" PRId64, onext[i]);
    }
    for (int k = 0; k < C_TMP; k++)
        rc |= sp_pg_dstr_putc(&c[k], '}');
    return rc ? TG_ENOMEM : 0;
}

/* sp_pg_rows_send: build and send the statement for the given ranges. */
int sp_pg_rows_send(struct sp_pg *pg, struct sp_pg_batch *b, const char *topic, int ev_from,
                    int ev_to, int dl_from, int dl_to, const int32_t *opart, const int64_t *onext,
                    int noff)
{
    const char *values[38];
    uint64_t t0 = tg_now_mono_us();
    int rc;

    rc = pg_build(b, ev_from, ev_to, dl_from, dl_to, opart, onext, noff);
    if (rc < 0)
        return rc;
    for (int k = 0; k <= C_OFFSET; k++)
        values[k] = b->col[k].p;
    values[30] = b->col[C_DL_REASON].p;
    values[31] = b->col[C_DL_PAYLOAD].p;
    values[32] = b->col[C_DL_PART].p;
    values[33] = b->col[C_DL_OFFSET].p;
    values[34] = topic;
    values[35] = b->col[C_OFF_PART].p;
    values[36] = b->col[C_OFF_NEXT].p;
    values[37] = b->col[C_DL_INDEX].p;
    TG_DEBUG("msg=\"flush build\" build_us=%llu events=%d",
             (unsigned long long)(tg_now_mono_us() - t0), ev_to - ev_from);
    /* libpq copies the parameters into its output buffer: values need not outlive this */
    return sp_pg_send(pg, pg_flush_sql, 38, values, 0, pg->timeout_ms);
}

/* sp_pg_rows_parse: add the statement's result (nev events sent) to res and b->incr. */
void sp_pg_rows_parse(struct sp_pg_batch *b, const PGresult *r, int nev,
                      struct sp_pg_flush_result *res)
{
    for (int i = 0; i < PQntuples(r); i++) {
        if (sp_pg_res_i64(r, i, 0) == 1) {
            int64_t ins = sp_pg_res_i64(r, i, 1);
            res->inserted += ins;
            res->duplicates += nev - ins;
            res->dead += sp_pg_res_i64(r, i, 5);
            continue;
        }
        if (!b->incr || b->nincr >= b->cap_events)
            continue; /* cannot happen: at most one aggregate per inserted row */
        struct sp_pg_incr *in = &b->incr[b->nincr++];
        in->minute_ms = sp_pg_res_i64(r, i, 1);
        snprintf(in->key_hash, sizeof(in->key_hash), "%s", PQgetvalue(r, i, 2));
        snprintf(in->team_id, sizeof(in->team_id), "%s", PQgetvalue(r, i, 3));
        snprintf(in->model_group, sizeof(in->model_group), "%s", PQgetvalue(r, i, 4));
        in->requests = sp_pg_res_i64(r, i, 5);
        in->failures = sp_pg_res_i64(r, i, 6);
        in->prompt_tokens = sp_pg_res_i64(r, i, 7);
        in->completion_tokens = sp_pg_res_i64(r, i, 8);
        in->cost_nusd = sp_pg_res_i64(r, i, 9);
    }
}

/* pg_flush_range: one statement for the given ranges, waited for; adds to res and b->incr. */
static int pg_flush_range(struct sp_pg *pg, struct sp_pg_batch *b, const char *topic, int ev_from,
                          int ev_to, int dl_from, int dl_to, const int32_t *opart,
                          const int64_t *onext, int noff, struct sp_pg_flush_result *res)
{
    PGresult *r = NULL;
    int rc;

    rc = sp_pg_rows_send(pg, b, topic, ev_from, ev_to, dl_from, dl_to, opart, onext, noff);
    if (rc == 0)
        rc = sp_pg_collect(pg, 1, &r);
    if (rc < 0)
        return rc;
    sp_pg_rows_parse(b, r, ev_to - ev_from, res);
    PQclear(r);
    return 0;
}

/* sp_pg_rows_one_by_one: Postgres refused the batch's data. Write each event alone; an event it
 * refuses becomes a dead letter (reason names the SQLSTATE); then the batch's own dead letters
 * and offsets. Still idempotent: every statement is. */
int sp_pg_rows_one_by_one(struct sp_pg *pg, struct sp_pg_batch *b, const char *topic,
                          struct sp_pg_flush_result *res)
{
    int rc;

    for (int i = 0; i < b->nev; i++) {
        int32_t p = b->ev[i].partition;
        /* No offset moves before the last statement: a record's other events and the batch's
         * dead letters are not stored yet (read again after a crash, what is stored already is
         * skipped by call id). */
        rc = pg_flush_range(pg, b, topic, i, i + 1, 0, 0, NULL, NULL, 0, res);
        if (rc == TG_EPROTO || rc == TG_EIO) {
            /* a rejected event: keep its text for inspection as a dead letter */
            char reason[SP_PG_DEAD_REASON_MAX];
            char payload[SP_PG_DEAD_PAYLOAD_MAX_BYTES];
            size_t len;
            struct sp_pg_batch one;
            snprintf(reason, sizeof(reason), "postgres rejected the event: sqlstate %s",
                     pg->sqlstate);
            {
                struct rec_field f[SP_PG_NCOLS];
                char id[40];
                sp_pg_rec_fields(b, i, f);
                sp_pg_rec_uuid_text(&f[C_CALL_ID], id);
                len = (size_t)snprintf(payload, sizeof(payload), "{\"call_id\":\"%s\"}", id);
            }
            memset(&one, 0, sizeof(one));
            one.max_events = 0;
            snprintf(one.dead[0].reason, sizeof(one.dead[0].reason), "%s", reason);
            one.dead[0].payload = payload;
            one.dead[0].len = len;
            one.dead[0].partition = p;
            one.dead[0].offset = b->ev[i].offset;
            one.dead[0].index = b->ev[i].index;
            one.ndead = 1;
            one.incr = NULL;
            rc = pg_flush_range(pg, &one, topic, 0, 0, 0, 1, NULL, NULL, 0, res);
            for (size_t k = 0; k < sizeof(one.col) / sizeof(one.col[0]); k++)
                free(one.col[k].p);
            if (rc == 0)
                res->rejected++;
        }
        if (rc < 0)
            return rc;
    }
    return pg_flush_range(pg, b, topic, 0, 0, 0, b->ndead, b->part, b->next, b->npart, res);
}
