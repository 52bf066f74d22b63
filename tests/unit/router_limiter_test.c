/* limiter: sliding window edges, exact retry-after, counting on admission, bounded slots. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "config.h"
#include "limiter.h"
#include "tg_err.h"

#define KEY_A "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define KEY_B "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
#define KEY_C "cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc"

static struct rt_limiter *mk(uint32_t deps, uint32_t slots)
{
    char err[128];
    struct rt_limiter *l = rt_limiter_create(deps, slots, err, sizeof(err));

    assert_non_null(l);
    return l;
}

static void test_rpm_window_edges(void **state)
{
    struct rt_limiter *l = mk(1, 4);
    struct rt_limit_status st;

    (void)state;
    assert_int_equal(rt_limiter_set_deployment(l, 0, 2, RT_LIMIT_NONE), 0);
    assert_int_equal(rt_limiter_set_deployment(l, 1, 2, RT_LIMIT_NONE), TG_EINVAL);
    assert_int_equal(rt_limiter_deployment_check(l, 0, 1000, &st), 0);
    rt_limiter_deployment_admit(l, 0, 1000);
    rt_limiter_deployment_admit(l, 0, 1500);
    assert_int_equal(rt_limiter_deployment_check(l, 0, 1999, &st), TG_ELIMIT);
    assert_int_equal(st.kind, RT_LIMIT_KIND_RPM);
    assert_int_equal(st.limit, 2);
    assert_int_equal(st.remaining, 0);
    assert_int_equal(st.retry_after_s, 60);
    /* Last millisecond of the window: still limited, one second to go. */
    assert_int_equal(rt_limiter_deployment_check(l, 0, 60999, &st), TG_ELIMIT);
    assert_int_equal(st.retry_after_s, 1);
    /* First millisecond after: both requests have left. */
    assert_int_equal(rt_limiter_deployment_check(l, 0, 61000, &st), 0);
    rt_limiter_destroy(&l);
    assert_null(l);
}

static void test_exact_retry_after(void **state)
{
    struct rt_limiter *l = mk(1, 4);
    struct rt_limit_status st;

    (void)state;
    rt_limiter_set_deployment(l, 0, 3, RT_LIMIT_NONE);
    rt_limiter_deployment_admit(l, 0, 10000);
    rt_limiter_deployment_admit(l, 0, 20400);
    rt_limiter_deployment_admit(l, 0, 30900);
    assert_int_equal(rt_limiter_deployment_check(l, 0, 40000, &st), TG_ELIMIT);
    assert_int_equal(st.retry_after_s, 30); /* the request of second 10 leaves at 70 */
    /* Retrying exactly retry_after_s later is admitted. */
    assert_int_equal(rt_limiter_deployment_check(l, 0, 40000 + 30 * 1000, &st), 0);
    rt_limiter_deployment_admit(l, 0, 70000);
    assert_int_equal(rt_limiter_deployment_check(l, 0, 70000, &st), TG_ELIMIT);
    assert_int_equal(st.retry_after_s, 10); /* second 20 leaves at 80 */
    assert_int_equal(rt_limiter_deployment_check(l, 0, 79999, &st), TG_ELIMIT);
    assert_int_equal(st.retry_after_s, 1);
    assert_int_equal(rt_limiter_deployment_check(l, 0, 80000, &st), 0);
    rt_limiter_destroy(&l);
}

static void test_counting_on_admission_only(void **state)
{
    struct rt_limiter *l = mk(1, 4);
    struct rt_limiter_stats stats;

    (void)state;
    rt_limiter_set_deployment(l, 0, 1, RT_LIMIT_NONE);
    for (int i = 0; i < 100; i++)
        assert_int_equal(rt_limiter_deployment_check(l, 0, 5000 + (uint64_t)i, NULL), 0);
    rt_limiter_deployment_admit(l, 0, 5100);
    assert_int_equal(rt_limiter_deployment_check(l, 0, 5100, NULL), TG_ELIMIT);
    rt_limiter_get_stats(l, &stats);
    assert_int_equal(stats.limited, 1);
    rt_limiter_destroy(&l);
}

