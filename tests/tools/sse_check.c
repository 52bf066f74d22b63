/* sse_check: strict validator for Server-Sent Events bodies (test tool).
 *
 *   sse_check [--dialect sse|openai-chat|openai-responses|anthropic] [--require-usage] [FILE]
 *
 * Reads a response body (FILE or stdin, at most SSE_INPUT_MAX_BYTES) and checks it against the
 * WHATWG event-stream grammar, strictly: UTF-8, lines end with "\n" only, fields are event,
 * data, id, retry (digits) or comments, no field repeated within an event except data, every
 * event carries data and ends with a blank line, nothing after the last blank line. Then the
 * dialect's rules:
 *   openai-chat       no event: field; every data is a chat.completion.chunk JSON object with
 *                     one id, except the last which is [DONE]; exactly one finish_reason; at
 *                     most one usage chunk (empty choices, after the finish_reason, totals add
 *                     up).
 *   openai-responses  event: equals data.type; sequence_number counts up from its first value;
 *                     starts with response.created, ends with response.completed (its usage
 *                     adds up); the deltas concatenate to response.output_text.done's text.
 *   anthropic         event: equals data.type; message_start, then content blocks (start,
 *                     deltas with the block's index, stop), then message_delta(s), then
 *                     message_stop last; ping allowed after message_start; error fails.
 * On success prints one JSON line {"ok":true,"dialect":..,"events":N,"usage":{..}|null,
 * "text":..,"finish_reason":..} and exits 0. Otherwise prints the reason on stderr
 * ("sse_check: line N: ...") and exits 1; usage errors exit 2. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#define SSE_INPUT_MAX_BYTES (256u * 1024u * 1024u) /* input beyond this is refused */
#define SSE_EVENTS_MAX 1000000u                    /* events beyond this are refused */
#define SSE_TEXT_MAX_BYTES (64u * 1024u * 1024u)   /* collected text cap */

enum dialect { D_SSE, D_CHAT, D_RESPONSES, D_ANTHROPIC };

struct event {
    char *name;      /* owned or NULL */
    char *data;      /* owned, lines joined with \n */
    size_t data_len; /* bytes */
    int has_data;    /* at least one data line */
    int has_id;      /* an id line was seen */
    int has_retry;   /* a retry line was seen */
    size_t line;     /* first line of the event, 1-based */
};

struct checker {
    enum dialect dialect;
    char reason[512];
    size_t events;
    json_t *usage; /* owned or NULL */
    char *text;    /* owned, collected content */
    size_t text_len;
    size_t text_cap;
    char *finish_reason; /* owned or NULL */
};

__attribute__((format(printf, 3, 4))) static int fail(struct checker *c, size_t line,
                                                      const char *fmt, ...)
{
    va_list ap;
    int n = 0;

    if (c->reason[0] != '\0')
        return -1;
    if (line > 0)
        n = snprintf(c->reason, sizeof(c->reason), "line %zu: ", line);
    if (n < 0 || (size_t)n >= sizeof(c->reason))
        n = 0;
    va_start(ap, fmt);
    vsnprintf(c->reason + n, sizeof(c->reason) - (size_t)n, fmt, ap);
    va_end(ap);
    return -1;
}

static int text_add(struct checker *c, const char *s, size_t n)
{
    if (c->text_len + n + 1 > SSE_TEXT_MAX_BYTES)
        return fail(c, 0, "collected text exceeds %u bytes", SSE_TEXT_MAX_BYTES);
    if (c->text_len + n + 1 > c->text_cap) {
        size_t cap = c->text_cap ? c->text_cap : 1024;
        while (cap < c->text_len + n + 1)
            cap *= 2;
        char *p = realloc(c->text, cap);
        if (p == NULL)
            return fail(c, 0, "out of memory");
        c->text = p;
        c->text_cap = cap;
    }
    memcpy(c->text + c->text_len, s, n);
    c->text_len += n;
    c->text[c->text_len] = '\0';
    return 0;
}

