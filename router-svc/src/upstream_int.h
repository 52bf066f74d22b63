/* upstream_int: the upstream module's state, shared by upstream.c (the transfer table, the
 * loop, the module's clock, libcurl) and h1client.c (the built-in HTTP/1.1 client). Private to
 * those two files; upstream.h is the module's interface. */
#ifndef RT_UPSTREAM_INT_H
#define RT_UPSTREAM_INT_H

#include <curl/curl.h>
#include <openssl/ssl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "h1.h"
#include "upstream.h"

/* epoll events handled per wakeup of the loop */
#define RT_UPSTREAM_EVENTS_BATCH 64
/* Sockets below this descriptor number that curl opened through us keep their epoll
 * registration between transfers (see socket_cb); higher ones are registered per transfer. */
#define RT_UPSTREAM_FD_TABLE 65536
/* native HTTP/1.1 client: origins (scheme, address or name, way of verifying) per loop, the tag that marks
 * its connections in epoll data, the shared receive buffer, the idle age after which a kept
 * connection is not reused */
#define H1_ORIGINS_MAX 64
#define H1_TAG (1ull << 63)
#define H1_RECV_BYTES (16u * 1024u)
#define H1_IDLE_MAX_US (60ull * 1000000ull)
/* A cancelled transfer whose request was all sent keeps its connection when the rest of the
 * response (not a stream) comes within these bounds: read out and dropped, the connection back
 * in the pool instead of a new connection (and TLS handshake) for the next request. A provider
 * that would generate for longer sees the close at most H1_DRAIN_MAX_US late. */
#define H1_DRAIN_MAX_BYTES (64u * 1024u)
#define H1_DRAIN_MAX_US (2ull * 1000000ull)
/* h1c_conn_release's reason for a connection to be kept when it can be */
#define H1_KEEP (-1)
#define H1_DNS_CHECK_US 1000000ull

/* fd table states (one byte per descriptor) */
enum {
    FD_OURS = 1,     /* opened by opensocket_cb, not yet closed */
    FD_IN_EPOLL = 2, /* registered in up->epfd */
    FD_WATCHED = 4,  /* curl watches it now (else the registration is only kept) */
    FD_EV_IN = 8,    /* registered events */
    FD_EV_OUT = 16
};

enum { CMD_SUBMIT = 1, CMD_CANCEL = 2, CMD_UNPAUSE = 4 };
enum { SLOT_FREE = 0, SLOT_QUEUED, SLOT_ACTIVE };

struct slot {
    uint32_t gen;            /* bumped when the slot is freed; guarded by up->lock */
    unsigned cmds;           /* pending CMD_* bits; guarded by up->lock */
    int queued;              /* index is in the command ring; guarded by up->lock */
    int submitted;           /* CMD_SUBMIT posted, slot not yet released; guarded by up->lock */
    int state;               /* SLOT_*; loop thread after submit */
    CURL *easy;              /* reused across transfers */
    struct curl_slist *hdrs; /* kept across transfers while the next one sends the same set */
    int hdrs_n;              /* request headers at the head of hdrs (the fixed two follow) */
    char *req_body;          /* owned */
    char *resp;              /* response body, grows up to resp_cap */
    size_t resp_len;
    size_t resp_alloc;
    size_t resp_cap; /* bytes */
    int too_big;
    int stream;
    long retry_after_s;
    uint64_t start_us; /* monotonic */
    uint64_t ttfb_us;
    const struct rt_upstream_ops *ops;
    void *ud;
    char errbuf[CURL_ERROR_SIZE];
    /* native HTTP/1.1 transfers (native == 1); loop thread after submit */
    int native;
    int paused;   /* on_data asked to pause; bytes wait in stash */
    int retried;  /* already moved once from a dead kept-alive connection */
    int fail_err; /* TG_* to report from the timer (a failure found inside submit) */
    long status;
    uint32_t origin;
    uint32_t heap_at;    /* index in up->heap plus one, 0 when not armed (a zeroed table:
                          * a slot's page is touched only when the slot is used) */
    struct h1conn *conn; /* the connection carrying the transfer (borrowed: up->conns owns
                            it), NULL when none */
    char *head;          /* request line and headers, owned (freed at slot release) */
    size_t head_len;
    size_t body_len;
    size_t sent;     /* bytes of head + body written */
    size_t recv_max; /* largest single on_data delivery */
    long timeout_ms, idle_ms;
    uint64_t deadline_us; /* heap key */
    uint64_t last_byte_us;
    char *stash; /* owned; paused: stash_dec body bytes not yet delivered, then stash_raw
                    received bytes not yet parsed */
    size_t stash_dec, stash_raw;
};

