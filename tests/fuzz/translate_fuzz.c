/* libFuzzer target for translate (router-svc/src/translate.h): OpenAI chat <-> Anthropic
 * messages requests and responses, and the stream translators in both directions; OpenAI
 * Responses requests -> chat, chat answers and chunk streams -> Responses (responses_doc,
 * responses_stream below).
 *
 * The input is used twice: as one JSON document (a request or a response: when it is not a JSON
 * object the four body translations are skipped) and as an SSE stream, cut into events at blank
 * lines the way http_front.c's stream pump does (event name, data lines joined with '\n'), fed
 * to a stream translator of each direction and finished. The model name shown to the client is
 * picked from a short list by the input's hash (one of them 128 bytes of two-byte UTF-8), and so
 * is whether Anthropic answers and streams are read as answers to a response_format request
 * (RT_TRANSLATE_JSON_OUTPUT).
 *
 * Properties (abort on violation):
 *  - requests: a refusal has a message in err that names the field at fault (it starts with
 *    "messages" or a member of the request); messages not an array and a role that is not a
 *    string are always refused; otherwise an object with the model asked for, the messages the
 *    input's become (one per message, plus the system one, chat side; Anthropic tool results one
 *    tool message each; OpenAI consecutive tool results one user message, which the user's next
 *    message joins), each with a role of the target's API and content that is a string or parts
 *    with a string type (tool_use inputs objects, tool call arguments strings), max_tokens an
 *    integer on the Anthropic side, the JSON tool forced when response_format asks for JSON;
 *  - responses: NULL only when the input is not of the documented shape (chat: no
 *    choices[0].message object; messages: no content array); otherwise usage is carried over
 *    as integers (prompt_tokens counting the cache's reads and writes) and total_tokens is
 *    their sum; Anthropic content blocks have a string type;
 *  - streams: every event answers 0, TG_EPROTO (and leaves the output as it was) or TG_EFULL;
 *    after the stream is finished nothing more is written; finish is idempotent; what was
 *    written is well-formed SSE whose every data line is [DONE] or a JSON object (carrying the
 *    client's model name in OpenAI chunks) and, unless an error event ended it, it ends with the
 *    client API's terminating event. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "tg_buf.h"
#include "tg_err.h"
#include "sse.h"
#include "translate.h"

#define FUZZ_STREAM_OUT_BYTES (64 * 1024) /* client-side stream buffer */
#define FUZZ_EVENT_NAME_CAP 64            /* as http_front.c's event name buffer */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *what, const char *detail)
{
    fprintf(stderr, "translate_fuzz: %s%s%s\n", what, detail != NULL ? ": " : "",
            detail != NULL ? detail : "");
    abort();
}

static void check(int ok, const char *what)
{
    if (!ok)
        fail(what, NULL);
}

static int str_is(const json_t *v, const char *s)
{
    return json_is_string(v) && strcmp(json_string_value(v), s) == 0;
}

/* A content value of a translated message: a string, or an array of parts (OpenAI) or blocks
 * (Anthropic) each with a string type, text parts with a string text, tool_use blocks with an
 * object input, tool_result blocks with a string tool_use_id. */
static int content_ok(const json_t *c)
{
    size_t i;
    json_t *b;

    if (json_is_string(c))
        return 1;
    if (!json_is_array(c))
        return 0;
    json_array_foreach(c, i, b)
    {
        const json_t *t = json_object_get(b, "type");

        if (!json_is_string(t))
            return 0;
        if (str_is(t, "text") && !json_is_string(json_object_get(b, "text")))
            return 0;
        if (str_is(t, "tool_use") && !json_is_object(json_object_get(b, "input")))
            return 0;
        if (str_is(t, "tool_result") && !json_is_string(json_object_get(b, "tool_use_id")))
            return 0;
    }
    return 1;
}

/* Every message of a translated request has a role of the target's API and content_ok content
 * (an OpenAI assistant message with tool calls may have null content; its calls' arguments
 * are JSON texts). */
