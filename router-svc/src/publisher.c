#include "publisher.h"

#include <inttypes.h>
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <librdkafka/rdkafka.h>

#include "tg_kafka_opts.h"

#include "spool.h"
#include "tg_err.h"
#include "tg_limits.h"
#include "tg_log.h"
#include "tg_metrics.h"
#include "tg_time.h"

/* Spool payload: u8 key length, key bytes (the key hash), then the encoded event. */
#define PUB_KEY_MAX 64u
#define PUB_PAYLOAD_MAX (1u + PUB_KEY_MAX + TG_EVENT_MAX_BYTES)

enum slot_state { SLOT_EMPTY = 0, SLOT_PRODUCED = 1, SLOT_ACKED = 2 };

struct pub_reason {
    char name[48];          /* rd_kafka_err2name() */
    _Atomic uint64_t count;
};

struct rt_publisher {
    struct rt_publisher_config cfg;
    char brokers[1024];
    char topic[256];
    char spool_dir[1024];
    struct rt_spool *spool;
    rd_kafka_t *rk;
    rd_kafka_topic_t *rkt;
    rd_kafka_conf_t *conf;   /* what each producer instance is made from (kept for a new one) */
    _Atomic int fatal;       /* librdkafka reported a fatal error: the instance is unusable */
    uint64_t renew_ms;       /* monotonic ms of the last new instance */
    uint64_t burst_max;      /* most records in flight since the last trim */
    uint64_t trim_ms;        /* monotonic ms of the last malloc_trim */
    pthread_t thread;
    int thread_started;
    _Atomic int stop;
    _Atomic int kafka_up;
    /* Window of in-flight records past the checkpoint: publisher thread only. */
    uint8_t *state;          /* RT_PUBLISHER_WINDOW entries */
    uint64_t *ts;            /* append time of each slot, epoch ms */
    uint64_t base;           /* lowest unacknowledged seq */
    uint64_t expect;         /* next seq the reader should deliver */
    uint64_t rewind_to;      /* UINT64_MAX, or the seq to re-produce from after a failure */
    uint64_t last_checkpoint_ms;
    uint64_t last_ack_ms;    /* monotonic ms of the last acknowledgement (or of start) */
    uint64_t last_sync_ms;
    uint64_t replay_below;   /* seqs below this were in the spool at start */
    uint64_t base_moved_ms;  /* monotonic ms when base last advanced or nothing was out */
    int32_t partitions;      /* partitions of the events topic in the last statistics (capped) */
    int paused;              /* partitions paused for held acknowledgements (count) */
    uint64_t paused_ms;      /* monotonic ms of the pause */
    uint64_t resumed_ms;     /* monotonic ms of the last resume */
    int probing;             /* resumed for time alone: pass of RT_PUBLISHER_PROBE_MS */
    int brokers_up;          /* brokers in state UP in the last statistics (stats callback) */
    /* Per partition (RT_PUBLISHER_PARTITIONS_MAX): its leader's connection is up in the last
     * statistics; paused by the publisher. */
    uint8_t leader_up[RT_PUBLISHER_PARTITIONS_MAX];
    uint8_t paused_p[RT_PUBLISHER_PARTITIONS_MAX];
    uint64_t stats_ms;       /* monotonic ms of those statistics, 0 = none yet */
    uint64_t paused_base;    /* base at the pause */
    uint64_t hold_start_ms;  /* monotonic ms of the first pause of this hold, 0 = none */
    /* When records were produced, coarsely: expect at a monotonic ms, every RT_PUBLISHER_MARK_MS
     * at most, the last RT_PUBLISHER_MARKS of them (a ring, oldest at mark_first). */
    struct pub_mark {
        uint64_t expect, ms;
    } marks[RT_PUBLISHER_MARKS];
    uint32_t mark_first, mark_n;
    uint32_t hold_probes;    /* probes in this hold */
    /* Counters. */
    _Atomic uint64_t acked;
    _Atomic uint64_t replayed;
    _Atomic uint64_t dropped;
    _Atomic uint64_t rejected;
    _Atomic uint64_t submit_errors;
    _Atomic uint64_t produced;
    _Atomic uint64_t queue_full;
    _Atomic uint64_t pauses;        /* pauses for held acknowledgements */
    _Atomic uint64_t renewals;      /* producer instances replaced after a fatal error */
    _Atomic uint64_t outq;          /* rd_kafka_outq_len() after the last pass */
    _Atomic int paused_shared;
    _Atomic uint64_t base_shared;   /* copy of base for other threads */
    _Atomic uint64_t oldest_ts;     /* append time of the oldest unacknowledged record, or 0 */
    pthread_mutex_t reasons_mu;
    struct tg_kafka_lasterr last_error;             /* for readiness */
    struct pub_reason reasons[RT_PUBLISHER_REASONS_MAX];
    uint32_t nreasons;
};

static void count_reason(struct rt_publisher *pub, const char *name)
{
    uint32_t i;

    pthread_mutex_lock(&pub->reasons_mu);
    for (i = 0; i < pub->nreasons; i++) {
        if (strcmp(pub->reasons[i].name, name) == 0)
            break;
    }
    if (i == pub->nreasons) {
        if (pub->nreasons < RT_PUBLISHER_REASONS_MAX - 1) {
            snprintf(pub->reasons[i].name, sizeof(pub->reasons[i].name), "%s", name);
            pub->nreasons++;
        } else {
            /* The last slot collects every reason past the table's capacity. */
            i = RT_PUBLISHER_REASONS_MAX - 1;
            snprintf(pub->reasons[i].name, sizeof(pub->reasons[i].name), "other");
            if (pub->nreasons < RT_PUBLISHER_REASONS_MAX)
                pub->nreasons = RT_PUBLISHER_REASONS_MAX;
        }
    }
    atomic_fetch_add(&pub->reasons[i].count, 1);
    pthread_mutex_unlock(&pub->reasons_mu);
}

