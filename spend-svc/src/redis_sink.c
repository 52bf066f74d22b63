#include "redis_sink.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <hiredis/hiredis.h>

#include "tg_err.h"
#include "tg_log.h"
#include "tg_metrics.h"
#include "tg_time.h"

#define SP_REDIS_SENTINEL "tg:spend:sentinel"
#define SP_REDIS_NFIELDS 5
#define SP_REDIS_IDLE_WAIT_MS 100       /* thread wake-up when idle */
#define SP_REDIS_SENTINEL_EVERY_MS 1000 /* sentinel check while idle */
#define SP_REDIS_BACKOFF_MIN_MS 100
#define SP_REDIS_BACKOFF_MAX_MS 2000
#define SP_REDIS_REBUILD_FACTOR 2       /* snapshot capacity = factor x pending_max */

static const char *const sp_redis_fields[SP_REDIS_NFIELDS] = {
    "requests", "failures", "prompt_tokens", "completion_tokens", "cost_nusd"};

/* One counter (a Redis hash) and the amounts to add to (or set in) its five fields. */
struct ctr {
    char name[SP_REDIS_KEY_MAX];
    int64_t v[SP_REDIS_NFIELDS];
    int32_t ttl_s;
    uint8_t used;
};

/* Open-addressing map of counters with a fixed capacity. used[] lists occupied slots so that
 * iteration and clearing cost the number of entries, not the number of slots. */
struct cmap {
    struct ctr *slot;
    size_t nslots; /* power of two, >= cap * 4 / 3 */
    size_t *used;  /* [cap] slot indexes in use */
    size_t n;
    size_t cap;
};

struct sp_redis_sink {
    char host[256];
    int port;
    int db;
    int timeout_ms;
    int day_ttl_s;
    struct sp_redis_periods periods;
    struct sp_pg *pg;              /* rebuild connection, Redis thread only */

    pthread_mutex_t gate;          /* commit gate, see header */
    _Atomic int gate_wanted;       /* rebuilds waiting for the gate */
    pthread_mutex_t mu;            /* guards active, rebuild_due, flushing_n */
    pthread_cond_t cond;
    struct cmap maps[2];
    struct cmap *active;           /* consumer merges here */
    struct cmap *flushing;         /* Redis thread sends this one */
    size_t flushing_n;             /* entries being sent (for metrics), under mu */
    int rebuild_due;               /* under mu */
    int stop;                      /* under mu */
    struct cmap snap;              /* rebuild snapshot, Redis thread only */

    redisContext *c;               /* Redis thread only */
    pthread_t thread;
    int thread_started;

    _Atomic int up;
    _Atomic uint64_t flushes;
    _Atomic uint64_t flush_errors;
    _Atomic uint64_t increments_sent;
    _Atomic uint64_t rebuilds;
    _Atomic uint64_t rebuild_errors;
    _Atomic uint64_t overflows;
    _Atomic uint64_t snapshot_full;
};

/* Map ----------------------------------------------------------------------------------------- */

static uint64_t hash_str(const char *s)
{
    uint64_t h = 1469598103934665603ULL;
    while (*s) {
        h ^= (unsigned char)*s++;
        h *= 1099511628211ULL;
    }
    return h;
}

static int cmap_init(struct cmap *m, size_t cap)
{
    size_t n = 16;
    while (n < cap + cap / 3 + 1)
        n *= 2;
    m->slot = calloc(n, sizeof(*m->slot));
    m->used = calloc(cap, sizeof(*m->used));
    if (!m->slot || !m->used)
        return TG_ENOMEM;
    m->nslots = n;
    m->cap = cap;
    m->n = 0;
    return 0;
}

static void cmap_fini(struct cmap *m)
{
    free(m->slot);
    free(m->used);
    memset(m, 0, sizeof(*m));
}

static void cmap_clear(struct cmap *m)
{
    for (size_t i = 0; i < m->n; i++)
        m->slot[m->used[i]].used = 0;
    m->n = 0;
}

/* cmap_get: the counter named name, created when absent. NULL when the map is full. */
static struct ctr *cmap_get(struct cmap *m, const char *name, int32_t ttl_s)
{
    size_t mask = m->nslots - 1;
    size_t i = (size_t)hash_str(name) & mask;

