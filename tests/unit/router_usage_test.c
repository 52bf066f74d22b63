/* usage: token usage from JSON bodies and SSE streams split anywhere; integer cost. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>
#include <stdlib.h>

#include "config.h"
#include "tg_units.h"
#include "tg_err.h"
#include "usage.h"

static void json_case(enum rt_api api, const char *body, int found, int64_t p, int64_t c)
{
    struct rt_usage u;

    assert_int_equal(rt_usage_from_json(api, body, strlen(body), &u), 0);
    assert_int_equal(u.found, found);
    assert_int_equal(u.prompt_tokens, p);
    assert_int_equal(u.completion_tokens, c);
}

static void test_json(void **state)
{
    struct rt_usage u;

    (void)state;
    json_case(RT_API_CHAT,
              "{\"id\":\"c1\",\"choices\":[{\"message\":{\"content\":\"hi\"}}],"
              "\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":8,\"total_tokens\":20}}",
              1, 12, 8);
    json_case(RT_API_EMBEDDINGS, "{\"data\":[],\"usage\":{\"prompt_tokens\":5,\"total_tokens\":5}}",
              1, 5, 0);
    json_case(RT_API_RESPONSES,
              "{\"object\":\"response\",\"usage\":{\"input_tokens\":10,\"output_tokens\":3}}", 1,
              10, 3);
    json_case(RT_API_MESSAGES,
              "{\"type\":\"message\",\"usage\":{\"input_tokens\":7,\"cache_read_input_tokens\":3,"
              "\"cache_creation_input_tokens\":1,\"output_tokens\":2}}",
              1, 11, 2);
    json_case(RT_API_CHAT, "{\"choices\":[]}", 0, 0, 0);
    json_case(RT_API_CHAT, "{\"usage\":null}", 0, 0, 0);
    json_case(RT_API_CHAT, "{\"usage\":{\"prompt_tokens\":-4,\"completion_tokens\":\"x\"}}", 0, 0,
              0);
    assert_int_equal(rt_usage_from_json(RT_API_CHAT, "not json", 8, &u), TG_EPROTO);
    assert_int_equal(u.found, 0);
    assert_int_equal(rt_usage_from_json(RT_API_CHAT, "[1]", 3, &u), TG_EPROTO);
    assert_int_equal(rt_usage_from_json(RT_API_CHAT, NULL, 0, &u), TG_EPROTO);
}

static void test_cost(void **state)
{
    struct rt_deployment_conf d;
    struct rt_usage u = {.prompt_tokens = 12, .completion_tokens = 8, .found = 1};

    (void)state;
    memset(&d, 0, sizeof(d));
    rt_model_price_none(&d.price);
    assert_int_equal(tg_parse_usd_fusd("0.00000005", &d.price.input), 0);
    assert_int_equal(tg_parse_usd_fusd("0.0000004", &d.price.output), 0);
    /* 12 * 5e-8 + 8 * 4e-7 = 3.8e-6 USD = 3800 nUSD exactly. */
    assert_int_equal(rt_usage_cost_nusd(&d, &u), 3800);
    /* Sub-nano amounts are floored, never rounded up. */
    u.prompt_tokens = 1;
    u.completion_tokens = 0;
    d.price.input = 999999;
    assert_int_equal(rt_usage_cost_nusd(&d, &u), 0);
    u.prompt_tokens = 1000000;
    assert_int_equal(rt_usage_cost_nusd(&d, &u), 999999);
    /* Saturates instead of wrapping. */
    u.prompt_tokens = INT64_MAX;
    d.price.input = INT64_MAX;
    assert_int_equal(rt_usage_cost_nusd(&d, &u), INT64_MAX);
    assert_int_equal(rt_usage_cost_nusd(NULL, &u), 0);
    /* No price at all: 0. */
    rt_model_price_none(&d.price);
    u.prompt_tokens = 1000;
    assert_int_equal(rt_usage_cost_nusd(&d, &u), 0);
}

/* A deployment priced like claude-sonnet-4-5 in the built-in map (USD per token: input 3e-6,
 * output 1.5e-5, cache read 3e-7, cache write 3.75e-6) or gpt-4o (input 2.5e-6, output 1e-5,
 * cached input 1.25e-6). */
static void priced(struct rt_deployment_conf *d, const char *in, const char *out, const char *cr,
                   const char *cc, const char *rs)
{
    memset(d, 0, sizeof(*d));
    rt_model_price_none(&d->price);
    assert_int_equal(tg_parse_usd_fusd(in, &d->price.input), 0);
    assert_int_equal(tg_parse_usd_fusd(out, &d->price.output), 0);
    if (cr != NULL)
        assert_int_equal(tg_parse_usd_fusd(cr, &d->price.cache_read), 0);
    if (cc != NULL)
        assert_int_equal(tg_parse_usd_fusd(cc, &d->price.cache_creation), 0);
    if (rs != NULL)
        assert_int_equal(tg_parse_usd_fusd(rs, &d->price.reasoning), 0);
}

