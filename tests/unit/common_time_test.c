/* tg_time unit tests: clocks agree on units, the monotonic clock never goes back, sleep waits
 * at least as long as asked; the loop clock stands still between a loop's ticks, is never
 * behind the thread's earlier readings, and reads the clock on a thread that never ticked. */
#include <pthread.h>
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

static void *never_ticked(void *arg)
{
    uint64_t *out = arg;
    uint64_t t0 = tg_loop_mono_us();

    tg_sleep_ms(20);
    out[0] = tg_loop_mono_us() - t0;
    t0 = tg_loop_mono_ms();
    tg_sleep_ms(20);
    out[1] = tg_loop_mono_ms() - t0;
    return NULL;
}

static void test_loop_clock_without_ticks_reads_the_clock(void **state)
{
    pthread_t th;
    uint64_t moved[2] = {0, 0};

    (void)state;
    assert_int_equal(pthread_create(&th, NULL, never_ticked, moved), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_true(moved[0] >= 20000);
    assert_true(moved[1] >= 19); /* ms readings: the sleep may start late in one ms */
}

static void test_loop_clock_between_ticks(void **state)
{
    uint64_t tick, stamp, later;

    (void)state;
    tg_loop_tick();
    tick = tg_loop_mono_us();
    tg_sleep_ms(20);
    /* no reading since the tick: the turn's time, not the clock's */
    assert_true(tg_loop_mono_us() == tick);
    assert_true(tg_loop_mono_ms() == tick / 1000);
    /* a reading moves it, and it is never behind one taken before */
    stamp = tg_now_mono_us();
    assert_true(stamp >= tick + 20000);
    later = tg_loop_mono_us();
    assert_true(later >= stamp);
    assert_true(later - stamp < 1000000);
    /* the next tick reads the clock again */
    tg_sleep_ms(5);
    tg_loop_tick();
    assert_true(tg_loop_mono_us() >= stamp + 5000);
    /* durations from earlier stamps are never negative */
    for (int i = 0; i < 10000; i++) {
        uint64_t s = tg_now_mono_us();
        assert_true(tg_loop_mono_us() >= s);
        if (i % 100 == 0)
            tg_loop_tick();
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_units_agree),
        cmocka_unit_test(test_monotonic_never_goes_back),
        cmocka_unit_test(test_epoch_is_plausible),
        cmocka_unit_test(test_sleep_waits),
        cmocka_unit_test(test_loop_clock_without_ticks_reads_the_clock),
        cmocka_unit_test(test_loop_clock_between_ticks),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
