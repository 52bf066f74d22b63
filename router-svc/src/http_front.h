/* http_front: router-svc's HTTP front (hsrv, its own HTTP/1.1 server, on epoll loops).
 *
 * `threads` event loops, each one thread with one epoll set holding its HTTP server's sockets
 * (registered once, edge-triggered) and its own upstream side by side: a request stays on one
 * thread from the client to the provider and back, with no hand-off between threads. The
 * loops' listening sockets share the port (SO_REUSEPORT); the connection cap is divided
 * between them.
 *
 * Per request: read the body up to max_body_bytes (413 beyond, from Content-Length or while
 * reading) -> parse once into an immutable jansson value (400 naming the position) ->
 * authenticate (Bearer / x-api-key against the keys table, or the master key) -> router plan ->
 * for each attempt build the upstream body from the pristine request with only "model"
 * swapped (translated across providers) and hand it to upstream; the connection is suspended
 * while the provider works, so no thread waits on a provider -> classify -> the router decides
 * the next step -> final response with the x-tollgate-* headers. Streams are forwarded chunk by
 * chunk through a bounded per-stream buffer; a client that goes away aborts the upstream
 * transfer.
 *
 * When the final outcome of a request is decided, the on_complete hook receives a fully filled
 * event (for a stream: before the terminating event is sent). */
#ifndef RT_HTTP_FRONT_H
#define RT_HTTP_FRONT_H

#include <stdint.h>

#include "config.h"
#include "proto_event.h"

struct rt_front;
struct rt_keys;
struct rt_mask;
struct rt_metrics;
struct rt_upstream;
struct rt_health;
struct rt_key_api;

/* Called once per request with a final response, on an HTTP thread; ev is borrowed for the
 * call. Must not block (the spool append is the heaviest thing allowed). */
typedef void (*rt_on_complete_fn)(const struct proto_event *ev, void *ud);

/* Per-stream buffering, at most 29 KiB per in-flight stream, most of it held only while bytes
 * are on their way (a stream waiting for its provider's next event holds the curl receive
 * buffer only):
 * - one upstream SSE event is at most RT_STREAM_EVENT_MAX_BYTES (a larger one ends the stream
 *   with an in-band error, class invalid_response);
 * - curl's receive buffer for a stream: RT_STREAM_RECV_BYTES (curl's minimum; SSE events are
 *   small, a larger one is simply delivered in several pieces);
 * - raw upstream bytes: the event cap plus one curl delivery; when full the transfer is paused
 *   (CURL_WRITEFUNC_PAUSE) and resumed once the client has drained; allocated when bytes arrive,
 *   released once the reader has taken them all;
 * - client-bound output: RT_STREAM_OUT_MAX_BYTES, allocated when there is something to send,
 *   released once the client connection has taken it all;
 * - the usage parser's line buffer: RT_STREAM_USAGE_LINE_BYTES, allocated only if a line is
 *   split across two feeds (the front feeds whole events, so never in practice). */
#define RT_STREAM_EVENT_MAX_BYTES (12u * 1024u)
#define RT_STREAM_RECV_BYTES 1024u
#define RT_STREAM_IN_MAX_BYTES (RT_STREAM_EVENT_MAX_BYTES + RT_STREAM_RECV_BYTES)
#define RT_STREAM_OUT_MAX_BYTES (12u * 1024u)
#define RT_STREAM_USAGE_LINE_BYTES (4u * 1024u)

struct rt_front_deps {
    const struct rt_config *cfg;  /* borrowed, outlives the front */
    struct rt_keys *keys;         /* borrowed */
    const struct rt_mask *mask;   /* borrowed */
    struct rt_metrics *metrics;   /* borrowed */
    struct rt_health *health;     /* borrowed */
    void *router;                 /* borrowed struct rt_router * */
    rt_on_complete_fn on_complete; /* may be NULL */
    void *on_complete_ud;
    /* Admission check before a request is routed (e.g. the spool's full_policy reject): 0 to
     * serve, non-zero to answer 503 at once. Called on an HTTP thread; must not block. May be
     * NULL. */
    int (*admit)(void *ud);
    void *admit_ud;
    /* The key admin API (/key/generate, /key/update, /key/delete, /key/info), served with the
     * master key only; NULL when there is no master key (the paths answer 404). */
    struct rt_key_api *key_api;
};

/* rt_front_fds_needed: file descriptors the process needs to serve cfg's limits (client
 * connections, provider connections, a reserve for everything else). main raises
 * RLIMIT_NOFILE to it, or refuses to start. */
uint64_t rt_front_fds_needed(const struct rt_config *cfg);

/* rt_front_start: bind cfg->listen and start serving. Returns new (rt_front_stop) or NULL with
 * a reason in err. Main thread. */
struct rt_front *rt_front_start(const struct rt_front_deps *deps, char *err, size_t errlen);

/* rt_front_port: the bound TCP port (useful with listen port 0). */
uint16_t rt_front_port(const struct rt_front *front);

/* rt_front_quiesce: stop accepting new connections (existing ones are served). Main thread. */
void rt_front_quiesce(struct rt_front *front);

/* rt_front_cancel_upstream: cancel every provider transfer and refuse new ones (shutdown after
 * the grace period): waiting requests get an error, streams end in-band. Any thread. */
void rt_front_cancel_upstream(struct rt_front *front);

/* rt_front_in_flight: requests accepted and not yet finished. Any thread. */
int64_t rt_front_in_flight(const struct rt_front *front);

/* rt_front_stop: cancel what is still in flight, resume suspended connections, stop the daemon
 * and free. Accepts NULL; sets *front to NULL. Main thread. */
void rt_front_stop(struct rt_front **front);

#endif
