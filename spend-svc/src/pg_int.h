/* pg_int: what the files of the pg_sink module share, and nothing for other modules: the
 * connection, the batch and its records, the column indexes, and the helpers each file needs
 * from another. Only pg_*.c include it (libpq-fe.h stays inside the module).
 *
 *   pg_sink.c    connection, queries' send/collect/deadlines, text helpers (dstr, arrays, JSON)
 *   pg_schema.c  migrations
 *   pg_batch.c   the batch, its records (binary COPY tuples), the flush and its path choice
 *   pg_rows.c    the parameter-array statement and the one-by-one retry
 *   pg_copy.c    the COPY paths (direct into spend_logs, or into the session temp table)
 *   pg_fold.c    the direct path's spend_daily and per-minute fold
 *   pg_query.c   reads and small writes outside batches
 *
 * Threads: as pg_sink.h: a struct sp_pg and its batches are used by one thread at a time. */
#ifndef SP_PG_INT_H
#define SP_PG_INT_H

#include <stddef.h>
#include <stdint.h>

#include <libpq-fe.h>

#include "pg_sink.h"
#include "tg_err.h"

#define SP_PG_NCOLS 30 /* spend_logs parameter arrays */

/* SQL shared by the write paths (pg_rows.c, pg_copy.c), so that they cannot drift apart. */

/* The SP_PG_NCOLS columns of spend_logs, in the order of the records and of the arrays. */
#define SP_PG_SQL_LOG_COLUMNS                                                                 \
    "call_id, kind, ts_start_ms, ts_end_ms, endpoint, stream, key_hash, key_alias, team_id,"  \
    " user_id, end_user, model_requested, model_group, deployment_id, provider, model,"       \
    " status, error_class, prompt_tokens, completion_tokens, cost_nusd, latency_ms, ttft_ms," \
    " attempts, fallbacks, trail, tags, trace_id, kafka_partition, kafka_offset"

/* The spend_daily upsert's conflict clause: sums add to the stored row. */
#define SP_PG_SQL_DAILY_ADD                                                                   \
    " ON CONFLICT (day, key_hash, team_id, model_group, deployment_id) DO UPDATE SET"         \
    " requests = d.requests + EXCLUDED.requests, failures = d.failures + EXCLUDED.failures,"  \
    " prompt_tokens = d.prompt_tokens + EXCLUDED.prompt_tokens,"                              \
    " completion_tokens = d.completion_tokens + EXCLUDED.completion_tokens,"                  \
    " cost_nusd = d.cost_nusd + EXCLUDED.cost_nusd"

/* The consumer_offsets upsert's conflict clause: an offset never moves backwards. */
#define SP_PG_SQL_OFFSETS_FORWARD                                                             \
    " ON CONFLICT (topic, partition) DO UPDATE SET"                                           \
    " next_offset = GREATEST(c.next_offset, EXCLUDED.next_offset), updated_at = now()"

/* SP_PG_SQL_INSERT_FOLD(src): the CTEs ins (the rows of src whose call id is not stored yet,
 * inserted), agg (ins's request rows by day and by minute) and daily (agg added to
 * spend_daily, in key order so that writers lock rows in the same order). */
#define SP_PG_SQL_INSERT_FOLD(src)                                                            \
    " ins AS (INSERT INTO spend_logs (" SP_PG_SQL_LOG_COLUMNS ")"                             \
    " SELECT " SP_PG_SQL_LOG_COLUMNS " FROM " src                                             \
    " ON CONFLICT (call_id) DO NOTHING"                                                       \
    " RETURNING kind, ts_end_ms, key_hash, team_id, model_group, deployment_id, status,"      \
    " prompt_tokens, completion_tokens, cost_nusd),"                                          \
    " agg AS (SELECT date '1970-01-01' + (ts_end_ms / 86400000)::integer AS day,"             \
    " (ts_end_ms / 60000) * 60000 AS minute_ms, key_hash, team_id, model_group, deployment_id," \
    " count(*)::bigint AS requests, count(*) FILTER (WHERE status >= 400)::bigint AS failures," \
    " sum(prompt_tokens)::bigint AS prompt_tokens,"                                           \
    " sum(completion_tokens)::bigint AS completion_tokens, sum(cost_nusd)::bigint AS cost_nusd" \
    " FROM ins WHERE kind = 'request' GROUP BY 1, 2, 3, 4, 5, 6),"                            \
    " daily AS (INSERT INTO spend_daily AS d (day, key_hash, team_id, model_group,"           \
    " deployment_id, requests, failures, prompt_tokens, completion_tokens, cost_nusd)"        \
    " SELECT day, key_hash, team_id, model_group, deployment_id, sum(requests), sum(failures)," \
    " sum(prompt_tokens), sum(completion_tokens), sum(cost_nusd) FROM agg"                    \
    " GROUP BY day, key_hash, team_id, model_group, deployment_id"                            \
    " ORDER BY day, key_hash, team_id, model_group, deployment_id" SP_PG_SQL_DAILY_ADD        \
    " RETURNING 1),"

