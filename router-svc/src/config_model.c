/* config_model: model_list: each deployment's fields, its provider family, base URL, key and
 * provider-specific parameters (providers/provider.h has the rules), with the diagnostics of
 * config.c's loader. Part of the config module (config.h); shares config_int.h with config.c. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <yaml.h>

#include "config_int.h"
#include "prices.h"
#include "providers/provider.h"
#include "tg_cfgtext.h"
#include "tg_err.h"
#include "tg_ids.h"
#include "tg_units.h"
#include "tg_yaml.h"

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
        rt_config_fmt_cut(d->provider, sizeof(d->provider), "openai");
        d->provider_implicit = 1;
        if (strlen(full) >= sizeof(d->model))
            return tg_yaml_fail(&ld->y, n, path, "model name too long (max %d bytes)",
                                RT_NAME_CAP - 1);
        rt_config_fmt_cut(d->model, sizeof(d->model), "%s", full);
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
        rt_config_fmt_cut(d->model, sizeof(d->model), "%s", slash + 1);
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
            rt_config_fmt_cut(given->path[given->n], TG_YAML_PATH_MAX, "%s", path);
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
        rt_config_fmt_cut((char *)d->cloud + cloud_params[i].off, cloud_params[i].cap, "%s", v);
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
        rt_config_fmt_cut(d->provider, sizeof(d->provider), "anthropic"); /* as LiteLLM infers it */
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
        rt_config_fmt_cut(d->api_base, sizeof(d->api_base), "%s", v);
        base_is_own = 1;
    }
    n = strlen(d->api_base);
    while (n > 0 && d->api_base[n - 1] == '/')
        d->api_base[--n] = '\0';
    if ((p->flags & RT_PROVIDER_BASE_V1) && (n < 3 || strcmp(d->api_base + n - 3, "/v1") != 0)) {
        if (n + 3 >= sizeof(d->api_base))
            return tg_yaml_fail(&ld->y, model, path, "base URL too long");
        rt_config_fmt_cut(d->api_base + n, sizeof(d->api_base) - n, "/v1");
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
    rt_config_fmt_cut(d->api_key, sizeof(d->api_key), "%s", v);
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

/* A price field of litellm_params or model_info (LiteLLM's names) into own. Returns 1 when k is
 * one (*rc set), 0 when it is not. */
static int price_field(struct ld *ld, const char *k, const yaml_node_t *v, const char *p,
                       struct rt_model_price *own, int *rc)
{
    static const struct {
        const char *name;
        size_t off;
    } f[] = {
        {"input_cost_per_token", offsetof(struct rt_model_price, input)},
        {"output_cost_per_token", offsetof(struct rt_model_price, output)},
        {"cache_read_input_token_cost", offsetof(struct rt_model_price, cache_read)},
        {"cache_creation_input_token_cost", offsetof(struct rt_model_price, cache_creation)},
        {"output_cost_per_reasoning_token", offsetof(struct rt_model_price, reasoning)},
    };

    for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++) {
        if (strcmp(k, f[i].name) == 0) {
            *rc = tg_yaml_is_null(v)
                      ? 0
                      : tg_yaml_usd_fusd(&ld->y, v, p, (int64_t *)((char *)own + f[i].off));
            return 1;
        }
    }
    if (strcmp(k, "max_input_tokens") == 0 || strcmp(k, "max_output_tokens") == 0) {
        uint64_t t = 0;

        *rc = tg_yaml_is_null(v) ? 0 : tg_yaml_u64(&ld->y, v, p, 1000000000000ull, &t);
        if (*rc == 0 && !tg_yaml_is_null(v)) {
            if (k[4] == 'i')
                own->max_input_tokens = (int64_t)t;
            else
                own->max_output_tokens = (int64_t)t;
        }
        return 1;
    }
    return 0;
}

/* One price field: the first given of a, b. */
static int64_t price_pick(int64_t a, int64_t b)
{
    return a != RT_PRICE_NONE ? a : b;
}

