/* spend-svc: consumes tollgate.events.v1 into Postgres exactly once per call id, keeps live
 * counters in Redis, checks budgets and serves the admin endpoints.
 *
 *   spend-svc --config FILE [--check]
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
 * kept once it ships) instead of stopping the loop, so the other lanes keep filling. Postgres unavailable:
 * the batches are kept, partitions are paused (polling continues so that the group membership
 * survives), the commit is retried with a bounded exponential backoff, readiness reports it;
 * nothing is lost or counted twice.
 * SIGTERM/SIGINT: the current batch is committed, the consumer leaves its group, exit 0. */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "admin_http.h"
#include "budgets.h"
#include "config.h"
#include "consumer.h"
#include "pg_sink.h"
#include "proto_event.h"
#include "redis_sink.h"
#include "tg_err.h"
#include "tg_log.h"
#include "tg_metrics.h"
#include "tg_period.h"
#include "tg_time.h"

#include "alerter.h"

#define SP_POLL_MAX_MS 100           /* longest single poll, so signals and timers are served */
#define SP_RETRY_MIN_MS 100          /* first retry after a failed commit */
#define SP_SHUTDOWN_FLUSH_MS 10000   /* time allowed to commit the last batch at SIGTERM */
#define SP_CONTROL_PER_LOOP 256      /* control records handled per loop turn */
#define SP_PUBLISH_TIMEOUT_MS 5000   /* acks=all wait for a block record */
#define SP_LAG_EVERY_MS 1000

/* Dead-letter reasons as metric labels: a small fixed set (the precise text is in the row). */
enum dl_class { DL_INVALID = 0, DL_TOO_LARGE = 1, DL_REJECTED = 2, DL_NCLASSES = 3 };
static const char *const dl_class_name[DL_NCLASSES] = {"invalid", "too_large", "rejected"};

/* A batch and what the metrics need to know about it. */
struct slot {
    struct sp_pg_batch *b;
    uint64_t started_ms;              /* monotonic time of its first message */
    int dead[DL_NCLASSES];            /* dead letters by class */
};

/* A lane: one Postgres connection and its two batches, for the partitions p with
 * p % nlanes == its index. */
struct lane {
    struct sp_pg *pg;
    struct slot slots[2];             /* two batches: one filling, one in flight or failed */
    int fill;                         /* index of the batch being filled */
    int flight;                       /* index of the batch whose statement runs, or -1 */
    int pending;                      /* index of a batch whose commit failed, or -1 */
    uint64_t flight_t0_us;            /* when the statement in flight was sent */
    uint64_t flight_check_ms;         /* next look at the statement in flight (monotonic) */
};

struct app {
    struct sp_config cfg;
    struct sp_pg *pg;                 /* consumer thread's own: offsets, keys, budgets, reports */
    struct lane lanes[SP_CONFIG_WRITERS_MAX];
    int nlanes;
    int gate_held;                    /* statements in flight holding the Redis commit gate */
    struct sp_consumer *consumer;
    struct sp_redis_sink *redis;
    struct sp_budgets *budgets;
    struct sp_admin_http *admin;
    struct sp_alerter *alerter;
    struct sp_alerter_config alert_cfg;
    struct proto_event ev;            /* decode scratch (large: not on the stack) */

    uint64_t retry_at_ms;             /* next commit attempt while failing */
    uint64_t backoff_ms;
    int failing;                      /* last commit failed: consumption held */
    int kafka_seen;                   /* Kafka was reachable at least once */

    _Atomic int pg_ready;             /* schema ready and the last commit went through */
    _Atomic uint64_t consumed;
    _Atomic uint64_t inserted;
    _Atomic uint64_t duplicates;
    _Atomic uint64_t dead[DL_NCLASSES];
    _Atomic uint64_t batches;
    _Atomic uint64_t commit_failures;
    _Atomic uint64_t control_records;
    struct tg_histogram batch_size;
    struct tg_histogram batch_seconds;
};

static volatile sig_atomic_t sp_stop;

static void on_signal(int sig)
{
    (void)sig;
    sp_stop = 1;
}

/* Alert seam ------------------------------------------------------------------------------------ */

