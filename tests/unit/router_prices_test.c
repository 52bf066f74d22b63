/* prices: the built-in map, a user's map (LiteLLM's format), the lookup order, the date-suffix
 * normalisation, errors naming the entry and field; the config's use of them (own prices,
 * model_info.base_model, tollgate.price_map, a warning per unpriced deployment). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "config.h"
#include "prices.h"
#include "tg_err.h"
#include "tg_log.h"
#include "tg_units.h"

static int64_t fusd(const char *usd)
{
    int64_t v = -1;

    assert_int_equal(tg_parse_usd_fusd(usd, &v), 0);
    return v;
}

static struct rt_prices *parse(const char *text)
{
    struct rt_prices *p = NULL;
    char err[256];

    if (rt_prices_parse("map.json", text, strlen(text), &p, err, sizeof(err)) != 0)
        fail_msg("parse failed: %s", err);
    return p;
}

static void expect_parse_error(const char *text, int rc, const char *message)
{
    struct rt_prices *p = NULL;
    char err[256] = "";

    assert_int_equal(rt_prices_parse("map.json", text, strlen(text), &p, err, sizeof(err)), rc);
    assert_null(p);
    if (strcmp(err, message) != 0)
        fail_msg("got      \"%s\"\nexpected \"%s\"", err, message);
}

/* The built-in map parses, is large, and holds the models a LiteLLM user names without
 * configuring prices (LiteLLM's published map of the built-in date). */
static void test_builtin(void **state)
{
    const struct rt_prices *b = rt_prices_builtin();
    const struct rt_price_entry *e;

    (void)state;
    assert_non_null(b);
    assert_ptr_equal(b, rt_prices_builtin()); /* parsed once */
    assert_true(rt_prices_count(b) > 1000);
    assert_int_equal(strlen(rt_prices_builtin_date()), 10);
    e = rt_prices_find(b, "gpt-4o-mini");
    assert_non_null(e);
    assert_int_equal(e->price.input, fusd("1.5e-07"));
    assert_int_equal(e->price.output, fusd("6e-07"));
    assert_int_equal(e->price.cache_read, fusd("7.5e-08"));
    assert_int_equal(e->price.max_input_tokens, 128000);
    assert_string_equal(e->provider, "openai");
    assert_string_equal(e->mode, "chat");
    e = rt_prices_find(b, "claude-sonnet-4-5");
    assert_non_null(e);
    assert_int_equal(e->price.cache_creation, fusd("3.75e-06"));
    assert_int_equal(e->price.cache_read, fusd("3e-07"));
    e = rt_prices_find(b, "text-embedding-3-small");
    assert_non_null(e);
    assert_string_equal(e->mode, "embedding");
    /* every provider family Tollgate speaks has entries */
    assert_non_null(rt_prices_lookup(NULL, b, "azure", "gpt-4o"));
    assert_non_null(rt_prices_lookup(NULL, b, "gemini", "gemini-2.5-flash"));
    assert_non_null(rt_prices_lookup(NULL, b, "vertex_ai", "gemini-2.5-flash"));
    assert_non_null(
        rt_prices_lookup(NULL, b, "bedrock", "anthropic.claude-3-5-sonnet-20240620-v1:0"));
    assert_non_null(rt_prices_lookup(NULL, b, "groq", "llama-3.3-70b-versatile"));
    assert_non_null(rt_prices_lookup(NULL, b, "mistral", "mistral-small-latest"));
    assert_non_null(rt_prices_lookup(NULL, b, "deepseek", "deepseek-chat"));
}

