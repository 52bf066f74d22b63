#include "publisher.h"

#include <inttypes.h>
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

/* An event read from the spool in this pass, waiting to share a Kafka record with the other
 * events of its key hash (events_per_record > 1): its key and value are in the stage's bytes. */
struct pub_staged {
    uint64_t seq;       /* spool sequence number */
    uint32_t off;       /* key bytes at stage + off, then the value */
    uint32_t len;       /* value bytes */
    uint32_t keylen;
    int32_t next;       /* the next staged event of the same key, or -1 */
};

/* The staged events of one key: a chain in read order. */
struct pub_chain {
    int32_t first, last;
};

/* What the delivery report of a record of several events settles: its events. Linked in the
 * publisher's list of such records in flight, so that destroy frees those no report came for;
 * owned by the list, freed by the report. The list holds at most the records librdkafka's queue
 * does (queue.buffering.max.messages / .kbytes: the producer refuses more, counted in
 * tollgate_router_producer_queue_full_total, and the events wait in the spool).
 * A one-event record's report carries its sequence number instead (opaque = seq << 1 | 1). */
struct pub_desc {
    struct pub_desc *prev, *next;
    uint32_t n;
    uint64_t seq[];
};

struct rt_publisher {
    struct rt_publisher_config cfg;
    char brokers[1024];
    char topic[256];
    char spool_dir[1024];
    struct rt_spool *spool;
    rd_kafka_t *rk;
    rd_kafka_topic_t *rkt;
    uint32_t per_record;     /* events a Kafka record may hold (1: one, as v1 writers) */
    /* per_record > 1: the events read and not yet produced, grouped by key when sent */
    unsigned char *stage;    /* RT_PUBLISHER_STAGE_BYTES */
    uint32_t stage_used;
    uint32_t nstaged;
    struct pub_staged *staged;  /* [RT_PUBLISHER_STAGE_EVENTS] */
    struct pub_chain *chains;   /* [RT_PUBLISHER_STAGE_EVENTS] */
    int32_t *slots;             /* [2 * RT_PUBLISHER_STAGE_EVENTS]: chain of a key hash, or -1 */
    uint64_t recseq[PROTO_RECORD_EVENTS_MAX];
    struct pub_desc inflight;   /* list head: records of several events in flight */
    struct rt_trim trim;     /* when free memory goes back to the system */
    _Atomic uint64_t trims;  /* malloc_trim calls */
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
    /* Counters. */
    _Atomic uint64_t acked;
    _Atomic uint64_t replayed;
    _Atomic uint64_t dropped;
    _Atomic uint64_t rejected;
    _Atomic uint64_t submit_errors;
    _Atomic uint64_t produced;
    _Atomic uint64_t records;       /* Kafka records produced (one event or several each) */
    _Atomic uint64_t queue_full;
    _Atomic uint64_t outq;          /* rd_kafka_outq_len() after the last pass */
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

/* settle: one event's delivery report (err): acknowledged, or produced again from the spool.
 * Publisher thread. */
static void settle(struct rt_publisher *pub, uint64_t seq, rd_kafka_resp_err_t err)
{
    uint8_t *st;

    if (seq < pub->base || seq - pub->base >= RT_PUBLISHER_WINDOW)
        return; /* acknowledged already (a duplicate from a rewind) */
    st = &pub->state[seq % RT_PUBLISHER_WINDOW];
    if (err == RD_KAFKA_RESP_ERR_NO_ERROR) {
        if (*st != SLOT_ACKED) {
            *st = SLOT_ACKED;
            atomic_fetch_add(&pub->acked, 1);
        }
        return;
    }
    if (*st == SLOT_PRODUCED) {
        *st = SLOT_EMPTY;
        if (seq < pub->rewind_to)
            pub->rewind_to = seq;
    }
}

/* Delivery report of a record (one event or several): runs on the publisher thread inside
 * rd_kafka_poll(), and in destroy for what was purged. */
static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    struct rt_publisher *pub = opaque;
    uintptr_t o = (uintptr_t)m->_private;
    struct pub_desc *d;

