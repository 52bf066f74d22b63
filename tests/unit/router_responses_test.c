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

/* The JSON of one SSE data line: s up to its line's end. */
static json_t *parse_line(const char *s)
{
    json_t *j = json_loadb(s, strcspn(s, "\n"), 0, NULL);

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
    /* input_file with file_data (a PDF as a data: URL) was refused: it is chat's file part,
     * which the chat translation carries on (an Anthropic document, Gemini inlineData, a
     * Bedrock document) */
    expect_chat("{\"model\":\"x\",\"input\":[{\"role\":\"user\",\"content\":[{\"type\":"
                "\"input_file\",\"filename\":\"draconomicon.pdf\",\"file_data\":"
                "\"data:application/pdf;base64,JVBERi0x\"},{\"type\":\"input_text\",\"text\":"
                "\"what is the first dragon?\"}]}]}",
                "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"file\","
                "\"file\":{\"file_data\":\"data:application/pdf;base64,JVBERi0x\",\"filename\":"
                "\"draconomicon.pdf\"}},{\"type\":\"text\",\"text\":"
                "\"what is the first dragon?\"}]}]}");
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
    /* include: reasoning.encrypted_content is taken (test_request_reasoning_round_trip); any
     * other value is refused, named */
    expect_refused("{\"input\":\"x\",\"include\":[\"reasoning.encrypted_content\","
                   "\"message.output_text.logprobs\"]}",
                   "include[1]: \"message.output_text.logprobs\": extra output data is not "
                   "available through chat completions (reasoning.encrypted_content is)");
    expect_refused("{\"input\":\"x\",\"include\":[\"file_search_call.results\"]}",
                   "include[0]: \"file_search_call.results\": extra output data is not "
                   "available through chat completions (reasoning.encrypted_content is)");
    expect_refused("{\"input\":\"x\",\"include\":\"reasoning.encrypted_content\"}",
                   "include: must be an array");
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
                   "input[0].content[0].file_id: files are translated from file_data only, not "
                   "by id or URL");
    expect_refused("{\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_file\","
                   "\"file_url\":\"https://x.test/a.pdf\"}]}]}",
                   "input[0].content[0].file_url: files are translated from file_data only, not "
                   "by id or URL");
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

/* The chat message of an answer from Anthropic (or Bedrock) with extended thinking and a tool
 * call: a signed thinking block and a redacted one (LiteLLM's thinking_blocks) besides
 * reasoning_content. */
#define THINKING_ANSWER                                                                            \
    "{\"id\":\"c4\",\"created\":5,\"choices\":[{\"message\":{\"role\":\"assistant\","             \
    "\"content\":null,\"reasoning_content\":\"Let me check.\",\"thinking_blocks\":[{\"type\":"    \
    "\"thinking\",\"thinking\":\"Let me check.\",\"signature\":\"EqQBCkYIBxgC\"},{\"type\":"      \
    "\"redacted_thinking\",\"data\":\"EmwKAhgB\"}],\"tool_calls\":[{\"id\":\"toolu_1\","           \
    "\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":"                 \
    "\"{\\\"location\\\":\\\"Paris\\\"}\"}}]},\"finish_reason\":\"tool_calls\"}]}"

/* encrypted_content of the signature EqQBCkYIBxgC and of the redacted data EmwKAhgB:
 * RT_TRANSLATE_REASONING_ENC_PREFIX, then base64url of {"t":"thinking","s":"EqQBCkYIBxgC"}
 * and {"t":"redacted","d":"EmwKAhgB"} */
#define ENC_SIG "tgr1.eyJ0IjoidGhpbmtpbmciLCJzIjoiRXFRQkNrWUlCeGdDIn0"
#define ENC_RED "tgr1.eyJ0IjoicmVkYWN0ZWQiLCJkIjoiRW13S0FoZ0IifQ"

/* thinking_blocks: a reasoning item each, in order, before the call; encrypted_content (the
 * signature, the redacted data) only when include asks for it, as OpenAI's rule is. */
