#include "fl_body.h"

#include <stdio.h>
#include <string.h>

#include "tg_err.h"

#define MODEL_ESC_MAX (FL_MODEL_NAME_MAX * 6 + 1)
#define WORD_MAX_BYTES 12 /* longest word below plus a space */

static const char *const words[] = {
    "The",  "fake",    "provider", "answers", "with", "plain", "words", "so",
    "that", "clients", "can",      "count",   "what", "they",  "get",   "back.",
};
#define NWORDS (sizeof(words) / sizeof(words[0]))

int fl_json_escape(char *dst, size_t cap, const char *s)
{
    static const char hex[] = "0123456789abcdef";
    size_t o = 0;

    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        char tmp[7];
        size_t n = 0;
        if (c == '"' || c == '\\') {
            tmp[n++] = '\\';
            tmp[n++] = (char)c;
        } else if (c < 0x20) {
            tmp[n++] = '\\';
            tmp[n++] = 'u';
            tmp[n++] = '0';
            tmp[n++] = '0';
            tmp[n++] = hex[c >> 4];
            tmp[n++] = hex[c & 15];
        } else {
            tmp[n++] = (char)c;
        }
        if (o + n + 1 > cap) {
            dst[o] = '\0';
            return TG_EFULL;
        }
        memcpy(dst + o, tmp, n);
        o += n;
    }
    dst[o] = '\0';
    return 0;
}

static uint32_t text_words(const struct fl_gen *g)
{
    return g->completion_tokens < FL_TEXT_MAX_WORDS ? g->completion_tokens : FL_TEXT_MAX_WORDS;
}

/* Append words [from, to) of the generated text (words separated by single spaces). */
static void put_words(struct tg_buf *b, uint32_t from, uint32_t to)
{
    for (uint32_t i = from; i < to; i++) {
        if (i > 0)
            tg_buf_append(b, " ", 1);
        tg_buf_puts(b, words[i % NWORDS]);
    }
}

/* Words of content chunk i of n. */
static void chunk_range(const struct fl_gen *g, uint32_t i, uint32_t *from, uint32_t *to)
{
    uint64_t w = text_words(g);
    *from = (uint32_t)(w * i / g->chunks);
    *to = (uint32_t)(w * (i + 1) / g->chunks);
}

size_t fl_body_capacity(const struct fl_gen *g, int stream)
{
    size_t text = (size_t)text_words(g) * WORD_MAX_BYTES;
    size_t per_event = 1024 + 2 * MODEL_ESC_MAX;
    size_t cap = 2048 + 2 * MODEL_ESC_MAX + 2 * text;

    if (stream)
        cap = 16384 + 8 * text + (g->chunks + 16) * per_event;

    if (g->api == FL_API_EMBEDDINGS)
        cap += (size_t)g->embed_inputs * (128 + (size_t)g->embed_dims * 12);
    return cap;
}

/* The parts of the usage, each cut to what its total leaves. */
static uint32_t cached_of(const struct fl_gen *g)
{
    return g->cached_tokens < g->prompt_tokens ? g->cached_tokens : g->prompt_tokens;
}

static uint32_t creation_of(const struct fl_gen *g)
{
    uint32_t left = g->prompt_tokens - cached_of(g);

    return g->cache_creation_tokens < left ? g->cache_creation_tokens : left;
}

static uint32_t reasoning_of(const struct fl_gen *g)
{
    return g->reasoning_tokens < g->completion_tokens ? g->reasoning_tokens : g->completion_tokens;
}

/* OpenAI's shape: totals, with the cached and reasoning parts in the details objects. */
static void chat_usage(struct tg_buf *b, const struct fl_gen *g)
{
    tg_buf_printf(b,
                  "{\"prompt_tokens\":%u,\"completion_tokens\":%u,\"total_tokens\":%llu,"
                  "\"prompt_tokens_details\":{\"cached_tokens\":%u,\"audio_tokens\":0},"
                  "\"completion_tokens_details\":{\"reasoning_tokens\":%u,\"audio_tokens\":0}}",
                  g->prompt_tokens, g->completion_tokens,
                  (unsigned long long)g->prompt_tokens + g->completion_tokens, cached_of(g),
                  reasoning_of(g));
}

