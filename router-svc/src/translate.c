#include "translate.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "providers/provider.h"
#include "tg_err.h"
#include "translate_int.h"

/* The text of a content value: a string, or the parts of an array whose type is type (NULL:
 * any) with a string member named member, joined with no separator. Returns new string (free)
 * or NULL when there is none. */
static char *join_parts(const json_t *content, const char *type, const char *member)
{
    size_t total = 0, pass;
    size_t i;
    json_t *part;
    char *out = NULL;

    if (json_is_string(content))
        return strdup(json_string_value(content));
    if (!json_is_array(content))
        return NULL;
    for (pass = 0; pass < 2; pass++) {
        total = 0;
        json_array_foreach(content, i, part) {
            json_t *t = json_object_get(part, member);
            const char *pt = json_string_value(json_object_get(part, "type"));

            if (!json_is_string(t) || (type != NULL && (pt == NULL || strcmp(pt, type) != 0)))
                continue;
            if (out != NULL)
                memcpy(out + total, json_string_value(t), json_string_length(t));
            total += json_string_length(t);
        }
        if (out != NULL)
            break;
        out = malloc(total + 1);
        if (out == NULL)
            return NULL;
    }
    out[total] = '\0';
    return out;
}

static char *content_text(const json_t *content)
{
    return join_parts(content, NULL, "text");
}

/* prefix then s into dst (cap bytes, NUL-terminated), cut before the character that does not
 * fit: an id or name taken from a provider stays valid UTF-8, which json_pack requires (a cut
 * inside a character made every event of the stream fail). s is valid UTF-8 (from jansson). */
void rt_tr_copy_utf8(char *dst, size_t cap, const char *prefix, const char *s)
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

int rt_tr_str_eq(const json_t *v, const char *s)
{
    return json_is_string(v) && strcmp(json_string_value(v), s) == 0;
}

/* A member that is present and not null. */
static int given(const json_t *o, const char *name)
{
    const json_t *v = json_object_get(o, name);

    return v != NULL && !json_is_null(v);
}

/* The start of a translated request, for either direction: checks that req's messages is an
 * array and that req asks for none of the n_refused members refused names (asks(req, name)
 * says whether it does; api names the other side in the error), then makes {"model": model}.
 * Returns new (json_decref), or NULL: with err filled when req is refused, err untouched when
 * out of memory. */
static json_t *request_start(const json_t *req, const char *model, const char *const *refused,
                             size_t n_refused, int (*asks)(const json_t *req, const char *name),
                             const char *api, char *err, size_t errlen)
{
    json_t *out;

    if (!json_is_array(json_object_get(req, "messages"))) {
        snprintf(err, errlen, "messages: must be an array");
        return NULL;
    }
    for (size_t i = 0; i < n_refused; i++) {
        if (asks(req, refused[i])) {
            snprintf(err, errlen, "%s: %s has no equivalent", refused[i], api);
            return NULL;
        }
    }
    out = json_object();
    if (out != NULL)
        json_object_set_new(out, "model", json_string(model));
    return out;
}

/* A content array of text parts only; 0, or TG_EINVAL with err naming the first other part
 * (where.content[k]) and what takes text only. */
static int text_only(const json_t *c, const char *where, const char *what, char *err,
                     size_t errlen)
{
    size_t k;
    json_t *p;

    json_array_foreach(c, k, p) {
        const char *t = json_string_value(json_object_get(p, "type"));

        if (t == NULL || strcmp(t, "text") != 0) {
            snprintf(err, errlen, "%s.content[%zu]: %s takes text only, not \"%.32s\"", where,
                     k, what, t != NULL ? t : "(none)");
            return TG_EINVAL;
        }
    }
    return 0;
}

/* ---- Anthropic request -> OpenAI chat request ---- */

/* An Anthropic image block as an OpenAI image_url part, or NULL with err. */
static json_t *anth_image_part(const json_t *b, const char *where, char *err, size_t errlen)
{
    const json_t *src = json_object_get(b, "source");
    const char *st = json_string_value(json_object_get(src, "type"));
    const char *mt = json_string_value(json_object_get(src, "media_type"));
    const char *data = json_string_value(json_object_get(src, "data"));
    const char *url = json_string_value(json_object_get(src, "url"));
    json_t *part;
    char *u;

    if (st != NULL && strcmp(st, "url") == 0 && url != NULL)
        return json_pack("{s:s,s:{s:s}}", "type", "image_url", "image_url", "url", url);
    if (st == NULL || strcmp(st, "base64") != 0 || mt == NULL || data == NULL) {
        snprintf(err, errlen,
                 "%s.source: an image must be a base64 source with media_type and data, or a "
                 "url source",
                 where);
        return NULL;
    }
    u = malloc(strlen(mt) + strlen(data) + 16);
    if (u == NULL)
        return NULL;
    sprintf(u, "data:%s;base64,%s", mt, data);
    part = json_pack("{s:s,s:{s:s}}", "type", "image_url", "image_url", "url", u);
    free(u);
    return part;
}

/* An Anthropic document block (at where) as an OpenAI file part: a base64 PDF as file_data (a
 * data: URL), its title as the filename. What OpenAI chat has no place for (another source or
 * type, context, citations) is refused naming it. New, or NULL with err (untouched when out of
 * memory). */
static json_t *anth_document_part(const json_t *b, const char *where, char *err, size_t errlen)
{
    const json_t *src = json_object_get(b, "source");
    const char *st = json_string_value(json_object_get(src, "type"));
    const char *mt = json_string_value(json_object_get(src, "media_type"));
    const char *data = json_string_value(json_object_get(src, "data"));
    const json_t *title = json_object_get(b, "title");
    json_t *part, *file;
    char *u;

    if (st == NULL || strcmp(st, "base64") != 0 || mt == NULL ||
        strcmp(mt, "application/pdf") != 0 || data == NULL) {
        snprintf(err, errlen, "%s.source: only a base64 application/pdf document can be "
                 "translated to an OpenAI file part", where);
        return NULL;
    }
    if (given(b, "context")) {
        snprintf(err, errlen, "%s.context: OpenAI chat has no equivalent", where);
        return NULL;
    }
    if (json_is_true(json_object_get(json_object_get(b, "citations"), "enabled"))) {
        snprintf(err, errlen, "%s.citations: OpenAI chat has no equivalent", where);
        return NULL;
    }
    if (title != NULL && !json_is_null(title) && !json_is_string(title)) {
        snprintf(err, errlen, "%s.title: must be a string", where);
        return NULL;
    }
    u = malloc(strlen(data) + 32);
    if (u == NULL)
        return NULL;
    sprintf(u, "data:application/pdf;base64,%s", data);
    file = json_pack("{s:s}", "file_data", u);
    free(u);
    if (file != NULL && json_is_string(title))
        json_object_set(file, "filename", (json_t *)title);
    part = json_pack("{s:s,s:o}", "type", "file", "file", file);
    return part;
}

