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
#include "providers/provider.h"
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

/* out (taken) equals the JSON text want, "created" aside (the clock's); prints both when not. */
static void expect_json(json_t *out, const char *want)
{
    json_t *w = parse(want);
    char *got;

    assert_non_null(out);
    json_object_del(out, "created");
    got = json_dumps(out, JSON_COMPACT | JSON_SORT_KEYS);
    if (!json_equal(out, w))
        fprintf(stderr, "got:  %s\n", got);
    assert_true(json_equal(out, w));
    free(got);
    json_decref(w);
    json_decref(out);
}

/* The chat request in (JSON text) translated for Anthropic, and back. */
static json_t *to_messages(const char *in, char *err, size_t errlen)
{
    json_t *req = parse(in);
    json_t *out;

    err[0] = '\0';
    out = rt_translate_chat_to_messages(req, "claude-sonnet-4-5", err, errlen);
    json_decref(req);
    return out;
}

static json_t *to_chat(const char *in, char *err, size_t errlen)
{
    json_t *req = parse(in);
    json_t *out;

    err[0] = '\0';
    out = rt_translate_messages_to_chat(req, "gpt-4o", err, errlen);
    json_decref(req);
    return out;
}

/* A stream of events (data only, NULL-terminated) through a translator of direction dir; the
 * whole output equals want (printed when not). */
static void expect_stream(enum rt_translate_dir dir, unsigned flags, const char *const *events,
                          const char *want)
{
    struct rt_translate_stream st;
    struct tg_buf b;

    assert_int_equal(tg_buf_init(&b, 64 * 1024), 0);
    rt_translate_stream_init(&st, dir, dir == RT_TRANSLATE_CHAT_TO_MESSAGES ? "claude-main"
                                                                           : "gpt-main",
                             1, flags);
    for (size_t i = 0; events[i] != NULL; i++)
        assert_int_equal(rt_translate_stream_event(&st, NULL, events[i], strlen(events[i]), &b), 0);
    assert_int_equal(rt_translate_stream_finish(&st, &b), 0);
    if (strcmp(b.data, want) != 0)
        fprintf(stderr, "got:\n%s\n", b.data);
    assert_string_equal(b.data, want);
    tg_buf_fini(&b);
}

/* total_tokens of counts near the int64 limit was their signed sum: undefined (UBSan: signed
 * integer overflow) in the response and at the end of a translated stream. It saturates now. */
static void test_total_tokens_saturates(void **state)
{
    json_t *resp = parse("{\"id\":\"msg_1\",\"content\":[{\"type\":\"text\",\"text\":\"hi\"}],"
                         "\"usage\":{\"input_tokens\":9223372036854775807,\"output_tokens\":1}}");
    json_t *out = rt_translate_messages_resp_to_chat(resp, "gpt-main", 0);
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
    rt_translate_stream_init(&st, RT_TRANSLATE_MESSAGES_TO_CHAT, "gpt-main", 1, 0);
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
    out = rt_translate_messages_resp_to_chat(msg, "gpt-main", 0);
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
    rt_translate_stream_init(&st, RT_TRANSLATE_MESSAGES_TO_CHAT, "gpt-main", 1, 0);
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
    rt_translate_stream_init(&st, RT_TRANSLATE_CHAT_TO_MESSAGES, "claude-main", 1, 0);
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
        rt_translate_stream_init(&st, RT_TRANSLATE_MESSAGES_TO_CHAT, "gpt-main", 1, 0);
        snprintf(ev, sizeof(ev), "{\"type\":\"message_start\",\"message\":{\"id\":\"%s\"}}", id);
        assert_int_equal(rt_translate_stream_event(&st, "message_start", ev, strlen(ev), &b), 0);
        assert_non_null(strstr(b.data, "\"chat.completion.chunk\""));
        tg_buf_fini(&b);

        assert_int_equal(tg_buf_init(&b, 8192), 0);
        rt_translate_stream_init(&st, RT_TRANSLATE_CHAT_TO_MESSAGES, "claude-main", 1, 0);
        snprintf(ev, sizeof(ev), "{\"id\":\"%s\",\"choices\":[{\"delta\":{\"content\":\"a\"}}]}",
                 id);
        assert_int_equal(rt_translate_stream_event(&st, NULL, ev, strlen(ev), &b), 0);
        assert_non_null(strstr(b.data, "event: message_start\n"));
        assert_non_null(strstr(b.data, "event: content_block_delta\n"));
        tg_buf_fini(&b);
    }
}

/* Requests, OpenAI chat -> Anthropic. The tools, tool_choice and the assistant's tool call are
 * OpenAI's function-calling guide example (get_current_weather, call_abc123), the image the
 * vision guide's (a https URL) plus a data: URL; two parallel calls answered by two tool
 * messages, which become one user message with the user's next words after them. */
