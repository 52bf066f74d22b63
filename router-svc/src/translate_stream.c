/* translate_stream: the streams of the chat <-> messages translation (translate.h), event by
 * event with bounded state; the requests and answers are in translate.c. */
#include "translate.h"

#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tg_err.h"
#include "translate_int.h"

void rt_translate_stream_init(struct rt_translate_stream *st, enum rt_translate_dir dir,
                              const char *model, int64_t created_s, unsigned flags)
{
    memset(st, 0, sizeof(*st));
    st->dir = dir;
    rt_tr_copy_utf8(st->model, sizeof(st->model), "", model != NULL ? model : "");
    snprintf(st->id, sizeof(st->id), "chatcmpl-0");
    st->created_s = created_s;
    st->flags = flags;
    st->block = -1;
    st->json_block = -1;
}

/* Appends "event: name\ndata: <json>\n\n" (name may be NULL: data only). Steals obj. */
static int emit(struct tg_buf *out, const char *name, json_t *obj)
{
    char *s;
    int rc = 0;

    if (obj == NULL)
        return TG_ENOMEM;
    s = json_dumps(obj, JSON_COMPACT);
    json_decref(obj);
    if (s == NULL)
        return TG_ENOMEM;
    if (name != NULL && tg_buf_printf(out, "event: %s\n", name) != 0)
        rc = TG_EFULL;
    if (rc == 0 && (tg_buf_puts(out, "data: ") != 0 || tg_buf_puts(out, s) != 0 ||
                    tg_buf_puts(out, "\n\n") != 0))
        rc = TG_EFULL;
    free(s);
    return rc;
}

/* Content block kinds of a translated Anthropic stream (st->block_kind). */
enum { BLOCK_TEXT = 1, BLOCK_THINKING, BLOCK_TOOL, BLOCK_REDACTED };

static int anth_start(struct rt_translate_stream *st, struct tg_buf *out)
{
    st->started = 1;
    return emit(out, "message_start",
                json_pack("{s:s,s:{s:s,s:s,s:s,s:s,s:[],s:n,s:n,s:o}}", "type", "message_start",
                          "message", "id", st->id, "type", "message", "role", "assistant",
                          "model", st->model, "content", "stop_reason", "stop_sequence", "usage",
                          rt_tr_messages_usage(st->prompt_tokens, st->cache_read_tokens,
                                         st->cache_creation_tokens, 0)));
}

/* content_block_stop for the open block, if any. */
static int anth_block_stop(struct rt_translate_stream *st, struct tg_buf *out)
{
    int rc;

    if (st->block < 0)
        return 0;
    rc = emit(out, "content_block_stop",
              json_pack("{s:s,s:i}", "type", "content_block_stop", "index", st->block));
    st->block = -1;
    return rc;
}

/* The open block closed and a new one of kind started (block: its content_block, taken). */
static int anth_block_start(struct rt_translate_stream *st, int kind, json_t *block,
                            struct tg_buf *out)
{
    int rc = anth_block_stop(st, out);

    if (rc != 0) {
        json_decref(block);
        return rc;
    }
    st->block = st->n_blocks++;
    st->block_kind = kind;
    return emit(out, "content_block_start",
                json_pack("{s:s,s:i,s:o}", "type", "content_block_start", "index", st->block,
                          "content_block", block));
}

/* A text or thinking delta in a block of its kind (started when another is open). */
static int anth_delta(struct rt_translate_stream *st, int kind, const json_t *piece,
                      struct tg_buf *out)
{
    const char *member = kind == BLOCK_TEXT ? "text" : "thinking";
    int rc = 0;

    if (st->block < 0 || st->block_kind != kind)
        rc = anth_block_start(st, kind,
                              kind == BLOCK_TEXT
                                  ? json_pack("{s:s,s:s}", "type", "text", "text", "")
                                  : json_pack("{s:s,s:s,s:s}", "type", "thinking", "thinking",
                                              "", "signature", ""),
                              out);
    if (rc == 0)
        rc = emit(out, "content_block_delta",
                  json_pack("{s:s,s:i,s:{s:s,s:O}}", "type", "content_block_delta", "index",
                            st->block, "delta", "type",
                            kind == BLOCK_TEXT ? "text_delta" : "thinking_delta", member,
                            piece));
    return rc;
}

