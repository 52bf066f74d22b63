#include "usage.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "tg_err.h"
#include "tg_str.h"

/* A non-negative integer member (capped at RT_USAGE_TOKENS_MAX), or 0. */
static int64_t int_member(const json_t *obj, const char *name, int *present)
{
    const json_t *v = json_object_get(obj, name);

    if (v == NULL || !json_is_integer(v) || json_integer_value(v) < 0)
        return 0;
    if (present != NULL)
        *present = 1;
    if (json_integer_value(v) > RT_USAGE_TOKENS_MAX)
        return RT_USAGE_TOKENS_MAX;
    return (int64_t)json_integer_value(v);
}

/* Sum of counts, capped like each count. */
static int64_t tokens_add(int64_t a, int64_t b)
{
    return a + b > RT_USAGE_TOKENS_MAX ? RT_USAGE_TOKENS_MAX : a + b;
}

/* Where one API writes its counts. Input and output are totals (cached and reasoning tokens
 * included) except Anthropic's input_tokens, which leaves out the cache's reads and writes. */
struct usage_shape {
    const char *input;
    const char *output;
    const char *input_details;  /* object with the cached part of input (OpenAI), or NULL */
    const char *cached;         /* ... its member */
    const char *output_details; /* object with the reasoning part of output, or NULL */
    const char *reasoning;      /* ... its member */
    const char *cache_read;     /* top-level counts added to input (Anthropic), or NULL */
    const char *cache_creation;
    const char *creation_part; /* top-level count of the cache's writes, a part of input
                                * (LiteLLM's chat usage), or NULL */
};

static const struct usage_shape shapes[] = {
    [RT_API_CHAT] = {"prompt_tokens", "completion_tokens", "prompt_tokens_details", "cached_tokens",
                     "completion_tokens_details", "reasoning_tokens", NULL, NULL,
                     "cache_creation_input_tokens"},
    [RT_API_EMBEDDINGS] = {"prompt_tokens", "completion_tokens", "prompt_tokens_details",
                           "cached_tokens", NULL, NULL, NULL, NULL, NULL},
    [RT_API_RESPONSES] = {"input_tokens", "output_tokens", "input_tokens_details", "cached_tokens",
                          "output_tokens_details", "reasoning_tokens", NULL, NULL, NULL},
    [RT_API_MESSAGES] = {"input_tokens", "output_tokens", NULL, NULL, NULL, NULL,
                         "cache_read_input_tokens", "cache_creation_input_tokens", NULL},
};

static const struct usage_shape *shape_of(enum rt_api api)
{
    return (unsigned)api < sizeof(shapes) / sizeof(shapes[0]) ? &shapes[api] : &shapes[RT_API_CHAT];
}

/* The parts never exceed their totals (a provider's garbage cannot make a cost negative). */
static void usage_clamp(struct rt_usage *u)
{
    if (u->cache_read_tokens > u->prompt_tokens)
        u->cache_read_tokens = u->prompt_tokens;
    if (u->cache_creation_tokens > u->prompt_tokens - u->cache_read_tokens)
        u->cache_creation_tokens = u->prompt_tokens - u->cache_read_tokens;
    if (u->reasoning_tokens > u->completion_tokens)
        u->reasoning_tokens = u->completion_tokens;
}

int rt_usage_read(enum rt_api api, const json_t *usage, struct rt_usage *out)
{
    const struct usage_shape *sh = shape_of(api);
    int present = 0, unused = 0;

    if (!json_is_object(usage))
        return 0;
    memset(out, 0, sizeof(*out));
    out->prompt_tokens = int_member(usage, sh->input, &present);
    out->completion_tokens = int_member(usage, sh->output, &present);
    if (sh->input_details != NULL)
        out->cache_read_tokens =
            int_member(json_object_get(usage, sh->input_details), sh->cached, &unused);
    if (sh->output_details != NULL)
        out->reasoning_tokens =
            int_member(json_object_get(usage, sh->output_details), sh->reasoning, &unused);
    if (sh->creation_part != NULL)
        out->cache_creation_tokens = int_member(usage, sh->creation_part, &unused);
    if (sh->cache_read != NULL) {
        out->cache_read_tokens = int_member(usage, sh->cache_read, &present);
        out->cache_creation_tokens = int_member(usage, sh->cache_creation, &present);
        out->prompt_tokens = tokens_add(tokens_add(out->prompt_tokens, out->cache_read_tokens),
                                        out->cache_creation_tokens);
    }
    usage_clamp(out);
    if (present)
        out->found = 1;
    return present;
}

