#include "config.h"

#include <errno.h>
#include <stddef.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <yaml.h>

#include "providers/provider.h"
#include "tg_cfgtext.h"
#include "tg_err.h"
#include "tg_kafka_opts.h"
#include "tg_log.h"
#include "tg_period.h"
#include "tg_units.h"
#include "tg_yaml.h"

#include "config_int.h"
#define CONFIG_FILE_MAX_BYTES (16u * 1024u * 1024u)

int rt_config_fmt_cut(char *dst, size_t cap, const char *fmt, ...)
{
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(dst, cap, fmt, ap);
    va_end(ap);
    return n;
}

/* tg_yaml's diagnostics into rt_config_diag: the first error, the warnings (logged too). */
static void diag_sink(void *ud, int is_error, const char *line)
{
    struct rt_config_diag *diag = ud;

    if (is_error) {
        rt_config_fmt_cut(diag->error, sizeof(diag->error), "%s", line);
        return;
    }
    TG_WARN("msg=\"config warning\" detail=\"%s\"", line);
    if (diag->n_warnings < RT_CONFIG_WARNINGS_MAX)
        rt_config_fmt_cut(diag->warnings[diag->n_warnings++], RT_CONFIG_MSG_CAP, "%s", line);
    else
        diag->warnings_dropped++;
}

/* A limit: absent or null is RT_LIMIT_NONE. */
int rt_config_get_limit(struct ld *ld, const yaml_node_t *n, const char *path, int64_t *out)
{
    uint64_t r = 0;

    if (tg_yaml_is_null(n)) {
        *out = RT_LIMIT_NONE;
        return 0;
    }
    if (tg_yaml_u64(&ld->y, n, path, (uint64_t)INT64_MAX, &r) != 0)
        return TG_ECONFIG;
    *out = (int64_t)r;
    return 0;
}

int rt_config_parse_ssl_verify(struct ld *ld, const yaml_node_t *n, const char *path, int *verify,
                               char *ca, size_t cap)
{
    static const char *const yes[] = {"true", "yes", "on"};
    static const char *const no[] = {"false", "no", "off"};
    const char *v = NULL;

    if (tg_yaml_scalar(&ld->y, n, path, &v) != 0)
        return TG_ECONFIG;
    ca[0] = '\0';
    for (size_t i = 0; i < 3; i++) {
        if (strcasecmp(v, yes[i]) == 0 || strcasecmp(v, no[i]) == 0) {
            *verify = strcasecmp(v, yes[i]) == 0;
            return 0;
        }
    }
    if (v[0] == '\0')
        return tg_yaml_fail(&ld->y, n, path, "expected true, false or the path of a CA bundle");
    if (strlen(v) >= cap)
        return tg_yaml_fail(&ld->y, n, path, "path too long (max %zu bytes)", cap - 1);
    if (access(v, R_OK) != 0)
        return tg_yaml_fail(&ld->y, n, path,
                            "expected true, false or the path of a CA bundle: cannot read %s: %s",
                            v, strerror(errno));
    *verify = 1;
    memcpy(ca, v, strlen(v) + 1);
    return 0;
}

/* ---- groups (known once model_list is parsed) ---- */

int rt_config_has_group(const struct rt_config *cfg, const char *group)
{
    for (uint32_t i = 0; i < cfg->n_deployments; i++) {
        if (strcmp(cfg->deployments[i].group, group) == 0)
            return 1;
    }
    return 0;
}

int rt_config_check_auth(const struct rt_config *cfg, char *err, size_t errlen)
{
    if (cfg->master_key[0] != '\0' || cfg->n_keys > 0 || cfg->allow_unauthenticated)
        return 0;
    rt_config_fmt_cut(
        err, errlen,
        "%s: general_settings.master_key: no master key and no keys (tollgate.keys): every "
        "request would be served without authentication; set a master_key, add keys, or set "
        "tollgate.allow_unauthenticated: true to serve without keys on purpose",
        cfg->path);
    return TG_ECONFIG;
}

int rt_config_find_deployment(const struct rt_config *cfg, const char *id)
{
    for (uint32_t i = 0; i < cfg->n_deployments; i++) {
        if (strcmp(cfg->deployments[i].id, id) == 0)
            return (int)i;
    }
    return -1;
}

static int has_alias(const struct rt_config *cfg, const char *name)
{
    for (uint32_t i = 0; i < cfg->n_aliases; i++) {
        if (strcmp(cfg->aliases[i].alias, name) == 0)
            return 1;
    }
    return 0;
}

static int require_group(struct ld *ld, const yaml_node_t *n, const char *path, const char *group)
{
    if (!rt_config_has_group(ld->cfg, group))
        return tg_yaml_fail(&ld->y, n, path,
                            "unknown model group \"%s\" (no model_list entry has it)", group);
    return 0;
}

/* ---- fallbacks and aliases ---- */

/* A list of group names (fallback targets, default_fallbacks). */
static int parse_group_list(struct ld *ld, yaml_node_t *n, const char *path,
                            char (*out)[RT_NAME_CAP], uint32_t *n_out, int validate)
{
    char p[TG_YAML_PATH_MAX];

    *n_out = 0;
    if (tg_yaml_expect(&ld->y, n, path, YAML_SEQUENCE_NODE) != 0)
        return TG_ECONFIG;
    if (tg_yaml_seq_len(n) > RT_FALLBACK_TARGETS_MAX)
        return tg_yaml_fail(&ld->y, n, path, "too many groups (%zu, max %d)", tg_yaml_seq_len(n),
                            RT_FALLBACK_TARGETS_MAX);
    TG_YAML_FOR_ITEMS(n, item)
    {
        yaml_node_t *e = tg_yaml_node(&ld->y, *item);

        tg_yaml_path_index(p, path, *n_out);
        if (tg_yaml_str_nonempty(&ld->y, e, p, out[*n_out], RT_NAME_CAP) != 0)
            return TG_ECONFIG;
        if (validate && require_group(ld, e, p, out[*n_out]) != 0)
            return TG_ECONFIG;
        (*n_out)++;
    }
    return 0;
}

/* [{group: [t1, t2]}, ...] into rules (cap entries). */
static int parse_fallback_rules(struct ld *ld, yaml_node_t *n, const char *path,
                                struct rt_fallback_rule *rules, uint32_t cap, uint32_t *n_out)
{
    char p[TG_YAML_PATH_MAX], q[TG_YAML_PATH_MAX];
    size_t idx = 0;

