/* alert_config: defaults and the `alerting:` section of spend-svc's YAML for the alerter, read
 * through common's tg_yaml. The functions are declared in alerter.h. Error messages name the
 * file, line and key, never a value: a webhook URL is a credential. */
#include "alerter.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <yaml.h>

#include "tg_err.h"
#include "tg_yaml.h"

#define SECTION "alerting"

void sp_alerter_config_defaults(struct sp_alerter_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->enabled_types = (1u << SP_ALERT_TYPE_COUNT) - 1u;
    cfg->rate_per_second = 1.0;
    cfg->burst = 3;
    cfg->dedupe_window_s = 600;
    cfg->reminder_interval_s = 1800;
    cfg->recovery_hold_s = 5;
    cfg->queue_capacity = 256;
    cfg->max_tries = 5;
    cfg->dedupe_capacity = 1024;
    cfg->retry_base_ms = 500;
    cfg->retry_max_ms = 30000;
    cfg->retry_after_max_s = 300;
    cfg->shutdown_wait_ms = 2000;
    cfg->budget_thresholds[0] = 50;
    cfg->budget_thresholds[1] = 80;
    cfg->budget_thresholds[2] = 100;
    cfg->nbudget_thresholds = 3;
    cfg->failure_window_s = 60;
    cfg->failure_ratio = 0.5;
    cfg->failure_min_requests = 10;
    cfg->failure_count = 20;
    cfg->deployments_capacity = 1024;
    cfg->slow_request_threshold_ms = 30000;
    cfg->slow_request_window_s = 300;
    cfg->slow_request_count = 5;
    cfg->model_groups_capacity = 256;
    cfg->consumer_lag_threshold = 100000;
    cfg->daily_report_hour = 9;
}

/* A webhook URL: http(s)://, no spaces or control bytes, fits. Never echoed in messages. An
 * empty literal ("" or no value) means no webhook; an os.environ/NAME that is unset or empty
 * is an error like everywhere else. */
static int read_url(struct tg_yaml *y, const yaml_node_t *node, const char *path,
                    char out[SP_ALERTER_URL_CAP])
{
    char buf[SP_ALERTER_URL_CAP];

    if (node != NULL && node->type == YAML_SCALAR_NODE && node->data.scalar.length == 0) {
        out[0] = '\0';
        return 0;
    }
    if (tg_yaml_str(y, node, path, buf, sizeof(buf)) != 0)
        return TG_ECONFIG;
    if (buf[0] == '\0') /* not the literal (above): the variable it names is empty */
        return tg_yaml_fail(y, node, path, "environment variable %.64s is empty",
                            (const char *)node->data.scalar.value + strlen(TG_YAML_ENV_PREFIX));
    if (strncmp(buf, "http://", 7) != 0 && strncmp(buf, "https://", 8) != 0)
        return tg_yaml_fail(y, node, path, "not an http:// or https:// URL");
    for (const unsigned char *p = (const unsigned char *)buf; *p != '\0'; p++) {
        if (*p <= 0x20 || *p == 0x7f)
            return tg_yaml_fail(y, node, path, "URL contains a space or control character");
    }
    if (strchr(strstr(buf, "://") + 3, '/') == NULL)
        return tg_yaml_fail(y, node, path, "URL has no path");
    memcpy(out, buf, strlen(buf) + 1);
    return 0;
}

/* An alert type's name (a key of alert_to_webhook_url, an item of alert_types), as written:
 * the type, or TG_ECONFIG. */
static int read_type(struct tg_yaml *y, const yaml_node_t *node, const char *path)
{
    int t;

    if (node == NULL || node->type != YAML_SCALAR_NODE)
        return tg_yaml_fail(y, node, path, "expected an alert type name");
    t = sp_alert_type_parse((const char *)node->data.scalar.value);
    if (t < 0)
        return tg_yaml_fail(y, node, path,
                            "unknown alert type (budget, deployment_failures, slow_requests, "
                            "spend_tracking_degraded, consumer_lag, daily_report)");
    return t;
}

