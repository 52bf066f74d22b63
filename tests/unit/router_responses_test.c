/* translate (Responses): OpenAI Responses requests -> chat requests, chat answers and streams ->
 * Responses answers and event streams. The requests are shaped as the examples of OpenAI's API
 * reference (Responses: create; input items; function calling; images; structured outputs;
 * reasoning), the answers and events as its response object and streaming events. */
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

/* out (taken) equals the JSON text want; prints both when not. */
static void expect_json(json_t *out, const char *want)
{
    json_t *w = parse(want);

    assert_non_null(out);
    if (!json_equal(out, w)) {
        char *got = json_dumps(out, JSON_COMPACT | JSON_SORT_KEYS);
        char *exp = json_dumps(w, JSON_COMPACT | JSON_SORT_KEYS);

        fprintf(stderr, "got:  %s\nwant: %s\n", got, exp);
        free(got);
        free(exp);
        fail();
    }
    json_decref(w);
    json_decref(out);
}

/* The chat request for the Responses request text (model "m"). */
static json_t *to_chat(const char *text, char *err, size_t errlen)
{
    json_t *req = parse(text);
    json_t *out;

    err[0] = '\0';
    out = rt_translate_responses_to_chat(req, "m", err, errlen);
    json_decref(req);
    return out;
}

static void expect_chat(const char *req, const char *want)
{
    char err[256];
    json_t *out = to_chat(req, err, sizeof(err));

    if (out == NULL)
        fprintf(stderr, "refused: %s\n", err);
    expect_json(out, want);
}

static void expect_refused(const char *req, const char *want_err)
{
    char err[256];
    json_t *out = to_chat(req, err, sizeof(err));

    assert_null(out);
    assert_string_equal(err, want_err);
}

static void test_request_text(void **state)
{
    (void)state;
    /* the reference's first example: a string input */
    expect_chat("{\"model\":\"gpt-4.1\",\"input\":\"Tell me a three sentence bedtime story about a "
                "unicorn.\"}",
                "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"Tell me a three "
                "sentence bedtime story about a unicorn.\"}]}");
    /* instructions, sampling, limits, streaming (with the usage chunk) */
    expect_chat("{\"model\":\"x\",\"instructions\":\"Talk like a pirate.\",\"input\":\"Are "
                "semicolons optional in JavaScript?\",\"temperature\":0.5,\"top_p\":0.9,"
                "\"max_output_tokens\":100,\"user\":\"u1\",\"metadata\":{\"k\":\"v\"},"
                "\"stream\":true,\"store\":false,\"truncation\":\"disabled\",\"include\":[],"
                "\"text\":{\"format\":{\"type\":\"text\"},\"verbosity\":\"low\"}}",
                "{\"model\":\"m\",\"messages\":[{\"role\":\"system\",\"content\":\"Talk like a "
                "pirate.\"},{\"role\":\"user\",\"content\":\"Are semicolons optional in "
                "JavaScript?\"}],\"verbosity\":\"low\",\"max_completion_tokens\":100,"
                "\"temperature\":0.5,\"top_p\":0.9,\"user\":\"u1\",\"metadata\":{\"k\":\"v\"},"
                "\"stream\":true,\"stream_options\":{\"include_usage\":true}}");
}

static void test_request_multi_turn(void **state)
{
    (void)state;
    /* role messages (easy input messages and typed message items), developer, assistant output */
    expect_chat("{\"model\":\"x\",\"input\":[{\"role\":\"developer\",\"content\":\"Be brief.\"},"
                "{\"role\":\"user\",\"content\":\"knock knock.\"},{\"type\":\"message\","
                "\"role\":\"assistant\",\"id\":\"msg_1\",\"status\":\"completed\",\"content\":[{"
                "\"type\":\"output_text\",\"text\":\"Who's there?\",\"annotations\":[]}]},"
                "{\"role\":\"user\",\"content\":[{\"type\":\"input_text\",\"text\":\"Orange.\"}]}"
                ",{\"type\":\"reasoning\",\"id\":\"rs_1\",\"summary\":[]}]}",
                "{\"model\":\"m\",\"messages\":[{\"role\":\"developer\",\"content\":\"Be "
                "brief.\"},{\"role\":\"user\",\"content\":\"knock knock.\"},{\"role\":"
                "\"assistant\",\"content\":\"Who's there?\"},{\"role\":\"user\",\"content\":[{"
                "\"type\":\"text\",\"text\":\"Orange.\"}]}]}");
}