    *n_out = 0;
    if (tg_yaml_expect(&ld->y, n, path, YAML_SEQUENCE_NODE) != 0)
        return TG_ECONFIG;
    TG_YAML_FOR_ITEMS(n, item)
    {
        yaml_node_t *e = tg_yaml_node(&ld->y, *item);

        tg_yaml_path_index(p, path, idx++);
        if (tg_yaml_expect(&ld->y, e, p, YAML_MAPPING_NODE) != 0)
            return TG_ECONFIG;
        TG_YAML_FOR_PAIRS(e, pair)
        {
            const char *k = tg_yaml_pair(&ld->y, pair, p, q, NULL);
            struct rt_fallback_rule *r;

            if (k == NULL)
                return TG_ECONFIG;
            if (*n_out >= cap)
                return tg_yaml_fail(&ld->y, e, path, "too many fallback rules (max %u)", cap);
            r = &rules[*n_out];
            memset(r, 0, sizeof(*r));
            if (strlen(k) >= sizeof(r->group))
                return tg_yaml_fail(&ld->y, e, q, "group name too long (max %d bytes)",
                                    RT_NAME_CAP - 1);
            rt_config_fmt_cut(r->group, sizeof(r->group), "%s", k);
            if (require_group(ld, tg_yaml_node(&ld->y, pair->key), q, r->group) != 0)
                return TG_ECONFIG;
            for (uint32_t j = 0; j < *n_out; j++) {
                if (strcmp(rules[j].group, r->group) == 0)
                    return tg_yaml_fail(&ld->y, tg_yaml_node(&ld->y, pair->key), q,
                                        "duplicate fallback rule for \"%s\"", r->group);
            }
            if (parse_group_list(ld, tg_yaml_node(&ld->y, pair->value), q, r->targets,
                                 &r->n_targets, 1) != 0)
                return TG_ECONFIG;
            (*n_out)++;
        }
    }
    return 0;
}

static int parse_aliases(struct ld *ld, yaml_node_t *n, const char *path, struct rt_alias_rule *out,
                         uint32_t cap, uint32_t *n_out)
{
    char p[TG_YAML_PATH_MAX], q[TG_YAML_PATH_MAX];

    *n_out = 0;
    if (tg_yaml_expect(&ld->y, n, path, YAML_MAPPING_NODE) != 0)
        return TG_ECONFIG;
    TG_YAML_FOR_PAIRS(n, pair)
    {
        yaml_node_t *v;
        const char *k = tg_yaml_pair(&ld->y, pair, path, p, &v);
        struct rt_alias_rule *a;

        if (k == NULL)
            return TG_ECONFIG;
        if (*n_out >= cap)
            return tg_yaml_fail(&ld->y, tg_yaml_node(&ld->y, pair->key), p,
                                "too many aliases (max %u)", cap);
        a = &out[*n_out];
        memset(a, 0, sizeof(*a));
        if (k[0] == '\0' || strlen(k) >= sizeof(a->alias))
            return tg_yaml_fail(&ld->y, tg_yaml_node(&ld->y, pair->key), p,
                                "alias must be 1..%d bytes", RT_NAME_CAP - 1);
        rt_config_fmt_cut(a->alias, sizeof(a->alias), "%s", k);
        if (v != NULL && v->type == YAML_MAPPING_NODE) {
            int have_model = 0;

            TG_YAML_FOR_PAIRS(v, ap)
            {
                const char *ak = tg_yaml_pair(&ld->y, ap, p, q, NULL);

                if (ak == NULL)
                    return TG_ECONFIG;
                if (strcmp(ak, "model") == 0) {
                    if (tg_yaml_str_nonempty(&ld->y, tg_yaml_node(&ld->y, ap->value), q, a->group,
                                             sizeof(a->group)) != 0)
                        return TG_ECONFIG;
                    have_model = 1;
                } else if (strcmp(ak, "hidden") == 0) {
                    if (tg_yaml_bool(&ld->y, tg_yaml_node(&ld->y, ap->value), q, &a->hidden) != 0)
                        return TG_ECONFIG;
                } else {
                    tg_yaml_warn(&ld->y, tg_yaml_node(&ld->y, ap->key), q, "unknown key, ignored");
                }
            }
            if (!have_model) {
                tg_yaml_path(q, p, "model");
                return tg_yaml_fail(&ld->y, v, q, "missing");
            }
            tg_yaml_path(q, p, "model");
            if (require_group(ld, v, q, a->group) != 0)
                return TG_ECONFIG;
        } else {
            if (tg_yaml_str_nonempty(&ld->y, v, p, a->group, sizeof(a->group)) != 0)
                return TG_ECONFIG;
            if (require_group(ld, v, p, a->group) != 0)
                return TG_ECONFIG;
        }
        for (uint32_t j = 0; j < *n_out; j++) {
            if (strcmp(out[j].alias, a->alias) == 0)
                return tg_yaml_fail(&ld->y, tg_yaml_node(&ld->y, pair->key), p, "duplicate alias");
        }
        (*n_out)++;
    }
    return 0;
}

/* Room for the rules of list n ({g: [...]} pairs over all items), at most
 * RT_CONFIG_FALLBACK_RULES_MAX; *cap receives the count allocated. */
static int alloc_rules(struct ld *ld, yaml_node_t *n, const char *path,
                       struct rt_fallback_rule **rules, uint32_t *cap)
{
    size_t pairs = 0;

    if (tg_yaml_expect(&ld->y, n, path, YAML_SEQUENCE_NODE) != 0)
        return TG_ECONFIG;
    TG_YAML_FOR_ITEMS(n, item)
    {
        yaml_node_t *e = tg_yaml_node(&ld->y, *item);

        if (e != NULL && e->type == YAML_MAPPING_NODE)
            pairs += (size_t)(e->data.mapping.pairs.top - e->data.mapping.pairs.start);
    }
    if (pairs > RT_CONFIG_FALLBACK_RULES_MAX)
        return tg_yaml_fail(&ld->y, n, path, "too many fallback rules (%zu, max %d)", pairs,
                            RT_CONFIG_FALLBACK_RULES_MAX);
    *cap = (uint32_t)pairs;
    *rules = calloc(pairs > 0 ? pairs : 1, sizeof(**rules));
    if (*rules == NULL)
        return tg_yaml_fail(&ld->y, n, path, "out of memory");
    return 0;
}

/* One fallback list (fallbacks, context_window_fallbacks, content_policy_fallbacks): replaces
 * what an earlier section set (router_settings is read after litellm_settings); null keeps it. */
static int parse_rule_list(struct ld *ld, yaml_node_t *n, const char *path,
                           struct rt_fallback_rule **rules, uint32_t *n_rules)
{
    uint32_t cap = 0;

    if (tg_yaml_is_null(n))
        return 0;
    free(*rules);
    *rules = NULL;
    *n_rules = 0;
    if (alloc_rules(ld, n, path, rules, &cap) != 0)
        return TG_ECONFIG;
    return parse_fallback_rules(ld, n, path, *rules, cap, n_rules);
}

/* router_settings, or (litellm = 1) the routing keys LiteLLM also reads from litellm_settings:
 * fallbacks, context_window_fallbacks, content_policy_fallbacks, default_fallbacks,
 * num_retries, allowed_fails, cooldown_time (request_timeout is read with the timeouts).
 * litellm_settings is parsed first, so router_settings wins when both set a value. */
struct routing_ctx {
    struct ld *ld;
    int litellm;
};

