/* translate_responses_stream: an OpenAI chat stream (chat.completion.chunk data) as a Responses
 * event stream (translate.h). Event names and members from OpenAI's API reference (Responses
 * streaming events). The stream's items are opened and closed in order, one open at a time:
 * a reasoning item (reasoning_content), a message item (content, or refusal), function_call
 * items (tool_calls, one per index). A thinking_blocks entry (LiteLLM's field) ends the thinking
 * block it signs: its signature closes the open reasoning item (the next reasoning_content opens
 * another), a redacted_thinking entry is a reasoning item of its own without content. The
 * closing events repeat each item's whole text, so the text is kept, in one buffer that grows by
 * doubling up to text_max (limits.max_response_bytes); when the request's include asks for
 * reasoning.encrypted_content the signatures and redacted data are kept there too, already
 * encoded (RT_TRANSLATE_REASONING_ENC_PREFIX). More is TG_ETOOBIG and the relay ends the stream
 * in-band naming the limit. */
#include "translate.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tg_err.h"
#include "translate_int.h"

#define RESP_TEXT_INITIAL_BYTES 1024u /* the kept text's first allocation */
#define RESP_ITEM_FRAME_BYTES 2048u   /* an item's closing events besides its text, at most */
#define RESP_FRAME_BYTES 4096u        /* the closing response object besides echo and items */

enum { ITEM_REASONING = 1, ITEM_TEXT, ITEM_REFUSAL, ITEM_CALL, ITEM_REDACTED };

struct resp_item {
    int kind;       /* ITEM_* */
    int done;       /* its closing events were written */
    int incomplete; /* closed by a finish that left it incomplete */
    int tool_index; /* ITEM_CALL: the chat tool_calls index */
    char id[96];
    char call_id[72];
    char name[129];
    size_t off, len; /* its text (or arguments) in the kept text, bytes */
    size_t enc_off, enc_len; /* its encrypted_content in the kept text, bytes (0: none) */
};

struct rt_resp_stream {
    char id[96];     /* the response's id */
    char model[129]; /* the name shown to the client */
    int64_t created_s;
    size_t text_max; /* bytes of kept text, at most */
    int want_enc;    /* include asks for reasoning.encrypted_content */
    int want_summary; /* reasoning.summary asked: reasoning as summary_text (translate_int.h) */
    json_t *echo;    /* the request's settings the response object echoes; owned */
    size_t echo_len; /* its JSON text, bytes */
    int64_t seq;     /* next sequence_number */
    int started;     /* response.created and response.in_progress written */
    int finished;    /* terminal or error event written */
    int errored;     /* it was an error event */
    char finish[32]; /* the chat finish_reason, "" until one came */
    int usage_found;
    json_int_t input, cached, output, reasoning; /* usage, tokens */
    int n_items;
    int open;      /* index of the open item, -1 when none */
    size_t esc;    /* the kept text JSON-escaped, bytes (upper bound) */
    size_t enc;    /* encrypted_content kept, bytes (base64url: written as it is) */
    char *text;    /* the kept text; text_cap bytes */
    size_t text_len, text_cap;
    struct resp_item items[RT_TRANSLATE_RESP_ITEMS_MAX];
};

struct rt_resp_stream *rt_resp_stream_create(const json_t *req, const char *model,
                                             int64_t created_s, size_t text_max)
{
    struct rt_resp_stream *st = calloc(1, sizeof(*st));
    char *s;

    if (st == NULL)
        return NULL;
    st->echo = rt_tr_resp_echo(req);
    s = st->echo != NULL ? json_dumps(st->echo, JSON_COMPACT) : NULL;
    if (s == NULL) {
        rt_resp_stream_destroy(&st);
        return NULL;
    }
    st->echo_len = strlen(s);
    free(s);
    rt_tr_copy_utf8(st->model, sizeof(st->model), "", model != NULL ? model : "");
    snprintf(st->id, sizeof(st->id), "resp_0");
    st->created_s = created_s;
    st->text_max = text_max;
    st->want_enc = rt_tr_resp_wants_enc(req);
    st->want_summary = rt_tr_resp_wants_summary(req);
    st->open = -1;
    return st;
}

void rt_resp_stream_destroy(struct rt_resp_stream **st)
{
    if (st == NULL || *st == NULL)
        return;
    json_decref((*st)->echo);
    free((*st)->text);
    free(*st);
    *st = NULL;
}

int rt_resp_stream_finished(const struct rt_resp_stream *st)
{
    return st->finished;
}

