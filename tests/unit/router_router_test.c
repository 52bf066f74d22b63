/* router: retries, cooldowns, fallbacks (global, key-level, alias, allowlist, disabled,
 * context-window, content-policy), final 4xx, rate-limited 429 with retry-after. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>

#include <cmocka.h>

#include "config.h"
#include "keys.h"
#include "mask.h"
#include "model_list_gen.h"
#include "proto_event.h"
#include "router.h"
#include "teams.h"
#include "tg_err.h"
#include "tg_log.h"

/* One scripted upstream answer per group (the first matching entry). */
struct script {
    const char *group;
    int status;
    enum rt_error_class cls;
    const char *message;
};

struct env {
    struct rt_config_diag diag;
    struct rt_config *cfg;
    struct rt_mask *mask;
    struct rt_router *router;
    struct rt_keys *keys;
    struct rt_keys_table *table;
};

static struct env *env_new(const char *yaml)
{
    struct env *e = calloc(1, sizeof(*e));
    char err[256];
    const char *secrets[16];
    size_t n;

    assert_non_null(e);
    e->cfg = rt_config_load_buffer("router.yaml", yaml, strlen(yaml), &e->diag);
    if (e->cfg == NULL)
        fail_msg("config: %s", e->diag.error);
    n = rt_config_secrets(e->cfg, secrets, 16);
    e->mask = rt_mask_create(secrets, n, err, sizeof(err));
    assert_non_null(e->mask);
    e->router = rt_router_create(e->cfg, e->mask, err, sizeof(err));
    if (e->router == NULL)
        fail_msg("router: %s", err);
    e->keys = rt_keys_create(e->cfg->keys, e->cfg->n_keys, e->cfg->max_keys, err, sizeof(err));
    assert_non_null(e->keys);
    e->table = rt_keys_acquire(e->keys);
    return e;
}

static void env_free(struct env *e)
{
    rt_keys_release(&e->table);
    rt_keys_destroy(&e->keys);
    rt_router_destroy(&e->router);
    rt_mask_destroy(&e->mask);
    rt_config_destroy(&e->cfg);
    free(e);
}

static const struct rt_key *key_of(struct env *e, const char *token)
{
    const struct rt_key *k = rt_keys_lookup(e->table, token, strlen(token));

    assert_non_null(k);
    return k;
}

/* Run a whole request; returns the groups tried ("a,b,c") in trace and the plan's outcome. */
static const struct rt_outcome *run(struct env *e, struct rt_plan *plan, const struct rt_key *key,
                                    const char *model, int body_disable, uint64_t now,
                                    const struct script *sc, size_t n_sc, char *trace,
                                    size_t tracecap)
{
    struct rt_target t;
    int rc;

    trace[0] = '\0';
    rc = rt_router_begin(e->router, key, model, body_disable, 42, now, plan);
    if (rc == 0) {
        while (rt_router_next(e->router, plan, now, &t)) {
            struct rt_result res;
            size_t i;

            if (trace[0] != '\0')
                strncat(trace, ",", tracecap - strlen(trace) - 1);
            strncat(trace, t.group, tracecap - strlen(trace) - 1);
            memset(&res, 0, sizeof(res));
            res.http_status = 200;
            res.latency_ms = 5;
            for (i = 0; i < n_sc; i++) {
                if (strcmp(sc[i].group, t.group) == 0 || strcmp(sc[i].group, t.dep->id) == 0) {
                    res.http_status = sc[i].status;
                    res.error_class = sc[i].cls;
                    res.message = sc[i].message;
                    res.message_len = sc[i].message != NULL ? strlen(sc[i].message) : 0;
                    break;
                }
            }
            if (rt_router_report(e->router, plan, &t, &res, now, NULL) == RT_STEP_DONE)
                break;
        }
    }
    rt_router_finish(e->router, plan, 0, now);
    return rt_router_outcome(plan);
}

#define FAIL500(g)                                                                                 \
    {                                                                                              \
        g, 500, RT_ERR_SERVER, "internal error"                                                    \
    }

static const char *base_yaml =
    "model_list:\n"
    "  - {model_name: gpt-main, litellm_params: {model: openai/m1, api_key: sk-provider-secret-1}, "
    "model_info: {id: main-1}}\n"
    "  - {model_name: gpt-main, litellm_params: {model: openai/m2}, model_info: {id: main-2}}\n"
    "  - {model_name: fb1, litellm_params: {model: openai/f1}, model_info: {id: fb1-1}}\n"
    "  - {model_name: fb2, litellm_params: {model: anthropic/f2}, model_info: {id: fb2-1}}\n"
    "  - {model_name: big, litellm_params: {model: openai/big}, model_info: {id: big-1}}\n"
    "  - {model_name: safe, litellm_params: {model: openai/safe}, model_info: {id: safe-1}}\n"
    "router_settings:\n"
    "  num_retries: 1\n"
    "  allowed_fails: 1000\n"
    "  cooldown_time: 10\n"
    "  fallbacks: [{gpt-main: [fb1, fb2]}]\n"
    "  context_window_fallbacks: [{gpt-main: [big]}]\n"
    "  content_policy_fallbacks: [{gpt-main: [safe]}]\n"
    "  model_group_alias: {alias-main: gpt-main}\n"
    "tollgate:\n"
    "  keys:\n"
    "    - {key: sk-key-empty-list, router_settings: {fallbacks: []}}\n"
    "    - {key: sk-key-null-list, router_settings: {fallbacks: null}}\n"
    "    - {key: sk-key-absent-list}\n"
    "    - {key: sk-key-own-list, router_settings: {fallbacks: [{gpt-main: [fb2]}]}}\n"
    "    - {key: sk-key-allowlist, models: [gpt-main, alias-main, fb2]}\n"
    "    - {key: sk-key-no-fallbacks, metadata: {disable_fallbacks: true}}\n"
    "    - {key: sk-key-alias, router_settings: {model_group_alias: {my-main: gpt-main}}}\n"
    "    - {key: sk-key-only-fb1, models: [fb1]}\n"
    "    - {key: sk-key-rpm, rpm_limit: 1, key_alias: rpm-key, team_id: t1, user_id: u1, "
    "metadata: {tags: [a, b]}}\n"
    "    - {key: sk-key-retries0, router_settings: {num_retries: 0}}\n";

static int setup(void **state)
{
    (void)state;
    tg_log_set_level(TG_LOG_OFF);
    return 0;
}

static void test_unknown_and_not_allowed(void **state)
{
    struct env *e = env_new(base_yaml);
    struct rt_plan plan;
    const struct rt_outcome *o;
    char trace[256];

    (void)state;
    assert_int_equal(rt_router_begin(e->router, NULL, "nope", 0, 1, 1000, &plan), TG_ENOTFOUND);
    o = rt_router_outcome(&plan);
    assert_int_equal(o->status, 400);
    assert_string_equal(o->message, "Invalid model name passed in model=nope");
    assert_string_equal(o->error_class, "invalid_model");
    rt_router_finish(e->router, &plan, 0, 1000);
    /* A model name carrying a secret is masked in the error body. */
    rt_router_begin(e->router, NULL, "sk-proj-abcdefghijklmnop", 0, 1, 1000, &plan);
    assert_null(strstr(rt_router_outcome(&plan)->message, "abcdefgh"));
    rt_router_finish(e->router, &plan, 0, 1000);
    o = run(e, &plan, key_of(e, "sk-key-only-fb1"), "gpt-main", 0, 1000, NULL, 0, trace,
            sizeof(trace));
    assert_int_equal(o->status, 401);
    assert_string_equal(o->error_class, "model_not_allowed");
    assert_string_equal(trace, "");
    env_free(e);
}

/* 300 deployments in 100 groups, and aliases (looked up in hash tables, not loops): each group
 * is found by its name, the first and the last ones included; an alias goes to its group, also
 * an alias that has a group's name (the alias wins, as LiteLLM's model_group_alias does); a key's
 * own alias before both; names that are not there (a prefix, one more digit) are unknown. */