static void test_request_tools(void **state)
{
    (void)state;
    /* function tools, a forced function, the model's call and its output fed back */
    expect_chat(
        "{\"model\":\"x\",\"tools\":[{\"type\":\"function\",\"name\":\"get_weather\","
        "\"description\":\"Get current temperature for a given location.\",\"parameters\":{"
        "\"type\":\"object\",\"properties\":{\"location\":{\"type\":\"string\"}},\"required\":["
        "\"location\"],\"additionalProperties\":false},\"strict\":true}],\"tool_choice\":{"
        "\"type\":\"function\",\"name\":\"get_weather\"},\"parallel_tool_calls\":false,"
        "\"input\":[{\"role\":\"user\",\"content\":\"What is the weather like in Paris today?\"},"
        "{\"type\":\"function_call\",\"id\":\"fc_12345xyz\",\"call_id\":\"call_12345xyz\","
        "\"name\":\"get_weather\",\"arguments\":\"{\\\"location\\\":\\\"Paris, France\\\"}\"},"
        "{\"type\":\"function_call_output\",\"call_id\":\"call_12345xyz\",\"output\":\"14\"}]}",
        "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"What is the weather like "
        "in Paris today?\"},{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":"
        "\"call_12345xyz\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
        "\"arguments\":\"{\\\"location\\\":\\\"Paris, France\\\"}\"}}]},{\"role\":\"tool\","
        "\"tool_call_id\":\"call_12345xyz\",\"content\":\"14\"}],\"tools\":[{\"type\":"
        "\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"Get current "
        "temperature for a given location.\",\"parameters\":{\"type\":\"object\",\"properties\":"
        "{\"location\":{\"type\":\"string\"}},\"required\":[\"location\"],"
        "\"additionalProperties\":false},\"strict\":true}}],\"tool_choice\":{\"type\":"
        "\"function\",\"function\":{\"name\":\"get_weather\"}},\"parallel_tool_calls\":false}");
    /* the assistant's words and its calls of one turn: one chat message */
    expect_chat("{\"model\":\"x\",\"tool_choice\":\"required\",\"input\":[{\"role\":\"assistant\","
                "\"content\":\"Checking.\"},{\"type\":\"function_call\",\"call_id\":\"c1\","
                "\"name\":\"f\",\"arguments\":\"{}\"},{\"type\":\"function_call\",\"call_id\":"
                "\"c2\",\"name\":\"g\",\"arguments\":\"{}\"}]}",
                "{\"model\":\"m\",\"messages\":[{\"role\":\"assistant\",\"content\":\"Checking.\","
                "\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"f\","
                "\"arguments\":\"{}\"}},{\"id\":\"c2\",\"type\":\"function\",\"function\":{"
                "\"name\":\"g\",\"arguments\":\"{}\"}}]}],\"tool_choice\":\"required\"}");
}

static void test_request_images(void **state)
{
    (void)state;
    /* the reference's image input: input_text and input_image (a URL, a data URL, detail) */
    expect_chat("{\"model\":\"x\",\"input\":[{\"role\":\"user\",\"content\":[{\"type\":"
                "\"input_text\",\"text\":\"what is in this image?\"},{\"type\":\"input_image\","
                "\"image_url\":\"https://example.com/boardwalk.jpg\"},{\"type\":\"input_image\","
                "\"image_url\":\"data:image/png;base64,iVBORw0KGgo=\",\"detail\":\"low\"}]}]}",
                "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\","
                "\"text\":\"what is in this image?\"},{\"type\":\"image_url\",\"image_url\":{"
                "\"url\":\"https://example.com/boardwalk.jpg\"}},{\"type\":\"image_url\","
                "\"image_url\":{\"url\":\"data:image/png;base64,iVBORw0KGgo=\",\"detail\":"
                "\"low\"}}]}]}");
}

