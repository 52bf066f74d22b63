/* tg_limits: every bound in Tollgate, in one place, with its unit.
 *
 * Reaching a bound is an expected event: the code that enforces it counts it in a metric and
 * reacts as documented next to the constant (reject, backpressure or drop-oldest). No bound is
 * ever 0-means-unlimited. */
#ifndef TG_LIMITS_H
#define TG_LIMITS_H

/* Logging: one line at most this many bytes; longer lines are cut and end with "...". */
#define TG_LOG_LINE_MAX 2048
/* Repeated messages from one call site: at most one line per this interval, the rest counted. */
#define TG_LOG_RATE_INTERVAL_MS 1000

/* Events (proto): encoded event never exceeds this; the encoder truncates to fit. */
#define TG_EVENT_MAX_BYTES 4096
/* Retry trail: at most this many entries per request (ring buffer, newest kept). */
#define TG_TRAIL_MAX_ENTRIES 4
/* Trail entry message, masked, bytes including NUL. */
#define TG_TRAIL_MESSAGE_MAX 161
/* Tags per event, and bytes per tag including NUL. */
#define TG_EVENT_TAGS_MAX 8
#define TG_EVENT_TAG_MAX 65

/* Alerts: Slack text and whole payload caps (bytes). */
#define TG_ALERT_TEXT_MAX_BYTES 3500
#define TG_ALERT_PAYLOAD_MAX_BYTES 4000
#define TG_ALERT_FIELDS_MAX 8

/* HTTP request body default cap (bytes); configurable, never unlimited. */
#define TG_BODY_MAX_BYTES_DEFAULT (10u * 1024u * 1024u)

/* Prometheus exposition: one scrape body at most this many bytes (truncated, counted). */
#define TG_METRICS_BODY_MAX_BYTES (1024u * 1024u)
/* Histograms: at most this many buckets (excluding +Inf). */
#define TG_HIST_MAX_BUCKETS 24

#endif