static void test_answer_thinking_blocks(void **state)
{
    json_t *resp = parse(THINKING_ANSWER);
    json_t *req = parse("{\"input\":\"weather?\",\"include\":[\"reasoning.encrypted_content\"]}");
    json_t *out;

    (void)state;
    out = rt_translate_chat_resp_to_responses(resp, req, "g");
    assert_non_null(out);
    expect_json(json_incref(json_object_get(out, "output")),
                "[{\"id\":\"rs_0_c4\",\"type\":\"reasoning\",\"summary\":[],\"content\":[{"
                "\"type\":\"reasoning_text\",\"text\":\"Let me check.\"}],"
                "\"encrypted_content\":\"" ENC_SIG "\"},{\"id\":\"rs_1_c4\",\"type\":"
                "\"reasoning\",\"summary\":[],\"content\":[],\"encrypted_content\":\"" ENC_RED
                "\"},{\"id\":\"fc_toolu_1\",\"type\":\"function_call\",\"status\":\"completed\","
                "\"arguments\":\"{\\\"location\\\":\\\"Paris\\\"}\",\"call_id\":\"toolu_1\","
                "\"name\":\"get_weather\"}]");
    json_decref(out);
    /* without include: the same items, no encrypted_content */
    out = rt_translate_chat_resp_to_responses(resp, NULL, "g");
    assert_non_null(out);
    expect_json(json_incref(json_object_get(out, "output")),
                "[{\"id\":\"rs_0_c4\",\"type\":\"reasoning\",\"summary\":[],\"content\":[{"
                "\"type\":\"reasoning_text\",\"text\":\"Let me check.\"}]},{\"id\":\"rs_1_c4\","
                "\"type\":\"reasoning\",\"summary\":[],\"content\":[]},{\"id\":\"fc_toolu_1\","
                "\"type\":\"function_call\",\"status\":\"completed\",\"arguments\":"
                "\"{\\\"location\\\":\\\"Paris\\\"}\",\"call_id\":\"toolu_1\",\"name\":"
                "\"get_weather\"}]");
    json_decref(out);
    json_decref(req);
    json_decref(resp);
}

/* A tool loop with extended thinking: the answer's output items sent back as the next turn's
 * input become the assistant turn's thinking_blocks, signature and data exactly as the
 * provider wrote them, and the chat request takes them on to Anthropic as signed thinking and
 * redacted_thinking blocks before the tool_use. */