    (void)rk;
    if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR) {
        pub->last_ack_ms = tg_now_mono_ms();
        atomic_store(&pub->kafka_up, 1);
    } else if (m->err != RD_KAFKA_RESP_ERR__PURGE_QUEUE &&
               m->err != RD_KAFKA_RESP_ERR__PURGE_INFLIGHT) {
        /* A purge at shutdown is not a delivery error: the record stays in the spool. */
        count_reason(pub, rd_kafka_err2name(m->err));
        TG_WARN_RL("event=kafka_delivery_failed reason=%s action=retry_from_spool",
                   rd_kafka_err2name(m->err));
    }
    if (o & 1u) {
        settle(pub, (uint64_t)(o >> 1), m->err);
        return;
    }
    d = (struct pub_desc *)o;
    if (d == NULL)
        return;
    for (uint32_t i = 0; i < d->n; i++)
        settle(pub, d->seq[i], m->err);
    d->prev->next = d->next;
    d->next->prev = d->prev;
    free(d);
}

/* An event's partition: its key is the SHA-256 of the virtual key in lowercase hex, so its first
 * 8 digits are already a uniform hash: the same key always goes to the same partition, as with
 * librdkafka's consistent_random, without computing a CRC-32 over 64 bytes for every event.
 * Events without a key (unauthenticated requests) go to a random partition; a key that is not
 * hex (never written by router-svc) is hashed by librdkafka's consistent_random. Called by
 * librdkafka from the producing thread. */
static int32_t partition_of_key(const rd_kafka_topic_t *rkt, const void *key, size_t keylen,
                                int32_t partition_cnt, void *rkt_opaque, void *msg_opaque)
{
    const unsigned char *k = key;
    uint32_t h = 0;

    if (keylen == 0)
        return rd_kafka_msg_partitioner_random(rkt, key, keylen, partition_cnt, rkt_opaque,
                                               msg_opaque);
    if (keylen < 8)
        return rd_kafka_msg_partitioner_consistent_random(rkt, key, keylen, partition_cnt,
                                                          rkt_opaque, msg_opaque);
    for (size_t i = 0; i < 8; i++) {
        unsigned c = k[i];

        if (c >= '0' && c <= '9')
            c -= '0';
        else if (c >= 'a' && c <= 'f')
            c -= 'a' - 10;
        else
            return rd_kafka_msg_partitioner_consistent_random(rkt, key, keylen, partition_cnt,
                                                              rkt_opaque, msg_opaque);
        h = h << 4 | c;
    }
    return (int32_t)(h % (uint32_t)partition_cnt);
}

/* 1 when the user's librdkafka properties choose a partitioner (then theirs is used). */
static int user_sets_partitioner(const struct tg_kafka_opts *o)
{
    for (uint32_t i = 0; o != NULL && i < o->n; i++) {
        if (strcmp(o->opt[i].name, "partitioner") == 0)
            return 1;
    }
    return 0;
}

