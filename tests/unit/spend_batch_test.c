/* spend-svc pure parts: the batch's bounds and offsets, Redis counter names, budget periods of
 * the key mirror, and the admin date validator. No network. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "admin_http.h"
#include "budgets.h"
#include "control_vectors.h"
#include "config.h"
#include "pg_sink.h"
#include "proto_event.h"
#include "redis_sink.h"
#include "tg_err.h"

static struct proto_event ev;

static void test_batch_bounds_and_offsets(void **state)
{
    struct sp_pg_batch *b = sp_pg_batch_create(3, 1 << 20);
    int32_t parts[8];
    int64_t next[8];
    (void)state;

    assert_non_null(b);
    proto_event_init(&ev);
    /* the call id travels as uuid's 16 binary bytes: anything else is refused */
    assert_int_equal(sp_pg_batch_add_event(b, &ev, 0, 9, 0, 100), TG_EINVAL);
    snprintf(ev.call_id, sizeof(ev.call_id), "01a22bf1-1d36-71ad-a122-7335524b78zz");
    assert_int_equal(sp_pg_batch_add_event(b, &ev, 0, 9, 0, 100), TG_EINVAL);
    assert_int_equal(sp_pg_batch_messages(b), 0);
    snprintf(ev.call_id, sizeof(ev.call_id), "01a22bf1-1d36-71ad-a122-7335524b78dd");
    assert_int_equal(sp_pg_batch_add_event(b, &ev, 0, 10, 0, 100), 0);
    assert_int_equal(sp_pg_batch_add_event(b, &ev, 0, 12, 0, 100), 0);
    assert_int_equal(sp_pg_batch_add_event(b, &ev, 1, 5, 0, 100), 0);
    assert_true(sp_pg_batch_full(b));
    assert_int_equal(sp_pg_batch_add_event(b, &ev, 1, 6, 0, 100), TG_EFULL);
    assert_int_equal(sp_pg_batch_add_dead(b, "invalid JSON", "xx", 2, 2, 7, 0), 0);
    assert_int_equal(sp_pg_batch_messages(b), 4);
    assert_int_equal(sp_pg_batch_next_offset(b, 0), 13);
    assert_int_equal(sp_pg_batch_next_offset(b, 1), 6);
    assert_int_equal(sp_pg_batch_next_offset(b, 2), 8);
    assert_int_equal(sp_pg_batch_next_offset(b, 3), -1);
    assert_int_equal(sp_pg_batch_offsets(b, parts, next, 8), 3);

    sp_pg_batch_drop_partition(b, 0);
    assert_int_equal(sp_pg_batch_events(b), 1);
    assert_int_equal(sp_pg_batch_next_offset(b, 0), -1);
    assert_int_equal(sp_pg_batch_next_offset(b, 1), 6);
    sp_pg_batch_drop_partition(b, 2);
    assert_int_equal(sp_pg_batch_dead(b), 0);

    sp_pg_batch_reset(b);
    assert_int_equal(sp_pg_batch_messages(b), 0);
    assert_false(sp_pg_batch_full(b));
    sp_pg_batch_destroy(&b);
    assert_null(b);
    sp_pg_batch_destroy(&b);
}

static void test_batch_byte_cap(void **state)
{
    struct sp_pg_batch *b = sp_pg_batch_create(1000, 8000);
    (void)state;
    proto_event_init(&ev);
    snprintf(ev.call_id, sizeof(ev.call_id), "01A22BF1-1D36-71AD-A122-7335524B78DD");
    assert_int_equal(sp_pg_batch_add_event(b, &ev, 0, 1, 0, 4000), 0);
    assert_true(sp_pg_batch_full(b)); /* another 4 KiB event might not fit */
    assert_int_equal(sp_pg_batch_add_event(b, &ev, 0, 2, 0, 4000), 0);
    assert_int_equal(sp_pg_batch_add_event(b, &ev, 0, 3, 0, 4000), TG_EFULL);
    sp_pg_batch_destroy(&b);
}

/* A record of several events goes into one batch whole: room for all of it is asked first (an
 * empty batch takes any one record), its events after the first pass max_events and max_bytes,
 * and a rewind to the mark taken before it leaves the batch as it was. */
