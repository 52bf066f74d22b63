#include "usage.h"

#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "tg_err.h"

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

/* Usage object of one API into out; returns 1 when it carried usage. */
static int read_usage(enum rt_api api, const json_t *usage, struct rt_usage *out)
{
    int present = 0;

    if (!json_is_object(usage))
        return 0;
    switch (api) {
    case RT_API_CHAT:
    case RT_API_EMBEDDINGS:
        out->prompt_tokens = int_member(usage, "prompt_tokens", &present);
        out->completion_tokens = int_member(usage, "completion_tokens", &present);
        break;
    case RT_API_RESPONSES:
        out->prompt_tokens = int_member(usage, "input_tokens", &present);
        out->completion_tokens = int_member(usage, "output_tokens", &present);
        break;
    case RT_API_MESSAGES:
        out->prompt_tokens =
            tokens_add(tokens_add(int_member(usage, "input_tokens", &present),
                                  int_member(usage, "cache_creation_input_tokens", &present)),
                       int_member(usage, "cache_read_input_tokens", &present));
        out->completion_tokens = int_member(usage, "output_tokens", &present);
        break;
    }
    if (present)
        out->found = 1;
    return present;
}

int rt_usage_from_json(enum rt_api api, const char *body, size_t len, struct rt_usage *out)
{
    json_t *root;
    json_error_t jerr;

    memset(out, 0, sizeof(*out));
    if (body == NULL || len == 0)
        return TG_EPROTO;
    root = json_loadb(body, len, 0, &jerr);
    if (root == NULL)
        return TG_EPROTO;
    if (!json_is_object(root)) {
        json_decref(root);
        return TG_EPROTO;
    }
    read_usage(api, json_object_get(root, "usage"), out);
    json_decref(root);
    return 0;
}

int64_t rt_usage_cost_nusd(const struct rt_deployment_conf *dep, const struct rt_usage *u)
{
    unsigned __int128 fusd;
    unsigned __int128 nusd;

    if (dep == NULL || u == NULL || u->prompt_tokens < 0 || u->completion_tokens < 0 ||
        dep->in_fusd_per_token < 0 || dep->out_fusd_per_token < 0)
        return 0;
    fusd = (unsigned __int128)u->prompt_tokens * (uint64_t)dep->in_fusd_per_token +
           (unsigned __int128)u->completion_tokens * (uint64_t)dep->out_fusd_per_token;
    nusd = fusd / 1000000u;
    if (nusd > (unsigned __int128)INT64_MAX)
        return INT64_MAX;
    return (int64_t)nusd;
}

int rt_sse_usage_init(struct rt_sse_usage *p, enum rt_api api, size_t line_cap)
{
    memset(p, 0, sizeof(*p));
    p->api = api;
    p->line_cap = line_cap > 0 ? line_cap : RT_SSE_LINE_MAX;
    p->line = malloc(p->line_cap);
    if (p->line == NULL)
        return TG_ENOMEM;
    return 0;
}

void rt_sse_usage_fini(struct rt_sse_usage *p)
{
    free(p->line);
    p->line = NULL;
    p->line_len = 0;
}

/* One "data:" payload. Only payloads mentioning usage are parsed (content chunks are skipped
 * without a JSON parse). */
static void sse_data(struct rt_sse_usage *p, const char *data, size_t len)
{
    json_t *root, *usage = NULL;
    json_error_t jerr;
    const char *type;
    struct rt_usage u;

    if (len == 0 || memmem(data, len, "usage", 5) == NULL)
        return;
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
        if (read_usage(p->api, usage, &u))
            p->usage = u;
        break;
    case RT_API_RESPONSES:
        /* response.completed (also .incomplete/.failed) carries the final response object. */
        usage = json_object_get(json_object_get(root, "response"), "usage");
        if (read_usage(p->api, usage, &u))
            p->usage = u;
        break;
    case RT_API_MESSAGES:
        if (type != NULL && strcmp(type, "message_start") == 0) {
            usage = json_object_get(json_object_get(root, "message"), "usage");
            if (read_usage(p->api, usage, &u))
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
            present = 0;
            {
                int64_t in =
                    tokens_add(tokens_add(int_member(usage, "input_tokens", &present),
                                          int_member(usage, "cache_creation_input_tokens",
                                                     &present)),
                               int_member(usage, "cache_read_input_tokens", &present));

                if (present && in > 0) {
                    p->usage.prompt_tokens = in;
                    p->usage.found = 1;
                }
            }
        }
        break;
    }
    json_decref(root);
}

static void sse_line(struct rt_sse_usage *p)
{
    const char *l = p->line;
    size_t n = p->line_len;

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

uint64_t rt_sse_usage_feed(struct rt_sse_usage *p, const char *data, size_t len)
{
    if (p->line == NULL)
        return p->lines;
    for (size_t i = 0; i < len; i++) {
        char c = data[i];

        if (c == '\n' && p->last_cr) {
            p->last_cr = 0; /* second half of CRLF */
            continue;
        }
        p->last_cr = c == '\r';
        if (c == '\n' || c == '\r') {
            if (p->skipping) {
                p->lines++;
                p->lines_skipped++;
            } else {
                sse_line(p);
            }
            p->skipping = 0;
            p->line_len = 0;
            continue;
        }
        if (p->skipping)
            continue;
        if (p->line_len + 1 >= p->line_cap) {
            p->skipping = 1; /* too long: drop the whole line, never a prefix of it */
            p->line_len = 0;
            continue;
        }
        p->line[p->line_len++] = c;
    }
    return p->lines;
}

void rt_sse_usage_get(const struct rt_sse_usage *p, struct rt_usage *out)
{
    *out = p->usage;
}
