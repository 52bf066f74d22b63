/* libFuzzer target for usage (router-svc/src/usage.h): token usage from an SSE stream fed in
 * pieces (rt_sse_usage_*) and from a whole JSON body (rt_usage_from_json).
 *
 * The input is a provider's stream (or body). For every rt_api value and two line buffer sizes
 * (the default and a small one picked from the input's hash, so that the over-long-line path
 * runs too) the stream is fed whole, byte by byte and in pseudo-random pieces whose cut points
 * come from the input's own bytes.
 *
 * Properties (abort on violation):
 *  - split-independence: usage, lines, lines skipped and bad events are the same however the
 *    bytes were cut; rt_sse_usage_feed returns the line count, which never goes down and is the
 *    number of line ends (CR, LF, CRLF as one); skipped lines and bad events are among them;
 *  - counts stay within 0..RT_USAGE_TOKENS_MAX and are 0 when no usage was found;
 *  - rt_usage_from_json answers 0 or TG_EPROTO (and then a zeroed usage); its answer equals the
 *    one computed here with jansson from the rules in usage.h (the module's no-tree fast path
 *    must agree with the full parse it stands in for);
 *  - rt_word_in and rt_word_at_in by each byte of the word (the stream's "usage" and "[DONE]"
 *    tests) agree with a byte-wise search for those words and for a word cut from the input,
 *    over the whole input and over a sub-range picked from its hash (never reading past the range: ASan sees the exact size). */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "tg_err.h"
#include "usage.h"

#define FUZZ_BYTEWISE_MAX 4096 /* inputs up to this size are also fed one byte at a time */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const enum rt_api apis[] = {RT_API_CHAT, RT_API_EMBEDDINGS, RT_API_RESPONSES,
                                   RT_API_MESSAGES};

static void fail(const char *what, int api, const struct rt_usage *a, const struct rt_usage *b)
{
    fprintf(stderr, "sse_usage_fuzz: %s (api %d)", what, api);
    if (a != NULL && b != NULL)
        fprintf(stderr, ": found %d/%d prompt %lld/%lld completion %lld/%lld", a->found, b->found,
                (long long)a->prompt_tokens, (long long)b->prompt_tokens,
                (long long)a->completion_tokens, (long long)b->completion_tokens);
    fprintf(stderr, "\n");
    abort();
}

static int usage_equal(const struct rt_usage *a, const struct rt_usage *b)
{
    return a->found == b->found && a->prompt_tokens == b->prompt_tokens &&
           a->completion_tokens == b->completion_tokens;
}

static void usage_sane(int api, const struct rt_usage *u)
{
    if (u->prompt_tokens < 0 || u->prompt_tokens > RT_USAGE_TOKENS_MAX ||
        u->completion_tokens < 0 || u->completion_tokens > RT_USAGE_TOKENS_MAX)
        fail("count outside 0..RT_USAGE_TOKENS_MAX", api, u, u);
    if (!u->found && (u->prompt_tokens != 0 || u->completion_tokens != 0))
        fail("counts without found", api, u, u);
}

struct sse_result {
    struct rt_usage usage;
    uint64_t lines, skipped, bad;
};

static uint64_t next_rand(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);

    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Feed in pieces of 1..max_piece bytes (max_piece 0: whole). */
static void feed(enum rt_api api, size_t line_cap, const char *s, size_t n, size_t max_piece,
                 uint64_t seed, struct sse_result *r)
{
    struct rt_sse_usage p;
    size_t at = 0;
    uint64_t lines = 0;

    rt_sse_usage_init(&p, api, line_cap);
    while (at < n) {
        size_t piece = max_piece == 0 ? n : 1 + (size_t)(next_rand(&seed) % max_piece);
        uint64_t l;

        if (piece > n - at)
            piece = n - at;
        l = rt_sse_usage_feed(&p, s + at, piece);
        if (l < lines || l != p.lines)
            fail("feed's line count went down or differs from the parser's", api, NULL, NULL);
        lines = l;
        at += piece;
    }
    rt_sse_usage_get(&p, &r->usage);
    r->lines = p.lines;
    r->skipped = p.lines_skipped;
    r->bad = p.events_bad;
    rt_sse_usage_fini(&p);
    /* a finished parser ignores further bytes */
    if (rt_sse_usage_feed(&p, "data: x\n", 8) != r->lines)
        fail("a finished parser counted a line", api, NULL, NULL);
    usage_sane((int)api, &r->usage);
}