static void test_many_groups(void **state)
{
    size_t n;
    char *yaml = model_list_gen(300, 3, "",
                                "router_settings:\n  model_group_alias: {a-50: g-50, g-5: g-7}\n"
                                "tollgate:\n  keys:\n"
                                "    - {key: sk-key-own-alias, router_settings: {model_group_alias: "
                                "{a-50: g-3}}}\n",
                                &n);
    struct env *e;
    struct rt_plan plan;
    const struct rt_outcome *o;
    char trace[256], want[32];

    (void)state;
    e = env_new(yaml);
    for (int g = 0; g < 100; g += 9) {
        snprintf(want, sizeof(want), "g-%d", g);
        o = run(e, &plan, NULL, want, 0, 1000, NULL, 0, trace, sizeof(trace));
        assert_int_equal(o->status, 200);
        assert_string_equal(trace, want);
    }
    o = run(e, &plan, NULL, "g-99", 0, 1000, NULL, 0, trace, sizeof(trace));
    assert_string_equal(trace, "g-99");
    o = run(e, &plan, NULL, "a-50", 0, 1000, NULL, 0, trace, sizeof(trace));
    assert_int_equal(o->status, 200);
    assert_string_equal(trace, "g-50");
    o = run(e, &plan, NULL, "g-5", 0, 1000, NULL, 0, trace, sizeof(trace));
    assert_string_equal(trace, "g-7");
    o = run(e, &plan, key_of(e, "sk-key-own-alias"), "a-50", 0, 1000, NULL, 0, trace,
            sizeof(trace));
    assert_string_equal(trace, "g-3");
    assert_int_equal(rt_router_begin(e->router, NULL, "g-100", 0, 1, 1000, &plan), TG_ENOTFOUND);
    rt_router_finish(e->router, &plan, 0, 1000);
    assert_int_equal(rt_router_begin(e->router, NULL, "g-", 0, 1, 1000, &plan), TG_ENOTFOUND);
    rt_router_finish(e->router, &plan, 0, 1000);
    assert_int_equal(rt_router_begin(e->router, NULL, "a-5", 0, 1, 1000, &plan), TG_ENOTFOUND);
    rt_router_finish(e->router, &plan, 0, 1000);
    env_free(e);
    free(yaml);
}

static void test_retry_moves_to_another_deployment(void **state)
{
    struct env *e = env_new(base_yaml);
    struct rt_plan plan;
    struct rt_target t1, t2;
    struct rt_result res = {500, RT_ERR_SERVER, 9, "boom", 4, 0, 0, 0};

    (void)state;
    for (uint64_t rnd = 1; rnd < 40; rnd++) {
        assert_int_equal(
            rt_router_begin(e->router, NULL, "gpt-main", 0, rnd, 1000 + rnd * 100000, &plan), 0);
        assert_int_equal(rt_router_next(e->router, &plan, 1000, &t1), 1);
        assert_string_equal(t1.group, "gpt-main");
        assert_int_equal(t1.is_retry, 0);
        assert_int_equal(rt_router_report(e->router, &plan, &t1, &res, 1000 + rnd * 100000, NULL),
                         RT_STEP_NEXT);
        assert_int_equal(rt_router_next(e->router, &plan, 1000, &t2), 1);
        assert_string_equal(t2.group, "gpt-main");
        assert_int_equal(t2.is_retry, 1);
        assert_int_equal(t2.attempt, 2);
        assert_true(t1.dep_index != t2.dep_index);
        res.http_status = 200;
        res.error_class = RT_ERR_NONE;
        assert_int_equal(rt_router_report(e->router, &plan, &t2, &res, 1000 + rnd * 100000, NULL),
                         RT_STEP_DONE);
        assert_int_equal(rt_router_outcome(&plan)->status, 200);
        assert_int_equal(rt_router_outcome(&plan)->served, 1);
        assert_int_equal(rt_router_next(e->router, &plan, 1000, &t2), 0);
        rt_router_finish(e->router, &plan, 10, 1000);
        res.http_status = 500;
        res.error_class = RT_ERR_SERVER;
    }
    env_free(e);
}

static const char *cooldown_yaml =
    "model_list:\n"
    "  - {model_name: g, litellm_params: {model: a}, model_info: {id: A}}\n"
    "  - {model_name: g, litellm_params: {model: b}, model_info: {id: B}}\n"
    "router_settings: {num_retries: 0, allowed_fails: 1, cooldown_time: 10}\n";

/* Fail deployment id on one request at now; returns the cooled flag. */
static int fail_once(struct env *e, const char *id, uint64_t now)
{
    struct rt_plan plan;
    struct rt_target t;
    struct rt_result res = {503, RT_ERR_SERVER, 1, "unavailable", 11, 0, 0, 0};
    int cooled = 0;

    for (uint64_t rnd = 0; rnd < 1000; rnd++) {
        assert_int_equal(rt_router_begin(e->router, NULL, "g", 0, rnd, now, &plan), 0);
        assert_int_equal(rt_router_next(e->router, &plan, now, &t), 1);
        if (strcmp(t.dep->id, id) == 0) {
            rt_router_report(e->router, &plan, &t, &res, now, &cooled);
            rt_router_finish(e->router, &plan, 0, now);
            return cooled;
        }
        rt_router_finish(e->router, &plan, 0, now); /* not reported: released */
    }
    fail_msg("deployment %s never chosen", id);
    return 0;
}

static void test_cooldown(void **state)
{
    struct env *e = env_new(cooldown_yaml);
    struct rt_deployment_state st;
    struct rt_plan plan;
    struct rt_target t;
    int a = rt_config_find_deployment(e->cfg, "A");

    (void)state;
    /* allowed_fails: 1 -> the second failure within a minute cools A down for 10 s. */
    assert_int_equal(fail_once(e, "A", 100000), 0);
    assert_int_equal(fail_once(e, "A", 150000), 1);
    rt_router_deployment_state(e->router, (uint32_t)a, 150000, &st);
    assert_int_equal(st.cooldown_until_ms, 160000);
    assert_int_equal(st.cooldowns, 1);
    assert_int_equal(st.in_flight, 0);
    for (uint64_t rnd = 0; rnd < 50; rnd++) {
        rt_router_begin(e->router, NULL, "g", 0, rnd, 159999, &plan);
        assert_int_equal(rt_router_next(e->router, &plan, 159999, &t), 1);
        assert_string_equal(t.dep->id, "B");
        rt_router_finish(e->router, &plan, 0, 159999);
    }
    /* Expired: A is routed again, with a fresh count (one failure does not cool it). */
    assert_int_equal(fail_once(e, "A", 160000), 0);
    rt_router_deployment_state(e->router, (uint32_t)a, 160000, &st);
    assert_int_equal(st.cooldown_until_ms, 0);
    assert_int_equal(st.fails_in_window, 1);
    /* Failures more than a minute apart never add up. */
    assert_int_equal(fail_once(e, "B", 200000), 0);
    assert_int_equal(fail_once(e, "B", 260000), 0);
    assert_int_equal(fail_once(e, "B", 320001), 0);
    /* 4xx client errors do not count. */
    env_free(e);
}

static void test_cooldown_all_then_429(void **state)
{
    struct env *e = env_new(cooldown_yaml);
    struct rt_plan plan;
    struct rt_target t;
    const struct rt_outcome *o;

    (void)state;
    fail_once(e, "A", 1000);
    fail_once(e, "A", 1001);
    fail_once(e, "B", 1002);
    fail_once(e, "B", 1003);
    assert_int_equal(rt_router_begin(e->router, NULL, "g", 0, 3, 5000, &plan), 0);
    assert_int_equal(rt_router_next(e->router, &plan, 5000, &t), 0);
    o = rt_router_outcome(&plan);
    assert_int_equal(o->status, 429);
    assert_int_equal(o->retry_after_s, 7); /* A is back at 11001 */
    assert_string_equal(o->message, "No deployments available for g: every deployment is "
                                    "cooling down");
    rt_router_finish(e->router, &plan, 0, 5000);
    env_free(e);
}

static void test_fallback_order_and_event(void **state)
{
    struct env *e = env_new(base_yaml);
    struct rt_plan plan;
    const struct rt_outcome *o;
    char trace[256];
    struct script sc[] = {FAIL500("gpt-main"), FAIL500("fb1")};
    static struct proto_event ev;

    (void)state;
    o = run(e, &plan, NULL, "gpt-main", 0, 1000, sc, 2, trace, sizeof(trace));
    /* num_retries 1: two attempts in gpt-main (both deployments), then fb1 twice, then fb2. */
    assert_string_equal(trace, "gpt-main,gpt-main,fb1,fb1,fb2");
    assert_int_equal(o->status, 200);
    assert_string_equal(o->model_group, "fb2");
    assert_int_equal(rt_router_attempts(&plan), 5);
    assert_int_equal(rt_router_fallbacks(&plan), 2);
    assert_int_equal(rt_trail_len(rt_router_trail(&plan)), 4);
    assert_int_equal(rt_trail_total(rt_router_trail(&plan)), 5);
    proto_event_init(&ev);
    rt_router_fill_event(e->router, &plan, &ev);
    assert_string_equal(ev.model_requested, "gpt-main");
    assert_string_equal(ev.model_group, "fb2");
    assert_string_equal(ev.deployment_id, "fb2-1");
    assert_string_equal(ev.provider, "anthropic");
    assert_string_equal(ev.model, "f2");
    assert_int_equal(ev.status, 200);
    assert_string_equal(ev.error_class, "");
    assert_int_equal(ev.attempts, 5);
    assert_int_equal(ev.fallbacks, 2);
    assert_int_equal(ev.trail_len, 4);
    assert_string_equal(ev.trail[0].group, "gpt-main");
    assert_string_equal(ev.trail[1].group, "fb1");
    assert_string_equal(ev.trail[1].error_class, "server_error");
    assert_int_equal(ev.trail[1].http_status, 500);
    assert_string_equal(ev.trail[3].group, "fb2");
    assert_string_equal(ev.key_hash, "");
    env_free(e);
}

