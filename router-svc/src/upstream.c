#include "upstream.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <curl/curl.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "h1.h"
#include "tg_err.h"
#include "tg_log.h"
#include "tg_time.h"

/* epoll events handled per wakeup of the loop */
#define RT_UPSTREAM_EVENTS_BATCH 64
/* Sockets below this descriptor number that curl opened through us keep their epoll
 * registration between transfers (see socket_cb); higher ones are registered per transfer. */
#define RT_UPSTREAM_FD_TABLE 65536
/* native HTTP/1.1 client: origins (scheme http, literal address) per loop, the tag that marks
 * its connections in epoll data, the shared receive buffer, the idle age after which a kept
 * connection is not reused */
#define H1_ORIGINS_MAX 64
#define H1_TAG (1ull << 63)
#define H1_RECV_BYTES (16u * 1024u)
#define H1_IDLE_MAX_US (60ull * 1000000ull)
#define H1_NO_HEAP UINT32_MAX
#define H1_DNS_CHECK_US 1000000ull

/* fd table states (one byte per descriptor) */
enum {
    FD_OURS = 1,    /* opened by opensocket_cb, not yet closed */
    FD_IN_EPOLL = 2, /* registered in up->epfd */
    FD_WATCHED = 4, /* curl watches it now (else the registration is only kept) */
    FD_EV_IN = 8,   /* registered events */
    FD_EV_OUT = 16
};

/* SSL_CERT_FILE (OpenSSL's and curl's name): a CA bundle that replaces the system's for the
 * providers' certificates, read once at start. "" when unset. */
static char ca_file[4096];

enum { CMD_SUBMIT = 1, CMD_CANCEL = 2, CMD_UNPAUSE = 4 };
enum { SLOT_FREE = 0, SLOT_QUEUED, SLOT_ACTIVE };

struct slot {
    uint32_t gen;        /* bumped when the slot is freed; guarded by up->lock */
    unsigned cmds;       /* pending CMD_* bits; guarded by up->lock */
    int queued;          /* index is in the command ring; guarded by up->lock */
    int submitted;       /* CMD_SUBMIT posted, slot not yet released; guarded by up->lock */
    int state;           /* SLOT_*; loop thread after submit */
    CURL *easy;          /* reused across transfers */
    struct curl_slist *hdrs; /* kept across transfers while the next one sends the same set */
    int hdrs_n;              /* request headers at the head of hdrs (the fixed two follow) */
    char *req_body;      /* owned */
    char *resp;          /* response body, grows up to resp_cap */
    size_t resp_len;
    size_t resp_alloc;
    size_t resp_cap;     /* bytes */
    int too_big;
    int stream;
    long retry_after_s;
    uint64_t start_us;   /* monotonic */
    uint64_t ttfb_us;
    const struct rt_upstream_ops *ops;
    void *ud;
    char errbuf[CURL_ERROR_SIZE];
    /* native HTTP/1.1 transfers (native == 1); loop thread after submit */
    int native;
    int paused;          /* on_data asked to pause; bytes wait in stash */
    int retried;         /* already moved once from a dead kept-alive connection */
    int fail_err;        /* TG_* to report from the timer (a failure found inside submit) */
    long status;
    uint32_t origin;
    uint32_t heap_pos;   /* index in up->heap, H1_NO_HEAP when not armed */
    struct h1conn *conn; /* the connection carrying the transfer (borrowed: up->conns owns
                            it), NULL when none */
    char *head;          /* request line and headers, owned (freed at slot release) */
    size_t head_len;
    size_t body_len;
    size_t sent;         /* bytes of head + body written */
    size_t recv_max;     /* largest single on_data delivery */
    long timeout_ms, idle_ms;
    uint64_t deadline_us; /* heap key */
    uint64_t last_byte_us;
    char *stash;         /* owned; paused: stash_dec body bytes not yet delivered, then stash_raw
                            received bytes not yet parsed */
    size_t stash_dec, stash_raw;
};

/* A native connection: one transfer at a time, kept alive between them. */
struct h1conn {
    int fd;
    uint32_t id;          /* index in up->conns */
    uint32_t origin;
    int connecting;       /* connect() in progress */
    int readable;         /* edge-triggered: bytes (or EOF) may be waiting */
    int writable;
    int rdhup;            /* the peer shut its side: read to the end */
    int busy;
    int reused;           /* carried a complete response before */
    uint32_t slot;        /* when busy */
    uint64_t idle_since_us;
    struct h1conn *prev, *next; /* origin's idle list (most recent first) */
    struct h1_parser rp;
};

struct h1origin {
    char hostport[270];   /* Host header value */
    struct sockaddr_storage sa; /* guarded by up->lock (submit may change it for a name) */
    socklen_t salen;
    int named;            /* a host name, not a literal address */
    uint64_t checked_us;  /* last look at the resolver's answer */
    struct h1conn *idle;  /* idle list head */
    unsigned n_idle;
};

struct rt_upstream {
    CURLM *multi;
    pthread_t thread;
    int thread_started;
    _Atomic int stop;
    int embedded;         /* no thread: the owner drives rt_upstream_run */
    pthread_t owner;      /* embedded: the thread that runs the loop (set on its first run) */
    _Atomic int owner_set;
    int in_curl;          /* owner thread is inside the loop (curl calls, callbacks) */
    int epfd;             /* epoll set: curl's sockets and the wakeup */
    int wakefd;           /* eventfd: commands are waiting */
    uint64_t deadline_us; /* curl's timer, monotonic us, 0 = none; loop thread */
    _Atomic int wake_pending; /* an eventfd write is on its way to the loop */
    int closed;           /* guarded by lock: submit refuses */
    pthread_mutex_t lock; /* guards the free stack, the command ring and slot gen/cmds/queued */
    size_t cap;           /* slots */
    struct slot *slots;
    uint32_t *free_stack; /* cap entries */
    size_t free_len;
    uint32_t *ring;       /* cap entries: slot indices with pending commands */
    size_t ring_head, ring_len;
    uint32_t *batch;      /* loop-thread scratch, cap entries */
    unsigned char *fds;   /* RT_UPSTREAM_FD_TABLE FD_* states; loop thread */
    unsigned *batch_cmds; /* cap entries */
    _Atomic uint64_t st_submitted, st_completed, st_cancelled, st_timeouts, st_full, st_too_big;
    _Atomic uint64_t st_active, st_native, st_native_full;
    /* native HTTP/1.1 client; loop thread */
    int native;           /* http:// to a literal address goes through it */
    long max_conns, max_idle_per_origin;
    struct h1origin *origins; /* H1_ORIGINS_MAX */
    unsigned n_origins;
    int origins_full_warned;
    struct h1conn **conns;    /* max_conns entries; owns every connection (idle or busy) */
    uint32_t *conn_free;      /* free ids */
    size_t conn_free_len;
    long n_conns;
    uint32_t *heap;           /* cap entries: slots ordered by deadline_us */
    size_t heap_len;
    char *rbuf;               /* H1_RECV_BYTES, shared by every connection of the loop */
};

static uint64_t handle_make(uint32_t idx, uint32_t gen)
{
    return ((uint64_t)gen << 32) | idx;
}

/* Queue cmd for slot idx when the handle's generation is current. Caller holds up->lock. */
static void cmd_post_locked(struct rt_upstream *up, uint32_t idx, unsigned cmd)
{
    struct slot *s = &up->slots[idx];

    s->cmds |= cmd;
    if (!s->queued) {
        /* each slot is in the ring at most once, so cap entries always suffice */
        up->ring[(up->ring_head + up->ring_len) % up->cap] = idx;
        up->ring_len++;
        s->queued = 1;
    }
}

/* resp_append: keep n response bytes that are not streamed to on_data (a non-stream body, or
 * a stream's error body). Over resp_cap: a non-stream transfer is too big (-1, too_big set); a
 * stream's error body keeps its head and drops the rest (0). -1 with errbuf set when memory ran
 * out. Both clients. */
static int resp_append(struct slot *s, const char *p, size_t n)
{
    if (s->resp_len + n > s->resp_cap) {
        if (!s->stream) {
            s->too_big = 1;
            return -1;
        }
        n = s->resp_cap - s->resp_len;
    }
    if (n == 0)
        return 0;
    if (s->resp_len + n + 1 > s->resp_alloc) {
        size_t want = s->resp_alloc ? s->resp_alloc : 4096;
        char *nb;

        while (want < s->resp_len + n + 1)
            want *= 2;
        if (want > s->resp_cap + 1)
            want = s->resp_cap + 1;
        nb = realloc(s->resp, want);
        if (nb == NULL) {
            snprintf(s->errbuf, sizeof(s->errbuf), "out of memory");
            return -1;
        }
        s->resp = nb;
        s->resp_alloc = want;
    }
    memcpy(s->resp + s->resp_len, p, n);
    s->resp_len += n;
    s->resp[s->resp_len] = '\0';
    return 0;
}

static int h1_stash(struct slot *s, const char *dec, size_t ndec, const char *raw, size_t nraw);

/* Stream bytes from libcurl to on_data in pieces of at most recv_max (the receiver's contract:
 * curl delivers up to CURL_MAX_WRITE_SIZE whatever CURLOPT_BUFFERSIZE says when it speaks
 * HTTP/2, and a receiver whose buffer a single delivery overflows could only pause for ever).
 * Returns the bytes taken; stops at a pause. */
static size_t curl_deliver(struct slot *s, const char *p, size_t n, int *paused)
{
    size_t took = 0;

    *paused = 0;
    while (took < n) {
        size_t piece = n - took;
        size_t r;

        if (s->recv_max > 0 && piece > s->recv_max)
            piece = s->recv_max;
        r = s->ops->on_data(s->ud, p + took, piece);
        if (r == RT_UPSTREAM_PAUSE) {
            *paused = 1;
            break;
        }
        if (r != piece)
            return (size_t)-1; /* refused: the transfer fails */
        took += piece;
    }
    return took;
}