/* Line ends in s[0..n) as usage.h counts them: CR, LF, and CRLF as one. */
static uint64_t line_ends(const char *s, size_t n)
{
    uint64_t k = 0;

    for (size_t i = 0; i < n; i++) {
        if (s[i] == '\r' || (s[i] == '\n' && (i == 0 || s[i - 1] != '\r')))
            k++;
    }
    return k;
}

static void same(enum rt_api api, const struct sse_result *a, const struct sse_result *b,
                 const char *how)
{
    if (!usage_equal(&a->usage, &b->usage) || a->lines != b->lines || a->skipped != b->skipped ||
        a->bad != b->bad) {
        fprintf(stderr, "fed %s: lines %llu/%llu skipped %llu/%llu bad %llu/%llu\n", how,
                (unsigned long long)a->lines, (unsigned long long)b->lines,
                (unsigned long long)a->skipped, (unsigned long long)b->skipped,
                (unsigned long long)a->bad, (unsigned long long)b->bad);
        fail("stream outcome depends on how the bytes were split", (int)api, &a->usage, &b->usage);
    }
}

/* usage.h's rules over a jansson tree: a count is a non-negative integer, capped. */
static int64_t ref_count(const json_t *usage, const char *name, int *present)
{
    const json_t *v = json_object_get(usage, name);

    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return 0;
    *present = 1;
    return json_integer_value(v) > RT_USAGE_TOKENS_MAX ? RT_USAGE_TOKENS_MAX
                                                       : (int64_t)json_integer_value(v);
}

static int64_t ref_add(int64_t a, int64_t b)
{
    return a + b > RT_USAGE_TOKENS_MAX ? RT_USAGE_TOKENS_MAX : a + b;
}

static int ref_from_json(enum rt_api api, const char *s, size_t n, struct rt_usage *out)
{
    json_error_t jerr;
    json_t *root;
    const json_t *u;
    int present = 0;

    memset(out, 0, sizeof(*out));
    root = n > 0 ? json_loadb(s, n, 0, &jerr) : NULL;
    if (!json_is_object(root)) {
        json_decref(root);
        return TG_EPROTO;
    }
    u = json_object_get(root, "usage");
    if (json_is_object(u)) {
        if (api == RT_API_MESSAGES) {
            out->prompt_tokens =
                ref_add(ref_add(ref_count(u, "input_tokens", &present),
                                ref_count(u, "cache_creation_input_tokens", &present)),
                        ref_count(u, "cache_read_input_tokens", &present));
            out->completion_tokens = ref_count(u, "output_tokens", &present);
        } else if (api == RT_API_RESPONSES) {
            out->prompt_tokens = ref_count(u, "input_tokens", &present);
            out->completion_tokens = ref_count(u, "output_tokens", &present);
        } else {
            out->prompt_tokens = ref_count(u, "prompt_tokens", &present);
            out->completion_tokens = ref_count(u, "completion_tokens", &present);
        }
        if (present) {
            out->found = 1;
        } else {
            out->prompt_tokens = 0;
            out->completion_tokens = 0;
        }
    }
    json_decref(root);
    return 0;
}

/* The reference for rt_word_in: every position compared byte by byte. */
static int ref_word_in(const char *s, size_t n, const char *w, size_t wl)
{
    if (wl == 0)
        return 1;
    for (size_t i = 0; i + wl <= n; i++) {
        if (memcmp(s + i, w, wl) == 0)
            return 1;
    }
    return 0;
}

