/* config: router-svc configuration, loaded from YAML in the shape of LiteLLM's config.yaml
 * (model_list, router_settings, general_settings) plus Tollgate's own `tollgate:` section.
 *
 * The loaded struct rt_config is plain data, immutable after load, owned by the caller of
 * rt_config_load_*() and read by every module (router, keys, limiter, http_front, upstream,
 * publisher). Every string lives in a fixed array whose capacity is below; a value longer than
 * its capacity is a configuration error, never a truncation. Every list has a maximum count;
 * more entries is an error.
 *
 * Value syntax: any scalar may be `os.environ/NAME`; the value is then read from the
 * environment at load time, and a missing variable is an error naming it.
 *
 * Diagnostics: errors have the form `FILE:LINE: key.path: problem`, e.g.
 *   router.yaml:12: model_list[1].litellm_params.rpm: expected a non-negative integer
 * litellm_settings: the routing keys LiteLLM also reads from there (fallbacks,
 * context_window_fallbacks, content_policy_fallbacks, default_fallbacks, num_retries,
 * allowed_fails, cooldown_time, request_timeout) are honoured; router_settings wins when both
 * set one. litellm_settings.ssl_verify is the default of the deployments' ssl_verify. rpm/tpm beside model_name (older configs) are read too; litellm_params wins.
 * Unknown keys in the LiteLLM sections (model_list entries, litellm_params, model_info,
 * router_settings, litellm_settings, general_settings, and unknown top-level sections) are
 * ignored with one warning each (same form, problem "unknown key, ignored"), logged with TG_WARN
 * and returned in the diagnostics so that `--check` can print them. Unknown keys under
 * `tollgate:` are errors.
 *
 * Money: LiteLLM prices are USD per token (input_cost_per_token: 0.00000005). They are parsed
 * exactly from their decimal text (no floating point) into integer femto-USD per token
 * (1 fUSD = 1e-15 USD; 0.00000005 USD = 50,000,000 fUSD), rounded half-up at the 15th decimal.
 * A deployment without prices of its own takes them from the price maps (prices.h: the built-in
 * one and tollgate.price_map) by its model_info.base_model or its model; one that finds none is
 * a warning naming it. Cost of a call in nano-USD is computed in 128-bit integers (see usage.h),
 * exact to the nano-USD (floored).
 *
 * Threads: load on one thread (main), then share read-only. */
#ifndef RT_CONFIG_H
#define RT_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "prices.h"
#include "proto_event.h"
#include "tg_ids.h"
#include "tg_kafka_opts.h"

/* String capacities, bytes including the NUL (the longest value is cap - 1). */
#define RT_NAME_CAP PROTO_MODEL_CAP        /* model group names, aliases, provider model names */
#define RT_ID_CAP PROTO_NAME_CAP           /* model_info.id, key_alias, team_id, user_id */
#define RT_PROVIDER_CAP PROTO_PROVIDER_CAP /* "openai", "anthropic", "azure", ... */
#define RT_TAG_CAP PROTO_TAG_CAP           /* key metadata tags */
#define RT_URL_CAP 512                     /* api_base */
#define RT_SECRET_CAP 512                  /* api_key, master_key, static key values */
#define RT_TOKEN_CAP 4096                  /* a bearer token (Entra ID tokens run to 2-3 KB) */
#define RT_CLOUD_ID_CAP 256                /* tenant_id, client_id, api_version, ... */
#define RT_SA_KEY_CAP 8192                 /* a service account's private key, PEM */
#define RT_CREDS_RAW_CAP 12288             /* vertex_credentials: a path or the JSON itself */
#define RT_PATH_CAP 512                    /* spool dir */
#define RT_LISTEN_CAP 128                  /* "host:port" */
#define RT_BROKERS_CAP 512                 /* Kafka bootstrap list */
#define RT_TOPIC_CAP 250                   /* Kafka topic names */

