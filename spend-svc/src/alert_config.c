/* alert_config: defaults and the `alerting:` section of spend-svc's YAML for the alerter. The
 * functions are declared in alerter.h. Error messages name the file, line and key, never a
 * value: a webhook URL is a credential. */
#include "alerter.h"

#include <yaml.h>

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tg_cfgtext.h"
#include "tg_err.h"

#define ENV_PREFIX "os.environ/"
/* Longest scalar accepted anywhere in the section, bytes. */
#define SCALAR_MAX_BYTES (SP_ALERTER_URL_CAP - 1)

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

struct parse_ctx {
    yaml_document_t *doc;
    const char *file;
    char *err;
    size_t errlen;
};

static int cfg_fail(struct parse_ctx *c, const yaml_node_t *node, const char *key, const char *fmt,
                    ...) __attribute__((format(printf, 4, 5)));

static int cfg_fail(struct parse_ctx *c, const yaml_node_t *node, const char *key, const char *fmt,
                    ...)
{
    va_list ap;
    int n;
    unsigned long line = node != NULL ? (unsigned long)node->start_mark.line + 1 : 0;

    if (c->err == NULL || c->errlen == 0)
        return TG_ECONFIG;
    n = snprintf(c->err, c->errlen, "%s:%lu: alerting%s%s: ", c->file != NULL ? c->file : "-", line,
                 key[0] != '\0' ? "." : "", key);
    if (n >= 0 && (size_t)n < c->errlen) {
        va_start(ap, fmt);
        vsnprintf(c->err + n, c->errlen - (size_t)n, fmt, ap);
        va_end(ap);
    }
    return TG_ECONFIG;
}

/* The scalar value of node with os.environ/NAME resolved, copied into out (SCALAR_MAX_BYTES+1
 * bytes). */
static int cfg_scalar(struct parse_ctx *c, const yaml_node_t *node, const char *key,
                      char out[SCALAR_MAX_BYTES + 1])
{
    const char *v;
    size_t len;
    char why[160];

    if (node == NULL || node->type != YAML_SCALAR_NODE)
        return cfg_fail(c, node, key, "expected a single value");
    v = (const char *)node->data.scalar.value;
    if (tg_cfgtext_check(v, node->data.scalar.length, NULL, why, sizeof(why)) != 0)
        return cfg_fail(c, node, key, "%s", why);
    if (strncmp(v, ENV_PREFIX, strlen(ENV_PREFIX)) == 0) {
        const char *name = v + strlen(ENV_PREFIX);
        const char *ev;

        if (name[0] == '\0')
            return cfg_fail(c, node, key, "os.environ/ needs a variable name");
        ev = getenv(name);
        if (ev == NULL || ev[0] == '\0')
            return cfg_fail(c, node, key, "environment variable %.64s is not set", name);
        if (tg_cfgtext_check(ev, (size_t)-1, name, why, sizeof(why)) != 0)
            return cfg_fail(c, node, key, "%s", why);
        v = ev;
    }
    len = strlen(v);
    if (len > SCALAR_MAX_BYTES)
        return cfg_fail(c, node, key, "value longer than %d bytes", SCALAR_MAX_BYTES);
    memcpy(out, v, len + 1);
    return 0;
}

static int cfg_u64(struct parse_ctx *c, const yaml_node_t *node, const char *key, uint64_t lo,
                   uint64_t hi, uint64_t *out)
{
    char buf[SCALAR_MAX_BYTES + 1];
    char *end = NULL;
    unsigned long long v;
    int rc = cfg_scalar(c, node, key, buf);

    if (rc != 0)
        return rc;
    errno = 0;
    if (buf[0] < '0' || buf[0] > '9')
        return cfg_fail(c, node, key, "expected a whole number");
    v = strtoull(buf, &end, 10);
    if (errno != 0 || end == buf || *end != '\0')
        return cfg_fail(c, node, key, "expected a whole number");
    if (v < lo || v > hi)
        return cfg_fail(c, node, key, "must be between %llu and %llu", (unsigned long long)lo,
                        (unsigned long long)hi);
    *out = v;
    return 0;
}

static int cfg_u32(struct parse_ctx *c, const yaml_node_t *node, const char *key, uint32_t lo,
                   uint32_t hi, uint32_t *out)
{
    uint64_t v;
    int rc = cfg_u64(c, node, key, lo, hi, &v);

    if (rc == 0)
        *out = (uint32_t)v;
    return rc;
}