static int routing_key(void *ctx, const char *k, const yaml_node_t *knode, yaml_node_t *v,
                       const char *p)
{
    struct routing_ctx *rx = ctx;
    struct ld *ld = rx->ld;
    struct rt_config *cfg = ld->cfg;
    int litellm = rx->litellm;
    int rc = 0;

    if (strcmp(k, litellm ? "request_timeout" : "timeout") == 0) {
        return 0;
    } else if (litellm && strcmp(k, "num_retries") != 0 && strcmp(k, "allowed_fails") != 0 &&
               strcmp(k, "cooldown_time") != 0 && strcmp(k, "fallbacks") != 0 &&
               strcmp(k, "context_window_fallbacks") != 0 &&
               strcmp(k, "content_policy_fallbacks") != 0 &&
               strcmp(k, "default_fallbacks") != 0 && strcmp(k, "ssl_verify") != 0 &&
               strcmp(k, "timezone") != 0) {
        tg_yaml_warn(&ld->y, knode, p, "unknown key, ignored");
    } else if (litellm && strcmp(k, "timezone") == 0) {
        /* LiteLLM's budget reset time zone (budgets by the calendar, tg_period.h) */
        const char *s = NULL;
        char why[160];

        if (tg_yaml_scalar(&ld->y, v, p, &s) != 0)
            return TG_ECONFIG;
        if (tg_period_check_tz(s, why, sizeof(why)) != 0)
            return tg_yaml_fail(&ld->y, v, p, "%s", why);
        snprintf(cfg->timezone, sizeof(cfg->timezone), "%s", s);
    } else if (!litellm && (strcmp(k, "redis_host") == 0 || strcmp(k, "redis_port") == 0 ||
                            strcmp(k, "redis_password") == 0)) {
        rc = rt_config_redis_litellm_key(ld, k, v, p); /* tollgate.redis (config_redis.c) */
    } else if (strcmp(k, "routing_strategy") == 0) {
        const char *s = NULL;

        if (tg_yaml_scalar(&ld->y, v, p, &s) != 0)
            return TG_ECONFIG;
        if (strcmp(s, "simple-shuffle") == 0)
            cfg->routing_strategy = RT_STRATEGY_SIMPLE_SHUFFLE;
        else if (strcmp(s, "least-busy") == 0)
            cfg->routing_strategy = RT_STRATEGY_LEAST_BUSY;
        else if (strcmp(s, "latency-based-routing") == 0)
            cfg->routing_strategy = RT_STRATEGY_LATENCY;
        else /* an existing LiteLLM config keeps working: warn, route by shuffle */
            tg_yaml_warn(&ld->y, v, p,
                         "unsupported strategy \"%s\", using simple-shuffle (supported: "
                         "simple-shuffle, least-busy, latency-based-routing)",
                         s);
    } else if (strcmp(k, "num_retries") == 0) {
        uint32_t r = 0;

        rc = tg_yaml_u32(&ld->y, v, p, 16, &r);
        cfg->num_retries = (int32_t)r;
    } else if (strcmp(k, "retry_after") == 0) {
        rc = tg_yaml_u32(&ld->y, v, p, 3600, &cfg->retry_after_s);
    } else if (strcmp(k, "allowed_fails") == 0) {
        rc = tg_yaml_u32(&ld->y, v, p, 1000000, &cfg->allowed_fails);
    } else if (strcmp(k, "cooldown_time") == 0) {
        uint32_t ms = 0;
        const char *txt = NULL;

        /* 0 disables cooldowns (as in LiteLLM). */
        if (tg_yaml_scalar(&ld->y, v, p, &txt) != 0)
            return TG_ECONFIG;
        if (strcmp(txt, "0") == 0 || strcmp(txt, "0.0") == 0)
            cfg->cooldown_s = 0;
        else if ((rc = tg_yaml_seconds_ms(&ld->y, v, p, &ms)) == 0)
            cfg->cooldown_s = (ms + 999) / 1000;
    } else if (strcmp(k, "fallbacks") == 0) {
        rc = parse_rule_list(ld, v, p, &cfg->fallbacks, &cfg->n_fallbacks);
    } else if (strcmp(k, "context_window_fallbacks") == 0) {
        rc = parse_rule_list(ld, v, p, &cfg->cw_fallbacks, &cfg->n_cw_fallbacks);
    } else if (strcmp(k, "content_policy_fallbacks") == 0) {
        rc = parse_rule_list(ld, v, p, &cfg->cp_fallbacks, &cfg->n_cp_fallbacks);
    } else if (strcmp(k, "default_fallbacks") == 0) {
        if (tg_yaml_is_null(v))
            return 0;
        rc = parse_group_list(ld, v, p, cfg->default_fallbacks, &cfg->n_default_fallbacks, 1);
    } else if (strcmp(k, "model_group_alias") == 0) {
        if (tg_yaml_is_null(v))
            return 0;
        cfg->aliases = calloc(RT_CONFIG_ALIASES_MAX, sizeof(*cfg->aliases)); /* 66 KB */
        if (cfg->aliases == NULL)
            return tg_yaml_fail(&ld->y, v, p, "out of memory");
        rc = parse_aliases(ld, v, p, cfg->aliases, RT_CONFIG_ALIASES_MAX, &cfg->n_aliases);
    } else if (litellm && strcmp(k, "ssl_verify") == 0) {
        rc = rt_config_parse_ssl_verify(ld, v, p, &cfg->ssl_verify, cfg->ssl_ca_file,
                                        sizeof(cfg->ssl_ca_file));
    } else if (strcmp(k, "enforce_fallback_model_access") == 0) {
        rc = tg_yaml_bool(&ld->y, v, p, &cfg->enforce_fallback_model_access);
    } else if (strcmp(k, "enable_pre_call_checks") == 0) {
        rc = tg_yaml_bool(&ld->y, v, p, &cfg->enable_pre_call_checks);
    } else {
        tg_yaml_warn(&ld->y, knode, p, "unknown key, ignored");
    }
    return rc;
}

static int parse_router_settings(struct ld *ld, yaml_node_t *n, const char *section, int litellm)
{
    struct routing_ctx rc = {ld, litellm};

    return tg_yaml_map(&ld->y, n, section, routing_key, &rc);
}

static int general_key(void *ctx, const char *k, const yaml_node_t *knode, yaml_node_t *v,
                       const char *p)
{
    struct ld *ld = ctx;

    if (strcmp(k, "master_key") == 0)
        return tg_yaml_is_null(v) ? 0
                                  : tg_yaml_str(&ld->y, v, p, ld->cfg->master_key,
                                                sizeof(ld->cfg->master_key));
    tg_yaml_warn(&ld->y, knode, p, "unknown key, ignored");
    return 0;
}

static int parse_general_settings(struct ld *ld, yaml_node_t *n)
{
    return tg_yaml_map(&ld->y, n, "general_settings", general_key, ld);
}

/* ---- tollgate: (unknown keys are errors) ---- */

static int unknown_key(struct ld *ld, yaml_node_pair_t *pair, const char *p)
{
    return tg_yaml_fail(&ld->y, tg_yaml_node(&ld->y, pair->key), p, "unknown key");
}

static int model_name_known(struct ld *ld, const char *name)
{
    return rt_config_has_group(ld->cfg, name) || has_alias(ld->cfg, name);
}

/* A key's part being read: the loader and the spec. */
struct key_ctx {
    struct ld *ld;
    struct rt_key_spec *ks;
    int is_tpm; /* model limits: model_tpm_limit (else model_rpm_limit) */
};