int rt_resp_stream_errored(const struct rt_resp_stream *st)
{
    return st->errored;
}

int64_t rt_resp_stream_seq(const struct rt_resp_stream *st)
{
    return st->seq;
}

size_t rt_resp_stream_need(const struct rt_resp_stream *st)
{
    /* output_text.done, content_part.done, output_item.done and response.completed each
     * repeat the text; three response objects echo the settings */
    return 4 * st->esc + 2 * st->enc + 3 * (st->echo_len + sizeof(st->model) + sizeof(st->id)) +
           (size_t)(st->n_items + 2) * RESP_ITEM_FRAME_BYTES + RESP_FRAME_BYTES;
}

/* Bytes of s[0, n) as a JSON string's contents, at most (jansson writes UTF-8 as it is). */
static size_t escaped_len(const char *s, size_t n)
{
    size_t e = 0;

    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];

        e += c == '"' || c == '\\' || c == '/' ? 2 : c < 0x20 || c == 0x7f ? 6 : 1;
    }
    return e;
}

/* "event: <type>\ndata: <obj with sequence_number>\n\n"; obj (taken) has "type" first. */
static int emit(struct rt_resp_stream *st, struct tg_buf *out, json_t *obj)
{
    const char *type = json_string_value(json_object_get(obj, "type"));
    char *s;
    int rc = 0;

    if (obj == NULL || type == NULL) {
        json_decref(obj);
        return TG_ENOMEM;
    }
    if (json_object_set_new(obj, "sequence_number", json_integer(st->seq)) != 0) {
        json_decref(obj);
        return TG_ENOMEM;
    }
    s = json_dumps(obj, JSON_COMPACT);
    if (s == NULL) {
        json_decref(obj);
        return TG_ENOMEM;
    }
    if (tg_buf_printf(out, "event: %s\ndata: ", type) != 0 || tg_buf_puts(out, s) != 0 ||
        tg_buf_puts(out, "\n\n") != 0)
        rc = TG_EFULL;
    free(s);
    json_decref(obj);
    st->seq++;
    return rc;
}

static json_t *item_text(const struct rt_resp_stream *st, const struct resp_item *it)
{
    return json_stringn(st->text != NULL ? st->text + it->off : "", it->len);
}

/* The content part of item it (text: its whole text; else empty). New. */
static json_t *item_part(const struct rt_resp_stream *st, const struct resp_item *it, int text)
{
    json_t *t = text ? item_text(st, it) : json_string("");

    if (it->kind == ITEM_REASONING)
        return json_pack("{s:s,s:o}", "type", st->want_summary ? "summary_text" : "reasoning_text",
                         "text", t);
    if (it->kind == ITEM_REFUSAL)
        return json_pack("{s:s,s:o}", "type", "refusal", "refusal", t);
    return json_pack("{s:s,s:[],s:[],s:o}", "type", "output_text", "annotations", "logprobs",
                     "text", t);
}

/* A reasoning item: done, with its text (as its summary or its content) and its
 * encrypted_content (when kept). New. */
static json_t *reasoning_json(const struct rt_resp_stream *st, const struct resp_item *it)
{
    json_t *text = it->done && it->kind == ITEM_REASONING ? item_text(st, it) : NULL;
    json_t *r = rt_tr_resp_reasoning_item(it->id, text, st->want_summary);

    json_decref(text);
    if (r != NULL && it->done && it->enc_len > 0 &&
        json_object_set_new(r, "encrypted_content",
                            json_stringn(st->text + it->enc_off, it->enc_len)) != 0) {
        json_decref(r);
        return NULL;
    }
    return r;
}

/* Item it as the output array shows it: done, with its content, else as just added. New. */
static json_t *item_json(const struct rt_resp_stream *st, const struct resp_item *it)
{
    const char *status = !it->done ? "in_progress" : it->incomplete ? "incomplete" : "completed";

    switch (it->kind) {
    case ITEM_REASONING:
    case ITEM_REDACTED:
        return reasoning_json(st, it);
    case ITEM_CALL:
        return json_pack("{s:s,s:s,s:s,s:o,s:s,s:s}", "id", it->id, "type", "function_call",
                         "status", status, "arguments",
                         it->done ? item_text(st, it) : json_string(""), "call_id", it->call_id,
                         "name", it->name);
    default:
        return json_pack("{s:s,s:s,s:s,s:o,s:s}", "id", it->id, "type", "message", "status",
                         status, "content",
                         it->done ? json_pack("[o]", item_part(st, it, 1)) : json_array(), "role",
                         "assistant");
    }
}

