#include "consumer.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <librdkafka/rdkafka.h>

#include "tg_err.h"
#include "tg_log.h"
#include "tg_metrics.h"
#include "tg_time.h"

#define SP_CONSUMER_PARTITIONS_MAX 1024 /* partitions of one topic we track */
#define SP_CONTROL_META_RETRY_MS 2000
#define SP_OFFSET_UNKNOWN INT64_MIN

struct part {
    int32_t id;
    int64_t next;   /* first offset not handed out yet, or a logical RD_KAFKA_OFFSET_* */
    int64_t lag;    /* messages behind the high watermark */
    int parked;     /* paused by sp_consumer_park (not by hold) */
};

struct sp_consumer {
    char topic[SP_CONFIG_STR_MAX];
    char control_topic[SP_CONFIG_STR_MAX];
    struct sp_consumer_hooks hooks;
    rd_kafka_t *rk;           /* events consumer group */
    rd_kafka_t *ctl;          /* control topic reader, no group */
    rd_kafka_t *prod;         /* control topic producer */
    rd_kafka_conf_t *prod_conf; /* what a new producer instance is made from */
    uint64_t prod_renew_ms;   /* monotonic ms of the last new instance */
    rd_kafka_message_t *cur;  /* last message handed out */

    pthread_mutex_t mu;       /* guards parts (lag read by the metrics thread) */
    struct tg_kafka_lasterr last_error; /* for readiness */
    struct part parts[SP_CONSUMER_PARTITIONS_MAX];
    int nparts;
    int held;
    int nparked;              /* partitions parked */

    int ctl_assigned;
    int ctl_nparts;
    int ctl_eof;              /* partitions that reached EOF at least once */
    int ctl_caught_up;
    uint64_t ctl_next_meta_ms;
    rd_kafka_message_t *ctl_cur;

    uint64_t pub_seq;         /* sequence of the publish being waited for */
    int pub_done;
    rd_kafka_resp_err_t pub_err;

    _Atomic int kafka_up;
    _Atomic uint64_t rebalances;
    _Atomic uint64_t discarded;
    _Atomic uint64_t parks;
    _Atomic uint64_t errors;
    _Atomic uint64_t producer_renewals;
};

/* Partitions ------------------------------------------------------------------------------------- */

static struct part *part_find(struct sp_consumer *c, int32_t id)
{
    for (int i = 0; i < c->nparts; i++)
        if (c->parts[i].id == id)
            return &c->parts[i];
    return NULL;
}

static int set_conf(rd_kafka_conf_t *conf, const char *k, const char *v, char *err, size_t errlen)
{
    char e[256];
    if (rd_kafka_conf_set(conf, k, v, e, sizeof(e)) != RD_KAFKA_CONF_OK) {
        snprintf(err, errlen, "kafka config %s: %s", k, e);
        return TG_ECONFIG;
    }
    return 0;
}

/* apply_opts: the user's security and librdkafka properties, after the service's own. */
static int apply_opts(rd_kafka_conf_t *conf, const struct sp_config *cfg, char *err,
                     size_t errlen)
{
    char e[320];

    if (tg_kafka_opts_apply(&cfg->kafka_opts, conf, e, sizeof(e)) != 0) {
        snprintf(err, errlen, "kafka config %s", e);
        return TG_ECONFIG;
    }
    return 0;
}

/* error_cb: the brokers' state and the last reason (for readiness and the log). */
static void error_cb(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
    struct sp_consumer *c = opaque;
    char esc[TG_KAFKA_LASTERR_CAP];

    (void)rk;
    if (tg_kafka_lasterr_note(&c->last_error, err, reason, esc, sizeof(esc)))
        atomic_store(&c->kafka_up, 0);
    TG_WARN_RL("msg=\"kafka error\" err=%s reason=\"%s\"",
               rd_kafka_err2name((rd_kafka_resp_err_t)err), esc);
}

/* Rebalance --------------------------------------------------------------------------------------- */

