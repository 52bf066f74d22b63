/* translate_responses: OpenAI Responses requests and answers <-> OpenAI chat (translate.h has
 * what maps and what is refused); the streams are in translate_responses_stream.c. Pure
 * functions over jansson values; no I/O. */
#include "translate.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "providers/provider.h"
#include "tg_err.h"
#include "translate_int.h"

/* A member that is present and not null. */
static int given(const json_t *o, const char *name)
{
    const json_t *v = json_object_get(o, name);

    return v != NULL && !json_is_null(v);
}

static void copy_member(json_t *dst, const char *dname, const json_t *src, const char *sname)
{
    json_t *v = json_object_get(src, sname);

    if (v != NULL && !json_is_null(v))
        json_object_set(dst, dname, v);
}

/* ---- reasoning.encrypted_content: the router's own, versioned (translate.h) ---- */

/* The value of base64url character c, or -1. */
static int b64url_value(unsigned char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '-')
        return 62;
    if (c == '_')
        return 63;
    return -1;
}

int rt_tr_resp_wants_enc(const json_t *req)
{
    size_t i;
    json_t *v;

    json_array_foreach(json_object_get(req, "include"), i, v) {
        if (rt_tr_str_eq(v, "reasoning.encrypted_content"))
            return 1;
    }
    return 0;
}

int rt_tr_resp_wants_summary(const json_t *req)
{
    const json_t *v = json_object_get(json_object_get(req, "reasoning"), "summary");

    return rt_tr_str_eq(v, "auto") || rt_tr_str_eq(v, "concise") || rt_tr_str_eq(v, "detailed");
}

json_t *rt_tr_resp_reasoning_item(const char *id, const json_t *text, int summary)
{
    if (text == NULL)
        return json_pack("{s:s,s:s,s:[],s:[]}", "id", id, "type", "reasoning", "summary",
                         "content");
    return summary ? json_pack("{s:s,s:s,s:[{s:s,s:O}],s:[]}", "id", id, "type", "reasoning",
                               "summary", "type", "summary_text", "text", text, "content")
                   : json_pack("{s:s,s:s,s:[],s:[{s:s,s:O}]}", "id", id, "type", "reasoning",
                               "summary", "content", "type", "reasoning_text", "text", text);
}

char *rt_tr_reasoning_encode(int redacted, const char *val, size_t n, size_t *len)
{
    size_t plen = strlen(RT_TRANSLATE_REASONING_ENC_PREFIX);
    json_t *o = json_object();
    char *js = NULL, *out = NULL;
    size_t jl, cap;

    if (o == NULL)
        return NULL;
    /* "t" first: jansson writes members in the order they were set */
    if (json_object_set_new(o, "t", json_string(redacted ? "redacted" : "thinking")) != 0 ||
        json_object_set_new(o, redacted ? "d" : "s", json_stringn(val, n)) != 0)
        goto out;
    js = json_dumps(o, JSON_COMPACT);
    if (js == NULL)
        goto out;
    jl = strlen(js);
    cap = plen + (jl + 2) / 3 * 4 + 1;
    out = malloc(cap);
    if (out == NULL)
        goto out;
    memcpy(out, RT_TRANSLATE_REASONING_ENC_PREFIX, plen);
    *len = plen + rt_base64(js, jl, out + plen, cap - plen, 1);
out:
    free(js);
    json_decref(o);
    return out;
}

int rt_tr_reasoning_decode(const char *s, size_t n, int *redacted, json_t **val, char *err,
                           size_t errlen)
{
    size_t plen = strlen(RT_TRANSLATE_REASONING_ENC_PREFIX);
    unsigned char *buf = NULL;
    json_t *o = NULL;
    const json_t *t, *v;
    size_t i, bl = 0;
    unsigned long acc = 0;
    int bits = 0, rc = TG_EINVAL;

    *val = NULL;
    if (n < plen || memcmp(s, RT_TRANSLATE_REASONING_ENC_PREFIX, plen) != 0)
        return 1;
    s += plen;
    n -= plen;
    if (n % 4 == 1) {
        snprintf(err, errlen, "not valid base64url after \"%s\"",
                 RT_TRANSLATE_REASONING_ENC_PREFIX);
        return TG_EINVAL;
    }
    buf = malloc(n / 4 * 3 + 3);
    if (buf == NULL)
        return TG_ENOMEM;
    for (i = 0; i < n; i++) {
        int d = b64url_value((unsigned char)s[i]);

        if (d < 0) {
            snprintf(err, errlen, "not valid base64url after \"%s\"",
                     RT_TRANSLATE_REASONING_ENC_PREFIX);
            goto out;
        }
        acc = (acc << 6 | (unsigned long)d) & 0xffffffUL;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            buf[bl++] = (unsigned char)(acc >> bits & 0xff);
        }
    }
    if (bits > 0 && (acc & ((1UL << bits) - 1)) != 0) {
        /* bits left over that no byte takes: not what the router wrote */
        snprintf(err, errlen, "not valid base64url after \"%s\"",
                 RT_TRANSLATE_REASONING_ENC_PREFIX);
        goto out;
    }
    o = json_loadb((const char *)buf, bl, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, NULL);
    t = json_object_get(o, "t");
    if (rt_tr_str_eq(t, "thinking") || rt_tr_str_eq(t, "redacted")) {
        *redacted = rt_tr_str_eq(t, "redacted");
        v = json_object_get(o, *redacted ? "d" : "s");
        if (json_is_string(v) && json_object_size(o) == 2) {
            *val = json_incref((json_t *)v);
            rc = 0;
            goto out;
        }
    }
    snprintf(err, errlen, "not a reasoning block written by this router");