/* Each usage shape read from an answer and priced at its own rates; the figures by hand. */
static void test_cost_per_usage_shape(void **state)
{
    struct rt_deployment_conf d;
    struct rt_usage u;
    static const char chat[] =
        "{\"id\":\"c\",\"usage\":{\"prompt_tokens\":2000,\"completion_tokens\":300,"
        "\"prompt_tokens_details\":{\"cached_tokens\":1500,\"audio_tokens\":0},"
        "\"completion_tokens_details\":{\"reasoning_tokens\":100}}}";
    static const char responses[] =
        "{\"id\":\"r\",\"usage\":{\"input_tokens\":2000,\"input_tokens_details\":"
        "{\"cached_tokens\":1500},\"output_tokens\":300,\"output_tokens_details\":"
        "{\"reasoning_tokens\":100},\"total_tokens\":2300}}";
    static const char messages[] =
        "{\"id\":\"m\",\"usage\":{\"input_tokens\":100,\"cache_creation_input_tokens\":1000,"
        "\"cache_read_input_tokens\":4000,\"output_tokens\":50}}";
    static const char embeddings[] =
        "{\"object\":\"list\",\"usage\":{\"prompt_tokens\":8000,\"total_tokens\":8000}}";

    (void)state;
    /* OpenAI chat, gpt-4o prices: 500 * 2.5e-6 + 1500 * 1.25e-6 + 300 * 1e-5
     * = 0.00125 + 0.001875 + 0.003 = 0.006125 USD (reasoning at the output price). */
    priced(&d, "2.5e-6", "1e-5", "1.25e-6", NULL, NULL);
    assert_int_equal(rt_usage_from_json(RT_API_CHAT, chat, strlen(chat), &u), 0);
    assert_int_equal(u.prompt_tokens, 2000);
    assert_int_equal(u.cache_read_tokens, 1500);
    assert_int_equal(u.completion_tokens, 300);
    assert_int_equal(u.reasoning_tokens, 100);
    assert_int_equal(rt_usage_cost_nusd(&d, &u), 6125000);
    /* the same through the full parser (an exponent sends the scanner to jansson) */
    {
        char big[512];

        snprintf(big, sizeof(big), "{\"x\":1e0,%s", chat + 1);
        assert_int_equal(rt_usage_from_json(RT_API_CHAT, big, strlen(big), &u), 0);
        assert_int_equal(rt_usage_cost_nusd(&d, &u), 6125000);
    }
    /* a reasoning price of its own: 200 * 1e-5 + 100 * 4e-5 replaces 300 * 1e-5:
     * 0.006125 - 0.003 + 0.002 + 0.004 = 0.009125 USD */
    priced(&d, "2.5e-6", "1e-5", "1.25e-6", NULL, "4e-5");
    assert_int_equal(rt_usage_cost_nusd(&d, &u), 9125000);
    /* no cache price: cached input at the input price, 2000 * 2.5e-6 + 300 * 1e-5 = 0.008 */
    priced(&d, "2.5e-6", "1e-5", NULL, NULL, NULL);
    assert_int_equal(rt_usage_cost_nusd(&d, &u), 8000000);

    /* LiteLLM's chat usage for a cached Anthropic/Bedrock call: the cache's writes at the top
     * level, a part of prompt_tokens (5100 = 100 plain + 4000 read + 1000 written); with the
     * claude-sonnet-4-5 prices of the messages case below, 0.006 USD either way, through the
     * scanner and through jansson. */
    {
        static const char lchat[] =
            "{\"usage\":{\"prompt_tokens\":5100,\"completion_tokens\":50,"
            "\"prompt_tokens_details\":{\"cached_tokens\":4000},"
            "\"cache_creation_input_tokens\":1000}}";
        char big[512];

        priced(&d, "3e-6", "1.5e-5", "3e-7", "3.75e-6", NULL);
        assert_int_equal(rt_usage_from_json(RT_API_CHAT, lchat, strlen(lchat), &u), 0);
        assert_int_equal(u.prompt_tokens, 5100);
        assert_int_equal(u.cache_read_tokens, 4000);
        assert_int_equal(u.cache_creation_tokens, 1000);
        assert_int_equal(rt_usage_cost_nusd(&d, &u), 6000000);
        snprintf(big, sizeof(big), "{\"x\":1e0,%s", lchat + 1);
        assert_int_equal(rt_usage_from_json(RT_API_CHAT, big, strlen(big), &u), 0);
        assert_int_equal(u.cache_creation_tokens, 1000);
        assert_int_equal(rt_usage_cost_nusd(&d, &u), 6000000);
    }

    /* OpenAI responses: the same counts under their names. */
    priced(&d, "2.5e-6", "1e-5", "1.25e-6", NULL, NULL);
    assert_int_equal(rt_usage_from_json(RT_API_RESPONSES, responses, strlen(responses), &u), 0);
    assert_int_equal(u.prompt_tokens, 2000);
    assert_int_equal(u.cache_read_tokens, 1500);
    assert_int_equal(u.reasoning_tokens, 100);
    assert_int_equal(rt_usage_cost_nusd(&d, &u), 6125000);

    /* Anthropic, claude-sonnet-4-5 prices: 100 * 3e-6 + 1000 * 3.75e-6 + 4000 * 3e-7
     * + 50 * 1.5e-5 = 0.0003 + 0.00375 + 0.0012 + 0.00075 = 0.006 USD; prompt = 5100. */
    priced(&d, "3e-6", "1.5e-5", "3e-7", "3.75e-6", NULL);
    assert_int_equal(rt_usage_from_json(RT_API_MESSAGES, messages, strlen(messages), &u), 0);
    assert_int_equal(u.prompt_tokens, 5100);
    assert_int_equal(u.cache_read_tokens, 4000);
    assert_int_equal(u.cache_creation_tokens, 1000);
    assert_int_equal(u.completion_tokens, 50);
    assert_int_equal(rt_usage_cost_nusd(&d, &u), 6000000);

    /* Embeddings, text-embedding-3-small: 8000 * 2e-8 = 0.00016 USD on input alone. */
    priced(&d, "2e-8", "0", NULL, NULL, NULL);
    assert_int_equal(rt_usage_from_json(RT_API_EMBEDDINGS, embeddings, strlen(embeddings), &u), 0);
    assert_int_equal(u.prompt_tokens, 8000);
    assert_int_equal(rt_usage_cost_nusd(&d, &u), 160000);

    /* Parts larger than their totals are cut to them: never a negative plain count. */
    u.prompt_tokens = 10;
    u.cache_read_tokens = 50;
    u.cache_creation_tokens = 50;
    u.completion_tokens = 1;
    u.reasoning_tokens = 9;
    priced(&d, "1e-6", "1e-6", "1e-6", "1e-6", "1e-6");
    assert_int_equal(rt_usage_cost_nusd(&d, &u), 11000);
}