/* A usage count from the bytes of a scanned member, with int_member's rules: an integer
 * (not a real) >= 0, capped at RT_USAGE_TOKENS_MAX; anything else is absent (0). The scanner
 * has validated the number and bounded it to 18 digits. */
static int64_t span_count(const char *text, const struct rt_json_member *m, int *present)
{
    const char *v = text + m->val_off;
    size_t n = m->val_len;
    size_t i = 0;
    int neg = 0;
    int64_t x = 0;

    if (n == 0)
        return 0;
    if (v[0] == '-') {
        neg = 1;
        i = 1;
    }
    if (i >= n || v[i] < '0' || v[i] > '9')
        return 0;
    for (; i < n; i++) {
        if (v[i] < '0' || v[i] > '9')
            return 0; /* a fraction: a real, not an integer */
        x = x * 10 + (v[i] - '0');
    }
    if (neg && x != 0)
        return 0;
    *present = 1;
    return x > RT_USAGE_TOKENS_MAX ? RT_USAGE_TOKENS_MAX : x;
}

/* One count of a nested object scanned from text (a member of the usage object). */
static int64_t nested_count(const char *text, const struct rt_json_member *obj, const char *name)
{
    struct rt_json_member m[1] = {{name, 0, 0, 0}};
    int unused = 0;

    if (obj->val_len == 0 || text[obj->val_off] != '{' ||
        rt_json_scan_object(text + obj->val_off, obj->val_len, m, 1, NULL) != 0)
        return 0;
    return span_count(text + obj->val_off, &m[0], &unused);
}

/* rt_usage_from_json without building a tree: the scanner validates the whole body and finds
 * "usage"; its members are read from the bytes. *out is zeroed first (no usage object: zeros).
 * Returns 0 (done), or TG_EINVAL when the body is outside what the scanner handles (the caller
 * parses it with jansson). */
static int usage_scan(enum rt_api api, const char *body, size_t len, struct rt_usage *out)
{
    const struct usage_shape *sh = shape_of(api);
    struct rt_json_member top[1] = {{"usage", 0, 0, 0}};
    struct rt_json_member um[6];
    const char *ub;
    int present = 0, unused = 0;
    size_t nm = 2;

    memset(out, 0, sizeof(*out));
    if (rt_json_scan_object(body, len, top, 1, NULL) != 0)
        return TG_EINVAL;
    if (top[0].val_len == 0 || body[top[0].val_off] != '{')
        return 0;
    memset(um, 0, sizeof(um));
    um[0].name = sh->input;
    um[1].name = sh->output;
    if (sh->input_details != NULL)
        um[nm++].name = sh->input_details; /* um[2] */
    if (sh->output_details != NULL)
        um[nm++].name = sh->output_details;
    if (sh->cache_read != NULL) {
        um[nm++].name = sh->cache_read;
        um[nm++].name = sh->cache_creation;
    }
    if (sh->creation_part != NULL)
        um[nm++].name = sh->creation_part;
    ub = body + top[0].val_off;
    if (rt_json_scan_object(ub, top[0].val_len, um, nm, NULL) != 0)
        return TG_EINVAL;
    out->prompt_tokens = span_count(ub, &um[0], &present);
    out->completion_tokens = span_count(ub, &um[1], &present);
    for (size_t i = 2; i < nm; i++) {
        if (um[i].name == sh->input_details)
            out->cache_read_tokens = nested_count(ub, &um[i], sh->cached);
        else if (um[i].name == sh->output_details)
            out->reasoning_tokens = nested_count(ub, &um[i], sh->reasoning);
        else if (um[i].name == sh->cache_read)
            out->cache_read_tokens = span_count(ub, &um[i], &present);
        else if (um[i].name == sh->creation_part)
            out->cache_creation_tokens = span_count(ub, &um[i], &unused);
        else
            out->cache_creation_tokens = span_count(ub, &um[i], &present);
    }
    if (sh->cache_read != NULL)
        out->prompt_tokens = tokens_add(tokens_add(out->prompt_tokens, out->cache_read_tokens),
                                        out->cache_creation_tokens);
    usage_clamp(out);
    if (present)
        out->found = 1;
    return 0;
}