static void test_request_json_schema_reasoning(void **state)
{
    (void)state;
    /* structured outputs: text.format json_schema -> response_format; reasoning.effort */
    expect_chat(
        "{\"model\":\"x\",\"input\":\"Jane, 54\",\"reasoning\":{\"effort\":\"high\",\"summary\":"
        "\"auto\"},\"text\":{\"format\":{\"type\":\"json_schema\",\"name\":\"person\","
        "\"strict\":true,\"schema\":{\"type\":\"object\",\"properties\":{\"name\":{\"type\":"
        "\"string\"},\"age\":{\"type\":\"integer\"}},\"required\":[\"name\",\"age\"],"
        "\"additionalProperties\":false}}}}",
        "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"Jane, 54\"}],"
        "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"person\","
        "\"schema\":{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"age\":"
        "{\"type\":\"integer\"}},\"required\":[\"name\",\"age\"],\"additionalProperties\":false},"
        "\"strict\":true}},\"reasoning_effort\":\"high\"}");
    expect_chat("{\"model\":\"x\",\"input\":\"json please\",\"text\":{\"format\":{\"type\":"
                "\"json_object\"}}}",
                "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"json please\"}],"
                "\"response_format\":{\"type\":\"json_object\"}}");
    /* the JSON tool for an Anthropic deployment is flagged from text.format */
    {
        json_t *r = parse("{\"input\":\"x\",\"text\":{\"format\":{\"type\":\"json_object\"}}}");

        assert_int_equal(rt_translate_flags(r, RT_TRANSLATE_MESSAGES_TO_CHAT),
                         RT_TRANSLATE_JSON_OUTPUT);
        json_decref(r);
    }
}

static void test_request_refused(void **state)
{
    (void)state;
    expect_refused("{\"input\":\"x\",\"previous_response_id\":\"resp_1\"}",
                   "previous_response_id: the router keeps no conversation state: send the "
                   "whole conversation in input");
    expect_refused("{\"input\":\"x\",\"conversation\":\"conv_1\"}",
                   "conversation: the router keeps no conversation state: send the whole "
                   "conversation in input");
    expect_refused("{\"input\":\"x\",\"prompt\":{\"id\":\"pmpt_1\"}}",
                   "prompt: stored prompt templates are not available through chat completions");
    expect_refused("{\"input\":\"x\",\"top_logprobs\":2}",
                   "top_logprobs: log probabilities are not translated");
    expect_refused("{\"input\":\"x\",\"max_tool_calls\":2}",
                   "max_tool_calls: chat completions have no limit on tool calls");
    expect_refused("{\"input\":\"x\",\"store\":true}",
                   "store: this deployment's answers are not stored; send store false");
    expect_refused("{\"input\":\"x\",\"background\":true}",
                   "background: background responses are not available through chat "
                   "completions");
    expect_refused("{\"input\":\"x\",\"include\":[\"reasoning.encrypted_content\"]}",
                   "include: extra output data is not available through chat completions");
    expect_refused("{\"input\":\"x\",\"truncation\":\"auto\"}",
                   "truncation: only \"disabled\" can be translated");
    expect_refused("{\"input\":\"x\",\"tools\":[{\"type\":\"web_search_preview\"}]}",
                   "tools[0].type: \"web_search_preview\" tools have no equivalent in chat "
                   "completions (function tools only)");
    expect_refused("{\"input\":\"x\",\"tool_choice\":{\"type\":\"file_search\"}}",
                   "tool_choice: only none, auto, required or a function can be translated");
    expect_refused("{\"input\":[{\"type\":\"item_reference\",\"id\":\"msg_1\"}]}",
                   "input[0].type: \"item_reference\" items cannot be translated to chat "
                   "completions");
    expect_refused("{\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_file\","
                   "\"file_id\":\"file-1\"}]}]}",
                   "input[0].content[0]: a part of type \"input_file\" cannot be translated");
    expect_refused("{\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_audio\"}]}]}",
                   "input[0].content[0]: a part of type \"input_audio\" cannot be translated");
    expect_refused("{\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_image\","
                   "\"file_id\":\"file-1\"}]}]}",
                   "input[0].content[0].file_id: images are translated from image_url only, "
                   "not by file id");
    expect_refused("{\"input\":[{\"role\":\"tool\",\"content\":\"x\"}]}",
                   "input[0].role: \"tool\" cannot be translated");
    expect_refused("{\"input\":\"x\",\"text\":{\"format\":{\"type\":\"grammar\"}}}",
                   "text.format.type: \"grammar\" cannot be translated");
    expect_refused("{\"input\":42}", "input: must be a string or an array of items");
}

