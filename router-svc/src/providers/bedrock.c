/* bedrock: Amazon Bedrock (bedrock/<model id>, e.g. anthropic.claude-3-5-sonnet-20240620-v1:0)
 * through the Converse and ConverseStream APIs, signed with AWS Signature Version 4.
 *
 * Facts from the Amazon Bedrock API reference (docs.aws.amazon.com/bedrock/latest/APIReference:
 * Converse, ConverseStream, InvokeModel; the bedrock-runtime.{region}.amazonaws.com endpoint,
 * SigV4 signing name "bedrock"), the Titan and Cohere embedding request shapes from the Bedrock
 * user guide's model parameters, the names of the parameters and variables from LiteLLM
 * (litellm/llms/bedrock/base_aws_llm.py: aws_access_key_id, aws_secret_access_key,
 * aws_session_token, aws_region_name, aws_bedrock_runtime_endpoint, aws_role_name,
 * aws_session_name, aws_web_identity_token, aws_sts_endpoint; AWS_REGION_NAME, AWS_REGION) and
 * the AWS SDKs' standard variables (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
 * AWS_SESSION_TOKEN, AWS_DEFAULT_REGION, AWS_ROLE_ARN, AWS_WEB_IDENTITY_TOKEN_FILE).
 *
 *   request  {messages [{role user|assistant, content [{text} | {image {format, source
 *            {bytes}}} | {document {format pdf, name, source {bytes}}} | {toolUse {toolUseId,
 *            name, input}} | {toolResult {toolUseId, content [{text}|{json}|{image}|{document}],
 *            status error}}]}], system [{text}], inferenceConfig {maxTokens, temperature, topP,
 *            stopSequences}, toolConfig {tools [{toolSpec {name, description, inputSchema
 *            {json}}}], toolChoice {auto|any|tool {name}}}}; roles alternate (consecutive turns
 *            of one role are merged), the first is the user's
 *            (an assistant's thinking_blocks first as {reasoningContent {reasoningText {text,
 *            signature}} | {redactedContent}})
 *   answer   {output {message {content [{text} | {toolUse} | {reasoningContent {reasoningText
 *            {text, signature}} | {redactedContent}}]}} (thinking_blocks), stopReason
 *            end_turn|tool_use|max_tokens|stop_sequence|guardrail_intervened|content_filtered,
 *            usage {inputTokens, outputTokens, cacheReadInputTokens, cacheWriteInputTokens}}
 *   stream   event-stream frames (eventstream.c) with :event-type messageStart,
 *            contentBlockStart {start {toolUse {toolUseId, name}}}, contentBlockDelta {delta
 *            {text} | {toolUse {input: a piece of the JSON}} | {reasoningContent {text} |
 *            {signature} | {redactedContent}}},
 *            contentBlockStop, messageStop {stopReason}, metadata {usage}; :message-type
 *            exception for errors (throttlingException, validationException, ...).
 *   errors   {"message": ...} with the status: 429 throttling, 400 ValidationException (an
 *            input over the model's limit says "Input is too long" / "too many input tokens"),
 *            403 access / signature, 5xx. */
#include "providers/provider.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "tg_err.h"

#define BEDROCK_SERVICE "bedrock" /* SigV4 signing name of bedrock-runtime */
#define BEDROCK_AUTH_CAP 512

static void set_err(char *err, size_t errlen, const char *msg)
{
    snprintf(err, errlen, "%s", msg);
}

/* ---- request ---- */

/* A data: URL as a Converse image block (Converse takes image bytes only). */
static json_t *image_block(const json_t *image_url, char *err, size_t errlen)
{
    const json_t *u = json_is_object(image_url) ? json_object_get(image_url, "url") : image_url;
    const char *url = json_string_value(u);
    const char *semi, *slash;

    if (url == NULL || strncmp(url, "data:image/", 11) != 0 ||
        (semi = strstr(url, ";base64,")) == NULL) {
        set_err(err, errlen, "messages: Bedrock takes images as data:image/...;base64, URLs");
        return NULL;
    }
    slash = url + 10;
    return json_pack("{s:{s:s%,s:{s:s}}}", "image", "format", slash + 1, (size_t)(semi - slash - 1),
                     "source", "bytes", semi + 8);
}

/* A file part (k) as a Converse document block: a PDF given as a data: URL; its name (which
 * Converse requires, in letters, digits, single spaces, hyphens, parentheses and square
 * brackets) the filename without ".pdf", other characters as hyphens, at most
 * BEDROCK_DOC_NAME_MAX bytes; "document" when there is none. New or NULL with err. */
#define BEDROCK_DOC_NAME_MAX 100

static json_t *document_block(const json_t *file, size_t k, char *err, size_t errlen)
{
    const char *data, *filename;
    char name[BEDROCK_DOC_NAME_MAX + 1];
    size_t n = 0, fl;

    if (rt_dialect_pdf(file, k, &data, &filename, err, errlen) != 0)
        return NULL;
    fl = filename != NULL ? strlen(filename) : 0;
    if (fl >= 4 && strcasecmp(filename + fl - 4, ".pdf") == 0)
        fl -= 4;
    for (size_t i = 0; i < fl && n < BEDROCK_DOC_NAME_MAX; i++) {
        unsigned char ch = (unsigned char)filename[i];
        int ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                 (ch >= '0' && ch <= '9') || ch == '-' || ch == '(' || ch == ')' || ch == '[' ||
                 ch == ']';

        if (ch == ' ' && n > 0 && name[n - 1] != ' ')
            ok = 1;
        else if (ch == ' ')
            continue; /* no leading or consecutive spaces */
        name[n++] = ok ? (char)ch : '-';
    }
    while (n > 0 && name[n - 1] == ' ')
        n--;
    name[n] = '\0';
    return json_pack("{s:{s:s,s:s,s:{s:s}}}", "document", "format", "pdf", "name",
                     n > 0 ? name : "document", "source", "bytes", data);
}

/* A turn of role with blocks, merged into the last turn when it has the same role. */
static void add_turn(json_t *msgs, const char *role, json_t *blocks)
{
    json_t *last = json_array_get(msgs, json_array_size(msgs) - 1);

    if (json_array_size(msgs) > 0 &&
        strcmp(json_string_value(json_object_get(last, "role")), role) == 0) {
        json_array_extend(json_object_get(last, "content"), blocks);
        json_decref(blocks);
        return;
    }
    json_array_append_new(msgs, json_pack("{s:s,s:o}", "role", role, "content", blocks));
}