    for (;;) {
        struct ctr *c = &m->slot[i];
        if (!c->used)
            break;
        if (strcmp(c->name, name) == 0)
            return c;
        i = (i + 1) & mask;
    }
    if (m->n >= m->cap)
        return NULL;
    struct ctr *c = &m->slot[i];
    memset(c->v, 0, sizeof(c->v));
    snprintf(c->name, sizeof(c->name), "%s", name);
    c->ttl_s = ttl_s;
    c->used = 1;
    m->used[m->n++] = i;
    return c;
}

static int cmap_add(struct cmap *m, const char *name, const int64_t *v, int32_t ttl_s)
{
    struct ctr *c = cmap_get(m, name, ttl_s);
    if (!c)
        return TG_EFULL;
    for (int k = 0; k < SP_REDIS_NFIELDS; k++)
        c->v[k] += v[k];
    if (ttl_s > c->ttl_s)
        c->ttl_s = ttl_s;
    return 0;
}

/* Names ------------------------------------------------------------------------------------------ */

static void day_of(int64_t epoch_s, char out[11])
{
    time_t t = (time_t)epoch_s;
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(out, 11, "%Y-%m-%d", &tm);
}

int sp_redis_sink_counter_name(char *out, size_t cap, const char *kind, const char *subject,
                               const char *day, int64_t period_s, int64_t ts_s)
{
    int n;

    if (period_s > 0) {
        int64_t start = ts_s - (ts_s % period_s);
        n = snprintf(out, cap, "tg:spend:period:%" PRId64 ":%" PRId64 ":%s:%s", period_s, start,
                     kind, subject);
    } else {
        n = snprintf(out, cap, "tg:spend:day:%s:%s:%s", day, kind, subject);
    }
    if (n < 0 || (size_t)n >= cap)
        return TG_ETOOBIG;
    return 0;
}

/* Consumer side ------------------------------------------------------------------------------------ */

void sp_redis_sink_gate_lock(struct sp_redis_sink *s)
{
    pthread_mutex_lock(&s->gate);
}

void sp_redis_sink_gate_unlock(struct sp_redis_sink *s)
{
    pthread_mutex_unlock(&s->gate);
}

int sp_redis_sink_gate_wanted(struct sp_redis_sink *s)
{
    return atomic_load(&s->gate_wanted) > 0;
}

void sp_redis_sink_gate_yield(struct sp_redis_sink *s)
{
    /* the consumer would take the mutex back before a woken rebuild runs: let it in first
     * (rare: a start, an empty Redis or a full map), for at most 100 ms */
    for (int i = 0; i < 100 && atomic_load(&s->gate_wanted) > 0; i++)
        tg_sleep_ms(1);
}

/* add_one: merge v into counter name; on a full map schedule a rebuild. mu held. */
static void add_one(struct sp_redis_sink *s, const char *name, const int64_t *v, int32_t ttl_s)
{
    if (s->rebuild_due)
        return; /* the rebuild will read these from Postgres */
    if (cmap_add(s->active, name, v, ttl_s) < 0) {
        cmap_clear(s->active);
        s->rebuild_due = 1;
        atomic_fetch_add(&s->overflows, 1);
        TG_WARN_RL("msg=\"redis pending map full, counters will be rebuilt from postgres\" "
                   "capacity=%zu",
                   s->active->cap);
    }
}

