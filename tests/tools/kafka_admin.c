/* kafka_admin: the few cluster operations the test helpers need, on librdkafka's admin API, so
 * that starting a test cluster does not pay a JVM start per topic.
 *
 *   kafka_admin [-c FILE] BROKERS ...
 *       every command: first set the librdkafka properties of FILE (NAME=VALUE lines, '#'
 *       comments), e.g. security.protocol, sasl.*, ssl.ca.location for a SASL_SSL listener
 *   kafka_admin BROKERS ready N [TIMEOUT_MS]
 *       wait until the cluster's metadata lists N live brokers
 *   kafka_admin BROKERS create TOPIC PARTITIONS REPLICAS [NAME=VALUE ...] [-- TIMEOUT_MS]
 *       create TOPIC with those topic configs (an existing topic is fine), then wait until
 *       every partition has a leader and REPLICAS in-sync replicas
 *   kafka_admin BROKERS leader TOPIC PARTITION [TIMEOUT_MS]
 *       print the node id of the partition's leader
 *   kafka_admin BROKERS moved TOPIC PARTITION NODE [TIMEOUT_MS]
 *       wait until a node other than NODE leads the partition and print its id: one process
 *       for a failover, instead of one started per look (a test that measures latency on a
 *       2-core machine while it waits would measure those starts)
 *   kafka_admin BROKERS ends TOPIC PARTITIONS [TIMEOUT_MS]
 *       print "PARTITION LOW HIGH", the watermarks of each of the first PARTITIONS partitions
 *   kafka_admin BROKERS count TOPIC PARTITION [TIMEOUT_MS]
 *       read the partition from its start to its end and print how many records it holds
 *       (tombstones included): after a compaction, fewer than its end offset
 *
 * Exits 0 on success, 1 when the cluster did not get there within TIMEOUT_MS (default
 * 60000 ms; the reason goes to stderr), 2 on usage errors. Used by tests/lib/services.sh. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <librdkafka/rdkafka.h>

#include "tg_time.h"

#define KA_DEFAULT_TIMEOUT_MS 60000
#define KA_POLL_INTERVAL_US 100000
#define KA_METADATA_TIMEOUT_MS 2000
#define KA_CONF_LINE_MAX 1024 /* one line of a -c FILE, bytes */

/* ka_conf_file: set every NAME=VALUE line of path on conf. Returns 0, or -1 with the reason on
 * stderr (a value is never printed: the file holds passwords). */
static int ka_conf_file(rd_kafka_conf_t *conf, const char *path)
{
    char line[KA_CONF_LINE_MAX], err[512];
    FILE *f = fopen(path, "r");
    int lineno = 0, rc = 0;

    if (f == NULL) {
        perror(path);
        return -1;
    }
    while (rc == 0 && fgets(line, sizeof(line), f) != NULL) {
        size_t len = strlen(line);
        char *eq;

        lineno++;
        if (len > 0 && line[len - 1] != '\n' && !feof(f)) {
            fprintf(stderr, "kafka_admin: %s:%d: line too long\n", path, lineno);
            rc = -1;
            break;
        }
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
            line[--len] = '\0';
        if (len == 0 || line[0] == '#')
            continue;
        eq = strchr(line, '=');
        if (eq == NULL) {
            fprintf(stderr, "kafka_admin: %s:%d: expected NAME=VALUE\n", path, lineno);
            rc = -1;
            break;
        }
        *eq = '\0';
        if (rd_kafka_conf_set(conf, line, eq + 1, err, sizeof(err)) != RD_KAFKA_CONF_OK) {
            fprintf(stderr, "kafka_admin: %s:%d: property %s refused\n", path, lineno, line);
            rc = -1;
        }
    }
    fclose(f);
    return rc;
}

/* Returns a new producer handle on BROKERS with the properties of conf_file (NULL: none) set
 * first (destroy with rd_kafka_destroy), or NULL. Logs only critical lines: a node down on
 * purpose would otherwise log a refused connect a second. */