/* The deployment's own prices: litellm_params over model_info, field by field. */
static void own_prices(struct rt_deployment_conf *d, const struct rt_model_price *lp,
                       const struct rt_model_price *mi)
{
    d->price.input = price_pick(lp->input, mi->input);
    d->price.output = price_pick(lp->output, mi->output);
    d->price.cache_read = price_pick(lp->cache_read, mi->cache_read);
    d->price.cache_creation = price_pick(lp->cache_creation, mi->cache_creation);
    d->price.reasoning = price_pick(lp->reasoning, mi->reasoning);
    d->price.max_input_tokens =
        lp->max_input_tokens > 0 ? lp->max_input_tokens : mi->max_input_tokens;
    d->price.max_output_tokens =
        lp->max_output_tokens > 0 ? lp->max_output_tokens : mi->max_output_tokens;
    if (lp->input != RT_PRICE_NONE || lp->output != RT_PRICE_NONE)
        rt_config_fmt_cut(d->price_source, sizeof(d->price_source), "litellm_params");
    else if (mi->input != RT_PRICE_NONE || mi->output != RT_PRICE_NONE)
        rt_config_fmt_cut(d->price_source, sizeof(d->price_source), "model_info");
}

/* litellm_params being read. */
struct params_ctx {
    struct ld *ld;
    struct rt_deployment_conf *d;
    struct rt_model_price *own;
    int *timeout_set, *stream_timeout_set;
    const yaml_node_t *model;
    char model_path[TG_YAML_PATH_MAX];
    int api_key_given;
    struct given_params given;
};

static int params_key(void *ctx, const char *k, const yaml_node_t *knode, yaml_node_t *v,
                      const char *p)
{
    struct params_ctx *pc = ctx;
    struct ld *ld = pc->ld;
    struct rt_deployment_conf *d = pc->d;
    int rc = 0;

    if (strcmp(k, "model") == 0) {
        rc = parse_provider_model(ld, v, p, d);
        pc->model = v;
        rt_config_fmt_cut(pc->model_path, sizeof(pc->model_path), "%s", p);
    } else if (strcmp(k, "api_base") == 0) {
        rc = tg_yaml_is_null(v) ? 0 : tg_yaml_str(&ld->y, v, p, d->api_base, sizeof(d->api_base));
    } else if (strcmp(k, "api_key") == 0) {
        pc->api_key_given = !tg_yaml_is_null(v);
        rc = tg_yaml_is_null(v) ? 0 : tg_yaml_str(&ld->y, v, p, d->api_key, sizeof(d->api_key));
    } else if (strcmp(k, "rpm") == 0) {
        rc = rt_config_get_limit(ld, v, p, &d->rpm);
    } else if (strcmp(k, "tpm") == 0) {
        rc = rt_config_get_limit(ld, v, p, &d->tpm);
    } else if (strcmp(k, "timeout") == 0) {
        rc = tg_yaml_seconds_ms(&ld->y, v, p, &d->timeout_ms);
        *pc->timeout_set = 1;
    } else if (strcmp(k, "stream_timeout") == 0) {
        rc = tg_yaml_seconds_ms(&ld->y, v, p, &d->stream_timeout_ms);
        *pc->stream_timeout_set = 1;
    } else if (strcmp(k, "ssl_verify") == 0) {
        rc = rt_config_parse_ssl_verify(ld, v, p, &d->ssl_verify, d->ssl_ca_file,
                                        sizeof(d->ssl_ca_file));
        d->ssl_verify_set = 1;
    } else if (strcmp(k, "weight") == 0) {
        rc = tg_yaml_u32(&ld->y, v, p, 1000000, &d->weight);
    } else if (strcmp(k, "order") == 0) {
        rc = tg_yaml_i32(&ld->y, v, p, &d->order);
        if (rc == 0 && d->order < 0)
            rc = tg_yaml_fail(&ld->y, v, p, "expected a non-negative integer");
    } else if ((rc = parse_cloud_param(ld, k, v, p, d, &pc->given)) != 1) {
        /* a provider-specific param: parsed (rc 0) or an error */
    } else if (price_field(ld, k, v, p, pc->own, &rc)) {
        /* a price: parsed (rc 0) or an error */
    } else {
        tg_yaml_warn(&ld->y, knode, p, "unknown key, ignored");
        rc = 0;
    }
    return rc;
}

