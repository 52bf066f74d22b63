/* teams and team_api: the team: records of the control topic golden vectors through router-svc's
 * decoder and stored form, the teams table (snapshots, capacity), the team JSON field matrix,
 * and the /team/... routes in local mode (changes applied to the table directly) through the key
 * API, as the HTTP front calls them; the teams snapshot file (round trip, corruption, capacity,
 * the end-of-replay reconcile). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include <unistd.h>

#include "config.h"
#include "control.h"
#include "control_int.h" /* rt_control_teams_note / _reconcile: the replay's end, without Kafka */
#include "control_vectors.h"
#include "key_api.h"
#include "keys.h"
#include "teams.h"
#include "tg_err.h"
#include "tg_log.h"

static const char config_yaml[] =
    "model_list:\n"
    "  - model_name: gpt-main\n"
    "    litellm_params: {model: openai/m1, api_base: http://127.0.0.1:9/v1}\n"
    "  - model_name: gpt-fallback\n"
    "    litellm_params: {model: openai/m2, api_base: http://127.0.0.1:9/v1}\n"
    "router_settings:\n"
    "  model_group_alias: {alias-main: gpt-main}\n"
    "tollgate:\n"
    "  limits: {max_keys: 8, max_teams: 3}\n";

static void test_control_golden_vectors(void **state)
{
    static struct rt_team_spec spec;
    static char enc[RT_TEAM_JSON_MAX];
    char err[256];
    size_t n, enc_len, stored = 0, seen = 0;
    struct cv_vector *vs = cv_load(&n);
    (void)state;

    for (size_t i = 0; i < n; i++) {
        const struct cv_vector *v = &vs[i];
        int is_put = -1, rc;

        err[0] = '\0';
        rc = rt_teams_control_decode(v->record_key, strlen(v->record_key), v->value,
                                     v->value_len, &spec, &is_put, err, sizeof(err));
        if (strncmp(v->record_key, "team:", 5) != 0) {
            assert_int_equal(rc, TG_ENOTFOUND); /* keys, blocks, others: not the teams' */
            continue;
        }
        seen++;
        if (strcmp(v->expect, "invalid") == 0) {
            if (rc != TG_EINVAL)
                fail_msg("%s: router-svc accepts it (%d)", v->name, rc);
            assert_string_equal(err, cv_get(v, "problem"));
        } else if (strcmp(v->expect, "team_delete") == 0) {
            assert_int_equal(rc, 0);
            assert_int_equal(is_put, 0);
            assert_string_equal(spec.team_id, cv_get(v, "team_id"));
        } else if (cv_get(v, "stored") != NULL) {
            if (rc != 0)
                fail_msg("%s: refused: %s", v->name, err);
            assert_int_equal(is_put, 1);
            assert_string_equal(spec.team_id, cv_get(v, "team_id"));
            assert_string_equal(spec.team_alias, cv_get(v, "team_alias"));
            assert_int_equal(spec.max_budget_nusd, cv_int(v, "max_budget_nusd"));
            assert_int_equal(spec.budget_duration_s, cv_int(v, "budget_duration_s"));
            assert_int_equal(spec.blocked, cv_int(v, "blocked"));
            assert_int_equal(rt_team_spec_to_json(&spec, enc, sizeof(enc), &enc_len), 0);
            if (enc_len != v->value_len || memcmp(enc, v->value, enc_len) != 0)
                fail_msg("%s: encodes as %s", v->name, enc);
            stored++;
        } else {
            /* LiteLLM's names are for proto and spend-svc: router-svc validates its own form */
            assert_int_equal(rc, TG_EINVAL);
        }
    }
    assert_true(stored >= 2 && seen >= 6);
    cv_free(vs, n);
}

static void test_table_and_capacity(void **state)
{
    struct rt_teams *teams;
    struct rt_teams_table *old, *t;
    struct rt_team_spec s;
    struct rt_teams_stats st;
    char err[128];
    (void)state;

    assert_null(rt_teams_create(0, err, sizeof(err)));
    teams = rt_teams_create(2, err, sizeof(err));
    assert_non_null(teams);
    old = rt_teams_acquire(teams);
    rt_team_spec_init(&s);
    snprintf(s.team_id, sizeof(s.team_id), "b");
    assert_int_equal(rt_teams_put(teams, &s), 0);
    snprintf(s.team_id, sizeof(s.team_id), "a");
    s.rpm_limit = 5;
    assert_int_equal(rt_teams_put(teams, &s), 0);
    snprintf(s.team_id, sizeof(s.team_id), "c");
    assert_int_equal(rt_teams_put(teams, &s), TG_EFULL);
    s.rpm_limit = 7;
    snprintf(s.team_id, sizeof(s.team_id), "a");
    assert_int_equal(rt_teams_put(teams, &s), 0); /* a replacement needs no room */
    snprintf(s.team_id, sizeof(s.team_id), "bad id");
    assert_int_equal(rt_teams_put(teams, &s), TG_EINVAL);
    t = rt_teams_acquire(teams);
    assert_int_equal(rt_teams_count(t), 2);
    assert_string_equal(rt_teams_at(t, 0)->team_id, "a");
    assert_int_equal(rt_teams_lookup(t, "a")->rpm_limit, 7);
    assert_null(rt_teams_lookup(t, "c"));
    assert_null(rt_teams_lookup(t, ""));
    /* the snapshot taken before the changes is unchanged */
    assert_int_equal(rt_teams_count(old), 0);
    rt_teams_release(&old);
    assert_int_equal(rt_teams_delete(teams, "b"), 0);
    assert_int_equal(rt_teams_delete(teams, "nowhere"), 0);
    assert_non_null(rt_teams_lookup(t, "b")); /* still held */
    rt_teams_release(&t);
    rt_teams_get_stats(teams, &st);
    assert_int_equal(st.count, 1);
    assert_int_equal(st.capacity, 2);
    assert_int_equal(st.full_rejections, 1);
    assert_true(rt_team_allows(NULL, "x"));
    s.n_models = 1;
    snprintf(s.models[0], sizeof(s.models[0]), "gpt-main");
    assert_true(rt_team_allows(&s, "gpt-main"));
    assert_false(rt_team_allows(&s, "gpt-fallback"));
    rt_teams_destroy(&teams);
    rt_teams_destroy(&teams); /* NULL */
}

