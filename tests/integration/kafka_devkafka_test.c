/* kafka_devkafka_test: the delivery guarantees the spend pipeline relies on, against devkafka.
 *
 * - 10,000 messages through an idempotent producer (acks=all) are all delivered once and all
 *   consumed once by a consumer group that commits manually; the committed offsets add up.
 * - A consumer that committed part of a topic and went away is replaced by a new member of the
 *   same group, which receives exactly the uncommitted rest: nothing twice, nothing lost.
 * - All brokers down for 3 s and back while producing and consuming: every message is still
 *   delivered and consumed exactly once.
 *
 * Uses TG_KAFKA_BROKERS / TG_KAFKA_CTL when both are set; otherwise starts its own devkafka
 * from TG_BUILD_DIR on kernel-picked loopback ports and stops it at the end. Each test uses its
 * own topic and group so it can share a broker with other tests. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <librdkafka/rdkafka.h>

#include "tg_time.h"

#define KT_MSGS 10000
#define KT_PARTIAL 4000
#define KT_DOWN_MS 3000
#define KT_DEADLINE_MS 90000
#define KT_QUIET_MS 1500
#define KT_START_TIMEOUT_MS 20000
#define KT_CTL_REPLY_MAX_BYTES 512
#define KT_NAME_MAX_BYTES 128
#define KT_PARTITIONS_MAX 16

struct kt_env {
    char brokers[512];
    char ctl[64];
    char dir[256];  /* temporary dir of our own devkafka, "" when shared */
    pid_t devkafka; /* our own devkafka, 0 when shared */
    unsigned seq;   /* topic/group name counter */
};

static struct kt_env kt_env;

/* Delivery report tally; count[] has KT_MSGS entries. */
struct kt_dr {
    unsigned char count[KT_MSGS];
    int ok;
    int failed;
    int dup;
    rd_kafka_resp_err_t first_err;
};

/* What a consumer saw; count[] has KT_MSGS entries. */
struct kt_seen {
    unsigned char count[KT_MSGS];
    int total;
    int distinct;
    int dup;
    int bad;
    int64_t last_offset[KT_PARTITIONS_MAX]; /* last consumed offset per partition, -1 = none */
};

/* ------------------------------------------------------------------------------- helpers */

static int kt_read_file(const char *path, char *buf, size_t cap)
{
    FILE *f = fopen(path, "r");
    size_t n;

    if (!f)
        return -1;
    n = fread(buf, 1, cap - 1, f);
    fclose(f);
    buf[n] = '\0';
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
        buf[--n] = '\0';
    return n > 0 ? 0 : -1;
}

/* Send one control line to devkafka; 0 when the answer starts with "ok". */
static int kt_ctl(const char *cmd, char *reply, size_t cap)
{
    struct sockaddr_in sin;
    struct timeval tv = {.tv_sec = 10, .tv_usec = 0};
    char host[64];
    char line[256];
    const char *colon = strrchr(kt_env.ctl, ':');
    size_t off = 0;
    int fd = -1;
    int rc = -1;

    reply[0] = '\0';
    if (!colon || (size_t)(colon - kt_env.ctl) >= sizeof(host))
        return -1;
    memcpy(host, kt_env.ctl, (size_t)(colon - kt_env.ctl));
    host[colon - kt_env.ctl] = '\0';
    memset(&sin, 0, sizeof(sin));
    sin.sin_family = AF_INET;
    sin.sin_port = htons((uint16_t)atoi(colon + 1));
    if (inet_pton(AF_INET, host, &sin.sin_addr) != 1)
        return -1;
    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        goto out;
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    if (connect(fd, (struct sockaddr *)&sin, sizeof(sin)) != 0)
        goto out;
    snprintf(line, sizeof(line), "%s\n", cmd);
    if (send(fd, line, strlen(line), MSG_NOSIGNAL) != (ssize_t)strlen(line))
        goto out;
    while (off + 1 < cap) {
        ssize_t n = recv(fd, reply + off, 1, 0);

        if (n <= 0 || reply[off] == '\n')
            break;
        off++;
    }
    reply[off] = '\0';
    rc = strncmp(reply, "ok", 2) == 0 ? 0 : -1;
out:
    if (fd >= 0)
        close(fd);
    return rc;
}

