#include "config.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <yaml.h>

#include "tg_err.h"
#include "tg_kafka_opts.h"
#include "tg_log.h"
#include "tg_period.h"
#include "tg_redis_url.h"
#include "tg_units.h"
#include "tg_yaml.h"

/* One load: the document, the configuration being filled, where the first error goes. */
struct ld {
    struct tg_yaml y;
    struct sp_config *cfg;
    char *err; /* borrowed: the caller's buffer */
    size_t errlen;
    sp_config_section_fn alerting_fn;
    void *alerting_ctx;
    char url_username[128];          /* from redis.url, used when redis.username is not given */
    char url_password[SP_CONFIG_STR_MAX];
    const yaml_node_t *redis_tls_node; /* redis.tls, when given */
};

/* A key read straight into a field of struct sp_config: a string that fits, or an int in range. */
struct field {
    const char *section; /* "" for the top level */
    const char *key;
    size_t offset;       /* into struct sp_config */
    size_t cap;          /* a string's field, bytes; 0 for an int */
    int lo, hi;          /* an int's range */
};

#define FIELD_SIZE(member) sizeof(((struct sp_config *)0)->member)
#define STR_FIELD(section, key, member)                                                            \
    {section, key, offsetof(struct sp_config, member), FIELD_SIZE(member), 0, 0}
#define INT_FIELD(section, key, member, lo, hi)                                                    \
    {section, key, offsetof(struct sp_config, member), 0, lo, hi}

static const struct field fields[] = {
    STR_FIELD("", "master_key", master_key),
    STR_FIELD("kafka", "brokers", kafka_brokers),
    STR_FIELD("kafka", "topic", kafka_topic),
    STR_FIELD("kafka", "control_topic", kafka_control_topic),
    STR_FIELD("kafka", "group_id", kafka_group_id),
    INT_FIELD("kafka", "session_timeout_ms", kafka_session_timeout_ms, 1000, 300000),
    STR_FIELD("postgres", "dsn", pg_dsn),
    INT_FIELD("postgres", "query_timeout_ms", pg_query_timeout_ms, 100, 600000),
    INT_FIELD("postgres", "retry_max_ms", pg_retry_max_ms, 100, 600000),
    INT_FIELD("postgres", "writers", pg_writers, 1, SP_CONFIG_WRITERS_MAX),
    STR_FIELD("redis", "username", redis_username),
    STR_FIELD("redis", "password", redis_password),
    STR_FIELD("redis.tls", "ca_file", redis_ca_file),
    STR_FIELD("redis.tls", "cert_file", redis_cert_file),
    STR_FIELD("redis.tls", "key_file", redis_key_file),
    STR_FIELD("redis.tls", "server_name", redis_server_name),
    INT_FIELD("redis", "timeout_ms", redis_timeout_ms, 10, 60000),
    INT_FIELD("redis", "pending_max", redis_pending_max, 16, 10000000),
    INT_FIELD("redis", "day_ttl_s", redis_day_ttl_s, 60, 400 * 86400),
    INT_FIELD("batch", "max_events", batch_max_events, 1, 50000),
    INT_FIELD("batch", "max_wait_ms", batch_max_wait_ms, 1, 60000),
    INT_FIELD("batch", "max_bytes", batch_max_bytes, 65536, 256 * 1024 * 1024),
    INT_FIELD("budgets", "check_interval_ms", budget_check_interval_ms, 100, 3600000),
    INT_FIELD("budgets", "keys_max", keys_max, 16, 10000000),
};

/* A key of a section that the table does not hold: 0, TG_ECONFIG after tg_yaml_fail, or 1 when
 * it is not one of the section's keys either. */
typedef int (*other_key_fn)(struct ld *ld, const char *key, const yaml_node_t *v,
                            const char *path);

int sp_config_parse_duration(const char *s, int64_t *out_s)
{
    int64_t v = 0;

    /* the grammar both services share (tg_units.h); a budget period is never 0, and stays far
     * from overflowing in milliseconds */
    if (s == NULL || tg_parse_duration_s(s, &v) != 0 || v <= 0 || v > SP_CONFIG_PERIOD_MAX_S)
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

/* tg_yaml's first error into the caller's err; warnings (none of spend-svc's keys gives one
 * today) to the log. */
static void diag_sink(void *ud, int is_error, const char *line)
{
    struct ld *ld = ud;

    if (is_error) {
        if (ld->errlen > 0)
            snprintf(ld->err, ld->errlen, "%s", line);
        return;
    }
    TG_WARN("msg=\"config warning\" detail=\"%s\"", line);
}

/* read_field: key of section through the table. Returns 0, TG_ECONFIG, or 1 when the table has
 * no such key. */
static int read_field(struct ld *ld, const char *section, const char *key, const yaml_node_t *v,
                      const char *path)
{
    for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
        const struct field *f = &fields[i];
        char *dst = (char *)ld->cfg + f->offset;

        if (strcmp(f->section, section) != 0 || strcmp(f->key, key) != 0)
            continue;
        if (f->cap > 0)
            return tg_yaml_str(&ld->y, v, path, dst, f->cap);
        return tg_yaml_int_range(&ld->y, v, path, f->lo, f->hi, (int *)(void *)dst);
    }
    return 1;
}