static void test_json_field_matrix(void **state)
{
    static const struct {
        const char *body;
        const char *err;
    } bad[] = {
        {"{\"colour\":1}", "colour: unknown field"},
        {"{\"key_alias\":\"x\"}", "key_alias: unknown field"},
        {"{\"team_id\":1}", "team_id: expected 1 to 64 letters, digits or \"-_.:@\" (e.g. a UUID)"},
        {"{\"team_id\":\"a b\"}",
         "team_id: expected 1 to 64 letters, digits or \"-_.:@\" (e.g. a UUID)"},
        {"{\"team_alias\":5}", "team_alias: expected a string or null"},
        {"{\"models\":\"gpt-main\"}", "models: expected an array of model names or null"},
        {"{\"models\":[\"nope\"]}", "models[0]: unknown model group or alias \"nope\""},
        {"{\"models\":[\"gpt-main\",\"gpt-main\"]}", "models[1]: \"gpt-main\" is listed twice"},
        {"{\"models\":[1]}", "models[0]: expected a non-empty string"},
        {"{\"max_budget\":\"10\"}", "max_budget: expected a non-negative number (USD) or null"},
        {"{\"max_budget\":-1}", "max_budget: expected a non-negative number (USD) or null"},
        {"{\"budget_duration\":\"soon\"}",
         "budget_duration: expected a duration like 30s, 10m, 1h, 7d or 1mo"},
        {"{\"rpm_limit\":1.5}", "rpm_limit: expected a non-negative integer or null"},
        {"{\"tpm_limit\":-2}", "tpm_limit: expected a non-negative integer or null"},
        {"{\"max_parallel_requests\":\"2\"}",
         "max_parallel_requests: expected a non-negative integer or null"},
        {"{\"metadata\":[]}", "metadata: expected an object or null"},
        {"{\"blocked\":\"yes\"}", "blocked: expected true, false or null"},
        {"{\"max_budget_nusd\":5}", "max_budget_nusd: unknown field"}, /* stored form only */
        {"[1]", "body: expected a JSON object"},
    };
    struct rt_config_diag *diag = calloc(1, sizeof(*diag));
    struct rt_config *cfg = rt_config_load_buffer("r.yaml", config_yaml, strlen(config_yaml), diag);
    static struct rt_team_spec s;
    char err[512], big[RT_TEAM_METADATA_MAX + 64];
    const char *good = "{\"team_id\":\"ml\",\"team_alias\":\"ML\",\"models\":[\"alias-main\"],"
                       "\"max_budget\":12.5,\"budget_duration\":\"30d\",\"rpm_limit\":10,"
                       "\"tpm_limit\":null,\"max_parallel_requests\":2,\"metadata\":{\"a\":1},"
                       "\"blocked\":false}";
    (void)state;

    assert_non_null(cfg);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        rt_team_spec_init(&s);
        err[0] = '\0';
        assert_int_equal(rt_team_spec_from_json(&s, RT_TEAM_JSON_API, bad[i].body,
                                                strlen(bad[i].body), cfg, err, sizeof(err)),
                         TG_EINVAL);
        if (strcmp(err, bad[i].err) != 0)
            fail_msg("%s: \"%s\", expected \"%s\"", bad[i].body, err, bad[i].err);
    }
    rt_team_spec_init(&s);
    assert_int_equal(
        rt_team_spec_from_json(&s, RT_TEAM_JSON_API, good, strlen(good), cfg, err, sizeof(err)),
        0);
    assert_string_equal(s.team_id, "ml");
    assert_string_equal(s.team_alias, "ML");
    assert_int_equal(s.n_models, 1);
    assert_int_equal(s.max_budget_nusd, 12500000000LL);
    assert_int_equal(s.budget_duration_s, 2592000);
    assert_int_equal(s.rpm_limit, 10);
    assert_int_equal(s.tpm_limit, RT_LIMIT_NONE);
    assert_int_equal(s.max_parallel_requests, 2);
    assert_string_equal(s.metadata, "{\"a\":1}");
    /* null resets; absent keeps */
    assert_int_equal(rt_team_spec_from_json(&s, RT_TEAM_JSON_API, "{\"rpm_limit\":null}", 18, cfg,
                                            err, sizeof(err)),
                     0);
    assert_int_equal(s.rpm_limit, RT_LIMIT_NONE);
    assert_int_equal(s.max_parallel_requests, 2);
    /* metadata is bounded */
    memset(big, 'x', sizeof(big));
    memcpy(big, "{\"metadata\":{\"k\":\"", 18);
    memcpy(big + sizeof(big) - 4, "\"}}", 4);
    assert_int_equal(rt_team_spec_from_json(&s, RT_TEAM_JSON_API, big, strlen(big), cfg, err,
                                            sizeof(err)),
                     TG_EINVAL);
    assert_string_equal(err, "metadata: larger than 4095 bytes as compact JSON");
    assert_string_equal(s.metadata, "{}");
    rt_config_destroy(&cfg);
    free(diag);
}

/* ---- routes ---- */

struct answer {
    int calls;
    int status;
    char body[1 << 16];
};

static void on_answer(int status, const char *body, size_t len, void *ud)
{
    struct answer *a = ud;

    a->calls++;
    a->status = status;
    assert_true(len < sizeof(a->body));
    memcpy(a->body, body, len);
    a->body[len] = '\0';
}

struct fixture {
    struct rt_config *cfg;
    struct rt_keys *keys;
    struct rt_teams *teams;
    struct rt_key_api *api;
    struct answer a;
};

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    struct rt_config_diag *diag = calloc(1, sizeof(*diag));
    struct rt_key_api_config kc;
    char err[256];

    tg_log_set_level(TG_LOG_OFF);
    f->cfg = rt_config_load_buffer("router.yaml", config_yaml, strlen(config_yaml), diag);
    if (f->cfg == NULL)
        fail_msg("config: %s", diag->error);
    free(diag);
    assert_int_equal(f->cfg->max_teams, 3);
    f->keys = rt_keys_create(NULL, 0, f->cfg->max_keys, err, sizeof(err));
    f->teams = rt_teams_create(f->cfg->max_teams, err, sizeof(err));
    memset(&kc, 0, sizeof(kc));
    kc.cfg = f->cfg;
    kc.keys = f->keys;
    kc.teams = f->teams;
    f->api = rt_key_api_create(&kc, err, sizeof(err));
    assert_non_null(f->api);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;

    rt_key_api_destroy(&f->api);
    rt_teams_destroy(&f->teams);
    rt_keys_destroy(&f->keys);
    rt_config_destroy(&f->cfg);
    free(f);
    return 0;
}

