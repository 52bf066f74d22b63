#include "config.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <yaml.h>

#include "tg_cfgtext.h"
#include "tg_err.h"
#include "tg_kafka_opts.h"
#include "tg_period.h"
#include "tg_units.h"
#include "tg_yaml.h"

/* Parsing context: the document and where errors go. */
struct cfg_ctx {
    yaml_document_t *doc;
    const char *file;
    char *err;
    size_t errlen;
};

static int cfg_fail(struct cfg_ctx *c, const yaml_node_t *node, const char *key, const char *fmt,
                    ...) __attribute__((format(printf, 4, 5)));

/* cfg_fail: write "FILE:LINE: key: problem" and return TG_ECONFIG. */
static int cfg_fail(struct cfg_ctx *c, const yaml_node_t *node, const char *key, const char *fmt,
                    ...)
{
    char problem[256];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(problem, sizeof(problem), fmt, ap);
    va_end(ap);
    snprintf(c->err, c->errlen, "%s:%lu: %s: %s", c->file,
             node ? (unsigned long)node->start_mark.line + 1 : 0UL, key, problem);
    return TG_ECONFIG;
}

/* cfg_scalar: the scalar text of node after os.environ/ resolution, into out (outcap bytes). */
static int cfg_scalar(struct cfg_ctx *c, yaml_node_t *node, const char *key, char *out,
                      size_t outcap)
{
    const char *val;
    size_t len;
    char why[160];

    if (node->type != YAML_SCALAR_NODE)
        return cfg_fail(c, node, key, "expected a scalar value");
    val = (const char *)node->data.scalar.value;
    if (tg_cfgtext_check(val, node->data.scalar.length, NULL, why, sizeof(why)) != 0)
        return cfg_fail(c, node, key, "%s", why);
    if (strncmp(val, "os.environ/", 11) == 0) {
        const char *name = val + 11;
        if (name[0] == '\0')
            return cfg_fail(c, node, key, "os.environ/ without a variable name");
        val = getenv(name);
        if (!val)
            return cfg_fail(c, node, key, "environment variable %s is not set", name);
        if (tg_cfgtext_check(val, (size_t)-1, name, why, sizeof(why)) != 0)
            return cfg_fail(c, node, key, "%s", why);
    }
    len = strlen(val);
    if (len >= outcap)
        return cfg_fail(c, node, key, "value longer than %zu bytes", outcap - 1);
    memcpy(out, val, len + 1);
    return 0;
}

/* cfg_int: an integer scalar within [lo, hi]. */
static int cfg_int(struct cfg_ctx *c, yaml_node_t *node, const char *key, long lo, long hi,
                   int *out)
{
    char buf[64];
    char *end = NULL;
    long v;
    int rc;

    rc = cfg_scalar(c, node, key, buf, sizeof(buf));
    if (rc < 0)
        return rc;
    errno = 0;
    v = strtol(buf, &end, 10);
    if (errno != 0 || end == buf || *end != '\0')
        return cfg_fail(c, node, key, "not an integer");
    if (v < lo || v > hi)
        return cfg_fail(c, node, key, "must be between %ld and %ld", lo, hi);
    *out = (int)v;
    return 0;
}

int sp_config_parse_duration(const char *s, int64_t *out_s)
{
    int64_t v = 0;

    /* the grammar both services share (tg_units.h); a budget period is never 0, and stays far
     * from overflowing in milliseconds */
    if (s == NULL || tg_parse_duration_s(s, &v) != 0 || v <= 0 || v > INT64_MAX / 1000)
        return TG_EINVAL;
    *out_s = v;
    return 0;
}

int sp_config_parse_usd(const char *s, int64_t *out_nusd)
{
    /* the grammar both services share (tg_units.h): a non-negative decimal, exact, rounded half
     * up to the nano-USD */
    return s != NULL && tg_parse_usd_nusd(s, out_nusd) == 0 ? 0 : TG_EINVAL;
}

