/* spend-svc consumer pipeline without a network, as the consumer loop drives it: the bytes of
 * a Kafka message -> proto_event_decode -> the batch (an event, or a dead letter with the
 * decoder's reason for what does not decode) -> the Postgres flush -> the Redis sink. Postgres
 * and Redis are closed loopback ports: a flush is refused as a connection problem and leaves
 * the batch whole for the retry (nothing counted, offsets kept), and the Redis sink, which has
 * not rebuilt from Postgres yet, holds nothing.
 *
 * Then the pipeline module itself (pipeline.h), fed through sp_pipeline_take and driven through
 * sp_pipeline_tend with the time given, without a consumer: partitions to lanes, dead-letter
 * classes, a batch shipped when full or due, Postgres unreachable (messages kept, nothing
 * counted, consumption held, the retry backoff doubling up to postgres.retry_max_ms, the Redis
 * commit gate let go), revoked partitions dropped and the hold released, the rebalance offsets
 * hook, shutdown_flush bounded by its deadline. The paths through live services are in
 * tests/integration/spend_pipeline_test.sh. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "config.h"
#include "pg_sink.h"
#include "pipeline.h"
#include "proto_event.h"
#include "redis_sink.h"
#include "tg_buf.h"
#include "tg_err.h"
#include "tg_limits.h"
#include "tg_time.h"

#define TOPIC "spend.unit.pipeline"

static struct proto_event ev;
static char wire[TG_EVENT_MAX_BYTES + 1];

/* closed_port: a loopback TCP port nothing listens on (bound, then released). */
static int closed_port(void)
{
    struct sockaddr_in sa;
    socklen_t len = sizeof(sa);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    int port;

    assert_true(fd >= 0);
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
    port = ntohs(sa.sin_port);
    close(fd);
    return port;
}

/* encode_event: the wire form of a request event number i of a key; returns its length. */
static size_t encode_event(int i, const char *key_hash)
{
    size_t n = 0;

    proto_event_init(&ev);
    snprintf(ev.call_id, sizeof(ev.call_id), "01a22bf1-1d36-71ad-a122-7335524b%04x", i);
    ev.ts_start_ms = 1767225600000LL + i;
    ev.ts_end_ms = ev.ts_start_ms + 250;
    snprintf(ev.endpoint, sizeof(ev.endpoint), "/v1/chat/completions");
    snprintf(ev.key_hash, sizeof(ev.key_hash), "%s", key_hash);
    snprintf(ev.team_id, sizeof(ev.team_id), "team-a");
    snprintf(ev.model_requested, sizeof(ev.model_requested), "gpt-main");
    snprintf(ev.model_group, sizeof(ev.model_group), "gpt-main");
    snprintf(ev.deployment_id, sizeof(ev.deployment_id), "main-1");
    snprintf(ev.provider, sizeof(ev.provider), "openai");
    snprintf(ev.model, sizeof(ev.model), "gpt-4o");
    ev.status = 200;
    ev.prompt_tokens = 10 + i;
    ev.completion_tokens = 5;
    ev.cost_nusd = 1000 * (i + 1);
    ev.latency_ms = 250;
    ev.attempts = 1;
    assert_int_equal(proto_event_encode(&ev, wire, sizeof(wire), &n), 0);
    return n;
}

/* take: what the consumer loop does with one message: decode it into the batch as an event, or
 * keep it as a dead letter with the decoder's reason. Returns 1 for an event, 0 for a dead
 * letter. */
static int take(struct sp_pg_batch *b, const char *payload, size_t len, int32_t partition,
                int64_t offset)
{
    char reason[SP_PG_DEAD_REASON_MAX];

    if (proto_event_decode(payload, len, &ev, reason, sizeof(reason)) == 0) {
        assert_int_equal(sp_pg_batch_add_event(b, &ev, partition, offset, 0, len), 0);
        return 1;
    }
    assert_true(reason[0] != '\0');
    assert_int_equal(sp_pg_batch_add_dead(b, reason, payload, len, partition, offset, 0), 0);
    return 0;
}