int rt_usage_from_json(enum rt_api api, const char *body, size_t len, struct rt_usage *out)
{
    json_t *root;
    json_error_t jerr;

    memset(out, 0, sizeof(*out));
    if (body == NULL || len == 0)
        return TG_EPROTO;
    if (usage_scan(api, body, len, out) == 0)
        return 0;
    memset(out, 0, sizeof(*out));
    root = rt_json_load_bounded(body, len, RT_JSON_ANSWER_MAX_DEPTH, RT_JSON_ANSWER_MAX_ELEMENTS,
                                &jerr);
    if (root == NULL)
        return TG_EPROTO;
    if (!json_is_object(root)) {
        json_decref(root);
        return TG_EPROTO;
    }
    rt_usage_read(api, json_object_get(root, "usage"), out);
    json_decref(root);
    return 0;
}

/* A price to charge at: the given one, else fallback, else 0. */
static uint64_t price_or(int64_t p, int64_t fallback)
{
    if (p >= 0)
        return (uint64_t)p;
    return fallback >= 0 ? (uint64_t)fallback : 0;
}

int64_t rt_usage_cost_nusd(const struct rt_deployment_conf *dep, const struct rt_usage *u)
{
    const struct rt_model_price *pr;
    unsigned __int128 fusd;
    unsigned __int128 nusd;
    struct rt_usage c;

    if (dep == NULL || u == NULL || u->prompt_tokens < 0 || u->completion_tokens < 0 ||
        u->cache_read_tokens < 0 || u->cache_creation_tokens < 0 || u->reasoning_tokens < 0)
        return 0;
    pr = &dep->price;
    c = *u;
    usage_clamp(&c);
    fusd = (unsigned __int128)(uint64_t)(c.prompt_tokens - c.cache_read_tokens -
                                         c.cache_creation_tokens) *
               price_or(pr->input, -1) +
           (unsigned __int128)(uint64_t)c.cache_read_tokens * price_or(pr->cache_read, pr->input) +
           (unsigned __int128)(uint64_t)c.cache_creation_tokens *
               price_or(pr->cache_creation, pr->input) +
           (unsigned __int128)(uint64_t)(c.completion_tokens - c.reasoning_tokens) *
               price_or(pr->output, -1) +
           (unsigned __int128)(uint64_t)c.reasoning_tokens * price_or(pr->reasoning, pr->output);
    nusd = fusd / 1000000u;
    if (nusd > (unsigned __int128)INT64_MAX)
        return INT64_MAX;
    return (int64_t)nusd;
}

/* Character classes of the estimate. */
enum est_class { EST_SPACE, EST_LETTER, EST_DIGIT, EST_PUNCT, EST_WIDE };

static int64_t est_run_tokens(enum est_class c, int64_t run)
{
    switch (c) {
    case EST_LETTER:
        return (run + 7) / 8;
    case EST_DIGIT:
        return (run + 2) / 3;
    case EST_PUNCT:
        return (run + 1) / 2;
    case EST_WIDE:
        return run;
    case EST_SPACE:
    default:
        return 0;
    }
}

