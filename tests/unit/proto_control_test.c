/* proto_control unit tests: the control topic golden vectors (tests/golden/control) through
 * proto's decoders and encoders, and the edges of the record key and block codecs. The same
 * vectors are read by router-svc's and spend-svc's tests (router_keys_test, spend_batch_test). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "control_vectors.h"
#include "proto_control.h"
#include "tg_err.h"

static void check_key(const struct cv_vector *v, const char *hash)
{
    struct proto_ctl_key k;
    char err[256] = "";
    const char *meta = cv_get(v, "metadata");
    int rc = proto_ctl_key_decode(hash, v->value, v->value_len, &k, err, sizeof(err));

    if (rc != 0)
        fail_msg("%s: refused: %s", v->name, err);
    assert_string_equal(k.key_hash, cv_get(v, "key_hash"));
    assert_string_equal(k.key_alias, cv_get(v, "key_alias"));
    assert_string_equal(k.team_id, cv_get(v, "team_id"));
    assert_string_equal(k.user_id, cv_get(v, "user_id"));
    assert_int_equal(k.max_budget_nusd, cv_int(v, "max_budget_nusd"));
    assert_int_equal(k.budget_duration_s, cv_int(v, "budget_duration_s"));
    if (meta == NULL)
        assert_null(k.metadata_json);
    else
        assert_string_equal(k.metadata_json, meta);
    proto_ctl_key_fini(&k);
    assert_null(k.metadata_json);
}

static void check_block(const struct cv_vector *v)
{
    struct proto_ctl_block b, b2;
    char err[256] = "", out[PROTO_CTL_BLOCK_JSON_MAX];
    size_t n = 0;
    int rc = proto_ctl_block_decode(v->value, v->value_len, &b, err, sizeof(err));

    if (rc != 0)
        fail_msg("%s: refused: %s", v->name, err);
    assert_string_equal(b.reason, cv_get(v, "reason"));
    assert_int_equal(b.since_ms, cv_int(v, "since_ms"));
    assert_int_equal(b.until_ms, cv_int(v, "until_ms"));
    assert_string_equal(b.scope, cv_get(v, "scope"));
    assert_int_equal(b.period_start_ms, cv_int(v, "period_start_ms"));
    assert_int_equal(b.spend_nusd, cv_int(v, "spend_nusd"));
    assert_int_equal(b.max_budget_nusd, cv_int(v, "max_budget_nusd"));
    assert_int_equal(proto_ctl_block_encode(&b, out, sizeof(out), &n), 0);
    assert_string_equal(out, cv_get(v, "encoded"));
    assert_int_equal(n, strlen(out));
    /* the encoding decodes to the same block */
    assert_int_equal(proto_ctl_block_decode(out, n, &b2, err, sizeof(err)), 0);
    assert_memory_equal(&b, &b2, sizeof(b));
}

/* A team: record (the vector's record key starts with "team:"): older readers' parser skips
 * it; the team parser and decoder read what the vector says. Returns 1 for a team_put. */
static int check_team(const struct cv_vector *v)
{
    struct proto_ctl_team t;
    char id[PROTO_CTL_TEAM_ID_MAX + 1], err[256] = "", back[PROTO_CTL_RECORD_KEY_MAX];
    char hash[PROTO_CTL_HASH_LEN + 1];
    enum proto_ctl_kind kind;
    size_t klen = strlen(v->record_key);
    int rc;

    assert_int_equal(proto_ctl_parse_key(v->record_key, klen, &kind, hash, err, sizeof(err)),
                     TG_ENOTFOUND);
    rc = proto_ctl_parse_team_key(v->record_key, klen, id, err, sizeof(err));
    if (strcmp(v->expect, "invalid") == 0) {
        if (rc == 0 && v->value != NULL)
            rc = proto_ctl_team_decode(id, v->value, v->value_len, &t, err, sizeof(err));
        if (rc != TG_EINVAL)
            fail_msg("%s: accepted (%d)", v->name, rc);
        if (strcmp(err, cv_get(v, "problem")) != 0)
            fail_msg("%s: problem \"%s\", expected \"%s\"", v->name, err, cv_get(v, "problem"));
        return 0;
    }
    if (rc != 0)
        fail_msg("%s: record key refused: %s", v->name, err);
    assert_string_equal(id, cv_get(v, "team_id"));
    assert_int_equal(proto_ctl_team_record_key(id, back, sizeof(back)), (int)klen);
    assert_string_equal(back, v->record_key);
    if (strcmp(v->expect, "team_delete") == 0) {
        assert_null(v->value);
        return 0;
    }
    if (strcmp(v->expect, "team_put") != 0)
        fail_msg("%s: unknown expect \"%s\" for a team record", v->name, v->expect);
    assert_non_null(v->value);
    rc = proto_ctl_team_decode(id, v->value, v->value_len, &t, err, sizeof(err));
    if (rc != 0)
        fail_msg("%s: refused: %s", v->name, err);
    assert_string_equal(t.team_id, cv_get(v, "team_id"));
    assert_string_equal(t.team_alias, cv_get(v, "team_alias"));
    assert_int_equal(t.max_budget_nusd, cv_int(v, "max_budget_nusd"));
    assert_int_equal(t.budget_duration_s, cv_int(v, "budget_duration_s"));
    assert_int_equal(t.blocked, cv_int(v, "blocked"));
    return 1;
}