static int anth_finish(struct rt_translate_stream *st, struct tg_buf *out)
{
    int rc = 0;

    if (st->finished)
        return 0;
    if (!st->started)
        rc = anth_start(st, out);
    if (rc == 0 && st->n_blocks == 0) /* an answer without content: one empty text block */
        rc = anth_block_start(st, BLOCK_TEXT, json_pack("{s:s,s:s}", "type", "text", "text", ""),
                              out);
    if (rc == 0)
        rc = anth_block_stop(st, out);
    if (rc == 0)
        rc = emit(out, "message_delta",
                  json_pack("{s:s,s:{s:s,s:n},s:o}", "type", "message_delta", "delta",
                            "stop_reason", st->finish[0] ? st->finish : "end_turn",
                            "stop_sequence", "usage",
                            rt_tr_messages_usage(st->prompt_tokens, st->cache_read_tokens,
                                           st->cache_creation_tokens, st->completion_tokens)));
    if (rc == 0)
        rc = emit(out, "message_stop", json_pack("{s:s}", "type", "message_stop"));
    st->finished = 1;
    return rc;
}

static json_t *oai_chunk(struct rt_translate_stream *st, json_t *delta, const char *finish)
{
    return json_pack("{s:s,s:s,s:I,s:s,s:[{s:i,s:o,s:s?}]}", "id", st->id, "object",
                     "chat.completion.chunk", "created", (json_int_t)st->created_s, "model",
                     st->model, "choices", "index", 0, "delta", delta, "finish_reason", finish);
}

static int oai_finish(struct rt_translate_stream *st, struct tg_buf *out)
{
    int rc;

    if (st->finished)
        return 0;
    rc = emit(out, NULL,
              json_pack("{s:s,s:s,s:I,s:s,s:[],s:o}", "id", st->id, "object",
                        "chat.completion.chunk", "created", (json_int_t)st->created_s, "model",
                        st->model, "choices", "usage",
                        rt_tr_chat_usage(st->prompt_tokens, st->cache_read_tokens,
                                         st->cache_creation_tokens, st->completion_tokens)));
    if (rc == 0 && tg_buf_puts(out, "data: [DONE]\n\n") != 0)
        rc = TG_EFULL;
    st->finished = 1;
    return rc;
}

/* One OpenAI tool_calls delta entry as Anthropic events: the call's first piece starts a
 * tool_use block, its argument fragments are input_json_delta. TG_EPROTO when the calls are
 * more than RT_TRANSLATE_TOOLS_MAX or a call's pieces come after another block started. */
static int chat_tool_delta(struct rt_translate_stream *st, const json_t *tc, size_t pos,
                           struct tg_buf *out)
{
    const json_t *fn = json_object_get(tc, "function");
    const json_t *ix = json_object_get(tc, "index");
    const json_t *args = json_object_get(fn, "arguments");
    int key = json_is_integer(ix) && json_integer_value(ix) >= 0 &&
                      json_integer_value(ix) < INT_MAX
                  ? (int)json_integer_value(ix)
                  : (int)pos;
    int k, rc = 0;

    for (k = 0; k < st->n_tools; k++) {
        if (st->tool_key[k] == key)
            break;
    }
    if (k == st->n_tools) {
        const char *id = json_string_value(json_object_get(tc, "id"));
        const char *name = json_string_value(json_object_get(fn, "name"));
        char idbuf[72];

        if (st->n_tools >= RT_TRANSLATE_TOOLS_MAX)
            return TG_EPROTO;
        if (id != NULL)
            rt_tr_copy_utf8(idbuf, sizeof(idbuf), "", id);
        else
            snprintf(idbuf, sizeof(idbuf), "toolu_%d", key);
        st->tool_key[k] = key;
        st->n_tools++;
        rc = anth_block_start(st, BLOCK_TOOL,
                              json_pack("{s:s,s:s,s:s,s:{}}", "type", "tool_use", "id", idbuf,
                                        "name", name != NULL ? name : "", "input"),
                              out);
        st->tool_block[k] = st->block;
    } else if (st->block != st->tool_block[k]) {
        return TG_EPROTO; /* interleaved calls: Anthropic's blocks do not interleave */
    }
    if (rc == 0 && json_is_string(args) && json_string_length(args) > 0)
        rc = emit(out, "content_block_delta",
                  json_pack("{s:s,s:i,s:{s:s,s:O}}", "type", "content_block_delta", "index",
                            st->block, "delta", "type", "input_json_delta", "partial_json",
                            args));
    return rc;
}