static void test_alias_then_fallback(void **state)
{
    struct env *e = env_new(base_yaml);
    struct rt_plan plan;
    const struct rt_outcome *o;
    char trace[256];
    struct script sc[] = {FAIL500("gpt-main")};
    static struct proto_event ev;

    (void)state;
    o = run(e, &plan, NULL, "alias-main", 0, 1000, sc, 1, trace, sizeof(trace));
    assert_string_equal(trace, "gpt-main,gpt-main,fb1");
    assert_int_equal(o->status, 200);
    proto_event_init(&ev);
    rt_router_fill_event(e->router, &plan, &ev);
    assert_string_equal(ev.model_requested, "alias-main");
    assert_string_equal(ev.model_group, "fb1");
    /* Key-level alias. */
    o = run(e, &plan, key_of(e, "sk-key-alias"), "my-main", 0, 1000, sc, 1, trace, sizeof(trace));
    assert_string_equal(trace, "gpt-main,gpt-main,fb1");
    o = run(e, &plan, NULL, "my-main", 0, 1000, sc, 1, trace, sizeof(trace));
    assert_int_equal(o->status, 400);
    env_free(e);
}

static void test_key_level_fallbacks(void **state)
{
    struct env *e = env_new(base_yaml);
    struct rt_plan plan;
    const struct rt_outcome *o;
    char trace[256];
    struct script sc[] = {FAIL500("gpt-main")};

    (void)state;
    /* fallbacks: [] -> none: the last upstream error is the answer. */
    o = run(e, &plan, key_of(e, "sk-key-empty-list"), "gpt-main", 0, 1000, sc, 1, trace,
            sizeof(trace));
    assert_string_equal(trace, "gpt-main,gpt-main");
    assert_int_equal(o->status, 500);
    assert_int_equal(o->from_upstream, 1);
    assert_string_equal(o->error_class, "server_error");
    assert_string_equal(o->message, "internal error");
    /* null and absent -> the global list. */
    run(e, &plan, key_of(e, "sk-key-null-list"), "gpt-main", 0, 1000, sc, 1, trace, sizeof(trace));
    assert_string_equal(trace, "gpt-main,gpt-main,fb1");
    run(e, &plan, key_of(e, "sk-key-absent-list"), "gpt-main", 0, 1000, sc, 1, trace,
        sizeof(trace));
    assert_string_equal(trace, "gpt-main,gpt-main,fb1");
    /* The key's own list replaces the global one. */
    run(e, &plan, key_of(e, "sk-key-own-list"), "gpt-main", 0, 1000, sc, 1, trace, sizeof(trace));
    assert_string_equal(trace, "gpt-main,gpt-main,fb2");
    /* Key num_retries overrides the global one. */
    run(e, &plan, key_of(e, "sk-key-retries0"), "gpt-main", 0, 1000, sc, 1, trace, sizeof(trace));
    assert_string_equal(trace, "gpt-main,fb1");
    env_free(e);
}

static void test_allowlist_skip(void **state)
{
    struct env *e = env_new(base_yaml);
    struct rt_plan plan;
    char trace[256];
    struct script sc[] = {FAIL500("gpt-main"), FAIL500("fb2")};
    const struct rt_outcome *o;

    (void)state;
    /* fb1 is not in the key's models: skipped; fb2 is. */
    o = run(e, &plan, key_of(e, "sk-key-allowlist"), "gpt-main", 0, 1000, sc, 1, trace,
            sizeof(trace));
    assert_string_equal(trace, "gpt-main,gpt-main,fb2");
    assert_int_equal(o->status, 200);
    /* Nothing allowed remains: the last error stands. */
    o = run(e, &plan, key_of(e, "sk-key-allowlist"), "alias-main", 0, 1000, sc, 2, trace,
            sizeof(trace));
    assert_string_equal(trace, "gpt-main,gpt-main,fb2,fb2");
    assert_int_equal(o->status, 500);
    env_free(e);
}

static void test_allowlist_not_enforced(void **state)
{
    char yaml[4096];
    struct env *e;
    struct rt_plan plan;
    char trace[256];
    struct script sc[] = {FAIL500("gpt-main")};

    (void)state;
    snprintf(yaml, sizeof(yaml), "%s", base_yaml);
    {
        char *p = strstr(yaml, "  num_retries: 1\n");

        memcpy(p, "  num_retries: 0\n", 17);
    }
    /* enforce_fallback_model_access: false (LiteLLM's behaviour): fb1 is used. */
    strncat(yaml, "", 1);
    {
        char *p = strstr(yaml, "tollgate:\n");
        char tail[2048];

        snprintf(tail, sizeof(tail), "%s", p);
        snprintf(p, sizeof(yaml) - (size_t)(p - yaml), "  enforce_fallback_model_access: false\n%s",
                 tail);
    }
    e = env_new(yaml);
    run(e, &plan, key_of(e, "sk-key-allowlist"), "gpt-main", 0, 1000, sc, 1, trace, sizeof(trace));
    assert_string_equal(trace, "gpt-main,fb1");
    env_free(e);
}

static void test_disable_fallbacks(void **state)
{
    struct env *e = env_new(base_yaml);
    struct rt_plan plan;
    char trace[256];
    struct script sc[] = {FAIL500("gpt-main")};
    const struct rt_outcome *o;

    (void)state;
    o = run(e, &plan, key_of(e, "sk-key-no-fallbacks"), "gpt-main", 0, 1000, sc, 1, trace,
            sizeof(trace));
    assert_string_equal(trace, "gpt-main,gpt-main");
    assert_int_equal(o->status, 500);
    o = run(e, &plan, NULL, "gpt-main", 1, 1000, sc, 1, trace, sizeof(trace));
    assert_string_equal(trace, "gpt-main,gpt-main");
    assert_int_equal(rt_router_fallbacks(&plan), 0);
    env_free(e);
}

static void test_context_window_and_content_policy(void **state)
{
    struct env *e = env_new(base_yaml);
    struct rt_plan plan;
    char trace[256];
    struct script cw[] = {{"gpt-main", 400, RT_ERR_CONTEXT_WINDOW, "context_length_exceeded"}};
    struct script cp[] = {{"gpt-main", 400, RT_ERR_CONTENT_POLICY, "content_policy_violation"}};
    struct script cw_fb[] = {{"fb1", 400, RT_ERR_CONTEXT_WINDOW, "too long"}};
    const struct rt_outcome *o;

    (void)state;
    /* No retry in the same group; the context-window list, not the general one. */
    o = run(e, &plan, NULL, "gpt-main", 0, 1000, cw, 1, trace, sizeof(trace));
    assert_string_equal(trace, "gpt-main,big");
    assert_int_equal(o->status, 200);
    assert_string_equal(o->model_group, "big");
    o = run(e, &plan, NULL, "gpt-main", 0, 1000, cp, 1, trace, sizeof(trace));
    assert_string_equal(trace, "gpt-main,safe");
    /* A group without a context-window list: the 400 is final. */
    o = run(e, &plan, NULL, "fb1", 0, 1000, cw_fb, 1, trace, sizeof(trace));
    assert_string_equal(trace, "fb1");
    assert_int_equal(o->status, 400);
    assert_string_equal(o->error_class, "context_window");
    assert_int_equal(o->from_upstream, 1);
    /* disable_fallbacks covers these lists too. */
    o = run(e, &plan, NULL, "gpt-main", 1, 1000, cw, 1, trace, sizeof(trace));
    assert_string_equal(trace, "gpt-main");
    assert_int_equal(o->status, 400);
    env_free(e);
}

/* A provider refusing the deployment's credentials (401/403): no retry in the group (the same
 * refusal again), the request's fallbacks still apply, and the deployment cools down like a
 * failing one so that later requests go elsewhere. */
static void test_auth_no_retry_fallbacks_apply(void **state)
{
    struct env *e = env_new(base_yaml);
    struct rt_plan plan;
    char trace[256];
    struct script main_refused[] = {{"gpt-main", 401, RT_ERR_AUTH, "Incorrect API key provided"}};
    struct script fb_refused[] = {{"fb1", 403, RT_ERR_AUTH, "access denied"}};
    const struct rt_outcome *o;

    (void)state;
    /* gpt-main (num_retries 1, two deployments) is not retried: its fallbacks are tried */
    o = run(e, &plan, NULL, "gpt-main", 0, 1000, main_refused, 1, trace, sizeof(trace));
    assert_string_equal(trace, "gpt-main,fb1");
    assert_int_equal(o->status, 200);
    assert_string_equal(o->model_group, "fb1");
    /* fb1 has no fallbacks: its refusal is the answer, as the provider gave it */
    o = run(e, &plan, NULL, "fb1", 0, 2000, fb_refused, 1, trace, sizeof(trace));
    assert_string_equal(trace, "fb1");
    assert_int_equal(o->status, 403);
    assert_int_equal(o->from_upstream, 1);
    assert_string_equal(o->error_class, "auth");
    /* and with fallbacks disabled, gpt-main's 401 is final after one attempt */
    o = run(e, &plan, NULL, "gpt-main", 1, 3000, main_refused, 1, trace, sizeof(trace));
    assert_string_equal(trace, "gpt-main");
    assert_int_equal(o->status, 401);
    assert_string_equal(o->error_class, "auth");
    env_free(e);
}

