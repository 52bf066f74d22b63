/* Integration test of the router-svc spool + Kafka publisher against devkafka:
 * - 10,000 events submitted -> 10,000 distinct call ids on the topic, each <= 4 KiB and
 *   decodable, and nothing left in the spool after the drain;
 * - brokers down while events are submitted: every submit succeeds at once, every event arrives
 *   after the brokers return;
 * - events spooled while Kafka is down by a publisher that is then destroyed are replayed by
 *   the next one started on the same spool;
 * - acknowledgements held back: no spinning producer thread, every event delivered;
 * - while acknowledgements are held back, a partition's leader moves to a broker the producer
 *   is not connected to (and its old leader dies): every event delivered;
 * - a produce request answered with OUT_OF_ORDER_SEQUENCE_NUMBER (fatal to an idempotent
 *   producer): the events are produced again from the spool, every event delivered;
 * - every event is keyed by its key hash and sits on the partition the hash gives, unless a
 *   partitioner is given under librdkafka: that one is used;
 * - a producer queue with room for 16 messages (librdkafka's queue.buffering.max.messages),
 *   which refuses most records: every event delivered, none twice.
 * With TG_PUBLISHER_TEST_PER_RECORD=N (kafka.events_per_record), all of it with records of up
 * to N events of one key (37 keys): every record splits into decodable events of its key, and
 * records of several events were seen.
 * Takes every broker down through devkafka's control channel, so it runs on devkafka: the one
 * named by TG_KAFKA_BROKERS and TG_KAFKA_CTL, or, when TG_KAFKA_CTL is unset (tests/run shares
 * an Apache Kafka cluster, which has no such channel), its own, started by running itself again
 * under tests/lib/services.sh. */
#include <dirent.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include <librdkafka/rdkafka.h>

#include "devkafka_client.h"
#include "proto_event.h"
#include "publisher.h"
#include "tg_buf.h"
#include "tg_err.h"
#include "tg_ids.h"
#include "tg_kafka_opts.h"
#include "tg_time.h"

static const char *brokers;
static const char *ctl;
static uint32_t per_record; /* rt_publisher_config.events_per_record */

/* Sends one line to devkafka's control channel and checks the answer starts with "ok". */
static void kafka_ctl(const char *line)
{
    char reply[256];

    CHECK(dk_client_ctl(ctl, line, reply, sizeof(reply)) == 0, "devkafka control '%s' answered '%s'",
          line, reply);
}

static void make_event(struct proto_event *ev, int i)
{
    proto_event_init(ev);
    CHECK(tg_uuid_v4(ev->call_id) == 0, "uuid");
    ev->ts_start_ms = (int64_t)tg_now_epoch_ms();
    ev->ts_end_ms = ev->ts_start_ms + 5;
    proto_str_set(ev->endpoint, sizeof(ev->endpoint), "/v1/chat/completions");
    int k = per_record > 1 ? i % 37 : i; /* keys repeat where events share records */

    tg_sha256_hex(&k, sizeof(k), ev->key_hash);
    proto_str_set(ev->model_requested, sizeof(ev->model_requested), "gpt-main");
    proto_str_set(ev->model_group, sizeof(ev->model_group), "gpt-main");
    ev->status = 200;
    ev->prompt_tokens = 12;
    ev->completion_tokens = 8;
    ev->cost_nusd = 3800;
    ev->attempts = 1;
}

/* The partitions of topic, as the consumer rk sees them (0 when unknown). */
static int topic_partitions(rd_kafka_t *rk, const char *topic)
{
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, topic, NULL);
    const struct rd_kafka_metadata *md = NULL;
    int n = 0;

    if (rkt != NULL && rd_kafka_metadata(rk, 0, rkt, &md, 10000) == RD_KAFKA_RESP_ERR_NO_ERROR &&
        md->topic_cnt == 1)
        n = md->topics[0].partition_cnt;
    if (md != NULL)
        rd_kafka_metadata_destroy(md);
    if (rkt != NULL)
        rd_kafka_topic_destroy(rkt);
    return n;
}

/* The partition an event keyed by a key hash must be on: its first 8 hex digits modulo the
 * partition count (rt_publisher's partitioner), or -1 when the key is not such a hash. */