static void on_assign(struct sp_consumer *c, rd_kafka_t *rk,
                      rd_kafka_topic_partition_list_t *list)
{
    int32_t ids[SP_CONSUMER_PARTITIONS_MAX];
    int64_t next[SP_CONSUMER_PARTITIONS_MAX];
    int n = list->cnt < SP_CONSUMER_PARTITIONS_MAX ? list->cnt : SP_CONSUMER_PARTITIONS_MAX;
    int loaded = 0;

    for (int i = 0; i < n; i++)
        ids[i] = list->elems[i].partition;
    if (c->hooks.offsets_load && c->hooks.offsets_load(c->hooks.ctx, ids, n, next) == 0)
        loaded = 1;
    pthread_mutex_lock(&c->mu);
    c->nparts = 0;
    for (int i = 0; i < n; i++) {
        int64_t off;
        if (loaded)
            off = next[i] >= 0 ? next[i] : RD_KAFKA_OFFSET_BEGINNING;
        else
            off = RD_KAFKA_OFFSET_STORED; /* Kafka's commits never run ahead of Postgres */
        list->elems[i].offset = off;
        c->parts[c->nparts].id = ids[i];
        c->parts[c->nparts].next = off;
        c->parts[c->nparts].lag = 0;
        c->parts[c->nparts].parked = 0;
        c->nparts++;
    }
    pthread_mutex_unlock(&c->mu);
    if (rd_kafka_assign(rk, list) != RD_KAFKA_RESP_ERR_NO_ERROR)
        TG_ERROR("msg=\"kafka assign failed\"");
    /* a partition's pause outlives its revocation in librdkafka: one parked (or held) before
     * a rebalance would stay paused, so the new assignment states it explicitly */
    if (c->held)
        rd_kafka_pause_partitions(rk, list);
    else
        rd_kafka_resume_partitions(rk, list);
    TG_INFO("msg=\"partitions assigned\" count=%d offsets_from=%s", n,
            loaded ? "postgres" : "kafka");
}

static void rebalance_cb(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                         rd_kafka_topic_partition_list_t *list, void *opaque)
{
    struct sp_consumer *c = opaque;

    atomic_fetch_add(&c->rebalances, 1);
    if (err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS) {
        on_assign(c, rk, list);
        return;
    }
    if (err == RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS) {
        int32_t ids[SP_CONSUMER_PARTITIONS_MAX];
        int n = list->cnt < SP_CONSUMER_PARTITIONS_MAX ? list->cnt : SP_CONSUMER_PARTITIONS_MAX;
        for (int i = 0; i < n; i++)
            ids[i] = list->elems[i].partition;
        if (c->cur) {
            rd_kafka_message_destroy(c->cur);
            c->cur = NULL;
        }
        if (c->hooks.revoking)
            c->hooks.revoking(c->hooks.ctx, ids, n);
        rd_kafka_assign(rk, NULL);
        pthread_mutex_lock(&c->mu);
        c->nparts = 0;
        c->nparked = 0;
        pthread_mutex_unlock(&c->mu);
        TG_INFO("msg=\"partitions revoked\" count=%d", n);
        return;
    }
    TG_WARN("msg=\"rebalance error\" err=%s", rd_kafka_err2name(err));
    rd_kafka_assign(rk, NULL);
    pthread_mutex_lock(&c->mu);
    c->nparts = 0;
    c->nparked = 0;
    pthread_mutex_unlock(&c->mu);
}

static void dr_cb(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    struct sp_consumer *c = opaque;
    (void)rk;
    if ((uint64_t)(uintptr_t)m->_private == c->pub_seq) {
        c->pub_done = 1;
        c->pub_err = m->err;
    }
}

/* Life cycle ------------------------------------------------------------------------------------- */

/* librdkafka's own lines go through our logger: one key=value line, level-gated, rate-limited,
 * the text escaped and cut (they name brokers, never a secret). */
