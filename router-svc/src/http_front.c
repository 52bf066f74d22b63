#include "http_front.h"

#include <arpa/inet.h>
#include <jansson.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>
#include <time.h>

#include "health.h"
#include "hsrv.h"
#include "keys.h"
#include "mask.h"
#include "router.h"
#include "sse.h"
#include "key_api.h"
#include "rt_metrics.h"
#include "tg_err.h"
#include "tg_ids.h"
#include "tg_log.h"
#include "tg_metrics.h"
#include "tg_time.h"
#include "translate.h"
#include "upstream.h"
#include "usage.h"

/* Request line plus headers (names, values, separators) accepted. Larger requests are answered
 * 431 in the API's error shape by access_cb (counted as reject reason headers_too_large); past
 * RT_FRONT_HEAD_HARD_MAX_BYTES the HTTP server answers 431 itself without reading further. */
#define RT_FRONT_HEADER_MAX_BYTES (8u * 1024u)
#define RT_FRONT_HEAD_HARD_MAX_BYTES (16u * 1024u)
/* Upstream/HTTP run pairs per loop turn while connections keep being resumed. */
#define RT_FRONT_RUNS_PER_TURN 8
/* Tags of the loop's own fds in its epoll set (the HTTP server's objects are pointers). */
#define RT_FRONT_TAG_STOP 1u
#define RT_FRONT_TAG_UPSTREAM 2u
/* Upstream slots per loop beyond the in-flight cap (transfers finishing while new ones start). */
#define RT_FRONT_EXTRA_TRANSFERS 64
/* File descriptors beyond the client and provider connections (rt_front_fds_needed). */
#define RT_FRONT_FDS_RESERVE 256
/* Upstream response size when the config gives none. */
#define RT_MESSAGE_MAX 512

enum phase {
    PH_BODY = 0,     /* reading the request body */
    PH_WAIT,         /* an attempt is in flight (connection suspended) */
    PH_ATTEMPT_DONE, /* the attempt finished; result in call->res_* */
    PH_STREAM_READY, /* 2xx stream bytes arrived: start the client stream */
    PH_STREAMING,    /* client stream queued; the reader drives */
    PH_FINAL         /* a response was queued */
};

/* One event loop per thread: the HTTP server (hsrv) and an embedded upstream share the thread
 * and its epoll set, so a request never changes threads between the client and the provider.
 * The loops' listening sockets share the port with SO_REUSEPORT. */
struct worker {
    struct rt_front *f;
    struct hs_server *srv;
    struct rt_upstream *up;
    pthread_t thread;
    int started;
    int epfd;             /* client sockets, the upstream's epoll fd, the stop eventfd */
    int stopfd;           /* eventfd: stop or quiesce requested */
    int quiesced;         /* worker thread only */
};

struct rt_front {
    struct rt_front_deps d;
    uint16_t port;
    unsigned nworkers;
    struct worker *workers; /* nworkers */
    struct hs_ipcap *ipcap; /* connections per source address, shared by the loops; NULL when
                             * max_connections_per_ip is max_connections (no cap of its own) */
    _Atomic int64_t in_flight;
    _Atomic int stopping;
    _Atomic int quiesced;
    _Atomic int loops_stop;
};

struct call {
    struct rt_front *f;
    struct worker *w;          /* the loop that owns the connection and its transfers */
    struct hs_conn *conn;      /* NULL once the request ended (completed_cb) */
    _Atomic int refs;
    pthread_mutex_t mu;        /* guards the fields marked (mu) */

    int admin;                 /* a key admin API request (no event, no routing) */
    char admin_path[32];       /* which admin path */
    enum rt_api api;           /* client API */
    const char *endpoint;      /* path for the event */
    int anthropic_shape;       /* errors in Anthropic's shape */
    int counted;               /* counted in in_flight */

    char *body;                /* request body, up to max_body_bytes */
    size_t body_len, body_alloc;

    json_t *req;               /* immutable parsed request (raw mode: only once a translation
                                * needs it, parsed from body) */
    int raw;                   /* raw mode: body is kept unchanged and only the members below
                                * were located in it; attempts splice the model into a copy */
    struct rt_json_member fm[6]; /* raw mode: FM_* members of body (spans into body) */
    size_t body_close;         /* raw mode: offset of the body's closing brace */
    int include_usage;         /* stream_options.include_usage is true */
    const char *end_user;      /* raw mode: "user" (or metadata.user_id) bytes in body */
    size_t end_user_len;
    int stream;
    char model_requested[RT_NAME_CAP];
    char traceparent[64];      /* validated W3C traceparent, "" when none */

    struct rt_keys_table *keys; /* held while the request lives */
    const struct rt_key *key;  /* borrowed from keys, NULL for the master key */

    struct rt_plan plan;
    int plan_begun;
    struct rt_target target;
    int have_target;
    char prev_group[RT_NAME_CAP];
    enum rt_api up_api;        /* API spoken to the current deployment */
    enum rt_translate_dir tr_dir;
    int strip_usage_chunk;     /* usage was asked for by us, not the client: drop that chunk */
    uint64_t attempt_start_us;
    uint64_t upstream_us;      /* time spent waiting on providers, all attempts */

    /* (mu) */
    int phase;
    int suspended;             /* connection suspended by us, waiting for a resume */
    uint64_t handle;
    int xfer_active;
    int res_err;
    long res_status;
    char *res_body;
    size_t res_body_len;
    long res_retry_after_s;
    uint64_t res_ttfb_us;
    char res_detail[128];
    /* stream (mu) */
    char *in;                  /* RT_STREAM_IN_MAX_BYTES raw upstream bytes, NULL while empty */
    size_t in_len;
    int paused;
    int discard;               /* stream failed: refuse further upstream bytes */
    int upstream_done;
    int client_gone;

    /* stream, reader thread only */
    struct tg_buf out;
    size_t out_off;
    struct rt_sse_usage sse;
    int sse_init;
    struct rt_translate_stream tr;
    int saw_terminator;
    int stream_finalized;
    struct hs_response *resp;  /* the stream's response, for the cost trailer: borrowed (the
                                * server owns it once queued), NULL once the trailer is set */

    /* outcome */
    struct rt_usage usage;
    int64_t cost_nusd;
    int event_done;            /* the event was built and handed to on_complete */
    uint64_t t_start_us;
    int64_t ts_start_ms;
    int64_t ttft_ms;
    char call_id[TG_UUID_STR_LEN + 1];
};

static const struct rt_upstream_ops call_ops;

/* Members of the client body read on the request path (raw mode). */
enum { FM_MODEL = 0, FM_STREAM, FM_STREAM_OPTIONS, FM_DISABLE_FALLBACKS, FM_USER, FM_METADATA,
       FM_N };
static const char *const fm_names[FM_N] = {"model", "stream", "stream_options",
                                           "disable_fallbacks", "user", "metadata"};

/* ------------------------------------------------------------------ call lifetime */

