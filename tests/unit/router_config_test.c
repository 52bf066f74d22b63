/* config: LiteLLM-shaped YAML, os.environ values, exact diagnostics with file:line. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "config.h"
#include "tg_units.h"
#include "providers/provider.h"
#include "tg_err.h"
#include "tg_log.h"
#include "tg_redis_url.h"

static struct rt_config_diag diag;

static struct rt_config *load(const char *text)
{
    return rt_config_load_buffer("router.yaml", text, strlen(text), &diag);
}

/* The load must fail with exactly this message. */
static void expect_error(const char *text, const char *message)
{
    struct rt_config *cfg = load(text);

    if (cfg != NULL) {
        rt_config_destroy(&cfg);
        fail_msg("config loaded, expected: %s", message);
    }
    if (strcmp(diag.error, message) != 0)
        fail_msg("got      \"%s\"\nexpected \"%s\"", diag.error, message);
}

/* Warnings of the last load other than those of deployments without a price (their own tests
 * are in router_prices_test): they come last, after every warning of the file itself. */
static uint32_t warnings_besides_prices(void)
{
    uint32_t n = 0;

    for (uint32_t i = 0; i < diag.n_warnings; i++) {
        if (strstr(diag.warnings[i], ": no price for \"") == NULL) {
            assert_int_equal(n, i); /* none after a price warning */
            n++;
        }
    }
    return n;
}

#define HEAD "model_list:\n  - model_name: a\n    litellm_params:\n      model: openai/x\n"

static int setup(void **state)
{
    (void)state;
    tg_log_set_level(TG_LOG_OFF);
    setenv("RT_TEST_OPENAI_KEY", "sk-test-openai-0001", 1);
    setenv("RT_TEST_ANTHROPIC_KEY", "sk-ant-test-0002", 1);
    setenv("RT_TEST_MASTER_KEY", "sk-master-0003", 1);
    setenv("RT_TEST_DEMO_KEY", "sk-demo-key-0004", 1);
    unsetenv("RT_TEST_MISSING_VAR");
    /* the provider variables the tests below set: none may come from the environment */
    for (size_t i = 0; i < rt_provider_count(); i++) {
        const struct rt_provider *p = rt_provider_at(i);

        for (size_t j = 0; p->key_env != NULL && p->key_env[j] != NULL; j++)
            unsetenv(p->key_env[j]);
        for (size_t j = 0; p->base_env != NULL && p->base_env[j] != NULL; j++)
            unsetenv(p->base_env[j]);
    }
    return 0;
}

static void test_full_file(void **state)
{
    char path[1024];
    const char *src = getenv("TG_SOURCE_DIR");
    struct rt_config *cfg;
    const struct rt_deployment_conf *d;
    const struct rt_key_spec *k;
    char hex[TG_SHA256_HEX_LEN + 1];
    const char *secrets[8];

    (void)state;
    snprintf(path, sizeof(path), "%s/tests/unit/data/router/full.yaml",
             src != NULL ? src : "../..");
    cfg = rt_config_load_file(path, &diag);
    if (cfg == NULL)
        fail_msg("load failed: %s", diag.error);
    assert_int_equal(cfg->n_deployments, 4);
    d = &cfg->deployments[0];
    assert_string_equal(d->id, "main-1");
    assert_string_equal(d->group, "gpt-main");
    assert_string_equal(d->provider, "openai");
    assert_ptr_equal(d->prov, &rt_provider_openai);
    assert_string_equal(d->model, "gpt-5.4-nano");
    assert_string_equal(d->api_base, "http://127.0.0.1:9100/v1");
    assert_string_equal(d->api_key, "sk-test-openai-0001");
    assert_int_equal(d->rpm, 1);
    assert_int_equal(d->tpm, 100000);
    assert_int_equal(d->timeout_ms, 30000);
    assert_int_equal(d->stream_timeout_ms, 12500);
    assert_int_equal(d->weight, 3);
    assert_int_equal(d->order, 1);
    assert_int_equal(d->price.input, 50000000);
    assert_int_equal(d->price.output, 400000000);
    /* Second deployment: generated id, router_settings.timeout as default. */
    d = &cfg->deployments[1];
    assert_string_equal(d->id, "gpt-main-1");
    assert_int_equal(d->rpm, RT_LIMIT_NONE);
    assert_int_equal(d->timeout_ms, 45000);
    assert_int_equal(d->stream_timeout_ms, 45000);
    assert_int_equal(d->weight, 1);
    assert_ptr_equal(cfg->deployments[2].prov, &rt_provider_anthropic);
    assert_string_equal(cfg->deployments[2].provider, "anthropic");
    /* the claude key stays for Anthropic's own host (no api_base: the default) */
    assert_string_equal(cfg->deployments[2].api_base, "https://api.anthropic.com");
    assert_string_equal(cfg->deployments[2].api_key, "sk-ant-test-0002");
    /* an unknown prefix with api_base: a generic OpenAI-compatible server */
    assert_string_equal(cfg->deployments[3].provider, "my_gateway");
    assert_ptr_equal(cfg->deployments[3].prov, &rt_provider_openai);
    assert_string_equal(cfg->deployments[3].api_base, "http://127.0.0.1:9102");
    assert_string_equal(cfg->deployments[3].api_key, "");
    assert_int_equal(rt_config_find_deployment(cfg, "big-1"), 3);
    assert_int_equal(rt_config_find_deployment(cfg, "nope"), -1);
    assert_true(rt_config_has_group(cfg, "gpt-big"));

    assert_int_equal(cfg->routing_strategy, RT_STRATEGY_LEAST_BUSY);
    assert_int_equal(cfg->num_retries, 3);
    assert_int_equal(cfg->retry_after_s, 2);
    assert_int_equal(cfg->allowed_fails, 2);
    assert_int_equal(cfg->cooldown_s, 30);
    assert_int_equal(cfg->timeout_ms, 45000);
    assert_int_equal(cfg->enforce_fallback_model_access, 0);
    assert_int_equal(cfg->n_fallbacks, 1);
    assert_string_equal(cfg->fallbacks[0].group, "gpt-main");
    assert_int_equal(cfg->fallbacks[0].n_targets, 2);
    assert_string_equal(cfg->fallbacks[0].targets[1], "gpt-big");
    assert_int_equal(cfg->n_cw_fallbacks, 1);
    assert_string_equal(cfg->cw_fallbacks[0].targets[0], "gpt-big");
    assert_int_equal(cfg->n_cp_fallbacks, 1);
    assert_int_equal(cfg->n_default_fallbacks, 1);
    assert_string_equal(cfg->default_fallbacks[0], "gpt-fallback");
    assert_int_equal(cfg->n_aliases, 2);
    assert_string_equal(cfg->aliases[1].alias, "hidden-main");
    assert_string_equal(cfg->aliases[1].group, "gpt-main");
    assert_int_equal(cfg->aliases[1].hidden, 1);
    assert_int_equal(cfg->aliases[0].hidden, 0);
    assert_string_equal(cfg->master_key, "sk-master-0003");

    assert_string_equal(cfg->listen, "127.0.0.1:4100");
    assert_int_equal(cfg->threads, 4);
    assert_string_equal(cfg->kafka_brokers, "127.0.0.1:19092");
    assert_string_equal(cfg->events_topic, "ev.v1");
    assert_string_equal(cfg->control_topic, "ctl.v1");
    assert_string_equal(cfg->spool_dir, "/tmp/tollgate-spool");
    assert_int_equal(cfg->spool_max_bytes, 2097152);
    assert_int_equal(cfg->spool_segment_bytes, 1048576);
    assert_int_equal(cfg->spool_full_policy, RT_SPOOL_FULL_REJECT);
    assert_int_equal(cfg->spool_fsync, RT_SPOOL_FSYNC_INTERVAL);
    assert_int_equal(cfg->spool_fsync_interval_ms, 50);
    assert_int_equal(cfg->max_body_bytes, 1048576);
    assert_int_equal(cfg->max_connections, 100);
    assert_int_equal(cfg->max_in_flight, 64);
    assert_int_equal(cfg->max_response_bytes, 2097152);
    assert_int_equal(cfg->max_keys, 10);
    assert_int_equal(cfg->limiter_keys, 32);

    assert_int_equal(cfg->n_keys, 2);
    k = &cfg->keys[0];
    tg_sha256_hex("sk-demo-key-0004", strlen("sk-demo-key-0004"), hex);
    assert_string_equal(k->key_hash, hex);
    assert_string_equal(k->key_alias, "demo");
    assert_string_equal(k->team_id, "team-a");
    assert_string_equal(k->user_id, "user-1");
    assert_int_equal(k->n_models, 2);
    assert_string_equal(k->models[1], "alias-main");
    assert_int_equal(k->max_budget_nusd, 12500000000LL);
    assert_int_equal(k->budget_duration_s, 30 * 86400);
    assert_int_equal(k->rpm_limit, 100);
    assert_int_equal(k->tpm_limit, 5000);
    assert_int_equal(k->max_parallel_requests, 4);
    assert_int_equal(k->n_model_limits, 2);
    assert_string_equal(k->model_limits[0].group, "gpt-main");
    assert_int_equal(k->model_limits[0].rpm, 60);
    assert_int_equal(k->model_limits[0].tpm, 1000);
    assert_int_equal(k->model_limits[1].rpm, RT_LIMIT_NONE);
    assert_int_equal(k->model_limits[1].tpm, 2000);
    assert_int_equal(k->disable_fallbacks, 1);
    assert_int_equal(k->n_tags, 2);
    assert_string_equal(k->tags[1], "web");
    assert_int_equal(k->has_fallbacks, 1);
    assert_int_equal(k->n_fallbacks, 0);
    assert_int_equal(k->n_aliases, 1);
    assert_string_equal(k->aliases[0].alias, "m");
    assert_int_equal(k->num_retries, 0);
    /* fallbacks: null falls through to the global list. */
    assert_int_equal(cfg->keys[1].has_fallbacks, 0);
    assert_int_equal(cfg->keys[1].num_retries, -1);
    assert_int_equal(cfg->keys[1].rpm_limit, RT_LIMIT_NONE);

    /* router_settings.redis_host (LiteLLM's multi-instance rate limiting): tollgate.redis */
    assert_int_equal(cfg->redis.enabled, 1);
    assert_string_equal(cfg->redis.host, "localhost");
    assert_int_equal(cfg->redis.port, 6379);
    assert_int_equal(cfg->redis.sync_interval_ms, 100);

    /* Unknown LiteLLM keys: one warning each, with file:line; then one per deployment without
     * a price. */
    assert_int_equal(diag.n_warnings, 6);
    assert_non_null(strstr(diag.warnings[4], "full.yaml:24: model_list[2] (gpt-fallback-2): no "
                                             "price for \"anthropic/claude-x\" in the price maps"));
    assert_non_null(strstr(diag.warnings[5], "full.yaml:28: model_list[3] (big-1): no price for "
                                             "\"my_gateway/gpt-big-deploy\""));
    assert_non_null(strstr(diag.warnings[0], "full.yaml:16: "
                                             "model_list[0].litellm_params.api_version: not used "
                                             "by provider \"openai\", ignored"));
    assert_non_null(strstr(diag.warnings[1], "full.yaml:19: model_list[0].model_info.mode: "));
    assert_non_null(strstr(diag.warnings[2], "full.yaml:51: litellm_settings.drop_params: "
                                             "unknown key, ignored"));
    assert_non_null(strstr(diag.warnings[3], "full.yaml:49: general_settings.database_url: "
                                             "unknown key"));
    assert_string_equal(diag.error, "");

    assert_int_equal(rt_config_secrets(cfg, secrets, 8), 3);
    assert_string_equal(secrets[0], "sk-master-0003");
    assert_int_equal(rt_config_secrets(cfg, secrets, 1), 3);
    rt_config_destroy(&cfg);
    assert_null(cfg);
    rt_config_destroy(&cfg);
}