void sp_redis_sink_add(struct sp_redis_sink *s, const struct sp_pg_incr *incr, int n)
{
    char name[SP_REDIS_KEY_MAX];
    char day[11];

    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < n; i++) {
        const struct sp_pg_incr *in = &incr[i];
        int64_t v[SP_REDIS_NFIELDS] = {in->requests, in->failures, in->prompt_tokens,
                                       in->completion_tokens, in->cost_nusd};
        int64_t ts_s = in->minute_ms / 1000;
        day_of(ts_s, day);
        if (in->key_hash[0]) {
            int64_t p;
            if (sp_redis_sink_counter_name(name, sizeof(name), "key", in->key_hash, day, 0, 0) ==
                0)
                add_one(s, name, v, s->day_ttl_s);
            p = s->periods.period_of ? s->periods.period_of(s->periods.ctx, 0, in->key_hash) : 0;
            if (p > 0 && sp_redis_sink_counter_name(name, sizeof(name), "key", in->key_hash,
                                                    day, p, ts_s) == 0)
                add_one(s, name, v, (int32_t)(p + 86400 > INT32_MAX ? INT32_MAX : p + 86400));
        }
        if (in->team_id[0]) {
            int64_t p;
            if (sp_redis_sink_counter_name(name, sizeof(name), "team", in->team_id, day, 0, 0) ==
                0)
                add_one(s, name, v, s->day_ttl_s);
            p = s->periods.period_of ? s->periods.period_of(s->periods.ctx, 1, in->team_id) : 0;
            if (p > 0 && sp_redis_sink_counter_name(name, sizeof(name), "team", in->team_id, day,
                                                    p, ts_s) == 0)
                add_one(s, name, v, (int32_t)(p + 86400 > INT32_MAX ? INT32_MAX : p + 86400));
        }
        if (in->model_group[0] &&
            sp_redis_sink_counter_name(name, sizeof(name), "model", in->model_group, day, 0, 0) ==
                0)
            add_one(s, name, v, s->day_ttl_s);
    }
    pthread_cond_signal(&s->cond);
    pthread_mutex_unlock(&s->mu);
}

int sp_redis_sink_is_up(const struct sp_redis_sink *s)
{
    return atomic_load(&s->up);
}

int sp_redis_sink_synced(struct sp_redis_sink *s)
{
    int synced;
    pthread_mutex_lock(&s->mu);
    synced = s->active->n == 0 && s->flushing_n == 0 && !s->rebuild_due && atomic_load(&s->up);
    pthread_mutex_unlock(&s->mu);
    return synced;
}

/* Redis thread -------------------------------------------------------------------------------------- */

static void redis_drop(struct sp_redis_sink *s)
{
    if (s->c) {
        redisFree(s->c);
        s->c = NULL;
    }
    atomic_store(&s->up, 0);
}

static int redis_connect(struct sp_redis_sink *s)
{
    struct timeval tv = {.tv_sec = s->timeout_ms / 1000, .tv_usec = (s->timeout_ms % 1000) * 1000};
    redisReply *r;

    s->c = redisConnectWithTimeout(s->host, s->port, tv);
    if (!s->c || s->c->err)
        goto fail;
    if (redisSetTimeout(s->c, tv) != REDIS_OK)
        goto fail;
    if (s->db != 0) {
        r = redisCommand(s->c, "SELECT %d", s->db);
        if (!r || r->type == REDIS_REPLY_ERROR) {
            if (r)
                freeReplyObject(r);
            goto fail;
        }
        freeReplyObject(r);
    }
    return 0;
fail:
    TG_WARN_RL("msg=\"redis connect failed\" port=%d", s->port);
    redis_drop(s);
    return TG_EUNAVAIL;
}

/* redis_sentinel: 1 present, 0 absent, TG_EUNAVAIL on a connection problem. */
static int redis_sentinel(struct sp_redis_sink *s)
{
    redisReply *r = redisCommand(s->c, "EXISTS %s", SP_REDIS_SENTINEL);
    int rc;

    if (!r) {
        redis_drop(s);
        return TG_EUNAVAIL;
    }
    rc = r->type == REDIS_REPLY_INTEGER ? (r->integer > 0) : TG_EUNAVAIL;
    freeReplyObject(r);
    if (rc < 0)
        redis_drop(s);
    else
        atomic_store(&s->up, 1);
    return rc;
}

/* redis_exec_pipeline: read nreplies replies; the last must be EXEC's array (all fields ok).
 * Returns 0 or TG_EIO. */