/* The response object: in_progress with no output, or the final one. New. */
static json_t *response_json(const struct rt_resp_stream *st, int final)
{
    const char *reason = NULL;
    const char *status = final ? rt_tr_resp_status(st->finish, &reason) : "in_progress";
    json_t *output = json_array();
    json_t *usage = NULL;

    for (int i = 0; final && output != NULL && i < st->n_items; i++)
        json_array_append_new(output, item_json(st, &st->items[i]));
    if (final && st->usage_found)
        usage = rt_tr_resp_usage(st->input, st->cached, st->output, st->reasoning);
    return rt_tr_resp_object(st->id, st->created_s, status, reason, st->model, output, usage,
                             st->echo);
}

static int start(struct rt_resp_stream *st, struct tg_buf *out)
{
    int rc;

    if (st->started)
        return 0;
    st->started = 1;
    rc = emit(st, out, json_pack("{s:s,s:o}", "type", "response.created", "response",
                                 response_json(st, 0)));
    if (rc == 0)
        rc = emit(st, out, json_pack("{s:s,s:o}", "type", "response.in_progress", "response",
                                     response_json(st, 0)));
    return rc;
}

/* The closing events of the open item (incomplete: the answer was cut). */
static int close_item(struct rt_resp_stream *st, int incomplete, struct tg_buf *out)
{
    struct resp_item *it;
    int idx = st->open;
    int rc = 0;

    if (idx < 0)
        return 0;
    it = &st->items[idx];
    st->open = -1;
    it->done = 1;
    it->incomplete = incomplete;
    if (it->kind == ITEM_REDACTED) {
        rc = 0; /* no content part: its data is the encrypted_content only */
    } else if (it->kind == ITEM_CALL) {
        rc = emit(st, out, json_pack("{s:s,s:s,s:i,s:s,s:o}", "type",
                                     "response.function_call_arguments.done", "item_id", it->id,
                                     "output_index", idx, "name", it->name, "arguments",
                                     item_text(st, it)));
    } else if (it->kind == ITEM_REASONING && st->want_summary) {
        rc = emit(st, out, json_pack("{s:s,s:s,s:i,s:i,s:o}", "type",
                                     "response.reasoning_summary_text.done", "item_id", it->id,
                                     "output_index", idx, "summary_index", 0, "text",
                                     item_text(st, it)));
        if (rc == 0)
            rc = emit(st, out, json_pack("{s:s,s:s,s:i,s:i,s:o}", "type",
                                         "response.reasoning_summary_part.done", "item_id",
                                         it->id, "output_index", idx, "summary_index", 0, "part",
                                         item_part(st, it, 1)));
    } else {
        const char *type = it->kind == ITEM_REASONING ? "response.reasoning_text.done"
                           : it->kind == ITEM_REFUSAL ? "response.refusal.done"
                                                      : "response.output_text.done";
        json_t *ev = json_pack("{s:s,s:s,s:i,s:i,s:o}", "type", type, "item_id", it->id,
                               "output_index", idx, "content_index", 0,
                               it->kind == ITEM_REFUSAL ? "refusal" : "text", item_text(st, it));

        if (ev != NULL && it->kind == ITEM_TEXT)
            json_object_set_new(ev, "logprobs", json_array());
        rc = emit(st, out, ev);
        if (rc == 0)
            rc = emit(st, out, json_pack("{s:s,s:s,s:i,s:i,s:o}", "type",
                                         "response.content_part.done", "item_id", it->id,
                                         "output_index", idx, "content_index", 0, "part",
                                         item_part(st, it, 1)));
    }
    if (rc == 0)
        rc = emit(st, out, json_pack("{s:s,s:i,s:o}", "type", "response.output_item.done",
                                     "output_index", idx, "item", item_json(st, it)));
    return rc;
}