/* fill: three events on two partitions, and (with_dead) one message that is not an event. */
static void fill(struct sp_pg_batch *b, int with_dead)
{
    static const char garbage[] = "{\"v\":1,\"kind\":\"request\",\"call_id\":";
    size_t n;

    n = encode_event(1, "k1");
    assert_int_equal(take(b, wire, n, 0, 40), 1);
    n = encode_event(2, "k1");
    assert_int_equal(take(b, wire, n, 0, 41), 1);
    n = encode_event(3, "k2");
    assert_int_equal(take(b, wire, n, 3, 7), 1);
    if (with_dead)
        assert_int_equal(take(b, garbage, sizeof(garbage) - 1, 3, 8), 0);
}

static void test_decode_into_batch(void **state)
{
    struct sp_pg_batch *b = sp_pg_batch_create(16, 1 << 20);
    int32_t parts[4];
    int64_t next[4];

    (void)state;
    assert_non_null(b);
    fill(b, 1);
    assert_int_equal(sp_pg_batch_events(b), 3);
    assert_int_equal(sp_pg_batch_dead(b), 1);
    assert_int_equal(sp_pg_batch_messages(b), 4);
    /* the offsets the commit will store: one past the last message of each partition, dead
     * letters included (they are written in the same transaction) */
    assert_int_equal(sp_pg_batch_offsets(b, parts, next, 4), 2);
    assert_int_equal(sp_pg_batch_next_offset(b, 0), 42);
    assert_int_equal(sp_pg_batch_next_offset(b, 3), 9);
    sp_pg_batch_destroy(&b);
}

/* A flush of each path (the direct COPY for a batch of events only, the parameter-array
 * statement for one with a dead letter) that cannot reach Postgres: a connection error, no
 * counts, and the batch unchanged, so the retry sends the same rows and offsets. */
static void test_flush_unreachable_keeps_batch(void **state)
{
    char dsn[160];
    char err[256] = "";
    struct sp_pg *pg;

    (void)state;
    snprintf(dsn, sizeof(dsn), "host=127.0.0.1 port=%d dbname=spend user=spend connect_timeout=2",
             closed_port());
    pg = sp_pg_create(dsn, 2000, err, sizeof(err));
    assert_non_null(pg);
    for (int with_dead = 0; with_dead <= 1; with_dead++) {
        struct sp_pg_batch *b = sp_pg_batch_create(16, 1 << 20);
        struct sp_pg_flush_result res;

        assert_non_null(b);
        fill(b, with_dead);
        for (int attempt = 0; attempt < 2; attempt++) {
            int rc = sp_pg_batch_flush(pg, b, TOPIC, &res);

            assert_true(rc == TG_EUNAVAIL || rc == TG_ETIMEOUT);
            assert_int_equal(res.inserted, 0);
            assert_int_equal(res.duplicates, 0);
            assert_int_equal(res.dead, 0);
            assert_int_equal(res.nincr, 0);
            assert_int_equal(sp_pg_batch_events(b), 3);
            assert_int_equal(sp_pg_batch_dead(b), with_dead);
            assert_int_equal(sp_pg_batch_next_offset(b, 0), 42);
            assert_int_equal(sp_pg_batch_next_offset(b, 3), with_dead ? 9 : 8);
        }
        sp_pg_batch_destroy(&b);
    }
    sp_pg_destroy(&pg);
    assert_null(pg);
}

static int64_t no_period(void *ctx, int by_team, const char *subject)
{
    (void)ctx;
    (void)by_team;
    (void)subject;
    return 0;
}

static int no_subjects(void *ctx, int by_team, char (*subject)[SP_PG_SUBJECT_MAX],
                       int64_t *period_s, int cap)
{
    (void)ctx;
    (void)by_team;
    (void)subject;
    (void)period_s;
    (void)cap;
    return 0;
}

/* metric: the value of a sample in Prometheus text, by its name and labels (e.g. `x` or
 * `x{reason="invalid"}`), or -1 when absent. */