static void test_batch_whole_records(void **state)
{
    struct sp_pg_batch *b = sp_pg_batch_create(4, 1 << 20);
    struct sp_pg_batch_mark mk;
    (void)state;

    proto_event_init(&ev);
    snprintf(ev.call_id, sizeof(ev.call_id), "01a22bf1-1d36-71ad-a122-7335524b78dd");
    assert_true(sp_pg_batch_room(b, PROTO_RECORD_EVENTS_MAX, 200000)); /* empty: any record */
    assert_int_equal(sp_pg_batch_add_event(b, &ev, 0, 5, 0, 100), 0);
    assert_true(sp_pg_batch_room(b, 3, 300));
    assert_false(sp_pg_batch_room(b, 4, 400));
    assert_false(sp_pg_batch_room(b, 1, (1 << 20) - 99));
    /* record 6 of partition 0, six events: past max_events after its first */
    for (int i = 0; i < 6; i++)
        assert_int_equal(sp_pg_batch_add_event(b, &ev, 0, 6, i, 100), 0);
    assert_int_equal(sp_pg_batch_events(b), 7);
    assert_true(sp_pg_batch_full(b));
    assert_false(sp_pg_batch_room(b, 1, 100));
    assert_int_equal(sp_pg_batch_add_event(b, &ev, 0, 7, 0, 100), TG_EFULL); /* a new record */
    assert_int_equal(sp_pg_batch_next_offset(b, 0), 7);
    /* a dead letter of the same record is part of it too */
    assert_int_equal(sp_pg_batch_add_dead(b, "invalid JSON", "x", 1, 0, 6, 6), 0);
    assert_int_equal(sp_pg_batch_add_event(b, &ev, 0, 6, 7, 100), 0);

    /* mark, add a record of a new partition, rewind: the batch is as it was */
    sp_pg_batch_reset(b);
    assert_int_equal(sp_pg_batch_add_event(b, &ev, 3, 40, 0, 100), 0);
    sp_pg_batch_mark(b, 9, &mk);
    assert_int_equal(sp_pg_batch_add_event(b, &ev, 9, 2, 0, 100), 0);
    assert_int_equal(sp_pg_batch_add_dead(b, "invalid JSON", "yy", 2, 9, 2, 1), 0);
    assert_int_equal(sp_pg_batch_next_offset(b, 9), 3);
    sp_pg_batch_rewind(b, &mk);
    assert_int_equal(sp_pg_batch_messages(b), 1);
    assert_int_equal(sp_pg_batch_next_offset(b, 9), -1);
    assert_int_equal(sp_pg_batch_next_offset(b, 3), 41);
    /* and of a partition already there: its offsets go back */
    sp_pg_batch_mark(b, 3, &mk);
    assert_int_equal(sp_pg_batch_add_event(b, &ev, 3, 41, 0, 100), 0);
    assert_int_equal(sp_pg_batch_next_offset(b, 3), 42);
    sp_pg_batch_rewind(b, &mk);
    assert_int_equal(sp_pg_batch_next_offset(b, 3), 41);
    assert_int_equal(sp_pg_batch_events(b), 1);
    /* the batch's hard capacity: max_events plus one record less one event */
    sp_pg_batch_reset(b);
    assert_int_equal(sp_pg_batch_add_event(b, &ev, 0, 1, 0, 100), 0);
    assert_int_equal(sp_pg_batch_add_event(b, &ev, 0, 2, 0, 100), 0);
    assert_int_equal(sp_pg_batch_add_event(b, &ev, 0, 3, 0, 100), 0);
    for (int i = 0; i < PROTO_RECORD_EVENTS_MAX; i++)
        assert_int_equal(sp_pg_batch_add_event(b, &ev, 0, 4, i, 100), 0);
    assert_int_equal(sp_pg_batch_add_event(b, &ev, 0, 4, PROTO_RECORD_EVENTS_MAX, 100),
                     TG_EFULL);
    sp_pg_batch_destroy(&b);
}

static void test_dead_payload_capped(void **state)
{
    static char big[SP_PG_DEAD_PAYLOAD_MAX_BYTES * 3];
    struct sp_pg_batch *b = sp_pg_batch_create(10, 1 << 20);
    (void)state;
    memset(big, 'x', sizeof(big));
    for (int i = 0; i < SP_PG_DEAD_PER_BATCH_MAX; i++)
        assert_int_equal(sp_pg_batch_add_dead(b, "too large", big, sizeof(big), 0, i, 0), 0);
    assert_int_equal(sp_pg_batch_add_dead(b, "too large", big, sizeof(big), 0, 9999, 0), TG_EFULL);
    assert_true(sp_pg_batch_full(b));
    sp_pg_batch_destroy(&b);
}

