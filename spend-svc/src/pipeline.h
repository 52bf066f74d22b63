/* pipeline: spend-svc's consumer pipeline, the loop that turns Kafka messages into Postgres rows.
 *
 * The main thread runs the consumer loop: poll, decode, batch (size or time), commit the batch
 * in one Postgres transaction, hand the increments to the Redis thread, commit offsets to
 * Kafka, check budgets. Partitions are spread over postgres.writers lanes (partition modulo the
 * lane count), each with its own connection and two batches: one lane's statement runs while
 * its next batch fills, and the lanes' statements run side by side in Postgres. A partition
 * always goes through the same lane, so its batches commit in order and a duplicate (same
 * call id, same key, same partition) always meets the committed row; spend_daily rows are
 * folded in key order, so two lanes never wait on each other in a cycle. A lane whose two
 * batches are both taken parks its partitions (paused, read again from the first message not
 * kept once it ships) instead of stopping the loop, so the other lanes keep filling. Postgres
 * unavailable: the batches are kept, partitions are paused (polling continues so that the group
 * membership survives), the commit is retried with a bounded exponential backoff, readiness
 * reports it; nothing is lost or counted twice.
 *
 * The Redis commit gate is held while any lane's statement runs, so that "commit in Postgres,
 * then hand the increments over" is never split by a Redis rebuild's snapshot. The offsets are
 * stored in Postgres with the rows (pg_sink); on assignment they are read back through the
 * consumer hook this module supplies, after every statement in flight has ended; before a
 * revocation everything held is committed, or the revoked partitions' messages are dropped for
 * their next owner to read again. Control records (key: records) are mirrored into the budgets
 * and api_keys from the same loop.
 *
 * Seam: the loop is sp_pipeline_run(): poll, sp_pipeline_tend() (retries, statements in flight,
 * due batches) and sp_pipeline_take() for each message. Tests call tend and take directly,
 * without a consumer.
 *
 * Threads: everything runs on the consumer (main) thread, except sp_pipeline_postgres_up and
 * sp_pipeline_write_metrics (any thread). */
#ifndef SP_PIPELINE_H
#define SP_PIPELINE_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "consumer.h"
#include "pg_sink.h"
#include "tg_buf.h"

#define SP_PIPELINE_RETRY_MIN_MS 100 /* first retry after a failed commit */

/* Dead-letter reasons as metric labels: a small fixed set (the precise text is in the row).
 * Labels reason="invalid", "too_large", "rejected". */
enum sp_pipeline_dead_class {
    SP_PIPELINE_DEAD_INVALID = 0,   /* did not decode, or could not be stored as an event */
    SP_PIPELINE_DEAD_TOO_LARGE = 1, /* longer than TG_EVENT_MAX_BYTES */
    SP_PIPELINE_DEAD_REJECTED = 2,  /* Postgres refused the event */
    SP_PIPELINE_DEAD_CLASSES = 3
};

struct sp_pipeline;
struct sp_redis_sink;
struct sp_budgets;
struct sp_alerter;

/* The modules the pipeline drives, all borrowed: they must outlive the pipeline's use of them
 * (destroy the pipeline, or stop calling it, before destroying them). */
struct sp_pipeline_modules {
    struct sp_consumer *consumer; /* NULL: messages come only through sp_pipeline_take */
    struct sp_redis_sink *redis;  /* NULL: no live counters, no commit gate */
    struct sp_budgets *budgets;   /* NULL: no budget checks (needed by sp_pipeline_run) */
    struct sp_alerter *alerter;   /* NULL: no event detectors, no dead-letter state */
};

/* Process hooks called from sp_pipeline_run (consumer thread). Either may be NULL. */
struct sp_pipeline_hooks {
    /* lag: once a second, right after the consumer's lag was refreshed */
    void (*lag)(void *ctx);
    /* tick: every budget_check_interval_ms, right after the budgets' tick */
    void (*tick)(void *ctx);
    void *ctx;
};

/* What the pipeline holds and has done, for tests and diagnostics. */
struct sp_pipeline_status {
    int lanes;                                /* postgres.writers */
    int postgres_up;                          /* as sp_pipeline_postgres_up */
    int failing;                              /* a commit failed: consumption held */
    uint64_t backoff_ms;                      /* delay of the retry scheduled last */
    uint64_t retry_at_ms;                     /* next retry while failing (monotonic ms) */
    int in_flight;                            /* lanes with a statement in flight */
    int gate_held;                            /* statements holding the Redis commit gate */
    int held_messages;                        /* events + dead letters in the batches */
    int held_dead[SP_PIPELINE_DEAD_CLASSES];  /* dead letters in the batches, by class */
    uint64_t consumed;                        /* messages taken */
    uint64_t inserted;                        /* spend_logs rows committed */
    uint64_t duplicates;                      /* events whose call id was already stored */
    uint64_t dead[SP_PIPELINE_DEAD_CLASSES];  /* dead letters committed, by class */
    uint64_t batches;                         /* batches committed */
    uint64_t commit_failures;                 /* commits that failed (and are retried) */
    uint64_t control_records;                 /* key: records applied */
};