static void test_defaults(void **state)
{
    char path[1024];
    const char *src = getenv("TG_SOURCE_DIR");
    struct rt_config *cfg;

    (void)state;
    snprintf(path, sizeof(path), "%s/tests/unit/data/router/minimal.yaml",
             src != NULL ? src : "../..");
    cfg = rt_config_load_file(path, &diag);
    if (cfg == NULL)
        fail_msg("load failed: %s", diag.error);
    assert_string_equal(cfg->deployments[0].provider, "openai");
    assert_string_equal(cfg->deployments[0].model, "gpt-4o-mini");
    assert_string_equal(cfg->deployments[0].id, "m-0");
    assert_int_equal(cfg->deployments[0].timeout_ms, RT_DEFAULT_TIMEOUT_MS);
    assert_int_equal(cfg->routing_strategy, RT_STRATEGY_SIMPLE_SHUFFLE);
    assert_int_equal(cfg->num_retries, RT_DEFAULT_NUM_RETRIES);
    assert_int_equal(cfg->allowed_fails, RT_DEFAULT_ALLOWED_FAILS);
    assert_int_equal(cfg->cooldown_s, RT_DEFAULT_COOLDOWN_S);
    assert_int_equal(cfg->enforce_fallback_model_access, 1);
    assert_string_equal(cfg->listen, "0.0.0.0:4000");
    assert_int_equal(cfg->spool_max_bytes, 1024ull * 1024 * 1024);
    assert_int_equal(cfg->spool_segment_bytes, 0); /* the publisher's default */
    assert_int_equal(cfg->max_body_bytes, 10ull * 1024 * 1024);
    assert_int_equal(cfg->max_connections, 10000);
    assert_int_equal(cfg->max_in_flight, 4096);
    assert_int_equal(cfg->max_response_bytes, 64ull * 1024 * 1024);
    assert_int_equal(cfg->threads, 2);
    assert_int_equal(cfg->max_keys, 100000);
    assert_int_equal(cfg->max_teams, 10000);
    assert_string_equal(cfg->events_topic, "tollgate.events.v1");
    assert_int_equal(diag.n_warnings, 0);
    rt_config_destroy(&cfg);

    cfg = rt_config_load_file("/nonexistent/router.yaml", &diag);
    assert_null(cfg);
    assert_non_null(strstr(diag.error, "/nonexistent/router.yaml:0: cannot open"));
}