static void test_request_chat_to_messages_tools(void **state)
{
    char err[256];
    json_t *out = to_messages(
        "{\"model\":\"x\",\"max_completion_tokens\":300,\"temperature\":0.2,\"top_p\":0.9,"
        "\"stop\":\"END\",\"user\":\"u-1\",\"stream\":true,\"parallel_tool_calls\":false,"
        "\"messages\":["
        "{\"role\":\"system\",\"content\":\"You are a helpful assistant.\"},"
        "{\"role\":\"developer\",\"content\":[{\"type\":\"text\",\"text\":\"Be brief.\"}]},"
        "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"What's in this image?\"},"
        "{\"type\":\"image_url\",\"image_url\":{\"url\":\"https://upload.wikimedia.org/a.jpg\","
        "\"detail\":\"high\"}},{\"type\":\"image_url\",\"image_url\":{\"url\":"
        "\"data:image/png;base64,iVBORw0KGgo=\"}}]},"
        "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":["
        "{\"id\":\"call_abc123\",\"type\":\"function\",\"function\":{\"name\":"
        "\"get_current_weather\",\"arguments\":\"{\\n\\\"location\\\": \\\"Boston, MA\\\"\\n}\"}},"
        "{\"id\":\"call_def456\",\"type\":\"function\",\"function\":{\"name\":"
        "\"get_current_weather\",\"arguments\":\"{\\\"location\\\":\\\"Paris\\\"}\"}}]},"
        "{\"role\":\"tool\",\"tool_call_id\":\"call_abc123\",\"content\":\"22C\"},"
        "{\"role\":\"tool\",\"tool_call_id\":\"call_def456\",\"content\":[{\"type\":\"text\","
        "\"text\":\"18C\"}]},"
        "{\"role\":\"user\",\"content\":\"Thanks\"},"
        "{\"role\":\"assistant\",\"content\":\"You're welcome.\"}],"
        "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_current_weather\","
        "\"description\":\"Get the current weather in a given location\",\"parameters\":{"
        "\"type\":\"object\",\"properties\":{\"location\":{\"type\":\"string\"},\"unit\":{"
        "\"type\":\"string\",\"enum\":[\"celsius\",\"fahrenheit\"]}},\"required\":"
        "[\"location\"]}}},{\"type\":\"function\",\"function\":{\"name\":\"noop\"}}],"
        "\"tool_choice\":\"auto\"}",
        err, sizeof(err));

    (void)state;
    expect_json(out,
        "{\"model\":\"claude-sonnet-4-5\",\"max_tokens\":300,\"temperature\":0.2,\"top_p\":0.9,"
        "\"stop_sequences\":[\"END\"],\"metadata\":{\"user_id\":\"u-1\"},\"stream\":true,"
        "\"system\":\"You are a helpful assistant.\\nBe brief.\","
        "\"messages\":["
        "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"What's in this image?\"},"
        "{\"type\":\"image\",\"source\":{\"type\":\"url\",\"url\":"
        "\"https://upload.wikimedia.org/a.jpg\"}},{\"type\":\"image\",\"source\":{\"type\":"
        "\"base64\",\"media_type\":\"image/png\",\"data\":\"iVBORw0KGgo=\"}}]},"
        "{\"role\":\"assistant\",\"content\":["
        "{\"type\":\"tool_use\",\"id\":\"call_abc123\",\"name\":\"get_current_weather\","
        "\"input\":{\"location\":\"Boston, MA\"}},"
        "{\"type\":\"tool_use\",\"id\":\"call_def456\",\"name\":\"get_current_weather\","
        "\"input\":{\"location\":\"Paris\"}}]},"
        "{\"role\":\"user\",\"content\":["
        "{\"type\":\"tool_result\",\"tool_use_id\":\"call_abc123\",\"content\":\"22C\"},"
        "{\"type\":\"tool_result\",\"tool_use_id\":\"call_def456\",\"content\":\"18C\"},"
        "{\"type\":\"text\",\"text\":\"Thanks\"}]},"
        "{\"role\":\"assistant\",\"content\":\"You're welcome.\"}],"
        "\"tools\":[{\"name\":\"get_current_weather\",\"description\":"
        "\"Get the current weather in a given location\",\"input_schema\":{\"type\":\"object\","
        "\"properties\":{\"location\":{\"type\":\"string\"},\"unit\":{\"type\":\"string\","
        "\"enum\":[\"celsius\",\"fahrenheit\"]}},\"required\":[\"location\"]}},"
        "{\"name\":\"noop\",\"input_schema\":{\"type\":\"object\",\"properties\":{}}}],"
        "\"tool_choice\":{\"type\":\"auto\",\"disable_parallel_tool_use\":true}}");
}

/* Requests, Anthropic -> OpenAI chat. The tool and the turn are Anthropic's tool-use guide
 * example (get_weather, toolu_01A09q90qw90lq917835lq9, "15 degrees"), the image block the
 * vision guide's base64 source; thinking with budget 2048 becomes reasoning_effort medium (and
 * max_tokens max_completion_tokens, which OpenAI's reasoning models take). */
static void test_request_messages_to_chat_tools(void **state)
{
    char err[256];
    json_t *out = to_chat(
        "{\"model\":\"x\",\"max_tokens\":1024,\"stop_sequences\":[\"END\"],"
        "\"metadata\":{\"user_id\":\"u-1\"},\"thinking\":{\"type\":\"enabled\","
        "\"budget_tokens\":2048},"
        "\"system\":[{\"type\":\"text\",\"text\":\"You are a weather bot.\","
        "\"cache_control\":{\"type\":\"ephemeral\"}}],"
        "\"tools\":[{\"name\":\"get_weather\",\"description\":\"Get the current weather in a "
        "given location\",\"input_schema\":{\"type\":\"object\",\"properties\":{\"location\":{"
        "\"type\":\"string\",\"description\":\"The city and state, e.g. San Francisco, CA\"}},"
        "\"required\":[\"location\"]}}],"
        "\"tool_choice\":{\"type\":\"any\",\"disable_parallel_tool_use\":true},"
        "\"messages\":["
        "{\"role\":\"user\",\"content\":[{\"type\":\"image\",\"source\":{\"type\":\"base64\","
        "\"media_type\":\"image/jpeg\",\"data\":\"/9j/4AAQ\"}},{\"type\":\"text\",\"text\":"
        "\"What's the weather like in San Francisco?\"}]},"
        "{\"role\":\"assistant\",\"content\":[{\"type\":\"thinking\",\"thinking\":\"hm\","
        "\"signature\":\"sig\"},{\"type\":\"text\",\"text\":\"I'll check.\"},"
        "{\"type\":\"tool_use\",\"id\":\"toolu_01A09q90qw90lq917835lq9\",\"name\":"
        "\"get_weather\",\"input\":{\"location\":\"San Francisco, CA\"}}]},"
        "{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":"
        "\"toolu_01A09q90qw90lq917835lq9\",\"content\":\"15 degrees\"},{\"type\":\"text\","
        "\"text\":\"And tomorrow?\"}]},"
        "{\"role\":\"assistant\",\"content\":[{\"type\":\"tool_use\",\"id\":\"toolu_2\","
        "\"name\":\"get_weather\",\"input\":{\"location\":\"SF\"}}]},"
        "{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"toolu_2\","
        "\"content\":[{\"type\":\"text\",\"text\":\"17 \"},{\"type\":\"text\",\"text\":"
        "\"degrees\"}]}]}]}",
        err, sizeof(err));

    (void)state;
    expect_json(out,
        "{\"model\":\"gpt-4o\",\"max_completion_tokens\":1024,\"stop\":[\"END\"],\"user\":"
        "\"u-1\","
        "\"reasoning_effort\":\"medium\",\"messages\":["
        "{\"role\":\"system\",\"content\":\"You are a weather bot.\"},"
        "{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":{\"url\":"
        "\"data:image/jpeg;base64,/9j/4AAQ\"}},{\"type\":\"text\",\"text\":"
        "\"What's the weather like in San Francisco?\"}]},"
        "{\"role\":\"assistant\",\"content\":\"I'll check.\",\"tool_calls\":[{\"id\":"
        "\"toolu_01A09q90qw90lq917835lq9\",\"type\":\"function\",\"function\":{\"name\":"
        "\"get_weather\",\"arguments\":\"{\\\"location\\\":\\\"San Francisco, CA\\\"}\"}}]},"
        "{\"role\":\"tool\",\"tool_call_id\":\"toolu_01A09q90qw90lq917835lq9\",\"content\":"
        "\"15 degrees\"},"
        "{\"role\":\"user\",\"content\":\"And tomorrow?\"},"
        "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"toolu_2\",\"type\":"
        "\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":"
        "\"{\\\"location\\\":\\\"SF\\\"}\"}}]},"
        "{\"role\":\"tool\",\"tool_call_id\":\"toolu_2\",\"content\":\"17 degrees\"}],"
        "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
        "\"description\":\"Get the current weather in a given location\",\"parameters\":{"
        "\"type\":\"object\",\"properties\":{\"location\":{\"type\":\"string\",\"description\":"
        "\"The city and state, e.g. San Francisco, CA\"}},\"required\":[\"location\"]}}}],"
        "\"tool_choice\":\"required\",\"parallel_tool_calls\":false}");
    /* the other tool_choice types */
    expect_json(to_chat("{\"max_tokens\":5,\"messages\":[],\"tools\":[{\"name\":\"f\","
                        "\"input_schema\":{\"type\":\"object\"}}],\"tool_choice\":{\"type\":"
                        "\"tool\",\"name\":\"f\"},\"thinking\":{\"type\":\"enabled\","
                        "\"budget_tokens\":10000}}",
                        err, sizeof(err)),
                "{\"model\":\"gpt-4o\",\"max_completion_tokens\":5,\"messages\":[],\"tools\":"
                "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":"
                "\"object\"}}}],\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":"
                "\"f\"}},\"reasoning_effort\":\"high\"}");
    expect_json(to_chat("{\"messages\":[],\"tool_choice\":{\"type\":\"none\"},\"thinking\":"
                        "{\"type\":\"enabled\",\"budget_tokens\":1024}}",
                        err, sizeof(err)),
                "{\"model\":\"gpt-4o\",\"messages\":[],\"tool_choice\":\"none\","
                "\"reasoning_effort\":\"low\"}");
}

/* response_format and reasoning_effort for Anthropic: the JSON tool forced, the thinking
 * budget (LiteLLM's figures) and max_tokens above it; OpenAI's structured-outputs guide's
 * json_schema example shape. */
static void test_request_response_format_and_reasoning(void **state)
{
    char err[256];

    (void)state;
    expect_json(
        to_messages("{\"messages\":[{\"role\":\"user\",\"content\":\"Alice and Bob go to a "
                    "science fair on Friday.\"}],\"response_format\":{\"type\":\"json_schema\","
                    "\"json_schema\":{\"name\":\"calendar_event\",\"strict\":true,\"schema\":{"
                    "\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"}},"
                    "\"required\":[\"name\"]}}},\"tool_choice\":\"auto\"}",
                    err, sizeof(err)),
        "{\"model\":\"claude-sonnet-4-5\",\"max_tokens\":4096,\"messages\":[{\"role\":\"user\","
        "\"content\":\"Alice and Bob go to a science fair on Friday.\"}],\"tools\":[{\"name\":"
        "\"json_tool_call\",\"description\":\"Respond with a JSON object.\",\"input_schema\":{"
        "\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"}},\"required\":"
        "[\"name\"]}}],\"tool_choice\":{\"type\":\"tool\",\"name\":\"json_tool_call\"}}");
    expect_json(to_messages("{\"messages\":[],\"response_format\":{\"type\":\"json_object\"}}",
                            err, sizeof(err)),
                "{\"model\":\"claude-sonnet-4-5\",\"max_tokens\":4096,\"messages\":[],\"tools\":"
                "[{\"name\":\"json_tool_call\",\"description\":\"Respond with a JSON object.\","
                "\"input_schema\":{\"type\":\"object\",\"additionalProperties\":true}}],"
                "\"tool_choice\":{\"type\":\"tool\",\"name\":\"json_tool_call\"}}");
    expect_json(to_messages("{\"messages\":[],\"response_format\":{\"type\":\"text\"},"
                            "\"reasoning_effort\":\"high\"}",
                            err, sizeof(err)),
                "{\"model\":\"claude-sonnet-4-5\",\"max_tokens\":8192,\"messages\":[],"
                "\"thinking\":{\"type\":\"enabled\",\"budget_tokens\":4096}}");
    expect_json(to_messages("{\"messages\":[],\"max_tokens\":2000,\"reasoning_effort\":\"low\"}",
                            err, sizeof(err)),
                "{\"model\":\"claude-sonnet-4-5\",\"max_tokens\":2000,\"messages\":[],"
                "\"thinking\":{\"type\":\"enabled\",\"budget_tokens\":1024}}");
    expect_json(to_messages("{\"messages\":[],\"reasoning_effort\":\"medium\",\"n\":1,"
                            "\"logprobs\":false,\"presence_penalty\":0,\"modalities\":"
                            "[\"text\"]}",
                            err, sizeof(err)),
                "{\"model\":\"claude-sonnet-4-5\",\"max_tokens\":6144,\"messages\":[],"
                "\"thinking\":{\"type\":\"enabled\",\"budget_tokens\":2048}}");
    assert_null(to_messages("{\"messages\":[],\"max_tokens\":4096,\"reasoning_effort\":\"high\"}",
                            err, sizeof(err)));
    assert_int_equal(strncmp(err, "max_tokens: ", 12), 0);
    assert_null(to_messages("{\"messages\":[],\"max_completion_tokens\":9,"
                            "\"reasoning_effort\":\"low\"}",
                            err, sizeof(err)));
    assert_int_equal(strncmp(err, "max_completion_tokens: ", 23), 0);
}

/* What the target cannot express is refused, the message naming the field. */
static void test_request_refusals(void **state)
{
    static const struct {
        int to_anthropic;
        const char *req;
        const char *field; /* err starts with it */
    } cases[] = {
        {1, "{\"messages\":[],\"n\":2}", "n: "},
        {1, "{\"messages\":[],\"logprobs\":true}", "logprobs: "},
        {1, "{\"messages\":[],\"top_logprobs\":2}", "top_logprobs: "},
        {1, "{\"messages\":[],\"audio\":{\"voice\":\"alloy\",\"format\":\"wav\"}}", "audio: "},
        {1, "{\"messages\":[],\"modalities\":[\"text\",\"audio\"]}", "modalities: "},
        {1, "{\"messages\":[],\"seed\":7}", "seed: "},
        {1, "{\"messages\":[],\"logit_bias\":{\"50256\":-100}}", "logit_bias: "},
        {1, "{\"messages\":[],\"frequency_penalty\":0.5}", "frequency_penalty: "},
        {1, "{\"messages\":[],\"functions\":[{\"name\":\"f\"}]}", "functions: "},
        {1, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_audio\","
            "\"input_audio\":{\"data\":\"AAAA\",\"format\":\"wav\"}}]}]}",
         "messages: content part type \"input_audio\""},
        {1, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\","
            "\"image_url\":{\"url\":\"ftp://x/y.png\"}}]}]}",
         "messages: image_url.url"},
        {1, "{\"messages\":[{\"role\":\"function\",\"name\":\"f\",\"content\":\"1\"}]}",
         "messages[0].role: "},
        {1, "{\"messages\":[{\"role\":\"tool\",\"content\":\"1\"}]}", "messages[0].tool_call_id: "},
        {1, "{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"type\":\"function\","
            "\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]}]}",
         "messages[0].tool_calls[0]: "},
        {1, "{\"messages\":[],\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],"
            "\"response_format\":{\"type\":\"json_object\"}}",
         "response_format: "},
        {1, "{\"messages\":[],\"response_format\":{\"type\":\"json_schema\"}}",
         "response_format: "},
        {1, "{\"messages\":[],\"tools\":[{\"type\":\"web_search\"}]}", "tools[0]: "},
        {1, "{\"messages\":[],\"tool_choice\":\"sometimes\"}", "tool_choice: "},
        {1, "{\"messages\":[],\"reasoning_effort\":\"max\"}", "reasoning_effort: "},
        {0, "{\"messages\":[],\"top_k\":5}", "top_k: "},
        {0, "{\"messages\":[],\"tools\":[{\"type\":\"web_search_20250305\",\"name\":"
            "\"web_search\"}]}",
         "tools[0].type: "},
        {0, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"document\",\"source\":"
            "{\"type\":\"url\",\"url\":\"https://x/a.pdf\"}}]}]}",
         "messages[0].content[0].source: "},
        {0, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\","
            "\"tool_use_id\":\"t\",\"content\":[{\"type\":\"image\",\"source\":{}}]}]}]}",
         "messages[0].content[0].content[0]: "},
        {0, "{\"messages\":[{\"role\":\"system\",\"content\":\"x\"}]}", "messages[0].role: "},
        {0, "{\"messages\":[],\"thinking\":{\"type\":\"enabled\"}}", "thinking: "},
        {0, "{\"messages\":[],\"tool_choice\":{\"type\":\"tool\"}}", "tool_choice.type: "},
    };
    char err[256];

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        json_t *out = cases[i].to_anthropic ? to_messages(cases[i].req, err, sizeof(err))
                                            : to_chat(cases[i].req, err, sizeof(err));

        if (out != NULL || strncmp(err, cases[i].field, strlen(cases[i].field)) != 0)
            fprintf(stderr, "case %zu: err \"%s\"\n", i, err);
        assert_null(out);
        assert_int_equal(strncmp(err, cases[i].field, strlen(cases[i].field)), 0);
    }
}

