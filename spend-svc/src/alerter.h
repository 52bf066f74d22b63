/* alerter: Slack incoming-webhook alerts for spend-svc, rate-limited, size-capped and
 * de-duplicated, on a sender thread of their own.
 *
 * Why it looks like this: an alert must never be able to hurt the pipeline that raises it. An
 * alert is a fixed-size value (struct sp_alert: typed fields, each a fixed array); there is no
 * function here that accepts a free-form object, a request, metadata or a string of arbitrary
 * size. Building one costs the same whatever the traffic looked like, and the Slack payload
 * built from it is at most TG_ALERT_PAYLOAD_MAX_BYTES (4,000) bytes, JSON escaping included,
 * with its text at most TG_ALERT_TEXT_MAX_BYTES (3,500) bytes, cut at a UTF-8 boundary.
 *
 * Flow: callers (consumer loop, sinks, budgets) call sp_alerter_raise() or one of the detector
 * helpers below. raise() never blocks on I/O and never fails the caller: it applies the type
 * filter and the (type, subject) de-duplication window, then copies the alert into a bounded
 * queue (when full: the oldest alert of the type with the most queued is dropped, counted, so a
 * flood of one type never pushes out another's alert). The sender thread takes alerts in
 * order, waits for the token bucket of the alert's webhook (rate_per_second, burst), builds
 * the payload and POSTs it with a fresh libcurl easy handle (connect timeout 2 s, total 5 s).
 * 429 blocks that webhook until Retry-After has passed; 5xx and transport errors back off
 * exponentially; after max_tries POSTs an alert is given up (counted failed); other 4xx are
 * given up at once.
 *
 * Secrets: webhook URLs are secrets (the path is the credential). They are never logged:
 * logs name a webhook "webhook#N". Error messages from config parsing name the key, never the
 * value. When an alert is raised, its strings are cleaned (control bytes become spaces,
 * invalid UTF-8 becomes '?') and text that looks like a credential (sk-..., Bearer ..., key=...,
 * a configured webhook URL or its path, hooks.slack.com/...) is masked, as a last line of
 * defence; callers must still never put a secret in an alert.
 *
 * Memory is fixed at create(): the queue (queue_capacity x ~1.7 KB), the detector tables
 * (2 x 2 x capacity slots of ~0.5 KB) and the dedupe table (~170 B per entry): about 3 MB with
 * the defaults, whatever the traffic.
 *
 * Threads: every sp_alerter_* function taking a struct sp_alerter * is safe from any thread.
 * Internally one mutex guards the queue and the dedupe table, another the detector tables
 * (when both are held: detectors first, then queue); webhook state belongs to the sender thread.
 * Neither mutex is ever held across network I/O, and no payload is ever logged.
 *
 * Metrics: tollgate_spend_alerts_total{type,outcome}, outcome one of
 *   raised      sp_alerter_raise() (or a detector) produced an alert of an enabled type
 *   suppressed  de-duplicated: same (type, subject) inside dedupe_window_s
 *   dropped     pushed out of the full queue (see above) or discarded at shutdown
 *   sent        webhook answered 2xx
 *   failed      given up: max_tries reached or a non-retryable answer
 * so raised = suppressed + dropped + sent + failed + (queued or in flight). */
#ifndef SP_ALERTER_H
#define SP_ALERTER_H

#include <stddef.h>
#include <stdint.h>

#include "alert.h"
#include "tg_buf.h"
#include "tg_limits.h"

struct proto_event;
/* A document being loaded (tg_yaml.h) and libyaml's node (yaml.h stays in the modules that
 * parse). */
struct tg_yaml;
struct yaml_node_s;

/* ---------------------------------------------------------------------------------------------
 * Configuration */

#define SP_ALERTER_URL_CAP 512             /* webhook URL bytes, NUL included */
#define SP_ALERTER_BUDGET_THRESHOLDS_MAX 8 /* entries in budget_thresholds */
#define SP_ALERTER_REPORT_ROWS_MAX 15      /* rows in a daily report */