static int read_webhook_map(struct tg_yaml *y, const yaml_node_t *node, const char *path,
                            struct sp_alerter_config *cfg)
{
    char sub[TG_YAML_PATH_MAX];

    if (node != NULL && node->type == YAML_SCALAR_NODE && node->data.scalar.length == 0)
        return 0;
    if (node == NULL || node->type != YAML_MAPPING_NODE)
        return tg_yaml_fail(y, node, path, "expected a mapping {type: url}");
    TG_YAML_FOR_PAIRS(node, pair)
    {
        int t = read_type(y, tg_yaml_node(y, pair->key), path);

        if (t < 0)
            return t;
        tg_yaml_path(sub, path, sp_alert_type_name(t));
        if (read_url(y, tg_yaml_node(y, pair->value), sub, cfg->type_webhook_url[t]) != 0)
            return TG_ECONFIG;
    }
    return 0;
}

static int read_types(struct tg_yaml *y, const yaml_node_t *node, const char *path,
                      struct sp_alerter_config *cfg)
{
    uint32_t mask = 0;

    if (node == NULL || node->type != YAML_SEQUENCE_NODE)
        return tg_yaml_fail(y, node, path, "expected a list of alert types");
    TG_YAML_FOR_ITEMS(node, item)
    {
        int t = read_type(y, tg_yaml_node(y, *item), path);

        if (t < 0)
            return t;
        mask |= 1u << t;
    }
    cfg->enabled_types = mask;
    return 0;
}

static int read_thresholds(struct tg_yaml *y, const yaml_node_t *node, const char *path,
                           struct sp_alerter_config *cfg)
{
    uint32_t n = 0;

    if (node == NULL || node->type != YAML_SEQUENCE_NODE)
        return tg_yaml_fail(y, node, path, "expected a list of percentages");
    TG_YAML_FOR_ITEMS(node, item)
    {
        const yaml_node_t *v = tg_yaml_node(y, *item);
        uint32_t pct;

        if (n == SP_ALERTER_BUDGET_THRESHOLDS_MAX)
            return tg_yaml_fail(y, v, path, "at most %d thresholds",
                                SP_ALERTER_BUDGET_THRESHOLDS_MAX);
        if (tg_yaml_u32_range(y, v, path, 1, 1000, &pct) != 0)
            return TG_ECONFIG;
        if (n > 0 && pct <= cfg->budget_thresholds[n - 1])
            return tg_yaml_fail(y, v, path, "thresholds must be ascending");
        cfg->budget_thresholds[n++] = pct;
    }
    if (n == 0)
        return tg_yaml_fail(y, node, path, "at least one threshold");
    cfg->nbudget_thresholds = n;
    return 0;
}

/* daily_report_hour: 0..23, or off / -1 for no daily report. */
static int read_report_hour(struct tg_yaml *y, const yaml_node_t *node, const char *path,
                            struct sp_alerter_config *cfg)
{
    const char *v = NULL;
    uint32_t h;

    if (tg_yaml_scalar(y, node, path, &v) != 0)
        return TG_ECONFIG;
    if (strcmp(v, "off") == 0 || strcmp(v, "-1") == 0) {
        cfg->daily_report_hour = -1;
        return 0;
    }
    if (tg_yaml_u32_range(y, node, path, 0, 23, &h) != 0)
        return TG_ECONFIG;
    cfg->daily_report_hour = (int)h;
    return 0;
}

/* Plain numeric keys: name, where, range. */
struct u32_key {
    const char *name;
    size_t offset; /* into struct sp_alerter_config */
    uint32_t lo, hi;
};

#define U32_KEY(field, lo, hi)                                                                     \
    {                                                                                              \
#field, offsetof(struct sp_alerter_config, field), lo, hi                                  \
    }