static void test_answer_text(void **state)
{
    json_t *resp, *req;

    (void)state;
    resp = parse("{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion\",\"created\":1741476542,"
                 "\"model\":\"up\",\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\","
                 "\"content\":\"In a peaceful grove...\"},\"finish_reason\":\"stop\"}],\"usage\":"
                 "{\"prompt_tokens\":36,\"completion_tokens\":87,\"total_tokens\":123,"
                 "\"prompt_tokens_details\":{\"cached_tokens\":4},\"completion_tokens_details\":{"
                 "\"reasoning_tokens\":10}}}");
    req = parse("{\"model\":\"g\",\"input\":\"story\",\"max_output_tokens\":500}");
    expect_json(rt_translate_chat_resp_to_responses(resp, req, "g"),
                "{\"id\":\"resp_chatcmpl-1\",\"object\":\"response\",\"created_at\":1741476542,"
                "\"status\":\"completed\",\"error\":null,\"incomplete_details\":null,\"model\":"
                "\"g\",\"output\":[{\"id\":\"msg_chatcmpl-1\",\"type\":\"message\",\"status\":"
                "\"completed\",\"content\":[{\"type\":\"output_text\",\"annotations\":[],"
                "\"logprobs\":[],\"text\":\"In a peaceful grove...\"}],\"role\":\"assistant\"}],"
                "\"usage\":{\"input_tokens\":36,\"input_tokens_details\":{\"cached_tokens\":4},"
                "\"output_tokens\":87,\"output_tokens_details\":{\"reasoning_tokens\":10},"
                "\"total_tokens\":123},\"instructions\":null,\"max_output_tokens\":500,"
                "\"parallel_tool_calls\":true,\"previous_response_id\":null,\"reasoning\":{"
                "\"effort\":null,\"summary\":null},\"store\":false,\"temperature\":1.0,\"text\":{"
                "\"format\":{\"type\":\"text\"}},\"tool_choice\":\"auto\",\"tools\":[],\"top_p\":"
                "1.0,\"truncation\":\"disabled\",\"user\":null,\"metadata\":{}}");
    json_decref(resp);
    json_decref(req);
}

static void test_answer_tools_reasoning_length(void **state)
{
    json_t *resp, *out;

    (void)state;
    resp = parse("{\"id\":\"c2\",\"created\":5,\"choices\":[{\"message\":{\"role\":\"assistant\","
                 "\"content\":null,\"reasoning_content\":\"Weather needs a tool.\",\"tool_calls\":"
                 "[{\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
                 "\"arguments\":\"{\\\"location\\\":\\\"Paris\\\"}\"}}]},\"finish_reason\":"
                 "\"tool_calls\"}],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":2}}");
    out = rt_translate_chat_resp_to_responses(resp, NULL, "g");
    expect_json(json_incref(json_object_get(out, "output")),
                "[{\"id\":\"rs_c2\",\"type\":\"reasoning\",\"summary\":[],\"content\":[{\"type\":"
                "\"reasoning_text\",\"text\":\"Weather needs a tool.\"}]},{\"id\":\"fc_call_1\","
                "\"type\":\"function_call\",\"status\":\"completed\",\"arguments\":"
                "\"{\\\"location\\\":\\\"Paris\\\"}\",\"call_id\":\"call_1\",\"name\":"
                "\"get_weather\"}]");
    assert_string_equal(json_string_value(json_object_get(out, "status")), "completed");
    expect_json(json_incref(json_object_get(out, "usage")),
                "{\"input_tokens\":3,\"input_tokens_details\":{\"cached_tokens\":0},"
                "\"output_tokens\":2,\"output_tokens_details\":{\"reasoning_tokens\":0},"
                "\"total_tokens\":5}");
    json_decref(out);
    json_decref(resp);
    /* finish_reason length: incomplete, max_output_tokens */
    resp = parse("{\"id\":\"c3\",\"choices\":[{\"message\":{\"content\":\"cut\"},"
                 "\"finish_reason\":\"length\"}]}");
    out = rt_translate_chat_resp_to_responses(resp, NULL, "g");
    assert_string_equal(json_string_value(json_object_get(out, "status")), "incomplete");
    expect_json(json_incref(json_object_get(out, "incomplete_details")),
                "{\"reason\":\"max_output_tokens\"}");
    assert_true(json_is_null(json_object_get(out, "usage")));
    json_decref(out);
    json_decref(resp);
    /* not a chat completion */
    resp = parse("{\"choices\":[]}");
    assert_null(rt_translate_chat_resp_to_responses(resp, NULL, "g"));
    json_decref(resp);
}