static int model_limit_key(void *ctx, const char *k, const yaml_node_t *knode, yaml_node_t *v,
                           const char *p)
{
    struct key_ctx *kc = ctx;
    struct ld *ld = kc->ld;
    struct rt_key_spec *ks = kc->ks;
    struct rt_key_model_limit *l = NULL;
    int64_t lim = 0;

    if (!model_name_known(ld, k))
        return tg_yaml_fail(&ld->y, knode, p, "unknown model group \"%s\"", k);
    if (rt_config_get_limit(ld, v, p, &lim) != 0)
        return TG_ECONFIG;
    for (uint32_t i = 0; i < ks->n_model_limits; i++) {
        if (strcmp(ks->model_limits[i].group, k) == 0)
            l = &ks->model_limits[i];
    }
    if (l == NULL) {
        if (ks->n_model_limits >= RT_KEY_MODEL_LIMITS_MAX)
            return tg_yaml_fail(&ld->y, knode, p, "too many model limits (max %d)",
                                RT_KEY_MODEL_LIMITS_MAX);
        if (strlen(k) >= RT_NAME_CAP)
            return tg_yaml_fail(&ld->y, knode, p, "group name too long");
        l = &ks->model_limits[ks->n_model_limits++];
        rt_config_fmt_cut(l->group, sizeof(l->group), "%s", k);
        l->rpm = RT_LIMIT_NONE;
        l->tpm = RT_LIMIT_NONE;
    }
    if (kc->is_tpm)
        l->tpm = lim;
    else
        l->rpm = lim;
    return 0;
}

static int parse_key_model_limits(struct ld *ld, yaml_node_t *n, const char *path,
                                  struct rt_key_spec *ks, int is_tpm)
{
    struct key_ctx kc = {ld, ks, is_tpm};

    return tg_yaml_map(&ld->y, n, path, model_limit_key, &kc);
}

/* metadata is free-form user data: keys other than these two are kept out of the router (they
 * never enter events or logs) and are not an error. */
static int metadata_key(void *ctx, const char *k, const yaml_node_t *knode, yaml_node_t *v,
                        const char *p)
{
    struct key_ctx *kc = ctx;
    struct ld *ld = kc->ld;
    struct rt_key_spec *ks = kc->ks;
    char q[TG_YAML_PATH_MAX];

    (void)knode;
    if (strcmp(k, "disable_fallbacks") == 0)
        return tg_yaml_is_null(v) ? 0 : tg_yaml_bool(&ld->y, v, p, &ks->disable_fallbacks);
    if (strcmp(k, "tags") != 0 || tg_yaml_is_null(v))
        return 0;
    if (tg_yaml_expect(&ld->y, v, p, YAML_SEQUENCE_NODE) != 0)
        return TG_ECONFIG;
    if (tg_yaml_seq_len(v) > RT_KEY_TAGS_MAX)
        return tg_yaml_fail(&ld->y, v, p, "too many tags (max %d)", RT_KEY_TAGS_MAX);
    TG_YAML_FOR_ITEMS(v, item)
    {
        tg_yaml_path_index(q, p, ks->n_tags);
        if (tg_yaml_str_nonempty(&ld->y, tg_yaml_node(&ld->y, *item), q, ks->tags[ks->n_tags],
                                 RT_TAG_CAP) != 0)
            return TG_ECONFIG;
        ks->n_tags++;
    }
    return 0;
}

static int parse_key_metadata(struct ld *ld, yaml_node_t *n, const char *path,
                              struct rt_key_spec *ks)
{
    struct key_ctx kc = {ld, ks, 0};

    return tg_yaml_map(&ld->y, n, path, metadata_key, &kc);
}

static int key_router_settings_key(void *ctx, const char *k, const yaml_node_t *knode,
                                   yaml_node_t *v, const char *p)
{
    struct key_ctx *kc = ctx;
    struct ld *ld = kc->ld;
    struct rt_key_spec *ks = kc->ks;
    uint32_t r = 0;

    (void)knode;
    if (strcmp(k, "fallbacks") == 0) {
        if (tg_yaml_is_null(v))
            return 0; /* null: the global list applies */
        ks->has_fallbacks = 1;
        return parse_fallback_rules(ld, v, p, ks->fallbacks, RT_KEY_FALLBACK_RULES_MAX,
                                    &ks->n_fallbacks);
    }
    if (strcmp(k, "model_group_alias") == 0)
        return tg_yaml_is_null(v) ? 0
                                  : parse_aliases(ld, v, p, ks->aliases, RT_KEY_ALIASES_MAX,
                                                  &ks->n_aliases);
    if (strcmp(k, "num_retries") == 0) {
        if (tg_yaml_is_null(v))
            return 0;
        if (tg_yaml_u32(&ld->y, v, p, 16, &r) != 0)
            return TG_ECONFIG;
        ks->num_retries = (int32_t)r;
        return 0;
    }
    return TG_YAML_UNKNOWN;
}

static int parse_key_router_settings(struct ld *ld, yaml_node_t *n, const char *path,
                                     struct rt_key_spec *ks)
{
    struct key_ctx kc = {ld, ks, 0};

    return tg_yaml_map(&ld->y, n, path, key_router_settings_key, &kc);
}

static int parse_key(struct ld *ld, yaml_node_t *n, const char *path, struct rt_key_spec *ks)
{
    char p[TG_YAML_PATH_MAX], q[TG_YAML_PATH_MAX];
    int have_key = 0;
    yaml_node_t *model_nodes[RT_KEY_MODELS_MAX]; /* models entries, for the line of an error */

    if (tg_yaml_expect(&ld->y, n, path, YAML_MAPPING_NODE) != 0)
        return TG_ECONFIG;
    memset(ks, 0, sizeof(*ks));
    ks->max_budget_nusd = RT_LIMIT_NONE;
    ks->rpm_limit = RT_LIMIT_NONE;
    ks->tpm_limit = RT_LIMIT_NONE;
    ks->max_parallel_requests = RT_LIMIT_NONE;
    ks->num_retries = -1;
    TG_YAML_FOR_PAIRS(n, pair)
    {
        yaml_node_t *v;
        const char *k = tg_yaml_pair(&ld->y, pair, path, p, &v);
        int rc = 0;

        if (k == NULL)
            return TG_ECONFIG;
        if (strcmp(k, "key") == 0) {
            const char *s = NULL;

            if (tg_yaml_scalar(&ld->y, v, p, &s) != 0)
                return TG_ECONFIG;
            if (strlen(s) < 8 || strlen(s) >= RT_SECRET_CAP)
                return tg_yaml_fail(&ld->y, v, p, "key must be 8..%d bytes", RT_SECRET_CAP - 1);
            tg_sha256_hex(s, strlen(s), ks->key_hash);
            have_key = 1;
        } else if (strcmp(k, "key_alias") == 0) {
            rc = tg_yaml_is_null(v)
                     ? 0
                     : tg_yaml_str(&ld->y, v, p, ks->key_alias, sizeof(ks->key_alias));
        } else if (strcmp(k, "team_id") == 0) {
            rc = tg_yaml_is_null(v) ? 0
                                    : tg_yaml_str(&ld->y, v, p, ks->team_id, sizeof(ks->team_id));
        } else if (strcmp(k, "user_id") == 0) {
            rc = tg_yaml_is_null(v) ? 0
                                    : tg_yaml_str(&ld->y, v, p, ks->user_id, sizeof(ks->user_id));
        } else if (strcmp(k, "models") == 0) {
            if (tg_yaml_is_null(v))
                continue;
            if (tg_yaml_expect(&ld->y, v, p, YAML_SEQUENCE_NODE) != 0)
                return TG_ECONFIG;
            if (tg_yaml_seq_len(v) > RT_KEY_MODELS_MAX)
                return tg_yaml_fail(&ld->y, v, p, "too many models (max %d)", RT_KEY_MODELS_MAX);
            TG_YAML_FOR_ITEMS(v, item)
            {
                yaml_node_t *e = tg_yaml_node(&ld->y, *item);

                tg_yaml_path_index(q, p, ks->n_models);
                if (tg_yaml_str_nonempty(&ld->y, e, q, ks->models[ks->n_models], RT_NAME_CAP) != 0)
                    return TG_ECONFIG;
                model_nodes[ks->n_models] = e; /* checked once the key's aliases are known */
                ks->n_models++;
            }
        } else if (strcmp(k, "max_budget") == 0) {
            int64_t fusd = 0;

            if (tg_yaml_is_null(v))
                continue;
            rc = tg_yaml_usd_fusd(&ld->y, v, p, &fusd);
            ks->max_budget_nusd = fusd / 1000000;
        } else if (strcmp(k, "budget_duration") == 0) {
            if (tg_yaml_is_null(v))
                continue;
            rc = tg_yaml_duration_s(&ld->y, v, p, 0, INT64_MAX, &ks->budget_duration_s);
        } else if (strcmp(k, "rpm_limit") == 0) {
            rc = rt_config_get_limit(ld, v, p, &ks->rpm_limit);
        } else if (strcmp(k, "tpm_limit") == 0) {
            rc = rt_config_get_limit(ld, v, p, &ks->tpm_limit);
        } else if (strcmp(k, "max_parallel_requests") == 0) {
            rc = rt_config_get_limit(ld, v, p, &ks->max_parallel_requests);
        } else if (strcmp(k, "model_rpm_limit") == 0) {
            rc = parse_key_model_limits(ld, v, p, ks, 0);
        } else if (strcmp(k, "model_tpm_limit") == 0) {
            rc = parse_key_model_limits(ld, v, p, ks, 1);
        } else if (strcmp(k, "metadata") == 0) {
            rc = parse_key_metadata(ld, v, p, ks);
        } else if (strcmp(k, "router_settings") == 0) {
            rc = parse_key_router_settings(ld, v, p, ks);
        } else {
            rc = unknown_key(ld, pair, p);
        }
        if (rc != 0)
            return TG_ECONFIG;
    }
    if (!have_key) {
        tg_yaml_path(p, path, "key");
        return tg_yaml_fail(&ld->y, n, p, "missing");
    }
    /* models may name a group, a global alias or one of the key's own aliases (whichever order
     * models and router_settings came in) */
    for (uint32_t i = 0; i < ks->n_models; i++) {
        int own = 0;

        for (uint32_t a = 0; a < ks->n_aliases; a++)
            own |= strcmp(ks->aliases[a].alias, ks->models[i]) == 0;
        if (!own && !model_name_known(ld, ks->models[i])) {
            tg_yaml_path(p, path, "models");
            tg_yaml_path_index(q, p, i);
            return tg_yaml_fail(&ld->y, model_nodes[i], q, "unknown model group or alias \"%s\"",
                                ks->models[i]);
        }
    }
    return 0;
}

