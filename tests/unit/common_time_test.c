/* tg_time unit tests: clocks agree on units, the monotonic clock never goes back, sleep waits
 * at least as long as asked. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "tg_time.h"

static void test_units_agree(void **state)
{
    uint64_t ns = tg_now_mono_ns();
    uint64_t us = tg_now_mono_us();
    uint64_t ms = tg_now_mono_ms();

    (void)state;
    assert_true(us >= ns / 1000);
    assert_true(ms >= ns / 1000000);
    assert_true(ms >= us / 1000);
    assert_true(ms - us / 1000 < 1000); /* same clock, read within a second */
}

static void test_monotonic_never_goes_back(void **state)
{
    uint64_t prev = tg_now_mono_ns();

    (void)state;
    for (int i = 0; i < 100000; i++) {
        uint64_t now = tg_now_mono_ns();
        assert_true(now >= prev);
        prev = now;
    }
}

static void test_epoch_is_plausible(void **state)
{
    uint64_t ms = tg_now_epoch_ms();

    (void)state;
    assert_true(ms > 1704067200000ull); /* after 2024-01-01 */
    assert_true(ms < 4102444800000ull); /* before 2100-01-01 */
}

static void test_sleep_waits(void **state)
{
    uint64_t t0 = tg_now_mono_us();

    (void)state;
    tg_sleep_ms(20);
    assert_true(tg_now_mono_us() - t0 >= 20000);
    t0 = tg_now_mono_us();
    tg_sleep_ms(0);
    assert_true(tg_now_mono_us() - t0 < 1000000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_units_agree),
        cmocka_unit_test(test_monotonic_never_goes_back),
        cmocka_unit_test(test_epoch_is_plausible),
        cmocka_unit_test(test_sleep_waits),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
