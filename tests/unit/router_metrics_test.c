/* rt_metrics: LiteLLM's series beside Tollgate's own (rt_metrics_litellm.h): names, types,
 * label names and values after a few recorded requests and attempts, one series per label set
 * (deployments of one model summed in the per-key series), the exposition well formed (every
 * sample under its own family's TYPE line), and the bound on (key, deployment) label sets with
 * its overflow set and counter. No network. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "config.h"
#include "keys.h"
#include "model_list_gen.h"
#include "proto_event.h"
#include "rt_metrics.h"
#include "rt_metrics_litellm.h"
#include "tg_buf.h"
#include "tg_log.h"

static const char config_yaml[] =
    "model_list:\n"
    "  - model_name: gpt-main\n"
    "    litellm_params: {model: openai/m1, api_base: http://127.0.0.1:9/v1}\n"
    "    model_info: {id: main-1}\n"
    "  - model_name: gpt-main\n"
    "    litellm_params: {model: openai/m1, api_base: http://127.0.0.2:9/v1}\n"
    "    model_info: {id: main-2}\n"
    "  - model_name: gpt-fallback\n"
    "    litellm_params: {model: openai/m2, api_base: http://127.0.0.3:9/v1}\n"
    "    model_info: {id: fb-1}\n";

static struct rt_config *load(void)
{
    static struct rt_config_diag diag;
    struct rt_config *cfg;

    tg_log_set_level(TG_LOG_OFF);
    cfg = rt_config_load_buffer("router.yaml", config_yaml, strlen(config_yaml), &diag);
    if (cfg == NULL)
        fail_msg("config: %s", diag.error);
    return cfg;
}

static void key_init(struct rt_key *k, char c, const char *alias, const char *team,
                     const char *user)
{
    memset(k, 0, sizeof(*k));
    memset(k->hash, c, TG_SHA256_HEX_LEN);
    k->hash[TG_SHA256_HEX_LEN] = '\0';
    k->key_alias = alias;
    k->team_id = team;
    k->user_id = user;
    k->extra = "";
}

static void event(struct proto_event *ev, const struct rt_key *k, const char *dep, int status,
                  int64_t in, int64_t out, int64_t cost_nusd, int64_t latency_ms)
{
    proto_event_init(ev);
    snprintf(ev->key_hash, sizeof(ev->key_hash), "%s", k->hash);
    snprintf(ev->key_alias, sizeof(ev->key_alias), "%s", k->key_alias);
    snprintf(ev->team_id, sizeof(ev->team_id), "%s", k->team_id);
    snprintf(ev->user_id, sizeof(ev->user_id), "%s", k->user_id);
    snprintf(ev->deployment_id, sizeof(ev->deployment_id), "%s", dep);
    snprintf(ev->model_group, sizeof(ev->model_group), "%s",
             strncmp(dep, "main", 4) == 0 ? "gpt-main" : "gpt-fallback");
    snprintf(ev->end_user, sizeof(ev->end_user), "end-user-not-a-label");
    ev->status = status;
    ev->prompt_tokens = in;
    ev->completion_tokens = out;
    ev->cost_nusd = cost_nusd;
    ev->latency_ms = latency_ms;
}

static char *scrape(struct rt_metrics *m, struct tg_buf *b)
{
    assert_int_equal(tg_buf_init(b, RT_METRICS_BODY_MAX_BYTES), 0);
    rt_metrics_write(m, b);
    assert_false(b->truncated);
    return b->data;
}

static void expect_line(const char *text, const char *line)
{
    const char *p = text;
    size_t n = strlen(line);

    while ((p = strstr(p, line)) != NULL) {
        if ((p == text || p[-1] == '\n') && p[n] == '\n')
            return;
        p += n;
    }
    fail_msg("no line\n  %s\nin\n%s", line, text);
}

/* Every sample belongs to the family of the last TYPE line (a histogram's _bucket, _sum and
 * _count included), and no series (name and labels) appears twice. */
