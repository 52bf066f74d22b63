/* Unit tests for fake-llm's core modules: behaviour table, recorder, timer, bodies. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "tg_buf.h"
#include "tg_err.h"
#include "tg_time.h"

#include "fl_body.h"
#include "fl_model.h"
#include "fl_record.h"
#include "fl_timer.h"
#include "fl_tools.h"

static json_t *parse(const char *s)
{
    json_error_t e;
    json_t *j = json_loads(s, 0, &e);
    assert_non_null(j);
    return j;
}

static int merge(struct fl_table *t, const char *name, const char *obj)
{
    char err[256];
    json_t *j = parse(obj);
    int rc = fl_table_merge(t, name, j, err, sizeof(err));
    json_decref(j);
    return rc;
}

static void test_defaults_and_layering(void **state)
{
    struct fl_table *t = fl_table_create(8, 1);
    struct fl_decision d;

    (void)state;
    assert_non_null(t);
    fl_table_decide(t, "plain", 0, &d);
    assert_int_equal(d.fail, 0);
    assert_int_equal(d.b.prompt_tokens, 12);
    assert_int_equal(d.b.completion_tokens, 8);
    assert_int_equal(d.b.chunks, 4);
    assert_int_equal(merge(t, NULL, "{\"prompt_tokens\":5,\"latency_ms\":10}"), 0);
    assert_int_equal(merge(t, "m", "{\"prompt_tokens\":7}"), 0);
    fl_table_decide(t, "m", 1, &d);
    assert_int_equal(d.b.prompt_tokens, 7);
    assert_int_equal(d.b.latency_ms, 10);
    /* null returns a field to inheriting. */
    assert_int_equal(merge(t, "m", "{\"prompt_tokens\":null}"), 0);
    fl_table_decide(t, "m", 0, &d);
    assert_int_equal(d.b.prompt_tokens, 5);
    fl_table_destroy(&t);
    assert_null(t);
}

static void test_fail_rules(void **state)
{
    struct fl_table *t = fl_table_create(8, 1);
    struct fl_decision d;

    (void)state;
    /* A non-2xx status alone means always fail. */
    assert_int_equal(merge(t, "s", "{\"status\":429,\"retry_after\":3}"), 0);
    fl_table_decide(t, "s", 0, &d);
    assert_int_equal(d.fail, 1);
    assert_int_equal(d.b.status, 429);
    assert_int_equal(d.b.retry_after_s, 3);
    /* An explicit fail_rate 0 wins over the status. */
    assert_int_equal(merge(t, "s", "{\"fail_rate\":0}"), 0);
    fl_table_decide(t, "s", 0, &d);
    assert_int_equal(d.fail, 0);
    /* An error mode alone means always fail. */
    assert_int_equal(merge(t, "e", "{\"error\":\"garbage\"}"), 0);
    fl_table_decide(t, "e", 0, &d);
    assert_int_equal(d.fail, 1);
    assert_int_equal(d.b.error, FL_FAULT_GARBAGE);
    /* retry_after alone changes nothing. */
    assert_int_equal(merge(t, "r", "{\"retry_after\":3}"), 0);
    fl_table_decide(t, "r", 0, &d);
    assert_int_equal(d.fail, 0);
    fl_table_destroy(&t);
}

static void test_refusals_change_nothing(void **state)
{
    struct fl_table *t = fl_table_create(2, 1);
    struct fl_decision d;

    (void)state;
    assert_int_equal(merge(t, "m", "{\"chunks\":9}"), 0);
    assert_int_equal(merge(t, "m", "{\"chunks\":3,\"bogus\":1}"), TG_EINVAL);
    assert_int_equal(merge(t, "m", "{\"chunks\":3,\"fail_rate\":1.5}"), TG_ERANGE);
    assert_int_equal(merge(t, "m", "{\"chunks\":0}"), TG_ERANGE);
    assert_int_equal(merge(t, "m", "{\"error\":\"boom\"}"), TG_EINVAL);
    assert_int_equal(merge(t, "m", "[1]"), TG_EINVAL);
    fl_table_decide(t, "m", 0, &d);
    assert_int_equal(d.b.chunks, 9);
    assert_int_equal(d.fail, 0);
    /* Capacity 2: a third model is refused, requests for it are untracked. */
    assert_int_equal(merge(t, "n", "{}"), 0);
    assert_int_equal(merge(t, "o", "{}"), TG_EFULL);
    fl_table_decide(t, "o", 0, &d);
    assert_int_equal(d.slot, -1);
    json_t *s = fl_table_stats(t);
    assert_int_equal(json_integer_value(json_object_get(s, "untracked")), 1);
    json_decref(s);
    fl_table_destroy(&t);
}