/* One request; returns the parsed body (caller decrefs). */
static json_t *call(struct fixture *f, const char *method, const char *path, const char *param,
                    const char *body, int want_status)
{
    json_t *o;

    memset(&f->a, 0, sizeof(f->a));
    rt_key_api_handle(f->api, method, path, param, body, body != NULL ? strlen(body) : 0,
                      on_answer, &f->a);
    assert_int_equal(f->a.calls, 1);
    if (f->a.status != want_status)
        fail_msg("%s %s: %d %s (wanted %d)", method, path, f->a.status, f->a.body, want_status);
    o = json_loads(f->a.body, 0, NULL);
    assert_non_null(o);
    assert_int_equal(rt_key_api_in_flight(f->api), 0);
    return o;
}

static const char *err_param(json_t *o)
{
    return json_string_value(json_object_get(json_object_get(o, "error"), "param"));
}

static void test_routes(void **state)
{
    struct fixture *f = *state;
    json_t *o, *t;
    char body[256], id[80];

    /* new: generated id, LiteLLM's field names back */
    o = call(f, "POST", "/team/new", NULL,
             "{\"team_alias\":\"ml\",\"models\":[\"gpt-main\"],\"max_budget\":5,"
             "\"budget_duration\":\"1d\",\"rpm_limit\":3,\"metadata\":{\"cc\":\"x\"}}",
             200);
    assert_int_equal(strlen(json_string_value(json_object_get(o, "team_id"))), 36);
    snprintf(id, sizeof(id), "%s", json_string_value(json_object_get(o, "team_id")));
    assert_string_equal(json_string_value(json_object_get(o, "team_alias")), "ml");
    assert_true(json_real_value(json_object_get(o, "max_budget")) == 5.0);
    assert_string_equal(json_string_value(json_object_get(o, "budget_duration")), "1d");
    assert_non_null(json_string_value(json_object_get(o, "budget_reset_at")));
    assert_int_equal(json_integer_value(json_object_get(o, "rpm_limit")), 3);
    assert_true(json_is_null(json_object_get(o, "tpm_limit")));
    assert_true(json_is_false(json_object_get(o, "blocked")));
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(o, "metadata"), "cc")), "x");
    json_decref(o);
    /* caller-chosen id; taken twice: 409 */
    json_decref(call(f, "POST", "/team/new", NULL, "{\"team_id\":\"team-b\"}", 200));
    o = call(f, "POST", "/team/new", NULL, "{\"team_id\":\"team-b\"}", 409);
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(o, "error"), "code")), "team_exists");
    json_decref(o);
    /* unknown field and wrong type: 400 naming the field */
    o = call(f, "POST", "/team/new", NULL, "{\"team_alias\":\"x\",\"budget\":1}", 400);
    assert_string_equal(err_param(o), "budget");
    json_decref(o);
    o = call(f, "POST", "/team/new", NULL, "{\"rpm_limit\":\"10\"}", 400);
    assert_string_equal(err_param(o), "rpm_limit");
    json_decref(o);
    o = call(f, "POST", "/team/new", NULL, "{\"models\":[\"gpt-main\", 7]}", 400);
    assert_string_equal(err_param(o), "models[1]");
    json_decref(o);
    /* capacity (max_teams 3): the third fits, the fourth is refused, naming the limit */
    json_decref(call(f, "POST", "/team/new", NULL, "{\"team_id\":\"team-c\"}", 200));
    o = call(f, "POST", "/team/new", NULL, "{\"team_id\":\"team-d\"}", 503);
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(o, "error"), "code")), "teams_capacity");
    assert_non_null(strstr(json_string_value(json_object_get(json_object_get(o, "error"),
                                                             "message")),
                           "limits.max_teams = 3"));
    json_decref(o);
    {
        struct rt_teams_stats st;

        rt_teams_get_stats(f->teams, &st);
        assert_int_equal(st.full_rejections, 1); /* counted */
        assert_int_equal(st.count, 3);
    }

    /* update merges; unknown team 404; team_id required */
    snprintf(body, sizeof(body), "{\"team_id\":\"%s\",\"tpm_limit\":1000,\"rpm_limit\":null}",
             id);
    o = call(f, "POST", "/team/update", NULL, body, 200);
    assert_string_equal(json_string_value(json_object_get(o, "team_id")), id);
    t = json_object_get(o, "data");
    assert_int_equal(json_integer_value(json_object_get(t, "tpm_limit")), 1000);
    assert_true(json_is_null(json_object_get(t, "rpm_limit")));
    assert_string_equal(json_string_value(json_object_get(t, "team_alias")), "ml");
    json_decref(o);
    o = call(f, "POST", "/team/update", NULL, "{\"team_id\":\"nowhere\",\"rpm_limit\":1}", 404);
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(o, "error"), "code")), "team_not_found");
    json_decref(o);
    o = call(f, "POST", "/team/update", NULL, "{\"rpm_limit\":1}", 400);
    assert_string_equal(err_param(o), "team_id");
    json_decref(o);
    snprintf(body, sizeof(body), "{\"team_id\":\"%s\",\"colour\":\"red\"}", id);
    o = call(f, "POST", "/team/update", NULL, body, 400);
    assert_string_equal(err_param(o), "colour");
    json_decref(o);

    /* block / unblock */
    o = call(f, "POST", "/team/block", NULL, "{\"team_id\":\"team-b\"}", 200);
    assert_true(json_is_true(json_object_get(o, "blocked")));
    json_decref(o);
    o = call(f, "POST", "/team/block", NULL, "{\"team_id\":\"team-b\",\"x\":1}", 400);
    assert_string_equal(err_param(o), "x");
    json_decref(o);

    /* info: GET ?team_id= and POST; the keys of the team */
    {
        struct rt_key_spec *ks = calloc(1, sizeof(*ks));
        struct rt_key_change ch;

        rt_key_spec_init(ks);
        memset(ks->key_hash, 'a', 64);
        snprintf(ks->team_id, sizeof(ks->team_id), "team-b");
        memset(&ch, 0, sizeof(ch));
        ch.op = RT_KEY_PUT;
        ch.spec = ks;
        assert_int_equal(rt_keys_apply(f->keys, &ch, 1), 0);
        free(ks);
    }
    o = call(f, "GET", "/team/info", "team-b", NULL, 200);
    assert_string_equal(json_string_value(json_object_get(o, "team_id")), "team-b");
    assert_true(json_is_true(json_object_get(json_object_get(o, "team_info"), "blocked")));
    assert_int_equal(json_array_size(json_object_get(o, "keys")), 1);
    json_decref(o);
    o = call(f, "POST", "/team/info", NULL, "{\"team_id\":\"team-c\"}", 200);
    assert_int_equal(json_array_size(json_object_get(o, "keys")), 0);
    json_decref(o);
    json_decref(call(f, "GET", "/team/info", "nowhere", NULL, 404));
    o = call(f, "GET", "/team/info", NULL, NULL, 400);
    assert_string_equal(err_param(o), "team_id");
    json_decref(o);
    json_decref(call(f, "POST", "/team/unblock", NULL, "{\"team_id\":\"team-b\"}", 200));

    /* list: every team in id order; filter by alias */
    o = call(f, "GET", "/team/list", NULL, NULL, 200);
    assert_int_equal(json_array_size(o), 3);
    assert_string_equal(json_string_value(json_object_get(json_array_get(o, 1), "team_id")),
                        "team-b");
    assert_true(json_is_false(json_object_get(json_array_get(o, 1), "blocked")));
    json_decref(o);
    o = call(f, "GET", "/team/list", "ml", NULL, 200);
    assert_int_equal(json_array_size(o), 1);
    json_decref(o);
    o = call(f, "POST", "/team/list", NULL, "{\"team_alias\":\"none\"}", 200);
    assert_int_equal(json_array_size(o), 0);
    json_decref(o);

    /* keys of team-b, team-c and of no team: deleting the teams deletes their keys (LiteLLM's
     * /team/delete does), first, and no other key */
    {
        char kh[3][TG_SHA256_HEX_LEN + 1];
        static const char *const kteam[3] = {"team-b", "team-c", NULL};

        for (int i = 0; i < 3; i++) {
            if (kteam[i] != NULL)
                snprintf(body, sizeof(body), "{\"team_id\":\"%s\"}", kteam[i]);
            else
                snprintf(body, sizeof(body), "{}");
            o = call(f, "POST", "/key/generate", NULL, body, 200);
            snprintf(kh[i], sizeof(kh[i]), "%s", json_string_value(json_object_get(o, "key_hash")));
            json_decref(o);
        }
        o = call(f, "POST", "/team/delete", NULL, "{\"team_ids\":[\"team-b\",\"nowhere\"]}",
                 404);
        json_decref(o);
        {
            struct rt_keys_table *kt = rt_keys_acquire(f->keys);

            /* a refused delete deleted no key */
            for (int i = 0; i < 3; i++)
                assert_non_null(rt_keys_lookup_hash(kt, kh[i]));
            rt_keys_release(&kt);
        }
        o = call(f, "POST", "/team/delete", NULL, "{\"team_ids\":[\"team-b\",\"team-c\"]}", 200);
        assert_int_equal(json_array_size(json_object_get(o, "deleted_teams")), 2);
        {
            /* the two keys made above among them (and any other key of those teams), never
             * the key of no team; every one listed is gone */
            json_t *dk = json_object_get(o, "deleted_keys"), *v;
            size_t i;
            int seen[3] = {0, 0, 0};
            struct rt_keys_table *kt = rt_keys_acquire(f->keys);

            json_array_foreach (dk, i, v) {
                for (int k = 0; k < 3; k++)
                    seen[k] |= strcmp(json_string_value(v), kh[k]) == 0;
                assert_null(rt_keys_lookup_hash(kt, json_string_value(v)));
            }
            rt_keys_release(&kt);
            assert_true(seen[0] && seen[1] && !seen[2]);
        }
        json_decref(o);
        {
            struct rt_keys_table *kt = rt_keys_acquire(f->keys);

            assert_null(rt_keys_lookup_hash(kt, kh[0]));
            assert_null(rt_keys_lookup_hash(kt, kh[1]));
            assert_non_null(rt_keys_lookup_hash(kt, kh[2]));
            rt_keys_release(&kt);
        }
        o = call(f, "GET", "/team/list", NULL, NULL, 200);
        assert_int_equal(json_array_size(o), 1);
        json_decref(o);
    }

    /* delete: LiteLLM's team_ids; an unknown id deletes nothing */
    json_decref(call(f, "POST", "/team/new", NULL, "{\"team_id\":\"team-b\"}", 200));
    json_decref(call(f, "POST", "/team/new", NULL, "{\"team_id\":\"team-c\"}", 200));
    o = call(f, "POST", "/team/delete", NULL, "{\"team_ids\":[\"team-b\",\"nowhere\"]}", 404);
    json_decref(o);
    o = call(f, "POST", "/team/delete", NULL, "{\"team_ids\":\"team-b\"}", 400);
    assert_string_equal(err_param(o), "team_ids");
    json_decref(o);
    o = call(f, "POST", "/team/delete", NULL, "{\"team_ids\":[\"team-b\",\"team-c\"]}", 200);
    assert_int_equal(json_array_size(json_object_get(o, "deleted_teams")), 2);
    json_decref(o);
    o = call(f, "GET", "/team/list", NULL, NULL, 200);
    assert_int_equal(json_array_size(o), 1);
    json_decref(o);

    /* methods and paths */
    json_decref(call(f, "GET", "/team/new", NULL, NULL, 405));
    json_decref(call(f, "POST", "/team/nope", NULL, "{}", 404));
    assert_true(rt_key_api_is_admin_path("/team/new"));
    assert_false(rt_key_api_is_admin_path("/team/"));
}