static void test_request_reasoning_round_trip(void **state)
{
    json_t *resp = parse(THINKING_ANSWER);
    json_t *req = parse("{\"model\":\"x\",\"include\":[\"reasoning.encrypted_content\"],"
                        "\"input\":[{\"role\":\"user\",\"content\":\"weather?\"}]}");
    json_t *answer, *input, *chat, *anth;
    char err[256] = "";

    (void)state;
    answer = rt_translate_chat_resp_to_responses(resp, req, "g");
    assert_non_null(answer);
    input = json_object_get(req, "input");
    assert_int_equal(json_array_extend(input, json_object_get(answer, "output")), 0);
    assert_int_equal(json_array_append_new(input, parse("{\"type\":\"function_call_output\","
                                                        "\"call_id\":\"toolu_1\",\"output\":"
                                                        "\"14C\"}")),
                     0);
    chat = rt_translate_responses_to_chat(req, "m", err, sizeof(err));
    if (chat == NULL)
        fprintf(stderr, "refused: %s\n", err);
    assert_non_null(chat);
    expect_json(json_incref(json_object_get(chat, "messages")),
                "[{\"role\":\"user\",\"content\":\"weather?\"},{\"role\":\"assistant\","
                "\"content\":null,\"thinking_blocks\":[{\"type\":\"thinking\",\"thinking\":"
                "\"Let me check.\",\"signature\":\"EqQBCkYIBxgC\"},{\"type\":"
                "\"redacted_thinking\",\"data\":\"EmwKAhgB\"}],\"tool_calls\":[{\"id\":"
                "\"toolu_1\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
                "\"arguments\":\"{\\\"location\\\":\\\"Paris\\\"}\"}}]},{\"role\":\"tool\","
                "\"tool_call_id\":\"toolu_1\",\"content\":\"14C\"}]");
    anth = rt_translate_chat_to_messages(chat, "claude", err, sizeof(err));
    assert_non_null(anth);
    expect_json(json_incref(json_object_get(json_array_get(json_object_get(anth, "messages"), 1),
                                            "content")),
                "[{\"type\":\"thinking\",\"thinking\":\"Let me check.\",\"signature\":"
                "\"EqQBCkYIBxgC\"},{\"type\":\"redacted_thinking\",\"data\":\"EmwKAhgB\"},{"
                "\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"get_weather\",\"input\":{"
                "\"location\":\"Paris\"}}]");
    json_decref(anth);
    json_decref(chat);
    json_decref(answer);
    json_decref(req);
    json_decref(resp);

    /* the text from summary_text parts when there is no content; an assistant message takes
     * the blocks; reasoning items without encrypted_content, or with one not ours (another
     * service's), and reasoning of a turn that said nothing are left out as before */
    expect_chat("{\"model\":\"x\",\"input\":[{\"role\":\"user\",\"content\":\"hi\"},{\"type\":"
                "\"reasoning\",\"id\":\"rs_9\",\"summary\":[{\"type\":\"summary_text\",\"text\":"
                "\"One.\"},{\"type\":\"summary_text\",\"text\":\"Two.\"}],\"encrypted_content\":"
                "\"" ENC_SIG "\"},{\"type\":\"reasoning\",\"id\":\"rs_a\",\"summary\":[],"
                "\"encrypted_content\":\"gAAAAABoOpaque\"},{\"type\":\"reasoning\",\"id\":"
                "\"rs_b\",\"summary\":[]},{\"role\":\"assistant\",\"content\":\"Hello.\"},{"
                "\"role\":\"user\",\"content\":\"bye\"},{\"type\":\"reasoning\",\"id\":\"rs_c\","
                "\"summary\":[],\"encrypted_content\":\"" ENC_RED "\"},{\"role\":\"user\","
                "\"content\":\"again\"}]}",
                "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},{\"role\":"
                "\"assistant\",\"content\":\"Hello.\",\"thinking_blocks\":[{\"type\":"
                "\"thinking\",\"thinking\":\"One.\\n\\nTwo.\",\"signature\":\"EqQBCkYIBxgC\"}]},"
                "{\"role\":\"user\",\"content\":\"bye\"},{\"role\":\"user\",\"content\":"
                "\"again\"}]}");
    /* a call after the assistant's text of an earlier turn: a turn of its own with its
     * reasoning (not the earlier message's calls) */
    expect_chat("{\"model\":\"x\",\"input\":[{\"role\":\"assistant\",\"content\":\"Hm.\"},{"
                "\"type\":\"reasoning\",\"summary\":[],\"content\":[{\"type\":\"reasoning_text\","
                "\"text\":\"t\"}],\"encrypted_content\":\"" ENC_SIG "\"},{\"type\":"
                "\"function_call\",\"call_id\":\"c1\",\"name\":\"f\",\"arguments\":\"{}\"}]}",
                "{\"model\":\"m\",\"messages\":[{\"role\":\"assistant\",\"content\":\"Hm.\"},{"
                "\"role\":\"assistant\",\"content\":null,\"thinking_blocks\":[{\"type\":"
                "\"thinking\",\"thinking\":\"t\",\"signature\":\"EqQBCkYIBxgC\"}],"
                "\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":"
                "\"f\",\"arguments\":\"{}\"}}]}]}");
}

/* encrypted_content with the router's prefix that does not decode is the client's error,
 * named; so is a reasoning item of ours whose text parts are not text. */