static void on_error(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
    struct rt_publisher *pub = opaque;

    char esc[TG_KAFKA_LASTERR_CAP];

    (void)rk;
    if (tg_kafka_lasterr_note(&pub->last_error, err, reason, esc, sizeof(esc)))
        atomic_store(&pub->kafka_up, 0);
    TG_WARN_RL("event=kafka_error code=%s reason=\"%s\"",
               rd_kafka_err2name((rd_kafka_resp_err_t)err), esc);
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

/* mark_produced: the event seq is in librdkafka's hands. Publisher thread. */
static void mark_produced(struct rt_publisher *pub, uint64_t seq)
{
    pub->state[seq % RT_PUBLISHER_WINDOW] = SLOT_PRODUCED;
    if (seq < pub->replay_below)
        atomic_fetch_add(&pub->replayed, 1);
    atomic_fetch_add(&pub->produced, 1);
}

/* produce_err: the producer refused a record (queue full, or worse): counted. */
static void produce_err(struct rt_publisher *pub, rd_kafka_resp_err_t err)
{
    if (err == RD_KAFKA_RESP_ERR__QUEUE_FULL)
        atomic_fetch_add(&pub->queue_full, 1);
    else
        count_reason(pub, rd_kafka_err2name(err));
}

/* record_send: produce the record val (len bytes) of n events (recseq) under key. One event
 * goes as a record of its own (as with events_per_record 1). owned: val was malloc'd for this
 * record and is handed to librdkafka, which frees it once the record is settled (no copy); else
 * librdkafka copies it. Returns 0, or -1 when the producer refused it (an owned val is freed):
 * its events are read again from the spool (rewind_to) on the next pass. Publisher thread. */
static int record_send(struct rt_publisher *pub, const unsigned char *key, uint32_t keylen,
                       void *val, size_t len, uint32_t n, int owned)
{
    struct pub_desc *d = NULL;
    const void *keyp = keylen > 0 ? key : NULL;
    void *opaque;
    rd_kafka_resp_err_t err;

    if (n == 1) {
        opaque = (void *)(uintptr_t)(pub->recseq[0] << 1 | 1u);
    } else {
        d = malloc(sizeof(*d) + n * sizeof(d->seq[0]));
        if (d == NULL) {
            count_reason(pub, "out_of_memory");
            goto refused;
        }
        d->n = n;
        memcpy(d->seq, pub->recseq, n * sizeof(d->seq[0]));
        opaque = d;
    }
    err = rd_kafka_producev(pub->rk, RD_KAFKA_V_RKT(pub->rkt), RD_KAFKA_V_KEY(keyp, keylen),
                            RD_KAFKA_V_VALUE(val, len),
                            RD_KAFKA_V_MSGFLAGS(owned ? RD_KAFKA_MSG_F_FREE : RD_KAFKA_MSG_F_COPY),
                            RD_KAFKA_V_OPAQUE(opaque), RD_KAFKA_V_END);
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
        free(d);
        produce_err(pub, err);
        goto refused;
    }
    atomic_fetch_add(&pub->records, 1);
    if (d != NULL) {
        d->next = pub->inflight.next;
        d->prev = &pub->inflight;
        d->next->prev = d;
        pub->inflight.next = d;
    }
    for (uint32_t i = 0; i < n; i++)
        mark_produced(pub, pub->recseq[i]);
    return 0;
refused:
    if (owned)
        free(val); /* a refused record stays the caller's (librdkafka frees only what it took) */
    /* the record's first event is its lowest: all of them are still SLOT_EMPTY */
    if (pub->recseq[0] < pub->rewind_to)
        pub->rewind_to = pub->recseq[0];
    return -1;
}

/* key_slot: the slot of a key hash in pub->slots (open addressing). The key is the SHA-256 of
 * the virtual key in hex, whose first bytes are already uniform. */
static uint32_t key_slot(const unsigned char *key, uint32_t keylen)
{
    uint64_t h = 0;

    memcpy(&h, key, keylen < 8 ? keylen : 8);
    h = (h ^ keylen) * 0x9E3779B97F4A7C15ull;
    return (uint32_t)(h >> 40) & (2 * RT_PUBLISHER_STAGE_EVENTS - 1);
}

/* stage_flush: the staged events go out, the events of one key joined in records of up to
 * per_record events and PROTO_RECORD_MAX_BYTES, in read order. A refused record leaves its
 * events to the next pass (rewind_to). Publisher thread. */
