/* usage: token usage of a provider response, and its cost.
 *
 * From a whole JSON body (rt_usage_from_json) or incrementally from an SSE stream
 * (struct rt_sse_usage: feed it the bytes as they arrive, split anywhere). Understood shapes:
 * - OpenAI chat completions / completions: usage.prompt_tokens (of them
 *   prompt_tokens_details.cached_tokens from the cache), usage.completion_tokens (of them
 *   completion_tokens_details.reasoning_tokens); in a stream, the chunk that carries "usage"
 *   (stream_options.include_usage).
 * - OpenAI embeddings: usage.prompt_tokens (completion 0).
 * - OpenAI responses: usage.input_tokens (input_tokens_details.cached_tokens),
 *   usage.output_tokens (output_tokens_details.reasoning_tokens); in a stream, the
 *   response.completed event's response.usage.
 * - Anthropic messages: usage.input_tokens + cache_creation_input_tokens +
 *   cache_read_input_tokens are the prompt tokens, usage.output_tokens; in a stream,
 *   message_start's message.usage and message_delta's usage (cumulative: the last value wins).
 * Missing or malformed usage leaves found = 0 (cost 0); it is never an error for the request.
 * Counts are capped at RT_USAGE_TOKENS_MAX (a garbage count cannot overflow a sum).
 *
 * Cost: integer nano-USD from the deployment's prices in femto-USD per token (config.h,
 * prices.h), each kind of token at its own price:
 *   cost_nusd = ((prompt - cache_read - cache_creation) * input + cache_read * cache_read_price
 *              + cache_creation * cache_creation_price + (completion - reasoning) * output
 *              + reasoning * reasoning_price) / 1,000,000   (128-bit, floored, saturated at
 *   INT64_MAX); a cache price not given is the input price, a reasoning price not given the
 *   output price, an input or output price not given 0.
 *
 * Threads: a struct rt_sse_usage belongs to one stream, used by one thread at a time. */
#ifndef RT_USAGE_H
#define RT_USAGE_H

#include <stddef.h>
#include <jansson.h>
#include <stdint.h>

#include "api.h"
#include "config.h"
#include "jbound.h"

#define RT_SSE_LINE_MAX 32768 /* default SSE line buffer, bytes; longer lines are skipped */

/* Token counts are capped here: a provider cannot report more (a larger value is taken as this
 * one), so sums of counts (prompt + completion, the tpm windows) never overflow. */
#define RT_USAGE_TOKENS_MAX 1000000000000ll /* 10^12 tokens per count */

struct rt_usage {
    int64_t prompt_tokens;         /* every input token, cached ones included */
    int64_t completion_tokens;     /* every output token, reasoning included */
    int64_t cache_read_tokens;     /* of prompt_tokens: read from the provider's prompt cache */
    int64_t cache_creation_tokens; /* of prompt_tokens: written to it (Anthropic) */
    int64_t reasoning_tokens;      /* of completion_tokens: reasoning */
    int found;                     /* 1 when the response carried usage */
};

/* rt_usage_read: the usage object of an answer of the given API (a JSON object, borrowed) into
 * *out (zeroed first). Returns 1 when it carried a count, else 0. Any thread. */
int rt_usage_read(enum rt_api api, const json_t *usage, struct rt_usage *out);

/* rt_usage_from_json: usage from a complete response body of the given API (what the provider
 * returned, before any translation). Fills *out (zeroed first). Returns 0, or TG_EPROTO when the
 * body is not a JSON object (out stays zero). Any thread. */
int rt_usage_from_json(enum rt_api api, const char *body, size_t len, struct rt_usage *out);

/* rt_usage_cost_nusd: cost in nano-USD of u at dep's prices (borrowed). Any thread. */
int64_t rt_usage_cost_nusd(const struct rt_deployment_conf *dep, const struct rt_usage *u);

/* rt_usage_estimate_input: an estimate of the input tokens of a request body (JSON text),
 * without a tokenizer, for router_settings.enable_pre_call_checks. Only the text inside JSON
 * strings counts: a run of letters is one token per 8 letters begun, a run of digits one per 3,
 * a run of other visible ASCII one per 2, a character outside Latin scripts (3 and 4 byte UTF-8:
 * CJK, emoji, ...) one each; whitespace none. BPE tokenizers give about 1.3 tokens per English
 * word, so for prose and code this stays below the true count: a deployment is skipped only
 * when the request is well past its window (the provider's own context-window error, and the
 * context_window_fallbacks it leads to, still decide the cases in between). One pass, no
 * allocation. Any thread. */
int64_t rt_usage_estimate_input(const char *body, size_t len);

/* Incremental SSE usage parser. Caller storage; fields are private except through the
 * functions below. */