/* A new item of kind (the open one closed first); call: the tool call's first piece. */
static int open_item(struct rt_resp_stream *st, int kind, const json_t *call, struct tg_buf *out)
{
    struct resp_item *it;
    int idx, rc;

    if (st->n_items >= RT_TRANSLATE_RESP_ITEMS_MAX)
        return TG_EPROTO;
    rc = close_item(st, 0, out);
    if (rc != 0)
        return rc;
    idx = st->n_items++;
    it = &st->items[idx];
    memset(it, 0, sizeof(*it));
    it->kind = kind;
    it->off = st->text_len;
    if (kind == ITEM_CALL) {
        const json_t *cid = json_object_get(call, "id");
        const json_t *name = json_object_get(json_object_get(call, "function"), "name");

        if (!json_is_string(name))
            return TG_EPROTO; /* a call's first piece names it */
        it->tool_index = (int)json_integer_value(json_object_get(call, "index"));
        snprintf(it->call_id, sizeof(it->call_id), "call_%d", idx);
        if (json_is_string(cid))
            rt_tr_copy_utf8(it->call_id, sizeof(it->call_id), "", json_string_value(cid));
        rt_tr_copy_utf8(it->name, sizeof(it->name), "", json_string_value(name));
        rt_tr_copy_utf8(it->id, sizeof(it->id), "fc_", it->call_id);
    } else {
        char prefix[24];

        /* the response's id after its "resp_", cut at a character boundary: a provider's id
         * cut inside a character made every later event fail */
        snprintf(prefix, sizeof(prefix), "%s_%d_",
                 kind == ITEM_REASONING || kind == ITEM_REDACTED ? "rs" : "msg", idx);
        rt_tr_copy_utf8(it->id, sizeof(it->id), prefix, st->id + 5);
    }
    st->open = idx;
    rc = emit(st, out, json_pack("{s:s,s:i,s:o}", "type", "response.output_item.added",
                                 "output_index", idx, "item", item_json(st, it)));
    if (rc == 0 && kind == ITEM_REASONING && st->want_summary)
        rc = emit(st, out, json_pack("{s:s,s:s,s:i,s:i,s:o}", "type",
                                     "response.reasoning_summary_part.added", "item_id", it->id,
                                     "output_index", idx, "summary_index", 0, "part",
                                     item_part(st, it, 0)));
    else if (rc == 0 && kind != ITEM_CALL && kind != ITEM_REDACTED)
        rc = emit(st, out, json_pack("{s:s,s:s,s:i,s:i,s:o}", "type",
                                     "response.content_part.added", "item_id", it->id,
                                     "output_index", idx, "content_index", 0, "part",
                                     item_part(st, it, 0)));
    return rc;
}

/* p[0, n) appended to the kept text (text_max bytes at most: more is TG_ETOOBIG). */
static int keep(struct rt_resp_stream *st, const char *p, size_t n)
{
    if (n > st->text_max - st->text_len)
        return TG_ETOOBIG;
    if (st->text_len + n > st->text_cap) {
        size_t cap = st->text_cap > 0 ? st->text_cap : RESP_TEXT_INITIAL_BYTES;
        char *t;

        while (cap < st->text_len + n)
            cap = cap > st->text_max / 2 ? st->text_max : cap * 2;
        t = realloc(st->text, cap);
        if (t == NULL)
            return TG_ENOMEM;
        st->text = t;
        st->text_cap = cap;
    }
    memcpy(st->text + st->text_len, p, n);
    st->text_len += n;
    return 0;
}

/* s (a JSON string) appended to the open item's kept text and written as its delta event. */
static int add_delta(struct rt_resp_stream *st, const json_t *s, struct tg_buf *out)
{
    struct resp_item *it = &st->items[st->open];
    size_t n = json_string_length(s);
    const char *type;
    json_t *ev;
    int rc = keep(st, json_string_value(s), n);

    if (rc != 0)
        return rc;
    it->len += n;
    st->esc += escaped_len(json_string_value(s), n);
    if (it->kind == ITEM_CALL)
        return emit(st, out, json_pack("{s:s,s:s,s:i,s:O}", "type",
                                       "response.function_call_arguments.delta", "item_id",
                                       it->id, "output_index", st->open, "delta", s));
    if (it->kind == ITEM_REASONING && st->want_summary)
        return emit(st, out, json_pack("{s:s,s:s,s:i,s:i,s:O}", "type",
                                       "response.reasoning_summary_text.delta", "item_id", it->id,
                                       "output_index", st->open, "summary_index", 0, "delta", s));
    type = it->kind == ITEM_REASONING ? "response.reasoning_text.delta"
           : it->kind == ITEM_REFUSAL ? "response.refusal.delta"
                                      : "response.output_text.delta";
    ev = json_pack("{s:s,s:s,s:i,s:i,s:O}", "type", type, "item_id", it->id, "output_index",
                   st->open, "content_index", 0, "delta", s);
    if (ev != NULL && it->kind == ITEM_TEXT)
        json_object_set_new(ev, "logprobs", json_array());
    return emit(st, out, ev);
}

