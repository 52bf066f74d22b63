/* limiter across replicas: local + remote counts against a limit, the fallback to N / replicas
 * seen when no exchange is fresh, the bounded export, and the check of the sync script's answer
 * (limsync_reply). No network; time is an argument. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>
#include <hiredis/hiredis.h>

#include "config.h"
#include "limiter.h"
#include "limsync_reply.h"
#include "tg_err.h"
#include "tg_log.h"
#include "tg_redis.h"

#define KEY_A "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define KEY_B "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
#define STALE_MS 500u

static struct rt_limiter *mk(uint32_t deps, uint32_t slots)
{
    char err[128];
    struct rt_limiter *l = rt_limiter_create(deps, slots, err, sizeof(err));

    assert_non_null(l);
    rt_limiter_global_enable(l, STALE_MS);
    return l;
}

/* admit_key: n admissions of KEY_A's own rpm limit; returns how many passed the check. */
static int admit_key(struct rt_limiter *l, const char *key, int64_t rpm, int n, uint64_t now)
{
    int ok = 0;

    for (int i = 0; i < n; i++) {
        if (rt_limiter_key_check(l, key, NULL, rpm, RT_LIMIT_NONE, now, NULL) == 0) {
            rt_limiter_key_admit(l, key, NULL, now);
            ok++;
        }
    }
    return ok;
}

/* sync: export everything, give each key subject remote counts, import at now. */
static uint32_t sync_round(struct rt_limiter *l, uint64_t now, uint64_t remote_reqs,
                           uint64_t remote_tokens, uint64_t remote_par, uint32_t replicas)
{
    struct rt_limiter_sync_entry e[16];
    uint32_t cursor = 0;
    uint32_t n = rt_limiter_sync_export(l, now, e, 16, &cursor);

    for (uint32_t i = 0; i < n; i++) {
        e[i].remote_reqs = remote_reqs;
        e[i].remote_tokens = remote_tokens;
        e[i].remote_in_flight = remote_par;
    }
    rt_limiter_sync_import(l, e, n, replicas, now);
    return n;
}

static void test_local_plus_remote_against_limit(void **state)
{
    struct rt_limiter *l = mk(0, 8);
    struct rt_limit_status st;
    struct rt_limiter_sync_entry e[4];
    uint32_t cursor = 0;

    (void)state;
    assert_int_equal(admit_key(l, KEY_A, 10, 3, 1000), 3);
    /* the export carries this replica's own window */
    assert_int_equal(rt_limiter_sync_export(l, 1000, e, 4, &cursor), 1);
    assert_int_equal(e[0].kind, RT_LIMITER_SUBJECT_KEY);
    assert_string_equal(e[0].hash, KEY_A);
    assert_int_equal(e[0].reqs, 3);
    /* the other replicas admitted 6: 3 + 6 < 10, one more, then limited */
    e[0].remote_reqs = 6;
    rt_limiter_sync_import(l, e, 1, 2, 1000);
    assert_int_equal(admit_key(l, KEY_A, 10, 5, 1100), 1);
    assert_int_equal(rt_limiter_key_check(l, KEY_A, NULL, 10, RT_LIMIT_NONE, 1100, &st),
                     TG_ELIMIT);
    assert_int_equal(st.kind, RT_LIMIT_KIND_RPM);
    assert_int_equal(st.limit, 10); /* the configured limit, not a share */
    /* need 1 to leave; local buckets (4 reqs of second 1) free it at second 61 */
    assert_int_equal(st.retry_after_s, 60);
    rt_limiter_destroy(&l);
}

/* A team's subject ("team:<id>", longer than a key hash) goes out and comes back whole: its
 * remote counts apply to the team, not to a cut name. */