int64_t rt_usage_estimate_input(const char *body, size_t len)
{
    const unsigned char *s = (const unsigned char *)body;
    enum est_class cur = EST_SPACE, c;
    int64_t run = 0, tokens = 0;
    int in_string = 0;

    for (size_t i = 0; i < len; i++) {
        unsigned char b = s[i];

        if (!in_string) {
            if (b == '"')
                in_string = 1;
            continue;
        }
        if (b == '"') {
            in_string = 0;
            c = EST_SPACE;
        } else if (b == '\\' && i + 1 < len) {
            i++; /* an escape: \n, \t are space, the rest punctuation; \uXXXX a character */
            if (s[i] == 'n' || s[i] == 't' || s[i] == 'r')
                c = EST_SPACE;
            else if (s[i] == 'u') {
                c = EST_WIDE;
                i += i + 4 < len ? 4 : 0;
            } else
                c = EST_PUNCT;
        } else if ((b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z') || (b >= 0xC0 && b < 0xE0)) {
            c = EST_LETTER; /* 2-byte UTF-8 starts: accented Latin, Greek, Cyrillic letters */
        } else if (b >= 0x80 && b < 0xC0) {
            continue; /* continuation byte: part of the character already counted */
        } else if (b >= 0xE0) {
            c = EST_WIDE;
        } else if (b >= '0' && b <= '9') {
            c = EST_DIGIT;
        } else if (b <= ' ' || b == 0x7f) {
            c = EST_SPACE;
        } else {
            c = EST_PUNCT;
        }
        if (c == cur && c != EST_WIDE) {
            run++;
            continue;
        }
        tokens += est_run_tokens(cur, run);
        cur = c;
        run = 1;
    }
    return tokens + est_run_tokens(cur, run);
}

int rt_sse_usage_init(struct rt_sse_usage *p, enum rt_api api, size_t line_cap)
{
    memset(p, 0, sizeof(*p));
    p->api = api;
    p->line_cap = line_cap > 0 ? line_cap : RT_SSE_LINE_MAX;
    /* the line buffer is allocated on the first line split across two feeds (see feed) */
    return 0;
}

void rt_sse_usage_fini(struct rt_sse_usage *p)
{
    free(p->line);
    p->line = NULL;
    p->line_alloc = 0;
    p->line_len = 0;
    p->line_cap = 0; /* a finished parser ignores further bytes */
}

int rt_word_at_in(const char *data, size_t len, const char *word, size_t wlen, size_t at)
{
    const char *p, *end = data + len;

    if (wlen == 0)
        return 1;
    if (len < wlen)
        return 0;
    /* word[at] can only be at data[at, len - wlen + at] */
    p = data + at;
    while ((p = memchr(p, word[at], (size_t)(end - wlen + at + 1 - p))) != NULL) {
        const char *w0 = p - at;
        size_t j = 0;

        while (j < wlen && w0[j] == word[j])
            j++;
        if (j == wlen)
            return 1;
        if (++p > end - wlen + at)
            break;
    }
    return 0;
}

int rt_word_in(const char *data, size_t len, const char *word, size_t wlen)
{
    return rt_word_at_in(data, len, word, wlen, 0);
}

int rt_usage_mentioned(const char *data, size_t len)
{
    return rt_word_in(data, len, "usage", 5);
}

/* One "data:" payload. Only payloads mentioning usage are parsed (content chunks are skipped
 * without a JSON parse). */
static void sse_data(struct rt_sse_usage *p, const char *data, size_t len)
{
    json_t *root, *usage = NULL;
    json_error_t jerr;
    const char *type;
    struct rt_usage u;

    if (!rt_usage_mentioned(data, len))
        return;
    if ((p->api == RT_API_CHAT || p->api == RT_API_EMBEDDINGS) &&
        usage_scan(p->api, data, len, &u) == 0) {
        /* the scanner took it (the include_usage chunk): what the tree below would give */
        if (u.found)
            p->usage = u;
        return;
    }
    root = json_loadb(data, len, 0, &jerr);
    if (root == NULL || !json_is_object(root)) {
        p->events_bad++;
        json_decref(root);
        return;
    }
    type = json_string_value(json_object_get(root, "type"));
    memset(&u, 0, sizeof(u));
    switch (p->api) {
    case RT_API_CHAT:
    case RT_API_EMBEDDINGS:
        usage = json_object_get(root, "usage");
        if (rt_usage_read(p->api, usage, &u))
            p->usage = u;
        break;
    case RT_API_RESPONSES:
        /* response.completed (also .incomplete/.failed) carries the final response object. */
        usage = json_object_get(json_object_get(root, "response"), "usage");
        if (rt_usage_read(p->api, usage, &u))
            p->usage = u;
        break;
    case RT_API_MESSAGES:
        if (type != NULL && strcmp(type, "message_start") == 0) {
            usage = json_object_get(json_object_get(root, "message"), "usage");
            if (rt_usage_read(p->api, usage, &u))
                p->usage = u;
        } else if (type != NULL && strcmp(type, "message_delta") == 0) {
            int present = 0;
            int64_t out_tokens;

            usage = json_object_get(root, "usage");
            if (!json_is_object(usage))
                break;
            /* output_tokens is cumulative; input tokens may be restated. */
            out_tokens = int_member(usage, "output_tokens", &present);
            if (present) {
                p->usage.completion_tokens = out_tokens;
                p->usage.found = 1;
            }
            /* input counts may be restated (cumulative too): taken when they are */
            if (rt_usage_read(p->api, usage, &u) && u.prompt_tokens > 0) {
                p->usage.prompt_tokens = u.prompt_tokens;
                p->usage.cache_read_tokens = u.cache_read_tokens;
                p->usage.cache_creation_tokens = u.cache_creation_tokens;
                p->usage.found = 1;
            }
            usage_clamp(&p->usage);
        }
        break;
    }
    json_decref(root);
}

/* Room for need bytes (<= line_cap) at p->line: doubled from 4 KiB as needed. 0 or -1. */
static int line_reserve(struct rt_sse_usage *p, size_t need)
{
    size_t n = p->line_alloc > 0 ? p->line_alloc : 4096;
    char *grown;

    if (need <= p->line_alloc)
        return 0;
    while (n < need)
        n *= 2;
    if (n > p->line_cap)
        n = p->line_cap;
    grown = realloc(p->line, n);
    if (grown == NULL)
        return -1;
    p->line = grown;
    p->line_alloc = n;
    return 0;
}

/* One complete line (terminator excluded), l[0..n). */
static void sse_line(struct rt_sse_usage *p, const char *l, size_t n)
{
    p->lines++;
    if (n < 5 || memcmp(l, "data:", 5) != 0)
        return; /* event:, id:, retry:, comments and blank lines carry no usage */
    l += 5;
    n -= 5;
    if (n > 0 && l[0] == ' ') {
        l++;
        n--;
    }
    if (n == 6 && memcmp(l, "[DONE]", 6) == 0)
        return;
    sse_data(p, l, n);
}

/* A line that ends inside one feed is parsed in place; only a line split across feeds is copied
 * into p->line, which grows (up to line_cap bytes) as such a line needs. Either way a
 * line of line_cap bytes or more is dropped whole (counted in lines_skipped), never parsed from
 * a prefix. */
uint64_t rt_sse_usage_feed(struct rt_sse_usage *p, const char *data, size_t len)
{
    size_t i = 0;

    if (p->line_cap == 0)
        return p->lines;
    while (i < len) {
        size_t j = i;
        size_t seg;
        int in_place = 0;

        if (p->last_cr && data[i] == '\n') {
            p->last_cr = 0; /* second half of CRLF */
            i++;
            continue;
        }
        p->last_cr = 0;
        {
            /* the line's end: its first CR or LF (the CR looked for before the LF only) */
            const char *lf = memchr(data + i, '\n', len - i);
            size_t end = lf != NULL ? (size_t)(lf - data) : len;
            const char *cr = memchr(data + i, '\r', end - i);

            j = cr != NULL ? (size_t)(cr - data) : end;
        }
        seg = j - i;
        if (!p->skipping && seg > 0) {
            if (p->line_len + seg >= p->line_cap) {
                p->skipping = 1; /* too long: drop the whole line, never a prefix of it */
                p->line_len = 0;
            } else if (j < len && p->line_len == 0) {
                in_place = 1;
            } else {
                if (line_reserve(p, p->line_len + seg + 1) != 0) {
                    p->skipping = 1; /* no memory for the split line: dropped like a long one */
                    p->line_len = 0;
                } else {
                    memcpy(p->line + p->line_len, data + i, seg);
                    p->line_len += seg;
                }
            }
        }
        if (j == len)
            break; /* the line goes on in the next feed */
        if (p->skipping) {
            p->lines++;
            p->lines_skipped++;
        } else if (in_place) {
            sse_line(p, data + i, seg);
        } else {
            sse_line(p, p->line != NULL ? p->line : "", p->line_len);
        }
        p->skipping = 0;
        p->line_len = 0;
        p->last_cr = data[j] == '\r';
        i = j + 1;
    }
    return p->lines;
}

void rt_sse_usage_get(const struct rt_sse_usage *p, struct rt_usage *out)
{
    *out = p->usage;
}

/* ------------------------------------------------------------------ strict JSON scanner */

/* Each step takes the text (p, n) and the index i where it starts, and returns the index just
 * past what it read, or JS_BAD. The index lives in a register: a struct holding it behind a
 * pointer is reloaded after every byte read through a char pointer (which may alias it). */
#define JS_BAD ((size_t)-1)

/* JSON's whitespace: space, tab, line feed, carriage return. */
static const unsigned char js_space[256] = {[' '] = 1, ['\t'] = 1, ['\n'] = 1, ['\r'] = 1};

static inline size_t js_ws(const char *p, size_t n, size_t i)
{
    if (i < n && (unsigned char)p[i] > ' ')
        return i; /* compact JSON: no whitespace between tokens */
    while (i < n && js_space[(unsigned char)p[i]])
        i++;
    return i;
}

static int js_hex4(const char *p, size_t n, size_t at, unsigned *out)
{
    unsigned v = 0;

    if (at + 4 > n)
        return -1;
    for (size_t k = 0; k < 4; k++) {
        char c = p[at + k];

        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f')
            v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            v |= (unsigned)(c - 'A' + 10);
        else
            return -1;
    }
    *out = v;
    return 0;
}

/* One UTF-8 sequence starting at i (first byte >= 0x80), with the same rules as jansson: no
 * overlong forms, no surrogates, nothing above U+10FFFF. */
static __attribute__((noinline)) size_t js_utf8(const char *p, size_t n, size_t i)
{
    unsigned char c = (unsigned char)p[i];
    unsigned need, v;

    if (c >= 0xC2 && c <= 0xDF) {
        need = 1;
        v = c & 0x1Fu;
    } else if (c >= 0xE0 && c <= 0xEF) {
        need = 2;
        v = c & 0x0Fu;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 3;
        v = c & 0x07u;
    } else {
        return JS_BAD;
    }
    if (i + need >= n)
        return JS_BAD;
    for (unsigned k = 1; k <= need; k++) {
        unsigned char t = (unsigned char)p[i + k];

        if ((t & 0xC0u) != 0x80u)
            return JS_BAD;
        v = (v << 6) | (t & 0x3Fu);
    }
    if ((need == 2 && v < 0x800u) || (need == 3 && v < 0x10000u) || v > 0x10FFFFu ||
        (v >= 0xD800u && v <= 0xDFFFu))
        return JS_BAD;
    return i + need + 1;
}

/* The bytes a string holds as they are: 0x20 to 0x7f but the quote and the backslash. */
static const unsigned char js_plain[256] = {
    [0x20 ... 0x21] = 1,
    [0x23 ... 0x5b] = 1,
    [0x5d ... 0x7f] = 1,
};

/* The index of the first byte from i on that is not plain (or n): 16 bytes a step with SSE2,
 * else 8, then byte by byte (tg_str.h: tg_json_special16/8). */
static inline size_t js_plain_run(const char *p, size_t n, size_t i)
{
#ifdef __SSE2__
    while (i + 16 <= n) {
        unsigned m = tg_json_special16(_mm_loadu_si128((const __m128i *)(const void *)(p + i)));

        if (m != 0)
            return i + (unsigned)__builtin_ctz(m);
        i += 16;
    }
#endif
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    while (i + 8 <= n) {
        uint64_t v, m;

        memcpy(&v, p + i, 8);
        m = tg_json_special8(v);
        if (m != 0)
            return i + ((unsigned)__builtin_ctzll(m) >> 3);
        i += 8;
    }
#endif
    while (i < n && js_plain[(unsigned char)p[i]])
        i++;
    return i;
}

/* The escape at i (a backslash) of a string: the index past it, or JS_BAD. */
static __attribute__((noinline)) size_t js_escape(const char *p, size_t n, size_t i)
{
    unsigned v, lo;

    if (i + 1 >= n)
        return JS_BAD;
    switch (p[i + 1]) {
    case '"':
    case '\\':
    case '/':
    case 'b':
    case 'f':
    case 'n':
    case 'r':
    case 't':
        return i + 2;
    case 'u':
        if (js_hex4(p, n, i + 2, &v) != 0 || v == 0)
            return JS_BAD; /* \u0000 is refused without JSON_ALLOW_NUL */
        i += 6;
        if (v >= 0xDC00u && v <= 0xDFFFu)
            return JS_BAD; /* lone low surrogate */
        if (v >= 0xD800u && v <= 0xDBFFu) {
            if (i + 1 >= n || p[i] != '\\' || p[i + 1] != 'u' ||
                js_hex4(p, n, i + 2, &lo) != 0 || lo < 0xDC00u || lo > 0xDFFFu)
                return JS_BAD;
            i += 6;
        }
        return i;
    default:
        return JS_BAD;
    }
}

/* A string at i (the opening quote). *escaped is set when it holds any escape. Inlined where
 * it is called, its rare cases (escapes, multi-byte characters) out of line: a call per string
 * cost more than most strings' bytes (the vector constants were set up again in each call). */
static inline __attribute__((always_inline)) size_t js_string(const char *p, size_t n, size_t i,
                                                              int *escaped)
{
    *escaped = 0;
    i++;
    for (;;) {
        unsigned char c;

        i = js_plain_run(p, n, i);
        if (i >= n)
            return JS_BAD;
        c = (unsigned char)p[i];
        if (c == '"')
            return i + 1;
        if (c < 0x20)
            return JS_BAD;
        if (c >= 0x80)
            i = js_utf8(p, n, i);
        else {
            *escaped = 1; /* a backslash */
            i = js_escape(p, n, i);
        }
        if (i == JS_BAD)
            return JS_BAD;
    }
}

static inline int js_digit_at(const char *p, size_t n, size_t i)
{
    return i < n && p[i] >= '0' && p[i] <= '9';
}

/* A number at i. Integers of up to 18 digits always fit jansson's json_int_t; longer ones, and
 * any exponent (a real that could overflow), are left to the full parser. */
static size_t js_number(const char *p, size_t n, size_t i)
{
    size_t start = i;
    size_t digits = 0;

    if (p[i] == '-')
        i++;
    if (!js_digit_at(p, n, i))
        return JS_BAD;
    if (p[i] == '0') {
        i++;
        digits = 1;
        if (js_digit_at(p, n, i))
            return JS_BAD;
    } else {
        while (js_digit_at(p, n, i)) {
            i++;
            digits++;
        }
    }
    if (i < n && (p[i] == 'e' || p[i] == 'E'))
        return JS_BAD;
    if (i < n && p[i] == '.') {
        i++;
        if (!js_digit_at(p, n, i))
            return JS_BAD;
        while (js_digit_at(p, n, i))
            i++;
        if (i < n && (p[i] == 'e' || p[i] == 'E'))
            return JS_BAD;
        return i - start > 300 ? JS_BAD : i; /* no overflow without an exponent below this */
    }
    return digits > 18 ? JS_BAD : i;
}

static inline size_t js_literal(const char *p, size_t n, size_t i, const char *lit, size_t ln)
{
    if (n - i < ln || memcmp(p + i, lit, ln) != 0)
        return JS_BAD;
    return i + ln;
}

/* The members a scan locates (of the top level only), and what js_wanted needs of their names,
 * worked out once a scan instead of once a key. */
#define JS_WANT_LENS 8
struct js_want {
    struct rt_json_member *m;
    size_t nm;
    uint64_t first;            /* bit (b & 63) set for the first byte b of each name */
    size_t len[JS_WANT_LENS];  /* the lengths of the first JS_WANT_LENS names */
};

static size_t js_container(const char *p, size_t n, size_t i, unsigned depth,
                           const struct js_want *w, size_t *close_off);

/* Any value at i (i < n). */
static inline size_t js_value(const char *p, size_t n, size_t i, unsigned depth)
{
    int esc;

    switch (p[i]) {
    case '{':
    case '[':
        return js_container(p, n, i, depth, NULL, NULL);
    case '"':
        return js_string(p, n, i, &esc);
    case 't':
        return js_literal(p, n, i, "true", 4);
    case 'f':
        return js_literal(p, n, i, "false", 5);
    case 'n':
        return js_literal(p, n, i, "null", 4);
    default:
        if (p[i] == '-' || (p[i] >= '0' && p[i] <= '9'))
            return js_number(p, n, i);
        return JS_BAD;
    }
}

/* The wanted member named by the key p[k0] .. p[k1) (quotes included; no escapes), or NULL.
 * JS_BAD through *bad when it was located before (jansson keeps the last of two). */
static struct rt_json_member *js_wanted(const char *p, size_t k0, size_t k1,
                                        const struct js_want *w, int *bad)
{
    size_t kl = k1 - k0 - 2;

    if (kl > 0 && ((w->first >> ((unsigned char)p[k0 + 1] & 63u)) & 1u) == 0)
        return NULL; /* no wanted name starts with this byte */
    for (size_t j = 0; j < w->nm; j++) {
        struct rt_json_member *m = &w->m[j];
        size_t len = j < JS_WANT_LENS ? w->len[j] : strlen(m->name);

        if (len == kl && memcmp(p + k0 + 1, m->name, kl) == 0) {
            if (m->val_len > 0) {
                *bad = 1; /* duplicate: jansson keeps the last, leave it to it */
                return NULL;
            }
            return m;
        }
    }
    return NULL;
}

/* An object or array at i. At depth 0 the members w names (w may be NULL) are recorded. */
static size_t js_container(const char *p, size_t n, size_t i, unsigned depth,
                           const struct js_want *w, size_t *close_off)
{
    int is_obj = p[i] == '{';
    char close = is_obj ? '}' : ']';
    int esc;

    if (depth >= RT_JSON_SCAN_DEPTH_MAX)
        return JS_BAD;
    i = js_ws(p, n, i + 1);
    if (i < n && p[i] == close) {
        if (close_off != NULL)
            *close_off = i;
        return i + 1;
    }
    for (;;) {
        struct rt_json_member *hit = NULL;
        size_t v0;

        if (is_obj) {
            size_t k0 = i;

            if (i >= n || p[i] != '"')
                return JS_BAD;
            i = js_string(p, n, i, &esc);
            if (i == JS_BAD)
                return JS_BAD;
            if (w != NULL) { /* (depth 0: w is passed at the top only) */
                int bad = 0;

                if (esc)
                    return JS_BAD; /* an escaped key might spell a wanted name: not handled */
                hit = js_wanted(p, k0, i, w, &bad);
                if (bad)
                    return JS_BAD;
                if (hit != NULL)
                    hit->key_off = k0;
            }
            if (i < n && p[i] == ':') { /* compact JSON: no whitespace around the colon */
                i++;
            } else {
                i = js_ws(p, n, i);
                if (i >= n || p[i] != ':')
                    return JS_BAD;
                i++;
            }
        }
        i = js_ws(p, n, i);
        if (i >= n)
            return JS_BAD;
        v0 = i;
        i = js_value(p, n, i, depth + 1);
        if (i == JS_BAD)
            return JS_BAD;
        if (hit != NULL) {
            hit->val_off = v0;
            hit->val_len = i - v0;
        }
        i = js_ws(p, n, i);
        if (i >= n)
            return JS_BAD;
        if (p[i] == ',') {
            i = js_ws(p, n, i + 1);
            continue;
        }
        if (p[i] != close)
            return JS_BAD;
        if (close_off != NULL)
            *close_off = i;
        return i + 1;
    }
}

int rt_json_scan_object(const char *text, size_t len, struct rt_json_member *m, size_t nm,
                        size_t *close_off)
{
    struct js_want w;
    size_t i;

    w.m = m;
    w.nm = nm;
    w.first = 0;
    for (size_t j = 0; j < nm; j++) {
        m[j].key_off = m[j].val_off = m[j].val_len = 0;
        w.first |= 1ull << ((unsigned char)m[j].name[0] & 63u);
        if (j < JS_WANT_LENS)
            w.len[j] = strlen(m[j].name);
    }
    if (text == NULL)
        return TG_EINVAL;
    i = js_ws(text, len, 0);
    if (i >= len || text[i] != '{')
        return TG_EINVAL;
    i = js_container(text, len, i, 0, nm > 0 ? &w : NULL, close_off);
    if (i == JS_BAD)
        return TG_EINVAL;
    i = js_ws(text, len, i);
    if (i != len)
        return TG_EINVAL;
    return 0;
}

int rt_json_is_true(const char *text, const struct rt_json_member *m)
{
    return m->val_len == 4 && memcmp(text + m->val_off, "true", 4) == 0;
}

int rt_json_plain_string(const char *text, const struct rt_json_member *m, const char **s,
                         size_t *n)
{
    const char *v = text + m->val_off;

    if (m->val_len < 2 || v[0] != '"' || memchr(v, '\\', m->val_len) != NULL)
        return 0;
    *s = v + 1;
    *n = m->val_len - 2;
    return 1;
}
