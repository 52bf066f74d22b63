#include "redis_sink.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "tg_redis.h"
#include "tg_err.h"
#include "tg_hash.h"
#include "tg_log.h"
#include "tg_metrics.h"
#include "tg_period.h"
#include "tg_time.h"

#define SP_REDIS_SENTINEL "tg:spend:sentinel"
#define SP_REDIS_REBUILDING "tg:spend:rebuilding"   /* held by the replica rebuilding */
#define SP_REDIS_SNAPSHOT_PREFIX "tg:spend:snapshot:" /* + topic: offsets of the last rebuild */
#define SP_REDIS_REBUILDING_TTL_MS 5000 /* a rebuilder that dies lets go after this (one that
                                         * runs longer loses it and starts again: safe) */
#define SP_REDIS_DEFER_WAIT_MS 20        /* retry of a flush deferred by another's rebuild */
#define SP_REDIS_OFFSETS_MAX (SP_PG_PARTITIONS_MAX * 24 + 1) /* "partition:next," each */
#define SP_REDIS_NFIELDS 5
#define SP_REDIS_IDLE_WAIT_MS 100       /* thread wake-up when idle */
#define SP_REDIS_SENTINEL_EVERY_MS 1000 /* sentinel check while idle */
#define SP_REDIS_BACKOFF_MIN_MS 100
#define SP_REDIS_BACKOFF_MAX_MS 2000
#define SP_REDIS_REBUILD_FACTOR 2       /* snapshot capacity = factor x pending_max */

/* The five fields of a counter, in this order everywhere (the scripts name them): requests,
 * failures, prompt_tokens, completion_tokens, cost_nusd. */

/* One counter (a Redis hash) and the amounts to add to (or set in) its five fields. */
struct ctr {
    char name[SP_REDIS_KEY_MAX];
    int64_t v[SP_REDIS_NFIELDS];
    int32_t ttl_s;
    uint8_t used;
};

/* Open-addressing map of counters with a fixed capacity. used[] lists occupied slots so that
 * iteration and clearing cost the number of entries, not the number of slots. A pending map
 * also knows which offsets its increments come from: per partition, the lowest first offset
 * and the highest next offset of the batches merged into it. */
struct cmap {
    struct ctr *slot;
    size_t nslots; /* power of two, >= cap * 4 / 3 */
    size_t *used;  /* [cap] slot indexes in use */
    size_t n;
    size_t cap;
    int32_t *rpart; /* [SP_PG_PARTITIONS_MAX] */
    int64_t *rfirst;
    int64_t *rnext;
    int nr;
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
    char topic[256];               /* events topic: its offsets define what a rebuild holds */
    char snapshot_key[300];        /* SP_REDIS_SNAPSHOT_PREFIX + topic */
    char *offsets;                 /* [SP_REDIS_OFFSETS_MAX] rebuild snapshot's offsets */
    char token[64];                /* our SP_REDIS_REBUILDING value until a rebuild succeeds (a
                                    * flag set by a lost reply is ours to take again) */

    struct tg_redis_conn *c;       /* Redis thread only */
    struct tg_redis_conn_opts conn; /* its strings point into the fields below */
    char username[128];
    char password[256];
    char ca_file[256];
    char cert_file[256];
    char key_file[256];
    char server_name[256];
    char reason[TG_REDIS_ERR_CAP]; /* why Redis is away ("" when up or not known), under mu */
    pthread_t thread;
    int thread_started;

    _Atomic int up;
    _Atomic uint64_t flushes;
    _Atomic uint64_t flush_errors;
    _Atomic uint64_t increments_sent;
    _Atomic uint64_t rebuilds;
    _Atomic uint64_t rebuild_errors;
    _Atomic uint64_t overflows;
    _Atomic uint64_t doubtful; /* rebuilds after a statement whose outcome was unknown */
    _Atomic uint64_t takeovers; /* rebuilds after partitions not held were assigned */
    _Atomic uint64_t snapshot_full;
    _Atomic uint64_t skipped;
    _Atomic uint64_t deferred;
    _Atomic uint64_t mixed;
};

/* Map ----------------------------------------------------------------------------------------- */

