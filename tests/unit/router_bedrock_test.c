/* bedrock: SigV4 against AWS's published test-suite vectors, the event-stream decoder (frames
 * built here, CRCs and bounds), the Converse dialect (requests, answers, streams, embeddings),
 * classification, STS answers, and bedrock configs (region, endpoint, credentials rules). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>
#include <jansson.h>

#include "config.h"
#include "providers/provider.h"
#include "tg_err.h"
#include "tg_log.h"

/* ---- SigV4: the AWS test suite (awslabs/aws-c-auth, tests/aws-signing-test-suite/v4/<name>/
 * header-signed-request.txt), credentials AKIDEXAMPLE / wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY,
 * us-east-1, service "service", 20150830T123600Z ---- */

#define SUITE_SECRET "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
#define SUITE_EMPTY_HASH "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

static void suite_sign(const char *method, const char *path, const char *query,
                       const struct rt_sigv4_header *h, size_t nh, const char *hash,
                       const char *session, char *out)
{
    struct rt_sigv4_request r;

    memset(&r, 0, sizeof(r));
    r.method = method;
    r.host = "example.amazonaws.com";
    r.path = path;
    r.query = query;
    r.headers = h;
    r.n_headers = nh;
    r.payload_hash = hash;
    r.amz_date = "20150830T123600Z";
    r.region = "us-east-1";
    r.service = "service";
    r.access_key_id = "AKIDEXAMPLE";
    r.secret = SUITE_SECRET;
    r.session_token = session;
    assert_int_equal(rt_sigv4_authorization(&r, out, 512), 0);
}

#define SUITE_PREFIX                                                                               \
    "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, "

static void test_sigv4_suite(void **state)
{
    char a[512];
    char date[17];
    char hash[65];
    const struct rt_sigv4_header trim[] = {{"My-Header1", " value1"},
                                           {"My-Header2", " \"a   b   c\""}};
    const struct rt_sigv4_header form[] = {
        {"Content-Type", "application/x-www-form-urlencoded"},
        {"Content-Length", "13"},
        {"x-amz-content-sha256",
         "9095672bbd1f56dfc5b65f3e153adc8731a4a654192329106275f4c7b24d0b6e"}};

    (void)state;
    /* get-vanilla */
    suite_sign("GET", "/", "", NULL, 0, SUITE_EMPTY_HASH, NULL, a);
    assert_string_equal(a, SUITE_PREFIX "SignedHeaders=host;x-amz-date, Signature="
                                        "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d7"
                                        "63fbf31");
    /* post-vanilla */
    suite_sign("POST", "/", NULL, NULL, 0, SUITE_EMPTY_HASH, NULL, a);
    assert_string_equal(a, SUITE_PREFIX "SignedHeaders=host;x-amz-date, Signature="
                                        "5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92e"
                                        "fbe5d6b");
    /* get-vanilla-query-order-key-case: the pairs are sorted */
    suite_sign("GET", "/", "Param2=value2&Param1=value1", NULL, 0, SUITE_EMPTY_HASH, NULL, a);
    assert_string_equal(a, SUITE_PREFIX "SignedHeaders=host;x-amz-date, Signature="
                                        "b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94"
                                        "cdf2500");
    /* get-vanilla-query-unreserved */
    suite_sign("GET", "/",
               "-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz=-._~"
               "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz",
               NULL, 0, SUITE_EMPTY_HASH, NULL, a);
    assert_string_equal(a, SUITE_PREFIX "SignedHeaders=host;x-amz-date, Signature="
                                        "9c3e54bfcdf0b19771a7f523ee5669cdf59bc7cc0884027167c21bb14"
                                        "3a40197");
    /* get-utf8: the path as sent, encoded once more */
    suite_sign("GET", "/\xe1\x88\xb4", "", NULL, 0, SUITE_EMPTY_HASH, NULL, a);
    assert_string_equal(a, SUITE_PREFIX "SignedHeaders=host;x-amz-date, Signature="
                                        "8318018e0b0f223aa2bbf98705b62bb787dc9c0e678f255a891fd0314"
                                        "1be5d85");
    /* get-header-value-trim: values trimmed, inner spaces folded, names sorted */
    suite_sign("GET", "/", "", trim, 2, SUITE_EMPTY_HASH, NULL, a);
    assert_string_equal(a, SUITE_PREFIX "SignedHeaders=host;my-header1;my-header2;x-amz-date, "
                                        "Signature=acc3ed3afb60bb290fc8d2dd0098b9911fcaa05412b3670"
                                        "55dee359757a9c736");
    /* get-vanilla-with-session-token */
    suite_sign("GET", "/", "", NULL, 0, SUITE_EMPTY_HASH,
               "6e86291e8372ff2a2260956d9b8aae1d763fbf315fa00fa31553b73ebf194267", a);
    assert_string_equal(a, SUITE_PREFIX "SignedHeaders=host;x-amz-date;x-amz-security-token, "
                                        "Signature=07ec1639c89043aa0e3e2de82b96708f198cceab042d4a9"
                                        "7044c66dd9f74e7f8");
    /* post-x-www-form-urlencoded, the body's hash signed */
    rt_sigv4_payload_hash("Param1=value1", 13, hash);
    assert_string_equal(hash, "9095672bbd1f56dfc5b65f3e153adc8731a4a654192329106275f4c7b24d0b6e");
    suite_sign("POST", "/", "", form, 3, hash, NULL, a);
    assert_string_equal(a, SUITE_PREFIX "SignedHeaders=content-length;content-type;host;"
                                        "x-amz-content-sha256;x-amz-date, Signature="
                                        "d3875051da38690788ef43de4db0d8f280229d82040bfac253562e56c"
                                        "3f20e0b");
    rt_sigv4_amz_date(1440938160, date);
    assert_string_equal(date, "20150830T123600Z");
}

