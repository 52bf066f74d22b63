/* alerter detector unit tests: which events, states and spends raise alerts, counted through
 * sp_alerter_get_stats(). Time is passed in. The webhook points at a closed loopback port, so
 * nothing is delivered; delivery is covered by the integration tests against fake Slack. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "alerter.h"
#include "proto_event.h"
#include "tg_buf.h"
#include "tg_err.h"

#define T0 5000000u
#define CLOSED_URL "http://127.0.0.1:9/slack/unit-test"

static struct sp_alerter *make(void (*tweak)(struct sp_alerter_config *))
{
    struct sp_alerter_config c;
    struct sp_alerter *al;
    char err[256];

    sp_alerter_config_defaults(&c);
    strcpy(c.default_webhook_url, CLOSED_URL);
    c.shutdown_wait_ms = 0;
    c.failure_window_s = 60;
    c.failure_count = 5;
    c.failure_min_requests = 10;
    c.failure_ratio = 0.5;
    c.slow_request_threshold_ms = 1000;
    c.slow_request_count = 3;
    c.slow_request_window_s = 60;
    c.reminder_interval_s = 100;
    c.consumer_lag_threshold = 1000;
    if (tweak != NULL)
        tweak(&c);
    al = sp_alerter_create(&c, err, sizeof(err));
    if (al == NULL)
        fail_msg("create: %s", err);
    return al;
}

static uint64_t raised(struct sp_alerter *al, int type)
{
    struct sp_alerter_stats st;

    sp_alerter_get_stats(al, &st);
    return st.alerts[type][SP_ALERT_RAISED];
}

static void request_event(struct proto_event *ev, const char *dep, const char *group,
                          int32_t status, int64_t latency_ms)
{
    proto_event_init(ev);
    ev->kind = PROTO_KIND_REQUEST;
    proto_str_set(ev->deployment_id, sizeof(ev->deployment_id), dep);
    proto_str_set(ev->model_group, sizeof(ev->model_group), group);
    ev->status = status;
    ev->latency_ms = latency_ms;
    ev->trail_len = 1;
    proto_str_set(ev->trail[0].deployment_id, sizeof(ev->trail[0].deployment_id), dep);
    proto_str_set(ev->trail[0].group, sizeof(ev->trail[0].group), group);
    ev->trail[0].http_status = status;
    if (status >= 500)
        proto_str_set(ev->trail[0].error_class, sizeof(ev->trail[0].error_class), "server_error");
}

static void test_failure_count(void **state)
{
    struct sp_alerter *al = make(NULL);
    struct proto_event ev;
    struct sp_alerter_stats st;

    (void)state;
    request_event(&ev, "dep-a", "gpt-main", 503, 10);
    for (int i = 0; i < 4; i++)
        sp_alerter_observe_event_at(al, &ev, T0 + (uint64_t)i);
    assert_int_equal(raised(al, SP_ALERT_DEPLOYMENT_FAILURES), 0);
    sp_alerter_observe_event_at(al, &ev, T0 + 10);
    assert_int_equal(raised(al, SP_ALERT_DEPLOYMENT_FAILURES), 1);
    /* Once per window, however many more failures. */
    for (int i = 0; i < 1000; i++)
        sp_alerter_observe_event_at(al, &ev, T0 + 20 + (uint64_t)i);
    assert_int_equal(raised(al, SP_ALERT_DEPLOYMENT_FAILURES), 1);
    /* Next window: raised again, and de-duplicated by (type, subject). */
    for (int i = 0; i < 5; i++)
        sp_alerter_observe_event_at(al, &ev, T0 + 60000 + (uint64_t)i);
    sp_alerter_get_stats(al, &st);
    assert_int_equal(st.alerts[SP_ALERT_DEPLOYMENT_FAILURES][SP_ALERT_RAISED], 2);
    assert_int_equal(st.alerts[SP_ALERT_DEPLOYMENT_FAILURES][SP_ALERT_SUPPRESSED], 1);
    sp_alerter_destroy(&al);
    assert_null(al);
    sp_alerter_destroy(&al);
}

