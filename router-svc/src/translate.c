#include "translate.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tg_err.h"

/* Text of an Anthropic/OpenAI content value: a string, or an array of {type:"text", text}
 * parts joined with no separator. Returns new string (free) or NULL when there is no text. */
static char *content_text(const json_t *content)
{
    size_t total = 0;
    size_t i;
    json_t *part;
    char *out;

    if (json_is_string(content))
        return strdup(json_string_value(content));
    if (!json_is_array(content))
        return NULL;
    json_array_foreach(content, i, part) {
        json_t *t = json_object_get(part, "text");

        if (json_is_string(t))
            total += json_string_length(t);
    }
    out = malloc(total + 1);
    if (out == NULL)
        return NULL;
    out[0] = '\0';
    total = 0;
    json_array_foreach(content, i, part) {
        json_t *t = json_object_get(part, "text");

        if (json_is_string(t)) {
            memcpy(out + total, json_string_value(t), json_string_length(t));
            total += json_string_length(t);
        }
    }
    out[total] = '\0';
    return out;
}

/* prefix then s into dst (cap bytes, NUL-terminated), cut before the character that does not
 * fit: an id or name taken from a provider stays valid UTF-8, which json_pack requires (a cut
 * inside a character made every event of the stream fail). s is valid UTF-8 (from jansson). */
static void copy_utf8(char *dst, size_t cap, const char *prefix, const char *s)
{
    size_t pl = strnlen(prefix, cap - 1), sl = strlen(s), k;

    memcpy(dst, prefix, pl);
    k = sl < cap - 1 - pl ? sl : cap - 1 - pl;
    while (k > 0 && k < sl && ((unsigned char)s[k] & 0xC0u) == 0x80u)
        k--; /* s[k], the first byte left out, continues a character: leave it all out */
    memcpy(dst + pl, s, k);
    dst[pl + k] = '\0';
}

static void copy_field(json_t *dst, const char *dname, const json_t *src, const char *sname)
{
    json_t *v = json_object_get(src, sname);

    if (v != NULL && !json_is_null(v))
        json_object_set(dst, dname, v);
}

json_t *rt_translate_messages_to_chat(const json_t *req, const char *model, char *err,
                                      size_t errlen)
{
    json_t *out = NULL;
    json_t *msgs = NULL;
    json_t *in_msgs = json_object_get(req, "messages");
    json_t *system = json_object_get(req, "system");
    json_t *stop = json_object_get(req, "stop_sequences");
    json_t *meta = json_object_get(req, "metadata");
    json_t *m;
    size_t i;

    if (!json_is_array(in_msgs)) {
        snprintf(err, errlen, "messages: must be an array");
        return NULL;
    }
    out = json_object();
    msgs = json_array();
    if (out == NULL || msgs == NULL)
        goto fail;
    json_object_set_new(out, "model", json_string(model));
    if (system != NULL && !json_is_null(system)) {
        char *text = content_text(system);

        if (text != NULL) {
            json_array_append_new(msgs, json_pack("{s:s,s:s}", "role", "system", "content", text));
            free(text);
        }
    }
    json_array_foreach(in_msgs, i, m) {
        json_t *role = json_object_get(m, "role");
        char *text;

        if (!json_is_string(role)) {
            snprintf(err, errlen, "messages[%zu].role: must be a string", i);
            goto fail;
        }
        text = content_text(json_object_get(m, "content"));
        json_array_append_new(msgs, json_pack("{s:s,s:s}", "role", json_string_value(role),
                                              "content", text != NULL ? text : ""));
        free(text);
    }
    json_object_set_new(out, "messages", msgs);
    msgs = NULL;
    copy_field(out, "max_tokens", req, "max_tokens");
    copy_field(out, "temperature", req, "temperature");
    copy_field(out, "top_p", req, "top_p");
    if (json_is_array(stop) && json_array_size(stop) > 0)
        json_object_set(out, "stop", stop);
    if (json_is_object(meta))
        copy_field(out, "user", meta, "user_id");
    if (json_is_true(json_object_get(req, "stream"))) {
        json_object_set_new(out, "stream", json_true());
        json_object_set_new(out, "stream_options", json_pack("{s:b}", "include_usage", 1));
    }
    return out;
fail:
    json_decref(msgs);
    json_decref(out);
    if (err[0] == '\0')
        snprintf(err, errlen, "out of memory");
    return NULL;
}