static void test_counter_names(void **state)
{
    char n[SP_REDIS_KEY_MAX];
    char longname[300];
    (void)state;
    assert_int_equal(sp_redis_sink_counter_name(n, sizeof(n), "key", "abc", "2026-11-30", 0, 0),
                     0);
    assert_string_equal(n, "tg:spend:day:2026-11-30:key:abc");
    assert_int_equal(sp_redis_sink_counter_name(n, sizeof(n), "team", "t1", "", 86400,
                                                1796023325),
                     0);
    assert_string_equal(n, "tg:spend:period:86400:1795996800:team:t1");
    memset(longname, 'a', sizeof(longname) - 1);
    longname[sizeof(longname) - 1] = '\0';
    assert_int_equal(sp_redis_sink_counter_name(n, sizeof(n), "model", longname, "2026-11-30", 0,
                                                0),
                     TG_ETOOBIG);
}


/* team: records (router-svc's /team/new) mirror team budgets: a config team of the same id wins;
 * a tombstone or a team without a budget removes it; a bad record is refused and skipped; other
 * records are not team records. */
static void test_team_budget_mirror(void **state)
{
    struct sp_config cfg;
    struct sp_budgets *b;
    char err[256];
    char subj[4][SP_PG_SUBJECT_MAX];
    int64_t period[4];
    const char *ml = "{\"team_id\":\"ml\",\"max_budget\":2.5,\"budget_duration\":\"7d\"}";
    const char *t1 = "{\"max_budget_nusd\":9,\"budget_duration_s\":60}";
    const char *nobudget = "{\"team_id\":\"ml\",\"max_budget_nusd\":null}";
    const char *life = "{\"max_budget_nusd\":1}";
    (void)state;

    sp_config_defaults(&cfg);
    cfg.teams_n = 1;
    snprintf(cfg.teams[0].team_id, sizeof(cfg.teams[0].team_id), "t1");
    cfg.teams[0].max_budget_nusd = 5;
    cfg.teams[0].budget_period_s = 3600;
    b = sp_budgets_create(&cfg, NULL, err, sizeof(err));
    assert_non_null(b);

    assert_int_equal(sp_budgets_team_record(b, "key:x", 5, "{}", 2), 0);
    assert_int_equal(sp_budgets_team_record(b, "team:ml", 7, ml, strlen(ml)), 1);
    assert_int_equal(sp_budgets_period_of(b, 1, "ml"), 604800);
    assert_int_equal(sp_budgets_team_record(b, "team:t1", 7, t1, strlen(t1)), 1);
    assert_int_equal(sp_budgets_period_of(b, 1, "t1"), 3600); /* the config's */
    assert_int_equal(sp_budgets_team_record(b, "team:life", 9, life, strlen(life)), 1);
    assert_int_equal(sp_budgets_period_of(b, 1, "life"), SP_BUDGET_LIFETIME_S);
    assert_int_equal(sp_budgets_list(b, 1, subj, period, 4), 3); /* t1 once, life, ml */
    /* refused: a value naming another team */
    assert_int_equal(sp_budgets_team_record(b, "team:zz", 7, ml, strlen(ml)), 1);
    assert_int_equal(sp_budgets_period_of(b, 1, "zz"), 0);
    /* no budget any more, then deleted */
    assert_int_equal(sp_budgets_team_record(b, "team:ml", 7, nobudget, strlen(nobudget)), 1);
    assert_int_equal(sp_budgets_period_of(b, 1, "ml"), 0);
    assert_int_equal(sp_budgets_team_record(b, "team:life", 9, NULL, 0), 1);
    assert_int_equal(sp_budgets_period_of(b, 1, "life"), 0);
    assert_int_equal(sp_budgets_list(b, 1, subj, period, 4), 1);
    sp_budgets_destroy(&b);
}

