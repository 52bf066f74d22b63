/* redis_sink: live spend counters in Redis, derived from Postgres and rebuilt from it.
 *
 * Counters (Redis hashes, integer values, fields requests, failures, prompt_tokens,
 * completion_tokens, cost_nusd):
 *   tg:spend:day:{YYYY-MM-DD}:key:{key_hash}       per UTC day and key
 *   tg:spend:day:{YYYY-MM-DD}:team:{team_id}       per UTC day and team
 *   tg:spend:day:{YYYY-MM-DD}:model:{model_group}  per UTC day and model group
 *   tg:spend:period:{period_s}:{start_s}:key:{key_hash}   per budget period of a key
 *   tg:spend:period:{period_s}:{start_s}:team:{team_id}   per budget period of a team
 *   tg:spend:sentinel   set by every rebuild; its absence means Redis lost its data
 * Budget periods are aligned on multiples of period_s since the Unix epoch (UTC). Empty subjects
 * (no key, no team) have no counter.
 *
 * Flow: the consumer thread calls sp_redis_sink_add() after each Postgres commit, under the
 * commit gate (sp_redis_sink_gate_lock): that only merges the increments into a bounded map
 * keyed by counter (capacity pending_max counters, whatever the number of events) and wakes
 * the Redis thread. The Redis thread swaps the map out and sends it as one pipelined
 * MULTI/HINCRBY.../EXEC. Redis unreachable: the map keeps merging. A flush whose outcome is
 * unknown (connection lost after the commands went out), a full map, the start of the service
 * and a missing sentinel all lead to a rebuild: under the commit gate the pending map is
 * cleared and the current day's and current budget periods' totals are read from Postgres;
 * then they are written with DEL + HSET (not INCR). Increments committed after that snapshot
 * are in the map again, so nothing is counted twice or lost.
 *
 * Several replicas share the counters, and one's rebuild must not meet another's flush: the
 * rebuild's snapshot also reads the events topic's consumer_offsets (moved by every batch
 * commit in the same transaction as its rows), writes them next to the totals
 * (tg:spend:snapshot:{topic}) and holds tg:spend:rebuilding while it runs (flushes wait).
 * Each flush carries the offsets its batches covered and is a script that skips it when the
 * last rebuild's snapshot already holds those batches, applies it when it does not, and asks
 * for another rebuild in the rare case of a flush made of batches from both sides. A replica that
 * takes partitions over from another rebuilds as well (sp_redis_sink_takeover): the other may
 * have stopped between a commit and its flush. */
#ifndef SP_REDIS_SINK_H
#define SP_REDIS_SINK_H

#include <stddef.h>
#include <stdint.h>

#include "pg_sink.h"
#include "tg_buf.h"

#define SP_REDIS_KEY_MAX 224 /* bytes incl. NUL of a counter name */

/* Budget periods of keys and teams, supplied by the budgets module. */
struct sp_redis_periods {
    /* period_of: budget period in seconds of a key (by_team 0) or team (1), 0 when none.
     * Called on the consumer thread inside sp_redis_sink_add. */
    int64_t (*period_of)(void *ctx, int by_team, const char *subject);
    /* list: copy up to cap subjects with a budget into subject[i] (SP_PG_SUBJECT_MAX bytes
     * each) and period_s[i]; returns the count. Called on the Redis thread for rebuilds. */
    int (*list)(void *ctx, int by_team, char (*subject)[SP_PG_SUBJECT_MAX], int64_t *period_s,
                int cap);
    void *ctx;
};