static rd_kafka_t *ka_connect(const char *brokers, const char *conf_file, rd_kafka_type_t type)
{
    char err[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_t *rk;

    if (conf_file != NULL && ka_conf_file(conf, conf_file) != 0) {
        rd_kafka_conf_destroy(conf);
        return NULL;
    }
    if (rd_kafka_conf_set(conf, "bootstrap.servers", brokers, err, sizeof(err)) != 0 ||
        rd_kafka_conf_set(conf, "log_level", "2", err, sizeof(err)) != 0 ||
        (type == RD_KAFKA_CONSUMER &&
         (rd_kafka_conf_set(conf, "group.id", "tollgate-kafka-admin", err, sizeof(err)) != 0 ||
          rd_kafka_conf_set(conf, "enable.auto.commit", "false", err, sizeof(err)) != 0 ||
          rd_kafka_conf_set(conf, "enable.partition.eof", "true", err, sizeof(err)) != 0))) {
        fprintf(stderr, "kafka_admin: %s\n", err);
        rd_kafka_conf_destroy(conf);
        return NULL;
    }
    rk = rd_kafka_new(type, conf, err, sizeof(err));
    if (rk == NULL) {
        fprintf(stderr, "kafka_admin: %s\n", err);
        rd_kafka_conf_destroy(conf);
    }
    return rk;
}

static int ka_ready(rd_kafka_t *rk, int want, uint64_t deadline)
{
    int seen = -1;

    for (;;) {
        const struct rd_kafka_metadata *md = NULL;

        if (rd_kafka_metadata(rk, 0, NULL, &md, KA_METADATA_TIMEOUT_MS) ==
            RD_KAFKA_RESP_ERR_NO_ERROR) {
            seen = md->broker_cnt;
            rd_kafka_metadata_destroy(md);
            if (seen >= want)
                return 0;
        }
        if (tg_now_mono_ms() >= deadline)
            break;
        usleep(KA_POLL_INTERVAL_US);
    }
    fprintf(stderr, "kafka_admin: %d of %d brokers live\n", seen < 0 ? 0 : seen, want);
    return 1;
}

/* Looks TOPIC up. Returns 0 when every one of its partitions has a leader and at least
 * min_isr in-sync replicas; *leader_out (when not NULL) gets the leader of partition `part`. */
static int ka_topic_state(rd_kafka_t *rk, const char *topic, int min_isr, int part,
                          int32_t *leader_out, char *why, size_t whylen)
{
    const struct rd_kafka_metadata *md = NULL;
    const struct rd_kafka_metadata_topic *t;
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, topic, NULL);
    rd_kafka_resp_err_t err;
    int rc = -1, found = 0;

    if (rkt == NULL) {
        snprintf(why, whylen, "topic handle: %s", rd_kafka_err2str(rd_kafka_last_error()));
        return -1;
    }
    err = rd_kafka_metadata(rk, 0, rkt, &md, KA_METADATA_TIMEOUT_MS);
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
        snprintf(why, whylen, "metadata: %s", rd_kafka_err2str(err));
        goto out;
    }
    if (md->topic_cnt != 1 || md->topics[0].err != RD_KAFKA_RESP_ERR_NO_ERROR ||
        md->topics[0].partition_cnt == 0) {
        snprintf(why, whylen, "topic %s: %s", topic,
                 md->topic_cnt == 1 ? rd_kafka_err2str(md->topics[0].err) : "absent");
        goto out;
    }
    t = &md->topics[0];
    for (int i = 0; i < t->partition_cnt; i++) {
        const struct rd_kafka_metadata_partition *p = &t->partitions[i];

        if (p->leader < 0 || p->isr_cnt < min_isr) {
            snprintf(why, whylen, "%s[%d]: leader %d, %d in sync", topic, p->id, p->leader,
                     p->isr_cnt);
            goto out;
        }
        if (p->id == part) {
            found = 1;
            if (leader_out != NULL)
                *leader_out = p->leader;
        }
    }
    if (part >= 0 && !found) {
        snprintf(why, whylen, "%s has no partition %d", topic, part);
        goto out;
    }
    rc = 0;