/* Delivery report: runs on the publisher thread inside rd_kafka_poll(). */
static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    struct rt_publisher *pub = opaque;
    uint64_t seq = (uint64_t)(uintptr_t)m->_private;

    (void)rk;
    if (seq < pub->base || seq - pub->base >= RT_PUBLISHER_WINDOW)
        return; /* acknowledged already (a duplicate from a rewind) */
    if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR) {
        if (pub->state[seq % RT_PUBLISHER_WINDOW] != SLOT_ACKED) {
            pub->state[seq % RT_PUBLISHER_WINDOW] = SLOT_ACKED;
            atomic_fetch_add(&pub->acked, 1);
        }
        pub->last_ack_ms = tg_now_mono_ms();
        atomic_store(&pub->kafka_up, 1);
        return;
    }
    /* A purge at shutdown is not a delivery error: the record stays in the spool. */
    if (m->err != RD_KAFKA_RESP_ERR__PURGE_QUEUE && m->err != RD_KAFKA_RESP_ERR__PURGE_INFLIGHT) {
        count_reason(pub, rd_kafka_err2name(m->err));
        TG_WARN_RL("event=kafka_delivery_failed reason=%s action=retry_from_spool",
                   rd_kafka_err2name(m->err));
    }
    if (pub->state[seq % RT_PUBLISHER_WINDOW] == SLOT_PRODUCED) {
        pub->state[seq % RT_PUBLISHER_WINDOW] = SLOT_EMPTY;
        if (seq < pub->rewind_to)
            pub->rewind_to = seq;
    }
}

static void on_error(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
    struct rt_publisher *pub = opaque;

    char esc[TG_KAFKA_LASTERR_CAP];

    (void)rk;
    if (err == RD_KAFKA_RESP_ERR__FATAL)
        atomic_store(&pub->fatal, 1);
    if (tg_kafka_lasterr_note(&pub->last_error, err, reason, esc, sizeof(esc)))
        atomic_store(&pub->kafka_up, 0);
    TG_WARN_RL("event=kafka_error code=%s reason=\"%s\"",
               rd_kafka_err2name((rd_kafka_resp_err_t)err), esc);
}

/* Statistics (every RT_PUBLISHER_STATS_MS, on the publisher thread inside rd_kafka_poll()): only
 * how many brokers are up, for hold_or_release. librdkafka writes each broker's connection state
 * as "state":"UP" (other objects name theirs fetch_state, idemp_state, ...). */
static int on_stats(rd_kafka_t *rk, char *json, size_t len, void *opaque)
{
    struct rt_publisher *pub = opaque;
    int32_t up_ids[RT_PUBLISHER_BROKERS_MAX];
    json_t *root, *brokers, *parts, *v;
    const char *k;
    int nup = 0;

    (void)rk;
    /* librdkafka's own statistics (publisher.h): brokers with their node id and state, the
     * topic's partitions with their leader. Once a second, on this thread (rd_kafka_poll). */
    root = json_loadb(json, len, 0, NULL);
    if (root == NULL)
        return 0;
    brokers = json_object_get(root, "brokers");
    json_object_foreach(brokers, k, v) {
        json_t *st = json_object_get(v, "state"), *id = json_object_get(v, "nodeid");

        if (nup < RT_PUBLISHER_BROKERS_MAX && json_is_string(st) &&
            strcmp(json_string_value(st), "UP") == 0 && json_is_integer(id) &&
            json_integer_value(id) >= 0 && json_integer_value(id) <= INT32_MAX)
            up_ids[nup++] = (int32_t)json_integer_value(id);
    }
    memset(pub->leader_up, 0, sizeof(pub->leader_up));
    pub->partitions = 0;
    parts = json_object_get(json_object_get(json_object_get(root, "topics"), pub->topic),
                            "partitions");
    json_object_foreach(parts, k, v) {
        json_t *pj = json_object_get(v, "partition"), *lj = json_object_get(v, "leader");
        json_int_t pn = json_is_integer(pj) ? json_integer_value(pj) : -1;

        /* -1 is librdkafka's queue for records without a partition yet */
        if (pn < 0 || pn >= RT_PUBLISHER_PARTITIONS_MAX || !json_is_integer(lj))
            continue;
        if (pn + 1 > pub->partitions)
            pub->partitions = (int32_t)pn + 1;
        for (int i = 0; i < nup; i++) {
            if (up_ids[i] == json_integer_value(lj))
                pub->leader_up[pn] = 1;
        }
    }
    json_decref(root);
    pub->brokers_up = nup;
    pub->stats_ms = tg_now_mono_ms();
    return 0; /* librdkafka frees json */
}

static void on_log(const rd_kafka_t *rk, int level, const char *fac, const char *buf)
{
    (void)rk;
    (void)buf;
    /* librdkafka's own lines can carry broker addresses but no secrets; keep them terse. */
    if (level <= 3)
        TG_WARN_RL("event=kafka_log facility=%s", fac);
}

