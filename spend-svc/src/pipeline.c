/* pipeline: spend-svc's consumer pipeline (see pipeline.h for the design). */
#include "pipeline.h"

#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alerter.h"
#include "budgets.h"
#include "proto_event.h"
#include "redis_sink.h"
#include "tg_err.h"
#include "tg_limits.h"
#include "tg_log.h"
#include "tg_metrics.h"
#include "tg_time.h"

#define SP_POLL_MAX_MS 100           /* longest single poll, so signals and timers are served */
#define SP_CONTROL_PER_LOOP 256      /* control records handled per loop turn */
#define SP_LAG_EVERY_MS 1000
#define SP_SHUTDOWN_RETRY_MS 200     /* pause between commit attempts at shutdown */

static const char *const dl_class_name[SP_PIPELINE_DEAD_CLASSES] = {"invalid", "too_large",
                                                                     "rejected"};

/* A batch and what the metrics need to know about it. */
struct slot {
    struct sp_pg_batch *b;
    uint64_t started_ms;              /* monotonic time of its first message */
    int dead[SP_PIPELINE_DEAD_CLASSES]; /* dead letters by class */
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

struct sp_pipeline {
    char topic[SP_CONFIG_STR_MAX];    /* events topic (rows and offsets are stored under it) */
    int batch_max_wait_ms;            /* oldest message of a batch waits at most this long */
    int retry_max_ms;                 /* cap of the retry backoff */
    int budget_check_interval_ms;     /* budgets' tick */

    struct sp_pg *pg;                 /* consumer thread's own (borrowed): offsets, keys, budgets */
    struct lane lanes[SP_CONFIG_WRITERS_MAX];
    int nlanes;
    int gate_held;                    /* statements in flight holding the Redis commit gate */
    int32_t held[SP_PG_PARTITIONS_MAX]; /* partitions of the last assignment (kept through a
                                         * revocation: the next assignment is compared to it) */
    int nheld;
    struct sp_consumer *consumer;     /* borrowed, may be NULL (tests) */
    struct sp_redis_sink *redis;      /* borrowed, may be NULL */
    struct sp_budgets *budgets;       /* borrowed, may be NULL */
    struct sp_alerter *alerter;       /* borrowed, may be NULL */
    struct sp_pipeline_hooks hooks;
    struct proto_event ev;            /* decode scratch (large: not on the stack) */
    struct proto_span span[PROTO_RECORD_EVENTS_MAX]; /* the events of the message being taken */
    int nspan;
    int split_rc;                     /* 0, or TG_ETOOBIG: too many events in the record */

    uint64_t retry_at_ms;             /* next commit attempt while failing */
    uint64_t backoff_ms;
    int failing;                      /* last commit failed: consumption held */