struct rt_sse_usage {
    enum rt_api api;
    char *line;        /* owned buffer for a line split across feeds; NULL until one is (lines
                        * that end inside one feed are parsed in place); grows by doubling up to
                        * line_cap bytes as the split line needs */
    size_t line_alloc; /* bytes allocated at line */
    size_t line_cap;   /* longest line parsed is line_cap - 1 bytes; 0 once finished */
    size_t line_len;
    int skipping;           /* 1 while discarding the rest of an over-long line */
    int last_cr;            /* previous byte was '\r' (CRLF handled as one end of line) */
    uint64_t lines;         /* complete lines seen */
    uint64_t lines_skipped; /* lines longer than line_cap, discarded */
    uint64_t events_bad;    /* data lines that looked like usage but did not parse */
    struct rt_usage usage;  /* best usage known so far */
};

/* rt_sse_usage_init: prepare a parser for api whose lines may be up to line_cap - 1 bytes
 * (RT_SSE_LINE_MAX when 0). Allocates nothing: a line buffer is allocated only when a line is
 * split across two feeds (a caller feeding whole events never needs it), as large as that line
 * needs (at most line_cap bytes). Returns
 * 0. Release with rt_sse_usage_fini. */
int rt_sse_usage_init(struct rt_sse_usage *p, enum rt_api api, size_t line_cap);

/* rt_sse_usage_fini: free the line buffer. Safe on a zeroed or finished parser. */
void rt_sse_usage_fini(struct rt_sse_usage *p);

/* rt_word_in: 1 when data[0, len) holds word[0, wlen) (1 for an empty word). memchr for its
 * first byte, then a compare: not memmem, which costs more than it saves on the short lines of
 * a stream. rt_word_at_in(data, len, word, wlen, 0). */
int rt_word_in(const char *data, size_t len, const char *word, size_t wlen);

/* rt_word_at_in: rt_word_in, searching for word[at] (at < wlen) rather than its first byte:
 * the word's rarest byte in the data at hand means fewer false starts. A stream's content chunk
 * is tested for "usage" by its 'g' and for "[DONE]" by its 'D'. */
int rt_word_at_in(const char *data, size_t len, const char *word, size_t wlen, size_t at);

/* rt_usage_mentioned: 1 when data[0, len) holds the word "usage" (a cheap test before a JSON
 * parse). */
int rt_usage_mentioned(const char *data, size_t len);

/* rt_sse_usage_feed: consume len bytes of the stream (any split: mid-line, mid-UTF-8, CRLF split
 * across calls). Lines that end are parsed at once; "data:" lines that carry usage update
 * p->usage. Never fails; returns the number of complete lines seen so far. */
uint64_t rt_sse_usage_feed(struct rt_sse_usage *p, const char *data, size_t len);

/* rt_sse_usage_get: the usage known so far (also after a stream that ended early). */
void rt_sse_usage_get(const struct rt_sse_usage *p, struct rt_usage *out);

/* ---- strict JSON scanner (no allocation) ----
 * Used on the request path instead of a full parse when only a few members are needed: it
 * validates the whole text and records where chosen members of the top-level object are, as
 * byte spans into the text. It is stricter than jansson's json_loadb (flags 0): whenever it
 * answers 0 the text is one JSON object that jansson accepts with the same member values; for
 * anything it does not handle (depth over RT_JSON_SCAN_DEPTH_MAX, integers over 18 digits,
 * numbers with an exponent, over-long reals, a wanted member present twice) it answers
 * TG_EINVAL and the caller uses jansson, which has the final word (error text included). */
#define RT_JSON_SCAN_DEPTH_MAX 64 /* nesting levels handled; deeper goes to the full parser */

struct rt_json_member {
    const char *name; /* in: member name (no escapes), borrowed */
    size_t key_off;   /* out: offset of the name's opening quote */
    size_t val_off;   /* out: offset of the value's first byte */
    size_t val_len;   /* out: value length in bytes; 0 when the member is absent */
};

/* rt_json_scan_object: validate text[0..len) as one JSON object and locate the wanted members
 * m[0..nm) of its top level (names matched byte for byte against unescaped keys; a key with an
 * escape never matches and, if it could equal a wanted name, sends the caller to jansson).
 * *close_off (may be NULL) receives the offset of the object's closing brace. Returns 0,
 * or TG_EINVAL (not handled here: use a full parser). Any thread; text borrowed. */
int rt_json_scan_object(const char *text, size_t len, struct rt_json_member *m, size_t nm,
                        size_t *close_off);

/* rt_json_is_true: the member's value is the literal true. */
int rt_json_is_true(const char *text, const struct rt_json_member *m);

/* rt_json_plain_string: when the member's value is a string without escapes, its bytes (between
 * the quotes) through *s and *n, and 1; else 0. Borrowed from text. */
int rt_json_plain_string(const char *text, const struct rt_json_member *m, const char **s,
                         size_t *n);

#endif