static void test_errors(void **state)
{
    char longname[200];
    char text[1024];

    (void)state;
    expect_error(HEAD "      rpm: -1\n",
                 "router.yaml:5: model_list[0].litellm_params.rpm: expected a non-negative "
                 "integer");
    expect_error(HEAD "  - model_name: b\n    litellm_params:\n      model: openai/y\n"
                      "      tpm: lots\n",
                 "router.yaml:8: model_list[1].litellm_params.tpm: expected a non-negative "
                 "integer");
    expect_error(HEAD "      api_key: os.environ/RT_TEST_MISSING_VAR\n",
                 "router.yaml:5: model_list[0].litellm_params.api_key: environment variable "
                 "RT_TEST_MISSING_VAR is not set");
    expect_error(HEAD "tollgate:\n  bogus: 1\n", "router.yaml:6: tollgate.bogus: unknown key");
    expect_error(HEAD "tollgate:\n  limits:\n    max_body: 1\n",
                 "router.yaml:7: tollgate.limits.max_body: unknown key");
    expect_error(HEAD "tollgate:\n  listen: nowhere\n",
                 "router.yaml:6: tollgate.listen: expected host:port");
    expect_error(HEAD "tollgate:\n  spool: {segment_bytes: 65536}\n",
                 "router.yaml:6: tollgate.spool.segment_bytes: expected at least 1048576 bytes");
    expect_error(HEAD "tollgate:\n  spool:\n    max_bytes: 2097152\n    segment_bytes: 4194304\n",
                 "router.yaml:8: tollgate.spool.segment_bytes: larger than spool.max_bytes "
                 "(2097152)");
    expect_error(HEAD "router_settings:\n  fallbacks: [{a: [nope]}]\n",
                 "router.yaml:6: router_settings.fallbacks[0].a[0]: unknown model group \"nope\" "
                 "(no model_list entry has it)");
    expect_error(HEAD "router_settings:\n  fallbacks: [{zz: [a]}]\n",
                 "router.yaml:6: router_settings.fallbacks[0].zz: unknown model group \"zz\" "
                 "(no model_list entry has it)");
    expect_error(HEAD "router_settings:\n  model_group_alias: {x: nope}\n",
                 "router.yaml:6: router_settings.model_group_alias.x: unknown model group "
                 "\"nope\" (no model_list entry has it)");
    expect_error(HEAD "router_settings:\n  enforce_fallback_model_access: maybe\n",
                 "router.yaml:6: router_settings.enforce_fallback_model_access: expected true or "
                 "false");
    expect_error(HEAD "    model_info: {id: x}\n  - model_name: b\n    litellm_params: {model: "
                      "y}\n    model_info: {id: x}\n",
                 "router.yaml:6: model_list[1].model_info.id: duplicate id \"x\" (also at line "
                 "2)");
    expect_error(HEAD "      input_cost_per_token: cheap\n",
                 "router.yaml:5: model_list[0].litellm_params.input_cost_per_token: expected a "
                 "non-negative decimal number (USD)");
    expect_error("model_list:\n  - litellm_params: {model: x}\n",
                 "router.yaml:2: model_list[0].model_name: missing");
    expect_error("model_list:\n  - model_name: a\n",
                 "router.yaml:2: model_list[0].litellm_params: missing");
    expect_error("router_settings: {}\n", "router.yaml:1: model_list: missing (at least one "
                                          "deployment is needed)");
    expect_error("model_list: [\n", "router.yaml:2: YAML syntax error: did not find expected "
                                    "node content");
    expect_error(HEAD "tollgate:\n  keys:\n    - {key: sk-abcdefgh, colour: red}\n",
                 "router.yaml:7: tollgate.keys[0].colour: unknown key");
    expect_error(HEAD "tollgate:\n  keys:\n    - {key: sk-abcdefgh, models: [zz]}\n",
                 "router.yaml:7: tollgate.keys[0].models[0]: unknown model group or alias "
                 "\"zz\"");
    expect_error(HEAD "tollgate:\n  keys:\n    - {key: sk-abcdefgh}\n    - {key: sk-abcdefgh}\n",
                 "router.yaml:8: tollgate.keys[1]: duplicate key (same value as tollgate.keys[0])");
    expect_error(HEAD "tollgate:\n  keys:\n    - {key: short}\n",
                 "router.yaml:7: tollgate.keys[0].key: key must be 8..511 bytes");
    expect_error(HEAD "tollgate:\n  keys:\n    - {key: sk-abcdefgh, router_settings: {fallbacks: "
                      "[{a: [zz]}]}}\n",
                 "router.yaml:7: tollgate.keys[0].router_settings.fallbacks[0].a[0]: unknown "
                 "model group \"zz\" (no model_list entry has it)");
    expect_error(HEAD "tollgate:\n  limits: {max_keys: 1}\n  keys:\n    - {key: sk-abcdefgh}\n"
                      "    - {key: sk-abcdefgi}\n",
                 "router.yaml:6: tollgate.keys: more static keys (2) than limits.max_keys (1)");
    /* Over-cap strings are errors, never truncated. */
    memset(longname, 'n', 199);
    longname[199] = '\0';
    snprintf(text, sizeof(text),
             "model_list:\n  - model_name: %s\n    litellm_params: {model: x}\n", longname);
    expect_error(text, "router.yaml:2: model_list[0].model_name: value too long (199 bytes, max "
                       "128)");
}

static void test_litellm_settings_routing_keys(void **state)
{
    struct rt_config *cfg = load("model_list:\n"
                                 "  - {model_name: a, litellm_params: {model: x}}\n"
                                 "  - {model_name: b, litellm_params: {model: y, timeout: 3}}\n"
                                 "litellm_settings:\n"
                                 "  num_retries: 4\n"
                                 "  request_timeout: 20\n"
                                 "  fallbacks: [{a: [b]}]\n"
                                 "  context_window_fallbacks: [{a: [b]}]\n"
                                 "  set_verbose: true\n");

    (void)state;
    if (cfg == NULL)
        fail_msg("%s", diag.error);
    assert_int_equal(cfg->num_retries, 4);
    assert_int_equal(cfg->deployments[0].timeout_ms, 20000);
    assert_int_equal(cfg->deployments[1].timeout_ms, 3000);
    assert_int_equal(cfg->n_fallbacks, 1);
    assert_int_equal(cfg->n_cw_fallbacks, 1);
    assert_int_equal(diag.n_warnings, 3); /* and x, y have no price */
    assert_string_equal(diag.warnings[0],
                        "router.yaml:9: litellm_settings.set_verbose: unknown key, ignored");
    assert_non_null(strstr(diag.warnings[1], "no price for \"openai/x\""));
    assert_non_null(strstr(diag.warnings[2], "no price for \"openai/y\""));
    rt_config_destroy(&cfg);
    /* router_settings wins over litellm_settings. */
    cfg = load("model_list:\n"
               "  - {model_name: a, litellm_params: {model: x}}\n"
               "  - {model_name: b, litellm_params: {model: y}}\n"
               "router_settings: {fallbacks: [], num_retries: 1}\n"
               "litellm_settings: {fallbacks: [{a: [b]}], num_retries: 4}\n");
    assert_non_null(cfg);
    assert_int_equal(cfg->num_retries, 1);
    assert_int_equal(cfg->n_fallbacks, 0);
    rt_config_destroy(&cfg);
    /* LiteLLM's budget time zone: an IANA name with a zone file, else an error naming it */
    cfg = load(HEAD "litellm_settings: {timezone: Europe/Berlin}\n");
    assert_non_null(cfg);
    assert_string_equal(cfg->timezone, "Europe/Berlin");
    rt_config_destroy(&cfg);
    expect_error(HEAD "litellm_settings:\n  timezone: Mars/Olympus_Mons\n",
                 "router.yaml:6: litellm_settings.timezone: no time zone \"Mars/Olympus_Mons\" (no "
                 "/usr/share/zoneinfo/Mars/Olympus_Mons; is tzdata installed?)");
    expect_error(HEAD "litellm_settings:\n  timezone: ../../etc/passwd\n",
                 "router.yaml:6: litellm_settings.timezone: \"../../etc/passwd\" is not a time zone "
                 "name like Europe/Berlin");
}

static void test_unsupported_strategy_warns(void **state)
{
    struct rt_config *cfg =
        load(HEAD "router_settings:\n  routing_strategy: usage-based-routing\n");

    (void)state;
    assert_non_null(cfg);
    assert_int_equal(cfg->routing_strategy, RT_STRATEGY_SIMPLE_SHUFFLE);
    assert_int_equal(diag.n_warnings, 2); /* and openai/x has no price */
    assert_non_null(strstr(diag.warnings[1], "router.yaml:2: model_list[0] (a-0): no price for "
                                             "\"openai/x\""));
    assert_string_equal(diag.warnings[0],
                        "router.yaml:6: router_settings.routing_strategy: unsupported strategy "
                        "\"usage-based-routing\", using simple-shuffle (supported: "
                        "simple-shuffle, least-busy, latency-based-routing)");
    rt_config_destroy(&cfg);
}

static void test_cooldown_zero_disables(void **state)
{
    struct rt_config *cfg = load(HEAD "router_settings: {cooldown_time: 0}\n");

    (void)state;
    assert_non_null(cfg);
    assert_int_equal(cfg->cooldown_s, 0);
    rt_config_destroy(&cfg);
    /* rpm/tpm beside model_name (older LiteLLM configs); litellm_params wins. */
    cfg = load("model_list:\n  - model_name: a\n    rpm: 7\n    tpm: 70\n"
               "    litellm_params: {model: x, tpm: 5}\n");
    assert_non_null(cfg);
    assert_int_equal(cfg->deployments[0].rpm, 7);
    assert_int_equal(cfg->deployments[0].tpm, 5);
    rt_config_destroy(&cfg);
    cfg = load(HEAD "router_settings: {cooldown_time: 1.5}\n");
    assert_non_null(cfg);
    assert_int_equal(cfg->cooldown_s, 2);
    rt_config_destroy(&cfg);
    expect_error(HEAD "router_settings: {cooldown_time: soon}\n",
                 "router.yaml:5: router_settings.cooldown_time: expected a number of seconds");
}

static void test_warnings_are_not_errors(void **state)
{
    struct rt_config *cfg = load(HEAD "    extra: 1\nrouter_settings:\n  cache: true\n");

    (void)state;
    assert_non_null(cfg);
    assert_int_equal(diag.n_warnings, 3); /* and openai/x has no price */
    assert_non_null(strstr(diag.warnings[2], "no price for \"openai/x\""));
    assert_string_equal(diag.warnings[0], "router.yaml:5: model_list[0].extra: unknown key, "
                                          "ignored");
    assert_string_equal(diag.warnings[1], "router.yaml:7: router_settings.cache: unknown key, "
                                          "ignored");
    rt_config_destroy(&cfg);
}

