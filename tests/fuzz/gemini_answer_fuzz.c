/* libFuzzer target for the generateContent dialect's readers (router-svc/src/providers/
 * gemini.c): the answers, embeddings answers and stream events a Gemini or Vertex AI endpoint
 * sends, converted to OpenAI's shapes.
 *
 * Input: the first byte picks the reader (0: answer, 1: Gemini embeddings, 2: Vertex
 * embeddings, else: a stream); the rest is the provider's body, or its SSE stream fed event by
 * event (cut with the stream pump's own splitter, sse.h).
 *
 * Properties (abort on violation):
 *  - an answer converts to NULL (with a message) or to a chat.completion object whose choices
 *    is a non-empty array, each with an assistant message and a finish reason, and whose usage
 *    counts are non-negative integers adding up;
 *  - embeddings convert to NULL or to a list whose data entries are numbered 0.. in order;
 *  - a stream: every event answers 0, TG_EPROTO or TG_EFULL; everything written is a sequence
 *    of "data: " events, each a JSON object (a chat.completion.chunk with one choice or the
 *    usage chunk) or [DONE]; stream_end writes [DONE] last exactly when the provider said it
 *    finished, and only once; the output never exceeds its capacity. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "providers/provider.h"
#include "sse.h"
#include "tg_err.h"

#define FUZZ_OUT_CAP (12u * 1024u)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *what)
{
    fprintf(stderr, "gemini_answer_fuzz: %s\n", what);
    abort();
}

static void check_answer(const char *body, size_t len)
{
    json_t *a = json_loadb(body, len, 0, NULL);
    char err[256];
    json_t *c, *choices, *u, *ch;
    size_t i;

    if (a == NULL)
        return;
    c = rt_dialect_gemini.response(a, "m", err, sizeof(err));
    json_decref(a);
    if (c == NULL)
        return;
    choices = json_object_get(c, "choices");
    if (!json_is_array(choices) || json_array_size(choices) == 0)
        fail("no choices");
    json_array_foreach(choices, i, ch)
    {
        json_t *m = json_object_get(ch, "message");

        if (!json_is_object(m) || !json_is_string(json_object_get(m, "role")) ||
            !json_is_string(json_object_get(ch, "finish_reason")))
            fail("a choice without a message or a finish reason");
    }
    u = json_object_get(c, "usage");
    {
        json_t *p = json_object_get(u, "prompt_tokens");
        json_t *o = json_object_get(u, "completion_tokens");
        json_t *t = json_object_get(u, "total_tokens");

        if (!json_is_integer(p) || !json_is_integer(o) || !json_is_integer(t) ||
            json_integer_value(p) < 0 || json_integer_value(o) < 0 ||
            json_integer_value(t) != json_integer_value(p) + json_integer_value(o))
            fail("usage");
    }
    json_decref(c);
}

static void check_embeddings(const struct rt_dialect *d, const char *body, size_t len)
{
    json_t *a = json_loadb(body, len, 0, NULL);
    char err[256];
    json_t *o, *e;
    size_t i;

    if (a == NULL)
        return;
    o = d->embed_response(a, "m", err, sizeof(err));
    json_decref(a);
    if (o == NULL)
        return;
    json_array_foreach(json_object_get(o, "data"), i, e)
    {
        if (json_integer_value(json_object_get(e, "index")) != (json_int_t)i)
            fail("embedding index");
    }
    json_decref(o);
}

/* Every event in out is data: {object} or data: [DONE] (last). Returns whether [DONE] was
 * seen. */
static int check_events(const struct tg_buf *out)
{
    size_t off = 0;
    int done = 0;

    while (off < out->len) {
        size_t el = rt_sse_event_len(out->data + off, out->len - off);
        char event[32];
        char *d = malloc(el + 1);
        size_t dlen = 0;

        if (el == 0 || d == NULL)
            fail("output is not whole events");
        if (done)
            fail("an event after [DONE]");
        rt_sse_parse(out->data + off, el, event, sizeof(event), d, el + 1, &dlen);
        if (dlen == 6 && memcmp(d, "[DONE]", 6) == 0) {
            done = 1;
        } else {
            json_t *j = json_loadb(d, dlen, 0, NULL);

            if (!json_is_object(j) || !json_is_array(json_object_get(j, "choices")))
                fail("an event that is not a chunk");
            if (json_array_size(json_object_get(j, "choices")) > 1)
                fail("a chunk with several choices");
            json_decref(j);
        }
        free(d);
        off += el;
    }
    return done;
}

static void check_stream(const char *p, size_t n)
{
    struct rt_dialect_stream st;
    struct tg_buf out;
    size_t off = 0;
    int rc, done;

    if (tg_buf_init(&out, FUZZ_OUT_CAP) != 0)
        return;
    rt_dialect_stream_init(&st, "m", 1);
    while (off < n) {
        size_t el = rt_sse_event_len(p + off, n - off);

        if (el == 0)
            break;
        rc = rt_dialect_gemini.stream_event(&st, p + off, el, &out);
        if (rc != 0 && rc != TG_EPROTO && rc != TG_EFULL)
            fail("stream_event answer");
        if (out.len > out.cap)
            fail("over capacity");
        if (rc != 0 || out.truncated)
            goto out;
        off += el;
    }
    rc = rt_dialect_gemini.stream_end(&st, &out);
    if (rc == 0 && !st.finished)
        fail("stream_end closed a stream the provider never finished");
    if (rc == TG_EPROTO && st.finished)
        fail("stream_end refused a finished stream");
    if (rc == 0 && !out.truncated) {
        done = check_events(&out);
        if (!done)
            fail("no [DONE] at the end");
        if (rt_dialect_gemini.stream_end(&st, &out) != 0)
            fail("a second stream_end");
        if (check_events(&out) != 1)
            fail("events after the end");
    } else if (!out.truncated) {
        if (check_events(&out))
            fail("[DONE] from a stream that did not finish");
    }
out:
    tg_buf_fini(&out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *body = (const char *)data + 1;

    if (size == 0)
        return 0;
    switch (data[0]) {
    case 0:
        check_answer(body, size - 1);
        break;
    case 1:
        check_embeddings(&rt_dialect_gemini, body, size - 1);
        break;
    case 2:
        check_embeddings(&rt_dialect_vertex_gemini, body, size - 1);
        break;
    default:
        check_stream(body, size - 1);
        break;
    }
    return 0;
}