static void test_tpm(void **state)
{
    struct rt_limiter *l = mk(1, 4);
    struct rt_limit_status st;

    (void)state;
    rt_limiter_set_deployment(l, 0, RT_LIMIT_NONE, 100);
    rt_limiter_deployment_tokens(l, 0, 60, 5000);
    assert_int_equal(rt_limiter_deployment_check(l, 0, 5000, &st), 0);
    rt_limiter_deployment_tokens(l, 0, 50, 6000);
    assert_int_equal(rt_limiter_deployment_check(l, 0, 7000, &st), TG_ELIMIT);
    assert_int_equal(st.kind, RT_LIMIT_KIND_TPM);
    assert_int_equal(st.limit, 100);
    assert_int_equal(st.retry_after_s, 58); /* 60 tokens of second 5 leave at 65 */
    assert_int_equal(rt_limiter_deployment_check(l, 0, 65000, &st), 0);
    rt_limiter_destroy(&l);
}

static void test_zero_and_none(void **state)
{
    struct rt_limiter *l = mk(2, 4);
    struct rt_limit_status st;

    (void)state;
    rt_limiter_set_deployment(l, 0, 0, RT_LIMIT_NONE);
    assert_int_equal(rt_limiter_deployment_check(l, 0, 1000, &st), TG_ELIMIT);
    assert_int_equal(st.retry_after_s, 60);
    for (int i = 0; i < 1000; i++)
        rt_limiter_deployment_admit(l, 1, 1000);
    assert_int_equal(rt_limiter_deployment_check(l, 1, 1000, &st), 0);
    rt_limiter_destroy(&l);
}

static void test_key_subjects(void **state)
{
    struct rt_limiter *l = mk(0, 8);
    struct rt_limit_status st;

    (void)state;
    assert_int_equal(rt_limiter_key_check(l, KEY_A, NULL, 1, RT_LIMIT_NONE, 1000, &st), 0);
    assert_int_equal(rt_limiter_key_admit(l, KEY_A, NULL, 1000), 0);
    assert_int_equal(rt_limiter_key_check(l, KEY_A, NULL, 1, RT_LIMIT_NONE, 2000, &st), TG_ELIMIT);
    assert_int_equal(st.retry_after_s, 59); /* admitted in second 1, now second 2 */
    /* Other key, and the same key on a model group, are separate windows. */
    assert_int_equal(rt_limiter_key_check(l, KEY_B, NULL, 1, RT_LIMIT_NONE, 2000, &st), 0);
    assert_int_equal(rt_limiter_key_check(l, KEY_A, "gpt-main", 1, RT_LIMIT_NONE, 2000, &st), 0);
    assert_int_equal(rt_limiter_key_admit(l, KEY_A, "gpt-main", 2000), 0);
    assert_int_equal(rt_limiter_key_check(l, KEY_A, "gpt-main", 1, RT_LIMIT_NONE, 2500, &st),
                     TG_ELIMIT);
    assert_int_equal(st.retry_after_s, 60);
    assert_int_equal(rt_limiter_key_check(l, KEY_A, "gpt-other", 1, RT_LIMIT_NONE, 2500, &st), 0);
    /* Key tpm: tokens added after the call. */
    rt_limiter_key_tokens(l, KEY_A, NULL, 500, 3000);
    assert_int_equal(rt_limiter_key_check(l, KEY_A, NULL, RT_LIMIT_NONE, 400, 3000, &st),
                     TG_ELIMIT);
    assert_int_equal(st.kind, RT_LIMIT_KIND_TPM);
    rt_limiter_destroy(&l);
}

static void test_slots_bounded_and_reused(void **state)
{
    struct rt_limiter *l = mk(0, 2);
    struct rt_limiter_stats stats;

    (void)state;
    assert_int_equal(rt_limiter_key_admit(l, KEY_A, NULL, 1000), 0);
    assert_int_equal(rt_limiter_key_admit(l, KEY_B, NULL, 1000), 0);
    assert_int_equal(rt_limiter_key_admit(l, KEY_C, NULL, 1000), TG_EFULL);
    rt_limiter_get_stats(l, &stats);
    assert_int_equal(stats.slots_full, 1);
    assert_int_equal(stats.slots_cap, 2);
    assert_int_equal(stats.slots_used, 2);
    /* Fail open: the uncounted key is not limited. */
    assert_int_equal(rt_limiter_key_check(l, KEY_C, NULL, 1, RT_LIMIT_NONE, 1000, NULL), 0);
    /* Once a window has emptied, its slot is reused. */
    assert_int_equal(rt_limiter_key_admit(l, KEY_C, NULL, 62000), 0);
    assert_int_equal(rt_limiter_key_check(l, KEY_C, NULL, 1, RT_LIMIT_NONE, 62000, NULL),
                     TG_ELIMIT);
    /* A still-busy subject keeps its window. */
    assert_int_equal(rt_limiter_key_admit(l, KEY_A, NULL, 62000), 0);
    assert_int_equal(rt_limiter_key_check(l, KEY_A, NULL, 1, RT_LIMIT_NONE, 62500, NULL),
                     TG_ELIMIT);
    rt_limiter_destroy(&l);
}