/* read_section: the mapping map of section name ("" for the top level): each key through the
 * table, then other (may be NULL); any other key is an error. */
static int read_section(struct ld *ld, const char *name, const yaml_node_t *map, other_key_fn other)
{
    const char *where = name[0] != '\0' ? name : "(top level)";
    char p[TG_YAML_PATH_MAX];

    if (tg_yaml_expect(&ld->y, map, where, YAML_MAPPING_NODE) != 0)
        return TG_ECONFIG;
    TG_YAML_FOR_PAIRS(map, pair)
    {
        const char *k = tg_yaml_key(&ld->y, pair, where);
        const yaml_node_t *v = tg_yaml_node(&ld->y, pair->value);
        int rc;

        if (k == NULL)
            return TG_ECONFIG;
        tg_yaml_path(p, name, k);
        rc = read_field(ld, name, k, v, p);
        if (rc == 1 && other != NULL)
            rc = other(ld, k, v, p);
        if (rc == 1)
            return tg_yaml_fail(&ld->y, v, p, "unknown key");
        if (rc != 0)
            return rc;
    }
    return 0;
}

/* listen: "HOST:PORT". */
static int read_listen(struct ld *ld, const yaml_node_t *v, const char *path)
{
    struct sp_config *cfg = ld->cfg;
    char buf[SP_CONFIG_STR_MAX];
    char *colon;
    uint64_t port = 0;

    if (tg_yaml_str(&ld->y, v, path, buf, sizeof(buf)) != 0)
        return TG_ECONFIG;
    colon = strrchr(buf, ':');
    if (colon == NULL || colon == buf)
        return tg_yaml_fail(&ld->y, v, path, "expected HOST:PORT");
    *colon = '\0';
    if (tg_parse_u64(colon + 1, &port) != 0 || port > 65535)
        return tg_yaml_fail(&ld->y, v, path, "bad port");
    snprintf(cfg->listen_host, sizeof(cfg->listen_host), "%s", buf);
    cfg->listen_port = (int)port;
    return 0;
}

/* redis.url: redis[s]://[[USER][:PASSWORD]@]HOST[:PORT][/DB] (tg_redis_url.h); rediss:// is
 * TLS. redis.username / redis.password, when given, win over the URL's credentials. */
static int read_redis_url(struct ld *ld, const yaml_node_t *v, const char *path)
{
    struct sp_config *cfg = ld->cfg;
    struct tg_redis_url u;

    if (tg_redis_url_read(&ld->y, v, path, &u) != 0)
        return TG_ECONFIG;
    cfg->redis_tls = u.tls;
    cfg->redis_db = u.db;
    cfg->redis_port = u.port;
    snprintf(cfg->redis_host, sizeof(cfg->redis_host), "%s", u.host);
    snprintf(ld->url_username, sizeof(ld->url_username), "%s", u.username);
    snprintf(ld->url_password, sizeof(ld->url_password), "%s", u.password);
    memset(&u, 0, sizeof(u));
    return 0;
}

static int redis_other(struct ld *ld, const char *key, const yaml_node_t *v, const char *path)
{
    if (strcmp(key, "url") == 0)
        return read_redis_url(ld, v, path);
    if (strcmp(key, "tls") == 0) {
        ld->redis_tls_node = v;
        return read_section(ld, "redis.tls", v, NULL);
    }
    return 1;
}

/* kafka's security keys and librdkafka properties: tg_kafka_opts_parse, after the section. */
static int kafka_other(struct ld *ld, const char *key, const yaml_node_t *v, const char *path)
{
    (void)ld;
    (void)v;
    (void)path;
    return tg_kafka_opts_is_key(key) ? 0 : 1;
}

static int read_kafka(struct ld *ld, const yaml_node_t *map)
{
    struct sp_config *cfg = ld->cfg;

    if (read_section(ld, "kafka", map, kafka_other) != 0)
        return TG_ECONFIG;
    if (cfg->kafka_brokers[0] == '\0')
        return tg_yaml_fail(&ld->y, map, "kafka.brokers", "must not be empty");
    if (cfg->kafka_topic[0] == '\0' || cfg->kafka_group_id[0] == '\0')
        return tg_yaml_fail(&ld->y, map, "kafka", "topic and group_id must not be empty");
    return tg_kafka_opts_parse(&cfg->kafka_opts, &ld->y, map, "kafka");
}