/* SP_PG_SQL_OFFS(topic, parts, next): the CTE offs storing the next offsets. */
#define SP_PG_SQL_OFFS(topic, parts, next)                                                    \
    " offs AS (INSERT INTO consumer_offsets AS c (topic, partition, next_offset)"             \
    " SELECT " topic ", p, n FROM unnest(" parts ", " next ") AS z(p, n)"                     \
    SP_PG_SQL_OFFSETS_FORWARD " RETURNING 1)"

/* SP_PG_SQL_RESULT(dead): the statement's rows: t = 0, the per-minute increments of the
 * inserted request rows; one row t = 1 with the counts (inserted, dead letters written). */
#define SP_PG_SQL_RESULT(dead)                                                                \
    " SELECT 0, minute_ms, key_hash, team_id, model_group, sum(requests)::bigint,"            \
    " sum(failures)::bigint, sum(prompt_tokens)::bigint, sum(completion_tokens)::bigint,"     \
    " sum(cost_nusd)::bigint FROM agg GROUP BY minute_ms, key_hash, team_id, model_group"     \
    " UNION ALL SELECT 1, (SELECT count(*) FROM ins), NULL, NULL, NULL, " dead ","            \
    " (SELECT count(*) FROM daily), (SELECT count(*) FROM offs), NULL, NULL"

struct sp_pg {
    char *dsn;           /* owned copy */
    int timeout_ms;      /* per connect and per query */
    PGconn *conn;        /* NULL when not connected */
    char sqlstate[6];    /* of the last failed query */
    uint64_t deadline_ms; /* monotonic deadline of the query in flight */
    int timeout_used_ms; /* its timeout, for the log line */
    int session_ready;   /* sp_batch temp table and sp_flush prepared on this connection */
    int direct;          /* the query in flight is a direct-path COPY (a duplicate is expected) */
    struct fold *daily;  /* direct path, owned: spend_daily groups of the batch being written */
    struct fold *minute; /* direct path, owned: its per-minute increments; both sized to twice
                          * the largest batch sent on this connection */
    uint64_t conn_gen;   /* connections made so far (a snapshot must stay on one) */
    uint64_t snap_gen;   /* conn_gen when the snapshot transaction began */
    int in_doubt;        /* a statement was given up after it was sent (see flush_result) */
};

/* Growable text used for query parameters; bounded by the batch's byte cap times the escape
 * factor, released with the batch. */
struct dstr {
    char *p;
    size_t len;
    size_t cap;
};

/* One event of a batch: where its record lies in the batch's arena. The record is the event's
 * tuple of the binary COPY stream (rec_encode), about half a kilobyte where a struct
 * proto_event takes three, so a large batch stays small and the COPY stream is the records
 * back to back. */
struct batch_event {
    int32_t partition;
    int64_t offset;
    int32_t index;       /* the event's place in its record (0 for a one-event record) */
    size_t rec_off;      /* bytes into the arena */
    size_t rec_len;      /* bytes */
};

struct batch_dead {
    char reason[SP_PG_DEAD_REASON_MAX];
    char *payload;       /* owned, <= SP_PG_DEAD_PAYLOAD_MAX_BYTES */
    size_t len;
    int32_t partition;
    int64_t offset;
    int32_t index;       /* the event's place in its record; 0 when the whole record is refused */
};

/* A group of a batch's request events, folded in spend-svc (direct path): the event holding its
 * strings, its day number or minute, the sums. */
struct fold_ent {
    uint64_t h;
    int rec;                 /* event index, -1 when the slot is empty */
    int64_t t;
    int64_t requests, failures, prompt, completion, cost;
};

