#include "config.h"

#include <errno.h>
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

#define PATH_MAX_LEN 256
#define ENV_PREFIX "os.environ/"
#define CONFIG_FILE_MAX_BYTES (16u * 1024u * 1024u)

/* Load context. The first error stops the load; warnings accumulate. */
struct ld {
    yaml_document_t doc;
    const char *file;
    struct rt_config_diag *diag;
    struct rt_config *cfg;
    int failed;
};

/* snprintf that cuts silently: every caller either checked the length before or wants a cut
 * diagnostic rather than none. Returns what vsnprintf returns. */
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

static void diag_add(struct ld *ld, int is_error, const yaml_node_t *node, const char *path,
                     const char *fmt, va_list ap) __attribute__((format(printf, 5, 0)));

static void diag_add(struct ld *ld, int is_error, const yaml_node_t *node, const char *path,
                     const char *fmt, va_list ap)
{
    char problem[RT_CONFIG_MSG_CAP];
    char line[RT_CONFIG_MSG_CAP];
    unsigned long lineno = node != NULL ? (unsigned long)node->start_mark.line + 1 : 0;

    vsnprintf(problem, sizeof(problem), fmt, ap);
    if (path != NULL && path[0] != '\0')
        fmt_cut(line, sizeof(line), "%s:%lu: %s: %s", ld->file, lineno, path, problem);
    else
        fmt_cut(line, sizeof(line), "%s:%lu: %s", ld->file, lineno, problem);
    if (is_error) {
        if (!ld->failed)
            fmt_cut(ld->diag->error, sizeof(ld->diag->error), "%s", line);
        ld->failed = 1;
        return;
    }
    TG_WARN("msg=\"config warning\" detail=\"%s\"", line);
    if (ld->diag->n_warnings < RT_CONFIG_WARNINGS_MAX)
        fmt_cut(ld->diag->warnings[ld->diag->n_warnings++], RT_CONFIG_MSG_CAP, "%s", line);
    else
        ld->diag->warnings_dropped++;
}

