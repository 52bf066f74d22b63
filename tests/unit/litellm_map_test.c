/* litellm_map unit tests: LiteLLM database rows (as PostgreSQL's to_jsonb renders them, column
 * names from LiteLLM's schema) to Tollgate's key and team API bodies. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "litellm_map.h"

#define HASH "3f2a9c1b0e77d4c5a6b7c8d9e0f1a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3"

static json_t *row(const char *text)
{
    json_error_t e;
    json_t *o = json_loads(text, 0, &e);

    if (o == NULL)
        fail_msg("bad test row: %s", e.text);
    return o;
}

/* body equals want (both JSON texts), member order aside. */
static void expect_body(json_t *body, const char *want)
{
    json_t *w = row(want);

    if (!json_equal(body, w)) {
        char *got = json_dumps(body, JSON_SORT_KEYS | JSON_COMPACT);

        fail_msg("body %s, expected %s", got, want);
    }
    json_decref(w);
}

/* A full row of a LiteLLM 1.x database: every column to_jsonb gives, nulls included. */
static void test_key_row_full(void **state)
{
    (void)state;
    char id[LM_ID_CAP], why[128];
    int raw = -1;
    json_t *r = row("{\"token\":\"" HASH "\",\"key_name\":\"sk-...abcd\",\"key_alias\":\"ci\","
                    "\"soft_budget_cooldown\":false,\"spend\":1.5,\"expires\":\"2027-01-01T00:00:00\","
                    "\"models\":[\"gpt-4o\",\"all-team-models\"],\"aliases\":{},\"config\":{},"
                    "\"user_id\":\"u1\",\"team_id\":\"t1\",\"permissions\":{},"
                    "\"max_parallel_requests\":null,\"metadata\":{\"tags\":[\"prod\"],"
                    "\"model_rpm_limit\":{\"gpt-4o\":5},\"model_tpm_limit\":{}},"
                    "\"blocked\":null,\"tpm_limit\":1000,\"rpm_limit\":10,\"max_budget\":20.0,"
                    "\"budget_duration\":\"30d\",\"budget_reset_at\":\"2027-01-01T00:00:00\","
                    "\"allowed_cache_controls\":[],\"model_spend\":{},\"model_max_budget\":{},"
                    "\"budget_id\":null,\"organization_id\":null,\"created_at\":null,"
                    "\"created_by\":\"admin\",\"allowed_routes\":[],"
                    "\"_expires_in_s\":86400,\"_budget\":null}");
    json_t *b = lm_key_body(r, id, &raw, why, sizeof(why));

    assert_non_null(b);
    assert_int_equal(raw, 0);
    assert_string_equal(id, "key 3f2a9c1b0e77 (alias \"ci\")");
    expect_body(b, "{\"key_hash\":\"" HASH "\",\"duration\":\"86400s\",\"key_alias\":\"ci\","
                   "\"models\":[\"gpt-4o\"],\"max_budget\":20.0,\"budget_duration\":\"30d\","
                   "\"rpm_limit\":10,\"tpm_limit\":1000,\"user_id\":\"u1\",\"team_id\":\"t1\","
                   "\"spend\":1.5,\"model_rpm_limit\":{\"gpt-4o\":5},"
                   "\"metadata\":{\"tags\":[\"prod\"]}}");
    json_decref(b);
    json_decref(r);
}

/* Limits the key does not set come from its LiteLLM_BudgetTable row; the key's own win. */
static void test_key_budget_row_fills_gaps(void **state)
{
    (void)state;
    char id[LM_ID_CAP], why[128];
    int raw = 0;
    json_t *r = row("{\"token\":\"" HASH "\",\"rpm_limit\":3,\"max_budget\":null,\"blocked\":true,"
                    "\"_expires_in_s\":null,\"budget_id\":\"b1\",\"_budget\":{\"budget_id\":\"b1\","
                    "\"max_budget\":5.0,\"soft_budget\":4.0,\"rpm_limit\":99,\"tpm_limit\":null,"
                    "\"budget_duration\":\"1d\",\"max_parallel_requests\":2}}");
    json_t *b = lm_key_body(r, id, &raw, why, sizeof(why));

    assert_non_null(b);
    assert_string_equal(id, "key 3f2a9c1b0e77");
    expect_body(b, "{\"key_hash\":\"" HASH "\",\"rpm_limit\":3,\"max_budget\":5.0,"
                   "\"soft_budget\":4.0,\"budget_duration\":\"1d\",\"max_parallel_requests\":2,"
                   "\"budget_id\":\"b1\",\"blocked\":true}");
    json_decref(b);
    json_decref(r);
}