static void stage_flush(struct rt_publisher *pub)
{
    uint32_t nchains = 0;

    if (pub->nstaged == 0)
        return;
    for (uint32_t i = 0; i < 2 * RT_PUBLISHER_STAGE_EVENTS; i++)
        pub->slots[i] = -1;
    for (uint32_t i = 0; i < pub->nstaged; i++) {
        struct pub_staged *e = &pub->staged[i];
        const unsigned char *key = pub->stage + e->off;
        uint32_t at = key_slot(key, e->keylen);

        for (;;) {
            int32_t c = pub->slots[at];
            const struct pub_staged *f;

            if (c < 0) {
                pub->slots[at] = (int32_t)nchains;
                pub->chains[nchains].first = pub->chains[nchains].last = (int32_t)i;
                nchains++;
                break;
            }
            f = &pub->staged[pub->chains[c].first];
            if (f->keylen == e->keylen && memcmp(pub->stage + f->off, key, e->keylen) == 0) {
                pub->staged[pub->chains[c].last].next = (int32_t)i;
                pub->chains[c].last = (int32_t)i;
                break;
            }
            at = (at + 1) & (2 * RT_PUBLISHER_STAGE_EVENTS - 1);
        }
        e->next = -1;
    }
    for (uint32_t c = 0; c < nchains; c++) {
        const struct pub_staged *f = &pub->staged[pub->chains[c].first];
        const unsigned char *key = pub->stage + f->off;
        int32_t i = pub->chains[c].first;

        while (i >= 0) {
            int32_t j = i;
            size_t len = 0;
            uint32_t n = 0;
            char *val;

            /* the record's events: up to per_record of them and PROTO_RECORD_MAX_BYTES */
            for (; j >= 0; j = pub->staged[j].next) {
                size_t add = (n > 0) + pub->staged[j].len;

                if (n > 0 && (n == pub->per_record || len + add > PROTO_RECORD_MAX_BYTES))
                    break;
                len += add;
                pub->recseq[n++] = pub->staged[j].seq;
            }
            val = malloc(len > 0 ? len : 1); /* librdkafka's from here: freed once settled */
            if (val == NULL) {
                count_reason(pub, "out_of_memory");
                if (pub->recseq[0] < pub->rewind_to)
                    pub->rewind_to = pub->recseq[0]; /* read again from the spool */
                i = j;
                continue;
            }
            len = 0;
            for (; i != j; i = pub->staged[i].next) {
                const struct pub_staged *e = &pub->staged[i];

                if (len > 0)
                    val[len++] = '\n';
                memcpy(val + len, pub->stage + e->off + e->keylen, e->len);
                len += e->len;
            }
            record_send(pub, key, f->keylen, val, len, n, 1);
        }
    }
    pub->nstaged = 0;
    pub->stage_used = 0;
}

_Static_assert(RT_PUBLISHER_STAGE_BYTES >= 2 * RT_SPOOL_RECORD_MAX_BYTES,
               "the stage holds more than the room one read needs");

/* stage_room: room in the stage for the next record read into it (at stage + stage_used, up to
 * RT_SPOOL_RECORD_MAX_BYTES), the staged events sent first when there is none. Publisher thread. */
static unsigned char *stage_room(struct rt_publisher *pub)
{
    if (pub->nstaged == RT_PUBLISHER_STAGE_EVENTS ||
        RT_PUBLISHER_STAGE_BYTES - pub->stage_used < RT_SPOOL_RECORD_MAX_BYTES)
        stage_flush(pub);
    return pub->stage + pub->stage_used;
}

/* stage_take: the record just read into stage_room() (len bytes: key length, key, value) is the
 * event seq's: staged, without a copy. Publisher thread. */
static void stage_take(struct rt_publisher *pub, uint32_t keylen, size_t len, uint64_t seq)
{
    struct pub_staged *e = &pub->staged[pub->nstaged++];

    e->seq = seq;
    e->off = pub->stage_used + 1;
    e->keylen = keylen;
    e->len = (uint32_t)(len - 1 - keylen);
    pub->stage_used += (uint32_t)len;
}

/* Reads spooled records and produces them until the window or the queue is full. Returns the
 * number of events read for producing. Publisher thread. */