static void test_failure_ratio_and_success(void **state)
{
    struct sp_alerter *al = make(NULL);
    struct proto_event ok, bad;

    (void)state;
    request_event(&ok, "dep-b", "gpt-main", 200, 10);
    request_event(&bad, "dep-b", "gpt-main", 429, 10);
    /* 4 failures of 9: under the count, and too few attempts for the ratio. */
    for (int i = 0; i < 5; i++)
        sp_alerter_observe_event_at(al, &ok, T0 + (uint64_t)i);
    for (int i = 0; i < 4; i++)
        sp_alerter_observe_event_at(al, &bad, T0 + 10 + (uint64_t)i);
    assert_int_equal(raised(al, SP_ALERT_DEPLOYMENT_FAILURES), 0);
    /* 10th attempt, 4 of 10 failed: under the ratio. */
    sp_alerter_observe_event_at(al, &ok, T0 + 20);
    assert_int_equal(raised(al, SP_ALERT_DEPLOYMENT_FAILURES), 0);
    /* 5 of 11 < 0.5 ... but 5 reaches failure_count. */
    sp_alerter_observe_event_at(al, &bad, T0 + 30);
    assert_int_equal(raised(al, SP_ALERT_DEPLOYMENT_FAILURES), 1);
    sp_alerter_destroy(&al);
}

static void ratio_only(struct sp_alerter_config *c)
{
    c->failure_count = 1000;
}

static void test_failure_ratio(void **state)
{
    struct sp_alerter *al = make(ratio_only);
    struct proto_event ok, bad;

    (void)state;
    request_event(&ok, "dep-c", "gpt-main", 200, 10);
    request_event(&bad, "dep-c", "gpt-main", 500, 10);
    for (int i = 0; i < 5; i++)
        sp_alerter_observe_event_at(al, &ok, T0 + (uint64_t)i);
    for (int i = 0; i < 4; i++)
        sp_alerter_observe_event_at(al, &bad, T0 + 10 + (uint64_t)i);
    assert_int_equal(raised(al, SP_ALERT_DEPLOYMENT_FAILURES), 0);
    sp_alerter_observe_event_at(al, &bad, T0 + 20); /* 5 of 10 */
    assert_int_equal(raised(al, SP_ALERT_DEPLOYMENT_FAILURES), 1);
    /* Client errors (400) are not deployment failures. */
    request_event(&bad, "dep-d", "gpt-main", 400, 10);
    for (int i = 0; i < 50; i++)
        sp_alerter_observe_event_at(al, &bad, T0 + 100 + (uint64_t)i);
    assert_int_equal(raised(al, SP_ALERT_DEPLOYMENT_FAILURES), 1);
    sp_alerter_destroy(&al);
}

/* Every attempt of the trail counts for its own deployment. */
static void test_trail_attempts(void **state)
{
    struct sp_alerter *al = make(NULL);
    struct proto_event ev;

    (void)state;
    request_event(&ev, "dep-ok", "gpt-main", 200, 10);
    ev.trail_len = 3;
    for (int i = 0; i < 2; i++) {
        proto_str_set(ev.trail[i].deployment_id, sizeof(ev.trail[i].deployment_id), "dep-bad");
        proto_str_set(ev.trail[i].error_class, sizeof(ev.trail[i].error_class), "timeout");
        ev.trail[i].http_status = 0;
    }
    proto_str_set(ev.trail[2].deployment_id, sizeof(ev.trail[2].deployment_id), "dep-ok");
    ev.trail[2].http_status = 200;
    sp_alerter_observe_event_at(al, &ev, T0);
    sp_alerter_observe_event_at(al, &ev, T0 + 1);
    assert_int_equal(raised(al, SP_ALERT_DEPLOYMENT_FAILURES), 0);
    sp_alerter_observe_event_at(al, &ev, T0 + 2); /* dep-bad: 6 failures */
    assert_int_equal(raised(al, SP_ALERT_DEPLOYMENT_FAILURES), 1);
    sp_alerter_destroy(&al);
}

static void test_cooldown_event(void **state)
{
    struct sp_alerter *al = make(NULL);
    struct proto_event ev;

    (void)state;
    request_event(&ev, "dep-e", "gpt-main", 503, 10);
    ev.kind = PROTO_KIND_COOLDOWN;
    sp_alerter_observe_event_at(al, &ev, T0);
    assert_int_equal(raised(al, SP_ALERT_DEPLOYMENT_FAILURES), 1);
    sp_alerter_destroy(&al);
}