/* ---- event-stream frames ---- */

static uint32_t crc32_ref(const unsigned char *p, size_t n)
{
    uint32_t c = 0xFFFFFFFFu;

    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    }
    return c ^ 0xFFFFFFFFu;
}

static void be32_put(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

static size_t str_header(unsigned char *p, const char *name, const char *value)
{
    size_t nl = strlen(name), vl = strlen(value), o = 0;

    p[o++] = (unsigned char)nl;
    memcpy(p + o, name, nl);
    o += nl;
    p[o++] = 7;
    p[o++] = (unsigned char)(vl >> 8);
    p[o++] = (unsigned char)vl;
    memcpy(p + o, value, vl);
    return o + vl;
}

/* A frame of message type mt, event type et, payload into out; returns its length. */
static size_t frame(unsigned char *out, const char *mt, const char *et, const char *payload)
{
    unsigned char h[512];
    size_t hl = 0, pl = strlen(payload), total;

    hl += str_header(h + hl, ":message-type", mt);
    hl += str_header(h + hl, strcmp(mt, "event") == 0 ? ":event-type" : ":exception-type", et);
    hl += str_header(h + hl, ":content-type", "application/json");
    /* a header of another type, skipped by its length */
    h[hl++] = 4;
    memcpy(h + hl, "x-id", 4);
    hl += 4;
    h[hl++] = 4;
    memset(h + hl, 7, 4);
    hl += 4;
    total = 12 + hl + pl + 4;
    be32_put(out, (uint32_t)total);
    be32_put(out + 4, (uint32_t)hl);
    be32_put(out + 8, crc32_ref(out, 8));
    memcpy(out + 12, h, hl);
    memcpy(out + 12 + hl, payload, pl);
    be32_put(out + total - 4, crc32_ref(out, total - 4));
    return total;
}

static void test_eventstream(void **state)
{
    unsigned char f[2048];
    struct rt_evs_message m;
    size_t n;

    (void)state;
    n = frame(f, "event", "contentBlockDelta", "{\"delta\":{\"text\":\"hi\"}}");
    assert_int_equal(rt_evs_frame_len((char *)f, n), n);
    assert_int_equal(rt_evs_frame_len((char *)f, n - 1), 0);
    assert_int_equal(rt_evs_frame_len((char *)f, 3), 0);
    assert_int_equal(rt_evs_decode((char *)f, n, &m), 0);
    assert_string_equal(m.message_type, "event");
    assert_string_equal(m.event_type, "contentBlockDelta");
    assert_int_equal(m.payload_len, strlen("{\"delta\":{\"text\":\"hi\"}}"));
    assert_memory_equal(m.payload, "{\"delta\":{\"text\":\"hi\"}}", m.payload_len);
    /* every byte matters: a flipped bit anywhere is refused (CRCs), never misread */
    for (size_t i = 0; i < n; i++) {
        for (int bit = 0; bit < 8; bit++) {
            f[i] ^= (unsigned char)(1u << bit);
            if (rt_evs_frame_len((char *)f, n) == n)
                assert_int_equal(rt_evs_decode((char *)f, n, &m), TG_EPROTO);
            f[i] ^= (unsigned char)(1u << bit);
        }
    }
    /* lengths that disagree */
    assert_int_equal(rt_evs_decode((char *)f, n - 1, &m), TG_EPROTO);
    be32_put(f, 8);
    assert_int_equal(rt_evs_frame_len((char *)f, n), RT_EVS_MIN_BYTES);
    assert_int_equal(rt_evs_decode((char *)f, RT_EVS_MIN_BYTES, &m), TG_EPROTO);
    n = frame(f, "exception", "throttlingException", "{\"message\":\"slow down\"}");
    assert_int_equal(rt_evs_decode((char *)f, n, &m), 0);
    assert_string_equal(m.exception_type, "throttlingException");
}

/* ---- Converse ---- */

static json_t *parse(const char *text)
{
    json_error_t e;
    json_t *j = json_loads(text, 0, &e);

    if (j == NULL)
        fail_msg("bad test JSON at %d: %s", e.position, e.text);
    return j;
}

static void assert_json(const json_t *j, const char *want)
{
    json_t *w = parse(want);

    if (!json_equal((json_t *)j, w)) {
        char *got = json_dumps(j, JSON_SORT_KEYS | JSON_COMPACT);

        fprintf(stderr, "got  %s\n", got);
        free(got);
        json_decref(w);
        fail();
    }
    json_decref(w);
}

#define HIST_FMT                                                                                   \
    "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"},"                                        \
    "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":["                                    \
    "{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"w\","                           \
    "\"arguments\":\"{}\"}},{\"id\":\"c2\",\"type\":\"function\",\"function\":"                    \
    "{\"name\":\"w\",\"arguments\":\"{}\"}}]},"                                                    \
    "{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"a\"},"                               \
    "{\"role\":\"tool\",\"tool_call_id\":\"c2\",\"content\":\"b\"}]%s}"

/* The turn that carries tool results without tools, or with tool_choice "none", went to
 * Converse without a toolConfig, which it refuses ("The toolConfig field must be defined when
 * using toolUse and toolResult content blocks"). The history's tools are declared now (the
 * client's own when it sent them, without a choice for "none"); without tool blocks "none"
 * still leaves the tools out. */