static int produce_some(struct rt_publisher *pub, unsigned char *buf)
{
    struct rt_spool_record rec;
    uint64_t window;
    int n = 0;

    if (pub->rewind_to != UINT64_MAX) {
        /* Read again from the first event that failed or was refused, or from the lowest one
         * not acknowledged when that one was delivered since by a copy produced after an
         * earlier rewind. Of what is read again, only what is neither acknowledged nor in
         * flight is produced: an event in flight is settled by its own report (a failure
         * rewinds again). A refused record of several events is followed, in the same pass,
         * by records of other keys holding later events: those are not produced twice. */
        uint64_t from = pub->rewind_to > pub->base ? pub->rewind_to : pub->base;

        if (from > pub->expect)
            from = pub->expect;
        rt_spool_rewind(pub->spool, from);
        pub->expect = from;
        pub->rewind_to = UINT64_MAX;
    }
    /* Nothing acknowledged for a while although records are out: Kafka is down or stuck. */
    if (pub->expect > pub->base && tg_now_mono_ms() - pub->last_ack_ms > RT_PUBLISHER_STALL_MS)
        window = RT_PUBLISHER_STALLED_WINDOW;
    else
        window = RT_PUBLISHER_WINDOW;
    while (n < RT_PUBLISHER_PASS_MAX && pub->expect - pub->base < window) {
        /* Shared records: read straight into the stage (what is not taken is overwritten). */
        unsigned char *rbuf = pub->per_record > 1 ? stage_room(pub) : buf;
        int rc = rt_spool_read_next(pub->spool, &rec, rbuf, RT_SPOOL_RECORD_MAX_BYTES);
        uint32_t keylen;
        void *valp;
        size_t vallen;

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
        if (pub->state[rec.seq % RT_PUBLISHER_WINDOW] != SLOT_EMPTY) {
            pub->expect = rec.seq + 1; /* delivered or in flight: not produced again */
            continue;
        }
        keylen = rec.len > 0 ? rbuf[0] : 0;
        if (rec.len < 1 || keylen > PUB_KEY_MAX || 1 + keylen > rec.len) {
            count_reason(pub, "corrupt_record");
            pub->state[rec.seq % RT_PUBLISHER_WINDOW] = SLOT_ACKED;
            pub->expect = rec.seq + 1;
            continue;
        }
        valp = rbuf + 1 + keylen;
        vallen = rec.len - 1 - keylen;
        pub->ts[rec.seq % RT_PUBLISHER_WINDOW] = rec.ts_ms;
        if (pub->per_record > 1) {
            stage_take(pub, keylen, rec.len, rec.seq);
            pub->expect = rec.seq + 1;
            n++;
            continue;
        }
        pub->recseq[0] = rec.seq;
        if (record_send(pub, buf + 1, keylen, valp, vallen, 1, 0) < 0) {
            rt_spool_rewind(pub->spool, rec.seq);
            pub->expect = rec.seq;
            break;
        }
        pub->expect = rec.seq + 1;
        n++;
    }
    /* What the pass read goes out now: the wait for more is librdkafka's linger. */
    stage_flush(pub);
    return n;
}

int rt_trim_due(struct rt_trim *t, uint64_t out, uint64_t now_ms, uint64_t (*rss)(void))
{
    uint64_t r;

    if (out > t->burst_max)
        t->burst_max = out;
    /* Over once what is in flight is back under 1/RT_PUBLISHER_TRIM_DRAINED of the peak: under
     * steady load a few records always wait for their batch (linger.ms), so an empty window
     * may never be seen (chaos c10 at 80 requests/s: the trim never ran, 2.7 MB stayed in an
     * arena). */
    if (t->burst_max < RT_PUBLISHER_TRIM_BURST || out > t->burst_max / RT_PUBLISHER_TRIM_DRAINED)
        return 0;
    if (t->last_ms != 0 && now_ms - t->last_ms < RT_PUBLISHER_TRIM_MS)
        return 0;
    t->last_ms = now_ms;
    t->burst_max = 0;
    /* Under steady load the window fills and drains as often: a trim then gave back pages the
     * next batches faulted in again at once (router_bench: a trim a second, ~900 madvise calls
     * in 40 s). Only a process grown since the last trim trims. */
    r = rss();
    return r == 0 || t->rss == 0 || r >= t->rss + RT_PUBLISHER_TRIM_GROWTH_BYTES;
}

/* The process's resident bytes (/proc/self/statm), 0 when unreadable. */
static uint64_t resident_bytes(void)
{
    unsigned long long size = 0, resident = 0;
    FILE *f = fopen("/proc/self/statm", "re");
    long page = sysconf(_SC_PAGESIZE);

    if (f == NULL)
        return 0;
    if (fscanf(f, "%llu %llu", &size, &resident) != 2)
        resident = 0;
    fclose(f);
    return page > 0 ? (uint64_t)resident * (uint64_t)page : 0;
}