/* Answers, Anthropic -> OpenAI: the tool-use guide's answer (text, then a tool_use, stop_reason
 * tool_use) with a thinking block (the extended-thinking guide's shape) as reasoning_content;
 * two tool_use blocks are two parallel calls. */
static void test_answer_messages_to_chat(void **state)
{
    json_t *resp = parse(
        "{\"id\":\"msg_01Aq9w938a90dw8q\",\"type\":\"message\",\"role\":\"assistant\",\"model\":"
        "\"claude-sonnet-4-5\",\"content\":[{\"type\":\"thinking\",\"thinking\":\"To answer, "
        "I need the weather.\",\"signature\":\"EqQBCgIYAhIM\"},{\"type\":"
        "\"redacted_thinking\",\"data\":\"EmwKAhgBEgy3va\"},{\"type\":\"text\",\"text\":"
        "\"I'll check the current weather in San Francisco for you.\"},{\"type\":\"tool_use\","
        "\"id\":\"toolu_01A09q90qw90lq917835lq9\",\"name\":\"get_weather\",\"input\":{"
        "\"location\":\"San Francisco, CA\"}},{\"type\":\"tool_use\",\"id\":\"toolu_2\","
        "\"name\":\"get_time\",\"input\":{}}],\"stop_reason\":\"tool_use\",\"stop_sequence\":null,"
        "\"usage\":{\"input_tokens\":100,\"output_tokens\":50}}");

    (void)state;
    expect_json(rt_translate_messages_resp_to_chat(resp, "gpt-main", 0),
                "{\"id\":\"msg_01Aq9w938a90dw8q\",\"object\":\"chat.completion\",\"model\":"
                "\"gpt-main\",\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\","
                "\"content\":\"I'll check the current weather in San Francisco for you.\","
                "\"reasoning_content\":\"To answer, I need the weather.\",\"thinking_blocks\":["
                "{\"type\":\"thinking\",\"thinking\":\"To answer, I need the weather.\","
                "\"signature\":\"EqQBCgIYAhIM\"},{\"type\":\"redacted_thinking\",\"data\":"
                "\"EmwKAhgBEgy3va\"}],\"tool_calls\":["
                "{\"id\":\"toolu_01A09q90qw90lq917835lq9\",\"type\":\"function\",\"function\":{"
                "\"name\":\"get_weather\",\"arguments\":"
                "\"{\\\"location\\\":\\\"San Francisco, CA\\\"}\"}},"
                "{\"id\":\"toolu_2\",\"type\":\"function\",\"function\":{\"name\":\"get_time\","
                "\"arguments\":\"{}\"}}]},\"finish_reason\":\"tool_calls\"}],\"usage\":{"
                "\"prompt_tokens\":100,\"completion_tokens\":50,\"total_tokens\":150}}");
    json_decref(resp);

    /* response_format's JSON tool: its input is the text, the answer stopped */
    resp = parse("{\"id\":\"msg_2\",\"content\":[{\"type\":\"tool_use\",\"id\":\"toolu_3\","
                 "\"name\":\"json_tool_call\",\"input\":{\"name\":\"Science Fair\"}}],"
                 "\"stop_reason\":\"tool_use\",\"usage\":{\"input_tokens\":10,"
                 "\"output_tokens\":5}}");
    expect_json(rt_translate_messages_resp_to_chat(resp, "gpt-main", RT_TRANSLATE_JSON_OUTPUT),
                "{\"id\":\"msg_2\",\"object\":\"chat.completion\",\"model\":\"gpt-main\","
                "\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":"
                "\"{\\\"name\\\":\\\"Science Fair\\\"}\"},\"finish_reason\":\"stop\"}],"
                "\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":5,\"total_tokens\":15}}");
    json_decref(resp);
}

/* Answers, OpenAI -> Anthropic: the function-calling guide's answer (content null, a tool call,
 * finish_reason tool_calls) with a second, parallel call, and reasoning_content. */
static void test_answer_chat_to_messages(void **state)
{
    json_t *resp = parse(
        "{\"id\":\"chatcmpl-abc123\",\"object\":\"chat.completion\",\"created\":1699896916,"
        "\"model\":\"gpt-4o-mini\",\"choices\":[{\"index\":0,\"message\":{\"role\":"
        "\"assistant\",\"content\":null,\"reasoning_content\":\"Two cities.\",\"tool_calls\":["
        "{\"id\":\"call_abc123\",\"type\":\"function\",\"function\":{\"name\":"
        "\"get_current_weather\",\"arguments\":\"{\\n\\\"location\\\": \\\"Boston, MA\\\"\\n}\"}},"
        "{\"id\":\"call_def456\",\"type\":\"function\",\"function\":{\"name\":"
        "\"get_current_weather\",\"arguments\":\"{\\\"location\\\":\\\"Paris\\\"}\"}}]},"
        "\"logprobs\":null,\"finish_reason\":\"tool_calls\"}],\"usage\":{\"prompt_tokens\":82,"
        "\"completion_tokens\":17,\"total_tokens\":99}}");

    (void)state;
    expect_json(rt_translate_chat_resp_to_messages(resp, "claude-main"),
                "{\"id\":\"msg_chatcmpl-abc123\",\"type\":\"message\",\"role\":\"assistant\","
                "\"model\":\"claude-main\",\"content\":[{\"type\":\"thinking\",\"thinking\":"
                "\"Two cities.\",\"signature\":\"\"},{\"type\":\"tool_use\",\"id\":"
                "\"call_abc123\",\"name\":\"get_current_weather\",\"input\":{\"location\":"
                "\"Boston, MA\"}},{\"type\":\"tool_use\",\"id\":\"call_def456\",\"name\":"
                "\"get_current_weather\",\"input\":{\"location\":\"Paris\"}}],\"stop_reason\":"
                "\"tool_use\",\"stop_sequence\":null,\"usage\":{\"input_tokens\":82,"
                "\"output_tokens\":17}}");
    json_decref(resp);
    /* a refusal (the structured-outputs guide's refusal field) is the text; content_filter is
     * Anthropic's refusal */
    resp = parse("{\"id\":\"c2\",\"choices\":[{\"index\":0,\"message\":{\"role\":"
                 "\"assistant\",\"content\":null,\"refusal\":\"I'm sorry, I cannot assist "
                 "with that request.\"},\"finish_reason\":\"content_filter\"}]}");
    expect_json(rt_translate_chat_resp_to_messages(resp, "claude-main"),
                "{\"id\":\"msg_c2\",\"type\":\"message\",\"role\":\"assistant\",\"model\":"
                "\"claude-main\",\"content\":[{\"type\":\"text\",\"text\":\"I'm sorry, I cannot "
                "assist with that request.\"}],\"stop_reason\":\"refusal\",\"stop_sequence\":null,"
                "\"usage\":{\"input_tokens\":0,\"output_tokens\":0}}");
    json_decref(resp);
}

/* Streams, Anthropic -> OpenAI chunks: the streaming guide's tool-use stream (a text block, then
 * get_weather's tool_use block with input_json_delta fragments, stop_reason tool_use), with a
 * thinking block first (thinking_delta, signature_delta) and a second, parallel call. */
