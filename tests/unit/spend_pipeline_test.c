/* spend-svc consumer pipeline without a network, as the consumer loop drives it: the bytes of
 * a Kafka message -> proto_event_decode -> the batch (an event, or a dead letter with the
 * decoder's reason for what does not decode) -> the Postgres flush -> the Redis sink. Postgres
 * and Redis are closed loopback ports: a flush is refused as a connection problem and leaves
 * the batch whole for the retry (nothing counted, offsets kept), and the Redis sink, which has
 * not rebuilt from Postgres yet, holds nothing. The paths through live services are in
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

#include "pg_sink.h"
#include "proto_event.h"
#include "redis_sink.h"
#include "tg_buf.h"
#include "tg_err.h"
#include "tg_limits.h"

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
        assert_int_equal(sp_pg_batch_add_event(b, &ev, partition, offset, len), 0);
        return 1;
    }
    assert_true(reason[0] != '\0');
    assert_int_equal(sp_pg_batch_add_dead(b, reason, payload, len, partition, offset), 0);
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

/* metric: the value of an unlabelled sample in Prometheus text, or -1 when absent. */
static double metric(const char *text, const char *name)
{
    char pat[128];
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decode_into_batch),
        cmocka_unit_test(test_flush_unreachable_keeps_batch),
        cmocka_unit_test(test_redis_sink_before_first_rebuild),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