static void check_messages(const json_t *msgs, size_t want, int anthropic)
{
    size_t i, k;
    json_t *m, *tc;

    check(json_is_array(msgs), "translated request without a messages array");
    if (json_array_size(msgs) != want) {
        char d[64];

        snprintf(d, sizeof(d), "%zu messages, want %zu", json_array_size(msgs), want);
        fail("translated request lost or gained messages", d);
    }
    json_array_foreach(msgs, i, m)
    {
        const json_t *role = json_object_get(m, "role");
        const json_t *c = json_object_get(m, "content");
        const json_t *calls = json_object_get(m, "tool_calls");

        check(anthropic ? str_is(role, "user") || str_is(role, "assistant")
                        : str_is(role, "system") || str_is(role, "user") ||
                              str_is(role, "assistant") || str_is(role, "tool"),
              "translated message with a role the target does not have");
        check(content_ok(c) || (!anthropic && json_is_null(c) && json_array_size(calls) > 0),
              "translated message without well-formed content");
        json_array_foreach(calls, k, tc)
        {
            check(json_is_string(json_object_get(json_object_get(tc, "function"), "arguments")),
                  "translated tool call without a JSON text of arguments");
        }
    }
}

/* A refusal names the field at fault: err starts with "messages" or a member of req, followed
 * by ':', '.' or '['. */
static void check_refusal(const json_t *req, const char *err, const char *what)
{
    size_t n = strcspn(err, ":.[");
    char key[64];

    if (strcmp(err, "out of memory") == 0)
        return;
    if (n == 0 || n >= sizeof(key) || err[n] == '\0')
        fail(what, err);
    memcpy(key, err, n);
    key[n] = '\0';
    if (strcmp(key, "messages") != 0 && json_object_get(req, key) == NULL)
        fail(what, err);
}

/* Messages an Anthropic request becomes in OpenAI chat: a user turn's tool results each one
 * tool message, the rest of the turn one message (none when only results), an assistant turn
 * one message. */
static size_t chat_count(const json_t *msgs)
{
    size_t i, k, n = 0;
    json_t *m, *b;

    json_array_foreach(msgs, i, m)
    {
        const json_t *c = json_object_get(m, "content");
        size_t results = 0, other = 0;

        if (!json_is_array(c) || str_is(json_object_get(m, "role"), "assistant")) {
            n++;
            continue;
        }
        json_array_foreach(c, k, b)
        {
            if (str_is(json_object_get(b, "type"), "tool_result"))
                results++;
            else
                other++;
        }
        n += results + (other > 0 || results == 0);
    }
    return n;
}

/* Messages an OpenAI chat request becomes for Anthropic: system and developer go to system,
 * consecutive tool results are one user message, which the user's next message joins. */
static size_t messages_count(const json_t *msgs, size_t *system)
{
    size_t i, n = 0;
    int results = 0;
    json_t *m;

    *system = 0;
    json_array_foreach(msgs, i, m)
    {
        const char *r = json_string_value(json_object_get(m, "role"));

        if (strcmp(r, "system") == 0 || strcmp(r, "developer") == 0) {
            (*system)++;
        } else if (strcmp(r, "tool") == 0) {
            n += !results;
            results = 1;
        } else {
            n += !(results && strcmp(r, "user") == 0);
            results = 0;
        }
    }
    return n;
}

/* Does the request have messages[] with a role that is not a string (a documented error)? */
static int bad_roles(const json_t *req)
{
    const json_t *msgs = json_object_get(req, "messages");
    size_t i;
    json_t *m;

    json_array_foreach(msgs, i, m)
    {
        if (!json_is_string(json_object_get(m, "role")))
            return 1;
    }
    return 0;
}