/* A piece of text of kind: into the open item of that kind, or a new one. */
static int text_piece(struct rt_resp_stream *st, int kind, const json_t *s, struct tg_buf *out)
{
    int rc;

    if (!json_is_string(s) || json_string_length(s) == 0)
        return 0;
    if (st->open < 0 || st->items[st->open].kind != kind) {
        rc = open_item(st, kind, NULL, out);
        if (rc != 0)
            return rc;
    }
    return add_delta(st, s, out);
}

/* Item it's encrypted_content for a signature or redacted data val (a JSON string), kept
 * with the text when the request asked for it (else nothing to keep). */
static int keep_enc(struct rt_resp_stream *st, struct resp_item *it, int redacted,
                    const json_t *val)
{
    size_t n, off = st->text_len;
    char *enc;
    int rc;

    if (!st->want_enc)
        return 0;
    enc = rt_tr_reasoning_encode(redacted, json_string_value(val), json_string_length(val), &n);
    if (enc == NULL)
        return TG_ENOMEM;
    rc = keep(st, enc, n);
    free(enc);
    if (rc != 0)
        return rc;
    it->enc_off = off;
    it->enc_len = n;
    st->enc += n;
    return 0;
}

/* One thinking_blocks entry (LiteLLM's field; its text came as reasoning_content): a
 * signature signs the open reasoning item and closes it (none open: an empty one is opened for
 * it, as a thinking block of no text); redacted data is a reasoning item of its own, opened and closed
 * at once. Entries without a string signature or data have nothing to say. */
static int thinking_piece(struct rt_resp_stream *st, const json_t *tb, struct tg_buf *out)
{
    const json_t *sig = json_object_get(tb, "signature"), *data = json_object_get(tb, "data");
    int rc;

    if (rt_tr_str_eq(json_object_get(tb, "type"), "redacted_thinking") && json_is_string(data)) {
        rc = open_item(st, ITEM_REDACTED, NULL, out);
        if (rc == 0)
            rc = keep_enc(st, &st->items[st->open], 1, data);
        return rc != 0 ? rc : close_item(st, 0, out);
    }
    if (!rt_tr_str_eq(json_object_get(tb, "type"), "thinking") || !json_is_string(sig) ||
        json_string_length(sig) == 0)
        return 0;
    if (st->open < 0 || st->items[st->open].kind != ITEM_REASONING) {
        rc = open_item(st, ITEM_REASONING, NULL, out);
        if (rc != 0)
            return rc;
    }
    rc = keep_enc(st, &st->items[st->open], 0, sig);
    return rc != 0 ? rc : close_item(st, 0, out);
}

/* One tool_calls entry: the call's first piece opens its item, its argument fragments follow;
 * pieces of a call whose item was closed are TG_EPROTO. */
static int call_piece(struct rt_resp_stream *st, const json_t *tc, struct tg_buf *out)
{
    const json_t *ix = json_object_get(tc, "index");
    const json_t *args = json_object_get(json_object_get(tc, "function"), "arguments");
    int index, rc;

    if (!json_is_integer(ix) || json_integer_value(ix) < 0 ||
        json_integer_value(ix) > RT_TRANSLATE_RESP_ITEMS_MAX)
        return TG_EPROTO;
    index = (int)json_integer_value(ix);
    if (st->open < 0 || st->items[st->open].kind != ITEM_CALL ||
        st->items[st->open].tool_index != index) {
        for (int i = 0; i < st->n_items; i++)
            if (st->items[i].kind == ITEM_CALL && st->items[i].tool_index == index)
                return TG_EPROTO; /* its arguments after another item started */
        rc = open_item(st, ITEM_CALL, tc, out);
        if (rc != 0)
            return rc;
    }
    if (json_is_string(args) && json_string_length(args) > 0)
        return add_delta(st, args, out);
    return 0;
}

/* [DONE]: the open item closed, then response.completed (or response.incomplete). */
static int finish(struct rt_resp_stream *st, struct tg_buf *out)
{
    const char *reason;
    int rc = start(st, out);

    if (rc == 0)
        rc = close_item(st, strcmp(rt_tr_resp_status(st->finish, &reason), "incomplete") == 0,
                        out);
    if (rc == 0)
        rc = emit(st, out,
                  json_pack("{s:s,s:o}", "type",
                            reason != NULL ? "response.incomplete" : "response.completed",
                            "response", response_json(st, 1)));
    st->finished = 1;
    return rc;
}