static void test_slow_requests(void **state)
{
    struct sp_alerter *al = make(NULL);
    struct proto_event fast, slow;

    (void)state;
    request_event(&fast, "dep-f", "gpt-slow", 200, 1000);
    request_event(&slow, "dep-f", "gpt-slow", 200, 1001);
    for (int i = 0; i < 100; i++)
        sp_alerter_observe_event_at(al, &fast, T0 + (uint64_t)i);
    sp_alerter_observe_event_at(al, &slow, T0 + 200);
    sp_alerter_observe_event_at(al, &slow, T0 + 201);
    assert_int_equal(raised(al, SP_ALERT_SLOW_REQUESTS), 0);
    sp_alerter_observe_event_at(al, &slow, T0 + 202);
    assert_int_equal(raised(al, SP_ALERT_SLOW_REQUESTS), 1);
    for (int i = 0; i < 100; i++)
        sp_alerter_observe_event_at(al, &slow, T0 + 300 + (uint64_t)i);
    assert_int_equal(raised(al, SP_ALERT_SLOW_REQUESTS), 1);
    /* A window later the count starts again. */
    sp_alerter_observe_event_at(al, &slow, T0 + 60300);
    assert_int_equal(raised(al, SP_ALERT_SLOW_REQUESTS), 1);
    sp_alerter_destroy(&al);
}

static void test_dependency_state(void **state)
{
    struct sp_alerter *al = make(NULL);
    int type = SP_ALERT_SPEND_TRACKING_DEGRADED;

    (void)state;
    assert_int_equal(sp_alerter_dependency_state(al, "mysql", 0, T0), TG_EINVAL);
    for (int i = 0; i < 50; i++)
        assert_int_equal(sp_alerter_dependency_state(al, "postgres", 1, T0 + (uint64_t)i), 0);
    assert_int_equal(raised(al, type), 0);
    for (int i = 0; i < 1000; i++)
        sp_alerter_dependency_state(al, "postgres", 0, T0 + 100 + (uint64_t)i * 10);
    assert_int_equal(raised(al, type), 1);
    /* Reminder after reminder_interval_s (100 s) of being down, then every 100 s. */
    sp_alerter_dependency_state(al, "postgres", 0, T0 + 100 + 99999);
    assert_int_equal(raised(al, type), 1);
    sp_alerter_dependency_state(al, "postgres", 0, T0 + 100 + 100000);
    assert_int_equal(raised(al, type), 2);
    sp_alerter_dependency_state(al, "postgres", 0, T0 + 100 + 150000);
    assert_int_equal(raised(al, type), 2);
    sp_alerter_dependency_state(al, "postgres", 0, T0 + 100 + 200000);
    assert_int_equal(raised(al, type), 3);
    /* Recovery once, after recovery_hold_s (5 s) of reports of health. */
    for (int i = 0; i < 50; i++)
        sp_alerter_dependency_state(al, "postgres", 1, T0 + 300000 + (uint64_t)i * 100);
    assert_int_equal(raised(al, type), 3);
    for (int i = 50; i < 100; i++)
        sp_alerter_dependency_state(al, "postgres", 1, T0 + 300000 + (uint64_t)i * 100);
    assert_int_equal(raised(al, type), 4);
    /* Each dependency has its own state. */
    sp_alerter_dependency_state(al, "redis", 0, T0 + 400000);
    sp_alerter_dependency_state(al, "kafka", 0, T0 + 400000);
    sp_alerter_dependency_state(al, "dead_letters", 0, T0 + 400000);
    sp_alerter_dependency_state(al, "redis", 0, T0 + 400001);
    assert_int_equal(raised(al, type), 7);
    /* A second outage right after a recovery is reported, not hidden. */
    sp_alerter_dependency_state(al, "postgres", 0, T0 + 310000);
    assert_int_equal(raised(al, type), 8);
    sp_alerter_destroy(&al);
}

/* A dependency that flaps during an outage (a reconnect that works for a second) is one
 * outage: one degraded alert and, once it stays healthy, one recovery. */
static void test_dependency_flapping(void **state)
{
    struct sp_alerter *al = make(NULL);
    int type = SP_ALERT_SPEND_TRACKING_DEGRADED;
    uint64_t t = T0;

    (void)state;
    for (int cycle = 0; cycle < 30; cycle++) {
        for (int i = 0; i < 10; i++, t += 100)
            sp_alerter_dependency_state(al, "redis", 0, t);
        for (int i = 0; i < 10; i++, t += 100)
            sp_alerter_dependency_state(al, "redis", 1, t);
    }
    assert_int_equal(raised(al, type), 1);
    for (int i = 0; i < 60; i++, t += 100)
        sp_alerter_dependency_state(al, "redis", 1, t);
    assert_int_equal(raised(al, type), 2);
    sp_alerter_destroy(&al);
}

