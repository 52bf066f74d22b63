/* fake-llm: a fast fake of the OpenAI and Anthropic HTTP APIs with fault injection, plus a fake
 * Slack incoming webhook. For tests and local development only.
 *
 * HTTP runs on libmicrohttpd's internal epoll thread pool. Delays (latency_ms, ttft_ms, the
 * gaps between stream chunks) never hold a worker thread: the connection is suspended and the
 * timer thread (fl_timer) resumes it when the deadline passes. Everything that grows has a
 * capacity: request bodies (FL_BODY_MAX_BYTES, 413 beyond), the model table, the recorded
 * requests and Slack messages (drop-oldest), the timer heap, the connection count. */
#include <errno.h>
#include <arpa/inet.h>
#include <limits.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <jansson.h>
#include <microhttpd.h>

#include "tg_buf.h"
#include "tg_err.h"
#include "tg_log.h"
#include "tg_time.h"

#include "fl_body.h"
#include "fl_model.h"
#include "fl_record.h"
#include "fl_timer.h"
#include "fl_tools.h"

#define FL_BODY_MAX_BYTES (16u * 1024u * 1024u) /* request body cap; larger: 413 */
#define FL_BODY_INITIAL_BYTES 4096u             /* first allocation without Content-Length */
#define FL_BODY_TRUSTED_BYTES (1024u * 1024u)   /* Content-Length reserved up front at most */
#define FL_MODELS_MAX 256u                      /* model table capacity */
#define FL_REQUESTS_KEPT 256u                   /* recorded provider requests (drop-oldest) */
#define FL_SLACK_KEPT 1024u                     /* recorded Slack messages (drop-oldest) */
#define FL_RECORD_BODY_MAX_BYTES (64u * 1024u)  /* each recorded body is cut here */
#define FL_TIMER_CAPACITY 65536u                /* pending delayed connections */
#define FL_CONNECTIONS_MAX 16384u               /* open connections */
#define FL_CONNECTION_TIMEOUT_S 300u            /* idle connection timeout */
#define FL_THREADS_MAX 64
/* Per-connection MHD memory pool (request headers, write buffer). MHD zeroes it on every
 * keep-alive request, so it is kept small: 16 KiB holds any realistic header set. */
#define FL_CONNECTION_POOL_BYTES (16u * 1024u)

enum route {
    ROUTE_NOT_FOUND,
    ROUTE_BAD_METHOD,
    ROUTE_API,      /* one of the provider endpoints; api says which */
    ROUTE_MODELS,   /* GET /v1/models */
    ROUTE_HEALTH,   /* GET /health */
    ROUTE_STATS,    /* GET /_stats */
    ROUTE_REQUESTS, /* GET /_requests */
    ROUTE_CONTROL_MODEL,
    ROUTE_CONTROL_DEFAULT,
    ROUTE_CONTROL_DESCRIBE,
    ROUTE_CONTROL_RESET,
    ROUTE_SLACK_POST,
    ROUTE_SLACK_GET,
    ROUTE_SLACK_CONTROL,
    ROUTE_SLACK_RESET,
};

enum slack_mode { SLACK_OK, SLACK_429, SLACK_500 };

struct app {
    struct MHD_Daemon *daemon;
    struct fl_table *models;
    struct fl_record *requests;
    struct fl_record *slack;
    struct fl_timer *timer;
    atomic_int stopping;          /* 1 once shutdown began: no new delays */
    atomic_ullong next_id;        /* ids in generated bodies */
    atomic_ullong body_too_large; /* 413 answers */
    pthread_mutex_t slack_lock;
    enum slack_mode slack_mode;   /* slack_lock */
    uint32_t slack_retry_after_s; /* slack_lock */
    uint64_t slack_times_left;    /* slack_lock; 0 = mode stays until changed */
    uint64_t slack_accepted;      /* slack_lock */
    uint64_t slack_rejected;      /* slack_lock */
};

/* A stream being sent: owned by its MHD response (freed by stream_free). */
struct stream {
    struct app *app;
    struct MHD_Connection *conn; /* borrowed: valid while the response is being sent */
    struct tg_buf buf;           /* all events */
    struct fl_segments seg;
    size_t next;        /* next segment to send */
    size_t off;         /* bytes of it already sent */
    uint64_t start_ms;  /* monotonic start */
    uint32_t ttft_ms;   /* first segment due */
    uint32_t gap_ms;    /* between later segments */
    size_t drop_before; /* segment index at which the connection is cut; SIZE_MAX: never */
    size_t drop_bytes;  /* non-stream drop: bytes sent before the cut */
    int plain;          /* 1: a non-stream body cut after drop_bytes */
};

/* Per-request state, from the first access-handler call to the completed callback. */
struct request {
    struct app *app;
    enum route route;
    enum fl_api api;
    char *body;                   /* owned, NUL-terminated */
    size_t len;                   /* bytes */
    size_t cap;                   /* allocated bytes, <= FL_BODY_MAX_BYTES + 1 */
    int too_large;                /* body went over the cap */
    int waited;                   /* the delay was already served */
    int answered;                 /* a response was queued before the body was read */
    int decided;                  /* counted in the table; slot below is meaningful */
    int slot;                     /* model table slot, -1 for totals only */
    int drop;                     /* the response is cut on purpose (not an abort) */
    int count_tokens;             /* /v1/messages/count_tokens: answers the model's prompt_tokens */
    struct MHD_Response *pending; /* response queued after the delay; owned */
    unsigned pending_status;
    char path[FL_RECORD_PATH_MAX];
};

__attribute__((format(printf, 2, 0))) static void log_mhd(void *cls, const char *fmt, va_list ap)
{
    char line[512];

    (void)cls;
    vsnprintf(line, sizeof(line), fmt, ap);
    line[strcspn(line, "\n")] = '\0';
    TG_WARN_RL("event=mhd message=\"%.300s\"", line);
}