static void test_budget_mirror(void **state)
{
    struct sp_config cfg;
    struct sp_budgets *b;
    struct sp_pg_key k;
    char err[256];
    char subj[4][SP_PG_SUBJECT_MAX];
    int64_t period[4];
    (void)state;

    sp_config_defaults(&cfg);
    cfg.keys_max = 2;
    cfg.teams_n = 1;
    snprintf(cfg.teams[0].team_id, sizeof(cfg.teams[0].team_id), "t1");
    cfg.teams[0].max_budget_nusd = 5;
    cfg.teams[0].budget_period_s = 90; /* rounded up to whole minutes */
    b = sp_budgets_create(&cfg, NULL, err, sizeof(err));
    assert_non_null(b);

    memset(&k, 0, sizeof(k));
    snprintf(k.key_hash, sizeof(k.key_hash), "h1");
    k.max_budget_nusd = 100;
    k.budget_period_s = 86400;
    assert_int_equal(sp_budgets_key_set(b, &k), 0);
    snprintf(k.key_hash, sizeof(k.key_hash), "h2");
    k.max_budget_nusd = -1;
    assert_int_equal(sp_budgets_key_set(b, &k), 0);
    snprintf(k.key_hash, sizeof(k.key_hash), "h3");
    assert_int_equal(sp_budgets_key_set(b, &k), TG_EFULL); /* keys_max = 2 */

    assert_int_equal(sp_budgets_period_of(b, 0, "h1"), 86400);
    assert_int_equal(sp_budgets_period_of(b, 0, "h2"), 0); /* no budget */
    assert_int_equal(sp_budgets_period_of(b, 0, "nope"), 0);
    assert_int_equal(sp_budgets_period_of(b, 1, "t1"), 120);
    assert_int_equal(sp_budgets_list(b, 0, subj, period, 4), 1);
    assert_string_equal(subj[0], "h1");
    assert_int_equal(sp_budgets_list(b, 1, subj, period, 4), 1);

    sp_budgets_key_delete(b, "h1");
    assert_int_equal(sp_budgets_period_of(b, 0, "h1"), 0);
    snprintf(k.key_hash, sizeof(k.key_hash), "h3");
    assert_int_equal(sp_budgets_key_set(b, &k), 0); /* room again */
    sp_budgets_destroy(&b);
    assert_null(b);
}

/* A key: record as spend-svc reads it. Found by control_record_fuzz: a LiteLLM max_budget too
 * large for int64 nano-USD was converted out of range (undefined; a negative budget on x86), a
 * negative max_budget_nusd was kept as a budget, and a budget_duration_s near INT64_MAX
 * overflowed the mirror's rounding to whole minutes. */
static void test_key_record_budget_out_of_range(void **state)
{
#define H1 "0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a"
    static const char rkey[] = "key:" H1;
    struct sp_config cfg;
    struct sp_budgets *b;
    struct sp_pg_key k;
    char *metadata = NULL;
    char err[256];
    const char *v;
    (void)state;

    v = "{\"max_budget\":1e300,\"budget_duration\":\"30d\",\"metadata\":{\"a\":1}}";
    assert_int_equal(sp_budgets_record_decode(rkey, strlen(rkey), v, strlen(v), &k, &metadata),
                     SP_RECORD_KEY_PUT);
    assert_string_equal(k.key_hash, H1);
    assert_int_equal(k.max_budget_nusd, INT64_MAX);
    assert_int_equal(k.budget_period_s, 30 * 86400);
    assert_string_equal(metadata, "{\"a\":1}");
    assert_ptr_equal(k.metadata_json, metadata);
    free(metadata);

    v = "{\"max_budget_nusd\":-5,\"budget_duration_s\":9223372036854775807}";
    assert_int_equal(sp_budgets_record_decode(rkey, strlen(rkey), v, strlen(v), &k, &metadata),
                     SP_RECORD_KEY_PUT);
    assert_int_equal(k.max_budget_nusd, -1);
    assert_null(metadata);

    sp_config_defaults(&cfg);
    cfg.keys_max = 2;
    cfg.teams_n = 1;
    snprintf(cfg.teams[0].team_id, sizeof(cfg.teams[0].team_id), "t1");
    cfg.teams[0].max_budget_nusd = 5;
    /* the longest period sp_config_parse_duration gives */
    cfg.teams[0].budget_period_s = INT64_MAX / 1000;
    b = sp_budgets_create(&cfg, NULL, err, sizeof(err));
    assert_non_null(b);
    k.max_budget_nusd = 10;
    assert_int_equal(sp_budgets_key_set(b, &k), 0);
    assert_int_equal(sp_budgets_period_of(b, 0, H1), SP_BUDGET_LIFETIME_S);
    assert_int_equal(sp_budgets_period_of(b, 1, "t1"), SP_BUDGET_LIFETIME_S);
    sp_budgets_destroy(&b);

    /* what is not a key object, or not a key: record */
    assert_int_equal(sp_budgets_record_decode(rkey, strlen(rkey), "[1]", 3, &k, &metadata),
                     TG_EINVAL);
    assert_int_equal(sp_budgets_record_decode(rkey, strlen(rkey), NULL, 0, &k, &metadata),
                     SP_RECORD_KEY_DELETE);
    assert_string_equal(k.key_hash, H1);
    assert_int_equal(sp_budgets_record_decode("block:" H1, 70, "{}", 2, &k, &metadata),
                     SP_RECORD_SKIP);
    /* a record key of the schema without a SHA-256 hex hash: refused, as router-svc does */
    assert_int_equal(sp_budgets_record_decode("key:h1", 6, "{}", 2, &k, &metadata), TG_EINVAL);
#undef H1
}