static void test_key_skips(void **state)
{
    (void)state;
    char id[LM_ID_CAP], why[128];
    int raw = 0;
    json_t *r;

    r = row("{\"token\":\"" HASH "\",\"_expires_in_s\":0}");
    assert_null(lm_key_body(r, id, &raw, why, sizeof(why)));
    assert_string_equal(why, "expired");
    json_decref(r);
    r = row("{\"token\":\"" HASH "\",\"_expires_in_s\":-5}");
    assert_null(lm_key_body(r, id, &raw, why, sizeof(why)));
    json_decref(r);
    r = row("{\"token\":\"not-a-hash\"}");
    assert_null(lm_key_body(r, id, &raw, why, sizeof(why)));
    assert_non_null(strstr(why, "token"));
    json_decref(r);
    /* upper-case hex is not LiteLLM's hash */
    r = row("{\"token\":\"3F2A9C1B0E77D4C5A6B7C8D9E0F1A2B3C4D5E6F708192A3B4C5D6E7F8091A2B3\"}");
    assert_null(lm_key_body(r, id, &raw, why, sizeof(why)));
    json_decref(r);
    r = row("{\"token\":7}");
    assert_null(lm_key_body(r, id, &raw, why, sizeof(why)));
    json_decref(r);
    r = row("{\"token\":\"" HASH "\",\"_expires_in_s\":\"soon\"}");
    assert_null(lm_key_body(r, id, &raw, why, sizeof(why)));
    json_decref(r);
    r = row("[1]");
    assert_null(lm_key_body(r, id, &raw, why, sizeof(why)));
    json_decref(r);
}

/* A token stored raw (LiteLLM before hashed storage) is sent as the key itself; the report's
 * name never shows it. */
static void test_key_raw_token(void **state)
{
    (void)state;
    char id[LM_ID_CAP], why[128];
    int raw = 0;
    json_t *r = row("{\"token\":\"sk-legacy-1234567890abcdef\",\"key_alias\":\"old\"}");
    json_t *b = lm_key_body(r, id, &raw, why, sizeof(why));

    assert_non_null(b);
    assert_int_equal(raw, 1);
    assert_null(strstr(id, "legacy"));
    expect_body(b, "{\"key\":\"sk-legacy-1234567890abcdef\",\"key_alias\":\"old\"}");
    json_decref(b);
    json_decref(r);
}

/* An alias holding the raw key itself (found by the litellm_row fuzzer): the report's name
 * leaves the alias out rather than print the key. */
static void test_key_alias_holding_raw_token(void **state)
{
    (void)state;
    char id[LM_ID_CAP], why[128];
    int raw = 0;
    json_t *r = row("{\"token\":\"sk-legaf\",\"key_alias\":\"mine: sk-legafx\"}");
    json_t *b = lm_key_body(r, id, &raw, why, sizeof(why));

    assert_non_null(b);
    assert_int_equal(raw, 1);
    assert_null(strstr(id, "sk-legaf"));
    assert_string_equal(id, "key sk-... (alias withheld: it holds the key)");
    json_decref(b);
    json_decref(r);
}

/* Only "every model" markers: no models member (every model). An alias with control bytes is
 * reported printable. */