#define FL_RECORD_HEADERS_COUNT_MAX 32 /* request headers kept per recorded request */
#define FL_RECORD_HEADER_VALUE_MAX 512 /* bytes kept of each header value */

/* Request headers serialized for fl_record: lower-cased "name\0value\0" pairs. */
struct headers {
    char buf[FL_RECORD_HEADERS_MAX];
    size_t len;
    unsigned n;
};

static enum MHD_Result collect_header(void *cls, enum MHD_ValueKind kind, const char *key,
                                      const char *value)
{
    struct headers *h = cls;
    size_t kl = strlen(key);
    size_t vl = value ? strlen(value) : 0;

    (void)kind;
    if (h->n == FL_RECORD_HEADERS_COUNT_MAX)
        return MHD_NO;
    if (vl > FL_RECORD_HEADER_VALUE_MAX)
        vl = FL_RECORD_HEADER_VALUE_MAX;
    if (h->len + kl + vl + 2 > sizeof(h->buf))
        return MHD_YES; /* skip what does not fit, keep later short ones */
    for (size_t i = 0; i < kl; i++) {
        char c = key[i];
        h->buf[h->len++] = (c >= 'A' && c <= 'Z') ? (char)(c - 'A' + 'a') : c;
    }
    h->buf[h->len++] = '\0';
    if (vl > 0)
        memcpy(h->buf + h->len, value, vl);
    h->len += vl;
    h->buf[h->len++] = '\0';
    h->n++;
    return MHD_YES;
}

/* Record a request with its headers. Called from the access handler only. */
static void record(struct fl_record *rec, struct MHD_Connection *conn, const struct request *req,
                   const char *model, int status, uint64_t ts_ms)
{
    struct headers h;

    h.len = 0;
    h.n = 0;
    MHD_get_connection_values(conn, MHD_HEADER_KIND, collect_header, &h);
    fl_record_add(rec, req->path, model, req->body, req->len, status, ts_ms, h.buf, h.len);
}

static void timer_fire(void *arg)
{
    MHD_resume_connection(arg);
}

/* Suspend conn until due_ms. Called from the access handler or a content reader only. */
static void delay_until(struct app *app, struct MHD_Connection *conn, uint64_t due_ms)
{
    MHD_suspend_connection(conn);
    if (fl_timer_add(app->timer, conn, due_ms) != 0) {
        /* Heap full or shutting down: do not wait. */
        MHD_resume_connection(conn);
    }
}

static enum route classify(const char *method, const char *url, enum fl_api *api)
{
    int get = strcmp(method, "GET") == 0;
    int post = strcmp(method, "POST") == 0;
    enum route r = ROUTE_NOT_FOUND;
    int want_post = 1;

    if (strcmp(url, "/v1/chat/completions") == 0 || strcmp(url, "/chat/completions") == 0) {
        r = ROUTE_API;
        *api = FL_API_CHAT;
    } else if (strcmp(url, "/v1/embeddings") == 0 || strcmp(url, "/embeddings") == 0) {
        r = ROUTE_API;
        *api = FL_API_EMBEDDINGS;
    } else if (strcmp(url, "/v1/responses") == 0 || strcmp(url, "/responses") == 0) {
        r = ROUTE_API;
        *api = FL_API_RESPONSES;
    } else if (strcmp(url, "/v1/messages") == 0 || strcmp(url, "/v1/messages/count_tokens") == 0) {
        r = ROUTE_API;
        *api = FL_API_MESSAGES;
    } else if (strcmp(url, "/v1/models") == 0 || strcmp(url, "/models") == 0) {
        r = ROUTE_MODELS;
        want_post = 0;
    } else if (strcmp(url, "/health") == 0) {
        r = ROUTE_HEALTH;
        want_post = 0;
    } else if (strcmp(url, "/_stats") == 0) {
        r = ROUTE_STATS;
        want_post = 0;
    } else if (strcmp(url, "/_requests") == 0) {
        r = ROUTE_REQUESTS;
        want_post = 0;
    } else if (strcmp(url, "/_control/models") == 0) {
        r = ROUTE_CONTROL_DESCRIBE;
        want_post = 0;
    } else if (strncmp(url, "/_control/models/", 17) == 0) {
        r = ROUTE_CONTROL_MODEL;
    } else if (strcmp(url, "/_control/default") == 0) {
        r = ROUTE_CONTROL_DEFAULT;
    } else if (strcmp(url, "/_control/reset") == 0) {
        r = ROUTE_CONTROL_RESET;
    } else if (strncmp(url, "/slack/", 7) == 0) {
        r = ROUTE_SLACK_POST;
    } else if (strcmp(url, "/_slack") == 0) {
        r = ROUTE_SLACK_GET;
        want_post = 0;
    } else if (strcmp(url, "/_control/slack") == 0) {
        r = ROUTE_SLACK_CONTROL;
    } else if (strcmp(url, "/_slack/reset") == 0) {
        r = ROUTE_SLACK_RESET;
    }
    if (r != ROUTE_NOT_FOUND && ((want_post && !post) || (!want_post && !get)))
        return ROUTE_BAD_METHOD;
    return r;
}

/* Queue a copy of bytes with a content type and optional retry-after; returns MHD's result. */
static enum MHD_Result send_bytes(struct MHD_Connection *conn, unsigned status, const char *type,
                                  const void *data, size_t len, uint32_t retry_after_s)
{
    struct MHD_Response *resp;
    enum MHD_Result ret;

    resp = MHD_create_response_from_buffer(len, (void *)data, MHD_RESPMEM_MUST_COPY);
    if (resp == NULL)
        return MHD_NO;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    if (retry_after_s > 0) {
        char ra[16];
        snprintf(ra, sizeof(ra), "%u", retry_after_s);
        MHD_add_response_header(resp, "retry-after", ra);
    }
    ret = MHD_queue_response(conn, status, resp);
    MHD_destroy_response(resp);
    return ret;
}