static int redis_read_replies(struct sp_redis_sink *s, size_t nreplies)
{
    int rc = 0;
    for (size_t i = 0; i < nreplies; i++) {
        void *reply = NULL;
        redisReply *r;
        if (redisGetReply(s->c, &reply) != REDIS_OK || !reply)
            return TG_EIO;
        r = reply;
        if (r->type == REDIS_REPLY_ERROR)
            rc = TG_EIO;
        if (i == nreplies - 1 && r->type != REDIS_REPLY_ARRAY)
            rc = TG_EIO;
        freeReplyObject(r);
    }
    return rc;
}

/* redis_flush: send the flushing map. Before anything is written a sentinel check proves the
 * connection is alive (and that Redis still holds our data); if that fails the map is merged
 * back, untouched. Once MULTI/EXEC went out, a failure leaves the outcome unknown: rebuild. */
static int redis_flush(struct sp_redis_sink *s)
{
    struct cmap *m = s->flushing;
    size_t cmds = 0;
    int present;
    int rc;

    present = redis_sentinel(s);
    if (present < 0) {
        /* nothing sent: merge back what we hold */
        pthread_mutex_lock(&s->mu);
        for (size_t i = 0; i < m->n && !s->rebuild_due; i++) {
            struct ctr *c = &m->slot[m->used[i]];
            add_one(s, c->name, c->v, c->ttl_s);
        }
        cmap_clear(m);
        s->flushing_n = 0;
        pthread_mutex_unlock(&s->mu);
        return TG_EUNAVAIL;
    }
    if (present == 0) {
        TG_WARN("msg=\"redis lost its counters (sentinel missing), rebuilding from postgres\"");
        goto rebuild;
    }
    redisAppendCommand(s->c, "MULTI");
    cmds++;
    for (size_t i = 0; i < m->n; i++) {
        struct ctr *c = &m->slot[m->used[i]];
        for (int k = 0; k < SP_REDIS_NFIELDS; k++) {
            if (c->v[k] == 0)
                continue;
            redisAppendCommand(s->c, "HINCRBY %s %s %lld", c->name, sp_redis_fields[k],
                               (long long)c->v[k]);
            cmds++;
        }
        redisAppendCommand(s->c, "EXPIRE %s %d", c->name, (int)c->ttl_s);
        cmds++;
    }
    redisAppendCommand(s->c, "EXEC");
    cmds++;
    rc = redis_read_replies(s, cmds);
    if (rc < 0) {
        atomic_fetch_add(&s->flush_errors, 1);
        TG_WARN_RL("msg=\"redis flush failed, outcome unknown, rebuilding from postgres\"");
        redis_drop(s);
        goto rebuild;
    }
    atomic_fetch_add(&s->flushes, 1);
    atomic_fetch_add(&s->increments_sent, m->n);
    pthread_mutex_lock(&s->mu);
    cmap_clear(m);
    s->flushing_n = 0;
    pthread_mutex_unlock(&s->mu);
    return 0;
rebuild:
    pthread_mutex_lock(&s->mu);
    cmap_clear(m);
    s->flushing_n = 0;
    s->rebuild_due = 1;
    pthread_mutex_unlock(&s->mu);
    return TG_EIO;
}

struct snap_ctx {
    struct sp_redis_sink *s;
    const char *day;
};

static void snap_day_row(void *ctx, const char *kind, const char *subject,
                         const struct sp_pg_totals *t)
{
    struct snap_ctx *sc = ctx;
    char name[SP_REDIS_KEY_MAX];
    int64_t v[SP_REDIS_NFIELDS] = {t->requests, t->failures, t->prompt_tokens,
                                   t->completion_tokens, t->cost_nusd};

    if (sp_redis_sink_counter_name(name, sizeof(name), kind, subject, sc->day, 0, 0) < 0)
        return;
    if (cmap_add(&sc->s->snap, name, v, sc->s->day_ttl_s) < 0)
        atomic_fetch_add(&sc->s->snapshot_full, 1);
}

