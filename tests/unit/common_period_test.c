/* tg_period: budget windows by the calendar (LiteLLM's resets: midnight, Monday, the 1st) in
 * UTC and in a zone with daylight saving; other durations epoch-aligned. Expected instants
 * computed independently (Python's zoneinfo) and written here as epoch seconds. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "tg_err.h"
#include "tg_period.h"

static void window(int64_t period_s, int64_t at_s, int64_t want_start_s, int64_t want_end_s)
{
    int64_t s = 0, e = 0;

    tg_period_window(period_s, at_s * 1000 + 123, &s, &e);
    assert_int_equal(s, want_start_s * 1000);
    assert_int_equal(e, want_end_s * 1000);
}

static void test_utc(void **state)
{
    const int64_t at = 1796197200; /* 2026-12-02 07:40 UTC, a Wednesday */

    (void)state;
    assert_int_equal(tg_period_set_tz(NULL, NULL, 0), 0);
    window(TG_PERIOD_DAY_S, at, 1796169600, 1796256000);   /* Dec 2 .. Dec 3 */
    window(TG_PERIOD_WEEK_S, at, 1795996800, 1796601600);  /* Mon Nov 30 .. Mon Dec 7 */
    window(TG_PERIOD_MONTH_S, at, 1796083200, 1798761600); /* Dec 1 .. Jan 1 2027 */
    window(TG_PERIOD_MONTH_S, 1834228800, 1832976000, 1835481600); /* Feb 2028: 29 days */
    window(3600, at, at - at % 3600, at - at % 3600 + 3600);       /* on the hour */
    window(2 * 86400, at, at - at % (2 * 86400), at - at % (2 * 86400) + 2 * 86400);
    /* an instant on the boundary starts its window */
    window(TG_PERIOD_DAY_S, 1796169600, 1796169600, 1796256000);
    window(TG_PERIOD_MONTH_S, 1798761600, 1798761600, 1798761600 + 31 * 86400);
}

static void test_zones(void **state)
{
    char err[160];

    (void)state;
    /* the day the US springs forward is 23 hours long in New York */
    assert_int_equal(tg_period_set_tz("America/New_York", err, sizeof(err)), 0);
    window(TG_PERIOD_DAY_S, 1772971200, 1772946000, 1773028800);
    assert_int_equal(1773028800 - 1772946000, 23 * 3600);
    /* Berlin: December starts at 23:00 UTC on Nov 30, the week on Sunday 23:00 UTC */
    assert_int_equal(tg_period_set_tz("Europe/Berlin", err, sizeof(err)), 0);
    window(TG_PERIOD_MONTH_S, 1797292800, 1796079600, 1798758000);
    window(TG_PERIOD_WEEK_S, 1796197200, 1795993200, 1796598000);
    /* a fixed window does not depend on the zone */
    window(3600, 1796197200, 1796197200 - 1796197200 % 3600, 1796197200 - 1796197200 % 3600 + 3600);
    /* names that are not zones */
    assert_int_equal(tg_period_set_tz("../../etc/passwd", err, sizeof(err)), TG_EINVAL);
    assert_non_null(strstr(err, "not a time zone name"));
    assert_int_equal(tg_period_set_tz("/etc/localtime", err, sizeof(err)), TG_EINVAL);
    assert_int_equal(tg_period_set_tz("Nowhere/Atlantis", err, sizeof(err)), TG_EINVAL);
    assert_non_null(strstr(err, "no time zone \"Nowhere/Atlantis\""));
    /* back to UTC */
    assert_int_equal(tg_period_set_tz("UTC", err, sizeof(err)), 0);
    window(TG_PERIOD_DAY_S, 1796197200, 1796169600, 1796256000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_utc),
        cmocka_unit_test(test_zones),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