static void test_team_subject_exchanged_whole(void **state)
{
    struct rt_limiter *l = mk(0, 8);
    struct rt_limiter_sync_entry e[4];
    char team[RT_LIMITER_SUBJECT_MAX + 1];
    uint32_t cursor = 0;
    char id[RT_LIMITER_SUBJECT_MAX - 5 + 1];

    (void)state;
    memset(id, 't', sizeof(id) - 1);
    id[sizeof(id) - 1] = '\0';
    assert_int_equal(rt_limiter_team_subject(id, team), 0);
    assert_true(strlen(team) > 64);
    assert_int_equal(admit_key(l, team, 10, 2, 1000), 2);
    assert_int_equal(rt_limiter_sync_export(l, 1000, e, 4, &cursor), 1);
    assert_string_equal(e[0].hash, team);
    e[0].remote_reqs = 8;
    rt_limiter_sync_import(l, e, 1, 2, 1000);
    assert_int_equal(admit_key(l, team, 10, 3, 1100), 0);
    rt_limiter_destroy(&l);
}

static void test_remote_only_retry_after_spread(void **state)
{
    struct rt_limiter *l = mk(0, 8);
    struct rt_limit_status st;

    (void)state;
    assert_int_equal(admit_key(l, KEY_A, 12, 1, 1000), 1);
    sync_round(l, 1000, 11, 0, 0, 3);
    /* 1 local + 11 remote = 12: limited; 0 more would need remote units to leave */
    assert_int_equal(rt_limiter_key_check(l, KEY_A, NULL, 12, RT_LIMIT_NONE, 1000, &st),
                     TG_ELIMIT);
    assert_true(st.retry_after_s >= 1 && st.retry_after_s <= 60);
    rt_limiter_destroy(&l);
}

static void test_tokens_remote(void **state)
{
    struct rt_limiter *l = mk(0, 8);
    struct rt_limit_status st;

    (void)state;
    rt_limiter_key_admit(l, KEY_A, NULL, 1000);
    rt_limiter_key_tokens(l, KEY_A, NULL, 400, 1000);
    sync_round(l, 1000, 0, 500, 0, 2);
    assert_int_equal(rt_limiter_key_check(l, KEY_A, NULL, RT_LIMIT_NONE, 1000, 1000, NULL), 0);
    sync_round(l, 1100, 0, 600, 0, 2);
    assert_int_equal(rt_limiter_key_check(l, KEY_A, NULL, RT_LIMIT_NONE, 1000, 1100, &st),
                     TG_ELIMIT);
    assert_int_equal(st.kind, RT_LIMIT_KIND_TPM);
    rt_limiter_destroy(&l);
}

static void test_deployment_remote(void **state)
{
    struct rt_limiter *l = mk(2, 4);
    struct rt_limiter_sync_entry e[4];
    uint32_t cursor = 0, n;

    (void)state;
    rt_limiter_set_deployment(l, 0, 5, RT_LIMIT_NONE);
    rt_limiter_deployment_admit(l, 0, 1000);
    n = rt_limiter_sync_export(l, 1000, e, 4, &cursor);
    assert_int_equal(n, 1); /* deployment 1 has no limit: not exchanged */
    assert_int_equal(e[0].kind, RT_LIMITER_SUBJECT_DEPLOYMENT);
    assert_int_equal(e[0].idx, 0);
    assert_int_equal(e[0].reqs, 1);
    e[0].remote_reqs = 4;
    rt_limiter_sync_import(l, e, 1, 2, 1000);
    assert_int_equal(rt_limiter_deployment_check(l, 0, 1000, NULL), TG_ELIMIT);
    rt_limiter_destroy(&l);
}