static int utf8_valid(const unsigned char *s, size_t n, size_t *bad)
{
    size_t i = 0;

    while (i < n) {
        unsigned char b = s[i];
        size_t need;
        unsigned cp;
        if (b < 0x80) {
            i++;
            continue;
        }
        if (b >= 0xC2 && b <= 0xDF) {
            need = 2;
            cp = b & 0x1Fu;
        } else if (b >= 0xE0 && b <= 0xEF) {
            need = 3;
            cp = b & 0x0Fu;
        } else if (b >= 0xF0 && b <= 0xF4) {
            need = 4;
            cp = b & 0x07u;
        } else {
            *bad = i;
            return 0;
        }
        if (i + need > n) {
            *bad = i;
            return 0;
        }
        for (size_t k = 1; k < need; k++) {
            if ((s[i + k] & 0xC0u) != 0x80u) {
                *bad = i;
                return 0;
            }
            cp = (cp << 6) | (s[i + k] & 0x3Fu);
        }
        if ((need == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) ||
            (need == 4 && (cp < 0x10000 || cp > 0x10FFFF))) {
            *bad = i;
            return 0;
        }
        i += need;
    }
    return 1;
}

static json_t *parse_object(struct checker *c, const struct event *e)
{
    json_error_t jerr;
    json_t *j = json_loadb(e->data, e->data_len, 0, &jerr);

    if (j == NULL) {
        fail(c, e->line, "data is not JSON: %s", jerr.text);
        return NULL;
    }
    if (!json_is_object(j)) {
        json_decref(j);
        fail(c, e->line, "data is not a JSON object");
        return NULL;
    }
    return j;
}

/* Per-dialect state carried across events. */
struct dstate {
    int done_seen;            /* chat: [DONE] */
    int finish_seen;          /* chat: finish_reason chunks */
    char *chat_id;            /* chat: the stream's id, owned */
    int first;                /* responses/anthropic: no event seen yet */
    int terminal_seen;        /* responses: completed; anthropic: message_stop */
    json_int_t seq;           /* responses: next sequence_number, -1 before the first */
    char *done_text;          /* responses: output_text.done text, owned */
    int block_open;           /* anthropic: a content block is open */
    json_int_t block_index;   /* anthropic: index of the open or last block */
    int delta_seen;           /* anthropic: message_delta seen */
    json_int_t input_tokens;  /* anthropic */
    json_int_t output_tokens; /* anthropic, -1 until message_delta */
};

static int usage_ints(struct checker *c, size_t line, json_t *u, const char *a, const char *b,
                      const char *total)
{
    json_t *ja = json_object_get(u, a), *jb = json_object_get(u, b);
    json_t *jt = total ? json_object_get(u, total) : NULL;

    if (!json_is_integer(ja) || !json_is_integer(jb) || json_integer_value(ja) < 0 ||
        json_integer_value(jb) < 0)
        return fail(c, line, "usage needs non-negative integers %s and %s", a, b);
    if (total != NULL) {
        if (!json_is_integer(jt))
            return fail(c, line, "usage needs integer %s", total);
        if (json_integer_value(jt) != json_integer_value(ja) + json_integer_value(jb))
            return fail(c, line, "usage %s %lld != %s + %s", total,
                        (long long)json_integer_value(jt), a, b);
    }
    return 0;
}

