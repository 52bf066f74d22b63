/* hsrv: router-svc's HTTP/1.1 server, living on an event loop the caller owns.
 *
 * One server per loop thread. It adds its listening socket and every client connection to the
 * caller's epoll set, edge-triggered, once for their life (no epoll_ctl per request), with
 * data.ptr pointing to one of its objects: the caller hands every event whose data is not one
 * of its own small tags (values below 4096) to hs_server_event.
 *
 * The request life cycle follows libmicrohttpd's access handler, which the front was written
 * against:
 *   1. headers complete: handler(upload = NULL, *upload_size = 0, *req_ctx = NULL);
 *   2. body bytes, in pieces as they arrive (chunked framing removed): upload != NULL,
 *      *upload_size > 0; the handler takes them all (the server treats the piece as used);
 *   3. the body is complete: handler(upload = NULL, *upload_size = 0) again;
 *   4. while no response is queued and the request is not suspended, after step 3 and after
 *      every hs_resume: the handler is called again as in step 3.
 * The handler may queue a response at any step (hs_respond). A response queued before the body
 * was read whole is sent with Connection: close, and the rest of the body is read and dropped
 * (bounded) before the connection closes, so that the client sees the answer. A handler that
 * returns HS_NO has the connection closed at once.
 *
 * A request that waits (for a provider) is suspended with hs_suspend: it costs nothing while
 * suspended — no system call either way — and hs_resume (any thread) has the server call the
 * handler again (or the stream reader, once a streaming response is queued). The server keeps
 * watching a suspended connection: a client that closes it or resets it ends the request at
 * once (completed with HS_TOE_CLIENT_GONE).
 *
 * completed is called once for every request whose handler was called (req_ctx as the handler
 * left it): HS_TOE_OK after the last byte of the response was handed to the kernel, another
 * code when the request ended without that.
 *
 * Streaming responses: the reader is called when the connection can take more; it returns the
 * bytes written to buf (> 0), 0 when nothing is ready (it must have called hs_suspend; the
 * server calls it again after hs_resume), HS_READER_END after the last byte (trailers added
 * before that are sent), or HS_READER_ERROR to close the connection. An HTTP/1.1 client gets
 * the body chunked, with the trailers; an HTTP/1.0 client gets it unchunked and the connection
 * closes after it.
 *
 * Framing is hparse's (hparse.h): any byte the grammar forbids in a head (NUL, bare CR, other
 * control bytes but HTAB) is a 400 as soon as it arrives; an HTTP/1.1 request without Host, a
 * malformed line, Content-Length with Transfer-Encoding, bad chunk framing are 400s; a transfer
 * coding other than chunked is a 501, an HTTP version other than 1.x a 505. The server's own
 * answers close the connection. The path handed to the handler is not percent-decoded.
 *
 * Limits, each with a counter (hs_stats) and a reaction:
 * - the request line and headers at most head_max_bytes, 100 header lines (431 and close);
 * - connections: past max_connections, or past the per-address cap (ipcap), a new connection
 *   gets 503 with Retry-After and is closed;
 * - the head must arrive whole within header_timeout_ms of its first byte (of the accept, for a
 *   connection's first request): 408 and close (a close only, for a connection that never sent
 *   a byte). Bytes dribbled slowly do not extend it;
 * - the body must arrive within body_timeout_ms of the head plus one second for every
 *   body_min_rate bytes received (a minimum transfer rate): 408 and close;
 * - a kept-alive connection idle between requests for keepalive_timeout_ms is closed;
 * - a response the client takes nothing of for send_timeout_ms is abandoned (close);
 * - after an early answer the server drops what the client still sends for at most 10 s, 2 s of
 *   quiet, or linger_max_bytes, then closes.
 * None of these apply to a request suspended waiting for its response (the provider's own
 * timeouts do). HTTP/1.0 requests are answered with an HTTP/1.0 status line. Per connection,
 * memory is held only while it is used: the request head (one allocation per request), a read
 * buffer only while a request arrives in several pieces (or pipelined requests wait), an output
 * buffer only while a response has bytes the socket could not take yet.
 *
 * Threads: everything runs on the loop thread except hs_resume. */
#ifndef RT_HSRV_H
#define RT_HSRV_H

#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/epoll.h>
#include <sys/types.h>

#define HS_NO 0
#define HS_YES 1

#define HS_READER_END ((ssize_t)-1)
#define HS_READER_ERROR ((ssize_t)-2)

/* Smallest value data.u64 of a server object can have: callers tag their own fds below it. */
#define HS_TAG_LIMIT 4096u

struct hs_server;
struct hs_conn;
struct hs_response;
struct hs_ipcap;

enum hs_toe {
    HS_TOE_OK = 0,      /* the response was sent whole */
    HS_TOE_CLIENT_GONE, /* the client closed or reset the connection first */
    HS_TOE_ERROR,       /* a write failed, the handler or reader refused, out of memory */
    HS_TOE_TIMEOUT,     /* a deadline passed (body, send, idle) */
    HS_TOE_SHUTDOWN     /* the server was destroyed with the request in progress */
};