static void kafka_log(const rd_kafka_t *rk, int level, const char *fac, const char *buf)
{
    char esc[256];

    (void)rk;
    if (level <= 4) {
        TG_WARN_RL("msg=kafka facility=%s text=\"%s\"", fac,
                   tg_log_escape(esc, sizeof(esc), buf, strlen(buf)));
    } else {
        TG_LOG_RL(TG_LOG_DEBUG, "msg=kafka facility=%s text=\"%s\"", fac,
                  tg_log_escape(esc, sizeof(esc), buf, strlen(buf)));
    }
}

static rd_kafka_t *make_handle(rd_kafka_type_t type, rd_kafka_conf_t *conf, char *err,
                               size_t errlen)
{
    char e[512];
    rd_kafka_t *rk;

    rd_kafka_conf_set_log_cb(conf, kafka_log);
    rk = rd_kafka_new(type, conf, e, sizeof(e));
    if (!rk) {
        snprintf(err, errlen, "kafka: %.480s", e);
        rd_kafka_conf_destroy(conf);
    }
    return rk;
}

struct sp_consumer *sp_consumer_create(const struct sp_config *cfg,
                                       const struct sp_consumer_hooks *hooks, char *err,
                                       size_t errlen)
{
    struct sp_consumer *c = calloc(1, sizeof(*c));
    rd_kafka_conf_t *conf = NULL;
    rd_kafka_topic_partition_list_t *sub = NULL;
    char sess[32];
    char ctl_group[SP_CONFIG_STR_MAX + 16];

    if (!c) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&c->mu, NULL);
    tg_kafka_lasterr_init(&c->last_error);
    snprintf(c->topic, sizeof(c->topic), "%s", cfg->kafka_topic);
    snprintf(c->control_topic, sizeof(c->control_topic), "%s", cfg->kafka_control_topic);
    if (hooks)
        c->hooks = *hooks;
    snprintf(sess, sizeof(sess), "%d", cfg->kafka_session_timeout_ms);

    /* events consumer group */
    conf = rd_kafka_conf_new();
    if (set_conf(conf, "bootstrap.servers", cfg->kafka_brokers, err, errlen) < 0 ||
        set_conf(conf, "group.id", cfg->kafka_group_id, err, errlen) < 0 ||
        set_conf(conf, "enable.auto.commit", "false", err, errlen) < 0 ||
        set_conf(conf, "enable.auto.offset.store", "false", err, errlen) < 0 ||
        set_conf(conf, "auto.offset.reset", "earliest", err, errlen) < 0 ||
        set_conf(conf, "enable.partition.eof", "true", err, errlen) < 0 ||
        set_conf(conf, "session.timeout.ms", sess, err, errlen) < 0 ||
        set_conf(conf, "partition.assignment.strategy", "range,roundrobin", err, errlen) < 0 ||
        set_conf(conf, "queued.max.messages.kbytes", "16384", err, errlen) < 0 ||
        /* a parked partition resumes with the next fetch of its broker: keep the broker's
         * long poll short so that it is not held up behind idle partitions */
        set_conf(conf, "fetch.wait.max.ms", "50", err, errlen) < 0 ||
        set_conf(conf, "client.id", "spend-svc", err, errlen) < 0 ||
        apply_opts(conf, cfg, err, errlen) < 0)
        goto fail;
    rd_kafka_conf_set_opaque(conf, c);
    rd_kafka_conf_set_error_cb(conf, error_cb);
    rd_kafka_conf_set_rebalance_cb(conf, rebalance_cb);
    c->rk = make_handle(RD_KAFKA_CONSUMER, conf, err, errlen);
    conf = NULL;
    if (!c->rk)
        goto fail;
    rd_kafka_poll_set_consumer(c->rk);
    sub = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(sub, c->topic, RD_KAFKA_PARTITION_UA);
    if (rd_kafka_subscribe(c->rk, sub) != RD_KAFKA_RESP_ERR_NO_ERROR) {
        snprintf(err, errlen, "kafka: cannot subscribe to %s", c->topic);
        goto fail;
    }

    /* control topic reader: assign-only, never commits */
    snprintf(ctl_group, sizeof(ctl_group), "%s.control", cfg->kafka_group_id);
    conf = rd_kafka_conf_new();
    if (set_conf(conf, "bootstrap.servers", cfg->kafka_brokers, err, errlen) < 0 ||
        set_conf(conf, "group.id", ctl_group, err, errlen) < 0 ||
        set_conf(conf, "enable.auto.commit", "false", err, errlen) < 0 ||
        set_conf(conf, "enable.auto.offset.store", "false", err, errlen) < 0 ||
        set_conf(conf, "enable.partition.eof", "true", err, errlen) < 0 ||
        set_conf(conf, "auto.offset.reset", "earliest", err, errlen) < 0 ||
        apply_opts(conf, cfg, err, errlen) < 0)
        goto fail;
    rd_kafka_conf_set_opaque(conf, c);
    rd_kafka_conf_set_error_cb(conf, error_cb);
    c->ctl = make_handle(RD_KAFKA_CONSUMER, conf, err, errlen);
    conf = NULL;
    if (!c->ctl)
        goto fail;
    rd_kafka_poll_set_consumer(c->ctl);

    /* control topic producer: acks=all, idempotent */
    conf = rd_kafka_conf_new();
    if (set_conf(conf, "bootstrap.servers", cfg->kafka_brokers, err, errlen) < 0 ||
        set_conf(conf, "acks", "all", err, errlen) < 0 ||
        set_conf(conf, "enable.idempotence", "true", err, errlen) < 0 ||
        set_conf(conf, "linger.ms", "0", err, errlen) < 0 ||
        set_conf(conf, "queue.buffering.max.messages", "10000", err, errlen) < 0 ||
        apply_opts(conf, cfg, err, errlen) < 0)
        goto fail;
    rd_kafka_conf_set_opaque(conf, c);
    rd_kafka_conf_set_dr_msg_cb(conf, dr_cb);
    rd_kafka_conf_set_log_cb(conf, kafka_log);
    c->prod_conf = rd_kafka_conf_dup(conf); /* kept for a new instance after a fatal error */
    if (!c->prod_conf) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    c->prod = make_handle(RD_KAFKA_PRODUCER, conf, err, errlen);
    conf = NULL;
    if (!c->prod)
        goto fail;
    rd_kafka_topic_partition_list_destroy(sub);
    return c;
