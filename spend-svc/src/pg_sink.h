/* pg_sink: Postgres, the source of truth of spend-svc.
 *
 * One struct sp_pg is one connection used by one thread at a time (the consumer loop, the Redis
 * thread's rebuilds and the admin HTTP each own one). libpq has no query timeout, so every query
 * is sent asynchronously and waited for with poll() on PQsocket() against its own deadline; on
 * timeout the query is cancelled (on a helper thread, since PQcancel blocks while the server is
 * stopped) and the connection is dropped and re-opened lazily by the next call.
 *
 * A batch (struct sp_pg_batch) holds events (each kept as its binary COPY tuple, ~0.5 KB),
 * dead letters and the next offset of each partition. sp_pg_batch_flush() writes it in ONE
 * transaction:
 *   spend_logs   INSERT ... ON CONFLICT (call_id) DO NOTHING RETURNING
 *   spend_daily  fold of exactly the returned (inserted) rows, ON CONFLICT DO UPDATE x = x + new
 *   dead_letters one row per invalid message (unique by topic/partition/offset)
 *   consumer_offsets  next offset per partition (never moves backwards)
 * so a redelivered, re-consumed or re-flushed batch can never count twice. A batch without dead
 * letters first travels as one simple-query message "COPY spend_logs FROM STDIN (FORMAT
 * binary); INSERT INTO spend_daily ...; INSERT INTO consumer_offsets ..." with the spend_daily
 * groups and the Redis increments folded here (one message is one implicit transaction); if a
 * call id in it is already stored, that COPY fails whole and the batch goes as "COPY sp_batch
 * FROM STDIN (FORMAT binary); EXECUTE sp_flush(...)" (a session temp table and a statement
 * prepared once per connection, with the ON CONFLICT above). A batch with dead letters, and the
 * one-by-one retry of a batch Postgres refused, go as one statement with parameter arrays. */
#ifndef SP_PG_SINK_H
#define SP_PG_SINK_H

#include <stddef.h>
#include <stdint.h>

#include "proto_event.h"
#include "tg_buf.h"

#define SP_PG_DEAD_PAYLOAD_MAX_BYTES 8192 /* payload kept in dead_letters, longer is cut */
#define SP_PG_DEAD_REASON_MAX 256         /* bytes incl. NUL */
#define SP_PG_DEAD_PER_BATCH_MAX 512      /* dead letters per batch; the batch closes when hit */
#define SP_PG_PARTITIONS_MAX 1024         /* distinct partitions per batch */
#define SP_PG_SUBJECT_MAX 130             /* key hash, team id or model group, incl. NUL */

struct sp_pg;
struct sp_pg_batch;

/* Connection ----------------------------------------------------------------------------- */

/* sp_pg_create: a connection handle for dsn (borrowed, copied); connects lazily. timeout_ms is
 * the deadline of each connect and each query. Returns new (sp_pg_destroy) or NULL with err. */
struct sp_pg *sp_pg_create(const char *dsn, int timeout_ms, char *err, size_t errlen);

/* sp_pg_destroy: close and free; *pg set to NULL; accepts NULL. */
void sp_pg_destroy(struct sp_pg **pg);

/* sp_pg_connect: make sure the connection is open (connect with the deadline). Returns 0 or
 * TG_EUNAVAIL / TG_ETIMEOUT. Thread owning pg. */
int sp_pg_connect(struct sp_pg *pg);

/* sp_pg_migrate: apply the schema migrations not yet recorded in schema_migrations, each in
 * its own transaction, under pg_advisory_lock so concurrent replicas apply them once.
 * Returns 0 or a tg_err. */
int sp_pg_migrate(struct sp_pg *pg);

/* Batches --------------------------------------------------------------------------------- */

/* sp_pg_batch_create: room for max_events events and max_bytes of their encoded size.
 * Returns new (sp_pg_batch_destroy) or NULL. */
struct sp_pg_batch *sp_pg_batch_create(int max_events, int max_bytes);
void sp_pg_batch_destroy(struct sp_pg_batch **b);
void sp_pg_batch_reset(struct sp_pg_batch *b);

/* sp_pg_batch_add_event: copy ev (borrowed) with its Kafka position: the record's partition and
 * offset, and index, the event's place in its record (0 for a one-event record). encoded_len
 * counts toward max_bytes. The events of one record go in one after the other; those after its
 * first may take the batch past max_events and max_bytes (a record is never split between two
 * batches: see sp_pg_batch_room). Returns 0 or TG_EFULL (caller flushes first). */
int sp_pg_batch_add_event(struct sp_pg_batch *b, const struct proto_event *ev, int32_t partition,
                          int64_t offset, int32_t index, size_t encoded_len);

/* sp_pg_batch_add_dead: an invalid event (index in its record, as above): reason (copied, cut at SP_PG_DEAD_REASON_MAX) and
 * up to SP_PG_DEAD_PAYLOAD_MAX_BYTES of payload (copied). Returns 0 or TG_EFULL. */
int sp_pg_batch_add_dead(struct sp_pg_batch *b, const char *reason, const void *payload,
                         size_t len, int32_t partition, int64_t offset, int32_t index);