/* List bounds (counts). More entries than this is a configuration error. */
#define RT_CONFIG_DEPLOYMENTS_MAX 512    /* model_list entries */
#define RT_GROUP_DEPLOYMENTS_MAX 64      /* deployments sharing one model_name */
#define RT_CONFIG_GROUPS_MAX 256         /* distinct model_name values */
#define RT_FALLBACK_TARGETS_MAX 8        /* groups in one fallback list ({g: [t1..t8]}) */
#define RT_CONFIG_FALLBACK_RULES_MAX 256 /* entries in each of the fallbacks lists */
#define RT_CONFIG_ALIASES_MAX 256        /* model_group_alias entries */
#define RT_CONFIG_STATIC_KEYS_MAX 1024   /* tollgate.keys entries */
#define RT_CONFIG_WARNINGS_MAX 32        /* warnings kept in rt_config_diag (rest counted) */
#define RT_CONFIG_MSG_CAP 512            /* one diagnostic line, bytes incl. NUL */

/* Static/API key field bounds (struct rt_key_spec). */
#define RT_KEY_MODELS_MAX 32           /* entries in a key's models allowlist */
#define RT_KEY_MODEL_LIMITS_MAX 16     /* groups in model_rpm_limit + model_tpm_limit */
#define RT_KEY_FALLBACK_RULES_MAX 4    /* key router_settings.fallbacks entries */
#define RT_KEY_ALIASES_MAX 8           /* key router_settings.model_group_alias entries */
#define RT_KEY_TAGS_MAX PROTO_TAGS_MAX /* metadata.tags */
#define RT_KEY_EXTRA_MAX_BYTES 16384   /* LiteLLM fields stored, not acted on (key_extra.h),
                                        * as compact JSON text */

/* Defaults (LiteLLM's where LiteLLM has one). */
#define RT_DEFAULT_TIMEOUT_MS 600000u /* litellm_params.timeout / router_settings.timeout */
#define RT_DEFAULT_NUM_RETRIES 2
#define RT_DEFAULT_ALLOWED_FAILS 3
#define RT_DEFAULT_COOLDOWN_S 5
#define RT_DEFAULT_LISTEN "0.0.0.0:4000"
#define RT_DEFAULT_SPOOL_MAX_BYTES (1024ull * 1024ull * 1024ull)
#define RT_DEFAULT_MAX_BODY_BYTES (10ull * 1024ull * 1024ull)
#define RT_DEFAULT_MAX_CONNECTIONS 10000u
#define RT_DEFAULT_MAX_IN_FLIGHT 4096u
#define RT_DEFAULT_MAX_RESPONSE_BYTES (64ull * 1024ull * 1024ull)
#define RT_DEFAULT_THREADS 2u
#define RT_DEFAULT_MAX_KEYS 100000u            /* virtual keys table capacity */
#define RT_DEFAULT_MAX_TEAMS 10000u            /* teams table capacity */
#define RT_DEFAULT_LIMITER_KEYS 10000u         /* limiter slots for keys / key+group pairs */
#define RT_DEFAULT_HEADER_TIMEOUT_MS 10000u    /* limits.header_timeout_ms */
#define RT_DEFAULT_BODY_TIMEOUT_MS 60000u      /* limits.body_timeout_ms (nginx's) */
#define RT_DEFAULT_BODY_MIN_RATE 1024u         /* limits.body_min_rate, bytes/s */
#define RT_DEFAULT_KEEPALIVE_TIMEOUT_MS 75000u /* limits.keepalive_timeout_ms (nginx's) */
#define RT_DEFAULT_SEND_TIMEOUT_MS 60000u      /* limits.send_timeout_ms (nginx's) */
#define RT_DEFAULT_MAX_JSON_DEPTH 64u          /* limits.max_json_depth */
#define RT_DEFAULT_MAX_JSON_ELEMENTS 200000u   /* limits.max_json_elements */
#define RT_DEFAULT_EVENTS_TOPIC "tollgate.events.v1"
#define RT_DEFAULT_CONTROL_TOPIC "tollgate.control.v1"

/* tollgate.redis: the off-path exchange of limiter counts between replicas (limsync.h). */
#define RT_DEFAULT_REDIS_SYNC_INTERVAL_MS 100u
#define RT_DEFAULT_REDIS_TIMEOUT_MS 200u
#define RT_DEFAULT_REDIS_SYNC_SUBJECTS 4096u
#define RT_REDIS_HOST_CAP 256

