/* libFuzzer target for translate (router-svc/src/translate.h): OpenAI chat <-> Anthropic
 * messages requests and responses, and the stream translators in both directions.
 *
 * The input is used twice: as one JSON document (a request or a response: when it is not a JSON
 * object the four body translations are skipped) and as an SSE stream, cut into events at blank
 * lines the way http_front.c's stream pump does (event name, data lines joined with '\n'), fed
 * to a stream translator of each direction and finished. The model name shown to the client is
 * picked from a short list by the input's hash (one of them 128 bytes of two-byte UTF-8).
 *
 * Properties (abort on violation):
 *  - requests: NULL only for the documented reasons (messages not an array, a role that is not
 *    a string) and then with a message in err; otherwise an object with the model asked for and
 *    one message per input message (plus the system one, chat side), every role and content a
 *    string, max_tokens an integer on the Anthropic side;
 *  - responses: NULL only when the input is not of the documented shape (chat: no
 *    choices[0].message object; messages: no content array); otherwise usage is carried over
 *    as integers and total_tokens is their sum;
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

/* Every message of a translated request is {role: string, content: string}. */
static void check_messages(const json_t *msgs, size_t want)
{
    size_t i;
    json_t *m;

    check(json_is_array(msgs), "translated request without a messages array");
    if (json_array_size(msgs) != want) {
        char d[64];

        snprintf(d, sizeof(d), "%zu messages, want %zu", json_array_size(msgs), want);
        fail("translated request lost or gained messages", d);
    }
    json_array_foreach(msgs, i, m)
    {
        check(json_is_string(json_object_get(m, "role")) &&
                  json_is_string(json_object_get(m, "content")),
              "translated message without a string role and content");
    }
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
        check(documented_error, "messages -> chat refused a valid request");
        check(err[0] != '\0', "messages -> chat refused without a message");
    } else {
        const json_t *sys = json_object_get(req, "system");
        size_t want = json_array_size(msgs);

        check(!documented_error, "messages -> chat accepted a request it should refuse");
        check(json_is_object(out) && str_is(json_object_get(out, "model"), model),
              "messages -> chat: not an object with the model asked for");
        /* a system prompt that is a string or an array of parts becomes the first message */
        if (json_is_string(sys) || json_is_array(sys))
            want++;
        check_messages(json_object_get(out, "messages"), want);
        if (json_is_true(json_object_get(req, "stream")))
            check(json_is_true(
                      json_object_get(json_object_get(out, "stream_options"), "include_usage")),
                  "messages -> chat: a stream without include_usage");
        json_decref(out);
    }

    err[0] = '\0';
    out = rt_translate_chat_to_messages(req, model, err, sizeof(err));
    if (out == NULL) {
        check(documented_error, "chat -> messages refused a valid request");
        check(err[0] != '\0', "chat -> messages refused without a message");
    } else {
        size_t i, want = 0, system = 0;
        json_t *m;

        check(!documented_error, "chat -> messages accepted a request it should refuse");
        check(json_is_object(out) && str_is(json_object_get(out, "model"), model),
              "chat -> messages: not an object with the model asked for");
        json_array_foreach(msgs, i, m)
        {
            const char *r = json_string_value(json_object_get(m, "role"));

            if (strcmp(r, "system") == 0 || strcmp(r, "developer") == 0)
                system++;
            else
                want++;
        }
        check_messages(json_object_get(out, "messages"), want);
        check((system > 0) == json_is_string(json_object_get(out, "system")),
              "chat -> messages: system prompt lost or invented");
        check(json_is_integer(json_object_get(out, "max_tokens")),
              "chat -> messages: no integer max_tokens");
        json_decref(out);
    }
}

static json_int_t int_or_zero(const json_t *o, const char *name)
{
    const json_t *v = json_object_get(o, name);

    return json_is_integer(v) ? json_integer_value(v) : 0;
}

static void responses(const json_t *resp, const char *model)
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
                  json_is_string(
                      json_object_get(json_array_get(json_object_get(out, "content"), 0), "text")),
              "chat -> messages response: not a message with text content");
        check(int_or_zero(ou, "input_tokens") == int_or_zero(usage, "prompt_tokens") &&
                  int_or_zero(ou, "output_tokens") == int_or_zero(usage, "completion_tokens"),
              "chat -> messages response: usage not carried over");
        json_decref(out);
    }

    out = rt_translate_messages_resp_to_chat(resp, model);
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
        check(p == int_or_zero(usage, "input_tokens") && c == int_or_zero(usage, "output_tokens"),
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

static void stream(const char *s, size_t n, enum rt_translate_dir dir, const char *model)
{
    struct rt_translate_stream st;
    struct tg_buf out;
    char name[FUZZ_EVENT_NAME_CAP];
    char *dat = malloc(n + 1);
    size_t at = 0, len;
    int rc = 0, full = 0;

    check(dat != NULL && tg_buf_init(&out, FUZZ_STREAM_OUT_BYTES) == 0, "out of memory");
    rt_translate_stream_init(&st, dir, model, 1718000000);
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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char long_model[129];
    const char *models[4] = {"claude-3-5-sonnet-20241022", "gpt-4o-mini", long_model, ""};
    const char *model;
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

    doc = json_loadb((const char *)data, size, 0, &jerr);
    if (json_is_object(doc)) {
        requests(doc, model);
        responses(doc, model);
    }
    json_decref(doc);

    stream((const char *)data, size, RT_TRANSLATE_CHAT_TO_MESSAGES, model);
    stream((const char *)data, size, RT_TRANSLATE_MESSAGES_TO_CHAT, model);
    return 0;
}