/* The toolResult block for tool message m (index i): its content as Converse's {json} (a text
 * that is a JSON object or array), {text}, {image} and {document} (a PDF file part) blocks;
 * status "error" when the message is marked as an error result (RT_TRANSLATE_TOOL_ERROR_MARK,
 * taken off). Other parts are refused naming them. New, or NULL with err. */
static json_t *tool_result_block(const json_t *m, size_t i, char *err, size_t errlen)
{
    const char *id = json_string_value(json_object_get(m, "tool_call_id"));
    json_t *content, *out = NULL, *res = NULL, *p;
    const char *t;
    int is_error = 0;
    size_t k;

    content = rt_dialect_tool_content(json_object_get(m, "content"), &is_error);
    if (content == NULL) {
        set_err(err, errlen, "out of memory");
        return NULL;
    }
    t = json_string_value(content);
    if (t != NULL) {
        json_t *j = json_loads(t, 0, NULL);

        if (json_is_object(j) || json_is_array(j)) {
            out = json_pack("[{s:o}]", "json", j);
        } else {
            json_decref(j);
            out = json_pack("[{s:s}]", "text", t);
        }
    } else {
        out = json_array();
        json_array_foreach(content, k, p)
        {
            const char *type = json_string_value(json_object_get(p, "type"));
            json_t *b = NULL;

            if (type != NULL && strcmp(type, "text") == 0 &&
                json_is_string(json_object_get(p, "text"))) {
                b = json_pack("{s:O}", "text", json_object_get(p, "text"));
            } else if (type != NULL && strcmp(type, "image_url") == 0) {
                b = image_block(json_object_get(p, "image_url"), err, errlen);
                if (b == NULL)
                    goto out;
            } else if (type != NULL && strcmp(type, "file") == 0) {
                b = document_block(json_object_get(p, "file"), k, err, errlen);
                if (b == NULL)
                    goto out;
            } else {
                snprintf(err, errlen,
                         "messages[%zu].content[%zu]: a tool result's \"%.32s\" part cannot be "
                         "translated to Bedrock",
                         i, k, type != NULL ? type : "(none)");
                goto out;
            }
            json_array_append_new(out, b);
        }
        if (json_array_size(out) == 0)
            json_array_append_new(out, json_pack("{s:s}", "text", ""));
    }
    res = json_pack("{s:{s:s,s:O}}", "toolResult", "toolUseId", id != NULL ? id : "tool",
                    "content", out);
    if (res != NULL && is_error)
        json_object_set_new(json_object_get(res, "toolResult"), "status", json_string("error"));
out:
    json_decref(out);
    json_decref(content);
    return res;
}

/* 1 when the Converse messages hold a toolUse or toolResult block. */
static int has_tool_blocks(const json_t *msgs)
{
    size_t i, k;
    json_t *m, *b;

    json_array_foreach(msgs, i, m)
    {
        json_array_foreach(json_object_get(m, "content"), k, b)
        {
            if (json_object_get(b, "toolUse") != NULL || json_object_get(b, "toolResult") != NULL)
                return 1;
        }
    }
    return 0;
}

/* The toolSpecs of the tools the history's toolUse blocks name, each with an open object
 * schema: Converse refuses toolUse and toolResult blocks without a toolConfig, and OpenAI
 * clients often leave the tools out of the turn that carries the results. */
static json_t *history_specs(const json_t *msgs)
{
    json_t *specs = json_array();
    json_t *seen = json_object();
    size_t i, k;
    json_t *m, *b;

    json_array_foreach(msgs, i, m)
    {
        json_array_foreach(json_object_get(m, "content"), k, b)
        {
            const char *name =
                json_string_value(json_object_get(json_object_get(b, "toolUse"), "name"));

            if (name == NULL || json_object_get(seen, name) != NULL)
                continue;
            json_object_set_new(seen, name, json_true());
            json_array_append_new(specs,
                                  json_pack("{s:{s:s,s:{s:{s:s,s:{}}}}}", "toolSpec", "name", name,
                                            "inputSchema", "json", "type", "object",
                                            "properties"));
        }
    }
    json_decref(seen);
    return specs;
}

static int tool_config(json_t *body, const json_t *chat, char *err, size_t errlen)
{
    const json_t *tools = json_object_get(chat, "tools");
    const json_t *choice = json_object_get(chat, "tool_choice");
    const char *cs = json_string_value(choice);
    json_t *specs, *tc;
    size_t i;
    json_t *t;

    int none = cs != NULL && strcmp(cs, "none") == 0;
    int history = has_tool_blocks(json_object_get(body, "messages"));

    if (!json_is_array(tools) || json_array_size(tools) == 0) {
        specs = history ? history_specs(json_object_get(body, "messages")) : NULL;
        if (json_array_size(specs) > 0)
            json_object_set_new(body, "toolConfig", json_pack("{s:o}", "tools", specs));
        else
            json_decref(specs);
        return 0;
    }
    /* Converse has no "none": the tools are left out, unless the history's tool blocks need
     * them declared (then they are, without a choice: Converse cannot forbid a call) */
    if (none && !history)
        return 0;
    specs = json_array();
    json_array_foreach(tools, i, t)
    {
        const json_t *fn = json_object_get(t, "function");
        const char *name = json_string_value(json_object_get(fn, "name"));
        const json_t *params = json_object_get(fn, "parameters");
        json_t *spec;

        if (name == NULL) {
            json_decref(specs);
            set_err(err, errlen, "tools: each tool needs function.name");
            return TG_EINVAL;
        }
        spec = json_pack("{s:s,s:{s:o}}", "name", name, "inputSchema", "json",
                         json_is_object(params) ? json_incref((json_t *)params)
                                                : json_pack("{s:s}", "type", "object"));
        if (json_is_string(json_object_get(fn, "description")))
            json_object_set(spec, "description", json_object_get(fn, "description"));
        json_array_append_new(specs, json_pack("{s:o}", "toolSpec", spec));
    }
    tc = json_pack("{s:o}", "tools", specs);
    if (cs != NULL && strcmp(cs, "required") == 0) /* "none" sets no choice (see above) */
        json_object_set_new(tc, "toolChoice", json_pack("{s:{}}", "any"));
    else if (cs != NULL && strcmp(cs, "auto") == 0)
        json_object_set_new(tc, "toolChoice", json_pack("{s:{}}", "auto"));
    else if (json_is_object(choice)) {
        const char *name =
            json_string_value(json_object_get(json_object_get(choice, "function"), "name"));

        if (name == NULL) {
            json_decref(tc);
            set_err(err, errlen, "tool_choice: a function needs a name");
            return TG_EINVAL;
        }
        json_object_set_new(tc, "toolChoice", json_pack("{s:{s:s}}", "tool", "name", name));
    }
    json_object_set_new(body, "toolConfig", tc);
    return 0;
}