static int partition_of(const void *key, size_t keylen, int partitions)
{
    char hex[9];
    char *end;
    unsigned long h;

    if (key == NULL || keylen != 64 || partitions <= 0)
        return -1;
    memcpy(hex, key, 8);
    hex[8] = '\0';
    h = strtoul(hex, &end, 16);
    return *end == '\0' ? (int)(h % (unsigned long)partitions) : -1;
}

/* The call ids submitted (or wanted back from the topic). */
struct seen {
    char (*ids)[PROTO_CALL_ID_CAP];
    size_t n, cap;
};

/* A consumer of group (reads from the earliest offset, commits nothing). */
static rd_kafka_t *new_consumer(const char *group)
{
    char err[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_t *rk;

    rd_kafka_conf_set(conf, "bootstrap.servers", brokers, err, sizeof(err));
    rd_kafka_conf_set(conf, "group.id", group, err, sizeof(err));
    rd_kafka_conf_set(conf, "auto.offset.reset", "earliest", err, sizeof(err));
    rd_kafka_conf_set(conf, "enable.auto.commit", "false", err, sizeof(err));
    rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof(err));
    CHECK(rk != NULL, "consumer %s: %s", group, err);
    rd_kafka_poll_set_consumer(rk);
    return rk;
}

/* Collects call ids from the topic until want distinct ones were seen or timeout. Checks every
 * event's size, that it decodes, that its Kafka key is its key hash and that it is on that key's
 * partition (or, with misplaced_out, counts those that are not), and that the events of
 * different keys spread over every partition. */
static size_t consume_topic(const char *topic, const struct seen *want, uint32_t timeout_ms,
                            size_t *misplaced_out)
{
    char group[64];
    rd_kafka_t *rk;
    rd_kafka_topic_partition_list_t *sub;
    uint64_t deadline = tg_now_mono_ms() + timeout_ms;
    size_t found = 0, oversize = 0, undecodable = 0, misplaced = 0, unkeyed = 0, shared = 0;
    uint64_t on_partition[64] = {0};
    int partitions;
    char *got = calloc(want->n, 1);
    struct proto_event *ev = malloc(sizeof(*ev));

    snprintf(group, sizeof(group), "pubtest-%u", (unsigned)tg_now_mono_us());
    rk = new_consumer(group);
    sub = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(sub, topic, RD_KAFKA_PARTITION_UA);
    CHECK(rd_kafka_subscribe(rk, sub) == 0, "subscribe");
    rd_kafka_topic_partition_list_destroy(sub);
    partitions = topic_partitions(rk, topic);
    CHECK(partitions > 1 && partitions <= 64, "topic %s: %d partitions", topic, partitions);
    while (found < want->n && tg_now_mono_ms() < deadline) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, 200);
        char reason[160];

        if (m == NULL)
            continue;
        if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR) {
            struct proto_span sp[PROTO_RECORD_EVENTS_MAX];
            int nev = 0;

            if (proto_record_split(m->payload, m->len, sp, PROTO_RECORD_EVENTS_MAX, &nev) != 0 ||
                m->len > PROTO_RECORD_MAX_BYTES || (nev > 1 && per_record <= 1))
                undecodable++;
            shared += nev > 1;
            for (int e = 0; e < nev; e++) {
                const char *data = (const char *)m->payload + sp[e].off;

                if (sp[e].len > TG_EVENT_MAX_BYTES)
                    oversize++;
                if (proto_event_decode(data, sp[e].len, ev, reason, sizeof(reason)) != 0) {
                    undecodable++;
                    continue;
                }
                if (m->key_len != strlen(ev->key_hash) ||
                    memcmp(m->key, ev->key_hash, m->key_len) != 0)
                    unkeyed++;
                else if (m->partition != partition_of(m->key, m->key_len, partitions))
                    misplaced++;
                if (m->partition >= 0 && m->partition < 64)
                    on_partition[m->partition]++;
                for (size_t i = 0; i < want->n; i++) {
                    if (!got[i] && strcmp(want->ids[i], ev->call_id) == 0) {
                        got[i] = 1;
                        found++;
                        break;
                    }
                }
            }
        }
        rd_kafka_message_destroy(m);
    }
    rd_kafka_consumer_close(rk);
    rd_kafka_destroy(rk);
    CHECK(oversize == 0, "%zu events over 4 KiB", oversize);
    CHECK(undecodable == 0, "%zu events not decodable", undecodable);
    CHECK(unkeyed == 0, "%zu events not keyed by their key hash", unkeyed);
    if (misplaced_out != NULL) /* a partitioner of the user's: the caller judges */
        *misplaced_out = misplaced;
    else
        CHECK(misplaced == 0, "%zu events not on their key's partition", misplaced);
    if (per_record > 1 && found >= 1000)
        CHECK(shared > 0, "no record held several events (events_per_record %u)", per_record);
    for (int p = 0; p < partitions && found >= 1000; p++)
        CHECK(on_partition[p] > 0, "no event on partition %d of %d", p, partitions);
    free(got);
    free(ev);
    return found;
}

