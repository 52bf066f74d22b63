/* upstream: every provider transfer, on an event loop; no thread ever blocks on a provider.
 *
 * Embedded (the router's use): the upstream has no thread of its own; its owner polls
 * rt_upstream_fd() in its loop and calls rt_upstream_run(), and every callback runs on that
 * thread. Standalone: one loop thread of its own. Submitters hand a transfer over with
 * rt_upstream_submit(): the request is copied into a slot of a fixed table (capacity set at
 * creation), started at once from the owner's thread or through a bounded command queue that
 * wakes the loop from any other. Transfers are named by a handle (slot index + generation), so
 * a late cancel or unpause for a transfer that already finished is recognised and ignored.
 *
 * Two clients with the same callbacks, clock and semantics: with config.native, the built-in
 * HTTP/1.1 client for http:// and https:// (h1client.c; TLS with OpenSSL on the loop, h1tls.c;
 * responses parsed by h1.h, connections kept alive per origin, names resolved off the loop by
 * resolver.h), and libcurl for the rest (proxies, a name not resolved yet, full tables, and
 * everything without config.native; HTTP/2 when the provider offers it over TLS). */
#ifndef RT_UPSTREAM_H
#define RT_UPSTREAM_H

#include <stddef.h>
#include <stdint.h>

/* Returned by on_data to pause the transfer until rt_upstream_unpause(). */
#define RT_UPSTREAM_PAUSE ((size_t)-1)
/* At most this many extra request headers per transfer. */
#define RT_UPSTREAM_HEADERS_MAX 8
/* Error bodies of streamed responses are kept up to this many bytes (the rest is dropped). */
#define RT_UPSTREAM_ERROR_BODY_MAX_BYTES (64u * 1024u)

struct rt_upstream;

struct rt_upstream_config {
    size_t max_transfers;       /* slot table and command queue capacity (> 0) */
    long max_host_connections;  /* per host connection cap in the shared cache (> 0) */
    long max_total_connections; /* total connection cap (> 0) */
    int embedded;               /* 1: no thread of its own; the owner polls rt_upstream_fd() and
                                   calls rt_upstream_run() from one thread (callbacks run there) */
    int native;                 /* 1: http:// and https:// URLs go through the built-in
                                   HTTP/1.1 client instead of libcurl (a host name once resolved
                                   off the loop; not when a proxy for the scheme is set in the
                                   environment) */
};

/* Outcome of a transfer, passed to on_done. */
struct rt_upstream_result {
    int err;            /* 0, TG_ETIMEOUT, TG_EIO (connect/transport), TG_ETOOBIG (response
                           over max_response_bytes), TG_ECLOSED (cancelled) */
    long status;        /* HTTP status, 0 when none was received */
    char *body;         /* NUL-terminated response body (non-stream, or a non-2xx stream);
                           owned by the transfer: set to NULL to take it (then free()) */
    size_t body_len;    /* bytes in body */
    long retry_after_s; /* parsed retry-after header, -1 when absent */
    uint64_t ttfb_us;   /* monotonic us from submit to first response byte, 0 when none */
    char detail[128];   /* short transport error text (curl's), never contains a secret */
};

/* Callbacks, all on the loop thread. ud is the submitter's pointer. */
struct rt_upstream_ops {
    /* stream only, 2xx: response bytes as they arrive. Return n when consumed, or
     * RT_UPSTREAM_PAUSE to pause (the same bytes are offered again after unpause). Optional. */
    size_t (*on_data)(void *ud, const char *p, size_t n);
    /* always called exactly once per submitted transfer, last. The handle is dead after it. */
    void (*on_done)(void *ud, struct rt_upstream_result *res);
};

struct rt_upstream_request {
    const char *url;                              /* borrowed for the call (copied) */
    const char *headers[RT_UPSTREAM_HEADERS_MAX]; /* "Name: value", NULL-terminated if fewer;
                                                     borrowed for the call (copied); a
                                                     Content-Type among them replaces the
                                                     default application/json */
    char *body; /* takes: malloc'd request body, freed by upstream */
    size_t body_len;
    long timeout_ms;           /* total transfer time for non-stream; connect+ttfb for streams */
    long idle_timeout_ms;      /* streams: abort after this long without a byte (0 = timeout_ms) */
    size_t max_response_bytes; /* non-stream body cap (> 0); over it -> TG_ETOOBIG */
    int stream;                /* 1: deliver 2xx bytes through on_data */
    long recv_buffer_bytes;    /* largest single on_data delivery, 0 = curl's default (16 KiB):
                                  libcurl's receive buffer, and its deliveries are cut to it too
                                  (over HTTP/2 curl delivers up to 16 KiB whatever its buffer) */
    int tls_no_verify;         /* https: 1 = the server's certificate and name are not checked
                                  (ssl_verify: false); 0 = they are (default) */
    const char *ca_file;       /* https: the CA bundle to verify with, alone (ssl_verify: PATH);
                                  NULL or "" = SSL_CERT_FILE, else the system's; borrowed for the
                                  call (copied) */
};

