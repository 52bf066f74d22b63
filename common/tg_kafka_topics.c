/* tg_kafka_topics: see tg_kafka_topics.h. */
#include "tg_kafka_topics.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <librdkafka/rdkafka.h>

#include "tg_err.h"
#include "tg_kafka_opts.h"
#include "tg_log.h"
#include "tg_time.h"
#include "tg_units.h"

/* What the cluster says of one topic. */
struct topic_state {
    int exists;
    int partitions;
    int replication;
    char policy[64]; /* cleanup.policy, "" when not known */
};

/* appendf: append to buf (cap bytes) at *at, cut silently at the end. */
static void appendf(char *buf, size_t cap, size_t *at, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void appendf(char *buf, size_t cap, size_t *at, const char *fmt, ...)
{
    va_list ap;
    int n;

    if (*at >= cap)
        return;
    va_start(ap, fmt);
    n = vsnprintf(buf + *at, cap - *at, fmt, ap);
    va_end(ap);
    if (n > 0)
        *at = (size_t)n >= cap - *at ? cap - 1 : *at + (size_t)n;
}

void tg_topics_args_init(struct tg_topics_args *a)
{
    a->create = 0;
    a->partitions = TG_TOPICS_EVENTS_PARTITIONS;
    a->replication = TG_TOPICS_REPLICATION;
}

/* number: argv[*i + 1] as a whole number lo..hi into *out, *i moved past it. */
static int number(int argc, char **argv, int *i, uint64_t hi, int *out)
{
    uint64_t v = 0;

    if (*i + 1 >= argc || tg_parse_u64(argv[*i + 1], &v) != 0 || v < 1 || v > hi)
        return -1;
    *out = (int)v;
    (*i)++;
    return 1;
}

int tg_topics_args_take(struct tg_topics_args *a, int argc, char **argv, int *i)
{
    if (strcmp(argv[*i], "--create-topics") == 0) {
        a->create = 1;
        return 1;
    }
    if (strcmp(argv[*i], "--partitions") == 0)
        return number(argc, argv, i, 10000, &a->partitions);
    if (strcmp(argv[*i], "--replication-factor") == 0)
        return number(argc, argv, i, 32, &a->replication);
    return 0;
}

size_t tg_kafka_topics_tollgate(const char *events, const char *control, int partitions,
                                int replication, struct tg_topic_want want[2])
{
    want[0] = (struct tg_topic_want){events, 0, partitions, replication};
    want[1] = (struct tg_topic_want){control, 1, TG_TOPICS_CONTROL_PARTITIONS, replication};
    return 2;
}

struct rd_kafka_s *tg_kafka_topics_handle(const char *brokers, const struct tg_kafka_opts *opts,
                                          char *err, size_t errlen)
{
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_t *rk;

    if (rd_kafka_conf_set(conf, "bootstrap.servers", brokers, err, errlen) != RD_KAFKA_CONF_OK ||
        rd_kafka_conf_set(conf, "client.id", "tollgate-topics", err, errlen) !=
            RD_KAFKA_CONF_OK ||
        rd_kafka_conf_set(conf, "log_level", "3", err, errlen) != RD_KAFKA_CONF_OK) {
        rd_kafka_conf_destroy(conf);
        return NULL;
    }
    if (opts != NULL && tg_kafka_opts_apply(opts, conf, err, errlen) != 0) {
        rd_kafka_conf_destroy(conf);
        return NULL;
    }
    rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, errlen);
    if (rk == NULL)
        rd_kafka_conf_destroy(conf);
    return rk;
}

/* metadata: existence, partitions and replication of each topic, and the broker count. */
static int metadata(rd_kafka_t *rk, const struct tg_topic_want *want, size_t n, int timeout_ms,
                    struct topic_state *st, int *brokers, char *why, size_t whylen)
{
    const struct rd_kafka_metadata *md = NULL;
    /* every topic (all_topics): asking for one by name may have the broker auto-create it */
    rd_kafka_resp_err_t e = rd_kafka_metadata(rk, 1, NULL, &md, timeout_ms);