static json_t *converse_request(const json_t *chat, const struct rt_deployment_conf *dep,
                                int stream, char *err, size_t errlen)
{
    const json_t *msgs;
    json_t *out = json_array(), *sys = json_array(), *body = NULL, *ic = json_object();
    const json_t *v;
    size_t i;
    json_t *m;

    (void)dep;
    (void)stream;
    msgs = rt_dialect_messages(chat, sys, image_block, 1, err, errlen);
    if (msgs == NULL)
        goto fail;
    json_array_foreach(msgs, i, m)
    {
        const char *role = json_string_value(json_object_get(m, "role"));
        const json_t *content = json_object_get(m, "content");
        json_t *blocks;

        if (rt_dialect_is_system(role))
            continue;
        blocks = json_array();
        if (strcmp(role, "tool") == 0 || strcmp(role, "function") == 0) {
            json_t *tr = tool_result_block(m, i, err, errlen);

            if (tr == NULL) {
                json_decref(blocks);
                goto fail;
            }
            json_array_append_new(blocks, tr);
            add_turn(out, "user", blocks);
            continue;
        }
        if (rt_dialect_content(content, blocks, image_block,
                               strcmp(role, "user") == 0 ? document_block : NULL, 1, err,
                               errlen) != 0) {
            json_decref(blocks);
            goto fail;
        }
        if (strcmp(role, "assistant") == 0) {
            size_t k;
            json_t *tc, *th = json_array();

            /* the turn's reasoning first, signatures unchanged, as Claude wants it back */
            if (rt_dialect_thinking_blocks(m, i, th, 1, err, errlen) != 0) {
                json_decref(th);
                json_decref(blocks);
                goto fail;
            }
            json_array_extend(th, blocks);
            json_decref(blocks);
            blocks = th;

            json_array_foreach(json_object_get(m, "tool_calls"), k, tc)
            {
                const json_t *fn = json_object_get(tc, "function");
                const char *name = json_string_value(json_object_get(fn, "name"));
                const char *id = json_string_value(json_object_get(tc, "id"));

                if (name == NULL) {
                    json_decref(blocks);
                    set_err(err, errlen, "messages: a tool call needs function.name");
                    goto fail;
                }
                json_array_append_new(blocks, json_pack("{s:{s:s,s:s,s:o}}", "toolUse", "toolUseId",
                                                        id != NULL ? id : name, "name", name,
                                                        "input", rt_dialect_call_args(fn)));
            }
            if (json_array_size(blocks) == 0) {
                json_decref(blocks);
                continue; /* an empty assistant turn: Converse refuses empty content */
            }
            add_turn(out, "assistant", blocks);
        } else if (strcmp(role, "user") == 0) {
            add_turn(out, "user", blocks);
        } else {
            json_decref(blocks);
            snprintf(err, errlen, "messages: role \"%.32s\" is not supported", role);
            goto fail;
        }
    }
    if (json_array_size(out) == 0 ||
        strcmp(json_string_value(json_object_get(json_array_get(out, 0), "role")), "user") != 0) {
        set_err(err, errlen,
                "messages: the first message after the system prompt must be the "
                "user's");
        goto fail;
    }
    body = json_pack("{s:O}", "messages", out);
    if (json_array_size(sys) > 0)
        json_object_set(body, "system", sys);
    v = json_object_get(chat, "max_completion_tokens");
    if (!json_is_integer(v))
        v = json_object_get(chat, "max_tokens");
    if (json_is_integer(v))
        json_object_set(ic, "maxTokens", (json_t *)v);
    if (json_is_number(json_object_get(chat, "temperature")))
        json_object_set(ic, "temperature", json_object_get(chat, "temperature"));
    if (json_is_number(json_object_get(chat, "top_p")))
        json_object_set(ic, "topP", json_object_get(chat, "top_p"));
    v = json_object_get(chat, "stop");
    if (json_is_string(v))
        json_object_set_new(ic, "stopSequences", json_pack("[O]", v));
    else if (json_is_array(v) && json_array_size(v) > 0)
        json_object_set(ic, "stopSequences", (json_t *)v);
    if (json_object_size(ic) > 0)
        json_object_set(body, "inferenceConfig", ic);
    if (tool_config(body, chat, err, errlen) != 0) {
        json_decref(body);
        body = NULL;
    }
fail:
    json_decref(out);
    json_decref(sys);
    json_decref(ic);
    return body;
}

/* ---- answers ---- */

static const char *finish_of(const char *r)
{
    if (r == NULL)
        return NULL;
    if (strcmp(r, "tool_use") == 0)
        return "tool_calls";
    if (strcmp(r, "max_tokens") == 0)
        return "length";
    if (strcmp(r, "guardrail_intervened") == 0 || strcmp(r, "content_filtered") == 0)
        return "content_filter";
    return "stop";
}

/* Prompt tokens: the input, and what the cache read or wrote. */
static int64_t prompt_of(const json_t *u)
{
    return rt_dialect_count(u, "inputTokens") + rt_dialect_count(u, "cacheReadInputTokens") +
           rt_dialect_count(u, "cacheWriteInputTokens");
}

