/* spend_produce: test producer for spend-svc's integration tests and bench.
 *
 * Produces deterministic v1 events (proto_event_encode) to the events topic with an idempotent
 * acks=all producer; event i of a run always has the same content, so re-sending it is a true
 * duplicate. Prints what was produced as one key=value line, so a test can compare Postgres
 * and Redis with exact expected totals:
 *   produced=N distinct=D requests=R failures=F prompt_tokens=P completion_tokens=C cost_nusd=X
 *
 *   spend_produce --brokers B --topic T --count N [--start I] [--run HEX8] [--dup-pct P]
 *                 [--keys K] [--teams T] [--rate EPS] [--key-hash H] [--cost-nusd C]
 *                 [--malformed N] [--oversized N] [--per-record N]
 *   spend_produce --brokers B --topic CONTROL --key-record HASH --max-budget-nusd N
 *                 [--budget-duration 1d] [--team TEAM] [--alias ALIAS]
 *   spend_produce --brokers B --topic CONTROL --team-record TEAM --max-budget-nusd N
 *                 [--budget-duration 1d] [--alias ALIAS]
 *   spend_produce --brokers B --topic CONTROL --expect-block HASH [--timeout-s S] [--unblocked]
 *
 * Duplicates: with --dup-pct P, after each event, with probability P/100 (deterministic), an
 * earlier event of the run is sent again. Keys: key_hash = sha256("key-<k>") for k in [0, K),
 * team "team-<k % T>", model group "group-<i % 4>"; every 17th event failed (status 500).
 *
 * Records: one event each, or with --per-record N (2..PROTO_RECORD_EVENTS_MAX) several, as
 * router-svc may write them: the events of one key joined by newlines, a record sent when it
 * holds N events or the next would take it past PROTO_RECORD_MAX_BYTES, and the rest at the
 * end. The malformed events then share records (key "bad"), and so do the oversized ones
 * ("big"). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <librdkafka/rdkafka.h>

#include "proto_control.h"
#include "proto_event.h"
#include "tg_ids.h"
#include "tg_time.h"

struct opts {
    const char *brokers;
    const char *topic;
    long count;
    long start;
    unsigned int run;
    int dup_pct;
    int keys;
    int teams;
    long rate;
    const char *key_hash;
    long long cost_nusd;
    long malformed;
    long oversized;
    int per_record;
    const char *key_record;
    const char *team_record; /* team:<id>, router-svc's stored form of a team */
    const char *scope;       /* --expect-block: "key" (default) or "team" */
    long long max_budget_nusd;
    const char *budget_duration;
    const char *team;
    const char *alias;
    const char *expect_block;
    int timeout_s;
    int unblocked;
};

static int delivery_failures;

static void dr_cb(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    (void)rk;
    (void)opaque;
    if (m->err) {
        delivery_failures++;
        fprintf(stderr, "spend_produce: delivery failed: %s\n", rd_kafka_err2str(m->err));
    }
}

static rd_kafka_t *make_producer(const char *brokers)
{
    char err[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();

    if (rd_kafka_conf_set(conf, "bootstrap.servers", brokers, err, sizeof(err)) ||
        rd_kafka_conf_set(conf, "acks", "all", err, sizeof(err)) ||
        rd_kafka_conf_set(conf, "enable.idempotence", "true", err, sizeof(err)) ||
        rd_kafka_conf_set(conf, "linger.ms", "5", err, sizeof(err)) ||
        rd_kafka_conf_set(conf, "queue.buffering.max.messages", "200000", err, sizeof(err))) {
        fprintf(stderr, "spend_produce: %s\n", err);
        rd_kafka_conf_destroy(conf);
        return NULL;
    }
    rd_kafka_conf_set_dr_msg_cb(conf, dr_cb);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof(err));
    if (!rk)
        fprintf(stderr, "spend_produce: %s\n", err);
    return rk;
}

static int produce(rd_kafka_t *rk, const char *topic, const char *key, size_t keylen,
                   const void *val, size_t len)
{
    for (int tries = 0; tries < 1000; tries++) {
        rd_kafka_resp_err_t e = rd_kafka_producev(
            rk, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_KEY((void *)key, keylen),
            RD_KAFKA_V_VALUE((void *)val, len), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
            RD_KAFKA_V_END);
        if (e == RD_KAFKA_RESP_ERR_NO_ERROR)
            return 0;
        if (e != RD_KAFKA_RESP_ERR__QUEUE_FULL) {
            fprintf(stderr, "spend_produce: produce: %s\n", rd_kafka_err2str(e));
            return -1;
        }
        rd_kafka_poll(rk, 10);
    }
    return -1;
}