static int cfg_double(struct parse_ctx *c, const yaml_node_t *node, const char *key, double lo,
                      double hi, int lo_inclusive, double *out)
{
    char buf[SCALAR_MAX_BYTES + 1];
    char *end = NULL;
    double v;
    int rc = cfg_scalar(c, node, key, buf);

    if (rc != 0)
        return rc;
    errno = 0;
    v = strtod(buf, &end);
    if (errno != 0 || end == buf || *end != '\0' || !isfinite(v))
        return cfg_fail(c, node, key, "expected a number");
    if ((lo_inclusive ? v < lo : v <= lo) || v > hi)
        return cfg_fail(c, node, key, "must be %s %g and at most %g",
                        lo_inclusive ? "at least" : "greater than", lo, hi);
    *out = v;
    return 0;
}

/* A webhook URL: http(s)://, no spaces or control bytes, fits. Never echoed in messages. An
 * empty literal ("" or no value) means no webhook; an os.environ/NAME that is unset or empty
 * is an error like everywhere else. */
static int cfg_url(struct parse_ctx *c, const yaml_node_t *node, const char *key,
                   char out[SP_ALERTER_URL_CAP])
{
    char buf[SCALAR_MAX_BYTES + 1];
    int rc;

    if (node != NULL && node->type == YAML_SCALAR_NODE && node->data.scalar.length == 0) {
        out[0] = '\0';
        return 0;
    }
    rc = cfg_scalar(c, node, key, buf);
    if (rc != 0)
        return rc;
    if (strncmp(buf, "http://", 7) != 0 && strncmp(buf, "https://", 8) != 0)
        return cfg_fail(c, node, key, "not an http:// or https:// URL");
    for (const unsigned char *p = (const unsigned char *)buf; *p != '\0'; p++) {
        if (*p <= 0x20 || *p == 0x7f)
            return cfg_fail(c, node, key, "URL contains a space or control character");
    }
    if (strchr(strstr(buf, "://") + 3, '/') == NULL)
        return cfg_fail(c, node, key, "URL has no path");
    memcpy(out, buf, strlen(buf) + 1);
    return 0;
}

static int cfg_type_key(struct parse_ctx *c, const yaml_node_t *node, const char *key)
{
    int t;

    if (node == NULL || node->type != YAML_SCALAR_NODE)
        return cfg_fail(c, node, key, "expected an alert type name");
    t = sp_alert_type_parse((const char *)node->data.scalar.value);
    if (t < 0)
        return cfg_fail(c, node, key,
                        "unknown alert type (budget, deployment_failures, slow_requests, "
                        "spend_tracking_degraded, consumer_lag, daily_report)");
    return t;
}

static int cfg_webhook_map(struct parse_ctx *c, yaml_node_t *node, struct sp_alerter_config *cfg)
{
    const char *key = "alert_to_webhook_url";

    if (node->type == YAML_SCALAR_NODE && node->data.scalar.length == 0)
        return 0;
    if (node->type != YAML_MAPPING_NODE)
        return cfg_fail(c, node, key, "expected a mapping {type: url}");
    for (yaml_node_pair_t *p = node->data.mapping.pairs.start; p < node->data.mapping.pairs.top;
         p++) {
        yaml_node_t *k = yaml_document_get_node(c->doc, p->key);
        yaml_node_t *v = yaml_document_get_node(c->doc, p->value);
        char sub[96];
        int t = cfg_type_key(c, k, key);
        int rc;

        if (t < 0)
            return t;
        snprintf(sub, sizeof(sub), "%s.%s", key, sp_alert_type_name(t));
        rc = cfg_url(c, v, sub, cfg->type_webhook_url[t]);
        if (rc != 0)
            return rc;
    }
    return 0;
}

static int cfg_types(struct parse_ctx *c, yaml_node_t *node, struct sp_alerter_config *cfg)
{
    const char *key = "alert_types";
    uint32_t mask = 0;

    if (node->type != YAML_SEQUENCE_NODE)
        return cfg_fail(c, node, key, "expected a list of alert types");
    for (yaml_node_item_t *it = node->data.sequence.items.start; it < node->data.sequence.items.top;
         it++) {
        int t = cfg_type_key(c, yaml_document_get_node(c->doc, *it), key);

        if (t < 0)
            return t;
        mask |= 1u << t;
    }
    cfg->enabled_types = mask;
    return 0;
}