static enum MHD_Result send_json(struct MHD_Connection *conn, unsigned status, json_t *j)
{
    enum MHD_Result ret;
    char *s;

    if (j == NULL)
        return send_bytes(conn, 500, "application/json", "{\"error\":\"out of memory\"}", 25, 0);
    s = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    if (s == NULL)
        return send_bytes(conn, 500, "application/json", "{\"error\":\"out of memory\"}", 25, 0);
    ret = send_bytes(conn, status, "application/json", s, strlen(s), 0);
    free(s);
    return ret;
}

/* A control-plane error: {"error": message}. */
static enum MHD_Result send_control_error(struct MHD_Connection *conn, unsigned status,
                                          const char *message)
{
    return send_json(conn, status, json_pack("{s:s}", "error", message));
}

/* A provider-shaped error body built into a small fixed buffer. */
static enum MHD_Result send_api_error(struct MHD_Connection *conn, enum fl_api api, unsigned status,
                                      const char *model, const char *message)
{
    struct tg_buf b;
    enum MHD_Result ret;

    if (tg_buf_init(&b, 8192) != 0)
        return MHD_NO;
    fl_body_error(&b, api, (int)status, FL_FAULT_NONE, model, 0, message);
    ret = send_bytes(conn, status, "application/json", b.data, b.len, 0);
    tg_buf_fini(&b);
    return ret;
}

static void stream_free(void *cls)
{
    struct stream *s = cls;

    tg_buf_fini(&s->buf);
    free(s);
}

static uint64_t segment_due(const struct stream *s, size_t i)
{
    return s->start_ms + s->ttft_ms + (uint64_t)s->gap_ms * i;
}

/* End the response abruptly: shut the socket down so the client sees the cut now (MHD alone
 * may leave the socket open until its event loop next wakes), then report the error. */
static ssize_t stream_cut(struct stream *s)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(s->conn, MHD_CONNECTION_INFO_CONNECTION_FD);

    if (ci != NULL)
        shutdown(ci->connect_fd, SHUT_RDWR);
    return MHD_CONTENT_READER_END_WITH_ERROR;
}

/* Content reader for streams and cut bodies. Runs on the connection's MHD thread. */
static ssize_t stream_read(void *cls, uint64_t pos, char *out, size_t max)
{
    struct stream *s = cls;
    size_t start, end, n;

    (void)pos;
    if (s->plain) {
        if (s->off >= s->drop_bytes)
            return stream_cut(s);
        n = s->drop_bytes - s->off;
        if (n > max)
            n = max;
        memcpy(out, s->buf.data + s->off, n);
        s->off += n;
        return (ssize_t)n;
    }
    if (s->next >= s->seg.n)
        return MHD_CONTENT_READER_END_OF_STREAM;
    if (s->next == s->drop_before)
        return stream_cut(s);
    if (s->off == 0 && !atomic_load(&s->app->stopping)) {
        uint64_t due = segment_due(s, s->next);
        if (tg_now_mono_ms() < due) {
            delay_until(s->app, s->conn, due);
            return 0;
        }
    }
    start = s->next ? s->seg.ends[s->next - 1] : 0;
    end = s->seg.ends[s->next];
    n = end - start - s->off;
    if (n > max)
        n = max;
    memcpy(out, s->buf.data + start + s->off, n);
    s->off += n;
    if (start + s->off == end) {
        s->next++;
        s->off = 0;
    }
    return (ssize_t)n;
}

/* Parse the fields the fake looks at; fills model (borrowed from root) and friends.
 * Returns NULL on success or a client-facing reason. */
static const char *inspect_request(json_t *root, enum fl_api api, const char **model, int *stream,
                                   int *include_usage, uint32_t *inputs, uint32_t *dims)
{
    json_t *v;

    if (!json_is_object(root))
        return "request body must be a JSON object";
    v = json_object_get(root, "model");
    if (!json_is_string(v) || json_string_length(v) == 0)
        return "you must provide a model parameter";
    if (json_string_length(v) > FL_MODEL_NAME_MAX)
        return "model name is too long";
    *model = json_string_value(v);
    *stream = json_is_true(json_object_get(root, "stream")) && api != FL_API_EMBEDDINGS;
    *include_usage =
        json_is_true(json_object_get(json_object_get(root, "stream_options"), "include_usage"));
    if (api != FL_API_EMBEDDINGS)
        return NULL;
    v = json_object_get(root, "input");
    if (json_is_string(v)) {
        *inputs = 1;
    } else if (json_is_array(v) && json_array_size(v) > 0) {
        /* An array of integers is one tokenised input; otherwise one item per element. */
        *inputs = json_is_integer(json_array_get(v, 0)) ? 1 : (uint32_t)json_array_size(v);
        if (json_array_size(v) > FL_EMBED_INPUTS_MAX && *inputs != 1)
            return "too many inputs (at most 2048)";
    } else {
        return "input must be a string or a non-empty array";
    }
    *dims = 8;
    v = json_object_get(root, "dimensions");
    if (v != NULL) {
        if (!json_is_integer(v) || json_integer_value(v) < 1 ||
            json_integer_value(v) > FL_EMBED_DIMS_MAX)
            return "dimensions must be an integer within 1..4096";
        *dims = (uint32_t)json_integer_value(v);
    }
    if ((uint64_t)*inputs * *dims > FL_EMBED_VALUES_MAX)
        return "inputs x dimensions is too large";
    return NULL;
}

/* Build the response for a provider request into req->pending (or send it now when there is
 * no delay). */