static void test_fallback_divides_by_replicas_seen(void **state)
{
    struct rt_limiter *l = mk(0, 8);
    struct rt_limiter_global_state g;

    (void)state;
    /* never reached: one replica known, the whole limit */
    rt_limiter_global_get(l, 1000, &g);
    assert_int_equal(g.enabled, 1);
    assert_int_equal(g.fallback, 1);
    assert_int_equal(g.replicas_seen, 1);
    assert_int_equal(admit_key(l, KEY_B, 4, 10, 1000), 4);
    /* a sync saw 3 replicas; fresh: the remote counts (0) are used, limit 10 whole */
    admit_key(l, KEY_A, 10, 1, 2000);
    sync_round(l, 2000, 0, 0, 0, 3);
    rt_limiter_global_get(l, 2000 + STALE_MS, &g);
    assert_int_equal(g.fallback, 0);
    assert_int_equal(g.replicas_seen, 3);
    assert_int_equal(admit_key(l, KEY_A, 10, 20, 2000 + STALE_MS), 9);
    /* Redis gone: past the stale time each replica takes 10 / 3 = 3 (the window already holds
     * 10 here, so nothing) */
    rt_limiter_global_get(l, 2001 + STALE_MS, &g);
    assert_int_equal(g.fallback, 1);
    assert_int_equal(g.replicas_seen, 3);
    assert_int_equal(admit_key(l, KEY_A, 10, 5, 2001 + STALE_MS), 0);
    /* a fresh key in fallback: exactly its share */
    assert_int_equal(admit_key(l, "k2", 10, 20, 3000), 3);
    /* shares: at least 1 for a limit >= 1, 0 stays 0 */
    assert_int_equal(admit_key(l, "k3", 2, 20, 3000), 1);
    assert_int_equal(admit_key(l, "k4", 0, 20, 3000), 0);
    /* the exchange comes back: the whole limit again, with the remote counts */
    sync_round(l, 4000, 2, 0, 0, 3);
    assert_int_equal(admit_key(l, "k2", 10, 20, 4000), 5); /* 3 local + 2 remote + 5 = 10 */
    rt_limiter_destroy(&l);
}

static void test_parallel_global_and_fallback(void **state)
{
    struct rt_limiter *l = mk(0, 8);
    struct rt_limit_status st;

    (void)state;
    /* slot first, then an exchange that reports 5 in flight elsewhere: 1 left of 6 */
    assert_int_equal(rt_limiter_key_parallel_acquire(l, KEY_A, 6, &st), 0);
    rt_limiter_key_parallel_release(l, KEY_A);
    rt_limiter_key_check(l, KEY_A, NULL, RT_LIMIT_NONE, RT_LIMIT_NONE, 1000, NULL);
    rt_limiter_key_admit(l, KEY_A, NULL, 1000);
    sync_round(l, 1000, 0, 0, 5, 2);
    assert_int_equal(rt_limiter_key_parallel_acquire(l, KEY_A, 6, &st), 0);
    assert_int_equal(rt_limiter_key_parallel_acquire(l, KEY_A, 6, &st), TG_ELIMIT);
    assert_int_equal(st.kind, RT_LIMIT_KIND_PARALLEL);
    assert_int_equal(st.limit, 6);
    rt_limiter_key_parallel_release(l, KEY_A);
    /* stale: 6 / 2 replicas = 3 locally, whatever the others held */
    rt_limiter_key_check(l, KEY_A, NULL, 100, RT_LIMIT_NONE, 1000 + STALE_MS + 1, NULL);
    for (int i = 0; i < 3; i++)
        assert_int_equal(rt_limiter_key_parallel_acquire(l, KEY_A, 6, &st), 0);
    assert_int_equal(rt_limiter_key_parallel_acquire(l, KEY_A, 6, &st), TG_ELIMIT);
    for (int i = 0; i < 3; i++)
        rt_limiter_key_parallel_release(l, KEY_A);
    rt_limiter_destroy(&l);
}

/* A subject whose own window emptied while others' counts were known: the next exchanges
 * refresh those counts (they left the others' windows too) instead of keeping it blocked. */
