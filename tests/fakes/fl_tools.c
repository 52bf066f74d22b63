#include "fl_tools.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "tg_err.h"

#define PIECES 3u /* deltas a streamed argument string or echo is cut into */

/* A declared tool: borrowed from the request. */
struct decl {
    const char *name;
    const json_t *schema; /* may be NULL */
};

struct decls {
    const json_t *arr; /* the request's tools */
    size_t n;
    int openai; /* chat shape (function.name/parameters) or Anthropic (name/input_schema) */
};

static const char *fail(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static const char *fail(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return err;
}

static struct decl decl_at(const struct decls *d, size_t i)
{
    const json_t *t = json_array_get(d->arr, i);
    struct decl out;

    if (d->openai) {
        const json_t *fn = json_object_get(t, "function");
        out.name = json_string_value(json_object_get(fn, "name"));
        out.schema = json_object_get(fn, "parameters");
    } else {
        out.name = json_string_value(json_object_get(t, "name"));
        out.schema = json_object_get(t, "input_schema");
    }
    return out;
}

static int decl_find(const struct decls *d, const char *name, struct decl *out)
{
    for (size_t i = 0; i < d->n; i++) {
        *out = decl_at(d, i);
        if (strcmp(out->name, name) == 0)
            return 1;
    }
    return 0;
}

/* Arguments for a call of a tool with this schema (see the header). */
static json_t *sample_args(const json_t *schema)
{
    json_t *out = json_object();
    const json_t *props = json_object_get(schema, "properties");
    const char *k;
    json_t *v;

    json_object_foreach((json_t *)props, k, v)
    {
        const json_t *t = json_object_get(v, "type");
        const char *ty = json_string_value(t);
        json_t *val;

        if (json_is_array(t)) {
            size_t i;
            json_t *e;

            json_array_foreach(t, i, e)
            {
                if (json_is_string(e) && strcmp(json_string_value(e), "null") != 0) {
                    ty = json_string_value(e);
                    break;
                }
            }
        }
        if (ty == NULL)
            val = json_null();
        else if (strcasecmp(ty, "string") == 0)
            val = json_string("Paris");
        else if (strcasecmp(ty, "integer") == 0)
            val = json_integer(3);
        else if (strcasecmp(ty, "number") == 0)
            val = json_real(2.5);
        else if (strcasecmp(ty, "boolean") == 0)
            val = json_true();
        else if (strcasecmp(ty, "array") == 0)
            val = json_array();
        else if (strcasecmp(ty, "object") == 0)
            val = json_object();
        else
            val = json_null();
        json_object_set_new(out, k, val);
    }
    return out;
}

/* Append every string inside v (object members named "type" left out: block kinds are not
 * results) to echo, "; " between them; numbers as JSON. Cut at FL_TOOL_ECHO_MAX. */
static void echo_strings(char *echo, size_t *len, int *first, const json_t *v, int depth)
{
    const char *s = NULL;
    char num[64];

    if (depth > 16)
        return;
    if (json_is_array(v)) {
        size_t i;
        json_t *e;

        json_array_foreach(v, i, e) echo_strings(echo, len, first, e, depth + 1);
        return;
    }
    if (json_is_object(v)) {
        const char *k;
        json_t *e;

        json_object_foreach((json_t *)v, k, e)
        {
            if (strcmp(k, "type") != 0)
                echo_strings(echo, len, first, e, depth + 1);
        }
        return;
    }
    if (json_is_string(v)) {
        s = json_string_value(v);
    } else if (json_is_integer(v)) {
        snprintf(num, sizeof(num), "%lld", (long long)json_integer_value(v));
        s = num;
    } else if (json_is_real(v)) {
        snprintf(num, sizeof(num), "%g", json_real_value(v));
        s = num;
    }
    if (s == NULL)
        return;
    if (!*first) {
        size_t n = strlen("; ");
        if (*len + n <= FL_TOOL_ECHO_MAX) {
            memcpy(echo + *len, "; ", n);
            *len += n;
        }
    }
    *first = 0;
    size_t n = strlen(s);
    if (*len + n > FL_TOOL_ECHO_MAX) {
        n = FL_TOOL_ECHO_MAX - *len;
        while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80)
            n--; /* never cut inside a character */
    }
    memcpy(echo + *len, s, n);
    *len += n;
    echo[*len] = '\0';
}