/* More than allowed_fails refusals of a deployment's credentials cool it down. */
static void test_auth_cools_down(void **state)
{
    struct env *e = env_new("model_list:\n"
                            "  - {model_name: g, litellm_params: {model: openai/a}, "
                            "model_info: {id: bad-key}}\n"
                            "router_settings: {allowed_fails: 1, cooldown_time: 30}\n");
    struct rt_plan plan;
    char trace[256];
    struct script sc[] = {{"bad-key", 401, RT_ERR_AUTH, "invalid x-api-key"}};
    const struct rt_outcome *o;

    (void)state;
    for (int i = 0; i < 2; i++) {
        o = run(e, &plan, NULL, "g", 0, 1000 + (uint64_t)i, sc, 1, trace, sizeof(trace));
        assert_string_equal(trace, "g");
        assert_int_equal(o->status, 401);
    }
    /* cooled down: nothing is sent to it for cooldown_time */
    o = run(e, &plan, NULL, "g", 0, 1100, sc, 1, trace, sizeof(trace));
    assert_string_equal(trace, "");
    assert_int_equal(o->status, 429);
    o = run(e, &plan, NULL, "g", 0, 1002 + 30000, sc, 1, trace, sizeof(trace));
    assert_string_equal(trace, "g");
    env_free(e);
}

static void test_4xx_final(void **state)
{
    struct env *e = env_new(base_yaml);
    struct rt_plan plan;
    char trace[256];
    struct script sc[] = {
        {"gpt-main", 404, RT_ERR_BAD_REQUEST, "model not found, key sk-provider-secret-1 used"}};
    const struct rt_outcome *o;

    (void)state;
    o = run(e, &plan, NULL, "gpt-main", 0, 1000, sc, 1, trace, sizeof(trace));
    assert_string_equal(trace, "gpt-main");
    assert_int_equal(o->status, 404);
    assert_int_equal(o->from_upstream, 1);
    assert_string_equal(o->error_class, "bad_request");
    /* The configured provider key never reaches the outcome or the trail. */
    assert_null(strstr(o->message, "sk-provider-secret-1"));
    assert_null(strstr(rt_trail_last(rt_router_trail(&plan))->message, "provider-secret"));
    env_free(e);
}

static void test_classify(void **state)
{
    (void)state;
    assert_int_equal(rt_router_classify(200, NULL, 0), RT_ERR_NONE);
    assert_int_equal(rt_router_classify(429, NULL, 0), RT_ERR_RATE_LIMIT);
    assert_int_equal(rt_router_classify(503, NULL, 0), RT_ERR_SERVER);
    const char *cw = "{\"error\":{\"code\":\"context_length_exceeded\"}}";
    const char *cp = "{\"error\":{\"code\":\"content_policy_violation\"}}";
    assert_int_equal(rt_router_classify(400, cw, strlen(cw)), RT_ERR_CONTEXT_WINDOW);
    assert_int_equal(rt_router_classify(400, cp, strlen(cp)), RT_ERR_CONTENT_POLICY);
    assert_int_equal(rt_router_classify(400, "{}", 2), RT_ERR_BAD_REQUEST);
    assert_int_equal(rt_router_classify(401, cw, strlen(cw)), RT_ERR_AUTH);
    assert_int_equal(rt_router_classify(403, "{}", 2), RT_ERR_AUTH);
    assert_int_equal(rt_router_classify(404, "{}", 2), RT_ERR_BAD_REQUEST);
    assert_string_equal(rt_error_class_name(RT_ERR_AUTH), "auth");
    assert_string_equal(rt_error_class_name(RT_ERR_TIMEOUT), "timeout");
    assert_string_equal(rt_error_class_name(RT_ERR_INVALID_RESPONSE), "invalid_response");
}

static const char *limits_yaml =
    "model_list:\n"
    "  - {model_name: gpt-main, litellm_params: {model: m, rpm: 1}, model_info: {id: main-1}}\n"
    "  - {model_name: gpt-fallback, litellm_params: {model: f}, model_info: {id: fb-1}}\n"
    "  - {model_name: gpt-ex, litellm_params: {model: x, rpm: 1}, model_info: {id: ex-1}}\n"
    "  - {model_name: gpt-ex-fb, litellm_params: {model: y, rpm: 1}, model_info: {id: exfb-1}}\n"
    "  - {model_name: gpt-free, litellm_params: {model: z}, model_info: {id: free-1}}\n"
    "router_settings:\n"
    "  fallbacks: [{gpt-main: [gpt-fallback]}, {gpt-ex: [gpt-ex-fb]}, {gpt-free: [gpt-fallback]}]\n"
    "  model_group_alias: {alias-ex: gpt-ex}\n"
    "tollgate:\n"
    "  keys:\n"
    "    - {key: sk-key-model-rpm, model_rpm_limit: {gpt-fallback: 1}}\n"
    "    - {key: sk-key-model-rpm-free, model_rpm_limit: {gpt-free: 1}}\n"
    "    - {key: sk-key-no-fb, metadata: {disable_fallbacks: true}}\n"
    "    - {key: sk-key-rpm, rpm_limit: 1}\n"
    "    - {key: sk-key-parallel, max_parallel_requests: 1}\n"
    "    - {key: sk-key-empty, router_settings: {fallbacks: []}}\n"
    "    - {key: sk-key-main-only, models: [gpt-main]}\n";

static void test_all_limited_429(void **state)
{
    struct env *e = env_new(limits_yaml);
    struct rt_plan plan;
    char trace[256];
    const struct rt_outcome *o;

    (void)state;
    /* Warm request: served by gpt-ex at second 1. */
    o = run(e, &plan, NULL, "gpt-ex", 0, 1000, NULL, 0, trace, sizeof(trace));
    assert_string_equal(trace, "gpt-ex");
    /* gpt-ex at its limit: unavailable, the fallback serves (second 2). */
    o = run(e, &plan, NULL, "gpt-ex", 0, 2000, NULL, 0, trace, sizeof(trace));
    assert_string_equal(trace, "gpt-ex-fb");
    assert_int_equal(o->status, 200);
    assert_string_equal(o->model_group, "gpt-ex-fb");
    assert_int_equal(rt_router_fallbacks(&plan), 1);
    /* Both saturated: 429 naming the requested model, retry-after = earliest free slot. */
    o = run(e, &plan, NULL, "gpt-ex", 0, 3000, NULL, 0, trace, sizeof(trace));
    assert_string_equal(trace, "");
    assert_int_equal(o->status, 429);
    assert_string_equal(o->error_class, "rate_limit");
    assert_string_equal(o->message, "Model capacity reached for gpt-ex: rpm limit 1, remaining 0");
    assert_int_equal(o->retry_after_s, 58);
    assert_int_equal(o->from_upstream, 0);
    assert_int_equal(rt_router_attempts(&plan), 0);
    /* Through an alias the message names what the client asked for. */
    o = run(e, &plan, NULL, "alias-ex", 0, 60999, NULL, 0, trace, sizeof(trace));
    assert_int_equal(o->status, 429);
    assert_string_equal(o->message,
                        "Model capacity reached for alias-ex: rpm limit 1, remaining 0");
    assert_int_equal(o->retry_after_s, 1);
    /* Exactly retry-after later the primary is admitted again. */
    o = run(e, &plan, NULL, "gpt-ex", 0, 61000, NULL, 0, trace, sizeof(trace));
    assert_string_equal(trace, "gpt-ex");
    env_free(e);
}

static void test_limited_with_key_rules(void **state)
{
    struct env *e = env_new(limits_yaml);
    struct rt_plan plan;
    char trace[256];
    const struct rt_outcome *o;

    (void)state;
    run(e, &plan, NULL, "gpt-main", 0, 1000, NULL, 0, trace, sizeof(trace));
    assert_string_equal(trace, "gpt-main");
    /* disable_fallbacks (key metadata, or body): 429 for gpt-main, no attempt at all. */
    o = run(e, &plan, key_of(e, "sk-key-no-fb"), "gpt-main", 0, 2000, NULL, 0, trace,
            sizeof(trace));
    assert_int_equal(o->status, 429);
    assert_string_equal(trace, "");
    assert_string_equal(o->message, "Model capacity reached for gpt-main: rpm limit 1, "
                                    "remaining 0");
    o = run(e, &plan, NULL, "gpt-main", 1, 2000, NULL, 0, trace, sizeof(trace));
    assert_int_equal(o->status, 429);
    /* Key fallbacks [] -> 429; the allowlist leaves nothing -> 429 for the requested model. */
    o = run(e, &plan, key_of(e, "sk-key-empty"), "gpt-main", 0, 2000, NULL, 0, trace,
            sizeof(trace));
    assert_int_equal(o->status, 429);
    o = run(e, &plan, key_of(e, "sk-key-main-only"), "gpt-main", 0, 2000, NULL, 0, trace,
            sizeof(trace));
    assert_int_equal(o->status, 429);
    assert_int_equal(rt_router_fallbacks(&plan), 0);
    assert_string_equal(trace, "");
    assert_string_equal(o->message, "Model capacity reached for gpt-main: rpm limit 1, "
                                    "remaining 0");
    /* Otherwise the fallback serves. */
    o = run(e, &plan, NULL, "gpt-main", 0, 2000, NULL, 0, trace, sizeof(trace));
    assert_string_equal(trace, "gpt-fallback");
    env_free(e);
}