static int check_chat(struct checker *c, struct dstate *st, const struct event *e)
{
    json_t *j, *choices, *usage, *v;
    size_t i;
    int rc = 0;

    if (e->name != NULL)
        return fail(c, e->line, "openai-chat events carry no event: field (got \"%.40s\")",
                    e->name);
    if (st->done_seen)
        return fail(c, e->line, "event after [DONE]");
    if (e->data_len == 6 && memcmp(e->data, "[DONE]", 6) == 0) {
        st->done_seen = 1;
        return 0;
    }
    j = parse_object(c, e);
    if (j == NULL)
        return -1;
    if (json_object_get(j, "error") != NULL) {
        rc = fail(c, e->line, "error object in stream");
        goto out;
    }
    v = json_object_get(j, "object");
    if (!json_is_string(v) || strcmp(json_string_value(v), "chat.completion.chunk") != 0) {
        rc = fail(c, e->line, "object is not \"chat.completion.chunk\"");
        goto out;
    }
    v = json_object_get(j, "id");
    if (!json_is_string(v)) {
        rc = fail(c, e->line, "chunk without a string id");
        goto out;
    }
    if (st->chat_id == NULL) {
        st->chat_id = strdup(json_string_value(v));
    } else if (strcmp(st->chat_id, json_string_value(v)) != 0) {
        rc = fail(c, e->line, "chunk id changed within the stream");
        goto out;
    }
    choices = json_object_get(j, "choices");
    if (!json_is_array(choices)) {
        rc = fail(c, e->line, "choices is not an array");
        goto out;
    }
    usage = json_object_get(j, "usage");
    if (usage != NULL && !json_is_null(usage)) {
        if (!json_is_object(usage) || json_array_size(choices) != 0) {
            rc = fail(c, e->line, "usage chunk must have an object usage and empty choices");
            goto out;
        }
        if (c->usage != NULL) {
            rc = fail(c, e->line, "second usage chunk");
            goto out;
        }
        if (!st->finish_seen) {
            rc = fail(c, e->line, "usage chunk before the finish_reason chunk");
            goto out;
        }
        if (usage_ints(c, e->line, usage, "prompt_tokens", "completion_tokens", "total_tokens"))
            goto fail_out;
        c->usage = json_incref(usage);
        goto out;
    }
    if (c->usage != NULL) {
        rc = fail(c, e->line, "content chunk after the usage chunk");
        goto out;
    }
    json_array_foreach(choices, i, v)
    {
        json_t *delta = json_object_get(v, "delta");
        json_t *content = json_object_get(delta, "content");
        json_t *fr = json_object_get(v, "finish_reason");
        if (!json_is_object(delta)) {
            rc = fail(c, e->line, "choice without a delta object");
            goto out;
        }
        if (content != NULL && !json_is_null(content)) {
            if (!json_is_string(content)) {
                rc = fail(c, e->line, "delta.content is not a string");
                goto out;
            }
            if (st->finish_seen) {
                rc = fail(c, e->line, "content after finish_reason");
                goto out;
            }
            if (text_add(c, json_string_value(content), json_string_length(content)))
                goto fail_out;
        }
        if (fr != NULL && !json_is_null(fr)) {
            if (!json_is_string(fr)) {
                rc = fail(c, e->line, "finish_reason is not a string");
                goto out;
            }
            if (st->finish_seen++) {
                rc = fail(c, e->line, "second finish_reason");
                goto out;
            }
            c->finish_reason = strdup(json_string_value(fr));
        }
    }
out:
    json_decref(j);
    return rc;
fail_out:
    json_decref(j);
    return -1;
}

static int check_named_type(struct checker *c, const struct event *e, json_t *j, const char **type)
{
    json_t *t = json_object_get(j, "type");

    if (!json_is_string(t))
        return fail(c, e->line, "data.type is missing");
    *type = json_string_value(t);
    if (e->name == NULL)
        return fail(c, e->line, "event without an event: field (type %.60s)", *type);
    if (strcmp(e->name, *type) != 0)
        return fail(c, e->line, "event: %.60s does not match data.type %.60s", e->name, *type);
    return 0;
}

