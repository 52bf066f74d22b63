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

int rt_dialect_usage_chunk(struct rt_dialect_stream *st, struct tg_buf *out)
{
    return emit(json_pack("{s:s,s:s,s:I,s:s,s:[],s:{s:I,s:I,s:I}}", "id", st->id, "object",
                          "chat.completion.chunk", "created", (json_int_t)st->created_s, "model",
                          st->model, "choices", "usage", "prompt_tokens",
                          (json_int_t)st->prompt_tokens, "completion_tokens",
                          (json_int_t)st->completion_tokens, "total_tokens",
                          (json_int_t)(st->prompt_tokens + st->completion_tokens)),
                out);
}

int rt_dialect_done(struct tg_buf *out)
{
    return tg_buf_puts(out, "data: [DONE]\n\n") != 0 ? TG_EFULL : 0;
}

/* Standard base64 (RFC 4648 section 4, with padding) of data into out (cap bytes); 0 when it
 * does not fit, else the length. */
static size_t b64(const unsigned char *p, size_t len, char *out, size_t cap)
{
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t n = 0;

    if (cap < (len + 2) / 3 * 4 + 1)
        return 0;
    for (size_t i = 0; i < len; i += 3) {
        unsigned v = (unsigned)p[i] << 16;

        if (i + 1 < len)
            v |= (unsigned)p[i + 1] << 8;
        if (i + 2 < len)
            v |= p[i + 2];
        out[n++] = tab[(v >> 18) & 63];
        out[n++] = tab[(v >> 12) & 63];
        out[n++] = i + 1 < len ? tab[(v >> 6) & 63] : '=';
        out[n++] = i + 2 < len ? tab[v & 63] : '=';
    }
    out[n] = '\0';
    return n;
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
        b64(bytes, n * 4, text, (n * 4 + 2) / 3 * 4 + 1);
        json_object_set_new(d, "embedding", json_string(text));
        free(bytes);
        free(text);
    }
    return 0;
}