static void on_crossing(void *ctx, const struct sp_budget_crossing *c)
{
    struct app *a = ctx;
    struct sp_alert al;
    char subject[SP_ALERT_SUBJECT_CAP];
    char summary[SP_ALERT_SUMMARY_CAP];

    snprintf(subject, sizeof(subject), "%s %.64s budget %d%%", c->kind, c->name,
             c->threshold_pct);
    snprintf(summary, sizeof(summary), "%s %.64s reached %d%% of its budget", c->kind, c->name,
             c->threshold_pct);
    sp_alert_init(&al, SP_ALERT_BUDGET,
                  c->threshold_pct >= 100 ? SP_ALERT_CRITICAL : SP_ALERT_WARNING, subject,
                  summary);
    sp_alert_add_field(&al, "scope", c->kind);
    sp_alert_add_field(&al, "name", c->name);
    sp_alert_add_fieldf(&al, "threshold", "%d%%", c->threshold_pct);
    sp_alert_add_fieldf(&al, "spend_usd", "%.6f", (double)c->spend_nusd / 1e9);
    sp_alert_add_fieldf(&al, "max_budget_usd", "%.6f", (double)c->max_budget_nusd / 1e9);
    sp_alert_add_fieldf(&al, "period_start_ms", "%" PRId64, c->period_start_ms);
    sp_alert_add_fieldf(&al, "period_end_ms", "%" PRId64, c->period_end_ms);
    if (a->alerter)
        sp_alerter_raise(a->alerter, &al);
    TG_INFO("msg=\"budget threshold reached\" scope=%s threshold_pct=%d spend_nusd=%" PRId64
            " max_budget_nusd=%" PRId64,
            c->kind, c->threshold_pct, c->spend_nusd, c->max_budget_nusd);
}

static void report_dependencies(struct app *a)
{
    uint64_t now = tg_now_mono_ms();
    if (!a->alerter)
        return;
    sp_alerter_dependency_state(a->alerter, "postgres", atomic_load(&a->pg_ready), now);
    if (a->redis)
        sp_alerter_dependency_state(a->alerter, "redis", sp_redis_sink_is_up(a->redis), now);
    if (a->consumer) {
        /* Kafka counts as down only once it has been up: not while the first connection and
         * group join are still in progress */
        int up = sp_consumer_kafka_up(a->consumer);
        a->kafka_seen |= up;
        if (a->kafka_seen)
            sp_alerter_dependency_state(a->alerter, "kafka", up, now);
        sp_alerter_consumer_lag(a->alerter, sp_consumer_total_lag(a->consumer), now);
    }
}

/* Daily report: top keys, teams and model groups of the previous UTC day, from spend_daily. */
struct report_rows {
    struct sp_report_row rows[SP_ALERTER_REPORT_ROWS_MAX];
    size_t n;
};

static void report_row(void *ctx, const char *dim, const char *name, const struct sp_pg_totals *t)
{
    struct report_rows *rr = ctx;
    struct sp_report_row *row;

    if (rr->n >= SP_ALERTER_REPORT_ROWS_MAX)
        return;
    row = &rr->rows[rr->n++];
    memset(row, 0, sizeof(*row));
    snprintf(row->dimension, sizeof(row->dimension), "%s", dim);
    snprintf(row->name, sizeof(row->name), "%.63s", name);
    row->cost_nusd = t->cost_nusd;
    row->requests = t->requests;
    row->failures = t->failures;
    row->tokens = t->prompt_tokens;
}

static void daily_report(struct app *a)
{
    static struct report_rows rr;
    char day[11];
    int64_t cost = 0;
    int64_t requests = 0;

    if (!a->alerter || !sp_alerter_daily_report_due(a->alerter, tg_now_epoch_ms(), day))
        return;
    rr.n = 0;
    if (sp_pg_day_top(a->pg, day, SP_ALERTER_REPORT_ROWS_MAX / 3, report_row, &rr, &cost,
                      &requests) < 0) {
        TG_WARN("msg=\"daily report skipped: postgres unavailable\"");
        return;
    }
    sp_alerter_daily_report(a->alerter, day, cost, requests, rr.rows, rr.n);
}

static int publish_hook(void *ctx, const char *record_key, const char *value, size_t len)
{
    struct app *a = ctx;
    return sp_consumer_publish_control(a->consumer, record_key, value, len,
                                       SP_PUBLISH_TIMEOUT_MS);
}

/* Batches --------------------------------------------------------------------------------------- */

/* after_commit: the batch of slot i is in Postgres (res): Kafka commit, metrics, budgets, reset.
 * Consumer thread. */