static void kt_ctl_must(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void kt_ctl_must(const char *fmt, ...)
{
    char cmd[256];
    char reply[KT_CTL_REPLY_MAX_BYTES];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(cmd, sizeof(cmd), fmt, ap);
    va_end(ap);
    if (kt_ctl(cmd, reply, sizeof(reply)) != 0)
        fail_msg("devkafka control '%s' answered '%s'", cmd, reply);
}

/* Unique topic with `partitions` partitions, created through the control channel. */
static void kt_topic_new(char *name, size_t cap, const char *what, int partitions)
{
    snprintf(name, cap, "tg.test.%s.%ld.%u", what, (long)getpid(), ++kt_env.seq);
    kt_ctl_must("topic %s %d", name, partitions);
}

static void kt_conf_set(rd_kafka_conf_t *conf, const char *k, const char *v)
{
    char err[256];

    if (rd_kafka_conf_set(conf, k, v, err, sizeof(err)) != RD_KAFKA_CONF_OK)
        fail_msg("conf %s=%s: %s", k, v, err);
}

static void kt_dr_cb(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    struct kt_dr *dr = opaque;
    intptr_t id = (intptr_t)m->_private - 1;

    (void)rk;
    if (m->err) {
        if (!dr->failed)
            dr->first_err = m->err;
        dr->failed++;
        return;
    }
    if (id < 0 || id >= KT_MSGS)
        return;
    dr->ok++;
    if (dr->count[id]++)
        dr->dup++;
}

static rd_kafka_t *kt_producer_new(struct kt_dr *dr)
{
    char err[256];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_t *rk;

    kt_conf_set(conf, "bootstrap.servers", kt_env.brokers);
    kt_conf_set(conf, "enable.idempotence", "true");
    kt_conf_set(conf, "acks", "all");
    kt_conf_set(conf, "linger.ms", "5");
    kt_conf_set(conf, "message.timeout.ms", "120000");
    kt_conf_set(conf, "reconnect.backoff.max.ms", "500");
    kt_conf_set(conf, "log.connection.close", "false");
    rd_kafka_conf_set_dr_msg_cb(conf, kt_dr_cb);
    rd_kafka_conf_set_opaque(conf, dr);
    rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof(err));
    if (!rk) {
        rd_kafka_conf_destroy(conf);
        fail_msg("producer: %s", err);
    }
    return rk;
}

/* Produce ids [from, to) with value "tg-%06d" and a key spreading them over partitions. */
static void kt_produce_range(rd_kafka_t *rk, const char *topic, int from, int to)
{
    char key[16];
    char val[16];
    rd_kafka_resp_err_t err;
    int tries;
    int i;

    for (i = from; i < to; i++) {
        snprintf(key, sizeof(key), "k%03d", i % 97);
        snprintf(val, sizeof(val), "tg-%06d", i);
        for (tries = 0; tries < 1000; tries++) {
            err = rd_kafka_producev(rk, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_KEY(key, strlen(key)),
                                    RD_KAFKA_V_VALUE(val, strlen(val)),
                                    RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                                    RD_KAFKA_V_OPAQUE((void *)(intptr_t)(i + 1)), RD_KAFKA_V_END);
            if (err != RD_KAFKA_RESP_ERR__QUEUE_FULL)
                break;
            rd_kafka_poll(rk, 10);
        }
        if (err)
            fail_msg("produce %d: %s", i, rd_kafka_err2str(err));
    }
    rd_kafka_poll(rk, 0);
}

static rd_kafka_t *kt_consumer_new(const char *group, const char *topic)
{
    char err[256];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_topic_partition_list_t *sub;
    rd_kafka_resp_err_t rerr;
    rd_kafka_t *rk;

    kt_conf_set(conf, "bootstrap.servers", kt_env.brokers);
    kt_conf_set(conf, "group.id", group);
    kt_conf_set(conf, "enable.auto.commit", "false");
    kt_conf_set(conf, "auto.offset.reset", "earliest");
    /* The mock holds a rebalance after a LeaveGroup for the group's session timeout before a
     * new member is answered (45 s by default); keep it short, well above the 3 s outage. */
    kt_conf_set(conf, "session.timeout.ms", "10000");
    kt_conf_set(conf, "heartbeat.interval.ms", "1000");
    kt_conf_set(conf, "reconnect.backoff.max.ms", "500");
    kt_conf_set(conf, "log.connection.close", "false");
    rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof(err));
    if (!rk) {
        rd_kafka_conf_destroy(conf);
        fail_msg("consumer: %s", err);
    }
    rd_kafka_poll_set_consumer(rk);
    sub = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(sub, topic, RD_KAFKA_PARTITION_UA);
    rerr = rd_kafka_subscribe(rk, sub);
    rd_kafka_topic_partition_list_destroy(sub);
    if (rerr)
        fail_msg("subscribe: %s", rd_kafka_err2str(rerr));
    return rk;
}