/* snap_periods: current-period totals of every key (by_team 0) or team (1) with a budget. */
static int snap_periods(struct sp_redis_sink *s, int by_team, int64_t now_s)
{
    int cap = (int)s->snap.cap;
    char (*subj)[SP_PG_SUBJECT_MAX] = NULL;
    const char **subjp = NULL;
    int64_t *period = NULL;
    int64_t *since = NULL;
    struct sp_pg_totals *tot = NULL;
    int n;
    int rc = 0;

    if (!s->periods.list)
        return 0;
    subj = calloc((size_t)cap, sizeof(*subj));
    subjp = calloc((size_t)cap, sizeof(*subjp));
    period = calloc((size_t)cap, sizeof(*period));
    since = calloc((size_t)cap, sizeof(*since));
    tot = calloc((size_t)cap, sizeof(*tot));
    if (!subj || !subjp || !period || !since || !tot) {
        rc = TG_ENOMEM;
        goto out;
    }
    n = s->periods.list(s->periods.ctx, by_team, subj, period, cap);
    for (int i = 0; i < n; i++) {
        subjp[i] = subj[i];
        since[i] = (now_s - now_s % period[i]) * 1000;
    }
    rc = sp_pg_totals_since(s->pg, by_team, subjp, since, n, tot);
    if (rc < 0)
        goto out;
    for (int i = 0; i < n; i++) {
        char name[SP_REDIS_KEY_MAX];
        int64_t v[SP_REDIS_NFIELDS] = {tot[i].requests, tot[i].failures, tot[i].prompt_tokens,
                                       tot[i].completion_tokens, tot[i].cost_nusd};
        int32_t ttl = (int32_t)(period[i] + 86400 > INT32_MAX ? INT32_MAX : period[i] + 86400);
        if (sp_redis_sink_counter_name(name, sizeof(name), by_team ? "team" : "key", subj[i], "",
                                       period[i], now_s) < 0)
            continue;
        if (cmap_add(&s->snap, name, v, ttl) < 0)
            atomic_fetch_add(&s->snapshot_full, 1);
    }
out:
    free(subj);
    free(subjp);
    free(period);
    free(since);
    free(tot);
    return rc;
}

/* redis_rebuild: see the header. Returns 0, TG_EUNAVAIL (Redis) or a Postgres error. */
static int redis_rebuild(struct sp_redis_sink *s)
{
    int64_t now_s = (int64_t)(tg_now_epoch_ms() / 1000);
    char day[11];
    struct snap_ctx sc = {.s = s, .day = day};
    size_t cmds = 0;
    int rc;

    day_of(now_s, day);
    cmap_clear(&s->snap);
    atomic_fetch_add(&s->gate_wanted, 1);
    sp_redis_sink_gate_lock(s);
    atomic_fetch_sub(&s->gate_wanted, 1);
    pthread_mutex_lock(&s->mu);
    cmap_clear(s->active);
    cmap_clear(s->flushing);
    s->flushing_n = 0;
    s->rebuild_due = 0;
    pthread_mutex_unlock(&s->mu);
    rc = sp_pg_day_totals(s->pg, day, snap_day_row, &sc);
    if (rc == 0)
        rc = snap_periods(s, 0, now_s);
    if (rc == 0)
        rc = snap_periods(s, 1, now_s);
    if (rc < 0) {
        pthread_mutex_lock(&s->mu);
        s->rebuild_due = 1;
        pthread_mutex_unlock(&s->mu);
    }
    sp_redis_sink_gate_unlock(s);
    if (rc < 0) {
        atomic_fetch_add(&s->rebuild_errors, 1);
        TG_WARN_RL("msg=\"redis rebuild: postgres snapshot failed\" err=%s", tg_errname(rc));
        return rc;
    }

    redisAppendCommand(s->c, "MULTI");
    cmds++;
    for (size_t i = 0; i < s->snap.n; i++) {
        struct ctr *c = &s->snap.slot[s->snap.used[i]];
        redisAppendCommand(s->c, "DEL %s", c->name);
        redisAppendCommand(s->c, "HSET %s %s %lld %s %lld %s %lld %s %lld %s %lld", c->name,
                           sp_redis_fields[0], (long long)c->v[0], sp_redis_fields[1],
                           (long long)c->v[1], sp_redis_fields[2], (long long)c->v[2],
                           sp_redis_fields[3], (long long)c->v[3], sp_redis_fields[4],
                           (long long)c->v[4]);
        redisAppendCommand(s->c, "EXPIRE %s %d", c->name, (int)c->ttl_s);
        cmds += 3;
    }
    redisAppendCommand(s->c, "SET %s %lld", SP_REDIS_SENTINEL, (long long)tg_now_epoch_ms());
    redisAppendCommand(s->c, "EXEC");
    cmds += 2;
    rc = redis_read_replies(s, cmds);
    if (rc < 0) {
        atomic_fetch_add(&s->rebuild_errors, 1);
        TG_WARN_RL("msg=\"redis rebuild: write failed\"");
        redis_drop(s);
        pthread_mutex_lock(&s->mu);
        s->rebuild_due = 1;
        pthread_mutex_unlock(&s->mu);
        return TG_EUNAVAIL;
    }
    atomic_store(&s->up, 1);
    atomic_fetch_add(&s->rebuilds, 1);
    TG_INFO("msg=\"redis counters rebuilt from postgres\" counters=%zu day=%s", s->snap.n, day);
    return 0;
}