/* Each chat chunk data through a stream for model "g" created at 7, into one text. */
static char *run_stream(const char *const *chunks, size_t n, size_t text_max, int *last_rc)
{
    struct rt_resp_stream *st = rt_resp_stream_create(NULL, "g", 7, text_max);
    struct tg_buf out;
    char *s;

    assert_non_null(st);
    assert_int_equal(tg_buf_init(&out, 1u << 16), 0);
    *last_rc = 0;
    for (size_t i = 0; i < n && *last_rc == 0; i++)
        *last_rc = rt_resp_stream_chunk(st, chunks[i], strlen(chunks[i]), &out);
    s = strdup(out.data);
    tg_buf_fini(&out);
    rt_resp_stream_destroy(&st);
    assert_null(st);
    return s;
}

#define ECHO                                                                                       \
    "\"instructions\":null,\"max_output_tokens\":null,\"parallel_tool_calls\":true,"              \
    "\"previous_response_id\":null,\"reasoning\":{\"effort\":null,\"summary\":null},\"store\":"   \
    "false,\"temperature\":1.0,\"text\":{\"format\":{\"type\":\"text\"}},\"tool_choice\":"        \
    "\"auto\",\"tools\":[],\"top_p\":1.0,\"truncation\":\"disabled\",\"user\":null,\"metadata\":{}"

static void test_stream_text_exact(void **state)
{
    static const char *const chunks[] = {
        "{\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":"
        "{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}]}",
        "{\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}",
        "{\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" there\"}}]}",
        "{\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}",
        "{\"id\":\"c1\",\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":2,"
        "\"total_tokens\":7}}",
        "[DONE]"};
    static const char want[] =
        "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":"
        "\"resp_c1\",\"object\":\"response\",\"created_at\":7,\"status\":\"in_progress\","
        "\"error\":null,\"incomplete_details\":null,\"model\":\"g\",\"output\":[],\"usage\":null,"
        ECHO "},\"sequence_number\":0}\n\n"
        "event: response.in_progress\ndata: {\"type\":\"response.in_progress\",\"response\":{"
        "\"id\":\"resp_c1\",\"object\":\"response\",\"created_at\":7,\"status\":\"in_progress\","
        "\"error\":null,\"incomplete_details\":null,\"model\":\"g\",\"output\":[],\"usage\":null,"
        ECHO "},\"sequence_number\":1}\n\n"
        "event: response.output_item.added\ndata: {\"type\":\"response.output_item.added\","
        "\"output_index\":0,\"item\":{\"id\":\"msg_0_c1\",\"type\":\"message\",\"status\":"
        "\"in_progress\",\"content\":[],\"role\":\"assistant\"},\"sequence_number\":2}\n\n"
        "event: response.content_part.added\ndata: {\"type\":\"response.content_part.added\","
        "\"item_id\":\"msg_0_c1\",\"output_index\":0,\"content_index\":0,\"part\":{\"type\":"
        "\"output_text\",\"annotations\":[],\"logprobs\":[],\"text\":\"\"},\"sequence_number\":3}"
        "\n\n"
        "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\","
        "\"item_id\":\"msg_0_c1\",\"output_index\":0,\"content_index\":0,\"delta\":\"Hi\","
        "\"logprobs\":[],\"sequence_number\":4}\n\n"
        "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\","
        "\"item_id\":\"msg_0_c1\",\"output_index\":0,\"content_index\":0,\"delta\":\" there\","
        "\"logprobs\":[],\"sequence_number\":5}\n\n"
        "event: response.output_text.done\ndata: {\"type\":\"response.output_text.done\","
        "\"item_id\":\"msg_0_c1\",\"output_index\":0,\"content_index\":0,\"text\":\"Hi there\","
        "\"logprobs\":[],\"sequence_number\":6}\n\n"
        "event: response.content_part.done\ndata: {\"type\":\"response.content_part.done\","
        "\"item_id\":\"msg_0_c1\",\"output_index\":0,\"content_index\":0,\"part\":{\"type\":"
        "\"output_text\",\"annotations\":[],\"logprobs\":[],\"text\":\"Hi there\"},"
        "\"sequence_number\":7}\n\n"
        "event: response.output_item.done\ndata: {\"type\":\"response.output_item.done\","
        "\"output_index\":0,\"item\":{\"id\":\"msg_0_c1\",\"type\":\"message\",\"status\":"
        "\"completed\",\"content\":[{\"type\":\"output_text\",\"annotations\":[],\"logprobs\":[],"
        "\"text\":\"Hi there\"}],\"role\":\"assistant\"},\"sequence_number\":8}\n\n"
        "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"id\":"
        "\"resp_c1\",\"object\":\"response\",\"created_at\":7,\"status\":\"completed\","
        "\"error\":null,\"incomplete_details\":null,\"model\":\"g\",\"output\":[{\"id\":"
        "\"msg_0_c1\",\"type\":\"message\",\"status\":\"completed\",\"content\":[{\"type\":"
        "\"output_text\",\"annotations\":[],\"logprobs\":[],\"text\":\"Hi there\"}],\"role\":"
        "\"assistant\"}],\"usage\":{\"input_tokens\":5,\"input_tokens_details\":{"
        "\"cached_tokens\":0},\"output_tokens\":2,\"output_tokens_details\":{"
        "\"reasoning_tokens\":0},\"total_tokens\":7}," ECHO "},\"sequence_number\":9}\n\n";
    int rc;
    char *got;

    (void)state;
    got = run_stream(chunks, sizeof(chunks) / sizeof(chunks[0]), 1024, &rc);
    assert_int_equal(rc, 0);
    assert_string_equal(got, want);
    free(got);
}