static size_t write_cb(char *p, size_t size, size_t nmemb, void *userdata)
{
    struct slot *s = userdata;
    size_t n = size * nmemb;
    long code = 0;

    s->last_byte_us = tg_now_mono_us();
    if (s->ttfb_us == 0)
        s->ttfb_us = s->last_byte_us - s->start_us + 1;
    curl_easy_getinfo(s->easy, CURLINFO_RESPONSE_CODE, &code);
    if (s->stream && code >= 200 && code < 300 && s->ops->on_data != NULL) {
        int paused = 0;
        size_t took = curl_deliver(s, p, n, &paused);

        if (took == (size_t)-1)
            return 0; /* aborts the transfer */
        if (!paused)
            return n;
        s->paused = 1; /* not idle while the client is slow (see curl_timer) */
        if (took == 0)
            return CURL_WRITEFUNC_PAUSE; /* curl keeps the bytes and delivers them again */
        /* part of the delivery was taken: keep the rest here (curl cannot take a partial
         * count), and stop curl until the receiver asks for more */
        if (h1_stash(s, p + took, n - took, NULL, 0) != 0)
            return 0;
        curl_easy_pause(s->easy, CURLPAUSE_RECV);
        return n;
    }
    if (resp_append(s, p, n) != 0)
        return 0; /* aborts the transfer with CURLE_WRITE_ERROR (too_big says which) */
    return size * nmemb;
}

/* Resume a libcurl stream: what a pause kept (curl_deliver's rest) first, then curl's own. */
static void curl_unpause(struct slot *s)
{
    s->last_byte_us = tg_now_mono_us();
    if (s->stash_dec > 0) {
        int paused = 0;
        size_t took = curl_deliver(s, s->stash, s->stash_dec, &paused);

        if (took == (size_t)-1) {
            /* refused: nothing more is wanted; curl's next delivery is refused the same way */
            free(s->stash);
            s->stash = NULL;
            s->stash_dec = 0;
        } else if (paused) {
            memmove(s->stash, s->stash + took, s->stash_dec - took);
            s->stash_dec -= took;
            return; /* still paused */
        } else {
            free(s->stash);
            s->stash = NULL;
            s->stash_dec = 0;
        }
    }
    s->paused = 0;
    curl_easy_pause(s->easy, CURLPAUSE_CONT);
}

static size_t header_cb(char *p, size_t size, size_t nmemb, void *userdata)
{
    struct slot *s = userdata;
    size_t n = size * nmemb;
    static const char name[] = "retry-after:";

    if (n > sizeof(name) - 1 && strncasecmp(p, name, sizeof(name) - 1) == 0) {
        char tmp[32];
        size_t vlen = n - (sizeof(name) - 1);

        if (vlen >= sizeof(tmp))
            vlen = sizeof(tmp) - 1;
        memcpy(tmp, p + sizeof(name) - 1, vlen);
        tmp[vlen] = '\0';
        char *end = NULL;
        long v = strtol(tmp, &end, 10);

        if (end != tmp && v >= 0 && v < 86400)
            s->retry_after_s = v;
    }
    return n;
}

/* 1 when the slot's kept header list is exactly the one req asks for (same strings, same
 * order): the list is then reused instead of being built again (two allocations a header). */
static int slot_headers_same(const struct slot *s, const struct rt_upstream_request *req)
{
    const struct curl_slist *n = s->hdrs;
    int i;

    if (n == NULL || s->hdrs_n < 0)
        return 0;
    for (i = 0; i < RT_UPSTREAM_HEADERS_MAX && req->headers[i] != NULL; i++) {
        if (i >= s->hdrs_n || n == NULL || strcmp(n->data, req->headers[i]) != 0)
            return 0;
        n = n->next;
    }
    return i == s->hdrs_n;
}

static void slot_release(struct rt_upstream *up, uint32_t idx)
{
    struct slot *s = &up->slots[idx];

    free(s->req_body);
    s->req_body = NULL;
    free(s->head);
    s->head = NULL;
    free(s->stash);
    s->stash = NULL;
    s->stash_dec = s->stash_raw = 0;
    s->paused = 0;
    s->native = 0;
    s->fail_err = 0;
    free(s->resp);
    s->resp = NULL;
    s->resp_len = s->resp_alloc = 0;
    s->state = SLOT_FREE;
    s->ops = NULL;
    s->ud = NULL;
    pthread_mutex_lock(&up->lock);
    s->gen++;
    s->cmds = 0;
    s->submitted = 0;
    up->free_stack[up->free_len++] = idx;
    pthread_mutex_unlock(&up->lock);
    atomic_fetch_sub(&up->st_active, 1);
}

/* ------------------------------------------------------------------ native HTTP/1.1 client
 *
 * Plain-text providers at a literal address (in-cluster model servers, sidecars, the fake
 * provider) skip libcurl: the loop writes the request with one sendmsg, parses the response with
 * h1 and hands bytes on as they arrive. Connections are edge-triggered in the loop's epoll set
 * from connect to close, so a request on a kept-alive connection costs no epoll_ctl and no
 * poll(); the receive buffer is shared by the loop, so an idle stream holds no buffer. Every
 * semantic of the curl path is kept: timeouts (total; or first byte then idle for streams,
 * not counted while paused), pause/unpause, response cap, retry-after, cancel, one silent retry
 * when a kept-alive connection turns out dead before any response byte. */

static void slot_finish(struct rt_upstream *up, uint32_t idx, CURLcode rc, int cancelled);

static uint64_t h1_deadline(const struct slot *s, uint64_t now)
{
    if (s->fail_err != 0)
        return 0;
    if (s->stream && s->ttfb_us != 0) {
        if (s->paused)
            return now + (uint64_t)s->idle_ms * 1000u; /* a paused stream is not idle */
        return s->last_byte_us + (uint64_t)s->idle_ms * 1000u;
    }
    return s->start_us + (uint64_t)s->timeout_ms * 1000u;
}

static void heap_swap(struct rt_upstream *up, size_t a, size_t b)
{
    uint32_t t = up->heap[a];

    up->heap[a] = up->heap[b];
    up->heap[b] = t;
    up->slots[up->heap[a]].heap_pos = (uint32_t)a;
    up->slots[up->heap[b]].heap_pos = (uint32_t)b;
}

static uint64_t heap_key(const struct rt_upstream *up, size_t i)
{
    return up->slots[up->heap[i]].deadline_us;
}

static void heap_fix(struct rt_upstream *up, size_t i)
{
    while (i > 0 && heap_key(up, (i - 1) / 2) > heap_key(up, i)) {
        heap_swap(up, i, (i - 1) / 2);
        i = (i - 1) / 2;
    }
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;

        if (l < up->heap_len && heap_key(up, l) < heap_key(up, m))
            m = l;
        if (r < up->heap_len && heap_key(up, r) < heap_key(up, m))
            m = r;
        if (m == i)
            break;
        heap_swap(up, i, m);
        i = m;
    }
}

static void timer_arm(struct rt_upstream *up, uint32_t idx, uint64_t deadline)
{
    struct slot *s = &up->slots[idx];

    s->deadline_us = deadline;
    if (s->heap_pos == H1_NO_HEAP) {
        s->heap_pos = (uint32_t)up->heap_len;
        up->heap[up->heap_len++] = idx;
    }
    heap_fix(up, s->heap_pos);
}

static void timer_disarm(struct rt_upstream *up, uint32_t idx)
{
    struct slot *s = &up->slots[idx];
    size_t i = s->heap_pos;

    if (i == H1_NO_HEAP)
        return;
    s->heap_pos = H1_NO_HEAP;
    up->heap_len--;
    if (i != up->heap_len) {
        up->heap[i] = up->heap[up->heap_len];
        up->slots[up->heap[i]].heap_pos = (uint32_t)i;
        heap_fix(up, i);
    }
}

static void idle_unlink(struct rt_upstream *up, struct h1conn *c)
{
    struct h1origin *o = &up->origins[c->origin];

    if (c->prev != NULL)
        c->prev->next = c->next;
    else
        o->idle = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    c->prev = c->next = NULL;
    o->n_idle--;
}

static void conn_close(struct rt_upstream *up, struct h1conn *c)
{
    if (!c->busy)
        idle_unlink(up, c);
    close(c->fd); /* leaves the epoll set with it */
    h1_reset(&c->rp);
    up->conns[c->id] = NULL;
    up->conn_free[up->conn_free_len++] = c->id;
    up->n_conns--;
    free(c);
}

/* Detach the transfer's connection: kept for the next request when the response ended cleanly
 * on a connection that stays open, closed otherwise. */
static void conn_release(struct rt_upstream *up, struct slot *s, int keep)
{
    struct h1conn *c = s->conn;
    struct h1origin *o;

    if (c == NULL)
        return;
    s->conn = NULL;
    if (!keep || (long)up->origins[c->origin].n_idle >= up->max_idle_per_origin) {
        conn_close(up, c);
        return;
    }
    o = &up->origins[c->origin];
    c->busy = 0;
    c->reused = 1;
    c->idle_since_us = tg_now_mono_us();
    h1_reset(&c->rp);
    c->prev = NULL;
    c->next = o->idle;
    if (o->idle != NULL)
        o->idle->prev = c;
    o->idle = c;
    o->n_idle++;
}

/* Close one idle connection of any origin to make room (the least recently used of the first
 * origin that has one). Returns 0 when none was idle. */
static int conn_evict_idle(struct rt_upstream *up)
{
    for (unsigned i = 0; i < up->n_origins; i++) {
        struct h1conn *c = up->origins[i].idle;

        if (c == NULL)
            continue;
        while (c->next != NULL)
            c = c->next;
        conn_close(up, c);
        return 1;
    }
    return 0;
}

/* A new connection to origin oi, connect() started. NULL with errbuf set on failure. */
static struct h1conn *conn_open(struct rt_upstream *up, uint32_t oi, char *errbuf, size_t cap)
{
    const struct h1origin *o = &up->origins[oi];
    struct h1conn *c;
    struct epoll_event ev;
    struct sockaddr_storage sa;
    socklen_t salen;
    int one = 1;
    int fd;

    pthread_mutex_lock(&up->lock);
    sa = o->sa;
    salen = o->salen;
    pthread_mutex_unlock(&up->lock);