struct sp_alerter_config {
    /* Webhooks. A type with no URL of its own uses default_webhook_url; a type left with no URL
     * at all is disabled. URLs are secrets: never logged, never in messages. */
    char default_webhook_url[SP_ALERTER_URL_CAP];                   /* "" = none */
    char type_webhook_url[SP_ALERT_TYPE_COUNT][SP_ALERTER_URL_CAP]; /* alert_to_webhook_url */
    uint32_t enabled_types; /* bit (1u << type) per enabled type; alert_types, default all */

    /* Delivery. */
    double rate_per_second;       /* token refill per webhook URL, > 0; default 1 */
    uint32_t burst;               /* token bucket size, >= 1; default 3 */
    uint32_t dedupe_window_s;     /* same (type, subject) suppressed inside; 0 = off; 600 */
    uint32_t reminder_interval_s; /* degraded-state reminder period, >= 1; default 1800 */
    uint32_t queue_capacity;      /* alerts waiting to be sent, >= 1; default 256 */
    uint32_t max_tries;           /* POSTs per alert before giving up, >= 1; default 5 */
    uint32_t dedupe_capacity;     /* (type, subject) entries remembered; default 1024 */
    uint32_t retry_base_ms;       /* first backoff after a 5xx/transport error; default 500 */
    uint32_t retry_max_ms;        /* backoff ceiling; default 30000 */
    uint32_t retry_after_max_s;   /* cap on an honoured Retry-After; default 300 */
    uint32_t shutdown_wait_ms;    /* destroy(): time allowed to flush the queue; default 2000 */

    /* Budget thresholds in percent of max_budget, ascending; default {50, 80, 100}. */
    uint32_t budget_thresholds[SP_ALERTER_BUDGET_THRESHOLDS_MAX];
    uint32_t nbudget_thresholds;

    /* Deployment failures, per deployment over a tumbling window of failure_window_s: alert
     * when failures >= failure_count, or when attempts >= failure_min_requests and
     * failures / attempts >= failure_ratio. At most one alert per deployment per window. */
    uint32_t failure_window_s;     /* default 60 */
    double failure_ratio;          /* 0 < ratio <= 1; default 0.5 */
    uint32_t failure_min_requests; /* default 10 */
    uint32_t failure_count;        /* default 20 */
    uint32_t deployments_capacity; /* deployments tracked at once; default 1024 */

    /* Slow requests, per model group over a tumbling window: alert when at least
     * slow_request_count requests took longer than slow_request_threshold_ms. */
    uint32_t slow_request_threshold_ms; /* default 30000 */
    uint32_t slow_request_window_s;     /* default 300 */
    uint32_t slow_request_count;        /* default 5 */
    uint32_t model_groups_capacity;     /* model groups tracked at once; default 256 */

    /* Consumer lag: degraded-style alert when the total lag exceeds this many messages. */
    uint64_t consumer_lag_threshold; /* default 100000 */

    /* Daily report hour, UTC, 0..23; -1 = no daily report. Default 9. */
    int daily_report_hour;

    /* A degraded dependency (or lag) counts as recovered once reported healthy continuously
     * for this long; a relapse inside it continues the same outage. 0 = at once. Default 5. */
    uint32_t recovery_hold_s;
};

/* sp_alerter_config_defaults: fill *cfg with the defaults above (no webhook URL, all types
 * enabled). Caller storage. Any thread. */
void sp_alerter_config_defaults(struct sp_alerter_config *cfg);

/* sp_alerter_config_parse: apply the `alerting:` mapping of spend-svc's YAML on top of *cfg
 * (call sp_alerter_config_defaults first). y (the document being loaded) and alerting_node are
 * borrowed for the call; alerting_node NULL or an empty value leaves *cfg alone. Keys:
 * default_webhook_url, alert_to_webhook_url {type: url}, alert_types [type, ...],
 * rate_per_second, burst, dedupe_window_s, reminder_interval_s, queue_capacity, max_tries,
 * dedupe_capacity, budget_thresholds [pct, ...], failure_window_s, failure_ratio,
 * failure_min_requests, failure_count, deployments_capacity, slow_request_threshold_ms,
 * slow_request_window_s, slow_request_count, model_groups_capacity, consumer_lag_threshold,
 * daily_report_hour, recovery_hold_s. Any scalar may be
 * `os.environ/NAME` (the variable must be set and non-empty). Unknown keys, bad types and
 * out-of-range values are errors. Returns 0, or TG_ECONFIG after tg_yaml_fail
 * ("FILE:LINE: alerting.key: problem", never a value). Thread: configuration time,
 * single-threaded. */