static double metric(const char *text, const char *name)
{
    char pat[160];
    const char *p;

    snprintf(pat, sizeof(pat), "\n%s ", name);
    p = strstr(text, pat);
    return p ? strtod(p + strlen(pat), NULL) : -1;
}

/* A committed batch's increments reach a Redis sink that has not rebuilt from Postgres yet
 * (Redis unreachable): they are not held, since the first rebuild reads them from Postgres, so
 * nothing grows while Redis is away. */
static void test_redis_sink_before_first_rebuild(void **state)
{
    char pg_dsn[160];
    char err[256] = "";
    struct sp_redis_sink_config rc;
    struct sp_redis_sink *s;
    struct sp_pg_incr incr[2];
    const int32_t parts[1] = {0};
    const int64_t first[1] = {40};
    const int64_t next[1] = {42};
    struct sp_pg_flush_result res;
    struct tg_buf mb;

    (void)state;
    snprintf(pg_dsn, sizeof(pg_dsn), "host=127.0.0.1 port=%d dbname=spend connect_timeout=1",
             closed_port());
    memset(&rc, 0, sizeof(rc));
    rc.host = "127.0.0.1";
    rc.port = closed_port();
    rc.timeout_ms = 200;
    rc.pending_max = 4;
    rc.day_ttl_s = 86400;
    rc.pg_dsn = pg_dsn;
    rc.topic = TOPIC;
    rc.pg_timeout_ms = 1000;
    rc.periods.period_of = no_period;
    rc.periods.list = no_subjects;
    s = sp_redis_sink_create(&rc, err, sizeof(err));
    assert_non_null(s);

    memset(incr, 0, sizeof(incr));
    for (int i = 0; i < 2; i++) {
        incr[i].minute_ms = 1767225600000LL + 60000LL * i;
        snprintf(incr[i].key_hash, sizeof(incr[i].key_hash), "k%d", i + 1);
        snprintf(incr[i].team_id, sizeof(incr[i].team_id), "team-a");
        snprintf(incr[i].model_group, sizeof(incr[i].model_group), "gpt-main");
        incr[i].requests = 1;
        incr[i].cost_nusd = 1000;
    }
    memset(&res, 0, sizeof(res));
    res.inserted = 2;
    res.incr = incr;
    res.nincr = 2;
    res.parts = parts;
    res.first = first;
    res.next = next;
    res.nparts = 1;
    sp_redis_sink_gate_lock(s);
    sp_redis_sink_add(s, &res);
    sp_redis_sink_gate_unlock(s);

    assert_int_equal(tg_buf_init(&mb, 1 << 16), 0);
    sp_redis_sink_write_metrics(s, &mb);
    assert_true(metric(mb.data, "tollgate_spend_redis_up") == 0);
    assert_true(metric(mb.data, "tollgate_spend_redis_pending_increments") == 0);
    assert_true(metric(mb.data, "tollgate_spend_redis_pending_overflows_total") == 0);
    assert_false(sp_redis_sink_is_up(s));
    tg_buf_fini(&mb);
    sp_redis_sink_destroy(&s);
    assert_null(s);
}

/* Pipeline ----------------------------------------------------------------------------------- */

#define MAX_WAIT_MS 200    /* batch.max_wait_ms of the pipelines below */
#define RETRY_MAX_MS 1000  /* postgres.retry_max_ms of the pipelines below */

static struct sp_config cfg; /* large: not on the stack */

/* A pipeline whose Postgres (lanes and the consumer thread's connection) is a closed port. */
struct fixture {
    struct sp_pipeline *p;
    struct sp_pg *pg;
    struct sp_redis_sink *redis;
};