/* One entry of a chunk's thinking_blocks (LiteLLM's field, from Bedrock Converse) as Anthropic
 * events: a thinking entry's signature a signature_delta of the thinking block (its text came
 * as reasoning_content), a redacted_thinking entry a redacted_thinking block. Other entries have
 * nothing to say. */
static int chat_thinking_delta(struct rt_translate_stream *st, const json_t *tb,
                               struct tg_buf *out)
{
    const json_t *sig = json_object_get(tb, "signature"), *data = json_object_get(tb, "data");
    int rc = 0;

    if (rt_tr_str_eq(json_object_get(tb, "type"), "redacted_thinking") && json_is_string(data))
        return anth_block_start(st, BLOCK_REDACTED,
                                json_pack("{s:s,s:O}", "type", "redacted_thinking", "data", data),
                                out);
    if (!rt_tr_str_eq(json_object_get(tb, "type"), "thinking") || !json_is_string(sig) ||
        json_string_length(sig) == 0)
        return 0;
    if (st->block < 0 || st->block_kind != BLOCK_THINKING)
        rc = anth_block_start(st, BLOCK_THINKING,
                              json_pack("{s:s,s:s,s:s}", "type", "thinking", "thinking", "",
                                        "signature", ""),
                              out);
    if (rc == 0)
        rc = emit(out, "content_block_delta",
                  json_pack("{s:s,s:i,s:{s:s,s:O}}", "type", "content_block_delta", "index",
                            st->block, "delta", "type", "signature_delta", "signature", sig));
    return rc;
}

/* OpenAI chunks in, Anthropic events out. */
static int chat_to_messages(struct rt_translate_stream *st, const char *data, size_t len,
                            struct tg_buf *out)
{
    json_t *j;
    json_t *c0, *delta;
    json_t *usage;
    json_t *fin, *tc;
    size_t k;
    int rc = 0;

    if (len == 6 && memcmp(data, "[DONE]", 6) == 0)
        return anth_finish(st, out);
    j = json_loadb(data, len, 0, NULL);
    if (!json_is_object(j)) {
        json_decref(j);
        return TG_EPROTO;
    }
    if (json_is_object(json_object_get(j, "error"))) {
        /* in-band upstream error: pass it on in Anthropic shape */
        json_t *msg = json_object_get(json_object_get(j, "error"), "message");

        rc = emit(out, "error",
                  json_pack("{s:s,s:{s:s,s:s}}", "type", "error", "error", "type", "api_error",
                            "message", json_is_string(msg) ? json_string_value(msg) : "error"));
        st->finished = 1;
        json_decref(j);
        return rc;
    }
    if (!st->started) {
        json_t *id = json_object_get(j, "id");

        if (json_is_string(id))
            rt_tr_copy_utf8(st->id, sizeof(st->id), "msg_", json_string_value(id));
    }
    usage = json_object_get(j, "usage");
    if (json_is_object(usage)) {
        st->prompt_tokens = rt_tr_int_or_zero(usage, "prompt_tokens");
        st->completion_tokens = rt_tr_int_or_zero(usage, "completion_tokens");
        st->cache_read_tokens = rt_tr_chat_cached(usage);
    }
    if (!st->started)
        rc = anth_start(st, out);
    c0 = json_array_get(json_object_get(j, "choices"), 0);
    delta = json_object_get(c0, "delta");
    if (rc == 0 && json_is_string(json_object_get(delta, "reasoning_content")) &&
        json_string_length(json_object_get(delta, "reasoning_content")) > 0)
        rc = anth_delta(st, BLOCK_THINKING, json_object_get(delta, "reasoning_content"), out);
    json_array_foreach(json_object_get(delta, "thinking_blocks"), k, tc) {
        if (rc == 0)
            rc = chat_thinking_delta(st, tc, out);
    }
    if (rc == 0 && json_is_string(json_object_get(delta, "content")) &&
        json_string_length(json_object_get(delta, "content")) > 0)
        rc = anth_delta(st, BLOCK_TEXT, json_object_get(delta, "content"), out);
    if (rc == 0 && json_is_string(json_object_get(delta, "refusal")) &&
        json_string_length(json_object_get(delta, "refusal")) > 0)
        rc = anth_delta(st, BLOCK_TEXT, json_object_get(delta, "refusal"), out);
    json_array_foreach(json_object_get(delta, "tool_calls"), k, tc) {
        if (rc == 0)
            rc = chat_tool_delta(st, tc, k, out);
    }
    fin = json_object_get(c0, "finish_reason");
    if (json_is_string(fin))
        snprintf(st->finish, sizeof(st->finish), "%s", rt_tr_finish_to_stop(json_string_value(fin)));
    json_decref(j);
    return rc;
}