fail:
    if (conf)
        rd_kafka_conf_destroy(conf);
    if (sub)
        rd_kafka_topic_partition_list_destroy(sub);
    sp_consumer_destroy(&c);
    return NULL;
}

void sp_consumer_close(struct sp_consumer *c)
{
    if (!c || !c->rk)
        return;
    if (c->cur) {
        rd_kafka_message_destroy(c->cur);
        c->cur = NULL;
    }
    rd_kafka_consumer_close(c->rk);
}

void sp_consumer_destroy(struct sp_consumer **cp)
{
    struct sp_consumer *c;

    if (!cp || !*cp)
        return;
    c = *cp;
    if (c->cur)
        rd_kafka_message_destroy(c->cur);
    if (c->ctl_cur)
        rd_kafka_message_destroy(c->ctl_cur);
    if (c->rk)
        rd_kafka_destroy(c->rk);
    if (c->ctl) {
        rd_kafka_consumer_close(c->ctl);
        rd_kafka_destroy(c->ctl);
    }
    if (c->prod) {
        rd_kafka_flush(c->prod, 2000);
        rd_kafka_destroy(c->prod);
    }
    if (c->prod_conf)
        rd_kafka_conf_destroy(c->prod_conf);
    pthread_mutex_destroy(&c->mu);
    tg_kafka_lasterr_fini(&c->last_error);
    free(c);
    *cp = NULL;
}

/* Events ----------------------------------------------------------------------------------------- */