static void fx_open(struct fixture *f, int writers, int max_events)
{
    char err[256] = "";
    struct sp_pipeline_modules m;

    memset(f, 0, sizeof(*f));
    sp_config_defaults(&cfg);
    snprintf(cfg.pg_dsn, sizeof(cfg.pg_dsn),
             "host=127.0.0.1 port=%d dbname=spend user=spend connect_timeout=2", closed_port());
    snprintf(cfg.kafka_topic, sizeof(cfg.kafka_topic), "%s", TOPIC);
    cfg.pg_query_timeout_ms = 2000;
    cfg.pg_retry_max_ms = RETRY_MAX_MS;
    cfg.pg_writers = writers;
    cfg.batch_max_events = max_events;
    cfg.batch_max_bytes = 1 << 20;
    cfg.batch_max_wait_ms = MAX_WAIT_MS;
    f->pg = sp_pg_create(cfg.pg_dsn, cfg.pg_query_timeout_ms, err, sizeof(err));
    assert_non_null(f->pg);
    f->p = sp_pipeline_create(&cfg, f->pg, err, sizeof(err));
    assert_non_null(f->p);
    memset(&m, 0, sizeof(m));
    sp_pipeline_attach(f->p, &m, NULL);
    sp_pipeline_schema_ready(f->p);
}

static void fx_close(struct fixture *f)
{
    sp_pipeline_destroy(&f->p);
    assert_null(f->p);
    sp_redis_sink_destroy(&f->redis);
    sp_pg_destroy(&f->pg);
}

/* feed: one message as the loop hands it over after a poll; returns sp_pipeline_take's code. */
static int feed(struct sp_pipeline *p, int32_t partition, int64_t offset, const void *payload,
                size_t len)
{
    struct sp_consumer_msg m;

    m.partition = partition;
    m.offset = offset;
    m.payload = payload;
    m.len = len;
    return sp_pipeline_take(p, &m);
}

/* feed_event: request event number i (key k1) at (partition, offset). */
static int feed_event(struct sp_pipeline *p, int i, int32_t partition, int64_t offset)
{
    size_t n = encode_event(i, "k1");

    return feed(p, partition, offset, wire, n);
}

static struct sp_pipeline_status status_of(const struct sp_pipeline *p)
{
    struct sp_pipeline_status st;

    sp_pipeline_status(p, &st);
    return st;
}


/* Partitions go to lane partition % writers (as unsigned), the same lane every time. */
static void test_lane_of(void **state)
{
    static const int want3[8] = {0, 1, 2, 0, 1, 2, 0, 1};
    struct fixture f;

    (void)state;
    fx_open(&f, 3, 16);
    assert_int_equal(status_of(f.p).lanes, 3);
    for (int32_t part = 0; part < 8; part++)
        assert_int_equal(sp_pipeline_lane_of(f.p, part), want3[part]);
    assert_int_equal(sp_pipeline_lane_of(f.p, 23), 2);
    assert_int_equal(sp_pipeline_lane_of(f.p, INT32_MAX), 1); /* 2147483647 % 3 */
    assert_int_equal(sp_pipeline_lane_of(f.p, -1), 0);        /* 4294967295 % 3 */
    fx_close(&f);

    fx_open(&f, 1, 16);
    for (int32_t part = 0; part < 64; part++)
        assert_int_equal(sp_pipeline_lane_of(f.p, part), 0);
    fx_close(&f);
}

/* A writer count outside 1..SP_CONFIG_WRITERS_MAX is refused with a reason, not an overflow of
 * the lanes. */
static void test_create_refuses_writers(void **state)
{
    char err[256] = "";

    (void)state;
    sp_config_defaults(&cfg);
    cfg.pg_writers = SP_CONFIG_WRITERS_MAX + 1;
    assert_null(sp_pipeline_create(&cfg, NULL, err, sizeof(err)));
    assert_non_null(strstr(err, "postgres.writers"));
    cfg.pg_writers = 0;
    err[0] = '\0';
    assert_null(sp_pipeline_create(&cfg, NULL, err, sizeof(err)));
    assert_non_null(strstr(err, "postgres.writers"));
}

/* Messages that are not events become dead letters of their class (too_large when longer than
 * an event may be, invalid otherwise) in their partition's lane, held with the events until a
 * commit; nothing is counted as written before that. */