/* The control topic golden vectors (tests/golden/control) as spend-svc mirrors them: key: PUTs
 * with the fields proto and router-svc read, deletes, and everything else skipped; a key:
 * record proto refuses is refused. */
static void test_control_golden_vectors(void **state)
{
    struct sp_pg_key k;
    char *metadata = NULL;
    size_t n, puts = 0;
    struct cv_vector *vs = cv_load(&n);
    (void)state;

    for (size_t i = 0; i < n; i++) {
        const struct cv_vector *v = &vs[i];
        const char *ex = v->expect, *meta = cv_get(v, "metadata");
        int rc = sp_budgets_record_decode(v->record_key, strlen(v->record_key), v->value,
                                          v->value_len, &k, &metadata);

        if (strcmp(ex, "put") == 0) {
            if (rc != SP_RECORD_KEY_PUT)
                fail_msg("%s: not mirrored (%d)", v->name, rc);
            assert_string_equal(k.key_hash, cv_get(v, "key_hash"));
            assert_string_equal(k.key_alias, cv_get(v, "key_alias"));
            assert_string_equal(k.team_id, cv_get(v, "team_id"));
            assert_string_equal(k.user_id, cv_get(v, "user_id"));
            assert_int_equal(k.max_budget_nusd, cv_int(v, "max_budget_nusd"));
            assert_int_equal(k.budget_period_s, cv_int(v, "budget_duration_s"));
            if (meta == NULL)
                assert_null(metadata);
            else
                assert_string_equal(metadata, meta);
            assert_ptr_equal(k.metadata_json, metadata);
            free(metadata);
            metadata = NULL;
            puts++;
        } else if (strcmp(ex, "delete") == 0) {
            assert_int_equal(rc, SP_RECORD_KEY_DELETE);
            assert_string_equal(k.key_hash, cv_get(v, "key_hash"));
        } else if (strcmp(ex, "invalid") == 0 && strncmp(v->record_key, "team:", 5) != 0 &&
                   (strncmp(v->record_key, "key:", 4) == 0 ||
                    strncmp(cv_get(v, "problem"), "record key:", 11) == 0)) {
            if (rc != TG_EINVAL)
                fail_msg("%s: mirrored (%d)", v->name, rc);
            assert_null(metadata);
        } else {
            /* blocks, their tombstones and bad values (spend-svc writes blocks, never reads
             * them), records outside the schema */
            assert_int_equal(rc, SP_RECORD_SKIP);
        }
    }
    assert_true(puts >= 5);
    cv_free(vs, n);
}

static void test_valid_day(void **state)
{
    (void)state;
    assert_true(sp_admin_http_valid_day("2026-11-30"));
    assert_true(sp_admin_http_valid_day("2024-02-29"));
    assert_false(sp_admin_http_valid_day("2026-02-29"));
    assert_false(sp_admin_http_valid_day("2026-13-01"));
    assert_false(sp_admin_http_valid_day("2026-11-31"));
    assert_false(sp_admin_http_valid_day("2026-1-30"));
    assert_false(sp_admin_http_valid_day("2026-11-30'; --"));
    assert_false(sp_admin_http_valid_day(NULL));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batch_bounds_and_offsets),
        cmocka_unit_test(test_control_golden_vectors),
        cmocka_unit_test(test_batch_byte_cap),
        cmocka_unit_test(test_batch_whole_records),
        cmocka_unit_test(test_dead_payload_capped),
        cmocka_unit_test(test_counter_names),
        cmocka_unit_test(test_budget_mirror),
        cmocka_unit_test(test_team_budget_mirror),
        cmocka_unit_test(test_key_record_budget_out_of_range),
        cmocka_unit_test(test_valid_day),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