static int cmap_init(struct cmap *m, size_t cap)
{
    size_t n = 16;
    while (n < cap + cap / 3 + 1)
        n *= 2;
    m->slot = calloc(n, sizeof(*m->slot));
    m->used = calloc(cap, sizeof(*m->used));
    m->rpart = calloc(SP_PG_PARTITIONS_MAX, sizeof(*m->rpart));
    m->rfirst = calloc(SP_PG_PARTITIONS_MAX, sizeof(*m->rfirst));
    m->rnext = calloc(SP_PG_PARTITIONS_MAX, sizeof(*m->rnext));
    if (!m->slot || !m->used || !m->rpart || !m->rfirst || !m->rnext)
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
    free(m->rpart);
    free(m->rfirst);
    free(m->rnext);
    memset(m, 0, sizeof(*m));
}

static void cmap_clear(struct cmap *m)
{
    for (size_t i = 0; i < m->n; i++)
        m->slot[m->used[i]].used = 0;
    m->n = 0;
    m->nr = 0;
}

/* cmap_ranges: merge offset ranges (per partition [first, next)) into m's. */
static void cmap_ranges(struct cmap *m, const int32_t *parts, const int64_t *first,
                        const int64_t *next, int n)
{
    for (int i = 0; i < n; i++) {
        int j;
        for (j = 0; j < m->nr && m->rpart[j] != parts[i]; j++)
            ;
        if (j == m->nr) {
            if (m->nr >= SP_PG_PARTITIONS_MAX)
                continue; /* cannot happen: a topic has at most that many partitions */
            m->rpart[j] = parts[i];
            m->rfirst[j] = first[i];
            m->rnext[j] = next[i];
            m->nr++;
            continue;
        }
        if (first[i] < m->rfirst[j])
            m->rfirst[j] = first[i];
        if (next[i] > m->rnext[j])
            m->rnext[j] = next[i];
    }
}

/* cmap_get: the counter named name, created when absent. NULL when the map is full. */
static struct ctr *cmap_get(struct cmap *m, const char *name, int32_t ttl_s)
{
    size_t mask = m->nslots - 1;
    size_t i = (size_t)tg_hash_fnv1a64_str(name) & mask;

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
        int64_t start;