static void test_golden(void **state)
{
    size_t n, seen_invalid = 0, seen_put = 0, seen_block = 0, seen_team = 0;
    struct cv_vector *vs = cv_load(&n);
    (void)state;

    for (size_t i = 0; i < n; i++) {
        const struct cv_vector *v = &vs[i];
        enum proto_ctl_kind kind = 0;
        char hash[PROTO_CTL_HASH_LEN + 1], err[256] = "", back[PROTO_CTL_RECORD_KEY_MAX];
        int rc = proto_ctl_parse_key(v->record_key, strlen(v->record_key), &kind, hash, err,
                                     sizeof(err));

        if (strncmp(v->record_key, PROTO_CTL_TEAM_PREFIX, 5) == 0) {
            seen_team += (size_t)check_team(v);
            continue;
        }
        if (strcmp(v->expect, "skip") == 0) {
            assert_int_equal(rc, TG_ENOTFOUND);
            continue;
        }
        if (strcmp(v->expect, "invalid") == 0) {
            seen_invalid++;
            if (rc == 0 && v->value != NULL && kind == PROTO_CTL_KEY) {
                struct proto_ctl_key k;

                rc = proto_ctl_key_decode(hash, v->value, v->value_len, &k, err, sizeof(err));
            } else if (rc == 0 && v->value != NULL) {
                struct proto_ctl_block b;

                rc = proto_ctl_block_decode(v->value, v->value_len, &b, err, sizeof(err));
            }
            if (rc != TG_EINVAL)
                fail_msg("%s: accepted (%d)", v->name, rc);
            if (strcmp(err, cv_get(v, "problem")) != 0)
                fail_msg("%s: problem \"%s\", expected \"%s\"", v->name, err, cv_get(v, "problem"));
            continue;
        }
        if (rc != 0)
            fail_msg("%s: record key refused: %s", v->name, err);
        assert_string_equal(hash, cv_get(v, "key_hash"));
        assert_int_equal(proto_ctl_record_key(kind, hash, back, sizeof(back)),
                         (int)strlen(v->record_key));
        assert_string_equal(back, v->record_key);
        if (strcmp(v->expect, "put") == 0 || strcmp(v->expect, "delete") == 0) {
            assert_int_equal(kind, PROTO_CTL_KEY);
            assert_true((v->value != NULL) == (strcmp(v->expect, "put") == 0));
            if (v->value != NULL) {
                check_key(v, hash);
                seen_put++;
            }
        } else if (strcmp(v->expect, "block") == 0 || strcmp(v->expect, "unblock") == 0) {
            assert_int_equal(kind, PROTO_CTL_BLOCK);
            assert_true((v->value != NULL) == (strcmp(v->expect, "block") == 0));
            if (v->value != NULL) {
                check_block(v);
                seen_block++;
            }
        } else {
            fail_msg("%s: unknown expect \"%s\"", v->name, v->expect);
        }
    }
    assert_true(seen_invalid >= 10 && seen_put >= 4 && seen_block >= 3 && seen_team >= 3);
    cv_free(vs, n);
}

static void test_record_key_edges(void **state)
{
    char out[PROTO_CTL_RECORD_KEY_MAX], hash[PROTO_CTL_HASH_LEN + 1], h[PROTO_CTL_HASH_LEN + 1];
    enum proto_ctl_kind kind;
    char err[128];
    (void)state;

    memset(h, 'f', PROTO_CTL_HASH_LEN);
    h[PROTO_CTL_HASH_LEN] = '\0';
    assert_int_equal(proto_ctl_record_key(PROTO_CTL_BLOCK, h, out, sizeof(out)), 70);
    assert_int_equal(proto_ctl_record_key(PROTO_CTL_BLOCK, h, out, 70), TG_EINVAL); /* no NUL */
    assert_int_equal(proto_ctl_record_key((enum proto_ctl_kind)3, h, out, sizeof(out)),
                     TG_EINVAL);
    h[10] = 'g';
    assert_int_equal(proto_ctl_record_key(PROTO_CTL_KEY, h, out, sizeof(out)), TG_EINVAL);
    assert_int_equal(proto_ctl_parse_key(NULL, 0, &kind, hash, err, sizeof(err)), TG_ENOTFOUND);
    assert_int_equal(proto_ctl_parse_key("ke", 2, &kind, hash, err, sizeof(err)), TG_ENOTFOUND);
    assert_int_equal(proto_ctl_parse_key("key:", 4, &kind, hash, err, sizeof(err)), TG_EINVAL);
    /* the length given, not a NUL, ends the record key */
    memset(h, 'a', PROTO_CTL_HASH_LEN);
    snprintf(out, sizeof(out), "key:%sX", h);
    assert_int_equal(proto_ctl_parse_key(out, 4 + PROTO_CTL_HASH_LEN, &kind, hash, err,
                                         sizeof(err)),
                     0);
    assert_int_equal(kind, PROTO_CTL_KEY);
    assert_int_equal(proto_ctl_parse_key(out, strlen(out), &kind, hash, err, sizeof(err)),
                     TG_EINVAL);
}