out:
    if (md != NULL)
        rd_kafka_metadata_destroy(md);
    rd_kafka_topic_destroy(rkt);
    return rc;
}

/* Waits until ka_topic_state holds for the topic (or one partition of it) and, when `avoid`
 * is a node id (not -1), the partition's leader is another node (a failover); the leader in
 * *leader_out. */
static int ka_wait_topic(rd_kafka_t *rk, const char *topic, int min_isr, int part,
                         int32_t avoid, int32_t *leader_out, uint64_t deadline)
{
    char why[256] = "";

    for (;;) {
        if (ka_topic_state(rk, topic, min_isr, part, leader_out, why, sizeof(why)) == 0) {
            if (avoid == -1 || *leader_out != avoid)
                return 0;
            snprintf(why, sizeof(why), "%s[%d] still led by node %d", topic, part, (int)avoid);
        }
        if (tg_now_mono_ms() >= deadline)
            break;
        usleep(KA_POLL_INTERVAL_US);
    }
    fprintf(stderr, "kafka_admin: %s\n", why);
    return 1;
}

/* Creates TOPIC with `configs` (NAME=VALUE strings); an existing topic counts as created. */
static int ka_create(rd_kafka_t *rk, const char *topic, int partitions, int replicas,
                     char **configs, int nconfigs, uint64_t deadline)
{
    char err[512];
    rd_kafka_NewTopic_t *nt = NULL;
    rd_kafka_queue_t *q = NULL;
    rd_kafka_event_t *ev = NULL;
    rd_kafka_AdminOptions_t *opts = NULL;
    const rd_kafka_topic_result_t **res;
    size_t nres = 0;
    int rc = 1;

    nt = rd_kafka_NewTopic_new(topic, partitions, replicas, err, sizeof(err));
    if (nt == NULL) {
        fprintf(stderr, "kafka_admin: %s\n", err);
        return 2;
    }
    for (int i = 0; i < nconfigs; i++) {
        char name[128];
        const char *eq = strchr(configs[i], '=');

        if (eq == NULL || (size_t)(eq - configs[i]) >= sizeof(name)) {
            fprintf(stderr, "kafka_admin: bad config '%s' (NAME=VALUE)\n", configs[i]);
            rc = 2;
            goto out;
        }
        memcpy(name, configs[i], (size_t)(eq - configs[i]));
        name[eq - configs[i]] = '\0';
        if (rd_kafka_NewTopic_set_config(nt, name, eq + 1) != RD_KAFKA_RESP_ERR_NO_ERROR) {
            fprintf(stderr, "kafka_admin: config %s refused\n", name);
            rc = 2;
            goto out;
        }
    }
    opts = rd_kafka_AdminOptions_new(rk, RD_KAFKA_ADMIN_OP_CREATETOPICS);
    rd_kafka_AdminOptions_set_operation_timeout(opts, 30000, err, sizeof(err));
    rd_kafka_AdminOptions_set_request_timeout(opts, 30000, err, sizeof(err));
    q = rd_kafka_queue_new(rk);
    rd_kafka_CreateTopics(rk, &nt, 1, opts, q);
    while (ev == NULL) {
        if (tg_now_mono_ms() >= deadline) {
            fprintf(stderr, "kafka_admin: no CreateTopics result for %s\n", topic);
            goto out;
        }
        ev = rd_kafka_queue_poll(q, 500);
    }
    if (rd_kafka_event_error(ev) != RD_KAFKA_RESP_ERR_NO_ERROR) {
        fprintf(stderr, "kafka_admin: CreateTopics %s: %s\n", topic,
                rd_kafka_event_error_string(ev));
        goto out;
    }
    res = rd_kafka_CreateTopics_result_topics(rd_kafka_event_CreateTopics_result(ev), &nres);
    for (size_t i = 0; i < nres; i++) {
        rd_kafka_resp_err_t e = rd_kafka_topic_result_error(res[i]);

        if (e != RD_KAFKA_RESP_ERR_NO_ERROR && e != RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS) {
            const char *msg = rd_kafka_topic_result_error_string(res[i]);

            fprintf(stderr, "kafka_admin: create %s: %s\n", topic,
                    msg != NULL ? msg : rd_kafka_err2str(e));
            goto out;
        }
    }
    rc = ka_wait_topic(rk, topic, replicas, -1, -1, NULL, deadline);
out:
    if (ev != NULL)
        rd_kafka_event_destroy(ev);
    if (q != NULL)
        rd_kafka_queue_destroy(q);
    if (opts != NULL)
        rd_kafka_AdminOptions_destroy(opts);
    rd_kafka_NewTopic_destroy(nt);
    return rc;
}