static enum MHD_Result handle_api(struct app *app, struct request *req, struct MHD_Connection *conn)
{
    json_t *root = NULL;
    json_error_t jerr;
    const char *model = NULL;
    const char *why;
    int stream = 0, include_usage = 0;
    uint32_t inputs = 0, dims = 0;
    struct fl_decision dec;
    struct fl_gen gen;
    struct fl_tool_plan tools; /* tool calls or the echo of tool results, else FL_TOOL_NONE */
    char tools_err[256];
    struct stream *st = NULL;
    struct MHD_Response *resp = NULL;
    unsigned status = 200;
    enum MHD_Result ret = MHD_NO;
    const char *ctype = "application/json";
    uint64_t now_ms = tg_now_epoch_ms();

    tools.kind = FL_TOOL_NONE;
    if (req->too_large) {
        atomic_fetch_add(&app->body_too_large, 1);
        fl_table_count_unnamed(app->models, 0);
        fl_table_count(app->models, -1, FL_COUNT_FAILED);
        record(app->requests, conn, req, NULL, 413, now_ms);
        return send_api_error(conn, req->api, 413, NULL, "request body is too large");
    }
    root = json_loadb(req->body ? req->body : "", req->len, 0, &jerr);
    why = root ? inspect_request(root, req->api, &model, &stream, &include_usage, &inputs, &dims)
               : "could not parse the JSON body";
    if (why == NULL && !req->count_tokens)
        why = fl_tools_plan(root, req->api, &tools, tools_err, sizeof(tools_err));
    if (why != NULL) {
        fl_table_count_unnamed(app->models, 0);
        fl_table_count(app->models, -1, FL_COUNT_FAILED);
        record(app->requests, conn, req, model, 400, now_ms);
        ret = send_api_error(conn, req->api, 400, NULL, why);
        goto out;
    }

    fl_table_decide(app->models, model, stream, &dec);
    req->decided = 1;
    req->slot = dec.slot;
    memset(&gen, 0, sizeof(gen));
    gen.api = req->api;
    gen.model = model;
    gen.prompt_tokens = dec.b.prompt_tokens;
    gen.completion_tokens = dec.b.completion_tokens;
    gen.cached_tokens = dec.b.cached_tokens;
    gen.cache_creation_tokens = dec.b.cache_creation_tokens;
    gen.reasoning_tokens = dec.b.reasoning_tokens;
    gen.chunks = dec.b.chunks ? dec.b.chunks : 1;
    gen.include_usage = include_usage;
    gen.id = atomic_fetch_add(&app->next_id, 1) + 1;
    gen.created_s = now_ms / 1000;
    gen.embed_inputs = inputs;
    gen.embed_dims = dims;

    enum fl_fault fault = dec.fail ? dec.b.error : FL_FAULT_NONE;
    if (dec.fail && fault != FL_FAULT_GARBAGE && fault != FL_FAULT_DROP_MID_STREAM) {
        struct tg_buf eb;
        status = (fault == FL_FAULT_CONTEXT_WINDOW || fault == FL_FAULT_CONTENT_POLICY) ? 400
                 : (dec.b.status >= 400) ? (unsigned)dec.b.status
                                         : 500;
        if (tg_buf_init(&eb, 8192) != 0)
            goto out;
        fl_body_error(&eb, req->api, (int)status, fault, model, dec.b.prompt_tokens, NULL);
        resp = MHD_create_response_from_buffer(eb.len, eb.data, MHD_RESPMEM_MUST_COPY);
        tg_buf_fini(&eb);
        stream = 0;
    } else if (dec.fail && fault == FL_FAULT_GARBAGE) {
        size_t glen;
        const char *g = fl_body_garbage(&glen);
        resp = MHD_create_response_from_buffer(glen, (void *)g, MHD_RESPMEM_PERSISTENT);
        if (stream)
            ctype = "text/event-stream; charset=utf-8";
        stream = 0;
    } else if (!dec.fail && req->count_tokens) {
        char ct[48];
        int n = snprintf(ct, sizeof(ct), "{\"input_tokens\":%u}", (unsigned)gen.prompt_tokens);

        resp = MHD_create_response_from_buffer((size_t)n, ct, MHD_RESPMEM_MUST_COPY);
        stream = 0;
    } else if (!dec.fail && !stream) {
        /* The common case, kept lean: one buffer, handed to MHD without a copy. */
        struct tg_buf ob;
        if (tg_buf_init(&ob, fl_body_capacity(&gen, 0) + fl_tools_capacity(&tools)) != 0)
            goto out;
        if ((tools.kind != FL_TOOL_NONE ? fl_tools_success(&ob, &gen, &tools)
                                        : fl_body_success(&ob, &gen)) != 0) {
            tg_buf_fini(&ob);
            goto out;
        }
        resp = MHD_create_response_from_buffer(ob.len, ob.data, MHD_RESPMEM_MUST_FREE);
        if (resp == NULL)
            tg_buf_fini(&ob);
    } else {
        int drop = dec.fail && fault == FL_FAULT_DROP_MID_STREAM;
        st = calloc(1, sizeof(*st));
        if (st == NULL ||
            tg_buf_init(&st->buf, fl_body_capacity(&gen, stream) + fl_tools_capacity(&tools)) != 0)
            goto out;
        st->app = app;
        st->conn = conn;
        st->drop_before = SIZE_MAX;
        if (stream) {
            if ((tools.kind != FL_TOOL_NONE ? fl_tools_stream(&st->buf, &st->seg, &gen, &tools)
                     : fl_body_stream(&st->buf, &st->seg, &gen)) != 0)
                goto out;
            st->start_ms = tg_now_mono_ms();
            st->ttft_ms = dec.b.ttft_ms;
            if (dec.b.latency_ms > dec.b.ttft_ms && st->seg.n > 1)
                st->gap_ms = (dec.b.latency_ms - dec.b.ttft_ms) / (uint32_t)(st->seg.n - 1);
            if (drop)
                st->drop_before = st->seg.n / 2 ? st->seg.n / 2 : 1;
            resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_read, st,
                                                     stream_free);
            ctype = "text/event-stream; charset=utf-8";
        } else if (drop) {
            if (fl_body_success(&st->buf, &gen) != 0)
                goto out;
            st->plain = 1;
            st->drop_bytes = st->buf.len / 2;
            resp =
                MHD_create_response_from_callback(st->buf.len, 16384, stream_read, st, stream_free);
        }
        if (resp == NULL)
            goto out; /* st is freed at out */
        st = NULL;    /* owned by resp now */
        req->drop = drop;
    }
    if (resp == NULL)
        goto out;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    if (stream)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    if (dec.fail && dec.b.retry_after_s > 0) {
        char ra[16];
        snprintf(ra, sizeof(ra), "%u", dec.b.retry_after_s);
        MHD_add_response_header(resp, "retry-after", ra);
    }
    fl_table_count(app->models, dec.slot, dec.fail ? FL_COUNT_FAILED : FL_COUNT_OK);
    record(app->requests, conn, req, model, (int)status, now_ms);
    TG_DEBUG("event=request path=%s status=%u stream=%d fail=%d", req->path, status, stream,
             dec.fail);

    /* Streams pace themselves in the reader; everything else waits here for its latency. */
    uint32_t delay = dec.b.latency_ms > dec.b.ttft_ms ? dec.b.latency_ms : dec.b.ttft_ms;
    if (!stream && delay > 0 && !atomic_load(&app->stopping)) {
        req->pending = resp;
        req->pending_status = status;
        req->waited = 1;
        resp = NULL;
        delay_until(app, conn, tg_now_mono_ms() + delay);
        ret = MHD_YES;
        goto out;
    }
    ret = MHD_queue_response(conn, status, resp);