static int cfg_thresholds(struct parse_ctx *c, yaml_node_t *node, struct sp_alerter_config *cfg)
{
    const char *key = "budget_thresholds";
    uint32_t n = 0;

    if (node->type != YAML_SEQUENCE_NODE)
        return cfg_fail(c, node, key, "expected a list of percentages");
    for (yaml_node_item_t *it = node->data.sequence.items.start; it < node->data.sequence.items.top;
         it++) {
        yaml_node_t *v = yaml_document_get_node(c->doc, *it);
        uint32_t pct;
        int rc;

        if (n == SP_ALERTER_BUDGET_THRESHOLDS_MAX)
            return cfg_fail(c, v, key, "at most %d thresholds", SP_ALERTER_BUDGET_THRESHOLDS_MAX);
        rc = cfg_u32(c, v, key, 1, 1000, &pct);
        if (rc != 0)
            return rc;
        if (n > 0 && pct <= cfg->budget_thresholds[n - 1])
            return cfg_fail(c, v, key, "thresholds must be ascending");
        cfg->budget_thresholds[n++] = pct;
    }
    if (n == 0)
        return cfg_fail(c, node, key, "at least one threshold");
    cfg->nbudget_thresholds = n;
    return 0;
}

static int cfg_report_hour(struct parse_ctx *c, yaml_node_t *node, struct sp_alerter_config *cfg)
{
    const char *key = "daily_report_hour";
    char buf[SCALAR_MAX_BYTES + 1];
    uint32_t h;
    int rc;

    rc = cfg_scalar(c, node, key, buf);
    if (rc != 0)
        return rc;
    if (strcmp(buf, "off") == 0 || strcmp(buf, "-1") == 0) {
        cfg->daily_report_hour = -1;
        return 0;
    }
    rc = cfg_u32(c, node, key, 0, 23, &h);
    if (rc != 0)
        return rc;
    cfg->daily_report_hour = (int)h;
    return 0;
}

/* Plain numeric keys: name, where, range. */
struct u32_key {
    const char *name;
    size_t offset;
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

int sp_alerter_config_parse(yaml_document_t *doc, yaml_node_t *alerting_node, const char *file,
                            struct sp_alerter_config *cfg, char *err, size_t errlen)
{
    struct parse_ctx c = {doc, file, err, errlen};

    if (alerting_node == NULL)
        return 0;
    if (alerting_node->type == YAML_SCALAR_NODE && alerting_node->data.scalar.length == 0)
        return 0;
    if (alerting_node->type != YAML_MAPPING_NODE)
        return cfg_fail(&c, alerting_node, "", "expected a mapping");
    for (yaml_node_pair_t *p = alerting_node->data.mapping.pairs.start;
         p < alerting_node->data.mapping.pairs.top; p++) {
        yaml_node_t *k = yaml_document_get_node(doc, p->key);
        yaml_node_t *v = yaml_document_get_node(doc, p->value);
        const char *key;
        int rc = 0;
        int known = 1;

        if (k == NULL || k->type != YAML_SCALAR_NODE)
            return cfg_fail(&c, k, "", "keys must be names");
        if (v == NULL)
            return cfg_fail(&c, k, "", "missing value");
        key = (const char *)k->data.scalar.value;
        if (strcmp(key, "default_webhook_url") == 0) {
            rc = cfg_url(&c, v, key, cfg->default_webhook_url);
        } else if (strcmp(key, "alert_to_webhook_url") == 0) {
            rc = cfg_webhook_map(&c, v, cfg);
        } else if (strcmp(key, "alert_types") == 0) {
            rc = cfg_types(&c, v, cfg);
        } else if (strcmp(key, "rate_per_second") == 0) {
            rc = cfg_double(&c, v, key, 0.0, 100.0, 0, &cfg->rate_per_second);
        } else if (strcmp(key, "failure_ratio") == 0) {
            rc = cfg_double(&c, v, key, 0.0, 1.0, 0, &cfg->failure_ratio);
        } else if (strcmp(key, "budget_thresholds") == 0) {
            rc = cfg_thresholds(&c, v, cfg);
        } else if (strcmp(key, "consumer_lag_threshold") == 0) {
            rc = cfg_u64(&c, v, key, 1, UINT64_MAX / 2, &cfg->consumer_lag_threshold);
        } else if (strcmp(key, "daily_report_hour") == 0) {
            rc = cfg_report_hour(&c, v, cfg);
        } else {
            known = 0;
            for (size_t i = 0; i < sizeof(u32_keys) / sizeof(u32_keys[0]); i++) {
                if (strcmp(key, u32_keys[i].name) != 0)
                    continue;
                rc = cfg_u32(&c, v, key, u32_keys[i].lo, u32_keys[i].hi,
                             (uint32_t *)((char *)cfg + u32_keys[i].offset));
                known = 1;
                break;
            }
        }
        if (!known)
            return cfg_fail(&c, k, key, "unknown key");
        if (rc != 0)
            return rc;
    }
    if (cfg->retry_max_ms < cfg->retry_base_ms)
        return cfg_fail(&c, alerting_node, "retry_max_ms", "must be at least retry_base_ms");
    return 0;
}