static void test_lookup_order(void **state)
{
    struct rt_prices *u = parse("{\"gpt-4o-mini\": {\"input_cost_per_token\": 1e-6},"
                                " \"azure/my-model\": {\"input_cost_per_token\": 2e-6},"
                                " \"my-model\": {\"input_cost_per_token\": 3e-6},"
                                " \"dated\": {\"input_cost_per_token\": 4e-6},"
                                " \"acme/dated\": {\"input_cost_per_token\": 5e-6}}");
    const struct rt_prices *b = rt_prices_builtin();
    const struct rt_price_entry *e;

    (void)state;
    /* the user's map overrides the built-in one */
    e = rt_prices_lookup(u, b, "openai", "gpt-4o-mini");
    assert_non_null(e);
    assert_int_equal(e->price.input, fusd("1e-6"));
    /* ... and extends it; a built-in model stays */
    e = rt_prices_lookup(u, b, "openai", "gpt-4o");
    assert_non_null(e);
    assert_string_equal(e->key, "gpt-4o");
    /* provider/model before model */
    assert_string_equal(rt_prices_lookup(u, b, "azure", "my-model")->key, "azure/my-model");
    assert_string_equal(rt_prices_lookup(u, b, "other", "my-model")->key, "my-model");
    assert_string_equal(rt_prices_lookup(u, b, "", "my-model")->key, "my-model");
    /* date suffixes: -YYYY-MM-DD, -YYYYMMDD, @YYYYMMDD; provider/model undated before model */
    assert_string_equal(rt_prices_lookup(u, b, "x", "dated-2099-01-31")->key, "dated");
    assert_string_equal(rt_prices_lookup(u, b, "x", "dated-20990131")->key, "dated");
    assert_string_equal(rt_prices_lookup(u, b, "x", "dated@20990131")->key, "dated");
    assert_string_equal(rt_prices_lookup(u, b, "acme", "dated-20990131")->key, "acme/dated");
    assert_string_equal(rt_prices_lookup(NULL, b, "anthropic", "claude-sonnet-4-5-20991231")->key,
                        "claude-sonnet-4-5");
    /* what is not a date stays */
    assert_null(rt_prices_lookup(u, b, "x", "dated-99"));
    assert_null(rt_prices_lookup(u, b, "x", "dated-19990131")); /* not a 20xx date */
    assert_null(rt_prices_lookup(u, b, "x", "dated-2099-1-31"));
    assert_null(rt_prices_lookup(u, b, "x", "-20990131"));
    assert_null(rt_prices_lookup(u, b, "x", ""));
    assert_null(rt_prices_lookup(NULL, NULL, "x", "gpt-4o"));
    rt_prices_destroy(&u);
    assert_null(u);
}

/* A LiteLLM-shaped file loads as it is: its documentation entry and fields Tollgate does not
 * read are skipped, so are top-level values that are not objects; integral reals are token
 * counts. */
static void test_litellm_shape(void **state)
{
    struct rt_prices *p = parse(
        "{\"sample_spec\": {\"input_cost_per_token\": 0.0, \"max_input_tokens\": \"max input "
        "tokens, if the provider specifies it\", \"litellm_provider\": \"one of ...\"},\n"
        " \"last_updated\": \"2026-07-24\",\n"
        " \"xai/grok\": {\"input_cost_per_token\": 2e-07, \"output_cost_per_token\": 5e-07,"
        " \"max_input_tokens\": 2000000.0, \"supports_vision\": true, \"search_context_cost_per_"
        "query\": {\"search_context_size_low\": 0.005}, \"supported_regions\": [\"global\"],"
        " \"litellm_provider\": \"xai\", \"mode\": \"chat\", \"deprecation_date\": null},\n"
        " \"img\": {\"output_cost_per_image\": 0.04, \"mode\": \"image_generation\"},\n"
        " \"exact\": {\"input_cost_per_token\": 0.000000123456789012345, \"output_cost_per_token\":"
        " 0, \"cache_read_input_token_cost\": null}}");
    const struct rt_price_entry *e;

    (void)state;
    assert_int_equal(rt_prices_count(p), 3);
    assert_null(rt_prices_find(p, "sample_spec"));
    assert_null(rt_prices_find(p, "last_updated"));
    e = rt_prices_find(p, "xai/grok");
    assert_non_null(e);
    assert_int_equal(e->price.max_input_tokens, 2000000);
    assert_int_equal(e->price.input, 200000000);
    assert_int_equal(e->price.cache_read, RT_PRICE_NONE);
    e = rt_prices_find(p, "img"); /* no token prices: kept, unpriced */
    assert_non_null(e);
    assert_int_equal(e->price.input, RT_PRICE_NONE);
    e = rt_prices_find(p, "exact"); /* 15 significant digits, rounded half up to the fUSD */
    assert_int_equal(e->price.input, 123456789);
    assert_int_equal(e->price.output, 0);
    rt_prices_destroy(&p);
}