struct rt_redis_conf {
    int enabled;                     /* a Redis was configured (tollgate.redis.url, or LiteLLM's
                                      * router_settings.redis_host / REDIS_HOST) */
    char host[RT_REDIS_HOST_CAP];
    int port;
    int db;
    int tls;                         /* rediss:// */
    char username[128];              /* ACL user, "" = password only */
    char password[RT_SECRET_CAP];    /* "" = no AUTH. Secret. */
    char ca_file[RT_PATH_CAP];       /* tls.ca_file, "" = the system store */
    char cert_file[RT_PATH_CAP];     /* tls.cert_file + key_file, "" = none */
    char key_file[RT_PATH_CAP];
    char server_name[RT_REDIS_HOST_CAP]; /* tls.server_name, "" = host */
    uint32_t timeout_ms;             /* connect and each round's exchange */
    uint32_t sync_interval_ms;       /* one exchange every this many ms (default 100) */
    uint32_t sync_subjects_max;      /* subjects exchanged per round */
};

/* "no limit" for the optional rate limits below (rpm, tpm, rpm_limit, ...). */
#define RT_LIMIT_NONE (-1)

enum rt_strategy {
    RT_STRATEGY_SIMPLE_SHUFFLE = 0, /* "simple-shuffle" (default): weighted random */
    RT_STRATEGY_LEAST_BUSY = 1,     /* "least-busy": fewest in-flight attempts */
    RT_STRATEGY_LATENCY = 2,        /* "latency-based-routing": lowest latency EWMA */
};

/* One model_list entry. */
struct rt_provider; /* providers/provider.h */

/* Provider-specific litellm_params (cloud authentication and addressing; LiteLLM's names),
 * allocated for a deployment that gives at least one of them, NULL otherwise. Which family reads
 * which: the params list of its row (providers/provider.h); given to another family a value is
 * ignored with a warning. "" when absent. Secrets: never log them. */
struct rt_dep_cloud {
    char api_version[RT_CLOUD_ID_CAP];         /* azure, azure_ai: the api-version query */
    char azure_ad_token[RT_TOKEN_CAP];         /* azure: a Microsoft Entra ID token (secret) */
    char tenant_id[RT_CLOUD_ID_CAP];           /* azure: Entra ID client credentials: tenant, */
    char client_id[RT_CLOUD_ID_CAP];           /* application (client) id */
    char client_secret[RT_SECRET_CAP];         /* and its secret (secret) */
    char azure_scope[RT_URL_CAP];              /* the token's scope (azure.c has the default) */
    char azure_authority_host[RT_URL_CAP];     /* the token endpoint's host (azure.c's default) */
    char vertex_project[RT_CLOUD_ID_CAP];      /* vertex_ai: project (default: the credentials') */
    char vertex_location[RT_CLOUD_ID_CAP];     /* vertex_ai: region, default us-central1 */
    char vertex_credentials[RT_CREDS_RAW_CAP]; /* vertex_ai: service-account JSON or its path;
                                                * read at load (google.c) into the sa_ fields,
                                                * then wiped */
    char sa_client_email[RT_CLOUD_ID_CAP];     /* from the credentials */
    char sa_private_key_id[RT_CLOUD_ID_CAP];
    char sa_private_key[RT_SA_KEY_CAP]; /* PEM (secret) */
    char sa_token_uri[RT_URL_CAP];
    char aws_access_key_id[RT_CLOUD_ID_CAP];       /* bedrock: static credentials ... */
    char aws_secret_access_key[RT_SECRET_CAP];     /* (secret) */
    char aws_session_token[RT_TOKEN_CAP];          /* (secret), optional */
    char aws_region_name[RT_CLOUD_ID_CAP];         /* bedrock: region */
    char aws_bedrock_runtime_endpoint[RT_URL_CAP]; /* bedrock: endpoint (VPC, proxy) */
    char aws_role_name[RT_URL_CAP];                /* bedrock: role for a web identity ... */
    char aws_session_name[RT_CLOUD_ID_CAP];
    char aws_web_identity_token[RT_TOKEN_CAP];     /* ... the token itself (secret) */
    char aws_web_identity_token_file[RT_PATH_CAP]; /* ... or its file (IRSA), read at each
                                                    * renewal */
    char aws_sts_endpoint[RT_URL_CAP];             /* default https://sts.{region}.amazonaws.com */
    int aws_env_credentials;                       /* 1: the credentials came from AWS_* */
};