void sp_config_defaults(struct sp_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    snprintf(cfg->listen_host, sizeof(cfg->listen_host), "0.0.0.0");
    cfg->listen_port = 4001;
    snprintf(cfg->kafka_brokers, sizeof(cfg->kafka_brokers), "127.0.0.1:19092");
    snprintf(cfg->kafka_topic, sizeof(cfg->kafka_topic), "tollgate.events.v1");
    snprintf(cfg->kafka_control_topic, sizeof(cfg->kafka_control_topic), "tollgate.control.v1");
    snprintf(cfg->kafka_group_id, sizeof(cfg->kafka_group_id), "spend-svc");
    cfg->kafka_session_timeout_ms = 10000;
    cfg->pg_query_timeout_ms = 5000;
    cfg->pg_retry_max_ms = 5000;
    cfg->pg_writers = 2;
    snprintf(cfg->redis_host, sizeof(cfg->redis_host), "127.0.0.1");
    cfg->redis_port = 6379;
    cfg->redis_db = 0;
    cfg->redis_timeout_ms = 500;
    cfg->redis_pending_max = 20000;
    cfg->redis_day_ttl_s = 40 * 86400;
    cfg->batch_max_events = 5000;
    cfg->batch_max_wait_ms = 200;
    cfg->batch_max_bytes = 8 * 1024 * 1024;
    cfg->budget_thresholds[0] = 50;
    cfg->budget_thresholds[1] = 80;
    cfg->budget_thresholds[2] = 100;
    cfg->budget_thresholds_n = 3;
    cfg->budget_check_interval_ms = 1000;
    cfg->keys_max = 100000;
}

/* cfg_listen: "host:port". */
static int cfg_listen(struct cfg_ctx *c, yaml_node_t *node, struct sp_config *cfg)
{
    char buf[SP_CONFIG_STR_MAX];
    char *colon;
    char *end = NULL;
    long port;
    int rc;

    rc = cfg_scalar(c, node, "listen", buf, sizeof(buf));
    if (rc < 0)
        return rc;
    colon = strrchr(buf, ':');
    if (!colon || colon == buf)
        return cfg_fail(c, node, "listen", "expected HOST:PORT");
    *colon = '\0';
    errno = 0;
    port = strtol(colon + 1, &end, 10);
    if (errno != 0 || end == colon + 1 || *end != '\0' || port < 0 || port > 65535)
        return cfg_fail(c, node, "listen", "bad port");
    snprintf(cfg->listen_host, sizeof(cfg->listen_host), "%s", buf);
    cfg->listen_port = (int)port;
    return 0;
}

/* cfg_redis_url: redis://HOST[:PORT][/DB]. */
static int cfg_redis_url(struct cfg_ctx *c, yaml_node_t *node, struct sp_config *cfg)
{
    char buf[SP_CONFIG_STR_MAX];
    char *host;
    char *slash;
    char *colon;
    char *end = NULL;
    int rc;

    rc = cfg_scalar(c, node, "redis.url", buf, sizeof(buf));
    if (rc < 0)
        return rc;
    if (strncmp(buf, "redis://", 8) != 0)
        return cfg_fail(c, node, "redis.url", "expected redis://HOST:PORT/DB");
    host = buf + 8;
    if (strchr(host, '@'))
        return cfg_fail(c, node, "redis.url", "credentials in the URL are not supported");
    slash = strchr(host, '/');
    if (slash) {
        *slash = '\0';
        if (slash[1] != '\0') {
            long db;
            errno = 0;
            db = strtol(slash + 1, &end, 10);
            if (errno != 0 || *end != '\0' || db < 0 || db > 15)
                return cfg_fail(c, node, "redis.url", "bad database number");
            cfg->redis_db = (int)db;
        }
    }
    colon = strrchr(host, ':');
    if (colon) {
        long port;
        *colon = '\0';
        errno = 0;
        port = strtol(colon + 1, &end, 10);
        if (errno != 0 || *end != '\0' || port <= 0 || port > 65535)
            return cfg_fail(c, node, "redis.url", "bad port");
        cfg->redis_port = (int)port;
    }
    if (host[0] == '\0')
        return cfg_fail(c, node, "redis.url", "missing host");
    snprintf(cfg->redis_host, sizeof(cfg->redis_host), "%s", host);
    return 0;
}

/* Iteration over a mapping: the key text and the value node of each pair. */
#define CFG_PAIRS(c, map, pair)                                                                    \
    for (yaml_node_pair_t *pair = (map)->data.mapping.pairs.start;                                \
         pair < (map)->data.mapping.pairs.top; pair++)

