#include "control.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <librdkafka/rdkafka.h>

#include "control_int.h"
#include "tg_kafka_opts.h"

#include "tg_err.h"
#include "tg_log.h"
#include "tg_metrics.h"
#include "tg_time.h"

#define SLOT_NONE UINT32_MAX
#define POLL_BUSY_MS 5   /* poll interval while publishes wait for confirmation */
#define POLL_IDLE_MS 100 /* poll interval otherwise */
#define SHUTDOWN_DRAIN_MS 2000
#define META_TIMEOUT_MS 500
#define WATERMARK_TIMEOUT_MS 1000

/* Flags of the replay's seen set: what the last record read for a hash said. */
#define SEEN_KEY 0x1
#define SEEN_BLOCK 0x2

/* ---- small helpers ---- */

int rt_control_hash_ok(const char *h)
{
    for (int i = 0; i < TG_SHA256_HEX_LEN; i++) {
        if (!((h[i] >= '0' && h[i] <= '9') || (h[i] >= 'a' && h[i] <= 'f')))
            return 0;
    }
    return h[TG_SHA256_HEX_LEN] == '\0';
}

static int cmp_hash(const void *a, const void *b)
{
    return memcmp(a, b, TG_SHA256_HEX_LEN);
}

int rt_control_is_static(const struct rt_control *ctl, const char *hash)
{
    return ctl->n_static > 0 &&
           bsearch(hash, ctl->statics, ctl->n_static, sizeof(*ctl->statics), cmp_hash) != NULL;
}

static uint64_t hex64(const char *s)
{
    uint64_t v = 0;

    for (int i = 0; i < 16; i++)
        v = (v << 4) | (uint64_t)(s[i] <= '9' ? s[i] - '0' : s[i] - 'a' + 10);
    return v;
}

int rt_control_record_key(const struct rt_control_record *rec, char *out, size_t cap)
{
    if (rec == NULL || !rt_control_hash_ok(rec->hash))
        return TG_EINVAL;
    switch (rec->op) {
    case RT_KEY_PUT:
    case RT_KEY_DELETE:
        return proto_ctl_record_key(PROTO_CTL_KEY, rec->hash, out, cap);
    case RT_KEY_BLOCK:
    case RT_KEY_UNBLOCK:
        return proto_ctl_record_key(PROTO_CTL_BLOCK, rec->hash, out, cap);
    default:
        return TG_EINVAL;
    }
}

/* ---- echo set (control thread) ---- */

static void echo_add(struct rt_control *ctl, int is_block, const char *hash, int32_t partition,
                     int64_t offset)
{
    struct echo *e = NULL;

    for (size_t i = 0; i < ctl->n_echo; i++) {
        if (ctl->echoes[i].is_block == is_block && strcmp(ctl->echoes[i].hash, hash) == 0) {
            e = &ctl->echoes[i];
            break;
        }
    }
    if (e != NULL && e->partition == partition && e->offset > offset)
        return; /* a later own change of the same key is already noted */
    if (e == NULL) {
        if (ctl->n_echo >= RT_CONTROL_ECHO_MAX) {
            /* Drop the oldest: at worst an older record of that key is re-applied for the few
             * milliseconds until its newer record is read again. */
            memmove(&ctl->echoes[0], &ctl->echoes[1], (ctl->n_echo - 1) * sizeof(struct echo));
            ctl->n_echo--;
            atomic_fetch_add(&ctl->echo_dropped, 1);
        }
        e = &ctl->echoes[ctl->n_echo++];
    }
    e->is_block = is_block;
    memcpy(e->hash, hash, sizeof(e->hash));
    e->partition = partition;
    e->offset = offset;
}

/* 1 when a consumed record is older than a change this replica already applied. */
static int echo_stale(struct rt_control *ctl, int is_block, const char *hash, int32_t partition,
                      int64_t offset)
{
    for (size_t i = 0; i < ctl->n_echo; i++) {
        struct echo *e = &ctl->echoes[i];

        if (e->is_block != is_block || strcmp(e->hash, hash) != 0)
            continue;
        if (e->partition == partition && offset < e->offset)
            return 1;
        /* Reached (or passed) our own record: the topic order takes over again. */
        ctl->echoes[i] = ctl->echoes[ctl->n_echo - 1];
        ctl->n_echo--;
        return 0;
    }
    return 0;
}

/* ---- replay seen set (control thread) ---- */

static int seen_init(struct rt_control *ctl)
{
    size_t slots = 16;

    ctl->seen_cap = ctl->max_keys + RT_CONTROL_ECHO_MAX;
    while (slots < 2 * ctl->seen_cap)
        slots <<= 1;
    ctl->seen = calloc(slots, sizeof(*ctl->seen));
    if (ctl->seen == NULL)
        return TG_ENOMEM;
    ctl->seen_slots = slots;
    ctl->seen_count = 0;
    ctl->seen_overflow = 0;
    return 0;
}

static void seen_fini(struct rt_control *ctl)
{
    free(ctl->seen);
    ctl->seen = NULL;
    ctl->seen_slots = 0;
}

/* The entry for hash; create it when create (NULL when absent or the set is full). */
static struct seen *seen_get(struct rt_control *ctl, const char *hash, int create)
{
    uint64_t a = hex64(hash), b = hex64(hash + 16);
    size_t mask = ctl->seen_slots - 1;

    if (ctl->seen == NULL)
        return NULL;
    if (a == 0 && b == 0)
        b = 1; /* keep 0|0 for empty slots; a collision here is harmless (flags only) */
    for (size_t i = 0; i < ctl->seen_slots; i++) {
        struct seen *s = &ctl->seen[((a ^ (b * 0x9e3779b97f4a7c15ull)) + i) & mask];

        if (s->a == a && s->b == b)
            return s;
        if (s->a == 0 && s->b == 0) {
            if (!create)
                return NULL;
            if (ctl->seen_count >= ctl->seen_cap) {
                ctl->seen_overflow = 1;
                return NULL;
            }
            s->a = a;
            s->b = b;
            ctl->seen_count++;
            return s;
        }
    }
    ctl->seen_overflow = 1;
    return NULL;
}

static void seen_note(struct rt_control *ctl, const struct rt_key_change *c)
{
    const char *hash = c->op == RT_KEY_PUT ? c->spec->key_hash : c->hash;
    int sets = c->op == RT_KEY_PUT || c->op == RT_KEY_BLOCK;
    struct seen *s;

    if (ctl->seen == NULL)
        return;
    s = seen_get(ctl, hash, sets);
    if (s == NULL)
        return;
    switch (c->op) {
    case RT_KEY_PUT:
        s->flags |= SEEN_KEY;
        break;
    case RT_KEY_DELETE:
        s->flags &= ~(unsigned)SEEN_KEY;
        break;
    case RT_KEY_BLOCK:
        s->flags |= SEEN_BLOCK;
        break;
    case RT_KEY_UNBLOCK:
        s->flags &= ~(unsigned)SEEN_BLOCK;
        break;
    }
}