int sp_consumer_poll(struct sp_consumer *c, int timeout_ms, struct sp_consumer_msg *msg)
{
    rd_kafka_message_t *m;
    struct part *p;

    if (c->cur) {
        rd_kafka_message_destroy(c->cur);
        c->cur = NULL;
    }
    m = rd_kafka_consumer_poll(c->rk, timeout_ms);
    if (!m)
        return 0;
    if (m->err) {
        int rc = 0;
        if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
            atomic_store(&c->kafka_up, 1);
        } else {
            atomic_fetch_add(&c->errors, 1);
            TG_WARN_RL("msg=\"kafka consume error\" err=%s", rd_kafka_err2name(m->err));
            rc = TG_EIO;
        }
        rd_kafka_message_destroy(m);
        return rc;
    }
    atomic_store(&c->kafka_up, 1);
    pthread_mutex_lock(&c->mu);
    p = part_find(c, m->partition);
    if (!p || c->held || p->parked) {
        /* not ours any more, or fetched before the pause or park: it is read again after
         * release or unpark (a partition still at a logical start position resumes at this
         * message) */
        if (p && p->next < 0)
            p->next = m->offset;
        pthread_mutex_unlock(&c->mu);
        atomic_fetch_add(&c->discarded, 1);
        rd_kafka_message_destroy(m);
        return 0;
    }
    p->next = m->offset + 1;
    pthread_mutex_unlock(&c->mu);
    c->cur = m;
    msg->partition = m->partition;
    msg->offset = m->offset;
    msg->payload = m->payload;
    msg->len = m->len;
    return 1;
}

static rd_kafka_topic_partition_list_t *assigned_list(struct sp_consumer *c, int with_offsets)
{
    rd_kafka_topic_partition_list_t *l;

    pthread_mutex_lock(&c->mu);
    l = rd_kafka_topic_partition_list_new(c->nparts > 0 ? c->nparts : 1);
    for (int i = 0; i < c->nparts; i++) {
        rd_kafka_topic_partition_t *e =
            rd_kafka_topic_partition_list_add(l, c->topic, c->parts[i].id);
        if (with_offsets)
            e->offset = c->parts[i].next;
    }
    pthread_mutex_unlock(&c->mu);
    return l;
}

/* resume_from: resume the partitions of l, each from its offset in l: numeric positions are
 * sought first (logical ones were never fetched past). The seek is queued to the partitions
 * and version-barriered at once in this thread: a message fetched before it is never
 * delivered afterwards, so nothing waits for it (a timed wait in librdkafka 2.0 also took its
 * timeout in the wrong unit and failed after a few milliseconds). */
static void resume_from(struct sp_consumer *c, rd_kafka_topic_partition_list_t *l)
{
    rd_kafka_topic_partition_list_t *s;

    s = rd_kafka_topic_partition_list_new(l->cnt > 0 ? l->cnt : 1);

    for (int i = 0; i < l->cnt; i++)
        if (l->elems[i].offset >= 0)
            rd_kafka_topic_partition_list_add(s, c->topic, l->elems[i].partition)->offset =
                l->elems[i].offset;
    if (s->cnt > 0) {
        rd_kafka_error_t *e = rd_kafka_seek_partitions(c->rk, s, 0);
        if (e) {
            TG_WARN_RL("msg=\"kafka seek failed\" err=%s", rd_kafka_error_string(e));
            rd_kafka_error_destroy(e);
        }
    }
    rd_kafka_topic_partition_list_destroy(s);
    rd_kafka_resume_partitions(c->rk, l);
}

void sp_consumer_hold(struct sp_consumer *c)
{
    rd_kafka_topic_partition_list_t *l;

    if (c->held)
        return;
    c->held = 1;
    l = assigned_list(c, 0);
    rd_kafka_pause_partitions(c->rk, l);
    rd_kafka_topic_partition_list_destroy(l);
    TG_INFO("msg=\"consumption paused\"");
}

void sp_consumer_release(struct sp_consumer *c)
{
    rd_kafka_topic_partition_list_t *l;

    if (!c->held)
        return;
    l = assigned_list(c, 1);
    resume_from(c, l);
    rd_kafka_topic_partition_list_destroy(l);
    pthread_mutex_lock(&c->mu);
    for (int i = 0; i < c->nparts; i++)
        c->parts[i].parked = 0;
    c->nparked = 0;
    pthread_mutex_unlock(&c->mu);
    c->held = 0;
    TG_INFO("msg=\"consumption resumed\"");
}