static int parse_keys(struct ld *ld, yaml_node_t *n, const char *path)
{
    struct rt_config *cfg = ld->cfg;
    char p[TG_YAML_PATH_MAX];
    size_t count;

    if (tg_yaml_is_null(n))
        return 0;
    if (tg_yaml_expect(&ld->y, n, path, YAML_SEQUENCE_NODE) != 0)
        return TG_ECONFIG;
    count = tg_yaml_seq_len(n);
    if (count > RT_CONFIG_STATIC_KEYS_MAX)
        return tg_yaml_fail(&ld->y, n, path, "too many keys (%zu, max %d)", count,
                            RT_CONFIG_STATIC_KEYS_MAX);
    if (count == 0)
        return 0;
    cfg->keys = calloc(count, sizeof(*cfg->keys));
    if (cfg->keys == NULL)
        return tg_yaml_fail(&ld->y, n, path, "out of memory");
    TG_YAML_FOR_ITEMS(n, item)
    {
        yaml_node_t *e = tg_yaml_node(&ld->y, *item);

        tg_yaml_path_index(p, path, cfg->n_keys);
        if (parse_key(ld, e, p, &cfg->keys[cfg->n_keys]) != 0)
            return TG_ECONFIG;
        for (uint32_t j = 0; j < cfg->n_keys; j++) {
            if (strcmp(cfg->keys[j].key_hash, cfg->keys[cfg->n_keys].key_hash) == 0)
                return tg_yaml_fail(&ld->y, e, p, "duplicate key (same value as %s[%u])", path, j);
        }
        cfg->n_keys++;
    }
    return 0;
}

/* "host:port" into dst (cap bytes); its port in *port. */
static int parse_listen(struct ld *ld, yaml_node_t *n, const char *p, char *dst, size_t cap,
                        uint64_t *port)
{
    const char *colon;

    if (tg_yaml_str_nonempty(&ld->y, n, p, dst, cap) != 0)
        return TG_ECONFIG;
    colon = strrchr(dst, ':');
    if (colon == NULL || colon == dst || tg_parse_u64(colon + 1, port) != 0 || *port == 0 ||
        *port > 65535)
        return tg_yaml_fail(&ld->y, n, p, "expected host:port");
    return 0;
}