/* An Anthropic content_block_start: a tool_use block starts an OpenAI tool call (or, the JSON
 * tool of a response_format, the text that follows). Its input is {} when the input streams in
 * input_json_delta events (always, from Anthropic); a non-empty one is the call's arguments. */
static int messages_block_start(struct rt_translate_stream *st, const json_t *j,
                                struct tg_buf *out)
{
    const json_t *b = json_object_get(j, "content_block");
    const json_t *ix = json_object_get(j, "index");
    const char *id = json_string_value(json_object_get(b, "id"));
    const char *name = json_string_value(json_object_get(b, "name"));
    const json_t *text = json_object_get(b, "text");
    const json_t *input = json_object_get(b, "input");
    char idbuf[72];
    char *args;
    int k, rc;

    if (json_is_string(text) && json_string_length(text) > 0)
        return emit(out, NULL, oai_chunk(st, json_pack("{s:O}", "content", text), NULL));
    if (rt_tr_str_eq(json_object_get(b, "type"), "redacted_thinking")) {
        /* LiteLLM's thinking_blocks: the client sends the block back as it came */
        const json_t *data = json_object_get(b, "data");

        if (!json_is_string(data))
            return TG_EPROTO;
        return emit(out, NULL,
                    oai_chunk(st,
                              json_pack("{s:[{s:s,s:O}]}", "thinking_blocks", "type",
                                        "redacted_thinking", "data", data),
                              NULL));
    }
    if (!rt_tr_str_eq(json_object_get(b, "type"), "tool_use"))
        return 0;
    if (!json_is_integer(ix) || json_integer_value(ix) < 0 || json_integer_value(ix) >= INT_MAX ||
        id == NULL || name == NULL)
        return TG_EPROTO;
    args = json_object_size(input) > 0 ? json_dumps(input, JSON_COMPACT) : NULL;
    if ((st->flags & RT_TRANSLATE_JSON_OUTPUT) && strcmp(name, RT_TRANSLATE_JSON_TOOL) == 0 &&
        st->json_block < 0) {
        st->json_block = (int)json_integer_value(ix);
        rc = args != NULL
                 ? emit(out, NULL, oai_chunk(st, json_pack("{s:s}", "content", args), NULL))
                 : 0;
        free(args);
        return rc;
    }
    if (st->n_tools >= RT_TRANSLATE_TOOLS_MAX) {
        free(args);
        return TG_EPROTO;
    }
    k = st->n_tools++;
    st->tool_key[k] = (int)json_integer_value(ix);
    st->tool_args[k] = args != NULL;
    rt_tr_copy_utf8(idbuf, sizeof(idbuf), "", id);
    rc = emit(out, NULL,
              oai_chunk(st,
                        json_pack("{s:[{s:i,s:s,s:s,s:{s:s,s:s}}]}", "tool_calls", "index", k,
                                  "id", idbuf, "type", "function", "function", "name", name,
                                  "arguments", args != NULL ? args : ""),
                        NULL));
    free(args);
    return rc;
}