/* Without a teams table the team routes are 404. */
static void test_no_teams_table(void **state)
{
    struct fixture *f = *state;
    struct rt_key_api_config kc;
    struct rt_key_api *api;
    char err[128];
    (void)state;

    memset(&kc, 0, sizeof(kc));
    kc.cfg = f->cfg;
    kc.keys = f->keys;
    api = rt_key_api_create(&kc, err, sizeof(err));
    assert_non_null(api);
    memset(&f->a, 0, sizeof(f->a));
    rt_key_api_handle(api, "POST", "/team/new", NULL, "{}", 2, on_answer, &f->a);
    assert_int_equal(f->a.status, 404);
    rt_key_api_destroy(&api);
}

/* A control store without brokers: team changes answer 503 at once, nothing applied. */
static void test_no_brokers_answers_503(void **state)
{
    struct fixture *f = *state;
    struct rt_control_config cc;
    struct rt_key_api_config kc;
    struct rt_control *control;
    struct rt_key_api *api;
    char err[256];
    json_t *o;
    struct rt_teams_table *t;

    memset(&cc, 0, sizeof(cc));
    cc.cfg = f->cfg;
    cc.teams = f->teams;
    control = rt_control_create(&cc, f->keys, err, sizeof(err));
    assert_non_null(control);
    memset(&kc, 0, sizeof(kc));
    kc.cfg = f->cfg;
    kc.keys = f->keys;
    kc.control = control;
    kc.teams = f->teams;
    api = rt_key_api_create(&kc, err, sizeof(err));
    assert_non_null(api);
    memset(&f->a, 0, sizeof(f->a));
    rt_key_api_handle(api, "POST", "/team/new", NULL, "{\"team_id\":\"t\"}", 15, on_answer,
                      &f->a);
    assert_int_equal(f->a.calls, 1);
    assert_int_equal(f->a.status, 503);
    o = json_loads(f->a.body, 0, NULL);
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(o, "error"), "code")),
        "team_store_unavailable");
    json_decref(o);
    t = rt_teams_acquire(f->teams);
    assert_int_equal(rt_teams_count(t), 0);
    rt_teams_release(&t);
    assert_int_equal(rt_control_publish_team(control, "t", NULL, NULL, NULL), TG_EINVAL);
    rt_key_api_destroy(&api);
    rt_control_destroy(&control);
}