static void after_commit(struct app *a, struct lane *l, int i,
                         const struct sp_pg_flush_result *res, uint64_t t0_us)
{
    struct slot *sl = &l->slots[i];
    int32_t parts[SP_PG_PARTITIONS_MAX];
    int64_t next[SP_PG_PARTITIONS_MAX];
    int nmsg = sp_pg_batch_messages(sl->b);
    int ndead = sp_pg_batch_dead(sl->b);
    int noff;

    atomic_store(&a->pg_ready, 1);
    noff = sp_pg_batch_offsets(sl->b, parts, next, SP_PG_PARTITIONS_MAX);
    sp_consumer_commit(a->consumer, parts, next, noff);
    atomic_fetch_add(&a->inserted, (uint64_t)res->inserted);
    atomic_fetch_add(&a->duplicates, (uint64_t)res->duplicates);
    for (int k = 0; k < DL_NCLASSES; k++)
        atomic_fetch_add(&a->dead[k], (uint64_t)sl->dead[k]);
    atomic_fetch_add(&a->dead[DL_REJECTED], (uint64_t)res->rejected);
    atomic_fetch_add(&a->batches, 1);
    tg_histogram_observe(&a->batch_size, (double)nmsg);
    tg_histogram_observe(&a->batch_seconds, (double)(tg_now_mono_us() - t0_us) / 1e6);
    if (a->alerter)
        sp_alerter_dependency_state(a->alerter, "dead_letters", ndead == 0, tg_now_mono_ms());
    TG_DEBUG("msg=\"batch committed\" messages=%d inserted=%" PRId64 " duplicates=%" PRId64
             " dead=%d",
             nmsg, res->inserted, res->duplicates, ndead);
    if (a->budgets && res->nincr > 0) {
        int brc = sp_budgets_after_batch(a->budgets, a->pg, res->incr, res->nincr,
                                         (int64_t)tg_now_epoch_ms());
        if (brc < 0)
            TG_WARN_RL("msg=\"budget check failed\" err=%s", tg_errname(brc));
    }
    sp_pg_batch_reset(sl->b);
    memset(sl->dead, 0, sizeof(sl->dead));
}

/* The Redis commit gate is held while any lane's statement runs: "commit in Postgres, then
 * hand the increments over" must not be split by a rebuild's snapshot. gate_enter/gate_leave
 * count the holders; the mutex is taken by the first and released by the last. */
static void gate_enter(struct app *a)
{
    if (a->redis && a->gate_held++ == 0)
        sp_redis_sink_gate_lock(a->redis);
}

static void gate_leave(struct app *a)
{
    if (a->redis && --a->gate_held == 0)
        sp_redis_sink_gate_unlock(a->redis);
}

static struct lane *lane_of(struct app *a, int32_t partition)
{
    return &a->lanes[(uint32_t)partition % (uint32_t)a->nlanes];
}

static int lanes_messages(const struct app *a)
{
    int n = 0;

    for (int k = 0; k < a->nlanes; k++)
        n += sp_pg_batch_messages(a->lanes[k].slots[0].b) +
             sp_pg_batch_messages(a->lanes[k].slots[1].b);
    return n;
}

/* commit_sync: one transaction for slot i of lane l, waited for; then the Redis hand-over and
 * after_commit. Returns 0 or the Postgres error (the batch is kept). Nothing may be in flight
 * on the lane. */
static int commit_sync(struct app *a, struct lane *l, int i)
{
    struct sp_pg_flush_result res;
    uint64_t t0 = tg_now_mono_us();
    int rc;

    if (sp_pg_batch_messages(l->slots[i].b) == 0)
        return 0;
    gate_enter(a);
    rc = sp_pg_batch_flush(l->pg, l->slots[i].b, a->cfg.kafka_topic, &res);
    if (rc == 0 && a->redis)
        sp_redis_sink_add(a->redis, &res);
    gate_leave(a);
    if (rc < 0) {
        atomic_fetch_add(&a->commit_failures, 1);
        atomic_store(&a->pg_ready, 0);
        return rc;
    }
    after_commit(a, l, i, &res, t0);
    return 0;
}

/* flight_finish: results of lane l's statement in flight. block 0: TG_EAGAIN while it runs.
 * On failure the batch becomes the lane's pending one (kept for the retries). */
static int flight_finish(struct app *a, struct lane *l, int block)
{
    struct sp_pg_flush_result res;
    int i = l->flight;
    int rc;

    rc = sp_pg_batch_flush_finish(l->pg, l->slots[i].b, a->cfg.kafka_topic, block, &res);
    if (rc == TG_EAGAIN)
        return rc;
    if (rc == 0 && a->redis)
        sp_redis_sink_add(a->redis, &res);
    gate_leave(a);
    l->flight = -1;
    if (rc < 0) {
        atomic_fetch_add(&a->commit_failures, 1);
        atomic_store(&a->pg_ready, 0);
        l->pending = i;
        return rc;
    }
    after_commit(a, l, i, &res, l->flight_t0_us);
    return 0;
}

/* flights_finish: wait for every lane's statement in flight. Returns 0 or the first error
 * (the other lanes are still waited for). */
static int flights_finish(struct app *a)
{
    int first = 0;

    for (int k = 0; k < a->nlanes; k++) {
        if (a->lanes[k].flight >= 0) {
            int rc = flight_finish(a, &a->lanes[k], 1);
            if (rc < 0 && first == 0)
                first = rc;
        }
    }
    return first;
}