static void test_money_and_durations(void **state)
{
    int64_t v = -1;

    (void)state;
    assert_int_equal(tg_parse_usd_fusd("0.00000005", &v), 0);
    assert_int_equal(v, 50000000);
    assert_int_equal(tg_parse_usd_fusd("4e-7", &v), 0);
    assert_int_equal(v, 400000000);
    assert_int_equal(tg_parse_usd_fusd("1.5E-06", &v), 0);
    assert_int_equal(v, 1500000000);
    assert_int_equal(tg_parse_usd_fusd("3", &v), 0);
    assert_int_equal(v, 3000000000000000LL);
    assert_int_equal(tg_parse_usd_fusd("0.0000000000000005", &v), 0);
    assert_int_equal(v, 1); /* half-up at the 15th decimal */
    assert_int_equal(tg_parse_usd_fusd("0.0000000000000004", &v), 0);
    assert_int_equal(v, 0);
    assert_int_equal(tg_parse_usd_fusd("0.000000000000000049999", &v), 0);
    assert_int_equal(v, 0);
    assert_int_equal(tg_parse_usd_fusd("-1", &v), TG_EINVAL);
    assert_int_equal(tg_parse_usd_fusd("1e30", &v), TG_ERANGE);
    assert_int_equal(tg_parse_usd_fusd("1e", &v), TG_EINVAL);
    assert_int_equal(tg_parse_usd_fusd(".", &v), TG_EINVAL);
    assert_int_equal(tg_parse_duration_s("30d", &v), 0);
    assert_int_equal(v, 2592000);
    assert_int_equal(tg_parse_duration_s("10m", &v), 0);
    assert_int_equal(v, 600);
    assert_int_equal(tg_parse_duration_s("1mo", &v), 0);
    assert_int_equal(v, 2592000);
    assert_int_equal(tg_parse_duration_s("45", &v), 0);
    assert_int_equal(v, 45);
    assert_int_equal(tg_parse_duration_s("1y", &v), TG_EINVAL);
    assert_int_equal(tg_parse_duration_s("h", &v), TG_EINVAL);
}

/* Byte mutations of a valid file: every load either succeeds or fails with a located message;
 * nothing crashes or leaks (ASan). Bounded: 3,000 mutants. */
static void test_mutations(void **state)
{
    char path[1024];
    const char *src = getenv("TG_SOURCE_DIR");
    static char base[8192], buf[8192];
    size_t n;
    FILE *f;
    uint64_t x = 0x2545F4914F6CDD1Dull;
    static const char repl[] = " :-[]{}\n#&*!|>'\"%@`,?0a\x01\xff";

    (void)state;
    snprintf(path, sizeof(path), "%s/tests/unit/data/router/full.yaml",
             src != NULL ? src : "../..");
    f = fopen(path, "rb");
    assert_non_null(f);
    n = fread(base, 1, sizeof(base), f);
    fclose(f);
    assert_true(n > 100 && n < sizeof(base));
    for (int iter = 0; iter < 3000; iter++) {
        struct rt_config *cfg;
        int flips;

        memcpy(buf, base, n);
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        flips = 1 + (int)(x % 4);
        for (int k = 0; k < flips; k++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            buf[(x >> 8) % n] = repl[(x >> 40) % (sizeof(repl) - 1)];
        }
        cfg = rt_config_load_buffer("router.yaml", buf, n, &diag);
        if (cfg == NULL)
            assert_int_equal(strncmp(diag.error, "router.yaml:", 12), 0);
        else
            assert_string_equal(diag.error, "");
        rt_config_destroy(&cfg);
    }
}

/* Defect: a static key's models list could not name the key's own alias; it now may, in either
 * order of models and router_settings; anything else unknown is still an error with its line. */
/* config_values_with_crlf_reached_the_wire: a control byte in any value is an error naming
 * the key — a secret from the environment with a trailing newline (a Kubernetes secret made
 * with echo), a CR/LF or NUL escaped in YAML — never cut, never passed on. */
static void test_control_bytes_in_values(void **state)
{
    (void)state;
    setenv("RT_TEST_NL_KEY", "sk-with-newline\n", 1);
    setenv("RT_TEST_CRLF_BASE", "http://10.0.0.1\r\nX-Evil: 1", 1);
    expect_error(HEAD "      api_key: os.environ/RT_TEST_NL_KEY\n",
                 "router.yaml:5: model_list[0].litellm_params.api_key: the value of environment "
                 "variable RT_TEST_NL_KEY contains a control character (0x0a at byte 15: a "
                 "trailing newline in the secret?)");
    expect_error(HEAD "      api_base: os.environ/RT_TEST_CRLF_BASE\n",
                 "router.yaml:5: model_list[0].litellm_params.api_base: the value of environment "
                 "variable RT_TEST_CRLF_BASE contains a control character (0x0d at byte 15)");
    expect_error(HEAD "      api_key: \"sk-a\\r\\nb\"\n",
                 "router.yaml:5: model_list[0].litellm_params.api_key: contains a control "
                 "character (0x0d at byte 4)");
    expect_error(HEAD "      api_key: \"sk-a\\0b\"\n",
                 "router.yaml:5: model_list[0].litellm_params.api_key: contains a NUL byte");
    expect_error(HEAD "general_settings:\n  master_key: \"sk-m\\tx\"\n",
                 "router.yaml:6: general_settings.master_key: contains a control character (0x09 "
                 "at byte 4)");
    unsetenv("RT_TEST_NL_KEY");
    unsetenv("RT_TEST_CRLF_BASE");
}

/* duplicate_key_overflowed_key_arrays: a key given twice in one mapping (YAML keeps both) used
 * to leak the first alias table, overflow the static keys array, a key's models and its tags;
 * now every mapping refuses a duplicate key, naming it and its line. */
static void test_duplicate_keys(void **state)
{
    (void)state;
    expect_error(HEAD
                 "router_settings:\n  model_group_alias: {b: a}\n  model_group_alias: {c: a}\n",
                 "router.yaml:7: model_group_alias: duplicate key (given twice in one mapping)");
    expect_error(HEAD "tollgate:\n  keys:\n    - key: sk-first-key-000001\n  keys:\n"
                      "    - key: sk-second-key-00002\n",
                 "router.yaml:8: keys: duplicate key (given twice in one mapping)");
    expect_error(HEAD "tollgate:\n  keys:\n    - key: sk-dup-models-key\n      models: [a]\n"
                      "      models: [a]\n",
                 "router.yaml:9: models: duplicate key (given twice in one mapping)");
    expect_error(HEAD "tollgate:\n  keys:\n    - key: sk-dup-tags-key-01\n      metadata:\n"
                      "        tags: [t]\n        tags: [u]\n",
                 "router.yaml:10: tags: duplicate key (given twice in one mapping)");
    expect_error(HEAD "      api_key: a\n      api_key: b\n",
                 "router.yaml:6: api_key: duplicate key (given twice in one mapping)");
}

/* open_mode_failed_open: no master key and no key is refused unless allow_unauthenticated says
 * so by name. */
static void test_fail_closed(void **state)
{
    struct rt_config *cfg;
    char err[512] = "";

    (void)state;
    cfg = load(HEAD);
    assert_non_null(cfg);
    assert_int_equal(cfg->allow_unauthenticated, 0);
    assert_int_equal(rt_config_check_auth(cfg, err, sizeof(err)), TG_ECONFIG);
    assert_string_equal(err, "router.yaml: general_settings.master_key: no master key and no keys "
                             "(tollgate.keys): every request would be served without "
                             "authentication; set a master_key, add keys, or set "
                             "tollgate.allow_unauthenticated: true to serve without keys on "
                             "purpose");
    rt_config_destroy(&cfg);
    cfg = load(HEAD "tollgate:\n  allow_unauthenticated: true\n");
    assert_non_null(cfg);
    assert_int_equal(cfg->allow_unauthenticated, 1);
    assert_int_equal(rt_config_check_auth(cfg, err, sizeof(err)), 0);
    rt_config_destroy(&cfg);
    cfg = load(HEAD "general_settings:\n  master_key: os.environ/RT_TEST_MASTER_KEY\n");
    assert_non_null(cfg);
    assert_int_equal(rt_config_check_auth(cfg, err, sizeof(err)), 0);
    rt_config_destroy(&cfg);
    cfg = load(HEAD "tollgate:\n  keys:\n    - {key: os.environ/RT_TEST_DEMO_KEY}\n");
    assert_non_null(cfg);
    assert_int_equal(rt_config_check_auth(cfg, err, sizeof(err)), 0);
    rt_config_destroy(&cfg);
    expect_error(HEAD "tollgate:\n  allow_unauthenticated: maybe\n",
                 "router.yaml:6: tollgate.allow_unauthenticated: expected true or false");
}

