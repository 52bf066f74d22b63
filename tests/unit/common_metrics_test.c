/* tg_metrics unit tests: exact exposition text, label escaping, cumulative histograms. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <string.h>

#include <cmocka.h>

#include "tg_err.h"
#include "tg_metrics.h"

static struct tg_buf b;

static int setup(void **state)
{
    (void)state;
    return tg_buf_init(&b, 64 * 1024);
}

static int teardown(void **state)
{
    (void)state;
    tg_buf_fini(&b);
    return 0;
}

static void test_counter_and_gauge_exact(void **state)
{
    (void)state;
    tg_buf_reset(&b);
    tg_prom_counter(&b, "tollgate_router_events_appended_total", "Events appended to the spool.",
                    42);
    tg_prom_gauge(&b, "tollgate_router_in_flight", "Requests in flight.", 3);
    tg_prom_gauge(&b, "tollgate_spend_postgres_up", "1 when Postgres answers.", 0.5);
    assert_string_equal(
        b.data, "# HELP tollgate_router_events_appended_total Events appended to the spool.\n"
                "# TYPE tollgate_router_events_appended_total counter\n"
                "tollgate_router_events_appended_total 42\n"
                "# HELP tollgate_router_in_flight Requests in flight.\n"
                "# TYPE tollgate_router_in_flight gauge\n"
                "tollgate_router_in_flight 3\n"
                "# HELP tollgate_spend_postgres_up 1 when Postgres answers.\n"
                "# TYPE tollgate_spend_postgres_up gauge\n"
                "tollgate_spend_postgres_up 0.5\n");
    assert_false(b.truncated);
    assert_string_equal(TG_PROM_CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8");
}

static void test_help_escaping(void **state)
{
    (void)state;
    tg_buf_reset(&b);
    tg_prom_header(&b, "m", "counter", "a\\b\nc \"q\"");
    /* HELP escapes backslash and newline only; quotes stay */
    assert_string_equal(b.data, "# HELP m a\\\\b\\nc \"q\"\n# TYPE m counter\n");
}

static void test_labels_escaped(void **state)
{
    const struct tg_label labels[] = {
        {"model_group", "gpt-\"main\"\\x\ny"},
        {"status", "200"},
        {"empty", NULL},
    };

    (void)state;
    tg_buf_reset(&b);
    tg_prom_sample_u64(&b, "tollgate_router_requests_total", labels, 3, 7);
    assert_string_equal(b.data,
                        "tollgate_router_requests_total{model_group=\"gpt-\\\"main\\\"\\\\x\\ny\","
                        "status=\"200\",empty=\"\"} 7\n");
    tg_buf_reset(&b);
    tg_prom_sample_u64(&b, "big", NULL, 0, UINT64_MAX);
    assert_string_equal(b.data, "big 18446744073709551615\n");
}

static void test_sample_values(void **state)
{
    (void)state;
    tg_buf_reset(&b);
    tg_prom_sample(&b, "a", NULL, 0, NAN);
    tg_prom_sample(&b, "b", NULL, 0, INFINITY);
    tg_prom_sample(&b, "c", NULL, 0, -INFINITY);
    tg_prom_sample(&b, "d", NULL, 0, -2);
    tg_prom_sample(&b, "e", NULL, 0, 0.000123);
    assert_string_equal(b.data, "a NaN\nb +Inf\nc -Inf\nd -2\ne 0.000123\n");
}

static void test_histogram_cumulative_and_count_is_inf(void **state)
{
    static const double bounds[] = {0.1, 1, 10};
    const struct tg_label labels[] = {{"model_group", "g"}};
    struct tg_histogram h;

    (void)state;
    assert_int_equal(tg_histogram_init(&h, bounds, 3), 0);
    tg_histogram_observe(&h, 0.05);
    tg_histogram_observe(&h, 0.1); /* upper bounds are inclusive */
    tg_histogram_observe(&h, 0.5);
    tg_histogram_observe(&h, 5);
    tg_histogram_observe(&h, 50);
    tg_buf_reset(&b);
    tg_prom_histogram(&b, "tollgate_router_request_duration_seconds", labels, 1, &h);
    assert_string_equal(
        b.data, "tollgate_router_request_duration_seconds_bucket{model_group=\"g\",le=\"0.1\"} 2\n"
                "tollgate_router_request_duration_seconds_bucket{model_group=\"g\",le=\"1\"} 3\n"
                "tollgate_router_request_duration_seconds_bucket{model_group=\"g\",le=\"10\"} 4\n"
                "tollgate_router_request_duration_seconds_bucket{model_group=\"g\",le=\"+Inf\"} 5\n"
                "tollgate_router_request_duration_seconds_sum{model_group=\"g\"} 55.65\n"
                "tollgate_router_request_duration_seconds_count{model_group=\"g\"} 5\n");

    /* unlabelled: le is the only label */
    tg_buf_reset(&b);
    tg_prom_histogram(&b, "x", NULL, 0, &h);
    assert_non_null(strstr(b.data, "x_bucket{le=\"+Inf\"} 5\nx_sum 55.65\nx_count 5\n"));
}

static void test_histogram_init_rejects(void **state)
{
    static const double unsorted[] = {1, 0.5};
    static const double dup[] = {1, 1};
    double many[TG_HIST_MAX_BUCKETS + 1];
    struct tg_histogram h;

    (void)state;
    for (int i = 0; i <= TG_HIST_MAX_BUCKETS; i++)
        many[i] = i + 1;
    assert_int_equal(tg_histogram_init(&h, unsorted, 2), TG_EINVAL);
    assert_int_equal(tg_histogram_init(&h, dup, 2), TG_EINVAL);
    assert_int_equal(tg_histogram_init(&h, many, TG_HIST_MAX_BUCKETS + 1), TG_EINVAL);
    assert_int_equal(tg_histogram_init(&h, many, TG_HIST_MAX_BUCKETS), 0);
    assert_int_equal(tg_histogram_init(&h, tg_latency_bounds_s, tg_latency_bounds_n), 0);
    tg_histogram_observe(&h, 1e9);
    assert_int_equal(h.counts[tg_latency_bounds_n], 1);
}

static void test_scrape_body_is_bounded(void **state)
{
    struct tg_buf small;

    (void)state;
    assert_int_equal(tg_buf_init(&small, 40), 0);
    for (int i = 0; i < 100; i++)
        tg_prom_counter(&small, "tollgate_spend_rows_inserted_total", "Rows.", (uint64_t)i);
    assert_true(small.truncated);
    assert_int_equal(small.len, 40);
    assert_int_equal(strlen(small.data), 40);
    tg_buf_fini(&small);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_counter_and_gauge_exact),
        cmocka_unit_test(test_help_escaping),
        cmocka_unit_test(test_labels_escaped),
        cmocka_unit_test(test_sample_values),
        cmocka_unit_test(test_histogram_cumulative_and_count_is_inf),
        cmocka_unit_test(test_histogram_init_rejects),
        cmocka_unit_test(test_scrape_body_is_bounded),
    };

    return cmocka_run_group_tests(tests, setup, teardown);
}
