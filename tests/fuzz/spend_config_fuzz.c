/* libFuzzer target for spend-svc's configuration loader (spend-svc/src/config.h), with the
 * alerter's `alerting:` section parser plugged in as spend-svc's main does.
 *
 * The input is loaded twice: from memory (sp_config_load_buffer) and from a file holding the
 * same bytes (sp_config_load on a memfd, through /proc/self/fd), named alike.
 * os.environ/NAME values read the environment: LLVMFuzzerInitialize empties it and sets the few
 * variables the seeds use, so every run of an input sees the same values.
 *
 * Properties (abort on violation):
 *  - both loads give the same answer, the same message and the same configuration (alerting
 *    section included);
 *  - the answer is 0 or TG_ECONFIG (TG_ENOMEM aside) and an error reads "FILE:LINE: ..." with
 *    the name given;
 *  - a loaded configuration keeps config.h's promises: strings terminated inside their fields,
 *    every number inside the range its key accepts, thresholds ascending (1..8 of them), teams
 *    within SP_CONFIG_TEAMS_MAX with an id, a positive budget and a period, a Postgres DSN,
 *    Kafka properties within their bounds;
 *  - the alerting section, when accepted, leaves the alerter's documented bounds. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "alerter.h"
#include "config.h"
#include "tg_err.h"
#include "tg_log.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const fuzz_env[][2] = {
    {"TG_FUZZ_DSN", "postgres://tollgate:secret@127.0.0.1:5432/tollgate"},
    {"TG_FUZZ_BROKERS", "127.0.0.1:19092,127.0.0.1:19093"},
    {"TG_FUZZ_WEBHOOK", "https://hooks.slack.com/services/T000/B000/XXXX"},
    {"TG_FUZZ_EMPTY", ""},
};

static int memfd = -1;
static char memfd_path[64];

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
    tg_log_set_level(TG_LOG_OFF);
    memfd = memfd_create("spend_config_fuzz", MFD_CLOEXEC);
    if (memfd < 0)
        abort();
    snprintf(memfd_path, sizeof(memfd_path), "/proc/self/fd/%d", memfd);
    return 0;
}

static void fail(const char *what, const char *detail)
{
    fprintf(stderr, "spend_config_fuzz: %s%s%s\n", what, detail != NULL ? ": " : "",
            detail != NULL ? detail : "");
    abort();
}

static void check(int ok, const char *what, const char *detail)
{
    if (!ok)
        fail(what, detail);
}

static int str_in(const char *s, size_t cap)
{
    return strnlen(s, cap) < cap;
}

static int in(int v, int lo, int hi)
{
    return v >= lo && v <= hi;
}

/* The alerting hook: the alerter's own parser, its result checked when it accepts. */
static int alerting(void *ctx, struct tg_yaml *y, const struct yaml_node_s *node)
{
    struct sp_alerter_config *ac = ctx;
    int rc;

    sp_alerter_config_defaults(ac);
    rc = sp_alerter_config_parse(y, node, ac);
    check(rc == 0 || rc == TG_ECONFIG, "alerting: return code outside the contract", NULL);
    if (rc != 0)
        return rc;
    check(str_in(ac->default_webhook_url, SP_ALERTER_URL_CAP), "alerting: URL over its field",
          NULL);
    for (int t = 0; t < SP_ALERT_TYPE_COUNT; t++)
        check(str_in(ac->type_webhook_url[t], SP_ALERTER_URL_CAP), "alerting: URL over its field",
              NULL);
    check(ac->rate_per_second > 0 && ac->burst >= 1 && ac->reminder_interval_s >= 1 &&
              ac->queue_capacity >= 1 && ac->max_tries >= 1,
          "alerting: a delivery setting below its minimum", NULL);
    check(ac->failure_ratio > 0 && ac->failure_ratio <= 1, "alerting: failure_ratio out of range",
          NULL);
    check(ac->daily_report_hour >= -1 && ac->daily_report_hour <= 23,
          "alerting: daily_report_hour out of range", NULL);
    check(ac->nbudget_thresholds <= SP_ALERTER_BUDGET_THRESHOLDS_MAX,
          "alerting: too many budget thresholds", NULL);
    for (uint32_t i = 1; i < ac->nbudget_thresholds; i++)
        check(ac->budget_thresholds[i] > ac->budget_thresholds[i - 1],
              "alerting: budget thresholds not ascending", NULL);
    return 0;
}