/* The events in partitions [0, partitions) of topic, every record read from the first to the
 * high watermark (with duplicates: a record of several events counts each). */
static int64_t count_events(const char *topic, int32_t partitions)
{
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(partitions);
    int64_t hi[64] = {0}, events = 0;
    int32_t done = 0;
    uint64_t deadline = tg_now_mono_ms() + 60000;
    rd_kafka_t *rk;

    CHECK(partitions > 0 && partitions <= 64, "partitions");
    rk = new_consumer("pubtest-count");
    for (int32_t p = 0; p < partitions; p++) {
        int64_t lo = 0;

        CHECK(rd_kafka_query_watermark_offsets(rk, topic, p, &lo, &hi[p], 10000) ==
                  RD_KAFKA_RESP_ERR_NO_ERROR, "watermarks of %s[%d]", topic, (int)p);
        if (hi[p] > lo)
            rd_kafka_topic_partition_list_add(l, topic, p)->offset = lo;
        else
            done++;
    }
    CHECK(rd_kafka_assign(rk, l) == RD_KAFKA_RESP_ERR_NO_ERROR, "assign");
    rd_kafka_topic_partition_list_destroy(l);
    while (done < partitions && tg_now_mono_ms() < deadline) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, 200);
        struct proto_span sp[PROTO_RECORD_EVENTS_MAX];
        int nev = 0;

        if (m == NULL)
            continue;
        if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR && m->partition >= 0 && m->partition < 64) {
            if (proto_record_split(m->payload, m->len, sp, PROTO_RECORD_EVENTS_MAX, &nev) == 0)
                events += nev;
            if (m->offset + 1 == hi[m->partition])
                done++;
        }
        rd_kafka_message_destroy(m);
    }
    CHECK(done == partitions, "%s: read to the high watermark of %d of %d partitions", topic,
          (int)done, (int)partitions);
    rd_kafka_consumer_close(rk);
    rd_kafka_destroy(rk);
    return events;
}

static int count_segments(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    int n = 0;

    while (d != NULL && (de = readdir(d)) != NULL) {
        if (strncmp(de->d_name, "seg-", 4) == 0)
            n++;
    }
    if (d != NULL)
        closedir(d);
    return n;
}

static void yaml_diag(void *ud, int is_error, const char *line)
{
    (void)ud;
    fprintf(stderr, "%s: %s\n", is_error ? "error" : "warning", line);
}

static struct rt_publisher *make_pub_opts(const char *dir, const char *topic,
                                          const struct tg_kafka_opts *opts)
{
    struct rt_publisher_config cfg = {.brokers = brokers, .topic = topic, .spool_dir = dir,
                                      .spool_max_bytes = 64u << 20, .spool_segment_bytes = 1u << 20,
                                      .reject_when_full = 0, .fsync_interval_ms = 0,
                                      .events_per_record = per_record,
                                      .kafka_opts = opts};
    char err[512];
    struct rt_publisher *pub = rt_publisher_create(&cfg, err, sizeof(err));

    CHECK(pub != NULL, "publisher: %s", err);
    return pub;
}

static struct rt_publisher *make_pub(const char *dir, const char *topic)
{
    return make_pub_opts(dir, topic, NULL);
}

