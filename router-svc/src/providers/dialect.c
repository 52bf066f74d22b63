/* dialect: what every dialect of its own shares when it writes OpenAI chat chunks. See
 * provider.h (struct rt_dialect). */
#include "providers/provider.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tg_err.h"

void rt_dialect_stream_init(struct rt_dialect_stream *st, const char *model, int64_t created_s)
{
    memset(st, 0, sizeof(*st));
    snprintf(st->model, sizeof(st->model), "%s", model != NULL ? model : "");
    snprintf(st->id, sizeof(st->id), "chatcmpl-%lld", (long long)created_s);
    st->created_s = created_s;
    st->open_tool = -1;
}

/* "data: <j>\n\n" into out; takes j. */
static int emit(json_t *j, struct tg_buf *out)
{
    char *s = j != NULL ? json_dumps(j, JSON_COMPACT) : NULL;
    int rc;

    json_decref(j);
    if (s == NULL)
        return TG_ENOMEM;
    rc = tg_buf_printf(out, "data: %s\n\n", s);
    free(s);
    return rc != 0 || out->truncated ? TG_EFULL : 0;
}

int rt_dialect_chunk(struct rt_dialect_stream *st, json_t *delta, const char *finish,
                     struct tg_buf *out)
{
    json_t *choice;

    if (delta == NULL)
        delta = json_object();
    if (!st->started) {
        json_object_set_new(delta, "role", json_string("assistant"));
        st->started = 1;
    }
    choice = json_pack("{s:i,s:o,s:o}", "index", 0, "delta", delta, "finish_reason",
                       finish != NULL ? json_string(finish) : json_null());
    return emit(json_pack("{s:s,s:s,s:I,s:s,s:[o]}", "id", st->id, "object",
                          "chat.completion.chunk", "created", (json_int_t)st->created_s, "model",
                          st->model, "choices", choice),
                out);
}

json_t *rt_dialect_usage(int64_t prompt, int64_t cache_read, int64_t cache_creation,
                         int64_t completion, int64_t reasoning)
{
    json_t *u;

    prompt = prompt < 0 ? 0 : prompt;
    completion = completion < 0 ? 0 : completion;
    cache_read = cache_read < 0 ? 0 : cache_read > prompt ? prompt : cache_read;
    cache_creation = cache_creation < 0                       ? 0
                     : cache_creation > prompt - cache_read ? prompt - cache_read
                                                            : cache_creation;
    reasoning = reasoning < 0 ? 0 : reasoning > completion ? completion : reasoning;
    u = json_pack("{s:I,s:I,s:I}", "prompt_tokens", (json_int_t)prompt, "completion_tokens",
                  (json_int_t)completion, "total_tokens", (json_int_t)(prompt + completion));
    if (u == NULL)
        return NULL;
    if (cache_read > 0)
        json_object_set_new(u, "prompt_tokens_details",
                            json_pack("{s:I}", "cached_tokens", (json_int_t)cache_read));
    if (reasoning > 0)
        json_object_set_new(u, "completion_tokens_details",
                            json_pack("{s:I}", "reasoning_tokens", (json_int_t)reasoning));
    if (cache_creation > 0)
        json_object_set_new(u, "cache_creation_input_tokens", json_integer(cache_creation));
    return u;
}

int rt_dialect_usage_chunk(struct rt_dialect_stream *st, struct tg_buf *out)
{
    return emit(json_pack("{s:s,s:s,s:I,s:s,s:[],s:o}", "id", st->id, "object",
                          "chat.completion.chunk", "created", (json_int_t)st->created_s, "model",
                          st->model, "choices", "usage",
                          rt_dialect_usage(st->prompt_tokens, st->cache_read_tokens,
                                           st->cache_creation_tokens, st->completion_tokens,
                                           st->reasoning_tokens)),
                out);
}

int rt_dialect_done(struct tg_buf *out)
{
    return tg_buf_puts(out, "data: [DONE]\n\n") != 0 ? TG_EFULL : 0;
}

int rt_dialect_embeddings_base64(json_t *list)
{
    size_t i;
    json_t *d;

    json_array_foreach(json_object_get(list, "data"), i, d)
    {
        json_t *e = json_object_get(d, "embedding");
        size_t n = json_array_size(e), k;
        unsigned char *bytes;
        char *text;
        json_t *v;

        if (!json_is_array(e))
            continue;
        bytes = malloc(n * 4 + 1);
        text = malloc((n * 4 + 2) / 3 * 4 + 1);
        if (bytes == NULL || text == NULL) {
            free(bytes);
            free(text);
            return TG_ENOMEM;
        }
        json_array_foreach(e, k, v)
        {
            /* IEEE 754 single precision, little-endian: what OpenAI's base64 holds */
            float f = (float)json_number_value(v);
            uint32_t u;

            memcpy(&u, &f, 4);
            bytes[4 * k] = (unsigned char)u;
            bytes[4 * k + 1] = (unsigned char)(u >> 8);
            bytes[4 * k + 2] = (unsigned char)(u >> 16);
            bytes[4 * k + 3] = (unsigned char)(u >> 24);
        }
        rt_base64(bytes, n * 4, text, (n * 4 + 2) / 3 * 4 + 1, 0);
        json_object_set_new(d, "embedding", json_string(text));
        free(bytes);
        free(text);
    }
    return 0;
}