json_t *rt_translate_chat_to_messages(const json_t *req, const char *model, char *err,
                                      size_t errlen)
{
    json_t *out = NULL;
    json_t *msgs = NULL;
    json_t *in_msgs = json_object_get(req, "messages");
    json_t *stop = json_object_get(req, "stop");
    json_t *mt = json_object_get(req, "max_tokens");
    json_t *user = json_object_get(req, "user");
    json_t *m;
    size_t i;
    char *system = NULL;
    size_t system_len = 0;

    if (!json_is_array(in_msgs)) {
        snprintf(err, errlen, "messages: must be an array");
        return NULL;
    }
    out = json_object();
    msgs = json_array();
    if (out == NULL || msgs == NULL)
        goto fail;
    json_object_set_new(out, "model", json_string(model));
    json_array_foreach(in_msgs, i, m) {
        json_t *role = json_object_get(m, "role");
        const char *r;
        char *text;

        if (!json_is_string(role)) {
            snprintf(err, errlen, "messages[%zu].role: must be a string", i);
            goto fail;
        }
        r = json_string_value(role);
        text = content_text(json_object_get(m, "content"));
        if (strcmp(r, "system") == 0 || strcmp(r, "developer") == 0) {
            size_t tl = text != NULL ? strlen(text) : 0;
            char *ns = realloc(system, system_len + tl + 2);

            if (ns == NULL) {
                free(text);
                goto fail;
            }
            system = ns;
            if (system_len > 0)
                system[system_len++] = '\n';
            if (tl > 0)
                memcpy(system + system_len, text, tl);
            system_len += tl;
            system[system_len] = '\0';
        } else {
            const char *ar = strcmp(r, "assistant") == 0 ? "assistant" : "user";

            json_array_append_new(msgs, json_pack("{s:s,s:s}", "role", ar, "content",
                                                  text != NULL ? text : ""));
        }
        free(text);
    }
    if (system != NULL)
        json_object_set_new(out, "system", json_string(system));
    json_object_set_new(out, "messages", msgs);
    msgs = NULL;
    if (!json_is_integer(mt))
        mt = json_object_get(req, "max_completion_tokens");
    if (json_is_integer(mt))
        json_object_set(out, "max_tokens", mt);
    else
        json_object_set_new(out, "max_tokens", json_integer(RT_TRANSLATE_DEFAULT_MAX_TOKENS));
    copy_field(out, "temperature", req, "temperature");
    copy_field(out, "top_p", req, "top_p");
    if (json_is_string(stop))
        json_object_set_new(out, "stop_sequences", json_pack("[O]", stop));
    else if (json_is_array(stop) && json_array_size(stop) > 0)
        json_object_set(out, "stop_sequences", stop);
    if (json_is_string(user))
        json_object_set_new(out, "metadata", json_pack("{s:O}", "user_id", user));
    if (json_is_true(json_object_get(req, "stream")))
        json_object_set_new(out, "stream", json_true());
    free(system);
    return out;
fail:
    free(system);
    json_decref(msgs);
    json_decref(out);
    if (err[0] == '\0')
        snprintf(err, errlen, "out of memory");
    return NULL;
}

static const char *finish_to_stop(const char *f)
{
    if (f == NULL)
        return "end_turn";
    if (strcmp(f, "length") == 0)
        return "max_tokens";
    if (strcmp(f, "tool_calls") == 0 || strcmp(f, "function_call") == 0)
        return "tool_use";
    return "end_turn";
}