/* An Anthropic content_block_delta: text, thinking or a tool call's input fragment. */
static int messages_block_delta(struct rt_translate_stream *st, const json_t *j,
                                struct tg_buf *out)
{
    const json_t *d = json_object_get(j, "delta");
    const json_t *ix = json_object_get(j, "index");
    const json_t *text = json_object_get(d, "text");
    const json_t *thinking = json_object_get(d, "thinking");
    const json_t *pj = json_object_get(d, "partial_json");
    const json_t *sig = json_object_get(d, "signature");
    int k;

    if (json_is_string(text))
        return emit(out, NULL, oai_chunk(st, json_pack("{s:O}", "content", text), NULL));
    if (json_is_string(thinking))
        return emit(out, NULL,
                    oai_chunk(st, json_pack("{s:O}", "reasoning_content", thinking), NULL));
    if (rt_tr_str_eq(json_object_get(d, "type"), "signature_delta") && json_is_string(sig))
        /* the thinking block's signature, as LiteLLM streams it: a thinking_blocks entry */
        return emit(out, NULL,
                    oai_chunk(st,
                              json_pack("{s:[{s:s,s:s,s:O}]}", "thinking_blocks", "type",
                                        "thinking", "thinking", "", "signature", sig),
                              NULL));
    if (!json_is_string(pj) || json_string_length(pj) == 0)
        return 0; /* deltas of other kinds: OpenAI has no place for them */
    if (!json_is_integer(ix))
        return TG_EPROTO;
    if (st->json_block >= 0 && json_integer_value(ix) == st->json_block)
        return emit(out, NULL, oai_chunk(st, json_pack("{s:O}", "content", pj), NULL));
    for (k = 0; k < st->n_tools; k++) {
        if (st->tool_key[k] != json_integer_value(ix))
            continue;
        st->tool_args[k] = 1;
        return emit(out, NULL,
                    oai_chunk(st,
                              json_pack("{s:[{s:i,s:{s:O}}]}", "tool_calls", "index", k,
                                        "function", "arguments", pj),
                              NULL));
    }
    return TG_EPROTO; /* input for a block that never started as a tool_use */
}

/* "{}" as the arguments of each call whose block is ix (all calls: ix -1) that has had none:
 * Anthropic streams an input without members as no input_json_delta, or an empty one, and
 * arguments "" do not parse as JSON in the client (OpenAI always sends an object). */
static int messages_empty_args(struct rt_translate_stream *st, json_int_t ix, struct tg_buf *out)
{
    int k, rc = 0;

    for (k = 0; k < st->n_tools && rc == 0; k++) {
        if (st->tool_args[k] || (ix >= 0 && st->tool_key[k] != ix))
            continue;
        st->tool_args[k] = 1;
        rc = emit(out, NULL,
                  oai_chunk(st,
                            json_pack("{s:[{s:i,s:{s:s}}]}", "tool_calls", "index", k,
                                      "function", "arguments", "{}"),
                            NULL));
    }
    return rc;
}

/* Anthropic events in, OpenAI chunks out. */
static int messages_to_chat(struct rt_translate_stream *st, const char *data, size_t len,
                            struct tg_buf *out)
{
    json_t *j = json_loadb(data, len, 0, NULL);
    const char *type;
    int rc = 0;