static void test_draws_deterministic_per_model(void **state)
{
    struct fl_table *a = fl_table_create(8, 42);
    struct fl_table *b = fl_table_create(8, 42);
    struct fl_decision d;
    int seq_a[200], fails = 0;

    (void)state;
    assert_int_equal(merge(a, "coin", "{\"fail_rate\":0.25}"), 0);
    assert_int_equal(merge(b, "coin", "{\"fail_rate\":0.25}"), 0);
    for (int i = 0; i < 200; i++) {
        fl_table_decide(a, "coin", 0, &d);
        seq_a[i] = d.fail;
        fails += d.fail;
    }
    assert_in_range(fails, 30, 70);
    /* Interleaving another model does not change this model's sequence. */
    for (int i = 0; i < 200; i++) {
        fl_table_decide(b, "other", 0, &d);
        fl_table_decide(b, "coin", 0, &d);
        assert_int_equal(d.fail, seq_a[i]);
    }
    /* Reset reseeds. */
    fl_table_reset(a, 0);
    for (int i = 0; i < 200; i++) {
        fl_table_decide(a, "coin", 0, &d);
        assert_int_equal(d.fail, seq_a[i]);
    }
    fl_table_destroy(&a);
    fl_table_destroy(&b);
}

static void test_counters_and_reset(void **state)
{
    struct fl_table *t = fl_table_create(8, 1);
    struct fl_decision d;
    json_t *s;

    (void)state;
    json_t *cfg = parse("{\"default\":{\"chunks\":2},\"models\":{\"x\":{\"latency_ms\":5}}}");
    char err[128];
    assert_int_equal(fl_table_load(t, cfg, err, sizeof(err)), 0);
    json_decref(cfg);
    fl_table_decide(t, "x", 1, &d);
    fl_table_count(t, d.slot, FL_COUNT_OK);
    fl_table_count(t, d.slot, FL_COUNT_ABORTED);
    fl_table_decide(t, "x", 0, &d);
    fl_table_count(t, d.slot, FL_COUNT_FAILED);
    fl_table_count_unnamed(t, 0);
    s = fl_table_stats(t);
    json_t *x = json_object_get(json_object_get(s, "models"), "x");
    assert_int_equal(json_integer_value(json_object_get(x, "requests")), 2);
    assert_int_equal(json_integer_value(json_object_get(x, "ok")), 1);
    assert_int_equal(json_integer_value(json_object_get(x, "failed")), 1);
    assert_int_equal(json_integer_value(json_object_get(x, "streams")), 1);
    assert_int_equal(json_integer_value(json_object_get(x, "aborted")), 1);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(s, "total"), "requests")),
                     3);
    json_decref(s);
    assert_int_equal(merge(t, "x", "{\"latency_ms\":99}"), 0);
    fl_table_reset(t, 1);
    fl_table_decide(t, "x", 0, &d);
    assert_int_equal(d.b.latency_ms, 5); /* config restored */
    assert_int_equal(d.b.chunks, 2);
    s = fl_table_stats(t);
    x = json_object_get(json_object_get(s, "models"), "x");
    assert_int_equal(json_integer_value(json_object_get(x, "requests")), 1);
    json_decref(s);
    fl_table_destroy(&t);
}