static void test_converse_request_history_tools(void **state)
{
    struct rt_deployment_conf d;
    char err[256];
    char in[1024];
    json_t *chat, *b;

    (void)state;
    memset(&d, 0, sizeof(d));
    snprintf(in, sizeof(in), HIST_FMT, "");
    chat = parse(in);
    b = rt_dialect_converse.request(chat, &d, 0, err, sizeof(err));
    assert_non_null(b);
    assert_json(json_object_get(b, "toolConfig"),
                "{\"tools\":[{\"toolSpec\":{\"name\":\"w\",\"inputSchema\":{\"json\":{"
                "\"type\":\"object\",\"properties\":{}}}}}]}");
    json_decref(b);
    json_decref(chat);
    snprintf(in, sizeof(in), HIST_FMT,
             ",\"tool_choice\":\"none\",\"tools\":[{\"type\":\"function\",\"function\":{"
             "\"name\":\"v\",\"parameters\":{\"type\":\"object\"}}}]");
    chat = parse(in);
    b = rt_dialect_converse.request(chat, &d, 0, err, sizeof(err));
    assert_non_null(b);
    assert_json(json_object_get(b, "toolConfig"),
                "{\"tools\":[{\"toolSpec\":{\"name\":\"v\",\"inputSchema\":{\"json\":{"
                "\"type\":\"object\"}}}}]}");
    json_decref(b);
    json_decref(chat);
    chat = parse("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tool_choice\":\"none\","
                 "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"v\"}}]}");
    b = rt_dialect_converse.request(chat, &d, 0, err, sizeof(err));
    assert_non_null(b);
    assert_null(json_object_get(b, "toolConfig"));
    json_decref(b);
    json_decref(chat);
}
#undef HIST_FMT

static void test_converse_request(void **state)
{
    struct rt_deployment_conf d;
    char err[256];
    json_t *chat = parse(
        "{\"messages\":[{\"role\":\"system\",\"content\":\"be brief\"},"
        "{\"role\":\"user\",\"content\":\"hi\"},{\"role\":\"user\",\"content\":[{\"type\":\"text\","
        "\"text\":\"look\"},{\"type\":\"image_url\",\"image_url\":{\"url\":"
        "\"data:image/png;base64,iVBO\"}}]},"
        "{\"role\":\"assistant\",\"content\":\"calling\",\"tool_calls\":[{\"id\":\"t1\",\"type\":"
        "\"function\",\"function\":{\"name\":\"w\",\"arguments\":\"{\\\"c\\\":1}\"}}]},"
        "{\"role\":\"tool\",\"tool_call_id\":\"t1\",\"content\":\"{\\\"t\\\":20}\"},"
        "{\"role\":\"tool\",\"tool_call_id\":\"t2\",\"content\":\"plain\"}],"
        "\"max_tokens\":50,\"temperature\":0.5,\"stop\":[\"X\"],\"tool_choice\":\"required\","
        "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"w\",\"description\":\"d\","
        "\"parameters\":{\"type\":\"object\"}}}]}");
    json_t *b;

    (void)state;
    memset(&d, 0, sizeof(d));
    b = rt_dialect_converse.request(chat, &d, 0, err, sizeof(err));
    if (b == NULL)
        fail_msg("%s", err);
    assert_json(b, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"text\":\"hi\"},"
                   "{\"text\":\"look\"},{\"image\":{\"format\":\"png\",\"source\":{\"bytes\":"
                   "\"iVBO\"}}}]},{\"role\":\"assistant\",\"content\":[{\"text\":\"calling\"},"
                   "{\"toolUse\":{\"toolUseId\":\"t1\",\"name\":\"w\",\"input\":{\"c\":1}}}]},"
                   "{\"role\":\"user\",\"content\":[{\"toolResult\":{\"toolUseId\":\"t1\","
                   "\"content\":[{\"json\":{\"t\":20}}]}},{\"toolResult\":{\"toolUseId\":\"t2\","
                   "\"content\":[{\"text\":\"plain\"}]}}]}],"
                   "\"system\":[{\"text\":\"be brief\"}],"
                   "\"inferenceConfig\":{\"maxTokens\":50,\"temperature\":0.5,"
                   "\"stopSequences\":[\"X\"]},"
                   "\"toolConfig\":{\"tools\":[{\"toolSpec\":{\"name\":\"w\",\"description\":"
                   "\"d\",\"inputSchema\":{\"json\":{\"type\":\"object\"}}}}],"
                   "\"toolChoice\":{\"any\":{}}}}");
    json_decref(b);
    json_decref(chat);
    chat = parse("{\"messages\":[{\"role\":\"assistant\",\"content\":\"first\"}]}");
    assert_null(rt_dialect_converse.request(chat, &d, 0, err, sizeof(err)));
    assert_string_equal(err,
                        "messages: the first message after the system prompt must be the user's");
    json_decref(chat);
    chat = parse("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\","
                 "\"image_url\":{\"url\":\"https://x/a.png\"}}]}]}");
    assert_null(rt_dialect_converse.request(chat, &d, 0, err, sizeof(err)));
    json_decref(chat);
}

/* A tool result marked as an error (an Anthropic tool_result with is_error, through chat) went
 * as a plain result: it is toolResult status "error", the mark taken off; images in a tool
 * result (image_url parts, from an Anthropic tool_result's image blocks) go as image blocks;
 * another part is refused naming it. */