struct rt_deployment_conf {
    char id[RT_ID_CAP];             /* model_info.id, or generated "<group>-<index>" (index in
                                     * model_list, 0-based) when absent: stable across reloads of
                                     * the same file */
    char group[RT_NAME_CAP];        /* model_name */
    char provider[RT_PROVIDER_CAP]; /* prefix of litellm_params.model as written ("openai",
                                     * "anthropic", "groq", ...); without a prefix "openai"
                                     * ("anthropic" for claude-*, as LiteLLM infers it) */
    int provider_implicit;          /* 1: the model had no prefix */
    const struct rt_provider *prov; /* the provider family of the prefix (providers/provider.h);
                                     * an unknown prefix with api_base: OpenAI-compatible */
    char model[RT_NAME_CAP];        /* litellm_params.model after the prefix */
    char api_base[RT_URL_CAP];      /* the base URL, resolved at load (provider.h): api_base, a
                                     * provider variable, or the provider's default; no trailing
                                     * slash */
    char api_key[RT_SECRET_CAP];    /* secret; api_key or (provider.h's rules) the provider's
                                     * key variable; "" when none. Never log it. */
    struct rt_dep_cloud *cloud;     /* owned; NULL when no provider-specific param is given */
    int ssl_verify;                 /* litellm_params.ssl_verify, else litellm_settings.ssl_verify:
                                     * 1 (default) the provider's certificate is verified (libcurl
                                     * path: https), 0 it is not (ssl_verify: false) */
    int ssl_verify_set;             /* 1: the deployment gave ssl_verify (it wins) */
    char ssl_ca_file[RT_PATH_CAP];  /* ssl_verify: PATH: the CA bundle the certificate is verified
                                     * with, alone; "" = SSL_CERT_FILE, else the system's */
    int64_t rpm;                    /* requests per minute, RT_LIMIT_NONE when absent */
    int64_t tpm;                    /* tokens per minute, RT_LIMIT_NONE when absent */
    uint32_t timeout_ms;            /* litellm_params.timeout (s, may be fractional), else
                                     * router_settings.timeout, else RT_DEFAULT_TIMEOUT_MS */
    uint32_t stream_timeout_ms;     /* litellm_params.stream_timeout, else timeout_ms */
    uint32_t weight;                /* simple-shuffle weight, default 1 (0 = never chosen unless
                                     * every healthy deployment has weight 0) */
    int32_t order;                  /* litellm "order": lower is tried first; 0 = unset (last) */
    int responses_native;           /* model_info.supported_endpoints lists /v1/responses: a
                                     * named OpenAI-compatible provider gets /v1/responses as
                                     * sent, not bridged through chat (LiteLLM's opt-in) */
    char base_model[RT_NAME_CAP];   /* model_info.base_model: the name its prices are looked
                                     * up by ("provider/model" or "model"); "" = the model */
    struct rt_model_price price;    /* its prices (prices.h): its own (litellm_params over
                                     * model_info) when it gives any, else its price map
                                     * entry's; RT_PRICE_NONE where none is given */
    int priced;                     /* 1 when an input or output price is known */
    char price_source[RT_NAME_CAP + 16]; /* where: "litellm_params", "model_info" or the price
                                          * map's model name; "" when unpriced */
    uint32_t line;                       /* line of the entry in the file (for diagnostics) */
};

/* A fallback list entry: {group: [targets...]}. */
struct rt_fallback_rule {
    char group[RT_NAME_CAP];
    uint32_t n_targets;
    char targets[RT_FALLBACK_TARGETS_MAX][RT_NAME_CAP];
};

