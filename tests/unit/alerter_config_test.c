/* alerter config unit tests: the `alerting:` section of spend-svc's YAML. Defaults, every key,
 * os.environ/NAME values, and errors as "FILE:LINE: alerting.key: problem" that never echo a
 * value (a webhook URL is a credential). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <yaml.h>

#include "alerter.h"
#include "tg_err.h"
#include "tg_yaml.h"

/* Where tg_yaml's first error goes. */
struct errbuf {
    char *err;
    size_t errlen;
};

static void sink(void *ud, int is_error, const char *line)
{
    struct errbuf *e = ud;

    if (is_error)
        snprintf(e->err, e->errlen, "%s", line);
}

/* Parse yaml text, find the top-level "alerting" node and apply it over the defaults. */
static int parse(const char *text, struct sp_alerter_config *cfg, char *err, size_t errlen)
{
    struct errbuf e = {err, errlen};
    struct tg_yaml y;
    yaml_node_t *root;
    yaml_node_t *alerting = NULL;
    int rc;

    sp_alerter_config_defaults(cfg);
    err[0] = '\0';
    assert_int_equal(tg_yaml_open(&y, "spend.yaml", text, strlen(text), sink, &e), 0);
    root = tg_yaml_root(&y);
    assert_non_null(root);
    assert_int_equal(root->type, YAML_MAPPING_NODE);
    TG_YAML_FOR_PAIRS(root, pair)
    {
        yaml_node_t *k = tg_yaml_node(&y, pair->key);

        if (strcmp((const char *)k->data.scalar.value, "alerting") == 0)
            alerting = tg_yaml_node(&y, pair->value);
    }
    rc = sp_alerter_config_parse(&y, alerting, cfg);
    tg_yaml_close(&y);
    return rc;
}

static void test_defaults(void **state)
{
    struct sp_alerter_config c;
    char err[256];

    (void)state;
    assert_int_equal(parse("listen: 0.0.0.0:4001\n", &c, err, sizeof(err)), 0);
    assert_string_equal(c.default_webhook_url, "");
    assert_int_equal(c.enabled_types, (1u << SP_ALERT_TYPE_COUNT) - 1);
    assert_true(c.rate_per_second == 1.0);
    assert_int_equal(c.burst, 3);
    assert_int_equal(c.dedupe_window_s, 600);
    assert_int_equal(c.reminder_interval_s, 1800);
    assert_int_equal(c.queue_capacity, 256);
    assert_int_equal(c.max_tries, 5);
    assert_int_equal(c.nbudget_thresholds, 3);
    assert_int_equal(c.budget_thresholds[0], 50);
    assert_int_equal(c.budget_thresholds[1], 80);
    assert_int_equal(c.budget_thresholds[2], 100);
    assert_int_equal(c.daily_report_hour, 9);
    assert_int_equal(c.recovery_hold_s, 5);
}