static void test_team_key_edges(void **state)
{
    char out[PROTO_CTL_RECORD_KEY_MAX], id[PROTO_CTL_TEAM_ID_MAX + 1], err[128];
    char longid[PROTO_CTL_TEAM_ID_MAX + 2];
    struct proto_ctl_team t;
    (void)state;

    memset(longid, 'a', sizeof(longid) - 1);
    longid[sizeof(longid) - 1] = '\0';
    assert_false(proto_ctl_team_id_ok(longid)); /* 65 bytes */
    longid[PROTO_CTL_TEAM_ID_MAX] = '\0';
    assert_true(proto_ctl_team_id_ok(longid)); /* 64 bytes */
    assert_int_equal(proto_ctl_team_record_key(longid, out, sizeof(out)), 69);
    assert_int_equal(proto_ctl_team_record_key(longid, out, 69), TG_EINVAL); /* no NUL */
    assert_false(proto_ctl_team_id_ok(""));
    assert_false(proto_ctl_team_id_ok(NULL));
    assert_false(proto_ctl_team_id_ok("a/b"));
    assert_int_equal(proto_ctl_parse_team_key(NULL, 0, id, err, sizeof(err)), TG_ENOTFOUND);
    assert_int_equal(proto_ctl_parse_team_key("key:x", 5, id, err, sizeof(err)), TG_ENOTFOUND);
    assert_int_equal(proto_ctl_parse_team_key("team:", 5, id, err, sizeof(err)), TG_EINVAL);
    /* the length bounds the id, not a NUL */
    assert_int_equal(proto_ctl_parse_team_key("team:abcdef", 7, id, err, sizeof(err)), 0);
    assert_string_equal(id, "ab");
    assert_int_equal(proto_ctl_team_decode("ab", "[]", 2, &t, err, sizeof(err)), TG_EINVAL);
    assert_string_equal(err, "team value: not a JSON object");
    assert_int_equal(proto_ctl_team_decode("ab", NULL, 0, &t, err, sizeof(err)), TG_EINVAL);
    {
        const char *bad = "{\"max_budget\":\"x\"}";

        assert_int_equal(proto_ctl_team_decode("ab", bad, strlen(bad), &t, err, sizeof(err)),
                         TG_EINVAL);
    }
    assert_string_equal(err, "max_budget: expected a number (USD) or null");
}

static void test_block_encode_edges(void **state)
{
    struct proto_ctl_block b;
    char out[PROTO_CTL_BLOCK_JSON_MAX];
    size_t n = 0;
    (void)state;

    proto_ctl_block_init(&b);
    assert_int_equal(proto_ctl_block_encode(&b, out, sizeof(out), &n), TG_EINVAL); /* no reason */
    memset(b.reason, 'r', sizeof(b.reason) - 1);
    b.reason[sizeof(b.reason) - 1] = '\0';
    b.since_ms = INT64_MAX;
    b.until_ms = INT64_MAX;
    snprintf(b.scope, sizeof(b.scope), "team");
    b.period_start_ms = INT64_MAX;
    b.spend_nusd = INT64_MAX;
    b.max_budget_nusd = INT64_MAX;
    /* the longest block fits PROTO_CTL_BLOCK_JSON_MAX */
    assert_int_equal(proto_ctl_block_encode(&b, out, sizeof(out), &n), 0);
    assert_int_equal(n, strlen(out));
    assert_int_equal(proto_ctl_block_encode(&b, out, n, &n), TG_ETOOBIG);
    b.spend_nusd = -2;
    assert_int_equal(proto_ctl_block_encode(&b, out, sizeof(out), &n), TG_EINVAL);
    b.spend_nusd = 0;
    snprintf(b.scope, sizeof(b.scope), "org");
    assert_int_equal(proto_ctl_block_encode(&b, out, sizeof(out), &n), TG_EINVAL);
    snprintf(b.scope, sizeof(b.scope), "key");
    b.reason[5] = '\x7f';
    assert_int_equal(proto_ctl_block_encode(&b, out, sizeof(out), &n), TG_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_golden),
        cmocka_unit_test(test_record_key_edges),
        cmocka_unit_test(test_block_encode_edges),
        cmocka_unit_test(test_team_key_edges),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
