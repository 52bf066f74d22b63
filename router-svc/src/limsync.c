/* limsync: see limsync.h. */
#include "limsync.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "limsync_reply.h"
#include "tg_err.h"
#include "tg_ids.h"
#include "tg_log.h"
#include "tg_redis.h"
#include "tg_time.h"

#define ID_CAP 96 /* replica id, bytes incl. NUL */
#define NUM_CAP 24
#define SUBJECT_CAP (2 + RT_LIMITER_SUBJECT_MAX + 1 + PROTO_MODEL_CAP + 1)

/* ARGV: id, live_ms, ttl_s, prefix, replicas_max, then per subject: name, reqs, tokens,
 * in_flight. Answer: {live replicas, then per subject: the other live replicas' reqs, tokens,
 * in_flight}. The replicas' set is scored by Redis's clock. A value that is not "R T P" (digits)
 * counts nothing. */
static const char SCRIPT[] =
    "local t = redis.call('TIME')\n"
    "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
    "local id, live_ms, ttl = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])\n"
    "local pfx, maxr = ARGV[4], tonumber(ARGV[5])\n"
    "local zs = pfx .. 'replicas'\n"
    "redis.call('ZADD', zs, now, id)\n"
    "redis.call('ZREMRANGEBYSCORE', zs, '-inf', '(' .. (now - live_ms))\n"
    "redis.call('PEXPIRE', zs, live_ms * 4)\n"
    "local live = redis.call('ZRANGE', zs, 0, maxr - 1)\n"
    "local out = {redis.call('ZCARD', zs)}\n"
    "for i = 6, #ARGV - 3, 4 do\n"
    "  local k = pfx .. 's:' .. ARGV[i]\n"
    "  redis.call('HSET', k, id, ARGV[i + 1] .. ' ' .. ARGV[i + 2] .. ' ' .. ARGV[i + 3])\n"
    "  redis.call('EXPIRE', k, ttl)\n"
    "  local r, tk, p = 0, 0, 0\n"
    "  for _, rid in ipairs(live) do\n"
    "    if rid ~= id then\n"
    "      local v = redis.call('HGET', k, rid)\n"
    "      if v then\n"
    "        local a, b, c = string.match(v, '^(%d+) (%d+) (%d+)$')\n"
    "        if a then r = r + tonumber(a); tk = tk + tonumber(b); p = p + tonumber(c) end\n"
    "      end\n"
    "    end\n"
    "  end\n"
    "  out[#out + 1] = r; out[#out + 1] = tk; out[#out + 1] = p\n"
    "end\n"
    "return out\n";

#define ARGS_MAX (8 + 4 * RT_LIMSYNC_BATCH) /* EVAL script 0 id live_ms ttl prefix max, subjects */

struct rt_limsync {
    struct rt_router *router;          /* borrowed */
    const struct rt_redis_conf *conf;  /* borrowed */
    char id[ID_CAP];
    uint64_t live_ms;
    pthread_t thread;
    int started;
    pthread_mutex_t lock; /* guards stop, with cond */
    pthread_cond_t cond;
    int stop;
    struct rt_limiter_sync_entry *entries; /* sync_subjects_max */
    uint32_t cursor;
    struct tg_redis_conn *conn;
    uint32_t backoff_ms;
    char names[RT_LIMSYNC_BATCH][SUBJECT_CAP]; /* one EVAL's arguments, formatted */
    char nums[RT_LIMSYNC_BATCH][3][NUM_CAP];
    _Atomic uint64_t rounds;
    _Atomic uint64_t failures;
    _Atomic int connected;
};

uint64_t rt_limsync_stale_ms(const struct rt_redis_conf *conf)
{
    return 3u * (uint64_t)conf->sync_interval_ms + conf->timeout_ms;
}

const char *rt_limsync_replica_id(const struct rt_limsync *s)
{
    return s->id;
}

static void subject_name(const struct rt_limiter_sync_entry *e, char out[SUBJECT_CAP])
{
    switch (e->kind) {
    case RT_LIMITER_SUBJECT_DEPLOYMENT:
        snprintf(out, SUBJECT_CAP, "d:%u", (unsigned)e->idx);
        break;
    case RT_LIMITER_SUBJECT_KEY:
        snprintf(out, SUBJECT_CAP, "k:%s", e->hash);
        break;
    default:
        snprintf(out, SUBJECT_CAP, "g:%s:%s", e->hash, e->group);
        break;
    }
}