/* Kafka options from the YAML of a config's kafka: section (the caller frees them). */
static struct tg_kafka_opts *opts_from_yaml(const char *name, const char *yaml)
{
    struct tg_kafka_opts *opts = calloc(1, sizeof(*opts));
    struct tg_yaml y;
    yaml_node_t *kafka = NULL;

    CHECK(opts != NULL, "opts");
    CHECK(tg_yaml_open(&y, name, yaml, strlen(yaml), yaml_diag, NULL) == 0, "%s", name);
    TG_YAML_FOR_PAIRS(tg_yaml_root(&y), pair)
    kafka = tg_yaml_node(&y, pair->value);
    CHECK(tg_kafka_opts_parse(opts, &y, kafka, "kafka") == 0, "%s: the kafka options", name);
    tg_yaml_close(&y);
    return opts;
}

/* A fresh topic "<topic>.<suffix>" of `partitions` partitions; its name in out. */
static void new_topic(char *out, size_t cap, const char *topic, const char *suffix,
                      int partitions)
{
    char line[160];

    snprintf(out, cap, "%s.%s", topic, suffix);
    snprintf(line, sizeof(line), "topic %s %d", out, partitions);
    kafka_ctl(line);
}

static void submit_n(struct rt_publisher *pub, struct seen *s, int n)
{
    struct proto_event *ev = malloc(sizeof(*ev));

    for (int i = 0; i < n; i++) {
        make_event(ev, (int)s->n);
        CHECK(rt_publisher_submit(pub, ev) == 0, "submit %d", i);
        CHECK(s->n < s->cap, "seen full");
        memcpy(s->ids[s->n++], ev->call_id, PROTO_CALL_ID_CAP);
    }
    free(ev);
}