    if (up->n_conns >= up->max_conns && !conn_evict_idle(up)) {
        snprintf(errbuf, cap, "upstream connection limit reached");
        return NULL;
    }
    fd = socket(sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        snprintf(errbuf, cap, "cannot create a socket: %s", strerror(errno));
        return NULL;
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
    c = calloc(1, sizeof(*c));
    if (c == NULL) {
        close(fd);
        snprintf(errbuf, cap, "out of memory");
        return NULL;
    }
    c->fd = fd;
    c->origin = oi;
    h1_init(&c->rp);
    if (connect(fd, (const struct sockaddr *)&sa, salen) == 0) {
        c->writable = 1;
    } else if (errno == EINPROGRESS) {
        c->connecting = 1;
    } else {
        snprintf(errbuf, cap, "cannot connect to %.64s: %.72s", o->hostport, strerror(errno));
        close(fd);
        free(c);
        return NULL;
    }
    c->id = up->conn_free[--up->conn_free_len];
    up->conns[c->id] = c;
    up->n_conns++;
    memset(&ev, 0, sizeof(ev));
    ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
    ev.data.u64 = H1_TAG | c->id;
    if (epoll_ctl(up->epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
        snprintf(errbuf, cap, "cannot watch a socket: %s", strerror(errno));
        c->busy = 1; /* not on an idle list */
        conn_close(up, c);
        return NULL;
    }
    return c;
}

/* End the transfer with an error: its connection is closed. */
static void h1_fail(struct rt_upstream *up, uint32_t idx, int err, const char *why)
{
    struct slot *s = &up->slots[idx];

    snprintf(s->errbuf, sizeof(s->errbuf), "%s", why);
    s->fail_err = err;
    conn_release(up, s, 0);
    slot_finish(up, idx, err == TG_ETIMEOUT ? CURLE_OPERATION_TIMEDOUT : CURLE_RECV_ERROR, 0);
}

/* A failure found where on_done must not run yet (inside submit): reported by the timer on the
 * loop's next turn. */
static void h1_fail_later(struct rt_upstream *up, uint32_t idx, int err)
{
    struct slot *s = &up->slots[idx];

    conn_release(up, s, 0);
    s->fail_err = err;
    timer_arm(up, idx, 0);
}

static void h1_progress(struct rt_upstream *up, uint32_t idx);

/* Attach a connection to the transfer: the most recently used idle one of its origin, or a new
 * one (always new when fresh is set). 0, or -1 with errbuf set. */
static int h1_attach(struct rt_upstream *up, uint32_t idx, int fresh)
{
    struct slot *s = &up->slots[idx];
    struct h1origin *o = &up->origins[s->origin];
    struct h1conn *c = NULL;
    uint64_t now = tg_now_mono_us();

    while (!fresh && o->idle != NULL) {
        c = o->idle;
        idle_unlink(up, c);
        c->busy = 1;
        if (now - c->idle_since_us <= H1_IDLE_MAX_US && !c->readable)
            break;
        conn_close(up, c); /* too old, or the peer sent something (a close) while idle */
        c = NULL;
    }
    if (c == NULL) {
        c = conn_open(up, s->origin, s->errbuf, sizeof(s->errbuf));
        if (c == NULL)
            return -1;
    }
    c->busy = 1;
    c->slot = idx;
    s->conn = c;
    s->sent = 0;
    return 0;
}

/* Write what is left of the request. 0 (written, or waiting for the socket), -1 on an error
 * (errbuf set). */
static int h1_send(struct slot *s)
{
    struct h1conn *c = s->conn;
    size_t total = s->head_len + s->body_len;

    while (s->sent < total && c->writable) {
        struct iovec iov[2];
        struct msghdr mh;
        int niov = 0;
        ssize_t n;

        if (s->sent < s->head_len) {
            iov[niov].iov_base = s->head + s->sent;
            iov[niov++].iov_len = s->head_len - s->sent;
            if (s->body_len > 0) {
                iov[niov].iov_base = s->req_body;
                iov[niov++].iov_len = s->body_len;
            }
        } else {
            iov[niov].iov_base = s->req_body + (s->sent - s->head_len);
            iov[niov++].iov_len = total - s->sent;
        }
        memset(&mh, 0, sizeof(mh));
        mh.msg_iov = iov;
        mh.msg_iovlen = (size_t)niov;
        n = sendmsg(c->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                c->writable = 0;
                return 0;
            }
            snprintf(s->errbuf, sizeof(s->errbuf), "sending the request failed: %s",
                     strerror(errno));
            return -1;
        }
        s->sent += (size_t)n;
    }
    return 0;
}

/* The connection died before any byte of a response: a kept-alive connection the provider had
 * closed is retried once on a new one; anything else fails the transfer. */
static void h1_dead(struct rt_upstream *up, uint32_t idx, const char *why)
{
    struct slot *s = &up->slots[idx];

    if (s->conn != NULL && s->conn->reused && !h1_started(&s->conn->rp) && !s->retried) {
        s->retried = 1;
        conn_release(up, s, 0);
        if (h1_attach(up, idx, 1) != 0) {
            h1_fail(up, idx, TG_EIO, s->errbuf);
            return;
        }
        h1_progress(up, idx);
        return;
    }
    h1_fail(up, idx, TG_EIO, why);
}

/* Body bytes for the transfer. Returns 0 when all were taken, 1 when on_data paused (*took
 * bytes taken), -1 when the transfer must end (errbuf set, or too_big). */
static int h1_body(struct slot *s, const char *p, size_t n, size_t *took)
{
    *took = 0;
    if (s->stream && s->status >= 200 && s->status < 300 && s->ops->on_data != NULL) {
        while (*took < n) {
            size_t piece = n - *took;
            size_t r;

            if (s->recv_max > 0 && piece > s->recv_max)
                piece = s->recv_max;
            r = s->ops->on_data(s->ud, p + *took, piece);
            if (r == RT_UPSTREAM_PAUSE) {
                s->paused = 1;
                return 1;
            }
            if (r != piece) {
                snprintf(s->errbuf, sizeof(s->errbuf), "response bytes refused");
                return -1;
            }
            *took += piece;
        }
        return 0;
    }
    if (resp_append(s, p, n) != 0)
        return -1;
    *took = n;
    return 0;
}

/* Keep what a pause left: dec body bytes not delivered, then raw bytes not parsed. */
static int h1_stash(struct slot *s, const char *dec, size_t ndec, const char *raw, size_t nraw)
{
    char *b = NULL;

    if (ndec + nraw > 0) {
        b = malloc(ndec + nraw);
        if (b == NULL)
            return -1;
        memcpy(b, dec, ndec);
        if (nraw > 0)
            memcpy(b + ndec, raw, nraw);
    }
    free(s->stash);
    s->stash = b;
    s->stash_dec = ndec;
    s->stash_raw = nraw;
    return 0;
}

/* Parse received bytes. Returns 0 to read on, 1 when the transfer ended or paused. */
static int h1_parse(struct rt_upstream *up, uint32_t idx, const char *buf, size_t n)
{
    struct slot *s = &up->slots[idx];
    struct h1conn *c = s->conn;

    for (;;) {
        struct h1_event ev;
        size_t used = h1_feed(&c->rp, buf, n, &ev);
        size_t took = 0;
        int r;

        buf += used;
        n -= used;
        switch (ev.kind) {
        case H1_NEED_MORE:
            return 0;
        case H1_HEADERS:
            s->status = c->rp.status;
            s->retry_after_s = c->rp.retry_after_s;
            continue;
        case H1_BODY:
            r = h1_body(s, ev.p, ev.n, &took);
            if (r == 0)
                continue;
            if (r > 0) {
                if (h1_stash(s, ev.p + took, ev.n - took, buf, n) != 0) {
                    h1_fail(up, idx, TG_EIO, "out of memory");
                    return 1;
                }
                timer_arm(up, idx, h1_deadline(s, tg_now_mono_us()));
                return 1;
            }
            h1_fail(up, idx, TG_EIO, s->errbuf);
            return 1;
        case H1_DONE:
            /* bytes after the response: the provider broke framing, do not reuse; nor when it
             * answered before taking the whole request */
            conn_release(up, s,
                         c->rp.keep_alive && n == 0 && !c->rdhup &&
                             s->sent == s->head_len + s->body_len);
            slot_finish(up, idx, CURLE_OK, 0);
            return 1;
        case H1_ERROR:
        default: {
            char why[160];

            snprintf(why, sizeof(why), "invalid HTTP response from upstream: %s", ev.err);
            h1_fail(up, idx, TG_EIO, why);
            return 1;
        }
        }
    }
}

/* Read and parse until the socket is drained, the transfer ends or it pauses. */
static void h1_read(struct rt_upstream *up, uint32_t idx)
{
    struct slot *s = &up->slots[idx];
    struct h1conn *c = s->conn;

    while (c->readable && !s->paused) {
        ssize_t n = recv(c->fd, up->rbuf, H1_RECV_BYTES, 0);

        if (n > 0) {
            s->last_byte_us = tg_now_mono_us(); /* a stream is idle only without any byte */
            if (s->ttfb_us == 0)
                s->ttfb_us = s->last_byte_us - s->start_us + 1;
            /* a short read drained the socket (edge-triggered: new bytes raise a new event),
             * unless the peer also closed: then read on to see the end */
            if ((size_t)n < H1_RECV_BYTES && !c->rdhup)
                c->readable = 0;
            if (h1_parse(up, idx, up->rbuf, (size_t)n) != 0)
                return;
            continue;
        }
        if (n == 0) {
            struct h1_event ev;

            c->readable = 0;
            if (!h1_started(&c->rp)) {
                h1_dead(up, idx, "connection closed before a response");
                return;
            }
            if (h1_eof(&c->rp, &ev) == H1_DONE) {
                conn_release(up, s, 0);
                slot_finish(up, idx, CURLE_OK, 0);
            } else {
                char why[160];

                snprintf(why, sizeof(why), "upstream %s", ev.err);
                h1_fail(up, idx, TG_EIO, why);
            }
            return;
        }
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            c->readable = 0;
            return;
        }
        {
            char why[160];

            snprintf(why, sizeof(why), "receiving the response failed: %s", strerror(errno));
            if (!h1_started(&c->rp))
                h1_dead(up, idx, why);
            else
                h1_fail(up, idx, TG_EIO, why);
        }
        return;
    }
}

