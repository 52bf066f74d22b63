/* call_int: the call's state, shared by call.c (life, attempts, answers, event) and relay.c
 * (the stream relay). Private to those two files. */
#ifndef RT_CALL_INT_H
#define RT_CALL_INT_H

#include <stddef.h>

#include <jansson.h>

#include "call.h"
#include "providers/provider.h"
#include "router.h"
#include "tg_buf.h"
#include "tg_ids.h"
#include "translate.h"
#include "usage.h"

/* Per-stream buffering: about 25 KiB per in-flight stream of ordinary events, held only while
 * bytes are on their way (a stream waiting for its provider's next event holds libcurl's
 * receive buffer only); a large event takes what it needs, up to limits.max_response_bytes,
 * and gives it back once it has left:
 * - the upstream's deliveries are at most RT_STREAM_RECV_BYTES (libcurl's minimum buffer; the
 *   upstream cuts larger ones);
 * - raw upstream bytes: RT_STREAM_IN_BYTES at first; when a partial event fills them the
 *   transfer is paused, the buffer doubled (up to the event cap, limits.max_response_bytes,
 *   plus one delivery) and the transfer resumed; an event over the cap ends the stream with an
 *   in-band error naming the limit, class invalid_response. Events are handled in place, and
 *   the buffer is allocated when bytes arrive and released once the reader has taken them all;
 * - client-bound output (and a dialect's converted events): RT_STREAM_OUT_BYTES, or what the
 *   event being handled needs (its size passed through; twice its size plus
 *   RT_STREAM_OUT_BYTES translated or converted), allocated when there is something to send and
 *   released once the client connection has taken it all; a Responses stream translated from
 *   chat adds what its closing events can take (rt_resp_stream_need: they repeat the answer's
 *   text, which the translation keeps, at most limits.max_response_bytes: more ends the stream
 *   with an in-band error naming the limit), and grows the output (doubling, up to four event
 *   caps beyond that) when one chunk opens more items than that foresaw;
 * - the usage parser's line buffer: allocated only if a line is split across two feeds (the
 *   pump feeds whole events, so never in practice); lines up to the event cap are read. */
#define RT_STREAM_RECV_BYTES 1024u
#define RT_STREAM_IN_BYTES (12u * 1024u + RT_STREAM_RECV_BYTES)
#define RT_STREAM_OUT_BYTES (12u * 1024u)
/* Messages of router-made errors and of upstream failures for the trail, bytes. */
#define RT_CALL_MESSAGE_MAX 512

enum call_phase {
    PH_BODY = 0,     /* reading the request body (and planning it) */
    PH_WAIT,         /* an attempt is in flight (connection suspended) */
    PH_ATTEMPT_DONE, /* the attempt finished; result in call->res_* */
    PH_STREAM_READY, /* 2xx stream bytes arrived: start the client stream */
    PH_STREAMING,    /* client stream queued; the reader drives */
    PH_FINAL         /* a response was queued */
};

/* Members of the client body read on the request path (raw mode). */
enum {
    FM_MODEL = 0,
    FM_STREAM,
    FM_STREAM_OPTIONS,
    FM_DISABLE_FALLBACKS,
    FM_USER,
    FM_METADATA,
    FM_N
};

struct rt_call {
    enum rt_req_kind kind; /* RT_REQ_CALL (first: see call.h) */
    const struct rt_call_env *env;
    struct hs_conn *conn; /* NULL once the request ended (rt_call_completed) */
    int refs;             /* the connection's, the transfer's, the stream response's */

    enum rt_api api;      /* client API */
    const char *endpoint; /* path for the event */
    int anthropic_shape;  /* errors in Anthropic's shape */
    int count_tokens;     /* RT_COUNT_TOKENS_ENDPOINT: Anthropic's API counts, others estimate;
                           * never streamed, never billed */
    int counted;          /* holds an in-flight slot */

    char *body; /* request body, up to max_body_bytes */
    size_t body_len, body_alloc;

    json_t *req;                    /* immutable parsed request (raw mode: only once a translation
                                     * needs it, parsed from body) */
    int raw;                        /* raw mode: body is kept unchanged and only the members below
                                     * were located in it; attempts splice the model into a copy */
    struct rt_json_member fm[FM_N]; /* raw mode: FM_* members of body (spans into body) */
    size_t body_close;              /* raw mode: offset of the body's closing brace */
    int include_usage;              /* stream_options.include_usage is true */
    const char *end_user;           /* raw mode: "user" (or metadata.user_id) bytes in body */
    size_t end_user_len;
    int stream;
    char model_requested[RT_NAME_CAP];
    char traceparent[64]; /* validated W3C traceparent, "" when none */
    /* The client's anthropic-beta and anthropic-version, forwarded to Anthropic-API targets
     * ("" when absent, or not printable ASCII, or too long) */
    char anthropic_beta[RT_ANTHROPIC_BETA_CAP];
    char anthropic_version[32];