static void test_record_ring(void **state)
{
    struct fl_record *r = fl_record_create(3, 4);
    uint64_t added, dropped;
    static const char hdrs[] = "authorization\0Bearer k\0x-cut\0va";

    (void)state;
    assert_non_null(r);
    fl_record_add(r, "/a", "m1", "abcdefgh", 8, 200, 1, hdrs, sizeof(hdrs) - 1);
    fl_record_add(r, "/b", NULL,
                  "\xff"
                  "z",
                  2, 400, 2, NULL, 0);
    fl_record_add(r, "/c", "m1", "c", 1, 200, 3, NULL, 0);
    fl_record_add(r, "/d", "m2", "d", 1, 200, 4, NULL, 0);
    fl_record_stats(r, &added, &dropped);
    assert_int_equal(added, 4);
    assert_int_equal(dropped, 1);
    json_t *all = fl_record_list(r, NULL, 100);
    assert_int_equal(json_array_size(all), 3);
    assert_string_equal(json_string_value(json_object_get(json_array_get(all, 0), "path")), "/b");
    assert_string_equal(json_string_value(json_object_get(json_array_get(all, 0), "body")), "?z");
    assert_string_equal(json_string_value(json_object_get(json_array_get(all, 2), "path")), "/d");
    json_decref(all);
    json_t *m1 = fl_record_list(r, "m1", 100);
    assert_int_equal(json_array_size(m1), 1);
    json_decref(m1);
    fl_record_clear(r);
    fl_record_add(r, "/a", "m1", "abcdefgh", 8, 200, 1, hdrs, sizeof(hdrs) - 1);
    json_t *one = fl_record_list(r, NULL, 1);
    json_t *e = json_array_get(one, 0);
    assert_string_equal(json_string_value(json_object_get(e, "body")), "abcd");
    assert_true(json_is_true(json_object_get(e, "truncated")));
    assert_int_equal(json_integer_value(json_object_get(e, "size")), 8);
    json_t *h = json_object_get(e, "headers");
    assert_string_equal(json_string_value(json_object_get(h, "authorization")), "Bearer k");
    assert_null(json_object_get(h, "x-cut")); /* the cut last pair is skipped */
    json_decref(one);
    fl_record_destroy(&r);
    assert_null(r);
}

static _Atomic int fired_order[8];
static atomic_int fired_n;

static void on_fire(void *arg)
{
    int i = atomic_fetch_add(&fired_n, 1);
    if (i < 8)
        fired_order[i] = (int)(intptr_t)arg;
}

static void test_timer_order_and_capacity(void **state)
{
    char err[128];
    struct fl_timer *t = fl_timer_create(3, on_fire, err, sizeof(err));
    uint64_t now = tg_now_mono_ms();

    (void)state;
    atomic_store(&fired_n, 0);
    assert_non_null(t);
    assert_int_equal(fl_timer_add(t, (void *)(intptr_t)3, now + 60), 0);
    assert_int_equal(fl_timer_add(t, (void *)(intptr_t)1, now + 20), 0);
    assert_int_equal(fl_timer_add(t, (void *)(intptr_t)2, now + 40), 0);
    assert_int_equal(fl_timer_add(t, (void *)(intptr_t)4, now + 10), TG_EFULL);
    assert_int_equal(fl_timer_full_count(t), 1);
    for (int i = 0; i < 200 && atomic_load(&fired_n) < 3; i++)
        tg_sleep_ms(5);
    assert_int_equal(atomic_load(&fired_n), 3);
    assert_int_equal(fired_order[0], 1);
    assert_int_equal(fired_order[1], 2);
    assert_int_equal(fired_order[2], 3);
    assert_true(tg_now_mono_ms() >= now + 60);
    /* Stop fires what is pending at once and refuses later adds. */
    assert_int_equal(fl_timer_add(t, (void *)(intptr_t)5, now + 600000), 0);
    fl_timer_stop(t);
    assert_int_equal(atomic_load(&fired_n), 4);
    assert_int_equal(fl_timer_add(t, (void *)(intptr_t)6, now), TG_ECLOSED);
    fl_timer_destroy(&t);
    assert_null(t);
}

static void check_json_body(const struct fl_gen *g)
{
    struct tg_buf b;
    json_error_t e;

    assert_int_equal(tg_buf_init(&b, fl_body_capacity(g, 0)), 0);
    assert_int_equal(fl_body_success(&b, g), 0);
    json_t *j = json_loadb(b.data, b.len, 0, &e);
    assert_non_null(j);
    json_decref(j);
    tg_buf_fini(&b);
}