static void test_parallel(void **state)
{
    struct rt_limiter *l = mk(0, 4);
    struct rt_limit_status st;

    (void)state;
    assert_int_equal(rt_limiter_key_parallel_acquire(l, KEY_A, 2, &st), 0);
    assert_int_equal(rt_limiter_key_parallel_acquire(l, KEY_A, 2, &st), 0);
    assert_int_equal(rt_limiter_key_parallel_acquire(l, KEY_A, 2, &st), TG_ELIMIT);
    assert_int_equal(st.kind, RT_LIMIT_KIND_PARALLEL);
    assert_int_equal(st.retry_after_s, 1);
    rt_limiter_key_parallel_release(l, KEY_A);
    assert_int_equal(rt_limiter_key_parallel_acquire(l, KEY_A, 2, &st), 0);
    assert_int_equal(rt_limiter_key_parallel_acquire(l, KEY_B, RT_LIMIT_NONE, &st), TG_EFULL);
    rt_limiter_destroy(&l);
}

/* Defect: a caller that read the clock just before a second boundary and then waited for the
 * lock checked with a time older than an admission already counted in the next second; the
 * newer bucket was not seen, so rpm 1 admitted 2. The limiter's clock no longer goes back. */
static void test_stale_clock_does_not_miss_newer_admission(void **state)
{
    struct rt_limiter *l = mk(1, 4);
    struct rt_limit_status st;

    (void)state;
    rt_limiter_set_deployment(l, 0, 1, RT_LIMIT_NONE);
    /* request B read 5000 ms, got the lock first */
    assert_int_equal(rt_limiter_deployment_check(l, 0, 5000, &st), 0);
    rt_limiter_deployment_admit(l, 0, 5000);
    /* request A read 4999 ms before B, got the lock second: B's admission counts */
    assert_int_equal(rt_limiter_deployment_check(l, 0, 4999, &st), TG_ELIMIT);
    assert_int_equal(st.retry_after_s, 60);
    /* the same for key subjects */
    assert_int_equal(rt_limiter_key_check(l, KEY_A, "g", 1, RT_LIMIT_NONE, 9000, &st), 0);
    assert_int_equal(rt_limiter_key_admit(l, KEY_A, "g", 9000), 0);
    assert_int_equal(rt_limiter_key_check(l, KEY_A, "g", 1, RT_LIMIT_NONE, 8999, &st),
                     TG_ELIMIT);
    /* and an admission made with the older time lands in the latest second, not in a bucket
     * that would leave the window a second early */
    rt_limiter_deployment_admit(l, 0, 65000);
    rt_limiter_set_deployment(l, 0, 2, RT_LIMIT_NONE);
    rt_limiter_deployment_admit(l, 0, 64999);
    assert_int_equal(rt_limiter_deployment_check(l, 0, 124999, &st), TG_ELIMIT);
    assert_int_equal(st.retry_after_s, 1);
    assert_int_equal(rt_limiter_deployment_check(l, 0, 125000, &st), 0);
    rt_limiter_destroy(&l);
}

/* Defect: slots were never emptied, so once cap distinct subjects had come and gone every
 * lookup of a subject without a slot walked the whole table (under the router's lock). Stale
 * slots are now swept with backward-shift deletion: chains stay whole and short. */
static void test_stale_slots_swept_lookups_stay_short(void **state)
{
    enum { CAP = 64 };
    struct rt_limiter *l = mk(0, CAP);
    struct rt_limiter_stats before, after;
    char hash[TG_SHA256_HEX_LEN + 1];

    (void)state;
    /* fill the table with CAP subjects in second 1; the live one keeps counting */
    for (int i = 0; i < CAP; i++) {
        snprintf(hash, sizeof(hash), "%064x", i);
        assert_int_equal(rt_limiter_key_admit(l, hash, i % 2 ? "g" : NULL, 1000), 0);
    }
    rt_limiter_get_stats(l, &before);
    assert_int_equal(before.slots_used, CAP);
    /* a minute later every subject but one is stale; a few calls sweep the table */
    assert_int_equal(rt_limiter_key_admit(l, KEY_A, NULL, 61500), 0);
    for (int i = 0; i < CAP; i++)
        rt_limiter_key_check(l, KEY_B, NULL, 1, RT_LIMIT_NONE, 62000, NULL);
    rt_limiter_get_stats(l, &after);
    assert_int_equal(after.slots_used, 1);
    /* an absent subject is now found absent at once, not after CAP probes */
    rt_limiter_get_stats(l, &before);
    assert_int_equal(rt_limiter_key_check(l, KEY_C, "x", 1, RT_LIMIT_NONE, 62000, NULL), 0);
    rt_limiter_get_stats(l, &after);
    assert_true(after.probes - before.probes <= 2);
    /* the live subject kept its window through the deletions around it */
    assert_int_equal(rt_limiter_key_check(l, KEY_A, NULL, 1, RT_LIMIT_NONE, 62000, NULL),
                     TG_ELIMIT);
    rt_limiter_destroy(&l);
}