/* Fail closed: a prefix Tollgate does not know needs api_base; one it knows for another API is
 * refused; every named provider goes to its own default host. */
static void test_provider_prefixes(void **state)
{
    struct rt_config *cfg;

    (void)state;
    /* model_info.supported_endpoints (LiteLLM's): /v1/responses as sent, not through chat */
    cfg = load("model_list:\n  - model_name: a\n    litellm_params: {model: groq/m, api_key: k}\n"
               "    model_info: {supported_endpoints: [/v1/chat/completions, /v1/responses]}\n"
               "  - model_name: b\n    litellm_params: {model: groq/m, api_key: k}\n"
               "    model_info: {supported_endpoints: [/v1/chat/completions]}\n");
    assert_non_null(cfg);
    assert_int_equal(cfg->deployments[0].responses_native, 1);
    assert_int_equal(cfg->deployments[1].responses_native, 0);
    rt_config_destroy(&cfg);
    expect_error("model_list:\n  - model_name: a\n    litellm_params: {model: groq/m, api_key: k}\n"
                 "    model_info: {supported_endpoints: /v1/responses}\n",
                 "router.yaml:4: model_list[0].model_info.supported_endpoints: expected a "
                 "list");
    expect_error("model_list:\n  - model_name: a\n    litellm_params:\n      model: x/m\n"
                 "      api_key: sk-x\n",
                 "router.yaml:4: model_list[0].litellm_params.model: unknown provider \"x\"; set "
                 "api_base or use openai/ for an OpenAI-compatible server");
    expect_error("model_list:\n  - model_name: a\n    litellm_params:\n      model: sagemaker/m\n"
                 "      api_base: http://127.0.0.1:9/\n",
                 "router.yaml:4: model_list[0].litellm_params.model: provider \"sagemaker\" is "
                 "not supported by Tollgate yet (README: Providers)");
    expect_error("model_list:\n  - model_name: a\n    litellm_params:\n"
                 "      model: hosted_vllm/m\n",
                 "router.yaml:4: model_list[0].litellm_params.model: provider \"hosted_vllm\" has "
                 "no default base URL: set api_base or HOSTED_VLLM_API_BASE");
    /* api_base before or after model: the same */
    cfg = load("model_list:\n  - model_name: a\n    litellm_params:\n"
               "      api_base: http://10.0.0.2:8000/v1/\n      model: x/m\n");
    assert_non_null(cfg);
    assert_ptr_equal(cfg->deployments[0].prov, &rt_provider_openai);
    assert_string_equal(cfg->deployments[0].provider, "x");
    rt_config_destroy(&cfg);
    /* every row: its own default host, its prefix stripped from the model */
    for (size_t i = 0; i < rt_provider_count(); i++) {
        const struct rt_provider *p = rt_provider_at(i);
        char text[512];

        if (p->default_base == NULL)
            continue;
        snprintf(text, sizeof(text),
                 "model_list:\n  - model_name: a\n    litellm_params: {model: %s/m/n:1, "
                 "api_key: k}\n",
                 p->name);
        cfg = load(text);
        if (cfg == NULL)
            fail_msg("%s: %s", p->name, diag.error);
        assert_ptr_equal(cfg->deployments[0].prov, p);
        assert_string_equal(cfg->deployments[0].model, "m/n:1");
        assert_non_null(strstr(cfg->deployments[0].api_base, p->default_base));
        rt_config_destroy(&cfg);
    }
    /* a bare claude-* is Anthropic's, as LiteLLM infers it; other bare names OpenAI's */
    cfg = load("model_list:\n  - {model_name: a, litellm_params: {model: claude-3-5-haiku}}\n"
               "  - {model_name: b, litellm_params: {model: gpt-4o}}\n");
    assert_non_null(cfg);
    assert_ptr_equal(cfg->deployments[0].prov, &rt_provider_anthropic);
    assert_string_equal(cfg->deployments[0].model, "claude-3-5-haiku");
    assert_ptr_equal(cfg->deployments[1].prov, &rt_provider_openai);
    assert_string_equal(cfg->deployments[1].api_base, "https://api.openai.com/v1");
    rt_config_destroy(&cfg);
}

/* Keys and bases from the environment (LiteLLM's variable names), and the rule that keeps a
 * provider's key on its own host. */
static void test_provider_environment(void **state)
{
    struct rt_config *cfg;

    (void)state;
    setenv("GROQ_API_KEY", "gsk-env-1", 1);
    setenv("TOGETHER_AI_API_KEY", "tg-env-2", 1);
    setenv("HOSTED_VLLM_API_KEY", "vllm-env-3", 1);
    setenv("HOSTED_VLLM_API_BASE", "http://vllm.internal:8000/v1", 1);
    setenv("OLLAMA_API_BASE", "http://gpu-box:11434/", 1);
    cfg = load("model_list:\n"
               "  - {model_name: g, litellm_params: {model: groq/llama-3.3-70b-versatile}}\n"
               "  - {model_name: g2, litellm_params: {model: groq/x, api_key: sk-own}}\n"
               "  - {model_name: g3, litellm_params: {model: groq/x,\n"
               "                                      api_base: http://10.0.0.9:1/v1}}\n"
               "  - {model_name: t, litellm_params: {model: together_ai/m}}\n"
               "  - {model_name: v, litellm_params: {model: hosted_vllm/m}}\n"
               "  - {model_name: v2, litellm_params: {model: hosted_vllm/m,\n"
               "                                      api_base: http://10.0.0.7:8000/v1}}\n"
               "  - {model_name: o, litellm_params: {model: ollama_chat/llama3}}\n"
               "  - {model_name: o2, litellm_params: {model: ollama/llama3,\n"
               "                                      api_base: \"http://h:11434/v1/\"}}\n"
               "  - {model_name: m, litellm_params: {model: mistral/m,\n"
               "                                      api_base: https://mistral.example}}\n");
    if (cfg == NULL)
        fail_msg("%s", diag.error);
    /* no api_base: the provider's host, the provider's variable */
    assert_string_equal(cfg->deployments[0].api_base, "https://api.groq.com/openai/v1");
    assert_string_equal(cfg->deployments[0].api_key, "gsk-env-1");
    assert_string_equal(cfg->deployments[0].model, "llama-3.3-70b-versatile");
    /* api_key given wins */
    assert_string_equal(cfg->deployments[1].api_key, "sk-own");
    /* api_base elsewhere: the variable is not sent there (and a warning says so) */
    assert_string_equal(cfg->deployments[2].api_base, "http://10.0.0.9:1/v1");
    assert_string_equal(cfg->deployments[2].api_key, "");
    assert_int_equal(warnings_besides_prices(), 1);
    assert_string_equal(diag.warnings[0],
                        "router.yaml:4: model_list[2].litellm_params.model: GROQ_API_KEY is set "
                        "but not sent: api_base is not groq's own; give api_key to send a key "
                        "there");
    /* the second of together's names */
    assert_string_equal(cfg->deployments[3].api_key, "tg-env-2");
    /* self-hosted: base from its variable, its key variable with any base */
    assert_string_equal(cfg->deployments[4].api_base, "http://vllm.internal:8000/v1");
    assert_string_equal(cfg->deployments[4].api_key, "vllm-env-3");
    assert_string_equal(cfg->deployments[5].api_base, "http://10.0.0.7:8000/v1");
    assert_string_equal(cfg->deployments[5].api_key, "vllm-env-3");
    /* Ollama's OpenAI-compatible API is under /v1 */
    assert_string_equal(cfg->deployments[6].api_base, "http://gpu-box:11434/v1");
    assert_string_equal(cfg->deployments[7].api_base, "http://h:11434/v1");
    assert_string_equal(cfg->deployments[8].api_base, "https://mistral.example/v1");
    rt_config_destroy(&cfg);
    /* a variable with a control byte is an error naming it, never sent */
    setenv("GROQ_API_KEY", "gsk-env-1\n", 1);
    cfg = load("model_list:\n  - {model_name: g, litellm_params: {model: groq/m}}\n");
    assert_null(cfg);
    assert_non_null(strstr(diag.error, "router.yaml:2: model_list[0].litellm_params.model: "));
    assert_non_null(strstr(diag.error, "GROQ_API_KEY"));
    unsetenv("GROQ_API_KEY");
    unsetenv("TOGETHER_AI_API_KEY");
    unsetenv("HOSTED_VLLM_API_KEY");
    unsetenv("HOSTED_VLLM_API_BASE");
    unsetenv("OLLAMA_API_BASE");
}