    if (!json_is_object(j)) {
        json_decref(j);
        return TG_EPROTO;
    }
    type = json_string_value(json_object_get(j, "type"));
    if (type == NULL) {
        rc = TG_EPROTO;
    } else if (strcmp(type, "message_start") == 0) {
        json_t *m = json_object_get(j, "message");
        json_t *id = json_object_get(m, "id");

        if (json_is_string(id))
            rt_tr_copy_utf8(st->id, sizeof(st->id), "", json_string_value(id));
        json_t *u = json_object_get(m, "usage");

        st->prompt_tokens = rt_tr_messages_prompt(u);
        st->cache_read_tokens = rt_tr_int_or_zero(u, "cache_read_input_tokens");
        st->cache_creation_tokens = rt_tr_int_or_zero(u, "cache_creation_input_tokens");
        st->completion_tokens = rt_tr_int_or_zero(u, "output_tokens");
        st->started = 1;
        rc = emit(out, NULL,
                  oai_chunk(st, json_pack("{s:s,s:s}", "role", "assistant", "content", ""),
                            NULL));
    } else if (strcmp(type, "content_block_start") == 0) {
        rc = messages_block_start(st, j, out);
    } else if (strcmp(type, "content_block_delta") == 0) {
        rc = messages_block_delta(st, j, out);
    } else if (strcmp(type, "content_block_stop") == 0) {
        const json_t *ix = json_object_get(j, "index");

        rc = json_is_integer(ix) && json_integer_value(ix) >= 0
                 ? messages_empty_args(st, json_integer_value(ix), out)
                 : 0;
    } else if (strcmp(type, "message_delta") == 0) {
        json_t *usage = json_object_get(j, "usage");
        json_t *sr = json_object_get(json_object_get(j, "delta"), "stop_reason");
        const char *f = rt_tr_stop_to_finish(json_string_value(sr));

        if (json_is_integer(json_object_get(usage, "output_tokens")))
            st->completion_tokens = rt_tr_int_or_zero(usage, "output_tokens");
        if (json_is_integer(json_object_get(usage, "input_tokens"))) {
            st->prompt_tokens = rt_tr_messages_prompt(usage);
            st->cache_read_tokens = rt_tr_int_or_zero(usage, "cache_read_input_tokens");
            st->cache_creation_tokens = rt_tr_int_or_zero(usage, "cache_creation_input_tokens");
        }
        if (strcmp(f, "tool_calls") == 0 && st->json_block >= 0 && st->n_tools == 0)
            f = "stop"; /* the forced JSON tool ended the answer, not a call of the client's */
        snprintf(st->finish, sizeof(st->finish), "%s", f);
        rc = messages_empty_args(st, -1, out); /* blocks the upstream never stopped */
        if (rc == 0)
            rc = emit(out, NULL, oai_chunk(st, json_object(), st->finish));
    } else if (strcmp(type, "message_stop") == 0) {
        rc = oai_finish(st, out);
    } else if (strcmp(type, "error") == 0) {
        json_t *msg = json_object_get(json_object_get(j, "error"), "message");

        rc = emit(out, NULL,
                  json_pack("{s:{s:s,s:s}}", "error", "message",
                            json_is_string(msg) ? json_string_value(msg) : "error", "type",
                            "api_error"));
        st->finished = 1;
    }
    /* ping: nothing to say in OpenAI's shape */
    json_decref(j);
    return rc;
}

int rt_translate_stream_event(struct rt_translate_stream *st, const char *event, const char *data,
                              size_t len, struct tg_buf *out)
{
    struct rt_translate_stream saved;
    size_t before = out->len;
    int rc;

    (void)event;
    if (st->finished)
        return 0;
    saved = *st;
    if (st->dir == RT_TRANSLATE_CHAT_TO_MESSAGES)
        rc = chat_to_messages(st, data, len, out);
    else if (st->dir == RT_TRANSLATE_MESSAGES_TO_CHAT)
        rc = messages_to_chat(st, data, len, out);
    else
        return TG_EINVAL;
    if (rc == TG_EPROTO) {
        /* an event refused half-way: what it wrote and what it changed go */
        *st = saved;
        out->len = before;
        out->data[before] = '\0';
    }
    return rc;
}

int rt_translate_stream_finish(struct rt_translate_stream *st, struct tg_buf *out)
{
    if (st->dir == RT_TRANSLATE_CHAT_TO_MESSAGES)
        return anth_finish(st, out);
    if (st->dir == RT_TRANSLATE_MESSAGES_TO_CHAT)
        return oai_finish(st, out);
    return 0;
}