static void check_config(const struct sp_config *c)
{
    check(str_in(c->file, sizeof(c->file)) && str_in(c->listen_host, sizeof(c->listen_host)) &&
              str_in(c->master_key, sizeof(c->master_key)) &&
              str_in(c->kafka_brokers, sizeof(c->kafka_brokers)) &&
              str_in(c->kafka_topic, sizeof(c->kafka_topic)) &&
              str_in(c->kafka_control_topic, sizeof(c->kafka_control_topic)) &&
              str_in(c->kafka_group_id, sizeof(c->kafka_group_id)) &&
              str_in(c->pg_dsn, sizeof(c->pg_dsn)) && str_in(c->redis_host, sizeof(c->redis_host)),
          "string over its field", NULL);
    check(c->pg_dsn[0] != '\0', "loaded without a Postgres DSN", NULL);
    check(c->kafka_brokers[0] != '\0' && c->kafka_topic[0] != '\0' &&
              c->kafka_group_id[0] != '\0' && c->redis_host[0] != '\0',
          "an empty broker list, topic, group or Redis host", NULL);
    check(in(c->listen_port, 0, 65535) && in(c->redis_port, 1, 65535) && in(c->redis_db, 0, 15),
          "port or database number out of range", NULL);
    check(in(c->kafka_session_timeout_ms, 1000, 300000) &&
              in(c->pg_query_timeout_ms, 100, 600000) && in(c->pg_retry_max_ms, 100, 600000) &&
              in(c->pg_writers, 1, SP_CONFIG_WRITERS_MAX) && in(c->redis_timeout_ms, 10, 60000) &&
              in(c->redis_pending_max, 16, 10000000) && in(c->redis_day_ttl_s, 60, 400 * 86400) &&
              in(c->batch_max_events, 1, 50000) && in(c->batch_max_wait_ms, 1, 60000) &&
              in(c->batch_max_bytes, 65536, 256 * 1024 * 1024) &&
              in(c->budget_check_interval_ms, 100, 3600000) && in(c->keys_max, 16, 10000000),
          "a number outside the range its key accepts", NULL);
    check(in(c->budget_thresholds_n, 1, SP_CONFIG_THRESHOLDS_MAX), "threshold count out of range",
          NULL);
    for (int i = 0; i < c->budget_thresholds_n; i++) {
        check(in(c->budget_thresholds[i], 1, 1000), "threshold out of range", NULL);
        check(i == 0 || c->budget_thresholds[i] > c->budget_thresholds[i - 1],
              "thresholds not ascending", NULL);
    }
    check(c->kafka_opts.n <= TG_KAFKA_OPTS_MAX && c->kafka_opts.text_used <= TG_KAFKA_OPT_TEXT_CAP,
          "kafka properties over their bounds", NULL);
    for (uint32_t i = 0; i < c->kafka_opts.n; i++)
        check(c->kafka_opts.opt[i].value_off < c->kafka_opts.text_used,
              "kafka property value outside its storage", c->kafka_opts.opt[i].name);
    check(in(c->teams_n, 0, SP_CONFIG_TEAMS_MAX), "team count out of range", NULL);
    for (int i = 0; i < c->teams_n; i++) {
        const struct sp_config_team *t = &c->teams[i];

        check(str_in(t->team_id, sizeof(t->team_id)) && t->team_id[0] != '\0', "team without an id",
              NULL);
        check(t->max_budget_nusd > 0, "team budget not positive", t->team_id);
        check(t->budget_period_s > 0, "team budget period not positive", t->team_id);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct sp_config from_buf, from_file; /* 70 KB each */
    static struct sp_alerter_config al_buf, al_file;
    char err_buf[512], err_file[512];
    int rc_buf, rc_file;
    size_t nl = strlen(memfd_path);

    err_buf[0] = err_file[0] = '\0';
    sp_alerter_config_defaults(&al_buf);
    sp_alerter_config_defaults(&al_file);
    rc_buf = sp_config_load_buffer(memfd_path, (const char *)data, size, &from_buf, alerting,
                                   &al_buf, err_buf, sizeof(err_buf));
    check(rc_buf == 0 || rc_buf == TG_ECONFIG, "return code outside the contract", err_buf);
    if (rc_buf != 0)
        check(strncmp(err_buf, memfd_path, nl) == 0 && err_buf[nl] == ':',
              "error does not name the file", err_buf);
    else
        check_config(&from_buf);

    check(ftruncate(memfd, 0) == 0 && pwrite(memfd, data, size, 0) == (ssize_t)size,
          "cannot write the memfd", NULL);
    rc_file =
        sp_config_load(memfd_path, &from_file, alerting, &al_file, err_file, sizeof(err_file));
    if (rc_file != rc_buf || (rc_buf != 0 && strcmp(err_buf, err_file) != 0)) {
        fprintf(stderr, "buffer: %d %s\nfile:   %d %s\n", rc_buf, err_buf, rc_file, err_file);
        fail("loading from memory and from a file disagree", NULL);
    }
    if (rc_buf == 0)
        check(memcmp(&from_buf, &from_file, sizeof(from_buf)) == 0 &&
                  memcmp(&al_buf, &al_file, sizeof(al_buf)) == 0,
              "loading from memory and from a file give different configurations", NULL);
    return 0;
}
