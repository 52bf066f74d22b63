/* trail: bounded, value-only retry record. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "proto_event.h"
#include "trail.h"

static void add_n(struct rt_trail *t, int n)
{
    for (int i = 0; i < n; i++) {
        char msg[64];
        int len = snprintf(msg, sizeof(msg), "upstream 500 on attempt %04d", i);

        rt_trail_add(t, NULL, "gpt-main", i % 2 ? "main-1" : "main-2", 500, "server_error",
                     (uint32_t)i + 1, msg, (size_t)len); /* ms: never 0, so always written */
    }
}

static void encode_with(const struct rt_trail *t, char *out, size_t outcap, size_t *len)
{
    struct proto_event ev;

    proto_event_init(&ev);
    snprintf(ev.call_id, sizeof(ev.call_id), "0192a4c8-7d1e-7a2b-9c3d-4e5f6a7b8c9d");
    rt_trail_copy_out(t, ev.trail, &ev.trail_len);
    ev.attempts = (int32_t)rt_trail_total(t);
    assert_int_equal(proto_event_encode(&ev, out, outcap, len), 0);
}

/* A request with 1,000 failed attempts holds and encodes exactly as many bytes as one with 4. */
static void test_thousand_failures_same_bytes(void **state)
{
    static struct rt_trail four, thousand;
    static char a[TG_EVENT_MAX_BYTES + 1], b[TG_EVENT_MAX_BYTES + 1];
    size_t alen, blen;

    (void)state;
    rt_trail_init(&four);
    rt_trail_init(&thousand);
    add_n(&four, 4);
    add_n(&thousand, 1000);
    assert_int_equal(rt_trail_len(&four), 4);
    assert_int_equal(rt_trail_len(&thousand), TG_TRAIL_MAX_ENTRIES);
    assert_int_equal(rt_trail_total(&thousand), 1000);
    assert_int_equal(sizeof(four), sizeof(thousand));
    /* Newest kept, oldest first. */
    assert_string_equal(rt_trail_get(&thousand, 0)->message, "upstream 500 on attempt 0996");
    assert_string_equal(rt_trail_get(&thousand, 3)->message, "upstream 500 on attempt 0999");
    assert_string_equal(rt_trail_last(&thousand)->message, "upstream 500 on attempt 0999");
    assert_null(rt_trail_get(&thousand, 4));
    for (uint32_t i = 0; i < rt_trail_len(&thousand); i++)
        assert_true(strlen(rt_trail_get(&thousand, i)->message) < PROTO_MESSAGE_CAP);
    encode_with(&four, a, sizeof(a), &alen);
    encode_with(&thousand, b, sizeof(b), &blen);
    /* Same entry count and shapes: only the digits of attempt numbers/latency differ. */
    assert_true(blen <= TG_EVENT_MAX_BYTES);
    assert_true(blen >= alen && blen - alen <= 16);
}

static void test_order_before_wrap(void **state)
{
    struct rt_trail t;

    (void)state;
    rt_trail_init(&t);
    assert_null(rt_trail_last(&t));
    add_n(&t, 2);
    assert_int_equal(rt_trail_len(&t), 2);
    assert_string_equal(rt_trail_get(&t, 0)->message, "upstream 500 on attempt 0000");
    assert_string_equal(rt_trail_get(&t, 0)->deployment_id, "main-2");
    assert_int_equal(rt_trail_get(&t, 1)->latency_ms, 2); /* attempt 1 took 2 ms (add_n) */
    assert_string_equal(rt_trail_get(&t, 1)->error_class, "server_error");
    assert_int_equal(rt_trail_get(&t, 1)->http_status, 500);
}

static void test_messages_masked_and_capped(void **state)
{
    struct rt_trail t;
    char big[2000];

    (void)state;
    rt_trail_init(&t);
    const char *m = "Incorrect API key provided: sk-proj-Abc123Def456Ghi789Jkl012Mno345Pqr678";
    rt_trail_add(&t, NULL, "g", "d", 401, "bad_request", 3, m, strlen(m));
    assert_null(strstr(rt_trail_get(&t, 0)->message, "Abc123"));
    assert_non_null(strstr(rt_trail_get(&t, 0)->message, "***"));
    memset(big, 'x', sizeof(big));
    for (size_t i = 0; i < sizeof(big); i += 10)
        big[i] = ' ';
    rt_trail_add(&t, NULL, NULL, NULL, 0, NULL, 0, big, sizeof(big));
    assert_true(strlen(rt_trail_get(&t, 1)->message) <= PROTO_MESSAGE_CAP - 1);
    assert_string_equal(rt_trail_get(&t, 1)->group, "");
    /* A group name longer than the field is cut, never overflows. */
    memset(big, 'g', 300);
    big[300] = '\0';
    rt_trail_add(&t, NULL, big, "d", 0, "timeout", 0, NULL, 0);
    assert_int_equal(strlen(rt_trail_get(&t, 2)->group), PROTO_MODEL_CAP - 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_thousand_failures_same_bytes),
        cmocka_unit_test(test_order_before_wrap),
        cmocka_unit_test(test_messages_masked_and_capped),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
