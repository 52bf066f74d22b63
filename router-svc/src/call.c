/* call: one API request's life. See call.h; the stream relay is relay.c. */
#include "call.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api_error.h"
#include "call_int.h"
#include "creds.h"
#include "rt_metrics.h"
#include "tg_blocks.h"
#include "tg_err.h"
#include "tg_log.h"
#include "tg_str.h"
#include "tg_time.h"
#include "upstream.h"

/* Random bytes drawn per thread for call ids, refilled from the system generator a block at a
 * time (one generator call per RT_CALL_ID_POOL_BYTES / 10 requests instead of one each). */
#define RT_CALL_ID_POOL_BYTES 1280

static const struct rt_upstream_ops call_ops;

static const char *const fm_names[FM_N] = {
    "model", "stream", "stream_options", "disable_fallbacks", "user", "metadata"};

/* ------------------------------------------------------------------ call lifetime */

void call_unref(struct rt_call *c)
{
    if (--c->refs > 0)
        return;
    json_decref(c->req);
    rt_keys_release(&c->keys);
    free(c->body);
    free(c->res_body);
    free(c->in);
    if (c->out.data != NULL)
        tg_buf_fini(&c->out);
    if (c->conv.data != NULL)
        tg_buf_fini(&c->conv);
    if (c->rchat.data != NULL)
        tg_buf_fini(&c->rchat);
    rt_resp_stream_destroy(&c->rs);
    if (c->sse_init)
        rt_sse_usage_fini(&c->sse);
    tg_blocks_put(TG_BLOCK_CALL, c, sizeof(*c));
}

/* Call id: a UUIDv7 (48-bit epoch ms, version 7, variant 10, 74 random bits) as
 * tg_uuid_v7 makes it. Returns 0 or TG_EIO. HTTP threads. */
static int call_id_make(uint64_t epoch_ms, char out[TG_UUID_STR_LEN + 1])
{
    static __thread unsigned char pool[RT_CALL_ID_POOL_BYTES];
    static __thread size_t used = RT_CALL_ID_POOL_BYTES;
    static const char hexd[] = "0123456789abcdef";
    unsigned char b[16];
    size_t o = 0;

    if (used + 10 > sizeof(pool)) {
        if (tg_random_bytes(pool, sizeof(pool)) != 0)
            return TG_EIO;
        used = 0;
    }
    memcpy(b + 6, pool + used, 10);
    memset(pool + used, 0, 10); /* a byte is handed out once */
    used += 10;
    for (int i = 0; i < 6; i++)
        b[i] = (unsigned char)(epoch_ms >> (8 * (5 - i)));
    b[6] = (unsigned char)((b[6] & 0x0f) | 0x70);
    b[8] = (unsigned char)((b[8] & 0x3f) | 0x80);
    for (int i = 0; i < 16; i++) {
        if (i == 4 || i == 6 || i == 8 || i == 10)
            out[o++] = '-';
        out[o++] = hexd[b[i] >> 4];
        out[o++] = hexd[b[i] & 15];
    }
    out[o] = '\0';
    return 0;
}

struct rt_call *rt_call_create(const struct rt_call_env *env, struct hs_conn *conn, enum rt_api api,
                               const char *endpoint, int anthropic, struct rt_keys_table *keys,
                               const struct rt_key *key)
{
    struct rt_call *c = tg_blocks_get(TG_BLOCK_CALL, sizeof(*c));

    if (c == NULL) {
        rt_keys_release(&keys);
        return NULL;
    }
    memset(c, 0, RT_CALL_ZEROED_BYTES); /* (plan, tr and ds: see struct rt_call) */
#ifndef NDEBUG
    /* debug builds (the tests'): what is not zeroed is garbage, so that a read before its set
     * cannot pass for a zeroed field */
    memset((char *)c + RT_CALL_ZEROED_BYTES, 0xA5, sizeof(*c) - RT_CALL_ZEROED_BYTES);
#endif
    c->kind = RT_REQ_CALL;
    c->env = env;
    c->conn = conn;
    c->refs = 1; /* the connection's: dropped by rt_call_completed */
    c->api = api;
    c->endpoint = endpoint;
    c->anthropic_shape = anthropic;
    c->count_tokens = strcmp(endpoint, RT_COUNT_TOKENS_ENDPOINT) == 0;
    c->keys = keys;
    c->key = key;
    c->t_start_us = tg_now_mono_us();
    c->ts_start_ms = (int64_t)tg_now_epoch_ms();
    if (call_id_make((uint64_t)c->ts_start_ms, c->call_id) != 0)
        snprintf(c->call_id, sizeof(c->call_id), "00000000-0000-7000-8000-000000000000");
    return c;
}

/* Decimal digits of v at b (NUL-terminated), then frac_digits digits of frac after a point
 * when frac_digits > 0. Returns b. Header values on every response: printf's cost shows. */