static const char *stop_to_finish(const char *s)
{
    if (s == NULL)
        return "stop";
    if (strcmp(s, "max_tokens") == 0)
        return "length";
    if (strcmp(s, "tool_use") == 0)
        return "tool_calls";
    return "stop";
}

static json_int_t int_or_zero(const json_t *o, const char *name)
{
    json_t *v = json_object_get(o, name);

    return json_is_integer(v) ? json_integer_value(v) : 0;
}

/* total_tokens from two counts a provider sent: any integers jansson reads, so the sum saturates
 * instead of overflowing. */
static json_int_t tokens_sum(json_int_t a, json_int_t b)
{
    json_int_t s;

    if (__builtin_add_overflow(a, b, &s))
        return a > 0 ? LLONG_MAX : LLONG_MIN;
    return s;
}

/* The cache's part of an OpenAI usage object (prompt_tokens_details.cached_tokens), cut to the
 * prompt tokens. */
static json_int_t chat_cached(const json_t *usage)
{
    json_int_t p = int_or_zero(usage, "prompt_tokens");
    json_int_t c = int_or_zero(json_object_get(usage, "prompt_tokens_details"), "cached_tokens");

    return c < 0 ? 0 : c > p ? p : c;
}

/* Anthropic's usage for prompt (cache included), read and written from the cache, output. */
static json_t *messages_usage(json_int_t prompt, json_int_t read, json_int_t written,
                              json_int_t output)
{
    json_t *u;

    /* garbage counts cannot make the plain input negative (or overflow) */
    prompt = prompt < 0 ? 0 : prompt;
    read = read < 0 ? 0 : read > prompt ? prompt : read;
    written = written < 0 ? 0 : written > prompt - read ? prompt - read : written;
    u = json_pack("{s:I,s:I}", "input_tokens", prompt - read - written, "output_tokens",
                          output);

    if (u != NULL && written > 0)
        json_object_set_new(u, "cache_creation_input_tokens", json_integer(written));
    if (u != NULL && read > 0)
        json_object_set_new(u, "cache_read_input_tokens", json_integer(read));
    return u;
}

/* OpenAI's usage for the same counts (cache reads in prompt_tokens_details.cached_tokens). */
static json_t *chat_usage(json_int_t prompt, json_int_t read, json_int_t output)
{
    json_t *u = json_pack("{s:I,s:I,s:I}", "prompt_tokens", prompt, "completion_tokens", output,
                          "total_tokens", tokens_sum(prompt, output));

    if (u != NULL && read > 0)
        json_object_set_new(u, "prompt_tokens_details", json_pack("{s:I}", "cached_tokens", read));
    return u;
}

/* An Anthropic usage object's prompt total (input + cache reads + cache writes). */
static json_int_t messages_prompt(const json_t *usage)
{
    return tokens_sum(tokens_sum(int_or_zero(usage, "input_tokens"),
                                 int_or_zero(usage, "cache_read_input_tokens")),
                      int_or_zero(usage, "cache_creation_input_tokens"));
}

json_t *rt_translate_chat_resp_to_messages(const json_t *resp, const char *model)
{
    json_t *choices = json_object_get(resp, "choices");
    json_t *c0 = json_array_get(choices, 0);
    json_t *msg = json_object_get(c0, "message");
    json_t *usage = json_object_get(resp, "usage");
    json_t *id = json_object_get(resp, "id");
    char *text;
    char idbuf[96];
    json_t *out;

    if (!json_is_object(msg))
        return NULL;
    text = content_text(json_object_get(msg, "content"));
    copy_utf8(idbuf, sizeof(idbuf), "msg_", json_is_string(id) ? json_string_value(id) : "0");
    out = json_pack("{s:s,s:s,s:s,s:s,s:[{s:s,s:s}],s:s,s:n,s:o}", "id", idbuf, "type",
                    "message", "role", "assistant", "model", model, "content", "type", "text",
                    "text", text != NULL ? text : "", "stop_reason",
                    finish_to_stop(json_string_value(json_object_get(c0, "finish_reason"))),
                    "stop_sequence", "usage",
                    messages_usage(int_or_zero(usage, "prompt_tokens"), chat_cached(usage), 0,
                                   int_or_zero(usage, "completion_tokens")));
    free(text);
    return out;
}