/* Streams: cached and reasoning counts from the usage chunk / event. */
static void test_stream_usage_parts(void **state)
{
    static const char chat_s[] =
        "data: {\"id\":\"c\",\"choices\":[],\"usage\":{\"prompt_tokens\":2000,"
        "\"completion_tokens\":300,\"prompt_tokens_details\":{\"cached_tokens\":1500},"
        "\"completion_tokens_details\":{\"reasoning_tokens\":100}}}\n\ndata: [DONE]\n\n";
    static const char msg_s[] =
        "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":"
        "{\"input_tokens\":100,\"cache_creation_input_tokens\":1000,"
        "\"cache_read_input_tokens\":4000,\"output_tokens\":1}}}\n\n"
        "event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":"
        "{\"output_tokens\":50}}\n\n";
    struct rt_sse_usage p;
    struct rt_usage u;

    (void)state;
    assert_int_equal(rt_sse_usage_init(&p, RT_API_CHAT, 0), 0);
    for (size_t i = 0; i < sizeof(chat_s) - 1; i += 7)
        rt_sse_usage_feed(&p, chat_s + i, sizeof(chat_s) - 1 - i < 7 ? sizeof(chat_s) - 1 - i : 7);
    rt_sse_usage_get(&p, &u);
    rt_sse_usage_fini(&p);
    assert_int_equal(u.prompt_tokens, 2000);
    assert_int_equal(u.cache_read_tokens, 1500);
    assert_int_equal(u.reasoning_tokens, 100);

    assert_int_equal(rt_sse_usage_init(&p, RT_API_MESSAGES, 0), 0);
    rt_sse_usage_feed(&p, msg_s, sizeof(msg_s) - 1);
    rt_sse_usage_get(&p, &u);
    rt_sse_usage_fini(&p);
    assert_int_equal(u.prompt_tokens, 5100);
    assert_int_equal(u.cache_read_tokens, 4000);
    assert_int_equal(u.cache_creation_tokens, 1000);
    assert_int_equal(u.completion_tokens, 50);

    /* A message_delta that restates input without output_tokens, after a message_start whose
     * usage was lost: the counts are usage found (a fuzzing finding: counts without found). */
    {
        static const char delta_only[] =
            "event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":"
            "{\"input_tokens\":512}}\n\n";

        assert_int_equal(rt_sse_usage_init(&p, RT_API_MESSAGES, 0), 0);
        rt_sse_usage_feed(&p, delta_only, sizeof(delta_only) - 1);
        rt_sse_usage_get(&p, &u);
        rt_sse_usage_fini(&p);
        assert_int_equal(u.found, 1);
        assert_int_equal(u.prompt_tokens, 512);
    }
}

/* The input estimate of the pre-call checks: text inside JSON strings only, runs by class. */
static void test_estimate_input(void **state)
{
    static const char a[] = "{\"model\":\"gpt\",\"messages\":[{\"role\":\"user\","
                            "\"content\":\"Hello world, 12345!\"}]}";
    char *big;
    size_t n = 0;

    (void)state;
    /* model gpt messages role user content: 6 words; Hello world: 2; ",": 1; 12345: 2; "!": 1 */
    assert_int_equal(rt_usage_estimate_input(a, strlen(a)), 12);
    assert_int_equal(rt_usage_estimate_input("", 0), 0);
    assert_int_equal(rt_usage_estimate_input("{}", 2), 0);
    /* an escaped quote does not end the string; \n is space; \u00e9 one character */
    {
        static const char esc[] = "\"a\\\"b\\nc\\u00e9\"";

        assert_int_equal(rt_usage_estimate_input(esc, strlen(esc)), 5);
    }
    /* CJK: one per character (3-byte UTF-8), accented Latin inside a word: the word */
    assert_int_equal(rt_usage_estimate_input("\"\xe4\xbd\xa0\xe5\xa5\xbd\"", 8), 2);
    assert_int_equal(rt_usage_estimate_input("\"caf\xc3\xa9\"", 7), 1);
    /* about 1 token a word for 4,000 English words: at most the count a tokenizer gives */
    big = malloc(64 * 1024);
    assert_non_null(big);
    big[n++] = '"';
    for (int i = 0; i < 4000; i++)
        n += (size_t)snprintf(big + n, 64 * 1024 - n, "%s ", i % 2 ? "quick" : "brown");
    big[n++] = '"';
    assert_int_equal(rt_usage_estimate_input(big, n), 4000);
    free(big);
}

static const char *chat_stream =
    "data: {\"id\":\"c\",\"choices\":[{\"delta\":{\"content\":\"Hel\"}}],\"usage\":null}\n\n"
    "data: {\"id\":\"c\",\"choices\":[{\"delta\":{\"content\":\"lo usage\"}}]}\n\n"
    ": keep-alive comment\n\n"
    "data: {\"id\":\"c\",\"choices\":[],\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":8,"
    "\"total_tokens\":20}}\n\n"
    "data: [DONE]\n\n";

