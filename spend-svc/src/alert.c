#include "alert.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "tg_err.h"
#include "tg_utf8.h"

static const char *const type_names[SP_ALERT_TYPE_COUNT] = {
    "budget",       "deployment_failures", "slow_requests", "spend_tracking_degraded",
    "consumer_lag", "daily_report"};

const char *sp_alert_type_name(int type)
{
    if (type < 0 || type >= SP_ALERT_TYPE_COUNT)
        return "unknown";
    return type_names[type];
}

int sp_alert_type_parse(const char *name)
{
    if (name == NULL)
        return -1;
    for (int i = 0; i < SP_ALERT_TYPE_COUNT; i++) {
        if (strcmp(name, type_names[i]) == 0)
            return i;
    }
    return -1;
}

void sp_alert_init(struct sp_alert *a, enum sp_alert_type type, enum sp_alert_severity severity,
                   const char *subject, const char *summary)
{
    memset(a, 0, sizeof(*a));
    a->type = type;
    a->severity = severity;
    tg_utf8_copy(a->subject, sizeof(a->subject), subject);
    tg_utf8_copy(a->summary, sizeof(a->summary), summary);
}

int sp_alert_add_field(struct sp_alert *a, const char *name, const char *value)
{
    if (a->nfields >= SP_ALERT_FIELDS_MAX)
        return TG_EFULL;
    tg_utf8_copy(a->fields[a->nfields].name, SP_ALERT_FIELD_NAME_CAP, name);
    tg_utf8_copy(a->fields[a->nfields].value, SP_ALERT_FIELD_VALUE_CAP, value);
    a->nfields++;
    return 0;
}

int sp_alert_add_fieldf(struct sp_alert *a, const char *name, const char *fmt, ...)
{
    char buf[SP_ALERT_FIELD_VALUE_CAP];
    va_list ap;

    if (a->nfields >= SP_ALERT_FIELDS_MAX)
        return TG_EFULL;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    return sp_alert_add_field(a, name, buf);
}