out:
    json_decref(o);
    free(buf);
    return rc;
}

/* ---- Responses request -> chat request ---- */

/* Request members refused outright, with why (the client's 400 names the member). */
static const struct {
    const char *name;
    const char *why;
} refused_members[] = {
    {"previous_response_id", "the router keeps no conversation state: send the whole "
                             "conversation in input"},
    {"conversation", "the router keeps no conversation state: send the whole conversation "
                     "in input"},
    {"prompt", "stored prompt templates are not available through chat completions"},
    {"top_logprobs", "log probabilities are not translated"},
    {"max_tool_calls", "chat completions have no limit on tool calls"},
};

/* The request-level checks: refused members and values. 0 or TG_EINVAL with err. */
static int request_refused(const json_t *req, char *err, size_t errlen)
{
    const json_t *v;

    for (size_t i = 0; i < sizeof(refused_members) / sizeof(refused_members[0]); i++) {
        if (given(req, refused_members[i].name)) {
            snprintf(err, errlen, "%s: %s", refused_members[i].name, refused_members[i].why);
            return TG_EINVAL;
        }
    }
    if (json_is_true(json_object_get(req, "store"))) {
        snprintf(err, errlen, "store: this deployment's answers are not stored; send store false");
        return TG_EINVAL;
    }
    if (json_is_true(json_object_get(req, "background"))) {
        snprintf(err, errlen, "background: background responses are not available through chat "
                              "completions");
        return TG_EINVAL;
    }
    v = json_object_get(req, "include");
    if (v != NULL && !json_is_null(v) && !json_is_array(v)) {
        snprintf(err, errlen, "include: must be an array");
        return TG_EINVAL;
    }
    for (size_t i = 0; i < json_array_size(v); i++) {
        const json_t *e = json_array_get(v, i);

        /* reasoning.encrypted_content: the router's own (thinking signatures), see
         * RT_TRANSLATE_REASONING_ENC_PREFIX */
        if (rt_tr_str_eq(e, "reasoning.encrypted_content"))
            continue;
        snprintf(err, errlen, "include[%zu]: \"%.64s\": extra output data is not available "
                 "through chat completions (reasoning.encrypted_content is)", i,
                 json_is_string(e) ? json_string_value(e) : "(not a string)");
        return TG_EINVAL;
    }
    v = json_object_get(req, "truncation");
    if (v != NULL && !json_is_null(v) && !rt_tr_str_eq(v, "disabled")) {
        snprintf(err, errlen, "truncation: only \"disabled\" can be translated");
        return TG_EINVAL;
    }
    return 0;
}

/* An input_image part as a chat image_url part, or NULL with err (where names the part). */
static json_t *image_part(const json_t *p, const char *where, char *err, size_t errlen)
{
    const json_t *url = json_object_get(p, "image_url");
    json_t *iu;

    if (given(p, "file_id") || !json_is_string(url)) {
        snprintf(err, errlen, "%s.%s: images are translated from image_url only, not by file id",
                 where, given(p, "file_id") ? "file_id" : "image_url");
        return NULL;
    }
    iu = json_pack("{s:O}", "url", url);
    if (iu != NULL && json_is_string(json_object_get(p, "detail")))
        json_object_set(iu, "detail", json_object_get(p, "detail"));
    return iu != NULL ? json_pack("{s:s,s:o}", "type", "image_url", "image_url", iu) : NULL;
}

/* An input_file part as a chat file part: file_data (a data: URL) and filename as they are;
 * a file by file_id or file_url is refused (the router holds no uploads and fetches nothing).
 * New, or NULL with err (where names the part). */
static json_t *file_part(const json_t *p, const char *where, char *err, size_t errlen)
{
    const json_t *data = json_object_get(p, "file_data");
    const json_t *name = json_object_get(p, "filename");
    json_t *f;

    if (given(p, "file_id") || given(p, "file_url") || !json_is_string(data)) {
        snprintf(err, errlen, "%s.%s: files are translated from file_data only, not by id or "
                 "URL", where, given(p, "file_id") ? "file_id"
                                : given(p, "file_url") ? "file_url" : "file_data");
        return NULL;
    }
    if (name != NULL && !json_is_null(name) && !json_is_string(name)) {
        snprintf(err, errlen, "%s.filename: must be a string", where);
        return NULL;
    }
    f = json_pack("{s:O}", "file_data", data);
    if (f != NULL && json_is_string(name))
        json_object_set(f, "filename", (json_t *)name);
    return f != NULL ? json_pack("{s:s,s:o}", "type", "file", "file", f) : NULL;
}