static void kt_consumer_destroy(rd_kafka_t *rk)
{
    rd_kafka_consumer_close(rk);
    rd_kafka_destroy(rk);
}

static void kt_seen_init(struct kt_seen *s)
{
    int i;

    memset(s, 0, sizeof(*s));
    for (i = 0; i < KT_PARTITIONS_MAX; i++)
        s->last_offset[i] = -1;
}

/* Poll one message (up to timeout_ms) into s. Returns 1 when a message was counted. */
static int kt_consume_one(rd_kafka_t *rk, struct kt_seen *s, int timeout_ms)
{
    rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, timeout_ms);
    char val[16];
    char *end = NULL;
    long id;
    int counted = 0;

    if (!m)
        return 0;
    if (m->err) {
        /* Transient errors (broker down) are reported here; the consumer recovers. */
        goto out;
    }
    if (m->len < 4 || m->len >= sizeof(val)) {
        s->bad++;
        goto out;
    }
    memcpy(val, m->payload, m->len);
    val[m->len] = '\0';
    id = strncmp(val, "tg-", 3) == 0 ? strtol(val + 3, &end, 10) : -1;
    if (id < 0 || id >= KT_MSGS || !end || *end != '\0') {
        s->bad++;
        goto out;
    }
    s->total++;
    if (s->count[id]++)
        s->dup++;
    else
        s->distinct++;
    if (m->partition >= 0 && m->partition < KT_PARTITIONS_MAX)
        s->last_offset[m->partition] = m->offset;
    counted = 1;
out:
    rd_kafka_message_destroy(m);
    return counted;
}

/* Consume until `want` distinct ids were seen or the deadline; then keep polling for
 * KT_QUIET_MS so that any extra (duplicate) delivery would be counted too. */
static void kt_consume_until(rd_kafka_t *rk, struct kt_seen *s, int want)
{
    uint64_t deadline = tg_now_mono_ms() + KT_DEADLINE_MS;
    uint64_t quiet_end;

    while (s->distinct < want && tg_now_mono_ms() < deadline)
        (void)kt_consume_one(rk, s, 100);
    quiet_end = tg_now_mono_ms() + KT_QUIET_MS;
    while (tg_now_mono_ms() < quiet_end)
        (void)kt_consume_one(rk, s, 100);
}

static void kt_flush(rd_kafka_t *rk, struct kt_dr *dr, int want)
{
    uint64_t deadline = tg_now_mono_ms() + KT_DEADLINE_MS;

    while (dr->ok + dr->failed < want && tg_now_mono_ms() < deadline)
        rd_kafka_poll(rk, 50);
    (void)rd_kafka_flush(rk, 5000);
}

/* Sum of the group's committed offsets over all partitions of topic. */
static int64_t kt_committed_sum(rd_kafka_t *rk, const char *topic, int partitions)
{
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(partitions);
    rd_kafka_resp_err_t err;
    int64_t sum = 0;
    int i;

    for (i = 0; i < partitions; i++)
        rd_kafka_topic_partition_list_add(l, topic, i);
    err = rd_kafka_committed(rk, l, 10000);
    if (err) {
        rd_kafka_topic_partition_list_destroy(l);
        fail_msg("committed: %s", rd_kafka_err2str(err));
    }
    for (i = 0; i < l->cnt; i++) {
        if (l->elems[i].offset >= 0)
            sum += l->elems[i].offset;
    }
    rd_kafka_topic_partition_list_destroy(l);
    return sum;
}

/* Poll until the consumer has an assignment (first group join takes ~3 s in the mock). */
static void kt_wait_assignment(rd_kafka_t *rk, struct kt_seen *s)
{
    uint64_t deadline = tg_now_mono_ms() + 30000;
    rd_kafka_topic_partition_list_t *a = NULL;
    int have = 0;

    while (!have && tg_now_mono_ms() < deadline) {
        (void)kt_consume_one(rk, s, 100);
        if (rd_kafka_assignment(rk, &a) == RD_KAFKA_RESP_ERR_NO_ERROR) {
            have = a->cnt > 0;
            rd_kafka_topic_partition_list_destroy(a);
            a = NULL;
        }
    }
    if (!have)
        fail_msg("consumer got no assignment within 30 s");
}