static void test_converse_request_tool_error_and_images(void **state)
{
    struct rt_deployment_conf d;
    char err[256];
    json_t *chat = parse(
        "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"},"
        "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":["
        " {\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"w\",\"arguments\":\"{}\"}},"
        " {\"id\":\"c2\",\"type\":\"function\",\"function\":{\"name\":\"w\",\"arguments\":\"{}\"}}]},"
        "{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"[tool error] denied\"},"
        "{\"role\":\"tool\",\"tool_call_id\":\"c2\",\"content\":[{\"type\":\"text\","
        " \"text\":\"[tool error]\"},{\"type\":\"text\",\"text\":\"shot\"},{\"type\":\"image_url\","
        " \"image_url\":{\"url\":\"data:image/png;base64,iVBO\"}}]}]}");
    json_t *b;

    (void)state;
    memset(&d, 0, sizeof(d));
    b = rt_dialect_converse.request(chat, &d, 0, err, sizeof(err));
    if (b == NULL)
        fail_msg("%s", err);
    assert_json(json_array_get(json_object_get(b, "messages"), 2),
                "{\"role\":\"user\",\"content\":["
                "{\"toolResult\":{\"toolUseId\":\"c1\",\"status\":\"error\","
                " \"content\":[{\"text\":\"denied\"}]}},"
                "{\"toolResult\":{\"toolUseId\":\"c2\",\"status\":\"error\",\"content\":["
                " {\"text\":\"shot\"},{\"image\":{\"format\":\"png\",\"source\":{\"bytes\":"
                " \"iVBO\"}}}]}}]}");
    json_decref(b);
    json_decref(chat);
    /* a PDF file part: a document block named after the file, in the characters Converse
     * takes */
    chat = parse("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"file\",\"file\":{"
                 "\"file_data\":\"data:application/pdf;base64,JVBE\",\"filename\":"
                 "\"  my  report_v2 (final).PDF\"}},{\"type\":\"file\",\"file\":{\"file_data\":"
                 "\"data:application/pdf;base64,JVBF\"}}]}]}");
    b = rt_dialect_converse.request(chat, &d, 0, err, sizeof(err));
    if (b == NULL)
        fail_msg("%s", err);
    assert_json(json_object_get(json_array_get(json_object_get(b, "messages"), 0), "content"),
                "[{\"document\":{\"format\":\"pdf\",\"name\":\"my report-v2 (final)\","
                "\"source\":{\"bytes\":\"JVBE\"}}},{\"document\":{\"format\":\"pdf\","
                "\"name\":\"document\",\"source\":{\"bytes\":\"JVBF\"}}}]");
    json_decref(b);
    json_decref(chat);
    chat = parse("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"},"
                 "{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":[{\"type\":"
                 "\"input_audio\",\"input_audio\":{}}]}]}");
    assert_null(rt_dialect_converse.request(chat, &d, 0, err, sizeof(err)));
    assert_string_equal(err, "messages[1].content[0]: a tool result's \"input_audio\" part "
                             "cannot be translated to Bedrock");
    json_decref(chat);
}

static void test_converse_response(void **state)
{
    char err[256];
    json_t *a = parse("{\"output\":{\"message\":{\"role\":\"assistant\",\"content\":["
                      "{\"reasoningContent\":{\"reasoningText\":{\"text\":\"hmm\"}}},"
                      "{\"text\":\"Sure\"},{\"toolUse\":{\"toolUseId\":\"tu1\",\"name\":\"w\","
                      "\"input\":{\"c\":\"Paris\"}}}]}},\"stopReason\":\"tool_use\","
                      "\"usage\":{\"inputTokens\":10,\"outputTokens\":5,\"totalTokens\":15,"
                      "\"cacheReadInputTokens\":3,\"cacheWriteInputTokens\":2},"
                      "\"metrics\":{\"latencyMs\":9}}");
    json_t *c = rt_dialect_converse.response(a, "shown", err, sizeof(err));

    (void)state;
    assert_non_null(c);
    json_object_del(c, "created");
    assert_json(c,
                "{\"id\":\"chatcmpl-bedrock\",\"object\":\"chat.completion\",\"model\":\"shown\","
                "\"choices\":[{\"index\":0,\"finish_reason\":\"tool_calls\",\"message\":{"
                "\"role\":\"assistant\",\"content\":\"Sure\",\"reasoning_content\":\"hmm\","
                "\"tool_calls\":[{\"id\":\"tu1\",\"type\":\"function\",\"function\":{\"name\":"
                "\"w\",\"arguments\":\"{\\\"c\\\":\\\"Paris\\\"}\"}}]}}],"
                "\"usage\":{\"prompt_tokens\":15,\"completion_tokens\":5,\"total_tokens\":20,"
                "\"prompt_tokens_details\":{\"cached_tokens\":3},"
                "\"cache_creation_input_tokens\":2}}");
    json_decref(c);
    json_decref(a);
    a = parse("{\"output\":{}}");
    assert_null(rt_dialect_converse.response(a, "m", err, sizeof(err)));
    json_decref(a);
}

static void test_converse_stream(void **state)
{
    unsigned char f[2048];
    struct rt_dialect_stream st;
    struct tg_buf out;
    size_t n;

    (void)state;
    assert_int_equal(tg_buf_init(&out, 8192), 0);
    rt_dialect_stream_init(&st, "shown", 7);
#define EV(et, payload)                                                                            \
    do {                                                                                           \
        n = frame(f, "event", et, payload);                                                        \
        assert_int_equal(rt_dialect_converse.stream_event(&st, (char *)f, n, &out), 0);            \
    } while (0)
    EV("messageStart", "{\"role\":\"assistant\",\"p\":\"abc\"}");
    EV("contentBlockDelta", "{\"contentBlockIndex\":0,\"delta\":{\"text\":\"Hel\"}}");
    EV("contentBlockDelta", "{\"contentBlockIndex\":0,\"delta\":{\"text\":\"lo\"}}");
    EV("contentBlockStop", "{\"contentBlockIndex\":0}");
    EV("contentBlockStart",
       "{\"contentBlockIndex\":1,\"start\":{\"toolUse\":{\"toolUseId\":\"tu1\",\"name\":\"w\"}}}");
    EV("contentBlockDelta", "{\"contentBlockIndex\":1,\"delta\":{\"toolUse\":{\"input\":"
                            "\"{\\\"c\\\":\"}}}");
    EV("contentBlockDelta", "{\"contentBlockIndex\":1,\"delta\":{\"toolUse\":{\"input\":"
                            "\"1}\"}}}");
    EV("contentBlockStop", "{\"contentBlockIndex\":1}");
    /* the end before messageStop: a cut stream */
    assert_int_equal(rt_dialect_converse.stream_end(&st, &out), TG_EPROTO);
    EV("messageStop", "{\"stopReason\":\"tool_use\"}");
    EV("metadata", "{\"usage\":{\"inputTokens\":8,\"outputTokens\":4,\"totalTokens\":12},"
                   "\"metrics\":{\"latencyMs\":5}}");
#undef EV
    assert_int_equal(rt_dialect_converse.stream_end(&st, &out), 0);
    assert_non_null(strstr(out.data, "\"delta\":{\"content\":\"Hel\",\"role\":\"assistant\"}"));
    assert_non_null(strstr(out.data, "\"tool_calls\":[{\"index\":0,\"id\":\"tu1\",\"type\":"
                                     "\"function\",\"function\":{\"name\":\"w\",\"arguments\":"
                                     "\"\"}}]"));
    assert_non_null(strstr(out.data, "\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":"
                                     "\"1}\"}}]"));
    assert_non_null(strstr(out.data, "\"finish_reason\":\"tool_calls\""));
    assert_non_null(strstr(out.data, "\"usage\":{\"prompt_tokens\":8,\"completion_tokens\":4,"
                                     "\"total_tokens\":12}"));
    assert_int_equal(strcmp(out.data + out.len - 14, "data: [DONE]\n\n"), 0);
    /* an exception in the stream, a broken frame */
    n = frame(f, "exception", "throttlingException", "{\"message\":\"x\"}");
    assert_int_equal(rt_dialect_converse.stream_event(&st, (char *)f, n, &out), TG_EPROTO);
    n = frame(f, "event", "contentBlockDelta", "{\"delta\":{\"text\":\"x\"}}");
    f[n - 1] ^= 1;
    assert_int_equal(rt_dialect_converse.stream_event(&st, (char *)f, n, &out), TG_EPROTO);
    tg_buf_fini(&out);
}

/* A toolUse whose input has no members streams no input (no delta, or ""): the OpenAI client
 * got arguments "" for it, which its JSON.parse refuses. Such a call's arguments are "{}" now,
 * when its block stops (or at messageStop); a call whose input streamed gets nothing more. */
static void test_converse_stream_tool_without_input(void **state)
{
    unsigned char f[2048];
    struct rt_dialect_stream st;
    struct tg_buf out;
    size_t n;
    const char *p;
    size_t empties = 0;

    (void)state;
    assert_int_equal(tg_buf_init(&out, 8192), 0);
    rt_dialect_stream_init(&st, "shown", 7);
#define EV(et, payload)                                                                            \
    do {                                                                                           \
        n = frame(f, "event", et, payload);                                                        \
        assert_int_equal(rt_dialect_converse.stream_event(&st, (char *)f, n, &out), 0);            \
    } while (0)
    EV("messageStart", "{\"role\":\"assistant\"}");
    EV("contentBlockStart",
       "{\"contentBlockIndex\":0,\"start\":{\"toolUse\":{\"toolUseId\":\"tu1\",\"name\":\"p\"}}}");
    EV("contentBlockDelta", "{\"contentBlockIndex\":0,\"delta\":{\"toolUse\":{\"input\":\"\"}}}");
    EV("contentBlockStop", "{\"contentBlockIndex\":0}");
    EV("contentBlockStart",
       "{\"contentBlockIndex\":1,\"start\":{\"toolUse\":{\"toolUseId\":\"tu2\",\"name\":\"w\"}}}");
    EV("contentBlockDelta", "{\"contentBlockIndex\":1,\"delta\":{\"toolUse\":{\"input\":"
                            "\"{\\\"c\\\":1}\"}}}");
    EV("contentBlockStop", "{\"contentBlockIndex\":1}");
    EV("contentBlockStart",
       "{\"contentBlockIndex\":2,\"start\":{\"toolUse\":{\"toolUseId\":\"tu3\",\"name\":\"p\"}}}");
    EV("messageStop", "{\"stopReason\":\"tool_use\"}");
    EV("metadata", "{\"usage\":{\"inputTokens\":8,\"outputTokens\":4,\"totalTokens\":12}}");
#undef EV
    assert_int_equal(rt_dialect_converse.stream_end(&st, &out), 0);
    assert_non_null(strstr(out.data, "\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":"
                                     "\"{}\"}}]"));
    assert_non_null(strstr(out.data, "\"tool_calls\":[{\"index\":2,\"function\":{\"arguments\":"
                                     "\"{}\"}}]"));
    for (p = strstr(out.data, "\"arguments\":\"{}\""); p != NULL;
         p = strstr(p + 1, "\"arguments\":\"{}\""))
        empties++;
    assert_int_equal(empties, 2);
    assert_non_null(strstr(out.data, "\"arguments\":\"{\\\"c\\\":1}\""));
    assert_non_null(strstr(out.data, "\"finish_reason\":\"tool_calls\""));
    tg_buf_fini(&out);
}

/* Claude's reasoning through Converse: the answer's reasoningText signature and redactedContent
 * reach the chat client as thinking_blocks (in streams as thinking_blocks deltas), and the
 * client's thinking_blocks go back as the assistant turn's first reasoningContent blocks,
 * signatures unchanged; a malformed entry is a 400 naming it. */
static void test_converse_thinking_blocks(void **state)
{
    struct rt_deployment_conf d;
    unsigned char f[2048];
    struct rt_dialect_stream st;
    struct tg_buf out;
    char err[256];
    size_t n;
    json_t *a, *c, *b;

    (void)state;
    memset(&d, 0, sizeof(d));
    a = parse("{\"output\":{\"message\":{\"role\":\"assistant\",\"content\":["
              "{\"reasoningContent\":{\"reasoningText\":{\"text\":\"hmm\",\"signature\":"
              "\"EqQBCgIYAhIM\"}}},{\"reasoningContent\":{\"redactedContent\":\"EmwKAhgB\"}},"
              "{\"text\":\"Sure\"}]}},\"stopReason\":\"end_turn\",\"usage\":{\"inputTokens\":1,"
              "\"outputTokens\":2}}");
    c = rt_dialect_converse.response(a, "shown", err, sizeof(err));
    assert_non_null(c);
    assert_json(json_object_get(json_array_get(json_object_get(c, "choices"), 0), "message"),
                "{\"role\":\"assistant\",\"content\":\"Sure\",\"reasoning_content\":\"hmm\","
                "\"thinking_blocks\":[{\"type\":\"thinking\",\"thinking\":\"hmm\",\"signature\":"
                "\"EqQBCgIYAhIM\"},{\"type\":\"redacted_thinking\",\"data\":\"EmwKAhgB\"}]}");
    json_decref(c);
    json_decref(a);

    a = parse("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"},"
              "{\"role\":\"assistant\",\"content\":\"Checking.\",\"thinking_blocks\":[{\"type\":"
              "\"thinking\",\"thinking\":\"hmm\",\"signature\":\"EqQBCgIYAhIM\"},{\"type\":"
              "\"redacted_thinking\",\"data\":\"EmwKAhgB\"}],\"tool_calls\":[{\"id\":\"c1\","
              "\"type\":\"function\",\"function\":{\"name\":\"w\",\"arguments\":\"{}\"}}]},"
              "{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"a\"}]}");
    b = rt_dialect_converse.request(a, &d, 0, err, sizeof(err));
    assert_non_null(b);
    assert_json(json_array_get(json_object_get(b, "messages"), 1),
                "{\"role\":\"assistant\",\"content\":[{\"reasoningContent\":{\"reasoningText\":"
                "{\"text\":\"hmm\",\"signature\":\"EqQBCgIYAhIM\"}}},{\"reasoningContent\":{"
                "\"redactedContent\":\"EmwKAhgB\"}},{\"text\":\"Checking.\"},{\"toolUse\":{"
                "\"toolUseId\":\"c1\",\"name\":\"w\",\"input\":{}}}]}");
    json_decref(b);
    json_decref(a);
    a = parse("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"},"
              "{\"role\":\"assistant\",\"content\":\"y\",\"thinking_blocks\":[{\"type\":"
              "\"thinking\",\"thinking\":\"hmm\",\"signature\":null}]}]}");
    assert_null(rt_dialect_converse.request(a, &d, 0, err, sizeof(err)));
    assert_string_equal(err, "messages[1].thinking_blocks[0].signature: expected a string");
    json_decref(a);

    assert_int_equal(tg_buf_init(&out, 8192), 0);
    rt_dialect_stream_init(&st, "shown", 7);