static const char *responses_stream =
    "event: response.created\n"
    "data: {\"type\":\"response.created\",\"response\":{\"id\":\"r\",\"usage\":null}}\n\n"
    "event: response.output_text.delta\n"
    "data: {\"type\":\"response.output_text.delta\",\"delta\":\"hi\"}\n\n"
    "event: response.completed\n"
    "data: {\"type\":\"response.completed\",\"response\":{\"id\":\"r\",\"output\":[],"
    "\"usage\":{\"input_tokens\":9,\"output_tokens\":4,\"total_tokens\":13}}}\n\n";

static const char *messages_stream =
    "event: message_start\r\n"
    "data: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"usage\":{\"input_tokens\":25,"
    "\"output_tokens\":1}}}\r\n\r\n"
    "event: content_block_delta\r\n"
    "data: {\"type\":\"content_block_delta\",\"delta\":{\"text\":\"usage is fun\"}}\r\n\r\n"
    "event: message_delta\r\n"
    "data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},"
    "\"usage\":{\"output_tokens\":15}}\r\n\r\n"
    "event: message_stop\r\n"
    "data: {\"type\":\"message_stop\"}\r\n\r\n";

/* Feed s split at every position, and byte by byte; the usage must always be the same. */
static void stream_case(enum rt_api api, const char *s, int64_t p, int64_t c)
{
    size_t n = strlen(s);
    struct rt_sse_usage sse;
    struct rt_usage u;

    for (size_t cut = 0; cut <= n; cut++) {
        assert_int_equal(rt_sse_usage_init(&sse, api, 0), 0);
        rt_sse_usage_feed(&sse, s, cut);
        rt_sse_usage_feed(&sse, s + cut, n - cut);
        rt_sse_usage_get(&sse, &u);
        if (!u.found || u.prompt_tokens != p || u.completion_tokens != c)
            fail_msg("split at %zu: found=%d %lld/%lld", cut, u.found, (long long)u.prompt_tokens,
                     (long long)u.completion_tokens);
        assert_int_equal(sse.events_bad, 0);
        rt_sse_usage_fini(&sse);
    }
    assert_int_equal(rt_sse_usage_init(&sse, api, 0), 0);
    for (size_t i = 0; i < n; i++)
        rt_sse_usage_feed(&sse, s + i, 1);
    rt_sse_usage_get(&sse, &u);
    assert_int_equal(u.prompt_tokens, p);
    assert_int_equal(u.completion_tokens, c);
    rt_sse_usage_fini(&sse);
    rt_sse_usage_fini(&sse); /* safe twice */
}

static void test_streams(void **state)
{
    (void)state;
    stream_case(RT_API_CHAT, chat_stream, 12, 8);
    stream_case(RT_API_RESPONSES, responses_stream, 9, 4);
    stream_case(RT_API_MESSAGES, messages_stream, 25, 15);
}

static void test_stream_without_usage_and_long_lines(void **state)
{
    struct rt_sse_usage sse;
    struct rt_usage u;
    char longline[300];

    (void)state;
    /* Cut before the usage chunk: nothing found, never an error. */
    assert_int_equal(rt_sse_usage_init(&sse, RT_API_CHAT, 0), 0);
    rt_sse_usage_feed(&sse, chat_stream, 80);
    rt_sse_usage_get(&sse, &u);
    assert_int_equal(u.found, 0);
    rt_sse_usage_fini(&sse);
    /* A line longer than the buffer is skipped whole and counted; later lines still parse. */
    assert_int_equal(rt_sse_usage_init(&sse, RT_API_CHAT, 128), 0);
    memset(longline, 'x', sizeof(longline));
    memcpy(longline, "data: {\"usage\":{\"prompt_tokens\":999,", 37);
    rt_sse_usage_feed(&sse, longline, sizeof(longline));
    rt_sse_usage_feed(&sse, "\n\n", 2);
    rt_sse_usage_feed(&sse, "data: {\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":4}}\n",
                      58);
    rt_sse_usage_get(&sse, &u);
    assert_int_equal(sse.lines_skipped, 1);
    assert_int_equal(u.prompt_tokens, 3);
    assert_int_equal(u.completion_tokens, 4);
    /* A malformed usage payload is counted, not fatal. */
    rt_sse_usage_feed(&sse, "data: {\"usage\": broken\n", 23);
    assert_int_equal(sse.events_bad, 1);
    rt_sse_usage_get(&sse, &u);
    assert_int_equal(u.prompt_tokens, 3);
    rt_sse_usage_fini(&sse);
}

/* The line buffer is allocated only for a line split across feeds, and where a stream is split
 * never changes the result: lines just under, at and over the cap (line_cap - 1 bytes is the
 * longest parsed) give the same usage and the same counts fed whole or cut anywhere. */