/* text with the error mark before it (RT_TRANSLATE_TOOL_ERROR_MARK, a space between when
 * text is not empty). New string (free) or NULL. */
static char *error_marked(const char *text)
{
    size_t ml = strlen(RT_TRANSLATE_TOOL_ERROR_MARK), tl = strlen(text);
    char *s = malloc(ml + 1 + tl + 1);

    if (s == NULL)
        return NULL;
    memcpy(s, RT_TRANSLATE_TOOL_ERROR_MARK, ml);
    if (tl > 0) {
        s[ml] = ' ';
        memcpy(s + ml + 1, text, tl + 1);
    } else {
        s[ml] = '\0';
    }
    return s;
}

/* A tool_result block b (at where) as an OpenAI tool message's content: its text (is_error
 * marked), or, when it holds images or PDF documents and opts has RT_TRANSLATE_TOOL_MEDIA, an
 * array of text, image_url and file parts (the mark first). Other blocks, and images without
 * the option, are refused naming them. New, or NULL with err (err untouched when out of memory). */
static json_t *anth_result_content(const json_t *b, const char *where, unsigned opts, char *err,
                                   size_t errlen)
{
    const json_t *c = json_object_get(b, "content");
    int is_error = json_is_true(json_object_get(b, "is_error"));
    json_t *parts = NULL, *x, *out = NULL;
    char *text = NULL, *marked;
    int images = 0;
    size_t k;

    if (json_is_array(c)) {
        parts = json_array();
        if (parts == NULL)
            return NULL;
        json_array_foreach(c, k, x) {
            const char *t = json_string_value(json_object_get(x, "type"));
            char inner[96];
            json_t *p;

            snprintf(inner, sizeof(inner), "%s.content[%zu]", where, k);
            if (t != NULL && strcmp(t, "text") == 0 && json_is_string(json_object_get(x, "text"))) {
                p = json_pack("{s:s,s:O}", "type", "text", "text", json_object_get(x, "text"));
            } else if (t != NULL && strcmp(t, "image") == 0) {
                if (!(opts & RT_TRANSLATE_TOOL_MEDIA)) {
                    snprintf(err, errlen, "%s: an image in a tool_result cannot be translated: "
                             "an OpenAI tool message takes text only", inner);
                    goto out;
                }
                p = anth_image_part(x, inner, err, errlen);
                images = 1;
            } else if (t != NULL && strcmp(t, "document") == 0 &&
                       (opts & RT_TRANSLATE_TOOL_MEDIA)) {
                p = anth_document_part(x, inner, err, errlen);
                images = 1;
            } else {
                snprintf(err, errlen, "%s.type: \"%.32s\" in a tool_result cannot be "
                         "translated to OpenAI chat", inner, t != NULL ? t : "(none)");
                goto out;
            }
            if (p == NULL)
                goto out;
            json_array_append_new(parts, p);
        }
    }
    if (images) {
        if (is_error)
            json_array_insert_new(parts, 0, json_pack("{s:s,s:s}", "type", "text", "text",
                                                      RT_TRANSLATE_TOOL_ERROR_MARK));
        out = parts;
        parts = NULL;
        goto out;
    }
    text = parts != NULL ? content_text(parts)
                         : strdup(json_is_string(c) ? json_string_value(c) : "");
    if (text == NULL)
        goto out;
    if (is_error) {
        marked = error_marked(text);
        free(text);
        text = marked;
        if (text == NULL)
            goto out;
    }
    out = json_string(text);
out:
    free(text);
    json_decref(parts);
    return out;
}

/* One Anthropic message (index i) appended to msgs as OpenAI messages: a user turn's tool
 * results first, as tool messages, then the rest; an assistant turn's tool_use blocks as its
 * tool_calls. 0, or TG_EINVAL with err. */