/* Pending tool call ids of the last assistant turn (borrowed from the request). */
struct pending {
    const char *ids[FL_TOOL_PENDING_MAX];
    size_t n;
};

static int pending_take(struct pending *pd, const char *id)
{
    for (size_t i = 0; id != NULL && i < pd->n; i++) {
        if (pd->ids[i] != NULL && strcmp(pd->ids[i], id) == 0) {
            pd->ids[i] = NULL;
            return 1;
        }
    }
    return 0;
}

static const char *pending_left(const struct pending *pd)
{
    for (size_t i = 0; i < pd->n; i++) {
        if (pd->ids[i] != NULL)
            return pd->ids[i];
    }
    return NULL;
}

/* Text of a chat message's or an Anthropic message's content (string or parts). */
static void content_text(const json_t *c, char *out, size_t cap)
{
    size_t len = 0;
    size_t i;
    json_t *p;

    out[0] = '\0';
    if (json_is_string(c)) {
        snprintf(out, cap, "%s", json_string_value(c));
        return;
    }
    json_array_foreach(c, i, p)
    {
        const char *t = json_string_value(json_object_get(p, "text"));
        size_t n = t != NULL ? strlen(t) : 0;

        if (len + n + 1 > cap)
            break;
        memcpy(out + len, t, n);
        len += n;
        out[len] = '\0';
    }
}

static const char *check_chat(const json_t *root, struct decls *d, const char **forced,
                              int *none, char *err, size_t errlen)
{
    const json_t *tools = json_object_get(root, "tools");
    const json_t *choice = json_object_get(root, "tool_choice");
    const json_t *msgs = json_object_get(root, "messages");
    struct pending pd = {.n = 0};
    size_t i;
    json_t *t;

    if (tools != NULL && !json_is_array(tools))
        return "tools: expected an array";
    d->arr = tools;
    d->n = json_array_size(tools);
    d->openai = 1;
    json_array_foreach(tools, i, t)
    {
        const json_t *fn = json_object_get(t, "function");
        const json_t *params = json_object_get(fn, "parameters");
        const char *name = json_string_value(json_object_get(fn, "name"));

        if (!json_is_string(json_object_get(t, "type")) ||
            strcmp(json_string_value(json_object_get(t, "type")), "function") != 0 ||
            name == NULL)
            return "tools[]: expected {type: function, function: {name, parameters}}";
        if (params != NULL && !json_is_object(params))
            return "tools[].function.parameters: expected an object";
    }
    if (json_is_string(choice)) {
        const char *c = json_string_value(choice);

        if (strcmp(c, "none") == 0)
            *none = 1;
        else if (strcmp(c, "required") == 0 && d->n > 0)
            *forced = decl_at(d, 0).name;
        else if (strcmp(c, "auto") != 0 && strcmp(c, "required") != 0)
            return "tool_choice: expected none, auto, required or a function";
    } else if (choice != NULL && !json_is_null(choice)) {
        *forced = json_string_value(json_object_get(json_object_get(choice, "function"), "name"));
        if (*forced == NULL)
            return "tool_choice: expected {type: function, function: {name}}";
    }
    /* messages themselves are not checked here: the fake answers without them */
    json_array_foreach(msgs, i, t)
    {
        const char *role = json_string_value(json_object_get(t, "role"));
        size_t k;
        json_t *tc;

        if (role == NULL)
            continue;
        if (strcmp(role, "tool") == 0) {
            if (!pending_take(&pd, json_string_value(json_object_get(t, "tool_call_id"))))
                return "messages with role 'tool' must be a response to a preceding message "
                       "with 'tool_calls' (tool_call_id unknown)";
            continue;
        }
        if (pending_left(&pd) != NULL)
            return fail(err, errlen,
                        "an assistant message with 'tool_calls' must be followed by tool "
                        "messages responding to each 'tool_call_id' (missing: %.64s)",
                        pending_left(&pd));
        pd.n = 0;
        if (strcmp(role, "assistant") != 0)
            continue;
        json_array_foreach(json_object_get(t, "tool_calls"), k, tc)
        {
            const json_t *fn = json_object_get(tc, "function");
            const char *args = json_string_value(json_object_get(fn, "arguments"));
            json_t *parsed = args != NULL ? json_loads(args, JSON_DECODE_ANY, NULL) : NULL;
            int ok = json_is_object(parsed);

            json_decref(parsed);
            if (!ok || !json_is_string(json_object_get(tc, "id")) ||
                !json_is_string(json_object_get(fn, "name")))
                return "messages[].tool_calls[]: expected id, function.name and arguments as a "
                       "JSON object in a string";
            if (pd.n == FL_TOOL_PENDING_MAX)
                return "messages[].tool_calls: more calls than the fake checks";
            pd.ids[pd.n++] = json_string_value(json_object_get(tc, "id"));
        }
    }
    return NULL;
}