/* A chunk carrying an upstream error: the error event, and the end. */
static int upstream_error(struct rt_resp_stream *st, const json_t *e, struct tg_buf *out)
{
    const json_t *msg = json_object_get(e, "message");
    const json_t *code = json_object_get(e, "code");

    st->finished = 1;
    st->errored = 1;
    return emit(st, out,
                json_pack("{s:s,s:s,s:s,s:n}", "type", "error", "code",
                          json_is_string(code) ? json_string_value(code) : "upstream_error",
                          "message", json_is_string(msg) ? json_string_value(msg) : "error",
                          "param"));
}

static int chunk(struct rt_resp_stream *st, const json_t *j, struct tg_buf *out)
{
    const json_t *choice = json_array_get(json_object_get(j, "choices"), 0);
    const json_t *delta = json_object_get(choice, "delta");
    const json_t *fr = json_object_get(choice, "finish_reason");
    const json_t *usage = json_object_get(j, "usage");
    const json_t *calls = json_object_get(delta, "tool_calls");
    const json_t *id = json_object_get(j, "id");
    size_t i;
    json_t *tc;
    int rc;

    if (json_is_object(json_object_get(j, "error")))
        return upstream_error(st, json_object_get(j, "error"), out);
    if (!json_is_array(json_object_get(j, "choices")))
        return TG_EPROTO;
    if (!st->started && json_is_string(id) && json_string_length(id) > 0)
        rt_tr_copy_utf8(st->id, sizeof(st->id), "resp_", json_string_value(id));
    rc = start(st, out);
    if (json_is_object(usage)) {
        st->usage_found = 1;
        st->input = rt_tr_int_or_zero(usage, "prompt_tokens");
        st->cached = rt_tr_chat_cached(usage);
        st->output = rt_tr_int_or_zero(usage, "completion_tokens");
        st->reasoning = rt_tr_int_or_zero(json_object_get(usage, "completion_tokens_details"),
                                          "reasoning_tokens");
    }
    if (rc == 0)
        rc = text_piece(st, ITEM_REASONING, json_object_get(delta, "reasoning_content"), out);
    json_array_foreach(json_object_get(delta, "thinking_blocks"), i, tc) {
        if (rc != 0)
            break;
        rc = thinking_piece(st, tc, out);
    }
    if (rc == 0)
        rc = text_piece(st, ITEM_TEXT, json_object_get(delta, "content"), out);
    if (rc == 0)
        rc = text_piece(st, ITEM_REFUSAL, json_object_get(delta, "refusal"), out);
    if (calls != NULL && !json_is_null(calls) && !json_is_array(calls))
        rc = rc == 0 ? TG_EPROTO : rc;
    json_array_foreach(calls, i, tc) {
        if (rc != 0)
            break;
        rc = call_piece(st, tc, out);
    }
    if (rc == 0 && json_is_string(fr)) {
        const char *reason;

        snprintf(st->finish, sizeof(st->finish), "%s", json_string_value(fr));
        rc = close_item(st, strcmp(rt_tr_resp_status(st->finish, &reason), "incomplete") == 0,
                        out);
    }
    return rc;
}

int rt_resp_stream_chunk(struct rt_resp_stream *st, const char *data, size_t len,
                         struct tg_buf *out)
{
    struct rt_resp_stream *saved;
    size_t before = out->len;
    json_t *j;
    int rc;

    if (st->finished)
        return 0;
    saved = malloc(sizeof(*saved));
    if (saved == NULL)
        return TG_ENOMEM;
    *saved = *st;
    if (len == 6 && memcmp(data, "[DONE]", 6) == 0) {
        rc = finish(st, out);
    } else {
        j = json_loadb(data, len, 0, NULL);
        rc = json_is_object(j) ? chunk(st, j, out) : TG_EPROTO;
        json_decref(j);
    }
    if (rc == 0 && out->truncated)
        rc = TG_EFULL;
    if (rc != 0) {
        /* refused or cut half-way: what it wrote and what it changed go (the kept text's
         * buffer stays, possibly larger, with the old length) */
        char *text = st->text;
        size_t cap = st->text_cap;

        *st = *saved;
        st->text = text;
        st->text_cap = cap;
        out->len = before;
        if (out->data != NULL)
            out->data[before] = '\0';
        out->truncated = 0;
    }
    free(saved);
    return rc;
}