static void test_full_section(void **state)
{
    struct sp_alerter_config c;
    char err[256];
    const char *y = "alerting:\n"
                    "  default_webhook_url: os.environ/TG_TEST_SLACK_URL\n"
                    "  alert_to_webhook_url: {budget: 'https://hooks.example/b/1',\n"
                    "                         daily_report: os.environ/TG_TEST_SLACK_URL}\n"
                    "  alert_types: [budget, daily_report, spend_tracking_degraded]\n"
                    "  rate_per_second: 0.5\n"
                    "  burst: 2\n"
                    "  dedupe_window_s: 30\n"
                    "  reminder_interval_s: 120\n"
                    "  queue_capacity: 64\n"
                    "  max_tries: 3\n"
                    "  budget_thresholds: [25, 90, 100, 120]\n"
                    "  failure_window_s: 10\n"
                    "  failure_ratio: 0.25\n"
                    "  failure_min_requests: 4\n"
                    "  failure_count: 7\n"
                    "  slow_request_threshold_ms: 1500\n"
                    "  slow_request_window_s: 20\n"
                    "  slow_request_count: 2\n"
                    "  consumer_lag_threshold: 5000\n"
                    "  daily_report_hour: 'off'\n"
                    "  recovery_hold_s: 0\n";

    (void)state;
    setenv("TG_TEST_SLACK_URL", "http://127.0.0.1:9/slack/T/B/c", 1);
    assert_int_equal(parse(y, &c, err, sizeof(err)), 0);
    assert_string_equal(c.default_webhook_url, "http://127.0.0.1:9/slack/T/B/c");
    assert_string_equal(c.type_webhook_url[SP_ALERT_BUDGET], "https://hooks.example/b/1");
    assert_string_equal(c.type_webhook_url[SP_ALERT_DAILY_REPORT],
                        "http://127.0.0.1:9/slack/T/B/c");
    assert_string_equal(c.type_webhook_url[SP_ALERT_CONSUMER_LAG], "");
    assert_int_equal(c.enabled_types, (1u << SP_ALERT_BUDGET) | (1u << SP_ALERT_DAILY_REPORT) |
                                          (1u << SP_ALERT_SPEND_TRACKING_DEGRADED));
    assert_true(c.rate_per_second == 0.5);
    assert_int_equal(c.burst, 2);
    assert_int_equal(c.dedupe_window_s, 30);
    assert_int_equal(c.reminder_interval_s, 120);
    assert_int_equal(c.queue_capacity, 64);
    assert_int_equal(c.max_tries, 3);
    assert_int_equal(c.nbudget_thresholds, 4);
    assert_int_equal(c.budget_thresholds[3], 120);
    assert_int_equal(c.failure_window_s, 10);
    assert_true(c.failure_ratio == 0.25);
    assert_int_equal(c.failure_min_requests, 4);
    assert_int_equal(c.failure_count, 7);
    assert_int_equal(c.slow_request_threshold_ms, 1500);
    assert_int_equal(c.slow_request_window_s, 20);
    assert_int_equal(c.slow_request_count, 2);
    assert_int_equal(c.consumer_lag_threshold, 5000);
    assert_int_equal(c.daily_report_hour, -1);
    assert_int_equal(c.recovery_hold_s, 0);
    unsetenv("TG_TEST_SLACK_URL");
}

/* Every error names file, line and key, and never the value. */
static void expect_error(const char *yaml, const char *want, const char *never)
{
    struct sp_alerter_config c;
    char err[256];

    assert_int_equal(parse(yaml, &c, err, sizeof(err)), TG_ECONFIG);
    if (strstr(err, want) == NULL)
        fail_msg("error \"%s\" lacks \"%s\"", err, want);
    if (never != NULL && strstr(err, never) != NULL)
        fail_msg("error \"%s\" reveals \"%s\"", err, never);
}

static void test_errors(void **state)
{
    (void)state;
    unsetenv("TG_TEST_UNSET_URL");
    expect_error("alerting:\n  default_webhook_url: os.environ/TG_TEST_UNSET_URL\n",
                 "spend.yaml:2: alerting.default_webhook_url: environment variable "
                 "TG_TEST_UNSET_URL is not set",
                 NULL);
    expect_error("alerting:\n  default_webhook_url: ftp://secret-host/hush-hush\n",
                 "spend.yaml:2: alerting.default_webhook_url: not an http", "hush-hush");
    expect_error("alerting:\n  alert_to_webhook_url:\n    budget: 'http://x/hush hush'\n",
                 "spend.yaml:3: alerting.alert_to_webhook_url.budget: URL contains a space",
                 "hush");
    expect_error("alerting:\n  alert_to_webhook_url: {bugdet: 'http://x/y'}\n",
                 "spend.yaml:2: alerting.alert_to_webhook_url: unknown alert type", NULL);
    expect_error("alerting:\n  burst: 0\n", "spend.yaml:2: alerting.burst: must be between 1",
                 NULL);
    /* a webhook URL with a CR/LF would go into the request head */
    expect_error("alerting:\n  default_webhook_url: \"http://x/hush\\r\\nX-A: 1\"\n",
                 "spend.yaml:2: alerting.default_webhook_url: contains a control character "
                 "(0x0d at byte 13)",
                 "hush");
    expect_error("alerting:\n  burst: three\n",
                 "spend.yaml:2: alerting.burst: expected a non-negative integer", NULL);
    expect_error("alerting:\n  burst: -3\n",
                 "spend.yaml:2: alerting.burst: expected a non-negative integer", NULL);
    expect_error("alerting:\n  rate_per_second: 0\n",
                 "spend.yaml:2: alerting.rate_per_second: must be greater than 0", NULL);
    expect_error("alerting:\n  failure_ratio: 1.5\n", "alerting.failure_ratio:", NULL);
    expect_error("alerting:\n  queue_capacity: 0\n", "alerting.queue_capacity:", NULL);
    expect_error("alerting:\n\n  alert_types: [budget, nope]\n",
                 "spend.yaml:3: alerting.alert_types: unknown alert type", NULL);
    expect_error("alerting:\n  budget_thresholds: [80, 50]\n",
                 "alerting.budget_thresholds: thresholds must be ascending", NULL);
    expect_error("alerting:\n  budget_thresholds: [1, 2, 3, 4, 5, 6, 7, 8, 9]\n",
                 "alerting.budget_thresholds: at most 8", NULL);
    expect_error("alerting:\n  daily_report_hour: 24\n", "alerting.daily_report_hour:", NULL);
    expect_error("alerting:\n  rate_limit: 3\n", "spend.yaml:2: alerting.rate_limit: unknown key",
                 NULL);
    expect_error("alerting: [1, 2]\n", "spend.yaml:1: alerting: expected a mapping", NULL);
    expect_error("alerting:\n  burst: [1]\n", "alerting.burst: expected a scalar value", NULL);
}