static const char *check_messages(const json_t *root, struct decls *d, const char **forced,
                                  int *none, char *err, size_t errlen)
{
    const json_t *tools = json_object_get(root, "tools");
    const json_t *choice = json_object_get(root, "tool_choice");
    const json_t *msgs = json_object_get(root, "messages");
    struct pending pd = {.n = 0};
    size_t i;
    json_t *t;

    if (tools != NULL && !json_is_array(tools))
        return "tools: Input should be a valid list";
    d->arr = tools;
    d->n = json_array_size(tools);
    d->openai = 0;
    json_array_foreach(tools, i, t)
    {
        const json_t *schema = json_object_get(t, "input_schema");
        const char *ty = json_string_value(json_object_get(schema, "type"));

        if (!json_is_string(json_object_get(t, "name")))
            return "tools.name: Field required";
        if (!json_is_object(schema))
            return "tools.input_schema: Field required";
        if (ty == NULL || strcmp(ty, "object") != 0)
            return "tools.input_schema.type: Input should be 'object'";
    }
    if (choice != NULL) {
        const char *ty = json_string_value(json_object_get(choice, "type"));

        if (ty == NULL || (strcmp(ty, "auto") != 0 && strcmp(ty, "any") != 0 &&
                           strcmp(ty, "tool") != 0 && strcmp(ty, "none") != 0))
            return "tool_choice.type: expected auto, any, tool or none";
        if (strcmp(ty, "none") == 0)
            *none = 1;
        if (strcmp(ty, "any") == 0 && d->n > 0)
            *forced = decl_at(d, 0).name;
        if (strcmp(ty, "tool") == 0) {
            *forced = json_string_value(json_object_get(choice, "name"));
            if (*forced == NULL)
                return "tool_choice.name: Field required";
        }
    }
    json_array_foreach(msgs, i, t)
    {
        size_t k;
        json_t *b;

        json_array_foreach(json_object_get(t, "content"), k, b)
        {
            const char *ty = json_string_value(json_object_get(b, "type"));

            if (tools == NULL && ty != NULL &&
                (strcmp(ty, "tool_use") == 0 || strcmp(ty, "tool_result") == 0))
                return "Requests which include `tool_use` or `tool_result` blocks must define "
                       "tools.";
        }
    }
    json_array_foreach(msgs, i, t)
    {
        const char *role = json_string_value(json_object_get(t, "role"));
        const json_t *content = json_object_get(t, "content");
        size_t k;
        json_t *b;

        if (role == NULL)
            continue;
        if (pending_left(&pd) != NULL && strcmp(role, "assistant") == 0)
            return fail(err, errlen,
                        "messages: `tool_use` ids were found without `tool_result` blocks "
                        "immediately after: %.64s",
                        pending_left(&pd));
        if (strcmp(role, "assistant") == 0) {
            pd.n = 0;
            json_array_foreach(content, k, b)
            {
                const char *ty = json_string_value(json_object_get(b, "type"));

                if (ty == NULL || strcmp(ty, "tool_use") != 0)
                    continue;
                if (!json_is_string(json_object_get(b, "id")) ||
                    !json_is_string(json_object_get(b, "name")) ||
                    !json_is_object(json_object_get(b, "input")))
                    return "messages.content.tool_use: expected id, name and an input object";
                if (pd.n == FL_TOOL_PENDING_MAX)
                    return "messages.content: more tool_use blocks than the fake checks";
                pd.ids[pd.n++] = json_string_value(json_object_get(b, "id"));
            }
            continue;
        }
        json_array_foreach(content, k, b)
        {
            const char *ty = json_string_value(json_object_get(b, "type"));
            const char *id = json_string_value(json_object_get(b, "tool_use_id"));

            if (ty == NULL || strcmp(ty, "tool_result") != 0)
                continue;
            if (!pending_take(&pd, id))
                return fail(err, errlen,
                            "messages: unexpected `tool_use_id` found in `tool_result` blocks: "
                            "%.64s. Each `tool_result` block must have a corresponding "
                            "`tool_use` block in the previous message.",
                            id != NULL ? id : "(none)");
        }
        if (pending_left(&pd) != NULL)
            return fail(err, errlen,
                        "messages: `tool_use` ids were found without `tool_result` blocks "
                        "immediately after: %.64s",
                        pending_left(&pd));
        pd.n = 0;
    }
    return NULL;
}

