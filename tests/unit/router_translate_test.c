/* translate: OpenAI chat <-> Anthropic messages responses and streams; regressions found by
 * translate_fuzz. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "tg_buf.h"
#include "tg_err.h"
#include "translate.h"

static json_t *parse(const char *s)
{
    json_t *j = json_loads(s, 0, NULL);

    assert_non_null(j);
    return j;
}

static json_int_t usage_int(const json_t *o, const char *name)
{
    const json_t *v = json_object_get(json_object_get(o, "usage"), name);

    assert_true(json_is_integer(v));
    return json_integer_value(v);
}

/* total_tokens of counts near the int64 limit was their signed sum: undefined (UBSan: signed
 * integer overflow) in the response and at the end of a translated stream. It saturates now. */
static void test_total_tokens_saturates(void **state)
{
    json_t *resp = parse("{\"id\":\"msg_1\",\"content\":[{\"type\":\"text\",\"text\":\"hi\"}],"
                         "\"usage\":{\"input_tokens\":9223372036854775807,\"output_tokens\":1}}");
    json_t *out = rt_translate_messages_resp_to_chat(resp, "gpt-main");
    struct rt_translate_stream st;
    struct tg_buf b;
    const char *ev = "{\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},"
                     "\"usage\":{\"input_tokens\":9223372036854775807,"
                     "\"output_tokens\":9223372036854775807}}";

    (void)state;
    assert_non_null(out);
    assert_int_equal(usage_int(out, "prompt_tokens"), INT64_MAX);
    assert_int_equal(usage_int(out, "completion_tokens"), 1);
    assert_int_equal(usage_int(out, "total_tokens"), INT64_MAX);
    json_decref(out);
    json_decref(resp);

    assert_int_equal(tg_buf_init(&b, 4096), 0);
    rt_translate_stream_init(&st, RT_TRANSLATE_MESSAGES_TO_CHAT, "gpt-main", 1);
    assert_int_equal(rt_translate_stream_event(&st, "message_delta", ev, strlen(ev), &b), 0);
    assert_int_equal(rt_translate_stream_finish(&st, &b), 0);
    assert_non_null(strstr(b.data, "\"total_tokens\":9223372036854775807"));
    assert_non_null(strstr(b.data, "data: [DONE]\n\n"));
    tg_buf_fini(&b);
}

/* The prompt cache's counts cross over: OpenAI's prompt_tokens (cache included, the cached part
 * in prompt_tokens_details.cached_tokens) is Anthropic's input_tokens + cache_read_input_tokens
 * + cache_creation_input_tokens, both ways, in answers and in streams. */
static void test_cache_usage_translated(void **state)
{
    json_t *chat =
        parse("{\"id\":\"c1\",\"choices\":[{\"message\":{\"role\":\"assistant\","
              "\"content\":\"hi\"},\"finish_reason\":\"stop\"}],\"usage\":{"
              "\"prompt_tokens\":2000,\"completion_tokens\":30,\"prompt_tokens_details\":"
              "{\"cached_tokens\":1500}}}");
    json_t *msg = parse("{\"id\":\"m1\",\"content\":[{\"type\":\"text\",\"text\":\"hi\"}],"
                        "\"usage\":{\"input_tokens\":100,\"cache_creation_input_tokens\":1000,"
                        "\"cache_read_input_tokens\":4000,\"output_tokens\":50}}");
    json_t *out;
    struct rt_translate_stream st;
    struct tg_buf b;
    const char *start = "{\"type\":\"message_start\",\"message\":{\"id\":\"m2\",\"usage\":"
                        "{\"input_tokens\":100,\"cache_creation_input_tokens\":1000,"
                        "\"cache_read_input_tokens\":4000,\"output_tokens\":1}}}";
    const char *delta = "{\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},"
                        "\"usage\":{\"output_tokens\":50}}";
    const char *chunk =
        "{\"id\":\"c2\",\"choices\":[],\"usage\":{\"prompt_tokens\":2000,"
        "\"completion_tokens\":30,\"prompt_tokens_details\":{\"cached_tokens\":1500}}}";

    (void)state;
    out = rt_translate_chat_resp_to_messages(chat, "claude-main");
    assert_non_null(out);
    assert_int_equal(usage_int(out, "input_tokens"), 500);
    assert_int_equal(usage_int(out, "cache_read_input_tokens"), 1500);
    assert_null(json_object_get(json_object_get(out, "usage"), "cache_creation_input_tokens"));
    assert_int_equal(usage_int(out, "output_tokens"), 30);
    json_decref(out);
    out = rt_translate_messages_resp_to_chat(msg, "gpt-main");
    assert_non_null(out);
    assert_int_equal(usage_int(out, "prompt_tokens"), 5100);
    assert_int_equal(usage_int(out, "completion_tokens"), 50);
    assert_int_equal(usage_int(out, "total_tokens"), 5150);
    assert_int_equal(json_integer_value(json_object_get(
                         json_object_get(json_object_get(out, "usage"), "prompt_tokens_details"),
                         "cached_tokens")),
                     4000);
    json_decref(out);
    json_decref(chat);
    json_decref(msg);

    /* Anthropic stream -> OpenAI chunks: the usage chunk carries the totals */
    assert_int_equal(tg_buf_init(&b, 8192), 0);
    rt_translate_stream_init(&st, RT_TRANSLATE_MESSAGES_TO_CHAT, "gpt-main", 1);
    assert_int_equal(rt_translate_stream_event(&st, "message_start", start, strlen(start), &b), 0);
    assert_int_equal(rt_translate_stream_event(&st, "message_delta", delta, strlen(delta), &b), 0);
    assert_int_equal(rt_translate_stream_finish(&st, &b), 0);
    assert_int_equal(st.prompt_tokens, 5100);
    assert_int_equal(st.cache_read_tokens, 4000);
    assert_int_equal(st.cache_creation_tokens, 1000);
    assert_non_null(strstr(b.data, "\"prompt_tokens\":5100"));
    assert_non_null(strstr(b.data, "\"cached_tokens\":4000"));
    tg_buf_fini(&b);

    /* OpenAI chunks -> Anthropic events: message_delta restates the input split */
    assert_int_equal(tg_buf_init(&b, 8192), 0);
    rt_translate_stream_init(&st, RT_TRANSLATE_CHAT_TO_MESSAGES, "claude-main", 1);
    assert_int_equal(rt_translate_stream_event(&st, NULL, chunk, strlen(chunk), &b), 0);
    assert_int_equal(rt_translate_stream_finish(&st, &b), 0);
    assert_non_null(strstr(b.data, "\"input_tokens\":500"));
    assert_non_null(strstr(b.data, "\"cache_read_input_tokens\":1500"));
    assert_non_null(strstr(b.data, "\"output_tokens\":30"));
    tg_buf_fini(&b);
}

