/* http_front: router-svc's HTTP side (hsrv, its own HTTP/1.1 server, on epoll loops).
 *
 * `threads` event loops, each one thread with one epoll set holding its HTTP server's sockets
 * (registered once, edge-triggered) and its own upstream side by side: a request stays on one
 * thread from the client to the provider and back, with no hand-off between threads. The
 * loops' listening sockets share the port (SO_REUSEPORT); the connection cap is divided
 * between them.
 *
 * HTTP only: it routes paths — health, metrics and the models list itself; the key admin API
 * (master key) through key_api, whose answers from the control thread come back through the
 * loop's mailbox; API requests, authenticated from their headers alone before anything is spent
 * on them (an unauthenticated one gets its 401 without a call, slot, body buffer, 100-continue
 * or parse), to a call (call.h), which carries the request through the router's plan to its
 * answer and its event. */
#ifndef RT_HTTP_FRONT_H
#define RT_HTTP_FRONT_H

#include <stdint.h>

#include "call.h"
#include "config.h"
#include "proto_event.h"

struct rt_front;
struct rt_keys;
struct rt_mask;
struct rt_metrics;
struct rt_upstream;
struct rt_health;
struct rt_key_api;
struct rt_teams;

struct rt_front_deps {
    const struct rt_config *cfg;   /* borrowed, outlives the front */
    struct rt_keys *keys;          /* borrowed */
    const struct rt_mask *mask;    /* borrowed */
    struct rt_metrics *metrics;    /* borrowed */
    struct rt_health *health;      /* borrowed */
    void *router;                  /* borrowed struct rt_router * */
    struct rt_creds *creds;        /* borrowed; NULL when no deployment needs a token */
    rt_on_complete_fn on_complete; /* may be NULL */
    void *on_complete_ud;
    /* Admission check before a request is routed (e.g. the spool's full_policy reject): 0 to
     * serve, non-zero to answer 503 at once. Called on an HTTP thread; must not block. May be
     * NULL. */
    int (*admit)(void *ud);
    void *admit_ud;
    /* Events batched per loop turn (all four, or none: NULL): batch_begin on each loop thread
     * when it starts; a call's response bytes after its event wait (hs_hold) for batch_flush
     * at the end of the turn, then go out; batch_pending: the loop does not sleep while
     * events wait; batch_end when the loop stops. */
    int (*batch_begin)(void *ud);
    int (*batch_pending)(void);
    void (*batch_flush)(void);
    void (*batch_end)(void);
    void *batch_ud;
    /* The key admin API (/key/generate, /key/update, /key/delete, /key/info), served with the
     * master key only; NULL when there is no master key (the paths answer 404). */
    struct rt_key_api *key_api;
    /* The teams table (borrowed; may be NULL): GET /v1/models lists only what a key's team
     * allows too. */
    struct rt_teams *teams;
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

/* rt_front_admin_port: the admin listener's port (tollgate.admin_listen), 0 when none. */
uint16_t rt_front_admin_port(const struct rt_front *front);

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