static int conf_set(rd_kafka_conf_t *conf, const char *k, const char *v, char *err, size_t errlen)
{
    if (rd_kafka_conf_set(conf, k, v, err, errlen) != RD_KAFKA_CONF_OK)
        return TG_ECONFIG;
    return 0;
}

/* Moves base past acknowledged slots; persists the checkpoint at most every
 * RT_PUBLISHER_CHECKPOINT_MS (or at once when force). Publisher thread. */
static void advance_base(struct rt_publisher *pub, int force)
{
    uint64_t old = pub->base;
    uint64_t now = tg_now_mono_ms();

    while (pub->base < pub->expect && pub->state[pub->base % RT_PUBLISHER_WINDOW] == SLOT_ACKED) {
        pub->state[pub->base % RT_PUBLISHER_WINDOW] = SLOT_EMPTY;
        pub->base++;
    }
    if (pub->base != old || pub->base == pub->expect)
        pub->base_moved_ms = now;
    atomic_store(&pub->base_shared, pub->base);
    atomic_store(&pub->oldest_ts,
                 pub->base < pub->expect ? pub->ts[pub->base % RT_PUBLISHER_WINDOW] : 0);
    if (pub->base != old || force) {
        if (force || now - pub->last_checkpoint_ms >= RT_PUBLISHER_CHECKPOINT_MS) {
            rt_spool_ack_below(pub->spool, pub->base);
            pub->last_checkpoint_ms = now;
        }
    }
}

/* Reads spooled records and produces them until the window or the queue is full. Returns the
 * number produced. Publisher thread. */
static int produce_some(struct rt_publisher *pub, unsigned char *buf)
{
    struct rt_spool_record rec;
    uint64_t window;
    int n = 0;

    if (pub->rewind_to != UINT64_MAX) {
        /* Produce again from the first record that failed, or from the lowest one not
         * acknowledged when that one was delivered since by a copy produced after an earlier
         * rewind. What was produced from there on is read again (what got acknowledged is
         * skipped); what is still in flight below it stays produced, so that its own failure
         * rewinds again. */
        uint64_t from = pub->rewind_to > pub->base ? pub->rewind_to : pub->base;

        if (from > pub->expect)
            from = pub->expect;
        for (uint64_t s = from; s < pub->expect; s++) {
            if (pub->state[s % RT_PUBLISHER_WINDOW] == SLOT_PRODUCED)
                pub->state[s % RT_PUBLISHER_WINDOW] = SLOT_EMPTY;
        }
        rt_spool_rewind(pub->spool, from);
        pub->expect = from;
        pub->rewind_to = UINT64_MAX;
        pub->mark_n = 0; /* seqs produced again: earlier marks no longer order them */
    }
    /* Nothing acknowledged for a while although records are out: Kafka is down or stuck. */
    if (pub->expect > pub->base && tg_now_mono_ms() - pub->last_ack_ms > RT_PUBLISHER_STALL_MS)
        window = RT_PUBLISHER_STALLED_WINDOW;
    else
        window = RT_PUBLISHER_WINDOW;
    while (n < RT_PUBLISHER_PASS_MAX && pub->expect - pub->base < window) {
        int rc = rt_spool_read_next(pub->spool, &rec, buf, RT_SPOOL_RECORD_MAX_BYTES);
        uint32_t keylen;
        void *keyp, *valp;
        size_t vallen;
        rd_kafka_resp_err_t err;

        if (rc <= 0)
            break;
        if (rec.seq < pub->expect)
            continue; /* read before (the reader starts at the checkpoint at most) */
        if (rec.seq - pub->base >= RT_PUBLISHER_WINDOW) {
            /* Past the window: leave it in the spool for later. */
            rt_spool_rewind(pub->spool, rec.seq);
            break;
        }
        /* Records missing from the spool (skipped as corrupt) will never be acknowledged. */
        for (; pub->expect < rec.seq; pub->expect++)
            pub->state[pub->expect % RT_PUBLISHER_WINDOW] = SLOT_ACKED;
        if (pub->state[rec.seq % RT_PUBLISHER_WINDOW] == SLOT_ACKED) {
            pub->expect = rec.seq + 1; /* delivered before a rewind: not produced again */
            continue;
        }
        keylen = rec.len > 0 ? buf[0] : 0;
        if (rec.len < 1 || keylen > PUB_KEY_MAX || 1 + keylen > rec.len) {
            count_reason(pub, "corrupt_record");
            pub->state[rec.seq % RT_PUBLISHER_WINDOW] = SLOT_ACKED;
            pub->expect = rec.seq + 1;
            continue;
        }
        keyp = keylen > 0 ? buf + 1 : NULL;
        valp = buf + 1 + keylen;
        vallen = rec.len - 1 - keylen;
        err = rd_kafka_producev(pub->rk, RD_KAFKA_V_RKT(pub->rkt), RD_KAFKA_V_KEY(keyp, keylen),
                                RD_KAFKA_V_VALUE(valp, vallen),
                                RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                                RD_KAFKA_V_OPAQUE((void *)(uintptr_t)rec.seq), RD_KAFKA_V_END);
        if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
            if (err == RD_KAFKA_RESP_ERR__QUEUE_FULL)
                atomic_fetch_add(&pub->queue_full, 1);
            else
                count_reason(pub, rd_kafka_err2name(err));
            if (err == RD_KAFKA_RESP_ERR__FATAL)
                atomic_store(&pub->fatal, 1);
            rt_spool_rewind(pub->spool, rec.seq);
            pub->expect = rec.seq;
            break;
        }
        pub->state[rec.seq % RT_PUBLISHER_WINDOW] = SLOT_PRODUCED;
        pub->ts[rec.seq % RT_PUBLISHER_WINDOW] = rec.ts_ms;
        pub->expect = rec.seq + 1;
        if (rec.seq < pub->replay_below)
            atomic_fetch_add(&pub->replayed, 1);
        atomic_fetch_add(&pub->produced, 1);
        n++;
    }
    return n;
}