    if (e != RD_KAFKA_RESP_ERR_NO_ERROR) {
        snprintf(why, whylen, "cluster metadata: %s", rd_kafka_err2str(e));
        return TG_EUNAVAIL;
    }
    *brokers = md->broker_cnt;
    for (size_t i = 0; i < n; i++) {
        memset(&st[i], 0, sizeof(st[i]));
        for (int t = 0; t < md->topic_cnt; t++) {
            const struct rd_kafka_metadata_topic *mt = &md->topics[t];

            if (strcmp(mt->topic, want[i].name) != 0 || mt->err != RD_KAFKA_RESP_ERR_NO_ERROR)
                continue;
            st[i].exists = 1;
            st[i].partitions = mt->partition_cnt;
            st[i].replication = mt->partition_cnt > 0 ? mt->partitions[0].replica_cnt : 0;
        }
    }
    rd_kafka_metadata_destroy(md);
    return 0;
}

/* admin_wait: the result event of an admin call on q, or NULL after timeout_ms. */
static rd_kafka_event_t *admin_wait(rd_kafka_queue_t *q, rd_kafka_event_type_t type,
                                    int timeout_ms)
{
    uint64_t end = tg_now_mono_ms() + (uint64_t)timeout_ms;

    for (;;) {
        uint64_t now = tg_now_mono_ms();
        rd_kafka_event_t *ev;

        if (now >= end)
            return NULL;
        ev = rd_kafka_queue_poll(q, (int)(end - now));
        if (ev == NULL)
            return NULL;
        if (rd_kafka_event_type(ev) == type)
            return ev;
        rd_kafka_event_destroy(ev);
    }
}

/* policies: cleanup.policy of the existing topics (DescribeConfigs). */
static int policies(rd_kafka_t *rk, const struct tg_topic_want *want, size_t n, int timeout_ms,
                    struct topic_state *st, char *why, size_t whylen)
{
    rd_kafka_ConfigResource_t *res[TG_TOPICS_MAX];
    rd_kafka_AdminOptions_t *ao = rd_kafka_AdminOptions_new(rk, RD_KAFKA_ADMIN_OP_DESCRIBECONFIGS);
    rd_kafka_queue_t *q = rd_kafka_queue_new(rk);
    const rd_kafka_ConfigResource_t **out;
    rd_kafka_event_t *ev;
    char errstr[256];
    size_t nres = 0, nout = 0;
    int rc = 0;

    rd_kafka_AdminOptions_set_request_timeout(ao, timeout_ms, errstr, sizeof(errstr));
    for (size_t i = 0; i < n; i++)
        if (st[i].exists)
            res[nres++] = rd_kafka_ConfigResource_new(RD_KAFKA_RESOURCE_TOPIC, want[i].name);
    if (nres > 0) {
        rd_kafka_DescribeConfigs(rk, res, nres, ao, q);
        ev = admin_wait(q, RD_KAFKA_EVENT_DESCRIBECONFIGS_RESULT, timeout_ms + 1000);
        if (ev == NULL) {
            snprintf(why, whylen, "describe topic configs: no answer in %d ms", timeout_ms);
            rc = TG_EUNAVAIL;
        } else if (rd_kafka_event_error(ev) != RD_KAFKA_RESP_ERR_NO_ERROR) {
            snprintf(why, whylen, "describe topic configs: %s", rd_kafka_event_error_string(ev));
            rc = TG_EUNAVAIL;
        } else {
            out = rd_kafka_DescribeConfigs_result_resources(
                rd_kafka_event_DescribeConfigs_result(ev), &nout);
            for (size_t r = 0; r < nout; r++) {
                const rd_kafka_ConfigEntry_t **cfg;
                size_t ncfg = 0;

                if (rd_kafka_ConfigResource_error(out[r]) != RD_KAFKA_RESP_ERR_NO_ERROR)
                    continue;
                cfg = rd_kafka_ConfigResource_configs(out[r], &ncfg);
                for (size_t i = 0; i < n; i++) {
                    if (strcmp(want[i].name, rd_kafka_ConfigResource_name(out[r])) != 0)
                        continue;
                    for (size_t c = 0; c < ncfg; c++) {
                        const char *v = rd_kafka_ConfigEntry_value(cfg[c]);

                        if (strcmp(rd_kafka_ConfigEntry_name(cfg[c]), "cleanup.policy") == 0)
                            snprintf(st[i].policy, sizeof(st[i].policy), "%s", v ? v : "");
                    }
                }
            }
        }
        if (ev != NULL)
            rd_kafka_event_destroy(ev);
    }
    for (size_t i = 0; i < nres; i++)
        rd_kafka_ConfigResource_destroy(res[i]);
    rd_kafka_queue_destroy(q);
    rd_kafka_AdminOptions_destroy(ao);
    return rc;
}