/* LiteLLM's team fields Tollgate stores without acting on them (team_extra.h): each of its type,
 * null removes one, absent ones keep theirs, at most RT_TEAM_EXTRA_MAX_BYTES as JSON (exactly the
 * cap is taken, a byte more is refused naming the cap, nothing cut), the stored form carries them
 * as "extra" and decodes to the same spec and bytes, and the table keeps them. */
static void test_extra_fields_spec(void **state)
{
    static const struct {
        const char *body;
        const char *err;
    } bad[] = {
        {"{\"members_with_roles\":[\"u1\"]}",
         "members_with_roles: expected a list of objects or null"},
        {"{\"organization_id\":5}", "organization_id: expected a string or null"},
        {"{\"model_aliases\":[]}", "model_aliases: expected an object or null"},
        {"{\"team_member_budget\":\"1\"}", "team_member_budget: expected a number or null"},
        {"{\"team_member_rpm_limit\":1.5}",
         "team_member_rpm_limit: expected an integer or null"},
        {"{\"team_member_permissions\":[1]}",
         "team_member_permissions: expected a list of strings or null"},
        {"{\"model_rpm_limit\":{\"gpt-main\":\"5\"}}",
         "model_rpm_limit: expected an object of integers or null"},
        {"{\"tpm_limit_type\":\"fast\"}",
         "tpm_limit_type: expected \"guaranteed_throughput\", \"best_effort_throughput\", "
         "\"dynamic\" or null"},
        {"{\"key_type\":\"llm_api\"}", "key_type: unknown field"}, /* a key's, not a team's */
        {"{\"extra\":{}}", "extra: unknown field"},                /* the stored form's only */
    };
    static struct rt_team_spec s, back;
    static char enc[RT_TEAM_JSON_MAX], enc2[RT_TEAM_JSON_MAX];
    char err[512];
    size_t n, n2, pad;
    char *big;
    struct rt_teams *teams;
    struct rt_teams_table *t;
    struct rt_team_spec *copy;
    const struct rt_team_spec *cur;
    int is_put = 0;
    const char *upd;
    const char *all =
        "{\"team_id\":\"x1\",\"members_with_roles\":[{\"role\":\"admin\",\"user_id\":\"u1\"}],"
        "\"members\":[],\"admins\":[\"u1\"],\"tags\":[\"prod\"],\"organization_id\":\"org-1\","
        "\"model_aliases\":{\"my\":\"gpt-main\"},\"guardrails\":[\"pii\"],\"prompts\":[\"p1\"],"
        "\"object_permission\":{\"vector_stores\":[\"vs1\"]},\"team_member_budget\":2.5,"
        "\"team_member_rpm_limit\":10,\"team_member_tpm_limit\":1000,"
        "\"team_member_key_duration\":\"30d\",\"team_member_permissions\":[\"/key/generate\"],"
        "\"model_rpm_limit\":{\"gpt-main\":5},\"model_tpm_limit\":{\"gpt-main\":50},"
        "\"soft_budget\":0.1,\"allowed_passthrough_routes\":[\"/x\"],"
        "\"allowed_vector_store_indexes\":[{\"index_name\":\"i\"}],"
        "\"secret_manager_settings\":{\"a\":1},\"router_settings\":{\"num_retries\":2},"
        "\"model_max_budget\":{\"gpt-main\":{\"budget_limit\":1}},\"rpm_limit_type\":null}";
    (void)state;

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        rt_team_spec_init(&s);
        err[0] = '\0';
        assert_int_equal(rt_team_spec_from_json(&s, RT_TEAM_JSON_API, bad[i].body,
                                                strlen(bad[i].body), NULL, err, sizeof(err)),
                         TG_EINVAL);
        if (strcmp(err, bad[i].err) != 0)
            fail_msg("%s: \"%s\", expected \"%s\"", bad[i].body, err, bad[i].err);
        assert_string_equal(s.extra, "");
    }

    /* every field, stored in name order; null of an absent field is no field */
    rt_team_spec_init(&s);
    assert_int_equal(
        rt_team_spec_from_json(&s, RT_TEAM_JSON_API, all, strlen(all), NULL, err, sizeof(err)), 0);
    assert_int_equal(strncmp(s.extra, "{\"admins\":[\"u1\"],\"allowed_passthrough_routes\":", 46),
                     0);
    assert_non_null(strstr(s.extra, "\"soft_budget\":0.1,"));
    assert_non_null(strstr(s.extra, "\"team_member_rpm_limit\":10,"));
    assert_null(strstr(s.extra, "rpm_limit_type"));
    /* update: given replace, null removes, absent keep */
    upd = "{\"organization_id\":null,\"tags\":[\"a\",\"b\"]}";
    assert_int_equal(
        rt_team_spec_from_json(&s, RT_TEAM_JSON_API, upd, strlen(upd), NULL, err, sizeof(err)), 0);
    assert_null(strstr(s.extra, "organization_id"));
    assert_non_null(strstr(s.extra, "\"tags\":[\"a\",\"b\"]"));
    assert_non_null(strstr(s.extra, "\"team_member_budget\":2.5"));

    /* the stored form: "extra" last; decoded to the same spec, encoded to the same bytes */
    assert_int_equal(rt_team_spec_to_json(&s, enc, sizeof(enc), &n), 0);
    assert_non_null(strstr(enc, ",\"blocked\":false,\"extra\":{\"admins\":"));
    assert_int_equal(rt_teams_control_decode("team:x1", 7, enc, n, &back, &is_put, err,
                                             sizeof(err)),
                     0);
    assert_int_equal(is_put, 1);
    assert_string_equal(back.extra, s.extra);
    assert_int_equal(rt_team_spec_to_json(&back, enc2, sizeof(enc2), &n2), 0);
    assert_int_equal(n2, n);
    assert_memory_equal(enc2, enc, n);
    /* a team without such fields has no "extra"; the stored form refuses a field of another
     * record and a field of the wrong type, naming it */
    rt_team_spec_init(&back);
    snprintf(back.team_id, sizeof(back.team_id), "x1");
    assert_int_equal(rt_team_spec_to_json(&back, enc2, sizeof(enc2), &n2), 0);
    assert_null(strstr(enc2, "extra"));
    assert_int_equal(rt_teams_control_decode("team:x1", 7, "{\"extra\":{\"spend\":1}}", 21, &back,
                                             &is_put, err, sizeof(err)),
                     TG_EINVAL);
    assert_string_equal(err, "extra.spend: unknown field");
    assert_int_equal(rt_teams_control_decode("team:x1", 7, "{\"extra\":{\"prompts\":1}}", 23,
                                             &back, &is_put, err, sizeof(err)),
                     TG_EINVAL);
    assert_string_equal(err, "extra.prompts: expected a list of strings or null");
    assert_int_equal(rt_teams_control_decode("team:x1", 7, "{\"extra\":null}", 14, &back,
                                             &is_put, err, sizeof(err)),
                     0);
    assert_string_equal(back.extra, "");

    /* the table keeps them (a record holds the fixed part and the extra's bytes) */
    teams = rt_teams_create(2, err, sizeof(err));
    assert_non_null(teams);
    assert_int_equal(rt_teams_put(teams, &s), 0);
    t = rt_teams_acquire(teams);
    cur = rt_teams_lookup(t, "x1");
    assert_non_null(cur);
    assert_string_equal(cur->extra, s.extra);
    copy = calloc(1, sizeof(*copy));
    rt_team_spec_copy(copy, cur);
    assert_string_equal(copy->extra, s.extra);
    assert_string_equal(copy->team_id, "x1");
    free(copy);
    rt_teams_release(&t);
    rt_teams_destroy(&teams);

    /* the cap: exactly RT_TEAM_EXTRA_MAX_BYTES is taken, one more byte is refused */
    big = malloc(RT_TEAM_EXTRA_MAX_BYTES + 64);
    assert_non_null(big);
    pad = RT_TEAM_EXTRA_MAX_BYTES - strlen("{\"secret_manager_settings\":{\"x\":\"\"}}");
    for (int extra_byte = 0; extra_byte <= 1; extra_byte++) {
        char *p = big;

        p += sprintf(p, "{\"secret_manager_settings\":{\"x\":\"");
        memset(p, 'v', pad + (size_t)extra_byte);
        p += pad + (size_t)extra_byte;
        sprintf(p, "\"}}");
        rt_team_spec_init(&s);
        err[0] = '\0';
        if (extra_byte == 0) {
            assert_int_equal(rt_team_spec_from_json(&s, RT_TEAM_JSON_API, big, strlen(big), NULL,
                                                    err, sizeof(err)),
                             0);
            assert_int_equal(strlen(s.extra), RT_TEAM_EXTRA_MAX_BYTES);
            /* every part at its largest, escaped at its most: the stored form still fits */
            memset(s.team_id, 'i', PROTO_CTL_TEAM_ID_MAX);
            s.team_id[PROTO_CTL_TEAM_ID_MAX] = '\0';
            memset(s.team_alias, 1, sizeof(s.team_alias) - 1);
            s.n_models = RT_TEAM_MODELS_MAX;
            for (uint32_t m = 0; m < RT_TEAM_MODELS_MAX; m++) {
                memset(s.models[m], 1, RT_NAME_CAP - 1);
                s.models[m][RT_NAME_CAP - 1] = '\0';
                s.models[m][0] = (char)('a' + m % 26); /* distinct, as the API keeps them */
                s.models[m][1] = (char)('a' + m / 26);
            }
            memset(s.metadata, 'm', RT_TEAM_METADATA_MAX - 1);
            memcpy(s.metadata, "{\"k\":\"", 6);
            memcpy(s.metadata + RT_TEAM_METADATA_MAX - 3, "\"}", 3);
            assert_int_equal(rt_team_spec_to_json(&s, enc, sizeof(enc), &n), 0);
            assert_true(n > RT_TEAM_EXTRA_MAX_BYTES + RT_TEAM_MODELS_MAX * (RT_NAME_CAP - 1) * 6);
        } else {
            assert_int_equal(rt_team_spec_from_json(&s, RT_TEAM_JSON_API, big, strlen(big), NULL,
                                                    err, sizeof(err)),
                             TG_EINVAL);
            assert_string_equal(s.extra, "");
            assert_int_equal(strncmp(err, "secret_manager_settings: ", 25), 0);
            assert_non_null(strstr(err, "more than the 16384 bytes a team may hold"));
        }
    }
    free(big);
}