/* The results of the last turn: trailing tool messages (chat), or the last user message's
 * tool_result blocks (messages). Returns 1 when there are any, echo filled. */
static int last_results(const json_t *root, enum fl_api api, char *echo)
{
    const json_t *msgs = json_object_get(root, "messages");
    size_t n = json_array_size(msgs), len = strlen(FL_TOOL_ECHO_PREFIX), start = n;
    int first = 1, any = 0;

    memcpy(echo, FL_TOOL_ECHO_PREFIX, len + 1);
    if (api == FL_API_CHAT) {
        while (start > 0 &&
               json_is_string(json_object_get(json_array_get(msgs, start - 1), "role")) &&
               strcmp(json_string_value(json_object_get(json_array_get(msgs, start - 1), "role")),
                      "tool") == 0)
            start--;
        for (size_t i = start; i < n; i++) {
            echo_strings(echo, &len, &first,
                         json_object_get(json_array_get(msgs, i), "content"), 0);
            any = 1;
        }
        return any;
    }
    size_t i;
    json_t *b;
    json_array_foreach(json_object_get(json_array_get(msgs, n - 1), "content"), i, b)
    {
        const char *ty = json_string_value(json_object_get(b, "type"));

        if (ty != NULL && strcmp(ty, "tool_result") == 0) {
            echo_strings(echo, &len, &first, json_object_get(b, "content"), 0);
            any = 1;
        }
    }
    return any;
}

static const char *add_call(struct fl_tool_plan *p, struct decl d, char *err, size_t errlen)
{
    json_t *args = sample_args(d.schema);
    char *s = json_dumps(args, JSON_COMPACT | JSON_ENSURE_ASCII | JSON_PRESERVE_ORDER);
    struct fl_tool_call *c = &p->calls[p->n_calls];
    int ok = s != NULL && strlen(s) <= FL_TOOL_ARGS_MAX && strlen(d.name) <= FL_TOOL_NAME_MAX;

    if (ok) {
        snprintf(c->name, sizeof(c->name), "%s", d.name);
        snprintf(c->args, sizeof(c->args), "%s", s);
        p->n_calls++;
    }
    free(s);
    json_decref(args);
    return ok ? NULL : fail(err, errlen, "tool %.64s: name or arguments too long for the fake",
                            d.name);
}