static int parse_tollgate(struct ld *ld, yaml_node_t *n)
{
    struct rt_config *cfg = ld->cfg;
    char p[TG_YAML_PATH_MAX], q[TG_YAML_PATH_MAX];
    const yaml_node_t *seg_node = NULL; /* spool.segment_bytes, checked against max_bytes */

    if (tg_yaml_is_null(n))
        return 0;
    if (tg_yaml_expect(&ld->y, n, "tollgate", YAML_MAPPING_NODE) != 0)
        return TG_ECONFIG;
    TG_YAML_FOR_PAIRS(n, pair)
    {
        yaml_node_t *v;
        const char *k = tg_yaml_pair(&ld->y, pair, "tollgate", p, &v);
        int rc = 0;

        if (k == NULL)
            return TG_ECONFIG;
        if (strcmp(k, "listen") == 0) {
            uint64_t port = 0;

            rc = parse_listen(ld, v, p, cfg->listen, sizeof(cfg->listen), &port);
        } else if (strcmp(k, "admin_listen") == 0) {
            uint64_t port = 0;

            if (tg_yaml_is_null(v))
                continue;
            rc = parse_listen(ld, v, p, cfg->admin_listen, sizeof(cfg->admin_listen), &port);
            ld->admin_node = v;
        } else if (strcmp(k, "threads") == 0) {
            rc = tg_yaml_u32(&ld->y, v, p, 256, &cfg->threads);
            if (rc == 0 && cfg->threads == 0)
                rc = tg_yaml_fail(&ld->y, v, p, "expected at least 1");
        } else if (strcmp(k, "upstream_client") == 0) {
            const char *s = NULL;

            if (tg_yaml_scalar(&ld->y, v, p, &s) != 0)
                return TG_ECONFIG;
            if (strcmp(s, "native") == 0)
                cfg->upstream_native = 1;
            else if (strcmp(s, "curl") == 0)
                cfg->upstream_native = 0;
            else
                rc = tg_yaml_fail(&ld->y, v, p, "expected native or curl");
        } else if (strcmp(k, "keys") == 0) {
            rc = parse_keys(ld, v, p);
        } else if (strcmp(k, "allow_unauthenticated") == 0) {
            rc = tg_yaml_bool(&ld->y, v, p, &cfg->allow_unauthenticated);
        } else if (strcmp(k, "redis") == 0) {
            rc = rt_config_parse_redis(ld, v, p);
        } else if (strcmp(k, "price_map") == 0) {
            rc = tg_yaml_str_nonempty(&ld->y, v, p, cfg->price_map, sizeof(cfg->price_map));
            ld->price_map_line = (uint32_t)v->start_mark.line + 1;
        } else if (strcmp(k, "kafka") == 0 || strcmp(k, "spool") == 0 || strcmp(k, "limits") == 0) {
            if (tg_yaml_is_null(v))
                continue;
            if (tg_yaml_expect(&ld->y, v, p, YAML_MAPPING_NODE) != 0)
                return TG_ECONFIG;
            TG_YAML_FOR_PAIRS(v, sp)
            {
                yaml_node_t *sv;
                const char *sk = tg_yaml_pair(&ld->y, sp, p, q, &sv);

                if (sk == NULL)
                    return TG_ECONFIG;
                if (strcmp(k, "kafka") == 0 && tg_kafka_opts_is_key(sk)) {
                    continue; /* tg_kafka_opts_parse, below */
                } else if (strcmp(k, "kafka") == 0 && strcmp(sk, "brokers") == 0) {
                    rc = tg_yaml_str(&ld->y, sv, q, cfg->kafka_brokers, sizeof(cfg->kafka_brokers));
                } else if (strcmp(k, "kafka") == 0 && strcmp(sk, "events_topic") == 0) {
                    rc = tg_yaml_str_nonempty(&ld->y, sv, q, cfg->events_topic,
                                              sizeof(cfg->events_topic));
                } else if (strcmp(k, "kafka") == 0 && strcmp(sk, "events_per_record") == 0) {
                    rc = tg_yaml_u32_range(&ld->y, sv, q, 1, PROTO_RECORD_EVENTS_MAX,
                                           &cfg->events_per_record);
                } else if (strcmp(k, "kafka") == 0 && strcmp(sk, "control_topic") == 0) {
                    rc = tg_yaml_str_nonempty(&ld->y, sv, q, cfg->control_topic,
                                              sizeof(cfg->control_topic));
                } else if (strcmp(k, "spool") == 0 && strcmp(sk, "dir") == 0) {
                    rc =
                        tg_yaml_str_nonempty(&ld->y, sv, q, cfg->spool_dir, sizeof(cfg->spool_dir));
                } else if (strcmp(k, "spool") == 0 && strcmp(sk, "max_bytes") == 0) {
                    rc = tg_yaml_u64(&ld->y, sv, q, UINT64_MAX, &cfg->spool_max_bytes);
                    if (rc == 0 && cfg->spool_max_bytes < 1024u * 1024u)
                        rc = tg_yaml_fail(&ld->y, sv, q, "expected at least 1048576 bytes");
                } else if (strcmp(k, "spool") == 0 && strcmp(sk, "segment_bytes") == 0) {
                    rc = tg_yaml_u64(&ld->y, sv, q, 1ull << 32, &cfg->spool_segment_bytes);
                    if (rc == 0 && cfg->spool_segment_bytes < 1024u * 1024u)
                        rc = tg_yaml_fail(&ld->y, sv, q, "expected at least 1048576 bytes");
                    seg_node = sv;
                } else if (strcmp(k, "spool") == 0 && strcmp(sk, "full_policy") == 0) {
                    const char *s = NULL;

                    if (tg_yaml_scalar(&ld->y, sv, q, &s) != 0)
                        return TG_ECONFIG;
                    if (strcmp(s, "drop") == 0)
                        cfg->spool_full_policy = RT_SPOOL_FULL_DROP;
                    else if (strcmp(s, "reject") == 0)
                        cfg->spool_full_policy = RT_SPOOL_FULL_REJECT;
                    else
                        rc = tg_yaml_fail(&ld->y, sv, q, "expected drop or reject");
                } else if (strcmp(k, "spool") == 0 && strcmp(sk, "fsync") == 0) {
                    const char *s = NULL;
                    uint64_t ms = 0;

                    if (tg_yaml_scalar(&ld->y, sv, q, &s) != 0)
                        return TG_ECONFIG;
                    if (strcmp(s, "none") == 0) {
                        cfg->spool_fsync = RT_SPOOL_FSYNC_NONE;
                    } else if (tg_parse_u64(s, &ms) == 0 && ms >= 1 && ms <= 60000) {
                        cfg->spool_fsync = RT_SPOOL_FSYNC_INTERVAL;
                        cfg->spool_fsync_interval_ms = (uint32_t)ms;
                    } else {
                        rc = tg_yaml_fail(&ld->y, sv, q,
                                          "expected none or an interval in ms (1..60000)");
                    }
                } else if (strcmp(k, "limits") == 0 && strcmp(sk, "max_body_bytes") == 0) {
                    rc = tg_yaml_u64(&ld->y, sv, q, 1ull << 32, &cfg->max_body_bytes);
                    if (rc == 0 && cfg->max_body_bytes == 0)
                        rc = tg_yaml_fail(&ld->y, sv, q, "expected at least 1");
                } else if (strcmp(k, "limits") == 0 && strcmp(sk, "max_connections") == 0) {
                    rc = tg_yaml_u32(&ld->y, sv, q, 1000000, &cfg->max_connections);
                    if (rc == 0 && cfg->max_connections == 0)
                        rc = tg_yaml_fail(&ld->y, sv, q, "expected at least 1");
                } else if (strcmp(k, "limits") == 0 && strcmp(sk, "max_in_flight") == 0) {
                    rc = tg_yaml_u32(&ld->y, sv, q, 1000000, &cfg->max_in_flight);
                    if (rc == 0 && cfg->max_in_flight == 0)
                        rc = tg_yaml_fail(&ld->y, sv, q, "expected at least 1");
                } else if (strcmp(k, "limits") == 0 && strcmp(sk, "max_response_bytes") == 0) {
                    rc = tg_yaml_u64(&ld->y, sv, q, 1ull << 34, &cfg->max_response_bytes);
                    if (rc == 0 && cfg->max_response_bytes == 0)
                        rc = tg_yaml_fail(&ld->y, sv, q, "expected at least 1");
                } else if (strcmp(k, "limits") == 0 && strcmp(sk, "max_keys") == 0) {
                    rc = tg_yaml_u32(&ld->y, sv, q, 10000000, &cfg->max_keys);
                    if (rc == 0 && cfg->max_keys == 0)
                        rc = tg_yaml_fail(&ld->y, sv, q, "expected at least 1");
                } else if (strcmp(k, "limits") == 0 && strcmp(sk, "max_teams") == 0) {
                    rc = tg_yaml_u32(&ld->y, sv, q, 1000000, &cfg->max_teams);
                    if (rc == 0 && cfg->max_teams == 0)
                        rc = tg_yaml_fail(&ld->y, sv, q, "expected at least 1");
                } else if (strcmp(k, "limits") == 0 && strcmp(sk, "limiter_keys") == 0) {
                    rc = tg_yaml_u32(&ld->y, sv, q, 10000000, &cfg->limiter_keys);
                    if (rc == 0 && cfg->limiter_keys == 0)
                        rc = tg_yaml_fail(&ld->y, sv, q, "expected at least 1");
                } else if (strcmp(k, "limits") == 0 && strcmp(sk, "max_connections_per_ip") == 0) {
                    rc = tg_yaml_u32(&ld->y, sv, q, 1000000, &cfg->max_connections_per_ip);
                    if (rc == 0 && cfg->max_connections_per_ip == 0)
                        rc = tg_yaml_fail(&ld->y, sv, q, "expected at least 1");
                } else if (strcmp(k, "limits") == 0 && (strcmp(sk, "header_timeout_ms") == 0 ||
                                                        strcmp(sk, "body_timeout_ms") == 0 ||
                                                        strcmp(sk, "keepalive_timeout_ms") == 0 ||
                                                        strcmp(sk, "send_timeout_ms") == 0)) {
                    uint32_t *dst = strcmp(sk, "header_timeout_ms") == 0 ? &cfg->header_timeout_ms
                                    : strcmp(sk, "body_timeout_ms") == 0 ? &cfg->body_timeout_ms
                                    : strcmp(sk, "send_timeout_ms") == 0
                                        ? &cfg->send_timeout_ms
                                        : &cfg->keepalive_timeout_ms;

                    rc = tg_yaml_u32(&ld->y, sv, q, 3600000, dst);
                    if (rc == 0 && *dst < 100)
                        rc = tg_yaml_fail(&ld->y, sv, q, "expected at least 100 (milliseconds)");
                } else if (strcmp(k, "limits") == 0 && strcmp(sk, "body_min_rate") == 0) {
                    rc = tg_yaml_u32(&ld->y, sv, q, 1u << 30, &cfg->body_min_rate);
                    if (rc == 0 && cfg->body_min_rate == 0)
                        rc = tg_yaml_fail(&ld->y, sv, q, "expected at least 1 (bytes per second)");
                } else if (strcmp(k, "limits") == 0 && strcmp(sk, "max_json_depth") == 0) {
                    rc = tg_yaml_u32(&ld->y, sv, q, 1000, &cfg->max_json_depth);
                    if (rc == 0 && cfg->max_json_depth < 2)
                        rc = tg_yaml_fail(&ld->y, sv, q, "expected at least 2");
                } else if (strcmp(k, "limits") == 0 && strcmp(sk, "max_json_elements") == 0) {
                    rc = tg_yaml_u32(&ld->y, sv, q, 100000000, &cfg->max_json_elements);
                    if (rc == 0 && cfg->max_json_elements < 2)
                        rc = tg_yaml_fail(&ld->y, sv, q, "expected at least 2");
                } else {
                    rc = unknown_key(ld, sp, q);
                }
                if (rc != 0)
                    return TG_ECONFIG;
            }
            if (strcmp(k, "kafka") == 0)
                rc = tg_kafka_opts_parse(&cfg->kafka_opts, &ld->y, v, p);
        } else {
            rc = unknown_key(ld, pair, p);
        }
        if (rc != 0)
            return TG_ECONFIG;
    }
    if (cfg->n_keys > cfg->max_keys)
        return tg_yaml_fail(&ld->y, n, "tollgate.keys",
                            "more static keys (%u) than limits.max_keys (%u)", cfg->n_keys,
                            cfg->max_keys);
    if (cfg->spool_segment_bytes > cfg->spool_max_bytes)
        return tg_yaml_fail(&ld->y, seg_node, "tollgate.spool.segment_bytes",
                            "larger than spool.max_bytes (%llu)",
                            (unsigned long long)cfg->spool_max_bytes);
    return 0;
}