/* ---- applying changes ---- */

/* Apply n changes: one batch, or one by one when the batch is refused (so that one bad change
 * does not hold back the others). */
void rt_control_apply_changes(struct rt_control *ctl, const struct rt_key_change *ch, size_t n)
{
    int rc;

    if (n == 0)
        return;
    rc = rt_keys_apply(ctl->keys, ch, n);
    if (rc == 0) {
        atomic_fetch_add(&ctl->records_applied, n);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        rc = rt_keys_apply(ctl->keys, &ch[i], 1);
        if (rc == 0) {
            atomic_fetch_add(&ctl->records_applied, 1);
        } else {
            atomic_fetch_add(&ctl->apply_errors, 1);
            TG_WARN_RL("msg=\"control record not applied\" op=%d err=%s", (int)ch[i].op,
                       tg_errname(rc));
        }
    }
}

struct reconcile {
    struct rt_control *ctl;
    struct rt_key_change *ch;
    size_t n, cap;
};

static int reconcile_one(const struct rt_key *k, int present, void *arg)
{
    struct reconcile *r = arg;
    struct seen *s = seen_get(r->ctl, k->hash, 0);
    unsigned flags = s != NULL ? s->flags : 0;
    int stat = present && rt_control_is_static(r->ctl, k->hash);

    if (r->n + 2 > r->cap)
        return 1;
    if (present && !stat && !(flags & SEEN_KEY)) {
        r->ch[r->n].op = RT_KEY_DELETE;
        memcpy(r->ch[r->n++].hash, k->hash, sizeof(k->hash));
        if (flags & SEEN_BLOCK) {
            r->ch[r->n].op = RT_KEY_BLOCK;
            memcpy(r->ch[r->n++].hash, k->hash, sizeof(k->hash));
        }
    } else if (k->blocked && !(flags & SEEN_BLOCK)) {
        r->ch[r->n].op = RT_KEY_UNBLOCK;
        memcpy(r->ch[r->n++].hash, k->hash, sizeof(k->hash));
    }
    return 0;
}

/* End of the replay: drop what the snapshot had and the topic no longer has. */
static void reconcile(struct rt_control *ctl)
{
    struct rt_keys_stats st;
    struct reconcile r = {ctl, NULL, 0, 0};
    struct rt_keys_table *t = NULL;

    if (ctl->seen == NULL)
        return;
    if (ctl->seen_overflow) {
        TG_WARN("msg=\"control replay: more hashes than the table holds, snapshot entries not "
                "reconciled\" capacity=%zu",
                ctl->seen_cap);
        return;
    }
    rt_keys_get_stats(ctl->keys, &st);
    r.cap = 2 * (size_t)(st.count + st.blocked) + 2;
    r.ch = calloc(r.cap, sizeof(*r.ch));
    if (r.ch == NULL) {
        TG_WARN("msg=\"control replay: out of memory, snapshot entries not reconciled\"");
        return;
    }
    t = rt_keys_acquire(ctl->keys);
    rt_keys_foreach(t, reconcile_one, &r);
    rt_keys_release(&t);
    if (r.n > 0) {
        TG_INFO("msg=\"control replay: removing entries no longer on the topic\" changes=%zu", r.n);
        rt_control_apply_changes(ctl, r.ch, r.n);
    }
    free(r.ch);
}

static struct part *part_of(struct rt_control *ctl, int32_t id);

/* A team: record (control thread): applied to the teams table. Returns 0 when applied,
 * TG_ENOTFOUND when it is not a team record (the caller goes on with keys), else the error
 * (counted and logged here). */
static int apply_team(struct rt_control *ctl, const rd_kafka_message_t *m)
{
    char err[256];
    int is_put = 0, rc;

    if (m->key == NULL || m->key_len < 5 || memcmp(m->key, PROTO_CTL_TEAM_PREFIX, 5) != 0)
        return TG_ENOTFOUND;
    if (ctl->teams == NULL || ctl->team_spec == NULL) {
        atomic_fetch_add(&ctl->records_skipped, 1);
        return 0;
    }
    rc = rt_teams_control_decode(m->key, m->key_len, m->payload, m->payload != NULL ? m->len : 0,
                                 ctl->team_spec, &is_put, err, sizeof(err));
    if (rc != 0) {
        atomic_fetch_add(&ctl->records_invalid, 1);
        TG_WARN_RL("msg=\"control team record invalid, skipped\" partition=%" PRId32
                   " offset=%" PRId64 " reason=\"%s\"",
                   m->partition, m->offset, err);
        return rc;
    }
    rt_control_teams_note(ctl, ctl->team_spec->team_id);
    rc = is_put ? rt_teams_put(ctl->teams, ctl->team_spec)
                : rt_teams_delete(ctl->teams, ctl->team_spec->team_id);
    if (rc != 0) {
        atomic_fetch_add(&ctl->apply_errors, 1);
        TG_WARN_RL("msg=\"control team record not applied\" reason=%s", tg_strerror(rc));
        return rc;
    }
    atomic_fetch_add(&ctl->records_applied, 1);
    return 0;
}

/* Apply this replica's confirmed record at once (control thread, in the delivery report). */
static void apply_own(struct rt_control *ctl, const rd_kafka_message_t *m)
{
    struct rt_key_change ch;
    char err[256];
    int rc, is_block;

    if (m->key != NULL && m->key_len >= 5 && memcmp(m->key, PROTO_CTL_TEAM_PREFIX, 5) == 0) {
        const struct part *p = part_of(ctl, m->partition);

        if (p == NULL || p->next <= m->offset)
            (void)apply_team(ctl, m); /* not read yet: applied now, and again when read */
        return;
    }

    rc = rt_keys_control_decode(m->key, m->key_len, m->payload, m->payload != NULL ? m->len : 0,
                                NULL, &ch, ctl->own_spec, err, sizeof(err));
    if (rc != 0)
        return; /* our own encoding: cannot happen short of memory corruption */
    is_block = ch.op == RT_KEY_BLOCK || ch.op == RT_KEY_UNBLOCK;
    {
        const struct part *p = part_of(ctl, m->partition);

        /* The consumer already read past our record: it applied it, and whatever came after
         * it for the same key, in topic order. Applying it again would go back in time. */
        if (p != NULL && p->next > m->offset)
            return;
    }
    seen_note(ctl, &ch);
    echo_add(ctl, is_block, ch.hash, m->partition, m->offset);
    if (!is_block && rt_control_is_static(ctl, ch.hash)) {
        atomic_fetch_add(&ctl->records_skipped, 1);
        return;
    }
    rt_control_apply_changes(ctl, &ch, 1);
}

