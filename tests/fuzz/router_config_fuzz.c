/* libFuzzer target for router-svc's configuration loader (router-svc/src/config.h):
 * rt_config_load_buffer on the input as YAML, rt_config_destroy on success.
 *
 * os.environ/NAME values read the environment: LLVMFuzzerInitialize empties it and sets the few
 * variables the seeds use (fuzz_env below), so every run of an input sees the same values.
 *
 * Properties (abort on violation):
 *  - a failed load returns NULL with an error "FILE:LINE: ..." naming the file given; a
 *    successful one leaves the error empty; warnings stay within RT_CONFIG_WARNINGS_MAX and
 *    name the file;
 *  - a loaded config keeps config.h's promises: every string terminated inside its field,
 *    every count within its maximum, 1..RT_CONFIG_DEPLOYMENTS_MAX deployments with unique ids
 *    (rt_config_find_deployment finds each at its index), fallback and alias rules naming
 *    known groups, static keys with a SHA-256 hex hash, unique, no more than limits.max_keys;
 *  - what router-svc's start does next with it works: rt_keys_create takes the static keys,
 *    rt_mask_create takes rt_config_secrets (whose count matches the config, the Kafka
 *    secrets included), and the name and port rt_url_host_port reads from each api_base (for
 *    the resolver) are the URL's own;
 *  - the origin rt_url_origin reads from each api_base (for the built-in client) lies inside
 *    the URL: the authority right after the scheme, the path right after the authority and
 *    starting with '/', '?', '#' or nothing, the host inside the authority (an IPv6 address in
 *    brackets), a literal exactly when the host is an address, a port in 1..65535. */
#include <arpa/inet.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "keys.h"
#include "mask.h"
#include "resolver.h"
#include "tg_log.h"

#define FUZZ_FILE_NAME "fuzz.yaml"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The whole environment of the target: os.environ/ lookups must not depend on the machine. */
static const char *const fuzz_env[][2] = {
    {"TG_FUZZ_API_KEY", "sk-fuzz-0123456789abcdef0123"},
    {"TG_FUZZ_API_BASE", "http://127.0.0.1:8080/v1"},
    {"TG_FUZZ_RPM", "600"},
    {"TG_FUZZ_EMPTY", ""},
};

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    if (clearenv() != 0)
        abort();
    for (size_t i = 0; i < sizeof(fuzz_env) / sizeof(fuzz_env[0]); i++) {
        if (setenv(fuzz_env[i][0], fuzz_env[i][1], 1) != 0)
            abort();
    }
    tg_log_set_level(TG_LOG_OFF); /* warnings are checked in the diagnostics, not on stderr */
    return 0;
}

static void fail(const char *what, const char *detail)
{
    fprintf(stderr, "router_config_fuzz: %s%s%s\n", what, detail != NULL ? ": " : "",
            detail != NULL ? detail : "");
    abort();
}

static void check(int ok, const char *what, const char *detail)
{
    if (!ok)
        fail(what, detail);
}

/* The string in a field of cap bytes is terminated inside it. */
static int str_in(const char *s, size_t cap)
{
    return strnlen(s, cap) < cap;
}

/* The name start-up asks the resolver for (rt_url_host_port): a host name of the URL itself
 * (letters, digits, '.', '-', '_'), terminated; a decimal port in 1..65535. */