/* Move the transfer on as far as its connection allows. */
static void h1_progress(struct rt_upstream *up, uint32_t idx)
{
    struct slot *s = &up->slots[idx];
    struct h1conn *c = s->conn;

    if (c == NULL)
        return;
    if (c->connecting) {
        int soerr = 0;
        socklen_t sl = sizeof(soerr);

        if (!c->writable)
            return;
        if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) != 0)
            soerr = errno;
        if (soerr != 0) {
            char why[160];

            snprintf(why, sizeof(why), "cannot connect to %.64s: %.72s",
                     up->origins[c->origin].hostport, strerror(soerr));
            h1_fail(up, idx, TG_EIO, why);
            return;
        }
        c->connecting = 0;
    }
    if (s->sent < s->head_len + s->body_len && h1_send(s) != 0) {
        uint32_t gen = s->gen;

        /* the provider may have answered early and closed (a 413 before the whole body): what
         * it said is the outcome; with nothing said, the connection was dead */
        c->readable = 1;
        h1_read(up, idx);
        if (s->gen != gen || s->conn != c)
            return; /* the read ended the transfer */
        if (!h1_started(&c->rp)) {
            h1_dead(up, idx, s->errbuf);
            return;
        }
        s->sent = s->head_len + s->body_len; /* nothing more can be written: read on */
        return;
    }
    h1_read(up, idx);
}

/* epoll event on a native connection. */
static void h1_event(struct rt_upstream *up, uint32_t id, uint32_t events)
{
    struct h1conn *c = id < (uint32_t)up->max_conns ? up->conns[id] : NULL;

    if (c == NULL)
        return; /* closed earlier in this batch */
    if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))
        c->readable = 1;
    if (events & (EPOLLRDHUP | EPOLLHUP))
        c->rdhup = 1;
    if (events & (EPOLLOUT | EPOLLHUP | EPOLLERR))
        c->writable = 1;
    if (!c->busy) {
        /* an idle connection has nothing to say but a close (or garbage): drop it now */
        if (c->readable)
            conn_close(up, c);
        return;
    }
    h1_progress(up, c->slot);
}

/* Deliver what a pause kept, then read on. */
static void h1_unpause(struct rt_upstream *up, uint32_t idx)
{
    struct slot *s = &up->slots[idx];
    char *b = s->stash;
    size_t ndec = s->stash_dec, nraw = s->stash_raw;
    size_t took = 0;
    int r;

    if (!s->paused || s->conn == NULL)
        return;
    s->paused = 0;
    s->stash = NULL;
    s->stash_dec = s->stash_raw = 0;
    s->last_byte_us = tg_now_mono_us();
    timer_arm(up, idx, h1_deadline(s, s->last_byte_us));
    r = ndec > 0 ? h1_body(s, b, ndec, &took) : 0;
    if (r > 0) {
        if (h1_stash(s, b + took, ndec - took, b + ndec, nraw) != 0)
            h1_fail(up, idx, TG_EIO, "out of memory");
        free(b);
        return;
    }
    if (r < 0) {
        free(b);
        h1_fail(up, idx, TG_EIO, s->errbuf);
        return;
    }
    /* parsed even when no raw byte is left: the paused bytes may have been the last of a
     * Content-Length body, and only a feed (of nothing) reports the response's end then */
    if (h1_parse(up, idx, b != NULL ? b + ndec : "", nraw) != 0) {
        free(b);
        return;
    }
    free(b);
    if (s->conn != NULL && !s->paused)
        h1_read(up, idx);
}

/* Timers due: timeouts, and failures found inside submit. */
static void h1_timers(struct rt_upstream *up)
{
    uint64_t now = tg_now_mono_us();

    for (int i = 0; i < 4 * RT_UPSTREAM_EVENTS_BATCH && up->heap_len > 0; i++) {
        uint32_t idx = up->heap[0];
        struct slot *s = &up->slots[idx];
        uint64_t d;

        if (s->deadline_us > now)
            break;
        if (s->fail_err != 0) {
            h1_fail(up, idx, s->fail_err, s->errbuf);
            continue;
        }
        d = h1_deadline(s, now);
        if (d > now) {
            timer_arm(up, idx, d);
            continue;
        }
        if (!s->native) {
            slot_finish(up, idx, CURLE_OPERATION_TIMEDOUT, 0);
            continue;
        }
        h1_fail(up, idx, TG_ETIMEOUT, "upstream timed out");
    }
}

/* ------------------------------------------------------------------ host names for the native
 * client
 *
 * getaddrinfo blocks, so it never runs on a loop: one resolver thread for the process keeps a
 * small table of names. A name not yet resolved (or that failed) sends its request through
 * libcurl, whose resolver runs off the loop too; once resolved, the built-in client takes it.
 * Entries are refreshed in the background every H1_DNS_TTL_US (a Service's address may
 * change) and the old address serves until the new one is known. IPv4 is preferred when a
 * name has both (a provider listening on one family is the common case). */

#define H1_DNS_MAX 64
#define H1_DNS_TTL_US (30ull * 1000000ull)
#define H1_DNS_RETRY_US (5ull * 1000000ull)

enum { DNS_EMPTY = 0, DNS_PENDING, DNS_OK, DNS_FAILED };

struct dns_entry {
    char host[256];
    char port[8];
    int state;
    int queued;          /* waiting for the resolver thread */
    uint64_t when_us;    /* resolved or failed at */
    struct sockaddr_storage sa;
    socklen_t salen;
};

static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int started;
    struct dns_entry e[H1_DNS_MAX];
} dns = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static void *dns_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&dns.mu);
    for (;;) {
        struct dns_entry *job = NULL;
        char host[256], port[8];
        struct addrinfo hints, *res = NULL, *pick = NULL;
        int rc;

        for (int i = 0; i < H1_DNS_MAX && job == NULL; i++) {
            if (dns.e[i].queued)
                job = &dns.e[i];
        }
        if (job == NULL) {
            pthread_cond_wait(&dns.cv, &dns.mu);
            continue;
        }
        memcpy(host, job->host, sizeof(host));
        memcpy(port, job->port, sizeof(port));
        pthread_mutex_unlock(&dns.mu);
        memset(&hints, 0, sizeof(hints));
        hints.ai_family = AF_UNSPEC;
        hints.ai_socktype = SOCK_STREAM;
        /* no AI_ADDRCONFIG: a host with only loopback would get nothing */
        hints.ai_flags = AI_NUMERICSERV;
        rc = getaddrinfo(host, port, &hints, &res);
        for (struct addrinfo *a = rc == 0 ? res : NULL; a != NULL; a = a->ai_next) {
            if (a->ai_addrlen > sizeof(struct sockaddr_storage))
                continue;
            if (pick == NULL || (a->ai_family == AF_INET && pick->ai_family != AF_INET))
                pick = a;
        }
        pthread_mutex_lock(&dns.mu);
        job->queued = 0;
        job->when_us = tg_now_mono_us();
        if (pick != NULL) {
            memcpy(&job->sa, pick->ai_addr, pick->ai_addrlen);
            job->salen = pick->ai_addrlen;
            job->state = DNS_OK;
        } else if (job->state != DNS_OK) {
            job->state = DNS_FAILED; /* a failed refresh keeps the last good address */
        }
        if (res != NULL)
            freeaddrinfo(res);
    }
    return NULL;
}

/* Address of host:port when known (1), else 0 (resolution queued) or -1 (the table is full:
 * the name is never resolved here). Any thread. */
static int dns_lookup(const char *host, const char *port, struct sockaddr_storage *sa,
                      socklen_t *salen)
{
    uint64_t now = tg_now_mono_us();
    struct dns_entry *e = NULL, *free_e = NULL;
    int hit = 0, wake_it = 0;

    pthread_mutex_lock(&dns.mu);
    for (int i = 0; i < H1_DNS_MAX; i++) {
        if (dns.e[i].state == DNS_EMPTY) {
            if (free_e == NULL)
                free_e = &dns.e[i];
        } else if (strcmp(dns.e[i].host, host) == 0 && strcmp(dns.e[i].port, port) == 0) {
            e = &dns.e[i];
            break;
        }
    }
    if (e == NULL && free_e == NULL) {
        pthread_mutex_unlock(&dns.mu);
        return -1;
    }
    if (e == NULL) {
        e = free_e;
        snprintf(e->host, sizeof(e->host), "%s", host);
        snprintf(e->port, sizeof(e->port), "%s", port);
        e->state = DNS_PENDING;
        e->queued = 1;
        wake_it = 1;
    } else if (e != NULL) {
        if (e->state == DNS_OK) {
            memcpy(sa, &e->sa, sizeof(*sa));
            *salen = e->salen;
            hit = 1;
        }
        if (!e->queued && ((e->state == DNS_OK && now - e->when_us > H1_DNS_TTL_US) ||
                           (e->state == DNS_FAILED && now - e->when_us > H1_DNS_RETRY_US))) {
            e->queued = 1;
            wake_it = 1;
        }
    }
    if (wake_it && !dns.started) {
        pthread_t th;
        pthread_attr_t at;

        pthread_attr_init(&at);
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        if (pthread_create(&th, &at, dns_main, NULL) == 0)
            dns.started = 1;
        pthread_attr_destroy(&at);
    }
    if (wake_it)
        pthread_cond_signal(&dns.cv);
    pthread_mutex_unlock(&dns.mu);
    return hit;
}

/* Origin index for an http:// URL, the path in *path; -1 when the URL is for curl (https,
 * credentials in the URL, a name not resolved yet), -2 when it is because the origin or name
 * table is full (counted by the caller). Caller holds up->lock. */