int sp_alerter_config_parse(struct tg_yaml *y, const struct yaml_node_s *alerting_node,
                            struct sp_alerter_config *cfg);

/* ---------------------------------------------------------------------------------------------
 * The alerter */

struct sp_alerter;

/* sp_alerter_create: validate cfg (copied), allocate every table at its capacity and start the
 * sender thread. Returns new (destroy with sp_alerter_destroy), or NULL with err filled.
 * Calls curl_global_init once per process: create the alerter before other threads use curl.
 * Thread: start-up. */
struct sp_alerter *sp_alerter_create(const struct sp_alerter_config *cfg, char *err, size_t errlen);

/* sp_alerter_destroy: stop the sender thread and free everything; *al is set to NULL; NULL or
 * *al == NULL is a no-op. Alerts still queued get up to shutdown_wait_ms to be sent (token
 * buckets still apply), then are discarded (counted dropped); an in-flight POST is aborted at
 * that deadline, so the wait is bounded by shutdown_wait_ms plus about 100 ms. Thread: the
 * owner, once no other thread uses *al. */
void sp_alerter_destroy(struct sp_alerter **al);

/* sp_alerter_raise: queue a copy of *alert. Never blocks on I/O (a short mutex only), never
 * fails the caller. Returns 0 when queued, 1 when not queued by design (type disabled or no
 * webhook for it, or suppressed as a duplicate); a full queue drops the oldest alert of its
 * most numerous type to make room (counted). alert is borrowed. Any thread. */
int sp_alerter_raise(struct sp_alerter *al, const struct sp_alert *alert);

/* sp_alerter_observe_event: feed one decoded event to the windowed detectors. Reads only typed
 * fields: kind, model_group, deployment_id, status, error_class, latency_ms and the trail's
 * group/deployment_id/http_status/error_class (and the capped, already-masked message of the
 * newest failed attempt, masked again). A cooldown event raises a deployment_failures alert;
 * request events update per-deployment failure and per-model-group slow-request windows.
 * Detector tables have the capacities from the config; a deployment or group that does not fit
 * is not tracked (counted). Uses the monotonic clock. ev is borrowed. Any thread. */
void sp_alerter_observe_event(struct sp_alerter *al, const struct proto_event *ev);

/* sp_alerter_observe_event_at: the same with the time given (monotonic ms), for tests and for
 * callers that batch. */
void sp_alerter_observe_event_at(struct sp_alerter *al, const struct proto_event *ev,
                                 uint64_t now_ms);

/* sp_alerter_dependency_state: report the health of "postgres", "redis", "kafka" or
 * "dead_letters" (healthy = 0 while dead letters keep appearing). Call it as often as wanted
 * (per batch, per poll): it raises a spend_tracking_degraded alert on the transition to
 * unhealthy, a reminder every reminder_interval_s while unhealthy, and one recovery alert once
 * the dependency has been reported healthy for recovery_hold_s without a relapse (so keep
 * calling after it recovers); never one per call. Every dependency starts healthy. The
 * dead_letters transitions are also de-duplicated by subject (they come and go per batch);
 * the others never are, so a second outage is always reported. now_ms is monotonic. Returns
 * 0, or TG_EINVAL for an unknown dependency name. Any thread. */
int sp_alerter_dependency_state(struct sp_alerter *al, const char *dependency, int healthy,
                                uint64_t now_ms);