/* Resumes the paused partitions not set in want (NULL: none) and, when add, pauses those set
 * in want. Publisher thread; the change is taken before it returns. */
static void set_paused(struct rt_publisher *pub, const uint8_t *want, int add)
{
    rd_kafka_topic_partition_list_t *pl = NULL, *rl = NULL;
    int n = pub->paused;

    for (int32_t p = 0; p < RT_PUBLISHER_PARTITIONS_MAX; p++) {
        int w = want != NULL && p < pub->partitions && want[p];
        rd_kafka_topic_partition_list_t **l = w && add && !pub->paused_p[p] ? &pl
                                              : !w && pub->paused_p[p]    ? &rl
                                                                          : NULL;

        if (l == NULL)
            continue;
        if (*l == NULL && (*l = rd_kafka_topic_partition_list_new(8)) == NULL)
            continue;
        rd_kafka_topic_partition_list_add(*l, pub->topic, p);
    }
    if (pl != NULL && rd_kafka_pause_partitions(pub->rk, pl) == RD_KAFKA_RESP_ERR_NO_ERROR) {
        for (int i = 0; i < pl->cnt; i++) {
            if (pl->elems[i].err == RD_KAFKA_RESP_ERR_NO_ERROR) {
                pub->paused_p[pl->elems[i].partition] = 1;
                n++;
            }
        }
    }
    if (rl != NULL) {
        /* A resume of a partition librdkafka does not know (any more) has nothing to undo. */
        rd_kafka_resume_partitions(pub->rk, rl);
        for (int i = 0; i < rl->cnt; i++) {
            pub->paused_p[rl->elems[i].partition] = 0;
            n--;
        }
        /* The broker threads slept while paused and are not woken by a resume: a flush call
         * wakes those that are up, so that what was held goes out now (it returns at once);
         * a broker not connected is asked for its connection by the resumed partition. */
        rd_kafka_flush(pub->rk, 0);
        pub->resumed_ms = tg_now_mono_ms();
    }
    if (pub->paused == 0 && n > 0) {
        pub->paused_ms = tg_now_mono_ms();
        pub->paused_base = pub->base;
        atomic_fetch_add(&pub->pauses, 1);
    }
    pub->paused = n;
    atomic_store(&pub->paused_shared, n > 0);
    if (pl != NULL)
        rd_kafka_topic_partition_list_destroy(pl);
    if (rl != NULL)
        rd_kafka_topic_partition_list_destroy(rl);
}

/* Notes that the records below expect were produced by now. Publisher thread. */
static void mark_produced(struct rt_publisher *pub, uint64_t now)
{
    struct pub_mark *last =
        pub->mark_n > 0 ? &pub->marks[(pub->mark_first + pub->mark_n - 1) % RT_PUBLISHER_MARKS]
                        : NULL;

    if (last != NULL && (last->expect == pub->expect || now - last->ms < RT_PUBLISHER_MARK_MS))
        return;
    if (pub->mark_n == RT_PUBLISHER_MARKS) {
        pub->mark_first = (pub->mark_first + 1) % RT_PUBLISHER_MARKS;
        pub->mark_n--;
    }
    pub->marks[(pub->mark_first + pub->mark_n) % RT_PUBLISHER_MARKS] =
        (struct pub_mark){.expect = pub->expect, .ms = now};
    pub->mark_n++;
}

/* How long the oldest record out has been out at least: it was produced before the first mark
 * that covers it. 0 when no mark does yet. Publisher thread. */
static uint64_t oldest_out_ms(const struct rt_publisher *pub, uint64_t now)
{
    for (uint32_t i = 0; i < pub->mark_n; i++) {
        const struct pub_mark *m = &pub->marks[(pub->mark_first + i) % RT_PUBLISHER_MARKS];

        if (m->expect > pub->base)
            return now - m->ms;
    }
    return 0;
}

/* Held acknowledgements (publisher.h, RT_PUBLISHER_PAUSE_AFTER_MS): while the oldest record
 * out waits, pause the partitions whose leader is connected; resume them when an
 * acknowledgement moves the oldest record, or after RT_PUBLISHER_PAUSE_MAX_MS, and resume at
 * once a partition whose leader is no longer connected. Publisher thread, after advance_base. */