static char *fmt_dec(char *b, uint64_t v, uint64_t frac, int frac_digits)
{
    char t[24];
    int n = 0, o = 0;

    do {
        t[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v > 0);
    while (n > 0)
        b[o++] = t[--n];
    if (frac_digits > 0) {
        b[o++] = '.';
        for (int i = frac_digits - 1; i >= 0; i--) {
            b[o + i] = (char)('0' + frac % 10);
            frac /= 10;
        }
        o += frac_digits;
    }
    b[o] = '\0';
    return b;
}

/* Cost in USD with nine decimals, for the header and a stream's trailer; "unknown" when tokens
 * were used at a deployment without a price. Returns v. */
char *call_cost_text(char v[40], const struct rt_call *c)
{
    int64_t nusd = c->cost_nusd;

    if (c->price_unknown) {
        memcpy(v, "unknown", 8);
        return v;
    }
    if (nusd < 0)
        nusd = 0;
    return fmt_dec(v, (uint64_t)nusd / 1000000000u, (uint64_t)nusd % 1000000000u, 9);
}

void call_price(struct rt_call *c)
{
    const struct rt_deployment_conf *d = c->target.dep;

    if (d == NULL)
        return;
    c->cost_nusd = rt_usage_cost_nusd(d, &c->usage);
    c->price_unknown = !d->priced && (c->usage.prompt_tokens > 0 || c->usage.completion_tokens > 0);
}

static void add_cost_header(struct hs_response *r, const struct rt_call *c)
{
    char v[40];

    HS_RESPONSE_HEADER(r, "x-tollgate-response-cost", call_cost_text(v, c));
}

void call_add_headers(struct rt_call *c, struct hs_response *r, const struct rt_outcome *o,
                      int with_cost)
{
    char v[64];
    /* a final answer's headers come right after call_complete: its reading serves (a stream's
     * come before, and read the clock) */
    uint64_t now = c->t_done_us != 0 ? c->t_done_us : tg_now_mono_us();
    uint64_t total = now - c->t_start_us;
    uint64_t over = total > c->upstream_us ? total - c->upstream_us : 0;

    HS_RESPONSE_HEADER(r, "x-tollgate-call-id", c->call_id);
    if (atomic_load(c->env->quiesced))
        hs_response_header(r, "Connection", "close");
    if (o != NULL && o->model_group[0] != '\0')
        HS_RESPONSE_HEADER(r, "x-tollgate-model-group", o->model_group);
    HS_RESPONSE_HEADER(r, "x-tollgate-attempts",
                       fmt_dec(v, c->plan_begun ? rt_router_attempts(&c->plan) : 0u, 0, 0));
    HS_RESPONSE_HEADER(r, "x-tollgate-fallbacks",
                       fmt_dec(v, c->plan_begun ? rt_router_fallbacks(&c->plan) : 0u, 0, 0));
    if (with_cost)
        add_cost_header(r, c);
    /* microseconds as milliseconds with three decimals */
    HS_RESPONSE_HEADER(r, "x-tollgate-overhead-ms", fmt_dec(v, over / 1000u, over % 1000u, 3));
    rt_metrics_overhead(c->env->metrics, (double)over / 1e6);
    if (o != NULL && o->retry_after_s > 0)
        HS_RESPONSE_HEADER(r, "retry-after", fmt_dec(v, o->retry_after_s, 0, 0));
}

static int queue_body_len(struct hs_conn *conn, int status, char *body, size_t len,
                          const char *ctype, struct rt_call *c, const struct rt_outcome *o,
                          int with_cost)
{
    struct hs_response *r = hs_response_buffer(body, len); /* takes body */

    if (r == NULL)
        return HS_NO;
    HS_RESPONSE_HEADER(r, "Content-Type", ctype);
    if (c != NULL)
        call_add_headers(c, r, o, with_cost);
    return hs_respond(conn, status, r);
}

static int queue_body(struct hs_conn *conn, int status, char *body, const char *ctype,
                      struct rt_call *c, const struct rt_outcome *o, int with_cost)
{
    return queue_body_len(conn, status, body, strlen(body), ctype, c, o, with_cost);
}

int64_t call_elapsed_ms(const struct rt_call *c)
{
    return (int64_t)((tg_now_mono_us() - c->t_start_us) / 1000);
}

/* Build the event and hand it to on_complete; once per request. status/err_class override the
 * plan's when given (requests refused before routing, client gone). The event (about 3 KiB) lives
 * on this frame only: nothing of it is held while a request is in flight. */
void call_complete(struct rt_call *c, int status, const char *err_class)
{
    const struct rt_call_env *e = c->env;
    struct proto_event evs;
    struct proto_event *ev = &evs;
    const struct rt_outcome *o = c->plan_begun ? rt_router_outcome(&c->plan) : NULL;
    uint64_t took_us;
    json_t *user;

    if (c->event_done)
        return;
    c->event_done = 1;
    proto_event_init(ev);
    if (c->plan_begun) {
        rt_router_finish(e->router, &c->plan,
                         (uint64_t)(c->usage.prompt_tokens + c->usage.completion_tokens),
                         tg_loop_mono_ms());
        rt_router_fill_event(e->router, &c->plan, ev);
    } else if (c->key != NULL) {
        proto_str_set(ev->key_hash, sizeof(ev->key_hash), c->key->hash);
        proto_str_set(ev->key_alias, sizeof(ev->key_alias), c->key->key_alias);
        proto_str_set(ev->team_id, sizeof(ev->team_id), c->key->team_id);
        proto_str_set(ev->user_id, sizeof(ev->user_id), c->key->user_id);
    }
    proto_str_set(ev->call_id, sizeof(ev->call_id), c->call_id);
    proto_str_set(ev->endpoint, sizeof(ev->endpoint), c->endpoint);
    if (ev->model_requested[0] == '\0')
        proto_str_set(ev->model_requested, sizeof(ev->model_requested), c->model_requested);
    ev->kind = PROTO_KIND_REQUEST;
    ev->stream = c->stream;
    /* one clock read for the call's end: its latency, the duration in the metrics, and the wall
     * clock at the end (the start's plus the latency: no second read, and a step of the wall
     * clock during the call does not make the two disagree) */
    c->t_done_us = tg_now_mono_us();
    took_us = c->t_done_us - c->t_start_us;
    ev->ts_start_ms = c->ts_start_ms;
    ev->latency_ms = (int64_t)(took_us / 1000);
    ev->ts_end_ms = c->ts_start_ms + ev->latency_ms;
    ev->ttft_ms = c->ttft_ms;
    ev->prompt_tokens = c->usage.prompt_tokens;
    ev->completion_tokens = c->usage.completion_tokens;
    ev->cost_nusd = c->cost_nusd;
    ev->cache_read_tokens = c->usage.cache_read_tokens;
    ev->cache_creation_tokens = c->usage.cache_creation_tokens;
    ev->reasoning_tokens = c->usage.reasoning_tokens;
    ev->price_unknown = c->price_unknown;
    if (c->price_unknown && c->target.dep != NULL)
        rt_metrics_unpriced(e->metrics, c->target.dep->id);
    if (status > 0)
        ev->status = status;
    else if (o != NULL && ev->status == 0)
        ev->status = o->status;
    if (err_class != NULL)
        proto_str_set(ev->error_class, sizeof(ev->error_class), err_class);
    if (c->raw) {
        if (c->end_user != NULL) {
            /* longer than the field is cut by proto_str_set anyway */
            char tmp[sizeof(ev->end_user) + 8];
            size_t n = c->end_user_len < sizeof(tmp) - 1 ? c->end_user_len : sizeof(tmp) - 1;

            memcpy(tmp, c->end_user, n);
            tmp[n] = '\0';
            proto_str_set(ev->end_user, sizeof(ev->end_user), tmp);
        }
    } else {
        user = c->req != NULL ? json_object_get(c->req, "user") : NULL;
        if (!json_is_string(user) && c->req != NULL)
            user = json_object_get(json_object_get(c->req, "metadata"), "user_id");
        if (json_is_string(user))
            proto_str_set(ev->end_user, sizeof(ev->end_user), json_string_value(user));
    }
    if (c->traceparent[0] != '\0') {
        char tid[33];

        memcpy(tid, c->traceparent + 3, 32);
        tid[32] = '\0';
        proto_str_set(ev->trace_id, sizeof(ev->trace_id), tid);
    }
    rt_metrics_request(e->metrics, ev->model_group, ev->status, (double)took_us / 1e6);
    rt_metrics_event(e->metrics, ev);
    rt_metrics_completed_hook(e->metrics);
    if (e->on_complete != NULL) {
        e->on_complete(ev, e->on_complete_ud);
        /* the event is in the spool at the end of this loop turn: the response's bytes after */
        if (e->hold_after_complete && c->conn != NULL)
            hs_hold(c->conn);
    }
}

/* Router-made or pre-routing error: queue it and complete the call. */
int call_answer_error(struct rt_call *c, int status, const char *code, const char *message,
                      const struct rt_outcome *o)
{
    char *body = rt_api_error_body(c->env->mask, c->anthropic_shape, status, code, message);
    int ret;

    c->phase = PH_FINAL;
    call_complete(c, status, code);
    ret = queue_body(c->conn, status, body, "application/json", c, o, 1);
    return ret;
}

/* End the connection's suspension, if it is suspended by us and still there (rt_call_completed
 * clears conn). Loop thread. */
void call_resume(struct rt_call *c)
{
    if (c->suspended && c->conn != NULL) {
        c->suspended = 0;
        hs_resume(c->conn);
    }
}

static size_t call_on_data(void *ud, const char *p, size_t n)
{
    struct rt_call *c = ud;
    size_t ret = n;

    if (c->in == NULL && !c->client_gone && !c->discard) {
        /* held only while bytes wait for the reader (released once it took them all) */
        c->in = malloc(RT_STREAM_IN_BYTES);
        c->in_cap = RT_STREAM_IN_BYTES;
        if (c->in == NULL)
            c->discard = 1; /* out of memory: the transfer fails like a broken connection */
    }
    if (c->client_gone || c->discard) {
        ret = 0; /* aborts the transfer */
    } else if (c->in_len + n > c->in_cap) {
        /* full: the buffer holds a whole event, which the reader takes, or part of one, for
         * which it grows the buffer (or fails the stream); then it unpauses. It may be parked
         * waiting for bytes, so wake it */
        c->paused = 1;
        ret = RT_UPSTREAM_PAUSE;
        call_resume(c);
    } else {
        memcpy(c->in + c->in_len, p, n);
        c->in_len += n;
        if (c->phase == PH_WAIT) {
            c->phase = PH_STREAM_READY;
            c->res_ttfb_us = tg_now_mono_us() - c->attempt_start_us;
        }
        call_resume(c);
    }
    return ret;
}

static void call_on_done(void *ud, struct rt_upstream_result *res)
{
    struct rt_call *c = ud;

    c->xfer_active = 0;
    c->res_err = res->err;
    c->res_status = res->status;
    c->res_retry_after_s = res->retry_after_s;
    if (c->res_ttfb_us == 0)
        c->res_ttfb_us = res->ttfb_us;
    tg_strcpy_cap(c->res_detail, sizeof(c->res_detail), res->detail);
    free(c->res_body);
    c->res_body = res->body; /* taken */
    c->res_body_len = res->body_len;
    res->body = NULL;
    if (c->phase == PH_WAIT)
        c->phase = PH_ATTEMPT_DONE;
    else
        c->upstream_done = 1;
    call_resume(c);
    call_unref(c);
}

static const struct rt_upstream_ops call_ops = {call_on_data, call_on_done};

/* JSON string literal of s (quotes included) into out; returns its length, or 0 when it does
 * not fit in cap. */
static size_t json_quote(const char *s, char *out, size_t cap)
{
    static const char hex[] = "0123456789abcdef";
    size_t n = 0;

    if (cap < 2)
        return 0;
    out[n++] = '"';
    for (; *s != '\0'; s++) {
        unsigned char ch = (unsigned char)*s;

        if (n + 7 > cap)
            return 0;
        if (ch == '"' || ch == '\\') {
            out[n++] = '\\';
            out[n++] = (char)ch;
        } else if (ch < 0x20) {
            memcpy(out + n, "\\u00", 4);
            out[n + 4] = hex[ch >> 4];
            out[n + 5] = hex[ch & 15];
            n += 6;
        } else {
            out[n++] = (char)ch;
        }
    }
    if (n + 1 > cap)
        return 0;
    out[n++] = '"';
    return n;
}

struct splice_edit {
    size_t off, len;  /* span of body replaced (len 0: insertion at off) */
    const char *with; /* replacement bytes */
    size_t with_len;
};

/* Raw-mode body: the client's bytes with the model value (and, when we ask for usage, the
 * stream_options value) replaced; nothing else changes. c->body is only read. Returns new
 * malloc'd NUL-terminated text and its length, or NULL. */
static char *raw_attempt_body(const struct rt_call *c, const char *model, int add_usage,
                              size_t *out_len)
{
    static const char usage_obj[] = "{\"include_usage\":true}";
    static const char usage_member[] = ",\"stream_options\":{\"include_usage\":true}";
    char quoted[RT_NAME_CAP * 6 + 2];
    struct splice_edit e[3];
    size_t ne = 0, total, pos = 0, w = 0;
    char *out;

    e[ne].with_len = json_quote(model, quoted, sizeof(quoted));
    if (e[ne].with_len == 0 || c->fm[FM_MODEL].val_len == 0)
        return NULL;
    e[ne].off = c->fm[FM_MODEL].val_off;
    e[ne].len = c->fm[FM_MODEL].val_len;
    e[ne].with = quoted;
    ne++;
    if (add_usage) {
        if (c->fm[FM_STREAM_OPTIONS].val_len > 0) {
            e[ne].off = c->fm[FM_STREAM_OPTIONS].val_off;
            e[ne].len = c->fm[FM_STREAM_OPTIONS].val_len;
            e[ne].with = usage_obj;
            e[ne].with_len = sizeof(usage_obj) - 1;
        } else {
            /* "model" is a member, so the object is not empty: append one member */
            e[ne].off = c->body_close;
            e[ne].len = 0;
            e[ne].with = usage_member;
            e[ne].with_len = sizeof(usage_member) - 1;
        }
        ne++;
    }
    if (c->fm[FM_DISABLE_FALLBACKS].val_len > 0) {
        /* disable_fallbacks is the gateway's parameter: providers reject unknown ones (400).
         * Remove the member with the comma before it (or, when it is the first member, the
         * comma after it) so that the object stays valid. */
        size_t start = c->fm[FM_DISABLE_FALLBACKS].key_off;
        size_t end = c->fm[FM_DISABLE_FALLBACKS].val_off + c->fm[FM_DISABLE_FALLBACKS].val_len;
        size_t k = start;

        while (k > 0 && strchr(" \t\r\n", c->body[k - 1]) != NULL)
            k--;
        if (k > 0 && c->body[k - 1] == ',') {
            start = k - 1;
        } else {
            k = end;
            while (k < c->body_len && strchr(" \t\r\n", c->body[k]) != NULL)
                k++;
            if (k < c->body_len && c->body[k] == ',')
                end = k + 1;
        }
        e[ne].off = start;
        e[ne].len = end - start;
        e[ne].with = "";
        e[ne].with_len = 0;
        ne++;
    }
    /* edits in body order (they never overlap: distinct members) */
    for (size_t i = 1; i < ne; i++) {
        for (size_t k2 = i; k2 > 0 && e[k2].off < e[k2 - 1].off; k2--) {
            struct splice_edit t = e[k2];

            e[k2] = e[k2 - 1];
            e[k2 - 1] = t;
        }
    }
    total = c->body_len;
    for (size_t i = 0; i < ne; i++)
        total = total - e[i].len + e[i].with_len;
    out = malloc(total + 1);
    if (out == NULL)
        return NULL;
    for (size_t i = 0; i < ne; i++) {
        memcpy(out + w, c->body + pos, e[i].off - pos);
        w += e[i].off - pos;
        memcpy(out + w, e[i].with, e[i].with_len);
        w += e[i].with_len;
        pos = e[i].off + e[i].len;
    }
    memcpy(out + w, c->body + pos, c->body_len - pos);
    w += c->body_len - pos;
    out[w] = '\0';
    *out_len = w;
    return out;
}

/* Body for one attempt from the pristine request: the client's body with only "model" swapped
 * (raw mode: spliced into a copy of the bytes; else a shallow copy of the parsed request), or the
 * translation the provider's wire chose. c->wire must be set. Returns new malloc'd JSON and its
 * length, or NULL with msg. */
static char *attempt_body(struct rt_call *c, const struct rt_deployment_conf *dep, char *msg,
                          size_t msgcap, size_t *out_len)
{
    enum rt_translate_dir dir = c->wire.dir;
    const struct rt_dialect *dialect = c->wire.dialect;
    const json_t *src;
    json_t *chat = NULL;
    json_t *j = NULL;
    char *s;

    if (c->raw && dir == RT_TRANSLATE_NONE && dialect == NULL && dep->prov->edit_body == NULL &&
        !c->wire.responses) {
        int add_usage = c->stream && c->wire.api == RT_API_CHAT && !c->include_usage;

        c->strip_usage_chunk = add_usage;
        s = raw_attempt_body(c, dep->model, add_usage, out_len);
        if (s == NULL)
            snprintf(msg, msgcap, "cannot encode the upstream request");
        return s;
    }
    if (c->raw && c->req == NULL) {
        /* a translation works on the parsed request: parsed once, never changed afterwards */
        json_error_t jerr;

        c->req = rt_json_load_bounded(c->body, c->body_len, c->env->cfg->max_json_depth,
                                      c->env->cfg->max_json_elements, &jerr);
        if (c->req == NULL) {
            snprintf(msg, msgcap, "cannot parse the request: %s", jerr.text);
            return NULL;
        }
    }
    src = c->req;
    if (c->wire.responses) {
        /* a Responses request goes on as a chat request (then as a chat request would) */
        chat = rt_translate_responses_to_chat(c->req, dep->model, msg, msgcap);
        if (chat == NULL)
            return NULL;
        src = chat;
    }
    if (dir == RT_TRANSLATE_MESSAGES_TO_CHAT)
        j = rt_translate_chat_to_messages(src, dep->model, msg, msgcap);
    else if (dir == RT_TRANSLATE_CHAT_TO_MESSAGES)
        j = rt_translate_messages_to_chat_opts(src, dep->model,
                                               dialect != NULL ? RT_TRANSLATE_TOOL_MEDIA |
                                                                     RT_TRANSLATE_THINKING_BLOCKS
                                                               : 0,
                                               msg, msgcap);
    else
        j = json_copy((json_t *)src);
    json_decref(chat);
    if (j == NULL)
        return NULL;
    /* the copy is shallow: setting "model" replaces one member of the copy only */
    json_object_set_new(j, "model", json_string(dep->model));
    /* disable_fallbacks is the gateway's parameter: providers reject unknown ones (400) */
    json_object_del(j, "disable_fallbacks");
    c->strip_usage_chunk = 0;
    if (dialect != NULL) {
        /* OpenAI chat (or embeddings) in the provider's own dialect; its stream always ends
         * with a usage chunk, forwarded only when the client asked for one */
        json_t *pb =
            c->wire.api == RT_API_EMBEDDINGS
                ? (dialect->embed_request != NULL ? dialect->embed_request(j, dep, msg, msgcap)
                                                  : NULL)
                : dialect->request(j, dep, c->stream, msg, msgcap);

        if (pb == NULL && c->wire.api == RT_API_EMBEDDINGS && dialect->embed_request == NULL)
            snprintf(msg, msgcap, "deployment %s (%s) does not serve embeddings", dep->id,
                     dep->prov->name);
        json_decref(j);
        if (pb == NULL)
            return NULL;
        j = pb;
        c->strip_usage_chunk =
            c->stream && dir == RT_TRANSLATE_NONE && !c->include_usage && !c->wire.responses;
        goto dump;
    }
    if (dep->prov->edit_body != NULL && dep->prov->edit_body(j, dep, c->stream, msg, msgcap) != 0) {
        json_decref(j);
        return NULL;
    }
    if (c->stream && c->wire.api == RT_API_CHAT && dir == RT_TRANSLATE_NONE &&
        !c->wire.responses && /* the translated request asks for the usage chunk itself */
        !json_is_true(
            json_object_get(json_object_get(c->req, "stream_options"), "include_usage"))) {
        /* the one addition to the client's body: without it an OpenAI stream carries no usage
         * and the call could not be billed; the extra usage chunk is not forwarded */
        json_object_set_new(j, "stream_options", json_pack("{s:b}", "include_usage", 1));
        c->strip_usage_chunk = 1;
    }
dump:
    s = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    if (s == NULL)
        snprintf(msg, msgcap, "cannot encode the upstream request");
    else
        *out_len = strlen(s);
    return s;
}

/* Start the attempt for c->target. Returns 0 (submitted), TG_EINVAL with msg (this deployment
 * cannot take the request: a client error), or another negative code with msg. */
static int attempt_start(struct rt_call *c, char *msg, size_t msgcap)
{
    const struct rt_deployment_conf *dep = c->target.dep;
    const struct rt_provider *prov = dep->prov;
    struct rt_upstream_request req;
    struct rt_provider_attempt pa;
    char url[RT_PROVIDER_URL_CAP];
    char hdr[RT_PROVIDER_HEADERS_MAX][RT_PROVIDER_HEADER_CAP];
    char why[RT_CREDS_ERR_CAP] = "";
    char accept[96];
    char *tok = NULL;
    char tp[96];
    int nh = 0, np;
    int rc;

    memset(&req, 0, sizeof(req));
    memset(&c->wire, 0, sizeof(c->wire));
    if (prov->wire(dep, c->api, &c->wire) != 0) {
        snprintf(msg, msgcap, "deployment %s (%s) does not serve %s", dep->id, prov->name,
                 c->endpoint);
        return TG_EINVAL;
    }
    req.body = attempt_body(c, dep, msg, msgcap, &req.body_len);
    if (req.body == NULL)
        return TG_EINVAL;
    memset(&pa, 0, sizeof(pa));
    pa.dep = dep;
    pa.wire = c->wire.api;
    pa.stream = c->stream;
    pa.body = req.body;
    pa.body_len = req.body_len;
    /* the wall clock's second for signing, from the call's start and the loop's clock (no read:
     * the loop's clock is never behind the start, read on this thread) */
    pa.now_s = (c->ts_start_ms + (int64_t)((tg_loop_mono_us() - c->t_start_us) / 1000)) / 1000;
    pa.anthropic_beta = c->anthropic_beta;
    pa.anthropic_version = c->anthropic_version;
    pa.count_tokens = c->count_tokens;
    if (rt_provider_needs_token(dep)) {
        /* a copy of the current token; the refresher never makes a request wait for one */
        tok = malloc(RT_TOKEN_CAP);
        if (tok == NULL || rt_creds_token(c->env->creds, (uint32_t)(dep - c->env->cfg->deployments),
                                          tok, RT_TOKEN_CAP, why, sizeof(why)) == 0)
            pa.token = tok;
    }
    prov->url(&pa, url, sizeof(url));
    req.url = url;
    req.tls_no_verify = !dep->ssl_verify;
    req.ca_file = dep->ssl_ca_file;
    np = prov->headers(&pa, url, hdr);
    if (tok != NULL) {
        memset(tok, 0, RT_TOKEN_CAP);
        free(tok);
    }
    if (np < 0) {
        free(req.body);
        memset(hdr, 0, sizeof(hdr));
        snprintf(msg, msgcap, "deployment %s (%s): no valid token from its token endpoint: %s",
                 dep->id, prov->name, why[0] != '\0' ? why : "out of memory");
        return TG_EAGAIN;
    }
    for (int i = 0; i < np && nh < RT_UPSTREAM_HEADERS_MAX; i++)
        req.headers[nh++] = hdr[i];
    if (c->stream && nh < RT_UPSTREAM_HEADERS_MAX) {
        const struct rt_dialect *d = c->wire.dialect;

        if (d != NULL && d->stream_accept != NULL) {
            snprintf(accept, sizeof(accept), "Accept: %s", d->stream_accept);
            req.headers[nh++] = accept;
        } else {
            req.headers[nh++] = "Accept: text/event-stream";
        }
    }
    if (c->traceparent[0] != '\0' && nh < RT_UPSTREAM_HEADERS_MAX) {
        snprintf(tp, sizeof(tp), "traceparent: %s", c->traceparent);
        req.headers[nh++] = tp;
    }
    req.stream = c->stream;
    req.recv_buffer_bytes = c->stream ? RT_STREAM_RECV_BYTES : 0;
    req.timeout_ms = c->stream ? dep->stream_timeout_ms : dep->timeout_ms;
    req.idle_timeout_ms = dep->stream_timeout_ms;
    req.max_response_bytes = c->env->cfg->max_response_bytes > 0
                                 ? (size_t)c->env->cfg->max_response_bytes
                                 : (size_t)RT_DEFAULT_MAX_RESPONSE_BYTES;
    c->phase = PH_WAIT;
    c->res_err = 0;
    c->res_status = 0;
    free(c->res_body);
    c->res_body = NULL;
    c->res_body_len = 0;
    c->res_retry_after_s = -1;
    c->res_ttfb_us = 0;
    c->res_detail[0] = '\0';
    c->in_len = 0;
    c->discard = 0; /* set only by a failure that ends the call, or by on_data's out of memory */
    c->upstream_done = 0;
    c->paused = 0;
    c->xfer_active = 1;
    c->refs++; /* the transfer's reference, dropped in on_done */
    c->attempt_start_us = tg_now_mono_us();
    rc = rt_upstream_submit(c->env->up, &req, &call_ops, c, &c->handle);
    for (int i = 0; i < np; i++) /* copied by the upstream; they held secrets: the bytes used */
        explicit_bzero(hdr[i], strnlen(hdr[i], sizeof(hdr[i])));
    if (rc != 0) {
        c->xfer_active = 0;
        c->phase = PH_BODY;
        c->refs--;
        snprintf(msg, msgcap, "%s",
                 rc == TG_EFULL ? "upstream capacity reached" : "router is shutting down");
    }
    return rc;
}

/* Upstream error text for the trail: the provider's error.message when it sent one, else a
 * generic line. Masked later by the router/trail and by error_body. */
static void upstream_message(const struct rt_call *c, char *out, size_t cap)
{
    json_t *j;
    json_t *m;

    if (c->res_err != 0) {
        snprintf(out, cap, "%s", c->res_detail);
        return;
    }
    if (c->res_body != NULL && c->res_body_len > 0) {
        json_error_t jerr;

        j = rt_json_load_bounded(c->res_body, c->res_body_len, RT_JSON_ANSWER_MAX_DEPTH,
                                 RT_JSON_ANSWER_MAX_ELEMENTS, &jerr);
        m = json_object_get(json_object_get(j, "error"), "message");
        if (!json_is_string(m))
            m = json_object_get(j, "message"); /* AWS's shape: {"message": ...} */
        if (json_is_string(m)) {
            snprintf(out, cap, "%s", json_string_value(m));
            json_decref(j);
            return;
        }
        json_decref(j);
    }
    snprintf(out, cap, "upstream returned HTTP %ld", c->res_status);
}

/* Final response for a served non-stream call: the provider's body (translated when needed). */
static int answer_success(struct rt_call *c, const struct rt_outcome *o)
{
    char *body = c->res_body;
    size_t len = c->res_body_len;
    json_t *j = NULL;
    json_t *t = NULL;

    c->res_body = NULL;
    if (c->wire.dir != RT_TRANSLATE_NONE || c->wire.responses) {
        json_error_t jerr;

        j = rt_json_load_bounded(body, c->res_body_len, RT_JSON_ANSWER_MAX_DEPTH,
                                 RT_JSON_ANSWER_MAX_ELEMENTS, &jerr);
        if (c->wire.dir == RT_TRANSLATE_CHAT_TO_MESSAGES)
            t = rt_translate_chat_resp_to_messages(j, c->model_requested);
        else if (c->wire.dir == RT_TRANSLATE_MESSAGES_TO_CHAT)
            t = rt_translate_messages_resp_to_chat(j, c->model_requested,
                                                   rt_translate_flags(c->req, c->wire.dir));
        else
            t = json_incref(j);
        if (c->wire.responses) {
            /* the chat answer as a Responses one */
            json_t *r = rt_translate_chat_resp_to_responses(t, c->req, c->model_requested);

            json_decref(t);
            t = r;
        }
        free(body);
        body = t != NULL ? json_dumps(t, JSON_COMPACT) : NULL;
        json_decref(t);
        json_decref(j);
        if (body == NULL)
            body = strdup("{}");
        len = strlen(body);
    }
    c->phase = PH_FINAL;
    call_complete(c, 200, NULL);
    return queue_body_len(c->conn, 200, body, len, "application/json", c, o, 1);
}

/* The final answer from the router's outcome: the served provider's answer, or the outcome's
 * status (the router's, the one place an outcome becomes a status) in the API's error shape. */
static int answer_outcome(struct rt_call *c)
{
    const struct rt_outcome *o = rt_router_outcome(&c->plan);

    if (o->served)
        return answer_success(c, o);
    return call_answer_error(c, o->status, o->error_class,
                             o->message[0] ? o->message : "upstream error", o);
}

/* A dialect's answer converted in place: c->res_body becomes the OpenAI chat completion (or
 * embeddings list) the rest of the call reads. Returns 0, or -1 with msg. */
static int dialect_answer(struct rt_call *c, char *msg, size_t cap)
{
    const struct rt_dialect *d = c->wire.dialect;
    json_error_t jerr;
    json_t *j, *t = NULL;
    char why[160] = "";
    char *s = NULL;

    j = rt_json_load_bounded(c->res_body != NULL ? c->res_body : "", c->res_body_len,
                             RT_JSON_ANSWER_MAX_DEPTH, RT_JSON_ANSWER_MAX_ELEMENTS, &jerr);
    if (j != NULL)
        t = c->wire.api == RT_API_EMBEDDINGS
                ? (d->embed_response != NULL
                       ? d->embed_response(j, c->model_requested, why, sizeof(why))
                       : NULL)
                : d->response(j, c->model_requested, why, sizeof(why));
    if (t != NULL && c->wire.api == RT_API_EMBEDDINGS && c->req != NULL) {
        const char *fmt = json_string_value(json_object_get(c->req, "encoding_format"));

        /* the provider gives numbers; the client asked for OpenAI's base64 form */
        if (fmt != NULL && strcmp(fmt, "base64") == 0 && rt_dialect_embeddings_base64(t) != 0) {
            json_decref(t);
            t = NULL;
        }
    }
    if (t != NULL)
        s = json_dumps(t, JSON_COMPACT);
    json_decref(t);
    json_decref(j);
    if (s == NULL) {
        snprintf(msg, cap, "upstream answer cannot be translated (%zu bytes)%s%s", c->res_body_len,
                 why[0] != '\0' ? ": " : "", why);
        return -1;
    }
    free(c->res_body);
    c->res_body = s;
    c->res_body_len = strlen(s);
    return 0;
}

/* The class of a finished attempt, and the message for the trail in msg. */
static enum rt_error_class attempt_class(struct rt_call *c, char *msg, size_t cap)
{
    enum rt_error_class ec;

    msg[0] = '\0';
    if (c->res_err == TG_ETIMEOUT)
        ec = RT_ERR_TIMEOUT;
    else if (c->res_err == TG_ETOOBIG)
        ec = RT_ERR_INVALID_RESPONSE;
    else if (c->res_err != 0)
        ec = RT_ERR_CONNECT;
    else if (c->target.dep->prov->classify != NULL)
        ec = c->target.dep->prov->classify((int)c->res_status, c->res_body, c->res_body_len);
    else
        ec = rt_router_classify((int)c->res_status, c->res_body, c->res_body_len);
    if (ec == RT_ERR_NONE && !c->stream && c->wire.dialect != NULL &&
        dialect_answer(c, msg, cap) != 0)
        return RT_ERR_INVALID_RESPONSE;
    if (ec == RT_ERR_NONE && !c->stream) {
        if (rt_usage_from_json(c->wire.api, c->res_body, c->res_body_len, &c->usage) != 0) {
            snprintf(msg, cap, "upstream returned a body that is not JSON (%zu bytes)",
                     c->res_body_len);
            return RT_ERR_INVALID_RESPONSE;
        }
        if (c->count_tokens)
            memset(&c->usage, 0, sizeof(c->usage)); /* a count, not a use: free */
        call_price(c);
    } else if (ec == RT_ERR_NONE) {
        snprintf(msg, cap, "upstream stream ended without data"); /* a 2xx stream, no byte */
        return RT_ERR_INVALID_RESPONSE;
    } else {
        upstream_message(c, msg, cap);
    }
    return ec;
}

/* The first bytes of a 2xx stream arrived: the client's stream starts. */
static int stream_start(struct rt_call *c)
{
    const struct rt_call_env *e = c->env;
    struct rt_outcome view = *rt_router_outcome(&c->plan);
    struct hs_response *r;

    c->upstream_us += c->res_ttfb_us;
    c->ttft_ms = call_elapsed_ms(c);
    snprintf(view.model_group, sizeof(view.model_group), "%s", c->target.group);
    rt_metrics_attempt(e->metrics, c->key, c->target.dep->id, (int)c->res_status, RT_ERR_NONE);
    if (relay_begin(c) != 0) {
        /* nothing was sent yet: stop the transfer and answer like any failure */
        c->discard = 1;
        rt_upstream_cancel(e->up, c->handle);
        return call_answer_error(c, 503, "unavailable", "out of memory", NULL);
    }
    c->phase = PH_STREAMING;
    c->refs++; /* the response's reference */
    r = hs_response_reader(relay_reader, c, relay_free);
    if (r == NULL) {
        call_unref(c);
        return HS_NO;
    }
    HS_RESPONSE_HEADER(r, "Content-Type", "text/event-stream");
    HS_RESPONSE_HEADER(r, "Cache-Control", "no-cache");
    call_add_headers(c, r, &view, 0);
    HS_RESPONSE_HEADER(r, "Trailer", "x-tollgate-response-cost");
    c->resp = r;
    return hs_respond(c->conn, 200, r); /* takes r */
}

/* An attempt finished (not a stream that started): report it. Returns 1 when the outcome is
 * final (answered through *ret), 0 for the next attempt. */
static int attempt_done(struct rt_call *c, int *ret)
{
    const struct rt_call_env *e = c->env;
    char msg[RT_CALL_MESSAGE_MAX];
    struct rt_result res;
    enum rt_error_class ec;
    enum rt_step step;
    int cooled = 0;
    uint64_t dur = tg_now_mono_us() - c->attempt_start_us;

    c->upstream_us += dur;
    ec = attempt_class(c, msg, sizeof(msg));
    memset(&res, 0, sizeof(res));
    res.http_status = (int32_t)c->res_status;
    res.error_class = ec;
    res.latency_ms = (uint32_t)(dur / 1000);
    res.message = ec == RT_ERR_NONE ? NULL : msg;
    res.message_len = ec == RT_ERR_NONE ? 0 : strlen(msg);
    res.retry_after_s = c->res_retry_after_s > 0 ? (uint32_t)c->res_retry_after_s : 0;
    if (ec == RT_ERR_RATE_LIMIT && res.retry_after_s == 0 &&
        c->target.dep->prov->retry_after != NULL) {
        /* the provider says it in the body (Google's RetryInfo) */
        long ra = c->target.dep->prov->retry_after(c->res_body, c->res_body_len);

        res.retry_after_s = ra > 0 ? (uint32_t)(ra > 86400 ? 86400 : ra) : 0;
    }
    rt_metrics_attempt(e->metrics, c->key, c->target.dep->id, (int)c->res_status, ec);
    if (ec != RT_ERR_NONE)
        TG_DEBUG("msg=attempt_failed call_id=%s deployment=%s status=%ld class=%s latency_ms=%u",
                 c->call_id, c->target.dep->id, c->res_status, rt_error_class_name(ec),
                 res.latency_ms);
    step = rt_router_report(e->router, &c->plan, &c->target, &res, tg_loop_mono_ms(), &cooled);
    c->have_target = 0;
    if (cooled) {
        rt_metrics_cooldown(e->metrics, c->target.dep->id);
        TG_INFO("msg=deployment_cooldown deployment=%s group=%s", c->target.dep->id,
                c->target.group);
    }
    if (step == RT_STEP_DONE) {
        *ret = answer_outcome(c);
        return 1;
    }
    c->phase = PH_BODY;
    return 0;
}

/* /v1/messages/count_tokens for a target whose API cannot count (not Anthropic's): the
 * router's own estimate (rt_usage_estimate_input, the one the pre-call checks use) in
 * Anthropic's answer shape, reported as the target's success. Returns 1 (answered via *ret). */
static int count_tokens_local(struct rt_call *c, int *ret)
{
    struct rt_result res;
    char *dumped = NULL;
    const char *b = c->body;
    size_t bl = c->body_len;
    char answer[48];

    if (b == NULL && c->req != NULL) {
        dumped = json_dumps(c->req, JSON_COMPACT);
        b = dumped;
        bl = dumped != NULL ? strlen(dumped) : 0;
    }
    snprintf(answer, sizeof(answer), "{\"input_tokens\":%lld}",
             (long long)rt_usage_estimate_input(b != NULL ? b : "", bl));
    free(dumped);
    free(c->res_body);
    c->res_body = strdup(answer);
    if (c->res_body == NULL) {
        *ret = call_answer_error(c, 503, "unavailable", "out of memory", NULL);
        return 1;
    }
    c->res_body_len = strlen(answer);
    c->res_status = 200;
    memset(&c->wire, 0, sizeof(c->wire)); /* the answer is the client's shape already */
    memset(&res, 0, sizeof(res));
    res.http_status = 200;
    res.error_class = RT_ERR_NONE;
    res.local = 1; /* no provider was asked: latency-based routing learns nothing from it */
    rt_router_report(c->env->router, &c->plan, &c->target, &res, tg_loop_mono_ms(), NULL);
    c->have_target = 0;
    *ret = answer_outcome(c);
    return 1;
}

/* The attempt at c->target ended before anything was sent to the provider: reported to the
 * router as a failed attempt with http_status, class cls and the text msg (borrowed, only for
 * the call). Returns the router's step. */
static enum rt_step report_unsent(struct rt_call *c, int32_t http_status,
                                  enum rt_error_class cls, const char *msg)
{
    struct rt_result res;

    memset(&res, 0, sizeof(res));
    res.http_status = http_status;
    res.error_class = cls;
    res.message = msg;
    res.message_len = strlen(msg);
    return rt_router_report(c->env->router, &c->plan, &c->target, &res, tg_loop_mono_ms(), NULL);
}

/* The next attempt from the router, started. Returns 1 when the call is answered instead
 * (through *ret), 0 when an attempt is in flight. */
static int attempt_next(struct rt_call *c, int *ret)
{
    const struct rt_call_env *e = c->env;
    char msg[RT_CALL_MESSAGE_MAX];
    int rc;

    if (atomic_load(e->stopping)) {
        *ret = call_answer_error(c, 503, "shutting_down", "router is shutting down", NULL);
        return 1;
    }
    if (!rt_router_next(e->router, &c->plan, tg_loop_mono_ms(), &c->target)) {
        *ret = answer_outcome(c);
        return 1;
    }
    c->have_target = 1;
    if (c->target.is_retry)
        rt_metrics_retry(e->metrics, c->target.group);
    if (c->prev_group[0] != '\0' && strcmp(c->prev_group, c->target.group) != 0)
        rt_metrics_fallback(e->metrics, c->prev_group, c->target.group);
    tg_strcpy_cap(c->prev_group, sizeof(c->prev_group), c->target.group);
    if (c->count_tokens && c->target.dep->prov != &rt_provider_anthropic)
        return count_tokens_local(c, ret);
    msg[0] = '\0';
    rc = attempt_start(c, msg, sizeof(msg));
    if (rc == TG_EAGAIN) {
        /* the deployment has no valid token (creds.h): a failed attempt, at once, like a
         * provider's 503; the router retries elsewhere or falls back */
        rt_metrics_attempt(e->metrics, c->key, c->target.dep->id, 503, RT_ERR_SERVER);
        TG_DEBUG("msg=attempt_no_token call_id=%s deployment=%s", c->call_id, c->target.dep->id);
        if (report_unsent(c, 503, RT_ERR_SERVER, msg) == RT_STEP_DONE) {
            c->have_target = 0;
            *ret = answer_outcome(c);
            return 1;
        }
        c->have_target = 0;
        c->phase = PH_BODY;
        return 0;
    }
    if (rc == TG_EINVAL) {
        /* this deployment cannot take the request: a final client error */
        report_unsent(c, 400, RT_ERR_BAD_REQUEST, msg);
        c->have_target = 0;
        *ret = answer_outcome(c);
        return 1;
    }
    if (rc != 0) {
        rt_metrics_reject(e->metrics, RT_REJECT_UPSTREAM_FULL);
        *ret = call_answer_error(c, 503, "unavailable", msg, rt_router_outcome(&c->plan));
        return 1;
    }
    return 0;
}

/* The attempt loop, resumed by every handler call once the plan exists: waits (suspended) while
 * an attempt is in flight, starts a stream, reports a finished attempt and starts the next. */
static int drive(struct rt_call *c)
{
    int ret = HS_YES;

    for (;;) {
        switch (c->phase) {
        case PH_WAIT:
            c->suspended = 1;
            hs_suspend(c->conn);
            return HS_YES;
        case PH_STREAM_READY:
            return stream_start(c);
        case PH_ATTEMPT_DONE:
            if (attempt_done(c, &ret))
                return ret;
            break;
        case PH_BODY:
            if (attempt_next(c, &ret))
                return ret;
            break;
        case PH_STREAMING:
        case PH_FINAL:
            return HS_YES; /* answered: nothing to do (a late handler call) */
        }
    }
}

static void read_traceparent(struct rt_call *c)
{
    const char *tp = hs_header(c->conn, "traceparent");
    size_t n;

    if (tp == NULL)
        return;
    n = strlen(tp);
    /* version(2)-trace_id(32)-parent_id(16)-flags(2) */
    if (n != 55 || tp[2] != '-' || tp[35] != '-' || tp[52] != '-')
        return;
    for (size_t i = 0; i < n; i++) {
        char ch = tp[i];

        if (i == 2 || i == 35 || i == 52)
            continue;
        if (!((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f')))
            return;
    }
    if (strncmp(tp + 3, "00000000000000000000000000000000", 32) == 0)
        return;
    memcpy(c->traceparent, tp, n + 1);
}

/* A header value kept for forwarding: printable ASCII (spaces inside allowed) that fits in cap
 * with its NUL; anything else is not forwarded. */
static void read_forwarded(struct rt_call *c, const char *name, char *out, size_t cap)
{
    const char *v = hs_header(c->conn, name);
    size_t n;

    out[0] = '\0';
    if (v == NULL)
        return;
    n = strlen(v);
    if (n == 0 || n >= cap)
        return;
    for (size_t i = 0; i < n; i++) {
        if (v[i] < 0x20 || v[i] > 0x7e)
            return;
    }
    memcpy(out, v, n + 1);
}

/* Per-thread xorshift64* for routing choices (weighted shuffle): seeded once from the system
 * generator, then no syscall or lock per request. Not for secrets. */
static uint64_t thread_rand(void)
{
    static __thread uint64_t state;

    while (state == 0) {
        if (tg_random_bytes(&state, sizeof(state)) != 0)
            state = tg_now_mono_ns() | 1u;
    }
    state ^= state >> 12;
    state ^= state << 25;
    state ^= state >> 27;
    return state * 0x2545F4914F6CDD1DULL;
}

/* Raw mode: validate the body and locate the members the request path reads, without building
 * a tree. Returns 1 when every needed value could be read from the bytes (plain strings, no
 * duplicates, nothing the scanner leaves to jansson); 0 sends the request to the full parser. */
static int scan_request(struct rt_call *c)
{
    struct rt_json_member sub[1];
    const char *v;
    size_t n;

    if (c->body == NULL || c->body_len == 0)
        return 0;
    for (int i = 0; i < FM_N; i++)
        c->fm[i].name = fm_names[i];
    if (rt_json_scan_object(c->body, c->body_len, c->fm, FM_N, &c->body_close) != 0)
        return 0;
    if (c->fm[FM_MODEL].val_len > 0 && c->body[c->fm[FM_MODEL].val_off] == '"' &&
        !rt_json_plain_string(c->body, &c->fm[FM_MODEL], &v, &n))
        return 0;
    if (c->fm[FM_STREAM_OPTIONS].val_len > 0 && c->body[c->fm[FM_STREAM_OPTIONS].val_off] == '{') {
        sub[0].name = "include_usage";
        if (rt_json_scan_object(c->body + c->fm[FM_STREAM_OPTIONS].val_off,
                                c->fm[FM_STREAM_OPTIONS].val_len, sub, 1, NULL) != 0)
            return 0;
        c->include_usage = rt_json_is_true(c->body + c->fm[FM_STREAM_OPTIONS].val_off, &sub[0]);
    }
    /* end user: "user" when it is a string, else metadata.user_id when that is one */
    if (c->fm[FM_USER].val_len > 0 && c->body[c->fm[FM_USER].val_off] == '"') {
        if (!rt_json_plain_string(c->body, &c->fm[FM_USER], &c->end_user, &c->end_user_len))
            return 0;
    } else if (c->fm[FM_METADATA].val_len > 0 && c->body[c->fm[FM_METADATA].val_off] == '{') {
        const char *mb = c->body + c->fm[FM_METADATA].val_off;

        sub[0].name = "user_id";
        if (rt_json_scan_object(mb, c->fm[FM_METADATA].val_len, sub, 1, NULL) != 0)
            return 0;
        if (sub[0].val_len > 0 && mb[sub[0].val_off] == '"' &&
            !rt_json_plain_string(mb, &sub[0], &c->end_user, &c->end_user_len))
            return 0;
    }
    return 1;
}

/* Body complete (the key was checked from the headers): parse, plan, first attempt. */
static int request_start(struct rt_call *c)
{
    const struct rt_call_env *e = c->env;
    json_error_t jerr;
    char msg[RT_CALL_MESSAGE_MAX];
    uint64_t rnd = 0;
    int rc;
    int model_is_string = 0;
    size_t model_len = 0;
    int disable_fallbacks;

    c->raw = scan_request(c);
    if (c->raw) {
        const char *v;

        /* the body stays as it came: it is the pristine request every attempt starts from */
        if (rt_json_plain_string(c->body, &c->fm[FM_MODEL], &v, &model_len)) {
            size_t k = model_len < sizeof(c->model_requested) - 1 ? model_len
                                                                  : sizeof(c->model_requested) - 1;

            model_is_string = 1;
            memcpy(c->model_requested, v, k);
            c->model_requested[k] = '\0';
        }
        c->stream = c->api != RT_API_EMBEDDINGS && rt_json_is_true(c->body, &c->fm[FM_STREAM]);
        disable_fallbacks = rt_json_is_true(c->body, &c->fm[FM_DISABLE_FALLBACKS]);
    } else {
        json_t *model;

        c->req = rt_json_load_bounded(c->body != NULL ? c->body : "", c->body_len,
                                      e->cfg->max_json_depth, e->cfg->max_json_elements, &jerr);
        free(c->body);
        c->body = NULL;
        c->body_len = 0;
        if (c->req == NULL || !json_is_object(c->req)) {
            rt_metrics_reject(e->metrics, RT_REJECT_BAD_JSON);
            if (c->req == NULL && jerr.position < 0)
                snprintf(msg, sizeof(msg),
                         "Request body too complex: %s (limits.max_json_depth, "
                         "limits.max_json_elements)",
                         jerr.text);
            else if (c->req == NULL)
                snprintf(msg, sizeof(msg), "Malformed JSON at line %d, column %d (byte %d): %s",
                         jerr.line, jerr.column, jerr.position, jerr.text);
            else
                snprintf(msg, sizeof(msg), "Request body must be a JSON object");
            return call_answer_error(c, 400, "invalid_json", msg, NULL);
        }
        model = json_object_get(c->req, "model");
        if (json_is_string(model)) {
            model_is_string = 1;
            model_len = json_string_length(model);
            snprintf(c->model_requested, sizeof(c->model_requested), "%s",
                     json_string_value(model));
        }
        c->stream = c->api != RT_API_EMBEDDINGS && json_is_true(json_object_get(c->req, "stream"));
        c->include_usage = json_is_true(
            json_object_get(json_object_get(c->req, "stream_options"), "include_usage"));
        disable_fallbacks = json_is_true(json_object_get(c->req, "disable_fallbacks"));
    }
    if (c->count_tokens)
        c->stream = 0; /* a count has no stream */
    read_traceparent(c);
    read_forwarded(c, "anthropic-beta", c->anthropic_beta, sizeof(c->anthropic_beta));
    read_forwarded(c, "anthropic-version", c->anthropic_version, sizeof(c->anthropic_version));
    if (!model_is_string || model_len == 0)
        return call_answer_error(c, 400, "invalid_model", "model: a non-empty string is required",
                                 NULL);
    if (e->admit != NULL && e->admit(e->admit_ud) != 0) {
        rt_metrics_reject(e->metrics, RT_REJECT_NOT_ADMITTED);
        return call_answer_error(c, 503, "not_admitted",
                                 "router cannot record this request now (event spool full)", NULL);
    }
    if (model_len >= RT_NAME_CAP)
        return call_answer_error(c, 400, "invalid_model", "model: name too long", NULL);
    rnd = thread_rand();
    rc = rt_router_begin(e->router, c->key, c->model_requested, disable_fallbacks, rnd,
                         tg_loop_mono_ms(), &c->plan);
    c->plan_begun = 1;
    if (rc == 0 && e->cfg->enable_pre_call_checks && !c->count_tokens)
        rt_router_set_input_tokens(&c->plan, rt_usage_estimate_input(c->body, c->body_len));
    if (rc != 0) {
        const struct rt_outcome *o = rt_router_outcome(&c->plan);

        return call_answer_error(c, o->status > 0 ? o->status : 400, o->error_class, o->message, o);
    }
    return drive(c);
}

/* 413 for a body over max_body_bytes. */
static int answer_too_large(struct rt_call *c)
{
    char msg[160];

    rt_metrics_reject(c->env->metrics, RT_REJECT_BODY_TOO_LARGE);
    snprintf(msg, sizeof(msg), "Request body too large: limit is %llu bytes",
             (unsigned long long)c->env->cfg->max_body_bytes);
    return call_answer_error(c, 413, "request_too_large", msg, NULL);
}

/* ------------------------------------------------------------------ the call's entry points */

int rt_call_start(struct rt_call *c)
{
    const struct rt_call_env *e = c->env;
    const char *cl;

    if (atomic_fetch_add(e->in_flight, 1) >= (int64_t)e->cfg->max_in_flight) {
        atomic_fetch_sub(e->in_flight, 1);
        rt_metrics_reject(e->metrics, RT_REJECT_IN_FLIGHT_FULL);
        return call_answer_error(c, 503, "in_flight_full",
                                 "router is at its in-flight request limit", NULL);
    }
    c->counted = 1;
    rt_metrics_in_flight_add(e->metrics, 1);
    cl = hs_header(c->conn, "Content-Length");
    if (cl != NULL) {
        unsigned long long n = strtoull(cl, NULL, 10); /* digits only: hparse checked */

        if (n > e->cfg->max_body_bytes)
            return answer_too_large(c);
        if (n > 0) {
            c->body = malloc((size_t)n + 1);
            if (c->body == NULL)
                return HS_NO;
            c->body_alloc = (size_t)n + 1;
        }
    }
    return HS_YES;
}

int rt_call_body(struct rt_call *c, const char *p, size_t *size)
{
    size_t n = *size;

    *size = 0; /* taken (or dropped) whole */
    if (c->phase != PH_BODY || c->plan_begun)
        return HS_YES; /* answered early (413): the server drops the rest */
    if (c->body_len + n > c->env->cfg->max_body_bytes) {
        /* no Content-Length (chunked): the cap is hit while reading. Answered at once; the
         * HTTP server closes the connection after the answer and drops what the client still
         * sends, for a bounded time. */
        free(c->body);
        c->body = NULL;
        c->body_len = 0;
        c->body_alloc = 0;
        return answer_too_large(c);
    }
    if (c->body_len + n + 1 > c->body_alloc) {
        size_t want = c->body_alloc ? c->body_alloc * 2 : 16384;
        char *nb;

        while (want < c->body_len + n + 1)
            want *= 2;
        if (want > c->env->cfg->max_body_bytes + 1)
            want = c->env->cfg->max_body_bytes + 1;
        nb = realloc(c->body, want);
        if (nb == NULL)
            return HS_NO;
        c->body = nb;
        c->body_alloc = want;
    }
    memcpy(c->body + c->body_len, p, n);
    c->body_len += n;
    return HS_YES;
}

int rt_call_run(struct rt_call *c)
{
    if (c->phase == PH_FINAL)
        return HS_YES;
    if (!c->plan_begun)
        return request_start(c);
    return drive(c);
}

void rt_call_completed(struct rt_call *c, enum hs_toe toe)
{
    const struct rt_call_env *e = c->env;

    c->client_gone = 1;
    c->conn = NULL; /* nothing resumes it from now on (call_resume) */
    c->suspended = 0;
    if (c->xfer_active)
        rt_upstream_cancel(e->up, c->handle);
    if (!c->event_done && c->plan_begun) {
        /* the client went away before the outcome was final */
        if (c->sse_init)
            rt_sse_usage_get(&c->sse, &c->usage);
        if (c->have_target && c->target.dep != NULL)
            call_price(c);
        TG_DEBUG("msg=client_gone call_id=%s toe=%d", c->call_id, (int)toe);
        call_complete(c, 499, "client_closed");
    }
    if (c->counted) {
        atomic_fetch_sub(e->in_flight, 1);
        rt_metrics_in_flight_add(e->metrics, -1);
    }
    call_unref(c);
}
