/* libFuzzer target for what Bedrock and STS send back (router-svc/src/providers/bedrock.c,
 * eventstream.c): Converse answers, embeddings answers, STS's XML, and ConverseStream's binary
 * event-stream frames.
 *
 * Input: the first byte picks the reader (0: Converse answer, 1: embeddings answer, 2: STS
 * answer with status 200, 3: the same with 400, 4: a frame built here around the rest as its
 * payload, else: a byte stream of frames); the rest is the body.
 *
 * Properties (abort on violation):
 *  - a Converse answer converts to NULL or to a chat.completion with one choice, an assistant
 *    message, a finish reason and usage counts that add up;
 *  - STS: 0 only with status 2xx, then "id\nsecret\nsession" with no other newline and a
 *    lifetime of 1..86400 s; an error leaves the output empty;
 *  - frames: rt_evs_frame_len never reports more than it was given, nor less than
 *    RT_EVS_MIN_BYTES; rt_evs_decode answers 0 or TG_EPROTO, and on 0 the payload lies inside
 *    the frame and the header strings are NUL-terminated; a frame built with right lengths and
 *    CRCs decodes to the same payload and event type (and one flipped byte is refused);
 *  - a stream: each frame answers 0, TG_EPROTO or TG_EFULL; all written is whole "data:"
 *    events; stream_end closes ([DONE]) exactly when messageStop was seen. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "providers/provider.h"
#include "sse.h"
#include "tg_err.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *what)
{
    fprintf(stderr, "bedrock_answer_fuzz: %s\n", what);
    abort();
}

static uint32_t crc32_ref(const unsigned char *p, size_t n)
{
    uint32_t c = 0xFFFFFFFFu;

    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    }
    return c ^ 0xFFFFFFFFu;
}

static void put32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

static void check_answer(const char *body, size_t len)
{
    json_t *a = json_loadb(body, len, 0, NULL);
    char err[256];
    json_t *c, *u;

    if (a == NULL)
        return;
    c = rt_dialect_converse.response(a, "m", err, sizeof(err));
    json_decref(a);
    if (c == NULL)
        return;
    if (json_array_size(json_object_get(c, "choices")) != 1 ||
        !json_is_string(
            json_object_get(json_array_get(json_object_get(c, "choices"), 0), "finish_reason")))
        fail("choices");
    u = json_object_get(c, "usage");
    if (json_integer_value(json_object_get(u, "total_tokens")) !=
            json_integer_value(json_object_get(u, "prompt_tokens")) +
                json_integer_value(json_object_get(u, "completion_tokens")) ||
        json_integer_value(json_object_get(u, "prompt_tokens")) < 0)
        fail("usage");
    json_decref(c);
}

static void check_embeddings(const char *body, size_t len)
{
    json_t *a = json_loadb(body, len, 0, NULL);
    char err[256];
    json_t *o;

    if (a == NULL)
        return;
    o = rt_dialect_converse.embed_response(a, "m", err, sizeof(err));
    json_decref(a);
    if (o != NULL && !json_is_array(json_object_get(o, "data")))
        fail("embeddings data");
    json_decref(o);
}

static void check_sts(int status, const char *body, size_t len)
{
    char out[RT_TOKEN_CAP];
    char err[256];
    int64_t exp = -1;
    int rc = rt_aws_sts_parse(status, body, len, out, sizeof(out), &exp, err, sizeof(err));

    if (rc == 0) {
        const char *nl1 = strchr(out, '\n');
        const char *nl2 = nl1 != NULL ? strchr(nl1 + 1, '\n') : NULL;

        if (status < 200 || status > 299)
            fail("STS success from an error status");
        if (nl2 == NULL || strchr(nl2 + 1, '\n') != NULL)
            fail("STS credentials layout");
        if (exp < 1 || exp > 86400)
            fail("STS lifetime");
    } else if (rc != TG_EPROTO || out[0] != '\0') {
        fail("STS error");
    }
}

static void check_decoded(const char *p, size_t n, const struct rt_evs_message *m)
{
    if (m->payload < p || m->payload + m->payload_len > p + n)
        fail("payload outside the frame");
    if (memchr(m->message_type, '\0', sizeof(m->message_type)) == NULL ||
        memchr(m->event_type, '\0', sizeof(m->event_type)) == NULL ||
        memchr(m->exception_type, '\0', sizeof(m->exception_type)) == NULL)
        fail("header string not terminated");
}

/* A frame around payload (event type from its first bytes) must decode to it. */
static void check_built(const unsigned char *payload, size_t pl)
{
    static const char *const types[] = {"messageStart", "contentBlockDelta", "messageStop",
                                        "metadata"};
    const char *et = types[pl > 0 ? payload[0] % 4 : 0];
    unsigned char *f;
    unsigned char h[128];
    size_t hl = 0, total;
    struct rt_evs_message m;

    h[hl++] = 13;
    memcpy(h + hl, ":message-type", 13);
    hl += 13;
    h[hl++] = 7;
    h[hl++] = 0;
    h[hl++] = 5;
    memcpy(h + hl, "event", 5);
    hl += 5;
    h[hl++] = 11;
    memcpy(h + hl, ":event-type", 11);
    hl += 11;
    h[hl++] = 7;
    h[hl++] = 0;
    h[hl++] = (unsigned char)strlen(et);
    memcpy(h + hl, et, strlen(et));
    hl += strlen(et);
    total = 12 + hl + pl + 4;
    f = malloc(total);
    if (f == NULL)
        return;
    put32(f, (uint32_t)total);
    put32(f + 4, (uint32_t)hl);
    put32(f + 8, crc32_ref(f, 8));
    memcpy(f + 12, h, hl);
    memcpy(f + 12 + hl, payload, pl);
    put32(f + total - 4, crc32_ref(f, total - 4));
    if (rt_evs_frame_len((char *)f, total) != total)
        fail("built frame length");
    if (rt_evs_decode((char *)f, total, &m) != 0)
        fail("built frame refused");
    if (m.payload_len != pl || memcmp(m.payload, payload, pl) != 0 ||
        strcmp(m.event_type, et) != 0 || strcmp(m.message_type, "event") != 0)
        fail("built frame decoded differently");
    f[pl > 0 ? 12 + hl + payload[0] % pl : 0] ^= 0x20;
    if (rt_evs_decode((char *)f, total, &m) == 0)
        fail("a flipped byte accepted");
    free(f);
}