/* Prints "PARTITION LOW HIGH" for each of the first nparts partitions of topic (watermarks from
 * each partition's leader). */
static int ka_ends(rd_kafka_t *rk, const char *topic, int nparts, uint64_t timeout_ms)
{
    for (int p = 0; p < nparts; p++) {
        int64_t lo = -1, hi = -1;
        rd_kafka_resp_err_t err =
            rd_kafka_query_watermark_offsets(rk, topic, p, &lo, &hi, (int)timeout_ms);

        if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
            fprintf(stderr, "kafka_admin: %s [%d]: %s\n", topic, p, rd_kafka_err2str(err));
            return 1;
        }
        printf("%d %lld %lld\n", p, (long long)lo, (long long)hi);
    }
    return 0;
}

/* Reads TOPIC [part] from the beginning to the end it had when asked (never committing) and
 * prints the records read. */
static int ka_count(rd_kafka_t *rk, const char *topic, int part, uint64_t timeout_ms)
{
    uint64_t deadline = tg_now_mono_ms() + timeout_ms;
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);
    int64_t lo = -1, hi = -1;
    long long n = 0;
    int rc = 1;
    rd_kafka_resp_err_t err =
        rd_kafka_query_watermark_offsets(rk, topic, part, &lo, &hi, (int)timeout_ms);

    if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
        fprintf(stderr, "kafka_admin: %s [%d]: %s\n", topic, part, rd_kafka_err2str(err));
        rd_kafka_topic_partition_list_destroy(l);
        return 1;
    }
    rd_kafka_topic_partition_list_add(l, topic, part)->offset = RD_KAFKA_OFFSET_BEGINNING;
    err = rd_kafka_assign(rk, l);
    rd_kafka_topic_partition_list_destroy(l);
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
        fprintf(stderr, "kafka_admin: assign %s [%d]: %s\n", topic, part, rd_kafka_err2str(err));
        return 1;
    }
    while (lo < hi && tg_now_mono_ms() < deadline) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, 200);
        int done = 0;

        if (m == NULL)
            continue;
        if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
            done = 1;
        } else if (m->err != RD_KAFKA_RESP_ERR_NO_ERROR) {
            fprintf(stderr, "kafka_admin: %s [%d]: %s\n", topic, part, rd_kafka_err2str(m->err));
        } else {
            n++;
            done = m->offset + 1 >= hi;
        }
        rd_kafka_message_destroy(m);
        if (done) {
            rc = 0;
            break;
        }
    }
    if (lo >= hi)
        rc = 0;
    if (rc == 0)
        printf("%lld\n", n);
    else
        fprintf(stderr, "kafka_admin: %s [%d] not read to its end (%lld) in %llu ms\n", topic,
                part, (long long)hi, (unsigned long long)timeout_ms);
    rd_kafka_assign(rk, NULL);
    return rc;
}