static json_t *converse_response(const json_t *answer, const char *model, char *err, size_t errlen)
{
    const json_t *content =
        json_object_get(json_object_get(json_object_get(answer, "output"), "message"), "content");
    const json_t *u = json_object_get(answer, "usage");
    const char *finish = finish_of(json_string_value(json_object_get(answer, "stopReason")));
    json_t *calls = json_array(), *msg, *tb = NULL;
    char *text = NULL, *reas = NULL;
    size_t tl = 0, rl = 0, i;
    json_t *b;
    int64_t prompt, completion;

    if (!json_is_object(answer) || !json_is_array(content)) {
        json_decref(calls);
        set_err(err, errlen, "the provider's answer is not a Converse response");
        return NULL;
    }
    json_array_foreach(content, i, b)
    {
        const char *t = json_string_value(json_object_get(b, "text"));
        const json_t *tu = json_object_get(b, "toolUse");
        const char *r = json_string_value(json_object_get(
            json_object_get(json_object_get(b, "reasoningContent"), "reasoningText"), "text"));
        const char *piece = t != NULL ? t : r;
        const json_t *rc = json_object_get(b, "reasoningContent");
        const json_t *rsig = json_object_get(json_object_get(rc, "reasoningText"), "signature");
        const json_t *red = json_object_get(rc, "redactedContent");
        json_t *e = NULL;

        /* LiteLLM's thinking_blocks: what the client sends back in the next turn (reasoning
         * without a signature is reasoning_content only: Claude takes it back with one) */
        if (t == NULL && r != NULL && json_is_string(rsig))
            e = json_pack("{s:s,s:s,s:O}", "type", "thinking", "thinking", r, "signature", rsig);
        else if (t == NULL && json_is_string(red))
            e = json_pack("{s:s,s:O}", "type", "redacted_thinking", "data", red);
        if (e != NULL) {
            if (tb == NULL)
                tb = json_array();
            json_array_append_new(tb, e);
        }
        if (piece != NULL) {
            char **dst = t != NULL ? &text : &reas;
            size_t *len = t != NULL ? &tl : &rl;
            size_t n = strlen(piece);
            char *nb = realloc(*dst, *len + n + 1);

            if (nb != NULL) {
                memcpy(nb + *len, piece, n + 1);
                *dst = nb;
                *len += n;
            }
        } else if (json_is_object(tu)) {
            const char *name = json_string_value(json_object_get(tu, "name"));
            const char *id = json_string_value(json_object_get(tu, "toolUseId"));
            const json_t *in = json_object_get(tu, "input");
            char *a = in != NULL ? json_dumps(in, JSON_COMPACT | JSON_ENCODE_ANY) : strdup("{}");

            if (name == NULL || id == NULL || a == NULL) {
                free(a);
                free(text);
                free(reas);
                json_decref(calls);
                json_decref(tb);
                set_err(err, errlen, "the provider's answer has a malformed toolUse");
                return NULL;
            }
            json_array_append_new(calls,
                                  json_pack("{s:s,s:s,s:{s:s,s:s}}", "id", id, "type", "function",
                                            "function", "name", name, "arguments", a));
            free(a);
        }
    }
    msg = json_pack("{s:s,s:o}", "role", "assistant", "content",
                    text != NULL ? json_stringn(text, tl) : json_null());
    if (reas != NULL)
        json_object_set_new(msg, "reasoning_content", json_stringn(reas, rl));
    if (tb != NULL)
        json_object_set_new(msg, "thinking_blocks", tb);
    free(text);
    free(reas);
    if (json_array_size(calls) > 0)
        json_object_set_new(msg, "tool_calls", calls);
    else
        json_decref(calls);
    prompt = prompt_of(u);
    completion = rt_dialect_count(u, "outputTokens");
    return json_pack("{s:s,s:s,s:I,s:s,s:[{s:i,s:o,s:s}],s:o}", "id", "chatcmpl-bedrock",
                     "object", "chat.completion", "created", (json_int_t)time(NULL), "model",
                     model, "choices", "index", 0, "message", msg, "finish_reason",
                     finish != NULL ? finish : "stop", "usage",
                     rt_dialect_usage(prompt, rt_dialect_count(u, "cacheReadInputTokens"),
                                      rt_dialect_count(u, "cacheWriteInputTokens"), completion,
                                      0));
}

/* ---- streams ---- */

static int converse_stream_event(struct rt_dialect_stream *st, const char *raw, size_t len,
                                 struct tg_buf *out)
{
    struct rt_evs_message m;
    json_t *j, *delta = NULL;
    const char *et;
    int rc = 0;

    if (rt_evs_decode(raw, len, &m) != 0)
        return TG_EPROTO;
    if (strcmp(m.message_type, "event") != 0)
        return TG_EPROTO; /* an exception or error in the stream */
    j = json_loadb(m.payload, m.payload_len, 0, NULL);
    if (!json_is_object(j)) {
        json_decref(j);
        return TG_EPROTO;
    }
    et = m.event_type;
    if (strcmp(et, "contentBlockStart") == 0) {
        const json_t *tu = json_object_get(json_object_get(j, "start"), "toolUse");

        if (json_is_object(tu)) {
            const char *id = json_string_value(json_object_get(tu, "toolUseId"));
            const char *name = json_string_value(json_object_get(tu, "name"));

            if (id == NULL || name == NULL || st->n_tools >= RT_DIALECT_TOOLS_MAX) {
                json_decref(j);
                return TG_EPROTO;
            }
            st->open_tool = st->n_tools++;
            st->open_tool_args = 0;
            delta =
                json_pack("{s:[{s:i,s:s,s:s,s:{s:s,s:s}}]}", "tool_calls", "index", st->open_tool,
                          "id", id, "type", "function", "function", "name", name, "arguments", "");
        }
    } else if (strcmp(et, "contentBlockDelta") == 0) {
        const json_t *d = json_object_get(j, "delta");
        const char *t = json_string_value(json_object_get(d, "text"));
        const char *in = json_string_value(json_object_get(json_object_get(d, "toolUse"), "input"));
        const json_t *rcon = json_object_get(d, "reasoningContent");
        const char *r = json_string_value(json_object_get(rcon, "text"));
        const json_t *rsig = json_object_get(rcon, "signature");
        const json_t *red = json_object_get(rcon, "redactedContent");

        if (t != NULL) {
            delta = json_pack("{s:s}", "content", t);
        } else if (in != NULL && st->open_tool >= 0 && in[0] != '\0') {
            st->open_tool_args = 1;
            delta = json_pack("{s:[{s:i,s:{s:s}}]}", "tool_calls", "index", st->open_tool,
                              "function", "arguments", in);
        } else if (r != NULL) {
            delta = json_pack("{s:s}", "reasoning_content", r);
        } else if (json_is_string(rsig)) {
            /* the reasoning's signature, as LiteLLM streams it */
            delta = json_pack("{s:[{s:s,s:s,s:O}]}", "thinking_blocks", "type", "thinking",
                              "thinking", "", "signature", rsig);
        } else if (json_is_string(red)) {
            delta = json_pack("{s:[{s:s,s:O}]}", "thinking_blocks", "type", "redacted_thinking",
                              "data", red);
        }
    } else if (strcmp(et, "contentBlockStop") == 0 || strcmp(et, "messageStop") == 0) {
        /* A call whose input streamed empty (no delta, or ""): its arguments are "{}", as
         * OpenAI sends them; "" does not parse as JSON in the client. */
        if (st->open_tool >= 0 && !st->open_tool_args)
            delta = json_pack("{s:[{s:i,s:{s:s}}]}", "tool_calls", "index", st->open_tool,
                              "function", "arguments", "{}");
        st->open_tool = -1;
    }
    if (strcmp(et, "messageStop") == 0) {
        const char *f = finish_of(json_string_value(json_object_get(j, "stopReason")));

        snprintf(st->finish, sizeof(st->finish), "%s", f != NULL ? f : "stop");
        st->finished = 1;
    } else if (strcmp(et, "metadata") == 0) {
        const json_t *u = json_object_get(j, "usage");

        if (json_is_object(u)) {
            st->prompt_tokens = prompt_of(u);
            st->cache_read_tokens = rt_dialect_count(u, "cacheReadInputTokens");
            st->cache_creation_tokens = rt_dialect_count(u, "cacheWriteInputTokens");
            st->completion_tokens = rt_dialect_count(u, "outputTokens");
            st->usage_found = 1;
        }
    }
    if (delta != NULL)
        rc = rt_dialect_chunk(st, delta, NULL, out);
    json_decref(j);
    return rc;
}