/* build: the deterministic event i of the run. */
static void build(const struct opts *o, long i, struct proto_event *ev, char *key_hash_out)
{
    char buf[64];
    int k = (int)(i % o->keys);
    int64_t now = (int64_t)tg_now_epoch_ms();

    proto_event_init(ev);
    ev->kind = PROTO_KIND_REQUEST;
    snprintf(ev->call_id, sizeof(ev->call_id), "%08x-%04lx-4%03lx-8%03lx-%012lx", o->run,
             (unsigned long)((i >> 40) & 0xffff), (unsigned long)((i >> 28) & 0xfff),
             (unsigned long)((i >> 16) & 0xfff), (unsigned long)(i & 0xffffffffffffUL));
    ev->ts_start_ms = now - 120;
    ev->ts_end_ms = now;
    proto_str_set(ev->endpoint, sizeof(ev->endpoint), "/v1/chat/completions");
    ev->stream = (int)(i & 1);
    if (o->key_hash) {
        proto_str_set(ev->key_hash, sizeof(ev->key_hash), o->key_hash);
    } else {
        snprintf(buf, sizeof(buf), "key-%d", k);
        tg_sha256_hex(buf, strlen(buf), ev->key_hash);
    }
    snprintf(ev->key_alias, sizeof(ev->key_alias), "alias-%d", k);
    if (o->team)
        proto_str_set(ev->team_id, sizeof(ev->team_id), o->team);
    else
        snprintf(ev->team_id, sizeof(ev->team_id), "team-%d", k % o->teams);
    snprintf(ev->user_id, sizeof(ev->user_id), "user-%d", k);
    snprintf(ev->model_group, sizeof(ev->model_group), "group-%ld", i % 4);
    snprintf(ev->model_requested, sizeof(ev->model_requested), "group-%ld", i % 4);
    snprintf(ev->deployment_id, sizeof(ev->deployment_id), "dep-%ld", i % 7);
    proto_str_set(ev->provider, sizeof(ev->provider), "openai");
    proto_str_set(ev->model, sizeof(ev->model), "gpt-test");
    ev->status = (i % 17 == 0) ? 500 : 200;
    if (ev->status != 200)
        proto_str_set(ev->error_class, sizeof(ev->error_class), "server_error");
    ev->prompt_tokens = 10 + i % 50;
    ev->completion_tokens = 5 + i % 30;
    ev->cost_nusd = o->cost_nusd >= 0 ? o->cost_nusd : 1000 + (i % 997) * 13;
    ev->latency_ms = 100 + i % 400;
    ev->attempts = 1 + (int32_t)(i % 3 == 0);
    if (ev->attempts > 1) {
        ev->trail_len = 1;
        snprintf(ev->trail[0].group, sizeof(ev->trail[0].group), "group-%ld", i % 4);
        snprintf(ev->trail[0].deployment_id, sizeof(ev->trail[0].deployment_id), "dep-x");
        ev->trail[0].http_status = 429;
        proto_str_set(ev->trail[0].error_class, sizeof(ev->trail[0].error_class),
                      "rate_limit");
        ev->trail[0].latency_ms = 12;
        proto_str_set(ev->trail[0].message, sizeof(ev->trail[0].message),
                      "rate \"limited\" \\ retry");
    }
    ev->tags_len = 2;
    proto_str_set(ev->tags[0], sizeof(ev->tags[0]), "env:test");
    snprintf(ev->tags[1], sizeof(ev->tags[1]), "run:%08x", o->run);
    strcpy(key_hash_out, ev->key_hash);
}

/* A record being filled for one key (--per-record). */
struct pending {
    char key[PROTO_KEY_HASH_CAP];
    char buf[PROTO_RECORD_MAX_BYTES + TG_EVENT_MAX_BYTES + 1024];
    size_t len;
    int n;
};

static struct pending **pend;
static int npend;
static long records;

static int pending_send(rd_kafka_t *rk, const char *topic, struct pending *p)
{
    int rc = 0;

    if (p->n > 0)
        rc = produce(rk, topic, p->key, strlen(p->key), p->buf, p->len);
    records += p->n > 0;
    p->len = 0;
    p->n = 0;
    return rc;
}