/* ---- producer callbacks ---- */

static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    struct rt_control *ctl = opaque;
    uintptr_t tag = (uintptr_t)m->_private;
    uint32_t idx;
    struct pslot *s;
    int answered;
    rt_control_done_fn done;
    void *ud;

    (void)rk;
    if (tag == 0 || tag > ctl->max_pending)
        return;
    idx = (uint32_t)(tag - 1);
    if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR) {
        atomic_store(&ctl->kafka_up, 1);
        apply_own(ctl, m);
    } else {
        TG_WARN_RL("msg=\"control record not confirmed\" err=%s", rd_kafka_err2name(m->err));
    }
    pthread_mutex_lock(&ctl->mu);
    s = &ctl->slots[idx];
    answered = s->answered;
    done = s->done;
    ud = s->ud;
    s->answered = 1;
    pthread_mutex_unlock(&ctl->mu);
    if (!answered) {
        if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR)
            atomic_fetch_add(&ctl->publish_ok, 1);
        else
            atomic_fetch_add(&ctl->publish_failed, 1);
        done(m->err == RD_KAFKA_RESP_ERR_NO_ERROR ? 0 : TG_EUNAVAIL, ud);
    }
    pthread_mutex_lock(&ctl->mu);
    s->in_use = 0;
    s->done = NULL;
    s->ud = NULL;
    s->next_free = ctl->free_head;
    ctl->free_head = idx;
    ctl->n_pending--;
    pthread_mutex_unlock(&ctl->mu);
}

static void on_error(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
    struct rt_control *ctl = opaque;

    (void)reason;
    if (err == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN)
        atomic_store(&ctl->kafka_up, 0);
    if (err == RD_KAFKA_RESP_ERR__FATAL && rd_kafka_type(rk) == RD_KAFKA_PRODUCER)
        atomic_store(&ctl->prod_fatal, 1);
    TG_WARN_RL("msg=\"control topic kafka error\" code=%s",
               rd_kafka_err2name((rd_kafka_resp_err_t)err));
}

static void on_log(const rd_kafka_t *rk, int level, const char *fac, const char *buf)
{
    (void)rk;
    (void)buf;
    /* librdkafka's lines name brokers, never payloads; keep them terse. */
    if (level <= 3)
        TG_WARN_RL("msg=\"control topic kafka log\" facility=%s", fac);
}

/* Backstop: answer publishes past their deadline (or every one when all). Control thread. */
static void expire_pending(struct rt_control *ctl, uint64_t now, int all)
{
    pthread_mutex_lock(&ctl->mu);
    for (uint32_t i = 0; i < ctl->max_pending && ctl->n_pending > 0; i++) {
        struct pslot *s = &ctl->slots[i];
        rt_control_done_fn done;
        void *ud;

        if (!s->in_use || s->answered || (!all && now < s->deadline_ms))
            continue;
        s->answered = 1;
        done = s->done;
        ud = s->ud;
        pthread_mutex_unlock(&ctl->mu);
        atomic_fetch_add(&ctl->publish_failed, 1);
        done(TG_EUNAVAIL, ud);
        pthread_mutex_lock(&ctl->mu);
    }
    pthread_mutex_unlock(&ctl->mu);
}

static uint32_t pending_now(struct rt_control *ctl)
{
    uint32_t n;

    pthread_mutex_lock(&ctl->mu);
    n = ctl->n_pending;
    pthread_mutex_unlock(&ctl->mu);
    return n;
}

/* ---- consumer (control thread) ---- */

/* The change arrays are large (RT_CONTROL_REPLAY_BATCH decoded specs take about 15 MB) and get
 * mappings of their own, outside malloc: glibc serves such a block with mmap, and when it is
 * freed raises its mmap threshold to the block's size (up to 32 MB) and its trim threshold to
 * twice that, after which the heap keeps up to 30 MB of freed pages for good: an idle router
 * measured 25.7-25.9 MB of RSS with the arrays from calloc, 22.0-22.1 MB with these mappings.
 * Zero-filled like calloc; NULL when out of memory. */