static void hold_or_release(struct rt_publisher *pub)
{
    uint64_t now = tg_now_mono_ms();
    /* Statistics older than two intervals count as none: nothing is paused on them. */
    int fresh = pub->stats_ms > 0 && now - pub->stats_ms <= 2 * RT_PUBLISHER_STATS_MS;
    int held = fresh && pub->base < pub->expect &&
               now - pub->base_moved_ms >= RT_PUBLISHER_REPAUSE_AFTER_MS &&
               oldest_out_ms(pub, now) >= RT_PUBLISHER_PAUSE_AFTER_MS;

    if (pub->paused) {
        int progress = !fresh || pub->base != pub->paused_base || pub->base == pub->expect;

        if (progress || now - pub->paused_ms >= RT_PUBLISHER_PAUSE_MAX_MS) {
            /* What was held goes out at once (the broker threads are woken). After a resume
             * for time alone (a probe) the next pass comes RT_PUBLISHER_PROBE_MS later and
             * pauses again if the oldest record still waits, so a stall that lasts costs a
             * few ms of spinning every RT_PUBLISHER_PAUSE_MAX_MS; after an acknowledgement,
             * once the oldest record has not moved for RT_PUBLISHER_REPAUSE_AFTER_MS. */
            set_paused(pub, NULL, 0);
            pub->probing = !progress;
            if (pub->probing)
                pub->hold_probes++;
        } else {
            /* A paused partition never asks for a connection: one whose leader moved to a
             * broker not connected (or whose leader's connection broke) must go on, or its
             * records would wait for the probe, and with no connection forever. Nothing
             * spins for it: librdkafka only wakes up for partitions of connected brokers.
             * One whose leader got connected since is paused in turn (it had the statistics
             * interval to send what it held). */
            set_paused(pub, pub->leader_up, 1);
        }
        return;
    }
    if (held && now - pub->resumed_ms >= RT_PUBLISHER_PROBE_MS) {
        set_paused(pub, pub->leader_up, 1);
        if (pub->paused && pub->hold_start_ms == 0) {
            /* One line per hold, not per pause. */
            pub->hold_start_ms = now;
            pub->hold_probes = 0;
            TG_INFO("msg=\"events topic paused\" reason=held_acknowledgements oldest_out_ms=%" PRIu64
                    " in_flight=%" PRIu64 " partitions_paused=%d of=%d brokers_up=%d",
                    oldest_out_ms(pub, now), pub->expect - pub->base, pub->paused,
                    (int)pub->partitions, pub->brokers_up);
        }
    } else if (pub->hold_start_ms != 0 && now - pub->resumed_ms >= RT_PUBLISHER_PAUSE_MAX_MS) {
        TG_INFO("msg=\"events topic resumed\" held_ms=%" PRIu64 " probes=%u brokers_up=%d",
                pub->resumed_ms - pub->hold_start_ms, pub->hold_probes, pub->brokers_up);
        pub->hold_start_ms = 0;
    }
    if (pub->paused || now - pub->resumed_ms >= RT_PUBLISHER_PROBE_MS)
        pub->probing = 0;
}

/* A fatal error leaves the producer instance unusable: every produce call fails from then on.
 * librdkafka 2.0.2 raises one when the idempotent producer finds its sequence numbers out of
 * step with a partition's new leader (OUT_OF_ORDER_SEQUENCE_NUMBER on the oldest request in
 * flight), which a leader change under load can cause. The records are in the spool: the
 * instance is replaced by one made from the same configuration (a new producer id), and every
 * record not acknowledged is produced again; spend-svc drops the duplicates by call id. At
 * most once per RT_PUBLISHER_RENEW_MS. Publisher thread. */