static void set_defaults(struct rt_config *cfg)
{
    cfg->routing_strategy = RT_STRATEGY_SIMPLE_SHUFFLE;
    cfg->num_retries = RT_DEFAULT_NUM_RETRIES;
    cfg->allowed_fails = RT_DEFAULT_ALLOWED_FAILS;
    cfg->cooldown_s = RT_DEFAULT_COOLDOWN_S;
    cfg->timeout_ms = RT_DEFAULT_TIMEOUT_MS;
    cfg->enforce_fallback_model_access = 1;
    cfg->ssl_verify = 1;
    rt_config_fmt_cut(cfg->listen, sizeof(cfg->listen), "%s", RT_DEFAULT_LISTEN);
    rt_config_fmt_cut(cfg->events_topic, sizeof(cfg->events_topic), "%s", RT_DEFAULT_EVENTS_TOPIC);
    cfg->events_per_record = 1; /* one event per record until every spend-svc reads several */
    rt_config_fmt_cut(cfg->control_topic, sizeof(cfg->control_topic), "%s",
                      RT_DEFAULT_CONTROL_TOPIC);
    cfg->spool_max_bytes = RT_DEFAULT_SPOOL_MAX_BYTES;
    cfg->spool_full_policy = RT_SPOOL_FULL_DROP;
    cfg->spool_fsync = RT_SPOOL_FSYNC_NONE;
    cfg->max_body_bytes = RT_DEFAULT_MAX_BODY_BYTES;
    cfg->max_connections = RT_DEFAULT_MAX_CONNECTIONS;
    cfg->max_in_flight = RT_DEFAULT_MAX_IN_FLIGHT;
    cfg->max_response_bytes = RT_DEFAULT_MAX_RESPONSE_BYTES;
    cfg->max_keys = RT_DEFAULT_MAX_KEYS;
    cfg->max_teams = RT_DEFAULT_MAX_TEAMS;
    cfg->limiter_keys = RT_DEFAULT_LIMITER_KEYS;
    cfg->header_timeout_ms = RT_DEFAULT_HEADER_TIMEOUT_MS;
    cfg->body_timeout_ms = RT_DEFAULT_BODY_TIMEOUT_MS;
    cfg->body_min_rate = RT_DEFAULT_BODY_MIN_RATE;
    cfg->keepalive_timeout_ms = RT_DEFAULT_KEEPALIVE_TIMEOUT_MS;
    cfg->send_timeout_ms = RT_DEFAULT_SEND_TIMEOUT_MS;
    cfg->max_json_depth = RT_DEFAULT_MAX_JSON_DEPTH;
    cfg->max_json_elements = RT_DEFAULT_MAX_JSON_ELEMENTS;
    cfg->threads = RT_DEFAULT_THREADS;
    cfg->upstream_native = 1;
}

/* Root: model_list is parsed first wherever it appears (the other sections refer to its
 * groups), then router_settings (aliases are needed by key models lists), then the rest. */