static int check_responses(struct checker *c, struct dstate *st, const struct event *e)
{
    json_t *j = parse_object(c, e);
    const char *type = NULL;
    int rc = 0;

    if (j == NULL)
        return -1;
    if (check_named_type(c, e, j, &type))
        goto fail_out;
    if (st->terminal_seen) {
        rc = fail(c, e->line, "event after response.completed");
        goto out;
    }
    json_t *seq = json_object_get(j, "sequence_number");
    if (seq != NULL) {
        if (!json_is_integer(seq) || (st->seq >= 0 && json_integer_value(seq) != st->seq)) {
            rc = fail(c, e->line, "sequence_number out of order");
            goto out;
        }
        st->seq = json_integer_value(seq) + 1;
    }
    if (st->first && strcmp(type, "response.created") != 0) {
        rc = fail(c, e->line, "first event is %.60s, not response.created", type);
        goto out;
    }
    st->first = 0;
    if (strcmp(type, "error") == 0 || strcmp(type, "response.failed") == 0 ||
        strcmp(type, "response.incomplete") == 0) {
        rc = fail(c, e->line, "stream reports %s", type);
        goto out;
    }
    if (strcmp(type, "response.output_text.delta") == 0) {
        json_t *d = json_object_get(j, "delta");
        if (!json_is_string(d)) {
            rc = fail(c, e->line, "delta is not a string");
            goto out;
        }
        if (text_add(c, json_string_value(d), json_string_length(d)))
            goto fail_out;
    } else if (strcmp(type, "response.output_text.done") == 0) {
        json_t *t = json_object_get(j, "text");
        if (!json_is_string(t)) {
            rc = fail(c, e->line, "output_text.done without text");
            goto out;
        }
        free(st->done_text);
        st->done_text = strdup(json_string_value(t));
    } else if (strcmp(type, "response.completed") == 0) {
        json_t *resp = json_object_get(j, "response");
        json_t *u = json_object_get(resp, "usage");
        json_t *status = json_object_get(resp, "status");
        if (!json_is_object(resp) || !json_is_string(status) ||
            strcmp(json_string_value(status), "completed") != 0) {
            rc = fail(c, e->line, "response.completed without a completed response");
            goto out;
        }
        if (json_is_object(u)) {
            if (usage_ints(c, e->line, u, "input_tokens", "output_tokens", "total_tokens"))
                goto fail_out;
            c->usage = json_incref(u);
        }
        c->finish_reason = strdup("completed");
        st->terminal_seen = 1;
    }
out:
    json_decref(j);
    return rc;
fail_out:
    json_decref(j);
    return -1;
}