/* send_event: one event of key, in a record of its own or added to the key's pending one. */
static int send_event(rd_kafka_t *rk, const struct opts *o, const char *key, const char *ev,
                      size_t len)
{
    struct pending *p = NULL;

    if (o->per_record <= 1) {
        records++;
        return produce(rk, o->topic, key, strlen(key), ev, len);
    }
    for (int i = 0; i < npend && !p; i++)
        if (strcmp(pend[i]->key, key) == 0)
            p = pend[i];
    if (!p) {
        struct pending **np = realloc(pend, (size_t)(npend + 1) * sizeof(*pend));
        if (!np || !(p = calloc(1, sizeof(*p))))
            return -1;
        pend = np;
        pend[npend++] = p;
        snprintf(p->key, sizeof(p->key), "%s", key);
    }
    if (p->n > 0 && p->len + 1 + len > PROTO_RECORD_MAX_BYTES && pending_send(rk, o->topic, p) < 0)
        return -1;
    if (len > sizeof(p->buf) - p->len - 1)
        return -1;
    if (p->n > 0)
        p->buf[p->len++] = '\n';
    memcpy(p->buf + p->len, ev, len);
    p->len += len;
    p->n++;
    return p->n >= o->per_record ? pending_send(rk, o->topic, p) : 0;
}

static int run_events(const struct opts *o)
{
    static char out[TG_EVENT_MAX_BYTES + 1];
    struct proto_event ev;
    char key_hash[PROTO_KEY_HASH_CAP];
    long produced = 0;
    long long requests = 0, failures = 0, prompt = 0, completion = 0, cost = 0;
    uint64_t t0 = tg_now_mono_ms();
    uint64_t rng = 0x9E3779B97F4A7C15ULL ^ o->run;
    rd_kafka_t *rk = make_producer(o->brokers);
    size_t len;

    if (!rk)
        return 1;
    for (long n = 0; n < o->count; n++) {
        long i = o->start + n;
        build(o, i, &ev, key_hash);
        if (proto_event_encode(&ev, out, sizeof(out), &len) != 0) {
            fprintf(stderr, "spend_produce: encode failed\n");
            return 1;
        }
        if (send_event(rk, o, key_hash, out, len) < 0)
            return 1;
        produced++;
        requests++;
        failures += ev.status >= 400;
        prompt += ev.prompt_tokens;
        completion += ev.completion_tokens;
        cost += ev.cost_nusd;
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        if (o->dup_pct > 0 && (int)(rng % 100) < o->dup_pct) {
            long j = o->start + (long)((rng >> 8) % (uint64_t)(n + 1));
            build(o, j, &ev, key_hash);
            proto_event_encode(&ev, out, sizeof(out), &len);
            if (send_event(rk, o, key_hash, out, len) < 0)
                return 1;
            produced++;
        }
        if (o->rate > 0) {
            uint64_t due = t0 + (uint64_t)(n + 1) * 1000 / (uint64_t)o->rate;
            while (tg_now_mono_ms() < due)
                rd_kafka_poll(rk, 1);
        }
        rd_kafka_poll(rk, 0);
    }
    for (long n = 0; n < o->malformed; n++) {
        char bad[128];
        int bl = snprintf(bad, sizeof(bad), "{\"v\":1,\"kind\":\"request\",\"call_id\":\"nope-%ld\"", n);
        if (send_event(rk, o, "bad", bad, (size_t)bl) < 0)
            return 1;
        produced++;
    }
    for (long n = 0; n < o->oversized; n++) {
        static char big[TG_EVENT_MAX_BYTES + 1024];
        memset(big, ' ', sizeof(big));
        big[0] = '{';
        big[sizeof(big) - 1] = '}';
        if (send_event(rk, o, "big", big, sizeof(big)) < 0)
            return 1;
        produced++;
    }
    for (int k = 0; k < npend; k++)
        if (pending_send(rk, o->topic, pend[k]) < 0)
            return 1;
    if (rd_kafka_flush(rk, 60000) != RD_KAFKA_RESP_ERR_NO_ERROR) {
        fprintf(stderr, "spend_produce: flush timed out\n");
        rd_kafka_destroy(rk);
        return 1;
    }
    rd_kafka_destroy(rk);
    if (delivery_failures)
        return 1;
    printf("produced=%ld distinct=%ld requests=%lld failures=%lld prompt_tokens=%lld "
           "completion_tokens=%lld cost_nusd=%lld records=%ld ms=%" PRIu64 "\n",
           produced, o->count, requests, failures, prompt, completion, cost, records,
           tg_now_mono_ms() - t0);
    return 0;
}