static void expect_well_formed(const char *text)
{
    char family[128] = "", type[16] = "";
    const char *p = text;
    size_t nseen = 0, cap = 4096;
    char **seen = calloc(cap, sizeof(*seen));

    assert_non_null(seen);
    while (*p != '\0') {
        const char *nl = strchr(p, '\n');
        size_t len = nl != NULL ? (size_t)(nl - p) : strlen(p);
        char line[4096];

        assert_true(len < sizeof(line));
        memcpy(line, p, len);
        line[len] = '\0';
        p += len + (nl != NULL);
        if (strncmp(line, "# TYPE ", 7) == 0) {
            assert_int_equal(sscanf(line + 7, "%127s %15s", family, type), 2);
            continue;
        }
        if (line[0] == '#' || line[0] == '\0')
            continue;
        {
            size_t fl = strlen(family);
            const char *rest = line + fl;
            char *series = strdup(line);

            if (strncmp(line, family, fl) != 0)
                fail_msg("sample outside its family %s: %s", family, line);
            if (strcmp(type, "histogram") == 0 && (strncmp(rest, "_bucket", 7) == 0 ||
                                                   strncmp(rest, "_sum", 4) == 0 ||
                                                   strncmp(rest, "_count", 6) == 0))
                rest += rest[1] == 'b' ? 7 : rest[1] == 's' ? 4 : 6;
            if (*rest != '{' && *rest != ' ')
                fail_msg("sample outside its family %s: %s", family, line);
            assert_non_null(series);
            *strrchr(series, ' ') = '\0';
            for (size_t i = 0; i < nseen; i++) {
                if (strcmp(seen[i], series) == 0)
                    fail_msg("series twice: %s", series);
            }
            assert_true(nseen < cap);
            seen[nseen++] = series;
        }
    }
    for (size_t i = 0; i < nseen; i++)
        free(seen[i]);
    free(seen);
}

