/* relay: a provider's stream relayed to the client event by event (call_int.h has the buffer
 * bounds): complete events move from the raw upstream buffer to the client-bound buffer, each
 * passed through as is or translated (the direction the provider's wire chose), with the usage
 * read on the way; the transfer is paused while the raw buffer is full and resumed once the
 * reader has taken an event; the routing side and the event are finished before the stream's
 * terminating event leaves, and the cost follows as a trailer. A Responses stream served
 * through chat (wire.responses) takes one step more: the chat events (the provider's, or what
 * the translation or the dialect made of its events) go through the Responses stream
 * translation (translate.h, rt_resp_stream_*) on their way out. Loop thread. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "call_int.h"
#include "mask.h"
#include "rt_metrics.h"
#include "sse.h"
#include "tg_err.h"
#include "tg_time.h"
#include "upstream.h"

/* The largest upstream event a stream takes: limits.max_response_bytes. */
static size_t event_cap(const struct rt_call *c)
{
    uint64_t m = c->env->cfg->max_response_bytes;

    return m > 0 ? (size_t)m : (size_t)RT_DEFAULT_MAX_RESPONSE_BYTES;
}

/* Client-side stream state (the output buffer itself is allocated by stream_pump when it has
 * something to write). Returns 0 or TG_ENOMEM. */
int relay_begin(struct rt_call *c)
{
    tg_buf_reset(&c->out);
    c->out.truncated = 0;
    c->out_off = 0;
    if (!c->sse_init) {
        if (rt_sse_usage_init(&c->sse, c->wire.api, event_cap(c) + 1) == 0)
            c->sse_init = 1;
    }
    rt_translate_stream_init(&c->tr, c->wire.dir, c->model_requested, (int64_t)time(NULL),
                             rt_translate_flags(c->req, c->wire.dir));
    rt_resp_stream_destroy(&c->rs);
    if (c->wire.responses) {
        c->rs = rt_resp_stream_create(c->req, c->model_requested, (int64_t)time(NULL),
                                      event_cap(c));
        if (c->rs == NULL)
            return TG_ENOMEM;
        if (c->rchat.data == NULL && tg_buf_init(&c->rchat, RT_STREAM_OUT_BYTES) != 0)
            return TG_ENOMEM;
        tg_buf_reset(&c->rchat);
        c->rchat.truncated = 0;
    }
    if (c->wire.dialect != NULL) {
        rt_dialect_stream_init(&c->ds, c->model_requested, (int64_t)time(NULL));
        if (c->conv.data == NULL && tg_buf_init(&c->conv, RT_STREAM_OUT_BYTES) != 0)
            return TG_ENOMEM;
        tg_buf_reset(&c->conv);
        c->conv.truncated = 0;
    }
    return 0;
}

/* Finish the routing side of a stream once, before its terminating event is sent. */
void relay_finalize(struct rt_call *c, enum rt_error_class ec, const char *msg)
{
    struct rt_result res;

    if (c->stream_finalized)
        return;
    c->stream_finalized = 1;
    if (c->sse_init)
        rt_sse_usage_get(&c->sse, &c->usage);
    if (c->wire.dir != RT_TRANSLATE_NONE && !c->usage.found) {
        c->usage.prompt_tokens = c->tr.prompt_tokens;
        c->usage.completion_tokens = c->tr.completion_tokens;
        c->usage.cache_read_tokens = c->tr.cache_read_tokens;
        c->usage.cache_creation_tokens = c->tr.cache_creation_tokens;
    }
    call_price(c);
    if (c->have_target) {
        memset(&res, 0, sizeof(res));
        res.http_status = 200;
        res.error_class = ec;
        res.latency_ms = (uint32_t)((tg_now_mono_us() - c->attempt_start_us) / 1000);
        res.message = msg;
        res.message_len = msg != NULL ? strlen(msg) : 0;
        res.committed = 1;
        rt_router_report(c->env->router, &c->plan, &c->target, &res, tg_loop_mono_ms(), NULL);
        c->have_target = 0;
        if (ec != RT_ERR_NONE)
            rt_metrics_attempt(c->env->metrics, c->key, c->target.dep->id, 200, ec);
    }
    call_complete(c, 200, ec == RT_ERR_NONE ? NULL : rt_error_class_name(ec));
}