int sp_consumer_held(const struct sp_consumer *c)
{
    return c->held;
}

/* park_list: the assigned partitions p with p % mod == rem and p's parked flag == parked,
 * with their next offsets; their flags are set to !parked. */
static rd_kafka_topic_partition_list_t *park_list(struct sp_consumer *c, int mod, int rem,
                                                  int parked)
{
    rd_kafka_topic_partition_list_t *l;

    pthread_mutex_lock(&c->mu);
    l = rd_kafka_topic_partition_list_new(c->nparts > 0 ? c->nparts : 1);
    for (int i = 0; i < c->nparts; i++) {
        struct part *p = &c->parts[i];
        if ((uint32_t)p->id % (uint32_t)mod != (uint32_t)rem || p->parked != parked)
            continue;
        rd_kafka_topic_partition_list_add(l, c->topic, p->id)->offset = p->next;
        p->parked = !parked;
        c->nparked += parked ? -1 : 1;
    }
    pthread_mutex_unlock(&c->mu);
    return l;
}

void sp_consumer_park(struct sp_consumer *c, int mod, int rem)
{
    rd_kafka_topic_partition_list_t *l;

    if (c->held || mod <= 0)
        return;
    l = park_list(c, mod, rem, 0);
    if (l->cnt > 0) {
        rd_kafka_pause_partitions(c->rk, l);
        atomic_fetch_add(&c->parks, 1);
    }
    rd_kafka_topic_partition_list_destroy(l);
}

void sp_consumer_unpark(struct sp_consumer *c, int mod, int rem)
{
    rd_kafka_topic_partition_list_t *l;

    if (c->held || c->nparked == 0 || mod <= 0)
        return;
    l = park_list(c, mod, rem, 1);
    if (l->cnt == 0) {
        rd_kafka_topic_partition_list_destroy(l);
        return;
    }
    /* what was fetched past the unread message was dropped while parked: fetch again from it */
    resume_from(c, l);
    rd_kafka_topic_partition_list_destroy(l);
}

void sp_consumer_unread(struct sp_consumer *c, int32_t partition, int64_t offset)
{
    struct part *p;

    pthread_mutex_lock(&c->mu);
    p = part_find(c, partition);
    if (p && (p->next < 0 || offset < p->next))
        p->next = offset;
    pthread_mutex_unlock(&c->mu);
}

void sp_consumer_commit(struct sp_consumer *c, const int32_t *parts, const int64_t *next, int n)
{
    rd_kafka_topic_partition_list_t *l;

    if (n <= 0)
        return;
    l = rd_kafka_topic_partition_list_new(n);
    for (int i = 0; i < n; i++)
        rd_kafka_topic_partition_list_add(l, c->topic, parts[i])->offset = next[i];
    rd_kafka_commit(c->rk, l, 1);
    rd_kafka_topic_partition_list_destroy(l);
}

/* Control topic ------------------------------------------------------------------------------------ */

static int control_assign(struct sp_consumer *c)
{
    const struct rd_kafka_metadata *md = NULL;
    rd_kafka_topic_t *t;
    rd_kafka_topic_partition_list_t *l;
    int rc = TG_EUNAVAIL;

    if (tg_now_mono_ms() < c->ctl_next_meta_ms)
        return TG_EAGAIN;
    c->ctl_next_meta_ms = tg_now_mono_ms() + SP_CONTROL_META_RETRY_MS;
    t = rd_kafka_topic_new(c->ctl, c->control_topic, NULL);
    if (!t)
        return TG_EUNAVAIL;
    if (rd_kafka_metadata(c->ctl, 0, t, &md, 1000) != RD_KAFKA_RESP_ERR_NO_ERROR || !md ||
        md->topic_cnt < 1 || md->topics[0].err || md->topics[0].partition_cnt <= 0)
        goto out;
    l = rd_kafka_topic_partition_list_new(md->topics[0].partition_cnt);
    for (int i = 0; i < md->topics[0].partition_cnt; i++)
        rd_kafka_topic_partition_list_add(l, c->control_topic, md->topics[0].partitions[i].id)
            ->offset = RD_KAFKA_OFFSET_BEGINNING;
    if (rd_kafka_assign(c->ctl, l) == RD_KAFKA_RESP_ERR_NO_ERROR) {
        c->ctl_assigned = 1;
        c->ctl_nparts = l->cnt;
        rc = 0;
    }
    rd_kafka_topic_partition_list_destroy(l);
out:
    if (md)
        rd_kafka_metadata_destroy(md);
    rd_kafka_topic_destroy(t);
    return rc;
}