static int h1_origin_of(struct rt_upstream *up, const char *url, const char **path)
{
    const char *h, *e, *pe;
    char host[256];
    long port = 80;
    struct sockaddr_storage sa;
    socklen_t salen = 0;
    size_t hl;
    uint64_t now;
    int named = 0;
    int rc;

    if (strncmp(url, "http://", 7) != 0)
        return -1;
    h = url + 7;
    pe = h + strcspn(h, "/?#");
    if (*h == '[') {
        e = memchr(h, ']', (size_t)(pe - h));
        if (e == NULL)
            return -1;
        hl = (size_t)(e - h - 1);
        if (hl == 0 || hl >= sizeof(host))
            return -1;
        memcpy(host, h + 1, hl);
        e++;
    } else {
        e = h;
        while (e < pe && *e != ':' && *e != '@')
            e++;
        if (e < pe && *e == '@')
            return -1; /* credentials in the URL: curl's business */
        hl = (size_t)(e - h);
        if (hl == 0 || hl >= sizeof(host))
            return -1;
        memcpy(host, h, hl);
    }
    host[hl] = '\0';
    if (e < pe) {
        char *end;

        if (*e != ':')
            return -1;
        port = strtol(e + 1, &end, 10);
        if (end != pe || port <= 0 || port > 65535)
            return -1;
    }
    if (*pe != '/')
        return -1; /* the router always builds an absolute path */
    *path = pe;
    now = tg_now_mono_us();
    for (unsigned i = 0; i < up->n_origins; i++) {
        struct h1origin *o = &up->origins[i];

        if (strncmp(o->hostport, h, (size_t)(pe - h)) != 0 || o->hostport[pe - h] != '\0')
            continue;
        if (o->named && now - o->checked_us > H1_DNS_CHECK_US) {
            /* a named origin follows its name: new connections go to the current address */
            char ps[8];

            o->checked_us = now;
            snprintf(ps, sizeof(ps), "%ld", port);
            if (dns_lookup(host, ps, &sa, &salen) > 0) {
                o->sa = sa;
                o->salen = salen;
            }
        }
        return (int)i;
    }
    memset(&sa, 0, sizeof(sa));
    if (inet_pton(AF_INET, host, &((struct sockaddr_in *)&sa)->sin_addr) == 1) {
        ((struct sockaddr_in *)&sa)->sin_family = AF_INET;
        ((struct sockaddr_in *)&sa)->sin_port = htons((uint16_t)port);
        salen = sizeof(struct sockaddr_in);
    } else if (inet_pton(AF_INET6, host, &((struct sockaddr_in6 *)&sa)->sin6_addr) == 1) {
        ((struct sockaddr_in6 *)&sa)->sin6_family = AF_INET6;
        ((struct sockaddr_in6 *)&sa)->sin6_port = htons((uint16_t)port);
        salen = sizeof(struct sockaddr_in6);
    } else {
        char ps[8];

        /* a host name: the resolver thread's answer, or curl until there is one */
        snprintf(ps, sizeof(ps), "%ld", port);
        rc = dns_lookup(host, ps, &sa, &salen);
        if (rc <= 0)
            return rc < 0 ? -2 : -1;
        named = 1;
    }
    if (up->n_origins >= H1_ORIGINS_MAX || (size_t)(pe - h) >= sizeof(up->origins[0].hostport)) {
        if (!up->origins_full_warned) {
            up->origins_full_warned = 1;
            TG_WARN("upstream: more than %d plain-http provider addresses on one loop; the "
                    "others go through libcurl",
                    H1_ORIGINS_MAX);
        }
        return -2;
    }
    {
        struct h1origin *o = &up->origins[up->n_origins];

        memcpy(o->hostport, h, (size_t)(pe - h));
        o->hostport[pe - h] = '\0';
        o->sa = sa;
        o->salen = salen;
        o->named = named;
        o->checked_us = now;
        o->idle = NULL;
        o->n_idle = 0;
    }
    return (int)up->n_origins++;
}

/* Prepare a native transfer in its slot (submit, any thread: no loop state touched).
 * Returns 0, or -1 when out of memory. */
static int h1_prepare(struct slot *s, const struct rt_upstream_request *req, const char *path,
                      const char *hostport)
{
    size_t cap = strlen(path) + strlen(hostport) + 128;
    size_t len;
    char *b;

    for (int i = 0; i < RT_UPSTREAM_HEADERS_MAX && req->headers[i] != NULL; i++)
        cap += strlen(req->headers[i]) + 2;
    b = malloc(cap);
    if (b == NULL)
        return -1;
    len = (size_t)snprintf(b, cap, "POST %s HTTP/1.1\r\nHost: %s\r\n", path, hostport);
    for (int i = 0; i < RT_UPSTREAM_HEADERS_MAX && req->headers[i] != NULL; i++) {
        size_t hl = strlen(req->headers[i]);

        memcpy(b + len, req->headers[i], hl);
        memcpy(b + len + hl, "\r\n", 2);
        len += hl + 2;
    }
    len += (size_t)snprintf(b + len, cap - len,
                            "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n",
                            s->body_len);
    free(s->head);
    s->head = b;
    s->head_len = len;
    return 0;
}

/* Start a prepared native transfer. Loop thread. in_submit: on_done must not run now. */
static void h1_start(struct rt_upstream *up, uint32_t idx, int in_submit)
{
    struct slot *s = &up->slots[idx];

    s->state = SLOT_ACTIVE;
    if (h1_attach(up, idx, 0) != 0) {
        h1_fail_later(up, idx, TG_EIO);
        if (!in_submit)
            h1_timers(up);
        return;
    }
    timer_arm(up, idx, h1_deadline(s, s->start_us));
    if (in_submit) {
        /* write now (no callback can run from a write); the answer comes through the loop */
        struct h1conn *c = s->conn;

        if (!c->connecting && h1_send(s) != 0) {
            snprintf(s->errbuf, sizeof(s->errbuf), "%s", "sending the request failed");
            if (c->reused && !s->retried) {
                /* a dead kept-alive connection: once more on a new one */
                s->retried = 1;
                conn_release(up, s, 0);
                if (h1_attach(up, idx, 1) == 0) {
                    if (!s->conn->connecting && h1_send(s) != 0)
                        h1_fail_later(up, idx, TG_EIO);
                    return;
                }
            }
            h1_fail_later(up, idx, TG_EIO);
        }
        return;
    }
    h1_progress(up, idx);
}

/* Finish a transfer: report to the owner, then free the slot. Loop thread. */
static void slot_finish(struct rt_upstream *up, uint32_t idx, CURLcode rc, int cancelled)
{
    struct slot *s = &up->slots[idx];
    struct rt_upstream_result res;

    memset(&res, 0, sizeof(res));
    res.retry_after_s = s->retry_after_s;
    res.ttfb_us = s->ttfb_us;
    if (s->native) {
        timer_disarm(up, idx);
        conn_release(up, s, 0); /* still attached: cancelled mid-transfer */
        res.status = s->status;
    } else {
        timer_disarm(up, idx);
        if (s->state == SLOT_ACTIVE)
            curl_multi_remove_handle(up->multi, s->easy);
        curl_easy_getinfo(s->easy, CURLINFO_RESPONSE_CODE, &res.status);
    }
    if (cancelled) {
        res.err = TG_ECLOSED;
        atomic_fetch_add(&up->st_cancelled, 1);
        snprintf(res.detail, sizeof(res.detail), "cancelled");
    } else if (s->too_big) {
        res.err = TG_ETOOBIG;
        atomic_fetch_add(&up->st_too_big, 1);
        snprintf(res.detail, sizeof(res.detail), "response larger than %zu bytes", s->resp_cap);
    } else if (rc == CURLE_OPERATION_TIMEDOUT) {
        res.err = TG_ETIMEOUT;
        atomic_fetch_add(&up->st_timeouts, 1);
        snprintf(res.detail, sizeof(res.detail), "upstream timed out");
    } else if (rc != CURLE_OK) {
        res.err = TG_EIO;
        /* curl's text (or ours) names hosts and reasons, never credentials */
        snprintf(res.detail, sizeof(res.detail), "%.127s",
                 s->native ? s->errbuf : curl_easy_strerror(rc));
    }
    res.body = s->resp;
    res.body_len = s->resp_len;
    s->resp = NULL;
    atomic_fetch_add(&up->st_completed, 1);
    s->ops->on_done(s->ud, &res);
    free(res.body);
    /* no curl_easy_reset: submit sets every option a transfer uses, and a reset would cost a
     * few KB of memset per request */
    slot_release(up, idx);
}

/* A libcurl stream keeps the built-in client's clock too: first byte within timeout_ms, then
 * no gap longer than idle_ms (paused time excluded). curl's own low-speed limit averages over
 * seconds and ends a stalled stream 5-6 s late; it stays only as a backstop. Loop thread. */
static void curl_timer(struct rt_upstream *up, uint32_t idx)
{
    struct slot *s = &up->slots[idx];

    if (s->stream)
        timer_arm(up, idx, h1_deadline(s, tg_now_mono_us()));
}

static void slot_start(struct rt_upstream *up, uint32_t idx)
{
    struct slot *s = &up->slots[idx];

    if (s->native) {
        h1_start(up, idx, 0);
        return;
    }
    if (curl_multi_add_handle(up->multi, s->easy) != CURLM_OK) {
        s->state = SLOT_QUEUED;
        slot_finish(up, idx, CURLE_FAILED_INIT, 0);
        return;
    }
    s->state = SLOT_ACTIVE;
    curl_timer(up, idx);
}

static void loop_commands(struct rt_upstream *up)
{
    size_t n = 0;

    pthread_mutex_lock(&up->lock);
    while (up->ring_len > 0) {
        uint32_t idx = up->ring[up->ring_head];

        up->ring_head = (up->ring_head + 1) % up->cap;
        up->ring_len--;
        up->slots[idx].queued = 0;
        up->batch[n] = idx;
        up->batch_cmds[n] = up->slots[idx].cmds;
        up->slots[idx].cmds = 0;
        n++;
    }
    pthread_mutex_unlock(&up->lock);
    for (size_t i = 0; i < n; i++) {
        uint32_t idx = up->batch[i];
        unsigned cmds = up->batch_cmds[i];
        struct slot *s = &up->slots[idx];

        if ((cmds & CMD_SUBMIT) && !(cmds & CMD_CANCEL) && s->state == SLOT_QUEUED)
            slot_start(up, idx);
        if (cmds & CMD_CANCEL) {
            if (s->state != SLOT_FREE)
                slot_finish(up, idx, CURLE_ABORTED_BY_CALLBACK, 1);
            continue;
        }
        if ((cmds & CMD_UNPAUSE) && s->state == SLOT_ACTIVE) {
            if (s->native)
                h1_unpause(up, idx);
            else
                curl_unpause(s);
        }
    }
}