/* sp_pg_batch_drop_partition: forget everything from partition (revoked while held). */
void sp_pg_batch_drop_partition(struct sp_pg_batch *b, int32_t partition);

/* sp_pg_batch_full: 1 when the next add may not fit (events, bytes, dead letters, partitions). */
int sp_pg_batch_full(const struct sp_pg_batch *b);

/* sp_pg_batch_room: 1 when a record of nev events and bytes bytes fits whole (as events or as
 * dead letters) within the bounds, or the batch is empty (which takes any one record). */
int sp_pg_batch_room(const struct sp_pg_batch *b, int nev, size_t bytes);

/* Where a batch stood before a record was added: sp_pg_batch_rewind takes the batch back there
 * (what the record added is dropped), so that a record is taken whole or not at all. */
struct sp_pg_batch_mark {
    int nev, ndead, npart;
    size_t rec_len, bytes;
    int32_t cur_part;
    int64_t cur_off;
    int part_at;             /* the record's partition's slot, or -1 when it was not there */
    int64_t part_first, part_next;
};
void sp_pg_batch_mark(const struct sp_pg_batch *b, int32_t partition, struct sp_pg_batch_mark *m);
void sp_pg_batch_rewind(struct sp_pg_batch *b, const struct sp_pg_batch_mark *m);

int sp_pg_batch_events(const struct sp_pg_batch *b);  /* events held */
int sp_pg_batch_dead(const struct sp_pg_batch *b);    /* dead letters held */
int sp_pg_batch_messages(const struct sp_pg_batch *b); /* events + dead letters */

/* sp_pg_batch_next_offset: the next offset of partition recorded in the batch, or -1. */
int64_t sp_pg_batch_next_offset(const struct sp_pg_batch *b, int32_t partition);

/* sp_pg_batch_offsets: copy up to cap (partition, next offset) pairs; returns the count. */
int sp_pg_batch_offsets(const struct sp_pg_batch *b, int32_t *parts, int64_t *next, int cap);

/* One aggregate of newly inserted rows: what the Redis counters and the budgets must add. */
struct sp_pg_incr {
    int64_t minute_ms;                   /* ts_end_ms floored to the minute (UTC epoch ms) */
    char key_hash[SP_PG_SUBJECT_MAX];
    char team_id[SP_PG_SUBJECT_MAX];
    char model_group[SP_PG_SUBJECT_MAX];
    int64_t requests;
    int64_t failures;                    /* status >= 400 */
    int64_t prompt_tokens;
    int64_t completion_tokens;
    int64_t cost_nusd;
};

/* Outcome of a flush. incr points into storage owned by the batch (valid until the next
 * flush or reset). */
struct sp_pg_flush_result {
    int64_t inserted;                    /* spend_logs rows inserted */
    int64_t duplicates;                  /* events whose call_id was already stored */
    int64_t dead;                        /* dead letters written */
    int64_t rejected;                    /* events Postgres refused, moved to dead_letters */
    const struct sp_pg_incr *incr;       /* aggregates of the inserted request rows */
    int nincr;
    /* offsets covered, per partition: [first[i], next[i]) of parts[i] (borrowed from the batch;
     * consumer_offsets holds next[i] from this commit on) */
    const int32_t *parts;
    const int64_t *first;
    const int64_t *next;
    int nparts;
    /* 1: an earlier statement on this connection's lane was given up after it was sent (a
     * timeout, a broken connection), so the server may have committed it without our knowing
     * (its rows are then stored, and a retry counts only the others): counters kept outside
     * PostgreSQL must be read back from it. Reported once, by the next successful commit, which
     * comes after any such ghost commit settled (its inserts wait for the same call ids). */
    int in_doubt;
};

/* sp_pg_batch_flush: write the batch in one transaction (see the header comment). topic is
 * the events topic (borrowed). On success returns 0 and fills res; the batch keeps its content
 * until sp_pg_batch_reset. On a connection problem returns TG_EUNAVAIL / TG_ETIMEOUT and nothing
 * was counted twice: the caller keeps the batch and retries. When Postgres rejects the data
 * itself, events are written one by one and those it refuses go to dead_letters. */
int sp_pg_batch_flush(struct sp_pg *pg, struct sp_pg_batch *b, const char *topic,
                      struct sp_pg_flush_result *res);

/* sp_pg_batch_flush_start / sp_pg_batch_flush_finish: the same in two steps, so that the caller
 * can read the next batch while Postgres works on this one. start builds and sends the
 * statement (0, or a connection error: nothing was sent). finish with block 0 returns
 * TG_EAGAIN while the statement runs (its deadline still applies), otherwise what
 * sp_pg_batch_flush returns. One statement in flight per connection; b must stay untouched
 * in between. */
int sp_pg_batch_flush_start(struct sp_pg *pg, struct sp_pg_batch *b, const char *topic);
int sp_pg_batch_flush_finish(struct sp_pg *pg, struct sp_pg_batch *b, const char *topic,
                             int block, struct sp_pg_flush_result *res);

/* Queries ---------------------------------------------------------------------------------- */