/* In-band error for a stream that already started. */
static void stream_error_event(struct rt_call *c, const char *msg)
{
    char masked[RT_CALL_MESSAGE_MAX];
    json_t *j;
    char *s;

    if (c->out.data == NULL)
        return; /* no output buffer (out of memory): the stream just ends */
    rt_mask_apply(c->env->mask, msg, strlen(msg), masked, sizeof(masked));
    if (c->rs != NULL) {
        /* a translated Responses stream: its error event, numbered in the stream's sequence */
        if (rt_resp_stream_errored(c->rs))
            return; /* the upstream's error event went out already */
        j = json_pack("{s:s,s:s,s:s,s:n,s:I}", "type", "error", "code", "stream_error", "message",
                      masked, "param", "sequence_number", (json_int_t)rt_resp_stream_seq(c->rs));
        s = j != NULL ? json_dumps(j, JSON_COMPACT) : NULL;
        json_decref(j);
        if (s != NULL)
            tg_buf_printf(&c->out, "event: error\ndata: %s\n\n", s);
        free(s);
        return;
    }
    if (c->api == RT_API_MESSAGES)
        j = json_pack("{s:s,s:{s:s,s:s}}", "type", "error", "error", "type", "api_error", "message",
                      masked);
    else
        j = json_pack("{s:{s:s,s:s,s:s}}", "error", "message", masked, "type", "api_error", "code",
                      "stream_error");
    s = j != NULL ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (s == NULL)
        return;
    if (c->api == RT_API_MESSAGES)
        tg_buf_printf(&c->out, "event: error\ndata: %s\n\n", s);
    else
        tg_buf_printf(&c->out, "data: %s\n\n", s);
    free(s);
}

/* Is this upstream event the stream's terminating event? */
static int is_terminator(const struct rt_call *c, const char *event, const char *data, size_t dlen)
{
    if (c->wire.api == RT_API_MESSAGES)
        return (event != NULL && strcmp(event, "message_stop") == 0) ||
               (dlen > 0 && strstr(data, "\"message_stop\"") != NULL);
    if (c->wire.api == RT_API_RESPONSES)
        return event != NULL &&
               (strcmp(event, "response.completed") == 0 || strcmp(event, "response.failed") == 0 ||
                strcmp(event, "response.incomplete") == 0);
    return dlen == 6 && memcmp(data, "[DONE]", 6) == 0;
}

/* An OpenAI chunk with no choices and a usage object (the include_usage chunk). The scanner
 * answers when it can (it agrees with jansson where it answers: usage.h), jansson otherwise. */
static int is_usage_only_chunk(const char *data, size_t dlen)
{
    struct rt_json_member m[2] = {{"usage", 0, 0, 0}, {"choices", 0, 0, 0}};
    json_t *j;
    int yes;

    if (dlen < 2 || data[0] != '{' || !rt_usage_mentioned(data, dlen))
        return 0;
    if (rt_json_scan_object(data, dlen, m, 2, NULL) == 0) {
        const char *ch = data + m[1].val_off;
        size_t k = 1;

        if (m[0].val_len == 0 || data[m[0].val_off] != '{')
            return 0;
        if (m[1].val_len == 0 || ch[0] != '[')
            return 1; /* no choices, or not an array: json_array_size is 0 */
        while (k < m[1].val_len &&
               (ch[k] == ' ' || ch[k] == '\t' || ch[k] == '\n' || ch[k] == '\r'))
            k++;
        return k < m[1].val_len && ch[k] == ']';
    }
    j = json_loadb(data, dlen, 0, NULL);
    yes = json_is_object(json_object_get(j, "usage")) &&
          json_array_size(json_object_get(j, "choices")) == 0;
    json_decref(j);
    return yes;
}

/* Usage of a /v1/responses stream from its response.completed event (whose one line can be
 * longer than the usage parser's line buffer). */