static void check_api_base_name(const char *url)
{
    char host[256], port[8];
    long pn;

    memset(host, 0xAA, sizeof(host));
    memset(port, 0xAA, sizeof(port));
    if (!rt_url_host_port(url, host, sizeof(host), port, sizeof(port)))
        return;
    check(str_in(host, sizeof(host)) && str_in(port, sizeof(port)), "api_base name unterminated",
          url);
    check(host[0] != '\0' &&
              strspn(host, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_") ==
                  strlen(host) &&
              strstr(url, host) != NULL,
          "api_base name is not the URL's host", url);
    pn = strtol(port, NULL, 10);
    check(pn >= 1 && pn <= 65535 && strspn(port, "0123456789") == strlen(port),
          "api_base port out of range", url);
}

/* The origin the built-in client reads from an api_base (rt_url_origin) is the URL's own. */
static void check_api_base_origin(const char *url)
{
    struct rt_url_origin o;
    unsigned char addr[16];
    const char *scheme_end;
    size_t hl;
    int v4, v6;

    if (rt_url_origin(url, &o) != 0)
        return;
    scheme_end = url + (o.tls ? 8 : 7);
    hl = strnlen(o.host, sizeof(o.host));
    check(hl > 0 && hl < sizeof(o.host), "api_base origin host empty or unterminated", url);
    check(o.hostport == scheme_end && o.hostport_len >= hl &&
              o.hostport_len <= strlen(scheme_end) && o.path == o.hostport + o.hostport_len &&
              strchr("/?#", *o.path) != NULL &&
              memchr(o.hostport, '/', o.hostport_len) == NULL &&
              memchr(o.hostport, '@', o.hostport_len) == NULL,
          "api_base origin is not the URL's authority", url);
    v4 = inet_pton(AF_INET, o.host, addr) == 1;
    v6 = inet_pton(AF_INET6, o.host, addr) == 1;
    check(o.literal == (v4 || v6), "api_base origin literal flag is wrong", url);
    check(v6 ? o.hostport[0] == '[' && memcmp(o.hostport + 1, o.host, hl) == 0 &&
                   o.hostport[hl + 1] == ']'
             : memcmp(o.hostport, o.host, hl) == 0,
          "api_base origin host is not the authority's", url);
    check(o.port >= 1 && o.port <= 65535, "api_base origin port out of range", url);
}

static void check_rules(const struct rt_config *cfg, const struct rt_fallback_rule *r, uint32_t n,
                        uint32_t max, const char *what)
{
    check(n <= max, "too many fallback rules", what);
    for (uint32_t i = 0; i < n; i++) {
        check(str_in(r[i].group, RT_NAME_CAP) && rt_config_has_group(cfg, r[i].group),
              "fallback rule for an unknown group", what);
        check(r[i].n_targets <= RT_FALLBACK_TARGETS_MAX, "too many fallback targets", what);
        for (uint32_t t = 0; t < r[i].n_targets; t++)
            check(str_in(r[i].targets[t], RT_NAME_CAP) && rt_config_has_group(cfg, r[i].targets[t]),
                  "fallback target is not a group", what);
    }
}

static void check_key(const struct rt_key_spec *k)
{
    check(strlen(k->key_hash) == TG_SHA256_HEX_LEN &&
              strspn(k->key_hash, "0123456789abcdef") == TG_SHA256_HEX_LEN,
          "static key without a SHA-256 hex hash", NULL);
    check(str_in(k->key_alias, RT_ID_CAP) && str_in(k->team_id, RT_ID_CAP) &&
              str_in(k->user_id, RT_ID_CAP),
          "static key string over its field", k->key_hash);
    check(k->n_models <= RT_KEY_MODELS_MAX, "static key: too many models", k->key_hash);
    check(k->n_model_limits <= RT_KEY_MODEL_LIMITS_MAX, "static key: too many model limits",
          k->key_hash);
    check(k->n_tags <= RT_KEY_TAGS_MAX, "static key: too many tags", k->key_hash);
    check(k->n_fallbacks <= RT_KEY_FALLBACK_RULES_MAX, "static key: too many fallback rules",
          k->key_hash);
    check(k->n_aliases <= RT_KEY_ALIASES_MAX, "static key: too many aliases", k->key_hash);
    check(k->num_retries >= -1 && k->num_retries <= 16, "static key: num_retries out of range",
          k->key_hash);
}

static void check_config(const struct rt_config *cfg)
{
    const char *secrets[RT_MASK_SECRETS_MAX];
    size_t n_secrets, want_secrets = 0;
    struct rt_keys *keys;
    struct rt_mask *mask;
    char err[256];

    check(cfg->n_deployments >= 1 && cfg->n_deployments <= RT_CONFIG_DEPLOYMENTS_MAX,
          "deployment count out of range", NULL);
    check(str_in(cfg->path, RT_PATH_CAP) && strcmp(cfg->path, FUZZ_FILE_NAME) == 0,
          "config path is not the name given", NULL);
    for (uint32_t i = 0; i < cfg->n_deployments; i++) {
        const struct rt_deployment_conf *d = &cfg->deployments[i];

        check(str_in(d->id, RT_ID_CAP) && str_in(d->group, RT_NAME_CAP) &&
                  str_in(d->provider, RT_PROVIDER_CAP) && str_in(d->model, RT_NAME_CAP) &&
                  str_in(d->api_base, RT_URL_CAP) && str_in(d->api_key, RT_SECRET_CAP),
              "deployment string over its field", NULL);
        check(d->id[0] != '\0' && d->group[0] != '\0' && d->model[0] != '\0',
              "deployment without id, group or model", d->id);
        check(rt_config_find_deployment(cfg, d->id) == (int)i, "deployment ids are not unique",
              d->id);
        check(rt_config_has_group(cfg, d->group), "deployment group not found", d->group);
        check(d->price.input >= RT_PRICE_NONE && d->price.output >= RT_PRICE_NONE &&
                  d->price.cache_read >= RT_PRICE_NONE &&
                  d->price.cache_creation >= RT_PRICE_NONE && d->price.reasoning >= RT_PRICE_NONE,
              "negative price", d->id);
        check(d->priced == (d->price.input != RT_PRICE_NONE || d->price.output != RT_PRICE_NONE),
              "priced flag disagrees with the prices", d->id);
        check(d->timeout_ms >= 1 && d->stream_timeout_ms >= 1, "zero timeout", d->id);
        check_api_base_name(d->api_base);
        check_api_base_origin(d->api_base);
        if (d->api_key[0] != '\0')
            want_secrets++;
        /* a cloud provider's credentials are masked too */
        if (d->cloud != NULL) {
            const char *cs[5] = {d->cloud->azure_ad_token, d->cloud->client_secret,
                                 d->cloud->aws_secret_access_key, d->cloud->aws_session_token,
                                 d->cloud->aws_web_identity_token};

            for (size_t j = 0; j < 5; j++)
                want_secrets += cs[j][0] != '\0';
        }
    }
    check_rules(cfg, cfg->fallbacks, cfg->n_fallbacks, RT_CONFIG_FALLBACK_RULES_MAX, "fallbacks");
    check_rules(cfg, cfg->cw_fallbacks, cfg->n_cw_fallbacks, RT_CONFIG_FALLBACK_RULES_MAX,
                "context_window_fallbacks");
    check_rules(cfg, cfg->cp_fallbacks, cfg->n_cp_fallbacks, RT_CONFIG_FALLBACK_RULES_MAX,
                "content_policy_fallbacks");
    check(cfg->n_default_fallbacks <= RT_FALLBACK_TARGETS_MAX, "too many default fallbacks", NULL);
    check(cfg->n_aliases <= RT_CONFIG_ALIASES_MAX, "too many aliases", NULL);
    for (uint32_t i = 0; i < cfg->n_aliases; i++)
        check(str_in(cfg->aliases[i].alias, RT_NAME_CAP) &&
                  rt_config_has_group(cfg, cfg->aliases[i].group),
              "alias of an unknown group", cfg->aliases[i].alias);
    check(str_in(cfg->master_key, RT_SECRET_CAP) && str_in(cfg->listen, RT_LISTEN_CAP) &&
              str_in(cfg->kafka_brokers, RT_BROKERS_CAP) &&
              str_in(cfg->events_topic, RT_TOPIC_CAP) && str_in(cfg->control_topic, RT_TOPIC_CAP) &&
              str_in(cfg->spool_dir, RT_PATH_CAP),
          "tollgate string over its field", NULL);
    check(cfg->threads >= 1 && cfg->max_keys >= 1 && cfg->max_connections >= 1 &&
              cfg->max_in_flight >= 1 && cfg->limiter_keys >= 1 && cfg->max_body_bytes >= 1,
          "a limit that must be at least 1 is 0", NULL);
    check(cfg->events_per_record >= 1 && cfg->events_per_record <= PROTO_RECORD_EVENTS_MAX,
          "kafka.events_per_record outside 1..64", NULL);
    check(cfg->n_keys <= RT_CONFIG_STATIC_KEYS_MAX && cfg->n_keys <= cfg->max_keys,
          "too many static keys", NULL);
    for (uint32_t i = 0; i < cfg->n_keys; i++)
        check_key(&cfg->keys[i]);

    /* router-svc's start: keys table and masker from this config */
    err[0] = '\0';
    keys =
        rt_keys_create(cfg->keys, cfg->n_keys, cfg->n_keys > 0 ? cfg->n_keys : 1, err, sizeof(err));
    check(keys != NULL, "rt_keys_create refuses the static keys of a loaded config", err);
    rt_keys_destroy(&keys);
    if (cfg->master_key[0] != '\0')
        want_secrets++;
    /* the Kafka secrets (sasl.password, ssl.key_password, secret librdkafka properties) too */
    check(cfg->kafka_opts.n <= TG_KAFKA_OPTS_MAX &&
              cfg->kafka_opts.text_used <= TG_KAFKA_OPT_TEXT_CAP,
          "kafka properties over their bounds", NULL);
    for (uint32_t i = 0; i < cfg->kafka_opts.n; i++) {
        const struct tg_kafka_opt *o = &cfg->kafka_opts.opt[i];

        check(str_in(o->name, TG_KAFKA_OPT_NAME_CAP) && o->value_off < cfg->kafka_opts.text_used,
              "kafka property outside its storage", NULL);
        want_secrets += o->secret && cfg->kafka_opts.text[o->value_off] != '\0';
    }
    n_secrets = rt_config_secrets(cfg, secrets, RT_MASK_SECRETS_MAX);
    check(n_secrets == want_secrets, "rt_config_secrets count differs from the config", NULL);
    mask = rt_mask_create(secrets, n_secrets, err, sizeof(err));
    check(mask != NULL, "rt_mask_create refuses the config's secrets", err);
    rt_mask_destroy(&mask);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct rt_config_diag diag; /* about 17 KB */
    struct rt_config *cfg;
    const size_t nl = strlen(FUZZ_FILE_NAME ":");

    cfg = rt_config_load_buffer(FUZZ_FILE_NAME, (const char *)data, size, &diag);
    check(diag.n_warnings <= RT_CONFIG_WARNINGS_MAX, "warning count over its maximum", NULL);
    for (uint32_t i = 0; i < diag.n_warnings; i++)
        check(strncmp(diag.warnings[i], FUZZ_FILE_NAME ":", nl) == 0,
              "warning does not name the file", diag.warnings[i]);
    if (cfg == NULL) {
        check(str_in(diag.error, sizeof(diag.error)) &&
                  strncmp(diag.error, FUZZ_FILE_NAME ":", nl) == 0,
              "failed load without an error naming the file", diag.error);
        return 0;
    }
    check(diag.error[0] == '\0', "successful load with an error", diag.error);
    check_config(cfg);
    rt_config_destroy(&cfg);
    check(cfg == NULL, "rt_config_destroy did not clear the pointer", NULL);
    return 0;
}