static void drain_done(struct rt_upstream *up)
{
    CURLMsg *msg;
    int left;

    while ((msg = curl_multi_info_read(up->multi, &left)) != NULL) {
        struct slot *s = NULL;

        if (msg->msg != CURLMSG_DONE)
            continue;
        curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&s);
        if (s == NULL)
            continue;
        slot_finish(up, (uint32_t)(s - up->slots), msg->data.result, 0);
    }
}

/* Sockets for curl: created here so that the fd table knows which descriptors it may keep
 * registered (curl's resolver pipes are closed behind our back and never enter the table). */
static curl_socket_t opensocket_cb(void *clientp, curlsocktype purpose,
                                   struct curl_sockaddr *addr)
{
    struct rt_upstream *up = clientp;
    curl_socket_t fd;

    (void)purpose;
    fd = socket(addr->family, addr->socktype | SOCK_CLOEXEC, addr->protocol);
    if (fd < 0)
        return CURL_SOCKET_BAD;
    if (fd < RT_UPSTREAM_FD_TABLE)
        up->fds[fd] = FD_OURS;
    return fd;
}

static int closesocket_cb(void *clientp, curl_socket_t fd)
{
    struct rt_upstream *up = clientp;

    if (fd >= 0 && fd < RT_UPSTREAM_FD_TABLE) {
        if (up->fds[fd] & FD_IN_EPOLL)
            epoll_ctl(up->epfd, EPOLL_CTL_DEL, fd, NULL);
        up->fds[fd] = 0;
    }
    return close(fd);
}

/* socket_cb for a socket of ours: the registration stays when curl stops watching (a kept-alive
 * connection is watched again by the next transfer with the same events, so a request costs no
 * epoll_ctl), and changes only when the events differ. */
static void socket_kept(struct rt_upstream *up, curl_socket_t fd, int what)
{
    unsigned char st = up->fds[fd];
    unsigned char want = 0;
    struct epoll_event ev;

    if (what == CURL_POLL_REMOVE) {
        up->fds[fd] = (unsigned char)(st & ~FD_WATCHED);
        return;
    }
    if (what == CURL_POLL_IN || what == CURL_POLL_INOUT)
        want |= FD_EV_IN;
    if (what == CURL_POLL_OUT || what == CURL_POLL_INOUT)
        want |= FD_EV_OUT;
    memset(&ev, 0, sizeof(ev));
    ev.data.fd = fd;
    ev.events = ((want & FD_EV_IN) ? EPOLLIN : 0u) | ((want & FD_EV_OUT) ? EPOLLOUT : 0u);
    if (!(st & FD_IN_EPOLL)) {
        if (epoll_ctl(up->epfd, EPOLL_CTL_ADD, fd, &ev) != 0 && errno == EEXIST)
            epoll_ctl(up->epfd, EPOLL_CTL_MOD, fd, &ev);
    } else if ((st & (FD_EV_IN | FD_EV_OUT)) != want) {
        if (epoll_ctl(up->epfd, EPOLL_CTL_MOD, fd, &ev) != 0 && errno == ENOENT)
            epoll_ctl(up->epfd, EPOLL_CTL_ADD, fd, &ev);
    }
    up->fds[fd] = (unsigned char)(FD_OURS | FD_IN_EPOLL | FD_WATCHED | want);
}

/* An event on a socket of ours that curl does not watch (an idle kept-alive connection the
 * provider closed, or a late byte): drop the registration, or a level-triggered event would
 * wake the loop forever. curl finds the connection dead when it next picks it. */
static int socket_unwatched(struct rt_upstream *up, int fd)
{
    if (fd < 0 || fd >= RT_UPSTREAM_FD_TABLE || !(up->fds[fd] & FD_OURS) ||
        (up->fds[fd] & FD_WATCHED))
        return 0;
    epoll_ctl(up->epfd, EPOLL_CTL_DEL, fd, NULL);
    up->fds[fd] = FD_OURS;
    return 1;
}

/* curl tells which sockets to watch: mirror it into the epoll set. Loop thread. */
static int socket_cb(CURL *easy, curl_socket_t fd, int what, void *userp, void *socketp)
{
    struct rt_upstream *up = userp;
    struct epoll_event ev;

    (void)easy;
    if (fd >= 0 && fd < RT_UPSTREAM_FD_TABLE && (up->fds[fd] & FD_OURS)) {
        socket_kept(up, fd, what);
        curl_multi_assign(up->multi, fd, what == CURL_POLL_REMOVE ? NULL : up);
        return 0;
    }
    if (what == CURL_POLL_REMOVE) {
        epoll_ctl(up->epfd, EPOLL_CTL_DEL, fd, NULL);
        curl_multi_assign(up->multi, fd, NULL);
        return 0;
    }
    memset(&ev, 0, sizeof(ev));
    ev.data.fd = fd;
    if (what == CURL_POLL_IN || what == CURL_POLL_INOUT)
        ev.events |= EPOLLIN;
    if (what == CURL_POLL_OUT || what == CURL_POLL_INOUT)
        ev.events |= EPOLLOUT;
    if (socketp == NULL) {
        if (epoll_ctl(up->epfd, EPOLL_CTL_ADD, fd, &ev) != 0 && errno == EEXIST)
            epoll_ctl(up->epfd, EPOLL_CTL_MOD, fd, &ev);
        curl_multi_assign(up->multi, fd, up);
    } else {
        epoll_ctl(up->epfd, EPOLL_CTL_MOD, fd, &ev);
    }
    return 0;
}

/* curl's single timer, kept as a deadline in memory (no syscall per update): the loop turns it
 * into the epoll_wait timeout. timeout 0 means "call me now", -1 "no timer". Loop thread. */
static int timer_cb(CURLM *multi, long timeout_ms, void *userp)
{
    struct rt_upstream *up = userp;

    (void)multi;
    if (timeout_ms < 0)
        up->deadline_us = 0;
    else
        up->deadline_us = tg_now_mono_us() + (uint64_t)timeout_ms * 1000u;
    return 0;
}

/* epoll_wait timeout for the current curl deadline, at most 1 s. */
static int loop_timeout_ms(const struct rt_upstream *up)
{
    uint64_t now;
    uint64_t d = up->deadline_us;

    if (up->heap_len > 0 && (d == 0 || up->slots[up->heap[0]].deadline_us < d))
        d = up->slots[up->heap[0]].deadline_us;
    if (d == 0 && up->heap_len == 0)
        return 1000;
    now = tg_now_mono_us();
    if (d <= now)
        return 0;
    if (d - now >= 1000000u)
        return 1000;
    /* round up: waking early would only spin */
    return (int)((d - now + 999) / 1000);
}

/* Wake the loop for new commands. Coalesced: while a wakeup is pending and not yet taken by
 * the loop, further calls cost one atomic exchange instead of a write(2). */
static void wake(struct rt_upstream *up)
{
    uint64_t one = 1;
    ssize_t n;

    if (atomic_exchange(&up->wake_pending, 1))
        return;
    n = write(up->wakefd, &one, sizeof(one));
    (void)n; /* EAGAIN: the counter is already non-zero, the loop wakes anyway */
}

/* One turn of the event loop: wait up to timeout_ms (capped by curl's deadline), then serve
 * commands, socket events and curl's timer, and report finished transfers. Loop thread. */
static void loop_once(struct rt_upstream *up, int timeout_ms)
{
    struct epoll_event evs[RT_UPSTREAM_EVENTS_BATCH];
    int running = 0;
    int t = loop_timeout_ms(up);
    int n;

    if (timeout_ms < t)
        t = timeout_ms;
    n = epoll_wait(up->epfd, evs, RT_UPSTREAM_EVENTS_BATCH, t);
    for (int i = 0; i < n; i++) {
        int fd = evs[i].data.fd;

        if (evs[i].data.u64 & H1_TAG) {
            h1_event(up, (uint32_t)(evs[i].data.u64 & 0xffffffffu), evs[i].events);
        } else if (fd == up->wakefd) {
            uint64_t v;
            ssize_t r = read(up->wakefd, &v, sizeof(v));

            (void)r;
            /* cleared before draining: a command posted from now on wakes again */
            atomic_store(&up->wake_pending, 0);
            loop_commands(up);
        } else if (!socket_unwatched(up, fd)) {
            int mask = 0;

            if (evs[i].events & EPOLLIN)
                mask |= CURL_CSELECT_IN;
            if (evs[i].events & EPOLLOUT)
                mask |= CURL_CSELECT_OUT;
            if (evs[i].events & (EPOLLERR | EPOLLHUP))
                mask |= CURL_CSELECT_ERR;
            curl_multi_socket_action(up->multi, fd, mask, &running);
        }
    }
    /* curl's deadline passed (or it asked for an immediate call): bounded, since every call
     * either moves the deadline forward or clears it */
    for (int i = 0; i < RT_UPSTREAM_EVENTS_BATCH && up->deadline_us != 0 &&
                    up->deadline_us <= tg_now_mono_us();
         i++) {
        up->deadline_us = 0;
        curl_multi_socket_action(up->multi, CURL_SOCKET_TIMEOUT, 0, &running);
    }
    h1_timers(up);
    drain_done(up);
}

/* Every transfer still owned gets its on_done (shutdown). Loop thread. */
static void loop_finish_all(struct rt_upstream *up)
{
    loop_commands(up);
    for (size_t i = 0; i < up->cap; i++) {
        if (up->slots[i].state != SLOT_FREE)
            slot_finish(up, (uint32_t)i, CURLE_ABORTED_BY_CALLBACK, 1);
    }
}

/* 1 when the caller is the embedded loop's owner thread and not inside a curl call, so a
 * command can run at once instead of going through the queue. */
static int on_owner_thread(struct rt_upstream *up)
{
    return up->embedded && atomic_load_explicit(&up->owner_set, memory_order_acquire) &&
           pthread_equal(pthread_self(), up->owner) && !up->in_curl;
}

static void *loop_main(void *arg)
{
    struct rt_upstream *up = arg;

    while (!atomic_load(&up->stop))
        loop_once(up, 1000);
    loop_finish_all(up);
    return NULL;
}

int rt_upstream_fd(const struct rt_upstream *up)
{
    return up->epfd;
}

int rt_upstream_timeout_ms(const struct rt_upstream *up)
{
    return loop_timeout_ms(up);
}