static void test_stream_messages_to_chat_tools(void **state)
{
    static const char *const ev[] = {
        "{\"type\":\"message_start\",\"message\":{\"id\":\"msg_014p7gG3wDgGV9EUtLvnow3U\","
        "\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-sonnet-4-5\","
        "\"content\":[],\"usage\":{\"input_tokens\":472,\"output_tokens\":2}}}",
        "{\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"thinking\","
        "\"thinking\":\"\"}}",
        "{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"thinking_delta\","
        "\"thinking\":\"Weather first.\"}}",
        "{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"signature_delta\","
        "\"signature\":\"EqQBCgIYAhIM\"}}",
        "{\"type\":\"content_block_stop\",\"index\":0}",
        "{\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"text\","
        "\"text\":\"\"}}",
        "{\"type\":\"ping\"}",
        "{\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"text_delta\","
        "\"text\":\"Okay\"}}",
        "{\"type\":\"content_block_stop\",\"index\":1}",
        "{\"type\":\"content_block_start\",\"index\":2,\"content_block\":{\"type\":\"tool_use\","
        "\"id\":\"toolu_01T1x1fJ34qAmk2tNTrN7Up6\",\"name\":\"get_weather\",\"input\":{}}}",
        "{\"type\":\"content_block_delta\",\"index\":2,\"delta\":{\"type\":\"input_json_delta\","
        "\"partial_json\":\"\"}}",
        "{\"type\":\"content_block_delta\",\"index\":2,\"delta\":{\"type\":\"input_json_delta\","
        "\"partial_json\":\"{\\\"location\\\":\"}}",
        "{\"type\":\"content_block_delta\",\"index\":2,\"delta\":{\"type\":\"input_json_delta\","
        "\"partial_json\":\" \\\"San Francisco, CA\\\"}\"}}",
        "{\"type\":\"content_block_stop\",\"index\":2}",
        "{\"type\":\"content_block_start\",\"index\":3,\"content_block\":{\"type\":\"tool_use\","
        "\"id\":\"toolu_2\",\"name\":\"get_time\",\"input\":{}}}",
        "{\"type\":\"content_block_delta\",\"index\":3,\"delta\":{\"type\":\"input_json_delta\","
        "\"partial_json\":\"{}\"}}",
        "{\"type\":\"content_block_stop\",\"index\":3}",
        "{\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\",\"stop_sequence\":"
        "null},\"usage\":{\"output_tokens\":89}}",
        "{\"type\":\"message_stop\"}",
        NULL};

    (void)state;
    expect_stream(RT_TRANSLATE_MESSAGES_TO_CHAT, 0, ev,
                  "data: {\"id\":\"msg_014p7gG3wDgGV9EUtLvnow3U\",\"object\":\"chat.completion.chun"
                  "k\",\"cr"
                  "eated\":1,\"model\":\"gpt-main\",\"choices\":[{\"index\":0,\"delta\":{\"role\":"
                  "\"assista"
                  "nt\",\"content\":\"\"},\"finish_reason\":null}]}\n"
                  "\n"
                  "data: {\"id\":\"msg_014p7gG3wDgGV9EUtLvnow3U\",\"object\":\"chat.completion.chun"
                  "k\",\"cr"
                  "eated\":1,\"model\":\"gpt-main\",\"choices\":[{\"index\":0,\"delta\":{\"reasonin"
                  "g_conten"
                  "t\":\"Weather first.\"},\"finish_reason\":null}]}\n"
                  "\n"
                  "data: {\"id\":\"msg_014p7gG3wDgGV9EUtLvnow3U\",\"object\":\"chat.completion.chun"
                  "k\",\"created\":1,\"model\":\"gpt-main\",\"choices\":[{\"index\":0,\"delta\":{"
                  "\"thinking_blocks\":[{\"type\":\"thinking\",\"thinking\":\"\",\"signature\":"
                  "\"EqQBCgIYAhIM\"}]},\"finish_reason\":null}]}\n"
                  "\n"
                  "data: {\"id\":\"msg_014p7gG3wDgGV9EUtLvnow3U\",\"object\":\"chat.completion.chun"
                  "k\",\"cr"
                  "eated\":1,\"model\":\"gpt-main\",\"choices\":[{\"index\":0,\"delta\":{\"content"
                  "\":\"Okay"
                  "\"},\"finish_reason\":null}]}\n"
                  "\n"
                  "data: {\"id\":\"msg_014p7gG3wDgGV9EUtLvnow3U\",\"object\":\"chat.completion.chun"
                  "k\",\"cr"
                  "eated\":1,\"model\":\"gpt-main\",\"choices\":[{\"index\":0,\"delta\":{\"tool_cal"
                  "ls\":[{"
                  "\"index\":0,\"id\":\"toolu_01T1x1fJ34qAmk2tNTrN7Up6\",\"type\":\"function\",\"fu"
                  "nction\""
                  ":{\"name\":\"get_weather\",\"arguments\":\"\"}}]},\"finish_reason\":null}]}\n"
                  "\n"
                  "data: {\"id\":\"msg_014p7gG3wDgGV9EUtLvnow3U\",\"object\":\"chat.completion.chun"
                  "k\",\"cr"
                  "eated\":1,\"model\":\"gpt-main\",\"choices\":[{\"index\":0,\"delta\":{\"tool_cal"
                  "ls\":[{"
                  "\"index\":0,\"function\":{\"arguments\":\"{\\\"location\\\":\"}}]},\"finish_reas"
                  "on\":nul"
                  "l}]}\n"
                  "\n"
                  "data: {\"id\":\"msg_014p7gG3wDgGV9EUtLvnow3U\",\"object\":\"chat.completion.chun"
                  "k\",\"cr"
                  "eated\":1,\"model\":\"gpt-main\",\"choices\":[{\"index\":0,\"delta\":{\"tool_cal"
                  "ls\":[{"
                  "\"index\":0,\"function\":{\"arguments\":\" \\\"San Francisco, CA\\\"}\"}}]},\"fi"
                  "nish_rea"
                  "son\":null}]}\n"
                  "\n"
                  "data: {\"id\":\"msg_014p7gG3wDgGV9EUtLvnow3U\",\"object\":\"chat.completion.chun"
                  "k\",\"cr"
                  "eated\":1,\"model\":\"gpt-main\",\"choices\":[{\"index\":0,\"delta\":{\"tool_cal"
                  "ls\":[{"
                  "\"index\":1,\"id\":\"toolu_2\",\"type\":\"function\",\"function\":{\"name\":\"ge"
                  "t_time\""
                  ",\"arguments\":\"\"}}]},\"finish_reason\":null}]}\n"
                  "\n"
                  "data: {\"id\":\"msg_014p7gG3wDgGV9EUtLvnow3U\",\"object\":\"chat.completion.chun"
                  "k\",\"cr"
                  "eated\":1,\"model\":\"gpt-main\",\"choices\":[{\"index\":0,\"delta\":{\"tool_cal"
                  "ls\":[{"
                  "\"index\":1,\"function\":{\"arguments\":\"{}\"}}]},\"finish_reason\":null}]}\n"
                  "\n"
                  "data: {\"id\":\"msg_014p7gG3wDgGV9EUtLvnow3U\",\"object\":\"chat.completion.chun"
                  "k\",\"cr"
                  "eated\":1,\"model\":\"gpt-main\",\"choices\":[{\"index\":0,\"delta\":{},\"finish"
                  "_reason"
                  "\":\"tool_calls\"}]}\n"
                  "\n"
                  "data: {\"id\":\"msg_014p7gG3wDgGV9EUtLvnow3U\",\"object\":\"chat.completion.chun"
                  "k\",\"cr"
                  "eated\":1,\"model\":\"gpt-main\",\"choices\":[],\"usage\":{\"prompt_tokens\":472"
                  ",\"compl"
                  "etion_tokens\":89,\"total_tokens\":561}}\n"
                  "\n"
                  "data: [DONE]\n"
                  "\n");
}

/* Streams, OpenAI chunks -> Anthropic events: the function-calling guide's streamed tool calls
 * (the first chunk with id and name, then argument fragments by index), after reasoning and
 * text, two calls one after the other: each its own tool_use block, indexes counting up. */
static void test_stream_chat_to_messages_tools(void **state)
{
    static const char *const ev[] = {
        "{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,"
        "\"delta\":{\"role\":\"assistant\",\"content\":null,\"reasoning_content\":\"Think.\"},"
        "\"finish_reason\":null}]}",
        "{\"id\":\"chatcmpl-1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Checking.\"},"
        "\"finish_reason\":null}]}",
        "{\"id\":\"chatcmpl-1\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,"
        "\"id\":\"call_DdmO9pD3xa9XTPNJ32zg2hcA\",\"type\":\"function\",\"function\":{\"name\":"
        "\"get_weather\",\"arguments\":\"\"}}]},\"finish_reason\":null}]}",
        "{\"id\":\"chatcmpl-1\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,"
        "\"function\":{\"arguments\":\"{\\\"\"}}]},\"finish_reason\":null}]}",
        "{\"id\":\"chatcmpl-1\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,"
        "\"function\":{\"arguments\":\"location\\\":\\\"Paris\\\"}\"}}]},\"finish_reason\":null}]}",
        "{\"id\":\"chatcmpl-1\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":1,"
        "\"id\":\"call_2\",\"type\":\"function\",\"function\":{\"name\":\"get_time\","
        "\"arguments\":\"{}\"}}]},\"finish_reason\":null}]}",
        "{\"id\":\"chatcmpl-1\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":"
        "\"tool_calls\"}]}",
        "{\"id\":\"chatcmpl-1\",\"choices\":[],\"usage\":{\"prompt_tokens\":20,"
        "\"completion_tokens\":9,\"total_tokens\":29}}",
        "[DONE]",
        NULL};

    (void)state;
    expect_stream(RT_TRANSLATE_CHAT_TO_MESSAGES, 0, ev,
                  "event: message_start\n"
                  "data: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_chatcmpl-1\",\"type"
                  "\":\"mess"
                  "age\",\"role\":\"assistant\",\"model\":\"claude-main\",\"content\":[],\"stop_rea"
                  "son\":nu"
                  "ll,\"stop_sequence\":null,\"usage\":{\"input_tokens\":0,\"output_tokens\":0}}}\n"
                  "\n"
                  "event: content_block_start\n"
                  "data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":"
                  "\"thinki"
                  "ng\",\"thinking\":\"\",\"signature\":\"\"}}\n"
                  "\n"
                  "event: content_block_delta\n"
                  "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"thinki"
                  "ng_delta"
                  "\",\"thinking\":\"Think.\"}}\n"
                  "\n"
                  "event: content_block_stop\n"
                  "data: {\"type\":\"content_block_stop\",\"index\":0}\n"
                  "\n"
                  "event: content_block_start\n"
                  "data: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":"
                  "\"text\""
                  ",\"text\":\"\"}}\n"
                  "\n"
                  "event: content_block_delta\n"
                  "data: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"text_d"
                  "elta\","
                  "\"text\":\"Checking.\"}}\n"
                  "\n"
                  "event: content_block_stop\n"
                  "data: {\"type\":\"content_block_stop\",\"index\":1}\n"
                  "\n"
                  "event: content_block_start\n"
                  "data: {\"type\":\"content_block_start\",\"index\":2,\"content_block\":{\"type\":"
                  "\"tool_u"
                  "se\",\"id\":\"call_DdmO9pD3xa9XTPNJ32zg2hcA\",\"name\":\"get_weather\",\"input\""
                  ":{}}}\n"
                  "\n"
                  "event: content_block_delta\n"
                  "data: {\"type\":\"content_block_delta\",\"index\":2,\"delta\":{\"type\":\"input_"
                  "json_del"
                  "ta\",\"partial_json\":\"{\\\"\"}}\n"
                  "\n"
                  "event: content_block_delta\n"
                  "data: {\"type\":\"content_block_delta\",\"index\":2,\"delta\":{\"type\":\"input_"
                  "json_del"
                  "ta\",\"partial_json\":\"location\\\":\\\"Paris\\\"}\"}}\n"
                  "\n"
                  "event: content_block_stop\n"
                  "data: {\"type\":\"content_block_stop\",\"index\":2}\n"
                  "\n"
                  "event: content_block_start\n"
                  "data: {\"type\":\"content_block_start\",\"index\":3,\"content_block\":{\"type\":"
                  "\"tool_u"
                  "se\",\"id\":\"call_2\",\"name\":\"get_time\",\"input\":{}}}\n"
                  "\n"
                  "event: content_block_delta\n"
                  "data: {\"type\":\"content_block_delta\",\"index\":3,\"delta\":{\"type\":\"input_"
                  "json_del"
                  "ta\",\"partial_json\":\"{}\"}}\n"
                  "\n"
                  "event: content_block_stop\n"
                  "data: {\"type\":\"content_block_stop\",\"index\":3}\n"
                  "\n"
                  "event: message_delta\n"
                  "data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\",\"stop"
                  "_sequenc"
                  "e\":null},\"usage\":{\"input_tokens\":20,\"output_tokens\":9}}\n"
                  "\n"
                  "event: message_stop\n"
                  "data: {\"type\":\"message_stop\"}\n"
                  "\n");
}

