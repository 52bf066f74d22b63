/* alerter limits unit tests: token bucket math and the (type, subject) de-duplication window.
 * Time is an argument to both, so every case is exact and instant. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "alert_bucket.h"
#include "alert_dedupe.h"

#define T0 1000000u /* an arbitrary monotonic start, ms */

static void test_bucket_burst_then_rate(void **state)
{
    struct sp_token_bucket tb;

    (void)state;
    sp_token_bucket_init(&tb, 1.0, 3, T0);
    assert_int_equal(sp_token_bucket_wait_ms(&tb, T0), 0);
    assert_int_equal(sp_token_bucket_take(&tb, T0), 1);
    assert_int_equal(sp_token_bucket_take(&tb, T0), 1);
    assert_int_equal(sp_token_bucket_take(&tb, T0), 1);
    assert_int_equal(sp_token_bucket_take(&tb, T0), 0);
    assert_int_equal(sp_token_bucket_wait_ms(&tb, T0), 1000);
    assert_int_equal(sp_token_bucket_wait_ms(&tb, T0 + 400), 600);
    assert_int_equal(sp_token_bucket_take(&tb, T0 + 999), 0);
    assert_int_equal(sp_token_bucket_take(&tb, T0 + 1000), 1);
    assert_int_equal(sp_token_bucket_take(&tb, T0 + 1000), 0);
}

static void test_bucket_fractional_rate(void **state)
{
    struct sp_token_bucket tb;

    (void)state;
    sp_token_bucket_init(&tb, 0.5, 1, T0);
    assert_int_equal(sp_token_bucket_take(&tb, T0), 1);
    assert_int_equal(sp_token_bucket_wait_ms(&tb, T0), 2000);
    assert_int_equal(sp_token_bucket_take(&tb, T0 + 1999), 0);
    assert_int_equal(sp_token_bucket_take(&tb, T0 + 2000), 1);

    sp_token_bucket_init(&tb, 4.0, 2, T0);
    assert_int_equal(sp_token_bucket_take(&tb, T0), 1);
    assert_int_equal(sp_token_bucket_take(&tb, T0), 1);
    assert_int_equal(sp_token_bucket_wait_ms(&tb, T0), 250);
}

/* Idle time never saves up more than the burst. */
static void test_bucket_caps_at_burst(void **state)
{
    struct sp_token_bucket tb;
    int taken = 0;

    (void)state;
    sp_token_bucket_init(&tb, 1.0, 3, T0);
    for (int i = 0; i < 10; i++)
        taken += sp_token_bucket_take(&tb, T0 + 3600u * 1000u);
    assert_int_equal(taken, 3);
}

/* A clock that goes backwards refills nothing and does not break later refills. */
static void test_bucket_clock_backwards(void **state)
{
    struct sp_token_bucket tb;

    (void)state;
    sp_token_bucket_init(&tb, 1.0, 1, T0);
    assert_int_equal(sp_token_bucket_take(&tb, T0), 1);
    assert_int_equal(sp_token_bucket_take(&tb, T0 - 5000), 0);
    assert_int_equal(sp_token_bucket_take(&tb, T0 + 999), 0);
    assert_int_equal(sp_token_bucket_take(&tb, T0 + 1000), 1);
}

/* Over a horizon T, greedy taking every millisecond yields at most floor(T x rate) + burst
 * tokens (the bound the alerter's flood test relies on) and, floating-point rounding of the
 * refill aside, no fewer than one less. */
static void test_bucket_bound_over_time(void **state)
{
    static const double rates[] = {1.0, 0.5, 2.0, 10.0};
    static const unsigned bursts[] = {3, 1, 5, 1};

    (void)state;
    for (size_t k = 0; k < sizeof(rates) / sizeof(rates[0]); k++) {
        struct sp_token_bucket tb;
        uint64_t taken = 0;
        const uint64_t horizon_ms = 10000;

        sp_token_bucket_init(&tb, rates[k], bursts[k], T0);
        for (uint64_t t = 0; t <= horizon_ms; t++) {
            while (sp_token_bucket_take(&tb, T0 + t))
                taken++;
        }
        assert_true(taken <= (uint64_t)(horizon_ms / 1000.0 * rates[k]) + bursts[k]);
        assert_true(taken + 1 >= (uint64_t)(horizon_ms / 1000.0 * rates[k]) + bursts[k]);
    }
}

static void test_bucket_invalid_parameters(void **state)
{
    struct sp_token_bucket tb;

    (void)state;
    sp_token_bucket_init(&tb, 0.0, 0, T0);
    assert_int_equal(sp_token_bucket_take(&tb, T0), 1);
    assert_int_equal(sp_token_bucket_take(&tb, T0), 0);
    assert_int_equal(sp_token_bucket_wait_ms(&tb, T0), 1000);
}

/* ---- dedupe ------------------------------------------------------------------------------- */