/* Dead letters come and go per batch: their transitions are de-duplicated by subject. */
static void test_dead_letters_dedupe(void **state)
{
    struct sp_alerter *al = make(NULL);
    struct sp_alerter_stats st;
    int type = SP_ALERT_SPEND_TRACKING_DEGRADED;
    uint64_t t = T0;

    (void)state;
    for (int cycle = 0; cycle < 5; cycle++) {
        sp_alerter_dependency_state(al, "dead_letters", 0, t);
        t += 1000;
        for (int i = 0; i < 10; i++, t += 1000)
            sp_alerter_dependency_state(al, "dead_letters", 1, t);
    }
    sp_alerter_get_stats(al, &st);
    assert_int_equal(st.alerts[type][SP_ALERT_RAISED], 10);
    assert_int_equal(st.alerts[type][SP_ALERT_SUPPRESSED], 8);
    sp_alerter_destroy(&al);
}

static void test_consumer_lag(void **state)
{
    struct sp_alerter *al = make(NULL);

    (void)state;
    sp_alerter_consumer_lag(al, 1000, T0);
    assert_int_equal(raised(al, SP_ALERT_CONSUMER_LAG), 0);
    sp_alerter_consumer_lag(al, 1001, T0 + 1);
    sp_alerter_consumer_lag(al, 50000, T0 + 2);
    assert_int_equal(raised(al, SP_ALERT_CONSUMER_LAG), 1);
    sp_alerter_consumer_lag(al, 50000, T0 + 100002);
    assert_int_equal(raised(al, SP_ALERT_CONSUMER_LAG), 2);
    sp_alerter_consumer_lag(al, 10, T0 + 100003);
    sp_alerter_consumer_lag(al, 0, T0 + 100004);
    assert_int_equal(raised(al, SP_ALERT_CONSUMER_LAG), 2);
    sp_alerter_consumer_lag(al, 0, T0 + 105003);
    assert_int_equal(raised(al, SP_ALERT_CONSUMER_LAG), 3);
    sp_alerter_destroy(&al);
}

static void test_budget(void **state)
{
    struct sp_alerter *al = make(NULL);
    const int64_t max = 10000000000; /* $10 */

    (void)state;
    assert_int_equal(sp_alerter_budget(al, "key", "alias-a", 0, 4999999999, max), 0);
    assert_int_equal(sp_alerter_budget(al, "key", "alias-a", 4999999999, 5000000000, max), 50);
    /* Jumping over two thresholds reports the highest. */
    assert_int_equal(sp_alerter_budget(al, "team", "team-a", 0, 8500000000, max), 80);
    assert_int_equal(sp_alerter_budget(al, "team", "team-a", 8500000000, 8600000000, max), 0);
    assert_int_equal(sp_alerter_budget(al, "team", "team-a", 8600000000, 12000000000, max), 100);
    assert_int_equal(sp_alerter_budget(al, "key", "x", 0, 100, 0), 0);
    /* Near INT64_MAX the percentage arithmetic does not overflow. */
    assert_int_equal(sp_alerter_budget(al, "key", "y", 0, INT64_MAX, INT64_MAX), 100);
    assert_int_equal(raised(al, SP_ALERT_BUDGET), 4);
    sp_alerter_destroy(&al);
}

/* The exposition carries every type x outcome with the exact metric name and labels. */
static void test_metrics(void **state)
{
    struct sp_alerter *al = make(NULL);
    struct tg_buf b;
    const int64_t max = 10000000000;

    (void)state;
    assert_int_equal(tg_buf_init(&b, 64 * 1024), 0);
    sp_alerter_budget(al, "key", "alias-m", 0, 5000000000, max);
    sp_alerter_budget(al, "key", "alias-m", 0, 5000000000, max); /* same subject: suppressed */
    sp_alerter_write_metrics(al, &b);
    assert_false(b.truncated);
    assert_non_null(strstr(b.data, "# TYPE tollgate_spend_alerts_total counter\n"));
    assert_non_null(
        strstr(b.data, "tollgate_spend_alerts_total{type=\"budget\",outcome=\"raised\"} 2\n"));
    assert_non_null(
        strstr(b.data, "tollgate_spend_alerts_total{type=\"budget\",outcome=\"suppressed\"} 1\n"));
    assert_non_null(strstr(
        b.data, "tollgate_spend_alerts_total{type=\"daily_report\",outcome=\"failed\"} 0\n"));
    assert_non_null(strstr(b.data, "tollgate_spend_alert_queue_depth "));
    assert_non_null(
        strstr(b.data, "tollgate_spend_alert_capacity_hits_total{table=\"deployments\"} 0\n"));
    assert_null(strstr(b.data, "127.0.0.1"));
    tg_buf_fini(&b);
    sp_alerter_destroy(&al);
}