/* state: metadata and policies of the n topics. */
static int state(rd_kafka_t *rk, const struct tg_topic_want *want, size_t n, int timeout_ms,
                 struct topic_state *st, int *brokers, char *why, size_t whylen)
{
    int rc = metadata(rk, want, n, timeout_ms, st, brokers, why, whylen);

    return rc != 0 ? rc : policies(rk, want, n, timeout_ms, st, why, whylen);
}

/* describe: the report and problem lines of st. Returns the number of problems. */
static int describe(const struct tg_topic_want *want, size_t n, const struct topic_state *st,
                    char *report, size_t rcap, char *problem, size_t pcap)
{
    size_t ra = 0, pa = 0;
    int problems = 0;

    report[0] = '\0';
    problem[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        const char *sep = i > 0 ? "; " : "";

        if (!st[i].exists) {
            appendf(report, rcap, &ra, "%s%s: does not exist", sep, want[i].name);
            appendf(problem, pcap, &pa, "%s%s: does not exist (create it: --create-topics)",
                    problems > 0 ? "; " : "", want[i].name);
            problems++;
            continue;
        }
        appendf(report, rcap, &ra, "%s%s: %d partitions, replication %d, cleanup.policy=%s", sep,
                want[i].name, st[i].partitions, st[i].replication,
                st[i].policy[0] != '\0' ? st[i].policy : "?");
        if (want[i].compact && st[i].policy[0] != '\0' && strstr(st[i].policy, "compact") == NULL) {
            appendf(problem, pcap, &pa, "%s%s: cleanup.policy=%s, not compacted: keys would expire",
                    problems > 0 ? "; " : "", want[i].name, st[i].policy);
            problems++;
        }
    }
    return problems;
}

int tg_kafka_topics_check(struct rd_kafka_s *rk, const struct tg_topic_want *want, size_t n,
                          int timeout_ms, char *report, size_t rcap, char *problem, size_t pcap)
{
    struct topic_state st[TG_TOPICS_MAX];
    int brokers = 0, rc;

    if (n > TG_TOPICS_MAX)
        return TG_EINVAL;
    report[0] = '\0';
    rc = state(rk, want, n, timeout_ms, st, &brokers, problem, pcap);
    if (rc != 0)
        return rc;
    describe(want, n, st, report, rcap, problem, pcap);
    return 0;
}