/* A webhook URL from a variable that is set but empty is an error naming the variable (an empty
 * literal is "no webhook"; an empty secret is a mistake). */
static void test_empty_env_url(void **state)
{
    (void)state;
    setenv("TG_TEST_EMPTY_URL", "", 1);
    expect_error("alerting:\n  default_webhook_url: os.environ/TG_TEST_EMPTY_URL\n",
                 "spend.yaml:2: alerting.default_webhook_url: environment variable "
                 "TG_TEST_EMPTY_URL is empty",
                 NULL);
    expect_error("alerting:\n  alert_to_webhook_url: {budget: os.environ/TG_TEST_EMPTY_URL}\n",
                 "spend.yaml:2: alerting.alert_to_webhook_url.budget: environment variable "
                 "TG_TEST_EMPTY_URL is empty",
                 NULL);
    unsetenv("TG_TEST_EMPTY_URL");
}

/* An empty literal URL means no webhook (the type falls back or is disabled). */
static void test_empty_url(void **state)
{
    struct sp_alerter_config c;
    char err[256];

    (void)state;
    assert_int_equal(parse("alerting:\n  default_webhook_url: \"\"\n"
                           "  alert_to_webhook_url: {budget: }\n",
                           &c, err, sizeof(err)),
                     0);
    assert_string_equal(c.default_webhook_url, "");
    assert_string_equal(c.type_webhook_url[SP_ALERT_BUDGET], "");
}

/* An empty section or none at all keeps the defaults. */
static void test_empty_section(void **state)
{
    struct sp_alerter_config c;
    char err[256];

    (void)state;
    assert_int_equal(parse("alerting:\n", &c, err, sizeof(err)), 0);
    assert_int_equal(c.burst, 3);
    assert_int_equal(sp_alerter_config_parse(NULL, NULL, &c), 0);
    assert_int_equal(c.burst, 3);
}

/* create() validates what parse cannot see (a config built in code). */
static void test_create_validates(void **state)
{
    struct sp_alerter_config c;
    char err[256];

    (void)state;
    sp_alerter_config_defaults(&c);
    c.queue_capacity = 0;
    assert_null(sp_alerter_create(&c, err, sizeof(err)));
    assert_non_null(strstr(err, "queue_capacity"));
    sp_alerter_config_defaults(&c);
    strcpy(c.default_webhook_url, "gopher://x/hush");
    assert_null(sp_alerter_create(&c, err, sizeof(err)));
    assert_null(strstr(err, "hush"));
    assert_null(sp_alerter_create(NULL, err, sizeof(err)));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),  cmocka_unit_test(test_full_section),
        cmocka_unit_test(test_errors),    cmocka_unit_test(test_empty_section),
        cmocka_unit_test(test_empty_url), cmocka_unit_test(test_create_validates),
        cmocka_unit_test(test_empty_env_url),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