static void *batch_map(size_t n, size_t size)
{
    void *p;

    if (n == 0 || size > SIZE_MAX / n)
        return NULL;
    p = mmap(NULL, n * size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

static void batch_unmap(void *p, size_t n, size_t size)
{
    if (p != NULL)
        munmap(p, n * size);
}

/* Replace the change arrays with ones of cap entries (keeps the old ones when out of memory). */
static void batch_resize(struct rt_control *ctl, size_t cap)
{
    struct rt_key_spec *specs = batch_map(cap, sizeof(*specs));
    struct rt_key_change *changes = batch_map(cap, sizeof(*changes));

    if (specs == NULL || changes == NULL) {
        batch_unmap(specs, cap, sizeof(*specs));
        batch_unmap(changes, cap, sizeof(*changes));
        return;
    }
    batch_unmap(ctl->specs, ctl->batch_cap, sizeof(*ctl->specs));
    batch_unmap(ctl->changes, ctl->batch_cap, sizeof(*ctl->changes));
    ctl->specs = specs;
    ctl->changes = changes;
    ctl->batch_cap = cap;
}

static void finish_replay(struct rt_control *ctl)
{
    struct rt_keys_stats st;

    reconcile(ctl);
    rt_control_teams_reconcile(ctl);
    seen_fini(ctl);
    batch_resize(ctl, RT_CONTROL_APPLY_BATCH);
    atomic_store(&ctl->replayed, 1);
    rt_keys_get_stats(ctl->keys, &st);
    TG_INFO("msg=\"control topic replayed\" keys=%" PRIu64 " blocked=%" PRIu64, st.count,
            st.blocked);
    rt_control_maybe_snapshot(ctl, tg_now_mono_ms(), 1);
}

static void check_replay_done(struct rt_control *ctl)
{
    if (atomic_load(&ctl->replayed))
        return;
    for (int i = 0; i < ctl->n_parts; i++) {
        if (!ctl->parts[i].done)
            return;
    }
    finish_replay(ctl);
}

static struct part *part_of(struct rt_control *ctl, int32_t id)
{
    for (int i = 0; i < ctl->n_parts; i++) {
        if (ctl->parts[i].id == id)
            return &ctl->parts[i];
    }
    return NULL;
}

static int try_assign(struct rt_control *ctl)
{
    const struct rd_kafka_metadata *md = NULL;
    rd_kafka_topic_t *t = NULL;
    rd_kafka_topic_partition_list_t *l = NULL;
    rd_kafka_resp_err_t err;
    int rc = TG_EUNAVAIL, n;

    t = rd_kafka_topic_new(ctl->cons, ctl->topic, NULL);
    if (t == NULL)
        goto out;
    err = rd_kafka_metadata(ctl->cons, 0, t, &md, META_TIMEOUT_MS);
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR || md == NULL || md->topic_cnt < 1 ||
        md->topics[0].err != RD_KAFKA_RESP_ERR_NO_ERROR || md->topics[0].partition_cnt <= 0) {
        TG_WARN_RL(
            "msg=\"control topic not available yet\" err=%s",
            rd_kafka_err2name(err != RD_KAFKA_RESP_ERR_NO_ERROR || md == NULL || md->topic_cnt < 1
                                  ? err
                                  : md->topics[0].err));
        goto out;
    }
    atomic_store(&ctl->kafka_up, 1);
    n = md->topics[0].partition_cnt;
    if (n > RT_CONTROL_PARTITIONS_MAX) {
        TG_ERROR_RL("msg=\"control topic has too many partitions\" partitions=%d max=%d", n,
                    RT_CONTROL_PARTITIONS_MAX);
        rc = TG_EFULL;
        goto out;
    }
    for (int i = 0; i < n; i++) {
        int64_t lo = 0, hi = 0;

        ctl->parts[i].id = md->topics[0].partitions[i].id;
        err = rd_kafka_query_watermark_offsets(ctl->cons, ctl->topic, ctl->parts[i].id, &lo, &hi,
                                               WATERMARK_TIMEOUT_MS);
        if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
            TG_WARN_RL("msg=\"control topic watermarks unavailable\" err=%s",
                       rd_kafka_err2name(err));
            goto out;
        }
        ctl->parts[i].end = hi;
        ctl->parts[i].next = -1;
        ctl->parts[i].done = hi <= lo;
    }
    l = rd_kafka_topic_partition_list_new(n);
    if (l == NULL)
        goto out;
    for (int i = 0; i < n; i++)
        rd_kafka_topic_partition_list_add(l, ctl->topic, ctl->parts[i].id)->offset =
            RD_KAFKA_OFFSET_BEGINNING;
    if (!atomic_load(&ctl->replayed) && ctl->seen == NULL && seen_init(ctl) != 0)
        goto out;
    err = rd_kafka_assign(ctl->cons, l);
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
        TG_WARN_RL("msg=\"control topic assignment failed\" err=%s", rd_kafka_err2name(err));
        goto out;
    }
    ctl->n_parts = n;
    ctl->assigned = 1;
    TG_INFO("msg=\"control topic assigned\" partitions=%d", n);
    check_replay_done(ctl);
    rc = 0;
out:
    if (l != NULL)
        rd_kafka_topic_partition_list_destroy(l);
    if (md != NULL)
        rd_kafka_metadata_destroy(md);
    if (t != NULL)
        rd_kafka_topic_destroy(t);
    return rc;
}

static void note_position(struct rt_control *ctl, int32_t partition, int64_t next, int eof)
{
    struct part *p = part_of(ctl, partition);

    if (p == NULL)
        return;
    if (next > p->next)
        p->next = next;
    if (!p->done && (eof || next >= p->end))
        p->done = 1;
}

/* Read up to one batch and apply it. */
static void consume_batch(struct rt_control *ctl, int timeout_ms)
{
    size_t n = 0;
    char err[256];

    while (n < ctl->batch_cap) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(ctl->cons, n == 0 ? timeout_ms : 0);
        struct rt_key_change *c = &ctl->changes[n];
        int rc, is_block;

        if (m == NULL)
            break;
        if (m->err != RD_KAFKA_RESP_ERR_NO_ERROR) {
            if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF)
                note_position(ctl, m->partition, m->offset, 1);
            else
                TG_WARN_RL("msg=\"control topic consume error\" err=%s", rd_kafka_err2name(m->err));
            rd_kafka_message_destroy(m);
            continue;
        }
        atomic_store(&ctl->kafka_up, 1);
        note_position(ctl, m->partition, m->offset + 1, 0);
        if (apply_team(ctl, m) != TG_ENOTFOUND) {
            rd_kafka_message_destroy(m);
            continue;
        }
        rc = rt_keys_control_decode(m->key, m->key_len, m->payload, m->payload != NULL ? m->len : 0,
                                    NULL, c, &ctl->specs[n], err, sizeof(err));
        if (rc != 0) {
            if (rc == TG_ENOTFOUND) {
                atomic_fetch_add(&ctl->records_skipped, 1);
            } else {
                atomic_fetch_add(&ctl->records_invalid, 1);
                TG_WARN_RL("msg=\"control record invalid, skipped\" partition=%" PRId32
                           " offset=%" PRId64 " value_len=%zu",
                           m->partition, m->offset, m->len);
            }
            rd_kafka_message_destroy(m);
            continue;
        }
        is_block = c->op == RT_KEY_BLOCK || c->op == RT_KEY_UNBLOCK;
        /* A record older than our own applied change says nothing about the final state:
         * neither applied nor noted for the end-of-replay reconciliation. */
        if (echo_stale(ctl, is_block, c->hash, m->partition, m->offset)) {
            atomic_fetch_add(&ctl->records_skipped, 1);
            rd_kafka_message_destroy(m);
            continue;
        }
        seen_note(ctl, c);
        if (!is_block && rt_control_is_static(ctl, c->hash)) {
            atomic_fetch_add(&ctl->records_skipped, 1);
            rd_kafka_message_destroy(m);
            continue;
        }
        rd_kafka_message_destroy(m);
        n++;
    }
    rt_control_apply_changes(ctl, ctl->changes, n);
    check_replay_done(ctl);
}

/* A fatal error leaves the idempotent producer unusable (librdkafka 2.0.2 raises one when its
 * sequence numbers are out of step with a partition's new leader): every publish would be
 * refused until a restart. The instance is replaced by one made from the same configuration,
 * at most once per RT_CONTROL_RENEW_MS; what the old one held is purged, and its delivery
 * reports answer the callers (503: the change was not confirmed, the caller tries again).
 * Control thread. */