        tg_period_window(period_s, ts_s * 1000, &start, NULL);
        start /= 1000;
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

void sp_redis_sink_takeover(struct sp_redis_sink *s)
{
    pthread_mutex_lock(&s->mu);
    s->rebuild_due = 1; /* its snapshot holds every commit up to it: what is pending is dropped */
    pthread_cond_signal(&s->cond);
    pthread_mutex_unlock(&s->mu);
    atomic_fetch_add(&s->takeovers, 1);
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

void sp_redis_sink_add(struct sp_redis_sink *s, const struct sp_pg_flush_result *res)
{
    char name[SP_REDIS_KEY_MAX];
    char day[11];
    const struct sp_pg_incr *incr = res->incr;
    int n = res->nincr;

    pthread_mutex_lock(&s->mu);
    if (res->in_doubt && !s->rebuild_due) {
        /* a statement given up earlier may have been committed behind our back: what Redis
         * was sent so far and what is pending cannot be trusted to add up, read it all back */
        cmap_clear(s->active);
        s->rebuild_due = 1;
        atomic_fetch_add(&s->doubtful, 1);
        TG_WARN("msg=\"a postgres statement given up earlier may have committed, redis "
                "counters will be rebuilt from postgres\"");
    }
    if (!s->rebuild_due && n > 0)
        cmap_ranges(s->active, res->parts, res->first, res->next, res->nparts);
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

void sp_redis_sink_reason(struct sp_redis_sink *s, char *out, size_t cap)
{
    pthread_mutex_lock(&s->mu);
    snprintf(out, cap, "%s", atomic_load(&s->up) ? "" : s->reason);
    pthread_mutex_unlock(&s->mu);
}

/* Redis thread -------------------------------------------------------------------------------------- */

static void set_reason(struct sp_redis_sink *s, const char *why)
{
    pthread_mutex_lock(&s->mu);
    snprintf(s->reason, sizeof(s->reason), "%s", why);
    pthread_mutex_unlock(&s->mu);
}

static void redis_drop(struct sp_redis_sink *s)
{
    if (s->c) {
        if (tg_redis_conn_error(s->c)[0] != '\0')
            set_reason(s, tg_redis_conn_error(s->c));
        tg_redis_conn_close(&s->c);
    }
    atomic_store(&s->up, 0);
}

static int redis_connect(struct sp_redis_sink *s)
{
    char err[TG_REDIS_ERR_CAP];

    s->c = tg_redis_conn_open(&s->conn, err, sizeof(err));
    if (s->c == NULL) {
        TG_WARN_RL("msg=\"redis connect failed\" port=%d tls=%d reason=\"%s\"", s->port,
                   s->conn.tls, err);
        set_reason(s, err);
        atomic_store(&s->up, 0);
        return TG_EUNAVAIL;
    }
    return 0;
}

/* redis_sentinel: 1 present, 0 absent, TG_EUNAVAIL on a connection problem. */
static int redis_sentinel(struct sp_redis_sink *s)
{
    redisReply *r = tg_redis_conn_cmd(s->c, "EXISTS %s", SP_REDIS_SENTINEL);
    int rc;

    if (!r) {
        redis_drop(s);
        return TG_EUNAVAIL;
    }
    rc = r->type == REDIS_REPLY_INTEGER ? (r->integer > 0) : TG_EUNAVAIL;
    if (rc < 0)
        set_reason(s, r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply to EXISTS");
    freeReplyObject(r);
    if (rc < 0) {
        redis_drop(s);
    } else {
        if (!atomic_exchange(&s->up, 1))
            set_reason(s, "");
    }
    return rc;
}

/* Flushes and rebuilds are Lua scripts, so that each is checked and applied at once even with
 * several replicas sharing the counters.
 *
 * A rebuild (any replica) takes SP_REDIS_REBUILDING, reads the totals and the events topic's
 * consumer_offsets in one Postgres snapshot, and writes the totals together with those offsets
 * (the snapshot key). Every batch commit moves consumer_offsets of its partitions from the
 * batch's first offsets to its next ones in the same transaction as its rows, so a flush whose
 * batches were committed before the snapshot has next <= the snapshot's offset on each of its
 * partitions (its increments are in the rebuilt totals: skipped), and one committed after has
 * first >= it (applied). A flush made of batches on both sides cannot be split: it is dropped
 * and the counters are rebuilt again. While a rebuild runs, flushes are deferred (kept and
 * retried), since what a rebuild overwrites must be what its snapshot holds.
 *
 * FLUSH: KEYS sentinel, rebuilding, snapshot, counters...; ARGV nranges, (partition, first,
 * next) x nranges, then per counter ttl and the five values. */
static const char flush_lua[] =
    "if redis.call('EXISTS', KEYS[1]) == 0 then return 'LOST' end\n"
    "if redis.call('EXISTS', KEYS[2]) == 1 then return 'DEFER' end\n"
    "local nr = tonumber(ARGV[1])\n"
    "local snap = redis.call('GET', KEYS[3])\n"
    "if snap then\n"
    "  local s = {}\n"
    "  for p, n in string.gmatch(snap, '(%d+):(%d+)') do s[p] = tonumber(n) end\n"
    "  local vis, invis = 0, 0\n"
    "  for i = 0, nr - 1 do\n"
    "    local c = s[ARGV[2 + 3 * i]] or -1\n"
    "    if c >= tonumber(ARGV[4 + 3 * i]) then vis = vis + 1\n"
    "    elseif c <= tonumber(ARGV[3 + 3 * i]) then invis = invis + 1\n"
    "    else return 'MIXED' end\n"
    "  end\n"
    "  if vis > 0 and invis > 0 then return 'MIXED' end\n"
    "  if vis > 0 then return 'SKIP' end\n"
    "end\n"
    "local f = {'requests', 'failures', 'prompt_tokens', 'completion_tokens', 'cost_nusd'}\n"
    "local a = 2 + 3 * nr\n"
    "for k = 4, #KEYS do\n"
    "  for j = 1, 5 do\n"
    "    if ARGV[a + j] ~= '0' then redis.call('HINCRBY', KEYS[k], f[j], ARGV[a + j]) end\n"
    "  end\n"
    "  redis.call('EXPIRE', KEYS[k], ARGV[a])\n"
    "  a = a + 6\n"
    "end\n"
    "return 'OK'\n";

/* REBUILD: KEYS rebuilding, sentinel, snapshot, counters...; ARGV token, snapshot offsets,
 * sentinel value, then per counter ttl and the five values. */
static const char rebuild_lua[] =
    "if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 'LOST' end\n"
    "local f = {'requests', 'failures', 'prompt_tokens', 'completion_tokens', 'cost_nusd'}\n"
    "local a = 4\n"
    "for k = 4, #KEYS do\n"
    "  redis.call('DEL', KEYS[k])\n"
    "  redis.call('HSET', KEYS[k], f[1], ARGV[a + 1], f[2], ARGV[a + 2], f[3], ARGV[a + 3],"
    " f[4], ARGV[a + 4], f[5], ARGV[a + 5])\n"
    "  redis.call('EXPIRE', KEYS[k], ARGV[a])\n"
    "  a = a + 6\n"
    "end\n"
    "redis.call('SET', KEYS[3], ARGV[2])\n"
    "redis.call('SET', KEYS[2], ARGV[3])\n"
    "redis.call('DEL', KEYS[1])\n"
    "return 'OK'\n";

/* An EVAL command being built: argv pointers and lengths, numbers formatted into an arena. */
struct evalcmd {
    const char **argv;
    size_t *len;
    char *num;      /* arena of formatted numbers */
    size_t num_off;
    size_t num_cap;
    int argc;
    int cap;
    int dropped;    /* an argument did not fit (cannot happen: sized for the map) */
};

static int eval_init(struct evalcmd *e, int cap, size_t nums)
{
    memset(e, 0, sizeof(*e));
    e->argv = malloc((size_t)cap * sizeof(*e->argv));
    e->len = malloc((size_t)cap * sizeof(*e->len));
    e->num_cap = nums * 24 + 1;
    e->num = malloc(e->num_cap);
    e->cap = cap;
    if (!e->argv || !e->len || !e->num)
        return TG_ENOMEM;
    return 0;
}

static void eval_fini(struct evalcmd *e)
{
    free(e->argv);
    free(e->len);
    free(e->num);
}

static void eval_str(struct evalcmd *e, const char *p, size_t n)
{
    if (e->argc < e->cap) {
        e->argv[e->argc] = p;
        e->len[e->argc] = n;
        e->argc++;
    } else {
        e->dropped = 1;
    }
}

static void eval_i64(struct evalcmd *e, int64_t v)
{
    int n;

    if (e->num_off + 24 > e->num_cap) {
        e->dropped = 1;
        return;
    }
    n = snprintf(e->num + e->num_off, 24, "%" PRId64, v);
    eval_str(e, e->num + e->num_off, (size_t)n);
    e->num_off += (size_t)n + 1;
}

/* eval_counters: each counter's ttl and five values (the arguments after the fixed ones). */
static void eval_counters(struct evalcmd *e, const struct cmap *m)
{
    for (size_t i = 0; i < m->n; i++) {
        const struct ctr *c = &m->slot[m->used[i]];
        eval_i64(e, c->ttl_s);
        for (int k = 0; k < SP_REDIS_NFIELDS; k++)
            eval_i64(e, c->v[k]);
    }
}

/* eval_run: send e, read the status reply into out. Returns 0, TG_EIO (an error reply: nothing
 * was applied, scripts run whole or not at all) or TG_EUNAVAIL (no reply: outcome unknown). */
static int eval_run(struct sp_redis_sink *s, struct evalcmd *e, char *out, size_t outcap)
{
    redisReply *r;

    if (e->dropped) {
        /* cannot happen: sized for the map (an argument may have been left out) */
        TG_ERROR("msg=\"redis script arguments did not fit\" argc=%d", e->argc);
        return TG_EIO;
    }
    r = tg_redis_conn_argv(s->c, e->argc, e->argv, e->len);
    if (!r)
        return TG_EUNAVAIL;
    if (r->type != REDIS_REPLY_STATUS && r->type != REDIS_REPLY_STRING) {
        if (r->type == REDIS_REPLY_ERROR)
            TG_WARN_RL("msg=\"redis script failed\" err=\"%.120s\"", r->str);
        freeReplyObject(r);
        return TG_EIO;
    }
    snprintf(out, outcap, "%s", r->str);
    freeReplyObject(r);
    return 0;
}

/* redis_flush: send the flushing map. Before anything is written a sentinel check proves the
 * connection is alive; if that fails the map is merged back, untouched. Once the script went
 * out, a lost reply leaves the outcome unknown: rebuild. Returns 0 (applied or skipped),
 * TG_EAGAIN (deferred: the map is kept for a retry) or a tg_err (rebuild due, or Redis away). */
static int redis_flush(struct sp_redis_sink *s)
{
    struct cmap *m = s->flushing;
    struct evalcmd e;
    char verdict[16];
    int present;
    int rc;

    present = redis_sentinel(s);
    if (present < 0) {
        /* nothing sent: merge back what we hold */
        pthread_mutex_lock(&s->mu);
        if (!s->rebuild_due)
            cmap_ranges(s->active, m->rpart, m->rfirst, m->rnext, m->nr);
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
    /* EVAL, script, numkeys, 3 + n keys, nranges, 3 per range, 6 per counter */
    if (eval_init(&e, 8 + (int)m->n * 7 + m->nr * 3, (size_t)m->nr * 3 + m->n * 6 + 2) < 0) {
        eval_fini(&e);
        TG_WARN_RL("msg=\"redis flush: out of memory, rebuilding from postgres\"");
        goto rebuild;
    }
    eval_str(&e, "EVAL", 4);
    eval_str(&e, flush_lua, sizeof(flush_lua) - 1);
    eval_i64(&e, 3 + (int64_t)m->n);
    eval_str(&e, SP_REDIS_SENTINEL, strlen(SP_REDIS_SENTINEL));
    eval_str(&e, SP_REDIS_REBUILDING, strlen(SP_REDIS_REBUILDING));
    eval_str(&e, s->snapshot_key, strlen(s->snapshot_key));
    for (size_t i = 0; i < m->n; i++) {
        const struct ctr *c = &m->slot[m->used[i]];
        eval_str(&e, c->name, strlen(c->name));
    }
    eval_i64(&e, m->nr);
    for (int i = 0; i < m->nr; i++) {
        eval_i64(&e, m->rpart[i]);
        eval_i64(&e, m->rfirst[i]);
        eval_i64(&e, m->rnext[i]);
    }
    eval_counters(&e, m);
    rc = eval_run(s, &e, verdict, sizeof(verdict));
    eval_fini(&e);
    if (rc == TG_EUNAVAIL) {
        atomic_fetch_add(&s->flush_errors, 1);
        TG_WARN_RL("msg=\"redis flush failed, outcome unknown, rebuilding from postgres\"");
        redis_drop(s);
        goto rebuild;
    }
    if (rc < 0) {
        atomic_fetch_add(&s->flush_errors, 1);
        goto rebuild;
    }
    if (strcmp(verdict, "DEFER") == 0) {
        atomic_fetch_add(&s->deferred, 1);
        return TG_EAGAIN;
    }
    if (strcmp(verdict, "LOST") == 0) {
        TG_WARN("msg=\"redis lost its counters (sentinel missing), rebuilding from postgres\"");
        goto rebuild;
    }
    if (strcmp(verdict, "MIXED") == 0) {
        /* batches committed before and after another replica's rebuild snapshot: cannot be
         * split, the counters are rebuilt again (rare: a rebuild during a flush's batches) */
        atomic_fetch_add(&s->mixed, 1);
        TG_INFO("msg=\"redis increments straddle a rebuild snapshot, rebuilding again\"");
        goto rebuild;
    }
    if (strcmp(verdict, "SKIP") == 0)
        atomic_fetch_add(&s->skipped, 1);
    else
        atomic_fetch_add(&s->increments_sent, m->n);
    atomic_fetch_add(&s->flushes, 1);
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
        tg_period_window(period[i], now_s * 1000, &since[i], NULL);
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

/* rebuild_release: let go of SP_REDIS_REBUILDING if it is still ours (a failed rebuild). */
static void rebuild_release(struct sp_redis_sink *s, const char *token)
{
    redisReply *r;

    if (!s->c)
        return;
    r = tg_redis_conn_cmd(s->c, "EVAL %s 1 %s %s",
                          "if redis.call('GET', KEYS[1]) == ARGV[1] then"
                          " redis.call('DEL', KEYS[1]) end return 0",
                          SP_REDIS_REBUILDING, token);
    if (r)
        freeReplyObject(r);
    else
        redis_drop(s);
}

/* redis_rebuild: see the comment above flush_lua and the header. Returns 0, TG_EAGAIN
 * (another replica is rebuilding), TG_EUNAVAIL (Redis) or a Postgres error. */
static int redis_rebuild(struct sp_redis_sink *s)
{
    int64_t now_s = (int64_t)(tg_now_epoch_ms() / 1000);
    char day[11];
    const char *token = s->token;
    char sentinel[32];
    char verdict[16];
    struct snap_ctx sc = {.s = s, .day = day};
    struct evalcmd e;
    redisReply *r;
    int taken;
    int rc;

    day_of(now_s, day);
    if (token[0] == '\0')
        snprintf(s->token, sizeof(s->token), "%ld-%" PRIu64, (long)getpid(), tg_now_mono_us());
    r = tg_redis_conn_cmd(s->c, "EVAL %s 1 %s %s %d",
                          "local v = redis.call('GET', KEYS[1]) if v == false or v == ARGV[1] then"
                          " redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]) return 1 end"
                          " return 0",
                          SP_REDIS_REBUILDING, token, SP_REDIS_REBUILDING_TTL_MS);
    if (!r) {
        redis_drop(s);
        return TG_EUNAVAIL;
    }
    taken = r->type == REDIS_REPLY_INTEGER && r->integer == 1;
    freeReplyObject(r);
    if (!taken)
        return TG_EAGAIN; /* its snapshot covers our commits up to now: ours follows it */
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
    rc = sp_pg_snapshot_begin(s->pg, s->topic, s->offsets, SP_REDIS_OFFSETS_MAX);
    if (rc == 0)
        rc = sp_pg_day_totals(s->pg, day, snap_day_row, &sc);
    if (rc == 0)
        rc = snap_periods(s, 0, now_s);
    if (rc == 0)
        rc = snap_periods(s, 1, now_s);
    if (sp_pg_snapshot_end(s->pg) < 0 && rc == 0)
        rc = TG_EUNAVAIL;
    if (rc < 0) {
        pthread_mutex_lock(&s->mu);
        s->rebuild_due = 1;
        pthread_mutex_unlock(&s->mu);
    }
    sp_redis_sink_gate_unlock(s);
    if (rc < 0) {
        atomic_fetch_add(&s->rebuild_errors, 1);
        TG_WARN_RL("msg=\"redis rebuild: postgres snapshot failed\" err=%s", tg_errname(rc));
        rebuild_release(s, token);
        return rc;
    }

    snprintf(sentinel, sizeof(sentinel), "%" PRIu64, tg_now_epoch_ms());
    /* EVAL, script, numkeys, 3 + n keys, 3 fixed values, 6 per counter */
    rc = eval_init(&e, 10 + (int)s->snap.n * 7, s->snap.n * 6 + 2);
    if (rc == 0) {
        eval_str(&e, "EVAL", 4);
        eval_str(&e, rebuild_lua, sizeof(rebuild_lua) - 1);
        eval_i64(&e, 3 + (int64_t)s->snap.n);
        eval_str(&e, SP_REDIS_REBUILDING, strlen(SP_REDIS_REBUILDING));
        eval_str(&e, SP_REDIS_SENTINEL, strlen(SP_REDIS_SENTINEL));
        eval_str(&e, s->snapshot_key, strlen(s->snapshot_key));
        for (size_t i = 0; i < s->snap.n; i++) {
            const struct ctr *c = &s->snap.slot[s->snap.used[i]];
            eval_str(&e, c->name, strlen(c->name));
        }
        eval_str(&e, token, strlen(token));
        eval_str(&e, s->offsets, strlen(s->offsets));
        eval_str(&e, sentinel, strlen(sentinel));
        eval_counters(&e, &s->snap);
        rc = eval_run(s, &e, verdict, sizeof(verdict));
    }
    eval_fini(&e);
    if (rc == 0 && strcmp(verdict, "OK") != 0)
        rc = TG_EAGAIN; /* held too long: another replica took over; start again */
    if (rc < 0) {
        atomic_fetch_add(&s->rebuild_errors, 1);
        TG_WARN_RL("msg=\"redis rebuild: write failed\" err=%s", tg_errname(rc));
        if (rc == TG_EUNAVAIL)
            redis_drop(s);
        else
            rebuild_release(s, token);
        pthread_mutex_lock(&s->mu);
        s->rebuild_due = 1;
        pthread_mutex_unlock(&s->mu);
        return rc == TG_EAGAIN ? TG_EAGAIN : TG_EUNAVAIL;
    }
    s->token[0] = '\0'; /* the next rebuild takes a new one */
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
            if (rc == TG_EAGAIN) {
                /* another replica is rebuilding: try again once it is done */
                if (wait_ms(s, SP_REDIS_DEFER_WAIT_MS * 5))
                    break;
                continue;
            }
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
        if (s->active->n == 0 && s->flushing->n == 0 && !s->stop && !s->rebuild_due) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += SP_REDIS_IDLE_WAIT_MS * 1000000L;
            if (ts.tv_nsec >= 1000000000L) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000L;
            }
            pthread_cond_timedwait(&s->cond, &s->mu, &ts);
        }
        if (s->flushing->n == 0 && s->active->n > 0 && !s->rebuild_due) {
            struct cmap *t = s->active;
            s->active = s->flushing;
            s->flushing = t;
            s->flushing_n = t->n;
        }
        stop = s->stop;
        pthread_mutex_unlock(&s->mu);
        if (s->flushing->n > 0) {
            int frc = redis_flush(s);
            if (frc == 0)
                next_sentinel = tg_now_mono_ms() + SP_REDIS_SENTINEL_EVERY_MS;
            else if (frc == TG_EAGAIN && !stop && wait_ms(s, SP_REDIS_DEFER_WAIT_MS))
                break; /* deferred by another replica's rebuild: the map is kept */
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
    snprintf(s->username, sizeof(s->username), "%s", cfg->username ? cfg->username : "");
    snprintf(s->password, sizeof(s->password), "%s", cfg->password ? cfg->password : "");
    snprintf(s->ca_file, sizeof(s->ca_file), "%s", cfg->ca_file ? cfg->ca_file : "");
    snprintf(s->cert_file, sizeof(s->cert_file), "%s", cfg->cert_file ? cfg->cert_file : "");
    snprintf(s->key_file, sizeof(s->key_file), "%s", cfg->key_file ? cfg->key_file : "");
    snprintf(s->server_name, sizeof(s->server_name), "%s",
             cfg->server_name ? cfg->server_name : "");
    s->conn.host = s->host;
    s->conn.port = s->port;
    s->conn.db = s->db;
    s->conn.username = s->username;
    s->conn.password = s->password;
    s->conn.tls = cfg->tls;
    s->conn.ca_file = s->ca_file;
    s->conn.cert_file = s->cert_file;
    s->conn.key_file = s->key_file;
    s->conn.server_name = s->server_name;
    s->conn.timeout_ms = cfg->timeout_ms > 0 ? (uint32_t)cfg->timeout_ms : 0;
    s->day_ttl_s = cfg->day_ttl_s;
    s->periods = cfg->periods;
    snprintf(s->topic, sizeof(s->topic), "%s", cfg->topic ? cfg->topic : "");
    snprintf(s->snapshot_key, sizeof(s->snapshot_key), "%s%s", SP_REDIS_SNAPSHOT_PREFIX,
             s->topic);
    pthread_mutex_init(&s->gate, NULL);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cond, NULL);
    s->offsets = malloc(SP_REDIS_OFFSETS_MAX);
    if (!s->offsets || cmap_init(&s->maps[0], cap) < 0 || cmap_init(&s->maps[1], cap) < 0 ||
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
    free(s->offsets);
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
    tg_prom_counter(b, "tollgate_spend_redis_doubtful_commit_rebuilds_total",
                    "Rebuilds because a PostgreSQL statement was given up after it was sent "
                    "(it may have committed).",
                    atomic_load(&s->doubtful));
    tg_prom_counter(b, "tollgate_spend_redis_takeover_rebuilds_total",
                    "Rebuilds because partitions this replica did not hold were assigned to it "
                    "(their last owner may have stopped between a commit and its flush)",
                    atomic_load(&s->takeovers));
    tg_prom_counter(b, "tollgate_spend_redis_flushes_skipped_total",
                    "Flushes whose batches another replica's rebuild already counted",
                    atomic_load(&s->skipped));
    tg_prom_counter(b, "tollgate_spend_redis_flushes_deferred_total",
                    "Flush attempts deferred while another replica was rebuilding",
                    atomic_load(&s->deferred));
    tg_prom_counter(b, "tollgate_spend_redis_flushes_mixed_total",
                    "Flushes straddling a rebuild snapshot (followed by a rebuild)",
                    atomic_load(&s->mixed));
    tg_prom_counter(b, "tollgate_spend_redis_snapshot_full_total",
                    "Counters left out of a rebuild because the snapshot was full",
                    atomic_load(&s->snapshot_full));
}