/* A message item's content (a string or parts) as chat content for role. User messages keep
 * images and files (parts array); the other roles take text only (a string). New, or NULL with
 * err. */
static json_t *message_content(const json_t *content, const char *role, const char *where,
                               char *err, size_t errlen)
{
    int user = strcmp(role, "user") == 0;
    json_t *parts = NULL;
    char *text = NULL;
    size_t text_len = 0;
    json_t *out = NULL;
    size_t k;
    json_t *p;
    char pw[96];

    if (json_is_string(content))
        return json_incref((json_t *)content);
    if (!json_is_array(content)) {
        snprintf(err, errlen, "%s.content: must be a string or an array of parts", where);
        return NULL;
    }
    parts = json_array();
    if (parts == NULL)
        goto nomem;
    json_array_foreach(content, k, p) {
        const char *t = json_string_value(json_object_get(p, "type"));
        const json_t *s = NULL;

        snprintf(pw, sizeof(pw), "%s.content[%zu]", where, k);
        if (t != NULL && (strcmp(t, "input_text") == 0 || strcmp(t, "output_text") == 0))
            s = json_object_get(p, "text");
        else if (t != NULL && strcmp(t, "refusal") == 0)
            s = json_object_get(p, "refusal");
        if (s != NULL) {
            if (!json_is_string(s)) {
                snprintf(err, errlen, "%s: text must be a string", pw);
                goto fail;
            }
            if (user) {
                if (json_array_append_new(parts, json_pack("{s:s,s:O}", "type", "text", "text",
                                                           s)) != 0)
                    goto nomem;
            } else {
                size_t sl = json_string_length(s);
                char *nt = realloc(text, text_len + sl + 1);

                if (nt == NULL)
                    goto nomem;
                text = nt;
                memcpy(text + text_len, json_string_value(s), sl);
                text_len += sl;
                text[text_len] = '\0';
            }
            continue;
        }
        if (t != NULL && (strcmp(t, "input_image") == 0 || strcmp(t, "input_file") == 0) &&
            user) {
            json_t *ip = strcmp(t, "input_image") == 0 ? image_part(p, pw, err, errlen)
                                                       : file_part(p, pw, err, errlen);

            if (ip == NULL || json_array_append_new(parts, ip) != 0)
                goto fail;
            continue;
        }
        snprintf(err, errlen, "%s: a part of type \"%.32s\" cannot be translated%s", pw,
                 t != NULL ? t : "(none)",
                 t != NULL && (strcmp(t, "input_image") == 0 || strcmp(t, "input_file") == 0)
                     ? " in a message not from the user"
                     : "");
        goto fail;
    }
    if (user)
        return parts;
    out = json_string(text != NULL ? text : "");
    free(text);
    json_decref(parts);
    return out;
nomem:
    snprintf(err, errlen, "out of memory");
fail:
    free(text);
    json_decref(parts);
    return NULL;
}

/* A function_call_output item's output (a string, or text parts) as a tool message's content.
 * New, or NULL with err. */
static json_t *call_output(const json_t *output, const char *where, char *err, size_t errlen)
{
    size_t k;
    json_t *p;
    json_t *parts;

    if (json_is_string(output))
        return json_incref((json_t *)output);
    if (!json_is_array(output)) {
        snprintf(err, errlen, "%s.output: must be a string or an array of parts", where);
        return NULL;
    }
    parts = json_array();
    json_array_foreach(output, k, p) {
        const json_t *s = json_object_get(p, "text");

        if (!rt_tr_str_eq(json_object_get(p, "type"), "input_text") || !json_is_string(s)) {
            snprintf(err, errlen, "%s.output[%zu]: a tool's output is translated as text only",
                     where, k);
            json_decref(parts);
            return NULL;
        }
        json_array_append_new(parts, json_pack("{s:s,s:O}", "type", "text", "text", s));
    }
    return parts;
}

/* The assistant message m takes the thinking blocks waiting in *pending (reasoning items of
 * its turn), which start again empty. 0 or TG_ENOMEM. */
static int take_pending(json_t *m, json_t **pending)
{
    json_t *fresh;
    int rc;

    if (json_array_size(*pending) == 0)
        return 0;
    fresh = json_array();
    if (fresh == NULL)
        return TG_ENOMEM;
    /* set_new takes *pending even when it fails */
    rc = json_object_set_new(m, "thinking_blocks", *pending);
    *pending = fresh;
    return rc != 0 ? TG_ENOMEM : 0;
}

/* A function_call item appended to msgs: to the last message's tool_calls when that is an
 * assistant message (text and calls of one turn) and no reasoning item came since, else as a
 * new assistant message (which takes the thinking blocks in *pending). */