/* budgets.teams[]: one team. Paths stay "budgets.teams.KEY" (no index). */
static int read_team(struct ld *ld, const yaml_node_t *map)
{
    struct sp_config *cfg = ld->cfg;
    struct sp_config_team *t;
    char p[TG_YAML_PATH_MAX];
    int have_budget = 0;

    if (map == NULL || map->type != YAML_MAPPING_NODE)
        return tg_yaml_fail(&ld->y, map, "budgets.teams", "each team is a mapping");
    if (cfg->teams_n >= SP_CONFIG_TEAMS_MAX)
        return tg_yaml_fail(&ld->y, map, "budgets.teams", "more than %d teams",
                            SP_CONFIG_TEAMS_MAX);
    t = &cfg->teams[cfg->teams_n];
    memset(t, 0, sizeof(*t));
    t->budget_period_s = 30 * 86400;
    TG_YAML_FOR_PAIRS(map, pair)
    {
        const char *k = tg_yaml_key(&ld->y, pair, "budgets.teams");
        const yaml_node_t *v = tg_yaml_node(&ld->y, pair->value);
        const char *s = NULL;
        int rc;

        if (k == NULL)
            return TG_ECONFIG;
        tg_yaml_path(p, "budgets.teams", k);
        if (strcmp(k, "team_id") == 0) {
            rc = tg_yaml_str(&ld->y, v, p, t->team_id, sizeof(t->team_id));
        } else if (strcmp(k, "max_budget") == 0) {
            rc = tg_yaml_scalar(&ld->y, v, p, &s);
            if (rc == 0 &&
                (sp_config_parse_usd(s, &t->max_budget_nusd) != 0 || t->max_budget_nusd <= 0))
                rc = tg_yaml_fail(&ld->y, v, p, "expected a positive USD amount");
            have_budget = 1;
        } else if (strcmp(k, "budget_duration") == 0) {
            rc = tg_yaml_duration_s(&ld->y, v, p, 1, SP_CONFIG_PERIOD_MAX_S, &t->budget_period_s);
        } else {
            rc = tg_yaml_fail(&ld->y, v, p, "unknown key");
        }
        if (rc != 0)
            return rc;
    }
    if (t->team_id[0] == '\0')
        return tg_yaml_fail(&ld->y, map, "budgets.teams.team_id", "missing");
    if (!have_budget)
        return tg_yaml_fail(&ld->y, map, "budgets.teams.max_budget", "missing");
    cfg->teams_n++;
    return 0;
}

/* budgets.thresholds: 1..SP_CONFIG_THRESHOLDS_MAX ascending percentages. */
static int read_thresholds(struct ld *ld, const yaml_node_t *v, const char *path)
{
    struct sp_config *cfg = ld->cfg;

    if (v == NULL || v->type != YAML_SEQUENCE_NODE)
        return tg_yaml_fail(&ld->y, v, path, "expected a list of percentages");
    cfg->budget_thresholds_n = 0;
    TG_YAML_FOR_ITEMS(v, item)
    {
        const yaml_node_t *n = tg_yaml_node(&ld->y, *item);
        int pct;

        if (cfg->budget_thresholds_n >= SP_CONFIG_THRESHOLDS_MAX)
            return tg_yaml_fail(&ld->y, n, path, "more than %d thresholds",
                                SP_CONFIG_THRESHOLDS_MAX);
        if (tg_yaml_int_range(&ld->y, n, path, 1, 1000, &pct) != 0)
            return TG_ECONFIG;
        if (cfg->budget_thresholds_n > 0 &&
            pct <= cfg->budget_thresholds[cfg->budget_thresholds_n - 1])
            return tg_yaml_fail(&ld->y, n, path, "must be ascending");
        cfg->budget_thresholds[cfg->budget_thresholds_n++] = pct;
    }
    if (cfg->budget_thresholds_n == 0)
        return tg_yaml_fail(&ld->y, v, path, "must not be empty");
    return 0;
}

static int budgets_other(struct ld *ld, const char *key, const yaml_node_t *v, const char *path)
{
    if (strcmp(key, "thresholds") == 0)
        return read_thresholds(ld, v, path);
    if (strcmp(key, "teams") != 0)
        return 1;
    if (v == NULL || v->type != YAML_SEQUENCE_NODE)
        return tg_yaml_fail(&ld->y, v, path, "expected a list");
    TG_YAML_FOR_ITEMS(v, item)
    {
        if (read_team(ld, tg_yaml_node(&ld->y, *item)) != 0)
            return TG_ECONFIG;
    }
    return 0;
}

/* timezone: the budget periods' time zone (tg_period.h), as router-svc's
 * litellm_settings.timezone; checked here, set process-wide at start. */