static void test_key_model_limit_falls_back(void **state)
{
    struct env *e = env_new(limits_yaml);
    struct rt_plan plan;
    char trace[256];
    const struct rt_outcome *o;
    const struct rt_key *k = key_of(e, "sk-key-model-rpm");

    (void)state;
    /* model_rpm_limit {gpt-fallback: 1}: the key may call gpt-fallback once a minute. */
    o = run(e, &plan, k, "gpt-fallback", 0, 1000, NULL, 0, trace, sizeof(trace));
    assert_string_equal(trace, "gpt-fallback");
    o = run(e, &plan, k, "gpt-fallback", 0, 2000, NULL, 0, trace, sizeof(trace));
    assert_int_equal(o->status, 429);
    assert_string_equal(o->message,
                        "Rate limit reached for gpt-fallback: model_rpm_limit 1, remaining 0");
    assert_int_equal(o->retry_after_s, 59);
    /* model_rpm_limit {gpt-free: 1} (the deployment itself has no limit): the second request
     * in the minute falls back to a group the key still has room on (matrix row 1). */
    k = key_of(e, "sk-key-model-rpm-free");
    o = run(e, &plan, k, "gpt-free", 0, 200000, NULL, 0, trace, sizeof(trace));
    assert_string_equal(trace, "gpt-free");
    o = run(e, &plan, k, "gpt-free", 0, 201000, NULL, 0, trace, sizeof(trace));
    assert_string_equal(trace, "gpt-fallback");
    assert_int_equal(o->status, 200);
    assert_int_equal(rt_router_fallbacks(&plan), 1);
    /* Without the key rule the same group still serves. */
    o = run(e, &plan, NULL, "gpt-free", 0, 201500, NULL, 0, trace, sizeof(trace));
    assert_string_equal(trace, "gpt-free");
    env_free(e);
}

static void test_key_limits_at_begin(void **state)
{
    struct env *e = env_new(limits_yaml);
    struct rt_plan plan, plan2;
    const struct rt_key *k = key_of(e, "sk-key-rpm");
    const struct rt_key *kp = key_of(e, "sk-key-parallel");
    char trace[256];

    (void)state;
    assert_int_equal(rt_router_begin(e->router, k, "gpt-fallback", 0, 1, 1000, &plan), 0);
    rt_router_finish(e->router, &plan, 0, 1000);
    assert_int_equal(rt_router_begin(e->router, k, "gpt-fallback", 0, 1, 1500, &plan), TG_ELIMIT);
    assert_int_equal(rt_router_outcome(&plan)->status, 429);
    assert_int_equal(rt_router_outcome(&plan)->retry_after_s, 60);
    assert_string_equal(rt_router_outcome(&plan)->message,
                        "Rate limit reached for this key: rpm limit 1, remaining 0");
    rt_router_finish(e->router, &plan, 0, 1500);
    /* max_parallel_requests: 1 -> a second concurrent request is refused until the first ends. */
    assert_int_equal(rt_router_begin(e->router, kp, "gpt-fallback", 0, 1, 1000, &plan), 0);
    assert_int_equal(rt_router_begin(e->router, kp, "gpt-fallback", 0, 1, 1000, &plan2), TG_ELIMIT);
    rt_router_finish(e->router, &plan2, 0, 1000);
    rt_router_finish(e->router, &plan, 0, 1000);
    rt_router_finish(e->router, &plan, 0, 1000); /* idempotent */
    run(e, &plan2, kp, "gpt-fallback", 0, 1000, NULL, 0, trace, sizeof(trace));
    assert_string_equal(trace, "gpt-fallback");
    env_free(e);
}


/* A key with a team_id is limited by its own limits and its team's: the team's models (only
 * what both allow), rpm shared by every key of the team, max_parallel_requests, tpm counted from
 * the tokens of served calls, and the team's block. Errors name the team limit. */
static const char *team_yaml =
    "model_list:\n"
    "  - {model_name: gpt-main, litellm_params: {model: m}, model_info: {id: main-1}}\n"
    "  - {model_name: gpt-fallback, litellm_params: {model: f}, model_info: {id: fb-1}}\n"
    "  - {model_name: gpt-other, litellm_params: {model: o}, model_info: {id: other-1}}\n"
    "router_settings:\n"
    "  model_group_alias: {alias-main: gpt-main}\n"
    "tollgate:\n"
    "  keys:\n"
    "    - {key: sk-team-key-a, team_id: team-a, models: [gpt-main, gpt-fallback]}\n"
    "    - {key: sk-team-key-b, team_id: team-a}\n"
    "    - {key: sk-team-key-own-rpm, team_id: team-b, rpm_limit: 1}\n"
    "    - {key: sk-team-key-unknown, team_id: team-nowhere}\n"
    "    - {key: sk-no-team-key}\n";

static void put_team(struct rt_teams *teams, const char *id, const char *json)
{
    struct rt_team_spec spec;
    char err[256];

    rt_team_spec_init(&spec);
    snprintf(spec.team_id, sizeof(spec.team_id), "%s", id);
    if (rt_team_spec_from_json(&spec, RT_TEAM_JSON_API, json, strlen(json), NULL, err,
                               sizeof(err)) != 0)
        fail_msg("team %s: %s", id, err);
    assert_int_equal(rt_teams_put(teams, &spec), 0);
}