int main(int argc, char **argv)
{
    char dir[128], topic[64];
    struct seen s = {0};
    struct rt_publisher *pub;
    size_t got;

    (void)argc;
    if (getenv("TG_PUBLISHER_TEST_PER_RECORD") != NULL)
        per_record = (uint32_t)atoi(getenv("TG_PUBLISHER_TEST_PER_RECORD"));
    printf("# events_per_record %u\n", per_record > 0 ? per_record : 1);
    brokers = getenv("TG_KAFKA_BROKERS");
    ctl = getenv("TG_KAFKA_CTL");
    if (brokers == NULL || brokers[0] == '\0' || ctl == NULL || ctl[0] == '\0')
        dk_client_reexec(argv[0], "TG_PUBLISHER_TEST_NESTED", 3, "tollgate.control.v1:1");
    snprintf(dir, sizeof(dir), "/tmp/tg-pubtest.XXXXXX");
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    snprintf(topic, sizeof(topic), "tg.pubtest.%u", (unsigned)(tg_now_epoch_ms() % 100000000u));
    s.cap = 20000;
    s.ids = calloc(s.cap, sizeof(*s.ids));

    /* 1. 10,000 events, all on the topic, nothing left in the spool. */
    pub = make_pub(dir, topic);
    submit_n(pub, &s, 10000);
    CHECK(rt_publisher_drain(pub, 60000) == 0, "drain of 10,000 events timed out");
    rt_publisher_destroy(&pub);
    CHECK(count_segments(dir) == 0, "spool not empty after drain: %d segments", count_segments(dir));
    got = consume_topic(topic, &s, 60000, NULL);
    CHECK(got == 10000, "10,000 submitted, %zu distinct call ids consumed", got);
    printf("ok 1 - 10,000 events delivered, spool empty\n");

    /* 2. Brokers down while submitting; everything arrives after they return. */
    s.n = 0;
    pub = make_pub(dir, topic);
    kafka_ctl("down all");
    {
        uint64_t t0 = tg_now_mono_us();
        submit_n(pub, &s, 2000);
        printf("# 2,000 submits with brokers down took %.1f ms\n",
               (double)(tg_now_mono_us() - t0) / 1000.0);
    }
    tg_sleep_ms(3000);
    CHECK(rt_publisher_drain(pub, 100) == TG_ETIMEOUT, "drained while brokers were down?");
    kafka_ctl("up all");
    CHECK(rt_publisher_drain(pub, 60000) == 0, "drain after brokers returned timed out");
    rt_publisher_destroy(&pub);
    got = consume_topic(topic, &s, 60000, NULL);
    CHECK(got == 2000, "2,000 submitted during the outage, %zu arrived", got);
    printf("ok 2 - brokers down 3 s: every event delivered after recovery\n");

    /* 3. Replay: spooled while Kafka is down, publisher destroyed, the next one delivers. */
    s.n = 0;
    kafka_ctl("down all");
    pub = make_pub(dir, topic);
    submit_n(pub, &s, 500);
    rt_publisher_destroy(&pub);
    CHECK(count_segments(dir) > 0, "events should be waiting in the spool");
    kafka_ctl("up all");
    pub = make_pub(dir, topic);
    CHECK(rt_publisher_drain(pub, 60000) == 0, "replay drain timed out");
    rt_publisher_destroy(&pub);
    CHECK(count_segments(dir) == 0, "spool not empty after replay");
    got = consume_topic(topic, &s, 60000, NULL);
    CHECK(got == 500, "500 spooled before restart, %zu arrived", got);
    printf("ok 3 - spooled events replayed by the next publisher\n");

    /* 4. Acknowledgements held back while the brokers stay up (a 3 s round trip on every
     * broker, as when a follower died and acks=all waits for it to leave the ISR). An
     * idempotent librdkafka 2.0.2 producer would keep a ready batch it may not send (5 records
     * of the partition unacknowledged) and poll with a zero timeout until an answer comes; the
     * publisher's producer is not idempotent: the process must not burn a core, and every
     * event still arrives. */
    s.n = 0;
    pub = make_pub(dir, topic);
    submit_n(pub, &s, 50);
    CHECK(rt_publisher_drain(pub, 60000) == 0, "drain before the slow round trips timed out");
    /* librdkafka's first statistics (leaders, connections) come a second after the start, as
     * in a router that has run for a while. */
    tg_sleep_ms(1500);
    kafka_ctl("rtt all 3000");
    {
        struct rusage r0, r1;
        uint64_t t0 = 0, cpu_us, wall_us;

        for (int i = 0; i < 60; i++) {
            /* What is measured starts a second in, once every partition has requests out. */
            if (i == 10) {
                getrusage(RUSAGE_SELF, &r0);
                t0 = tg_now_mono_us();
            }
            submit_n(pub, &s, 10);
            tg_sleep_ms(100);
        }
        getrusage(RUSAGE_SELF, &r1);
        wall_us = tg_now_mono_us() - t0;
        cpu_us = (uint64_t)((r1.ru_utime.tv_sec - r0.ru_utime.tv_sec) * 1000000 +
                            (r1.ru_utime.tv_usec - r0.ru_utime.tv_usec) +
                            (r1.ru_stime.tv_sec - r0.ru_stime.tv_sec) * 1000000 +
                            (r1.ru_stime.tv_usec - r0.ru_stime.tv_usec));
        printf("# 600 events with 3 s round trips, the last %.1f s of them: %.2f s of CPU\n",
               (double)wall_us / 1e6, (double)cpu_us / 1e6);
        CHECK(cpu_us * 4 < wall_us, "%.2f s of CPU in %.1f s while acknowledgements were held "
              "back: a producer thread spins", (double)cpu_us / 1e6, (double)wall_us / 1e6);
    }
    kafka_ctl("rtt all 0");
    {
        uint64_t t0 = tg_now_mono_us();

        CHECK(rt_publisher_drain(pub, 60000) == 0, "drain after the slow round trips timed out");
        printf("# drained %.2f s after the round trips returned to normal\n",
               (double)(tg_now_mono_us() - t0) / 1e6);
    }
    rt_publisher_destroy(&pub);
    got = consume_topic(topic, &s, 60000, NULL);
    CHECK(got == 650, "650 submitted around the slow round trips, %zu arrived", got);
    printf("ok 4 - acknowledgements held back: no spinning producer, every event delivered\n");

    /* 5. While broker 1 holds acknowledgements back, the leadership of its partition moves to
     * a broker the producer has no connection to, and broker 1 dies: the partition's events
     * must go on through a new connection. Broker 3 is down until the move, so the publisher
     * never connected to it. */
    {
        char t5[96], line[160];
        uint64_t t0;

        CHECK(strchr(brokers, ',') != NULL && strchr(strchr(brokers, ',') + 1, ',') != NULL,
              "case 5 needs devkafka with 3 brokers, TG_KAFKA_BROKERS is %s", brokers);
        snprintf(t5, sizeof(t5), "%s.moved", topic);
        kafka_ctl("down 3");
        snprintf(line, sizeof(line), "topic %s 2", t5);
        kafka_ctl(line);
        snprintf(line, sizeof(line), "leader %s 0 1", t5);
        kafka_ctl(line);
        snprintf(line, sizeof(line), "leader %s 1 2", t5);
        kafka_ctl(line);
        s.n = 0;
        pub = make_pub(dir, t5);
        submit_n(pub, &s, 100);
        CHECK(rt_publisher_drain(pub, 60000) == 0, "drain before the leader move timed out");
        kafka_ctl("rtt 1 5000");
        for (int i = 0; i < 20; i++) {
            submit_n(pub, &s, 10);
            tg_sleep_ms(100);
        }
        kafka_ctl("up 3");
        snprintf(line, sizeof(line), "leader %s 0 3", t5);
        kafka_ctl(line);
        kafka_ctl("down 1");
        for (int i = 0; i < 10; i++) {
            submit_n(pub, &s, 10);
            tg_sleep_ms(100);
        }
        t0 = tg_now_mono_us();
        CHECK(rt_publisher_drain(pub, 20000) == 0,
              "events of the partition whose leader moved were not delivered in 20 s");
        printf("# drained %.2f s after partition 0 moved to a broker not connected\n",
               (double)(tg_now_mono_us() - t0) / 1e6);
        rt_publisher_destroy(&pub);
        kafka_ctl("up 1");
        kafka_ctl("rtt 1 0");
        got = consume_topic(t5, &s, 60000, NULL);
        CHECK(got == 400, "400 submitted around the leader move, %zu arrived", got);
        printf("ok 5 - a partition whose leader moved to a broker not connected while "
               "acknowledgements were held back: every event delivered\n");
    }

    /* 6. The broker answers a produce request with OUT_OF_ORDER_SEQUENCE_NUMBER, as a new
     * partition leader can after a leader change under load. librdkafka 2.0.2 would declare an
     * idempotent producer out of step (a fatal error: every produce call failing from then
     * on); to the publisher's producer it is one failed delivery: those events are produced
     * again from the spool, and the same producer goes on. */
    {
        char t6[96];
        struct tg_buf mb;
        const char *p;
        uint64_t t0;

        new_topic(t6, sizeof(t6), topic, "fatal", 2);
        s.n = 0;
        pub = make_pub(dir, t6);
        submit_n(pub, &s, 100);
        CHECK(rt_publisher_drain(pub, 60000) == 0, "drain before the refused request timed out");
        kafka_ctl("error Produce OUT_OF_ORDER_SEQUENCE_NUMBER 1");
        t0 = tg_now_mono_us();
        for (int i = 0; i < 10; i++) {
            submit_n(pub, &s, 20);
            tg_sleep_ms(50);
        }
        CHECK(rt_publisher_drain(pub, 20000) == 0,
              "events submitted around a refused produce request were not delivered in 20 s");
        printf("# drained %.2f s after the refusal was provoked\n",
               (double)(tg_now_mono_us() - t0) / 1e6);
        CHECK(tg_buf_init(&mb, 1u << 16) == 0, "metrics buffer");
        rt_publisher_write_metrics(pub, &mb);
        p = strstr(mb.data, "\ntollgate_router_delivery_errors_total{reason=\"OUT_OF_ORDER_SEQUENCE_NUMBER\"} ");
        CHECK(p != NULL && strtoull(strchr(p + 1, ' ') + 1, NULL, 10) >= 1,
              "the refused request should be counted as a delivery error");
        tg_buf_fini(&mb);
        rt_publisher_destroy(&pub);
        got = consume_topic(t6, &s, 60000, NULL);
        CHECK(got == 300, "300 submitted around the refused request, %zu arrived", got);
        printf("ok 6 - a produce request refused: produced again, every event delivered\n");
    }

    /* 7. A partitioner given under librdkafka replaces the key-hash one: with librdkafka's
     * "random", most events land off their key's partition. */
    {
        struct tg_kafka_opts *opts =
            opts_from_yaml("t7.yaml", "kafka:\n  librdkafka: {partitioner: random}\n");
        char t7[96];
        size_t misplaced = 0;

        new_topic(t7, sizeof(t7), topic, "userpart", 4);
        s.n = 0;
        pub = make_pub_opts(dir, t7, opts);
        submit_n(pub, &s, 1000);
        CHECK(rt_publisher_drain(pub, 60000) == 0, "drain with the user's partitioner timed out");
        rt_publisher_destroy(&pub);
        got = consume_topic(t7, &s, 60000, &misplaced);
        CHECK(got == 1000, "1,000 submitted with the user's partitioner, %zu arrived", got);
        CHECK(misplaced >= 500, "the user's partitioner was not used: %zu of 1,000 events off "
              "their key's partition", misplaced);
        printf("ok 7 - the user's partitioner replaces the key-hash one (%zu of 1,000 events "
               "elsewhere)\n", misplaced);
        free(opts);
    }

    /* 8. librdkafka's queue has room for 16 messages: it refuses most of what the publisher
     * hands it (queue full), and the refused records are read again from the spool and
     * produced once: exactly 3,000 messages on the topic, 3,000 distinct call ids. */
    {
        struct tg_kafka_opts *opts = opts_from_yaml(
            "t8.yaml", "kafka:\n  librdkafka: {queue.buffering.max.messages: 16}\n");
        char t8[96], err[512];
        struct tg_buf mb;
        const char *p;
        unsigned long long refused = 0;
        int64_t total = 0;
        rd_kafka_conf_t *conf = rd_kafka_conf_new();
        rd_kafka_t *rk;

        new_topic(t8, sizeof(t8), topic, "smallq", 4);
        s.n = 0;
        pub = make_pub_opts(dir, t8, opts);
        submit_n(pub, &s, 3000);
        CHECK(rt_publisher_drain(pub, 60000) == 0, "drain through a 16-message queue timed out");
        CHECK(tg_buf_init(&mb, 65536) == 0, "buf");
        rt_publisher_write_metrics(pub, &mb);
        CHECK(!mb.truncated, "metrics truncated");
        p = strstr(mb.data, "\ntollgate_router_producer_queue_full_total ");
        CHECK(p != NULL && sscanf(p + strlen("\ntollgate_router_producer_queue_full_total "),
                                  "%llu", &refused) == 1, "no queue_full sample");
        tg_buf_fini(&mb);
        rt_publisher_destroy(&pub);
        CHECK(refused > 0, "librdkafka's queue never refused a record: the case tests nothing");
        got = consume_topic(t8, &s, 60000, NULL);
        CHECK(got == 3000, "3,000 submitted through a 16-message queue, %zu arrived", got);
        rd_kafka_conf_set(conf, "bootstrap.servers", brokers, err, sizeof(err));
        rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof(err));
        CHECK(rk != NULL, "watermarks: %s", err);
        for (int32_t part = 0; part < 4; part++) {
            int64_t lo = 0, hi = 0;

            CHECK(rd_kafka_query_watermark_offsets(rk, t8, part, &lo, &hi, 10000) ==
                      RD_KAFKA_RESP_ERR_NO_ERROR, "watermarks of %s[%d]", t8, (int)part);
            total += hi - lo;
        }
        rd_kafka_destroy(rk);
        if (per_record > 1) {
            int64_t events = count_events(t8, 4);

            CHECK(events == 3000, "3,000 events, %lld on the topic: some produced twice",
                  (long long)events);
            CHECK(total < 3000, "3,000 events in %lld records: none shared", (long long)total);
        } else {
            CHECK(total == 3000, "3,000 events, %lld messages on the topic: some produced twice",
                  (long long)total);
        }
        printf("ok 8 - a 16-message producer queue: 3,000 events, %lld records (%llu "
               "refusals, each produced again)\n", (long long)total, refused);
        free(opts);
    }

    free(s.ids);
    {
        char cmd[256];
        snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
        if (system(cmd) != 0)
            fprintf(stderr, "could not remove %s\n", dir);
    }
    printf("8 passed, 0 failed\n");
    return 0;
}