/* append_batch: one EVAL for entries [from, from + n). 0 or -1. */
static int append_batch(struct rt_limsync *s, uint32_t from, uint32_t n)
{
    char (*names)[SUBJECT_CAP] = s->names;
    char (*nums)[3][NUM_CAP] = s->nums;
    char fixed[3][NUM_CAP];
    const char *argv[ARGS_MAX];
    size_t lens[ARGS_MAX];
    int argc = 0;

    snprintf(fixed[0], NUM_CAP, "%llu", (unsigned long long)s->live_ms);
    snprintf(fixed[1], NUM_CAP, "%d", RT_LIMSYNC_SUBJECT_TTL_S);
    snprintf(fixed[2], NUM_CAP, "%d", RT_LIMSYNC_REPLICAS_MAX);
    argv[argc++] = "EVAL";
    argv[argc++] = SCRIPT;
    argv[argc++] = "0";
    argv[argc++] = s->id;
    argv[argc++] = fixed[0];
    argv[argc++] = fixed[1];
    argv[argc++] = RT_LIMSYNC_PREFIX;
    argv[argc++] = fixed[2];
    for (uint32_t i = 0; i < n; i++) {
        const struct rt_limiter_sync_entry *e = &s->entries[from + i];

        subject_name(e, names[i]);
        snprintf(nums[i][0], NUM_CAP, "%llu", (unsigned long long)e->reqs);
        snprintf(nums[i][1], NUM_CAP, "%llu", (unsigned long long)e->tokens);
        snprintf(nums[i][2], NUM_CAP, "%u", (unsigned)e->in_flight);
        argv[argc++] = names[i];
        argv[argc++] = nums[i][0];
        argv[argc++] = nums[i][1];
        argv[argc++] = nums[i][2];
    }
    for (int i = 0; i < argc; i++)
        lens[i] = strlen(argv[i]);
    return tg_redis_conn_append(s->conn, argc, argv, lens);
}

/* exchange: n exported entries through Redis; their remote counts filled, *replicas set. 0 or
 * -1 (the reason logged, rate-limited). */
static int exchange(struct rt_limsync *s, uint32_t n, uint32_t *replicas)
{
    uint32_t done = 0;

    *replicas = 1;
    /* a round with nothing to exchange still registers this replica and learns the others */
    do {
        uint32_t sent = 0, from = done;

        while (sent < RT_LIMSYNC_PIPELINE && (sent == 0 || done < n)) {
            uint32_t b = n - done < RT_LIMSYNC_BATCH ? n - done : RT_LIMSYNC_BATCH;

            if (append_batch(s, done, b) != 0) {
                if (sent > 0)
                    break; /* the pipeline buffer is full: read what was sent first */
                TG_WARN_RL("msg=\"limit sync: cannot queue a command\" subjects=%u", b);
                return -1;
            }
            done += b;
            sent++;
        }
        for (uint32_t i = 0; i < sent; i++) {
            redisReply *r = tg_redis_conn_reply(s->conn);
            uint32_t b = n - from < RT_LIMSYNC_BATCH ? n - from : RT_LIMSYNC_BATCH;
            char why[128];
            int rc;

            if (r == NULL) {
                TG_WARN_RL("msg=\"limit sync failed\" reason=\"%s\"",
                           tg_redis_conn_error(s->conn));
                return -1;
            }
            rc = rt_limsync_reply_apply(r, &s->entries[from], b, replicas, why, sizeof(why));
            freeReplyObject(r);
            if (rc != 0) {
                TG_WARN_RL("msg=\"limit sync: unexpected reply\" reason=\"%s\"", why);
                /* the pipeline's later replies are not read: the caller drops the connection */
                return -1;
            }
            from += b;
        }
    } while (done < n);
    return 0;
}

static void drop_conn(struct rt_limsync *s)
{
    tg_redis_conn_close(&s->conn);
    atomic_store(&s->connected, 0);
}

static int connect_redis(struct rt_limsync *s)
{
    const struct rt_redis_conf *c = s->conf;
    struct tg_redis_conn_opts o;
    char err[TG_REDIS_ERR_CAP];

    memset(&o, 0, sizeof(o));
    o.host = c->host;
    o.port = c->port;
    o.db = c->db;
    o.username = c->username;
    o.password = c->password;
    o.tls = c->tls;
    o.ca_file = c->ca_file;
    o.cert_file = c->cert_file;
    o.key_file = c->key_file;
    o.server_name = c->server_name;
    o.timeout_ms = c->timeout_ms;
    s->conn = tg_redis_conn_open(&o, err, sizeof(err));
    if (s->conn == NULL) {
        TG_WARN_RL("msg=\"limit sync: Redis unreachable, limits divided by the replicas seen\" "
                   "redis=%s:%d reason=\"%s\"",
                   c->host, c->port, err);
        return -1;
    }
    atomic_store(&s->connected, 1);
    TG_INFO("msg=\"limit sync connected\" redis=%s:%d replica=%s", c->host, c->port, s->id);
    return 0;
}