static int parse_litellm_params(struct ld *ld, yaml_node_t *n, const char *path,
                                struct rt_deployment_conf *d, struct rt_model_price *own,
                                int *timeout_set, int *stream_timeout_set)
{
    char p[TG_YAML_PATH_MAX];
    struct params_ctx *pc;
    int rc;

    if (tg_yaml_expect(&ld->y, n, path, YAML_MAPPING_NODE) != 0)
        return TG_ECONFIG;
    pc = calloc(1, sizeof(*pc)); /* given_params is large: not on the loader's stack */
    if (pc == NULL)
        return tg_yaml_fail(&ld->y, n, path, "out of memory");
    pc->ld = ld;
    pc->d = d;
    pc->own = own;
    pc->timeout_set = timeout_set;
    pc->stream_timeout_set = stream_timeout_set;
    rc = tg_yaml_map(&ld->y, n, path, params_key, pc);
    if (rc == 0 && pc->model == NULL) {
        tg_yaml_path(p, path, "model");
        rc = tg_yaml_fail(&ld->y, n, p, "missing");
    }
    if (rc == 0)
        rc = resolve_deployment(ld, pc->model, pc->model_path, d, pc->api_key_given, &pc->given);
    free(pc);
    return rc;
}

/* A deployment (an entry of model_list) being read. */
struct deployment_ctx {
    struct ld *ld;
    struct rt_deployment_conf *d;
    yaml_node_t *params;
    int have_name, timeout_set, stream_timeout_set;
    int64_t entry_rpm, entry_tpm;
    struct rt_model_price lp, mi; /* prices given in litellm_params, in model_info */
};

static int model_info_key(void *ctx, const char *k, const yaml_node_t *knode, yaml_node_t *v,
                          const char *q)
{
    struct deployment_ctx *dc = ctx;
    struct ld *ld = dc->ld;
    int rc = 0;

    if (strcmp(k, "id") == 0)
        return tg_yaml_str_nonempty(&ld->y, v, q, dc->d->id, sizeof(dc->d->id));
    if (strcmp(k, "base_model") == 0)
        return tg_yaml_is_null(v) ? 0
                                  : tg_yaml_str(&ld->y, v, q, dc->d->base_model,
                                                sizeof(dc->d->base_model));
    if (strcmp(k, "supported_endpoints") == 0) {
        char r[TG_YAML_PATH_MAX];
        size_t i = 0;

        if (tg_yaml_is_null(v))
            return 0;
        if (tg_yaml_expect(&ld->y, v, q, YAML_SEQUENCE_NODE) != 0)
            return TG_ECONFIG;
        TG_YAML_FOR_ITEMS(v, item)
        {
            const char *e = NULL;

            tg_yaml_path_index(r, q, i++);
            if (tg_yaml_scalar(&ld->y, tg_yaml_node(&ld->y, *item), r, &e) != 0)
                return TG_ECONFIG;
            if (strcmp(e, "/v1/responses") == 0 || strcmp(e, "/responses") == 0)
                dc->d->responses_native = 1;
        }
        return 0;
    }
    if (price_field(ld, k, v, q, &dc->mi, &rc))
        return rc;
    tg_yaml_warn(&ld->y, knode, q, "unknown key, ignored");
    return 0;
}

static int deployment_key(void *ctx, const char *k, const yaml_node_t *knode, yaml_node_t *v,
                          const char *p)
{
    struct deployment_ctx *dc = ctx;
    struct ld *ld = dc->ld;

    if (strcmp(k, "model_name") == 0) {
        dc->have_name = 1;
        return tg_yaml_str_nonempty(&ld->y, v, p, dc->d->group, sizeof(dc->d->group));
    }
    if (strcmp(k, "litellm_params") == 0) {
        dc->params = v;
        return parse_litellm_params(ld, v, p, dc->d, &dc->lp, &dc->timeout_set,
                                    &dc->stream_timeout_set);
    }
    if (strcmp(k, "rpm") == 0)
        return rt_config_get_limit(ld, v, p, &dc->entry_rpm); /* older LiteLLM configs */
    if (strcmp(k, "tpm") == 0)
        return rt_config_get_limit(ld, v, p, &dc->entry_tpm);
    if (strcmp(k, "model_info") == 0)
        return tg_yaml_map(&ld->y, v, p, model_info_key, dc);
    tg_yaml_warn(&ld->y, knode, p, "unknown key, ignored");
    return 0;
}