int rt_dialect_wire(const struct rt_dialect *d, enum rt_api client, struct rt_wire *out)
{
    out->dialect = d;
    out->dir = RT_TRANSLATE_NONE;
    out->responses = 0;
    switch (client) {
    case RT_API_CHAT:
        out->api = RT_API_CHAT;
        return 0;
    case RT_API_MESSAGES:
        out->api = RT_API_CHAT;
        out->dir = RT_TRANSLATE_CHAT_TO_MESSAGES;
        return 0;
    case RT_API_EMBEDDINGS:
        out->api = RT_API_EMBEDDINGS;
        return 0;
    case RT_API_RESPONSES:
        out->api = RT_API_CHAT;
        out->responses = 1;
        return 0;
    default:
        return TG_EINVAL;
    }
}

#define PDF_PREFIX "data:application/pdf;base64,"

int rt_dialect_pdf(const json_t *file, size_t k, const char **data, const char **filename,
                   char *err, size_t errlen)
{
    const char *fd = json_string_value(json_object_get(file, "file_data"));
    const json_t *fn = json_object_get(file, "filename");

    if (json_object_get(file, "file_id") != NULL) {
        snprintf(err, errlen, "messages: content[%zu].file.file_id: an uploaded file cannot be "
                 "translated (send the PDF as file_data)", k);
        return TG_EINVAL;
    }
    if (fd == NULL || strncmp(fd, PDF_PREFIX, strlen(PDF_PREFIX)) != 0) {
        snprintf(err, errlen, "messages: content[%zu].file.file_data: must be a "
                 PDF_PREFIX " URL (PDFs are the files both sides take)", k);
        return TG_EINVAL;
    }
    if (fn != NULL && !json_is_string(fn)) {
        snprintf(err, errlen, "messages: content[%zu].file.filename: must be a string", k);
        return TG_EINVAL;
    }
    *data = fd + strlen(PDF_PREFIX);
    *filename = json_string_value(fn);
    return 0;
}

int rt_dialect_content(const json_t *content, json_t *out,
                       json_t *(*image)(const json_t *image_url, char *err, size_t errlen),
                       json_t *(*file)(const json_t *file, size_t k, char *err, size_t errlen),
                       int skip_empty, char *err, size_t errlen)
{
    size_t i;
    json_t *p;

    if (content == NULL || json_is_null(content))
        return 0;
    if (json_is_string(content)) {
        if (!skip_empty || json_string_length(content) > 0)
            json_array_append_new(out, json_pack("{s:O}", "text", content));
        return 0;
    }
    if (!json_is_array(content)) {
        snprintf(err, errlen, "messages: content must be a string, an array of parts or null");
        return TG_EINVAL;
    }
    json_array_foreach(content, i, p)
    {
        const char *type = json_string_value(json_object_get(p, "type"));
        json_t *b;

        if (type != NULL && strcmp(type, "text") == 0 &&
            json_is_string(json_object_get(p, "text"))) {
            b = json_pack("{s:O}", "text", json_object_get(p, "text"));
        } else if (type != NULL && strcmp(type, "image_url") == 0) {
            b = image(json_object_get(p, "image_url"), err, errlen);
            if (b == NULL)
                return TG_EINVAL;
        } else if (type != NULL && strcmp(type, "file") == 0 && file != NULL) {
            b = file(json_object_get(p, "file"), i, err, errlen);
            if (b == NULL)
                return TG_EINVAL;
        } else {
            snprintf(err, errlen, "messages: content part type \"%.32s\" is not supported here",
                     type != NULL ? type : "(none)");
            return TG_EINVAL;
        }
        json_array_append_new(out, b);
    }
    return 0;
}

json_t *rt_dialect_call_args(const json_t *fn)
{
    const char *a = json_string_value(json_object_get(fn, "arguments"));
    json_t *j = a != NULL ? json_loads(a, 0, NULL) : NULL;

    if (json_is_object(j))
        return j;
    json_decref(j);
    return a != NULL && a[0] != '\0' ? json_pack("{s:s}", "value", a) : json_object();
}

int64_t rt_dialect_count(const json_t *o, const char *k)
{
    const json_t *v = json_object_get(o, k);

    return json_is_integer(v) && json_integer_value(v) > 0 ? json_integer_value(v) : 0;
}

int rt_dialect_stream_close(struct rt_dialect_stream *st, struct tg_buf *out)
{
    int rc;

    if (st->ended)
        return 0;
    if (!st->finished)
        return TG_EPROTO; /* cut before the provider said it finished */
    st->ended = 1;
    rc = rt_dialect_chunk(st, NULL, st->finish[0] != '\0' ? st->finish : "stop", out);
    if (rc == 0)
        rc = rt_dialect_usage_chunk(st, out);
    if (rc == 0)
        rc = rt_dialect_done(out);
    return rc;
}