static void test_request_reasoning_malformed(void **state)
{
    (void)state;
    expect_refused("{\"input\":[{\"role\":\"user\",\"content\":\"x\"},{\"type\":\"reasoning\","
                   "\"summary\":[],\"encrypted_content\":\"tgr1.eyJ0!!\"}]}",
                   "input[1].encrypted_content: not valid base64url after \"tgr1.\"");
    expect_refused("{\"input\":[{\"type\":\"reasoning\",\"summary\":[],\"encrypted_content\":"
                   "\"tgr1.eyJ0IjoidGhpbmtpbmciLCJzIjoiRXFRQkNrWUlCeGdDIn0=\"}]}",
                   "input[0].encrypted_content: not valid base64url after \"tgr1.\"");
    /* a length no base64 has; bits no byte takes (YWJ for YWI, "ab") */
    expect_refused("{\"input\":[{\"type\":\"reasoning\",\"encrypted_content\":\"tgr1.eyJ0I\"}]}",
                   "input[0].encrypted_content: not valid base64url after \"tgr1.\"");
    expect_refused("{\"input\":[{\"type\":\"reasoning\",\"encrypted_content\":\"tgr1.YWJ\"}]}",
                   "input[0].encrypted_content: not valid base64url after \"tgr1.\"");
    /* base64url of "ab", of {"t":"x"}, of {"t":"thinking","s":"a","d":"b"}, of
     * {"t":"thinking","s":1}, of nothing */
    expect_refused("{\"input\":[{\"type\":\"reasoning\",\"encrypted_content\":\"tgr1.YWI\"}]}",
                   "input[0].encrypted_content: not a reasoning block written by this router");
    expect_refused("{\"input\":[{\"type\":\"reasoning\",\"encrypted_content\":"
                   "\"tgr1.eyJ0IjoieCJ9\"}]}",
                   "input[0].encrypted_content: not a reasoning block written by this router");
    expect_refused("{\"input\":[{\"type\":\"reasoning\",\"encrypted_content\":"
                   "\"tgr1.eyJ0IjoidGhpbmtpbmciLCJzIjoiYSIsImQiOiJiIn0\"}]}",
                   "input[0].encrypted_content: not a reasoning block written by this router");
    expect_refused("{\"input\":[{\"type\":\"reasoning\",\"encrypted_content\":"
                   "\"tgr1.eyJ0IjoidGhpbmtpbmciLCJzIjoxfQ\"}]}",
                   "input[0].encrypted_content: not a reasoning block written by this router");
    expect_refused("{\"input\":[{\"type\":\"reasoning\",\"encrypted_content\":\"tgr1.\"}]}",
                   "input[0].encrypted_content: not a reasoning block written by this router");
    expect_refused("{\"input\":[{\"type\":\"reasoning\",\"encrypted_content\":7}]}",
                   "input[0].encrypted_content: must be a string");
    expect_refused("{\"input\":[{\"type\":\"reasoning\",\"content\":[{\"type\":\"input_text\","
                   "\"text\":\"t\"}],\"encrypted_content\":\"" ENC_SIG "\"}]}",
                   "input[0].content[0]: a reasoning_text part with a string text is expected");
    expect_refused("{\"input\":[{\"type\":\"reasoning\",\"summary\":\"t\",\"encrypted_content\":"
                   "\"" ENC_SIG "\"}]}",
                   "input[0].summary: must be an array of summary_text parts");
}

/* A signature or redacted data of any bytes (NUL, quotes, non-ASCII) comes back exactly. */
static void test_reasoning_encoding_round_trip(void **state)
{
    static const char val[] = "a\0\"\\/\xc3\xa9\n" "EqQB+/=";
    json_t *resp = json_pack("{s:s,s:[{s:{s:s,s:[{s:s,s:s,s:s%},{s:s,s:s%}]}}]}", "id", "c",
                             "choices", "message", "role", "assistant", "thinking_blocks",
                             "type", "thinking", "thinking", "x", "signature", val,
                             sizeof(val) - 1, "type", "redacted_thinking", "data", val,
                             sizeof(val) - 2);
    json_t *req = parse("{\"include\":[\"reasoning.encrypted_content\"],\"input\":[]}");
    json_t *answer, *chat, *tb;
    char err[256] = "";

    (void)state;
    assert_non_null(resp);
    answer = rt_translate_chat_resp_to_responses(resp, req, "g");
    assert_non_null(answer);
    assert_int_equal(json_array_extend(json_object_get(req, "input"),
                                       json_object_get(answer, "output")),
                     0);
    assert_int_equal(json_array_append_new(json_object_get(req, "input"),
                                           parse("{\"role\":\"assistant\",\"content\":\"ok\"}")),
                     0);
    chat = rt_translate_responses_to_chat(req, "m", err, sizeof(err));
    assert_non_null(chat);
    tb = json_object_get(json_array_get(json_object_get(chat, "messages"), 0), "thinking_blocks");
    assert_int_equal(json_array_size(tb), 2);
    assert_int_equal(json_string_length(json_object_get(json_array_get(tb, 0), "signature")),
                     sizeof(val) - 1);
    assert_memory_equal(json_string_value(json_object_get(json_array_get(tb, 0), "signature")),
                        val, sizeof(val) - 1);
    assert_int_equal(json_string_length(json_object_get(json_array_get(tb, 1), "data")),
                     sizeof(val) - 2);
    assert_memory_equal(json_string_value(json_object_get(json_array_get(tb, 1), "data")), val,
                        sizeof(val) - 2);
    json_decref(chat);
    json_decref(answer);
    json_decref(req);
    json_decref(resp);
}