static int append_call(json_t *msgs, const json_t *it, json_t **pending, const char *where,
                       char *err, size_t errlen)
{
    const json_t *cid = json_object_get(it, "call_id"), *name = json_object_get(it, "name");
    const json_t *args = json_object_get(it, "arguments");
    json_t *last = json_array_get(msgs, json_array_size(msgs) - 1);
    json_t *calls;

    if (!json_is_string(cid) || !json_is_string(name) || !json_is_string(args)) {
        snprintf(err, errlen, "%s: a function_call needs string call_id, name and arguments",
                 where);
        return TG_EINVAL;
    }
    if (!rt_tr_str_eq(json_object_get(last, "role"), "assistant") ||
        json_array_size(*pending) > 0) {
        last = json_pack("{s:s,s:n}", "role", "assistant", "content");
        if (last == NULL || json_array_append_new(msgs, last) != 0 ||
            take_pending(last, pending) != 0)
            return TG_ENOMEM;
    }
    calls = json_object_get(last, "tool_calls");
    if (calls == NULL) {
        calls = json_array();
        if (calls == NULL || json_object_set_new(last, "tool_calls", calls) != 0)
            return TG_ENOMEM;
    }
    return json_array_append_new(calls, json_pack("{s:O,s:s,s:{s:O,s:O}}", "id", cid, "type",
                                                  "function", "function", "name", name,
                                                  "arguments", args)) != 0
               ? TG_ENOMEM
               : 0;
}

/* A reasoning item's text as a thinking block's: its content's reasoning_text parts, one after
 * the other, else its summary's summary_text parts joined by a blank line. New JSON string, or
 * NULL with err (TG_EINVAL in *rc) or out of memory (TG_ENOMEM). */
static json_t *reasoning_text(const json_t *it, const char *where, int *rc, char *err,
                              size_t errlen)
{
    const json_t *content = json_object_get(it, "content");
    const json_t *summary = json_object_get(it, "summary");
    const json_t *parts = json_array_size(content) > 0 ? content : summary;
    const char *want = parts == content ? "reasoning_text" : "summary_text";
    size_t total = 0, k, n = 0;
    json_t *p, *out;
    char *text;

    *rc = TG_EINVAL;
    if (content != NULL && !json_is_null(content) && !json_is_array(content)) {
        snprintf(err, errlen, "%s.content: must be an array of reasoning_text parts", where);
        return NULL;
    }
    if (summary != NULL && !json_is_null(summary) && !json_is_array(summary)) {
        snprintf(err, errlen, "%s.summary: must be an array of summary_text parts", where);
        return NULL;
    }
    json_array_foreach(parts, k, p) {
        const json_t *t = json_object_get(p, "text");

        if (!rt_tr_str_eq(json_object_get(p, "type"), want) || !json_is_string(t)) {
            snprintf(err, errlen, "%s.%s[%zu]: a %s part with a string text is expected", where,
                     parts == content ? "content" : "summary", k, want);
            return NULL;
        }
        total += json_string_length(t) + 2;
    }
    *rc = TG_ENOMEM;
    text = malloc(total + 1);
    if (text == NULL)
        return NULL;
    json_array_foreach(parts, k, p) {
        const json_t *t = json_object_get(p, "text");

        if (k > 0 && parts == summary) {
            memcpy(text + n, "\n\n", 2);
            n += 2;
        }
        memcpy(text + n, json_string_value(t), json_string_length(t));
        n += json_string_length(t);
    }
    out = json_stringn(text, n);
    free(text);
    return out;
}

/* A reasoning item: one of ours (encrypted_content with RT_TRANSLATE_REASONING_ENC_PREFIX) is
 * a thinking block appended to *pending, for the next assistant message or function call;
 * others are left out (chat takes no reasoning as input). 0, TG_EINVAL with err, TG_ENOMEM. */
static int reasoning_item(const json_t *it, json_t *pending, const char *where, char *err,
                          size_t errlen)
{
    const json_t *enc = json_object_get(it, "encrypted_content");
    json_t *val = NULL, *text = NULL, *b;
    char why[96];
    int redacted = 0, rc;

    if (enc == NULL || json_is_null(enc))
        return 0;
    if (!json_is_string(enc)) {
        snprintf(err, errlen, "%s.encrypted_content: must be a string", where);
        return TG_EINVAL;
    }
    rc = rt_tr_reasoning_decode(json_string_value(enc), json_string_length(enc), &redacted, &val,
                                why, sizeof(why));
    if (rc == 1)
        return 0; /* not ours (another service's): nothing the chat request can carry */
    if (rc == TG_EINVAL)
        snprintf(err, errlen, "%s.encrypted_content: %s", where, why);
    if (rc != 0)
        return rc;
    if (!redacted) {
        text = reasoning_text(it, where, &rc, err, errlen);
        if (text == NULL) {
            json_decref(val);
            return rc;
        }
        b = json_pack("{s:s,s:o,s:o}", "type", "thinking", "thinking", text, "signature", val);
    } else {
        b = json_pack("{s:s,s:o}", "type", "redacted_thinking", "data", val);
    }
    return b == NULL || json_array_append_new(pending, b) != 0 ? TG_ENOMEM : 0;
}

/* One input item appended to msgs as chat messages; *pending holds the thinking blocks of
 * reasoning items waiting for their turn's assistant message. 0, TG_EINVAL with err,
 * TG_ENOMEM. */
