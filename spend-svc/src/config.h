/* config: spend-svc configuration from YAML, read through common's tg_yaml.
 *
 * Values of the form "os.environ/NAME" are read from the environment; a key given twice in one
 * mapping and a value with a control byte are refused. Every problem is reported as
 * "FILE:LINE: key: problem" (LINE is 1-based, 0 when the file itself is the problem). The
 * `alerting:` section is handed, unparsed, to a hook supplied by the caller (the alerter owns its
 * format). Every string lives in a fixed array: a value longer than its field is an error, never
 * a silent cut. */
#ifndef SP_CONFIG_H
#define SP_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "tg_kafka_opts.h"

#define SP_CONFIG_STR_MAX 256      /* bytes incl. NUL for names, hosts, topics */
#define SP_CONFIG_DSN_MAX 1024     /* bytes incl. NUL for the Postgres DSN and broker lists */
#define SP_CONFIG_THRESHOLDS_MAX 8 /* budget thresholds, percent */
#define SP_CONFIG_TEAMS_MAX 256    /* team budgets declared in the config */
#define SP_CONFIG_NAME_MAX 130     /* bytes incl. NUL of a team id (as SP_PG_SUBJECT_MAX) */
#define SP_CONFIG_WRITERS_MAX 8    /* postgres.writers: batches written at once, one connection each */
#define SP_CONFIG_FILE_MAX_BYTES (1024u * 1024u) /* a configuration file, bytes */
#define SP_CONFIG_PERIOD_MAX_S (INT64_MAX / 1000) /* longest budget period, s (its ms fit) */

struct tg_yaml;     /* tg_yaml.h */
struct yaml_node_s; /* libyaml's node (yaml.h stays in the modules that parse) */

/* A team budget declared in the config (key budgets come from the control topic). */
struct sp_config_team {
    char team_id[SP_CONFIG_NAME_MAX];
    int64_t max_budget_nusd;   /* budget in nano-USD */
    int64_t budget_period_s;   /* budget_duration in seconds */
};

struct sp_config {
    char file[SP_CONFIG_STR_MAX];            /* path it was loaded from */
    char listen_host[SP_CONFIG_STR_MAX];     /* admin HTTP bind address */
    int listen_port;                         /* admin HTTP port */
    char master_key[SP_CONFIG_STR_MAX];      /* "" disables the /spend endpoints (401) */
    char timezone[72];                       /* budget periods' zone (tg_period.h), "" = UTC */

    char kafka_brokers[SP_CONFIG_DSN_MAX];
    char kafka_topic[SP_CONFIG_STR_MAX];     /* events topic */
    char kafka_control_topic[SP_CONFIG_STR_MAX];
    char kafka_group_id[SP_CONFIG_STR_MAX];
    int kafka_session_timeout_ms;
    struct tg_kafka_opts kafka_opts;         /* security_protocol, sasl, ssl, librdkafka
                                              * (tg_kafka_opts.h); holds secrets */

    char pg_dsn[SP_CONFIG_DSN_MAX];
    int pg_query_timeout_ms;                 /* deadline of every query */
    int pg_retry_max_ms;                     /* cap of the exponential retry backoff */
    int pg_writers;                          /* lanes: connections writing batches at once */

    char redis_host[SP_CONFIG_STR_MAX];
    int redis_port;
    int redis_db;
    char redis_username[128];                /* ACL user ("" = password only, or no AUTH) */
    char redis_password[SP_CONFIG_STR_MAX];  /* "" = no AUTH; a secret, never logged */
    int redis_tls;                           /* rediss:// */
    char redis_ca_file[SP_CONFIG_STR_MAX];   /* redis.tls: "" = the system store */
    char redis_cert_file[SP_CONFIG_STR_MAX]; /* client certificate and key, "" = none */
    char redis_key_file[SP_CONFIG_STR_MAX];
    char redis_server_name[SP_CONFIG_STR_MAX]; /* "" = the URL's host */
    int redis_timeout_ms;                    /* connect and command timeout */
    int redis_pending_max;                   /* distinct counters kept while Redis is down */
    int redis_day_ttl_s;                     /* expiry of per-day counters */

    int batch_max_events;                    /* events per transaction */
    int batch_max_wait_ms;                   /* oldest event waits at most this long */
    int batch_max_bytes;                     /* encoded bytes per transaction */

    int budget_thresholds[SP_CONFIG_THRESHOLDS_MAX]; /* ascending percent, last is usually 100 */
    int budget_thresholds_n;
    int budget_check_interval_ms;            /* period roll-over check when idle */
    struct sp_config_team teams[SP_CONFIG_TEAMS_MAX];
    int teams_n;
    int keys_max;                            /* capacity of the api_keys mirror in memory */
};

/* Hook for the `alerting:` section: y is the document being loaded, node the section's value
 * (both borrowed for the call). Returns 0, or TG_ECONFIG after reporting the problem through
 * tg_yaml_fail (which puts it in the loader's err). */
typedef int (*sp_config_section_fn)(void *ctx, struct tg_yaml *y, const struct yaml_node_s *node);

/* sp_config_defaults: fill cfg with the documented defaults. Caller storage. */
void sp_config_defaults(struct sp_config *cfg);

/* sp_config_load: read and validate path into cfg (defaults first). When alerting_fn is not NULL
 * it is called with the `alerting:` node (or not at all when the section is absent).
 * Returns 0, or TG_ECONFIG with the "FILE:LINE: key: problem" text in err, or TG_EIO ("FILE:0:
 * cannot open: ...") when the file cannot be read or is over SP_CONFIG_FILE_MAX_BYTES.
 * Main thread, before any other thread starts. */
int sp_config_load(const char *path, struct sp_config *cfg, sp_config_section_fn alerting_fn,
                   void *alerting_ctx, char *err, size_t errlen);

/* sp_config_load_buffer: sp_config_load on the YAML text data[0..len) (need not be
 * NUL-terminated; NULL with len 0 is an empty document) instead of a file. name stands for the
 * file in cfg->file and in every message (borrowed for the call). Same returns, except TG_EIO.
 * Main thread, before any other thread starts. */
int sp_config_load_buffer(const char *name, const char *data, size_t len, struct sp_config *cfg,
                          sp_config_section_fn alerting_fn, void *alerting_ctx, char *err,
                          size_t errlen);

/* sp_config_parse_duration: a budget duration in the grammar both services share
 * (tg_parse_duration_s: "30d", "1mo", "1w", "12h", "15m", "45s", a bare number of seconds) to
 * seconds, 1 .. SP_CONFIG_PERIOD_MAX_S (the rule of budgets.teams[].budget_duration too).
 * Returns 0 and *out_s, or TG_EINVAL. */
int sp_config_parse_duration(const char *s, int64_t *out_s);

/* sp_config_parse_usd: "12.5", "5e-3" (USD in the grammar both services share, tg_units.h,
 * rounded half up to the nano-USD) to nano-USD. Returns 0 or TG_EINVAL (also
 * for an amount above INT64_MAX nano-USD, about 9.2e9 USD). */
int sp_config_parse_usd(const char *s, int64_t *out_nusd);

#endif