static void test_line_cap_any_split(void **state)
{
    enum { CAP = 96 };
    char s[1024];
    size_t n = 0;
    struct rt_sse_usage sse;
    struct rt_usage whole, u;
    uint64_t lines, skipped;

    (void)state;
    /* usage lines of exactly CAP - 1 (parsed), CAP and CAP + 1 (skipped) bytes */
    for (size_t len = CAP - 1; len <= CAP + 1; len++) {
        int k = snprintf(s + n, sizeof(s) - n,
                         "data: {\"usage\":{\"prompt_tokens\":%zu,\"completion_tokens\":7}", len);

        assert_true(k > 0 && (size_t)k < len);
        n += (size_t)k;
        memset(s + n, ' ', len - (size_t)k - 1);
        n += len - (size_t)k - 1;
        s[n++] = '}';
        memcpy(s + n, len == CAP - 1 ? "\r\n\r\n" : "\n\n", len == CAP - 1 ? 4 : 2);
        n += len == CAP - 1 ? 4 : 2;
    }
    assert_int_equal(rt_sse_usage_init(&sse, RT_API_CHAT, CAP), 0);
    rt_sse_usage_feed(&sse, s, n);
    assert_null(sse.line); /* whole lines: parsed in place, no buffer */
    rt_sse_usage_get(&sse, &whole);
    assert_int_equal(whole.found, 1);
    assert_int_equal(whole.prompt_tokens, CAP - 1);
    assert_int_equal(sse.lines_skipped, 2);
    lines = sse.lines;
    skipped = sse.lines_skipped;
    rt_sse_usage_fini(&sse);
    for (size_t cut = 0; cut <= n; cut++) {
        assert_int_equal(rt_sse_usage_init(&sse, RT_API_CHAT, CAP), 0);
        rt_sse_usage_feed(&sse, s, cut);
        rt_sse_usage_feed(&sse, s + cut, n - cut);
        rt_sse_usage_get(&sse, &u);
        assert_int_equal(u.prompt_tokens, whole.prompt_tokens);
        assert_int_equal(u.completion_tokens, whole.completion_tokens);
        assert_int_equal(sse.lines, lines);
        assert_int_equal(sse.lines_skipped, skipped);
        rt_sse_usage_fini(&sse);
    }
    /* a finished parser ignores further bytes */
    assert_int_equal(rt_sse_usage_feed(&sse, s, n), lines);
    assert_int_equal(sse.lines, lines);
    assert_null(sse.line);
}

/* Random chunking of random SSE-ish bytes never crashes; counts stay non-negative. Bounded. */
static void test_random_streams(void **state)
{
    static char data[4096];
    uint64_t x = 0x123456789ABCDEFull;
    static const char alphabet[] = "data: {}\"usage\":prompt_tokens,1\r\n[DONE]event";

    (void)state;
    for (int iter = 0; iter < 2000; iter++) {
        struct rt_sse_usage sse;
        struct rt_usage u;
        size_t n, off = 0;

        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        n = (size_t)(x % sizeof(data));
        for (size_t i = 0; i < n; i++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            data[i] = alphabet[x % (sizeof(alphabet) - 1)];
        }
        assert_int_equal(rt_sse_usage_init(&sse, (enum rt_api)(iter % 4), 64 + (size_t)(x % 512)),
                         0);
        while (off < n) {
            size_t step = 1 + (size_t)((x >> (off % 32)) % 97);

            if (step > n - off)
                step = n - off;
            rt_sse_usage_feed(&sse, data + off, step);
            off += step;
        }
        rt_sse_usage_get(&sse, &u);
        assert_true(u.prompt_tokens >= 0 && u.completion_tokens >= 0);
        rt_sse_usage_fini(&sse);
    }
}

/* Defect: a garbage usage object with huge counts (a provider's bug or a hostile upstream) made
 * the Anthropic prompt sum (input + cache counts) overflow a signed 64-bit integer (undefined
 * behaviour), and prompt + completion overflowed downstream (tpm windows, events). Counts are now
 * capped at RT_USAGE_TOKENS_MAX, sums included. */
static void test_huge_token_counts_capped(void **state)
{
    struct rt_sse_usage p;
    static const char ev[] =
        "event: message_delta\n"
        "data: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":9223372036854775807,"
        "\"input_tokens\":9223372036854775807,\"cache_read_input_tokens\":9223372036854775807}}"
        "\n\n";
    struct rt_usage u;

    (void)state;
    json_case(RT_API_MESSAGES,
              "{\"usage\":{\"input_tokens\":9223372036854775807,"
              "\"cache_creation_input_tokens\":9223372036854775807,"
              "\"cache_read_input_tokens\":9223372036854775807,\"output_tokens\":"
              "9223372036854775807}}",
              1, RT_USAGE_TOKENS_MAX, RT_USAGE_TOKENS_MAX);
    json_case(RT_API_CHAT,
              "{\"usage\":{\"prompt_tokens\":9223372036854775807,\"completion_tokens\":"
              "1000000000001}}",
              1, RT_USAGE_TOKENS_MAX, RT_USAGE_TOKENS_MAX);
    assert_int_equal(rt_sse_usage_init(&p, RT_API_MESSAGES, 0), 0);
    rt_sse_usage_feed(&p, ev, sizeof(ev) - 1);
    rt_sse_usage_get(&p, &u);
    assert_int_equal(u.prompt_tokens, RT_USAGE_TOKENS_MAX);
    assert_int_equal(u.completion_tokens, RT_USAGE_TOKENS_MAX);
    /* the sum a caller makes cannot overflow */
    assert_true(u.prompt_tokens + u.completion_tokens > 0);
    rt_sse_usage_fini(&p);
}

/* The scanner's contract: whenever it answers 0, jansson (flags 0) accepts the same text as an
 * object and the located member has the same value. */