static void test_bodies_are_json_and_fit(void **state)
{
    struct fl_gen g;
    struct fl_segments seg;
    struct tg_buf b;

    (void)state;
    memset(&g, 0, sizeof(g));
    g.model = "we\"ird\\model\x01";
    g.prompt_tokens = 3;
    g.completion_tokens = FL_TOKENS_MAX; /* text is capped at FL_TEXT_MAX_WORDS */
    g.chunks = FL_CHUNKS_MAX;
    g.include_usage = 1;
    g.embed_inputs = 3;
    g.embed_dims = 4;
    for (int api = FL_API_CHAT; api <= FL_API_MESSAGES; api++) {
        g.api = (enum fl_api)api;
        check_json_body(&g);
        if (api == FL_API_EMBEDDINGS)
            continue;
        assert_int_equal(tg_buf_init(&b, fl_body_capacity(&g, 1)), 0);
        assert_int_equal(fl_body_stream(&b, &seg, &g), 0);
        assert_true(seg.n > FL_CHUNKS_MAX);
        assert_int_equal(seg.ends[seg.n - 1], b.len);
        tg_buf_fini(&b);
    }
    /* Error bodies in both shapes. */
    assert_int_equal(tg_buf_init(&b, 8192), 0);
    assert_int_equal(
        fl_body_error(&b, FL_API_MESSAGES, 400, FL_FAULT_CONTEXT_WINDOW, g.model, 5, NULL), 0);
    json_t *j = json_loadb(b.data, b.len, 0, NULL);
    assert_non_null(j);
    assert_string_equal(json_string_value(json_object_get(j, "type")), "error");
    json_decref(j);
    tg_buf_reset(&b);
    assert_int_equal(fl_body_error(&b, FL_API_CHAT, 400, FL_FAULT_CONTENT_POLICY, g.model, 5, NULL),
                     0);
    j = json_loadb(b.data, b.len, 0, NULL);
    assert_non_null(j);
    assert_string_equal(json_string_value(json_object_get(json_object_get(j, "error"), "code")),
                        "content_policy_violation");
    json_decref(j);
    tg_buf_fini(&b);
}

static const char *plan_of(const char *body, enum fl_api api, struct fl_tool_plan *p)
{
    static char err[256];
    json_t *j = parse(body);
    const char *why = fl_tools_plan(j, api, p, err, sizeof(err));

    json_decref(j);
    return why;
}

#define FL_T_TOOLS                                                                                 \
    "[{\"type\":\"function\",\"function\":{\"name\":\"weather\",\"parameters\":{\"type\":"         \
    "\"object\",\"properties\":{\"city\":{\"type\":\"string\"},\"days\":{\"type\":"                \
    "[\"integer\",\"null\"]},\"x\":{\"type\":\"boolean\"}}}}},{\"type\":\"function\","             \
    "\"function\":{\"name\":\"clock\"}}]"

/* Each SSE event of a stream is whole and its data is JSON (or [DONE]). */
static void check_stream(const struct tg_buf *b, const struct fl_segments *seg)
{
    size_t start = 0;

    assert_true(seg->n > 2);
    for (size_t i = 0; i < seg->n; i++) {
        char ev[8192];
        size_t n = seg->ends[i] - start;
        const char *d;

        assert_true(n < sizeof(ev));
        memcpy(ev, b->data + start, n);
        ev[n] = '\0';
        start = seg->ends[i];
        assert_true(n > 2 && ev[n - 1] == '\n' && ev[n - 2] == '\n');
        d = strstr(ev, "data: ");
        assert_non_null(d);
        ev[n - 2] = '\0';
        if (strcmp(d + 6, "[DONE]") != 0)
            json_decref(parse(d + 6));
    }
    assert_int_equal(start, b->len);
}