static int run_key_record(const struct opts *o)
{
    char key[160];
    char val[768];
    rd_kafka_t *rk = make_producer(o->brokers);
    int n;

    if (!rk)
        return 1;
    /* the stored form router-svc writes (router-svc/src/control.h, teams.h), fields spend-svc
     * reads */
    const char *d = o->budget_duration ? o->budget_duration : "1d";
    char *unit = NULL;
    long long dur = strtoll(d, &unit, 10);
    if (unit && *unit == 'm')
        dur *= 60;
    else if (unit && *unit == 'h')
        dur *= 3600;
    else if (unit && *unit == 'd')
        dur *= 86400;
    if (o->team_record) {
        snprintf(key, sizeof(key), "team:%s", o->team_record);
        n = snprintf(val, sizeof(val),
                     "{\"team_id\":\"%s\",\"team_alias\":\"%s\",\"models\":[],"
                     "\"max_budget_nusd\":%lld,\"budget_duration_s\":%lld,\"rpm_limit\":null,"
                     "\"tpm_limit\":null,\"max_parallel_requests\":null,\"metadata\":{},"
                     "\"blocked\":false}",
                     o->team_record, o->alias ? o->alias : "budget-team", o->max_budget_nusd, dur);
        goto send;
    }
    snprintf(key, sizeof(key), "key:%s", o->key_record);
    n = snprintf(val, sizeof(val),
                 "{\"key_hash\":\"%s\",\"key_alias\":\"%s\",\"team_id\":\"%s\","
                 "\"user_id\":\"\",\"models\":[],\"max_budget_nusd\":%lld,"
                 "\"budget_duration_s\":%lld,\"rpm_limit\":null,"
                 "\"metadata\":{\"source\":\"test\"},\"expires_epoch_ms\":0,"
                 "\"blocked\":false}",
                 o->key_record, o->alias ? o->alias : "budget-key", o->team ? o->team : "",
                 o->max_budget_nusd, dur);
send:
    if (produce(rk, o->topic, key, strlen(key), val, (size_t)n) < 0)
        return 1;
    rd_kafka_flush(rk, 30000);
    rd_kafka_destroy(rk);
    return delivery_failures ? 1 : 0;
}

/* run_expect_block: read the control topic from the beginning until block:<hash> has a value
 * (or, with --unblocked, a tombstone after a value). Exit 0 when seen. */
static int run_expect_block(const struct opts *o)
{
    char err[512];
    char want[160];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_t *rk;
    rd_kafka_topic_partition_list_t *l;
    const struct rd_kafka_metadata *md = NULL;
    rd_kafka_topic_t *t;
    uint64_t deadline = tg_now_mono_ms() + (uint64_t)o->timeout_s * 1000;
    int seen_block = 0;
    int found = 0, bad = 0;

    snprintf(want, sizeof(want), "block:%s", o->expect_block);
    if (rd_kafka_conf_set(conf, "bootstrap.servers", o->brokers, err, sizeof(err)) ||
        rd_kafka_conf_set(conf, "group.id", "spend-produce-check", err, sizeof(err)) ||
        rd_kafka_conf_set(conf, "enable.auto.commit", "false", err, sizeof(err))) {
        fprintf(stderr, "spend_produce: %s\n", err);
        return 1;
    }
    rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof(err));
    if (!rk) {
        fprintf(stderr, "spend_produce: %s\n", err);
        return 1;
    }
    rd_kafka_poll_set_consumer(rk);
    t = rd_kafka_topic_new(rk, o->topic, NULL);
    if (rd_kafka_metadata(rk, 0, t, &md, 5000) != RD_KAFKA_RESP_ERR_NO_ERROR ||
        md->topic_cnt < 1 || md->topics[0].partition_cnt < 1) {
        fprintf(stderr, "spend_produce: no metadata for %s\n", o->topic);
        return 1;
    }
    l = rd_kafka_topic_partition_list_new(md->topics[0].partition_cnt);
    for (int i = 0; i < md->topics[0].partition_cnt; i++)
        rd_kafka_topic_partition_list_add(l, o->topic, md->topics[0].partitions[i].id)->offset =
            RD_KAFKA_OFFSET_BEGINNING;
    rd_kafka_metadata_destroy(md);
    rd_kafka_topic_destroy(t);
    rd_kafka_assign(rk, l);
    rd_kafka_topic_partition_list_destroy(l);
    while (!found && tg_now_mono_ms() < deadline) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, 200);
        if (!m)
            continue;
        if (!m->err && m->key_len == strlen(want) && memcmp(m->key, want, m->key_len) == 0) {
            if (m->payload && m->len > 0) {
                struct proto_ctl_block b;
                char perr[160];

                seen_block = 1;
                /* spend-svc's block as the schema has it: reason, its scope and figures */
                if (proto_ctl_block_decode(m->payload, m->len, &b, perr, sizeof(perr)) != 0 ||
                    strcmp(b.reason, "budget_exceeded") != 0 ||
                    strcmp(b.scope, o->scope ? o->scope : "key") != 0 ||
                    b.period_start_ms < 0 || b.spend_nusd < b.max_budget_nusd ||
                    b.max_budget_nusd < 0) {
                    fprintf(stderr, "spend_produce: not a budget block of a %s: %.*s\n",
                            o->scope ? o->scope : "key",
                            (int)m->len, (const char *)m->payload);
                    bad = 1;
                }
                if (!bad && !o->unblocked) {
                    printf("block %.*s\n", (int)m->len, (const char *)m->payload);
                    found = 1;
                }
            } else if (seen_block && o->unblocked) {
                printf("unblocked\n");
                found = 1;
            }
        }
        rd_kafka_message_destroy(m);
        if (bad)
            break;
    }
    rd_kafka_consumer_close(rk);
    rd_kafka_destroy(rk);
    return found && !bad ? 0 : 1;
}