static void scan_agrees(const char *text, size_t len, int expect_handled)
{
    struct rt_json_member m[2] = {{"model", 0, 0, 0}, {"n", 0, 0, 0}};
    size_t close_off = 0;
    int r = rt_json_scan_object(text, len, m, 2, &close_off);
    json_t *j = json_loadb(text, len, 0, NULL);

    if (expect_handled == 1)
        assert_int_equal(r, 0);
    else if (expect_handled == 0)
        assert_int_equal(r, TG_EINVAL);
    if (r == 0) {
        const char *s;
        size_t n;

        assert_non_null(j);
        assert_true(json_is_object(j));
        assert_int_equal(text[close_off], '}');
        if (m[0].val_len > 0 && rt_json_plain_string(text, &m[0], &s, &n)) {
            json_t *mv = json_object_get(j, "model");

            assert_true(json_is_string(mv));
            assert_int_equal(json_string_length(mv), n);
            assert_memory_equal(json_string_value(mv), s, n);
        } else if (m[0].val_len == 0) {
            assert_null(json_object_get(j, "model"));
        }
        if (m[1].val_len > 0)
            assert_non_null(json_object_get(j, "n"));
    }
    json_decref(j);
}

static void test_scan_matches_jansson(void **state)
{
    static const char *const handled[] = {
        "{\"model\":\"gpt-main\",\"messages\":[{\"role\":\"user\",\"content\":\"hello\"}],"
        "\"max_tokens\":16}",
        " {\r\n\t\"model\" : \"m\" , \"n\" : -0.5 }\n",
        "{}",
        "{\"model\":\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\",\"n\":[true,false,null,{},[]]}",
        "{\"a\":\"\\u00e9\\ud83d\\ude00\\n\\\"\",\"model\":\"x\",\"n\":123456789012345678}",
        "{\"model\":{\"model\":\"inner\"},\"n\":0}",
        "{\"a\":{\"model\":1,\"model\":2}}", /* duplicates below the top level are not looked at */
    };
    static const char *const refused[] = {
        "",
        "[1]",
        "\"s\"",
        "{",
        "{\"model\":\"x\"",
        "{\"model\":\"x\"} x",
        "{\"model\":\"x\",}",
        "{model:\"x\"}",
        "{\"n\":01}",
        "{\"n\":1.}",
        "{\"n\":-}",
        "{\"n\":.5}",
        "{\"n\":1e5}",
        "{\"n\":1234567890123456789}",
        "{\"n\":tru}",
        "{\"n\":truex}",
        "{\"s\":\"a\x01\"}",
        "{\"s\":\"\\u0000\"}",
        "{\"s\":\"\\ud800\"}",
        "{\"s\":\"\\udc00\"}",
        "{\"s\":\"\\x\"}",
        "{\"s\":\"\xc0\xaf\"}",
        "{\"s\":\"\xed\xa0\x80\"}",
        "{\"s\":\"\xf4\x90\x80\x80\"}",
        "{\"s\":\"\xe2\x82\"}",
        "{\"model\":\"a\",\"model\":\"b\"}",
        "{\"mod\\u0065l\":\"a\"}",
        "\xef\xbb\xbf{}",
    };
    char deep[2 * RT_JSON_SCAN_DEPTH_MAX + 16];
    size_t n = 0;

    (void)state;
    for (size_t i = 0; i < sizeof(handled) / sizeof(handled[0]); i++)
        scan_agrees(handled[i], strlen(handled[i]), 1);
    for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++)
        scan_agrees(refused[i], strlen(refused[i]), 0);
    /* deeper than the scanner goes: left to the full parser */
    deep[n++] = '{';
    deep[n++] = '"';
    deep[n++] = 'a';
    deep[n++] = '"';
    deep[n++] = ':';
    for (int i = 0; i < RT_JSON_SCAN_DEPTH_MAX; i++)
        deep[n++] = '[';
    for (int i = 0; i < RT_JSON_SCAN_DEPTH_MAX; i++)
        deep[n++] = ']';
    deep[n++] = '}';
    scan_agrees(deep, n, 0);
}

/* Many wanted names: the scanner keeps the lengths of the first eight and measures the others
 * when a key may match; a key is compared only when a wanted name starts with a byte equal to
 * its first one modulo 64 ('!' and 'a' share a slot). Every member is found where it is, a key
 * that shares only the slot is not taken for a name, and a repeated name past the eighth sends
 * the text to jansson as the first eight's do. */
static void test_scan_many_names(void **state)
{
    static const char *const names[] = {"model", "stream", "n", "user", "metadata", "tools",
                                        "seed",  "stop",   "ax", "",    "!b",       "temperature"};
    enum { NN = sizeof(names) / sizeof(names[0]) };
    static const char text[] =
        "{\"!x\":1,\"temperature\":0.5,\"\":\"empty\",\"!b\":[1],\"ax\":{\"a\":2},\"a\":3,"
        "\"model\":\"m\",\"stop\":null,\"tools\":[],\"seeds\":4,\"seed\":7}";
    static const char *const want[NN] = {"\"m\"", NULL,   NULL,           NULL,  NULL, "[]",
                                         "7",      "null", "{\"a\":2}", "\"empty\"", "[1]", "0.5"};
    struct rt_json_member m[NN];
    char dup[sizeof(text) + 32];

    (void)state;
    for (size_t i = 0; i < NN; i++)
        m[i] = (struct rt_json_member){names[i], 0, 0, 0};
    assert_int_equal(rt_json_scan_object(text, sizeof(text) - 1, m, NN, NULL), 0);
    for (size_t i = 0; i < NN; i++) {
        if (want[i] == NULL) {
            assert_int_equal(m[i].val_len, 0);
            continue;
        }
        assert_int_equal(m[i].val_len, strlen(want[i]));
        assert_memory_equal(text + m[i].val_off, want[i], m[i].val_len);
        assert_int_equal(text[m[i].key_off], '"');
    }
    /* the twelfth name twice, and the tenth (the empty one) twice: jansson's to decide */
    snprintf(dup, sizeof(dup), "{\"temperature\":1,\"x\":0,\"temperature\":2}");
    assert_int_equal(rt_json_scan_object(dup, strlen(dup), m, NN, NULL), TG_EINVAL);
    snprintf(dup, sizeof(dup), "{\"\":1,\"\":2}");
    assert_int_equal(rt_json_scan_object(dup, strlen(dup), m, NN, NULL), TG_EINVAL);
    /* without the empty name, the same text is the scanner's (a key "" is no wanted name) */
    assert_int_equal(rt_json_scan_object(dup, strlen(dup), m, 9, NULL), 0);
}