typedef int (*hs_handler_fn)(void *cls, struct hs_conn *conn, const char *url, const char *method,
                             const char *version, const char *upload, size_t *upload_size,
                             void **req_ctx);
typedef void (*hs_completed_fn)(void *cls, struct hs_conn *conn, void **req_ctx, enum hs_toe toe);
typedef ssize_t (*hs_reader_fn)(void *cls, char *buf, size_t max);
typedef void (*hs_free_fn)(void *cls);

struct hs_config {
    int epfd;                 /* the loop's epoll set */
    struct sockaddr_in addr;  /* port 0: the kernel picks one (hs_server_port) */
    int reuse_port;           /* SO_REUSEPORT, for several servers on one port */
    unsigned max_connections; /* >= 1; beyond: 503 and close */
    struct hs_ipcap *ipcap;   /* connections per source address, shared by the servers of
                               * one port (borrowed, outlives them); NULL: no such cap */
    /* Deadlines (0: the default named): */
    unsigned header_timeout_ms;    /* 10 s: the whole head, from its first byte */
    unsigned body_timeout_ms;      /* 60 s: the body, from the end of the head, ... */
    unsigned body_min_rate;        /* 1024 B/s: ... plus 1 s per this many bytes received */
    unsigned keepalive_timeout_ms; /* 75 s: idle between two requests */
    unsigned send_timeout_ms;      /* 60 s: a response the client takes nothing of */
    size_t linger_max_bytes;       /* 16 MiB: dropped after an early answer, at most */
    size_t head_max_bytes;         /* request line + headers; 0: 16 KiB */
    int backlog;                   /* listen backlog; 0: 1024 */
    hs_handler_fn handler;
    void *handler_cls;
    hs_completed_fn completed; /* may be NULL */
    void *completed_cls;
    void (*wake)(void *cls); /* hs_resume from another thread calls this to wake the loop
                              * (which then calls hs_server_run) */
    void *wake_cls;
};

/* Counters (hs_server_stats: any thread). */
struct hs_stats {
    uint64_t accepted;
    uint64_t refused;    /* over max_connections (503) */
    uint64_t refused_ip; /* over the per-address cap (503) */
    uint64_t requests;
    uint64_t bad_requests;    /* answered 400/431/501/505 by the server */
    uint64_t timeouts;        /* kept-alive connections closed idle (keepalive_timeout_ms) */
    uint64_t header_timeouts; /* 408: the head did not arrive in time */
    uint64_t body_timeouts;   /* 408: the body did not arrive in time */
    uint64_t send_timeouts;   /* responses abandoned: the client took nothing */
    uint64_t linger_cut;      /* closed after dropping linger_max_bytes past an early answer */
    uint64_t open;            /* connections open now */
};

/* hs_ipcap_create: a table counting open connections per IPv4 source address, for several
 * servers (any thread; one mutex, taken at accept and close only). per_addr: connections one
 * address may hold; capacity: addresses held at once (the total connection cap suffices).
 * Returns new (hs_ipcap_destroy) or NULL (out of memory, or a zero argument). */
struct hs_ipcap *hs_ipcap_create(unsigned per_addr, unsigned capacity);

/* hs_ipcap_acquire: count one more connection of addr (network order). Returns 0, or -1 when
 * the address is at its cap (or the table is full). */
int hs_ipcap_acquire(struct hs_ipcap *t, uint32_t addr);

/* hs_ipcap_release: one connection of addr ended. Accepts t == NULL. */
void hs_ipcap_release(struct hs_ipcap *t, uint32_t addr);

/* hs_ipcap_destroy: accepts NULL; sets *t to NULL. After every server using it is destroyed. */
void hs_ipcap_destroy(struct hs_ipcap **t);

/* hs_server_create: bind, listen and add the socket to cfg->epfd. NULL with a reason in err. */
struct hs_server *hs_server_create(const struct hs_config *cfg, char *err, size_t errlen);

/* hs_server_port: the bound port. */
uint16_t hs_server_port(const struct hs_server *s);

/* hs_event_server: the server an event of the shared epoll set belongs to (its listening socket
 * or one of its connections), for a loop that holds several servers. */
struct hs_server *hs_event_server(const struct epoll_event *ev);

/* hs_server_event: one epoll event of the server's (data.u64 >= HS_TAG_LIMIT). Loop thread. */
void hs_server_event(struct hs_server *s, const struct epoll_event *ev);

/* hs_server_run: serve resumed connections and due timers. Returns 1 when it served a resumed
 * connection (the caller's other work may have something new: run it and call again), else 0.
 * Loop thread. */
int hs_server_run(struct hs_server *s);

/* hs_server_housekeep: the server's own work, once per loop turn (after the turn's events):
 * connections accepted beyond a turn's share (64 per call, so that a flood of connections is
 * spread over turns) and the deadlines (checked once a second, at most 16 connections closed
 * per call). Returns 1 when work is left for the next
 * turn (hs_server_timeout_ms is then 0). Loop thread. */