/* Each chat chunk data through a stream answering req (may be NULL) for model "g" created at
 * 7, into one text. */
static char *run_stream_req(const json_t *req, const char *const *chunks, size_t n,
                            size_t text_max, int *last_rc)
{
    struct rt_resp_stream *st = rt_resp_stream_create(req, "g", 7, text_max);
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

static char *run_stream(const char *const *chunks, size_t n, size_t text_max, int *last_rc)
{
    return run_stream_req(NULL, chunks, n, text_max, last_rc);
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

/* reasoning.summary asked (auto, concise or detailed): the reasoning a provider shows (Claude's
 * summarised thinking, Gemini's thought summaries, reasoning_content) is the item's summary
 * (summary_text), as OpenAI's reasoning models give theirs, and a stream writes the
 * reasoning_summary events; before, it was always content (reasoning_text) and the summary
 * stayed empty whatever the request asked. A redacted block has neither. */
static void test_reasoning_summary(void **state)
{
    static const char *const chunks[] = {
        "{\"id\":\"c\",\"choices\":[{\"delta\":{\"role\":\"assistant\",\"reasoning_content\":"
        "\"Thi\"}}]}",
        "{\"id\":\"c\",\"choices\":[{\"delta\":{\"reasoning_content\":\"nk\"}}]}",
        "{\"id\":\"c\",\"choices\":[{\"delta\":{\"content\":\"Hi\"},\"finish_reason\":"
        "\"stop\"}]}",
        "[DONE]"};
    json_t *resp = parse(THINKING_ANSWER);
    json_t *req = parse("{\"input\":\"weather?\",\"reasoning\":{\"effort\":\"low\","
                        "\"summary\":\"auto\"}}");
    json_t *out, *done;
    char *got, *n;
    const char *last, *ev;
    int rc;

    (void)state;
    out = rt_translate_chat_resp_to_responses(resp, req, "g");
    assert_non_null(out);
    expect_json(json_incref(json_object_get(out, "output")),
                "[{\"id\":\"rs_0_c4\",\"type\":\"reasoning\",\"summary\":[{\"type\":"
                "\"summary_text\",\"text\":\"Let me check.\"}],\"content\":[]},{\"id\":"
                "\"rs_1_c4\",\"type\":\"reasoning\",\"summary\":[],\"content\":[]},{\"id\":"
                "\"fc_toolu_1\",\"type\":\"function_call\",\"status\":\"completed\","
                "\"arguments\":\"{\\\"location\\\":\\\"Paris\\\"}\",\"call_id\":\"toolu_1\","
                "\"name\":\"get_weather\"}]");
    json_decref(out);
    json_decref(resp);
    /* reasoning_content alone (no thinking blocks): one item, its summary */
    resp = parse("{\"id\":\"c2\",\"choices\":[{\"message\":{\"content\":\"ok\","
                 "\"reasoning_content\":\"Short.\"},\"finish_reason\":\"stop\"}]}");
    out = rt_translate_chat_resp_to_responses(resp, req, "g");
    expect_json(json_incref(json_array_get(json_object_get(out, "output"), 0)),
                "{\"id\":\"rs_c2\",\"type\":\"reasoning\",\"summary\":[{\"type\":"
                "\"summary_text\",\"text\":\"Short.\"}],\"content\":[]}");
    json_decref(out);
    json_decref(resp);

    got = run_stream_req(req, chunks, sizeof(chunks) / sizeof(chunks[0]), 1024, &rc);
    assert_int_equal(rc, 0);
    n = names(got);
    assert_string_equal(n, "response.created\nresponse.in_progress\n"
                           "response.output_item.added\nresponse.reasoning_summary_part.added\n"
                           "response.reasoning_summary_text.delta\n"
                           "response.reasoning_summary_text.delta\n"
                           "response.reasoning_summary_text.done\n"
                           "response.reasoning_summary_part.done\nresponse.output_item.done\n"
                           "response.output_item.added\nresponse.content_part.added\n"
                           "response.output_text.delta\nresponse.output_text.done\n"
                           "response.content_part.done\nresponse.output_item.done\n"
                           "response.completed\n");
    ev = strstr(got, "event: response.reasoning_summary_text.delta\ndata: ");
    assert_non_null(ev);
    done = parse_line(ev + strlen("event: response.reasoning_summary_text.delta\ndata: "));
    expect_json(done, "{\"type\":\"response.reasoning_summary_text.delta\",\"item_id\":"
                      "\"rs_0_c\",\"output_index\":0,\"summary_index\":0,\"delta\":\"Thi\","
                      "\"sequence_number\":4}");
    ev = strstr(got, "event: response.reasoning_summary_part.done\ndata: ");
    assert_non_null(ev);
    done = parse_line(ev + strlen("event: response.reasoning_summary_part.done\ndata: "));
    expect_json(done, "{\"type\":\"response.reasoning_summary_part.done\",\"item_id\":"
                      "\"rs_0_c\",\"output_index\":0,\"summary_index\":0,\"part\":{\"type\":"
                      "\"summary_text\",\"text\":\"Think\"},\"sequence_number\":7}");
    last = strstr(got, "event: response.completed\ndata: ");
    assert_non_null(last);
    done = parse(last + strlen("event: response.completed\ndata: "));
    expect_json(json_incref(json_array_get(
                    json_object_get(json_object_get(done, "response"), "output"), 0)),
                "{\"id\":\"rs_0_c\",\"type\":\"reasoning\",\"summary\":[{\"type\":"
                "\"summary_text\",\"text\":\"Think\"}],\"content\":[]}");
    json_decref(done);
    free(n);
    free(got);
    json_decref(req);
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

/* A chat stream from Anthropic with extended thinking (as translate_stream.c writes it): the
 * thinking's text as reasoning_content, its signature as a thinking_blocks entry, a redacted
 * block as one, then a second signed block and a tool call. */
static const char *const thinking_chunks[] = {
    "{\"id\":\"c\",\"choices\":[{\"delta\":{\"role\":\"assistant\",\"reasoning_content\":"
    "\"Let me\"}}]}",
    "{\"id\":\"c\",\"choices\":[{\"delta\":{\"reasoning_content\":\" check.\"}}]}",
    "{\"id\":\"c\",\"choices\":[{\"delta\":{\"thinking_blocks\":[{\"type\":\"thinking\","
    "\"thinking\":\"\",\"signature\":\"EqQBCkYIBxgC\"}]}}]}",
    "{\"id\":\"c\",\"choices\":[{\"delta\":{\"thinking_blocks\":[{\"type\":\"redacted_thinking\","
    "\"data\":\"EmwKAhgB\"}]}}]}",
    "{\"id\":\"c\",\"choices\":[{\"delta\":{\"reasoning_content\":\"More.\"}}]}",
    "{\"id\":\"c\",\"choices\":[{\"delta\":{\"thinking_blocks\":[{\"type\":\"thinking\","
    "\"thinking\":\"\",\"signature\":\"Sig2\"}]}}]}",
    "{\"id\":\"c\",\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"toolu_1\","
    "\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]},"
    "\"finish_reason\":\"tool_calls\"}]}",
    "[DONE]"};

/* base64url of {"t":"thinking","s":"Sig2"} after the prefix */
#define ENC_SIG2 "tgr1.eyJ0IjoidGhpbmtpbmciLCJzIjoiU2lnMiJ9"

/* The stream's final output, from response.completed. New. */
static json_t *completed_output(const char *events)
{
    const char *last = strstr(events, "event: response.completed\ndata: ");
    json_t *done, *out;

    assert_non_null(last);
    done = parse(last + strlen("event: response.completed\ndata: "));
    out = json_incref(json_object_get(json_object_get(done, "response"), "output"));
    json_decref(done);
    return out;
}

/* Each block a reasoning item of its own, closed when its signature (or the redacted data)
 * came; with include reasoning.encrypted_content, output_item.done and response.completed
 * carry each one's encrypted_content; without, the same items without it. */
static void test_stream_thinking_signatures(void **state)
{
    json_t *req = parse("{\"input\":\"x\",\"include\":[\"reasoning.encrypted_content\"]}");
    int rc;
    char *got, *n;

    (void)state;
    got = run_stream_req(req, thinking_chunks,
                         sizeof(thinking_chunks) / sizeof(thinking_chunks[0]), 1024, &rc);
    assert_int_equal(rc, 0);
    n = names(got);
    assert_string_equal(n, "response.created\nresponse.in_progress\n"
                           "response.output_item.added\nresponse.content_part.added\n"
                           "response.reasoning_text.delta\nresponse.reasoning_text.delta\n"
                           "response.reasoning_text.done\nresponse.content_part.done\n"
                           "response.output_item.done\n"
                           "response.output_item.added\nresponse.output_item.done\n"
                           "response.output_item.added\nresponse.content_part.added\n"
                           "response.reasoning_text.delta\nresponse.reasoning_text.done\n"
                           "response.content_part.done\nresponse.output_item.done\n"
                           "response.output_item.added\n"
                           "response.function_call_arguments.delta\n"
                           "response.function_call_arguments.done\nresponse.output_item.done\n"
                           "response.completed\n");
    /* the first block's item as it is done, at once when its signature came */
    assert_non_null(strstr(got, "event: response.output_item.done\ndata: {\"type\":"
                                "\"response.output_item.done\",\"output_index\":0,\"item\":{"
                                "\"id\":\"rs_0_c\",\"type\":\"reasoning\",\"summary\":[],"
                                "\"content\":[{\"type\":\"reasoning_text\",\"text\":\"Let me "
                                "check.\"}],\"encrypted_content\":\"" ENC_SIG "\"},"
                                "\"sequence_number\":8}\n\n"));
    expect_json(completed_output(got),
                "[{\"id\":\"rs_0_c\",\"type\":\"reasoning\",\"summary\":[],\"content\":[{"
                "\"type\":\"reasoning_text\",\"text\":\"Let me check.\"}],\"encrypted_content\":"
                "\"" ENC_SIG "\"},{\"id\":\"rs_1_c\",\"type\":\"reasoning\",\"summary\":[],"
                "\"content\":[],\"encrypted_content\":\"" ENC_RED "\"},{\"id\":\"rs_2_c\","
                "\"type\":\"reasoning\",\"summary\":[],\"content\":[{\"type\":\"reasoning_text\","
                "\"text\":\"More.\"}],\"encrypted_content\":\"" ENC_SIG2 "\"},{\"id\":"
                "\"fc_toolu_1\",\"type\":\"function_call\",\"status\":\"completed\","
                "\"arguments\":\"{}\",\"call_id\":\"toolu_1\",\"name\":\"f\"}]");
    free(n);
    free(got);
    got = run_stream(thinking_chunks, sizeof(thinking_chunks) / sizeof(thinking_chunks[0]), 1024,
                     &rc);
    assert_int_equal(rc, 0);
    assert_null(strstr(got, "encrypted_content"));
    expect_json(completed_output(got),
                "[{\"id\":\"rs_0_c\",\"type\":\"reasoning\",\"summary\":[],\"content\":[{"
                "\"type\":\"reasoning_text\",\"text\":\"Let me check.\"}]},{\"id\":\"rs_1_c\","
                "\"type\":\"reasoning\",\"summary\":[],\"content\":[]},{\"id\":\"rs_2_c\","
                "\"type\":\"reasoning\",\"summary\":[],\"content\":[{\"type\":\"reasoning_text\","
                "\"text\":\"More.\"}]},{\"id\":\"fc_toolu_1\",\"type\":\"function_call\","
                "\"status\":\"completed\",\"arguments\":\"{}\",\"call_id\":\"toolu_1\",\"name\":"
                "\"f\"}]");
    free(got);
    json_decref(req);
}

/* A signature is kept (encoded) with the text, under text_max: one that does not fit ends the
 * stream with TG_ETOOBIG (the relay's error event names limits.max_response_bytes), out and the
 * state unchanged, never an item without it; without include nothing is kept for it. The
 * closing events' room (rt_resp_stream_need) counts it twice. */
static void test_stream_signature_bound(void **state)
{
    json_t *req = parse("{\"input\":\"x\",\"include\":[\"reasoning.encrypted_content\"]}");
    const char *a = "{\"id\":\"c\",\"choices\":[{\"delta\":{\"reasoning_content\":\"think\"}}]}";
    const char *b = "{\"id\":\"c\",\"choices\":[{\"delta\":{\"thinking_blocks\":[{\"type\":"
                    "\"thinking\",\"thinking\":\"\",\"signature\":\"EqQBCkYIBxgC\"}]}}]}";
    struct rt_resp_stream *st;
    struct tg_buf out;
    size_t len, need;

    (void)state;
    assert_int_equal(tg_buf_init(&out, 1u << 16), 0);
    /* 5 bytes of text + 52 of encrypted_content: 56 is too few */
    st = rt_resp_stream_create(req, "g", 7, 56);
    assert_non_null(st);
    assert_int_equal(rt_resp_stream_chunk(st, a, strlen(a), &out), 0);
    len = out.len;
    assert_int_equal(rt_resp_stream_chunk(st, b, strlen(b), &out), TG_ETOOBIG);
    assert_int_equal(out.len, len);
    rt_resp_stream_destroy(&st);
    /* 57 is enough */
    tg_buf_reset(&out);
    st = rt_resp_stream_create(req, "g", 7, 57);
    assert_non_null(st);
    assert_int_equal(rt_resp_stream_chunk(st, a, strlen(a), &out), 0);
    need = rt_resp_stream_need(st);
    assert_int_equal(rt_resp_stream_chunk(st, b, strlen(b), &out), 0);
    assert_true(rt_resp_stream_need(st) >= need + 2 * strlen(ENC_SIG));
    assert_non_null(strstr(out.data, "\"encrypted_content\":\"" ENC_SIG "\""));
    rt_resp_stream_destroy(&st);
    /* without include: nothing to keep, 5 bytes are enough */
    tg_buf_reset(&out);
    st = rt_resp_stream_create(NULL, "g", 7, 5);
    assert_non_null(st);
    assert_int_equal(rt_resp_stream_chunk(st, a, strlen(a), &out), 0);
    assert_int_equal(rt_resp_stream_chunk(st, b, strlen(b), &out), 0);
    assert_int_equal(rt_resp_stream_chunk(st, "[DONE]", 6, &out), 0);
    assert_null(strstr(out.data, "encrypted_content"));
    rt_resp_stream_destroy(&st);
    tg_buf_fini(&out);
    json_decref(req);
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
        cmocka_unit_test(test_reasoning_summary),
        cmocka_unit_test(test_stream_incomplete_error_refused),
        cmocka_unit_test(test_stream_bound),
        cmocka_unit_test(test_stream_efull_retry),
        cmocka_unit_test(test_answer_thinking_blocks),
        cmocka_unit_test(test_request_reasoning_round_trip),
        cmocka_unit_test(test_request_reasoning_malformed),
        cmocka_unit_test(test_reasoning_encoding_round_trip),
        cmocka_unit_test(test_stream_thinking_signatures),
        cmocka_unit_test(test_stream_signature_bound),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