static void test_dead_letter_classes(void **state)
{
    static const char garbage[] = "{\"v\":1,\"kind\":\"request\",\"call_id\":";
    static char big[TG_EVENT_MAX_BYTES + 100];
    struct fixture f;
    struct sp_pipeline_status st;
    struct tg_buf mb;

    (void)state;
    fx_open(&f, 2, 16);
    memset(big, 'x', sizeof(big));
    big[0] = '{';
    assert_int_equal(feed(f.p, 0, 10, garbage, sizeof(garbage) - 1), 0);
    assert_int_equal(feed(f.p, 1, 20, big, sizeof(big)), 0);
    assert_int_equal(feed(f.p, 3, 30, "", 0), 0);
    assert_int_equal(feed_event(f.p, 1, 1, 21), 0);
    st = status_of(f.p);
    assert_int_equal(st.consumed, 4);
    assert_int_equal(st.held_messages, 4);
    assert_int_equal(st.held_dead[SP_PIPELINE_DEAD_INVALID], 2);
    assert_int_equal(st.held_dead[SP_PIPELINE_DEAD_TOO_LARGE], 1);
    assert_int_equal(st.held_dead[SP_PIPELINE_DEAD_REJECTED], 0);
    for (int c = 0; c < SP_PIPELINE_DEAD_CLASSES; c++)
        assert_int_equal(st.dead[c], 0);
    assert_int_equal(st.inserted, 0);
    assert_int_equal(st.batches, 0);
    assert_int_equal(st.failing, 0);
    assert_int_equal(st.commit_failures, 0);
    assert_int_equal(st.postgres_up, 1);

    assert_int_equal(tg_buf_init(&mb, 1 << 16), 0);
    sp_pipeline_write_metrics(f.p, &mb);
    assert_true(metric(mb.data, "tollgate_spend_events_consumed_total") == 4);
    assert_true(metric(mb.data, "tollgate_spend_rows_inserted_total") == 0);
    assert_true(metric(mb.data, "tollgate_spend_dead_letters_total{reason=\"invalid\"}") == 0);
    assert_true(metric(mb.data, "tollgate_spend_dead_letters_total{reason=\"too_large\"}") ==
                0);
    assert_true(metric(mb.data, "tollgate_spend_dead_letters_total{reason=\"rejected\"}") ==
                0);
    assert_true(metric(mb.data, "tollgate_spend_postgres_up") == 1);
    assert_true(metric(mb.data, "tollgate_spend_batches_total") == 0);
    tg_buf_fini(&mb);
    fx_close(&f);
}

/* A record of several events (one per line) is taken whole: each valid event held, each bad
 * line a dead letter of its own; a record of more events than a writer may put in one is one
 * dead letter; a record that does not fit in the filling batch is not split: the batch ships
 * first, and while it cannot, the record is handed back with nothing of it held. */
static void test_records_of_several_events(void **state)
{
    static char rec[PROTO_RECORD_MAX_BYTES];
    struct fixture f;
    struct sp_pipeline_status st;
    size_t len = 0, n;

    (void)state;
    fx_open(&f, 1, 8);
    for (int i = 0; i < 3; i++) {
        n = encode_event(100 + i, "k1");
        memcpy(rec + len, wire, n);
        len += n;
        rec[len++] = '\n';
    }
    memcpy(rec + len, "{\"v\":1}", 7); /* a bad fourth line */
    len += 7;
    assert_int_equal(feed(f.p, 0, 10, rec, len), 0);
    st = status_of(f.p);
    assert_int_equal(st.consumed, 4);
    assert_int_equal(st.held_messages, 4);
    assert_int_equal(st.held_dead[SP_PIPELINE_DEAD_INVALID], 1);

    /* 65 lines: refused whole */
    memset(rec, '\n', PROTO_RECORD_EVENTS_MAX + 1);
    assert_int_equal(feed(f.p, 0, 11, rec, PROTO_RECORD_EVENTS_MAX + 1), 0);
    st = status_of(f.p);
    assert_int_equal(st.consumed, 5);
    assert_int_equal(st.held_messages, 5);
    assert_int_equal(st.held_dead[SP_PIPELINE_DEAD_INVALID], 2);

    /* six events do not fit beside three held (max_events 8): the batch ships first, which
     * Postgres (a closed port) refuses: the record is handed back, nothing of it held */
    len = 0;
    for (int i = 0; i < 6; i++) {
        n = encode_event(200 + i, "k1");
        memcpy(rec + len, wire, n);
        len += n;
        rec[len++] = '\n';
    }
    assert_int_equal(feed(f.p, 0, 12, rec, len), TG_EAGAIN);
    st = status_of(f.p);
    assert_int_equal(st.consumed, 5);
    assert_int_equal(st.held_messages, 5);
    assert_int_equal(st.failing, 1);
    fx_close(&f);
}