static void test_tools_plan_and_answers(void **state)
{
    struct fl_tool_plan p;
    struct fl_gen g = {.model = "m", .prompt_tokens = 12, .completion_tokens = 8, .chunks = 1,
                       .include_usage = 1, .id = 7, .created_s = 1};
    struct fl_segments seg;
    struct tg_buf b;

    (void)state;
    /* calls: the first tool, arguments from its schema; the first two with [parallel] */
    assert_null(plan_of("{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
                        "\"tools\":" FL_T_TOOLS "}",
                        FL_API_CHAT, &p));
    assert_int_equal(p.kind, FL_TOOL_CALLS);
    assert_int_equal(p.n_calls, 1);
    assert_string_equal(p.calls[0].name, "weather");
    assert_string_equal(p.calls[0].args, "{\"city\":\"Paris\",\"days\":3,\"x\":true}");
    assert_null(plan_of("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\","
                        "\"text\":\"a [parallel] b [preamble]\"}]}],\"tools\":" FL_T_TOOLS "}",
                        FL_API_CHAT, &p));
    assert_int_equal(p.n_calls, 2);
    assert_int_equal(p.preamble, 1);
    assert_string_equal(p.calls[1].args, "{}");
    g.api = FL_API_CHAT;
    assert_int_equal(tg_buf_init(&b, fl_tools_capacity(&p)), 0);
    assert_int_equal(fl_tools_stream(&b, &seg, &g, &p), 0);
    check_stream(&b, &seg);
    assert_non_null(strstr(b.data, "\"content\":\"Let me check.\""));
    assert_non_null(strstr(b.data, "\"finish_reason\":\"tool_calls\""));
    tg_buf_reset(&b);
    /* the forced tool; one that is not declared is refused */
    assert_null(plan_of("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
                        "\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":"
                        "\"clock\"}},\"tools\":" FL_T_TOOLS "}",
                        FL_API_CHAT, &p));
    assert_string_equal(p.calls[0].name, "clock");
    assert_non_null(plan_of("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
                            "\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":"
                            "\"nope\"}},\"tools\":" FL_T_TOOLS "}",
                            FL_API_CHAT, &p));
    /* results: echoed; a tool message answering no call is refused */
    assert_null(plan_of("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"},{\"role\":"
                        "\"assistant\",\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\","
                        "\"function\":{\"name\":\"clock\",\"arguments\":\"{}\"}}]},{\"role\":"
                        "\"tool\",\"tool_call_id\":\"c1\",\"content\":[{\"type\":\"text\",\"text\":"
                        "\"noon\"}]}]}",
                        FL_API_CHAT, &p));
    assert_int_equal(p.kind, FL_TOOL_ECHO);
    assert_string_equal(p.echo, "the tool said: noon");
    assert_non_null(plan_of("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"},{\"role\":"
                            "\"tool\",\"tool_call_id\":\"c1\",\"content\":\"noon\"}]}",
                            FL_API_CHAT, &p));
    /* Anthropic: input_schema required; tool_result must answer the tool_use before it */
    assert_non_null(plan_of("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{"
                            "\"name\":\"w\",\"parameters\":{}}]}",
                            FL_API_MESSAGES, &p));
    assert_non_null(plan_of("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"},{\"role\":"
                            "\"assistant\",\"content\":[{\"type\":\"tool_use\",\"id\":\"t1\","
                            "\"name\":\"w\",\"input\":{}}]},{\"role\":\"user\",\"content\":[{"
                            "\"type\":\"tool_result\",\"tool_use_id\":\"t2\",\"content\":"
                            "\"r\"}]}]}",
                            FL_API_MESSAGES, &p));
    assert_null(plan_of("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{"
                        "\"name\":\"w\",\"input_schema\":{\"type\":\"object\"}}]}",
                        FL_API_MESSAGES, &p));
    g.api = FL_API_MESSAGES;
    assert_int_equal(fl_tools_stream(&b, &seg, &g, &p), 0);
    check_stream(&b, &seg);
    /* an input without members: only the empty first delta */
    assert_non_null(strstr(b.data, "\"partial_json\":\"\""));
    assert_null(strstr(b.data, "\"partial_json\":\"{"));
    assert_non_null(strstr(b.data, "\"stop_reason\":\"tool_use\""));
    tg_buf_reset(&b);
    assert_int_equal(fl_tools_success(&b, &g, &p), 0);
    json_decref(parse(b.data));
    assert_non_null(strstr(b.data, "\"type\":\"tool_use\""));
    tg_buf_fini(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults_and_layering),
        cmocka_unit_test(test_fail_rules),
        cmocka_unit_test(test_refusals_change_nothing),
        cmocka_unit_test(test_draws_deterministic_per_model),
        cmocka_unit_test(test_counters_and_reset),
        cmocka_unit_test(test_record_ring),
        cmocka_unit_test(test_timer_order_and_capacity),
        cmocka_unit_test(test_bodies_are_json_and_fit),
        cmocka_unit_test(test_tools_plan_and_answers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
