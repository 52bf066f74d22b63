/* key_api: field validation and answers of /key/generate, /key/update, /key/delete and
 * /key/info in local mode (changes applied to the keys table directly), the 503 answers with a
 * real control store whose brokers cannot be reached (a closed loopback port), the bounds
 * (pending publishes, requests in progress), and the control snapshot file (round trip, static
 * keys kept out, corrupt file ignored). No Kafka broker is needed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "config.h"
#include "control.h"
#include "key_api.h"
#include "keys.h"
#include "tg_err.h"
#include "tg_ids.h"
#include "tg_log.h"
#include "tg_time.h"

#define STATIC_KEY "sk-static-config-key-0001"

static const char config_yaml[] =
    "model_list:\n"
    "  - model_name: gpt-main\n"
    "    litellm_params: {model: openai/m1, api_base: http://127.0.0.1:9/v1}\n"
    "  - model_name: gpt-fallback\n"
    "    litellm_params: {model: openai/m2, api_base: http://127.0.0.1:9/v1}\n"
    "router_settings:\n"
    "  model_group_alias: {alias-main: gpt-main}\n"
    "tollgate:\n"
    "  limits: {max_keys: 8}\n"
    "  keys:\n"
    "    - {key: " STATIC_KEY ", models: [gpt-main]}\n";

/* One answer, possibly delivered on another thread. */
struct answer {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int calls;
    int status;
    char body[RT_KEY_API_BODY_MAX];
    size_t len;
    uint64_t at_ms;
};

struct fixture {
    struct rt_config *cfg;
    struct rt_keys *keys;
    struct rt_control *control;
    struct rt_key_api *api;
};

static void on_answer(int status, const char *body, size_t len, void *ud)
{
    struct answer *a = ud;

    pthread_mutex_lock(&a->mu);
    a->calls++;
    a->status = status;
    assert_true(len < sizeof(a->body));
    memcpy(a->body, body, len);
    a->body[len] = '\0';
    a->len = len;
    a->at_ms = tg_now_mono_ms();
    pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(&a->mu);
}

static struct answer *answer_new(void)
{
    struct answer *a = calloc(1, sizeof(*a));

    assert_non_null(a);
    pthread_mutex_init(&a->mu, NULL);
    pthread_cond_init(&a->cv, NULL);
    return a;
}

static void answer_free(struct answer *a)
{
    pthread_mutex_destroy(&a->mu);
    pthread_cond_destroy(&a->cv);
    free(a);
}

/* Wait until the answer came (bounded). */
static void answer_wait(struct answer *a, uint32_t timeout_ms)
{
    uint64_t deadline = tg_now_mono_ms() + timeout_ms;

    pthread_mutex_lock(&a->mu);
    while (a->calls == 0 && tg_now_mono_ms() < deadline) {
        pthread_mutex_unlock(&a->mu);
        tg_sleep_ms(5);
        pthread_mutex_lock(&a->mu);
    }
    pthread_mutex_unlock(&a->mu);
    assert_int_equal(a->calls, 1);
}

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
    f->keys = rt_keys_create(f->cfg->keys, f->cfg->n_keys, f->cfg->max_keys, err, sizeof(err));
    assert_non_null(f->keys);
    memset(&kc, 0, sizeof(kc)); /* no teams table (router_teams_test has them) */
    kc.cfg = f->cfg;
    kc.keys = f->keys;
    kc.control = NULL;
    f->api = rt_key_api_create(&kc, err, sizeof(err));
    assert_non_null(f->api);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;

    /* as router-svc stops: the control topic answers what still waits, then the API goes */
    rt_control_destroy(&f->control);
    rt_key_api_destroy(&f->api);
    rt_keys_destroy(&f->keys);
    rt_config_destroy(&f->cfg);
    free(f);
    return 0;
}

/* Call the API synchronously-or-not and wait for the one answer. Returns the parsed body (new). */
static json_t *call(struct fixture *f, const char *method, const char *path, const char *param,
                    const char *body, int *status)
{
    struct answer *a = answer_new();
    json_t *o;
    json_error_t jerr;

    rt_key_api_handle(f->api, method, path, param, body, body != NULL ? strlen(body) : 0, on_answer,
                      a);
    answer_wait(a, 10000);
    *status = a->status;
    o = json_loadb(a->body, a->len, 0, &jerr);
    if (o == NULL)
        fail_msg("answer is not JSON: %s", a->body);
    answer_free(a);
    return o;
}