/* A batch that becomes full is shipped; with Postgres unreachable the statement is not sent:
 * the messages stay held (nothing counted), consumption is held, Postgres is reported down,
 * the Redis commit gate is let go, and the retry backoff doubles from SP_PIPELINE_RETRY_MIN_MS
 * up to postgres.retry_max_ms, one retry per backoff and none before it is due. */
static void test_unreachable_holds_and_backs_off(void **state)
{
    static const uint64_t want[] = {200, 400, 800, RETRY_MAX_MS, RETRY_MAX_MS};
    char err[256] = "";
    static char pg_dsn[SP_CONFIG_DSN_MAX];
    struct sp_redis_sink_config rc;
    struct sp_pipeline_modules m;
    struct fixture f;
    struct sp_pipeline_status st;
    struct tg_buf mb;
    uint64_t t0;

    (void)state;
    fx_open(&f, 1, 4);
    /* a Redis sink at closed ports, so the commit gate is taken and let go for real */
    snprintf(pg_dsn, sizeof(pg_dsn), "%s", cfg.pg_dsn);
    memset(&rc, 0, sizeof(rc));
    rc.host = "127.0.0.1";
    rc.port = closed_port();
    rc.timeout_ms = 200;
    rc.pending_max = 4;
    rc.day_ttl_s = 86400;
    rc.pg_dsn = pg_dsn;
    rc.topic = TOPIC;
    rc.pg_timeout_ms = 1000;
    rc.periods.period_of = no_period;
    rc.periods.list = no_subjects;
    f.redis = sp_redis_sink_create(&rc, err, sizeof(err));
    assert_non_null(f.redis);
    memset(&m, 0, sizeof(m));
    m.redis = f.redis;
    sp_pipeline_attach(f.p, &m, NULL);

    for (int i = 0; i < 3; i++)
        assert_int_equal(feed_event(f.p, i, 0, 100 + i), 0);
    st = status_of(f.p);
    assert_int_equal(st.held_messages, 3);
    assert_int_equal(st.failing, 0);
    assert_int_equal(st.commit_failures, 0);

    t0 = tg_now_mono_ms();
    assert_int_equal(feed_event(f.p, 3, 0, 103), 0); /* kept, then the full batch ships */
    st = status_of(f.p);
    assert_int_equal(st.failing, 1);
    assert_int_equal(st.held_messages, 4);
    assert_int_equal(st.consumed, 4);
    assert_int_equal(st.inserted, 0);
    assert_int_equal(st.batches, 0);
    assert_int_equal(st.commit_failures, 1);
    assert_int_equal(st.postgres_up, 0);
    assert_int_equal(st.in_flight, 0);
    assert_int_equal(st.gate_held, 0);
    assert_int_equal(st.backoff_ms, SP_PIPELINE_RETRY_MIN_MS);
    assert_true(st.retry_at_ms >= t0 + SP_PIPELINE_RETRY_MIN_MS);
    assert_true(st.retry_at_ms <= tg_now_mono_ms() + SP_PIPELINE_RETRY_MIN_MS);

    for (size_t k = 0; k < sizeof(want) / sizeof(want[0]); k++) {
        uint64_t due = st.retry_at_ms;

        /* not due yet: no attempt */
        assert_true(sp_pipeline_tend(f.p, due - 1) > 0);
        assert_int_equal(status_of(f.p).commit_failures, 1 + k);
        assert_int_equal(status_of(f.p).backoff_ms, k == 0 ? SP_PIPELINE_RETRY_MIN_MS
                                                            : want[k - 1]);
        /* due: one more failed attempt, the backoff doubled and capped, the next retry one
         * backoff from now */
        t0 = tg_now_mono_ms();
        assert_true(sp_pipeline_tend(f.p, due) > 0);
        st = status_of(f.p);
        assert_true(st.retry_at_ms >= t0 + want[k]);
        assert_true(st.retry_at_ms <= tg_now_mono_ms() + want[k]);
        assert_int_equal(st.commit_failures, 2 + k);
        assert_int_equal(st.backoff_ms, want[k]);
        assert_int_equal(st.failing, 1);
        assert_int_equal(st.held_messages, 4);
        assert_int_equal(st.gate_held, 0);
    }

    assert_int_equal(tg_buf_init(&mb, 1 << 16), 0);
    sp_pipeline_write_metrics(f.p, &mb);
    assert_true(metric(mb.data, "tollgate_spend_events_consumed_total") == 4);
    assert_true(metric(mb.data, "tollgate_spend_rows_inserted_total") == 0);
    assert_true(metric(mb.data, "tollgate_spend_postgres_up") == 0);
    assert_true(metric(mb.data, "tollgate_spend_commit_failures_total") == 6);
    assert_true(metric(mb.data, "tollgate_spend_batches_total") == 0);
    tg_buf_fini(&mb);
    /* nothing reached the Redis sink */
    assert_int_equal(tg_buf_init(&mb, 1 << 16), 0);
    sp_redis_sink_write_metrics(f.redis, &mb);
    assert_true(metric(mb.data, "tollgate_spend_redis_pending_increments") == 0);
    tg_buf_fini(&mb);
    fx_close(&f);
}