static int check_anthropic(struct checker *c, struct dstate *st, const struct event *e)
{
    json_t *j = parse_object(c, e);
    const char *type = NULL;
    int rc = 0;

    if (j == NULL)
        return -1;
    if (check_named_type(c, e, j, &type))
        goto fail_out;
    if (st->terminal_seen) {
        rc = fail(c, e->line, "event after message_stop");
        goto out;
    }
    if (strcmp(type, "error") == 0) {
        rc = fail(c, e->line, "stream reports an error event");
        goto out;
    }
    if (st->first) {
        json_t *u = json_object_get(json_object_get(j, "message"), "usage");
        json_t *in = json_object_get(u, "input_tokens");
        if (strcmp(type, "message_start") != 0) {
            rc = fail(c, e->line, "first event is %.60s, not message_start", type);
            goto out;
        }
        if (!json_is_integer(in) || json_integer_value(in) < 0) {
            rc = fail(c, e->line, "message_start without message.usage.input_tokens");
            goto out;
        }
        st->input_tokens = json_integer_value(in);
        st->first = 0;
        goto out;
    }
    if (strcmp(type, "ping") == 0)
        goto out;
    if (strcmp(type, "message_start") == 0) {
        rc = fail(c, e->line, "second message_start");
    } else if (strcmp(type, "content_block_start") == 0) {
        json_t *idx = json_object_get(j, "index");
        if (st->block_open || st->delta_seen) {
            rc = fail(c, e->line,
                      "content_block_start while a block is open or after "
                      "message_delta");
        } else if (!json_is_integer(idx) || json_integer_value(idx) != st->block_index + 1) {
            rc = fail(c, e->line, "content_block_start index is not the next index");
        } else if (!json_is_object(json_object_get(j, "content_block"))) {
            rc = fail(c, e->line, "content_block_start without content_block");
        } else {
            st->block_open = 1;
            st->block_index = json_integer_value(idx);
        }
    } else if (strcmp(type, "content_block_delta") == 0) {
        json_t *idx = json_object_get(j, "index");
        json_t *d = json_object_get(j, "delta");
        json_t *dt = json_object_get(d, "type");
        if (!st->block_open || !json_is_integer(idx) ||
            json_integer_value(idx) != st->block_index) {
            rc = fail(c, e->line, "content_block_delta outside its block");
        } else if (!json_is_string(dt)) {
            rc = fail(c, e->line, "content_block_delta without delta.type");
        } else if (strcmp(json_string_value(dt), "text_delta") == 0) {
            json_t *t = json_object_get(d, "text");
            if (!json_is_string(t))
                rc = fail(c, e->line, "text_delta without text");
            else if (text_add(c, json_string_value(t), json_string_length(t)))
                rc = -1;
        } else if (strcmp(json_string_value(dt), "input_json_delta") != 0 &&
                   strcmp(json_string_value(dt), "thinking_delta") != 0 &&
                   strcmp(json_string_value(dt), "signature_delta") != 0 &&
                   strcmp(json_string_value(dt), "citations_delta") != 0) {
            rc = fail(c, e->line, "unknown delta type %.40s", json_string_value(dt));
        }
    } else if (strcmp(type, "content_block_stop") == 0) {
        json_t *idx = json_object_get(j, "index");
        if (!st->block_open || !json_is_integer(idx) || json_integer_value(idx) != st->block_index)
            rc = fail(c, e->line, "content_block_stop without its start");
        st->block_open = 0;
    } else if (strcmp(type, "message_delta") == 0) {
        json_t *u = json_object_get(j, "usage");
        json_t *out_t = json_object_get(u, "output_tokens");
        json_t *sr = json_object_get(json_object_get(j, "delta"), "stop_reason");
        if (st->block_open) {
            rc = fail(c, e->line, "message_delta while a content block is open");
        } else if (!json_is_integer(out_t) || json_integer_value(out_t) < 0) {
            rc = fail(c, e->line, "message_delta without usage.output_tokens");
        } else {
            st->output_tokens = json_integer_value(out_t);
            st->delta_seen = 1;
            if (json_is_string(sr)) {
                free(c->finish_reason);
                c->finish_reason = strdup(json_string_value(sr));
            }
        }
    } else if (strcmp(type, "message_stop") == 0) {
        if (!st->delta_seen)
            rc = fail(c, e->line, "message_stop before message_delta");
        st->terminal_seen = 1;
    } else {
        rc = fail(c, e->line, "unknown event type %.60s", type);
    }
out:
    json_decref(j);
    return rc;
fail_out:
    json_decref(j);
    return -1;
}

static int dispatch(struct checker *c, struct dstate *st, struct event *e)
{
    if (!e->has_data)
        return fail(c, e->line, "event without a data field");
    if (c->events == SSE_EVENTS_MAX)
        return fail(c, e->line, "more than %u events", SSE_EVENTS_MAX);
    c->events++;
    switch (c->dialect) {
    case D_CHAT:
        return check_chat(c, st, e);
    case D_RESPONSES:
        return check_responses(c, st, e);
    case D_ANTHROPIC:
        return check_anthropic(c, st, e);
    case D_SSE:
        break;
    }
    return 0;
}

static void event_reset(struct event *e)
{
    free(e->name);
    free(e->data);
    memset(e, 0, sizeof(*e));
}

static int data_add(struct checker *c, struct event *e, const char *v, size_t n)
{
    size_t add = n + (e->has_data ? 1 : 0);
    char *p = realloc(e->data, e->data_len + add + 1);

    if (p == NULL)
        return fail(c, 0, "out of memory");
    e->data = p;
    if (e->has_data)
        e->data[e->data_len++] = '\n';
    memcpy(e->data + e->data_len, v, n);
    e->data_len += n;
    e->data[e->data_len] = '\0';
    e->has_data = 1;
    return 0;
}