static void requests(const json_t *req, const char *model)
{
    const json_t *msgs = json_object_get(req, "messages");
    int documented_error = !json_is_array(msgs) || bad_roles(req);
    char err[256];
    json_t *out;

    err[0] = '\0';
    out = rt_translate_messages_to_chat(req, model, err, sizeof(err));
    if (out == NULL) {
        check(err[0] != '\0', "messages -> chat refused without a message");
        check_refusal(req, err, "messages -> chat refused without naming the field");
    } else {
        const json_t *sys = json_object_get(req, "system");
        size_t want = chat_count(msgs);

        check(!documented_error, "messages -> chat accepted a request it should refuse");
        check(json_is_object(out) && str_is(json_object_get(out, "model"), model),
              "messages -> chat: not an object with the model asked for");
        /* a system prompt that is a string or an array of parts becomes the first message */
        if (json_is_string(sys) || json_is_array(sys))
            want++;
        check_messages(json_object_get(out, "messages"), want, 0);
        if (json_is_true(json_object_get(req, "stream")))
            check(json_is_true(
                      json_object_get(json_object_get(out, "stream_options"), "include_usage")),
                  "messages -> chat: a stream without include_usage");
        json_decref(out);
    }

    err[0] = '\0';
    out = rt_translate_chat_to_messages(req, model, err, sizeof(err));
    if (out == NULL) {
        check(err[0] != '\0', "chat -> messages refused without a message");
        check_refusal(req, err, "chat -> messages refused without naming the field");
    } else {
        size_t want, system;
        const char *rft = json_string_value(
            json_object_get(json_object_get(req, "response_format"), "type"));

        check(!documented_error, "chat -> messages accepted a request it should refuse");
        check(json_is_object(out) && str_is(json_object_get(out, "model"), model),
              "chat -> messages: not an object with the model asked for");
        want = messages_count(msgs, &system);
        check_messages(json_object_get(out, "messages"), want, 1);
        check((system > 0) == json_is_string(json_object_get(out, "system")),
              "chat -> messages: system prompt lost or invented");
        check(json_is_integer(json_object_get(out, "max_tokens")),
              "chat -> messages: no integer max_tokens");
        if (rft != NULL && strcmp(rft, "text") != 0)
            check(str_is(json_object_get(json_object_get(out, "tool_choice"), "name"),
                         RT_TRANSLATE_JSON_TOOL),
                  "chat -> messages: response_format without its forced tool");
        json_decref(out);
    }
}

static json_int_t int_or_zero(const json_t *o, const char *name)
{
    const json_t *v = json_object_get(o, name);

    return json_is_integer(v) ? json_integer_value(v) : 0;
}

static void responses(const json_t *resp, const char *model, unsigned flags)
{
    const json_t *msg =
        json_object_get(json_array_get(json_object_get(resp, "choices"), 0), "message");
    const json_t *usage = json_object_get(resp, "usage");
    json_t *out = rt_translate_chat_resp_to_messages(resp, model);

    if (!json_is_object(msg)) {
        check(out == NULL, "chat -> messages response from something that is not one");
    } else {
        const json_t *ou;

        check(out != NULL, "chat -> messages response refused a chat completion");
        ou = json_object_get(out, "usage");
        check(str_is(json_object_get(out, "type"), "message") &&
                  str_is(json_object_get(out, "model"), model) &&
                  json_array_size(json_object_get(out, "content")) > 0 &&
                  content_ok(json_object_get(out, "content")),
              "chat -> messages response: not a message with well-formed content");
        check(int_or_zero(ou, "input_tokens") == int_or_zero(usage, "prompt_tokens") &&
                  int_or_zero(ou, "output_tokens") == int_or_zero(usage, "completion_tokens"),
              "chat -> messages response: usage not carried over");
        json_decref(out);
    }

    out = rt_translate_messages_resp_to_chat(resp, model, flags);
    if (!json_is_array(json_object_get(resp, "content"))) {
        check(out == NULL, "messages -> chat response from something that is not one");
    } else {
        const json_t *ou;
        json_int_t p, c, sum;

        check(out != NULL, "messages -> chat response refused an Anthropic message");
        ou = json_object_get(out, "usage");
        p = int_or_zero(ou, "prompt_tokens");
        c = int_or_zero(ou, "completion_tokens");
        check(str_is(json_object_get(out, "object"), "chat.completion") &&
                  str_is(json_object_get(out, "model"), model),
              "messages -> chat response: not a chat.completion for the model");
        /* prompt_tokens: the input and what the cache read and wrote (when that sum is one) */
        if (!__builtin_add_overflow(int_or_zero(usage, "input_tokens"),
                                    int_or_zero(usage, "cache_read_input_tokens"), &sum) &&
            !__builtin_add_overflow(sum, int_or_zero(usage, "cache_creation_input_tokens"), &sum))
            check(p == sum, "messages -> chat response: prompt usage not carried over");
        check(c == int_or_zero(usage, "output_tokens"),
              "messages -> chat response: usage not carried over");
        check(json_is_integer(json_object_get(ou, "total_tokens")),
              "messages -> chat response: no integer total_tokens");
        if (!__builtin_add_overflow(p, c, &sum))
            check(int_or_zero(ou, "total_tokens") == sum,
                  "messages -> chat response: total_tokens is not the sum");
        json_decref(out);
    }
}