static void responses_usage(struct tg_buf *b, const struct fl_gen *g)
{
    tg_buf_printf(b,
                  "{\"input_tokens\":%u,\"input_tokens_details\":{\"cached_tokens\":%u},"
                  "\"output_tokens\":%u,\"output_tokens_details\":{\"reasoning_tokens\":%u},"
                  "\"total_tokens\":%llu}",
                  g->prompt_tokens, cached_of(g), g->completion_tokens, reasoning_of(g),
                  (unsigned long long)g->prompt_tokens + g->completion_tokens);
}

/* Anthropic's shape: input_tokens leaves out the cache's reads and writes. */
static void messages_input_usage(struct tg_buf *b, const struct fl_gen *g)
{
    tg_buf_printf(b,
                  "\"input_tokens\":%u,\"cache_creation_input_tokens\":%u,"
                  "\"cache_read_input_tokens\":%u",
                  g->prompt_tokens - cached_of(g) - creation_of(g), creation_of(g), cached_of(g));
}

/* The Responses API message item; completed: with the whole text. */
static void responses_item(struct tg_buf *b, const struct fl_gen *g, int completed)
{
    tg_buf_printf(b,
                  "{\"type\":\"message\",\"id\":\"msg_%016llx\",\"status\":\"%s\","
                  "\"role\":\"assistant\",\"content\":[",
                  (unsigned long long)g->id, completed ? "completed" : "in_progress");
    if (completed) {
        tg_buf_puts(b, "{\"type\":\"output_text\",\"text\":\"");
        put_words(b, 0, text_words(g));
        tg_buf_puts(b, "\",\"annotations\":[]}");
    }
    tg_buf_puts(b, "]}");
}

/* The Responses API response object. */
static void responses_object(struct tg_buf *b, const struct fl_gen *g, const char *model_esc,
                             int completed)
{
    tg_buf_printf(b,
                  "{\"id\":\"resp_%016llx\",\"object\":\"response\",\"created_at\":%llu,"
                  "\"status\":\"%s\",\"model\":\"%s\",\"output\":[",
                  (unsigned long long)g->id, (unsigned long long)g->created_s,
                  completed ? "completed" : "in_progress", model_esc);
    if (completed)
        responses_item(b, g, 1);
    tg_buf_puts(b, "],\"usage\":");
    if (completed)
        responses_usage(b, g);
    else
        tg_buf_puts(b, "null");
    tg_buf_puts(b, "}");
}

int fl_body_success(struct tg_buf *out, const struct fl_gen *g)
{
    char model[MODEL_ESC_MAX];

    fl_json_escape(model, sizeof(model), g->model);
    switch (g->api) {
    case FL_API_CHAT:
        tg_buf_printf(out,
                      "{\"id\":\"chatcmpl-%016llx\",\"object\":\"chat.completion\","
                      "\"created\":%llu,\"model\":\"%s\",\"system_fingerprint\":\"fp_fake\","
                      "\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\","
                      "\"content\":\"",
                      (unsigned long long)g->id, (unsigned long long)g->created_s, model);
        put_words(out, 0, text_words(g));
        tg_buf_puts(out, "\",\"refusal\":null},\"logprobs\":null,\"finish_reason\":\"stop\"}],"
                         "\"usage\":");
        chat_usage(out, g);
        tg_buf_puts(out, "}");
        break;
    case FL_API_EMBEDDINGS:
        tg_buf_puts(out, "{\"object\":\"list\",\"data\":[");
        for (uint32_t i = 0; i < g->embed_inputs; i++) {
            uint64_t h = (g->id + 1) * 0x9E3779B97F4A7C15ull ^ ((uint64_t)i << 32);
            tg_buf_printf(out, "%s{\"object\":\"embedding\",\"index\":%u,\"embedding\":[",
                          i ? "," : "", i);
            for (uint32_t d = 0; d < g->embed_dims; d++) {
                h ^= h >> 33;
                h *= 0xff51afd7ed558ccdull;
                h ^= h >> 29;
                double v = (double)(h >> 40) / (double)(1u << 24) * 2.0 - 1.0;
                tg_buf_printf(out, "%s%.6f", d ? "," : "", v);
            }
            tg_buf_puts(out, "]}");
        }
        tg_buf_printf(out,
                      "],\"model\":\"%s\",\"usage\":{\"prompt_tokens\":%u,\"total_tokens\":%u}}",
                      model, g->prompt_tokens, g->prompt_tokens);
        break;
    case FL_API_RESPONSES:
        responses_object(out, g, model, 1);
        break;
    case FL_API_MESSAGES:
        tg_buf_printf(out,
                      "{\"id\":\"msg_%016llx\",\"type\":\"message\",\"role\":\"assistant\","
                      "\"model\":\"%s\",\"content\":[{\"type\":\"text\",\"text\":\"",
                      (unsigned long long)g->id, model);
        put_words(out, 0, text_words(g));
        tg_buf_puts(out, "\"}],\"stop_reason\":\"end_turn\",\"stop_sequence\":null,"
                         "\"usage\":{");
        messages_input_usage(out, g);
        tg_buf_printf(out, ",\"output_tokens\":%u}}", g->completion_tokens);
        break;
    }
    return out->truncated ? TG_EFULL : 0;
}