/* A provider's chat id of multi-byte characters longer than the item ids hold: the ids are cut
 * at a character boundary, so every event stays valid UTF-8 JSON to the end (translate_fuzz
 * found ids cut inside a character, which made every later event fail). */
static void test_stream_long_multibyte_id(void **state)
{
    char id[601], first[900], delta[900], last[900];
    const char *chunks[4];
    const char *p;
    char *got;
    int rc, events = 0;

    (void)state;
    for (size_t i = 0; i < 200; i++)
        memcpy(id + 3 * i, "\xe2\x82\xac", 3); /* U+20AC, 3 bytes */
    id[600] = '\0';
    snprintf(first, sizeof(first),
             "{\"id\":\"%s\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\","
             "\"content\":\"\"}}]}", id);
    snprintf(delta, sizeof(delta),
             "{\"id\":\"%s\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"ok\"},"
             "\"finish_reason\":\"stop\"}]}", id);
    snprintf(last, sizeof(last),
             "{\"id\":\"%s\",\"choices\":[],\"usage\":{\"prompt_tokens\":1,"
             "\"completion_tokens\":1,\"total_tokens\":2}}", id);
    chunks[0] = first;
    chunks[1] = delta;
    chunks[2] = last;
    chunks[3] = "[DONE]";
    got = run_stream(chunks, 4, 1024, &rc);
    assert_int_equal(rc, 0);
    for (p = got; (p = strstr(p, "\ndata: ")) != NULL; p += 7) {
        const char *end = strstr(p + 7, "\n\n");
        json_t *j;

        assert_non_null(end);
        j = json_loadb(p + 7, (size_t)(end - p - 7), 0, NULL); /* jansson refuses bad UTF-8 */
        assert_non_null(j);
        json_decref(j);
        events++;
    }
    assert_true(events >= 8);
    assert_non_null(strstr(got, "event: response.completed\n"));
    free(got);
}

/* The event names of a stream, in order, one a line. */
static char *names(const char *events)
{
    char *out = calloc(1, strlen(events) + 1);
    const char *p = events;

    assert_non_null(out);
    while ((p = strstr(p, "event: ")) != NULL) {
        const char *e = strchr(p, '\n');

        strncat(out, p + 7, (size_t)(e - p - 7));
        strcat(out, "\n");
        p = e;
    }
    return out;
}