/* sp_alerter_consumer_lag: report the total consumer lag (messages, all partitions). Raises a
 * consumer_lag alert when it rises above consumer_lag_threshold, a reminder every
 * reminder_interval_s while above, and one recovery alert once it has stayed at or below the
 * threshold for recovery_hold_s. now_ms is monotonic. Any thread. */
void sp_alerter_consumer_lag(struct sp_alerter *al, int64_t total_lag, uint64_t now_ms);

/* sp_alerter_budget: report committed spend of a key or team after a batch. Compares
 * prev_spend_nusd and spend_nusd against the configured thresholds of max_budget_nusd and, if
 * one or more were crossed upwards, raises one budget alert for the highest. scope is "key" or
 * "team"; name is an alias, team id or short key-hash prefix, never a key (cut to fit).
 * Returns the highest threshold crossed in percent, 0 when none (or max_budget_nusd <= 0).
 * Borrowed strings. Any thread. */
uint32_t sp_alerter_budget(struct sp_alerter *al, const char *scope, const char *name,
                           int64_t prev_spend_nusd, int64_t spend_nusd, int64_t max_budget_nusd);

/* One row of a daily report: a key, team or model group with its day totals. */
struct sp_report_row {
    char dimension[8]; /* "key", "team" or "model" */
    char name[64];     /* alias, team id, model group or short key-hash prefix */
    int64_t cost_nusd;
    int64_t requests;
    int64_t failures;
    int64_t tokens;
};

/* sp_alerter_daily_report_due: 1 once per UTC day, on the first call at or after
 * daily_report_hour, with day (11 bytes) set to the previous UTC day "YYYY-MM-DD", which the
 * report should cover; else 0. Always 0 when daily_report_hour is -1 or the type is disabled.
 * The memory of "already reported today" is per process: a restart after the hour reports the
 * day again. now_epoch_ms is wall-clock. Any thread. */
int sp_alerter_daily_report_due(struct sp_alerter *al, uint64_t now_epoch_ms, char day[11]);

/* sp_alerter_daily_report: raise the daily_report alert for day (borrowed "YYYY-MM-DD") from a
 * fixed-size array of top rows (borrowed; at most SP_ALERTER_REPORT_ROWS_MAX are used, the rest
 * ignored) and the day's totals. Rows are rendered into the alert's fixed fields and summary,
 * so the alert stays within its caps whatever the rows hold. Any thread. */
void sp_alerter_daily_report(struct sp_alerter *al, const char *day, int64_t total_cost_nusd,
                             int64_t total_requests, const struct sp_report_row *rows,
                             size_t nrows);

/* sp_alerter_write_metrics: append tollgate_spend_alerts_total{type,outcome} (every type x
 * outcome), tollgate_spend_alert_queue_depth and
 * tollgate_spend_alert_capacity_hits_total{table} to b. b is borrowed. Any thread. */
void sp_alerter_write_metrics(struct sp_alerter *al, struct tg_buf *b);

/* Counters, for tests and diagnostics. */
enum sp_alert_outcome {
    SP_ALERT_RAISED = 0,
    SP_ALERT_SENT = 1,
    SP_ALERT_SUPPRESSED = 2,
    SP_ALERT_DROPPED = 3,
    SP_ALERT_FAILED = 4,
    SP_ALERT_OUTCOME_COUNT = 5
};

struct sp_alerter_stats {
    uint64_t alerts[SP_ALERT_TYPE_COUNT][SP_ALERT_OUTCOME_COUNT]; /* as the metric */
    uint64_t queue_depth;                                         /* alerts waiting now */
    uint64_t posts;            /* HTTP POSTs attempted (retries included) */
    uint64_t http_429;         /* answers 429 */
    uint64_t retries;          /* POSTs repeated after 429/5xx/transport error */
    uint64_t dedupe_full;      /* dedupe table full: oldest entry evicted */
    uint64_t deployments_full; /* deployment detector table full: event not tracked */
    uint64_t groups_full;      /* model-group detector table full: event not tracked */
};

/* sp_alerter_get_stats: snapshot of the counters into *out. Any thread. */
void sp_alerter_get_stats(struct sp_alerter *al, struct sp_alerter_stats *out);

#endif