/* --------------------------------------------------------------------------------- tests */

/* 10,000 idempotent acks=all messages, each delivered once, each consumed once by a group
 * that commits manually; the committed offsets cover exactly the 10,000. */
static void test_all_consumed_with_manual_commits(void **state)
{
    static struct kt_dr dr;
    static struct kt_seen seen;
    char topic[KT_NAME_MAX_BYTES];
    char group[KT_NAME_MAX_BYTES + 8];
    rd_kafka_t *p;
    rd_kafka_t *c;
    rd_kafka_resp_err_t err;
    uint64_t next_commit;

    (void)state;
    memset(&dr, 0, sizeof(dr));
    kt_seen_init(&seen);
    kt_topic_new(topic, sizeof(topic), "all", 6);
    snprintf(group, sizeof(group), "%s.g", topic);

    p = kt_producer_new(&dr);
    kt_produce_range(p, topic, 0, KT_MSGS);
    kt_flush(p, &dr, KT_MSGS);
    assert_int_equal(rd_kafka_outq_len(p), 0);
    rd_kafka_destroy(p);
    if (dr.failed)
        fail_msg("%d delivery failures, first: %s", dr.failed, rd_kafka_err2str(dr.first_err));
    assert_int_equal(dr.ok, KT_MSGS);
    assert_int_equal(dr.dup, 0);

    c = kt_consumer_new(group, topic);
    next_commit = 1000;
    {
        uint64_t deadline = tg_now_mono_ms() + KT_DEADLINE_MS;

        while (seen.distinct < KT_MSGS && tg_now_mono_ms() < deadline) {
            if (kt_consume_one(c, &seen, 100) && (uint64_t)seen.total >= next_commit) {
                err = rd_kafka_commit(c, NULL, 0);
                if (err)
                    fail_msg("commit after %d: %s", seen.total, rd_kafka_err2name(err));
                next_commit += 1000;
            }
        }
    }
    kt_consume_until(c, &seen, KT_MSGS);
    /* _NO_OFFSET: everything consumed was already committed by the loop above. */
    err = rd_kafka_commit(c, NULL, 0);
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR && err != RD_KAFKA_RESP_ERR__NO_OFFSET)
        fail_msg("final commit: %s", rd_kafka_err2name(err));
    assert_int_equal(seen.bad, 0);
    assert_int_equal(seen.dup, 0);
    assert_int_equal(seen.distinct, KT_MSGS);
    assert_int_equal(seen.total, KT_MSGS);
    assert_int_equal(kt_committed_sum(c, topic, 6), KT_MSGS);
    kt_consumer_destroy(c);
}

/* Consumer A consumes and commits exactly KT_PARTIAL messages, then leaves; consumer B of the
 * same group gets exactly the other KT_MSGS - KT_PARTIAL, none of A's. */
