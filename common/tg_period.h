/* tg_period: budget periods by the calendar, as LiteLLM resets budgets.
 *
 * A budget duration of one day (86,400 s: "1d", "24h") runs from midnight to midnight, one week
 * (604,800 s: "7d", "1w") from Monday 00:00 to the next Monday, 30 days (2,592,000 s: "30d",
 * "1mo") from the 1st of a month 00:00 to the 1st of the next, all in the budget time zone
 * (UTC unless tg_period_set_tz named another; daylight-saving days are 23 or 25 hours long).
 * Any other duration is a fixed window aligned to the Unix epoch (a 1h budget resets on the
 * hour, 2d every other day at 00:00 UTC).
 *
 * The time zone is process-wide: set it once, before threads start. The window functions are
 * then safe on any thread (localtime_r/mktime with a fixed TZ). */
#ifndef TG_PERIOD_H
#define TG_PERIOD_H

#include <stddef.h>
#include <stdint.h>

#define TG_PERIOD_DAY_S 86400
#define TG_PERIOD_WEEK_S (7 * 86400)
#define TG_PERIOD_MONTH_S (30 * 86400)

/* tg_period_check_tz: 0 when name is a time zone tg_period_set_tz takes, else TG_EINVAL with
 * the reason in err. Changes nothing (for configuration checks). */
int tg_period_check_tz(const char *name, char *err, size_t errlen);

/* tg_period_set_tz: the budget time zone, an IANA name ("UTC", "Europe/Berlin", "US/Eastern")
 * that has a zone file under /usr/share/zoneinfo. NULL or "" is UTC. Returns 0, or TG_EINVAL
 * with a reason in err (not a zone name, no such zone). Call before threads start. */
int tg_period_set_tz(const char *name, char *err, size_t errlen);

/* tg_period_window: the budget window of period_s seconds (> 0) that contains at_ms (epoch
 * milliseconds): [*start_ms, *end_ms). Either output may be NULL. */
void tg_period_window(int64_t period_s, int64_t at_ms, int64_t *start_ms, int64_t *end_ms);

#endif
