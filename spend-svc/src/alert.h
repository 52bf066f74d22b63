/* alert: the alert value. An alert is a fixed-size value (struct sp_alert: typed fields, each a
 * fixed array) built by its raiser, cleaned and rendered by alert_text, de-duplicated by
 * alert_dedupe and queued and sent by the alerter; none of them accepts anything else. */
#ifndef SP_ALERT_H
#define SP_ALERT_H

#include <stddef.h>
#include <stdint.h>

#include "tg_limits.h"

enum sp_alert_type {
    SP_ALERT_BUDGET = 0,                  /* key/team budget threshold crossed */
    SP_ALERT_DEPLOYMENT_FAILURES = 1,     /* failure ratio/count per deployment; cooldowns */
    SP_ALERT_SLOW_REQUESTS = 2,           /* latency over threshold per model group */
    SP_ALERT_SPEND_TRACKING_DEGRADED = 3, /* postgres/redis/kafka down, dead letters */
    SP_ALERT_CONSUMER_LAG = 4,            /* consumer lag over threshold */
    SP_ALERT_DAILY_REPORT = 5,            /* spend by key/team/model for a day */
    SP_ALERT_TYPE_COUNT = 6
};

enum sp_alert_severity { SP_ALERT_INFO = 0, SP_ALERT_WARNING = 1, SP_ALERT_CRITICAL = 2 };

/* Capacities in bytes, NUL included. */
#define SP_ALERT_SUBJECT_CAP 128 /* de-duplication key together with the type */
#define SP_ALERT_SUMMARY_CAP 256
#define SP_ALERT_FIELD_NAME_CAP 32
#define SP_ALERT_FIELD_VALUE_CAP 128
#define SP_ALERT_FIELDS_MAX TG_ALERT_FIELDS_MAX /* 8 */

struct sp_alert_field {
    char name[SP_ALERT_FIELD_NAME_CAP];
    char value[SP_ALERT_FIELD_VALUE_CAP];
};

/* One alert: a plain value, copied wherever it goes. */
struct sp_alert {
    enum sp_alert_type type;
    enum sp_alert_severity severity;
    char subject[SP_ALERT_SUBJECT_CAP]; /* short, stable: "deployment main-1 failing" */
    char summary[SP_ALERT_SUMMARY_CAP]; /* one sentence */
    uint32_t nfields;                   /* entries used in fields, <= SP_ALERT_FIELDS_MAX */
    struct sp_alert_field fields[SP_ALERT_FIELDS_MAX];
};

/* sp_alert_init: zero *a and set type and severity. subject and summary are copied (NULL gives
 * ""), cut at a UTF-8 boundary to their caps. Caller storage; borrowed arguments. Any thread. */
void sp_alert_init(struct sp_alert *a, enum sp_alert_type type, enum sp_alert_severity severity,
                   const char *subject, const char *summary);

/* sp_alert_add_field: append one name/value pair, both copied and cut at a UTF-8 boundary to
 * their caps. Returns 0, or TG_EFULL when SP_ALERT_FIELDS_MAX fields are already set (the pair
 * is not added). Borrowed arguments. Any thread. */
int sp_alert_add_field(struct sp_alert *a, const char *name, const char *value);

/* sp_alert_add_fieldf: like sp_alert_add_field with a printf-formatted value, formatted into
 * the fixed field (cut at a UTF-8 boundary). Returns 0 or TG_EFULL. Meant for numbers: printf
 * reads a %s argument to its end, so give strings a precision (%.64s) or use
 * sp_alert_add_field, which never reads past the cap. */
int sp_alert_add_fieldf(struct sp_alert *a, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* sp_alert_type_name: "budget", "deployment_failures", "slow_requests",
 * "spend_tracking_degraded", "consumer_lag", "daily_report"; "unknown" otherwise. Borrowed
 * static string. sp_alert_type_parse: the reverse, or -1. */
const char *sp_alert_type_name(int type);
int sp_alert_type_parse(const char *name);

#endif