static void tiny_tables(struct sp_alerter_config *c)
{
    c->deployments_capacity = 2;
    c->model_groups_capacity = 1;
}

/* Detector tables never grow: extra keys are not tracked and counted. */
static void test_detector_capacity(void **state)
{
    struct sp_alerter *al = make(tiny_tables);
    struct sp_alerter_stats st;
    struct proto_event ev;

    (void)state;
    for (int i = 0; i < 500; i++) {
        char dep[32], group[32];

        snprintf(dep, sizeof(dep), "dep-%d", i);
        snprintf(group, sizeof(group), "group-%d", i);
        request_event(&ev, dep, group, 503, 10);
        sp_alerter_observe_event_at(al, &ev, T0 + (uint64_t)i);
    }
    sp_alerter_get_stats(al, &st);
    assert_int_equal(st.deployments_full, 498);
    assert_int_equal(st.groups_full, 499);
    /* After the window, expired entries make room again. */
    request_event(&ev, "dep-late", "group-late", 503, 10);
    for (int i = 0; i < 5; i++)
        sp_alerter_observe_event_at(al, &ev, T0 + 120000 + (uint64_t)i);
    assert_int_equal(raised(al, SP_ALERT_DEPLOYMENT_FAILURES), 1);
    sp_alerter_destroy(&al);
}

static void small_queue(struct sp_alerter_config *c)
{
    c->queue_capacity = 4;
}

/* raise_deployments: n deployment-failure alerts of distinct subjects ("deployment <tag><i>"). */
static void raise_deployments(struct sp_alerter *al, char tag, int n)
{
    struct sp_alert a;

    for (int i = 0; i < n; i++) {
        char subject[64];

        snprintf(subject, sizeof(subject), "deployment %c%d failing", tag, i);
        sp_alert_init(&a, SP_ALERT_DEPLOYMENT_FAILURES, SP_ALERT_WARNING, subject, "x");
        sp_alerter_raise(al, &a);
    }
}

/* A flood of one type never pushes another type's alert out of the full queue: the oldest of
 * the most numerous type goes (the alert-per-request outage of the incident). */
static void test_queue_full_drops_the_flooding_type(void **state)
{
    struct sp_alerter *al = make(small_queue);
    struct sp_alerter_stats st;
    struct sp_alert a;

    (void)state;
    /* the sender takes its burst (3) and then waits about a second for a token: the degraded
     * alert raised after these stays queued while the flood comes */
    raise_deployments(al, 'e', 8);
    sp_alert_init(&a, SP_ALERT_SPEND_TRACKING_DEGRADED, SP_ALERT_CRITICAL, "redis unreachable",
                  "x");
    assert_int_equal(sp_alerter_raise(al, &a), 0);
    raise_deployments(al, 'd', 200);
    sp_alerter_get_stats(al, &st);
    assert_true(st.queue_depth <= 4);
    assert_int_equal(st.alerts[SP_ALERT_SPEND_TRACKING_DEGRADED][SP_ALERT_DROPPED], 0);
    assert_true(st.alerts[SP_ALERT_DEPLOYMENT_FAILURES][SP_ALERT_DROPPED] >= 208 - 4 - 5);
    sp_alerter_destroy(&al);
}

/* raise() never blocks and never fails: a full queue drops its oldest, counted. */
static void test_queue_drop_oldest(void **state)
{
    struct sp_alerter *al = make(small_queue);
    struct sp_alerter_stats st;
    struct sp_alert a;

    (void)state;
    raise_deployments(al, 'd', 200);
    sp_alerter_get_stats(al, &st);
    assert_int_equal(st.alerts[SP_ALERT_DEPLOYMENT_FAILURES][SP_ALERT_RAISED], 200);
    assert_true(st.queue_depth <= 4);
    assert_true(st.alerts[SP_ALERT_DEPLOYMENT_FAILURES][SP_ALERT_DROPPED] >= 200 - 4 - 5);
    /* Same subject again: suppressed by the window. */
    sp_alert_init(&a, SP_ALERT_DEPLOYMENT_FAILURES, SP_ALERT_WARNING, "deployment d7 failing", "x");
    assert_int_equal(sp_alerter_raise(al, &a), 1);
    sp_alerter_get_stats(al, &st);
    assert_int_equal(st.alerts[SP_ALERT_DEPLOYMENT_FAILURES][SP_ALERT_SUPPRESSED], 1);
    sp_alerter_destroy(&al);
}