    struct rt_keys_table *keys; /* held while the request lives */
    const struct rt_key *key;   /* borrowed from keys, NULL for the master key */

    int plan_begun; /* plan (below) was set by rt_router_begin */
    struct rt_target target;
    int have_target;
    char prev_group[RT_NAME_CAP];
    struct rt_wire wire;   /* how the current deployment is spoken to */
    int strip_usage_chunk; /* usage was asked for by us, not the client: drop that chunk */
    uint64_t attempt_start_us;
    uint64_t upstream_us; /* time spent waiting on providers, all attempts */

    enum call_phase phase;
    int suspended;   /* connection suspended by us, waiting for a resume */
    uint64_t handle; /* the transfer of the attempt in flight */
    int xfer_active;
    int res_err;
    long res_status;
    char *res_body;
    size_t res_body_len;
    long res_retry_after_s;
    uint64_t res_ttfb_us;
    char res_detail[128];

    /* stream: upstream side */
    char *in; /* in_cap bytes of raw upstream bytes, NULL while empty */
    size_t in_len, in_cap;
    int paused;  /* the transfer is paused: the reader unpauses it */
    int discard; /* stream failed: refuse further upstream bytes */
    int upstream_done;
    int client_gone;

    /* stream: client side */
    struct tg_buf out;
    size_t out_off;
    struct rt_sse_usage sse;
    int sse_init;
    struct tg_buf conv;          /* a dialect's events converted to OpenAI chunks (capacity
                                  * as the output's); allocated by relay_begin for a dialect
                                  * stream, freed with the call */
    struct rt_resp_stream *rs;   /* a Responses stream translated from chat (wire.responses):
                                  * created by relay_begin, destroyed with the call */
    struct tg_buf rchat;         /* its chat events on their way to rs (capacity as the
                                  * output's), allocated as the output is */
    int saw_terminator;
    int stream_finalized;
    struct hs_response *resp; /* the stream's response, for the cost trailer: borrowed (the
                               * server owns it once queued), NULL once the trailer is set */

    /* outcome */
    struct rt_usage usage;
    int64_t cost_nusd;
    int price_unknown; /* tokens were used at a deployment without a price (call_price) */
    int event_done;    /* the event was built and handed to on_complete */
    uint64_t t_start_us;
    uint64_t t_done_us; /* monotonic µs when call_complete ran, 0 before */
    int64_t ts_start_ms;
    int64_t ttft_ms;
    char call_id[TG_UUID_STR_LEN + 1];

    /* Not zeroed by rt_call_create (RT_CALL_ZEROED_BYTES): 5.8 of its 7.5 KiB, which every
     * request cleared for nothing. Each is set whole before any read: plan by rt_router_begin
     * (plan_begun guards every use), tr and ds by relay_begin when a stream starts. */
    struct rt_plan plan;
    struct rt_translate_stream tr;
    struct rt_dialect_stream ds; /* a dialect's stream state (wire.dialect) */
};
#define RT_CALL_ZEROED_BYTES offsetof(struct rt_call, plan)

/* call.c, for relay.c */
void call_unref(struct rt_call *c);
void call_resume(struct rt_call *c);
void call_complete(struct rt_call *c, int status, const char *err_class);
int call_answer_error(struct rt_call *c, int status, const char *code, const char *message,
                      const struct rt_outcome *o);
void call_add_headers(struct rt_call *c, struct hs_response *r, const struct rt_outcome *o,
                      int with_cost);
char *call_cost_text(char v[40], const struct rt_call *c);
/* call_price: cost_nusd and price_unknown from the usage at the target deployment. */
void call_price(struct rt_call *c);
int64_t call_elapsed_ms(const struct rt_call *c);

/* relay.c, for call.c */
int relay_begin(struct rt_call *c);
ssize_t relay_reader(void *cls, char *buf, size_t max);
void relay_free(void *cls);
void relay_finalize(struct rt_call *c, enum rt_error_class ec, const char *msg);

#endif