static void test_litellm_series_after_requests(void **state)
{
    struct rt_config *cfg = load();
    struct rt_metrics *m = rt_metrics_create(cfg);
    struct rt_key a, b;
    struct proto_event ev;
    struct tg_buf buf;
    char want[2048], ka[TG_SHA256_HEX_LEN + 1], kb[TG_SHA256_HEX_LEN + 1];
    const char *text;

    (void)state;
    assert_non_null(m);
    key_init(&a, 'a', "alias-a", "team-a", "u-1");
    key_init(&b, 'b', "alias-b", "", "");
    memcpy(ka, a.hash, sizeof(ka));
    memcpy(kb, b.hash, sizeof(kb));
    /* key a: a 429 on main-2 then a success on main-1; a success on main-2 */
    rt_metrics_attempt(m, &a, "main-2", 429, RT_ERR_RATE_LIMIT);
    rt_metrics_attempt(m, &a, "main-1", 200, RT_ERR_NONE);
    event(&ev, &a, "main-1", 200, 10, 20, 1500000, 2000); /* 0.1 s per output token */
    rt_metrics_event(m, &ev);
    rt_metrics_attempt(m, &a, "main-2", 200, RT_ERR_NONE);
    event(&ev, &a, "main-2", 200, 5, 0, 500000, 100);
    rt_metrics_event(m, &ev);
    /* key b: a timeout on the fallback group's deployment, answered 504 */
    rt_metrics_attempt(m, &b, "fb-1", 0, RT_ERR_TIMEOUT);
    event(&ev, &b, "fb-1", 504, 0, 0, 0, 600000);
    rt_metrics_event(m, &ev);
    /* no key, unknown deployment: counted without a deployment */
    rt_metrics_attempt(m, NULL, "nowhere", 200, RT_ERR_NONE);

    text = scrape(m, &buf);
    expect_well_formed(text);
    expect_line(text, "# TYPE litellm_requests_metric_total counter");
    expect_line(text, "# TYPE litellm_spend_metric_total counter");
    expect_line(text, "# TYPE litellm_total_tokens_total counter");
    expect_line(text, "# TYPE litellm_input_tokens_total counter");
    expect_line(text, "# TYPE litellm_output_tokens_total counter");
    expect_line(text, "# TYPE litellm_deployment_success_responses_total counter");
    expect_line(text, "# TYPE litellm_deployment_failure_responses_total counter");
    expect_line(text, "# TYPE litellm_deployment_total_requests_total counter");
    expect_line(text, "# TYPE litellm_deployment_latency_per_output_token histogram");
    /* both main deployments run m1: one per-key series, summed */
    snprintf(want, sizeof(want),
             "litellm_requests_metric_total{end_user=\"\",hashed_api_key=\"%s\","
             "api_key_alias=\"alias-a\",model=\"m1\",team=\"team-a\",team_alias=\"\",user=\"u-1\","
             "user_email=\"\"} 2",
             ka);
    expect_line(text, want);
    snprintf(want, sizeof(want),
             "litellm_spend_metric_total{end_user=\"\",hashed_api_key=\"%s\","
             "api_key_alias=\"alias-a\",model=\"m1\",team=\"team-a\",team_alias=\"\",user=\"u-1\"}"
             " 0.002",
             ka);
    expect_line(text, want);
    snprintf(want, sizeof(want),
             "litellm_total_tokens_total{end_user=\"\",hashed_api_key=\"%s\","
             "api_key_alias=\"alias-a\",requested_model=\"gpt-main\",team=\"team-a\","
             "team_alias=\"\",user=\"u-1\",model=\"m1\"} 35",
             ka);
    expect_line(text, want);
    snprintf(want, sizeof(want),
             "litellm_input_tokens_total{end_user=\"\",hashed_api_key=\"%s\","
             "api_key_alias=\"alias-a\",requested_model=\"gpt-main\",team=\"team-a\","
             "team_alias=\"\",user=\"u-1\",model=\"m1\"} 15",
             ka);
    expect_line(text, want);
    snprintf(want, sizeof(want),
             "litellm_output_tokens_total{end_user=\"\",hashed_api_key=\"%s\","
             "api_key_alias=\"alias-a\",requested_model=\"gpt-main\",team=\"team-a\","
             "team_alias=\"\",user=\"u-1\",model=\"m1\"} 20",
             ka);
    expect_line(text, want);
    /* per deployment */
    snprintf(want, sizeof(want),
             "litellm_deployment_success_responses_total{requested_model=\"gpt-main\","
             "litellm_model_name=\"m1\",model_id=\"main-1\",api_base=\"http://127.0.0.1:9/v1\","
             "api_provider=\"openai\",hashed_api_key=\"%s\",api_key_alias=\"alias-a\","
             "team=\"team-a\",team_alias=\"\"} 1",
             ka);
    expect_line(text, want);
    snprintf(want, sizeof(want),
             "litellm_deployment_total_requests_total{requested_model=\"gpt-main\","
             "litellm_model_name=\"m1\",model_id=\"main-2\",api_base=\"http://127.0.0.2:9/v1\","
             "api_provider=\"openai\",hashed_api_key=\"%s\",api_key_alias=\"alias-a\","
             "team=\"team-a\",team_alias=\"\"} 2",
             ka);
    expect_line(text, want);
    snprintf(want, sizeof(want),
             "litellm_deployment_failure_responses_total{requested_model=\"gpt-main\","
             "litellm_model_name=\"m1\",model_id=\"main-2\",api_base=\"http://127.0.0.2:9/v1\","
             "api_provider=\"openai\",hashed_api_key=\"%s\",api_key_alias=\"alias-a\","
             "team=\"team-a\",team_alias=\"\",exception_status=\"429\","
             "exception_class=\"RateLimitError\"} 1",
             ka);
    expect_line(text, want);
    snprintf(want, sizeof(want),
             "litellm_deployment_failure_responses_total{requested_model=\"gpt-fallback\","
             "litellm_model_name=\"m2\",model_id=\"fb-1\",api_base=\"http://127.0.0.3:9/v1\","
             "api_provider=\"openai\",hashed_api_key=\"%s\",api_key_alias=\"alias-b\","
             "team=\"\",team_alias=\"\",exception_status=\"other\","
             "exception_class=\"Timeout\"} 1",
             kb);
    expect_line(text, want);
    snprintf(want, sizeof(want),
             "litellm_deployment_latency_per_output_token_bucket{litellm_model_name=\"m1\","
             "model_id=\"main-1\",api_base=\"http://127.0.0.1:9/v1\",api_provider=\"openai\","
             "hashed_api_key=\"%s\",api_key_alias=\"alias-a\",team=\"team-a\",team_alias=\"\","
             "le=\"0.1\"} 1",
             ka);
    expect_line(text, want);
    snprintf(want, sizeof(want),
             "litellm_deployment_latency_per_output_token_bucket{litellm_model_name=\"m1\","
             "model_id=\"main-1\",api_base=\"http://127.0.0.1:9/v1\",api_provider=\"openai\","
             "hashed_api_key=\"%s\",api_key_alias=\"alias-a\",team=\"team-a\",team_alias=\"\","
             "le=\"0.075\"} 0",
             ka);
    expect_line(text, want);
    /* key b's request failed: no request, no spend, no latency per token; no end_user label
     * value ever */
    snprintf(want, sizeof(want), "hashed_api_key=\"%s\",api_key_alias=\"alias-b\",model=\"m2\"",
             kb);
    assert_null(strstr(text, want));
    assert_null(strstr(text, "end-user-not-a-label"));
    assert_null(strstr(text, "nowhere"));
    expect_line(text, "tollgate_router_litellm_overflow_total 0");
    /* Tollgate's own series are still there */
    expect_line(text, "tollgate_router_attempts_total{model_group=\"gpt-main\","
                      "deployment=\"main-2\",outcome=\"rate_limited\"} 1");
    tg_buf_fini(&buf);
    rt_metrics_destroy(&m);
    rt_config_destroy(&cfg);
}

