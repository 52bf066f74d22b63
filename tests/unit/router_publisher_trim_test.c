/* Unit tests of the publisher's decision to give free memory back (rt_trim_due): after a burst
 * of events in flight drains, at most once a second, and under steady load only when the
 * process grew since the last trim. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "publisher.h"

#define MB (1024u * 1024u)

static uint64_t fake_rss;  /* what the fake RSS reader answers */
static unsigned rss_reads; /* how often it was asked */

static uint64_t read_rss(void)
{
    rss_reads++;
    return fake_rss;
}

/* A burst of peak events in flight that drains to none, at now_ms: the decision. */
static int burst(struct rt_trim *t, uint64_t peak, uint64_t now_ms)
{
    assert_int_equal(rt_trim_due(t, peak, now_ms, read_rss), 0);
    return rt_trim_due(t, 0, now_ms, read_rss);
}

/* A burst that ends in a trim, and the caller's reading after it: 20 MB resident. */
static void trimmed(struct rt_trim *t, uint64_t peak, uint64_t now_ms)
{
    assert_int_equal(burst(t, peak, now_ms), 1);
    t->rss = 20 * MB;
}

static void test_small_or_undrained(void **state)
{
    struct rt_trim t = {0};

    (void)state;
    rss_reads = 0;
    fake_rss = 30 * MB;
    /* never RT_PUBLISHER_TRIM_BURST in flight: no burst */
    for (uint64_t i = 0; i < 100; i++)
        assert_int_equal(rt_trim_due(&t, RT_PUBLISHER_TRIM_BURST - 1, 1000 + i * 100, read_rss),
                         0);
    assert_int_equal(burst(&t, RT_PUBLISHER_TRIM_BURST - 1, 20000), 0);
    /* a burst not yet drained to its peak / RT_PUBLISHER_TRIM_DRAINED */
    assert_int_equal(rt_trim_due(&t, 1600, 30000, read_rss), 0);
    assert_int_equal(rt_trim_due(&t, 1600 / RT_PUBLISHER_TRIM_DRAINED + 1, 30000, read_rss), 0);
    assert_int_equal(rss_reads, 0); /* the RSS is read only once a burst is over */
    assert_int_equal(rt_trim_due(&t, 1600 / RT_PUBLISHER_TRIM_DRAINED, 30000, read_rss), 1);
    assert_int_equal(rss_reads, 1);
}

static void test_steady_load_trims_once(void **state)
{
    struct rt_trim t = {0};
    unsigned trims = 0;

    (void)state;
    rss_reads = 0;
    /* the first burst: the first trim, whatever the RSS */
    fake_rss = 24 * MB;
    trimmed(&t, 1000, 5000);
    /* a burst a second for a minute, the process back at what it held before the trim and a
     * little more: nothing to give back */
    for (uint64_t s = 1; s <= 60; s++) {
        fake_rss = 20 * MB + RT_PUBLISHER_TRIM_GROWTH_BYTES - 4096;
        trims += (unsigned)burst(&t, 1000, 5000 + s * RT_PUBLISHER_TRIM_MS);
    }
    assert_int_equal(trims, 0);
    assert_int_equal(rss_reads, 61);
    /* grown by RT_PUBLISHER_TRIM_GROWTH_BYTES (an outage's backlog): the next burst's end trims */
    fake_rss = 20 * MB + RT_PUBLISHER_TRIM_GROWTH_BYTES;
    assert_int_equal(burst(&t, 1000, 5000 + 61 * RT_PUBLISHER_TRIM_MS), 1);
}

static void test_at_most_once_a_second(void **state)
{
    struct rt_trim t = {0};

    (void)state;
    fake_rss = 40 * MB;
    trimmed(&t, 5000, 10000);
    /* grown, but within RT_PUBLISHER_TRIM_MS of the last decision */
    assert_int_equal(burst(&t, 5000, 10000 + RT_PUBLISHER_TRIM_MS - 1), 0);
    trimmed(&t, 5000, 10000 + RT_PUBLISHER_TRIM_MS);
    /* a decision not to trim starts the interval too */
    fake_rss = 20 * MB;
    assert_int_equal(burst(&t, 5000, 10000 + 2 * RT_PUBLISHER_TRIM_MS), 0);
    fake_rss = 40 * MB;
    assert_int_equal(burst(&t, 5000, 10000 + 3 * RT_PUBLISHER_TRIM_MS - 1), 0);
    assert_int_equal(burst(&t, 5000, 10000 + 3 * RT_PUBLISHER_TRIM_MS), 1);
}

static void test_decision_starts_new_burst(void **state)
{
    struct rt_trim t = {0};

    (void)state;
    fake_rss = 40 * MB;
    trimmed(&t, 5000, 10000);
    /* a second later, nothing rose again since the decision: no burst to end */
    assert_int_equal(rt_trim_due(&t, 0, 10000 + 2 * RT_PUBLISHER_TRIM_MS, read_rss), 0);
    assert_int_equal(rt_trim_due(&t, RT_PUBLISHER_TRIM_BURST - 1, 10000 + 2 * RT_PUBLISHER_TRIM_MS,
                                 read_rss), 0);
    assert_int_equal(rt_trim_due(&t, 0, 10000 + 2 * RT_PUBLISHER_TRIM_MS, read_rss), 0);
}

static void test_rss_unknown_trims(void **state)
{
    struct rt_trim t = {0};

    (void)state;
    fake_rss = 0; /* /proc unreadable: as before there was a gate */
    trimmed(&t, 1000, 1000);
    assert_int_equal(burst(&t, 1000, 1000 + RT_PUBLISHER_TRIM_MS), 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_small_or_undrained),
        cmocka_unit_test(test_steady_load_trims_once),
        cmocka_unit_test(test_at_most_once_a_second),
        cmocka_unit_test(test_decision_starts_new_burst),
        cmocka_unit_test(test_rss_unknown_trims),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