static void test_idle_subject_refreshed_not_blocked(void **state)
{
    struct rt_limiter *l = mk(0, 8);

    (void)state;
    assert_int_equal(admit_key(l, KEY_A, 20, 1, 1000), 1);
    assert_int_equal(sync_round(l, 1000, 19, 0, 0, 2), 1);
    assert_int_equal(admit_key(l, KEY_A, 20, 1, 1000), 0);
    /* a minute later this replica's own request has left its window; the others' too */
    assert_int_equal(sync_round(l, 62000, 0, 0, 0, 2), 1);
    assert_int_equal(admit_key(l, KEY_A, 20, 1, 62000), 1);
    /* nothing left anywhere: the slot is no longer exchanged */
    assert_int_equal(sync_round(l, 123000, 0, 0, 0, 2), 0);
    rt_limiter_destroy(&l);
}

static void test_export_bounded_and_rotating(void **state)
{
    struct rt_limiter *l = mk(0, 64);
    struct rt_limiter_sync_entry e[8];
    char seen[40] = {0};
    uint32_t cursor = 0, total = 0;

    (void)state;
    for (int i = 0; i < 40; i++) {
        char k[8];

        snprintf(k, sizeof(k), "k%02d", i);
        rt_limiter_key_admit(l, k, NULL, 1000);
    }
    /* 8 per round; 5 rounds cover all 40 */
    for (int r = 0; r < 5; r++) {
        uint32_t n = rt_limiter_sync_export(l, 1000, e, 8, &cursor);

        assert_int_equal(n, 8);
        for (uint32_t i = 0; i < n; i++) {
            int idx = (e[i].hash[1] - '0') * 10 + (e[i].hash[2] - '0');

            assert_true(idx >= 0 && idx < 40);
            if (!seen[idx])
                total++;
            seen[idx] = 1;
        }
    }
    assert_int_equal(total, 40);
    /* a subject gone from the table is not created by an import */
    memset(&e[0], 0, sizeof(e[0]));
    e[0].kind = RT_LIMITER_SUBJECT_KEY;
    snprintf(e[0].hash, sizeof(e[0].hash), "%s", KEY_B);
    e[0].remote_reqs = 100;
    rt_limiter_sync_import(l, e, 1, 2, 1000);
    assert_int_equal(rt_limiter_key_check(l, KEY_B, NULL, 1, RT_LIMIT_NONE, 1000, NULL), 0);
    rt_limiter_destroy(&l);
}

/* reply: RESP bytes through the connection's reader (tg_redis_reader_create) */
static redisReply *reply_of(const char *resp)
{
    size_t announced = 0;
    redisReader *rd = tg_redis_reader_create(&announced);
    void *r = NULL;

    assert_non_null(rd);
    assert_int_equal(redisReaderFeed(rd, resp, strlen(resp)), REDIS_OK);
    assert_int_equal(redisReaderGetReply(rd, &r), REDIS_OK);
    assert_non_null(r);
    redisReaderFree(rd);
    return r;
}