/* The routes return the stored-only fields at the top level, as LiteLLM does; /team/update
 * merges them; a wrong type or a body beyond the cap is a 400 naming the field. */
static void test_extra_fields_routes(void **state)
{
    struct fixture *f = *state;
    json_t *o, *t;
    char *big;
    size_t i;

    o = call(f, "POST", "/team/new", NULL,
             "{\"team_id\":\"x1\",\"team_alias\":\"ml\",\"organization_id\":\"org-1\","
             "\"members_with_roles\":[{\"role\":\"admin\",\"user_id\":\"u1\"}],"
             "\"team_member_budget\":2.5,\"soft_budget\":0.1,\"tags\":[\"prod\"]}",
             200);
    assert_string_equal(json_string_value(json_object_get(o, "organization_id")), "org-1");
    assert_int_equal(json_array_size(json_object_get(o, "members_with_roles")), 1);
    assert_true(json_real_value(json_object_get(o, "team_member_budget")) == 2.5);
    assert_true(json_real_value(json_object_get(o, "soft_budget")) == 0.1);
    assert_null(json_object_get(o, "extra"));
    assert_null(json_object_get(o, "team_member_rpm_limit")); /* not given: not returned */
    json_decref(o);
    o = call(f, "POST", "/team/update", NULL,
             "{\"team_id\":\"x1\",\"organization_id\":null,\"tags\":[\"a\",\"b\"],"
             "\"team_member_rpm_limit\":7}",
             200);
    t = json_object_get(o, "data");
    assert_null(json_object_get(t, "organization_id"));
    assert_int_equal(json_array_size(json_object_get(t, "tags")), 2);
    assert_int_equal(json_integer_value(json_object_get(t, "team_member_rpm_limit")), 7);
    assert_true(json_real_value(json_object_get(t, "team_member_budget")) == 2.5);
    assert_string_equal(json_string_value(json_object_get(t, "team_alias")), "ml");
    json_decref(o);
    /* block keeps them */
    json_decref(call(f, "POST", "/team/block", NULL, "{\"team_id\":\"x1\"}", 200));
    o = call(f, "GET", "/team/info", "x1", NULL, 200);
    t = json_object_get(o, "team_info");
    assert_true(json_is_true(json_object_get(t, "blocked")));
    assert_int_equal(json_array_size(json_object_get(t, "members_with_roles")), 1);
    assert_int_equal(json_integer_value(json_object_get(t, "team_member_rpm_limit")), 7);
    json_decref(o);
    o = call(f, "GET", "/team/list", NULL, NULL, 200);
    assert_int_equal(json_array_size(o), 1);
    assert_int_equal(json_array_size(json_object_get(json_array_get(o, 0), "tags")), 2);
    json_decref(o);
    /* wrong type: 400 naming the field, the team unchanged */
    o = call(f, "POST", "/team/update", NULL,
             "{\"team_id\":\"x1\",\"team_member_tpm_limit\":\"many\"}", 400);
    assert_string_equal(err_param(o), "team_member_tpm_limit");
    json_decref(o);
    o = call(f, "POST", "/team/new", NULL, "{\"model_aliases\":[\"x\"]}", 400);
    assert_string_equal(err_param(o), "model_aliases");
    json_decref(o);
    /* beyond the cap: 400 naming the largest field and the cap; the team keeps its fields */
    big = malloc(RT_TEAM_EXTRA_MAX_BYTES + 128);
    assert_non_null(big);
    i = (size_t)sprintf(big, "{\"team_id\":\"x1\",\"router_settings\":{\"x\":\"");
    memset(big + i, 'v', RT_TEAM_EXTRA_MAX_BYTES);
    sprintf(big + i + RT_TEAM_EXTRA_MAX_BYTES, "\"}}");
    o = call(f, "POST", "/team/update", NULL, big, 400);
    assert_string_equal(err_param(o), "router_settings");
    assert_non_null(
        strstr(json_string_value(json_object_get(json_object_get(o, "error"), "message")),
               "16384 bytes a team may hold"));
    json_decref(o);
    free(big);
    o = call(f, "POST", "/team/info", NULL, "{\"team_id\":\"x1\"}", 200);
    t = json_object_get(o, "team_info");
    assert_null(json_object_get(t, "router_settings"));
    assert_int_equal(json_integer_value(json_object_get(t, "team_member_rpm_limit")), 7);
    json_decref(o);
}