/* sp_pg_offsets_load: next offsets stored for (topic, parts[i]); next[i] = -1 when none.
 * Returns 0 or a tg_err. */
int sp_pg_offsets_load(struct sp_pg *pg, const char *topic, const int32_t *parts, int n,
                       int64_t *next);

/* A key record from the control topic (never the key itself). */
struct sp_pg_key {
    char key_hash[SP_PG_SUBJECT_MAX];
    char key_alias[SP_PG_SUBJECT_MAX];
    char team_id[SP_PG_SUBJECT_MAX];
    char user_id[SP_PG_SUBJECT_MAX];
    int64_t max_budget_nusd;             /* -1 when the key has no budget */
    int64_t budget_period_s;             /* 0 when none */
    const char *metadata_json;           /* borrowed JSON object text, or NULL */
};

/* sp_pg_api_key_upsert / sp_pg_api_key_delete: mirror of a key: record / its tombstone. */
int sp_pg_api_key_upsert(struct sp_pg *pg, const struct sp_pg_key *k);
int sp_pg_api_key_delete(struct sp_pg *pg, const char *key_hash);

/* Totals of the five counters. */
struct sp_pg_totals {
    int64_t requests;
    int64_t failures;
    int64_t prompt_tokens;
    int64_t completion_tokens;
    int64_t cost_nusd;
};

/* sp_pg_totals_since: for each i, the totals of request rows of subject[i] (a key hash when
 * by_team is 0, a team id when 1) with ts_end_ms >= since_ms[i]. Returns 0 or a tg_err. */
int sp_pg_totals_since(struct sp_pg *pg, int by_team, const char *const *subject,
                       const int64_t *since_ms, int n, struct sp_pg_totals *out);

/* sp_pg_snapshot_begin / sp_pg_snapshot_end: a read-only REPEATABLE READ transaction around
 * the reads of a Redis rebuild, so that they all see one snapshot. begin writes the snapshot's
 * consumer_offsets of topic as "partition:next,..." into offsets (cap bytes). end commits; it
 * fails (TG_EUNAVAIL) when the connection was replaced in between, since the reads after that
 * did not come from the snapshot. Returns 0 or a tg_err. */
int sp_pg_snapshot_begin(struct sp_pg *pg, const char *topic, char *offsets, size_t cap);
int sp_pg_snapshot_end(struct sp_pg *pg);

/* sp_pg_day_totals: totals of day (YYYY-MM-DD) from spend_daily grouped by key, team and model
 * group: fn(ctx, kind, subject, totals) per row, kind one of "key", "team", "model".
 * Returns 0 or a tg_err (fn is not called after an error). */
typedef void (*sp_pg_totals_fn)(void *ctx, const char *kind, const char *subject,
                                const struct sp_pg_totals *t);
int sp_pg_day_totals(struct sp_pg *pg, const char *day, sp_pg_totals_fn fn, void *ctx);

/* sp_pg_budget_raise: record that subject (kind "key"|"team") reached level percent in the
 * period starting at period_start_ms. *raised = 1 only when this call moved the stored level up
 * (so a threshold is announced once per period, even across restarts and replicas). */
int sp_pg_budget_raise(struct sp_pg *pg, const char *kind, const char *subject,
                       int64_t period_start_ms, int level, int *raised);

/* sp_pg_budget_set_blocked: remember whether a block record is published for subject. */
int sp_pg_budget_set_blocked(struct sp_pg *pg, const char *kind, const char *subject,
                             int64_t period_start_ms, int blocked);

/* sp_pg_budget_blocked: subjects marked blocked: fn(ctx, kind, subject, period_start_ms). */
typedef void (*sp_pg_blocked_fn)(void *ctx, const char *kind, const char *subject,
                                 int64_t period_start_ms);
int sp_pg_budget_blocked(struct sp_pg *pg, sp_pg_blocked_fn fn, void *ctx);

/* sp_pg_day_top: the day's totals and its top rows by cost: up to per_dim keys (named by alias,
 * else a 12-character hash prefix), teams and model groups. fn(ctx, dimension, name, totals)
 * per row; *total_cost and *total_requests for the whole day. Returns 0 or a tg_err. */
int sp_pg_day_top(struct sp_pg *pg, const char *day, int per_dim, sp_pg_totals_fn fn, void *ctx,
                  int64_t *total_cost, int64_t *total_requests);

/* sp_pg_spend_log_json: the spend_logs row of call_id as a JSON object into out, or
 * TG_ENOTFOUND. call_id must be a UUID (checked by the caller). */
int sp_pg_spend_log_json(struct sp_pg *pg, const char *call_id, struct tg_buf *out);

/* sp_pg_spend_report_json: {"group_by":..,"from":..,"to":..,"rows":[{"subject":..,"requests":..,
 * ...}]} from spend_daily for days in [from, to]; group_by is "key", "team" or "model". At most
 * row_cap rows (largest cost first); "truncated": true when cut. */
int sp_pg_spend_report_json(struct sp_pg *pg, const char *group_by, const char *from,
                            const char *to, int row_cap, struct tg_buf *out);

#endif