out:
    if (st != NULL)
        stream_free(st);
    if (resp != NULL)
        MHD_destroy_response(resp);
    json_decref(root);
    return ret;
}

static const char *query_arg(struct MHD_Connection *conn, const char *name)
{
    return MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, name);
}

static enum MHD_Result handle_requests(struct app *app, struct MHD_Connection *conn)
{
    const char *model = query_arg(conn, "model");
    const char *limit_s = query_arg(conn, "limit");
    unsigned long limit = FL_REQUESTS_KEPT;
    uint64_t added, dropped;
    json_t *list;

    if (limit_s != NULL) {
        char *end;
        errno = 0;
        limit = strtoul(limit_s, &end, 10);
        if (errno || *end || end == limit_s)
            return send_control_error(conn, 400, "limit must be a number");
    }
    list = fl_record_list(app->requests, model, limit);
    fl_record_stats(app->requests, &added, &dropped);
    if (list == NULL)
        return send_control_error(conn, 500, "out of memory");
    return send_json(conn, 200,
                     json_pack("{s:o, s:I, s:I}", "requests", list, "total", (json_int_t)added,
                               "dropped", (json_int_t)dropped));
}

static json_t *parse_control_body(struct request *req, char *err, size_t errlen)
{
    json_error_t jerr;
    json_t *j;

    if (req->too_large) {
        snprintf(err, errlen, "body too large");
        return NULL;
    }
    j = json_loadb(req->body ? req->body : "", req->len, 0, &jerr);
    if (j == NULL)
        snprintf(err, errlen, "invalid JSON: %.100s", jerr.text);
    return j;
}

static unsigned status_for(int rc)
{
    if (rc == TG_EFULL)
        return 507;
    if (rc == TG_ENOMEM)
        return 500;
    return 400;
}

static enum MHD_Result handle_control_model(struct app *app, struct request *req,
                                            struct MHD_Connection *conn, const char *url)
{
    char err[256];
    const char *name = (req->route == ROUTE_CONTROL_MODEL) ? url + 17 : NULL;
    json_t *body = parse_control_body(req, err, sizeof(err));
    int rc;

    if (body == NULL)
        return send_control_error(conn, 400, err);
    rc = fl_table_merge(app->models, name, body, err, sizeof(err));
    json_decref(body);
    if (rc != 0)
        return send_control_error(conn, status_for(rc), err);
    TG_INFO("event=control model_len=%zu", name ? strlen(name) : 0);
    json_t *all = fl_table_describe(app->models);
    json_t *one = NULL;
    if (all != NULL)
        one = name ? json_object_get(json_object_get(all, "models"), name)
                   : json_object_get(all, "default");
    json_t *reply = json_pack("{s:s?, s:O?}", "model", name, "behaviour", one);
    json_decref(all);
    return send_json(conn, 200, reply);
}

static enum MHD_Result handle_models(struct app *app, struct MHD_Connection *conn)
{
    json_t *names = fl_table_names(app->models);
    json_t *data = json_array();
    size_t i;
    json_t *n;

    if (names == NULL || data == NULL) {
        json_decref(names);
        json_decref(data);
        return send_control_error(conn, 500, "out of memory");
    }
    json_array_foreach(names, i, n)
    {
        json_array_append_new(data, json_pack("{s:O, s:s, s:i, s:s}", "id", n, "object", "model",
                                              "created", 1700000000, "owned_by", "fake-llm"));
    }
    json_decref(names);
    return send_json(conn, 200, json_pack("{s:s, s:o}", "object", "list", "data", data));
}

static enum MHD_Result handle_slack_post(struct app *app, struct request *req,
                                         struct MHD_Connection *conn)
{
    enum slack_mode mode;
    uint32_t retry_after;