/* ---- embeddings: Titan (one input per call) and Cohere (a list) through InvokeModel ---- */

static int is_cohere_embed(const struct rt_deployment_conf *dep)
{
    return strncmp(dep->model, "cohere.embed", 12) == 0;
}

static json_t *embed_request(const json_t *req, const struct rt_deployment_conf *dep, char *err,
                             size_t errlen)
{
    const json_t *in = json_object_get(req, "input");
    const json_t *dims = json_object_get(req, "dimensions");

    if (json_is_array(in) && json_array_size(in) == 1)
        in = json_array_get(in, 0);
    if (is_cohere_embed(dep)) {
        json_t *texts = json_is_string(in) ? json_pack("[O]", in) : json_deep_copy(in);
        size_t i;
        json_t *v;

        json_array_foreach(texts, i, v)
        {
            if (!json_is_string(v)) {
                json_decref(texts);
                set_err(err, errlen, "input: a string or an array of strings is required");
                return NULL;
            }
        }
        if (!json_is_array(texts) || json_array_size(texts) == 0) {
            json_decref(texts);
            set_err(err, errlen, "input: a string or an array of strings is required");
            return NULL;
        }
        return json_pack("{s:o,s:s}", "texts", texts, "input_type", "search_document");
    }
    if (!json_is_string(in)) {
        set_err(err, errlen, "input: Titan embeddings take one string per request");
        return NULL;
    }
    if (json_is_integer(dims))
        return json_pack("{s:O,s:O}", "inputText", in, "dimensions", dims);
    return json_pack("{s:O}", "inputText", in);
}

static json_t *embed_response(const json_t *answer, const char *model, char *err, size_t errlen)
{
    const json_t *one = json_object_get(answer, "embedding");
    const json_t *many = json_object_get(answer, "embeddings");
    json_t *data = json_array();
    int64_t tokens = rt_dialect_count(answer, "inputTextTokenCount");

    if (json_is_array(one)) {
        json_array_append_new(
            data, json_pack("{s:s,s:i,s:O}", "object", "embedding", "index", 0, "embedding", one));
    } else if (json_is_array(many)) {
        size_t i;
        json_t *e;

        json_array_foreach(many, i, e)
        {
            if (!json_is_array(e)) {
                json_decref(data);
                set_err(err, errlen, "the provider's answer has an embedding that is not a list");
                return NULL;
            }
            json_array_append_new(data, json_pack("{s:s,s:I,s:O}", "object", "embedding", "index",
                                                  (json_int_t)i, "embedding", e));
        }
    } else {
        json_decref(data);
        set_err(err, errlen, "the provider's answer has no embedding");
        return NULL;
    }
    return json_pack("{s:s,s:o,s:s,s:{s:I,s:I}}", "object", "list", "data", data, "model", model,
                     "usage", "prompt_tokens", (json_int_t)tokens, "total_tokens",
                     (json_int_t)tokens);
}

const struct rt_dialect rt_dialect_converse = {
    .request = converse_request,
    .response = converse_response,
    .embed_request = embed_request,
    .embed_response = embed_response,
    .event_len = rt_evs_frame_len,
    .stream_accept = "application/vnd.amazon.eventstream",
    .stream_event = converse_stream_event,
    .stream_end = rt_dialect_stream_close,
};

/* ---- the family ---- */

/* Region, endpoint and credentials: api_base or aws_bedrock_runtime_endpoint, else AWS's own
 * regional endpoint; the AWS_* credentials only for AWS's own endpoint (never sent to an
 * endpoint of the config's). */