const char *fl_tools_plan(const json_t *root, enum fl_api api, struct fl_tool_plan *p, char *err,
                          size_t errlen)
{
    struct decls d = {.arr = NULL, .n = 0, .openai = 1};
    struct decl one;
    const char *forced = NULL;
    const char *why;
    int none = 0;
    char text[1024];

    memset(p, 0, sizeof(*p));
    p->kind = FL_TOOL_NONE;
    if (api != FL_API_CHAT && api != FL_API_MESSAGES)
        return NULL;
    why = api == FL_API_CHAT ? check_chat(root, &d, &forced, &none, err, errlen)
                             : check_messages(root, &d, &forced, &none, err, errlen);
    if (why != NULL)
        return why;
    if (last_results(root, api, p->echo)) {
        p->kind = FL_TOOL_ECHO;
        return NULL;
    }
    if (d.n == 0 || none)
        return NULL;
    p->kind = FL_TOOL_CALLS;
    const json_t *msgs = json_object_get(root, "messages");
    content_text(json_object_get(json_array_get(msgs, json_array_size(msgs) - 1), "content"), text,
                 sizeof(text));
    p->preamble = strstr(text, FL_TOOL_PREAMBLE_MARKER) != NULL;
    p->oneshot = strstr(text, FL_TOOL_ONESHOT_MARKER) != NULL;
    if (forced != NULL) {
        if (!decl_find(&d, forced, &one))
            return fail(err, errlen, "tool_choice names %.64s, which is not a declared tool",
                        forced);
        return add_call(p, one, err, errlen);
    }
    why = add_call(p, decl_at(&d, 0), err, errlen);
    if (why == NULL && d.n >= 2 && strstr(text, FL_TOOL_PARALLEL_MARKER) != NULL &&
        !json_is_false(json_object_get(root, "parallel_tool_calls")) &&
        !json_is_true(json_object_get(json_object_get(root, "tool_choice"),
                                      "disable_parallel_tool_use")))
        why = add_call(p, decl_at(&d, 1), err, errlen);
    return why;
}

size_t fl_tools_capacity(const struct fl_tool_plan *p)
{
    if (p->kind == FL_TOOL_NONE)
        return 0; /* the usual answer: nothing more */
    /* per call: its event(s) with the escaped name and arguments; the echo escaped 6x */
    return 16384 + FL_TOOL_CALLS_MAX * (PIECES + 2) * (1024 + 2 * FL_TOOL_ARGS_MAX) +
           (PIECES + 2) * 6 * FL_TOOL_ECHO_MAX;
}

/* Piece i of PIECES of s (len bytes), cut at character boundaries. */
static void piece(const char *s, size_t len, unsigned i, size_t *from, size_t *to)
{
    size_t a = len * i / PIECES, b = len * (i + 1) / PIECES;

    while (a < len && a > 0 && ((unsigned char)s[a] & 0xC0) == 0x80)
        a++;
    while (b < len && ((unsigned char)s[b] & 0xC0) == 0x80)
        b++;
    *from = a;
    *to = b;
}

/* Append j compact (takes j), as "data: J\n\n" or "event: NAME\ndata: J\n\n", and end a
 * segment when seg is not NULL. */
static int put(struct tg_buf *out, struct fl_segments *seg, const char *event, json_t *j)
{
    char *s = j != NULL ? json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    int rc = s != NULL ? 0 : TG_ENOMEM;

    if (s != NULL && seg == NULL)
        tg_buf_puts(out, s);
    else if (s != NULL && event != NULL)
        tg_buf_printf(out, "event: %s\ndata: %s\n\n", event, s);
    else if (s != NULL)
        tg_buf_printf(out, "data: %s\n\n", s);
    free(s);
    json_decref(j);
    if (rc == 0 && seg != NULL) {
        if (seg->n == FL_STREAM_SEGMENTS_MAX)
            return TG_EFULL;
        seg->ends[seg->n++] = out->len;
    }
    return rc != 0 ? rc : out->truncated ? TG_EFULL : 0;
}