static void check_words(const char *s, size_t n, uint64_t seed)
{
    size_t wl = n > 0 ? 1 + (size_t)(seed % 8) : 0;
    size_t wat = n > 0 ? (size_t)((seed >> 8) % n) : 0;

    if (wat + wl > n)
        wl = n - wat;
    if (rt_word_in(s, n, "usage", 5) != ref_word_in(s, n, "usage", 5) ||
        rt_usage_mentioned(s, n) != ref_word_in(s, n, "usage", 5))
        fail("rt_word_in: \"usage\" differs from a byte-wise search", -1, NULL, NULL);
    if (rt_word_in(s, n, "[DONE]", 6) != ref_word_in(s, n, "[DONE]", 6))
        fail("rt_word_in: \"[DONE]\" differs from a byte-wise search", -1, NULL, NULL);
    if (n > 0 && !rt_word_in(s, n, s + wat, wl))
        fail("rt_word_in: a word cut from the input is not found in it", -1, NULL, NULL);
    if (n > 1 && rt_word_in(s + 1, n - 1, s + wat, wl) != ref_word_in(s + 1, n - 1, s + wat, wl))
        fail("rt_word_in: an input word differs from a byte-wise search", -1, NULL, NULL);
    for (size_t at = 0; at < 6; at++) {
        if ((at < 5 && rt_word_at_in(s, n, "usage", 5, at) != ref_word_in(s, n, "usage", 5)) ||
            rt_word_at_in(s, n, "[DONE]", 6, at) != ref_word_in(s, n, "[DONE]", 6))
            fail("rt_word_at_in differs from a byte-wise search", -1, NULL, NULL);
        if (at < wl && n > 1 &&
            rt_word_at_in(s + 1, n - 1, s + wat, wl, at) != ref_word_in(s + 1, n - 1, s + wat, wl))
            fail("rt_word_at_in: an input word differs from a byte-wise search", -1, NULL, NULL);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *s = (const char *)data;
    uint64_t seed = 0xcbf29ce484222325ull;
    size_t caps[2];

    for (size_t i = 0; i < size; i++)
        seed = (seed ^ data[i]) * 0x100000001b3ull;
    caps[0] = 0;                        /* RT_SSE_LINE_MAX */
    caps[1] = 8 + (size_t)(seed % 300); /* small: long lines are skipped */

    check_words(s, size, seed);
    if (size > 2) {
        size_t from = (size_t)(seed % size), len = (size_t)((seed >> 16) % (size - from));

        check_words(s + from, len, seed >> 24);
    }

    for (size_t a = 0; a < sizeof(apis) / sizeof(apis[0]); a++) {
        enum rt_api api = apis[a];
        struct rt_usage u, ref;
        int rc, rrc;

        for (size_t c = 0; c < 2; c++) {
            struct sse_result whole, other;

            feed(api, caps[c], s, size, 0, 0, &whole);
            if (whole.lines != line_ends(s, size) || whole.skipped > whole.lines ||
                whole.bad > whole.lines)
                fail("line counts are not the stream's line ends", (int)api, NULL, NULL);
            if (size <= FUZZ_BYTEWISE_MAX) {
                feed(api, caps[c], s, size, 1, 0, &other);
                same(api, &whole, &other, "byte by byte");
            }
            feed(api, caps[c], s, size, 7, seed, &other);
            same(api, &whole, &other, "in pieces of 1..7");
            feed(api, caps[c], s, size, 500, seed + 1, &other);
            same(api, &whole, &other, "in pieces of 1..500");
        }

        rc = rt_usage_from_json(api, size > 0 ? s : NULL, size, &u);
        if (rc != 0 && rc != TG_EPROTO)
            fail("rt_usage_from_json: unexpected return code", (int)api, NULL, NULL);
        if (rc != 0 && (u.found || u.prompt_tokens != 0 || u.completion_tokens != 0))
            fail("rt_usage_from_json: usage left on an error", (int)api, &u, &u);
        usage_sane((int)api, &u);
        rrc = ref_from_json(api, s, size, &ref);
        if (rc != rrc || !usage_equal(&u, &ref))
            fail(rc != rrc ? "rt_usage_from_json accepts what jansson does not, or the reverse"
                           : "rt_usage_from_json differs from the full parse",
                 (int)api, &u, &ref);
    }
    return 0;
}