static void test_stream_reasoning_tools(void **state)
{
    static const char *const chunks[] = {
        "{\"id\":\"c\",\"choices\":[{\"delta\":{\"role\":\"assistant\",\"reasoning_content\":"
        "\"Think\"}}]}",
        "{\"id\":\"c\",\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_a\","
        "\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"a\\\"\"}}]}}]}",
        "{\"id\":\"c\",\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{"
        "\"arguments\":\":1}\"}}]}}]}",
        "{\"id\":\"c\",\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":1,\"id\":\"call_b\","
        "\"function\":{\"name\":\"g\",\"arguments\":\"{}\"}}]},\"finish_reason\":"
        "\"tool_calls\"}],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":4,"
        "\"completion_tokens_details\":{\"reasoning_tokens\":1}}}",
        "[DONE]"};
    int rc;
    char *got, *n;
    const char *last;
    json_t *done;

    (void)state;
    got = run_stream(chunks, sizeof(chunks) / sizeof(chunks[0]), 1024, &rc);
    n = names(got);
    last = strstr(got, "event: response.completed\ndata: ");
    assert_int_equal(rc, 0);
    assert_string_equal(n, "response.created\nresponse.in_progress\n"
                           "response.output_item.added\nresponse.content_part.added\n"
                           "response.reasoning_text.delta\nresponse.reasoning_text.done\n"
                           "response.content_part.done\nresponse.output_item.done\n"
                           "response.output_item.added\n"
                           "response.function_call_arguments.delta\n"
                           "response.function_call_arguments.delta\n"
                           "response.function_call_arguments.done\nresponse.output_item.done\n"
                           "response.output_item.added\n"
                           "response.function_call_arguments.delta\n"
                           "response.function_call_arguments.done\nresponse.output_item.done\n"
                           "response.completed\n");
    assert_non_null(last);
    done = parse(last + strlen("event: response.completed\ndata: "));
    expect_json(json_incref(json_object_get(json_object_get(done, "response"), "output")),
                "[{\"id\":\"rs_0_c\",\"type\":\"reasoning\",\"summary\":[],\"content\":[{"
                "\"type\":\"reasoning_text\",\"text\":\"Think\"}]},{\"id\":\"fc_call_a\","
                "\"type\":\"function_call\",\"status\":\"completed\",\"arguments\":"
                "\"{\\\"a\\\":1}\",\"call_id\":\"call_a\",\"name\":\"f\"},{\"id\":\"fc_call_b\","
                "\"type\":\"function_call\",\"status\":\"completed\",\"arguments\":\"{}\","
                "\"call_id\":\"call_b\",\"name\":\"g\"}]");
    expect_json(json_incref(json_object_get(json_object_get(done, "response"), "usage")),
                "{\"input_tokens\":9,\"input_tokens_details\":{\"cached_tokens\":0},"
                "\"output_tokens\":4,\"output_tokens_details\":{\"reasoning_tokens\":1},"
                "\"total_tokens\":13}");
    assert_int_equal(json_integer_value(json_object_get(done, "sequence_number")), 17);
    json_decref(done);
    free(n);
    free(got);
}

static void test_stream_incomplete_error_refused(void **state)
{
    static const char *const cut[] = {
        "{\"id\":\"c\",\"choices\":[{\"delta\":{\"content\":\"ab\"},\"finish_reason\":"
        "\"length\"}]}",
        "[DONE]"};
    static const char *const err[] = {
        "{\"id\":\"c\",\"choices\":[{\"delta\":{\"content\":\"ab\"}}]}",
        "{\"error\":{\"message\":\"overloaded\",\"type\":\"api_error\"}}", "[DONE]"};
    static const char *const late[] = {
        "{\"id\":\"c\",\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"a\","
        "\"function\":{\"name\":\"f\",\"arguments\":\"\"}}]}}]}",
        "{\"id\":\"c\",\"choices\":[{\"delta\":{\"content\":\"x\"}}]}",
        "{\"id\":\"c\",\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{"
        "\"arguments\":\"{}\"}}]}}]}"};
    int rc;
    char *got;

    (void)state;
    got = run_stream(cut, 2, 1024, &rc);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(got, "event: response.incomplete\n"));
    assert_non_null(strstr(got, "\"incomplete_details\":{\"reason\":\"max_output_tokens\"}"));
    assert_non_null(strstr(got, "\"status\":\"incomplete\",\"content\":[{"));
    free(got);
    got = run_stream(err, 3, 1024, &rc);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(got, "event: error\ndata: {\"type\":\"error\",\"code\":"
                                "\"upstream_error\",\"message\":\"overloaded\",\"param\":null,"
                                "\"sequence_number\":5}\n\n"));
    assert_null(strstr(got, "response.completed")); /* nothing after the error */
    free(got);
    got = run_stream(late, 3, 1024, &rc);
    assert_int_equal(rc, TG_EPROTO); /* a call's arguments after another item started */
    free(got);
    got = run_stream((const char *const[]){"not json"}, 1, 1024, &rc);
    assert_int_equal(rc, TG_EPROTO);
    free(got);
}