static void test_reply_apply(void **state)
{
    struct rt_limiter_sync_entry e[2];
    uint32_t replicas = 0;
    char why[160];
    redisReply *r;

    (void)state;
    memset(e, 0, sizeof(e));
    r = reply_of("*7\r\n:3\r\n:5\r\n:100\r\n:1\r\n:0\r\n:0\r\n:2\r\n");
    assert_int_equal(rt_limsync_reply_apply(r, e, 2, &replicas, why, sizeof(why)), 0);
    assert_int_equal(replicas, 3);
    assert_int_equal(e[0].remote_reqs, 5);
    assert_int_equal(e[0].remote_tokens, 100);
    assert_int_equal(e[0].remote_in_flight, 1);
    assert_int_equal(e[1].remote_in_flight, 2);
    freeReplyObject(r);
    /* zero replicas is one (this replica) */
    r = reply_of("*1\r\n:0\r\n");
    assert_int_equal(rt_limsync_reply_apply(r, e, 0, &replicas, why, sizeof(why)), 0);
    assert_int_equal(replicas, 1);
    freeReplyObject(r);
    /* refused whole, nothing written */
    memset(e, 0, sizeof(e));
    r = reply_of("*4\r\n:2\r\n:5\r\n:-1\r\n:0\r\n");
    assert_int_equal(rt_limsync_reply_apply(r, e, 1, &replicas, why, sizeof(why)), TG_EPROTO);
    assert_string_equal(why, "element 2 is not a count");
    assert_int_equal(e[0].remote_reqs, 0);
    freeReplyObject(r);
    r = reply_of("*2\r\n:2\r\n:5\r\n");
    assert_int_equal(rt_limsync_reply_apply(r, e, 1, &replicas, why, sizeof(why)), TG_EPROTO);
    assert_string_equal(why, "expected 4 elements, got 2");
    freeReplyObject(r);
    r = reply_of("-NOSCRIPT No matching script\r\n");
    assert_int_equal(rt_limsync_reply_apply(r, e, 1, &replicas, why, sizeof(why)), TG_EPROTO);
    assert_string_equal(why, "error reply: NOSCRIPT No matching script");
    freeReplyObject(r);
    r = reply_of("*2\r\n:1\r\n$1\r\n5\r\n");
    assert_int_equal(rt_limsync_reply_apply(r, e, 0, &replicas, why, sizeof(why)), TG_EPROTO);
    freeReplyObject(r);
    r = reply_of(":7\r\n");
    assert_int_equal(rt_limsync_reply_apply(r, e, 0, &replicas, why, sizeof(why)), TG_EPROTO);
    freeReplyObject(r);
}

/* The reader refuses array headers announcing more than a reply within its byte cap can hold,
 * instead of allocating their element tables (8 GB for "*999999999"). */
static void test_reader_bounds_array_headers(void **state)
{
    static const char *const refused[] = {
        "*999999999\r\n",
        "*3\r\n*200000\r\n*200000\r\n", /* the sum over nested arrays counts */
        "*2147483648\r\n",
    };
    static const char within[] = "*2\r\n:1\r\n:2\r\n";
    size_t announced = 0;
    redisReader *rd;
    void *r = NULL;

    (void)state;
    for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
        announced = 0;
        rd = tg_redis_reader_create(&announced);
        assert_non_null(rd);
        assert_int_equal(redisReaderFeed(rd, refused[i], strlen(refused[i])), REDIS_OK);
        assert_int_equal(redisReaderGetReply(rd, &r), REDIS_ERR);
        assert_null(r);
        assert_true(announced <= TG_REDIS_ELEMENTS_MAX);
        redisReaderFree(rd);
    }
    /* within the bound: taken, and the count starts again for the next reply */
    announced = 0;
    rd = tg_redis_reader_create(&announced);
    assert_non_null(rd);
    assert_int_equal(redisReaderFeed(rd, within, strlen(within)), REDIS_OK);
    assert_int_equal(redisReaderGetReply(rd, &r), REDIS_OK);
    assert_non_null(r);
    assert_int_equal(((redisReply *)r)->elements, 2);
    assert_int_equal(announced, 2);
    freeReplyObject(r);
    redisReaderFree(rd);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_local_plus_remote_against_limit),
        cmocka_unit_test(test_team_subject_exchanged_whole),
        cmocka_unit_test(test_remote_only_retry_after_spread),
        cmocka_unit_test(test_tokens_remote),
        cmocka_unit_test(test_deployment_remote),
        cmocka_unit_test(test_fallback_divides_by_replicas_seen),
        cmocka_unit_test(test_parallel_global_and_fallback),
        cmocka_unit_test(test_idle_subject_refreshed_not_blocked),
        cmocka_unit_test(test_export_bounded_and_rotating),
        cmocka_unit_test(test_reply_apply),
        cmocka_unit_test(test_reader_bounds_array_headers),
    };

    tg_log_set_level(TG_LOG_OFF);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