/* Streams with response_format's JSON tool: its input fragments are the text, finish stop. */
static void test_stream_json_output(void **state)
{
    static const char *const ev[] = {
        "{\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"usage\":{\"input_tokens\":5,"
        "\"output_tokens\":1}}}",
        "{\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"tool_use\","
        "\"id\":\"toolu_1\",\"name\":\"json_tool_call\",\"input\":{}}}",
        "{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"input_json_delta\","
        "\"partial_json\":\"{\\\"a\\\":\"}}",
        "{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"input_json_delta\","
        "\"partial_json\":\"1}\"}}",
        "{\"type\":\"content_block_stop\",\"index\":0}",
        "{\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\"},\"usage\":{"
        "\"output_tokens\":7}}",
        "{\"type\":\"message_stop\"}",
        NULL};

    (void)state;
    expect_stream(RT_TRANSLATE_MESSAGES_TO_CHAT, RT_TRANSLATE_JSON_OUTPUT, ev,
                  "data: {\"id\":\"msg_1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"mod"
                  "el\":\"g"
                  "pt-main\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content"
                  "\":\"\"},"
                  "\"finish_reason\":null}]}\n"
                  "\n"
                  "data: {\"id\":\"msg_1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"mod"
                  "el\":\"g"
                  "pt-main\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"{\\\"a\\\":\"},\"fi"
                  "nish_rea"
                  "son\":null}]}\n"
                  "\n"
                  "data: {\"id\":\"msg_1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"mod"
                  "el\":\"g"
                  "pt-main\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"1}\"},\"finish_reas"
                  "on\":nul"
                  "l}]}\n"
                  "\n"
                  "data: {\"id\":\"msg_1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"mod"
                  "el\":\"g"
                  "pt-main\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n"
                  "\n"
                  "data: {\"id\":\"msg_1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"mod"
                  "el\":\"g"
                  "pt-main\",\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":7,"
                  "\"total_"
                  "tokens\":12}}\n"
                  "\n"
                  "data: [DONE]\n"
                  "\n");
}

/* A stream's tool calls are bounded (RT_TRANSLATE_TOOLS_MAX): one more is TG_EPROTO, the output
 * as it was; so is input for a block that is not a tool call, and a call's arguments after
 * another block started (Anthropic's blocks do not interleave). */
static void test_stream_tool_bounds(void **state)
{
    struct rt_translate_stream st;
    struct tg_buf b;
    char ev[256];
    size_t before;

    (void)state;
    assert_int_equal(tg_buf_init(&b, 256 * 1024), 0);
    rt_translate_stream_init(&st, RT_TRANSLATE_MESSAGES_TO_CHAT, "gpt-main", 1, 0);
    for (int i = 0; i <= RT_TRANSLATE_TOOLS_MAX; i++) {
        snprintf(ev, sizeof(ev),
                 "{\"type\":\"content_block_start\",\"index\":%d,\"content_block\":{\"type\":"
                 "\"tool_use\",\"id\":\"t%d\",\"name\":\"f\",\"input\":{}}}",
                 i, i);
        before = b.len;
        assert_int_equal(rt_translate_stream_event(&st, NULL, ev, strlen(ev), &b),
                         i < RT_TRANSLATE_TOOLS_MAX ? 0 : TG_EPROTO);
        assert_true(i < RT_TRANSLATE_TOOLS_MAX ? b.len > before : b.len == before);
    }
    assert_int_equal(st.n_tools, RT_TRANSLATE_TOOLS_MAX); /* the refused event changed nothing */
    snprintf(ev, sizeof(ev), "{\"type\":\"content_block_delta\",\"index\":99,\"delta\":{\"type\":"
                             "\"input_json_delta\",\"partial_json\":\"{}\"}}");
    assert_int_equal(rt_translate_stream_event(&st, NULL, ev, strlen(ev), &b), TG_EPROTO);
    tg_buf_fini(&b);

    assert_int_equal(tg_buf_init(&b, 256 * 1024), 0);
    rt_translate_stream_init(&st, RT_TRANSLATE_CHAT_TO_MESSAGES, "claude-main", 1, 0);
    for (int i = 0; i <= RT_TRANSLATE_TOOLS_MAX; i++) {
        snprintf(ev, sizeof(ev),
                 "{\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":%d,\"id\":\"c%d\","
                 "\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]}}]}",
                 i, i);
        before = b.len;
        assert_int_equal(rt_translate_stream_event(&st, NULL, ev, strlen(ev), &b),
                         i < RT_TRANSLATE_TOOLS_MAX ? 0 : TG_EPROTO);
        assert_true(i < RT_TRANSLATE_TOOLS_MAX ? b.len > before : b.len == before);
    }
    assert_int_equal(st.n_tools, RT_TRANSLATE_TOOLS_MAX);
    assert_int_equal(st.n_blocks, RT_TRANSLATE_TOOLS_MAX);
    /* call 0's arguments after call 31's block started */
    snprintf(ev, sizeof(ev), "{\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,"
                             "\"function\":{\"arguments\":\"x\"}}]}}]}");
    before = b.len;
    assert_int_equal(rt_translate_stream_event(&st, NULL, ev, strlen(ev), &b), TG_EPROTO);
    assert_int_equal(b.len, before);
    tg_buf_fini(&b);
}

/* A tool_use block that starts with its whole input (Anthropic streams it in input_json_delta
 * events, but a recorded or proxied stream may not): the input is the call's arguments. */
static void test_stream_tool_input_at_start(void **state)
{
    struct rt_translate_stream st;
    struct tg_buf b;
    const char *ev = "{\"type\":\"content_block_start\",\"index\":0,\"content_block\":{"
                     "\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"f\",\"input\":{"
                     "\"a\":1}}}";

    (void)state;
    assert_int_equal(tg_buf_init(&b, 4096), 0);
    rt_translate_stream_init(&st, RT_TRANSLATE_MESSAGES_TO_CHAT, "gpt-main", 1, 0);
    assert_int_equal(rt_translate_stream_event(&st, NULL, ev, strlen(ev), &b), 0);
    assert_non_null(strstr(b.data, "\"tool_calls\":[{\"index\":0,\"id\":\"toolu_1\",\"type\":"
                                   "\"function\",\"function\":{\"name\":\"f\",\"arguments\":"
                                   "\"{\\\"a\\\":1}\"}}]"));
    tg_buf_fini(&b);
}

#define HIST_FMT                                                                                   \
    "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"},"                                        \
    "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":["                                    \
    "{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"w\","                           \
    "\"arguments\":\"{}\"}},{\"id\":\"c2\",\"type\":\"function\",\"function\":"                    \
    "{\"name\":\"w\",\"arguments\":\"{}\"}}]},"                                                    \
    "{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"a\"},"                               \
    "{\"role\":\"tool\",\"tool_call_id\":\"c2\",\"content\":\"b\"}]%s}"

/* The turn that carries tool results without tools (OpenAI takes it; its clients often leave
 * the tools out then) went to Anthropic without tools, which it refuses ("Requests which include
 * tool_use or tool_result blocks must define tools"). The history's tools are declared now,
 * once each, with an open object schema; tools the client sent stay as they are. */
static void test_request_history_tools_declared(void **state)
{
    char err[256];
    char in[1024];
    json_t *out, *want;

    (void)state;
    snprintf(in, sizeof(in), HIST_FMT, "");
    out = to_messages(in, err, sizeof(err));
    assert_non_null(out);
    want = parse("[{\"name\":\"w\",\"input_schema\":{\"type\":\"object\",\"properties\":{}}}]");
    assert_true(json_equal(json_object_get(out, "tools"), want));
    json_decref(want);
    json_decref(out);
    snprintf(in, sizeof(in), HIST_FMT,
             ",\"tool_choice\":\"none\",\"tools\":[{\"type\":\"function\",\"function\":{"
             "\"name\":\"v\",\"parameters\":{\"type\":\"object\"}}}]");
    out = to_messages(in, err, sizeof(err));
    assert_non_null(out);
    want = parse("[{\"name\":\"v\",\"input_schema\":{\"type\":\"object\"}}]");
    assert_true(json_equal(json_object_get(out, "tools"), want));
    assert_string_equal(json_string_value(json_object_get(json_object_get(out, "tool_choice"),
                                                          "type")),
                        "none");
    json_decref(want);
    json_decref(out);
    /* no tool blocks: no tools */
    out = to_messages("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", err, sizeof(err));
    assert_non_null(out);
    assert_null(json_object_get(out, "tools"));
    json_decref(out);
}
#undef HIST_FMT

static size_t count_of(const char *hay, const char *needle)
{
    size_t n = 0;

    for (const char *p = strstr(hay, needle); p != NULL; p = strstr(p + 1, needle))
        n++;
    return n;
}