static void only_budget(struct sp_alerter_config *c)
{
    c->enabled_types = 1u << SP_ALERT_BUDGET;
}

static void test_disabled_types(void **state)
{
    struct sp_alerter *al = make(only_budget);
    struct sp_alert a;
    char day[11];

    (void)state;
    sp_alert_init(&a, SP_ALERT_SLOW_REQUESTS, SP_ALERT_WARNING, "s", "x");
    assert_int_equal(sp_alerter_raise(al, &a), 1);
    assert_int_equal(raised(al, SP_ALERT_SLOW_REQUESTS), 0);
    assert_int_equal(sp_alerter_daily_report_due(al, 1796029200000ull, day), 0);
    sp_alerter_destroy(&al);
}

static void test_daily_report(void **state)
{
    struct sp_alerter *al = make(NULL);
    struct sp_report_row rows[SP_ALERTER_REPORT_ROWS_MAX + 5];
    char day[11];
    /* 2026-11-30T08:59:59Z and 09:00:00Z */
    const uint64_t before = 1796029199000ull, at = 1796029200000ull;

    (void)state;
    assert_int_equal(sp_alerter_daily_report_due(al, before, day), 0);
    assert_int_equal(sp_alerter_daily_report_due(al, at, day), 1);
    assert_string_equal(day, "2026-11-29");
    assert_int_equal(sp_alerter_daily_report_due(al, at + 3600000, day), 0);
    assert_int_equal(sp_alerter_daily_report_due(al, at + 86400000, day), 1);
    assert_string_equal(day, "2026-11-30");
    memset(rows, 'z', sizeof(rows)); /* unterminated names must not be over-read */
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        strcpy(rows[i].dimension, i % 3 == 0 ? "key" : (i % 3 == 1 ? "team" : "model"));
        rows[i].cost_nusd = (int64_t)i * 1000000000;
        rows[i].requests = (int64_t)i;
    }
    sp_alerter_daily_report(al, "2026-11-29", 123000000000, 4567, rows,
                            sizeof(rows) / sizeof(rows[0]));
    assert_int_equal(raised(al, SP_ALERT_DAILY_REPORT), 1);
    sp_alerter_destroy(&al);
}

/* Alert helpers and calls with NULL are harmless. */
static void test_null_handles(void **state)
{
    struct sp_alert a;
    struct sp_alerter_stats st;

    (void)state;
    sp_alert_init(&a, SP_ALERT_BUDGET, SP_ALERT_INFO, NULL, NULL);
    assert_int_equal(sp_alerter_raise(NULL, &a), 1);
    sp_alerter_observe_event(NULL, NULL);
    assert_int_equal(sp_alerter_dependency_state(NULL, "postgres", 0, 1), TG_EINVAL);
    sp_alerter_consumer_lag(NULL, 1, 1);
    assert_int_equal(sp_alerter_budget(NULL, "key", "a", 0, 1, 1), 0);
    sp_alerter_get_stats(NULL, &st);
    assert_int_equal(st.posts, 0);
    assert_string_equal(sp_alert_type_name(99), "unknown");
    assert_int_equal(sp_alert_type_parse("consumer_lag"), SP_ALERT_CONSUMER_LAG);
    assert_int_equal(sp_alert_type_parse("x"), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_failure_count),
        cmocka_unit_test(test_failure_ratio_and_success),
        cmocka_unit_test(test_failure_ratio),
        cmocka_unit_test(test_trail_attempts),
        cmocka_unit_test(test_cooldown_event),
        cmocka_unit_test(test_slow_requests),
        cmocka_unit_test(test_dependency_state),
        cmocka_unit_test(test_dependency_flapping),
        cmocka_unit_test(test_dead_letters_dedupe),
        cmocka_unit_test(test_consumer_lag),
        cmocka_unit_test(test_budget),
        cmocka_unit_test(test_metrics),
        cmocka_unit_test(test_detector_capacity),
        cmocka_unit_test(test_queue_drop_oldest),
        cmocka_unit_test(test_queue_full_drops_the_flooding_type),
        cmocka_unit_test(test_disabled_types),
        cmocka_unit_test(test_daily_report),
        cmocka_unit_test(test_null_handles),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