static void test_restarted_consumer_gets_exactly_the_uncommitted_rest(void **state)
{
    static struct kt_dr dr;
    static struct kt_seen a;
    static struct kt_seen b;
    char topic[KT_NAME_MAX_BYTES];
    char group[KT_NAME_MAX_BYTES + 8];
    rd_kafka_topic_partition_list_t *offs;
    rd_kafka_resp_err_t err;
    rd_kafka_t *p;
    rd_kafka_t *c;
    uint64_t deadline;
    int overlap = 0;
    int missing = 0;
    int i;
    const int parts = 4;

    (void)state;
    memset(&dr, 0, sizeof(dr));
    kt_seen_init(&a);
    kt_seen_init(&b);
    kt_topic_new(topic, sizeof(topic), "restart", parts);
    snprintf(group, sizeof(group), "%s.g", topic);

    p = kt_producer_new(&dr);
    kt_produce_range(p, topic, 0, KT_MSGS);
    kt_flush(p, &dr, KT_MSGS);
    rd_kafka_destroy(p);
    assert_int_equal(dr.failed, 0);
    assert_int_equal(dr.ok, KT_MSGS);

    /* A: stop after exactly KT_PARTIAL messages; commit what it processed, per partition. */
    c = kt_consumer_new(group, topic);
    deadline = tg_now_mono_ms() + KT_DEADLINE_MS;
    while (a.total < KT_PARTIAL && tg_now_mono_ms() < deadline)
        (void)kt_consume_one(c, &a, 100);
    assert_int_equal(a.total, KT_PARTIAL);
    assert_int_equal(a.dup, 0);
    offs = rd_kafka_topic_partition_list_new(parts);
    for (i = 0; i < parts; i++) {
        if (a.last_offset[i] >= 0)
            rd_kafka_topic_partition_list_add(offs, topic, i)->offset = a.last_offset[i] + 1;
    }
    err = rd_kafka_commit(c, offs, 0);
    rd_kafka_topic_partition_list_destroy(offs);
    assert_int_equal(err, RD_KAFKA_RESP_ERR_NO_ERROR);
    assert_int_equal(kt_committed_sum(c, topic, parts), KT_PARTIAL);
    kt_consumer_destroy(c);

    /* B: same group, a new process as far as the broker is concerned. */
    c = kt_consumer_new(group, topic);
    kt_consume_until(c, &b, KT_MSGS - KT_PARTIAL);
    kt_consumer_destroy(c);

    for (i = 0; i < KT_MSGS; i++) {
        if (a.count[i] && b.count[i])
            overlap++;
        if (!a.count[i] && !b.count[i])
            missing++;
    }
    assert_int_equal(b.bad, 0);
    assert_int_equal(b.dup, 0);
    assert_int_equal(overlap, 0);
    assert_int_equal(missing, 0);
    assert_int_equal(b.total, KT_MSGS - KT_PARTIAL);
}

/* Half the messages before, half during a 3 s outage of every broker: after the brokers come
 * back, every message is delivered once and consumed once. */
static void test_brokers_down_3s_every_message_delivered(void **state)
{
    static struct kt_dr dr;
    static struct kt_seen seen;
    char topic[KT_NAME_MAX_BYTES];
    char group[KT_NAME_MAX_BYTES + 8];
    rd_kafka_t *p;
    rd_kafka_t *c;
    uint64_t t_end;
    int ok_at_down;
    int ok_at_up;
    const int half = KT_MSGS / 2;

    (void)state;
    memset(&dr, 0, sizeof(dr));
    kt_seen_init(&seen);
    kt_topic_new(topic, sizeof(topic), "outage", 6);
    snprintf(group, sizeof(group), "%s.g", topic);

    p = kt_producer_new(&dr);
    c = kt_consumer_new(group, topic);
    kt_wait_assignment(c, &seen);

    kt_produce_range(p, topic, 0, half);
    kt_flush(p, &dr, half);
    assert_int_equal(dr.ok, half);

    kt_ctl_must("down all");
    ok_at_down = dr.ok;
    kt_produce_range(p, topic, half, KT_MSGS);
    t_end = tg_now_mono_ms() + KT_DOWN_MS;
    while (tg_now_mono_ms() < t_end) {
        rd_kafka_poll(p, 10);
        (void)kt_consume_one(c, &seen, 10);
    }
    ok_at_up = dr.ok;
    kt_ctl_must("up all");

    /* Nothing produced during the outage can have been acknowledged during it. */
    assert_int_equal(ok_at_up, ok_at_down);

    kt_flush(p, &dr, KT_MSGS);
    if (dr.failed)
        fail_msg("%d delivery failures, first: %s", dr.failed, rd_kafka_err2str(dr.first_err));
    assert_int_equal(dr.ok, KT_MSGS);
    assert_int_equal(dr.dup, 0);
    rd_kafka_destroy(p);

    kt_consume_until(c, &seen, KT_MSGS);
    assert_int_equal(rd_kafka_commit(c, NULL, 0), RD_KAFKA_RESP_ERR_NO_ERROR);
    kt_consumer_destroy(c);
    assert_int_equal(seen.bad, 0);
    assert_int_equal(seen.dup, 0);
    assert_int_equal(seen.distinct, KT_MSGS);
    assert_int_equal(seen.total, KT_MSGS);
}

/* ----------------------------------------------------------------------- devkafka lifecycle */