static int parse_deployment(struct ld *ld, yaml_node_t *n, const char *path, size_t index,
                            struct rt_deployment_conf *d)
{
    char p[TG_YAML_PATH_MAX];
    struct deployment_ctx dc;

    if (tg_yaml_expect(&ld->y, n, path, YAML_MAPPING_NODE) != 0)
        return TG_ECONFIG;
    memset(&dc, 0, sizeof(dc));
    dc.ld = ld;
    dc.d = d;
    dc.entry_rpm = RT_LIMIT_NONE;
    dc.entry_tpm = RT_LIMIT_NONE;
    rt_model_price_none(&dc.lp);
    rt_model_price_none(&dc.mi);
    memset(d, 0, sizeof(*d));
    d->rpm = RT_LIMIT_NONE;
    d->tpm = RT_LIMIT_NONE;
    d->weight = 1;
    d->line = (uint32_t)n->start_mark.line + 1;
    if (tg_yaml_map(&ld->y, n, path, deployment_key, &dc) != 0)
        return TG_ECONFIG;
    if (!dc.have_name) {
        tg_yaml_path(p, path, "model_name");
        return tg_yaml_fail(&ld->y, n, p, "missing");
    }
    if (dc.params == NULL) {
        tg_yaml_path(p, path, "litellm_params");
        return tg_yaml_fail(&ld->y, n, p, "missing");
    }
    own_prices(d, &dc.lp, &dc.mi);
    if (d->rpm == RT_LIMIT_NONE)
        d->rpm = dc.entry_rpm; /* litellm_params.rpm wins when both are given */
    if (d->tpm == RT_LIMIT_NONE)
        d->tpm = dc.entry_tpm;
    if (!dc.timeout_set)
        d->timeout_ms = ld->cfg->timeout_ms;
    if (!dc.stream_timeout_set)
        d->stream_timeout_ms = d->timeout_ms;
    if (d->id[0] == '\0') {
        /* Stable generated id: "<group>-<index>", or a digest of the group when too long. */
        int w = rt_config_fmt_cut(d->id, sizeof(d->id), "%s-%zu", d->group, index);

        if (w < 0 || (size_t)w >= sizeof(d->id)) {
            char hex[TG_SHA256_HEX_LEN + 1];

            tg_sha256_hex(d->group, strlen(d->group), hex);
            rt_config_fmt_cut(d->id, sizeof(d->id), "%.16s-%zu", hex, index);
        }
    }
    return 0;
}

/* A node standing for a line of the file (diagnostics about what no node holds any more). */
static yaml_node_t *line_node(yaml_node_t *at, uint32_t line)
{
    memset(at, 0, sizeof(*at));
    at->start_mark.line = line > 0 ? line - 1 : 0;
    return at;
}

/* The price map file: a relative path is taken from the configuration file's folder. */
static void price_map_path(const struct rt_config *cfg, char *out, size_t cap)
{
    const char *slash = strrchr(cfg->path, '/');

    if (cfg->price_map[0] == '/' || slash == NULL)
        rt_config_fmt_cut(out, cap, "%s", cfg->price_map);
    else
        rt_config_fmt_cut(out, cap, "%.*s/%s", (int)(slash - cfg->path), cfg->path, cfg->price_map);
}

/* Every deployment's prices: its own when it gives any (litellm_params over model_info, field
 * by field), else its price map entry (by base_model or model); token limits from the entry
 * where it gives none. A deployment with neither an input nor an output price is a warning
 * naming it: its calls would cost 0. */