/* An Anthropic tool_result's is_error was left out: the OpenAI tool message's text starts with
 * RT_TRANSLATE_TOOL_ERROR_MARK, and a tool message so marked is an is_error tool_result back;
 * an image in a tool result, which an OpenAI tool message cannot carry, is a 400 naming it
 * (for a dialect, RT_TRANSLATE_TOOL_MEDIA, it goes as an image_url part, and Bedrock takes it
 * as an image block of the toolResult, with status error). */
/* Anthropic document blocks (a base64 PDF) were refused for OpenAI and OpenAI file parts for
 * Anthropic, though both take PDFs: document <-> file part with file_data a data: URL, title
 * <-> filename; what the other side has no place for is a 400 naming it. Through chat, Bedrock
 * takes the PDF as a document block (the filename as its name). */
static void test_request_documents(void **state)
{
    struct rt_deployment_conf d;
    char err[256];
    json_t *out, *b;

    (void)state;
    out = to_chat("{\"max_tokens\":9,\"messages\":[{\"role\":\"user\",\"content\":["
                  "{\"type\":\"document\",\"source\":{\"type\":\"base64\",\"media_type\":"
                  " \"application/pdf\",\"data\":\"JVBERi0x\"},\"title\":\"q3.pdf\"},"
                  "{\"type\":\"text\",\"text\":\"sum it up\"}]}]}",
                  err, sizeof(err));
    if (out == NULL)
        fail_msg("%s", err);
    expect_json(json_incref(json_object_get(out, "messages")),
                "[{\"role\":\"user\",\"content\":[{\"type\":\"file\",\"file\":{\"file_data\":"
                "\"data:application/pdf;base64,JVBERi0x\",\"filename\":\"q3.pdf\"}},"
                "{\"type\":\"text\",\"text\":\"sum it up\"}]}]");
    memset(&d, 0, sizeof(d));
    b = rt_dialect_converse.request(out, &d, 0, err, sizeof(err));
    json_decref(out);
    if (b == NULL)
        fail_msg("%s", err);
    expect_json(json_incref(json_object_get(b, "messages")),
                "[{\"role\":\"user\",\"content\":[{\"document\":{\"format\":\"pdf\","
                "\"name\":\"q3\",\"source\":{\"bytes\":\"JVBERi0x\"}}},{\"text\":\"sum it up\"}]}]");
    json_decref(b);

    out = to_messages("{\"messages\":[{\"role\":\"user\",\"content\":["
                      "{\"type\":\"file\",\"file\":{\"file_data\":"
                      " \"data:application/pdf;base64,JVBERi0x\",\"filename\":\"a.pdf\"}},"
                      "{\"type\":\"file\",\"file\":{\"file_data\":"
                      " \"data:application/pdf;base64,JVBERi0y\"}}]}]}",
                      err, sizeof(err));
    if (out == NULL)
        fail_msg("%s", err);
    expect_json(json_incref(json_object_get(out, "messages")),
                "[{\"role\":\"user\",\"content\":[{\"type\":\"document\",\"source\":{"
                "\"type\":\"base64\",\"media_type\":\"application/pdf\",\"data\":\"JVBERi0x\"},"
                "\"title\":\"a.pdf\"},{\"type\":\"document\",\"source\":{\"type\":\"base64\","
                "\"media_type\":\"application/pdf\",\"data\":\"JVBERi0y\"}}]}]");
    json_decref(out);

    /* refusals naming the field */
    assert_null(to_messages("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":"
                            "\"file\",\"file\":{\"file_id\":\"file-1\"}}]}]}",
                            err, sizeof(err)));
    assert_string_equal(err, "messages: content[0].file.file_id: an uploaded file cannot be "
                             "translated (send the PDF as file_data)");
    assert_null(to_messages("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":"
                            "\"text\",\"text\":\"x\"},{\"type\":\"file\",\"file\":{\"file_data\":"
                            "\"data:text/csv;base64,YQ==\"}}]}]}",
                            err, sizeof(err)));
    assert_string_equal(err, "messages: content[1].file.file_data: must be a "
                             "data:application/pdf;base64, URL (PDFs are the files both sides "
                             "take)");
    assert_null(to_chat("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":"
                        "\"document\",\"source\":{\"type\":\"base64\",\"media_type\":"
                        "\"application/pdf\",\"data\":\"JVBE\"},\"context\":\"from Q3\"}]}]}",
                        err, sizeof(err)));
    assert_string_equal(err, "messages[0].content[0].context: OpenAI chat has no equivalent");
    assert_null(to_chat("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":"
                        "\"document\",\"source\":{\"type\":\"base64\",\"media_type\":"
                        "\"application/pdf\",\"data\":\"JVBE\"},\"citations\":{\"enabled\":true}}]}]}",
                        err, sizeof(err)));
    assert_string_equal(err, "messages[0].content[0].citations: OpenAI chat has no equivalent");
    assert_null(to_chat("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":"
                        "\"document\",\"source\":{\"type\":\"text\",\"media_type\":"
                        "\"text/plain\",\"data\":\"hi\"}}]}]}",
                        err, sizeof(err)));
    assert_string_equal(err, "messages[0].content[0].source: only a base64 application/pdf "
                             "document can be translated to an OpenAI file part");
}

#define TR_HIST \
        "{\"max_tokens\":10,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}," \
        "{\"role\":\"assistant\",\"content\":[{\"type\":\"tool_use\",\"id\":\"t1\"," \
        " \"name\":\"w\",\"input\":{}},{\"type\":\"tool_use\",\"id\":\"t2\",\"name\":\"w\"," \
        " \"input\":{}}]}," \
        "{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"t1\"," \
        " \"is_error\":true,\"content\":\"denied\"},{\"type\":\"tool_result\"," \
        " \"tool_use_id\":\"t2\",\"is_error\":true,\"content\":[{\"type\":\"text\",\"text\":" \
        " \"shot\"}%s]}]}]}"

static void test_request_tool_result_error_and_images(void **state)
{
    static const char *const img =
        ",{\"type\":\"image\",\"source\":{\"type\":\"base64\",\"media_type\":"
        "\"image/png\",\"data\":\"iVBO\"}}";
    struct rt_deployment_conf d;
    char err[256], in[1024];
    json_t *req, *out, *b;

    (void)state;
    snprintf(in, sizeof(in), TR_HIST, "");
    out = to_chat(in, err, sizeof(err));
    if (out == NULL)
        fail_msg("%s", err);
    b = json_pack("[O,O]", json_array_get(json_object_get(out, "messages"), 2),
                  json_array_get(json_object_get(out, "messages"), 3));
    expect_json(b, "[{\"role\":\"tool\",\"tool_call_id\":\"t1\",\"content\":"
                   "\"[tool error] denied\"},{\"role\":\"tool\",\"tool_call_id\":\"t2\","
                   "\"content\":\"[tool error] shot\"}]");
    json_decref(out);

    /* back: the mark is is_error */
    out = to_messages("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"},"
                      "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"t1\","
                      " \"type\":\"function\",\"function\":{\"name\":\"w\",\"arguments\":\"{}\"}}]},"
                      "{\"role\":\"tool\",\"tool_call_id\":\"t1\",\"content\":"
                      " \"[tool error] denied\"},"
                      "{\"role\":\"tool\",\"tool_call_id\":\"t1\",\"content\":[{\"type\":\"text\","
                      " \"text\":\"[tool error]\"}]},"
                      "{\"role\":\"tool\",\"tool_call_id\":\"t1\",\"content\":\"[tool errors]\"}]}",
                      err, sizeof(err));
    if (out == NULL)
        fail_msg("%s", err);
    expect_json(json_incref(json_object_get(json_array_get(json_object_get(out, "messages"), 2),
                                            "content")),
                "[{\"type\":\"tool_result\",\"tool_use_id\":\"t1\",\"content\":\"denied\","
                "\"is_error\":true},{\"type\":\"tool_result\",\"tool_use_id\":\"t1\","
                "\"content\":\"\",\"is_error\":true},{\"type\":\"tool_result\",\"tool_use_id\":"
                "\"t1\",\"content\":\"[tool errors]\"}]");
    json_decref(out);

    /* an image in a tool result: refused for OpenAI */
    snprintf(in, sizeof(in), TR_HIST, img);
    assert_null(to_chat(in, err, sizeof(err)));
    assert_string_equal(err, "messages[2].content[1].content[1]: an image in a tool_result cannot "
                             "be translated: an OpenAI tool message takes text only");
    /* for a dialect: image_url parts, the mark first; Bedrock's toolResult takes them */
    req = parse(in);
    out = rt_translate_messages_to_chat_opts(req, "m", RT_TRANSLATE_TOOL_MEDIA, err, sizeof(err));
    json_decref(req);
    if (out == NULL)
        fail_msg("%s", err);
    expect_json(json_incref(json_object_get(json_array_get(json_object_get(out, "messages"), 3),
                                            "content")),
                "[{\"type\":\"text\",\"text\":\"[tool error]\"},{\"type\":\"text\",\"text\":"
                "\"shot\"},{\"type\":\"image_url\",\"image_url\":{\"url\":"
                "\"data:image/png;base64,iVBO\"}}]");
    memset(&d, 0, sizeof(d));
    b = rt_dialect_converse.request(out, &d, 0, err, sizeof(err));
    json_decref(out);
    if (b == NULL)
        fail_msg("%s", err);
    expect_json(json_incref(json_object_get(json_array_get(json_object_get(b, "messages"), 2),
                                            "content")),
                "[{\"toolResult\":{\"toolUseId\":\"t1\",\"status\":\"error\",\"content\":"
                "[{\"text\":\"denied\"}]}},{\"toolResult\":{\"toolUseId\":\"t2\",\"status\":"
                "\"error\",\"content\":[{\"text\":\"shot\"},{\"image\":{\"format\":\"png\","
                "\"source\":{\"bytes\":\"iVBO\"}}}]}}]");
    json_decref(b);
    /* a PDF document in a tool result: a file part for a dialect, a toolResult document for
     * Bedrock */
    snprintf(in, sizeof(in), TR_HIST,
             ",{\"type\":\"document\",\"source\":{\"type\":\"base64\",\"media_type\":"
             "\"application/pdf\",\"data\":\"JVBE\"},\"title\":\"r.pdf\"}");
    assert_null(to_chat(in, err, sizeof(err)));
    assert_string_equal(err, "messages[2].content[1].content[1].type: \"document\" in a "
                             "tool_result cannot be translated to OpenAI chat");
    req = parse(in);
    out = rt_translate_messages_to_chat_opts(req, "m", RT_TRANSLATE_TOOL_MEDIA, err, sizeof(err));
    json_decref(req);
    if (out == NULL)
        fail_msg("%s", err);
    b = rt_dialect_converse.request(out, &d, 0, err, sizeof(err));
    json_decref(out);
    if (b == NULL)
        fail_msg("%s", err);
    expect_json(json_incref(json_object_get(
                    json_array_get(json_object_get(json_array_get(json_object_get(b, "messages"),
                                                                  2),
                                                   "content"),
                                   1),
                    "toolResult")),
                "{\"toolUseId\":\"t2\",\"status\":\"error\",\"content\":[{\"text\":\"shot\"},"
                "{\"document\":{\"format\":\"pdf\",\"name\":\"r\",\"source\":{\"bytes\":"
                "\"JVBE\"}}}]}");
    json_decref(b);
    /* back: a tool message's images (which some OpenAI clients send) are image blocks of the
     * tool_result, which takes them */
    out = to_messages("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"},"
                      "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"t1\","
                      " \"type\":\"function\",\"function\":{\"name\":\"w\",\"arguments\":\"{}\"}}]},"
                      "{\"role\":\"tool\",\"tool_call_id\":\"t1\",\"content\":[{\"type\":\"text\","
                      " \"text\":\"[tool error] blurry\"},{\"type\":\"image_url\",\"image_url\":{"
                      " \"url\":\"data:image/png;base64,iVBO\"}}]}]}",
                      err, sizeof(err));
    if (out == NULL)
        fail_msg("%s", err);
    expect_json(json_incref(json_object_get(json_array_get(json_object_get(out, "messages"), 2),
                                            "content")),
                "[{\"type\":\"tool_result\",\"tool_use_id\":\"t1\",\"is_error\":true,"
                "\"content\":[{\"type\":\"text\",\"text\":\"blurry\"},{\"type\":\"image\","
                "\"source\":{\"type\":\"base64\",\"media_type\":\"image/png\",\"data\":"
                "\"iVBO\"}}]}]");
    json_decref(out);
    assert_null(to_messages("{\"messages\":[{\"role\":\"tool\",\"tool_call_id\":\"t1\","
                            "\"content\":[{\"type\":\"input_audio\"}]}]}",
                            err, sizeof(err)));
    assert_string_equal(err, "messages[0].content[0]: a tool message takes text and images "
                             "only, not \"input_audio\"");
    /* another block in a tool result is refused naming it */
    snprintf(in, sizeof(in), TR_HIST, ",{\"type\":\"search_result\"}");
    assert_null(to_chat(in, err, sizeof(err)));
    assert_string_equal(err, "messages[2].content[1].content[1].type: \"search_result\" in a "
                             "tool_result cannot be translated to OpenAI chat");
}
#undef TR_HIST