static int kt_start_devkafka(void)
{
    const char *build = getenv("TG_BUILD_DIR");
    char bin[512];
    char bs[320];
    char ctl[320];
    char tmpl[] = "/tmp/tollgate-kafka-test.XXXXXX";
    uint64_t deadline;
    pid_t pid;
    int status;

    if (!build) {
        fprintf(stderr, "kafka_devkafka_test: neither TG_KAFKA_BROKERS/TG_KAFKA_CTL nor "
                        "TG_BUILD_DIR set\n");
        return -1;
    }
    snprintf(bin, sizeof(bin), "%s/deploy/local/devkafka/devkafka", build);
    if (!mkdtemp(tmpl))
        return -1;
    snprintf(kt_env.dir, sizeof(kt_env.dir), "%s", tmpl);
    snprintf(bs, sizeof(bs), "%s/bootstrap", kt_env.dir);
    snprintf(ctl, sizeof(ctl), "%s/control", kt_env.dir);
    pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        execl(bin, bin, "--brokers", "3", "--control", "127.0.0.1:0", "--control-file", ctl,
              "--bootstrap-file", bs, (char *)NULL);
        fprintf(stderr, "exec %s: %s\n", bin, strerror(errno));
        _exit(127);
    }
    kt_env.devkafka = pid;
    deadline = tg_now_mono_ms() + KT_START_TIMEOUT_MS;
    while (tg_now_mono_ms() < deadline) {
        if (waitpid(pid, &status, WNOHANG) == pid) {
            kt_env.devkafka = 0;
            fprintf(stderr, "kafka_devkafka_test: devkafka exited early (status %d)\n", status);
            return -1;
        }
        if (kt_read_file(bs, kt_env.brokers, sizeof(kt_env.brokers)) == 0 &&
            kt_read_file(ctl, kt_env.ctl, sizeof(kt_env.ctl)) == 0)
            return 0;
        tg_sleep_ms(50);
    }
    fprintf(stderr, "kafka_devkafka_test: devkafka not ready within %d ms\n", KT_START_TIMEOUT_MS);
    return -1;
}

static void kt_stop_devkafka(void)
{
    uint64_t deadline;
    int status;

    if (kt_env.devkafka > 0) {
        kill(kt_env.devkafka, SIGTERM);
        deadline = tg_now_mono_ms() + 10000;
        while (waitpid(kt_env.devkafka, &status, WNOHANG) == 0) {
            if (tg_now_mono_ms() > deadline) {
                kill(kt_env.devkafka, SIGKILL);
                waitpid(kt_env.devkafka, &status, 0);
                break;
            }
            tg_sleep_ms(20);
        }
        kt_env.devkafka = 0;
    }
    if (kt_env.dir[0])
        rmdir(kt_env.dir);
    kt_env.dir[0] = '\0';
}

static int kt_group_setup(void **state)
{
    const char *brokers = getenv("TG_KAFKA_BROKERS");
    const char *ctl = getenv("TG_KAFKA_CTL");
    char reply[KT_CTL_REPLY_MAX_BYTES];

    (void)state;
    memset(&kt_env, 0, sizeof(kt_env));
    if (brokers && *brokers && ctl && *ctl) {
        snprintf(kt_env.brokers, sizeof(kt_env.brokers), "%s", brokers);
        snprintf(kt_env.ctl, sizeof(kt_env.ctl), "%s", ctl);
    } else if (kt_start_devkafka() != 0) {
        kt_stop_devkafka();
        return -1;
    }
    if (kt_ctl("ping", reply, sizeof(reply)) != 0) {
        fprintf(stderr, "kafka_devkafka_test: control channel %s: '%s'\n", kt_env.ctl, reply);
        kt_stop_devkafka();
        return -1;
    }
    fprintf(stderr, "kafka_devkafka_test: brokers=%s control=%s\n", kt_env.brokers, kt_env.ctl);
    return 0;
}

static int kt_group_teardown(void **state)
{
    char reply[KT_CTL_REPLY_MAX_BYTES];

    (void)state;
    /* A failed outage test must not leave a shared broker down. */
    (void)kt_ctl("up all", reply, sizeof(reply));
    kt_stop_devkafka();
    rd_kafka_wait_destroyed(10000);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_all_consumed_with_manual_commits),
        cmocka_unit_test(test_restarted_consumer_gets_exactly_the_uncommitted_rest),
        cmocka_unit_test(test_brokers_down_3s_every_message_delivered),
    };

    return cmocka_run_group_tests(tests, kt_group_setup, kt_group_teardown);
}