void rt_upstream_run(struct rt_upstream *up)
{
    if (!atomic_load_explicit(&up->owner_set, memory_order_relaxed)) {
        up->owner = pthread_self();
        atomic_store_explicit(&up->owner_set, 1, memory_order_release);
    }
    up->in_curl = 1;
    loop_once(up, 0);
    up->in_curl = 0;
}

struct rt_upstream *rt_upstream_create(const struct rt_upstream_config *cfg, char *err,
                                       size_t errlen)
{
    struct rt_upstream *up = NULL;

    if (cfg->max_transfers == 0 || cfg->max_host_connections <= 0 ||
        cfg->max_total_connections <= 0) {
        snprintf(err, errlen, "upstream: capacities must be > 0");
        return NULL;
    }
    up = calloc(1, sizeof(*up));
    if (up == NULL)
        goto nomem;
    up->epfd = up->wakefd = -1;
    pthread_mutex_init(&up->lock, NULL);
    up->cap = cfg->max_transfers;
    up->slots = calloc(up->cap, sizeof(*up->slots));
    up->free_stack = calloc(up->cap, sizeof(*up->free_stack));
    up->ring = calloc(up->cap, sizeof(*up->ring));
    up->batch = calloc(up->cap, sizeof(*up->batch));
    up->batch_cmds = calloc(up->cap, sizeof(*up->batch_cmds));
    up->fds = calloc(RT_UPSTREAM_FD_TABLE, 1);
    if (up->slots == NULL || up->free_stack == NULL || up->ring == NULL || up->batch == NULL ||
        up->batch_cmds == NULL || up->fds == NULL)
        goto nomem;
    /* easy handles are made on a slot's first use: a slot table sized for the worst case
     * costs its handles only up to the concurrency actually reached */
    for (size_t i = 0; i < up->cap; i++)
        up->free_stack[up->free_len++] = (uint32_t)(up->cap - 1 - i);
    up->multi = curl_multi_init();
    if (up->multi == NULL)
        goto nomem;
    curl_multi_setopt(up->multi, CURLMOPT_MAX_HOST_CONNECTIONS, cfg->max_host_connections);
    curl_multi_setopt(up->multi, CURLMOPT_MAX_TOTAL_CONNECTIONS, cfg->max_total_connections);
    curl_multi_setopt(up->multi, CURLMOPT_MAXCONNECTS, cfg->max_host_connections);
    curl_multi_setopt(up->multi, CURLMOPT_PIPELINING, (long)CURLPIPE_MULTIPLEX);
    curl_multi_setopt(up->multi, CURLMOPT_SOCKETFUNCTION, socket_cb);
    curl_multi_setopt(up->multi, CURLMOPT_SOCKETDATA, up);
    curl_multi_setopt(up->multi, CURLMOPT_TIMERFUNCTION, timer_cb);
    curl_multi_setopt(up->multi, CURLMOPT_TIMERDATA, up);
    up->epfd = epoll_create1(EPOLL_CLOEXEC);
    up->wakefd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (up->epfd < 0 || up->wakefd < 0) {
        snprintf(err, errlen, "upstream: cannot create the event loop descriptors");
        rt_upstream_destroy(&up);
        return NULL;
    }
    {
        struct epoll_event ev;

        memset(&ev, 0, sizeof(ev));
        ev.events = EPOLLIN;
        ev.data.fd = up->wakefd;
        epoll_ctl(up->epfd, EPOLL_CTL_ADD, up->wakefd, &ev);
    }
    /* a proxy from the environment applies to every plain-http provider: curl honours it */
    up->native = cfg->native && getenv("http_proxy") == NULL && getenv("HTTP_PROXY") == NULL &&
                 getenv("all_proxy") == NULL && getenv("ALL_PROXY") == NULL;
    up->max_conns = cfg->max_total_connections;
    up->max_idle_per_origin = cfg->max_host_connections;
    up->origins = calloc(H1_ORIGINS_MAX, sizeof(*up->origins));
    up->conns = calloc((size_t)up->max_conns, sizeof(*up->conns));
    up->conn_free = calloc((size_t)up->max_conns, sizeof(*up->conn_free));
    up->heap = calloc(up->cap, sizeof(*up->heap));
    up->rbuf = malloc(H1_RECV_BYTES);
    if (up->origins == NULL || up->conns == NULL || up->conn_free == NULL || up->heap == NULL ||
        up->rbuf == NULL)
        goto nomem;
    for (long i = 0; i < up->max_conns; i++)
        up->conn_free[up->conn_free_len++] = (uint32_t)(up->max_conns - 1 - i);
    for (size_t i = 0; i < up->cap; i++)
        up->slots[i].heap_pos = H1_NO_HEAP;
    up->embedded = cfg->embedded;
    if (up->embedded)
        return up;
    if (pthread_create(&up->thread, NULL, loop_main, up) != 0) {
        snprintf(err, errlen, "upstream: cannot start the event-loop thread");
        rt_upstream_destroy(&up);
        return NULL;
    }
    up->thread_started = 1;
    return up;
nomem:
    snprintf(err, errlen, "upstream: out of memory");
    rt_upstream_destroy(&up);
    return NULL;
}

void rt_upstream_destroy(struct rt_upstream **upp)
{
    struct rt_upstream *up;

    if (upp == NULL || *upp == NULL)
        return;
    up = *upp;
    *upp = NULL;
    if (up->thread_started) {
        atomic_store(&up->stop, 1);
        wake(up);
        pthread_join(up->thread, NULL);
    } else if (up->embedded && up->slots != NULL && up->multi != NULL) {
        loop_finish_all(up);
    }
    if (up->slots != NULL) {
        for (size_t i = 0; i < up->cap; i++) {
            if (up->slots[i].easy != NULL)
                curl_easy_cleanup(up->slots[i].easy);
            curl_slist_free_all(up->slots[i].hdrs);
        }
    }
    if (up->multi != NULL)
        curl_multi_cleanup(up->multi);
    if (up->conns != NULL) {
        for (long i = 0; i < up->max_conns; i++) {
            if (up->conns[i] != NULL)
                conn_close(up, up->conns[i]);
        }
    }
    free(up->conns);
    free(up->conn_free);
    free(up->origins);
    free(up->heap);
    free(up->rbuf);
    if (up->epfd >= 0)
        close(up->epfd);
    if (up->wakefd >= 0)
        close(up->wakefd);
    free(up->batch_cmds);
    free(up->fds);
    free(up->batch);
    free(up->ring);
    free(up->free_stack);
    free(up->slots);
    pthread_mutex_destroy(&up->lock);
    free(up);
}

/* slot_begin: the fields every transfer starts with, whichever client carries it; takes
 * req->body. The slot is the submitter's alone until its CMD_SUBMIT is posted. */
static void slot_begin(struct slot *s, struct rt_upstream_request *req,
                       const struct rt_upstream_ops *ops, void *ud)
{
    s->state = SLOT_QUEUED;
    s->req_body = req->body;
    req->body = NULL;
    s->ops = ops;
    s->ud = ud;
    s->stream = req->stream;
    s->resp_cap = req->stream ? RT_UPSTREAM_ERROR_BODY_MAX_BYTES : req->max_response_bytes;
    s->too_big = 0;
    s->retry_after_s = -1;
    s->ttfb_us = 0;
    s->paused = 0;
    /* the largest on_data delivery, on either client (libcurl's are cut to it: curl_deliver) */
    s->recv_max = req->recv_buffer_bytes > 0 ? (size_t)req->recv_buffer_bytes : 0;
    /* the module's clock (native transfers; libcurl streams, see curl_timer) */
    if (req->stream) {
        s->timeout_ms = req->timeout_ms > 0 ? req->timeout_ms : 30000L;
        s->idle_ms = req->idle_timeout_ms > 0 ? req->idle_timeout_ms : s->timeout_ms;
    } else {
        s->timeout_ms = req->timeout_ms > 0 ? req->timeout_ms : 600000L;
        s->idle_ms = s->timeout_ms;
    }
    s->start_us = s->last_byte_us = tg_now_mono_us();
    s->errbuf[0] = '\0';
}

/* slot_give_back: a submit that failed after slot_begin: the body is freed, the slot free
 * again (its generation unchanged: no handle was given out). */
static void slot_give_back(struct rt_upstream *up, uint32_t idx)
{
    struct slot *s = &up->slots[idx];

    free(s->req_body);
    s->req_body = NULL;
    s->state = SLOT_FREE;
    s->ops = NULL;
    s->ud = NULL;
    pthread_mutex_lock(&up->lock);
    up->free_stack[up->free_len++] = idx;
    pthread_mutex_unlock(&up->lock);
}

/* submit for a native transfer: slot idx is taken (generation gen). */
static int h1_submit(struct rt_upstream *up, uint32_t idx, uint32_t gen, uint32_t oi,
                     const char *path, const char *hostport, struct rt_upstream_request *req,
                     const struct rt_upstream_ops *ops, void *ud, uint64_t *handle)
{
    struct slot *s = &up->slots[idx];

    slot_begin(s, req, ops, ud);
    s->body_len = s->req_body != NULL ? req->body_len : 0;
    if (h1_prepare(s, req, path, hostport) != 0) {
        slot_give_back(up, idx);
        return TG_ENOMEM;
    }
    s->native = 1;
    atomic_fetch_add(&up->st_native, 1);
    s->origin = oi;
    s->status = 0;
    s->retried = 0;
    s->fail_err = 0;
    s->conn = NULL;
    s->sent = 0;
    atomic_fetch_add(&up->st_submitted, 1);
    atomic_fetch_add(&up->st_active, 1);
    *handle = handle_make(idx, gen);
    pthread_mutex_lock(&up->lock);
    s->submitted = 1;
    if (!on_owner_thread(up)) {
        cmd_post_locked(up, idx, CMD_SUBMIT);
        pthread_mutex_unlock(&up->lock);
        wake(up);
        return 0;
    }
    pthread_mutex_unlock(&up->lock);
    /* embedded, on the loop's own thread and outside it: connect and write now; every
     * callback comes from the loop's next turns */
    h1_start(up, idx, 1);
    return 0;
}