int rt_config_resolve_prices(struct ld *ld)
{
    struct rt_config *cfg = ld->cfg;
    const struct rt_prices *builtin = rt_prices_builtin();
    struct rt_prices *user = NULL;
    yaml_node_t at;

    if (builtin == NULL)
        return tg_yaml_fail(&ld->y, NULL, "", "the built-in price map could not be loaded");
    if (cfg->price_map[0] != '\0') {
        char path[2 * RT_PATH_CAP], err[RT_CONFIG_MSG_CAP - 64];

        price_map_path(cfg, path, sizeof(path));
        if (rt_prices_load_file(path, &user, err, sizeof(err)) != 0)
            return tg_yaml_fail(&ld->y, line_node(&at, ld->price_map_line), "tollgate.price_map",
                                "%s", err);
    }
    for (uint32_t i = 0; i < cfg->n_deployments; i++) {
        struct rt_deployment_conf *d = &cfg->deployments[i];
        const struct rt_price_entry *e;
        char prov[RT_NAME_CAP];
        const char *model = d->model;
        const char *slash;

        rt_config_fmt_cut(prov, sizeof(prov), "%s", d->provider);
        if (d->base_model[0] != '\0') {
            slash = strchr(d->base_model, '/');
            if (slash != NULL) {
                rt_config_fmt_cut(prov, sizeof(prov), "%.*s", (int)(slash - d->base_model), d->base_model);
                model = slash + 1;
            } else {
                prov[0] = '\0';
                model = d->base_model;
            }
        }
        e = rt_prices_lookup(user, builtin, prov, model);
        if (e != NULL && d->price_source[0] != '\0') {
            /* prices of its own are a set (a negotiated rate is not mixed with list prices):
             * only the token limits come from the map */
            if (d->price.max_input_tokens == 0)
                d->price.max_input_tokens = e->price.max_input_tokens;
            if (d->price.max_output_tokens == 0)
                d->price.max_output_tokens = e->price.max_output_tokens;
        } else if (e != NULL) {
            d->price.input = price_pick(d->price.input, e->price.input);
            d->price.output = price_pick(d->price.output, e->price.output);
            d->price.cache_read = price_pick(d->price.cache_read, e->price.cache_read);
            d->price.cache_creation = price_pick(d->price.cache_creation, e->price.cache_creation);
            d->price.reasoning = price_pick(d->price.reasoning, e->price.reasoning);
            if (d->price.max_input_tokens == 0)
                d->price.max_input_tokens = e->price.max_input_tokens;
            if (d->price.max_output_tokens == 0)
                d->price.max_output_tokens = e->price.max_output_tokens;
            rt_config_fmt_cut(d->price_source, sizeof(d->price_source), "%s", e->key);
        }
        d->priced = d->price.input != RT_PRICE_NONE || d->price.output != RT_PRICE_NONE;
        if (!d->priced) {
            char p[TG_YAML_PATH_MAX];

            d->price_source[0] = '\0';
            rt_config_fmt_cut(p, sizeof(p), "model_list[%u] (%s)", i, d->id);
            tg_yaml_warn(&ld->y, line_node(&at, d->line), p,
                         "no price for \"%s%s%s\" in the price maps: its calls cost 0 (set "
                         "litellm_params.input_cost_per_token and output_cost_per_token, "
                         "model_info.base_model, or tollgate.price_map)",
                         prov, prov[0] != '\0' ? "/" : "", model);
        }
    }
    rt_prices_destroy(&user);
    return 0;
}

/* Free a deployment's provider-specific params, secrets wiped first. */
void rt_config_free_cloud(struct rt_deployment_conf *d)
{
    if (d->cloud != NULL) {
        memset(d->cloud, 0, sizeof(*d->cloud));
        free(d->cloud);
        d->cloud = NULL;
    }
}

int rt_config_parse_model_list(struct ld *ld, yaml_node_t *n)
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
            rt_config_free_cloud(d); /* the failed entry is not counted in n_deployments */
            return TG_ECONFIG;
        }
        /* counted at once, so that rt_config_destroy frees what it holds (its provider params)
         * when a check below refuses it */
        cfg->n_deployments++;
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
    }
    return 0;
}