static int seg_end(struct tg_buf *out, struct fl_segments *seg)
{
    if (seg->n == FL_STREAM_SEGMENTS_MAX)
        return TG_EFULL;
    seg->ends[seg->n++] = out->len;
    return 0;
}

/* "event: NAME\ndata: {"type":"NAME","sequence_number":N" — the caller closes the object. */
static void resp_event(struct tg_buf *out, const char *name, unsigned *seq)
{
    tg_buf_printf(out, "event: %s\ndata: {\"type\":\"%s\",\"sequence_number\":%u", name, name,
                  (*seq)++);
}

static int stream_chat(struct tg_buf *out, struct fl_segments *seg, const struct fl_gen *g,
                       const char *model)
{
    int rc = 0;

    for (uint32_t i = 0; i < g->chunks && rc == 0; i++) {
        uint32_t from, to;
        chunk_range(g, i, &from, &to);
        tg_buf_printf(out,
                      "data: {\"id\":\"chatcmpl-%016llx\",\"object\":\"chat.completion.chunk\","
                      "\"created\":%llu,\"model\":\"%s\",\"system_fingerprint\":\"fp_fake\","
                      "\"choices\":[{\"index\":0,\"delta\":{%s\"content\":\"",
                      (unsigned long long)g->id, (unsigned long long)g->created_s, model,
                      i == 0 ? "\"role\":\"assistant\"," : "");
        for (uint32_t w = from; w < to; w++) {
            if (w > 0)
                tg_buf_puts(out, " ");
            tg_buf_puts(out, words[w % NWORDS]);
        }
        tg_buf_printf(out, "\"},\"logprobs\":null,\"finish_reason\":%s}]%s}\n\n",
                      i + 1 == g->chunks ? "\"stop\"" : "null",
                      g->include_usage ? ",\"usage\":null" : "");
        rc = seg_end(out, seg);
    }
    if (rc == 0 && g->include_usage) {
        tg_buf_printf(out,
                      "data: {\"id\":\"chatcmpl-%016llx\",\"object\":\"chat.completion.chunk\","
                      "\"created\":%llu,\"model\":\"%s\",\"system_fingerprint\":\"fp_fake\","
                      "\"choices\":[],\"usage\":",
                      (unsigned long long)g->id, (unsigned long long)g->created_s, model);
        chat_usage(out, g);
        tg_buf_puts(out, "}\n\n");
        rc = seg_end(out, seg);
    }
    if (rc == 0) {
        tg_buf_puts(out, "data: [DONE]\n\n");
        rc = seg_end(out, seg);
    }
    return rc;
}