static int input_item(json_t *msgs, json_t **pending, const json_t *it, size_t i, char *err,
                      size_t errlen)
{
    const char *type = json_string_value(json_object_get(it, "type"));
    const char *role = json_string_value(json_object_get(it, "role"));
    char where[48];
    json_t *content, *m;

    snprintf(where, sizeof(where), "input[%zu]", i);
    if (!json_is_object(it)) {
        snprintf(err, errlen, "%s: must be an object", where);
        return TG_EINVAL;
    }
    if (type == NULL && role != NULL)
        type = "message"; /* the easy input message: role and content only */
    if (type == NULL) {
        snprintf(err, errlen, "%s.type: required", where);
        return TG_EINVAL;
    }
    if (strcmp(type, "message") == 0) {
        if (role == NULL || (strcmp(role, "user") != 0 && strcmp(role, "assistant") != 0 &&
                             strcmp(role, "system") != 0 && strcmp(role, "developer") != 0)) {
            snprintf(err, errlen, "%s.role: \"%.32s\" cannot be translated", where,
                     role != NULL ? role : "(none)");
            return TG_EINVAL;
        }
        content = message_content(json_object_get(it, "content"), role, where, err, errlen);
        if (content == NULL)
            return TG_EINVAL;
        m = json_pack("{s:s,s:o}", "role", role, "content", content);
        if (m == NULL || json_array_append_new(msgs, m) != 0)
            return TG_ENOMEM;
        if (strcmp(role, "assistant") == 0)
            return take_pending(m, pending);
        json_array_clear(*pending); /* reasoning of a turn that said nothing */
        return 0;
    }
    if (strcmp(type, "function_call") == 0)
        return append_call(msgs, it, pending, where, err, errlen);
    if (strcmp(type, "reasoning") == 0)
        return reasoning_item(it, *pending, where, err, errlen);
    json_array_clear(*pending);
    if (strcmp(type, "function_call_output") == 0) {
        const json_t *cid = json_object_get(it, "call_id");

        if (!json_is_string(cid)) {
            snprintf(err, errlen, "%s.call_id: a string is required", where);
            return TG_EINVAL;
        }
        content = call_output(json_object_get(it, "output"), where, err, errlen);
        if (content == NULL)
            return TG_EINVAL;
        return json_array_append_new(msgs, json_pack("{s:s,s:O,s:o}", "role", "tool",
                                                     "tool_call_id", cid, "content",
                                                     content)) != 0
                   ? TG_ENOMEM
                   : 0;
    }
    snprintf(err, errlen, "%s.type: \"%.32s\" items cannot be translated to chat completions",
             where, type);
    return TG_EINVAL;
}

/* tools: function tools moved under "function". New array, or NULL with err. */
static json_t *tools_to_chat(const json_t *tools, char *err, size_t errlen)
{
    json_t *out = json_array();
    size_t i;
    json_t *t;

    if (!json_is_array(tools)) {
        snprintf(err, errlen, "tools: must be an array");
        json_decref(out);
        return NULL;
    }
    json_array_foreach(tools, i, t) {
        const char *type = json_string_value(json_object_get(t, "type"));
        json_t *fn;

        if (type == NULL || strcmp(type, "function") != 0) {
            snprintf(err, errlen,
                     "tools[%zu].type: \"%.32s\" tools have no equivalent in chat completions "
                     "(function tools only)",
                     i, type != NULL ? type : "(none)");
            json_decref(out);
            return NULL;
        }
        if (!json_is_string(json_object_get(t, "name"))) {
            snprintf(err, errlen, "tools[%zu].name: a string is required", i);
            json_decref(out);
            return NULL;
        }
        fn = json_object();
        copy_member(fn, "name", t, "name");
        copy_member(fn, "description", t, "description");
        copy_member(fn, "parameters", t, "parameters");
        copy_member(fn, "strict", t, "strict");
        json_array_append_new(out, json_pack("{s:s,s:o}", "type", "function", "function", fn));
    }
    return out;
}

/* tool_choice: none / auto / required as they are, a function by name under "function". New,
 * or NULL with err. */
static json_t *tool_choice_to_chat(const json_t *tc, char *err, size_t errlen)
{
    const char *s = json_string_value(tc);

    if (s != NULL &&
        (strcmp(s, "none") == 0 || strcmp(s, "auto") == 0 || strcmp(s, "required") == 0))
        return json_string(s);
    if (json_is_object(tc) && rt_tr_str_eq(json_object_get(tc, "type"), "function") &&
        json_is_string(json_object_get(tc, "name")))
        return json_pack("{s:s,s:{s:O}}", "type", "function", "function", "name",
                         json_object_get(tc, "name"));
    snprintf(err, errlen, "tool_choice: only none, auto, required or a function can be "
                          "translated");
    return NULL;
}

/* text.format -> response_format (NULL out: none); text.verbosity -> verbosity. 0 or TG_EINVAL
 * with err. */