/* flight_start: send lane l's filling batch's statement and switch the lane to its other
 * (empty) batch, so that consumption continues while Postgres works. The commit gate stays
 * held until flight_finish. A rebuild waiting for the gate gets it first: the lanes' flights
 * end, the gate is let go, and this lane's statement waits for the snapshot. Returns 0 or a
 * connection error (nothing sent, the batch stays the filling one). */
static int flight_start(struct app *a, struct lane *l)
{
    int rc;

    if (a->redis && a->gate_held > 0 && sp_redis_sink_gate_wanted(a->redis)) {
        rc = flights_finish(a);
        if (rc < 0)
            return rc;
    }
    if (a->redis && a->gate_held == 0)
        sp_redis_sink_gate_yield(a->redis);
    gate_enter(a);
    l->flight_t0_us = tg_now_mono_us();
    rc = sp_pg_batch_flush_start(l->pg, l->slots[l->fill].b, a->cfg.kafka_topic);
    if (rc < 0) {
        gate_leave(a);
        atomic_fetch_add(&a->commit_failures, 1);
        atomic_store(&a->pg_ready, 0);
        return rc;
    }
    l->flight = l->fill;
    l->fill = 1 - l->fill;
    return 0;
}

/* fail: a commit failed: hold consumption (polling goes on) and schedule a retry. */
static void fail(struct app *a, int rc)
{
    uint64_t now = tg_now_mono_ms();

    if (!a->failing) {
        TG_WARN("msg=\"postgres commit failed, holding the batch\" err=%s messages=%d",
                tg_errname(rc), lanes_messages(a));
        a->failing = 1;
        sp_consumer_hold(a->consumer);
        a->backoff_ms = SP_RETRY_MIN_MS;
    } else {
        a->backoff_ms = a->backoff_ms * 2;
        if (a->backoff_ms > (uint64_t)a->cfg.pg_retry_max_ms)
            a->backoff_ms = (uint64_t)a->cfg.pg_retry_max_ms;
    }
    a->retry_at_ms = now + a->backoff_ms;
}

/* commit_all: wait for every statement in flight, then commit each lane's failed batch (older
 * messages first) and its filling one. Returns 0 when nothing is left to commit. */
