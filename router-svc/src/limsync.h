/* limsync: the exchange of limiter counts between router replicas through Redis, on a thread of
 * its own (never an event loop, never a request: the request path waits on nothing but the
 * client and the provider).
 *
 * Every sync_interval_ms the thread
 * 1. copies this replica's subjects out of the limiter under the router's mutex (a copy, at most
 *    sync_subjects_max subjects, rotating over the table when it holds more);
 * 2. without any lock, sends them to Redis in pipelined EVALs of one Lua script
 *    (RT_LIMSYNC_BATCH subjects each). The script registers this replica in a sorted set scored
 *    by Redis's own clock (TIME: replicas need not agree on the time), drops the replicas not seen
 *    for live_ms (3 intervals + the timeout), stores this replica's window counts for each subject
 *    in a hash field named after it (HSET + EXPIRE: absolute counts, not deltas, so a lost reply
 *    or a retried round never counts twice), and answers, per subject, the sum over the other
 *    live replicas, and the number of live replicas;
 * 3. hands the sums back to the limiter under the mutex (rt_router_limits_import).
 * A failed round (connect refused, timeout, an error reply, a reply of the wrong shape) is
 * counted; the connection is closed and opened again with a backoff (interval .. 2 s). Without an
 * import for the limiter's stale time the limiter divides every limit by the replicas last seen
 * (limiter.h). Nothing here touches readiness.
 *
 * Bounds: subjects per round (sync_subjects_max), subjects per EVAL (RT_LIMSYNC_BATCH), EVALs
 * in one pipeline (RT_LIMSYNC_PIPELINE), replicas read per subject (RT_LIMSYNC_REPLICAS_MAX),
 * each reply at most TG_REDIS_REPLY_MAX bytes, connect and each exchange timeout_ms.
 *
 * Threads: start/stop on the main thread; the stats are atomics read by /metrics. */
#ifndef RT_LIMSYNC_H
#define RT_LIMSYNC_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "router.h"

#define RT_LIMSYNC_BATCH 128         /* subjects per EVAL */
#define RT_LIMSYNC_PIPELINE 8        /* EVALs sent before their replies are read */
#define RT_LIMSYNC_REPLICAS_MAX 64   /* live replicas whose counts are summed per subject */
#define RT_LIMSYNC_SUBJECT_TTL_S 120 /* expiry of a subject's hash: two windows */
#define RT_LIMSYNC_BACKOFF_MAX_MS 2000u
#define RT_LIMSYNC_PREFIX "tg:rl:"   /* Redis key prefix */

struct rt_limsync_stats {
    uint64_t rounds;        /* rounds that exchanged counts */
    uint64_t failures;      /* rounds (or connects) that failed */
    uint32_t replicas_seen; /* the limiter's (>= 1) */
    int fallback;           /* 1: limits divided by replicas_seen (no fresh exchange) */
    int connected;          /* 1 while the connection works */
};

struct rt_limsync;

/* rt_limsync_stale_ms: how long a replica stays in the live set without a round, and after how
 * long without an import the limiter falls back: 3 intervals + the timeout. */
uint64_t rt_limsync_stale_ms(const struct rt_redis_conf *conf);

/* rt_limsync_start: enable the router's global limits and start the thread (conf and router
 * borrowed: they outlive the sync). Redis need not be up: the thread keeps trying. Returns new
 * (rt_limsync_stop) or NULL with err. */
struct rt_limsync *rt_limsync_start(struct rt_router *router, const struct rt_redis_conf *conf,
                                    char *err, size_t errlen);

/* rt_limsync_stop: stop the thread (within one exchange's timeout), free; sets *s to NULL;
 * accepts NULL. */
void rt_limsync_stop(struct rt_limsync **s);

/* rt_limsync_get_stats: counters and the limiter's state now. Any thread. */
void rt_limsync_get_stats(struct rt_limsync *s, struct rt_limsync_stats *out);

/* rt_limsync_replica_id: this replica's id in Redis (borrowed, valid until stop). */
const char *rt_limsync_replica_id(const struct rt_limsync *s);

#endif