static int stream_responses(struct tg_buf *out, struct fl_segments *seg, const struct fl_gen *g,
                            const char *model)
{
    unsigned seq = 0;
    int rc = 0;
    const char *ids = "\"output_index\":0,\"content_index\":0";

    resp_event(out, "response.created", &seq);
    tg_buf_puts(out, ",\"response\":");
    responses_object(out, g, model, 0);
    tg_buf_puts(out, "}\n\n");
    rc = seg_end(out, seg);
    resp_event(out, "response.in_progress", &seq);
    tg_buf_puts(out, ",\"response\":");
    responses_object(out, g, model, 0);
    tg_buf_puts(out, "}\n\n");
    rc = rc ? rc : seg_end(out, seg);
    resp_event(out, "response.output_item.added", &seq);
    tg_buf_puts(out, ",\"output_index\":0,\"item\":");
    responses_item(out, g, 0);
    tg_buf_puts(out, "}\n\n");
    rc = rc ? rc : seg_end(out, seg);
    resp_event(out, "response.content_part.added", &seq);
    tg_buf_printf(out,
                  ",\"item_id\":\"msg_%016llx\",%s,\"part\":{\"type\":\"output_text\","
                  "\"text\":\"\",\"annotations\":[]}}\n\n",
                  (unsigned long long)g->id, ids);
    rc = rc ? rc : seg_end(out, seg);
    for (uint32_t i = 0; i < g->chunks && rc == 0; i++) {
        uint32_t from, to;
        chunk_range(g, i, &from, &to);
        resp_event(out, "response.output_text.delta", &seq);
        tg_buf_printf(out, ",\"item_id\":\"msg_%016llx\",%s,\"delta\":\"",
                      (unsigned long long)g->id, ids);
        for (uint32_t w = from; w < to; w++) {
            if (w > 0)
                tg_buf_puts(out, " ");
            tg_buf_puts(out, words[w % NWORDS]);
        }
        tg_buf_puts(out, "\"}\n\n");
        rc = seg_end(out, seg);
    }
    resp_event(out, "response.output_text.done", &seq);
    tg_buf_printf(out, ",\"item_id\":\"msg_%016llx\",%s,\"text\":\"", (unsigned long long)g->id,
                  ids);
    put_words(out, 0, text_words(g));
    tg_buf_puts(out, "\"}\n\n");
    rc = rc ? rc : seg_end(out, seg);
    resp_event(out, "response.content_part.done", &seq);
    tg_buf_printf(out,
                  ",\"item_id\":\"msg_%016llx\",%s,\"part\":{\"type\":\"output_text\",\"text\":\"",
                  (unsigned long long)g->id, ids);
    put_words(out, 0, text_words(g));
    tg_buf_puts(out, "\",\"annotations\":[]}}\n\n");
    rc = rc ? rc : seg_end(out, seg);
    resp_event(out, "response.output_item.done", &seq);
    tg_buf_puts(out, ",\"output_index\":0,\"item\":");
    responses_item(out, g, 1);
    tg_buf_puts(out, "}\n\n");
    rc = rc ? rc : seg_end(out, seg);
    resp_event(out, "response.completed", &seq);
    tg_buf_puts(out, ",\"response\":");
    responses_object(out, g, model, 1);
    tg_buf_puts(out, "}\n\n");
    rc = rc ? rc : seg_end(out, seg);
    return rc;
}