static void test_parse_errors(void **state)
{
    char key[300];
    char text[400];

    (void)state;
    expect_parse_error("{\"a\": {\"input_cost_per_token\": 1e-6},\n \"b\": }", TG_EPROTO,
                       "map.json:2: not JSON: unexpected token near '}'");
    expect_parse_error("[1, 2]", TG_EPROTO,
                       "map.json: expected a JSON object (model name -> prices)");
    expect_parse_error("{\"gpt\": {\"input_cost_per_token\": \"0.1\"}}", TG_EPROTO,
                       "map.json: \"gpt\".input_cost_per_token: expected a non-negative number "
                       "(USD per token)");
    expect_parse_error("{\"gpt\": {\"output_cost_per_token\": -1e-6}}", TG_EPROTO,
                       "map.json: \"gpt\".output_cost_per_token: expected a non-negative number "
                       "(USD per token)");
    expect_parse_error("{\"gpt\": {\"cache_read_input_token_cost\": 1e300}}", TG_EPROTO,
                       "map.json: \"gpt\".cache_read_input_token_cost: expected a non-negative "
                       "number (USD per token)");
    expect_parse_error("{\"gpt\": {\"max_input_tokens\": 1.5}}", TG_EPROTO,
                       "map.json: \"gpt\".max_input_tokens: expected a non-negative whole number");
    expect_parse_error("{\"gpt\": {\"mode\": 3}}", TG_EPROTO,
                       "map.json: \"gpt\".mode: expected a string");
    expect_parse_error("{\"\": {\"mode\": \"chat\"}}", TG_ERANGE,
                       "map.json: \"\": a model name of 1 to 255 bytes expected");
    memset(key, 'k', 256);
    key[256] = '\0';
    snprintf(text, sizeof(text), "{\"%s\": {}}", key);
    expect_parse_error(text, TG_ERANGE,
                       "map.json: \"kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk"
                       "k\": a model name of 1 to 255 bytes expected");
    /* nesting past the bound: refused before a tree is built */
    {
        char deep[200];
        size_t n = 0;

        n += (size_t)snprintf(deep + n, sizeof(deep) - n, "{\"a\":");
        for (int i = 0; i < 40; i++)
            deep[n++] = '[';
        deep[n] = '\0';
        expect_parse_error(deep, TG_ERANGE, "map.json: JSON nested deeper than 32 levels");
    }
}

static char tmpdir[256];