static int text_to_chat(const json_t *text, json_t *out, char *err, size_t errlen)
{
    const json_t *f = json_object_get(text, "format");
    const char *t = json_string_value(json_object_get(f, "type"));

    copy_member(out, "verbosity", text, "verbosity");
    if (f == NULL || json_is_null(f) || (t != NULL && strcmp(t, "text") == 0))
        return 0;
    if (t != NULL && strcmp(t, "json_object") == 0) {
        json_object_set_new(out, "response_format", json_pack("{s:s}", "type", "json_object"));
        return 0;
    }
    if (t != NULL && strcmp(t, "json_schema") == 0) {
        json_t *js;

        if (!json_is_string(json_object_get(f, "name")) ||
            !json_is_object(json_object_get(f, "schema"))) {
            snprintf(err, errlen, "text.format: json_schema needs a string name and a schema "
                                  "object");
            return TG_EINVAL;
        }
        js = json_object();
        copy_member(js, "name", f, "name");
        copy_member(js, "description", f, "description");
        copy_member(js, "schema", f, "schema");
        copy_member(js, "strict", f, "strict");
        json_object_set_new(out, "response_format",
                            json_pack("{s:s,s:o}", "type", "json_schema", "json_schema", js));
        return 0;
    }
    snprintf(err, errlen, "text.format.type: \"%.32s\" cannot be translated",
             t != NULL ? t : "(none)");
    return TG_EINVAL;
}

json_t *rt_translate_responses_to_chat(const json_t *req, const char *model, char *err,
                                       size_t errlen)
{
    static const char *const copied[] = {"temperature",      "top_p",
                                         "user",             "metadata",
                                         "parallel_tool_calls", "service_tier",
                                         "prompt_cache_key", "safety_identifier"};
    const json_t *input = json_object_get(req, "input");
    const json_t *instr = json_object_get(req, "instructions");
    json_t *out = NULL, *msgs = NULL, *pending = NULL, *v;
    size_t i;
    json_t *it;

    if (!json_is_object(req)) {
        snprintf(err, errlen, "the request must be a JSON object");
        return NULL;
    }
    if (request_refused(req, err, errlen) != 0)
        return NULL;
    out = json_pack("{s:s}", "model", model != NULL ? model : "");
    msgs = json_array();
    pending = json_array();
    if (out == NULL || msgs == NULL || pending == NULL)
        goto nomem;
    if (instr != NULL && !json_is_null(instr)) {
        if (!json_is_string(instr)) {
            snprintf(err, errlen, "instructions: must be a string");
            goto fail;
        }
        json_array_append_new(msgs, json_pack("{s:s,s:O}", "role", "system", "content", instr));
    }
    if (json_is_string(input)) {
        json_array_append_new(msgs, json_pack("{s:s,s:O}", "role", "user", "content", input));
    } else if (json_is_array(input)) {
        json_array_foreach(input, i, it) {
            int rc = input_item(msgs, &pending, it, i, err, errlen);

            if (rc == TG_ENOMEM)
                goto nomem;
            if (rc != 0)
                goto fail;
        }
    } else {
        snprintf(err, errlen, "input: must be a string or an array of items");
        goto fail;
    }
    if (json_array_size(msgs) == 0) {
        snprintf(err, errlen, "input: no message to send");
        goto fail;
    }
    json_object_set_new(out, "messages", msgs);
    msgs = NULL;
    if (given(req, "tools") && json_array_size(json_object_get(req, "tools")) > 0) {
        v = tools_to_chat(json_object_get(req, "tools"), err, errlen);
        if (v == NULL)
            goto fail;
        json_object_set_new(out, "tools", v);
    }
    if (given(req, "tool_choice")) {
        v = tool_choice_to_chat(json_object_get(req, "tool_choice"), err, errlen);
        if (v == NULL)
            goto fail;
        json_object_set_new(out, "tool_choice", v);
    }
    if (given(req, "text") && text_to_chat(json_object_get(req, "text"), out, err, errlen) != 0)
        goto fail;
    copy_member(out, "reasoning_effort", json_object_get(req, "reasoning"), "effort");
    copy_member(out, "max_completion_tokens", req, "max_output_tokens");
    for (i = 0; i < sizeof(copied) / sizeof(copied[0]); i++)
        copy_member(out, copied[i], req, copied[i]);
    if (json_is_true(json_object_get(req, "stream"))) {
        json_object_set_new(out, "stream", json_true());
        /* the usage chunk: response.completed carries the usage */
        json_object_set_new(out, "stream_options", json_pack("{s:b}", "include_usage", 1));
    }
    json_decref(pending); /* reasoning items after the last assistant turn: left out */
    return out;
nomem:
    snprintf(err, errlen, "out of memory");
fail:
    json_decref(pending);
    json_decref(msgs);
    json_decref(out);
    return NULL;
}

/* ---- chat answer -> Responses answer ---- */

