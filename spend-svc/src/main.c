/* spend-svc: consumes tollgate.events.v1 into Postgres exactly once per call id, keeps live
 * counters in Redis, checks budgets and serves the admin endpoints.
 *
 *   spend-svc --config FILE [--check]
 *
 * This file is the process: arguments, the configuration, the modules created in order (the
 * consumer pipeline of pipeline.h, the admin endpoints, the alerter, the schema, budgets, the
 * Redis sink, the Kafka consumer), the alerting and budget hooks, signals and the teardown.
 * The main thread runs the pipeline's consumer loop.
 * SIGTERM/SIGINT: the current batch is committed, the consumer leaves its group, exit 0. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "admin_http.h"
#include "budgets.h"
#include "config.h"
#include "consumer.h"
#include "pg_sink.h"
#include "pipeline.h"
#include "redis_sink.h"
#include "tg_err.h"
#include "tg_kafka_topics.h"
#include "tg_log.h"
#include "tg_period.h"
#include "tg_time.h"

#include "alerter.h"

#define SP_SHUTDOWN_FLUSH_MS 10000   /* time allowed to commit the last batch at SIGTERM */
#define SP_PUBLISH_TIMEOUT_MS 5000   /* acks=all wait for a block record */

struct app {
    struct sp_config cfg;
    struct sp_pg *pg;                 /* consumer thread's own: offsets, keys, budgets, reports */
    struct sp_pipeline *pipe;         /* the consumer loop: lanes, batches, retries */
    struct sp_consumer *consumer;
    struct sp_redis_sink *redis;
    struct sp_budgets *budgets;
    struct sp_admin_http *admin;
    struct sp_alerter *alerter;
    struct sp_alerter_config alert_cfg;
    int kafka_seen;                   /* Kafka was reachable at least once */
    struct tg_topics_watch *topics;   /* the start-up topic check */
    pthread_mutex_t topics_mu;        /* guards the two below (the watch's thread writes) */
    int topics_state;                 /* 0 not checked yet, 1 as expected, 2 a problem */
    char topics_problem[SP_ADMIN_REASON_CAP];
};

static volatile sig_atomic_t sp_stop;

static void on_signal(int sig)
{
    (void)sig;
    sp_stop = 1;
}

/* Alert seam ------------------------------------------------------------------------------------ */

static void on_crossing(void *ctx, const struct sp_budget_crossing *c)
{
    struct app *a = ctx;
    struct sp_alert al;
    char subject[SP_ALERT_SUBJECT_CAP];
    char summary[SP_ALERT_SUMMARY_CAP];

    snprintf(subject, sizeof(subject), "%s %.64s budget %d%%", c->kind, c->name,
             c->threshold_pct);
    snprintf(summary, sizeof(summary), "%s %.64s reached %d%% of its budget", c->kind, c->name,
             c->threshold_pct);
    sp_alert_init(&al, SP_ALERT_BUDGET,
                  c->threshold_pct >= 100 ? SP_ALERT_CRITICAL : SP_ALERT_WARNING, subject,
                  summary);
    sp_alert_add_field(&al, "scope", c->kind);
    sp_alert_add_field(&al, "name", c->name);
    sp_alert_add_fieldf(&al, "threshold", "%d%%", c->threshold_pct);
    sp_alert_add_fieldf(&al, "spend_usd", "%.6f", (double)c->spend_nusd / 1e9);
    sp_alert_add_fieldf(&al, "max_budget_usd", "%.6f", (double)c->max_budget_nusd / 1e9);
    sp_alert_add_fieldf(&al, "period_start_ms", "%" PRId64, c->period_start_ms);
    sp_alert_add_fieldf(&al, "period_end_ms", "%" PRId64, c->period_end_ms);
    if (a->alerter)
        sp_alerter_raise(a->alerter, &al);
    TG_INFO("msg=\"budget threshold reached\" scope=%s threshold_pct=%d spend_nusd=%" PRId64
            " max_budget_nusd=%" PRId64,
            c->kind, c->threshold_pct, c->spend_nusd, c->max_budget_nusd);
}