static int ka_usage(void)
{
    fprintf(stderr, "usage: kafka_admin [-c FILE] BROKERS ready N [TIMEOUT_MS]\n"
                    "       kafka_admin BROKERS create TOPIC PARTITIONS REPLICAS "
                    "[NAME=VALUE ...] [-- TIMEOUT_MS]\n"
                    "       kafka_admin BROKERS leader TOPIC PARTITION [TIMEOUT_MS]\n"
                    "       kafka_admin BROKERS moved TOPIC PARTITION NODE [TIMEOUT_MS]\n"
                    "       kafka_admin BROKERS ends TOPIC PARTITIONS [TIMEOUT_MS]\n"
                    "       kafka_admin BROKERS count TOPIC PARTITION [TIMEOUT_MS]\n");
    return 2;
}

int main(int argc, char **argv)
{
    rd_kafka_t *rk = NULL;
    const char *cmd;
    uint64_t timeout_ms = KA_DEFAULT_TIMEOUT_MS;
    const char *conf_file = NULL;
    int rc = 2;

    if (argc >= 3 && strcmp(argv[1], "-c") == 0) {
        conf_file = argv[2];
        argv += 2;
        argc -= 2;
    }
    if (argc < 4)
        return ka_usage();
    cmd = argv[2];
    if (strcmp(cmd, "ready") == 0) {
        if (argc > 5)
            return ka_usage();
        if (argc == 5)
            timeout_ms = strtoull(argv[4], NULL, 10);
    } else if (strcmp(cmd, "create") == 0) {
        if (argc < 6)
            return ka_usage();
        if (argc >= 8 && strcmp(argv[argc - 2], "--") == 0) {
            timeout_ms = strtoull(argv[argc - 1], NULL, 10);
            argc -= 2;
        }
    } else if (strcmp(cmd, "leader") == 0 || strcmp(cmd, "ends") == 0 ||
               strcmp(cmd, "count") == 0) {
        if (argc < 5 || argc > 6)
            return ka_usage();
        if (argc == 6)
            timeout_ms = strtoull(argv[5], NULL, 10);
    } else if (strcmp(cmd, "moved") == 0) {
        if (argc < 6 || argc > 7)
            return ka_usage();
        if (argc == 7)
            timeout_ms = strtoull(argv[6], NULL, 10);
    } else {
        return ka_usage();
    }
    rk = ka_connect(argv[1], conf_file,
                    strcmp(cmd, "count") == 0 ? RD_KAFKA_CONSUMER : RD_KAFKA_PRODUCER);
    if (rk == NULL)
        return 1;
    if (strcmp(cmd, "ready") == 0) {
        rc = ka_ready(rk, atoi(argv[3]), tg_now_mono_ms() + timeout_ms);
    } else if (strcmp(cmd, "create") == 0) {
        rc = ka_create(rk, argv[3], atoi(argv[4]), atoi(argv[5]), argv + 6, argc - 6,
                       tg_now_mono_ms() + timeout_ms);
    } else if (strcmp(cmd, "ends") == 0) {
        rc = ka_ends(rk, argv[3], atoi(argv[4]), timeout_ms);
    } else if (strcmp(cmd, "count") == 0) {
        rc = ka_count(rk, argv[3], atoi(argv[4]), timeout_ms);
        rd_kafka_consumer_close(rk);
    } else { /* leader, moved */
        int32_t leader = -1;
        int32_t avoid = strcmp(cmd, "moved") == 0 ? (int32_t)atoi(argv[5]) : -1;

        rc = ka_wait_topic(rk, argv[3], 1, atoi(argv[4]), avoid, &leader,
                           tg_now_mono_ms() + timeout_ms);
        if (rc == 0)
            printf("%d\n", (int)leader);
    }
    rd_kafka_destroy(rk);
    return rc;
}