struct fold {
    struct fold_ent *e;
    size_t cap;              /* power of two, at least twice the events */
    size_t n;
};

struct sp_pg_batch {
    int max_events;
    size_t max_bytes;
    /* A record's events are never split between two batches: the events after a record's
     * first may take the batch past max_events and max_bytes, by at most one record. */
    int cap_events;         /* max_events + PROTO_RECORD_EVENTS_MAX - 1 */
    int32_t cur_part;       /* the record added last (its partition and offset) */
    int64_t cur_off;
    struct batch_event *ev; /* [cap_events] */
    struct dstr rec;        /* arena of the event records, bounded by max_events records */
    int nev;
    size_t bytes;           /* encoded bytes of held events */
    struct batch_dead dead[SP_PG_DEAD_PER_BATCH_MAX];
    int ndead;
    int32_t part[SP_PG_PARTITIONS_MAX];
    int64_t first[SP_PG_PARTITIONS_MAX]; /* lowest offset of the partition in the batch */
    int64_t next[SP_PG_PARTITIONS_MAX];
    int npart;
    struct sp_pg_incr *incr; /* [cap_events] results of the last flush */
    int nincr;
    struct dstr col[SP_PG_NCOLS + 8];
    int copy_path;           /* the statement in flight: 0 parameter arrays, 1 COPY into the temp
                              * table, 2 COPY straight into spend_logs */
};

/* Column indexes of the spend_logs arrays. */
enum {
    C_CALL_ID, C_KIND, C_TS_START, C_TS_END, C_ENDPOINT, C_STREAM, C_KEY_HASH, C_KEY_ALIAS,
    C_TEAM, C_USER, C_END_USER, C_MODEL_REQ, C_MODEL_GROUP, C_DEPLOYMENT, C_PROVIDER, C_MODEL,
    C_STATUS, C_ERROR_CLASS, C_PROMPT, C_COMPLETION, C_COST, C_LATENCY, C_TTFT, C_ATTEMPTS,
    C_FALLBACKS, C_TRAIL, C_TAGS, C_TRACE, C_PART, C_OFFSET,
    C_DL_REASON, C_DL_PAYLOAD, C_DL_PART, C_DL_OFFSET, C_DL_INDEX, C_OFF_PART, C_OFF_NEXT, C_TMP
};

/* A field of an event record (the binary COPY tuple written by rec_encode). */
struct rec_field {
    const char *p;
    int32_t len;         /* bytes */
};

/* pg_sink.c: text ---------------------------------------------------------------------------- */

/* sp_pg_dstr_*: append to d, growing it (power of two, from 4 KiB). Return 0 or TG_ENOMEM.
 * reserve and putc run for every field of every event: inline, with the growth out of line. */
int sp_pg_dstr_grow(struct dstr *d, size_t extra);

static inline int sp_pg_dstr_reserve(struct dstr *d, size_t extra)
{
    return d->len + extra + 1 <= d->cap ? 0 : sp_pg_dstr_grow(d, extra);
}

static inline int sp_pg_dstr_putc(struct dstr *d, char c)
{
    if (sp_pg_dstr_reserve(d, 1) < 0)
        return TG_ENOMEM;
    d->p[d->len++] = c;
    d->p[d->len] = '\0';
    return 0;
}

