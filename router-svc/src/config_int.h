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

#endif