/* rt_upstream_global_init / rt_upstream_global_fini: process-wide libcurl set-up and
 * tear-down (curl.h stays inside this module). init reads SSL_CERT_FILE: a CA bundle used for
 * the providers' certificates instead of the system's (a request's ca_file replaces both), and
 * libcurl's built-in CA bundle and directory (restored on a reused handle). Main thread, once, before any other thread
 * starts / after every upstream is destroyed. init returns 0 or TG_EIO. */
int rt_upstream_global_init(void);
void rt_upstream_global_fini(void);

/* rt_upstream_create: start the loop thread. Returns new (destroy with rt_upstream_destroy) or
 * NULL with a reason in err. Main thread. */
struct rt_upstream *rt_upstream_create(const struct rt_upstream_config *cfg, char *err,
                                       size_t errlen);

/* Embedded mode: the epoll descriptor to watch for readability, the longest the owner may wait
 * before calling rt_upstream_run (curl's timer, <= 1000 ms), and one non-blocking turn of the
 * loop (commands, socket events, timers, finished transfers). Owner thread only. */
int rt_upstream_fd(const struct rt_upstream *up);
int rt_upstream_timeout_ms(const struct rt_upstream *up);
void rt_upstream_run(struct rt_upstream *up);

/* rt_upstream_shutdown: refuse new transfers (submit returns TG_ECLOSED) and cancel every
 * transfer in progress (each gets on_done with TG_ECLOSED). The loop keeps running until
 * rt_upstream_destroy. Any thread; idempotent. */
void rt_upstream_shutdown(struct rt_upstream *up);

/* rt_upstream_destroy: cancel every transfer (each gets on_done with TG_ECLOSED), stop and join
 * the loop, free. Accepts NULL; sets *up to NULL. Main thread, after the HTTP front stopped
 * (embedded mode: the owner thread, or any thread once the owner stopped). */
void rt_upstream_destroy(struct rt_upstream **up);

/* rt_upstream_submit: start a transfer. req->body is taken in every case (freed on failure).
 * On success stores the handle in *handle and returns 0; on_done will be called exactly once.
 * Returns TG_EFULL when every slot is in use (counted), TG_EINVAL on a bad request; then no
 * callback is called. Any thread. */
int rt_upstream_submit(struct rt_upstream *up, struct rt_upstream_request *req,
                       const struct rt_upstream_ops *ops, void *ud, uint64_t *handle);

/* rt_upstream_cancel: abort the transfer; its on_done follows with TG_ECLOSED unless it was
 * already completing. Harmless for a dead handle. Any thread. In embedded mode, called on the
 * owner thread outside rt_upstream_run, the cancel (and on_done) happens before it returns:
 * the caller must not hold a lock that on_done takes. */
void rt_upstream_cancel(struct rt_upstream *up, uint64_t handle);

/* rt_upstream_unpause: resume a transfer paused by on_data. Harmless for a dead handle. In
 * embedded mode on the owner thread, on_data may run before it returns (same lock rule). */
void rt_upstream_unpause(struct rt_upstream *up, uint64_t handle);

/* Why the built-in client closed a provider connection. */
enum rt_upstream_close {
    RT_UPC_FAILED,       /* its transfer failed: connect, TLS, send, receive, timeout, a response
                            that is not HTTP */
    RT_UPC_NOT_REUSABLE, /* its response ended it: "Connection: close", HTTP/1.0, the end of
                            the response is the close, bytes after the response, an answer
                            before the whole request was sent */
    RT_UPC_CANCELLED,    /* its transfer was cancelled (client gone, a failed relay) and the rest
                            of the response could not be read out (H1_DRAIN_* in
                            upstream_int.h): a stream, a request not all sent, a handshake not
                            done, too many bytes or too long */
    RT_UPC_IDLE_EXPIRED, /* idle for longer than 60 s */
    RT_UPC_PEER_CLOSED,  /* the provider closed it (or sent bytes) while it was idle, or a
                            kept-alive connection was found closed when a request was sent */
    RT_UPC_POOL_FULL,    /* idle beyond max idle per origin, or closed to make room for a
                            connection to another origin (max connections) */
    RT_UPC_SHUTDOWN,     /* the upstream module stopped */
    RT_UPC_N
};

/* Counters since start. Any thread. */
struct rt_upstream_stats {
    uint64_t submitted, completed, cancelled, timeouts, full, too_big, active;
    uint64_t native;      /* of submitted: through the built-in HTTP/1.1 client */
    uint64_t native_full; /* transfers left to libcurl because the built-in client's
                             origin table (64 per loop) or name table (64) was full */
    uint64_t tls_handshakes; /* TLS handshakes of the built-in client's connections */
    uint64_t tls_resumed;    /* of them: a previous session resumed */
    uint64_t conns_opened;   /* the built-in client's provider connections opened */
    uint64_t conns_closed[RT_UPC_N]; /* ... and closed, by reason (enum rt_upstream_close) */
    uint64_t drained; /* cancelled transfers whose connection was kept: the rest of the
                         response read out and dropped */
};
void rt_upstream_get_stats(const struct rt_upstream *up, struct rt_upstream_stats *out);

/* rt_upstream_close_reason: the metric label of a reason ("failed", ...). */
const char *rt_upstream_close_reason(int reason);

#endif