/* Azure: LiteLLM's fields and variables, the Entra ID credentials checked together, secrets
 * listed for the mask. */
static void test_provider_azure(void **state)
{
    struct rt_config *cfg;
    const char *secrets[8];
    size_t n;

    (void)state;
    expect_error("model_list:\n  - model_name: a\n    litellm_params:\n      model: azure/dep-1\n"
                 "      api_key: k\n",
                 "router.yaml:4: model_list[0].litellm_params.model: provider \"azure\" has no "
                 "default base URL: set api_base or AZURE_API_BASE");
    expect_error("model_list:\n  - model_name: a\n    litellm_params:\n      model: azure/dep-1\n"
                 "      api_base: https://r.openai.azure.com\n      tenant_id: t1\n",
                 "router.yaml:4: model_list[0].litellm_params.model: Microsoft Entra ID client "
                 "credentials need tenant_id, client_id and client_secret together");
    setenv("AZURE_API_KEY", "az-env-key", 1);
    setenv("AZURE_API_VERSION", "2025-01-01-preview", 1);
    setenv("RT_TEST_ENTRA_SECRET", "entra-secret-1", 1);
    cfg = load("model_list:\n"
               "  - model_name: a\n"
               "    litellm_params:\n"
               "      model: azure/gpt-4o-dep\n"
               "      api_base: https://r.openai.azure.com/\n"
               "      api_version: \"2024-06-01\"\n"
               "      azure_ad_token: eyJhbGciOi.static\n"
               "  - model_name: b\n"
               "    litellm_params:\n"
               "      model: azure/emb\n"
               "      api_base: https://r2.openai.azure.com\n"
               "      tenant_id: 72f988bf-86f1-41af-91ab-2d7cd011db47\n"
               "      client_id: app-1\n"
               "      client_secret: os.environ/RT_TEST_ENTRA_SECRET\n"
               "  - model_name: c\n"
               "    litellm_params: {model: openai/x, api_base: http://h/v1, tenant_id: t}\n"
               "general_settings: {master_key: sk-m}\n");
    if (cfg == NULL)
        fail_msg("%s", diag.error);
    assert_ptr_equal(cfg->deployments[0].prov, &rt_provider_azure);
    assert_string_equal(cfg->deployments[0].model, "gpt-4o-dep");
    assert_string_equal(cfg->deployments[0].api_base, "https://r.openai.azure.com");
    assert_non_null(cfg->deployments[0].cloud);
    assert_string_equal(cfg->deployments[0].cloud->api_version, "2024-06-01");
    /* AZURE_API_KEY is for AZURE_API_BASE's resource, not sent to an api_base of the config */
    assert_string_equal(cfg->deployments[0].api_key, "");
    assert_false(rt_provider_needs_token(&cfg->deployments[0]));
    /* the version from AZURE_API_VERSION when the config gives none */
    assert_string_equal(cfg->deployments[1].cloud->api_version, "2025-01-01-preview");
    assert_string_equal(cfg->deployments[1].cloud->client_secret, "entra-secret-1");
    assert_true(rt_provider_needs_token(&cfg->deployments[1]));
    /* another family's param: ignored with a warning */
    assert_int_equal(warnings_besides_prices(), 3);
    assert_string_equal(diag.warnings[0], "router.yaml:4: model_list[0].litellm_params.model: "
                                          "AZURE_API_KEY is set but not sent: api_base is not "
                                          "azure's own; give api_key to send a key there");
    assert_non_null(strstr(diag.warnings[1], "model_list[1].litellm_params.model: AZURE_API_KEY"));
    assert_string_equal(diag.warnings[2], "router.yaml:16: model_list[2].litellm_params.tenant_id: "
                                          "not used by provider \"openai\", ignored");
    n = rt_config_secrets(cfg, secrets, 8);
    assert_int_equal(n, 3);
    assert_string_equal(secrets[0], "sk-m");
    assert_string_equal(secrets[1], "eyJhbGciOi.static");
    assert_string_equal(secrets[2], "entra-secret-1");
    rt_config_destroy(&cfg);
    /* AZURE_API_BASE names the resource: its key variable goes there */
    setenv("AZURE_API_BASE", "https://env-res.openai.azure.com", 1);
    cfg = load("model_list:\n  - {model_name: a, litellm_params: {model: azure/d}}\n");
    if (cfg == NULL)
        fail_msg("%s", diag.error);
    assert_string_equal(cfg->deployments[0].api_base, "https://env-res.openai.azure.com");
    assert_string_equal(cfg->deployments[0].api_key, "az-env-key");
    rt_config_destroy(&cfg);
    unsetenv("AZURE_API_KEY");
    unsetenv("AZURE_API_BASE");
    unsetenv("AZURE_API_VERSION");
    unsetenv("RT_TEST_ENTRA_SECRET");
}

/* The front door's limits: defaults, values, and errors naming the key. */
static void test_front_door_limits(void **state)
{
    struct rt_config *cfg;

    (void)state;
    cfg = load(HEAD);
    assert_non_null(cfg);
    assert_int_equal(cfg->header_timeout_ms, 10000);
    assert_int_equal(cfg->body_timeout_ms, 60000);
    assert_int_equal(cfg->body_min_rate, 1024);
    assert_int_equal(cfg->keepalive_timeout_ms, 75000);
    assert_int_equal(cfg->send_timeout_ms, 60000);
    assert_int_equal(cfg->max_json_depth, 64);
    assert_int_equal(cfg->max_json_elements, 200000);
    assert_int_equal(cfg->max_connections_per_ip, cfg->max_connections);
    rt_config_destroy(&cfg);
    cfg = load(HEAD "tollgate:\n  limits: {header_timeout_ms: 2000, body_timeout_ms: 3000, "
                    "body_min_rate: 512, keepalive_timeout_ms: 4000, send_timeout_ms: 5000, "
                    "max_json_depth: 16, max_json_elements: 1000, max_connections: 100, "
                    "max_connections_per_ip: 10}\n");
    assert_non_null(cfg);
    assert_int_equal(cfg->header_timeout_ms, 2000);
    assert_int_equal(cfg->body_timeout_ms, 3000);
    assert_int_equal(cfg->body_min_rate, 512);
    assert_int_equal(cfg->keepalive_timeout_ms, 4000);
    assert_int_equal(cfg->send_timeout_ms, 5000);
    assert_int_equal(cfg->max_json_depth, 16);
    assert_int_equal(cfg->max_json_elements, 1000);
    assert_int_equal(cfg->max_connections_per_ip, 10);
    rt_config_destroy(&cfg);
    expect_error(HEAD "tollgate:\n  limits:\n    header_timeout_ms: 0\n",
                 "router.yaml:7: tollgate.limits.header_timeout_ms: expected at least 100 "
                 "(milliseconds)");
    expect_error(HEAD "tollgate:\n  limits:\n    body_min_rate: 0\n",
                 "router.yaml:7: tollgate.limits.body_min_rate: expected at least 1 (bytes per "
                 "second)");
    expect_error(HEAD "tollgate:\n  limits:\n    max_connections_per_ip: 0\n",
                 "router.yaml:7: tollgate.limits.max_connections_per_ip: expected at least 1");
    expect_error(HEAD "tollgate:\n  limits:\n    max_json_depth: 1\n",
                 "router.yaml:7: tollgate.limits.max_json_depth: expected at least 2");
    expect_error(HEAD "tollgate:\n  limits:\n    max_teams: 0\n",
                 "router.yaml:7: tollgate.limits.max_teams: expected at least 1");
}