static void responses_usage_from_event(struct rt_call *c, const char *data, size_t dlen)
{
    json_t *j = json_loadb(data, dlen, 0, NULL);
    struct rt_usage u;

    if (rt_usage_read(RT_API_RESPONSES, json_object_get(json_object_get(j, "response"), "usage"),
                      &u))
        c->usage = u;
    json_decref(j);
}

/* Stream failed after it started: finish the routing side, say so in-band, stop the transfer. */
static void stream_fail(struct rt_call *c, enum rt_error_class ec, const char *msg, int cancel)
{
    relay_finalize(c, ec, msg);
    stream_error_event(c, msg);
    if (cancel) {
        c->discard = 1; /* on_data refuses further bytes, which ends the transfer */
        rt_upstream_cancel(c->env->up, c->handle);
    }
}

/* The output grown (doubling, contents kept) for a Responses stream whose chunk's events did
 * not fit: up to four event caps beyond what its closing events need. 0, or -1 at that bound
 * (or out of memory). */
static int out_grow(struct rt_call *c)
{
    size_t most = 4 * event_cap(c) + rt_resp_stream_need(c->rs);
    size_t n = c->out.cap * 2;
    struct tg_buf nb;

    if (c->out.cap >= most)
        return -1;
    if (n > most)
        n = most;
    if (tg_buf_init(&nb, n) != 0)
        return -1;
    tg_buf_append(&nb, c->out.data, c->out.len);
    tg_buf_fini(&c->out);
    c->out = nb;
    return 0;
}

/* The chat events in c->rchat through the Responses stream translation into c->out, then
 * emptied. Returns 1 when the stream ended (or failed), 0 to go on. */
static int resp_feed(struct rt_call *c)
{
    size_t off = 0;
    int rc = 0;

    while (rc == 0 && off < c->rchat.len) {
        size_t el = rt_sse_event_len(c->rchat.data + off, c->rchat.len - off);
        char event[64];
        char *data;
        size_t dlen;

        if (el == 0)
            break;
        data = malloc(el + 1);
        if (data == NULL) {
            rc = TG_ENOMEM;
            break;
        }
        rt_sse_parse(c->rchat.data + off, el, event, sizeof(event), data, el + 1, &dlen);
        do
            rc = dlen > 0 ? rt_resp_stream_chunk(c->rs, data, dlen, &c->out) : 0;
        while (rc == TG_EFULL && out_grow(c) == 0);
        free(data);
        off += el;
    }
    tg_buf_reset(&c->rchat);
    c->rchat.truncated = 0;
    if (rc != 0) {
        stream_fail(c, RT_ERR_INVALID_RESPONSE,
                    rc == TG_ETOOBIG ? "answer text (with reasoning signatures) larger than "
                                       "limits.max_response_bytes"
                    : rc == TG_ENOMEM ? "out of memory"
                                      : "upstream sent a stream event that cannot be translated",
                    1);
        return 1;
    }
    if (rt_resp_stream_errored(c->rs) && !c->stream_finalized) {
        /* an in-band upstream error ended the translated stream */
        relay_finalize(c, RT_ERR_INVALID_RESPONSE, "upstream stream error event");
        c->discard = 1;
        rt_upstream_cancel(c->env->up, c->handle);
        return 1;
    }
    return rt_resp_stream_finished(c->rs);
}

/* pump_event's work once the event is parsed: its name and its data[0, dlen). The client's
 * side is c->out, or, for a Responses stream served through chat, c->rchat (resp_feed takes it
 * from there). */