static void report_dependencies(struct app *a)
{
    uint64_t now = tg_now_mono_ms();
    if (!a->alerter)
        return;
    sp_alerter_dependency_state(a->alerter, "postgres", sp_pipeline_postgres_up(a->pipe), now);
    if (a->redis)
        sp_alerter_dependency_state(a->alerter, "redis", sp_redis_sink_is_up(a->redis), now);
    if (a->consumer) {
        /* Kafka counts as down only once it has been up: not while the first connection and
         * group join are still in progress */
        int up = sp_consumer_kafka_up(a->consumer);
        a->kafka_seen |= up;
        if (a->kafka_seen)
            sp_alerter_dependency_state(a->alerter, "kafka", up, now);
        sp_alerter_consumer_lag(a->alerter, sp_consumer_total_lag(a->consumer), now);
    }
}

/* Daily report: top keys, teams and model groups of the previous UTC day, from spend_daily. */
struct report_rows {
    struct sp_report_row rows[SP_ALERTER_REPORT_ROWS_MAX];
    size_t n;
};

static void report_row(void *ctx, const char *dim, const char *name, const struct sp_pg_totals *t)
{
    struct report_rows *rr = ctx;
    struct sp_report_row *row;

    if (rr->n >= SP_ALERTER_REPORT_ROWS_MAX)
        return;
    row = &rr->rows[rr->n++];
    memset(row, 0, sizeof(*row));
    snprintf(row->dimension, sizeof(row->dimension), "%s", dim);
    snprintf(row->name, sizeof(row->name), "%.63s", name);
    row->cost_nusd = t->cost_nusd;
    row->requests = t->requests;
    row->failures = t->failures;
    row->tokens = t->prompt_tokens;
}

static void daily_report(struct app *a)
{
    static struct report_rows rr;
    char day[11];
    int64_t cost = 0;
    int64_t requests = 0;

    if (!a->alerter || !sp_alerter_daily_report_due(a->alerter, tg_now_epoch_ms(), day))
        return;
    rr.n = 0;
    if (sp_pg_day_top(a->pg, day, SP_ALERTER_REPORT_ROWS_MAX / 3, report_row, &rr, &cost,
                      &requests) < 0) {
        TG_WARN("msg=\"daily report skipped: postgres unavailable\"");
        return;
    }
    sp_alerter_daily_report(a->alerter, day, cost, requests, rr.rows, rr.n);
}

static int publish_hook(void *ctx, const char *record_key, const char *value, size_t len)
{
    struct app *a = ctx;
    return sp_consumer_publish_control(a->consumer, record_key, value, len,
                                       SP_PUBLISH_TIMEOUT_MS);
}

/* Pipeline hooks: once a second the dependencies, each budget tick the daily report. */
static void lag_hook(void *ctx)
{
    report_dependencies(ctx);
}

static void tick_hook(void *ctx)
{
    daily_report(ctx);
}

/* Topics ------------------------------------------------------------------------------------------ */

static void on_topics(void *ud, int rc, const char *report, const char *problem)
{
    struct app *a = ud;

    (void)report;
    pthread_mutex_lock(&a->topics_mu);
    a->topics_state = rc != 0 ? 0 : problem[0] == '\0' ? 1 : 2;
    snprintf(a->topics_problem, sizeof(a->topics_problem), "%s", rc == 0 ? problem : "");
    pthread_mutex_unlock(&a->topics_mu);
}

/* Admin hooks ----------------------------------------------------------------------------------------- */

static void status_hook(void *ctx, struct sp_admin_status *out)
{
    struct app *a = ctx;
    out->postgres_up = sp_pipeline_postgres_up(a->pipe);
    out->kafka_up = a->consumer ? sp_consumer_kafka_up(a->consumer) : 0;
    if (a->consumer != NULL && !out->kafka_up)
        sp_consumer_kafka_reason(a->consumer, out->kafka_reason, sizeof(out->kafka_reason));
    out->redis_up = a->redis ? sp_redis_sink_is_up(a->redis) : 0;
    if (a->redis != NULL && !out->redis_up)
        sp_redis_sink_reason(a->redis, out->redis_reason, sizeof(out->redis_reason));
    out->control_caught_up = a->consumer ? sp_consumer_control_caught_up(a->consumer) : 0;
    pthread_mutex_lock(&a->topics_mu);
    out->topics_state = a->topics_state;
    snprintf(out->topics_problem, sizeof(out->topics_problem), "%s", a->topics_problem);
    pthread_mutex_unlock(&a->topics_mu);
}