#define EV(et, payload)                                                                            \
    do {                                                                                           \
        n = frame(f, "event", et, payload);                                                        \
        assert_int_equal(rt_dialect_converse.stream_event(&st, (char *)f, n, &out), 0);            \
    } while (0)
    EV("messageStart", "{\"role\":\"assistant\"}");
    EV("contentBlockDelta", "{\"contentBlockIndex\":0,\"delta\":{\"reasoningContent\":{"
                            "\"text\":\"hmm\"}}}");
    EV("contentBlockDelta", "{\"contentBlockIndex\":0,\"delta\":{\"reasoningContent\":{"
                            "\"signature\":\"EqQBCgIYAhIM\"}}}");
    EV("contentBlockStop", "{\"contentBlockIndex\":0}");
    EV("contentBlockDelta", "{\"contentBlockIndex\":1,\"delta\":{\"reasoningContent\":{"
                            "\"redactedContent\":\"EmwKAhgB\"}}}");
    EV("contentBlockStop", "{\"contentBlockIndex\":1}");
    EV("messageStop", "{\"stopReason\":\"end_turn\"}");
#undef EV
    assert_int_equal(rt_dialect_converse.stream_end(&st, &out), 0);
    assert_non_null(strstr(out.data, "\"reasoning_content\":\"hmm\""));
    assert_non_null(strstr(out.data, "\"thinking_blocks\":[{\"type\":\"thinking\",\"thinking\":"
                                     "\"\",\"signature\":\"EqQBCgIYAhIM\"}]"));
    assert_non_null(strstr(out.data, "\"thinking_blocks\":[{\"type\":\"redacted_thinking\","
                                     "\"data\":\"EmwKAhgB\"}]"));
    tg_buf_fini(&out);
}