static int pump_chat(struct rt_call *c, const char *raw, size_t rl, const char *event,
                     const char *data, size_t dlen)
{
    struct tg_buf *cout = c->rs != NULL ? &c->rchat : &c->out;

    if (is_terminator(c, event, data, dlen)) {
        c->saw_terminator = 1;
        if (c->wire.api == RT_API_RESPONSES)
            responses_usage_from_event(c, data, dlen);
        /* the translator writes its closing events (usage is known by now) */
        if (c->wire.dir != RT_TRANSLATE_NONE)
            rt_translate_stream_event(&c->tr, event, data, dlen, cout);
        /* routing outcome and completion hook before the terminating event leaves */
        relay_finalize(c, RT_ERR_NONE, NULL);
        if (c->wire.dir == RT_TRANSLATE_NONE)
            tg_buf_append(cout, raw, rl);
        return 1;
    }
    if (c->wire.dir != RT_TRANSLATE_NONE) {
        int rc = dlen > 0 ? rt_translate_stream_event(&c->tr, event, data, dlen, cout) : 0;

        if (rc == TG_EPROTO || rc == TG_EFULL || cout->truncated) {
            tg_buf_reset(cout);
            cout->truncated = 0;
            stream_fail(c, RT_ERR_INVALID_RESPONSE,
                        "upstream sent a stream event that cannot be translated", 1);
            return 1;
        }
        if (c->tr.finished) {
            /* an in-band upstream error ended the translated stream */
            relay_finalize(c, RT_ERR_INVALID_RESPONSE, "upstream stream error event");
            return 1;
        }
    } else if (!(c->strip_usage_chunk && is_usage_only_chunk(data, dlen))) {
        tg_buf_append(cout, raw, rl);
    }
    return 0;
}

static int pump_data(struct rt_call *c, const char *raw, size_t rl, const char *event,
                     const char *data, size_t dlen)
{
    int stop = pump_chat(c, raw, rl, event, data, dlen);

    if (c->rs != NULL && c->rchat.len > 0 && resp_feed(c))
        return 1;
    return stop;
}

/* 1 when the provider's events go to the client as they are: no translation, no dialect, no
 * Responses stream made of chat. */
static int passed_through(const struct rt_call *c)
{
    return c->wire.dir == RT_TRANSLATE_NONE && c->wire.dialect == NULL && c->rs == NULL;
}

/* A chat event passed through as it is that neither ends the stream ([DONE]) nor carries
 * usage: every content chunk. pump_event copies it without parsing it or scanning it for
 * usage (what it would do anyway, at a fraction of the cost). */
static int plain_chunk(const struct rt_call *c, const char *raw, size_t rl)
{
    return passed_through(c) && c->wire.api == RT_API_CHAT &&
           !rt_word_at_in(raw, rl, "usage", 5, 3) && !rt_word_at_in(raw, rl, "[DONE]", 6, 1);
}

/* One OpenAI (or Anthropic) event of the wire API, raw[0, rl): usage read, passed on,
 * translated, or found to end the stream. Returns 1 when the stream ended (or failed) and the
 * pump should stop, 0 to go on. */
static int pump_event(struct rt_call *c, const char *raw, size_t rl)
{
    char small[4096];
    char *data = small;
    char event[64];
    size_t dlen;
    int stop;

    if (plain_chunk(c, raw, rl)) {
        tg_buf_append(&c->out, raw, rl);
        return 0;
    }
    if (rl >= sizeof(small)) {
        data = malloc(rl + 1); /* the data of a large event: at most the event's size */
        if (data == NULL) {
            stream_fail(c, RT_ERR_INVALID_RESPONSE, "out of memory", 1);
            return 1;
        }
    }
    if (c->sse_init)
        rt_sse_usage_feed(&c->sse, raw, rl);
    rt_sse_parse(raw, rl, event, sizeof(event), data, rl >= sizeof(small) ? rl + 1 : sizeof(small),
                 &dlen);
    stop = pump_data(c, raw, rl, event, data, dlen);
    if (data != small)
        free(data);
    return stop;
}

/* A dialect's converted events (c->conv) through pump_event, then emptied. Returns what
 * pump_event returned last (1: the stream ended). */
static int pump_converted(struct rt_call *c)
{
    size_t off = 0;
    int stop = 0;

    while (!stop && off < c->conv.len) {
        size_t el = rt_sse_event_len(c->conv.data + off, c->conv.len - off);

        if (el == 0)
            break;
        stop = pump_event(c, c->conv.data + off, el);
        off += el;
    }
    tg_buf_reset(&c->conv);
    c->conv.truncated = 0;
    return stop;
}

/* A partial event fills the raw buffer (the transfer is paused): double it, up to the event
 * cap plus one delivery. Returns 0, or -1 when the event is over the cap (or no memory). */