/* 300 deployments in 100 groups (names are looked up in a hash table, not a loop): every
 * deployment and group is counted under its own name, the first and the last ones included, and
 * names that are not there (a prefix, one more digit) are counted apart or not at all. */
static void test_many_deployments(void **state)
{
    static struct rt_config_diag diag;
    size_t n;
    char *yaml = model_list_gen(300, 3, "api_base: http://127.0.0.1:9/v1", "", &n);
    struct rt_config *cfg;
    struct rt_metrics *m;
    struct rt_key a;
    struct tg_buf buf;
    const char *text;
    char want[256];

    (void)state;
    tg_log_set_level(TG_LOG_OFF);
    cfg = rt_config_load_buffer("router.yaml", yaml, n, &diag);
    if (cfg == NULL)
        fail_msg("config: %s", diag.error);
    m = rt_metrics_create(cfg);
    assert_non_null(m);
    key_init(&a, 'a', "alias-a", "", "");
    for (int i = 0; i < 300; i += 37)
        for (int k = 0; k <= i % 3; k++) {
            char id[16];

            snprintf(id, sizeof(id), "d-%d", i);
            rt_metrics_attempt(m, &a, id, 200, RT_ERR_NONE);
        }
    rt_metrics_attempt(m, &a, "d-299", 429, RT_ERR_RATE_LIMIT);
    rt_metrics_attempt(m, &a, "d-", 200, RT_ERR_NONE);
    rt_metrics_attempt(m, &a, "d-2990", 200, RT_ERR_NONE);
    rt_metrics_request(m, "g-99", 200, 0.01);
    rt_metrics_request(m, "g-99", 200, 0.01);
    rt_metrics_request(m, "g-0", 429, 0.01);
    rt_metrics_request(m, "g-100", 200, 0.01); /* no such group: the "" row */
    text = scrape(m, &buf);
    expect_well_formed(text);
    for (int i = 0; i < 300; i += 37) {
        snprintf(want, sizeof(want),
                 "tollgate_router_attempts_total{model_group=\"g-%d\",deployment=\"d-%d\","
                 "outcome=\"success\"} %d",
                 i / 3, i, i % 3 + 1);
        expect_line(text, want);
    }
    expect_line(text, "tollgate_router_attempts_total{model_group=\"g-99\",deployment=\"d-299\","
                      "outcome=\"rate_limited\"} 1");
    assert_null(strstr(text, "deployment=\"d-\""));
    assert_null(strstr(text, "d-2990"));
    expect_line(text, "tollgate_router_requests_total{model_group=\"g-99\",status=\"200\"} 2");
    expect_line(text, "tollgate_router_requests_total{model_group=\"g-0\",status=\"429\"} 1");
    expect_line(text, "tollgate_router_requests_total{model_group=\"\",status=\"200\"} 1");
    tg_buf_fini(&buf);
    rt_metrics_destroy(&m);
    rt_config_destroy(&cfg);
    free(yaml);
}

