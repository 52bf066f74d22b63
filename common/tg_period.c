#include "tg_period.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "tg_err.h"

#define ZONEINFO_DIR "/usr/share/zoneinfo"

/* 1 when the process keeps UTC (no zone was set): the windows need no tz database then. */
static int utc_only = 1;

static int is_utc(const char *name)
{
    return name == NULL || name[0] == '\0' || strcmp(name, "UTC") == 0 ||
           strcmp(name, "Etc/UTC") == 0;
}

int tg_period_check_tz(const char *name, char *err, size_t errlen)
{
    char path[256];
    struct stat st;

    if (is_utc(name))
        return 0;
    /* an IANA name: letters, digits, "_", "-", "+" in "/"-separated parts, no "." parts */
    if (strlen(name) > 64 || name[0] == '/') {
        snprintf(err, errlen, "\"%.64s\" is not a time zone name like Europe/Berlin", name);
        return TG_EINVAL;
    }
    for (const char *p = name; *p != '\0'; p++) {
        char c = *p;

        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-' || c == '+' || (c == '/' && p[1] != '/' && p[1] != '\0'))) {
            snprintf(err, errlen, "\"%.64s\" is not a time zone name like Europe/Berlin", name);
            return TG_EINVAL;
        }
    }
    snprintf(path, sizeof(path), "%s/%s", ZONEINFO_DIR, name);
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "no time zone \"%s\" (no %s; is tzdata installed?)", name, path);
        return TG_EINVAL;
    }
    return 0;
}

int tg_period_set_tz(const char *name, char *err, size_t errlen)
{
    if (is_utc(name)) {
        utc_only = 1;
        return 0;
    }
    if (tg_period_check_tz(name, err, errlen) != 0)
        return TG_EINVAL;
    if (setenv("TZ", name, 1) != 0) {
        snprintf(err, errlen, "cannot set the time zone");
        return TG_EINVAL;
    }
    tzset();
    utc_only = 0;
    return 0;
}

/* Days from 1970-01-01 to y-m-d (proleptic Gregorian; m 1..12), Howard Hinnant's algorithm. */
static int64_t days_from_civil(int64_t y, unsigned m, unsigned d)
{
    int64_t era;
    unsigned yoe, doy, doe;

    y -= m <= 2;
    era = (y >= 0 ? y : y - 399) / 400;
    yoe = (unsigned)(y - era * 400);
    doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
    doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + (int64_t)doe - 719468;
}

/* Local midnight of the calendar day y-m-d (mday may be out of range: normalised), epoch s. */
static int64_t local_midnight(int year, int mon, int mday)
{
    struct tm tm;

    if (utc_only) {
        /* normalise month overflow, then count days */
        int64_t y = year + 1900 + (mon >= 0 ? mon / 12 : (mon - 11) / 12);
        int m = ((mon % 12) + 12) % 12;

        return (days_from_civil(y, (unsigned)m + 1, 1) + mday - 1) * 86400;
    }
    memset(&tm, 0, sizeof(tm));
    tm.tm_year = year;
    tm.tm_mon = mon;
    tm.tm_mday = mday;
    tm.tm_isdst = -1; /* whichever applies at that midnight */
    return (int64_t)mktime(&tm);
}

void tg_period_window(int64_t period_s, int64_t at_ms, int64_t *start_ms, int64_t *end_ms)
{
    int64_t at_s = at_ms >= 0 ? at_ms / 1000 : -((-at_ms + 999) / 1000);
    int64_t s, e;
    struct tm tm;
    time_t t = (time_t)at_s;

    if (period_s <= 0)
        period_s = 1;
    if (period_s != TG_PERIOD_DAY_S && period_s != TG_PERIOD_WEEK_S &&
        period_s != TG_PERIOD_MONTH_S) {
        s = at_s - (((at_s % period_s) + period_s) % period_s);
        e = s + period_s;
    } else {
        if (utc_only)
            gmtime_r(&t, &tm);
        else
            localtime_r(&t, &tm);
        if (period_s == TG_PERIOD_DAY_S) {
            s = local_midnight(tm.tm_year, tm.tm_mon, tm.tm_mday);
            e = local_midnight(tm.tm_year, tm.tm_mon, tm.tm_mday + 1);
        } else if (period_s == TG_PERIOD_WEEK_S) {
            int back = (tm.tm_wday + 6) % 7; /* days since Monday */

            s = local_midnight(tm.tm_year, tm.tm_mon, tm.tm_mday - back);
            e = local_midnight(tm.tm_year, tm.tm_mon, tm.tm_mday - back + 7);
        } else {
            s = local_midnight(tm.tm_year, tm.tm_mon, 1);
            e = local_midnight(tm.tm_year, tm.tm_mon + 1, 1);
        }
        /* a zone whose midnight does not exist on some day (a DST jump at 00:00) gives the
         * first instant after it; the window still contains at_s */
        if (s > at_s)
            s = at_s;
        if (e <= at_s)
            e = at_s + 1;
    }
    if (start_ms != NULL)
        *start_ms = s * 1000;
    if (end_ms != NULL)
        *end_ms = e * 1000;
}