/* A backlog sent after an outage (every event spooled while Kafka was away) passes through
 * librdkafka's queue and produce requests, up to RT_PUBLISHER_QUEUE_KBYTES at a time, on its
 * broker threads, whose malloc arenas keep the freed memory: the process's RSS would stay a few
 * MB higher after each outage. Once such a burst is acknowledged (rt_trim_due), the free memory
 * goes back to the system. Publisher thread. */
static void trim_after_burst(struct rt_publisher *pub)
{
    if (!rt_trim_due(&pub->trim, pub->expect - pub->base, tg_now_mono_ms(), resident_bytes))
        return;
    malloc_trim(0);
    atomic_fetch_add(&pub->trims, 1);
    pub->trim.rss = resident_bytes();
}

uint32_t rt_publisher_tail_ms(uint64_t events, uint64_t elapsed_ms)
{
    uint64_t want;

    events = events > UINT32_MAX ? UINT32_MAX : events; /* no product below overflows */
    elapsed_ms = elapsed_ms > UINT32_MAX ? UINT32_MAX : elapsed_ms;
    if (events == 0 || RT_PUBLISHER_PASS_EVENTS * elapsed_ms >= RT_PUBLISHER_QUIET_MS * events)
        return RT_PUBLISHER_QUIET_MS;
    want = RT_PUBLISHER_PASS_EVENTS * elapsed_ms / events;
    return want < RT_PUBLISHER_TAIL_MS ? RT_PUBLISHER_TAIL_MS : (uint32_t)want;
}