static void test_bedrock_classify_embed(void **state)
{
    const struct rt_provider *p = &rt_provider_bedrock;
    struct rt_deployment_conf d;
    char err[256];
    const char *tl = "{\"message\":\"Input is too long for requested model.\"}";
    const char *gr = "{\"output\":{\"message\":{\"content\":[]}},\"stopReason\":"
                     "\"guardrail_intervened\"}";
    json_t *req, *b, *a;

    (void)state;
    assert_int_equal(p->classify(429, "{\"message\":\"Too many requests\"}", 31),
                     RT_ERR_RATE_LIMIT);
    assert_int_equal(p->classify(400, tl, strlen(tl)), RT_ERR_CONTEXT_WINDOW);
    assert_int_equal(p->classify(200, gr, strlen(gr)), RT_ERR_CONTENT_POLICY);
    assert_int_equal(p->classify(403,
                                 "{\"message\":\"The security token included in the request "
                                 "is invalid.\"}",
                                 62),
                     RT_ERR_AUTH);
    assert_int_equal(p->classify(503, NULL, 0), RT_ERR_SERVER);
    memset(&d, 0, sizeof(d));
    snprintf(d.model, sizeof(d.model), "amazon.titan-embed-text-v2:0");
    req = parse("{\"input\":[\"a\"],\"dimensions\":256}");
    b = rt_dialect_converse.embed_request(req, &d, err, sizeof(err));
    assert_json(b, "{\"inputText\":\"a\",\"dimensions\":256}");
    json_decref(b);
    json_decref(req);
    req = parse("{\"input\":[\"a\",\"b\"]}");
    assert_null(rt_dialect_converse.embed_request(req, &d, err, sizeof(err)));
    snprintf(d.model, sizeof(d.model), "cohere.embed-english-v3");
    b = rt_dialect_converse.embed_request(req, &d, err, sizeof(err));
    assert_json(b, "{\"texts\":[\"a\",\"b\"],\"input_type\":\"search_document\"}");
    json_decref(b);
    json_decref(req);
    a = parse("{\"embedding\":[0.5,1],\"inputTextTokenCount\":3}");
    b = rt_dialect_converse.embed_response(a, "e", err, sizeof(err));
    assert_json(b, "{\"object\":\"list\",\"model\":\"e\",\"data\":[{\"object\":\"embedding\","
                   "\"index\":0,\"embedding\":[0.5,1]}],\"usage\":{\"prompt_tokens\":3,"
                   "\"total_tokens\":3}}");
    json_decref(b);
    json_decref(a);
}