static int stream_messages(struct tg_buf *out, struct fl_segments *seg, const struct fl_gen *g,
                           const char *model)
{
    int rc;

    tg_buf_printf(out,
                  "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{"
                  "\"id\":\"msg_%016llx\",\"type\":\"message\",\"role\":\"assistant\","
                  "\"model\":\"%s\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,"
                  "\"usage\":{",
                  (unsigned long long)g->id, model);
    messages_input_usage(out, g);
    tg_buf_puts(out, ",\"output_tokens\":1}}}\n\n");
    rc = seg_end(out, seg);
    tg_buf_puts(out, "event: content_block_start\ndata: {\"type\":\"content_block_start\","
                     "\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n");
    rc = rc ? rc : seg_end(out, seg);
    for (uint32_t i = 0; i < g->chunks && rc == 0; i++) {
        uint32_t from, to;
        chunk_range(g, i, &from, &to);
        tg_buf_puts(out, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\","
                         "\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"");
        for (uint32_t w = from; w < to; w++) {
            if (w > 0)
                tg_buf_puts(out, " ");
            tg_buf_puts(out, words[w % NWORDS]);
        }
        tg_buf_puts(out, "\"}}\n\n");
        rc = seg_end(out, seg);
    }
    tg_buf_puts(out, "event: content_block_stop\ndata: {\"type\":\"content_block_stop\","
                     "\"index\":0}\n\n");
    rc = rc ? rc : seg_end(out, seg);
    tg_buf_printf(out,
                  "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{"
                  "\"stop_reason\":\"end_turn\",\"stop_sequence\":null},"
                  "\"usage\":{\"output_tokens\":%u}}\n\n",
                  g->completion_tokens);
    rc = rc ? rc : seg_end(out, seg);
    tg_buf_puts(out, "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n");
    rc = rc ? rc : seg_end(out, seg);
    return rc;
}

int fl_body_stream(struct tg_buf *out, struct fl_segments *seg, const struct fl_gen *g)
{
    char model[MODEL_ESC_MAX];
    int rc = TG_EINVAL;

    seg->n = 0;
    fl_json_escape(model, sizeof(model), g->model);
    switch (g->api) {
    case FL_API_CHAT:
        rc = stream_chat(out, seg, g, model);
        break;
    case FL_API_RESPONSES:
        rc = stream_responses(out, seg, g, model);
        break;
    case FL_API_MESSAGES:
        rc = stream_messages(out, seg, g, model);
        break;
    case FL_API_EMBEDDINGS:
        rc = TG_EINVAL;
        break;
    }
    if (rc == 0 && out->truncated)
        rc = TG_EFULL;
    return rc;
}

/* OpenAI error type and code for a status. */
static void openai_kind(int status, const char **type, const char **code)
{
    *code = NULL;
    if (status == 400) {
        *type = "invalid_request_error";
    } else if (status == 401) {
        *type = "invalid_request_error";
        *code = "invalid_api_key";
    } else if (status == 403) {
        *type = "permission_error";
    } else if (status == 404) {
        *type = "invalid_request_error";
        *code = "model_not_found";
    } else if (status == 413) {
        *type = "invalid_request_error";
        *code = "request_too_large";
    } else if (status == 429) {
        *type = "requests";
        *code = "rate_limit_exceeded";
    } else if (status >= 500) {
        *type = "server_error";
    } else {
        *type = "invalid_request_error";
    }
}

static const char *anthropic_kind(int status)
{
    switch (status) {
    case 400:
        return "invalid_request_error";
    case 401:
        return "authentication_error";
    case 403:
        return "permission_error";
    case 404:
        return "not_found_error";
    case 413:
        return "request_too_large";
    case 429:
        return "rate_limit_error";
    case 529:
        return "overloaded_error";
    default:
        return status >= 500 ? "api_error" : "invalid_request_error";
    }
}

int fl_body_error(struct tg_buf *out, enum fl_api api, int status, enum fl_fault fault,
                  const char *model, uint32_t prompt_tokens, const char *message)
{
    char model_esc[MODEL_ESC_MAX];
    char msg[512];
    char msg_esc[sizeof(msg) * 6];
    const char *type = NULL;
    const char *code = NULL;

    fl_json_escape(model_esc, sizeof(model_esc), model ? model : "");
    if (fault == FL_FAULT_CONTEXT_WINDOW) {
        if (api == FL_API_MESSAGES)
            snprintf(msg, sizeof(msg), "prompt is too long: %u tokens > 200000 maximum",
                     prompt_tokens > 200000 ? prompt_tokens : 200001);
        else
            snprintf(msg, sizeof(msg),
                     "This model's maximum context length is 8192 tokens. However, your "
                     "messages resulted in %u tokens. Please reduce the length of the messages.",
                     prompt_tokens > 8192 ? prompt_tokens : 8193);
        type = "invalid_request_error";
        code = "context_length_exceeded";
    } else if (fault == FL_FAULT_CONTENT_POLICY) {
        snprintf(msg, sizeof(msg),
                 "content_policy_violation: Your request was rejected as a result of our "
                 "safety system.");
        type = "invalid_request_error";
        code = "content_policy_violation";
    } else {
        openai_kind(status, &type, &code);
        if (status == 429)
            snprintf(msg, sizeof(msg), "Rate limit reached for %.200s (injected by fake-llm).",
                     model ? model : "this model");
        else
            snprintf(msg, sizeof(msg), "Injected failure with status %d for %.200s.", status,
                     model ? model : "this request");
    }
    fl_json_escape(msg_esc, sizeof(msg_esc), message ? message : msg);
    if (api == FL_API_MESSAGES) {
        tg_buf_printf(out, "{\"type\":\"error\",\"error\":{\"type\":\"%s\",\"message\":\"%s\"}}",
                      anthropic_kind(status), msg_esc);
    } else {
        tg_buf_printf(out,
                      "{\"error\":{\"message\":\"%s\",\"type\":\"%s\",\"param\":%s,"
                      "\"code\":",
                      msg_esc, type, fault == FL_FAULT_CONTEXT_WINDOW ? "\"messages\"" : "null");
        if (code)
            tg_buf_printf(out, "\"%s\"}}", code);
        else
            tg_buf_puts(out, "null}}");
    }
    return out->truncated ? TG_EFULL : 0;
}

const char *fl_body_garbage(size_t *len)
{
    static const char garbage[] = "<html><body>upstream garbage</body></html>\n"
                                  "\xff\xfe\x00{\"choices\":[{\"mess";
    *len = sizeof(garbage) - 1;
    return garbage;
}