/* sp_pipeline_create: postgres.writers lanes from cfg (borrowed for the call; the topic, batch
 * and retry settings are copied), each with a Postgres connection of its own (connected
 * lazily) and two batches of batch.max_events / batch.max_bytes. pg is the consumer thread's
 * connection (offsets, budgets, key mirror), borrowed for the pipeline's life. Postgres is
 * reported down until sp_pipeline_schema_ready. Returns new (sp_pipeline_destroy) or NULL with
 * err. Main thread. */
struct sp_pipeline *sp_pipeline_create(const struct sp_config *cfg, struct sp_pg *pg, char *err,
                                       size_t errlen);

/* sp_pipeline_destroy: close the lanes' connections, free the batches (what they hold is not
 * committed: it is read again from the Postgres offsets at the next start); *p set to NULL;
 * accepts NULL. Main thread, after the admin hooks stopped. */
void sp_pipeline_destroy(struct sp_pipeline **p);

/* sp_pipeline_consumer_hooks: the hooks sp_consumer_create needs (offsets read from Postgres at
 * assignment, commit-or-drop at revocation), ctx = p, into out (caller storage). */
void sp_pipeline_consumer_hooks(struct sp_pipeline *p, struct sp_consumer_hooks *out);

/* sp_pipeline_attach: the modules to drive and the process hooks (both copied; the pointers
 * in them are borrowed). Before sp_pipeline_run, sp_pipeline_take and sp_pipeline_tend.
 * Main thread. */
void sp_pipeline_attach(struct sp_pipeline *p, const struct sp_pipeline_modules *m,
                        const struct sp_pipeline_hooks *h);

/* sp_pipeline_schema_ready: the migrations are applied: Postgres is reported up until a
 * commit fails. Main thread. */
void sp_pipeline_schema_ready(struct sp_pipeline *p);

/* sp_pipeline_run: the consumer loop, until *stop is set (a signal handler sets it). Needs the
 * consumer and the budgets attached. What is held on return is committed by
 * sp_pipeline_shutdown_flush. Consumer thread. */
void sp_pipeline_run(struct sp_pipeline *p, const volatile sig_atomic_t *stop);

/* sp_pipeline_take: one message (borrowed for the call) as the loop handles it after a poll:
 * into its partition's lane's filling batch, as an event or as a dead letter; a lane whose
 * batch is full ships it first, or, when its other batch is still in flight (and there are
 * several lanes), parks its partitions. A batch that becomes full is shipped. Returns 0 when
 * the message was kept, or TG_EAGAIN when it was handed back to the consumer (read again
 * later: lane parked, or the commit failed and consumption is held). Not while failing (the
 * consumer delivers nothing while held). Consumer thread. */
int sp_pipeline_take(struct sp_pipeline *p, const struct sp_consumer_msg *m);

/* sp_pipeline_tend: the loop's work at now_ms (monotonic) before it polls. While failing: the
 * retry of every held batch once retry_at_ms is reached (success releases the consumer).
 * Otherwise: the lanes' statements in flight and the batches that are due (batch.max_wait_ms
 * after their first message) or full. Returns the poll wait (ms) that keeps every lane on
 * time, or -1 when the loop should start over (a batch shipped, a commit failed, consumption
 * released). Consumer thread. */
int sp_pipeline_tend(struct sp_pipeline *p, uint64_t now_ms);

/* sp_pipeline_shutdown_flush: commit what is held, retrying every 200 ms until deadline_ms
 * from now. Returns the messages left uncommitted (0: all committed; they are read again at
 * the next start). Consumer thread, after sp_pipeline_run returned. */
int sp_pipeline_shutdown_flush(struct sp_pipeline *p, int deadline_ms);

/* sp_pipeline_lane_of: the lane (0 .. lanes-1) of a partition: partition modulo the lane
 * count, the partition read as unsigned. Any thread. */
int sp_pipeline_lane_of(const struct sp_pipeline *p, int32_t partition);

/* sp_pipeline_postgres_up: 1 when the schema is ready and the last commit went through. Any
 * thread. */
int sp_pipeline_postgres_up(const struct sp_pipeline *p);

/* sp_pipeline_status: fill out (caller storage). Consumer thread. */
void sp_pipeline_status(const struct sp_pipeline *p, struct sp_pipeline_status *out);

/* sp_pipeline_write_metrics: the pipeline's part of /metrics (events consumed, rows inserted,
 * duplicates, dead letters by reason, batch size and duration histograms, postgres_up,
 * batches, commit failures, control records) appended to b. Any thread. */
void sp_pipeline_write_metrics(struct sp_pipeline *p, struct tg_buf *b);

#endif