int sp_pg_dstr_put(struct dstr *d, const char *s, size_t n);
int sp_pg_dstr_puts(struct dstr *d, const char *s);
int sp_pg_dstr_printf(struct dstr *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void sp_pg_dstr_reset(struct dstr *d); /* empty, capacity kept */

/* sp_pg_arr_strn / sp_pg_arr_str: s (n bytes / NUL-terminated) as a quoted text[] element;
 * invalid UTF-8 bytes become '?'. sp_pg_json_str: s as a JSON string, the same way. */
int sp_pg_arr_strn(struct dstr *d, const char *s, size_t n);
int sp_pg_arr_str(struct dstr *d, const char *s);
int sp_pg_json_str(struct dstr *d, const char *s);

/* sp_pg_col_sep: the ',' before an array element unless it is the first. */
int sp_pg_col_sep(struct dstr *d, int first);

/* sp_pg_res_i64: an integer column of a result row; 0 when NULL. */
int64_t sp_pg_res_i64(const PGresult *res, int row, int col);

/* pg_sink.c: connection and queries (thread owning pg) ------------------------------------- */

void sp_pg_close(struct sp_pg *pg);   /* drop the connection; the next call reconnects */
void sp_pg_abandon(struct sp_pg *pg); /* a query timed out: cancel it (background), drop */
int sp_pg_wait(PGconn *conn, short events, uint64_t deadline_ms);
int sp_pg_classify(struct sp_pg *pg, PGresult *res);
int sp_pg_send(struct sp_pg *pg, const char *sql, int nparams, const char *const *values,
               int simple, int timeout_ms);
int sp_pg_collect(struct sp_pg *pg, int block, PGresult **out);
/* sp_pg_push: flush libpq's output buffer to the server before pg->deadline_ms; 0 or a tg_err
 * (the connection is dropped on error). */
int sp_pg_push(struct sp_pg *pg);
int sp_pg_run(struct sp_pg *pg, const char *sql, int nparams, const char *const *values,
              int simple, int timeout_ms, PGresult **out);
int sp_pg_exec(struct sp_pg *pg, const char *sql, int nparams, const char *const *values,
               PGresult **out);

/* pg_batch.c: records ------------------------------------------------------------------------ */

/* sp_pg_be_get: n bytes at p, big-endian. */
static inline uint64_t sp_pg_be_get(const unsigned char *p, int n)
{
    uint64_t v = 0;

    for (int i = 0; i < n; i++)
        v = (v << 8) | p[i];
    return v;
}

/* sp_pg_rec_fields: the SP_PG_NCOLS fields of event i of b (f: SP_PG_NCOLS entries, borrowed
 * from the batch's arena). Records are written by pg_batch.c's rec_encode only, so their shape
 * is trusted. Inline: the fold and the statements decode every record. */
static inline void sp_pg_rec_fields(const struct sp_pg_batch *b, int i, struct rec_field *f)
{
    const unsigned char *p = (const unsigned char *)b->rec.p + b->ev[i].rec_off + 2;

    for (int k = 0; k < SP_PG_NCOLS; k++) {
        f[k].len = (int32_t)sp_pg_be_get(p, 4);
        f[k].p = (const char *)p + 4;
        p += 4 + f[k].len;
    }
}

/* sp_pg_rec_int: a big-endian integer field of 1, 4 or 8 bytes, sign-extended. */
static inline int64_t sp_pg_rec_int(const struct rec_field *f)
{
    uint64_t v = sp_pg_be_get((const unsigned char *)f->p, f->len);

    if (f->len == 4)
        return (int64_t)(int32_t)(uint32_t)v;
    return (int64_t)v;
}

void sp_pg_rec_uuid_text(const struct rec_field *f, char *out); /* out: 37 bytes */

/* pg_rows.c: the parameter-array statement -------------------------------------------------- */

/* sp_pg_rows_send: build and send the statement for events [ev_from, ev_to), dead letters
 * [dl_from, dl_to) and the noff offsets given. Returns 0 or a tg_err. */
int sp_pg_rows_send(struct sp_pg *pg, struct sp_pg_batch *b, const char *topic, int ev_from,
                    int ev_to, int dl_from, int dl_to, const int32_t *opart,
                    const int64_t *onext, int noff);
/* sp_pg_rows_parse: add the statement's result (nev events sent) to res and b->incr. */
void sp_pg_rows_parse(struct sp_pg_batch *b, const PGresult *r, int nev,
                      struct sp_pg_flush_result *res);
/* sp_pg_rows_one_by_one: each event alone, refused ones to dead_letters, then the batch's dead
 * letters and offsets. Returns 0 or a tg_err. */
int sp_pg_rows_one_by_one(struct sp_pg *pg, struct sp_pg_batch *b, const char *topic,
                          struct sp_pg_flush_result *res);

/* pg_copy.c / pg_fold.c: the COPY paths ------------------------------------------------------ */

/* sp_pg_copy_send: send the batch by COPY: direct 1 straight into spend_logs (folded by
 * sp_pg_fold_batch first), 0 into the temp table then EXECUTE sp_flush. Returns 0 or a tg_err;
 * sp_pg_collect gets the result. */
int sp_pg_copy_send(struct sp_pg *pg, struct sp_pg_batch *b, const char *topic, int direct);
/* sp_pg_fold_batch: the request events of b into pg->daily and b->incr. 0 or TG_ENOMEM. */
int sp_pg_fold_batch(struct sp_pg *pg, struct sp_pg_batch *b);

#endif