    _Atomic int pg_ready;             /* schema ready and the last commit went through */
    _Atomic uint64_t consumed;
    _Atomic uint64_t inserted;
    _Atomic uint64_t duplicates;
    _Atomic uint64_t dead[SP_PIPELINE_DEAD_CLASSES];
    _Atomic uint64_t batches;
    _Atomic uint64_t commit_failures;
    _Atomic uint64_t control_records;
    struct tg_histogram batch_size;
    struct tg_histogram batch_seconds;
};

static void fail(struct sp_pipeline *p, int rc);

/* Batches -------------------------------------------------------------------------------------- */

/* after_commit: the batch of slot i is in Postgres (res): Kafka commit, metrics, budgets, reset.
 * Consumer thread. */
static void after_commit(struct sp_pipeline *p, struct lane *l, int i,
                         const struct sp_pg_flush_result *res, uint64_t t0_us)
{
    struct slot *sl = &l->slots[i];
    int32_t parts[SP_PG_PARTITIONS_MAX];
    int64_t next[SP_PG_PARTITIONS_MAX];
    int nmsg = sp_pg_batch_messages(sl->b);
    int ndead = sp_pg_batch_dead(sl->b);
    int noff;

    atomic_store(&p->pg_ready, 1);
    noff = sp_pg_batch_offsets(sl->b, parts, next, SP_PG_PARTITIONS_MAX);
    if (p->consumer)
        sp_consumer_commit(p->consumer, parts, next, noff);
    atomic_fetch_add(&p->inserted, (uint64_t)res->inserted);
    atomic_fetch_add(&p->duplicates, (uint64_t)res->duplicates);
    for (int k = 0; k < SP_PIPELINE_DEAD_CLASSES; k++)
        atomic_fetch_add(&p->dead[k], (uint64_t)sl->dead[k]);
    atomic_fetch_add(&p->dead[SP_PIPELINE_DEAD_REJECTED], (uint64_t)res->rejected);
    atomic_fetch_add(&p->batches, 1);
    tg_histogram_observe(&p->batch_size, (double)nmsg);
    tg_histogram_observe(&p->batch_seconds, (double)(tg_now_mono_us() - t0_us) / 1e6);
    if (p->alerter)
        sp_alerter_dependency_state(p->alerter, "dead_letters", ndead == 0, tg_now_mono_ms());
    TG_DEBUG("msg=\"batch committed\" messages=%d inserted=%" PRId64 " duplicates=%" PRId64
             " dead=%d",
             nmsg, res->inserted, res->duplicates, ndead);
    if (p->budgets && res->nincr > 0) {
        int brc = sp_budgets_after_batch(p->budgets, p->pg, res->incr, res->nincr,
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
static void gate_enter(struct sp_pipeline *p)
{
    if (p->redis && p->gate_held++ == 0)
        sp_redis_sink_gate_lock(p->redis);
}

static void gate_leave(struct sp_pipeline *p)
{
    if (p->redis && --p->gate_held == 0)
        sp_redis_sink_gate_unlock(p->redis);
}

int sp_pipeline_lane_of(const struct sp_pipeline *p, int32_t partition)
{
    return (int)((uint32_t)partition % (uint32_t)p->nlanes);
}

static struct lane *lane_of(struct sp_pipeline *p, int32_t partition)
{
    return &p->lanes[sp_pipeline_lane_of(p, partition)];
}

static int lanes_messages(const struct sp_pipeline *p)
{
    int n = 0;

    for (int k = 0; k < p->nlanes; k++)
        n += sp_pg_batch_messages(p->lanes[k].slots[0].b) +
             sp_pg_batch_messages(p->lanes[k].slots[1].b);
    return n;
}

/* commit_sync: one transaction for slot i of lane l, waited for; then the Redis hand-over and
 * after_commit. Returns 0 or the Postgres error (the batch is kept). Nothing may be in flight
 * on the lane. */
static int commit_sync(struct sp_pipeline *p, struct lane *l, int i)
{
    struct sp_pg_flush_result res;
    uint64_t t0 = tg_now_mono_us();
    int rc;

    if (sp_pg_batch_messages(l->slots[i].b) == 0)
        return 0;
    gate_enter(p);
    rc = sp_pg_batch_flush(l->pg, l->slots[i].b, p->topic, &res);
    if (rc == 0 && p->redis)
        sp_redis_sink_add(p->redis, &res);
    gate_leave(p);
    if (rc < 0) {
        atomic_fetch_add(&p->commit_failures, 1);
        atomic_store(&p->pg_ready, 0);
        return rc;
    }
    after_commit(p, l, i, &res, t0);
    return 0;
}

/* flight_finish: results of lane l's statement in flight. block 0: TG_EAGAIN while it runs.
 * On failure the batch becomes the lane's pending one (kept for the retries). */
static int flight_finish(struct sp_pipeline *p, struct lane *l, int block)
{
    struct sp_pg_flush_result res;
    int i = l->flight;
    int rc;

    rc = sp_pg_batch_flush_finish(l->pg, l->slots[i].b, p->topic, block, &res);
    if (rc == TG_EAGAIN)
        return rc;
    if (rc == 0 && p->redis)
        sp_redis_sink_add(p->redis, &res);
    gate_leave(p);
    l->flight = -1;
    if (rc < 0) {
        atomic_fetch_add(&p->commit_failures, 1);
        atomic_store(&p->pg_ready, 0);
        l->pending = i;
        return rc;
    }
    after_commit(p, l, i, &res, l->flight_t0_us);
    return 0;
}

/* flights_finish: wait for every lane's statement in flight. Returns 0 or the first error
 * (the other lanes are still waited for). */
static int flights_finish(struct sp_pipeline *p)
{
    int first = 0;

    for (int k = 0; k < p->nlanes; k++) {
        if (p->lanes[k].flight >= 0) {
            int rc = flight_finish(p, &p->lanes[k], 1);
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
static int flight_start(struct sp_pipeline *p, struct lane *l)
{
    int rc;

    if (p->redis && p->gate_held > 0 && sp_redis_sink_gate_wanted(p->redis)) {
        rc = flights_finish(p);
        if (rc < 0)
            return rc;
    }
    if (p->redis && p->gate_held == 0)
        sp_redis_sink_gate_yield(p->redis);
    gate_enter(p);
    l->flight_t0_us = tg_now_mono_us();
    rc = sp_pg_batch_flush_start(l->pg, l->slots[l->fill].b, p->topic);
    if (rc < 0) {
        gate_leave(p);
        atomic_fetch_add(&p->commit_failures, 1);
        atomic_store(&p->pg_ready, 0);
        return rc;
    }
    l->flight = l->fill;
    l->fill = 1 - l->fill;
    return 0;
}

/* fail: a commit failed: hold consumption (polling goes on) and schedule a retry. */
static void fail(struct sp_pipeline *p, int rc)
{
    uint64_t now = tg_now_mono_ms();

    if (!p->failing) {
        TG_WARN("msg=\"postgres commit failed, holding the batch\" err=%s messages=%d",
                tg_errname(rc), lanes_messages(p));
        p->failing = 1;
        if (p->consumer)
            sp_consumer_hold(p->consumer);
        p->backoff_ms = SP_PIPELINE_RETRY_MIN_MS;
    } else {
        p->backoff_ms = p->backoff_ms * 2;
        if (p->backoff_ms > (uint64_t)p->retry_max_ms)
            p->backoff_ms = (uint64_t)p->retry_max_ms;
    }
    p->retry_at_ms = now + p->backoff_ms;
}

/* commit_all: wait for every statement in flight, then commit each lane's failed batch (older
 * messages first) and its filling one. Returns 0 when nothing is left to commit. */
static int commit_all(struct sp_pipeline *p)
{
    int rc = flights_finish(p);

    if (rc < 0)
        return rc;
    for (int k = 0; k < p->nlanes; k++) {
        struct lane *l = &p->lanes[k];

        if (l->pending >= 0) {
            rc = commit_sync(p, l, l->pending);
            if (rc < 0)
                return rc;
            l->pending = -1;
        }
        rc = commit_sync(p, l, l->fill);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* retry: while failing, try to commit everything held; on success resume consumption. */
static int retry(struct sp_pipeline *p)
{
    int rc = commit_all(p);

    if (rc < 0) {
        fail(p, rc);
        return rc;
    }
    if (p->failing) {
        TG_INFO("msg=\"postgres commit recovered\"");
        p->failing = 0;
        if (p->consumer)
            sp_consumer_release(p->consumer);
    }
    p->backoff_ms = SP_PIPELINE_RETRY_MIN_MS;
    return 0;
}

/* ship: lane l's filling batch is due: wait for the lane's previous statement if any, then
 * send this one and unpark the lane. Returns 0, or the error after which consumption is
 * held. */
static int ship(struct sp_pipeline *p, struct lane *l)
{
    int rc;

    if (l->flight >= 0) {
        rc = flight_finish(p, l, 1);
        if (rc < 0) {
            fail(p, rc);
            return rc;
        }
    }
    rc = flight_start(p, l);
    if (rc < 0) {
        fail(p, rc);
        return rc;
    }
    /* the lane has an empty batch again: its parked partitions (if any) are fed again */
    if (p->consumer)
        sp_consumer_unpark(p->consumer, p->nlanes, (int)(l - p->lanes));
    return 0;
}

/* take_message: decode the events of one message (split into p->span[0..p->nspan)) and add
 * them to the filling batch (which has room for them all). A record holding more events than a
 * writer may put in one becomes one dead letter. Returns 0, or the error after which the
 * message was handed back whole (nothing of it stays in the batch) and consumption is held. */
static int take_message(struct sp_pipeline *p, struct lane *l, const struct sp_consumer_msg *m)
{
    char reason[SP_PG_DEAD_REASON_MAX];
    struct slot *sl = &l->slots[l->fill];
    struct sp_pg_batch_mark mark;
    int dead[SP_PIPELINE_DEAD_CLASSES] = {0};
    int rc = 0;

    if (sp_pg_batch_messages(sl->b) == 0)
        sl->started_ms = tg_now_mono_ms();
    sp_pg_batch_mark(sl->b, m->partition, &mark);
    for (int i = 0; i < p->nspan; i++) {
        const char *data = m->payload ? (const char *)m->payload + p->span[i].off : NULL;
        size_t len = p->span[i].len;

        reason[0] = '\0';
        if (p->split_rc != 0) {
            snprintf(reason, sizeof(reason), "record holds more than %d events",
                     PROTO_RECORD_EVENTS_MAX);
            rc = TG_ETOOBIG;
        } else {
            rc = proto_event_decode(data, len, &p->ev, reason, sizeof(reason));
        }
        if (rc == 0) {
            rc = sp_pg_batch_add_event(sl->b, &p->ev, m->partition, m->offset, i, len);
            if (rc == 0) {
                if (p->alerter)
                    sp_alerter_observe_event(p->alerter, &p->ev);
                continue;
            }
            if (rc != TG_EINVAL)
                goto refused;
            /* the decoder let through what Postgres could not store */
            snprintf(reason, sizeof(reason), "call_id: not a uuid");
        }
        if (reason[0] == '\0')
            snprintf(reason, sizeof(reason), "%s", tg_strerror(rc));
        rc = sp_pg_batch_add_dead(sl->b, reason, data, len, m->partition, m->offset, i);
        if (rc != 0)
            goto refused;
        dead[len > TG_EVENT_MAX_BYTES ? SP_PIPELINE_DEAD_TOO_LARGE : SP_PIPELINE_DEAD_INVALID]++;
    }
    atomic_fetch_add(&p->consumed, (uint64_t)p->nspan);
    for (int k = 0; k < SP_PIPELINE_DEAD_CLASSES; k++)
        sl->dead[k] += dead[k];
    return 0;
refused:
    /* cannot happen after the room check (but for memory): keep the message for later rather
     * than lose it, and nothing of it in the batch, whose offsets would pass it */
    TG_ERROR("msg=\"batch refused a message\" err=%s", tg_errname(rc));
    sp_pg_batch_rewind(sl->b, &mark);
    if (p->consumer)
        sp_consumer_unread(p->consumer, m->partition, m->offset);
    fail(p, rc);
    return rc;
}

int sp_pipeline_take(struct sp_pipeline *p, const struct sp_consumer_msg *m)
{
    struct lane *l = lane_of(p, m->partition);
    struct sp_pg_batch *b = l->slots[l->fill].b;

    /* one event, or several (one per line): a record goes into one batch whole */
    p->split_rc = proto_record_split(m->payload, m->payload ? m->len : 0, p->span,
                                     PROTO_RECORD_EVENTS_MAX, &p->nspan);
    if (p->split_rc != 0) {
        /* more events than a writer puts in one record: the record is one dead letter */
        p->span[0].off = 0;
        p->span[0].len = m->payload ? m->len : 0;
        p->nspan = 1;
    }
    if (sp_pg_batch_full(b) || !sp_pg_batch_room(b, p->nspan, m->payload ? m->len : 0)) {
        if (l->flight >= 0 && p->nlanes > 1) {
            /* both of this lane's batches are taken: park its partitions rather than
             * wait here, so the other lanes keep filling (unparked when it ships) */
            if (p->consumer) {
                sp_consumer_unread(p->consumer, m->partition, m->offset);
                sp_consumer_park(p->consumer, p->nlanes, (int)(l - p->lanes));
            }
            return TG_EAGAIN;
        }
        if (ship(p, l) < 0) {
            if (p->consumer)
                sp_consumer_unread(p->consumer, m->partition, m->offset);
            return TG_EAGAIN;
        }
    }
    if (take_message(p, l, m) < 0)
        return TG_EAGAIN;
    if (!p->failing && sp_pg_batch_full(l->slots[l->fill].b) && l->flight < 0)
        ship(p, l);
    return 0;
}

/* Consumer hooks ------------------------------------------------------------------------------- */

/* note_assignment: remember parts as held; 1 when one of them was not held before. */
static int note_assignment(struct sp_pipeline *p, const int32_t *parts, int n)
{
    int gained = 0;

    if (n > SP_PG_PARTITIONS_MAX)
        n = SP_PG_PARTITIONS_MAX;
    for (int i = 0; i < n && !gained; i++) {
        int found = 0;
        for (int k = 0; k < p->nheld && !found; k++)
            found = p->held[k] == parts[i];
        gained = !found;
    }
    memcpy(p->held, parts, (size_t)n * sizeof(*parts));
    p->nheld = n;
    return gained;
}

static int offsets_hook(void *ctx, const int32_t *parts, int n, int64_t *next)
{
    struct sp_pipeline *p = ctx;

    /* what is in flight commits first, so the offsets read are the latest */
    int rc = flights_finish(p);

    /* partitions taken over: their last owner may have committed batches it never sent to
     * Redis (stopped between the two); only a rebuild from Postgres brings them in */
    if (note_assignment(p, parts, n) && p->redis)
        sp_redis_sink_takeover(p->redis);
    if (rc < 0) {
        fail(p, rc);
        return rc;
    }
    return sp_pg_offsets_load(p->pg, p->topic, parts, n, next);
}

static void revoking_hook(void *ctx, const int32_t *parts, int n)
{
    struct sp_pipeline *p = ctx;

    if (commit_all(p) == 0)
        return;
    /* could not commit: the next owner reads these partitions again from Postgres offsets;
     * what is left for other partitions is retried by the main loop */
    for (int i = 0; i < n; i++) {
        struct lane *l = lane_of(p, parts[i]);
        for (int k = 0; k < 2; k++)
            sp_pg_batch_drop_partition(l->slots[k].b, parts[i]);
    }
    for (int k = 0; k < p->nlanes; k++) {
        struct lane *l = &p->lanes[k];
        if (l->pending >= 0 && sp_pg_batch_messages(l->slots[l->pending].b) == 0)
            l->pending = -1;
    }
    if (lanes_messages(p) > 0)
        fail(p, TG_EUNAVAIL);
}

void sp_pipeline_consumer_hooks(struct sp_pipeline *p, struct sp_consumer_hooks *out)
{
    memset(out, 0, sizeof(*out));
    out->offsets_load = offsets_hook;
    out->revoking = revoking_hook;
    out->ctx = p;
}

/* Control topic: key:<hash> records mirror api_keys and the budgets; team:<id> records the
 * team budgets. */
static int control_record(void *ctx, const char *key, size_t keylen, const void *value,
                          size_t vlen)
{
    struct sp_pipeline *p = ctx;
    struct sp_pg_key k;
    char *metadata = NULL;
    int rc;

    if (sp_budgets_team_record(p->budgets, key, keylen, value, vlen) == 1) {
        atomic_fetch_add(&p->control_records, 1);
        return 0; /* a team: record: its budget mirrored */
    }
    rc = sp_budgets_record_decode(key, keylen, value, vlen, &k, &metadata);
    if (rc == SP_RECORD_SKIP)
        return 0; /* block: records and anything else are not ours to mirror */
    atomic_fetch_add(&p->control_records, 1);
    if (rc == SP_RECORD_KEY_DELETE) {
        sp_budgets_key_delete(p->budgets, k.key_hash);
        return sp_pg_api_key_delete(p->pg, k.key_hash) < 0 ? -1 : 0;
    }
    if (rc < 0)
        return 0; /* refused, the reason logged by sp_budgets_record_decode */
    sp_budgets_key_set(p->budgets, &k);
    rc = sp_pg_api_key_upsert(p->pg, &k);
    free(metadata);
    return rc < 0 ? -1 : 0;
}

/* Loop ----------------------------------------------------------------------------------------- */

/* lanes_tend: look at each lane's statement in flight (at most once per millisecond per lane:
 * each look is a recv() on its socket) and ship the batches whose wait is over. Returns the
 * poll wait (ms) that keeps every lane on time, or -1 when the loop should start over. */
static int lanes_tend(struct sp_pipeline *p, uint64_t now)
{
    int wait = SP_POLL_MAX_MS;

    for (int k = 0; k < p->nlanes; k++) {
        struct lane *l = &p->lanes[k];
        struct slot *sl;

        if (l->flight >= 0 && now >= l->flight_check_ms) {
            int rc;

            l->flight_check_ms = now + 1;
            rc = flight_finish(p, l, 0);
            if (rc < 0 && rc != TG_EAGAIN) {
                fail(p, rc);
                return -1;
            }
        }
        /* while a statement runs, poll briefly so its end is noticed soon */
        if (l->flight >= 0 && wait > 2)
            wait = 2;
        sl = &l->slots[l->fill];
        if (sp_pg_batch_messages(sl->b) > 0) {
            uint64_t due = sl->started_ms + (uint64_t)p->batch_max_wait_ms;
            /* a due batch waits for its lane's statement in flight anyway (one per
             * connection): it keeps filling until that one ends instead of blocking the loop,
             * so a backlog is drained in full batches (Postgres's cost per event falls with
             * the batch size: the spend_daily fold is per distinct group, not per event) */
            if ((now >= due || sp_pg_batch_full(sl->b)) && l->flight < 0) {
                ship(p, l);
                return -1;
            }
            if (now < due && due - now < (uint64_t)wait)
                wait = (int)(due - now);
        }
    }
    return wait;
}

int sp_pipeline_tend(struct sp_pipeline *p, uint64_t now_ms)
{
    if (p->failing) {
        if (now_ms >= p->retry_at_ms && retry(p) == 0)
            return -1; /* released: the next poll delivers messages again */
        return SP_POLL_MAX_MS / 2;
    }
    return lanes_tend(p, now_ms);
}

void sp_pipeline_run(struct sp_pipeline *p, const volatile sig_atomic_t *stop)
{
    uint64_t next_tick = 0;
    uint64_t next_lag = 0;
    struct sp_consumer_msg m;

    while (!*stop) {
        uint64_t now = tg_now_mono_ms();
        int wait;
        int rc;

        if (now >= next_lag) {
            sp_consumer_update_lag(p->consumer);
            if (p->hooks.lag)
                p->hooks.lag(p->hooks.ctx);
            next_lag = now + SP_LAG_EVERY_MS;
        }
        wait = sp_pipeline_tend(p, now);
        if (wait < 0)
            continue;
        if (p->failing) {
            /* keep polling so the group keeps us; while held every message is discarded by
             * the consumer (and read again after release), so a 1 here cannot happen */
            if (sp_consumer_poll(p->consumer, wait, &m) == 1) {
                sp_consumer_unread(p->consumer, m.partition, m.offset);
                TG_ERROR("msg=\"message delivered while held, will be read again\"");
            }
            continue;
        }
        sp_consumer_control_poll(p->consumer, SP_CONTROL_PER_LOOP, control_record, p);
        if (now >= next_tick) {
            int brc = sp_budgets_tick(p->budgets, p->pg, (int64_t)tg_now_epoch_ms());
            if (brc < 0)
                TG_WARN_RL("msg=\"budget tick failed\" err=%s", tg_errname(brc));
            next_tick = now + (uint64_t)p->budget_check_interval_ms;
            if (p->hooks.tick)
                p->hooks.tick(p->hooks.ctx);
        }
        rc = sp_consumer_poll(p->consumer, wait, &m);
        if (rc != 1)
            continue;
        sp_pipeline_take(p, &m);
    }
}

int sp_pipeline_shutdown_flush(struct sp_pipeline *p, int deadline_ms)
{
    uint64_t deadline = tg_now_mono_ms() + (uint64_t)deadline_ms;
    int left;

    while (tg_now_mono_ms() < deadline) {
        if (commit_all(p) == 0)
            break;
        tg_sleep_ms(SP_SHUTDOWN_RETRY_MS);
    }
    left = lanes_messages(p);
    if (left > 0)
        TG_WARN("msg=\"shutdown: batch not committed; it is read again at the next start\" "
                "messages=%d",
                left);
    return left;
}

/* Life ----------------------------------------------------------------------------------------- */

struct sp_pipeline *sp_pipeline_create(const struct sp_config *cfg, struct sp_pg *pg, char *err,
                                       size_t errlen)
{
    static const double size_bounds[] = {1, 10, 50, 100, 500, 1000, 2000, 5000, 10000, 50000};
    struct sp_pipeline *p = NULL;

    if (cfg->pg_writers < 1 || cfg->pg_writers > SP_CONFIG_WRITERS_MAX) {
        snprintf(err, errlen, "postgres.writers %d out of range 1..%d", cfg->pg_writers,
                 SP_CONFIG_WRITERS_MAX);
        return NULL;
    }
    p = calloc(1, sizeof(*p));
    if (!p) {
        snprintf(err, errlen, "out of memory for the pipeline");
        return NULL;
    }
    snprintf(p->topic, sizeof(p->topic), "%s", cfg->kafka_topic);
    p->batch_max_wait_ms = cfg->batch_max_wait_ms;
    p->retry_max_ms = cfg->pg_retry_max_ms;
    p->budget_check_interval_ms = cfg->budget_check_interval_ms;
    p->pg = pg;
    tg_histogram_init(&p->batch_size, size_bounds, sizeof(size_bounds) / sizeof(size_bounds[0]));
    tg_histogram_init(&p->batch_seconds, tg_latency_bounds_s, tg_latency_bounds_n);
    p->backoff_ms = SP_PIPELINE_RETRY_MIN_MS;
    p->nlanes = cfg->pg_writers;
    for (int k = 0; k < p->nlanes; k++) {
        struct lane *l = &p->lanes[k];

        l->flight = -1;
        l->pending = -1;
        l->pg = sp_pg_create(cfg->pg_dsn, cfg->pg_query_timeout_ms, err, errlen);
        if (!l->pg)
            goto fail;
        l->slots[0].b = sp_pg_batch_create(cfg->batch_max_events, cfg->batch_max_bytes);
        l->slots[1].b = sp_pg_batch_create(cfg->batch_max_events, cfg->batch_max_bytes);
        if (!l->slots[0].b || !l->slots[1].b) {
            snprintf(err, errlen, "out of memory for the batches");
            goto fail;
        }
    }
    return p;
fail:
    sp_pipeline_destroy(&p);
    return NULL;
}

void sp_pipeline_destroy(struct sp_pipeline **pp)
{
    struct sp_pipeline *p = pp ? *pp : NULL;

    if (!p)
        return;
    for (int k = 0; k < SP_CONFIG_WRITERS_MAX; k++) {
        sp_pg_batch_destroy(&p->lanes[k].slots[0].b);
        sp_pg_batch_destroy(&p->lanes[k].slots[1].b);
        sp_pg_destroy(&p->lanes[k].pg);
    }
    free(p);
    *pp = NULL;
}

void sp_pipeline_attach(struct sp_pipeline *p, const struct sp_pipeline_modules *m,
                        const struct sp_pipeline_hooks *h)
{
    p->consumer = m->consumer;
    p->redis = m->redis;
    p->budgets = m->budgets;
    p->alerter = m->alerter;
    if (h)
        p->hooks = *h;
}

void sp_pipeline_schema_ready(struct sp_pipeline *p)
{
    atomic_store(&p->pg_ready, 1);
}

/* Status and metrics --------------------------------------------------------------------------- */

int sp_pipeline_postgres_up(const struct sp_pipeline *p)
{
    return atomic_load(&p->pg_ready);
}

void sp_pipeline_status(const struct sp_pipeline *p, struct sp_pipeline_status *out)
{
    memset(out, 0, sizeof(*out));
    out->lanes = p->nlanes;
    out->postgres_up = atomic_load(&p->pg_ready);
    out->failing = p->failing;
    out->backoff_ms = p->backoff_ms;
    out->retry_at_ms = p->retry_at_ms;
    out->gate_held = p->gate_held;
    for (int k = 0; k < p->nlanes; k++) {
        const struct lane *l = &p->lanes[k];

        out->in_flight += l->flight >= 0;
        for (int i = 0; i < 2; i++)
            for (int c = 0; c < SP_PIPELINE_DEAD_CLASSES; c++)
                out->held_dead[c] += l->slots[i].dead[c];
    }
    out->held_messages = lanes_messages(p);
    out->consumed = atomic_load(&p->consumed);
    out->inserted = atomic_load(&p->inserted);
    out->duplicates = atomic_load(&p->duplicates);
    for (int c = 0; c < SP_PIPELINE_DEAD_CLASSES; c++)
        out->dead[c] = atomic_load(&p->dead[c]);
    out->batches = atomic_load(&p->batches);
    out->commit_failures = atomic_load(&p->commit_failures);
    out->control_records = atomic_load(&p->control_records);
}

void sp_pipeline_write_metrics(struct sp_pipeline *p, struct tg_buf *b)
{
    tg_prom_counter(b, "tollgate_spend_events_consumed_total", "Messages read from the topic",
                    atomic_load(&p->consumed));
    tg_prom_counter(b, "tollgate_spend_rows_inserted_total", "spend_logs rows inserted",
                    atomic_load(&p->inserted));
    tg_prom_counter(b, "tollgate_spend_duplicates_skipped_total",
                    "Events whose call_id was already stored", atomic_load(&p->duplicates));
    tg_prom_header(b, "tollgate_spend_dead_letters_total", "counter",
                   "Invalid messages written to dead_letters, by reason class");
    for (int i = 0; i < SP_PIPELINE_DEAD_CLASSES; i++) {
        struct tg_label l = {"reason", dl_class_name[i]};
        tg_prom_sample_u64(b, "tollgate_spend_dead_letters_total", &l, 1,
                           atomic_load(&p->dead[i]));
    }
    tg_prom_header(b, "tollgate_spend_batch_size", "histogram", "Messages per committed batch");
    tg_prom_histogram(b, "tollgate_spend_batch_size", NULL, 0, &p->batch_size);
    tg_prom_header(b, "tollgate_spend_batch_duration_seconds", "histogram",
                   "Time to commit one batch in Postgres");
    tg_prom_histogram(b, "tollgate_spend_batch_duration_seconds", NULL, 0, &p->batch_seconds);
    tg_prom_gauge(b, "tollgate_spend_postgres_up", "1 when the last Postgres commit succeeded",
                  atomic_load(&p->pg_ready) ? 1.0 : 0.0);
    tg_prom_counter(b, "tollgate_spend_batches_total", "Batches committed",
                    atomic_load(&p->batches));
    tg_prom_counter(b, "tollgate_spend_commit_failures_total",
                    "Batch commits that failed and were retried", atomic_load(&p->commit_failures));
    tg_prom_counter(b, "tollgate_spend_control_records_total", "key: records applied",
                    atomic_load(&p->control_records));
}