static void metrics_hook(void *ctx, struct tg_buf *b)
{
    struct app *a = ctx;

    sp_pipeline_write_metrics(a->pipe, b);
    if (a->consumer)
        sp_consumer_write_metrics(a->consumer, b);
    if (a->redis)
        sp_redis_sink_write_metrics(a->redis, b);
    if (a->budgets)
        sp_budgets_write_metrics(a->budgets, b);
    if (a->alerter)
        sp_alerter_write_metrics(a->alerter, b);
}

/* Main ------------------------------------------------------------------------------------------------ */

static int alerting_section(void *ctx, struct tg_yaml *y, const struct yaml_node_s *node)
{
    return sp_alerter_config_parse(y, node, ctx);
}

static void usage(void)
{
    fprintf(stderr, "usage: spend-svc --config FILE [--check]\n"
                    "       spend-svc --config FILE --create-topics [--partitions N]"
                    " [--replication-factor N]\n");
}

int main(int argc, char **argv)
{
    static struct app app; /* large; zero-initialised */
    struct app *a = &app;
    const char *config_path = NULL;
    int check = 0, taken;
    struct tg_topics_args topics_args;
    char err[1024];
    int exit_code = 1;
    struct sigaction sa;
    sp_config_section_fn alerting_fn = NULL;
    void *alerting_ctx = NULL;

    tg_topics_args_init(&topics_args);
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--config") == 0 && i + 1 < argc) {
            config_path = argv[++i];
        } else if (strcmp(argv[i], "--check") == 0) {
            check = 1;
        } else if ((taken = tg_topics_args_take(&topics_args, argc, argv, &i)) != 0) {
            if (taken < 0) {
                usage();
                return 2;
            }
        } else {
            usage();
            return 2;
        }
    }
    if (!config_path) {
        usage();
        return 2;
    }
    tg_log_init("spend-svc");
    sp_alerter_config_defaults(&a->alert_cfg);
    alerting_fn = alerting_section;
    alerting_ctx = &a->alert_cfg;
    if (sp_config_load(config_path, &a->cfg, alerting_fn, alerting_ctx, err, sizeof(err)) < 0) {
        fprintf(stderr, "%s\n", err);
        return 2;
    }
    if (check) {
        fprintf(stderr, "%s: ok\n", config_path);
        return 0;
    }
    if (topics_args.create) {
        struct tg_topic_want want[2];
        size_t n = tg_kafka_topics_tollgate(a->cfg.kafka_topic, a->cfg.kafka_control_topic,
                                            topics_args.partitions, topics_args.replication,
                                            want);

        return tg_kafka_topics_run_create(a->cfg.kafka_brokers, &a->cfg.kafka_opts, want, n,
                                          TG_TOPICS_CREATE_TIMEOUT_MS, stdout);
    }
    pthread_mutex_init(&a->topics_mu, NULL);
    /* the budget time zone, process-wide, before any thread starts (checked at load) */
    if (tg_period_set_tz(a->cfg.timezone, err, sizeof(err)) != 0) {
        fprintf(stderr, "%s: timezone: %s\n", config_path, err);
        return 2;
    }

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    a->pg = sp_pg_create(a->cfg.pg_dsn, a->cfg.pg_query_timeout_ms, err, sizeof(err));
    if (!a->pg)
        goto fail;
    a->pipe = sp_pipeline_create(&a->cfg, a->pg, err, sizeof(err));
    if (!a->pipe)
        goto fail;
    {
        struct sp_admin_hooks ah = {.status = status_hook, .metrics = metrics_hook, .ctx = a};
        a->admin = sp_admin_http_start(a->cfg.listen_host, a->cfg.listen_port, a->cfg.master_key,
                                       a->cfg.pg_dsn, a->cfg.pg_query_timeout_ms, &ah, err,
                                       sizeof(err));
        if (!a->admin)
            goto fail;
    }
    a->alerter = sp_alerter_create(&a->alert_cfg, err, sizeof(err));
    if (!a->alerter)
        goto fail;
    /* schema first: retried until it works or we are asked to stop */
    for (uint64_t backoff = SP_PIPELINE_RETRY_MIN_MS;;) {
        int rc = sp_pg_migrate(a->pg);
        if (rc == 0)
            break;
        TG_WARN_RL("msg=\"migrations not applied yet, retrying\" err=%s", tg_errname(rc));
        if (sp_stop) {
            exit_code = 0;
            goto out;
        }
        tg_sleep_ms(backoff);
        backoff = backoff * 2 > (uint64_t)a->cfg.pg_retry_max_ms
                      ? (uint64_t)a->cfg.pg_retry_max_ms
                      : backoff * 2;
    }
    sp_pipeline_schema_ready(a->pipe);
    {
        struct sp_budgets_hooks bh = {.crossing = on_crossing, .publish = publish_hook, .ctx = a};
        a->budgets = sp_budgets_create(&a->cfg, &bh, err, sizeof(err));
        if (!a->budgets)
            goto fail;
        if (sp_budgets_load_blocked(a->budgets, a->pg) < 0)
            TG_WARN("msg=\"could not load published blocks\"");
    }
    {
        struct sp_redis_sink_config rc = {
            .host = a->cfg.redis_host,
            .port = a->cfg.redis_port,
            .db = a->cfg.redis_db,
            .username = a->cfg.redis_username,
            .password = a->cfg.redis_password,
            .tls = a->cfg.redis_tls,
            .ca_file = a->cfg.redis_ca_file,
            .cert_file = a->cfg.redis_cert_file,
            .key_file = a->cfg.redis_key_file,
            .server_name = a->cfg.redis_server_name,
            .timeout_ms = a->cfg.redis_timeout_ms,
            .pending_max = a->cfg.redis_pending_max,
            .day_ttl_s = a->cfg.redis_day_ttl_s,
            .pg_dsn = a->cfg.pg_dsn,
            .topic = a->cfg.kafka_topic,
            .pg_timeout_ms = a->cfg.pg_query_timeout_ms,
            .periods = {.period_of = sp_budgets_period_of, .list = sp_budgets_list,
                        .ctx = a->budgets},
        };
        a->redis = sp_redis_sink_create(&rc, err, sizeof(err));
        if (!a->redis)
            goto fail;
    }
    {
        struct sp_consumer_hooks ch;

        sp_pipeline_consumer_hooks(a->pipe, &ch);
        a->consumer = sp_consumer_create(&a->cfg, &ch, err, sizeof(err));
        if (!a->consumer)
            goto fail;
    }
    {
        struct sp_pipeline_modules pm = {.consumer = a->consumer,
                                         .redis = a->redis,
                                         .budgets = a->budgets,
                                         .alerter = a->alerter};
        struct sp_pipeline_hooks ph = {.lag = lag_hook, .tick = tick_hook, .ctx = a};

        sp_pipeline_attach(a->pipe, &pm, &ph);
    }
    {
        char kdesc[128];

        /* the Kafka settings' kinds and count, never a value (secrets are among them) */
        TG_INFO("msg=\"spend-svc started\" port=%d batch_max_events=%d batch_max_wait_ms=%d "
                "writers=%d kafka=\"%s\"",
                a->cfg.listen_port, a->cfg.batch_max_events, a->cfg.batch_max_wait_ms,
                a->cfg.pg_writers,
                tg_kafka_opts_describe(&a->cfg.kafka_opts, kdesc, sizeof(kdesc)));
    }

    {
        struct tg_topic_want want[2];
        size_t n = tg_kafka_topics_tollgate(a->cfg.kafka_topic, a->cfg.kafka_control_topic,
                                            topics_args.partitions, topics_args.replication,
                                            want);

        a->topics = tg_topics_watch_start(a->cfg.kafka_brokers, &a->cfg.kafka_opts, want, n,
                                          on_topics, a, err, sizeof(err));
        if (a->topics == NULL)
            TG_WARN("msg=\"topic check not started\" reason=\"%s\"", err);
    }

    sp_pipeline_run(a->pipe, &sp_stop);

    TG_INFO("msg=\"shutting down\"");
    sp_pipeline_shutdown_flush(a->pipe, SP_SHUTDOWN_FLUSH_MS);
    sp_consumer_close(a->consumer);
    /* anything the revocation could not commit */
    sp_pipeline_shutdown_flush(a->pipe, SP_SHUTDOWN_FLUSH_MS);
    exit_code = 0;
    goto out;
fail:
    fprintf(stderr, "spend-svc: %s\n", err);
    TG_ERROR("msg=\"start failed\"");
out:
    tg_topics_watch_stop(&a->topics);
    sp_consumer_destroy(&a->consumer);
    sp_redis_sink_destroy(&a->redis);
    sp_admin_http_stop(&a->admin);
    sp_alerter_destroy(&a->alerter);
    sp_budgets_destroy(&a->budgets);
    sp_pipeline_destroy(&a->pipe);
    sp_pg_destroy(&a->pg);
    return exit_code;
}