/* A model_group_alias entry: alias -> group (both forms: `a: g` and `a: {model: g, hidden:}`).*/
struct rt_alias_rule {
    char alias[RT_NAME_CAP];
    char group[RT_NAME_CAP];
    int hidden; /* 1: not listed by /v1/models */
};

/* Per key, per model group limits (model_rpm_limit / model_tpm_limit merged by group). */
struct rt_key_model_limit {
    char group[RT_NAME_CAP];
    int64_t rpm; /* RT_LIMIT_NONE when not given */
    int64_t tpm; /* RT_LIMIT_NONE when not given */
};

/* A virtual key's fields, as given in tollgate.keys or to the key API. Fixed-size (about 31 KB):
 * allocate it on the heap or in static storage, not on a small stack. The keys table stores a
 * compact copy (keys.h); the key itself is kept only as its SHA-256 hash. */
struct rt_key_spec {
    char key_hash[TG_SHA256_HEX_LEN + 1]; /* SHA-256 hex of the bearer token */
    char key_alias[RT_ID_CAP];            /* "" when none */
    char team_id[RT_ID_CAP];              /* "" when none */
    char user_id[RT_ID_CAP];              /* "" when none */
    uint32_t n_models;                    /* 0 = every model group and alias allowed */
    char models[RT_KEY_MODELS_MAX][RT_NAME_CAP];
    int64_t max_budget_nusd;       /* max_budget (USD) in nano-USD, RT_LIMIT_NONE */
    int64_t budget_duration_s;     /* "30d", "1h", "10m", "45s" -> seconds; 0 = none */
    int64_t rpm_limit;             /* RT_LIMIT_NONE when absent */
    int64_t tpm_limit;             /* RT_LIMIT_NONE when absent */
    int64_t max_parallel_requests; /* RT_LIMIT_NONE when absent */
    uint32_t n_model_limits;
    struct rt_key_model_limit model_limits[RT_KEY_MODEL_LIMITS_MAX];
    int disable_fallbacks; /* metadata.disable_fallbacks */
    uint32_t n_tags;       /* metadata.tags */
    char tags[RT_KEY_TAGS_MAX][RT_TAG_CAP];
    /* router_settings (key level). LiteLLM semantic for fallbacks: has_fallbacks = 0 when the
     * field is absent or null (the global list applies); has_fallbacks = 1 with n_fallbacks = 0
     * for `fallbacks: []` (no fallbacks at all for this key). */
    int has_fallbacks;
    uint32_t n_fallbacks;
    struct rt_fallback_rule fallbacks[RT_KEY_FALLBACK_RULES_MAX];
    uint32_t n_aliases;
    struct rt_alias_rule aliases[RT_KEY_ALIASES_MAX];
    int32_t num_retries;      /* -1 = the global num_retries */
    int64_t expires_epoch_ms; /* 0 = never (key API "duration"); checked by the
                               * caller of rt_keys_lookup, not by the table */
    int blocked;              /* 1: budget exceeded; requests get 429 */
    int admin_blocked;        /* 1: blocked by an admin (/key/block, LiteLLM's "blocked");
                               * requests get 401 until /key/unblock */
    /* LiteLLM's key fields Tollgate stores and returns without acting on them (key_extra.h):
     * a compact JSON object, members in name order, at most RT_KEY_EXTRA_MAX_BYTES bytes; ""
     * when there are none. Never read on the request path. */
    char extra[RT_KEY_EXTRA_MAX_BYTES + 1];
};

enum rt_spool_full_policy {
    RT_SPOOL_FULL_DROP = 0,   /* "drop": drop the event, count it, answer the request */
    RT_SPOOL_FULL_REJECT = 1, /* "reject": answer 503 before calling a provider */
};

enum rt_spool_fsync {
    RT_SPOOL_FSYNC_NONE = 0,     /* "none" */
    RT_SPOOL_FSYNC_INTERVAL = 1, /* an integer: fsync every fsync_interval_ms */
};

struct rt_config {
    char path[RT_PATH_CAP]; /* file name as given to the loader (for messages) */