int main(int argc, char **argv)
{
    struct opts o = {.count = 0, .keys = 20, .teams = 5, .cost_nusd = -1, .timeout_s = 30,
                     .max_budget_nusd = 1000000000LL};

    o.run = (unsigned int)(tg_now_epoch_ms() & 0xffffffffu);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--unblocked") == 0) {
            o.unblocked = 1;
            continue;
        }
        if (!v) {
            fprintf(stderr, "spend_produce: %s needs a value\n", a);
            return 2;
        }
        i++;
        if (strcmp(a, "--brokers") == 0)
            o.brokers = v;
        else if (strcmp(a, "--topic") == 0)
            o.topic = v;
        else if (strcmp(a, "--count") == 0)
            o.count = atol(v);
        else if (strcmp(a, "--start") == 0)
            o.start = atol(v);
        else if (strcmp(a, "--run") == 0)
            o.run = (unsigned int)strtoul(v, NULL, 16);
        else if (strcmp(a, "--dup-pct") == 0)
            o.dup_pct = atoi(v);
        else if (strcmp(a, "--keys") == 0)
            o.keys = atoi(v) > 0 ? atoi(v) : 1;
        else if (strcmp(a, "--teams") == 0)
            o.teams = atoi(v) > 0 ? atoi(v) : 1;
        else if (strcmp(a, "--rate") == 0)
            o.rate = atol(v);
        else if (strcmp(a, "--key-hash") == 0)
            o.key_hash = v;
        else if (strcmp(a, "--cost-nusd") == 0)
            o.cost_nusd = atoll(v);
        else if (strcmp(a, "--malformed") == 0)
            o.malformed = atol(v);
        else if (strcmp(a, "--oversized") == 0)
            o.oversized = atol(v);
        else if (strcmp(a, "--per-record") == 0)
            o.per_record = atoi(v);
        else if (strcmp(a, "--key-record") == 0)
            o.key_record = v;
        else if (strcmp(a, "--team-record") == 0)
            o.team_record = v;
        else if (strcmp(a, "--scope") == 0)
            o.scope = v;
        else if (strcmp(a, "--max-budget-nusd") == 0)
            o.max_budget_nusd = atoll(v);
        else if (strcmp(a, "--budget-duration") == 0)
            o.budget_duration = v;
        else if (strcmp(a, "--team") == 0)
            o.team = v;
        else if (strcmp(a, "--alias") == 0)
            o.alias = v;
        else if (strcmp(a, "--expect-block") == 0)
            o.expect_block = v;
        else if (strcmp(a, "--timeout-s") == 0)
            o.timeout_s = atoi(v);
        else {
            fprintf(stderr, "spend_produce: unknown option %s\n", a);
            return 2;
        }
    }
    if (!o.brokers || !o.topic) {
        fprintf(stderr, "spend_produce: --brokers and --topic are required\n");
        return 2;
    }
    if (o.key_record || o.team_record)
        return run_key_record(&o);
    if (o.expect_block)
        return run_expect_block(&o);
    return run_events(&o);
}