static void write_file(const char *name, const char *text)
{
    char path[512];
    FILE *f;

    snprintf(path, sizeof(path), "%s/%s", tmpdir, name);
    f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static struct rt_config *load_cfg(const char *text, struct rt_config_diag *diag)
{
    char path[512];

    write_file("router.yaml", text);
    snprintf(path, sizeof(path), "%s/router.yaml", tmpdir);
    return rt_config_load_file(path, diag);
}

#define KEYS "general_settings: {master_key: sk-master-test-1}\n"

/* The config prices each deployment: its own prices as a set, else its map entry by base_model
 * or model; the user's map from a path relative to the config file; one warning per deployment
 * left without a price. */
static void test_config_prices(void **state)
{
    struct rt_config_diag diag;
    struct rt_config *cfg;
    const struct rt_deployment_conf *d;

    (void)state;
    write_file("prices.json", "{\"acme/m1\": {\"input_cost_per_token\": 1e-6, "
                              "\"output_cost_per_token\": 2e-6, \"max_input_tokens\": 1000},"
                              " \"gpt-4o-mini\": {\"input_cost_per_token\": 9e-6}}");
    cfg = load_cfg(
        "model_list:\n"
        "  - model_name: a\n"
        "    litellm_params: {model: openai/gpt-4o-mini-2099-07-18}\n"
        "  - model_name: b\n"
        "    litellm_params: {model: acme/m1, api_base: 'http://127.0.0.1:1'}\n"
        "  - model_name: c\n"
        "    litellm_params: {model: azure/my-deploy, api_base: 'http://127.0.0.1:1',"
        " input_cost_per_token: 4e-6}\n"
        "    model_info: {base_model: azure/gpt-4o}\n"
        "  - model_name: d\n"
        "    litellm_params: {model: azure/other-deploy, api_base: 'http://127.0.0.1:1'}\n"
        "    model_info: {base_model: azure/gpt-4o, cache_read_input_token_cost: 1e-7}\n"
        "  - model_name: e\n"
        "    litellm_params: {model: azure/unknown-deploy, api_base: 'http://127.0.0.1:1'}\n"
        "router_settings: {enable_pre_call_checks: true}\n"
        "tollgate: {price_map: prices.json}\n" KEYS,
        &diag);
    if (cfg == NULL)
        fail_msg("%s", diag.error);
    assert_int_equal(cfg->enable_pre_call_checks, 1);
    /* a: the user's gpt-4o-mini (dated name normalised), overriding the built-in one */
    d = &cfg->deployments[0];
    assert_int_equal(d->priced, 1);
    assert_string_equal(d->price_source, "gpt-4o-mini");
    assert_int_equal(d->price.input, fusd("9e-6"));
    assert_int_equal(d->price.output, RT_PRICE_NONE);
    /* b: provider/model in the user's map */
    d = &cfg->deployments[1];
    assert_string_equal(d->price_source, "acme/m1");
    assert_int_equal(d->price.output, fusd("2e-6"));
    assert_int_equal(d->price.max_input_tokens, 1000);
    /* c: its own input price is the whole set; the token limit from base_model's entry */
    d = &cfg->deployments[2];
    assert_string_equal(d->price_source, "litellm_params");
    assert_int_equal(d->price.input, fusd("4e-6"));
    assert_int_equal(d->price.output, RT_PRICE_NONE);
    assert_int_equal(d->price.cache_read, RT_PRICE_NONE);
    assert_true(d->price.max_input_tokens > 0);
    /* d: model_info gives only a cache price, which is not a set of its own: base_model's
     * entry prices it and the cache price stays its own */
    d = &cfg->deployments[3];
    assert_int_equal(d->priced, 1);
    assert_string_equal(d->price_source, "azure/gpt-4o");
    assert_int_equal(d->price.cache_read, fusd("1e-7"));
    assert_true(d->price.input > 0);
    /* e: nothing: a warning naming it */
    d = &cfg->deployments[4];
    assert_int_equal(d->priced, 0);
    assert_string_equal(d->price_source, "");
    assert_int_equal(diag.n_warnings, 1);
    assert_non_null(strstr(diag.warnings[0], "router.yaml:12: model_list[4] (e-4): no price for "
                                             "\"azure/unknown-deploy\" in the price maps: its "
                                             "calls cost 0"));
    rt_config_destroy(&cfg);

    /* a broken price map is a config error naming the key, its line and the file's problem */
    write_file("bad.json", "{\"m\": {\"input_cost_per_token\": \"free\"}}");
    cfg = load_cfg("model_list:\n  - {model_name: a, litellm_params: {model: openai/gpt-4o}}\n"
                   "tollgate:\n  price_map: bad.json\n" KEYS,
                   &diag);
    assert_null(cfg);
    assert_non_null(strstr(diag.error, "router.yaml:4: tollgate.price_map: "));
    assert_non_null(strstr(diag.error, "bad.json: \"m\".input_cost_per_token: expected a "
                                       "non-negative number"));
    cfg = load_cfg("model_list:\n  - {model_name: a, litellm_params: {model: openai/gpt-4o}}\n"
                   "tollgate:\n  price_map: missing.json\n" KEYS,
                   &diag);
    assert_null(cfg);
    assert_non_null(strstr(diag.error, "missing.json: cannot open: No such file"));
}

static int setup(void **state)
{
    (void)state;
    tg_log_set_level(TG_LOG_OFF);
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/rt-prices-test.XXXXXX");
    assert_non_null(mkdtemp(tmpdir));
    return 0;
}

static int teardown(void **state)
{
    char cmd[600];

    (void)state;
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_builtin),       cmocka_unit_test(test_lookup_order),
        cmocka_unit_test(test_litellm_shape), cmocka_unit_test(test_parse_errors),
        cmocka_unit_test(test_config_prices),
    };

    return cmocka_run_group_tests(tests, setup, teardown);
}
