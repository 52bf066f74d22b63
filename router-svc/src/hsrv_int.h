/* hsrv_int: the HTTP server's state, shared by its files: hsrv.c (the server, its connections'
 * request and response cycle), hs_request.c (the parsed request and its accessors),
 * hs_response.c (responses and status reasons) and hs_ipcap.c (connections per address).
 * Private to them; hsrv.h is the interface. */
#ifndef RT_HSRV_INT_H
#define RT_HSRV_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "hparse.h"
#include "hsrv.h"

#define HS_HEAD_MAX_DEFAULT (16u * 1024u)
#define HS_SCRATCH_BYTES (16u * 1024u) /* the loop's shared read buffer */
#define HS_RBUF_MIN_BYTES                                                                          \
    1024u /* a connection's own read buffer starts this small: a head                              \
           * dribbled in (slowloris) holds 1 KiB, not the head cap */
#define HS_STREAM_PIECE_BYTES (16u * 1024u) /* one reader call at most */
#define HS_CHUNK_PREFIX 10u                 /* hex size + CRLF, right-aligned */
#define HS_RESP_HEADER_ROOM 2048u
#define HS_RESP_TRAILER_ROOM 512u
#define HS_OUT_HEAD_BYTES (HS_RESP_HEADER_ROOM + 256u) /* status line, Date, framing, ... */
/* A buffered body up to this size is copied into a per-thread cached block (tg_blocks) and its
 * buffer freed at once: the responses of a loop run, held together for their events (hs_hold),
 * would otherwise keep one buffer each and overflow malloc's per-thread cache. */
#define HS_BODY_BLOCK_BYTES 1024u
/* A request's head with its table up to this size is a per-thread cached block (tg_blocks):
 * a head lives until its response is out, so a run's held responses keep one each. */
#define HS_HEAD_BLOCK_BYTES 1024u
#define HS_OBUF_SCRATCH 1
#define HS_OBUF_RESP 2
#define HS_SWEEP_MS 1000u                              /* idle checks */
/* Work per loop turn, so that a burst (a flood of connections, thousands of them reaching a
 * deadline in the same second) is spread over turns with the loop's other work in between
 * instead of stalling it: connections accepted, and closed by a deadline, per call. */
#define HS_ACCEPT_PER_TURN 64u
#define HS_SWEEP_CLOSE_PER_TURN 16u
#define HS_LINGER_IDLE_MS 2000u   /* after an early answer: drop input until quiet this long */
#define HS_LINGER_TOTAL_MS 10000u /* ... or at most this long */
#define HS_LINGER_MAX_BYTES_DEFAULT (16u * 1024u * 1024u) /* ... or at most this many bytes */
#define HS_HEADER_TIMEOUT_MS_DEFAULT 10000u
#define HS_BODY_TIMEOUT_MS_DEFAULT 60000u
#define HS_BODY_MIN_RATE_DEFAULT 1024u /* bytes/s */
#define HS_KEEPALIVE_TIMEOUT_MS_DEFAULT 75000u
#define HS_SEND_TIMEOUT_MS_DEFAULT 60000u

enum { HS_KIND_LISTEN = 1, HS_KIND_CONN = 2 };

enum cstate {
    CS_HEAD = 0, /* reading a request head (or idle between requests) */
    CS_BODY,     /* reading the body, handing it to the handler */
    CS_WAIT,     /* body read; the handler has not answered yet */
    CS_SEND,     /* a response is being written */
    CS_LINGER,   /* answered early: dropping input until the client is done, then close */
    CS_CLOSED    /* closed; freed at the end of the loop turn */
};

struct hs_response {
    hs_reader_fn reader;
    void *rcls;
    hs_free_fn rfree;
    char *body;
    size_t body_len;
    int body_block; /* body is a TG_BLOCK_BODY block (HS_BODY_BLOCK_BYTES bytes), else malloc'd */
    int close;
    size_t hlen;
    size_t tlen;
    char hdr[HS_RESP_HEADER_ROOM]; /* the extra headers; once the head is built, its unsent
                                    * bytes when the response is held (own_pending) */
    char trl[HS_RESP_TRAILER_ROOM];
};

/* hs_response_body_free: release r's buffered body (a cached block or malloc's), body NULL. */
void hs_response_body_free(struct hs_response *r);