static int anth_message(const json_t *m, size_t i, unsigned opts, json_t *msgs, char *err,
                        size_t errlen)
{
    const char *role = json_string_value(json_object_get(m, "role"));
    const json_t *content = json_object_get(m, "content");
    int assistant;
    json_t *parts = NULL, *calls = NULL, *b, *msg, *thinking = NULL;
    char where[64];
    int images = 0, rc = TG_EINVAL, results = 0;
    size_t k;

    if (role == NULL) {
        snprintf(err, errlen, "messages[%zu].role: must be a string", i);
        return TG_EINVAL;
    }
    if (strcmp(role, "user") != 0 && strcmp(role, "assistant") != 0) {
        snprintf(err, errlen, "messages[%zu].role: \"%.32s\" is not user or assistant", i, role);
        return TG_EINVAL;
    }
    assistant = role[0] == 'a';
    if (!json_is_array(content)) {
        char *text = content_text(content);

        json_array_append_new(msgs, json_pack("{s:s,s:s}", "role", role, "content",
                                              text != NULL ? text : ""));
        free(text);
        return 0;
    }
    parts = json_array();
    calls = json_array();
    json_array_foreach(content, k, b) {
        const char *type = json_string_value(json_object_get(b, "type"));
        json_t *p;

        snprintf(where, sizeof(where), "messages[%zu].content[%zu]", i, k);
        if (type == NULL) {
            snprintf(err, errlen, "%s.type: must be a string", where);
            goto out;
        }
        if (strcmp(type, "text") == 0 && json_is_string(json_object_get(b, "text"))) {
            json_array_append_new(parts, json_pack("{s:s,s:O}", "type", "text", "text",
                                                   json_object_get(b, "text")));
        } else if (strcmp(type, "image") == 0 && !assistant) {
            p = anth_image_part(b, where, err, errlen);
            if (p == NULL)
                goto out;
            json_array_append_new(parts, p);
            images = 1;
        } else if (strcmp(type, "document") == 0 && !assistant) {
            p = anth_document_part(b, where, err, errlen);
            if (p == NULL)
                goto out;
            json_array_append_new(parts, p);
            images = 1; /* the content stays an array of parts */
        } else if (strcmp(type, "tool_use") == 0 && assistant) {
            const json_t *id = json_object_get(b, "id"), *name = json_object_get(b, "name");
            const json_t *input = json_object_get(b, "input");
            char *args;

            if (!json_is_string(id) || !json_is_string(name)) {
                snprintf(err, errlen, "%s: a tool_use needs a string id and name", where);
                goto out;
            }
            args = input != NULL ? json_dumps(input, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
            json_array_append_new(calls, json_pack("{s:O,s:s,s:{s:O,s:s}}", "id", id, "type",
                                                   "function", "function", "name", name,
                                                   "arguments", args != NULL ? args : "{}"));
            free(args);
        } else if (strcmp(type, "tool_result") == 0 && !assistant) {
            const json_t *id = json_object_get(b, "tool_use_id");

            if (!json_is_string(id)) {
                snprintf(err, errlen, "%s.tool_use_id: must be a string", where);
                goto out;
            }
            p = anth_result_content(b, where, opts, err, errlen);
            if (p == NULL)
                goto out;
            /* the tool messages answer the previous assistant turn's calls: they come first */
            json_array_append_new(msgs, json_pack("{s:s,s:O,s:o}", "role", "tool",
                                                  "tool_call_id", id, "content", p));
            results++;
        } else if ((strcmp(type, "thinking") == 0 || strcmp(type, "redacted_thinking") == 0) &&
                   assistant) {
            const int red = type[0] == 'r';
            const json_t *th = json_object_get(b, red ? "data" : "thinking");
            const json_t *sig = json_object_get(b, "signature");

            if (!(opts & RT_TRANSLATE_THINKING_BLOCKS))
                continue; /* OpenAI chat takes no reasoning as input */
            if (!json_is_string(th) || (!red && !json_is_string(sig))) {
                snprintf(err, errlen, "%s.%s: expected a string", where,
                         !json_is_string(th) ? (red ? "data" : "thinking") : "signature");
                goto out;
            }
            if (thinking == NULL)
                thinking = json_array();
            json_array_append_new(thinking,
                                  red ? json_pack("{s:s,s:O}", "type", "redacted_thinking",
                                                  "data", th)
                                      : json_pack("{s:s,s:O,s:O}", "type", "thinking",
                                                  "thinking", th, "signature", sig));
        } else {
            snprintf(err, errlen, "%s.type: \"%.32s\" in a%s message cannot be translated to "
                     "OpenAI chat", where, type, assistant ? "n assistant" : " user");
            goto out;
        }
    }
    if (assistant) {
        char *text = content_text(parts);

        msg = json_pack("{s:s}", "role", "assistant");
        if (text != NULL && (text[0] != '\0' || json_array_size(calls) == 0))
            json_object_set_new(msg, "content", json_string(text));
        else
            json_object_set_new(msg, "content", json_null());
        free(text);
        if (json_array_size(calls) > 0)
            json_object_set(msg, "tool_calls", calls);
        if (thinking != NULL)
            json_object_set(msg, "thinking_blocks", thinking);
        json_array_append_new(msgs, msg);
    } else if (json_array_size(parts) > 0 || results == 0) {
        if (images) {
            json_array_append_new(msgs, json_pack("{s:s,s:O}", "role", "user", "content", parts));
        } else {
            char *text = content_text(parts);

            json_array_append_new(msgs, json_pack("{s:s,s:s}", "role", "user", "content",
                                                  text != NULL ? text : ""));
            free(text);
        }
    }
    rc = 0;
out:
    json_decref(parts);
    json_decref(calls);
    json_decref(thinking);
    return rc;
}

/* Anthropic tools and tool_choice as OpenAI's. 0 or TG_EINVAL with err. */
static int anth_tools(const json_t *req, json_t *out, char *err, size_t errlen)
{
    const json_t *tools = json_object_get(req, "tools");
    const json_t *tc = json_object_get(req, "tool_choice");
    const char *tct = json_string_value(json_object_get(tc, "type"));
    json_t *list, *t;
    size_t i;

    if (json_is_array(tools) && json_array_size(tools) > 0) {
        list = json_array();
        json_array_foreach(tools, i, t) {
            const json_t *name = json_object_get(t, "name");
            const json_t *schema = json_object_get(t, "input_schema");
            const char *type = json_string_value(json_object_get(t, "type"));
            json_t *fn;

            if (type != NULL && strcmp(type, "custom") != 0) {
                snprintf(err, errlen, "tools[%zu].type: \"%.48s\" is a server tool OpenAI chat "
                         "does not have", i, type);
                json_decref(list);
                return TG_EINVAL;
            }
            if (!json_is_string(name) || !json_is_object(schema)) {
                snprintf(err, errlen, "tools[%zu]: a tool needs a string name and an "
                         "input_schema object", i);
                json_decref(list);
                return TG_EINVAL;
            }
            fn = json_pack("{s:O,s:O}", "name", name, "parameters", schema);
            copy_field(fn, "description", t, "description");
            json_array_append_new(list, json_pack("{s:s,s:o}", "type", "function", "function",
                                                  fn));
        }
        json_object_set_new(out, "tools", list);
    } else if (given(req, "tools") && !json_is_array(tools)) {
        snprintf(err, errlen, "tools: must be an array");
        return TG_EINVAL;
    }
    if (!given(req, "tool_choice"))
        return 0;
    if (tct == NULL) {
        snprintf(err, errlen, "tool_choice.type: must be auto, any, tool or none");
        return TG_EINVAL;
    }
    if (strcmp(tct, "auto") == 0) {
        json_object_set_new(out, "tool_choice", json_string("auto"));
    } else if (strcmp(tct, "any") == 0) {
        json_object_set_new(out, "tool_choice", json_string("required"));
    } else if (strcmp(tct, "none") == 0) {
        json_object_set_new(out, "tool_choice", json_string("none"));
    } else if (strcmp(tct, "tool") == 0 && json_is_string(json_object_get(tc, "name"))) {
        json_object_set_new(out, "tool_choice",
                            json_pack("{s:s,s:{s:O}}", "type", "function", "function", "name",
                                      json_object_get(tc, "name")));
    } else {
        snprintf(err, errlen, "tool_choice.type: must be auto, any, tool (with a name) or none");
        return TG_EINVAL;
    }
    if (json_is_true(json_object_get(tc, "disable_parallel_tool_use")))
        json_object_set_new(out, "parallel_tool_calls", json_false());
    return 0;
}

/* Anthropic thinking as OpenAI reasoning_effort. 0 or TG_EINVAL with err. */
static int anth_thinking(const json_t *req, json_t *out, char *err, size_t errlen)
{
    const json_t *th = json_object_get(req, "thinking");
    const char *type = json_string_value(json_object_get(th, "type"));
    const json_t *budget = json_object_get(th, "budget_tokens");
    json_int_t b;

    if (!given(req, "thinking") || (type != NULL && strcmp(type, "disabled") == 0))
        return 0;
    if (type == NULL || strcmp(type, "enabled") != 0 || !json_is_integer(budget)) {
        snprintf(err, errlen, "thinking: must be {\"type\":\"enabled\",\"budget_tokens\":N} or "
                 "{\"type\":\"disabled\"}");
        return TG_EINVAL;
    }
    b = json_integer_value(budget);
    json_object_set_new(out, "reasoning_effort",
                        json_string(b < RT_TRANSLATE_THINKING_MEDIUM_TOKENS ? "low"
                                    : b < RT_TRANSLATE_THINKING_HIGH_TOKENS ? "medium"
                                                                            : "high"));
    return 0;
}

json_t *rt_translate_messages_to_chat(const json_t *req, const char *model, char *err,
                                      size_t errlen)
{
    return rt_translate_messages_to_chat_opts(req, model, 0, err, errlen);
}

json_t *rt_translate_messages_to_chat_opts(const json_t *req, const char *model, unsigned opts,
                                           char *err, size_t errlen)
{
    static const char *const refused[] = {"top_k", "mcp_servers", "container"};
    json_t *out = NULL;
    json_t *msgs = NULL;
    json_t *in_msgs = json_object_get(req, "messages");
    json_t *system = json_object_get(req, "system");
    json_t *stop = json_object_get(req, "stop_sequences");
    json_t *meta = json_object_get(req, "metadata");
    json_t *m;
    size_t i;

    out = request_start(req, model, refused, sizeof(refused) / sizeof(refused[0]), given,
                        "OpenAI chat", err, errlen);
    if (out == NULL)
        goto fail;
    msgs = json_array();
    if (msgs == NULL)
        goto fail;
    if (system != NULL && !json_is_null(system)) {
        char *text = content_text(system);

        if (text != NULL) {
            json_array_append_new(msgs, json_pack("{s:s,s:s}", "role", "system", "content", text));
            free(text);
        }
    }
    json_array_foreach(in_msgs, i, m) {
        if (anth_message(m, i, opts, msgs, err, errlen) != 0)
            goto fail;
    }
    json_object_set_new(out, "messages", msgs);
    msgs = NULL;
    if (anth_tools(req, out, err, errlen) != 0 || anth_thinking(req, out, err, errlen) != 0)
        goto fail;
    /* OpenAI's reasoning models take max_completion_tokens (reasoning included), not
     * max_tokens: a request that thinks goes to one */
    copy_field(out, given(out, "reasoning_effort") ? "max_completion_tokens" : "max_tokens", req,
               "max_tokens");
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

/* ---- OpenAI chat request -> Anthropic request ---- */

/* An OpenAI image_url (an object with url, or the URL itself) as an Anthropic image block, for
 * rt_dialect_content: a data:<type>;base64, URL as a base64 source, an http(s) URL as a url
 * source. New or NULL with err. */
static json_t *chat_image_block(const json_t *image_url, char *err, size_t errlen)
{
    const json_t *u = json_is_object(image_url) ? json_object_get(image_url, "url") : image_url;
    const char *url = json_string_value(u);
    const char *semi;

    if (url != NULL && strncmp(url, "data:", 5) == 0 && (semi = strstr(url, ";base64,")) != NULL)
        return json_pack("{s:s,s:{s:s,s:s%,s:s}}", "type", "image", "source", "type", "base64",
                         "media_type", url + 5, (size_t)(semi - url - 5), "data", semi + 8);
    if (url != NULL && (strncmp(url, "https://", 8) == 0 || strncmp(url, "http://", 7) == 0))
        return json_pack("{s:s,s:{s:s,s:s}}", "type", "image", "source", "type", "url", "url",
                         url);
    snprintf(err, errlen, "messages: image_url.url must be a data:<type>;base64, URL or an "
             "http(s) URL");
    return NULL;
}

/* An OpenAI file part's file object (part k) as an Anthropic document block: a PDF given as
 * a data: URL as a base64 source, its filename as the title. New or NULL with err. */
static json_t *chat_file_block(const json_t *file, size_t k, char *err, size_t errlen)
{
    const char *data, *filename;
    json_t *b;

    if (rt_dialect_pdf(file, k, &data, &filename, err, errlen) != 0)
        return NULL;
    b = json_pack("{s:s,s:{s:s,s:s,s:s}}", "type", "document", "source", "type", "base64",
                  "media_type", "application/pdf", "data", data);
    if (b != NULL && filename != NULL)
        json_object_set_new(b, "title", json_string(filename));
    return b;
}

/* An OpenAI content array as Anthropic blocks appended to blocks (text and images; a user's
 * PDF file parts, files, as document blocks; other part types are refused, naming the type).
 * 0 or TG_EINVAL with err. */
static int chat_blocks(const json_t *content, json_t *blocks, int files, char *err,
                       size_t errlen)
{
    size_t i;
    json_t *b;

    if (rt_dialect_content(content, blocks, chat_image_block, files ? chat_file_block : NULL, 1,
                           err, errlen) != 0)
        return TG_EINVAL;
    json_array_foreach(blocks, i, b) {
        if (!given(b, "type"))
            json_object_set_new(b, "type", json_string("text"));
    }
    return 0;
}

/* The OpenAI request members Anthropic cannot express, refused when they ask for something:
 * whether req's member name asks for anything. */
static int chat_asks(const json_t *req, const char *name)
{
    const json_t *v = json_object_get(req, name);

    if (v == NULL || json_is_null(v) || json_is_false(v))
        return 0;
    if (strcmp(name, "n") == 0)
        return !(json_is_integer(v) && json_integer_value(v) == 1);
    if (strcmp(name, "presence_penalty") == 0 || strcmp(name, "frequency_penalty") == 0)
        return !(json_is_number(v) && json_number_value(v) == 0.0);
    if (strcmp(name, "logit_bias") == 0)
        return !(json_is_object(v) && json_object_size(v) == 0);
    if (strcmp(name, "modalities") == 0) {
        size_t i;
        json_t *x;

        json_array_foreach(v, i, x) {
            if (!rt_tr_str_eq(x, "text"))
                return 1;
        }
        return !json_is_array(v);
    }
    return 1;
}

/* A tool result (role tool) as a tool_result block. New, or NULL with err. */
static json_t *chat_tool_result(const json_t *m, size_t i, char *err, size_t errlen)
{
    const json_t *id = json_object_get(m, "tool_call_id");
    const json_t *c = json_object_get(m, "content");
    json_t *b, *k, *blocks = NULL;
    char *text = NULL;
    int is_error, media = 0;
    size_t n;

    if (!json_is_string(id)) {
        snprintf(err, errlen, "messages[%zu].tool_call_id: must be a string", i);
        return NULL;
    }
    json_array_foreach(c, n, k) {
        const char *t = json_string_value(json_object_get(k, "type"));

        if (t != NULL && strcmp(t, "image_url") == 0) {
            media = 1;
        } else if (t == NULL || strcmp(t, "text") != 0) {
            snprintf(err, errlen, "messages[%zu].content[%zu]: a tool message takes text and "
                     "images only, not \"%.32s\"", i, n, t != NULL ? t : "(none)");
            return NULL;
        }
    }
    c = rt_dialect_tool_content(c, &is_error);
    if (c == NULL)
        return NULL;
    if (media) {
        /* a tool_result's content takes text and image blocks */
        blocks = json_array();
        if (blocks == NULL || chat_blocks(c, blocks, 0, err, errlen) != 0) {
            json_decref(blocks);
            json_decref((json_t *)c);
            return NULL;
        }
        b = json_pack("{s:s,s:O,s:o}", "type", "tool_result", "tool_use_id", id, "content",
                      blocks);
    } else {
        text = content_text(c);
        b = json_pack("{s:s,s:O,s:s}", "type", "tool_result", "tool_use_id", id, "content",
                      text != NULL ? text : "");
    }
    free(text);
    json_decref((json_t *)c);
    if (b != NULL && is_error)
        json_object_set_new(b, "is_error", json_true());
    return b;
}

/* An assistant message's content and tool_calls as Anthropic blocks. New, or NULL with err. */
static json_t *chat_assistant(const json_t *m, size_t i, char *err, size_t errlen)
{
    const json_t *calls = json_object_get(m, "tool_calls");
    const json_t *c = json_object_get(m, "content");
    json_t *blocks = json_array(), *tc;
    size_t k;

    /* the turn's thinking first, signatures unchanged: Anthropic checks them when tools are
     * used with extended thinking */
    if (rt_dialect_thinking_blocks(m, i, blocks, 0, err, errlen) != 0)
        goto fail;
    if (json_is_array(c) && chat_blocks(c, blocks, 0, err, errlen) != 0)
        goto fail;
    if (json_is_string(c) && json_string_length(c) > 0)
        json_array_append_new(blocks, json_pack("{s:s,s:O}", "type", "text", "text", c));
    json_array_foreach(calls, k, tc) {
        const json_t *fn = json_object_get(tc, "function");
        const json_t *id = json_object_get(tc, "id"), *name = json_object_get(fn, "name");

        if (!json_is_string(id) || !json_is_string(name)) {
            snprintf(err, errlen, "messages[%zu].tool_calls[%zu]: a tool call needs a string id "
                     "and function.name", i, k);
            goto fail;
        }
        json_array_append_new(blocks, json_pack("{s:s,s:O,s:O,s:o}", "type", "tool_use", "id", id,
                                                "name", name, "input", rt_dialect_call_args(fn)));
    }
    return blocks;
fail:
    json_decref(blocks);
    return NULL;
}

/* OpenAI tools, tool_choice, parallel_tool_calls and response_format as Anthropic's tools and
 * tool_choice. 0 or TG_EINVAL with err. */
static int chat_tools(const json_t *req, json_t *out, char *err, size_t errlen)
{
    const json_t *tools = json_object_get(req, "tools");
    const json_t *choice = json_object_get(req, "tool_choice");
    const json_t *rf = json_object_get(req, "response_format");
    const char *rft = json_string_value(json_object_get(rf, "type"));
    const char *cs = json_string_value(choice);
    json_t *list = NULL, *tc = NULL, *t;
    size_t i;

    if (given(req, "tools") && !json_is_array(tools)) {
        snprintf(err, errlen, "tools: must be an array");
        return TG_EINVAL;
    }
    if (given(req, "response_format") && (rft == NULL || strcmp(rft, "text") != 0)) {
        const json_t *js = json_object_get(json_object_get(rf, "json_schema"), "schema");
        json_t *schema;

        if (json_array_size(tools) > 0) {
            snprintf(err, errlen, "response_format: cannot be combined with tools for an "
                     "Anthropic deployment (it travels as a forced tool)");
            return TG_EINVAL;
        }
        if (rft != NULL && strcmp(rft, "json_schema") == 0 && json_is_object(js))
            schema = json_incref((json_t *)js);
        else if (rft != NULL && strcmp(rft, "json_object") == 0)
            schema = json_pack("{s:s,s:b}", "type", "object", "additionalProperties", 1);
        else {
            snprintf(err, errlen, "response_format: must be text, json_object or json_schema "
                     "with a json_schema.schema object");
            return TG_EINVAL;
        }
        json_object_set_new(out, "tools",
                            json_pack("[{s:s,s:s,s:o}]", "name", RT_TRANSLATE_JSON_TOOL,
                                      "description", "Respond with a JSON object.",
                                      "input_schema", schema));
        json_object_set_new(out, "tool_choice",
                            json_pack("{s:s,s:s}", "type", "tool", "name", RT_TRANSLATE_JSON_TOOL));
        return 0;
    }
    if (json_array_size(tools) > 0) {
        list = json_array();
        json_array_foreach(tools, i, t) {
            const json_t *fn = json_object_get(t, "function");
            const json_t *name = json_object_get(fn, "name");
            const json_t *params = json_object_get(fn, "parameters");
            json_t *at;

            if (!rt_tr_str_eq(json_object_get(t, "type"), "function") || !json_is_string(name)) {
                snprintf(err, errlen, "tools[%zu]: must be {\"type\":\"function\",\"function\":"
                         "{\"name\":...}}", i);
                json_decref(list);
                return TG_EINVAL;
            }
            at = json_pack("{s:O,s:o}", "name", name, "input_schema",
                           json_is_object(params) ? json_incref((json_t *)params)
                                                  : json_pack("{s:s,s:{}}", "type", "object",
                                                              "properties"));
            copy_field(at, "description", fn, "description");
            json_array_append_new(list, at);
        }
        json_object_set_new(out, "tools", list);
    }
    if (cs != NULL && strcmp(cs, "auto") == 0)
        tc = json_pack("{s:s}", "type", "auto");
    else if (cs != NULL && strcmp(cs, "required") == 0)
        tc = json_pack("{s:s}", "type", "any");
    else if (cs != NULL && strcmp(cs, "none") == 0)
        tc = json_pack("{s:s}", "type", "none");
    else if (json_is_object(choice) &&
             json_is_string(json_object_get(json_object_get(choice, "function"), "name")))
        tc = json_pack("{s:s,s:O}", "type", "tool", "name",
                       json_object_get(json_object_get(choice, "function"), "name"));
    else if (given(req, "tool_choice")) {
        snprintf(err, errlen, "tool_choice: must be auto, none, required or {\"type\":"
                 "\"function\",\"function\":{\"name\":...}}");
        return TG_EINVAL;
    }
    if (json_is_false(json_object_get(req, "parallel_tool_calls")) &&
        json_array_size(tools) > 0 && !(cs != NULL && strcmp(cs, "none") == 0)) {
        if (tc == NULL)
            tc = json_pack("{s:s}", "type", "auto");
        json_object_set_new(tc, "disable_parallel_tool_use", json_true());
    }
    if (tc != NULL)
        json_object_set_new(out, "tool_choice", tc);
    return 0;
}

/* reasoning_effort as Anthropic thinking, and max_tokens (required by Anthropic). 0 or TG_EINVAL
 * with err. */
static int chat_max_tokens(const json_t *req, json_t *out, char *err, size_t errlen)
{
    const json_t *mt = json_object_get(req, "max_tokens");
    const char *mtn = "max_tokens";
    const json_t *re = json_object_get(req, "reasoning_effort");
    const char *res = json_string_value(re);
    json_int_t budget = 0;

    if (!json_is_integer(mt)) {
        mt = json_object_get(req, "max_completion_tokens");
        mtn = "max_completion_tokens";
    }
    if (given(req, "reasoning_effort")) {
        if (res != NULL && (strcmp(res, "minimal") == 0 || strcmp(res, "low") == 0))
            budget = RT_TRANSLATE_THINKING_LOW_TOKENS;
        else if (res != NULL && strcmp(res, "medium") == 0)
            budget = RT_TRANSLATE_THINKING_MEDIUM_TOKENS;
        else if (res != NULL && strcmp(res, "high") == 0)
            budget = RT_TRANSLATE_THINKING_HIGH_TOKENS;
        else if (res == NULL || strcmp(res, "none") != 0) {
            snprintf(err, errlen, "reasoning_effort: must be none, minimal, low, medium or high");
            return TG_EINVAL;
        }
    }
    if (json_is_integer(mt)) {
        if (budget > 0 && json_integer_value(mt) <= budget) {
            snprintf(err, errlen, "%s: must be above the thinking budget of %lld tokens that "
                     "reasoning_effort \"%s\" asks for", mtn, (long long)budget, res);
            return TG_EINVAL;
        }
        json_object_set(out, "max_tokens", (json_t *)mt);
    } else {
        json_object_set_new(out, "max_tokens",
                            json_integer(RT_TRANSLATE_DEFAULT_MAX_TOKENS + budget));
    }
    if (budget > 0)
        json_object_set_new(out, "thinking",
                            json_pack("{s:s,s:I}", "type", "enabled", "budget_tokens", budget));
    return 0;
}

/* Append a system or developer message's text to *system (a '\n' between messages). */
static int system_append(char **system, size_t *system_len, const char *text)
{
    size_t tl = text != NULL ? strlen(text) : 0;
    char *ns = realloc(*system, *system_len + tl + 2);

    if (ns == NULL)
        return TG_ENOMEM;
    *system = ns;
    if (*system_len > 0)
        ns[(*system_len)++] = '\n';
    if (tl > 0)
        memcpy(ns + *system_len, text, tl);
    *system_len += tl;
    ns[*system_len] = '\0';
    return 0;
}

/* Anthropic refuses tool_use and tool_result blocks in a request without tools; OpenAI takes
 * them, and its clients often leave the tools out of the turn that carries the results. The
 * tools the history's tool_use blocks name are declared then, each with an open object
 * schema. */
static void history_tools(json_t *out)
{
    const json_t *msgs = json_object_get(out, "messages");
    json_t *list, *m, *b;
    size_t i, k;

    if (json_object_get(out, "tools") != NULL)
        return;
    list = json_array();
    json_array_foreach(msgs, i, m) {
        json_array_foreach(json_object_get(m, "content"), k, b) {
            const char *name = json_string_value(json_object_get(b, "name"));
            size_t j;
            json_t *t;
            int seen = 0;

            if (!rt_tr_str_eq(json_object_get(b, "type"), "tool_use") || name == NULL)
                continue;
            json_array_foreach(list, j, t) {
                seen = seen || strcmp(json_string_value(json_object_get(t, "name")), name) == 0;
            }
            if (!seen)
                json_array_append_new(list, json_pack("{s:s,s:{s:s,s:{}}}", "name", name,
                                                      "input_schema", "type", "object",
                                                      "properties"));
        }
    }
    if (json_array_size(list) > 0)
        json_object_set_new(out, "tools", list);
    else
        json_decref(list);
}

json_t *rt_translate_chat_to_messages(const json_t *req, const char *model, char *err,
                                      size_t errlen)
{
    static const char *const refused[] = {
        "n",          "logprobs",  "top_logprobs",     "audio",              "modalities",
        "logit_bias", "seed",      "presence_penalty", "frequency_penalty",  "prediction",
        "functions",  "function_call", "web_search_options"};
    json_t *out = NULL;
    json_t *msgs = NULL;
    json_t *in_msgs = json_object_get(req, "messages");
    json_t *stop = json_object_get(req, "stop");
    json_t *user = json_object_get(req, "user");
    json_t *m;
    json_t *results = NULL; /* the user message that holds the latest tool results */
    size_t i;
    char *system = NULL;
    size_t system_len = 0;

    out = request_start(req, model, refused, sizeof(refused) / sizeof(refused[0]), chat_asks,
                        "Anthropic's Messages API", err, errlen);
    if (out == NULL)
        goto fail;
    msgs = json_array();
    if (msgs == NULL)
        goto fail;
    json_array_foreach(in_msgs, i, m) {
        json_t *role = json_object_get(m, "role");
        const json_t *content = json_object_get(m, "content");
        const char *r;
        json_t *blocks = NULL;

        if (!json_is_string(role)) {
            snprintf(err, errlen, "messages[%zu].role: must be a string", i);
            goto fail;
        }
        r = json_string_value(role);
        if (rt_dialect_is_system(r)) {
            char where[32];
            char *text;

            snprintf(where, sizeof(where), "messages[%zu]", i);
            if (text_only(content, where, "a system message", err, errlen) != 0)
                goto fail;
            text = content_text(content);
            if (system_append(&system, &system_len, text) != 0) {
                free(text);
                goto fail;
            }
            free(text);
            continue;
        }
        if (strcmp(r, "tool") == 0) {
            json_t *b = chat_tool_result(m, i, err, errlen);

            if (b == NULL)
                goto fail;
            if (results == NULL) {
                results = json_pack("{s:s,s:[]}", "role", "user", "content");
                json_array_append_new(msgs, results);
            }
            /* consecutive tool results: one user message */
            json_array_append_new(json_object_get(results, "content"), b);
            continue;
        }
        if (strcmp(r, "assistant") == 0) {
            blocks = chat_assistant(m, i, err, errlen);
            if (blocks == NULL)
                goto fail;
            if (json_array_size(json_object_get(m, "tool_calls")) == 0 &&
                json_array_size(json_object_get(m, "thinking_blocks")) == 0 &&
                !json_is_array(content)) {
                /* text only: a string, as before */
                json_decref(blocks);
                blocks = NULL;
                json_array_append_new(
                    msgs, json_pack("{s:s,s:s}", "role", "assistant", "content",
                                    json_is_string(content) ? json_string_value(content) : ""));
            } else {
                json_array_append_new(msgs, json_pack("{s:s,s:o}", "role", "assistant",
                                                      "content", blocks));
            }
            results = NULL;
            continue;
        }
        if (strcmp(r, "user") != 0) {
            snprintf(err, errlen, "messages[%zu].role: \"%.32s\" is not system, developer, "
                     "user, assistant or tool", i, r);
            goto fail;
        }
        if (json_is_array(content) || results != NULL) {
            blocks = json_array();
            if (json_is_array(content) && chat_blocks(content, blocks, 1, err, errlen) != 0) {
                json_decref(blocks);
                goto fail;
            }
            if (json_is_string(content) && json_string_length(content) > 0)
                json_array_append_new(blocks,
                                      json_pack("{s:s,s:O}", "type", "text", "text", content));
        }
        if (results != NULL) {
            /* the user's words after tool results join their message, after the results */
            json_array_extend(json_object_get(results, "content"), blocks);
            json_decref(blocks);
        } else if (blocks != NULL) {
            json_array_append_new(msgs,
                                  json_pack("{s:s,s:o}", "role", "user", "content", blocks));
        } else {
            char *text = content_text(content);

            json_array_append_new(msgs, json_pack("{s:s,s:s}", "role", "user", "content",
                                                  text != NULL ? text : ""));
            free(text);
        }
        results = NULL;
    }
    if (system != NULL)
        json_object_set_new(out, "system", json_string(system));
    json_object_set_new(out, "messages", msgs);
    msgs = NULL;
    if (chat_max_tokens(req, out, err, errlen) != 0 || chat_tools(req, out, err, errlen) != 0)
        goto fail;
    history_tools(out);
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

unsigned rt_translate_flags(const json_t *req, enum rt_translate_dir dir)
{
    const json_t *rf = json_object_get(req, "response_format");
    const char *t = json_string_value(json_object_get(rf, "type"));

    if (rf == NULL) /* a Responses request: text.format becomes the chat's response_format */
        t = json_string_value(
            json_object_get(json_object_get(json_object_get(req, "text"), "format"), "type"));
    if (dir != RT_TRANSLATE_MESSAGES_TO_CHAT || t == NULL || strcmp(t, "text") == 0)
        return 0;
    return RT_TRANSLATE_JSON_OUTPUT;
}

const char *rt_tr_finish_to_stop(const char *f)
{
    if (f == NULL)
        return "end_turn";
    if (strcmp(f, "length") == 0)
        return "max_tokens";
    if (strcmp(f, "tool_calls") == 0 || strcmp(f, "function_call") == 0)
        return "tool_use";
    if (strcmp(f, "content_filter") == 0)
        return "refusal";
    return "end_turn";
}

const char *rt_tr_stop_to_finish(const char *s)
{
    if (s == NULL)
        return "stop";
    if (strcmp(s, "max_tokens") == 0 || strcmp(s, "model_context_window_exceeded") == 0)
        return "length";
    if (strcmp(s, "tool_use") == 0)
        return "tool_calls";
    if (strcmp(s, "refusal") == 0)
        return "content_filter";
    return "stop";
}

json_int_t rt_tr_int_or_zero(const json_t *o, const char *name)
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

json_int_t rt_tr_tokens_sum(json_int_t a, json_int_t b)
{
    return tokens_sum(a, b);
}

/* The cache's part of an OpenAI usage object (prompt_tokens_details.cached_tokens), cut to the
 * prompt tokens. */
json_int_t rt_tr_chat_cached(const json_t *usage)
{
    json_int_t p = rt_tr_int_or_zero(usage, "prompt_tokens");
    json_int_t c = rt_tr_int_or_zero(json_object_get(usage, "prompt_tokens_details"), "cached_tokens");

    return c < 0 ? 0 : c > p ? p : c;
}

/* Anthropic's usage for prompt (cache included), read and written from the cache, output. */
json_t *rt_tr_messages_usage(json_int_t prompt, json_int_t read, json_int_t written,
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

/* OpenAI's usage for the same counts (cache reads in prompt_tokens_details.cached_tokens, the
 * cache's writes in cache_creation_input_tokens as LiteLLM writes them). */
json_t *rt_tr_chat_usage(json_int_t prompt, json_int_t read, json_int_t written,
                         json_int_t output)
{
    json_t *u = json_pack("{s:I,s:I,s:I}", "prompt_tokens", prompt, "completion_tokens", output,
                          "total_tokens", tokens_sum(prompt, output));

    if (u != NULL && read > 0)
        json_object_set_new(u, "prompt_tokens_details", json_pack("{s:I}", "cached_tokens", read));
    if (u != NULL && written > 0) /* LiteLLM's chat usage carries the cache's writes so */
        json_object_set_new(u, "cache_creation_input_tokens", json_integer(written));
    return u;
}

/* An Anthropic usage object's prompt total (input + cache reads + cache writes). */
json_int_t rt_tr_messages_prompt(const json_t *usage)
{
    return tokens_sum(tokens_sum(rt_tr_int_or_zero(usage, "input_tokens"),
                                 rt_tr_int_or_zero(usage, "cache_read_input_tokens")),
                      rt_tr_int_or_zero(usage, "cache_creation_input_tokens"));
}

json_t *rt_translate_chat_resp_to_messages(const json_t *resp, const char *model)
{
    json_t *choices = json_object_get(resp, "choices");
    json_t *c0 = json_array_get(choices, 0);
    json_t *msg = json_object_get(c0, "message");
    json_t *usage = json_object_get(resp, "usage");
    json_t *id = json_object_get(resp, "id");
    json_t *reasoning = json_object_get(msg, "reasoning_content");
    json_t *calls = json_object_get(msg, "tool_calls");
    json_t *content, *tc;
    char *text;
    char idbuf[96];
    json_t *out;
    size_t k;

    if (!json_is_object(msg))
        return NULL;
    content = json_array();
    /* thinking_blocks (LiteLLM's field, from Bedrock Converse) carry the signatures: they are
     * the thinking when there are any; else reasoning_content is, unsigned */
    json_array_foreach(json_object_get(msg, "thinking_blocks"), k, tc) {
        const json_t *th = json_object_get(tc, "thinking"), *sig = json_object_get(tc, "signature");
        const json_t *data = json_object_get(tc, "data");

        if (rt_tr_str_eq(json_object_get(tc, "type"), "thinking") && json_is_string(th) &&
            json_is_string(sig))
            json_array_append_new(content, json_pack("{s:s,s:O,s:O}", "type", "thinking",
                                                     "thinking", th, "signature", sig));
        else if (rt_tr_str_eq(json_object_get(tc, "type"), "redacted_thinking") &&
                 json_is_string(data))
            json_array_append_new(content, json_pack("{s:s,s:O}", "type", "redacted_thinking",
                                                     "data", data));
    }
    if (json_array_size(content) == 0 && json_is_string(reasoning) &&
        json_string_length(reasoning) > 0)
        json_array_append_new(content, json_pack("{s:s,s:O,s:s}", "type", "thinking", "thinking",
                                                 reasoning, "signature", ""));
    text = content_text(json_object_get(msg, "content"));
    if ((text == NULL || text[0] == '\0') && json_is_string(json_object_get(msg, "refusal"))) {
        /* the model's refusal is what it said */
        free(text);
        text = content_text(json_object_get(msg, "refusal"));
    }
    if ((text != NULL && text[0] != '\0') || json_array_size(calls) == 0)
        json_array_append_new(content, json_pack("{s:s,s:s}", "type", "text", "text",
                                                 text != NULL ? text : ""));
    free(text);
    json_array_foreach(calls, k, tc) {
        const json_t *fn = json_object_get(tc, "function");
        const char *tid = json_string_value(json_object_get(tc, "id"));
        const char *name = json_string_value(json_object_get(fn, "name"));
        char tbuf[72];

        if (tid == NULL)
            snprintf(tbuf, sizeof(tbuf), "toolu_%zu", k);
        else
            rt_tr_copy_utf8(tbuf, sizeof(tbuf), "", tid);
        json_array_append_new(content, json_pack("{s:s,s:s,s:s,s:o}", "type", "tool_use", "id",
                                                 tbuf, "name", name != NULL ? name : "", "input",
                                                 rt_dialect_call_args(fn)));
    }
    rt_tr_copy_utf8(idbuf, sizeof(idbuf), "msg_", json_is_string(id) ? json_string_value(id) : "0");
    out = json_pack("{s:s,s:s,s:s,s:s,s:o,s:s,s:n,s:o}", "id", idbuf, "type", "message", "role",
                    "assistant", "model", model, "content", content, "stop_reason",
                    rt_tr_finish_to_stop(json_string_value(json_object_get(c0, "finish_reason"))),
                    "stop_sequence", "usage",
                    rt_tr_messages_usage(rt_tr_int_or_zero(usage, "prompt_tokens"), rt_tr_chat_cached(usage), 0,
                                   rt_tr_int_or_zero(usage, "completion_tokens")));
    return out;
}

/* An Anthropic answer's thinking and redacted_thinking blocks as LiteLLM's thinking_blocks, in
 * order, signatures and data unchanged (the client sends them back with a tool's result); a
 * thinking block without a signature is reasoning_content only. New array, or NULL when there
 * are none. */
static json_t *thinking_blocks_of(const json_t *content)
{
    json_t *tb = NULL, *b;
    size_t i;

    json_array_foreach(content, i, b) {
        const json_t *type = json_object_get(b, "type");
        const json_t *th = json_object_get(b, "thinking"), *sig = json_object_get(b, "signature");
        const json_t *data = json_object_get(b, "data");
        json_t *e = NULL;

        if (rt_tr_str_eq(type, "thinking") && json_is_string(th) && json_is_string(sig))
            e = json_pack("{s:s,s:O,s:O}", "type", "thinking", "thinking", th, "signature", sig);
        else if (rt_tr_str_eq(type, "redacted_thinking") && json_is_string(data))
            e = json_pack("{s:s,s:O}", "type", "redacted_thinking", "data", data);
        if (e == NULL)
            continue;
        if (tb == NULL)
            tb = json_array();
        json_array_append_new(tb, e);
    }
    return tb;
}

json_t *rt_translate_messages_resp_to_chat(const json_t *resp, const char *model,
                                           unsigned flags)
{
    json_t *content = json_object_get(resp, "content");
    json_t *usage = json_object_get(resp, "usage");
    json_t *id = json_object_get(resp, "id");
    const char *finish = rt_tr_stop_to_finish(json_string_value(json_object_get(resp, "stop_reason")));
    json_int_t in, outk;
    char *text, *thinking;
    json_t *out, *msg, *calls, *b;
    char *json_text = NULL;
    size_t i;

    if (!json_is_array(content))
        return NULL;
    calls = json_array();
    json_array_foreach(content, i, b) {
        const json_t *name = json_object_get(b, "name"), *input = json_object_get(b, "input");
        const json_t *tid = json_object_get(b, "id");
        char *args;

        if (!rt_tr_str_eq(json_object_get(b, "type"), "tool_use"))
            continue;
        args = json_dumps(input != NULL ? input : json_null(), JSON_COMPACT | JSON_ENCODE_ANY);
        if ((flags & RT_TRANSLATE_JSON_OUTPUT) && rt_tr_str_eq(name, RT_TRANSLATE_JSON_TOOL) &&
            json_text == NULL) {
            json_text = args; /* the structured output: the answer's text */
            continue;
        }
        json_array_append_new(calls, json_pack("{s:s,s:s,s:{s:s,s:s}}", "id",
                                               json_is_string(tid) ? json_string_value(tid)
                                                                   : "call_0",
                                               "type", "function", "function", "name",
                                               json_is_string(name) ? json_string_value(name)
                                                                    : "",
                                               "arguments", args != NULL ? args : "{}"));
        free(args);
    }
    text = join_parts(content, "text", "text");
    thinking = join_parts(content, "thinking", "thinking");
    msg = json_pack("{s:s}", "role", "assistant");
    if (json_text != NULL)
        json_object_set_new(msg, "content", json_string(json_text));
    else if ((text != NULL && text[0] != '\0') || json_array_size(calls) == 0)
        json_object_set_new(msg, "content", json_string(text != NULL ? text : ""));
    else
        json_object_set_new(msg, "content", json_null());
    if (thinking != NULL && thinking[0] != '\0')
        json_object_set_new(msg, "reasoning_content", json_string(thinking));
    {
        json_t *tb = thinking_blocks_of(content);

        if (tb != NULL)
            json_object_set_new(msg, "thinking_blocks", tb);
    }
    if (json_array_size(calls) > 0)
        json_object_set(msg, "tool_calls", calls);
    else if (json_text != NULL && strcmp(finish, "tool_calls") == 0)
        finish = "stop"; /* the forced JSON tool ended the answer, not a call of the client's */
    json_decref(calls);
    free(text);
    free(thinking);
    free(json_text);
    in = rt_tr_messages_prompt(usage);
    outk = rt_tr_int_or_zero(usage, "output_tokens");
    out = json_pack("{s:s,s:s,s:I,s:s,s:[{s:i,s:o,s:s}],s:o}", "id",
                    json_is_string(id) ? json_string_value(id) : "chatcmpl-0", "object",
                    "chat.completion", "created", (json_int_t)time(NULL), "model", model,
                    "choices", "index", 0, "message", msg, "finish_reason", finish, "usage",
                    rt_tr_chat_usage(in, rt_tr_int_or_zero(usage, "cache_read_input_tokens"),
                                     rt_tr_int_or_zero(usage, "cache_creation_input_tokens"),
                                     outk));
    return out;
}