static const char *cfg_key(struct cfg_ctx *c, yaml_node_pair_t *pair)
{
    yaml_node_t *k = yaml_document_get_node(c->doc, pair->key);
    if (!k || k->type != YAML_SCALAR_NODE)
        return NULL;
    return (const char *)k->data.scalar.value;
}

static int cfg_expect_map(struct cfg_ctx *c, yaml_node_t *node, const char *key)
{
    if (node->type != YAML_MAPPING_NODE)
        return cfg_fail(c, node, key, "expected a mapping");
    return 0;
}

/* tg_yaml's first error into the loader's err (the line has the same form). */
static void kafka_diag(void *ud, int is_error, const char *line)
{
    struct cfg_ctx *c = ud;

    if (is_error)
        snprintf(c->err, c->errlen, "%s", line);
}

static int cfg_kafka(struct cfg_ctx *c, yaml_node_t *map, struct sp_config *cfg)
{
    struct tg_yaml y;

    int rc = cfg_expect_map(c, map, "kafka");
    if (rc < 0)
        return rc;
    CFG_PAIRS(c, map, pair)
    {
        const char *k = cfg_key(c, pair);
        yaml_node_t *v = yaml_document_get_node(c->doc, pair->value);
        if (!k)
            return cfg_fail(c, map, "kafka", "non-scalar key");
        if (strcmp(k, "brokers") == 0)
            rc = cfg_scalar(c, v, "kafka.brokers", cfg->kafka_brokers, sizeof(cfg->kafka_brokers));
        else if (strcmp(k, "topic") == 0)
            rc = cfg_scalar(c, v, "kafka.topic", cfg->kafka_topic, sizeof(cfg->kafka_topic));
        else if (strcmp(k, "control_topic") == 0)
            rc = cfg_scalar(c, v, "kafka.control_topic", cfg->kafka_control_topic,
                            sizeof(cfg->kafka_control_topic));
        else if (strcmp(k, "group_id") == 0)
            rc = cfg_scalar(c, v, "kafka.group_id", cfg->kafka_group_id,
                            sizeof(cfg->kafka_group_id));
        else if (strcmp(k, "session_timeout_ms") == 0)
            rc = cfg_int(c, v, "kafka.session_timeout_ms", 1000, 300000,
                         &cfg->kafka_session_timeout_ms);
        else if (tg_kafka_opts_is_key(k))
            rc = 0; /* tg_kafka_opts_parse, below */
        else
            rc = cfg_fail(c, v, k, "unknown key in kafka");
        if (rc < 0)
            return rc;
    }
    if (cfg->kafka_brokers[0] == '\0')
        return cfg_fail(c, map, "kafka.brokers", "must not be empty");
    if (cfg->kafka_topic[0] == '\0' || cfg->kafka_group_id[0] == '\0')
        return cfg_fail(c, map, "kafka", "topic and group_id must not be empty");
    tg_yaml_borrow(&y, c->file, c->doc, kafka_diag, c);
    rc = tg_kafka_opts_parse(&cfg->kafka_opts, &y, map, "kafka");
    tg_yaml_close(&y);
    return rc;
}

static int cfg_postgres(struct cfg_ctx *c, yaml_node_t *map, struct sp_config *cfg)
{
    int rc = cfg_expect_map(c, map, "postgres");
    if (rc < 0)
        return rc;
    CFG_PAIRS(c, map, pair)
    {
        const char *k = cfg_key(c, pair);
        yaml_node_t *v = yaml_document_get_node(c->doc, pair->value);
        if (!k)
            return cfg_fail(c, map, "postgres", "non-scalar key");
        if (strcmp(k, "dsn") == 0)
            rc = cfg_scalar(c, v, "postgres.dsn", cfg->pg_dsn, sizeof(cfg->pg_dsn));
        else if (strcmp(k, "query_timeout_ms") == 0)
            rc = cfg_int(c, v, "postgres.query_timeout_ms", 100, 600000,
                         &cfg->pg_query_timeout_ms);
        else if (strcmp(k, "retry_max_ms") == 0)
            rc = cfg_int(c, v, "postgres.retry_max_ms", 100, 600000, &cfg->pg_retry_max_ms);
        else if (strcmp(k, "writers") == 0)
            rc = cfg_int(c, v, "postgres.writers", 1, SP_CONFIG_WRITERS_MAX, &cfg->pg_writers);
        else
            rc = cfg_fail(c, v, k, "unknown key in postgres");
        if (rc < 0)
            return rc;
    }
    return 0;
}