/* What a translator wrote: "event: x\n" lines and "data: y\n\n" blocks. Returns 1 when the last
 * event is the terminator of the client's API, 2 when it is an error event. */
static int check_output(const struct tg_buf *out, enum rt_translate_dir dir, const char *model)
{
    const char *p = out->data;
    size_t n = out->len, i = 0;
    int last = 0;
    json_int_t open = -1, next = 0; /* Anthropic content blocks: the open one, the next one */

    while (i < n) {
        const char *nl = memchr(p + i, '\n', n - i);
        size_t ll;

        check(nl != NULL, "translated stream: a line without its newline");
        ll = (size_t)(nl - (p + i));
        if (ll >= 7 && memcmp(p + i, "event: ", 7) == 0) {
            check(dir == RT_TRANSLATE_CHAT_TO_MESSAGES, "translated stream: event line in chat");
        } else if (ll >= 6 && memcmp(p + i, "data: ", 6) == 0) {
            const char *d = p + i + 6;
            size_t dl = ll - 6;

            check(nl + 1 < p + n && nl[1] == '\n', "translated stream: data without a blank line");
            if (dl == 6 && memcmp(d, "[DONE]", 6) == 0) {
                check(dir == RT_TRANSLATE_MESSAGES_TO_CHAT,
                      "translated stream: [DONE] in messages");
                last = 1;
            } else {
                json_error_t jerr;
                json_t *j = json_loadb(d, dl, 0, &jerr);
                const char *type;

                if (!json_is_object(j))
                    fail("translated stream: data is not a JSON object", jerr.text);
                type = json_string_value(json_object_get(j, "type"));
                if (dir == RT_TRANSLATE_MESSAGES_TO_CHAT) {
                    last = json_is_object(json_object_get(j, "error")) ? 2 : 0;
                    check(last == 2 || str_is(json_object_get(j, "model"), model),
                          "translated stream: chunk without the client's model");
                } else {
                    json_int_t ix = json_is_integer(json_object_get(j, "index"))
                                        ? json_integer_value(json_object_get(j, "index"))
                                        : -2;

                    /* blocks one at a time, indexes counting up from 0, deltas and the stop
                     * for the open one, all closed before message_delta */
                    if (type != NULL && strcmp(type, "content_block_start") == 0) {
                        check(open == -1 && ix == next, "translated stream: block start out of "
                                                        "order");
                        open = next++;
                    } else if (type != NULL && strcmp(type, "content_block_delta") == 0) {
                        check(open >= 0 && ix == open, "translated stream: delta for a block "
                                                       "that is not open");
                    } else if (type != NULL && strcmp(type, "content_block_stop") == 0) {
                        check(open >= 0 && ix == open, "translated stream: stop for a block that "
                                                       "is not open");
                        open = -1;
                    } else if (type != NULL && strcmp(type, "message_delta") == 0) {
                        check(open == -1 && next > 0, "translated stream: message_delta with a "
                                                      "block open or none at all");
                    }
                    last = type != NULL && strcmp(type, "message_stop") == 0 ? 1
                           : type != NULL && strcmp(type, "error") == 0      ? 2
                                                                             : 0;
                }
                json_decref(j);
            }
            i += 1; /* the blank line */
        } else {
            fail("translated stream: a line that is neither event: nor data:", NULL);
        }
        i += ll + 1;
    }
    return last;
}