json_t *rt_tr_resp_echo(const json_t *req)
{
    json_t *e = json_object();
    const json_t *v;

    if (e == NULL)
        return NULL;
    v = json_object_get(req, "instructions");
    json_object_set_new(e, "instructions", json_is_string(v) ? json_copy((json_t *)v) : json_null());
    v = json_object_get(req, "max_output_tokens");
    json_object_set_new(e, "max_output_tokens",
                        json_is_integer(v) ? json_copy((json_t *)v) : json_null());
    v = json_object_get(req, "parallel_tool_calls");
    json_object_set_new(e, "parallel_tool_calls", json_boolean(!json_is_false(v)));
    json_object_set_new(e, "previous_response_id", json_null());
    v = json_object_get(req, "reasoning");
    json_object_set_new(e, "reasoning",
                        json_pack("{s:O,s:O}", "effort",
                                  given(v, "effort") ? json_object_get(v, "effort") : json_null(),
                                  "summary",
                                  given(v, "summary") ? json_object_get(v, "summary")
                                                      : json_null()));
    json_object_set_new(e, "store", json_false());
    v = json_object_get(req, "temperature");
    json_object_set_new(e, "temperature", json_is_number(v) ? json_copy((json_t *)v)
                                                            : json_real(1.0));
    v = json_object_get(req, "text");
    json_object_set_new(e, "text", json_is_object(json_object_get(v, "format"))
                                       ? json_deep_copy(v)
                                       : json_pack("{s:{s:s}}", "format", "type", "text"));
    v = json_object_get(req, "tool_choice");
    json_object_set_new(e, "tool_choice", v != NULL && !json_is_null(v) ? json_deep_copy(v)
                                                                        : json_string("auto"));
    v = json_object_get(req, "tools");
    json_object_set_new(e, "tools", json_is_array(v) ? json_deep_copy(v) : json_array());
    v = json_object_get(req, "top_p");
    json_object_set_new(e, "top_p", json_is_number(v) ? json_copy((json_t *)v) : json_real(1.0));
    json_object_set_new(e, "truncation", json_string("disabled"));
    v = json_object_get(req, "user");
    json_object_set_new(e, "user", json_is_string(v) ? json_copy((json_t *)v) : json_null());
    v = json_object_get(req, "metadata");
    json_object_set_new(e, "metadata", json_is_object(v) ? json_deep_copy(v) : json_object());
    return e;
}

json_t *rt_tr_resp_object(const char *id, int64_t created_s, const char *status,
                          const char *reason, const char *model, json_t *output, json_t *usage,
                          const json_t *echo)
{
    json_t *r = json_pack("{s:s,s:s,s:I,s:s,s:n}", "id", id, "object", "response", "created_at",
                          (json_int_t)created_s, "status", status, "error");
    const char *k;
    json_t *v;

    if (r == NULL) {
        json_decref(output);
        json_decref(usage);
        return NULL;
    }
    json_object_set_new(r, "incomplete_details",
                        reason != NULL ? json_pack("{s:s}", "reason", reason) : json_null());
    json_object_set_new(r, "model", json_string(model != NULL ? model : ""));
    json_object_set_new(r, "output", output != NULL ? output : json_array());
    json_object_set_new(r, "usage", usage != NULL ? usage : json_null());
    json_object_foreach((json_t *)echo, k, v)
        json_object_set(r, k, v);
    return r;
}

json_t *rt_tr_resp_usage(json_int_t input, json_int_t cached, json_int_t output,
                         json_int_t reasoning)
{
    if (input < 0)
        input = 0;
    if (output < 0)
        output = 0;
    if (cached < 0 || cached > input)
        cached = cached < 0 ? 0 : input;
    if (reasoning < 0 || reasoning > output)
        reasoning = reasoning < 0 ? 0 : output;
    return json_pack("{s:I,s:{s:I},s:I,s:{s:I},s:I}", "input_tokens", input,
                     "input_tokens_details", "cached_tokens", cached, "output_tokens", output,
                     "output_tokens_details", "reasoning_tokens", reasoning, "total_tokens",
                     rt_tr_tokens_sum(input, output));
}

/* The status of an answer that ended with finish_reason f, and the incomplete reason. */
const char *rt_tr_resp_status(const char *f, const char **reason)
{
    *reason = NULL;
    if (f != NULL && strcmp(f, "length") == 0)
        *reason = "max_output_tokens";
    else if (f != NULL && strcmp(f, "content_filter") == 0)
        *reason = "content_filter";
    return *reason != NULL ? "incomplete" : "completed";
}

/* A message's text content: a string, or the text of its text parts. New string or NULL. */
static char *answer_text(const json_t *content)
{
    size_t total = 0, k;
    json_t *p;
    char *out;

    if (json_is_string(content))
        return strdup(json_string_value(content));
    if (!json_is_array(content))
        return NULL;
    json_array_foreach(content, k, p) total += json_string_length(json_object_get(p, "text"));
    out = malloc(total + 1);
    if (out == NULL)
        return NULL;
    total = 0;
    json_array_foreach(content, k, p) {
        const json_t *t = json_object_get(p, "text");

        memcpy(out + total, json_string_value(t) != NULL ? json_string_value(t) : "",
               json_string_length(t));
        total += json_string_length(t);
    }
    out[total] = '\0';
    return out;
}