int tg_kafka_topics_create(struct rd_kafka_s *rk, const struct tg_topic_want *want, size_t n,
                           int timeout_ms, char *msg, size_t mcap)
{
    struct topic_state st[TG_TOPICS_MAX];
    rd_kafka_NewTopic_t *nt[TG_TOPICS_MAX];
    char why[TG_TOPICS_REPORT_CAP], report[TG_TOPICS_REPORT_CAP], problem[TG_TOPICS_REPORT_CAP];
    char errstr[256];
    size_t nnew = 0, at = 0;
    int brokers = 0, rc;

    if (n > TG_TOPICS_MAX)
        return TG_EINVAL;
    msg[0] = '\0';
    rc = state(rk, want, n, timeout_ms, st, &brokers, why, sizeof(why));
    if (rc != 0) {
        appendf(msg, mcap, &at, "%s", why);
        return rc;
    }
    for (size_t i = 0; i < n; i++) {
        int repl = want[i].replication < brokers ? want[i].replication : brokers;
        char isr[8];

        if (st[i].exists)
            continue;
        if (repl < 1)
            repl = 1;
        nt[nnew] = rd_kafka_NewTopic_new(want[i].name, want[i].partitions, repl, errstr,
                                         sizeof(errstr));
        if (nt[nnew] == NULL) {
            appendf(msg, mcap, &at, "%s: %s", want[i].name, errstr);
            rc = TG_EINVAL;
            break;
        }
        snprintf(isr, sizeof(isr), "%d", repl >= 3 ? 2 : 1);
        rd_kafka_NewTopic_set_config(nt[nnew], "min.insync.replicas", isr);
        if (want[i].compact)
            rd_kafka_NewTopic_set_config(nt[nnew], "cleanup.policy", "compact");
        nnew++;
    }
    if (rc == 0 && nnew > 0) {
        rd_kafka_AdminOptions_t *ao = rd_kafka_AdminOptions_new(rk, RD_KAFKA_ADMIN_OP_CREATETOPICS);
        rd_kafka_queue_t *q = rd_kafka_queue_new(rk);
        rd_kafka_event_t *ev;

        rd_kafka_AdminOptions_set_request_timeout(ao, timeout_ms, errstr, sizeof(errstr));
        rd_kafka_AdminOptions_set_operation_timeout(ao, timeout_ms, errstr, sizeof(errstr));
        rd_kafka_CreateTopics(rk, nt, nnew, ao, q);
        ev = admin_wait(q, RD_KAFKA_EVENT_CREATETOPICS_RESULT, timeout_ms + 1000);
        if (ev == NULL) {
            appendf(msg, mcap, &at, "create topics: no answer in %d ms", timeout_ms);
            rc = TG_EUNAVAIL;
        } else if (rd_kafka_event_error(ev) != RD_KAFKA_RESP_ERR_NO_ERROR) {
            appendf(msg, mcap, &at, "create topics: %s", rd_kafka_event_error_string(ev));
            rc = TG_EIO;
        } else {
            size_t nres = 0;
            const rd_kafka_topic_result_t **res =
                rd_kafka_CreateTopics_result_topics(rd_kafka_event_CreateTopics_result(ev), &nres);

            for (size_t r = 0; r < nres; r++) {
                rd_kafka_resp_err_t e = rd_kafka_topic_result_error(res[r]);

                if (e == RD_KAFKA_RESP_ERR_NO_ERROR || e == RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS)
                    continue;
                appendf(msg, mcap, &at, "%s%s: %s", at > 0 ? "\n" : "",
                        rd_kafka_topic_result_name(res[r]),
                        rd_kafka_topic_result_error_string(res[r]) != NULL
                            ? rd_kafka_topic_result_error_string(res[r])
                            : rd_kafka_err2str(e));
                rc = TG_EIO;
            }
        }
        if (ev != NULL)
            rd_kafka_event_destroy(ev);
        rd_kafka_queue_destroy(q);
        rd_kafka_AdminOptions_destroy(ao);
    }
    for (size_t i = 0; i < nnew; i++)
        rd_kafka_NewTopic_destroy(nt[i]);
    if (rc != 0)
        return rc;
    /* what the cluster holds now (metadata follows a creation within moments) */
    {
        struct topic_state now[TG_TOPICS_MAX];
        uint64_t end = tg_now_mono_ms() + (uint64_t)timeout_ms;
        int missing;

        for (;;) {
            rc = state(rk, want, n, timeout_ms, now, &brokers, why, sizeof(why));
            missing = 0;
            for (size_t i = 0; rc == 0 && i < n; i++)
                missing += !now[i].exists;
            if ((rc == 0 && missing == 0) || tg_now_mono_ms() >= end)
                break;
            tg_sleep_ms(200);
        }
        if (rc != 0) {
            appendf(msg, mcap, &at, "%s", why);
            return rc;
        }
        for (size_t i = 0; i < n; i++)
            appendf(msg, mcap, &at, "%s%s %s: %d partitions, replication %d, cleanup.policy=%s",
                    at > 0 ? "\n" : "", st[i].exists ? "exists" : "created", want[i].name,
                    now[i].partitions, now[i].replication,
                    now[i].policy[0] != '\0' ? now[i].policy : "?");
        if (describe(want, n, now, report, sizeof(report), problem, sizeof(problem)) > 0) {
            appendf(msg, mcap, &at, "\nproblem: %s", problem);
            return TG_EINVAL;
        }
    }
    return 0;
}

int tg_kafka_topics_run_create(const char *brokers, const struct tg_kafka_opts *opts,
                               const struct tg_topic_want *want, size_t n, int timeout_ms,
                               FILE *out)
{
    char err[512], msg[2 * TG_TOPICS_REPORT_CAP];
    rd_kafka_t *rk;
    int rc;

    if (brokers == NULL || brokers[0] == '\0') {
        fprintf(out, "create topics: no Kafka brokers configured\n");
        return 1;
    }
    rk = tg_kafka_topics_handle(brokers, opts, err, sizeof(err));
    if (rk == NULL) {
        fprintf(out, "create topics: %s\n", err);
        return 1;
    }
    rc = tg_kafka_topics_create(rk, want, n, timeout_ms, msg, sizeof(msg));
    fprintf(out, "%s\n", msg);
    rd_kafka_destroy(rk);
    return rc == 0 ? 0 : 1;
}