static void test_key_models_may_name_own_alias(void **state)
{
    struct rt_config *cfg;

    (void)state;
    cfg = load(HEAD "tollgate:\n  keys:\n"
                    "    - {key: sk-abcdefgh, models: [mine],\n"
                    "       router_settings: {model_group_alias: {mine: a}}}\n"
                    "    - {router_settings: {model_group_alias: {mine: a}}, key: sk-abcdefgi,\n"
                    "       models: [a, mine]}\n");
    if (cfg == NULL)
        fail_msg("config: %s", diag.error);
    assert_int_equal(cfg->n_keys, 2);
    assert_string_equal(cfg->keys[0].models[0], "mine");
    assert_int_equal(cfg->keys[1].n_models, 2);
    rt_config_destroy(&cfg);
    expect_error(HEAD "tollgate:\n  keys:\n"
                      "    - {key: sk-abcdefgh, router_settings: {model_group_alias: {mine: a}},\n"
                      "       models: [a,\n"
                      "                yours]}\n",
                 "router.yaml:9: tollgate.keys[0].models[1]: unknown model group or alias "
                 "\"yours\"");
}

/* tollgate.kafka's security keys and librdkafka properties (tg_kafka_opts; its own tests are
 * common_kafka_opts_test): read under tollgate.kafka, errors name that path, secrets masked. */
static void test_kafka_security(void **state)
{
    struct rt_config *cfg;
    const char *sec[16];
    size_t n;

    (void)state;
    setenv("RT_TEST_KAFKA_PW", "kafka-pw-0042", 1);
    cfg = load(HEAD "      api_key: sk-provider-1\n"
                    "tollgate:\n"
                    "  kafka:\n"
                    "    brokers: 127.0.0.1:1\n"
                    "    security_protocol: SASL_PLAINTEXT\n"
                    "    sasl: {mechanism: SCRAM-SHA-256, username: router,\n"
                    "           password: os.environ/RT_TEST_KAFKA_PW}\n"
                    "    librdkafka: {linger.ms: 20}\n");
    if (cfg == NULL)
        fail_msg("%s", diag.error);
    assert_string_equal(cfg->kafka_brokers, "127.0.0.1:1");
    assert_string_equal(cfg->kafka_opts.protocol, "SASL_PLAINTEXT");
    assert_string_equal(cfg->kafka_opts.mechanism, "SCRAM-SHA-256");
    assert_int_equal(cfg->kafka_opts.n, 5);
    n = rt_config_secrets(cfg, sec, 16);
    assert_int_equal(n, 2);
    assert_string_equal(sec[0], "sk-provider-1");
    assert_string_equal(sec[1], "kafka-pw-0042");
    /* no room left for the Kafka secret: counted all the same */
    assert_int_equal(rt_config_secrets(cfg, sec, 1), 2);
    rt_config_destroy(&cfg);
    unsetenv("RT_TEST_KAFKA_PW");

    expect_error(HEAD "tollgate:\n  kafka:\n    librdkafka: {linger.mss: 5}\n",
                 "router.yaml:7: tollgate.kafka.librdkafka.linger.mss: No such configuration "
                 "property: \"linger.mss\"");
    expect_error(HEAD "tollgate:\n  kafka:\n    librdkafka:\n      bootstrap.servers: x\n",
                 "router.yaml:8: tollgate.kafka.librdkafka.bootstrap.servers: owned by the service "
                 "(its delivery and offset guarantees rest on it): not configurable");
    expect_error(HEAD "tollgate:\n  kafka:\n    librdkafka: {sasl.username: u}\n",
                 "router.yaml:7: tollgate.kafka.librdkafka.sasl.username: give it as "
                 "tollgate.kafka.sasl.username");
    expect_error(HEAD "tollgate:\n  kafka:\n    sasl: {mechanism: PLAIN}\n",
                 "router.yaml:7: tollgate.kafka.sasl: security_protocol is PLAINTEXT (the "
                 "default): SASL needs SASL_PLAINTEXT or SASL_SSL");
    expect_error(HEAD "tollgate:\n  kafka:\n    sasl_mechanism: PLAIN\n",
                 "router.yaml:7: tollgate.kafka.sasl_mechanism: unknown key");
    /* events per Kafka record: 1..64, 1 by default */
    cfg = load(HEAD "tollgate:\n  kafka:\n    events_per_record: 64\n");
    assert_non_null(cfg);
    assert_int_equal(cfg->events_per_record, PROTO_RECORD_EVENTS_MAX);
    rt_config_destroy(&cfg);
    cfg = load(HEAD);
    assert_non_null(cfg);
    assert_int_equal(cfg->events_per_record, 1);
    rt_config_destroy(&cfg);
    expect_error(HEAD "tollgate:\n  kafka:\n    events_per_record: 0\n",
                 "router.yaml:7: tollgate.kafka.events_per_record: must be between 1 and 64");
    expect_error(HEAD "tollgate:\n  kafka:\n    events_per_record: 65\n",
                 "router.yaml:7: tollgate.kafka.events_per_record: must be between 1 and 64");
}

/* ssl_verify (LiteLLM's): per deployment, litellm_settings for the rest; true, false or a CA
 * bundle's path. */
static void test_ssl_verify(void **state)
{
    const char *src = getenv("TG_SOURCE_DIR");
    char ca[512], text[2048];
    struct rt_config *cfg;

    (void)state;
    snprintf(ca, sizeof(ca), "%s/tests/unit/data/kafka/ca.pem", src != NULL ? src : ".");
    cfg = load(HEAD "  - model_name: b\n    litellm_params: {model: openai/y, ssl_verify: false}\n");
    assert_non_null(cfg);
    assert_int_equal(cfg->deployments[0].ssl_verify, 1); /* the default */
    assert_string_equal(cfg->deployments[0].ssl_ca_file, "");
    assert_int_equal(cfg->deployments[1].ssl_verify, 0);
    rt_config_destroy(&cfg);

    snprintf(text, sizeof(text),
             HEAD "  - model_name: b\n    litellm_params: {model: openai/y, ssl_verify: \"%s\"}\n"
                  "  - model_name: c\n    litellm_params: {model: openai/z, ssl_verify: True}\n"
                  "litellm_settings: {ssl_verify: \"False\"}\n",
             ca);
    cfg = load(text);
    if (cfg == NULL)
        fail_msg("%s", diag.error);
    assert_int_equal(cfg->deployments[0].ssl_verify, 0); /* litellm_settings */
    assert_int_equal(cfg->deployments[1].ssl_verify, 1); /* its own path wins */
    assert_string_equal(cfg->deployments[1].ssl_ca_file, ca);
    assert_int_equal(cfg->deployments[2].ssl_verify, 1); /* its own true wins */
    assert_string_equal(cfg->deployments[2].ssl_ca_file, "");
    assert_int_equal(warnings_besides_prices(), 0);
    rt_config_destroy(&cfg);

    snprintf(text, sizeof(text), HEAD "litellm_settings:\n  ssl_verify: %s\n", ca);
    cfg = load(text);
    assert_non_null(cfg);
    assert_int_equal(cfg->deployments[0].ssl_verify, 1);
    assert_string_equal(cfg->deployments[0].ssl_ca_file, ca);
    rt_config_destroy(&cfg);

    expect_error(HEAD "      ssl_verify: /nonexistent/ca.pem\n",
                 "router.yaml:5: model_list[0].litellm_params.ssl_verify: expected true, false or "
                 "the path of a CA bundle: cannot read /nonexistent/ca.pem: No such file or "
                 "directory");
    expect_error(HEAD "litellm_settings: {ssl_verify: ''}\n",
                 "router.yaml:5: litellm_settings.ssl_verify: expected true, false or the path of "
                 "a CA bundle");
    expect_error(HEAD "      ssl_verify: [true]\n",
                 "router.yaml:5: model_list[0].litellm_params.ssl_verify: expected a scalar value");
}

/* ---- tollgate.redis (limits across replicas) and LiteLLM's names for the same Redis
 * (router_settings.redis_host / redis_port / redis_password, REDIS_HOST / REDIS_PORT /
 * REDIS_PASSWORD) ---- */

#define REDIS_HEAD                                                                                 \
    "model_list:\n  - model_name: a\n    litellm_params:\n      model: openai/x\n"                 \
    "      api_base: http://127.0.0.1:1/v1\n      input_cost_per_token: 0\n"                      \
    "      output_cost_per_token: 0\n"                                                             \
    "tollgate:\n  allow_unauthenticated: true\n"

static struct rt_config *redis_load_ok(const char *text)
{
    struct rt_config *cfg = load(text);

    if (cfg == NULL)
        fail_msg("load failed: %s", diag.error);
    return cfg;
}

static int redis_setup(void **state)
{
    setup(state);
    unsetenv("REDIS_HOST");
    unsetenv("REDIS_PORT");
    unsetenv("REDIS_PASSWORD");
    return 0;
}