static void check_stream(const char *p, size_t n)
{
    struct rt_dialect_stream st;
    struct tg_buf out;
    size_t off = 0;
    int rc;

    if (tg_buf_init(&out, 12u * 1024u) != 0)
        return;
    rt_dialect_stream_init(&st, "m", 1);
    while (off < n) {
        size_t fl = rt_evs_frame_len(p + off, n - off);
        struct rt_evs_message m;

        if (fl == 0)
            break;
        if (fl > n - off || fl < RT_EVS_MIN_BYTES)
            fail("frame length");
        if (rt_evs_decode(p + off, fl, &m) == 0)
            check_decoded(p + off, fl, &m);
        rc = rt_dialect_converse.stream_event(&st, p + off, fl, &out);
        if (rc != 0 && rc != TG_EPROTO && rc != TG_EFULL)
            fail("stream_event answer");
        if (rc != 0 || out.truncated)
            goto out;
        off += fl;
    }
    rc = rt_dialect_converse.stream_end(&st, &out);
    if ((rc == 0) != (st.finished != 0))
        fail("stream_end and messageStop disagree");
    if (rc == 0 && !out.truncated &&
        (out.len < 14 || strcmp(out.data + out.len - 14, "data: [DONE]\n\n") != 0))
        fail("no [DONE] last");
    for (size_t o = 0; o < out.len && !out.truncated;) {
        size_t el = rt_sse_event_len(out.data + o, out.len - o);

        if (el == 0)
            fail("output is not whole events");
        o += el;
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
        check_embeddings(body, size - 1);
        break;
    case 2:
        check_sts(200, body, size - 1);
        break;
    case 3:
        check_sts(400, body, size - 1);
        break;
    case 4:
        check_built(data + 1, size - 1);
        break;
    default:
        check_stream(body, size - 1);
        break;
    }
    return 0;
}
