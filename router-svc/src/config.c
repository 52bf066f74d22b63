#include "config.h"

#include <errno.h>
#include <stddef.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <yaml.h>

#include "providers/provider.h"
#include "tg_cfgtext.h"
#include "tg_err.h"
#include "tg_log.h"
#include "tg_units.h"
#include "tg_yaml.h"

#define TG_YAML_PATH_MAX 256
#define CONFIG_FILE_MAX_BYTES (16u * 1024u * 1024u)

/* Load context: the document and its diagnostics (tg_yaml), the diagnostics' destination, the
 * configuration being built. */
struct ld {
    struct tg_yaml y;
    struct rt_config_diag *diag;
    struct rt_config *cfg;
};

/* snprintf that cuts silently: every caller either checked the length before or wants a cut
 * value rather than none. Returns what vsnprintf returns. */
static int fmt_cut(char *dst, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fmt_cut(char *dst, size_t cap, const char *fmt, ...)
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
        fmt_cut(diag->error, sizeof(diag->error), "%s", line);
        return;
    }
    TG_WARN("msg=\"config warning\" detail=\"%s\"", line);
    if (diag->n_warnings < RT_CONFIG_WARNINGS_MAX)
        fmt_cut(diag->warnings[diag->n_warnings++], RT_CONFIG_MSG_CAP, "%s", line);
    else
        diag->warnings_dropped++;
}