static int parse_root(struct ld *ld, yaml_node_t *root)
{
    static const char *const order[] = {"model_list", "router_settings", "general_settings",
                                        "tollgate", "litellm_settings"};
    yaml_node_t *sections[5] = {NULL, NULL, NULL, NULL, NULL};

    if (root == NULL)
        return tg_yaml_fail(&ld->y, NULL, "", "empty document");
    if (root->type != YAML_MAPPING_NODE)
        return tg_yaml_fail(&ld->y, root, "", "expected a mapping at the top level");
    TG_YAML_FOR_PAIRS(root, pair)
    {
        const char *k = tg_yaml_key(&ld->y, pair, "");
        int known = 0;

        if (k == NULL)
            return TG_ECONFIG;
        for (int i = 0; i < 5; i++) {
            if (strcmp(k, order[i]) == 0) {
                if (sections[i] != NULL)
                    return tg_yaml_fail(&ld->y, tg_yaml_node(&ld->y, pair->key), k,
                                        "duplicate section");
                sections[i] = tg_yaml_node(&ld->y, pair->value);
                known = 1;
            }
        }
        if (!known)
            tg_yaml_warn(&ld->y, tg_yaml_node(&ld->y, pair->key), k, "unknown key, ignored");
    }
    /* The default timeout of every deployment (litellm_settings.request_timeout, overridden by
     * router_settings.timeout) is needed before model_list: read it first. */
    for (int si = 4; si >= 1; si -= 3) {
        const char *name = si == 4 ? "request_timeout" : "timeout";
        char p[TG_YAML_PATH_MAX];

        if (sections[si] == NULL || sections[si]->type != YAML_MAPPING_NODE)
            continue;
        TG_YAML_FOR_PAIRS(sections[si], pair)
        {
            yaml_node_t *k = tg_yaml_node(&ld->y, pair->key);

            if (k == NULL || k->type != YAML_SCALAR_NODE ||
                strcmp((const char *)k->data.scalar.value, name) != 0)
                continue;
            tg_yaml_path(p, order[si], name);
            if (tg_yaml_seconds_ms(&ld->y, tg_yaml_node(&ld->y, pair->value), p,
                                   &ld->cfg->timeout_ms) != 0)
                return TG_ECONFIG;
        }
    }
    if (sections[0] == NULL || tg_yaml_is_null(sections[0]))
        return tg_yaml_fail(&ld->y, root, "model_list",
                            "missing (at least one deployment is needed)");
    if (rt_config_parse_model_list(ld, sections[0]) != 0)
        return TG_ECONFIG;
    if (ld->cfg->n_deployments == 0)
        return tg_yaml_fail(&ld->y, sections[0], "model_list",
                            "empty (at least one deployment is needed)");
    if (sections[4] != NULL && parse_router_settings(ld, sections[4], "litellm_settings", 1) != 0)
        return TG_ECONFIG;
    if (sections[1] != NULL && parse_router_settings(ld, sections[1], "router_settings", 0) != 0)
        return TG_ECONFIG;
    /* litellm_settings.ssl_verify for the deployments without one of their own */
    for (uint32_t i = 0; i < ld->cfg->n_deployments; i++) {
        struct rt_deployment_conf *d = &ld->cfg->deployments[i];

        if (d->ssl_verify_set)
            continue;
        d->ssl_verify = ld->cfg->ssl_verify;
        memcpy(d->ssl_ca_file, ld->cfg->ssl_ca_file, sizeof(d->ssl_ca_file));
    }
    if (sections[2] != NULL && parse_general_settings(ld, sections[2]) != 0)
        return TG_ECONFIG;
    if (sections[3] != NULL && parse_tollgate(ld, sections[3]) != 0)
        return TG_ECONFIG;
    if (rt_config_redis_finish(ld) != 0)
        return TG_ECONFIG;
    if (ld->cfg->max_connections_per_ip == 0 ||
        ld->cfg->max_connections_per_ip > ld->cfg->max_connections)
        ld->cfg->max_connections_per_ip = ld->cfg->max_connections;
    if (ld->cfg->admin_listen[0] != '\0' &&
        strcmp(strrchr(ld->cfg->admin_listen, ':'), strrchr(ld->cfg->listen, ':')) == 0)
        return tg_yaml_fail(&ld->y, ld->admin_node, "tollgate.admin_listen",
                            "the port of tollgate.listen (%s): give the admin listener a port of "
                            "its own",
                            ld->cfg->listen);
    return rt_config_resolve_prices(ld);
}

struct rt_config *rt_config_load_buffer(const char *name, const char *data, size_t len,
                                        struct rt_config_diag *diag)
{
    struct ld ld;
    const char *file = name != NULL ? name : "config";
    struct rt_config *cfg = NULL;

    memset(diag, 0, sizeof(*diag));
    memset(&ld, 0, sizeof(ld));
    ld.diag = diag;
    cfg = calloc(1, sizeof(*cfg));
    if (cfg == NULL) {
        rt_config_fmt_cut(diag->error, sizeof(diag->error), "%s: out of memory", file);
        return NULL;
    }
    ld.cfg = cfg;
    rt_config_fmt_cut(cfg->path, sizeof(cfg->path), "%s", file);
    set_defaults(cfg);
    if (tg_yaml_open(&ld.y, file, data, len, diag_sink, diag) == 0)
        parse_root(&ld, tg_yaml_root(&ld.y));
    tg_yaml_close(&ld.y);
    memset(ld.url_password, 0, sizeof(ld.url_password));
    memset(ld.ls_password, 0, sizeof(ld.ls_password));
    if (ld.y.failed || diag->error[0] != '\0') {
        if (diag->error[0] == '\0')
            rt_config_fmt_cut(diag->error, sizeof(diag->error), "%s: invalid configuration", file);
        rt_config_destroy(&cfg);
        return NULL;
    }
    return cfg;
}

struct rt_config *rt_config_load_file(const char *path, struct rt_config_diag *diag)
{
    char *data;
    size_t len = 0;
    struct rt_config *cfg;

    memset(diag, 0, sizeof(*diag));
    data = tg_yaml_read_file(path, CONFIG_FILE_MAX_BYTES, &len, diag->error, sizeof(diag->error));
    if (data == NULL)
        return NULL;
    cfg = rt_config_load_buffer(path, data, len, diag);
    free(data);
    return cfg;
}

void rt_config_destroy(struct rt_config **cfg)
{
    struct rt_config *c;

    if (cfg == NULL || *cfg == NULL)
        return;
    c = *cfg;
    if (c->deployments != NULL) {
        /* Provider keys are secrets: leave nothing behind in freed memory. */
        for (uint32_t i = 0; i < c->n_deployments; i++)
            rt_config_free_cloud(&c->deployments[i]);
        memset(c->deployments, 0, (size_t)c->n_deployments * sizeof(*c->deployments));
        free(c->deployments);
    }
    free(c->fallbacks);
    free(c->cw_fallbacks);
    free(c->cp_fallbacks);
    free(c->aliases);
    if (c->keys != NULL) {
        /* Static keys held secrets only as hashes; still, leave nothing behind. */
        memset(c->keys, 0, (size_t)c->n_keys * sizeof(*c->keys));
        free(c->keys);
    }
    memset(c->master_key, 0, sizeof(c->master_key));
    tg_kafka_opts_wipe(&c->kafka_opts);
    free(c);
    *cfg = NULL;
}

size_t rt_config_secrets(const struct rt_config *cfg, const char **out, size_t cap)
{
    size_t n = 0;

    if (cfg->master_key[0] != '\0') {
        if (n < cap)
            out[n] = cfg->master_key;
        n++;
    }
    for (uint32_t i = 0; i < cfg->n_deployments; i++) {
        const struct rt_deployment_conf *d = &cfg->deployments[i];
        const char *s[6] = {d->api_key,
                            d->cloud != NULL ? d->cloud->azure_ad_token : "",
                            d->cloud != NULL ? d->cloud->client_secret : "",
                            d->cloud != NULL ? d->cloud->aws_secret_access_key : "",
                            d->cloud != NULL ? d->cloud->aws_session_token : "",
                            d->cloud != NULL ? d->cloud->aws_web_identity_token : ""};

        for (size_t j = 0; j < 6; j++) {
            if (s[j][0] == '\0')
                continue;
            if (n < cap)
                out[n] = s[j];
            n++;
        }
    }
    if (cfg->redis.password[0] != '\0') { /* tollgate.redis */
        if (n < cap)
            out[n] = cfg->redis.password;
        n++;
    }
    return n + tg_kafka_opts_secrets(&cfg->kafka_opts, n < cap ? out + n : NULL,
                                     n < cap ? cap - n : 0);
}