static json_t *chat_usage(const struct fl_gen *g)
{
    return json_pack("{s:i,s:i,s:I}", "prompt_tokens", (int)g->prompt_tokens, "completion_tokens",
                     (int)g->completion_tokens, "total_tokens",
                     (json_int_t)g->prompt_tokens + (json_int_t)g->completion_tokens);
}

static json_t *call_input(const struct fl_tool_call *c)
{
    json_t *j = json_loads(c->args, 0, NULL);

    return j != NULL ? j : json_object();
}

int fl_tools_success(struct tg_buf *out, const struct fl_gen *g, const struct fl_tool_plan *p)
{
    char id[64];
    json_t *list = json_array();

    if (p->kind == FL_TOOL_NONE) {
        json_decref(list);
        return TG_EINVAL;
    }
    if (g->api == FL_API_CHAT) {
        json_t *msg;

        snprintf(id, sizeof(id), "chatcmpl-%016llx", (unsigned long long)g->id);
        for (size_t i = 0; i < p->n_calls && p->kind == FL_TOOL_CALLS; i++) {
            char cid[64];

            snprintf(cid, sizeof(cid), "call_%016llx_%zu", (unsigned long long)g->id, i + 1);
            json_array_append_new(list, json_pack("{s:s,s:s,s:{s:s,s:s}}", "id", cid, "type",
                                                  "function", "function", "name",
                                                  p->calls[i].name, "arguments",
                                                  p->calls[i].args));
        }
        if (p->kind == FL_TOOL_CALLS) {
            msg = json_pack("{s:s,s:o,s:o}", "role", "assistant", "content",
                            p->preamble ? json_string(FL_TOOL_PREAMBLE_TEXT) : json_null(),
                            "tool_calls", list);
        } else {
            msg = json_pack("{s:s,s:s}", "role", "assistant", "content", p->echo);
            json_decref(list);
        }
        return put(out, NULL, NULL,
                   json_pack("{s:s,s:s,s:I,s:s,s:[{s:i,s:o,s:s}],s:o}", "id", id, "object",
                             "chat.completion", "created", (json_int_t)g->created_s, "model",
                             g->model, "choices", "index", 0, "message", msg, "finish_reason",
                             p->kind == FL_TOOL_CALLS ? "tool_calls" : "stop", "usage",
                             chat_usage(g)));
    }
    if (g->api != FL_API_MESSAGES) {
        json_decref(list);
        return TG_EINVAL;
    }
    snprintf(id, sizeof(id), "msg_%016llx", (unsigned long long)g->id);
    if (p->kind == FL_TOOL_CALLS && p->preamble)
        json_array_append_new(list, json_pack("{s:s,s:s}", "type", "text", "text",
                                              FL_TOOL_PREAMBLE_TEXT));
    for (size_t i = 0; i < p->n_calls && p->kind == FL_TOOL_CALLS; i++) {
        char tid[64];

        snprintf(tid, sizeof(tid), "toolu_%016llx_%zu", (unsigned long long)g->id, i + 1);
        json_array_append_new(list, json_pack("{s:s,s:s,s:s,s:o}", "type", "tool_use", "id", tid,
                                              "name", p->calls[i].name, "input",
                                              call_input(&p->calls[i])));
    }
    if (p->kind == FL_TOOL_ECHO)
        json_array_append_new(list, json_pack("{s:s,s:s}", "type", "text", "text", p->echo));
    return put(out, NULL, NULL,
               json_pack("{s:s,s:s,s:s,s:s,s:o,s:s,s:n,s:{s:i,s:i}}", "id", id, "type", "message",
                         "role", "assistant", "model", g->model, "content", list, "stop_reason",
                         p->kind == FL_TOOL_CALLS ? "tool_use" : "end_turn", "stop_sequence",
                         "usage", "input_tokens", (int)g->prompt_tokens, "output_tokens",
                         (int)g->completion_tokens));
}