int sp_consumer_control_poll(struct sp_consumer *c, int max, sp_consumer_control_fn fn,
                             void *ctx)
{
    int handled = 0;

    if (!c->ctl_assigned && control_assign(c) < 0)
        return 0;
    while (handled < max) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(c->ctl, 0);
        if (!m)
            break;
        if (m->err) {
            if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
                if (!c->ctl_caught_up && ++c->ctl_eof >= c->ctl_nparts) {
                    c->ctl_caught_up = 1;
                    TG_INFO("msg=\"control topic caught up\"");
                }
            }
            rd_kafka_message_destroy(m);
            continue;
        }
        if (fn(ctx, m->key, m->key_len, m->payload, m->payload ? m->len : 0) < 0) {
            /* re-read this record later */
            rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);
            rd_kafka_error_t *e;
            rd_kafka_topic_partition_list_add(l, c->control_topic, m->partition)->offset =
                m->offset;
            e = rd_kafka_seek_partitions(c->ctl, l, 2000);
            if (e)
                rd_kafka_error_destroy(e);
            rd_kafka_topic_partition_list_destroy(l);
            rd_kafka_message_destroy(m);
            break;
        }
        rd_kafka_message_destroy(m);
        handled++;
    }
    return handled;
}

int sp_consumer_control_caught_up(const struct sp_consumer *c)
{
    return c->ctl_caught_up;
}

/* A fatal error leaves the idempotent producer unusable (librdkafka 2.0.2 raises one when its
 * sequence numbers are out of step with a partition's new leader): every block record would
 * be refused until a restart. The instance is replaced by one made from the same
 * configuration, at most once per SP_CONSUMER_RENEW_MS. The caller's thread (the only one that
 * publishes). */