/* More (key, deployment) pairs than RT_METRICS_LITELLM_KEY_SERIES: the later ones are counted in
 * their deployment's overflow set, totals stay exact, and the exposition (at its largest, every
 * set in use with every series) fits the /metrics buffer. */
static void test_litellm_label_sets_are_bounded(void **state)
{
    struct rt_config *cfg = load();
    struct rt_metrics *m = rt_metrics_create(cfg);
    struct rt_key k;
    struct proto_event ev;
    struct tg_buf buf;
    char alias[PROTO_NAME_CAP], team[PROTO_NAME_CAP], user[PROTO_NAME_CAP];
    const char *text;
    size_t extra = 5;

    (void)state;
    assert_non_null(m);
    memset(alias, 'x', sizeof(alias) - 1);
    alias[sizeof(alias) - 1] = '\0';
    memcpy(team, alias, sizeof(team));
    memcpy(user, alias, sizeof(user));
    for (size_t i = 0; i < RT_METRICS_LITELLM_KEY_SERIES + extra; i++) {
        char c = (char)('0' + i % 10);

        key_init(&k, c, alias, team, user);
        snprintf(k.hash, sizeof(k.hash), "%064zx", i);
        rt_metrics_attempt(m, &k, "main-1", 500, RT_ERR_SERVER);
        rt_metrics_attempt(m, &k, "main-1", 200, RT_ERR_NONE);
        event(&ev, &k, "main-1", 200, 1, 2, 1000, 10);
        ev.key_hash[0] = '\0';
        snprintf(ev.key_hash, sizeof(ev.key_hash), "%s", k.hash);
        rt_metrics_event(m, &ev);
    }
    text = scrape(m, &buf);
    expect_well_formed(text);
    /* every set in use, at its largest label values: a quarter of the body at most */
    assert_true(buf.len < RT_METRICS_BODY_MAX_BYTES / 4);
    /* 3 observations per pair past the bound */
    {
        char want[128];

        snprintf(want, sizeof(want), "tollgate_router_litellm_overflow_total %zu", 3 * extra);
        expect_line(text, want);
    }
    assert_non_null(strstr(text, "litellm_requests_metric_total{end_user=\"\","
                                 "hashed_api_key=\"__overflow__\",api_key_alias=\"\",model=\"m1\","
                                 "team=\"\",team_alias=\"\",user=\"\",user_email=\"\"} 5\n"));
    assert_non_null(strstr(text, "model_id=\"main-1\",api_base=\"http://127.0.0.1:9/v1\","
                                 "api_provider=\"openai\",hashed_api_key=\"__overflow__\","
                                 "api_key_alias=\"\",team=\"\",team_alias=\"\"} 5\n"));
    tg_buf_fini(&buf);
    rt_metrics_destroy(&m);
    rt_config_destroy(&cfg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_litellm_series_after_requests),
        cmocka_unit_test(test_many_deployments),
        cmocka_unit_test(test_litellm_label_sets_are_bounded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
