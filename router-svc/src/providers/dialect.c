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