static void stream(const char *s, size_t n, enum rt_translate_dir dir, const char *model,
                   unsigned flags)
{
    struct rt_translate_stream st;
    struct tg_buf out;
    char name[FUZZ_EVENT_NAME_CAP];
    char *dat = malloc(n + 1);
    size_t at = 0, len;
    int rc = 0, full = 0;

    check(dat != NULL && tg_buf_init(&out, FUZZ_STREAM_OUT_BYTES) == 0, "out of memory");
    rt_translate_stream_init(&st, dir, model, 1718000000, flags);
    /* events split and parsed by the module the stream pump uses */
    while (!full && (len = rt_sse_event_len(s + at, n - at)) > 0) {
        size_t dlen, before = out.len;
        int finished = st.finished;

        rt_sse_parse(s + at, len, name, sizeof(name), dat, n + 1, &dlen);
        at += len;
        if (dlen == 0)
            continue; /* http_front.c does not translate an event without data */
        rc = rt_translate_stream_event(&st, name, dat, dlen, &out);
        if (rc != 0 && rc != TG_EPROTO && rc != TG_EFULL) {
            fprintf(stderr, "rc %d (%s)\n", rc, tg_strerror(rc));
            fail("stream event: return code outside the contract", NULL);
        }
        check(rc != TG_EPROTO || out.len == before, "stream event: TG_EPROTO changed the output");
        check(!finished || (rc == 0 && out.len == before), "stream event after the end wrote");
        full = rc == TG_EFULL || out.truncated;
    }
    if (!full) {
        size_t before;

        rc = rt_translate_stream_finish(&st, &out);
        check(rc == 0 || rc == TG_EFULL, "stream finish: return code outside the contract");
        check(st.finished, "stream finish: not finished");
        full = rc == TG_EFULL || out.truncated;
        before = out.len;
        check(rt_translate_stream_finish(&st, &out) == 0 && out.len == before,
              "stream finish is not idempotent");
    }
    if (!full)
        check(check_output(&out, dir, model) != 0, "translated stream does not end its stream");
    tg_buf_fini(&out);
    free(dat);
}

/* Responses, the reasoning items of an answer (output, to the request doc) sent back as input:
 * each one with encrypted_content (only when doc's include asks for it) is decoded, and the
 * assistant turn after them carries thinking_blocks equal to the answer's usable entries, in
 * order, signatures and data byte for byte. */
static void responses_round_trip(const json_t *doc, const json_t *output, const char *model)
{
    const json_t *msg =
        json_object_get(json_array_get(json_object_get(doc, "choices"), 0), "message");
    json_t *req = json_pack("{s:[{s:s,s:s}]}", "input", "role", "user", "content", "q");
    json_t *input = json_object_get(req, "input"), *chat, *want, *tb, *it;
    char err[256] = "";
    size_t i, n_enc = 0;

    check(req != NULL, "out of memory");
    json_array_foreach(output, i, it) {
        if (str_is(json_object_get(it, "type"), "reasoning")) {
            json_array_append(input, it);
            n_enc += json_object_get(it, "encrypted_content") != NULL;
        }
    }
    if (n_enc == 0) {
        json_decref(req);
        return;
    }
    json_array_append_new(input, json_pack("{s:s,s:s}", "role", "assistant", "content", "a"));
    chat = rt_translate_responses_to_chat(req, model, err, sizeof(err));
    if (chat == NULL)
        fail("responses round trip: our own reasoning items refused", err);
    want = json_array();
    json_array_foreach(json_object_get(msg, "thinking_blocks"), i, tb) {
        const json_t *th = json_object_get(tb, "thinking"), *sig = json_object_get(tb, "signature");
        const json_t *data = json_object_get(tb, "data");

        if (str_is(json_object_get(tb, "type"), "thinking") && json_is_string(th) &&
            json_is_string(sig))
            json_array_append_new(want, json_pack("{s:s,s:O,s:O}", "type", "thinking",
                                                  "thinking", th, "signature", sig));
        else if (str_is(json_object_get(tb, "type"), "redacted_thinking") && json_is_string(data))
            json_array_append_new(want, json_pack("{s:s,s:O}", "type", "redacted_thinking",
                                                  "data", data));
    }
    check(json_equal(json_object_get(json_array_get(json_object_get(chat, "messages"), 1),
                                     "thinking_blocks"),
                     want),
          "responses round trip: thinking_blocks not as the answer had them");
    json_decref(want);
    json_decref(chat);
    json_decref(req);
}