/* wait_ms: sleep on the condition for up to ms; returns 1 when stopping. */
static int wait_ms(struct sp_redis_sink *s, uint64_t ms)
{
    struct timespec ts;
    int stop;

    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += (time_t)(ms / 1000);
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&s->mu);
    if (!s->stop)
        pthread_cond_timedwait(&s->cond, &s->mu, &ts);
    stop = s->stop;
    pthread_mutex_unlock(&s->mu);
    return stop;
}

static void *redis_thread(void *arg)
{
    struct sp_redis_sink *s = arg;
    uint64_t backoff = SP_REDIS_BACKOFF_MIN_MS;
    uint64_t next_sentinel = 0;

    for (;;) {
        int stop;
        int due;

        pthread_mutex_lock(&s->mu);
        stop = s->stop;
        pthread_mutex_unlock(&s->mu);
        if (!s->c) {
            if (stop || redis_connect(s) < 0) {
                if (stop || wait_ms(s, backoff))
                    break;
                backoff = backoff * 2 > SP_REDIS_BACKOFF_MAX_MS ? SP_REDIS_BACKOFF_MAX_MS
                                                                : backoff * 2;
                continue;
            }
            next_sentinel = 0;
        }
        if (tg_now_mono_ms() >= next_sentinel) {
            int present = redis_sentinel(s);
            if (present < 0)
                continue;
            next_sentinel = tg_now_mono_ms() + SP_REDIS_SENTINEL_EVERY_MS;
            if (present == 0) {
                pthread_mutex_lock(&s->mu);
                s->rebuild_due = 1;
                pthread_mutex_unlock(&s->mu);
            }
        }
        pthread_mutex_lock(&s->mu);
        due = s->rebuild_due;
        pthread_mutex_unlock(&s->mu);
        if (due) {
            int rc = redis_rebuild(s);
            if (rc < 0) {
                if (wait_ms(s, backoff))
                    break;
                backoff = backoff * 2 > SP_REDIS_BACKOFF_MAX_MS ? SP_REDIS_BACKOFF_MAX_MS
                                                                : backoff * 2;
                continue;
            }
        }
        backoff = SP_REDIS_BACKOFF_MIN_MS;
        pthread_mutex_lock(&s->mu);
        if (s->active->n == 0 && !s->stop && !s->rebuild_due) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += SP_REDIS_IDLE_WAIT_MS * 1000000L;
            if (ts.tv_nsec >= 1000000000L) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000L;
            }
            pthread_cond_timedwait(&s->cond, &s->mu, &ts);
        }
        if (s->active->n > 0 && !s->rebuild_due) {
            struct cmap *t = s->active;
            s->active = s->flushing;
            s->flushing = t;
            s->flushing_n = t->n;
        }
        stop = s->stop;
        pthread_mutex_unlock(&s->mu);
        if (s->flushing->n > 0) {
            if (redis_flush(s) == 0)
                next_sentinel = tg_now_mono_ms() + SP_REDIS_SENTINEL_EVERY_MS;
        }
        if (stop)
            break;
    }
    redis_drop(s);
    return NULL;
}

/* Life cycle ----------------------------------------------------------------------------------------- */