static void renew_producer(struct rt_control *ctl)
{
    uint64_t now = tg_now_mono_ms(), deadline;
    rd_kafka_conf_t *conf;
    rd_kafka_topic_t *rkt, *old_rkt;
    rd_kafka_t *rk, *old;
    rd_kafka_resp_err_t ferr;
    char kerr[512];

    if (ctl->prod_renew_ms != 0 && now - ctl->prod_renew_ms < RT_CONTROL_RENEW_MS)
        return;
    ctl->prod_renew_ms = now;
    ferr = rd_kafka_fatal_error(ctl->prod, NULL, 0);
    conf = rd_kafka_conf_dup(ctl->prod_conf);
    rk = conf != NULL ? rd_kafka_new(RD_KAFKA_PRODUCER, conf, kerr, sizeof(kerr)) : NULL;
    rkt = rk != NULL ? rd_kafka_topic_new(rk, ctl->topic, NULL) : NULL;
    if (rkt == NULL) {
        if (rk != NULL)
            rd_kafka_destroy(rk);
        else if (conf != NULL)
            rd_kafka_conf_destroy(conf);
        TG_ERROR_RL("msg=\"control topic producer failed\" reason=%s action=new_producer_failed",
                    rd_kafka_err2name(ferr));
        return;
    }
    pthread_rwlock_wrlock(&ctl->prod_lk);
    old = ctl->prod;
    old_rkt = ctl->prod_topic;
    ctl->prod = rk;
    ctl->prod_topic = rkt;
    pthread_rwlock_unlock(&ctl->prod_lk);
    rd_kafka_topic_destroy(old_rkt);
    rd_kafka_purge(old, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
    deadline = now + SHUTDOWN_DRAIN_MS;
    do
        rd_kafka_poll(old, 10);
    while (rd_kafka_outq_len(old) > 0 && tg_now_mono_ms() < deadline);
    rd_kafka_destroy(old);
    atomic_store(&ctl->prod_fatal, 0);
    atomic_fetch_add(&ctl->producer_renewals, 1);
    TG_ERROR("msg=\"control topic producer failed\" reason=%s action=new_producer",
             rd_kafka_err2name(ferr));
}

static void *control_main(void *arg)
{
    struct rt_control *ctl = arg;
    uint64_t deadline;

    pthread_setname_np(pthread_self(), "tg-control"); /* in top, perf and /proc/PID/task */
    while (!atomic_load(&ctl->stop)) {
        uint64_t now = tg_now_mono_ms();
        int wait_ms = pending_now(ctl) > 0 ? POLL_BUSY_MS : POLL_IDLE_MS;

        if (atomic_load(&ctl->prod_fatal))
            renew_producer(ctl);
        rd_kafka_poll(ctl->prod, 0);
        expire_pending(ctl, now, 0);
        if (!ctl->assigned && now >= ctl->next_assign_ms) {
            if (try_assign(ctl) != 0)
                ctl->next_assign_ms = tg_now_mono_ms() + RT_CONTROL_RETRY_MS;
            continue;
        }
        if (ctl->assigned)
            consume_batch(ctl, wait_ms);
        else
            rd_kafka_poll(ctl->prod, wait_ms);
        rt_control_maybe_snapshot(ctl, tg_now_mono_ms(), 0);
    }
    /* Shutdown: no new publish gets a slot (checked under mu), then purge what is queued or in
     * flight; the delivery reports answer the callers, the backstop answers the rest. */
    pthread_mutex_lock(&ctl->mu);
    atomic_store(&ctl->stopping, 1);
    pthread_mutex_unlock(&ctl->mu);
    rd_kafka_purge(ctl->prod, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
    deadline = tg_now_mono_ms() + SHUTDOWN_DRAIN_MS;
    while (pending_now(ctl) > 0 && tg_now_mono_ms() < deadline)
        rd_kafka_poll(ctl->prod, 10);
    expire_pending(ctl, tg_now_mono_ms(), 1);
    return NULL;
}

/* ---- public ---- */

static int conf_set(rd_kafka_conf_t *conf, const char *k, const char *v, char *err, size_t errlen)
{
    char kerr[256];

    if (rd_kafka_conf_set(conf, k, v, kerr, sizeof(kerr)) != RD_KAFKA_CONF_OK) {
        snprintf(err, errlen, "control: %s: %s", k, kerr);
        return TG_ECONFIG;
    }
    return 0;
}

static rd_kafka_t *make_handle(struct rt_control *ctl, rd_kafka_type_t type, const char *brokers,
                               const struct tg_kafka_opts *opts, char *err, size_t errlen)
{
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_t *rk;
    char num[32], group[96], kerr[512];
    int rc = 0;

    if (conf == NULL) {
        snprintf(err, errlen, "control: out of memory");
        return NULL;
    }
    rc |= conf_set(conf, "bootstrap.servers", brokers, err, errlen);
    rc |= conf_set(conf, "reconnect.backoff.max.ms", "1000", err, errlen);
    rc |= conf_set(conf, "log_level", "4", err, errlen);
    if (type == RD_KAFKA_PRODUCER) {
        snprintf(num, sizeof(num), "%u", ctl->timeout_ms);
        rc |= conf_set(conf, "client.id", "tollgate-router-control", err, errlen);
        rc |= conf_set(conf, "acks", "all", err, errlen);
        rc |= conf_set(conf, "enable.idempotence", "true", err, errlen);
        rc |= conf_set(conf, "message.timeout.ms", num, err, errlen);
        rc |= conf_set(conf, "linger.ms", "0", err, errlen);
        snprintf(num, sizeof(num), "%u", 2 * ctl->max_pending + 16);
        rc |= conf_set(conf, "queue.buffering.max.messages", num, err, errlen);
        rd_kafka_conf_set_dr_msg_cb(conf, on_delivery);
    } else {
        char uuid[TG_UUID_STR_LEN + 1];

        /* No group membership: partitions are assigned, offsets never committed. The group id
         * only satisfies librdkafka's assign(); it is unique so no two replicas share it. */
        if (tg_uuid_v4(uuid) != 0)
            snprintf(uuid, sizeof(uuid), "%" PRIu64, tg_now_mono_us());
        snprintf(group, sizeof(group), "tollgate-router-control-%s", uuid);
        rc |= conf_set(conf, "client.id", "tollgate-router-control", err, errlen);
        rc |= conf_set(conf, "group.id", group, err, errlen);
        rc |= conf_set(conf, "enable.auto.commit", "false", err, errlen);
        rc |= conf_set(conf, "enable.auto.offset.store", "false", err, errlen);
        rc |= conf_set(conf, "enable.partition.eof", "true", err, errlen);
        rc |= conf_set(conf, "auto.offset.reset", "earliest", err, errlen);
        rc |= conf_set(conf, "fetch.wait.max.ms", "100", err, errlen);
        rc |= conf_set(conf, "queued.max.messages.kbytes", "16384", err, errlen);
    }
    if (rc == 0 && opts != NULL && tg_kafka_opts_apply(opts, conf, kerr, sizeof(kerr)) != 0) {
        snprintf(err, errlen, "control: %s", kerr);
        rc = TG_ECONFIG;
    }
    if (rc != 0) {
        rd_kafka_conf_destroy(conf);
        return NULL;
    }
    rd_kafka_conf_set_opaque(conf, ctl);
    rd_kafka_conf_set_error_cb(conf, on_error);
    rd_kafka_conf_set_log_cb(conf, on_log);
    if (type == RD_KAFKA_PRODUCER && (ctl->prod_conf = rd_kafka_conf_dup(conf)) == NULL) {
        rd_kafka_conf_destroy(conf);
        snprintf(err, errlen, "control: out of memory");
        return NULL;
    }
    rk = rd_kafka_new(type, conf, kerr, sizeof(kerr));
    if (rk == NULL) {
        rd_kafka_conf_destroy(conf);
        snprintf(err, errlen, "control: cannot create the Kafka client: %s", kerr);
        return NULL;
    }
    if (type == RD_KAFKA_CONSUMER)
        rd_kafka_poll_set_consumer(rk);
    return rk;
}

struct rt_control *rt_control_create(const struct rt_control_config *cc, struct rt_keys *keys,
                                     char *err, size_t errlen)
{
    struct rt_control *ctl = NULL;
    struct rt_keys_stats st;
    const char *topic =
        cc->topic != NULL && cc->topic[0] != '\0' ? cc->topic : RT_DEFAULT_CONTROL_TOPIC;
    int have_brokers = cc->brokers != NULL && cc->brokers[0] != '\0';

    if (keys == NULL || cc->max_pending > RT_CONTROL_PENDING_MAX || strlen(topic) >= RT_TOPIC_CAP ||
        (cc->snapshot_path != NULL && strlen(cc->snapshot_path) >= RT_PATH_CAP) ||
        (cc->teams_snapshot_path != NULL && strlen(cc->teams_snapshot_path) >= RT_PATH_CAP)) {
        snprintf(err, errlen,
                 "control: invalid configuration (keys, topic, snapshot path or "
                 "max_pending out of range)");
        return NULL;
    }
    ctl = calloc(1, sizeof(*ctl));
    if (ctl == NULL)
        goto nomem;
    pthread_mutex_init(&ctl->mu, NULL);
    pthread_rwlock_init(&ctl->prod_lk, NULL);
    ctl->keys = keys;
    ctl->teams = cc->teams;
    snprintf(ctl->topic, sizeof(ctl->topic), "%s", topic);
    if (cc->teams != NULL && cc->teams_snapshot_path != NULL &&
        cc->teams_snapshot_path[0] != '\0') {
        snprintf(ctl->tsnap_path, sizeof(ctl->tsnap_path), "%s", cc->teams_snapshot_path);
        snprintf(ctl->tsnap_tmp, sizeof(ctl->tsnap_tmp), "%s.tmp", cc->teams_snapshot_path);
    }
    if (cc->snapshot_path != NULL && cc->snapshot_path[0] != '\0') {
        snprintf(ctl->snap_path, sizeof(ctl->snap_path), "%s", cc->snapshot_path);
        snprintf(ctl->snap_tmp, sizeof(ctl->snap_tmp), "%s.tmp", cc->snapshot_path);
    }
    ctl->timeout_ms =
        cc->publish_timeout_ms != 0 ? cc->publish_timeout_ms : RT_CONTROL_PUBLISH_TIMEOUT_MS;
    ctl->max_pending = cc->max_pending != 0 ? cc->max_pending : RT_CONTROL_PENDING_DEFAULT;
    rt_keys_get_stats(keys, &st);
    ctl->max_keys = (size_t)st.capacity;

    if (cc->cfg != NULL && cc->cfg->n_keys > 0) {
        ctl->statics = calloc(cc->cfg->n_keys, sizeof(*ctl->statics));
        if (ctl->statics == NULL)
            goto nomem;
        for (uint32_t i = 0; i < cc->cfg->n_keys; i++)
            memcpy(ctl->statics[i], cc->cfg->keys[i].key_hash, sizeof(ctl->statics[i]));
        ctl->n_static = cc->cfg->n_keys;
        qsort(ctl->statics, ctl->n_static, sizeof(*ctl->statics), cmp_hash);
    }
    ctl->slots = calloc(ctl->max_pending, sizeof(*ctl->slots));
    ctl->echoes = calloc(RT_CONTROL_ECHO_MAX, sizeof(*ctl->echoes));
    ctl->batch_cap = RT_CONTROL_REPLAY_BATCH;
    ctl->specs = batch_map(ctl->batch_cap, sizeof(*ctl->specs));
    ctl->changes = batch_map(ctl->batch_cap, sizeof(*ctl->changes));
    ctl->own_spec = calloc(1, sizeof(*ctl->own_spec));
    ctl->team_spec = calloc(1, sizeof(*ctl->team_spec));
    ctl->line = malloc(SNAP_LINE_MAX);
    if (ctl->slots == NULL || ctl->echoes == NULL || ctl->specs == NULL || ctl->changes == NULL ||
        ctl->own_spec == NULL || ctl->team_spec == NULL || ctl->line == NULL)
        goto nomem;
    for (uint32_t i = 0; i < ctl->max_pending; i++)
        ctl->slots[i].next_free = i + 1 < ctl->max_pending ? i + 1 : SLOT_NONE;
    ctl->free_head = 0;

    if (ctl->snap_path[0] != '\0')
        rt_control_snapshot_load(ctl);
    rt_control_teams_snapshot_load(ctl);
    ctl->created_ms = tg_now_mono_ms();
    ctl->snap_next_ms = ctl->created_ms + RT_CONTROL_SNAPSHOT_INTERVAL_MS;

    if (!have_brokers) {
        batch_resize(ctl, RT_CONTROL_APPLY_BATCH);
        atomic_store(&ctl->replayed, 1);
        atomic_store(&ctl->stopping, 1);
        TG_INFO("msg=\"control topic not configured: keys from config and snapshot only\"");
        return ctl;
    }
    ctl->prod = make_handle(ctl, RD_KAFKA_PRODUCER, cc->brokers, cc->kafka_opts, err, errlen);
    if (ctl->prod == NULL)
        goto fail;
    ctl->prod_topic = rd_kafka_topic_new(ctl->prod, ctl->topic, NULL);
    if (ctl->prod_topic == NULL) {
        snprintf(err, errlen, "control: cannot create topic handle: %s",
                 rd_kafka_err2str(rd_kafka_last_error()));
        goto fail;
    }
    ctl->cons = make_handle(ctl, RD_KAFKA_CONSUMER, cc->brokers, cc->kafka_opts, err, errlen);
    if (ctl->cons == NULL)
        goto fail;
    ctl->cons_queue = rd_kafka_queue_get_consumer(ctl->cons);
    if (pthread_create(&ctl->thread, NULL, control_main, ctl) != 0) {
        snprintf(err, errlen, "control: cannot start the control thread");
        goto fail;
    }
    ctl->thread_started = 1;
    return ctl;
nomem:
    snprintf(err, errlen, "control: out of memory");
fail:
    rt_control_destroy(&ctl);
    return NULL;
}

void rt_control_stop(struct rt_control *ctl)
{
    if (ctl == NULL)
        return;
    atomic_store(&ctl->stop, 1);
    if (ctl->thread_started) {
        pthread_join(ctl->thread, NULL);
        ctl->thread_started = 0;
    }
    pthread_mutex_lock(&ctl->mu);
    atomic_store(&ctl->stopping, 1);
    pthread_mutex_unlock(&ctl->mu);
}

void rt_control_destroy(struct rt_control **pctl)
{
    struct rt_control *ctl;

    if (pctl == NULL || *pctl == NULL)
        return;
    ctl = *pctl;
    rt_control_stop(ctl);
    if (ctl->line != NULL) {
        ctl->snap_next_ms = 0;
        rt_control_maybe_snapshot(ctl, tg_now_mono_ms(), 0);
    }
    if (ctl->cons_queue != NULL)
        rd_kafka_queue_destroy(ctl->cons_queue);
    if (ctl->cons != NULL) {
        rd_kafka_consumer_close(ctl->cons);
        rd_kafka_destroy(ctl->cons);
    }
    if (ctl->prod_topic != NULL)
        rd_kafka_topic_destroy(ctl->prod_topic);
    if (ctl->prod != NULL)
        rd_kafka_destroy(ctl->prod);
    seen_fini(ctl);
    rt_control_teams_forget(ctl);
    free(ctl->line);
    free(ctl->own_spec);
    free(ctl->team_spec);
    batch_unmap(ctl->changes, ctl->batch_cap, sizeof(*ctl->changes));
    batch_unmap(ctl->specs, ctl->batch_cap, sizeof(*ctl->specs));
    free(ctl->echoes);
    free(ctl->slots);
    free(ctl->statics);
    if (ctl->prod_conf != NULL)
        rd_kafka_conf_destroy(ctl->prod_conf);
    pthread_rwlock_destroy(&ctl->prod_lk);
    pthread_mutex_destroy(&ctl->mu);
    free(ctl);
    *pctl = NULL;
}

static int produce(struct rt_control *ctl, const char *rkey, size_t klen, const char *value,
                   size_t vlen, rt_control_done_fn done, void *ud);

int rt_control_publish_team(struct rt_control *ctl, const char *id,
                            const struct rt_team_spec *spec, rt_control_done_fn done, void *ud)
{
    char rkey[RT_CONTROL_RECORD_KEY_MAX];
    char *value = NULL;
    size_t vlen = 0;
    int klen, rc;

    if (ctl == NULL || done == NULL || ctl->teams == NULL ||
        (spec != NULL && (id == NULL || strcmp(spec->team_id, id) != 0)))
        return TG_EINVAL;
    klen = proto_ctl_team_record_key(id, rkey, sizeof(rkey));
    if (klen < 0)
        return TG_EINVAL;
    if (atomic_load(&ctl->stopping) || ctl->prod == NULL) {
        atomic_fetch_add(&ctl->publish_unavailable, 1);
        return TG_EUNAVAIL;
    }
    if (spec != NULL) {
        value = malloc(RT_TEAM_JSON_MAX);
        if (value == NULL)
            return TG_ENOMEM;
        rc = rt_team_spec_to_json(spec, value, RT_TEAM_JSON_MAX, &vlen);
        if (rc != 0) {
            free(value);
            return rc == TG_ENOMEM ? TG_ENOMEM : TG_EINVAL;
        }
    }
    rc = produce(ctl, rkey, (size_t)klen, value, vlen, done, ud);
    free(value);
    return rc;
}

int rt_control_publish(struct rt_control *ctl, const struct rt_control_record *rec,
                       rt_control_done_fn done, void *ud)
{
    char rkey[RT_CONTROL_RECORD_KEY_MAX];
    char block[PROTO_CTL_BLOCK_JSON_MAX];
    char *value = NULL, *heap = NULL;
    size_t vlen = 0;
    int klen, rc;

    if (ctl == NULL || rec == NULL || done == NULL)
        return TG_EINVAL;
    klen = rt_control_record_key(rec, rkey, sizeof(rkey));
    if (klen < 0)
        return TG_EINVAL;
    if (atomic_load(&ctl->stopping) || ctl->prod == NULL) {
        atomic_fetch_add(&ctl->publish_unavailable, 1);
        return TG_EUNAVAIL;
    }
    if (rec->op == RT_KEY_PUT) {
        if (rec->spec == NULL || rec->spec->blocked || strcmp(rec->spec->key_hash, rec->hash) != 0)
            return TG_EINVAL;
        heap = malloc(RT_KEY_JSON_MAX);
        if (heap == NULL)
            return TG_ENOMEM;
        rc = rt_key_spec_to_json(rec->spec, heap, RT_KEY_JSON_MAX, &vlen);
        if (rc != 0) {
            free(heap);
            return rc == TG_ENOMEM ? TG_ENOMEM : TG_EINVAL;
        }
        value = heap;
    } else if (rec->op == RT_KEY_BLOCK) {
        rc = proto_ctl_block_encode(&rec->block, block, sizeof(block), &vlen);
        if (rc != 0)
            return TG_EINVAL;
        value = block;
    }
    rc = produce(ctl, rkey, (size_t)klen, value, vlen, done, ud);
    free(heap);
    return rc;
}

/* Take a pending slot and queue rkey/value (copied); the delivery report answers done. */
static int produce(struct rt_control *ctl, const char *rkey, size_t klen, const char *value,
                   size_t vlen, rt_control_done_fn done, void *ud)
{
    uint32_t idx;
    rd_kafka_resp_err_t err;

    pthread_mutex_lock(&ctl->mu);
    if (atomic_load(&ctl->stopping)) {
        pthread_mutex_unlock(&ctl->mu);
        atomic_fetch_add(&ctl->publish_unavailable, 1);
        return TG_EUNAVAIL;
    }
    if (ctl->free_head == SLOT_NONE) {
        pthread_mutex_unlock(&ctl->mu);
        atomic_fetch_add(&ctl->publish_full, 1);
        return TG_EFULL;
    }
    idx = ctl->free_head;
    ctl->free_head = ctl->slots[idx].next_free;
    ctl->slots[idx].in_use = 1;
    ctl->slots[idx].answered = 0;
    ctl->slots[idx].done = done;
    ctl->slots[idx].ud = ud;
    ctl->slots[idx].deadline_ms = tg_now_mono_ms() + ctl->timeout_ms;
    ctl->n_pending++;
    pthread_mutex_unlock(&ctl->mu);
    /* After producev succeeds the slot belongs to the delivery report: not touched here. */
    pthread_rwlock_rdlock(&ctl->prod_lk);
    err = rd_kafka_producev(ctl->prod, RD_KAFKA_V_RKT(ctl->prod_topic),
                            RD_KAFKA_V_KEY(rkey, klen), RD_KAFKA_V_VALUE((void *)value, vlen),
                            RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                            RD_KAFKA_V_OPAQUE((void *)(uintptr_t)(idx + 1)), RD_KAFKA_V_END);
    pthread_rwlock_unlock(&ctl->prod_lk);
    if (err == RD_KAFKA_RESP_ERR__FATAL)
        atomic_store(&ctl->prod_fatal, 1);
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
        pthread_mutex_lock(&ctl->mu);
        ctl->slots[idx].in_use = 0;
        ctl->slots[idx].done = NULL;
        ctl->slots[idx].ud = NULL;
        ctl->slots[idx].next_free = ctl->free_head;
        ctl->free_head = idx;
        ctl->n_pending--;
        pthread_mutex_unlock(&ctl->mu);
        atomic_fetch_add(&ctl->publish_unavailable, 1);
        TG_WARN_RL("msg=\"control record not queued\" err=%s", rd_kafka_err2name(err));
        return TG_EUNAVAIL;
    }
    /* The control thread may sit in a 100 ms consumer poll: wake it so that it polls for the
     * delivery report at the short interval. */
    if (ctl->cons_queue != NULL)
        rd_kafka_queue_yield(ctl->cons_queue);
    return 0;
}

int rt_control_replayed(const struct rt_control *ctl)
{
    return atomic_load(&ctl->replayed);
}

int rt_control_ready(const struct rt_control *ctl)
{
    if (atomic_load(&ctl->replayed))
        return 1;
    return ctl->snap_ok && tg_now_mono_ms() - ctl->created_ms >= RT_CONTROL_DEGRADED_READY_MS;
}

int rt_control_wait_replayed(const struct rt_control *ctl, uint32_t timeout_ms)
{
    uint64_t deadline = tg_now_mono_ms() + timeout_ms;

    for (;;) {
        if (atomic_load(&ctl->replayed))
            return 0;
        if (tg_now_mono_ms() >= deadline)
            return TG_ETIMEOUT;
        tg_sleep_ms(10);
    }
}

void rt_control_get_stats(const struct rt_control *ctl, struct rt_control_stats *out)
{
    struct rt_control *c = (struct rt_control *)ctl; /* the mutex is not part of the value */

    memset(out, 0, sizeof(*out));
    out->records_applied = atomic_load(&ctl->records_applied);
    out->records_skipped = atomic_load(&ctl->records_skipped);
    out->records_invalid = atomic_load(&ctl->records_invalid);
    out->apply_errors = atomic_load(&ctl->apply_errors);
    out->publish_ok = atomic_load(&ctl->publish_ok);
    out->publish_failed = atomic_load(&ctl->publish_failed);
    out->publish_full = atomic_load(&ctl->publish_full);
    out->publish_unavailable = atomic_load(&ctl->publish_unavailable);
    out->producer_renewals = atomic_load(&ctl->producer_renewals);
    out->pending = pending_now(c);
    out->echo_dropped = atomic_load(&ctl->echo_dropped);
    out->snapshot_keys = atomic_load(&ctl->snapshot_keys);
    out->snapshot_loaded = atomic_load(&ctl->snapshot_loaded);
    out->snapshot_writes = atomic_load(&ctl->snapshot_writes);
    out->snapshot_errors = atomic_load(&ctl->snapshot_errors);
    out->snapshot_teams = atomic_load(&ctl->snapshot_teams);
    out->snapshot_teams_loaded = atomic_load(&ctl->snapshot_teams_loaded);
    out->snapshot_teams_writes = atomic_load(&ctl->snapshot_teams_writes);
    out->snapshot_teams_errors = atomic_load(&ctl->snapshot_teams_errors);
    out->snapshot_teams_dropped = atomic_load(&ctl->snapshot_teams_dropped);
    out->replayed = atomic_load(&ctl->replayed);
    out->kafka_up = atomic_load(&ctl->kafka_up);
}

void rt_control_write_metrics(const struct rt_control *ctl, struct tg_buf *b)
{
    struct rt_control_stats st;
    static const char *const outcomes[] = {"ok", "failed", "full", "unavailable"};
    uint64_t values[4];

    rt_control_get_stats(ctl, &st);
    values[0] = st.publish_ok;
    values[1] = st.publish_failed;
    values[2] = st.publish_full;
    values[3] = st.publish_unavailable;
    tg_prom_counter(b, "tollgate_router_control_records_applied_total",
                    "Control topic records applied to the keys table", st.records_applied);
    tg_prom_header(b, "tollgate_router_control_publish_total", "counter",
                   "Key changes published to the control topic, by outcome");
    for (size_t i = 0; i < 4; i++) {
        struct tg_label l = {"outcome", outcomes[i]};

        tg_prom_sample_u64(b, "tollgate_router_control_publish_total", &l, 1, values[i]);
    }
    tg_prom_counter(b, "tollgate_router_control_producer_renewals_total",
                    "Control topic producer instances replaced after a fatal error",
                    st.producer_renewals);
    tg_prom_gauge(b, "tollgate_router_control_replayed",
                  "1 once the control topic was replayed into the keys table",
                  st.replayed ? 1.0 : 0.0);
    tg_prom_gauge(b, "tollgate_router_control_snapshot_keys",
                  "Entries in the last keys snapshot written or loaded", (double)st.snapshot_keys);
    tg_prom_gauge(b, "tollgate_router_control_pending",
                  "Key changes waiting for the brokers' confirmation", (double)st.pending);
    if (ctl->teams != NULL) {
        struct rt_teams_stats ts;

        rt_teams_get_stats(ctl->teams, &ts);
        tg_prom_gauge(b, "tollgate_router_teams", "Teams in the teams table", (double)ts.count);
        tg_prom_counter(b, "tollgate_router_teams_full_total",
                        "Team records refused: the teams table is full (limits.max_teams)",
                        ts.full_rejections);
        tg_prom_gauge(b, "tollgate_router_control_snapshot_teams",
                      "Teams in the last teams snapshot written or loaded",
                      (double)st.snapshot_teams);
        tg_prom_counter(b, "tollgate_router_control_snapshot_teams_errors_total",
                        "Teams snapshot files not written, unreadable or corrupt (ignored)",
                        st.snapshot_teams_errors);
    }
}