static const struct u32_key u32_keys[] = {
    U32_KEY(burst, 1, 1000),
    U32_KEY(dedupe_window_s, 0, 7 * 86400),
    U32_KEY(reminder_interval_s, 1, 7 * 86400),
    U32_KEY(recovery_hold_s, 0, 3600),
    U32_KEY(queue_capacity, 1, 65536),
    U32_KEY(max_tries, 1, 20),
    U32_KEY(dedupe_capacity, 1, 1000000),
    U32_KEY(retry_base_ms, 1, 600000),
    U32_KEY(retry_max_ms, 1, 3600000),
    U32_KEY(retry_after_max_s, 1, 86400),
    U32_KEY(shutdown_wait_ms, 0, 60000),
    U32_KEY(failure_window_s, 1, 86400),
    U32_KEY(failure_min_requests, 1, 1000000000),
    U32_KEY(failure_count, 1, 1000000000),
    U32_KEY(deployments_capacity, 1, 1000000),
    U32_KEY(slow_request_threshold_ms, 1, 3600000),
    U32_KEY(slow_request_window_s, 1, 86400),
    U32_KEY(slow_request_count, 1, 1000000000),
    U32_KEY(model_groups_capacity, 1, 1000000),
};

/* read_key: one key of the section. Returns 0, TG_ECONFIG, or 1 when key is not one. */
static int read_key(struct tg_yaml *y, const char *key, const yaml_node_t *v, const char *path,
                    struct sp_alerter_config *cfg)
{
    if (strcmp(key, "default_webhook_url") == 0)
        return read_url(y, v, path, cfg->default_webhook_url);
    if (strcmp(key, "alert_to_webhook_url") == 0)
        return read_webhook_map(y, v, path, cfg);
    if (strcmp(key, "alert_types") == 0)
        return read_types(y, v, path, cfg);
    if (strcmp(key, "rate_per_second") == 0)
        return tg_yaml_double_range(y, v, path, 0.0, 0, 100.0, &cfg->rate_per_second);
    if (strcmp(key, "failure_ratio") == 0)
        return tg_yaml_double_range(y, v, path, 0.0, 0, 1.0, &cfg->failure_ratio);
    if (strcmp(key, "budget_thresholds") == 0)
        return read_thresholds(y, v, path, cfg);
    if (strcmp(key, "consumer_lag_threshold") == 0)
        return tg_yaml_u64_range(y, v, path, 1, UINT64_MAX / 2, &cfg->consumer_lag_threshold);
    if (strcmp(key, "daily_report_hour") == 0)
        return read_report_hour(y, v, path, cfg);
    for (size_t i = 0; i < sizeof(u32_keys) / sizeof(u32_keys[0]); i++) {
        if (strcmp(key, u32_keys[i].name) == 0)
            return tg_yaml_u32_range(y, v, path, u32_keys[i].lo, u32_keys[i].hi,
                                     (uint32_t *)(void *)((char *)cfg + u32_keys[i].offset));
    }
    return 1;
}

int sp_alerter_config_parse(struct tg_yaml *y, const yaml_node_t *alerting_node,
                            struct sp_alerter_config *cfg)
{
    char p[TG_YAML_PATH_MAX];

    if (alerting_node == NULL)
        return 0;
    if (alerting_node->type == YAML_SCALAR_NODE && alerting_node->data.scalar.length == 0)
        return 0;
    if (tg_yaml_expect(y, alerting_node, SECTION, YAML_MAPPING_NODE) != 0)
        return TG_ECONFIG;
    TG_YAML_FOR_PAIRS(alerting_node, pair)
    {
        const char *key = tg_yaml_key(y, pair, SECTION);
        int rc;

        if (key == NULL)
            return TG_ECONFIG;
        tg_yaml_path(p, SECTION, key);
        rc = read_key(y, key, tg_yaml_node(y, pair->value), p, cfg);
        if (rc == 1)
            return tg_yaml_fail(y, tg_yaml_node(y, pair->key), p, "unknown key");
        if (rc != 0)
            return rc;
    }
    if (cfg->retry_max_ms < cfg->retry_base_ms)
        return tg_yaml_fail(y, alerting_node, SECTION ".retry_max_ms",
                            "must be at least retry_base_ms");
    return 0;
}
