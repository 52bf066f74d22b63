/* alerter_int: what alerter.c (queue, sender thread, metrics, life cycle) and alert_detect.c
 * (detectors) share; private to the two. Lock order: dmu before qmu, never the reverse. */
#ifndef SP_ALERTER_INT_H
#define SP_ALERTER_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "alert_bucket.h"
#include "alert_dedupe.h"
#include "alerter.h"
#include "proto_event.h"

/* Webhooks: at most one per type plus the default. */
#define SP_ALERTER_ROUTES_MAX (SP_ALERT_TYPE_COUNT + 1)
/* Dependencies watched by sp_alerter_dependency_state(), plus the consumer-lag state. */
#define SP_ALERTER_DEPS 4
#define SP_ALERTER_LAG_STATE SP_ALERTER_DEPS

/* One queued alert. */
struct alert_item {
    struct sp_alert alert; /* sanitized copy */
    uint64_t suppressed;   /* similar alerts suppressed before this one */
    uint32_t route;        /* index into routes */
    uint32_t tries;        /* POSTs made so far */
};

/* One webhook URL and its delivery state. Guarded by qmu. */
struct route {
    char url[SP_ALERTER_URL_CAP]; /* secret: never logged, "webhook#N" instead */
    struct sp_token_bucket tb;
    uint64_t blocked_until_ms; /* monotonic; nothing is sent before (429 or backoff) */
    uint32_t backoff_ms;       /* current backoff after 5xx/transport errors, 0 = none */
};

/* A windowed detector entry: a deployment (failures) or a model group (slow requests). */
struct det_entry {
    uint64_t hash; /* 0 = empty slot */
    char key[PROTO_MODEL_CAP];
    char group[PROTO_MODEL_CAP]; /* deployments: model group last seen */
    uint64_t window_start_ms;
    uint32_t total; /* attempts / requests in the window */
    uint32_t hits;  /* failures / slow requests in the window */
    int alerted;    /* alert raised in this window */
    int64_t worst_ms;
    int32_t last_status;
    char last_error_class[PROTO_ERROR_CLASS_CAP];
    char last_message[PROTO_MESSAGE_CAP];
};

/* Open-addressing table with a fixed capacity. Entries are never removed one by one: when it
 * is full, expired entries are dropped by rebuilding into the spare array (at most once per
 * window); if it is still full the new key is not tracked and full is counted. */
struct det_table {
    struct det_entry *slots;
    struct det_entry *spare;
    size_t nslots; /* power of two, >= 2 x capacity */
    size_t count;
    size_t capacity;
    uint64_t window_ms;
    uint64_t last_rebuild_ms;
    int rebuilt_once;
};

/* Degraded-state machine of a dependency (or of consumer lag). Guarded by dmu. */
struct dep_state {
    int unhealthy;  /* between the degraded alert and the recovery alert */
    int recovering; /* unhealthy, but reported healthy since healthy_since_ms */
    uint64_t down_since_ms;
    uint64_t last_notice_ms; /* degraded alert or last reminder */
    uint64_t healthy_since_ms;
};

struct sp_alerter {
    struct sp_alerter_config cfg;
    struct route routes[SP_ALERTER_ROUTES_MAX];
    uint32_t nroutes;
    int type_route[SP_ALERT_TYPE_COUNT];        /* -1 = disabled */
    const char *secrets[SP_ALERTER_ROUTES_MAX]; /* route URLs, for masking */

    /* Queue and delivery: qmu. */
    pthread_mutex_t qmu;
    pthread_cond_t qcv;
    struct alert_item *queue;
    size_t qcap, qhead, qlen;
    struct sp_dedupe *dedupe;
    pthread_t thread;
    int thread_started;
    _Atomic int stopping;
    _Atomic uint64_t stop_deadline_ms;

    /* Detectors: dmu. Lock order: dmu before qmu, never the reverse. */
    pthread_mutex_t dmu;
    struct det_table deployments;
    struct det_table groups;
    struct dep_state deps[SP_ALERTER_DEPS + 1];
    int64_t last_report_day; /* days since epoch of the last daily report, -1 none */

    _Atomic uint64_t counts[SP_ALERT_TYPE_COUNT][SP_ALERT_OUTCOME_COUNT];
    _Atomic uint64_t posts, http_429, retries, dedupe_full, deployments_full, groups_full;
};


/* sp_alerter_enqueue: sanitize a copy of *alert (borrowed), apply the type filter and (when
 * dedupe) the window, then queue it. Returns 0 queued, 1 not queued by design. Takes qmu. */
int sp_alerter_enqueue(struct sp_alerter *al, const struct sp_alert *alert, int dedupe);

/* sp_alert_det_init / sp_alert_det_fini: a detector table for capacity keys over window_ms
 * (init returns 0 or TG_ENOMEM; fini frees, accepts a table init failed on). Life cycle. */
int sp_alert_det_init(struct det_table *t, size_t capacity, uint64_t window_ms);
void sp_alert_det_fini(struct det_table *t);

#endif