static void round_once(struct rt_limsync *s)
{
    uint64_t now = tg_now_mono_ms();
    uint32_t n, replicas = 1;

    if (s->conn == NULL && connect_redis(s) != 0) {
        atomic_fetch_add(&s->failures, 1);
        s->backoff_ms = s->backoff_ms * 2 > RT_LIMSYNC_BACKOFF_MAX_MS ? RT_LIMSYNC_BACKOFF_MAX_MS
                                                                      : s->backoff_ms * 2;
        return;
    }
    n = rt_router_limits_export(s->router, now, s->entries, s->conf->sync_subjects_max,
                                &s->cursor);
    if (exchange(s, n, &replicas) != 0) {
        atomic_fetch_add(&s->failures, 1);
        drop_conn(s);
        s->backoff_ms = s->conf->sync_interval_ms;
        return;
    }
    rt_router_limits_import(s->router, s->entries, n, replicas, tg_now_mono_ms());
    atomic_fetch_add(&s->rounds, 1);
    s->backoff_ms = s->conf->sync_interval_ms;
}

static void *sync_main(void *arg)
{
    struct rt_limsync *s = arg;

    for (;;) {
        struct timespec ts;
        int stop;

        tg_mono_deadline(s->backoff_ms, &ts);
        pthread_mutex_lock(&s->lock);
        while (!s->stop && pthread_cond_timedwait(&s->cond, &s->lock, &ts) == 0)
            ;
        stop = s->stop;
        pthread_mutex_unlock(&s->lock);
        if (stop)
            break;
        round_once(s);
    }
    drop_conn(s);
    return NULL;
}

struct rt_limsync *rt_limsync_start(struct rt_router *router, const struct rt_redis_conf *conf,
                                    char *err, size_t errlen)
{
    struct rt_limsync *s = calloc(1, sizeof(*s));
    char host[64] = "";
    unsigned char rnd[6] = {0};

    if (s == NULL) {
        snprintf(err, errlen, "limit sync: out of memory");
        return NULL;
    }
    s->router = router;
    s->conf = conf;
    s->live_ms = rt_limsync_stale_ms(conf);
    s->backoff_ms = conf->sync_interval_ms;
    gethostname(host, sizeof(host) - 1);
    tg_random_bytes(rnd, sizeof(rnd));
    snprintf(s->id, sizeof(s->id), "%.63s:%ld:%02x%02x%02x%02x%02x%02x", host, (long)getpid(),
             rnd[0], rnd[1], rnd[2], rnd[3], rnd[4], rnd[5]);
    pthread_mutex_init(&s->lock, NULL);
    {
        pthread_condattr_t ca;

        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&s->cond, &ca);
        pthread_condattr_destroy(&ca);
    }
    s->entries = calloc(conf->sync_subjects_max, sizeof(*s->entries));
    if (s->entries == NULL) {
        snprintf(err, errlen, "limit sync: out of memory for %u subjects",
                 conf->sync_subjects_max);
        rt_limsync_stop(&s);
        return NULL;
    }
    rt_router_limits_enable(router, rt_limsync_stale_ms(conf));
    if (pthread_create(&s->thread, NULL, sync_main, s) != 0) {
        snprintf(err, errlen, "limit sync: cannot start its thread");
        rt_limsync_stop(&s);
        return NULL;
    }
    s->started = 1;
    return s;
}

void rt_limsync_stop(struct rt_limsync **ps)
{
    struct rt_limsync *s = ps != NULL ? *ps : NULL;

    if (s == NULL)
        return;
    if (s->started) {
        pthread_mutex_lock(&s->lock);
        s->stop = 1;
        pthread_cond_signal(&s->cond);
        pthread_mutex_unlock(&s->lock);
        pthread_join(s->thread, NULL);
    }
    tg_redis_conn_close(&s->conn);
    pthread_cond_destroy(&s->cond);
    pthread_mutex_destroy(&s->lock);
    free(s->entries);
    free(s);
    *ps = NULL;
}

void rt_limsync_get_stats(struct rt_limsync *s, struct rt_limsync_stats *out)
{
    struct rt_limiter_global_state g;

    memset(out, 0, sizeof(*out));
    out->rounds = atomic_load(&s->rounds);
    out->failures = atomic_load(&s->failures);
    out->connected = atomic_load(&s->connected);
    rt_router_limits_global(s->router, tg_now_mono_ms(), &g);
    out->replicas_seen = g.replicas_seen;
    out->fallback = g.fallback;
}