static int in_grow(struct rt_call *c)
{
    size_t most = event_cap(c) + RT_STREAM_RECV_BYTES;
    size_t n = c->in_cap * 2;
    char *grown;

    if (c->in_cap >= most)
        return -1;
    if (n > most)
        n = most;
    grown = realloc(c->in, n);
    if (grown == NULL)
        return -1;
    c->in = grown;
    c->in_cap = n;
    return 0;
}

/* An empty output buffer (c->out, and c->conv for a dialect) made large enough for an event of
 * rl bytes: its size passed through, twice its size plus RT_STREAM_OUT_BYTES translated or
 * converted (the output of either is the event's text re-encoded plus a bounded frame per
 * chunk). Returns 0 or TG_ENOMEM. */
static int out_fit(struct rt_call *c, size_t rl)
{
    int through = passed_through(c);
    size_t need = through ? rl : 2 * rl + RT_STREAM_OUT_BYTES;
    size_t out_need = need;

    if (c->rs != NULL) {
        /* the chat events go to c->rchat; the Responses events they become to c->out */
        out_need = 2 * need + rt_resp_stream_need(c->rs);
        if (c->rchat.cap < need) {
            tg_buf_fini(&c->rchat);
            if (tg_buf_init(&c->rchat, need) != 0)
                return TG_ENOMEM;
        }
    }
    if (c->out.cap < out_need) {
        tg_buf_fini(&c->out);
        c->out_off = 0;
        if (tg_buf_init(&c->out, out_need) != 0)
            return TG_ENOMEM;
    }
    if (c->wire.dialect != NULL && c->conv.cap < need) {
        tg_buf_fini(&c->conv);
        if (tg_buf_init(&c->conv, need) != 0)
            return TG_ENOMEM;
    }
    return 0;
}

/* The event c->in[0, rl) was handled: drop it from the raw buffer (released once empty) and
 * resume a paused transfer (whose on_data may run before this returns). */
static void in_take(struct rt_call *c, size_t rl)
{
    memmove(c->in, c->in + rl, c->in_len - rl);
    c->in_len -= rl;
    if (c->in_len == 0) {
        free(c->in);
        c->in = NULL;
        c->in_cap = 0;
    }
    if (c->paused) {
        c->paused = 0;
        rt_upstream_unpause(c->env->up, c->handle);
    }
}

/* stream_pump's work: the events handled are taken from c->in by the caller, all at once
 * (*took bytes from its start; one memmove a pass instead of one an event). */
static int pump_events(struct rt_call *c, size_t *took);

/* Move complete events from c->in to c->out, as many as fit. Returns 1 when something was
 * produced or the stream state changed. c->out is allocated here and released by the reader
 * once drained, and c->in is released once emptied: an idle stream (waiting for its
 * provider's next event) holds neither. Events are handled in place in c->in, each only when
 * the output can take it whole (passed through: room for it; translated or converted: an empty
 * output, made large enough). A dialect's events (wire.dialect) are converted to OpenAI chunks
 * first (c->conv). */
static int stream_pump(struct rt_call *c)
{
    size_t took = 0;
    int rc = pump_events(c, &took);

    if (took > 0)
        in_take(c, took);
    return rc;
}