static void test_absent_means_off(void **state)
{
    struct rt_config *cfg = redis_load_ok(REDIS_HEAD);

    (void)state;
    assert_int_equal(cfg->redis.enabled, 0);
    assert_int_equal(cfg->redis.sync_interval_ms, RT_DEFAULT_REDIS_SYNC_INTERVAL_MS);
    rt_config_destroy(&cfg);
}

static void test_tollgate_redis(void **state)
{
    struct rt_config *cfg;

    (void)state;
    cfg = redis_load_ok(REDIS_HEAD "  redis:\n    url: rediss://lim%40it:p%3Aw@redis.example:6380/2\n"
                       "    sync_interval_ms: 50\n    timeout_ms: 300\n"
                       "    tls: {ca_file: /etc/ca.pem, server_name: r.example}\n");
    assert_int_equal(cfg->redis.enabled, 1);
    assert_string_equal(cfg->redis.host, "redis.example");
    assert_int_equal(cfg->redis.port, 6380);
    assert_int_equal(cfg->redis.db, 2);
    assert_int_equal(cfg->redis.tls, 1);
    assert_string_equal(cfg->redis.username, "lim@it");
    assert_string_equal(cfg->redis.password, "p:w");
    assert_string_equal(cfg->redis.ca_file, "/etc/ca.pem");
    assert_string_equal(cfg->redis.server_name, "r.example");
    assert_int_equal(cfg->redis.sync_interval_ms, 50);
    assert_int_equal(cfg->redis.timeout_ms, 300);
    rt_config_destroy(&cfg);
    /* username / password win over the URL's */
    cfg = redis_load_ok(REDIS_HEAD "  redis: {url: 'redis://u:p@h', username: me, password: pw}\n");
    assert_string_equal(cfg->redis.username, "me");
    assert_string_equal(cfg->redis.password, "pw");
    assert_int_equal(cfg->redis.port, 6379);
    assert_int_equal(cfg->redis.db, 0);
    rt_config_destroy(&cfg);
}

static void test_litellm_names(void **state)
{
    struct rt_config *cfg;

    (void)state;
    cfg = redis_load_ok(REDIS_HEAD "router_settings:\n  redis_host: 10.0.0.5\n  redis_port: 6390\n"
                       "  redis_password: secret\n");
    assert_int_equal(cfg->redis.enabled, 1);
    assert_string_equal(cfg->redis.host, "10.0.0.5");
    assert_int_equal(cfg->redis.port, 6390);
    assert_string_equal(cfg->redis.password, "secret");
    assert_int_equal(cfg->redis.tls, 0);
    rt_config_destroy(&cfg);
    /* tollgate.redis.url wins over router_settings; its sync keys apply to either */
    cfg = redis_load_ok(REDIS_HEAD "  redis: {url: 'redis://127.0.0.1:7000', sync_interval_ms: 20}\n"
                       "router_settings: {redis_host: other, redis_port: 1}\n");
    assert_string_equal(cfg->redis.host, "127.0.0.1");
    assert_int_equal(cfg->redis.port, 7000);
    rt_config_destroy(&cfg);
    cfg = redis_load_ok(REDIS_HEAD "  redis: {sync_interval_ms: 20}\n"
                       "router_settings: {redis_host: other}\n");
    assert_string_equal(cfg->redis.host, "other");
    assert_int_equal(cfg->redis.port, 6379);
    assert_int_equal(cfg->redis.sync_interval_ms, 20);
    rt_config_destroy(&cfg);
    /* LiteLLM's environment variables, when the file names no Redis */
    setenv("REDIS_HOST", "envhost", 1);
    setenv("REDIS_PORT", "6501", 1);
    setenv("REDIS_PASSWORD", "envpw", 1);
    cfg = redis_load_ok(REDIS_HEAD);
    assert_int_equal(cfg->redis.enabled, 1);
    assert_string_equal(cfg->redis.host, "envhost");
    assert_int_equal(cfg->redis.port, 6501);
    assert_string_equal(cfg->redis.password, "envpw");
    rt_config_destroy(&cfg);
    setenv("REDIS_PORT", "65536", 1);
    expect_error(HEAD, "router.yaml:0: REDIS_PORT (environment): expected a port 1..65535");
    redis_setup(NULL);
}

static void test_redis_errors(void **state)
{
    (void)state;
    expect_error(REDIS_HEAD "  redis: {url: 'http://h:1'}\n",
                 "router.yaml:10: tollgate.redis.url: expected redis://HOST:PORT/DB or "
                 "rediss://...");
    expect_error(REDIS_HEAD "  redis: {url: 'redis://h:0'}\n",
                 "router.yaml:10: tollgate.redis.url: bad port");
    expect_error(REDIS_HEAD "  redis: {url: 'redis://h/16'}\n",
                 "router.yaml:10: tollgate.redis.url: bad database number");
    expect_error(REDIS_HEAD "  redis: {url: 'redis://h', sync_interval_ms: 5}\n",
                 "router.yaml:10: tollgate.redis.sync_interval_ms: expected 10..60000 (ms)");
    expect_error(REDIS_HEAD "  redis: {url: 'redis://h', tls: {ca_file: /x}}\n",
                 "router.yaml:10: tollgate.redis.tls: needs a rediss:// url (TLS)");
    expect_error(REDIS_HEAD "  redis: {url: 'rediss://h', tls: {cert_file: /x}}\n",
                 "router.yaml:10: tollgate.redis.tls: cert_file and key_file go together");
    expect_error(REDIS_HEAD "  redis: {url: 'redis://h', bogus: 1}\n",
                 "router.yaml:10: tollgate.redis.bogus: unknown key");
    expect_error(REDIS_HEAD "  redis:\n    sync_interval_ms: 100\n",
                 "router.yaml:11: tollgate.redis.url: missing (redis://HOST:PORT/DB or "
                 "rediss://...)");
    expect_error(REDIS_HEAD "router_settings:\n  redis_port: 70000\n",
                 "router.yaml:11: router_settings.redis_port: value 70000 out of range (max "
                 "65535)");
    expect_error(REDIS_HEAD "router_settings:\n  redis_password: x\n",
                 "router.yaml:0: router_settings.redis_host: missing (redis_port / "
                 "redis_password need a redis_host)");
}

static void test_redis_url_parser(void **state)
{
    struct tg_redis_url u;
    char err[128];

    (void)state;
    assert_int_equal(tg_redis_url_parse("redis://[::1]:6390/3", &u, err, sizeof(err)), 0);
    assert_string_equal(u.host, "[::1]");
    assert_int_equal(u.port, 6390);
    assert_int_equal(u.db, 3);
    assert_int_equal(tg_redis_url_parse("redis://:only%20pw@h", &u, err, sizeof(err)), 0);
    assert_string_equal(u.username, "");
    assert_string_equal(u.password, "only pw");
    assert_int_equal(tg_redis_url_parse("redis://u:%zz@h", &u, err, sizeof(err)), -1);
    assert_string_equal(err, "bad credentials in the URL (percent-encode @ : / %)");
    assert_int_equal(tg_redis_url_parse("redis://u:p@", &u, err, sizeof(err)), -1);
    assert_string_equal(err, "missing host");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_full_file),
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_warnings_are_not_errors),
        cmocka_unit_test(test_cooldown_zero_disables),
        cmocka_unit_test(test_unsupported_strategy_warns),
        cmocka_unit_test(test_litellm_settings_routing_keys),
        cmocka_unit_test(test_money_and_durations),
        cmocka_unit_test(test_mutations),
        cmocka_unit_test(test_key_models_may_name_own_alias),
        cmocka_unit_test(test_control_bytes_in_values),
        cmocka_unit_test(test_fail_closed),
        cmocka_unit_test(test_provider_prefixes),
        cmocka_unit_test(test_provider_environment),
        cmocka_unit_test(test_provider_azure),
        cmocka_unit_test(test_duplicate_keys),
        cmocka_unit_test(test_front_door_limits),
        cmocka_unit_test(test_kafka_security),
        cmocka_unit_test(test_ssl_verify),
        cmocka_unit_test_setup(test_absent_means_off, redis_setup),
        cmocka_unit_test_setup(test_tollgate_redis, redis_setup),
        cmocka_unit_test_setup(test_litellm_names, redis_setup),
        cmocka_unit_test_setup(test_redis_errors, redis_setup),
        cmocka_unit_test_setup(test_redis_url_parser, redis_setup),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