/* A string's plain bytes are taken eight at a time: every byte that ends that run (a quote, a
 * backslash escape, a control byte, UTF-8, an invalid byte, DEL, the end of the text) at every
 * offset of a long string, and a string cut at every length, must read as jansson reads it. */
static void test_scan_string_words(void **state)
{
    static const char *const specials[] = {
        "\"", "\\\"", "\\n", "\\u00e9", "\x01", "\x1f", "\x7f", "\xc3\xa9", "\xe2\x82\xac",
        "\xf0\x9f\x98\x80", "\xff", "\xc3", "\x80", " ", "~",
    };
    char buf[128];

    (void)state;
    for (size_t k = 0; k < sizeof(specials) / sizeof(specials[0]); k++) {
        for (size_t at = 0; at <= 24; at++) {
            int n = snprintf(buf, sizeof(buf), "{\"model\":\"%.*s%s%.*s\",\"n\":1}", (int)at,
                             "abcdefghijklmnopqrstuvwxyz", specials[k], 19, "ABCDEFGHIJKLMNOPQRS");

            json_t *j = json_loadb(buf, (size_t)n, 0, NULL);

            assert_true(n > 0 && (size_t)n < sizeof(buf));
            /* strings only: the scanner takes exactly what jansson takes */
            scan_agrees(buf, (size_t)n, j != NULL);
            json_decref(j);
        }
    }
    /* the same long value cut short at every byte: never accepted */
    snprintf(buf, sizeof(buf), "{\"model\":\"%s\"}", "abcdefghijklmnopqrstuvwxyz0123456789");
    for (size_t len = 0; len + 2 < strlen(buf); len++)
        scan_agrees(buf, len, 0);
    scan_agrees(buf, strlen(buf), 1);
}

/* Random byte edits of valid bodies: the scanner never accepts what jansson refuses. Bounded:
 * a fixed seed and a fixed number of rounds. */
static void test_scan_mutations(void **state)
{
    static const char *const seeds[] = {
        "{\"model\":\"gpt-main\",\"stream\":true,\"stream_options\":{\"include_usage\":false},"
        "\"messages\":[{\"role\":\"user\",\"content\":\"h\xc3\xa9llo \\u00e9\"}],\"n\":-12.5}",
        "{\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":8},\"choices\":[null,1,\"x\"]}",
    };
    static const char alphabet[] = "{}[]\":,\\ -0123456789.eEtrufalsn\x01\x80\xc3\xa9\xff u";
    char buf[256];
    unsigned seed = 12345;

    (void)state;
    for (int round = 0; round < 20000; round++) {
        const char *src = seeds[round % 2];
        size_t len = strlen(src);
        int edits = 1 + round % 3;

        memcpy(buf, src, len);
        for (int e = 0; e < edits; e++) {
            size_t at;

            seed = seed * 1103515245u + 12345u;
            at = (seed >> 8) % len;
            seed = seed * 1103515245u + 12345u;
            buf[at] = alphabet[(seed >> 8) % (sizeof(alphabet) - 1)];
        }
        scan_agrees(buf, len, -1);
    }
}

static void test_json_edges(void **state)
{
    struct rt_usage u;

    (void)state;
    /* reals and exponents are not integer counts; -0 is an integer */
    json_case(RT_API_CHAT, "{\"usage\":{\"prompt_tokens\":12.0,\"completion_tokens\":1e1}}", 0, 0,
              0);
    json_case(RT_API_CHAT, "{\"usage\":{\"prompt_tokens\":-0,\"completion_tokens\":3}}", 1, 0, 3);
    /* a duplicated member: the last one counts, as in jansson */
    json_case(RT_API_CHAT,
              "{\"usage\":{\"prompt_tokens\":1},\"usage\":{\"prompt_tokens\":2,"
              "\"completion_tokens\":5}}",
              1, 2, 5);
    json_case(RT_API_CHAT, "{\"usage\":{\"prompt_tokens\":1,\"prompt_tokens\":4}}", 1, 4, 0);
    /* usage below the top level is not the response's usage */
    json_case(RT_API_CHAT, "{\"x\":{\"usage\":{\"prompt_tokens\":9}}}", 0, 0, 0);
    json_case(RT_API_CHAT,
              " {\n \"usage\" : { \"completion_tokens\" : 8 , \"prompt_tokens\" : 12 } }\r\n", 1,
              12, 8);
    json_case(RT_API_MESSAGES, "{\"usage\":{\"output_tokens\":2,\"cache_read_input_tokens\":3}}", 1,
              3, 2);
    /* not JSON: trailing bytes, bad UTF-8, a control character in a string */
    assert_int_equal(rt_usage_from_json(RT_API_CHAT, "{\"usage\":{}} x", 14, &u), TG_EPROTO);
    assert_int_equal(rt_usage_from_json(RT_API_CHAT, "{\"a\":\"\xff\"}", 9, &u), TG_EPROTO);
    assert_int_equal(rt_usage_from_json(RT_API_CHAT, "{\"a\":\"\x01\"}", 9, &u), TG_EPROTO);
    assert_int_equal(u.found, 0);
}