static int pump_events(struct rt_call *c, size_t *took)
{
    const struct rt_dialect *d = c->wire.dialect;
    int through = passed_through(c);
    size_t rl;
    int done, err, stop;
    int produced = 0;

    for (;;) {
        const char *ev = c->in != NULL ? c->in + *took : NULL;
        size_t left = c->in_len - *took;

        rl = d != NULL && d->event_len != NULL ? d->event_len(ev, left)
                                               : rt_sse_event_len(ev, left);
        done = c->upstream_done;
        err = c->res_err;
        if (c->out.data == NULL && (rl > 0 || done || c->paused)) {
            /* something will be written: the output buffer is needed (c->out is reader-thread
             * state, allocated without the lock) */
            if (tg_buf_init(&c->out, RT_STREAM_OUT_BYTES) != 0) {
                /* nothing can be written to the client: end the stream (cost as known so far;
                 * the error event cannot be written either) */
                stream_fail(c, RT_ERR_INVALID_RESPONSE, "out of memory", 1);
                return 1;
            }
            continue;
        }
        if (rl == 0 && c->paused && !done && *took > 0) {
            /* room made by the events handled: taken now (the transfer resumes) */
            in_take(c, *took);
            *took = 0;
            continue;
        }
        if (rl == 0 && c->paused && !done) {
            /* part of one event fills the raw buffer: make room for the rest */
            if (in_grow(c) != 0) {
                stream_fail(c, RT_ERR_INVALID_RESPONSE,
                            c->in_cap >= event_cap(c)
                                ? "upstream stream event larger than limits.max_response_bytes"
                                : "out of memory",
                            1);
                return 1;
            }
            c->paused = 0;
            rt_upstream_unpause(c->env->up, c->handle);
            continue;
        }
        if (rl > event_cap(c)) {
            stream_fail(c, RT_ERR_INVALID_RESPONSE,
                        "upstream stream event larger than limits.max_response_bytes", 1);
            return 1;
        }
        if (rl > 0) {
            /* take the event only when its output surely fits */
            if (c->out.len > 0 && (!through || c->out.len + rl > c->out.cap))
                return produced; /* the reader drains the output first */
            if (c->out.len == 0 && out_fit(c, rl) != 0) {
                stream_fail(c, RT_ERR_INVALID_RESPONSE, "out of memory", 1);
                return 1;
            }
        }
        if (rl == 0) {
            if (!done)
                return produced;
            if (d != NULL && err == 0 && !c->saw_terminator && !c->ds.ended && c->out.len == 0) {
                /* the provider's stream ended: the dialect writes the closing chunks and
                 * [DONE] when the provider said it had finished */
                int rc = d->stream_end(&c->ds, &c->conv);

                if (rc == 0 && !c->conv.truncated && pump_converted(c))
                    return 1;
                tg_buf_reset(&c->conv);
                c->conv.truncated = 0;
            } else if (d != NULL && err == 0 && !c->saw_terminator && c->out.len > 0) {
                return produced; /* the reader drains the output first */
            }
            if (err != 0 || !c->saw_terminator) {
                int timeout = err == TG_ETIMEOUT;

                stream_fail(c, timeout ? RT_ERR_TIMEOUT : RT_ERR_INVALID_RESPONSE,
                            timeout ? "upstream stream timed out" : "upstream stream ended early",
                            0);
            }
            return 1;
        }
        produced = 1;
        if (d != NULL) {
            int rc = d->stream_event(&c->ds, ev, rl, &c->conv);

            if (rc != 0 || c->conv.truncated) {
                tg_buf_reset(&c->conv);
                c->conv.truncated = 0;
                stream_fail(c, RT_ERR_INVALID_RESPONSE,
                            "upstream sent a stream event that cannot be translated", 1);
                stop = 1;
            } else {
                stop = pump_converted(c);
            }
        } else {
            stop = pump_event(c, ev, rl);
        }
        *took += rl;
        if (stop)
            return 1;
    }
}

ssize_t relay_reader(void *cls, char *buf, size_t max)
{
    struct rt_call *c = cls;

    for (;;) {
        if (c->out_off < c->out.len) {
            size_t n = c->out.len - c->out_off;

            if (n > max)
                n = max;
            memcpy(buf, c->out.data + c->out_off, n);
            c->out_off += n;
            if (c->out_off == c->out.len) {
                tg_buf_fini(&c->out); /* drained: stream_pump allocates it again when needed */
                c->out.truncated = 0;
                c->out_off = 0;
            }
            return (ssize_t)n;
        }
        if (c->stream_finalized) {
            /* the cost is known only now: send it as a trailer */
            if (c->resp != NULL) {
                char v[40];

                hs_response_trailer(c->resp, "x-tollgate-response-cost", call_cost_text(v, c));
                c->resp = NULL;
            }
            return HS_READER_END;
        }
        if (stream_pump(c))
            continue;
        /* nothing ready: park the connection until upstream bytes arrive */
        if (c->in_len > 0 && rt_sse_event_len(c->in, c->in_len) > 0) {
            continue;
        }
        if (c->upstream_done) {
            continue;
        }
        c->suspended = 1;
        hs_suspend(c->conn);
        return 0;
    }
}

void relay_free(void *cls)
{
    call_unref(cls);
}