static void test_team_limits(void **state)
{
    struct env *e = env_new(team_yaml);
    struct rt_teams *teams;
    struct rt_plan plan, plan2;
    const struct rt_key *ka = key_of(e, "sk-team-key-a"), *kb = key_of(e, "sk-team-key-b");
    const struct rt_key *kown = key_of(e, "sk-team-key-own-rpm");
    char err[256];

    (void)state;
    teams = rt_teams_create(4, err, sizeof(err));
    assert_non_null(teams);
    rt_router_set_teams(e->router, teams);
    put_team(teams, "team-a", "{\"models\":[\"gpt-main\",\"gpt-other\"],\"rpm_limit\":2}");
    put_team(teams, "team-b", "{\"rpm_limit\":5,\"max_parallel_requests\":1}");

    /* models: key a allows gpt-main and gpt-fallback, its team gpt-main and gpt-other */
    assert_int_equal(rt_router_begin(e->router, ka, "gpt-fallback", 0, 1, 1000, &plan),
                     TG_EDENIED);
    assert_int_equal(rt_router_outcome(&plan)->status, 401);
    assert_string_equal(rt_router_outcome(&plan)->error_class, "team_model_not_allowed");
    assert_string_equal(rt_router_outcome(&plan)->message,
                        "Team not allowed to access model=gpt-fallback (team_id=team-a)");
    rt_router_finish(e->router, &plan, 0, 1000);
    assert_int_equal(rt_router_begin(e->router, ka, "gpt-other", 0, 1, 1000, &plan), TG_EDENIED);
    assert_string_equal(rt_router_outcome(&plan)->error_class, "model_not_allowed"); /* key's */
    rt_router_finish(e->router, &plan, 0, 1000);
    /* key b (no models of its own): the team's list applies, aliases resolve to a group */
    assert_int_equal(rt_router_begin(e->router, kb, "gpt-fallback", 0, 1, 1000, &plan),
                     TG_EDENIED);
    rt_router_finish(e->router, &plan, 0, 1000);

    /* team rpm 2, shared by keys a and b: the refusals above were not counted */
    assert_int_equal(rt_router_begin(e->router, ka, "gpt-main", 0, 1, 1000, &plan), 0);
    rt_router_finish(e->router, &plan, 0, 1000);
    assert_int_equal(rt_router_begin(e->router, kb, "alias-main", 0, 1, 1100, &plan), 0);
    rt_router_finish(e->router, &plan, 0, 1100);
    assert_int_equal(rt_router_begin(e->router, kb, "gpt-main", 0, 1, 1200, &plan), TG_ELIMIT);
    assert_int_equal(rt_router_outcome(&plan)->status, 429);
    assert_int_equal(rt_router_outcome(&plan)->retry_after_s, 60);
    assert_string_equal(rt_router_outcome(&plan)->message,
                        "Rate limit reached for team_id=team-a: team rpm limit 2, remaining 0");
    rt_router_finish(e->router, &plan, 0, 1200);
    /* a key without a team, and one whose team is unknown here, are not limited by team-a */
    assert_int_equal(rt_router_begin(e->router, key_of(e, "sk-no-team-key"), "gpt-main", 0, 1,
                                     1300, &plan),
                     0);
    rt_router_finish(e->router, &plan, 0, 1300);
    assert_int_equal(rt_router_begin(e->router, key_of(e, "sk-team-key-unknown"), "gpt-main", 0,
                                     1, 1300, &plan),
                     0);
    rt_router_finish(e->router, &plan, 0, 1300);
    /* the window moves on: admitted again 60 s later */
    assert_int_equal(rt_router_begin(e->router, ka, "gpt-main", 0, 1, 61000, &plan), 0);
    rt_router_finish(e->router, &plan, 0, 61000);

    /* team-b: max_parallel_requests 1 across its keys; the key's own rpm 1 (times after the
     * calls above: the limiter's clock never goes back) */
    assert_int_equal(rt_router_begin(e->router, kown, "gpt-main", 0, 1, 100000, &plan), 0);
    assert_int_equal(rt_router_begin(e->router, kown, "gpt-main", 0, 1, 100000, &plan2), TG_ELIMIT);
    assert_string_equal(rt_router_outcome(&plan2)->message,
                        "Rate limit reached for team_id=team-b: team max_parallel_requests "
                        "limit 1, remaining 0");
    rt_router_finish(e->router, &plan2, 0, 100000);
    rt_router_finish(e->router, &plan, 0, 100000);
    /* the team's slot is free again, the key's own rpm refuses: the team's slot is given back */
    assert_int_equal(rt_router_begin(e->router, kown, "gpt-main", 0, 1, 100500, &plan), TG_ELIMIT);
    assert_string_equal(rt_router_outcome(&plan)->message,
                        "Rate limit reached for this key: rpm limit 1, remaining 0");
    rt_router_finish(e->router, &plan, 0, 100500);
    put_team(teams, "team-b", "{\"max_parallel_requests\":1}");
    assert_int_equal(rt_router_begin(e->router, key_of(e, "sk-team-key-own-rpm"), "gpt-main", 0,
                                     1, 170000, &plan),
                     0);
    rt_router_finish(e->router, &plan, 0, 170000);

    /* tpm: tokens of a served call count against the team */
    put_team(teams, "team-a", "{\"tpm_limit\":100}");
    assert_int_equal(rt_router_begin(e->router, ka, "gpt-main", 0, 1, 200000, &plan), 0);
    {
        struct rt_target t;
        struct rt_result res;

        assert_true(rt_router_next(e->router, &plan, 200000, &t));
        memset(&res, 0, sizeof(res));
        res.http_status = 200;
        res.latency_ms = 5;
        rt_router_report(e->router, &plan, &t, &res, 200000, NULL);
    }
    rt_router_finish(e->router, &plan, 150, 200000);
    assert_int_equal(rt_router_begin(e->router, kb, "gpt-main", 0, 1, 200500, &plan), TG_ELIMIT);
    assert_string_equal(rt_router_outcome(&plan)->message,
                        "Rate limit reached for team_id=team-a: team tpm limit 100, remaining 0");
    rt_router_finish(e->router, &plan, 0, 200500);

    /* a blocked team: its keys are refused, naming the team */
    put_team(teams, "team-a", "{\"blocked\":true}");
    assert_int_equal(rt_router_begin(e->router, kb, "gpt-main", 0, 1, 300000, &plan), TG_EDENIED);
    assert_int_equal(rt_router_outcome(&plan)->status, 401);
    assert_string_equal(rt_router_outcome(&plan)->error_class, "team_blocked");
    assert_string_equal(rt_router_outcome(&plan)->message,
                        "Team is blocked (team_id=team-a); an admin's /team/unblock lifts it");
    rt_router_finish(e->router, &plan, 0, 300000);
    /* deleted: the key's own limits only */
    assert_int_equal(rt_teams_delete(teams, "team-a"), 0);
    assert_int_equal(rt_router_begin(e->router, kb, "gpt-main", 0, 1, 300000, &plan), 0);
    rt_router_finish(e->router, &plan, 0, 300000);
    env_free(e);
    rt_teams_destroy(&teams);
}

static void test_blocked_key_and_event_ids(void **state)
{
    struct env *e = env_new(base_yaml);
    struct rt_plan plan;
    char trace[256];
    struct rt_key_change ch;
    const struct rt_key *k;
    static struct proto_event ev;

    (void)state;
    k = key_of(e, "sk-key-rpm");
    run(e, &plan, k, "gpt-main", 0, 1000, NULL, 0, trace, sizeof(trace));
    proto_event_init(&ev);
    rt_router_fill_event(e->router, &plan, &ev);
    assert_string_equal(ev.key_hash, k->hash);
    assert_string_equal(ev.key_alias, "rpm-key");
    assert_string_equal(ev.team_id, "t1");
    assert_string_equal(ev.user_id, "u1");
    assert_int_equal(ev.tags_len, 2);
    assert_string_equal(ev.tags[1], "b");
    memset(&ch, 0, sizeof(ch));
    ch.op = RT_KEY_BLOCK;
    memcpy(ch.hash, k->hash, sizeof(ch.hash));
    assert_int_equal(rt_keys_apply(e->keys, &ch, 1), 0);
    rt_keys_release(&e->table);
    e->table = rt_keys_acquire(e->keys);
    k = key_of(e, "sk-key-rpm");
    assert_int_equal(k->blocked, 1);
    assert_int_equal(rt_router_begin(e->router, k, "gpt-main", 0, 1, 200000, &plan), TG_ELIMIT);
    assert_int_equal(rt_router_outcome(&plan)->status, 429);
    assert_string_equal(rt_router_outcome(&plan)->error_class, "budget_exceeded");
    rt_router_finish(e->router, &plan, 0, 200000);
    env_free(e);
}

static void test_attempts_bounded(void **state)
{
    static const char *yaml = "model_list:\n"
                              "  - {model_name: a, litellm_params: {model: a}}\n"
                              "  - {model_name: b, litellm_params: {model: b}}\n"
                              "  - {model_name: c, litellm_params: {model: c}}\n"
                              "router_settings: {num_retries: 16, allowed_fails: 100000,\n"
                              "                  fallbacks: [{a: [b, c]}]}\n";
    struct env *e = env_new(yaml);
    struct rt_plan plan;
    char trace[1024];
    struct script sc[] = {FAIL500("a"), FAIL500("b"), FAIL500("c")};
    const struct rt_outcome *o;

    (void)state;
    o = run(e, &plan, NULL, "a", 0, 1000, sc, 3, trace, sizeof(trace));
    assert_int_equal(rt_router_attempts(&plan), RT_PLAN_ATTEMPTS_MAX);
    assert_int_equal(rt_trail_len(rt_router_trail(&plan)), TG_TRAIL_MAX_ENTRIES);
    assert_int_equal(rt_trail_total(rt_router_trail(&plan)), RT_PLAN_ATTEMPTS_MAX);
    assert_int_equal(o->status, 500);
    env_free(e);
}

struct worker {
    struct env *e;
    const struct rt_key *key;
    uint64_t seed;
    int served;
    int answered;
};

/* The threads' one clock: every request moves it on by 7 ms. (Each thread used to drive a clock
 * of its own, so a cooldown set by a thread that was ahead outlived the whole run of a thread
 * that was behind, which then was never served: test_concurrent_requests failed about one run
 * in five. With one clock a cooldown ends for everyone at once, and every thread's 2,000
 * requests span at least 14 s of it, longer than cooldown_time.) */
static _Atomic uint64_t shared_clock_ms;

static void *worker_main(void *p)
{
    struct worker *w = p;
    uint64_t x = w->seed;

    for (int i = 0; i < 2000; i++) {
        struct rt_plan plan;
        struct rt_target t;
        uint64_t now = 1000 + atomic_fetch_add(&shared_clock_ms, 7);

        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        if (rt_router_begin(w->e->router, w->key, (x & 1) ? "gpt-main" : "alias-main", 0, x, now,
                            &plan) == 0) {
            while (rt_router_next(w->e->router, &plan, now, &t)) {
                struct rt_result res;

                memset(&res, 0, sizeof(res));
                res.http_status = (x % 3 == 0) ? 200 : 503;
                res.error_class = res.http_status == 200 ? RT_ERR_NONE : RT_ERR_SERVER;
                res.latency_ms = (uint32_t)(x % 50);
                x = x * 6364136223846793005ull + 1442695040888963407ull;
                if (x % 17 == 0)
                    break; /* abandoned attempt: finish must release it */
                if (rt_router_report(w->e->router, &plan, &t, &res, now, NULL) == RT_STEP_DONE)
                    break;
            }
        }
        rt_router_finish(w->e->router, &plan, 10, now);
        w->answered++;
        w->served += rt_router_outcome(&plan)->served;
    }
    return NULL;
}