static void call_unref(struct call *c)
{
    if (atomic_fetch_sub(&c->refs, 1) != 1)
        return;
    json_decref(c->req);
    rt_keys_release(&c->keys);
    free(c->body);
    free(c->res_body);
    free(c->in);
    if (c->out.data != NULL)
        tg_buf_fini(&c->out);
    if (c->sse_init)
        rt_sse_usage_fini(&c->sse);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

/* Random bytes drawn per thread for call ids, refilled from the system generator a block at a
 * time (one generator call per RT_FRONT_ID_POOL_BYTES / 10 requests instead of one each). */
#define RT_FRONT_ID_POOL_BYTES 1280

/* Call id: a UUIDv7 (48-bit epoch ms, version 7, variant 10, 74 random bits) as
 * tg_uuid_v7 makes it. Returns 0 or TG_EIO. HTTP threads. */
static int call_id_make(uint64_t epoch_ms, char out[TG_UUID_STR_LEN + 1])
{
    static __thread unsigned char pool[RT_FRONT_ID_POOL_BYTES];
    static __thread size_t used = RT_FRONT_ID_POOL_BYTES;
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

static struct call *call_new(struct rt_front *f, struct hs_conn *conn)
{
    struct call *c = calloc(1, sizeof(*c));

    if (c == NULL)
        return NULL;
    c->f = f;
    c->conn = conn;
    atomic_init(&c->refs, 1);
    pthread_mutex_init(&c->mu, NULL);
    c->t_start_us = tg_now_mono_us();
    c->ts_start_ms = (int64_t)tg_now_epoch_ms();
    if (call_id_make((uint64_t)c->ts_start_ms, c->call_id) != 0)
        snprintf(c->call_id, sizeof(c->call_id), "00000000-0000-7000-8000-000000000000");
    c->handle = 0;
    return c;
}

/* ------------------------------------------------------------------ responses */

static const char *error_type_for(int status, int anthropic)
{
    switch (status) {
    case 400:
    case 422:
        return "invalid_request_error";
    case 401:
        return "authentication_error";
    case 403:
        return "permission_error";
    case 404:
        return anthropic ? "not_found_error" : "invalid_request_error";
    case 408:
        return anthropic ? "timeout_error" : "timeout";
    case 413:
        return anthropic ? "request_too_large" : "invalid_request_error";
    case 431:
        return "invalid_request_error";
    case 429:
        return anthropic ? "rate_limit_error" : "rate_limit_error";
    case 503:
        return anthropic ? "overloaded_error" : "service_unavailable";
    default:
        return "api_error";
    }
}

/* Error body in the API's own shape; message is masked here (fail closed). Returns new
 * malloc'd string. */
static char *error_body(const struct rt_front *f, int anthropic, int status, const char *code,
                        const char *message)
{
    char masked[RT_MESSAGE_MAX];
    json_t *j;
    char *s;

    rt_mask_apply(f->d.mask, message, message != NULL ? strlen(message) : 0, masked,
                  sizeof(masked));
    if (anthropic)
        j = json_pack("{s:s,s:{s:s,s:s}}", "type", "error", "error", "type",
                      error_type_for(status, 1), "message", masked);
    else
        j = json_pack("{s:{s:s,s:s,s:n,s:s?}}", "error", "message", masked, "type",
                      error_type_for(status, 0), "param", "code",
                      (code != NULL && code[0] != '\0') ? code : NULL);
    s = j != NULL ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    return s != NULL ? s : strdup("{\"error\":{\"message\":\"internal error\"}}");
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

/* Cost in USD with nine decimals, for the header and a stream's trailer. Returns v. */
static char *cost_text(char v[40], int64_t nusd)
{
    if (nusd < 0)
        nusd = 0;
    return fmt_dec(v, (uint64_t)nusd / 1000000000u, (uint64_t)nusd % 1000000000u, 9);
}

static void add_cost_header(struct hs_response *r, int64_t nusd)
{
    char v[40];

    hs_response_header(r, "x-tollgate-response-cost", cost_text(v, nusd));
}

static void add_headers(struct call *c, struct hs_response *r, const struct rt_outcome *o,
                        int with_cost)
{
    char v[64];
    uint64_t now = tg_now_mono_us();
    uint64_t total = now - c->t_start_us;
    uint64_t over = total > c->upstream_us ? total - c->upstream_us : 0;

    hs_response_header(r, "x-tollgate-call-id", c->call_id);
    if (atomic_load(&c->f->quiesced))
        hs_response_header(r, "Connection", "close");
    if (o != NULL && o->model_group[0] != '\0')
        hs_response_header(r, "x-tollgate-model-group", o->model_group);
    hs_response_header(r, "x-tollgate-attempts",
                            fmt_dec(v, c->plan_begun ? rt_router_attempts(&c->plan) : 0u, 0, 0));
    hs_response_header(
        r, "x-tollgate-fallbacks",
        fmt_dec(v, c->plan_begun ? rt_router_fallbacks(&c->plan) : 0u, 0, 0));
    if (with_cost)
        add_cost_header(r, c->cost_nusd);
    /* microseconds as milliseconds with three decimals */
    hs_response_header(r, "x-tollgate-overhead-ms", fmt_dec(v, over / 1000u, over % 1000u, 3));
    rt_metrics_overhead(c->f->d.metrics, (double)over / 1e6);
    if (o != NULL && o->retry_after_s > 0)
        hs_response_header(r, "retry-after", fmt_dec(v, o->retry_after_s, 0, 0));
}

static int queue_body_len(struct hs_conn *conn, int status, char *body, size_t len,
                          const char *ctype, struct call *c, const struct rt_outcome *o,
                          int with_cost)
{
    struct hs_response *r = hs_response_buffer(body, len); /* takes body */

    if (r == NULL)
        return HS_NO;
    hs_response_header(r, "Content-Type", ctype);
    if (c != NULL)
        add_headers(c, r, o, with_cost);
    return hs_respond(conn, status, r);
}

static int queue_body(struct hs_conn *conn, int status, char *body, const char *ctype,
                      struct call *c, const struct rt_outcome *o, int with_cost)
{
    return queue_body_len(conn, status, body, strlen(body), ctype, c, o, with_cost);
}

/* ------------------------------------------------------------------ completion */

static int64_t elapsed_ms(const struct call *c)
{
    return (int64_t)((tg_now_mono_us() - c->t_start_us) / 1000);
}

/* Build the event and hand it to on_complete; once per request. status/err_class override the
 * plan's when given (requests refused before routing, client gone). The event (about 3 KiB) lives
 * on this frame only: nothing of it is held while a request is in flight. */
static void call_complete(struct call *c, int status, const char *err_class)
{
    struct rt_front *f = c->f;
    struct proto_event evs;
    struct proto_event *ev = &evs;
    const struct rt_outcome *o = c->plan_begun ? rt_router_outcome(&c->plan) : NULL;
    json_t *user;

    if (c->event_done)
        return;
    c->event_done = 1;
    proto_event_init(ev);
    if (c->plan_begun) {
        rt_router_finish(f->d.router, &c->plan,
                         (uint64_t)(c->usage.prompt_tokens + c->usage.completion_tokens),
                         tg_now_mono_ms());
        rt_router_fill_event(f->d.router, &c->plan, ev);
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
    ev->ts_start_ms = c->ts_start_ms;
    ev->ts_end_ms = (int64_t)tg_now_epoch_ms();
    ev->latency_ms = elapsed_ms(c);
    ev->ttft_ms = c->ttft_ms;
    ev->prompt_tokens = c->usage.prompt_tokens;
    ev->completion_tokens = c->usage.completion_tokens;
    ev->cost_nusd = c->cost_nusd;
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
    rt_metrics_request(f->d.metrics, ev->model_group, ev->status,
                       (double)(tg_now_mono_us() - c->t_start_us) / 1e6);
    rt_metrics_completed_hook(f->d.metrics);
    if (f->d.on_complete != NULL)
        f->d.on_complete(ev, f->d.on_complete_ud);
}

/* Router-made or pre-routing error: queue it and complete the call. */
static int answer_error(struct call *c, int status, const char *code, const char *message,
                        const struct rt_outcome *o)
{
    char *body = error_body(c->f, c->anthropic_shape, status, code, message);
    int ret;

    c->phase = PH_FINAL;
    call_complete(c, status, code);
    ret = queue_body(c->conn, status, body, "application/json", c, o, 1);
    return ret;
}

/* ------------------------------------------------------------------ upstream callbacks */

/* Under c->mu: end the connection's suspension, if it is suspended by us. Any thread: the
 * connection cannot end meanwhile, since completed_cb takes c->mu (and clears conn). */
static void resume_locked(struct call *c)
{
    if (c->suspended && c->conn != NULL) {
        c->suspended = 0;
        hs_resume(c->conn);
    }
}

static size_t call_on_data(void *ud, const char *p, size_t n)
{
    struct call *c = ud;
    size_t ret = n;

    pthread_mutex_lock(&c->mu);
    if (c->in == NULL && !c->client_gone && !c->discard) {
        /* held only while bytes wait for the reader (released once it took them all) */
        c->in = malloc(RT_STREAM_IN_MAX_BYTES);
        if (c->in == NULL)
            c->discard = 1; /* out of memory: the transfer fails like a broken connection */
    }
    if (c->client_gone || c->discard) {
        ret = 0; /* aborts the transfer */
    } else if (c->in_len + n > RT_STREAM_IN_MAX_BYTES) {
        c->paused = 1;
        ret = RT_UPSTREAM_PAUSE;
    } else {
        memcpy(c->in + c->in_len, p, n);
        c->in_len += n;
        if (c->phase == PH_WAIT) {
            c->phase = PH_STREAM_READY;
            c->res_ttfb_us = tg_now_mono_us() - c->attempt_start_us;
        }
        resume_locked(c);
    }
    pthread_mutex_unlock(&c->mu);
    return ret;
}

static void call_on_done(void *ud, struct rt_upstream_result *res)
{
    struct call *c = ud;

    pthread_mutex_lock(&c->mu);
    c->xfer_active = 0;
    c->res_err = res->err;
    c->res_status = res->status;
    c->res_retry_after_s = res->retry_after_s;
    if (c->res_ttfb_us == 0)
        c->res_ttfb_us = res->ttfb_us;
    snprintf(c->res_detail, sizeof(c->res_detail), "%s", res->detail);
    free(c->res_body);
    c->res_body = res->body; /* taken */
    c->res_body_len = res->body_len;
    res->body = NULL;
    if (c->phase == PH_WAIT)
        c->phase = PH_ATTEMPT_DONE;
    else
        c->upstream_done = 1;
    resume_locked(c);
    pthread_mutex_unlock(&c->mu);
    call_unref(c);
}

static const struct rt_upstream_ops call_ops = {call_on_data, call_on_done};

/* ------------------------------------------------------------------ attempts */

static enum rt_attempt_outcome outcome_of(enum rt_error_class e)
{
    switch (e) {
    case RT_ERR_NONE:
        return RT_OUTCOME_SUCCESS;
    case RT_ERR_RATE_LIMIT:
        return RT_OUTCOME_RATE_LIMITED;
    case RT_ERR_SERVER:
        return RT_OUTCOME_SERVER_ERROR;
    case RT_ERR_TIMEOUT:
        return RT_OUTCOME_TIMEOUT;
    case RT_ERR_CONNECT:
        return RT_OUTCOME_CONNECT_ERROR;
    case RT_ERR_CONTEXT_WINDOW:
        return RT_OUTCOME_CONTEXT_WINDOW;
    case RT_ERR_CONTENT_POLICY:
        return RT_OUTCOME_CONTENT_POLICY;
    case RT_ERR_BAD_REQUEST:
        return RT_OUTCOME_CLIENT_ERROR;
    case RT_ERR_INVALID_RESPONSE:
        return RT_OUTCOME_INVALID_RESPONSE;
    }
    return RT_OUTCOME_SERVER_ERROR;
}

static void build_url(const struct rt_deployment_conf *dep, enum rt_api api, char *out, size_t cap)
{
    const char *base = dep->api_base;
    size_t bl;
    const char *path;

    if (base[0] == '\0')
        base = dep->kind == RT_PROVIDER_ANTHROPIC ? "https://api.anthropic.com"
                                                  : "https://api.openai.com/v1";
    bl = strlen(base);
    while (bl > 0 && base[bl - 1] == '/')
        bl--;
    if (dep->kind == RT_PROVIDER_ANTHROPIC) {
        path = (bl >= 3 && strncmp(base + bl - 3, "/v1", 3) == 0) ? "/messages" : "/v1/messages";
    } else {
        switch (api) {
        case RT_API_EMBEDDINGS:
            path = "/embeddings";
            break;
        case RT_API_RESPONSES:
            path = "/responses";
            break;
        default:
            path = "/chat/completions";
            break;
        }
    }
    snprintf(out, cap, "%.*s%s", (int)bl, base, path);
}

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
static char *raw_attempt_body(const struct call *c, const char *model, int add_usage,
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
 * translation for the other provider's API. Returns new malloc'd JSON and its length, or NULL
 * with msg. */
static char *attempt_body(struct call *c, const struct rt_deployment_conf *dep, char *msg,
                          size_t msgcap, size_t *out_len)
{
    json_t *j = NULL;
    char *s;
    int translate;

    c->tr_dir = RT_TRANSLATE_NONE;
    translate = (dep->kind == RT_PROVIDER_ANTHROPIC && c->api != RT_API_MESSAGES) ||
                (dep->kind != RT_PROVIDER_ANTHROPIC && c->api == RT_API_MESSAGES);
    if (c->raw && !translate && (dep->kind != RT_PROVIDER_ANTHROPIC || c->api == RT_API_MESSAGES)) {
        int add_usage;

        c->up_api = dep->kind == RT_PROVIDER_ANTHROPIC ? RT_API_MESSAGES : c->api;
        add_usage = c->stream && c->up_api == RT_API_CHAT && !c->include_usage;
        c->strip_usage_chunk = add_usage;
        s = raw_attempt_body(c, dep->model, add_usage, out_len);
        if (s == NULL)
            snprintf(msg, msgcap, "cannot encode the upstream request");
        return s;
    }
    if (c->raw && c->req == NULL) {
        /* a translation works on the parsed request: parsed once, never changed afterwards */
        json_error_t jerr;

        c->req = rt_json_load_bounded(c->body, c->body_len, c->f->d.cfg->max_json_depth,
                                      c->f->d.cfg->max_json_elements, &jerr);
        if (c->req == NULL) {
            snprintf(msg, msgcap, "cannot parse the request: %s", jerr.text);
            return NULL;
        }
    }
    if (dep->kind == RT_PROVIDER_ANTHROPIC) {
        c->up_api = RT_API_MESSAGES;
        if (c->api == RT_API_MESSAGES) {
            j = json_copy(c->req);
        } else if (c->api == RT_API_CHAT) {
            j = rt_translate_chat_to_messages(c->req, dep->model, msg, msgcap);
            c->tr_dir = RT_TRANSLATE_MESSAGES_TO_CHAT;
        } else {
            snprintf(msg, msgcap, "deployment %s (anthropic) does not serve %s", dep->id,
                     c->endpoint);
            return NULL;
        }
    } else {
        if (c->api == RT_API_MESSAGES) {
            c->up_api = RT_API_CHAT;
            j = rt_translate_messages_to_chat(c->req, dep->model, msg, msgcap);
            c->tr_dir = RT_TRANSLATE_CHAT_TO_MESSAGES;
        } else {
            c->up_api = c->api;
            j = json_copy(c->req);
        }
    }
    if (j == NULL)
        return NULL;
    /* the copy is shallow: setting "model" replaces one member of the copy only */
    json_object_set_new(j, "model", json_string(dep->model));
    /* disable_fallbacks is the gateway's parameter: providers reject unknown ones (400) */
    json_object_del(j, "disable_fallbacks");
    c->strip_usage_chunk = 0;
    if (c->stream && c->up_api == RT_API_CHAT && c->tr_dir == RT_TRANSLATE_NONE &&
        !json_is_true(json_object_get(json_object_get(c->req, "stream_options"),
                                      "include_usage"))) {
        /* the one addition to the client's body: without it an OpenAI stream carries no usage
         * and the call could not be billed; the extra usage chunk is not forwarded */
        json_object_set_new(j, "stream_options", json_pack("{s:b}", "include_usage", 1));
        c->strip_usage_chunk = 1;
    }
    s = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    if (s == NULL)
        snprintf(msg, msgcap, "cannot encode the upstream request");
    else
        *out_len = strlen(s);
    return s;
}

/* Start the attempt for c->target. Returns 0 (submitted), or a negative code with msg. */
static int attempt_start(struct call *c, char *msg, size_t msgcap)
{
    const struct rt_deployment_conf *dep = c->target.dep;
    struct rt_upstream_request req;
    char url[RT_URL_CAP + 32];
    char auth[RT_SECRET_CAP + 32];
    char tp[96];
    int nh = 0;
    int rc;

    memset(&req, 0, sizeof(req));
    req.body = attempt_body(c, dep, msg, msgcap, &req.body_len);
    if (req.body == NULL)
        return TG_EINVAL;
    build_url(dep, c->up_api, url, sizeof(url));
    req.url = url;
    if (dep->kind == RT_PROVIDER_ANTHROPIC) {
        if (dep->api_key[0] != '\0') {
            snprintf(auth, sizeof(auth), "x-api-key: %s", dep->api_key);
            req.headers[nh++] = auth;
        }
        req.headers[nh++] = "anthropic-version: 2023-06-01";
    } else if (dep->api_key[0] != '\0') {
        snprintf(auth, sizeof(auth), "Authorization: Bearer %s", dep->api_key);
        req.headers[nh++] = auth;
    }
    if (c->stream)
        req.headers[nh++] = "Accept: text/event-stream";
    if (c->traceparent[0] != '\0') {
        snprintf(tp, sizeof(tp), "traceparent: %s", c->traceparent);
        req.headers[nh++] = tp;
    }
    req.stream = c->stream;
    req.recv_buffer_bytes = c->stream ? RT_STREAM_RECV_BYTES : 0;
    req.timeout_ms = c->stream ? dep->stream_timeout_ms : dep->timeout_ms;
    req.idle_timeout_ms = dep->stream_timeout_ms;
    req.max_response_bytes = c->f->d.cfg->max_response_bytes > 0
                                 ? (size_t)c->f->d.cfg->max_response_bytes
                                 : (size_t)RT_DEFAULT_MAX_RESPONSE_BYTES;
    pthread_mutex_lock(&c->mu);
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
    atomic_fetch_add(&c->refs, 1); /* the transfer's reference, dropped in on_done */
    c->attempt_start_us = tg_now_mono_us();
    rc = rt_upstream_submit(c->w->up, &req, &call_ops, c, &c->handle);
    if (rc != 0) {
        c->xfer_active = 0;
        c->phase = PH_BODY;
        atomic_fetch_sub(&c->refs, 1);
        snprintf(msg, msgcap, "%s", rc == TG_EFULL ? "upstream capacity reached"
                                                   : "router is shutting down");
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}

/* Upstream error text for the trail: the provider's error.message when it sent one, else a
 * generic line. Masked later by the router/trail and by error_body. */
static void upstream_message(const struct call *c, char *out, size_t cap)
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
static int answer_success(struct call *c, const struct rt_outcome *o)
{
    char *body = c->res_body;
    size_t len = c->res_body_len;
    json_t *j = NULL;
    json_t *t = NULL;

    c->res_body = NULL;
    if (c->tr_dir != RT_TRANSLATE_NONE) {
        json_error_t jerr;

        j = rt_json_load_bounded(body, c->res_body_len, RT_JSON_ANSWER_MAX_DEPTH,
                                 RT_JSON_ANSWER_MAX_ELEMENTS, &jerr);
        if (c->tr_dir == RT_TRANSLATE_CHAT_TO_MESSAGES)
            t = rt_translate_chat_resp_to_messages(j, c->model_requested);
        else
            t = rt_translate_messages_resp_to_chat(j, c->model_requested);
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

static int answer_outcome(struct call *c)
{
    const struct rt_outcome *o = rt_router_outcome(&c->plan);
    int status = o->status;
    const char *cls = o->error_class;

    if (o->served)
        return answer_success(c, o);
    if (status < 400) {
        /* an attempt failed without an HTTP error status of its own */
        if (strcmp(cls, "timeout") == 0)
            status = 504;
        else
            status = 502;
    }
    if (strcmp(cls, "invalid_response") == 0 || strcmp(cls, "connect") == 0)
        status = 502;
    return answer_error(c, status, cls, o->message[0] ? o->message : "upstream error", o);
}

/* Client-side stream state (the output buffer itself is allocated by stream_pump when it has
 * something to write). Returns 0 or TG_ENOMEM. */
static int stream_begin_state(struct call *c)
{
    tg_buf_reset(&c->out);
    c->out.truncated = 0;
    c->out_off = 0;
    if (!c->sse_init) {
        if (rt_sse_usage_init(&c->sse, c->up_api, RT_STREAM_USAGE_LINE_BYTES) == 0)
            c->sse_init = 1;
    }
    rt_translate_stream_init(&c->tr, c->tr_dir, c->model_requested, (int64_t)time(NULL));
    return 0;
}

static ssize_t stream_reader(void *cls, char *buf, size_t max);
static void stream_free(void *cls);

/* Resumes the attempt loop. Called from the access handler (loop thread) with no lock held.
 * Returns what the handler returns. */
static int drive(struct call *c)
{
    struct rt_front *f = c->f;
    char msg[RT_MESSAGE_MAX];

    for (;;) {
        int phase;

        pthread_mutex_lock(&c->mu);
        phase = c->phase;
        pthread_mutex_unlock(&c->mu);

        if (phase == PH_WAIT) {
            pthread_mutex_lock(&c->mu);
            if (c->phase == PH_WAIT) {
                c->suspended = 1;
                hs_suspend(c->conn);
                pthread_mutex_unlock(&c->mu);
                return HS_YES;
            }
            pthread_mutex_unlock(&c->mu);
            continue;
        }
        if (phase == PH_STREAM_READY) {
            struct hs_response *r;
            const struct rt_outcome *o = rt_router_outcome(&c->plan);
            struct rt_outcome view = *o;

            c->upstream_us += c->res_ttfb_us;
            c->ttft_ms = elapsed_ms(c);
            snprintf(view.model_group, sizeof(view.model_group), "%s", c->target.group);
            rt_metrics_attempt(f->d.metrics, c->target.dep->id, RT_OUTCOME_SUCCESS);
            if (stream_begin_state(c) != 0) {
                /* nothing was sent yet: stop the transfer and answer like any failure */
                pthread_mutex_lock(&c->mu);
                c->discard = 1;
                pthread_mutex_unlock(&c->mu);
                rt_upstream_cancel(c->w->up, c->handle);
                return answer_error(c, 503, "unavailable", "out of memory", NULL);
            }
            pthread_mutex_lock(&c->mu);
            c->phase = PH_STREAMING;
            pthread_mutex_unlock(&c->mu);
            atomic_fetch_add(&c->refs, 1); /* the response's reference */
            r = hs_response_reader(stream_reader, c, stream_free);
            if (r == NULL) {
                call_unref(c);
                return HS_NO;
            }
            hs_response_header(r, "Content-Type", "text/event-stream");
            hs_response_header(r, "Cache-Control", "no-cache");
            add_headers(c, r, &view, 0);
            hs_response_header(r, "Trailer", "x-tollgate-response-cost");
            c->resp = r;
            return hs_respond(c->conn, 200, r); /* takes r */
        }
        if (phase == PH_ATTEMPT_DONE) {
            struct rt_result res;
            enum rt_error_class ec;
            enum rt_step step;
            int cooled = 0;
            uint64_t dur = tg_now_mono_us() - c->attempt_start_us;

            c->upstream_us += dur;
            memset(&res, 0, sizeof(res));
            if (c->res_err == TG_ETIMEOUT)
                ec = RT_ERR_TIMEOUT;
            else if (c->res_err == TG_ETOOBIG)
                ec = RT_ERR_INVALID_RESPONSE;
            else if (c->res_err != 0)
                ec = RT_ERR_CONNECT;
            else
                ec = rt_router_classify((int)c->res_status, c->res_body, c->res_body_len);
            if (ec == RT_ERR_NONE && !c->stream) {
                if (rt_usage_from_json(c->up_api, c->res_body, c->res_body_len, &c->usage) != 0) {
                    ec = RT_ERR_INVALID_RESPONSE;
                    snprintf(msg, sizeof(msg),
                             "upstream returned a body that is not JSON (%zu bytes)",
                             c->res_body_len);
                } else {
                    c->cost_nusd = rt_usage_cost_nusd(c->target.dep, &c->usage);
                }
            } else if (ec == RT_ERR_NONE && c->stream) {
                /* 2xx stream that ended before any byte */
                ec = RT_ERR_INVALID_RESPONSE;
                snprintf(msg, sizeof(msg), "upstream stream ended without data");
            } else {
                upstream_message(c, msg, sizeof(msg));
            }
            res.http_status = (int32_t)c->res_status;
            res.error_class = ec;
            res.latency_ms = (uint32_t)(dur / 1000);
            res.message = ec == RT_ERR_NONE ? NULL : msg;
            res.message_len = ec == RT_ERR_NONE ? 0 : strlen(msg);
            res.retry_after_s = c->res_retry_after_s > 0 ? (uint32_t)c->res_retry_after_s : 0;
            rt_metrics_attempt(f->d.metrics, c->target.dep->id, outcome_of(ec));
            if (ec != RT_ERR_NONE)
                TG_DEBUG("msg=attempt_failed call_id=%s deployment=%s status=%ld class=%s "
                         "latency_ms=%u",
                         c->call_id, c->target.dep->id, c->res_status, rt_error_class_name(ec),
                         res.latency_ms);
            step = rt_router_report(f->d.router, &c->plan, &c->target, &res, tg_now_mono_ms(),
                                    &cooled);
            c->have_target = 0;
            if (cooled) {
                rt_metrics_cooldown(f->d.metrics, c->target.dep->id);
                TG_INFO("msg=deployment_cooldown deployment=%s group=%s", c->target.dep->id,
                        c->target.group);
            }
            if (step == RT_STEP_DONE)
                return answer_outcome(c);
            pthread_mutex_lock(&c->mu);
            c->phase = PH_BODY;
            pthread_mutex_unlock(&c->mu);
        }
        /* next attempt */
        if (atomic_load(&f->stopping))
            return answer_error(c, 503, "shutting_down", "router is shutting down", NULL);
        if (!rt_router_next(f->d.router, &c->plan, tg_now_mono_ms(), &c->target))
            return answer_outcome(c);
        c->have_target = 1;
        if (c->target.is_retry)
            rt_metrics_retry(f->d.metrics, c->target.group);
        if (c->prev_group[0] != '\0' && strcmp(c->prev_group, c->target.group) != 0)
            rt_metrics_fallback(f->d.metrics, c->prev_group, c->target.group);
        snprintf(c->prev_group, sizeof(c->prev_group), "%s", c->target.group);
        msg[0] = '\0';
        {
            int rc = attempt_start(c, msg, sizeof(msg));

            if (rc == TG_EINVAL) {
                /* this deployment cannot take the request: a final client error */
                struct rt_result res;

                memset(&res, 0, sizeof(res));
                res.http_status = 400;
                res.error_class = RT_ERR_BAD_REQUEST;
                res.message = msg;
                res.message_len = strlen(msg);
                rt_router_report(f->d.router, &c->plan, &c->target, &res, tg_now_mono_ms(),
                                 NULL);
                c->have_target = 0;
                return answer_error(c, 400, "bad_request", msg, rt_router_outcome(&c->plan));
            }
            if (rc != 0) {
                rt_metrics_reject(f->d.metrics, RT_REJECT_UPSTREAM_FULL);
                return answer_error(c, 503, "unavailable", msg, rt_router_outcome(&c->plan));
            }
        }
    }
}

/* ------------------------------------------------------------------ streaming */

/* Finish the routing side of a stream once, before its terminating event is sent. */
static void stream_finalize(struct call *c, enum rt_error_class ec, const char *msg)
{
    struct rt_result res;

    if (c->stream_finalized)
        return;
    c->stream_finalized = 1;
    if (c->sse_init)
        rt_sse_usage_get(&c->sse, &c->usage);
    if (c->tr_dir != RT_TRANSLATE_NONE && !c->usage.found) {
        c->usage.prompt_tokens = c->tr.prompt_tokens;
        c->usage.completion_tokens = c->tr.completion_tokens;
    }
    c->cost_nusd = rt_usage_cost_nusd(c->target.dep, &c->usage);
    if (c->have_target) {
        memset(&res, 0, sizeof(res));
        res.http_status = 200;
        res.error_class = ec;
        res.latency_ms = (uint32_t)((tg_now_mono_us() - c->attempt_start_us) / 1000);
        res.message = msg;
        res.message_len = msg != NULL ? strlen(msg) : 0;
        res.committed = 1;
        rt_router_report(c->f->d.router, &c->plan, &c->target, &res, tg_now_mono_ms(), NULL);
        c->have_target = 0;
        if (ec != RT_ERR_NONE)
            rt_metrics_attempt(c->f->d.metrics, c->target.dep->id, outcome_of(ec));
    }
    call_complete(c, 200, ec == RT_ERR_NONE ? NULL : rt_error_class_name(ec));
}

/* In-band error for a stream that already started. */
static void stream_error_event(struct call *c, const char *msg)
{
    char masked[RT_MESSAGE_MAX];
    json_t *j;
    char *s;

    if (c->out.data == NULL)
        return; /* no output buffer (out of memory): the stream just ends */
    rt_mask_apply(c->f->d.mask, msg, strlen(msg), masked, sizeof(masked));
    if (c->api == RT_API_MESSAGES)
        j = json_pack("{s:s,s:{s:s,s:s}}", "type", "error", "error", "type", "api_error",
                      "message", masked);
    else
        j = json_pack("{s:{s:s,s:s,s:s}}", "error", "message", masked, "type", "api_error",
                      "code", "stream_error");
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
static int is_terminator(const struct call *c, const char *event, const char *data, size_t dlen)
{
    if (c->up_api == RT_API_MESSAGES)
        return (event != NULL && strcmp(event, "message_stop") == 0) ||
               (dlen > 0 && strstr(data, "\"message_stop\"") != NULL);
    if (c->up_api == RT_API_RESPONSES)
        return event != NULL && (strcmp(event, "response.completed") == 0 ||
                                 strcmp(event, "response.failed") == 0 ||
                                 strcmp(event, "response.incomplete") == 0);
    return dlen == 6 && memcmp(data, "[DONE]", 6) == 0;
}

/* An OpenAI chunk with no choices and a usage object (the include_usage chunk). */
static int is_usage_only_chunk(const char *data, size_t dlen)
{
    json_t *j;
    int yes;

    if (dlen < 2 || data[0] != '{' || strstr(data, "\"usage\"") == NULL)
        return 0;
    j = json_loadb(data, dlen, 0, NULL);
    yes = json_is_object(json_object_get(j, "usage")) &&
          json_array_size(json_object_get(j, "choices")) == 0;
    json_decref(j);
    return yes;
}

/* Usage of a /v1/responses stream from its response.completed event (whose one line can be
 * longer than the usage parser's line buffer). */
static void responses_usage_from_event(struct call *c, const char *data, size_t dlen)
{
    json_t *j = json_loadb(data, dlen, 0, NULL);
    json_t *u = json_object_get(json_object_get(j, "response"), "usage");
    json_t *in = json_object_get(u, "input_tokens");
    json_t *out = json_object_get(u, "output_tokens");

    if (json_is_integer(in) && json_is_integer(out) && json_integer_value(in) >= 0 &&
        json_integer_value(out) >= 0) {
        c->usage.prompt_tokens = json_integer_value(in);
        c->usage.completion_tokens = json_integer_value(out);
        c->usage.found = 1;
    }
    json_decref(j);
}

/* Stream failed after it started: finish the routing side, say so in-band, stop the transfer. */
static void stream_fail(struct call *c, enum rt_error_class ec, const char *msg, int cancel)
{
    stream_finalize(c, ec, msg);
    stream_error_event(c, msg);
    if (cancel) {
        pthread_mutex_lock(&c->mu);
        c->discard = 1; /* on_data refuses further bytes, which ends the transfer */
        pthread_mutex_unlock(&c->mu);
        rt_upstream_cancel(c->w->up, c->handle);
    }
}

/* Move complete events from c->in to c->out, as many as fit. Reader thread; takes c->mu
 * briefly. Returns 1 when something was produced or the stream state changed. c->out is
 * allocated here and released by the reader once drained, and c->in is released here once
 * emptied: an idle stream (waiting for its provider's next event) holds neither. */
static int stream_pump(struct call *c)
{
    char raw[RT_STREAM_EVENT_MAX_BYTES];
    char data[RT_STREAM_EVENT_MAX_BYTES + 1];
    char event[64];
    size_t rl, dlen;
    int done, err, unpause;
    int produced = 0;

    for (;;) {
        unpause = 0;
        pthread_mutex_lock(&c->mu);
        rl = rt_sse_event_len(c->in, c->in_len);
        done = c->upstream_done;
        err = c->res_err;
        if (c->out.data == NULL && (rl > 0 || done || c->in_len >= RT_STREAM_EVENT_MAX_BYTES)) {
            /* something will be written: the output buffer is needed (c->out is reader-thread
             * state, allocated without the lock) */
            pthread_mutex_unlock(&c->mu);
            if (tg_buf_init(&c->out, RT_STREAM_OUT_MAX_BYTES) != 0) {
                /* nothing can be written to the client: end the stream (cost as known so far;
                 * the error event cannot be written either) */
                stream_fail(c, RT_ERR_INVALID_RESPONSE, "out of memory", 1);
                return 1;
            }
            continue;
        }
        if (rl > RT_STREAM_EVENT_MAX_BYTES ||
            (rl == 0 && c->in_len >= RT_STREAM_EVENT_MAX_BYTES)) {
            pthread_mutex_unlock(&c->mu);
            stream_fail(c, RT_ERR_INVALID_RESPONSE, "upstream stream event too large", 1);
            return 1;
        }
        /* take the event only when its output surely fits: passthrough needs rl bytes, a
         * translation starts from an empty output buffer */
        if (rl > 0 && ((c->tr_dir == RT_TRANSLATE_NONE && c->out.len + rl > c->out.cap) ||
                       (c->tr_dir != RT_TRANSLATE_NONE && c->out.len > 0))) {
            pthread_mutex_unlock(&c->mu);
            return produced;
        }
        if (rl > 0) {
            memcpy(raw, c->in, rl);
            memmove(c->in, c->in + rl, c->in_len - rl);
            c->in_len -= rl;
            if (c->in_len == 0) {
                free(c->in);
                c->in = NULL;
            }
            if (c->paused) {
                c->paused = 0;
                unpause = 1;
            }
        }
        pthread_mutex_unlock(&c->mu);
        if (unpause)
            rt_upstream_unpause(c->w->up, c->handle);

        if (rl == 0) {
            if (!done)
                return produced;
            if (err != 0 || !c->saw_terminator) {
                int timeout = err == TG_ETIMEOUT;

                stream_fail(c, timeout ? RT_ERR_TIMEOUT : RT_ERR_INVALID_RESPONSE,
                            timeout ? "upstream stream timed out" : "upstream stream ended early",
                            0);
            }
            return 1;
        }
        if (c->sse_init)
            rt_sse_usage_feed(&c->sse, raw, rl);
        rt_sse_parse(raw, rl, event, sizeof(event), data, sizeof(data), &dlen);
        produced = 1;
        if (is_terminator(c, event, data, dlen)) {
            c->saw_terminator = 1;
            if (c->up_api == RT_API_RESPONSES)
                responses_usage_from_event(c, data, dlen);
            /* the translator writes its closing events (usage is known by now) */
            if (c->tr_dir != RT_TRANSLATE_NONE)
                rt_translate_stream_event(&c->tr, event, data, dlen, &c->out);
            /* routing outcome and completion hook before the terminating event leaves */
            stream_finalize(c, RT_ERR_NONE, NULL);
            if (c->tr_dir == RT_TRANSLATE_NONE)
                tg_buf_append(&c->out, raw, rl);
            return 1;
        }
        if (c->tr_dir != RT_TRANSLATE_NONE) {
            int rc = dlen > 0 ? rt_translate_stream_event(&c->tr, event, data, dlen, &c->out) : 0;

            if (rc == TG_EPROTO || rc == TG_EFULL || c->out.truncated) {
                tg_buf_reset(&c->out);
                c->out.truncated = 0;
                stream_fail(c, RT_ERR_INVALID_RESPONSE,
                            "upstream sent a stream event that cannot be translated", 1);
                return 1;
            }
            if (c->tr.finished) {
                /* an in-band upstream error ended the translated stream */
                stream_finalize(c, RT_ERR_INVALID_RESPONSE, "upstream stream error event");
                return 1;
            }
        } else if (!(c->strip_usage_chunk && is_usage_only_chunk(data, dlen))) {
            tg_buf_append(&c->out, raw, rl);
        }
    }
}

static ssize_t stream_reader(void *cls, char *buf, size_t max)
{
    struct call *c = cls;

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

                hs_response_trailer(c->resp, "x-tollgate-response-cost",
                                    cost_text(v, c->cost_nusd));
                c->resp = NULL;
            }
            return HS_READER_END;
        }
        if (stream_pump(c))
            continue;
        /* nothing ready: park the connection until upstream bytes arrive */
        pthread_mutex_lock(&c->mu);
        if (c->in_len > 0 && rt_sse_event_len(c->in, c->in_len) > 0) {
            pthread_mutex_unlock(&c->mu);
            continue;
        }
        if (c->upstream_done) {
            pthread_mutex_unlock(&c->mu);
            continue;
        }
        c->suspended = 1;
        hs_suspend(c->conn);
        pthread_mutex_unlock(&c->mu);
        return 0;
    }
}

static void stream_free(void *cls)
{
    call_unref(cls);
}

/* ------------------------------------------------------------------ request handling */

static int endpoint_of(const char *url, enum rt_api *api, const char **name, int *anthropic)
{
    *anthropic = 0;
    if (strcmp(url, "/v1/chat/completions") == 0 || strcmp(url, "/chat/completions") == 0) {
        *api = RT_API_CHAT;
        *name = "/v1/chat/completions";
    } else if (strcmp(url, "/v1/embeddings") == 0 || strcmp(url, "/embeddings") == 0) {
        *api = RT_API_EMBEDDINGS;
        *name = "/v1/embeddings";
    } else if (strcmp(url, "/v1/responses") == 0 || strcmp(url, "/responses") == 0) {
        *api = RT_API_RESPONSES;
        *name = "/v1/responses";
    } else if (strcmp(url, "/v1/messages") == 0) {
        *api = RT_API_MESSAGES;
        *name = "/v1/messages";
        *anthropic = 1;
    } else {
        return -1;
    }
    return 0;
}

/* The credential of a request: Authorization: Bearer <token>, else x-api-key, blanks around it
 * removed. NULL when neither header carries one. */
static const char *credential(struct hs_conn *conn, size_t *len)
{
    const char *h = hs_header(conn, "Authorization");
    const char *tok = NULL;
    size_t tlen;

    if (h != NULL && strncasecmp(h, "Bearer ", 7) == 0)
        tok = h + 7;
    if (tok == NULL)
        tok = hs_header(conn, "x-api-key");
    if (tok == NULL)
        return NULL;
    while (*tok == ' ')
        tok++;
    tlen = strlen(tok);
    while (tlen > 0 && tok[tlen - 1] == ' ')
        tlen--;
    *len = tlen;
    return tok;
}

/* 1 when the request carries the master key. Constant time in the key's bytes (both sides are
 * hashed first, so neither length nor content shows in the timing). */
static int is_master(const struct rt_front *f, struct hs_conn *conn)
{
    size_t tlen = 0;
    const char *tok = credential(conn, &tlen);

    return tok != NULL && f->d.cfg->master_key[0] != '\0' &&
           tg_secret_eq(tok, tlen, f->d.cfg->master_key, strlen(f->d.cfg->master_key));
}

/* Authenticate from the request's headers alone (Authorization: Bearer or x-api-key): the
 * master key, a virtual key of the table, or — only when the config allows it explicitly
 * (tollgate.allow_unauthenticated) — no credential at all. On success *keys holds the table the
 * key was found in (release with rt_keys_release) and *key the key (NULL for the master key or
 * an unauthenticated request). Returns 0, or TG_EAUTH with msg. HTTP threads. */
static int authenticate(struct rt_front *f, struct hs_conn *conn, struct rt_keys_table **keys,
                        const struct rt_key **key, char *msg, size_t cap)
{
    size_t tlen = 0;
    const char *tok = credential(conn, &tlen);

    *keys = NULL;
    *key = NULL;
    if (tok == NULL || tlen == 0) {
        if (f->d.cfg->allow_unauthenticated)
            return 0;
        snprintf(msg, cap, "No API key provided. Send Authorization: Bearer <key> or x-api-key.");
        return TG_EAUTH;
    }
    if (is_master(f, conn))
        return 0;
    *keys = rt_keys_acquire(f->d.keys);
    *key = rt_keys_lookup(*keys, tok, tlen);
    if (*key == NULL) {
        snprintf(msg, cap, "Invalid API key.");
        return TG_EAUTH;
    }
    if ((*key)->expires_epoch_ms > 0 && (int64_t)tg_now_epoch_ms() >= (*key)->expires_epoch_ms) {
        *key = NULL;
        snprintf(msg, cap, "API key expired.");
        return TG_EAUTH;
    }
    return 0;
}

static void read_traceparent(struct call *c)
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
static int scan_request(struct call *c)
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
static int request_start(struct call *c)
{
    struct rt_front *f = c->f;
    json_error_t jerr;
    char msg[RT_MESSAGE_MAX];
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
            size_t k = model_len < sizeof(c->model_requested) - 1
                           ? model_len
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
                                      f->d.cfg->max_json_depth, f->d.cfg->max_json_elements,
                                      &jerr);
        free(c->body);
        c->body = NULL;
        c->body_len = 0;
        if (c->req == NULL || !json_is_object(c->req)) {
            rt_metrics_reject(f->d.metrics, RT_REJECT_BAD_JSON);
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
            return answer_error(c, 400, "invalid_json", msg, NULL);
        }
        model = json_object_get(c->req, "model");
        if (json_is_string(model)) {
            model_is_string = 1;
            model_len = json_string_length(model);
            snprintf(c->model_requested, sizeof(c->model_requested), "%s",
                     json_string_value(model));
        }
        c->stream =
            c->api != RT_API_EMBEDDINGS && json_is_true(json_object_get(c->req, "stream"));
        c->include_usage = json_is_true(
            json_object_get(json_object_get(c->req, "stream_options"), "include_usage"));
        disable_fallbacks = json_is_true(json_object_get(c->req, "disable_fallbacks"));
    }
    read_traceparent(c);
    if (!model_is_string || model_len == 0)
        return answer_error(c, 400, "invalid_model", "model: a non-empty string is required",
                            NULL);
    if (f->d.admit != NULL && f->d.admit(f->d.admit_ud) != 0) {
        rt_metrics_reject(f->d.metrics, RT_REJECT_NOT_ADMITTED);
        return answer_error(c, 503, "not_admitted",
                            "router cannot record this request now (event spool full)", NULL);
    }
    if (model_len >= RT_NAME_CAP)
        return answer_error(c, 400, "invalid_model", "model: name too long", NULL);
    rnd = thread_rand();
    rc = rt_router_begin(f->d.router, c->key, c->model_requested, disable_fallbacks, rnd,
                         tg_now_mono_ms(), &c->plan);
    c->plan_begun = 1;
    if (rc != 0) {
        const struct rt_outcome *o = rt_router_outcome(&c->plan);

        return answer_error(c, o->status > 0 ? o->status : 400, o->error_class, o->message, o);
    }
    return drive(c);
}

/* ------------------------------------------------------------------ key admin API */

static int answer_text(struct hs_conn *conn, int status, const char *ctype, char *body);
static void worker_wake(struct worker *w);

/* Answer of the key API: on this thread (decided at once) or on the control thread. The body
 * is copied; the connection is resumed when it was suspended waiting for this. */
static void admin_done(int status, const char *body, size_t len, void *ud)
{
    struct call *c = ud;
    char *copy = malloc(len + 1);

    pthread_mutex_lock(&c->mu);
    free(c->res_body);
    c->res_body = copy;
    c->res_body_len = 0;
    if (copy != NULL) {
        memcpy(copy, body, len);
        copy[len] = '\0';
        c->res_body_len = len;
    }
    c->res_status = copy != NULL ? status : 500;
    c->phase = PH_ATTEMPT_DONE;
    resume_locked(c);
    pthread_mutex_unlock(&c->mu);
    call_unref(c);
}

/* Admin requests (the master key was checked from the headers): the body is read like any
 * other (capped); then the key API answers, possibly after the control topic confirmed the change (the connection is
 * suspended meanwhile, holding no thread). Never logs a body or a key parameter. */
static int admin_step(struct call *c, const char *method)
{
    struct rt_front *f = c->f;
    int phase;

    pthread_mutex_lock(&c->mu);
    phase = c->phase;
    pthread_mutex_unlock(&c->mu);
    if (phase == PH_ATTEMPT_DONE) {
        char *body = c->res_body;
        int status = (int)c->res_status;

        c->res_body = NULL;
        if (body == NULL)
            return answer_text(c->conn, 500, "application/json",
                               error_body(f, 0, 500, "internal_error", "out of memory"));
        pthread_mutex_lock(&c->mu);
        c->phase = PH_FINAL;
        pthread_mutex_unlock(&c->mu);
        return answer_text(c->conn, status, "application/json", body);
    }
    if (phase != PH_BODY)
        return HS_YES; /* resumed early: wait for the answer */
    pthread_mutex_lock(&c->mu);
    c->phase = PH_WAIT;
    pthread_mutex_unlock(&c->mu);
    atomic_fetch_add(&c->refs, 1); /* held by the pending answer */
    rt_key_api_handle(f->d.key_api, method, c->admin_path,
                      hs_query_arg(c->conn, "key"),
                      c->body != NULL ? c->body : "", c->body_len, admin_done, c);
    pthread_mutex_lock(&c->mu);
    if (c->phase == PH_WAIT) {
        c->suspended = 1;
        hs_suspend(c->conn);
        pthread_mutex_unlock(&c->mu);
        return HS_YES;
    }
    pthread_mutex_unlock(&c->mu);
    return admin_step(c, method); /* answered at once */
}

/* ------------------------------------------------------------------ GET endpoints */

static int answer_text(struct hs_conn *conn, int status, const char *ctype, char *body)
{
    return queue_body(conn, status, body, ctype, NULL, NULL, 0);
}

static int serve_models(struct rt_front *f, struct hs_conn *conn)
{
    struct call tmp;
    char msg[RT_MESSAGE_MAX];
    json_t *data = json_array();
    json_t *out;
    char *s;
    const struct rt_config *cfg = f->d.cfg;

    memset(&tmp, 0, sizeof(tmp));
    tmp.f = f;
    tmp.conn = conn;
    if (authenticate(f, conn, &tmp.keys, &tmp.key, msg, sizeof(msg)) != 0) {
        rt_keys_release(&tmp.keys);
        json_decref(data);
        rt_metrics_reject(f->d.metrics, RT_REJECT_AUTH);
        return answer_text(conn, 401, "application/json",
                           error_body(f, 0, 401, "invalid_api_key", msg));
    }
    for (uint32_t i = 0; i < cfg->n_deployments; i++) {
        const char *g = cfg->deployments[i].group;
        int seen = 0;

        for (uint32_t j = 0; j < i; j++) {
            if (strcmp(cfg->deployments[j].group, g) == 0) {
                seen = 1;
                break;
            }
        }
        if (!seen && rt_key_allows(tmp.key, g))
            json_array_append_new(data, json_pack("{s:s,s:s,s:i,s:s}", "id", g, "object",
                                                  "model", "created", 0, "owned_by", "tollgate"));
    }
    for (uint32_t i = 0; i < cfg->n_aliases; i++) {
        if (cfg->aliases[i].hidden || !rt_key_allows(tmp.key, cfg->aliases[i].alias))
            continue;
        json_array_append_new(data, json_pack("{s:s,s:s,s:i,s:s}", "id", cfg->aliases[i].alias,
                                              "object", "model", "created", 0, "owned_by",
                                              "tollgate"));
    }
    if (tmp.key != NULL) {
        for (uint32_t i = 0; i < tmp.key->n_aliases; i++) {
            if (!rt_key_allows(tmp.key, tmp.key->aliases[i].alias))
                continue;
            json_array_append_new(data, json_pack("{s:s,s:s,s:i,s:s}", "id",
                                                  tmp.key->aliases[i].alias, "object", "model",
                                                  "created", 0, "owned_by", "tollgate"));
        }
    }
    rt_keys_release(&tmp.keys);
    out = json_pack("{s:s,s:o}", "object", "list", "data", data);
    s = out != NULL ? json_dumps(out, JSON_COMPACT) : NULL;
    json_decref(out);
    if (s == NULL)
        s = strdup("{\"object\":\"list\",\"data\":[]}");
    return answer_text(conn, 200, "application/json", s);
}

static int serve_metrics(struct rt_front *f, struct hs_conn *conn)
{
    struct tg_buf b;
    struct rt_upstream_stats us;

    if (tg_buf_init(&b, TG_METRICS_BODY_MAX_BYTES) != 0)
        return HS_NO;
    rt_metrics_write(f->d.metrics, &b);
    memset(&us, 0, sizeof(us));
    for (unsigned i = 0; i < f->nworkers; i++) {
        struct rt_upstream_stats one;

        rt_upstream_get_stats(f->workers[i].up, &one);
        us.submitted += one.submitted;
        us.cancelled += one.cancelled;
        us.timeouts += one.timeouts;
        us.too_big += one.too_big;
        us.full += one.full;
        us.active += one.active;
        us.native += one.native;
        us.native_full += one.native_full;
    }
    tg_prom_counter(&b, "tollgate_router_upstream_transfers_total",
                    "Upstream transfers started.", us.submitted);
    tg_prom_counter(&b, "tollgate_router_upstream_native_transfers_total",
                    "Upstream transfers through the built-in HTTP/1.1 client (the rest: libcurl).",
                    us.native);
    tg_prom_counter(&b, "tollgate_router_upstream_native_table_full_total",
                    "Plain-http transfers left to libcurl because the built-in client's origin or "
                    "name table was full.",
                    us.native_full);
    tg_prom_counter(&b, "tollgate_router_upstream_cancelled_total",
                    "Upstream transfers aborted (client gone, shutdown).", us.cancelled);
    tg_prom_counter(&b, "tollgate_router_upstream_timeouts_total", "Upstream transfers timed out.",
                    us.timeouts);
    tg_prom_counter(&b, "tollgate_router_upstream_too_big_total",
                    "Upstream responses over max_response_bytes.", us.too_big);
    tg_prom_counter(&b, "tollgate_router_upstream_full_total",
                    "Transfers refused because every upstream slot was in use.", us.full);
    tg_prom_gauge(&b, "tollgate_router_upstream_active", "Upstream transfers in progress.",
                  (double)us.active);
    {
        struct hs_stats hs;

        memset(&hs, 0, sizeof(hs));
        for (unsigned i = 0; i < f->nworkers; i++) {
            struct hs_stats one;

            hs_server_stats(f->workers[i].srv, &one);
            hs.accepted += one.accepted;
            hs.refused += one.refused;
            hs.refused_ip += one.refused_ip;
            hs.bad_requests += one.bad_requests;
            hs.timeouts += one.timeouts;
            hs.header_timeouts += one.header_timeouts;
            hs.body_timeouts += one.body_timeouts;
            hs.send_timeouts += one.send_timeouts;
            hs.linger_cut += one.linger_cut;
            hs.open += one.open;
        }
        tg_prom_counter(&b, "tollgate_router_http_connections_accepted_total",
                        "Client connections accepted.", hs.accepted);
        {
            static const char refused[] = "tollgate_router_http_connections_refused_total";
            struct tg_label l = {"reason", "max_connections"};

            tg_prom_header(&b, refused, "counter",
                           "Client connections answered 503 and closed at once: max_connections "
                           "or max_connections_per_ip reached.");
            tg_prom_sample_u64(&b, refused, &l, 1, hs.refused);
            l.value = "per_ip";
            tg_prom_sample_u64(&b, refused, &l, 1, hs.refused_ip);
        }
        tg_prom_gauge(&b, "tollgate_router_http_connections_open", "Client connections open.",
                      (double)hs.open);
        tg_prom_counter(&b, "tollgate_router_http_bad_requests_total",
                        "Requests the HTTP server answered itself (400, 431, 501, 505): "
                        "malformed, control bytes, headers over 16 KiB, unsupported coding or "
                        "version.",
                        hs.bad_requests);
        tg_prom_counter(&b, "tollgate_router_http_idle_timeouts_total",
                        "Kept-alive client connections closed idle between requests "
                        "(keepalive_timeout_ms).",
                        hs.timeouts);
        {
            static const char tmo[] = "tollgate_router_http_timeouts_total";
            struct tg_label l = {"phase", "header"};

            tg_prom_header(&b, tmo, "counter",
                           "Client connections closed by a deadline: the head "
                           "(header_timeout_ms, 408), the body (body_timeout_ms and "
                           "body_min_rate, 408), a response the client took nothing of "
                           "(send_timeout_ms).");
            tg_prom_sample_u64(&b, tmo, &l, 1, hs.header_timeouts);
            l.value = "body";
            tg_prom_sample_u64(&b, tmo, &l, 1, hs.body_timeouts);
            l.value = "send";
            tg_prom_sample_u64(&b, tmo, &l, 1, hs.send_timeouts);
        }
        tg_prom_counter(&b, "tollgate_router_http_linger_cut_total",
                        "Connections closed after dropping linger_max_bytes the client still "
                        "sent after an early answer (401, 413).",
                        hs.linger_cut);
    }
    return answer_text(conn, 200, TG_PROM_CONTENT_TYPE, b.data); /* takes b.data */
}

static int serve_get(struct rt_front *f, struct hs_conn *conn, const char *url)
{
    if (strcmp(url, "/health/liveness") == 0)
        return answer_text(conn, 200, "application/json", strdup("{\"status\":\"alive\"}"));
    if (strcmp(url, "/health/readiness") == 0) {
        struct tg_buf b;

        if (tg_buf_init(&b, 1024) != 0)
            return HS_NO;
        rt_health_readiness_json(f->d.health, &b);
        return answer_text(conn, rt_health_ready(f->d.health) ? 200 : 503, "application/json",
                           b.data);
    }
    if (strcmp(url, "/metrics") == 0)
        return serve_metrics(f, conn);
    if (strcmp(url, "/v1/models") == 0 || strcmp(url, "/models") == 0)
        return serve_models(f, conn);
    return answer_text(conn, 404, "application/json",
                       error_body(f, 0, 404, "not_found", "Unknown path"));
}

/* 413 for a body over max_body_bytes, in the API's error shape (the key API: no call). */
static int answer_too_large(struct rt_front *f, struct call *c, struct hs_conn *conn)
{
    char msg[160];

    rt_metrics_reject(f->d.metrics, RT_REJECT_BODY_TOO_LARGE);
    snprintf(msg, sizeof(msg), "Request body too large: limit is %llu bytes",
             (unsigned long long)f->d.cfg->max_body_bytes);
    if (c->admin) {
        c->phase = PH_FINAL;
        return answer_text(conn, 413, "application/json",
                           error_body(f, 0, 413, "request_too_large", msg));
    }
    return answer_error(c, 413, "request_too_large", msg, NULL);
}

/* After authentication: the body's Content-Length against max_body_bytes (413 at once, before
 * a byte of it is read), and its buffer when the length is known. */
static int admit_body(struct rt_front *f, struct call *c, struct hs_conn *conn)
{
    const char *cl = hs_header(conn, "Content-Length");

    if (cl != NULL) {
        unsigned long long n = strtoull(cl, NULL, 10); /* digits only: hparse checked */

        if (n > f->d.cfg->max_body_bytes)
            return answer_too_large(f, c, conn);
        if (n > 0) {
            c->body = malloc((size_t)n + 1);
            if (c->body == NULL)
                return HS_NO;
            c->body_alloc = (size_t)n + 1;
        }
    }
    return HS_YES;
}

/* ------------------------------------------------------------------ HTTP server callbacks */

static int access_cb(void *cls, struct hs_conn *conn, const char *url, const char *method,
                     const char *version, const char *upload, size_t *upload_size,
                     void **con_cls)
{
    struct worker *w = cls;
    struct rt_front *f = w->f;
    struct call *c = *con_cls;
    int phase;

    (void)version;

    if (c == NULL) {
        enum rt_api api;
        const char *name;
        int anthropic;

        if (hs_head_bytes(conn) > RT_FRONT_HEADER_MAX_BYTES) {
            /* answered at the HTTP layer, like the server's own 431: not a call, no event */
            char msg[96];

            rt_metrics_reject(f->d.metrics, RT_REJECT_HEADERS_TOO_LARGE);
            snprintf(msg, sizeof(msg), "Request headers too large: limit is %u bytes",
                     RT_FRONT_HEADER_MAX_BYTES);
            anthropic = strcmp(url, "/v1/messages") == 0;
            return answer_text(conn, 431, "application/json",
                               error_body(f, anthropic, 431, "request_header_fields_too_large",
                                          msg));
        }
        if (f->d.key_api != NULL && f->d.cfg->master_key[0] != '\0' &&
            rt_key_api_is_admin_path(url) &&
            (strcmp(method, "GET") == 0 || strcmp(method, "POST") == 0)) {
            /* the master key from the headers, before the body is read */
            if (!is_master(f, conn)) {
                rt_metrics_reject(f->d.metrics, RT_REJECT_AUTH);
                return answer_text(conn, 401, "application/json",
                                   error_body(f, 0, 401, "invalid_api_key",
                                              "The key API needs the master key: Authorization: "
                                              "Bearer <master_key>."));
            }
            c = call_new(f, conn);
            if (c == NULL)
                return HS_NO;
            c->w = w;
            c->admin = 1;
            snprintf(c->admin_path, sizeof(c->admin_path), "%s", url);
            *con_cls = c;
            return admit_body(f, c, conn);
        }
        if (strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0)
            return serve_get(f, conn, url);
        if (strcmp(method, "POST") != 0 || endpoint_of(url, &api, &name, &anthropic) != 0)
            return answer_text(conn, 404, "application/json",
                               error_body(f, 0, 404, "not_found", "Unknown path or method"));
        /* While draining (SIGTERM) a request that arrives on a kept-alive connection is still
         * served, with Connection: close, so that the client reconnects elsewhere; only after
         * the grace period (stopping) is it refused. */
        if (atomic_load(&f->stopping)) {
            /* Past the grace period: close the kept-alive connection without an answer. The
             * request was not processed, so the client may retry it on a new connection (HTTP
             * clients do so for a reused connection that closes before any response byte). */
            rt_metrics_reject(f->d.metrics, RT_REJECT_SHUTTING_DOWN);
            return HS_NO;
        }
        /* The key, from the headers alone, before anything is spent on the request: no
         * in-flight slot, body buffer, 100-continue or parse for an unauthenticated one. Its 401
         * is not a call (no event: nothing to bill, and no way for an anonymous client to write
         * to the spend pipeline); the server closes the connection after dropping what the
         * client still sends, bounded. */
        {
            struct rt_keys_table *keys = NULL;
            const struct rt_key *key = NULL;
            char msg[RT_MESSAGE_MAX];

            if (authenticate(f, conn, &keys, &key, msg, sizeof(msg)) != 0) {
                rt_keys_release(&keys);
                rt_metrics_reject(f->d.metrics, RT_REJECT_AUTH);
                return answer_text(conn, 401, "application/json",
                                   error_body(f, anthropic, 401, "invalid_api_key", msg));
            }
            c = call_new(f, conn);
            if (c == NULL) {
                rt_keys_release(&keys);
                return HS_NO;
            }
            c->keys = keys;
            c->key = key;
        }
        c->w = w;
        *con_cls = c;
        c->api = api;
        c->endpoint = name;
        c->anthropic_shape = anthropic;
        if (atomic_fetch_add(&f->in_flight, 1) >= (int64_t)f->d.cfg->max_in_flight) {
            atomic_fetch_sub(&f->in_flight, 1);
            rt_metrics_reject(f->d.metrics, RT_REJECT_IN_FLIGHT_FULL);
            return answer_error(c, 503, "in_flight_full",
                                "router is at its in-flight request limit", NULL);
        }
        c->counted = 1;
        rt_metrics_in_flight_add(f->d.metrics, 1);
        return admit_body(f, c, conn);
    }
    /* the phase is written by the upstream thread too (under mu) once a transfer exists */
    pthread_mutex_lock(&c->mu);
    phase = c->phase;
    pthread_mutex_unlock(&c->mu);
    if (phase == PH_FINAL) {
        *upload_size = 0; /* discard the rest of the body */
        return HS_YES;
    }
    if (phase == PH_BODY && !c->plan_begun && *upload_size > 0) {
        size_t n = *upload_size;

        if (c->body_len + n > f->d.cfg->max_body_bytes) {
            /* no Content-Length (chunked): the cap is hit while reading. Answered at once; the
             * HTTP server closes the connection after the answer and drops what the client
             * still sends, for a bounded time. */
            *upload_size = 0;
            free(c->body);
            c->body = NULL;
            c->body_len = 0;
            c->body_alloc = 0;
            return answer_too_large(f, c, conn);
        }
        if (c->body_len + n + 1 > c->body_alloc) {
            size_t want = c->body_alloc ? c->body_alloc * 2 : 16384;
            char *nb;

            while (want < c->body_len + n + 1)
                want *= 2;
            if (want > f->d.cfg->max_body_bytes + 1)
                want = f->d.cfg->max_body_bytes + 1;
            nb = realloc(c->body, want);
            if (nb == NULL)
                return HS_NO;
            c->body = nb;
            c->body_alloc = want;
        }
        memcpy(c->body + c->body_len, upload, n);
        c->body_len += n;
        *upload_size = 0;
        return HS_YES;
    }
    if (c->admin)
        return admin_step(c, method);
    if (!c->plan_begun && phase == PH_BODY)
        return request_start(c);
    return drive(c);
}

static void completed_cb(void *cls, struct hs_conn *conn, void **con_cls, enum hs_toe toe)
{
    struct worker *w = cls;
    struct rt_front *f = w->f;
    struct call *c = *con_cls;
    int cancel = 0;

    (void)conn;
    if (c == NULL)
        return;
    *con_cls = NULL;
    pthread_mutex_lock(&c->mu);
    c->client_gone = 1;
    c->conn = NULL; /* nothing resumes it from now on (resume_locked) */
    c->suspended = 0;
    if (c->xfer_active)
        cancel = 1;
    pthread_mutex_unlock(&c->mu);
    if (cancel)
        rt_upstream_cancel(c->w->up, c->handle);
    if (!c->event_done && c->plan_begun) {
        /* the client went away before the outcome was final */
        if (c->sse_init)
            rt_sse_usage_get(&c->sse, &c->usage);
        if (c->have_target && c->target.dep != NULL)
            c->cost_nusd = rt_usage_cost_nusd(c->target.dep, &c->usage);
        TG_DEBUG("msg=client_gone call_id=%s toe=%d", c->call_id, (int)toe);
        call_complete(c, 499, "client_closed");
    }
    if (c->counted) {
        atomic_fetch_sub(&f->in_flight, 1);
        rt_metrics_in_flight_add(f->d.metrics, -1);
    }
    call_unref(c);
}

/* ------------------------------------------------------------------ lifecycle */

static int parse_listen(const char *s, struct sockaddr_in *sa, char *err, size_t errlen)
{
    char host[64];
    const char *colon = strrchr(s, ':');
    long port;
    char *end;

    memset(sa, 0, sizeof(*sa));
    sa->sin_family = AF_INET;
    if (colon == NULL || (size_t)(colon - s) >= sizeof(host)) {
        snprintf(err, errlen, "listen: expected host:port");
        return TG_EINVAL;
    }
    memcpy(host, s, (size_t)(colon - s));
    host[colon - s] = '\0';
    port = strtol(colon + 1, &end, 10);
    if (*end != '\0' || port < 0 || port > 65535) {
        snprintf(err, errlen, "listen: bad port");
        return TG_EINVAL;
    }
    if (host[0] == '\0' || strcmp(host, "*") == 0)
        snprintf(host, sizeof(host), "0.0.0.0");
    if (strcmp(host, "localhost") == 0)
        snprintf(host, sizeof(host), "127.0.0.1");
    if (inet_pton(AF_INET, host, &sa->sin_addr) != 1) {
        snprintf(err, errlen, "listen: host must be an IPv4 address");
        return TG_EINVAL;
    }
    sa->sin_port = htons((uint16_t)port);
    return 0;
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    struct rt_front *f = w->f;
    struct epoll_event evs[64];

    while (!atomic_load(&f->loops_stop)) {
        int t = rt_upstream_timeout_ms(w->up);
        int ht = hs_server_timeout_ms(w->srv);
        int n;

        if (ht >= 0 && (t < 0 || ht < t))
            t = ht;
        n = epoll_wait(w->epfd, evs, 64, t);
        for (int i = 0; i < n; i++) {
            uint64_t tag = evs[i].data.u64;

            if (tag == RT_FRONT_TAG_STOP) {
                uint64_t v;
                ssize_t r = read(w->stopfd, &v, sizeof(v));

                (void)r;
            } else if (tag >= HS_TAG_LIMIT) {
                hs_server_event(w->srv, &evs[i]);
            }
            /* RT_FRONT_TAG_UPSTREAM: rt_upstream_run below */
        }
        if (atomic_load(&f->quiesced) && !w->quiesced) {
            hs_server_quiesce(w->srv);
            w->quiesced = 1;
        }
        hs_server_housekeep(w->srv); /* bounded: a burst of it spreads over turns */
        /* providers, then the connections their results resumed; repeated while runs resume
         * connections (a resumed request may start the next attempt), bounded per turn */
        for (int k = 0; k < RT_FRONT_RUNS_PER_TURN; k++) {
            rt_upstream_run(w->up);
            if (!hs_server_run(w->srv))
                break;
        }
    }
    return NULL;
}

static void worker_wake(struct worker *w)
{
    uint64_t one = 1;
    ssize_t r;

    if (w->stopfd < 0)
        return;
    r = write(w->stopfd, &one, sizeof(one));
    (void)r;
}

static void worker_wake_cb(void *ud)
{
    worker_wake(ud);
}

static int worker_init(struct rt_front *f, struct worker *w, struct sockaddr_in *sa,
                       unsigned conn_limit, unsigned xfers, char *err, size_t errlen)
{
    struct rt_upstream_config ucfg;
    struct hs_config hc;
    struct epoll_event ev;
    char herr[160];

    w->f = f;
    w->epfd = epoll_create1(EPOLL_CLOEXEC);
    w->stopfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (w->epfd < 0 || w->stopfd < 0) {
        snprintf(err, errlen, "cannot set up the event loop");
        return TG_EIO;
    }
    memset(&ucfg, 0, sizeof(ucfg));
    ucfg.max_transfers = xfers;
    ucfg.max_host_connections = (long)xfers;
    ucfg.max_total_connections = (long)xfers;
    ucfg.embedded = 1;
    ucfg.native = f->d.cfg->upstream_native;
    w->up = rt_upstream_create(&ucfg, err, errlen);
    if (w->up == NULL)
        return TG_ENOMEM;
    memset(&hc, 0, sizeof(hc));
    hc.epfd = w->epfd;
    hc.addr = *sa;
    hc.reuse_port = 1;
    hc.max_connections = conn_limit;
    hc.ipcap = f->ipcap;
    hc.header_timeout_ms = f->d.cfg->header_timeout_ms;
    hc.body_timeout_ms = f->d.cfg->body_timeout_ms;
    hc.body_min_rate = f->d.cfg->body_min_rate;
    hc.keepalive_timeout_ms = f->d.cfg->keepalive_timeout_ms;
    hc.send_timeout_ms = f->d.cfg->send_timeout_ms;
    /* after an early answer (401, 413): enough to let a client finish sending a body of the
     * largest allowed size, so that it reads the answer instead of a reset */
    hc.linger_max_bytes = (size_t)f->d.cfg->max_body_bytes + 64u * 1024u;
    hc.head_max_bytes = RT_FRONT_HEAD_HARD_MAX_BYTES;
    hc.backlog = 1024;
    hc.handler = access_cb;
    hc.handler_cls = w;
    hc.completed = completed_cb;
    hc.completed_cls = w;
    hc.wake = worker_wake_cb;
    hc.wake_cls = w;
    w->srv = hs_server_create(&hc, herr, sizeof(herr));
    if (w->srv == NULL) {
        snprintf(err, errlen, "cannot listen on %s: %s", f->d.cfg->listen, herr);
        return TG_EIO;
    }
    if (sa->sin_port == 0)
        sa->sin_port = htons(hs_server_port(w->srv)); /* the next loops share the port */
    memset(&ev, 0, sizeof(ev));
    ev.events = EPOLLIN;
    ev.data.u64 = RT_FRONT_TAG_UPSTREAM;
    if (epoll_ctl(w->epfd, EPOLL_CTL_ADD, rt_upstream_fd(w->up), &ev) != 0) {
        snprintf(err, errlen, "cannot set up the event loop");
        return TG_EIO;
    }
    ev.data.u64 = RT_FRONT_TAG_STOP;
    if (epoll_ctl(w->epfd, EPOLL_CTL_ADD, w->stopfd, &ev) != 0) {
        snprintf(err, errlen, "cannot set up the event loop");
        return TG_EIO;
    }
    return 0;
}

uint64_t rt_front_fds_needed(const struct rt_config *cfg)
{
    uint64_t loops = cfg->threads > 0 ? cfg->threads : 1;

    /* client connections (plus one being refused per loop), provider connections (each loop
     * may hold one per upstream slot), and the rest: listening sockets, epoll sets and
     * eventfds, the spool's files, Kafka's broker connections, libcurl's own descriptors */
    return (uint64_t)cfg->max_connections + loops +
           loops * ((uint64_t)cfg->max_in_flight + RT_FRONT_EXTRA_TRANSFERS) +
           RT_FRONT_FDS_RESERVE;
}

struct rt_front *rt_front_start(const struct rt_front_deps *deps, char *err, size_t errlen)
{
    struct rt_front *f = calloc(1, sizeof(*f));
    struct sockaddr_in sa;
    unsigned n;
    unsigned conn_limit;
    unsigned xfers;

    if (f == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    f->d = *deps;
    if (parse_listen(deps->cfg->listen, &sa, err, errlen) != 0) {
        free(f);
        return NULL;
    }
    n = deps->cfg->threads > 0 ? deps->cfg->threads : 1;
    f->workers = calloc(n, sizeof(*f->workers));
    if (f->workers == NULL) {
        snprintf(err, errlen, "out of memory");
        free(f);
        return NULL;
    }
    f->nworkers = n;
    if (deps->cfg->max_connections_per_ip < deps->cfg->max_connections) {
        f->ipcap = hs_ipcap_create(deps->cfg->max_connections_per_ip, deps->cfg->max_connections);
        if (f->ipcap == NULL) {
            snprintf(err, errlen, "out of memory");
            free(f->workers);
            free(f);
            return NULL;
        }
    }
    /* the connection cap is split between the loops (the kernel spreads connections over the
     * listening sockets); every loop can take the whole in-flight cap, which is global */
    conn_limit = (unsigned)((deps->cfg->max_connections + n - 1) / n);
    xfers = deps->cfg->max_in_flight + RT_FRONT_EXTRA_TRANSFERS;
    for (unsigned i = 0; i < n; i++) {
        f->workers[i].epfd = -1;
        f->workers[i].stopfd = -1;
    }
    for (unsigned i = 0; i < n; i++) {
        if (worker_init(f, &f->workers[i], &sa, conn_limit, xfers, err, errlen) != 0)
            goto fail;
    }
    f->port = ntohs(sa.sin_port);
    for (unsigned i = 0; i < n; i++) {
        if (pthread_create(&f->workers[i].thread, NULL, worker_main, &f->workers[i]) != 0) {
            snprintf(err, errlen, "cannot start the HTTP threads");
            goto fail;
        }
        f->workers[i].started = 1;
    }
    return f;
fail:
    rt_front_stop(&f);
    return NULL;
}

uint16_t rt_front_port(const struct rt_front *f)
{
    return f->port;
}

void rt_front_quiesce(struct rt_front *f)
{
    /* new connections are refused; keep-alive connections get 503 for new requests */
    atomic_store(&f->quiesced, 1);
    for (unsigned i = 0; i < f->nworkers; i++)
        worker_wake(&f->workers[i]);
}

void rt_front_cancel_upstream(struct rt_front *f)
{
    for (unsigned i = 0; i < f->nworkers; i++) {
        if (f->workers[i].up != NULL)
            rt_upstream_shutdown(f->workers[i].up);
    }
}

int64_t rt_front_in_flight(const struct rt_front *f)
{
    return atomic_load(&((struct rt_front *)f)->in_flight);
}

void rt_front_stop(struct rt_front **fp)
{
    struct rt_front *f;

    if (fp == NULL || *fp == NULL)
        return;
    f = *fp;
    *fp = NULL;
    atomic_store(&f->stopping, 1);
    atomic_store(&f->loops_stop, 1);
    for (unsigned i = 0; i < f->nworkers; i++)
        worker_wake(&f->workers[i]);
    for (unsigned i = 0; i < f->nworkers; i++) {
        if (f->workers[i].started)
            pthread_join(f->workers[i].thread, NULL);
    }
    for (unsigned i = 0; i < f->nworkers; i++) {
        struct worker *w = &f->workers[i];

        /* transfers are finished first (their completions may resume connections), then every
         * connection is closed, requests in progress completed as ended by the shutdown */
        rt_upstream_destroy(&w->up);
        hs_server_destroy(&w->srv);
        if (w->epfd >= 0)
            close(w->epfd);
        if (w->stopfd >= 0)
            close(w->stopfd);
    }
    free(f->workers);
    hs_ipcap_destroy(&f->ipcap);
    free(f);
}