/* The cheap test before a stream line is parsed for usage (memchr-driven; it replaced memmem):
 * the word anywhere, at either end, after a false start; never past len. */
static void test_usage_mentioned(void **state)
{
    static const char buf[] = "usage, uusage, usag|usage";

    (void)state;
    assert_true(rt_usage_mentioned("usage", 5));
    assert_true(rt_usage_mentioned("{\"usage\":{}}", 12));
    assert_true(rt_usage_mentioned("uuuusage", 8));
    assert_true(rt_usage_mentioned("xx usage", 8));
    assert_false(rt_usage_mentioned("usag", 4));
    assert_false(rt_usage_mentioned("usage", 4));
    assert_false(rt_usage_mentioned("", 0));
    assert_false(rt_usage_mentioned("u sage usa ge", 13));
    assert_true(rt_usage_mentioned(buf + 21, 4) == 0);      /* "sage" only */
    assert_true(rt_usage_mentioned(buf + 15, 10));          /* "usag|usage" */
    assert_false(rt_usage_mentioned(buf + 15, 9));          /* "usag|usag" */
}

/* The word search behind it and behind the stream's [DONE] test: any word, at either end,
 * after false starts of its first byte, never past len; a word longer than the data is absent. */
static void test_word_in(void **state)
{
    static const char done[] = "data: [DONE]\n\n";
    static const char fake[] = "data: {\"c\":\"[[DONE [DON\"}[DONE]";

    (void)state;
    assert_true(rt_word_in(done, sizeof(done) - 1, "[DONE]", 6));
    assert_false(rt_word_in(done, 11, "[DONE]", 6));        /* cut before the ']' */
    assert_false(rt_word_in(fake, sizeof(fake) - 7, "[DONE]", 6));
    assert_true(rt_word_in(fake, sizeof(fake) - 1, "[DONE]", 6)); /* only at the very end */
    assert_true(rt_word_in("abc", 3, "c", 1));
    assert_false(rt_word_in("abc", 2, "c", 1));
    assert_true(rt_word_in("abc", 3, "", 0));
    assert_false(rt_word_in("ab", 2, "abc", 3));
    assert_false(rt_word_in("", 0, "a", 1));
}

/* A naive reference: data[0, len) holds word[0, wlen). */
static int naive_word_in(const char *data, size_t len, const char *word, size_t wlen)
{
    for (size_t i = 0; i + wlen <= len; i++) {
        if (memcmp(data + i, word, wlen) == 0)
            return 1;
    }
    return 0;
}

/* rt_word_at_in by every byte of the word against the naive search: every length to 40, each
 * word (and each cut or near miss of one) planted at every offset, over filler made of the
 * words' own bytes so false starts abound. The data sits at the end of its own allocation, so
 * under ASan a read past len is reported. */
static void test_word_at_in(void **state)
{
    static const char alpha[] = "usage[DONE]x\"";
    static const char *const words[] = {"usage", "[DONE]"};
    static const char *const plants[] = {"usage", "[DONE]", "usag", "[DONE", "sage", "DONE]",
                                         "usgae", "[D", "uusage", "[[DONE]"};
    uint64_t r = 0x2545f4914f6cdd1dull;

    (void)state;
    for (size_t len = 0; len <= 40; len++) {
        for (size_t pl = 0; pl < sizeof(plants) / sizeof(plants[0]); pl++) {
            size_t plen = strlen(plants[pl]);

            for (size_t at = 0; at + plen <= len; at++) {
                for (int fill = 0; fill < 3; fill++) {
                    char *d = malloc(len > 0 ? len : 1);

                    assert_non_null(d);
                    for (size_t i = 0; i < len; i++) {
                        r ^= r << 13;
                        r ^= r >> 7;
                        r ^= r << 17;
                        d[i] = fill == 0 ? 'x' : fill == 1 ? "gD[u"[r % 4] : alpha[r % 13];
                    }
                    memcpy(d + at, plants[pl], plen);
                    for (size_t w = 0; w < 2; w++) {
                        size_t wl = strlen(words[w]);
                        int want = naive_word_in(d, len, words[w], wl);

                        for (size_t k = 0; k < wl; k++) {
                            if (rt_word_at_in(d, len, words[w], wl, k) != want)
                                fail_msg("len %zu, \"%s\" at %zu, fill %d: %s by byte %zu: "
                                         "want %d",
                                         len, plants[pl], at, fill, words[w], k, want);
                        }
                    }
                    free(d);
                }
            }
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_json),
        cmocka_unit_test(test_usage_mentioned),
        cmocka_unit_test(test_word_in),
        cmocka_unit_test(test_word_at_in),
        cmocka_unit_test(test_cost),
        cmocka_unit_test(test_estimate_input),
        cmocka_unit_test(test_cost_per_usage_shape),
        cmocka_unit_test(test_stream_usage_parts),
        cmocka_unit_test(test_streams),
        cmocka_unit_test(test_stream_without_usage_and_long_lines),
        cmocka_unit_test(test_line_cap_any_split),
        cmocka_unit_test(test_random_streams),
        cmocka_unit_test(test_huge_token_counts_capped),
        cmocka_unit_test(test_scan_matches_jansson),
        cmocka_unit_test(test_scan_string_words),
        cmocka_unit_test(test_scan_many_names),
        cmocka_unit_test(test_scan_mutations),
        cmocka_unit_test(test_json_edges),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