/* Request threads share one router: no lost in-flight counts, every request answered. */
static void test_concurrent_requests(void **state)
{
    struct env *e = env_new(base_yaml);
    pthread_t th[4];
    struct worker w[4];
    struct rt_deployment_state st;

    (void)state;
    atomic_store(&shared_clock_ms, 0);
    for (int i = 0; i < 4; i++) {
        w[i].e = e;
        w[i].key = i % 2 ? key_of(e, "sk-key-absent-list") : NULL;
        w[i].seed = 0x1234567ull * (uint64_t)(i + 1);
        w[i].served = 0;
        w[i].answered = 0;
        assert_int_equal(pthread_create(&th[i], NULL, worker_main, &w[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(w[i].answered, 2000);
        assert_true(w[i].served > 0);
    }
    for (uint32_t d = 0; d < e->cfg->n_deployments; d++) {
        assert_int_equal(rt_router_deployment_state(e->router, d, 100000, &st), 0);
        assert_int_equal(st.in_flight, 0);
    }
    assert_int_equal(rt_router_deployment_state(e->router, 999, 0, &st), TG_EINVAL);
    env_free(e);
}

static const char *pick_once(struct env *e, uint64_t rnd, uint64_t now, struct rt_plan *plan,
                             struct rt_target *t)
{
    assert_int_equal(rt_router_begin(e->router, NULL, "g", 0, rnd, now, plan), 0);
    assert_int_equal(rt_router_next(e->router, plan, now, t), 1);
    return t->dep->id;
}

static void report_ok(struct env *e, struct rt_plan *plan, struct rt_target *t, uint32_t lat,
                      uint64_t now)
{
    struct rt_result res = {200, RT_ERR_NONE, lat, NULL, 0, 0, 0, 0};

    assert_int_equal(rt_router_report(e->router, plan, t, &res, now, NULL), RT_STEP_DONE);
    rt_router_finish(e->router, plan, 0, now);
}

static void test_strategies(void **state)
{
    struct env *e;
    struct rt_plan p1, p2;
    struct rt_target t1, t2;
    int b = 0;

    (void)state;
    /* least-busy: a deployment with an attempt in flight is avoided. */
    e = env_new("model_list:\n"
                "  - {model_name: g, litellm_params: {model: a}, model_info: {id: A}}\n"
                "  - {model_name: g, litellm_params: {model: b}, model_info: {id: B}}\n"
                "router_settings: {routing_strategy: least-busy}\n");
    for (uint64_t rnd = 1; rnd < 30; rnd++) {
        const char *first = pick_once(e, rnd, 1000, &p1, &t1);
        const char *second = pick_once(e, rnd * 7, 1000, &p2, &t2);

        assert_string_not_equal(first, second);
        report_ok(e, &p1, &t1, 5, 1000);
        report_ok(e, &p2, &t2, 5, 1000);
    }
    env_free(e);
    /* latency-based-routing: untried first, then the lowest latency average. */
    e = env_new("model_list:\n"
                "  - {model_name: g, litellm_params: {model: a}, model_info: {id: A}}\n"
                "  - {model_name: g, litellm_params: {model: b}, model_info: {id: B}}\n"
                "router_settings: {routing_strategy: latency-based-routing}\n");
    pick_once(e, 1, 1000, &p1, &t1);
    report_ok(e, &p1, &t1, strcmp(t1.dep->id, "A") == 0 ? 300 : 20, 1000);
    pick_once(e, 2, 1000, &p1, &t1);
    report_ok(e, &p1, &t1, strcmp(t1.dep->id, "A") == 0 ? 300 : 20, 1000);
    for (uint64_t rnd = 3; rnd < 40; rnd++) {
        assert_string_equal(pick_once(e, rnd, 1000, &p1, &t1), "B");
        report_ok(e, &p1, &t1, 20, 1000);
    }
    /* an answer the router made itself (a token count estimate) is no latency sample: B's
     * average stays at its 20 ms (a 0 ms sample would have pulled it to 14) */
    {
        struct rt_result local = {200, RT_ERR_NONE, 0, NULL, 0, 0, 0, 1};
        struct rt_deployment_state st;

        assert_string_equal(pick_once(e, 41, 1000, &p1, &t1), "B");
        assert_int_equal(rt_router_report(e->router, &p1, &t1, &local, 1000, NULL), RT_STEP_DONE);
        rt_router_finish(e->router, &p1, 0, 1000);
        assert_int_equal(rt_router_deployment_state(e->router, t1.dep_index, 1000, &st), 0);
        assert_int_equal(st.latency_ewma_ms, 20);
    }
    env_free(e);
    /* simple-shuffle: weights 1:3, and the caller's random decides. */
    e = env_new(
        "model_list:\n"
        "  - {model_name: g, litellm_params: {model: a, weight: 1}, model_info: {id: A}}\n"
        "  - {model_name: g, litellm_params: {model: b, weight: 3}, model_info: {id: B}}\n");
    for (uint64_t rnd = 0; rnd < 4000; rnd++) {
        b += strcmp(pick_once(e, rnd * 0x9E3779B97F4A7C15ull + 1, 1000, &p1, &t1), "B") == 0;
        report_ok(e, &p1, &t1, 5, 1000);
    }
    assert_true(b > 2700 && b < 3300);
    /* Same random, same choice. */
    assert_string_equal(pick_once(e, 12345, 1000, &p1, &t1), pick_once(e, 12345, 1000, &p2, &t2));
    report_ok(e, &p1, &t1, 5, 1000);
    report_ok(e, &p2, &t2, 5, 1000);
    env_free(e);
    /* order: the lowest order is used while it is available. */
    e = env_new("model_list:\n"
                "  - {model_name: g, litellm_params: {model: a, order: 2}, model_info: {id: A}}\n"
                "  - {model_name: g, litellm_params: {model: b, order: 1, rpm: 2}, "
                "model_info: {id: B}}\n");
    assert_string_equal(pick_once(e, 1, 1000, &p1, &t1), "B");
    report_ok(e, &p1, &t1, 5, 1000);
    assert_string_equal(pick_once(e, 2, 1000, &p1, &t1), "B");
    report_ok(e, &p1, &t1, 5, 1000);
    assert_string_equal(pick_once(e, 3, 1000, &p1, &t1), "A"); /* B at its rpm */
    report_ok(e, &p1, &t1, 5, 1000);
    env_free(e);
}

/* Defect: a model_rpm_limit given under an alias name applied only when the client used that
 * alias; asking for the group by its own name bypassed the key's limit. */
static void test_key_model_limit_by_alias_applies_to_group(void **state)
{
    static const char *yaml =
        "model_list:\n"
        "  - {model_name: gpt-free, litellm_params: {model: z}, model_info: {id: free-1}}\n"
        "  - {model_name: gpt-fallback, litellm_params: {model: f}, model_info: {id: fb-1}}\n"
        "router_settings:\n"
        "  fallbacks: [{gpt-free: [gpt-fallback]}]\n"
        "  model_group_alias: {alias-free: gpt-free}\n"
        "tollgate:\n"
        "  keys:\n"
        "    - {key: sk-key-alias-limit, model_rpm_limit: {alias-free: 1}}\n"
        "    - {key: sk-key-alias-limit2, model_rpm_limit: {gpt-free: null, alias-free: 1}}\n";
    struct env *e = env_new(yaml);
    struct rt_plan plan;
    char trace[256];
    const struct rt_outcome *o;
    const struct rt_key *k = key_of(e, "sk-key-alias-limit");

    (void)state;
    o = run(e, &plan, k, "alias-free", 0, 1000, NULL, 0, trace, sizeof(trace));
    assert_string_equal(trace, "gpt-free");
    /* the group's own name is the same group: the key's limit holds, the fallback serves */
    o = run(e, &plan, k, "gpt-free", 0, 2000, NULL, 0, trace, sizeof(trace));
    assert_string_equal(trace, "gpt-fallback");
    assert_int_equal(o->status, 200);
    o = run(e, &plan, k, "gpt-free", 1, 2000, NULL, 0, trace, sizeof(trace));
    assert_int_equal(o->status, 429);
    assert_string_equal(o->message,
                        "Rate limit reached for gpt-free: model_rpm_limit 1, remaining 0");
    assert_int_equal(o->retry_after_s, 59);
    /* an entry without any limit under the group's own name does not hide the alias's */
    k = key_of(e, "sk-key-alias-limit2");
    o = run(e, &plan, k, "gpt-free", 0, 3000, NULL, 0, trace, sizeof(trace));
    assert_string_equal(trace, "gpt-free");
    o = run(e, &plan, k, "alias-free", 0, 4000, NULL, 0, trace, sizeof(trace));
    assert_string_equal(trace, "gpt-fallback");
    env_free(e);
}

/* Defect: a fallback group the key may use through an alias in its models list (the same name
 * that admits a direct request) was skipped as "not allowed". */
static void test_fallback_allowed_through_listed_alias(void **state)
{
    static const char *yaml =
        "model_list:\n"
        "  - {model_name: gpt-main, litellm_params: {model: m, rpm: 1}, model_info: {id: m-1}}\n"
        "  - {model_name: gpt-fallback, litellm_params: {model: f}, model_info: {id: fb-1}}\n"
        "  - {model_name: gpt-other, litellm_params: {model: o}, model_info: {id: o-1}}\n"
        "router_settings:\n"
        "  fallbacks: [{gpt-main: [gpt-other, gpt-fallback]}]\n"
        "  model_group_alias: {fb-alias: gpt-fallback}\n"
        "tollgate:\n"
        "  keys:\n"
        "    - {key: sk-key-via-alias, models: [gpt-main, fb-alias]}\n";
    struct env *e = env_new(yaml);
    struct rt_plan plan;
    char trace[256];
    const struct rt_outcome *o;
    const struct rt_key *k = key_of(e, "sk-key-via-alias");

    (void)state;
    run(e, &plan, k, "gpt-main", 0, 1000, NULL, 0, trace, sizeof(trace));
    assert_string_equal(trace, "gpt-main");
    /* gpt-other is not the key's: skipped; gpt-fallback is, through fb-alias */
    o = run(e, &plan, k, "gpt-main", 0, 2000, NULL, 0, trace, sizeof(trace));
    assert_string_equal(trace, "gpt-fallback");
    assert_int_equal(o->status, 200);
    assert_int_equal(rt_router_fallbacks(&plan), 1);
    /* a direct request for the group's own name is still refused: only listed names admit */
    assert_int_equal(rt_router_begin(e->router, k, "gpt-fallback", 0, 1, 2000, &plan), TG_EDENIED);
    rt_router_finish(e->router, &plan, 0, 2000);
    env_free(e);
}

/* Defect: a provider 429 without a retry-after header ended as a 429 without retry-after, so the
 * client had no wait to honour; 429s always carry one. */
static void test_upstream_429_without_retry_after_gets_one(void **state)
{
    static const char *yaml =
        "model_list:\n"
        "  - {model_name: gpt-main, litellm_params: {model: m}, model_info: {id: m-1}}\n"
        "  - {model_name: gpt-fallback, litellm_params: {model: f, rpm: 1}, model_info: {id: f-1}}\n"
        "  - {model_name: solo, litellm_params: {model: s}, model_info: {id: s-1}}\n"
        "router_settings:\n"
        "  num_retries: 1\n"
        "  allowed_fails: 1000\n"
        "  fallbacks: [{gpt-main: [gpt-fallback]}]\n";
    struct env *e = env_new(yaml);
    struct rt_plan plan;
    char trace[256];
    const struct rt_outcome *o;
    struct script sc429[] = {{"gpt-main", 429, RT_ERR_RATE_LIMIT, "slow down"},
                             {"solo", 429, RT_ERR_RATE_LIMIT, "slow down"}};

    (void)state;
    /* no fallback at all: the provider's 429 stands, with the default wait */
    o = run(e, &plan, NULL, "solo", 0, 1000, sc429, 2, trace, sizeof(trace));
    assert_string_equal(trace, "solo,solo");
    assert_int_equal(o->status, 429);
    assert_int_equal(o->from_upstream, 1);
    assert_int_equal(o->retry_after_s, 1);
    /* the fallback is at its rpm: the wait is until it frees */
    run(e, &plan, NULL, "gpt-fallback", 0, 5000, NULL, 0, trace, sizeof(trace));
    o = run(e, &plan, NULL, "gpt-main", 0, 7000, sc429, 2, trace, sizeof(trace));
    assert_string_equal(trace, "gpt-main,gpt-main");
    assert_int_equal(o->status, 429);
    assert_int_equal(o->retry_after_s, 58);
    env_free(e);
}

#define PRE_CALL_YAML(on)                                                                          \
        "model_list:\n"                                                                            \
        "  - {model_name: small, litellm_params: {model: openai/s1, input_cost_per_token: 1e-6},"  \
        " model_info: {id: s1, max_input_tokens: 1000}}\n"                                         \
        "  - {model_name: small, litellm_params: {model: openai/s2, input_cost_per_token: 1e-6},"  \
        " model_info: {id: s2, max_input_tokens: 1000}}\n"                                         \
        "  - {model_name: mixed, litellm_params: {model: openai/m1, input_cost_per_token: 1e-6},"  \
        " model_info: {id: m-small, max_input_tokens: 1000}}\n"                                    \
        "  - {model_name: mixed, litellm_params: {model: openai/m2, input_cost_per_token: 1e-6},"  \
        " model_info: {id: m-big, max_input_tokens: 100000}}\n"                                    \
        "  - {model_name: big, litellm_params: {model: openai/b1, input_cost_per_token: 1e-6},"    \
        " model_info: {id: b1, max_input_tokens: 200000}}\n"                                       \
        "  - {model_name: lone, litellm_params: {model: openai/l1, input_cost_per_token: 1e-6},"   \
        " model_info: {id: l1, max_input_tokens: 1000}}\n"                                         \
        "router_settings:\n"                                                                       \
        "  enable_pre_call_checks: " on "\n"                                                       \
        "  context_window_fallbacks: [{small: [big]}]\n"                                           \
        "  fallbacks: [{small: [lone]}]\n"

/* router_settings.enable_pre_call_checks: a deployment whose max_input_tokens the request's
 * estimate exceeds is skipped before sending; a group left with none goes to its
 * context_window_fallbacks; with nothing to try the answer is 400 context_length_exceeded. Off,
 * or without an estimate, nothing is skipped. */
static void test_pre_call_checks(void **state)
{
    struct env *e;
    struct rt_plan plan;
    struct rt_target t;
    const struct rt_outcome *o;

    (void)state;
    e = env_new(PRE_CALL_YAML("true"));
    /* fits: the group's own deployment */
    assert_int_equal(rt_router_begin(e->router, NULL, "small", 0, 1, 1000, &plan), 0);
    rt_router_set_input_tokens(&plan, 900);
    assert_true(rt_router_next(e->router, &plan, 1000, &t));
    assert_string_equal(t.group, "small");
    rt_router_finish(e->router, &plan, 0, 1000);
    /* too long for every deployment of small: its context-window fallback, not the general one */
    assert_int_equal(rt_router_begin(e->router, NULL, "small", 0, 1, 1000, &plan), 0);
    rt_router_set_input_tokens(&plan, 5000);
    assert_true(rt_router_next(e->router, &plan, 1000, &t));
    assert_string_equal(t.group, "big");
    assert_int_equal(t.is_fallback, 1);
    rt_router_finish(e->router, &plan, 0, 1000);
    /* a group with one deployment that fits: only that one is ever picked */
    for (uint64_t rnd = 1; rnd < 40; rnd++) {
        assert_int_equal(rt_router_begin(e->router, NULL, "mixed", 0, rnd, 1000, &plan), 0);
        rt_router_set_input_tokens(&plan, 5000);
        assert_true(rt_router_next(e->router, &plan, 1000, &t));
        assert_string_equal(t.dep->id, "m-big");
        rt_router_finish(e->router, &plan, 0, 1000);
    }
    /* nothing fits anywhere: 400 before any attempt */
    assert_int_equal(rt_router_begin(e->router, NULL, "lone", 0, 1, 1000, &plan), 0);
    rt_router_set_input_tokens(&plan, 5000);
    assert_false(rt_router_next(e->router, &plan, 1000, &t));
    o = rt_router_outcome(&plan);
    assert_int_equal(o->status, 400);
    assert_string_equal(o->error_class, "context_length_exceeded");
    assert_non_null(strstr(o->message, "about 5000 input tokens, more than the 1000"));
    assert_int_equal(rt_router_attempts(&plan), 0);
    rt_router_finish(e->router, &plan, 0, 1000);
    env_free(e);

    /* off: nothing skipped */
    e = env_new(PRE_CALL_YAML("false"));
    assert_int_equal(rt_router_begin(e->router, NULL, "lone", 0, 1, 1000, &plan), 0);
    rt_router_set_input_tokens(&plan, 5000);
    assert_true(rt_router_next(e->router, &plan, 1000, &t));
    assert_string_equal(t.group, "lone");
    rt_router_finish(e->router, &plan, 0, 1000);
    env_free(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unknown_and_not_allowed),
        cmocka_unit_test(test_many_groups),
        cmocka_unit_test(test_retry_moves_to_another_deployment),
        cmocka_unit_test(test_cooldown),
        cmocka_unit_test(test_cooldown_all_then_429),
        cmocka_unit_test(test_fallback_order_and_event),
        cmocka_unit_test(test_alias_then_fallback),
        cmocka_unit_test(test_key_level_fallbacks),
        cmocka_unit_test(test_allowlist_skip),
        cmocka_unit_test(test_allowlist_not_enforced),
        cmocka_unit_test(test_disable_fallbacks),
        cmocka_unit_test(test_context_window_and_content_policy),
        cmocka_unit_test(test_4xx_final),
        cmocka_unit_test(test_classify),
        cmocka_unit_test(test_auth_no_retry_fallbacks_apply),
        cmocka_unit_test(test_auth_cools_down),
        cmocka_unit_test(test_all_limited_429),
        cmocka_unit_test(test_limited_with_key_rules),
        cmocka_unit_test(test_key_model_limit_falls_back),
        cmocka_unit_test(test_key_limits_at_begin),
        cmocka_unit_test(test_team_limits),
        cmocka_unit_test(test_blocked_key_and_event_ids),
        cmocka_unit_test(test_attempts_bounded),
        cmocka_unit_test(test_concurrent_requests),
        cmocka_unit_test(test_strategies),
        cmocka_unit_test(test_key_model_limit_by_alias_applies_to_group),
        cmocka_unit_test(test_fallback_allowed_through_listed_alias),
        cmocka_unit_test(test_upstream_429_without_retry_after_gets_one),
        cmocka_unit_test(test_pre_call_checks),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