struct sp_redis_sink_config {
    const char *host;        /* borrowed for create, as every string here */
    int port;
    int db;
    const char *username;    /* ACL user, NULL or "" = none (tg_redis.h) */
    const char *password;    /* NULL or "" = no AUTH; never logged */
    int tls;                 /* rediss:// */
    const char *ca_file;     /* TLS: CA bundle (NULL or "" = system store), client certificate */
    const char *cert_file;
    const char *key_file;
    const char *server_name; /* TLS: name the certificate must carry (NULL or "" = host) */
    int timeout_ms;          /* connect and command timeout */
    int pending_max;         /* distinct counters held while Redis is away */
    int day_ttl_s;           /* expiry of the per-day counters */
    const char *pg_dsn;      /* rebuild source; borrowed for create */
    const char *topic;       /* events topic (its consumer_offsets date a rebuild); borrowed */
    int pg_timeout_ms;
    struct sp_redis_periods periods;
};

struct sp_redis_sink;

/* sp_redis_sink_create: allocate the maps and start the Redis thread (which connects and
 * rebuilds on its own). Returns new (sp_redis_sink_destroy) or NULL with err. */
struct sp_redis_sink *sp_redis_sink_create(const struct sp_redis_sink_config *cfg, char *err,
                                           size_t errlen);

/* sp_redis_sink_destroy: stop the thread after one last flush attempt (bounded by the
 * timeout), free; *s set to NULL; accepts NULL. Main thread. */
void sp_redis_sink_destroy(struct sp_redis_sink **s);

/* The commit gate: held by the consumer around "commit in Postgres, then sp_redis_sink_add",
 * and by a rebuild around its Postgres snapshot. */
void sp_redis_sink_gate_lock(struct sp_redis_sink *s);
void sp_redis_sink_gate_unlock(struct sp_redis_sink *s);

/* sp_redis_sink_gate_wanted: 1 while a rebuild waits for the gate (the consumer then lets its
 * statements in flight end instead of starting more). sp_redis_sink_gate_yield: with the gate
 * not held, wait (at most 100 ms) until a waiting rebuild has taken it. Consumer thread. */
int sp_redis_sink_gate_wanted(struct sp_redis_sink *s);
void sp_redis_sink_gate_yield(struct sp_redis_sink *s);

/* sp_redis_sink_add: merge the increments of a committed batch (res, borrowed) and the offsets
 * it covered into the pending map. Never blocks on Redis. When the map is full it is cleared
 * and a rebuild is scheduled (counted). Consumer thread, gate held. */
void sp_redis_sink_add(struct sp_redis_sink *s, const struct sp_pg_flush_result *res);

/* sp_redis_sink_takeover: partitions were assigned that this replica did not hold: schedule a
 * rebuild. Their last owner may have stopped (SIGKILL, a node lost, Redis away at its shutdown)
 * after committing batches in Postgres and before sending their increments to Redis; those
 * increments exist only in Postgres now, and nobody will read those batches again. The rebuild's
 * snapshot is taken after the assignment, hence after the last owner's last commit. Counted.
 * Consumer thread (rebalance). */
void sp_redis_sink_takeover(struct sp_redis_sink *s);

/* sp_redis_sink_is_up: 1 when the last Redis exchange succeeded. Any thread. */
int sp_redis_sink_is_up(const struct sp_redis_sink *s);

/* sp_redis_sink_reason: why Redis is away ("connect ...: Connection refused", "TLS: certificate
 * verify failed: ...", "AUTH refused: WRONGPASS ..."; never the password), "" when up or not
 * known yet. Any thread. */
void sp_redis_sink_reason(struct sp_redis_sink *s, char *out, size_t cap);

/* sp_redis_sink_write_metrics: tollgate_spend_redis_up, tollgate_spend_redis_pending_increments
 * and the sink's own counters. Any thread. */
void sp_redis_sink_write_metrics(struct sp_redis_sink *s, struct tg_buf *b);

/* sp_redis_sink_counter_name: counter name for a day ("YYYY-MM-DD") or, when period_s > 0, for
 * the period containing ts_s. kind is "key", "team" or "model". Returns 0 or TG_ETOOBIG. */
int sp_redis_sink_counter_name(char *out, size_t cap, const char *kind, const char *subject,
                               const char *day, int64_t period_s, int64_t ts_s);

#endif