static void test_dedupe_window(void **state)
{
    struct sp_dedupe *d = sp_dedupe_create(16);
    uint64_t n = 99;
    const uint64_t w = 600000;

    (void)state;
    assert_non_null(d);
    assert_int_equal(sp_dedupe_check(d, 1, "deployment a failing", T0, w, &n), 1);
    assert_int_equal(n, 0);
    for (int i = 1; i <= 5; i++)
        assert_int_equal(sp_dedupe_check(d, 1, "deployment a failing", T0 + (uint64_t)i, w, &n), 0);
    assert_int_equal(sp_dedupe_check(d, 1, "deployment a failing", T0 + w - 1, w, &n), 0);
    /* First one after the window passes and reports the six suppressed. */
    assert_int_equal(sp_dedupe_check(d, 1, "deployment a failing", T0 + w, w, &n), 1);
    assert_int_equal(n, 6);
    /* A new window opened there: the count starts again. */
    assert_int_equal(sp_dedupe_check(d, 1, "deployment a failing", T0 + w + 1, w, &n), 0);
    assert_int_equal(sp_dedupe_check(d, 1, "deployment a failing", T0 + 2 * w, w, &n), 1);
    assert_int_equal(n, 1);
    /* Nothing in between: passes with 0. */
    assert_int_equal(sp_dedupe_check(d, 1, "deployment a failing", T0 + 5 * w, w, &n), 1);
    assert_int_equal(n, 0);
    assert_int_equal(sp_dedupe_evictions(d), 0);
    sp_dedupe_destroy(&d);
    assert_null(d);
    sp_dedupe_destroy(&d);
}

static void test_dedupe_keys(void **state)
{
    struct sp_dedupe *d = sp_dedupe_create(16);
    uint64_t n;
    const uint64_t w = 1000;

    (void)state;
    assert_int_equal(sp_dedupe_check(d, 1, "x", T0, w, &n), 1);
    assert_int_equal(sp_dedupe_check(d, 2, "x", T0, w, &n), 1); /* other type */
    assert_int_equal(sp_dedupe_check(d, 1, "y", T0, w, &n), 1); /* other subject */
    assert_int_equal(sp_dedupe_check(d, 1, "x", T0, w, &n), 0);
    assert_int_equal(sp_dedupe_check(d, 2, "x", T0, w, &n), 0);
    /* Window 0: de-duplication off. */
    assert_int_equal(sp_dedupe_check(d, 1, "x", T0, 0, &n), 1);
    sp_dedupe_destroy(&d);
}

static void test_dedupe_capacity(void **state)
{
    struct sp_dedupe *d = sp_dedupe_create(2);
    uint64_t n;
    const uint64_t w = 1000;

    (void)state;
    assert_null(sp_dedupe_create(0));
    assert_int_equal(sp_dedupe_check(d, 0, "a", T0, w, &n), 1);
    assert_int_equal(sp_dedupe_check(d, 0, "b", T0 + 1, w, &n), 1);
    assert_int_equal(sp_dedupe_check(d, 0, "a", T0 + 2, w, &n), 0); /* a seen again: newest */
    assert_int_equal(sp_dedupe_check(d, 0, "c", T0 + 3, w, &n), 1); /* evicts b */
    assert_int_equal(sp_dedupe_evictions(d), 1);
    assert_int_equal(sp_dedupe_check(d, 0, "a", T0 + 4, w, &n), 0); /* a kept */
    assert_int_equal(sp_dedupe_check(d, 0, "b", T0 + 5, w, &n), 1); /* b forgotten */
    assert_int_equal(sp_dedupe_evictions(d), 2);
    /* Many distinct subjects never grow the table. */
    for (int i = 0; i < 10000; i++) {
        char s[32];

        snprintf(s, sizeof(s), "subject %d", i);
        assert_int_equal(sp_dedupe_check(d, 0, s, T0 + 10 + (uint64_t)i, w, &n), 1);
    }
    assert_int_equal(sp_dedupe_evictions(d), 10002);
    sp_dedupe_destroy(&d);
}

/* Subjects longer than the cap compare on the capped prefix, without over-reads. */
static void test_dedupe_long_subject(void **state)
{
    struct sp_dedupe *d = sp_dedupe_create(4);
    char a[SP_ALERT_SUBJECT_CAP];
    uint64_t n;

    (void)state;
    memset(a, 'q', sizeof(a) - 1);
    a[sizeof(a) - 1] = '\0';
    assert_int_equal(sp_dedupe_check(d, 0, a, T0, 1000, &n), 1);
    assert_int_equal(sp_dedupe_check(d, 0, a, T0 + 1, 1000, &n), 0);
    sp_dedupe_destroy(&d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bucket_burst_then_rate),
        cmocka_unit_test(test_bucket_fractional_rate),
        cmocka_unit_test(test_bucket_caps_at_burst),
        cmocka_unit_test(test_bucket_clock_backwards),
        cmocka_unit_test(test_bucket_bound_over_time),
        cmocka_unit_test(test_bucket_invalid_parameters),
        cmocka_unit_test(test_dedupe_window),
        cmocka_unit_test(test_dedupe_keys),
        cmocka_unit_test(test_dedupe_capacity),
        cmocka_unit_test(test_dedupe_long_subject),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