const json_t *rt_dialect_messages(const json_t *chat, json_t *sys,
                                  json_t *(*image)(const json_t *image_url, char *err,
                                                   size_t errlen),
                                  int skip_empty, char *err, size_t errlen)
{
    const json_t *msgs = json_object_get(chat, "messages");
    size_t i;
    json_t *m;

    if (!json_is_array(msgs) || json_array_size(msgs) == 0) {
        snprintf(err, errlen, "messages: a non-empty array is required");
        return NULL;
    }
    json_array_foreach(msgs, i, m)
    {
        const char *role = json_string_value(json_object_get(m, "role"));

        if (role == NULL) {
            snprintf(err, errlen, "messages: each message needs a role");
            return NULL;
        }
        if (rt_dialect_is_system(role) && rt_dialect_content(json_object_get(m, "content"), sys,
                                                             image, NULL, skip_empty, err,
                                                             errlen) != 0)
            return NULL;
    }
    return msgs;
}

int rt_dialect_is_system(const char *role)
{
    return strcmp(role, "system") == 0 || strcmp(role, "developer") == 0;
}

json_t *rt_dialect_tool_content(const json_t *content, int *is_error)
{
    size_t ml = strlen(RT_TRANSLATE_TOOL_ERROR_MARK);
    const json_t *first = json_is_array(content) ? json_array_get(content, 0) : content;
    const char *s = NULL;
    json_t *out;

    *is_error = 0;
    if (json_is_string(first))
        s = json_string_value(first);
    else if (json_is_object(first) && json_is_string(json_object_get(first, "type")) &&
             strcmp(json_string_value(json_object_get(first, "type")), "text") == 0)
        s = json_string_value(json_object_get(first, "text"));
    if (s == NULL || strncmp(s, RT_TRANSLATE_TOOL_ERROR_MARK, ml) != 0 ||
        (s[ml] != '\0' && s[ml] != ' '))
        return content != NULL ? json_incref((json_t *)content) : json_null();
    *is_error = 1;
    s += ml + (s[ml] == ' ');
    if (json_is_string(content))
        return json_string(s);
    out = json_copy((json_t *)content); /* shallow: the first part is replaced, not changed */
    if (out == NULL)
        return NULL;
    if (s[0] == '\0')
        json_array_remove(out, 0);
    else
        json_array_set_new(out, 0, json_pack("{s:s,s:s}", "type", "text", "text", s));
    return out;
}

int rt_dialect_thinking_blocks(const json_t *m, size_t i, json_t *out, int converse, char *err,
                               size_t errlen)
{
    const json_t *tb = json_object_get(m, "thinking_blocks");
    const json_t *b;
    size_t k;

    if (tb == NULL || json_is_null(tb))
        return 0;
    if (!json_is_array(tb)) {
        snprintf(err, errlen, "messages[%zu].thinking_blocks: expected an array", i);
        return TG_EINVAL;
    }
    json_array_foreach(tb, k, b) {
        const char *type = json_string_value(json_object_get(b, "type"));
        const json_t *th = json_object_get(b, "thinking"), *sig = json_object_get(b, "signature");
        const json_t *data = json_object_get(b, "data");
        const char *bad = NULL;
        json_t *e;

        if (type == NULL)
            bad = "type";
        else if (strcmp(type, "thinking") == 0 && !json_is_string(th))
            bad = "thinking";
        else if (strcmp(type, "thinking") == 0 && !json_is_string(sig))
            bad = "signature";
        else if (strcmp(type, "redacted_thinking") == 0 && !json_is_string(data))
            bad = "data";
        if (bad != NULL) {
            snprintf(err, errlen, "messages[%zu].thinking_blocks[%zu].%s: expected a string", i,
                     k, bad);
            return TG_EINVAL;
        }
        if (strcmp(type, "thinking") == 0)
            e = converse ? json_pack("{s:{s:{s:O,s:O}}}", "reasoningContent", "reasoningText",
                                     "text", th, "signature", sig)
                         : json_pack("{s:s,s:O,s:O}", "type", "thinking", "thinking", th,
                                     "signature", sig);
        else if (strcmp(type, "redacted_thinking") == 0)
            e = converse ? json_pack("{s:{s:O}}", "reasoningContent", "redactedContent", data)
                         : json_pack("{s:s,s:O}", "type", "redacted_thinking", "data", data);
        else {
            snprintf(err, errlen, "messages[%zu].thinking_blocks[%zu].type: \"%.32s\" is not "
                     "thinking or redacted_thinking", i, k, type);
            return TG_EINVAL;
        }
        if (e == NULL || json_array_append_new(out, e) != 0) {
            snprintf(err, errlen, "out of memory");
            return TG_ENOMEM;
        }
    }
    return 0;
}