/* An id cut to its field inside a two-byte character made the text invalid UTF-8: json_pack
 * refused every event of the stream (TG_ENOMEM, outside the contract) and the chat response
 * translation returned NULL (found by translate_fuzz). The cut is now before the character. */
static void test_long_utf8_id_cut_at_character(void **state)
{
    char id[256], ev[512];
    json_t *resp, *out;
    struct rt_translate_stream st;
    struct tg_buf b;
    const char *msg_id;

    (void)state;
    /* 'x' then two-byte characters: every field size cuts one in half for one of the offsets */
    for (int odd = 0; odd < 2; odd++) {
        size_t n = 0;

        if (odd)
            id[n++] = 'x';
        while (n + 2 < 200) {
            memcpy(id + n, "\xc3\xa9", 2);
            n += 2;
        }
        id[n] = '\0';

        snprintf(ev, sizeof(ev), "{\"id\":\"%s\",\"choices\":[{\"message\":{\"content\":\"hi\"}}]}",
                 id);
        resp = parse(ev);
        out = rt_translate_chat_resp_to_messages(resp, "claude-main");
        assert_non_null(out);
        msg_id = json_string_value(json_object_get(out, "id"));
        assert_non_null(msg_id);
        assert_int_equal(strncmp(msg_id, "msg_", 4), 0);
        assert_true(strlen(msg_id) >= 94 && strlen(msg_id) <= 95);
        json_decref(out);
        json_decref(resp);

        assert_int_equal(tg_buf_init(&b, 8192), 0);
        rt_translate_stream_init(&st, RT_TRANSLATE_MESSAGES_TO_CHAT, "gpt-main", 1);
        snprintf(ev, sizeof(ev), "{\"type\":\"message_start\",\"message\":{\"id\":\"%s\"}}", id);
        assert_int_equal(rt_translate_stream_event(&st, "message_start", ev, strlen(ev), &b), 0);
        assert_non_null(strstr(b.data, "\"chat.completion.chunk\""));
        tg_buf_fini(&b);

        assert_int_equal(tg_buf_init(&b, 8192), 0);
        rt_translate_stream_init(&st, RT_TRANSLATE_CHAT_TO_MESSAGES, "claude-main", 1);
        snprintf(ev, sizeof(ev), "{\"id\":\"%s\",\"choices\":[{\"delta\":{\"content\":\"a\"}}]}",
                 id);
        assert_int_equal(rt_translate_stream_event(&st, NULL, ev, strlen(ev), &b), 0);
        assert_non_null(strstr(b.data, "event: message_start\n"));
        assert_non_null(strstr(b.data, "event: content_block_delta\n"));
        tg_buf_fini(&b);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_total_tokens_saturates),
        cmocka_unit_test(test_cache_usage_translated),
        cmocka_unit_test(test_long_utf8_id_cut_at_character),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