/* A batch that is not full waits batch.max_wait_ms after its first message: before that the
 * loop's poll wait ends when it is due, then it ships (and here fails). */
static void test_due_batch_ships(void **state)
{
    struct fixture f;
    struct sp_pipeline_status st;
    uint64_t t0;
    int wait;

    (void)state;
    fx_open(&f, 2, 16);
    t0 = tg_now_mono_ms();
    assert_int_equal(feed_event(f.p, 1, 0, 5), 0);
    assert_int_equal(feed_event(f.p, 2, 1, 9), 0);
    wait = sp_pipeline_tend(f.p, t0);
    assert_true(wait > 0 && wait <= MAX_WAIT_MS);
    st = status_of(f.p);
    assert_int_equal(st.failing, 0);
    assert_int_equal(st.commit_failures, 0);
    assert_int_equal(st.held_messages, 2);

    assert_int_equal(sp_pipeline_tend(f.p, tg_now_mono_ms() + MAX_WAIT_MS), -1);
    st = status_of(f.p);
    assert_int_equal(st.failing, 1);
    assert_int_equal(st.commit_failures, 1);
    assert_int_equal(st.held_messages, 2);
    assert_int_equal(st.backoff_ms, SP_PIPELINE_RETRY_MIN_MS);
    fx_close(&f);
}

/* Revocation while Postgres is unreachable: the revoked partitions' messages are dropped (their
 * next owner reads them again from the Postgres offsets), the others stay held; once nothing
 * is held the next retry succeeds and releases consumption, with the backoff reset. The
 * offsets hook reads nothing from an unreachable Postgres (-1: none known). */