    if (req->too_large)
        return send_bytes(conn, 413, "text/plain", "request_too_large", 17, 0);
    pthread_mutex_lock(&app->slack_lock);
    mode = app->slack_mode;
    retry_after = app->slack_retry_after_s;
    if (mode != SLACK_OK && app->slack_times_left > 0 && --app->slack_times_left == 0)
        app->slack_mode = SLACK_OK;
    if (mode == SLACK_OK)
        app->slack_accepted++;
    else
        app->slack_rejected++;
    pthread_mutex_unlock(&app->slack_lock);
    if (mode == SLACK_429)
        return send_bytes(conn, 429, "text/plain", "rate_limited", 12, retry_after);
    if (mode == SLACK_500)
        return send_bytes(conn, 500, "text/plain", "internal_error", 14, 0);
    record(app->slack, conn, req, NULL, 200, tg_now_epoch_ms());
    return send_bytes(conn, 200, "text/plain", "ok", 2, 0);
}

static enum MHD_Result handle_slack_get(struct app *app, struct MHD_Connection *conn)
{
    uint64_t added, dropped, accepted, rejected;
    json_t *list = fl_record_list(app->slack, NULL, FL_SLACK_KEPT);
    const char *mode;

    if (list == NULL)
        return send_control_error(conn, 500, "out of memory");
    fl_record_stats(app->slack, &added, &dropped);
    pthread_mutex_lock(&app->slack_lock);
    accepted = app->slack_accepted;
    rejected = app->slack_rejected;
    mode = app->slack_mode == SLACK_OK ? "ok" : app->slack_mode == SLACK_429 ? "429" : "500";
    pthread_mutex_unlock(&app->slack_lock);
    return send_json(conn, 200,
                     json_pack("{s:I, s:I, s:I, s:I, s:s, s:o}", "count", (json_int_t)accepted,
                               "received", (json_int_t)(accepted + rejected), "rejected",
                               (json_int_t)rejected, "dropped", (json_int_t)dropped, "mode", mode,
                               "messages", list));
}

static enum MHD_Result handle_slack_control(struct app *app, struct request *req,
                                            struct MHD_Connection *conn)
{
    char err[256];
    json_t *body = parse_control_body(req, err, sizeof(err));
    const char *key;
    json_t *v;
    enum slack_mode mode;
    json_int_t retry_after, times;

    if (body == NULL)
        return send_control_error(conn, 400, err);
    pthread_mutex_lock(&app->slack_lock);
    mode = app->slack_mode;
    retry_after = app->slack_retry_after_s;
    times = 0;
    pthread_mutex_unlock(&app->slack_lock);
    if (!json_is_object(body)) {
        json_decref(body);
        return send_control_error(conn, 400, "body must be a JSON object");
    }
    json_object_foreach(body, key, v)
    {
        const char *s = json_string_value(v);
        if (strcmp(key, "mode") == 0 && s != NULL && strcmp(s, "ok") == 0) {
            mode = SLACK_OK;
        } else if (strcmp(key, "mode") == 0 && s != NULL && strcmp(s, "429") == 0) {
            mode = SLACK_429;
        } else if (strcmp(key, "mode") == 0 && s != NULL && strcmp(s, "500") == 0) {
            mode = SLACK_500;
        } else if (strcmp(key, "retry_after") == 0 && json_is_integer(v) &&
                   json_integer_value(v) >= 0 && json_integer_value(v) <= FL_RETRY_AFTER_MAX_S) {
            retry_after = json_integer_value(v);
        } else if (strcmp(key, "times") == 0 && json_is_integer(v) && json_integer_value(v) >= 0) {
            times = json_integer_value(v);
        } else {
            json_decref(body);
            return send_control_error(conn, 400,
                                      "fields: mode \"ok\"|\"429\"|\"500\", retry_after "
                                      "0..86400, times >= 0");
        }
    }
    json_decref(body);
    pthread_mutex_lock(&app->slack_lock);
    app->slack_mode = mode;
    app->slack_retry_after_s = (uint32_t)retry_after;
    app->slack_times_left = (uint64_t)times;
    pthread_mutex_unlock(&app->slack_lock);
    return send_json(conn, 200,
                     json_pack("{s:s, s:I, s:I}", "mode",
                               mode == SLACK_OK    ? "ok"
                               : mode == SLACK_429 ? "429"
                                                   : "500",
                               "retry_after", retry_after, "times", times));
}

static enum MHD_Result dispatch(struct app *app, struct request *req, struct MHD_Connection *conn,
                                const char *url)
{
    switch (req->route) {
    case ROUTE_API:
        return handle_api(app, req, conn);
    case ROUTE_MODELS:
        return handle_models(app, conn);
    case ROUTE_HEALTH:
        return send_bytes(conn, 200, "text/plain", "ok\n", 3, 0);
    case ROUTE_STATS: {
        json_t *s = fl_table_stats(app->models);
        if (s != NULL) {
            json_object_set_new(s, "body_too_large",
                                json_integer((json_int_t)atomic_load(&app->body_too_large)));
            json_object_set_new(s, "timer_full",
                                json_integer((json_int_t)fl_timer_full_count(app->timer)));
        }
        return send_json(conn, 200, s);
    }
    case ROUTE_REQUESTS:
        return handle_requests(app, conn);
    case ROUTE_CONTROL_MODEL:
    case ROUTE_CONTROL_DEFAULT:
        return handle_control_model(app, req, conn, url);
    case ROUTE_CONTROL_DESCRIBE:
        return send_json(conn, 200, fl_table_describe(app->models));
    case ROUTE_CONTROL_RESET: {
        const char *cfg = query_arg(conn, "config");
        int restore = cfg != NULL && strcmp(cfg, "1") == 0;
        fl_table_reset(app->models, restore);
        fl_record_clear(app->requests);
        atomic_store(&app->body_too_large, 0);
        TG_INFO("event=reset restore_config=%d", restore);
        return send_json(conn, 200, json_pack("{s:b}", "reset", 1));
    }
    case ROUTE_SLACK_POST:
        return handle_slack_post(app, req, conn);
    case ROUTE_SLACK_GET:
        return handle_slack_get(app, conn);
    case ROUTE_SLACK_CONTROL:
        return handle_slack_control(app, req, conn);
    case ROUTE_SLACK_RESET:
        fl_record_clear(app->slack);
        pthread_mutex_lock(&app->slack_lock);
        app->slack_mode = SLACK_OK;
        app->slack_retry_after_s = 0;
        app->slack_times_left = 0;
        app->slack_accepted = 0;
        app->slack_rejected = 0;
        pthread_mutex_unlock(&app->slack_lock);
        return send_json(conn, 200, json_pack("{s:b}", "reset", 1));
    case ROUTE_BAD_METHOD:
        return send_control_error(conn, 405, "method not allowed");
    case ROUTE_NOT_FOUND:
        break;
    }
    return send_json(conn, 404,
                     json_pack("{s:{s:s, s:s, s:n, s:s}}", "error", "message", "not found", "type",
                               "invalid_request_error", "param", "code", "unknown_url"));
}