static json_t *chat_chunk(const struct fl_gen *g, json_t *delta, const char *finish)
{
    char id[64];

    snprintf(id, sizeof(id), "chatcmpl-%016llx", (unsigned long long)g->id);
    return json_pack("{s:s,s:s,s:I,s:s,s:[{s:i,s:o,s:o}]}", "id", id, "object",
                     "chat.completion.chunk", "created", (json_int_t)g->created_s, "model",
                     g->model, "choices", "index", 0, "delta", delta, "finish_reason",
                     finish != NULL ? json_string(finish) : json_null());
}

static int stream_chat(struct tg_buf *out, struct fl_segments *seg, const struct fl_gen *g,
                       const struct fl_tool_plan *p)
{
    int rc = put(out, seg, NULL,
                 chat_chunk(g, json_pack("{s:s,s:n}", "role", "assistant", "content"), NULL));

    if (rc == 0 && p->kind == FL_TOOL_CALLS && p->preamble)
        rc = put(out, seg, NULL,
                 chat_chunk(g, json_pack("{s:s}", "content", FL_TOOL_PREAMBLE_TEXT), NULL));
    if (rc == 0 && p->kind == FL_TOOL_CALLS && p->oneshot) {
        /* as vLLM, Groq and others stream them: every call whole, in one chunk */
        json_t *list = json_array();

        for (size_t i = 0; i < p->n_calls; i++) {
            char cid[64];

            snprintf(cid, sizeof(cid), "call_%016llx_%zu", (unsigned long long)g->id, i + 1);
            json_array_append_new(list, json_pack("{s:i,s:s,s:s,s:{s:s,s:s}}", "index", (int)i,
                                                  "id", cid, "type", "function", "function",
                                                  "name", p->calls[i].name, "arguments",
                                                  p->calls[i].args));
        }
        rc = put(out, seg, NULL, chat_chunk(g, json_pack("{s:o}", "tool_calls", list), NULL));
    }

    for (size_t i = 0; i < p->n_calls && p->kind == FL_TOOL_CALLS && !p->oneshot && rc == 0; i++) {
        const struct fl_tool_call *c = &p->calls[i];
        char cid[64];
        size_t len = strlen(c->args);

        snprintf(cid, sizeof(cid), "call_%016llx_%zu", (unsigned long long)g->id, i + 1);
        rc = put(out, seg, NULL,
                 chat_chunk(g,
                            json_pack("{s:[{s:i,s:s,s:s,s:{s:s,s:s}}]}", "tool_calls", "index",
                                      (int)i, "id", cid, "type", "function", "function", "name",
                                      c->name, "arguments", ""),
                            NULL));
        for (unsigned k = 0; k < PIECES && rc == 0; k++) {
            size_t a, b;

            piece(c->args, len, k, &a, &b);
            rc = put(out, seg, NULL,
                     chat_chunk(g,
                                json_pack("{s:[{s:i,s:{s:s%}}]}", "tool_calls", "index", (int)i,
                                          "function", "arguments", c->args + a, b - a),
                                NULL));
        }
    }
    for (unsigned k = 0; k < PIECES && p->kind == FL_TOOL_ECHO && rc == 0; k++) {
        size_t a, b;

        piece(p->echo, strlen(p->echo), k, &a, &b);
        rc = put(out, seg, NULL,
                 chat_chunk(g, json_pack("{s:s%}", "content", p->echo + a, b - a), NULL));
    }
    if (rc == 0)
        rc = put(out, seg, NULL,
                 chat_chunk(g, json_object(), p->kind == FL_TOOL_CALLS ? "tool_calls" : "stop"));
    if (rc == 0 && g->include_usage) {
        json_t *u = chat_chunk(g, json_object(), NULL);

        json_array_clear(json_object_get(u, "choices"));
        json_object_set_new(u, "usage", chat_usage(g));
        rc = put(out, seg, NULL, u);
    }
    if (rc == 0) {
        tg_buf_puts(out, "data: [DONE]\n\n");
        if (seg->n == FL_STREAM_SEGMENTS_MAX)
            return TG_EFULL;
        seg->ends[seg->n++] = out->len;
    }
    return rc;
}