    /* model_list, in file order. */
    uint32_t n_deployments;
    struct rt_deployment_conf *deployments; /* owned array of n_deployments */

    /* router_settings */
    enum rt_strategy routing_strategy;
    int32_t num_retries;               /* default RT_DEFAULT_NUM_RETRIES */
    uint32_t retry_after_s;            /* minimum wait before a retry (LiteLLM retry_after);
                                        * the router reports it, the I/O side may honour it */
    uint32_t allowed_fails;            /* default RT_DEFAULT_ALLOWED_FAILS */
    uint32_t cooldown_s;               /* cooldown_time (s), default 5; 0 = never */
    uint32_t timeout_ms;               /* router_settings.timeout, default RT_DEFAULT_TIMEOUT_MS */
    int enforce_fallback_model_access; /* default 1 */
    int enable_pre_call_checks;        /* skip deployments whose max_input_tokens the request
                                        * exceeds, before sending (default 0) */
    uint32_t n_fallbacks;
    struct rt_fallback_rule *fallbacks; /* owned, n_fallbacks */
    uint32_t n_cw_fallbacks;
    struct rt_fallback_rule *cw_fallbacks; /* context_window_fallbacks, owned */
    uint32_t n_cp_fallbacks;
    struct rt_fallback_rule *cp_fallbacks; /* content_policy_fallbacks, owned */
    uint32_t n_default_fallbacks;
    char default_fallbacks[RT_FALLBACK_TARGETS_MAX][RT_NAME_CAP];
    uint32_t n_aliases;
    struct rt_alias_rule *aliases; /* model_group_alias, owned */

    /* litellm_settings.ssl_verify: the default of every deployment (see rt_deployment_conf) */
    int ssl_verify;                /* default 1 */
    char ssl_ca_file[RT_PATH_CAP]; /* "" unless ssl_verify is a path */

    /* general_settings */
    char master_key[RT_SECRET_CAP]; /* "" when absent (admin API disabled). Secret. */

    /* tollgate: */
    char listen[RT_LISTEN_CAP];                  /* "host:port", default RT_DEFAULT_LISTEN */
    char timezone[72]; /* litellm_settings.timezone: budget periods (tg_period.h), "" = UTC */
    char admin_listen[RT_LISTEN_CAP];            /* "host:port" of the admin listener (/metrics,
                                                  * the key API); "" = none: they are served on
                                                  * listen */
    char kafka_brokers[RT_BROKERS_CAP];          /* "" when absent (events stay in the spool) */
    char events_topic[RT_TOPIC_CAP];             /* default RT_DEFAULT_EVENTS_TOPIC */
    uint32_t events_per_record;                  /* kafka.events_per_record, 1..64 (default 1) */
    char control_topic[RT_TOPIC_CAP];            /* default RT_DEFAULT_CONTROL_TOPIC */
    struct tg_kafka_opts kafka_opts;             /* kafka security_protocol, sasl, ssl and
                                                  * librdkafka (tg_kafka_opts.h); secrets */
    char spool_dir[RT_PATH_CAP];                 /* "" when absent */
    uint64_t spool_max_bytes;                    /* default RT_DEFAULT_SPOOL_MAX_BYTES */
    uint64_t spool_segment_bytes;                /* 0: 64 MiB, or max_bytes / 8 when smaller */
    enum rt_spool_full_policy spool_full_policy; /* default drop */
    enum rt_spool_fsync spool_fsync;             /* default none */
    uint32_t spool_fsync_interval_ms;            /* when spool_fsync == RT_SPOOL_FSYNC_INTERVAL */
    uint64_t max_body_bytes;                     /* limits.max_body_bytes */
    uint32_t max_connections;                    /* limits.max_connections */
    uint32_t max_in_flight;                      /* limits.max_in_flight */
    uint64_t max_response_bytes;                 /* limits.max_response_bytes */
    uint32_t max_keys;                           /* limits.max_keys: virtual keys table capacity */
    uint32_t max_teams;                          /* limits.max_teams: teams table capacity */
    uint32_t limiter_keys;                       /* limits.limiter_keys: limiter slots for keys and
                                                  * key+group pairs (default RT_DEFAULT_LIMITER_KEYS) */
    uint32_t max_connections_per_ip;             /* limits.max_connections_per_ip, default
                                                  * max_connections (no cap of its own) */
    uint32_t header_timeout_ms;                  /* limits.header_timeout_ms */
    uint32_t body_timeout_ms;                    /* limits.body_timeout_ms */
    uint32_t body_min_rate;                      /* limits.body_min_rate, bytes/s */
    uint32_t keepalive_timeout_ms;               /* limits.keepalive_timeout_ms */
    uint32_t send_timeout_ms;                    /* limits.send_timeout_ms */
    uint32_t max_json_depth;                     /* limits.max_json_depth: nesting of a request
                                                  * body the full JSON parser takes */
    uint32_t max_json_elements;                  /* limits.max_json_elements: its values */
    char price_map[RT_PATH_CAP];                 /* tollgate.price_map as written, "" = none */
    int allow_unauthenticated;                   /* tollgate.allow_unauthenticated: requests
                                                  * without a key are served (open mode); only
                                                  * when set explicitly */
    uint32_t threads;                            /* default RT_DEFAULT_THREADS */
    int upstream_native;                         /* upstream_client: native (1, default) or
                                                  * curl (0): plain http:// providers at a
                                                  * literal address skip libcurl */
    struct rt_redis_conf redis;                  /* tollgate.redis (limits across replicas) */
    uint32_t n_keys;
    struct rt_key_spec *keys; /* static keys, owned, n_keys */
};

