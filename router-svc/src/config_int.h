/* config_int: what config.c and config_model.c share: the load context and a few helpers.
 * Private to the config module. Main thread (the loader's). */
#ifndef RT_CONFIG_INT_H
#define RT_CONFIG_INT_H

#include <stddef.h>
#include <stdint.h>

#include <yaml.h>

#include "config.h"
#include "tg_yaml.h"

/* Load context: the document and its diagnostics (tg_yaml), the diagnostics' destination, the
 * configuration being built. */
struct ld {
    struct tg_yaml y;
    struct rt_config_diag *diag;
    struct rt_config *cfg;
    uint32_t price_map_line; /* line of tollgate.price_map */
    yaml_node_t *admin_node; /* tollgate.admin_listen */
    /* Redis (config_redis.c): where the settings came from, for precedence and messages */
    const yaml_node_t *redis_node;    /* tollgate.redis */
    const yaml_node_t *redis_tls_node; /* tollgate.redis.tls */
    const yaml_node_t *ls_redis_node; /* router_settings.redis_host */
    char url_username[128];           /* tollgate.redis.url's credentials */
    char url_password[RT_SECRET_CAP];
    char ls_host[RT_REDIS_HOST_CAP];  /* router_settings.redis_host / _port / _password */
    uint32_t ls_port;
    char ls_password[RT_SECRET_CAP];
};

/* rt_config_fmt_cut: snprintf that cuts silently: every caller either checked the length before
 * or wants a cut value rather than none. Returns what vsnprintf returns. */
int rt_config_fmt_cut(char *dst, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* rt_config_get_limit: a limit; absent or null is RT_LIMIT_NONE. 0 or TG_ECONFIG. */
int rt_config_get_limit(struct ld *ld, const yaml_node_t *n, const char *path, int64_t *out);

/* rt_config_parse_ssl_verify: LiteLLM's ssl_verify: true | false (any case, yes/no, on/off) or
 * the path of a readable CA bundle (then *verify is 1 and ca holds it; else ca is ""). 0 or
 * TG_ECONFIG with the diagnostic. */
int rt_config_parse_ssl_verify(struct ld *ld, const yaml_node_t *n, const char *path, int *verify,
                               char *ca, size_t cap);

/* rt_config_parse_model_list: model_list into ld->cfg->deployments (config_model.c). 0 or
 * TG_ECONFIG with the diagnostic. */
int rt_config_parse_model_list(struct ld *ld, yaml_node_t *n);

/* rt_config_resolve_prices: every deployment's prices from its own and the price maps (the
 * built-in one, tollgate.price_map); a warning naming each left without a price
 * (config_model.c). 0 or TG_ECONFIG. */
int rt_config_resolve_prices(struct ld *ld);

/* rt_config_free_cloud: a deployment's provider-specific params, wiped and freed; accepts one
 * without (config_model.c). */
void rt_config_free_cloud(struct rt_deployment_conf *d);

/* rt_config_parse_redis: tollgate.redis (config_redis.c). 0 or TG_ECONFIG. */
int rt_config_parse_redis(struct ld *ld, yaml_node_t *n, const char *path);

/* rt_config_redis_litellm_key: LiteLLM's router_settings.redis_host / redis_port /
 * redis_password (config_redis.c). 0, TG_ECONFIG, or TG_YAML_UNKNOWN (not one of them). */
int rt_config_redis_litellm_key(struct ld *ld, const char *k, const yaml_node_t *v, const char *p);

/* rt_config_redis_finish: defaults, precedence (tollgate.redis, then router_settings, then the
 * REDIS_HOST / REDIS_PORT / REDIS_PASSWORD environment) and checks, after every section was
 * read (config_redis.c). 0 or TG_ECONFIG. */
int rt_config_redis_finish(struct ld *ld);

#endif