static void test_key_models_markers_and_printable_id(void **state)
{
    (void)state;
    char id[LM_ID_CAP], why[128];
    int raw = 0;
    json_t *r = row("{\"token\":\"" HASH "\",\"models\":[\"all-proxy-models\"],"
                    "\"key_alias\":\"a\\nb\\\"c\"}");
    json_t *b = lm_key_body(r, id, &raw, why, sizeof(why));

    assert_non_null(b);
    assert_null(json_object_get(b, "models"));
    assert_string_equal(id, "key 3f2a9c1b0e77 (alias \"a?b?c\")");
    json_decref(b);
    json_decref(r);
}

static void test_team_row(void **state)
{
    (void)state;
    char id[LM_ID_CAP], why[128];
    json_t *r = row("{\"team_id\":\"t1\",\"team_alias\":\"search\",\"organization_id\":null,"
                    "\"admins\":[],\"members\":[],\"members_with_roles\":[],"
                    "\"metadata\":{\"cost_center\":\"42\"},\"max_budget\":100.0,\"spend\":3.0,"
                    "\"models\":[\"gpt-4o\",\"claude\"],\"max_parallel_requests\":8,"
                    "\"tpm_limit\":null,\"rpm_limit\":600,\"budget_duration\":\"7d\","
                    "\"budget_reset_at\":null,\"blocked\":false,\"model_spend\":{},"
                    "\"model_max_budget\":{},\"model_id\":null}");
    json_t *b = lm_team_body(r, id, why, sizeof(why));

    assert_non_null(b);
    assert_string_equal(id, "team t1 (alias \"search\")");
    expect_body(b, "{\"team_id\":\"t1\",\"team_alias\":\"search\",\"models\":[\"gpt-4o\","
                   "\"claude\"],\"max_budget\":100.0,\"budget_duration\":\"7d\","
                   "\"rpm_limit\":600,\"max_parallel_requests\":8,"
                   "\"metadata\":{\"cost_center\":\"42\"}}");
    json_decref(b);
    json_decref(r);
    /* the LiteLLM fields Tollgate stores without acting on them come along; the member lists
     * stay behind */
    r = row("{\"team_id\":\"t2\",\"organization_id\":\"org-1\",\"admins\":[\"u1\"],"
            "\"members\":[\"u2\"],\"members_with_roles\":[{\"role\":\"admin\",\"user_id\":\"u1\"}],"
            "\"model_max_budget\":{\"gpt-4o\":{\"budget_limit\":1.0}},"
            "\"team_member_permissions\":[\"/key/generate\"],\"spend\":3.0}");
    b = lm_team_body(r, id, why, sizeof(why));
    assert_non_null(b);
    expect_body(b, "{\"team_id\":\"t2\",\"organization_id\":\"org-1\","
                   "\"model_max_budget\":{\"gpt-4o\":{\"budget_limit\":1.0}},"
                   "\"team_member_permissions\":[\"/key/generate\"]}");
    json_decref(b);
    json_decref(r);
    r = row("{\"team_alias\":\"x\"}");
    assert_null(lm_team_body(r, id, why, sizeof(why)));
    assert_non_null(strstr(why, "team_id"));
    json_decref(r);
}

/* An update body clears what the source no longer sets, so that a second import mirrors it. */
static void test_update_body_clears(void **state)
{
    (void)state;
    json_t *b = row("{\"key_hash\":\"" HASH "\",\"rpm_limit\":4,\"duration\":\"10s\"}");
    json_t *u = lm_update_body(b);

    expect_body(u, "{\"key_hash\":\"" HASH "\",\"rpm_limit\":4,\"duration\":\"10s\","
                   "\"max_budget\":null,\"budget_duration\":null,\"tpm_limit\":null,"
                   "\"max_parallel_requests\":null,\"models\":[],\"blocked\":false}");
    /* the original is untouched */
    assert_int_equal(json_object_size(b), 3);
    json_decref(u);
    json_decref(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_key_row_full),
        cmocka_unit_test(test_key_budget_row_fills_gaps),
        cmocka_unit_test(test_key_skips),
        cmocka_unit_test(test_key_raw_token),
        cmocka_unit_test(test_key_alias_holding_raw_token),
        cmocka_unit_test(test_key_models_markers_and_printable_id),
        cmocka_unit_test(test_team_row),
        cmocka_unit_test(test_update_body_clears),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