/* The kept text is bounded by text_max: the delta that would pass it is refused whole (nothing
 * written, nothing kept), the ones before it went out. */
static void test_stream_bound(void **state)
{
    struct rt_resp_stream *st = rt_resp_stream_create(NULL, "g", 7, 10);
    struct tg_buf out;
    const char *a = "{\"id\":\"c\",\"choices\":[{\"delta\":{\"content\":\"123456\"}}]}";
    const char *b = "{\"id\":\"c\",\"choices\":[{\"delta\":{\"content\":\"7890\"}}]}";
    const char *c = "{\"id\":\"c\",\"choices\":[{\"delta\":{\"content\":\"x\"}}]}";
    size_t len;

    (void)state;
    assert_non_null(st);
    assert_int_equal(tg_buf_init(&out, 1u << 16), 0);
    assert_int_equal(rt_resp_stream_chunk(st, a, strlen(a), &out), 0);
    assert_int_equal(rt_resp_stream_chunk(st, b, strlen(b), &out), 0); /* exactly 10 bytes */
    len = out.len;
    assert_int_equal(rt_resp_stream_chunk(st, c, strlen(c), &out), TG_ETOOBIG);
    assert_int_equal(out.len, len);
    assert_int_equal(rt_resp_stream_seq(st), 6);
    /* the closing events still carry the 10 bytes kept */
    assert_int_equal(rt_resp_stream_chunk(st, "[DONE]", 6, &out), 0);
    assert_non_null(strstr(out.data, "\"text\":\"1234567890\""));
    assert_true(rt_resp_stream_finished(st));
    assert_false(rt_resp_stream_errored(st));
    tg_buf_fini(&out);
    rt_resp_stream_destroy(&st);
}

/* An output buffer too small: TG_EFULL with out and the state unchanged; a larger one takes
 * the same chunk. rt_resp_stream_need covers the closing events. */
static void test_stream_efull_retry(void **state)
{
    struct rt_resp_stream *st = rt_resp_stream_create(NULL, "g", 7, 4096);
    struct tg_buf small, big, fin;
    char chunk[2300];

    (void)state;
    assert_non_null(st);
    snprintf(chunk, sizeof(chunk), "{\"id\":\"c\",\"choices\":[{\"delta\":{\"content\":\"%s\"}}]}",
             "\\\"\\\"\\\"\\\"\\\"\\\"\\\"\\\"\\\"\\\"\\\"\\\"\\\"\\\"\\\"\\\"\\\"\\\"\\\"\\\"");
    assert_int_equal(tg_buf_init(&small, 64), 0);
    assert_int_equal(rt_resp_stream_chunk(st, chunk, strlen(chunk), &small), TG_EFULL);
    assert_int_equal(small.len, 0);
    assert_int_equal(rt_resp_stream_seq(st), 0);
    assert_int_equal(tg_buf_init(&big, rt_resp_stream_need(st) + 2 * strlen(chunk) + 4096), 0);
    assert_int_equal(rt_resp_stream_chunk(st, chunk, strlen(chunk), &big), 0);
    assert_int_equal(tg_buf_init(&fin, rt_resp_stream_need(st)), 0);
    assert_int_equal(rt_resp_stream_chunk(st, "[DONE]", 6, &fin), 0);
    assert_false(fin.truncated);
    assert_non_null(strstr(fin.data, "event: response.completed\n"));
    tg_buf_fini(&small);
    tg_buf_fini(&big);
    tg_buf_fini(&fin);
    rt_resp_stream_destroy(&st);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_request_text),
        cmocka_unit_test(test_request_multi_turn),
        cmocka_unit_test(test_request_tools),
        cmocka_unit_test(test_request_images),
        cmocka_unit_test(test_request_json_schema_reasoning),
        cmocka_unit_test(test_request_refused),
        cmocka_unit_test(test_answer_text),
        cmocka_unit_test(test_answer_tools_reasoning_length),
        cmocka_unit_test(test_stream_text_exact),
        cmocka_unit_test(test_stream_long_multibyte_id),
        cmocka_unit_test(test_stream_reasoning_tools),
        cmocka_unit_test(test_stream_incomplete_error_refused),
        cmocka_unit_test(test_stream_bound),
        cmocka_unit_test(test_stream_efull_retry),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