/* Backward-shift deletion keeps every live subject reachable, whatever the collisions: many
 * subjects in a small table, half of them going stale, all of the rest still found. */
static void test_sweep_keeps_chains_whole(void **state)
{
    enum { CAP = 16 };
    struct rt_limiter *l = mk(0, CAP);
    char hash[TG_SHA256_HEX_LEN + 1];
    struct rt_limiter_stats st;

    (void)state;
    for (int round = 0; round < 6; round++) {
        uint64_t t = 1000 + (uint64_t)round * 40000; /* a round's subjects outlive one round */

        for (int i = 0; i < CAP / 2; i++) {
            snprintf(hash, sizeof(hash), "%064x", round * 100 + i);
            assert_int_equal(rt_limiter_key_admit(l, hash, NULL, t), 0);
        }
        /* this round's subjects and the previous round's (still in the window) are all found */
        for (int r = round > 0 ? round - 1 : 0; r <= round; r++) {
            for (int i = 0; i < CAP / 2; i++) {
                snprintf(hash, sizeof(hash), "%064x", r * 100 + i);
                assert_int_equal(rt_limiter_key_check(l, hash, NULL, 1, RT_LIMIT_NONE, t, NULL),
                                 TG_ELIMIT);
            }
        }
    }
    rt_limiter_get_stats(l, &st);
    assert_int_equal(st.slots_full, 0);
    assert_true(st.slots_used <= CAP);
    rt_limiter_destroy(&l);
}

/* The key table against a plain model, through random churn: every subject counted in the last
 * minute is limited (rpm 1), every other one is not, whatever was swept or reused around it. */
static void test_key_table_matches_model_under_churn(void **state)
{
    enum { CAP = 32, SUBJECTS = 48, STEPS = 4000 };
    struct rt_limiter *l = mk(0, CAP);
    int64_t last[SUBJECTS]; /* second of the last counted admission, -1000 = none */
    char hash[TG_SHA256_HEX_LEN + 1];
    uint64_t rng = 0x9E3779B97F4A7C15ull, t = 1000;

    (void)state;
    for (int i = 0; i < SUBJECTS; i++)
        last[i] = -1000;
    for (int step = 0; step < STEPS; step++) {
        int subj;

        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        t += rng % 3000;
        subj = (int)((rng >> 20) % SUBJECTS);
        snprintf(hash, sizeof(hash), "%064x", subj);
        if (rt_limiter_key_admit(l, hash, (subj & 1) ? "grp" : NULL, t) == 0)
            last[subj] = (int64_t)(t / 1000);
        if (step % 50 != 0)
            continue;
        for (int i = 0; i < SUBJECTS; i++) {
            int want = (int64_t)(t / 1000) - last[i] < 60 ? TG_ELIMIT : 0;

            snprintf(hash, sizeof(hash), "%064x", i);
            assert_int_equal(
                rt_limiter_key_check(l, hash, (i & 1) ? "grp" : NULL, 1, RT_LIMIT_NONE, t, NULL),
                want);
        }
    }
    rt_limiter_destroy(&l);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rpm_window_edges),
        cmocka_unit_test(test_exact_retry_after),
        cmocka_unit_test(test_counting_on_admission_only),
        cmocka_unit_test(test_tpm),
        cmocka_unit_test(test_zero_and_none),
        cmocka_unit_test(test_key_subjects),
        cmocka_unit_test(test_slots_bounded_and_reused),
        cmocka_unit_test(test_parallel),
        cmocka_unit_test(test_stale_clock_does_not_miss_newer_admission),
        cmocka_unit_test(test_stale_slots_swept_lookups_stay_short),
        cmocka_unit_test(test_sweep_keeps_chains_whole),
        cmocka_unit_test(test_key_table_matches_model_under_churn),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