struct hs_conn {
    int kind;
    int fd;
    struct hs_server *s;
    struct hs_conn *prev, *next; /* every open connection */
    struct hs_conn *rnext;       /* resumed, loop thread */
    struct hs_conn *xnext;       /* resumed from another thread (s->xmu) */
    struct hs_conn *gnext;       /* closed, to free at the end of the turn */
    struct hs_conn *hnext;       /* held (hs_hold), loop thread */
    int hold;                    /* hs_hold: hold the next bytes */
    int held;                    /* on the held list; kept in the graveyard while it is */
    enum cstate state;
    int in_r, in_x;
    int suspended;
    int handler_live;  /* the handler was called and completed is owed */
    int in_process;    /* process() is on the stack for this connection */
    int pending_parse; /* rbuf holds bytes not parsed yet (pipelined) */
    int maybe_more;    /* the socket may hold unread bytes (no short read or EAGAIN seen) */
    uint64_t last_ms;  /* last progress (a byte read or written), monotonic ms */
    uint64_t accept_ms;
    uint64_t head_start_ms; /* first byte of the current request's head */
    uint64_t body_start_ms; /* the head was parsed: the body may arrive from now on */
    uint64_t body_got;      /* body bytes handed to the handler (deadline by min rate) */
    uint64_t linger_start_ms;
    uint64_t linger_bytes;
    unsigned nreq;    /* requests started on this connection */
    _Alignas(8) unsigned char memo[HS_CONN_MEMO_BYTES]; /* hs_conn_memo */
    int head_started; /* a byte of the current request's head has arrived */
    int ip_held;      /* counted in the server's per-address table */
    uint32_t peer;    /* IPv4 address, network order */

    /* request */
    char *head; /* the head, parsed in place, followed by its kv table */
    int head_block; /* head is a TG_BLOCK_HEAD block (HS_HEAD_BLOCK_BYTES), else malloc'd */
    size_t head_bytes;
    struct hp_kv *kv;
    unsigned nh, na;
    struct hp_scan scan;
    struct hp_request req;
    const char *method;
    const char *url;
    int minor;
    int keep_alive;
    int is_head;
    int chunked;
    uint64_t body_left; /* length framing */
    struct hp_chunked ch;
    void *req_ctx;

    /* read buffer while a request arrives in pieces (or pipelined bytes wait) */
    char *rbuf;
    size_t rlen;
    size_t rcap; /* rbuf's size: grows by doubling from HS_RBUF_MIN_BYTES to rbuf_cap */

    /* response */
    struct hs_response *resp;
    int resp_status;
    int early;       /* answered before the body was read whole */
    int close_after; /* close once the response is out */
    int stream_end;  /* nothing more to ask the reader */
    char *obuf;      /* unsent bytes of the head, a piece or the last chunk */
    size_t olen, ooff;
    int obuf_borrowed; /* 0: obuf is ours to free; else HS_OBUF_SCRATCH (the server's scratch,
                        * only within one call) or HS_OBUF_RESP (resp->hdr, as long as resp) */
    size_t body_off;
};

struct hs_server {
    int kind;
    int lfd;
    struct hs_config cfg;
    size_t head_max;
    size_t rbuf_cap;
    uint64_t linger_max; /* bytes dropped after an early answer, at most */
    uint64_t header_timeout_ms, body_timeout_ms, body_min_rate, keepalive_timeout_ms,
        send_timeout_ms;
    uint16_t port;
    int quiesced;
    pthread_t loop_tid;
    int have_tid;
    struct hs_conn *conns;
    struct hs_conn *rhead, *rtail;
    pthread_mutex_t xmu;
    struct hs_conn *xhead; /* (xmu) */
    struct hs_conn *graveyard;
    struct hs_conn *hhead, *htail; /* held by hs_hold, in order */
    uint64_t next_sweep_ms;
    int accept_more;          /* the listening socket may hold more connections */
    struct hs_conn *sweep_at; /* a sweep stopped here (its budget spent); NULL: none */
    /* counters: written by the loop thread only, read by any (hs_server_stats) */
    _Atomic uint64_t st_accepted, st_refused, st_refused_ip, st_requests, st_bad, st_timeouts,
        st_open, st_header_timeouts, st_body_timeouts, st_send_timeouts, st_linger_cut;
    time_t date_t;
    char date[48];
    size_t date_len;
    char scratch[HS_SCRATCH_BYTES];
    char piece[HS_CHUNK_PREFIX + HS_STREAM_PIECE_BYTES + HS_RESP_TRAILER_ROOM + 16];
    char ohead[HS_OUT_HEAD_BYTES];
};

/* hs_request.c: the head delimited by hparse into c (a copy parsed in place, followed by the
 * table of its headers and query arguments). Returns 0, or the status to answer with (400,
 * 431, 501, 503, 505) and a static message. */
int hs_head_take(struct hs_conn *c, const char *p, size_t n, const char **msg);
/* hs_head_release: give back c's head (a cached block or malloc's, as hs_head_take took it). */
void hs_head_release(struct hs_conn *c);

/* hs_response.c: the standard reason phrase of a status ("Status" for one not listed). */
const char *hs_reason(int status);

#endif