static int cfg_redis(struct cfg_ctx *c, yaml_node_t *map, struct sp_config *cfg)
{
    int rc = cfg_expect_map(c, map, "redis");
    if (rc < 0)
        return rc;
    CFG_PAIRS(c, map, pair)
    {
        const char *k = cfg_key(c, pair);
        yaml_node_t *v = yaml_document_get_node(c->doc, pair->value);
        if (!k)
            return cfg_fail(c, map, "redis", "non-scalar key");
        if (strcmp(k, "url") == 0)
            rc = cfg_redis_url(c, v, cfg);
        else if (strcmp(k, "timeout_ms") == 0)
            rc = cfg_int(c, v, "redis.timeout_ms", 10, 60000, &cfg->redis_timeout_ms);
        else if (strcmp(k, "pending_max") == 0)
            rc = cfg_int(c, v, "redis.pending_max", 16, 10000000, &cfg->redis_pending_max);
        else if (strcmp(k, "day_ttl_s") == 0)
            rc = cfg_int(c, v, "redis.day_ttl_s", 60, 400 * 86400, &cfg->redis_day_ttl_s);
        else
            rc = cfg_fail(c, v, k, "unknown key in redis");
        if (rc < 0)
            return rc;
    }
    return 0;
}

static int cfg_batch(struct cfg_ctx *c, yaml_node_t *map, struct sp_config *cfg)
{
    int rc = cfg_expect_map(c, map, "batch");
    if (rc < 0)
        return rc;
    CFG_PAIRS(c, map, pair)
    {
        const char *k = cfg_key(c, pair);
        yaml_node_t *v = yaml_document_get_node(c->doc, pair->value);
        if (!k)
            return cfg_fail(c, map, "batch", "non-scalar key");
        if (strcmp(k, "max_events") == 0)
            rc = cfg_int(c, v, "batch.max_events", 1, 50000, &cfg->batch_max_events);
        else if (strcmp(k, "max_wait_ms") == 0)
            rc = cfg_int(c, v, "batch.max_wait_ms", 1, 60000, &cfg->batch_max_wait_ms);
        else if (strcmp(k, "max_bytes") == 0)
            rc = cfg_int(c, v, "batch.max_bytes", 65536, 256 * 1024 * 1024,
                         &cfg->batch_max_bytes);
        else
            rc = cfg_fail(c, v, k, "unknown key in batch");
        if (rc < 0)
            return rc;
    }
    return 0;
}

static int cfg_team(struct cfg_ctx *c, yaml_node_t *map, struct sp_config *cfg)
{
    struct sp_config_team *t;
    char buf[SP_CONFIG_STR_MAX];
    int have_budget = 0;
    int rc;

    if (map->type != YAML_MAPPING_NODE)
        return cfg_fail(c, map, "budgets.teams", "each team is a mapping");
    if (cfg->teams_n >= SP_CONFIG_TEAMS_MAX)
        return cfg_fail(c, map, "budgets.teams", "more than %d teams", SP_CONFIG_TEAMS_MAX);
    t = &cfg->teams[cfg->teams_n];
    memset(t, 0, sizeof(*t));
    t->budget_period_s = 30 * 86400;
    CFG_PAIRS(c, map, pair)
    {
        const char *k = cfg_key(c, pair);
        yaml_node_t *v = yaml_document_get_node(c->doc, pair->value);
        if (!k)
            return cfg_fail(c, map, "budgets.teams", "non-scalar key");
        if (strcmp(k, "team_id") == 0) {
            rc = cfg_scalar(c, v, "budgets.teams.team_id", t->team_id, sizeof(t->team_id));
        } else if (strcmp(k, "max_budget") == 0) {
            rc = cfg_scalar(c, v, "budgets.teams.max_budget", buf, sizeof(buf));
            if (rc == 0 && (sp_config_parse_usd(buf, &t->max_budget_nusd) < 0 ||
                            t->max_budget_nusd <= 0))
                rc = cfg_fail(c, v, "budgets.teams.max_budget", "expected a positive USD amount");
            have_budget = 1;
        } else if (strcmp(k, "budget_duration") == 0) {
            rc = cfg_scalar(c, v, "budgets.teams.budget_duration", buf, sizeof(buf));
            if (rc == 0 && sp_config_parse_duration(buf, &t->budget_period_s) < 0)
                rc = cfg_fail(c, v, "budgets.teams.budget_duration",
                              "expected a duration like 30d, 12h, 15m, 45s");
        } else {
            rc = cfg_fail(c, v, k, "unknown key in budgets.teams");
        }
        if (rc < 0)
            return rc;
    }
    if (t->team_id[0] == '\0')
        return cfg_fail(c, map, "budgets.teams.team_id", "missing");
    if (!have_budget)
        return cfg_fail(c, map, "budgets.teams.max_budget", "missing");
    cfg->teams_n++;
    return 0;
}