/* A tool_use whose input has no members streams as one empty input_json_delta (or none): the
 * OpenAI client got arguments "" for it, which its JSON.parse refuses. Such a call's arguments
 * are "{}" now, once, when its block stops (or at message_delta for a block never stopped); a
 * call whose input streamed gets nothing more. */
static void test_stream_tool_without_input_gets_empty_object(void **state)
{
    static const char *const ev[] = {
        "{\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"usage\":{"
        "\"input_tokens\":5,\"output_tokens\":1}}}",
        "{\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":"
        "\"tool_use\",\"id\":\"toolu_a\",\"name\":\"ping\",\"input\":{}}}",
        "{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":"
        "\"input_json_delta\",\"partial_json\":\"\"}}",
        "{\"type\":\"content_block_stop\",\"index\":0}",
        "{\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":"
        "\"tool_use\",\"id\":\"toolu_b\",\"name\":\"f\",\"input\":{}}}",
        "{\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":"
        "\"input_json_delta\",\"partial_json\":\"{\\\"a\\\":1}\"}}",
        "{\"type\":\"content_block_stop\",\"index\":1}",
        "{\"type\":\"content_block_start\",\"index\":2,\"content_block\":{\"type\":"
        "\"tool_use\",\"id\":\"toolu_c\",\"name\":\"ping\",\"input\":{}}}",
        "{\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\"},\"usage\":{"
        "\"output_tokens\":7}}",
        "{\"type\":\"message_stop\"}",
        NULL,
    };
    struct rt_translate_stream st;
    struct tg_buf b;

    (void)state;
    assert_int_equal(tg_buf_init(&b, 64 * 1024), 0);
    rt_translate_stream_init(&st, RT_TRANSLATE_MESSAGES_TO_CHAT, "gpt-main", 1, 0);
    for (size_t i = 0; ev[i] != NULL; i++)
        assert_int_equal(rt_translate_stream_event(&st, NULL, ev[i], strlen(ev[i]), &b), 0);
    assert_int_equal(rt_translate_stream_finish(&st, &b), 0);
    assert_non_null(strstr(b.data, "\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":"
                                   "\"{}\"}}]"));
    assert_non_null(strstr(b.data, "\"tool_calls\":[{\"index\":2,\"function\":{\"arguments\":"
                                   "\"{}\"}}]"));
    assert_int_equal(count_of(b.data, "\"arguments\":\"{}\""), 2);
    assert_non_null(strstr(b.data, "\"arguments\":\"{\\\"a\\\":1}\""));
    /* the {} of call 2 comes before the finish chunk */
    assert_true(strstr(b.data, "\"index\":2,\"function\":{\"arguments\":\"{}\"") <
                strstr(b.data, "\"finish_reason\":\"tool_calls\""));
    tg_buf_fini(&b);
}

/* thinking_blocks (LiteLLM's field) of an assistant turn go to Anthropic as its first blocks,
 * signatures and data unchanged (Anthropic checks them when tools are used with extended
 * thinking); a malformed entry is a 400 naming it. An Anthropic history's thinking goes to
 * OpenAI as nothing: OpenAI chat takes no reasoning as input. A redacted_thinking block of a
 * stream reaches the client as a thinking_blocks delta. */