int hs_server_housekeep(struct hs_server *s);

/* hs_hold: no further byte of c's response is sent until the loop calls hs_server_release
 * (its unsent bytes are copied and it waits on the server's held list): what must precede them
 * (the request's spend event, batched until the end of the loop's run) is not done yet.
 * Handler's thread (the loop). */
void hs_hold(struct hs_conn *c);

/* hs_server_release: send what hs_hold held back, in the order it was held. Returns 1 when
 * connections were held again meanwhile (call it again once what they wait for is done),
 * else 0. Loop thread. */
int hs_server_release(struct hs_server *s);

/* hs_server_timeout_ms: how long the loop may sleep for the server: 0 when resumed or held
 * connections or housekeeping wait, else until the next deadline check, -1 for none. Loop
 * thread. */
int hs_server_timeout_ms(const struct hs_server *s);

/* hs_server_quiesce: stop accepting (the listening socket is closed). Connections stay open:
 * every response from now on, a request in progress or the next one on an idle kept-alive
 * connection, is sent with Connection: close and the connection closes after it. Loop thread.
 */
void hs_server_quiesce(struct hs_server *s);

/* hs_server_stats: copy of the counters. */
void hs_server_stats(const struct hs_server *s, struct hs_stats *out);

/* hs_server_destroy: close every connection (completed with HS_TOE_SHUTDOWN for requests in
 * progress, stream readers' free functions called) and the listening socket. Loop thread, or
 * any thread once the loop has stopped. Accepts NULL; sets *s to NULL. */
void hs_server_destroy(struct hs_server **s);

/* ---- the request (valid from the handler's first call to completed) ---- */

/* hs_header: value of the first header of that name (case-insensitive), leading and trailing
 * blanks removed; NULL when absent. */
const char *hs_header(const struct hs_conn *c, const char *name);

/* hs_query_arg: value of the first query argument of that name, percent-decoded (and '+' as a
 * space); "" for a name without '='; NULL when absent. */
const char *hs_query_arg(const struct hs_conn *c, const char *name);

/* hs_head_bytes: bytes of the request line and header section as received. */
size_t hs_head_bytes(const struct hs_conn *c);

/* hs_conn_memo: HS_CONN_MEMO_BYTES the handler keeps with the connection from one request to
 * the next (zeroed when it is accepted; the router: its last credential's digest). Loop
 * thread. */
#define HS_CONN_MEMO_BYTES 200
void *hs_conn_memo(struct hs_conn *c);

/* hs_suspend: the request waits; the handler (or reader) is not called until hs_resume. Loop
 * thread, from the handler or the reader. */
void hs_suspend(struct hs_conn *c);

/* hs_resume: end a suspension. Any thread. From another thread, the connection must stay alive
 * meanwhile: the caller holds what completed would need to take first (the front calls it
 * under its call's lock, which its completed takes). Resuming a connection that is not
 * suspended does nothing. */
void hs_resume(struct hs_conn *c);

/* ---- responses ---- */

/* hs_response_buffer: a response with this body; takes body (released with free()), which may
 * be NULL when len is 0. NULL when out of memory (body released). */
struct hs_response *hs_response_buffer(char *body, size_t len);

/* hs_response_reader: a streaming response; free_fn(cls) is called once when the response is
 * done with (sent, failed or never queued). NULL when out of memory (free_fn not called). */
struct hs_response *hs_response_reader(hs_reader_fn reader, void *cls, hs_free_fn free_fn);

/* hs_response_header: add a header. "Connection: close" has the connection closed after this
 * response; Content-Length, Transfer-Encoding and Date are the server's and refused. Returns 0
 * or -1 (refused, or the response's header room, 2 KiB, is full). */
int hs_response_header(struct hs_response *r, const char *name, const char *value);

/* HS_RESPONSE_HEADER: hs_response_header for a name that is a string literal of the caller's
 * (a token, none of the four above), which is not checked again for each response (test builds
 * assert it). The value is checked as there. */
#define HS_RESPONSE_HEADER(r, name, value)                                                      \
    hs_response_header_lit((r), "" name "", sizeof(name) - 1, (value))
int hs_response_header_lit(struct hs_response *r, const char *name, size_t nl, const char *value);

/* hs_response_trailer: add a trailer to a streaming response; sent after the last chunk to an
 * HTTP/1.1 client (dropped for HTTP/1.0). The reader may call it until it returns
 * HS_READER_END. Returns 0 or -1 (no room: 512 bytes). */
int hs_response_trailer(struct hs_response *r, const char *name, const char *value);

/* hs_response_free: drop a response that was not queued. */
void hs_response_free(struct hs_response *r);

/* hs_respond: queue r with this status (the status line gets the standard reason phrase).
 * Takes r in every case. HEAD requests get the headers only. Returns HS_YES, or HS_NO when a
 * response was already queued (the connection is then closed). Loop thread, from the handler
 * (any step) — the connection need not be suspended or resumed for it. */
int hs_respond(struct hs_conn *c, int status, struct hs_response *r);

#endif