static int commit_all(struct app *a)
{
    int rc = flights_finish(a);

    if (rc < 0)
        return rc;
    for (int k = 0; k < a->nlanes; k++) {
        struct lane *l = &a->lanes[k];

        if (l->pending >= 0) {
            rc = commit_sync(a, l, l->pending);
            if (rc < 0)
                return rc;
            l->pending = -1;
        }
        rc = commit_sync(a, l, l->fill);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* retry: while failing, try to commit everything held; on success resume consumption. */
static int retry(struct app *a)
{
    int rc = commit_all(a);

    if (rc < 0) {
        fail(a, rc);
        return rc;
    }
    if (a->failing) {
        TG_INFO("msg=\"postgres commit recovered\"");
        a->failing = 0;
        sp_consumer_release(a->consumer);
    }
    a->backoff_ms = SP_RETRY_MIN_MS;
    return 0;
}

/* ship: lane l's filling batch is due: wait for the lane's previous statement if any, then
 * send this one and unpark the lane. Returns 0, or the error after which consumption is
 * held. */
static int ship(struct app *a, struct lane *l)
{
    int rc;

    if (l->flight >= 0) {
        rc = flight_finish(a, l, 1);
        if (rc < 0) {
            fail(a, rc);
            return rc;
        }
    }
    rc = flight_start(a, l);
    if (rc < 0) {
        fail(a, rc);
        return rc;
    }
    /* the lane has an empty batch again: its parked partitions (if any) are fed again */
    sp_consumer_unpark(a->consumer, a->nlanes, (int)(l - a->lanes));
    return 0;
}

/* take_message: decode and add one message to the filling batch (which has room). */
static void take_message(struct app *a, struct lane *l, const struct sp_consumer_msg *m)
{
    char reason[SP_PG_DEAD_REASON_MAX];
    struct slot *sl = &l->slots[l->fill];
    int rc;

    atomic_fetch_add(&a->consumed, 1);
    if (sp_pg_batch_messages(sl->b) == 0)
        sl->started_ms = tg_now_mono_ms();
    reason[0] = '\0';
    rc = proto_event_decode(m->payload, m->len, &a->ev, reason, sizeof(reason));
    if (rc == 0) {
        rc = sp_pg_batch_add_event(sl->b, &a->ev, m->partition, m->offset, m->len);
        if (rc == 0) {
            if (a->alerter)
                sp_alerter_observe_event(a->alerter, &a->ev);
            return;
        }
        if (rc != TG_EINVAL)
            goto refused;
        /* the decoder let through what Postgres could not store */
        snprintf(reason, sizeof(reason), "call_id: not a uuid");
    }
    if (reason[0] == '\0')
        snprintf(reason, sizeof(reason), "%s", tg_strerror(rc));
    rc = sp_pg_batch_add_dead(sl->b, reason, m->payload, m->len, m->partition, m->offset);
    if (rc == 0) {
        sl->dead[m->len > TG_EVENT_MAX_BYTES ? DL_TOO_LARGE : DL_INVALID]++;
        return;
    }
refused:
    /* cannot happen after the room check; keep the message for later rather than lose it */
    TG_ERROR("msg=\"batch refused a message\" err=%s", tg_errname(rc));
    sp_consumer_unread(a->consumer, m->partition, m->offset);
    fail(a, rc);
}

/* Consumer hooks ---------------------------------------------------------------------------------- */

static int offsets_hook(void *ctx, const int32_t *parts, int n, int64_t *next)
{
    struct app *a = ctx;

    /* what is in flight commits first, so the offsets read are the latest */
    int rc = flights_finish(a);

    if (rc < 0) {
        fail(a, rc);
        return rc;
    }
    return sp_pg_offsets_load(a->pg, a->cfg.kafka_topic, parts, n, next);
}

static void revoking_hook(void *ctx, const int32_t *parts, int n)
{
    struct app *a = ctx;

    if (commit_all(a) == 0)
        return;
    /* could not commit: the next owner reads these partitions again from Postgres offsets;
     * what is left for other partitions is retried by the main loop */
    for (int i = 0; i < n; i++) {
        struct lane *l = lane_of(a, parts[i]);
        for (int k = 0; k < 2; k++)
            sp_pg_batch_drop_partition(l->slots[k].b, parts[i]);
    }
    for (int k = 0; k < a->nlanes; k++) {
        struct lane *l = &a->lanes[k];
        if (l->pending >= 0 && sp_pg_batch_messages(l->slots[l->pending].b) == 0)
            l->pending = -1;
    }
    if (lanes_messages(a) > 0)
        fail(a, TG_EUNAVAIL);
}

/* Control topic: key:<hash> records mirror api_keys and the budgets. */
static int control_record(void *ctx, const char *key, size_t keylen, const void *value,
                          size_t vlen)
{
    struct app *a = ctx;
    struct sp_pg_key k;
    char *metadata = NULL;
    int rc;

    rc = sp_budgets_record_decode(key, keylen, value, vlen, &k, &metadata);
    if (rc == SP_RECORD_SKIP)
        return 0; /* block: records and anything else are not ours to mirror */
    atomic_fetch_add(&a->control_records, 1);
    if (rc == SP_RECORD_KEY_DELETE) {
        sp_budgets_key_delete(a->budgets, k.key_hash);
        return sp_pg_api_key_delete(a->pg, k.key_hash) < 0 ? -1 : 0;
    }
    if (rc < 0) {
        TG_WARN_RL("msg=\"control record ignored: not a key object\" len=%zu", vlen);
        return 0;
    }
    sp_budgets_key_set(a->budgets, &k);
    rc = sp_pg_api_key_upsert(a->pg, &k);
    free(metadata);
    return rc < 0 ? -1 : 0;
}

/* Admin hooks ----------------------------------------------------------------------------------------- */

static void status_hook(void *ctx, struct sp_admin_status *out)
{
    struct app *a = ctx;
    out->postgres_up = atomic_load(&a->pg_ready);
    out->kafka_up = a->consumer ? sp_consumer_kafka_up(a->consumer) : 0;
    if (a->consumer != NULL && !out->kafka_up)
        sp_consumer_kafka_reason(a->consumer, out->kafka_reason, sizeof(out->kafka_reason));
    out->redis_up = a->redis ? sp_redis_sink_is_up(a->redis) : 0;
    if (a->redis != NULL && !out->redis_up)
        sp_redis_sink_reason(a->redis, out->redis_reason, sizeof(out->redis_reason));
    out->control_caught_up = a->consumer ? sp_consumer_control_caught_up(a->consumer) : 0;
}

static void metrics_hook(void *ctx, struct tg_buf *b)
{
    struct app *a = ctx;

    tg_prom_counter(b, "tollgate_spend_events_consumed_total", "Messages read from the topic",
                    atomic_load(&a->consumed));
    tg_prom_counter(b, "tollgate_spend_rows_inserted_total", "spend_logs rows inserted",
                    atomic_load(&a->inserted));
    tg_prom_counter(b, "tollgate_spend_duplicates_skipped_total",
                    "Events whose call_id was already stored", atomic_load(&a->duplicates));
    tg_prom_header(b, "tollgate_spend_dead_letters_total", "counter",
                   "Invalid messages written to dead_letters, by reason class");
    for (int i = 0; i < DL_NCLASSES; i++) {
        struct tg_label l = {"reason", dl_class_name[i]};
        tg_prom_sample_u64(b, "tollgate_spend_dead_letters_total", &l, 1,
                           atomic_load(&a->dead[i]));
    }
    tg_prom_header(b, "tollgate_spend_batch_size", "histogram", "Messages per committed batch");
    tg_prom_histogram(b, "tollgate_spend_batch_size", NULL, 0, &a->batch_size);
    tg_prom_header(b, "tollgate_spend_batch_duration_seconds", "histogram",
                   "Time to commit one batch in Postgres");
    tg_prom_histogram(b, "tollgate_spend_batch_duration_seconds", NULL, 0, &a->batch_seconds);
    tg_prom_gauge(b, "tollgate_spend_postgres_up", "1 when the last Postgres commit succeeded",
                  atomic_load(&a->pg_ready) ? 1.0 : 0.0);
    tg_prom_counter(b, "tollgate_spend_batches_total", "Batches committed",
                    atomic_load(&a->batches));
    tg_prom_counter(b, "tollgate_spend_commit_failures_total",
                    "Batch commits that failed and were retried", atomic_load(&a->commit_failures));
    tg_prom_counter(b, "tollgate_spend_control_records_total", "key: records applied",
                    atomic_load(&a->control_records));
    if (a->consumer)
        sp_consumer_write_metrics(a->consumer, b);
    if (a->redis)
        sp_redis_sink_write_metrics(a->redis, b);
    if (a->budgets)
        sp_budgets_write_metrics(a->budgets, b);
    if (a->alerter)
        sp_alerter_write_metrics(a->alerter, b);
}

/* Main ------------------------------------------------------------------------------------------------ */

static int alerting_section(void *ctx, struct tg_yaml *y, const struct yaml_node_s *node)
{
    return sp_alerter_config_parse(y, node, ctx);
}

static void usage(void)
{
    fprintf(stderr, "usage: spend-svc --config FILE [--check]\n");
}

/* lanes_tend: look at each lane's statement in flight (at most once per millisecond per lane:
 * each look is a recv() on its socket) and ship the batches whose wait is over. Returns the
 * poll wait (ms) that keeps every lane on time, or -1 when the loop should start over. */
static int lanes_tend(struct app *a, uint64_t now)
{
    int wait = SP_POLL_MAX_MS;

    for (int k = 0; k < a->nlanes; k++) {
        struct lane *l = &a->lanes[k];
        struct slot *sl;

        if (l->flight >= 0 && now >= l->flight_check_ms) {
            int rc;

            l->flight_check_ms = now + 1;
            rc = flight_finish(a, l, 0);
            if (rc < 0 && rc != TG_EAGAIN) {
                fail(a, rc);
                return -1;
            }
        }
        /* while a statement runs, poll briefly so its end is noticed soon */
        if (l->flight >= 0 && wait > 2)
            wait = 2;
        sl = &l->slots[l->fill];
        if (sp_pg_batch_messages(sl->b) > 0) {
            uint64_t due = sl->started_ms + (uint64_t)a->cfg.batch_max_wait_ms;
            /* a due batch waits for its lane's statement in flight anyway (one per
             * connection): it keeps filling until that one ends instead of blocking the loop,
             * so a backlog is drained in full batches (Postgres's cost per event falls with
             * the batch size: the spend_daily fold is per distinct group, not per event) */
            if ((now >= due || sp_pg_batch_full(sl->b)) && l->flight < 0) {
                ship(a, l);
                return -1;
            }
            if (now < due && due - now < (uint64_t)wait)
                wait = (int)(due - now);
        }
    }
    return wait;
}

/* run_loop: the consumer loop until a signal. */
static void run_loop(struct app *a)
{
    uint64_t next_tick = 0;
    uint64_t next_lag = 0;
    struct sp_consumer_msg m;

    while (!sp_stop) {
        uint64_t now = tg_now_mono_ms();
        struct lane *l;
        int wait;
        int rc;

        if (now >= next_lag) {
            sp_consumer_update_lag(a->consumer);
            report_dependencies(a);
            next_lag = now + SP_LAG_EVERY_MS;
        }
        if (a->failing) {
            if (now >= a->retry_at_ms && retry(a) == 0)
                continue; /* released: the next poll delivers messages again */
            /* keep polling so the group keeps us; while held every message is discarded by
             * the consumer (and read again after release), so a 1 here cannot happen */
            if (sp_consumer_poll(a->consumer, SP_POLL_MAX_MS / 2, &m) == 1) {
                sp_consumer_unread(a->consumer, m.partition, m.offset);
                TG_ERROR("msg=\"message delivered while held, will be read again\"");
            }
            continue;
        }
        wait = lanes_tend(a, now);
        if (wait < 0)
            continue;
        sp_consumer_control_poll(a->consumer, SP_CONTROL_PER_LOOP, control_record, a);
        if (now >= next_tick) {
            int brc = sp_budgets_tick(a->budgets, a->pg, (int64_t)tg_now_epoch_ms());
            if (brc < 0)
                TG_WARN_RL("msg=\"budget tick failed\" err=%s", tg_errname(brc));
            next_tick = now + (uint64_t)a->cfg.budget_check_interval_ms;
            daily_report(a);
        }
        rc = sp_consumer_poll(a->consumer, wait, &m);
        if (rc != 1)
            continue;
        l = lane_of(a, m.partition);
        if (sp_pg_batch_full(l->slots[l->fill].b)) {
            if (l->flight >= 0 && a->nlanes > 1) {
                /* both of this lane's batches are taken: park its partitions rather than
                 * wait here, so the other lanes keep filling (unparked when it ships) */
                sp_consumer_unread(a->consumer, m.partition, m.offset);
                sp_consumer_park(a->consumer, a->nlanes, (int)(l - a->lanes));
                continue;
            }
            if (ship(a, l) < 0) {
                sp_consumer_unread(a->consumer, m.partition, m.offset);
                continue;
            }
        }
        take_message(a, l, &m);
        if (!a->failing && sp_pg_batch_full(l->slots[l->fill].b) && l->flight < 0)
            ship(a, l);
    }
}

/* shutdown_flush: commit what is held, retrying until the shutdown deadline. */
static void shutdown_flush(struct app *a)
{
    uint64_t deadline = tg_now_mono_ms() + SP_SHUTDOWN_FLUSH_MS;
    int left;

    while (tg_now_mono_ms() < deadline) {
        if (commit_all(a) == 0)
            break;
        tg_sleep_ms(200);
    }
    left = lanes_messages(a);
    if (left > 0)
        TG_WARN("msg=\"shutdown: batch not committed; it is read again at the next start\" "
                "messages=%d",
                left);
}

int main(int argc, char **argv)
{
    static struct app app; /* large; zero-initialised */
    struct app *a = &app;
    const char *config_path = NULL;
    int check = 0;
    char err[1024];
    int exit_code = 1;
    struct sigaction sa;
    sp_config_section_fn alerting_fn = NULL;
    void *alerting_ctx = NULL;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--config") == 0 && i + 1 < argc) {
            config_path = argv[++i];
        } else if (strcmp(argv[i], "--check") == 0) {
            check = 1;
        } else {
            usage();
            return 2;
        }
    }
    if (!config_path) {
        usage();
        return 2;
    }
    tg_log_init("spend-svc");
    sp_alerter_config_defaults(&a->alert_cfg);
    alerting_fn = alerting_section;
    alerting_ctx = &a->alert_cfg;
    if (sp_config_load(config_path, &a->cfg, alerting_fn, alerting_ctx, err, sizeof(err)) < 0) {
        fprintf(stderr, "%s\n", err);
        return 2;
    }
    if (check) {
        fprintf(stderr, "%s: ok\n", config_path);
        return 0;
    }
    /* the budget time zone, process-wide, before any thread starts (checked at load) */
    if (tg_period_set_tz(a->cfg.timezone, err, sizeof(err)) != 0) {
        fprintf(stderr, "%s: timezone: %s\n", config_path, err);
        return 2;
    }

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    {
        static const double size_bounds[] = {1, 10, 50, 100, 500, 1000, 2000, 5000, 10000, 50000};
        tg_histogram_init(&a->batch_size, size_bounds, sizeof(size_bounds) / sizeof(size_bounds[0]));
        tg_histogram_init(&a->batch_seconds, tg_latency_bounds_s, tg_latency_bounds_n);
    }
    a->backoff_ms = SP_RETRY_MIN_MS;
    a->pg = sp_pg_create(a->cfg.pg_dsn, a->cfg.pg_query_timeout_ms, err, sizeof(err));
    if (!a->pg)
        goto fail;
    a->nlanes = a->cfg.pg_writers;
    for (int k = 0; k < a->nlanes; k++) {
        struct lane *l = &a->lanes[k];

        l->flight = -1;
        l->pending = -1;
        l->pg = sp_pg_create(a->cfg.pg_dsn, a->cfg.pg_query_timeout_ms, err, sizeof(err));
        if (!l->pg)
            goto fail;
        l->slots[0].b = sp_pg_batch_create(a->cfg.batch_max_events, a->cfg.batch_max_bytes);
        l->slots[1].b = sp_pg_batch_create(a->cfg.batch_max_events, a->cfg.batch_max_bytes);
        if (!l->slots[0].b || !l->slots[1].b) {
            snprintf(err, sizeof(err), "out of memory for the batches");
            goto fail;
        }
    }
    {
        struct sp_admin_hooks ah = {.status = status_hook, .metrics = metrics_hook, .ctx = a};
        a->admin = sp_admin_http_start(a->cfg.listen_host, a->cfg.listen_port, a->cfg.master_key,
                                       a->cfg.pg_dsn, a->cfg.pg_query_timeout_ms, &ah, err,
                                       sizeof(err));
        if (!a->admin)
            goto fail;
    }
    a->alerter = sp_alerter_create(&a->alert_cfg, err, sizeof(err));
    if (!a->alerter)
        goto fail;
    /* schema first: retried until it works or we are asked to stop */
    for (uint64_t backoff = SP_RETRY_MIN_MS;;) {
        int rc = sp_pg_migrate(a->pg);
        if (rc == 0)
            break;
        TG_WARN_RL("msg=\"migrations not applied yet, retrying\" err=%s", tg_errname(rc));
        if (sp_stop) {
            exit_code = 0;
            goto out;
        }
        tg_sleep_ms(backoff);
        backoff = backoff * 2 > (uint64_t)a->cfg.pg_retry_max_ms
                      ? (uint64_t)a->cfg.pg_retry_max_ms
                      : backoff * 2;
    }
    atomic_store(&a->pg_ready, 1);
    {
        struct sp_budgets_hooks bh = {.crossing = on_crossing, .publish = publish_hook, .ctx = a};
        a->budgets = sp_budgets_create(&a->cfg, &bh, err, sizeof(err));
        if (!a->budgets)
            goto fail;
        if (sp_budgets_load_blocked(a->budgets, a->pg) < 0)
            TG_WARN("msg=\"could not load published blocks\"");
    }
    {
        struct sp_redis_sink_config rc = {
            .host = a->cfg.redis_host,
            .port = a->cfg.redis_port,
            .db = a->cfg.redis_db,
            .username = a->cfg.redis_username,
            .password = a->cfg.redis_password,
            .tls = a->cfg.redis_tls,
            .ca_file = a->cfg.redis_ca_file,
            .cert_file = a->cfg.redis_cert_file,
            .key_file = a->cfg.redis_key_file,
            .server_name = a->cfg.redis_server_name,
            .timeout_ms = a->cfg.redis_timeout_ms,
            .pending_max = a->cfg.redis_pending_max,
            .day_ttl_s = a->cfg.redis_day_ttl_s,
            .pg_dsn = a->cfg.pg_dsn,
            .topic = a->cfg.kafka_topic,
            .pg_timeout_ms = a->cfg.pg_query_timeout_ms,
            .periods = {.period_of = sp_budgets_period_of, .list = sp_budgets_list,
                        .ctx = a->budgets},
        };
        a->redis = sp_redis_sink_create(&rc, err, sizeof(err));
        if (!a->redis)
            goto fail;
    }
    {
        struct sp_consumer_hooks ch = {.offsets_load = offsets_hook,
                                       .revoking = revoking_hook,
                                       .ctx = a};
        a->consumer = sp_consumer_create(&a->cfg, &ch, err, sizeof(err));
        if (!a->consumer)
            goto fail;
    }
    {
        char kdesc[128];

        /* the Kafka settings' kinds and count, never a value (secrets are among them) */
        TG_INFO("msg=\"spend-svc started\" port=%d batch_max_events=%d batch_max_wait_ms=%d "
                "writers=%d kafka=\"%s\"",
                a->cfg.listen_port, a->cfg.batch_max_events, a->cfg.batch_max_wait_ms, a->nlanes,
                tg_kafka_opts_describe(&a->cfg.kafka_opts, kdesc, sizeof(kdesc)));
    }

    run_loop(a);

    TG_INFO("msg=\"shutting down\"");
    shutdown_flush(a);
    sp_consumer_close(a->consumer);
    shutdown_flush(a); /* anything the revocation could not commit */
    exit_code = 0;
    goto out;
fail:
    fprintf(stderr, "spend-svc: %s\n", err);
    TG_ERROR("msg=\"start failed\"");
out:
    sp_consumer_destroy(&a->consumer);
    sp_redis_sink_destroy(&a->redis);
    sp_admin_http_stop(&a->admin);
    sp_alerter_destroy(&a->alerter);
    sp_budgets_destroy(&a->budgets);
    for (int k = 0; k < SP_CONFIG_WRITERS_MAX; k++) {
        sp_pg_batch_destroy(&a->lanes[k].slots[0].b);
        sp_pg_batch_destroy(&a->lanes[k].slots[1].b);
        sp_pg_destroy(&a->lanes[k].pg);
    }
    sp_pg_destroy(&a->pg);
    return exit_code;
}