/* Diagnostics of one load. Caller storage (about 17 KB). */
struct rt_config_diag {
    char error[RT_CONFIG_MSG_CAP]; /* first error, "" when the load succeeded */
    uint32_t n_warnings;           /* entries used in warnings[] */
    uint32_t warnings_dropped;     /* warnings beyond RT_CONFIG_WARNINGS_MAX (counted only) */
    char warnings[RT_CONFIG_WARNINGS_MAX][RT_CONFIG_MSG_CAP];
};

/* rt_config_load_file: read and validate the YAML file at path.
 * Returns a new config (caller destroys with rt_config_destroy), or NULL with diag->error set.
 * diag (caller storage, required) also receives the warnings; each warning is logged with
 * TG_WARN too. Reads environment variables for os.environ/NAME values. Main thread. */
struct rt_config *rt_config_load_file(const char *path, struct rt_config_diag *diag);

/* rt_config_load_buffer: the same from memory; name is used as FILE in diagnostics (borrowed,
 * copied). data need not be NUL-terminated. */
struct rt_config *rt_config_load_buffer(const char *name, const char *data, size_t len,
                                        struct rt_config_diag *diag);

/* rt_config_destroy: free a config and set *cfg to NULL. Accepts NULL and *cfg == NULL. */
void rt_config_destroy(struct rt_config **cfg);

/* rt_config_check_auth: fail closed. A config with no master key and no static key would serve
 * every request without authentication (virtual keys can only be added with the master key):
 * that is refused unless tollgate.allow_unauthenticated says so by name. Returns 0, or
 * TG_ECONFIG with "FILE: key: problem" in err. main calls it before serving and in --check. */
int rt_config_check_auth(const struct rt_config *cfg, char *err, size_t errlen);

/* rt_config_find_deployment: index of the deployment with model_info.id == id, or -1.
 * Borrowed config; any thread. */
int rt_config_find_deployment(const struct rt_config *cfg, const char *id);

/* rt_config_has_group: 1 when some deployment has model_name == group. Any thread. */
int rt_config_has_group(const struct rt_config *cfg, const char *group);

/* rt_config_secrets: borrowed pointers to every non-empty secret in the config (provider
 * api_keys, azure_ad_token and client_secret values, master_key, the Kafka secrets,
 * tollgate.redis.password) written into out[0..cap-1];
 * returns how many there are (may exceed cap: then only cap were written). For rt_mask_create().
 * Valid while cfg lives. */
size_t rt_config_secrets(const struct rt_config *cfg, const char **out, size_t cap);

#endif