/* ---- STS ---- */

static void test_sts(void **state)
{
    char out[512], err[256], ans[1024], exp_s[32];
    int64_t exp;
    time_t t = time(NULL) + 3000;
    struct tm tm;
    static const char refused[] =
        "<ErrorResponse xmlns=\"https://sts.amazonaws.com/doc/2011-06-15/\"><Error><Type>Sender"
        "</Type><Code>InvalidIdentityToken</Code><Message>Couldn't retrieve verification key "
        "from your identity provider</Message></Error></ErrorResponse>";

    (void)state;
    gmtime_r(&t, &tm);
    strftime(exp_s, sizeof(exp_s), "%Y-%m-%dT%H:%M:%SZ", &tm);
    snprintf(ans, sizeof(ans),
             "<AssumeRoleWithWebIdentityResponse><AssumeRoleWithWebIdentityResult><Credentials>"
             "<SessionToken>FwoGZXIvYXdzEB==</SessionToken><SecretAccessKey>wJal/Secret+1"
             "</SecretAccessKey><Expiration>%s</Expiration><AccessKeyId>ASIAEXAMPLE"
             "</AccessKeyId></Credentials></AssumeRoleWithWebIdentityResult>"
             "</AssumeRoleWithWebIdentityResponse>",
             exp_s);
    assert_int_equal(
        rt_aws_sts_parse(200, ans, strlen(ans), out, sizeof(out), &exp, err, sizeof(err)), 0);
    assert_string_equal(out, "ASIAEXAMPLE\nwJal/Secret+1\nFwoGZXIvYXdzEB==");
    assert_true(exp > 2900 && exp <= 3000);
    assert_int_equal(
        rt_aws_sts_parse(400, refused, strlen(refused), out, sizeof(out), &exp, err, sizeof(err)),
        TG_EPROTO);
    assert_string_equal(err, "STS answered HTTP 400, error \"InvalidIdentityToken\"");
    assert_int_equal(rt_aws_sts_parse(200, "<x/>", 4, out, sizeof(out), &exp, err, sizeof(err)),
                     TG_EPROTO);
    assert_string_equal(out, "");
}

/* ---- configs ---- */