static int stream_messages(struct tg_buf *out, struct fl_segments *seg, const struct fl_gen *g,
                           const struct fl_tool_plan *p)
{
    char id[64];
    int rc;
    size_t off = p->kind == FL_TOOL_CALLS && p->preamble ? 1 : 0; /* text block 0 first */
    size_t blocks = p->kind == FL_TOOL_CALLS ? p->n_calls + off : 1;

    snprintf(id, sizeof(id), "msg_%016llx", (unsigned long long)g->id);
    rc = put(out, seg, "message_start",
             json_pack("{s:s,s:{s:s,s:s,s:s,s:s,s:[],s:n,s:n,s:{s:i,s:i}}}", "type",
                       "message_start", "message", "id", id, "type", "message", "role",
                       "assistant", "model", g->model, "content", "stop_reason", "stop_sequence",
                       "usage", "input_tokens", (int)g->prompt_tokens, "output_tokens", 1));
    for (size_t i = 0; i < blocks && rc == 0; i++) {
        int call = p->kind == FL_TOOL_CALLS && i >= off;
        const char *s = call ? p->calls[i - off].args
                        : p->kind == FL_TOOL_CALLS ? FL_TOOL_PREAMBLE_TEXT
                                                   : p->echo;
        size_t len = strlen(s);
        json_t *start;

        if (call) {
            char tid[64];

            snprintf(tid, sizeof(tid), "toolu_%016llx_%zu", (unsigned long long)g->id,
                     i - off + 1);
            start = json_pack("{s:s,s:s,s:s,s:{}}", "type", "tool_use", "id", tid, "name",
                              p->calls[i - off].name, "input");
        } else {
            start = json_pack("{s:s,s:s}", "type", "text", "text", "");
        }
        rc = put(out, seg, "content_block_start",
                 json_pack("{s:s,s:i,s:o}", "type", "content_block_start", "index", (int)i,
                           "content_block", start));
        /* as Claude streams a call: an empty first delta; an empty input has no other */
        if (call)
            rc = put(out, seg, "content_block_delta",
                     json_pack("{s:s,s:i,s:{s:s,s:s}}", "type", "content_block_delta", "index",
                               (int)i, "delta", "type", "input_json_delta", "partial_json", ""));
        for (unsigned k = 0; k < PIECES && rc == 0 && !(call && strcmp(s, "{}") == 0); k++) {
            size_t a, b;

            piece(s, len, k, &a, &b);
            rc = put(out, seg, "content_block_delta",
                     call
                         ? json_pack("{s:s,s:i,s:{s:s,s:s%}}", "type", "content_block_delta",
                                     "index", (int)i, "delta", "type", "input_json_delta",
                                     "partial_json", s + a, b - a)
                         : json_pack("{s:s,s:i,s:{s:s,s:s%}}", "type", "content_block_delta",
                                     "index", (int)i, "delta", "type", "text_delta", "text",
                                     s + a, b - a));
        }
        if (rc == 0)
            rc = put(out, seg, "content_block_stop",
                     json_pack("{s:s,s:i}", "type", "content_block_stop", "index", (int)i));
    }
    if (rc == 0)
        rc = put(out, seg, "message_delta",
                 json_pack("{s:s,s:{s:s,s:n},s:{s:i}}", "type", "message_delta", "delta",
                           "stop_reason", p->kind == FL_TOOL_CALLS ? "tool_use" : "end_turn",
                           "stop_sequence", "usage", "output_tokens", (int)g->completion_tokens));
    if (rc == 0)
        rc = put(out, seg, "message_stop", json_pack("{s:s}", "type", "message_stop"));
    return rc;
}

int fl_tools_stream(struct tg_buf *out, struct fl_segments *seg, const struct fl_gen *g,
                    const struct fl_tool_plan *p)
{
    seg->n = 0;
    if (p->kind == FL_TOOL_NONE)
        return TG_EINVAL;
    if (g->api == FL_API_CHAT)
        return stream_chat(out, seg, g, p);
    if (g->api == FL_API_MESSAGES)
        return stream_messages(out, seg, g, p);
    return TG_EINVAL;
}