/* Append upload data to the request body, up to the cap. */
static void body_append(struct request *req, const char *data, size_t n)
{
    if (req->too_large)
        return;
    if (req->len + n > FL_BODY_MAX_BYTES) {
        req->too_large = 1;
        return;
    }
    if (req->len + n + 1 > req->cap) {
        size_t cap = req->cap ? req->cap : FL_BODY_INITIAL_BYTES;
        while (cap < req->len + n + 1)
            cap *= 2;
        if (cap > FL_BODY_MAX_BYTES + 1)
            cap = FL_BODY_MAX_BYTES + 1;
        char *p = realloc(req->body, cap);
        if (p == NULL) {
            req->too_large = 1;
            return;
        }
        req->body = p;
        req->cap = cap;
    }
    memcpy(req->body + req->len, data, n);
    req->len += n;
    req->body[req->len] = '\0';
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls)
{
    struct app *app = cls;
    struct request *req = *con_cls;

    (void)version;
    if (req == NULL) {
        const char *cl;
        req = calloc(1, sizeof(*req));
        if (req == NULL)
            return MHD_NO;
        req->app = app;
        req->slot = -1;
        req->route = classify(method, url, &req->api);
        req->count_tokens = strcmp(url, "/v1/messages/count_tokens") == 0;
        snprintf(req->path, sizeof(req->path), "%s", url);
        *con_cls = req;
        cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl != NULL) {
            unsigned long long want = strtoull(cl, NULL, 10);
            if (want > FL_BODY_MAX_BYTES) {
                /* Refuse before reading (also answers Expect: 100-continue). */
                req->too_large = 1;
                req->answered = 1;
                atomic_fetch_add(&app->body_too_large, 1);
                if (req->route == ROUTE_API) {
                    fl_table_count_unnamed(app->models, 0);
                    fl_table_count(app->models, -1, FL_COUNT_FAILED);
                    return send_api_error(conn, req->api, 413, NULL, "request body is too large");
                }
                return send_control_error(conn, 413, "request body is too large");
            }
            if (want > 0) {
                /* Up to 1 MiB is reserved on the client's word; beyond, the body grows as it
                 * arrives (a client cannot make the fake reserve 16 MiB with a header). */
                size_t first = want < FL_BODY_TRUSTED_BYTES ? (size_t)want : FL_BODY_TRUSTED_BYTES;
                req->body = malloc(first + 1);
                if (req->body == NULL)
                    return MHD_NO;
                req->cap = first + 1;
            }
        }
        return MHD_YES;
    }
    if (req->answered) {
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (*upload_data_size > 0) {
        body_append(req, upload_data, *upload_data_size);
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (req->pending != NULL) {
        enum MHD_Result ret = MHD_queue_response(conn, req->pending_status, req->pending);
        MHD_destroy_response(req->pending);
        req->pending = NULL;
        return ret;
    }
    if (req->waited)
        return MHD_YES;
    return dispatch(app, req, conn, url);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    struct app *app = cls;
    struct request *req = *con_cls;

    (void)conn;
    if (req == NULL)
        return;
    if (req->decided && toe != MHD_REQUEST_TERMINATED_COMPLETED_OK && !req->drop)
        fl_table_count(app->models, req->slot, FL_COUNT_ABORTED);
    if (req->pending != NULL)
        MHD_destroy_response(req->pending);
    free(req->body);
    free(req);
    *con_cls = NULL;
}

static int parse_listen(const char *s, struct sockaddr_in *sa)
{
    char host[64];
    const char *colon = strrchr(s, ':');
    char *end;
    unsigned long port;

    if (colon == NULL || (size_t)(colon - s) >= sizeof(host))
        return TG_EINVAL;
    memcpy(host, s, (size_t)(colon - s));
    host[colon - s] = '\0';
    errno = 0;
    port = strtoul(colon + 1, &end, 10);
    if (errno || *end || end == colon + 1 || port > 65535)
        return TG_EINVAL;
    memset(sa, 0, sizeof(*sa));
    sa->sin_family = AF_INET;
    sa->sin_port = htons((uint16_t)port);
    if (inet_pton(AF_INET, host[0] ? host : "127.0.0.1", &sa->sin_addr) != 1)
        return TG_EINVAL;
    return 0;
}

static int write_port_file(const char *path, unsigned port)
{
    char tmp[PATH_MAX];
    FILE *f;

    if (snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp))
        return TG_EINVAL;
    f = fopen(tmp, "w");
    if (f == NULL)
        return TG_EIO;
    fprintf(f, "%u\n", port);
    if (fclose(f) != 0 || rename(tmp, path) != 0)
        return TG_EIO;
    return 0;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: fake-llm --listen HOST:PORT [--config FILE.json] [--threads N] "
               "[--seed N] [--port-file FILE]\n"
               "A fake OpenAI/Anthropic provider and Slack webhook, for tests and development "
               "only.\n"
               "PORT 0 picks a free port; --port-file receives the port actually bound.\n"
               "--seed (default 1, or FAKE_LLM_SEED) fixes the fail_rate draws.\n");
}