/* Start-up watch --------------------------------------------------------------------------- */

struct tg_topics_watch {
    rd_kafka_t *rk;
    struct tg_topic_want want[TG_TOPICS_MAX];
    char names[TG_TOPICS_MAX][256];
    size_t n;
    tg_topics_cb cb;
    void *ud;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cond;
    int stop; /* under mu */
};

static void *watch_main(void *arg)
{
    struct tg_topics_watch *w = arg;
    char report[TG_TOPICS_REPORT_CAP], problem[TG_TOPICS_REPORT_CAP];
    char logged[TG_TOPICS_REPORT_CAP] = ""; /* the report last logged */

    pthread_setname_np(pthread_self(), "tg-topics"); /* in top, perf and /proc/PID/task */
    for (;;) {
        struct timespec until;
        int rc = tg_kafka_topics_check(w->rk, w->want, w->n, TG_TOPICS_CHECK_MS, report,
                                       sizeof(report), problem, sizeof(problem));

        if (rc == 0 && strcmp(report, logged) != 0) {
            TG_INFO("msg=\"kafka topics\" topics=\"%s\"", report);
            if (problem[0] != '\0')
                TG_WARN("msg=\"kafka topics not as expected\" problem=\"%s\"", problem);
            snprintf(logged, sizeof(logged), "%s", report);
        }
        w->cb(w->ud, rc, report, problem);
        if (rc == 0 && problem[0] == '\0')
            break;
        pthread_mutex_lock(&w->mu);
        tg_mono_deadline(TG_TOPICS_RETRY_MS, &until);
        while (!w->stop && pthread_cond_timedwait(&w->cond, &w->mu, &until) == 0)
            ;
        rc = w->stop;
        pthread_mutex_unlock(&w->mu);
        if (rc)
            break;
    }
    /* checked and as expected (or stopping): the connections go */
    rd_kafka_destroy(w->rk);
    w->rk = NULL;
    return NULL;
}

struct tg_topics_watch *tg_topics_watch_start(const char *brokers,
                                              const struct tg_kafka_opts *opts,
                                              const struct tg_topic_want *want, size_t n,
                                              tg_topics_cb cb, void *ud, char *err,
                                              size_t errlen)
{
    struct tg_topics_watch *w;

    if (n > TG_TOPICS_MAX || cb == NULL) {
        snprintf(err, errlen, "topics watch: bad arguments");
        return NULL;
    }
    w = calloc(1, sizeof(*w));
    if (w == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    for (size_t i = 0; i < n; i++) {
        w->want[i] = want[i];
        snprintf(w->names[i], sizeof(w->names[i]), "%s", want[i].name);
        w->want[i].name = w->names[i];
    }
    w->n = n;
    w->cb = cb;
    w->ud = ud;
    pthread_mutex_init(&w->mu, NULL);
    {
        pthread_condattr_t ca;

        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&w->cond, &ca);
        pthread_condattr_destroy(&ca);
    }
    w->rk = tg_kafka_topics_handle(brokers, opts, err, errlen);
    if (w->rk == NULL || pthread_create(&w->thread, NULL, watch_main, w) != 0) {
        if (w->rk != NULL) {
            snprintf(err, errlen, "topics watch: cannot start its thread");
            rd_kafka_destroy(w->rk);
        }
        pthread_cond_destroy(&w->cond);
        pthread_mutex_destroy(&w->mu);
        free(w);
        return NULL;
    }
    return w;
}

void tg_topics_watch_stop(struct tg_topics_watch **pw)
{
    struct tg_topics_watch *w = pw != NULL ? *pw : NULL;

    if (w == NULL)
        return;
    pthread_mutex_lock(&w->mu);
    w->stop = 1;
    pthread_cond_signal(&w->cond);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->thread, NULL); /* the thread destroyed the handle */
    pthread_cond_destroy(&w->cond);
    pthread_mutex_destroy(&w->mu);
    free(w);
    *pw = NULL;
}