json_t *rt_translate_chat_resp_to_responses(const json_t *resp, const json_t *req,
                                            const char *model)
{
    const json_t *choice = json_array_get(json_object_get(resp, "choices"), 0);
    const json_t *msg = json_object_get(choice, "message");
    const json_t *calls = json_object_get(msg, "tool_calls");
    const json_t *rc = json_object_get(msg, "reasoning_content");
    const json_t *refusal = json_object_get(msg, "refusal");
    const json_t *usage = json_object_get(resp, "usage");
    const json_t *idv = json_object_get(resp, "id");
    const json_t *cr = json_object_get(resp, "created");
    const char *reason;
    const char *status =
        rt_tr_resp_status(json_string_value(json_object_get(choice, "finish_reason")), &reason);
    char base[80], id[96];
    json_t *output = NULL, *echo = NULL, *u = NULL, *r;
    char *text = NULL;
    int want_enc = rt_tr_resp_wants_enc(req), want_summary = rt_tr_resp_wants_summary(req);
    size_t i, n_blocks = 0;
    json_t *tc;

    if (!json_is_object(msg))
        return NULL;
    rt_tr_copy_utf8(base, sizeof(base), "", json_is_string(idv) ? json_string_value(idv) : "0");
    output = json_array();
    if (output == NULL)
        return NULL;
    /* thinking_blocks (LiteLLM's field: Anthropic's and Bedrock's signed thinking) are the
     * reasoning when there are any: an item each, in order, the signature or the redacted data
     * as encrypted_content when the request's include asks for it; else reasoning_content is
     * one item, with nothing to sign */
    json_array_foreach(json_object_get(msg, "thinking_blocks"), i, tc) {
        const json_t *th = json_object_get(tc, "thinking"), *sig = json_object_get(tc, "signature");
        const json_t *data = json_object_get(tc, "data");
        const json_t *val;
        int redacted;
        json_t *item;

        if (rt_tr_str_eq(json_object_get(tc, "type"), "thinking") && json_is_string(th) &&
            json_is_string(sig)) {
            redacted = 0;
            val = sig;
        } else if (rt_tr_str_eq(json_object_get(tc, "type"), "redacted_thinking") &&
                   json_is_string(data)) {
            redacted = 1;
            val = data;
        } else {
            continue;
        }
        snprintf(id, sizeof(id), "rs_%zu_%s", n_blocks++, base);
        item = rt_tr_resp_reasoning_item(id, redacted ? NULL : th, want_summary);
        if (item != NULL && want_enc) {
            size_t el;
            char *enc = rt_tr_reasoning_encode(redacted, json_string_value(val),
                                               json_string_length(val), &el);

            if (enc == NULL || json_object_set_new(item, "encrypted_content",
                                                   json_stringn(enc, el)) != 0) {
                free(enc);
                json_decref(item);
                json_decref(output);
                return NULL;
            }
            free(enc);
        }
        if (item == NULL || json_array_append_new(output, item) != 0) {
            json_decref(output);
            return NULL;
        }
    }
    if (n_blocks == 0 && json_is_string(rc) && json_string_length(rc) > 0) {
        snprintf(id, sizeof(id), "rs_%s", base);
        json_array_append_new(output, rt_tr_resp_reasoning_item(id, rc, want_summary));
    }
    text = answer_text(json_object_get(msg, "content"));
    if ((text != NULL && text[0] != '\0') ||
        (json_is_string(refusal) && json_string_length(refusal) > 0)) {
        json_t *part = text != NULL && text[0] != '\0'
                           ? json_pack("{s:s,s:[],s:[],s:s}", "type", "output_text",
                                       "annotations", "logprobs", "text", text)
                           : json_pack("{s:s,s:O}", "type", "refusal", "refusal", refusal);

        snprintf(id, sizeof(id), "msg_%s", base);
        json_array_append_new(output, json_pack("{s:s,s:s,s:s,s:[o],s:s}", "id", id, "type",
                                                "message", "status", status, "content", part,
                                                "role", "assistant"));
    }
    free(text);
    json_array_foreach(calls, i, tc) {
        const json_t *fn = json_object_get(tc, "function");
        const json_t *cid = json_object_get(tc, "id");
        const json_t *args = json_object_get(fn, "arguments");
        char cidb[72];

        snprintf(cidb, sizeof(cidb), "call_%zu", i);
        if (json_is_string(cid))
            rt_tr_copy_utf8(cidb, sizeof(cidb), "", json_string_value(cid));
        snprintf(id, sizeof(id), "fc_%s", cidb);
        json_array_append_new(
            output, json_pack("{s:s,s:s,s:s,s:s,s:s,s:s}", "id", id, "type", "function_call",
                              "status", "completed", "arguments",
                              json_is_string(args) ? json_string_value(args) : "{}", "call_id",
                              cidb, "name",
                              json_is_string(json_object_get(fn, "name"))
                                  ? json_string_value(json_object_get(fn, "name"))
                                  : ""));
    }
    if (json_is_object(usage))
        u = rt_tr_resp_usage(
            rt_tr_int_or_zero(usage, "prompt_tokens"), rt_tr_chat_cached(usage),
            rt_tr_int_or_zero(usage, "completion_tokens"),
            rt_tr_int_or_zero(json_object_get(usage, "completion_tokens_details"),
                              "reasoning_tokens"));
    echo = rt_tr_resp_echo(req);
    snprintf(id, sizeof(id), "resp_%s", base);
    r = rt_tr_resp_object(id, json_is_integer(cr) ? json_integer_value(cr) : 0, status, reason,
                          model, output, u, echo);
    json_decref(echo);
    return r;
}