/* Responses: the request as chat (a refusal names a field; else a chat request with the model
 * and a non-empty messages array), the document as a chat answer (NULL only without a
 * choices[0].message object; else a "response" with output an array and status completed or
 * incomplete; its reasoning items sent back decode to the answer's thinking_blocks:
 * responses_round_trip), and the input as a stream of chat chunks through rt_resp_stream_chunk
 * (answering, a quarter of the streams each, picked by the hash, a request that asks for
 * nothing, for reasoning.encrypted_content, for reasoning summaries, or for both): every
 * chunk 0, TG_EPROTO, TG_ETOOBIG (out and the sequence unchanged) or TG_EFULL; nothing after
 * the end; every event "event: <type>" then data whose type is that name and whose
 * sequence_number counts from 0; a [DONE] (fed at the end) closes it with response.completed
 * or response.incomplete unless an error event ended it. The kept text is bounded by a small
 * text_max picked by the hash. */
static void responses_doc(const json_t *doc, const char *model)
{
    char err[256] = "";
    json_t *chat = rt_translate_responses_to_chat(doc, model, err, sizeof(err));
    json_t *r;

    if (chat == NULL) {
        check(err[0] != '\0' && strstr(err, ": ") != NULL, "responses request: refusal without "
                                                            "a field");
    } else {
        check(str_is(json_object_get(chat, "model"), model), "responses request: model");
        check(json_array_size(json_object_get(chat, "messages")) > 0,
              "responses request: no messages");
        json_decref(chat);
    }
    r = rt_translate_chat_resp_to_responses(doc, doc, model);
    if (r == NULL) {
        check(!json_is_object(json_object_get(json_array_get(json_object_get(doc, "choices"), 0),
                                              "message")),
              "responses answer: NULL for a chat completion");
        return;
    }
    check(str_is(json_object_get(r, "object"), "response") &&
              json_is_array(json_object_get(r, "output")) &&
              (str_is(json_object_get(r, "status"), "completed") ||
               str_is(json_object_get(r, "status"), "incomplete")),
          "responses answer: shape");
    responses_round_trip(doc, json_object_get(r, "output"), model);
    json_decref(r);
}

static void responses_check_output(const struct tg_buf *out, int errored, int finished)
{
    const char *p = out->data, *end = out->data + out->len;
    int64_t seq = 0;
    int last = 0;

    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *dl, *dnl;
        json_t *j;

        check(nl != NULL && strncmp(p, "event: ", 7) == 0, "responses stream: event line");
        dl = nl + 1;
        check(strncmp(dl, "data: ", 6) == 0, "responses stream: data line");
        dnl = memchr(dl, '\n', (size_t)(end - dl));
        check(dnl != NULL && dnl + 1 < end && dnl[1] == '\n', "responses stream: blank line");
        j = json_loadb(dl + 6, (size_t)(dnl - dl - 6), 0, NULL);
        check(json_is_object(j), "responses stream: data is not an object");
        check(json_string_length(json_object_get(j, "type")) == (size_t)(nl - p - 7) &&
                  memcmp(json_string_value(json_object_get(j, "type")), p + 7,
                         (size_t)(nl - p - 7)) == 0,
              "responses stream: event name is not the type");
        check(json_integer_value(json_object_get(j, "sequence_number")) == seq++,
              "responses stream: sequence_number");
        last = str_is(json_object_get(j, "type"), "response.completed") ||
               str_is(json_object_get(j, "type"), "response.incomplete") ||
               str_is(json_object_get(j, "type"), "error");
        json_decref(j);
        p = dnl + 2;
    }
    check(!finished || last, "responses stream: finished without a terminal event");
    (void)errored;
}