static void test_thinking_blocks(void **state)
{
    static const struct {
        const char *tb;
        const char *err;
    } bad[] = {
        {"{}", "messages[1].thinking_blocks: expected an array"},
        {"[{\"type\":\"thinking\",\"thinking\":\"a\"}]",
         "messages[1].thinking_blocks[0].signature: expected a string"},
        {"[{\"type\":\"redacted_thinking\",\"data\":\"d\"},{\"type\":\"thinking\",\"thinking\":"
         "\"a\",\"signature\":5}]",
         "messages[1].thinking_blocks[1].signature: expected a string"},
        {"[{\"type\":\"thinking\",\"signature\":\"s\"}]",
         "messages[1].thinking_blocks[0].thinking: expected a string"},
        {"[{\"type\":\"redacted_thinking\"}]",
         "messages[1].thinking_blocks[0].data: expected a string"},
        {"[\"x\"]", "messages[1].thinking_blocks[0].type: expected a string"},
        {"[{\"type\":\"reasoning\"}]",
         "messages[1].thinking_blocks[0].type: \"reasoning\" is not thinking or "
         "redacted_thinking"},
    };
    static const char *const ev[] = {
        "{\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"usage\":{\"input_tokens\":"
        "5,\"output_tokens\":1}}}",
        "{\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":"
        "\"redacted_thinking\",\"data\":\"EmwKAhgBEgy3va\"}}",
        "{\"type\":\"content_block_stop\",\"index\":0}",
        "{\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{"
        "\"output_tokens\":3}}",
        "{\"type\":\"message_stop\"}",
        NULL};
    char err[256], in[1024];
    size_t i;

    (void)state;
    expect_json(to_messages(
        "{\"messages\":[{\"role\":\"user\",\"content\":\"Weather in Paris?\"},"
        "{\"role\":\"assistant\",\"content\":\"Checking.\",\"reasoning_content\":\"Use the tool."
        "\",\"thinking_blocks\":[{\"type\":\"thinking\",\"thinking\":\"Use the tool.\","
        "\"signature\":\"EqQBCgIYAhIM\"},{\"type\":\"redacted_thinking\",\"data\":"
        "\"EmwKAhgBEgy3va\"}],\"tool_calls\":[{\"id\":\"toolu_1\",\"type\":\"function\","
        "\"function\":{\"name\":\"get_weather\",\"arguments\":\"{}\"}}]},"
        "{\"role\":\"tool\",\"tool_call_id\":\"toolu_1\",\"content\":\"18C\"},"
        "{\"role\":\"assistant\",\"content\":\"18C.\",\"thinking_blocks\":[{\"type\":"
        "\"thinking\",\"thinking\":\"Done.\",\"signature\":\"Sig2\"}]},"
        "{\"role\":\"assistant\",\"content\":\"More?\",\"thinking_blocks\":null}],"
        "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\"}}]}",
        err, sizeof(err)),
        "{\"model\":\"claude-sonnet-4-5\",\"max_tokens\":4096,\"messages\":["
        "{\"role\":\"user\",\"content\":\"Weather in Paris?\"},"
        "{\"role\":\"assistant\",\"content\":[{\"type\":\"thinking\",\"thinking\":"
        "\"Use the tool.\",\"signature\":\"EqQBCgIYAhIM\"},{\"type\":\"redacted_thinking\","
        "\"data\":\"EmwKAhgBEgy3va\"},{\"type\":\"text\",\"text\":\"Checking.\"},{\"type\":"
        "\"tool_use\",\"id\":\"toolu_1\",\"name\":\"get_weather\",\"input\":{}}]},"
        "{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"toolu_1\","
        "\"content\":\"18C\"}]},"
        "{\"role\":\"assistant\",\"content\":[{\"type\":\"thinking\",\"thinking\":\"Done.\","
        "\"signature\":\"Sig2\"},{\"type\":\"text\",\"text\":\"18C.\"}]},"
        "{\"role\":\"assistant\",\"content\":\"More?\"}],"
        "\"tools\":[{\"name\":\"get_weather\",\"input_schema\":{\"type\":\"object\","
        "\"properties\":{}}}]}");
    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        snprintf(in, sizeof(in), "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},"
                 "{\"role\":\"assistant\",\"content\":\"x\",\"thinking_blocks\":%s}]}", bad[i].tb);
        assert_null(to_messages(in, err, sizeof(err)));
        assert_string_equal(err, bad[i].err);
    }
    /* a thinking block without a signature is reasoning_content only (there is nothing the
     * client could send back) */
    {
        json_t *resp = parse("{\"id\":\"m\",\"content\":[{\"type\":\"thinking\",\"thinking\":"
                             "\"t\"},{\"type\":\"text\",\"text\":\"a\"}],\"stop_reason\":"
                             "\"end_turn\",\"usage\":{\"input_tokens\":1,\"output_tokens\":1}}");

        expect_json(rt_translate_messages_resp_to_chat(resp, "gpt-main", 0),
                    "{\"id\":\"m\",\"object\":\"chat.completion\",\"model\":\"gpt-main\","
                    "\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":"
                    "\"a\",\"reasoning_content\":\"t\"},\"finish_reason\":\"stop\"}],\"usage\":{"
                    "\"prompt_tokens\":1,\"completion_tokens\":1,\"total_tokens\":2}}");
        json_decref(resp);
    }
    /* Anthropic's history to OpenAI: thinking and redacted_thinking are not sent */
    expect_json(to_chat("{\"max_tokens\":10,\"messages\":[{\"role\":\"user\",\"content\":\"q\"},"
                        "{\"role\":\"assistant\",\"content\":[{\"type\":\"thinking\",\"thinking\":"
                        "\"t\",\"signature\":\"s\"},{\"type\":\"redacted_thinking\",\"data\":"
                        "\"d\"},{\"type\":\"text\",\"text\":\"a\"}]}]}",
                        err, sizeof(err)),
                "{\"model\":\"gpt-4o\",\"max_tokens\":10,\"messages\":[{\"role\":"
                "\"user\",\"content\":\"q\"},{\"role\":\"assistant\",\"content\":\"a\"}]}");
    /* ... and to a dialect that takes thinking_blocks (Bedrock): they go, unchanged */
    {
        json_t *req = parse("{\"max_tokens\":10,\"messages\":[{\"role\":\"user\",\"content\":"
                            "\"q\"},{\"role\":\"assistant\",\"content\":[{\"type\":\"thinking\","
                            "\"thinking\":\"t\",\"signature\":\"s\"},{\"type\":"
                            "\"redacted_thinking\",\"data\":\"d\"},{\"type\":\"text\",\"text\":"
                            "\"a\"}]}]}");

        expect_json(rt_translate_messages_to_chat_opts(req, "gpt-4o",
                                                       RT_TRANSLATE_THINKING_BLOCKS, err,
                                                       sizeof(err)),
                    "{\"model\":\"gpt-4o\",\"max_tokens\":10,\"messages\":[{\"role\":"
                    "\"user\",\"content\":\"q\"},{\"role\":\"assistant\",\"content\":\"a\","
                    "\"thinking_blocks\":[{\"type\":\"thinking\",\"thinking\":\"t\","
                    "\"signature\":\"s\"},{\"type\":\"redacted_thinking\",\"data\":\"d\"}]}]}");
        json_decref(req);
        req = parse("{\"max_tokens\":10,\"messages\":[{\"role\":\"user\",\"content\":\"q\"},"
                    "{\"role\":\"assistant\",\"content\":[{\"type\":\"thinking\",\"thinking\":"
                    "\"t\"}]}]}");
        assert_null(rt_translate_messages_to_chat_opts(req, "gpt-4o",
                                                       RT_TRANSLATE_THINKING_BLOCKS, err,
                                                       sizeof(err)));
        assert_string_equal(err, "messages[1].content[0].signature: expected a string");
        json_decref(req);
    }
    expect_stream(RT_TRANSLATE_MESSAGES_TO_CHAT, 0, ev,
                  "data: {\"id\":\"msg_1\",\"object\":\"chat.completion.chunk\",\"created\":1,"
                  "\"model\":\"gpt-main\",\"choices\":[{\"index\":0,\"delta\":{\"role\":"
                  "\"assistant\",\"content\":\"\"},\"finish_reason\":null}]}\n\n"
                  "data: {\"id\":\"msg_1\",\"object\":\"chat.completion.chunk\",\"created\":1,"
                  "\"model\":\"gpt-main\",\"choices\":[{\"index\":0,\"delta\":{\"thinking_blocks\":"
                  "[{\"type\":\"redacted_thinking\",\"data\":\"EmwKAhgBEgy3va\"}]},"
                  "\"finish_reason\":null}]}\n\n"
                  "data: {\"id\":\"msg_1\",\"object\":\"chat.completion.chunk\",\"created\":1,"
                  "\"model\":\"gpt-main\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":"
                  "\"stop\"}]}\n\n"
                  "data: {\"id\":\"msg_1\",\"object\":\"chat.completion.chunk\",\"created\":1,"
                  "\"model\":\"gpt-main\",\"choices\":[],\"usage\":{\"prompt_tokens\":5,"
                  "\"completion_tokens\":3,\"total_tokens\":8}}\n\n"
                  "data: [DONE]\n\n");
}

/* Bedrock Converse's reasoning signatures reach an Anthropic client: a chat answer's
 * thinking_blocks are its thinking (signed) and redacted_thinking blocks; in a chunk stream a
 * thinking entry's signature is the open thinking block's signature_delta and a redacted entry
 * a redacted_thinking block. */
static void test_thinking_blocks_to_messages(void **state)
{
    static const char *const ev[] = {
        "{\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\","
        "\"reasoning_content\":\"hmm\"}}]}",
        "{\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"thinking_blocks\":[{\"type\":"
        "\"thinking\",\"thinking\":\"\",\"signature\":\"EqQB\"}]}}]}",
        "{\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"thinking_blocks\":[{\"type\":"
        "\"redacted_thinking\",\"data\":\"EmwK\"}]}}]}",
        "{\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"},"
        "\"finish_reason\":\"stop\"}]}",
        "[DONE]",
        NULL};
    json_t *resp = parse(
        "{\"id\":\"c1\",\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\","
        "\"content\":\"Hi\",\"reasoning_content\":\"hmm\",\"thinking_blocks\":[{\"type\":"
        "\"thinking\",\"thinking\":\"hmm\",\"signature\":\"EqQB\"},{\"type\":"
        "\"redacted_thinking\",\"data\":\"EmwK\"}]},\"finish_reason\":\"stop\"}],\"usage\":{"
        "\"prompt_tokens\":1,\"completion_tokens\":2}}");

    (void)state;
    expect_json(rt_translate_chat_resp_to_messages(resp, "claude-main"),
                "{\"id\":\"msg_c1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":"
                "\"claude-main\",\"content\":[{\"type\":\"thinking\",\"thinking\":\"hmm\","
                "\"signature\":\"EqQB\"},{\"type\":\"redacted_thinking\",\"data\":\"EmwK\"},"
                "{\"type\":\"text\",\"text\":\"Hi\"}],\"stop_reason\":\"end_turn\","
                "\"stop_sequence\":null,\"usage\":{\"input_tokens\":1,\"output_tokens\":2}}");
    json_decref(resp);
    expect_stream(RT_TRANSLATE_CHAT_TO_MESSAGES, 0, ev,
                  "event: message_start\n"
                  "data: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_c1\",\"type\":\"mess"
                  "age\",\"role\":\"assistant\",\"model\":\"claude-main\",\"content\":[],\"stop_rea"
                  "son\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":0,\"output_tokens"
                  "\":0}}}\n"
                  "\n"
                  "event: content_block_start\n"
                  "data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":"
                  "\"thinking\",\"thinking\":\"\",\"signature\":\"\"}}\n"
                  "\n"
                  "event: content_block_delta\n"
                  "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"thinki"
                  "ng_delta\",\"thinking\":\"hmm\"}}\n"
                  "\n"
                  "event: content_block_delta\n"
                  "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"signat"
                  "ure_delta\",\"signature\":\"EqQB\"}}\n"
                  "\n"
                  "event: content_block_stop\n"
                  "data: {\"type\":\"content_block_stop\",\"index\":0}\n"
                  "\n"
                  "event: content_block_start\n"
                  "data: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":"
                  "\"redacted_thinking\",\"data\":\"EmwK\"}}\n"
                  "\n"
                  "event: content_block_stop\n"
                  "data: {\"type\":\"content_block_stop\",\"index\":1}\n"
                  "\n"
                  "event: content_block_start\n"
                  "data: {\"type\":\"content_block_start\",\"index\":2,\"content_block\":{\"type\":"
                  "\"text\",\"text\":\"\"}}\n"
                  "\n"
                  "event: content_block_delta\n"
                  "data: {\"type\":\"content_block_delta\",\"index\":2,\"delta\":{\"type\":\"text_d"
                  "elta\",\"text\":\"Hi\"}}\n"
                  "\n"
                  "event: content_block_stop\n"
                  "data: {\"type\":\"content_block_stop\",\"index\":2}\n"
                  "\n"
                  "event: message_delta\n"
                  "data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop"
                  "_sequence\":null},\"usage\":{\"input_tokens\":0,\"output_tokens\":0}}\n"
                  "\n"
                  "event: message_stop\n"
                  "data: {\"type\":\"message_stop\"}\n"
                  "\n");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_total_tokens_saturates),
        cmocka_unit_test(test_cache_usage_translated),
        cmocka_unit_test(test_long_utf8_id_cut_at_character),
        cmocka_unit_test(test_request_chat_to_messages_tools),
        cmocka_unit_test(test_request_messages_to_chat_tools),
        cmocka_unit_test(test_request_response_format_and_reasoning),
        cmocka_unit_test(test_request_refusals),
        cmocka_unit_test(test_answer_messages_to_chat),
        cmocka_unit_test(test_answer_chat_to_messages),
        cmocka_unit_test(test_stream_messages_to_chat_tools),
        cmocka_unit_test(test_stream_chat_to_messages_tools),
        cmocka_unit_test(test_stream_json_output),
        cmocka_unit_test(test_stream_tool_bounds),
        cmocka_unit_test(test_stream_tool_input_at_start),
        cmocka_unit_test(test_stream_tool_without_input_gets_empty_object),
        cmocka_unit_test(test_request_history_tools_declared),
        cmocka_unit_test(test_request_tool_result_error_and_images),
        cmocka_unit_test(test_request_documents),
        cmocka_unit_test(test_thinking_blocks),
        cmocka_unit_test(test_thinking_blocks_to_messages),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