int rt_upstream_submit(struct rt_upstream *up, struct rt_upstream_request *req,
                       const struct rt_upstream_ops *ops, void *ud, uint64_t *handle)
{
    struct slot *s;
    uint32_t idx;
    uint32_t gen;
    struct curl_slist *hdrs = NULL;
    long idle_s;

    if (req->url == NULL || ops == NULL || ops->on_done == NULL || req->max_response_bytes == 0) {
        free(req->body);
        req->body = NULL;
        return TG_EINVAL;
    }
    pthread_mutex_lock(&up->lock);
    if (up->closed) {
        pthread_mutex_unlock(&up->lock);
        free(req->body);
        req->body = NULL;
        return TG_ECLOSED;
    }
    if (up->free_len == 0) {
        pthread_mutex_unlock(&up->lock);
        atomic_fetch_add(&up->st_full, 1);
        free(req->body);
        req->body = NULL;
        return TG_EFULL;
    }
    idx = up->free_stack[--up->free_len];
    gen = up->slots[idx].gen;
    pthread_mutex_unlock(&up->lock);

    /* the slot is ours alone until CMD_SUBMIT is posted */
    s = &up->slots[idx];
    if (up->native) {
        const char *path = NULL;
        char hostport[sizeof(up->origins[0].hostport)];
        int oi;

        pthread_mutex_lock(&up->lock); /* the origin table grows under it */
        oi = h1_origin_of(up, req->url, &path);
        if (oi >= 0)
            memcpy(hostport, up->origins[oi].hostport, sizeof(hostport));
        pthread_mutex_unlock(&up->lock);
        if (oi >= 0)
            return h1_submit(up, idx, gen, (uint32_t)oi, path, hostport, req, ops, ud, handle);
        if (oi == -2)
            atomic_fetch_add(&up->st_native_full, 1);
    }
    slot_begin(s, req, ops, ud);
    if (s->easy == NULL)
        s->easy = curl_easy_init();
    if (s->easy == NULL) {
        slot_give_back(up, idx);
        return TG_ENOMEM;
    }
    if (!slot_headers_same(s, req)) {
        int nreq = 0;
        int cut = 0;

        curl_slist_free_all(s->hdrs);
        s->hdrs = NULL;
        for (int i = 0; i < RT_UPSTREAM_HEADERS_MAX && req->headers[i] != NULL; i++) {
            struct curl_slist *n = curl_slist_append(hdrs, req->headers[i]);

            if (n == NULL) {
                cut = 1;
                break;
            }
            hdrs = n;
            nreq++;
        }
        {
            struct curl_slist *n = curl_slist_append(hdrs, "Content-Type: application/json");

            if (n != NULL)
                hdrs = n;
            else
                cut = 1;
            n = curl_slist_append(hdrs, "Expect:");
            if (n != NULL)
                hdrs = n;
            else
                cut = 1;
        }
        s->hdrs = hdrs;
        /* a list cut short by a failed append is never taken as matching */
        s->hdrs_n = cut ? -1 : nreq;
    }
    curl_easy_setopt(s->easy, CURLOPT_URL, req->url);
    curl_easy_setopt(s->easy, CURLOPT_PRIVATE, (char *)s);
    curl_easy_setopt(s->easy, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(s->easy, CURLOPT_OPENSOCKETFUNCTION, opensocket_cb);
    curl_easy_setopt(s->easy, CURLOPT_OPENSOCKETDATA, up);
    curl_easy_setopt(s->easy, CURLOPT_CLOSESOCKETFUNCTION, closesocket_cb);
    curl_easy_setopt(s->easy, CURLOPT_CLOSESOCKETDATA, up);
    curl_easy_setopt(s->easy, CURLOPT_HTTPHEADER, s->hdrs);
    curl_easy_setopt(s->easy, CURLOPT_POST, 1L);
    curl_easy_setopt(s->easy, CURLOPT_POSTFIELDS, s->req_body != NULL ? s->req_body : "");
    curl_easy_setopt(s->easy, CURLOPT_POSTFIELDSIZE_LARGE,
                     (curl_off_t)(s->req_body != NULL ? req->body_len : 0));
    curl_easy_setopt(s->easy, CURLOPT_WRITEFUNCTION, write_cb);
    curl_easy_setopt(s->easy, CURLOPT_WRITEDATA, s);
    curl_easy_setopt(s->easy, CURLOPT_HEADERFUNCTION, header_cb);
    curl_easy_setopt(s->easy, CURLOPT_HEADERDATA, s);
    curl_easy_setopt(s->easy, CURLOPT_ERRORBUFFER, s->errbuf);
    curl_easy_setopt(s->easy, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_2TLS);
    curl_easy_setopt(s->easy, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(s->easy, CURLOPT_PROTOCOLS_STR, "http,https");
    if (ca_file[0] != '\0')
        curl_easy_setopt(s->easy, CURLOPT_CAINFO, ca_file);
    curl_easy_setopt(s->easy, CURLOPT_CONNECTTIMEOUT_MS,
                     req->timeout_ms > 0 ? req->timeout_ms : 30000L);
    curl_easy_setopt(s->easy, CURLOPT_BUFFERSIZE,
                     req->recv_buffer_bytes > 0 ? req->recv_buffer_bytes
                                                : (long)CURL_MAX_WRITE_SIZE);
    if (req->stream) {
        idle_s = (req->idle_timeout_ms > 0 ? req->idle_timeout_ms : req->timeout_ms) / 1000;
        if (idle_s < 1)
            idle_s = 1;
        curl_easy_setopt(s->easy, CURLOPT_TIMEOUT_MS, 0L);
        curl_easy_setopt(s->easy, CURLOPT_LOW_SPEED_LIMIT, 1L);
        curl_easy_setopt(s->easy, CURLOPT_LOW_SPEED_TIME, idle_s);
    } else {
        curl_easy_setopt(s->easy, CURLOPT_LOW_SPEED_LIMIT, 0L);
        curl_easy_setopt(s->easy, CURLOPT_LOW_SPEED_TIME, 0L);
        curl_easy_setopt(s->easy, CURLOPT_TIMEOUT_MS,
                         req->timeout_ms > 0 ? req->timeout_ms : 600000L);
    }

    atomic_fetch_add(&up->st_submitted, 1);
    atomic_fetch_add(&up->st_active, 1);
    *handle = handle_make(idx, gen);
    if (on_owner_thread(up)) {
        /* embedded, on the loop's own thread and outside curl: start it here, no queue */
        pthread_mutex_lock(&up->lock);
        s->submitted = 1;
        pthread_mutex_unlock(&up->lock);
        if (curl_multi_add_handle(up->multi, s->easy) == CURLM_OK) {
            s->state = SLOT_ACTIVE;
            curl_timer(up, idx);
        } else {
            /* on_done must not run inside submit (the caller may hold its own lock): the
             * failure is reported by the loop's next turn */
            pthread_mutex_lock(&up->lock);
            cmd_post_locked(up, idx, CMD_CANCEL);
            pthread_mutex_unlock(&up->lock);
            wake(up);
        }
        return 0;
    }
    pthread_mutex_lock(&up->lock);
    s->submitted = 1;
    cmd_post_locked(up, idx, CMD_SUBMIT);
    pthread_mutex_unlock(&up->lock);
    wake(up);
    return 0;
}

static void post_for_handle(struct rt_upstream *up, uint64_t handle, unsigned cmd)
{
    uint32_t idx = (uint32_t)(handle & 0xffffffffu);
    uint32_t gen = (uint32_t)(handle >> 32);
    int posted = 0;

    if (idx >= up->cap)
        return;
    if (on_owner_thread(up)) {
        /* embedded, on the loop's own thread and outside curl: only this thread frees slots,
         * so a matching generation stays valid while the command runs */
        struct slot *s = &up->slots[idx];
        int live;

        pthread_mutex_lock(&up->lock);
        live = s->gen == gen && s->submitted;
        pthread_mutex_unlock(&up->lock);
        if (!live)
            return;
        if (cmd == CMD_CANCEL && s->state != SLOT_FREE) {
            slot_finish(up, idx, CURLE_ABORTED_BY_CALLBACK, 1);
            return;
        }
        if (cmd == CMD_UNPAUSE && s->state == SLOT_ACTIVE && !s->native) {
            curl_unpause(s);
            return;
        }
        if (cmd != CMD_UNPAUSE || !s->native || s->state != SLOT_ACTIVE)
            return;
        /* a native unpause may finish the transfer: on_done must not run inside this call,
         * so it goes through the loop's next turn */
    }
    pthread_mutex_lock(&up->lock);
    if (up->slots[idx].gen == gen) {
        cmd_post_locked(up, idx, cmd);
        posted = 1;
    }
    pthread_mutex_unlock(&up->lock);
    if (posted)
        wake(up);
}

void rt_upstream_shutdown(struct rt_upstream *up)
{
    pthread_mutex_lock(&up->lock);
    up->closed = 1;
    for (size_t i = 0; i < up->cap; i++) {
        if (up->slots[i].submitted)
            cmd_post_locked(up, (uint32_t)i, CMD_CANCEL);
    }
    pthread_mutex_unlock(&up->lock);
    wake(up);
}

void rt_upstream_cancel(struct rt_upstream *up, uint64_t handle)
{
    post_for_handle(up, handle, CMD_CANCEL);
}

void rt_upstream_unpause(struct rt_upstream *up, uint64_t handle)
{
    post_for_handle(up, handle, CMD_UNPAUSE);
}

void rt_upstream_get_stats(const struct rt_upstream *up, struct rt_upstream_stats *out)
{
    struct rt_upstream *m = (struct rt_upstream *)up;

    out->submitted = atomic_load(&m->st_submitted);
    out->completed = atomic_load(&m->st_completed);
    out->cancelled = atomic_load(&m->st_cancelled);
    out->timeouts = atomic_load(&m->st_timeouts);
    out->full = atomic_load(&m->st_full);
    out->too_big = atomic_load(&m->st_too_big);
    out->active = atomic_load(&m->st_active);
    out->native = atomic_load(&m->st_native);
    out->native_full = atomic_load(&m->st_native_full);
}

int rt_upstream_global_init(void)
{
    const char *f = getenv("SSL_CERT_FILE");

    if (f != NULL && f[0] != '\0' && strlen(f) < sizeof(ca_file))
        memcpy(ca_file, f, strlen(f) + 1);
    return curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK ? 0 : TG_EIO;
}

void rt_upstream_global_fini(void)
{
    curl_global_cleanup();
}