static void renew_producer(struct rt_publisher *pub)
{
    uint64_t now = tg_now_mono_ms();
    rd_kafka_conf_t *conf;
    rd_kafka_topic_t *rkt;
    rd_kafka_t *rk;
    rd_kafka_resp_err_t ferr;
    char kerr[512];

    if (pub->renew_ms != 0 && now - pub->renew_ms < RT_PUBLISHER_RENEW_MS)
        return;
    pub->renew_ms = now;
    ferr = rd_kafka_fatal_error(pub->rk, NULL, 0);
    conf = rd_kafka_conf_dup(pub->conf);
    rk = conf != NULL ? rd_kafka_new(RD_KAFKA_PRODUCER, conf, kerr, sizeof(kerr)) : NULL;
    if (rk == NULL) {
        if (conf != NULL)
            rd_kafka_conf_destroy(conf);
        TG_ERROR_RL("event=kafka_producer_fatal reason=%s action=new_producer_failed",
                    rd_kafka_err2name(ferr));
        return;
    }
    rkt = rd_kafka_topic_new(rk, pub->topic, NULL);
    if (rkt == NULL) {
        rd_kafka_destroy(rk);
        TG_ERROR_RL("event=kafka_producer_fatal reason=%s action=new_producer_failed",
                    rd_kafka_err2name(ferr));
        return;
    }
    /* The old instance's records are purged and their reports served here; the slots are
     * reset after it is gone, so none of its reports can touch them later. */
    rd_kafka_topic_destroy(pub->rkt);
    rd_kafka_purge(pub->rk, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
    rd_kafka_poll(pub->rk, 0);
    rd_kafka_destroy(pub->rk);
    pub->rk = rk;
    pub->rkt = rkt;
    for (uint64_t s = pub->base; s < pub->expect; s++) {
        if (pub->state[s % RT_PUBLISHER_WINDOW] == SLOT_PRODUCED)
            pub->state[s % RT_PUBLISHER_WINDOW] = SLOT_EMPTY;
    }
    pub->rewind_to = pub->base;
    /* Pauses, leaders and connections were the old instance's. */
    memset(pub->paused_p, 0, sizeof(pub->paused_p));
    memset(pub->leader_up, 0, sizeof(pub->leader_up));
    pub->paused = 0;
    atomic_store(&pub->paused_shared, 0);
    pub->probing = 0;
    pub->hold_start_ms = 0;
    pub->stats_ms = 0;
    pub->brokers_up = 0;
    pub->partitions = 0;
    pub->last_ack_ms = now;
    atomic_store(&pub->fatal, 0);
    atomic_fetch_add(&pub->renewals, 1);
    TG_ERROR("event=kafka_producer_fatal reason=%s action=new_producer in_flight=%" PRIu64,
             rd_kafka_err2name(ferr), pub->expect - pub->base);
}

/* A backlog sent after an outage (every event spooled while Kafka was away) passes through
 * librdkafka's queue and produce requests, up to RT_PUBLISHER_QUEUE_KBYTES at a time, on its
 * broker threads, whose malloc arenas keep the freed memory: the process's RSS would stay a few
 * MB higher after each outage. Once such a burst (RT_PUBLISHER_TRIM_BURST records in flight or
 * more) is all acknowledged, the free memory goes back to the system, at most every
 * RT_PUBLISHER_TRIM_MS. Publisher thread. */
static void trim_after_burst(struct rt_publisher *pub)
{
    uint64_t out = pub->expect - pub->base, now;

    if (out > pub->burst_max)
        pub->burst_max = out;
    if (out > 0 || pub->burst_max < RT_PUBLISHER_TRIM_BURST)
        return;
    now = tg_now_mono_ms();
    if (pub->trim_ms != 0 && now - pub->trim_ms < RT_PUBLISHER_TRIM_MS)
        return;
    malloc_trim(0);
    pub->trim_ms = now;
    pub->burst_max = 0;
}

static void *publisher_main(void *arg)
{
    struct rt_publisher *pub = arg;
    unsigned char *buf = malloc(RT_SPOOL_RECORD_MAX_BYTES);

    pthread_setname_np(pthread_self(), "tg-publisher"); /* in top, perf and /proc/PID/task */
    if (buf == NULL) {
        TG_ERROR("event=publisher_thread_failed reason=out_of_memory");
        return NULL;
    }
    while (!atomic_load(&pub->stop)) {
        int n;

        if (atomic_load(&pub->fatal))
            renew_producer(pub);
        n = produce_some(pub, buf);

        mark_produced(pub, tg_now_mono_ms());

        rd_kafka_poll(pub->rk, n >= RT_PUBLISHER_PASS_MAX ? 0
                               : pub->probing       ? RT_PUBLISHER_PROBE_MS
                                                    : RT_PUBLISHER_TAIL_MS);
        atomic_store(&pub->outq, (uint64_t)rd_kafka_outq_len(pub->rk));
        advance_base(pub, 0);
        hold_or_release(pub);
        trim_after_burst(pub);
        if (pub->cfg.fsync_interval_ms > 0 &&
            tg_now_mono_ms() - pub->last_sync_ms >= pub->cfg.fsync_interval_ms) {
            rt_spool_sync(pub->spool);
            pub->last_sync_ms = tg_now_mono_ms();
        }
    }
    if (pub->paused)
        set_paused(pub, NULL, 0);
    /* Final delivery reports and checkpoint. */
    rd_kafka_flush(pub->rk, 0);
    rd_kafka_poll(pub->rk, 0);
    advance_base(pub, 1);
    free(buf);
    return NULL;
}

struct rt_publisher *rt_publisher_create(const struct rt_publisher_config *cfg, char *err,
                                         size_t errlen)
{
    struct rt_publisher *pub = calloc(1, sizeof(*pub));
    struct rt_spool_config scfg;
    struct rt_spool_recovery rec;
    rd_kafka_conf_t *conf = NULL;
    char kerr[512];
    char qmsgs[32], qkb[32], stats_ms[16];

    if (pub == NULL) {
        snprintf(err, errlen, "publisher: out of memory");
        return NULL;
    }
    pthread_mutex_init(&pub->reasons_mu, NULL);
    tg_kafka_lasterr_init(&pub->last_error);
    snprintf(pub->brokers, sizeof(pub->brokers), "%s", cfg->brokers ? cfg->brokers : "");
    snprintf(pub->topic, sizeof(pub->topic), "%s", cfg->topic ? cfg->topic : "");
    snprintf(pub->spool_dir, sizeof(pub->spool_dir), "%s", cfg->spool_dir ? cfg->spool_dir : "");
    pub->cfg = *cfg;
    pub->cfg.brokers = pub->brokers;
    pub->cfg.topic = pub->topic;
    pub->cfg.spool_dir = pub->spool_dir;
    pub->rewind_to = UINT64_MAX;
    if (pub->brokers[0] == '\0' || pub->topic[0] == '\0') {
        snprintf(err, errlen, "publisher: kafka brokers and events topic must be set");
        goto fail;
    }
    pub->state = calloc(RT_PUBLISHER_WINDOW, sizeof(pub->state[0]));
    pub->ts = calloc(RT_PUBLISHER_WINDOW, sizeof(pub->ts[0]));
    if (pub->state == NULL || pub->ts == NULL) {
        snprintf(err, errlen, "publisher: out of memory");
        goto fail;
    }
    scfg.dir = pub->spool_dir;
    scfg.max_bytes = cfg->spool_max_bytes;
    scfg.segment_bytes = cfg->spool_segment_bytes;
    if (scfg.segment_bytes == 0) {
        scfg.segment_bytes = RT_SPOOL_SEGMENT_BYTES_DEFAULT;
        if (scfg.segment_bytes > scfg.max_bytes / 8)
            scfg.segment_bytes = scfg.max_bytes / 8 > 0 ? scfg.max_bytes / 8 : scfg.max_bytes;
    }
    scfg.fsync_interval_ms = cfg->fsync_interval_ms;
    pub->spool = rt_spool_open(&scfg, &rec, err, errlen);
    if (pub->spool == NULL)
        goto fail;
    pub->base = rec.acked_below;
    pub->expect = rec.acked_below;
    pub->replay_below = rec.next_seq;
    atomic_store(&pub->base_shared, pub->base);
    if (rec.pending > 0 || rec.corrupt > 0)
        TG_INFO("event=spool_replay pending=%" PRIu64 " corrupt_skipped=%" PRIu64
                " segments=%u", rec.pending, rec.corrupt, rec.segments);

    conf = rd_kafka_conf_new();
    snprintf(qmsgs, sizeof(qmsgs), "%u", RT_PUBLISHER_WINDOW);
    snprintf(qkb, sizeof(qkb), "%d", RT_PUBLISHER_QUEUE_KBYTES);
    snprintf(stats_ms, sizeof(stats_ms), "%u", RT_PUBLISHER_STATS_MS);
    if (conf_set(conf, "bootstrap.servers", pub->brokers, kerr, sizeof(kerr)) != 0 ||
        conf_set(conf, "enable.idempotence", "true", kerr, sizeof(kerr)) != 0 ||
        conf_set(conf, "acks", "all", kerr, sizeof(kerr)) != 0 ||
        conf_set(conf, "queue.buffering.max.messages", qmsgs, kerr, sizeof(kerr)) != 0 ||
        conf_set(conf, "queue.buffering.max.kbytes", qkb, kerr, sizeof(kerr)) != 0 ||
        /* batches of many events per request to the broker: the events wait in the spool, so
         * lingering costs no durability (a librdkafka property given in the config wins) */
        conf_set(conf, "linger.ms", "50", kerr, sizeof(kerr)) != 0 ||
        conf_set(conf, "statistics.interval.ms", stats_ms, kerr, sizeof(kerr)) != 0 ||
        /* Never give up on a record: it stays in the queue (bounded above) or in the spool. */
        conf_set(conf, "message.timeout.ms", "0", kerr, sizeof(kerr)) != 0 ||
        conf_set(conf, "socket.keepalive.enable", "true", kerr, sizeof(kerr)) != 0 ||
        (cfg->kafka_opts != NULL &&
         tg_kafka_opts_apply(cfg->kafka_opts, conf, kerr, sizeof(kerr)) != 0)) {
        snprintf(err, errlen, "publisher: kafka config: %s", kerr);
        goto fail;
    }
    rd_kafka_conf_set_opaque(conf, pub);
    rd_kafka_conf_set_dr_msg_cb(conf, on_delivery);
    rd_kafka_conf_set_error_cb(conf, on_error);
    rd_kafka_conf_set_log_cb(conf, on_log);
    rd_kafka_conf_set_stats_cb(conf, on_stats);
    pub->conf = conf; /* kept for a new instance after a fatal error */
    conf = rd_kafka_conf_dup(pub->conf);
    pub->rk = conf != NULL ? rd_kafka_new(RD_KAFKA_PRODUCER, conf, kerr, sizeof(kerr)) : NULL;
    if (pub->rk == NULL) {
        snprintf(err, errlen, "publisher: cannot create producer: %s",
                 conf != NULL ? kerr : "out of memory");
        goto fail; /* conf is still ours */
    }
    conf = NULL;
    pub->rkt = rd_kafka_topic_new(pub->rk, pub->topic, NULL);
    if (pub->rkt == NULL) {
        snprintf(err, errlen, "publisher: topic %s: %s", pub->topic,
                 rd_kafka_err2str(rd_kafka_last_error()));
        goto fail;
    }
    atomic_store(&pub->kafka_up, 1);
    pub->last_ack_ms = tg_now_mono_ms();
    pub->base_moved_ms = pub->last_ack_ms;
    if (pthread_create(&pub->thread, NULL, publisher_main, pub) != 0) {
        snprintf(err, errlen, "publisher: cannot start thread");
        goto fail;
    }
    pub->thread_started = 1;
    return pub;
fail:
    if (conf != NULL)
        rd_kafka_conf_destroy(conf);
    rt_publisher_destroy(&pub);
    return NULL;
}

int rt_publisher_admit(struct rt_publisher *pub)
{
    if (!pub->cfg.reject_when_full)
        return 0;
    if (rt_spool_has_room(pub->spool, PUB_PAYLOAD_MAX))
        return 0;
    atomic_fetch_add(&pub->rejected, 1);
    return TG_EFULL;
}

int rt_publisher_submit(struct rt_publisher *pub, const struct proto_event *ev)
{
    unsigned char buf[PUB_PAYLOAD_MAX + 1];
    size_t keylen = strnlen(ev->key_hash, PUB_KEY_MAX);
    size_t len = 0;
    int rc;

    buf[0] = (unsigned char)keylen;
    memcpy(buf + 1, ev->key_hash, keylen);
    rc = proto_event_encode(ev, (char *)buf + 1 + keylen, sizeof(buf) - 1 - keylen, &len);
    if (rc != 0) {
        atomic_fetch_add(&pub->submit_errors, 1);
        return rc;
    }
    rc = rt_spool_append(pub->spool, buf, 1 + keylen + len, tg_now_epoch_ms(), NULL);
    if (rc == TG_EFULL) {
        atomic_fetch_add(&pub->dropped, 1);
        TG_ERROR_RL("event=spend_event_dropped reason=spool_full policy=%s",
                    pub->cfg.reject_when_full ? "reject" : "drop");
    } else if (rc != 0) {
        atomic_fetch_add(&pub->submit_errors, 1);
        atomic_fetch_add(&pub->dropped, 1);
        TG_ERROR_RL("event=spend_event_dropped reason=%s", tg_errname(rc));
    }
    return rc;
}

int rt_publisher_drain(struct rt_publisher *pub, uint32_t timeout_ms)
{
    uint64_t deadline = tg_now_mono_ms() + timeout_ms;
    struct rt_spool_stats st;

    for (;;) {
        rt_spool_get_stats(pub->spool, &st);
        if (atomic_load(&pub->base_shared) >= st.next_seq)
            return 0;
        if (tg_now_mono_ms() >= deadline)
            return TG_ETIMEOUT;
        tg_sleep_ms(10);
    }
}

void rt_publisher_destroy(struct rt_publisher **pp)
{
    struct rt_publisher *pub;

    if (pp == NULL || *pp == NULL)
        return;
    pub = *pp;
    *pp = NULL;
    if (pub->thread_started) {
        atomic_store(&pub->stop, 1);
        pthread_join(pub->thread, NULL);
    }
    if (pub->rkt != NULL)
        rd_kafka_topic_destroy(pub->rkt);
    if (pub->rk != NULL) {
        /* What is still queued is in the spool: do not wait for it. */
        rd_kafka_purge(pub->rk, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
        rd_kafka_poll(pub->rk, 0);
        rd_kafka_destroy(pub->rk);
    }
    if (pub->conf != NULL)
        rd_kafka_conf_destroy(pub->conf);
    rt_spool_close(&pub->spool);
    free(pub->state);
    free(pub->ts);
    pthread_mutex_destroy(&pub->reasons_mu);
    tg_kafka_lasterr_fini(&pub->last_error);
    free(pub);
}

int rt_publisher_kafka_up(struct rt_publisher *pub)
{
    return atomic_load(&pub->kafka_up);
}

const char *rt_publisher_kafka_reason(struct rt_publisher *pub, char *buf, size_t cap)
{
    return tg_kafka_lasterr_get(&pub->last_error, atomic_load(&pub->kafka_up), buf, cap);
}

void rt_publisher_write_metrics(struct rt_publisher *pub, struct tg_buf *b)
{
    struct rt_spool_stats st;
    uint64_t oldest = atomic_load(&pub->oldest_ts);
    uint64_t now = tg_now_epoch_ms();
    double age = oldest > 0 && now > oldest ? (double)(now - oldest) / 1000.0 : 0.0;

    rt_spool_get_stats(pub->spool, &st);
    tg_prom_counter(b, "tollgate_router_events_appended_total",
                    "Spend events appended to the spool", st.appended);
    tg_prom_counter(b, "tollgate_router_events_acked_total",
                    "Spend events acknowledged by Kafka", atomic_load(&pub->acked));
    tg_prom_counter(b, "tollgate_router_events_replayed_total",
                    "Spend events produced again from the spool after a restart",
                    atomic_load(&pub->replayed));
    tg_prom_counter(b, "tollgate_router_events_dropped_total",
                    "Spend events lost because the spool was full or unwritable",
                    atomic_load(&pub->dropped));
    tg_prom_counter(b, "tollgate_router_spool_rejected_total",
                    "Requests refused with 503 because the spool was full (policy reject)",
                    atomic_load(&pub->rejected));
    tg_prom_counter(b, "tollgate_router_spool_corrupt_records_total",
                    "Torn or corrupt spool records skipped", st.corrupt);
    tg_prom_gauge(b, "tollgate_router_spool_bytes", "Bytes in live spool segments",
                  (double)st.bytes);
    tg_prom_gauge(b, "tollgate_router_spool_segments", "Live spool segments", st.segments);
    tg_prom_gauge(b, "tollgate_router_spool_oldest_unacked_seconds",
                  "Age of the oldest spooled event not yet acknowledged by Kafka", age);
    tg_prom_gauge(b, "tollgate_router_producer_queue_depth",
                  "Messages in the Kafka producer queue", (double)atomic_load(&pub->outq));
    tg_prom_counter(b, "tollgate_router_producer_renewals_total",
                    "Kafka producer instances replaced after a fatal error (the records not "
                    "acknowledged are produced again from the spool)",
                    atomic_load(&pub->renewals));
    tg_prom_counter(b, "tollgate_router_producer_queue_full_total",
                    "Produce calls refused because the producer queue was full",
                    atomic_load(&pub->queue_full));
    tg_prom_counter(b, "tollgate_router_producer_pauses_total",
                    "Times the events topic was paused while Kafka held acknowledgements back "
                    "(a ready batch would make librdkafka spin)",
                    atomic_load(&pub->pauses));
    tg_prom_gauge(b, "tollgate_router_producer_paused",
                  "1 while the events topic is paused for held acknowledgements",
                  atomic_load(&pub->paused_shared));
    tg_prom_gauge(b, "tollgate_router_kafka_up", "1 when Kafka answered last",
                  atomic_load(&pub->kafka_up));
    tg_prom_header(b, "tollgate_router_delivery_errors_total", "counter",
                   "Kafka delivery errors by reason (the events are retried from the spool)");
    pthread_mutex_lock(&pub->reasons_mu);
    for (uint32_t i = 0; i < pub->nreasons && i < RT_PUBLISHER_REASONS_MAX; i++) {
        struct tg_label l = {"reason", pub->reasons[i].name};
        tg_prom_sample_u64(b, "tollgate_router_delivery_errors_total", &l, 1,
                           atomic_load(&pub->reasons[i].count));
    }
    pthread_mutex_unlock(&pub->reasons_mu);
}