/* A native connection: one transfer at a time, kept alive between them. */
struct h1conn {
    int fd;
    uint32_t id; /* index in up->conns */
    uint32_t origin;
    int connecting; /* connect() in progress */
    int readable;   /* edge-triggered: bytes (or EOF) may be waiting */
    int writable;
    int rdhup; /* the peer shut its side: read to the end */
    int busy;
    int reused;    /* carried a complete response before */
    SSL *ssl;      /* https: the session over fd, owned (h1t_conn_free); NULL for http */
    int tls_ready; /* the handshake is done */
    int tls_write_wants_read; /* a write waits for the socket to be readable */
    uint32_t slot; /* when busy and not draining */
    uint64_t idle_since_us;
    int draining;           /* busy without a transfer: its cancelled one's response read out */
    uint64_t drain_until_us;
    size_t drain_left;          /* bytes that may still be read and dropped */
    struct h1conn *prev, *next; /* origin's idle list (most recent first), or the draining
                                   list (oldest first) */
    struct h1_parser rp;
};

struct h1origin {
    char hostport[270];         /* Host header value */
    char host[256];             /* the name (or address) alone: SNI and certificate check */
    int tls;                    /* https */
    SSL_CTX *ctx;               /* https: how the certificate is verified (borrowed: h1t_ctx) */
    SSL_SESSION *sess;          /* https: the last session the origin was given, offered again
                                   (owned: replaced by h1tls.c, freed with the upstream) */
    struct sockaddr_storage sa; /* guarded by up->lock (submit may change it for a name) */
    socklen_t salen;
    int named;           /* a host name, not a literal address */
    uint64_t checked_us; /* last look at the resolver's answer */
    struct h1conn *idle; /* idle list head */
    unsigned n_idle;
};

struct rt_upstream {
    CURLM *multi;
    pthread_t thread;
    int thread_started;
    _Atomic int stop;
    int embedded;    /* no thread: the owner drives rt_upstream_run */
    pthread_t owner; /* embedded: the thread that runs the loop (set on its first run) */
    _Atomic int owner_set;
    int in_curl;              /* owner thread is inside the loop (curl calls, callbacks) */
    int epfd;                 /* epoll set: curl's sockets and the wakeup */
    int wakefd;               /* eventfd: commands are waiting */
    uint64_t deadline_us;     /* curl's timer, monotonic us, 0 = none; loop thread */
    _Atomic int wake_pending; /* an eventfd write is on its way to the loop */
    int closed;               /* guarded by lock: submit refuses */
    pthread_mutex_t lock;     /* guards the free stack, the command ring and slot gen/cmds/queued */
    size_t cap;               /* slots */
    struct slot *slots;
    uint32_t *free_stack; /* cap entries */
    size_t free_len;
    uint32_t *ring; /* cap entries: slot indices with pending commands */
    size_t ring_head, ring_len;
    uint32_t *batch;      /* loop-thread scratch, cap entries */
    unsigned char *fds;   /* RT_UPSTREAM_FD_TABLE FD_* states; loop thread */
    unsigned *batch_cmds; /* cap entries */
    _Atomic uint64_t st_submitted, st_completed, st_cancelled, st_timeouts, st_full, st_too_big;
    _Atomic uint64_t st_active, st_native, st_native_full, st_tls_handshakes, st_tls_resumed;
    _Atomic uint64_t st_conns_opened, st_conns_closed[RT_UPC_N], st_drained;
    /* native HTTP/1.1 client; loop thread */
    int native;     /* http:// providers go through it (no proxy in the environment) */
    int native_tls; /* https:// providers too (no https proxy in the environment) */
    long max_conns, max_idle_per_origin;
    struct h1origin *origins; /* H1_ORIGINS_MAX */
    unsigned n_origins;
    int origins_full_warned;
    struct h1conn **conns; /* max_conns entries; owns every connection (idle or busy) */
    uint32_t *conn_free;   /* free ids */
    size_t conn_free_len;
    long n_conns;
    struct h1conn *drain_head, *drain_tail; /* draining connections, by deadline */
    uint32_t *heap; /* cap entries: slots ordered by deadline_us */
    size_t heap_len;
    char *rbuf; /* H1_RECV_BYTES, shared by every connection of the loop */
};