static void *publisher_main(void *arg)
{
    struct rt_publisher *pub = arg;
    unsigned char *buf = malloc(RT_SPOOL_RECORD_MAX_BYTES);
    uint64_t pass_ms = tg_now_mono_ms(); /* when the last pass began */

    pthread_setname_np(pthread_self(), "tg-publisher"); /* in top, perf and /proc/PID/task */
    if (buf == NULL) {
        TG_ERROR("event=publisher_thread_failed reason=out_of_memory");
        return NULL;
    }
    while (!atomic_load(&pub->stop)) {
        uint64_t began = tg_now_mono_ms();
        int n;

        n = produce_some(pub, buf);
        if (n < RT_PUBLISHER_PASS_MAX)
            tg_sleep_ms(rt_publisher_tail_ms((uint64_t)n, began - pass_ms));
        pass_ms = began;
        rd_kafka_poll(pub->rk, 0);
        atomic_store(&pub->outq, (uint64_t)rd_kafka_outq_len(pub->rk));
        advance_base(pub, 0);
        trim_after_burst(pub);
        if (pub->cfg.fsync_interval_ms > 0 &&
            tg_now_mono_ms() - pub->last_sync_ms >= pub->cfg.fsync_interval_ms) {
            rt_spool_sync(pub->spool);
            pub->last_sync_ms = tg_now_mono_ms();
        }
    }
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
    char qmsgs[32], qkb[32], kbatch[32];

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
    pub->inflight.next = pub->inflight.prev = &pub->inflight;
    pub->per_record = cfg->events_per_record > PROTO_RECORD_EVENTS_MAX ? PROTO_RECORD_EVENTS_MAX
                      : cfg->events_per_record > 0                    ? cfg->events_per_record
                                                                      : 1;
    if (pub->per_record > 1) {
        pub->stage = malloc(RT_PUBLISHER_STAGE_BYTES);
        pub->staged = malloc(RT_PUBLISHER_STAGE_EVENTS * sizeof(pub->staged[0]));
        pub->chains = malloc(RT_PUBLISHER_STAGE_EVENTS * sizeof(pub->chains[0]));
        pub->slots = malloc(2 * RT_PUBLISHER_STAGE_EVENTS * sizeof(pub->slots[0]));
        if (pub->stage == NULL || pub->staged == NULL || pub->chains == NULL ||
            pub->slots == NULL) {
            snprintf(err, errlen, "publisher: out of memory");
            goto fail;
        }
    }
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
    snprintf(kbatch, sizeof(kbatch), "%d", RT_PUBLISHER_KAFKA_BATCH_BYTES);
    /* Not idempotent. librdkafka 2.0.2's idempotent producer lets a partition send only while
     * fewer than 5 of its *records* (not requests) are unacknowledged, and while a batch is
     * ready behind that cap its broker thread polls with a zero timeout: a core burnt whenever
     * acknowledgements take longer than a few batches (a leader change, a follower leaving the
     * ISR, a busy broker) and during every round trip at high rates. What idempotence would
     * buy is not needed here: a retried request's duplicates are dropped by spend-svc, which
     * keeps one row per call id (as for the spool's replays), and events need no order. */
    if (conf_set(conf, "bootstrap.servers", pub->brokers, kerr, sizeof(kerr)) != 0 ||
        conf_set(conf, "enable.idempotence", "false", kerr, sizeof(kerr)) != 0 ||
        conf_set(conf, "acks", "all", kerr, sizeof(kerr)) != 0 ||
        conf_set(conf, "queue.buffering.max.messages", qmsgs, kerr, sizeof(kerr)) != 0 ||
        conf_set(conf, "queue.buffering.max.kbytes", qkb, kerr, sizeof(kerr)) != 0 ||
        /* batches of many events per request to the broker: the events wait in the spool, so
         * lingering costs no durability (a librdkafka property given in the config wins) */
        conf_set(conf, "linger.ms", "50", kerr, sizeof(kerr)) != 0 ||
        /* An event is ~800 bytes of JSON, mostly the same keys and values as its neighbours:
         * LZ4 makes a batch several times smaller, and sending those bytes over TCP cost the
         * router more CPU than compressing them (tests/bench/router_bench.sh). Consumers
         * decompress without being told (librdkafka, the Java client). */
        conf_set(conf, "compression.codec", "lz4", kerr, sizeof(kerr)) != 0 ||
        conf_set(conf, "batch.size", kbatch, kerr, sizeof(kerr)) != 0 ||
        /* Never give up on a record: it stays in the queue (bounded above) or in the spool. */
        conf_set(conf, "message.timeout.ms", "0", kerr, sizeof(kerr)) != 0 ||
        conf_set(conf, "socket.keepalive.enable", "true", kerr, sizeof(kerr)) != 0 ||
        (cfg->kafka_opts != NULL &&
         tg_kafka_opts_apply(cfg->kafka_opts, conf, kerr, sizeof(kerr)) != 0)) {
        snprintf(err, errlen, "publisher: kafka config: %s", kerr);
        goto fail;
    }
    if (!user_sets_partitioner(cfg->kafka_opts)) {
        rd_kafka_topic_conf_t *tconf = rd_kafka_conf_get_default_topic_conf(conf);

        if (tconf == NULL) { /* no topic-level property was set: the defaults, kept by conf */
            tconf = rd_kafka_topic_conf_new();
            rd_kafka_conf_set_default_topic_conf(conf, tconf);
        }
        rd_kafka_topic_conf_set_partitioner_cb(tconf, partition_of_key);
    }
    rd_kafka_conf_set_opaque(conf, pub);
    rd_kafka_conf_set_dr_msg_cb(conf, on_delivery);
    rd_kafka_conf_set_error_cb(conf, on_error);
    rd_kafka_conf_set_log_cb(conf, on_log);
    pub->rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, kerr, sizeof(kerr));
    if (pub->rk == NULL) {
        snprintf(err, errlen, "publisher: cannot create producer: %s", kerr);
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

/* A spool append's result for one event: counted as a submit counts it. */
static void submit_result(struct rt_publisher *pub, int rc)
{
    if (rc == TG_EFULL) {
        atomic_fetch_add(&pub->dropped, 1);
        TG_ERROR_RL("event=spend_event_dropped reason=spool_full policy=%s",
                    pub->cfg.reject_when_full ? "reject" : "drop");
    } else if (rc != 0) {
        atomic_fetch_add(&pub->submit_errors, 1);
        atomic_fetch_add(&pub->dropped, 1);
        TG_ERROR_RL("event=spend_event_dropped reason=%s", tg_errname(rc));
    }
}

/* Key length, key and the event's JSON into out (PUB_PAYLOAD_MAX + 1 bytes); *len: the whole. */
static int payload_encode(struct rt_publisher *pub, const struct proto_event *ev,
                          unsigned char *out, size_t *len)
{
    size_t keylen = strnlen(ev->key_hash, PUB_KEY_MAX);
    size_t jlen = 0;
    int rc;

    out[0] = (unsigned char)keylen;
    memcpy(out + 1, ev->key_hash, keylen);
    rc = proto_event_encode(ev, (char *)out + 1 + keylen, PUB_PAYLOAD_MAX - keylen, &jlen);
    if (rc != 0) {
        atomic_fetch_add(&pub->submit_errors, 1);
        return rc;
    }
    *len = 1 + keylen + jlen;
    return 0;
}

/* One loop thread's events of this turn, encoded, not yet in the spool. */
struct pub_batch {
    struct rt_publisher *pub;
    unsigned n;
    size_t used;
    struct iovec recs[RT_SPOOL_BATCH_MAX];
    unsigned char buf[RT_PUBLISHER_BATCH_BYTES];
};

static __thread struct pub_batch *tl_batch;

int rt_publisher_batch_begin(struct rt_publisher *pub)
{
    struct pub_batch *b;

    if (tl_batch != NULL)
        return TG_EINVAL;
    b = malloc(sizeof(*b));
    if (b == NULL)
        return TG_ENOMEM;
    b->pub = pub;
    b->n = 0;
    b->used = 0;
    tl_batch = b;
    return 0;
}

int rt_publisher_batch_pending(void)
{
    return tl_batch != NULL && tl_batch->n > 0;
}

void rt_publisher_batch_flush(void)
{
    struct pub_batch *b = tl_batch;
    int rcs[RT_SPOOL_BATCH_MAX];

    if (b == NULL || b->n == 0)
        return;
    rt_spool_append_batch(b->pub->spool, b->recs, b->n, tg_now_epoch_ms(), rcs, NULL);
    for (unsigned i = 0; i < b->n; i++)
        submit_result(b->pub, rcs[i]);
    b->n = 0;
    b->used = 0;
}

void rt_publisher_batch_end(void)
{
    rt_publisher_batch_flush();
    free(tl_batch);
    tl_batch = NULL;
}

int rt_publisher_submit(struct rt_publisher *pub, const struct proto_event *ev)
{
    unsigned char buf[PUB_PAYLOAD_MAX + 1];
    struct pub_batch *b = tl_batch;
    size_t len = 0;
    int rc;

    if (b != NULL && b->pub == pub) {
        if (b->n == RT_SPOOL_BATCH_MAX || sizeof(b->buf) - b->used < PUB_PAYLOAD_MAX + 1)
            rt_publisher_batch_flush();
        rc = payload_encode(pub, ev, b->buf + b->used, &len);
        if (rc != 0)
            return rc;
        b->recs[b->n].iov_base = b->buf + b->used;
        b->recs[b->n].iov_len = len;
        b->n++;
        b->used += len;
        return 0;
    }
    rc = payload_encode(pub, ev, buf, &len);
    if (rc != 0)
        return rc;
    rc = rt_spool_append(pub->spool, buf, len, tg_now_epoch_ms(), NULL);
    submit_result(pub, rc);
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
    /* records of several events no report came for (destroy before the thread ran) */
    while (pub->inflight.next != NULL && pub->inflight.next != &pub->inflight) {
        struct pub_desc *d = pub->inflight.next;

        pub->inflight.next = d->next;
        free(d);
    }
    free(pub->stage);
    free(pub->staged);
    free(pub->chains);
    free(pub->slots);
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
    tg_prom_counter(b, "tollgate_router_kafka_records_produced_total",
                    "Kafka records produced, each holding one spend event or several "
                    "(kafka.events_per_record)",
                    atomic_load(&pub->records));
    tg_prom_gauge(b, "tollgate_router_producer_queue_depth",
                  "Messages in the Kafka producer queue", (double)atomic_load(&pub->outq));
    tg_prom_counter(b, "tollgate_router_producer_queue_full_total",
                    "Produce calls refused because the producer queue was full",
                    atomic_load(&pub->queue_full));
    tg_prom_counter(b, "tollgate_router_memory_trims_total",
                    "Times free heap memory was given back to the system after a burst of events "
                    "in flight",
                    atomic_load(&pub->trims));
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