/* ---- teams snapshot file ---- */

static struct rt_keys *snap_keys; /* the control store needs a keys table; no keys snapshot */

static int snap_setup(void **state)
{
    char err[128];

    (void)state;
    snap_keys = rt_keys_create(NULL, 0, 8, err, sizeof(err));
    return snap_keys != NULL ? 0 : -1;
}

static int snap_teardown(void **state)
{
    (void)state;
    rt_keys_destroy(&snap_keys);
    return 0;
}

/* A control store without brokers (replayed at once, so destroy writes a changed table). */
static struct rt_control *control_teams(struct rt_teams *teams, const char *path)
{
    struct rt_control_config cc;
    char err[256];
    struct rt_control *ctl;

    memset(&cc, 0, sizeof(cc));
    cc.teams = teams;
    cc.teams_snapshot_path = path;
    ctl = rt_control_create(&cc, snap_keys, err, sizeof(err));
    if (ctl == NULL)
        fail_msg("control: %s", err);
    return ctl;
}

#define SNAP_EXTRA                                                                                 \
    "{\"members_with_roles\":[{\"role\":\"admin\",\"user_id\":\"u1\"}],\"soft_budget\":0.1}"

static void put_team(struct rt_teams *teams, const char *id, int blocked, int64_t rpm)
{
    struct rt_team_spec *s = calloc(1, sizeof(*s));

    rt_team_spec_init(s);
    snprintf(s->team_id, sizeof(s->team_id), "%s", id);
    s->blocked = blocked;
    s->rpm_limit = rpm;
    s->n_models = 1;
    snprintf(s->models[0], RT_NAME_CAP, "gpt-main");
    snprintf(s->metadata, sizeof(s->metadata), "{\"owner\":\"%s\"}", id);
    if (blocked) /* LiteLLM fields stored without being acted on (canonical text) */
        snprintf(s->extra, sizeof(s->extra), "%s", SNAP_EXTRA);
    assert_int_equal(rt_teams_put(teams, s), 0);
    free(s);
}

static char *read_all(const char *path, long *size)
{
    FILE *fp = fopen(path, "r");
    char *text;

    assert_non_null(fp);
    fseek(fp, 0, SEEK_END);
    *size = ftell(fp);
    rewind(fp);
    text = calloc(1, (size_t)*size + 1);
    assert_int_equal(fread(text, 1, (size_t)*size, fp), (size_t)*size);
    fclose(fp);
    return text;
}

static void write_all(const char *path, const char *text, size_t n)
{
    FILE *fp = fopen(path, "w");

    assert_non_null(fp);
    assert_int_equal(fwrite(text, 1, n, fp), n);
    fclose(fp);
}

/* Load path into a new table of capacity cap; returns the control's stats and the team count. */
static size_t load_into(const char *path, size_t cap, struct rt_control_stats *st)
{
    char err[128];
    struct rt_teams *teams = rt_teams_create(cap, err, sizeof(err));
    struct rt_teams_table *t;
    struct rt_control *ctl = control_teams(teams, path);
    size_t n;

    rt_control_get_stats(ctl, st);
    t = rt_teams_acquire(teams);
    n = rt_teams_count(t);
    rt_teams_release(&t);
    rt_control_destroy(&ctl);
    rt_teams_destroy(&teams);
    return n;
}