static int check_stream(struct checker *c, const char *in, size_t len)
{
    struct dstate st;
    struct event e;
    size_t pos = 0, line = 0, bad;
    int in_block = 0; /* lines (fields or comments) seen since the last blank line */
    int rc = 0;

    memset(&st, 0, sizeof(st));
    memset(&e, 0, sizeof(e));
    st.first = 1;
    st.seq = -1;
    st.block_index = -1;
    st.output_tokens = -1;
    if (len == 0)
        return fail(c, 0, "empty body");
    if (len >= 3 && memcmp(in, "\xEF\xBB\xBF", 3) == 0)
        pos = 3;
    if (!utf8_valid((const unsigned char *)in, len, &bad))
        return fail(c, 0, "invalid UTF-8 at byte %zu", bad);
    while (pos < len) {
        const char *nl = memchr(in + pos, '\n', len - pos);
        const char *p = in + pos;
        size_t n;
        line++;
        if (nl == NULL) {
            rc = fail(c, line, "last line does not end with \\n");
            goto out;
        }
        n = (size_t)(nl - p);
        pos += n + 1;
        if (memchr(p, '\r', n) != NULL) {
            rc = fail(c, line, "carriage return in line (only \\n line endings accepted)");
            goto out;
        }
        if (memchr(p, '\0', n) != NULL) {
            rc = fail(c, line, "NUL byte in line");
            goto out;
        }
        if (n == 0) {
            if (!in_block) {
                rc = fail(c, line, "blank line without a preceding field");
                goto out;
            }
            if (e.line != 0 && dispatch(c, &st, &e) != 0) {
                rc = -1;
                goto out;
            }
            event_reset(&e);
            in_block = 0;
            continue;
        }
        in_block = 1;
        if (p[0] == ':')
            continue; /* comment */
        const char *colon = memchr(p, ':', n);
        size_t nlen = colon ? (size_t)(colon - p) : n;
        const char *v = colon ? colon + 1 : p + n;
        size_t vlen = colon ? n - nlen - 1 : 0;
        if (vlen > 0 && v[0] == ' ') {
            v++;
            vlen--;
        }
        if (e.line == 0)
            e.line = line;
        if (nlen == 4 && memcmp(p, "data", 4) == 0) {
            if (data_add(c, &e, v, vlen) != 0) {
                rc = -1;
                goto out;
            }
        } else if (nlen == 5 && memcmp(p, "event", 5) == 0) {
            if (e.name != NULL) {
                rc = fail(c, line, "second event: field in one event");
                goto out;
            }
            if (vlen == 0) {
                rc = fail(c, line, "empty event: field");
                goto out;
            }
            e.name = strndup(v, vlen);
        } else if (nlen == 2 && memcmp(p, "id", 2) == 0) {
            if (e.has_id++) {
                rc = fail(c, line, "second id: field in one event");
                goto out;
            }
        } else if (nlen == 5 && memcmp(p, "retry", 5) == 0) {
            if (e.has_retry++ || vlen == 0 || strspn(v, "0123456789") < vlen) {
                rc = fail(c, line, "retry: must appear once with ASCII digits only");
                goto out;
            }
        } else {
            rc = fail(c, line, "unknown field \"%.*s\"", (int)(nlen > 40 ? 40 : nlen), p);
            goto out;
        }
    }
    if (in_block) {
        rc = fail(c, line, "trailing partial event (no terminating blank line)");
        goto out;
    }
    if (c->events == 0) {
        rc = fail(c, 0, "no events");
        goto out;
    }
    switch (c->dialect) {
    case D_CHAT:
        if (!st.done_seen)
            rc = fail(c, 0, "stream does not end with data: [DONE]");
        else if (!st.finish_seen)
            rc = fail(c, 0, "no chunk carries a finish_reason");
        break;
    case D_RESPONSES:
        if (!st.terminal_seen)
            rc = fail(c, 0, "stream does not end with response.completed");
        else if (st.done_text != NULL && strcmp(st.done_text, c->text ? c->text : "") != 0)
            rc = fail(c, 0, "deltas do not add up to output_text.done text");
        break;
    case D_ANTHROPIC:
        if (!st.terminal_seen) {
            rc = fail(c, 0, "stream does not end with message_stop");
        } else {
            c->usage = json_pack("{s:I, s:I}", "input_tokens", st.input_tokens, "output_tokens",
                                 st.output_tokens);
        }
        break;
    case D_SSE:
        break;
    }
out:
    event_reset(&e);
    free(st.chat_id);
    free(st.done_text);
    return rc;
}