static void renew_producer(struct sp_consumer *c)
{
    rd_kafka_resp_err_t ferr = rd_kafka_fatal_error(c->prod, NULL, 0);
    uint64_t now = tg_now_mono_ms();
    rd_kafka_conf_t *conf;
    rd_kafka_t *rk;
    char err[512];

    if (ferr == RD_KAFKA_RESP_ERR_NO_ERROR ||
        (c->prod_renew_ms != 0 && now - c->prod_renew_ms < SP_CONSUMER_RENEW_MS))
        return;
    c->prod_renew_ms = now;
    conf = rd_kafka_conf_dup(c->prod_conf);
    rk = conf ? make_handle(RD_KAFKA_PRODUCER, conf, err, sizeof(err)) : NULL;
    if (!rk) {
        TG_ERROR_RL("msg=\"control topic producer failed\" reason=%s action=new_producer_failed",
                    rd_kafka_err2name(ferr));
        return;
    }
    rd_kafka_purge(c->prod, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
    rd_kafka_poll(c->prod, 0);
    rd_kafka_destroy(c->prod);
    c->prod = rk;
    atomic_fetch_add(&c->producer_renewals, 1);
    TG_ERROR("msg=\"control topic producer failed\" reason=%s action=new_producer",
             rd_kafka_err2name(ferr));
}

int sp_consumer_publish_control(struct sp_consumer *c, const char *key, const char *value,
                                size_t len, int timeout_ms)
{
    uint64_t deadline = tg_now_mono_ms() + (uint64_t)timeout_ms;
    rd_kafka_resp_err_t err;

    renew_producer(c);
    c->pub_seq++;
    c->pub_done = 0;
    err = rd_kafka_producev(c->prod, RD_KAFKA_V_TOPIC(c->control_topic),
                            RD_KAFKA_V_KEY((void *)key, strlen(key)),
                            RD_KAFKA_V_VALUE((void *)value, value ? len : 0),
                            RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                            RD_KAFKA_V_OPAQUE((void *)(uintptr_t)c->pub_seq), RD_KAFKA_V_END);
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR)
        return TG_EUNAVAIL;
    while (!c->pub_done && tg_now_mono_ms() < deadline)
        rd_kafka_poll(c->prod, 20);
    if (!c->pub_done) {
        /* give up: purge so that no late report refers to this publish */
        rd_kafka_purge(c->prod, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
        rd_kafka_poll(c->prod, 0);
        c->pub_seq++;
        return TG_ETIMEOUT;
    }
    return c->pub_err == RD_KAFKA_RESP_ERR_NO_ERROR ? 0 : TG_EUNAVAIL;
}

/* Health and metrics -------------------------------------------------------------------------------- */

void sp_consumer_update_lag(struct sp_consumer *c)
{
    pthread_mutex_lock(&c->mu);
    for (int i = 0; i < c->nparts; i++) {
        int64_t lo = 0;
        int64_t hi = 0;
        struct part *p = &c->parts[i];
        if (rd_kafka_get_watermark_offsets(c->rk, c->topic, p->id, &lo, &hi) !=
                RD_KAFKA_RESP_ERR_NO_ERROR ||
            hi < 0)
            continue;
        if (p->next >= 0)
            p->lag = hi > p->next ? hi - p->next : 0;
        else if (lo >= 0)
            p->lag = hi - lo;
    }
    pthread_mutex_unlock(&c->mu);
}

int64_t sp_consumer_total_lag(struct sp_consumer *c)
{
    int64_t total = 0;
    pthread_mutex_lock(&c->mu);
    for (int i = 0; i < c->nparts; i++)
        total += c->parts[i].lag;
    pthread_mutex_unlock(&c->mu);
    return total;
}

const char *sp_consumer_kafka_reason(struct sp_consumer *c, char *buf, size_t cap)
{
    return tg_kafka_lasterr_get(&c->last_error, atomic_load(&c->kafka_up), buf, cap);
}

int sp_consumer_kafka_up(const struct sp_consumer *c)
{
    return atomic_load(&c->kafka_up);
}

void sp_consumer_write_metrics(struct sp_consumer *c, struct tg_buf *b)
{
    tg_prom_gauge(b, "tollgate_spend_kafka_up", "1 when the Kafka brokers answered lately",
                  atomic_load(&c->kafka_up) ? 1.0 : 0.0);
    tg_prom_header(b, "tollgate_spend_consumer_lag", "gauge",
                   "Messages behind the high watermark, per assigned partition");
    pthread_mutex_lock(&c->mu);
    for (int i = 0; i < c->nparts; i++) {
        char p[16];
        struct tg_label l = {"partition", p};
        snprintf(p, sizeof(p), "%" PRId32, c->parts[i].id);
        tg_prom_sample(b, "tollgate_spend_consumer_lag", &l, 1, (double)c->parts[i].lag);
    }
    pthread_mutex_unlock(&c->mu);
    tg_prom_counter(b, "tollgate_spend_rebalances_total", "Consumer group rebalance events",
                    atomic_load(&c->rebalances));
    tg_prom_counter(b, "tollgate_spend_control_producer_renewals_total",
                    "Control topic producer instances replaced after a fatal error",
                    atomic_load(&c->producer_renewals));
    tg_prom_counter(b, "tollgate_spend_messages_discarded_total",
                    "Messages fetched while paused or after revocation (read again later)",
                    atomic_load(&c->discarded));
    tg_prom_counter(b, "tollgate_spend_partition_parks_total",
                    "Times a writer's partitions were paused because its batches were all taken",
                    atomic_load(&c->parks));
    tg_prom_counter(b, "tollgate_spend_kafka_errors_total", "Consumer errors",
                    atomic_load(&c->errors));
}