/* A limit: absent or null is RT_LIMIT_NONE. */
static int get_limit(struct ld *ld, const yaml_node_t *n, const char *path, int64_t *out)
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
    fmt_cut(err, errlen,
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

/* ---- model_list ---- */

static int parse_provider_model(struct ld *ld, const yaml_node_t *n, const char *path,
                                struct rt_deployment_conf *d)
{
    char full[RT_PROVIDER_CAP + RT_NAME_CAP + 1];
    const char *slash;
    size_t plen;

    if (tg_yaml_str_nonempty(&ld->y, n, path, full, sizeof(full)) != 0)
        return TG_ECONFIG;
    slash = strchr(full, '/');
    if (slash == NULL) {
        fmt_cut(d->provider, sizeof(d->provider), "openai");
        d->provider_implicit = 1;
        if (strlen(full) >= sizeof(d->model))
            return tg_yaml_fail(&ld->y, n, path, "model name too long (max %d bytes)",
                                RT_NAME_CAP - 1);
        fmt_cut(d->model, sizeof(d->model), "%s", full);
    } else {
        plen = (size_t)(slash - full);
        if (plen == 0 || plen >= sizeof(d->provider))
            return tg_yaml_fail(&ld->y, n, path, "provider prefix must be 1..%d bytes",
                                RT_PROVIDER_CAP - 1);
        if (slash[1] == '\0')
            return tg_yaml_fail(&ld->y, n, path, "missing model name after \"%.*s/\"", (int)plen,
                                full);
        if (strlen(slash + 1) >= sizeof(d->model))
            return tg_yaml_fail(&ld->y, n, path, "model name too long (max %d bytes)",
                                RT_NAME_CAP - 1);
        memcpy(d->provider, full, plen);
        d->provider[plen] = '\0';
        fmt_cut(d->model, sizeof(d->model), "%s", slash + 1);
    }
    return 0;
}

/* Provider-specific litellm_params (struct rt_dep_cloud), by name. */
struct cloud_param {
    const char *name;
    size_t off, cap;
};
#define CLOUD_PARAM(f)                                                                             \
    {                                                                                              \
#f, offsetof(struct rt_dep_cloud, f), sizeof(((struct rt_dep_cloud *)0)->f)                \
    }
static const struct cloud_param cloud_params[] = {
    CLOUD_PARAM(api_version),
    CLOUD_PARAM(azure_ad_token),
    CLOUD_PARAM(tenant_id),
    CLOUD_PARAM(client_id),
    CLOUD_PARAM(client_secret),
    CLOUD_PARAM(azure_scope),
    CLOUD_PARAM(azure_authority_host),
    CLOUD_PARAM(vertex_project),
    CLOUD_PARAM(vertex_location),
    CLOUD_PARAM(vertex_credentials),
    CLOUD_PARAM(aws_access_key_id),
    CLOUD_PARAM(aws_secret_access_key),
    CLOUD_PARAM(aws_session_token),
    CLOUD_PARAM(aws_region_name),
    CLOUD_PARAM(aws_bedrock_runtime_endpoint),
    CLOUD_PARAM(aws_role_name),
    CLOUD_PARAM(aws_session_name),
    CLOUD_PARAM(aws_web_identity_token),
    CLOUD_PARAM(aws_sts_endpoint),
};
#define N_CLOUD_PARAMS (sizeof(cloud_params) / sizeof(cloud_params[0]))

/* The provider-specific params one litellm_params mapping gave: which, and where (for the
 * warning when the family does not read it). */
struct given_params {
    size_t n;
    const yaml_node_t *node[N_CLOUD_PARAMS];
    size_t idx[N_CLOUD_PARAMS];
    char path[N_CLOUD_PARAMS][TG_YAML_PATH_MAX];
};

/* k is a provider-specific param: parse it into d->cloud (allocated on the first one). Returns 1
 * when k is not one, else 0 or TG_ECONFIG. */
static int parse_cloud_param(struct ld *ld, const char *k, yaml_node_t *v, const char *path,
                             struct rt_deployment_conf *d, struct given_params *given)
{
    for (size_t i = 0; i < N_CLOUD_PARAMS; i++) {
        if (strcmp(k, cloud_params[i].name) != 0)
            continue;
        if (tg_yaml_is_null(v))
            return 0;
        if (d->cloud == NULL) {
            d->cloud = calloc(1, sizeof(*d->cloud));
            if (d->cloud == NULL)
                return tg_yaml_fail(&ld->y, v, path, "out of memory");
        }
        if (tg_yaml_str(&ld->y, v, path, (char *)d->cloud + cloud_params[i].off,
                        cloud_params[i].cap) != 0)
            return TG_ECONFIG;
        if (given->n < N_CLOUD_PARAMS) { /* each at most once: duplicate keys are refused */
            given->node[given->n] = v;
            given->idx[given->n] = i;
            fmt_cut(given->path[given->n], TG_YAML_PATH_MAX, "%s", path);
            given->n++;
        }
        return 0;
    }
    return 1;
}

static int family_reads(const struct rt_provider *p, const char *name)
{
    for (size_t i = 0; p->params != NULL && p->params[i] != NULL && i < RT_PROVIDER_PARAMS_MAX;
         i++) {
        if (strcmp(p->params[i], name) == 0)
            return 1;
    }
    return 0;
}

/* The value of the first of names that is set and not empty, checked for control bytes; NULL
 * when none is (or on a bad value, with *bad = 1 after the error was reported). *which gets the
 * variable's name. */
static const char *env_first(struct ld *ld, const yaml_node_t *n, const char *path,
                             const char *const *names, const char **which, int *bad)
{
    char why[160];

    *bad = 0;
    for (size_t i = 0; names != NULL && names[i] != NULL && i < RT_PROVIDER_ENV_MAX; i++) {
        const char *v = getenv(names[i]);

        if (v == NULL || v[0] == '\0')
            continue;
        if (tg_cfgtext_check(v, (size_t)-1, names[i], why, sizeof(why)) != 0) {
            tg_yaml_fail(&ld->y, n, path, "%s", why);
            *bad = 1;
            return NULL;
        }
        *which = names[i];
        return v;
    }
    return NULL;
}

/* The deployment's provider family, base URL and key (provider.h has the rules). model is the
 * litellm_params.model node, path its key path; api_key_given: the config gave api_key. */
/* A provider-specific param the config did not give, from the variable names[0] when it is
 * set. Returns 0 or TG_ECONFIG. */
static int param_env_default(struct ld *ld, const yaml_node_t *model, const char *path,
                             struct rt_deployment_conf *d, const char *param,
                             const char *const *names)
{
    const char *var = NULL, *v;
    int bad = 0;

    for (size_t i = 0; i < N_CLOUD_PARAMS; i++) {
        char *field;

        if (strcmp(cloud_params[i].name, param) != 0)
            continue;
        field = d->cloud != NULL ? (char *)d->cloud + cloud_params[i].off : NULL;
        if (field != NULL && field[0] != '\0')
            return 0; /* given */
        v = env_first(ld, model, path, names, &var, &bad);
        if (bad)
            return TG_ECONFIG;
        if (v == NULL)
            return 0;
        if (strlen(v) >= cloud_params[i].cap)
            return tg_yaml_fail(&ld->y, model, path, "the value of %s is too long", var);
        if (d->cloud == NULL) {
            d->cloud = calloc(1, sizeof(*d->cloud));
            if (d->cloud == NULL)
                return tg_yaml_fail(&ld->y, model, path, "out of memory");
        }
        fmt_cut((char *)d->cloud + cloud_params[i].off, cloud_params[i].cap, "%s", v);
        return 0;
    }
    return 0;
}

static int resolve_provider(struct ld *ld, const yaml_node_t *model, const char *path,
                            struct rt_deployment_conf *d, int api_key_given,
                            const struct given_params *given)
{
    const struct rt_provider *p;
    const char *v, *var = NULL;
    int base_is_own = 0, bad = 0;
    size_t n;

    n = strlen(d->api_base);
    while (n > 0 && d->api_base[n - 1] == '/')
        d->api_base[--n] = '\0';
    if (d->provider_implicit && strncmp(d->model, "claude-", 7) == 0)
        fmt_cut(d->provider, sizeof(d->provider), "anthropic"); /* as LiteLLM infers it */
    p = rt_provider_find(d->provider);
    if (p == NULL) {
        if (rt_provider_unsupported(d->provider))
            return tg_yaml_fail(&ld->y, model, path,
                                "provider \"%s\" is not supported by Tollgate yet (README: "
                                "Providers)",
                                d->provider);
        if (d->api_base[0] == '\0')
            return tg_yaml_fail(&ld->y, model, path,
                                "unknown provider \"%s\"; set api_base or use openai/ for an "
                                "OpenAI-compatible server",
                                d->provider);
        p = &rt_provider_openai; /* a generic OpenAI-compatible server: no key from the
                                  * environment */
        base_is_own = -1;
    }
    d->prov = p;
    for (size_t i = 0; i < given->n; i++) {
        if (!family_reads(p, cloud_params[given->idx[i]].name))
            tg_yaml_warn(&ld->y, given->node[i], given->path[i],
                         "not used by provider \"%s\", ignored", d->provider);
    }
    if (base_is_own < 0)
        return 0;
    for (size_t i = 0;
         p->param_env != NULL && p->param_env[i] != NULL && p->param_env[i + 1] != NULL; i += 2) {
        const char *const names[2] = {p->param_env[i + 1], NULL};

        if (param_env_default(ld, model, path, d, p->param_env[i], names) != 0)
            return TG_ECONFIG;
    }
    if (p->prepare != NULL) {
        /* the family completes the deployment (a credentials file, a derived base) */
        char why[RT_CONFIG_MSG_CAP] = "";

        if (p->prepare(d, why, sizeof(why)) != 0)
            return tg_yaml_fail(&ld->y, model, path, "%s", why);
    }
    if (d->api_base[0] == '\0') {
        v = env_first(ld, model, path, p->base_env, &var, &bad);
        if (bad)
            return TG_ECONFIG;
        if (v == NULL)
            v = p->default_base;
        if (v == NULL)
            return tg_yaml_fail(&ld->y, model, path,
                                "provider \"%s\" has no default base URL: set api_base%s%s",
                                p->name, p->base_env != NULL ? " or " : "",
                                p->base_env != NULL ? p->base_env[0] : "");
        if (strlen(v) >= sizeof(d->api_base))
            return tg_yaml_fail(&ld->y, model, path, "base URL too long (%s, max %zu bytes)",
                                var != NULL ? var : "default", sizeof(d->api_base) - 1);
        fmt_cut(d->api_base, sizeof(d->api_base), "%s", v);
        base_is_own = 1;
    }
    n = strlen(d->api_base);
    while (n > 0 && d->api_base[n - 1] == '/')
        d->api_base[--n] = '\0';
    if ((p->flags & RT_PROVIDER_BASE_V1) && (n < 3 || strcmp(d->api_base + n - 3, "/v1") != 0)) {
        if (n + 3 >= sizeof(d->api_base))
            return tg_yaml_fail(&ld->y, model, path, "base URL too long");
        fmt_cut(d->api_base + n, sizeof(d->api_base) - n, "/v1");
    }
    if (api_key_given || p->key_env == NULL)
        return 0;
    var = NULL;
    v = env_first(ld, model, path, p->key_env, &var, &bad);
    if (bad)
        return TG_ECONFIG;
    if (v == NULL)
        return 0;
    if (!base_is_own && !(p->flags & RT_PROVIDER_SELF_HOSTED)) {
        /* the variable holds a key for the provider's own service; api_base is another host */
        tg_yaml_warn(&ld->y, model, path,
                     "%s is set but not sent: api_base is not %s's own; give api_key to send a "
                     "key there",
                     var, p->name);
        return 0;
    }
    if (strlen(v) >= sizeof(d->api_key))
        return tg_yaml_fail(&ld->y, model, path, "the value of %s is too long (max %zu bytes)", var,
                            sizeof(d->api_key) - 1);
    fmt_cut(d->api_key, sizeof(d->api_key), "%s", v);
    return 0;
}

/* resolve_provider, then the family's own check of what the deployment gave. */
static int resolve_deployment(struct ld *ld, const yaml_node_t *model, const char *path,
                              struct rt_deployment_conf *d, int api_key_given,
                              const struct given_params *given)
{
    char why[RT_CONFIG_MSG_CAP];

    if (resolve_provider(ld, model, path, d, api_key_given, given) != 0)
        return TG_ECONFIG;
    why[0] = '\0';
    if (d->prov->check != NULL && d->prov->check(d, why, sizeof(why)) != 0)
        return tg_yaml_fail(&ld->y, model, path, "%s", why);
    return 0;
}

static int parse_litellm_params(struct ld *ld, yaml_node_t *n, const char *path,
                                struct rt_deployment_conf *d, int *timeout_set,
                                int *stream_timeout_set)
{
    char p[TG_YAML_PATH_MAX];
    char model_path[TG_YAML_PATH_MAX];
    const yaml_node_t *model = NULL;
    int api_key_given = 0;
    struct given_params given;

    given.n = 0;
    if (tg_yaml_expect(&ld->y, n, path, YAML_MAPPING_NODE) != 0)
        return TG_ECONFIG;
    TG_YAML_FOR_PAIRS(n, pair)
    {
        const char *k = tg_yaml_key(&ld->y, pair, path);
        yaml_node_t *v = tg_yaml_node(&ld->y, pair->value);
        int rc = 0;

        if (k == NULL)
            return TG_ECONFIG;
        tg_yaml_path(p, path, k);
        if (strcmp(k, "model") == 0) {
            rc = parse_provider_model(ld, v, p, d);
            model = v;
            fmt_cut(model_path, sizeof(model_path), "%s", p);
        } else if (strcmp(k, "api_base") == 0) {
            rc = tg_yaml_is_null(v) ? 0
                                    : tg_yaml_str(&ld->y, v, p, d->api_base, sizeof(d->api_base));
        } else if (strcmp(k, "api_key") == 0) {
            api_key_given = !tg_yaml_is_null(v);
            rc = tg_yaml_is_null(v) ? 0 : tg_yaml_str(&ld->y, v, p, d->api_key, sizeof(d->api_key));
        } else if (strcmp(k, "rpm") == 0) {
            rc = get_limit(ld, v, p, &d->rpm);
        } else if (strcmp(k, "tpm") == 0) {
            rc = get_limit(ld, v, p, &d->tpm);
        } else if (strcmp(k, "timeout") == 0) {
            rc = tg_yaml_seconds_ms(&ld->y, v, p, &d->timeout_ms);
            *timeout_set = 1;
        } else if (strcmp(k, "stream_timeout") == 0) {
            rc = tg_yaml_seconds_ms(&ld->y, v, p, &d->stream_timeout_ms);
            *stream_timeout_set = 1;
        } else if (strcmp(k, "weight") == 0) {
            rc = tg_yaml_u32(&ld->y, v, p, 1000000, &d->weight);
        } else if (strcmp(k, "order") == 0) {
            rc = tg_yaml_i32(&ld->y, v, p, &d->order);
            if (rc == 0 && d->order < 0)
                rc = tg_yaml_fail(&ld->y, v, p, "expected a non-negative integer");
        } else if ((rc = parse_cloud_param(ld, k, v, p, d, &given)) != 1) {
            /* a provider-specific param: parsed (rc 0) or an error */
        } else if (strcmp(k, "input_cost_per_token") == 0) {
            rc = tg_yaml_usd_fusd(&ld->y, v, p, &d->in_fusd_per_token);
        } else if (strcmp(k, "output_cost_per_token") == 0) {
            rc = tg_yaml_usd_fusd(&ld->y, v, p, &d->out_fusd_per_token);
        } else {
            tg_yaml_warn(&ld->y, tg_yaml_node(&ld->y, pair->key), p, "unknown key, ignored");
            rc = 0;
        }
        if (rc != 0)
            return TG_ECONFIG;
    }
    if (model == NULL) {
        tg_yaml_path(p, path, "model");
        return tg_yaml_fail(&ld->y, n, p, "missing");
    }
    return resolve_deployment(ld, model, model_path, d, api_key_given, &given);
}

static int parse_deployment(struct ld *ld, yaml_node_t *n, const char *path, size_t index,
                            struct rt_deployment_conf *d)
{
    char p[TG_YAML_PATH_MAX];
    yaml_node_t *params = NULL;
    int have_name = 0, timeout_set = 0, stream_timeout_set = 0;
    int64_t entry_rpm = RT_LIMIT_NONE, entry_tpm = RT_LIMIT_NONE;

    if (tg_yaml_expect(&ld->y, n, path, YAML_MAPPING_NODE) != 0)
        return TG_ECONFIG;
    memset(d, 0, sizeof(*d));
    d->rpm = RT_LIMIT_NONE;
    d->tpm = RT_LIMIT_NONE;
    d->weight = 1;
    d->line = (uint32_t)n->start_mark.line + 1;
    TG_YAML_FOR_PAIRS(n, pair)
    {
        const char *k = tg_yaml_key(&ld->y, pair, path);
        yaml_node_t *v = tg_yaml_node(&ld->y, pair->value);
        int rc = 0;

        if (k == NULL)
            return TG_ECONFIG;
        tg_yaml_path(p, path, k);
        if (strcmp(k, "model_name") == 0) {
            rc = tg_yaml_str_nonempty(&ld->y, v, p, d->group, sizeof(d->group));
            have_name = 1;
        } else if (strcmp(k, "litellm_params") == 0) {
            params = v;
            rc = parse_litellm_params(ld, v, p, d, &timeout_set, &stream_timeout_set);
        } else if (strcmp(k, "rpm") == 0) {
            rc = get_limit(ld, v, p, &entry_rpm); /* older LiteLLM configs put it here */
        } else if (strcmp(k, "tpm") == 0) {
            rc = get_limit(ld, v, p, &entry_tpm);
        } else if (strcmp(k, "model_info") == 0) {
            if (tg_yaml_is_null(v))
                continue;
            if (tg_yaml_expect(&ld->y, v, p, YAML_MAPPING_NODE) != 0)
                return TG_ECONFIG;
            TG_YAML_FOR_PAIRS(v, ip)
            {
                char q[TG_YAML_PATH_MAX];
                const char *ik = tg_yaml_key(&ld->y, ip, p);

                if (ik == NULL)
                    return TG_ECONFIG;
                tg_yaml_path(q, p, ik);
                if (strcmp(ik, "id") == 0) {
                    if (tg_yaml_str_nonempty(&ld->y, tg_yaml_node(&ld->y, ip->value), q, d->id,
                                             sizeof(d->id)))
                        return TG_ECONFIG;
                } else {
                    tg_yaml_warn(&ld->y, tg_yaml_node(&ld->y, ip->key), q, "unknown key, ignored");
                }
            }
        } else {
            tg_yaml_warn(&ld->y, tg_yaml_node(&ld->y, pair->key), p, "unknown key, ignored");
        }
        if (rc != 0)
            return TG_ECONFIG;
    }
    if (!have_name) {
        tg_yaml_path(p, path, "model_name");
        return tg_yaml_fail(&ld->y, n, p, "missing");
    }
    if (params == NULL) {
        tg_yaml_path(p, path, "litellm_params");
        return tg_yaml_fail(&ld->y, n, p, "missing");
    }
    if (d->rpm == RT_LIMIT_NONE)
        d->rpm = entry_rpm; /* litellm_params.rpm wins when both are given */
    if (d->tpm == RT_LIMIT_NONE)
        d->tpm = entry_tpm;
    if (!timeout_set)
        d->timeout_ms = ld->cfg->timeout_ms;
    if (!stream_timeout_set)
        d->stream_timeout_ms = d->timeout_ms;
    if (d->id[0] == '\0') {
        /* Stable generated id: "<group>-<index>", or a digest of the group when too long. */
        int w = fmt_cut(d->id, sizeof(d->id), "%s-%zu", d->group, index);

        if (w < 0 || (size_t)w >= sizeof(d->id)) {
            char hex[TG_SHA256_HEX_LEN + 1];

            tg_sha256_hex(d->group, strlen(d->group), hex);
            fmt_cut(d->id, sizeof(d->id), "%.16s-%zu", hex, index);
        }
    }
    return 0;
}

/* Free a deployment's provider-specific params, secrets wiped first. */
static void free_cloud(struct rt_deployment_conf *d)
{
    if (d->cloud != NULL) {
        memset(d->cloud, 0, sizeof(*d->cloud));
        free(d->cloud);
        d->cloud = NULL;
    }
}

static int parse_model_list(struct ld *ld, yaml_node_t *n)
{
    struct rt_config *cfg = ld->cfg;
    size_t count;
    char p[TG_YAML_PATH_MAX];

    if (tg_yaml_expect(&ld->y, n, "model_list", YAML_SEQUENCE_NODE) != 0)
        return TG_ECONFIG;
    count = tg_yaml_seq_len(n);
    if (count > RT_CONFIG_DEPLOYMENTS_MAX)
        return tg_yaml_fail(&ld->y, n, "model_list", "too many entries (%zu, max %d)", count,
                            RT_CONFIG_DEPLOYMENTS_MAX);
    if (count > 0) {
        cfg->deployments = calloc(count, sizeof(*cfg->deployments));
        if (cfg->deployments == NULL)
            return tg_yaml_fail(&ld->y, n, "model_list", "out of memory");
    }
    TG_YAML_FOR_ITEMS(n, item)
    {
        size_t i = cfg->n_deployments;
        yaml_node_t *e = tg_yaml_node(&ld->y, *item);
        struct rt_deployment_conf *d = &cfg->deployments[i];
        uint32_t same = 0, groups = 0;

        tg_yaml_path_index(p, "model_list", i);
        if (parse_deployment(ld, e, p, i, d) != 0) {
            free_cloud(d); /* the failed entry is not counted in n_deployments */
            return TG_ECONFIG;
        }
        for (size_t j = 0; j < i; j++) {
            int first_of_group = 1;

            if (strcmp(cfg->deployments[j].id, d->id) == 0) {
                char q[TG_YAML_PATH_MAX];

                tg_yaml_path(q, p, "model_info.id");
                return tg_yaml_fail(&ld->y, e, q, "duplicate id \"%s\" (also at line %u)", d->id,
                                    cfg->deployments[j].line);
            }
            if (strcmp(cfg->deployments[j].group, d->group) == 0)
                same++;
            for (size_t k = 0; k < j; k++) {
                if (strcmp(cfg->deployments[k].group, cfg->deployments[j].group) == 0) {
                    first_of_group = 0;
                    break;
                }
            }
            groups += (uint32_t)first_of_group;
        }
        if (same + 1 > RT_GROUP_DEPLOYMENTS_MAX)
            return tg_yaml_fail(&ld->y, e, p, "too many deployments in model group \"%s\" (max %d)",
                                d->group, RT_GROUP_DEPLOYMENTS_MAX);
        if (same == 0 && groups + 1 > RT_CONFIG_GROUPS_MAX)
            return tg_yaml_fail(&ld->y, e, p, "too many model groups (max %d)",
                                RT_CONFIG_GROUPS_MAX);
        cfg->n_deployments++;
    }
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
            const char *k = tg_yaml_key(&ld->y, pair, p);
            struct rt_fallback_rule *r;

            if (k == NULL)
                return TG_ECONFIG;
            tg_yaml_path(q, p, k);
            if (*n_out >= cap)
                return tg_yaml_fail(&ld->y, e, path, "too many fallback rules (max %u)", cap);
            r = &rules[*n_out];
            memset(r, 0, sizeof(*r));
            if (strlen(k) >= sizeof(r->group))
                return tg_yaml_fail(&ld->y, e, q, "group name too long (max %d bytes)",
                                    RT_NAME_CAP - 1);
            fmt_cut(r->group, sizeof(r->group), "%s", k);
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
        const char *k = tg_yaml_key(&ld->y, pair, path);
        yaml_node_t *v = tg_yaml_node(&ld->y, pair->value);
        struct rt_alias_rule *a;

        if (k == NULL)
            return TG_ECONFIG;
        tg_yaml_path(p, path, k);
        if (*n_out >= cap)
            return tg_yaml_fail(&ld->y, tg_yaml_node(&ld->y, pair->key), p,
                                "too many aliases (max %u)", cap);
        a = &out[*n_out];
        memset(a, 0, sizeof(*a));
        if (k[0] == '\0' || strlen(k) >= sizeof(a->alias))
            return tg_yaml_fail(&ld->y, tg_yaml_node(&ld->y, pair->key), p,
                                "alias must be 1..%d bytes", RT_NAME_CAP - 1);
        fmt_cut(a->alias, sizeof(a->alias), "%s", k);
        if (v != NULL && v->type == YAML_MAPPING_NODE) {
            int have_model = 0;

            TG_YAML_FOR_PAIRS(v, ap)
            {
                const char *ak = tg_yaml_key(&ld->y, ap, p);

                if (ak == NULL)
                    return TG_ECONFIG;
                tg_yaml_path(q, p, ak);
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

/* router_settings, or (litellm = 1) the routing keys LiteLLM also reads from litellm_settings:
 * fallbacks, context_window_fallbacks, content_policy_fallbacks, default_fallbacks,
 * num_retries, allowed_fails, cooldown_time (request_timeout is read with the timeouts).
 * litellm_settings is parsed first, so router_settings wins when both set a value. */
static int parse_router_settings(struct ld *ld, yaml_node_t *n, const char *section, int litellm)
{
    struct rt_config *cfg = ld->cfg;
    char p[TG_YAML_PATH_MAX];

    if (tg_yaml_is_null(n))
        return 0;
    if (tg_yaml_expect(&ld->y, n, section, YAML_MAPPING_NODE) != 0)
        return TG_ECONFIG;
    TG_YAML_FOR_PAIRS(n, pair)
    {
        const char *k = tg_yaml_key(&ld->y, pair, section);
        yaml_node_t *v = tg_yaml_node(&ld->y, pair->value);
        int rc = 0;
        uint32_t cap = 0;

        if (k == NULL)
            return TG_ECONFIG;
        tg_yaml_path(p, section, k);
        if (strcmp(k, litellm ? "request_timeout" : "timeout") == 0) {
            continue;
        } else if (litellm && strcmp(k, "num_retries") != 0 && strcmp(k, "allowed_fails") != 0 &&
                   strcmp(k, "cooldown_time") != 0 && strcmp(k, "fallbacks") != 0 &&
                   strcmp(k, "context_window_fallbacks") != 0 &&
                   strcmp(k, "content_policy_fallbacks") != 0 &&
                   strcmp(k, "default_fallbacks") != 0) {
            tg_yaml_warn(&ld->y, tg_yaml_node(&ld->y, pair->key), p, "unknown key, ignored");
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
            if (tg_yaml_is_null(v))
                continue;
            free(cfg->fallbacks);
            cfg->fallbacks = NULL;
            cfg->n_fallbacks = 0;
            rc = alloc_rules(ld, v, p, &cfg->fallbacks, &cap);
            if (rc == 0)
                rc = parse_fallback_rules(ld, v, p, cfg->fallbacks, cap, &cfg->n_fallbacks);
        } else if (strcmp(k, "context_window_fallbacks") == 0) {
            if (tg_yaml_is_null(v))
                continue;
            free(cfg->cw_fallbacks);
            cfg->cw_fallbacks = NULL;
            cfg->n_cw_fallbacks = 0;
            rc = alloc_rules(ld, v, p, &cfg->cw_fallbacks, &cap);
            if (rc == 0)
                rc = parse_fallback_rules(ld, v, p, cfg->cw_fallbacks, cap, &cfg->n_cw_fallbacks);
        } else if (strcmp(k, "content_policy_fallbacks") == 0) {
            if (tg_yaml_is_null(v))
                continue;
            free(cfg->cp_fallbacks);
            cfg->cp_fallbacks = NULL;
            cfg->n_cp_fallbacks = 0;
            rc = alloc_rules(ld, v, p, &cfg->cp_fallbacks, &cap);
            if (rc == 0)
                rc = parse_fallback_rules(ld, v, p, cfg->cp_fallbacks, cap, &cfg->n_cp_fallbacks);
        } else if (strcmp(k, "default_fallbacks") == 0) {
            if (tg_yaml_is_null(v))
                continue;
            rc = parse_group_list(ld, v, p, cfg->default_fallbacks, &cfg->n_default_fallbacks, 1);
        } else if (strcmp(k, "model_group_alias") == 0) {
            if (tg_yaml_is_null(v))
                continue;
            cfg->aliases = calloc(RT_CONFIG_ALIASES_MAX, sizeof(*cfg->aliases)); /* 66 KB */
            if (cfg->aliases == NULL)
                return tg_yaml_fail(&ld->y, v, p, "out of memory");
            rc = parse_aliases(ld, v, p, cfg->aliases, RT_CONFIG_ALIASES_MAX, &cfg->n_aliases);
        } else if (strcmp(k, "enforce_fallback_model_access") == 0) {
            rc = tg_yaml_bool(&ld->y, v, p, &cfg->enforce_fallback_model_access);
        } else {
            tg_yaml_warn(&ld->y, tg_yaml_node(&ld->y, pair->key), p, "unknown key, ignored");
        }
        if (rc != 0)
            return TG_ECONFIG;
    }
    return 0;
}

static int parse_general_settings(struct ld *ld, yaml_node_t *n)
{
    char p[TG_YAML_PATH_MAX];

    if (tg_yaml_is_null(n))
        return 0;
    if (tg_yaml_expect(&ld->y, n, "general_settings", YAML_MAPPING_NODE) != 0)
        return TG_ECONFIG;
    TG_YAML_FOR_PAIRS(n, pair)
    {
        const char *k = tg_yaml_key(&ld->y, pair, "general_settings");

        if (k == NULL)
            return TG_ECONFIG;
        tg_yaml_path(p, "general_settings", k);
        if (strcmp(k, "master_key") == 0) {
            yaml_node_t *v = tg_yaml_node(&ld->y, pair->value);

            if (!tg_yaml_is_null(v) &&
                tg_yaml_str(&ld->y, v, p, ld->cfg->master_key, sizeof(ld->cfg->master_key)) != 0)
                return TG_ECONFIG;
        } else {
            tg_yaml_warn(&ld->y, tg_yaml_node(&ld->y, pair->key), p, "unknown key, ignored");
        }
    }
    return 0;
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

static int parse_key_model_limits(struct ld *ld, yaml_node_t *n, const char *path,
                                  struct rt_key_spec *ks, int is_tpm)
{
    char p[TG_YAML_PATH_MAX];

    if (tg_yaml_is_null(n))
        return 0;
    if (tg_yaml_expect(&ld->y, n, path, YAML_MAPPING_NODE) != 0)
        return TG_ECONFIG;
    TG_YAML_FOR_PAIRS(n, pair)
    {
        const char *k = tg_yaml_key(&ld->y, pair, path);
        struct rt_key_model_limit *l = NULL;
        int64_t v = 0;

        if (k == NULL)
            return TG_ECONFIG;
        tg_yaml_path(p, path, k);
        if (!model_name_known(ld, k))
            return tg_yaml_fail(&ld->y, tg_yaml_node(&ld->y, pair->key), p,
                                "unknown model group \"%s\"", k);
        if (get_limit(ld, tg_yaml_node(&ld->y, pair->value), p, &v) != 0)
            return TG_ECONFIG;
        for (uint32_t i = 0; i < ks->n_model_limits; i++) {
            if (strcmp(ks->model_limits[i].group, k) == 0)
                l = &ks->model_limits[i];
        }
        if (l == NULL) {
            if (ks->n_model_limits >= RT_KEY_MODEL_LIMITS_MAX)
                return tg_yaml_fail(&ld->y, tg_yaml_node(&ld->y, pair->key), p,
                                    "too many model limits (max %d)", RT_KEY_MODEL_LIMITS_MAX);
            if (strlen(k) >= RT_NAME_CAP)
                return tg_yaml_fail(&ld->y, tg_yaml_node(&ld->y, pair->key), p,
                                    "group name too long");
            l = &ks->model_limits[ks->n_model_limits++];
            fmt_cut(l->group, sizeof(l->group), "%s", k);
            l->rpm = RT_LIMIT_NONE;
            l->tpm = RT_LIMIT_NONE;
        }
        if (is_tpm)
            l->tpm = v;
        else
            l->rpm = v;
    }
    return 0;
}

static int parse_key_metadata(struct ld *ld, yaml_node_t *n, const char *path,
                              struct rt_key_spec *ks)
{
    char p[TG_YAML_PATH_MAX], q[TG_YAML_PATH_MAX];

    if (tg_yaml_is_null(n))
        return 0;
    if (tg_yaml_expect(&ld->y, n, path, YAML_MAPPING_NODE) != 0)
        return TG_ECONFIG;
    /* metadata is free-form user data: keys other than these two are kept out of the router
     * (they never enter events or logs) and are not an error. */
    TG_YAML_FOR_PAIRS(n, pair)
    {
        const char *k = tg_yaml_key(&ld->y, pair, path);
        yaml_node_t *v = tg_yaml_node(&ld->y, pair->value);

        if (k == NULL)
            return TG_ECONFIG;
        tg_yaml_path(p, path, k);
        if (strcmp(k, "disable_fallbacks") == 0) {
            if (!tg_yaml_is_null(v) && tg_yaml_bool(&ld->y, v, p, &ks->disable_fallbacks) != 0)
                return TG_ECONFIG;
        } else if (strcmp(k, "tags") == 0) {
            if (tg_yaml_is_null(v))
                continue;
            if (tg_yaml_expect(&ld->y, v, p, YAML_SEQUENCE_NODE) != 0)
                return TG_ECONFIG;
            if (tg_yaml_seq_len(v) > RT_KEY_TAGS_MAX)
                return tg_yaml_fail(&ld->y, v, p, "too many tags (max %d)", RT_KEY_TAGS_MAX);
            TG_YAML_FOR_ITEMS(v, item)
            {
                tg_yaml_path_index(q, p, ks->n_tags);
                if (tg_yaml_str_nonempty(&ld->y, tg_yaml_node(&ld->y, *item), q,
                                         ks->tags[ks->n_tags], RT_TAG_CAP) != 0)
                    return TG_ECONFIG;
                ks->n_tags++;
            }
        }
    }
    return 0;
}

static int parse_key_router_settings(struct ld *ld, yaml_node_t *n, const char *path,
                                     struct rt_key_spec *ks)
{
    char p[TG_YAML_PATH_MAX];

    if (tg_yaml_is_null(n))
        return 0;
    if (tg_yaml_expect(&ld->y, n, path, YAML_MAPPING_NODE) != 0)
        return TG_ECONFIG;
    TG_YAML_FOR_PAIRS(n, pair)
    {
        const char *k = tg_yaml_key(&ld->y, pair, path);
        yaml_node_t *v = tg_yaml_node(&ld->y, pair->value);

        if (k == NULL)
            return TG_ECONFIG;
        tg_yaml_path(p, path, k);
        if (strcmp(k, "fallbacks") == 0) {
            if (tg_yaml_is_null(v))
                continue; /* null: the global list applies */
            ks->has_fallbacks = 1;
            if (parse_fallback_rules(ld, v, p, ks->fallbacks, RT_KEY_FALLBACK_RULES_MAX,
                                     &ks->n_fallbacks) != 0)
                return TG_ECONFIG;
        } else if (strcmp(k, "model_group_alias") == 0) {
            if (tg_yaml_is_null(v))
                continue;
            if (parse_aliases(ld, v, p, ks->aliases, RT_KEY_ALIASES_MAX, &ks->n_aliases) != 0)
                return TG_ECONFIG;
        } else if (strcmp(k, "num_retries") == 0) {
            uint32_t r = 0;

            if (tg_yaml_is_null(v))
                continue;
            if (tg_yaml_u32(&ld->y, v, p, 16, &r) != 0)
                return TG_ECONFIG;
            ks->num_retries = (int32_t)r;
        } else {
            return unknown_key(ld, pair, p);
        }
    }
    return 0;
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
        const char *k = tg_yaml_key(&ld->y, pair, path);
        yaml_node_t *v = tg_yaml_node(&ld->y, pair->value);
        int rc = 0;

        if (k == NULL)
            return TG_ECONFIG;
        tg_yaml_path(p, path, k);
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
            const char *s = NULL;

            if (tg_yaml_is_null(v))
                continue;
            if (tg_yaml_scalar(&ld->y, v, p, &s) != 0)
                return TG_ECONFIG;
            if (tg_parse_duration_s(s, &ks->budget_duration_s) != 0)
                rc = tg_yaml_fail(&ld->y, v, p, "expected a duration like 30s, 10m, 1h, 7d or 1mo");
        } else if (strcmp(k, "rpm_limit") == 0) {
            rc = get_limit(ld, v, p, &ks->rpm_limit);
        } else if (strcmp(k, "tpm_limit") == 0) {
            rc = get_limit(ld, v, p, &ks->tpm_limit);
        } else if (strcmp(k, "max_parallel_requests") == 0) {
            rc = get_limit(ld, v, p, &ks->max_parallel_requests);
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

static int parse_listen(struct ld *ld, yaml_node_t *n, const char *p)
{
    const char *colon;
    uint64_t port = 0;

    if (tg_yaml_str_nonempty(&ld->y, n, p, ld->cfg->listen, sizeof(ld->cfg->listen)) != 0)
        return TG_ECONFIG;
    colon = strrchr(ld->cfg->listen, ':');
    if (colon == NULL || colon == ld->cfg->listen || tg_parse_u64(colon + 1, &port) != 0 ||
        port == 0 || port > 65535)
        return tg_yaml_fail(&ld->y, n, p, "expected host:port");
    return 0;
}

static int parse_tollgate(struct ld *ld, yaml_node_t *n)
{
    struct rt_config *cfg = ld->cfg;
    char p[TG_YAML_PATH_MAX], q[TG_YAML_PATH_MAX];

    if (tg_yaml_is_null(n))
        return 0;
    if (tg_yaml_expect(&ld->y, n, "tollgate", YAML_MAPPING_NODE) != 0)
        return TG_ECONFIG;
    TG_YAML_FOR_PAIRS(n, pair)
    {
        const char *k = tg_yaml_key(&ld->y, pair, "tollgate");
        yaml_node_t *v = tg_yaml_node(&ld->y, pair->value);
        int rc = 0;

        if (k == NULL)
            return TG_ECONFIG;
        tg_yaml_path(p, "tollgate", k);
        if (strcmp(k, "listen") == 0) {
            rc = parse_listen(ld, v, p);
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
        } else if (strcmp(k, "kafka") == 0 || strcmp(k, "spool") == 0 || strcmp(k, "limits") == 0) {
            if (tg_yaml_is_null(v))
                continue;
            if (tg_yaml_expect(&ld->y, v, p, YAML_MAPPING_NODE) != 0)
                return TG_ECONFIG;
            TG_YAML_FOR_PAIRS(v, sp)
            {
                const char *sk = tg_yaml_key(&ld->y, sp, p);
                yaml_node_t *sv = tg_yaml_node(&ld->y, sp->value);

                if (sk == NULL)
                    return TG_ECONFIG;
                tg_yaml_path(q, p, sk);
                if (strcmp(k, "kafka") == 0 && strcmp(sk, "brokers") == 0) {
                    rc = tg_yaml_str(&ld->y, sv, q, cfg->kafka_brokers, sizeof(cfg->kafka_brokers));
                } else if (strcmp(k, "kafka") == 0 && strcmp(sk, "events_topic") == 0) {
                    rc = tg_yaml_str_nonempty(&ld->y, sv, q, cfg->events_topic,
                                              sizeof(cfg->events_topic));
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
    fmt_cut(cfg->listen, sizeof(cfg->listen), "%s", RT_DEFAULT_LISTEN);
    fmt_cut(cfg->events_topic, sizeof(cfg->events_topic), "%s", RT_DEFAULT_EVENTS_TOPIC);
    fmt_cut(cfg->control_topic, sizeof(cfg->control_topic), "%s", RT_DEFAULT_CONTROL_TOPIC);
    cfg->spool_max_bytes = RT_DEFAULT_SPOOL_MAX_BYTES;
    cfg->spool_full_policy = RT_SPOOL_FULL_DROP;
    cfg->spool_fsync = RT_SPOOL_FSYNC_NONE;
    cfg->max_body_bytes = RT_DEFAULT_MAX_BODY_BYTES;
    cfg->max_connections = RT_DEFAULT_MAX_CONNECTIONS;
    cfg->max_in_flight = RT_DEFAULT_MAX_IN_FLIGHT;
    cfg->max_response_bytes = RT_DEFAULT_MAX_RESPONSE_BYTES;
    cfg->max_keys = RT_DEFAULT_MAX_KEYS;
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
    if (parse_model_list(ld, sections[0]) != 0)
        return TG_ECONFIG;
    if (ld->cfg->n_deployments == 0)
        return tg_yaml_fail(&ld->y, sections[0], "model_list",
                            "empty (at least one deployment is needed)");
    if (sections[4] != NULL && parse_router_settings(ld, sections[4], "litellm_settings", 1) != 0)
        return TG_ECONFIG;
    if (sections[1] != NULL && parse_router_settings(ld, sections[1], "router_settings", 0) != 0)
        return TG_ECONFIG;
    if (sections[2] != NULL && parse_general_settings(ld, sections[2]) != 0)
        return TG_ECONFIG;
    if (sections[3] != NULL && parse_tollgate(ld, sections[3]) != 0)
        return TG_ECONFIG;
    if (ld->cfg->max_connections_per_ip == 0 ||
        ld->cfg->max_connections_per_ip > ld->cfg->max_connections)
        ld->cfg->max_connections_per_ip = ld->cfg->max_connections;
    return 0;
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
        fmt_cut(diag->error, sizeof(diag->error), "%s: out of memory", file);
        return NULL;
    }
    ld.cfg = cfg;
    fmt_cut(cfg->path, sizeof(cfg->path), "%s", file);
    set_defaults(cfg);
    if (tg_yaml_open(&ld.y, file, data, len, diag_sink, diag) == 0)
        parse_root(&ld, tg_yaml_root(&ld.y));
    tg_yaml_close(&ld.y);
    if (ld.y.failed || diag->error[0] != '\0') {
        if (diag->error[0] == '\0')
            fmt_cut(diag->error, sizeof(diag->error), "%s: invalid configuration", file);
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
            free_cloud(&c->deployments[i]);
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
    return n;
}