int main(int argc, char **argv)
{
    struct app app;
    const char *listen_s = NULL, *config_path = NULL, *port_file = NULL;
    unsigned long threads = 2;
    unsigned long long seed = 1;
    struct sockaddr_in sa;
    socklen_t salen = sizeof(sa);
    int fd = -1, one = 1, rc = 1, sig = 0;
    char err[256];
    json_t *config = NULL;
    sigset_t sigs;

    memset(&app, 0, sizeof(app));
    tg_log_init("fake-llm");
    if (getenv("FAKE_LLM_SEED") != NULL)
        seed = strtoull(getenv("FAKE_LLM_SEED"), NULL, 10);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return 0;
        }
        if (v == NULL) {
            usage(stderr);
            return 2;
        }
        if (strcmp(a, "--listen") == 0)
            listen_s = v;
        else if (strcmp(a, "--config") == 0)
            config_path = v;
        else if (strcmp(a, "--port-file") == 0)
            port_file = v;
        else if (strcmp(a, "--threads") == 0)
            threads = strtoul(v, NULL, 10);
        else if (strcmp(a, "--seed") == 0)
            seed = strtoull(v, NULL, 10);
        else {
            usage(stderr);
            return 2;
        }
        i++;
    }
    if (listen_s == NULL || parse_listen(listen_s, &sa) != 0 || threads < 1 ||
        threads > FL_THREADS_MAX) {
        usage(stderr);
        return 2;
    }

    pthread_mutex_init(&app.slack_lock, NULL);
    app.models = fl_table_create(FL_MODELS_MAX, seed);
    app.requests = fl_record_create(FL_REQUESTS_KEPT, FL_RECORD_BODY_MAX_BYTES);
    app.slack = fl_record_create(FL_SLACK_KEPT, FL_RECORD_BODY_MAX_BYTES);
    if (app.models == NULL || app.requests == NULL || app.slack == NULL) {
        TG_ERROR("event=start_failed reason=out_of_memory");
        goto out;
    }
    if (config_path != NULL) {
        json_error_t jerr;
        config = json_load_file(config_path, 0, &jerr);
        if (config == NULL) {
            TG_ERROR("event=config_invalid line=%d reason=\"%.120s\"", jerr.line, jerr.text);
            goto out;
        }
        if (fl_table_load(app.models, config, err, sizeof(err)) != 0) {
            TG_ERROR("event=config_invalid reason=\"%.200s\"", err);
            goto out;
        }
    }

    /* Signals are taken by sigwait in main; every thread started below inherits the mask. */
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    app.timer = fl_timer_create(FL_TIMER_CAPACITY, timer_fire, err, sizeof(err));
    if (app.timer == NULL) {
        TG_ERROR("event=start_failed reason=\"%s\"", err);
        goto out;
    }

    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
        bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 || listen(fd, 4096) != 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &salen) != 0) {
        TG_ERROR("event=listen_failed listen=%s errno=%d", listen_s, errno);
        goto out;
    }

    /* One thread: no pool (MHD warns about a pool of size 0), so that slot repeats the
     * connection limit instead. */
    enum MHD_OPTION pool_opt =
        threads > 1 ? MHD_OPTION_THREAD_POOL_SIZE : MHD_OPTION_CONNECTION_LIMIT;
    unsigned int pool_val = threads > 1 ? (unsigned int)threads : FL_CONNECTIONS_MAX;
    unsigned int flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL |
                         MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG | MHD_USE_TURBO;
    app.daemon =
        MHD_start_daemon(flags, 0, NULL, NULL, on_request, &app, MHD_OPTION_EXTERNAL_LOGGER,
                         log_mhd, NULL, MHD_OPTION_LISTEN_SOCKET, fd, pool_opt, pool_val,
                         MHD_OPTION_CONNECTION_LIMIT, (unsigned int)FL_CONNECTIONS_MAX,
                         MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)FL_CONNECTION_TIMEOUT_S,
                         MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)FL_CONNECTION_POOL_BYTES,
                         MHD_OPTION_NOTIFY_COMPLETED, on_completed, &app, MHD_OPTION_END);
    if (app.daemon == NULL) {
        TG_ERROR("event=start_failed reason=mhd");
        goto out;
    }
    fd = -1; /* the daemon owns the socket now */
    if (port_file != NULL && write_port_file(port_file, ntohs(sa.sin_port)) != 0) {
        TG_ERROR("event=start_failed reason=port_file");
        goto out;
    }
    TG_INFO("event=listening port=%u threads=%lu seed=%llu models_max=%u", ntohs(sa.sin_port),
            threads, seed, FL_MODELS_MAX);

    while (sigwait(&sigs, &sig) != 0)
        ;
    TG_INFO("event=stopping signal=%d", sig);
    rc = 0;

out:
    atomic_store(&app.stopping, 1);
    /* Resume every suspended connection before the daemon stops (an MHD requirement). */
    if (app.timer != NULL)
        fl_timer_stop(app.timer);
    if (app.daemon != NULL)
        MHD_stop_daemon(app.daemon);
    fl_timer_destroy(&app.timer);
    if (fd >= 0)
        close(fd);
    json_decref(config);
    fl_record_destroy(&app.slack);
    fl_record_destroy(&app.requests);
    fl_table_destroy(&app.models);
    pthread_mutex_destroy(&app.slack_lock);
    return rc;
}