static void test_snapshot_round_trip_and_corruption(void **state)
{
    char dir[] = "/tmp/tg-teams-snap.XXXXXX", path[128], err[128];
    struct rt_teams *teams, *teams2;
    struct rt_teams_table *t;
    struct rt_control *ctl;
    struct rt_control_stats st;
    const struct rt_team_spec *s;
    char *text;
    long size;
    (void)state;

    tg_log_set_level(TG_LOG_OFF);
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/teams.snapshot", dir);
    teams = rt_teams_create(3, err, sizeof(err));
    ctl = control_teams(teams, path);
    put_team(teams, "team-blocked", 1, 2);
    put_team(teams, "team-open", 0, RT_LIMIT_NONE);
    rt_control_destroy(&ctl); /* the table changed: the file is written */
    rt_teams_destroy(&teams);

    text = read_all(path, &size);
    assert_int_equal(strncmp(text, "tollgate-teams-snapshot v1 written_ms=", 38), 0);
    assert_non_null(strstr(text, "\nT {\"team_id\":\"team-blocked\""));
    assert_non_null(strstr(text, "\nEND 2 "));

    /* A new table loads both teams with their block, limits, models and metadata. */
    teams2 = rt_teams_create(3, err, sizeof(err));
    ctl = control_teams(teams2, path);
    rt_control_get_stats(ctl, &st);
    assert_int_equal(st.snapshot_teams_loaded, 2);
    assert_int_equal(st.snapshot_teams, 2);
    assert_int_equal(st.snapshot_teams_errors, 0);
    t = rt_teams_acquire(teams2);
    assert_int_equal(rt_teams_count(t), 2);
    s = rt_teams_lookup(t, "team-blocked");
    assert_non_null(s);
    assert_int_equal(s->blocked, 1);
    assert_int_equal(s->rpm_limit, 2);
    assert_int_equal(s->n_models, 1);
    assert_string_equal(s->models[0], "gpt-main");
    assert_string_equal(s->metadata, "{\"owner\":\"team-blocked\"}");
    assert_string_equal(s->extra, SNAP_EXTRA);
    s = rt_teams_lookup(t, "team-open");
    assert_non_null(s);
    assert_int_equal(s->blocked, 0);
    assert_string_equal(s->extra, "");
    assert_int_equal(s->rpm_limit, RT_LIMIT_NONE);
    rt_teams_release(&t);
    rt_control_destroy(&ctl);
    rt_teams_destroy(&teams2);

    /* More teams than the table holds (max_teams 1): the file is ignored as a whole. */
    assert_int_equal(load_into(path, 1, &st), 0);
    assert_int_equal(st.snapshot_teams_loaded, 0);
    assert_int_equal(st.snapshot_teams_errors, 1);

    /* One flipped byte in a team line: ignored, counted, no team loaded. */
    text[size / 2] = text[size / 2] == 'a' ? 'b' : 'a';
    write_all(path, text, (size_t)size);
    assert_int_equal(load_into(path, 3, &st), 0);
    assert_int_equal(st.snapshot_teams_errors, 1);
    assert_int_equal(st.snapshot_teams_loaded, 0);

    /* Truncated (no END line), and a keys snapshot under the teams name: ignored. */
    write_all(path, text, (size_t)size / 2);
    assert_int_equal(load_into(path, 3, &st), 0);
    assert_int_equal(st.snapshot_teams_errors, 1);
    write_all(path, "tollgate-keys-snapshot v1 written_ms=1\nEND 0 00000000\n", 54);
    assert_int_equal(load_into(path, 3, &st), 0);
    assert_int_equal(st.snapshot_teams_errors, 1);

    /* No file: nothing loaded, no error. */
    unlink(path);
    assert_int_equal(load_into(path, 3, &st), 0);
    assert_int_equal(st.snapshot_teams_errors, 0);

    free(text);
    rmdir(dir);
}

/* End of the replay: a snapshot team that no record of the topic named (deleted while the
 * replica was down, its tombstone compacted away) is removed; one the topic has is kept. */
static void test_snapshot_reconcile_drops_teams_gone_from_topic(void **state)
{
    char dir[] = "/tmp/tg-teams-rec.XXXXXX", path[128], err[128];
    struct rt_teams *teams;
    struct rt_teams_table *t;
    struct rt_control *ctl;
    struct rt_control_stats st;
    (void)state;

    tg_log_set_level(TG_LOG_OFF);
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/teams.snapshot", dir);
    teams = rt_teams_create(3, err, sizeof(err));
    ctl = control_teams(teams, path);
    put_team(teams, "team-kept", 0, 5);
    put_team(teams, "team-gone", 1, 5);
    put_team(teams, "team-deleted", 0, 5);
    rt_control_destroy(&ctl);
    rt_teams_destroy(&teams);

    teams = rt_teams_create(3, err, sizeof(err));
    ctl = control_teams(teams, path);
    rt_control_get_stats(ctl, &st);
    assert_int_equal(st.snapshot_teams_loaded, 3);
    /* The replay reads a put of team-kept, a tombstone of team-deleted, a team not in the
     * snapshot, and nothing about team-gone. */
    rt_control_teams_note(ctl, "team-kept");
    rt_control_teams_note(ctl, "team-deleted");
    assert_int_equal(rt_teams_delete(teams, "team-deleted"), 0);
    rt_control_teams_note(ctl, "team-new");
    rt_control_teams_reconcile(ctl);
    rt_control_get_stats(ctl, &st);
    assert_int_equal(st.snapshot_teams_dropped, 1);
    t = rt_teams_acquire(teams);
    assert_int_equal(rt_teams_count(t), 1);
    assert_non_null(rt_teams_lookup(t, "team-kept"));
    assert_null(rt_teams_lookup(t, "team-gone"));
    rt_teams_release(&t);
    rt_control_teams_reconcile(ctl); /* once only: nothing left to drop */
    rt_control_get_stats(ctl, &st);
    assert_int_equal(st.snapshot_teams_dropped, 1);
    rt_control_destroy(&ctl); /* writes the reconciled table */
    rt_teams_destroy(&teams);
    assert_int_equal(load_into(path, 3, &st), 1);

    unlink(path);
    rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_control_golden_vectors),
        cmocka_unit_test(test_table_and_capacity),
        cmocka_unit_test(test_json_field_matrix),
        cmocka_unit_test_setup_teardown(test_routes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_teams_table, setup, teardown),
        cmocka_unit_test(test_extra_fields_spec),
        cmocka_unit_test_setup_teardown(test_extra_fields_routes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_brokers_answers_503, setup, teardown),
        cmocka_unit_test_setup_teardown(test_snapshot_round_trip_and_corruption, snap_setup,
                                        snap_teardown),
        cmocka_unit_test_setup_teardown(test_snapshot_reconcile_drops_teams_gone_from_topic,
                                        snap_setup, snap_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
