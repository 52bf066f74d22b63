/* Unit tests of the publisher's sleep after a pass that drained the spool (rt_publisher_tail_ms):
 * RT_PUBLISHER_TAIL_MS under load, growing as the rate falls until a pass carries about
 * RT_PUBLISHER_PASS_EVENTS events, never over RT_PUBLISHER_QUIET_MS. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "publisher.h"

static void test_busy_keeps_the_floor(void **state)
{
    (void)state;
    /* 28k events a second: 280 in a 10 ms pass */
    assert_int_equal(rt_publisher_tail_ms(280, 10), RT_PUBLISHER_TAIL_MS);
    /* exactly RT_PUBLISHER_PASS_EVENTS in RT_PUBLISHER_TAIL_MS */
    assert_int_equal(rt_publisher_tail_ms(RT_PUBLISHER_PASS_EVENTS, RT_PUBLISHER_TAIL_MS),
                     RT_PUBLISHER_TAIL_MS);
    /* a backlog read at once, no time passed */
    assert_int_equal(rt_publisher_tail_ms(5000, 0), RT_PUBLISHER_TAIL_MS);
}

static void test_grows_with_the_rate(void **state)
{
    (void)state;
    /* 10k a second: 100 in 10 ms; 128 take 12.8 ms */
    assert_int_equal(rt_publisher_tail_ms(100, 10), 12);
    /* 2,600 a second once the sleep has grown: 130 in 50 ms; 128 take 49 ms */
    assert_int_equal(rt_publisher_tail_ms(130, 50), 49);
    /* 26 in 10 ms: 128 take 49.2 ms */
    assert_int_equal(rt_publisher_tail_ms(26, 10), 49);
    /* 64 in 20 ms: 40 ms */
    assert_int_equal(rt_publisher_tail_ms(64, 20), 40);
}

static void test_quiet_is_the_ceiling(void **state)
{
    (void)state;
    assert_int_equal(rt_publisher_tail_ms(0, 10), RT_PUBLISHER_QUIET_MS); /* idle */
    assert_int_equal(rt_publisher_tail_ms(0, 0), RT_PUBLISHER_QUIET_MS);
    assert_int_equal(rt_publisher_tail_ms(25, 10), RT_PUBLISHER_QUIET_MS); /* 128 in 51.2 ms */
    assert_int_equal(rt_publisher_tail_ms(1, 1000), RT_PUBLISHER_QUIET_MS);
    assert_int_equal(rt_publisher_tail_ms(64, 25), RT_PUBLISHER_QUIET_MS); /* exactly 50 ms */
    assert_int_equal(rt_publisher_tail_ms(UINT64_MAX, UINT64_MAX), RT_PUBLISHER_QUIET_MS);
    assert_int_equal(rt_publisher_tail_ms(1, UINT64_MAX), RT_PUBLISHER_QUIET_MS);
    assert_int_equal(rt_publisher_tail_ms(UINT64_MAX, 1), RT_PUBLISHER_TAIL_MS);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_busy_keeps_the_floor),
        cmocka_unit_test(test_grows_with_the_rate),
        cmocka_unit_test(test_quiet_is_the_ceiling),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