static const char *jstr(json_t *o, const char *path)
{
    char buf[128], *save = NULL, *tok;
    json_t *v = o;

    snprintf(buf, sizeof(buf), "%s", path);
    for (tok = strtok_r(buf, ".", &save); tok != NULL && v != NULL;
         tok = strtok_r(NULL, ".", &save))
        v = json_object_get(v, tok);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

static json_t *jget(json_t *o, const char *path)
{
    char buf[128], *save = NULL, *tok;
    json_t *v = o;

    snprintf(buf, sizeof(buf), "%s", path);
    for (tok = strtok_r(buf, ".", &save); tok != NULL && v != NULL;
         tok = strtok_r(NULL, ".", &save))
        v = json_object_get(v, tok);
    return v;
}

/* A 400 naming param, in the OpenAI error shape. */
static void expect_field_error(struct fixture *f, const char *path, const char *body,
                               const char *param)
{
    int status = 0;
    json_t *o = call(f, "POST", path, NULL, body, &status);

    if (status != 400)
        fail_msg("%s %s: status %d, expected 400", path, body, status);
    assert_string_equal(jstr(o, "error.type"), "invalid_request_error");
    assert_string_equal(jstr(o, "error.code"), "invalid_field");
    if (param == NULL) {
        assert_true(json_is_null(jget(o, "error.param")));
    } else {
        if (jstr(o, "error.param") == NULL || strcmp(jstr(o, "error.param"), param) != 0)
            fail_msg("%s: param %s, expected %s", body, jstr(o, "error.param"), param);
        /* The message names the field too. */
        assert_non_null(strstr(jstr(o, "error.message"), param));
    }
    json_decref(o);
}

static size_t table_count(struct fixture *f)
{
    struct rt_keys_table *t = rt_keys_acquire(f->keys);
    size_t n = rt_keys_count(t);

    rt_keys_release(&t);
    return n;
}

/* ---- generate ---- */

static void test_generate_returns_key_once_and_stores_hash(void **state)
{
    struct fixture *f = *state;
    int status = 0;
    char hash[TG_SHA256_HEX_LEN + 1], keybuf[128];
    const char *key;
    json_t *o, *info;
    struct rt_keys_table *t;
    const struct rt_key *k;
    int64_t now = (int64_t)tg_now_epoch_ms(), exp;

    o = call(f, "POST", "/key/generate", NULL,
             "{\"key_alias\":\"team-a-key\",\"models\":[\"gpt-main\",\"alias-main\"],"
             "\"team_id\":\"team-a\",\"user_id\":\"u1\",\"max_budget\":12.5,"
             "\"budget_duration\":\"30d\",\"rpm_limit\":60,\"tpm_limit\":100000,"
             "\"max_parallel_requests\":4,\"model_rpm_limit\":{\"gpt-main\":1},"
             "\"model_tpm_limit\":{\"gpt-main\":5000},"
             "\"metadata\":{\"disable_fallbacks\":true,\"tags\":[\"prod\"],\"owner\":\"x\","
             "\"notes\":{\"deep\":[1,2,3]}},"
             "\"router_settings\":{\"model_group_alias\":{\"my-alias\":\"gpt-main\"},"
             "\"fallbacks\":[{\"gpt-main\":[\"gpt-fallback\"]}],\"num_retries\":1},"
             "\"duration\":\"30d\"}",
             &status);
    assert_int_equal(status, 200);
    assert_non_null(jstr(o, "key"));
    snprintf(keybuf, sizeof(keybuf), "%s", jstr(o, "key"));
    key = keybuf;
    assert_int_equal(strncmp(key, "sk-", 3), 0);
    assert_int_equal(strlen(key), 3 + 43);
    tg_sha256_hex(key, strlen(key), hash);
    assert_string_equal(jstr(o, "key_hash"), hash);
    assert_string_equal(jstr(o, "key_alias"), "team-a-key");
    assert_non_null(jstr(o, "expires"));
    exp = (int64_t)json_integer_value(jget(o, "expires_epoch_ms"));
    assert_true(exp >= now + 30LL * 86400000 && exp <= now + 30LL * 86400000 + 60000);
    assert_true(json_real_value(jget(o, "max_budget")) == 12.5);
    assert_int_equal(json_integer_value(jget(o, "max_budget_nusd")), 12500000000LL);
    assert_string_equal(jstr(o, "budget_duration"), "30d");
    /* 30d resets on the 1st of the next month, 00:00 UTC (LiteLLM's calendar resets) */
    {
        time_t now_s = (time_t)(now / 1000);
        struct tm tm;
        char want[64];

        gmtime_r(&now_s, &tm);
        snprintf(want, sizeof(want), "%04d-%02d-01T00:00:00.000Z",
                 tm.tm_year + 1900 + (tm.tm_mon == 11), tm.tm_mon == 11 ? 1 : tm.tm_mon + 2);
        assert_string_equal(jstr(o, "budget_reset_at"), want);
    }
    assert_int_equal(json_integer_value(jget(o, "model_rpm_limit.gpt-main")), 1);
    assert_true(json_is_true(jget(o, "metadata.disable_fallbacks")));
    /* Other metadata keys are not stored. */
    assert_null(jget(o, "metadata.owner"));
    assert_null(jget(o, "metadata.notes"));
    assert_false(json_is_true(jget(o, "blocked")));
    json_decref(o);

    /* The table has the key under its hash; the raw key authenticates. */
    t = rt_keys_acquire(f->keys);
    k = rt_keys_lookup(t, key, strlen(key));
    assert_non_null(k);
    assert_string_equal(k->hash, hash);
    assert_int_equal(k->rpm_limit, 60);
    assert_int_equal(k->max_parallel_requests, 4);
    assert_int_equal(k->n_models, 2);
    assert_int_equal(k->disable_fallbacks, 1);
    assert_int_equal(k->has_fallbacks, 1);
    assert_string_equal(k->fallbacks[0].targets[0], "gpt-fallback");
    assert_int_equal(k->num_retries, 1);
    rt_keys_release(&t);

    /* info never returns the raw key. */
    {
        char *keycopy = strdup(key);
        struct answer *a = answer_new();
        char ibody[400];

        snprintf(ibody, sizeof(ibody), "{\"key\":\"%s\"}", keycopy);
        rt_key_api_handle(f->api, "POST", "/key/info", NULL, ibody, strlen(ibody), on_answer, a);
        answer_wait(a, 1000);
        assert_int_equal(a->status, 200);
        assert_null(strstr(a->body, keycopy));
        o = json_loadb(a->body, a->len, 0, NULL);
        assert_non_null(o);
        assert_string_equal(jstr(o, "key"), hash);
        info = jget(o, "info");
        assert_string_equal(jstr(info, "team_id"), "team-a");
        assert_string_equal(jstr(info, "router_settings.model_group_alias.my-alias"), "gpt-main");
        assert_false(json_is_true(jget(info, "static")));
        json_decref(o);
        /* by hash as well */
        answer_free(a);
        a = answer_new();
        rt_key_api_handle(f->api, "GET", "/key/info", hash, NULL, 0, on_answer, a);
        answer_wait(a, 1000);
        assert_int_equal(a->status, 200);
        answer_free(a);
        free(keycopy);
    }
}

/* 7d and 1w reset on Monday 00:00 UTC; 1d at midnight; a key without a duration has none. */
static void test_budget_reset_at_by_the_calendar(void **state)
{
    struct fixture *f = *state;
    int status = 0;
    json_t *o;
    int64_t day = (int64_t)time(NULL) / 86400;
    int64_t monday = day - (day + 3) % 7 + 7; /* 1970-01-01 was a Thursday */
    char want[64];
    time_t t;
    struct tm tm;

    t = (time_t)(monday * 86400);
    gmtime_r(&t, &tm);
    snprintf(want, sizeof(want), "%04d-%02d-%02dT00:00:00.000Z", tm.tm_year + 1900, tm.tm_mon + 1,
             tm.tm_mday);
    o = call(f, "POST", "/key/generate", NULL, "{\"max_budget\":5,\"budget_duration\":\"1w\"}",
             &status);
    assert_int_equal(status, 200);
    assert_string_equal(jstr(o, "budget_reset_at"), want);
    json_decref(o);
    o = call(f, "POST", "/key/generate", NULL, "{\"max_budget\":5,\"budget_duration\":\"7d\"}",
             &status);
    assert_string_equal(jstr(o, "budget_reset_at"), want);
    json_decref(o);
    t = (time_t)((day + 1) * 86400);
    gmtime_r(&t, &tm);
    snprintf(want, sizeof(want), "%04d-%02d-%02dT00:00:00.000Z", tm.tm_year + 1900, tm.tm_mon + 1,
             tm.tm_mday);
    o = call(f, "POST", "/key/generate", NULL, "{\"max_budget\":5,\"budget_duration\":\"1d\"}",
             &status);
    assert_string_equal(jstr(o, "budget_reset_at"), want);
    json_decref(o);
    o = call(f, "POST", "/key/generate", NULL, "{\"max_budget\":5}", &status);
    assert_int_equal(status, 200);
    assert_true(json_is_null(jget(o, "budget_reset_at")));
    json_decref(o);
}

/* /key/block and /key/unblock (LiteLLM's): the admin's block lives in the key's record, shown as
 * blocked/admin_blocked, refused for static keys, and not lifted by an update. */
static void test_block_and_unblock(void **state)
{
    struct fixture *f = *state;
    int status = 0;
    char body[256], hash[TG_SHA256_HEX_LEN + 1], key[128];
    json_t *o;
    struct rt_keys_table *t;

    o = call(f, "POST", "/key/generate", NULL, "{\"key_alias\":\"blk\"}", &status);
    assert_int_equal(status, 200);
    snprintf(hash, sizeof(hash), "%s", jstr(o, "key_hash"));
    snprintf(key, sizeof(key), "%s", jstr(o, "key"));
    assert_false(json_is_true(jget(o, "blocked")));
    json_decref(o);
    /* by the raw key */
    snprintf(body, sizeof(body), "{\"key\":\"%s\"}", key);
    o = call(f, "POST", "/key/block", NULL, body, &status);
    assert_int_equal(status, 200);
    assert_true(json_is_true(jget(o, "blocked")));
    assert_true(json_is_true(jget(o, "admin_blocked")));
    assert_false(json_is_true(jget(o, "budget_exceeded")));
    {
        char *text = json_dumps(o, 0);

        assert_null(strstr(text, key)); /* never the raw key */
        free(text);
    }
    json_decref(o);
    t = rt_keys_acquire(f->keys);
    assert_int_equal(rt_keys_lookup(t, key, strlen(key))->admin_blocked, 1);
    rt_keys_release(&t);
    /* an update keeps it */
    snprintf(body, sizeof(body), "{\"key_hash\":\"%s\",\"rpm_limit\":5}", hash);
    o = call(f, "POST", "/key/update", NULL, body, &status);
    assert_int_equal(status, 200);
    assert_true(json_is_true(jget(o, "admin_blocked")));
    json_decref(o);
    /* by the hash */
    snprintf(body, sizeof(body), "{\"key\":\"%s\"}", hash);
    o = call(f, "POST", "/key/unblock", NULL, body, &status);
    assert_int_equal(status, 200);
    assert_false(json_is_true(jget(o, "blocked")));
    assert_int_equal(json_integer_value(jget(o, "rpm_limit")), 5);
    json_decref(o);
    t = rt_keys_acquire(f->keys);
    assert_int_equal(rt_keys_lookup(t, key, strlen(key))->admin_blocked, 0);
    rt_keys_release(&t);
    /* LiteLLM's "blocked" on generate */
    o = call(f, "POST", "/key/generate", NULL, "{\"blocked\":true}", &status);
    assert_int_equal(status, 200);
    assert_true(json_is_true(jget(o, "admin_blocked")));
    json_decref(o);
    /* errors */
    o = call(f, "POST", "/key/block", NULL, "{\"key\":\"" STATIC_KEY "\"}", &status);
    assert_int_equal(status, 400);
    assert_string_equal(jstr(o, "error.code"), "static_key");
    json_decref(o);
    o = call(f, "POST", "/key/block", NULL, "{\"key\":\"sk-nobody\"}", &status);
    assert_int_equal(status, 404);
    json_decref(o);
    o = call(f, "POST", "/key/block", NULL, "{}", &status);
    assert_int_equal(status, 400);
    json_decref(o);
    o = call(f, "GET", "/key/block", NULL, NULL, &status);
    assert_int_equal(status, 405);
    json_decref(o);
}

/* /key/regenerate (LiteLLM's): a new secret for the same settings, returned once; the old key is
 * gone from the table; a chosen new_key; the errors. */
static void test_regenerate(void **state)
{
    struct fixture *f = *state;
    int status = 0;
    char body[256], hash[TG_SHA256_HEX_LEN + 1], key[128], key2[128];
    json_t *o;
    struct rt_keys_table *t;

    o = call(f, "POST", "/key/generate", NULL,
             "{\"key_alias\":\"rot\",\"rpm_limit\":7,\"models\":[\"gpt-main\"]}", &status);
    assert_int_equal(status, 200);
    snprintf(hash, sizeof(hash), "%s", jstr(o, "key_hash"));
    snprintf(key, sizeof(key), "%s", jstr(o, "key"));
    json_decref(o);
    snprintf(body, sizeof(body), "{\"key\":\"%s\"}", key);
    o = call(f, "POST", "/key/regenerate", NULL, body, &status);
    assert_int_equal(status, 200);
    snprintf(key2, sizeof(key2), "%s", jstr(o, "key"));
    assert_string_not_equal(key2, key);
    assert_int_equal(strncmp(key2, "sk-", 3), 0);
    assert_string_not_equal(jstr(o, "key_hash"), hash);
    assert_string_equal(jstr(o, "key_alias"), "rot");
    assert_int_equal(json_integer_value(jget(o, "rpm_limit")), 7);
    json_decref(o);
    t = rt_keys_acquire(f->keys);
    assert_null(rt_keys_lookup(t, key, strlen(key)));
    assert_non_null(rt_keys_lookup(t, key2, strlen(key2)));
    assert_int_equal(rt_keys_lookup(t, key2, strlen(key2))->rpm_limit, 7);
    rt_keys_release(&t);
    /* by the hash, to a chosen key */
    {
        char h2[TG_SHA256_HEX_LEN + 1];

        tg_sha256_hex(key2, strlen(key2), h2);
        snprintf(body, sizeof(body), "{\"key\":\"%s\",\"new_key\":\"sk-chosen-rotation-01\"}", h2);
    }
    o = call(f, "POST", "/key/regenerate", NULL, body, &status);
    assert_int_equal(status, 200);
    assert_string_equal(jstr(o, "key"), "sk-chosen-rotation-01");
    json_decref(o);
    t = rt_keys_acquire(f->keys);
    assert_null(rt_keys_lookup(t, key2, strlen(key2)));
    assert_non_null(rt_keys_lookup(t, "sk-chosen-rotation-01", 21));
    rt_keys_release(&t);
    /* errors */
    o = call(f, "POST", "/key/regenerate", NULL, "{\"key\":\"sk-chosen-rotation-01\",\"colour\":1}",
             &status);
    assert_int_equal(status, 400);
    assert_non_null(strstr(jstr(o, "error.message"), "colour"));
    json_decref(o);
    o = call(f, "POST", "/key/regenerate", NULL,
             "{\"key\":\"sk-chosen-rotation-01\",\"new_key\":\"sk-chosen-rotation-01\"}", &status);
    assert_int_equal(status, 409);
    json_decref(o);
    o = call(f, "POST", "/key/regenerate", NULL, "{\"key\":\"sk-nobody-at-all\"}", &status);
    assert_int_equal(status, 404);
    json_decref(o);
    o = call(f, "POST", "/key/regenerate", NULL, "{\"key\":\"" STATIC_KEY "\"}", &status);
    assert_int_equal(status, 400);
    assert_string_equal(jstr(o, "error.code"), "static_key");
    json_decref(o);
}

/* /key/list (LiteLLM's): hashes in hash order, paginated, filtered by team and alias; full
 * objects on request; never a raw key. */
static void test_list(void **state)
{
    struct fixture *f = *state;
    int status = 0;
    json_t *o, *keys;
    char first[TG_SHA256_HEX_LEN + 1];

    for (int i = 0; i < 5; i++) {
        char body[128];

        snprintf(body, sizeof(body), "{\"key_alias\":\"k%d\",\"team_id\":\"%s\"}", i,
                 i < 3 ? "team-l" : "team-m");
        o = call(f, "POST", "/key/generate", NULL, body, &status);
        assert_int_equal(status, 200);
        json_decref(o);
    }
    /* 5 generated + the static key */
    o = call(f, "GET", "/key/list", NULL, "{\"size\":\"4\"}", &status);
    assert_int_equal(status, 200);
    assert_int_equal(json_integer_value(jget(o, "total_count")), 6);
    assert_int_equal(json_integer_value(jget(o, "total_pages")), 2);
    keys = jget(o, "keys");
    assert_int_equal(json_array_size(keys), 4);
    snprintf(first, sizeof(first), "%s", json_string_value(json_array_get(keys, 0)));
    assert_true(strcmp(first, json_string_value(json_array_get(keys, 1))) < 0);
    json_decref(o);
    o = call(f, "POST", "/key/list", NULL, "{\"size\":4,\"page\":2}", &status);
    assert_int_equal(json_array_size(jget(o, "keys")), 2);
    assert_int_equal(json_integer_value(jget(o, "current_page")), 2);
    json_decref(o);
    o = call(f, "GET", "/key/list", NULL, "{\"team_id\":\"team-l\"}", &status);
    assert_int_equal(json_integer_value(jget(o, "total_count")), 3);
    json_decref(o);
    o = call(f, "GET", "/key/list", NULL,
             "{\"key_alias\":\"k4\",\"return_full_object\":\"true\"}", &status);
    assert_int_equal(status, 200);
    keys = jget(o, "keys");
    assert_int_equal(json_array_size(keys), 1);
    assert_string_equal(json_string_value(json_object_get(json_array_get(keys, 0), "team_id")),
                        "team-m");
    assert_null(json_object_get(json_array_get(keys, 0), "key"));
    json_decref(o);
    o = call(f, "GET", "/key/list", NULL, "{\"size\":\"0\"}", &status);
    assert_int_equal(status, 400);
    assert_non_null(strstr(jstr(o, "error.message"), "size"));
    json_decref(o);
    o = call(f, "GET", "/key/list", NULL, "{\"page\":\"x\"}", &status);
    assert_int_equal(status, 400);
    json_decref(o);
}

static void test_generate_empty_body_and_distinct_keys(void **state)
{
    struct fixture *f = *state;
    int status = 0;
    json_t *a = call(f, "POST", "/key/generate", NULL, NULL, &status);
    json_t *b;

    assert_int_equal(status, 200);
    b = call(f, "POST", "/key/generate", NULL, "{}", &status);
    assert_int_equal(status, 200);
    assert_string_not_equal(jstr(a, "key"), jstr(b, "key"));
    assert_true(json_is_null(jget(a, "expires")));
    assert_int_equal(json_array_size(jget(b, "models")), 0);
    json_decref(a);
    json_decref(b);
    assert_int_equal(table_count(f), 3); /* static + 2 */
}

static void test_generate_field_errors(void **state)
{
    struct fixture *f = *state;

    expect_field_error(f, "/key/generate", "{\"models\":\"gpt-main\"}", "models");
    expect_field_error(f, "/key/generate", "{\"models\":[\"gpt-main\",\"nope\"]}", "models[1]");
    expect_field_error(f, "/key/generate", "{\"models\":[1]}", "models[0]");
    expect_field_error(f, "/key/generate", "{\"rpm_limit\":-1}", "rpm_limit");
    expect_field_error(f, "/key/generate", "{\"tpm_limit\":\"many\"}", "tpm_limit");
    expect_field_error(f, "/key/generate", "{\"max_parallel_requests\":1.5}",
                       "max_parallel_requests");
    expect_field_error(f, "/key/generate", "{\"max_budget\":\"ten\"}", "max_budget");
    expect_field_error(f, "/key/generate", "{\"budget_duration\":\"soon\"}", "budget_duration");
    expect_field_error(f, "/key/generate", "{\"duration\":\"forever\"}", "duration");
    expect_field_error(f, "/key/generate", "{\"duration\":30}", "duration");
    expect_field_error(f, "/key/generate", "{\"model_rpm_limit\":{\"nope\":1}}",
                       "model_rpm_limit.nope");
    expect_field_error(f, "/key/generate", "{\"model_tpm_limit\":[1]}", "model_tpm_limit");
    expect_field_error(f, "/key/generate", "{\"metadata\":{\"tags\":\"a\"}}", "metadata.tags");
    expect_field_error(f, "/key/generate", "{\"metadata\":{\"disable_fallbacks\":\"yes\"}}",
                       "metadata.disable_fallbacks");
    expect_field_error(f, "/key/generate",
                       "{\"router_settings\":{\"fallbacks\":[{\"gpt-main\":[\"nope\"]}]}}",
                       "router_settings.fallbacks[0].gpt-main[0]");
    expect_field_error(f, "/key/generate",
                       "{\"router_settings\":{\"model_group_alias\":{\"x\":\"nope\"}}}",
                       "router_settings.model_group_alias.x");
    expect_field_error(f, "/key/generate", "{\"router_settings\":{\"num_retries\":99}}",
                       "router_settings.num_retries");
    expect_field_error(f, "/key/generate", "{\"router_settings\":{\"colour\":1}}",
                       "router_settings.colour");
    expect_field_error(f, "/key/generate", "{\"colour\":\"red\"}", "colour");
    expect_field_error(f, "/key/generate", "{\"key_hash\":\"00\"}", "key_hash");
    expect_field_error(f, "/key/generate", "{\"key\":\"not-an-sk-key-1234567\"}", "key");
    expect_field_error(f, "/key/generate", "{\"key\":\"sk-short\"}", "key");
    expect_field_error(f, "/key/generate", "{\"key_alias\":[\"a\"]}", "key_alias");
    expect_field_error(f, "/key/generate", "{\"models\": [", NULL);
    expect_field_error(f, "/key/generate", "[]", NULL);
    expect_field_error(f, "/key/generate", "{\"a\":1,\"a\":2}", NULL);
    /* Nothing was stored. */
    assert_int_equal(table_count(f), 1);
}

/* LiteLLM's /key/generate fields Tollgate does not act on are taken (a LiteLLM client's body
 * whole), stored, and returned where the client gave them by /key/generate, /key/info and
 * /key/list (return_full_object); /key/update merges them (null removes one). tags and aliases
 * are kept as metadata.tags and router_settings.model_group_alias and act as those do. A value of
 * another type, a body over the per-key cap, and a field LiteLLM does not document are 400s
 * naming the field. */
static void test_litellm_fields_stored_and_returned(void **state)
{
    struct fixture *f = *state;
    static const char *body =
        "{\"key\":\"sk-litellm-fields-key-01\",\"key_alias\":\"imported\",\"soft_budget\":12.5,"
        "\"spend\":0,\"guardrails\":[\"pii\"],\"key_type\":\"llm_api\","
        "\"config\":{\"b\":1,\"a\":2},"
        "\"allowed_routes\":[\"/chat/completions\"],\"enforced_params\":[\"user\"],"
        "\"organization_id\":\"org-1\",\"budget_id\":null,\"tags\":[\"prod\"],"
        "\"aliases\":{\"my-gpt\":\"gpt-main\"},\"models\":[\"my-gpt\"]}";
    static const char *upd = "{\"key\":\"sk-litellm-fields-key-01\",\"soft_budget\":null,"
                             "\"guardrails\":[\"pii\",\"toxicity\"],\"temp_budget_increase\":5}";
    char hash[TG_SHA256_HEX_LEN + 1], big[20100];
    int status = 0;
    json_t *o, *info, *keys;

    tg_sha256_hex("sk-litellm-fields-key-01", 24, hash);
    o = call(f, "POST", "/key/generate", NULL, body, &status);
    assert_int_equal(status, 200);
    assert_string_equal(jstr(o, "key"), "sk-litellm-fields-key-01");
    assert_true(json_real_value(jget(o, "soft_budget")) == 12.5);
    assert_string_equal(jstr(o, "key_type"), "llm_api");
    assert_string_equal(jstr(o, "organization_id"), "org-1");
    assert_int_equal(json_integer_value(jget(o, "config.a")), 2);
    assert_null(jget(o, "budget_id")); /* null: not stored */
    assert_null(jget(o, "extra"));
    assert_string_equal(json_string_value(json_array_get(jget(o, "metadata.tags"), 0)), "prod");
    assert_string_equal(jstr(o, "aliases.my-gpt"), "gpt-main");
    assert_string_equal(jstr(o, "router_settings.model_group_alias.my-gpt"), "gpt-main");
    json_decref(o);
    /* /key/info (GET by hash) */
    o = call(f, "GET", "/key/info", hash, NULL, &status);
    assert_int_equal(status, 200);
    info = json_object_get(o, "info") != NULL ? json_object_get(o, "info") : o;
    assert_true(json_real_value(json_object_get(info, "soft_budget")) == 12.5);
    assert_string_equal(json_string_value(json_array_get(json_object_get(info, "guardrails"), 0)),
                        "pii");
    assert_string_equal(
        json_string_value(json_array_get(json_object_get(info, "allowed_routes"), 0)),
        "/chat/completions");
    assert_null(json_object_get(info, "extra"));
    json_decref(o);
    /* /key/list with the full objects */
    o = call(f, "POST", "/key/list", NULL,
             "{\"return_full_object\":true,\"key_alias\":\"imported\"}", &status);
    assert_int_equal(status, 200);
    keys = json_object_get(o, "keys");
    assert_int_equal(json_array_size(keys), 1);
    assert_string_equal(json_string_value(json_object_get(json_array_get(keys, 0), "key_type")),
                        "llm_api");
    json_decref(o);
    /* /key/update merges */
    o = call(f, "POST", "/key/update", NULL, upd, &status);
    assert_int_equal(status, 200);
    assert_null(jget(o, "soft_budget"));
    assert_int_equal(json_array_size(jget(o, "guardrails")), 2);
    assert_int_equal(json_integer_value(jget(o, "temp_budget_increase")), 5);
    assert_string_equal(jstr(o, "key_type"), "llm_api");
    json_decref(o);
    /* refusals name the field; nothing changes */
    expect_field_error(f, "/key/generate", "{\"soft_budget\":\"lots\"}", "soft_budget");
    expect_field_error(f, "/key/generate", "{\"guardrails\":\"pii\"}", "guardrails");
    expect_field_error(f, "/key/generate", "{\"key_type\":\"root\"}", "key_type");
    expect_field_error(f, "/key/generate", "{\"soft_budgt\":1}", "soft_budgt");
    expect_field_error(f, "/key/update",
                       "{\"key\":\"sk-litellm-fields-key-01\",\"allowed_routes\":\"/x\"}",
                       "allowed_routes");
    {
        static const char head[] =
            "{\"key\":\"sk-litellm-fields-key-01\",\"permissions\":{\"p\":\"";

        memset(big, 'x', sizeof(big));
        memcpy(big, head, sizeof(head) - 1);
        memcpy(big + sizeof(big) - 4, "\"}}", 4); /* 20 000 bytes of permissions: over the cap */
    }
    expect_field_error(f, "/key/update", big, "permissions");
    o = call(f, "GET", "/key/info", hash, NULL, &status);
    info = json_object_get(o, "info") != NULL ? json_object_get(o, "info") : o;
    assert_null(json_object_get(info, "permissions"));
    assert_int_equal(json_array_size(json_object_get(info, "guardrails")), 2);
    json_decref(o);
    assert_int_equal(table_count(f), 2);
}

static void test_errors_never_echo_a_key(void **state)
{
    struct fixture *f = *state;
    struct answer *a = answer_new();
    const char *secret = "sk-live-abcdefghijklmnop0123";
    char body[256];

    /* A key used as a field name is not echoed. */
    snprintf(body, sizeof(body), "{\"%s\":1}", secret);
    rt_key_api_handle(f->api, "POST", "/key/generate", NULL, body, strlen(body), on_answer, a);
    answer_wait(a, 1000);
    assert_int_equal(a->status, 400);
    assert_null(strstr(a->body, secret));
    assert_null(strstr(a->body, "abcdefghijklmnop"));
    answer_free(a);

    /* Unknown keys in update / delete / info: 404, key not echoed. */
    a = answer_new();
    snprintf(body, sizeof(body), "{\"key\":\"%s\",\"rpm_limit\":1}", secret);
    rt_key_api_handle(f->api, "POST", "/key/update", NULL, body, strlen(body), on_answer, a);
    answer_wait(a, 1000);
    assert_int_equal(a->status, 404);
    assert_null(strstr(a->body, secret));
    answer_free(a);

    a = answer_new();
    snprintf(body, sizeof(body), "{\"keys\":[\"%s\"]}", secret);
    rt_key_api_handle(f->api, "POST", "/key/delete", NULL, body, strlen(body), on_answer, a);
    answer_wait(a, 1000);
    assert_int_equal(a->status, 404);
    assert_null(strstr(a->body, secret));
    assert_non_null(strstr(a->body, "\"param\":\"keys[0]\""));
    answer_free(a);

    a = answer_new();
    snprintf(body, sizeof(body), "{\"key\":\"%s\"}", secret);
    rt_key_api_handle(f->api, "POST", "/key/info", NULL, body, strlen(body), on_answer, a);
    answer_wait(a, 1000);
    assert_int_equal(a->status, 404);
    assert_null(strstr(a->body, secret));
    assert_non_null(strstr(a->body, "\"code\":\"key_not_found\""));
    answer_free(a);

    /* key_info_took_the_raw_key_in_the_url: refused, and not echoed */
    a = answer_new();
    rt_key_api_handle(f->api, "GET", "/key/info", secret, NULL, 0, on_answer, a);
    answer_wait(a, 1000);
    assert_int_equal(a->status, 400);
    assert_null(strstr(a->body, secret));
    assert_non_null(strstr(a->body, "\"code\":\"raw_key_in_url\""));
    answer_free(a);
}

static void test_custom_key_and_conflict(void **state)
{
    struct fixture *f = *state;
    int status = 0;
    json_t *o;

    o = call(f, "POST", "/key/generate", NULL, "{\"key\":\"sk-custom-abcdefghijkl\"}", &status);
    assert_int_equal(status, 200);
    assert_string_equal(jstr(o, "key"), "sk-custom-abcdefghijkl");
    json_decref(o);
    o = call(f, "POST", "/key/generate", NULL, "{\"key\":\"sk-custom-abcdefghijkl\"}", &status);
    assert_int_equal(status, 409);
    assert_string_equal(jstr(o, "error.code"), "key_exists");
    assert_null(strstr(jstr(o, "error.message"), "abcdefghijkl"));
    json_decref(o);
    /* The static key's value cannot be re-generated either. */
    o = call(f, "POST", "/key/generate", NULL, "{\"key\":\"" STATIC_KEY "\"}", &status);
    assert_int_equal(status, 409);
    json_decref(o);
}

/* An existing key imported by its SHA-256 (LiteLLM keeps only the hash): the raw key, never
 * sent, authenticates; the answer's key is null; a second import of the same hash is 409, as is
 * the static key's hash; key and key_hash together, or a hash that is not 64 lowercase hex, 400. */
static void test_import_by_key_hash(void **state)
{
    struct fixture *f = *state;
    const char *raw = "sk-litellm-imported-0123456789";
    char hash[TG_SHA256_HEX_LEN + 1], body[512];
    int status = 0;
    json_t *o;
    struct rt_keys_table *t;
    const struct rt_key *k;

    tg_sha256_hex(raw, strlen(raw), hash);
    snprintf(body, sizeof(body),
             "{\"key_hash\":\"%s\",\"key_alias\":\"imported\",\"rpm_limit\":7,"
             "\"models\":[\"gpt-main\"],\"spend\":1.25}",
             hash);
    o = call(f, "POST", "/key/generate", NULL, body, &status);
    assert_int_equal(status, 200);
    assert_true(json_is_null(jget(o, "key")));
    assert_string_equal(jstr(o, "key_hash"), hash);
    assert_string_equal(jstr(o, "key_alias"), "imported");
    json_decref(o);
    t = rt_keys_acquire(f->keys);
    k = rt_keys_lookup(t, raw, strlen(raw));
    assert_non_null(k);
    assert_string_equal(k->hash, hash);
    assert_int_equal(k->rpm_limit, 7);
    rt_keys_release(&t);

    o = call(f, "POST", "/key/generate", NULL, body, &status);
    assert_int_equal(status, 409);
    assert_string_equal(jstr(o, "error.code"), "key_exists");
    assert_string_equal(jstr(o, "error.param"), "key_hash");
    json_decref(o);
    tg_sha256_hex(STATIC_KEY, strlen(STATIC_KEY), hash);
    snprintf(body, sizeof(body), "{\"key_hash\":\"%s\"}", hash);
    o = call(f, "POST", "/key/generate", NULL, body, &status);
    assert_int_equal(status, 409);
    json_decref(o);

    snprintf(body, sizeof(body), "{\"key\":\"sk-custom-abcdefghijkl\",\"key_hash\":\"%064d\"}", 0);
    expect_field_error(f, "/key/generate", body, "key_hash");
    snprintf(body, sizeof(body), "{\"key_hash\":\"%s\"}",
             "ABCDEF0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF0123456789");
    expect_field_error(f, "/key/generate", body, "key_hash");
    expect_field_error(f, "/key/generate", "{\"key_hash\":42}", "key_hash");
    assert_int_equal(table_count(f), 2); /* static + the import */
}

/* ---- update ---- */

static void test_update_merges_and_validates(void **state)
{
    struct fixture *f = *state;
    int status = 0;
    char body[512], hash[TG_SHA256_HEX_LEN + 1], key[128];
    json_t *o;
    struct rt_keys_table *t;
    const struct rt_key *k;

    o = call(f, "POST", "/key/generate", NULL,
             "{\"key_alias\":\"k1\",\"models\":[\"gpt-main\"],\"rpm_limit\":5,"
             "\"metadata\":{\"tags\":[\"a\"]},\"duration\":\"1h\"}",
             &status);
    assert_int_equal(status, 200);
    snprintf(key, sizeof(key), "%s", jstr(o, "key"));
    snprintf(hash, sizeof(hash), "%s", jstr(o, "key_hash"));
    json_decref(o);

    /* by raw key: change rpm_limit and models, keep the rest */
    snprintf(body, sizeof(body),
             "{\"key\":\"%s\",\"rpm_limit\":7,\"models\":[\"gpt-main\",\"gpt-fallback\"]}", key);
    o = call(f, "POST", "/key/update", NULL, body, &status);
    assert_int_equal(status, 200);
    assert_null(jget(o, "key")); /* no raw key in the answer */
    assert_string_equal(jstr(o, "key_hash"), hash);
    assert_string_equal(jstr(o, "key_alias"), "k1");
    assert_int_equal(json_integer_value(jget(o, "rpm_limit")), 7);
    assert_int_equal(json_array_size(jget(o, "models")), 2);
    assert_string_equal(json_string_value(json_array_get(jget(o, "metadata.tags"), 0)), "a");
    assert_non_null(jstr(o, "expires"));
    json_decref(o);

    /* by hash: null resets, duration null removes the expiry */
    snprintf(body, sizeof(body), "{\"key_hash\":\"%s\",\"rpm_limit\":null,\"duration\":null}",
             hash);
    o = call(f, "POST", "/key/update", NULL, body, &status);
    assert_int_equal(status, 200);
    assert_true(json_is_null(jget(o, "rpm_limit")));
    assert_true(json_is_null(jget(o, "expires")));
    json_decref(o);
    t = rt_keys_acquire(f->keys);
    k = rt_keys_lookup(t, key, strlen(key));
    assert_non_null(k);
    assert_int_equal(k->rpm_limit, RT_LIMIT_NONE);
    assert_int_equal(k->expires_epoch_ms, 0);
    assert_int_equal(k->n_models, 2);
    rt_keys_release(&t);

    /* a bad field leaves the key as it was */
    snprintf(body, sizeof(body), "{\"key\":\"%s\",\"rpm_limit\":3,\"models\":[\"zz\"]}", key);
    expect_field_error(f, "/key/update", body, "models[0]");
    t = rt_keys_acquire(f->keys);
    k = rt_keys_lookup(t, key, strlen(key));
    assert_int_equal(k->rpm_limit, RT_LIMIT_NONE);
    rt_keys_release(&t);

    /* naming */
    expect_field_error(f, "/key/update", "{\"rpm_limit\":3}", "key");
    expect_field_error(f, "/key/update", "{\"key_hash\":\"ABC\"}", "key_hash");
    snprintf(body, sizeof(body), "{\"key\":\"%s\",\"key_hash\":\"%064d\"}", key, 0);
    expect_field_error(f, "/key/update", body, "key_hash");
    expect_field_error(f, "/key/update", NULL, NULL);
    snprintf(body, sizeof(body), "{\"key_hash\":\"%064d\",\"rpm_limit\":1}", 0);
    o = call(f, "POST", "/key/update", NULL, body, &status);
    assert_int_equal(status, 404);
    assert_string_equal(jstr(o, "error.code"), "key_not_found");
    json_decref(o);
    /* static keys are managed in the config file */
    o = call(f, "POST", "/key/update", NULL, "{\"key\":\"" STATIC_KEY "\",\"rpm_limit\":1}",
             &status);
    assert_int_equal(status, 400);
    assert_string_equal(jstr(o, "error.code"), "static_key");
    assert_null(strstr(jstr(o, "error.message"), STATIC_KEY));
    json_decref(o);
}

static void test_update_keeps_block_and_info_shows_it(void **state)
{
    struct fixture *f = *state;
    int status = 0;
    char body[256], hash[TG_SHA256_HEX_LEN + 1];
    struct rt_key_change ch;
    json_t *o;

    o = call(f, "POST", "/key/generate", NULL, "{\"key_alias\":\"b\"}", &status);
    assert_int_equal(status, 200);
    snprintf(hash, sizeof(hash), "%s", jstr(o, "key_hash"));
    json_decref(o);
    memset(&ch, 0, sizeof(ch));
    ch.op = RT_KEY_BLOCK;
    memcpy(ch.hash, hash, sizeof(ch.hash));
    assert_int_equal(rt_keys_apply(f->keys, &ch, 1), 0);
    o = call(f, "GET", "/key/info", hash, NULL, &status);
    assert_int_equal(status, 200);
    assert_true(json_is_true(jget(o, "info.blocked")));
    json_decref(o);
    /* An update does not lift a budget block. */
    snprintf(body, sizeof(body), "{\"key_hash\":\"%s\",\"tpm_limit\":10}", hash);
    o = call(f, "POST", "/key/update", NULL, body, &status);
    assert_int_equal(status, 200);
    assert_true(json_is_true(jget(o, "blocked")));
    json_decref(o);
}

/* ---- delete, info, routing ---- */

static void test_delete_by_keys_and_hashes(void **state)
{
    struct fixture *f = *state;
    int status = 0;
    char body[512], k1[128], k2[128], h2[TG_SHA256_HEX_LEN + 1], h1[TG_SHA256_HEX_LEN + 1];
    json_t *o;

    o = call(f, "POST", "/key/generate", NULL, "{}", &status);
    snprintf(k1, sizeof(k1), "%s", jstr(o, "key"));
    snprintf(h1, sizeof(h1), "%s", jstr(o, "key_hash"));
    json_decref(o);
    o = call(f, "POST", "/key/generate", NULL, "{}", &status);
    snprintf(k2, sizeof(k2), "%s", jstr(o, "key"));
    snprintf(h2, sizeof(h2), "%s", jstr(o, "key_hash"));
    json_decref(o);
    assert_int_equal(table_count(f), 3);

    /* One unknown entry: 404 naming it, nothing deleted. */
    snprintf(body, sizeof(body), "{\"keys\":[\"%s\",\"sk-nope-0000000000000000\"]}", k1);
    o = call(f, "POST", "/key/delete", NULL, body, &status);
    assert_int_equal(status, 404);
    assert_string_equal(jstr(o, "error.param"), "keys[1]");
    json_decref(o);
    assert_int_equal(table_count(f), 3);

    /* keys and key_hashes together (the same key twice counts once) */
    snprintf(body, sizeof(body), "{\"keys\":[\"%s\"],\"key_hashes\":[\"%s\",\"%s\"]}", k1, h2, h1);
    o = call(f, "POST", "/key/delete", NULL, body, &status);
    assert_int_equal(status, 200);
    assert_int_equal(json_array_size(jget(o, "deleted_keys")), 2);
    assert_string_equal(json_string_value(json_array_get(jget(o, "deleted_keys"), 0)), h1);
    assert_null(strstr(json_string_value(json_array_get(jget(o, "deleted_keys"), 1)), "sk-"));
    json_decref(o);
    assert_int_equal(table_count(f), 1);
    snprintf(body, sizeof(body), "{\"key\":\"%s\"}", k2);
    o = call(f, "POST", "/key/info", NULL, body, &status);
    assert_int_equal(status, 404);
    json_decref(o);

    expect_field_error(f, "/key/delete", "{\"keys\":[]}", "keys");
    expect_field_error(f, "/key/delete", "{\"keys\":\"sk-x\"}", "keys");
    expect_field_error(f, "/key/delete", "{\"key_hashes\":[\"xyz\"]}", "key_hashes[0]");
    expect_field_error(f, "/key/delete", "{\"key_aliases\":[\"a\"]}", "key_aliases");
    o = call(f, "POST", "/key/delete", NULL, "{\"keys\":[\"" STATIC_KEY "\"]}", &status);
    assert_int_equal(status, 400);
    assert_string_equal(jstr(o, "error.code"), "static_key");
    json_decref(o);
}

static void test_info_and_routing(void **state)
{
    struct fixture *f = *state;
    int status = 0;
    json_t *o;

    o = call(f, "POST", "/key/info", NULL, "{\"key\":\"" STATIC_KEY "\"}", &status);
    assert_int_equal(status, 200);
    assert_true(json_is_true(jget(o, "info.static")));
    {
        /* GET takes the hash that info answers with */
        char hash[80];
        json_t *o2;

        snprintf(hash, sizeof(hash), "%s", jstr(o, "key_hash"));
        o2 = call(f, "GET", "/key/info", hash, NULL, &status);
        assert_int_equal(status, 200);
        assert_true(json_is_true(jget(o2, "info.static")));
        json_decref(o2);
    }
    json_decref(o);
    o = call(f, "GET", "/key/info", STATIC_KEY, NULL, &status);
    assert_int_equal(status, 400);
    assert_string_equal(jstr(o, "error.code"), "raw_key_in_url");
    {
        char *dump = json_dumps(o, 0);

        assert_non_null(dump);
        assert_null(strstr(dump, STATIC_KEY)); /* the refusal does not echo the key */
        free(dump);
    }
    json_decref(o);
    o = call(f, "GET", "/key/info", NULL, NULL, &status);
    assert_int_equal(status, 400);
    assert_string_equal(jstr(o, "error.param"), "key");
    json_decref(o);
    o = call(f, "GET", "/key/generate", NULL, NULL, &status);
    assert_int_equal(status, 405);
    json_decref(o);
    o = call(f, "POST", "/key/info", NULL, "{}", &status);
    assert_int_equal(status, 400);
    assert_string_equal(jstr(o, "error.param"), "key");
    json_decref(o);
    o = call(f, "POST", "/key/colour", NULL, "{}", &status);
    assert_int_equal(status, 404);
    json_decref(o);
    assert_true(rt_key_api_is_admin_path("/key/generate"));
    assert_true(rt_key_api_is_admin_path("/key/list"));
    assert_true(rt_key_api_is_admin_path("/key/block"));
    assert_true(rt_key_api_is_admin_path("/key/info"));
    assert_false(rt_key_api_is_admin_path("/key/info/x"));
    assert_false(rt_key_api_is_admin_path("/v1/chat/completions"));
}

static void test_table_capacity_answers_503(void **state)
{
    struct fixture *f = *state;
    int status = 0, ok = 0;
    json_t *o;

    /* max_keys is 8 (one static): the eighth generate finds the table full. */
    for (int i = 0; i < 10; i++) {
        o = call(f, "POST", "/key/generate", NULL, "{}", &status);
        if (status == 200) {
            ok++;
        } else {
            assert_int_equal(status, 503);
            assert_string_equal(jstr(o, "error.code"), "keys_capacity");
        }
        json_decref(o);
    }
    assert_int_equal(ok, 7);
    assert_int_equal(table_count(f), 8);
}

/* ---- with a real control store and no reachable broker ---- */

static struct rt_control *control_unreachable(struct fixture *f, uint32_t timeout_ms,
                                              uint32_t max_pending)
{
    struct rt_control_config cc;
    struct rt_key_api_config kc;
    char err[256];

    memset(&cc, 0, sizeof(cc));
    cc.brokers = "127.0.0.1:1"; /* nothing listens there: connection refused */
    cc.topic = "tollgate.control.unit";
    cc.publish_timeout_ms = timeout_ms;
    cc.max_pending = max_pending;
    cc.cfg = f->cfg;
    f->control = rt_control_create(&cc, f->keys, err, sizeof(err));
    if (f->control == NULL)
        fail_msg("control: %s", err);
    rt_key_api_destroy(&f->api);
    memset(&kc, 0, sizeof(kc)); /* no teams table (router_teams_test has them) */
    kc.cfg = f->cfg;
    kc.keys = f->keys;
    kc.control = f->control;
    f->api = rt_key_api_create(&kc, err, sizeof(err));
    assert_non_null(f->api);
    return f->control;
}

static void test_unreachable_kafka_answers_503_within_the_bound(void **state)
{
    struct fixture *f = *state;
    struct answer *a = answer_new();
    uint64_t t0;
    const char *body = "{\"key_alias\":\"never\"}";
    struct rt_control_stats st;
    json_t *o;

    control_unreachable(f, 1000, 16);
    assert_int_equal(rt_control_replayed(f->control), 0);
    t0 = tg_now_mono_ms();
    rt_key_api_handle(f->api, "POST", "/key/generate", NULL, body, strlen(body), on_answer, a);
    answer_wait(a, 5000);
    assert_int_equal(a->status, 503);
    /* bound: the publish timeout plus a poll interval or two */
    assert_true(a->at_ms - t0 >= 900);
    assert_true(a->at_ms - t0 <= 2500);
    o = json_loadb(a->body, a->len, 0, NULL);
    assert_string_equal(jstr(o, "error.message"),
                        "key store unavailable: the control topic could not confirm the change; "
                        "retry later");
    assert_string_equal(jstr(o, "error.code"), "key_store_unavailable");
    json_decref(o);
    answer_free(a);
    assert_int_equal(table_count(f), 1);
    /* The slot is released when librdkafka's own report arrives (it may come after the
     * backstop answered). */
    for (int i = 0; i < 300; i++) {
        rt_control_get_stats(f->control, &st);
        if (st.pending == 0)
            break;
        tg_sleep_ms(10);
    }
    assert_int_equal(st.publish_failed, 1);
    assert_int_equal(st.publish_ok, 0);
    assert_int_equal(st.pending, 0);
    /* Validation still answers at once, without Kafka. */
    expect_field_error(f, "/key/generate", "{\"models\":[\"zz\"]}", "models[0]");
    assert_int_equal(rt_control_ready(f->control), 0); /* no snapshot, not replayed */

    /* Stopping answers what is still waiting at once, and refuses what comes after. */
    a = answer_new();
    t0 = tg_now_mono_ms();
    rt_key_api_handle(f->api, "POST", "/key/generate", NULL, "{}", 2, on_answer, a);
    assert_int_equal(a->calls, 0);
    rt_control_stop(f->control);
    assert_int_equal(a->calls, 1);
    assert_int_equal(a->status, 503);
    assert_true(tg_now_mono_ms() - t0 < 900);
    answer_free(a);
    a = answer_new();
    rt_key_api_handle(f->api, "POST", "/key/generate", NULL, "{}", 2, on_answer, a);
    assert_int_equal(a->calls, 1); /* synchronously */
    assert_int_equal(a->status, 503);
    assert_non_null(strstr(a->body, "key_store_unavailable"));
    answer_free(a);
}

static void test_pending_and_in_flight_bounds(void **state)
{
    struct fixture *f = *state;
    struct answer *a[RT_KEY_API_IN_FLIGHT_MAX + 2];
    int busy = 0, unavailable = 0;
    struct rt_control_stats st;
    struct tg_buf b;

    /* 4 pending publishes at most: the 5th generate is refused at once (key_store_busy). */
    control_unreachable(f, 1500, 4);
    for (int i = 0; i < 6; i++) {
        a[i] = answer_new();
        rt_key_api_handle(f->api, "POST", "/key/generate", NULL, "{}", 2, on_answer, a[i]);
    }
    for (int i = 0; i < 6; i++) {
        answer_wait(a[i], 5000);
        assert_int_equal(a[i]->status, 503);
        if (strstr(a[i]->body, "key_store_busy") != NULL)
            busy++;
        else if (strstr(a[i]->body, "key_store_unavailable") != NULL)
            unavailable++;
        answer_free(a[i]);
    }
    assert_int_equal(busy, 2);
    assert_int_equal(unavailable, 4);
    rt_control_get_stats(f->control, &st);
    assert_int_equal(st.publish_full, 2);
    assert_int_equal(st.publish_failed, 4);
    assert_int_equal(tg_buf_init(&b, 4096), 0);
    rt_control_write_metrics(f->control, &b);
    assert_non_null(strstr(b.data, "tollgate_router_control_publish_total{outcome=\"full\"} 2"));
    assert_non_null(strstr(b.data, "tollgate_router_control_publish_total{outcome=\"failed\"} 4"));
    assert_non_null(strstr(b.data, "tollgate_router_control_replayed 0"));
    tg_buf_fini(&b);
}

static void test_requests_in_progress_are_bounded(void **state)
{
    struct fixture *f = *state;
    struct answer *a[RT_KEY_API_IN_FLIGHT_MAX + 1];
    int n = RT_KEY_API_IN_FLIGHT_MAX + 1;

    control_unreachable(f, 1500, 256);
    for (int i = 0; i < n; i++) {
        a[i] = answer_new();
        rt_key_api_handle(f->api, "POST", "/key/generate", NULL, "{}", 2, on_answer, a[i]);
    }
    /* The one beyond the bound was answered at once. */
    assert_int_equal(a[n - 1]->calls, 1);
    assert_int_equal(a[n - 1]->status, 503);
    assert_non_null(strstr(a[n - 1]->body, "key_store_busy"));
    assert_int_equal(rt_key_api_in_flight(f->api), RT_KEY_API_IN_FLIGHT_MAX);
    for (int i = 0; i < n; i++) {
        answer_wait(a[i], 5000);
        assert_int_equal(a[i]->status, 503);
        answer_free(a[i]);
    }
    assert_int_equal(rt_key_api_in_flight(f->api), 0);
}

static void test_no_brokers_configured_answers_503_at_once(void **state)
{
    struct fixture *f = *state;
    struct rt_control_config cc;
    struct rt_key_api_config kc;
    char err[256];
    int status = 0;
    json_t *o;

    memset(&cc, 0, sizeof(cc));
    cc.cfg = f->cfg;
    f->control = rt_control_create(&cc, f->keys, err, sizeof(err));
    assert_non_null(f->control);
    assert_int_equal(rt_control_replayed(f->control), 1);
    rt_key_api_destroy(&f->api);
    memset(&kc, 0, sizeof(kc)); /* no teams table (router_teams_test has them) */
    kc.cfg = f->cfg;
    kc.keys = f->keys;
    kc.control = f->control;
    f->api = rt_key_api_create(&kc, err, sizeof(err));
    o = call(f, "POST", "/key/generate", NULL, "{}", &status);
    assert_int_equal(status, 503);
    assert_string_equal(jstr(o, "error.code"), "key_store_unavailable");
    json_decref(o);
}

/* ---- snapshot file ---- */

static void put_key(struct rt_keys *keys, const char *raw, const char *alias, int blocked)
{
    struct rt_key_spec *s = calloc(1, sizeof(*s));
    struct rt_key_change ch[2];

    rt_key_spec_init(s);
    tg_sha256_hex(raw, strlen(raw), s->key_hash);
    snprintf(s->key_alias, sizeof(s->key_alias), "%s", alias);
    s->n_models = 1;
    snprintf(s->models[0], RT_NAME_CAP, "gpt-main");
    s->rpm_limit = 9;
    memset(ch, 0, sizeof(ch));
    ch[0].op = RT_KEY_PUT;
    ch[0].spec = s;
    ch[1].op = RT_KEY_BLOCK;
    memcpy(ch[1].hash, s->key_hash, sizeof(ch[1].hash));
    assert_int_equal(rt_keys_apply(keys, ch, blocked ? 2 : 1), 0);
    free(s);
}

static struct rt_control *control_with_snapshot(struct fixture *f, struct rt_keys *keys,
                                                const char *path)
{
    struct rt_control_config cc;
    char err[256];
    struct rt_control *ctl;

    (void)f;
    memset(&cc, 0, sizeof(cc));
    cc.snapshot_path = path;
    cc.cfg = f->cfg;
    ctl = rt_control_create(&cc, keys, err, sizeof(err));
    if (ctl == NULL)
        fail_msg("control: %s", err);
    return ctl;
}

static void test_snapshot_round_trip_and_corruption(void **state)
{
    struct fixture *f = *state;
    char dir[] = "/tmp/tg-keyapi-snap.XXXXXX", path[128], err[256], mark[TG_SHA256_HEX_LEN + 1];
    struct rt_keys *keys2;
    struct rt_keys_table *t;
    struct rt_control *ctl;
    struct rt_control_stats st;
    struct rt_key_change ch;
    const struct rt_key *k;
    FILE *fp;
    char *text;
    long size;

    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/keys.snapshot", dir);
    ctl = control_with_snapshot(f, f->keys, path);
    put_key(f->keys, "sk-snap-one-0000000001", "one", 0);
    put_key(f->keys, "sk-snap-two-0000000002", "two", 1);
    tg_sha256_hex("sk-not-yet-seen-000003", 22, mark);
    memset(&ch, 0, sizeof(ch));
    ch.op = RT_KEY_BLOCK;
    memcpy(ch.hash, mark, sizeof(ch.hash));
    assert_int_equal(rt_keys_apply(f->keys, &ch, 1), 0); /* a block before its key */
    tg_sha256_hex(STATIC_KEY, strlen(STATIC_KEY), ch.hash);
    assert_int_equal(rt_keys_apply(f->keys, &ch, 1), 0); /* a budget block on a static key */
    rt_control_destroy(&ctl);                            /* writes the file */

    fp = fopen(path, "r");
    assert_non_null(fp);
    fseek(fp, 0, SEEK_END);
    size = ftell(fp);
    rewind(fp);
    text = calloc(1, (size_t)size + 1);
    assert_int_equal(fread(text, 1, (size_t)size, fp), (size_t)size);
    fclose(fp);
    assert_int_equal(strncmp(text, "tollgate-keys-snapshot v1 ", 26), 0);
    assert_null(strstr(text, "sk-")); /* hashes only */
    assert_non_null(strstr(text, "\"key_alias\":\"one\""));

    /* A new table loads it: both keys, the block, the early block mark; the static key comes
     * from the config and is not in the file. */
    keys2 = rt_keys_create(f->cfg->keys, f->cfg->n_keys, f->cfg->max_keys, err, sizeof(err));
    assert_non_null(keys2);
    ctl = control_with_snapshot(f, keys2, path);
    rt_control_get_stats(ctl, &st);
    assert_int_equal(st.snapshot_loaded, 4);
    assert_int_equal(st.snapshot_errors, 0);
    t = rt_keys_acquire(keys2);
    assert_int_equal(rt_keys_count(t), 3);
    k = rt_keys_lookup(t, "sk-snap-one-0000000001", 22);
    assert_non_null(k);
    assert_string_equal(k->key_alias, "one");
    assert_int_equal(k->rpm_limit, 9);
    assert_int_equal(k->blocked, 0);
    k = rt_keys_lookup(t, "sk-snap-two-0000000002", 22);
    assert_non_null(k);
    assert_int_equal(k->blocked, 1);
    assert_true(rt_keys_is_blocked_hash(t, mark));
    k = rt_keys_lookup(t, STATIC_KEY, strlen(STATIC_KEY));
    assert_non_null(k);
    assert_int_equal(k->blocked, 1); /* the block is kept, the record comes from the config */
    rt_keys_release(&t);
    rt_control_destroy(&ctl);
    rt_keys_destroy(&keys2);

    /* One flipped byte: the whole file is ignored. */
    text[size / 2] = text[size / 2] == 'a' ? 'b' : 'a';
    fp = fopen(path, "w");
    assert_non_null(fp);
    assert_int_equal(fwrite(text, 1, (size_t)size, fp), (size_t)size);
    fclose(fp);
    keys2 = rt_keys_create(f->cfg->keys, f->cfg->n_keys, f->cfg->max_keys, err, sizeof(err));
    ctl = control_with_snapshot(f, keys2, path);
    rt_control_get_stats(ctl, &st);
    assert_int_equal(st.snapshot_loaded, 0);
    assert_int_equal(st.snapshot_errors, 1);
    t = rt_keys_acquire(keys2);
    assert_int_equal(rt_keys_count(t), 1);
    rt_keys_release(&t);
    rt_control_destroy(&ctl);
    rt_keys_destroy(&keys2);

    /* Truncated (no END line): ignored too. */
    fp = fopen(path, "w");
    assert_non_null(fp);
    assert_int_equal(fwrite(text, 1, (size_t)size / 2, fp), (size_t)size / 2);
    fclose(fp);
    keys2 = rt_keys_create(f->cfg->keys, f->cfg->n_keys, f->cfg->max_keys, err, sizeof(err));
    ctl = control_with_snapshot(f, keys2, path);
    rt_control_get_stats(ctl, &st);
    assert_int_equal(st.snapshot_loaded, 0);
    assert_int_equal(st.snapshot_errors, 1);
    rt_control_destroy(&ctl);
    rt_keys_destroy(&keys2);

    free(text);
    unlink(path);
    rmdir(dir);
}

static void test_record_key_and_block_value(void **state)
{
    struct rt_control_record rec;
    struct proto_ctl_block b;
    char out[PROTO_CTL_BLOCK_JSON_MAX];
    size_t n = 0;

    (void)state;
    memset(&rec, 0, sizeof(rec));
    memset(rec.hash, 'a', TG_SHA256_HEX_LEN);
    rec.op = RT_KEY_DELETE;
    assert_int_equal(rt_control_record_key(&rec, out, sizeof(out)), 4 + TG_SHA256_HEX_LEN);
    assert_int_equal(strncmp(out, "key:aaaa", 8), 0);
    rec.op = RT_KEY_UNBLOCK;
    assert_int_equal(rt_control_record_key(&rec, out, sizeof(out)), 6 + TG_SHA256_HEX_LEN);
    assert_int_equal(strncmp(out, "block:aaaa", 10), 0);
    rec.hash[3] = 'G';
    assert_int_equal(rt_control_record_key(&rec, out, sizeof(out)), TG_EINVAL);

    proto_ctl_block_init(&b);
    snprintf(b.reason, sizeof(b.reason), "budget_exceeded");
    b.since_ms = 1700000000000;
    b.until_ms = 1702592000000;
    assert_int_equal(proto_ctl_block_encode(&b, out, sizeof(out), &n), 0);
    assert_string_equal(out, "{\"reason\":\"budget_exceeded\",\"since_ms\":1700000000000,"
                             "\"until_ms\":1702592000000}");
    assert_int_equal(n, strlen(out));
    snprintf(b.reason, sizeof(b.reason), "a\"b");
    assert_int_equal(proto_ctl_block_encode(&b, out, sizeof(out), &n), TG_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_generate_returns_key_once_and_stores_hash, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_budget_reset_at_by_the_calendar, setup, teardown),
        cmocka_unit_test_setup_teardown(test_block_and_unblock, setup, teardown),
        cmocka_unit_test_setup_teardown(test_list, setup, teardown),
        cmocka_unit_test_setup_teardown(test_regenerate, setup, teardown),
        cmocka_unit_test_setup_teardown(test_generate_empty_body_and_distinct_keys, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_generate_field_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_litellm_fields_stored_and_returned, setup, teardown),
        cmocka_unit_test_setup_teardown(test_errors_never_echo_a_key, setup, teardown),
        cmocka_unit_test_setup_teardown(test_custom_key_and_conflict, setup, teardown),
        cmocka_unit_test_setup_teardown(test_import_by_key_hash, setup, teardown),
        cmocka_unit_test_setup_teardown(test_update_merges_and_validates, setup, teardown),
        cmocka_unit_test_setup_teardown(test_update_keeps_block_and_info_shows_it, setup, teardown),
        cmocka_unit_test_setup_teardown(test_delete_by_keys_and_hashes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_info_and_routing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_table_capacity_answers_503, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unreachable_kafka_answers_503_within_the_bound, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_pending_and_in_flight_bounds, setup, teardown),
        cmocka_unit_test_setup_teardown(test_requests_in_progress_are_bounded, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_brokers_configured_answers_503_at_once, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_snapshot_round_trip_and_corruption, setup, teardown),
        cmocka_unit_test(test_record_key_and_block_value),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