static void test_revoke_drops_and_releases(void **state)
{
    struct fixture f;
    struct sp_pipeline_status st;
    struct sp_consumer_hooks ch;
    const int32_t p3[1] = {3};
    const int32_t p0[1] = {0};
    const int32_t both[2] = {0, 3};
    int64_t next[2] = {77, 77};
    int rc;

    (void)state;
    fx_open(&f, 1, 16);
    sp_pipeline_consumer_hooks(f.p, &ch);
    assert_ptr_equal(ch.ctx, f.p);
    assert_non_null(ch.offsets_load);
    assert_non_null(ch.revoking);

    rc = ch.offsets_load(ch.ctx, both, 2, next);
    assert_true(rc == TG_EUNAVAIL || rc == TG_ETIMEOUT);
    assert_int_equal(next[0], -1);
    assert_int_equal(next[1], -1);
    assert_int_equal(status_of(f.p).failing, 0);

    assert_int_equal(feed_event(f.p, 1, 0, 40), 0);
    assert_int_equal(feed_event(f.p, 2, 0, 41), 0);
    assert_int_equal(feed_event(f.p, 3, 3, 7), 0);
    assert_int_equal(sp_pipeline_tend(f.p, tg_now_mono_ms() + MAX_WAIT_MS), -1);
    st = status_of(f.p);
    assert_int_equal(st.failing, 1);
    assert_int_equal(st.commit_failures, 1);
    assert_int_equal(st.backoff_ms, SP_PIPELINE_RETRY_MIN_MS);

    /* partition 3 revoked: the commit of everything fails, its message is dropped, partition
     * 0's are still held (a further failure: the backoff doubles) */
    ch.revoking(ch.ctx, p3, 1);
    st = status_of(f.p);
    assert_int_equal(st.held_messages, 2);
    assert_int_equal(st.commit_failures, 2);
    assert_int_equal(st.failing, 1);
    assert_int_equal(st.backoff_ms, 2 * SP_PIPELINE_RETRY_MIN_MS);

    /* partition 0 revoked: nothing left, no further backoff */
    ch.revoking(ch.ctx, p0, 1);
    st = status_of(f.p);
    assert_int_equal(st.held_messages, 0);
    assert_int_equal(st.commit_failures, 3);
    assert_int_equal(st.backoff_ms, 2 * SP_PIPELINE_RETRY_MIN_MS);
    assert_int_equal(st.failing, 1);

    /* the retry has nothing to commit: released, backoff reset, nothing counted */
    assert_int_equal(sp_pipeline_tend(f.p, st.retry_at_ms), -1);
    st = status_of(f.p);
    assert_int_equal(st.failing, 0);
    assert_int_equal(st.backoff_ms, SP_PIPELINE_RETRY_MIN_MS);
    assert_int_equal(st.commit_failures, 3);
    assert_int_equal(st.batches, 0);
    assert_int_equal(st.inserted, 0);
    assert_int_equal(st.consumed, 3);
    fx_close(&f);
}

/* shutdown_flush commits nothing when nothing is held (at once, no Postgres needed); with
 * Postgres unreachable it retries until its deadline, then gives up with the messages held
 * (read again at the next start). */
static void test_shutdown_flush_deadline(void **state)
{
    struct fixture f;
    uint64_t t0;
    uint64_t ms;

    (void)state;
    fx_open(&f, 2, 16);
    assert_int_equal(sp_pipeline_shutdown_flush(f.p, 500), 0);
    assert_int_equal(status_of(f.p).commit_failures, 0);

    assert_int_equal(feed_event(f.p, 1, 0, 1), 0);
    assert_int_equal(feed_event(f.p, 2, 1, 1), 0);
    assert_int_equal(feed_event(f.p, 3, 2, 1), 0);
    t0 = tg_now_mono_ms();
    assert_int_equal(sp_pipeline_shutdown_flush(f.p, 500), 3);
    ms = tg_now_mono_ms() - t0;
    assert_true(ms >= 500);
    assert_true(ms < 500 + 10000); /* bounded: one attempt's connect deadline past the end */
    assert_true(status_of(f.p).commit_failures >= 2);
    assert_int_equal(status_of(f.p).held_messages, 3);
    assert_int_equal(status_of(f.p).inserted, 0);
    fx_close(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decode_into_batch),
        cmocka_unit_test(test_flush_unreachable_keeps_batch),
        cmocka_unit_test(test_redis_sink_before_first_rebuild),
        cmocka_unit_test(test_lane_of),
        cmocka_unit_test(test_create_refuses_writers),
        cmocka_unit_test(test_dead_letter_classes),
        cmocka_unit_test(test_records_of_several_events),
        cmocka_unit_test(test_unreachable_holds_and_backs_off),
        cmocka_unit_test(test_due_batch_ships),
        cmocka_unit_test(test_revoke_drops_and_releases),
        cmocka_unit_test(test_shutdown_flush_deadline),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