static int read_timezone(struct ld *ld, const yaml_node_t *v, const char *path)
{
    struct sp_config *cfg = ld->cfg;
    char why[160];

    if (tg_yaml_str(&ld->y, v, path, cfg->timezone, sizeof(cfg->timezone)) != 0)
        return TG_ECONFIG;
    if (tg_period_check_tz(cfg->timezone, why, sizeof(why)) != 0)
        return tg_yaml_fail(&ld->y, v, path, "%s", why);
    return 0;
}

/* The top level's sections and keys besides master_key. */
static int root_other(struct ld *ld, const char *key, const yaml_node_t *v, const char *path)
{
    if (strcmp(key, "listen") == 0)
        return read_listen(ld, v, path);
    if (strcmp(key, "kafka") == 0)
        return read_kafka(ld, v);
    if (strcmp(key, "postgres") == 0)
        return read_section(ld, "postgres", v, NULL);
    if (strcmp(key, "redis") == 0)
        return read_section(ld, "redis", v, redis_other);
    if (strcmp(key, "batch") == 0)
        return read_section(ld, "batch", v, NULL);
    if (strcmp(key, "budgets") == 0)
        return read_section(ld, "budgets", v, budgets_other);
    if (strcmp(key, "timezone") == 0)
        return read_timezone(ld, v, path);
    if (strcmp(key, "alerting") == 0)
        return ld->alerting_fn != NULL ? ld->alerting_fn(ld->alerting_ctx, &ld->y, v) : 0;
    return 1;
}

static int read_root(struct ld *ld)
{
    const yaml_node_t *root = tg_yaml_root(&ld->y);

    if (root == NULL)
        return tg_yaml_fail(&ld->y, NULL, "file", "empty document");
    if (read_section(ld, "", root, root_other) != 0)
        return TG_ECONFIG;
    if (ld->cfg->pg_dsn[0] == '\0')
        return tg_yaml_fail(&ld->y, root, "postgres.dsn", "missing");
    return 0;
}

/* redis_finish: the URL's credentials where the keys gave none; redis.tls only with TLS, a
 * client certificate with its key. */
static int redis_finish(struct ld *ld)
{
    struct sp_config *cfg = ld->cfg;

    if (cfg->redis_username[0] == '\0')
        snprintf(cfg->redis_username, sizeof(cfg->redis_username), "%s", ld->url_username);
    if (cfg->redis_password[0] == '\0')
        snprintf(cfg->redis_password, sizeof(cfg->redis_password), "%s", ld->url_password);
    if (ld->redis_tls_node != NULL && !cfg->redis_tls)
        return tg_yaml_fail(&ld->y, ld->redis_tls_node, "redis.tls",
                            "needs a rediss:// url (TLS)");
    if ((cfg->redis_cert_file[0] == '\0') != (cfg->redis_key_file[0] == '\0'))
        return tg_yaml_fail(&ld->y, ld->redis_tls_node, "redis.tls",
                            "cert_file and key_file go together");
    return 0;
}

int sp_config_load_buffer(const char *name, const char *data, size_t len, struct sp_config *cfg,
                          sp_config_section_fn alerting_fn, void *alerting_ctx, char *err,
                          size_t errlen)
{
    struct ld ld;
    int rc;

    sp_config_defaults(cfg);
    snprintf(cfg->file, sizeof(cfg->file), "%s", name);
    memset(&ld, 0, sizeof(ld));
    ld.cfg = cfg;
    ld.err = err;
    ld.errlen = errlen;
    ld.alerting_fn = alerting_fn;
    ld.alerting_ctx = alerting_ctx;
    if (errlen > 0)
        err[0] = '\0';
    rc = tg_yaml_open(&ld.y, name, data != NULL ? data : "", data != NULL ? len : 0, diag_sink,
                      &ld);
    if (rc == 0)
        rc = read_root(&ld);
    if (rc == 0)
        rc = redis_finish(&ld);
    memset(ld.url_password, 0, sizeof(ld.url_password));
    tg_yaml_close(&ld.y);
    if (rc != 0 && errlen > 0 && err[0] == '\0')
        snprintf(err, errlen, "%s:0: file: invalid configuration", name);
    return rc;
}

int sp_config_load(const char *path, struct sp_config *cfg, sp_config_section_fn alerting_fn,
                   void *alerting_ctx, char *err, size_t errlen)
{
    char *data;
    size_t len = 0;
    int rc;

    data = tg_yaml_read_file(path, SP_CONFIG_FILE_MAX_BYTES, &len, err, errlen);
    if (data == NULL) {
        sp_config_defaults(cfg);
        snprintf(cfg->file, sizeof(cfg->file), "%s", path);
        return TG_EIO;
    }
    rc = sp_config_load_buffer(path, data, len, cfg, alerting_fn, alerting_ctx, err, errlen);
    free(data);
    return rc;
}