json_t *rt_translate_messages_resp_to_chat(const json_t *resp, const char *model)
{
    json_t *content = json_object_get(resp, "content");
    json_t *usage = json_object_get(resp, "usage");
    json_t *id = json_object_get(resp, "id");
    json_int_t in, outk;
    char *text;
    json_t *out;

    if (!json_is_array(content))
        return NULL;
    text = content_text(content);
    in = messages_prompt(usage);
    outk = int_or_zero(usage, "output_tokens");
    out = json_pack("{s:s,s:s,s:I,s:s,s:[{s:i,s:{s:s,s:s},s:s}],s:o}", "id",
                    json_is_string(id) ? json_string_value(id) : "chatcmpl-0", "object",
                    "chat.completion", "created", (json_int_t)time(NULL), "model", model,
                    "choices", "index", 0, "message", "role", "assistant", "content",
                    text != NULL ? text : "", "finish_reason",
                    stop_to_finish(json_string_value(json_object_get(resp, "stop_reason"))),
                    "usage",
                    chat_usage(in, int_or_zero(usage, "cache_read_input_tokens"), outk));
    free(text);
    return out;
}

void rt_translate_stream_init(struct rt_translate_stream *st, enum rt_translate_dir dir,
                              const char *model, int64_t created_s)
{
    memset(st, 0, sizeof(*st));
    st->dir = dir;
    copy_utf8(st->model, sizeof(st->model), "", model != NULL ? model : "");
    snprintf(st->id, sizeof(st->id), "chatcmpl-0");
    st->created_s = created_s;
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

static int anth_start(struct rt_translate_stream *st, struct tg_buf *out)
{
    int rc;

    st->started = 1;
    rc = emit(out, "message_start",
              json_pack("{s:s,s:{s:s,s:s,s:s,s:s,s:[],s:n,s:n,s:o}}", "type", "message_start",
                        "message", "id", st->id, "type", "message", "role", "assistant", "model",
                        st->model, "content", "stop_reason", "stop_sequence", "usage",
                        messages_usage(st->prompt_tokens, st->cache_read_tokens,
                                       st->cache_creation_tokens, 0)));
    if (rc == 0)
        rc = emit(out, "content_block_start",
                  json_pack("{s:s,s:i,s:{s:s,s:s}}", "type", "content_block_start", "index", 0,
                            "content_block", "type", "text", "text", ""));
    return rc;
}

static int anth_finish(struct rt_translate_stream *st, struct tg_buf *out)
{
    int rc = 0;

    if (st->finished)
        return 0;
    if (!st->started)
        rc = anth_start(st, out);
    if (rc == 0)
        rc = emit(out, "content_block_stop",
                  json_pack("{s:s,s:i}", "type", "content_block_stop", "index", 0));
    if (rc == 0)
        rc = emit(out, "message_delta",
                  json_pack("{s:s,s:{s:s,s:n},s:o}", "type", "message_delta", "delta",
                            "stop_reason", st->finish[0] ? st->finish : "end_turn",
                            "stop_sequence", "usage",
                            messages_usage(st->prompt_tokens, st->cache_read_tokens,
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
                        chat_usage(st->prompt_tokens, st->cache_read_tokens,
                                   st->completion_tokens)));
    if (rc == 0 && tg_buf_puts(out, "data: [DONE]\n\n") != 0)
        rc = TG_EFULL;
    st->finished = 1;
    return rc;
}

/* OpenAI chunks in, Anthropic events out. */
static int chat_to_messages(struct rt_translate_stream *st, const char *data, size_t len,
                            struct tg_buf *out)
{
    json_t *j;
    json_t *c0;
    json_t *usage;
    json_t *content;
    json_t *fin;
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
            copy_utf8(st->id, sizeof(st->id), "msg_", json_string_value(id));
    }
    usage = json_object_get(j, "usage");
    if (json_is_object(usage)) {
        st->prompt_tokens = int_or_zero(usage, "prompt_tokens");
        st->completion_tokens = int_or_zero(usage, "completion_tokens");
        st->cache_read_tokens = chat_cached(usage);
    }
    if (!st->started)
        rc = anth_start(st, out);
    c0 = json_array_get(json_object_get(j, "choices"), 0);
    content = json_object_get(json_object_get(c0, "delta"), "content");
    if (rc == 0 && json_is_string(content) && json_string_length(content) > 0)
        rc = emit(out, "content_block_delta",
                  json_pack("{s:s,s:i,s:{s:s,s:O}}", "type", "content_block_delta", "index", 0,
                            "delta", "type", "text_delta", "text", content));
    fin = json_object_get(c0, "finish_reason");
    if (json_is_string(fin))
        snprintf(st->finish, sizeof(st->finish), "%s", finish_to_stop(json_string_value(fin)));
    json_decref(j);
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
            copy_utf8(st->id, sizeof(st->id), "", json_string_value(id));
        json_t *u = json_object_get(m, "usage");

        st->prompt_tokens = messages_prompt(u);
        st->cache_read_tokens = int_or_zero(u, "cache_read_input_tokens");
        st->cache_creation_tokens = int_or_zero(u, "cache_creation_input_tokens");
        st->completion_tokens = int_or_zero(u, "output_tokens");
        st->started = 1;
        rc = emit(out, NULL,
                  oai_chunk(st, json_pack("{s:s,s:s}", "role", "assistant", "content", ""),
                            NULL));
    } else if (strcmp(type, "content_block_delta") == 0) {
        json_t *text = json_object_get(json_object_get(j, "delta"), "text");

        if (json_is_string(text))
            rc = emit(out, NULL, oai_chunk(st, json_pack("{s:O}", "content", text), NULL));
    } else if (strcmp(type, "message_delta") == 0) {
        json_t *usage = json_object_get(j, "usage");
        json_t *sr = json_object_get(json_object_get(j, "delta"), "stop_reason");

        if (json_is_integer(json_object_get(usage, "output_tokens")))
            st->completion_tokens = int_or_zero(usage, "output_tokens");
        if (json_is_integer(json_object_get(usage, "input_tokens"))) {
            st->prompt_tokens = messages_prompt(usage);
            st->cache_read_tokens = int_or_zero(usage, "cache_read_input_tokens");
            st->cache_creation_tokens = int_or_zero(usage, "cache_creation_input_tokens");
        }
        snprintf(st->finish, sizeof(st->finish), "%s",
                 stop_to_finish(json_string_value(sr)));
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
    /* ping, content_block_start, content_block_stop: nothing to say in OpenAI's shape */
    json_decref(j);
    return rc;
}

int rt_translate_stream_event(struct rt_translate_stream *st, const char *event, const char *data,
                              size_t len, struct tg_buf *out)
{
    (void)event;
    if (st->finished)
        return 0;
    if (st->dir == RT_TRANSLATE_CHAT_TO_MESSAGES)
        return chat_to_messages(st, data, len, out);
    if (st->dir == RT_TRANSLATE_MESSAGES_TO_CHAT)
        return messages_to_chat(st, data, len, out);
    return TG_EINVAL;
}

int rt_translate_stream_finish(struct rt_translate_stream *st, struct tg_buf *out)
{
    if (st->dir == RT_TRANSLATE_CHAT_TO_MESSAGES)
        return anth_finish(st, out);
    if (st->dir == RT_TRANSLATE_MESSAGES_TO_CHAT)
        return oai_finish(st, out);
    return 0;
}
