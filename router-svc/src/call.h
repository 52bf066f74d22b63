/* call: one API request's life, from its authenticated headers to its spend event.
 *
 *   body (capped) -> parse once (immutable: raw bytes with the members the router reads
 *   located, or a bounded jansson tree) -> plan (router: alias, allowlist, limits, deployment)
 *   -> attempts (each built from the pristine request for its deployment's provider, sent
 *   through the loop's upstream while the connection waits suspended) -> answer (the provider's
 *   answer translated back, or the router's outcome as an error in the API's shape, or a stream
 *   relayed event by event) -> one event (on_complete).
 *
 * The router decides; the call carries out: the outcome's status is the one the client gets
 * (the router is the one place an outcome becomes a status). The HTTP side (http_front)
 * authenticates from the headers, then hands the request here; it routes hsrv's handler and
 * completed callbacks for the request to rt_call_body / rt_call_run / rt_call_completed.
 *
 * Threads: a call lives on its loop's thread: hsrv's callbacks, the upstream's callbacks (the
 * upstream is embedded in the loop) and the stream reader all run there, so the call has no lock.
 * Nothing else may touch it. */
#ifndef RT_CALL_H
#define RT_CALL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "api.h"
#include "config.h"

/* Anthropic's token counting: a /v1/messages request counted, not answered (see call.c). */
#define RT_COUNT_TOKENS_ENDPOINT "/v1/messages/count_tokens"
#include "hsrv.h"
#include "keys.h"
#include "proto_event.h"

struct rt_call;
struct rt_router;
struct rt_metrics;
struct rt_mask;
struct rt_upstream;

/* Called once per request with a final response, on the loop thread; ev is borrowed for the
 * call. Must not block (the spool append is the heaviest thing allowed). */
typedef void (*rt_on_complete_fn)(const struct proto_event *ev, void *ud);

/* What the calls of one loop share. Borrowed: outlives every call made with it. */
struct rt_call_env {
    const struct rt_config *cfg;
    struct rt_router *router;
    struct rt_metrics *metrics;
    const struct rt_mask *mask;
    struct rt_upstream *up;        /* the loop's own */
    struct rt_creds *creds;        /* tokens of the deployments that need one (creds.h); may
                                    * be NULL when none does */
    rt_on_complete_fn on_complete; /* may be NULL */
    void *on_complete_ud;
    int hold_after_complete; /* on_complete batches the event until the end of the loop run:
                              * the response's bytes wait for it (hs_hold) */
    /* Admission before a request is routed (the spool's full_policy reject): 0 to serve, else
     * 503. Must not block. May be NULL. */
    int (*admit)(void *ud);
    void *admit_ud;
    _Atomic int64_t *in_flight;  /* the front's count of calls, against cfg->max_in_flight */
    const _Atomic int *stopping; /* set: past the drain's grace, no new attempt (503) */
    const _Atomic int *quiesced; /* set: every response carries Connection: close */
};

/* Requests the front hands hsrv as their context begin with their kind, so that its callbacks
 * tell a call from the front's own requests. */
enum rt_req_kind {
    RT_REQ_CALL = 1,
    RT_REQ_ADMIN = 2,
};

/* rt_call_create: a call for an API request on conn whose key the front checked: keys (taken;
 * may be NULL) is the table key (borrowed from it, NULL for the master key or an open-mode
 * request) was found in. endpoint is static ("/v1/chat/completions"...); anthropic: errors in
 * Anthropic's shape. Then rt_call_start. Returns new (its first member is RT_REQ_CALL; released
 * by rt_call_completed) or NULL (keys released). */
struct rt_call *rt_call_create(const struct rt_call_env *env, struct hs_conn *conn, enum rt_api api,
                               const char *endpoint, int anthropic, struct rt_keys_table *keys,
                               const struct rt_key *key);

/* rt_call_start: take an in-flight slot (503 at max_in_flight) and check the body's
 * Content-Length against max_body_bytes (413 before a byte of it is read), allocating the body
 * buffer when the length is known. Returns what the hsrv handler returns. */
int rt_call_start(struct rt_call *c);

/* rt_call_body: a piece of the body (hsrv's upload, *n bytes, all taken: *n set to 0); a body
 * over max_body_bytes is answered 413 at once. Returns what the handler returns. */
int rt_call_body(struct rt_call *c, const char *p, size_t *n);

/* rt_call_run: the body is complete, or the connection was resumed: parse and plan (first
 * time), then attempts and the answer. Returns what the handler returns. */
int rt_call_run(struct rt_call *c);

/* rt_call_completed: hsrv's completed for the call's request (toe: how it ended). A client gone
 * before the outcome ends the call as 499 (its event written), its transfer cancelled. Releases
 * the in-flight slot and the connection's reference: c may be freed. */
void rt_call_completed(struct rt_call *c, enum hs_toe toe);

#endif