static void test_bedrock_config(void **state)
{
    static struct rt_config_diag diag;
    struct rt_config *cfg;
    const char *text;
    struct rt_provider_attempt a;
    char url[RT_PROVIDER_URL_CAP];
    char hdr[RT_PROVIDER_HEADERS_MAX][RT_PROVIDER_HEADER_CAP];
    const struct rt_deployment_conf *d;

    (void)state;
    tg_log_set_level(TG_LOG_OFF);
    unsetenv("AWS_REGION_NAME");
    unsetenv("AWS_REGION");
    unsetenv("AWS_DEFAULT_REGION");
    unsetenv("AWS_ROLE_ARN");
    unsetenv("AWS_WEB_IDENTITY_TOKEN_FILE");
    setenv("AWS_ACCESS_KEY_ID", "AKIAENV", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "env-secret", 1);
    unsetenv("AWS_SESSION_TOKEN");
    text =
        "model_list:\n"
        "  - {model_name: a, litellm_params: {model: bedrock/anthropic.claude-3-5-sonnet-"
        "20240620-v1:0, aws_region_name: us-west-2}}\n"
        "  - {model_name: b, litellm_params: {model: bedrock/amazon.nova-lite-v1:0,\n"
        "     aws_region_name: eu-west-1, aws_bedrock_runtime_endpoint: \"http://127.0.0.1:9/\",\n"
        "     aws_access_key_id: AKIACFG, aws_secret_access_key: cfg-secret,\n"
        "     aws_session_token: sess}}\n";
    cfg = rt_config_load_buffer("router.yaml", text, strlen(text), &diag);
    if (cfg == NULL)
        fail_msg("%s", diag.error);
    d = &cfg->deployments[0];
    /* AWS's own endpoint: the AWS_* credentials */
    assert_string_equal(d->api_base, "https://bedrock-runtime.us-west-2.amazonaws.com");
    assert_string_equal(d->cloud->aws_access_key_id, "AKIAENV");
    assert_false(rt_provider_needs_token(d));
    memset(&a, 0, sizeof(a));
    a.dep = d;
    a.wire = RT_API_CHAT;
    a.stream = 1;
    a.body = "{}";
    a.body_len = 2;
    a.now_s = 1440938160;
    d->prov->url(&a, url, sizeof(url));
    assert_string_equal(url, "https://bedrock-runtime.us-west-2.amazonaws.com/model/"
                             "anthropic.claude-3-5-sonnet-20240620-v1%3A0/converse-stream");
    assert_int_equal(d->prov->headers(&a, url, hdr), 2);
    assert_int_equal(strncmp(hdr[0],
                             "Authorization: AWS4-HMAC-SHA256 Credential=AKIAENV/"
                             "20150830/us-west-2/bedrock/aws4_request, SignedHeaders="
                             "content-type;host;x-amz-date, Signature=",
                             144),
                     0);
    assert_string_equal(hdr[1], "X-Amz-Date: 20150830T123600Z");
    d = &cfg->deployments[1];
    assert_string_equal(d->api_base, "http://127.0.0.1:9");
    a.dep = d;
    a.stream = 0;
    d->prov->url(&a, url, sizeof(url));
    assert_string_equal(url, "http://127.0.0.1:9/model/amazon.nova-lite-v1%3A0/converse");
    assert_int_equal(d->prov->headers(&a, url, hdr), 3);
    assert_non_null(strstr(hdr[0], "Credential=AKIACFG/20150830/eu-west-1/bedrock/aws4_request, "
                                   "SignedHeaders=content-type;host;x-amz-date;"
                                   "x-amz-security-token, "));
    assert_string_equal(hdr[2], "X-Amz-Security-Token: sess");
    rt_config_destroy(&cfg);

    /* an endpoint of the config's never gets the AWS_* credentials */
    text = "model_list:\n  - {model_name: a, litellm_params: {model: bedrock/m,\n"
           "     aws_region_name: us-east-1, api_base: \"http://127.0.0.1:9\"}}\n";
    cfg = rt_config_load_buffer("router.yaml", text, strlen(text), &diag);
    assert_null(cfg);
    assert_non_null(strstr(diag.error, "AWS_* credentials are only sent to AWS's own endpoint"));
    text = "model_list:\n  - {model_name: a, litellm_params: {model: bedrock/m}}\n";
    cfg = rt_config_load_buffer("router.yaml", text, strlen(text), &diag);
    assert_null(cfg);
    assert_non_null(strstr(diag.error, "bedrock needs aws_region_name"));
    /* a web identity: a token from STS */
    text = "model_list:\n  - {model_name: a, litellm_params: {model: bedrock/m,\n"
           "     aws_region_name: us-east-1, aws_role_name: \"arn:aws:iam::1:role/r\",\n"
           "     aws_web_identity_token: eyJ.x.y}}\n";
    cfg = rt_config_load_buffer("router.yaml", text, strlen(text), &diag);
    if (cfg == NULL)
        fail_msg("%s", diag.error);
    d = &cfg->deployments[0];
    assert_true(rt_provider_needs_token(d));
    a.dep = d;
    assert_int_equal(d->prov->headers(&a, url, hdr), TG_EAGAIN);
    a.token = "ASIA1\nsec\nsess-1";
    d->prov->url(&a, url, sizeof(url));
    assert_int_equal(d->prov->headers(&a, url, hdr), 3);
    assert_non_null(strstr(hdr[0], "Credential=ASIA1/"));
    assert_string_equal(hdr[2], "X-Amz-Security-Token: sess-1");
    {
        struct rt_token_request tr;
        char err[256];

        memset(&tr, 0, sizeof(tr));
        assert_int_equal(d->prov->token_request(d, 0, &tr, err, sizeof(err)), 0);
        assert_string_equal(tr.url, "https://sts.us-east-1.amazonaws.com/");
        assert_string_equal(tr.body, "Action=AssumeRoleWithWebIdentity&Version=2011-06-15&"
                                     "RoleArn=arn%3Aaws%3Aiam%3A%3A1%3Arole%2Fr&RoleSessionName="
                                     "tollgate&WebIdentityToken=eyJ.x.y&DurationSeconds=3600");
        free(tr.body);
    }
    rt_config_destroy(&cfg);
    unsetenv("AWS_ACCESS_KEY_ID");
    unsetenv("AWS_SECRET_ACCESS_KEY");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sigv4_suite),
        cmocka_unit_test(test_eventstream),
        cmocka_unit_test(test_converse_request),
        cmocka_unit_test(test_converse_response),
        cmocka_unit_test(test_converse_stream),
        cmocka_unit_test(test_converse_stream_tool_without_input),
        cmocka_unit_test(test_converse_request_history_tools),
        cmocka_unit_test(test_converse_request_tool_error_and_images),
        cmocka_unit_test(test_converse_thinking_blocks),
        cmocka_unit_test(test_bedrock_classify_embed),
        cmocka_unit_test(test_sts),
        cmocka_unit_test(test_bedrock_config),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