/* timezone: the budget periods' time zone (tg_period.h), as router-svc's
 * litellm_settings.timezone; checked here, set process-wide at start. */
static int cfg_timezone(struct cfg_ctx *c, yaml_node_t *node, struct sp_config *cfg)
{
    char why[160];
    int rc = cfg_scalar(c, node, "timezone", cfg->timezone, sizeof(cfg->timezone));

    if (rc < 0)
        return rc;
    if (tg_period_check_tz(cfg->timezone, why, sizeof(why)) != 0)
        return cfg_fail(c, node, "timezone", "%s", why);
    return 0;
}

static int cfg_budgets(struct cfg_ctx *c, yaml_node_t *map, struct sp_config *cfg)
{
    int rc = cfg_expect_map(c, map, "budgets");
    if (rc < 0)
        return rc;
    CFG_PAIRS(c, map, pair)
    {
        const char *k = cfg_key(c, pair);
        yaml_node_t *v = yaml_document_get_node(c->doc, pair->value);
        if (!k)
            return cfg_fail(c, map, "budgets", "non-scalar key");
        if (strcmp(k, "thresholds") == 0) {
            if (v->type != YAML_SEQUENCE_NODE)
                return cfg_fail(c, v, "budgets.thresholds", "expected a list of percentages");
            cfg->budget_thresholds_n = 0;
            for (yaml_node_item_t *it = v->data.sequence.items.start;
                 it < v->data.sequence.items.top; it++) {
                yaml_node_t *n = yaml_document_get_node(c->doc, *it);
                int pct;
                if (cfg->budget_thresholds_n >= SP_CONFIG_THRESHOLDS_MAX)
                    return cfg_fail(c, n, "budgets.thresholds", "more than %d thresholds",
                                    SP_CONFIG_THRESHOLDS_MAX);
                rc = cfg_int(c, n, "budgets.thresholds", 1, 1000, &pct);
                if (rc < 0)
                    return rc;
                if (cfg->budget_thresholds_n > 0 &&
                    pct <= cfg->budget_thresholds[cfg->budget_thresholds_n - 1])
                    return cfg_fail(c, n, "budgets.thresholds", "must be ascending");
                cfg->budget_thresholds[cfg->budget_thresholds_n++] = pct;
            }
            if (cfg->budget_thresholds_n == 0)
                return cfg_fail(c, v, "budgets.thresholds", "must not be empty");
        } else if (strcmp(k, "check_interval_ms") == 0) {
            rc = cfg_int(c, v, "budgets.check_interval_ms", 100, 3600000,
                         &cfg->budget_check_interval_ms);
        } else if (strcmp(k, "keys_max") == 0) {
            rc = cfg_int(c, v, "budgets.keys_max", 16, 10000000, &cfg->keys_max);
        } else if (strcmp(k, "teams") == 0) {
            if (v->type != YAML_SEQUENCE_NODE)
                return cfg_fail(c, v, "budgets.teams", "expected a list");
            for (yaml_node_item_t *it = v->data.sequence.items.start;
                 it < v->data.sequence.items.top; it++) {
                rc = cfg_team(c, yaml_document_get_node(c->doc, *it), cfg);
                if (rc < 0)
                    return rc;
            }
        } else {
            rc = cfg_fail(c, v, k, "unknown key in budgets");
        }
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* load_doc: parse what parser reads (its input set) into cfg, defaults already there. path names
 * the input in messages. Returns as sp_config_load. */
static int load_doc(yaml_parser_t *parser, const char *path, struct sp_config *cfg,
                    sp_config_section_fn alerting_fn, void *alerting_ctx, char *err, size_t errlen)
{
    yaml_document_t doc;
    int doc_ok = 0;
    yaml_node_t *root;
    struct cfg_ctx c = {.doc = &doc, .file = path, .err = err, .errlen = errlen};
    int rc = 0;

    if (!yaml_parser_load(parser, &doc)) {
        snprintf(err, errlen, "%s:%lu: yaml: %s", path,
                 (unsigned long)parser->problem_mark.line + 1,
                 parser->problem ? parser->problem : "syntax error");
        rc = TG_ECONFIG;
        goto out;
    }
    doc_ok = 1;
    root = yaml_document_get_root_node(&doc);
    if (!root) {
        snprintf(err, errlen, "%s:0: file: empty document", path);
        rc = TG_ECONFIG;
        goto out;
    }
    rc = cfg_expect_map(&c, root, "(top level)");
    if (rc < 0)
        goto out;
    CFG_PAIRS(&c, root, pair)
    {
        const char *k = cfg_key(&c, pair);
        yaml_node_t *v = yaml_document_get_node(&doc, pair->value);
        if (!k) {
            rc = cfg_fail(&c, root, "(top level)", "non-scalar key");
            goto out;
        }
        if (strcmp(k, "listen") == 0)
            rc = cfg_listen(&c, v, cfg);
        else if (strcmp(k, "master_key") == 0)
            rc = cfg_scalar(&c, v, "master_key", cfg->master_key, sizeof(cfg->master_key));
        else if (strcmp(k, "kafka") == 0)
            rc = cfg_kafka(&c, v, cfg);
        else if (strcmp(k, "postgres") == 0)
            rc = cfg_postgres(&c, v, cfg);
        else if (strcmp(k, "redis") == 0)
            rc = cfg_redis(&c, v, cfg);
        else if (strcmp(k, "batch") == 0)
            rc = cfg_batch(&c, v, cfg);
        else if (strcmp(k, "budgets") == 0)
            rc = cfg_budgets(&c, v, cfg);
        else if (strcmp(k, "timezone") == 0)
            rc = cfg_timezone(&c, v, cfg);
        else if (strcmp(k, "alerting") == 0)
            rc = alerting_fn ? alerting_fn(alerting_ctx, &doc, v, path, err, errlen) : 0;
        else
            rc = cfg_fail(&c, v, k, "unknown key");
        if (rc < 0)
            goto out;
    }
    if (cfg->pg_dsn[0] == '\0') {
        rc = cfg_fail(&c, root, "postgres.dsn", "missing");
        goto out;
    }
out:
    if (doc_ok)
        yaml_document_delete(&doc);
    return rc;
}

int sp_config_load(const char *path, struct sp_config *cfg, sp_config_section_fn alerting_fn,
                   void *alerting_ctx, char *err, size_t errlen)
{
    FILE *fp = NULL;
    yaml_parser_t parser;
    int rc;

    sp_config_defaults(cfg);
    snprintf(cfg->file, sizeof(cfg->file), "%s", path);
    fp = fopen(path, "rb");
    if (!fp) {
        snprintf(err, errlen, "%s:0: file: %s", path, strerror(errno));
        return TG_EIO;
    }
    if (!yaml_parser_initialize(&parser)) {
        snprintf(err, errlen, "%s:0: file: parser initialisation failed", path);
        fclose(fp);
        return TG_ENOMEM;
    }
    yaml_parser_set_input_file(&parser, fp);
    rc = load_doc(&parser, path, cfg, alerting_fn, alerting_ctx, err, errlen);
    yaml_parser_delete(&parser);
    fclose(fp);
    return rc;
}

int sp_config_load_buffer(const char *name, const char *data, size_t len, struct sp_config *cfg,
                          sp_config_section_fn alerting_fn, void *alerting_ctx, char *err,
                          size_t errlen)
{
    yaml_parser_t parser;
    int rc;

    sp_config_defaults(cfg);
    snprintf(cfg->file, sizeof(cfg->file), "%s", name);
    if (!yaml_parser_initialize(&parser)) {
        snprintf(err, errlen, "%s:0: file: parser initialisation failed", name);
        return TG_ENOMEM;
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)(data != NULL ? data : ""),
                                 data != NULL ? len : 0);
    rc = load_doc(&parser, name, cfg, alerting_fn, alerting_ctx, err, errlen);
    yaml_parser_delete(&parser);
    return rc;
}