static int fail(struct ld *ld, const yaml_node_t *node, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int fail(struct ld *ld, const yaml_node_t *node, const char *path, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    diag_add(ld, 1, node, path, fmt, ap);
    va_end(ap);
    return TG_ECONFIG;
}

static void warn(struct ld *ld, const yaml_node_t *node, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void warn(struct ld *ld, const yaml_node_t *node, const char *path, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    diag_add(ld, 0, node, path, fmt, ap);
    va_end(ap);
}

static void path_join(char *out, const char *base, const char *key)
{
    if (base[0] == '\0')
        fmt_cut(out, PATH_MAX_LEN, "%s", key);
    else
        fmt_cut(out, PATH_MAX_LEN, "%s.%s", base, key);
}

static void path_index(char *out, const char *base, size_t i)
{
    fmt_cut(out, PATH_MAX_LEN, "%s[%zu]", base, i);
}

static yaml_node_t *node_at(struct ld *ld, int id)
{
    return yaml_document_get_node(&ld->doc, id);
}

static int is_null(const yaml_node_t *n)
{
    const char *v = NULL;

    if (n == NULL)
        return 1;
    if (n->type != YAML_SCALAR_NODE || n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
        return 0;
    v = (const char *)n->data.scalar.value;
    return v[0] == '\0' || strcmp(v, "~") == 0 || strcmp(v, "null") == 0 ||
           strcmp(v, "Null") == 0 || strcmp(v, "NULL") == 0;
}

/* The text of a scalar with os.environ/NAME resolved. Borrowed (document or environment).
 * Values reach wires (provider request heads, URLs, Kafka settings, event fields), so a control
 * byte (NUL, CR, LF, any other below 0x20, DEL) in one is an error naming the key — never cut or
 * passed on: a secret with a trailing newline would otherwise corrupt the request framing of
 * every pooled connection it is sent on. */
static int scalar(struct ld *ld, const yaml_node_t *n, const char *path, const char **out)
{
    const char *v = NULL;
    const char *env_name = NULL;
    size_t yaml_len;
    char why[160];

    if (n == NULL || n->type != YAML_SCALAR_NODE)
        return fail(ld, n, path, "expected a scalar value");
    v = (const char *)n->data.scalar.value;
    yaml_len = n->data.scalar.length;
    if (tg_cfgtext_check(v, yaml_len, NULL, why, sizeof(why)) != 0)
        return fail(ld, n, path, "%s", why);
    if (strncmp(v, ENV_PREFIX, strlen(ENV_PREFIX)) == 0) {
        const char *name = v + strlen(ENV_PREFIX);
        const char *env;

        if (name[0] == '\0')
            return fail(ld, n, path, "os.environ/ without a variable name");
        env = getenv(name);
        if (env == NULL)
            return fail(ld, n, path, "environment variable %s is not set", name);
        v = env;
        env_name = name;
    }
    if (env_name != NULL && tg_cfgtext_check(v, (size_t)-1, env_name, why, sizeof(why)) != 0)
        return fail(ld, n, path, "%s", why);
    *out = v;
    return 0;
}

static int get_str(struct ld *ld, const yaml_node_t *n, const char *path, char *dst, size_t cap)
{
    const char *v = NULL;
    size_t len;

    if (scalar(ld, n, path, &v) != 0)
        return TG_ECONFIG;
    len = strlen(v);
    if (len >= cap)
        return fail(ld, n, path, "value too long (%zu bytes, max %zu)", len, cap - 1);
    memcpy(dst, v, len + 1);
    return 0;
}

static int get_nonempty_str(struct ld *ld, const yaml_node_t *n, const char *path, char *dst,
                            size_t cap)
{
    if (get_str(ld, n, path, dst, cap) != 0)
        return TG_ECONFIG;
    if (dst[0] == '\0')
        return fail(ld, n, path, "expected a non-empty string");
    return 0;
}

static int parse_u64_text(const char *v, uint64_t *out)
{
    uint64_t r = 0;

    if (*v == '+')
        v++;
    if (*v == '\0')
        return TG_EINVAL;
    for (; *v != '\0'; v++) {
        if (*v < '0' || *v > '9')
            return TG_EINVAL;
        if (r > (UINT64_MAX - (uint64_t)(*v - '0')) / 10)
            return TG_ERANGE;
        r = r * 10 + (uint64_t)(*v - '0');
    }
    *out = r;
    return 0;
}

static int get_u64(struct ld *ld, const yaml_node_t *n, const char *path, uint64_t max,
                   uint64_t *out)
{
    const char *v = NULL;
    uint64_t r = 0;

    if (scalar(ld, n, path, &v) != 0)
        return TG_ECONFIG;
    if (parse_u64_text(v, &r) != 0)
        return fail(ld, n, path, "expected a non-negative integer");
    if (r > max)
        return fail(ld, n, path, "value %llu out of range (max %llu)", (unsigned long long)r,
                    (unsigned long long)max);
    *out = r;
    return 0;
}

static int get_u32(struct ld *ld, const yaml_node_t *n, const char *path, uint32_t max,
                   uint32_t *out)
{
    uint64_t r = 0;

    if (get_u64(ld, n, path, max, &r) != 0)
        return TG_ECONFIG;
    *out = (uint32_t)r;
    return 0;
}

static int get_limit(struct ld *ld, const yaml_node_t *n, const char *path, int64_t *out)
{
    uint64_t r = 0;

    if (is_null(n)) {
        *out = RT_LIMIT_NONE;
        return 0;
    }
    if (get_u64(ld, n, path, (uint64_t)INT64_MAX, &r) != 0)
        return TG_ECONFIG;
    *out = (int64_t)r;
    return 0;
}

static int get_i32(struct ld *ld, const yaml_node_t *n, const char *path, int32_t *out)
{
    const char *v = NULL;
    char *end = NULL;
    long long r;

    if (scalar(ld, n, path, &v) != 0)
        return TG_ECONFIG;
    errno = 0;
    r = strtoll(v, &end, 10);
    if (v[0] == '\0' || *end != '\0' || errno != 0 || r < INT32_MIN || r > INT32_MAX)
        return fail(ld, n, path, "expected an integer");
    *out = (int32_t)r;
    return 0;
}

static int get_bool(struct ld *ld, const yaml_node_t *n, const char *path, int *out)
{
    const char *v = NULL;

    if (scalar(ld, n, path, &v) != 0)
        return TG_ECONFIG;
    if (strcasecmp(v, "true") == 0 || strcasecmp(v, "yes") == 0 || strcasecmp(v, "on") == 0) {
        *out = 1;
        return 0;
    }
    if (strcasecmp(v, "false") == 0 || strcasecmp(v, "no") == 0 || strcasecmp(v, "off") == 0) {
        *out = 0;
        return 0;
    }
    return fail(ld, n, path, "expected true or false");
}

/* Exact decimal parse: value = mant * 10^exp10. */
static int parse_decimal(const char *text, unsigned __int128 *mant, int *exp10)
{
    const char *p = text;
    unsigned __int128 m = 0;
    int e = 0, digits = 0, any = 0;

    if (*p == '+')
        p++;
    for (; *p >= '0' && *p <= '9'; p++) {
        any = 1;
        if (m == 0 && *p == '0')
            continue;
        if (digits >= 36)
            return TG_ERANGE;
        m = m * 10 + (unsigned)(*p - '0');
        digits++;
    }
    if (*p == '.') {
        p++;
        for (; *p >= '0' && *p <= '9'; p++) {
            any = 1;
            if (digits >= 36) {
                continue; /* beyond 36 significant digits: far below a femto-USD */
            }
            m = m * 10 + (unsigned)(*p - '0');
            if (m != 0)
                digits++;
            e--;
        }
    }
    if (!any)
        return TG_EINVAL;
    if (*p == 'e' || *p == 'E') {
        int sign = 1, x = 0, xd = 0;

        p++;
        if (*p == '+' || *p == '-') {
            sign = *p == '-' ? -1 : 1;
            p++;
        }
        for (; *p >= '0' && *p <= '9'; p++) {
            if (x < 10000)
                x = x * 10 + (*p - '0');
            xd++;
        }
        if (xd == 0)
            return TG_EINVAL;
        e += sign * x;
    }
    if (*p != '\0')
        return TG_EINVAL;
    *mant = m;
    *exp10 = e;
    return 0;
}

/* mant * 10^shift, rounded half-up, into int64. */
static int scale_round(unsigned __int128 m, int shift, int64_t *out)
{
    if (m == 0) {
        *out = 0;
        return 0;
    }
    if (shift >= 0) {
        for (int i = 0; i < shift; i++) {
            if (m > (unsigned __int128)INT64_MAX)
                return TG_ERANGE;
            m *= 10;
        }
    } else {
        int drop = -shift;
        unsigned __int128 rem_half;

        if (drop > 38) {
            *out = 0;
            return 0;
        }
        for (int i = 0; i < drop - 1; i++)
            m /= 10;
        rem_half = m % 10;
        m /= 10;
        if (rem_half >= 5)
            m += 1;
    }
    if (m > (unsigned __int128)INT64_MAX)
        return TG_ERANGE;
    *out = (int64_t)m;
    return 0;
}

int rt_config_parse_usd_fusd(const char *text, int64_t *fusd_out)
{
    unsigned __int128 m;
    int e, rc;

    if (text == NULL)
        return TG_EINVAL;
    rc = parse_decimal(text, &m, &e);
    if (rc != 0)
        return rc;
    return scale_round(m, e + 15, fusd_out);
}

int rt_config_parse_duration_s(const char *text, int64_t *seconds_out)
{
    char *end = NULL;
    long long v;
    int64_t mult = 1;

    if (text == NULL || text[0] < '0' || text[0] > '9')
        return TG_EINVAL;
    errno = 0;
    v = strtoll(text, &end, 10);
    if (errno != 0 || v < 0)
        return TG_EINVAL;
    if (strcmp(end, "") == 0 || strcmp(end, "s") == 0)
        mult = 1;
    else if (strcmp(end, "m") == 0)
        mult = 60;
    else if (strcmp(end, "h") == 0)
        mult = 3600;
    else if (strcmp(end, "d") == 0)
        mult = 86400;
    else if (strcmp(end, "w") == 0)
        mult = 7 * 86400;
    else if (strcmp(end, "mo") == 0)
        mult = 30 * 86400;
    else
        return TG_EINVAL;
    if (v > INT64_MAX / mult)
        return TG_EINVAL;
    *seconds_out = (int64_t)v * mult;
    return 0;
}

static int get_fusd(struct ld *ld, const yaml_node_t *n, const char *path, int64_t *out)
{
    const char *v = NULL;
    int rc;

    if (scalar(ld, n, path, &v) != 0)
        return TG_ECONFIG;
    rc = rt_config_parse_usd_fusd(v, out);
    if (rc == TG_ERANGE)
        return fail(ld, n, path, "price too large");
    if (rc != 0)
        return fail(ld, n, path, "expected a non-negative decimal number (USD)");
    return 0;
}

/* Seconds, possibly fractional ("30", "2.5"), to milliseconds, 1 ms .. 24 h. */
static int get_seconds_ms(struct ld *ld, const yaml_node_t *n, const char *path, uint32_t *out)
{
    const char *v = NULL;
    unsigned __int128 m;
    int e;
    int64_t ms;

    if (scalar(ld, n, path, &v) != 0)
        return TG_ECONFIG;
    if (parse_decimal(v, &m, &e) != 0 || scale_round(m, e + 3, &ms) != 0)
        return fail(ld, n, path, "expected a number of seconds");
    if (ms < 1 || ms > 86400000)
        return fail(ld, n, path, "expected between 0.001 and 86400 seconds");
    *out = (uint32_t)ms;
    return 0;
}

static int expect_type(struct ld *ld, const yaml_node_t *n, const char *path, yaml_node_type_t t)
{
    if (n != NULL && n->type == t)
        return 0;
    if (t == YAML_MAPPING_NODE)
        return fail(ld, n, path, "expected a mapping");
    if (t == YAML_SEQUENCE_NODE)
        return fail(ld, n, path, "expected a list");
    return fail(ld, n, path, "expected a scalar value");
}

#define FOR_PAIRS(node, pair)                                                                      \
    for (yaml_node_pair_t *pair = (node)->data.mapping.pairs.start;                                \
         pair < (node)->data.mapping.pairs.top; pair++)
#define FOR_ITEMS(node, item)                                                                      \
    for (yaml_node_item_t *item = (node)->data.sequence.items.start;                               \
         item < (node)->data.sequence.items.top; item++)

static size_t seq_len(const yaml_node_t *n)
{
    return (size_t)(n->data.sequence.items.top - n->data.sequence.items.start);
}

/* The key text of a pair, or NULL (with an error) when the key is not a scalar. */
static const char *pair_key(struct ld *ld, yaml_node_pair_t *pair, const char *path)
{
    yaml_node_t *k = node_at(ld, pair->key);

    if (k == NULL || k->type != YAML_SCALAR_NODE) {
        fail(ld, k, path, "mapping keys must be scalars");
        return NULL;
    }
    return (const char *)k->data.scalar.value;
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
        return fail(ld, n, path, "unknown model group \"%s\" (no model_list entry has it)", group);
    return 0;
}

/* ---- model_list ---- */

static int parse_provider_model(struct ld *ld, const yaml_node_t *n, const char *path,
                                struct rt_deployment_conf *d)
{
    char full[RT_PROVIDER_CAP + RT_NAME_CAP + 1];
    const char *slash;
    size_t plen;

    if (get_nonempty_str(ld, n, path, full, sizeof(full)) != 0)
        return TG_ECONFIG;
    slash = strchr(full, '/');
    if (slash == NULL) {
        fmt_cut(d->provider, sizeof(d->provider), "openai");
        if (strlen(full) >= sizeof(d->model))
            return fail(ld, n, path, "model name too long (max %d bytes)", RT_NAME_CAP - 1);
        fmt_cut(d->model, sizeof(d->model), "%s", full);
    } else {
        plen = (size_t)(slash - full);
        if (plen == 0 || plen >= sizeof(d->provider))
            return fail(ld, n, path, "provider prefix must be 1..%d bytes", RT_PROVIDER_CAP - 1);
        if (slash[1] == '\0')
            return fail(ld, n, path, "missing model name after \"%.*s/\"", (int)plen, full);
        if (strlen(slash + 1) >= sizeof(d->model))
            return fail(ld, n, path, "model name too long (max %d bytes)", RT_NAME_CAP - 1);
        memcpy(d->provider, full, plen);
        d->provider[plen] = '\0';
        fmt_cut(d->model, sizeof(d->model), "%s", slash + 1);
    }
    d->prov = rt_provider_find(d->provider);
    if (d->prov == NULL)
        d->prov = rt_provider_default();
    return 0;
}

static int parse_litellm_params(struct ld *ld, yaml_node_t *n, const char *path,
                                struct rt_deployment_conf *d, int *timeout_set,
                                int *stream_timeout_set)
{
    char p[PATH_MAX_LEN];
    int have_model = 0;

    if (expect_type(ld, n, path, YAML_MAPPING_NODE) != 0)
        return TG_ECONFIG;
    FOR_PAIRS(n, pair)
    {
        const char *k = pair_key(ld, pair, path);
        yaml_node_t *v = node_at(ld, pair->value);
        int rc = 0;

        if (k == NULL)
            return TG_ECONFIG;
        path_join(p, path, k);
        if (strcmp(k, "model") == 0) {
            rc = parse_provider_model(ld, v, p, d);
            have_model = 1;
        } else if (strcmp(k, "api_base") == 0) {
            rc = is_null(v) ? 0 : get_str(ld, v, p, d->api_base, sizeof(d->api_base));
        } else if (strcmp(k, "api_key") == 0) {
            rc = is_null(v) ? 0 : get_str(ld, v, p, d->api_key, sizeof(d->api_key));
        } else if (strcmp(k, "rpm") == 0) {
            rc = get_limit(ld, v, p, &d->rpm);
        } else if (strcmp(k, "tpm") == 0) {
            rc = get_limit(ld, v, p, &d->tpm);
        } else if (strcmp(k, "timeout") == 0) {
            rc = get_seconds_ms(ld, v, p, &d->timeout_ms);
            *timeout_set = 1;
        } else if (strcmp(k, "stream_timeout") == 0) {
            rc = get_seconds_ms(ld, v, p, &d->stream_timeout_ms);
            *stream_timeout_set = 1;
        } else if (strcmp(k, "weight") == 0) {
            rc = get_u32(ld, v, p, 1000000, &d->weight);
        } else if (strcmp(k, "order") == 0) {
            rc = get_i32(ld, v, p, &d->order);
            if (rc == 0 && d->order < 0)
                rc = fail(ld, v, p, "expected a non-negative integer");
        } else if (strcmp(k, "input_cost_per_token") == 0) {
            rc = get_fusd(ld, v, p, &d->in_fusd_per_token);
        } else if (strcmp(k, "output_cost_per_token") == 0) {
            rc = get_fusd(ld, v, p, &d->out_fusd_per_token);
        } else {
            warn(ld, node_at(ld, pair->key), p, "unknown key, ignored");
        }
        if (rc != 0)
            return TG_ECONFIG;
    }
    if (!have_model) {
        path_join(p, path, "model");
        return fail(ld, n, p, "missing");
    }
    return 0;
}

static int parse_deployment(struct ld *ld, yaml_node_t *n, const char *path, size_t index,
                            struct rt_deployment_conf *d)
{
    char p[PATH_MAX_LEN];
    yaml_node_t *params = NULL;
    int have_name = 0, timeout_set = 0, stream_timeout_set = 0;
    int64_t entry_rpm = RT_LIMIT_NONE, entry_tpm = RT_LIMIT_NONE;

    if (expect_type(ld, n, path, YAML_MAPPING_NODE) != 0)
        return TG_ECONFIG;
    memset(d, 0, sizeof(*d));
    d->rpm = RT_LIMIT_NONE;
    d->tpm = RT_LIMIT_NONE;
    d->weight = 1;
    d->line = (uint32_t)n->start_mark.line + 1;
    FOR_PAIRS(n, pair)
    {
        const char *k = pair_key(ld, pair, path);
        yaml_node_t *v = node_at(ld, pair->value);
        int rc = 0;

        if (k == NULL)
            return TG_ECONFIG;
        path_join(p, path, k);
        if (strcmp(k, "model_name") == 0) {
            rc = get_nonempty_str(ld, v, p, d->group, sizeof(d->group));
            have_name = 1;
        } else if (strcmp(k, "litellm_params") == 0) {
            params = v;
            rc = parse_litellm_params(ld, v, p, d, &timeout_set, &stream_timeout_set);
        } else if (strcmp(k, "rpm") == 0) {
            rc = get_limit(ld, v, p, &entry_rpm); /* older LiteLLM configs put it here */
        } else if (strcmp(k, "tpm") == 0) {
            rc = get_limit(ld, v, p, &entry_tpm);
        } else if (strcmp(k, "model_info") == 0) {
            if (is_null(v))
                continue;
            if (expect_type(ld, v, p, YAML_MAPPING_NODE) != 0)
                return TG_ECONFIG;
            FOR_PAIRS(v, ip)
            {
                char q[PATH_MAX_LEN];
                const char *ik = pair_key(ld, ip, p);

                if (ik == NULL)
                    return TG_ECONFIG;
                path_join(q, p, ik);
                if (strcmp(ik, "id") == 0) {
                    if (get_nonempty_str(ld, node_at(ld, ip->value), q, d->id, sizeof(d->id)))
                        return TG_ECONFIG;
                } else {
                    warn(ld, node_at(ld, ip->key), q, "unknown key, ignored");
                }
            }
        } else {
            warn(ld, node_at(ld, pair->key), p, "unknown key, ignored");
        }
        if (rc != 0)
            return TG_ECONFIG;
    }
    if (!have_name) {
        path_join(p, path, "model_name");
        return fail(ld, n, p, "missing");
    }
    if (params == NULL) {
        path_join(p, path, "litellm_params");
        return fail(ld, n, p, "missing");
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

static int parse_model_list(struct ld *ld, yaml_node_t *n)
{
    struct rt_config *cfg = ld->cfg;
    size_t count;
    char p[PATH_MAX_LEN];

    if (expect_type(ld, n, "model_list", YAML_SEQUENCE_NODE) != 0)
        return TG_ECONFIG;
    count = seq_len(n);
    if (count > RT_CONFIG_DEPLOYMENTS_MAX)
        return fail(ld, n, "model_list", "too many entries (%zu, max %d)", count,
                    RT_CONFIG_DEPLOYMENTS_MAX);
    if (count > 0) {
        cfg->deployments = calloc(count, sizeof(*cfg->deployments));
        if (cfg->deployments == NULL)
            return fail(ld, n, "model_list", "out of memory");
    }
    FOR_ITEMS(n, item)
    {
        size_t i = cfg->n_deployments;
        yaml_node_t *e = node_at(ld, *item);
        struct rt_deployment_conf *d = &cfg->deployments[i];
        uint32_t same = 0, groups = 0;

        path_index(p, "model_list", i);
        if (parse_deployment(ld, e, p, i, d) != 0)
            return TG_ECONFIG;
        for (size_t j = 0; j < i; j++) {
            int first_of_group = 1;

            if (strcmp(cfg->deployments[j].id, d->id) == 0) {
                char q[PATH_MAX_LEN];

                path_join(q, p, "model_info.id");
                return fail(ld, e, q, "duplicate id \"%s\" (also at line %u)", d->id,
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
            return fail(ld, e, p, "too many deployments in model group \"%s\" (max %d)", d->group,
                        RT_GROUP_DEPLOYMENTS_MAX);
        if (same == 0 && groups + 1 > RT_CONFIG_GROUPS_MAX)
            return fail(ld, e, p, "too many model groups (max %d)", RT_CONFIG_GROUPS_MAX);
        cfg->n_deployments++;
    }
    return 0;
}

/* ---- fallbacks and aliases ---- */

/* A list of group names (fallback targets, default_fallbacks). */
static int parse_group_list(struct ld *ld, yaml_node_t *n, const char *path,
                            char (*out)[RT_NAME_CAP], uint32_t *n_out, int validate)
{
    char p[PATH_MAX_LEN];

    *n_out = 0;
    if (expect_type(ld, n, path, YAML_SEQUENCE_NODE) != 0)
        return TG_ECONFIG;
    if (seq_len(n) > RT_FALLBACK_TARGETS_MAX)
        return fail(ld, n, path, "too many groups (%zu, max %d)", seq_len(n),
                    RT_FALLBACK_TARGETS_MAX);
    FOR_ITEMS(n, item)
    {
        yaml_node_t *e = node_at(ld, *item);

        path_index(p, path, *n_out);
        if (get_nonempty_str(ld, e, p, out[*n_out], RT_NAME_CAP) != 0)
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
    char p[PATH_MAX_LEN], q[PATH_MAX_LEN];
    size_t idx = 0;

    *n_out = 0;
    if (expect_type(ld, n, path, YAML_SEQUENCE_NODE) != 0)
        return TG_ECONFIG;
    FOR_ITEMS(n, item)
    {
        yaml_node_t *e = node_at(ld, *item);

        path_index(p, path, idx++);
        if (expect_type(ld, e, p, YAML_MAPPING_NODE) != 0)
            return TG_ECONFIG;
        FOR_PAIRS(e, pair)
        {
            const char *k = pair_key(ld, pair, p);
            struct rt_fallback_rule *r;

            if (k == NULL)
                return TG_ECONFIG;
            path_join(q, p, k);
            if (*n_out >= cap)
                return fail(ld, e, path, "too many fallback rules (max %u)", cap);
            r = &rules[*n_out];
            memset(r, 0, sizeof(*r));
            if (strlen(k) >= sizeof(r->group))
                return fail(ld, e, q, "group name too long (max %d bytes)", RT_NAME_CAP - 1);
            fmt_cut(r->group, sizeof(r->group), "%s", k);
            if (require_group(ld, node_at(ld, pair->key), q, r->group) != 0)
                return TG_ECONFIG;
            for (uint32_t j = 0; j < *n_out; j++) {
                if (strcmp(rules[j].group, r->group) == 0)
                    return fail(ld, node_at(ld, pair->key), q, "duplicate fallback rule for \"%s\"",
                                r->group);
            }
            if (parse_group_list(ld, node_at(ld, pair->value), q, r->targets, &r->n_targets, 1) !=
                0)
                return TG_ECONFIG;
            (*n_out)++;
        }
    }
    return 0;
}

static int parse_aliases(struct ld *ld, yaml_node_t *n, const char *path, struct rt_alias_rule *out,
                         uint32_t cap, uint32_t *n_out)
{
    char p[PATH_MAX_LEN], q[PATH_MAX_LEN];

    *n_out = 0;
    if (expect_type(ld, n, path, YAML_MAPPING_NODE) != 0)
        return TG_ECONFIG;
    FOR_PAIRS(n, pair)
    {
        const char *k = pair_key(ld, pair, path);
        yaml_node_t *v = node_at(ld, pair->value);
        struct rt_alias_rule *a;

        if (k == NULL)
            return TG_ECONFIG;
        path_join(p, path, k);
        if (*n_out >= cap)
            return fail(ld, node_at(ld, pair->key), p, "too many aliases (max %u)", cap);
        a = &out[*n_out];
        memset(a, 0, sizeof(*a));
        if (k[0] == '\0' || strlen(k) >= sizeof(a->alias))
            return fail(ld, node_at(ld, pair->key), p, "alias must be 1..%d bytes",
                        RT_NAME_CAP - 1);
        fmt_cut(a->alias, sizeof(a->alias), "%s", k);
        if (v != NULL && v->type == YAML_MAPPING_NODE) {
            int have_model = 0;

            FOR_PAIRS(v, ap)
            {
                const char *ak = pair_key(ld, ap, p);

                if (ak == NULL)
                    return TG_ECONFIG;
                path_join(q, p, ak);
                if (strcmp(ak, "model") == 0) {
                    if (get_nonempty_str(ld, node_at(ld, ap->value), q, a->group,
                                         sizeof(a->group)) != 0)
                        return TG_ECONFIG;
                    have_model = 1;
                } else if (strcmp(ak, "hidden") == 0) {
                    if (get_bool(ld, node_at(ld, ap->value), q, &a->hidden) != 0)
                        return TG_ECONFIG;
                } else {
                    warn(ld, node_at(ld, ap->key), q, "unknown key, ignored");
                }
            }
            if (!have_model) {
                path_join(q, p, "model");
                return fail(ld, v, q, "missing");
            }
            path_join(q, p, "model");
            if (require_group(ld, v, q, a->group) != 0)
                return TG_ECONFIG;
        } else {
            if (get_nonempty_str(ld, v, p, a->group, sizeof(a->group)) != 0)
                return TG_ECONFIG;
            if (require_group(ld, v, p, a->group) != 0)
                return TG_ECONFIG;
        }
        for (uint32_t j = 0; j < *n_out; j++) {
            if (strcmp(out[j].alias, a->alias) == 0)
                return fail(ld, node_at(ld, pair->key), p, "duplicate alias");
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

    if (expect_type(ld, n, path, YAML_SEQUENCE_NODE) != 0)
        return TG_ECONFIG;
    FOR_ITEMS(n, item)
    {
        yaml_node_t *e = node_at(ld, *item);

        if (e != NULL && e->type == YAML_MAPPING_NODE)
            pairs += (size_t)(e->data.mapping.pairs.top - e->data.mapping.pairs.start);
    }
    if (pairs > RT_CONFIG_FALLBACK_RULES_MAX)
        return fail(ld, n, path, "too many fallback rules (%zu, max %d)", pairs,
                    RT_CONFIG_FALLBACK_RULES_MAX);
    *cap = (uint32_t)pairs;
    *rules = calloc(pairs > 0 ? pairs : 1, sizeof(**rules));
    if (*rules == NULL)
        return fail(ld, n, path, "out of memory");
    return 0;
}

/* router_settings, or (litellm = 1) the routing keys LiteLLM also reads from litellm_settings:
 * fallbacks, context_window_fallbacks, content_policy_fallbacks, default_fallbacks,
 * num_retries, allowed_fails, cooldown_time (request_timeout is read with the timeouts).
 * litellm_settings is parsed first, so router_settings wins when both set a value. */
static int parse_router_settings(struct ld *ld, yaml_node_t *n, const char *section, int litellm)
{
    struct rt_config *cfg = ld->cfg;
    char p[PATH_MAX_LEN];

    if (is_null(n))
        return 0;
    if (expect_type(ld, n, section, YAML_MAPPING_NODE) != 0)
        return TG_ECONFIG;
    FOR_PAIRS(n, pair)
    {
        const char *k = pair_key(ld, pair, section);
        yaml_node_t *v = node_at(ld, pair->value);
        int rc = 0;
        uint32_t cap = 0;

        if (k == NULL)
            return TG_ECONFIG;
        path_join(p, section, k);
        if (strcmp(k, litellm ? "request_timeout" : "timeout") == 0) {
            continue;
        } else if (litellm && strcmp(k, "num_retries") != 0 && strcmp(k, "allowed_fails") != 0 &&
                   strcmp(k, "cooldown_time") != 0 && strcmp(k, "fallbacks") != 0 &&
                   strcmp(k, "context_window_fallbacks") != 0 &&
                   strcmp(k, "content_policy_fallbacks") != 0 &&
                   strcmp(k, "default_fallbacks") != 0) {
            warn(ld, node_at(ld, pair->key), p, "unknown key, ignored");
        } else if (strcmp(k, "routing_strategy") == 0) {
            const char *s = NULL;

            if (scalar(ld, v, p, &s) != 0)
                return TG_ECONFIG;
            if (strcmp(s, "simple-shuffle") == 0)
                cfg->routing_strategy = RT_STRATEGY_SIMPLE_SHUFFLE;
            else if (strcmp(s, "least-busy") == 0)
                cfg->routing_strategy = RT_STRATEGY_LEAST_BUSY;
            else if (strcmp(s, "latency-based-routing") == 0)
                cfg->routing_strategy = RT_STRATEGY_LATENCY;
            else /* an existing LiteLLM config keeps working: warn, route by shuffle */
                warn(ld, v, p,
                     "unsupported strategy \"%s\", using simple-shuffle (supported: "
                     "simple-shuffle, least-busy, latency-based-routing)",
                     s);
        } else if (strcmp(k, "num_retries") == 0) {
            uint32_t r = 0;

            rc = get_u32(ld, v, p, 16, &r);
            cfg->num_retries = (int32_t)r;
        } else if (strcmp(k, "retry_after") == 0) {
            rc = get_u32(ld, v, p, 3600, &cfg->retry_after_s);
        } else if (strcmp(k, "allowed_fails") == 0) {
            rc = get_u32(ld, v, p, 1000000, &cfg->allowed_fails);
        } else if (strcmp(k, "cooldown_time") == 0) {
            uint32_t ms = 0;
            const char *txt = NULL;

            /* 0 disables cooldowns (as in LiteLLM). */
            if (scalar(ld, v, p, &txt) != 0)
                return TG_ECONFIG;
            if (strcmp(txt, "0") == 0 || strcmp(txt, "0.0") == 0)
                cfg->cooldown_s = 0;
            else if ((rc = get_seconds_ms(ld, v, p, &ms)) == 0)
                cfg->cooldown_s = (ms + 999) / 1000;
        } else if (strcmp(k, "fallbacks") == 0) {
            if (is_null(v))
                continue;
            free(cfg->fallbacks);
            cfg->fallbacks = NULL;
            cfg->n_fallbacks = 0;
            rc = alloc_rules(ld, v, p, &cfg->fallbacks, &cap);
            if (rc == 0)
                rc = parse_fallback_rules(ld, v, p, cfg->fallbacks, cap, &cfg->n_fallbacks);
        } else if (strcmp(k, "context_window_fallbacks") == 0) {
            if (is_null(v))
                continue;
            free(cfg->cw_fallbacks);
            cfg->cw_fallbacks = NULL;
            cfg->n_cw_fallbacks = 0;
            rc = alloc_rules(ld, v, p, &cfg->cw_fallbacks, &cap);
            if (rc == 0)
                rc = parse_fallback_rules(ld, v, p, cfg->cw_fallbacks, cap, &cfg->n_cw_fallbacks);
        } else if (strcmp(k, "content_policy_fallbacks") == 0) {
            if (is_null(v))
                continue;
            free(cfg->cp_fallbacks);
            cfg->cp_fallbacks = NULL;
            cfg->n_cp_fallbacks = 0;
            rc = alloc_rules(ld, v, p, &cfg->cp_fallbacks, &cap);
            if (rc == 0)
                rc = parse_fallback_rules(ld, v, p, cfg->cp_fallbacks, cap, &cfg->n_cp_fallbacks);
        } else if (strcmp(k, "default_fallbacks") == 0) {
            if (is_null(v))
                continue;
            rc = parse_group_list(ld, v, p, cfg->default_fallbacks, &cfg->n_default_fallbacks, 1);
        } else if (strcmp(k, "model_group_alias") == 0) {
            if (is_null(v))
                continue;
            cfg->aliases = calloc(RT_CONFIG_ALIASES_MAX, sizeof(*cfg->aliases)); /* 66 KB */
            if (cfg->aliases == NULL)
                return fail(ld, v, p, "out of memory");
            rc = parse_aliases(ld, v, p, cfg->aliases, RT_CONFIG_ALIASES_MAX, &cfg->n_aliases);
        } else if (strcmp(k, "enforce_fallback_model_access") == 0) {
            rc = get_bool(ld, v, p, &cfg->enforce_fallback_model_access);
        } else {
            warn(ld, node_at(ld, pair->key), p, "unknown key, ignored");
        }
        if (rc != 0)
            return TG_ECONFIG;
    }
    return 0;
}

static int parse_general_settings(struct ld *ld, yaml_node_t *n)
{
    char p[PATH_MAX_LEN];

    if (is_null(n))
        return 0;
    if (expect_type(ld, n, "general_settings", YAML_MAPPING_NODE) != 0)
        return TG_ECONFIG;
    FOR_PAIRS(n, pair)
    {
        const char *k = pair_key(ld, pair, "general_settings");

        if (k == NULL)
            return TG_ECONFIG;
        path_join(p, "general_settings", k);
        if (strcmp(k, "master_key") == 0) {
            yaml_node_t *v = node_at(ld, pair->value);

            if (!is_null(v) &&
                get_str(ld, v, p, ld->cfg->master_key, sizeof(ld->cfg->master_key)) != 0)
                return TG_ECONFIG;
        } else {
            warn(ld, node_at(ld, pair->key), p, "unknown key, ignored");
        }
    }
    return 0;
}

/* ---- tollgate: (unknown keys are errors) ---- */

static int unknown_key(struct ld *ld, yaml_node_pair_t *pair, const char *p)
{
    return fail(ld, node_at(ld, pair->key), p, "unknown key");
}

static int model_name_known(struct ld *ld, const char *name)
{
    return rt_config_has_group(ld->cfg, name) || has_alias(ld->cfg, name);
}

static int parse_key_model_limits(struct ld *ld, yaml_node_t *n, const char *path,
                                  struct rt_key_spec *ks, int is_tpm)
{
    char p[PATH_MAX_LEN];

    if (is_null(n))
        return 0;
    if (expect_type(ld, n, path, YAML_MAPPING_NODE) != 0)
        return TG_ECONFIG;
    FOR_PAIRS(n, pair)
    {
        const char *k = pair_key(ld, pair, path);
        struct rt_key_model_limit *l = NULL;
        int64_t v = 0;

        if (k == NULL)
            return TG_ECONFIG;
        path_join(p, path, k);
        if (!model_name_known(ld, k))
            return fail(ld, node_at(ld, pair->key), p, "unknown model group \"%s\"", k);
        if (get_limit(ld, node_at(ld, pair->value), p, &v) != 0)
            return TG_ECONFIG;
        for (uint32_t i = 0; i < ks->n_model_limits; i++) {
            if (strcmp(ks->model_limits[i].group, k) == 0)
                l = &ks->model_limits[i];
        }
        if (l == NULL) {
            if (ks->n_model_limits >= RT_KEY_MODEL_LIMITS_MAX)
                return fail(ld, node_at(ld, pair->key), p, "too many model limits (max %d)",
                            RT_KEY_MODEL_LIMITS_MAX);
            if (strlen(k) >= RT_NAME_CAP)
                return fail(ld, node_at(ld, pair->key), p, "group name too long");
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
    char p[PATH_MAX_LEN], q[PATH_MAX_LEN];

    if (is_null(n))
        return 0;
    if (expect_type(ld, n, path, YAML_MAPPING_NODE) != 0)
        return TG_ECONFIG;
    /* metadata is free-form user data: keys other than these two are kept out of the router
     * (they never enter events or logs) and are not an error. */
    FOR_PAIRS(n, pair)
    {
        const char *k = pair_key(ld, pair, path);
        yaml_node_t *v = node_at(ld, pair->value);

        if (k == NULL)
            return TG_ECONFIG;
        path_join(p, path, k);
        if (strcmp(k, "disable_fallbacks") == 0) {
            if (!is_null(v) && get_bool(ld, v, p, &ks->disable_fallbacks) != 0)
                return TG_ECONFIG;
        } else if (strcmp(k, "tags") == 0) {
            if (is_null(v))
                continue;
            if (expect_type(ld, v, p, YAML_SEQUENCE_NODE) != 0)
                return TG_ECONFIG;
            if (seq_len(v) > RT_KEY_TAGS_MAX)
                return fail(ld, v, p, "too many tags (max %d)", RT_KEY_TAGS_MAX);
            FOR_ITEMS(v, item)
            {
                path_index(q, p, ks->n_tags);
                if (get_nonempty_str(ld, node_at(ld, *item), q, ks->tags[ks->n_tags], RT_TAG_CAP) !=
                    0)
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
    char p[PATH_MAX_LEN];

    if (is_null(n))
        return 0;
    if (expect_type(ld, n, path, YAML_MAPPING_NODE) != 0)
        return TG_ECONFIG;
    FOR_PAIRS(n, pair)
    {
        const char *k = pair_key(ld, pair, path);
        yaml_node_t *v = node_at(ld, pair->value);

        if (k == NULL)
            return TG_ECONFIG;
        path_join(p, path, k);
        if (strcmp(k, "fallbacks") == 0) {
            if (is_null(v))
                continue; /* null: the global list applies */
            ks->has_fallbacks = 1;
            if (parse_fallback_rules(ld, v, p, ks->fallbacks, RT_KEY_FALLBACK_RULES_MAX,
                                     &ks->n_fallbacks) != 0)
                return TG_ECONFIG;
        } else if (strcmp(k, "model_group_alias") == 0) {
            if (is_null(v))
                continue;
            if (parse_aliases(ld, v, p, ks->aliases, RT_KEY_ALIASES_MAX, &ks->n_aliases) != 0)
                return TG_ECONFIG;
        } else if (strcmp(k, "num_retries") == 0) {
            uint32_t r = 0;

            if (is_null(v))
                continue;
            if (get_u32(ld, v, p, 16, &r) != 0)
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
    char p[PATH_MAX_LEN], q[PATH_MAX_LEN];
    int have_key = 0;
    yaml_node_t *model_nodes[RT_KEY_MODELS_MAX]; /* models entries, for the line of an error */

    if (expect_type(ld, n, path, YAML_MAPPING_NODE) != 0)
        return TG_ECONFIG;
    memset(ks, 0, sizeof(*ks));
    ks->max_budget_nusd = RT_LIMIT_NONE;
    ks->rpm_limit = RT_LIMIT_NONE;
    ks->tpm_limit = RT_LIMIT_NONE;
    ks->max_parallel_requests = RT_LIMIT_NONE;
    ks->num_retries = -1;
    FOR_PAIRS(n, pair)
    {
        const char *k = pair_key(ld, pair, path);
        yaml_node_t *v = node_at(ld, pair->value);
        int rc = 0;

        if (k == NULL)
            return TG_ECONFIG;
        path_join(p, path, k);
        if (strcmp(k, "key") == 0) {
            const char *s = NULL;

            if (scalar(ld, v, p, &s) != 0)
                return TG_ECONFIG;
            if (strlen(s) < 8 || strlen(s) >= RT_SECRET_CAP)
                return fail(ld, v, p, "key must be 8..%d bytes", RT_SECRET_CAP - 1);
            tg_sha256_hex(s, strlen(s), ks->key_hash);
            have_key = 1;
        } else if (strcmp(k, "key_alias") == 0) {
            rc = is_null(v) ? 0 : get_str(ld, v, p, ks->key_alias, sizeof(ks->key_alias));
        } else if (strcmp(k, "team_id") == 0) {
            rc = is_null(v) ? 0 : get_str(ld, v, p, ks->team_id, sizeof(ks->team_id));
        } else if (strcmp(k, "user_id") == 0) {
            rc = is_null(v) ? 0 : get_str(ld, v, p, ks->user_id, sizeof(ks->user_id));
        } else if (strcmp(k, "models") == 0) {
            if (is_null(v))
                continue;
            if (expect_type(ld, v, p, YAML_SEQUENCE_NODE) != 0)
                return TG_ECONFIG;
            if (seq_len(v) > RT_KEY_MODELS_MAX)
                return fail(ld, v, p, "too many models (max %d)", RT_KEY_MODELS_MAX);
            FOR_ITEMS(v, item)
            {
                yaml_node_t *e = node_at(ld, *item);

                path_index(q, p, ks->n_models);
                if (get_nonempty_str(ld, e, q, ks->models[ks->n_models], RT_NAME_CAP) != 0)
                    return TG_ECONFIG;
                model_nodes[ks->n_models] = e; /* checked once the key's aliases are known */
                ks->n_models++;
            }
        } else if (strcmp(k, "max_budget") == 0) {
            int64_t fusd = 0;

            if (is_null(v))
                continue;
            rc = get_fusd(ld, v, p, &fusd);
            ks->max_budget_nusd = fusd / 1000000;
        } else if (strcmp(k, "budget_duration") == 0) {
            const char *s = NULL;

            if (is_null(v))
                continue;
            if (scalar(ld, v, p, &s) != 0)
                return TG_ECONFIG;
            if (rt_config_parse_duration_s(s, &ks->budget_duration_s) != 0)
                rc = fail(ld, v, p, "expected a duration like 30s, 10m, 1h, 7d or 1mo");
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
        path_join(p, path, "key");
        return fail(ld, n, p, "missing");
    }
    /* models may name a group, a global alias or one of the key's own aliases (whichever order
     * models and router_settings came in) */
    for (uint32_t i = 0; i < ks->n_models; i++) {
        int own = 0;

        for (uint32_t a = 0; a < ks->n_aliases; a++)
            own |= strcmp(ks->aliases[a].alias, ks->models[i]) == 0;
        if (!own && !model_name_known(ld, ks->models[i])) {
            path_join(p, path, "models");
            path_index(q, p, i);
            return fail(ld, model_nodes[i], q, "unknown model group or alias \"%s\"",
                        ks->models[i]);
        }
    }
    return 0;
}

static int parse_keys(struct ld *ld, yaml_node_t *n, const char *path)
{
    struct rt_config *cfg = ld->cfg;
    char p[PATH_MAX_LEN];
    size_t count;

    if (is_null(n))
        return 0;
    if (expect_type(ld, n, path, YAML_SEQUENCE_NODE) != 0)
        return TG_ECONFIG;
    count = seq_len(n);
    if (count > RT_CONFIG_STATIC_KEYS_MAX)
        return fail(ld, n, path, "too many keys (%zu, max %d)", count, RT_CONFIG_STATIC_KEYS_MAX);
    if (count == 0)
        return 0;
    cfg->keys = calloc(count, sizeof(*cfg->keys));
    if (cfg->keys == NULL)
        return fail(ld, n, path, "out of memory");
    FOR_ITEMS(n, item)
    {
        yaml_node_t *e = node_at(ld, *item);

        path_index(p, path, cfg->n_keys);
        if (parse_key(ld, e, p, &cfg->keys[cfg->n_keys]) != 0)
            return TG_ECONFIG;
        for (uint32_t j = 0; j < cfg->n_keys; j++) {
            if (strcmp(cfg->keys[j].key_hash, cfg->keys[cfg->n_keys].key_hash) == 0)
                return fail(ld, e, p, "duplicate key (same value as %s[%u])", path, j);
        }
        cfg->n_keys++;
    }
    return 0;
}

static int parse_listen(struct ld *ld, yaml_node_t *n, const char *p)
{
    const char *colon;
    uint64_t port = 0;

    if (get_nonempty_str(ld, n, p, ld->cfg->listen, sizeof(ld->cfg->listen)) != 0)
        return TG_ECONFIG;
    colon = strrchr(ld->cfg->listen, ':');
    if (colon == NULL || colon == ld->cfg->listen || parse_u64_text(colon + 1, &port) != 0 ||
        port == 0 || port > 65535)
        return fail(ld, n, p, "expected host:port");
    return 0;
}

static int parse_tollgate(struct ld *ld, yaml_node_t *n)
{
    struct rt_config *cfg = ld->cfg;
    char p[PATH_MAX_LEN], q[PATH_MAX_LEN];

    if (is_null(n))
        return 0;
    if (expect_type(ld, n, "tollgate", YAML_MAPPING_NODE) != 0)
        return TG_ECONFIG;
    FOR_PAIRS(n, pair)
    {
        const char *k = pair_key(ld, pair, "tollgate");
        yaml_node_t *v = node_at(ld, pair->value);
        int rc = 0;

        if (k == NULL)
            return TG_ECONFIG;
        path_join(p, "tollgate", k);
        if (strcmp(k, "listen") == 0) {
            rc = parse_listen(ld, v, p);
        } else if (strcmp(k, "threads") == 0) {
            rc = get_u32(ld, v, p, 256, &cfg->threads);
            if (rc == 0 && cfg->threads == 0)
                rc = fail(ld, v, p, "expected at least 1");
        } else if (strcmp(k, "upstream_client") == 0) {
            const char *s = NULL;

            if (scalar(ld, v, p, &s) != 0)
                return TG_ECONFIG;
            if (strcmp(s, "native") == 0)
                cfg->upstream_native = 1;
            else if (strcmp(s, "curl") == 0)
                cfg->upstream_native = 0;
            else
                rc = fail(ld, v, p, "expected native or curl");
        } else if (strcmp(k, "keys") == 0) {
            rc = parse_keys(ld, v, p);
        } else if (strcmp(k, "allow_unauthenticated") == 0) {
            rc = get_bool(ld, v, p, &cfg->allow_unauthenticated);
        } else if (strcmp(k, "kafka") == 0 || strcmp(k, "spool") == 0 || strcmp(k, "limits") == 0) {
            if (is_null(v))
                continue;
            if (expect_type(ld, v, p, YAML_MAPPING_NODE) != 0)
                return TG_ECONFIG;
            FOR_PAIRS(v, sp)
            {
                const char *sk = pair_key(ld, sp, p);
                yaml_node_t *sv = node_at(ld, sp->value);

                if (sk == NULL)
                    return TG_ECONFIG;
                path_join(q, p, sk);
                if (strcmp(k, "kafka") == 0 && strcmp(sk, "brokers") == 0) {
                    rc = get_str(ld, sv, q, cfg->kafka_brokers, sizeof(cfg->kafka_brokers));
                } else if (strcmp(k, "kafka") == 0 && strcmp(sk, "events_topic") == 0) {
                    rc = get_nonempty_str(ld, sv, q, cfg->events_topic, sizeof(cfg->events_topic));
                } else if (strcmp(k, "kafka") == 0 && strcmp(sk, "control_topic") == 0) {
                    rc =
                        get_nonempty_str(ld, sv, q, cfg->control_topic, sizeof(cfg->control_topic));
                } else if (strcmp(k, "spool") == 0 && strcmp(sk, "dir") == 0) {
                    rc = get_nonempty_str(ld, sv, q, cfg->spool_dir, sizeof(cfg->spool_dir));
                } else if (strcmp(k, "spool") == 0 && strcmp(sk, "max_bytes") == 0) {
                    rc = get_u64(ld, sv, q, UINT64_MAX, &cfg->spool_max_bytes);
                    if (rc == 0 && cfg->spool_max_bytes < 1024u * 1024u)
                        rc = fail(ld, sv, q, "expected at least 1048576 bytes");
                } else if (strcmp(k, "spool") == 0 && strcmp(sk, "full_policy") == 0) {
                    const char *s = NULL;

                    if (scalar(ld, sv, q, &s) != 0)
                        return TG_ECONFIG;
                    if (strcmp(s, "drop") == 0)
                        cfg->spool_full_policy = RT_SPOOL_FULL_DROP;
                    else if (strcmp(s, "reject") == 0)
                        cfg->spool_full_policy = RT_SPOOL_FULL_REJECT;
                    else
                        rc = fail(ld, sv, q, "expected drop or reject");
                } else if (strcmp(k, "spool") == 0 && strcmp(sk, "fsync") == 0) {
                    const char *s = NULL;
                    uint64_t ms = 0;

                    if (scalar(ld, sv, q, &s) != 0)
                        return TG_ECONFIG;
                    if (strcmp(s, "none") == 0) {
                        cfg->spool_fsync = RT_SPOOL_FSYNC_NONE;
                    } else if (parse_u64_text(s, &ms) == 0 && ms >= 1 && ms <= 60000) {
                        cfg->spool_fsync = RT_SPOOL_FSYNC_INTERVAL;
                        cfg->spool_fsync_interval_ms = (uint32_t)ms;
                    } else {
                        rc = fail(ld, sv, q, "expected none or an interval in ms (1..60000)");
                    }
                } else if (strcmp(k, "limits") == 0 && strcmp(sk, "max_body_bytes") == 0) {
                    rc = get_u64(ld, sv, q, 1ull << 32, &cfg->max_body_bytes);
                    if (rc == 0 && cfg->max_body_bytes == 0)
                        rc = fail(ld, sv, q, "expected at least 1");
                } else if (strcmp(k, "limits") == 0 && strcmp(sk, "max_connections") == 0) {
                    rc = get_u32(ld, sv, q, 1000000, &cfg->max_connections);
                    if (rc == 0 && cfg->max_connections == 0)
                        rc = fail(ld, sv, q, "expected at least 1");
                } else if (strcmp(k, "limits") == 0 && strcmp(sk, "max_in_flight") == 0) {
                    rc = get_u32(ld, sv, q, 1000000, &cfg->max_in_flight);
                    if (rc == 0 && cfg->max_in_flight == 0)
                        rc = fail(ld, sv, q, "expected at least 1");
                } else if (strcmp(k, "limits") == 0 && strcmp(sk, "max_response_bytes") == 0) {
                    rc = get_u64(ld, sv, q, 1ull << 34, &cfg->max_response_bytes);
                    if (rc == 0 && cfg->max_response_bytes == 0)
                        rc = fail(ld, sv, q, "expected at least 1");
                } else if (strcmp(k, "limits") == 0 && strcmp(sk, "max_keys") == 0) {
                    rc = get_u32(ld, sv, q, 10000000, &cfg->max_keys);
                    if (rc == 0 && cfg->max_keys == 0)
                        rc = fail(ld, sv, q, "expected at least 1");
                } else if (strcmp(k, "limits") == 0 && strcmp(sk, "limiter_keys") == 0) {
                    rc = get_u32(ld, sv, q, 10000000, &cfg->limiter_keys);
                    if (rc == 0 && cfg->limiter_keys == 0)
                        rc = fail(ld, sv, q, "expected at least 1");
                } else if (strcmp(k, "limits") == 0 && strcmp(sk, "max_connections_per_ip") == 0) {
                    rc = get_u32(ld, sv, q, 1000000, &cfg->max_connections_per_ip);
                    if (rc == 0 && cfg->max_connections_per_ip == 0)
                        rc = fail(ld, sv, q, "expected at least 1");
                } else if (strcmp(k, "limits") == 0 && (strcmp(sk, "header_timeout_ms") == 0 ||
                                                        strcmp(sk, "body_timeout_ms") == 0 ||
                                                        strcmp(sk, "keepalive_timeout_ms") == 0 ||
                                                        strcmp(sk, "send_timeout_ms") == 0)) {
                    uint32_t *dst = strcmp(sk, "header_timeout_ms") == 0 ? &cfg->header_timeout_ms
                                    : strcmp(sk, "body_timeout_ms") == 0 ? &cfg->body_timeout_ms
                                    : strcmp(sk, "send_timeout_ms") == 0
                                        ? &cfg->send_timeout_ms
                                        : &cfg->keepalive_timeout_ms;

                    rc = get_u32(ld, sv, q, 3600000, dst);
                    if (rc == 0 && *dst < 100)
                        rc = fail(ld, sv, q, "expected at least 100 (milliseconds)");
                } else if (strcmp(k, "limits") == 0 && strcmp(sk, "body_min_rate") == 0) {
                    rc = get_u32(ld, sv, q, 1u << 30, &cfg->body_min_rate);
                    if (rc == 0 && cfg->body_min_rate == 0)
                        rc = fail(ld, sv, q, "expected at least 1 (bytes per second)");
                } else if (strcmp(k, "limits") == 0 && strcmp(sk, "max_json_depth") == 0) {
                    rc = get_u32(ld, sv, q, 1000, &cfg->max_json_depth);
                    if (rc == 0 && cfg->max_json_depth < 2)
                        rc = fail(ld, sv, q, "expected at least 2");
                } else if (strcmp(k, "limits") == 0 && strcmp(sk, "max_json_elements") == 0) {
                    rc = get_u32(ld, sv, q, 100000000, &cfg->max_json_elements);
                    if (rc == 0 && cfg->max_json_elements < 2)
                        rc = fail(ld, sv, q, "expected at least 2");
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
        return fail(ld, n, "tollgate.keys", "more static keys (%u) than limits.max_keys (%u)",
                    cfg->n_keys, cfg->max_keys);
    return 0;
}

static int key_cmp(const void *a, const void *b)
{
    const yaml_node_t *x = *(const yaml_node_t *const *)a;
    const yaml_node_t *y = *(const yaml_node_t *const *)b;

    return strcmp((const char *)x->data.scalar.value, (const char *)y->data.scalar.value);
}

/* Every mapping of the document with a key given twice is an error naming it: the section
 * parsers read each key once (a second `keys:` or `models:` would append past what the first
 * allocated), and YAML's own rule is that keys are unique. Keys are sorted per mapping, so a
 * mapping of n keys costs n log n. */
static int check_duplicate_keys(struct ld *ld)
{
    for (yaml_node_t *n = ld->doc.nodes.start; n < ld->doc.nodes.top; n++) {
        size_t np, k = 0;
        const yaml_node_t **keys;

        if (n->type != YAML_MAPPING_NODE)
            continue;
        np = (size_t)(n->data.mapping.pairs.top - n->data.mapping.pairs.start);
        if (np < 2)
            continue;
        keys = malloc(np * sizeof(*keys));
        if (keys == NULL)
            return fail(ld, n, "", "out of memory");
        FOR_PAIRS(n, pair)
        {
            yaml_node_t *kn = node_at(ld, pair->key);

            if (kn != NULL && kn->type == YAML_SCALAR_NODE)
                keys[k++] = kn;
        }
        qsort(keys, k, sizeof(*keys), key_cmp);
        for (size_t i = 1; i < k; i++) {
            if (key_cmp(&keys[i - 1], &keys[i]) == 0) {
                const yaml_node_t *second =
                    keys[i]->start_mark.index > keys[i - 1]->start_mark.index ? keys[i]
                                                                              : keys[i - 1];
                char name[96];

                fmt_cut(name, sizeof(name), "%s", (const char *)second->data.scalar.value);
                free(keys);
                return fail(ld, second, name, "duplicate key (given twice in one mapping)");
            }
        }
        free(keys);
    }
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
        return fail(ld, NULL, "", "empty document");
    if (root->type != YAML_MAPPING_NODE)
        return fail(ld, root, "", "expected a mapping at the top level");
    FOR_PAIRS(root, pair)
    {
        const char *k = pair_key(ld, pair, "");
        int known = 0;

        if (k == NULL)
            return TG_ECONFIG;
        for (int i = 0; i < 5; i++) {
            if (strcmp(k, order[i]) == 0) {
                if (sections[i] != NULL)
                    return fail(ld, node_at(ld, pair->key), k, "duplicate section");
                sections[i] = node_at(ld, pair->value);
                known = 1;
            }
        }
        if (!known)
            warn(ld, node_at(ld, pair->key), k, "unknown key, ignored");
    }
    /* The default timeout of every deployment (litellm_settings.request_timeout, overridden by
     * router_settings.timeout) is needed before model_list: read it first. */
    for (int si = 4; si >= 1; si -= 3) {
        const char *name = si == 4 ? "request_timeout" : "timeout";
        char p[PATH_MAX_LEN];

        if (sections[si] == NULL || sections[si]->type != YAML_MAPPING_NODE)
            continue;
        FOR_PAIRS(sections[si], pair)
        {
            yaml_node_t *k = node_at(ld, pair->key);

            if (k == NULL || k->type != YAML_SCALAR_NODE ||
                strcmp((const char *)k->data.scalar.value, name) != 0)
                continue;
            path_join(p, order[si], name);
            if (get_seconds_ms(ld, node_at(ld, pair->value), p, &ld->cfg->timeout_ms) != 0)
                return TG_ECONFIG;
        }
    }
    if (sections[0] == NULL || is_null(sections[0]))
        return fail(ld, root, "model_list", "missing (at least one deployment is needed)");
    if (parse_model_list(ld, sections[0]) != 0)
        return TG_ECONFIG;
    if (ld->cfg->n_deployments == 0)
        return fail(ld, sections[0], "model_list", "empty (at least one deployment is needed)");
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
    yaml_parser_t parser;
    int parser_ok = 0, doc_ok = 0;
    struct rt_config *cfg = NULL;

    memset(diag, 0, sizeof(*diag));
    memset(&ld, 0, sizeof(ld));
    ld.file = name != NULL ? name : "config";
    ld.diag = diag;
    cfg = calloc(1, sizeof(*cfg));
    if (cfg == NULL) {
        fmt_cut(diag->error, sizeof(diag->error), "%s: out of memory", ld.file);
        return NULL;
    }
    ld.cfg = cfg;
    fmt_cut(cfg->path, sizeof(cfg->path), "%s", ld.file);
    set_defaults(cfg);
    if (!yaml_parser_initialize(&parser)) {
        fmt_cut(diag->error, sizeof(diag->error), "%s: out of memory", ld.file);
        goto out;
    }
    parser_ok = 1;
    yaml_parser_set_input_string(&parser, (const unsigned char *)data, len);
    if (!yaml_parser_load(&parser, &ld.doc)) {
        fmt_cut(diag->error, sizeof(diag->error), "%s:%lu: YAML syntax error: %s", ld.file,
                (unsigned long)parser.problem_mark.line + 1,
                parser.problem != NULL ? parser.problem : "unknown");
        ld.failed = 1;
        goto out;
    }
    doc_ok = 1;
    if (check_duplicate_keys(&ld) == 0)
        parse_root(&ld, yaml_document_get_root_node(&ld.doc));
out:
    if (doc_ok)
        yaml_document_delete(&ld.doc);
    if (parser_ok)
        yaml_parser_delete(&parser);
    if (ld.failed || diag->error[0] != '\0') {
        if (diag->error[0] == '\0')
            fmt_cut(diag->error, sizeof(diag->error), "%s: invalid configuration", ld.file);
        rt_config_destroy(&cfg);
        return NULL;
    }
    return cfg;
}

struct rt_config *rt_config_load_file(const char *path, struct rt_config_diag *diag)
{
    FILE *f = NULL;
    char *data = NULL;
    size_t len = 0;
    struct rt_config *cfg = NULL;
    long size;

    memset(diag, 0, sizeof(*diag));
    f = fopen(path, "rb");
    if (f == NULL) {
        fmt_cut(diag->error, sizeof(diag->error), "%s:0: cannot open: %s", path, strerror(errno));
        goto out;
    }
    if (fseek(f, 0, SEEK_END) != 0 || (size = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
        fmt_cut(diag->error, sizeof(diag->error), "%s:0: cannot read: %s", path, strerror(errno));
        goto out;
    }
    if ((unsigned long)size > CONFIG_FILE_MAX_BYTES) {
        fmt_cut(diag->error, sizeof(diag->error), "%s:0: file too large (max %u bytes)", path,
                CONFIG_FILE_MAX_BYTES);
        goto out;
    }
    data = malloc((size_t)size + 1);
    if (data == NULL) {
        fmt_cut(diag->error, sizeof(diag->error), "%s:0: out of memory", path);
        goto out;
    }
    len = fread(data, 1, (size_t)size, f);
    if (len != (size_t)size) {
        fmt_cut(diag->error, sizeof(diag->error), "%s:0: short read", path);
        goto out;
    }
    cfg = rt_config_load_buffer(path, data, len, diag);
out:
    free(data);
    if (f != NULL)
        fclose(f);
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
        if (cfg->deployments[i].api_key[0] == '\0')
            continue;
        if (n < cap)
            out[n] = cfg->deployments[i].api_key;
        n++;
    }
    return n;
}