static void responses_stream(const char *s, size_t n, const char *model, size_t text_max,
                             const json_t *req)
{
    struct rt_resp_stream *st = rt_resp_stream_create(req, model, 1718000000, text_max);
    struct tg_buf out;
    char name[FUZZ_EVENT_NAME_CAP];
    char *dat = malloc(n + 1);
    size_t at = 0, len;
    int rc, full = 0;

    check(st != NULL && dat != NULL && tg_buf_init(&out, 4 * FUZZ_STREAM_OUT_BYTES) == 0,
          "out of memory");
    for (int pass = 0; !full && pass < 2; pass++) {
        while (!full && (len = pass == 0 ? rt_sse_event_len(s + at, n - at) : 1) > 0) {
            size_t dlen, before = out.len;
            int finished = rt_resp_stream_finished(st);
            int64_t seq = rt_resp_stream_seq(st);

            if (pass == 0) {
                rt_sse_parse(s + at, len, name, sizeof(name), dat, n + 1, &dlen);
                at += len;
                if (dlen == 0)
                    continue;
                rc = rt_resp_stream_chunk(st, dat, dlen, &out);
            } else {
                rc = rt_resp_stream_chunk(st, "[DONE]", 6, &out);
            }
            check(rc == 0 || rc == TG_EPROTO || rc == TG_ETOOBIG || rc == TG_EFULL,
                  "responses stream: return code outside the contract");
            check(rc == 0 || (out.len == before && rt_resp_stream_seq(st) == seq),
                  "responses stream: a refused chunk changed the output");
            check(!finished || (rc == 0 && out.len == before),
                  "responses stream: wrote after the end");
            full = rc == TG_EFULL;
            if (pass == 1) {
                check(full || rt_resp_stream_finished(st), "responses stream: [DONE] did not "
                                                           "end it");
                break;
            }
        }
    }
    if (!full)
        responses_check_output(&out, rt_resp_stream_errored(st), rt_resp_stream_finished(st));
    tg_buf_fini(&out);
    free(dat);
    rt_resp_stream_destroy(&st);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char long_model[129];
    static json_t *stream_reqs[4]; /* kept for the process's life; [0] NULL */
    const char *models[4] = {"claude-3-5-sonnet-20241022", "gpt-4o-mini", long_model, ""};
    const char *model;
    unsigned flags;
    uint64_t h = 0xcbf29ce484222325ull;
    json_error_t jerr;
    json_t *doc;

    if (long_model[0] == '\0') {
        /* the longest model name a client can ask for: RT_NAME_CAP - 1 bytes, all two-byte */
        for (size_t i = 0; i + 1 < sizeof(long_model); i += 2)
            memcpy(long_model + i, "\xc3\xa9", 2);
    }
    for (size_t i = 0; i < size; i++)
        h = (h ^ data[i]) * 0x100000001b3ull;
    model = models[h % 4];
    /* half the inputs as answers to a request whose response_format went as the JSON tool */
    flags = (h >> 8) & 1 ? RT_TRANSLATE_JSON_OUTPUT : 0;

    doc = json_loadb((const char *)data, size, 0, &jerr);
    if (json_is_object(doc)) {
        requests(doc, model);
        responses(doc, model, flags);
        responses_doc(doc, model);
    }
    json_decref(doc);

    stream((const char *)data, size, RT_TRANSLATE_CHAT_TO_MESSAGES, model, 0);
    stream((const char *)data, size, RT_TRANSLATE_MESSAGES_TO_CHAT, model, flags);
    if (stream_reqs[1] == NULL) {
        stream_reqs[1] = json_pack("{s:[s]}", "include", "reasoning.encrypted_content");
        stream_reqs[2] = json_pack("{s:{s:s}}", "reasoning", "summary", "auto");
        stream_reqs[3] = json_pack("{s:[s],s:{s:s}}", "include", "reasoning.encrypted_content",
                                   "reasoning", "summary", "detailed");
    }
    /* a quarter of the streams each answer a request that asks for nothing, for
     * reasoning.encrypted_content, for reasoning summaries, for both */
    responses_stream((const char *)data, size, model, (h >> 16) & 1 ? 64 : 1u << 20,
                     stream_reqs[(h >> 17) & 3]);
    return 0;
}