struct sp_redis_sink *sp_redis_sink_create(const struct sp_redis_sink_config *cfg, char *err,
                                           size_t errlen)
{
    struct sp_redis_sink *s = calloc(1, sizeof(*s));
    size_t cap = cfg->pending_max > 0 ? (size_t)cfg->pending_max : 0;

    if (!s || cap == 0) {
        snprintf(err, errlen, s ? "redis pending_max must be > 0" : "out of memory");
        free(s);
        return NULL;
    }
    snprintf(s->host, sizeof(s->host), "%s", cfg->host);
    s->port = cfg->port;
    s->db = cfg->db;
    s->timeout_ms = cfg->timeout_ms;
    s->day_ttl_s = cfg->day_ttl_s;
    s->periods = cfg->periods;
    pthread_mutex_init(&s->gate, NULL);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cond, NULL);
    if (cmap_init(&s->maps[0], cap) < 0 || cmap_init(&s->maps[1], cap) < 0 ||
        cmap_init(&s->snap, cap * SP_REDIS_REBUILD_FACTOR) < 0) {
        snprintf(err, errlen, "out of memory for %zu counters", cap);
        goto fail;
    }
    s->active = &s->maps[0];
    s->flushing = &s->maps[1];
    s->rebuild_due = 1; /* at start: the current period is rebuilt from Postgres */
    s->pg = sp_pg_create(cfg->pg_dsn, cfg->pg_timeout_ms, err, errlen);
    if (!s->pg)
        goto fail;
    if (pthread_create(&s->thread, NULL, redis_thread, s) != 0) {
        snprintf(err, errlen, "cannot start the redis thread");
        goto fail;
    }
    s->thread_started = 1;
    return s;
fail:
    sp_redis_sink_destroy(&s);
    return NULL;
}

void sp_redis_sink_destroy(struct sp_redis_sink **sp)
{
    struct sp_redis_sink *s;

    if (!sp || !*sp)
        return;
    s = *sp;
    if (s->thread_started) {
        pthread_mutex_lock(&s->mu);
        s->stop = 1;
        pthread_cond_broadcast(&s->cond);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->thread, NULL);
    }
    redis_drop(s);
    sp_pg_destroy(&s->pg);
    cmap_fini(&s->maps[0]);
    cmap_fini(&s->maps[1]);
    cmap_fini(&s->snap);
    pthread_cond_destroy(&s->cond);
    pthread_mutex_destroy(&s->mu);
    pthread_mutex_destroy(&s->gate);
    free(s);
    *sp = NULL;
}

void sp_redis_sink_write_metrics(struct sp_redis_sink *s, struct tg_buf *b)
{
    size_t pending;

    pthread_mutex_lock(&s->mu);
    pending = s->active->n + s->flushing_n;
    pthread_mutex_unlock(&s->mu);
    tg_prom_gauge(b, "tollgate_spend_redis_up", "1 when the last Redis exchange succeeded",
                  atomic_load(&s->up) ? 1.0 : 0.0);
    tg_prom_gauge(b, "tollgate_spend_redis_pending_increments",
                  "Counters waiting to be sent to Redis", (double)pending);
    tg_prom_counter(b, "tollgate_spend_redis_flushes_total", "Pipelined flushes applied",
                    atomic_load(&s->flushes));
    tg_prom_counter(b, "tollgate_spend_redis_flush_errors_total",
                    "Flushes whose outcome was unknown (followed by a rebuild)",
                    atomic_load(&s->flush_errors));
    tg_prom_counter(b, "tollgate_spend_redis_rebuilds_total",
                    "Counter rebuilds from Postgres", atomic_load(&s->rebuilds));
    tg_prom_counter(b, "tollgate_spend_redis_rebuild_errors_total", "Failed rebuild attempts",
                    atomic_load(&s->rebuild_errors));
    tg_prom_counter(b, "tollgate_spend_redis_pending_overflows_total",
                    "Times the pending map was full (capacity redis.pending_max)",
                    atomic_load(&s->overflows));
    tg_prom_counter(b, "tollgate_spend_redis_snapshot_full_total",
                    "Counters left out of a rebuild because the snapshot was full",
                    atomic_load(&s->snapshot_full));
}
