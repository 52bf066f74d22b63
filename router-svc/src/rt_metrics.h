/* rt_metrics: router-svc's metrics registry. Fixed atomic counters only: the per group and per
 * deployment arrays are sized from the configuration at start and never grow. Label values
 * come from the configuration (group names, deployment ids) and from fixed tables (status
 * codes, outcomes), so a client cannot create a new series. LiteLLM's series beside them
 * (rt_metrics_litellm.h) add the key's labels, within a fixed number of label sets.
 *
 * Threads: the observe/inc functions are lock-free and called from any thread; rt_metrics_write
 * runs on the thread serving /metrics. */
#ifndef RT_METRICS_H
#define RT_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "keys.h"
#include "proto_event.h"
#include "router.h"
#include "tg_buf.h"

/* router-svc's /metrics body: Tollgate's own series and LiteLLM's (a label set with a
 * histogram and a few failure series, labels at their caps, is about 10 KB; the
 * RT_METRICS_LITELLM_KEY_SERIES sets plus one overflow set per deployment fit with room to
 * spare: router_metrics_test). Beyond it the body is cut (tg_buf). */
#define RT_METRICS_BODY_MAX_BYTES (4u * 1024u * 1024u)

struct rt_metrics;

/* Attempt outcomes (label "outcome"). */

/* Reasons a request was refused before routing (tollgate_router_rejected_total{reason}). */
enum rt_reject {
    RT_REJECT_BODY_TOO_LARGE = 0,
    RT_REJECT_IN_FLIGHT_FULL,
    RT_REJECT_UPSTREAM_FULL,
    RT_REJECT_BAD_JSON,
    RT_REJECT_AUTH,
    RT_REJECT_SHUTTING_DOWN,
    RT_REJECT_NOT_ADMITTED,
    RT_REJECT_HEADERS_TOO_LARGE,
    RT_REJECT_COUNT
};

/* Writes extra metric families (publisher/spool) into b at scrape time. */
typedef void (*rt_metrics_writer_fn)(struct tg_buf *b, void *ud);

/* rt_metrics_create: counters for the groups and deployments of cfg (borrowed; must outlive
 * the registry). Returns new (rt_metrics_destroy) or NULL. Main thread. */
struct rt_metrics *rt_metrics_create(const struct rt_config *cfg);
/* rt_metrics_destroy: free; sets *m to NULL; accepts NULL. After every user stopped. */
void rt_metrics_destroy(struct rt_metrics **m);

/* Observations. Names are borrowed for the call; a group or deployment the configuration does
 * not know is counted under model_group="" (requests) or not at all (per deployment), so a
 * client can never add a series. Lock-free; any thread. */

/* A request answered with status after seconds (also feeds the duration histogram). */
void rt_metrics_request(struct rt_metrics *m, const char *group, int status, double seconds);
/* One upstream attempt of key (NULL: no virtual key) answered http_status (0: none) and its
 * outcome (also LiteLLM's litellm_deployment_* series, rt_metrics_litellm.h). */
void rt_metrics_attempt(struct rt_metrics *m, const struct rt_key *key, const char *deployment_id,
                        int http_status, enum rt_error_class o);
/* A request's spend event (borrowed for the call), for LiteLLM's per-key series
 * (rt_metrics_litellm.h). */
void rt_metrics_event(struct rt_metrics *m, const struct proto_event *ev);
/* A retry inside group; a fallback from one group to another; a deployment cooled down. */
void rt_metrics_retry(struct rt_metrics *m, const char *group);
void rt_metrics_fallback(struct rt_metrics *m, const char *from, const char *to);
void rt_metrics_cooldown(struct rt_metrics *m, const char *deployment_id);
/* A call that used tokens of a deployment without a price (its cost is 0). */
void rt_metrics_unpriced(struct rt_metrics *m, const char *deployment_id);
/* Time spent in router-svc itself for one request, seconds. */
void rt_metrics_overhead(struct rt_metrics *m, double seconds);
/* In-flight gauge: add +1/-1; read. */
void rt_metrics_in_flight_add(struct rt_metrics *m, int delta);
int64_t rt_metrics_in_flight(const struct rt_metrics *m);
/* A request refused before routing. */
void rt_metrics_reject(struct rt_metrics *m, enum rt_reject r);
/* The completion hook ran once more; the count so far. */
void rt_metrics_completed_hook(struct rt_metrics *m);
uint64_t rt_metrics_completed(const struct rt_metrics *m);

/* rt_metrics_set_writer: register one extra writer (replaces the previous). Main thread,
 * before serving. */
void rt_metrics_set_writer(struct rt_metrics *m, rt_metrics_writer_fn fn, void *ud);

/* rt_metrics_write: the whole exposition into b (fixed capacity; cut when full). */
void rt_metrics_write(struct rt_metrics *m, struct tg_buf *b);

#endif