static int bedrock_prepare(struct rt_deployment_conf *dep, char *err, size_t errlen)
{
    static const char *const regions[] = {"AWS_REGION_NAME", "AWS_REGION", "AWS_DEFAULT_REGION"};
    struct rt_dep_cloud *c;
    int own = 0;

    if (dep->cloud == NULL)
        dep->cloud = calloc(1, sizeof(*dep->cloud));
    c = dep->cloud;
    if (c == NULL) {
        set_err(err, errlen, "out of memory");
        return TG_ECONFIG;
    }
    for (size_t i = 0; c->aws_region_name[0] == '\0' && i < 3; i++) {
        const char *v = getenv(regions[i]);

        if (v != NULL && v[0] != '\0' && strlen(v) < sizeof(c->aws_region_name))
            snprintf(c->aws_region_name, sizeof(c->aws_region_name), "%s", v);
    }
    if (c->aws_region_name[0] == '\0') {
        set_err(err, errlen,
                "bedrock needs aws_region_name (or AWS_REGION_NAME, AWS_REGION, "
                "AWS_DEFAULT_REGION)");
        return TG_ECONFIG;
    }
    for (const char *s = c->aws_region_name; *s != '\0'; s++) {
        if (!((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || *s == '-')) {
            set_err(err, errlen, "aws_region_name: expected a region name (us-east-1)");
            return TG_ECONFIG;
        }
    }
    if (dep->api_base[0] == '\0' && c->aws_bedrock_runtime_endpoint[0] != '\0')
        snprintf(dep->api_base, sizeof(dep->api_base), "%s", c->aws_bedrock_runtime_endpoint);
    if (dep->api_base[0] == '\0') {
        snprintf(dep->api_base, sizeof(dep->api_base), "https://bedrock-runtime.%s.amazonaws.com",
                 c->aws_region_name);
        own = 1;
    }
    if (c->aws_access_key_id[0] == '\0' && c->aws_secret_access_key[0] == '\0' &&
        c->aws_web_identity_token[0] == '\0' && c->aws_role_name[0] == '\0' && own) {
        const char *id = getenv("AWS_ACCESS_KEY_ID");
        const char *sk = getenv("AWS_SECRET_ACCESS_KEY");
        const char *st = getenv("AWS_SESSION_TOKEN");
        const char *role = getenv("AWS_ROLE_ARN");
        const char *file = getenv("AWS_WEB_IDENTITY_TOKEN_FILE");

        if (id != NULL && sk != NULL && id[0] != '\0' && sk[0] != '\0' &&
            strlen(id) < sizeof(c->aws_access_key_id) &&
            strlen(sk) < sizeof(c->aws_secret_access_key) &&
            (st == NULL || strlen(st) < sizeof(c->aws_session_token))) {
            snprintf(c->aws_access_key_id, sizeof(c->aws_access_key_id), "%s", id);
            snprintf(c->aws_secret_access_key, sizeof(c->aws_secret_access_key), "%s", sk);
            snprintf(c->aws_session_token, sizeof(c->aws_session_token), "%s",
                     st != NULL ? st : "");
            c->aws_env_credentials = 1;
        } else if (role != NULL && file != NULL && role[0] != '\0' && file[0] != '\0' &&
                   strlen(role) < sizeof(c->aws_role_name) &&
                   strlen(file) < sizeof(c->aws_web_identity_token_file)) {
            /* IRSA: the role and the token file Kubernetes keeps fresh */
            snprintf(c->aws_role_name, sizeof(c->aws_role_name), "%s", role);
            snprintf(c->aws_web_identity_token_file, sizeof(c->aws_web_identity_token_file), "%s",
                     file);
        }
    }
    if ((c->aws_access_key_id[0] == '\0') != (c->aws_secret_access_key[0] == '\0')) {
        set_err(err, errlen, "aws_access_key_id and aws_secret_access_key go together");
        return TG_ECONFIG;
    }
    if (c->aws_access_key_id[0] == '\0' && c->aws_role_name[0] == '\0') {
        set_err(err, errlen,
                own ? "bedrock needs credentials: aws_access_key_id and aws_secret_access_key, "
                      "aws_role_name with aws_web_identity_token, or the AWS_* variables"
                    : "bedrock with an endpoint of its own needs aws_access_key_id and "
                      "aws_secret_access_key (or a role) in the config: AWS_* credentials are "
                      "only sent to AWS's own endpoint");
        return TG_ECONFIG;
    }
    if (c->aws_role_name[0] != '\0' && c->aws_access_key_id[0] == '\0' &&
        c->aws_web_identity_token[0] == '\0' && c->aws_web_identity_token_file[0] == '\0') {
        set_err(err, errlen,
                "aws_role_name needs aws_web_identity_token (or "
                "AWS_WEB_IDENTITY_TOKEN_FILE)");
        return TG_ECONFIG;
    }
    return 0;
}

static int bedrock_wire(const struct rt_deployment_conf *dep, enum rt_api client,
                        struct rt_wire *out)
{
    (void)dep;
    return rt_dialect_wire(&rt_dialect_converse, client, out);
}

static void bedrock_url(const struct rt_provider_attempt *a, char *out, size_t cap)
{
    size_t bl;
    const char *base = rt_provider_base(a->dep, &rt_provider_bedrock, &bl);
    char seg[RT_NAME_CAP * 3 + 1];

    /* the model id's ':' travels as %3A */
    snprintf(out, cap, "%.*s/model/%s/%s", (int)bl, base,
             rt_provider_segment(a->dep->model, NULL, seg, sizeof(seg)),
             a->wire == RT_API_EMBEDDINGS ? "invoke"
             : a->stream                  ? "converse-stream"
                                          : "converse");
}

/* host, path and query of url into the buffers; 0 or TG_EINVAL. */
static int split_url(const char *url, char *host, size_t hcap, const char **path,
                     const char **query, char *pbuf, size_t pcap)
{
    const char *h = strstr(url, "://");
    const char *slash, *q;
    size_t hl;

    if (h == NULL)
        return TG_EINVAL;
    h += 3;
    slash = strchr(h, '/');
    hl = slash != NULL ? (size_t)(slash - h) : strlen(h);
    if (hl == 0 || hl >= hcap)
        return TG_EINVAL;
    memcpy(host, h, hl);
    host[hl] = '\0';
    if (slash == NULL) {
        *path = "/";
        *query = "";
        return 0;
    }
    q = strchr(slash, '?');
    if (q == NULL) {
        *path = slash;
        *query = "";
        return 0;
    }
    if ((size_t)(q - slash) >= pcap)
        return TG_EINVAL;
    memcpy(pbuf, slash, (size_t)(q - slash));
    pbuf[q - slash] = '\0';
    *path = pbuf;
    *query = q + 1;
    return 0;
}

/* Static credentials from the config, or the ones the token endpoint (STS) gave: "id\nsecret\n
 * session" in a->token. */
static int bedrock_headers(const struct rt_provider_attempt *a, const char *url,
                           char hdr[][RT_PROVIDER_HEADER_CAP])
{
    const struct rt_dep_cloud *c = a->dep->cloud;
    struct rt_sigv4_request r;
    struct rt_sigv4_header ct = {"content-type", "application/json"};
    char host[RT_URL_CAP], pbuf[RT_PROVIDER_URL_CAP];
    char hash[65], date[17], auth[BEDROCK_AUTH_CAP];
    char id[RT_CLOUD_ID_CAP], secret[RT_SECRET_CAP];
    const char *session = NULL;
    int n = 0, rc;

    if (c == NULL)
        return 0;
    if (c->aws_access_key_id[0] != '\0') {
        snprintf(id, sizeof(id), "%s", c->aws_access_key_id);
        snprintf(secret, sizeof(secret), "%s", c->aws_secret_access_key);
        session = c->aws_session_token[0] != '\0' ? c->aws_session_token : NULL;
    } else {
        const char *t = a->token;
        const char *nl1 = t != NULL ? strchr(t, '\n') : NULL;
        const char *nl2 = nl1 != NULL ? strchr(nl1 + 1, '\n') : NULL;

        if (nl2 == NULL || (size_t)(nl1 - t) >= sizeof(id) ||
            (size_t)(nl2 - nl1 - 1) >= sizeof(secret))
            return TG_EAGAIN; /* no credentials from STS yet */
        memcpy(id, t, (size_t)(nl1 - t));
        id[nl1 - t] = '\0';
        memcpy(secret, nl1 + 1, (size_t)(nl2 - nl1 - 1));
        secret[nl2 - nl1 - 1] = '\0';
        session = nl2[1] != '\0' ? nl2 + 1 : NULL;
    }
    memset(&r, 0, sizeof(r));
    if (split_url(url, host, sizeof(host), &r.path, &r.query, pbuf, sizeof(pbuf)) != 0)
        return 0;
    rt_sigv4_payload_hash(a->body, a->body_len, hash);
    rt_sigv4_amz_date(a->now_s, date);
    r.method = "POST";
    r.host = host;
    r.headers = &ct;
    r.n_headers = 1;
    r.payload_hash = hash;
    r.amz_date = date;
    r.region = c->aws_region_name;
    r.service = BEDROCK_SERVICE;
    r.access_key_id = id;
    r.secret = secret;
    r.session_token = session;
    rc = rt_sigv4_authorization(&r, auth, sizeof(auth));
    memset(secret, 0, sizeof(secret));
    if (rc != 0)
        return 0;
    snprintf(hdr[n++], RT_PROVIDER_HEADER_CAP, "Authorization: %s", auth);
    snprintf(hdr[n++], RT_PROVIDER_HEADER_CAP, "X-Amz-Date: %s", date);
    if (session != NULL)
        snprintf(hdr[n++], RT_PROVIDER_HEADER_CAP, "X-Amz-Security-Token: %s", session);
    return n;
}

/* Throttling first, an input over the limit as context window, a guardrail's refusal (a 200
 * whose stopReason says so) as content policy; then the generic rules. */
static enum rt_error_class bedrock_classify(int status, const char *body, size_t len)
{
    if (status >= 200 && status < 300 && body != NULL && len > 0 &&
        (memmem(body, len, "\"guardrail_intervened\"", 22) != NULL ||
         memmem(body, len, "\"content_filtered\"", 18) != NULL))
        return RT_ERR_CONTENT_POLICY;
    if (status == 400 && body != NULL && len > 0 &&
        (memmem(body, len, "Input is too long", 17) != NULL ||
         memmem(body, len, "too many input tokens", 21) != NULL ||
         memmem(body, len, "too many total text bytes", 25) != NULL ||
         memmem(body, len, "exceeds the context window", 26) != NULL))
        return RT_ERR_CONTEXT_WINDOW;
    if (status == 400 && body != NULL && len > 0 &&
        memmem(body, len, "ThrottlingException", 19) != NULL)
        return RT_ERR_RATE_LIMIT;
    return rt_router_classify(status, body, len);
}

/* ---- STS AssumeRoleWithWebIdentity (docs.aws.amazon.com/STS/latest/APIReference/
 * API_AssumeRoleWithWebIdentity.html): an unsigned POST of the form Action, Version, RoleArn,
 * RoleSessionName, WebIdentityToken, DurationSeconds; the answer's Credentials (AccessKeyId,
 * SecretAccessKey, SessionToken, Expiration) in XML, errors as ErrorResponse/Error/Code. ---- */

#define STS_FORM_MAX (RT_TOKEN_CAP * 3 + 1024)
#define STS_ANSWER_MAX (64u * 1024u)
#define STS_TOKEN_FILE_MAX 16384

static int bedrock_needs_token(const struct rt_deployment_conf *dep)
{
    return dep->cloud != NULL && dep->cloud->aws_role_name[0] != '\0' &&
           dep->cloud->aws_access_key_id[0] == '\0';
}

/* The web identity token: the configured one, or the file's current content (re-read at every
 * renewal: Kubernetes rotates it). Refresher thread. */
static int web_identity(const struct rt_dep_cloud *c, char *out, size_t cap, char *err,
                        size_t errlen)
{
    FILE *f;
    size_t n;

    if (c->aws_web_identity_token[0] != '\0') {
        snprintf(out, cap, "%s", c->aws_web_identity_token);
        return 0;
    }
    f = fopen(c->aws_web_identity_token_file, "rb");
    if (f == NULL) {
        set_err(err, errlen, "cannot open the web identity token file");
        return TG_EIO;
    }
    n = fread(out, 1, cap - 1, f);
    fclose(f);
    while (n > 0 && (out[n - 1] == '\n' || out[n - 1] == '\r' || out[n - 1] == ' '))
        n--;
    out[n] = '\0';
    if (n == 0 || n >= cap - 1) {
        set_err(err, errlen, "the web identity token file is empty or too large");
        return TG_EIO;
    }
    return 0;
}

static int bedrock_token_request(const struct rt_deployment_conf *dep, int64_t now_s,
                                 struct rt_token_request *out, char *err, size_t errlen)
{
    const struct rt_dep_cloud *c = dep->cloud;
    char *form, *tok;
    size_t n = 0;
    int rc;

    (void)now_s;
    if (!bedrock_needs_token(dep))
        return TG_ENOTFOUND;
    form = malloc(STS_FORM_MAX);
    tok = malloc(STS_TOKEN_FILE_MAX);
    if (form == NULL || tok == NULL) {
        free(form);
        free(tok);
        set_err(err, errlen, "out of memory");
        return TG_ENOMEM;
    }
    rc = web_identity(c, tok, STS_TOKEN_FILE_MAX, err, errlen);
    if (rc == 0 &&
        (rt_oauth_form_append(form, STS_FORM_MAX, &n, "Action", "AssumeRoleWithWebIdentity") ||
         rt_oauth_form_append(form, STS_FORM_MAX, &n, "Version", "2011-06-15") ||
         rt_oauth_form_append(form, STS_FORM_MAX, &n, "RoleArn", c->aws_role_name) ||
         rt_oauth_form_append(form, STS_FORM_MAX, &n, "RoleSessionName",
                              c->aws_session_name[0] != '\0' ? c->aws_session_name : "tollgate") ||
         rt_oauth_form_append(form, STS_FORM_MAX, &n, "WebIdentityToken", tok) ||
         rt_oauth_form_append(form, STS_FORM_MAX, &n, "DurationSeconds", "3600"))) {
        set_err(err, errlen, "STS request too large");
        rc = TG_EFULL;
    }
    memset(tok, 0, STS_TOKEN_FILE_MAX);
    free(tok);
    if (rc != 0) {
        free(form);
        return rc;
    }
    out->body = form;
    out->body_len = n;
    if (c->aws_sts_endpoint[0] != '\0')
        snprintf(out->url, sizeof(out->url), "%s", c->aws_sts_endpoint);
    else
        snprintf(out->url, sizeof(out->url), "https://sts.%s.amazonaws.com/", c->aws_region_name);
    snprintf(out->headers[0], RT_PROVIDER_HEADER_CAP,
             "Content-Type: application/x-www-form-urlencoded");
    out->n_headers = 1;
    return 0;
}

/* The text of the first <tag>...</tag> of body, when it holds visible ASCII only and no '<' or
 * '&' (credentials have neither); NULL otherwise. *n its length. */
static const char *xml_text(const char *body, size_t len, const char *tag, size_t *n)
{
    char open[48], close[48];
    const char *a, *b;
    size_t ol = (size_t)snprintf(open, sizeof(open), "<%s>", tag);
    size_t cl = (size_t)snprintf(close, sizeof(close), "</%s>", tag);

    a = memmem(body, len, open, ol);
    if (a == NULL)
        return NULL;
    a += ol;
    b = memmem(a, len - (size_t)(a - body), close, cl);
    if (b == NULL)
        return NULL;
    for (const char *p = a; p < b; p++) {
        if (*p <= 0x20 || *p >= 0x7f || *p == '<' || *p == '&')
            return NULL;
    }
    *n = (size_t)(b - a);
    return a;
}

/* An ISO 8601 UTC time (2019-11-09T13:34:41Z, fractions allowed) as epoch seconds, -1 if not. */
static int64_t iso8601(const char *s, size_t n)
{
    struct tm tm;
    char buf[40];

    if (n < 20 || n >= sizeof(buf))
        return -1;
    memcpy(buf, s, n);
    buf[n] = '\0';
    memset(&tm, 0, sizeof(tm));
    if (sscanf(buf, "%4d-%2d-%2dT%2d:%2d:%2d", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour,
               &tm.tm_min, &tm.tm_sec) != 6 ||
        buf[n - 1] != 'Z')
        return -1;
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    return (int64_t)timegm(&tm);
}

int rt_aws_sts_parse(int http_status, const char *body, size_t len, char *out, size_t cap,
                     int64_t *expires_in_s, char *err, size_t errlen)
{
    const char *id, *secret, *session, *exp;
    size_t il = 0, sl = 0, tl = 0, el = 0;
    int64_t when;

    out[0] = '\0';
    *expires_in_s = 0;
    if (body == NULL || len == 0 || len > STS_ANSWER_MAX) {
        snprintf(err, errlen, "STS answered HTTP %d with %s", http_status,
                 len == 0 ? "no body" : "a body too large");
        return TG_EPROTO;
    }
    if (http_status < 200 || http_status > 299) {
        const char *code = xml_text(body, len, "Code", &il);

        snprintf(err, errlen, "STS answered HTTP %d, error \"%.*s\"", http_status,
                 code != NULL && il <= 64 ? (int)il : 6,
                 code != NULL && il <= 64 ? code : "(none)");
        return TG_EPROTO;
    }
    id = xml_text(body, len, "AccessKeyId", &il);
    secret = xml_text(body, len, "SecretAccessKey", &sl);
    session = xml_text(body, len, "SessionToken", &tl);
    exp = xml_text(body, len, "Expiration", &el);
    if (id == NULL || secret == NULL || session == NULL || exp == NULL || il == 0 || sl == 0) {
        snprintf(err, errlen, "STS answer has no complete Credentials");
        return TG_EPROTO;
    }
    when = iso8601(exp, el);
    if (when < 0) {
        snprintf(err, errlen, "STS answer has an Expiration that is not a UTC time");
        return TG_EPROTO;
    }
    *expires_in_s = when - (int64_t)time(NULL);
    if (*expires_in_s <= 0) {
        snprintf(err, errlen, "STS answer's credentials have expired already");
        *expires_in_s = 0;
        return TG_EPROTO;
    }
    if (*expires_in_s > 86400)
        *expires_in_s = 86400;
    if (il + sl + tl + 3 > cap) {
        snprintf(err, errlen, "STS credentials too long");
        *expires_in_s = 0;
        return TG_EPROTO;
    }
    snprintf(out, cap, "%.*s\n%.*s\n%.*s", (int)il, id, (int)sl, secret, (int)tl, session);
    return 0;
}

const struct rt_provider rt_provider_bedrock = {
    .name = "bedrock",
    .default_base = NULL, /* bedrock-runtime.{region}.amazonaws.com (prepare) */
    .key_env = NULL,
    .base_env = NULL,
    .flags = 0,
    .params =
        (const char *const[]){"aws_access_key_id", "aws_secret_access_key", "aws_session_token",
                              "aws_region_name", "aws_bedrock_runtime_endpoint", "aws_role_name",
                              "aws_session_name", "aws_web_identity_token", "aws_sts_endpoint",
                              NULL},
    .prepare = bedrock_prepare,
    .wire = bedrock_wire,
    .url = bedrock_url,
    .headers = bedrock_headers,
    .classify = bedrock_classify,
    .needs_token = bedrock_needs_token,
    .token_request = bedrock_token_request,
    .token_parse = rt_aws_sts_parse,
};