/* ---- upstream.c, for h1client.c: the slots, the command ring, the module's clock ---- */
void up_slot_finish(struct rt_upstream *up, uint32_t idx, CURLcode rc, int cancelled);
int up_resp_append(struct slot *s, const char *p, size_t n);
void up_timer_arm(struct rt_upstream *up, uint32_t idx, uint64_t deadline);
void up_timer_disarm(struct rt_upstream *up, uint32_t idx);
uint64_t up_slot_deadline(const struct slot *s, uint64_t now);
int up_slot_stash(struct slot *s, const char *dec, size_t ndec, const char *raw, size_t nraw);
/* up_has_content_type: 1 when req gives its own Content-Type header (then the default,
 * application/json, is not added). */
int up_has_content_type(const struct rt_upstream_request *req);

void up_slot_begin(struct slot *s, struct rt_upstream_request *req,
                   const struct rt_upstream_ops *ops, void *ud);
void up_slot_give_back(struct rt_upstream *up, uint32_t idx);
uint64_t up_handle_make(uint32_t idx, uint32_t gen);
void up_cmd_post_locked(struct rt_upstream *up, uint32_t idx, unsigned cmd);
void up_wake(struct rt_upstream *up);
int up_on_owner_thread(struct rt_upstream *up);
void up_slot_release(struct rt_upstream *up, uint32_t idx);

/* ---- h1client.c, for upstream.c: the built-in client's transfers and connections ---- */
/* h1c_conn_close: close and count it (reason: enum rt_upstream_close). h1c_conn_release:
 * detach the transfer's connection; reason H1_KEEP keeps it in the pool when it may be.
 * h1c_conn_drain: the transfer is cancelled: keep its connection reading out the response when
 * it can (H1_DRAIN_*), close it otherwise. */
void h1c_conn_close(struct rt_upstream *up, struct h1conn *c, int reason);
void h1c_conn_release(struct rt_upstream *up, struct slot *s, int reason);
void h1c_conn_drain(struct rt_upstream *up, struct slot *s);
void h1c_event(struct rt_upstream *up, uint32_t id, uint32_t events);
void h1c_unpause(struct rt_upstream *up, uint32_t idx);
void h1c_timers(struct rt_upstream *up);
int h1c_origin_of(struct rt_upstream *up, const struct rt_upstream_request *req,
                  const char **path);
void h1c_start(struct rt_upstream *up, uint32_t idx, int in_submit);
int h1c_submit(struct rt_upstream *up, uint32_t idx, uint32_t gen, uint32_t oi, const char *path,
               const char *hostport, struct rt_upstream_request *req,
               const struct rt_upstream_ops *ops, void *ud, uint64_t *handle);

/* ---- h1tls.c, for h1client.c: TLS on the built-in client's connections ---- */
/* h1t_ctx: the shared context for a way of verifying (NULL: libcurl carries the transfer;
 * *full set when it is because the table of H1T_CTX_MAX contexts is full). Owned by h1tls.c,
 * freed by rt_upstream_global_fini; callers borrow it.
 * h1t_conn_setup: the connection's session for its origin, 0 or -1 with errbuf set.
 * h1t_handshake: 1 done, 0 waiting for the socket (readable/writable cleared), -1 failed (why).
 * h1t_write: bytes written, 0 waiting, -1 failed (why). h1t_read: bytes, 0 at the end, -1 with
 * errno EAGAIN when waiting, -2 failed (why). h1t_idle_ok: 1 when an idle connection's
 * readable socket held nothing but records without data (kept). h1t_pending: decrypted bytes
 * left unread. */
SSL_CTX *h1t_ctx(int no_verify, const char *ca_file, int *full);
void h1t_global_fini(void);
int h1t_conn_setup(struct h1conn *c, struct h1origin *o, char *errbuf, size_t cap);
void h1t_conn_free(struct h1conn *c);
int h1t_handshake(struct rt_upstream *up, struct h1conn *c, char *why, size_t cap);
ssize_t h1t_write(struct rt_upstream *up, struct h1conn *c, const char *p, size_t n, char *why,
                  size_t cap);
ssize_t h1t_read(struct rt_upstream *up, struct h1conn *c, char *p, size_t n, char *why,
                 size_t cap);
int h1t_idle_ok(struct rt_upstream *up, struct h1conn *c);
int h1t_pending(const struct h1conn *c);
/* upstream.c: the CA store both clients verify with when a deployment has none of its own:
 * the SSL_CERT_FILE bundle alone; else libcurl's directory; else libcurl's bundle. The one not
 * used is NULL; both NULL when libcurl knows of neither. */
void up_ca_store(const char **file, const char **path);

#endif