static char *read_all(FILE *f, size_t *len, char *err, size_t errlen)
{
    size_t cap = 65536, n = 0;
    char *buf = malloc(cap);

    if (buf == NULL)
        goto nomem;
    for (;;) {
        if (n == cap) {
            if (cap >= SSE_INPUT_MAX_BYTES) {
                snprintf(err, errlen, "input larger than %u bytes", SSE_INPUT_MAX_BYTES);
                free(buf);
                return NULL;
            }
            cap *= 2;
            char *p = realloc(buf, cap);
            if (p == NULL)
                goto nomem;
            buf = p;
        }
        size_t r = fread(buf + n, 1, cap - n, f);
        n += r;
        if (r == 0) {
            if (ferror(f)) {
                snprintf(err, errlen, "read error: %s", strerror(errno));
                free(buf);
                return NULL;
            }
            break;
        }
    }
    *len = n;
    return buf;
nomem:
    snprintf(err, errlen, "out of memory");
    free(buf);
    return NULL;
}

static void usage_text(FILE *f)
{
    fprintf(f, "usage: sse_check [--dialect sse|openai-chat|openai-responses|anthropic] "
               "[--require-usage] [FILE]\n");
}

int main(int argc, char **argv)
{
    struct checker c;
    const char *path = NULL;
    int require_usage = 0, rc = 1;
    char err[256];
    FILE *f = stdin;
    char *in = NULL;
    size_t len = 0;
    const char *dname = "sse";

    memset(&c, 0, sizeof(c));
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--dialect") == 0 && i + 1 < argc) {
            dname = argv[++i];
            if (strcmp(dname, "sse") == 0)
                c.dialect = D_SSE;
            else if (strcmp(dname, "openai-chat") == 0)
                c.dialect = D_CHAT;
            else if (strcmp(dname, "openai-responses") == 0)
                c.dialect = D_RESPONSES;
            else if (strcmp(dname, "anthropic") == 0)
                c.dialect = D_ANTHROPIC;
            else {
                usage_text(stderr);
                return 2;
            }
        } else if (strcmp(argv[i], "--require-usage") == 0) {
            require_usage = 1;
        } else if (strcmp(argv[i], "--help") == 0) {
            usage_text(stdout);
            return 0;
        } else if (argv[i][0] == '-' && argv[i][1] != '\0') {
            usage_text(stderr);
            return 2;
        } else if (path == NULL) {
            path = argv[i];
        } else {
            usage_text(stderr);
            return 2;
        }
    }
    if (path != NULL && strcmp(path, "-") != 0) {
        f = fopen(path, "rb");
        if (f == NULL) {
            fprintf(stderr, "sse_check: %s: %s\n", path, strerror(errno));
            return 2;
        }
    }
    in = read_all(f, &len, err, sizeof(err));
    if (f != stdin)
        fclose(f);
    if (in == NULL) {
        fprintf(stderr, "sse_check: %s\n", err);
        return 2;
    }
    if (check_stream(&c, in, len) == 0 && require_usage && c.usage == NULL)
        fail(&c, 0, "no usage found");
    if (c.reason[0] != '\0') {
        fprintf(stderr, "sse_check: %s\n", c.reason);
        goto out;
    }
    json_t *report =
        json_pack("{s:b, s:s, s:I, s:O?, s:s#, s:s?}", "ok", 1, "dialect", dname, "events",
                  (json_int_t)c.events, "usage", c.usage, "text", c.text ? c.text : "",
                  c.text ? c.text_len : (size_t)0, "finish_reason", c.finish_reason);
    char *s = report ? json_dumps(report, JSON_COMPACT) : NULL;
    json_decref(report);
    if (s == NULL) {
        fprintf(stderr, "sse_check: out of memory\n");
        goto out;
    }
    printf("%s\n", s);
    free(s);
    rc = 0;
out:
    json_decref(c.usage);
    free(c.text);
    free(c.finish_reason);
    free(in);
    return rc;
}
